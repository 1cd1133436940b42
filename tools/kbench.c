/* kbench.c - microbenchmark of matmul() on TinyLlama-shaped matrices.
 *
 * For each weight type and shape N x K it prints
 *   T = 1:   GB/s of weight bytes streamed (decode: one token, memory-bound)
 *   T = 128: GFLOP/s, 2 * N * K * T per call (prefill: compute-bound)
 * with 1 and 2 threads, each the median of several timed runs, after one
 * two lines for a read of memory (GB/s, 1 and 2 threads) to compare with: a
 * plain loop, and the best of ceilings.h's five read loops (the ceiling).
 *
 * Decoding reads every weight of a model once per token, and a model is far
 * larger than the caches, so the T = 1 runs cycle through a pool of 256 MiB
 * of weights, each call reading a different matrix, from memory, not L3.
 *
 * The runs go in rounds: each round times every figure once (about 30 ms
 * each), and the table shows the median over the rounds. On a machine shared
 * with other work, a burst of someone else's work then spoils one sample of
 * many figures instead of every sample of a few.
 *
 * Build:
 *   make fast (build/fast/kbench), or by hand with tools/kbench.c, every .c
 *   file of src/kernels/ and src/base/, -O3 -march=native -fopenmp -Isrc,
 *   -lopenblas -lm
 * Run (OpenBLAS picks its kernels by OPENBLAS_CORETYPE; name the real CPU):
 *   OPENBLAS_CORETYPE=SkylakeX build/kbench [--isa plain|generic|avx2|avx512|best] [--type F32|F16|Q8_0|Q4_0|..|Q6_K]
 *       [--shape NxK] [--reps R] [--threads 1|2|both] [--pool-mib M] [--prefill-t T]
 * LLM_DECODE_ROWS=1|4 sets how many rows T = 1 reads side by side (ops.h).
 * --pool-mib 0 keeps one copy of each matrix, so small ones run from cache:
 * that shows what a kernel can do when memory is not the limit. */
#include "ceilings.h"
#include "base/mem.h"
#include "kernels/ops.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_REPS = 64, MAX_CELLS = 64 };

typedef struct {
    OpsIsa isa;
    int type;          /* -1: all */
    int N, K;          /* 0: all shapes */
    int reps;          /* rounds; each figure is the median over them */
    int threads;       /* 0: both 1 and 2 */
    double pool_mib;   /* T = 1 cycles through this much memory; 0: one copy, cache-hot */
    int prefill_T;     /* tokens of the second figure (128) */
} Options;

/* One figure of the table, and its samples. */
typedef struct {
    DType type;        /* ignored for the memory read */
    int N, K, T, threads;
    double samples[MAX_REPS];
} Cell;

static const int SHAPES[][2] = {{2048, 2048}, {256, 2048}, {5632, 2048}, {2048, 5632}, {32000, 2048}};
/* Without --type only the first three run; --type names any of them. */
static const DType TYPES[] = {DT_F32, DT_F16, DT_Q8_0, DT_Q4_0, DT_Q4_1, DT_Q5_0,
                              DT_Q5_1, DT_Q4_K, DT_Q5_K, DT_Q6_K};
enum { N_TYPES = sizeof TYPES / sizeof TYPES[0], N_DEFAULT_TYPES = 3 };
static const double RUN_SECONDS = 0.03;   /* length of one timed run */

static int type_index(DType type) {
    int i = 0;
    while (i < N_TYPES - 1 && TYPES[i] != type) i++;
    return i;
}

/* Whether a run with these options times type t. */
static int type_wanted(int want, int t) { return want < 0 ? t < N_DEFAULT_TYPES : want == (int)TYPES[t]; }

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

/* `bytes` of random weights of a type (whole Q8_0 blocks). Speed does not
 * depend on the values, but they are finite, so the arithmetic is a model's.
 * A few MiB are generated and repeated: generating 256 MiB would take longer
 * than the benchmark. */
