/* ops.h - numeric kernels of the forward pass.
 *
 * Every kernel has a plain-loop reference (suffix _ref) written to be read, and
 * the public entry point that model.c calls, which may take a fast path
 * (OpenBLAS, AVX-512, VNNI). tests/test_ops.c checks that the two agree. One
 * process-wide choice (ops_set_isa) sends every entry point to its reference
 * instead, for stepping through in a debugger. The formats the products
 * read (DType, Mat, the block layouts) are in formats.h; ops.c, the
 * dispatch, tells how the wing is laid out.
 *
 * Names of dimensions: T tokens (rows of activations), N output features
 * (rows of a weight matrix), K input features (columns). */
#ifndef OPS_H
#define OPS_H
#include "base/err.h"
#include "kernels/formats.h"
#include <stddef.h>
#include <stdint.h>

/* Threads the kernels use (1 .. cores); OpenBLAS runs single-threaded inside
 * them when OpenMP is on, so that one pool of threads owns the cores. */
void ops_set_threads(int n);
int ops_threads(void);

/* Instruction sets: which path matmul() and the kernels around it take.
 *   OPS_PLAIN    the plain-loop references on one thread: no OpenMP, no
 *                OpenBLAS, no intrinsics (matmul is matmul_ref, softmax is
 *                softmax_ref, attention a plain loop). For the debugger; the
 *                default of the debug build.
 *   OPS_GENERIC  no intrinsics of ours: OpenBLAS for F32 and F16, threaded
 *                plain loops for Q8_0. The fast path without AVX-512.
 *   OPS_AVX2     AVX2, FMA and F16C tiles (tiles_avx2.c) for F32, F16, BF16,
 *                Q8_0, Q4_0, Q4_K and Q6_K, the generic path for the rest:
 *                the fast path of an x86-64 CPU without AVX-512. OpenBLAS
 *                for F32, F16 and BF16 from 48 tokens.
 *   OPS_AVX512   AVX-512 and VNNI tiles (tiles_avx512.c), OpenBLAS from 36 tokens.
 *   OPS_BEST     the best of the three that the CPU has (the default of
 *                the fast and test builds).
 * Q8_0 gives the same bits on every path (but for the AMX tiles and the
 * AVX2 tiles in eights, the AVX2 path's default, which give
 * matmul_blocks_ref's; LLM_ROWS8=1 below);
 * F32 and F16 differ by float rounding only (sums in another order). The 4, 5 and 6-bit block formats
 * round activations on the generic and AVX-512 paths (the same integer sums,
 * float sums in another order) and not on the plain one (notes/formats.md). */
typedef enum { OPS_BEST = -1, OPS_PLAIN = 0, OPS_AVX512 = 1, OPS_GENERIC = 2, OPS_AVX2 = 3 } OpsIsa;
OpsIsa ops_best_isa(void);   /* AVX-512 (F, BW, VL, VNNI, F16C, FMA), AVX2 (with FMA, F16C) or generic */
const char *ops_isa_name(OpsIsa isa);    /* "plain", "generic", "avx2", "avx512" or "best" */

/* The process-wide choice. The build sets the start (OPS_DEFAULT_ISA: plain
 * for `make`, best otherwise); ops_isa() is the path it runs on this CPU,
 * never OPS_BEST (a path asked for on a CPU without its instructions runs
 * the best one the CPU has below it). */
void ops_set_isa(OpsIsa isa);
OpsIsa ops_isa(void);
/* "plain", "generic", "avx2", "avx512" or "best" into *out. ST_ARG for any
 * other string, ST_UNSUPPORTED for "avx2" or "avx512" on a CPU without it;
 * e gets one line. */
