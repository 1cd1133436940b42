/* quant_avx512.c - AVX-512 (VNNI) kernels for the 4, 5 and 6-bit block
 * formats. quant.c holds the layouts and the plain loops that compute the
 * same integer sums; this file only computes them quickly.
 *
 * The weights stay packed in memory and are unpacked in registers: nibbles
 * split by a shift and a mask into one byte each (0..15), a fifth or sixth
 * bit ORed in from its own bit plane. Those bytes are unsigned, which is
 * what vpdpbusd wants on its unsigned side; the activations (int8, already
 * rounded by matmul_isa) are the signed side. Each vpdpbusd adds 64 products
 * into 16 int32 lanes, four per lane.
 *
 * Q4_0, Q4_1, Q5_0, Q5_1 (blocks of 32, activations rounded as Q8_0): four
 * blocks per register pair, lanes 4j .. 4j+3 holding block j (see "blocks
 * of 32" below; the activations are packed in the weights' nibble order,
 * Q32Act). The offsets -8 (Q4_0) and -16 (Q5_0) are paid by starting the
 * lanes at -8 or -16 times the sum of their eight activations, which the
 * layout carries as corr = -128 * sum (a shift right by 4 or 3 is exact).
 * For Q4_1 and Q5_1 the offset m is a float: m s, s = d_x (the sum of the
 * block's activations), packed with the activations as llama.cpp's Q8_1
 * blocks carry it, is added in float.
 *
 * Q4_K, Q5_K, Q6_K (super-blocks of 256, Q8_K activations): a super-block is
 * four chunks of 64 values, one vpdpbusd each. Q4_K's and Q5_K's chunks are
 * sub-blocks 0 and 2, 1 and 3, 4 and 6, 5 and 7 (k_half; the activations are
 * packed to match), lanes 0-7 the first of the two; Q6_K's chunk is four
 * groups of 16 (lanes 4g .. 4g+3). The sub-block scales are small integers,
 * so each lane's sum is multiplied by its scale as an integer (vpmaddwd) and
 * summed over the super-block exactly; floats enter once per super-block:
 * d_w d_x. The mins of Q4_K and Q5_K (and Q6_K's -32) need only the sums of
 * 16 activations, which Q8_K carries (bsums): one more integer multiply per
 * super-block.
 *
 * Tiles are R = 4 (or 1) rows by up to 4 tokens for blocks of 32 (as the Q8_0
 * kernel), 1 row by up to 4 tokens for super-blocks: those hold an int32
 * and two float accumulators per (row, token), so 4 x 4 would spill. One
 * token (decoding) goes one row at a time, a single stream through memory
 * (tiles_avx512.c, "reading weights from memory"). */
#include "kernels/rows.h"

#ifdef OPS_X86
#include <immintrin.h>
#include <math.h>
#include <string.h>

#define AVX512_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")))
#define AVX512_INLINE static inline __attribute__((always_inline)) AVX512_FN

/* Rows of one pass over the tokens, as in tiles_avx512.c: small enough to stay
 * in L2 while each pair of tokens visits them. */
enum { SQ_CHUNK_BYTES = 256 * 1024 };