static void fill_weights(uint8_t *pool, size_t bytes, DType type) {
    uint64_t s = 42;
    size_t unit = 4u << 20, block = dtype_row_bytes(type, dtype_is_small_quant(type) ? 256 : 32);
    unit = unit / block * block;
    size_t first = bytes < unit ? bytes : unit;
    if (type == DT_F32) {
        for (size_t i = 0; i < first / 4; i++) ((float *)pool)[i] = uniform(&s);
    } else if (type == DT_F16) {
        for (size_t i = 0; i < first / 2; i++) ((uint16_t *)pool)[i] = fp32_to_fp16(uniform(&s));
    } else if (dtype_is_small_quant(type)) {   /* 256 values at a time, rounded by quantize_row */
        float v[256];
        for (size_t i = 0; i < first / block; i++) {
            for (int j = 0; j < 256; j++) v[j] = 0.01f * uniform(&s);
            quantize_row(pool + i * block, v, type, 256);
        }
    } else {
        BlockQ8_0 *b = (BlockQ8_0 *)pool;
        for (size_t i = 0; i < first / sizeof(BlockQ8_0); i++) {
            b[i].d = fp32_to_fp16(0.01f * (1.0f + uniform(&s)));
            for (int j = 0; j < QK8_0; j++) b[i].qs[j] = (int8_t)(next_random(&s) % 255 - 127);
        }
    }
    for (size_t done = first; done < bytes; done += first)
        memcpy(pool + done, pool, bytes - done < first ? bytes - done : first);
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n) {
    double s[MAX_REPS];
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof s[0], by_value);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

/* GB/s of a read of the pool split over `threads` threads: `fast`, the best
 * of ceilings.h's read loops, each run FAST_READ_RUNS times (the ceiling the
 * T = 1 figures are compared with: once each, the F32 tiles decoding in
 * four streams read 1.07-1.18 times it on a Zen 3), otherwise a plain loop
 * of 64-bit sums that the compiler vectorizes, with no prefetch. */
enum { FAST_READ_RUNS = 3 };
static double time_memory_read(const uint8_t *pool, size_t bytes, int threads, int fast) {
    const uint64_t *p = (const uint64_t *)pool;
    size_t n = bytes / 8, per = bytes / (size_t)threads / 16384 * 16384;   /* read_once: 16 KiB steps */
    uint64_t sum = 0;
    if (fast) {
        double best = 0.0;
        for (int w = 0; w < CEIL_READS * FAST_READ_RUNS; w++) {
            double t0 = now_seconds();
#pragma omp parallel for num_threads(threads) reduction(+ : sum) schedule(static)
            for (int i = 0; i < threads; i++) sum += read_once(w % CEIL_READS, pool + per * (size_t)i, per);
            double gbs = per * (size_t)threads * 1e-9 / (now_seconds() - t0);
            if (gbs > best) best = gbs;
        }
        return best + (sum == 42 ? 1e-12 : 0.0);   /* keep the sum */
    }
    double t0 = now_seconds();
#pragma omp parallel for num_threads(threads) reduction(+ : sum) schedule(static)
    for (size_t i = 0; i < n; i++) sum += p[i];
    double t1 = now_seconds();
    return n * 8 * 1e-9 / (t1 - t0) + (sum == 42 ? 1e-12 : 0.0);   /* keep the sum */
}

/* The pool of a Q4_0, Q8_0, Q4_K or Q6_K cell in eights (formats.h), where the path reads them
 * (ops_rows8), or NULL: the whole pool taken as one matrix of rows of K, so
 * that each window of whole matrices is a window of the copy too. The copy
 * is made again when the pool or K changes. */
static uint8_t *g_copy;   /* freed at the end of main */

static const uint8_t *pool_rows8(const Cell *c, const uint8_t *pool, size_t pool_bytes) {
    static const uint8_t *copy_of;
    static int copy_K;
    if (!ops_rows8(c->type, c->N)) return NULL;
    if (!g_copy) {
        if (!(g_copy = mem_alloc(pool_bytes))) return NULL;   /* then the rows as they are */
        mem_advise_huge(g_copy, pool_bytes);
    }
    if (copy_K != c->K || copy_of != pool) {
        size_t row = dtype_row_bytes(c->type, c->K);
        Mat all = {.type = c->type, .N = (int)(pool_bytes / row / 8 * 8), .K = c->K, .data = pool};
        mat_to_rows8(g_copy, &all);
        copy_K = c->K, copy_of = pool;
    }
    return g_copy;
}

