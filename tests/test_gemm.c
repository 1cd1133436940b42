/* test_gemm.c - the fixed-order matrix products of src/train/gemm.c.
 *
 * What gemm.h promises, checked: the AVX-512 tiles give the plain loops'
 * bits for every shape, transpose, stride, alpha and beta (not "close":
 * equal), so a product does not depend on the path or the tiling; and the
 * plain loops are a correct product, against a float64 reference within
 * the bound of K float roundings. */
#include "testutil.h"
#include "train/gemm.h"
#include "base/mem.h"
#include <math.h>

/* A small deterministic generator: values in [-1, 1) with every mantissa bit used. */
static float urand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) * 0x1p-23) - 1.0f;
}

typedef struct {
    int M, N, K, lda, ldb, ldc;
    GemmTrans ta, tb;
    float *A, *B, *C0;          /* C0: C's values before the product */
} Case;

static Case make_case(int M, int N, int K, GemmTrans ta, GemmTrans tb, uint64_t seed) {
    Case c = {M, N, K, 0, 0, N + 3, ta, tb, NULL, NULL, NULL};
    c.lda = (ta == GEMM_N ? K : M) + 1;   /* strides wider than the rows */
    c.ldb = (tb == GEMM_N ? N : K) + 2;
    size_t na = (size_t)(ta == GEMM_N ? M : K) * c.lda, nb = (size_t)(tb == GEMM_N ? K : N) * c.ldb;
    c.A = malloc((na + 1) * sizeof(float));
    c.B = malloc((nb + 1) * sizeof(float));
    c.C0 = malloc(((size_t)M * c.ldc + 1) * sizeof(float));
    assert_non_null(c.A);
    assert_non_null(c.B);
    assert_non_null(c.C0);
    for (size_t i = 0; i < na; i++) c.A[i] = urand(&seed);
    for (size_t i = 0; i < nb; i++) c.B[i] = urand(&seed);
    for (size_t i = 0; i < (size_t)M * c.ldc; i++) c.C0[i] = urand(&seed);
    return c;
}

static void free_case(Case *c) {
    free(c->A);
    free(c->B);
    free(c->C0);
}

/* C after the product on path isa, in a fresh copy of C0 (caller frees). */
static float *run(const Case *c, float alpha, float beta, OpsIsa isa) {
    size_t nc = (size_t)c->M * c->ldc;
    float *C = malloc((nc + 1) * sizeof(float));
    float *scratch = mem_alloc(gemm_scratch_floats(c->N, c->K) * sizeof(float));
    assert_non_null(C);
    assert_non_null(scratch);
    memcpy(C, c->C0, nc * sizeof(float));
    if (isa == OPS_PLAIN)
        gemm_ref(c->ta, c->tb, c->M, c->N, c->K, alpha, c->A, c->lda, c->B, c->ldb, beta, C, c->ldc);
    else
        gemm_isa(c->ta, c->tb, c->M, c->N, c->K, alpha, c->A, c->lda, c->B, c->ldb, beta, C, c->ldc,
                 scratch, isa);
    mem_free(scratch);
    return C;
}

static void fast_path_gives_the_plain_loops_bits_for_every_shape(void **state) {
    (void)state;
    if (ops_best_isa() != OPS_AVX512) {
        print_message("[  SKIP    ] no AVX-512 on this CPU: only the plain loops run\n");
        skip();
    }
    /* Shapes around the tile (12 x 32): one short, exact, one over, several tiles,
     * and K of 0, 1 and long enough to round many times. */
    const int Ms[] = {1, 11, 12, 13, 25, 40}, Ns[] = {1, 15, 16, 17, 32, 33, 70}, Ks[] = {0, 1, 7, 64, 300};
    const float ab[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {0.17677669f, 0.0f}, {-0.5f, 0.75f}};
    int cases = 0;
    uint64_t seed = 1;
    for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
        for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++)
            for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
                for (int t = 0; t < 4; t++) {
                    Case c = make_case(Ms[mi], Ns[ni], Ks[ki], (GemmTrans)(t & 1), (GemmTrans)(t >> 1), seed++);
                    const float *s = ab[cases % 4];
                    float *want = run(&c, s[0], s[1], OPS_PLAIN), *got = run(&c, s[0], s[1], OPS_AVX512);
                    for (int i = 0; i < c.M; i++)
                        if (memcmp(want + (size_t)i * c.ldc, got + (size_t)i * c.ldc, (size_t)c.ldc * sizeof(float))) {
                            print_error("M %d N %d K %d ta %d tb %d alpha %g beta %g: row %d differs\n", c.M,
                                        c.N, c.K, c.ta, c.tb, s[0], s[1], i);
                            fail();
                        }
                    free(want);
                    free(got);
                    free_case(&c);
                    cases++;
                }
    print_message("%d products, every one bit for bit\n", cases);
}

