/* tiles_amx.c - Q8_0, Q4_0 and Q4_K products on Intel's AMX tiles, for
 * batches of tokens.
 *
 * AMX (Sapphire Rapids and later Xeons) adds eight tile registers of up to
 * 16 rows of 64 bytes and one instruction, tdpbssd, that multiplies a tile of
 * int8 (16 rows by K values, K <= 64) by another (K by 16 columns, stored
 * as K / 4 rows of 16 groups of four) and adds the 16 x 16 int32 results to
 * a third: 16 x 16 x K products in one instruction, where vpdpbusd makes 64.
 * One core's peak (tools/ceilings.h) is about seven times its VNNI peak.
 *
 * How a block format maps onto it. A block is 32 int8 values with one scale,
 * and the scales differ from block to block, so the integer sum of each
 * block must leave the tile before the next block's is added: one tdpbssd
 * per block (K = 32) into a zeroed tile, the 16 x 16 sums stored to memory,
 * and then AVX-512 adds them into float accumulators:
 *     acc[row][token] = fma((float)S_b, d_w[b] * d_x[b], acc[row][token])
 * for b = 0, 1, ... in order, one chain per (row, token). That is the order
 * of this path, and matmul_blocks_ref (ref.c) is its plain loop: the same
 * bits. It is not the VNNI tiles' order (rows.h, q8_0_block_into_lanes,
 * sixteen lanes of sums of four), so a token's result here differs from the
 * same token alone by float rounding (ops.h says when this path runs).
 *
 * Which side is which. The first tile (A, 16 rows of 32 bytes) is 16 weight
 * rows: row r of it is block b of weight row m + r. For Q8_0 those are the
 * 32 values that follow the block's scale, read in place with the matrix's
 * row stride: nothing is repacked or copied. Q4_0's nibbles are unpacked to
 * bytes (q - 8) a chunk of blocks at a time into a buffer on the stack, once
 * for all the tokens. The second tile (B) is 16 tokens in the grouped layout
 * tdpbssd wants, made once per call by amx_act_pack (rows.h, "Q8_0
 * activations for AMX"). The results C[r][n] are row m + r against token n:
 * sixteen zmm accumulators of 16 tokens each.
 *
 * The loops: for each 16 weight rows, for each chunk of AMX_CHUNK blocks
 * (its weight scales widened, Q4_0's values unpacked), for each group of 16
 * tokens (its accumulators loaded from and stored to memory around the
 * chunk), the blocks two at a time: b in tiles 0, 2, 4 and b + 1 in 1, 3,
 * 5, so that the second tdpbssd runs while the first block's sums are added.
 * At most AMX_MAX_GROUPS groups are held at once; more tokens take another
 * pass. A matrix whose rows are not a multiple of 16 computes its last 16
 * rows again from N - 16 (a row's sums are made alike wherever its tile
 * starts) and writes only its own.
 *
 * Linux keeps the tile registers off until a process asks for them
 * (arch_prctl ARCH_REQ_XCOMP_PERM); amx_ok asks once. */
#include "kernels/rows.h"

#ifdef OPS_X86
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AMX_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma,amx-tile,amx-int8")))
#define AMX_INLINE static inline __attribute__((always_inline)) AMX_FN

int amx_ok(void) {
    static int known, ok;
    if (!known) {
        unsigned a, b, c, d;
        ok = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 24 & 1) && (d >> 25 & 1) &&   /* AMX-TILE, -INT8 */
             syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
        known = 1;
    }
    return ok;
}

/* The tiles' shapes (palette 1): 0 and 1 hold 16 weight rows of one block
 * (32 bytes each), 2 and 3 a block of 16 tokens (8 rows of 64 bytes: four
 * values of each token), 4 and 5 the 16 x 16 int32 sums. A static constant,
 * so that all 64 bytes exist before ldtilecfg reads them. */
typedef struct __attribute__((packed)) {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} AmxConfig;

static const AmxConfig AMX_BLOCKS = {
    .palette = 1,
    .colsb = {32, 32, 64, 64, 64, 64},
    .rows = {16, 16, 8, 8, 16, 16},
};

/* Q4_K with its scales split (below): 0 and 1 hold 16 weight rows of two
 * sub-blocks (64 bytes each), 2 two blocks of 16 tokens (16 rows of 64
 * bytes), 4 and 5 the 16 x 16 int32 sums. */
static const AmxConfig AMX_PAIRS = {
    .palette = 1,
    .colsb = {64, 64, 64, 0, 64, 64},
    .rows = {16, 16, 16, 0, 16, 16},
};

/* Blocks unpacked or widened at a time, and token groups kept at once. */
enum { AMX_CHUNK = 32, AMX_MAX_GROUPS = 8 };

/* --- activations */

/* Every token's bytes are written; a last group of fewer than 16 also has
 * padding tokens, whose columns the tiles compute and nobody reads: zeros,
 * so that they are never NaNs or subnormals in the float work. */
