/* ops_quant_avx512.c - AVX-512 (VNNI) kernels for the 4, 5 and 6-bit block
 * formats. ops_quant.c holds the layouts and the plain loops that compute the
 * same integer sums; this file only computes them quickly.
 *
 * The weights stay packed in memory and are unpacked in registers: nibbles
 * split by a shift and a mask into one byte each (0..15), a fifth or sixth
 * bit ORed in from its own bit plane. Those bytes are unsigned, which is
 * what vpdpbusd wants on its unsigned side; the activations (int8, already
 * rounded by matmul_isa) are the signed side. Each vpdpbusd adds 64 products
 * into 16 int32 lanes, four per lane.
 *
 * Q4_0, Q4_1, Q5_0, Q5_1 (blocks of 32, Q8_0 activations): two blocks per
 * register, as the Q8_0 kernel of ops_avx512.c does: lanes 0-7 hold block b,
 * lanes 8-15 block b + 1. The offsets -8 (Q4_0) and -16 (Q5_0) are paid by
 * starting the lanes at -8 or -16 times the sum of their four activations,
 * which the Q8_0 layout already carries as corr = -128 * sum (a shift right
 * by 4 or 3 is exact). For Q4_1 and Q5_1 the offset m is a float: m d_x
 * (sum of the activations) is added in float, from the same corr.
 *
 * Q4_K, Q5_K, Q6_K (super-blocks of 256, Q8_K activations): a super-block is
 * four chunks of 64 values, one vpdpbusd each. Q4_K's and Q5_K's chunk c is
 * sub-blocks 2c (lanes 0-7) and 2c + 1 (lanes 8-15); Q6_K's chunk is four
 * groups of 16 (lanes 4g .. 4g+3). The sub-block scales are small integers, so
 * each lane's sum is multiplied by its scale in int32 (vpmulld) and summed
 * over the super-block exactly; floats enter once per super-block: d_w d_x.
 * The mins of Q4_K and Q5_K (and Q6_K's -32) need only the sums of 16
 * activations, which Q8_K carries (bsums): one more vpmulld per super-block.
 *
 * Tiles are R = 4 (or 1) rows by up to 4 tokens for blocks of 32 (as the Q8_0
 * kernel), up to 2 for super-blocks: those hold an int32 and a float
 * accumulator per (row, token), so 4 x 4 would spill. One token (decoding)
 * goes one row at a time, a single stream through memory (ops_avx512.c,
 * "reading weights from memory"). */
#include "ops_avx512.h"

#ifdef OPS_X86
#include <immintrin.h>
#include <string.h>

#define AVX512_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")))
#define AVX512_INLINE static inline __attribute__((always_inline)) AVX512_FN

/* Rows of one pass over the tokens, as in ops_avx512.c: small enough to stay
 * in L2 while each pair of tokens visits them. */
enum { SQ_CHUNK_BYTES = 256 * 1024 };

/* Prefetching, as ops_avx512.c explains: one row and one token stream, and
 * ask for the block STREAM_AHEAD_ROWS rows on into L1; wider tiles ask for
 * the next tile's rows into L2. Every line of the block's bytes is asked
 * for (the 32-value blocks are smaller than a line: asking at each block
 * start covers every line). */
enum { STREAM_AHEAD_ROWS = 4 };

AVX512_INLINE void prefetch_block(const uint8_t *blk, size_t bytes, int R, int TT, size_t stride) {
    for (size_t at = 0; at < bytes; at += 64) {
        if (R == 1 && TT == 1) _mm_prefetch((const char *)(blk + STREAM_AHEAD_ROWS * stride + at), _MM_HINT_T0);
        else _mm_prefetch((const char *)(blk + (size_t)R * stride + at), _MM_HINT_T1);
    }
}

