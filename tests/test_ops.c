/* test_ops.c - the numeric kernels against their references.
 *
 * Three kinds of check:
 *   - number formats: fp16 both ways over every half, rounding ties, Q8_0
 *     rounding of activations (it must match llama.cpp bit for bit);
 *   - matmul (every type, the generic and AVX-512 paths, T in {1, 2, 3, 6,
 *     7, 17, 64}, shapes that leave tails in every tile, and T on both sides
 *     of each change of path: 15/16 and 35/36 for the float types) against
 *     matmul_ref and against a plain loop in double precision, with error
 *     bounds derived below; Q8_0 on every path bit for bit against matmul_ref;
 *   - determinism: 1 and 2 threads, and prefill versus decode, give the same
 *     bits where the kernels promise it;
 *   - the choice of path: the plain path runs matmul_ref and nothing else
 *     (ops_stats), and names and LLM_ISA values parse or fail in one line.
 *
 * Error bounds. A float sum of K products computed in any order, each product
 * rounded at most once, has |computed - exact| <= gamma(K) * sum |w_k x_k|,
 * gamma(K) = K u / (1 - K u), u = 2^-24 (Higham, Accuracy and Stability of
 * Numerical Algorithms, section 3.1). Both matmul and matmul_ref are such
 * sums, so each is checked against the double-precision value with that bound
 * (K u < 0.001 here, so 1.01 K u covers gamma). For Q8_0 the integer sums are
 * exact; per block there is one rounding of d_w * d_x, one of the FMA, and
 * the additions: at most nb / 2 in a lane plus 4 to add 16 lanes, on every
 * path (they all add in the AVX-512 kernel's order). So (nb + 8) u times
 * sum_b |d_w d_x| sum_i |w_i x_i| bounds both. A wrong block, sign or tail
 * changes the result by about one block's share of that sum, orders of
 * magnitude above the bound. */
#include "testutil.h"
#include "kernels/ops.h"
#include "kernels/rows.h"   /* the activations' layout, for act_pack_on_avx2_... */
#include <float.h>
#include <math.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* ------------------------------------------------------------- helpers */

typedef struct { uint64_t s; } Rng;

static uint64_t rng_next(Rng *r) {   /* splitmix64 */
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float rng_uniform(Rng *r) {   /* in [-1, 1) */
    return (float)(rng_next(r) >> 40) * 0x1p-24f * 2.0f - 1.0f;
}

static float bits_to_float(uint32_t b) {
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static uint32_t float_to_bits(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

static void *make_small_weights(DType type, int N, int K, uint64_t seed);
static void check_small_matmul(DType type, int N, int K, int T, OpsIsa isa, uint64_t seed);

/* Random weights of a type. Q8_0 takes every byte value, -128 included (a
 * file may hold it even though our quantizer never writes it), and scales of
 * different sizes. */
static void *make_weights(DType type, int N, int K, uint64_t seed) {
    Rng r = {seed};
    size_t n = (size_t)N * K;
    if (dtype_is_small_quant(type)) return make_small_weights(type, N, K, seed);
    void *data = malloc(dtype_row_bytes(type, K) * (size_t)N);
    assert_non_null(data);
    if (type == DT_F32) {
        float *w = data;
        for (size_t i = 0; i < n; i++) w[i] = rng_uniform(&r);
    } else if (type == DT_F16) {
        uint16_t *w = data;
        for (size_t i = 0; i < n; i++) w[i] = fp32_to_fp16(rng_uniform(&r) * 4.0f);
    } else if (type == DT_BF16) {
        uint16_t *w = data;
        for (size_t i = 0; i < n; i++) w[i] = fp32_to_bf16(rng_uniform(&r) * 4.0f);
    } else {
        BlockQ8_0 *b = data;
        for (size_t i = 0; i < n / QK8_0; i++) {
            b[i].d = fp32_to_fp16(ldexpf(1.0f + rng_uniform(&r), -(int)(rng_next(&r) % 12)));
            for (int j = 0; j < QK8_0; j++) b[i].qs[j] = (int8_t)(uint8_t)rng_next(&r);
        }
    }
    return data;
}

/* Activations with rows of different scales and a few outliers, as real
 * hidden states have. */
static float *make_activations(int T, int K, uint64_t seed) {
    Rng r = {seed};
    float *x = malloc(sizeof(float) * (size_t)T * K);
    assert_non_null(x);
    for (int t = 0; t < T; t++) {
        float scale = ldexpf(1.0f, (int)(rng_next(&r) % 9) - 4);
        for (int k = 0; k < K; k++) {
            float v = rng_uniform(&r) * scale;
            if (rng_next(&r) % 97 == 0) v *= 30.0f;
            x[(size_t)t * K + k] = v;
        }
    }
    return x;
}

/* 1, having said so, where the CPU has no AVX2: the test is skipped. */
static int skipped_without_avx2(void) {
    OpsIsa got;
    Err e;
    if (ops_parse_isa("avx2", &got, &e) == ST_OK) return 0;
    print_message("skipped: this CPU has no AVX2\n");
    return 1;
}

/* matmul_isa with a scratch buffer of exactly the promised size, so that
 * AddressSanitizer reports any write past it. */
static void run_matmul(float *out, const float *x, const Mat *W, int T, OpsIsa isa) {
    size_t bytes = matmul_scratch_bytes(W->type, T, W->K);
    void *scratch = malloc(bytes ? bytes : 1);
    assert_non_null(scratch);
    matmul_isa(out, x, W, T, scratch, isa);
    free(scratch);
}

/* The exact out[t][n] in double precision, and the error budget for it. */
static void exact_dot(const Mat *W, int n, const float *xt, double *value, double *budget) {
    int K = W->K;
    double sum = 0.0, abs_sum = 0.0;
    if (W->type == DT_Q8_0) {
        const BlockQ8_0 *w = (const BlockQ8_0 *)((const uint8_t *)W->data + (size_t)n * dtype_row_bytes(DT_Q8_0, K));
        int nb = K / QK8_0;
        BlockQ8_0 *xq = malloc(sizeof(BlockQ8_0) * (size_t)nb);
        assert_non_null(xq);
        quantize_row_q8_0_ref(xq, xt, K);
        for (int b = 0; b < nb; b++) {
            double s = (double)fp16_to_fp32(w[b].d) * fp16_to_fp32(xq[b].d);
            long isum = 0, iabs = 0;
            for (int i = 0; i < QK8_0; i++) {
                isum += (long)w[b].qs[i] * xq[b].qs[i];
                iabs += labs((long)w[b].qs[i] * xq[b].qs[i]);
            }
            sum += s * (double)isum;
            abs_sum += fabs(s) * (double)iabs;
        }
        free(xq);
        *value = sum;
        *budget = (nb + 8) * 0x1p-24 * abs_sum + 1e-35;
        return;
    }
    float *wrow = malloc(sizeof(float) * (size_t)K);
    assert_non_null(wrow);
    dequantize_row(wrow, (const uint8_t *)W->data + (size_t)n * dtype_row_bytes(W->type, K), W->type, K);
    for (int k = 0; k < K; k++) {
        sum += (double)wrow[k] * xt[k];
        abs_sum += fabs((double)wrow[k] * xt[k]);
    }
    free(wrow);
    *value = sum;
    *budget = 1.01 * K * 0x1p-24 * abs_sum + 1e-35;
}

/* matmul_isa and matmul_ref on one problem, both within budget of exact. */
static void check_matmul(DType type, int N, int K, int T, OpsIsa isa, uint64_t seed) {
    Mat W = {.type = type, .N = N, .K = K, .data = make_weights(type, N, K, seed)};
    float *x = make_activations(T, K, seed + 1);
    float *got = malloc(sizeof(float) * (size_t)T * N), *ref = malloc(sizeof(float) * (size_t)T * N);
    assert_non_null(got);
    assert_non_null(ref);
    run_matmul(got, x, &W, T, isa);
    matmul_ref(ref, x, &W, T);
    for (int t = 0; t < T; t++) {
        for (int n = 0; n < N; n++) {
            double exact, budget;
            exact_dot(&W, n, x + (size_t)t * K, &exact, &budget);
            float g = got[(size_t)t * N + n], r = ref[(size_t)t * N + n];
            if (!(fabs(g - exact) <= budget && fabs(r - exact) <= budget)) {
                print_error("%s %s N=%d K=%d T=%d: out[%d][%d] fast %.9g ref %.9g exact %.9g budget %.3g\n",
                            dtype_name(type), ops_isa_name(isa), N, K, T, t, n, g, r, exact, budget);
                fail();
            }
        }
    }
    free(got), free(ref), free(x), free((void *)W.data);
}

/* 2, 3: only the 4 x 2 or 4 x 3 tile; 6, 7: a 4-token tile and one of them;
 * 17: F32 and F16 through the k-blocked tiles with a 1-token tail; 64: sgemm */
static const int TOKEN_COUNTS[] = {1, 2, 3, 6, 7, 17, 64};
static const int ROW_COUNTS[] = {1, 7, 33, 130};   /* 4-row tiles leave 1, 3, 1, 2; 16-row groups too */

static void check_type_everywhere(DType type, const int *Ks, int nK) {
    OpsIsa isas[4];
    int n_isas = cpu_isas(isas, 0);
    for (int i = 0; i < n_isas; i++)
        for (int k = 0; k < nK; k++)
            for (size_t n = 0; n < sizeof ROW_COUNTS / sizeof ROW_COUNTS[0]; n++)
                for (size_t t = 0; t < sizeof TOKEN_COUNTS / sizeof TOKEN_COUNTS[0]; t++)
                    check_matmul(type, ROW_COUNTS[n], Ks[k], TOKEN_COUNTS[t], isas[i],
                                 1000u * (unsigned)k + 10u * (unsigned)n + (unsigned)t);
}

/* ------------------------------------------------------------- fp16 */

static int half_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }

static void fp16_round_trips_all_65536_halves_and_keeps_nan_class(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = fp16_to_fp32((uint16_t)h);
        uint16_t back = fp32_to_fp16(f);
        if (half_is_nan((uint16_t)h)) {
            assert_true(isnan(f));
            assert_true(half_is_nan(back));
            assert_int_equal(back & 0x8000, h & 0x8000);   /* sign kept */
        } else {
            if (back != h) print_error("half 0x%04x -> %a -> 0x%04x\n", h, f, back);
            assert_int_equal(back, h);
        }
    }
}

static void fp16_widening_gives_the_documented_values(void **state) {
    (void)state;
    assert_true(fp16_to_fp32(0x3c00) == 1.0f);
    assert_true(fp16_to_fp32(0xc000) == -2.0f);
    assert_true(fp16_to_fp32(0x7bff) == 65504.0f);
    assert_true(fp16_to_fp32(0x0001) == 0x1p-24f);        /* smallest subnormal */
    assert_true(fp16_to_fp32(0x03ff) == 1023 * 0x1p-24f); /* largest subnormal */
    assert_true(fp16_to_fp32(0x0400) == 0x1p-14f);        /* smallest normal */
    assert_true(isinf(fp16_to_fp32(0xfc00)) && fp16_to_fp32(0xfc00) < 0);
    assert_int_equal(float_to_bits(fp16_to_fp32(0x8000)), 0x80000000u);   /* -0 */
}

static void branchless_fp16_widening_equals_the_reference_for_every_half(void **state) {
    (void)state;
    /* the vector loops' conversion against fp16_to_fp32, bit for bit: zeros,
     * subnormals, normals, infinities and NaN payloads of both signs */
    for (uint32_t h = 0; h < 65536; h++) {
        uint32_t want = float_to_bits(fp16_to_fp32((uint16_t)h));
        uint32_t got = float_to_bits(fp16_to_fp32_branchless((uint16_t)h));
        if (got != want) print_error("half 0x%04x: 0x%08x, want 0x%08x\n", h, got, want);
        assert_int_equal(got, want);
    }
}

static void fp32_to_fp16_rounds_ties_to_even(void **state) {
    (void)state;
    /* One half ulp at 1.0 is 2^-11: 1 + 2^-11 lies exactly between 0x3c00 and
     * 0x3c01 and goes to the even one; 1 + 3 * 2^-11 between 0x3c01 and 0x3c02. */
    assert_int_equal(fp32_to_fp16(1.0f + 0x1p-11f), 0x3c00);
    assert_int_equal(fp32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);
    assert_int_equal(fp32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);   /* just above */
    assert_int_equal(fp32_to_fp16(-(1.0f + 0x1p-11f)), 0xbc00);
    /* From 2048 to 4096 halves are 2 apart: 4095 lies between 4094 (mantissa
     * 1023, odd) and 4096 (0x6c00); 4093 between 4092 (1022, even) and 4094. */
    assert_int_equal(fp32_to_fp16(4095.0f), 0x6c00);
    assert_int_equal(fp32_to_fp16(4093.0f), 0x6bfe);
}

static void fp32_to_fp16_rounds_subnormals_ties_to_even(void **state) {
    (void)state;
    assert_int_equal(fp32_to_fp16(0x1p-25f), 0x0000);       /* half of the smallest: to 0 */
    assert_int_equal(fp32_to_fp16(0x1p-25f * 1.0001f), 0x0001);
    assert_int_equal(fp32_to_fp16(3 * 0x1p-25f), 0x0002);   /* 1.5 ulp: to 2 */
    assert_int_equal(fp32_to_fp16(5 * 0x1p-25f), 0x0002);   /* 2.5 ulp: to 2 */
    assert_int_equal(fp32_to_fp16(-3 * 0x1p-25f), 0x8002);
    assert_int_equal(fp32_to_fp16(1023.5f * 0x1p-24f), 0x0400);   /* up into the normals */
    assert_int_equal(fp32_to_fp16(1022.5f * 0x1p-24f), 0x03fe);
    assert_int_equal(fp32_to_fp16(0x1p-30f), 0x0000);
    assert_int_equal(fp32_to_fp16(FLT_MIN / 4), 0x0000);           /* float subnormal */
    assert_int_equal(fp32_to_fp16(-0.0f), 0x8000);
}

static void fp32_to_fp16_overflows_to_infinity_from_65520(void **state) {
    (void)state;
    assert_int_equal(fp32_to_fp16(65504.0f), 0x7bff);
    assert_int_equal(fp32_to_fp16(65519.996f), 0x7bff);   /* below the midpoint */
    assert_int_equal(fp32_to_fp16(65520.0f), 0x7c00);     /* the midpoint rounds to even: inf */
    assert_int_equal(fp32_to_fp16(-1e10f), 0xfc00);
    assert_int_equal(fp32_to_fp16(FLT_MAX), 0x7c00);
    assert_int_equal(fp32_to_fp16(INFINITY), 0x7c00);
    assert_true(half_is_nan(fp32_to_fp16(NAN)));
}

#if defined(__x86_64__)
/* The F16C instructions are an independent implementation of IEEE half
 * precision: compare every half, and millions of floats, weighted towards
 * the places where rounding decides. */
__attribute__((target("f16c"))) static void compare_one_with_f16c(uint32_t bits) {
    float f = bits_to_float(bits);
    uint16_t hw = _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT), sw = fp32_to_fp16(f);
    if (isnan(f)) {
        assert_true(half_is_nan(sw));
        return;
    }
    if (hw != sw) print_error("%a (0x%08x): f16c 0x%04x, ours 0x%04x\n", f, bits, hw, sw);
    assert_int_equal(hw, sw);
}

