/* quant.c - the 4, 5 and 6-bit block formats: reading them (dequantize),
 * writing them (round-to-nearest quantizers), rounding activations to Q8_K,
 * and the plain integer dot products of the generic path.
 *
 * Part of the ops module (ops.h): ops.c dispatches, this file knows the
 * layouts, quant_avx512.c holds the fast kernels. notes/formats.md draws
 * every layout byte by byte.
 *
 * Two arithmetics, on purpose. A block format can be multiplied two ways:
 *   - widen the weights to float and take a float dot product with the
 *     activations as they are. That is what the float64 reference of the
 *     fixtures does, and what matmul_ref does here (the plain path): its
 *     logits follow `reference float64, weights dequantized`.
 *   - round the activations too, to Q8_0 blocks of 32 (for Q4_0, Q4_1, Q5_0,
 *     Q5_1) or Q8_K super-blocks of 256 (for the K formats), and multiply
 *     small integers exactly; floats enter once per block. This is what
 *     llama.cpp does on x86, so its logits are the ones to match, and it is
 *     what the generic and AVX-512 paths do. The two paths share every
 *     integer sum; only the order of the float additions differs.
 * The rounding of activations costs accuracy (about 1e-2 of the largest logit
 * on the fixtures, as llama.cpp); the integer products are what make the
 * kernels fast (VNNI multiplies 64 byte pairs per instruction). */
#include "kernels/rows.h"
#include <assert.h>
#include <math.h>
#include <string.h>

/* ------------------------------------------------------- Q8_K activations */

void quantize_row_q8_k_ref(BlockQ8_K *out, const float *x, int K) {
    for (int b = 0; b < K / QK_K; b++, x += QK_K) {
        BlockQ8_K *y = &out[b];
        float max = 0.0f, amax = 0.0f;
        int finite = 1;
        for (int i = 0; i < QK_K; i++) {
            finite &= isfinite(x[i]) != 0;
            if (fabsf(x[i]) > amax) amax = fabsf(x[i]), max = x[i];
        }
        memset(y->qs, 0, sizeof y->qs);
        memset(y->bsums, 0, sizeof y->bsums);
        if (!finite) {   /* as for Q8_0 (Q8_0_NONFINITE_SCALE): the NaN reaches the logits */
            y->d = NAN;
            continue;
        }
        y->d = 0.0f;
        if (amax == 0.0f) continue;
        /* llama.cpp's rule, so that the integer sums are its own: the value
         * of largest magnitude maps to -127 (the sign of max is kept in the
         * scale), the rest rounded to nearest, ties to even. */
        float iscale = -127.0f / max;
        if (isinf(iscale)) continue;   /* max below ~1e-38: the block adds nothing */
        for (int i = 0; i < QK_K; i++) {
            float v = nearbyintf(iscale * x[i]);
            y->qs[i] = (int8_t)(v > 127.0f ? 127 : v < -127.0f ? -127 : (int)v);
        }
        for (int g = 0; g < QK_K / 16; g++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += y->qs[16 * g + i];
            y->bsums[g] = (int16_t)sum;
        }
        y->d = 1.0f / iscale;
    }
}

/* ---------------------------------------------------------- unpacking
 *
 * Each block to its integer values and the float terms that turn them into
 * weights: weight i = d * q[i] + m for the 32-value formats (Q4_0 and Q5_0
 * fold their offsets -8 and -16 into q), and for the K formats weight i =
 * d * sc[i / 32] * q[i] - dmin * mn[i / 32] (Q4_K, Q5_K) or d * sc[i / 16] *
 * (q[i] - 32) (Q6_K, whose q keeps the 32). */

/* Sub-block j's 6-bit scale and min, from the 12 bytes that pack the eight
 * pairs: j < 4 in the low six bits of bytes j (scale) and j + 4 (min); j >= 4
 * in byte j + 4 (scale in the low nibble, min in the high one) with their top
 * two bits in the top two bits of bytes j - 4 (scale) and j (min). */
