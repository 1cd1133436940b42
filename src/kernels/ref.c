/* ref.c - the plain-loop references of ops.h: one thread, no intrinsics, no
 * OpenBLAS, written to be read and stepped through. The plain path (LLM_ISA=plain,
 * the debug build's start) runs these and nothing else; every other path is
 * tested against them. Q8_0 rounds its activations and adds its block sums
 * exactly as the AVX-512 tiles do (rows.h, q8_0_block_into_lanes), so on
 * Q8_0 every path gives the same bits. */
#include "kernels/ops.h"
#include "kernels/rows.h"
#include <math.h>
#include <string.h>

/* ------------------------------------------------------------ quantizing */

/* One block of 32 floats to 32 int8 values; returns d as fp16 bits. */
uint16_t q8_0_quantize_block_ref(int8_t qs[QK8_0], const float *xb) {
    float amax = 0.0f;
    int finite = 1;
    for (int i = 0; i < QK8_0; i++) {
        amax = fmaxf(amax, fabsf(xb[i]));
        finite &= isfinite(xb[i]) != 0;
    }
    if (!finite) {   /* see Q8_0_NONFINITE_SCALE */
        memset(qs, 0, QK8_0);
        return Q8_0_NONFINITE_SCALE;
    }
    /* llama.cpp (x86): d = amax / 127 stored as fp16; values scaled by 127 / amax
     * and rounded to nearest even. Matching this lets greedy outputs match. */
    float id = q8_0_multiplier(amax);
    for (int i = 0; i < QK8_0; i++) qs[i] = (int8_t)nearbyintf(xb[i] * id);
    return fp32_to_fp16(amax / 127.0f);
}

void quantize_row_q8_0_ref(BlockQ8_0 *out, const float *x, int K) {
    for (int b = 0; b < K / QK8_0; b++) out[b].d = q8_0_quantize_block_ref(out[b].qs, x + b * QK8_0);
}

