/* ops.c - numeric kernels (see ops.h).
 *
 * Reading order: number formats (fp16, Q8_0), the plain-loop references, then
 * the fast paths that model.c calls through matmul().
 *
 * Why decoding is a memory problem. Generating one token multiplies one
 * activation row by every weight matrix: out[n] = sum_k W[n][k] * x[k]. Each
 * weight is read once and used for one multiply-add, so a core that could do
 * a hundred GFLOP/s is fed by a memory bus that delivers 10 to 40 GB/s: with
 * 4-byte weights that is 2.5 to 10 GFLOP/s. The speed of a matrix-vector
 * product is therefore bytes of weights divided by bandwidth, and the kernel's
 * only jobs are to keep enough loads in flight and to do little work per byte.
 * It reads several rows at once (independent accumulators, each load of x
 * shared), asks for the next rows before it needs them (software prefetch),
 * and it prefers small formats: F16 halves the bytes, Q8_0 takes 34 bytes
 * per 32 weights.
 *
 * Why prefill is a compute problem. With T tokens each weight can serve T
 * multiply-adds if the kernel keeps it in registers or cache while it visits
 * the tokens. All our kernels are register tiles of 4 rows by 4 tokens (and
 * 4 by 1 to 3 for the tokens left over), so each weight loaded serves up to
 * four tokens. From 16 tokens on, F32 and F16 compute a group of rows one
 * block of K at a time so that weights and activations are read from L1
 * (see float_rows_kblocked); from SGEMM_MIN_T (36) tokens on, F32 goes to
 * OpenBLAS sgemm and F16 widens a tile of rows to float and calls sgemm on
 * it. Q8_0 keeps its own tiles at any T, because sgemm knows nothing of int8.
 * Below that (a few sequences decoding together) the product is still
 * limited by memory, or by sgemm's packing of small blocks, and our tiles
 * beat sgemm.
 *
 * The Q8_0 layout and VNNI. A Q8_0 block is 34 bytes: an fp16 scale d and 32
 * int8 values. The AVX-512 VNNI instruction vpdpbusd multiplies 64 unsigned
 * bytes by 64 signed bytes and adds each group of four products into one of
 * 16 int32 lanes. Two blocks fill one 512-bit register: lanes 0-7 sum block b,
 * lanes 8-15 block b+1. The scales sit between the quants in the file, so the
 * 64 bytes come from two 32-byte loads; weights stay exactly as mapped.
 * Because one side must be unsigned, the kernel flips the sign bit of each
 * weight byte, which turns w into w + 128 (0..255), and starts the accumulator
 * at -128 * (sum of the four activation values of each lane), computed once
 * per activation row. The integer sums are exact; each block then costs one
 * float multiply by d_w * d_x.
 *
 * Why activations are quantized too, and the llama.cpp way. int8 x int8 needs
 * both sides in int8, so each activation row is rounded to Q8_0 blocks before
 * the products: d = amax / 127 stored as fp16, values multiplied by 127 / amax
 * and rounded to nearest even, as llama.cpp does on x86. The same rounding
 * gives the same integer sums, so the logits agree with llama.cpp up to the
 * order of float additions and greedy outputs match.
 *
 * Threads and determinism. Output rows are split into contiguous ranges, in
 * whole groups of 16 rows (one 64-byte line of a float output row), one range
 * per OpenMP thread; small matrices stay on one thread because starting a
 * team costs more than it saves. OpenBLAS, where we call it, runs
 * single-threaded on each thread's range (see ops_set_threads). Every (row, token) result is computed by the
 * same instruction sequence whatever the tile shape, thread count or T, so the
 * results of our own kernels depend neither on the number of threads nor on
 * how many tokens are processed together.
 *
 * Dispatch. The AVX-512 functions are compiled with a target attribute and
 * chosen at run time, so the debug build (no -march) runs on any x86-64 and
 * the plain loops are the fallback everywhere else. */
#include "ops.h"
#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#define OPS_X86 1
#include <immintrin.h>
/* Functions that use AVX-512 instructions; callers check ops_best_isa() first. */
#define AVX512_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")))
/* Helpers inlined into every AVX-512 caller: a tile compiled with constant
 * R and TT then unrolls its loops and keeps its accumulators in registers. */
#define AVX512_INLINE static inline __attribute__((always_inline)) AVX512_FN
#endif

void openblas_set_num_threads(int n);   /* from OpenBLAS; not in every cblas.h */

/* ---------------------------------------------------------------- formats */

const char *dtype_name(int type) {
    switch (type) {
    case DT_F32: return "F32";
    case DT_F16: return "F16";
    case DT_Q8_0: return "Q8_0";
    default: return "unknown";
    }
}

int dtype_known(int type) { return type == DT_F32 || type == DT_F16 || type == DT_Q8_0; }

size_t dtype_row_bytes(DType type, int64_t n) {
    if (n <= 0) return 0;
    switch (type) {
    case DT_F32: return (size_t)n * 4;
    case DT_F16: return (size_t)n * 2;
    case DT_Q8_0: return n % QK8_0 ? 0 : (size_t)(n / QK8_0) * sizeof(BlockQ8_0);
    }
    return 0;
}

float fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else {                      /* subnormal: value = mant * 2^-24 */
            float f = (float)mant * 0x1p-24f;
            return sign ? -f : f;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);            /* inf / nan */
    } else {
        bits = sign | ((exp + 112) << 23) | (mant << 13);    /* rebias 15 -> 127 */
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t fp32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffff;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);  /* rounds to >= 65536: inf */
    if (ax < 0x38800000u) {                                    /* below 2^-14: subnormal */
        float a;
        memcpy(&a, &ax, 4);
        return (uint16_t)(sign | (uint32_t)lrintf(a * 0x1p24f)); /* ties to even */
    }
    uint32_t mant = ax & 0x7fffff, exp = (ax >> 23) - 112;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fff;                             /* 13 bits dropped */
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;     /* nearest, ties to even */
    return (uint16_t)(sign | h);
}

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
#endif
    return OPS_PLAIN;
}

const char *ops_isa_name(OpsIsa isa) { return isa == OPS_AVX512 ? "avx512" : "plain"; }

/* ------------------------------------------------------------ quantizing */

/* The multiplier 127 / amax of a Q8_0 block. For amax below about 3.7e-37 it
 * overflows to inf; d = amax / 127 then rounds to 0 in fp16, so the block adds
 * nothing to any dot product, and we store zeros instead of converting inf or
 * NaN to int8 (undefined behaviour in C). */
static float q8_0_multiplier(float amax) {
    float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    return isinf(id) ? 0.0f : id;
}

/* One block of 32 floats to 32 int8 values; returns d as fp16 bits. */
static uint16_t q8_0_quantize_block_ref(int8_t qs[QK8_0], const float *xb) {
    float amax = 0.0f;
    for (int i = 0; i < QK8_0; i++) amax = fmaxf(amax, fabsf(xb[i]));
    /* llama.cpp (x86): d = amax / 127 stored as fp16; values scaled by 127 / amax
     * and rounded to nearest even. Matching this lets greedy outputs match. */
    float id = q8_0_multiplier(amax);
    for (int i = 0; i < QK8_0; i++) qs[i] = (int8_t)nearbyintf(xb[i] * id);
    return fp32_to_fp16(amax / 127.0f);
}

void quantize_row_q8_0_ref(BlockQ8_0 *out, const float *x, int K) {
    for (int b = 0; b < K / QK8_0; b++) out[b].d = q8_0_quantize_block_ref(out[b].qs, x + b * QK8_0);
}

#ifdef OPS_X86
/* The same block, 16 values per instruction. Bit-identical to the plain one:
 * the product x * id is the same IEEE multiply, vrndscaleps with mode 0 rounds
 * to nearest even like nearbyintf, and the integers fit int8 exactly. (For NaN
 * inputs the two may differ: maxps and fmaxf treat NaN differently.) */
