/* tiles_generic.c - the generic path's row functions (rows.h): no
 * intrinsics of ours, the fast path of a CPU without AVX-512. Q8_0 in
 * threaded plain loops over activations rounded once per call; F16 and BF16
 * at one token in loops the compiler vectorises; F32, and F16 widened a few
 * rows at a time, through OpenBLAS's sgemm on each thread's rows. */
#include "kernels/rows.h"
#include <cblas.h>
#include <string.h>

/* T rows of x to the int8 layout of rows.h (act_row). */
void act_pack_ref(uint8_t *act, const float *x, int T, int K) {
    for (int t = 0; t < T; t++) {
        ActRowOut r = act_row_out(act, K, t);
        for (int b = 0; b < K / QK8_0; b++)
            r.d[b] = fp16_to_fp32(q8_0_quantize_block_ref(r.qs + b * QK8_0, x + (size_t)t * K + b * QK8_0));
        for (int j = 0; j < K / 4; j++)
            r.corr[j] = -128 * (r.qs[4 * j] + r.qs[4 * j + 1] + r.qs[4 * j + 2] + r.qs[4 * j + 3]);
        for (int b = 0; b < K / QK8_0; b++) {
            int32_t sum = 0;
            for (int i = 0; i < QK8_0; i++) sum += r.qs[b * QK8_0 + i];
            r.off[b] = 8 * sum;
        }
    }
}

/* Q8_0 from activations quantized once per row (act_pack_ref): the
 * arithmetic of matmul_ref, on threads. */
void q8_0_rows_generic(const MatmulJob *job, int part, int n0, int n1) {
    int N = job->W->N, K = job->W->K;
    for (int t = 0; t < job->T; t++) {
        ActRow xr = act_row(job->act, K, t);
        for (int n = n0; n < n1; n++) {
            const BlockQ8_0 *w = (const BlockQ8_0 *)row_ptr(job->W, n);
            float lane[LANES] = {0};
            for (int b = 0; b < K / QK8_0; b++)
                q8_0_block_into_lanes(lane, b, w[b].qs, xr.qs + b * QK8_0,
                                      fp16_to_fp32(w[b].d) * xr.d[b]);
            job->out[(size_t)t * N + n] = lanes_sum(lane);
        }
    }
}

/* F16 and BF16 at T == 1, where widening rows for sgemv would cost as much as
 * the product. In the AVX-512 kernel's order (float_tile with one row and one
 * token): 16 running sums, lane j taking the products of k = j (mod 16) by
 * FMA, a short last step padded with zeros, the lanes added as lanes_sum adds
 * them; so this path and that one give the same bits. The 16 lanes of a step
 * are independent, and the widening has no branch, so the compiler does a
 * step in vector instructions: with a running sum in a plain loop (one add
 * after another, which it may not reorder) this read 2.3 GB/s of F16 from
 * cache on one Zen 5 core, now 12.3 (kbench --isa generic --type F16
 * --shape 2048x2048 --pool-mib 0). */
static inline __attribute__((always_inline)) float half_row_dot(const uint16_t *w, const float *x, int K,
                                                                 int bf16) {
    float lane[LANES] = {0};
    int k = 0;
    for (; k + LANES <= K; k += LANES)
        for (int j = 0; j < LANES; j++) {
            float wv = bf16 ? bf16_to_fp32(w[k + j]) : fp16_to_fp32_branchless(w[k + j]);
            lane[j] = fmaf(wv, x[k + j], lane[j]);
        }
    for (int j = 0; k < K && j < LANES; j++) {
        int in = k + j < K;
        float wv = !in ? 0.0f : bf16 ? bf16_to_fp32(w[k + j]) : fp16_to_fp32(w[k + j]);
        lane[j] = fmaf(wv, in ? x[k + j] : 0.0f, lane[j]);
    }
    return lanes_sum(lane);
}