int ops_parse_isa(const char *s, OpsIsa *out, Err *e);
/* At start-up: the environment variable LLM_ISA, when set and not empty, is
 * parsed as above and set; a bad value leaves the choice as it was and
 * returns the error, its message starting "LLM_ISA: ". LLM_DECODE_ROWS,
 * LLM_AMX and LLM_ROWS8 likewise (below; "LLM_DECODE_ROWS: " for a value
 * other than 1 or 4, "LLM_AMX: " for one other than 0 or 1, "LLM_ROWS8: "
 * for one other than 0, 1 or 2). First of all, OPENBLAS_CORETYPE naming a
 * core whose OpenBLAS kernels this CPU cannot run (SkylakeX without
 * AVX-512: OpenBLAS would die of SIGILL at its first sgemm) is
 * ST_UNSUPPORTED, the message starting "OPENBLAS_CORETYPE=". */
int ops_isa_from_env(Err *e);

/* How many weight rows a product of one token (decoding) reads side by side
 * on AVX-512: 1, one sequential stream that asks for the bytes ahead of it
 * itself, or 4, four streams that the hardware prefetcher follows (on AVX2,
 * 4 has the F32, F16 and BF16 tiles read four rows a quarter of the range
 * apart, four streams). Each row's sum is made the same way either way, so
 * the bits do not change; the speed does, by CPU kind (notes/formats.md):
 * 4 on Intel and on a CPU without AVX-512, 1 on any other. Set by
 * ops_set_decode_rows (0: the CPU's choice again) or, at start-up, by
 * LLM_DECODE_ROWS=1|4 through ops_isa_from_env. */
int ops_decode_rows(void);
void ops_set_decode_rows(int rows);

/* Whether Q8_0, Q4_0 and Q4_K products of AMX_MIN_T or more tokens run on
 * AMX tiles (tiles_amx.c; on the AVX-512 path): 1 where the CPU has
 * AMX-INT8, the operating system allows it and nothing turned it off.
 * ops_set_amx(0) turns it off, (-1) back to the CPU's choice; at start-up
 * LLM_AMX=0|1 through ops_isa_from_env. */
enum { AMX_MIN_T = 16 };
int ops_amx(void);
void ops_set_amx(int on);

/* Whether the loader should give a matrix of this type and N rows a copy in
 * eights (Mat.rows8, formats.h: "In eights"), which this path reads
 * instead of its rows: on the AVX2 path, for N a multiple of 8, by mode
 * (ops_set_rows8, or at start-up LLM_ROWS8 through ops_isa_from_env):
 *   0  none
 *   1  Q4_0, Q4_K and Q6_K (Q4_0's AVX2 sums had an order of their own
 *      anyway, and the K formats', exact integers per super-block, keep
 *      the generic path's bits); Q8_0 read in place, with the bits every
 *      other path gives (but the AMX tiles)
 *   2  those and Q8_0 (the default): Q8_0's products then give
 *      matmul_blocks_ref's bits at every size, so a batch still gives each
 *      token's bits alone, but a Q8_0 model's text may differ from another
 *      CPU kind's; batches and prompts 1.5 to 1.9 times as fast, one token
 *      as fast or faster (four streams; notes/formats.md, "In eights")
 * A matrix keeps its rows either way: every other path reads them. */
int ops_rows8(DType type, int N);
void ops_set_rows8(int mode);

/* The read that the matrix kernels are measured against (tools/bench,
 * tools/kbench): bytes p[0 .. bytes) summed as 64-bit words (a tail of
 * fewer than 8 bytes is left out), on the calling thread, as fast as this
 * file knows how to read memory: on AVX-512, 64-byte loads into four
 * accumulators and a software prefetch 1 KiB ahead, the technique the T == 1
 * kernels use; otherwise a plain loop. The sum is returned so that the read
 * cannot be optimised away. */
uint64_t ops_read_sum(const void *p, size_t bytes);

/* matmul calls so far, by the path they ran on (each call counts once in
 * plain, generic, avx2 or avx512), and how many of them handed their products to
 * OpenBLAS (sgemm or sgemv). Process-wide, counted from one calling thread. */
typedef struct {
    uint64_t plain, generic, avx512, avx2;
    uint64_t sgemm;
} OpsStats;
OpsStats ops_stats(void);

/* Scratch bytes that matmul needs for T rows of K inputs against type. */
size_t matmul_scratch_bytes(DType type, int T, int K);

