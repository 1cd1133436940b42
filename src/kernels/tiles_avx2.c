/* tiles_avx2.c - the AVX2 kernels of matmul: the fast path of an x86-64 CPU
 * without AVX-512 (an AMD Zen 2 or Zen 3, an Intel core before Ice Lake):
 * F32, F16 and BF16 register tiles below SGEMM_MIN_T_AVX2 tokens, Q8_0 and Q4_0
 * at any number of tokens, and Q4_K and Q6_K against Q8_K activations.
 *
 * What the AVX-512 file explains (tiles_avx512.c: why decoding is a memory
 * problem, why prefill is a compute problem, the prefetch policy) holds
 * here; only the width differs. A 256-bit register holds 8 floats, so the 16
 * running sums ("lanes", rows.h) of a row and a token live in two registers,
 * lanes 0-7 and 8-15, each lane taking the same products in the same order as
 * on AVX-512 and on the generic path. So:
 *   F32, F16, BF16  lane j adds the products of k = j (mod 16) by FMA; the
 *                   same bits as float_tile (AVX-512) and half_row_dot.
 *   Q8_0            lanes 0-7 the even blocks, 8-15 the odd ones, each lane
 *                   the exact integer sum of four products times d_w * d_x;
 *                   the same bits as q8_0_block_into_lanes.
 *   Q4_K, Q6_K      the exact integer sums of a super-block in vector lanes,
 *                   added across them at its end, then the generic path's
 *                   float step (quant.c, qk_dot_int_of): the same bits as it.
 *   Q4_0            its own order (below): lanes of whole blocks, like Q8_0,
 *                   where the generic path adds block after block.
 *   In eights       Q4_0 and Q8_0 from the copy the loader makes (Mat.rows8):
 *                   one float chain per row, block after block:
 *                   matmul_blocks_ref's bits; Q4_K and Q6_K from theirs:
 *                   the exact sums and float step of the K tiles, so the
 *                   generic path's bits.
 *
 * Without VNNI the int8 products go through vpmaddubsw, which multiplies
 * unsigned bytes by signed bytes and adds neighbouring pairs into int16, with
 * saturation. The pairs must fit: for Q8_0 the weight's magnitude (at most
 * 128) is the unsigned side and its sign moves to the activation (at most
 * 127 in magnitude), so a pair is at most 2 * 128 * 127 = 32512; 4 and 6-bit
 * values are unsigned already (at most 15 and 63). vpmaddwd then adds pairs
 * of those into int32, times 1 or a sub-block's scale.
 *
 * Compiled for AVX2, FMA and F16C by a target attribute on each function:
 * ops.c calls these only after ops_best_isa() has found the instructions. */
#include "kernels/rows.h"

#ifdef OPS_X86
#include <immintrin.h>
#include <assert.h>
#include <stddef.h>
#include <string.h>

#define AVX2_FN __attribute__((target("avx2,fma,f16c")))
#define AVX2_INLINE static inline __attribute__((always_inline)) AVX2_FN

/* Lanes 0-7 in lo, 8-15 in hi, added as lanes_sum adds them (rows.h). */
AVX2_INLINE float lanes_sum_avx2(__m256 lo, __m256 hi) {
    __m256 h = _mm256_add_ps(lo, hi);                                          /* h[i], i < 8 */
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));   /* q[i], i < 4 */
    __m128 s = _mm_add_ps(q, _mm_movehl_ps(q, q));                             /* q0+q2, q1+q3 */
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* The eight int32 lanes of v added: exact, so any order. */
AVX2_INLINE int32_t isum8(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* A kernel's tiles: tile[r - 1][tt - 1] computes r rows by tt tokens, for
 * r <= R and tt <= TT (the float tiles 2 x 3: what fits the 16 registers
 * with two registers of sums for each row and token; Q8_0 and Q4_0 row by
 * row have their own loop, q8_rows_by_tiles); rows1 is the pass of one
 * token down the rows. */
typedef void (*Avx2TileFn)(const MatmulJob *job, int n, int t);
typedef struct {
    int R, TT;
    Avx2TileFn tile[2][4];
    void (*rows1)(const MatmulJob *job, int n0, int n1);
} Avx2Tiles;

/* Rows [n0, n1) for all T tokens: over a chunk of rows that stays in L2,
 * tokens ts->TT at a time and rows ts->R at a time; one token (which reads
 * each row once) over the whole range, whose streams are spread over it. */
enum { AVX2_CHUNK_BYTES = 256 * 1024 };
static void rows_by_tiles_avx2(const MatmulJob *job, const Avx2Tiles *ts, int n0, int n1) {
    int T = job->T, R = ts->R;
    if (T == 1) {
        ts->rows1(job, n0, n1);
        return;
    }
    size_t row_bytes = dtype_row_bytes(job->W->type, job->W->K);
    int chunk = (int)(AVX2_CHUNK_BYTES / row_bytes) / R * R;
    if (chunk < R) chunk = R;
    for (int c0 = n0; c0 < n1; c0 += chunk) {
        int c1 = c0 + chunk < n1 ? c0 + chunk : n1;
        for (int t = 0; t < T; t += ts->TT) {
            int tt = T - t < ts->TT ? T - t : ts->TT, n = c0;
            for (; n + R <= c1; n += R) ts->tile[R - 1][tt - 1](job, n, t);
            for (; n < c1; n++) ts->tile[0][tt - 1](job, n, t);
        }
    }
}

/* --- F32, F16, BF16 */

/* Eight weights from p as floats. */
AVX2_INLINE __m256 wide8(const uint8_t *p, DType type) {
    if (type == DT_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    if (type == DT_BF16)   /* the top half of a float: widen by a shift of 16 */
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
    return _mm256_loadu_ps((const float *)p);
}

/* out[t][n + r] for r < R <= 2, t0 <= t < t0 + TT <= 3, from the R rows of
 * `type` at w, ws bytes apart: 16 lanes of sums in a<r><t>l (lanes 0-7) and
 * a<r><t>h (8-15), named variables, since GCC 12 keeps an array of them in
 * memory and stores it at every step (the tiles ran at half speed). The last
 * step, short of 16, reads the rest of each row and of x into zeroed copies:
 * its missing products are 0 * 0, as the masked loads of AVX-512 make them. */
#define FLOAT_HALF(W0, W1, X0, X1, X2, L)                                                      \
    do {                                                                                       \
        __m256 w0_ = wide8(W0, type), w1_ = R > 1 ? wide8(W1, type) : w0_, x_ = _mm256_loadu_ps(X0); \
        a00##L = _mm256_fmadd_ps(w0_, x_, a00##L);                                            \
        if (R > 1) a10##L = _mm256_fmadd_ps(w1_, x_, a10##L);                                 \
        if (TT > 1) {                                                                          \
            x_ = _mm256_loadu_ps(X1);                                                          \
            a01##L = _mm256_fmadd_ps(w0_, x_, a01##L);                                        \
            if (R > 1) a11##L = _mm256_fmadd_ps(w1_, x_, a11##L);                             \
        }                                                                                      \
        if (TT > 2) {                                                                          \
            x_ = _mm256_loadu_ps(X2);                                                          \
            a02##L = _mm256_fmadd_ps(w0_, x_, a02##L);                                        \
            if (R > 1) a12##L = _mm256_fmadd_ps(w1_, x_, a12##L);                             \
        }                                                                                      \
    } while (0)

/* Rows n and (R == 2) n + 1 by tokens t0 .. t0 + TT - 1, each step asking
 * for the bytes ahead (prefetch_weights). */
AVX2_INLINE void float_tile_avx2(const MatmulJob *job, int n, int t0, DType type, int R, int TT) {
    int N = job->W->N, K = job->W->K;
    size_t wsize = type == DT_F32 ? 4 : 2, ws = dtype_row_bytes(type, K);
    const float *x0 = job->x + (size_t)t0 * K, *x1 = TT > 1 ? x0 + K : x0, *x2 = TT > 2 ? x0 + 2 * (size_t)K : x0;
    const uint8_t *w = row_ptr(job->W, n), *w1 = R > 1 ? w + ws : w;
    __m256 a00l = _mm256_setzero_ps(), a00h = a00l, a01l = a00l, a01h = a00l, a02l = a00l, a02h = a00l,
           a10l = a00l, a10h = a00l, a11l = a00l, a11h = a00l, a12l = a00l, a12h = a00l;
    int k = 0;
    for (; k + 16 <= K; k += 16) {
        const uint8_t *p0 = w + k * wsize, *p1 = w1 + k * wsize;
        prefetch_weights(p0, 16 * wsize, R, TT, ws);
        if (R > 1) prefetch_weights(p1, 16 * wsize, R, TT, ws);
        FLOAT_HALF(p0, p1, x0 + k, x1 + k, x2 + k, l);
        FLOAT_HALF(p0 + 8 * wsize, p1 + 8 * wsize, x0 + k + 8, x1 + k + 8, x2 + k + 8, h);
    }
    if (k < K) {
        size_t left = (size_t)(K - k);
        uint8_t wb0[64] = {0}, wb1[64] = {0};
        float xb0[16] = {0}, xb1[16] = {0}, xb2[16] = {0};
        memcpy(wb0, w + k * wsize, left * wsize);
        memcpy(wb1, w1 + k * wsize, left * wsize);
        memcpy(xb0, x0 + k, left * sizeof(float));
        memcpy(xb1, x1 + k, left * sizeof(float));
        memcpy(xb2, x2 + k, left * sizeof(float));
        FLOAT_HALF(wb0, wb1, xb0, xb1, xb2, l);
        FLOAT_HALF(wb0 + 8 * wsize, wb1 + 8 * wsize, xb0 + 8, xb1 + 8, xb2 + 8, h);
    }
    float *o = job->out + (size_t)t0 * N + n;
    o[0] = lanes_sum_avx2(a00l, a00h);
    if (R > 1) o[1] = lanes_sum_avx2(a10l, a10h);
    if (TT > 1) {
        o[N] = lanes_sum_avx2(a01l, a01h);
        if (R > 1) o[N + 1] = lanes_sum_avx2(a11l, a11h);
    }
    if (TT > 2) {
        o[2 * (size_t)N] = lanes_sum_avx2(a02l, a02h);
        if (R > 1) o[2 * (size_t)N + 1] = lanes_sum_avx2(a12l, a12h);
    }
}

/* One token by four rows, `gap` rows apart from row n at w (ws bytes a
 * row): four streams, which this CPU kind reads best (notes/formats.md,
 * "Four streams"), with no software prefetch. Each row's lanes take their
 * products in float_tile_avx2's order, so the same bits. */
AVX2_INLINE void float_four_at(const MatmulJob *job, const uint8_t *w, size_t ws, int gap, int n, DType type) {
    int K = job->W->K;
    size_t wsize = type == DT_F32 ? 4 : 2;
    const float *x = job->x;
    const uint8_t *w1 = w + (size_t)gap * ws, *w2 = w1 + (size_t)gap * ws, *w3 = w2 + (size_t)gap * ws;
    __m256 a0l = _mm256_setzero_ps(), a0h = a0l, a1l = a0l, a1h = a0l, a2l = a0l, a2h = a0l, a3l = a0l, a3h = a0l;
#define FOUR_STEP(P0, P1, P2, P3, X)                                                              \
    do {                                                                                          \
        __m256 xl_ = _mm256_loadu_ps(X), xh_ = _mm256_loadu_ps((X) + 8);                          \
        a0l = _mm256_fmadd_ps(wide8(P0, type), xl_, a0l);                                         \
        a1l = _mm256_fmadd_ps(wide8(P1, type), xl_, a1l);                                         \
        a2l = _mm256_fmadd_ps(wide8(P2, type), xl_, a2l);                                         \
        a3l = _mm256_fmadd_ps(wide8(P3, type), xl_, a3l);                                         \
        a0h = _mm256_fmadd_ps(wide8((P0) + 8 * wsize, type), xh_, a0h);                          \
        a1h = _mm256_fmadd_ps(wide8((P1) + 8 * wsize, type), xh_, a1h);                          \
        a2h = _mm256_fmadd_ps(wide8((P2) + 8 * wsize, type), xh_, a2h);                          \
        a3h = _mm256_fmadd_ps(wide8((P3) + 8 * wsize, type), xh_, a3h);                          \
    } while (0)
    int k = 0;
    for (; k + 16 <= K; k += 16) {
        size_t at = (size_t)k * wsize;
        FOUR_STEP(w + at, w1 + at, w2 + at, w3 + at, x + k);
    }
    if (k < K) {
        size_t left = (size_t)(K - k), at = (size_t)k * wsize;
        uint8_t b0[64] = {0}, b1[64] = {0}, b2[64] = {0}, b3[64] = {0};
        float xb[16] = {0};
        memcpy(b0, w + at, left * wsize);
        memcpy(b1, w1 + at, left * wsize);
        memcpy(b2, w2 + at, left * wsize);
        memcpy(b3, w3 + at, left * wsize);
        memcpy(xb, x + k, left * sizeof(float));
        FOUR_STEP(b0, b1, b2, b3, xb);
    }
#undef FOUR_STEP
    float *o = job->out + n;
    o[0] = lanes_sum_avx2(a0l, a0h);
    o[gap] = lanes_sum_avx2(a1l, a1h);
    o[2 * gap] = lanes_sum_avx2(a2l, a2h);
    o[3 * gap] = lanes_sum_avx2(a3l, a3h);
}

/* The shapes, each compiled with constant sizes so that the loops unroll. */
#define FLOAT_TILES(name, TYPE)                                                                         \
    static AVX2_FN void name##_r1t1(const MatmulJob *j, int n, int t) { float_tile_avx2(j, n, t, TYPE, 1, 1); } \
    static AVX2_FN void name##_r1t2(const MatmulJob *j, int n, int t) { float_tile_avx2(j, n, t, TYPE, 1, 2); } \
    static AVX2_FN void name##_r1t3(const MatmulJob *j, int n, int t) { float_tile_avx2(j, n, t, TYPE, 1, 3); } \
    static AVX2_FN void name##_r2t1(const MatmulJob *j, int n, int t) { float_tile_avx2(j, n, t, TYPE, 2, 1); } \
    static AVX2_FN void name##_r2t2(const MatmulJob *j, int n, int t) { float_tile_avx2(j, n, t, TYPE, 2, 2); } \
    static AVX2_FN void name##_r2t3(const MatmulJob *j, int n, int t) { float_tile_avx2(j, n, t, TYPE, 2, 3); } \
    static AVX2_FN void name##_rows1(const MatmulJob *j, int n0, int n1) {                              \
        int n = n0;                                                                                     \
        if (j->decode_rows == 4) {   /* four rows at once, a quarter of the range apart */    \
            int q = (n1 - n0) / 4;                                                                      \
            size_t ws = dtype_row_bytes(TYPE, j->W->K);                                                 \
            for (; n < n0 + q; n++) float_four_at(j, row_ptr(j->W, n), ws, q, n, TYPE);                \
            n = n0 + 4 * q;                                                                             \
        }                                                                                               \
        for (; n < n1; n++) float_tile_avx2(j, n, 0, TYPE, 1, 1);                                        \
    }                                                                                                   \
    static const Avx2Tiles name##_TILES = {2, 3, {{name##_r1t1, name##_r1t2, name##_r1t3},              \
                                                  {name##_r2t1, name##_r2t2, name##_r2t3}}, name##_rows1};  \
    void name##_rows_avx2(const MatmulJob *job, int part, int n0, int n1) {                             \
        if (job->T >= KB2_MIN_T) float_rows_kblocked_avx2(job, n0, n1, TYPE);                            \
        else rows_by_tiles_avx2(job, &name##_TILES, n0, n1);                                            \
    }

/* --- F32, F16, BF16 from KB2_MIN_T tokens: K in blocks that stay in L1
 *
 * The 2 x 3 tiles above load five vectors for six FMAs and sweep a chunk of
 * rows once per three tokens: the first sweep waits for memory, the others
 * compute from L2, one after the other. At 16 tokens one Zen 3 core did
 * about 26-30 GFLOP/s of its 90 so (50 with the rows in cache). As on
 * AVX-512 (tiles_avx512.c, "K in blocks that stay in L1"), the rows of a
 * chunk are computed a k-block at a time: the block of x for every token,
 * and of three rows of W, copied into buffers (contiguous, so they do not
 * share L1 sets the way rows 8 KiB apart do), the partial sums kept in
 * memory between blocks.
 *
 * What is AVX2's own: a (row, token) has two registers of sums, lanes 0-7
 * (k mod 16 < 8) and 8-15, and the two halves never meet before the end.
 * So the buffers hold each k-block's lanes 0-7 first, then 8-15, and a tile
 * takes one half at a time: 3 rows by 4 tokens, one register of sums each,
 * twelve FMAs for seven loads, in the sixteen registers (x kept in one of
 * them: GCC otherwise reads it from memory in each FMA, fifteen loads).
 * Every lane still takes its products in order of k, the blocks one after
 * another, and the two halves are added by lanes_sum_avx2 as before: the
 * same bits as the tiles above and as one token at a time. The buffers are
 * padded with zeros to whole steps of 16, the products the tiles above add
 * at a short end.
 *
 * F32 needs no copy of its rows: the halves are every other vector of a
 * row, so a tile reads the row itself, 16 floats a step, and only rows
 * whose K is not whole steps of 16 (the zeros at the end) are packed. F16
 * and BF16 are widened as they are packed, BF16E decoded.
 *
 * Memory: while the tiles of a group of rows compute, they ask for the
 * group read next (each of its rows shared between tiles / 3 tiles, a line
 * per step), so that it is in cache by then. Asking instead for the whole
 * next chunk, a line now and then as the AVX-512 path does, measured 6-15%
 * slower here at 16 tokens; the group's lines spread evenly over its tiles,
 * 1.29 times the tiles above where this is 1.37 (medians of five rounds).
 * F32 read in place, with a row's lines over two tiles of the eight (not
 * all of a tile's 32 steps asking, three tiles in a row), measured 1.10
 * times the packed copy on the Zen 3 at 16 tokens (5632 x 2048 from
 * memory, one thread, both ways alternated in one process, 60 calls each:
 * medians 33.5 and 36.8 GFLOP/s); F16 the same either way.
 *
 * Measured on the Zen 3 core (480 x 2048 F32, sixteen copies cycled so
 * that the rows come from memory, one thread, the two paths alternated in
 * one process, five rounds): 16 tokens 1.19-1.25 times the tiles above,
 * 24 tokens 1.33-1.40, 32 1.28-1.43, 35 1.27-1.35; 8 and 12 tokens
 * 0.95-1.12, hence KB2_MIN_T. OpenBLAS's sgemm was as fast at 16 tokens
 * and faster at 32 (59 GFLOP/s against 40), but adds in its own order:
 * below SGEMM_MIN_T_AVX2 a batch keeps the bits of each token alone.
 *
 * The k-block is KB2_MAX floats up to 64 tokens: its x (128 KiB at 64
 * tokens) lives in L2 anyway, and a k-block of 32 KiB of x, as it was,
 * shrank to 256 floats at 32 tokens (each tile loading and storing its
 * twelve sums twice as often). From KB2_BIG_T tokens the chunk of rows is
 * 256 KiB of sums rather than 64, so that a packed k-block of x serves more
 * rows. With both, on the Zen 3 (`kbench --isa avx2 --type T --shape
 * 5632x2048 --threads both --prefill-t N`, before and after alternated,
 * three rounds, medians on two threads), F32 at 24, 32, 40 and 47 tokens:
 * 72.2, 68.4, 75.3 (sgemm), 68.6 (sgemm) GFLOP/s before, 76.9, 80.0, 79.1,
 * 79.8 after; F16 63.7, 61.8, 72.3, 70.1 before, 69.3, 79.9, 88.3, 77.5
 * after. At 16 tokens the k-block was KB2_MAX already, and 256 KiB of sums
 * was slower on two threads (F32, four rounds: medians about 62 GFLOP/s
 * against 68-71 with 64 or 128 KiB), hence KB2_BIG_T; at 64 tokens sgemm
 * stayed ahead (84-95 GFLOP/s against 78-83), hence SGEMM_MIN_T_AVX2 = 48
 * in ops.c. BF16E takes the same sizes, not measured apart. The price is a
 * stack frame of about 390 KiB here (the sums and x), which every thread
 * that multiplies has room for (2 MiB or more). */
enum {
    KB2_MIN_T = 16,             /* below this the tiles above */
    BF16E_KB_MIN_T = 8,         /* BF16E from here: a k-block decoded once serves 8 tokens and more (4: slower) */
    KB2_X_BYTES = 128 * 1024,   /* a k-block of x for all T tokens */
    KB2_MAX = 512,              /* floats in a k-block, at most */
    KB2_BIG_T = 24,             /* from here the larger chunk of rows */
    KB2_ACC_SMALL = 64 * 1024,  /* partial sums of one chunk of rows below KB2_BIG_T (64 bytes a row and token) */
    KB2_ACC_BYTES = 256 * 1024, /* and from KB2_BIG_T: the buffer */
};

/* len values of a float row from k0 as floats into buf, len16 (len rounded
 * up to 16) of them: values 16 i + j (j < 8) at buf[8 i + j], 16 i + 8 + j at
 * buf[len16 / 2 + 8 i + j], zeros past len. */
AVX2_INLINE void kb2_pack_row(float *buf, const uint8_t *row, DType type, int k0, int len, int len16) {
    size_t wsize = type == DT_F32 ? 4 : 2;
    const uint8_t *p = row + (size_t)k0 * wsize;
    float *hi = buf + len16 / 2;
    int k = 0;
    for (; k + 16 <= len; k += 16) {
        _mm256_storeu_ps(buf + k / 2, wide8(p + k * wsize, type));
        _mm256_storeu_ps(hi + k / 2, wide8(p + (k + 8) * wsize, type));
    }
    if (k < len) {
        uint8_t tail[64] = {0};
        memcpy(tail, p + k * wsize, (size_t)(len - k) * wsize);
        _mm256_storeu_ps(buf + k / 2, wide8(tail, type));
        _mm256_storeu_ps(hi + k / 2, wide8(tail + 8 * wsize, type));
    }
}

/* --- BF16E decoded, a block of 64 weights at a time (formats.h; the
 * AVX-512 tiles need VBMI2 for theirs, this one runs on any AVX2 CPU)
 *
 * Two registers of 32 byte positions (position p = 16 g + 4 q + i holds
 * weight k = 16 q + 4 g + i). A code's three bits become bytes: two
 * 16-byte loads put the three planes in both lanes, one vpshufb per plane
 * and half puts byte p / 8 of it at position p, and bit p % 8 is tested
 * (and, min: 0 or 1); the code looks the rotated
 * exponent up in the 16-byte table (vpshufb; the escape's entry is 0) and
 * the block's escapes, about one in a hundred weights on a trained model,
 * are written over it in order. The two bytes of each BF16 swap their top
 * bits: the sign from the sign and mantissa byte beside 7 bits of the
 * rotated exponent, then the exponent's last bit beside the 7 mantissa
 * bits. Unpacking bytes to words, and words under a zero to floats, leaves
 * in 128-bit lane g of register q the 4 weights of position 16 g + 4 q,
 * weights 16 q + 4 g .. + 3: register q of the first half is weights 16 q
 * .. 16 q + 7, of the second 16 q + 8 .. 16 q + 15, stored as they are. */

/* Byte p % 32 of a half takes bit p % 8 of byte p / 8 of the plane (the
 * half's 4 bytes at `at` in the 16 broadcast): a byte of 0 or 1. */
AVX2_INLINE __m256i bf16e_code_bit(__m256i planes, int at, __m256i bit) {
    const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                          3, 3, 3, 3, 3, 3);
    __m256i v = _mm256_shuffle_epi8(planes, _mm256_add_epi8(pick, _mm256_set1_epi8((char)at)));
    return _mm256_min_epu8(_mm256_and_si256(v, bit), _mm256_set1_epi8(1));
}

/* The block at blk as 64 floats, weights 8 i .. 8 i + 7 in f[i], its
 * escapes read from *esc on. tab: the matrix's rotated exponents
 * (Bf16eData.rot) in both lanes. */
AVX2_INLINE void bf16e_block_avx2(const uint8_t *blk, const uint8_t **esc, __m256i tab, __m256 f[8]) {
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i top = _mm256_set1_epi8((char)0x80), zero = _mm256_setzero_si256();
    /* planes 0 and 1, then 1 and 2, in both lanes: every half's 4 bytes of each */
    __m256i pa = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(blk + BF16E_BLOCK)));
    __m256i pb = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(blk + BF16E_BLOCK + 8)));
    uint64_t p0 = bf16e_plane(blk, 0), p1 = bf16e_plane(blk, 1), p2 = bf16e_plane(blk, 2);
    __m256i ex[2];
    for (int h = 0; h < 2; h++) {
        __m256i b1 = bf16e_code_bit(pa, 8 + 4 * h, bit), b2 = bf16e_code_bit(pb, 8 + 4 * h, bit);
        __m256i c = _mm256_add_epi8(bf16e_code_bit(pa, 4 * h, bit), _mm256_add_epi8(b1, b1));
        b2 = _mm256_add_epi8(b2, b2);
        c = _mm256_add_epi8(c, _mm256_add_epi8(b2, b2));
        ex[h] = _mm256_shuffle_epi8(tab, c);
    }
    uint64_t escm = p0 & p1 & p2;
    if (escm) {   /* the escaped exponents, rotated as the table's, over their positions in order */
        const __m256i at0 = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
                                             21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31);
        const __m256i at1 = _mm256_add_epi8(at0, _mm256_set1_epi8(32));
        const uint8_t *e = *esc;
        for (; escm; escm &= escm - 1) {   /* a blend at the one position: no store and reload */
            __m256i p = _mm256_set1_epi8((char)__builtin_ctzll(escm)), v = _mm256_set1_epi8((char)*e++);
            ex[0] = _mm256_blendv_epi8(ex[0], v, _mm256_cmpeq_epi8(at0, p));
            ex[1] = _mm256_blendv_epi8(ex[1], v, _mm256_cmpeq_epi8(at1, p));
        }
        *esc = e;
    }
    for (int h = 0; h < 2; h++) {
        __m256i sm = _mm256_loadu_si256((const __m256i *)(blk + 32 * h));
        __m256i swap = _mm256_and_si256(_mm256_xor_si256(sm, ex[h]), top);
        __m256i hi = _mm256_xor_si256(ex[h], swap);   /* sign | exponent bits 7..1 */
        __m256i lo = _mm256_xor_si256(sm, swap);      /* exponent bit 0 | mantissa */
        __m256i w0 = _mm256_unpacklo_epi8(lo, hi), w1 = _mm256_unpackhi_epi8(lo, hi);
        f[h + 0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, w0));
        f[h + 2] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, w0));
        f[h + 4] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, w1));
        f[h + 6] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, w1));
    }
}