AVX512_INLINE uint16_t q8_0_quantize_block_avx512(int8_t *qs, const float *xb) {
    __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
    float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    __m512 id = _mm512_set1_ps(q8_0_multiplier(amax));
    enum { NEAREST_EVEN = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC };   /* an immediate */
    __m512 r0 = _mm512_roundscale_ps(_mm512_mul_ps(v0, id), NEAREST_EVEN);
    __m512 r1 = _mm512_roundscale_ps(_mm512_mul_ps(v1, id), NEAREST_EVEN);
    _mm_storeu_si128((__m128i *)qs, _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(r0)));
    _mm_storeu_si128((__m128i *)(qs + 16), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(r1)));
    return fp32_to_fp16(amax / 127.0f);
}

static AVX512_FN void quantize_row_q8_0_avx512(BlockQ8_0 *out, const float *x, int K) {
    for (int b = 0; b < K / QK8_0; b++)
        out[b].d = q8_0_quantize_block_avx512(out[b].qs, x + b * QK8_0);
}
#endif

void quantize_row_q8_0(BlockQ8_0 *out, const float *x, int K) {
#ifdef OPS_X86
    if (ops_best_isa() == OPS_AVX512) {
        quantize_row_q8_0_avx512(out, x, K);
        return;
    }
#endif
    quantize_row_q8_0_ref(out, x, K);
}

void dequantize_row(float *out, const void *row, DType type, int K) {
    switch (type) {
    case DT_F32:
        memcpy(out, row, (size_t)K * 4);
        break;
    case DT_F16: {
        const uint16_t *h = row;
        for (int i = 0; i < K; i++) out[i] = fp16_to_fp32(h[i]);
        break;
    }
    case DT_Q8_0: {
        const BlockQ8_0 *blk = row;
        for (int b = 0; b < K / QK8_0; b++) {
            float d = fp16_to_fp32(blk[b].d);
            for (int i = 0; i < QK8_0; i++) out[b * QK8_0 + i] = d * blk[b].qs[i];
        }
        break;
    }
    }
}

/* ------------------------------------------------------ plain references */

static const uint8_t *row_ptr(const Mat *W, int n) {
    return (const uint8_t *)W->data + (size_t)n * dtype_row_bytes(W->type, W->K);
}

/* Weight (n, k) of a float-typed W (F32 or F16) as a float. */
static float weight_at(const Mat *W, int n, int k) {
    const uint8_t *row = row_ptr(W, n);
    if (W->type == DT_F16) return fp16_to_fp32(((const uint16_t *)row)[k]);
    return ((const float *)row)[k];
}

/* Integer dot product of one Q8_0 weight block with one activation block. */
static int32_t dot_q8_0_block_ref(const BlockQ8_0 *w, const BlockQ8_0 *x) {
    int32_t isum = 0;
    for (int i = 0; i < QK8_0; i++) isum += (int32_t)w->qs[i] * x->qs[i];
    return isum;
}

void matmul_ref(float *out, const float *x, const Mat *W, int T) {
    int N = W->N, K = W->K;
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * K;
        for (int n = 0; n < N; n++) {
            float sum = 0.0f;
            if (W->type == DT_Q8_0) {
                /* Per block: round the activations to Q8_0 as quantize_row_q8_0
                 * does, an exact integer dot product, one multiply by both scales. */
                const BlockQ8_0 *w = (const BlockQ8_0 *)row_ptr(W, n);
                for (int b = 0; b < K / QK8_0; b++) {
                    BlockQ8_0 xb;
                    xb.d = q8_0_quantize_block_ref(xb.qs, xt + b * QK8_0);
                    int32_t isum = dot_q8_0_block_ref(&w[b], &xb);
                    sum += (float)isum * (fp16_to_fp32(w[b].d) * fp16_to_fp32(xb.d));
                }
            } else {
                for (int k = 0; k < K; k++) sum += weight_at(W, n, k) * xt[k];
            }
            out[(size_t)t * N + n] = sum;
        }
    }
}

void rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    float ss = 0.0f;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    float scale = 1.0f / sqrtf(ss / n + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

void softmax_ref(float *x, int n) {
    float max = x[0];
    for (int i = 1; i < n; i++) max = fmaxf(max, x[i]);
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    for (int i = 0; i < n; i++) x[i] = (float)(x[i] / sum);
}

/* Written as three simple loops (max, exp and sum, scale) that the compiler
 * turns into vector code; `?:` rather than fmaxf, which is a call. */
void softmax(float *x, int n) {
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

void rope(float *x, int n_heads, int head_dim, int n_rot, const float *cos_sin) {
    for (int h = 0; h < n_heads; h++) {
        float *v = x + h * head_dim;
        for (int i = 0; i < n_rot / 2; i++) {
            float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
            float a = v[2 * i], b = v[2 * i + 1];
            v[2 * i] = a * c - b * s;
            v[2 * i + 1] = a * s + b * c;
        }
    }
}

void swiglu(float *h, const float *g, int n) {
    for (int i = 0; i < n; i++) h[i] = h[i] / (1.0f + ops_exp(-h[i])) * g[i];
}

/* ------------------------------------------------------------ fast paths */

typedef struct MatmulJob MatmulJob;

/* A tile computes out for rows n .. n+R-1 and tokens t .. t+TT-1 with its
 * accumulators in registers. The row loop needs six shapes: 4x4, the tails
 * 1x4 and 1x1 (rows left over), and 4x1, 4x2, 4x3 (the 1 to 3 tokens left
 * over; 4x1 is also T == 1). */
typedef void (*TileFn)(const MatmulJob *job, int n, int t);
typedef struct {
    TileFn r4t4, r1t4, r4t1, r1t1, r4t2, r4t3;
} TileSet;

/* What one range of rows needs to know: the whole problem, and the scratch
 * prepared for it. */
struct MatmulJob {
    float *out;            /* (T, N) */
    const float *x;        /* (T, K) */
    const Mat *W;          /* (N, K) */
    int T;
    OpsIsa isa;
    const uint8_t *act;    /* Q8_0: T rows of act_stride(K) bytes, quantized x */
    const TileSet *tiles;  /* AVX-512 tiles, for rows_by_tiles */
    float *wide;           /* F16 through sgemm: (team, rows_per_part, K) */
    int rows_per_part;
};

/* Computes out[t][n] for every t and n in [n0, n1); part is the index of the
 * range (and of the thread), for functions that need their own scratch. */
typedef void (*RowsFn)(const MatmulJob *job, int part, int n0, int n1);

/* Runs fn over all rows, split between `team` threads. */
static void ops_run_rows(RowsFn fn, const MatmulJob *job, int team) {
    if (team <= 1) {
        fn(job, 0, 0, job->W->N);
        return;
    }
#pragma omp parallel for schedule(static, 1) num_threads(team)
    for (int p = 0; p < team; p++) {
        int n0, n1;
        ops_part_rows(job->W->N, team, p, &n0, &n1);
        if (n0 < n1) fn(job, p, n0, n1);
    }
}

static int ops_team_size(const Mat *W, int T) {
    double traffic = (double)dtype_row_bytes(W->type, W->K) * W->N * T;
    if (g_threads < 2 || W->N < 2 * OPS_ROW_GROUP || traffic < OPS_MIN_PARALLEL_BYTES) return 1;
    return g_threads;
}

/* --- Q8_0 activations, in the layout the int8 kernels read.
 *
 * For each of the T rows, at a stride of act_stride(K) bytes (a multiple of 64):
 *   int8_t  qs[K]        the Q8_0 values, blocks back to back (no scales in
 *                        between, so two blocks are one 64-byte load)
 *   int32_t corr[K / 4]  -128 * (sum of each group of four values): the start
 *                        value of a VNNI lane, cancelling the weights' +128
 *   float   d[K / 32]    the block scales, already widened from fp16
 * The values and scales are exactly quantize_row_q8_0's. */
typedef struct {
    const int8_t *qs;
    const int32_t *corr;
    const float *d;
} ActRow;

static size_t act_stride(int K) { return ((size_t)K * 2 + (size_t)K / 8 + 63) / 64 * 64; }

static uint8_t *scratch_base(void *scratch) {
    return (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
}

static ActRow act_row(const uint8_t *act, int K, int t) {
    const uint8_t *p = act + (size_t)t * act_stride(K);
    ActRow r = {(const int8_t *)p, (const int32_t *)(p + K), (const float *)(p + 2 * (size_t)K)};
    return r;
}

static void act_pack_ref(uint8_t *act, const float *x, int T, int K) {
    for (int t = 0; t < T; t++) {
        uint8_t *p = act + (size_t)t * act_stride(K);
        int8_t *qs = (int8_t *)p;
        int32_t *corr = (int32_t *)(p + K);
        float *d = (float *)(p + 2 * (size_t)K);
        for (int b = 0; b < K / QK8_0; b++)
            d[b] = fp16_to_fp32(q8_0_quantize_block_ref(qs + b * QK8_0, x + (size_t)t * K + b * QK8_0));
        for (int j = 0; j < K / 4; j++)
            corr[j] = -128 * (qs[4 * j] + qs[4 * j + 1] + qs[4 * j + 2] + qs[4 * j + 3]);
    }
}

/* --- plain fallbacks, used where AVX-512 is missing (and by the tests) */

static void q8_rows_plain(const MatmulJob *job, int part, int n0, int n1) {
    int N = job->W->N, K = job->W->K;
    for (int t = 0; t < job->T; t++) {
        ActRow xr = act_row(job->act, K, t);
        for (int n = n0; n < n1; n++) {
            const BlockQ8_0 *w = (const BlockQ8_0 *)row_ptr(job->W, n);
            float sum = 0.0f;     /* the same arithmetic as matmul_ref */
            for (int b = 0; b < K / QK8_0; b++) {
                int32_t isum = 0;
                for (int i = 0; i < QK8_0; i++) isum += (int32_t)w[b].qs[i] * xr.qs[b * QK8_0 + i];
                sum += (float)isum * (fp16_to_fp32(w[b].d) * xr.d[b]);
            }
            job->out[(size_t)t * N + n] = sum;
        }
    }
}

static void f16_rows_plain(const MatmulJob *job, int part, int n0, int n1) {
    int N = job->W->N, K = job->W->K;
    for (int n = n0; n < n1; n++) {
        const uint16_t *w = (const uint16_t *)row_ptr(job->W, n);
        for (int t = 0; t < job->T; t++) {
            const float *xt = job->x + (size_t)t * K;
            float sum = 0.0f;
            for (int k = 0; k < K; k++) sum += fp16_to_fp32(w[k]) * xt[k];
            job->out[(size_t)t * N + n] = sum;
        }
    }
}

#ifdef OPS_X86
/* --- AVX-512: activations to the int8 layout */

static AVX512_FN void act_pack_avx512(uint8_t *act, const float *x, int T, int K) {
    const __m256i u128 = _mm256_set1_epi8((char)0x80);   /* 128 as an unsigned byte */
    for (int t = 0; t < T; t++) {
        uint8_t *p = act + (size_t)t * act_stride(K);
        int8_t *qs = (int8_t *)p;
        int32_t *corr = (int32_t *)(p + K);
        float *d = (float *)(p + 2 * (size_t)K);
        for (int b = 0; b < K / QK8_0; b++) {
            int8_t *q = qs + b * QK8_0;
            d[b] = fp16_to_fp32(q8_0_quantize_block_avx512(q, x + (size_t)t * K + b * QK8_0));
            /* vpdpbusd(0, 128, q): 128 * (sum of four values) in each lane */
            __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), u128,
                                            _mm256_loadu_si256((const __m256i *)q));
            _mm256_storeu_si256((__m256i *)(corr + b * 8), _mm256_sub_epi32(_mm256_setzero_si256(), s));
        }
    }
}

/* --- AVX-512: reading weights from memory
 *
 * A tile reads R rows side by side: R streams, which the hardware prefetcher
 * follows less well than one, and the int8 kernel does enough work per byte
 * that the out-of-order core alone does not keep enough loads in flight. So
 * each step also asks for the same place R rows further on, the next tile's
 * rows, into L2 (not L1: for long rows the next tile is bigger than L1). On
 * the machines we measured this took one core's Q8_0 decoding from about
 * half to about the speed of a plain read of memory (tools/kbench). */
AVX512_INLINE void prefetch_next_tile(const uint8_t *p, int R, size_t wstride) {
    _mm_prefetch((const char *)(p + (size_t)R * wstride), _MM_HINT_T1);
}

/* --- AVX-512: Q8_0 register tile of R weight rows by TT tokens (R, TT <= 4)
 *
 * acc[r][t] holds 16 float partial sums of out[t][row r]; lanes 0-7 gather
 * the even blocks, lanes 8-15 the odd ones. Per pair of blocks and per (r, t):
 * one vpdpbusd, one conversion, one multiply for the scales, one FMA. */

/* The scales of a block pair, (s0, s1) in the low two lanes of s, spread to
 * the lanes that hold each block's sums: s0 in lanes 0-7, s1 in lanes 8-15. */
AVX512_INLINE __m512 q8_pair_spread(__m128 s) {
    const __m512i pick = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_permutexvar_ps(pick, _mm512_castps128_ps512(s));
}

/* Weight scales d_w[b], d_w[b+1] (0 when `two` is 0: the odd block at the end
 * of a row, whose upper lanes hold zeros) spread over the lanes. */
AVX512_INLINE __m512 q8_weight_scales(const BlockQ8_0 *blk, int two) {
    uint32_t h = blk[0].d | (two ? (uint32_t)blk[1].d << 16 : 0u);
    return q8_pair_spread(_mm_cvtph_ps(_mm_cvtsi32_si128((int)h)));
}

/* Activation scales d_x[b], d_x[b+1] (already float), likewise. */
AVX512_INLINE __m512 q8_act_scales(const float *d, int b, int two) {
    __m128 s = two ? _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(d + b))) : _mm_load_ss(d + b);
    return q8_pair_spread(s);
}

/* Blocks b and b+1 (only b when two == 0; the upper lanes then add zeros). */
AVX512_INLINE void q8_tile_step(__m512 acc[4][4], const uint8_t *w, size_t wstride,
                                const ActRow *xr, int b, int R, int TT, int two) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512i wq[4];
    __m512 ws[4];
    for (int r = 0; r < R; r++) {
        const BlockQ8_0 *blk = (const BlockQ8_0 *)(w + r * wstride) + b;
        prefetch_next_tile((const uint8_t *)blk, R, wstride);
        __m256i lo = _mm256_loadu_si256((const __m256i *)blk[0].qs);
        __m256i hi = two ? _mm256_loadu_si256((const __m256i *)blk[1].qs) : _mm256_setzero_si256();
        wq[r] = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), flip);
        ws[r] = q8_weight_scales(blk, two);
    }
    for (int t = 0; t < TT; t++) {
        __m512i xq, corr;
        if (two) {
            xq = _mm512_loadu_si512(xr[t].qs + b * QK8_0);
            corr = _mm512_loadu_si512(xr[t].corr + b * 8);
        } else {
            xq = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(xr[t].qs + b * QK8_0)));
            corr = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(xr[t].corr + b * 8)));
        }
        __m512 xs = q8_act_scales(xr[t].d, b, two);
        for (int r = 0; r < R; r++) {
            __m512i isum = _mm512_dpbusd_epi32(corr, wq[r], xq);   /* exact */
            acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(ws[r], xs), acc[r][t]);
        }
    }
}

/* out[t][n + r] for r < R, t0 <= t < t0 + TT. */
AVX512_INLINE void q8_tile(const MatmulJob *job, int n, int t0, int R, int TT) {
    int N = job->W->N, K = job->W->K, nb = K / QK8_0;
    const uint8_t *w = row_ptr(job->W, n);
    size_t wstride = dtype_row_bytes(DT_Q8_0, K);
    ActRow xr[4];
    for (int t = 0; t < TT; t++) xr[t] = act_row(job->act, K, t0 + t);
    __m512 acc[4][4];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++) acc[r][t] = _mm512_setzero_ps();
    int b = 0;
    for (; b + 2 <= nb; b += 2) q8_tile_step(acc, w, wstride, xr, b, R, TT, 1);
    if (b < nb) q8_tile_step(acc, w, wstride, xr, b, R, TT, 0);
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++)
            job->out[(size_t)(t0 + t) * N + n + r] = _mm512_reduce_add_ps(acc[r][t]);
}

