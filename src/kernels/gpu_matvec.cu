/* gpu_matvec.cu - weights times activations on the GPU, and the embedding.
 *
 * C reference: matmul_ref in src/kernels/ops.c (out[t][n] = sum_k W[n][k] x[t][k]),
 * with its input first passed through rmsnorm or swiglu (src/kernels/ops.c) where
 * the forward pass does that right before the product, and, for Q8_0
 * weights, rounded to Q8_0 blocks as quantize_row_q8_0_ref does. tools/kcheck.cu
 * runs every type and prologue against those references.
 *
 * Decoding reads every weight once per step and does two flops per weight
 * read: the product is a race to stream W from memory. The mapping:
 *
 *   grid  (ceil(N / rows per block), ceil(T / TT))    block: 256 threads = 8 warps
 *
 *        tokens t0 .. t0+TT-1 (TT <= 8)
 *        +--------------------------+
 *   smem | pre(x) of the TT tokens  |  written once per block (the prologue:
 *        +--------------------------+  RMSNorm / SwiGLU, Q8_0 rounding fused in)
 *   warp 0 -> rows n0..n0+3   lane l reads 16 bytes of each of its 4 rows
 *   warp 1 -> rows n0+4..+7     at a time: chunks l, l+32, l+64, ... (the warp
 *   ...                         reads 512 contiguous bytes of a row per load),
 *   warp 7 -> rows n0+28..+31   each multiplied into 4 x TT running sums;
 *                             then the 32 lanes' sums are added by shuffles.
 *
 * Few rows (N / 32 blocks would leave SMs idle): ks warps (2, 4 or 8) share
 * 4 rows, each taking a slice of K, the slices' sums added in order.
 *
 * A lane holds two steps of its rows in registers (Chunk pipe[2]): the
 * first two are loaded before the prologue, and before pdl_wait (the
 * kernel ahead may still be running: gpu_util.cuh), so the weights travel
 * while the block computes its input; each is reloaded two steps ahead.
 * One token (a decode step) takes mv_deep_kernel instead: the same lanes,
 * rows and order, with D steps in flight through a ring in shared memory.
 * The q|k|v product may also rotate q and k and store k and v in the KV
 * cache as it writes them (rope_rows).
 *
 * The sum of (row n, token t) is added in an order fixed by K and ks (chosen
 * from N, K and the GPU, never T): lane l's chunks in sequence, then the
 * butterfly, then the slices. So a token gets the same bits whether it runs
 * alone or in a batch of 64, whatever TT is.
 *
 * Q8_0 is held in two planes (gpu_pack_q8_0: int8 values, fp16 scales), so a
 * lane reads 16 weights in one load like the other types; four __dp4a (four
 * int8 products and a sum each, exact) give the sum of a half block, and
 * one float multiply-add by d_w * d_x adds it, as the CPU kernels do. */
#include "kernels/gpu_kernels.cuh"
#include "kernels/gpu_util.cuh"
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdlib.h>
#include <string.h>

enum { MV_WARPS = 8, MV_THREADS = MV_WARPS * 32, MV_ROWS = 4, PRO_LOADS = 8 };
/* Shared memory a block may use for its tokens' activations. */
enum { MV_SMEM = 96 * 1024 };

GpuTune gpu_tune = {1, 0, 1, 1, 1, -1, 1, 1, 4, 4, 1, 1, 0, 16, 0};

void gpu_tune_from_env(void) {
    const char *v = getenv("LLM_CUDA_PDL");
    if (v) gpu_tune.pdl = atoi(v) != 0;
    v = getenv("LLM_CUDA_EARLY");
    if (v) gpu_tune.early = atoi(v) != 0;
    v = getenv("LLM_CUDA_FUSE_ROPE");
    if (v) gpu_tune.fuse_rope = atoi(v) != 0;
    v = getenv("LLM_CUDA_ONE_PASS");
    if (v) gpu_tune.one_pass = atoi(v) != 0;
    v = getenv("LLM_CUDA_DEEP");
    if (v) gpu_tune.deep = atoi(v) < 0 ? 0 : atoi(v);
    v = getenv("LLM_CUDA_WAVES");
    if (v) gpu_tune.waves = atoi(v) < 1 ? 1 : atoi(v) > 8 ? 8 : atoi(v);
    v = getenv("LLM_CUDA_SWIGLU_APART");
    if (v) gpu_tune.swiglu_apart = atoi(v) != 0;
    v = getenv("LLM_CUDA_READY_T");
    if (v) gpu_tune.ready_t = atoi(v) < 1 ? 1 : atoi(v);
    v = getenv("LLM_CUDA_SPLIT_MIN");
    if (v) gpu_tune.split_min = atoi(v) < 1 ? 1 : atoi(v);
    v = getenv("LLM_CUDA_CODED_OVERLAP");
    if (v) gpu_tune.overlap = atoi(v) != 0;
    v = getenv("LLM_CUDA_SWIGLU_EPI");
    if (v) gpu_tune.swiglu_epi = atoi(v) != 0;
    v = getenv("LLM_CUDA_OMIT");
    if (v) gpu_tune.omit = atoi(v) & 63;
    v = getenv("LLM_CUDA_L2_AHEAD");
    if (v) gpu_tune.l2_ahead = atoi(v) < 0 ? 0 : atoi(v) > 4096 ? 4096 : atoi(v);
    v = getenv("LLM_CUDA_FLAGS");
    if (v) gpu_tune.flags = atoi(v) != 0;
    v = getenv("LLM_CUDA_PREFETCH");
    if (v) gpu_tune.prefetch = atoi(v) < 0 ? 0 : atoi(v) > (1 << 24) ? 1 << 24 : atoi(v);
}

/* ------------------------------------------------------------ prologue */

/* The sum of one float per thread over the block (blockDim.x a multiple of
 * 32, at most 1024); red holds 32 floats. Every thread gets the sum. */
__device__ static float block_sum(float v, float *red) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float s = 0.0f;
    for (int i = 0; i < nw; i++) s += red[i];
    return s;
}