/* The block as 64 floats at out. */
AVX2_INLINE void bf16e_block_store_avx2(const uint8_t *blk, const uint8_t **esc, __m256i tab, float *out) {
    __m256 f[8];
    bf16e_block_avx2(blk, esc, tab, f);
    for (int i = 0; i < 8; i++) _mm256_storeu_ps(out + 8 * i, f[i]);
}

AVX2_INLINE __m256i bf16e_tab_avx2(const Bf16eData *d) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)d->rot));
}

AVX2_FN void bf16e_widen_avx2(float *out, const Mat *W, int n) {
    const Bf16eData *d = W->data;
    const uint8_t *blk = bf16e_row(W, n), *esc = d->esc + d->esc_row[n];
    __m256i tab = bf16e_tab_avx2(d);
    for (int k = 0; k < W->K; k += BF16E_BLOCK, blk += BF16E_BLOCK_BYTES) bf16e_block_store_avx2(blk, &esc, tab, out + k);
}

/* kb2_pack_row for BF16E: weights k0 .. k0 + len (whole blocks) of row n,
 * decoded straight into the halves (f[2 m] holds weights 16 m .. 16 m + 7 of
 * the block, f[2 m + 1] the next 8), whose escapes start at *esc (moved
 * past theirs). */
AVX2_INLINE void kb2_pack_bf16e(float *buf, const Mat *W, int n, const uint8_t **esc, __m256i tab, int k0, int len) {
    const uint8_t *blk = bf16e_row(W, n) + (size_t)(k0 / BF16E_BLOCK) * BF16E_BLOCK_BYTES;
    float *hi = buf + len / 2;
    for (int k = 0; k < len; k += BF16E_BLOCK, blk += BF16E_BLOCK_BYTES) {
        __m256 f[8];
        bf16e_block_avx2(blk, esc, tab, f);
        for (int m = 0; m < 4; m++) {
            _mm256_storeu_ps(buf + k / 2 + 8 * m, f[2 * m]);
            _mm256_storeu_ps(hi + k / 2 + 8 * m, f[2 * m + 1]);
        }
    }
}

#define KEEP_IN_REGISTERS3(a, b, c) __asm__("" : "+x"(a), "+x"(b), "+x"(c))
#define KB2_FMA(R_, T_)                                                         \
    do {                                                                        \
        if (TT > (T_)) {                                                        \
            __m256 x_ = _mm256_loadu_ps(x + (T_) * (size_t)kb + 8 * i);        \
            __asm__("" : "+x"(x_));                                             \
            a0##T_ = _mm256_fmadd_ps(w0, x_, a0##T_);                           \
            if (R_ > 1) a1##T_ = _mm256_fmadd_ps(w1, x_, a1##T_);               \
            if (R_ > 2) a2##T_ = _mm256_fmadd_ps(w2, x_, a2##T_);               \
        }                                                                       \
    } while (0)
#define KB2_ACC(F)                                                              \
    F(0, 0); F(0, 1); F(0, 2); F(0, 3); F(1, 0); F(1, 1); F(1, 2); F(1, 3);    \
    F(2, 0); F(2, 1); F(2, 2); F(2, 3)
#define KB2_LOAD(r, t) __m256 a##r##t = R > (r) && TT > (t) ? acc[(r) * rs + 2 * (t)] : zero
#define KB2_STORE(r, t) if (R > (r) && TT > (t)) acc[(r) * rs + 2 * (t)] = a##r##t

/* One half of a k-block: acc[r rs + 2 t] += the products of rows r < R
 * (wrow floats apart in w, a step's vector wstep floats after the last) and
 * tokens t < TT (kb apart in x, a step 8 floats) over `steps` vectors of
 * that half; asks for the first np <= steps lines of pf meanwhile. */
AVX2_INLINE void kb2_tile(__m256 *acc, int rs, const float *w, size_t wrow, int wstep, const float *x, int kb,
                          int steps, const uint8_t *pf, int np, int R, int TT) {
    const __m256 zero = _mm256_setzero_ps();
    KB2_ACC(KB2_LOAD);
    for (int i = 0; i < steps; i++) {
        if (i < np) _mm_prefetch((const char *)(pf + 64 * (size_t)i), _MM_HINT_T1);
        const float *wi = w + (size_t)wstep * i;
        __m256 w0 = _mm256_loadu_ps(wi), w1 = R > 1 ? _mm256_loadu_ps(wi + wrow) : w0,
               w2 = R > 2 ? _mm256_loadu_ps(wi + 2 * wrow) : w0;
        KEEP_IN_REGISTERS3(w0, w1, w2);
        KB2_FMA(R, 0);
        KB2_FMA(R, 1);
        KB2_FMA(R, 2);
        KB2_FMA(R, 3);
    }
    KB2_ACC(KB2_STORE);
}

