/* bench.c - single-stream speed of the forward pass, next to the machine's ceilings.
 *
 *   bench [--threads 1,2] [--prompt 128] [--decode 32] [--runs 3] [--budget 60] MODEL.gguf ...
 *
 * A speed means little alone, so the benchmark first measures what this
 * machine can do at best, then how close the engine comes:
 *
 *   memory read bandwidth  a streaming sum over a 1 GiB buffer (far beyond any
 *                          cache), per thread count, by the best of several read
 *                          loops (ceilings.h: plain, wide AVX-512, two prefetch
 *                          distances, two streams), not by the engine's own
 *                          ops_read_sum, which a peer could beat. Decode reads every weight
 *                          once per token, so bandwidth / bytes per token is the
 *                          most tokens per second it can reach: the ceiling.
 *   sgemm peak             cblas_sgemm on the shapes prefill runs (128 rows of
 *                          activations times a 2048x2048 and a 5632x2048
 *                          weight), per thread count: the best this BLAS does.
 *   instruction peaks      FMA, int8 (VNNI, or AVX2's vpmaddubsw) and AMX
 *                          (ceilings.h): what a row's "% of compute peak"
 *                          divides by, FMA for the float types, int8 (AMX
 *                          where the engine's AMX tiles run) for the
 *                          quantized ones.
 *
 * Then for each model and thread count:
 *
 *   prefill   one model_forward call with T = --prompt tokens at position 0,
 *             logits for the last row only (what generation needs).
 *             GFLOP/s counts the matrix multiplications: 2 FLOPs per weight per
 *             token in every layer, and the classifier once (last row only).
 *             Attention scores and values (2 * H * S * T * (T + 1) FLOPs per
 *             layer for a causal prompt), norms and RoPE are not counted.
 *   decode    an 8-token prompt (not timed), then --decode steps of T = 1, each
 *             feeding back the argmax of the logits, as greedy generation does.
 *             tok/s = steps / time. GB/s = bytes read per token * tok/s.
 *
 * Bytes read per token are the weights one decode step must stream: every
 * layer matrix and norm, the final norm and the classifier, plus one row of the
 * token embedding (it is looked up, not multiplied, so the rest of the table
 * is not read). KV-cache reads are left out, so GB/s errs low: at the
 * positions the defaults visit (8 to 40) they add 0.03% (tinyllama F32) to
 * 2.1% (stories15M Q8_0) to the weights. model->weight_bytes (all the weights in
 * the file) is printed beside it for reference.
 *
 * Each figure is the median of up to --runs runs after a warm-up step that
 * touches every weight (so the mapping is resident); a measurement stops adding
 * runs once it has spent --budget seconds, and the runs column says how many
 * ran. The spread column is (slowest - fastest) / median run time: the noise. Units: MB = 1e6 bytes, GB = 1e9 bytes, GFLOP = 1e9 FLOPs.
 *
 * Weights that fit in the last-level cache can be read faster than DRAM
 * allows; such rows are marked and their "% of ceiling" can exceed 100. */
#include "bench_util.h"
#include "ceilings.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/mem.h"
#include "model.h"
#include "kernels/ops.h"
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREAD_COUNTS 8
#define MAX_RUNS 15
#define DECODE_PROMPT 8              /* tokens before the timed decode steps */
#define BW_BYTES ((size_t)1 << 30)   /* the bandwidth buffer: 1 GiB */
#define MACHINE_RUNS 5               /* bandwidth and sgemm: median of 5 */

typedef struct {
    int threads[MAX_THREAD_COUNTS];
    int n_threads;
    int prompt;                      /* T of the prefill call */
    int decode;                      /* timed decode steps */
    int runs;
    double budget_s;                 /* per measurement */
    char **models;
    int n_models;
} Args;