AVX512_INLINE __m512i nibbles_lo_hi(__m256i v) {   /* 32 bytes -> [low nibbles, high nibbles] */
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* --- blocks of 32
 *
 * Four blocks at a time. A block's 16 bytes hold its values 0-15 in the low
 * nibbles and 16-31 in the high ones, so the four blocks' bytes in one
 * register, masked and shifted, give two registers: lo (values 0-15 of each
 * block, block j in bytes 16j .. 16j+15) and hi (values 16-31). The
 * activations are packed once per call in the same order (q32_act_pack_avx512
 * in tiles_avx512.c: rows.h, Q32Act), so the weights need no permute:
 * vpdpbusd(vpdpbusd(start, lo, x_lo), hi, x_hi) leaves in lane 4j + i the
 * exact sum of eight products of block j, and lanes 4j .. 4j+3 share block
 * j's scales, spread from one 4-lane product d_w d_x by one vpermps. One FMA
 * per four blocks and per (row, token) adds them to the float accumulator.
 *
 * Before this layout the weights were shuffled into the activations' order
 * (two blocks per register, one permute per pair and one spread of scales per
 * pair), and a decoding row waited on two FMAs per four blocks in one chain:
 * about 30 GB/s of Q4_0 on one Zen 5 core even from cache, below what memory
 * delivers (notes/formats.md has the figures). */

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

/* Blocks 0 .. n-1 (n = 1..4) of a quad: lo and hi as above (zeros for
 * missing blocks), unsigned, the fifth bit ORed in as 16; their scales, and
 * for the _1 kinds the offsets, as floats. */
typedef struct {
    __m512i lo, hi;
    __m128 d;    /* _0 kinds: d_j in lane j */
    __m256 dm;   /* _1 kinds: d_j in lane 2j, m_j in lane 2j + 1 */
} Q32Quad;

/* A quad's fields gathered into registers (by q32_quad) to Q32Quad: z the
 * four blocks' qs (block j in lane j), hv the four qh words h0 h1 h2 h3 in
 * every 128-bit lane (the Q5 kinds), dw the scales' fp16 words (d0 m0 d1 m1
 * ... for the _1 kinds, d0 d1 d2 d3 for the _0 kinds). */
AVX512_INLINE Q32Quad q32_fields(__m512i z, __m512i hv, __m128i dw, Q32Layout L) {
    Q32Quad w;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    w.lo = _mm512_and_si512(z, m4);
    w.hi = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);
    if (L.qh >= 0) {   /* bit i of qh: the fifth bit of value i; bits 0-15 go to lo, 16-31 to hi */
        /* Each byte of lo and hi picks the byte of its block's word that
         * holds its bit (vpshufb within each 128-bit lane, one block per
         * lane), tests that bit (vptestmb), and adds 16 where it is set (the
         * nibble has bit 4 clear, so the add is an OR): all in vector
         * registers. Through 64-bit masks in general registers this took
         * half as many instructions again: Q5_0 from cache on one Zen 5 core
         * 35 GB/s, then 37 (Q5_1 31.5, then 33). */
        const uint64_t b1 = 0x0101010101010101ull;   /* a byte repeated eight times */
        const __m512i pick_lo = _mm512_set_epi64((long long)(13 * b1), (long long)(12 * b1), (long long)(9 * b1),
                                                 (long long)(8 * b1), (long long)(5 * b1), (long long)(4 * b1),
                                                 (long long)b1, 0);
        const __m512i pick_hi = _mm512_add_epi8(pick_lo, _mm512_set1_epi8(2));
        const __m512i bit = _mm512_set1_epi64((long long)0x8040201008040201ull);
        const __m512i sixteen = _mm512_set1_epi8(16);
        w.lo = _mm512_mask_add_epi8(w.lo, _mm512_test_epi8_mask(_mm512_shuffle_epi8(hv, pick_lo), bit), w.lo,
                                    sixteen);
        w.hi = _mm512_mask_add_epi8(w.hi, _mm512_test_epi8_mask(_mm512_shuffle_epi8(hv, pick_hi), bit), w.hi,
                                    sixteen);
    }
    if (L.m >= 0) {
        w.dm = _mm256_cvtph_ps(dw);
        w.d = _mm_setzero_ps();
    } else {
        w.d = _mm_cvtph_ps(dw);
        w.dm = _mm256_setzero_ps();
    }
    return w;
}

/* Word indices into a pair of registers holding the 128 bytes from a quad's
 * first byte (words 0-31 the first register, 32-63 the second), for
 * vpermt2w: every field of these blocks starts on an even byte and every
 * block is an even number of bytes, so 16-bit granularity is enough (and
 * AVX512BW has it; vpermt2b would need VBMI, which Cascade Lake lacks).
 * Written as vector arithmetic on constants, which GCC folds to constants.
 *   qs: block j's 8 words of nibbles in words 8j .. 8j+7 (lane j);
 *   qh: in every 128-bit lane the four blocks' qh words, h0 h1 h2 h3;
 *   d:  the first four words d0 m0 d1 m1 ... (the _1 kinds) or d0 d1 d2 d3. */
AVX512_INLINE __m512i q32_idx_qs(size_t bytes, Q32Layout L) {
    const Words32 j = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
    const Words32 w = {0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7};
    return (__m512i)(j * (short)(bytes / 2) + w + (short)(L.qs / 2));
}
AVX512_INLINE __m512i q32_idx_qh(size_t bytes, Q32Layout L) {
    const Words32 j = {0, 0, 1, 1, 2, 2, 3, 3, 0, 0, 1, 1, 2, 2, 3, 3, 0, 0, 1, 1, 2, 2, 3, 3, 0, 0, 1, 1, 2, 2, 3, 3};
    const Words32 w = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1};
    return (__m512i)(j * (short)(bytes / 2) + w + (short)(L.qh / 2));
}
AVX512_INLINE __m512i q32_idx_d(size_t bytes, Q32Layout L) {
    const Words32 j1 = {0, 0, 1, 1, 2, 2, 3, 3};   /* _1 kinds: d and m of each block */
    const Words32 w1 = {0, 1, 0, 1, 0, 1, 0, 1};
    const Words32 j0 = {0, 1, 2, 3};                /* _0 kinds: d of each block */
    return (__m512i)(L.m >= 0 ? j1 * (short)(bytes / 2) + w1 : j0 * (short)(bytes / 2));
}

