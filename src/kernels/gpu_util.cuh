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

/* ops_exp (src/ops.h) line for line: the same bits as the CPU's exponential,
 * since the build multiplies and adds separately (nvcc -fmad=false, as the
 * C builds' -ffp-contract=off) and the steps are IEEE operations. */
__device__ static inline float dev_exp(float x) {
    x = x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x;
    const float magic = 12582912.0f;
    float k = (x * 1.44269504088896341f + magic) - magic;
    k = k == k ? k : 0.0f;
    float r = x - k * 0.693145751953125f;
    r -= k * 1.428606765330187e-06f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    return p * __uint_as_float((uint32_t)((int32_t)k + 127) << 23);
}

/* Bytes of one row of w on the GPU (for Q8_0 its int8 plane; the scales
 * are apart, in d), callable from device code. */
__host__ __device__ static inline size_t dev_row_bytes(DType type, int K) {
    return type == DT_F32 ? (size_t)K * 4 : type == DT_Q8_0 ? (size_t)K : (size_t)K * 2;
}

#endif
