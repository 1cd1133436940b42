/* ops.c - the dispatch of the numeric kernels (see ops.h): which path each
 * call takes, on how many threads.
 *
 * The kernel wing is a tree, read from its root: formats.h (the weight
 * formats and half floats), rows.h (what every path's row functions share:
 * the job, the activation layouts), then the leaves that compute: ref.c
 * (the plain-loop references), tiles_generic.c (the generic path),
 * tiles_avx512.c (AVX-512 register tiles), quant.c and quant_avx512.c (the
 * 4, 5 and 6-bit block formats), tiles_amx.c (Intel's AMX tiles for Q8_0,
 * Q4_0 and Q4_K batches). This file alone chooses between them; no
 * leaf includes ops.h. Reading order here: threads, the instruction set in
 * use, the dispatching helpers (softmax, attention's products), then
 * matmul_isa, which chooses.
 *
 * Three paths, one process-wide choice (ops_set_isa; LLM_ISA through
 * ops_isa_from_env):
 *   plain    every kernel is its plain-loop reference, on one thread: matmul
 *            is matmul_ref, softmax is softmax_ref, and model.c's attention
 *            is a plain loop. No OpenMP, no OpenBLAS, no function pointers, so
 *            a debugger steps from the forward pass straight into the loops
 *            that do the arithmetic. The debug build (`make`) starts here.
 *   generic  no intrinsics of ours: OpenBLAS for F32 and F16, threaded plain
 *            loops for Q8_0. The fast path of a CPU without AVX-512.
 *   avx512   register tiles and VNNI (tiles_avx512.c) for up to 35 tokens, and
 *            for Q8_0 at any T; OpenBLAS beyond; from 16 tokens AMX tiles
 *            for Q8_0, Q4_0 and Q4_K where the CPU has them (ops_amx).
 *            `make fast` and `make test` start at the best the CPU has
 *            (OPS_BEST).
 * ops_stats() counts the matmul calls of each path, so a test can tell which
 * one ran.
 *
 * Why activations are quantized too, and the llama.cpp way. For Q8_0 weights
 * the fast kernel multiplies int8 by int8, which needs both sides in int8, so
 * each activation row is rounded to Q8_0 blocks before the products: d =
 * amax / 127 stored as fp16, values multiplied by 127 / amax and rounded to
 * nearest even, as llama.cpp does on x86. The same rounding gives the same
 * integer sums, so the logits agree with llama.cpp up to the order of float
 * additions and greedy outputs match. Every path rounds the activations this
 * way, and every path adds the float sums of the blocks in the AVX-512
 * kernel's order (q8_0_block_into_lanes), so Q8_0 results are the same bits on
 * all of them (but the AMX tiles and, asked for, the AVX2 tiles in eights,
 * which add each row's blocks in one chain: matmul_blocks_ref's bits). F32 and F16 results differ between paths by float rounding only:
 * the same products, summed in another order (F16 and BF16 at T == 1 excepted:
 * the generic loop keeps the AVX-512 kernel's order, f16_rows_generic).
 *
 * Threads and determinism. Output rows are split into contiguous ranges, in
 * whole groups of 16 rows (one 64-byte line of a float output row), eight
 * pieces per OpenMP thread handed out as threads come free (one range per
 * thread for OpenBLAS); small matrices stay on one thread because starting a
 * team costs more than it saves. OpenBLAS, where we call it, runs
 * single-threaded on each thread's range (see ops_set_threads). Our own
 * kernels compute every (row, token) result the same way whatever the thread
 * count or T, so their results depend neither on the number of threads nor on
 * how many tokens are processed together.
 *
 * Dispatch. The AVX-512 and AVX2 functions are compiled with a target
 * attribute and chosen at run time, so the debug build (no -march) runs on
 * any x86-64: AVX-512 where the CPU has it, AVX2 (tiles_avx2.c) on one
 * without it (an AMD Zen 2 or Zen 3, an Intel core before Ice Lake), and the
 * generic path everywhere else. */
