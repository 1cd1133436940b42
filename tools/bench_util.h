/* bench_util.h - small helpers that bench.c and bench_batch.c share: the
 * CPU's name, a model's label, what a step reads and multiplies, the peak
 * its products run at, strict integer options, a comparison for qsort.
 * (Timing uses the engine's own clock, src/base/clock.h.) */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H
#include "base/err.h"
#include "model.h"
#include "kernels/ops.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "model name" from /proc/cpuinfo, or "unknown CPU". */
static inline void cpu_name(char *buf, size_t cap) {
    snprintf(buf, cap, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon) {
            snprintf(buf, cap, "%s", colon + 2);
            buf[strcspn(buf, "\n")] = 0;
            break;
        }
    }
    fclose(f);
}

/* The GGUF general.name (at most 40 characters), else the file's name. */
static inline void model_label(const Model *m, const char *path, char *buf, size_t cap) {
    GgufStr s;
    if (strcmp(m->format, "gguf") == 0 && gguf_get_str(&m->gguf, "general.name", &s, NULL) == ST_OK) {
        snprintf(buf, cap, "%.*s", (int)(s.len < 40 ? s.len : 40), s.s);
        return;
    }
    const char *slash = strrchr(path, '/');
    snprintf(buf, cap, "%s", slash ? slash + 1 : path);
}

static inline double mat_bytes(const Mat *w) { return (double)dtype_row_bytes(w->type, w->K) * w->N; }
static inline double mat_params(const Mat *w) { return (double)w->N * w->K; }

/* Bytes one decode step reads, whatever its number of tokens: every layer
 * matrix and norm, the final norm and the classifier, plus one row of the
 * token embedding (it is looked up, not multiplied). */
static inline double model_step_bytes(const Model *m) {
    int D = m->cfg.dim;
    double b = 0.0;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const Layer *y = &m->layers[l];
        b += mat_bytes(&y->wq) + mat_bytes(&y->wk) + mat_bytes(&y->wv) + mat_bytes(&y->wo) +
             mat_bytes(&y->w_gate) + mat_bytes(&y->w_down) + mat_bytes(&y->w_up) + 2.0 * D * 4;
    }
    return b + D * 4.0 + mat_bytes(&m->output) + (double)dtype_row_bytes(m->tok_embd.type, D);
}

/* Weights each token multiplies: those of the layers and the classifier's. */
static inline void model_matmul_params(const Model *m, double *layers, double *classifier) {
    *layers = 0.0;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const Layer *y = &m->layers[l];
        *layers += mat_params(&y->wq) + mat_params(&y->wk) + mat_params(&y->wv) + mat_params(&y->wo) +
                   mat_params(&y->w_gate) + mat_params(&y->w_down) + mat_params(&y->w_up);
    }
    *classifier = mat_params(&m->output);
}

/* The peak of the instruction a type's products run on (ceilings.h): FMA
 * for the float types, int8 (VNNI, or AVX2's vpmaddubsw) for the quantized
 * ones, AMX where the engine's AMX tiles take them (amx > 0 only where the
 * CPU has it); its name in *name unless name is NULL. */
static inline double type_peak(DType wt, double fma, double int8, double amx, const char **name) {
    const char *unused;
    if (!name) name = &unused;
    if (wt == DT_F32 || wt == DT_F16 || wt == DT_BF16 || wt == DT_BF16E) return *name = "FMA", fma;
    if ((wt == DT_Q8_0 || wt == DT_Q4_0 || wt == DT_Q4_K) && ops_amx() && amx > 0) return *name = "AMX", amx;
    return *name = "int8", int8;
}

/* The whole of text must be an integer in lo..hi (ST_ARG naming flag otherwise). */
static inline int parse_int(const char *flag, const char *text, int lo, int hi, int *out, Err *e) {
    char *end;
    long v = strtol(text, &end, 10);
    if (end == text || *end || v < lo || v > hi)
        return err_set(e, ST_ARG, "%s wants an integer in %d..%d, got '%s'", flag, lo, hi, text);
    *out = (int)v;
    return ST_OK;
}

/* Ascending doubles, for qsort. */
static inline int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#endif