/* The tile of R rows by TT tokens, each compiled with its constants. */
static AVX2_FN void kb2_tile_of(__m256 *acc, int rs, const float *w, size_t wrow, int wstep, const float *x,
                                int kb, int steps, const uint8_t *pf, int np, int R, int TT) {
    switch (4 * (R - 1) + TT - 1) {
    case 0: kb2_tile(acc, rs, w, wrow, wstep, x, kb, steps, pf, np, 1, 1); break;
    case 1: kb2_tile(acc, rs, w, wrow, wstep, x, kb, steps, pf, np, 1, 2); break;
    case 2: kb2_tile(acc, rs, w, wrow, wstep, x, kb, steps, pf, np, 1, 3); break;
    case 3: kb2_tile(acc, rs, w, wrow, wstep, x, kb, steps, pf, np, 1, 4); break;
    case 4: kb2_tile(acc, rs, w, wrow, wstep, x, kb, steps, pf, np, 2, 1); break;
    case 5: kb2_tile(acc, rs, w, wrow, wstep, x, kb, steps, pf, np, 2, 2); break;
    case 6: kb2_tile(acc, rs, w, wrow, wstep, x, kb, steps, pf, np, 2, 3); break;
    case 7: kb2_tile(acc, rs, w, wrow, wstep, x, kb, steps, pf, np, 2, 4); break;
    case 8: kb2_tile(acc, rs, w, wrow, wstep, x, kb, steps, pf, np, 3, 1); break;
    case 9: kb2_tile(acc, rs, w, wrow, wstep, x, kb, steps, pf, np, 3, 2); break;
    case 10: kb2_tile(acc, rs, w, wrow, wstep, x, kb, steps, pf, np, 3, 3); break;
    default: kb2_tile(acc, rs, w, wrow, wstep, x, kb, steps, pf, np, 3, 4); break;
    }
}

/* Rows [n0, n1) for all T tokens: chunks of rows whose sums fit
 * KB2_ACC_BYTES (KB2_ACC_SMALL below KB2_BIG_T tokens; acc[2 (T r + t) + h]:
 * row r of the chunk, token t, half h),
 * k-blocks of kb floats, groups of 3 rows, each half, groups of 4 tokens.
 * F32 rows of whole steps of 16 are read where they are, not packed. */
static AVX2_FN void float_rows_kblocked_avx2(const MatmulJob *job, int n0, int n1, DType type) {
    int N = job->W->N, K = job->W->K, T = job->T;
    int kb = KB2_X_BYTES / (int)sizeof(float) / T / 16 * 16;
    kb = kb > KB2_MAX ? KB2_MAX : kb < 16 ? 16 : kb;
    int coded = type == DT_BF16E;   /* decoded as packed: k-blocks of whole blocks of 64 */
    if (coded) kb = kb < BF16E_BLOCK ? BF16E_BLOCK : kb / BF16E_BLOCK * BF16E_BLOCK;
    int rows = (T < KB2_BIG_T ? KB2_ACC_SMALL : KB2_ACC_BYTES) / (2 * (int)sizeof(__m256)) / T / 3 * 3;
    rows = rows < 3 ? 3 : rows;
    assert(2 * 3 * T <= KB2_ACC_BYTES / (int)sizeof(__m256) && T * kb <= KB2_X_BYTES / (int)sizeof(float));
    __m256 acc[KB2_ACC_BYTES / sizeof(__m256)];
    float xbuf[KB2_X_BYTES / sizeof(float)] __attribute__((aligned(32)));
    float wbuf[3 * KB2_MAX] __attribute__((aligned(32)));
    size_t wsize = type == DT_F32 ? 4 : 2;
    int in_place = type == DT_F32 && K % 16 == 0;
    const Bf16eData *bd = coded ? job->W->data : NULL;
    const uint8_t *esc[KB2_ACC_BYTES / (2 * sizeof(__m256)) / BF16E_KB_MIN_T + 3];   /* BF16E: each row's next escape */
    __m256i tab = coded ? bf16e_tab_avx2(bd) : _mm256_setzero_si256();
    for (int c0 = n0; c0 < n1; c0 += rows) {
        int c1 = c0 + rows < n1 ? c0 + rows : n1;
        for (int i = 0; i < 2 * (c1 - c0) * T; i++) acc[i] = _mm256_setzero_ps();
        for (int n = c0; coded && n < c1; n++) esc[n - c0] = bd->esc + bd->esc_row[n];
        for (int k0 = 0; k0 < K; k0 += kb) {
            int len = K - k0 < kb ? K - k0 : kb, len16 = (len + 15) / 16 * 16, steps = len16 / 16;
            for (int t = 0; t < T; t++)
                kb2_pack_row(xbuf + t * kb, (const uint8_t *)(job->x + (size_t)t * K), DT_F32, k0, len, len16);
            for (int n = c0; n < c1; n += 3) {
                int R = c1 - n < 3 ? c1 - n : 3;
                for (int r = 0; r < R && !in_place; r++)
                    if (coded) kb2_pack_bf16e(wbuf + r * kb, job->W, n + r, &esc[n + r - c0], tab, k0, len);
                    else kb2_pack_row(wbuf + r * kb, row_ptr(job->W, n + r), type, k0, len, len16);
                /* a half's first vector, the next row's, the next step's */
                const float *w = in_place ? (const float *)row_ptr(job->W, n) + k0 : wbuf;
                size_t wrow = in_place ? (size_t)K : (size_t)kb;
                int wstep = in_place ? 16 : 8, whalf = in_place ? 8 : len16 / 2;
                /* the group read next: the next 3 rows, or the chunk's
                 * first ones at the next k-block, or the next chunk's; the
                 * tiles ask for its lines while they compute, a row's shared
                 * between tiles / 3 of them, a line per step */
                int pn = n + 3, pk = k0;
                if (pn >= c1) pn = c0, pk = k0 + kb;
                if (pk >= K) pn = c1, pk = 0;
                int pr = pn >= n1 ? 0 : n1 - pn < 3 ? n1 - pn : 3;
                int plen = K - pk < kb ? K - pk : kb;
                size_t pbytes = coded ? (size_t)plen / BF16E_BLOCK * BF16E_BLOCK_BYTES : (size_t)plen * wsize;
                int lines = (int)((pbytes + 63) / 64);
                int tiles = 2 * ((T + 3) / 4), per_row = pr && tiles > pr ? tiles / pr : 1;
                int share = (lines + per_row - 1) / per_row;
                int r = 0, at = 0;
                for (int h = 0; h < 2; h++)
                    for (int t = 0; t < T; t += 4) {
                        const uint8_t *pf = NULL;
                        int np = 0;
                        if (r < pr) {
                            pf = (coded ? bf16e_row(job->W, pn + r) + (size_t)(pk / BF16E_BLOCK) * BF16E_BLOCK_BYTES
                                        : row_ptr(job->W, pn + r) + (size_t)pk * wsize) + 64 * (size_t)at;
                            np = lines - at < steps ? lines - at : steps;
                            if (np > share) np = share;
                            if ((at += np) == lines) r++, at = 0;
                        }
                        kb2_tile_of(acc + 2 * ((size_t)(n - c0) * T + t) + h, 2 * T, w + h * whalf, wrow, wstep,
                                    xbuf + t * kb + h * len16 / 2, kb, steps, pf, np, R, T - t < 4 ? T - t : 4);
                    }
            }
        }
        for (int n = c0; n < c1; n++)
            for (int t = 0; t < T; t++) {
                const __m256 *a = acc + 2 * ((size_t)(n - c0) * T + t);
                job->out[(size_t)t * N + n] = lanes_sum_avx2(a[0], a[1]);
            }
    }
}

FLOAT_TILES(f32, DT_F32)
FLOAT_TILES(f16, DT_F16)
FLOAT_TILES(bf16, DT_BF16)

/* BF16E below BF16E_KB_MIN_T tokens: each block decoded into registers
 * and multiplied there (bf16e_fused_avx2); from BF16E_KB_MIN_T tokens the
 * k-blocked tiles, which decode as they pack a k-block. Both have BF16's
 * bits. Rows decoded to floats first and then run through the F32 tiles
 * measured 6-25% slower from 2 to 6 tokens and 30% at one. */
/* Up to three tokens t0.. of row n: each block decoded into registers and
 * multiplied there, each token's two registers of sums (k mod 16 below 8,
 * and above) taking the products in the F32 tile's order, so the same bits. */
AVX2_INLINE void bf16e_fused_avx2(const MatmulJob *job, int n, int t0, int TT, __m256i tab) {
    const Bf16eData *d = job->W->data;
    int K = job->W->K, N = job->W->N;
    const float *x0 = job->x + (size_t)t0 * K, *x1 = TT > 1 ? x0 + K : x0, *x2 = TT > 2 ? x0 + 2 * (size_t)K : x0;
    const uint8_t *blk = bf16e_row(job->W, n), *esc = d->esc + d->esc_row[n];
    __m256 a0l = _mm256_setzero_ps(), a0h = a0l, a1l = a0l, a1h = a0l, a2l = a0l, a2h = a0l;
    for (int k = 0; k < K; k += BF16E_BLOCK, blk += BF16E_BLOCK_BYTES) {
        __m256 f[8];
        bf16e_block_avx2(blk, &esc, tab, f);
        for (int i = 0; i < 8; i += 2) {
            int at = k + 8 * i;
            a0l = _mm256_fmadd_ps(f[i], _mm256_loadu_ps(x0 + at), a0l);
            a0h = _mm256_fmadd_ps(f[i + 1], _mm256_loadu_ps(x0 + at + 8), a0h);
            if (TT > 1) {
                a1l = _mm256_fmadd_ps(f[i], _mm256_loadu_ps(x1 + at), a1l);
                a1h = _mm256_fmadd_ps(f[i + 1], _mm256_loadu_ps(x1 + at + 8), a1h);
            }
            if (TT > 2) {
                a2l = _mm256_fmadd_ps(f[i], _mm256_loadu_ps(x2 + at), a2l);
                a2h = _mm256_fmadd_ps(f[i + 1], _mm256_loadu_ps(x2 + at + 8), a2h);
            }
        }
    }
    float *o = job->out + (size_t)t0 * N + n;
    o[0] = lanes_sum_avx2(a0l, a0h);
    if (TT > 1) o[N] = lanes_sum_avx2(a1l, a1h);
    if (TT > 2) o[2 * (size_t)N] = lanes_sum_avx2(a2l, a2h);
}

/* Below BF16E_KB_MIN_T tokens: a row at a time, three tokens a pass over
 * it (after the first pass its blocks come from L1). */
static AVX2_FN void bf16e_rows_fused_avx2(const MatmulJob *job, int n0, int n1) {
    __m256i tab = bf16e_tab_avx2(job->W->data);
    for (int n = n0; n < n1; n++)
        for (int t = 0; t < job->T; t += 3) {
            int tt = job->T - t < 3 ? job->T - t : 3;
            if (tt == 3) bf16e_fused_avx2(job, n, t, 3, tab);
            else if (tt == 2) bf16e_fused_avx2(job, n, t, 2, tab);
            else bf16e_fused_avx2(job, n, t, 1, tab);
        }
}

void bf16e_rows_avx2(const MatmulJob *job, int part, int n0, int n1) {
    if (job->T >= BF16E_KB_MIN_T) float_rows_kblocked_avx2(job, n0, n1, DT_BF16E);
    else bf16e_rows_fused_avx2(job, n0, n1);
}

/* --- Activations to the int8 layout (rows.h, act_row)
 *
 * act_pack_ref's bits, eight values an instruction: the product x * id is
 * the same IEEE multiply, vroundps to nearest even rounds as nearbyintf
 * does, and the integers fit int8 exactly, so the saturating packs change
 * nothing. (A block with a NaN or an infinity is zeros and the NaN scale,
 * as there; max_ps and fmaxf differ only on NaN, which never reaches them.) */
AVX2_INLINE uint16_t q8_0_quantize_block_avx2(int8_t *qs, const float *xb) {
    __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8), v2 = _mm256_loadu_ps(xb + 16),
           v3 = _mm256_loadu_ps(xb + 24);
    /* x - x is 0 for a finite x, NaN for NaN or an infinity */
    __m256 nf = _mm256_or_ps(_mm256_or_ps(_mm256_cmp_ps(_mm256_sub_ps(v0, v0), _mm256_setzero_ps(), _CMP_NEQ_UQ),
                                          _mm256_cmp_ps(_mm256_sub_ps(v1, v1), _mm256_setzero_ps(), _CMP_NEQ_UQ)),
                             _mm256_or_ps(_mm256_cmp_ps(_mm256_sub_ps(v2, v2), _mm256_setzero_ps(), _CMP_NEQ_UQ),
                                          _mm256_cmp_ps(_mm256_sub_ps(v3, v3), _mm256_setzero_ps(), _CMP_NEQ_UQ)));
    if (_mm256_movemask_ps(nf)) {   /* see Q8_0_NONFINITE_SCALE */
        memset(qs, 0, QK8_0);
        return Q8_0_NONFINITE_SCALE;
    }
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v0, abs), _mm256_and_ps(v1, abs)),
                             _mm256_max_ps(_mm256_and_ps(v2, abs), _mm256_and_ps(v3, abs)));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    float amax = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
    __m256 id = _mm256_set1_ps(q8_0_multiplier(amax));
    enum { NEAREST_EVEN = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC };
    __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, id), NEAREST_EVEN)),
            i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, id), NEAREST_EVEN)),
            i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, id), NEAREST_EVEN)),
            i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, id), NEAREST_EVEN));
    /* the packs work within 128-bit halves: values come out in the order
     * 0-3 8-11 16-19 24-27 4-7 12-15 20-23 28-31, put back by one permute */
    __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)qs, b);
    return fp32_to_fp16(amax / 127.0f);
}

AVX2_FN void quantize_row_q8_0_avx2(BlockQ8_0 *out, const float *x, int K) {
    for (int b = 0; b < K / QK8_0; b++) out[b].d = q8_0_quantize_block_avx2(out[b].qs, x + b * QK8_0);
}

AVX2_FN void act_pack_avx2(uint8_t *act, const float *x, int T, int K) {
    const __m256i u1 = _mm256_set1_epi8(1), w1 = _mm256_set1_epi16(1);
    for (int t = 0; t < T; t++) {
        ActRowOut r = act_row_out(act, K, t);
        for (int b = 0; b < K / QK8_0; b++) {
            int8_t *q = r.qs + b * QK8_0;
            r.d[b] = fp16_to_fp32(q8_0_quantize_block_avx2(q, x + (size_t)t * K + b * QK8_0));
            /* the sums of each four values, exact: 1 * q in pairs, then pairs of pairs */
            __m256i s4 = _mm256_madd_epi16(_mm256_maddubs_epi16(u1, _mm256_loadu_si256((const __m256i *)q)), w1);
            _mm256_storeu_si256((__m256i *)(r.corr + b * 8), _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(s4, 7)));
            r.off[b] = 8 * isum8(s4);
        }
    }
}

/* --- attention's products (ops_scores, ops_add_weighted_rows), as on
 * AVX-512 (tiles_avx512.c): GCC 12 ended each row's dot product of the
 * plain loop with dependent scalar adds through the stack. Scores: four
 * rows at a time, each in two accumulators (lanes of i % 16 below and from
 * 8) added, then summed across by dot8, the one order of every row however
 * it was grouped; a head's last S % 8 products one by one after. */
AVX2_INLINE float dot8(__m256 a) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

/* R rows at k (stride apart) against q into s, scaled. */
AVX2_INLINE void score_rows(float *s, const float *q, const float *k, int R, int S, size_t stride, float scale) {
    int S16 = S / 16 * 16, S8 = S / 8 * 8;
    __m256 a[4][2];
    for (int r = 0; r < R; r++) a[r][0] = a[r][1] = _mm256_setzero_ps();
    for (int i = 0; i < S16; i += 16) {
        __m256 q0 = _mm256_loadu_ps(q + i), q1 = _mm256_loadu_ps(q + i + 8);
        for (int r = 0; r < R; r++) {
            a[r][0] = _mm256_fmadd_ps(q0, _mm256_loadu_ps(k + r * stride + i), a[r][0]);
            a[r][1] = _mm256_fmadd_ps(q1, _mm256_loadu_ps(k + r * stride + i + 8), a[r][1]);
        }
    }
    if (S8 > S16)
        for (int r = 0; r < R; r++)
            a[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(q + S16), _mm256_loadu_ps(k + r * stride + S16), a[r][0]);
    for (int r = 0; r < R; r++) {
        float dot = dot8(_mm256_add_ps(a[r][0], a[r][1]));
        for (int i = S8; i < S; i++) dot += q[i] * k[r * stride + i];
        s[r] = dot * scale;
    }
}