/* rmsnorm's scale for a row (ops.c: 1 / sqrt(mean(x^2) + eps)). */
__device__ static float norm_scale(const float *x, int K, float eps, float *red) {
    float ss = 0.0f;
    /* PRO_LOADS loads in flight before the first is used (a loop that waited
     * for each in turn made the prologue, not the weights, the cost of a product) */
    for (int k0 = threadIdx.x; k0 < K; k0 += PRO_LOADS * blockDim.x) {
        float v[PRO_LOADS];
#pragma unroll
        for (int u = 0; u < PRO_LOADS; u++) {
            int k = k0 + u * blockDim.x;
            v[u] = k < K ? __ldg(x + k) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < PRO_LOADS; u++) ss += v[u] * v[u];   /* k ascending, as before */
    }
    ss = block_sum(ss, red);
    return 1.0f / sqrtf(ss / K + eps);
}

/* pre(x) of one value v, given its partner p (the norm weight, or the up
 * value for SwiGLU). */
__device__ static inline float pre_value(int pre, float v, float p, float scale) {
    if (pre == PRE_NORM) return v * scale * p;                  /* rmsnorm: x * scale * w */
    if (pre == PRE_SWIGLU) return v / (1.0f + ops_exp(-v)) * p;  /* swiglu: silu(h) * g */
    return v;
}

/* The values k = (c0 + u * MV_WARPS) * 32 + lane, u < PRO_LOADS, of x and
 * of its partner, every load issued before any is used (0 past K). With
 * c0 = warp this is norm_scale's k = threadIdx.x + u * MV_THREADS. */
__device__ static inline void pro_load(const float *x, const float *partner, int K, int c0, float v[PRO_LOADS],
                                       float pv[PRO_LOADS]) {
    int lane = threadIdx.x % 32;
#pragma unroll
    for (int u = 0; u < PRO_LOADS; u++) {
        int k = (c0 + u * MV_WARPS) * 32 + lane;
        v[u] = k < K ? __ldg(x + k) : 0.0f;
        pv[u] = k < K && partner ? __ldg(partner + k) : 0.0f;
    }
}

/* quantize_row_q8_0_ref for one block of 32 values, a value per lane of the
 * warp: d = max|x| / 127 as fp16, q = round(x * 127 / max) to nearest even;
 * a block with a NaN or infinity gets zeros and a NaN scale. */
__device__ static inline void q8_round(float val, int8_t *q, float *d) {
    float amax = warp_max(fabsf(val));
    int finite = __all_sync(0xffffffffu, isfinite(val));
    float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    if (isinf(id)) id = 0.0f;
    *q = finite ? (int8_t)__float2int_rn(val * id) : 0;
    if (threadIdx.x % 32 == 0) *d = finite ? __half2float(__float2half_rn(amax / 127.0f)) : __int_as_float(0x7fc00000);
}

/* pre() of the values pro_load read, into token j's row of shared memory:
 * as floats (af, rows Kp apart), or rounded to Q8_0 (aq: K int8 per token;
 * ad: K/32 scales per token). One warp rounds one block of 32 values, a
 * value per lane. */
template <bool Q8>
__device__ static inline void pro_store(const MvArgs &a, int K, int Kp, int j, int c0, const float v[PRO_LOADS],
                                        const float pv[PRO_LOADS], float scale, float *af, int8_t *aq, float *ad) {
    int lane = threadIdx.x % 32;
#pragma unroll
    for (int u = 0; u < PRO_LOADS; u++) {
        int c = c0 + u * MV_WARPS, k = c * 32 + lane;
        if (c * 32 >= K) break;   /* the same for the whole warp */
        float val = k < K ? pre_value(a.pre, v[u], pv[u], scale) : 0.0f;
        if (!Q8) {
            if (k < K) af[(size_t)j * Kp + k] = val;
            continue;
        }
        q8_round(val, aq + (size_t)j * K + k, ad + (size_t)j * (K / 32) + c);
    }
}

/* The block's tokens into shared memory, pre() applied (the prologue). A
 * row of at most PRO_LOADS * MV_THREADS values (2048: TinyLlama's width) is
 * read once: its RMSNorm scale comes from the values already in registers,
 * the same sum in the same order as norm_scale's, so the same bits. */
template <bool Q8>
__device__ static void load_tokens(const MvArgs &a, int K, int Kp, int t0, int TT, float *af, int8_t *aq,
                                   float *ad, float *red, bool one_pass) {
    int warp = threadIdx.x / 32;
    float v[PRO_LOADS], pv[PRO_LOADS];
    for (int j = 0; j < TT; j++) {
        int r = a.rows ? a.rows[t0 + j] : t0 + j;
        const float *x = a.x + (size_t)r * a.ldx;
        const float *x2 = a.x2 ? a.x2 + (size_t)r * a.ldx : nullptr;
        const float *partner = a.pre == PRE_NORM ? a.norm : x2;
        if (one_pass && a.pre == PRE_NORM && K <= PRO_LOADS * MV_THREADS) {
            pro_load(x, partner, K, warp, v, pv);
            float ss = 0.0f;
#pragma unroll
            for (int u = 0; u < PRO_LOADS; u++) ss += v[u] * v[u];   /* norm_scale's order */
            float scale = 1.0f / sqrtf(block_sum(ss, red) / K + a.eps);
            pro_store<Q8>(a, K, Kp, j, warp, v, pv, scale, af, aq, ad);
            continue;
        }
        float scale = a.pre == PRE_NORM ? norm_scale(x, K, a.eps, red) : 1.0f;
        for (int c0 = warp; c0 * 32 < K; c0 += PRO_LOADS * MV_WARPS) {
            pro_load(x, partner, K, c0, v, pv);
            pro_store<Q8>(a, K, Kp, j, c0, v, pv, scale, af, aq, ad);
        }
    }
    /* rows Kp apart: zero the padding so a vector read past K adds nothing */
    if (!Q8)
        for (int j = 0; j < TT; j++)
            for (int k = K + threadIdx.x; k < Kp; k += blockDim.x) af[(size_t)j * Kp + k] = 0.0f;
}

/* Where gpu_prepare puts the Q8_0 scales of T rows: after the values,
 * 16-byte aligned. */
__host__ __device__ static inline size_t ready_q8_scales(int T, int K) { return ((size_t)T * K + 15) / 16 * 16; }

/* PRE_READY: the block's TT rows copied from gpu_prepare's output, 16 bytes
 * a thread at a time (each region is contiguous for consecutive tokens). */
