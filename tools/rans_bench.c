/* rans_bench.c - size and speed of the rANS codec (src/rans.c), beside zstd.
 *
 * For each set of bytes it prints the order-0 entropy, what rANS makes of it
 * (payload bits per byte, header, ratio), and MB/s of encoding and decoding
 * (MB = 10^6 bytes of the original, one thread unless --threads says more):
 * the plain decoder, the fast one over the whole stream (two chunks in
 * lockstep), and the fast one a chunk at a time (what a caller decoding one
 * tensor gets). Each figure is the median of --runs timed runs, with their
 * range, after one untimed run; every decode is compared with the input. Then
 * zstd levels 3 and 19 on the same bytes (level 19 compresses once: it is slow).
 *
 * The sets of bytes:
 *   gauss     int8 like a weight matrix quantised per row: rows of 4096
 *             Gaussian values, each row scaled so its largest |x| is 127 and
 *             rounded (--row 32 gives Q8_0's blocks of 32 instead)
 *   --file    any file, as raw bytes
 *   --gguf    the int8 values of a GGUF model's matrices: Q8_0 tensors give
 *             their stored quants, F32/F16 ones are quantised to Q8_0's rule
 *             here (blocks of 32, d = max|x| / 127), the scales left out
 * --sweep adds a table of decode speed and size over N and over bits.
 *
 *   build/fast/rans_bench [--mib M] [--row R] [--file PATH] [--gguf PATH]
 *       [--bits B] [--states N] [--chunk BYTES] [--runs R] [--threads T] [--sweep] [--no-zstd] */
#include "bench_util.h"
#include "base/clock.h"
#include "load/gguf.h"
#include "base/mem.h"
#include "kernels/ops.h"
#include "rans.h"
#include <math.h>
#include <zstd.h>

enum { MAX_RUNS = 101 };

typedef struct {
    double mib;              /* size of the synthetic set */
    int row;                 /* values per quantisation scale in it */
    const char *file, *gguf;
    RansParams p;
    int runs, threads, sweep, zstd;
} Options;

/* ------------------------------------------------------------ data */