__attribute__((target("f16c"))) static void compare_with_f16c(void) {
    for (uint32_t h = 0; h < 65536; h++) {
        float hw = _cvtsh_ss((unsigned short)h), sw = fp16_to_fp32((uint16_t)h);
        assert_true(float_to_bits(hw) == float_to_bits(sw) || (isnan(hw) && isnan(sw)));
    }
    Rng r = {7};
    for (int i = 0; i < (1 << 22); i++) {
        uint32_t bits;
        if (i < (1 << 21)) {
            bits = (uint32_t)rng_next(&r);   /* anything, NaN and inf included */
        } else {
            /* the half-subnormal range 2^-26 .. 2^-14, where rounding is coarser */
            bits = 0x32800000u + (uint32_t)(rng_next(&r) % (0x38800000u - 0x32800000u));
            bits |= i & 1 ? 0x80000000u : 0u;
        }
        compare_one_with_f16c(bits);
    }
    /* float exponents 2^-25 .. 2^16, every top-10-bit mantissa, with the 13
     * bits a normal half drops just below, at, and just above the tie */
    const uint32_t low[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x1fff};
    for (uint32_t e = 102; e <= 143; e++)
        for (uint32_t m = 0; m < 1024; m++)
            for (int j = 0; j < 6; j++) {
                compare_one_with_f16c(e << 23 | m << 13 | low[j]);
                compare_one_with_f16c(0x80000000u | e << 23 | m << 13 | low[j]);
            }
}
#endif

static void fp16_conversions_agree_with_the_f16c_instructions(void **state) {
    (void)state;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("f16c")) {
        compare_with_f16c();
        return;
    }
#endif
    skip();
}

/* -------------------------------------------------------------- Q8_0 */

static void quantize_row_q8_0_of_zeros_is_all_zero(void **state) {
    (void)state;
    float x[64] = {0};
    x[5] = -0.0f;
    BlockQ8_0 q[2];
    memset(q, 0x55, sizeof q);
    quantize_row_q8_0(q, x, 64);
    for (int b = 0; b < 2; b++) {
        assert_int_equal(q[b].d, 0);
        for (int i = 0; i < QK8_0; i++) assert_int_equal(q[b].qs[i], 0);
    }
}

static void quantize_row_q8_0_rounds_ties_to_even(void **state) {
    (void)state;
    /* amax = 127 makes the multiplier exactly 1, so x * id = x: halves are ties. */
    float x[32];
    for (int i = 0; i < 32; i++) x[i] = (float)(i - 16) + 0.5f;   /* -15.5 .. 15.5 */
    x[31] = 127.0f;
    BlockQ8_0 q, r;
    quantize_row_q8_0(&q, x, 32);
    quantize_row_q8_0_ref(&r, x, 32);
    assert_int_equal(q.d, 0x3c00);   /* 127 / 127 = 1.0 */
    for (int i = 0; i < 31; i++) {
        float want = nearbyintf(x[i]);            /* the default mode: to even */
        assert_true(fabsf(want - x[i]) == 0.5f);
        assert_int_equal(q.qs[i], (int)want);
        assert_int_equal(((int)want) % 2, 0);     /* even, e.g. 2.5 -> 2, -3.5 -> -4 */
        assert_int_equal(r.qs[i], q.qs[i]);
    }
    assert_int_equal(q.qs[31], 127);
}

static void quantize_row_q8_0_keeps_extreme_values_in_range(void **state) {
    (void)state;
    float x[96];
    for (int i = 0; i < 32; i++) x[i] = i % 2 ? FLT_MAX : -FLT_MAX * (i / 32.0f);
    for (int i = 32; i < 64; i++) x[i] = (i % 3 - 1) * 1e-38f;   /* amax tiny: 127/amax is inf */
    for (int i = 64; i < 96; i++) x[i] = (i % 2 ? 1e6f : -1e6f) * (i - 63) / 32.0f;
    BlockQ8_0 q[3], r[3];
    quantize_row_q8_0(q, x, 96);
    quantize_row_q8_0_ref(r, x, 96);
    assert_memory_equal(q, r, sizeof q);
    /* FLT_MAX / 127 overflows half precision: the scale is +inf, values span +-127 */
    assert_int_equal(q[0].d, 0x7c00);
    assert_int_equal(q[0].qs[1], 127);
    assert_int_equal(q[0].qs[0], 0);
    /* a block too small for fp16: d = 0 and all values 0 (no inf * 0) */
    assert_int_equal(q[1].d, 0);
    for (int i = 0; i < 32; i++) assert_int_equal(q[1].qs[i], 0);
    /* 1e6 / 127 is representable: the largest magnitude maps to 127 */
    assert_int_equal(q[2].qs[31], 127);
    assert_int_equal(fp32_to_fp16(1e6f / 127.0f), q[2].d);
    for (int i = 0; i < 32; i++) assert_true(q[2].qs[i] >= -127 && q[2].qs[i] <= 127);
}

static void quantize_row_q8_0_fast_path_is_bit_identical_to_reference(void **state) {
    (void)state;
    enum { K = 4096 };
    float *x = make_activations(1, K, 99);
    /* some blocks of exact ties: amax 127 and half-integer values */
    for (int i = 0; i < 32; i++) x[64 + i] = (float)(i % 7) - 3.5f;
    x[64 + 5] = 127.0f;
    BlockQ8_0 q[K / QK8_0], r[K / QK8_0];
    for (int round = 0; round < 16; round++) {
        for (int i = 256; i < K; i++) x[i] = ldexpf(x[i], round % 2 ? 3 : -3);
        quantize_row_q8_0(q, x, K);
        quantize_row_q8_0_ref(r, x, K);
        assert_memory_equal(q, r, sizeof q);
    }
    free(x);
}

/* The activations' int8 layout (rows.h: values, the VNNI corrections, the
 * scales, Q4_0's offsets) written by AVX2 is act_pack_ref's, byte for byte,
 * over rows with exact ties, a NaN, an infinity, zeros and a block too small
 * to scale. */
static void act_pack_on_avx2_is_bit_identical_to_reference(void **state) {
    (void)state;
#ifdef OPS_X86
    if (skipped_without_avx2()) return;
    enum { T = 3, K = 1024 };
    float *x = make_activations(T, K, 98);
    for (int i = 0; i < 32; i++) x[64 + i] = (float)(i % 7) - 3.5f;   /* ties: amax 127 */
    x[64 + 5] = 127.0f;
    x[K + 7] = NAN, x[K + 100] = -INFINITY;
    for (int i = 0; i < 32; i++) x[2 * K + i] = 0.0f, x[2 * K + 32 + i] = (i % 3 - 1) * 1e-38f;
    size_t bytes = (size_t)T * act_stride(K);
    uint8_t *a = calloc(1, bytes), *b = calloc(1, bytes);
    assert_non_null(a);
    assert_non_null(b);
    act_pack_avx2(a, x, T, K);
    act_pack_ref(b, x, T, K);
    assert_memory_equal(a, b, bytes);
    free(a), free(b), free(x);
#else
    print_message("skipped: not an x86-64 build\n");
#endif
}

#if defined(__x86_64__)
/* quantize_row_q8_k on isa against the plain rounding (below); returns 1. */
static int quantize_q8_k_on(OpsIsa isa) {
    ops_set_isa(isa);
    enum { K = 16 * QK_K };
    float *x = make_activations(1, K, 98);
    for (int i = 0; i < QK_K; i++) x[QK_K + i] = (float)(i % 9) - 4.0f;   /* ties: scale -127 / 4 */
    x[QK_K + 3] = 4.0f, x[QK_K + 1] = -4.0f;                               /* the first of two maxima */
    x[2 * QK_K + 7] = NAN;
    x[3 * QK_K + 200] = INFINITY;
    for (int i = 0; i < QK_K; i++) x[4 * QK_K + i] = 0.0f;
    for (int i = 0; i < QK_K; i++) x[5 * QK_K + i] = 1e-39f * (float)(i % 3);
    BlockQ8_K q[K / QK_K], r[K / QK_K];
    for (int round = 0; round < 8; round++) {
        for (int i = 6 * QK_K; i < K; i++) x[i] = ldexpf(x[i], round % 2 ? 5 : -5);
        quantize_row_q8_k(q, x, K);
        quantize_row_q8_k_ref(r, x, K);
        for (int b = 0; b < K / QK_K; b++) {
            assert_memory_equal(q[b].qs, r[b].qs, sizeof q[b].qs);
            assert_memory_equal(q[b].bsums, r[b].bsums, sizeof q[b].bsums);
            assert_memory_equal(&q[b].d, &r[b].d, sizeof q[b].d);
        }
    }
    free(x);
    return 1;
}
#endif

/* The AVX-512 and AVX2 Q8_K rounding (quantize_row_q8_k on those paths,
 * each this CPU runs) against the plain one, bit for bit: values of many
 * sizes, exact ties (half-integer products), the largest magnitude twice
 * with both signs (the first one's sign is the scale's), a NaN, an
 * infinity, all zeros, and a block too small to scale. */
static void quantize_row_q8_k_fast_path_is_bit_identical_to_reference(void **state) {
    (void)state;
#if defined(__x86_64__)
    OpsIsa isas[4], saved = ops_isa();
    int n_isas = cpu_isas(isas, 0), ran = 0;
    for (int s = 0; s < n_isas; s++)
        if (isas[s] == OPS_AVX512 || isas[s] == OPS_AVX2) ran += quantize_q8_k_on(isas[s]);
    ops_set_isa(saved);
    if (!ran) print_message("skipped: this CPU has neither AVX-512 nor AVX2\n");
#else
    print_message("skipped: not x86-64\n");
#endif
}

/* ------------------------------------------------------------ matmul */

static void f32_matmul_matches_plain_reference(void **state) {
    (void)state;
    const int Ks[] = {32, 96, 200, 1000};   /* 1000 and 200 leave 8 in the last 16-wide step */
    check_type_everywhere(DT_F32, Ks, 4);
}

static void f16_matmul_matches_plain_reference(void **state) {
    (void)state;
    const int Ks[] = {32, 96, 200, 1000};
    check_type_everywhere(DT_F16, Ks, 4);
}

static void bf16_matmul_matches_plain_reference(void **state) {
    (void)state;
    const int Ks[] = {32, 96, 200, 1000};
    check_type_everywhere(DT_BF16, Ks, 4);
}

/* BF16 is the top half of a float: widening is exact, and rounding to it is
 * to nearest with ties to even, carrying into the exponent; NaN stays NaN. */
/* exp of NaN is NaN, reached without converting NaN to an integer (which
 * is undefined: fuzz_gguf found NaN weights reaching it through attention). */
static void ops_exp_of_nan_is_nan(void **state) {
    (void)state;
    assert_true(isnan(ops_exp(NAN)));
    assert_true(isnan(ops_exp(-NAN)));
    assert_true(ops_exp(0.0f) == 1.0f);
    float row[5] = {1.0f, NAN, 2.0f, 0.5f, -1.0f};
    softmax(row, 5);
    assert_true(isnan(row[0]) || isnan(row[2]));   /* the NaN spreads, it is not hidden */
}

static void bf16_widens_exactly_and_rounds_to_nearest_even(void **state) {
    (void)state;
    const struct { float f; uint16_t b; } cases[] = {
        {1.0f, 0x3f80}, {-2.0f, 0xc000}, {0.0f, 0x0000}, {-0.0f, 0x8000},
        {1.00390625f, 0x3f80},            /* 1 + 2^-8: a tie, to the even 1.0 */
        {1.01171875f, 0x3f82},            /* 1 + 3 * 2^-8: a tie, to the even 1 + 2^-6 */
        {1.0f + 0x1p-8f + 0x1p-20f, 0x3f81},   /* just above the tie: up */
        {0x1.fffffep127f, 0x7f80},        /* the largest float rounds to infinity */
        {INFINITY, 0x7f80}, {-INFINITY, 0xff80},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(fp32_to_bf16(cases[i].f), cases[i].b);
        if (isfinite(cases[i].f) && fabsf(cases[i].f) < 1e38f)
            assert_true(fabsf(bf16_to_fp32(cases[i].b) - cases[i].f) <= fabsf(cases[i].f) * 0x1p-8f);
    }
    assert_true(isnan(bf16_to_fp32(fp32_to_bf16(NAN))));
    for (uint32_t b = 0; b < 0x10000; b += 7) {   /* every finite BF16 round-trips */
        float f = bf16_to_fp32((uint16_t)b);
        if (isfinite(f)) assert_int_equal(fp32_to_bf16(f), b);
    }
}

static void q8_0_matmul_matches_plain_reference(void **state) {
    (void)state;
    const int Ks[] = {32, 96, 224, 1024};   /* 1, 3, 7, 32 blocks: odd counts leave a lone block */
    check_type_everywhere(DT_Q8_0, Ks, 4);
}

/* Where the float paths change (ops.c): the 4 x 4 tiles below 16 tokens, the
 * k-blocked tiles from 16, sgemm from 36 (48 on AVX2). K = 1000 is several k-blocks with
 * a short last one (K % 16 = 8); K = 1024 the same in whole steps of 16,
 * which AVX2 reads in place for F32; 130 rows are several chunks of rows
 * with a tail of 2 (N % 4 != 0); 35 tokens leave 3 over (T % 4 != 0). */
static void float_matmul_matches_reference_on_both_sides_of_each_path(void **state) {
    (void)state;
    DType types[] = {DT_F32, DT_F16, DT_BF16};
    const int Ts[] = {15, 16, 35, 36, 47, 48}, Ks[] = {200, 1000, 1024}, Ns[] = {7, 130};
    for (int i = 0; i < 3; i++)
        for (int t = 0; t < 6; t++)
            for (int k = 0; k < 3; k++)
                for (int n = 0; n < 2; n++)
                    if (Ks[k] != 1024 || types[i] == DT_F32)
                        check_matmul(types[i], Ns[n], Ks[k], Ts[t], ops_best_isa(), 100u + 10u * (unsigned)t + (unsigned)k);
}

static void matmul_matches_reference_at_model_widths(void **state) {
    (void)state;
    DType types[] = {DT_F32, DT_F16, DT_Q8_0, DT_BF16};
    for (int i = 0; i < 4; i++) {
        check_matmul(types[i], 37, 2048, 1, ops_best_isa(), 5);
        check_matmul(types[i], 21, 5632, 1, ops_best_isa(), 6);
        check_matmul(types[i], 37, 2048, 5, ops_best_isa(), 7);
    }
}

/* Every path rounds activations alike, multiplies integers exactly and adds
 * the float sums in the same order (ops.c: q8_0_block_into_lanes), so each
 * gives matmul_ref's bits: at every tile shape (T = 1, 2, 3, 7, 17), with an
 * odd number of blocks (a lone last block: 1, 7, 9) and an even one, and
 * with 1056 blocks, more than matmul_ref keeps rounded once per token (it
 * rounds them again for each row there). */