/* The 4 x 4 tile with its 16 accumulators as named variables. With the array
 * of q8_tile, GCC 12 kept the accumulators in memory and stored all 16 of them
 * (48 stores of zmm registers in q8_r4t4) at every step, as it did for the
 * float tile. The arithmetic is q8_tile_step's, instruction for instruction,
 * so every (row, token) still gets the same bits from every tile shape.
 *
 * Unlike the float tile, this made no measurable difference (tools/kbench
 * --type Q8_0 --shape 5632x2048 --prefill-t 16: about 52 GFLOP/s on one core
 * either way, side by side): the stores only go to the store port, while the
 * loop is bound by the vector ports, which take four instructions per 64
 * multiply-adds of a (row, token) pair (vpdpbusd, conversion, product of the
 * scales, FMA) plus the unpacking of weights and scales. It stays for the
 * clean loop, and the narrow tiles below, which did gain. */

/* Weights of blocks b and b+1 of one row (b only when two == 0), sign bits
 * flipped, in one register. */
AVX512_INLINE __m512i q8_weight_pair(const BlockQ8_0 *blk, int two) {
    __m256i lo = _mm256_loadu_si256((const __m256i *)blk[0].qs);
    __m256i hi = two ? _mm256_loadu_si256((const __m256i *)blk[1].qs) : _mm256_setzero_si256();
    return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1),
                            _mm512_set1_epi8((char)0x80));
}

/* One token's share of a block pair: its int8 values, the starting values of
 * the VNNI lanes, and its scales spread over the lanes. */
typedef struct {
    __m512i q, corr;
    __m512 d;
} Q8ActPair;

AVX512_INLINE Q8ActPair q8_act_pair(const ActRow *xr, int b, int two) {
    Q8ActPair a;
    if (two) {
        a.q = _mm512_loadu_si512(xr->qs + b * QK8_0);
        a.corr = _mm512_loadu_si512(xr->corr + b * 8);
    } else {
        a.q = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(xr->qs + b * QK8_0)));
        a.corr = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(xr->corr + b * 8)));
    }
    a.d = q8_act_scales(xr->d, b, two);
    return a;
}

/* One token's results of a 4-row tile: out[n .. n+3] = the sums of the four
 * accumulators (rows 0..3). */
AVX512_INLINE void store_row4(float *o, __m512 r0, __m512 r1, __m512 r2, __m512 r3) {
    o[0] = _mm512_reduce_add_ps(r0), o[1] = _mm512_reduce_add_ps(r1);
    o[2] = _mm512_reduce_add_ps(r2), o[3] = _mm512_reduce_add_ps(r3);
}

/* acc + (exact integer sums of one row and one token) * d_w * d_x. */
AVX512_INLINE __m512 q8_madd(__m512i wq, __m512 wd, Q8ActPair x, __m512 acc) {
    __m512i isum = _mm512_dpbusd_epi32(x.corr, wq, x.q);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(wd, x.d), acc);
}

AVX512_INLINE void q8_tile_4x4(const MatmulJob *job, int n, int t0) {
    int N = job->W->N, K = job->W->K, nb = K / QK8_0;
    const uint8_t *w = row_ptr(job->W, n);
    size_t ws = dtype_row_bytes(DT_Q8_0, K);
    ActRow x0 = act_row(job->act, K, t0), x1 = act_row(job->act, K, t0 + 1),
           x2 = act_row(job->act, K, t0 + 2), x3 = act_row(job->act, K, t0 + 3);
    __m512 a00 = _mm512_setzero_ps(), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00,
           a12 = a00, a13 = a00, a20 = a00, a21 = a00, a22 = a00, a23 = a00, a30 = a00, a31 = a00,
           a32 = a00, a33 = a00;
    for (int b = 0; b < nb; b += 2) {
        int two = b + 1 < nb;   /* 0 only for a lone last block */
        const BlockQ8_0 *r0 = (const BlockQ8_0 *)w + b, *r1 = (const BlockQ8_0 *)(w + ws) + b,
                        *r2 = (const BlockQ8_0 *)(w + 2 * ws) + b, *r3 = (const BlockQ8_0 *)(w + 3 * ws) + b;
        prefetch_next_tile((const uint8_t *)r0, 4, ws);
        prefetch_next_tile((const uint8_t *)r1, 4, ws);
        prefetch_next_tile((const uint8_t *)r2, 4, ws);
        prefetch_next_tile((const uint8_t *)r3, 4, ws);
        __m512i w0 = q8_weight_pair(r0, two), w1 = q8_weight_pair(r1, two),
                w2 = q8_weight_pair(r2, two), w3 = q8_weight_pair(r3, two);
        __m512 d0 = q8_weight_scales(r0, two), d1 = q8_weight_scales(r1, two),
               d2 = q8_weight_scales(r2, two), d3 = q8_weight_scales(r3, two);
        Q8ActPair x = q8_act_pair(&x0, b, two);
        a00 = q8_madd(w0, d0, x, a00), a10 = q8_madd(w1, d1, x, a10);
        a20 = q8_madd(w2, d2, x, a20), a30 = q8_madd(w3, d3, x, a30);
        x = q8_act_pair(&x1, b, two);
        a01 = q8_madd(w0, d0, x, a01), a11 = q8_madd(w1, d1, x, a11);
        a21 = q8_madd(w2, d2, x, a21), a31 = q8_madd(w3, d3, x, a31);
        x = q8_act_pair(&x2, b, two);
        a02 = q8_madd(w0, d0, x, a02), a12 = q8_madd(w1, d1, x, a12);
        a22 = q8_madd(w2, d2, x, a22), a32 = q8_madd(w3, d3, x, a32);
        x = q8_act_pair(&x3, b, two);
        a03 = q8_madd(w0, d0, x, a03), a13 = q8_madd(w1, d1, x, a13);
        a23 = q8_madd(w2, d2, x, a23), a33 = q8_madd(w3, d3, x, a33);
    }
    float *o = job->out + (size_t)t0 * N + n;
    store_row4(o, a00, a10, a20, a30);
    o += N;
    store_row4(o, a01, a11, a21, a31);
    o += N;
    store_row4(o, a02, a12, a22, a32);
    o += N;
    store_row4(o, a03, a13, a23, a33);
}

/* 4 rows by TT = 2 or 3 tokens (the tokens left over), the same with 8 or 12
 * named accumulators (q8_tile's array is stored to the stack at every step).
 * Before, the tokens left over went through the 4 x 1 tile one at a time,
 * each reading the chunk of weights again; with 2 or 3 tokens in one tile
 * each weight is read once for all of them. 5632 x 2048 from memory, one
 * thread, side by side (tools/kbench --type Q8_0 --shape 5632x2048
 * --prefill-t T): T = 2: 19 -> 26 GFLOP/s, T = 3: 21 -> 37, T = 6: 57 -> 63;
 * two threads alike. T == 1 keeps q8_tile (4 x 1): this one with TT = 1 was
 * no faster there. */