template <bool Q8>
__device__ static void copy_ready(const MvArgs &a, int K, int Kp, int t0, int TT, float *af, int8_t *aq, float *ad) {
    const char *base = (const char *)a.x;
    const char *src[2] = {Q8 ? base + (size_t)t0 * K : base + (size_t)t0 * Kp * 4,
                          base + ready_q8_scales(a.T, K) + (size_t)t0 * (K / 32) * 4};
    char *dst[2] = {Q8 ? (char *)aq : (char *)af, (char *)ad};
    size_t n[2] = {Q8 ? (size_t)TT * K : (size_t)TT * Kp * 4, Q8 ? (size_t)TT * (K / 32) * 4 : 0};
    for (int r = 0; r < 2; r++) {
        bool vec = n[r] % 16 == 0 && (uintptr_t)src[r] % 16 == 0;
        if (vec)
            for (size_t i = threadIdx.x; i < n[r] / 16; i += blockDim.x) ((uint4 *)dst[r])[i] = ((const uint4 *)src[r])[i];
        else
            for (size_t i = threadIdx.x; i < n[r] / 4; i += blockDim.x) ((int *)dst[r])[i] = ((const int *)src[r])[i];
    }
}

/* ------------------------------------------------------------ row dots */

__device__ static inline void widen8(uint4 w, DType type, float f[8]) {
    const uint16_t *h = (const uint16_t *)&w;
    for (int i = 0; i < 8; i++)
        f[i] = type == DT_F16 ? __half2float(__ushort_as_half(h[i])) : __uint_as_float((uint32_t)h[i] << 16);
}

__device__ static inline float weight_at(const void *row, DType type, int k) {
    if (type == DT_F32) return ((const float *)row)[k];
    uint16_t h = ((const uint16_t *)row)[k];
    return type == DT_F16 ? __half2float(__ushort_as_half(h)) : __uint_as_float((uint32_t)h << 16);
}

/* The weights a lane holds in registers: MV_ROWS chunks of 16 bytes (8
 * F16/BF16 values, 4 F32, 16 Q8_0 int8 with their block's scale), one per
 * row, at chunk c of each row (chunks counted in 16-byte steps). */
typedef struct {
    uint4 w[MV_ROWS];
    uint16_t d[MV_ROWS];     /* Q8_0: the scale of the chunk's block */
} Chunk;

template <DType TYPE>
__device__ static inline void load_chunk(Chunk &ch, const char *const row[MV_ROWS], const uint16_t *const drow[MV_ROWS],
                                         int c) {
#pragma unroll
    for (int r = 0; r < MV_ROWS; r++) {
        ch.w[r] = __ldg((const uint4 *)row[r] + c);
        if (TYPE == DT_Q8_0) ch.d[r] = __ldg(drow[r] + c / 2);   /* 32 values a block: two chunks */
    }
}

/* acc[r][j] += chunk c of row r . token j. The float types multiply and add
 * value by value (matmul_ref's order within the chunk); Q8_0 takes four
 * __dp4a (the exact int8 sum of the 16 products) and one float multiply-add
 * by d_w * d_x, as the CPU kernels do. Each chunk of activations is read from
 * shared memory once for all MV_ROWS rows. */
template <DType TYPE, int TTC>
__device__ static inline void fma_chunk(const Chunk &ch, int c, const float *af, int Kp, const int8_t *aq,
                                        const float *ad, int K, int TT, float acc[MV_ROWS][TTC]) {
#pragma unroll
    for (int j = 0; j < TTC; j++) {
        if (j >= TT) break;
        if (TYPE == DT_Q8_0) {
            int4 x = *(const int4 *)(aq + (size_t)j * K + 16 * c);
            float dx = ad[(size_t)j * (K / 32) + c / 2];
#pragma unroll
            for (int r = 0; r < MV_ROWS; r++) {
                int4 w = *(const int4 *)&ch.w[r];
                int s = __dp4a(w.x, x.x, 0);
                s = __dp4a(w.y, x.y, s);
                s = __dp4a(w.z, x.z, s);
                s = __dp4a(w.w, x.w, s);
                acc[r][j] = fmaf((float)s, __half2float(__ushort_as_half(ch.d[r])) * dx, acc[r][j]);
            }
        } else if (TYPE == DT_F32) {
            float4 a0 = *(const float4 *)(af + (size_t)j * Kp + 4 * c);
#pragma unroll
            for (int r = 0; r < MV_ROWS; r++) {
                float4 w = *(const float4 *)&ch.w[r];
                float s = acc[r][j];
                s = fmaf(w.x, a0.x, s); s = fmaf(w.y, a0.y, s);
                s = fmaf(w.z, a0.z, s); s = fmaf(w.w, a0.w, s);
                acc[r][j] = s;
            }
        } else {
            const float4 *ap = (const float4 *)(af + (size_t)j * Kp + 8 * c);
            float4 a0 = ap[0], a1 = ap[1];
#pragma unroll
            for (int r = 0; r < MV_ROWS; r++) {
                float w[8];
                widen8(ch.w[r], TYPE, w);
                float s = acc[r][j];
                s = fmaf(w[0], a0.x, s); s = fmaf(w[1], a0.y, s);
                s = fmaf(w[2], a0.z, s); s = fmaf(w[3], a0.w, s);
                s = fmaf(w[4], a1.x, s); s = fmaf(w[5], a1.y, s);
                s = fmaf(w[6], a1.z, s); s = fmaf(w[7], a1.w, s);
                acc[r][j] = s;
            }
        }
    }
}

/* The lane's chunks of its rows run cb, cb+32, cb+64, ... < ce: the warp
 * reads 512 contiguous bytes of each row per step. Two steps are always in
 * flight: pipe[0] and pipe[1] were loaded before the prologue (see
 * mv_kernel), and each is reloaded two steps ahead as soon as it is used. */
