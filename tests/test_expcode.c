/* test_expcode.c - the fast tier of the weight codec: BF16 matrices in the
 * fixed-length exponent code (codec/expcode.h, DT_BF16E in formats.h) give
 * every weight back bit for bit, and every product path that reads them
 * (the plain loop, the generic one, the AVX-512 tiles at every T) gives the
 * bits of the same path on the BF16 matrix they were made from, which is
 * itself checked against a product in double precision. */
#include "codec/expcode.h"
#include "kernels/ops.h"
#include "testutil.h"

static uint64_t rng_state;
static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng_state >> 33);
}
static double gauss(void) {   /* Box-Muller */
    double u = (rnd() + 1.0) / 4294967297.0, v = rnd() / 4294967296.0;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* N x K BF16 weights like a trained layer's (Gaussian, sigma 0.02), with
 * `odd` of every 1000 replaced by any 16 bits at all (every exponent, zeros,
 * subnormals, infinities, NaNs). */
static uint16_t *make_bf16(int N, int K, int odd, uint64_t seed) {
    rng_state = seed;
    uint16_t *w = malloc((size_t)N * K * 2);
    for (size_t i = 0; i < (size_t)N * K; i++)
        w[i] = (int)(rnd() % 1000) < odd ? (uint16_t)rnd() : fp32_to_bf16((float)(0.02 * gauss()));
    return w;
}

/* The fast tier of w, as the loader makes it: count, choose, write (in
 * pieces of `piece` rows). Frees with free(*mem). */
static Mat encode(const uint16_t *w, int N, int K, int piece, Bf16eData *d, void **mem, uint64_t *escapes) {
    uint64_t hist[256] = {0};
    uint8_t exps[8];
    ec_count(hist, w, (size_t)N * K);
    *escapes = ec_table(hist, exps);
    size_t bytes = ec_bytes(N, K, *escapes);
    assert_true(bytes > 0);
    *mem = malloc(bytes);
    EcWriter wr;
    Mat W;
    ec_writer_init(&wr, *mem, N, K, exps, *escapes, &W, d);
    Err e;
    for (int n = 0; n < N; n += piece)
        assert_int_equal(ec_write_rows(&wr, w + (size_t)n * K, N - n < piece ? N - n : piece, &e), ST_OK);
    assert_int_equal(wr.esc_at, *escapes);
    assert_int_equal(d->esc_row[N], *escapes);
    return W;
}

static void every_weight_comes_back_bit_for_bit(void **state) {
    (void)state;
    static const int shapes[][2] = {{1, 64}, {3, 128}, {17, 640}, {64, 2048}};
    static const int odds[] = {0, 5, 200, 1000};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t o = 0; o < sizeof odds / sizeof odds[0]; o++) {
            int N = shapes[s][0], K = shapes[s][1];
            uint16_t *w = make_bf16(N, K, odds[o], 11 + s * 7 + o), *back = malloc((size_t)K * 2);
            Bf16eData d;
            void *mem;
            uint64_t esc;
            Mat W = encode(w, N, K, 5, &d, &mem, &esc);
            for (int n = 0; n < N; n++) {
                bf16e_row_to_bf16(back, &W, n);
                assert_memory_equal(back, w + (size_t)n * K, (size_t)K * 2);
                float f[2048];
                dequantize_mat_row(f, &W, n);
                for (int k = 0; k < K; k++) assert_int_equal(fp32_to_bf16(f[k]) >> 7 & 0xff, w[(size_t)n * K + k] >> 7 & 0xff);
            }
            free(mem);
            free(back);
            free(w);
        }
}

static void the_table_is_the_seven_most_frequent_exponents(void **state) {
    (void)state;
    uint64_t hist[256] = {0};
    for (int e = 0; e < 256; e++) hist[e] = (uint64_t)(e * 37 % 101);   /* distinct enough, some ties */
    uint8_t exps[8];
    uint64_t esc = ec_table(hist, exps), total = 0, kept = 0;
    for (int e = 0; e < 256; e++) total += hist[e];
    for (int c = 0; c < 7; c++) {
        kept += hist[exps[c]];
        for (int e = 0; e < 256; e++) {   /* nothing left out is more frequent */
            int in = 0;
            for (int j = 0; j < 7; j++) in |= exps[j] == e;
            if (!in) assert_true(hist[e] <= hist[exps[c]]);
        }
    }
    assert_int_equal(esc, total - kept);
    assert_int_equal(exps[7], 0);
}

static void gaussian_weights_cost_under_72_percent_of_bf16(void **state) {
    (void)state;
    int N = 256, K = 2048;
    uint16_t *w = make_bf16(N, K, 0, 5);
    Bf16eData d;
    void *mem;
    uint64_t esc;
    encode(w, N, K, N, &d, &mem, &esc);
    double ratio = (double)(ec_bytes(N, K, esc) - 64) / ((double)N * K * 2);
    print_message("Gaussian weights: %.4f of BF16, %.2f%% escaped\n", ratio, 100.0 * esc / ((double)N * K));
    assert_true(ratio > 11.0 / 16 && ratio < 0.72);
    free(mem);
    free(w);
}

