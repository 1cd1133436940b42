/* gpu_none.c - gpu.h in every build but `make cuda`: there is no GPU code,
 * and asking for it says so. */
#include "kernels/gpu.h"
#include <string.h>

int gpu_model_create(GpuModel **out, const GpuModelDesc *d, Err *e) {
    *out = NULL;
    return err_set(e, ST_UNSUPPORTED, "--device cuda: this build has no CUDA kernels (build them with "
                                      "`make cuda` and run build/cuda/...)");
}

int gpu_forward(GpuModel *g, const GpuBatch *b, float *logits, Err *e) {
    return err_set(e, ST_UNSUPPORTED, "gpu_forward: this build has no CUDA kernels");
}

GpuStats gpu_stats(const GpuModel *g) {
    GpuStats s;
    memset(&s, 0, sizeof s);
    return s;
}

void gpu_model_free(GpuModel *g) {}

int gpu_bandwidth(GpuBandwidth *out, size_t bytes, int reps, Err *e) {
    memset(out, 0, sizeof *out);
    return err_set(e, ST_UNSUPPORTED, "gpu_bandwidth: this build has no CUDA kernels");
}