void k_scale_min(const uint8_t s[12], int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0f) | (s[j - 4] >> 6) << 4;
        *mn = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

/* The inverse, for the writers. */
static void k_pack_scale_min(uint8_t s[12], int j, int sc, int mn) {
    if (j < 4) {
        s[j] = (uint8_t)((s[j] & 0xc0) | sc);
        s[j + 4] = (uint8_t)((s[j + 4] & 0xc0) | mn);
    } else {
        s[j + 4] = (uint8_t)((sc & 0x0f) | (mn & 0x0f) << 4);
        s[j - 4] = (uint8_t)((s[j - 4] & 0x3f) | (sc >> 4) << 6);
        s[j] = (uint8_t)((s[j] & 0x3f) | (mn >> 4) << 6);
    }
}

/* A 32-value block: q[i] (offset folded in), and d, m. */
void q32_unpack(DType type, const void *blk, int8_t q[QK4], float *d, float *m) {
    const uint8_t *qs, *qh = NULL;
    int offset = 0;
    *m = 0.0f;
    switch (type) {
    case DT_Q4_0: {
        const BlockQ4_0 *b = blk;
        *d = fp16_to_fp32(b->d), qs = b->qs, offset = 8;
        break;
    }
    case DT_Q4_1: {
        const BlockQ4_1 *b = blk;
        *d = fp16_to_fp32(b->d), *m = fp16_to_fp32(b->m), qs = b->qs;
        break;
    }
    case DT_Q5_0: {
        const BlockQ5_0 *b = blk;
        *d = fp16_to_fp32(b->d), qs = b->qs, qh = b->qh, offset = 16;
        break;
    }
    case DT_Q5_1: {
        const BlockQ5_1 *b = blk;
        *d = fp16_to_fp32(b->d), *m = fp16_to_fp32(b->m), qs = b->qs, qh = b->qh;
        break;
    }
    default: assert(!"not a 32-value block format"); return;
    }
    uint32_t high = 0;
    if (qh) memcpy(&high, qh, 4);   /* little-endian, as every x86 file */
    for (int i = 0; i < 16; i++) {
        q[i] = (int8_t)((qs[i] & 0x0f) + (int)((high >> i) & 1) * 16 - offset);
        q[i + 16] = (int8_t)((qs[i] >> 4) + (int)((high >> (i + 16)) & 1) * 16 - offset);
    }
}

/* A K super-block: q[256], d and dmin, and the scale (and min) of each
 * sub-block: 8 of 32 values for Q4_K and Q5_K, 16 of 16 for Q6_K (mn unused;
 * q keeps its +32). */