static void q8_0_every_path_gives_the_reference_bits(void **state) {
    (void)state;
    ops_set_amx(0);   /* T = 17 would take the AMX tiles: their own test, below */
    const int Ks[] = {32, 224, 288, 320, 33792}, Ts[] = {1, 2, 3, 7, 17};
    OpsIsa isas[4];
    int n_isas = cpu_isas(isas, 1);
    int N = 45;
    for (int k = 0; k < 5; k++) {
        for (int j = 0; j < 5; j++) {
            int K = Ks[k], T = Ts[j];
            Mat W = {.type = DT_Q8_0, .N = N, .K = K, .data = make_weights(DT_Q8_0, N, K, 11 + (unsigned)k)};
            float *x = make_activations(T, K, 12 + (unsigned)j);
            float got[17 * 45], ref[17 * 45];
            matmul_ref(ref, x, &W, T);
            for (int i = 0; i < n_isas; i++) {
                run_matmul(got, x, &W, T, isas[i]);
                if (memcmp(got, ref, sizeof(float) * (size_t)T * N) != 0) {
                    print_error("Q8_0 %s K=%d T=%d differs from matmul_ref\n", ops_isa_name(isas[i]), K, T);
                    fail();
                }
            }
            free(x), free((void *)W.data);
        }
    }
    ops_set_amx(-1);
}

/* On a CPU with AMX, Q8_0, Q4_0 and Q4_K from AMX_MIN_T (16) tokens run on
 * its tiles, which add the block sums in another order (tiles_amx.c): the
 * bits of matmul_blocks_ref, at 16 tokens and at groups with padding (17, 33,
 * 40), rows that are a multiple of 16 and rows that are not (the last tile
 * from N - 16), one block, an odd count, more than a chunk of 32 blocks, and
 * a long row; more than 8 groups of 16 tokens (a second pass: T = 130); and
 * with AMX off, matmul_ref's bits again. The path is also held to exact
 * arithmetic in double precision (check_matmul, check_small_matmul). */
static void check_amx(DType type, int N, int K, int T, uint64_t seed) {
    Mat W = {.type = type, .N = N, .K = K, .data = make_weights(type, N, K, seed)};
    float *x = make_activations(T, K, seed + 1);
    float *got = malloc(sizeof(float) * (size_t)T * N), *ref = malloc(sizeof(float) * (size_t)T * N);
    assert_non_null(got);
    assert_non_null(ref);
    matmul_blocks_ref(ref, x, &W, T);
    run_matmul(got, x, &W, T, OPS_AVX512);
    for (int e = 0; e < T * N; e++)
        if (float_to_bits(got[e]) != float_to_bits(ref[e])) {
            print_error("%s AMX N=%d K=%d T=%d out[%d][%d]: %.9g, the reference %.9g\n", dtype_name(type), N, K, T,
                        e / N, e % N, got[e], ref[e]);
            fail();
        }
    if (type == DT_Q8_0) {   /* off: the VNNI tiles, matmul_ref's bits */
        ops_set_amx(0);
        run_matmul(got, x, &W, T, OPS_AVX512);
        ops_set_amx(-1);
        matmul_ref(ref, x, &W, T);
        assert_memory_equal(got, ref, sizeof(float) * (size_t)T * N);
    }
    free(got), free(ref), free(x), free((void *)W.data);
}

static void q8_0_q4_0_and_q4_k_on_amx_tiles_give_the_blocks_reference_bits(void **state) {
    (void)state;
    if (!ops_amx()) {
        print_message("skipped: this CPU or system has no AMX tiles\n");
        return;
    }
    const DType types[] = {DT_Q8_0, DT_Q4_0, DT_Q4_K};
    /* blocks: 1, 7, 9, 65 (2 chunks and one over); super-blocks: 1, 3, 9 (2 chunks and one over) */
    const int Ks[3][4] = {{32, 224, 288, 2080}, {32, 224, 288, 2080}, {256, 768, 2304, 256}};
    const int Ts[] = {16, 17, 33, 40}, Ns[] = {16, 45, 70};
    for (int y = 0; y < 3; y++) {
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 4; j++)
                for (int i = 0; i < 3; i++)
                    check_amx(types[y], Ns[i], Ks[y][k], Ts[j], 51 + (unsigned)(k * 16 + j * 4 + i));
        check_amx(types[y], 16, 33792, 16, 7);   /* the reference rounds each row's blocks again */
        check_amx(types[y], 33, 256, 130, 8);
    }
    check_matmul(DT_Q8_0, 45, 288, 17, OPS_AVX512, 9);
    check_small_matmul(DT_Q4_0, 45, 288, 17, OPS_AVX512, 10);
    check_small_matmul(DT_Q4_K, 45, 768, 17, OPS_AVX512, 11);
}

/* Each (row, token) goes through the same instructions whatever the tile,
 * so several tokens processed at once give the bits of one token at a time.
 * That holds for Q8_0 at any T, and for F32 and F16 below 36 tokens (48 on
 * AVX2), where our tiles run instead of sgemm (batched decoding of a few
 * sequences), k-blocked from 16 tokens on. */
static void check_batch_equals_single_tokens_on(DType type, int N, int K, int T, OpsIsa isa) {
    Mat W = {.type = type, .N = N, .K = K, .data = make_weights(type, N, K, 21)};
    float *x = make_activations(T, K, 22);
    float *all = malloc(sizeof(float) * (size_t)T * N), *one = malloc(sizeof(float) * (size_t)N);
    assert_non_null(all);
    assert_non_null(one);
    run_matmul(all, x, &W, T, isa);
    for (int t = 0; t < T; t++) {
        run_matmul(one, x + (size_t)t * K, &W, 1, isa);
        if (memcmp(one, all + (size_t)t * N, sizeof(float) * (size_t)N) != 0) {
            print_error("%s %s: token %d of %d differs from the same token alone\n", dtype_name(type),
                        ops_isa_name(isa), t, T);
            fail();
        }
    }
    free(all), free(one), free(x), free((void *)W.data);
}

/* On the best path, and on AVX2 too where the best is AVX-512. */
static void check_batch_equals_single_tokens(DType type, int N, int K, int T) {
    check_batch_equals_single_tokens_on(type, N, K, T, ops_best_isa());
    if (ops_best_isa() == OPS_AVX512) check_batch_equals_single_tokens_on(type, N, K, T, OPS_AVX2);
}

static void q8_0_prefill_rows_equal_decode_rows_bitwise(void **state) {
    (void)state;
    check_batch_equals_single_tokens(DT_Q8_0, 70, 288, 15);
    ops_set_amx(0);   /* 17 tokens would take the AMX tiles, which add in another order */
    check_batch_equals_single_tokens(DT_Q8_0, 70, 288, 17);
    ops_set_amx(-1);
}

static void small_float_batches_equal_single_tokens_bitwise(void **state) {
    (void)state;
    check_batch_equals_single_tokens(DT_F32, 70, 200, 7);
    check_batch_equals_single_tokens(DT_F16, 70, 200, 7);
    /* k-blocked: K = 1000 in several blocks, a short last one; on AVX2 70
     * rows end in a group of one, 17 tokens in a group of one */
    check_batch_equals_single_tokens(DT_F32, 70, 1000, 17);
    check_batch_equals_single_tokens(DT_F32, 70, 1024, 17);   /* read in place on AVX2 */
    check_batch_equals_single_tokens(DT_F16, 70, 1000, 35);
    check_batch_equals_single_tokens(DT_BF16, 70, 1000, 16);
    /* the AVX2 tiles keep batches to 47 tokens from sgemm (ops.c,
     * SGEMM_MIN_T_AVX2), whose sums are in another order */
    if (skipped_without_avx2()) return;
    check_batch_equals_single_tokens_on(DT_F32, 70, 1024, 40, OPS_AVX2);
    check_batch_equals_single_tokens_on(DT_F16, 70, 1000, 47, OPS_AVX2);
    check_batch_equals_single_tokens_on(DT_BF16, 70, 520, 36, OPS_AVX2);
}

static void half_rows_of_one_token_give_the_same_bits_on_every_fast_path(void **state) {
    (void)state;
    /* F16 and BF16 at T = 1: the generic loop keeps the AVX-512 kernel's 16
     * lanes and adds them in its order, and so do the AVX2 tiles (two
     * registers of 8), so the paths agree bit for bit; K = 200 ends in a
     * short step, K = 2048 is a model's width */
    OpsIsa isas[4];
    int n_isas = cpu_isas(isas, 0);
    if (n_isas == 1) {
        print_message("skipped: this CPU has neither AVX2 nor AVX-512 to compare with\n");
        return;
    }
    DType types[] = {DT_F16, DT_BF16};
    int Ks[] = {200, 2048};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            int N = 70, K = Ks[j];
            Mat W = {.type = types[i], .N = N, .K = K, .data = make_weights(types[i], N, K, 41 + i)};
            float *x = make_activations(1, K, 42 + j), a[70], b[70];
            run_matmul(a, x, &W, 1, OPS_GENERIC);
            for (int s = 1; s < n_isas; s++) {
                run_matmul(b, x, &W, 1, isas[s]);
                for (int n = 0; n < N; n++) {
                    if (float_to_bits(a[n]) != float_to_bits(b[n]))
                        print_error("%s K=%d row %d: generic %.9g, %s %.9g\n", dtype_name(types[i]), K, n, a[n],
                                    ops_isa_name(isas[s]), b[n]);
                    assert_int_equal(float_to_bits(a[n]), float_to_bits(b[n]));
                }
            }
            free(x), free((void *)W.data);
        }
}

/* The AVX2 tiles add the same lanes in the same order as the AVX-512 ones:
 * F32, F16 and BF16 below 36 tokens give the same bits on both, at every tile
 * shape (T = 1, 2, 3, 7, 17) and with a short last step (K = 200). */
static void float_tiles_give_the_same_bits_on_avx2_and_avx512(void **state) {
    (void)state;
    if (ops_best_isa() != OPS_AVX512) {
        print_message("skipped: this CPU has no AVX-512 to compare with\n");
        return;
    }
    DType types[] = {DT_F32, DT_F16, DT_BF16};
    int Ts[] = {1, 2, 3, 7, 17};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 5; j++) {
            int N = 37, K = 200, T = Ts[j];
            Mat W = {.type = types[i], .N = N, .K = K, .data = make_weights(types[i], N, K, 51 + i)};
            float *x = make_activations(T, K, 52 + j), a[17 * 37], b[17 * 37];
            run_matmul(a, x, &W, T, OPS_AVX2);
            run_matmul(b, x, &W, T, OPS_AVX512);
            if (memcmp(a, b, sizeof(float) * (size_t)T * N) != 0) {
                print_error("%s T=%d: avx2 and avx512 differ\n", dtype_name(types[i]), T);
                fail();
            }
            free(x), free((void *)W.data);
        }
}

/* Q4_K and Q6_K on AVX2: the exact integer sums of each super-block, then the
 * generic path's float step in its order, so the generic path's bits, for
 * one and several super-blocks and tokens in one group of 8 and beyond it. */
/* One token, a tile of 3, and 8 + 3; K of one super-block, of three, and of
 * 513, past the table of the tokens' scales (QK_DXT_BLOCKS: the tile gathers
 * them itself). */
static void k_formats_on_avx2_give_the_generic_bits(void **state) {
    (void)state;
    if (skipped_without_avx2()) return;
    DType types[] = {DT_Q4_K, DT_Q6_K};
    int Ks[] = {256, 768, 513 * 256}, Ts[] = {1, 3, 11};
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 3; k++)
            for (int j = 0; j < 3; j++) {
                int N = 33, K = Ks[k], T = Ts[j];
                Mat W = {.type = types[i], .N = N, .K = K, .data = make_weights(types[i], N, K, 61 + (unsigned)(i + k))};
                float *x = make_activations(T, K, 62 + (unsigned)j), a[11 * 33], b[11 * 33];
                run_matmul(a, x, &W, T, OPS_GENERIC);
                run_matmul(b, x, &W, T, OPS_AVX2);
                if (memcmp(a, b, sizeof(float) * (size_t)T * N) != 0) {
                    print_error("%s K=%d T=%d: avx2 and generic differ\n", dtype_name(types[i]), K, T);
                    fail();
                }
                free(x), free((void *)W.data);
            }
}

/* In eights (formats.h): every block of every row read back from the copy
 * is the row's own, Q4_0 and Q8_0, and a few bytes sit where the layout
 * says: row 8g + i's scale in d[i], and its value byte j in load (x, c) =
 * (i / 2 % 2, j / 8), row slot y with rows8_row(x, y) == i. */
static void in_eights_holds_every_block_where_the_layout_says(void **state) {
    (void)state;
    const DType types[] = {DT_Q4_0, DT_Q8_0, DT_Q4_K, DT_Q6_K};
    for (int k = 0; k < 4; k++) {
        DType type = types[k];
        int N = 24, K = dtype_is_k(type) ? 768 : 96, nb = K / dtype_block(type);
        size_t bs = rows8_block_bytes(type) / 8;
        Mat W = {.type = type, .N = N, .K = K, .data = make_weights(type, N, K, 71)};
        uint8_t *copy = malloc(dtype_row_bytes(type, K) * (size_t)N);
        assert_non_null(copy);
        mat_to_rows8(copy, &W);
        const uint8_t *rows = W.data;
        for (int n = 0; n < N; n++)
            for (int b = 0; b < nb; b++) {
                uint8_t back[sizeof(BlockQ6_K)];
                rows8_block(back, copy, type, K, n, b);
                assert_memory_equal(back, rows + ((size_t)n * nb + b) * bs, bs);
            }
        if (type == DT_Q4_K) {
            /* row 13 = group 1, i = 5 (x = 0, y = 3), super-block 2: dmin at
             * 16 + 2 * 5, scale byte 9 in word 2 at 32 + (2 * 8 + 5) * 4 + 1,
             * qs byte 75 (c = 2, q = 1) at 128 + (((2 * 4 + 1) * 2 + 0) * 4 + 3) * 8 + 3 */
            const uint8_t *blk = copy + ((size_t)1 * nb + 2) * rows8_block_bytes(type), *own = rows + (13 * nb + 2) * bs;
            assert_memory_equal(blk + 16 + 2 * 5, own + 2, 2);
            assert_int_equal(blk[32 + (2 * 8 + 5) * 4 + 1], own[4 + 9]);
            assert_int_equal(blk[128 + (((2 * 4 + 1) * 2 + 0) * 4 + 3) * 8 + 3], own[16 + 75]);
            free(copy), free((void *)W.data);
            continue;
        }
        if (type == DT_Q6_K) {
            /* row 13 (x = 0, y = 3), super-block 2: d at 2 * 5, scale 9 at
             * 16 + 9 * 8 + 5, ql byte 100 (h = 1, the second half: part 1,
             * q = 0, e = 4) and qh byte 45 (h = 1, q = 1, e = 5) in their loads */
            const uint8_t *blk = copy + ((size_t)1 * nb + 2) * rows8_block_bytes(type), *own = rows + (13 * nb + 2) * bs;
            assert_memory_equal(blk + 2 * 5, own + 208, 2);
            assert_int_equal(blk[16 + 9 * 8 + 5], own[192 + 9]);
            assert_int_equal(blk[144 + ((((1 * 4 + 0) * 2 + 0) * 3 + 1) * 32 + 3 * 8 + 4)], own[100]);
            assert_int_equal(blk[144 + ((((1 * 4 + 1) * 2 + 0) * 3 + 2) * 32 + 3 * 8 + 5)], own[128 + 45]);
            free(copy), free((void *)W.data);
            continue;
        }
        /* row 13 = group 1, i = 5: x = 0, y = 3 (4 * 1 + 2 * 0 + 1); block 2, byte 11 (c = 1) */
        assert_int_equal(rows8_row(0, 3), 5);
        const uint8_t *blk = copy + ((size_t)1 * nb + 2) * rows8_block_bytes(type), *own = rows + (13 * nb + 2) * bs;
        assert_memory_equal(blk + 2 * 5, own, 2);
        int chunks = type == DT_Q8_0 ? 4 : 2;
        assert_int_equal(blk[16 + ((0 * chunks + 1) * 4 + 3) * 8 + 3], own[2 + 11]);
        free(copy), free((void *)W.data);
    }
}

