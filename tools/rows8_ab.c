/* rows8_ab - one matrix read in place and from its copy in eights
 * (formats.h, "In eights"), the two alternated in one process, so that the
 * machine's drift between runs (10 to 20% on a shared host) falls on both.
 *
 *   build/fast/rows8_ab [--type Q4_0|Q8_0|Q4_K|Q6_K] [--shape NxK] [--tokens T]
 *                       [--copies C] [--threads N] [--rounds R]
 *
 * The matrix is C copies of N rows of K (cycled, so that with C * N * row
 * bytes past the last-level cache the rows come from memory), rounded by
 * quantize_row from a fixed pattern. Each round times each form at its best
 * of C calls; the table gives every round and the median: one token in GB/s
 * of weights, more in GFLOP/s. AVX2 only: the only path that reads eights. */
#include "base/clock.h"
#include "bench_util.h"
#include "kernels/ops.h"

enum { MAX_ROUNDS = 31 };

static void usage(FILE *f) {
    fprintf(f, "usage: rows8_ab [--type Q4_0|Q8_0|Q4_K|Q6_K] [--shape NxK] [--tokens T] [--copies C] [--threads N] "
               "[--rounds R]\n"
               "  defaults: Q4_K, 1024x2048, 1 token, 40 copies, 1 thread, 7 rounds\n");
}

int main(int argc, char **argv) {
    DType type = DT_Q4_K;
    int N = 1024, K = 2048, T = 1, copies = 40, threads = 1, rounds = 7;
    Err e = {{0}};
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            usage(stdout);
            return 0;
        }
        int known = !strcmp(f, "--type") || !strcmp(f, "--shape") || !strcmp(f, "--tokens") || !strcmp(f, "--copies") ||
                    !strcmp(f, "--threads") || !strcmp(f, "--rounds");
        if (!known) {
            fprintf(stderr, "rows8_ab: unknown option %s (see --help)\n", f);
            return 2;
        }
        if (!v) {
            fprintf(stderr, "rows8_ab: %s needs a value (see --help)\n", f);
            return 2;
        }
        int st = ST_OK;
        if (!strcmp(f, "--type")) {
            type = !strcmp(v, "Q4_0") ? DT_Q4_0 : !strcmp(v, "Q8_0") ? DT_Q8_0 : !strcmp(v, "Q4_K") ? DT_Q4_K
                 : !strcmp(v, "Q6_K") ? DT_Q6_K : DT_F32;
            if (type == DT_F32) st = err_set(&e, ST_ARG, "--type wants Q4_0, Q8_0, Q4_K or Q6_K, got '%s'", v);
        } else if (!strcmp(f, "--shape")) {
            if (sscanf(v, "%dx%d", &N, &K) != 2 || N < 8 || N % 8 || K < 256 || K % 256 || K > 65536 || N > 65536)
                st = err_set(&e, ST_ARG, "--shape wants NxK, N a multiple of 8, K of 256 (up to 65536), got '%s'", v);
        } else if (!strcmp(f, "--tokens")) st = parse_int(f, v, 1, 512, &T, &e);
        else if (!strcmp(f, "--copies")) st = parse_int(f, v, 1, 4096, &copies, &e);
        else if (!strcmp(f, "--threads")) st = parse_int(f, v, 1, 256, &threads, &e);
        else st = parse_int(f, v, 1, MAX_ROUNDS, &rounds, &e);   /* --rounds */
        if (st) {
            fprintf(stderr, "rows8_ab: %s\n", e.msg);
            return 2;
        }
        i++;
    }
    OpsIsa isa;
    if (ops_parse_isa("avx2", &isa, &e)) {
        fprintf(stderr, "rows8_ab: %s (only the AVX2 path reads rows in eights)\n", e.msg);
        return 1;
    }
    ops_set_threads(threads);
    size_t rb = dtype_row_bytes(type, K), mb = rb * (size_t)N;
    uint8_t *w = malloc(mb * (size_t)copies), *w8 = malloc(mb * (size_t)copies);
    float *row = malloc(sizeof(float) * (size_t)K), *x = malloc(sizeof(float) * (size_t)T * K),
          *out = malloc(sizeof(float) * (size_t)T * N);
    void *scratch = malloc(matmul_scratch_bytes(type, T, K) + 1);
    if (!w || !w8 || !row || !x || !out || !scratch) {
        fprintf(stderr, "rows8_ab: out of memory for %d copies of %zu bytes\n", copies, mb);
        return 1;
    }
    for (int n = 0; n < N; n++) {
        for (int k = 0; k < K; k++) row[k] = (float)(((n * 7919 + k * 104729) % 2001) - 1000) / 1000.0f;
        quantize_row(w + (size_t)n * rb, row, type, K);
    }
    for (int c = 1; c < copies; c++) memcpy(w + (size_t)c * mb, w, mb);
    for (int c = 0; c < copies; c++) {
        Mat W = {.type = type, .N = N, .K = K, .data = w + (size_t)c * mb};
        mat_to_rows8(w8 + (size_t)c * mb, &W);
    }
    for (size_t i = 0; i < (size_t)T * K; i++) x[i] = (float)(i % 77) / 77.0f - 0.4f;
    double r[2][MAX_ROUNDS];
    for (int round = 0; round < rounds; round++)
        for (int v = 0; v < 2; v++) {
            double best = 1e30;
            for (int c = 0; c < copies; c++) {
                Mat W = {.type = type, .N = N, .K = K, .data = w + (size_t)c * mb, .rows8 = v ? w8 + (size_t)c * mb : NULL};
                double t0 = clock_seconds();
                matmul_isa(out, x, &W, T, scratch, isa);
                double dt = clock_seconds() - t0;
                if (dt < best) best = dt;
            }
            r[v][round] = T == 1 ? mb / best * 1e-9 : 2.0 * N * K * T / best * 1e-9;
        }
    printf("# command:");
    for (int i = 0; i < argc; i++) printf(" %s", argv[i]);
    printf("\n# %s %dx%d, %d token%s, %d cop%s of %.1f MB, %d thread%s; %s\n", dtype_name(type), N, K, T,
           T > 1 ? "s" : "", copies, copies > 1 ? "ies" : "y", mb / 1e6, threads, threads > 1 ? "s" : "",
           T == 1 ? "GB/s of weights" : "GFLOP/s");
    for (int v = 0; v < 2; v++) {
        printf("%-9s", v ? "in eights" : "in place");
        for (int i = 0; i < rounds; i++) printf(" %6.1f", r[v][i]);
        qsort(r[v], (size_t)rounds, sizeof(double), cmp_double);
        printf("   median %.1f\n", r[v][rounds / 2]);
    }
    free(w), free(w8), free(row), free(x), free(out), free(scratch);
    return 0;
}