static inline __attribute__((always_inline)) void qk_unpack_of(DType type, const void *blk, uint8_t q[QK_K],
                                                                int sc[16], int mn[16], float *d, float *dmin) {
    if (type == DT_Q6_K) {
        const BlockQ6_K *b = blk;
        *d = fp16_to_fp32(b->d), *dmin = 0.0f;
        for (int g = 0; g < 16; g++) sc[g] = b->scales[g], mn[g] = 0;
        for (int h = 0; h < 2; h++) {   /* two halves of 128 values */
            const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
            uint8_t *v = q + 128 * h;
            for (int l = 0; l < 32; l++) {
                v[l] = (uint8_t)((ql[l] & 0x0f) | ((qh[l] >> 0) & 3) << 4);
                v[l + 32] = (uint8_t)((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4);
                v[l + 64] = (uint8_t)((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4);
                v[l + 96] = (uint8_t)((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4);
            }
        }
        return;
    }
    const uint8_t *scales, *qs, *qh = NULL;
    if (type == DT_Q4_K) {
        const BlockQ4_K *b = blk;
        *d = fp16_to_fp32(b->d), *dmin = fp16_to_fp32(b->dmin), scales = b->scales, qs = b->qs;
    } else {
        assert(type == DT_Q5_K);
        const BlockQ5_K *b = blk;
        *d = fp16_to_fp32(b->d), *dmin = fp16_to_fp32(b->dmin), scales = b->scales, qs = b->qs;
        qh = b->qh;
    }
    for (int j = 0; j < 8; j++) k_scale_min(scales, j, &sc[j], &mn[j]);
    /* 4 chunks of 64: 32 bytes hold sub-block 2c in their low nibbles and
     * sub-block 2c + 1 in their high ones; qh bit 2c and 2c + 1 of byte l are
     * the fifth bits of values 64c + l and 64c + 32 + l. */
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            int h0 = qh ? (qh[l] >> (2 * c)) & 1 : 0, h1 = qh ? (qh[l] >> (2 * c + 1)) & 1 : 0;
            q[64 * c + l] = (uint8_t)((qs[32 * c + l] & 0x0f) | h0 << 4);
            q[64 * c + 32 + l] = (uint8_t)((qs[32 * c + l] >> 4) | h1 << 4);
        }
}

void qk_unpack(DType type, const void *blk, uint8_t q[QK_K], int sc[16], int mn[16], float *d,
               float *dmin) {
    qk_unpack_of(type, blk, q, sc, mn, d, dmin);
}

/* One block (or super-block) widened to float. */
static void dequantize_block(float *out, const void *blk, DType type) {
    if (dtype_is_k(type)) {
        uint8_t q[QK_K];
        int sc[16], mn[16];
        float d, dmin;
        qk_unpack(type, blk, q, sc, mn, &d, &dmin);
        for (int i = 0; i < QK_K; i++)
            out[i] = type == DT_Q6_K ? d * (float)sc[i / 16] * (float)(q[i] - 32)
                                     : d * (float)sc[i / 32] * (float)q[i] - dmin * (float)mn[i / 32];
        return;
    }
    int8_t q[QK4];
    float d, m;
    q32_unpack(type, blk, q, &d, &m);
    for (int i = 0; i < QK4; i++) out[i] = d * (float)q[i] + m;
}

void dequantize_row_small(float *out, const void *row, DType type, int K) {
    int B = dtype_block(type);
    size_t bytes = dtype_row_bytes(type, B);
    for (int b = 0; b < K / B; b++) dequantize_block(out + (size_t)b * B, (const uint8_t *)row + b * bytes, type);
}

/* ------------------------------------------------------------ dot products */

/* Plain reference: one row widened block by block, dotted with each of T
 * rows of x (K apart) in float, into out[t * stride]. Each block is widened
 * once for all T tokens; each token's sum still runs block after block, value
 * after value, from 0, as one token's alone would. */
void small_dots_ref(float *out, size_t stride, const void *row, DType type, const float *x, int K, int T) {
    int B = dtype_block(type);
    size_t bytes = dtype_row_bytes(type, B);
    float w[QK_K];
    for (int t = 0; t < T; t++) out[(size_t)t * stride] = 0.0f;
    for (int b = 0; b < K / B; b++) {
        dequantize_block(w, (const uint8_t *)row + b * bytes, type);
        for (int t = 0; t < T; t++) {
            const float *xb = x + (size_t)t * K + (size_t)b * B;
            float sum = out[(size_t)t * stride];
            for (int i = 0; i < B; i++) sum += w[i] * xb[i];
            out[(size_t)t * stride] = sum;
        }
    }
}

/* The integer arithmetic of the fast paths, as plain loops. 32-value
 * formats against a row of Q8_0 activations (ActRow): per block
 *     d_w d_x sum_i q_w[i] q_x[i]  +  m_w d_x sum_i q_x[i]. */
static inline __attribute__((always_inline)) float q32_dot_int_of(const uint8_t *row, DType type, ActRow xr,
                                                                   int K) {
    /* The block's fields read in place (q32_unpack's layout, inlined with
     * `type` a constant), the offset taken off each nibble before its product
     * (Q4_1 and Q5_1 also sum the activations, for the m term), the fifth
     * bits' products in a loop of their own: the same integer as the sum of
     * (q - offset) x, so the same bits as any other way of summing it. The
     * 16 nibble pairs stay a loop (`unroll 1`): unrolled, GCC 12 left them as
     * scalar code. On one Zen 5 core from cache (kbench --isa generic --shape
     * 2048x2048 --pool-mib 0), through a call to q32_unpack per block this
     * read about 1 GB/s of weights; inlined, 1.4 to 1.8; now Q4_0 4.9, Q4_1
     * 4.0, Q5_0 3.9, Q5_1 3.2. Each block still ends its sums across vector
     * lanes, which is what the AVX-512 kernels avoid. */
    size_t bytes = dtype_row_bytes(type, QK4);
    int qs_at = type == DT_Q4_0 ? 2 : type == DT_Q4_1 ? 4 : type == DT_Q5_0 ? 6 : 8;
    int offset = type == DT_Q4_0 ? 8 : type == DT_Q5_0 ? 16 : 0, five = type == DT_Q5_0 || type == DT_Q5_1;
    int with_m = type == DT_Q4_1 || type == DT_Q5_1;
    float sum = 0.0f;
    for (int b = 0; b < K / QK4; b++) {
        const uint8_t *blk = row + (size_t)b * bytes, *qs = blk + qs_at;
        const int8_t *x = xr.qs + b * QK4;
        uint16_t dh, mh = 0;
        uint32_t high = 0;
        memcpy(&dh, blk, 2);
        if (with_m) memcpy(&mh, blk + 2, 2);
        if (five) memcpy(&high, blk + (with_m ? 4 : 2), 4);   /* little-endian, as every x86 file */
        int32_t dot = 0, xsum = 0, hsum = 0;
#pragma GCC unroll 1   /* kept a loop, so that it is vectorized whole rather than unrolled */
        for (int i = 0; i < 16; i++) {   /* the nibbles, values i and i + 16, less the offset */
            dot += ((qs[i] & 0x0f) - offset) * x[i] + ((qs[i] >> 4) - offset) * x[i + 16];
            if (with_m) xsum += x[i] + x[i + 16];
        }
        if (five)   /* bit i of qh adds 16 to value i */
            for (int i = 0; i < QK4; i++) hsum += (int32_t)((high >> i) & 1) * x[i];
        int32_t isum = dot + 16 * hsum;   /* sum (q - offset) x, exactly */
        float d = fp16_to_fp32_branchless(dh), m = with_m ? fp16_to_fp32_branchless(mh) : 0.0f;
        sum += d * xr.d[b] * (float)isum + m * xr.d[b] * (float)xsum;
    }
    return sum;
}

static float q32_dot_int(const void *row, DType type, ActRow xr, int K) {
    switch (type) {   /* one copy of the loop per type */
    case DT_Q4_0: return q32_dot_int_of(row, DT_Q4_0, xr, K);
    case DT_Q4_1: return q32_dot_int_of(row, DT_Q4_1, xr, K);
    case DT_Q5_0: return q32_dot_int_of(row, DT_Q5_0, xr, K);
    default: return q32_dot_int_of(row, DT_Q5_1, xr, K);
    }
}

/* K formats against Q8_K activations: per super-block
 *     d_w d_x sum_j sc[j] sum_{i in j} q_w[i] q_x[i]  -  dmin d_x sum_j mn[j] sum_{i in j} q_x[i]
 * (Q6_K: q_w - 32 for q_w, no min term). The sums over j are exact integers.
 * One row against nt tokens (x[t] the Q8_K row of token t, nt <= QK_TOKENS):
 * each super-block is unpacked once for all of them, and each token's sum
 * runs over the super-blocks in order, as it would alone, so a token's result
 * does not depend on how many others came with it. */
enum { QK_TOKENS = 8 };

static inline __attribute__((always_inline)) void qk_dot_int_of(float *out, size_t out_stride, const uint8_t *row,
                                                                 DType type, const BlockQ8_K *const x[], int nt,
                                                                 int K) {
    size_t bytes = dtype_row_bytes(type, QK_K);
    int G = type == DT_Q6_K ? 16 : 32;   /* values per sub-block */
    float sum[QK_TOKENS] = {0};
    for (int b = 0; b < K / QK_K; b++) {
        uint8_t q[QK_K];
        int sc[16], mn[16];
        float d, dmin;
        qk_unpack_of(type, row + b * bytes, q, sc, mn, &d, &dmin);
        for (int t = 0; t < nt; t++) {
            const BlockQ8_K *xb = &x[t][b];
            int32_t isum = 0, msum = 0;
            for (int j = 0; j < QK_K / G; j++) {
                int32_t s = 0;
#pragma GCC unroll 1   /* kept a loop, so that it is vectorized whole rather than unrolled */
                for (int i = 0; i < G; i++)
                    s += (type == DT_Q6_K ? q[j * G + i] - 32 : q[j * G + i]) * xb->qs[j * G + i];
                isum += sc[j] * s;
                if (type != DT_Q6_K) msum += mn[j] * (xb->bsums[2 * j] + xb->bsums[2 * j + 1]);
            }
            sum[t] += d * xb->d * (float)isum - dmin * xb->d * (float)msum;
        }
    }
    for (int t = 0; t < nt; t++) out[t * out_stride] = sum[t];
}

static void qk_dot_int(float *out, size_t out_stride, const void *row, DType type, const BlockQ8_K *const x[],
                       int nt, int K) {
    switch (type) {   /* one copy of the loop per type */
    case DT_Q4_K: qk_dot_int_of(out, out_stride, row, DT_Q4_K, x, nt, K); break;
    case DT_Q5_K: qk_dot_int_of(out, out_stride, row, DT_Q5_K, x, nt, K); break;
    default: qk_dot_int_of(out, out_stride, row, DT_Q6_K, x, nt, K); break;
    }
}

size_t small_act_stride(DType type, int K) {
    if (dtype_is_k(type)) return (size_t)(K / QK_K) * sizeof(BlockQ8_K);
    return act_stride(K) > q32_act_stride(K) ? act_stride(K) : q32_act_stride(K);
}

void small_act_pack_k(uint8_t *act, const float *x, int T, int K) {
    for (int t = 0; t < T; t++)
        quantize_row_q8_k_ref((BlockQ8_K *)(act + (size_t)t * small_act_stride(DT_Q4_K, K)), x + (size_t)t * K, K);
}

void small_rows_generic(const MatmulJob *job, int part, int n0, int n1) {
    DType type = job->W->type;
    int N = job->W->N, K = job->W->K;
    if (dtype_is_k(type)) {
        for (int t0 = 0; t0 < job->T; t0 += QK_TOKENS) {
            int nt = job->T - t0 < QK_TOKENS ? job->T - t0 : QK_TOKENS;
            const BlockQ8_K *x[QK_TOKENS];
            for (int t = 0; t < nt; t++)
                x[t] = (const BlockQ8_K *)(job->act + (size_t)(t0 + t) * small_act_stride(type, K));
            for (int n = n0; n < n1; n++)
                qk_dot_int(job->out + (size_t)t0 * N + n, (size_t)N, row_ptr(job->W, n), type, x, nt, K);
        }
        return;
    }
    for (int t = 0; t < job->T; t++)
        for (int n = n0; n < n1; n++)
            job->out[(size_t)t * N + n] = q32_dot_int(row_ptr(job->W, n), type, act_row(job->act, K, t), K);
}

/* ------------------------------------------------------------ quantizers
 *
 * Round-to-nearest: for each block the scale that puts its range on the
 * integer grid, each value rounded to the nearest step. llama.cpp's own
 * quantizers search for the scale (and min) of least squared error instead;
 * the files differ, the layouts and the arithmetic that reads them do not. */

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* x / d rounded to nearest, 0 where d is 0 or x is not a number; kept far
 * inside int's range (the callers clamp to the grid), since converting a
 * float beyond it is undefined. */
static int round_div(float x, float d) {
    float v = d != 0.0f ? nearbyintf(x / d) : 0.0f;
    return v != v ? 0 : v > 1e6f ? 1000000 : v < -1e6f ? -1000000 : (int)v;
}

/* The value of largest magnitude, sign kept. */
static float signed_amax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), max = x[i];
    return max;
}