/* One timed run of a figure: T = 1 in GB/s, cycling through the pool (when
 * `cycle`); otherwise GFLOP/s on the pool's first matrix. */
static double time_cell(const Cell *c, const uint8_t *pool, size_t pool_bytes, int cycle,
                        const float *x, float *out, void *scratch, OpsIsa isa) {
    size_t matrix_bytes = dtype_row_bytes(c->type, c->K) * (size_t)c->N;
    long copies = c->T == 1 && cycle ? (long)(pool_bytes / matrix_bytes) : 1;
    double per_call = c->T == 1 ? matrix_bytes * 1e-9 : 2.0 * c->N * c->K * c->T * 1e-9;
    ops_set_threads(c->threads);
    const uint8_t *rows8 = pool_rows8(c, pool, pool_bytes);
    long calls = 0;
    double t0 = now_seconds(), t1;
    do {
        size_t at = (size_t)(calls % copies) * matrix_bytes;
        Mat W = {.type = c->type, .N = c->N, .K = c->K, .data = pool + at, .rows8 = rows8 ? rows8 + at : NULL};
        matmul_isa(out, x, &W, c->T, scratch, isa);
        calls++;
        t1 = now_seconds();
    } while (t1 - t0 < RUN_SECONDS);
    return per_call * calls / (t1 - t0);
}

static void usage(FILE *f) {
    fprintf(f, "usage: kbench [--isa plain|generic|avx2|avx512|best] [--type F32|F16|Q8_0|Q4_0|..|Q6_K] [--shape NxK] "
               "[--reps R (1..%d)] [--threads 1|2|both] [--pool-mib M] [--prefill-t T]\n",
            MAX_REPS);
}

/* 0: run; 1: --help was asked for; -1: a bad command line (one line said why). */
static int parse_args(Options *o, int argc, char **argv) {
    static const char *const valued[] = {"--isa", "--type", "--shape", "--reps", "--threads",
                                         "--pool-mib", "--prefill-t"};
    *o = (Options){ops_best_isa(), -1, 0, 0, 7, 0, 256.0, 128};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return 1;
        size_t k = 0;
        while (k < sizeof valued / sizeof valued[0] && strcmp(a, valued[k])) k++;
        if (k == sizeof valued / sizeof valued[0]) {
            fprintf(stderr, "kbench: unknown option %s (see --help)\n", a);
            return -1;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "kbench: %s needs a value\n", a);
            return -1;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--isa")) {
            Err e;
            if (ops_parse_isa(v, &o->isa, &e)) {
                fprintf(stderr, "kbench: --isa: %s\n", e.msg);
                return -1;
            }
        }
        else if (!strcmp(a, "--type")) {
            o->type = -2;
            for (int t = 0; t < N_TYPES; t++)
                if (!strcmp(v, dtype_name((int)TYPES[t]))) o->type = (int)TYPES[t];
            if (o->type == -2) {
                fprintf(stderr, "kbench: --type wants F32, F16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K "
                                "or Q6_K, got '%s'\n", v);
                return -1;
            }
        }
        else if (!strcmp(a, "--shape")) {
            if (sscanf(v, "%dx%d", &o->N, &o->K) != 2) o->N = -1;
        } else if (!strcmp(a, "--reps")) o->reps = atoi(v);
        else if (!strcmp(a, "--threads")) o->threads = !strcmp(v, "both") ? 0 : atoi(v);
        else if (!strcmp(a, "--pool-mib")) o->pool_mib = atof(v);
        else o->prefill_T = atoi(v);   /* --prefill-t */
    }
    int block = o->type >= 0 && dtype_is_small_quant((DType)o->type) ? dtype_block((DType)o->type) : QK8_0;
    int shapes_ok = o->N ? o->N > 0 && o->K > 0 && o->K % block == 0 : 1;
    if (o->reps >= 1 && o->reps <= MAX_REPS && o->prefill_T >= 1 && shapes_ok) return 0;
    fprintf(stderr, "kbench: bad value: --reps wants 1..%d, --prefill-t at least 1, --shape NxK "
                    "with K a multiple of %d\n", MAX_REPS, block);
    return -1;
}

