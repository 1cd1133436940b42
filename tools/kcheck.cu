/* kcheck.cu - every CUDA kernel against its C reference, on random inputs.
 *
 *   build/cuda/kcheck [--seed N]
 *
 * For each kernel of src/kernels/ (gpu_kernels.cuh) and several shapes
 * (odd widths, tails of a token tile, TinyLlama's sizes): fresh random
 * inputs, the output poisoned with NaN before the launch, the GPU's answer
 * and the C reference's (src/kernels/ops.c, src/model.c, computed on the CPU's plain
 * path) compared by max |gpu - ref| / max |ref|. One line per check with the
 * error, its limit, and for the products the GB/s of weights the kernel
 * streamed (median of 20 launches). Exit 1 if any check fails. --quick leaves
 * out TinyLlama's sizes and the timing (for compute-sanitizer); --coded runs
 * only the coded-weight decoders (BF16E, rANS, the fast tier built from a
 * blob: every byte the reference's, their GB/s timed).
 *
 * Limits: 2e-6, or 1e-6 sqrt(K / 128) for long rows, where the GPU adds the
 * same terms in another order (float rounding of a sum of K products grows
 * like sqrt(K) ulps); 0 where the
 * arithmetic is the same operation by operation (RoPE, the embedding);
 * Q8_0 products after a fused RMSNorm or SwiGLU 2e-3, since a value that the
 * two normalisations put an ulp apart can round to the neighbouring int8. */
#include "kernels/gpu_kernels.cuh"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>
extern "C" {
#include "kernels/ops.h"
#include "codec/expcode.h"
#include "codec/wcodec.h"
#include "base/clock.h"
#include "base/mem.h"
#include "rans.h"
/* model.h's prototype (that header is C, not C++): the reference attention. */
void model_attend_paged(float *out, const float *q, const float *kbase, const float *vbase, const int *table, int BS,
                        int n, int S, size_t kvd, float scale);
}

static int failures = 0;
static uint64_t rng = 88172645463325252ull;