AVX512_INLINE Q32Quad q32_quad(const uint8_t *p, size_t bytes, int n, Q32Layout L, int permute) {
    __m512i z;
    if (n == 4 && permute) {
        /* The quad's 4 * bytes (72 to 96) in two registers, the second loaded
         * under a mask (nothing past the quad is read), then each field
         * gathered by one two-register word permute: three permutes where
         * single loads, inserts and moves through general registers took
         * some 40 instructions per quad. Decoding only: prefill tiles lost
         * with them (Q5_0 T=128 258 -> 216 GFLOP/s).
         * The empty asm keeps a and b in registers. vpermt2w overwrites its
         * first table, and without it GCC 12 loaded `a` again for each
         * permute: three loads of the same 64 bytes, nearly all straddling
         * two cache lines. One Zen 5 core, kernel over read bandwidth from
         * memory (kbench --shape 5632x2048, three alternating runs): Q5_0
         * 0.86-0.89 -> 0.96-1.01, Q5_1 0.92-0.95 -> 0.96-0.99; Q4_0 and
         * Q4_1 0.93-1.0 either way. With it Q4_0 takes this path too: from
         * cache 41 -> 47 GB/s (with the triple loads it streamed from memory
         * about 5% slower than its old loads, and kept them). */
        const __mmask32 rest = (__mmask32)((1u << (4 * bytes - 64) / 2) - 1);
        __m512i a = _mm512_loadu_si512(p), b = _mm512_maskz_loadu_epi16(rest, p + 64);
        __asm__("" : "+v"(a), "+v"(b));
        z = _mm512_permutex2var_epi16(a, q32_idx_qs(bytes, L), b);
        __m512i dv = _mm512_permutex2var_epi16(a, q32_idx_d(bytes, L), b);
        __m512i hv = L.qh >= 0 ? _mm512_permutex2var_epi16(a, q32_idx_qh(bytes, L), b) : _mm512_setzero_si512();
        return q32_fields(z, hv, _mm512_castsi512_si128(dv), L);
    }
    /* One field of one block at a time. Nothing past the last block is read. */
    if (n == 4) {
        z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(p + L.qs)));
        z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(p + bytes + L.qs)), 1);
        z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(p + 2 * bytes + L.qs)), 2);
        z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(p + 3 * bytes + L.qs)), 3);
    } else {
        z = _mm512_setzero_si512();
        for (int j = 0; j < n; j++)
            z = _mm512_mask_broadcast_i32x4(z, (__mmask16)(0xfu << 4 * j),
                                            _mm_loadu_si128((const __m128i *)(p + (size_t)j * bytes + L.qs)));
    }
    /* words into registers from general registers, each its own variable:
     * stored to an array and loaded as one, they made the load wait for the
     * stores */
    uint32_t h0 = 0, h1 = 0, h2 = 0, h3 = 0, w0 = 0, w1 = 0, w2 = 0, w3 = 0;
    const size_t dbytes = L.m >= 0 ? 4 : 2;   /* d and m, or d */
    memcpy(&w0, p, dbytes);
    if (n > 1) memcpy(&w1, p + bytes, dbytes);
    if (n > 2) memcpy(&w2, p + 2 * bytes, dbytes);
    if (n > 3) memcpy(&w3, p + 3 * bytes, dbytes);
    if (L.qh >= 0) {
        memcpy(&h0, p + L.qh, 4);
        if (n > 1) memcpy(&h1, p + bytes + L.qh, 4);
        if (n > 2) memcpy(&h2, p + 2 * bytes + L.qh, 4);
        if (n > 3) memcpy(&h3, p + 3 * bytes + L.qh, 4);
    }
    __m128i dw = L.m >= 0 ? _mm_set_epi32((int)w3, (int)w2, (int)w1, (int)w0)
                          : _mm_cvtsi64_si128((long long)(w0 | (uint64_t)w1 << 16 | (uint64_t)w2 << 32 |
                                                          (uint64_t)w3 << 48));
    __m512i hv = _mm512_broadcast_i32x4(_mm_set_epi32((int)h3, (int)h2, (int)h1, (int)h0));
    return q32_fields(z, hv, dw, L);
}

/* Four block values (lanes 0-3) spread over the lanes of their blocks. */
AVX512_INLINE __m512 spread4(__m128 v) {
    const __m512i idx = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(v));
}

/* Lane 2j of v spread over the lanes of block j. */
AVX512_INLINE __m512 spread4_even(__m256 v) {
    const __m512i idx = _mm512_set_epi32(6, 6, 6, 6, 4, 4, 4, 4, 2, 2, 2, 2, 0, 0, 0, 0);
    return _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(v));
}

/* Quad q (blocks 4q .. 4q+nblk-1) of rows n .. n+R-1 and tokens
 * t0 .. t0+TT-1 added into acc. nblk is 4 but for the last quad of a row:
 * inlined with it constant, the whole quads compile to straight-line code. */