/* out (T, N) = x (T, K) @ W^T, on the path ops_isa() names. On AVX-512:
 * F32: T < 16 AVX-512 register tiles of 4 rows x 4 tokens (T == 1 is
 *      matrix-vector, memory-bound); 16 <= T < 36 the same tiles over blocks
 *      of K that stay in L1; T >= 36, or no AVX-512, OpenBLAS (sgemv at
 *      T == 1, sgemm otherwise).
 * F16: the same tiles, halves widened in registers (or once per block of K);
 *      T >= 36 a few rows at a time widened to float into scratch, then
 *      sgemm on them.
 * Q8_0: each row of x is rounded to Q8_0 blocks first (as llama.cpp does) and
 *       the products are int8 x int8 (VNNI) with one float multiply per block,
 *       in tiles of 4 rows x 4 tokens at any T.
 * Q4_0, Q4_1, Q5_0, Q5_1: the same rounding of x to Q8_0; weights stay packed
 *       and are unpacked to bytes in registers, two blocks per VNNI product.
 *       (On AVX2, Q4_0 and Q8_0 with rows8 read eight rows at a time from
 *       the copy: matmul_blocks_ref's bits; Q4_K and Q6_K too, with the
 *       generic path's bits.)
 * Q4_K, Q5_K, Q6_K: x rounded to Q8_K super-blocks of 256 (as llama.cpp
 *       does); integer sums per sub-block times the 6 or 8-bit sub-block
 *       scales, one float multiply per super-block.
 * Q8_0, Q4_0, Q4_K from AMX_MIN_T tokens where ops_amx(): AMX tiles, 16
 *       rows by 16 tokens, one tdpbssd per block of 32; the same integer
 *       sums, added in float block after block (matmul_blocks_ref's bits),
 *       so a token's result there differs by float rounding from the same
 *       token alone.
 * On the generic path the small block formats take plain integer loops with
 * the same rounding of x (the same integer sums; float sums in another order).
 * Rows are split between ops_threads() threads; each (row, token) result is
 * the same whatever the thread count or T, except where OpenBLAS computes it.
 * The plain path is matmul_ref; the generic one OpenBLAS for F32 and F16 and
 * threaded loops for Q8_0 (and F16 at T == 1).
 * scratch must hold matmul_scratch_bytes(W->type, T, K) bytes, any alignment
 * (F32 needs none; the plain path reads none). */
void matmul(float *out, const float *x, const Mat *W, int T, void *scratch);
/* out[i] = x W[i]^T for n <= MATMUL_GROUP_MAX matrices that read the same x
 * (a layer's q, k and v; its gate and up): as n calls of matmul, with the
 * same bits (where OpenBLAS computes them, as matmul's), but where the matrices share a type and K, x is rounded once
 * and one team of threads takes all their rows. */
enum { MATMUL_GROUP_MAX = 4 };
void matmul_group(float *const out[], const float *x, const Mat *const W[], int n, int T, void *scratch);
/* matmul on a chosen path (AVX-512 on a CPU without it runs generic). */
void matmul_isa(float *out, const float *x, const Mat *W, int T, void *scratch, OpsIsa isa);
/* Plain loops, one thread, same arithmetic contract as matmul. Q8_0: the
 * activations rounded to Q8_0 blocks as quantize_row_q8_0 does, integer
 * products, and the float sums added in the AVX-512 kernel's order, so the
 * result has the same bits as every other path.
 * The 4, 5 and 6-bit formats instead: each weight row dequantized to float
 * and dotted with x as it is, the float64 reference's arithmetic (so the
 * plain path follows `reference float64, weights dequantized`, the fast ones
 * llama.cpp). */
void matmul_ref(float *out, const float *x, const Mat *W, int T);
/* Q8_0, Q4_0 and Q4_K as the AMX tiles add them: per block the exact
 * integer sum (Q4_0's values q - 8), one float chain per (row, token),
 * block after block; Q4_K with activations rounded to Q8_K, a super-block's
 * scaled sums and mins in integers, two float steps per super-block
 * (tiles_amx.c). The reference of that path. */