static void writing_more_escapes_than_counted_is_refused(void **state) {
    (void)state;
    int N = 2, K = 64;
    uint16_t *w = make_bf16(N, K, 1000, 3);   /* every value random: many exponents */
    uint64_t hist[256] = {0};
    uint8_t exps[8];
    ec_count(hist, w, K);   /* the first row's counts only */
    uint64_t esc = ec_table(hist, exps);
    void *mem = malloc(ec_bytes(N, K, esc));
    EcWriter wr;
    Mat W;
    Bf16eData d;
    Err e;
    ec_writer_init(&wr, mem, N, K, exps, esc, &W, &d);
    assert_int_equal(ec_write_rows(&wr, w, 1, &e), ST_OK);
    assert_int_equal(ec_write_rows(&wr, w + K, 1, &e), ST_FORMAT);
    assert_non_null(strstr(e.msg, "more escaped exponents"));
    assert_int_equal(ec_write_rows(&wr, w, 5, &e), ST_FORMAT);   /* past N */
    free(mem);
    free(w);
}

/* out on path isa for W and for its BF16 original B: the same bits; and the
 * plain path within float rounding of a double-precision product. */
static void check_products(const Mat *W, const Mat *B, const uint16_t *w, int T, OpsIsa isa) {
    int N = W->N, K = W->K;
    float *x = malloc((size_t)T * K * 4), *o1 = malloc((size_t)T * N * 4), *o2 = malloc((size_t)T * N * 4);
    for (int i = 0; i < T * K; i++) x[i] = (float)gauss();
    void *scratch = malloc(matmul_scratch_bytes(DT_BF16E, T, K));
    matmul_isa(o1, x, W, T, scratch, isa);
    matmul_isa(o2, x, B, T, scratch, isa);
    for (int i = 0; i < T * N; i++)
        if (memcmp(&o1[i], &o2[i], 4)) {
            print_error("isa %s T %d N %d K %d: out[%d] %.9g, BF16 gives %.9g\n", ops_isa_name(isa), T, N, K, i,
                        (double)o1[i], (double)o2[i]);
            fail();
        }
    if (isa == OPS_PLAIN)
        for (int t = 0; t < T; t++)
            for (int n = 0; n < N; n++) {
                double ref = 0, mag = 0;
                for (int k = 0; k < K; k++) {
                    double p = (double)bf16_to_fp32(w[(size_t)n * K + k]) * x[(size_t)t * K + k];
                    ref += p;
                    mag += fabs(p);
                }
                assert_true(fabs(o1[(size_t)t * N + n] - ref) <= 1e-5 * mag + 1e-30);
            }
    free(scratch);
    free(x);
    free(o1);
    free(o2);
}

static void every_path_gives_the_bits_of_bf16(void **state) {
    (void)state;
    int saved = ops_threads();
    static const int Ts[] = {1, 2, 3, 4, 5, 7, 8, 16, 17, 20, 33, 36, 40, 48};
    static const int shapes[][2] = {{37, 128}, {130, 640}};
    OpsIsa isas[4];
    int n_isas = cpu_isas(isas, 1);
    for (size_t s = 0; s < 2; s++) {
        int N = shapes[s][0], K = shapes[s][1];
        uint16_t *w = make_bf16(N, K, 20, 100 + s);   /* 2% odd values: escapes in most blocks */
        for (size_t i = 0; i < (size_t)N * K; i++) {  /* below 2^33: finite products, for the double check */
            unsigned ex = w[i] >> 7 & 0xff;
            if (ex > 160) w[i] = (uint16_t)((w[i] & 0x807f) | (ex % 160) << 7);
        }
        Bf16eData d;
        void *mem;
        uint64_t esc;
        Mat W = encode(w, N, K, 8, &d, &mem, &esc), B = {DT_BF16, N, K, w, NULL};
        assert_true(esc > 0);
        if (ops_best_isa() != OPS_AVX512) print_message("no AVX-512 here: its tiles are not run\n");
        for (int i = 0; i < n_isas; i++) {
            for (size_t t = 0; t < sizeof Ts / sizeof Ts[0]; t++)
                for (int th = 1; th <= 2; th++) {
                    ops_set_threads(th);
                    check_products(&W, &B, w, Ts[t], isas[i]);
                    if (isas[i] == OPS_PLAIN) break;
                }
        }
        free(mem);
        free(w);
    }
    ops_set_threads(saved);
}

int main(int argc, char **argv) {
    select_tests(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_weight_comes_back_bit_for_bit),
        cmocka_unit_test(the_table_is_the_seven_most_frequent_exponents),
        cmocka_unit_test(gaussian_weights_cost_under_72_percent_of_bf16),
        cmocka_unit_test(writing_more_escapes_than_counted_is_refused),
        cmocka_unit_test(every_path_gives_the_bits_of_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