AVX512_INLINE __m512i nibbles_lo_hi(__m256i v) {   /* 32 bytes -> [low nibbles, high nibbles] */
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* --- blocks of 32 */

/* Where a 32-value block keeps its pieces. */
typedef struct {
    int qs, qh, m;   /* byte offsets; -1: absent */
    int shift;       /* corr >> shift is the offset's start value; 0: no offset */
} Q32Layout;

AVX512_INLINE Q32Layout q32_layout(DType type) {
    switch (type) {
    case DT_Q4_0: return (Q32Layout){2, -1, -1, 4};
    case DT_Q4_1: return (Q32Layout){4, -1, 2, 0};
    case DT_Q5_0: return (Q32Layout){6, 2, -1, 3};
    default: return (Q32Layout){8, 4, 2, 0};   /* Q5_1 */
    }
}

/* Two fp16 values, (a, b), spread: a in lanes 0-7, b in lanes 8-15. */
AVX512_INLINE __m512 spread_pair_h(uint16_t a, uint16_t b) {
    const __m512i pick = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    __m128 s = _mm_cvtph_ps(_mm_cvtsi32_si128((int)(a | (uint32_t)b << 16)));
    return _mm512_permutexvar_ps(pick, _mm512_castps128_ps512(s));
}

/* Blocks b and b + 1 of one row (b alone when two == 0) as 64 unsigned bytes,
 * their scales spread over the lanes, and their offsets m (times -1/128, to
 * be multiplied by corr) likewise. */
AVX512_INLINE void q32_weights(const uint8_t *row, size_t bytes, int b, int two, Q32Layout L,
                               __m512i *wq, __m512 *wd, __m512 *wm) {
    const uint8_t *b0 = row + (size_t)b * bytes, *b1 = b0 + bytes;
    __m128i q0 = _mm_loadu_si128((const __m128i *)(b0 + L.qs));
    __m128i q1 = two ? _mm_loadu_si128((const __m128i *)(b1 + L.qs)) : _mm_setzero_si128();
    /* [lo0 lo1 hi0 hi1] in 128-bit lanes, reordered to [lo0 hi0 lo1 hi1]:
     * values 0..31 of block b, then of block b + 1 */
    __m512i w = nibbles_lo_hi(_mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1));
    w = _mm512_shuffle_i64x2(w, w, _MM_SHUFFLE(3, 1, 2, 0));
    if (L.qh >= 0) {   /* bit i of qh: the fifth bit (16) of value i */
        uint32_t h0, h1 = 0;
        memcpy(&h0, b0 + L.qh, 4);
        if (two) memcpy(&h1, b1 + L.qh, 4);
        w = _mm512_or_si512(w, _mm512_maskz_mov_epi8((__mmask64)h0 | (__mmask64)h1 << 32,
                                                     _mm512_set1_epi8(16)));
    }
    uint16_t d0, d1 = 0, m0 = 0, m1 = 0;
    memcpy(&d0, b0, 2);
    if (two) memcpy(&d1, b1, 2);
    *wq = w;
    *wd = spread_pair_h(d0, d1);
    *wm = _mm512_setzero_ps();
    if (L.m >= 0) {
        memcpy(&m0, b0 + L.m, 2);
        if (two) memcpy(&m1, b1 + L.m, 2);
        *wm = _mm512_mul_ps(spread_pair_h(m0, m1), _mm512_set1_ps(-1.0f / 128.0f));
    }
}

/* One row and one token, four blocks per step: what decoding runs. Each
 * step computes, lane for lane, what two steps of q32_tile compute, with
 * fewer instructions per block, so that one core keeps up with memory:
 *   - the four blocks' 16-byte quants go into one register and are split
 *     into nibbles once, then one two-source permute (vpermt2q) per pair
 *     puts them in q32_weights' order [lo0 hi0 lo1 hi1];
 *   - the four weight scales are widened together, multiplied by the four
 *     activation scales in one 4-lane product, and spread over the lanes of
 *     each pair (a product then a spread is the same float as a spread then
 *     a product).
 * Pair 0 of each step goes into the even chain, pair 1 into the odd one
 * (q32_tile), with the same values in the same order as q32_chain adds
 * them, so every tile shape still gives the same bits (tests/test_ops.c
 * checks T = 1 against wider tiles). Measured on one Zen 5 core (tools/kbench
 * --type Q4_0 --shape 5632x2048 --threads 1), see notes/formats.md. */
AVX512_INLINE __m512 spread_quad(__m128 v, int pair) {   /* v[2 pair] in lanes 0-7, v[2 pair + 1] in 8-15 */
    const __m512i pick0 = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i pick1 = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2);
    return _mm512_permutexvar_ps(pair ? pick1 : pick0, _mm512_castps128_ps512(v));
}