AVX512_INLINE void q8_tile_4xn(const MatmulJob *job, int n, int t0, int TT) {
    int N = job->W->N, K = job->W->K, nb = K / QK8_0;
    const uint8_t *w = row_ptr(job->W, n);
    size_t ws = dtype_row_bytes(DT_Q8_0, K);
    ActRow x0 = act_row(job->act, K, t0), x1 = act_row(job->act, K, t0 + 1), x2 = x1;
    if (TT > 2) x2 = act_row(job->act, K, t0 + 2);
    __m512 a00 = _mm512_setzero_ps(), a10 = a00, a20 = a00, a30 = a00, a01 = a00, a11 = a00,
           a21 = a00, a31 = a00, a02 = a00, a12 = a00, a22 = a00, a32 = a00;
    for (int b = 0; b < nb; b += 2) {
        int two = b + 1 < nb;
        const BlockQ8_0 *r0 = (const BlockQ8_0 *)w + b, *r1 = (const BlockQ8_0 *)(w + ws) + b,
                        *r2 = (const BlockQ8_0 *)(w + 2 * ws) + b, *r3 = (const BlockQ8_0 *)(w + 3 * ws) + b;
        prefetch_next_tile((const uint8_t *)r0, 4, ws);
        prefetch_next_tile((const uint8_t *)r1, 4, ws);
        prefetch_next_tile((const uint8_t *)r2, 4, ws);
        prefetch_next_tile((const uint8_t *)r3, 4, ws);
        __m512i w0 = q8_weight_pair(r0, two), w1 = q8_weight_pair(r1, two),
                w2 = q8_weight_pair(r2, two), w3 = q8_weight_pair(r3, two);
        __m512 d0 = q8_weight_scales(r0, two), d1 = q8_weight_scales(r1, two),
               d2 = q8_weight_scales(r2, two), d3 = q8_weight_scales(r3, two);
        Q8ActPair x = q8_act_pair(&x0, b, two);
        a00 = q8_madd(w0, d0, x, a00), a10 = q8_madd(w1, d1, x, a10);
        a20 = q8_madd(w2, d2, x, a20), a30 = q8_madd(w3, d3, x, a30);
        x = q8_act_pair(&x1, b, two);
        a01 = q8_madd(w0, d0, x, a01), a11 = q8_madd(w1, d1, x, a11);
        a21 = q8_madd(w2, d2, x, a21), a31 = q8_madd(w3, d3, x, a31);
        if (TT > 2) {
            x = q8_act_pair(&x2, b, two);
            a02 = q8_madd(w0, d0, x, a02), a12 = q8_madd(w1, d1, x, a12);
            a22 = q8_madd(w2, d2, x, a22), a32 = q8_madd(w3, d3, x, a32);
        }
    }
    float *o = job->out + (size_t)t0 * N + n;
    store_row4(o, a00, a10, a20, a30);
    o += N;
    store_row4(o, a01, a11, a21, a31);
    if (TT > 2) {
        o += N;
        store_row4(o, a02, a12, a22, a32);
    }
}

/* The shapes, each compiled with constant sizes so that the loops unroll. */
static AVX512_FN void q8_r4t4(const MatmulJob *j, int n, int t) { q8_tile_4x4(j, n, t); }
static AVX512_FN void q8_r1t4(const MatmulJob *j, int n, int t) { q8_tile(j, n, t, 1, 4); }
static AVX512_FN void q8_r4t1(const MatmulJob *j, int n, int t) { q8_tile(j, n, t, 4, 1); }
static AVX512_FN void q8_r1t1(const MatmulJob *j, int n, int t) { q8_tile(j, n, t, 1, 1); }
static AVX512_FN void q8_r4t2(const MatmulJob *j, int n, int t) { q8_tile_4xn(j, n, t, 2); }
static AVX512_FN void q8_r4t3(const MatmulJob *j, int n, int t) { q8_tile_4xn(j, n, t, 3); }
static const TileSet Q8_TILES = {q8_r4t4, q8_r1t4, q8_r4t1, q8_r1t1, q8_r4t2, q8_r4t3};

/* --- AVX-512: F32 and F16 tiles (T == 1, and batches of a few tokens)
 *
 * R rows at once share each load of x, TT tokens share each load of W; one
 * FMA chain per (row, token). F16 rows are widened in registers (vcvtph2ps),
 * so they cost 2 bytes of memory per weight. */

/* 16 weights from k (only `m` of them at the end of a row) as floats. */
AVX512_INLINE __m512 wide_load(const uint8_t *row, int k, DType type, __mmask16 m) {
    if (type == DT_F16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + k));
    return _mm512_maskz_loadu_ps(m, (const float *)row + k);
}

/* out[t][n + r] for r < R, t0 <= t < t0 + TT. */
AVX512_INLINE void float_tile(const MatmulJob *job, int n, int t0, DType type, int R, int TT) {
    int N = job->W->N, K = job->W->K;
    const uint8_t *w = row_ptr(job->W, n);
    size_t wstride = dtype_row_bytes(type, K), wsize = type == DT_F16 ? 2 : 4;
    const float *x = job->x + (size_t)t0 * K;
    __m512 acc[4][4], wv[4];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++) acc[r][t] = _mm512_setzero_ps();
    int k = 0;
    for (; k + 16 <= K; k += 16) {
        for (int r = 0; r < R; r++) {
            prefetch_next_tile(w + r * wstride + k * wsize, R, wstride);
            wv[r] = wide_load(w + r * wstride, k, type, 0xffff);
        }
        for (int t = 0; t < TT; t++) {
            __m512 xv = _mm512_loadu_ps(x + (size_t)t * K + k);
            for (int r = 0; r < R; r++) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    if (k < K) {   /* masked loads read nothing past the row */
        __mmask16 m = (__mmask16)((1u << (K - k)) - 1);
        for (int r = 0; r < R; r++) wv[r] = wide_load(w + r * wstride, k, type, m);
        for (int t = 0; t < TT; t++) {
            __m512 xv = _mm512_maskz_loadu_ps(m, x + (size_t)t * K + k);
            for (int r = 0; r < R; r++) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++)
            job->out[(size_t)(t0 + t) * N + n + r] = _mm512_reduce_add_ps(acc[r][t]);
}

/* The float tiles of 4 rows below keep their accumulators in named
 * variables: with the array of float_tile, GCC 12 kept a copy of them in
 * memory and stored all 16 at every step of the loop, which halved the speed
 * of the 4 x 4 tile (tools/kbench, T = 8). */
AVX512_INLINE __m512 fma4(__m512 w, __m512 x, __m512 acc) { return _mm512_fmadd_ps(w, x, acc); }

/* 4 rows by TT = 2, 3 or 4 tokens, with named accumulators (see above).
 * 4 x 4 does nearly all the work for T > 1. As for Q8_0, 2 or 3 tokens left
 * over now share each
 * load of the weights: 5632 x 2048 from memory, one thread (tools/kbench
 * --type F32 --shape 5632x2048 --prefill-t T), F32 T = 2: 7.9 -> 10.4
 * GFLOP/s, T = 3: 9.5 -> 15.3, T = 6: 21.3 -> 25.2; F16 T = 2: 16.7 -> 22.1,
 * T = 3: 19.9 -> 32.3; two threads alike. T == 1 keeps float_tile (4 x 1):
 * this one with TT = 1 was 5 to 10% slower for F16 there (its masked loads
 * of halves at every step), and no faster for F32. */
AVX512_INLINE void float_tile_4xn(const MatmulJob *job, int n, int t0, DType type, int TT) {
    int N = job->W->N, K = job->W->K;
    const uint8_t *w = row_ptr(job->W, n);
    size_t ws = dtype_row_bytes(type, K), wsize = type == DT_F16 ? 2 : 4;
    const float *x0 = job->x + (size_t)t0 * K, *x1 = x0 + K, *x2 = x1 + K, *x3 = x2 + K;
    __m512 a00 = _mm512_setzero_ps(), a10 = a00, a20 = a00, a30 = a00, a01 = a00, a11 = a00,
           a21 = a00, a31 = a00, a02 = a00, a12 = a00, a22 = a00, a32 = a00, a03 = a00,
           a13 = a00, a23 = a00, a33 = a00;
    for (int k = 0; k < K; k += 16) {
        __mmask16 m = K - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (K - k)) - 1);
        prefetch_next_tile(w + k * wsize, 4, ws);
        prefetch_next_tile(w + ws + k * wsize, 4, ws);
        prefetch_next_tile(w + 2 * ws + k * wsize, 4, ws);
        prefetch_next_tile(w + 3 * ws + k * wsize, 4, ws);
        __m512 w0 = wide_load(w, k, type, m), w1 = wide_load(w + ws, k, type, m),
               w2 = wide_load(w + 2 * ws, k, type, m), w3 = wide_load(w + 3 * ws, k, type, m);
        __m512 xv = _mm512_maskz_loadu_ps(m, x0 + k);
        a00 = fma4(w0, xv, a00), a10 = fma4(w1, xv, a10), a20 = fma4(w2, xv, a20), a30 = fma4(w3, xv, a30);
        xv = _mm512_maskz_loadu_ps(m, x1 + k);
        a01 = fma4(w0, xv, a01), a11 = fma4(w1, xv, a11), a21 = fma4(w2, xv, a21), a31 = fma4(w3, xv, a31);
        if (TT > 2) {
            xv = _mm512_maskz_loadu_ps(m, x2 + k);
            a02 = fma4(w0, xv, a02), a12 = fma4(w1, xv, a12), a22 = fma4(w2, xv, a22), a32 = fma4(w3, xv, a32);
        }
        if (TT > 3) {
            xv = _mm512_maskz_loadu_ps(m, x3 + k);
            a03 = fma4(w0, xv, a03), a13 = fma4(w1, xv, a13), a23 = fma4(w2, xv, a23), a33 = fma4(w3, xv, a33);
        }
    }
    float *o = job->out + (size_t)t0 * N + n;
    store_row4(o, a00, a10, a20, a30);
    o += N;
    store_row4(o, a01, a11, a21, a31);
    if (TT > 2) store_row4(o + N, a02, a12, a22, a32);
    if (TT > 3) store_row4(o + 2 * (size_t)N, a03, a13, a23, a33);
}