#include "kernels/ops.h"
#include "kernels/rows.h"
#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#ifdef _OPENMP
#include <omp.h>
#endif

void openblas_set_num_threads(int n);   /* from OpenBLAS; not in every cblas.h */

/* ------------------------------------------------------------- threading */

static int g_threads = 1;

/* With OpenMP, OpenBLAS runs single-threaded inside our threads: one pool of
 * threads owns the cores. Two pools (OpenMP's and the threads of OpenBLAS's
 * pthread build) each spin waiting for work after a call and steal the cores
 * from the other; on a 2-core machine that made the next calls many times
 * slower. OpenBLAS's OpenMP build sets OpenMP's default team size in
 * openblas_set_num_threads, so ours is set after it. */
void ops_set_threads(int n) {
    if (n < 1) n = 1;
    g_threads = n;
#ifdef _OPENMP
    openblas_set_num_threads(1);
    omp_set_num_threads(n);
#else
    openblas_set_num_threads(n);
#endif
}

int ops_threads(void) { return g_threads; }

/* Below this many bytes of weight traffic (weight bytes times T) a matmul runs
 * on one thread: waking a second thread costs microseconds, about what one
 * core needs for 64 KiB anyway. */
enum { OPS_MIN_PARALLEL_BYTES = 256 * 1024 };

/* Rows are handed out in groups of 16: one 64-byte cache line of a float row
 * of out, so two threads never write the same line. */
enum { OPS_ROW_GROUP = 16 };

/* Rows [*n0, *n1) of N that part p of P computes (contiguous, whole groups). */
static void ops_part_rows(int N, int P, int p, int *n0, int *n1) {
    int64_t groups = (N + OPS_ROW_GROUP - 1) / OPS_ROW_GROUP;
    int64_t g0 = groups * p / P, g1 = groups * (p + 1) / P;
    *n0 = g0 * OPS_ROW_GROUP < N ? (int)(g0 * OPS_ROW_GROUP) : N;
    *n1 = g1 * OPS_ROW_GROUP < N ? (int)(g1 * OPS_ROW_GROUP) : N;
}

/* ---------------------------------------------------- instruction sets */

OpsIsa ops_best_isa(void) {
#ifdef OPS_X86
    /* libgcc's checks include the operating system's support (XCR0) for
     * saving the 512-bit registers, not only the CPUID bits. */
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
        __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma"))
        return OPS_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma"))
        return OPS_AVX2;
#endif
    return OPS_GENERIC;
}

const char *ops_isa_name(OpsIsa isa) {
    switch (isa) {
    case OPS_BEST: return "best";
    case OPS_PLAIN: return "plain";
    case OPS_AVX512: return "avx512";
    case OPS_AVX2: return "avx2";
    case OPS_GENERIC: return "generic";
    }
    return "unknown";
}

/* The build chooses the starting point: the debug build compiles this file
 * with -DOPS_DEFAULT_ISA=OPS_PLAIN (see the Makefile). */
#ifndef OPS_DEFAULT_ISA
#define OPS_DEFAULT_ISA OPS_BEST
#endif

static OpsIsa g_isa = OPS_DEFAULT_ISA;

/* Whether this CPU has the instructions of isa. */
static int isa_supported(OpsIsa isa) {
    OpsIsa best = ops_best_isa();
    if (isa == OPS_AVX512) return best == OPS_AVX512;
    if (isa == OPS_AVX2) return best == OPS_AVX512 || best == OPS_AVX2;
    return 1;
}

/* isa as it runs on this CPU: OPS_BEST is the best the CPU has, and a path
 * the CPU lacks falls back to the best below it (AVX-512 to AVX2 or generic,
 * AVX2 to generic). */
static OpsIsa isa_on_this_cpu(OpsIsa isa) {
    if (isa == OPS_BEST) return ops_best_isa();
    if (!isa_supported(isa)) return isa == OPS_AVX512 && isa_supported(OPS_AVX2) ? OPS_AVX2 : OPS_GENERIC;
    return isa;
}