static void amx_zero_padding(uint8_t *act, int T, size_t gbytes) {
    if (T % AMX_TOKENS) memset(act + (size_t)(T / AMX_TOKENS) * gbytes, 0, gbytes);
}

/* 32 values of token n into a block of the layout: four to each of its 8 rows. */
static inline void amx_put_block(uint8_t *blk, int n, const int8_t *q) {
    for (int r = 0; r < QK8_0 / 4; r++) memcpy(blk + r * 64 + 4 * n, q + 4 * r, 4);
}

AMX_FN void amx_act_pack(uint8_t *act, const float *x, int T, int K) {
    int nb = K / QK8_0;
    size_t gbytes = amx_group_bytes(K);
    amx_zero_padding(act, T, gbytes);
    enum { ROUNDED = 64 };   /* blocks rounded at a time */
    BlockQ8_0 q[ROUNDED];
    for (int t = 0; t < T; t++) {
        uint8_t *g = act + (size_t)(t / AMX_TOKENS) * gbytes;
        float *d = (float *)(g + (size_t)nb * AMX_BLOCK_BYTES);
        int n = t % AMX_TOKENS;
        for (int b0 = 0; b0 < nb; b0 += ROUNDED) {
            int len = nb - b0 < ROUNDED ? nb - b0 : ROUNDED;
            quantize_row_q8_0_avx512(q, x + (size_t)t * K + (size_t)b0 * QK8_0, len * QK8_0);
            for (int b = b0; b < b0 + len; b++) {
                d[b * AMX_TOKENS + n] = fp16_to_fp32(q[b - b0].d);
                amx_put_block(g + (size_t)b * AMX_BLOCK_BYTES, n, q[b - b0].qs);
            }
        }
    }
}

/* --- 16 weight rows, made ready for the tiles */

/* The fp16 scales at the start of blocks b0 .. b0 + nb - 1 of the 16 rows
 * from w (`ws` bytes apart, blocks `bb` bytes long) widened into dw: one
 * gather of the 4 bytes at each row's block (its scale and what follows),
 * the low words kept. */
AMX_INLINE void amx_scales(float *dw, const uint8_t *w, size_t ws, size_t bb, int b0, int nb) {
    const __m512i rows_at = _mm512_mullo_epi32(_mm512_set1_epi32((int)ws),
                                               _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    for (int b = 0; b < nb; b++) {
        __m512i v = _mm512_i32gather_epi32(rows_at, (const void *)(w + (size_t)(b0 + b) * bb), 1);
        _mm512_store_ps(dw + 16 * b, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v)));
    }
}

/* Q4_0 blocks b0 .. b0 + nb - 1 of the 16 rows from w into a: block b's
 * tile at a + 512 b, row r's 32 values (q - 8: values 0-15 from the low
 * nibbles, 16-31 from the high ones) at + 32 r. Four rows a register. */
AMX_INLINE void amx_unpack_q4_0(uint8_t *a, const uint8_t *w, size_t ws, int b0, int nb) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), eight = _mm512_set1_epi8(8);
    const __m512i first = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), second = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk = w + (size_t)(b0 + b) * sizeof(BlockQ4_0) + 2;   /* the nibbles */
        for (int r = 0; r < 16; r += 4) {
            __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(blk + r * ws)));
            z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(blk + (r + 1) * ws)), 1);
            z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(blk + (r + 2) * ws)), 2);
            z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(blk + (r + 3) * ws)), 3);
            __m512i lo = _mm512_sub_epi8(_mm512_and_si512(z, m4), eight);
            __m512i hi = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(z, 4), m4), eight);
            uint8_t *o = a + (size_t)b * AMX_BLOCK_BYTES + 32 * r;   /* rows r, r + 1 then r + 2, r + 3 */
            _mm512_store_si512(o, _mm512_permutex2var_epi64(lo, first, hi));
            _mm512_store_si512(o + 64, _mm512_permutex2var_epi64(lo, second, hi));
        }
    }
}

/* --- the product */

/* A block's 16 x 16 sums c (row r, token n) into acc[r]: dx the tokens'
 * scales, dw the rows'. */
AMX_INLINE void amx_add_block(__m512 acc[16], const int32_t *c, __m512 dx, const float *dw) {
    for (int r = 0; r < 16; r++) {
        __m512 d = _mm512_mul_ps(_mm512_set1_ps(dw[r]), dx);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * r)), d, acc[r]);
    }
}

/* Blocks b and b + 1 (b alone when two is 0) of 16 rows against 16 tokens,
 * in two halves so that work can go between them: amx_pair_start multiplies
 * (the rows' values at a0 and a1, 16 rows a_row apart; the tokens' at x0 and
 * x1) into tiles 4 and 5, amx_pair_end adds the sums into acc (the rows'
 * scales at dw0 and dw1, the tokens' at dx0 and dx1). */