static AVX512_FN void f32_r4t4(const MatmulJob *j, int n, int t) { float_tile_4xn(j, n, t, DT_F32, 4); }
static AVX512_FN void f32_r1t4(const MatmulJob *j, int n, int t) { float_tile(j, n, t, DT_F32, 1, 4); }
static AVX512_FN void f32_r4t1(const MatmulJob *j, int n, int t) { float_tile(j, n, t, DT_F32, 4, 1); }
static AVX512_FN void f32_r1t1(const MatmulJob *j, int n, int t) { float_tile(j, n, t, DT_F32, 1, 1); }
static AVX512_FN void f32_r4t2(const MatmulJob *j, int n, int t) { float_tile_4xn(j, n, t, DT_F32, 2); }
static AVX512_FN void f32_r4t3(const MatmulJob *j, int n, int t) { float_tile_4xn(j, n, t, DT_F32, 3); }
static const TileSet F32_TILES = {f32_r4t4, f32_r1t4, f32_r4t1, f32_r1t1, f32_r4t2, f32_r4t3};

static AVX512_FN void f16_r4t4(const MatmulJob *j, int n, int t) { float_tile_4xn(j, n, t, DT_F16, 4); }
static AVX512_FN void f16_r1t4(const MatmulJob *j, int n, int t) { float_tile(j, n, t, DT_F16, 1, 4); }
static AVX512_FN void f16_r4t1(const MatmulJob *j, int n, int t) { float_tile(j, n, t, DT_F16, 4, 1); }
static AVX512_FN void f16_r1t1(const MatmulJob *j, int n, int t) { float_tile(j, n, t, DT_F16, 1, 1); }
static AVX512_FN void f16_r4t2(const MatmulJob *j, int n, int t) { float_tile_4xn(j, n, t, DT_F16, 2); }
static AVX512_FN void f16_r4t3(const MatmulJob *j, int n, int t) { float_tile_4xn(j, n, t, DT_F16, 3); }
static const TileSet F16_TILES = {f16_r4t4, f16_r1t4, f16_r4t1, f16_r1t1, f16_r4t2, f16_r4t3};

/* Weight rows of one pass over the tokens: small enough to stay in L2 while
 * every group of four tokens visits them, so they come from memory once. */
enum { TILE_CHUNK_BYTES = 256 * 1024 };

/* Rows [n0, n1) for all T tokens, tile by tile: over a chunk of rows, tokens
 * four at a time (their activations stay in L1), and within that rows four at
 * a time; the 1 to 3 tokens left over make one more pass with a 4 x 1, 4 x 2
 * or 4 x 3 tile. T == 1 is one pass down the rows. */
static void rows_by_tiles(const MatmulJob *job, int part, int n0, int n1) {
    const TileSet *ts = job->tiles;
    int T = job->T;
    size_t row_bytes = dtype_row_bytes(job->W->type, job->W->K);
    int chunk = row_bytes ? (int)(TILE_CHUNK_BYTES / row_bytes) / 4 * 4 : 4;
    if (chunk < 4) chunk = 4;
    for (int c0 = n0; c0 < n1; c0 += chunk) {
        int c1 = c0 + chunk < n1 ? c0 + chunk : n1, t = 0, n;
        for (; t + 4 <= T; t += 4) {
            for (n = c0; n + 4 <= c1; n += 4) ts->r4t4(job, n, t);
            for (; n < c1; n++) ts->r1t4(job, n, t);
        }
        if (t < T) {   /* 1 to 3 tokens left: one more pass over the chunk */
            TileFn r4 = T - t == 3 ? ts->r4t3 : T - t == 2 ? ts->r4t2 : ts->r4t1;
            for (n = c0; n + 4 <= c1; n += 4) r4(job, n, t);
            for (; n < c1; n++)
                for (int u = t; u < T; u++) ts->r1t1(job, n, u);
        }
    }
}

/* One row of K halves widened to floats, for sgemm. */
static AVX512_FN void f16_widen_avx512(float *out, const uint16_t *h, int K) {
    int k = 0;
    for (; k + 16 <= K; k += 16)
        _mm512_storeu_ps(out + k, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + k))));
    if (k < K) {
        __mmask16 m = (__mmask16)((1u << (K - k)) - 1);
        _mm512_mask_storeu_ps(out + k, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, h + k)));
    }
}

/* --- AVX-512: F32 and F16 for KB_MIN_T <= T < SGEMM_MIN_T tokens, K in
 * blocks that stay in L1.
 *
 * The 4 x 4 tile does 16 FMAs for 8 loads of 64 bytes. Over whole rows of
 * K = 2048 floats its working set is 4 rows of W and 4 rows of x, 64 KiB,
 * twice L1, so nearly every load comes from L2, and L2 bandwidth sets the
 * speed: about 40 GFLOP/s on one core, where the same loop on data in L1
 * does 80 to 115. Rows of 8 KiB also all start at the same L1 set, so even a
 * few of them evict each other.
 *
 * So the rows of one chunk are computed a k-block at a time:
 *   for each chunk of rows (their partial sums fit KB_ACC_BYTES):
 *     for each k-block of kb floats:
 *       copy the k-block of every token's x into xbuf (T x kb floats, at most
 *       KB_X_BYTES: stays in L1 while all row groups of the chunk use it)
 *       for each group of 4 rows:
 *         widen its k-block of W into wbuf (4 x kb floats, in L1 while all
 *         token groups use it; F16 is widened once here, not per token group)
 *         for each group of 4 tokens: the 4 x 4 tile over the k-block, its
 *           accumulators loaded from and stored back to acc
 * Both buffers are contiguous, so they spread over all L1 sets, and padded
 * with zeros to whole vectors, so the tiles need no masks. Each weight is
 * read from memory once (into wbuf), each x value from L2 once per chunk.
 * While a chunk is computed, the tiles ask for the next chunk's rows, a line
 * per step (kb_prefetch): without that the core computed and then waited for
 * memory in turn (T = 16: 35 instead of 50 GFLOP/s).
 *
 * The partial sums are kept as whole vectors between k-blocks, so every
 * (row, token) gets the FMA chain of the T == 1 tiles, lane by lane in the
 * same order, and the same final _mm512_reduce_add_ps: the same bits.
 *
 * Measured against the tiles of rows_by_tiles on 5632 x 2048 from memory,
 * GFLOP/s, 1 thread / 2 threads (OPENBLAS_CORETYPE=SkylakeX build/fast/kbench
 * --type F32 --shape 5632x2048 --prefill-t T --threads both; the machine is
 * shared and noisy, so the two were also run interleaved, 15 times each):
 *   T = 8:  28 / 32 against 31 / 40 (worse: the copies cost more than L2)
 *   T = 12: 36 / 45 against 37 / 54
 *   T = 16: 47 / 85 against 31 / 56 (kbench); 50 / 65 against 42 / 58
 *   T = 24: 50 / 70 against 33 / 52 (kbench); 51 / 100 against 44 / 90
 * F16 at T = 16: 58 / 91 against 51 / 81. Hence KB_MIN_T = 16. In some
 * sittings, with the shared machine busier (a loop of FMAs alone ran at 120
 * instead of 148 GFLOP/s), the gain at T = 16 fell to 5 to 15%: the blocks
 * count on L1 being ours. The k-blocks still leave the core waiting for
 * memory part of the time: from memory one core could reach about 80 at
 * T = 16 (10 GB/s of weights). */
