/* rows.h - what the dispatch (ops.c) and every path's row functions share;
 * not part of the engine's interface (that is ops.h, which no file that
 * includes this one besides ops.c and ref.c sees).
 *
 * A matmul is cut into ranges of output rows, one per thread; a rows function
 * (RowsFn) computes one range for all tokens. ops.c decides which rows
 * function runs and on how many threads; tiles_generic.c, tiles_avx512.c,
 * quant.c and quant_avx512.c provide them. Everything they read in common is
 * here: the job, the layout of quantized activations, a weight row's address,
 * and the order in which Q8_0 block sums are added. */
#ifndef ROWS_H
#define ROWS_H
#include "kernels/formats.h"
#include <math.h>

/* The AVX-512 kernels exist on x86-64 with GCC or Clang; elsewhere matmul
 * has only its plain and generic paths. */
#if defined(__x86_64__) && defined(__GNUC__)
#define OPS_X86 1
#endif

/* What one range of rows needs to know: the whole problem, and the scratch
 * prepared for it. */
typedef struct {
    float *out;            /* (T, N) */
    const float *x;        /* (T, K) */
    const Mat *W;          /* (N, K) */
    int T;
    int avx512;            /* 1 on the AVX-512 path: tiles_avx512.c's helpers may run */
    int avx2;              /* 1 on the AVX2 path: tiles_avx2.c's helpers may run */
    int decode_rows;       /* T == 1 on AVX-512: rows read side by side (ops_decode_rows) */
    const uint8_t *act;    /* Q8_0: T rows of act_stride(K) bytes, quantized x */
    float *wide;           /* F16 through sgemm: (team, rows_per_part, K) */
    int rows_per_part;
} MatmulJob;

/* Computes out[t][n] for every t and n in [n0, n1); part is the index of the
 * range (and of the thread), for functions that need their own scratch. */
typedef void (*RowsFn)(const MatmulJob *job, int part, int n0, int n1);

/* How far ahead of its reading one row and one token (decoding) asks for
 * weights: tiles_avx512.c, "reading weights from memory". */
enum { STREAM_AHEAD_BYTES = 12288 };

#ifdef OPS_X86
/* 32 words of a 512-bit register, for the index vectors of word permutes
 * (vpermt2w), written as vector constants. */
typedef short Words32 __attribute__((vector_size(64)));
#include <xmmintrin.h>
/* What a tile of R rows by TT tokens asks for while it reads `bytes` (at
 * least 1) of a row at p, a row being `stride` bytes: one row and one token
 * (decoding, a single stream) the bytes STREAM_AHEAD_BYTES further on, into
 * L1; wider tiles the same place R rows further on, the next tile's rows,
 * into L2. Every 64-byte line of the bytes is asked for. */
static inline void prefetch_weights(const uint8_t *p, size_t bytes, int R, int TT, size_t stride) {
    for (size_t at = 0; at < bytes; at += 64) {
        if (R == 1 && TT == 1) _mm_prefetch((const char *)(p + STREAM_AHEAD_BYTES + at), _MM_HINT_T0);
        else _mm_prefetch((const char *)(p + (size_t)R * stride + at), _MM_HINT_T1);
    }
}
#endif

/* Row n of W (not DT_BF16E: bf16e_row). */
static inline const uint8_t *row_ptr(const Mat *W, int n) {
    return (const uint8_t *)W->data + (size_t)n * dtype_row_bytes(W->type, W->K);
}

/* The multiplier 127 / amax of a Q8_0 block. For amax below about 3.7e-37 it
 * overflows to inf; d = amax / 127 then rounds to 0 in fp16, so the block adds
 * nothing to any dot product, and we store zeros instead of converting inf or
 * NaN to int8 (undefined behaviour in C). */
/* The scale of a block of activations that holds a NaN or an infinity: its
 * values are stored as 0 and its scale as NaN (fp16 0x7E00), so every dot
 * product with it is NaN and the logits say so, where quantizing it would
 * have dropped the NaN (max ignores it) and cast NaN to int8 (undefined). */
