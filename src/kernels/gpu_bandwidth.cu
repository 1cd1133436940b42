/* gpu_bandwidth.cu - what the GPU's memory gives at best, for the benchmarks
 * to measure the kernels against (gpu.h, gpu_bandwidth).
 *
 * The read: a grid of 4 blocks of 512 threads per SM walks the buffer in
 * 16-byte loads, each thread with four loads in flight per step, and sums
 * them (the sum is written, so the loads cannot be dropped). */
#include "kernels/gpu_kernels.cuh"
#include <algorithm>
#include <stdio.h>
#include <string.h>
#include <vector>
extern "C" {
#include "kernels/gpu.h"
}

__global__ void read_kernel(const uint4 *p, size_t n, unsigned *sink) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    unsigned s = 0;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 a = __ldcs(p + i), b = __ldcs(p + i + stride), c = __ldcs(p + i + 2 * stride), d = __ldcs(p + i + 3 * stride);
        s += a.x ^ b.y ^ c.z ^ d.w;
    }
    for (; i < n; i += stride) s += __ldcs(p + i).x;
    if (s == 0x9e3779b9u) *sink = s;
}

#define CKB(call)                                                                                 \
    do {                                                                                          \
        cudaError_t ck_ = (call);                                                                 \
        if (ck_ != cudaSuccess) {                                                                 \
            st = err_set(e, ST_IO, "cuda: %s: %s", #call, cudaGetErrorString(ck_));               \
            goto done;                                                                            \
        }                                                                                         \
    } while (0)

extern "C" int gpu_bandwidth(GpuBandwidth *out, size_t bytes, int reps, Err *e) {
    memset(out, 0, sizeof *out);
    int st = ST_OK;
    char *a = NULL, *b = NULL;
    unsigned *sink = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    std::vector<float> tc, tr;
    cudaDeviceProp prop;
    CKB(cudaGetDeviceProperties(&prop, 0));
    snprintf(out->device, sizeof out->device, "%.80s, %d SMs", prop.name, prop.multiProcessorCount);
    bytes = bytes / 16 * 16;
    CKB(cudaMalloc((void **)&a, bytes));
    CKB(cudaMalloc((void **)&b, bytes));
    CKB(cudaMalloc((void **)&sink, 4));
    CKB(cudaMemset(a, 1, bytes));
    CKB(cudaMemset(b, 2, bytes));
    CKB(cudaEventCreate(&e0));
    CKB(cudaEventCreate(&e1));
    for (int i = 0; i < reps + 2; i++) {   /* two warm-ups of each */
        float ms;
        CKB(cudaEventRecord(e0));
        CKB(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
        CKB(cudaEventRecord(e1));
        CKB(cudaEventSynchronize(e1));
        CKB(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 2) tc.push_back(ms);
        CKB(cudaEventRecord(e0));
        read_kernel<<<prop.multiProcessorCount * 4, 512>>>((const uint4 *)a, bytes / 16, sink);
        CKB(cudaEventRecord(e1));
        CKB(cudaEventSynchronize(e1));
        CKB(cudaGetLastError());
        CKB(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 2) tr.push_back(ms);
    }
    std::sort(tc.begin(), tc.end());
    std::sort(tr.begin(), tr.end());
    out->copy_gbs = 2.0 * bytes / (tc[tc.size() / 2] * 1e-3) / 1e9;
    out->read_gbs = (double)bytes / (tr[tr.size() / 2] * 1e-3) / 1e9;
done:
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    cudaFree(sink);
    return st;
}