/* One 32-value block: symmetric (Q4_0, Q5_0: d = max / -2^(bits-1), so the
 * extreme value lands on the grid's end that has room) or with an offset
 * (Q4_1, Q5_1: m = min, d = (max - min) / (2^bits - 1)). */
static void quantize_q32(void *blk, const float *x, DType type) {
    int bits = type == DT_Q4_0 || type == DT_Q4_1 ? 4 : 5, top = (1 << bits) - 1;
    int symmetric = type == DT_Q4_0 || type == DT_Q5_0;
    float d, m = 0.0f;
    if (symmetric) {
        d = signed_amax(x, QK4) / (float)-(1 << (bits - 1));
    } else {
        float lo = x[0], hi = x[0];
        for (int i = 1; i < QK4; i++) lo = fminf(lo, x[i]), hi = fmaxf(hi, x[i]);
        d = (hi - lo) / (float)top;
        m = lo;
    }
    uint16_t dh = fp32_to_fp16(d), mh = fp32_to_fp16(m);
    float ds = fp16_to_fp32(dh), ms = fp16_to_fp32(mh);   /* round against what is stored */
    int q[QK4];
    for (int i = 0; i < QK4; i++)
        q[i] = symmetric ? clampi(round_div(x[i], ds) + (1 << (bits - 1)), 0, top)
                         : clampi(round_div(x[i] - ms, ds), 0, top);
    uint8_t qs[16];
    uint32_t high = 0;
    for (int i = 0; i < 16; i++) {
        qs[i] = (uint8_t)((q[i] & 0x0f) | (q[i + 16] & 0x0f) << 4);
        high |= (uint32_t)(q[i] >> 4) << i | (uint32_t)(q[i + 16] >> 4) << (i + 16);
    }
    switch (type) {
    case DT_Q4_0: {
        BlockQ4_0 *b = blk;
        b->d = dh, memcpy(b->qs, qs, 16);
        break;
    }
    case DT_Q4_1: {
        BlockQ4_1 *b = blk;
        b->d = dh, b->m = mh, memcpy(b->qs, qs, 16);
        break;
    }
    case DT_Q5_0: {
        BlockQ5_0 *b = blk;
        b->d = dh, memcpy(b->qh, &high, 4), memcpy(b->qs, qs, 16);
        break;
    }
    default: {
        BlockQ5_1 *b = blk;
        b->d = dh, b->m = mh, memcpy(b->qh, &high, 4), memcpy(b->qs, qs, 16);
        break;
    }
    }
}