enum { Q8_0_NONFINITE_SCALE = 0x7E00 };

static inline float q8_0_multiplier(float amax) {
    float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    return isinf(id) ? 0.0f : id;
}

/* --- Q8_0 activations, in the layout the int8 kernels read.
 *
 * For each of the T rows, at a stride of act_stride(K) bytes (a multiple of 64):
 *   int8_t  qs[K]        the Q8_0 values, blocks back to back (no scales in
 *                        between, so two blocks are one 64-byte load)
 *   int32_t corr[K / 4]  -128 * (sum of each group of four values): the start
 *                        value of a VNNI lane, cancelling the weights' +128
 *   float   d[K / 32]    the block scales, already widened from fp16
 *   int32_t off[K / 32]  8 * (sum of block b's values): what Q4_0's offset
 *                        of 8 takes from a product of its unsigned nibbles
 *                        (tiles_avx2.c, "In eights")
 * The values and scales are exactly quantize_row_q8_0's. */
typedef struct {
    const int8_t *qs;
    const int32_t *corr;
    const float *d;
    const int32_t *off;
} ActRow;

static inline size_t act_stride(int K) { return ((size_t)K * 2 + (size_t)K / 4 + 63) / 64 * 64; }

/* Row t's arrays, to write (the packing functions) or to read (act_row). */
typedef struct {
    int8_t *qs;
    int32_t *corr;
    float *d;
    int32_t *off;
} ActRowOut;

static inline ActRowOut act_row_out(uint8_t *act, int K, int t) {
    uint8_t *p = act + (size_t)t * act_stride(K);
    ActRowOut r = {(int8_t *)p, (int32_t *)(p + K), (float *)(p + 2 * (size_t)K),
                   (int32_t *)(p + 2 * (size_t)K + (size_t)K / 8)};
    return r;
}

static inline ActRow act_row(const uint8_t *act, int K, int t) {
    ActRowOut w = act_row_out((uint8_t *)act, K, t);
    ActRow r = {w.qs, w.corr, w.d, w.off};
    return r;
}

/* --- Activations of the 32-value formats (Q4_0, Q4_1, Q5_0, Q5_1) on AVX-512.
 *
 * The same rounded values and scales as the Q8_0 layout, in the order the
 * kernel holds the weights (quant_avx512.c, "blocks of 32"): a weight
 * block's nibbles give its values 0-15 and 16-31 as two halves, four blocks
 * to a pair of registers. Per row, at a stride of q32_act_stride(K), for each
 * quad of four blocks (the last one padded with zero blocks):
 *   int8_t  qs[128]    values 0-15 of blocks 0..3 of the quad (16 bytes
 *                      each), then values 16-31 of blocks 0..3
 *   int32_t corr[16]   lane 4j + i: -128 * (the sum of values 4i .. 4i+3
 *                      and 16+4i .. 16+4i+3 of block j): the eight values
 *                      the lane's two vpdpbusd multiply
 *   float   d[4]       the scales of blocks 0..3
 *   float   ds[8]      d_j in 2j and s_j = d_j * (the sum of block j's 32
 *                      values) in 2j + 1: what the offsets m of Q4_1 and
 *                      Q5_1 multiply (as llama.cpp's Q8_1 blocks carry s)
 * each array for all the quads back to back. */
typedef struct {
    const int8_t *qs;
    const int32_t *corr;
    const float *d, *ds;
} Q32Act;

static inline int q32_quads(int K) { return (K / 32 + 3) / 4; }
static inline size_t q32_act_stride(int K) { return ((size_t)q32_quads(K) * (128 + 64 + 16 + 32) + 63) / 64 * 64; }

static inline Q32Act q32_act_row(const uint8_t *act, int K, int t) {
    const uint8_t *p = act + (size_t)t * q32_act_stride(K);
    size_t nq = (size_t)q32_quads(K);
    Q32Act r = {(const int8_t *)p, (const int32_t *)(p + 128 * nq), (const float *)(p + 192 * nq),
                (const float *)(p + 208 * nq)};
    return r;
}