static void plain_loops_are_the_product_within_k_roundings(void **state) {
    (void)state;
    for (int t = 0; t < 4; t++) {
        Case c = make_case(19, 37, 513, (GemmTrans)(t & 1), (GemmTrans)(t >> 1), 100 + t);
        float alpha = 0.5f, beta = 1.0f;
        float *got = run(&c, alpha, beta, OPS_PLAIN);
        double worst = 0.0;
        for (int i = 0; i < c.M; i++)
            for (int j = 0; j < c.N; j++) {
                double sum = 0.0, mag = 0.0;
                for (int k = 0; k < c.K; k++) {
                    double a = c.ta == GEMM_N ? c.A[(size_t)i * c.lda + k] : c.A[(size_t)k * c.lda + i];
                    double b = c.tb == GEMM_N ? c.B[(size_t)k * c.ldb + j] : c.B[(size_t)j * c.ldb + k];
                    sum += a * b;
                    mag += fabs(a * b);
                }
                double c0 = c.C0[(size_t)i * c.ldc + j], want = alpha * sum + beta * c0;
                /* K roundings of the running sum, one more for alpha and beta */
                double bound = (c.K + 2) * 0x1p-24 * (alpha * mag + fabs(c0)) + 1e-30;
                double err = fabs(got[(size_t)i * c.ldc + j] - want) / bound;
                if (err > worst) worst = err;
                if (err > 1.0) {
                    print_error("(%d, %d): %.9g, float64 says %.9g\n", i, j, got[(size_t)i * c.ldc + j], want);
                    fail();
                }
            }
        print_message("ta %d tb %d: worst error %.3f of the bound\n", c.ta, c.tb, worst);
        free(got);
        free_case(&c);
    }
}

/* beta == 0: C's old values are never read, so NaN there stays out of the result. */
static void beta_zero_never_reads_c(void **state) {
    (void)state;
    Case c = make_case(13, 33, 5, GEMM_N, GEMM_T, 7);
    for (size_t i = 0; i < (size_t)c.M * c.ldc; i++) c.C0[i] = NAN;
    for (int path = 0; path < 2; path++) {
        OpsIsa isa = path ? OPS_AVX512 : OPS_PLAIN;
        if (isa == OPS_AVX512 && ops_best_isa() != OPS_AVX512) continue;
        float *got = run(&c, 1.0f, 0.0f, isa);
        for (int i = 0; i < c.M; i++)
            for (int j = 0; j < c.N; j++) assert_false(isnan(got[(size_t)i * c.ldc + j]));
        /* columns past N (the stride's padding) are left as they were */
        for (int i = 0; i < c.M; i++) assert_true(isnan(got[(size_t)i * c.ldc + c.N]));
        free(got);
    }
    free_case(&c);
}

/* The result of one row does not depend on which other rows share its tile. */
static void a_row_alone_equals_the_same_row_in_a_tile(void **state) {
    (void)state;
    Case c = make_case(30, 45, 77, GEMM_T, GEMM_N, 9);
    float *whole = run(&c, 1.0f, 1.0f, OPS_BEST);
    float *scratch = mem_alloc(gemm_scratch_floats(c.N, c.K) * sizeof(float));
    assert_non_null(scratch);
    for (int i = 0; i < c.M; i++) {
        float row[45];
        memcpy(row, c.C0 + (size_t)i * c.ldc, sizeof row);
        /* op(A) transposed: row i of op(A) is column i of A, one column wide */
        gemm(GEMM_T, GEMM_N, 1, c.N, c.K, 1.0f, c.A + i, c.lda, c.B, c.ldb, 1.0f, row, c.N, scratch);
        assert_memory_equal(row, whole + (size_t)i * c.ldc, sizeof row);
    }
    mem_free(scratch);
    free(whole);
    free_case(&c);
}

int main(int argc, char **argv) {
    select_tests(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fast_path_gives_the_plain_loops_bits_for_every_shape),
        cmocka_unit_test(plain_loops_are_the_product_within_k_roundings),
        cmocka_unit_test(beta_zero_never_reads_c),
        cmocka_unit_test(a_row_alone_equals_the_same_row_in_a_tile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