AVX2_FN void scores_avx2(float *s, const float *q, const float *rows, int n, int S, size_t stride, float scale) {
    int j = 0;
    for (; j + 4 <= n; j += 4) score_rows(s + j, q, rows + (size_t)j * stride, 4, S, stride, scale);
    for (; j < n; j++) score_rows(s + j, q, rows + (size_t)j * stride, 1, S, stride, scale);
}

/* The output 32 floats at a time, in four registers across all n rows (one
 * load and one store of each per call), each value's terms in row order by
 * FMA; a head's last S % 8 the same way one by one. */
AVX2_FN void add_weighted_rows_avx2(float *out, const float *w, const float *rows, int n, int S, size_t stride) {
    int S8 = S / 8 * 8;
    for (int i0 = 0; i0 < S8; i0 += 32) {
        int nv = (S8 - i0) / 8 < 4 ? (S8 - i0) / 8 : 4;
        __m256 acc[4];
        for (int v = 0; v < nv; v++) acc[v] = _mm256_loadu_ps(out + i0 + 8 * v);
        for (int j = 0; j < n; j++) {
            const float *r = rows + (size_t)j * stride + i0;
            __m256 wj = _mm256_set1_ps(w[j]);
            for (int v = 0; v < nv; v++) acc[v] = _mm256_fmadd_ps(wj, _mm256_loadu_ps(r + 8 * v), acc[v]);
        }
        for (int v = 0; v < nv; v++) _mm256_storeu_ps(out + i0 + 8 * v, acc[v]);
    }
    for (int i = S8; i < S; i++)
        for (int j = 0; j < n; j++) out[i] = fmaf(w[j], rows[(size_t)j * stride + i], out[i]);
}

/* --- Q8_K activations: quantize_row_q8_k_ref (quant.c), eight values an
 * instruction, the same bits: max the first value of the largest
 * magnitude, the same multiply by -127 / max and rounding to nearest even,
 * the same clamp (which the products never need), the sums of sixteen. */
AVX2_FN void quantize_row_q8_k_avx2(BlockQ8_K *out, const float *x, int K) {
    enum { NEAREST_EVEN = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC };
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int b = 0; b < K / QK_K; b++, x += QK_K) {
        BlockQ8_K *y = &out[b];
        __m256 amaxv = _mm256_setzero_ps(), nf = _mm256_setzero_ps();
        for (int i = 0; i < QK_K; i += 8) {
            __m256 v = _mm256_loadu_ps(x + i);
            nf = _mm256_or_ps(nf, _mm256_cmp_ps(_mm256_sub_ps(v, v), _mm256_setzero_ps(), _CMP_NEQ_UQ));   /* NaN, inf */
            amaxv = _mm256_max_ps(amaxv, _mm256_and_ps(v, abs));
        }
        memset(y->qs, 0, sizeof y->qs);
        memset(y->bsums, 0, sizeof y->bsums);
        int bad = _mm256_movemask_ps(nf) != 0;
        y->d = bad ? NAN : 0.0f;
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(amaxv), _mm256_extractf128_ps(amaxv, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        float amax = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
        if (bad || amax == 0.0f) continue;
        float max = 0.0f;
        for (int i = 0; i < QK_K; i += 8) {
            int at = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs), _mm256_set1_ps(amax),
                                                      _CMP_EQ_OQ));
            if (at) {
                max = x[i + __builtin_ctz((unsigned)at)];
                break;
            }
        }
        float iscale = -127.0f / max;
        if (isinf(iscale)) continue;
        const __m256 sc = _mm256_set1_ps(iscale), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
        for (int g = 0; g < QK_K / 16; g++) {   /* sixteen values: two registers, one sum */
            __m256i q0 = _mm256_cvtps_epi32(_mm256_min_ps(
                        _mm256_max_ps(_mm256_round_ps(_mm256_mul_ps(sc, _mm256_loadu_ps(x + 16 * g)), NEAREST_EVEN), lo), hi)),
                    q1 = _mm256_cvtps_epi32(_mm256_min_ps(
                        _mm256_max_ps(_mm256_round_ps(_mm256_mul_ps(sc, _mm256_loadu_ps(x + 16 * g + 8)), NEAREST_EVEN), lo),
                        hi));
            /* packs work within 128-bit halves: 0-3 8-11 | 4-7 12-15, put back by a permute */
            __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xd8);
            __m128i b8 = _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
            _mm_storeu_si128((__m128i *)(y->qs + 16 * g), b8);
            y->bsums[g] = (int16_t)isum8(_mm256_add_epi32(q0, q1));
        }
        y->d = 1.0f / iscale;
    }
}

AVX2_FN void small_act_pack_k_avx2(uint8_t *act, const float *x, int T, int K) {
    for (int t = 0; t < T; t++)
        quantize_row_q8_k_avx2((BlockQ8_K *)(act + (size_t)t * small_act_stride(DT_Q4_K, K)), x + (size_t)t * K, K);
}

/* --- Q8_0 and Q4_0 against Q8_0 activations (act_row) */

/* A Q4_0 block's 16 bytes of nibbles as its 32 values in order, less 8
 * (-8 .. 7): the low nibbles are values 0-15, the high ones 16-31. */
AVX2_INLINE __m256i q4_values(const uint8_t *qs) {
    __m128i v = _mm_loadu_si128((const __m128i *)qs);
    __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
    return _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0f)), _mm256_set1_epi8(8));
}

/* Row n by tokens t0 .. t0+TT-1 of Q8_0 (type DT_Q8_0) or Q4_0 (its values
 * less 8 are int8 values like Q8_0's). Block b's sums go to register b % 2
 * of the token's pair, its scale d_w * d_x to each of the eight lanes by one
 * FMA. For Q8_0 this is rows.h's order: lanes 0-7 the even blocks, 8-15 the
 * odd ones, added by lanes_sum. Q4_0 uses the same order. The weight's
 * magnitude is taken once per block; per token and block that leaves a
 * sign, the two multiply-adds, a conversion and an FMA (Q8_TOKEN), and the
 * scale d_w * d_x:
 *   one token (dxt NULL)  d_w widened from the block, one multiply a token;
 *   four (q8_rows_by_tiles)  d_w from dw (the row's scales widened once for
 *       all the tokens) and the four tokens' d_x side by side in dxt
 *       (dxt[4 b + i] token t0 + i's of block b): one multiply for the four
 *       into p[4 h + i], broadcast from there.
 * The same product either way, so the same bits. */
#define Q8_TOKEN(XR, I, A_L, A_H)                                                                  \
    do {                                                                                           \
        __m256i xq_ = _mm256_loadu_si256((const __m256i *)((XR).qs + b * QK8_0));                  \
        __m256i s_ = _mm256_madd_epi16(_mm256_maddubs_epi16(wa, _mm256_sign_epi8(xq_, wq)), ones);  \
        __m256 d_ = dxt ? _mm256_broadcast_ss(p + 4 * h + (I))                                     \
                        : _mm256_mul_ps(dwv, _mm256_broadcast_ss((XR).d + b));                     \
        if (h) A_H = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s_), d_, A_H);                             \
        else A_L = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s_), d_, A_L);                               \
    } while (0)

/* One row by up to four tokens: eight registers of sums, named (see
 * float_tile_avx2), and the block's weights, magnitudes and scale. */
AVX2_INLINE void q8_tile_avx2(const MatmulJob *job, int n, int t0, DType type, int TT, const float *dw,
                              const float *dxt) {
    int N = job->W->N, K = job->W->K, nb = K / QK8_0;
    const uint8_t *w = row_ptr(job->W, n);
    size_t bs = type == DT_Q8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0), ws = dtype_row_bytes(type, K);
    ActRow x0 = act_row(job->act, K, t0), x1 = x0, x2 = x0, x3 = x0;
    if (TT > 1) x1 = act_row(job->act, K, t0 + 1);
    if (TT > 2) x2 = act_row(job->act, K, t0 + 2);
    if (TT > 3) x3 = act_row(job->act, K, t0 + 3);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 a0l = _mm256_setzero_ps(), a0h = a0l, a1l = a0l, a1h = a0l, a2l = a0l, a2h = a0l, a3l = a0l, a3h = a0l;
    float p[8];   /* with dxt: d_w * d_x of block b0 + h and token t0 + i at 4 h + i */
    for (int b0 = 0; b0 < nb; b0 += 2) {
        prefetch_weights(w + b0 * bs, 2 * bs, 1, TT, ws);
        for (int h = 0; h < 2 && b0 + h < nb; h++) {   /* h a constant once unrolled */
            int b = b0 + h;
            const uint8_t *blk = w + b * bs;
            __m256 dwv = _mm256_setzero_ps();
            if (dxt) {
                _mm_storeu_ps(p + 4 * h, _mm_mul_ps(_mm_broadcast_ss(dw + b), _mm_loadu_ps(dxt + 4 * b)));
            } else {
                short d16;
                memcpy(&d16, blk, 2);
                dwv = _mm256_cvtph_ps(_mm_set1_epi16(d16));   /* d_w in every lane */
            }
            __m256i wq = type == DT_Q8_0 ? _mm256_loadu_si256((const __m256i *)(blk + 2)) : q4_values(blk + 2);
            __m256i wa = _mm256_sign_epi8(wq, wq);
            Q8_TOKEN(x0, 0, a0l, a0h);
            if (TT > 1) Q8_TOKEN(x1, 1, a1l, a1h);
            if (TT > 2) Q8_TOKEN(x2, 2, a2l, a2h);
            if (TT > 3) Q8_TOKEN(x3, 3, a3l, a3h);
        }
    }
    float *o = job->out + (size_t)t0 * N + n;
    o[0] = lanes_sum_avx2(a0l, a0h);
    if (TT > 1) o[N] = lanes_sum_avx2(a1l, a1h);
    if (TT > 2) o[2 * (size_t)N] = lanes_sum_avx2(a2l, a2h);
    if (TT > 3) o[3 * (size_t)N] = lanes_sum_avx2(a3l, a3h);
}

/* Rows na and nb (nb < 0: none) by one token t (decoding), a pair of
 * blocks of each in turn: two streams. Each row's sums are q8_tile_avx2's
 * for one token (the same products into the same lanes in the same order),
 * so the same bits. */
AVX2_INLINE void q8_decode_pair(const MatmulJob *job, int na, int nb, DType type) {
    int K = job->W->K, nbk = K / QK8_0;
    const uint8_t *ra = row_ptr(job->W, na), *rb = row_ptr(job->W, nb < 0 ? na : nb);
    size_t bs = type == DT_Q8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
    ActRow x0 = act_row(job->act, K, 0);
    const __m256i ones = _mm256_set1_epi16(1);
    const float *dxt = NULL, *p = NULL;   /* Q8_TOKEN's one-token form */
    __m256 al = _mm256_setzero_ps(), ah = al, bl = al, bh = al;
    for (int b0 = 0; b0 < nbk; b0 += 2) {
        prefetch_weights(ra + b0 * bs, 2 * bs, 1, 1, 0);
        if (nb >= 0) prefetch_weights(rb + b0 * bs, 2 * bs, 1, 1, 0);
        for (int h = 0; h < 2 && b0 + h < nbk; h++) {
            int b = b0 + h;
            for (int r = 0; r < 2; r++) {
                if (r && nb < 0) break;
                const uint8_t *blk = (r ? rb : ra) + b * bs;
                short d16;
                memcpy(&d16, blk, 2);
                __m256 dwv = _mm256_cvtph_ps(_mm_set1_epi16(d16));
                __m256i wq = type == DT_Q8_0 ? _mm256_loadu_si256((const __m256i *)(blk + 2)) : q4_values(blk + 2);
                __m256i wa = _mm256_sign_epi8(wq, wq);   /* the magnitudes, as Q8_TOKEN names them */
                if (r) Q8_TOKEN(x0, 0, bl, bh);
                else Q8_TOKEN(x0, 0, al, ah);
            }
        }
    }
    job->out[na] = lanes_sum_avx2(al, ah);
    if (nb >= 0) job->out[nb] = lanes_sum_avx2(bl, bh);
}

/* Rows [n0, n1) of Q8_0 or Q4_0, row by row, over chunks of rows that stay
 * in L2 as rows_by_tiles_avx2 goes, four tokens at a time. Before the tiles
 * the chunk's scales are widened once for all the tokens (dw, Q8_DW_FLOATS
 * at most: chunks of fewer rows where K is large) and, per four tokens, the
 * tokens' scales copied side by side (dxt, zeros past the last token): a
 * block's float work in the tile is then one multiply for four tokens where
 * it was a widening and four multiplies (on the Zen 3 core the whole prompt's
 * Q8_0 products about 15% faster). One token, or K past Q8_DXT_BLOCKS
 * blocks, goes a token at a time (dxt NULL). */
enum { Q8_DXT_BLOCKS = 1024, Q8_DW_FLOATS = 8192 };   /* 16 and 32 KiB on the stack */
AVX2_INLINE void q8_rows_by_tiles(const MatmulJob *job, int n0, int n1, DType type) {
    int T = job->T, K = job->W->K, nb = K / QK8_0;
    size_t row_bytes = dtype_row_bytes(type, K), bs = type == DT_Q8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
    if (T == 1) {   /* decoding: two streams, rows half the range apart */
        int h = (n1 - n0) / 2;
        for (int i = 0; i < h; i++) q8_decode_pair(job, n0 + i, n0 + h + i, type);
        if ((n1 - n0) % 2) q8_decode_pair(job, n1 - 1, -1, type);
        return;
    }
    int chunk = (int)(AVX2_CHUNK_BYTES / row_bytes), wide = T > 1 && nb <= Q8_DXT_BLOCKS;
    if (wide && chunk > Q8_DW_FLOATS / nb) chunk = Q8_DW_FLOATS / nb;
    if (chunk < 1) chunk = 1;
    float dxt[4 * Q8_DXT_BLOCKS], dw[Q8_DW_FLOATS];
    for (int c0 = n0; c0 < n1; c0 += chunk) {
        int c1 = c0 + chunk < n1 ? c0 + chunk : n1;
        if (!wide) {
            for (int n = c0; n < c1; n++)
                for (int t = 0; t < T; t++) q8_tile_avx2(job, n, t, type, 1, NULL, NULL);
            continue;
        }
        for (int n = c0; n < c1; n++) {
            const uint8_t *w = row_ptr(job->W, n);
            for (int b = 0; b < nb; b++) {
                uint16_t d16;
                memcpy(&d16, w + b * bs, 2);
                dw[(n - c0) * nb + b] = _cvtsh_ss(d16);
            }
        }
        for (int t = 0; t < T; t += 4) {
            int tt = T - t < 4 ? T - t : 4;
            for (int i = 0; i < 4; i++) {
                const float *d = i < tt ? act_row(job->act, K, t + i).d : NULL;
                for (int b = 0; b < nb; b++) dxt[4 * b + i] = d ? d[b] : 0.0f;
            }
            for (int n = c0; n < c1; n++) {
                const float *dwn = dw + (n - c0) * nb;
                if (tt == 4) q8_tile_avx2(job, n, t, type, 4, dwn, dxt);
                else if (tt == 3) q8_tile_avx2(job, n, t, type, 3, dwn, dxt);
                else if (tt == 2) q8_tile_avx2(job, n, t, type, 2, dwn, dxt);
                else q8_tile_avx2(job, n, t, type, 1, dwn, dxt);
            }
        }
    }
}

static AVX2_FN void q8_0_by_row_rows_avx2(const MatmulJob *job, int part, int n0, int n1) {
    q8_rows_by_tiles(job, n0, n1, DT_Q8_0);
}
static AVX2_FN void q4_0_by_row_rows_avx2(const MatmulJob *job, int part, int n0, int n1) {
    q8_rows_by_tiles(job, n0, n1, DT_Q4_0);
}