AVX512_INLINE __m128 quad_h(const uint8_t *p, size_t bytes, int off) {   /* 4 fp16, one per block */
    uint16_t h[4];
    for (int i = 0; i < 4; i++) memcpy(&h[i], p + (size_t)i * bytes + off, 2);
    uint64_t v = h[0] | (uint64_t)h[1] << 16 | (uint64_t)h[2] << 32 | (uint64_t)h[3] << 48;
    return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)v));
}

AVX512_INLINE void q32_row1_quads(const MatmulJob *job, int n, int t, DType type, int nb4, __m512 *even,
                                   __m512 *odd) {
    Q32Layout L = q32_layout(type);
    int K = job->W->K;
    size_t bytes = dtype_row_bytes(type, QK4), stride = dtype_row_bytes(type, K);
    const uint8_t *w = row_ptr(job->W, n);
    ActRow xr = act_row(job->act, K, t);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i idx0 = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);     /* lo0 hi0 lo1 hi1 */
    const __m512i idx1 = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);   /* lo2 hi2 lo3 hi3 */
    __m512 acc[2] = {*even, *odd};
    for (int b = 0; b < nb4; b += 4) {
        const uint8_t *p = w + (size_t)b * bytes;
        prefetch_block(p, 4 * bytes, 1, 1, stride);
        __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(p + L.qs)));
        z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(p + bytes + L.qs)), 1);
        z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(p + 2 * bytes + L.qs)), 2);
        z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(p + 3 * bytes + L.qs)), 3);
        __m512i lo = _mm512_and_si512(z, m4), hi = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);
        __m512i wq[2] = {_mm512_permutex2var_epi64(lo, idx0, hi), _mm512_permutex2var_epi64(lo, idx1, hi)};
        if (L.qh >= 0) {   /* bit i of qh: the fifth bit (16) of value i */
            for (int j = 0; j < 2; j++) {
                uint32_t h0, h1;
                memcpy(&h0, p + (size_t)(2 * j) * bytes + L.qh, 4);
                memcpy(&h1, p + (size_t)(2 * j + 1) * bytes + L.qh, 4);
                wq[j] = _mm512_or_si512(wq[j], _mm512_maskz_mov_epi8((__mmask64)h0 | (__mmask64)h1 << 32,
                                                                     _mm512_set1_epi8(16)));
            }
        }
        __m128 xd = _mm_loadu_ps(xr.d + b);
        __m128 dd = _mm_mul_ps(quad_h(p, bytes, 0), xd), md = _mm_setzero_ps();
        if (L.m >= 0) md = _mm_mul_ps(_mm_mul_ps(quad_h(p, bytes, L.m), _mm_set1_ps(-1.0f / 128.0f)), xd);
        for (int j = 0; j < 2; j++) {
            int bj = b + 2 * j;
            __m512i xq = _mm512_loadu_si512(xr.qs + bj * QK4), corr = _mm512_loadu_si512(xr.corr + bj * 8);
            __m512i start = L.shift == 4 ? _mm512_srai_epi32(corr, 4)
                            : L.shift == 3 ? _mm512_srai_epi32(corr, 3) : _mm512_setzero_si512();
            __m512i isum = _mm512_dpbusd_epi32(start, wq[j], xq);   /* exact */
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), spread_quad(dd, j), acc[j]);
            if (L.m >= 0) acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(corr), spread_quad(md, j), acc[j]);
        }
    }
    *even = acc[0], *odd = acc[1];
}

/* The pairs b, b + 4, b + 8, ... (from block b on) of rows n .. n+R-1 and
 * tokens t0 .. t0+TT-1, each added into acc[r][t]: one of q32_tile's two
 * chains. */