/* --- Q8_0 activations for AMX (tiles_amx.c).
 *
 * Tokens in groups of AMX_TOKENS = 16, the last group padded with tokens of
 * zeros. Per group, amx_group_bytes(K) bytes:
 *   int8_t qs[K / 32][8][64]  block b, row r: bytes 4n .. 4n+3 are values
 *                             4r .. 4r+3 of block b of token n (the layout
 *                             of tdpbssd's second tile: four values of each
 *                             of 16 columns to a row)
 *   float  d[K / 32][16]      the scale of block b of token n
 * The values and scales are quantize_row_q8_0's. */
enum { AMX_TOKENS = 16, AMX_BLOCK_BYTES = QK8_0 * AMX_TOKENS };
static inline int amx_groups(int T) { return (T + AMX_TOKENS - 1) / AMX_TOKENS; }
static inline size_t amx_group_bytes(int K) {
    return (size_t)K / QK8_0 * (AMX_BLOCK_BYTES + AMX_TOKENS * sizeof(float));
}
/* For Q4_K the values are rounded as Q8_K (one scale per 256, formats.h),
 * and a group is amx_k_group_bytes(K):
 *   int8_t  qs[K / 32][8][64]     as above
 *   float   d[K / 256][16]        the scale of super-block s of token n
 *   int32_t sums[K / 256][4][16]  pair p of super-block s, token n: the sums
 *                                 of the 32 values of its sub-blocks 2p (low
 *                                 16 bits) and 2p + 1 (high), for vpdpwssd */
static inline size_t amx_k_group_bytes(int K) {
    return (size_t)K / QK_K * (8 * AMX_BLOCK_BYTES + AMX_TOKENS * sizeof(float) + 4 * AMX_TOKENS * sizeof(int32_t));
}
/* Whether type has an AMX path, and the bytes its activations take there. */
static inline int amx_type(DType type) { return type == DT_Q8_0 || type == DT_Q4_0 || type == DT_Q4_K; }
static inline size_t amx_act_bytes(DType type, int T, int K) {
    return (size_t)amx_groups(T) * (type == DT_Q4_K ? amx_k_group_bytes(K) : amx_group_bytes(K));
}

/* --- The 4, 5 and 6-bit block formats (quant.c).
 * Activations for them: the Q8_0 layout above for the 32-value formats (on
 * AVX-512 the Q32Act layout; the stride covers both); for the K formats T
 * rows of K / 256 BlockQ8_K, back to back. */
size_t small_act_stride(DType type, int K);
void small_act_pack_k(uint8_t *act, const float *x, int T, int K);
/* Unpacking (quant.c explains the terms). */
void k_scale_min(const uint8_t s[12], int j, int *sc, int *mn);
void q32_unpack(DType type, const void *blk, int8_t q[QK4], float *d, float *m);
void qk_unpack(DType type, const void *blk, uint8_t q[QK_K], int sc[16], int mn[16], float *d,
               float *dmin);
void dequantize_row_small(float *out, const void *row, DType type, int K);
/* The plain path: one row widened to float, dotted with T rows of x. */
void small_dots_ref(float *out, size_t stride, const void *row, DType type, const float *x, int K, int T);
/* The generic path: integer products against the rounded activations (job->act). */
void small_rows_generic(const MatmulJob *job, int part, int n0, int n1);

#ifdef OPS_X86
/* From quant_avx512.c: the same on AVX-512 and VNNI. */
void small_rows_avx512(const MatmulJob *job, int part, int n0, int n1);
/* quantize_row_q8_k_ref and small_act_pack_k, 16 values an instruction,
 * the same bits. */
void quantize_row_q8_k_avx512(BlockQ8_K *out, const float *x, int K);
void small_act_pack_k_avx512(uint8_t *act, const float *x, int T, int K);
/* Q8_K activations (small_act_pack_k) into the order the Q4_K and Q5_K
 * kernels read them; not for Q6_K. */
void qk_act_reorder_avx512(uint8_t *act, int T, int K);