AMX_INLINE void amx_pair_start(const uint8_t *a0, const uint8_t *a1, size_t a_row, const uint8_t *x0,
                               const uint8_t *x1, int two) {
    _tile_loadd(0, a0, a_row);
    _tile_loadd(2, x0, 64);
    _tile_zero(4);
    _tile_dpbssd(4, 0, 2);
    if (two) {
        _tile_loadd(1, a1, a_row);
        _tile_loadd(3, x1, 64);
        _tile_zero(5);
        _tile_dpbssd(5, 1, 3);
    }
}

AMX_INLINE void amx_pair_end(__m512 acc[16], const float *dw0, const float *dw1, const float *dx0, const float *dx1,
                             int two) {
    __attribute__((aligned(64))) int32_t c0[256], c1[256];
    _tile_stored(4, c0, 64);
    amx_add_block(acc, c0, _mm512_loadu_ps(dx0), dw0);
    if (two) {
        _tile_stored(5, c1, 64);
        amx_add_block(acc, c1, _mm512_loadu_ps(dx1), dw1);
    }
}

/* Which rows of [n0, n1) the tile for row n holds: it starts at *m (n, or
 * N - 16 for a matrix's last rows when they are fewer than 16) and holds
 * rows *m + r for *r0 <= r < *r1. */
static inline void amx_tile_rows(int n, int n1, int N, int *m, int *r0, int *r1) {
    *m = n + 16 <= N ? n : N - 16;
    *r0 = n - *m;
    *r1 = (n1 < *m + 16 ? n1 : *m + 16) - *m;
}

/* out[t][m + r] = acc[r][t] for r0 <= r < r1 and the group's tokens: the
 * 16 x 16 block transposed in registers (four rounds of shuffles), then a
 * token's 16 rows stored at once, masked to [r0, r1). A loop of single
 * floats had taken a seventh of a Q4_K prefill (perf). */
AMX_INLINE void amx_write(const MatmulJob *job, const float (*acc)[16], int m, int r0, int r1, int g) {
    int N = job->W->N, tokens = job->T - g * AMX_TOKENS < AMX_TOKENS ? job->T - g * AMX_TOKENS : AMX_TOKENS;
    __m512 a[16], b[16];
    for (int r = 0; r < 16; r++) a[r] = _mm512_load_ps(acc[r]);
    for (int i = 0; i < 16; i += 2) {   /* pairs of rows, interleaved by floats */
        b[i] = _mm512_unpacklo_ps(a[i], a[i + 1]);
        b[i + 1] = _mm512_unpackhi_ps(a[i], a[i + 1]);
    }
    for (int i = 0; i < 16; i += 4)   /* then by pairs of floats */
        for (int j = 0; j < 2; j++) {
            a[i + j] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(b[i + j]), _mm512_castps_pd(b[i + j + 2])));
            a[i + j + 2] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(b[i + j]), _mm512_castps_pd(b[i + j + 2])));
        }
    for (int i = 0; i < 16; i += 8)   /* then 128-bit lanes of rows i .. i + 7 */
        for (int j = 0; j < 4; j++) {
            b[i + j] = _mm512_shuffle_f32x4(a[i + j], a[i + j + 4], 0x88);       /* lanes 0, 2 of each */
            b[i + j + 4] = _mm512_shuffle_f32x4(a[i + j], a[i + j + 4], 0xdd);   /* lanes 1, 3 */
        }
    for (int j = 0; j < 8; j++) {   /* and of rows 0-7 with rows 8-15 */
        a[j] = _mm512_shuffle_f32x4(b[j], b[j + 8], 0x88);
        a[j + 8] = _mm512_shuffle_f32x4(b[j], b[j + 8], 0xdd);
    }
    /* a[k] now holds one token's 16 rows; which token: */
    static const int token_of[16] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
    __mmask16 keep = (__mmask16)(((1u << r1) - 1) & ~((1u << r0) - 1));
    for (int k = 0; k < 16; k++) {
        int t = token_of[k];
        if (t < tokens) _mm512_mask_storeu_ps(job->out + (size_t)(g * AMX_TOKENS + t) * N + m, keep, a[k]);
    }
}

/* Q8_0: the tile reads each block's 32 values in place, and the blocks'
 * scales are gathered as they are needed; each group of 16 tokens keeps its
 * sums in registers for the whole row. Copying the values into a buffer a
 * chunk at a time, as Q4_0 must, and gathering a chunk's scales at once were
 * both slower at 16 tokens (kbench --type Q8_0 --shape 5632x2048 --prefill-t
 * 16, one Emerald Rapids core, three alternating runs: 256-390 GOP/s this
 * way, 180-290 those) and no faster at 128. */