AVX512_INLINE void q32_chain(__m512 acc[4][4], const MatmulJob *job, int n, int t0, int R, int TT,
                             DType type, int b) {
    Q32Layout L = q32_layout(type);
    int K = job->W->K, nb = K / QK4;
    size_t bytes = dtype_row_bytes(type, QK4), stride = dtype_row_bytes(type, K);
    const uint8_t *w = row_ptr(job->W, n);
    ActRow xr[4];
    for (int t = 0; t < TT; t++) xr[t] = act_row(job->act, K, t0 + t);
    for (; b < nb; b += 4) {
        int two = b + 1 < nb;
        __m512i wq[4];
        __m512 wd[4], wm[4];
        for (int r = 0; r < R; r++) {
            prefetch_block(w + (size_t)r * stride + (size_t)b * bytes, 2 * bytes, R, TT, stride);
            q32_weights(w + (size_t)r * stride, bytes, b, two, L, &wq[r], &wd[r], &wm[r]);
        }
        for (int t = 0; t < TT; t++) {
            __m512i xq, corr;
            __m512 xd;
            if (two) {
                xq = _mm512_loadu_si512(xr[t].qs + b * QK4);
                corr = _mm512_loadu_si512(xr[t].corr + b * 8);
                xd = _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                                           _mm512_castps128_ps512(_mm_castsi128_ps(
                                               _mm_loadl_epi64((const __m128i *)(xr[t].d + b)))));
            } else {
                xq = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(xr[t].qs + b * QK4)));
                corr = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(xr[t].corr + b * 8)));
                xd = _mm512_maskz_mov_ps(0x00ff, _mm512_set1_ps(xr[t].d[b]));
            }
            __m512i start = L.shift == 4 ? _mm512_srai_epi32(corr, 4)
                            : L.shift == 3 ? _mm512_srai_epi32(corr, 3) : _mm512_setzero_si512();
            __m512 fcorr = _mm512_cvtepi32_ps(corr);
            for (int r = 0; r < R; r++) {
                __m512i isum = _mm512_dpbusd_epi32(start, wq[r], xq);   /* exact */
                acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(wd[r], xd), acc[r][t]);
                if (L.m >= 0)   /* + m d_x (sum of the block's activations) */
                    acc[r][t] = _mm512_fmadd_ps(fcorr, _mm512_mul_ps(wm[r], xd), acc[r][t]);
            }
        }
    }
}

/* out[t][n + r] for r < R, t0 <= t < t0 + TT.
 *
 * Two chains of float sums per (row, token): pairs of blocks 0-1, 4-5, 8-9,
 * ... go into one accumulator, pairs 2-3, 6-7, ... into another, and the two
 * are added at the end. With a single chain one row and one token (decoding)
 * waited on its own FMAs, two per four blocks, about 8 cycles for 72 bytes
 * of Q4_0: one Zen 5 core could not go beyond about 28 GB/s even from cache.
 * Wider tiles run the chains one after the other (16 accumulators each);
 * decoding runs them side by side (q32_row1_quads). Either way each chain
 * adds the same values in the same order, so every tile shape gives the same
 * bits. */
AVX512_INLINE void q32_tile(const MatmulJob *job, int n, int t0, int R, int TT, DType type) {
    int N = job->W->N, nb = job->W->K / QK4, b0 = 0;
    __m512 even[4][4], odd[4][4];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++) even[r][t] = odd[r][t] = _mm512_setzero_ps();
    if (R == 1 && TT == 1) {   /* decoding: whole groups of four blocks first */
        b0 = nb / 4 * 4;
        q32_row1_quads(job, n, t0, type, b0, &even[0][0], &odd[0][0]);
    }
    q32_chain(even, job, n, t0, R, TT, type, b0);
    q32_chain(odd, job, n, t0, R, TT, type, b0 + 2);
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++)
            job->out[(size_t)(t0 + t) * N + n + r] = _mm512_reduce_add_ps(_mm512_add_ps(even[r][t], odd[r][t]));
}

/* --- super-blocks of 256 */

/* A super-block's scales of one row as int32 lanes: sc (Q4_K, Q5_K: the 8
 * sub-block scales in lanes 0-7; Q6_K: the 16 group scales), mn16 (Q4_K,
 * Q5_K: the min of each group of 16, lane g holding mn[g / 2]), and d, dmin. */
typedef struct {
    __m512i sc, mn16;
    float d, dmin;
} KScales;