template <DType TYPE, int TTC>
__device__ static void dot_chunks(Chunk pipe[2], const char *const row[MV_ROWS], const uint16_t *const drow[MV_ROWS],
                                  int cb, int ce, const float *af, int Kp, const int8_t *aq, const float *ad, int K,
                                  int TT, float acc[MV_ROWS][TTC]) {
    for (int c = cb; c < ce; c += 64) {
        fma_chunk<TYPE, TTC>(pipe[0], c, af, Kp, aq, ad, K, TT, acc);
        if (c + 64 < ce) load_chunk<TYPE>(pipe[0], row, drow, c + 64);
        if (c + 32 >= ce) break;
        fma_chunk<TYPE, TTC>(pipe[1], c + 32, af, Kp, aq, ad, K, TT, acc);
        if (c + 96 < ce) load_chunk<TYPE>(pipe[1], row, drow, c + 96);
    }
}

/* Widths whose rows are not 16-byte aligned (test shapes only): one value
 * per lane per step, the float types. */
template <DType TYPE, int TTC>
__device__ static void dot_scalar(const char *const row[MV_ROWS], int kb, int ke, const float *af, int Kp, int TT,
                                  float acc[MV_ROWS][TTC]) {
    for (int k = kb + threadIdx.x % 32; k < ke; k += 32)
#pragma unroll
        for (int r = 0; r < MV_ROWS; r++) {
            float w = weight_at(row[r], TYPE, k);
#pragma unroll
            for (int j = 0; j < TTC; j++) {
                if (j >= TT) break;
                acc[r][j] = fmaf(w, af[(size_t)j * Kp + k], acc[r][j]);
            }
        }
}

void gpu_pack_q8_0(int8_t *qs, uint16_t *d, const void *rows, int N, int K) {
    const BlockQ8_0 *blk = (const BlockQ8_0 *)rows;
    for (size_t i = 0; i < (size_t)N * (K / 32); i++) {
        d[i] = blk[i].d;
        memcpy(qs + i * 32, blk[i].qs, 32);
    }
}

/* ------------------------------------------------------------ the kernel */

/* rope_store_kernel's work (gpu_attention.cu) on the MV_ROWS rows n0.. of
 * token t, as the product writes them: n0 is a multiple of 4 and heads have
 * an even size, so each rotated pair (2p, 2p+1) lies within the group. */
__device__ static void rope_rows(const RopeKv &R, int t, int n0, float v[MV_ROWS]) {
    int qd = R.H * R.S, kvd = R.Hkv * R.S;
    if (n0 < qd + kvd) {
        const float *cs = R.rope_cs + (size_t)R.pos[t] * R.n_rot;
#pragma unroll
        for (int r = 0; r < MV_ROWS; r += 2) {
            int d = (n0 + r) % R.S;   /* the dimension within its head */
            if (n0 + r >= qd + kvd || d >= R.n_rot) continue;   /* v, or past the rotary part */
            float c = cs[d], s = cs[d + 1], x0 = v[r], x1 = v[r + 1];
            v[r] = fmaf(x0, c, -(x1 * s));   /* as ops.c rope, fused the same way */
            v[r + 1] = fmaf(x0, s, x1 * c);
        }
    }
    if (n0 + MV_ROWS > qd) {
        size_t at = (size_t)R.slot[t] * kvd;
#pragma unroll
        for (int r = 0; r < MV_ROWS; r++) {
            int n = n0 + r - qd;
            if (n >= 0 && n < kvd) R.kc[at + n] = v[r];
            else if (n >= kvd && n < 2 * kvd) R.vc[at + n - kvd] = v[r];
        }
    }
}

/* The end of a product, for each of the warp's rows and the block's tokens:
 * the 32 lanes' sums added by the butterfly, the ks slices of a group added
 * in order (through shared memory), RoPE and the K/V store where asked, and
 * the result written (or added, for the residual). */
template <int TTC>
__device__ static void mv_finish(const DevMat &W, const MvArgs &a, float acc[MV_ROWS][TTC],
                                 float part[MV_WARPS][MV_ROWS][TTC], int ks, int n0, int t0, int TT, bool pair) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, sl = warp % ks;
#pragma unroll
    for (int r = 0; r < MV_ROWS; r++)
#pragma unroll
        for (int j = 0; j < TTC; j++) {
            if (j >= TT) break;
            acc[r][j] = warp_sum(acc[r][j]);
            if (ks > 1 && lane == 0) part[warp][r][j] = acc[r][j];
        }
    if (ks > 1) __syncthreads();
    if (lane != 0 || sl != 0) return;
#pragma unroll
    for (int j = 0; j < TTC; j++) {
        if (j >= TT) break;
        float v[MV_ROWS];
#pragma unroll
        for (int r = 0; r < MV_ROWS; r++) {
            v[r] = acc[r][j];
            for (int i = 1; i < ks; i++) v[r] += part[warp + i][r][j];   /* the slices in order */
        }
        if (pair) {   /* v: gate p, p + 1, up p, p + 1 (mv_lane); swiglu_apart_kernel's operations */
            int F = W.N / 2, p = n0 / 2;
            for (int i = 0; i < 2 && p + i < F; i++)
                a.out[(size_t)(t0 + j) * a.ldo + p + i] = pre_value(PRE_SWIGLU, v[i], v[2 + i], 1.0f);
            continue;
        }
        if (a.use_rope) rope_rows(a.rope, t0 + j, n0, v);
#pragma unroll
        for (int r = 0; r < MV_ROWS; r++) {
            if (n0 + r >= W.N) break;
            float *o = a.out + (size_t)(t0 + j) * a.ldo + n0 + r;
            *o = a.accumulate ? *o + v[r] : v[r];
        }
    }
}

/* The kernel ahead, finished: pdl_wait, or (MvArgs.wait_on) the counter
 * it fills. Then the next kernel may start. */
__device__ static inline void mv_wait(const MvArgs &a) {
    if (a.wait_on) {
        pdl_release();
        flag_wait(a.wait_on, a.wait_for);
    } else {
        pdl_wait();
        pdl_release();
    }
}

/* MvArgs.signal: the block's rows of q|k|v (N of them in all, MV_WARPS /
 * ks groups of MV_ROWS a block) written, each counted to its key/value
 * group (a q head's group, or the k or v head itself). */