int main(int argc, char **argv) {
    Options o;
    int parsed = parse_args(&o, argc, argv);
    if (parsed == 1) {
        usage(stdout);
        return 0;
    }
    if (parsed) return 2;
    Err env_err;
    if (ops_isa_from_env(&env_err)) {   /* LLM_DECODE_ROWS, LLM_ROWS8 (--isa names the path) */
        fprintf(stderr, "kbench: %s\n", env_err.msg);
        return 2;
    }
    ops_set_isa(o.isa);   /* what ops_rows8 asks */

    /* The figures: for each type and shape, T = 1 then T = prefill, 1 then 2 threads. */
    static Cell cells[MAX_CELLS];
    int n_cells = 0, max_N = 0, max_K = 0;
    size_t pool_bytes = (size_t)(o.pool_mib * 1024 * 1024);
    int n_shapes = o.N ? 1 : (int)(sizeof SHAPES / sizeof SHAPES[0]);
    for (int t = 0; t < N_TYPES; t++) {
        if (!type_wanted(o.type, t)) continue;
        for (int s = 0; s < n_shapes; s++) {
            int N = o.N ? o.N : SHAPES[s][0], K = o.N ? o.K : SHAPES[s][1];
            size_t matrix_bytes = dtype_row_bytes(TYPES[t], K) * (size_t)N;
            if (matrix_bytes > pool_bytes) pool_bytes = matrix_bytes;
            max_N = N > max_N ? N : max_N;
            max_K = K > max_K ? K : max_K;
            for (int T = 1; T <= 2; T++)
                for (int th = 1; th <= 2; th++)
                    if (!o.threads || o.threads == th)
                        cells[n_cells++] = (Cell){TYPES[t], N, K, T == 1 ? 1 : o.prefill_T, th, {0}};
        }
    }
    /* plain then fast reads, 1 and 2 threads */
    Cell reads[4] = {{.threads = 1}, {.threads = 2}, {.threads = 1}, {.threads = 2}};

    /* One pool per type used; every matrix of that type is a window onto it. */
    uint8_t *pools[N_TYPES] = {NULL}, *any_pool = NULL;
    float *x = mem_alloc(sizeof(float) * (size_t)o.prefill_T * max_K);
    float *out = mem_alloc(sizeof(float) * (size_t)o.prefill_T * max_N);
    size_t scratch_bytes = 1;
    for (int t = 0; t < N_TYPES; t++) {
        size_t b = matmul_scratch_bytes(TYPES[t], o.prefill_T, max_K);
        scratch_bytes = b > scratch_bytes ? b : scratch_bytes;
    }
    void *scratch = mem_alloc(scratch_bytes);
    int ok = x && out && scratch;
    for (int t = 0; t < N_TYPES && ok; t++) {
        if (!type_wanted(o.type, t)) continue;
        pools[t] = any_pool = mem_alloc(pool_bytes);
        ok = pools[t] != NULL;
        if (ok) mem_advise_huge(pools[t], pool_bytes);   /* as the engine's weights (model.h) */
        if (ok) fill_weights(pools[t], pool_bytes, TYPES[t]);
    }
    if (!ok) {
        fprintf(stderr, "kbench: out of memory (pools of %zu MiB)\n", pool_bytes >> 20);
        for (int t = 0; t < N_TYPES; t++) mem_free(pools[t]);
        mem_free(x), mem_free(out), mem_free(scratch);
        return 1;
    }
    uint64_t seed = 7;
    for (size_t i = 0; i < (size_t)o.prefill_T * max_K; i++) x[i] = uniform(&seed);

    /* Warm up: start the thread team, touch every page, wake the caches. */
    for (int i = 0; i < 4; i++) time_memory_read(any_pool, pool_bytes, reads[i].threads, i >= 2);
    for (int i = 0; i < n_cells; i++) {
        const Cell *c = &cells[i];
        const uint8_t *pool = pools[type_index(c->type)];
        Mat W = {.type = c->type, .N = c->N, .K = c->K, .data = pool, .rows8 = pool_rows8(c, pool, pool_bytes)};
        ops_set_threads(c->threads);
        matmul_isa(out, x, &W, c->T, scratch, o.isa);
    }

    for (int r = 0; r < o.reps; r++) {
        for (int i = 0; i < 4; i++)
            reads[i].samples[r] = time_memory_read(any_pool, pool_bytes, reads[i].threads, i >= 2);
        for (int i = 0; i < n_cells; i++) {
            Cell *c = &cells[i];
            c->samples[r] = time_cell(c, pools[type_index(c->type)], pool_bytes, o.pool_mib > 0, x,
                                      out, scratch, o.isa);
        }
    }

    const char *core = getenv("OPENBLAS_CORETYPE");
    printf("# command:");
    for (int i = 0; i < argc; i++) printf(" %s", argv[i]);
    printf("\n# kernels: %s (best on this CPU: %s), T=1 reads %d row%s side by side (LLM_DECODE_ROWS), "
           "AMX tiles for Q8_0, Q4_0, Q4_K from %d tokens: %s (LLM_AMX), in eights: Q4_0 %s, Q4_K %s, Q6_K %s, Q8_0 %s (LLM_ROWS8), "
           "OPENBLAS_CORETYPE=%s\n",
           ops_isa_name(o.isa), ops_isa_name(ops_best_isa()), ops_decode_rows(), ops_decode_rows() > 1 ? "s" : "",
           AMX_MIN_T, ops_amx() ? "on" : "off", ops_rows8(DT_Q4_0, 8) ? "on" : "off",
           ops_rows8(DT_Q4_K, 8) ? "on" : "off", ops_rows8(DT_Q6_K, 8) ? "on" : "off",
           ops_rows8(DT_Q8_0, 8) ? "on" : "off", core ? core : "(unset)");
    if (o.pool_mib > 0)
        printf("# medians of %d rounds; T=1: GB/s of weight bytes, cycling through %zu MiB; "
               "T=%d: GFLOP/s\n", o.reps, pool_bytes >> 20, o.prefill_T);
    else
        printf("# medians of %d rounds; T=1: GB/s of weight bytes, one copy (from cache when it "
               "fits); T=%d: GFLOP/s\n", o.reps, o.prefill_T);
    char h1[32], h2[32];
    snprintf(h1, sizeof h1, "T%d 1thr", o.prefill_T);
    snprintf(h2, sizeof h2, "T%d 2thr", o.prefill_T);
    printf("%-19s  %9s  %9s  %9s  %9s\n", "type  N x K", "T1 1thr", "T1 2thr", h1, h2);
    printf("%-19s  %9.2f  %9.2f\n", "plain memory read", median(reads[0].samples, o.reps),
           median(reads[1].samples, o.reps));
    printf("%-19s  %9.2f  %9.2f\n", "best memory read", median(reads[2].samples, o.reps),
           median(reads[3].samples, o.reps));
    for (int i = 0; i < n_cells;) {
        const Cell *c = &cells[i];
        printf("%-5s %5d x %-5d", dtype_name(c->type), c->N, c->K);
        /* the cells of one line: T1 then prefill, each with the threads asked for */
        for (int T = 1; T <= 2; T++) {
            for (int th = 1; th <= 2; th++) {
                if (o.threads && o.threads != th) {
                    printf("  %9s", "-");
                    continue;
                }
                printf(T == 1 ? "  %9.2f" : "  %9.1f", median(cells[i].samples, o.reps));
                i++;
            }
        }
        printf("\n");
    }
    for (int t = 0; t < N_TYPES; t++) mem_free(pools[t]);
    mem_free(x), mem_free(out), mem_free(scratch), mem_free(g_copy);
    return 0;
}