AMX_FN void q8_0_rows_amx(const MatmulJob *job, int part, int n0, int n1) {
    (void)part;
    const Mat *W = job->W;
    int K = W->K, nb = K / QK8_0;
    size_t ws = dtype_row_bytes(DT_Q8_0, K), bb = sizeof(BlockQ8_0), gbytes = amx_group_bytes(K);
    __attribute__((aligned(64))) float dw[32];
    _tile_loadconfig(&AMX_BLOCKS);
    for (int n = n0; n < n1; n += 16) {
        int m, r0, r1;
        amx_tile_rows(n, n1, W->N, &m, &r0, &r1);
        const uint8_t *w = row_ptr(W, m), *qs = w + 2;   /* block 0's values, after its scale */
        for (int g = 0; g < amx_groups(job->T); g++) {
            const uint8_t *x = job->act + (size_t)g * gbytes;
            const float *dx = (const float *)(x + (size_t)nb * AMX_BLOCK_BYTES);
            __m512 acc[16];
            for (int r = 0; r < 16; r++) acc[r] = _mm512_setzero_ps();
            for (int b = 0; b < nb; b += 2) {
                int two = b + 1 < nb, b1 = two ? b + 1 : b;   /* b1: the second block, if any */
                amx_pair_start(qs + b * bb, qs + b1 * bb, ws, x + (size_t)b * AMX_BLOCK_BYTES,
                               x + (size_t)b1 * AMX_BLOCK_BYTES, two);
                amx_scales(dw, w, ws, bb, b, 1 + two);   /* while the tiles multiply */
                amx_pair_end(acc, dw, dw + 16, dx + (size_t)b * AMX_TOKENS, dx + (size_t)b1 * AMX_TOKENS, two);
            }
            __attribute__((aligned(64))) float o[16][16];
            for (int r = 0; r < 16; r++) _mm512_store_ps(o[r], acc[r]);
            amx_write(job, (const float(*)[16])o, m, r0, r1, g);
        }
    }
    _tile_release();
}

/* Q4_0: a chunk of AMX_CHUNK blocks of the 16 rows is unpacked to bytes
 * (and their scales widened) once for every group of tokens: a chunk at
 * a + 512 b, its scales at dw + 16 b. */
typedef struct {
    __attribute__((aligned(64))) uint8_t a[AMX_CHUNK * AMX_BLOCK_BYTES];
    __attribute__((aligned(64))) float dw[AMX_CHUNK * 16];
} AmxQ4_0;

/* Blocks c .. c + len - 1 of the chunk u against group g, into sums. */
AMX_INLINE void amx_q4_0_chunk(float (*sums)[16], const AmxQ4_0 *u, const MatmulJob *job, int g, int c, int len) {
    int nb = job->W->K / QK8_0;
    const uint8_t *xg = job->act + (size_t)g * amx_group_bytes(job->W->K);
    const uint8_t *x = xg + (size_t)c * AMX_BLOCK_BYTES;
    const float *dx = (const float *)(xg + (size_t)nb * AMX_BLOCK_BYTES) + (size_t)c * AMX_TOKENS;
    __m512 acc[16];
    for (int r = 0; r < 16; r++) acc[r] = _mm512_load_ps(sums[r]);
    for (int b = 0; b < len; b += 2) {
        int b1 = b + 1 < len ? b + 1 : b;
        amx_pair_start(u->a + (size_t)b * AMX_BLOCK_BYTES, u->a + (size_t)b1 * AMX_BLOCK_BYTES, 32,
                       x + (size_t)b * AMX_BLOCK_BYTES, x + (size_t)b1 * AMX_BLOCK_BYTES, b1 > b);
        amx_pair_end(acc, u->dw + 16 * b, u->dw + 16 * b1, dx + (size_t)b * AMX_TOKENS, dx + (size_t)b1 * AMX_TOKENS,
                     b1 > b);
    }
    for (int r = 0; r < 16; r++) _mm512_store_ps(sums[r], acc[r]);
}

/* --- Q4_K
 *
 * A super-block is 8 sub-blocks of 32 values q (0..15) with 6-bit scales sc
 * and mins mn and two fp16 factors: value = d sc_j q - dmin mn_j. Against
 * Q8_K activations (one scale d_x per 256, values x) a super-block's sum is
 *     d_x (d I - dmin M),  I = sum_j sc_j S_j,  M = sum_j mn_j X_j
 * with S_j the integer dot of sub-block j and X_j the sum of its 32 values.
 * The tiles make each S_j (tdpbssd, q as signed bytes); I is added up in
 * int32 (vpmulld by the row's sc_j: |S_j| <= 32 * 15 * 127 needs more than 16
 * bits), M by four vpdpwssd from the tokens' pairs of X (amx_act_pack_k) and
 * the row's pairs of mins, both exactly. Floats enter once per super-block:
 *     acc = fma((float)I, d d_x, acc);  acc = fma((float)M, -dmin d_x, acc)
 * matmul_blocks_ref's order for Q4_K. A chunk of AMX_K_CHUNK super-blocks of
 * the 16 rows is unpacked (values, scales, mins, factors) once for all the
 * groups of tokens. From AMX_SPLIT_GROUPS groups on, I is made without
 * vpmulld: amx_q4_k_chunk_split, the same integer. */