/* What the machine can do, per entry of Args.threads. */
typedef struct {
    double bw_gbs[MAX_THREAD_COUNTS];
    int bw_loop[MAX_THREAD_COUNTS];              /* the read loop that gave it (ceilings.h) */
    double bw_each[MAX_THREAD_COUNTS][CEIL_READS];
    double fma_gflops[MAX_THREAD_COUNTS], vnni_gops[MAX_THREAD_COUNTS];   /* the instructions' peaks */
    double amx_gops[MAX_THREAD_COUNTS];   /* 0: no AMX */
    double sgemm_gflops[MAX_THREAD_COUNTS][2];   /* the two shapes below */
    double sgemm_peak[MAX_THREAD_COUNTS];        /* the better of the two */
    long l3_bytes;                               /* 0 when unknown */
    uint8_t *bw_buf;                             /* BW_BYTES, read again after each row */
    uint64_t sink;                               /* the reads' sums */
} Machine;

static const int SGEMM_SHAPES[2][3] = {{128, 2048, 2048}, {128, 5632, 2048}};   /* M, N, K */

/* ------------------------------------------------------------- timing */

/* Median of n values (sorts them in place). */
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ------------------------------------------------------------ machine */

/* sgemm GFLOP/s for out (M, N) = x (M, K) @ W^T, W (N, K), through the
 * engine's matmul() on an F32 matrix: OpenBLAS's sgemm, single-threaded in
 * each of our threads, which split the rows of W between them (ops.c).
 * Median of MACHINE_RUNS after one untimed call. */
static double measure_sgemm(int M, int N, int K, const float *x, const float *w, float *out) {
    double gflops[MACHINE_RUNS];
    Mat W = {.type = DT_F32, .N = N, .K = K, .data = w};
    for (int r = -1; r < MACHINE_RUNS; r++) {
        double t0 = clock_seconds();
        matmul(out, x, &W, M, NULL);
        if (r >= 0) gflops[r] = 2.0 * M * N * K / (clock_seconds() - t0) * 1e-9;
    }
    return median(gflops, MACHINE_RUNS);
}

static int measure_machine(const Args *a, Machine *mc, Err *e) {
    size_t n = BW_BYTES / sizeof(float);
    float *buf = mem_alloc(BW_BYTES);
    if (!buf) return err_set(e, ST_NOMEM, "out of memory for the %zu-byte bandwidth buffer", BW_BYTES);
    mem_advise_huge(buf, BW_BYTES);   /* in pages like the weights' copies (model.h) */
    /* Write every page: untouched pages all map the one zero page, which
     * would be read from cache and report a bandwidth no DRAM has. */
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 1023);
    for (int i = 0; i < a->n_threads; i++)
        mc->bw_gbs[i] =
            ceil_read_best((const uint8_t *)buf, BW_BYTES, a->threads[i], &mc->bw_loop[i], mc->bw_each[i], &mc->sink);
    mc->bw_buf = (uint8_t *)buf;   /* kept: each row's ceiling is measured again after it */
    for (int i = 0; i < a->n_threads; i++) {
        mc->fma_gflops[i] = ceil_peak(0, a->threads[i], &mc->sink);
        mc->vnni_gops[i] = ceil_peak(1, a->threads[i], &mc->sink);
        mc->amx_gops[i] = ceil_peak(2, a->threads[i], &mc->sink);
    }

    int maxN = 5632, K = 2048, M = 128;
    float *x = mem_alloc((size_t)M * K * sizeof(float));
    float *w = mem_alloc((size_t)maxN * K * sizeof(float));
    float *out = mem_alloc((size_t)M * maxN * sizeof(float));
    if (!x || !w || !out) {
        mem_free(x);
        mem_free(w);
        mem_free(out);
        return err_set(e, ST_NOMEM, "out of memory for the sgemm operands");
    }
    for (size_t i = 0; i < (size_t)M * K; i++) x[i] = (float)((i * 7) % 13) * 0.01f;
    for (size_t i = 0; i < (size_t)maxN * K; i++) w[i] = (float)((i * 5) % 11) * 0.01f;
    for (int i = 0; i < a->n_threads; i++) {
        ops_set_threads(a->threads[i]);
        mc->sgemm_peak[i] = 0.0;
        for (int s = 0; s < 2; s++) {
            const int *sh = SGEMM_SHAPES[s];
            mc->sgemm_gflops[i][s] = measure_sgemm(sh[0], sh[1], sh[2], x, w, out);
            if (mc->sgemm_gflops[i][s] > mc->sgemm_peak[i]) mc->sgemm_peak[i] = mc->sgemm_gflops[i][s];
        }
    }
    mem_free(x);
    mem_free(w);
    mem_free(out);
    if (mc->sink == 12345) printf(" ");   /* keeps the sums observable */
    mc->l3_bytes = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (mc->l3_bytes < 0) mc->l3_bytes = 0;
    return ST_OK;
}