/* In eights on AVX2: the bits of matmul_blocks_ref (exact integer sums per
 * block, one float chain per row and token), Q4_0 and Q8_0, and Q4_K's and
 * Q6_K's of the generic path (exact sums per super-block, its float step), for one block,
 * an odd count and many; 8 rows, 40 (a group of 16 rows cut in half) and
 * 72; tokens in one tile, in several and a partial last one; on one and two
 * threads; the largest sums a tile's lanes hold (Q4_0 nibbles of 15, Q8_0
 * weights of -128 and 127, against values of +-127 all through); and in a
 * group with a matrix whose rows it does not have in eights, where a
 * thread's range starts inside a group of eight. */
static void check_rows8(DType type, int N, int K, int T, int extreme, uint64_t seed) {
    Mat W = {.type = type, .N = N, .K = K, .data = make_weights(type, N, K, seed)};
    float *x = make_activations(T, K, seed + 1);
    if (extreme && type == DT_Q4_K) {   /* every nibble 15, every scale and min 63 */
        for (size_t i = 0; i < (size_t)N * K / QK_K; i++) {
            memset(((BlockQ4_K *)W.data)[i].qs, 0xff, 128);
            memset(((BlockQ4_K *)W.data)[i].scales, 0xff, 12);
        }
        for (size_t i = 0; i < (size_t)T * K; i++) x[i] = i % 64 < 32 ? 1.0f : -1.0f;
    } else if (extreme && type == DT_Q6_K) {   /* every value 63, scales of 127 and -128 */
        for (size_t i = 0; i < (size_t)N * K / QK_K; i++) {
            BlockQ6_K *b = &((BlockQ6_K *)W.data)[i];
            memset(b->ql, 0xff, 128), memset(b->qh, 0xff, 64);
            for (int j = 0; j < 16; j++) b->scales[j] = (int8_t)(j % 2 ? -128 : 127);
        }
        for (size_t i = 0; i < (size_t)T * K; i++) x[i] = i % 64 < 32 ? 1.0f : -1.0f;
    } else if (extreme) {
        for (size_t i = 0; i < (size_t)N * K / 32; i++) {
            if (type == DT_Q4_0) memset(((BlockQ4_0 *)W.data)[i].qs, i % 3 ? 0xff : 0x00, 16);
            else memset(((BlockQ8_0 *)W.data)[i].qs, i % 3 ? 0x80 : 0x7f, 32);
        }
        for (size_t i = 0; i < (size_t)T * K; i++) x[i] = i % 64 < 32 ? 1.0f : -1.0f;
    }
    uint8_t *copy = malloc(dtype_row_bytes(type, K) * (size_t)N);
    float *got = malloc(sizeof(float) * (size_t)T * N), *ref = malloc(sizeof(float) * (size_t)T * N);
    assert_non_null(copy);
    assert_non_null(got);
    assert_non_null(ref);
    if (dtype_is_k(type)) run_matmul(ref, x, &W, T, OPS_GENERIC);   /* the exact sums' bits */
    mat_to_rows8(copy, &W);
    W.rows8 = copy;
    if (!dtype_is_k(type)) matmul_blocks_ref(ref, x, &W, T);
    int saved = ops_threads();
    for (int threads = 1; threads <= 2; threads++) {
        ops_set_threads(threads);
        run_matmul(got, x, &W, T, OPS_AVX2);
        for (int e = 0; e < T * N; e++)
            if (float_to_bits(got[e]) != float_to_bits(ref[e])) {
                print_error("%s in eights N=%d K=%d T=%d, %d thread%s: out[%d][%d] %.9g, the reference %.9g\n",
                            dtype_name(type), N, K, T, threads, threads > 1 ? "s" : "", e / N, e % N, got[e], ref[e]);
                fail();
            }
    }
    ops_set_threads(saved);
    free(got), free(ref), free(copy), free(x), free((void *)W.data);
}

static void check_rows8_in_a_group(DType type, int T) {
    /* 12 rows as they are, then 40 in eights; the second thread's range
     * starts at row 20 of the second matrix */
    int K = 4096, Ns[2] = {12, 40};
    Mat W[2];
    uint8_t *copy = malloc(dtype_row_bytes(type, K) * 40);
    assert_non_null(copy);
    for (int i = 0; i < 2; i++)
        W[i] = (Mat){.type = type, .N = Ns[i], .K = K, .data = make_weights(type, Ns[i], K, 84 + i)};
    mat_to_rows8(copy, &W[1]);
    W[1].rows8 = copy;
    float *x = make_activations(T, K, 86), *a[2], *b[2];
    for (int i = 0; i < 2; i++) {
        a[i] = malloc(sizeof(float) * (size_t)T * Ns[i]), b[i] = malloc(sizeof(float) * (size_t)T * Ns[i]);
        assert_non_null(a[i]);
        assert_non_null(b[i]);
    }
    OpsIsa saved_isa = ops_isa();
    int saved = ops_threads();
    ops_set_isa(OPS_AVX2);
    ops_set_threads(2);
    void *scratch = malloc(matmul_scratch_bytes(type, T, K));
    assert_non_null(scratch);
    matmul_group(a, x, (const Mat *const[]){&W[0], &W[1]}, 2, T, scratch);
    ops_set_threads(1);
    for (int i = 0; i < 2; i++) matmul(b[i], x, &W[i], T, scratch);
    ops_set_threads(saved);
    ops_set_isa(saved_isa);
    for (int i = 0; i < 2; i++) assert_memory_equal(a[i], b[i], sizeof(float) * (size_t)T * Ns[i]);
    for (int i = 0; i < 2; i++) free(a[i]), free(b[i]), free((void *)W[i].data);
    free(scratch), free(copy), free(x);
}

static void in_eights_on_avx2_gives_the_blocks_reference_bits(void **state) {
    (void)state;
    if (skipped_without_avx2()) return;
    const DType types[] = {DT_Q4_0, DT_Q8_0, DT_Q4_K, DT_Q6_K};
    const int Ks[] = {32, 224, 2080}, Kk[] = {256, 768, 2304}, Ts[] = {1, 3, 8, 11}, Ns[] = {8, 40, 72};
    for (int y = 0; y < 4; y++) {
        for (int k = 0; k < 3; k++)
            for (int j = 0; j < 4; j++)
                for (int i = 0; i < 3; i++)
                    check_rows8(types[y], Ns[i], dtype_is_k(types[y]) ? Kk[k] : Ks[k], Ts[j], 0,
                                81 + (unsigned)(k * 16 + j * 4 + i));
        check_rows8(types[y], 40, 8192, 5, 0, 82);   /* big enough for two threads */
        check_rows8(types[y], 16, 256, 9, 1, 83);
        check_rows8(types[y], 24, 512, 6, 1, 84);   /* Q4_K: a tile of four, then one of two */
        check_rows8_in_a_group(types[y], 5);
        check_rows8_in_a_group(types[y], 1);   /* decoding: Q4_K's two streams, a range cutting a group */
    }
}

static void q8_0_small_batches_equal_single_tokens_bitwise(void **state) {
    (void)state;
    /* the 4 x 2 and 4 x 3 tiles, alone and after a 4 x 4 one */
    check_batch_equals_single_tokens(DT_Q8_0, 70, 224, 2);
    check_batch_equals_single_tokens(DT_Q8_0, 70, 224, 3);
    check_batch_equals_single_tokens(DT_Q8_0, 70, 224, 7);
}

static void matmul_gives_same_results_on_one_and_two_threads(void **state) {
    (void)state;
    /* Big enough to be split (see OPS_MIN_PARALLEL_BYTES), with N not a
     * multiple of 16 so that the last group is partial. Our own kernels give
     * the same bits; OpenBLAS (sgemm, and sgemv for the generic F32 T = 1)
     * may split sums differently by thread count and is held to the error
     * bound instead. The plain path is one thread whatever the count. */
    DType types[] = {DT_F32, DT_F16, DT_Q8_0, DT_BF16};
    int Ts[] = {1, 5, 17, 40};
    int saved = ops_threads();
    for (int i = 0; i < 4; i++) {
        for (int j = 0; j < 4; j++) {
            int N = 1203, K = 256, T = Ts[j];
            Mat W = {.type = types[i], .N = N, .K = K, .data = make_weights(types[i], N, K, 31 + i)};
            float *x = make_activations(T, K, 32);
            float *a = malloc(sizeof(float) * (size_t)T * N), *b = malloc(sizeof(float) * (size_t)T * N);
            assert_non_null(a);
            assert_non_null(b);
            OpsIsa isas[4];
            int n_isas = cpu_isas(isas, 1);
            for (int s = 0; s < n_isas; s++) {
                ops_set_threads(1);
                run_matmul(a, x, &W, T, isas[s]);
                ops_set_threads(2);
                run_matmul(b, x, &W, T, isas[s]);
                /* ours: Q8_0 always; F32 and F16 below 36 tokens on AVX-512,
                 * 48 on AVX2; the generic F16 loop at T == 1; the plain path always */
                int ours = types[i] == DT_Q8_0 || (isas[s] == OPS_AVX512 && T < 36) || (isas[s] == OPS_AVX2 && T < 48) ||
                           ((types[i] == DT_F16 || types[i] == DT_BF16) && T == 1) ||
                           isas[s] == OPS_PLAIN;
                for (int t = 0; t < T; t++) {
                    for (int n = 0; n < N; n++) {
                        float va = a[(size_t)t * N + n], vb = b[(size_t)t * N + n];
                        double exact, budget;
                        exact_dot(&W, n, x + (size_t)t * K, &exact, &budget);
                        int same = ours ? float_to_bits(va) == float_to_bits(vb) : fabs(va - vb) <= 2 * budget;
                        if (!same) {
                            print_error("%s %s T=%d out[%d][%d]: 1 thread %.9g, 2 threads %.9g\n",
                                        dtype_name(types[i]), ops_isa_name(isas[s]), T, t, n, va, vb);
                            fail();
                        }
                    }
                }
            }
            free(a), free(b), free(x), free((void *)W.data);
        }
    }
    ops_set_threads(saved);
}

static void matmul_scratch_does_not_depend_on_threads(void **state) {
    (void)state;
    /* model.c sizes scratch once, possibly before the thread count is set. */
    int saved = ops_threads();
    DType types[] = {DT_F32, DT_F16, DT_Q8_0, DT_BF16};
    for (int i = 0; i < 4; i++) {
        ops_set_threads(1);
        size_t one = matmul_scratch_bytes(types[i], 64, 2048);
        ops_set_threads(2);
        assert_int_equal(one, matmul_scratch_bytes(types[i], 64, 2048));
        assert_true(matmul_scratch_bytes(types[i], 64, 2048) >= matmul_scratch_bytes(types[i], 1, 2048));
    }
    ops_set_threads(saved);
}

/* matmul_group against one matmul per matrix: the same bits where our
 * kernels compute (x rounded once or three times is rounded the same; a row's
 * sum does not depend on which thread or range takes it), within the error
 * bound where OpenBLAS does. Row counts that end mid-group, so the threads'
 * ranges cross from one matrix into the next; a group of mixed types (each
 * matrix on its own path) too. */
static void matmul_group_gives_each_matmuls_results(void **state) {
    (void)state;
    const DType types[] = {DT_F32, DT_F16, DT_BF16, DT_Q8_0, DT_Q4_0, DT_Q5_1, DT_Q4_K, DT_Q6_K};
    const int Ts[] = {1, 5, 40};
    enum { K = 256, NM = 3 };
    const int Ns[NM] = {531, 77, 205};
    int saved = ops_threads();
    for (size_t ty = 0; ty <= sizeof types / sizeof types[0]; ty++) {
        int mixed = ty == sizeof types / sizeof types[0];   /* the last round: Q8_0, Q4_K, F16 */
        Mat W[NM];
        for (int i = 0; i < NM; i++) {
            DType type = mixed ? (DType[]){DT_Q8_0, DT_Q4_K, DT_F16}[i] : types[ty];
            W[i] = (Mat){.type = type, .N = Ns[i], .K = K, .data = make_weights(type, Ns[i], K, 500 + 10 * ty + i)};
        }
        for (size_t j = 0; j < sizeof Ts / sizeof Ts[0]; j++) {
            int T = Ts[j];
            float *x = make_activations(T, K, 77 + j), *got[NM], *want[NM];
            size_t bytes = 1;
            for (int i = 0; i < NM; i++) {
                size_t b = matmul_scratch_bytes(W[i].type, T, K);
                bytes = b > bytes ? b : bytes;
                got[i] = malloc(sizeof(float) * (size_t)T * Ns[i]);
                want[i] = malloc(sizeof(float) * (size_t)T * Ns[i]);
                assert_non_null(got[i]);
                assert_non_null(want[i]);
            }
            void *scratch = malloc(bytes);   /* exactly the largest promised size */
            assert_non_null(scratch);
            OpsIsa isas[4];
            int n_isas = cpu_isas(isas, 1);
            for (int s = 0; s < n_isas; s++) {
                for (int threads = 1; threads <= 2; threads++) {
                    ops_set_isa(isas[s]);
                    ops_set_threads(threads);
                    for (int i = 0; i < NM; i++) {
                        matmul(want[i], x, &W[i], T, scratch);
                        for (size_t e = 0; e < (size_t)T * Ns[i]; e++) got[i][e] = NAN;   /* unwritten: NaN */
                    }
                    matmul_group(got, x, (const Mat *const[]){&W[0], &W[1], &W[2]}, NM, T, scratch);
                    for (int i = 0; i < NM; i++) {
                        DType type = W[i].type;
                        int ours = !(type == DT_F32 || type == DT_F16 || type == DT_BF16) ||
                                   ((isas[s] == OPS_AVX512 || isas[s] == OPS_AVX2) && T < 36) ||
                                   ((type == DT_F16 || type == DT_BF16) && T == 1) || isas[s] == OPS_PLAIN;
                        for (int t = 0; t < T; t++) {
                            for (int n = 0; n < Ns[i]; n++) {
                                float g = got[i][(size_t)t * Ns[i] + n], w = want[i][(size_t)t * Ns[i] + n];
                                double exact, budget;
                                exact_dot(&W[i], n, x + (size_t)t * K, &exact, &budget);
                                if (ours ? float_to_bits(g) != float_to_bits(w) : !(fabs(g - w) <= 2 * budget)) {
                                    print_error("%s %s %d threads T=%d matrix %d out[%d][%d]: group %.9g, "
                                                "alone %.9g\n", dtype_name(type), ops_isa_name(isas[s]),
                                                threads, T, i, t, n, g, w);
                                    fail();
                                }
                            }
                        }
                    }
                }
            }
            for (int i = 0; i < NM; i++) free(got[i]), free(want[i]);
            free(scratch), free(x);
        }
        for (int i = 0; i < NM; i++) free((void *)W[i].data);
    }
    ops_set_isa(OPS_BEST);
    ops_set_threads(saved);
}