AVX512_INLINE KScales k_scales(DType type, const uint8_t *blk) {
    KScales s;
    if (type == DT_Q6_K) {
        const BlockQ6_K *b = (const BlockQ6_K *)blk;
        s.sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b->scales));
        s.mn16 = _mm512_setzero_si512();
        s.d = _cvtsh_ss(b->d), s.dmin = 0.0f;
        return s;
    }
    const BlockQ4_K *b = (const BlockQ4_K *)blk;   /* Q5_K starts the same way */
    /* k_scale_min for all eight at once, four bytes to a 32-bit word: bytes
     * 0-3 hold scales 0-3 (low six bits), 4-7 mins 0-3, 8-11 the low nibbles
     * of scales 4-7 and (high nibbles) mins 4-7, whose top two bits are the
     * top two bits of bytes 0-3 (scales) and 4-7 (mins). */
    uint32_t w[3];
    memcpy(w, b->scales, 12);
    const uint32_t six = 0x3f3f3f3f, four = 0x0f0f0f0f, two = 0x03030303;
    uint32_t sc_lo = w[0] & six, mn_lo = w[1] & six;
    uint32_t sc_hi = (w[2] & four) | ((w[0] >> 6) & two) << 4;
    uint32_t mn_hi = ((w[2] >> 4) & four) | ((w[1] >> 6) & two) << 4;
    __m128i bytes = _mm_set_epi32((int)mn_hi, (int)mn_lo, (int)sc_hi, (int)sc_lo);
    s.sc = _mm512_cvtepu8_epi32(bytes);   /* lanes 0-7 the scales (8-15: the mins, unused) */
    __m512i mn8 = _mm512_cvtepu8_epi32(_mm_srli_si128(bytes, 8));
    const __m512i half = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    s.mn16 = _mm512_permutexvar_epi32(half, mn8);
    s.d = _cvtsh_ss(b->d), s.dmin = _cvtsh_ss(b->dmin);   /* F16C, inline */
    return s;
}

/* The scales of chunk c (values 64c .. 64c+63), one per lane of four values. */
AVX512_INLINE __m512i k_chunk_scales(DType type, __m512i sc, int c) {
    __m512i idx = type == DT_Q6_K
        ? _mm512_add_epi32(_mm512_set1_epi32(4 * c), _mm512_srli_epi32(
              _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 2))
        : _mm512_add_epi32(_mm512_set1_epi32(2 * c),
                           _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0));
    return _mm512_permutexvar_epi32(idx, sc);
}

/* Chunk c of a super-block's values as 64 unsigned bytes, in value order. */
AVX512_INLINE __m512i k_chunk_weights(DType type, const uint8_t *blk, int c) {
    const __m256i m3 = _mm256_set1_epi8(3);
    if (type == DT_Q6_K) {
        const BlockQ6_K *b = (const BlockQ6_K *)blk;
        int h = c / 2;
        __m512i ql = _mm512_loadu_si512(b->ql + 64 * h);
        __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        __m512i low;
        __m256i h0, h1;   /* the high two bits of values 0-31 and 32-63 of the chunk */
        if (c % 2 == 0) {
            low = _mm512_and_si512(ql, _mm512_set1_epi8(0x0f));
            h0 = _mm256_and_si256(qh, m3), h1 = _mm256_and_si256(_mm256_srli_epi16(qh, 2), m3);
        } else {
            low = _mm512_and_si512(_mm512_srli_epi16(ql, 4), _mm512_set1_epi8(0x0f));
            h0 = _mm256_and_si256(_mm256_srli_epi16(qh, 4), m3);
            h1 = _mm256_and_si256(_mm256_srli_epi16(qh, 6), m3);
        }
        __m512i high = _mm512_inserti64x4(_mm512_castsi256_si512(h0), h1, 1);
        return _mm512_or_si512(low, _mm512_slli_epi16(high, 4));
    }
    const uint8_t *qs = type == DT_Q4_K ? ((const BlockQ4_K *)blk)->qs : ((const BlockQ5_K *)blk)->qs;
    __m512i w = nibbles_lo_hi(_mm256_loadu_si256((const __m256i *)(qs + 32 * c)));
    if (type == DT_Q5_K) {   /* bits 2c (values 0-31) and 2c + 1 (32-63) of qh[l] */
        __m256i qh = _mm256_loadu_si256((const __m256i *)((const BlockQ5_K *)blk)->qh);
        __m512i planes = _mm512_inserti64x4(_mm512_castsi256_si512(qh), qh, 1);
        __m512i sel = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi8((char)(1 << (2 * c)))),
                                         _mm256_set1_epi8((char)(1 << (2 * c + 1))), 1);
        w = _mm512_or_si512(w, _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(planes, sel), _mm512_set1_epi8(16)));
    }
    return w;
}

