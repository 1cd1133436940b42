/* tiles_avx512.c - the AVX-512 kernels of matmul: register tiles for F32, F16
 * and Q8_0 (VNNI), k-blocked tiles, and the quantizing of activations.
 *
 * ops.c holds the plain-loop references these compute, and the dispatch that
 * picks a path; this file is only the fast side. Nothing here is needed to
 * understand what a matmul computes, only how to compute it quickly.
 *
 * Why decoding is a memory problem. Generating one token multiplies one
 * activation row by every weight matrix: out[n] = sum_k W[n][k] * x[k]. Each
 * weight is read once and used for one multiply-add, so a core that could do
 * a hundred GFLOP/s is fed by a memory bus that delivers 10 to 40 GB/s: with
 * 4-byte weights that is 2.5 to 10 GFLOP/s. The speed of a matrix-vector
 * product is therefore bytes of weights divided by bandwidth, and the kernel's
 * only jobs are to keep enough loads in flight and to do little work per byte.
 * It reads the matrix as one sequential stream, a row at a time (x is small
 * and stays in L1), asks for the bytes a few rows ahead before it needs
 * them (software prefetch), and it prefers small formats: F16 halves the
 * bytes, Q8_0 takes 34 bytes per 32 weights. Its work per byte must also
 * stay below what one core can issue, and no chain of dependent adds may set
 * the pace (quant_avx512.c, blocks of 32).
 *
 * Why prefill is a compute problem. With T tokens each weight can serve T
 * multiply-adds if the kernel keeps it in registers or cache while it visits
 * the tokens. All our kernels are register tiles of 4 rows by 4 tokens (and
 * 4 by 1 to 3 for the tokens left over), so each weight loaded serves up to
 * four tokens. From 16 tokens on, F32 and F16 compute a group of rows one
 * block of K at a time so that weights and activations are read from L1
 * (see float_rows_kblocked); from SGEMM_MIN_T (36) tokens on, ops.c sends
 * F32 to OpenBLAS sgemm and F16 widens a tile of rows to float (here,
 * f16_widen_avx512) and calls sgemm on it. Q8_0 keeps its own tiles at any
 * T, because sgemm knows nothing of int8. Below that (a few sequences
 * decoding together) the product is still limited by memory, or by sgemm's
 * packing of small blocks, and our tiles beat sgemm.
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
 * float multiply by d_w * d_x. ops.c's plain Q8_0 loops add the same lanes in
 * the same order (q8_0_block_into_lanes, lanes_sum), so every path gives
 * the same bits.
 *
 * Same bits from every tile. Every (row, token) result is computed by the
 * same instruction sequence whatever the tile shape, thread count or T: one
 * FMA chain per lane over K, then _mm512_reduce_add_ps. So the results depend
 * neither on the number of threads nor on how many tokens are processed
 * together (tests/test_ops.c checks both).
 *
 * Compiled for AVX-512 by a target attribute on each function, not by
 * -march, so that the debug build (no -march) runs on any x86-64: ops.c calls
 * these only after ops_best_isa() has found the instructions. */
#include "kernels/rows.h"

#ifdef OPS_X86
#include <assert.h>
#include <immintrin.h>
#include <string.h>

/* Functions that use AVX-512 instructions; callers check ops_best_isa() first. */
#define AVX512_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")))
/* Helpers inlined into every AVX-512 caller: a tile compiled with constant
 * R and TT then unrolls its loops and keeps its accumulators in registers. */
#define AVX512_INLINE static inline __attribute__((always_inline)) AVX512_FN

/* A tile computes out for rows n .. n+R-1 and tokens t .. t+TT-1 with its
 * accumulators in registers. The row loop needs six shapes: 4x4, the tails
 * 1x4 and 1x1 (rows left over), and 4x1, 4x2, 4x3 (the 1 to 3 tokens left
 * over). T == 1 runs down the rows (rows1) with the 1x1 tile, or the 4x1
 * where ops_decode_rows() says. */
typedef void (*TileFn)(const MatmulJob *job, int n, int t);
typedef void (*RowsOneFn)(const MatmulJob *job, int n0, int n1);
typedef struct {
    TileFn r4t4, r1t4, r4t1, r1t1, r4t2, r4t3;
    RowsOneFn rows1;   /* T == 1: rows n0 .. n1-1, the tiles inlined in the loop */
} TileSet;

/* The body of a rows1: rows n0 .. n1-1 of the one token, four side by side
 * (TILE4, the 4 x 1 tile) where job->decode_rows says so, then the rest one
 * at a time (TILE1). A row's sum is the same in both tiles. */
#define ROWS_T1(TILE4, TILE1)                                            \
    int n = n0;                                                          \
    if (j->decode_rows == 4)                                             \
        for (; n + 4 <= n1; n += 4) TILE4;                               \
    for (; n < n1; n++) TILE1

/* --- AVX-512: rounding activations to Q8_0 */

/* The same block, 16 values per instruction. Bit-identical to the plain one:
 * the product x * id is the same IEEE multiply, vrndscaleps with mode 0 rounds
 * to nearest even like nearbyintf, and the integers fit int8 exactly. (For NaN
 * inputs the two may differ: maxps and fmaxf treat NaN differently.) */
