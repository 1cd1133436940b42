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

#endif