/* ops_scores and ops_add_weighted_rows against double precision, rows at a
 * stride wider than a head (as in the KV cache), for head sizes that are and
 * are not multiples of 16 and 64. Each result is a sum of S (or n) products:
 * within gamma of the sum of their magnitudes (see the top of this file). */
static void attention_products_match_double_precision(void **state) {
    (void)state;
    enum { MAXS = 200, MAXN = 33, STRIDE = MAXS + 24 };
    static float rows[MAXN * STRIDE];
    float q[MAXS], s[MAXN], w[MAXN], out[MAXS], start[MAXS];
    Rng r = {99};
    for (int i = 0; i < MAXN * STRIDE; i++) rows[i] = rng_uniform(&r);
    OpsIsa isas[4];
    int n_isas = cpu_isas(isas, 0);
    const int Ss[] = {1, 7, 16, 48, 64, 80, 128, 200};
    for (int k = 0; k < n_isas; k++) {
        ops_set_isa(isas[k]);
        for (size_t a = 0; a < sizeof Ss / sizeof Ss[0]; a++) {
            int S = Ss[a];
            for (int n = 1; n <= MAXN; n += 4) {
                for (int i = 0; i < S; i++) q[i] = 3.0f * rng_uniform(&r), out[i] = start[i] = rng_uniform(&r);
                for (int j = 0; j < n; j++) w[j] = 0.5f + 0.5f * rng_uniform(&r);
                ops_scores(s, q, rows + 5, n, S, STRIDE, 0.125f);
                ops_add_weighted_rows(out, w, rows + 5, n, S, STRIDE);
                for (int j = 0; j < n; j++) {
                    double want = 0, mag = 0;
                    for (int i = 0; i < S; i++) {
                        want += (double)q[i] * rows[5 + j * STRIDE + i];
                        mag += fabs((double)q[i] * rows[5 + j * STRIDE + i]);
                    }
                    if (!(fabs(s[j] - 0.125 * want) <= 0.125 * (1.01 * S * 0x1p-24 * mag) + 0x1p-24 * fabs(s[j])))
                        fail_msg("%s S=%d n=%d: score %d = %.9g, want %.9g", ops_isa_name(isas[k]), S, n, j, s[j],
                                 0.125 * want);
                }
                for (int i = 0; i < S; i++) {
                    double want = start[i], mag = fabs(start[i]);
                    for (int j = 0; j < n; j++) {
                        want += (double)w[j] * rows[5 + j * STRIDE + i];
                        mag += fabs((double)w[j] * rows[5 + j * STRIDE + i]);
                    }
                    if (!(fabs(out[i] - want) <= 1.01 * (n + 1) * 0x1p-24 * mag))
                        fail_msg("%s S=%d n=%d: out[%d] = %.9g, want %.9g", ops_isa_name(isas[k]), S, n, i, out[i],
                                 want);
                }
            }
        }
    }
    ops_set_isa(OPS_BEST);
}

/* ------------------------------------------ the 4, 5 and 6-bit formats */

static const DType SMALL_TYPES[] = {DT_Q4_0, DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_Q4_K, DT_Q5_K, DT_Q6_K};
enum { N_SMALL = sizeof SMALL_TYPES / sizeof SMALL_TYPES[0] };

/* N rows of a small block format: random floats whose size changes from
 * block to block (so scales differ), rounded by quantize_row. */
static void *make_small_weights(DType type, int N, int K, uint64_t seed) {
    Rng r = {seed};
    void *data = malloc(dtype_row_bytes(type, K) * (size_t)N);
    float *row = malloc(sizeof(float) * (size_t)K);
    assert_non_null(data);
    assert_non_null(row);
    for (int n = 0; n < N; n++) {
        for (int k = 0; k < K; k++) {
            float scale = ldexpf(1.0f, -(int)((unsigned)(k / 32 + n) % 5));
            row[k] = rng_uniform(&r) * scale + (k % 64 < 32 ? 0.1f * scale : 0.0f);
        }
        assert_int_equal(quantize_row((uint8_t *)data + (size_t)n * dtype_row_bytes(type, K), row, type, K), ST_OK);
    }
    free(row);
    return data;
}

/* The activations as the fast kernels round them, widened back to double:
 * Q8_0 blocks for the 32-value formats, Q8_K super-blocks for the K ones. */
static void rounded_activations(double *out, const float *x, DType type, int K) {
    if (dtype_is_k(type)) {
        BlockQ8_K *q = malloc(sizeof(BlockQ8_K) * (size_t)(K / QK_K));
        assert_non_null(q);
        quantize_row_q8_k_ref(q, x, K);
        for (int k = 0; k < K; k++) out[k] = (double)q[k / QK_K].d * q[k / QK_K].qs[k % QK_K];
        free(q);
    } else {
        BlockQ8_0 *q = malloc(sizeof(BlockQ8_0) * (size_t)(K / QK8_0));
        assert_non_null(q);
        quantize_row_q8_0_ref(q, x, K);
        for (int k = 0; k < K; k++) out[k] = (double)fp16_to_fp32(q[k / QK8_0].d) * q[k / QK8_0].qs[k % QK8_0];
        free(q);
    }
}

/* The generic and AVX-512 paths against a float64 loop over the dequantized
 * weights and the rounded activations: the same products, summed exactly.
 * The kernels' integer sums are exact, so their error is float rounding of a
 * few terms per block: (4 nb + 16) u times the sum of |w x| over the row,
 * where the K formats' and _1 formats' offsets count separately (their two
 * terms can be larger than the weight they make), bounded by doubling the
 * sum with the largest |w| of each block. A wrong nibble, bit plane, scale
 * or offset moves a result by about one block's share, 1 / nb of the sum. */
static void check_small_matmul(DType type, int N, int K, int T, OpsIsa isa, uint64_t seed) {
    Mat W = {.type = type, .N = N, .K = K, .data = make_small_weights(type, N, K, seed)};
    float *x = make_activations(T, K, seed + 1), *got = malloc(sizeof(float) * (size_t)T * N);
    float *w = malloc(sizeof(float) * (size_t)K);
    double *xr = malloc(sizeof(double) * (size_t)K);
    assert_non_null(got);
    assert_non_null(w);
    assert_non_null(xr);
    run_matmul(got, x, &W, T, isa);
    int B = dtype_block(type), nb = K / B;
    for (int t = 0; t < T; t++) {
        rounded_activations(xr, x + (size_t)t * K, type, K);
        for (int n = 0; n < N; n++) {
            dequantize_row(w, (const uint8_t *)W.data + (size_t)n * dtype_row_bytes(type, K), type, K);
            double exact = 0, abs_sum = 0;
            for (int b = 0; b < nb; b++) {
                double wmax = 0;
                for (int i = 0; i < B; i++) wmax = fmax(wmax, fabs((double)w[b * B + i]));
                for (int i = 0; i < B; i++) {
                    exact += (double)w[b * B + i] * xr[b * B + i];
                    abs_sum += (fabs((double)w[b * B + i]) + wmax) * fabs(xr[b * B + i]);
                }
            }
            double budget = (4.0 * nb + 16) * 0x1p-24 * 2 * abs_sum + 1e-30;
            float g = got[(size_t)t * N + n];
            if (!(fabs(g - exact) <= budget)) {
                print_error("%s %s N=%d K=%d T=%d: out[%d][%d] = %.9g, exact %.9g, budget %.3g\n",
                            dtype_name(type), ops_isa_name(isa), N, K, T, t, n, g, exact, budget);
                fail();
            }
        }
    }
    free(got), free(x), free(w), free(xr), free((void *)W.data);
}

/* Every small format, both fast paths, row counts that leave every tail of
 * the 4-row tiles, token counts that leave one over the 4-token tiles, and
 * for the blocks of 32 rows that end in a whole group of four blocks or in
 * 1, 2 or 3 over (7, 9, 10 and 24 blocks: the AVX-512 kernel takes four at a
 * time), for the K formats one and several super-blocks. */
static void small_formats_match_a_float64_loop_on_every_path(void **state) {
    (void)state;
    OpsIsa isas[4];
    int n_isas = cpu_isas(isas, 0);
    int Ns[] = {1, 7, 33}, Ts[] = {1, 2, 3, 5};
    for (int i = 0; i < N_SMALL; i++) {
        int k_type = dtype_is_k(SMALL_TYPES[i]);
        int Ks[] = {k_type ? 256 : 224, k_type ? 768 : 288, k_type ? 1024 : 320, 768};
        for (int s = 0; s < n_isas; s++)
            for (int k = 0; k < 4; k++)
                for (int n = 0; n < 3; n++)
                    for (int t = 0; t < 4; t++)
                        check_small_matmul(SMALL_TYPES[i], Ns[n], Ks[k], Ts[t], isas[s],
                                           100u * (unsigned)i + 10u * (unsigned)k + (unsigned)(n + t));
    }
}

/* The plain path keeps activations in float: matmul_ref is the float dot
 * product of x with the dequantized rows, within the float bound of exact
 * (exact_dot's budget), for every small format, rows and tokens alike. */
static void small_formats_on_the_plain_path_are_the_dequantized_float_dot(void **state) {
    (void)state;
    int N = 7, K = 512, T = 3;
    for (int i = 0; i < N_SMALL; i++) {
        Mat W = {.type = SMALL_TYPES[i], .N = N, .K = K, .data = make_weights(SMALL_TYPES[i], N, K, 91)};
        float *x = make_activations(T, K, 92), got[3 * 7];
        matmul_ref(got, x, &W, T);
        for (int t = 0; t < T; t++)
            for (int n = 0; n < N; n++) {
                double exact, budget;
                exact_dot(&W, n, x + (size_t)t * K, &exact, &budget);
                if (!(fabs(got[t * N + n] - exact) <= budget)) {
                    print_error("%s plain out[%d][%d] = %.9g, exact %.9g, budget %.3g\n",
                                dtype_name(SMALL_TYPES[i]), t, n, got[t * N + n], exact, budget);
                    fail();
                }
            }
        free(x), free((void *)W.data);
    }
}

/* Our kernels compute each (row, token) by one sequence of instructions
 * whatever the tile, the number of tokens or of threads: the same bits. */
static void small_formats_give_the_same_bits_by_tokens_and_threads(void **state) {
    (void)state;
    int saved = ops_threads();
    for (int i = 0; i < N_SMALL; i++) {
        check_batch_equals_single_tokens(SMALL_TYPES[i], 70, 512, 5);
        /* the generic K loops take 8 tokens at a time: 11 is a group and a rest */
        check_batch_equals_single_tokens_on(SMALL_TYPES[i], 70, 512, 11, OPS_GENERIC);
        if (!dtype_is_k(SMALL_TYPES[i])) {   /* rows ending in 1, 2, 3 blocks past a group of four */
            check_batch_equals_single_tokens(SMALL_TYPES[i], 70, 288, 5);
            check_batch_equals_single_tokens(SMALL_TYPES[i], 70, 320, 5);
            check_batch_equals_single_tokens(SMALL_TYPES[i], 70, 224, 5);
        }
        OpsIsa isas[4];
        int n_isas = cpu_isas(isas, 0);
        int N = 1203, K = 512, T = 3;   /* big enough to be split between threads */
        Mat W = {.type = SMALL_TYPES[i], .N = N, .K = K, .data = make_weights(SMALL_TYPES[i], N, K, 41)};
        float *x = make_activations(T, K, 42);
        float *a = malloc(sizeof(float) * (size_t)T * N), *b = malloc(sizeof(float) * (size_t)T * N);
        assert_non_null(a);
        assert_non_null(b);
        for (int s = 0; s < n_isas; s++) {
            ops_set_threads(1);
            run_matmul(a, x, &W, T, isas[s]);
            ops_set_threads(2);
            run_matmul(b, x, &W, T, isas[s]);
            assert_memory_equal(a, b, sizeof(float) * (size_t)T * N);
        }
        free(a), free(b), free(x), free((void *)W.data);
    }
    ops_set_threads(saved);
}

/* Q8_K as llama.cpp rounds activations: d = max / -127 with the sign of the
 * value of largest magnitude (the first, if two tie), values to nearest with
 * ties to even, and sums of each 16. */
static void quantize_row_q8_k_follows_llama_cpp_rule(void **state) {
    (void)state;
    float x[QK_K];
    for (int i = 0; i < QK_K; i++) x[i] = 0.0f;
    x[0] = 2.0f, x[1] = -2.54f, x[2] = 2.54f, x[3] = 1.27f, x[4] = -0.01f, x[5] = 0.03f;
    x[17] = 0.05f;   /* -2.5 steps: a tie, to -2 (even) */
    BlockQ8_K b;
    quantize_row_q8_k_ref(&b, x, QK_K);
    /* max = -2.54 (first of the two): iscale = 127 / 2.54 = 50, d = 1 / 50 */
    float iscale = -127.0f / -2.54f;
    assert_true(b.d == 1.0f / iscale);
    assert_int_equal(b.qs[1], -127);
    assert_int_equal(b.qs[2], 127);
    assert_int_equal(b.qs[0], (int)nearbyintf(2.0f * iscale));
    assert_int_equal(b.qs[3], (int)nearbyintf(1.27f * iscale));
    assert_int_equal(b.qs[4], (int)nearbyintf(-0.01f * iscale));
    assert_int_equal(b.qs[17], (int)nearbyintf(0.05f * iscale));
    int s0 = 0;
    for (int i = 0; i < 16; i++) s0 += b.qs[i];
    assert_int_equal(b.bsums[0], s0);
    assert_int_equal(b.bsums[1], b.qs[17]);
    /* positive max: the sign flips the scale, not the values' order */
    x[1] = 2.54f;
    quantize_row_q8_k_ref(&b, x, QK_K);
    assert_true(b.d < 0.0f);
    assert_int_equal(b.qs[1], -127);
    assert_int_equal(b.qs[2], -127);
    /* zeros: d = 0; a NaN: d is NaN so that the logits say so */
    memset(x, 0, sizeof x);
    quantize_row_q8_k_ref(&b, x, QK_K);
    assert_true(b.d == 0.0f);
    x[9] = NAN;
    quantize_row_q8_k_ref(&b, x, QK_K);
    assert_true(isnan(b.d));
}

