/* ceilings - the best this CPU gives: read bandwidth by the best of several
 * loops, and the FMA, VNNI and AMX peaks, on 1 and 2 threads (ceilings.h says
 * what each loop and peak is). The benchmarks' percentages are of these.
 *
 *   build/fast/ceilings [--threads 1,2] [--gib 1]
 *
 * Prints the CPU kind (cpuid: vendor, family, model) and its name, then a
 * table: one row per thread count, the GB/s of each read loop, the best,
 * GFLOP/s of FMA and GOP/s of VNNI and AMX. */
#include "bench_util.h"
#include "ceilings.h"
#include "base/mem.h"

static void usage(FILE *f) {
    fprintf(f, "usage: ceilings [--threads 1,2] [--gib N]\n"
               "  --threads LIST  thread counts to measure, comma-separated (default 1,2)\n"
               "  --gib N         the buffer read, in GiB (default 1; it must dwarf the last-level cache)\n");
}

int main(int argc, char **argv) {
    int threads[8] = {1, 2}, n_threads = 2;
    int gib = 1;
    Err e = {{0}};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--gib") && strcmp(argv[i], "--threads")) {
            fprintf(stderr, "ceilings: unknown option %s (see --help)\n", argv[i]);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "ceilings: %s needs a value (see --help)\n", argv[i]);
            return 2;
        }
        if (!strcmp(argv[i], "--gib")) {
            if (parse_int("--gib", argv[++i], 1, 64, &gib, &e)) {
                fprintf(stderr, "ceilings: %s\n", e.msg);
                return 2;
            }
        } else if (!strcmp(argv[i], "--threads")) {
            char *list = argv[++i], *save = NULL;
            n_threads = 0;
            for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                int v = 0;
                if (n_threads == 8 || parse_int("--threads", t, 1, 256, &v, &e)) {
                    fprintf(stderr, "ceilings: %s\n", n_threads == 8 ? "--threads: at most 8 counts" : e.msg);
                    return 2;
                }
                threads[n_threads++] = v;
            }
            if (!n_threads) {
                fprintf(stderr, "ceilings: --threads: no count given\n");
                return 2;
            }
        }
    }
    size_t bytes = (size_t)gib << 30;
    uint8_t *buf = aligned_alloc(64, bytes);
    if (!buf) {
        fprintf(stderr, "ceilings: cannot allocate %d GiB\n", gib);
        return 1;
    }
    mem_advise_huge(buf, bytes);   /* as the engine's weights (model.h): 2 MiB pages where the system gives them */
    for (size_t i = 0; i < bytes; i += 8) *(uint64_t *)(buf + i) = i * 0x9e3779b97f4a7c15ull;   /* no zero pages */
    char kind[96], name[160];
    cpu_kind(kind, sizeof kind);
    cpu_name(name, sizeof name);
    printf("cpu: %s (%s)%s\n", kind, name,
           ceil_has_vnni()     ? ""
           : ceil_has_avx512() ? ", no VNNI"
           : ceil_has_avx2()   ? ", no AVX-512: AVX2 loops, FMA and int8 (vpmaddubsw)"
                               : ", no AVX-512 or AVX2");
    printf("read: %d GiB, median of %d runs a loop; peaks: best of %d\n\n", gib, CEIL_RUNS, CEIL_RUNS);
    printf("| threads |");
    for (int w = 0; w < CEIL_READS; w++) printf(" %s GB/s |", CEIL_READ_NAMES[w]);
    printf(" best read GB/s | FMA GFLOP/s | VNNI GOP/s | AMX GOP/s |\n|--:|");
    for (int w = 0; w < CEIL_READS; w++) printf("--:|");
    printf("--:|--:|--:|--:|\n");
    uint64_t sink = 0;
    double int8[sizeof threads / sizeof *threads];   /* each row's int8 peak, for the dot products' line below */
    for (int i = 0; i < n_threads; i++) {
        double each[CEIL_READS];
        int which = 0;
        double best = ceil_read_best(buf, bytes, threads[i], &which, each, &sink);
        printf("| %d |", threads[i]);
        for (int w = 0; w < CEIL_READS; w++) printf(" %.1f |", each[w]);
        double amx = ceil_peak(2, threads[i], &sink), fma = ceil_peak(0, threads[i], &sink);
        int8[i] = ceil_peak(1, threads[i], &sink);
        printf(" %.1f (%s) | %.1f | %.1f |", best, CEIL_READ_NAMES[which], fma, int8[i]);
        if (amx > 0) printf(" %.1f |\n", amx);
        else printf(" - (no AMX) |\n");
    }
    if (!ceil_has_avx512() && ceil_has_avx2()) {   /* what int8 products cost inside a dot product there */
        printf("\nint8 as a dot product uses it on AVX2 (each vpmaddubsw followed by a vpaddw into the sums):\n");
        for (int i = 0; i < n_threads; i++) {
            double dot = ceil_peak(3, threads[i], &sink);   /* against the table's vpmaddubsw alone */
            printf("  %d thread%s: %.1f GOP/s, %.2f of vpmaddubsw alone (%.1f)\n", threads[i], threads[i] > 1 ? "s" : "",
                   dot, dot / int8[i], int8[i]);
        }
    }
    if (sink == 0x9e3779b9u) printf("(checksum %llu)\n", (unsigned long long)sink);
    free(buf);
    return 0;
}