void ops_set_isa(OpsIsa isa) {
    assert(isa == OPS_BEST || isa == OPS_PLAIN || isa == OPS_GENERIC || isa == OPS_AVX2 || isa == OPS_AVX512);
    g_isa = isa;
}

OpsIsa ops_isa(void) { return isa_on_this_cpu(g_isa); }

uint64_t ops_read_sum(const void *p, size_t bytes) {
    const uint8_t *b = p;
    uint64_t sum = 0;
    size_t i = 0;
#ifdef OPS_X86
    if (ops_best_isa() == OPS_AVX512) {
        i = bytes / 256 * 256;
        sum = read_sum_avx512(b, i);
    }
#endif
    for (; i + 8 <= bytes; i += 8) {
        uint64_t v;
        memcpy(&v, b + i, 8);
        sum += v;
    }
    return sum;
}

int ops_parse_isa(const char *s, OpsIsa *out, Err *e) {
    const OpsIsa all[] = {OPS_PLAIN, OPS_GENERIC, OPS_AVX2, OPS_AVX512, OPS_BEST};
    for (size_t i = 0; s && i < sizeof all / sizeof all[0]; i++) {
        if (strcmp(s, ops_isa_name(all[i])) != 0) continue;
        if (all[i] == OPS_AVX512 && !isa_supported(OPS_AVX512))
            return err_set(e, ST_UNSUPPORTED, "instruction set 'avx512': this CPU lacks AVX-512 "
                           "(F, BW, VL and VNNI, with F16C and FMA)");
        if (all[i] == OPS_AVX2 && !isa_supported(OPS_AVX2))
            return err_set(e, ST_UNSUPPORTED, "instruction set 'avx2': this CPU lacks AVX2 (with F16C and FMA)");
        *out = all[i];
        return ST_OK;
    }
    return err_set(e, ST_ARG, "unknown instruction set '%.40s' (want plain, generic, avx2, avx512 or best)",
                   s ? s : "");
}

static int g_decode_rows;   /* 0: the CPU's choice */
static int g_cpu_decode_rows;   /* that choice, once asked (0: not yet) */

int ops_decode_rows(void) {
    if (g_decode_rows) return g_decode_rows;
    if (!g_cpu_decode_rows) {
        int rows = 1;
#ifdef OPS_X86
        /* One Xeon Emerald Rapids core read F32, F16 and Q8_0 rows 12 to 25%
         * faster four at a time; one Zen 5 core read Q8_0 37.8 GB/s one at a
         * time, 23.7 four at a time (tiles_avx512.c, "reading weights"). On
         * AVX2 (tiles_avx2.c) the float tiles then read two rows side by
         * side: one Zen 3 core read F32 and F16 12 to 20% faster so. */
        __builtin_cpu_init();
        if (__builtin_cpu_is("intel") || ops_best_isa() == OPS_AVX2) rows = 4;
#endif
        g_cpu_decode_rows = rows;
    }
    return g_cpu_decode_rows;
}

void ops_set_decode_rows(int rows) {
    assert(rows == 0 || rows == 1 || rows == 4);
    g_decode_rows = rows;
}

static int g_amx = -1;   /* -1: use AMX where the CPU has it */

int ops_amx(void) {
#ifdef OPS_X86
    return g_amx != 0 && ops_best_isa() == OPS_AVX512 && amx_ok();
#else
    return 0;
#endif
}

void ops_set_amx(int on) {
    assert(on == -1 || on == 0 || on == 1);
    g_amx = on;
}

static int g_rows8 = 2;   /* 0: none, 1: Q4_0, Q4_K, Q6_K, 2: those and Q8_0 (the default) */

int ops_rows8(DType type, int N) {
    int wanted = type == DT_Q4_0 || type == DT_Q4_K || type == DT_Q6_K ? g_rows8 >= 1 : type == DT_Q8_0 ? g_rows8 == 2 : 0;
    return wanted && N > 0 && N % 8 == 0 && ops_isa() == OPS_AVX2;
}