void dequantize_row(float *out, const void *row, DType type, int K) {
    switch (type) {
    case DT_F32:
        memcpy(out, row, (size_t)K * 4);
        break;
    case DT_F16: {
        const uint16_t *h = row;
        for (int i = 0; i < K; i++) out[i] = fp16_to_fp32_branchless(h[i]);
        break;
    }
    case DT_BF16: {
        const uint16_t *h = row;
        for (int i = 0; i < K; i++) out[i] = bf16_to_fp32(h[i]);
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
    default:
        dequantize_row_small(out, row, type, K);
        break;
    }
}

void bf16e_row_to_bf16(uint16_t *out, const Mat *W, int n) {
    const Bf16eData *d = W->data;
    const uint8_t *blk = bf16e_row(W, n), *esc = d->esc + d->esc_row[n];
    for (int b = 0; b < W->K / BF16E_BLOCK; b++, blk += BF16E_BLOCK_BYTES) {
        for (int k = 0; k < BF16E_BLOCK; k++) out[b * BF16E_BLOCK + k] = bf16e_weight(blk, esc, d->exps, k);
        esc += __builtin_popcountll(bf16e_escapes(blk));
    }
}

void dequantize_mat_row(float *out, const Mat *W, int n) {
    if (W->type != DT_BF16E) {
        dequantize_row(out, row_ptr(W, n), W->type, W->K);
        return;
    }
    const Bf16eData *d = W->data;
    const uint8_t *blk = bf16e_row(W, n), *esc = d->esc + d->esc_row[n];
    for (int b = 0; b < W->K / BF16E_BLOCK; b++, blk += BF16E_BLOCK_BYTES) {
        for (int k = 0; k < BF16E_BLOCK; k++)
            out[b * BF16E_BLOCK + k] = bf16_to_fp32(bf16e_weight(blk, esc, d->exps, k));
        esc += __builtin_popcountll(bf16e_escapes(blk));
    }
}

/* ------------------------------------------------------ plain references */

/* Weight (n, k) of a float-typed W (F32, F16 or BF16) as a float. */
static float weight_at(const Mat *W, int n, int k) {
    const uint8_t *row = row_ptr(W, n);
    if (W->type == DT_F16) return fp16_to_fp32(((const uint16_t *)row)[k]);
    if (W->type == DT_BF16) return bf16_to_fp32(((const uint16_t *)row)[k]);
    return ((const float *)row)[k];
}

/* The most Q8_0 blocks of one token that matmul_ref rounds once and keeps
 * (K up to 32768, 34 KiB of stack); a longer row, which no model here has,
 * is rounded again for every output row, to the same bits. */
enum { REF_Q8_BLOCKS = 1024 };

void matmul_ref(float *out, const float *x, const Mat *W, int T) {
    int N = W->N, K = W->K;
    if (dtype_is_small_quant(W->type)) {   /* row by row: each block widened once */
        for (int n = 0; n < N; n++) small_dots_ref(out + n, N, row_ptr(W, n), W->type, x, K, T);
        return;
    }
    BlockQ8_0 xq[REF_Q8_BLOCKS];
    int keep = W->type == DT_Q8_0 && K / QK8_0 <= REF_Q8_BLOCKS;
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * K;
        /* Q8_0 rounds the token's activations as quantize_row_q8_0 does,
         * once for all N rows */
        if (keep) quantize_row_q8_0_ref(xq, xt, K);
        for (int n = 0; n < N; n++) {
            float sum = 0.0f;
            if (W->type == DT_Q8_0) {
                /* Per block: the rounded activations, exact integer
                 * products, one multiply by both scales. */
                const BlockQ8_0 *w = (const BlockQ8_0 *)row_ptr(W, n);
                float lane[LANES] = {0};
                for (int b = 0; b < K / QK8_0; b++) {
                    BlockQ8_0 one;
                    const BlockQ8_0 *xb = &one;
                    if (keep) xb = &xq[b];
                    else one.d = q8_0_quantize_block_ref(one.qs, xt + b * QK8_0);
                    q8_0_block_into_lanes(lane, b, w[b].qs, xb->qs,
                                          fp16_to_fp32(w[b].d) * fp16_to_fp32(xb->d));
                }
                sum = lanes_sum(lane);
            } else if (W->type == DT_BF16E) {
                /* BF16's loop, each weight decoded where it is read: a
                 * block's escapes start where the last block's ended */
                const Bf16eData *d = W->data;
                const uint8_t *blk = bf16e_row(W, n), *esc = d->esc + d->esc_row[n];
                for (int k = 0; k < K; k++) {
                    sum += bf16_to_fp32(bf16e_weight(blk, esc, d->exps, k % BF16E_BLOCK)) * xt[k];
                    if (k % BF16E_BLOCK == BF16E_BLOCK - 1) {
                        esc += __builtin_popcountll(bf16e_escapes(blk));
                        blk += BF16E_BLOCK_BYTES;
                    }
                }
            } else {
                for (int k = 0; k < K; k++) sum += weight_at(W, n, k) * xt[k];
            }
            out[(size_t)t * N + n] = sum;
        }
    }
}

/* Q4_K: per super-block I = sum_j sc_j S_j and M = sum_j mn_j X_j exactly
 * (S_j the integer dot of sub-block j, X_j the sum of its activations), then
 * acc = fma(I, d d_x, acc), acc = fma(M, -dmin d_x, acc) (tiles_amx.c). Each
 * token's super-blocks are rounded to Q8_K again for every row: slow, plain. */