AVX512_INLINE uint16_t q8_0_quantize_block_avx512(int8_t *qs, const float *xb) {
    __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
    /* x - x is 0 for a finite x, NaN for NaN or an infinity */
    __mmask16 bad = _mm512_cmp_ps_mask(_mm512_sub_ps(v0, v0), _mm512_setzero_ps(), _CMP_NEQ_UQ) |
                    _mm512_cmp_ps_mask(_mm512_sub_ps(v1, v1), _mm512_setzero_ps(), _CMP_NEQ_UQ);
    if (bad) {   /* see Q8_0_NONFINITE_SCALE */
        memset(qs, 0, QK8_0);
        return Q8_0_NONFINITE_SCALE;
    }
    float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    __m512 id = _mm512_set1_ps(q8_0_multiplier(amax));
    enum { NEAREST_EVEN = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC };   /* an immediate */
    __m512 r0 = _mm512_roundscale_ps(_mm512_mul_ps(v0, id), NEAREST_EVEN);
    __m512 r1 = _mm512_roundscale_ps(_mm512_mul_ps(v1, id), NEAREST_EVEN);
    _mm_storeu_si128((__m128i *)qs, _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(r0)));
    _mm_storeu_si128((__m128i *)(qs + 16), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(r1)));
    return fp32_to_fp16(amax / 127.0f);
}

AVX512_FN void quantize_row_q8_0_avx512(BlockQ8_0 *out, const float *x, int K) {
    for (int b = 0; b < K / QK8_0; b++)
        out[b].d = q8_0_quantize_block_avx512(out[b].qs, x + b * QK8_0);
}

/* --- AVX-512: activations to the int8 layout */

AVX512_FN void act_pack_avx512(uint8_t *act, const float *x, int T, int K) {
    const __m256i u128 = _mm256_set1_epi8((char)0x80);   /* 128 as an unsigned byte */
    for (int t = 0; t < T; t++) {
        ActRowOut r = act_row_out(act, K, t);
        for (int b = 0; b < K / QK8_0; b++) {
            int8_t *q = r.qs + b * QK8_0;
            r.d[b] = fp16_to_fp32(q8_0_quantize_block_avx512(q, x + (size_t)t * K + b * QK8_0));
            /* vpdpbusd(0, 128, q): 128 * (sum of four values) in each lane */
            __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), u128,
                                            _mm256_loadu_si256((const __m256i *)q));
            _mm256_storeu_si256((__m256i *)(r.corr + b * 8), _mm256_sub_epi32(_mm256_setzero_si256(), s));
            r.off[b] = _mm512_reduce_add_epi32(_mm512_zextsi256_si512(s)) / 16;   /* 128 * sum / 16 */
        }
    }
}

/* --- AVX-512: reading weights from memory
 *
 * One token (T == 1) reads the matrix one row at a time, from its first byte
 * to its last: rows are contiguous, so that is a single sequential stream,
 * the pattern the hardware prefetcher follows best, and each step also asks
 * for the bytes STREAM_AHEAD_BYTES further on (rows.h), into L1. Tiles
 * of several tokens read R rows side by side, R streams, and ask for the
 * same place R rows further on, the next tile's rows, into L2 (not L1: for
 * long rows the next tile is bigger than L1).
 *
 * Measured on one core of an AMD EPYC Zen 5 (tools/kbench --type Q8_0
 * --shape 5632x2048 --threads 1, 256 MiB of weights cycled): 4 rows side by
 * side with the L2 prefetch 23.7 GB/s, the same into L1 28.3, one row at a
 * time with no software prefetch 32.1, one row at a time with L1 prefetch 1,
 * 2 and 4 rows (2.2, 4.4, 8.7 KB) ahead 31.2, 34.8 and 37.8; an AVX-512 read
 * of the same memory 38 to 40. A distance in rows served short rows badly
 * (Q4_0's 1152-byte rows: 33 GB/s at 4 rows ahead, 39 at 12), so it is in
 * bytes; 8, 12 and 16 KiB side by side over F32, Q8_0, Q4_0, Q4_1, Q5_0,
 * Q6_K and Q4_K put 12 KiB first or level for each. Before all this, 4 rows
 * at a time with the L2 prefetch had taken Q8_0 from about half of a plain
 * read to about 60%. The policy is prefetch_weights (rows.h), shared
 * with quant_avx512.c.
 *
 * An Intel core wants the other way. On one Xeon Emerald Rapids core
 * (kbench --shape 5632x2048 --threads 1, LLM_DECODE_ROWS 1 and 4 alternated,
 * three runs each, against the best read beside each) four rows side by side
 * read F16 at 0.92-1.03 of the read where one row read 0.71-0.81, F32
 * 1.01-1.13 against 0.75-0.90, Q8_0 0.83-0.85 against 0.71-0.77. So decoding
 * reads four rows at a time on Intel and one elsewhere (ops_decode_rows); a
 * row's sum is the same either way. */

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