void ops_set_rows8(int mode) {
    assert(mode >= 0 && mode <= 2);
    g_rows8 = mode;
}

/* OpenBLAS takes OPENBLAS_CORETYPE (any case) as the name of the core whose
 * kernels to use, without asking whether this CPU runs them: SkylakeX on a
 * CPU without AVX-512 dies of SIGILL at the first sgemm. The names whose
 * kernels need AVX-512 or AVX2 (OpenBLAS's x86-64 list), checked here
 * before anything runs: ST_UNSUPPORTED, e naming the variable, or ST_OK. */
static int blas_coretype_check(Err *e) {
    const char *v = getenv("OPENBLAS_CORETYPE");
    if (!v || !*v) return ST_OK;
    static const struct {
        const char *name;
        int avx512;   /* 1: needs AVX-512 (and AVX2), 0: AVX2 */
    } cores[] = {{"skylakex", 1}, {"cooperlake", 1}, {"sapphirerapids", 1}, {"haswell", 0}, {"zen", 0}};
    int need512 = 0, need2 = 0;
    for (size_t i = 0; i < sizeof cores / sizeof *cores; i++)
        if (!strcasecmp(v, cores[i].name)) need512 = cores[i].avx512, need2 = 1;
#ifdef OPS_X86
    __builtin_cpu_init();
    int has512 = __builtin_cpu_supports("avx512f"), has2 = __builtin_cpu_supports("avx2");
#else
    int has512 = 0, has2 = 0;
#endif
    if ((need512 && !has512) || (need2 && !has2))
        return err_set(e, ST_UNSUPPORTED,
                       "OPENBLAS_CORETYPE=%.40s: OpenBLAS's kernels for that core need %s, which this CPU lacks "
                       "(unset it, or name this CPU's kind)",
                       v, need512 ? "AVX-512" : "AVX2");
    return ST_OK;
}

int ops_isa_from_env(Err *e) {
    int st = blas_coretype_check(e);
    if (st) return st;
    const char *v = getenv("LLM_ISA");
    if (v && *v) {   /* unset: the build's default stands */
        OpsIsa isa;
        Err why;
        st = ops_parse_isa(v, &isa, &why);
        if (st) return err_set(e, st, "LLM_ISA: %s", why.msg);
        ops_set_isa(isa);
    }
    v = getenv("LLM_DECODE_ROWS");
    if (v && *v) {
        if (strcmp(v, "1") && strcmp(v, "4"))
            return err_set(e, ST_ARG, "LLM_DECODE_ROWS: '%.40s' is not 1 or 4", v);
        ops_set_decode_rows(atoi(v));
    }
    v = getenv("LLM_AMX");
    if (v && *v) {
        if (strcmp(v, "0") && strcmp(v, "1")) return err_set(e, ST_ARG, "LLM_AMX: '%.40s' is not 0 or 1", v);
        ops_set_amx(*v == '1' ? -1 : 0);
    }
    v = getenv("LLM_ROWS8");
    if (v && *v) {
        if (strcmp(v, "0") && strcmp(v, "1") && strcmp(v, "2"))
            return err_set(e, ST_ARG, "LLM_ROWS8: '%.40s' is not 0, 1 or 2", v);
        ops_set_rows8(*v - '0');
    }
    return ST_OK;
}

/* Calls per path, counted once per matmul call (never per row or thread).
 * Plain increments: like mem.c's counters, process-wide and meant for one
 * calling thread. */
static OpsStats g_stats;

OpsStats ops_stats(void) { return g_stats; }

/* One matmul call that ran on isa; used_blas: it handed products to OpenBLAS. */
static void count_call(OpsIsa isa, int used_blas) {
    if (isa == OPS_PLAIN) g_stats.plain++;
    else if (isa == OPS_AVX512) g_stats.avx512++;
    else if (isa == OPS_AVX2) g_stats.avx2++;
    else g_stats.generic++;
    if (used_blas) g_stats.sgemm++;
}