__device__ static void signal_rows(const MvArgs &a, int ks, int N) {
    const RopeKv &R = a.rope;
    int per_block = MV_WARPS / ks * MV_ROWS, r0 = blockIdx.x * per_block, r1 = min(N, r0 + per_block);
    int qd = R.H * R.S, kvd = R.Hkv * R.S, per = R.H / R.Hkv;
    __threadfence();
    __syncthreads();
    if (threadIdx.x != 0) return;
    int cur = -1, run = 0;
    for (int n = r0; n < r1; n++) {
        int grp = n < qd ? n / R.S / per : n < qd + kvd ? (n - qd) / R.S : (n - qd - kvd) / R.S;
        if (grp != cur && run) atomicAdd(a.signal + cur, run), run = 0;
        cur = grp;
        run++;
    }
    if (run) atomicAdd(a.signal + cur, run);
}

/* Where a lane works: ks warps share a group of MV_ROWS rows (n0..), warp
 * sl taking the slice [kb, ke) of K (a whole number of 256 values); the
 * lane's chunks (16 bytes each) are cb, cb + 32, ... < ce. Rows past N read
 * row 0 (no branch in the loop); their sums are dropped. vec: rows are
 * 16-byte aligned (every real model; other widths take dot_scalar).
 * pair (MvArgs.swiglu_out, W gate|up stacked, N = 2F): group n0 / 4 holds
 * gate rows p, p + 1 and up rows F + p, F + p + 1, p = n0 / 2, so the lane
 * that finishes the group has both halves of two SwiGLU values. A row's sum
 * does not depend on which group holds it: the same bits either way. */
typedef struct {
    const char *row[MV_ROWS];
    const uint16_t *drow[MV_ROWS];
    int n0, kb, ke, cb, ce;
    bool vec;
} MvLane;

template <DType TYPE>
__device__ static inline MvLane mv_lane(const DevMat &W, int ks, bool pair) {
    MvLane L;
    int K = W.K, warp = threadIdx.x / 32, g = warp / ks, sl = warp % ks;
    L.n0 = (blockIdx.x * (MV_WARPS / ks) + g) * MV_ROWS;
    int per = (K / ks + 255) / 256 * 256;
    L.kb = min(K, sl * per);
    L.ke = min(K, L.kb + per);
    size_t rb = dev_row_bytes(TYPE, K), es = rb / K;
    int F = W.N / 2, p = L.n0 / 2;
#pragma unroll
    for (int r = 0; r < MV_ROWS; r++) {
        int want = pair ? (r < 2 ? p + r : F + p + r - 2) : L.n0 + r;
        bool in = pair ? p + r % 2 < F : L.n0 + r < W.N;
        size_t n = in ? want : 0;
        L.row[r] = (const char *)W.w + n * rb;
        L.drow[r] = TYPE == DT_Q8_0 ? W.d + n * (K / 32) : nullptr;
    }
    L.vec = rb % 16 == 0;
    L.cb = (int)(L.kb * es / 16) + threadIdx.x % 32;
    L.ce = (int)(L.ke * es / 16);
    return L;
}

/* EARLY: the lane's first two steps of weights are loaded before the
 * prologue (and before pdl_wait), which keeps 32 to 40 more registers live
 * through it; 3 blocks an SM instead of 4 for one token. */
template <DType TYPE, int TTC, bool EARLY>
__global__ void __launch_bounds__(MV_THREADS, TTC == 1 ? (EARLY ? 3 : 4) : 2)
    mv_kernel(DevMat W, MvArgs a, int TTmax, int Kp, int ks, int pf, bool one_pass) {
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ float red[32];
    __shared__ float part[MV_WARPS][MV_ROWS][TTC];
    const bool q8 = TYPE == DT_Q8_0;
    int K = W.K, t0 = blockIdx.y * TTmax, TT = min(TTmax, a.T - t0);
    float *af = (float *)smem;
    int8_t *aq = (int8_t *)smem;
    float *ad = (float *)(smem + (size_t)TTmax * K);

    const bool pair = TTC == 1 && TYPE != DT_Q8_0 && a.swiglu_out;   /* one token, float weights */
    MvLane L = mv_lane<TYPE>(W, ks, pair);
    int lane = threadIdx.x % 32, n0 = L.n0, kb = L.kb, ke = L.ke, cb = L.cb, ce = L.ce;
    const char *const *row = L.row;
    const uint16_t *const *drow = L.drow;
    size_t rb = dev_row_bytes(TYPE, K);
    /* Before the kernel ahead of this one has finished (programmatic
     * dependent launch), nothing here may be read but the weights: ask for
     * the first pf bytes of each of the warp's row slices to be brought into
     * L2 (lane r, row r; the first token tile only, the others read the same
     * rows), so memory is busy while the prologue waits for its input. */
    if (pf > 0 && !a.late && blockIdx.y == 0 && lane < MV_ROWS && n0 + lane < W.N) {
        size_t bytes = min((size_t)pf, (size_t)(ke - kb) * (rb / K));
        prefetch_l2((const char *)W.w + (size_t)(n0 + lane) * rb + kb * (rb / K), bytes);
    }
    /* and the lane's first two steps of weights into registers, so they
     * arrive while the prologue works (rows 16-byte aligned: every real
     * model; other widths take dot_scalar) */
    bool vec = L.vec;
    Chunk pipe[2];
    bool early = EARLY && !a.late;   /* late: W is written by the kernel ahead */
    if (vec && early) {
        if (cb < ce) load_chunk<TYPE>(pipe[0], row, drow, cb);
        if (cb + 32 < ce) load_chunk<TYPE>(pipe[1], row, drow, cb + 32);
    }
    if (TTC == 1) mv_wait(a);   /* counters (LLM_CUDA_FLAGS): one-row steps only */
    else pdl_wait(), pdl_release();
    if (a.pre == PRE_READY) copy_ready<q8>(a, K, Kp, t0, TT, af, aq, ad);
    else load_tokens<q8>(a, K, Kp, t0, TT, af, aq, ad, red, one_pass);
    __syncthreads();
    if (vec && !early) {
        if (cb < ce) load_chunk<TYPE>(pipe[0], row, drow, cb);
        if (cb + 32 < ce) load_chunk<TYPE>(pipe[1], row, drow, cb + 32);
    }
    float acc[MV_ROWS][TTC];
#pragma unroll
    for (int r = 0; r < MV_ROWS; r++)
#pragma unroll
        for (int j = 0; j < TTC; j++) acc[r][j] = 0.0f;
    if (vec) dot_chunks<TYPE, TTC>(pipe, row, drow, cb, ce, af, Kp, aq, ad, K, TT, acc);
    else if (!q8) dot_scalar<TYPE, TTC>(row, kb, ke, af, Kp, TT, acc);
    mv_finish<TTC>(W, a, acc, part, ks, n0, t0, TT, pair);
    if (TTC == 1 && a.signal) signal_rows(a, ks, W.N);
}