/* A pair of blocks (68 bytes at p) as one 64-byte load and a masked load
 * of the last 4 bytes, the values and the two scales gathered out of them by
 * word permutes (every field of the pair starts on an even byte): wq the 64
 * values xor flip, ws the scales spread as q8_weight_scales spreads them.
 * The same bits as two 32-byte loads, an insert and the scales through
 * general registers, which decoding (the 1 x 1 tile) used to do: with them
 * the kernel streamed from memory at 0.90 to 0.94 of the read bandwidth, with
 * these 0.95 to 1.05 (one Zen 5 core, kbench --type Q8_0 --shape 5632x2048,
 * six alternating runs each), though from cache it is no faster. The empty
 * asm keeps a and c in registers (see q32_quad in quant_avx512.c). */
AVX512_INLINE void q8_pair_loaded(const uint8_t *p, __m512i flip, __m512i *wq, __m512 *ws) {
    const Words32 values = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16,
                            18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33};
    const Words32 scales = {0, 17};
    __m512i a = _mm512_loadu_si512(p), c = _mm512_maskz_loadu_epi16(0x3, p + 64);
    __asm__("" : "+v"(a), "+v"(c));
    *wq = _mm512_xor_si512(_mm512_permutex2var_epi16(a, (__m512i)values, c), flip);
    __m512i d = _mm512_permutex2var_epi16(a, (__m512i)scales, c);
    *ws = q8_pair_spread(_mm_cvtph_ps(_mm512_castsi512_si128(d)));
}

/* Blocks b and b+1 (only b when two == 0; the upper lanes then add zeros). */
AVX512_INLINE void q8_tile_step(__m512 acc[4][4], const uint8_t *w, size_t wstride,
                                const ActRow *xr, int b, int R, int TT, int two) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512i wq[4];
    __m512 ws[4];
    for (int r = 0; r < R; r++) {
        const BlockQ8_0 *blk = (const BlockQ8_0 *)(w + r * wstride) + b;
        prefetch_weights((const uint8_t *)blk, 1, R, TT, wstride);
        if (R == 1 && TT == 1 && two) {   /* decoding: q8_pair_loaded */
            q8_pair_loaded((const uint8_t *)blk, flip, &wq[r], &ws[r]);
            continue;
        }
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
        prefetch_weights((const uint8_t *)r0, 1, 4, 4, ws);
        prefetch_weights((const uint8_t *)r1, 1, 4, 4, ws);
        prefetch_weights((const uint8_t *)r2, 1, 4, 4, ws);
        prefetch_weights((const uint8_t *)r3, 1, 4, 4, ws);
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
        prefetch_weights((const uint8_t *)r0, 1, 4, 4, ws);
        prefetch_weights((const uint8_t *)r1, 1, 4, 4, ws);
        prefetch_weights((const uint8_t *)r2, 1, 4, 4, ws);
        prefetch_weights((const uint8_t *)r3, 1, 4, 4, ws);
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
static AVX512_FN void q8_rows1(const MatmulJob *j, int n0, int n1) {
    ROWS_T1(q8_tile(j, n, 0, 4, 1), q8_tile(j, n, 0, 1, 1));
}
static const TileSet Q8_TILES = {q8_r4t4, q8_r1t4, q8_r4t1, q8_r1t1, q8_r4t2, q8_r4t3, q8_rows1};

/* --- AVX-512: F32 and F16 tiles (T == 1, and batches of a few tokens)
 *
 * R rows at once share each load of x, TT tokens share each load of W; one
 * FMA chain per (row, token). F16 rows are widened in registers (vcvtph2ps),
 * so they cost 2 bytes of memory per weight. */

/* 16 weights from k (only `m` of them at the end of a row) as floats. */
AVX512_INLINE __m512 wide_load(const uint8_t *row, int k, DType type, __mmask16 m) {
    if (type == DT_F16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + k));
    if (type == DT_BF16)   /* a BF16 is the top half of a float: widen by a shift of 16 */
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + k)), 16));
    return _mm512_maskz_loadu_ps(m, (const float *)row + k);
}