/* ------------------------------------------------- dispatching helpers */

void quantize_row_q8_0(BlockQ8_0 *out, const float *x, int K) {
#ifdef OPS_X86
    if (ops_isa() == OPS_AVX512) {
        quantize_row_q8_0_avx512(out, x, K);
        return;
    }
    if (ops_isa() == OPS_AVX2) {
        quantize_row_q8_0_avx2(out, x, K);
        return;
    }
#endif
    quantize_row_q8_0_ref(out, x, K);
}

void quantize_row_q8_k(BlockQ8_K *out, const float *x, int K) {
#ifdef OPS_X86
    if (ops_isa() == OPS_AVX512) {
        quantize_row_q8_k_avx512(out, x, K);
        return;
    }
    if (ops_isa() == OPS_AVX2) {
        quantize_row_q8_k_avx2(out, x, K);
        return;
    }
#endif
    quantize_row_q8_k_ref(out, x, K);
}

void softmax(float *x, int n) {
    if (ops_isa() == OPS_PLAIN) {
        softmax_ref(x, n);
        return;
    }
    float max = x[0];
    for (int i = 1; i < n; i++) max = x[i] > max ? x[i] : max;
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        x[i] = ops_exp(x[i] - max);
        sum += x[i];
    }
    float inv = 1.0f / sum;
    for (int i = 0; i < n; i++) x[i] *= inv;
}

void ops_scores(float *s, const float *q, const float *rows, int n, int S, size_t stride, float scale) {
#ifdef OPS_X86
    if (ops_isa() == OPS_AVX512) {
        scores_avx512(s, q, rows, n, S, stride, scale);
        return;
    }
    if (ops_isa() == OPS_AVX2) {
        scores_avx2(s, q, rows, n, S, stride, scale);
        return;
    }
#endif
    for (int j = 0; j < n; j++) {
        const float *k = rows + (size_t)j * stride;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int i = 0; i < S; i++) dot += q[i] * k[i];
        s[j] = dot * scale;
    }
}

void ops_add_weighted_rows(float *out, const float *w, const float *rows, int n, int S, size_t stride) {
#ifdef OPS_X86
    if (ops_isa() == OPS_AVX512) {
        add_weighted_rows_avx512(out, w, rows, n, S, stride);
        return;
    }
    if (ops_isa() == OPS_AVX2) {
        add_weighted_rows_avx2(out, w, rows, n, S, stride);
        return;
    }
#endif
    for (int j = 0; j < n; j++) {
        const float *v = rows + (size_t)j * stride;
#pragma omp simd
        for (int i = 0; i < S; i++) out[i] += w[j] * v[i];
    }
}

/* ---------------------------------------------------------- generic path */

/* Our kernels take their rows in OPS_PIECES_PER_THREAD pieces a thread,
 * handed out as threads come free (schedule dynamic), not one range each: on
 * a machine whose cores are shared with others one core is often slower for
 * a while, and a fixed half left the other core waiting for it (about a
 * tenth of a two-thread prompt, tools/bench on an AMD Zen 3 with 2 vCPUs;
 * pieces made Q8_0's 128-token prompt 10% faster there, median of 4 rounds
 * alternated). OpenBLAS keeps one range a thread: each call packs x again. */
enum { OPS_PIECES_PER_THREAD = 8 };

/* Runs fn over all rows of n jobs (products with the same x: matmul_group),
 * their rows counted end to end and split between `team` threads, so one
 * team wakes once for all of them. A piece's part number is the thread's, so
 * the scratch a part owns (job->wide) is never shared; results do not depend
 * on the split (the kernels compute each row alike whatever its range). */