AVX512_INLINE void qk_tile(const MatmulJob *job, int n, int t0, int R, int TT, DType type) {
    int N = job->W->N, K = job->W->K, nb = K / QK_K;
    size_t bytes = dtype_row_bytes(type, QK_K), stride = dtype_row_bytes(type, K);
    size_t xstride = small_act_stride(type, K);
    const uint8_t *w = row_ptr(job->W, n);
    const BlockQ8_K *xr[2];
    for (int t = 0; t < TT; t++) xr[t] = (const BlockQ8_K *)(job->act + (size_t)(t0 + t) * xstride);
    __m512 acc[4][2];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++) acc[r][t] = _mm512_setzero_ps();
    /* A super-block of one row at a time (its scales, its four chunks, its
     * integer sums for each token), folded into the float accumulators
     * before the next row: few registers live, none spilled. */
    for (int b = 0; b < nb; b++) {
        __m512i bs[2];
        float dx[2];
        for (int t = 0; t < TT; t++) {
            bs[t] = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)xr[t][b].bsums));
            dx[t] = xr[t][b].d;
        }
        for (int r = 0; r < R; r++) {
            const uint8_t *blk = w + (size_t)r * stride + (size_t)b * bytes;
            prefetch_block(blk, bytes, R, TT, stride);
            KScales ks = k_scales(type, blk);
            __m512i isum[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
            /* Each lane's p (four products) times its scale with vpmaddwd, a
             * 16-bit multiply, where vpmulld (32 bits) costs two
             * micro-operations on Intel: |p| <= 4 * 63 * 128 < 2^15, so p's
             * upper half is its sign; with the scale's upper half cleared
             * (sc16) the pair product is p sc exactly. */
            __m512i sc16 = _mm512_and_si512(ks.sc, _mm512_set1_epi32(0xffff));
            for (int c = 0; c < 4; c++) {
                __m512i wq = k_chunk_weights(type, blk, c), sc = k_chunk_scales(type, sc16, c);
                for (int t = 0; t < TT; t++) {
                    __m512i xq = _mm512_loadu_si512(xr[t][b].qs + 64 * c);
                    __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq, xq);   /* exact */
                    isum[t] = _mm512_add_epi32(isum[t], _mm512_madd_epi16(p, sc));
                }
            }
            for (int t = 0; t < TT; t++) {
                if (type == DT_Q6_K) {   /* the -32 of every value: -32 sc[g] bsum[g] */
                    __m512i off = _mm512_slli_epi32(_mm512_mullo_epi32(ks.sc, bs[t]), 5);
                    acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(isum[t], off)),
                                                _mm512_set1_ps(ks.d * dx[t]), acc[r][t]);
                } else {                 /* - dmin mn[j] (sum of sub-block j's activations) */
                    __m512i msum = _mm512_mullo_epi32(ks.mn16, bs[t]);
                    acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_set1_ps(ks.d * dx[t]),
                                                acc[r][t]);
                    acc[r][t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_set1_ps(ks.dmin * dx[t]),
                                                 acc[r][t]);
                }
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++) job->out[(size_t)(t0 + t) * N + n + r] = _mm512_reduce_add_ps(acc[r][t]);
}

/* Each tile with its type a constant, so that the unpacking of that format
 * alone is compiled in (and the offset terms of the other kinds drop out). */
AVX512_INLINE void q32_tile_by_type(const MatmulJob *job, int n, int t0, int R, int TT) {
    switch (job->W->type) {
    case DT_Q4_0: q32_tile(job, n, t0, R, TT, DT_Q4_0); break;
    case DT_Q4_1: q32_tile(job, n, t0, R, TT, DT_Q4_1); break;
    case DT_Q5_0: q32_tile(job, n, t0, R, TT, DT_Q5_0); break;
    default: q32_tile(job, n, t0, R, TT, DT_Q5_1); break;
    }
}

AVX512_INLINE void qk_tile_by_type(const MatmulJob *job, int n, int t0, int R, int TT) {
    switch (job->W->type) {
    case DT_Q4_K: qk_tile(job, n, t0, R, TT, DT_Q4_K); break;
    case DT_Q5_K: qk_tile(job, n, t0, R, TT, DT_Q5_K); break;
    default: qk_tile(job, n, t0, R, TT, DT_Q6_K); break;
    }
}

/* The tile shapes, compiled with constant R and TT: for blocks of 32 up to 4
 * tokens (16 float accumulators), for super-blocks up to 2 (an int32 and a
 * float accumulator each). Index [R == 4][TT - 1]. */