/* The one-token product with a deeper pipeline (LLM_CUDA_DEEP = D steps):
 * a lane's next D steps of weights travel by cp.async into a ring in shared
 * memory instead of into registers, so D steps (D x 64 bytes a lane, D x 16
 * KB a block) are in flight where registers held two, and all D are asked
 * for before pdl_wait. A lane reads back only what it copied itself, so no
 * barrier guards the ring. The chunks are added in mv_kernel's order: the
 * same bits for the same ks. Q8_0's 2-byte block scales travel as the
 * aligned 4 bytes that hold them (cp.async copies 4 bytes at least), so a
 * Q8_0 matrix takes this kernel when K is a multiple of 64.
 *
 *   smem  ring[D][MV_ROWS][MV_THREADS] of 16 bytes (thread-fastest, so a
 *         warp's copies and reads of one row fall in distinct banks);
 *         Q8_0: sring[D][MV_ROWS][MV_THREADS] of 4 bytes;
 *         then the token's pre(x): Kp floats, or K int8 and K / 32 scales */
template <DType TYPE, int D>
__global__ void __launch_bounds__(MV_THREADS, 3) mv_deep_kernel(DevMat W, MvArgs a, int Kp, int ks, bool one_pass) {
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ float red[32];
    __shared__ float part[MV_WARPS][MV_ROWS][1];
    const bool q8 = TYPE == DT_Q8_0;
    uint4 *ring = (uint4 *)smem;
    uint32_t *sring = (uint32_t *)(smem + (size_t)D * MV_ROWS * MV_THREADS * 16);
    unsigned char *act = (unsigned char *)(sring + (q8 ? (size_t)D * MV_ROWS * MV_THREADS : 0));
    float *af = (float *)act, *ad = (float *)(act + W.K);
    int8_t *aq = (int8_t *)act;
    const bool pair = TYPE != DT_Q8_0 && a.swiglu_out;   /* float weights */
    MvLane L = mv_lane<TYPE>(W, ks, pair);
    int steps = L.cb < L.ce ? (L.ce - L.cb + 31) / 32 : 0;
    /* step s is chunk c = cb + 32 s of each of the lane's rows, in slot s % D
     * (Q8_0: and the 4 bytes at scale (c / 2) & ~1, which hold c's scale) */
    auto at = [&](int s, int r) { return ((size_t)(s % D) * MV_ROWS + r) * MV_THREADS + threadIdx.x; };
    auto fetch = [&](int s) {
        if (s < steps)
#pragma unroll
            for (int r = 0; r < MV_ROWS; r++) {
                int c = L.cb + 32 * s;
                cp_async16(ring + at(s, r), (const uint4 *)L.row[r] + c);
                if (q8) cp_async4(sring + at(s, r), L.drow[r] + (c / 2 & ~1));
            }
        cp_async_commit();   /* a group every step, empty or not, so the count in the wait holds */
    };
    if (!a.late)   /* late: W is written by the kernel ahead, so only after the wait */
        for (int s = 0; s < D; s++) fetch(s);
    mv_wait(a);
    if (a.late)
        for (int s = 0; s < D; s++) fetch(s);
    if (a.pre == PRE_READY) copy_ready<q8>(a, W.K, Kp, 0, 1, af, aq, ad);
    else load_tokens<q8>(a, W.K, Kp, 0, 1, af, aq, ad, red, one_pass);
    __syncthreads();
    float acc[MV_ROWS][1] = {};
    for (int s = 0; s < steps; s++) {
        cp_async_wait<D - 1>();   /* D + s groups issued: step s's is in */
        Chunk ch;
        int c = L.cb + 32 * s;
#pragma unroll
        for (int r = 0; r < MV_ROWS; r++) {
            ch.w[r] = ring[at(s, r)];
            if (q8) ch.d[r] = (uint16_t)(sring[at(s, r)] >> (c / 2 & 1 ? 16 : 0));   /* little-endian halves */
        }
        fma_chunk<TYPE, 1>(ch, c, af, Kp, aq, ad, W.K, 1, acc);
        fetch(s + D);   /* into the slot just read, whose values are already used */
    }
    mv_finish<1>(W, a, acc, part, ks, L.n0, 0, 1, pair);
    if (a.signal) signal_rows(a, ks, W.N);
}

/* Shared memory of mv_deep_kernel<type, D> for a width K (Kp: K rounded up to 8). */
static size_t deep_smem(DType type, int D, int K, int Kp) {
    size_t ring = (size_t)D * MV_ROWS * MV_THREADS * (type == DT_Q8_0 ? 20 : 16);
    return ring + (type == DT_Q8_0 ? (size_t)K + (size_t)K / 32 * 4 : (size_t)Kp * 4) + 16;
}

/* Tokens per block: as many as fit MV_SMEM, at most GPU_MAX_TT. */
static int tile_tokens(const DevMat *W, int T, int *Kp, size_t *smem) {
    int K = W->K;
    *Kp = (K + 7) / 8 * 8;
    size_t per = W->type == DT_Q8_0 ? (size_t)K + (size_t)K / 32 * 4 : (size_t)*Kp * 4;
    int tt = (int)(MV_SMEM / per);
    tt = tt < 1 ? 1 : tt > GPU_MAX_TT ? GPU_MAX_TT : tt;
    if (tt > T) tt = T;
    *smem = per * tt + 16;
    return tt;
}

/* Warps per group of rows (1, 2, 4 or 8): a matrix of few rows would give
 * too few thread blocks to keep every SM streaming (TinyLlama's wo: 2048
 * rows, 64 blocks of 32 rows for 132 SMs), so its rows' K is cut into
 * slices, one warp each, the slices' sums added in order: as many as keep
 * the blocks within one wave (`fit` blocks an SM can hold at once, for one
 * token) and each slice at least 256 values. The choice depends on N, K and
 * the GPU, never on T: a batch still gives each token its bits alone. */
