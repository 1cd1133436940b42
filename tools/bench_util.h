/* bench_util.h - small helpers that bench.c and bench_batch.c share: the
 * CPU's name, a model's label, strict integer options, a comparison for
 * qsort. (Timing uses the engine's own clock, src/base/clock.h.) */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H
#include "base/err.h"
#include "model.h"
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
