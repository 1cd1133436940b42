/* ops.c - numeric kernels (see ops.h).
 *
 * Reading order: number formats (fp16, Q8_0), the plain-loop references, then
 * the fast paths that model.c calls through matmul(). */
#include "ops.h"
#include <cblas.h>
#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

void openblas_set_num_threads(int n);   /* from OpenBLAS; not in every cblas.h */

/* ---------------------------------------------------------------- formats */

const char *dtype_name(int type) {
    switch (type) {
    case DT_F32: return "F32";
    case DT_F16: return "F16";
    case DT_Q8_0: return "Q8_0";
    default: return "unknown";
    }
}

int dtype_known(int type) { return type == DT_F32 || type == DT_F16 || type == DT_Q8_0; }

size_t dtype_row_bytes(DType type, int64_t n) {
    if (n <= 0) return 0;
    switch (type) {
    case DT_F32: return (size_t)n * 4;
    case DT_F16: return (size_t)n * 2;
    case DT_Q8_0: return n % QK8_0 ? 0 : (size_t)(n / QK8_0) * sizeof(BlockQ8_0);
    }
    return 0;
}

float fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else {                      /* subnormal: value = mant * 2^-24 */
            float f = (float)mant * 0x1p-24f;
            return sign ? -f : f;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);            /* inf / nan */
    } else {
        bits = sign | ((exp + 112) << 23) | (mant << 13);    /* rebias 15 -> 127 */
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t fp32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffff;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);  /* rounds to >= 65536: inf */
    if (ax < 0x38800000u) {                                    /* below 2^-14: subnormal */
        float a;
        memcpy(&a, &ax, 4);
        return (uint16_t)(sign | (uint32_t)lrintf(a * 0x1p24f)); /* ties to even */
    }
    uint32_t mant = ax & 0x7fffff, exp = (ax >> 23) - 112;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fff;                             /* 13 bits dropped */
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;     /* nearest, ties to even */
    return (uint16_t)(sign | h);
}

/* ------------------------------------------------------------- threading */

static int g_threads = 1;

void ops_set_threads(int n) {
    if (n < 1) n = 1;
    g_threads = n;
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
    openblas_set_num_threads(n);
}

int ops_threads(void) { return g_threads; }

/* ------------------------------------------------------------ quantizing */

void quantize_row_q8_0(BlockQ8_0 *out, const float *x, int K) {
    for (int b = 0; b < K / QK8_0; b++) {
        const float *xb = x + b * QK8_0;
        float amax = 0.0f;
        for (int i = 0; i < QK8_0; i++) amax = fmaxf(amax, fabsf(xb[i]));
        /* llama.cpp: d = amax / 127 stored as fp16; values scaled by 127 / amax
         * and rounded to nearest even. Matching this lets greedy outputs match. */
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        out[b].d = fp32_to_fp16(amax / 127.0f);
        for (int i = 0; i < QK8_0; i++) out[b].qs[i] = (int8_t)nearbyintf(xb[i] * id);
    }
}