static int k_split(int N, int K, int fit) {
    static int sms = 0;
    if (!sms && cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) sms = 132;
    int ks = 1;
    while (ks < MV_WARPS && (N + MV_WARPS / ks / 2 * MV_ROWS - 1) / (MV_WARPS / ks / 2 * MV_ROWS) <= fit * sms * gpu_tune.waves &&
           K / (2 * ks) >= 256)
        ks *= 2;
    return ks;
}

/* Blocks of a kernel an SM holds at once (its registers, and smem bytes of
 * shared memory), asked once per (kernel, smem). */
typedef void (*MvFn)(DevMat, MvArgs, int, int, int, int, bool);
typedef void (*DeepFn)(DevMat, MvArgs, int, int, bool);
template <typename F>
static int blocks_per_sm(F fn, size_t smem) {
    static struct { const void *fn; size_t smem; int n; } cache[32];
    static int used = 0;
    for (int i = 0; i < used; i++)
        if (cache[i].fn == (const void *)fn && cache[i].smem == smem) return cache[i].n;
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, MV_THREADS, smem) != cudaSuccess || n < 1) n = 1;
    if (used < 32) cache[used++] = {(const void *)fn, smem, n};
    return n;
}

/* mv_deep_kernel with gpu_tune.deep steps (2, 3, 4 or 6: 5 is taken as 4, and
 * more than 6 as 6; on the H200 5 and 8 were slower than 4, see notes), or
 * NULL where it does not apply: rows not 16-byte aligned, Q8_0 with K not a
 * multiple of 64, or a ring and a row of activations that do not fit an
 * SM's shared memory. */
template <DType TYPE>
static DeepFn deep_kernel(const DevMat *W, int Kp, int *D) {
    static int optin = 0;
    if (!optin && cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0) != cudaSuccess)
        optin = 48 * 1024;
    /* auto: 4 for the float types, 3 for Q8_0, whose ring of scales would
     * otherwise leave 2 blocks an SM instead of 3 (the fastest of each on
     * an H200: notes/cuda.md) */
    int want = gpu_tune.deep < 0 ? (TYPE == DT_Q8_0 ? 3 : 4) : gpu_tune.deep;
    *D = want >= 6 ? 6 : want == 5 ? 4 : want;
    {
        if (*D < 2 || dev_row_bytes(TYPE, W->K) % 16 || (TYPE == DT_Q8_0 && W->K % 64) ||
            deep_smem(TYPE, *D, W->K, Kp) + 1024 > (size_t)optin)
            return NULL;
        DeepFn fn[5] = {mv_deep_kernel<TYPE, 2>, mv_deep_kernel<TYPE, 3>, mv_deep_kernel<TYPE, 4>, NULL,
                        mv_deep_kernel<TYPE, 6>};
        static bool raised[5];   /* the opt-in above 48 KB: all the SM allows a block */
        int i = *D - 2;
        if (!raised[i]) cudaFuncSetAttribute(fn[i], cudaFuncAttributeMaxDynamicSharedMemorySize, optin - 1024);
        raised[i] = true;
        return fn[i];
    }
}

/* A single token has its own instantiation: a tile of 8 would hold 8 times
 * the accumulators in registers for nothing (and, with LLM_CUDA_DEEP, a
 * kernel of its own). ks comes from the one-token kernel in use, whatever
 * T is, so a batch gives each token the bits it gets alone. */
template <DType TYPE, bool EARLY>
static void launch_mv(const DevMat *W, const MvArgs *a, cudaStream_t st) {
    static bool raised = false;   /* the opt-in above 48 KB, once per instantiation */
    if (!raised) {
        cudaFuncSetAttribute(mv_kernel<TYPE, 1, EARLY>, cudaFuncAttributeMaxDynamicSharedMemorySize, MV_SMEM + 16);
        cudaFuncSetAttribute(mv_kernel<TYPE, GPU_MAX_TT, EARLY>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             MV_SMEM + 16);
        raised = true;
    }
    int Kp, D;
    size_t smem, smem1;
    DevMat one = *W;
    one.N = 1;
    tile_tokens(&one, 1, &Kp, &smem1);
    DeepFn deep = deep_kernel<TYPE>(W, Kp, &D);
    MvFn mv1 = mv_kernel<TYPE, 1, EARLY>;
    size_t dsmem = deep ? deep_smem(TYPE, D, W->K, Kp) : 0;
    int fit = deep ? blocks_per_sm(deep, dsmem) : blocks_per_sm(mv1, smem1);
    int ks = k_split(W->N, W->K, fit);
    int tt = tile_tokens(W, a->T, &Kp, &smem), rows = MV_WARPS / ks * MV_ROWS;
    dim3 grid((W->N + rows - 1) / rows, (a->T + tt - 1) / tt);
    int pf = gpu_tune.prefetch;
    bool one_pass = gpu_tune.one_pass;
    if (tt == 1 && deep) gpu_launch(deep, grid, MV_THREADS, dsmem, st, *W, *a, Kp, ks, one_pass);
    else if (tt == 1) gpu_launch(mv1, grid, MV_THREADS, smem, st, *W, *a, tt, Kp, ks, pf, one_pass);
    else gpu_launch(mv_kernel<TYPE, GPU_MAX_TT, EARLY>, grid, MV_THREADS, smem, st, *W, *a, tt, Kp, ks, pf, one_pass);
}

template <DType TYPE>
static void launch_mv(const DevMat *W, const MvArgs *a, cudaStream_t st) {
    if (gpu_tune.early) launch_mv<TYPE, true>(W, a, st);
    else launch_mv<TYPE, false>(W, a, st);
}

int gpu_matvec(const DevMat *W, const MvArgs *a, cudaStream_t st) {
    switch (W->type) {
    case DT_F32: launch_mv<DT_F32>(W, a, st); break;
    case DT_F16: launch_mv<DT_F16>(W, a, st); break;
    case DT_BF16: launch_mv<DT_BF16>(W, a, st); break;
    case DT_Q8_0: launch_mv<DT_Q8_0>(W, a, st); break;
    default: return 0;
    }
    return 1;
}

/* grid (T), block MV_THREADS: row t's prologue, by the code and the thread
 * count of the fused one (so the same bits), into the layout copy_ready reads. */