enum {
    KB_MIN_T = 16,              /* below this the tiles of rows_by_tiles win */
    KB_X_BYTES = 16 * 1024,     /* a k-block of x for all T tokens */
    KB_MAX = 512,               /* floats in a k-block, at most */
    KB_ACC_BYTES = 32 * 1024,   /* partial sums (16 floats each) of one chunk of rows */
};

/* len values of a float row (F32 or F16) from k0 as floats, then zeros up to
 * a whole vector. */
AVX512_INLINE void kb_pack_row(float *buf, const uint8_t *row, DType type, int k0, int len) {
    int k = 0;
    for (; k + 16 <= len; k += 16) _mm512_store_ps(buf + k, wide_load(row, k0 + k, type, 0xffff));
    if (k < len)
        _mm512_store_ps(buf + k, wide_load(row, k0 + k, type, (__mmask16)((1u << (len - k)) - 1)));
}

/* Asks for the next line of the stream pf (NULL: none) that the tiles read
 * through while they compute, one line of 64 bytes per step of 16 floats. */
AVX512_INLINE void kb_prefetch(const uint8_t *pf, int k) {
    if (pf) _mm_prefetch((const char *)(pf + (size_t)k * 4), _MM_HINT_T1);
}

/* acc[4 t + r] += the lanes of w_r * x_t over len floats (a multiple of 16),
 * for rows r < 4 at a stride of `stride` floats in w, tokens t < 4 in x;
 * asks for len * 4 bytes of pf meanwhile. */
AVX512_INLINE void kb_tile_4x4(__m512 *acc, const float *w, const float *x, int stride, int len,
                               const uint8_t *pf) {
    const float *w1 = w + stride, *w2 = w1 + stride, *w3 = w2 + stride;
    const float *x1 = x + stride, *x2 = x1 + stride, *x3 = x2 + stride;
    __m512 a00 = acc[0], a10 = acc[1], a20 = acc[2], a30 = acc[3], a01 = acc[4], a11 = acc[5],
           a21 = acc[6], a31 = acc[7], a02 = acc[8], a12 = acc[9], a22 = acc[10], a32 = acc[11],
           a03 = acc[12], a13 = acc[13], a23 = acc[14], a33 = acc[15];
    for (int k = 0; k < len; k += 16) {
        kb_prefetch(pf, k);
        __m512 w0v = _mm512_load_ps(w + k), w1v = _mm512_load_ps(w1 + k),
               w2v = _mm512_load_ps(w2 + k), w3v = _mm512_load_ps(w3 + k);
        __m512 xv = _mm512_load_ps(x + k);
        a00 = fma4(w0v, xv, a00), a10 = fma4(w1v, xv, a10), a20 = fma4(w2v, xv, a20), a30 = fma4(w3v, xv, a30);
        xv = _mm512_load_ps(x1 + k);
        a01 = fma4(w0v, xv, a01), a11 = fma4(w1v, xv, a11), a21 = fma4(w2v, xv, a21), a31 = fma4(w3v, xv, a31);
        xv = _mm512_load_ps(x2 + k);
        a02 = fma4(w0v, xv, a02), a12 = fma4(w1v, xv, a12), a22 = fma4(w2v, xv, a22), a32 = fma4(w3v, xv, a32);
        xv = _mm512_load_ps(x3 + k);
        a03 = fma4(w0v, xv, a03), a13 = fma4(w1v, xv, a13), a23 = fma4(w2v, xv, a23), a33 = fma4(w3v, xv, a33);
    }
    acc[0] = a00, acc[1] = a10, acc[2] = a20, acc[3] = a30, acc[4] = a01, acc[5] = a11;
    acc[6] = a21, acc[7] = a31, acc[8] = a02, acc[9] = a12, acc[10] = a22, acc[11] = a32;
    acc[12] = a03, acc[13] = a13, acc[14] = a23, acc[15] = a33;
}

/* The same for 4 rows and one token (the tokens left over, T % 4). */
AVX512_INLINE void kb_tile_4x1(__m512 *acc, const float *w, const float *x, int stride, int len,
                               const uint8_t *pf) {
    const float *w1 = w + stride, *w2 = w1 + stride, *w3 = w2 + stride;
    __m512 a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
    for (int k = 0; k < len; k += 16) {
        kb_prefetch(pf, k);
        __m512 xv = _mm512_load_ps(x + k);
        a0 = fma4(_mm512_load_ps(w + k), xv, a0), a1 = fma4(_mm512_load_ps(w1 + k), xv, a1);
        a2 = fma4(_mm512_load_ps(w2 + k), xv, a2), a3 = fma4(_mm512_load_ps(w3 + k), xv, a3);
    }
    acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3;
}

/* One row and up to 4 tokens (the rows left over, N % 4): acc[4 t] for t < TT. */
AVX512_INLINE void kb_tile_1xn(__m512 *acc, const float *w, const float *x, int stride, int len, int TT) {
    __m512 a0 = acc[0], a1 = TT > 1 ? acc[4] : a0, a2 = TT > 2 ? acc[8] : a0, a3 = TT > 3 ? acc[12] : a0;
    for (int k = 0; k < len; k += 16) {
        __m512 wv = _mm512_load_ps(w + k);
        a0 = fma4(wv, _mm512_load_ps(x + k), a0);
        if (TT > 1) a1 = fma4(wv, _mm512_load_ps(x + stride + k), a1);
        if (TT > 2) a2 = fma4(wv, _mm512_load_ps(x + 2 * stride + k), a2);
        if (TT > 3) a3 = fma4(wv, _mm512_load_ps(x + 3 * stride + k), a3);
    }
    acc[0] = a0;
    if (TT > 1) acc[4] = a1;
    if (TT > 2) acc[8] = a2;
    if (TT > 3) acc[12] = a3;
}