/* out[t][n + r] for r < R, t0 <= t < t0 + TT. */
AVX512_INLINE void float_tile(const MatmulJob *job, int n, int t0, DType type, int R, int TT) {
    int N = job->W->N, K = job->W->K;
    const uint8_t *w = row_ptr(job->W, n);
    size_t wstride = dtype_row_bytes(type, K), wsize = type == DT_F32 ? 4 : 2;
    const float *x = job->x + (size_t)t0 * K;
    __m512 acc[4][4], wv[4];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++) acc[r][t] = _mm512_setzero_ps();
    int k = 0;
    for (; k + 16 <= K; k += 16) {
        for (int r = 0; r < R; r++) {
            prefetch_weights(w + r * wstride + k * wsize, 1, R, TT, wstride);
            /* F32 decoding reads one line per step, and asks for each line
             * twice, the second time one step later: from memory on one Zen 5
             * core the kernel streamed at 0.81-0.82 of the read with one
             * request per line, 0.86-0.91 with two (kbench --type F32
             * --shape 5632x2048, alternating runs). The other formats
             * gained nothing from a second request. */
            if (R == 1 && TT == 1 && type == DT_F32)
                _mm_prefetch((const char *)(w + k * wsize) + STREAM_AHEAD_BYTES + 64, _MM_HINT_T0);
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
    size_t ws = dtype_row_bytes(type, K), wsize = type == DT_F32 ? 4 : 2;
    const float *x0 = job->x + (size_t)t0 * K, *x1 = x0 + K, *x2 = x1 + K, *x3 = x2 + K;
    __m512 a00 = _mm512_setzero_ps(), a10 = a00, a20 = a00, a30 = a00, a01 = a00, a11 = a00,
           a21 = a00, a31 = a00, a02 = a00, a12 = a00, a22 = a00, a32 = a00, a03 = a00,
           a13 = a00, a23 = a00, a33 = a00;
    for (int k = 0; k < K; k += 16) {
        __mmask16 m = K - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (K - k)) - 1);
        prefetch_weights(w + k * wsize, 1, 4, 4, ws);
        prefetch_weights(w + ws + k * wsize, 1, 4, 4, ws);
        prefetch_weights(w + 2 * ws + k * wsize, 1, 4, 4, ws);
        prefetch_weights(w + 3 * ws + k * wsize, 1, 4, 4, ws);
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
static AVX512_FN void f32_rows1(const MatmulJob *j, int n0, int n1) {
    ROWS_T1(float_tile(j, n, 0, DT_F32, 4, 1), float_tile(j, n, 0, DT_F32, 1, 1));
}
static const TileSet F32_TILES = {f32_r4t4, f32_r1t4, f32_r4t1, f32_r1t1, f32_r4t2, f32_r4t3, f32_rows1};

static AVX512_FN void f16_r4t4(const MatmulJob *j, int n, int t) { float_tile_4xn(j, n, t, DT_F16, 4); }
static AVX512_FN void f16_r1t4(const MatmulJob *j, int n, int t) { float_tile(j, n, t, DT_F16, 1, 4); }
static AVX512_FN void f16_r4t1(const MatmulJob *j, int n, int t) { float_tile(j, n, t, DT_F16, 4, 1); }
static AVX512_FN void f16_r1t1(const MatmulJob *j, int n, int t) { float_tile(j, n, t, DT_F16, 1, 1); }
static AVX512_FN void f16_r4t2(const MatmulJob *j, int n, int t) { float_tile_4xn(j, n, t, DT_F16, 2); }
static AVX512_FN void f16_r4t3(const MatmulJob *j, int n, int t) { float_tile_4xn(j, n, t, DT_F16, 3); }
static AVX512_FN void f16_rows1(const MatmulJob *j, int n0, int n1) {
    ROWS_T1(float_tile(j, n, 0, DT_F16, 4, 1), float_tile(j, n, 0, DT_F16, 1, 1));
}
static const TileSet F16_TILES = {f16_r4t4, f16_r1t4, f16_r4t1, f16_r1t1, f16_r4t2, f16_r4t3, f16_rows1};
static AVX512_FN void bf16_r4t4(const MatmulJob *j, int n, int t) { float_tile_4xn(j, n, t, DT_BF16, 4); }
static AVX512_FN void bf16_r1t4(const MatmulJob *j, int n, int t) { float_tile(j, n, t, DT_BF16, 1, 4); }
static AVX512_FN void bf16_r4t1(const MatmulJob *j, int n, int t) { float_tile(j, n, t, DT_BF16, 4, 1); }
static AVX512_FN void bf16_r1t1(const MatmulJob *j, int n, int t) { float_tile(j, n, t, DT_BF16, 1, 1); }
static AVX512_FN void bf16_r4t2(const MatmulJob *j, int n, int t) { float_tile_4xn(j, n, t, DT_BF16, 2); }
static AVX512_FN void bf16_r4t3(const MatmulJob *j, int n, int t) { float_tile_4xn(j, n, t, DT_BF16, 3); }
static AVX512_FN void bf16_rows1(const MatmulJob *j, int n0, int n1) {
    ROWS_T1(float_tile(j, n, 0, DT_BF16, 4, 1), float_tile(j, n, 0, DT_BF16, 1, 1));
}
static const TileSet BF16_TILES = {bf16_r4t4, bf16_r1t4, bf16_r4t1, bf16_r1t1, bf16_r4t2, bf16_r4t3, bf16_rows1};

/* Weight rows of one pass over the tokens: small enough to stay in L2 while
 * every group of four tokens visits them, so they come from memory once. */
enum { TILE_CHUNK_BYTES = 256 * 1024 };

/* Rows [n0, n1) for all T tokens, tile by tile: over a chunk of rows, tokens
 * four at a time (their activations stay in L1), and within that rows four at
 * a time; the 1 to 3 tokens left over make one more pass with a 4 x 1, 4 x 2
 * or 4 x 3 tile. T == 1 is one pass down the rows. */
static void rows_by_tiles(const MatmulJob *job, const TileSet *ts, int n0, int n1) {
    int T = job->T;
    size_t row_bytes = dtype_row_bytes(job->W->type, job->W->K);
    int chunk = row_bytes ? (int)(TILE_CHUNK_BYTES / row_bytes) / 4 * 4 : 4;
    if (chunk < 4) chunk = 4;
    for (int c0 = n0; c0 < n1; c0 += chunk) {
        int c1 = c0 + chunk < n1 ? c0 + chunk : n1, t = 0, n;
        if (T == 1) {   /* one or four rows at a time (see above) */
            ts->rows1(job, c0, c1);
            continue;
        }
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

/* The Q32Act layout: each block quantized as for Q8_0, its halves put in
 * their quad's places, and the eight-value sums of each lane. */
AVX512_FN void q32_act_pack_avx512(uint8_t *act, const float *x, int T, int K) {
    int nb = K / QK8_0;
    size_t nq = (size_t)q32_quads(K), stride = q32_act_stride(K);
    for (int t = 0; t < T; t++) {
        uint8_t *p = act + (size_t)t * stride;
        int8_t *qs = (int8_t *)p;
        int32_t *corr = (int32_t *)(p + 128 * nq);
        float *d = (float *)(p + 192 * nq), *ds = (float *)(p + 208 * nq);
        memset(p, 0, stride);   /* the padding blocks of the last quad add nothing */
        for (int b = 0; b < nb; b++) {
            int8_t q[QK8_0];
            int quad = b / 4, j = b % 4;
            d[b] = fp16_to_fp32(q8_0_quantize_block_avx512(q, x + (size_t)t * K + (size_t)b * QK8_0));
            memcpy(qs + 128 * quad + 16 * j, q, 16);
            memcpy(qs + 128 * quad + 64 + 16 * j, q + 16, 16);
            int32_t all = 0;
            for (int i = 0; i < 4; i++) {
                int32_t sum = 0;
                for (int k = 0; k < 4; k++) sum += q[4 * i + k] + q[16 + 4 * i + k];
                corr[16 * quad + 4 * j + i] = -128 * sum;
                all += sum;
            }
            ds[2 * b] = d[b];
            ds[2 * b + 1] = d[b] * (float)all;
        }
    }
}

/* --- attention's products (ops_scores, ops_add_weighted_rows): a head of S
 * floats, masked where S is not a multiple of 16.
 *
 * Scores: each row's products in two accumulators, then one horizontal sum.
 * Written as a plain loop with `omp simd reduction`, GCC 12 ended each row's
 * dot product with sixteen dependent scalar adds through the stack: with the
 * exponentials, a third of decoding's attention time. */
AVX512_INLINE __mmask16 tail_mask(int left) {   /* the first min(left, 16) lanes; none if left <= 0 */
    return left >= 16 ? (__mmask16)0xFFFF : left > 0 ? (__mmask16)((1u << left) - 1) : (__mmask16)0;
}

AVX512_FN void scores_avx512(float *s, const float *q, const float *rows, int n, int S, size_t stride,
                             float scale) {
    for (int j = 0; j < n; j++) {
        const float *k = rows + (size_t)j * stride;
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        int i = 0;
        for (; i + 32 <= S; i += 32) {
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), _mm512_loadu_ps(k + i), a0);
            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16), _mm512_loadu_ps(k + i + 16), a1);
        }
        for (; i < S; i += 16) {
            __mmask16 m = tail_mask(S - i);
            a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + i), _mm512_maskz_loadu_ps(m, k + i), a0);
        }
        s[j] = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1)) * scale;
    }
}