/* From tiles_avx512.c; call them only when ops_best_isa() is OPS_AVX512. */

/* quantize_row_q8_0, 16 values per instruction, bit-identical. */
void quantize_row_q8_0_avx512(BlockQ8_0 *out, const float *x, int K);
/* T rows of x to the layout above (job->act). */
void act_pack_avx512(uint8_t *act, const float *x, int T, int K);
/* One row of K halves widened to floats, for sgemm. */
void f16_widen_avx512(float *out, const uint16_t *h, int K);
/* T rows of x to the Q32Act layout. */
void q32_act_pack_avx512(uint8_t *act, const float *x, int T, int K);
/* ops_scores and ops_add_weighted_rows. */
void scores_avx512(float *s, const float *q, const float *rows, int n, int S, size_t stride, float scale);
void add_weighted_rows_avx512(float *out, const float *w, const float *rows, int n, int S, size_t stride);
/* ops_read_sum's fast side: bytes a multiple of 256. */
uint64_t read_sum_avx512(const uint8_t *p, size_t bytes);

/* Rows functions for T < SGEMM_MIN_T (F32, F16) and any T (Q8_0, after
 * act_pack_avx512): register tiles, k-blocked from KB_MIN_T tokens. */
void f32_rows_avx512(const MatmulJob *job, int part, int n0, int n1);
void f16_rows_avx512(const MatmulJob *job, int part, int n0, int n1);
void bf16_rows_avx512(const MatmulJob *job, int part, int n0, int n1);
/* BF16E (formats.h): its blocks decoded in registers inside the same tiles.
 * They need AVX512-VBMI2 besides (vpexpandb): bf16e_avx512_ok() says whether
 * this CPU has it; without it BF16E takes the generic path. */
int bf16e_avx512_ok(void);
void bf16e_rows_avx512(const MatmulJob *job, int part, int n0, int n1);
void bf16e_widen_avx512(float *out, const Mat *W, int n);   /* row n to floats */
void q8_0_rows_avx512(const MatmulJob *job, int part, int n0, int n1);
#endif

#ifdef OPS_X86
/* From tiles_avx2.c; call them only when ops_best_isa() is OPS_AVX2 or
 * OPS_AVX512. F32, F16 and BF16 for T < SGEMM_MIN_T_AVX2; Q8_0 and Q4_0 after
 * act_pack_avx2 or act_pack_ref (the Q8_0 layout above); Q4_K and Q6_K
 * after small_act_pack_k. */
void f32_rows_avx2(const MatmulJob *job, int part, int n0, int n1);
void f16_rows_avx2(const MatmulJob *job, int part, int n0, int n1);
void bf16_rows_avx2(const MatmulJob *job, int part, int n0, int n1);
/* BF16E, its blocks decoded in registers (no scratch). */
void bf16e_rows_avx2(const MatmulJob *job, int part, int n0, int n1);
void bf16e_widen_avx2(float *out, const Mat *W, int n);   /* row n to floats */
void q8_0_rows_avx2(const MatmulJob *job, int part, int n0, int n1);
void q4_0_rows_avx2(const MatmulJob *job, int part, int n0, int n1);
void qk_rows_avx2(const MatmulJob *job, int part, int n0, int n1);
/* quantize_row_q8_0_ref and act_pack_ref, eight values an instruction: the
 * same bits. */
void quantize_row_q8_0_avx2(BlockQ8_0 *out, const float *x, int K);
void act_pack_avx2(uint8_t *act, const float *x, int T, int K);
/* quantize_row_q8_k_ref and small_act_pack_k, eight values an instruction,
 * the same bits. */
void quantize_row_q8_k_avx2(BlockQ8_K *out, const float *x, int K);
void small_act_pack_k_avx2(uint8_t *act, const float *x, int T, int K);
/* ops_scores and ops_add_weighted_rows. */
void scores_avx2(float *s, const float *q, const float *rows, int n, int S, size_t stride, float scale);
void add_weighted_rows_avx2(float *out, const float *w, const float *rows, int n, int S, size_t stride);
#endif