/* Rows [n0, n1) for all T tokens, in the order described above. */
AVX512_INLINE void float_rows_kblocked(const MatmulJob *job, int n0, int n1, DType type) {
    int N = job->W->N, K = job->W->K, T = job->T;
    int kb = KB_X_BYTES / (int)sizeof(float) / T / 16 * 16;
    kb = kb > KB_MAX ? KB_MAX : kb < 16 ? 16 : kb;
    int rows = KB_ACC_BYTES / (int)sizeof(__m512) / T / 4 * 4;
    rows = rows < 4 ? 4 : rows;
    assert(4 * T <= KB_ACC_BYTES / (int)sizeof(__m512) && T * kb <= KB_X_BYTES / (int)sizeof(float));
    __m512 acc[KB_ACC_BYTES / sizeof(__m512)];
    float xbuf[KB_X_BYTES / sizeof(float)] __attribute__((aligned(64)));
    float wbuf[4 * KB_MAX] __attribute__((aligned(64)));
    for (int c0 = n0; c0 < n1; c0 += rows) {
        int c1 = c0 + rows < n1 ? c0 + rows : n1, groups = (c1 - c0 + 3) / 4;
        for (int i = 0; i < groups * 4 * T; i++) acc[i] = _mm512_setzero_ps();
        /* The next chunk's rows are one run of memory: each tile call asks
         * for the next piece of it while it computes, a line per step. For
         * T >= 16 the steps of one chunk cover the next one (F32: a line per
         * 16 FMAs; sooner for F16). Asked for all at once, the requests
         * filled the queues and the core waited instead of computing. */
        int c2 = c1 + rows < n1 ? c1 + rows : n1;
        const uint8_t *pf_base = row_ptr(job->W, c1);
        size_t pf_at = 0, pf_len = (size_t)(c2 - c1) * dtype_row_bytes(type, K);
        for (int k0 = 0; k0 < K; k0 += kb) {
            int len = K - k0 < kb ? K - k0 : kb, len16 = (len + 15) / 16 * 16;
            for (int t = 0; t < T; t++)
                kb_pack_row(xbuf + t * kb, (const uint8_t *)(job->x + (size_t)t * K), DT_F32, k0, len);
            for (int g = 0; g < groups; g++) {
                int n = c0 + 4 * g, R = c1 - n < 4 ? c1 - n : 4;
                for (int r = 0; r < R; r++)
                    kb_pack_row(wbuf + r * kb, row_ptr(job->W, n + r), type, k0, len);
                __m512 *ag = acc + (size_t)g * 4 * T;
                int t = 0;
                if (R == 4) {
                    for (; t + 4 <= T; t += 4, pf_at += (size_t)len16 * 4)
                        kb_tile_4x4(ag + 4 * t, wbuf, xbuf + t * kb, kb, len16,
                                    pf_at + (size_t)len16 * 4 <= pf_len ? pf_base + pf_at : NULL);
                    for (; t < T; t++, pf_at += (size_t)len16 * 4)
                        kb_tile_4x1(ag + 4 * t, wbuf, xbuf + t * kb, kb, len16,
                                    pf_at + (size_t)len16 * 4 <= pf_len ? pf_base + pf_at : NULL);
                    continue;
                }
                for (int r = 0; r < R; r++) {
                    for (t = 0; t + 4 <= T; t += 4)
                        kb_tile_1xn(ag + 4 * t + r, wbuf + r * kb, xbuf + t * kb, kb, len16, 4);
                    for (; t < T; t++) kb_tile_1xn(ag + 4 * t + r, wbuf + r * kb, xbuf + t * kb, kb, len16, 1);
                }
            }
        }
        for (int n = c0; n < c1; n++) {
            const __m512 *an = acc + (size_t)(n - c0) / 4 * 4 * T + (n - c0) % 4;
            for (int t = 0; t < T; t++) job->out[(size_t)t * N + n] = _mm512_reduce_add_ps(an[4 * t]);
        }
    }
}

static AVX512_FN void f32_rows_kblocked(const MatmulJob *job, int part, int n0, int n1) {
    float_rows_kblocked(job, n0, n1, DT_F32);
}
static AVX512_FN void f16_rows_kblocked(const MatmulJob *job, int part, int n0, int n1) {
    float_rows_kblocked(job, n0, n1, DT_F16);
}
#endif /* OPS_X86 */

/* --- OpenBLAS for many tokens: sgemm (and sgemv for the plain F32 T == 1)
 * on each thread's range of rows. */
static void f32_rows_blas(const MatmulJob *job, int part, int n0, int n1) {
    int N = job->W->N, K = job->W->K;
    const float *w = (const float *)row_ptr(job->W, n0);
    if (job->T == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, n1 - n0, K, 1.0f, w, K, job->x, 1, 0.0f,
                    job->out + n0, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, job->T, n1 - n0, K, 1.0f, job->x, K,
                    w, K, 0.0f, job->out + n0, N);
}

/* F16: widen a few rows at a time to float in this thread's part of the
 * scratch, then sgemm on them. The widening is 1/T of the work. */
enum { F16_WIDE_ROWS = 128, F16_MIN_ROWS_PER_PART = 16 };

static void f16_rows_widened(const MatmulJob *job, int part, int n0, int n1) {
    int N = job->W->N, K = job->W->K, step = job->rows_per_part;
    float *wide = job->wide + (size_t)part * step * K;
    for (int a = n0; a < n1; a += step) {
        int rows = n1 - a < step ? n1 - a : step;
        for (int r = 0; r < rows; r++) {
            const uint16_t *h = (const uint16_t *)row_ptr(job->W, a + r);
#ifdef OPS_X86
            if (job->isa == OPS_AVX512) {
                f16_widen_avx512(wide + (size_t)r * K, h, K);
                continue;
            }
#endif
            dequantize_row(wide + (size_t)r * K, h, DT_F16, K);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, job->T, rows, K, 1.0f, job->x, K, wide,
                    K, 0.0f, job->out + a, N);
    }
}

size_t matmul_scratch_bytes(DType type, int T, int K) {
    if (type == DT_Q8_0) return (size_t)T * act_stride(K) + 64;   /* + 64: we align it */
    if (type == DT_F16) return (size_t)F16_WIDE_ROWS * K * sizeof(float) + 64;
    return 0;
}

/* From this many tokens on, F32 and F16 go to sgemm; below it our tiles win,
 * because the product is still limited by reading W once and sgemm's packing
 * of small blocks costs more than it saves. Measured on 5632 x 2048 F32 from
 * memory (tools/kbench --type F32 --shape 5632x2048 --prefill-t T), 2
 * threads, the k-blocked tiles against sgemm: T = 32: 95 against 76 GFLOP/s,
 * T = 34: 90 against 78, T = 36: 88 against 91, T = 40: 85 against 95,
 * T = 48: 75 against 109 (1 thread alike); F16 (widened for sgemm) at T = 32:
 * 101 against 73, T = 40: 94 against 91. Prefill (T >= 64) stays on sgemm. */
enum { SGEMM_MIN_T = 36 };

void matmul_isa(float *out, const float *x, const Mat *W, int T, void *scratch, OpsIsa isa) {
    int K = W->K;
    assert(W->N >= 0 && K > 0 && T >= 0 && (W->type != DT_Q8_0 || K % QK8_0 == 0));
    if (isa == OPS_AVX512 && ops_best_isa() != OPS_AVX512) isa = OPS_PLAIN;
    MatmulJob job = {.out = out, .x = x, .W = W, .T = T, .isa = isa};
    int team = ops_team_size(W, T);
    switch (W->type) {
    case DT_F32:
#ifdef OPS_X86
        if (isa == OPS_AVX512 && T < SGEMM_MIN_T) {
            job.tiles = &F32_TILES;
            ops_run_rows(T < KB_MIN_T ? rows_by_tiles : f32_rows_kblocked, &job, team);
            return;
        }
#endif
        ops_run_rows(f32_rows_blas, &job, team);
        return;
    case DT_F16:
#ifdef OPS_X86
        if (isa == OPS_AVX512 && T < SGEMM_MIN_T) {
            job.tiles = &F16_TILES;
            ops_run_rows(T < KB_MIN_T ? rows_by_tiles : f16_rows_kblocked, &job, team);
            return;
        }
#endif
        if (T == 1) {
            ops_run_rows(f16_rows_plain, &job, team);
            return;
        }
        /* the scratch holds F16_WIDE_ROWS rows, shared out between the threads */
        if (team > F16_WIDE_ROWS / F16_MIN_ROWS_PER_PART) team = F16_WIDE_ROWS / F16_MIN_ROWS_PER_PART;
        job.wide = (float *)scratch_base(scratch);
        job.rows_per_part = F16_WIDE_ROWS / team;
        ops_run_rows(f16_rows_widened, &job, team);
        return;
    case DT_Q8_0:
        job.act = scratch_base(scratch);
#ifdef OPS_X86
        if (isa == OPS_AVX512) {
            act_pack_avx512(scratch_base(scratch), x, T, K);
            job.tiles = &Q8_TILES;
            ops_run_rows(rows_by_tiles, &job, team);
            return;
        }
#endif
        act_pack_ref(scratch_base(scratch), x, T, K);
        ops_run_rows(q8_rows_plain, &job, team);
        return;
    }
}

void matmul(float *out, const float *x, const Mat *W, int T, void *scratch) {
    matmul_isa(out, x, W, T, scratch, ops_best_isa());
}
