/* kbench.c - microbenchmark of matmul() on TinyLlama-shaped matrices.
 *
 * For each weight type and shape N x K it prints
 *   T = 1:   GB/s of weight bytes streamed (decode: one token, memory-bound)
 *   T = 128: GFLOP/s, 2 * N * K * T per call (prefill: compute-bound)
 * with 1 and 2 threads, each the median of several timed runs.
 *
 * Decoding reads every weight of a model once per token, and a model is far
 * larger than the caches, so the T = 1 runs cycle through enough copies of
 * the matrix (256 MiB or more) that each call reads from memory, not from L3.
 *
 * Build:
 *   gcc -O3 -march=native -fopenmp -Isrc tools/kbench.c src/ops.c src/mem.c src/err.c \
 *       -o build/kbench -lopenblas -lm
 * Run (OpenBLAS picks its kernels by OPENBLAS_CORETYPE; name the real CPU):
 *   OPENBLAS_CORETYPE=SkylakeX build/kbench [--isa plain|avx512] [--type F32|F16|Q8_0]
 *       [--shape NxK] [--reps R] [--threads 1|2|both] [--pool-mib M]
 * --pool-mib 0 keeps one copy of the matrix, so small ones run from cache:
 * that shows what the kernel can do when memory is not the limit. */
#include "mem.h"
#include "ops.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    OpsIsa isa;
    int type;          /* -1: all */
    int N, K;          /* 0: all shapes */
    int reps;          /* timed runs per figure; the median is printed */
    int threads;       /* 0: both 1 and 2 */
    double pool_mib;   /* T = 1 cycles through this much memory; 0: one copy, cache-hot */
} Options;