static uint64_t next_u64(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static float uniform(void) { return (float)((next_u64() >> 11) * 0x1.0p-53) * 2.0f - 1.0f; }

#define CK(call)                                                                                        \
    do {                                                                                                \
        cudaError_t ck_ = (call);                                                                       \
        if (ck_ != cudaSuccess) {                                                                       \
            fprintf(stderr, "kcheck: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(ck_)); \
            exit(1);                                                                                    \
        }                                                                                               \
    } while (0)

template <typename T> static T *to_dev(const T *h, size_t n) {
    T *d;
    CK(cudaMalloc((void **)&d, n * sizeof(T) + 16));
    CK(cudaMemcpy(d, h, n * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <typename T> static std::vector<T> to_host(const T *d, size_t n) {
    std::vector<T> h(n);
    CK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}
static void poison(float *d, size_t n) { CK(cudaMemset(d, 0xff, n * sizeof(float))); }   /* NaN */

/* max |a - b| / max |b|; any NaN in a makes it infinite. */
static double rel_err(const float *a, const float *b, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        num = std::max(num, (double)fabsf(a[i] - b[i]));
        den = std::max(den, (double)fabsf(b[i]));
    }
    return den > 0 ? num / den : num;
}

static void report(const char *what, double err, double limit, double gbs) {
    int ok = err <= limit;
    failures += !ok;
    printf("%-58s err %.2e (limit %.0e)%s", what, err, limit, ok ? "" : "  FAIL");
    if (gbs > 0) printf("  %7.1f GB/s", gbs);
    printf("\n");
}

/* Random weights of type t, N x K, as the file would hold them. */
static std::vector<uint8_t> random_weights(DType t, int N, int K) {
    size_t row = dtype_row_bytes(t, K);
    std::vector<uint8_t> w(row * N);
    std::vector<float> f(K);
    float s = 1.0f / sqrtf((float)K);
    for (int n = 0; n < N; n++) {
        for (int k = 0; k < K; k++) f[k] = uniform() * s;
        uint8_t *r = w.data() + row * n;
        if (t == DT_F32) memcpy(r, f.data(), row);
        else if (t == DT_F16)
            for (int k = 0; k < K; k++) ((uint16_t *)r)[k] = fp32_to_fp16(f[k]);
        else if (t == DT_BF16)
            for (int k = 0; k < K; k++) ((uint16_t *)r)[k] = fp32_to_bf16(f[k]);
        else quantize_row_q8_0_ref((BlockQ8_0 *)r, f.data(), K);
    }
    return w;
}

/* Weights as the GPU holds them (Q8_0 in two planes), on the device. */
static DevMat upload_mat(DType t, int N, int K, const std::vector<uint8_t> &w) {
    if (t != DT_Q8_0) return (DevMat){t, N, K, to_dev(w.data(), w.size()), NULL, NULL};
    std::vector<int8_t> qs((size_t)N * K);
    std::vector<uint16_t> d((size_t)N * (K / 32));
    gpu_pack_q8_0(qs.data(), d.data(), w.data(), N, K);
    return (DevMat){t, N, K, to_dev(qs.data(), qs.size()), to_dev(d.data(), d.size()), NULL};
}
static void free_mat(DevMat *W) {
    cudaFree((void *)W->w);
    cudaFree((void *)W->d);
}

static float median_ms(std::vector<float> t) {
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

/* The median of `reps` timings of launch() on the default stream, in ms. */
template <typename F> static float launch_ms(int reps, F launch) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<float> ms;
    for (int r = 0; r < reps; r++) {
        CK(cudaEventRecord(a));
        launch();
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float t;
        CK(cudaEventElapsedTime(&t, a, b));
        ms.push_back(t);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return median_ms(ms);
}

/* RoPE's table as the RunState holds it: (P, n_rot / 2, 2) cos and sin of
 * p * 10000^(-2i / n_rot). */
static std::vector<float> rope_table(int P, int n_rot) {
    std::vector<float> cs((size_t)P * n_rot);
    for (int p = 0; p < P; p++)
        for (int i = 0; i < n_rot / 2; i++) {
            double a = p * pow(10000.0, -2.0 * i / n_rot);
            cs[((size_t)p * (n_rot / 2) + i) * 2] = (float)cos(a);
            cs[((size_t)p * (n_rot / 2) + i) * 2 + 1] = (float)sin(a);
        }
    return cs;
}

/* ------------------------------------------------------------ products */

static void check_matvec(DType t, int N, int K, int T, int pre, int accumulate, int time_it) {
    Mat Wh;
    std::vector<uint8_t> w = random_weights(t, N, K);
    Wh = (Mat){t, N, K, w.data(), nullptr};
    int ldx = pre == PRE_SWIGLU ? 2 * K : K;
    std::vector<float> x((size_t)T * ldx), norm(K), out0((size_t)T * N), act((size_t)T * K), ref((size_t)T * N);
    for (auto &v : x) v = uniform() * 3.0f;
    for (auto &v : norm) v = 0.5f + uniform() * 0.5f;
    for (auto &v : out0) v = uniform();
    /* the reference: pre() on the CPU, then matmul_ref */
    for (int r = 0; r < T; r++) {
        float *a = act.data() + (size_t)r * K;
        const float *xr = x.data() + (size_t)r * ldx;
        if (pre == PRE_NORM) rmsnorm(a, xr, norm.data(), K, 1e-5f);
        else if (pre == PRE_SWIGLU) {
            memcpy(a, xr, K * 4);
            swiglu(a, xr + K, K);
        } else memcpy(a, xr, K * 4);
    }
    matmul_ref(ref.data(), act.data(), &Wh, T);
    if (accumulate)
        for (size_t i = 0; i < ref.size(); i++) ref[i] = out0[i] + ref[i];

    DevMat W = upload_mat(t, N, K, w);
    float *dx = to_dev(x.data(), x.size()), *dn = to_dev(norm.data(), norm.size());
    float *dout = to_dev(out0.data(), out0.size());
    MvArgs a = {dout, N, accumulate, dx, ldx, NULL, pre, dn, 1e-5f, pre == PRE_SWIGLU ? dx + K : NULL, T, 0, {}, 0, 0, NULL, NULL, 0};
    if (!accumulate) poison(dout, out0.size());
    gpu_matvec(&W, &a, 0);
    CK(cudaGetLastError());
    std::vector<float> got = to_host(dout, out0.size());
    /* the prologue done apart (gpu_prepare): the very same bits */
    char *ready;
    CK(cudaMalloc((void **)&ready, gpu_ready_bytes(&W, T)));
    CK(cudaMemcpy(dout, out0.data(), out0.size() * 4, cudaMemcpyHostToDevice));
    if (!accumulate) poison(dout, out0.size());
    gpu_prepare(ready, &W, &a, 0);
    MvArgs ra = {dout, N, accumulate, (const float *)ready, 0, NULL, PRE_READY, NULL, 0.0f, NULL, T, 0, {}, 0, 0, NULL, NULL, 0};
    gpu_matvec(&W, &ra, 0);
    CK(cudaGetLastError());
    std::vector<float> got2 = to_host(dout, out0.size());
    if (pre == PRE_SWIGLU) {   /* and SwiGLU apart, spread over many blocks: the same bits again */
        CK(cudaMemcpy(dout, out0.data(), out0.size() * 4, cudaMemcpyHostToDevice));
        if (!accumulate) poison(dout, out0.size());
        gpu_swiglu_apart(ready, &W, &a, 0);
        gpu_matvec(&W, &ra, 0);
        CK(cudaGetLastError());
        std::vector<float> got3 = to_host(dout, out0.size());
        if (memcmp(got.data(), got3.data(), got.size() * 4)) {
            failures++;
            printf("matvec %s N %d K %d T %d: FAIL: SwiGLU apart gives other bits\n", dtype_name(t), N, K, T);
        }
    }
    {   /* weights read only after the wait (MvArgs.late, decoded BF16E): the same bits */
        CK(cudaMemcpy(dout, out0.data(), out0.size() * 4, cudaMemcpyHostToDevice));
        if (!accumulate) poison(dout, out0.size());
        MvArgs la = a;
        la.late = 1;
        gpu_matvec(&W, &la, 0);
        CK(cudaGetLastError());
        std::vector<float> got4 = to_host(dout, out0.size());
        if (memcmp(got.data(), got4.data(), got.size() * 4)) {
            failures++;
            printf("matvec %s N %d K %d T %d: FAIL: weights read late give other bits\n", dtype_name(t), N, K, T);
        }
    }
    cudaFree(ready);
    double gbs = 0.0;
    if (time_it) {
        cudaEvent_t e0, e1;
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        std::vector<float> ms;
        a.accumulate = 0;
        char *rb;   /* timed as the engine runs it: from 4 rows on, the prologue apart */
        CK(cudaMalloc((void **)&rb, gpu_ready_bytes(&W, T)));
        MvArgs r2 = {dout, N, 0, (const float *)rb, 0, NULL, PRE_READY, NULL, 0.0f, NULL, T, 0, {}, 0, 0, NULL, NULL, 0};
        for (int i = 0; i < 23; i++) {
            CK(cudaEventRecord(e0));
            if (T >= 4) {
                gpu_prepare(rb, &W, &a, 0);
                gpu_matvec(&W, &r2, 0);
            } else {
                gpu_matvec(&W, &a, 0);
            }
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float m;
            CK(cudaEventElapsedTime(&m, e0, e1));
            if (i >= 3) ms.push_back(m);
        }
        gbs = (double)w.size() / (median_ms(ms) * 1e-3) / 1e9;   /* the file's bytes: the same count in two planes */
        cudaFree(rb);
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
    }
    const char *pname[] = {"", " +rmsnorm", " +swiglu"};
    char what[128];
    snprintf(what, sizeof what, "matvec %-4s N %5d K %5d T %2d%s%s", dtype_name(t), N, K, T, pname[pre],
             accumulate ? " +=" : "");
    /* float sums of K terms in two orders: about sqrt(K) ulps apart */
    double limit = t == DT_Q8_0 && pre != PRE_NONE ? 2e-3 : std::max(2e-6, 1e-6 * sqrt(K / 128.0));
    report(what, rel_err(got.data(), ref.data(), ref.size()), limit, gbs);
    int same = memcmp(got.data(), got2.data(), got.size() * 4) == 0;
    failures += !same;
    if (!same) printf("%-58s FAIL: the prologue apart gives other bits\n", what);
    free_mat(&W);
    cudaFree(dx);
    cudaFree(dn);
    cudaFree(dout);
}

/* A token alone against the same token in a batch of 9 (two tiles): the
 * very same bits, whichever kernel the one-token product takes (mv_kernel,
 * or mv_deep_kernel under LLM_CUDA_DEEP); this is what lets a sequence's
 * text not depend on what else is in the step. */
static void check_alone_bits(DType t, int N, int K, int pre) {
    const int T = 9;
    std::vector<uint8_t> w = random_weights(t, N, K);
    int ldx = pre == PRE_SWIGLU ? 2 * K : K;
    std::vector<float> x((size_t)T * ldx), norm(K);
    for (auto &v : x) v = uniform() * 3.0f;
    for (auto &v : norm) v = 0.5f + uniform() * 0.5f;
    DevMat W = upload_mat(t, N, K, w);
    float *dx = to_dev(x.data(), x.size()), *dn = to_dev(norm.data(), norm.size()), *dout;
    CK(cudaMalloc((void **)&dout, (size_t)T * N * 4));
    MvArgs a = {dout, N, 0, dx, ldx, NULL, pre, dn, 1e-5f, pre == PRE_SWIGLU ? dx + K : NULL, T, 0, {}, 0, 0, NULL, NULL, 0};
    gpu_matvec(&W, &a, 0);
    std::vector<float> batch = to_host(dout, (size_t)T * N);
    int same = 1;
    for (int j : {0, 5, 8}) {
        MvArgs one = a;
        one.x = dx + (size_t)j * ldx;
        one.x2 = pre == PRE_SWIGLU ? one.x + K : NULL;
        one.T = 1;
        poison(dout, N);
        gpu_matvec(&W, &one, 0);
        CK(cudaGetLastError());
        std::vector<float> alone = to_host(dout, N);
        same &= memcmp(alone.data(), batch.data() + (size_t)j * N, (size_t)N * 4) == 0;
    }
    char what[128];
    snprintf(what, sizeof what, "matvec %-4s N %5d K %5d: tokens alone and in a batch of %d", dtype_name(t), N, K, T);
    printf("%-58s %s\n", what, same ? "the same bits" : "FAIL: bits differ");
    failures += !same;
    free_mat(&W);
    cudaFree(dx);
    cudaFree(dn);
    cudaFree(dout);
}

/* SwiGLU in the gate|up product's epilogue (MvArgs.swiglu_out: one token,
 * float weights) against the product's rows then gpu_swiglu_apart: the very
 * same bits (the rows are summed as before, only grouped gate p, p + 1
 * with up p, p + 1), and within the float limit of the CPU's rmsnorm,
 * matmul_ref and swiglu. Timed (the GB/s of gate|up's bytes) where time_it
 * is set; under LLM_CUDA_DEEP=0 it checks mv_kernel's epilogue. */
static void check_swiglu_epilogue(DType t, int F, int K, int time_it = 0) {
    int N = 2 * F;
    std::vector<uint8_t> w = random_weights(t, N, K);
    Mat Wh = {t, N, K, w.data(), nullptr};
    std::vector<float> x(K), norm(K), act(K), gu(N), ref(F);
    for (auto &v : x) v = uniform() * 3.0f;
    for (auto &v : norm) v = 0.5f + uniform() * 0.5f;
    rmsnorm(act.data(), x.data(), norm.data(), K, 1e-5f);
    matmul_ref(gu.data(), act.data(), &Wh, 1);
    memcpy(ref.data(), gu.data(), F * 4);
    swiglu(ref.data(), gu.data() + F, F);
    DevMat W = upload_mat(t, N, K, w);
    DevMat down = {t, 1, F, W.w, NULL, NULL};   /* gpu_swiglu_apart reads only its type and K */
    float *dx = to_dev(x.data(), x.size()), *dn = to_dev(norm.data(), norm.size()), *dgu, *dh;
    char *ready;
    CK(cudaMalloc((void **)&dgu, (size_t)N * 4));
    CK(cudaMalloc((void **)&dh, (size_t)F * 4));
    CK(cudaMalloc((void **)&ready, gpu_ready_bytes(&down, 1)));
    MvArgs a = {dgu, N, 0, dx, K, NULL, PRE_NORM, dn, 1e-5f, NULL, 1, 0, {}, 0, 0, NULL, NULL, 0};
    MvArgs e = a;
    e.out = dh;
    e.ldo = F;
    e.swiglu_out = 1;
    MvArgs sa = {NULL, 0, 0, dgu, N, NULL, PRE_SWIGLU, NULL, 0.0f, dgu + F, 1, 0, {}, 0, 0, NULL, NULL, 0};
    poison((float *)ready, F);
    poison(dh, F);
    gpu_matvec(&W, &a, 0);
    gpu_swiglu_apart(ready, &down, &sa, 0);
    gpu_matvec(&W, &e, 0);
    CK(cudaGetLastError());
    std::vector<float> apart = to_host((const float *)ready, F), got = to_host((const float *)dh, F);
    double gbs = 0.0;
    if (time_it) {
        launch_ms(3, [&] { gpu_matvec(&W, &e, 0); });   /* warm-up */
        gbs = (double)w.size() / (launch_ms(20, [&] { gpu_matvec(&W, &e, 0); }) * 1e-3) / 1e9;
    }
    char what[128];
    snprintf(what, sizeof what, "gate|up + swiglu epilogue %-4s F %5d K %5d", dtype_name(t), F, K);
    report(what, rel_err(got.data(), ref.data(), ref.size()), 2.0 * std::max(2e-6, 1e-6 * sqrt(K / 128.0)), gbs);
    int same = memcmp(got.data(), apart.data(), got.size() * 4) == 0;
    failures += !same;
    printf("%-58s %s\n", what, same ? "the same bits as the product + swiglu apart" : "FAIL: bits differ from swiglu apart");
    free_mat(&W);
    cudaFree(dx);
    cudaFree(dn);
    cudaFree(dgu);
    cudaFree(dh);
    cudaFree(ready);
}

/* RoPE and the K/V store in the q|k|v product's epilogue against the
 * product then gpu_rope_store: the very same bits in q|k|v and in the cache
 * (T >= 4 through gpu_prepare, as the model runs it). */
static void check_rope_fused(DType t, int H, int Hkv, int S, int n_rot, int T) {
    int qd = H * S, kvd = Hkv * S, N = qd + 2 * kvd, K = 256, P = 64, slots = 4 * P;
    std::vector<uint8_t> w = random_weights(t, N, K);
    std::vector<float> x((size_t)T * K), norm(K), cs((size_t)P * n_rot), kc((size_t)slots * kvd);
    for (auto &v : x) v = uniform() * 3.0f;
    for (auto &v : norm) v = 0.5f + uniform() * 0.5f;
    for (auto &v : kc) v = uniform();
    cs = rope_table(P, n_rot);
    std::vector<int> pos(T), slot(T);
    for (int j = 0; j < T; j++) {
        pos[j] = (int)(next_u64() % P);
        slot[j] = j * 3 + 1;   /* distinct */
    }
    DevMat W = upload_mat(t, N, K, w);
    float *dx = to_dev(x.data(), x.size()), *dn = to_dev(norm.data(), norm.size()), *dcs = to_dev(cs.data(), cs.size());
    int *dpos = to_dev(pos.data(), T), *dslot = to_dev(slot.data(), T);
    std::vector<float> got[2][3];
    for (int fused = 0; fused < 2; fused++) {
        float *dq, *dkc = to_dev(kc.data(), kc.size()), *dvc = to_dev(kc.data(), kc.size());
        CK(cudaMalloc((void **)&dq, (size_t)T * N * 4));
        MvArgs a = {dq, N, 0, dx, K, NULL, PRE_NORM, dn, 1e-5f, NULL, T, 0, {}, 0, 0, NULL, NULL, 0};
        a.use_rope = fused;
        a.rope = (RopeKv){dkc, dvc, dpos, dslot, dcs, H, Hkv, S, n_rot};
        char *ready = NULL;
        if (T >= 4) {   /* the prologue apart, as gpu_model.cu's product() from 4 rows */
            CK(cudaMalloc((void **)&ready, gpu_ready_bytes(&W, T)));
            gpu_prepare(ready, &W, &a, 0);
            a.x = (const float *)ready;
            a.pre = PRE_READY;
            a.norm = NULL;
        }
        gpu_matvec(&W, &a, 0);
        AttnArgs at = {dq, N, dkc, dvc, dpos, dslot, NULL, NULL, 0, 1, dcs, H, Hkv, S, n_rot, T, NULL, NULL};
        if (!fused) gpu_rope_store(&at, 0);
        CK(cudaGetLastError());
        got[fused][0] = to_host(dq, (size_t)T * N);
        got[fused][1] = to_host(dkc, kc.size());
        got[fused][2] = to_host(dvc, kc.size());
        cudaFree(dq);
        cudaFree(dkc);
        cudaFree(dvc);
        cudaFree(ready);
    }
    int same = 1;
    for (int i = 0; i < 3; i++) same &= memcmp(got[0][i].data(), got[1][i].data(), got[0][i].size() * 4) == 0;
    failures += !same;
    char what[128];
    snprintf(what, sizeof what, "rope+store fused %-4s H %d Hkv %d S %d rot %d T %d", dtype_name(t), H, Hkv, S, n_rot, T);
    printf("%-58s %s\n", what, same ? "the same bits as product + rope_store" : "FAIL: bits differ from product + rope_store");
    free_mat(&W);
    cudaFree(dx);
    cudaFree(dn);
    cudaFree(dcs);
    cudaFree(dpos);
    cudaFree(dslot);
}

static void check_dequant_embed(DType t, int N, int K) {
    std::vector<uint8_t> w = random_weights(t, N, K);
    size_t row = dtype_row_bytes(t, K);
    std::vector<float> ref((size_t)N * K);
    for (int n = 0; n < N; n++) dequantize_row(ref.data() + (size_t)n * K, w.data() + row * n, t, K);
    DevMat W = upload_mat(t, N, K, w);
    float *dout;
    CK(cudaMalloc((void **)&dout, ref.size() * 4));
    poison(dout, ref.size());
    gpu_dequantize(dout, &W, 0);
    CK(cudaGetLastError());
    std::vector<float> got = to_host(dout, ref.size());
    char what[128];
    snprintf(what, sizeof what, "dequantize %-4s N %5d K %5d", dtype_name(t), N, K);
    report(what, rel_err(got.data(), ref.data(), ref.size()), 0.0, 0);
    /* embedding: rows in a shuffled order */
    int T = 7;
    std::vector<int> tok(T);
    std::vector<float> eref((size_t)T * K);
    for (int i = 0; i < T; i++) {
        tok[i] = (int)(next_u64() % N);
        memcpy(eref.data() + (size_t)i * K, ref.data() + (size_t)tok[i] * K, K * 4);
    }
    int *dt = to_dev(tok.data(), T);
    poison(dout, eref.size());
    gpu_embed(dout, &W, dt, T, NULL, 0, 0);
    CK(cudaGetLastError());
    got = to_host(dout, eref.size());
    snprintf(what, sizeof what, "embed %-4s V %5d D %5d T %d", dtype_name(t), N, K, T);
    report(what, rel_err(got.data(), eref.data(), eref.size()), 0.0, 0);
    free_mat(&W);
    cudaFree(dout);
    cudaFree(dt);
}

/* ------------------------------------------------------------ attention */

/* A pool of NB blocks of BS rows; R sequences with random block tables; T
 * rows at random positions (a prefill run of the last sequence included). */
static void check_attention(int H, int Hkv, int S, int BS, int maxlen, int nsplit) {
    int NB = 0, R = 3, qd = H * S, kvd = Hkv * S, n_rot = S, P = maxlen;
    int tstride = (P + BS - 1) / BS;
    NB = R * tstride + 5;
    std::vector<int> perm(NB);
    for (int i = 0; i < NB; i++) perm[i] = i;
    for (int i = NB - 1; i > 0; i--) std::swap(perm[i], perm[next_u64() % (i + 1)]);
    std::vector<int> tables((size_t)R * tstride);
    for (int i = 0; i < R * tstride; i++) tables[i] = perm[i];
    /* rows: sequence s at position p */
    std::vector<int> seq, pos;
    for (int s = 0; s < R - 1; s++) {
        seq.push_back(s);
        pos.push_back((int)(next_u64() % maxlen));
    }
    int start = (int)(next_u64() % (maxlen / 2));
    for (int p = start; p < start + 5 && p < maxlen; p++) {   /* a chunk of the last sequence */
        seq.push_back(R - 1);
        pos.push_back(p);
    }
    int T = (int)seq.size();
    std::vector<int> slot(T);
    for (int t = 0; t < T; t++) slot[t] = tables[(size_t)seq[t] * tstride + pos[t] / BS] * BS + pos[t] % BS;
    size_t rows = (size_t)NB * BS;
    std::vector<float> kc(rows * kvd), vc(rows * kvd), qkv((size_t)T * (qd + 2 * kvd)), cs((size_t)P * S);
    for (auto &v : kc) v = uniform() * 2.0f;
    for (auto &v : vc) v = uniform();
    for (auto &v : qkv) v = uniform() * 2.0f;
    cs = rope_table(P, n_rot);
    /* the reference, as model_forward_batch: rope, store every row, then attend */
    std::vector<float> rq = qkv, rkc = kc, rvc = vc, ref((size_t)T * qd);
    int ld = qd + 2 * kvd;
    for (int t = 0; t < T; t++) {
        float *q = rq.data() + (size_t)t * ld;
        const float *c = cs.data() + (size_t)pos[t] * (n_rot / 2) * 2;
        rope(q, H, S, n_rot, c);
        rope(q + qd, Hkv, S, n_rot, c);
        memcpy(rkc.data() + (size_t)slot[t] * kvd, q + qd, kvd * 4);
        memcpy(rvc.data() + (size_t)slot[t] * kvd, q + qd + kvd, kvd * 4);
    }
    OpsIsa was = ops_isa();
    ops_set_isa(OPS_PLAIN);   /* attend_rows, the reference loop */
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            size_t off = (size_t)(h / (H / Hkv)) * S;
            model_attend_paged(ref.data() + (size_t)t * qd + (size_t)h * S, rq.data() + (size_t)t * ld + (size_t)h * S,
                               rkc.data() + off, rvc.data() + off, tables.data() + (size_t)seq[t] * tstride, BS,
                               pos[t] + 1, S, kvd, 1.0f / sqrtf((float)S));
        }
    ops_set_isa(was);

    float *dqkv = to_dev(qkv.data(), qkv.size()), *dkc = to_dev(kc.data(), kc.size()), *dvc = to_dev(vc.data(), vc.size());
    float *dcs = to_dev(cs.data(), cs.size()), *dout, *dpart;
    int *dpos = to_dev(pos.data(), T), *dslot = to_dev(slot.data(), T), *dseq = to_dev(seq.data(), T);
    int *dtab = to_dev(tables.data(), tables.size());
    CK(cudaMalloc((void **)&dout, (size_t)T * qd * 4));
    CK(cudaMalloc((void **)&dpart, gpu_attention_part_floats(T, H, S, nsplit) * 4 + 4));
    poison(dout, (size_t)T * qd);
    AttnArgs a = {dqkv, ld, dkc, dvc, dpos, dslot, dseq, dtab, tstride, BS, dcs, H, Hkv, S, n_rot, T, NULL, NULL};
    gpu_rope_store(&a, 0);
    CK(cudaGetLastError());
    std::vector<float> gq = to_host(dqkv, qkv.size()), gk = to_host(dkc, kc.size()), gv = to_host(dvc, vc.size());
    char what[128];
    snprintf(what, sizeof what, "rope+store H %d Hkv %d S %d BS %d T %d", H, Hkv, S, BS, T);
    double e = std::max(rel_err(gq.data(), rq.data(), gq.size()),
                        std::max(rel_err(gk.data(), rkc.data(), gk.size()), rel_err(gv.data(), rvc.data(), gv.size())));
    report(what, e, 0.0, 0);
    L2Ahead ah = {{dkc, dvc}, {kc.size() * 4, vc.size() * 4}};   /* any weights: asking for them changes nothing */
    gpu_attention(dout, &a, nsplit, dpart, &ah, 0);
    CK(cudaGetLastError());
    std::vector<float> got = to_host(dout, (size_t)T * qd);
    snprintf(what, sizeof what, "attention H %d Hkv %d S %d BS %d len<=%d split %d", H, Hkv, S, BS, maxlen, nsplit);
    report(what, rel_err(got.data(), ref.data(), ref.size()), 2e-6, 0);
    cudaFree(dqkv); cudaFree(dkc); cudaFree(dvc); cudaFree(dcs); cudaFree(dout); cudaFree(dpart);
    cudaFree(dpos); cudaFree(dslot); cudaFree(dseq); cudaFree(dtab);
}

/* LLM_CUDA_FLAGS: q|k|v (its norm, RoPE and the K/V store), attention and
 * wo handing over through counters (MvArgs.signal and wait_on, AttnArgs
 * wait_on and signal) instead of waiting for the whole kernel before, as
 * gpu_model.cu runs a decode step of one row: q|k|v, the caches, attention's
 * output and x after wo the very same bits as the usual launches. Launched
 * with programmatic dependent launch (as the model does, LLM_CUDA_PDL), so
 * attention and wo start while the kernel before still runs. */
static void check_flags(DType t, int H, int Hkv, int S, int D, int pos) {
    const int BS = 16, NB = pos / BS + 2;
    int qd = H * S, kvd = Hkv * S, N = qd + 2 * kvd, P = pos + 1;
    std::vector<uint8_t> wqkv = random_weights(t, N, D), wo = random_weights(t, D, qd);
    std::vector<float> x(D), norm(D), kc((size_t)NB * BS * kvd), cs((size_t)P * S);
    for (auto &v : x) v = uniform() * 3.0f;
    for (auto &v : norm) v = 0.5f + uniform() * 0.5f;
    for (auto &v : kc) v = uniform();
    cs = rope_table(P, S);
    std::vector<int> table(NB);
    for (int b = 0; b < NB; b++) table[b] = NB - 1 - b;   /* blocks in reverse: the table matters */
    int slot = table[pos / BS] * BS + pos % BS, seq = 0;
    DevMat Wqkv = upload_mat(t, N, D, wqkv), Wo = upload_mat(t, D, qd, wo);
    float *dn = to_dev(norm.data(), norm.size()), *dcs = to_dev(cs.data(), cs.size());
    int *dpos = to_dev(&pos, 1), *dslot = to_dev(&slot, 1), *dseq = to_dev(&seq, 1), *dtab = to_dev(table.data(), NB);
    std::vector<float> got[2][5];
    for (int fl = 0; fl < 2; fl++) {
        float *dx = to_dev(x.data(), x.size()), *dkc = to_dev(kc.data(), kc.size()), *dvc = to_dev(kc.data(), kc.size());
        float *dq, *datt;
        int *cnt;
        CK(cudaMalloc((void **)&dq, (size_t)N * 4));
        CK(cudaMalloc((void **)&datt, (size_t)qd * 4));
        CK(cudaMalloc((void **)&cnt, (size_t)(Hkv + 1) * 4));
        CK(cudaMemset(cnt, 0, (size_t)(Hkv + 1) * 4));
        poison(dq, N);
        poison(datt, qd);
        MvArgs a = {dq, N, 0, dx, D, NULL, PRE_NORM, dn, 1e-5f, NULL, 1, 1, {}, 0, 0, NULL, NULL, 0};
        a.rope = (RopeKv){dkc, dvc, dpos, dslot, dcs, H, Hkv, S, S};
        AttnArgs at = {dq, N, dkc, dvc, dpos, dslot, dseq, dtab, NB, BS, dcs, H, Hkv, S, S, 1, NULL, NULL};
        MvArgs o = {dx, D, 1, datt, qd, NULL, PRE_NONE, NULL, 0.0f, NULL, 1, 0, {}, 0, 0, NULL, NULL, 0};
        if (fl) {
            a.signal = cnt;
            at.wait_on = cnt;
            at.signal = cnt + Hkv;
            o.wait_on = cnt + Hkv;
            o.wait_for = H;
        }
        gpu_matvec(&Wqkv, &a, 0);
        gpu_attention(datt, &at, 1, NULL, NULL, 0);
        gpu_matvec(&Wo, &o, 0);
        CK(cudaDeviceSynchronize());
        CK(cudaGetLastError());
        got[fl][0] = to_host(dq, N);
        got[fl][1] = to_host(dkc, kc.size());
        got[fl][2] = to_host(dvc, kc.size());
        got[fl][3] = to_host(datt, qd);
        got[fl][4] = to_host(dx, D);
        std::vector<int> c = to_host(cnt, Hkv + 1);
        int counts = 1;
        for (int g = 0; g < Hkv; g++) counts &= c[g] == (fl ? (H / Hkv + 2) * S : 0);
        counts &= c[Hkv] == (fl ? H : 0);
        if (!counts) {
            failures++;
            printf("flags: FAIL: the counters read %d (group 0) and %d (heads)\n", c[0], c[Hkv]);
        }
        cudaFree(dx); cudaFree(dkc); cudaFree(dvc); cudaFree(dq); cudaFree(datt); cudaFree(cnt);
    }
    int same = 1;
    for (int i = 0; i < 5; i++) same &= memcmp(got[0][i].data(), got[1][i].data(), got[0][i].size() * 4) == 0;
    for (float v : got[0][4]) same &= isfinite(v);   /* every value written */
    failures += !same;
    char what[128];
    snprintf(what, sizeof what, "flags %-4s H %d Hkv %d S %d D %d pos %d", dtype_name(t), H, Hkv, S, D, pos);
    printf("%-58s %s\n", what, same ? "q|k|v, caches, attention, x: the same bits as kernel waits"
                                    : "FAIL: bits differ from kernel waits");
    free_mat(&Wqkv);
    free_mat(&Wo);
    cudaFree(dn); cudaFree(dcs); cudaFree(dpos); cudaFree(dslot); cudaFree(dseq); cudaFree(dtab);
}

/* ------------------------------------------------------------ coded weights */

/* BF16 bits of a matrix whose exponents spread like a trained layer's, with
 * some that no table of 7 holds: tiny values, zeros, and 1 in 64 any 16 bits
 * at all (infinities and NaNs among them), so that rows have escapes. */
static std::vector<uint16_t> coded_test_bf16(int N, int K) {
    std::vector<uint16_t> v((size_t)N * K);
    for (auto &x : v) {
        uint64_t r = next_u64();
        float f = uniform() * 0.05f;
        if (r % 64 == 0) x = (uint16_t)(r >> 16);
        else if (r % 64 == 1) x = 0;
        else x = fp32_to_bf16(r % 64 < 8 ? f * 1e-6f : f);
    }
    return v;
}

/* The CPU's fast tier of the N x K BF16 values bf (ec_count, ec_table,
 * ec_write_rows), in place: W's data is d, whose arrays are in mem. */
struct CpuTier {
    std::vector<uint8_t> mem;
    Mat W;
    Bf16eData d;
    uint64_t escapes;
};
static int cpu_tier(CpuTier &t, const std::vector<uint16_t> &bf, int N, int K, Err *e) {
    uint64_t hist[256] = {0};
    uint8_t exps[8];
    ec_count(hist, bf.data(), bf.size());
    t.escapes = ec_table(hist, exps);
    t.mem.assign(ec_bytes(N, K, t.escapes), 0);
    EcWriter wr;
    ec_writer_init(&wr, t.mem.data(), N, K, exps, t.escapes, &t.W, &t.d);
    return ec_write_rows(&wr, bf.data(), N, e);
}

/* gpu_bf16e_decode against bf16e_row_to_bf16, bit for bit: every row as
 * BF16 and as F32, and a list of rows (the embedding's use). */
static void check_bf16e(int N, int K, int time_it) {
    std::vector<uint16_t> bf = coded_test_bf16(N, K);
    CpuTier ct;
    Err e = {0};
    if (cpu_tier(ct, bf, N, K, &e)) {
        printf("kcheck: BF16E %d x %d: %s\n", N, K, e.msg);
        failures++;
        return;
    }
    const Mat &W = ct.W;
    const Bf16eData &d = ct.d;
    uint64_t escapes = ct.escapes;
    std::vector<uint16_t> ref((size_t)N * K);
    for (int n = 0; n < N; n++) bf16e_row_to_bf16(ref.data() + (size_t)n * K, &W, n);
    std::vector<uint8_t> gb((size_t)N * dtype_row_bytes(DT_BF16E, K)), ge(escapes + 1);
    gpu_pack_bf16e(gb.data(), ge.data(), &d, N, K);   /* the GPU's layout, as gpu_model.cu uploads it */
    DevBf16e P = {to_dev(gb.data(), gb.size()), to_dev(d.esc_row, (size_t)N + 1), to_dev(ge.data(), ge.size()), 0, 0, N};
    memcpy(&P.exps_lo, d.exps, 4);
    memcpy(&P.exps_hi, d.exps + 4, 4);
    float *dout;
    CK(cudaMalloc((void **)&dout, (size_t)N * K * 4));
    char what[128];
    for (int f32 = 0; f32 < 2; f32++) {
        poison(dout, (size_t)N * K);
        gpu_bf16e_decode(dout, f32 ? DT_F32 : DT_BF16, &P, K, 0, N, NULL, f32, 0);   /* F32 early: the same bits */
        CK(cudaDeviceSynchronize());
        size_t bad = 0;
        if (f32) {
            std::vector<uint32_t> got = to_host((const uint32_t *)dout, (size_t)N * K);
            for (size_t i = 0; i < got.size(); i++) bad += got[i] != (uint32_t)ref[i] << 16;
        } else {
            std::vector<uint16_t> got = to_host((const uint16_t *)dout, (size_t)N * K);
            for (size_t i = 0; i < got.size(); i++) bad += got[i] != ref[i];
        }
        double gbs = 0;
        if (time_it)   /* GB/s of decoded BF16 written */
            gbs = (double)N * K * 2 / (launch_ms(20, [&] {
                      gpu_bf16e_decode(dout, f32 ? DT_F32 : DT_BF16, &P, K, 0, N, NULL, f32, 0);
                  }) * 1e-3) / 1e9;
        snprintf(what, sizeof what, "BF16E %d x %d -> %s (%.2f%% escaped), values not the reference's", N, K,
                 f32 ? "F32" : "BF16", 100.0 * escapes / ((double)N * K));
        report(what, (double)bad, 0, gbs);
    }
    /* rows by a list (repeats allowed), as the embedding asks for tokens */
    int n_list = 7, list[7];
    for (int i = 0; i < n_list; i++) list[i] = (int)(next_u64() % (uint64_t)N);
    list[3] = list[1];
    int *dlist = to_dev(list, (size_t)n_list);
    poison(dout, (size_t)n_list * K);
    gpu_bf16e_decode(dout, DT_F32, &P, K, 0, n_list, dlist, 0, 0);
    CK(cudaDeviceSynchronize());
    std::vector<uint32_t> got = to_host((const uint32_t *)dout, (size_t)n_list * K);
    size_t bad = 0;
    for (int i = 0; i < n_list; i++)
        for (int k = 0; k < K; k++) bad += got[(size_t)i * K + k] != (uint32_t)ref[(size_t)list[i] * K + k] << 16;
    snprintf(what, sizeof what, "BF16E %d x %d, 7 rows by a list -> F32, values not the reference's", N, K);
    report(what, (double)bad, 0, 0);
    cudaFree((void *)P.blocks); cudaFree((void *)P.esc_row); cudaFree((void *)P.esc); cudaFree(dout); cudaFree(dlist);
}

/* An open stream told as plain data, as the kernel wing takes it. */
static GpuRansHost host_stream(const RansStream *s) {
    return (GpuRansHost){s->payload, s->sizes.payload, s->index, s->slot_sym, s->freq, s->start, s->bits,
                         s->n_states, s->chunk_size, RANS_L, s->n, s->n_chunks};
}

/* gpu_rans_decode against the bytes rans_encode was given (which the CPU's
 * decoders give back: tests/test_rans.c), and a damaged chunk found by
 * both. Bytes skewed like an exponent plane. */
static void check_rans(size_t n, int bits, int N, uint32_t C, int time_it) {
    std::vector<uint8_t> src(n);
    for (auto &b : src) {
        uint64_t r = next_u64();
        b = (uint8_t)(r % 16 == 0 ? r >> 8 : 118 + __builtin_ctzll(r | 1ull << 12));   /* geometric, and 1 in 16 anything */
    }
    RansParams par = {bits, N, C};
    uint8_t *buf = NULL;
    size_t len = 0;
    Err e = {0};
    RansStream s;
    char what[128];
    snprintf(what, sizeof what, "rANS %zu bytes, %d bits, %d states, chunks of %u: bytes not the input's", n, bits, N, C);
    if (rans_encode_alloc(src.data(), n, &par, &buf, &len, NULL, &e) || rans_open(&s, buf, len, &e)) {
        printf("kcheck: %s: %s\n", what, e.msg);
        failures++;
        return;
    }
    GpuRans g;
    GpuRansHost h = host_stream(&s);
    CK((cudaError_t)gpu_rans_upload(&g, &h));
    uint8_t *dout;
    unsigned long long *dbad;
    CK(cudaMalloc((void **)&dout, n + 1));
    CK(cudaMalloc((void **)&dbad, 8));
    CK(cudaMemset(dout, 0xa5, n + 1));
    CK(cudaMemset(dbad, 0xff, 8));
    gpu_rans_decode(dout, &g, dbad, 0);
    CK(cudaDeviceSynchronize());
    std::vector<uint8_t> got = to_host(dout, n);
    unsigned long long flagged = to_host(dbad, 1)[0];
    size_t bad = flagged != ~0ull;
    for (size_t i = 0; i < n; i++) bad += got[i] != src[i];
    double gbs = 0;
    if (time_it) gbs = (double)n / (launch_ms(10, [&] { gpu_rans_decode(dout, &g, dbad, 0); }) * 1e-3) / 1e9;   /* decoded bytes */
    report(what, (double)bad, 0, gbs);
    /* a byte of the last chunk's payload flipped: the CPU's decoder refuses
     * that chunk, and the GPU's must flag the same one */
    if (s.n_chunks > 0 && s.sizes.payload > 0) {
        uint64_t k = s.n_chunks - 1;
        std::vector<uint8_t> dam(buf, buf + len);
        size_t at = (size_t)(s.payload - buf) + s.sizes.payload - 1;   /* the chunk's last byte */
        dam[at] ^= 0x5a;
        RansStream sd;
        std::vector<uint8_t> tmp(n + 1);
        Err e2 = {0};
        int cpu_refused = rans_open(&sd, dam.data(), dam.size(), &e2) == ST_OK &&
                          rans_decode(&sd, tmp.data(), n, RANS_PLAIN, 1, &e2) == ST_FORMAT;
        GpuRans gd;
        GpuRansHost hd = host_stream(&sd);
        CK((cudaError_t)gpu_rans_upload(&gd, &hd));
        CK(cudaMemset(dbad, 0xff, 8));
        gpu_rans_decode(dout, &gd, dbad, 0);
        CK(cudaDeviceSynchronize());
        flagged = to_host(dbad, 1)[0];
        snprintf(what, sizeof what, "rANS, last chunk damaged: CPU refuses it (%s), GPU flags chunk %lld of %llu",
                 cpu_refused ? "yes" : "NO", flagged == ~0ull ? -1ll : (long long)flagged, (unsigned long long)k);
        report(what, cpu_refused && flagged == k ? 0.0 : 1.0, 0, 0);
        gpu_rans_free(&gd);
        rans_close(&sd);
    }
    gpu_rans_free(&g);
    rans_close(&s);
    mem_free(buf);
    cudaFree(dout);
    cudaFree(dbad);
}

/* The fast tier built on the GPU from a matrix at rest (gpu_rest_begin and
 * gpu_rest_finish, from the blob wc_encode makes) against the CPU's build
 * from the same BF16 (ec_count, ec_table, ec_write_rows, then
 * gpu_pack_bf16e as gpu_model.cu uploads it): the table, the row index, every
 * byte of the blocks and the escapes. With few_mantissas the sign and
 * mantissa plane compresses too, so both planes come through the rANS
 * kernel. Then the exponent plane's last chunk damaged: the CPU's decoder
 * refuses it and so must the GPU's build, in one line naming the chunk. */
static void check_rest(int N, int K, int few_mantissas, int time_it) {
    std::vector<uint16_t> bf = coded_test_bf16(N, K);
    if (few_mantissas)
        for (auto &x : bf) x &= 0xfff8;   /* 3 low mantissa bits zero: 5 bits of sign and mantissa left */
    char what[160];
    snprintf(what, sizeof what, "fast tier built on the GPU from rest, %d x %d%s", N, K,
             few_mantissas ? ", both planes coded" : "");
    uint64_t ne[2] = {(uint64_t)K, (uint64_t)N};
    uint8_t *blob = NULL;
    size_t len = 0;
    Err e = {0};
    WcTensor t;
    if (wc_encode(bf.data(), bf.size() * 2, DT_BF16, 2, ne, 0, NULL, &blob, &len, NULL, NULL, &e) ||
        wc_open(&t, blob, len, "kcheck's blob", &e)) {
        printf("kcheck: %s: %s\n", what, e.msg);
        failures++;
        mem_free(blob);
        return;
    }
    /* the CPU's tier, in the GPU's layout */
    CpuTier ct;
    if (cpu_tier(ct, bf, N, K, &e)) {
        printf("kcheck: %s: %s\n", what, e.msg);
        failures++;
        wc_close(&t);
        mem_free(blob);
        return;
    }
    const Bf16eData &d = ct.d;
    const uint8_t *exps = ct.d.exps;
    uint64_t escapes = ct.escapes;
    size_t nb = (size_t)N * dtype_row_bytes(DT_BF16E, K);
    std::vector<uint8_t> gb(nb), ge(escapes + 1);
    gpu_pack_bf16e(gb.data(), ge.data(), &d, N, K);
    /* the GPU's, from the blob */
    uint8_t exps_back[8] = {0};
    std::vector<uint32_t> rows_back((size_t)N + 1);
    GpuAtRest r = {};
    r.data = &r;
    r.name = "kcheck's blob";
    r.exps = exps_back;
    r.esc_row = rows_back.data();
    for (int p = 0; p < 2; p++) {
        r.coded[p] = t.plane[p].coded;
        r.raw[p] = t.data[p];
        if (r.coded[p]) r.rans[p] = host_stream(&t.rs[p]);
    }
    DevBf16e P = {};
    P.N = N;
    CK(cudaMalloc((void **)&P.blocks, nb));
    CK(cudaMalloc((void **)&P.esc_row, ((size_t)N + 1) * 4));
    CK(cudaMalloc((void **)&P.esc, escapes + 1));
    GpuRestPart rp;
    auto build = [&]() {
        int st = gpu_rest_begin(&rp, &r, N, K, ec_table, &e);
        if (!st) {
            memcpy(exps_back, rp.exps, 8);
            st = gpu_rest_finish(&P, &rp, K, &e, r.name);
        }
        if (!st) memcpy(rows_back.data(), rp.esc_row, ((size_t)N + 1) * 4);
        gpu_rest_free(&rp);
        return st;
    };
    double t0 = clock_seconds();
    int st = build();
    double s = clock_seconds() - t0;
    if (st) {
        printf("kcheck: %s: %s\n", what, e.msg);
        failures++;
    } else {
        std::vector<uint8_t> hb = to_host(P.blocks, nb), he = to_host(P.esc, escapes);
        std::vector<uint32_t> hr = to_host(P.esc_row, (size_t)N + 1);
        size_t bad = memcmp(exps_back, exps, 7) != 0;
        bad += memcmp(&P.exps_lo, exps, 4) != 0 || memcmp(&P.exps_hi, exps + 4, 3) != 0;
        for (size_t i = 0; i < nb; i++) bad += hb[i] != gb[i];
        for (size_t i = 0; i < escapes; i++) bad += he[i] != ge[i];
        for (int i = 0; i <= N; i++) bad += (hr[i] != d.esc_row[i]) + (rows_back[i] != d.esc_row[i]);
        if (time_it) {   /* GB/s of BF16 made, from the host's call to the tier on the GPU (warm: a second run) */
            t0 = clock_seconds();
            build();
            s = clock_seconds() - t0;
        }
        char w2[224];
        snprintf(w2, sizeof w2, "%s (planes coded: %d, %d; %.2f%% escaped), bytes not the CPU's", what, r.coded[0],
                 r.coded[1], 100.0 * escapes / ((double)N * K));
        report(w2, (double)bad, 0, time_it ? (double)N * K * 2 / s / 1e9 : 0);
    }
    if (t.plane[0].coded && t.rs[0].sizes.payload > 0) {
        std::vector<uint8_t> dam(blob, blob + len);
        dam[(size_t)(t.rs[0].payload - blob) + t.rs[0].sizes.payload - 1] ^= 0x5a;   /* the last chunk's last byte */
        WcTensor td;
        Err e2 = {0}, e3 = {0};
        std::vector<uint8_t> out(bf.size() * 2), scratch;
        int cpu_refused = 0;
        if (wc_open(&td, dam.data(), dam.size(), "kcheck's damaged blob", &e2) == ST_OK) {
            scratch.resize(wc_scratch_bytes(&td));
            cpu_refused = wc_decode(&td, out.data(), out.size(), scratch.data(), RANS_PLAIN, &e2) == ST_FORMAT;
            r.rans[0] = host_stream(&td.rs[0]);
            r.raw[0] = td.data[0];
            r.coded[1] = td.plane[1].coded;
            r.raw[1] = td.data[1];
            if (r.coded[1]) r.rans[1] = host_stream(&td.rs[1]);
            st = gpu_rest_begin(&rp, &r, N, K, ec_table, &e3);
            gpu_rest_free(&rp);
            wc_close(&td);
        }
        int gpu_refused = st == ST_FORMAT && strstr(e3.msg, "chunk") != NULL;
        snprintf(what, sizeof what, "at rest, exponent plane's last chunk damaged: CPU refuses (%s), GPU refuses (%s)",
                 cpu_refused ? "yes" : "NO", gpu_refused ? "yes" : "NO");
        report(what, cpu_refused && gpu_refused ? 0.0 : 1.0, 0, 0);
        printf("  the GPU's line: %s\n", e3.msg);
    }
    cudaFree((void *)P.blocks);
    cudaFree((void *)P.esc_row);
    cudaFree((void *)P.esc);
    wc_close(&t);
    mem_free(blob);
}

int main(int argc, char **argv) {
    int quick = 0, coded_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--coded")) coded_only = 1;
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) rng = strtoull(argv[++i], NULL, 10) * 2654435761u + 1;
        else {
            printf("usage: kcheck [--quick] [--coded] [--seed N]\n");
            return strcmp(argv[i], "--help") && strcmp(argv[i], "-h") ? 2 : 0;
        }
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    gpu_tune_from_env();
    printf("device: %s, %d SMs, %.0f MiB; programmatic dependent launch %s, L2 prefetch %d bytes, early weights %s, "
           "RoPE in the q|k|v epilogue %s, one-pass norm %s, deep pipeline %d\n",
           prop.name, prop.multiProcessorCount, prop.totalGlobalMem / 1048576.0, gpu_tune.pdl ? "on" : "off",
           gpu_tune.prefetch, gpu_tune.early ? "on" : "off", gpu_tune.fuse_rope ? "on" : "off",
           gpu_tune.one_pass ? "on" : "off", gpu_tune.deep);   /* -1: auto */
    ops_set_isa(OPS_PLAIN);
    const DType types[] = {DT_F32, DT_F16, DT_BF16, DT_Q8_0};
    for (DType t : types) {
        if (coded_only) break;
        int odd = t == DT_Q8_0 ? 352 : 200;   /* not a multiple of 8 (Q8_0: of 32 only) */
        check_matvec(t, 37, odd, 1, PRE_NONE, 0, 0);
        check_matvec(t, 64, 96, 3, PRE_NORM, 0, 0);
        check_matvec(t, 130, 352, 9, PRE_SWIGLU, 1, 0);
        check_matvec(t, 96, 128, 17, PRE_NONE, 1, 0);
        check_matvec(t, 70, 320, 1, PRE_NORM, 1, 0);   /* K a multiple of 64: the deep pipeline, every type */
        check_dequant_embed(t, 300, t == DT_Q8_0 ? 256 : 200);
        if (t != DT_Q8_0) {
            check_swiglu_epilogue(t, 88, 320);    /* the deep pipeline; groups past F in the last block */
            check_swiglu_epilogue(t, 48, 200);    /* rows not 16-byte aligned (F32: they are) */
        }
        if (quick) continue;
        if (t != DT_Q8_0) check_swiglu_epilogue(t, 5632, 2048, 1);   /* TinyLlama's gate|up, timed */   /* for compute-sanitizer, which runs each kernel far slower */
        check_matvec(t, 2560, 2048, 1, PRE_NORM, 0, 1);     /* TinyLlama q|k|v */
        check_matvec(t, 2048, 5632, 1, PRE_SWIGLU, 1, 1);   /* down, + the residual */
        check_matvec(t, 11264, 2048, 1, PRE_NORM, 0, 1);    /* gate|up */
        check_matvec(t, 11264, 2048, 16, PRE_NORM, 0, 1);
        check_alone_bits(t, 2560, 2048, PRE_NORM);
        check_alone_bits(t, 2048, 5632, PRE_SWIGLU);
    }
    if (!coded_only) {
    check_rope_fused(DT_F16, 8, 2, 16, 16, 1);     /* the tiny fixture's heads */
    check_rope_fused(DT_Q8_0, 4, 1, 24, 24, 5);    /* rand's; the prologue apart */
    check_rope_fused(DT_F32, 2, 1, 6, 4, 9);       /* a group of 4 rows across k|v; partial rotary; two tiles */
    check_attention(8, 2, 16, 16, 256, 1);     /* the tiny fixture's shape */
    check_attention(4, 1, 24, 16, 128, 3);     /* rand: multi-query, head size 24 */
    if (!quick) check_attention(32, 4, 64, 16, 700, 1);    /* TinyLlama */
    check_attention(32, 4, 64, 16, 700, 5);
    check_attention(32, 4, 64, 7, 300, 13);    /* a block size that is not a power of two */
    check_attention(8, 8, 128, 32, 400, 4);
    check_flags(DT_F16, 8, 2, 16, 128, 37);       /* the tiny fixture's heads */
    check_flags(DT_Q8_0, 4, 1, 24, 96, 5);        /* multi-query, a head of 24 */
    if (!quick) check_flags(DT_F16, 32, 4, 64, 2048, 300);   /* TinyLlama */
    }
    if (coded_only) {   /* the products a decoded BF16E matrix feeds, its weights read late among the checks */
        check_matvec(DT_BF16, 70, 320, 1, PRE_NORM, 1, 0);
        check_matvec(DT_BF16, 130, 352, 9, PRE_SWIGLU, 1, 0);
        check_matvec(DT_BF16, 2560, 2048, 1, PRE_NORM, 0, 0);
    }
    check_bf16e(37, 128, 0);
    check_bf16e(100, 5632, 0);    /* three rounds of 32 blocks a row, the last partial */
    check_rans(1000003, 12, 32, 65536, 0);
    check_rans(200001, 14, 16, 4096, 0);
    check_rans(20001, 10, 1, 1000, 0);
    check_rans(777, 15, 32, 100000, 0);   /* one chunk, shorter than a group of 32 at its end */
    check_rest(37, 128, 0, 0);
    check_rest(300, 704, 1, 0);    /* both planes through the rANS kernel; rows of 11 blocks */
    check_rest(100, 5632, 0, 0);   /* a row past one round of 8 blocks, the last partial */
    if (!quick) {   /* timed */
        check_bf16e(11264, 2048, 1);      /* TinyLlama's gate|up */
        check_rans((size_t)256 << 20, 12, 32, 65536, 1);
        check_rest(32000, 2048, 0, 1);   /* TinyLlama's embedding: 65.5 M weights, 1001 chunks */
    }
    printf("kcheck: %s (%d failed)\n", failures ? "FAIL" : "all kernels match their references", failures);
    return failures ? 1 : 0;
}