typedef void (*SqTileFn)(const MatmulJob *job, int n, int t);
static AVX512_FN void q32_r4t4(const MatmulJob *j, int n, int t) { q32_tile_by_type(j, n, t, 4, 4); }
static AVX512_FN void q32_r4t3(const MatmulJob *j, int n, int t) { q32_tile_by_type(j, n, t, 4, 3); }
static AVX512_FN void q32_r4t2(const MatmulJob *j, int n, int t) { q32_tile_by_type(j, n, t, 4, 2); }
static AVX512_FN void q32_r4t1(const MatmulJob *j, int n, int t) { q32_tile_by_type(j, n, t, 4, 1); }
static AVX512_FN void q32_r1t4(const MatmulJob *j, int n, int t) { q32_tile_by_type(j, n, t, 1, 4); }
static AVX512_FN void q32_r1t3(const MatmulJob *j, int n, int t) { q32_tile_by_type(j, n, t, 1, 3); }
static AVX512_FN void q32_r1t2(const MatmulJob *j, int n, int t) { q32_tile_by_type(j, n, t, 1, 2); }
static AVX512_FN void q32_r1t1(const MatmulJob *j, int n, int t) { q32_tile_by_type(j, n, t, 1, 1); }
static AVX512_FN void qk_r4t2(const MatmulJob *j, int n, int t) { qk_tile_by_type(j, n, t, 4, 2); }
static AVX512_FN void qk_r4t1(const MatmulJob *j, int n, int t) { qk_tile_by_type(j, n, t, 4, 1); }
static AVX512_FN void qk_r1t2(const MatmulJob *j, int n, int t) { qk_tile_by_type(j, n, t, 1, 2); }
static AVX512_FN void qk_r1t1(const MatmulJob *j, int n, int t) { qk_tile_by_type(j, n, t, 1, 1); }
/* Decoding: rows n0 .. n1-1 for the one token, the 1 x 1 tile inlined into
 * the loop over rows, so that what does not change from row to row (the
 * activation row, the strides, the constants) is set up once. With K = 2048
 * a Q4_K row is only 8 super-blocks, and a call per row spent about a sixth
 * of the time entering and leaving. */
typedef void (*SqRowsFn)(const MatmulJob *job, int n0, int n1);
static AVX512_FN void q32_rows1(const MatmulJob *j, int n0, int n1) {
    for (int n = n0; n < n1; n++) q32_tile_by_type(j, n, 0, 1, 1);
}
static AVX512_FN void qk_rows1(const MatmulJob *j, int n0, int n1) {
    for (int n = n0; n < n1; n++) qk_tile_by_type(j, n, 0, 1, 1);
}
static const SqTileFn Q32_TILES[2][4] = {{q32_r1t1, q32_r1t2, q32_r1t3, q32_r1t4},
                                         {q32_r4t1, q32_r4t2, q32_r4t3, q32_r4t4}};
static const SqTileFn QK_TILES[2][4] = {{qk_r1t1, qk_r1t2, NULL, NULL}, {qk_r4t1, qk_r4t2, NULL, NULL}};

/* Rows [n0, n1) for all tokens: over a chunk of rows that stays in L2, the
 * tokens a tile's width at a time, and within that the rows four at a time.
 * Every (row, token) result is the same whatever the tile (its lanes are
 * filled and added in one order), so threads and T do not change the bits. */
void small_rows_avx512(const MatmulJob *job, int part, int n0, int n1) {
    int k = dtype_is_k(job->W->type), T = job->T, width = k ? 2 : 4;
    const SqTileFn(*tiles)[4] = k ? QK_TILES : Q32_TILES;
    size_t row_bytes = dtype_row_bytes(job->W->type, job->W->K);
    int chunk = (int)(SQ_CHUNK_BYTES / row_bytes) / 4 * 4;
    if (chunk < 4) chunk = 4;
    for (int c0 = n0; c0 < n1; c0 += chunk) {
        int c1 = c0 + chunk < n1 ? c0 + chunk : n1;
        if (T == 1) {   /* one row at a time: a single stream */
            (k ? qk_rows1 : q32_rows1)(job, c0, c1);
            continue;
        }
        for (int t = 0; t < T; t += width) {
            int TT = T - t < width ? T - t : width, n = c0;
            for (; n + 4 <= c1; n += 4) tiles[1][TT - 1](job, n, t);
            for (; n < c1; n++) tiles[0][TT - 1](job, n, t);
        }
    }
}
#else
typedef int ops_quant_avx512_is_empty_here;   /* ISO C wants something in every file */
#endif /* OPS_X86 */