/* Rows 8g .. 8g+7 of out's row o (sum), of them those in [n0, n1): a
 * range may cut a group. */
AVX2_INLINE void rows8_store(float *o, int g, __m256 sum, int n0, int n1) {
    int r0 = n0 > 8 * g ? n0 - 8 * g : 0, r1 = n1 - 8 * g < 8 ? n1 - 8 * g : 8;
    if (r0 == 0 && r1 == 8) {
        _mm256_storeu_ps(o + 8 * (size_t)g, sum);
        return;
    }
    float part[8];
    _mm256_storeu_ps(part, sum);
    memcpy(o + 8 * (size_t)g + r0, part + r0, (size_t)(r1 - r0) * sizeof(float));
}

/* --- In eights (formats.h, Mat.rows8): Q4_0 and Q8_0 against Q8_0 activations
 *
 * The row tile above spends, per token and block of one row, a sign, two
 * multiply-adds, a conversion, a multiply and an FMA: the float work and the
 * sign are as dear as the int8 products, and the kernel is bound by its
 * instructions, not by memory. With the rows in eights, one block of eight
 * rows is four (Q4_0) or eight (Q8_0) 32-byte loads, each holding four
 * rows' values 8c .. 8c+7 (and Q4_0's 16 + 8c .. in its high nibbles); the
 * token's eight values 8c .. 8c+7 are broadcast to the four 64-bit lanes,
 * one per row. Per token and block of eight rows:
 *   Q4_0  the nibbles stay unsigned (0 .. 15), the unsigned side of
 *         vpmaddubsw, so no sign moves: 8 vpmaddubsw and 6 adds in int16
 *         (a lane at most 4 * 2 * 15 * 127 = 15240), 2 vpmaddwd by 1; the
 *         offset 8 comes off as 8 * (sum of the block's values), computed
 *         once with the activations (act_row's off): sum (q - 8) x =
 *         sum q x - 8 sum x, exact
 *   Q8_0  the weights' magnitudes, taken once per block, against the token's
 *         values with the weights' signs (vpsignb, its weights read from
 *         L1): 8 vpsignb, 8 vpmaddubsw, 8 vpmaddwd by 1 (a pair of products
 *         may reach 2 * 128 * 127, so no int16 adds), 6 int32 adds
 *   both  1 vphaddd (one sum per row: the layout's order of rows makes them
 *         come out as rows 0 .. 7), 1 conversion, 1 multiply (the eight d_w
 *         by d_x), 1 FMA
 * 21 (Q4_0) or 34 (Q8_0) instructions for 256 products where the row tile
 * needs 48 to 56. Each row's sum is a float chain block after block, acc =
 * fma(isum, d_w * d_x, acc): matmul_blocks_ref's bits, the AMX tiles'
 * order. */
enum { X8_TT = 8 };   /* tokens a tile: its sums live partly in memory, the weights in registers */

/* Eight bytes of activations broadcast to the four 64-bit lanes. */
AVX2_INLINE __m256i bcast8(const int8_t *p) {
    int64_t v;
    memcpy(&v, p, 8);
    return _mm256_set1_epi64x(v);
}

/* Q4_0: the int32 sums of group x's four rows (two a row) */
#define X8_Q4(L0, L1, H0, H1)                                                                    \
    _mm256_madd_epi16(_mm256_add_epi16(                                                          \
                          _mm256_add_epi16(_mm256_maddubs_epi16(L0, c0_), _mm256_maddubs_epi16(L1, c1_)), \
                          _mm256_add_epi16(_mm256_maddubs_epi16(H0, c2_), _mm256_maddubs_epi16(H1, c3_))), \
                      ones)
/* Q8_0: load k's magnitudes A against the token's values C signed by the load */
#define X8_Q8(A, k, C)                                                                           \
    _mm256_madd_epi16(                                                                           \
        _mm256_maddubs_epi16(A, _mm256_sign_epi8(C, _mm256_loadu_si256((const __m256i *)(q + 32 * (k))))), ones)
#define X8_TOKEN(XR, ACC)                                                                                   \
    do {                                                                                                    \
        const int8_t *xq_ = (XR).qs + b * QK8_0;                                                            \
        __m256i c0_ = bcast8(xq_), c1_ = bcast8(xq_ + 8), c2_ = bcast8(xq_ + 16), c3_ = bcast8(xq_ + 24), s_; \
        if (type == DT_Q4_0) {                                                                              \
            s_ = _mm256_hadd_epi32(X8_Q4(w0, w1, w2, w3), X8_Q4(w4, w5, w6, w7));                           \
            s_ = _mm256_sub_epi32(s_, _mm256_set1_epi32((XR).off[b]));                                      \
        } else {                                                                                            \
            __m256i g0_ = _mm256_add_epi32(_mm256_add_epi32(X8_Q8(w0, 0, c0_), X8_Q8(w1, 1, c1_)),          \
                                           _mm256_add_epi32(X8_Q8(w2, 2, c2_), X8_Q8(w3, 3, c3_)));         \
            __m256i g1_ = _mm256_add_epi32(_mm256_add_epi32(X8_Q8(w4, 4, c0_), X8_Q8(w5, 5, c1_)),          \
                                           _mm256_add_epi32(X8_Q8(w6, 6, c2_), X8_Q8(w7, 7, c3_)));         \
            s_ = _mm256_hadd_epi32(g0_, g1_);                                                               \
        }                                                                                                   \
        ACC = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s_), _mm256_mul_ps(dw, _mm256_set1_ps((XR).d[b])), ACC);   \
    } while (0)

/* A block's weights (q) into w0 .. w7: Q4_0's nibbles split, lo, lo, hi,
 * hi of load x = 0, then of x = 1; Q8_0's magnitudes. */
#define X8_WEIGHTS()                                                                                       \
    do {                                                                                                   \
        if (type == DT_Q4_0) {                                                                             \
            __m256i v00 = _mm256_loadu_si256((const __m256i *)q), v01 = _mm256_loadu_si256((const __m256i *)(q + 32)); \
            __m256i v10 = _mm256_loadu_si256((const __m256i *)(q + 64));                                   \
            __m256i v11 = _mm256_loadu_si256((const __m256i *)(q + 96));                                   \
            w0 = _mm256_and_si256(v00, m4), w2 = _mm256_and_si256(_mm256_srli_epi16(v00, 4), m4);          \
            w1 = _mm256_and_si256(v01, m4), w3 = _mm256_and_si256(_mm256_srli_epi16(v01, 4), m4);          \
            w4 = _mm256_and_si256(v10, m4), w6 = _mm256_and_si256(_mm256_srli_epi16(v10, 4), m4);          \
            w5 = _mm256_and_si256(v11, m4), w7 = _mm256_and_si256(_mm256_srli_epi16(v11, 4), m4);          \
        } else {                                                                                           \
            w0 = X8_ABS(0), w1 = X8_ABS(1), w2 = X8_ABS(2), w3 = X8_ABS(3);                                \
            w4 = X8_ABS(4), w5 = X8_ABS(5), w6 = X8_ABS(6), w7 = X8_ABS(7);                                \
        }                                                                                                  \
    } while (0)
#define X8_ABS(k) _mm256_abs_epi8(_mm256_loadu_si256((const __m256i *)(q + 32 * (k))))

/* Block b of rows 8g .. 8g+7 (at blk) by one token x0, into a0. With ahead
 * (Q4_0's decoding; Q8_0's asks for nothing), the lines that start within
 * the block's 144 bytes from there are asked for, two or three, so that
 * along a stream each line is asked for once: the first between the
 * weights' loads and the products, the others after the products. A burst
 * of all of them before the block, as prefetch_weights asks, was slower
 * (notes/formats.md, "Asking as it goes"). Written out rather than as a
 * loop, which GCC 12 then keeps from unrolling decode_groups' four streams
 * (as slow as the burst). */
AVX2_INLINE __m256 x8_block1(DType type, const uint8_t *blk, ActRow x0, int b, __m256 a0, const uint8_t *ahead) {
    const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0f);
    const uint8_t *q = blk + 16;
    __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));
    __m256i w0, w1, w2, w3, w4, w5, w6, w7;
    X8_WEIGHTS();
    uintptr_t end = (uintptr_t)ahead + sizeof(BlockQ4_0) * 8, line = ((uintptr_t)ahead + 63) & ~(uintptr_t)63;
    if (ahead) _mm_prefetch((const char *)line, _MM_HINT_T0);
    X8_TOKEN(x0, a0);
    if (ahead && line + 64 < end) _mm_prefetch((const char *)(line + 64), _MM_HINT_T0);
    if (ahead && line + 128 < end) _mm_prefetch((const char *)(line + 128), _MM_HINT_T0);
    return a0;
}

/* Rows 8g .. 8g+7 by tokens t0 .. t0+TT-1; of them, those in [n0, n1) are
 * written. */
AVX2_INLINE void x8_tile_avx2(const MatmulJob *job, DType type, int g, int t0, int TT, int n0, int n1) {
    int N = job->W->N, K = job->W->K, nb = K / QK8_0;
    size_t bb = rows8_block_bytes(type), group_bytes = (size_t)nb * bb;
    const uint8_t *w = job->W->rows8 + (size_t)g * group_bytes;
    ActRow x0 = act_row(job->act, K, t0), x1 = x0, x2 = x0, x3 = x0, x4 = x0, x5 = x0, x6 = x0, x7 = x0;
    if (TT > 1) x1 = act_row(job->act, K, t0 + 1);
    if (TT > 2) x2 = act_row(job->act, K, t0 + 2);
    if (TT > 3) x3 = act_row(job->act, K, t0 + 3);
    if (TT > 4) x4 = act_row(job->act, K, t0 + 4);
    if (TT > 5) x5 = act_row(job->act, K, t0 + 5);
    if (TT > 6) x6 = act_row(job->act, K, t0 + 6);
    if (TT > 7) x7 = act_row(job->act, K, t0 + 7);
    const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0f);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk = w + (size_t)b * bb, *q = blk + 16;
        if (TT == 1) prefetch_weights(blk, bb, 1, 1, 0);   /* a stream: ahead of it */
        else prefetch_weights(blk, bb, 1, TT, group_bytes);   /* the next group's */
        __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));
        __m256i w0, w1, w2, w3, w4, w5, w6, w7;   /* Q4_0: lo, lo, hi, hi of x = 0, then of x = 1; Q8_0: |w| */
        X8_WEIGHTS();
        X8_TOKEN(x0, a0);
        if (TT > 1) X8_TOKEN(x1, a1);
        if (TT > 2) X8_TOKEN(x2, a2);
        if (TT > 3) X8_TOKEN(x3, a3);
        if (TT > 4) X8_TOKEN(x4, a4);
        if (TT > 5) X8_TOKEN(x5, a5);
        if (TT > 6) X8_TOKEN(x6, a6);
        if (TT > 7) X8_TOKEN(x7, a7);
    }
    float *o = job->out + (size_t)t0 * N;
    rows8_store(o, g, a0, n0, n1);
    if (TT > 1) rows8_store(o + N, g, a1, n0, n1);
    if (TT > 2) rows8_store(o + 2 * (size_t)N, g, a2, n0, n1);
    if (TT > 3) rows8_store(o + 3 * (size_t)N, g, a3, n0, n1);
    if (TT > 4) rows8_store(o + 4 * (size_t)N, g, a4, n0, n1);
    if (TT > 5) rows8_store(o + 5 * (size_t)N, g, a5, n0, n1);
    if (TT > 6) rows8_store(o + 6 * (size_t)N, g, a6, n0, n1);
    if (TT > 7) rows8_store(o + 7 * (size_t)N, g, a7, n0, n1);
}

#define X8_TILE_OF(name, TYPE)                                                                       \
    static AVX2_FN void name(const MatmulJob *j, int g, int t, int TT, int n0, int n1) {             \
        switch (TT) {   /* each width compiled with its constant */                                  \
        case 1: x8_tile_avx2(j, TYPE, g, t, 1, n0, n1); break;                                       \
        case 2: x8_tile_avx2(j, TYPE, g, t, 2, n0, n1); break;                                       \
        case 3: x8_tile_avx2(j, TYPE, g, t, 3, n0, n1); break;                                       \
        case 4: x8_tile_avx2(j, TYPE, g, t, 4, n0, n1); break;                                       \
        case 5: x8_tile_avx2(j, TYPE, g, t, 5, n0, n1); break;                                       \
        case 6: x8_tile_avx2(j, TYPE, g, t, 6, n0, n1); break;                                       \
        case 7: x8_tile_avx2(j, TYPE, g, t, 7, n0, n1); break;                                       \
        default: x8_tile_avx2(j, TYPE, g, t, 8, n0, n1); break;                                      \
        }                                                                                            \
    }
X8_TILE_OF(q4_0_x8_tile, DT_Q4_0)
X8_TILE_OF(q8_0_x8_tile, DT_Q8_0)

static void rows8_decode(const MatmulJob *job, int n0, int n1);   /* below, with the K formats */

/* Rows [n0, n1), any range (each row's sum is the same whichever tile wrote
 * it): over a chunk of groups that stays in L2, X8_TT tokens at a time; one
 * token, rows8_decode. */
static void rows8_avx2(const MatmulJob *job, int n0, int n1) {
    void (*tile)(const MatmulJob *, int, int, int, int, int) =
        job->W->type == DT_Q4_0 ? q4_0_x8_tile : q8_0_x8_tile;
    int T = job->T, g0 = n0 / 8, g1 = (n1 + 7) / 8;
    if (T == 1) {
        rows8_decode(job, n0, n1);
        return;
    }
    size_t group_bytes = (size_t)(job->W->K / QK8_0) * rows8_block_bytes(job->W->type);
    int chunk = (int)(AVX2_CHUNK_BYTES / group_bytes);
    if (chunk < 1) chunk = 1;
    for (int c0 = g0; c0 < g1; c0 += chunk) {
        int c1 = c0 + chunk < g1 ? c0 + chunk : g1;
        for (int t = 0; t < T; t += X8_TT)
            for (int g = c0; g < c1; g++) tile(job, g, t, T - t < X8_TT ? T - t : X8_TT, n0, n1);
    }
}

/* Q4_0 and Q8_0: in eights where the loader made them, else row by row. */
void q4_0_rows_avx2(const MatmulJob *job, int part, int n0, int n1) {
    if (job->W->rows8) rows8_avx2(job, n0, n1);
    else q4_0_by_row_rows_avx2(job, part, n0, n1);
}

void q8_0_rows_avx2(const MatmulJob *job, int part, int n0, int n1) {
    if (job->W->rows8) rows8_avx2(job, n0, n1);
    else q8_0_by_row_rows_avx2(job, part, n0, n1);
}

/* --- Q4_K and Q6_K against Q8_K activations
 *
 * One row by up to QK_TT_AVX2 tokens: each super-block's weights are unpacked
 * once for all of them, 32 values (two of Q6_K's sub-blocks, one of Q4_K's)
 * at a time, and each token's exact integer sums gather in eight int32 lanes:
 *   Q4_K  isum = sum_j sc[j] sum_i q x,   msum = sum_j mn[j] (the sums of x
 *         in sub-block j, from the Q8_K block's bsums)
 *   Q6_K  isum = sum_j sc[j] sum_i q x - 32 sum_j sc[j] bsums[j]
 * then the float step of qk_dot_int_of, in its order. The eight tokens'
 * sums are added across their lanes together (isum8x8: twelve pairwise adds
 * where one token at a time took 48 instructions) and the float step runs in
 * the lanes of one register, a token each, the same operations in the same
 * order as the scalar step: on the Zen 3 core Q4_K's 64-token products
 * about 20% faster, Q6_K's 10% (tools/kbench --shape 5632x2048). */
enum { QK_TT_AVX2 = 8 };