template <bool Q8>
__global__ void __launch_bounds__(MV_THREADS) prepare_kernel(char *ready, MvArgs a, int K, int Kp, bool one_pass) {
    __shared__ float red[32];
    pdl_wait();
    pdl_release();
    int t = blockIdx.x;
    float *af = (float *)ready + (size_t)t * Kp;
    int8_t *aq = (int8_t *)ready + (size_t)t * K;
    float *ad = (float *)(ready + ready_q8_scales(a.T, K)) + (size_t)t * (K / 32);
    load_tokens<Q8>(a, K, Kp, t, 1, af, aq, ad, red, one_pass);
}

size_t gpu_ready_bytes(const DevMat *W, int T) {
    int Kp = (W->K + 7) / 8 * 8;
    return W->type == DT_Q8_0 ? ready_q8_scales(T, W->K) + (size_t)T * (W->K / 32) * 4 : (size_t)T * Kp * 4;
}

int gpu_prepare(void *ready, const DevMat *W, const MvArgs *a, cudaStream_t st) {
    int Kp = (W->K + 7) / 8 * 8;
    bool one = gpu_tune.one_pass;
    if (W->type == DT_Q8_0) gpu_launch(prepare_kernel<true>, a->T, MV_THREADS, 0, st, (char *)ready, *a, W->K, Kp, one);
    else gpu_launch(prepare_kernel<false>, a->T, MV_THREADS, 0, st, (char *)ready, *a, W->K, Kp, one);
    return 1;
}

/* grid (ceil(Kp / 256), T), block 256: SwiGLU of row t, one value a thread
 * (pre_value, the same operations), into gpu_prepare's layout; for Q8_0 a
 * warp rounds one block of 32 values. Elementwise, so unlike the RMSNorm it
 * can be spread over many blocks: the down product's prologue done once
 * for the step (LLM_CUDA_SWIGLU_APART), not once in every block of rows. */
template <bool Q8>
__global__ void __launch_bounds__(256) swiglu_apart_kernel(char *ready, MvArgs a, int K, int Kp) {
    pdl_wait();
    pdl_release();
    int t = blockIdx.y, k = blockIdx.x * blockDim.x + threadIdx.x;
    int r = a.rows ? a.rows[t] : t;
    const float *x = a.x + (size_t)r * a.ldx, *x2 = a.x2 + (size_t)r * a.ldx;
    if (!Q8) {
        if (k < Kp) ((float *)ready)[(size_t)t * Kp + k] = k < K ? pre_value(PRE_SWIGLU, x[k], x2[k], 1.0f) : 0.0f;
        return;
    }
    if (k - threadIdx.x % 32 >= K) return;   /* the whole warp: K is a multiple of 32 */
    float val = pre_value(PRE_SWIGLU, x[k], x2[k], 1.0f);
    q8_round(val, (int8_t *)ready + (size_t)t * K + k,
             (float *)(ready + ready_q8_scales(a.T, K)) + (size_t)t * (K / 32) + k / 32);
}

int gpu_swiglu_apart(void *ready, const DevMat *W, const MvArgs *a, cudaStream_t st) {
    int K = W->K, Kp = (K + 7) / 8 * 8;
    dim3 grid((Kp + 255) / 256, a->T);
    if (W->type == DT_Q8_0) gpu_launch(swiglu_apart_kernel<true>, grid, 256, 0, st, (char *)ready, *a, K, Kp);
    else gpu_launch(swiglu_apart_kernel<false>, grid, 256, 0, st, (char *)ready, *a, K, Kp);
    return 1;
}

/* ------------------------------------------------------------ for cuBLAS */

/* grid (T), block 256: row t of pre(x), as floats. */
__global__ void prologue_kernel(float *out, int K, MvArgs a) {
    __shared__ float red[32];
    int t = blockIdx.x, r = a.rows ? a.rows[t] : t;
    const float *x = a.x + (size_t)r * a.ldx;
    const float *x2 = a.x2 ? a.x2 + (size_t)r * a.ldx : nullptr;
    float scale = a.pre == PRE_NORM ? norm_scale(x, K, a.eps, red) : 1.0f;
    const float *partner = a.pre == PRE_NORM ? a.norm : x2;
    for (int k = threadIdx.x; k < K; k += blockDim.x)
        out[(size_t)t * K + k] = pre_value(a.pre, x[k], partner ? partner[k] : 0.0f, scale);
}

int gpu_prologue(float *out, const DevMat *W, const MvArgs *a, cudaStream_t st) {
    prologue_kernel<<<a->T, 256, 0, st>>>(out, W->K, *a);
    return 1;
}

/* dequantize_row (ops.c) for value k of row n. */
__device__ static inline float dequant_at(const DevMat &W, size_t n, int k) {
    const char *row = (const char *)W.w + n * dev_row_bytes(W.type, W.K);
    if (W.type == DT_Q8_0)
        return __half2float(__ushort_as_half(W.d[n * (W.K / 32) + k / 32])) * (float)((const int8_t *)row)[k];
    return weight_at(row, W.type, k);
}

/* grid (ceil(K / 256), N), block 256: one value per thread. */
__global__ void dequant_kernel(float *out, DevMat W) {
    int n = blockIdx.y, k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= W.K) return;
    out[(size_t)n * W.K + k] = dequant_at(W, n, k);
}

int gpu_dequantize(float *out, const DevMat *W, cudaStream_t st) {
    dequant_kernel<<<dim3((W->K + 255) / 256, W->N), 256, 0, st>>>(out, *W);
    return 1;
}

/* grid (T), block 256: x[t] = embedding row token[t], widened; block 0
 * also zeroes zero[0 .. nzero) (the step's counters, LLM_CUDA_FLAGS). */
__global__ void embed_kernel(float *x, DevMat E, const int *token, int *zero, int nzero) {
    pdl_wait();
    pdl_release();
    int t = blockIdx.x;
    if (t == 0)
        for (int i = threadIdx.x; i < nzero; i += blockDim.x) zero[i] = 0;
    for (int k = threadIdx.x; k < E.K; k += blockDim.x) x[(size_t)t * E.K + k] = dequant_at(E, token[t], k);
}

int gpu_embed(float *x, const DevMat *E, const int *token, int T, int *zero, int nzero, cudaStream_t st) {
    gpu_launch(embed_kernel, T, 256, 0, st, x, *E, token, zero, nzero);
    return 1;
}