static void matmul_blocks_ref_k(float *out, const float *x, const Mat *W, int T) {
    int N = W->N, K = W->K;
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            const uint8_t *row = row_ptr(W, n);
            float acc = 0.0f;
            for (int s = 0; s < K / QK_K; s++) {
                BlockQ8_K xq;
                quantize_row_q8_k_ref(&xq, x + (size_t)t * K + (size_t)s * QK_K, QK_K);
                uint8_t q[QK_K];
                int sc[16], mn[16];
                float d, dmin;
                qk_unpack(DT_Q4_K, row + (size_t)s * sizeof(BlockQ4_K), q, sc, mn, &d, &dmin);
                int32_t I = 0, M = 0;
                for (int j = 0; j < 8; j++) {
                    int32_t S = 0, X = 0;
                    for (int i = 32 * j; i < 32 * j + 32; i++) {
                        S += q[i] * xq.qs[i];
                        X += xq.qs[i];
                    }
                    I += sc[j] * S;
                    M += mn[j] * X;
                }
                acc = fmaf((float)I, d * xq.d, acc);
                acc = fmaf((float)M, -dmin * xq.d, acc);
            }
            out[(size_t)t * N + n] = acc;
        }
}

/* Q8_0 and Q4_0 in the AMX tiles' order (tiles_amx.c): per block the exact
 * integer sum of its 32 products, then one float chain per (row, token):
 * acc = fma(sum, d_w * d_x, acc), block after block. Q4_K: above. */
void matmul_blocks_ref(float *out, const float *x, const Mat *W, int T) {
    int N = W->N, K = W->K;
    if (W->type == DT_Q4_K) {
        matmul_blocks_ref_k(out, x, W, T);
        return;
    }
    BlockQ8_0 xq[REF_Q8_BLOCKS];   /* as matmul_ref: kept up to this many blocks */
    int keep = K / QK8_0 <= REF_Q8_BLOCKS;
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * K;
        if (keep) quantize_row_q8_0_ref(xq, xt, K);
        for (int n = 0; n < N; n++) {
            const uint8_t *row = row_ptr(W, n);
            float acc = 0.0f;
            for (int b = 0; b < K / QK8_0; b++) {
                BlockQ8_0 one;
                const BlockQ8_0 *xb = &one;
                if (keep) xb = &xq[b];
                else one.d = q8_0_quantize_block_ref(one.qs, xt + b * QK8_0);
                int8_t wq[QK8_0];
                float dw, m;
                if (W->type == DT_Q8_0) {
                    const BlockQ8_0 *w = (const BlockQ8_0 *)row + b;
                    memcpy(wq, w->qs, QK8_0);
                    dw = fp16_to_fp32(w->d);
                } else {
                    q32_unpack(W->type, row + (size_t)b * sizeof(BlockQ4_0), wq, &dw, &m);
                }
                int32_t isum = 0;   /* exact: at most 32 * 128 * 128 */
                for (int i = 0; i < QK8_0; i++) isum += wq[i] * xb->qs[i];
                acc = fmaf((float)isum, dw * fp16_to_fp32(xb->d), acc);
            }
            out[(size_t)t * N + n] = acc;
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
 * turns into vector code; `?:` rather than fmaxf, which is a call. On the
 * plain path, the reference instead. */

void rope(float *x, int n_heads, int head_dim, int n_rot, const float *cos_sin) {
    for (int h = 0; h < n_heads; h++) {
        float *v = x + h * head_dim;
        for (int i = 0; i < n_rot / 2; i++) {
            float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
            float a = v[2 * i], b = v[2 * i + 1];
            /* Each result is written as one fused multiply-add of a product:
             * left as a * c - b * s, GCC turns the pair into a complex
             * multiply (vfmaddsub) when it vectorizes, fusing where the
             * scalar code does not even with -ffp-contract=off, so the
             * vector and scalar builds would give different bits. */
            v[2 * i] = fmaf(a, c, -(b * s));
            v[2 * i + 1] = fmaf(a, s, b * c);
        }
    }
}

void rope_neox(float *x, int n_heads, int head_dim, int n_rot, const float *cos_sin) {
    int half = n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + h * head_dim;
        for (int i = 0; i < half; i++) {
            float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
            float a = v[i], b = v[i + half];
            v[i] = fmaf(a, c, -(b * s));      /* as rope: one fused operation each */
            v[i + half] = fmaf(a, s, b * c);
        }
    }
}

void swiglu(float *h, const float *g, int n) {
    for (int i = 0; i < n; i++) h[i] = h[i] / (1.0f + ops_exp(-h[i])) * g[i];
}