/* "model name" from /proc/cpuinfo into buf. */
static void print_machine(const Args *a, const Machine *mc, int argc, char **argv) {
    char cpu[128], load[64] = "unknown";
    cpu_name(cpu, sizeof cpu);
    FILE *f = fopen("/proc/loadavg", "r");   /* "1.21 0.67 0.31 2/94 6181": keep three */
    if (f) {
        double l1, l5, l15;
        if (fscanf(f, "%lf %lf %lf", &l1, &l5, &l15) == 3)
            snprintf(load, sizeof load, "%.2f %.2f %.2f", l1, l5, l15);
        fclose(f);
    }
    const char *coretype = getenv("OPENBLAS_CORETYPE");
    printf("command:");
    for (int i = 0; i < argc; i++) printf(" %s", argv[i]);
    printf("\nmachine: %s, %ld cores online, L3 %.1f MiB, load average %s\n", cpu,
           sysconf(_SC_NPROCESSORS_ONLN), (double)mc->l3_bytes / (1 << 20), load);
    printf("OPENBLAS_CORETYPE=%s (OpenBLAS uses its %s kernels); engine kernels: %s, decoding reads %d "
           "row%s side by side (LLM_DECODE_ROWS)\n", coretype ? coretype : "(unset)", openblas_get_corename(),
           ops_isa_name(ops_best_isa()), ops_decode_rows(), ops_decode_rows() > 1 ? "s" : "");
    char kind[96];
    cpu_kind(kind, sizeof kind);
    printf("cpu kind: %s\n", kind);
    printf("memory read bandwidth (the best of %d read loops over 1 GiB, median of %d each):", CEIL_READS, CEIL_RUNS);
    for (int i = 0; i < a->n_threads; i++) {
        printf("%s %d thread%s %.1f GB/s (%s; ", i ? "," : "", a->threads[i], a->threads[i] > 1 ? "s" : "",
               mc->bw_gbs[i], CEIL_READ_NAMES[mc->bw_loop[i]]);
        for (int w = 0; w < CEIL_READS; w++) printf("%s%s %.1f", w ? ", " : "", CEIL_READ_NAMES[w], mc->bw_each[i][w]);
        printf(")");
    }
    printf("\nsgemm peak (cblas_sgemm M x N x K, median of %d):", MACHINE_RUNS);
    for (int i = 0; i < a->n_threads; i++) {
        printf("%s %d thread%s", i ? ";" : "", a->threads[i], a->threads[i] > 1 ? "s" : "");
        for (int s = 0; s < 2; s++)
            printf(" %dx%dx%d %.1f", SGEMM_SHAPES[s][0], SGEMM_SHAPES[s][1], SGEMM_SHAPES[s][2],
                   mc->sgemm_gflops[i][s]);
    }
    printf(" GFLOP/s\ninstruction peaks (independent chains, best of %d):", CEIL_RUNS);
    for (int i = 0; i < a->n_threads; i++) {
        int avx2 = !ceil_has_avx512() && ceil_has_avx2();   /* ceilings.h: the AVX2 forms */
        printf("%s %d thread%s %s FMA %.1f GFLOP/s, %s %.1f GOP/s", i ? ";" : "", a->threads[i],
               a->threads[i] > 1 ? "s" : "", avx2 ? "AVX2" : "AVX-512", mc->fma_gflops[i],
               avx2 ? "int8 vpmaddubsw" : "VNNI vpdpbusd", mc->vnni_gops[i]);
        if (mc->amx_gops[i] > 0) printf(", AMX tdpbssd %.1f GOP/s", mc->amx_gops[i]);
    }
    if (mc->amx_gops[0] > 0)
        printf("\n(Q8_0, Q4_0 and Q4_K products of %d or more tokens run on AMX tiles: %s (LLM_AMX); the rest "
               "on VNNI)", AMX_MIN_T, ops_amx() ? "on" : "off");
    printf("\n\n");
}