AVX512_INLINE void q32_step(__m512 acc[4][4], const uint8_t *w, size_t bytes, size_t stride, const Q32Act *xr,
                            int q, int nblk, int R, int TT, Q32Layout L) {
    Q32Quad wq[4];
    for (int r = 0; r < R; r++) {
        const uint8_t *p = w + (size_t)r * stride + (size_t)(4 * q) * bytes;
        prefetch_weights(p, (size_t)nblk * bytes, R, TT, stride);
        wq[r] = q32_quad(p, bytes, nblk, L, R == 1 && TT == 1);
    }
    for (int t = 0; t < TT; t++) {
        __m512i xlo = _mm512_loadu_si512(xr[t].qs + 128 * q), xhi = _mm512_loadu_si512(xr[t].qs + 128 * q + 64);
        __m512i corr = _mm512_loadu_si512(xr[t].corr + 16 * q);
        __m128 xd = _mm_loadu_ps(xr[t].d + 4 * q);
        __m256 xds = L.m >= 0 ? _mm256_loadu_ps(xr[t].ds + 8 * q) : _mm256_setzero_ps();
        __m512i start = L.shift == 4 ? _mm512_srai_epi32(corr, 4)
                        : L.shift == 3 ? _mm512_srai_epi32(corr, 3) : _mm512_setzero_si512();
        for (int r = 0; r < R; r++) {
            __m512i isum = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(start, wq[r].lo, xlo), wq[r].hi, xhi);
            if (L.m >= 0) {
                /* + m_j s_j, in lane 2j + 1 of the product that gives d_w d_x
                 * in lane 2j. Before, the offset's term was corr times a
                 * spread of m d_x / 128 in every lane: three instructions
                 * more per four blocks. One Zen 5 core from cache: Q5_1
                 * 39 -> 45.5 GB/s, Q4_1 43 -> 52.5. */
                __m256 prod = _mm256_mul_ps(wq[r].dm, xds);   /* d_w d_x in lane 2j, m s in 2j + 1 */
                __m512 ms = _mm512_maskz_mov_ps(0xAA, _mm512_castps256_ps512(prod));
                __m512 term = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), spread4_even(prod), ms);
                acc[r][t] = _mm512_add_ps(acc[r][t], term);
            } else {
                acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), spread4(_mm_mul_ps(wq[r].d, xd)), acc[r][t]);
            }
        }
    }
}

/* out[t][n + r] for r < R, t0 <= t < t0 + TT. Every (row, token) gets the
 * same instructions whatever R and TT, so every tile shape gives the same
 * bits. The _1 kinds add the offset term and the product first, then the
 * sum into the accumulator: one dependent add per four blocks. */
AVX512_INLINE void q32_tile(const MatmulJob *job, int n, int t0, int R, int TT, DType type) {
    Q32Layout L = q32_layout(type);
    int N = job->W->N, K = job->W->K, nb = K / QK4;
    size_t bytes = dtype_row_bytes(type, QK4), stride = dtype_row_bytes(type, K);
    const uint8_t *w = row_ptr(job->W, n);
    Q32Act xr[4];
    for (int t = 0; t < TT; t++) xr[t] = q32_act_row(job->act, K, t0 + t);
    __m512 acc[4][4];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++) acc[r][t] = _mm512_setzero_ps();
    int q = 0;
    for (; 4 * q + 4 <= nb; q++) q32_step(acc, w, bytes, stride, xr, q, 4, R, TT, L);
    switch (nb - 4 * q) {   /* a constant count in each case */
    case 1: q32_step(acc, w, bytes, stride, xr, q, 1, R, TT, L); break;
    case 2: q32_step(acc, w, bytes, stride, xr, q, 2, R, TT, L); break;
    case 3: q32_step(acc, w, bytes, stride, xr, q, 3, R, TT, L); break;
    default: break;
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++) job->out[(size_t)(t0 + t) * N + n + r] = _mm512_reduce_add_ps(acc[r][t]);
}

/* --- Q8_K activations: quantize_row_q8_k_ref (quant.c), 16 values an
 * instruction, the same bits: the same multiply by -127 / max and rounding
 * to nearest even, max the first value of the largest magnitude. */

AVX512_FN void quantize_row_q8_k_avx512(BlockQ8_K *out, const float *x, int K) {
    enum { NEAREST_EVEN = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC };
    for (int b = 0; b < K / QK_K; b++, x += QK_K) {
        BlockQ8_K *y = &out[b];
        __m512 v[16], amaxv = _mm512_setzero_ps();
        __mmask16 bad = 0;
        for (int i = 0; i < 16; i++) {
            v[i] = _mm512_loadu_ps(x + 16 * i);
            bad |= _mm512_cmp_ps_mask(_mm512_sub_ps(v[i], v[i]), _mm512_setzero_ps(), _CMP_NEQ_UQ);   /* NaN, inf */
            amaxv = _mm512_max_ps(amaxv, _mm512_abs_ps(v[i]));
        }
        memset(y->qs, 0, sizeof y->qs);
        memset(y->bsums, 0, sizeof y->bsums);
        y->d = bad ? NAN : 0.0f;
        float amax = _mm512_reduce_max_ps(amaxv);
        if (bad || amax == 0.0f) continue;
        float max = 0.0f;
        for (int i = 0; i < 16; i++) {
            __mmask16 at = _mm512_cmp_ps_mask(_mm512_abs_ps(v[i]), _mm512_set1_ps(amax), _CMP_EQ_OQ);
            if (at) {
                max = x[16 * i + __builtin_ctz(at)];
                break;
            }
        }
        float iscale = -127.0f / max;
        if (isinf(iscale)) continue;
        for (int i = 0; i < 16; i++) {
            __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_set1_ps(iscale), v[i]), NEAREST_EVEN);
            r = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
            __m512i q = _mm512_cvtps_epi32(r);
            _mm_storeu_si128((__m128i *)(y->qs + 16 * i), _mm512_cvtepi32_epi8(q));
            y->bsums[i] = (int16_t)_mm512_reduce_add_epi32(q);
        }
        y->d = 1.0f / iscale;
    }
}