#ifdef OPS_X86
/* From tiles_amx.c. amx_ok: this CPU has AMX tiles with int8 products and
 * the operating system lets this process use them (asked for once). */
int amx_ok(void);
/* T rows of x to the AMX layout above (job->act). */
void amx_act_pack(uint8_t *act, const float *x, int T, int K);
/* The same for Q4_K (Q8_K values and the sums of sub-blocks). */
void amx_act_pack_k(uint8_t *act, const float *x, int T, int K);
/* Q8_0, Q4_0 and Q4_K rows in 16 x 16 tiles (W->N >= 16), after
 * amx_act_pack or amx_act_pack_k. */
void q8_0_rows_amx(const MatmulJob *job, int part, int n0, int n1);
void q4_0_rows_amx(const MatmulJob *job, int part, int n0, int n1);
void q4_k_rows_amx(const MatmulJob *job, int part, int n0, int n1);
#endif

/* --- The Q8_0 sums, in one order for every path. */

/* The float sum of a Q8_0 dot product, added in the order of the AVX-512
 * kernel (tiles_avx512.c) so that every path gives the same bits. That kernel
 * keeps 16 running sums, "lanes": lane j takes the values 4j .. 4j+3 of an
 * even block, lane 8 + j the same values of an odd block. Each lane adds the
 * exact integer sum of its four products times d_w * d_x, rounded once (an
 * FMA), and at the end the 16 lanes are added in halves. In exact arithmetic
 * all of it is simply
 *     sum over blocks b of  d_w[b] * d_x[b] * sum_i w[b][i] * x[b][i]. */
enum { LANES = 16 };

/* Block b into the lanes: int8 weights wq and activations xq, d = d_w * d_x.
 * The 32 products first, then the sums of four: a form the compiler turns
 * into vector code for the generic path. */
static inline void q8_0_block_into_lanes(float lane[LANES], int b, const int8_t *wq, const int8_t *xq,
                                  float d) {
    int32_t prod[QK8_0], isum[8];   /* exact */
    for (int i = 0; i < QK8_0; i++) prod[i] = wq[i] * xq[i];
    for (int j = 0; j < 8; j++) isum[j] = prod[4 * j] + prod[4 * j + 1] + prod[4 * j + 2] + prod[4 * j + 3];
    float *l = lane + (b % 2) * 8;
    for (int j = 0; j < 8; j++) l[j] = fmaf((float)isum[j], d, l[j]);
}

/* The lanes added as _mm512_reduce_add_ps adds them (GCC's avx512fintrin.h):
 * lane i to lane i + 8, those four apart, then two apart, then the last two. */
static inline float lanes_sum(const float lane[LANES]) {
    float h[8], q[4];
    for (int i = 0; i < 8; i++) h[i] = lane[i] + lane[i + 8];
    for (int i = 0; i < 4; i++) q[i] = h[i] + h[i + 4];
    return (q[0] + q[2]) + (q[1] + q[3]);
}

/* One block of 32 floats to 32 int8 values, as quantize_row_q8_0_ref; returns
 * d as fp16 bits (ref.c). */
uint16_t q8_0_quantize_block_ref(int8_t qs[QK8_0], const float *xb);

/* --- The generic path (tiles_generic.c). */

/* T rows of x to the int8 layout above (act_row). */
void act_pack_ref(uint8_t *act, const float *x, int T, int K);
void q8_0_rows_generic(const MatmulJob *job, int part, int n0, int n1);
void f16_rows_generic(const MatmulJob *job, int part, int n0, int n1);   /* F16, BF16; T == 1 */
void f32_rows_blas(const MatmulJob *job, int part, int n0, int n1);
/* F16 and BF16 through sgemm: a few rows at a time widened into the job's
 * scratch (job->wide, rows_per_part rows for each part). */
enum { F16_WIDE_ROWS = 128, F16_MIN_ROWS_PER_PART = 16 };
void f16_rows_widened(const MatmulJob *job, int part, int n0, int n1);

#endif