/* -------------------------------------------------------------- models */

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static int all_finite(const float *x, int n) {
    for (int i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

/* One decode run: the prompt, then `steps` greedy steps; returns their time,
 * or a negative value if the logits stopped being finite numbers. */
static double decode_run(const Model *m, RunState *s, const int *prompt, int steps) {
    int V = m->cfg.vocab_size;
    float *logits = model_forward(m, s, prompt, DECODE_PROMPT, 0, 0);
    int tok = argmax(logits, V);
    double t0 = clock_seconds();
    for (int i = 0; i < steps; i++) {
        logits = model_forward(m, s, &tok, 1, DECODE_PROMPT + i, 0);
        tok = argmax(logits, V);
    }
    double t = clock_seconds() - t0;
    return all_finite(logits, V) ? t : -1.0;
}

typedef struct {
    double prefill_tps, decode_tps;
    int prefill_runs, decode_runs;
    double prefill_spread, decode_spread;   /* (slowest - fastest) / median run */
} Result;

/* Median of n run times, and their spread relative to it (0 for one run). */
static double median_and_spread(double *t, int n, double *spread) {
    double m = median(t, n);   /* sorts t */
    *spread = (t[n - 1] - t[0]) / m;
    return m;
}

/* Warm up, then time prefill and decode with the current thread count. */
static int bench_one(const Model *m, const Args *a, const int *tokens, Result *r, Err *e) {
    RunState s;
    int st = runstate_init(&s, m, a->prompt, e);
    if (st) return st;
    double t[MAX_RUNS];

    /* Warm-up: a short decode touches every weight once. */
    if (decode_run(m, &s, tokens, 2) < 0) {
        runstate_free(&s);
        return err_set(e, ST_FORMAT, "the logits are not finite numbers");
    }

    double spent = 0.0;
    int n = 0;
    while (n < a->runs && (n == 0 || spent < a->budget_s)) {
        double t0 = clock_seconds();
        float *logits = model_forward(m, &s, tokens, a->prompt, 0, 0);
        t[n] = clock_seconds() - t0;
        if (!all_finite(logits, m->cfg.vocab_size)) {
            runstate_free(&s);
            return err_set(e, ST_FORMAT, "prefill logits are not finite numbers");
        }
        spent += t[n++];
    }
    r->prefill_runs = n;
    r->prefill_tps = a->prompt / median_and_spread(t, n, &r->prefill_spread);

    spent = 0.0;
    n = 0;
    while (n < a->runs && (n == 0 || spent < a->budget_s)) {
        t[n] = decode_run(m, &s, tokens, a->decode);
        if (t[n] < 0) {
            runstate_free(&s);
            return err_set(e, ST_FORMAT, "decode logits are not finite numbers");
        }
        spent += t[n++];
    }
    r->decode_runs = n;
    r->decode_tps = a->decode / median_and_spread(t, n, &r->decode_spread);
    runstate_free(&s);
    return ST_OK;
}

static void print_table_header(void) {
    printf("| model | type | threads | weights MB | read/token MB | prefill tok/s | prefill GFLOP/s "
           "| %% of compute peak | decode tok/s | decode GB/s | read GB/s | %% of bandwidth ceiling "
           "| runs p/d | spread p/d |\n");
    printf("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
}

static int bench_model(const char *path, const Args *a, Machine *mc, int *in_cache, Err *e) {
    Model m;
    int st = model_load(&m, path, NULL, e);
    if (st) return st;
    const ModelConfig *c = &m.cfg;
    if (a->prompt > c->seq_len || DECODE_PROMPT + a->decode > c->seq_len) {
        err_set(e, ST_ARG, "%s: context of %d positions is shorter than --prompt %d or %d + --decode %d",
                path, c->seq_len, a->prompt, DECODE_PROMPT, a->decode);
        model_free(&m);
        return ST_ARG;
    }
    /* Token ids: a fixed pseudo-random sequence avoiding the special pieces. */
    int *tokens = mem_alloc((size_t)a->prompt * sizeof(int));
    if (!tokens) {
        model_free(&m);
        return err_set(e, ST_NOMEM, "out of memory for the prompt");
    }
    for (int i = 0; i < a->prompt; i++)
        tokens[i] = c->vocab_size > 3 ? 3 + (int)(((uint64_t)i * 2654435761u) % (uint64_t)(c->vocab_size - 3)) : 0;

    char label[48];
    model_label(&m, path, label, sizeof label);
    double layer_params, classifier_params;
    model_matmul_params(&m, &layer_params, &classifier_params);
    /* the classifier for the last row only */
    double bpt = model_step_bytes(&m), flops = 2.0 * a->prompt * layer_params + 2.0 * classifier_params;
    int fits = mc->l3_bytes > 0 && bpt <= (double)mc->l3_bytes;
    for (int i = 0; i < a->n_threads && st == ST_OK; i++) {
        ops_set_threads(a->threads[i]);
        Result r = {0};
        st = bench_one(&m, a, tokens, &r, e);
        if (st) {
            char inner[sizeof e->msg];
            snprintf(inner, sizeof inner, "%s", e->msg);
            err_set(e, st, "%s: %s threads %d: %s", path, label, a->threads[i], inner);
            break;
        }
        double gflops = flops * r.prefill_tps / a->prompt * 1e-9;
        double peak = type_peak(m.wtype, mc->fma_gflops[i], mc->vnni_gops[i], mc->amx_gops[i], NULL);
        double gbs = bpt * r.decode_tps * 1e-9;
        /* The ceiling of this row: the same read as at the start, again
         * now, and the best of every measurement so far. A virtual
         * machine's bandwidth drifts by 10% between minutes, and one
         * measurement can come out low while other guests hold a core:
         * a ceiling is the most the machine has given. */
        mc->bw_gbs[i] = fmax(mc->bw_gbs[i], ceil_read_gbs(mc->bw_loop[i], mc->bw_buf, BW_BYTES, a->threads[i], &mc->sink));
        double bw = mc->bw_gbs[i];
        printf("| %s | %s | %d | %.1f | %.1f%s | %.1f | %.1f | %.0f%% | %.2f | %.2f | %.1f | %.0f%%%s "
               "| %d/%d | %.0f%%/%.0f%% |\n",
               label, dtype_name(m.wtype), a->threads[i], (double)m.weight_bytes * 1e-6, bpt * 1e-6,
               fits ? "*" : "", r.prefill_tps, gflops, peak > 0 ? 100.0 * gflops / peak : 0.0,
               r.decode_tps, gbs, bw, 100.0 * gbs / bw, fits ? "*" : "", r.prefill_runs,
               r.decode_runs, 100.0 * r.prefill_spread, 100.0 * r.decode_spread);
        fflush(stdout);
    }
    *in_cache |= fits;
    mem_free(tokens);
    model_free(&m);
    return st;
}

/* ------------------------------------------------------------ arguments */

static void usage(FILE *f) {
    fprintf(f, "usage: bench [--threads 1,2] [--prompt 128] [--decode 32] [--runs 3] [--budget 60] "
               "MODEL.gguf ...\n");
}

/* Sets *help (and stops) at --help or -h. */
static int parse_args(int argc, char **argv, Args *a, int *help, Err *e) {
    static const char *const valued[] = {"--threads", "--prompt", "--decode", "--runs", "--budget"};
    *a = (Args){.threads = {1}, .n_threads = 1, .prompt = 128, .decode = 32, .runs = 3, .budget_s = 60.0};
    *help = 0;
    int i = 1;
    for (; i < argc && argv[i][0] == '-' && argv[i][1]; i += 2) {
        const char *flag = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(flag, "--help") == 0 || strcmp(flag, "-h") == 0) {
            *help = 1;
            return ST_OK;
        }
        size_t k = 0;
        while (k < sizeof valued / sizeof valued[0] && strcmp(flag, valued[k])) k++;
        if (k == sizeof valued / sizeof valued[0])
            return err_set(e, ST_ARG, "unknown option %s (see --help)", flag);
        if (!val) return err_set(e, ST_ARG, "%s needs a value", flag);
        if (strcmp(flag, "--threads") == 0) {
            a->n_threads = 0;
            for (const char *p = val; *p;) {
                char *end;
                long t = strtol(p, &end, 10);
                if (end == p || t < 1 || t > 256 || a->n_threads == MAX_THREAD_COUNTS || (*end && *end != ','))
                    return err_set(e, ST_ARG, "--threads wants a list like 1,2 (up to %d counts), got '%s'",
                                   MAX_THREAD_COUNTS, val);
                a->threads[a->n_threads++] = (int)t;
                p = *end ? end + 1 : end;
            }
            if (a->n_threads == 0) return err_set(e, ST_ARG, "--threads is empty");
        } else if (strcmp(flag, "--prompt") == 0) {
            if (parse_int(flag, val, 1, 1 << 16, &a->prompt, e)) return ST_ARG;
        } else if (strcmp(flag, "--decode") == 0) {
            if (parse_int(flag, val, 1, 1 << 16, &a->decode, e)) return ST_ARG;
        } else if (strcmp(flag, "--runs") == 0) {
            if (parse_int(flag, val, 1, MAX_RUNS, &a->runs, e)) return ST_ARG;
        } else if (strcmp(flag, "--budget") == 0) {
            int b;
            if (parse_int(flag, val, 1, 3600, &b, e)) return ST_ARG;
            a->budget_s = b;
        }
    }
    a->models = argv + i;
    a->n_models = argc - i;
    if (a->n_models == 0) return err_set(e, ST_ARG, "no model given");
    return ST_OK;
}

int main(int argc, char **argv) {
    Args a;
    Err e = {{0}};
    int help;
    if (argc == 1) {
        usage(stdout);
        return 0;
    }
    if (parse_args(argc, argv, &a, &help, &e) || ops_isa_from_env(&e)) {   /* LLM_ISA, LLM_DECODE_ROWS */
        fprintf(stderr, "bench: %s\n", e.msg);
        return 2;
    }
    if (help) {
        usage(stdout);
        return 0;
    }
    Machine mc = {0};
    if (measure_machine(&a, &mc, &e)) {
        fprintf(stderr, "bench: %s\n", e.msg);
        mem_free(mc.bw_buf);
        return 1;
    }
    print_machine(&a, &mc, argc, argv);
    print_table_header();
    int failed = 0, in_cache = 0;
    for (int i = 0; i < a.n_models; i++) {
        if (bench_model(a.models[i], &a, &mc, &in_cache, &e)) {
            fprintf(stderr, "bench: %s\n", e.msg);
            failed = 1;
        }
    }
    printf("\nprefill: %d-token prompt in one call; decode: %d steps after an %d-token prompt; "
           "median of up to %d runs (at most %.0f s each measurement).\n",
           a.prompt, a.decode, DECODE_PROMPT, a.runs, a.budget_s);
    if (in_cache)
        printf("* the weights read per token fit in the %.1f MiB last-level cache, so DRAM "
               "bandwidth is not their ceiling.\n", (double)mc.l3_bytes / (1 << 20));
    printf("read GB/s: the best of the bandwidth at the start and read again right after each row so far (the "
           "best read loop above, median of %d runs); %% of bandwidth ceiling is decode GB/s over it.\n", CEIL_RUNS);
    mem_free(mc.bw_buf);
    return failed;
}
