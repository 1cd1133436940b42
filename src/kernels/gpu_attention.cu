/* gpu_attention.cu - RoPE with the K/V store into paged slots, and paged
 * attention, on the GPU.
 *
 * C references: rope (src/kernels/ops.c) and the memcpy of k and v to b->slot[t] in
 * model_forward_batch (src/model.c); model_attend_paged and attend_rows
 * (src/model.c) for attention: softmax(q . k * scale) over positions
 * 0 .. pos[t] of the row's sequence, read through its block table, applied
 * to the values, in one pass with the online softmax.
 *
 * rope_store_kernel: grid (T), block 128: the threads share out the row's
 * (head, pair) rotations of q and k, then its k and v rows go to the slot.
 * (Where the q|k|v product runs on the kernels its epilogue does this
 * instead: gpu_matvec.cu rope_rows, the same operations.)
 *
 * attn_kernel: a thread block per (query head h, row t, split), as vLLM's
 * paged attention v1 gives one to each head and sequence:
 *
 *   block (h, t, split)        4 warps; positions in chunks of 32
 *     warp w takes chunks w, w+4, w+8, ... of the split's range
 *       lane j: score of position 32c + j (its key row found through the
 *               block table, q . k summed in order as attend_rows does)
 *       the warp: the chunk's max (shuffles), one rescale of its running
 *               output if the max grew, e^(score - max) per lane, then for
 *               each of the 32 positions every lane adds weight * v for its
 *               dims (lane, lane + 32, ...): each value row read coalesced,
 *               the rows of G positions loaded at once, then added in order
 *     the 4 warps' (max, sum, output) merged through shared memory
 *
 * When heads x rows cannot fill the GPU (a decode of one sequence has 32
 * blocks for 132 SMs) each row's range is split: every split writes its
 * partial (max, sum, output) and attn_reduce_kernel merges them, as
 * Flash-Decoding and vLLM's v2 kernel do. The split count is fixed per
 * launch and the ranges follow from the row's length on the device, so a
 * captured CUDA graph stays right as sequences grow. */
#include "kernels/gpu_kernels.cuh"
#include "kernels/gpu_util.cuh"

enum { ATT_WARPS = 4, ATT_MAX_S = 256 };

/* grid (T), block 128 */
__global__ void rope_store_kernel(AttnArgs a) {
    pdl_wait();
    pdl_release();
    int t = blockIdx.x, S = a.S, half = a.n_rot / 2;
    int qd = a.H * S, kvd = a.Hkv * S;
    float *q = a.qkv + (size_t)t * a.ld, *k = q + qd, *v = k + kvd;
    const float *cs = a.rope_cs + (size_t)a.pos[t] * half * 2;
    for (int i = threadIdx.x; i < (a.H + a.Hkv) * half; i += blockDim.x) {
        int h = i / half, p = i % half;
        float *x = h < a.H ? q + h * S : k + (h - a.H) * S;
        float c = cs[2 * p], s = cs[2 * p + 1], x0 = x[2 * p], x1 = x[2 * p + 1];
        x[2 * p] = fmaf(x0, c, -(x1 * s));   /* as ops.c rope, fused the same way */
        x[2 * p + 1] = fmaf(x0, s, x1 * c);
    }
    __syncthreads();
    size_t at = (size_t)a.slot[t] * kvd;
    for (int i = threadIdx.x; i < kvd; i += blockDim.x) {
        a.kc[at + i] = k[i];
        a.vc[at + i] = v[i];
    }
}

int gpu_rope_store(const AttnArgs *a, cudaStream_t st) {
    gpu_launch(rope_store_kernel, a->T, 128, 0, st, *a);
    return 1;
}

size_t gpu_attention_part_floats(int T, int H, int S, int nsplit) {
    return nsplit > 1 ? (size_t)T * H * nsplit * (S + 2) : 0;
}

/* A lane's loads for chunk c of positions (slot: the row of its own
 * position, live: that position is in range; last: the chunk's positions):
 * the first KB * 4 values of its key row, and the value rows of the chunk's
 * first G positions at its dims (lane, lane + 32, ...), each row read by
 * the whole warp. Keys and values do not depend on each other, so both are
 * in flight at once. */
template <int DIMS, int KB, int G>
__device__ static inline void att_load(const AttnArgs &a, int kvd, int off, int slot, bool live, int last, int j0,
                                       float4 kk[KB], float vv[G][DIMS]) {
    int lane = threadIdx.x % 32, S = a.S;
    if (kk && live && S % 4 == 0) {
        const float *kr = a.kc + (size_t)slot * kvd + off;
#pragma unroll
        for (int b = 0; b < KB; b++) kk[b] = 4 * b < S ? *(const float4 *)(kr + 4 * b) : make_float4(0, 0, 0, 0);
    }
#pragma unroll
    for (int jj = 0; jj < G; jj++) {
        int j = j0 + jj;
        if (j >= last) break;   /* the same for every lane */
        const float *vr = a.vc + (size_t)__shfl_sync(0xffffffffu, slot, j) * kvd + off;
#pragma unroll
        for (int i = 0; i < DIMS; i++) vv[jj][i] = lane + 32 * i < S ? vr[lane + 32 * i] : 0.0f;
    }
}