enum { AMX_K_CHUNK = AMX_CHUNK / 8 };   /* super-blocks a chunk: the same bytes as Q4_0's */
#ifndef AMX_SPLIT_GROUPS
#define AMX_SPLIT_GROUPS 2   /* groups of 16 tokens from which Q4_K's scales are split */
#endif

AMX_FN void amx_act_pack_k(uint8_t *act, const float *x, int T, int K) {
    int nsb = K / QK_K;
    size_t gbytes = amx_k_group_bytes(K);
    amx_zero_padding(act, T, gbytes);
    for (int t = 0; t < T; t++) {
        uint8_t *g = act + (size_t)(t / AMX_TOKENS) * gbytes;
        float *d = (float *)(g + (size_t)nsb * 8 * AMX_BLOCK_BYTES);
        int32_t *pairs = (int32_t *)(d + (size_t)nsb * AMX_TOKENS);
        int n = t % AMX_TOKENS;
        for (int sb = 0; sb < nsb; sb++) {
            BlockQ8_K q;
            quantize_row_q8_k_avx512(&q, x + (size_t)t * K + (size_t)sb * QK_K, QK_K);
            d[sb * AMX_TOKENS + n] = q.d;
            for (int j = 0; j < 8; j++) amx_put_block(g + (size_t)(sb * 8 + j) * AMX_BLOCK_BYTES, n, q.qs + 32 * j);
            for (int p = 0; p < 4; p++) {   /* |X_j| <= 32 * 127: 16 bits each */
                int lo = q.bsums[4 * p] + q.bsums[4 * p + 1], hi = q.bsums[4 * p + 2] + q.bsums[4 * p + 3];
                pairs[(sb * 4 + p) * AMX_TOKENS + n] = (int32_t)((uint32_t)(uint16_t)lo | (uint32_t)(uint16_t)hi << 16);
            }
        }
    }
}

/* A chunk of 16 rows, unpacked: row r of super-block s as 256 bytes, its
 * sub-blocks in order, at a[s][r] (so that sub-block j's tile is 16 rows
 * of 32 bytes at a[s][0] + 32 j, 256 bytes apart); the scale of sub-block j
 * of row r at sc[s][j][r], as int32; the row's pairs of mins (mn_2p |
 * mn_2p+1 << 16, for vpdpwssd) at mnp[s][p][r]; d and dmin at dd[s][0][r],
 * dd[s][1][r]. */
typedef struct {
    __attribute__((aligned(64))) uint8_t a[AMX_K_CHUNK][16][QK_K];
    __attribute__((aligned(64))) uint8_t ah[AMX_K_CHUNK][16][QK_K];   /* split: q sh (a holds q sl) */
    __attribute__((aligned(64))) uint32_t scb[AMX_K_CHUNK][2][16];     /* row r's scales 0-3, 4-7: a byte each */
    __attribute__((aligned(64))) int32_t sc[AMX_K_CHUNK][8][16];
    __attribute__((aligned(64))) int32_t mnp[AMX_K_CHUNK][4][16];
    __attribute__((aligned(64))) float dd[AMX_K_CHUNK][2][16];
} AmxQ4K;

/* The scales and mins of super-block s of the 16 rows (their blocks at
 * blk0, rows_at apart) into u: the 12 bytes of each row as three words
 * w0, w1, w2, one row a lane, and k_scale_min for all 16 rows at once:
 * scales 0-3 in the low six bits of w0's bytes, mins 0-3 of w1's, scales
 * and mins 4-7 in w2's nibbles with their top two bits in the top of w0's
 * and w1's bytes (k_scale_bytes in quant_avx512.c does one row). */
AMX_INLINE void amx_scales_q4_k(AmxQ4K *u, int s, const uint8_t *blk0, __m512i rows_at) {
    const uint8_t *sc12 = ((const BlockQ4_K *)blk0)->scales;
    __m512i w0 = _mm512_i32gather_epi32(rows_at, (const void *)sc12, 1);
    __m512i w1 = _mm512_i32gather_epi32(rows_at, (const void *)(sc12 + 4), 1);
    __m512i w2 = _mm512_i32gather_epi32(rows_at, (const void *)(sc12 + 8), 1);
    const __m512i six = _mm512_set1_epi32(0x3f3f3f3f), four = _mm512_set1_epi32(0x0f0f0f0f),
                  two = _mm512_set1_epi32(0x03030303), byte = _mm512_set1_epi32(0xff);
    __m512i sc_lo = _mm512_and_si512(w0, six), mn_lo = _mm512_and_si512(w1, six);
    __m512i sc_hi = _mm512_or_si512(_mm512_and_si512(w2, four),
                                    _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w0, 6), two), 4));
    __m512i mn_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 4), four),
                                    _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w1, 6), two), 4));
    _mm512_store_si512(u->scb[s][0], sc_lo);
    _mm512_store_si512(u->scb[s][1], sc_hi);
    for (int j = 0; j < 4; j++) {
        _mm512_store_si512(u->sc[s][j], _mm512_and_si512(_mm512_srli_epi32(sc_lo, 8 * j), byte));
        _mm512_store_si512(u->sc[s][4 + j], _mm512_and_si512(_mm512_srli_epi32(sc_hi, 8 * j), byte));
    }
    /* bytes b0 b1 b2 b3 of a word to the pairs b0 | b1 << 16 and b2 | b3 << 16 */
    const __m512i third = _mm512_set1_epi32(0x00ff0000);
    for (int h = 0; h < 2; h++) {
        __m512i mn = h ? mn_hi : mn_lo, up = _mm512_srli_epi32(mn, 16);
        _mm512_store_si512(u->mnp[s][2 * h], _mm512_or_si512(_mm512_and_si512(mn, byte),
                                                             _mm512_and_si512(_mm512_slli_epi32(mn, 8), third)));
        _mm512_store_si512(u->mnp[s][2 * h + 1], _mm512_or_si512(_mm512_and_si512(up, byte),
                                                                 _mm512_and_si512(_mm512_slli_epi32(up, 8), third)));
    }
}