/* ---- each layout against the published one (ggml-common.h): values built
 * on the grid of a known scale, so that round-to-nearest must recover them;
 * the bytes written are checked against the layout's rules, spelled out here
 * from the published description, and reading them back gives the values. */

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

static void q4_0_and_q5_0_blocks_are_laid_out_as_published(void **state) {
    (void)state;
    for (int five = 0; five < 2; five++) {
        DType type = five ? DT_Q5_0 : DT_Q4_0;
        int half = five ? 16 : 8, top = 2 * half - 1;
        float d = 0.25f, x[32], back[32];
        int q[32];
        for (int i = 0; i < 32; i++) q[i] = (i * 7 + 3) % (top + 1);
        q[5] = 0;   /* the value of largest magnitude, -half d, sets d = max / -half */
        for (int i = 0; i < 32; i++) x[i] = d * (float)(q[i] - half);
        uint8_t blk[22];
        assert_int_equal(quantize_row(blk, x, type, 32), ST_OK);
        /* d (fp16) first; Q5_0 then 4 bytes of fifth bits; then 16 bytes of
         * nibbles: value i low, value i + 16 high */
        assert_int_equal(le16(blk), fp32_to_fp16(d));
        const uint8_t *qs = blk + (five ? 6 : 2);
        uint32_t qh = five ? (uint32_t)(blk[2] | blk[3] << 8 | blk[4] << 16 | (uint32_t)blk[5] << 24) : 0;
        for (int i = 0; i < 16; i++) {
            assert_int_equal(qs[i] & 15, q[i] & 15);
            assert_int_equal(qs[i] >> 4, q[i + 16] & 15);
        }
        for (int i = 0; i < 32 && five; i++) assert_int_equal((qh >> i) & 1, q[i] >> 4);
        dequantize_row(back, blk, type, 32);
        assert_memory_equal(back, x, sizeof x);
    }
}

static void q4_1_and_q5_1_blocks_are_laid_out_as_published(void **state) {
    (void)state;
    for (int five = 0; five < 2; five++) {
        DType type = five ? DT_Q5_1 : DT_Q4_1;
        int top = five ? 31 : 15;
        float d = 0.125f, m = -1.5f, x[32], back[32];
        int q[32];
        for (int i = 0; i < 32; i++) q[i] = (i * 5 + 1) % (top + 1);
        q[0] = 0, q[31] = top;   /* the range sets d = (max - min) / top and m = min */
        for (int i = 0; i < 32; i++) x[i] = d * (float)q[i] + m;
        uint8_t blk[24];
        assert_int_equal(quantize_row(blk, x, type, 32), ST_OK);
        /* d, m (fp16); Q5_1 then 4 bytes of fifth bits; then the nibbles */
        assert_int_equal(le16(blk), fp32_to_fp16(d));
        assert_int_equal(le16(blk + 2), fp32_to_fp16(m));
        const uint8_t *qs = blk + (five ? 8 : 4);
        uint32_t qh = five ? (uint32_t)(blk[4] | blk[5] << 8 | blk[6] << 16 | (uint32_t)blk[7] << 24) : 0;
        for (int i = 0; i < 16; i++) {
            assert_int_equal(qs[i] & 15, q[i] & 15);
            assert_int_equal(qs[i] >> 4, q[i + 16] & 15);
        }
        for (int i = 0; i < 32 && five; i++) assert_int_equal((qh >> i) & 1, q[i] >> 4);
        dequantize_row(back, blk, type, 32);
        assert_memory_equal(back, x, sizeof x);
    }
}

/* Sub-block j's 6-bit scale and min as ggml-common.h packs them in 12 bytes. */
static void published_scale_min(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63, *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        *mn = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

static void q4_k_and_q5_k_super_blocks_are_laid_out_as_published(void **state) {
    (void)state;
    for (int five = 0; five < 2; five++) {
        DType type = five ? DT_Q5_K : DT_Q4_K;
        int top = five ? 31 : 15;
        float d = 1.0f / 64, dmin = 1.0f / 32, x[QK_K], back[QK_K];
        int sc[8] = {63, 17, 40, 5, 33, 63, 50, 12}, mn[8] = {0, 63, 7, 41, 20, 3, 63, 30}, q[QK_K];
        for (int i = 0; i < QK_K; i++) q[i] = (i * 11 + i / 32) % (top + 1);
        for (int j = 0; j < 8; j++) q[32 * j + 3] = 0, q[32 * j + 9] = top;   /* each range is full */
        for (int i = 0; i < QK_K; i++) x[i] = d * (float)sc[i / 32] * (float)q[i] - dmin * (float)mn[i / 32];
        uint8_t blk[176];
        assert_int_equal(quantize_row(blk, x, type, QK_K), ST_OK);
        /* d, dmin (fp16); 12 bytes of scales and mins; Q5_K: 32 bytes of
         * fifth bits; 128 bytes of nibbles, in chunks of 32 bytes that hold
         * values 64c + l (low) and 64c + 32 + l (high) */
        assert_int_equal(le16(blk), fp32_to_fp16(d));
        assert_int_equal(le16(blk + 2), fp32_to_fp16(dmin));
        for (int j = 0; j < 8; j++) {
            int a, b;
            published_scale_min(blk + 4, j, &a, &b);
            assert_int_equal(a, sc[j]);
            assert_int_equal(b, mn[j]);
        }
        const uint8_t *qh = blk + 16, *qs = blk + (five ? 48 : 16);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                assert_int_equal(qs[32 * c + l] & 15, q[64 * c + l] & 15);
                assert_int_equal(qs[32 * c + l] >> 4, q[64 * c + 32 + l] & 15);
                if (five) {
                    assert_int_equal((qh[l] >> (2 * c)) & 1, q[64 * c + l] >> 4);
                    assert_int_equal((qh[l] >> (2 * c + 1)) & 1, q[64 * c + 32 + l] >> 4);
                }
            }
        dequantize_row(back, blk, type, QK_K);
        for (int i = 0; i < QK_K; i++) assert_float_equal(back[i], x[i], 1e-6);
    }
}

static void q6_k_super_blocks_are_laid_out_as_published(void **state) {
    (void)state;
    float d = 1.0f / 128, x[QK_K], back[QK_K];
    int sc[16], q[QK_K];
    for (int g = 0; g < 16; g++) sc[g] = (g * 37) % 255 - 127;
    sc[3] = 127, sc[9] = -127;   /* the largest |scale| sets d = max / 127 */
    for (int g = 0; g < 16; g++) sc[g] = sc[g] == 0 ? 1 : sc[g];
    for (int i = 0; i < QK_K; i++) q[i] = 1 + (i * 13 + i / 16) % 62;
    for (int g = 0; g < 16; g++) q[16 * g + 7] = 0;   /* -32: each group's largest magnitude */
    for (int i = 0; i < QK_K; i++) x[i] = d * (float)sc[i / 16] * (float)(q[i] - 32);
    uint8_t blk[210];
    assert_int_equal(quantize_row(blk, x, DT_Q6_K, QK_K), ST_OK);
    /* ql[128], qh[64], scales[16], d (fp16) last; per half h of 128 values,
     * ql + 64h and qh + 32h: byte l of ql holds values l (low) and l + 64
     * (high), byte l + 32 values l + 32 and l + 96; byte l of qh holds the
     * top two bits of values l, l + 32, l + 64, l + 96 (bits 0-1 .. 6-7) */
    assert_int_equal(le16(blk + 208), fp32_to_fp16(d));
    for (int g = 0; g < 16; g++) assert_int_equal((int8_t)blk[192 + g], sc[g]);
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = blk + 64 * h, *qh = blk + 128 + 32 * h;
        const int *v = q + 128 * h;
        for (int l = 0; l < 32; l++) {
            assert_int_equal(ql[l] & 15, v[l] & 15);
            assert_int_equal(ql[l] >> 4, v[l + 64] & 15);
            assert_int_equal(ql[l + 32] & 15, v[l + 32] & 15);
            assert_int_equal(ql[l + 32] >> 4, v[l + 96] & 15);
            for (int k = 0; k < 4; k++) assert_int_equal((qh[l] >> (2 * k)) & 3, v[l + 32 * k] >> 4);
        }
    }
    dequantize_row(back, blk, DT_Q6_K, QK_K);
    for (int i = 0; i < QK_K; i++) assert_float_equal(back[i], x[i], 1e-6);
}

/* A row with NaN, infinities and extreme values is written without a float
 * converted to int out of range (the test build makes that fatal), and the
 * finite blocks after it come back as usual. */
static void quantize_row_survives_non_finite_and_extreme_input(void **state) {
    (void)state;
    float x[512], back[512];
    for (int i = 0; i < 512; i++) x[i] = 0.01f * (float)(i % 17) - 0.08f;
    x[3] = NAN, x[40] = INFINITY, x[41] = -INFINITY, x[70] = 3e38f, x[71] = 1e-40f, x[100] = -3e38f;
    for (int i = 0; i < N_SMALL; i++) {
        uint8_t blk[512];   /* enough for 512 values of any of them */
        assert_true(dtype_row_bytes(SMALL_TYPES[i], 512) <= sizeof blk);
        assert_int_equal(quantize_row(blk, x, SMALL_TYPES[i], 512), ST_OK);
        dequantize_row(back, blk, SMALL_TYPES[i], 512);
        for (int k = 256; k < 512; k++)   /* finite, modest values: within 0.02 */
            assert_true(fabsf(back[k] - x[k]) <= 0.02f);
    }
}

/* Round-to-nearest on random rows: every value comes back within half a
 * step of its block's grid, plus what rounding the scales costs (K formats:
 * the 6 or 8-bit scale may cut the range by half a scale step, which a value
 * at the range's end pays). A wrong bit plane or nibble order fails by whole
 * steps. quantize_row refuses a type it does not write and a partial block. */
static void quantize_row_round_trips_within_half_a_step(void **state) {
    (void)state;
    int K = 512;
    float *x = make_activations(1, K, 77), back[512];
    for (int i = 0; i < N_SMALL; i++) {
        DType type = SMALL_TYPES[i];
        uint8_t *blk = malloc(dtype_row_bytes(type, K));
        assert_non_null(blk);
        assert_int_equal(quantize_row(blk, x, type, K), ST_OK);
        dequantize_row(back, blk, type, K);
        int G = type == DT_Q6_K ? 16 : 32, levels = type == DT_Q4_1 || type == DT_Q4_K ? 15 : 31;
        float row_amax = 0;
        for (int k = 0; k < K; k++) row_amax = fmaxf(row_amax, fabsf(x[k]));
        for (int g = 0; g < K / G; g++) {
            float lo = 0, hi = 0, amax = 0;
            for (int k = 0; k < G; k++) {
                lo = fminf(lo, x[g * G + k]), hi = fmaxf(hi, x[g * G + k]);
                amax = fmaxf(amax, fabsf(x[g * G + k]));
            }
            float step = (hi - lo) / (float)levels, bound;
            /* symmetric grids (Q4_0, Q5_0, Q6_K: d = max / -8, -16, -32) have
             * one step less on the side opposite the largest value, which a
             * value there may pay in full; Q6_K's 8-bit scales may be off by
             * half of d = (largest group scale) / 127 */
            if (type == DT_Q4_0) bound = 1.01f * amax / 8;
            else if (type == DT_Q5_0) bound = 1.01f * amax / 16;
            else if (type == DT_Q6_K) bound = 1.01f * amax / 32 + 32 * (row_amax / 32 / 127 / 2);
            else if (dtype_is_k(type)) {   /* half the sub-block's step, or dmin / 2 (quant.c) */
                const uint8_t *sb = blk + (size_t)(g / 8) * dtype_row_bytes(type, QK_K);
                int sc, mn;
                published_scale_min(sb + 4, g % 8, &sc, &mn);
                bound = 0.501f * fp16_to_fp32(le16(sb)) * (float)sc + 0.501f * fp16_to_fp32(le16(sb + 2));
            }
            else bound = 0.51f * step;
            bound += 1e-6f;
            for (int k = 0; k < G; k++) {
                float err = fabsf(back[g * G + k] - x[g * G + k]);
                if (!(err <= bound)) {
                    print_error("%s value %d: %g comes back as %g (bound %g)\n", dtype_name(type),
                                g * G + k, (double)x[g * G + k], (double)back[g * G + k], (double)bound);
                    fail();
                }
            }
        }
        assert_int_equal(quantize_row(blk, x, type, K - 16), ST_ARG);
        free(blk);
    }
    uint8_t any[64];
    assert_int_equal(quantize_row(any, x, DT_Q8_0, 32), ST_ARG);
    assert_int_equal(quantize_row(any, x, DT_F16, 32), ST_ARG);
    free(x);
}

/* ------------------------------------------------- the choice of path */

/* matmul() on the plain path is matmul_ref, bit for bit, for every type and
 * at T = 40 too (where the other paths call sgemm), and the counters see
 * plain calls only. */
static void plain_isa_sends_every_matmul_through_the_reference_loops(void **state) {
    (void)state;
    OpsIsa saved = ops_isa();
    ops_set_isa(OPS_PLAIN);
    assert_int_equal(ops_isa(), OPS_PLAIN);
    OpsStats before = ops_stats();
    DType types[] = {DT_F32, DT_F16, DT_Q8_0};
    int Ts[] = {1, 5, 40}, N = 37, K = 96;
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 3; j++) {
            Mat W = {.type = types[i], .N = N, .K = K, .data = make_weights(types[i], N, K, 51)};
            float *x = make_activations(Ts[j], K, 52);
            float got[40 * 37], ref[40 * 37];
            size_t bytes = matmul_scratch_bytes(W.type, Ts[j], K);
            void *scratch = malloc(bytes ? bytes : 1);
            assert_non_null(scratch);
            matmul(got, x, &W, Ts[j], scratch);
            matmul_ref(ref, x, &W, Ts[j]);
            assert_memory_equal(got, ref, sizeof(float) * (size_t)Ts[j] * N);
            free(scratch), free(x), free((void *)W.data);
        }
    }
    OpsStats after = ops_stats();
    ops_set_isa(saved);
    assert_int_equal(after.plain - before.plain, 9);
    assert_int_equal(after.generic, before.generic);
    assert_int_equal(after.avx512, before.avx512);
    assert_int_equal(after.sgemm, before.sgemm);
}

/* ops_read_sum, the bandwidth ceiling of the benchmarks, reads every word:
 * its sum equals a plain loop's for lengths around the 256-byte steps of the
 * vector loop, from aligned and unaligned starts; changing any one word
 * changes it. */