/* The output 64 floats at a time, in four registers across all n rows: one
 * load and one store of each per call, where the loop form loaded, added and
 * stored the whole output again for every row. */
AVX512_FN void add_weighted_rows_avx512(float *out, const float *w, const float *rows, int n, int S,
                                        size_t stride) {
    for (int i0 = 0; i0 < S; i0 += 64) {
        __mmask16 m[4];
        __m512 acc[4];
        for (int v = 0; v < 4; v++) {
            m[v] = tail_mask(S - i0 - 16 * v);
            acc[v] = _mm512_maskz_loadu_ps(m[v], out + i0 + 16 * v);
        }
        for (int j = 0; j < n; j++) {
            const float *r = rows + (size_t)j * stride + i0;
            __m512 wj = _mm512_set1_ps(w[j]);
            for (int v = 0; v < 4; v++) acc[v] = _mm512_fmadd_ps(wj, _mm512_maskz_loadu_ps(m[v], r + 16 * v), acc[v]);
        }
        for (int v = 0; v < 4; v++) _mm512_mask_storeu_ps(out + i0 + 16 * v, m[v], acc[v]);
    }
}

/* ops_read_sum: four lines per step, into four accumulators (one would tie
 * each add to the last), each line asked for 1 KiB ahead. */
AVX512_FN uint64_t read_sum_avx512(const uint8_t *p, size_t bytes) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 256 <= bytes; i += 256) {
        for (int l = 0; l < 4; l++) _mm_prefetch((const char *)(p + i + 1024 + 64 * l), _MM_HINT_T0);
        a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(p + i));
        a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(p + i + 64));
        a2 = _mm512_add_epi64(a2, _mm512_loadu_si512(p + i + 128));
        a3 = _mm512_add_epi64(a3, _mm512_loadu_si512(p + i + 192));
    }
    uint64_t lanes[8], sum = 0;   /* added as unsigned: wrapping is defined */
    _mm512_storeu_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
    for (int l = 0; l < 8; l++) sum += lanes[l];
    return sum;
}

