/* tiles_amx.c - Q8_0 products on Intel's AMX tiles, for batches of tokens.
 *
 * AMX (Sapphire Rapids and later Xeons) adds eight tile registers of up to
 * 16 rows of 64 bytes and one instruction, tdpbssd, that multiplies a tile of
 * int8 (16 rows by K values, K <= 64) by another (K by 16 columns, stored
 * as K / 4 rows of 16 groups of four) and adds the 16 x 16 int32 results to
 * a third: 16 x 16 x K products in one instruction, where vpdpbusd makes 64.
 * One core's peak (tools/ceilings.h) is about seven times its VNNI peak.
 *
 * How a Q8_0 product maps onto it. A Q8_0 block is 32 int8 values with one
 * scale, and the scales differ from block to block, so the integer sum of
 * each block must leave the tile before the next block's is added: one
 * tdpbssd per block (K = 32) into a zeroed tile, the 16 x 16 sums stored to
 * memory, and then AVX-512 adds them into float accumulators:
 *     acc[row][token] = fma((float)S_b, d_w[b] * d_x[b], acc[row][token])
 * for b = 0, 1, ... in order, one chain per (row, token). That is the order
 * of this path, and q8_0_blocks_ref (ref.c) is its plain loop: the same
 * bits. It is not the VNNI tiles' order (rows.h, q8_0_block_into_lanes,
 * sixteen lanes of sums of four), so a token's result here differs from the
 * same token alone by float rounding (ops.h says when this path runs).
 *
 * Which side is which. The first tile (A, 16 rows of 32 bytes) is 16 weight
 * rows: row r of it is block b of weight row m + r, the 32 values that
 * follow the block's scale, read in place with the matrix's row stride. So
 * the weights need no repacking, and nothing is copied at load. The second
 * (B) is 16 tokens in the grouped layout that tdpbssd wants, made once per
 * call by amx_act_pack (rows.h, "Q8_0 activations for AMX"). The results
 * C[r][n] are row m + r against token n: sixteen accumulators of 16 tokens
 * each, in zmm registers for the whole of K.
 *
 * Each step takes two blocks, b in tiles 0, 2, 4 and b + 1 in 1, 3, 5, so
 * that the second tdpbssd runs while the first block's sums are added. A
 * matrix whose rows are not a multiple of 16 computes its last 16 rows
 * again from N - 16 (each row's sums are made alike wherever its tile
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

#define AMX_FN __attribute__((target("avx512f,avx512bw,avx512vl,f16c,fma,amx-tile,amx-int8")))

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

static const AmxConfig AMX_Q8_0 = {
    .palette = 1,
    .colsb = {32, 32, 64, 64, 64, 64},
    .rows = {16, 16, 8, 8, 16, 16},
};

/* --- activations */

AMX_FN void amx_act_pack(uint8_t *act, const float *x, int T, int K) {
    int nb = K / QK8_0;
    size_t gbytes = amx_group_bytes(K);
    memset(act, 0, (size_t)amx_groups(T) * gbytes);   /* padding tokens: values and scales 0 */
    enum { CHUNK = 64 };   /* blocks rounded at a time */
    BlockQ8_0 q[CHUNK];
    for (int t = 0; t < T; t++) {
        uint8_t *g = act + (size_t)(t / AMX_TOKENS) * gbytes;
        float *d = (float *)(g + (size_t)nb * AMX_BLOCK_BYTES);
        int n = t % AMX_TOKENS;
        for (int b0 = 0; b0 < nb; b0 += CHUNK) {
            int len = nb - b0 < CHUNK ? nb - b0 : CHUNK;
            quantize_row_q8_0_avx512(q, x + (size_t)t * K + (size_t)b0 * QK8_0, len * QK8_0);
            for (int b = b0; b < b0 + len; b++) {
                d[b * AMX_TOKENS + n] = fp16_to_fp32(q[b - b0].d);
                uint8_t *blk = g + (size_t)b * AMX_BLOCK_BYTES;
                for (int r = 0; r < QK8_0 / 4; r++) memcpy(blk + r * 64 + 4 * n, q[b - b0].qs + 4 * r, 4);
            }
        }
    }
}

/* --- the product */

/* The scales of block b of the 16 rows from w (rows `ws` bytes apart), as
 * floats: one gather of the 4 bytes at each block's start (its fp16 scale
 * and two values), the words kept, widened. */
AMX_FN static inline __m512 amx_weight_scales(const uint8_t *w, __m512i rows_at, int b) {
    __m512i v = _mm512_i32gather_epi32(rows_at, (const void *)(w + (size_t)b * sizeof(BlockQ8_0)), 1);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
}