static void ops_run_jobs(RowsFn fn, const MatmulJob *jobs, int n, int team) {
    if (team <= 1) {
        for (int i = 0; i < n; i++) fn(&jobs[i], 0, 0, jobs[i].W->N);
        return;
    }
    int total = 0;
    for (int i = 0; i < n; i++) total += jobs[i].W->N;
    int pieces = fn == f32_rows_blas || fn == f16_rows_widened ? team : team * OPS_PIECES_PER_THREAD;
#pragma omp parallel for schedule(dynamic, 1) num_threads(team)
    for (int piece = 0; piece < pieces; piece++) {
        int n0, n1, p = 0;
#ifdef _OPENMP
        p = omp_get_thread_num();
#endif
        ops_part_rows(total, pieces, piece, &n0, &n1);
        for (int i = 0, at = 0; i < n; at += jobs[i].W->N, i++) {   /* at: job i's first row */
            int lo = n0 > at ? n0 - at : 0, hi = n1 - at < jobs[i].W->N ? n1 - at : jobs[i].W->N;
            if (lo < hi) fn(&jobs[i], p, lo, hi);
        }
    }
}

static void ops_run_rows(RowsFn fn, const MatmulJob *job, int team) { ops_run_jobs(fn, job, 1, team); }

/* BF16E counts as the BF16 it decodes to: it takes BF16's paths, and split
 * the same way sgemm sees the same blocks and gives BF16's bits. */
static int ops_team_size(const Mat *W, int T) {
    double traffic = (double)dtype_row_bytes(W->type == DT_BF16E ? DT_BF16 : W->type, W->K) * W->N * T;
    if (g_threads < 2 || W->N < 2 * OPS_ROW_GROUP || traffic < OPS_MIN_PARALLEL_BYTES) return 1;
    return g_threads;
}