/* Q4_K's twelve bytes of 6-bit scales and mins as sc[0..7] (bytes 0-7 of the
 * result) and mn[0..7] (bytes 8-15), k_scale_min for all eight at once: the
 * first four of each are the low six bits of bytes 0-3 and 4-7; the last
 * four take their low four bits from the nibbles of bytes 8-11 and their top
 * two from the top two bits of bytes 0-3 (scales) and 4-7 (mins). */
static inline void q4_k_scales(const uint8_t s[12], uint8_t out[16]) {
    uint32_t a, b, c;
    memcpy(&a, s, 4), memcpy(&b, s + 4, 4), memcpy(&c, s + 8, 4);
    uint32_t sc_lo = a & 0x3f3f3f3fu, mn_lo = b & 0x3f3f3f3fu;
    uint32_t sc_hi = (c & 0x0f0f0f0fu) | ((a >> 6) & 0x03030303u) << 4;
    uint32_t mn_hi = ((c >> 4) & 0x0f0f0f0fu) | ((b >> 6) & 0x03030303u) << 4;
    memcpy(out, &sc_lo, 4), memcpy(out + 4, &sc_hi, 4), memcpy(out + 8, &mn_lo, 4), memcpy(out + 12, &mn_hi, 4);
}

/* Q6_K's 32 values 128h + 32i .. +31 (i < 4): low nibbles of ql[64h + l] for
 * i = 0 and 2 (high ones for 2), of ql[64h + 32 + l] for 1 and 3, the top two
 * bits from bits 2i, 2i + 1 of qh[32h + l]. */
AVX2_INLINE __m256i q6_values(const BlockQ6_K *b, int h, int i) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x03);
    __m256i ql = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32 * (i % 2)));
    __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
    __m256i lo = i < 2 ? _mm256_and_si256(ql, m4) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * i), m2);
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
}

/* F(t) for each token t < TT of a K tile: its sums are named variables acc0
 * .. acc7 (see float_tile_avx2). */
#define QK_EACH(F)          \
    do {                    \
        F(0);               \
        if (TT > 1) F(1);   \
        if (TT > 2) F(2);   \
        if (TT > 3) F(3);   \
        if (TT > 4) F(4);   \
        if (TT > 5) F(5);   \
        if (TT > 6) F(6);   \
        if (TT > 7) F(7);   \
    } while (0)
#define QK_ZERO(t) acc##t = _mm256_setzero_si256()
/* the token's sums in a register here (see k8_tiles) */
#define QK_KEEP(t) __asm__("" : "+x"(acc##t))
/* Q4_K, chunk c: sub-block 2c's values lo and scale s0, 2c + 1's hi and s1 */
#define Q4K_TOKEN(t)                                                                                   \
    do {                                                                                               \
        const int8_t *xq_ = x[t][sb].qs + 64 * c;                                                      \
        __m256i p0_ = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)xq_));              \
        __m256i p1_ = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(xq_ + 32)));       \
        acc##t = _mm256_add_epi32(acc##t, _mm256_add_epi32(_mm256_madd_epi16(p0_, s0), _mm256_madd_epi16(p1_, s1))); \
    } while (0)
/* Q6_K: the -32 term from the bsums, then 32 values q with their scales s */
#define Q6K_START(t) acc##t = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)x[t][sb].bsums), sc32)
#define Q6K_TOKEN(t)                                                                                   \
    acc##t = _mm256_add_epi32(acc##t, _mm256_madd_epi16(_mm256_maddubs_epi16(q, _mm256_loadu_si256(     \
                                          (const __m256i *)(x[t][sb].qs + 128 * h + 32 * i))), s))
/* Q4_K's msum of token t: mn[j] times the sums of x in sub-block j */
#define QK_MSUM(t) m##t = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)x[t][sb].bsums), mn2)

/* The eight int32 lanes of each of a0 .. a7 added, as one vector: lane t is
 * a_t's sum. Exact, so any order: three rounds of pairwise adds (vphaddd),
 * then the two 128-bit halves. */
AVX2_INLINE __m256i isum8x8(__m256i a0, __m256i a1, __m256i a2, __m256i a3, __m256i a4, __m256i a5,
                            __m256i a6, __m256i a7) {
    __m256i u0 = _mm256_hadd_epi32(_mm256_hadd_epi32(a0, a1), _mm256_hadd_epi32(a2, a3));
    __m256i u1 = _mm256_hadd_epi32(_mm256_hadd_epi32(a4, a5), _mm256_hadd_epi32(a6, a7));
    return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
}

/* qk_dot_int_of's float step in eight lanes, its operations in its order:
 * sum + (d * d_x * isum - dmin * d_x * msum); Q6_K passes dmin and msum 0,
 * which the step multiplies as the scalar one does (0 * d_x * 0, NaN where
 * d_x is not finite). */
AVX2_INLINE __m256 qk_float_step(__m256 sum, __m256 d, __m256 dmin, __m256 xd, __m256i isum, __m256i msum) {
    __m256 f = _mm256_mul_ps(_mm256_mul_ps(d, xd), _mm256_cvtepi32_ps(isum));
    __m256 g = _mm256_mul_ps(_mm256_mul_ps(dmin, xd), _mm256_cvtepi32_ps(msum));
    return _mm256_add_ps(sum, _mm256_sub_ps(f, g));
}

AVX2_INLINE void qk_tile_avx2(const MatmulJob *job, const uint8_t *row, int n, int t0, DType type, int TT,
                              const float *dxt) {
    int N = job->W->N, K = job->W->K;
    size_t bytes = dtype_row_bytes(type, QK_K), row_bytes = dtype_row_bytes(type, K),
           stride = small_act_stride(type, K);
    const BlockQ8_K *x[QK_TT_AVX2];
    for (int t = 0; t < TT; t++) x[t] = (const BlockQ8_K *)(job->act + (size_t)(t0 + t) * stride);
    /* without dxt the tokens' scales are gathered: token t's d is t * stride
     * bytes after token 0's (lanes past TT read token 0's, and are not kept) */
    int step = (int)(stride / sizeof(float));
    const __m256i at = _mm256_setr_epi32(0, TT > 1 ? step : 0, TT > 2 ? 2 * step : 0, TT > 3 ? 3 * step : 0, TT > 4 ? 4 * step : 0,
                                         TT > 5 ? 5 * step : 0, TT > 6 ? 6 * step : 0, TT > 7 ? 7 * step : 0);
    const __m256i nib = _mm256_set1_epi8(0x0f);
    __m256 sum = _mm256_setzero_ps();   /* lane t: token t0 + t */
    float sum1 = 0.0f;                  /* TT == 1 */
    __m256i acc0 = _mm256_setzero_si256(), acc1 = acc0, acc2 = acc0, acc3 = acc0, acc4 = acc0, acc5 = acc0,
            acc6 = acc0, acc7 = acc0, m0 = acc0, m1 = acc0, m2 = acc0, m3 = acc0, m4 = acc0, m5 = acc0, m6 = acc0,
            m7 = acc0;
    for (int sb = 0; sb < K / QK_K; sb++) {
        const uint8_t *blk = row + sb * bytes;
        prefetch_weights(blk, bytes, 1, TT, row_bytes);
        float d, dmin = 0.0f;
        __m256i mn2 = _mm256_setzero_si256();
        if (type == DT_Q4_K) {
            const BlockQ4_K *b = (const BlockQ4_K *)blk;
            uint8_t sm[16];
            q4_k_scales(b->scales, sm);
            d = _cvtsh_ss(b->d), dmin = _cvtsh_ss(b->dmin);
            QK_EACH(QK_ZERO);
            for (int c = 0; c < 4; c++) {   /* sub-blocks 2c (low nibbles) and 2c + 1 (high) */
                __m256i v = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * c));
                __m256i lo = _mm256_and_si256(v, nib), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
                __m256i s0 = _mm256_set1_epi16(sm[2 * c]), s1 = _mm256_set1_epi16(sm[2 * c + 1]);
                QK_EACH(Q4K_TOKEN);
                QK_EACH(QK_KEEP);
            }
            /* mn[j] beside both halves of sub-block j's sums: bytes mn0 mn0 mn1 mn1 ... */
            __m128i mn = _mm_loadl_epi64((const __m128i *)(sm + 8));
            mn2 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn, mn));
        } else {
            const BlockQ6_K *b = (const BlockQ6_K *)blk;
            d = _cvtsh_ss(b->d);
            /* the scales as int16, -32 times them against the bsums */
            __m256i sc32 = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales)),
                                              _mm256_set1_epi16(-32));
            QK_EACH(Q6K_START);
            for (int h = 0; h < 2; h++)
                for (int i = 0; i < 4; i++) {   /* sub-blocks 8h + 2i and 8h + 2i + 1 */
                    __m256i q = q6_values(b, h, i);
                    __m256i s = _mm256_inserti128_si256(_mm256_set1_epi16(b->scales[8 * h + 2 * i]),
                                                        _mm_set1_epi16(b->scales[8 * h + 2 * i + 1]), 1);
                    QK_EACH(Q6K_TOKEN);
                    QK_EACH(QK_KEEP);
                }
        }
        /* qk_dot_int_of's float step, in its order: sum += d * d_x * isum -
         * dmin * d_x * msum (Q6_K: dmin, msum 0); one token alone in scalars,
         * more in the lanes of sum, all at once */
        if (TT == 1) {
            int32_t isum_ = isum8(acc0), msum_ = 0;
            if (type == DT_Q4_K) {
                QK_MSUM(0);
                msum_ = isum8(m0);
            }
            sum1 += d * x[0][sb].d * (float)isum_ - dmin * x[0][sb].d * (float)msum_;
            continue;
        }
        __m256i isum = isum8x8(acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7), msum = isum;
        if (type == DT_Q4_K) {
            QK_EACH(QK_MSUM);
            msum = isum8x8(m0, m1, m2, m3, m4, m5, m6, m7);
        } else {
            msum = _mm256_setzero_si256();
        }
        __m256 xd = dxt ? _mm256_loadu_ps(dxt + QK_TT_AVX2 * sb) : _mm256_i32gather_ps(&x[0][sb].d, at, 4);
        sum = qk_float_step(sum, _mm256_set1_ps(d), _mm256_set1_ps(dmin), xd, isum, msum);
    }
    float out[QK_TT_AVX2];
    _mm256_storeu_ps(out, sum);
    if (TT == 1) out[0] = sum1;
    for (int t = 0; t < TT; t++) job->out[(size_t)(t0 + t) * N + n] = out[t];
}

#define QK_TILES_OF(name, TYPE)                                                                      \
    static AVX2_FN void name##_tile(const MatmulJob *j, const uint8_t *row, int n, int t, int TT,     \
                                    const float *dxt) {                                              \
        switch (TT) {   /* each width compiled with its constant */                                  \
        case 1: qk_tile_avx2(j, row, n, t, TYPE, 1, dxt); break;                                        \
        case 2: qk_tile_avx2(j, row, n, t, TYPE, 2, dxt); break;                                        \
        case 3: qk_tile_avx2(j, row, n, t, TYPE, 3, dxt); break;                                        \
        case 4: qk_tile_avx2(j, row, n, t, TYPE, 4, dxt); break;                                        \
        case 5: qk_tile_avx2(j, row, n, t, TYPE, 5, dxt); break;                                        \
        case 6: qk_tile_avx2(j, row, n, t, TYPE, 6, dxt); break;                                        \
        case 7: qk_tile_avx2(j, row, n, t, TYPE, 7, dxt); break;                                        \
        default: qk_tile_avx2(j, row, n, t, TYPE, 8, dxt); break;                                       \
        }                                                                                            \
    }
QK_TILES_OF(q4_k, DT_Q4_K)
QK_TILES_OF(q6_k, DT_Q6_K)

/* --- Q4_K in eights (formats.h, Mat.rows8)
 *
 * Row by row a Q4_K super-block of one token costs about 130 instructions
 * (the scales unpacked in scalars, each sub-block's scale broadcast, two
 * horizontal sums, a float step in scalars): one Zen 3 core decoded 7 GB/s
 * of weights so, with them in memory or in L2 alike, where it reads 13-15.
 * In eights a super-block of eight rows is 32 loads of values, four rows'
 * bytes 32c + 8q .. +7 in each (the layout of formats.h), against the
 * token's eight values broadcast to the four 64-bit lanes, as Q4_0 in eights
 * does. Per token and super-block of eight rows:
 *   values  per load: the nibbles split (3), two vpmaddubsw against the
 *           low sub-block's and the high one's eight values, two int16 adds
 *           (four loads a lane: at most 4 * 2 * 15 * 128 = 15360);
 *           per sub-block and x, one vpmaddwd by the rows' scales, which a
 *           byte shuffle spreads from the scales unpacked for all eight rows
 *           at once (q4_k_scales on eight words in a register)
 *   sums    one vphaddd brings isum out in rows 0 .. 7; msum, the mins
 *           against the sub-blocks' sums of x, in two vpmaddwd a half
 *   float   qk_dot_int_of's step in its order, the eight rows in the lanes
 *           of one register
 * About 370 instructions for eight rows, 46 a row; one token (k8_sb1)
 * takes both loads x of a chunk together, which share the token's
 * broadcasts (sixteen a chunk where one load x at a time took 32: one
 * Zen 3 core decoded 11.6-12.9 GB/s from memory, 8.8-11.1 before, in
 * alternated rounds of kbench). The sums are exact
 * integers, so the bits are the generic path's. A batch's tile takes up to
 * four tokens, which share the loads, the splits and the scales' shuffles,
 * and runs down a chunk of groups that stays in L2 (k8_tiles). */

/* The scales (sc) and mins (mn) of the eight rows of a super-block, bytes j
 * of word i = sub-block j (lo: 0-3, hi: 4-7) of row i, q4_k_scales on all
 * eight rows at once. */
AVX2_INLINE void k8_scales(const uint8_t *blk, __m256i *sc_lo, __m256i *sc_hi, __m256i *mn_lo, __m256i *mn_hi) {
    __m256i a = _mm256_loadu_si256((const __m256i *)(blk + 32)), b = _mm256_loadu_si256((const __m256i *)(blk + 64)),
            c = _mm256_loadu_si256((const __m256i *)(blk + 96));
    const __m256i m6 = _mm256_set1_epi32(0x3f3f3f3f), m4 = _mm256_set1_epi32(0x0f0f0f0f),
                  m2 = _mm256_set1_epi32(0x03030303);
    *sc_lo = _mm256_and_si256(a, m6), *mn_lo = _mm256_and_si256(b, m6);
    *sc_hi = _mm256_or_si256(_mm256_and_si256(c, m4), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(a, 6), m2), 4));
    *mn_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(c, 4), m4),
                             _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(b, 6), m2), 4));
}

/* Eight bytes at p broadcast to the four 64-bit lanes, where this stands:
 * an asm statement, because GCC 12 otherwise makes the sixteen broadcasts
 * of a chunk once for both loads x, keeps them and spills them (about sixty
 * stores a super-block). */
AVX2_INLINE __m256i bcast8_here(const int8_t *p) {
    __m256i v;
    __asm__ volatile("vpbroadcastq %1, %0" : "=x"(v) : "m"(*(const int64_t(*)[1])p));
    return v;
}

/* Token x's msum (rows 0 .. 7) and its float step into SUM */
#define K8_END(XB, A0, A1, SUM)                                                                                  \
    do {                                                                                                         \
        __m256i isum_ = _mm256_hadd_epi32(A0, A1);   /* rows 0 .. 7 */                                           \
        __m256i b32_ = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(XB).bsums), ones);                 \
        __m256i b16_ = _mm256_packs_epi32(b32_, b32_);                                                           \
        __m256i bl_ = _mm256_permute4x64_epi64(b16_, 0x44), bh_ = _mm256_permute4x64_epi64(b16_, 0xee);         \
        __m256i p03_ = _mm256_add_epi32(_mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(mn_lo)), bl_), \
                                        _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(mn_hi)), bh_)); \
        __m256i p47_ = _mm256_add_epi32(                                                                         \
            _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(mn_lo, 1)), bl_),                    \
            _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(mn_hi, 1)), bh_));                   \
        __m256i msum_ = _mm256_permute4x64_epi64(_mm256_hadd_epi32(p03_, p47_), 0xd8);   /* rows 0 .. 7 */       \
        SUM = qk_float_step(SUM, d, dmin, _mm256_set1_ps((XB).d), isum_, msum_);                                  \
    } while (0)