/* One row of K halves widened to floats, for sgemm. */
AVX512_FN void f16_widen_avx512(float *out, const uint16_t *h, int K) {
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

/* GCC 12 compiled the 4 x 4 tile below with one register for the weights,
 * loading each weight vector again for each of its four FMAs: 32 loads per
 * 16 FMAs, which held the tile to about 85 GFLOP/s on a Zen 5 core with the
 * data in cache. An empty asm statement that claims to change the four
 * vectors makes it keep them in registers: 8 loads per 16 FMAs. */
#define KEEP_IN_REGISTERS(a, b, c, d) __asm__("" : "+v"(a), "+v"(b), "+v"(c), "+v"(d))

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
        KEEP_IN_REGISTERS(w0v, w1v, w2v, w3v);
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
static AVX512_FN void bf16_rows_kblocked(const MatmulJob *job, int part, int n0, int n1) {
    float_rows_kblocked(job, n0, n1, DT_BF16);
}

/* --- AVX-512: BF16E, the exponent-coded BF16 of the codec's fast tier
 *
 * formats.h draws the block: 64 sign-and-mantissa bytes, three planes of
 * code bits, the escaped exponents apart. A block becomes four vectors of
 * 16 floats in registers, with no buffer between the matrix and the FMAs:
 *   1. the codes: each plane is a mask of 64 bits (kmovq), and three masked
 *      adds build the code of every byte (0..7);
 *   2. the exponent, already rotated right by a bit: a byte shuffle looks
 *      the code up in a 16-byte table (the 7 exponents, rotated), and the
 *      escapes are loaded over it with vpexpandb, which hands the next
 *      popcount(escapes) bytes of the escape stream to the lanes whose code
 *      is 7, in lane order (AVX512-VBMI2): no branch, whatever the block;
 *   3. the BF16 word as two bytes, each one vpternlogd that takes 7 bits
 *      from one source and 1 from the other: high = sign | e >> 1, low =
 *      (e & 1) << 7 | mantissa;
 *   4. two rounds of unpacks: bytes to words (low, high), words to floats
 *      (a zero below each word, so the float's bits are the BF16 word << 16).
 * Unpacks work within 128-bit lanes, which is why the block stores weight k
 * at byte 16 (k / 4 % 4) + 4 (k / 16) + k % 4: after them vector q holds
 * weights 16 q .. 16 q + 15 in order, exactly what BF16's wide_load gives
 * for the same 16 weights. The FMAs that follow are BF16's, in BF16's
 * order, so every result has the bits of the BF16 matrix it was made from.
 * About 14 instructions a block where BF16 widens 64 weights with 8. */

#define BF16E_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi2,f16c,fma,popcnt")))
#define BF16E_INLINE static inline __attribute__((always_inline)) BF16E_FN

/* The 7 exponents of the table, rotated right by one bit, in each 128-bit lane. */
BF16E_INLINE __m512i bf16e_table(const Bf16eData *sd) {
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)sd->rot));
}

/* Block blk to weights 0-15, 16-31, 32-47, 48-63 in f[0..3]; *esc moves past its escapes. */
BF16E_INLINE void bf16e_block(const uint8_t *blk, const uint8_t **esc, __m512i tab, __m512 f[4]) {
    __mmask64 k0 = _cvtu64_mask64(bf16e_plane(blk, 0)), k1 = _cvtu64_mask64(bf16e_plane(blk, 1)),
              k2 = _cvtu64_mask64(bf16e_plane(blk, 2));
    __m512i code = _mm512_maskz_mov_epi8(k0, _mm512_set1_epi8(1));
    code = _mm512_mask_add_epi8(code, k1, code, _mm512_set1_epi8(2));
    code = _mm512_mask_add_epi8(code, k2, code, _mm512_set1_epi8(4));
    __mmask64 ke = _kand_mask64(_kand_mask64(k0, k1), k2);
    __m512i er = _mm512_mask_expandloadu_epi8(_mm512_shuffle_epi8(tab, code), ke, *esc);
    *esc += _mm_popcnt_u64(_cvtmask64_u64(ke));
    __m512i sm = _mm512_loadu_si512(blk), low7 = _mm512_set1_epi8(0x7f), zero = _mm512_setzero_si512();
    /* 0xca: a ? b : c bit by bit, the first operand choosing */
    __m512i hi = _mm512_ternarylogic_epi32(low7, er, sm, 0xca);   /* e >> 1 below, the sign above */
    __m512i lo = _mm512_ternarylogic_epi32(low7, sm, er, 0xca);   /* the mantissa below, e & 1 above */
    __m512i wa = _mm512_unpacklo_epi8(lo, hi), wb = _mm512_unpackhi_epi8(lo, hi);
    f[0] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, wa));
    f[1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, wa));
    f[2] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, wb));
    f[3] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, wb));
}