static void read_sum_adds_every_word_of_every_length(void **state) {
    (void)state;
    enum { CAP = 4096 + 64 };
    uint8_t *buf = malloc(CAP);
    assert_non_null(buf);
    Rng r = {11};
    for (size_t i = 0; i < CAP; i++) buf[i] = (uint8_t)rng_next(&r);
    const size_t lens[] = {0, 7, 8, 255, 256, 257, 264, 1000, 1024, 2048 + 136, 4096};
    for (size_t off = 0; off < 3; off++) {
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            size_t n = lens[li];
            uint64_t want = 0;
            for (size_t i = 0; i + 8 <= n; i += 8) {
                uint64_t v;
                memcpy(&v, buf + off + i, 8);
                want += v;
            }
            assert_true(ops_read_sum(buf + off, n) == want);
            if (n >= 8) {   /* the last whole word counts too */
                buf[off + n / 8 * 8 - 1] ^= 0x40;
                assert_true(ops_read_sum(buf + off, n) != want);
                buf[off + n / 8 * 8 - 1] ^= 0x40;
            }
        }
    }
    free(buf);
}

/* Without a choice, the test build runs the best path the CPU has: on an
 * AVX-512 or AVX2 CPU its kernels, and sgemm from 36 tokens of F32 (48 on
 * AVX2). */
static void default_isa_is_the_best_the_cpu_has(void **state) {
    (void)state;
    assert_int_equal(ops_isa(), ops_best_isa());
    Mat W = {.type = DT_F32, .N = 37, .K = 96, .data = make_weights(DT_F32, 37, 96, 61)};
    float *x = make_activations(48, 96, 62), out[48 * 37];
    OpsStats a = ops_stats();
    matmul(out, x, &W, 4, NULL);
    OpsStats b = ops_stats();
    matmul(out, x, &W, 48, NULL);
    OpsStats c = ops_stats();
    if (ops_best_isa() == OPS_AVX512) {
        assert_int_equal(b.avx512 - a.avx512, 1);
        assert_int_equal(b.sgemm, a.sgemm);
    } else if (ops_best_isa() == OPS_AVX2) {
        assert_int_equal(b.avx2 - a.avx2, 1);
        assert_int_equal(b.sgemm, a.sgemm);
    } else {
        assert_int_equal(b.generic - a.generic, 1);
    }
    assert_int_equal(c.sgemm - b.sgemm, 1);
    assert_int_equal(c.plain, a.plain);
    free(x), free((void *)W.data);
}

/* Where a kernel has a fast version and a reference, the plain path takes the
 * reference: softmax is softmax_ref there, bit for bit. */
static void softmax_on_the_plain_isa_is_the_libm_reference(void **state) {
    (void)state;
    enum { N = 300 };
    float a[N], b[N];
    for (int i = 0; i < N; i++) a[i] = b[i] = (float)(10.0 * cos(i * 0.71));
    OpsIsa saved = ops_isa();
    ops_set_isa(OPS_PLAIN);
    softmax(a, N);
    ops_set_isa(saved);
    softmax_ref(b, N);
    assert_memory_equal(a, b, sizeof a);
}

/* The names of the paths round-trip through ops_parse_isa; anything else is
 * an error of one line that names the bad value and the good ones. */
static void isa_names_parse_and_anything_else_is_a_one_line_error(void **state) {
    (void)state;
    OpsIsa all[] = {OPS_PLAIN, OPS_GENERIC, OPS_AVX2, OPS_AVX512, OPS_BEST}, got;
    Err e;
    for (int i = 0; i < 5; i++) {
        int st = ops_parse_isa(ops_isa_name(all[i]), &got, &e);
        if (all[i] == OPS_AVX512 && ops_best_isa() != OPS_AVX512) {
            assert_int_equal(st, ST_UNSUPPORTED);
            assert_non_null(strstr(e.msg, "lacks AVX-512"));
            continue;
        }
        if (all[i] == OPS_AVX2 && ops_best_isa() == OPS_GENERIC) {
            assert_int_equal(st, ST_UNSUPPORTED);
            assert_non_null(strstr(e.msg, "lacks AVX2"));
            continue;
        }
        assert_int_equal(st, ST_OK);
        assert_int_equal(got, all[i]);
    }
    const char *bad[] = {"", "AVX512", "sse", "plain ", "avx512f"};
    for (int i = 0; i < 5; i++) {
        got = OPS_PLAIN;
        assert_int_equal(ops_parse_isa(bad[i], &got, &e), ST_ARG);
        assert_int_equal(got, OPS_PLAIN);   /* untouched */
        assert_null(strchr(e.msg, '\n'));
        assert_non_null(strstr(e.msg, "want plain, generic, avx2, avx512 or best"));
    }
    assert_int_equal(ops_parse_isa(NULL, &got, &e), ST_ARG);
}

/* Decoding on AVX-512 reads one row at a time or four side by side
 * (ops_decode_rows, chosen by CPU kind; AVX2's float tiles two for four):
 * every output is the same bits
 * either way, and the same as that token's in a batch of 5 (the batched
 * tiles' sums). N = 1203 leaves 3 rows after the last four; K leaves a
 * masked step (floats), an odd last block (Q8_0) or a last quad of one
 * block (the blocks of 32). */
static void check_decode_rows(OpsIsa isa) {
    DType types[] = {DT_F32, DT_F16, DT_BF16, DT_Q8_0, DT_Q4_0, DT_Q5_1};
    for (int i = 0; i < 6; i++) {
        int N = 1203, K = dtype_block(types[i]) > 1 ? 288 : 280, T = 5;
        Mat W = {.type = types[i], .N = N, .K = K, .data = make_weights(types[i], N, K, 71 + i)};
        float *x = make_activations(T, K, 72);
        float *one = malloc(sizeof(float) * N), *four = malloc(sizeof(float) * N);
        float *batch = malloc(sizeof(float) * (size_t)T * N);
        assert_non_null(one);
        assert_non_null(four);
        assert_non_null(batch);
        ops_set_decode_rows(1);
        run_matmul(one, x, &W, 1, isa);
        ops_set_decode_rows(4);
        run_matmul(four, x, &W, 1, isa);
        run_matmul(batch, x, &W, T, isa);
        ops_set_decode_rows(0);
        for (int n = 0; n < N; n++) {
            if (float_to_bits(one[n]) != float_to_bits(four[n]) || float_to_bits(one[n]) != float_to_bits(batch[n])) {
                print_error("%s %s row %d: one row at a time %.9g, four %.9g, in a batch %.9g\n",
                            dtype_name(types[i]), ops_isa_name(isa), n, one[n], four[n], batch[n]);
                fail();
            }
        }
        free(one), free(four), free(batch), free(x), free((void *)W.data);
    }
}

static void decoding_one_or_four_rows_at_a_time_gives_the_same_bits(void **state) {
    (void)state;
    OpsIsa isas[4];
    int n_isas = cpu_isas(isas, 0);
    if (n_isas == 1) skip();
    for (int s = 1; s < n_isas; s++)   /* AVX2 (its float tiles take two rows side by side), AVX-512 */
        check_decode_rows(isas[s]);
}

/* LLM_DECODE_ROWS: 1 or 4, set at start-up like LLM_ISA; anything else is a
 * one-line error naming the variable that changes nothing. */
static void llm_decode_rows_sets_the_rows_and_a_bad_value_is_a_one_line_error(void **state) {
    (void)state;
    Err e;
    setenv("LLM_DECODE_ROWS", "4", 1);
    assert_int_equal(ops_isa_from_env(&e), ST_OK);
    assert_int_equal(ops_decode_rows(), 4);
    setenv("LLM_DECODE_ROWS", "1", 1);
    assert_int_equal(ops_isa_from_env(&e), ST_OK);
    assert_int_equal(ops_decode_rows(), 1);
    setenv("LLM_DECODE_ROWS", "2", 1);
    assert_int_equal(ops_isa_from_env(&e), ST_ARG);
    assert_int_equal(strncmp(e.msg, "LLM_DECODE_ROWS: ", 17), 0);
    assert_non_null(strstr(e.msg, "'2'"));
    assert_null(strchr(e.msg, '\n'));
    assert_int_equal(ops_decode_rows(), 1);
    unsetenv("LLM_DECODE_ROWS");
    ops_set_decode_rows(0);
    int cpu = ops_decode_rows();
    assert_true(cpu == 1 || cpu == 4);
}

/* LLM_AMX=0 turns the AMX tiles off (the matmul of 16 tokens then gives
 * matmul_ref's bits), 1 gives them back where the CPU has them, anything
 * else is one line naming the variable and changes nothing. */
static void llm_amx_turns_the_tiles_off_and_a_bad_value_is_a_one_line_error(void **state) {
    (void)state;
    Err e;
    int cpu = ops_amx();
    setenv("LLM_AMX", "0", 1);
    assert_int_equal(ops_isa_from_env(&e), ST_OK);
    assert_int_equal(ops_amx(), 0);
    int N = 32, K = 64, T = 16;
    Mat W = {.type = DT_Q8_0, .N = N, .K = K, .data = make_weights(DT_Q8_0, N, K, 61)};
    float *x = make_activations(T, K, 62), got[32 * 16], ref[32 * 16];
    run_matmul(got, x, &W, T, ops_best_isa());
    matmul_ref(ref, x, &W, T);
    assert_memory_equal(got, ref, sizeof got);
    setenv("LLM_AMX", "yes", 1);
    assert_int_equal(ops_isa_from_env(&e), ST_ARG);
    assert_int_equal(strncmp(e.msg, "LLM_AMX: ", 9), 0);
    assert_non_null(strstr(e.msg, "'yes'"));
    assert_null(strchr(e.msg, '\n'));
    assert_int_equal(ops_amx(), 0);
    setenv("LLM_AMX", "1", 1);
    assert_int_equal(ops_isa_from_env(&e), ST_OK);
    assert_int_equal(ops_amx(), cpu);
    unsetenv("LLM_AMX");
    free(x), free((void *)W.data);
}

/* Whether /proc/cpuinfo's flags name `flag` (-1: no such file), read
 * apart from the compiler's CPU checks the code under test uses. */
static int cpuinfo_has_flag(const char *flag) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return -1;
    char line[8192];
    int has = 0;
    size_t n = strlen(flag);
    while (!has && fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5)) continue;
        for (const char *p = strstr(line, flag); p && !has; p = strstr(p + 1, flag))
            has = p[-1] == ' ' && (p[n] == ' ' || p[n] == '\n');
        break;
    }
    fclose(f);
    return has;
}

/* OPENBLAS_CORETYPE naming a core whose OpenBLAS kernels this CPU cannot
 * run (SkylakeX without AVX-512 ends in SIGILL at the first sgemm) is one
 * line naming the variable; names this CPU can run, and names the check does
 * not know, pass. Whether the CPU has AVX-512 and AVX2 is read from
 * /proc/cpuinfo. */