/* One super-block of rows 8g .. 8g+7 (at blk) by one token (its Q8_K
 * block xb): sum brought up to date. With ahead, the K8_LINES lines from
 * there are asked for as it goes, one after each load of values, rather than
 * all of them before it starts: eighteen prefetches in a row fill the
 * core's queue of misses, and the loads behind them wait (in `perf`, an
 * eighth of the kernel's samples sat on that burst). Spread out, one Zen 3
 * core decoded the TinyLlama-shaped Q4_K file 1.16 times as fast, two
 * threads 1.06 (notes/formats.md, "Asking as it goes"). */
enum { K8_LINES = 8 * sizeof(BlockQ4_K) / 64 };   /* a Q4_K super-block of eight rows: 1152 bytes, 18 lines */
AVX2_INLINE __m256 k8_sb1(const uint8_t *blk, const BlockQ8_K *xb, __m256 sum, const uint8_t *ahead) {
    const __m256i nib = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    /* the byte shuffles that spread byte j of the rows' words of load x
     * (rows 2x, 2x + 1 in each half) to their four int16 lanes: add j */
    const __m256i spread0 = _mm256_setr_epi8(0, -128, 0, -128, 0, -128, 0, -128, 4, -128, 4, -128, 4, -128, 4, -128,
                                             0, -128, 0, -128, 0, -128, 0, -128, 4, -128, 4, -128, 4, -128, 4, -128);
    const uint8_t *q = blk + 128;
    __m256i sc_lo, sc_hi, mn_lo, mn_hi;
    k8_scales(blk, &sc_lo, &sc_hi, &mn_lo, &mn_hi);
    const int8_t *qa = xb->qs;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0;   /* load x = 0 or 1 */
    for (int c = 0; c < 4; c++) {
        /* both loads x of a chunk take the same eight values of the token */
        __m256i la0 = _mm256_setzero_si256(), ha0 = la0, la1 = la0, ha1 = la0;
        for (int qq = 0; qq < 4; qq++) {
            __m256i bl = bcast8_here(qa + 64 * c + 8 * qq), bh = bcast8_here(qa + 64 * c + 32 + 8 * qq);
            const uint8_t *p = q + (size_t)((c * 4 + qq) * 2) * 32;
            __m256i v = _mm256_loadu_si256((const __m256i *)p);
            __m256i lo = _mm256_and_si256(v, nib), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
            la0 = _mm256_add_epi16(la0, _mm256_maddubs_epi16(lo, bl));
            ha0 = _mm256_add_epi16(ha0, _mm256_maddubs_epi16(hi, bh));
            v = _mm256_loadu_si256((const __m256i *)(p + 32));
            lo = _mm256_and_si256(v, nib), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
            la1 = _mm256_add_epi16(la1, _mm256_maddubs_epi16(lo, bl));
            ha1 = _mm256_add_epi16(ha1, _mm256_maddubs_epi16(hi, bh));
            __asm__("" : "+x"(la0), "+x"(ha0), "+x"(la1), "+x"(ha1));
            if (ahead) _mm_prefetch((const char *)(ahead + 64 * (c * 4 + qq)), _MM_HINT_T0);
        }
        /* sub-blocks 2c and 2c + 1: bytes 2c % 4 and 2c % 4 + 1 of the lo or hi words */
        __m256i src = c < 2 ? sc_lo : sc_hi, sp = _mm256_add_epi8(spread0, _mm256_set1_epi8((char)(2 * c % 4)));
        __m256i sl = _mm256_shuffle_epi8(src, sp), sh = _mm256_shuffle_epi8(src, _mm256_add_epi8(sp, _mm256_set1_epi8(1)));
        a0 = _mm256_add_epi32(a0, _mm256_add_epi32(_mm256_madd_epi16(la0, sl), _mm256_madd_epi16(ha0, sh)));
        sp = _mm256_add_epi8(sp, _mm256_set1_epi8(8));
        sl = _mm256_shuffle_epi8(src, sp), sh = _mm256_shuffle_epi8(src, _mm256_add_epi8(sp, _mm256_set1_epi8(1)));
        a1 = _mm256_add_epi32(a1, _mm256_add_epi32(_mm256_madd_epi16(la1, sl), _mm256_madd_epi16(ha1, sh)));
    }
    /* qk_dot_int_of's float step, in its order: sum += d * d_x * isum - dmin * d_x * msum */
    __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk)),
           dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16)));
    for (int l = 16; ahead && l < K8_LINES; l++) _mm_prefetch((const char *)(ahead + 64 * l), _MM_HINT_T0);
    K8_END(*xb, a0, a1, sum);
    return sum;
}

/* Token T's int16 sums of one load's values (lo, hi) against its eight
 * values of the low and the high sub-block (x##T its values in this
 * super-block). */
#define K8Q_TOKEN(T)                                                 \
    do {                                                             \
        L##T = _mm256_add_epi16(L##T, _mm256_maddubs_epi16(lo, bcast8_here(x##T + 64 * c + 8 * qq)));      \
        H##T = _mm256_add_epi16(H##T, _mm256_maddubs_epi16(hi, bcast8_here(x##T + 64 * c + 32 + 8 * qq))); \
    } while (0)
#define K8Q_SCALE(T) A[4 * x + T] = _mm256_add_epi32(A[4 * x + T], _mm256_add_epi32(_mm256_madd_epi16(L##T, sl), _mm256_madd_epi16(H##T, sh)))
/* F(T) for each token T < TT of a tile of up to four */
#define K8Q_EACH(F)       \
    do {                  \
        F(0);             \
        F(1);             \
        if (TT > 2) F(2); \
        if (TT > 3) F(3); \
    } while (0)

/* Rows 8g .. 8g+7 by tokens t .. t + TT - 1 (TT of 2 to 4), which share
 * each load's split and each sub-block's scales; of them, those in [n0, n1)
 * are written. The loads x = 0 and 1 go one after the other, so that the
 * tokens' eight int16 sums of a chunk, the load's two halves and a broadcast
 * fit the sixteen registers; the int32 sums of the sub-blocks wait in memory
 * (A). The same integers and float step as k8_sb1: its bits. */
AVX2_INLINE void k8_tiles(const MatmulJob *job, int g, int t, int TT, int n0, int n1) {
    int N = job->W->N, K = job->W->K, nsb = K / QK_K;
    size_t bb = rows8_block_bytes(DT_Q4_K), group_bytes = (size_t)nsb * bb, stride = small_act_stride(DT_Q4_K, K);
    const uint8_t *w = job->W->rows8 + (size_t)g * group_bytes;
    const uint8_t *act = job->act + (size_t)t * stride;
    const __m256i nib = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    const __m256i spread0 = _mm256_setr_epi8(0, -128, 0, -128, 0, -128, 0, -128, 4, -128, 4, -128, 4, -128, 4, -128,
                                             0, -128, 0, -128, 0, -128, 0, -128, 4, -128, 4, -128, 4, -128, 4, -128);
    __m256 sum[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int sb = 0; sb < nsb; sb++) {
        const uint8_t *blk = w + (size_t)sb * bb, *q = blk + 128;
        prefetch_weights(blk, bb, 1, TT, group_bytes);   /* the next group's */
        __m256i sc_lo, sc_hi, mn_lo, mn_hi;
        k8_scales(blk, &sc_lo, &sc_hi, &mn_lo, &mn_hi);
        /* tokens past TT read token 0's values, and compute nothing */
        const BlockQ8_K *xb0 = (const BlockQ8_K *)act + sb, *xb1 = (const BlockQ8_K *)(act + stride) + sb,
                        *xb2 = TT > 2 ? (const BlockQ8_K *)(act + 2 * stride) + sb : xb0,
                        *xb3 = TT > 3 ? (const BlockQ8_K *)(act + 3 * stride) + sb : xb0;
        const int8_t *x0 = xb0->qs, *x1 = xb1->qs, *x2 = xb2->qs, *x3 = xb3->qs;
        __m256i A[8];   /* load x, token T: A[4x + T] */
        for (int i = 0; i < 8; i++) A[i] = _mm256_setzero_si256();
        for (int x = 0; x < 2; x++)
            for (int c = 0; c < 4; c++) {
                __m256i L0 = _mm256_setzero_si256(), L1 = L0, L2 = L0, L3 = L0, H0 = L0, H1 = L0, H2 = L0, H3 = L0;
                for (int qq = 0; qq < 4; qq++) {
                    __m256i v = _mm256_loadu_si256((const __m256i *)(q + (size_t)((c * 4 + qq) * 2 + x) * 32));
                    __m256i lo = _mm256_and_si256(v, nib), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
                    K8Q_EACH(K8Q_TOKEN);
                    /* the sums in registers here: GCC 12 otherwise makes all
                     * the products first and adds them as a tree, spilling */
                    __asm__("" : "+x"(L0), "+x"(L1), "+x"(H0), "+x"(H1));
                    if (TT > 2) __asm__("" : "+x"(L2), "+x"(H2));
                    if (TT > 3) __asm__("" : "+x"(L3), "+x"(H3));
                }
                __m256i src = c < 2 ? sc_lo : sc_hi, sp = _mm256_add_epi8(spread0, _mm256_set1_epi8((char)(8 * x + 2 * c % 4)));
                __m256i sl = _mm256_shuffle_epi8(src, sp), sh = _mm256_shuffle_epi8(src, _mm256_add_epi8(sp, _mm256_set1_epi8(1)));
                K8Q_EACH(K8Q_SCALE);
            }
        __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk)),
               dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16)));
        K8_END(*xb0, A[0], A[4], sum[0]);
        K8_END(*xb1, A[1], A[5], sum[1]);
        if (TT > 2) K8_END(*xb2, A[2], A[6], sum[2]);
        if (TT > 3) K8_END(*xb3, A[3], A[7], sum[3]);
    }
    for (int i = 0; i < TT; i++) rows8_store(job->out + (size_t)(t + i) * N, g, sum[i], n0, n1);
}
static AVX2_FN void k8_tile2(const MatmulJob *j, int g, int t, int n0, int n1) { k8_tiles(j, g, t, 2, n0, n1); }
static AVX2_FN void k8_tile3(const MatmulJob *j, int g, int t, int n0, int n1) { k8_tiles(j, g, t, 3, n0, n1); }
static AVX2_FN void k8_tile4(const MatmulJob *j, int g, int t, int n0, int n1) { k8_tiles(j, g, t, 4, n0, n1); }

/* Q6_K in eights (formats.h): one super-block (at blk) of rows 8g .. 8g+7
 * by one token (its Q8_K block xb), sum brought up to date. Per load x of
 * four rows' bytes 8q .. 8q+7 of ql,
 * ql + 32 and qh (h half of the super-block), the four 6-bit values of each
 * byte position (values 128h + 32i + 8q + e, i < 4: the low nibbles of ql
 * and ql + 32, then their high ones, with bits 2i, 2i + 1 of qh above) are
 * built in four registers (13 instructions), each against the token's eight
 * values broadcast, two values i at a time so that both loads x (rows 0-3
 * and 4-7 of the same byte positions) take the same broadcasts and the same
 * scales' broadcast. Two loads q of a 16-value sub-block add in int16 (a lane
 * at most 2 * 2 * 63 * 128 = 32256), then one vpmaddwd by the rows' signed
 * scales (a byte shuffle of the sub-block's eight scales into the high byte
 * of each row's int16 lanes, shifted down with their sign). The offset of 32
 * comes off once: isum = sum_j sc[j] sum q x - 32 sum_j sc[j] bsums[j], the
 * second sum for all eight rows in eight vpmaddwd of a scale pair by a bsums
 * pair; exact, so the generic path's integers, and its float step. */
/* With ahead, the K6_LINES lines from there asked for two at a time through
 * the super-block's loads, as k8_sb1 does.
 *
 * Written as macros with the value pair IP a constant, not as loops over
 * ip, qq and x: GCC 12 kept the ip loop rolled and branched on it inside
 * (which pair of values, which sums), about 1.6 instructions a cycle; the
 * body below has no branch but the loops over h and qp (notes/formats.md,
 * "Q6_K in eights"). */
enum { K6_LINES = (8 * sizeof(BlockQ6_K) + 63) / 64 };   /* a Q6_K super-block of eight rows: 1680 bytes */
/* values i = 2 IP (VA, from ql's nibbles) and 2 IP + 1 (VB, ql + 32's) of
 * loads A (ql), B (ql + 32), C (qh), bits 2i, 2i + 1 of qh above */
#define K6_VALUES(IP, A, B, C, VA, VB)                                                                          \
    do {                                                                                                        \
        if ((IP) == 0) {                                                                                        \
            VA = _mm256_or_si256(_mm256_and_si256(A, m4), _mm256_and_si256(_mm256_slli_epi16(C, 4), m30));     \
            VB = _mm256_or_si256(_mm256_and_si256(B, m4), _mm256_and_si256(_mm256_slli_epi16(C, 2), m30));     \
        } else {                                                                                                \
            VA = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(A, 4), m4), _mm256_and_si256(C, m30));     \
            VB = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(B, 4), m4),                                \
                                 _mm256_and_si256(_mm256_srli_epi16(C, 2), m30));                               \
        }                                                                                                       \
    } while (0)
/* load x = XX of load q's bytes: its values of pair IP against the
 * broadcasts b0_, b1_ into the int16 sums SA, SB */
#define K6_LOAD(q, XX, IP, SA, SB)                                                                              \
    do {                                                                                                        \
        const uint8_t *p_ = blk + 144 + (size_t)(((h * 4 + (q)) * 2 + (XX)) * 3) * 32;                          \
        __m256i A_ = _mm256_loadu_si256((const __m256i *)p_), B_ = _mm256_loadu_si256((const __m256i *)(p_ + 32)), \
                C_ = _mm256_loadu_si256((const __m256i *)(p_ + 64)), va_, vb_;                                  \
        K6_VALUES(IP, A_, B_, C_, va_, vb_);                                                                    \
        SA = _mm256_add_epi16(SA, _mm256_maddubs_epi16(va_, b0_));                                              \
        SB = _mm256_add_epi16(SB, _mm256_maddubs_epi16(vb_, b1_));                                              \
    } while (0)
/* load q = 2 qp + QQ, both loads x, pair IP; two lines asked for (the last
 * pairs ask again for the last two lines, a prefetch instead of a branch) */
#define K6_QQ(IP, QQ)                                                                                           \
    do {                                                                                                        \
        const int8_t *xp_ = xq + 128 * h + 8 * (2 * qp + (QQ)) + 64 * (IP);                                     \
        __m256i b0_ = bcast8_here(xp_), b1_ = bcast8_here(xp_ + 32);                                            \
        K6_LOAD(2 * qp + (QQ), 0, IP, s0, s1);                                                                  \
        K6_LOAD(2 * qp + (QQ), 1, IP, s2, s3);                                                                  \
        __asm__("" : "+x"(s0), "+x"(s1), "+x"(s2), "+x"(s3));                                                   \
        int l_ = 2 * (((h * 2 + qp) * 2 + (IP)) * 2 + (QQ));                                                    \
        l_ = l_ < K6_LINES - 1 ? l_ : K6_LINES - 2;                                                             \
        _mm_prefetch((const char *)(pf + 64 * l_), _MM_HINT_T0);                                                \
        _mm_prefetch((const char *)(pf + 64 * (l_ + 1)), _MM_HINT_T0);                                          \
    } while (0)
/* the scale byte of each row (a shuffle by SP) into the high byte of its
 * int16 lanes, shifted down with its sign */
#define K6_SCALE(C, SP) _mm256_srai_epi16(_mm256_shuffle_epi8(C, SP), 8)
/* pair IP of loads q = 2 qp, 2 qp + 1 (sub-blocks 8h + 2i + qp), times
 * their scales into acc0 (x = 0) and acc1 (x = 1) */