AMX_INLINE void amx_unpack_q4_k(AmxQ4K *u, const uint8_t *w, size_t ws, int s0, int ns, int split) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    /* 64 bytes of nibbles hold sub-blocks 2c and 2c + 2 in the low nibbles of
     * their halves, 2c + 1 and 2c + 3 in the high ones: put back in order */
    const __m512i first = _mm512_setr_epi64(0, 1, 2, 3, 8, 9, 10, 11), second = _mm512_setr_epi64(4, 5, 6, 7, 12, 13, 14, 15);
    const __m512i rows_at = _mm512_mullo_epi32(_mm512_set1_epi32((int)ws),
                                               _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    for (int s = 0; s < ns; s++) {
        const uint8_t *blk0 = w + (size_t)(s0 + s) * sizeof(BlockQ4_K);
        __m512i ddm = _mm512_i32gather_epi32(rows_at, (const void *)blk0, 1);   /* d | dmin << 16, a row a lane */
        _mm512_store_ps(u->dd[s][0], _mm512_cvtph_ps(_mm512_cvtepi32_epi16(ddm)));
        _mm512_store_ps(u->dd[s][1], _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(ddm, 16))));
        amx_scales_q4_k(u, s, blk0, rows_at);
        for (int r = 0; r < 16; r++) {
            const BlockQ4_K *b = (const BlockQ4_K *)(blk0 + (size_t)r * ws);
            __m512i sl = m4, sh = m4;
            if (split) {   /* the row's 8 scales, a byte each in every 8 bytes; sc = 8 sh + sl */
                __m512i t = _mm512_set1_epi64((long long)((uint64_t)u->scb[s][1][r] << 32 | u->scb[s][0][r]));
                sl = _mm512_and_si512(t, _mm512_set1_epi8(7));
                sh = _mm512_and_si512(_mm512_srli_epi16(t, 3), _mm512_set1_epi8(7));
            }
            for (int h = 0; h < 2; h++) {   /* sub-blocks 4h .. 4h + 3 */
                __m512i v = _mm512_loadu_si512(b->qs + 64 * h);
                __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                if (!split) {
                    _mm512_store_si512(u->a[s][r] + 128 * h, _mm512_permutex2var_epi64(lo, first, hi));
                    _mm512_store_si512(u->a[s][r] + 128 * h + 64, _mm512_permutex2var_epi64(lo, second, hi));
                    continue;
                }
                /* each 16-bit lane of lo holds two values of one sub-block (4h, then 4h + 2) and of hi
                 * (4h + 1, 4h + 3): times that sub-block's sl (sh), as words, q s <= 105 fits a byte */
                /* the multipliers by vpshufb from the 8 scales (every 16 bytes hold them twice):
                 * byte j of the table at even bytes, zero (0x80) at odd ones */
                const __mmask64 upper = 0xffffffff00000000ull;
                __m512i il = _mm512_mask_blend_epi8(upper, _mm512_set1_epi16((short)(0x8000 | 4 * h)),
                                                    _mm512_set1_epi16((short)(0x8000 | (4 * h + 2))));
                __m512i ih = _mm512_add_epi16(il, _mm512_set1_epi16(1));
                __m512i lol = _mm512_mullo_epi16(lo, _mm512_shuffle_epi8(sl, il));
                __m512i hil = _mm512_mullo_epi16(hi, _mm512_shuffle_epi8(sl, ih));
                __m512i loh = _mm512_mullo_epi16(lo, _mm512_shuffle_epi8(sh, il));
                __m512i hih = _mm512_mullo_epi16(hi, _mm512_shuffle_epi8(sh, ih));
                _mm512_store_si512(u->a[s][r] + 128 * h, _mm512_permutex2var_epi64(lol, first, hil));
                _mm512_store_si512(u->a[s][r] + 128 * h + 64, _mm512_permutex2var_epi64(lol, second, hil));
                _mm512_store_si512(u->ah[s][r] + 128 * h, _mm512_permutex2var_epi64(loh, first, hih));
                _mm512_store_si512(u->ah[s][r] + 128 * h + 64, _mm512_permutex2var_epi64(loh, second, hih));
            }
        }
    }
}