/* grid (H, T, nsplit), block 32 * ATT_WARPS. DIMS: the head's values per
 * lane, ceil(S / 32); the value rows of G positions are loaded at once (G *
 * DIMS registers) before they are added in order; a key row is read KB * 16
 * bytes at a time (all of it for heads up to 64). A warp's first chunk is
 * asked for before the query is staged, and each chunk's keys and its first
 * G value rows travel together: a decode at a short context is a chain of
 * latencies, and this makes it two (the block table, then the rows). */
template <int DIMS>
__global__ void __launch_bounds__(32 * ATT_WARPS) attn_kernel(float *out, AttnArgs a, int nsplit, float *part, L2Ahead ah) {
    enum { G = DIMS <= 2 ? 32 : 64 / DIMS, KB = 8 * DIMS < 16 ? 8 * DIMS : 16 };
    __shared__ float qs[ATT_MAX_S];
    __shared__ float wm[ATT_WARPS], wl[ATT_WARPS], wo[ATT_WARPS][ATT_MAX_S];
    int h = blockIdx.x, t = blockIdx.y, sp = blockIdx.z;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int S = a.S, qd = a.H * S, kvd = a.Hkv * S, off = (h / (a.H / a.Hkv)) * S;
    /* The batch (positions, sequences, block tables) is uploaded before the
     * step and no kernel writes it: read it, and find the lane's first
     * slot, before waiting for the kernel ahead. */
    int n = a.pos[t] + 1;
    const int *table = a.tables + (size_t)a.seq[t] * a.tstride;
    float scale = 1.0f / sqrtf((float)S);
    int chunks = (n + 31) / 32, per = (chunks + nsplit - 1) / nsplit;
    int c0 = sp * per, c1 = min(chunks, c0 + per);
    int p = (c0 + warp) * 32 + lane;
    int slot = c0 + warp < c1 && p < n ? table[p / a.BS] * a.BS + p % a.BS : 0;   /* this lane's position's row */
    /* memory is idle while attention works: the next products' weights into L2 */
    l2_ahead(ah, (sp * gridDim.y + t) * gridDim.x + h, gridDim.x * gridDim.y * gridDim.z);
    if (a.wait_on) {   /* LLM_CUDA_FLAGS: the rows of this head's group written, not all of q|k|v */
        pdl_release();
        flag_wait(a.wait_on + h / (a.H / a.Hkv), (a.H / a.Hkv + 2) * S);
    } else {
        pdl_wait();
        pdl_release();
    }

    float4 kk[KB];
    float vv[G][DIMS];
    if (c0 + warp < c1)   /* the first chunk's rows (the kernel ahead wrote this step's k and v) */
        att_load<DIMS, KB, G>(a, kvd, off, slot, p < n, min(32, n - (c0 + warp) * 32), 0, kk, vv);
    const float *q = a.qkv + (size_t)t * a.ld + (size_t)h * S;
    for (int i = threadIdx.x; i < S; i += blockDim.x) qs[i] = q[i];
    __syncthreads();

    float m = -INFINITY, l = 0.0f, o[DIMS];
#pragma unroll
    for (int i = 0; i < DIMS; i++) o[i] = 0.0f;
    for (int c = c0 + warp; c < c1; c += ATT_WARPS) {
        p = c * 32 + lane;
        int last = min(32, n - c * 32);
        if (c != c0 + warp) att_load<DIMS, KB, G>(a, kvd, off, slot, p < n, last, 0, kk, vv);
        float score = -INFINITY;
        if (p < n) {
            const float *kr = a.kc + (size_t)slot * kvd + off;
            float d = 0.0f;   /* summed in order, as attend_rows does */
            if (S % 4 == 0) {
                for (int i0 = 0; i0 < S; i0 += 4 * KB) {
                    if (i0 > 0)   /* heads past 4 * KB values: the next KB loads */
#pragma unroll
                        for (int b = 0; b < KB; b++)
                            kk[b] = i0 + 4 * b < S ? *(const float4 *)(kr + i0 + 4 * b) : make_float4(0, 0, 0, 0);
#pragma unroll
                    for (int b = 0; b < KB; b++) {
                        int i = i0 + 4 * b;
                        if (i >= S) break;
                        d += qs[i] * kk[b].x;
                        d += qs[i + 1] * kk[b].y;
                        d += qs[i + 2] * kk[b].z;
                        d += qs[i + 3] * kk[b].w;
                    }
                }
            } else {
                for (int i = 0; i < S; i++) d += qs[i] * kr[i];
            }
            score = d * scale;
        }
        float cm = warp_max(score);
        if (cm > m) {   /* a new maximum in this chunk: rescale once (attend_chunk) */
            float r = ops_exp(m - cm);
            l *= r;
#pragma unroll
            for (int i = 0; i < DIMS; i++) o[i] *= r;
            m = cm;
        }
        float w = p < n ? ops_exp(score - m) : 0.0f;
        l += warp_sum(w);
        /* each position's weight from the lane that holds it, times its
         * value row (loaded G rows at a time), added in order */
        for (int j0 = 0; j0 < last; j0 += G) {
            if (j0 > 0) att_load<DIMS, KB, G>(a, kvd, off, slot, false, last, j0, nullptr, vv);
#pragma unroll
            for (int jj = 0; jj < G; jj++) {
                if (j0 + jj >= last) break;
                float wj = __shfl_sync(0xffffffffu, w, j0 + jj);
#pragma unroll
                for (int i = 0; i < DIMS; i++) o[i] += wj * vv[jj][i];
            }
        }
        /* the next chunk's slot */
        int pn = (c + ATT_WARPS) * 32 + lane;
        slot = c + ATT_WARPS < c1 && pn < n ? table[pn / a.BS] * a.BS + pn % a.BS : 0;
    }
    if (lane == 0) {
        wm[warp] = m;
        wl[warp] = l;
    }
#pragma unroll
    for (int i = 0; i < DIMS; i++)
        if (lane + 32 * i < S) wo[warp][lane + 32 * i] = o[i];
    __syncthreads();

    /* merge the warps: each contributes e^(m_w - M) of its sum and output */
    float M = -INFINITY, L = 0.0f, f[ATT_WARPS];
    for (int w = 0; w < ATT_WARPS; w++) M = fmaxf(M, wm[w]);
    for (int w = 0; w < ATT_WARPS; w++) {
        f[w] = wm[w] == -INFINITY ? 0.0f : ops_exp(wm[w] - M);
        L += wl[w] * f[w];
    }
    for (int i = threadIdx.x; i < S; i += blockDim.x) {
        float acc = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++) acc += wo[w][i] * f[w];
        if (nsplit == 1) out[(size_t)t * qd + (size_t)h * S + i] = acc / L;
        else part[((size_t)(t * a.H + h) * nsplit + sp) * (S + 2) + 2 + i] = acc;
    }
    if (nsplit > 1 && threadIdx.x == 0) {
        float *pp = part + ((size_t)(t * a.H + h) * nsplit + sp) * (S + 2);
        pp[0] = M;
        pp[1] = L;
    }
    if (a.signal) flag_add(a.signal, 1);
}