/* out[t][n + r] for r < R, t0 <= t < t0 + TT: float_tile's chains, the
 * weights decoded a block at a time. For each (row, token) the FMAs come in
 * BF16's order (16 weights after 16 weights), so the bits are BF16's. */
BF16E_INLINE void bf16e_tile(const MatmulJob *job, int n, int t0, int R, int TT) {
    int N = job->W->N, K = job->W->K;
    const Bf16eData *sd = job->W->data;
    const uint8_t *w = bf16e_row(job->W, n), *esc[4];
    size_t ws = dtype_row_bytes(DT_BF16E, K);
    for (int r = 0; r < R; r++) esc[r] = sd->esc + sd->esc_row[n + r];
    __m512i tab = bf16e_table(sd);
    const float *x = job->x + (size_t)t0 * K;
    __m512 acc[4][4], f[4];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++) acc[r][t] = _mm512_setzero_ps();
    for (int k = 0; k < K; k += BF16E_BLOCK, w += BF16E_BLOCK_BYTES) {
        for (int r = 0; r < R; r++) {
            prefetch_weights(w + r * ws, BF16E_BLOCK_BYTES, R, TT, ws);
            bf16e_block(w + r * ws, &esc[r], tab, f);
            for (int q = 0; q < 4; q++)
                for (int t = 0; t < TT; t++)
                    acc[r][t] = _mm512_fmadd_ps(f[q], _mm512_loadu_ps(x + (size_t)t * K + k + 16 * q), acc[r][t]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++) job->out[(size_t)(t0 + t) * N + n + r] = _mm512_reduce_add_ps(acc[r][t]);
}

static BF16E_FN void bf16e_r4t4(const MatmulJob *j, int n, int t) { bf16e_tile(j, n, t, 4, 4); }
static BF16E_FN void bf16e_r1t4(const MatmulJob *j, int n, int t) { bf16e_tile(j, n, t, 1, 4); }
static BF16E_FN void bf16e_r4t1(const MatmulJob *j, int n, int t) { bf16e_tile(j, n, t, 4, 1); }
static BF16E_FN void bf16e_r1t1(const MatmulJob *j, int n, int t) { bf16e_tile(j, n, t, 1, 1); }
static BF16E_FN void bf16e_r4t2(const MatmulJob *j, int n, int t) { bf16e_tile(j, n, t, 4, 2); }
static BF16E_FN void bf16e_r4t3(const MatmulJob *j, int n, int t) { bf16e_tile(j, n, t, 4, 3); }
static BF16E_FN void bf16e_rows1(const MatmulJob *j, int n0, int n1) {
    for (int n = n0; n < n1; n++) bf16e_tile(j, n, 0, 1, 1);
}
static const TileSet BF16E_TILES = {bf16e_r4t4, bf16e_r1t4, bf16e_r4t1, bf16e_r1t1, bf16e_r4t2, bf16e_r4t3,
                                    bf16e_rows1};

/* float_rows_kblocked for BF16E: the same chunks, k-blocks and tiles, each
 * row's k-block decoded into wbuf where BF16 widens it, and each row of the
 * chunk carrying its place in the escape stream from one k-block to the
 * next (k-blocks are whole blocks of 64). Same accumulators, same order,
 * same bits as BF16. */
static BF16E_FN void bf16e_rows_kblocked(const MatmulJob *job, int n0, int n1) {
    int N = job->W->N, K = job->W->K, T = job->T;
    const Bf16eData *sd = job->W->data;
    size_t ws = dtype_row_bytes(DT_BF16E, K);
    int kb = KB_X_BYTES / (int)sizeof(float) / T / BF16E_BLOCK * BF16E_BLOCK;
    kb = kb > KB_MAX ? KB_MAX : kb < BF16E_BLOCK ? BF16E_BLOCK : kb;
    int rows = KB_ACC_BYTES / (int)sizeof(__m512) / T / 4 * 4;
    rows = rows < 4 ? 4 : rows;
    assert(4 * T <= KB_ACC_BYTES / (int)sizeof(__m512) && T * kb <= KB_X_BYTES / (int)sizeof(float));
    __m512i tab = bf16e_table(sd);
    __m512 acc[KB_ACC_BYTES / sizeof(__m512)];
    const uint8_t *esc[KB_ACC_BYTES / sizeof(__m512) / 4];   /* rows <= this */
    float xbuf[KB_X_BYTES / sizeof(float)] __attribute__((aligned(64)));
    float wbuf[4 * KB_MAX] __attribute__((aligned(64)));
    for (int c0 = n0; c0 < n1; c0 += rows) {
        int c1 = c0 + rows < n1 ? c0 + rows : n1, groups = (c1 - c0 + 3) / 4;
        for (int i = 0; i < groups * 4 * T; i++) acc[i] = _mm512_setzero_ps();
        for (int n = c0; n < c1; n++) esc[n - c0] = sd->esc + sd->esc_row[n];
        int c2 = c1 + rows < n1 ? c1 + rows : n1;
        const uint8_t *pf_base = bf16e_row(job->W, c1);
        size_t pf_at = 0, pf_len = (size_t)(c2 - c1) * ws;
        for (int k0 = 0; k0 < K; k0 += kb) {
            int len = K - k0 < kb ? K - k0 : kb;
            for (int t = 0; t < T; t++)
                kb_pack_row(xbuf + t * kb, (const uint8_t *)(job->x + (size_t)t * K), DT_F32, k0, len);
            for (int g = 0; g < groups; g++) {
                int n = c0 + 4 * g, R = c1 - n < 4 ? c1 - n : 4;
                for (int r = 0; r < R; r++) {
                    const uint8_t *blk = bf16e_row(job->W, n + r) + (size_t)(k0 / BF16E_BLOCK) * BF16E_BLOCK_BYTES;
                    __m512 f[4];
                    for (int k = 0; k < len; k += BF16E_BLOCK, blk += BF16E_BLOCK_BYTES) {
                        bf16e_block(blk, &esc[n + r - c0], tab, f);
                        for (int q = 0; q < 4; q++) _mm512_store_ps(wbuf + r * kb + k + 16 * q, f[q]);
                    }
                }
                __m512 *ag = acc + (size_t)g * 4 * T;
                int t = 0;
                if (R == 4) {
                    for (; t + 4 <= T; t += 4, pf_at += (size_t)len * 4)
                        kb_tile_4x4(ag + 4 * t, wbuf, xbuf + t * kb, kb, len,
                                    pf_at + (size_t)len * 4 <= pf_len ? pf_base + pf_at : NULL);
                    for (; t < T; t++, pf_at += (size_t)len * 4)
                        kb_tile_4x1(ag + 4 * t, wbuf, xbuf + t * kb, kb, len,
                                    pf_at + (size_t)len * 4 <= pf_len ? pf_base + pf_at : NULL);
                    continue;
                }
                for (int r = 0; r < R; r++) {
                    for (t = 0; t + 4 <= T; t += 4)
                        kb_tile_1xn(ag + 4 * t + r, wbuf + r * kb, xbuf + t * kb, kb, len, 4);
                    for (; t < T; t++) kb_tile_1xn(ag + 4 * t + r, wbuf + r * kb, xbuf + t * kb, kb, len, 1);
                }
            }
        }
        for (int n = c0; n < c1; n++) {
            const __m512 *an = acc + (size_t)(n - c0) / 4 * 4 * T + (n - c0) % 4;
            for (int t = 0; t < T; t++) job->out[(size_t)t * N + n] = _mm512_reduce_add_ps(an[4 * t]);
        }
    }
}

int bf16e_avx512_ok(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vbmi2") && __builtin_cpu_supports("popcnt");
}

BF16E_FN void bf16e_rows_avx512(const MatmulJob *job, int part, int n0, int n1) {
    (void)part;
    if (job->T < KB_MIN_T) rows_by_tiles(job, &BF16E_TILES, n0, n1);
    else bf16e_rows_kblocked(job, n0, n1);
}

/* Row n of a BF16E matrix decoded to floats (the sgemm path's widening). */
BF16E_FN void bf16e_widen_avx512(float *out, const Mat *W, int n) {
    const Bf16eData *d = W->data;
    const uint8_t *blk = bf16e_row(W, n), *esc = d->esc + d->esc_row[n];
    __m512i tab = bf16e_table(d);
    __m512 f[4];
    for (int k = 0; k < W->K; k += BF16E_BLOCK, blk += BF16E_BLOCK_BYTES) {
        bf16e_block(blk, &esc, tab, f);
        for (int q = 0; q < 4; q++) _mm512_storeu_ps(out + k + 16 * q, f[q]);
    }
}

/* --- The rows functions that ops.c runs on each thread's range of rows */

void f32_rows_avx512(const MatmulJob *job, int part, int n0, int n1) {
    if (job->T < KB_MIN_T) rows_by_tiles(job, &F32_TILES, n0, n1);
    else f32_rows_kblocked(job, part, n0, n1);
}

void f16_rows_avx512(const MatmulJob *job, int part, int n0, int n1) {
    if (job->T < KB_MIN_T) rows_by_tiles(job, &F16_TILES, n0, n1);
    else f16_rows_kblocked(job, part, n0, n1);
}

void bf16_rows_avx512(const MatmulJob *job, int part, int n0, int n1) {
    if (job->T < KB_MIN_T) rows_by_tiles(job, &BF16_TILES, n0, n1);
    else bf16_rows_kblocked(job, part, n0, n1);
}

void q8_0_rows_avx512(const MatmulJob *job, int part, int n0, int n1) {
    rows_by_tiles(job, &Q8_TILES, n0, n1);
}
#else
typedef int tiles_avx512_is_empty_here;   /* ISO C wants something in every file */
#endif /* OPS_X86 */