/* half_row_dot of BF16 for row n of a BF16E matrix, a block of 64 decoded
 * at a time (K is a whole number of blocks, so no short last step): the
 * same products in the same lanes, the same bits. */
static float bf16e_row_dot(const Mat *W, int n, const float *x) {
    const Bf16eData *d = W->data;
    const uint8_t *blk = bf16e_row(W, n), *esc = d->esc + d->esc_row[n];
    float lane[LANES] = {0};
    for (int k = 0; k < W->K; k += BF16E_BLOCK, blk += BF16E_BLOCK_BYTES) {
        float wv[BF16E_BLOCK];
        for (int i = 0; i < BF16E_BLOCK; i++) wv[i] = bf16_to_fp32(bf16e_weight(blk, esc, d->exps, i));
        esc += __builtin_popcountll(bf16e_escapes(blk));
        for (int i = 0; i < BF16E_BLOCK; i += LANES)
            for (int j = 0; j < LANES; j++) lane[j] = fmaf(wv[i + j], x[k + i + j], lane[j]);
    }
    return lanes_sum(lane);
}

void f16_rows_generic(const MatmulJob *job, int part, int n0, int n1) {
    int N = job->W->N, K = job->W->K, bf16 = job->W->type == DT_BF16;
    if (job->W->type == DT_BF16E) {
        for (int n = n0; n < n1; n++)
            for (int t = 0; t < job->T; t++)
                job->out[(size_t)t * N + n] = bf16e_row_dot(job->W, n, job->x + (size_t)t * K);
        return;
    }
    for (int n = n0; n < n1; n++) {
        const uint16_t *w = (const uint16_t *)row_ptr(job->W, n);
        for (int t = 0; t < job->T; t++) {   /* one copy of the loop per type */
            const float *xt = job->x + (size_t)t * K;
            job->out[(size_t)t * N + n] = bf16 ? half_row_dot(w, xt, K, 1) : half_row_dot(w, xt, K, 0);
        }
    }
}

/* --- OpenBLAS for many tokens: sgemm (and sgemv for F32 at T == 1)
 * on each thread's range of rows. */
void f32_rows_blas(const MatmulJob *job, int part, int n0, int n1) {
    int N = job->W->N, K = job->W->K;
    const float *w = (const float *)row_ptr(job->W, n0);
    if (job->T == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, n1 - n0, K, 1.0f, w, K, job->x, 1, 0.0f,
                    job->out + n0, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, job->T, n1 - n0, K, 1.0f, job->x, K,
                    w, K, 0.0f, job->out + n0, N);
}

/* F16: widen a few rows at a time to float in this thread's part of the
 * scratch, then sgemm on them. The widening is 1/T of the work. */
void f16_rows_widened(const MatmulJob *job, int part, int n0, int n1) {
    int N = job->W->N, K = job->W->K, step = job->rows_per_part;
    float *wide = job->wide + (size_t)part * step * K;
    for (int a = n0; a < n1; a += step) {
        int rows = n1 - a < step ? n1 - a : step;
        for (int r = 0; r < rows; r++) {
            const uint16_t *h = (const uint16_t *)row_ptr(job->W, a + r);
#ifdef OPS_X86
            if (job->avx512 && job->W->type == DT_F16) {
                f16_widen_avx512(wide + (size_t)r * K, h, K);
                continue;
            }
            if (job->avx512 && job->W->type == DT_BF16E && bf16e_avx512_ok()) {
                bf16e_widen_avx512(wide + (size_t)r * K, job->W, a + r);
                continue;
            }
            if ((job->avx2 || job->avx512) && job->W->type == DT_BF16E) {   /* AVX-512 without VBMI2 */
                bf16e_widen_avx2(wide + (size_t)r * K, job->W, a + r);
                continue;
            }
#endif
            dequantize_mat_row(wide + (size_t)r * K, job->W, a + r);   /* F16, BF16 or BF16E */
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, job->T, rows, K, 1.0f, job->x, K, wide,
                    K, 0.0f, job->out + a, N);
    }
}