AVX512_FN void small_act_pack_k_avx512(uint8_t *act, const float *x, int T, int K) {
    for (int t = 0; t < T; t++)
        quantize_row_q8_k_avx512((BlockQ8_K *)(act + (size_t)t * small_act_stride(DT_Q4_K, K)), x + (size_t)t * K, K);
}

/* --- super-blocks of 256 */

/* A super-block's scales of one row as int32 lanes: sc (Q4_K, Q5_K: the 8
 * sub-block scales in lanes 0-7; Q6_K: the 16 group scales), mn16 (Q4_K,
 * Q5_K: the min of each group of 16, lane g holding mn[g / 2]), and d, dmin. */
typedef struct {
    __m512i sc, mn16;
    __m128 ddm;   /* d in lane 0, dmin in lane 1 (Q6_K: 0) */
} KScales;

/* The 12 bytes of a Q4_K or Q5_K super-block's scales (and the 4 that
 * follow, read and unused) to 16 bytes: the 8 sub-block scales, then the 8
 * mins. */
AVX512_INLINE __m128i k_scale_bytes(const uint8_t *scales) {
    /* k_scale_min for all eight at once, four bytes to a 32-bit word: bytes
     * 0-3 hold scales 0-3 (low six bits), 4-7 mins 0-3, 8-11 the low nibbles
     * of scales 4-7 and (high nibbles) mins 4-7, whose top two bits are the
     * top two bits of bytes 0-3 (scales) and 4-7 (mins). */
    /* In words w0, w1, w2 of the 12 bytes (the load's last 4 bytes are the
     * first of qs, unused): sc_lo = w0 & six, sc_hi = (w2 & four) | ((w0 >> 6)
     * & two) << 4, mn_lo = w1 & six, mn_hi = ((w2 >> 4) & four) | ((w1 >> 6)
     * & two) << 4, all four in one register's dwords: about ten vector
     * instructions, where the scalar form and joining its words cost twenty. */
    const int six = 0x3f3f3f3f, four = 0x0f0f0f0f, two = 0x03030303;
    __m128i v = _mm_loadu_si128((const __m128i *)scales);
    __m128i p = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0));   /* w0 w2 w1 w2 */
    __m128i q = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0));   /* w0 w0 w1 w1 */
    __m128i low = _mm_and_si128(_mm_srlv_epi32(p, _mm_set_epi32(4, 0, 0, 0)), _mm_set_epi32(four, six, four, six));
    __m128i top = _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(q, 6), _mm_set_epi32(two, 0, two, 0)), 4);
    return _mm_or_si128(low, top);   /* sc_lo sc_hi mn_lo mn_hi */
}

AVX512_INLINE KScales k_scales(DType type, const uint8_t *blk) {
    KScales s;
    if (type == DT_Q6_K) {
        const BlockQ6_K *b = (const BlockQ6_K *)blk;
        s.sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b->scales));
        s.mn16 = _mm512_setzero_si512();
        s.ddm = _mm_cvtph_ps(_mm_cvtsi32_si128(b->d));
        return s;
    }
    const BlockQ4_K *b = (const BlockQ4_K *)blk;   /* Q5_K starts the same way */
    __m128i bytes = k_scale_bytes(b->scales);
    s.sc = _mm512_cvtepu8_epi32(bytes);   /* lanes 0-7 the scales (8-15: the mins, unused) */
    __m512i mn8 = _mm512_cvtepu8_epi32(_mm_srli_si128(bytes, 8));
    const __m512i half = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    s.mn16 = _mm512_permutexvar_epi32(half, mn8);
    uint32_t both;   /* d and dmin, side by side */
    memcpy(&both, &b->d, 4);
    s.ddm = _mm_cvtph_ps(_mm_cvtsi32_si128((int)both));
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

/* Half h of a Q4_K or Q5_K super-block (values 128h .. 128h+127, sub-blocks
 * 4h .. 4h+3) from one 64-byte load of nibbles: lo holds sub-blocks 4h and
 * 4h+2 (the low nibbles of bytes 64h .. 64h+63), hi 4h+1 and 4h+3 (the high
 * nibbles), each register's lanes 0-7 the first of its two; the fifth bits
 * of Q5_K from `planes` (qh twice); each register's sub-block scales spread
 * over its lanes. The activations are packed in the same order
 * (qk_act_reorder_avx512): sub-blocks 0 2 1 3 4 6 5 7. Before, a 32-byte
 * load per 64 values was split and the halves joined again (vinserti64x4):
 * Q4_K decoding on one Zen 5 core from memory 27.6 -> (see notes/formats.md). */
typedef struct {
    __m512i lo, hi;
    __m512i sc;   /* the sub-block scales as 16-bit words, in k_pair's order */
} KHalf;

/* Both registers' sums for one token times their scales: lo's and hi's
 * int32 lanes (each the sum of four products, |p| <= 4 * 31 * 128 < 2^15)
 * interleaved as 16-bit words (lane l: lo's in its low word, hi's in its
 * high one), and one vpmaddwd with the scales in that order gives lane l
 * sc_lo p_lo + sc_hi p_hi, exactly, as two vpmaddwd and two adds did before
 * (the same bits). One Zen 5 core from cache: Q4_K 38.9 -> 42.5 GB/s,
 * Q5_K 37.4 -> 40.5; prefill of 128 tokens 202 -> 236 and 186 -> 211
 * GFLOP/s. (Narrowing with vpackssdw, one instruction, was 2% faster again,
 * but it pairs other lanes: rows of the Q4_K_M fixture within 1e-5 of
 * llama.cpp's went from 123 to 65.) */