/* Q4_K and Q5_K: each sub-block of 32 gets scale (hi - lo) / top and min
 * -lo (lo clamped to <= 0, since the layout can only subtract); the mins are
 * rounded to 6 bits against dmin = max min / 63, then each scale is rounded
 * up against d = max scale / 63 (to 63 at most) so that the grid, from the
 * rounded min, still reaches the sub-block's largest value; the values are
 * rounded against the scales and mins as stored. A value so lands within
 * half a step of the grid, or within dmin / 2 where the rounded min or the
 * cap at 63 cut the range. */
static void quantize_k45(void *blk, const float *x, DType type) {
    int top = type == DT_Q4_K ? 15 : 31;
    float scale[8], mins[8], smax = 0.0f, mmax = 0.0f;
    for (int j = 0; j < 8; j++) {
        float lo = 0.0f, hi = x[32 * j];
        for (int i = 0; i < 32; i++) lo = fminf(lo, x[32 * j + i]), hi = fmaxf(hi, x[32 * j + i]);
        scale[j] = (hi - lo) / (float)top;
        mins[j] = -lo;
        smax = fmaxf(smax, scale[j]), mmax = fmaxf(mmax, mins[j]);
    }
    uint16_t dh = fp32_to_fp16(smax / 63.0f), mh = fp32_to_fp16(mmax / 63.0f);
    float d = fp16_to_fp32(dh), dmin = fp16_to_fp32(mh);
    uint8_t scales[12] = {0}, q[QK_K];
    for (int j = 0; j < 8; j++) {
        int mn = clampi(round_div(mins[j], dmin), 0, 63);
        float dm = dmin * (float)mn, hi = -dm;
        for (int i = 0; i < 32; i++) hi = fmaxf(hi, x[32 * j + i]);
        float need = d > 0.0f ? ceilf((hi + dm) / ((float)top * d)) : 0.0f;
        int sc = !(need > 0.0f) ? 0 : need > 63.0f ? 63 : (int)need;   /* NaN -> 0 */
        k_pack_scale_min(scales, j, sc, mn);
        float ds = d * (float)sc;
        for (int i = 0; i < 32; i++) q[32 * j + i] = (uint8_t)clampi(round_div(x[32 * j + i] + dm, ds), 0, top);
    }
    uint8_t qs[128], qh[32] = {0};
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            uint8_t a = q[64 * c + l], b = q[64 * c + 32 + l];
            qs[32 * c + l] = (uint8_t)((a & 0x0f) | (b & 0x0f) << 4);
            qh[l] |= (uint8_t)((a >> 4) << (2 * c) | (b >> 4) << (2 * c + 1));
        }
    if (type == DT_Q4_K) {
        BlockQ4_K *b = blk;
        b->d = dh, b->dmin = mh, memcpy(b->scales, scales, 12), memcpy(b->qs, qs, 128);
    } else {
        BlockQ5_K *b = blk;
        b->d = dh, b->dmin = mh, memcpy(b->scales, scales, 12), memcpy(b->qh, qh, 32);
        memcpy(b->qs, qs, 128);
    }
}

