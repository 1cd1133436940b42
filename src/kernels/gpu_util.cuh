/* gpu_util.cuh - small device functions the kernel files share. */
#ifndef GPU_UTIL_CUH
#define GPU_UTIL_CUH

/* The sum (max) over a warp, the same in every lane: a butterfly of
 * shuffles, so the order of the additions is fixed. */
__device__ static inline float warp_sum(float v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ static inline float warp_max(float v) {
    for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Bytes of one row of w on the GPU (for Q8_0 its int8 plane; the scales
 * are apart, in d), callable from device code. */
__host__ __device__ static inline size_t dev_row_bytes(DType type, int K) {
    return type == DT_F32 ? (size_t)K * 4 : type == DT_Q8_0 ? (size_t)K : (size_t)K * 2;
}

/* Programmatic dependent launch (Hopper; notes/cuda.md, "Overlapping the
 * kernels"). A kernel launched by gpu_launch may start while the kernel
 * before it in the stream is still running. Until pdl_wait() it may only
 * read what no kernel of the step writes (the weights) and write nothing;
 * pdl_wait() returns once the kernel before has finished and its writes are
 * visible. pdl_release() lets the next kernel start. Every kernel launched
 * by gpu_launch calls pdl_wait() on every path that touches memory, so the
 * chain stays ordered: a kernel's wait covers the one before, whose wait
 * covered the one before it. Where the launch had no such attribute both
 * are no-ops. */
__device__ static inline void pdl_wait(void) {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ static inline void pdl_release(void) {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Ask for `bytes` at p to be brought into L2 (one bulk request, Hopper's
 * cp.async.bulk.prefetch; nothing waits for it). p 16-byte aligned, bytes
 * rounded down to a multiple of 16; anything else is skipped. */
__device__ static inline void prefetch_l2(const void *p, size_t bytes) {
#if __CUDA_ARCH__ >= 900
    bytes = bytes / 16 * 16;
    if (bytes && (uintptr_t)p % 16 == 0)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"((unsigned)bytes) : "memory");
#endif
}

/* Counters in memory instead of a wait for the whole kernel before
 * (LLM_CUDA_FLAGS). flag_add: every thread of the block has written its
 * part; their writes are made visible (each thread's fence, then the
 * barrier), then one thread adds v. flag_wait: one thread waits until the
 * counter reaches target (an acquiring load), then the barrier lets the
 * block go on. The counters are zeroed by the step's first kernel. Both
 * must be reached by every thread of the block. A counter that has not
 * arrived after about 4 s means the step is broken: the kernel traps, and
 * the step fails with a CUDA error instead of hanging. */
__device__ static inline void flag_add(int *cnt, int v) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) atomicAdd(cnt, v);
}
__device__ static inline void flag_wait(const int *cnt, int target) {
    if (threadIdx.x == 0) {
        long spins = 0;
        for (;;) {
            int v;
            asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(cnt) : "memory");
            if (v >= target) break;
            if (++spins > (1L << 26)) __trap();
            __nanosleep(64);
        }
        __threadfence();
    }
    __syncthreads();
}

/* L2Ahead (gpu_kernels.cuh) shared out among a kernel's nb blocks: block b
 * asks for the b-th share of each range, in pieces of 64 KB, a piece a
 * thread. Call it before pdl_wait: it reads only weights. */
__device__ static inline void l2_ahead(const L2Ahead &ah, int b, int nb) {
    const size_t piece = 64 * 1024;
    for (int r = 0; r < 2; r++) {
        size_t n = ah.bytes[r], share = (n / nb + 15) / 16 * 16, lo = (size_t)b * share, hi = lo + share < n ? lo + share : n;
        for (size_t o = lo + threadIdx.x * piece; o < hi; o += blockDim.x * piece)
            prefetch_l2((const char *)ah.p[r] + o, hi - o < piece ? hi - o : piece);
    }
}

/* Asynchronous copies of 16 bytes (or 4) from global to shared memory
 * (Ampere's cp.async; .cg: through L2 only). A thread groups the copies it has issued
 * (cp_async_commit); cp_async_wait<N>() returns once at most N of its groups
 * are still on their way, and the bytes of the others are then visible to
 * this thread (not to the others: a thread reads only what it copied, or a
 * barrier follows). */
__device__ static inline void cp_async16(void *smem_dst, const void *src) {
    unsigned d = (unsigned)__cvta_generic_to_shared(smem_dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}
__device__ static inline void cp_async4(void *smem_dst, const void *src) {   /* 4 bytes, .ca */
    unsigned d = (unsigned)__cvta_generic_to_shared(smem_dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src) : "memory");
}
__device__ static inline void cp_async_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ static inline void cp_async_wait(void) {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

#endif