void matmul_blocks_ref(float *out, const float *x, const Mat *W, int T);


/* out = x / sqrt(mean(x^2) + eps) * w, over n values (out may alias x). */
void rmsnorm(float *out, const float *x, const float *w, int n, float eps);
/* e^x to within about 2 ulp for x in [-87, 88] (clamped outside), written so
 * that a loop of calls vectorizes: x = k ln2 + r with |r| <= ln2 / 2, e^r by
 * its Taylor polynomial of degree 7, 2^k built directly in the exponent bits.
 * libm's expf is exact to 1 ulp but is a call the compiler cannot vectorize,
 * and softmax over attention rows and vocabularies calls it millions of times.
 * Its three choices are ops_pick's selects of bits (below), not conditional
 * expressions: GCC keeps a conditional whose comparison could raise a
 * floating-point exception as a branch (its default, -ftrapping-math), and a
 * loop with a branch is not vectorized (SwiGLU's loop ran a value at a time). */
#ifdef __CUDACC__   /* the CUDA kernels call this very function (src/kernels/) */
#define OPS_HOST_DEVICE __host__ __device__
#else
#define OPS_HOST_DEVICE
#endif
static inline OPS_HOST_DEVICE float ops_pick(int c, float a, float b);
static inline OPS_HOST_DEVICE float ops_exp(float x) {
    x = ops_pick(x < -87.0f, -87.0f, x);   /* NaN stays NaN */
    x = ops_pick(x > 88.0f, 88.0f, x);
    const float magic = 12582912.0f;                /* 1.5 * 2^23: adding it rounds to an integer */
    float k = (x * 1.44269504088896341f + magic) - magic;
    k = ops_pick(k == k, k, 0.0f);   /* x NaN: p below is NaN anyway, but NaN must not become an int */
    float r = x - k * 0.693145751953125f;           /* ln 2 in two parts (Cody and Waite) so */
    r -= k * 1.428606765330187e-06f;                /* that r keeps its low bits */
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    union { uint32_t u; float f; } scale = {.u = (uint32_t)((int32_t)k + 127) << 23};
    return p * scale.f;
}
/* c ? a : b, as the bits of a where c and of b elsewhere: a vector blend. */
static inline OPS_HOST_DEVICE float ops_pick(int c, float a, float b) {
    union { float f; uint32_t u; } x = {a}, y = {b};
    uint32_t m = 0u - (uint32_t)(c != 0);
    x.u = (x.u & m) | (y.u & ~m);
    return x.f;
}

/* In place, numerically stable (subtracts the max); softmax_ref on the
 * plain path. */
void softmax(float *x, int n);
/* The same with libm's expf and a double sum: the reference for tests. */
void softmax_ref(float *x, int n);
/* Attention's two products over n rows of S floats, `stride` floats apart
 * (a block of the KV cache, one KV head): s[j] = scale * (q . row j), and
 * out += sum_j w[j] * row j. AVX-512 where the CPU has it, else loops the
 * compiler vectorizes; the plain path does not call them (its attention is
 * model.c's attend_rows). */
void ops_scores(float *s, const float *q, const float *rows, int n, int S, size_t stride, float scale);
void ops_add_weighted_rows(float *out, const float *w, const float *rows, int n, int S, size_t stride);
/* Rotate pairs (x[2i], x[2i+1]) of the first n_rot dims of each of n_heads heads
 * by angle pos * inv_freq[i]; cos_sin holds (cos, sin) for each i at this pos. */
void rope(float *x, int n_heads, int head_dim, int n_rot, const float *cos_sin);
/* The same angles, NEOX's pairs (GPT-NeoX; Qwen2, Qwen3): dim i with dim
 * i + n_rot/2 of each head, where rope pairs dims 2i and 2i+1. The two are
 * one rotation of differently ordered weights: a model trained with one
 * order reads garbage through the other. */
void rope_neox(float *x, int n_heads, int head_dim, int n_rot, const float *cos_sin);
/* h = silu(h) * g, over n values. */
void swiglu(float *h, const float *g, int n);

#endif