AVX512_INLINE __m512i k_pair(__m512i isum, KHalf kh, const int8_t *xq) {
    __m512i plo = _mm512_dpbusd_epi32(_mm512_setzero_si512(), kh.lo, _mm512_loadu_si512(xq));
    __m512i phi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), kh.hi, _mm512_loadu_si512(xq + 64));
    __m512i both = _mm512_mask_blend_epi16(0xAAAAAAAAu, plo, _mm512_slli_epi32(phi, 16));
    return _mm512_add_epi32(isum, _mm512_madd_epi16(both, kh.sc));
}

AVX512_INLINE KHalf k_half(DType type, const uint8_t *blk, __m512i planes, __m512i sc16, int h) {
    KHalf k;
    const uint8_t *qs = type == DT_Q4_K ? ((const BlockQ4_K *)blk)->qs : ((const BlockQ5_K *)blk)->qs;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512i z = _mm512_loadu_si512(qs + 64 * h);
    k.lo = _mm512_and_si512(z, m4);
    k.hi = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);
    int a = 4 * h;   /* sub-blocks a, a + 2 (lo) and a + 1, a + 3 (hi) */
    if (type == DT_Q5_K) {   /* bit j of qh[l]: the fifth bit of value l of sub-block j */
        const __m512i sixteen = _mm512_set1_epi8(16);
        __m512i sel_lo = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi8((char)(1 << a))),
                                            _mm256_set1_epi8((char)(1 << (a + 2))), 1);
        __m512i sel_hi = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi8((char)(1 << (a + 1)))),
                                            _mm256_set1_epi8((char)(1 << (a + 3))), 1);
        k.lo = _mm512_or_si512(k.lo, _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(planes, sel_lo), sixteen));
        k.hi = _mm512_or_si512(k.hi, _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(planes, sel_hi), sixteen));
    }
    /* k_pair's order: lane l's low word from lo (sub-block a for l < 8,
     * a + 2 above), its high word from hi (a + 1, a + 3); scale j is word
     * 2j of sc16 */
    const Words32 sub = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3};
    k.sc = _mm512_permutexvar_epi16((__m512i)((sub + (short)a) * 2), sc16);
    return k;
}

/* The Q8_K activations of T rows into k_half's order: in each super-block
 * the 32-value sub-blocks 1 and 2, and 5 and 6, trade places (bsums stay in
 * value order: the mins use them). */
void qk_act_reorder_avx512(uint8_t *act, int T, int K) {
    size_t stride = small_act_stride(DT_Q4_K, K);
    for (int t = 0; t < T; t++) {
        BlockQ8_K *x = (BlockQ8_K *)(act + (size_t)t * stride);
        for (int b = 0; b < K / QK_K; b++) {
            for (int h = 0; h < 2; h++) {
                int8_t tmp[32], *s1 = x[b].qs + 128 * h + 32, *s2 = s1 + 32;
                memcpy(tmp, s1, 32);
                memcpy(s1, s2, 32);
                memcpy(s2, tmp, 32);
            }
        }
    }
}

/* Tokens a super-block tile takes at once: each row's super-block is
 * unpacked once for them all (QK_TILES). */
enum { QK_TT = 8 };