/* A block's 16 x 16 sums c (row r, token n) into acc[r]: d_x the tokens'
 * scales, dw the rows'. */
AMX_FN static inline void amx_add_block(__m512 acc[16], const int32_t *c, __m512 dx, const float *dw) {
    for (int r = 0; r < 16; r++) {
        __m512 d = _mm512_mul_ps(_mm512_set1_ps(dw[r]), dx);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * r)), d, acc[r]);
    }
}

/* Rows m .. m + 15 (w the first) against the 16 tokens of group g. */
AMX_FN static void amx_q8_0_tile(__m512 acc[16], const MatmulJob *job, const uint8_t *w, size_t ws, int g) {
    int K = job->W->K, nb = K / QK8_0;
    const uint8_t *ag = job->act + (size_t)g * amx_group_bytes(K);
    const float *adx = (const float *)(ag + (size_t)nb * AMX_BLOCK_BYTES);
    const __m512i rows_at = _mm512_mullo_epi32(_mm512_set1_epi32((int)ws),
                                               _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    __attribute__((aligned(64))) int32_t c0[256], c1[256];
    __attribute__((aligned(64))) float dw[32];
    const uint8_t *qs = w + 2;   /* block 0's values, after its scale */
    for (int r = 0; r < 16; r++) acc[r] = _mm512_setzero_ps();
    int b = 0;
    for (; b + 2 <= nb; b += 2) {
        _tile_loadd(0, qs + (size_t)b * sizeof(BlockQ8_0), ws);
        _tile_loadd(2, ag + (size_t)b * AMX_BLOCK_BYTES, 64);
        _tile_zero(4);
        _tile_dpbssd(4, 0, 2);
        _tile_loadd(1, qs + (size_t)(b + 1) * sizeof(BlockQ8_0), ws);
        _tile_loadd(3, ag + (size_t)(b + 1) * AMX_BLOCK_BYTES, 64);
        _tile_zero(5);
        _tile_dpbssd(5, 1, 3);
        _mm512_store_ps(dw, amx_weight_scales(w, rows_at, b));
        _mm512_store_ps(dw + 16, amx_weight_scales(w, rows_at, b + 1));
        _tile_stored(4, c0, 64);
        amx_add_block(acc, c0, _mm512_loadu_ps(adx + (size_t)b * AMX_TOKENS), dw);
        _tile_stored(5, c1, 64);
        amx_add_block(acc, c1, _mm512_loadu_ps(adx + (size_t)(b + 1) * AMX_TOKENS), dw + 16);
    }
    if (b < nb) {
        _tile_loadd(0, qs + (size_t)b * sizeof(BlockQ8_0), ws);
        _tile_loadd(2, ag + (size_t)b * AMX_BLOCK_BYTES, 64);
        _tile_zero(4);
        _tile_dpbssd(4, 0, 2);
        _mm512_store_ps(dw, amx_weight_scales(w, rows_at, b));
        _tile_stored(4, c0, 64);
        amx_add_block(acc, c0, _mm512_loadu_ps(adx + (size_t)b * AMX_TOKENS), dw);
    }
}

AMX_FN void q8_0_rows_amx(const MatmulJob *job, int part, int n0, int n1) {
    (void)part;
    const Mat *W = job->W;
    int N = W->N, T = job->T;
    size_t ws = dtype_row_bytes(DT_Q8_0, W->K);
    _tile_loadconfig(&AMX_Q8_0);
    for (int n = n0; n < n1; n += 16) {
        int m = n + 16 <= N ? n : N - 16;   /* the last tile of a matrix: from N - 16 */
        int r0 = n - m, r1 = (n1 < m + 16 ? n1 : m + 16) - m;   /* the rows of [n0, n1) it holds */
        for (int g = 0; g < amx_groups(T); g++) {
            __m512 acc[16];
            __attribute__((aligned(64))) float o[16][16];
            amx_q8_0_tile(acc, job, row_ptr(W, m), ws, g);
            for (int r = 0; r < 16; r++) _mm512_store_ps(o[r], acc[r]);
            int tokens = T - g * AMX_TOKENS < AMX_TOKENS ? T - g * AMX_TOKENS : AMX_TOKENS;
            for (int t = 0; t < tokens; t++) {
                float *out = job->out + (size_t)(g * AMX_TOKENS + t) * N + m;
                for (int r = r0; r < r1; r++) out[r] = o[r][t];
            }
        }
    }
    _tile_release();
}
#else
typedef int tiles_amx_is_empty_here;   /* ISO C wants something in every file */
#endif /* OPS_X86 */