/* A sub-block's 16 x 16 sums c times the rows' scales sc[r] into I. The
 * loops over the 16 rows that touch I are unrolled: as loops, GCC 12 kept I
 * in memory, a load and a store per row and sub-block (kbench saw no
 * difference in speed either way). */
AMX_INLINE void amx_add_sub_block(__m512i I[16], const int32_t *c, const int32_t *sc) {
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++)
        I[r] = _mm512_add_epi32(I[r], _mm512_mullo_epi32(_mm512_load_si512(c + 16 * r), _mm512_set1_epi32(sc[r])));
}

/* Where group g's activations lie: values, scales of each super-block, pairs of sub-block sums. */
AMX_INLINE const uint8_t *amx_k_group(const MatmulJob *job, int g, const float **dx, const int32_t **pairs) {
    int nsb = job->W->K / QK_K;
    const uint8_t *x = job->act + (size_t)g * amx_k_group_bytes(job->W->K);
    *dx = (const float *)(x + (size_t)nsb * 8 * AMX_BLOCK_BYTES);
    *pairs = (const int32_t *)(*dx + (size_t)nsb * AMX_TOKENS);
    return x;
}

/* Super-block s of the chunk against the group, its I made: the mins' M by
 * vpdpwssd, then the two fmas into sums (dx and ps: the super-block's token
 * scales and pairs of sums). */
AMX_INLINE void amx_q4_k_super(float (*sums)[16], const AmxQ4K *u, int s, const __m512i I[16], const float *dx,
                               const int32_t *ps) {
    __m512 d = _mm512_loadu_ps(dx);
    __m512i p0 = _mm512_loadu_si512(ps), p1 = _mm512_loadu_si512(ps + 16), p2 = _mm512_loadu_si512(ps + 32),
            p3 = _mm512_loadu_si512(ps + 48);
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) {
        __m512i M = _mm512_dpwssd_epi32(_mm512_setzero_si512(), p0, _mm512_set1_epi32(u->mnp[s][0][r]));
        M = _mm512_dpwssd_epi32(M, p1, _mm512_set1_epi32(u->mnp[s][1][r]));
        M = _mm512_dpwssd_epi32(M, p2, _mm512_set1_epi32(u->mnp[s][2][r]));
        M = _mm512_dpwssd_epi32(M, p3, _mm512_set1_epi32(u->mnp[s][3][r]));
        __m512 acc = _mm512_load_ps(sums[r]);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I[r]), _mm512_mul_ps(_mm512_set1_ps(u->dd[s][0][r]), d), acc);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(M), _mm512_mul_ps(_mm512_set1_ps(-u->dd[s][1][r]), d), acc);
        _mm512_store_ps(sums[r], acc);
    }
}

/* Super-blocks s0 .. s0 + ns - 1 of the chunk u against group g, into sums. */
AMX_INLINE void amx_q4_k_chunk(float (*sums)[16], const AmxQ4K *u, const MatmulJob *job, int g, int s0, int ns) {
    const float *dx;
    const int32_t *pairs;
    const uint8_t *x = amx_k_group(job, g, &dx, &pairs);
    __attribute__((aligned(64))) int32_t c0[256], c1[256];
    for (int s = 0; s < ns; s++) {
        __m512i I[16];
#pragma GCC unroll 16
        for (int r = 0; r < 16; r++) I[r] = _mm512_setzero_si512();
        for (int j = 0; j < 8; j += 2) {
            const uint8_t *xs = x + (size_t)((s0 + s) * 8 + j) * AMX_BLOCK_BYTES, *as = u->a[s][0] + 32 * j;
            amx_pair_start(as, as + 32, QK_K, xs, xs + AMX_BLOCK_BYTES, 1);
            _tile_stored(4, c0, 64);
            amx_add_sub_block(I, c0, u->sc[s][j]);
            _tile_stored(5, c1, 64);
            amx_add_sub_block(I, c1, u->sc[s][j + 1]);
        }
        amx_q4_k_super(sums, u, s, I, dx + (size_t)(s0 + s) * AMX_TOKENS, pairs + (size_t)(s0 + s) * 4 * AMX_TOKENS);
    }
}

/* The same with the scales split (amx_unpack_q4_k with split): the rows'
 * values times sl in a, times sh in ah, so that the tiles add a whole
 * super-block, two sub-blocks a tdpbssd: C = sum_j sl_j S_j and
 * H = sum_j sh_j S_j, and I = 8 H + C = sum_j sc_j S_j, the same integer.
 * Twice the tile work, and two stores of sums a super-block instead of
 * eight, with their 128 vpmulld: faster from two groups of tokens on. */