void dequantize_row(float *out, const void *row, DType type, int K) {
    switch (type) {
    case DT_F32:
        memcpy(out, row, (size_t)K * 4);
        break;
    case DT_F16: {
        const uint16_t *h = row;
        for (int i = 0; i < K; i++) out[i] = fp16_to_fp32(h[i]);
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
    }
}

/* ------------------------------------------------------ plain references */

static const uint8_t *row_ptr(const Mat *W, int n) {
    return (const uint8_t *)W->data + (size_t)n * dtype_row_bytes(W->type, W->K);
}

/* One Q8_0 row of W dotted with one Q8_0 row of activations: per block an
 * integer dot product, then one multiply by both scales. */
static float dot_q8_0_ref(const BlockQ8_0 *w, const BlockQ8_0 *x, int K) {
    float sum = 0.0f;
    for (int b = 0; b < K / QK8_0; b++) {
        int32_t isum = 0;
        for (int i = 0; i < QK8_0; i++) isum += (int32_t)w[b].qs[i] * x[b].qs[i];
        sum += (float)isum * (fp16_to_fp32(w[b].d) * fp16_to_fp32(x[b].d));
    }
    return sum;
}

void matmul_ref(float *out, const float *x, const Mat *W, int T) {
    int N = W->N, K = W->K;
    if (W->type == DT_Q8_0) {
        BlockQ8_0 xq[K / QK8_0 > 0 ? K / QK8_0 : 1];   /* one row at a time */
        for (int t = 0; t < T; t++) {
            quantize_row_q8_0(xq, x + (size_t)t * K, K);
            for (int n = 0; n < N; n++)
                out[(size_t)t * N + n] = dot_q8_0_ref((const BlockQ8_0 *)row_ptr(W, n), xq, K);
        }
        return;
    }
    float wrow[K];
    for (int n = 0; n < N; n++) {
        dequantize_row(wrow, row_ptr(W, n), W->type, K);
        for (int t = 0; t < T; t++) {
            const float *xt = x + (size_t)t * K;
            float sum = 0.0f;
            for (int k = 0; k < K; k++) sum += wrow[k] * xt[k];
            out[(size_t)t * N + n] = sum;
        }
    }
}

void rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    float ss = 0.0f;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    float scale = 1.0f / sqrtf(ss / n + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

void softmax(float *x, int n) {
    float max = x[0];
    for (int i = 1; i < n; i++) max = fmaxf(max, x[i]);
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    for (int i = 0; i < n; i++) x[i] /= sum;
}

void rope(float *x, int n_heads, int head_dim, int n_rot, const float *cos_sin) {
    for (int h = 0; h < n_heads; h++) {
        float *v = x + h * head_dim;
        for (int i = 0; i < n_rot / 2; i++) {
            float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
            float a = v[2 * i], b = v[2 * i + 1];
            v[2 * i] = a * c - b * s;
            v[2 * i + 1] = a * s + b * c;
        }
    }
}

void swiglu(float *h, const float *g, int n) {
    for (int i = 0; i < n; i++) h[i] = h[i] / (1.0f + expf(-h[i])) * g[i];
}

/* ------------------------------------------------------------ fast paths */

size_t matmul_scratch_bytes(DType type, int T, int K) {
    if (type == DT_Q8_0) return (size_t)T * dtype_row_bytes(DT_Q8_0, K);
    if (type == DT_F16) return (size_t)ops_threads() * K * sizeof(float);
    return 0;
}

void matmul(float *out, const float *x, const Mat *W, int T, void *scratch) {
    int N = W->N, K = W->K;
    switch (W->type) {
    case DT_F32:
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, N, K, 1.0f, x, K,
                    (const float *)W->data, K, 0.0f, out, N);
        return;
    case DT_F16: {
        float *wrows = scratch;
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
#ifdef _OPENMP
            float *wrow = wrows + (size_t)omp_get_thread_num() * K;
#else
            float *wrow = wrows;
#endif
            dequantize_row(wrow, row_ptr(W, n), DT_F16, K);
            for (int t = 0; t < T; t++) {
                const float *xt = x + (size_t)t * K;
                float sum = 0.0f;
                for (int k = 0; k < K; k++) sum += wrow[k] * xt[k];
                out[(size_t)t * N + n] = sum;
            }
        }
        return;
    }
    case DT_Q8_0: {
        BlockQ8_0 *xq = scratch;
        size_t xrow = (size_t)K / QK8_0;
        for (int t = 0; t < T; t++) quantize_row_q8_0(xq + t * xrow, x + (size_t)t * K, K);
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            const BlockQ8_0 *w = (const BlockQ8_0 *)row_ptr(W, n);
            for (int t = 0; t < T; t++) out[(size_t)t * N + n] = dot_q8_0_ref(w, xq + t * xrow, K);
        }
        return;
    }
    }
}