static uint8_t *scratch_base(void *scratch) {
    return (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
}

/* ------------------------------------------------------------- dispatch */

size_t matmul_scratch_bytes(DType type, int T, int K) {
    if (type == DT_Q8_0 || dtype_is_small_quant(type)) {   /* + 64: we align it */
        size_t act = (size_t)T * (type == DT_Q8_0 ? act_stride(K) : small_act_stride(type, K));
        size_t amx = amx_type(type) && T >= AMX_MIN_T ? amx_act_bytes(type, T, K) : 0;
        return (amx > act ? amx : act) + 64;
    }
    if (type == DT_F16 || type == DT_BF16 || type == DT_BF16E) return (size_t)F16_WIDE_ROWS * K * sizeof(float) + 64;
    return 0;
}

/* From this many tokens on, F32 and F16 go to sgemm; below it our tiles win,
 * because the product is still limited by reading W once and sgemm's packing
 * of small blocks costs more than it saves. Measured on 5632 x 2048 F32 from
 * memory (tools/kbench --type F32 --shape 5632x2048 --prefill-t T), 2
 * threads, the k-blocked tiles against sgemm: T = 32: 95 against 76 GFLOP/s,
 * T = 34: 90 against 78, T = 36: 88 against 91, T = 40: 85 against 95,
 * T = 48: 75 against 109 (1 thread alike); F16 (widened for sgemm) at T = 32:
 * 101 against 73, T = 40: 94 against 91. Prefill (T >= 64) stays on sgemm.
 * The AVX2 tiles, with k-blocks of x that stay whole up to 64 tokens
 * (tiles_avx2.c, "from KB2_MIN_T tokens"), were level with sgemm or ahead
 * up to 47 tokens on an AMD Zen 3 and behind it at 64; so they keep F32,
 * F16, BF16 and BF16E to SGEMM_MIN_T_AVX2, and with them each token's bits
 * alone. */
enum { SGEMM_MIN_T = 36, SGEMM_MIN_T_AVX2 = 48 };

/* The path of a product of x by a matrix of W's type and K (not plain):
 * rounds x into the scratch where the path reads it rounded, fills in the
 * job's path fields, and returns the rows function; *team is the threads it
 * wants for `rows` rows. As ops.h describes at matmul. */
static RowsFn matmul_path(MatmulJob *job, const Mat *W, int rows, void *scratch, int *team, OpsIsa isa) {
    const float *x = job->x;
    int K = W->K, T = job->T;
    Mat all = *W;
    all.N = rows;
    *team = ops_team_size(&all, T);
#ifdef OPS_X86
    /* F32, F16, BF16 and BF16E: the path's own tiles below this many tokens, sgemm from there */
    int sgemm_from = isa == OPS_AVX2 ? SGEMM_MIN_T_AVX2 : SGEMM_MIN_T;
    /* Q8_0, Q4_0, Q4_K batches on AMX tiles (matmul_group sees that every
     * matrix of a group has 16 rows or more) */
    if (amx_type(W->type) && isa == OPS_AVX512 && T >= AMX_MIN_T && W->N >= AMX_TOKENS && ops_amx()) {
        job->act = scratch_base(scratch);
        count_call(isa, 0);
        if (W->type == DT_Q4_K) {
            amx_act_pack_k(scratch_base(scratch), x, T, K);
            return q4_k_rows_amx;
        }
        amx_act_pack(scratch_base(scratch), x, T, K);
        return W->type == DT_Q8_0 ? q8_0_rows_amx : q4_0_rows_amx;
    }
#endif
    switch (W->type) {
    case DT_F32:
#ifdef OPS_X86
        if (isa == OPS_AVX512 && T < sgemm_from) {
            count_call(isa, 0);
            return f32_rows_avx512;
        }
        if (isa == OPS_AVX2 && T < sgemm_from) {
            count_call(isa, 0);
            return f32_rows_avx2;
        }
#endif
        count_call(isa, 1);
        return f32_rows_blas;
    case DT_F16:
    case DT_BF16:   /* the same paths; the halves are widened by their own rule */
    case DT_BF16E:  /* BF16's paths, its blocks decoded where BF16 widens */
#ifdef OPS_X86
        if (isa == OPS_AVX512 && T < sgemm_from && (W->type != DT_BF16E || bf16e_avx512_ok())) {
            count_call(isa, 0);
            return W->type == DT_F16 ? f16_rows_avx512 : W->type == DT_BF16 ? bf16_rows_avx512 : bf16e_rows_avx512;
        }
        if (isa == OPS_AVX2 && T < sgemm_from && W->type != DT_BF16E) {
            count_call(isa, 0);
            return W->type == DT_F16 ? f16_rows_avx2 : bf16_rows_avx2;
        }
        /* BF16E decoded in AVX2 registers (also on an AVX-512 CPU without
         * VBMI2, such as Cascade Lake), to where BF16 on the same path
         * goes to sgemm: the same bits */
        if ((isa == OPS_AVX2 || isa == OPS_AVX512) && T < sgemm_from) {
            count_call(isa, 0);
            return bf16e_rows_avx2;
        }
#endif
        /* the scratch holds F16_WIDE_ROWS rows, shared out between the threads */
        if (*team > F16_WIDE_ROWS / F16_MIN_ROWS_PER_PART) *team = F16_WIDE_ROWS / F16_MIN_ROWS_PER_PART;
        if (T == 1) {
            count_call(isa, 0);
            return f16_rows_generic;
        }
        job->wide = (float *)scratch_base(scratch);
        job->rows_per_part = F16_WIDE_ROWS / *team;
        count_call(isa, 1);
        return f16_rows_widened;
    case DT_Q8_0:
        job->act = scratch_base(scratch);
        count_call(isa, 0);
#ifdef OPS_X86
        if (isa == OPS_AVX512) {
            act_pack_avx512(scratch_base(scratch), x, T, K);
            return q8_0_rows_avx512;
        }
#endif
#ifdef OPS_X86
        if (isa == OPS_AVX2) {
            act_pack_avx2(scratch_base(scratch), x, T, K);
            return q8_0_rows_avx2;
        }
#endif
        act_pack_ref(scratch_base(scratch), x, T, K);
        return q8_0_rows_generic;
    default: {   /* the 4, 5 and 6-bit block formats: activations rounded once per call */
        assert(dtype_is_small_quant(W->type));
        RowsFn fn = small_rows_generic;
        job->act = scratch_base(scratch);
        count_call(isa, 0);
        if (dtype_is_k(W->type)) {   /* Q8_K */
#ifdef OPS_X86
            if (isa == OPS_AVX512) {
                small_act_pack_k_avx512(scratch_base(scratch), x, T, K);
                if (W->type != DT_Q6_K) qk_act_reorder_avx512(scratch_base(scratch), T, K);
            } else if (isa == OPS_AVX2)
                small_act_pack_k_avx2(scratch_base(scratch), x, T, K);
            else
#endif
                small_act_pack_k(scratch_base(scratch), x, T, K);
        }
#ifdef OPS_X86
        else if (isa == OPS_AVX512)
            q32_act_pack_avx512(scratch_base(scratch), x, T, K);   /* Q8_0 values, Q32Act order */
        else if (isa == OPS_AVX2)
            act_pack_avx2(scratch_base(scratch), x, T, K);      /* Q8_0 */
#endif
        else
            act_pack_ref(scratch_base(scratch), x, T, K);       /* Q8_0 */
#ifdef OPS_X86
        if (isa == OPS_AVX512) fn = small_rows_avx512;
        if (isa == OPS_AVX2 && W->type == DT_Q4_0) fn = q4_0_rows_avx2;
        if (isa == OPS_AVX2 && (W->type == DT_Q4_K || W->type == DT_Q6_K)) fn = qk_rows_avx2;
#endif
        return fn;
    }
    }
}

/* One call's path: plain, the reference loops; otherwise matmul_path's, the
 * rows shared out by ops_run_rows. */
void matmul_isa(float *out, const float *x, const Mat *W, int T, void *scratch, OpsIsa isa) {
    assert(W->N >= 0 && W->K > 0 && T >= 0 && W->K % dtype_block(W->type) == 0);
    isa = isa_on_this_cpu(isa);
    if (isa == OPS_PLAIN) {   /* one thread, no scratch: the reference loops */
        count_call(isa, 0);
        matmul_ref(out, x, W, T);
        return;
    }
    MatmulJob job = {.out = out, .x = x, .W = W, .T = T, .avx512 = isa == OPS_AVX512, .avx2 = isa == OPS_AVX2,
                     .decode_rows = ops_decode_rows()};
    int team;
    RowsFn fn = matmul_path(&job, W, W->N, scratch, &team, isa);
    ops_run_rows(fn, &job, team);
}

void matmul_group(float *const out[], const float *x, const Mat *const W[], int n, int T, void *scratch) {
    assert(n >= 1 && n <= MATMUL_GROUP_MAX);
    OpsIsa isa = ops_isa();
    int same = 1, rows = 0;
    for (int i = 0; i < n; i++) {
        same &= W[i]->type == W[0]->type && W[i]->K == W[0]->K;
        same &= W[i]->N >= AMX_TOKENS || !amx_type(W[i]->type);   /* the AMX tiles' least */
        rows += W[i]->N;
    }
    if (!same || isa == OPS_PLAIN || n == 1) {   /* each on its own, as matmul */
        for (int i = 0; i < n; i++) matmul(out[i], x, W[i], T, scratch);
        return;
    }
    MatmulJob jobs[MATMUL_GROUP_MAX];
    jobs[0] = (MatmulJob){.out = out[0], .x = x, .W = W[0], .T = T, .avx512 = isa == OPS_AVX512, .avx2 = isa == OPS_AVX2,
                          .decode_rows = ops_decode_rows()};
    int team;
    RowsFn fn = matmul_path(&jobs[0], W[0], rows, scratch, &team, isa);   /* x rounded once */
    for (int i = 1; i < n; i++) {
        count_call(isa, fn == f32_rows_blas || fn == f16_rows_widened);
        jobs[i] = jobs[0];
        jobs[i].out = out[i];
        jobs[i].W = W[i];
    }
    ops_run_jobs(fn, jobs, n, team);
}

void matmul(float *out, const float *x, const Mat *W, int T, void *scratch) {
    matmul_isa(out, x, W, T, scratch, ops_isa());
}