/* grid (H, T), block 128: the splits' partials merged, as the warps were. */
__global__ void attn_reduce_kernel(float *out, const float *part, int H, int S, int nsplit) {
    pdl_wait();
    pdl_release();
    int h = blockIdx.x, t = blockIdx.y;
    const float *pp = part + (size_t)(t * H + h) * nsplit * (S + 2);
    float M = -INFINITY, L = 0.0f;
    for (int s = 0; s < nsplit; s++) M = fmaxf(M, pp[s * (S + 2)]);
    for (int s = 0; s < nsplit; s++) {
        float ms = pp[s * (S + 2)];
        if (ms != -INFINITY) L += pp[s * (S + 2) + 1] * ops_exp(ms - M);
    }
    for (int i = threadIdx.x; i < S; i += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < nsplit; s++) {
            float ms = pp[s * (S + 2)];
            if (ms != -INFINITY) acc += pp[s * (S + 2) + 2 + i] * ops_exp(ms - M);
        }
        out[(size_t)t * H * S + (size_t)h * S + i] = acc / L;
    }
}

int gpu_attention(float *out, const AttnArgs *a, int nsplit, float *part, const L2Ahead *ahead, cudaStream_t st) {
    if (nsplit < 1) nsplit = 1;
    dim3 grid(a->H, a->T, nsplit);
    int dims = (a->S + 31) / 32;
    L2Ahead ah = ahead ? *ahead : L2Ahead{{NULL, NULL}, {0, 0}};
    if (dims <= 1) gpu_launch(attn_kernel<1>, grid, 32 * ATT_WARPS, 0, st, out, *a, nsplit, part, ah);
    else if (dims <= 2) gpu_launch(attn_kernel<2>, grid, 32 * ATT_WARPS, 0, st, out, *a, nsplit, part, ah);
    else if (dims <= 4) gpu_launch(attn_kernel<4>, grid, 32 * ATT_WARPS, 0, st, out, *a, nsplit, part, ah);
    else gpu_launch(attn_kernel<8>, grid, 32 * ATT_WARPS, 0, st, out, *a, nsplit, part, ah);
    if (nsplit == 1) return 1;
    gpu_launch(attn_reduce_kernel, dim3(a->H, a->T), 128, 0, st, out, (const float *)part, a->H, a->S, nsplit);
    return 2;
}