static const int SHAPES[][2] = {{2048, 2048}, {256, 2048}, {5632, 2048}, {2048, 5632}, {32000, 2048}};
static const DType TYPES[] = {DT_F32, DT_F16, DT_Q8_0};
enum { PREFILL_T = 128 };
static const double RUN_SECONDS = 0.03;                  /* length of one timed run */

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t next_random(uint64_t *s) {   /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float uniform(uint64_t *s) { return (float)(next_random(s) >> 40) * 0x1p-24f * 2.0f - 1.0f; }

/* A matrix of random weights; speed does not depend on the values, but they
 * are kept finite so the arithmetic is what a real model does. */
static void fill_weights(void *data, DType type, int N, int K, uint64_t *s) {
    size_t n = (size_t)N * K;
    if (type == DT_F32) {
        float *w = data;
        for (size_t i = 0; i < n; i++) w[i] = uniform(s);
    } else if (type == DT_F16) {
        uint16_t *w = data;
        for (size_t i = 0; i < n; i++) w[i] = fp32_to_fp16(uniform(s));
    } else {
        BlockQ8_0 *b = data;
        for (size_t i = 0; i < n / QK8_0; i++) {
            b[i].d = fp32_to_fp16(0.01f * (1.0f + uniform(s)));
            for (int j = 0; j < QK8_0; j++) b[i].qs[j] = (int8_t)(next_random(s) % 255 - 127);
        }
    }
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median over reps runs of `work units per second`, where one call of matmul
 * is `per_call` units; calls cycle through the copies of W. */
static double median_rate(float *out, const float *x, const Mat *W, int copies, size_t matrix_bytes,
                          int T, void *scratch, OpsIsa isa, int reps, double per_call) {
    double rates[64];
    if (reps > 64) reps = 64;
    for (int r = 0; r < reps; r++) {
        long calls = 0;
        double t0 = now_seconds(), t1;
        do {
            Mat m = *W;
            m.data = (const uint8_t *)W->data + (size_t)(calls % copies) * matrix_bytes;
            matmul_isa(out, x, &m, T, scratch, isa);
            calls++;
            t1 = now_seconds();
        } while (t1 - t0 < RUN_SECONDS);
        rates[r] = per_call * calls / (t1 - t0);
    }
    qsort(rates, (size_t)reps, sizeof rates[0], by_value);
    return reps % 2 ? rates[reps / 2] : 0.5 * (rates[reps / 2 - 1] + rates[reps / 2]);
}

/* The ceiling: GB/s of a plain read of `bytes` bytes (summed as integers, so
 * the compiler vectorizes it), split over `threads` threads as matmul splits. */
static double read_rate(const uint64_t *p, size_t bytes, int threads, int reps) {
    double rates[64];
    size_t n = bytes / 8;
    if (reps > 64) reps = 64;
    for (int r = 0; r < reps; r++) {
        uint64_t sum = 0;
        double t0 = now_seconds();
#pragma omp parallel for num_threads(threads) reduction(+ : sum) schedule(static)
        for (size_t i = 0; i < n; i++) sum += p[i];
        double t1 = now_seconds();
        rates[r] = bytes * 1e-9 / (t1 - t0) + (sum == 42 ? 1e-9 : 0.0);   /* keep the sum */
    }
    qsort(rates, (size_t)reps, sizeof rates[0], by_value);
    return reps % 2 ? rates[reps / 2] : 0.5 * (rates[reps / 2 - 1] + rates[reps / 2]);
}

static int bench_memory(const Options *o) {
    size_t bytes = (size_t)(o->pool_mib > 0 ? o->pool_mib : 256) * 1024 * 1024;
    uint64_t *p = mem_alloc(bytes);
    if (!p) return -1;
    memset(p, 1, bytes);
    printf("%-19s  %9.2f  %9.2f\n", "memory read", read_rate(p, bytes, 1, o->reps),
           read_rate(p, bytes, 2, o->reps));
    mem_free(p);
    return 0;
}

/* One line of the table: returns 0, or -1 if memory ran out. */
static int bench_one(DType type, int N, int K, const Options *o) {
    size_t matrix_bytes = dtype_row_bytes(type, K) * (size_t)N;
    int copies = (int)(o->pool_mib * 1024 * 1024 / (double)matrix_bytes) + 1;
    uint8_t *pool = mem_alloc(matrix_bytes * copies);
    float *x = mem_alloc(sizeof(float) * (size_t)PREFILL_T * K);
    float *out = mem_alloc(sizeof(float) * (size_t)PREFILL_T * N);
    void *scratch = mem_alloc(matmul_scratch_bytes(type, PREFILL_T, K) + 1);
    if (!pool || !x || !out || !scratch) {
        mem_free(pool), mem_free(x), mem_free(out), mem_free(scratch);
        fprintf(stderr, "kbench: out of memory for %s %dx%d\n", dtype_name(type), N, K);
        return -1;
    }
    uint64_t seed = 42;
    fill_weights(pool, type, N, K, &seed);
    for (int c = 1; c < copies; c++) memcpy(pool + (size_t)c * matrix_bytes, pool, matrix_bytes);
    for (size_t i = 0; i < (size_t)PREFILL_T * K; i++) x[i] = uniform(&seed);

    Mat W = {type, N, K, pool};
    printf("%-5s %5d x %-5d", dtype_name(type), N, K);
    for (int th = 1; th <= 2; th++) {
        if (o->threads && o->threads != th) {
            printf("  %9s", "-");
            continue;
        }
        ops_set_threads(th);
        double gbs = median_rate(out, x, &W, copies, matrix_bytes, 1, scratch, o->isa, o->reps,
                                 (double)matrix_bytes * 1e-9);
        printf("  %9.2f", gbs);
    }
    for (int th = 1; th <= 2; th++) {
        if (o->threads && o->threads != th) {
            printf("  %9s", "-");
            continue;
        }
        ops_set_threads(th);
        double gf = median_rate(out, x, &W, 1, matrix_bytes, PREFILL_T, scratch, o->isa, o->reps,
                                2.0 * N * K * PREFILL_T * 1e-9);
        printf("  %9.1f", gf);
    }
    printf("\n");
    fflush(stdout);
    mem_free(pool), mem_free(x), mem_free(out), mem_free(scratch);
    return 0;
}

static int parse_args(Options *o, int argc, char **argv) {
    *o = (Options){ops_best_isa(), -1, 0, 0, 5, 0, 256.0};   /* 256 MiB: well past any L3 */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return -1;
        if (!strcmp(a, "--isa")) o->isa = !strcmp(v, "plain") ? OPS_PLAIN : OPS_AVX512;
        else if (!strcmp(a, "--type")) o->type = !strcmp(v, "F32") ? DT_F32 : !strcmp(v, "F16") ? DT_F16 : DT_Q8_0;
        else if (!strcmp(a, "--shape")) {
            if (sscanf(v, "%dx%d", &o->N, &o->K) != 2) return -1;
        } else if (!strcmp(a, "--reps")) o->reps = atoi(v);
        else if (!strcmp(a, "--threads")) o->threads = !strcmp(v, "both") ? 0 : atoi(v);
        else if (!strcmp(a, "--pool-mib")) o->pool_mib = atof(v);
        else return -1;
        i++;
    }
    return o->reps >= 1 ? 0 : -1;
}

int main(int argc, char **argv) {
    Options o;
    if (parse_args(&o, argc, argv)) {
        fprintf(stderr, "usage: kbench [--isa plain|avx512] [--type F32|F16|Q8_0] [--shape NxK] "
                        "[--reps R] [--threads 1|2|both] [--pool-mib M]\n");
        return 2;
    }
    const char *core = getenv("OPENBLAS_CORETYPE");
    printf("# command:");
    for (int i = 0; i < argc; i++) printf(" %s", argv[i]);
    printf("\n# kernels: %s (best on this CPU: %s), OPENBLAS_CORETYPE=%s, medians of %d runs\n",
           ops_isa_name(o.isa), ops_isa_name(ops_best_isa()), core ? core : "(unset)", o.reps);
    printf("# T=1: GB/s of weight bytes, cycling through %.0f MiB; T=%d: GFLOP/s\n", o.pool_mib, PREFILL_T);
    printf("%-5s %-13s  %9s  %9s  %9s  %9s\n", "type", "N x K", "T1 1thr", "T1 2thr", "T128 1thr",
           "T128 2thr");
    if (bench_memory(&o)) return 1;
    for (size_t t = 0; t < sizeof TYPES / sizeof TYPES[0]; t++) {
        if (o.type >= 0 && o.type != (int)TYPES[t]) continue;
        for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++) {
            int N = o.N ? o.N : SHAPES[s][0], K = o.N ? o.K : SHAPES[s][1];
            if (bench_one(TYPES[t], N, K, &o)) return 1;
            if (o.N) break;
        }
    }
    return 0;
}