#define K6_PAIR(IP)                                                                                             \
    do {                                                                                                        \
        __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;                                        \
        K6_QQ(IP, 0);                                                                                           \
        K6_QQ(IP, 1);                                                                                           \
        __m256i c0 = bcast8_here((const int8_t *)blk + 16 + 8 * (8 * h + 4 * (IP) + qp)),                       \
                c1 = bcast8_here((const int8_t *)blk + 16 + 8 * (8 * h + 4 * (IP) + 2 + qp));                   \
        acc0 = _mm256_add_epi32(acc0, _mm256_add_epi32(_mm256_madd_epi16(s0, K6_SCALE(c0, spread)),             \
                                                       _mm256_madd_epi16(s1, K6_SCALE(c1, spread))));           \
        acc1 = _mm256_add_epi32(acc1, _mm256_add_epi32(_mm256_madd_epi16(s2, K6_SCALE(c0, sp1)),                \
                                                       _mm256_madd_epi16(s3, K6_SCALE(c1, sp1))));              \
    } while (0)
AVX2_INLINE __m256 k6_sb1(const uint8_t *blk, const BlockQ8_K *xb, __m256 sum, const uint8_t *ahead) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    /* scale byte r of a sub-block's eight (broadcast) into the high byte of
     * the int16 lanes of row r: load x = 0 has rows 0, 1 | 4, 5; x = 1 rows
     * 2, 3 | 6, 7 (add 2) */
    const __m256i spread = _mm256_setr_epi8(-128, 0, -128, 0, -128, 0, -128, 0, -128, 1, -128, 1, -128, 1, -128, 1,
                                            -128, 4, -128, 4, -128, 4, -128, 4, -128, 5, -128, 5, -128, 5, -128, 5);
    const __m256i sp1 = _mm256_add_epi8(spread, _mm256_set1_epi8(2));
    const int8_t *xq = xb->qs;
    const uint8_t *pf = ahead ? ahead : blk;   /* without ahead, lines of the block itself: no branch */
    __m256i acc0 = _mm256_setzero_si256(), acc1 = acc0;   /* load x = 0, 1 */
    for (int h = 0; h < 2; h++)
        for (int qp = 0; qp < 2; qp++) {
            K6_PAIR(0);
            K6_PAIR(1);
        }
    /* sum_j sc[j] bsums[j] of rows 0 .. 7: scales j, j + 1 interleaved
     * a row at a time against bsums j, j + 1 */
    __m256i off = _mm256_setzero_si256();
    for (int jp = 0; jp < 8; jp++) {
        __m128i s16 = _mm_loadu_si128((const __m128i *)(blk + 16 + 16 * jp));
        __m256i sc = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s16, _mm_srli_si128(s16, 8)));
        int32_t pair;
        memcpy(&pair, xb->bsums + 2 * jp, 4);
        off = _mm256_add_epi32(off, _mm256_madd_epi16(sc, _mm256_set1_epi32(pair)));
    }
    __m256i isum = _mm256_sub_epi32(_mm256_hadd_epi32(acc0, acc1), _mm256_slli_epi32(off, 5));   /* rows 0 .. 7 */
    /* qk_dot_int_of's float step, in its order (Q6_K: dmin and msum 0) */
    __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));
    return qk_float_step(sum, d, _mm256_setzero_ps(), _mm256_set1_ps(xb->d), isum, _mm256_setzero_si256());
}
#undef K6_PAIR
#undef K6_SCALE
#undef K6_QQ
#undef K6_LOAD
#undef K6_VALUES

/* Groups g[0 .. ng - 1] (ng <= 4) of any format in eights by token t, a
 * block (or super-block) of each in turn: ng streams, each asked for
 * STREAM_AHEAD_BYTES ahead if ask (a block's lines as the block goes);
 * rows in [n0, n1) written. */
AVX2_INLINE void decode_groups(const MatmulJob *job, DType type, const int *g, int ng, int ask, int t, int n0, int n1) {
    int K = job->W->K, nb = K / dtype_block(type), kq = type == DT_Q4_K || type == DT_Q6_K;
    size_t bb = rows8_block_bytes(type), group_bytes = (size_t)nb * bb;
    const BlockQ8_K *xk = kq ? (const BlockQ8_K *)(job->act + (size_t)t * small_act_stride(type, K)) : NULL;
    ActRow x8 = kq ? (ActRow){0} : act_row(job->act, K, t);   /* the 32-value formats' layout only */
    const uint8_t *w[4];
    __m256 s[4];
    for (int i = 0; i < ng; i++) w[i] = job->W->rows8 + (size_t)g[i] * group_bytes, s[i] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++)
        for (int i = 0; i < ng; i++) {
            const uint8_t *blk = w[i] + (size_t)b * bb, *ahead = ask ? blk + STREAM_AHEAD_BYTES : NULL;
            s[i] = type == DT_Q4_K   ? k8_sb1(blk, xk + b, s[i], ahead)
                   : type == DT_Q6_K ? k6_sb1(blk, xk + b, s[i], ahead)
                                     : x8_block1(type, blk, x8, b, s[i], ahead);
        }
    float *o = job->out + (size_t)t * job->W->N;
    for (int i = 0; i < ng; i++) rows8_store(o, g[i], s[i], n0, n1);
}
/* Groups ga and gb (gb < 0: ga alone), each asked for ahead. */
#define DECODE_PAIR_OF(name, TYPE)                                                        \
    static AVX2_FN void name(const MatmulJob *j, int ga, int gb, int t, int n0, int n1) { \
        int g[2] = {ga, gb};                                                              \
        if (gb < 0) decode_groups(j, TYPE, g, 1, 1, t, n0, n1);                           \
        else decode_groups(j, TYPE, g, 2, 1, t, n0, n1);                                  \
    }
DECODE_PAIR_OF(q4_0_decode, DT_Q4_0)
DECODE_PAIR_OF(q8_0_decode, DT_Q8_0)
DECODE_PAIR_OF(k8_decode, DT_Q4_K)
DECODE_PAIR_OF(k6_decode, DT_Q6_K)

/* Four groups of token 0: Q4_0's asked for ahead, Q8_0's not. */
static AVX2_FN void q4_0_decode4(const MatmulJob *j, const int *g, int n0, int n1) {
    decode_groups(j, DT_Q4_0, g, 4, 1, 0, n0, n1);
}
static AVX2_FN void q8_0_decode4(const MatmulJob *j, const int *g, int n0, int n1) {
    decode_groups(j, DT_Q8_0, g, 4, 0, 0, n0, n1);
}

/* One token, rows [n0, n1) of a matrix in eights: Q8_0 and Q4_0 in four
 * streams, the groups a quarter of the range apart (Q4_0's asked for ahead,
 * Q8_0's not), then Q4_K, Q6_K and what is left in two, half the range
 * apart (notes/formats.md, "Four streams"). */
static void rows8_decode(const MatmulJob *job, int n0, int n1) {
    DType type = job->W->type;
    void (*dec)(const MatmulJob *, int, int, int, int, int) = type == DT_Q4_0   ? q4_0_decode
                                                               : type == DT_Q8_0 ? q8_0_decode
                                                               : type == DT_Q4_K ? k8_decode
                                                                                 : k6_decode;
    int g0 = n0 / 8, g1 = (n1 + 7) / 8, h = (g1 - g0) / 2;
    if (type == DT_Q8_0 || type == DT_Q4_0) {
        int q = (g1 - g0) / 4;
        for (int i = 0; i < q; i++) {
            int g[4] = {g0 + i, g0 + q + i, g0 + 2 * q + i, g0 + 3 * q + i};
            if (type == DT_Q8_0) q8_0_decode4(job, g, n0, n1);
            else q4_0_decode4(job, g, n0, n1);
        }
        g0 += 4 * q, h = (g1 - g0) / 2;
    }
    for (int i = 0; i < h; i++) dec(job, g0 + i, g0 + h + i, 0, n0, n1);
    if ((g1 - g0) % 2) dec(job, g1 - 1, -1, 0, n0, n1);
}

/* Rows [n0, n1), any range: over a chunk of groups that stays in L2, four
 * tokens at a time (Q6_K one). */
static void rows8_k_avx2(const MatmulJob *job, int n0, int n1) {
    int T = job->T, g0 = n0 / 8, g1 = (n1 + 7) / 8, q6 = job->W->type == DT_Q6_K;
    if (T == 1) {
        rows8_decode(job, n0, n1);
        return;
    }
    size_t group_bytes = (size_t)(job->W->K / QK_K) * rows8_block_bytes(job->W->type);
    int chunk = (int)(AVX2_CHUNK_BYTES / group_bytes);
    if (chunk < 1) chunk = 1;
    for (int c0 = g0; c0 < g1; c0 += chunk) {
        int c1 = c0 + chunk < g1 ? c0 + chunk : g1;
        for (int t = 0; t < T; t += q6 ? 1 : T - t < 4 ? T - t : 4)
            for (int g = c0; g < c1; g++) {
                if (q6) k6_decode(job, g, -1, t, n0, n1);
                else if (T - t > 3) k8_tile4(job, g, t, n0, n1);
                else if (T - t == 3) k8_tile3(job, g, t, n0, n1);
                else if (T - t == 2) k8_tile2(job, g, t, n0, n1);
                else k8_decode(job, g, -1, t, n0, n1);   /* the last token of a batch */
            }
    }
}

/* Rows [n0, n1): over a chunk of rows that stays in L2, tokens QK_TT_AVX2
 * at a time, row by row. Per group of tokens their scales are first copied
 * side by side (dxt[8 sb + t], zeros past the last token), so that the tile
 * reads eight with one load; past QK_DXT_BLOCKS super-blocks the tile
 * gathers them itself. */
enum { QK_DXT_BLOCKS = 512 };   /* K up to 131072: 16 KiB on the stack */

/* Q6_K in eights for a batch: the groups g0 .. g1-1 copied back into rows
 * (formats.h's layout read backwards, eight bytes at a time) at buf. The
 * row tiles then unpack each super-block once for eight tokens, where
 * k6_decode unpacks it for one: at 16 and 64 tokens that alone ran at
 * 0.58 of the row tiles' speed, with the copy back 0.8-0.85 at 16 and
 * 0.94-1.0 at 64 (the copy, about 57 instructions a row and super-block,
 * paid once per eight tokens; asking for the next chunk's groups while a
 * chunk computes made no difference that survived the noise). */
enum { K6_BACK_BYTES = 64 * 1024 };
static AVX2_FN void k6_rows_back(uint8_t *buf, const Mat *W, int g0, int g1) {
    int nsb = W->K / QK_K;
    size_t bb = rows8_block_bytes(DT_Q6_K), rb = dtype_row_bytes(DT_Q6_K, W->K);
    for (int g = g0; g < g1; g++)
        for (int sb = 0; sb < nsb; sb++) {
            const uint8_t *blk = W->rows8 + ((size_t)g * nsb + sb) * bb;
            uint8_t *o0 = buf + (size_t)(g - g0) * 8 * rb + (size_t)sb * sizeof(BlockQ6_K);
            for (int half = 0; half < 2; half++) {   /* scales [j][i] to [i][j]: two 8 x 8 transposes */
                const uint8_t *sc = blk + 16 + 64 * half;
                __m128i r[8], c[4];
                for (int j = 0; j < 8; j++) r[j] = _mm_loadl_epi64((const __m128i *)(sc + 8 * j));
                __m128i a0 = _mm_unpacklo_epi8(r[0], r[1]), a1 = _mm_unpacklo_epi8(r[2], r[3]),
                        a2 = _mm_unpacklo_epi8(r[4], r[5]), a3 = _mm_unpacklo_epi8(r[6], r[7]);
                __m128i b0 = _mm_unpacklo_epi16(a0, a1), b1 = _mm_unpackhi_epi16(a0, a1),
                        b2 = _mm_unpacklo_epi16(a2, a3), b3 = _mm_unpackhi_epi16(a2, a3);
                c[0] = _mm_unpacklo_epi32(b0, b2), c[1] = _mm_unpackhi_epi32(b0, b2);   /* rows 0, 1 | 2, 3 */
                c[2] = _mm_unpacklo_epi32(b1, b3), c[3] = _mm_unpackhi_epi32(b1, b3);   /* rows 4, 5 | 6, 7 */
                for (int i = 0; i < 8; i++) {
                    uint64_t v = i % 2 ? (uint64_t)_mm_extract_epi64(c[i / 2], 1) : (uint64_t)_mm_cvtsi128_si64(c[i / 2]);
                    memcpy(o0 + (size_t)i * rb + offsetof(BlockQ6_K, scales) + 8 * half, &v, 8);
                }
            }
            for (int i = 0; i < 8; i++) {
                uint8_t *o = o0 + (size_t)i * rb;
                int x = i / 2 % 2, y = i / 4 * 2 + i % 2;   /* rows8_row(x, y) == i */
                memcpy(o + offsetof(BlockQ6_K, d), blk + 2 * i, 2);
                for (int h = 0; h < 2; h++)
                    for (int q = 0; q < 4; q++) {
                        const uint8_t *p = blk + 144 + (size_t)(((h * 4 + q) * 2 + x) * 3) * 32 + (size_t)y * 8;
                        memcpy(o + offsetof(BlockQ6_K, ql) + 64 * h + 8 * q, p, 8);
                        memcpy(o + offsetof(BlockQ6_K, ql) + 64 * h + 32 + 8 * q, p + 32, 8);
                        memcpy(o + offsetof(BlockQ6_K, qh) + 32 * h + 8 * q, p + 64, 8);
                    }
            }
        }
}

void qk_rows_avx2(const MatmulJob *job, int part, int n0, int n1) {
    int K = job->W->K, nsb = K / QK_K, T = job->T;
    size_t row_bytes = dtype_row_bytes(job->W->type, K), stride = small_act_stride(job->W->type, K);
    if (job->W->rows8 && (job->W->type == DT_Q4_K || T == 1 || 8 * row_bytes > K6_BACK_BYTES)) {
        rows8_k_avx2(job, n0, n1);   /* in eights */
        return;
    }
    void (*tile)(const MatmulJob *, const uint8_t *, int, int, int, const float *) =
        job->W->type == DT_Q4_K ? q4_k_tile : q6_k_tile;
    int back = job->W->rows8 != NULL;   /* Q6_K in eights, a batch: whole groups copied back a chunk at a time */
    int chunk = back ? (int)(K6_BACK_BYTES / row_bytes) / 8 * 8 : (int)(AVX2_CHUNK_BYTES / row_bytes);
    if (chunk < 1) chunk = 1;
    float dxt[QK_TT_AVX2 * QK_DXT_BLOCKS];
    uint8_t buf[K6_BACK_BYTES];
    const float *dx = nsb <= QK_DXT_BLOCKS ? dxt : NULL;
    for (int c0 = back ? n0 / 8 * 8 : n0; c0 < n1; c0 += chunk) {
        int c1 = c0 + chunk < n1 ? c0 + chunk : n1;
        if (back) k6_rows_back(buf, job->W, c0 / 8, (c1 + 7) / 8);
        for (int t = 0; t < T; t += QK_TT_AVX2) {
            int tt = T - t < QK_TT_AVX2 ? T - t : QK_TT_AVX2;
            if (dx)
                for (int i = 0; i < QK_TT_AVX2; i++) {
                    const BlockQ8_K *x = i < tt ? (const BlockQ8_K *)(job->act + (size_t)(t + i) * stride) : NULL;
                    for (int sb = 0; sb < nsb; sb++) dxt[QK_TT_AVX2 * sb + i] = x ? x[sb].d : 0.0f;
                }
            for (int n = c0 > n0 ? c0 : n0; n < c1; n++)
                tile(job, back ? buf + (size_t)(n - c0) * row_bytes : row_ptr(job->W, n), n, t, tt, dx);
        }
    }
}
#else
typedef int tiles_avx2_is_empty_here;   /* ISO C wants something in every file */
#endif /* OPS_X86 */