AMX_INLINE void amx_q4_k_chunk_split(float (*sums)[16], const AmxQ4K *u, const MatmulJob *job, int g, int s0, int ns) {
    const float *dx;
    const int32_t *pairs;
    const uint8_t *x = amx_k_group(job, g, &dx, &pairs);
    __attribute__((aligned(64))) int32_t c0[256], c1[256];
    for (int s = 0; s < ns; s++) {
        _tile_zero(4);
        _tile_zero(5);
        for (int j = 0; j < 8; j += 2) {   /* sub-blocks j and j + 1: 64 values of each row */
            _tile_loadd(2, x + (size_t)((s0 + s) * 8 + j) * AMX_BLOCK_BYTES, 64);
            _tile_loadd(0, u->a[s][0] + 32 * j, QK_K);
            _tile_dpbssd(4, 0, 2);
            _tile_loadd(1, u->ah[s][0] + 32 * j, QK_K);
            _tile_dpbssd(5, 1, 2);
        }
        _tile_stored(4, c0, 64);
        _tile_stored(5, c1, 64);
        __m512i I[16];
#pragma GCC unroll 16
        for (int r = 0; r < 16; r++)
            I[r] = _mm512_add_epi32(_mm512_load_si512(c0 + 16 * r), _mm512_slli_epi32(_mm512_load_si512(c1 + 16 * r), 3));
        amx_q4_k_super(sums, u, s, I, dx + (size_t)(s0 + s) * AMX_TOKENS, pairs + (size_t)(s0 + s) * 4 * AMX_TOKENS);
    }
}

/* --- the formats that are unpacked: Q4_0 and Q4_K
 *
 * For each 16 rows, for each pass over at most AMX_MAX_GROUPS groups of
 * tokens, for each chunk (AMX_CHUNK blocks, AMX_K_CHUNK super-blocks: the
 * same bytes): the chunk unpacked once, then each group's sums, which wait
 * in memory between chunks. */
AMX_INLINE void amx_unpacked_rows(const MatmulJob *job, int n0, int n1, DType type) {
    const Mat *W = job->W;
    int K = W->K, groups = amx_groups(job->T);
    int units = type == DT_Q4_K ? K / QK_K : K / QK4, chunk = type == DT_Q4_K ? AMX_K_CHUNK : AMX_CHUNK;
    size_t ws = dtype_row_bytes(type, K);
    union {
        AmxQ4_0 q4_0;
        AmxQ4K q4_k;
    } u;
    __attribute__((aligned(64))) float sums[AMX_MAX_GROUPS][16][16];
    /* Q4_K from two groups of tokens on: its scales split (amx_q4_k_chunk_split) */
    int split = type == DT_Q4_K && groups >= AMX_SPLIT_GROUPS;
    _tile_loadconfig(split ? &AMX_PAIRS : &AMX_BLOCKS);
    for (int n = n0; n < n1; n += 16) {
        int m, r0, r1;
        amx_tile_rows(n, n1, W->N, &m, &r0, &r1);
        const uint8_t *w = row_ptr(W, m);
        for (int g0 = 0; g0 < groups; g0 += AMX_MAX_GROUPS) {
            int g1 = groups - g0 < AMX_MAX_GROUPS ? groups : g0 + AMX_MAX_GROUPS;
            memset(sums, 0, (size_t)(g1 - g0) * sizeof sums[0]);   /* the groups of this pass only */
            for (int c = 0; c < units; c += chunk) {
                int len = units - c < chunk ? units - c : chunk;
                if (type == DT_Q4_K) {
                    amx_unpack_q4_k(&u.q4_k, w, ws, c, len, split);
                } else {
                    amx_scales(u.q4_0.dw, w, ws, sizeof(BlockQ4_0), c, len);
                    amx_unpack_q4_0(u.q4_0.a, w, ws, c, len);
                }
                for (int g = g0; g < g1; g++) {
                    if (split) amx_q4_k_chunk_split(sums[g - g0], &u.q4_k, job, g, c, len);
                    else if (type == DT_Q4_K) amx_q4_k_chunk(sums[g - g0], &u.q4_k, job, g, c, len);
                    else amx_q4_0_chunk(sums[g - g0], &u.q4_0, job, g, c, len);
                }
            }
            for (int g = g0; g < g1; g++) amx_write(job, (const float(*)[16])sums[g - g0], m, r0, r1, g);
        }
    }
    _tile_release();
}

AMX_FN void q4_0_rows_amx(const MatmulJob *job, int part, int n0, int n1) {
    (void)part;
    amx_unpacked_rows(job, n0, n1, DT_Q4_0);
}

AMX_FN void q4_k_rows_amx(const MatmulJob *job, int part, int n0, int n1) {
    (void)part;
    amx_unpacked_rows(job, n0, n1, DT_Q4_K);
}
#else
typedef int tiles_amx_is_empty_here;   /* ISO C wants something in every file */
#endif /* OPS_X86 */