AVX512_INLINE void qk_tile(const MatmulJob *job, int n, int t0, int R, int TT, DType type) {
    int N = job->W->N, K = job->W->K, nb = K / QK_K;
    size_t bytes = dtype_row_bytes(type, QK_K), stride = dtype_row_bytes(type, K);
    size_t xstride = small_act_stride(type, K);
    const uint8_t *w = row_ptr(job->W, n);
    const BlockQ8_K *xr[QK_TT];
    for (int t = 0; t < TT; t++) xr[t] = (const BlockQ8_K *)(job->act + (size_t)(t0 + t) * xstride);
    /* acc gathers the products; mins (Q4_K, Q5_K) their own sum, taken off
     * at the end: two chains of one FMA per super-block, not one of two. */
    __m512 acc[4][QK_TT], mins[4][QK_TT];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++) acc[r][t] = mins[r][t] = _mm512_setzero_ps();
    /* A super-block of one row at a time (its scales, its four chunks, its
     * integer sums for each token), folded into the float accumulators
     * before the next row: few registers live, none spilled. */
    for (int b = 0; b < nb; b++) {
        __m512i bs[QK_TT];
        float dx[QK_TT];
        for (int t = 0; t < TT; t++) {
            bs[t] = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)xr[t][b].bsums));
            dx[t] = xr[t][b].d;
        }
        for (int r = 0; r < R; r++) {
            const uint8_t *blk = w + (size_t)r * stride + (size_t)b * bytes;
            prefetch_weights(blk, bytes, R, TT, stride);
            KScales ks = k_scales(type, blk);
            __m512i isum[QK_TT];
            for (int t = 0; t < TT; t++) isum[t] = _mm512_setzero_si512();
            /* Each lane's p (four products) times its scale with vpmaddwd, a
             * 16-bit multiply, where vpmulld (32 bits) costs two
             * micro-operations on Intel: |p| <= 4 * 63 * 128 < 2^15, so p's
             * upper half is its sign; with the scale's upper half cleared
             * (sc16) the pair product is p sc exactly. The same holds for the
             * sums of 16 activations (bsums, |bsum| <= 16 * 127). */
            __m512i sc16 = _mm512_and_si512(ks.sc, _mm512_set1_epi32(0xffff));
            if (type == DT_Q6_K) {
                for (int c = 0; c < 4; c++) {
                    __m512i wq = k_chunk_weights(type, blk, c), sc = k_chunk_scales(type, sc16, c);
                    for (int t = 0; t < TT; t++) {
                        __m512i xq = _mm512_loadu_si512(xr[t][b].qs + 64 * c);
                        __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq, xq);   /* exact */
                        isum[t] = _mm512_add_epi32(isum[t], _mm512_madd_epi16(p, sc));
                    }
                }
            } else {   /* Q4_K, Q5_K: 64 bytes of nibbles at a time, see k_half */
                __m512i planes = _mm512_setzero_si512();
                if (type == DT_Q5_K) {
                    __m256i qh = _mm256_loadu_si256((const __m256i *)((const BlockQ5_K *)blk)->qh);
                    planes = _mm512_inserti64x4(_mm512_castsi256_si512(qh), qh, 1);
                }
                for (int h = 0; h < 2; h++) {
                    KHalf kh = k_half(type, blk, planes, sc16, h);
                    for (int t = 0; t < TT; t++)   /* the activations in k_half's order */
                        isum[t] = k_pair(isum[t], kh, xr[t][b].qs + 128 * h);
                }
            }
            for (int t = 0; t < TT; t++) {
                __m128 f = _mm_mul_ps(ks.ddm, _mm_set1_ps(dx[t]));   /* d dx, dmin dx */
                __m512 d = _mm512_broadcastss_ps(f);
                if (type == DT_Q6_K) {   /* the -32 of every value: -32 sc[g] bsum[g] */
                    __m512i off = _mm512_slli_epi32(_mm512_madd_epi16(bs[t], sc16), 5);   /* see sc16 */
                    acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(isum[t], off)), d, acc[r][t]);
                } else {                 /* - dmin mn[j] (sum of sub-block j's activations) */
                    __m512i msum = _mm512_madd_epi16(bs[t], ks.mn16);   /* |bsum| < 2^15, mn < 64 */
                    __m512 dmin = _mm512_permutexvar_ps(_mm512_set1_epi32(1), _mm512_castps128_ps512(f));
                    acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), d, acc[r][t]);
                    mins[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(msum), dmin, mins[r][t]);
                }
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++) job->out[(size_t)(t0 + t) * N + n + r] = _mm512_reduce_add_ps(_mm512_sub_ps(acc[r][t], mins[r][t]));
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
 * tokens (16 float accumulators), for super-blocks 1 row by up to 4 (see
 * QK_ROWS4). Index [R == 4][TT - 1]. */
typedef void (*SqTileFn)(const MatmulJob *job, int n, int t);
static AVX512_FN void q32_r4t4(const MatmulJob *j, int n, int t) { q32_tile_by_type(j, n, t, 4, 4); }
static AVX512_FN void q32_r4t3(const MatmulJob *j, int n, int t) { q32_tile_by_type(j, n, t, 4, 3); }
static AVX512_FN void q32_r4t2(const MatmulJob *j, int n, int t) { q32_tile_by_type(j, n, t, 4, 2); }
static AVX512_FN void q32_r4t1(const MatmulJob *j, int n, int t) { q32_tile_by_type(j, n, t, 4, 1); }
static AVX512_FN void q32_r1t4(const MatmulJob *j, int n, int t) { q32_tile_by_type(j, n, t, 1, 4); }
static AVX512_FN void q32_r1t3(const MatmulJob *j, int n, int t) { q32_tile_by_type(j, n, t, 1, 3); }
static AVX512_FN void q32_r1t2(const MatmulJob *j, int n, int t) { q32_tile_by_type(j, n, t, 1, 2); }
static AVX512_FN void q32_r1t1(const MatmulJob *j, int n, int t) { q32_tile_by_type(j, n, t, 1, 1); }
/* Super-blocks: one row by up to 8 tokens, each row's weights unpacked once
 * for the 8 (an int32 sum and two float accumulators per token: 4 rows by 4
 * would spill); the "4-row" entries run four such rows. Before, 4 rows by 2
 * tokens unpacked every super-block once per 2 tokens: 16 sequences
 * decoding Q4_K on 2 Zen 5 cores went at 0.94x llama.cpp's rate
 * (tools/bench_llamacpp.sh); then one row by 4 tokens, and Q6_K's 16
 * sequences (on VNNI on every CPU: AMX takes Q4_K's) unpacked each
 * super-block four times a step. */
#define QK_ROWS4(TT) \
    for (int r = 0; r < 4; r++) qk_tile_by_type(j, n + r, t, 1, TT)