/* Q6_K: each group of 16 gets the symmetric scale max / -32; the sixteen
 * scales are rounded to signed 8 bits against d = max |scale| / 127. */
static void quantize_q6_k(BlockQ6_K *b, const float *x) {
    float scale[16], smax = 0.0f;
    for (int g = 0; g < 16; g++) {
        scale[g] = signed_amax(x + 16 * g, 16) / -32.0f;
        smax = fmaxf(smax, fabsf(scale[g]));
    }
    uint16_t dh = fp32_to_fp16(smax / 127.0f);
    float d = fp16_to_fp32(dh);
    uint8_t q[QK_K];
    for (int g = 0; g < 16; g++) {
        int sc = clampi(round_div(scale[g], d), -127, 127);
        b->scales[g] = (int8_t)sc;
        for (int i = 0; i < 16; i++)
            q[16 * g + i] = (uint8_t)clampi(round_div(x[16 * g + i], d * (float)sc) + 32, 0, 63);
    }
    b->d = dh;
    for (int h = 0; h < 2; h++) {
        uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h, *v = q + 128 * h;
        for (int l = 0; l < 32; l++) {
            ql[l] = (uint8_t)((v[l] & 0x0f) | (v[l + 64] & 0x0f) << 4);
            ql[l + 32] = (uint8_t)((v[l + 32] & 0x0f) | (v[l + 96] & 0x0f) << 4);
            qh[l] = (uint8_t)(v[l] >> 4 | (v[l + 32] >> 4) << 2 | (v[l + 64] >> 4) << 4 | (v[l + 96] >> 4) << 6);
        }
    }
}

int quantize_row(void *out, const float *x, DType type, int K) {
    if (!dtype_is_small_quant(type) || dtype_row_bytes(type, K) == 0) return ST_ARG;
    int B = dtype_block(type);
    size_t bytes = dtype_row_bytes(type, B);
    for (int b = 0; b < K / B; b++) {
        void *blk = (uint8_t *)out + b * bytes;
        const float *xb = x + (size_t)b * B;
        if (type == DT_Q6_K) quantize_q6_k(blk, xb);
        else if (dtype_is_k(type)) quantize_k45(blk, xb, type);
        else quantize_q32(blk, xb, type);
    }
    return ST_OK;
}