static void a_blas_coretype_this_cpu_cannot_run_is_a_one_line_error(void **state) {
    (void)state;
    int has512 = cpuinfo_has_flag("avx512f"), has2 = cpuinfo_has_flag("avx2");
    if (has512 < 0) skip();
    const char *was = getenv("OPENBLAS_CORETYPE");
    char saved[64] = "";
    if (was) snprintf(saved, sizeof saved, "%s", was);
    static const struct {
        const char *name;
        int need;   /* 512: AVX-512, 2: AVX2, 0: nothing asked */
    } cases[] = {{"SkylakeX", 512}, {"skylakex", 512}, {"SapphireRapids", 512}, {"Cooperlake", 512},
                 {"Haswell", 2},    {"ZEN", 2},        {"Prescott", 0},       {"", 0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        Err e;
        setenv("OPENBLAS_CORETYPE", cases[i].name, 1);
        int runs = cases[i].need == 512 ? has512 : cases[i].need == 2 ? has2 : 1;
        int st = ops_isa_from_env(&e);
        if (runs) {
            assert_int_equal(st, ST_OK);
            continue;
        }
        assert_int_equal(st, ST_UNSUPPORTED);
        assert_int_equal(strncmp(e.msg, "OPENBLAS_CORETYPE=", 18), 0);
        assert_non_null(strstr(e.msg, cases[i].name));
        assert_non_null(strstr(e.msg, cases[i].need == 512 ? "AVX-512" : "AVX2"));
        assert_null(strchr(e.msg, '\n'));
    }
    if (was) setenv("OPENBLAS_CORETYPE", saved, 1);
    else unsetenv("OPENBLAS_CORETYPE");
}

/* By default the path that reads copies in eights (AVX2, rows a multiple
 * of 8) has them made for Q4_0, Q4_K, Q6_K and Q8_0 (ops_rows8); LLM_ROWS8=1
 * leaves Q8_0's rows as they are (its common bits), 0 turns every copy off,
 * 2 is the default again; anything else is one line naming the variable
 * and changes nothing. */
static void llm_rows8_turns_the_copies_off_and_a_bad_value_is_a_one_line_error(void **state) {
    (void)state;
    Err e;
    OpsIsa saved = ops_isa(), got;
    int avx2 = ops_parse_isa("avx2", &got, &e) == ST_OK;
    ops_set_isa(OPS_AVX2);   /* the generic path where the CPU lacks AVX2 */
    assert_int_equal(ops_rows8(DT_Q4_0, 64), avx2);
    assert_int_equal(ops_rows8(DT_Q4_0, 60), 0);
    assert_int_equal(ops_rows8(DT_Q8_0, 64), avx2);
    assert_int_equal(ops_rows8(DT_Q8_0, 60), 0);
    assert_int_equal(ops_rows8(DT_Q4_K, 64), avx2);
    assert_int_equal(ops_rows8(DT_Q4_K, 60), 0);
    assert_int_equal(ops_rows8(DT_Q6_K, 64), avx2);
    assert_int_equal(ops_rows8(DT_Q5_K, 64), 0);
    setenv("LLM_ROWS8", "1", 1);
    assert_int_equal(ops_isa_from_env(&e), ST_OK);
    assert_int_equal(ops_rows8(DT_Q8_0, 64), 0);   /* Q8_0's common bits */
    assert_int_equal(ops_rows8(DT_Q4_0, 64), avx2);
    assert_int_equal(ops_rows8(DT_Q4_K, 64), avx2);
    setenv("LLM_ROWS8", "0", 1);
    assert_int_equal(ops_isa_from_env(&e), ST_OK);
    assert_int_equal(ops_rows8(DT_Q4_0, 64), 0);
    assert_int_equal(ops_rows8(DT_Q4_K, 64), 0);
    setenv("LLM_ROWS8", "3", 1);
    assert_int_equal(ops_isa_from_env(&e), ST_ARG);
    assert_int_equal(strncmp(e.msg, "LLM_ROWS8: ", 11), 0);
    assert_non_null(strstr(e.msg, "'3'"));
    assert_null(strchr(e.msg, '\n'));
    assert_int_equal(ops_rows8(DT_Q4_0, 64), 0);
    setenv("LLM_ROWS8", "2", 1);
    assert_int_equal(ops_isa_from_env(&e), ST_OK);
    assert_int_equal(ops_rows8(DT_Q4_0, 64), avx2);
    assert_int_equal(ops_rows8(DT_Q8_0, 64), avx2);
    ops_set_isa(OPS_PLAIN);
    assert_int_equal(ops_rows8(DT_Q4_0, 64), 0);
    unsetenv("LLM_ROWS8");
    ops_set_isa(saved);
}

/* LLM_ISA sets the path at start-up; unset or empty leaves the default; a bad
 * value is one line that starts with the variable's name, and changes
 * nothing. */
static void llm_isa_sets_the_path_and_a_bad_value_is_a_one_line_error(void **state) {
    (void)state;
    OpsIsa saved = ops_isa();
    Err e;
    setenv("LLM_ISA", "plain", 1);
    assert_int_equal(ops_isa_from_env(&e), ST_OK);
    assert_int_equal(ops_isa(), OPS_PLAIN);
    setenv("LLM_ISA", "best", 1);
    assert_int_equal(ops_isa_from_env(&e), ST_OK);
    assert_int_equal(ops_isa(), ops_best_isa());
    ops_set_isa(OPS_PLAIN);
    setenv("LLM_ISA", "", 1);
    assert_int_equal(ops_isa_from_env(&e), ST_OK);
    assert_int_equal(ops_isa(), OPS_PLAIN);
    unsetenv("LLM_ISA");
    assert_int_equal(ops_isa_from_env(&e), ST_OK);
    assert_int_equal(ops_isa(), OPS_PLAIN);
    setenv("LLM_ISA", "fastest", 1);
    assert_int_equal(ops_isa_from_env(&e), ST_ARG);
    print_message("           LLM_ISA=fastest: %s\n", e.msg);
    assert_int_equal(strncmp(e.msg, "LLM_ISA: ", 9), 0);
    assert_non_null(strstr(e.msg, "'fastest'"));
    assert_null(strchr(e.msg, '\n'));
    assert_int_equal(ops_isa(), OPS_PLAIN);
    unsetenv("LLM_ISA");
    ops_set_isa(saved);
}

/* ------------------------------------------------- the small kernels */

static void rmsnorm_matches_double_precision(void **state) {
    (void)state;
    enum { n = 2048 };
    float *x = make_activations(1, n, 41), *w = make_activations(1, n, 42), out[n];
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    double scale = 1.0 / sqrt(ss / n + 1e-5);
    rmsnorm(out, x, w, n, 1e-5f);
    for (int i = 0; i < n; i++) assert_float_equal(out[i], x[i] * scale * w[i], 1e-4 * fabs(x[i] * scale * w[i]) + 1e-6);
    rmsnorm(x, x, w, n, 1e-5f);   /* in place */
    assert_memory_equal(x, out, sizeof out);
    free(x), free(w);
}

static void softmax_sums_to_one_and_survives_large_inputs(void **state) {
    (void)state;
    float x[5] = {1000.0f, 999.0f, -1000.0f, 1000.0f, 0.0f};
    softmax(x, 5);
    double e1 = exp(-1.0), z = 2 + e1;
    assert_float_equal(x[0], 1 / z, 1e-6);
    assert_float_equal(x[1], e1 / z, 1e-6);
    assert_float_equal(x[2], 0.0, 1e-30);
    assert_float_equal(x[0] + x[1] + x[2] + x[3] + x[4], 1.0, 1e-6);
}

static void rope_rotates_pairs_by_the_given_angles(void **state) {
    (void)state;
    /* 2 heads of 6 dims, only the first 4 rotated */
    float x[12], cs[4] = {cosf(0.5f), sinf(0.5f), cosf(2.0f), sinf(2.0f)};
    for (int i = 0; i < 12; i++) x[i] = (float)(i + 1);
    rope(x, 2, 6, 4, cs);
    for (int h = 0; h < 2; h++) {
        float *v = x + 6 * h, base = (float)(6 * h + 1);
        assert_float_equal(v[0], base * cosf(0.5f) - (base + 1) * sinf(0.5f), 1e-5);
        assert_float_equal(v[1], base * sinf(0.5f) + (base + 1) * cosf(0.5f), 1e-5);
        assert_float_equal(v[2], (base + 2) * cosf(2.0f) - (base + 3) * sinf(2.0f), 1e-5);
        assert_float_equal(v[3], (base + 2) * sinf(2.0f) + (base + 3) * cosf(2.0f), 1e-5);
        assert_true(v[4] == base + 4 && v[5] == base + 5);   /* untouched */
    }
}

/* NEOX's pairs are the halves of the rotated part: dim i with dim i + n_rot/2. */
static void rope_neox_rotates_the_halves_by_the_given_angles(void **state) {
    (void)state;
    float x[12], cs[4] = {cosf(0.5f), sinf(0.5f), cosf(2.0f), sinf(2.0f)};
    for (int i = 0; i < 12; i++) x[i] = (float)(i + 1);
    rope_neox(x, 2, 6, 4, cs);
    for (int h = 0; h < 2; h++) {
        float *v = x + 6 * h, base = (float)(6 * h + 1);
        /* pair 0: dims 0 and 2 by 0.5; pair 1: dims 1 and 3 by 2.0 */
        assert_float_equal(v[0], base * cosf(0.5f) - (base + 2) * sinf(0.5f), 1e-5);
        assert_float_equal(v[2], base * sinf(0.5f) + (base + 2) * cosf(0.5f), 1e-5);
        assert_float_equal(v[1], (base + 1) * cosf(2.0f) - (base + 3) * sinf(2.0f), 1e-5);
        assert_float_equal(v[3], (base + 1) * sinf(2.0f) + (base + 3) * cosf(2.0f), 1e-5);
        assert_true(v[4] == base + 4 && v[5] == base + 5);   /* untouched */
    }
}

static void swiglu_is_silu_of_h_times_g(void **state) {
    (void)state;
    float h[4] = {-3.0f, 0.0f, 0.5f, 20.0f}, g[4] = {2.0f, 5.0f, -1.0f, 0.25f};
    float want[4];
    for (int i = 0; i < 4; i++) want[i] = (float)(h[i] / (1.0 + exp(-(double)h[i])) * g[i]);
    swiglu(h, g, 4);
    for (int i = 0; i < 4; i++) assert_float_equal(h[i], want[i], 1e-6 * fabsf(want[i]) + 1e-7);
}


/* ops_pick(c, a, b) is c ? a : b, bit for bit, NaN, signed zeros and
 * infinities among a and b, any non-zero c true. */
static void ops_pick_is_a_conditional_expression(void **state) {
    (void)state;
    const float v[] = {NAN, -0.0f, 0.0f, INFINITY, -INFINITY, 1.5f, -87.0f, 1e-40f};
    const int cs[] = {0, 1, 2, -1};
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++)
            for (int k = 0; k < 4; k++) {
                float got = ops_pick(cs[k], v[i], v[j]), want = cs[k] ? v[i] : v[j];
                assert_memory_equal(&got, &want, sizeof got);
            }
}

/* ops_exp one call at a time: through a pointer the compiler cannot see
 * through, so no loop around it is vectorized. */
static float exp_one(float x) { return ops_exp(x); }
static float (*volatile exp_alone)(float) = exp_one;

/* swiglu's loop (vectorized where the compiler can) against one value at a
 * time, bit for bit: values across the range, past both clamps,
 * infinities and a NaN. */
static void swiglu_vectorized_gives_the_bits_of_one_value_at_a_time(void **state) {
    (void)state;
    enum { N = 4099 };   /* not a multiple of any vector width */
    float *h = malloc(sizeof(float) * N), *g = malloc(sizeof(float) * N), *want = malloc(sizeof(float) * N);
    assert_true(h && g && want);
    for (int i = 0; i < N; i++) {
        h[i] = (float)(i - N / 2) * 0.0517f;   /* -106 .. 106 */
        g[i] = 1.0f + (float)(i % 13) * 0.25f;
    }
    h[7] = NAN, h[8] = INFINITY, h[9] = -INFINITY, h[10] = -0.0f, h[11] = 1e-30f, h[12] = -1e4f;
    for (int i = 0; i < N; i++) want[i] = h[i] / (1.0f + exp_alone(-h[i])) * g[i];
    swiglu(h, g, N);
    assert_memory_equal(h, want, sizeof(float) * N);
    free(h), free(g), free(want);
}

/* ops_exp against double-precision exp over the range softmax and SiLU use:
 * within 3 ulp (relative 3.6e-7) everywhere, clamped values beyond it. */
static void fast_exp_is_within_three_ulp_of_exp(void **st) {
    double worst = 0;
    for (float x = -87.0f; x <= 88.0f; x += 0.000731f) {
        double want = exp((double)x), got = ops_exp(x);
        double rel = fabs(got - want) / want;
        if (rel > worst) worst = rel;
    }
    print_message("           worst relative error of ops_exp: %.3g\n", worst);
    assert_true(worst < 3.6e-7);
    assert_true(ops_exp(-1000.0f) >= 0.0f && ops_exp(-1000.0f) < 1e-37f);
    assert_true(isfinite(ops_exp(1000.0f)));
}

static void softmax_matches_the_libm_reference(void **st) {
    enum { N = 1000 };
    float a[N], b[N];
    for (int i = 0; i < N; i++) a[i] = b[i] = (float)(20.0 * sin(i * 0.37) - 5.0);
    softmax(a, N);
    softmax_ref(b, N);
    double sum = 0;
    for (int i = 0; i < N; i++) {
        assert_true(fabs(a[i] - b[i]) <= 2e-6 * b[i] + 1e-30);
        sum += a[i];
    }
    assert_true(fabs(sum - 1.0) < 1e-5);
}

int main(int argc, char **argv) {
    select_tests(argc, argv);
    print_message("kernels: %s (best on this CPU: %s)\n", ops_isa_name(ops_isa()),
                  ops_isa_name(ops_best_isa()));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fast_exp_is_within_three_ulp_of_exp),
        cmocka_unit_test(softmax_matches_the_libm_reference),
        cmocka_unit_test(fp16_round_trips_all_65536_halves_and_keeps_nan_class),
        cmocka_unit_test(fp16_widening_gives_the_documented_values),
        cmocka_unit_test(branchless_fp16_widening_equals_the_reference_for_every_half),
        cmocka_unit_test(fp32_to_fp16_rounds_ties_to_even),
        cmocka_unit_test(fp32_to_fp16_rounds_subnormals_ties_to_even),
        cmocka_unit_test(fp32_to_fp16_overflows_to_infinity_from_65520),
        cmocka_unit_test(fp16_conversions_agree_with_the_f16c_instructions),
        cmocka_unit_test(quantize_row_q8_0_of_zeros_is_all_zero),
        cmocka_unit_test(quantize_row_q8_0_rounds_ties_to_even),
        cmocka_unit_test(quantize_row_q8_0_keeps_extreme_values_in_range),
        cmocka_unit_test(quantize_row_q8_0_fast_path_is_bit_identical_to_reference),
        cmocka_unit_test(act_pack_on_avx2_is_bit_identical_to_reference),
        cmocka_unit_test(quantize_row_q8_k_fast_path_is_bit_identical_to_reference),
        cmocka_unit_test(f32_matmul_matches_plain_reference),
        cmocka_unit_test(f16_matmul_matches_plain_reference),
        cmocka_unit_test(bf16_matmul_matches_plain_reference),
        cmocka_unit_test(bf16_widens_exactly_and_rounds_to_nearest_even),
        cmocka_unit_test(ops_exp_of_nan_is_nan),
        cmocka_unit_test(q8_0_matmul_matches_plain_reference),
        cmocka_unit_test(float_matmul_matches_reference_on_both_sides_of_each_path),
        cmocka_unit_test(matmul_matches_reference_at_model_widths),
        cmocka_unit_test(q8_0_every_path_gives_the_reference_bits),
        cmocka_unit_test(q8_0_q4_0_and_q4_k_on_amx_tiles_give_the_blocks_reference_bits),
        cmocka_unit_test(q8_0_prefill_rows_equal_decode_rows_bitwise),
        cmocka_unit_test(small_float_batches_equal_single_tokens_bitwise),
        cmocka_unit_test(half_rows_of_one_token_give_the_same_bits_on_every_fast_path),
        cmocka_unit_test(float_tiles_give_the_same_bits_on_avx2_and_avx512),
        cmocka_unit_test(k_formats_on_avx2_give_the_generic_bits),
        cmocka_unit_test(in_eights_holds_every_block_where_the_layout_says),
        cmocka_unit_test(in_eights_on_avx2_gives_the_blocks_reference_bits),
        cmocka_unit_test(q8_0_small_batches_equal_single_tokens_bitwise),
        cmocka_unit_test(matmul_gives_same_results_on_one_and_two_threads),
        cmocka_unit_test(decoding_one_or_four_rows_at_a_time_gives_the_same_bits),
        cmocka_unit_test(llm_decode_rows_sets_the_rows_and_a_bad_value_is_a_one_line_error),
        cmocka_unit_test(llm_amx_turns_the_tiles_off_and_a_bad_value_is_a_one_line_error),
        cmocka_unit_test(a_blas_coretype_this_cpu_cannot_run_is_a_one_line_error),
        cmocka_unit_test(llm_rows8_turns_the_copies_off_and_a_bad_value_is_a_one_line_error),
        cmocka_unit_test(matmul_scratch_does_not_depend_on_threads),
        cmocka_unit_test(matmul_group_gives_each_matmuls_results),
        cmocka_unit_test(attention_products_match_double_precision),
        cmocka_unit_test(small_formats_match_a_float64_loop_on_every_path),
        cmocka_unit_test(small_formats_give_the_same_bits_by_tokens_and_threads),
        cmocka_unit_test(small_formats_on_the_plain_path_are_the_dequantized_float_dot),
        cmocka_unit_test(quantize_row_q8_k_follows_llama_cpp_rule),
        cmocka_unit_test(q4_0_and_q5_0_blocks_are_laid_out_as_published),
        cmocka_unit_test(q4_1_and_q5_1_blocks_are_laid_out_as_published),
        cmocka_unit_test(q4_k_and_q5_k_super_blocks_are_laid_out_as_published),
        cmocka_unit_test(q6_k_super_blocks_are_laid_out_as_published),
        cmocka_unit_test(quantize_row_round_trips_within_half_a_step),
        cmocka_unit_test(quantize_row_survives_non_finite_and_extreme_input),
        cmocka_unit_test(plain_isa_sends_every_matmul_through_the_reference_loops),
        cmocka_unit_test(default_isa_is_the_best_the_cpu_has),
        cmocka_unit_test(read_sum_adds_every_word_of_every_length),
        cmocka_unit_test(softmax_on_the_plain_isa_is_the_libm_reference),
        cmocka_unit_test(isa_names_parse_and_anything_else_is_a_one_line_error),
        cmocka_unit_test(llm_isa_sets_the_path_and_a_bad_value_is_a_one_line_error),
        cmocka_unit_test(rmsnorm_matches_double_precision),
        cmocka_unit_test(softmax_sums_to_one_and_survives_large_inputs),
        cmocka_unit_test(rope_rotates_pairs_by_the_given_angles),
        cmocka_unit_test(rope_neox_rotates_the_halves_by_the_given_angles),
        cmocka_unit_test(swiglu_is_silu_of_h_times_g),
        cmocka_unit_test(ops_pick_is_a_conditional_expression),
        cmocka_unit_test(swiglu_vectorized_gives_the_bits_of_one_value_at_a_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