static AVX512_FN void qk_r4t8(const MatmulJob *j, int n, int t) { QK_ROWS4(8); }
static AVX512_FN void qk_r4t7(const MatmulJob *j, int n, int t) { QK_ROWS4(7); }
static AVX512_FN void qk_r4t6(const MatmulJob *j, int n, int t) { QK_ROWS4(6); }
static AVX512_FN void qk_r4t5(const MatmulJob *j, int n, int t) { QK_ROWS4(5); }
static AVX512_FN void qk_r4t4(const MatmulJob *j, int n, int t) { QK_ROWS4(4); }
static AVX512_FN void qk_r4t3(const MatmulJob *j, int n, int t) { QK_ROWS4(3); }
static AVX512_FN void qk_r4t2(const MatmulJob *j, int n, int t) { QK_ROWS4(2); }
static AVX512_FN void qk_r4t1(const MatmulJob *j, int n, int t) { QK_ROWS4(1); }
static AVX512_FN void qk_r1t8(const MatmulJob *j, int n, int t) { qk_tile_by_type(j, n, t, 1, 8); }
static AVX512_FN void qk_r1t7(const MatmulJob *j, int n, int t) { qk_tile_by_type(j, n, t, 1, 7); }
static AVX512_FN void qk_r1t6(const MatmulJob *j, int n, int t) { qk_tile_by_type(j, n, t, 1, 6); }
static AVX512_FN void qk_r1t5(const MatmulJob *j, int n, int t) { qk_tile_by_type(j, n, t, 1, 5); }
static AVX512_FN void qk_r1t4(const MatmulJob *j, int n, int t) { qk_tile_by_type(j, n, t, 1, 4); }
static AVX512_FN void qk_r1t3(const MatmulJob *j, int n, int t) { qk_tile_by_type(j, n, t, 1, 3); }
static AVX512_FN void qk_r1t2(const MatmulJob *j, int n, int t) { qk_tile_by_type(j, n, t, 1, 2); }
static AVX512_FN void qk_r1t1(const MatmulJob *j, int n, int t) { qk_tile_by_type(j, n, t, 1, 1); }
/* Decoding: rows n0 .. n1-1 for the one token, the 1 x 1 tile inlined into
 * the loop over rows, so that what does not change from row to row (the
 * activation row, the strides, the constants) is set up once. With K = 2048
 * a Q4_K row is only 8 super-blocks, and a call per row spent about a sixth
 * of the time entering and leaving. */
typedef void (*SqRowsFn)(const MatmulJob *job, int n0, int n1);
/* Blocks of 32 read four rows side by side where job->decode_rows says so
 * (ops_decode_rows: Q4_0 0.69-0.74 -> 0.75-0.81 of the read on a Xeon
 * Emerald Rapids core); a super-block's 4-row entry reads its rows one after
 * another, so the K formats take one at a time everywhere. */
static AVX512_FN void q32_rows1(const MatmulJob *j, int n0, int n1) {
    int n = n0;
    if (j->decode_rows == 4)
        for (; n + 4 <= n1; n += 4) q32_tile_by_type(j, n, 0, 4, 1);
    for (; n < n1; n++) q32_tile_by_type(j, n, 0, 1, 1);
}
static AVX512_FN void qk_rows1(const MatmulJob *j, int n0, int n1) {
    for (int n = n0; n < n1; n++) qk_tile_by_type(j, n, 0, 1, 1);
}
static const SqTileFn Q32_TILES[2][QK_TT] = {{q32_r1t1, q32_r1t2, q32_r1t3, q32_r1t4},
                                             {q32_r4t1, q32_r4t2, q32_r4t3, q32_r4t4}};
static const SqTileFn QK_TILES[2][QK_TT] = {{qk_r1t1, qk_r1t2, qk_r1t3, qk_r1t4, qk_r1t5, qk_r1t6, qk_r1t7, qk_r1t8},
                                            {qk_r4t1, qk_r4t2, qk_r4t3, qk_r4t4, qk_r4t5, qk_r4t6, qk_r4t7, qk_r4t8}};

/* Rows [n0, n1) for all tokens: over a chunk of rows that stays in L2, the
 * tokens a tile's width at a time, and within that the rows four at a time.
 * Every (row, token) result is the same whatever the tile (its lanes are
 * filled and added in one order), so threads and T do not change the bits. */
void small_rows_avx512(const MatmulJob *job, int part, int n0, int n1) {
    int k = dtype_is_k(job->W->type), T = job->T, width = k ? QK_TT : 4;
    const SqTileFn(*tiles)[QK_TT] = k ? QK_TILES : Q32_TILES;
    size_t row_bytes = dtype_row_bytes(job->W->type, job->W->K);
    int chunk = (int)(SQ_CHUNK_BYTES / row_bytes) / 4 * 4;
    if (chunk < 4) chunk = 4;
    for (int c0 = n0; c0 < n1; c0 += chunk) {
        int c1 = c0 + chunk < n1 ? c0 + chunk : n1;
        if (T == 1) {   /* one row at a time (four for the blocks of 32 on Intel) */
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
typedef int quant_avx512_is_empty_here;   /* ISO C wants something in every file */
#endif /* OPS_X86 */