static uint64_t next_random(uint64_t *s) {   /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double gaussian(uint64_t *s) {   /* Box-Muller */
    double u1 = ((double)(next_random(s) >> 11) + 0.5) * 0x1p-53;
    double u2 = ((double)(next_random(s) >> 11) + 0.5) * 0x1p-53;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* Round a row of n floats to int8 with one scale: max |x| maps to 127. */
static void quantise_row(int8_t *q, const float *x, int n) {
    float amax = 0;
    for (int i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    float inv = amax > 0 ? 127.0f / amax : 0.0f;
    for (int i = 0; i < n; i++) q[i] = (int8_t)lrintf(x[i] * inv);
}

static uint8_t *synthetic(size_t n, int row) {
    uint8_t *buf = malloc(n);
    float *x = malloc((size_t)row * sizeof *x);
    uint64_t s = 42;
    for (size_t at = 0; at < n; at += (size_t)row) {
        int m = n - at < (size_t)row ? (int)(n - at) : row;
        for (int i = 0; i < m; i++) x[i] = (float)gaussian(&s);
        quantise_row((int8_t *)buf + at, x, m);
    }
    free(x);
    return buf;
}

/* A whole file in malloc'd memory; NULL if it cannot be read. */
static uint8_t *read_file_bytes(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint8_t *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f);
        rewind(f);
        if (size >= 0 && (buf = malloc(size ? (size_t)size : 1)) && fread(buf, 1, (size_t)size, f) != (size_t)size) {
            free(buf);
            buf = NULL;
        }
        *n = (size_t)size;
    }
    fclose(f);
    return buf;
}

/* The types read below: F32 and F16 are rounded here, Q8_0 taken as stored;
 * the others (BF16, the 4 to 6-bit formats) are skipped. */
static int int8_source(const GgufTensor *T) {
    return T->n_dims == 2 && (T->type == DT_F32 || T->type == DT_F16 || T->type == DT_Q8_0) &&
           T->ne[0] % 32 == 0;
}

/* The int8 values of every 2-D matrix of a GGUF file (see the top). */
static uint8_t *gguf_int8(const char *path, size_t *n, Err *e) {
    Gguf g;
    if (gguf_open(&g, path, e)) return NULL;
    size_t total = 0;
    for (uint64_t t = 0; t < g.n_tensors; t++) {
        const GgufTensor *T = &g.tensors[t];
        if (int8_source(T)) total += T->ne[0] * T->ne[1];
    }
    uint8_t *buf = malloc(total ? total : 1);
    float *row = NULL;
    size_t at = 0;
    for (uint64_t t = 0; t < g.n_tensors; t++) {
        const GgufTensor *T = &g.tensors[t];
        if (!int8_source(T)) continue;
        size_t K = T->ne[0], N = T->ne[1];
        row = realloc(row, K * sizeof *row);
        for (size_t r = 0; r < N; r++) {
            if (T->type == DT_Q8_0) {
                const BlockQ8_0 *b = (const BlockQ8_0 *)T->data + r * (K / 32);
                for (size_t k = 0; k < K / 32; k++) memcpy(buf + at + 32 * k, b[k].qs, 32);
            } else {
                for (size_t k = 0; k < K; k++)
                    row[k] = T->type == DT_F32 ? ((const float *)T->data)[r * K + k]
                                               : fp16_to_fp32(((const uint16_t *)T->data)[r * K + k]);
                for (size_t k = 0; k < K; k += 32) quantise_row((int8_t *)buf + at + k, row + k, 32);
            }
            at += K;
        }
    }
    free(row);
    gguf_close(&g);
    *n = total;
    return buf;
}

/* ------------------------------------------------------------ timing */

typedef struct { double median, lo, hi; } Figure;

/* MB/s over the samples (seconds each) for n bytes. */
static Figure figure(double *sec, int runs, size_t n) {
    qsort(sec, (size_t)runs, sizeof *sec, cmp_double);
    double mb = (double)n / 1e6, med = runs % 2 ? sec[runs / 2] : 0.5 * (sec[runs / 2 - 1] + sec[runs / 2]);
    return (Figure){.median = mb / med, .lo = mb / sec[runs - 1], .hi = mb / sec[0]};
}

static void print_figure(const char *what, Figure f, int runs) {
    printf("  %-34s %7.0f MB/s  (median of %d, %.0f-%.0f)\n", what, f.median, runs, f.lo, f.hi);
}

static void die(const char *what, const Err *e) {
    fprintf(stderr, "rans_bench: %s: %s\n", what, e->msg);
    exit(1);
}

/* How to decode in one timed run. */
typedef enum { WHOLE, CHUNK_BY_CHUNK } Mode;

static double time_decode(const RansStream *s, uint8_t *out, const uint8_t *want, RansIsa isa, Mode mode,
                          int threads) {
    Err e;
    memset(out, 0, s->n);   /* the output is rewritten each run: pages are touched before timing */
    double t0 = clock_seconds();
    if (mode == WHOLE) {
        if (rans_decode(s, out, s->n, isa, threads, &e)) die("decode", &e);
    } else {
        for (uint64_t k = 0; k < s->n_chunks; k++)
            if (rans_decode_chunk(s, k, out + k * s->chunk_size, rans_chunk_len(s, k), isa, &e))
                die("decode chunk", &e);
    }
    double t = clock_seconds() - t0;
    if (memcmp(out, want, s->n) != 0) {
        fprintf(stderr, "rans_bench: %s decoder gave wrong bytes\n", rans_isa_name(isa));
        exit(1);
    }
    return t;
}

static Figure bench_decode(const RansStream *s, uint8_t *out, const uint8_t *want, RansIsa isa, Mode mode,
                           int threads, int runs) {
    double sec[MAX_RUNS];
    time_decode(s, out, want, isa, mode, threads);
    for (int r = 0; r < runs; r++) sec[r] = time_decode(s, out, want, isa, mode, threads);
    return figure(sec, runs, s->n);
}

/* What one core moves to and from memory (256 MiB, far past the caches):
 * a decoder that reads c bytes and writes n cannot beat this. */
static void memory_bandwidth(int runs) {
    const size_t n = (size_t)256 << 20;
    uint64_t *a = malloc(n), *b = malloc(n);
    memset(a, 1, n);
    memset(b, 2, n);
    double rd[MAX_RUNS], cp[MAX_RUNS];
    volatile uint64_t sink = 0;
    runs = runs < 5 ? runs : 5;
    for (int r = 0; r < runs; r++) {
        double t0 = clock_seconds();
        uint64_t sum = 0;
        for (size_t i = 0; i < n / 8; i++) sum += a[i];
        sink += sum;
        rd[r] = clock_seconds() - t0;
        t0 = clock_seconds();
        memcpy(b, a, n);
        cp[r] = clock_seconds() - t0;
    }
    Figure fr = figure(rd, runs, n), fc = figure(cp, runs, n);
    printf("one core: reads memory at %.1f GB/s, copies at %.1f GB/s (256 MiB, median of %d)\n",
           fr.median / 1e3, fc.median / 1e3, runs);
    (void)sink;
    free(a);
    free(b);
}

/* ------------------------------------------------------------ one set of bytes */

static void bench_zstd(const uint8_t *src, size_t n, int level, int runs) {
    size_t cap = ZSTD_compressBound(n), clen = 0;
    uint8_t *c = malloc(cap), *d = malloc(n ? n : 1);
    double sec[MAX_RUNS];
    int crun = level >= 10 ? 1 : runs;
    for (int r = 0; r < crun; r++) {
        double t0 = clock_seconds();
        clen = ZSTD_compress(c, cap, src, n, level);
        sec[r] = clock_seconds() - t0;
        if (ZSTD_isError(clen)) {
            fprintf(stderr, "rans_bench: zstd: %s\n", ZSTD_getErrorName(clen));
            exit(1);
        }
    }
    Figure fc = figure(sec, crun, n);
    for (int r = 0; r < runs; r++) {
        double t0 = clock_seconds();
        size_t got = ZSTD_decompress(d, n, c, clen);
        sec[r] = clock_seconds() - t0;
        if (ZSTD_isError(got) || got != n || memcmp(d, src, n) != 0) {
            fprintf(stderr, "rans_bench: zstd -%d did not round-trip\n", level);
            exit(1);
        }
    }
    Figure fd = figure(sec, runs, n);
    printf("zstd -%-2d   %.4f bits/byte, ratio %.3f; compress %.1f MB/s%s, decompress %.0f MB/s (%.0f-%.0f)\n",
           level, 8.0 * (double)clen / (double)n, (double)n / (double)clen, fc.median,
           crun == 1 ? " (one run)" : "", fd.median, fd.lo, fd.hi);
    free(c);
    free(d);
}

static void bench_set(const char *name, const uint8_t *src, size_t n, const Options *o) {
    Err e;
    RansIsa fast = rans_best_isa();
    double h = rans_entropy(src, n);
    printf("\n== %s: %zu bytes, order-0 entropy %.4f bits/byte (ideal ratio %.3f)\n", name, n, h,
           h > 0 ? 8.0 / h : INFINITY);

    double sec[MAX_RUNS];
    uint8_t *enc = NULL;
    size_t len = 0;
    RansSizes z;
    for (int r = 0; r <= o->runs; r++) {   /* run 0 untimed */
        mem_free(enc);
        double t0 = clock_seconds();
        if (rans_encode_alloc(src, n, &o->p, &enc, &len, &z, &e)) die("encode", &e);
        if (r) sec[r - 1] = clock_seconds() - t0;
    }
    Figure fe = figure(sec, o->runs, n);
    printf("rANS %d bits, %d states, %u-byte chunks (%llu): payload %.4f bits/byte (%+.2f%% vs entropy), "
           "header %zu bytes (table %zu, index %zu), ratio %.3f\n", o->p.bits, o->p.n_states, o->p.chunk_size,
           (unsigned long long)z.n_chunks, 8.0 * (double)z.payload / (double)n,
           h > 0 ? 100.0 * ((double)z.payload / (h * (double)n / 8.0) - 1.0) : 0.0, z.header, z.table, z.index,
           (double)n / (double)len);
    print_figure("encode", fe, o->runs);

    RansStream s;
    if (rans_open(&s, enc, len, &e)) die("open", &e);
    uint8_t *out = malloc(n ? n : 1);
    print_figure("decode plain", bench_decode(&s, out, src, RANS_PLAIN, WHOLE, 1, o->runs), o->runs);
    if (fast == RANS_AVX512) {
        print_figure("decode avx512", bench_decode(&s, out, src, fast, WHOLE, 1, o->runs), o->runs);
        print_figure("decode avx512, chunk by chunk", bench_decode(&s, out, src, fast, CHUNK_BY_CHUNK, 1, o->runs),
                     o->runs);
    }
    if (o->threads > 1) {
        char what[64];
        snprintf(what, sizeof what, "decode %s, %d threads", rans_isa_name(fast), o->threads);
        print_figure(what, bench_decode(&s, out, src, fast, WHOLE, o->threads, o->runs), o->runs);
    }
    rans_close(&s);
    mem_free(enc);
    free(out);
    if (o->zstd) {
        bench_zstd(src, n, 3, o->runs);
        bench_zstd(src, n, 19, o->runs);
    }
}

/* Decode speed and payload over N (at the chosen bits) and over bits (at N = 32). */
static void sweep(const uint8_t *src, size_t n, const Options *o) {
    RansIsa fast = rans_best_isa();
    double h = rans_entropy(src, n);
    printf("\n== sweep on the gauss set (%zu bytes, entropy %.4f), %u-byte chunks, median of %d\n", n, h,
           o->p.chunk_size, o->runs);
    printf("  bits  N   payload bits/byte  vs entropy   plain MB/s   %s MB/s\n", rans_isa_name(fast));
    uint8_t *out = malloc(n);
    for (int pass = 0; pass < 2; pass++) {
        int count = pass == 0 ? 6 : RANS_BITS_MAX - RANS_BITS_MIN + 1;
        for (int i = 0; i < count; i++) {
            RansParams p = o->p;
            if (pass == 0) p.n_states = 1 << i;
            else p.bits = RANS_BITS_MIN + i, p.n_states = 32;
            uint8_t *enc;
            size_t len;
            RansSizes z;
            Err e;
            if (rans_encode_alloc(src, n, &p, &enc, &len, &z, &e)) die("encode", &e);
            RansStream s;
            if (rans_open(&s, enc, len, &e)) die("open", &e);
            Figure fp = bench_decode(&s, out, src, RANS_PLAIN, WHOLE, 1, o->runs);
            Figure ff = bench_decode(&s, out, src, fast, WHOLE, 1, o->runs);
            printf("  %4d %2d   %17.4f  %+9.2f%%   %10.0f   %10.0f\n", p.bits, p.n_states,
                   8.0 * (double)z.payload / (double)n, 100.0 * ((double)z.payload / (h * (double)n / 8) - 1),
                   fp.median, ff.median);
            rans_close(&s);
            mem_free(enc);
        }
        if (pass == 0) printf("\n");
    }
    free(out);
}

/* ------------------------------------------------------------ main */

static void usage_to(FILE *f) {
    fprintf(f, "usage: rans_bench [--mib M] [--row R] [--file PATH] [--gguf PATH] [--bits B] [--states N]\n"
               "                  [--chunk BYTES] [--runs R] [--threads T] [--sweep] [--no-zstd]\n");
}
static void usage(void) {   /* a bad command line */
    usage_to(stderr);
    exit(2);
}

int main(int argc, char **argv) {
    Options o = {.mib = 16, .row = 4096, .p = rans_default_params(), .runs = 11, .threads = 1, .zstd = 1};
    Err e;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int iv = 0, ok = ST_OK;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage_to(stdout);
            return 0;
        }
        if (!strcmp(a, "--sweep")) { o.sweep = 1; continue; }
        if (!strcmp(a, "--no-zstd")) { o.zstd = 0; continue; }
        if (!v) usage();
        i++;
        if (!strcmp(a, "--mib")) o.mib = atof(v);
        else if (!strcmp(a, "--file")) o.file = v;
        else if (!strcmp(a, "--gguf")) o.gguf = v;
        else if (!strcmp(a, "--row")) ok = parse_int(a, v, 1, 1 << 20, &o.row, &e);
        else if (!strcmp(a, "--bits")) ok = parse_int(a, v, RANS_BITS_MIN, RANS_BITS_MAX, &o.p.bits, &e);
        else if (!strcmp(a, "--states")) ok = parse_int(a, v, 1, RANS_MAX_STATES, &o.p.n_states, &e);
        else if (!strcmp(a, "--chunk")) {
            ok = parse_int(a, v, 1, (int)RANS_CHUNK_MAX, &iv, &e);
            o.p.chunk_size = (uint32_t)iv;
        } else if (!strcmp(a, "--runs")) ok = parse_int(a, v, 1, MAX_RUNS, &o.runs, &e);
        else if (!strcmp(a, "--threads")) ok = parse_int(a, v, 1, 256, &o.threads, &e);
        else usage();
        if (ok) die("options", &e);
    }
    if (o.mib <= 0 || o.mib > 4096) usage();
    char cpu[128];
    cpu_name(cpu, sizeof cpu);
    printf("rans_bench: %s; fast decoder: %s; zstd %s\n", cpu, rans_isa_name(rans_best_isa()), ZSTD_versionString());
    memory_bandwidth(o.runs);

    size_t n = (size_t)(o.mib * 1048576.0);
    uint8_t *gauss = synthetic(n, o.row);
    char name[256];
    snprintf(name, sizeof name, "gauss (int8, one scale per %d values)", o.row);
    bench_set(name, gauss, n, &o);
    if (o.file) {
        size_t fn;
        uint8_t *f = read_file_bytes(o.file, &fn);
        if (!f) {
            fprintf(stderr, "rans_bench: cannot read %s\n", o.file);
            return 1;
        }
        bench_set(o.file, f, fn, &o);
        free(f);
    }
    if (o.gguf) {
        size_t gn;
        uint8_t *g = gguf_int8(o.gguf, &gn, &e);
        if (!g) die(o.gguf, &e);
        snprintf(name, sizeof name, "%s (int8 of its matrices)", o.gguf);
        bench_set(name, g, gn, &o);
        free(g);
    }
    if (o.sweep) sweep(gauss, n, &o);
    free(gauss);
    return 0;
}
