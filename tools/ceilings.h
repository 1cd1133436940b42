/* ceilings.h - the best this CPU gives, for the benchmarks to measure against.
 *
 * A percentage is only honest against a ceiling nothing can beat. The read
 * ceiling here is not the engine's own read loop but the best of several,
 * each a different way to stream memory:
 *
 *   plain      one 64-bit add per word (what the compiler makes of a loop)
 *   wide       AVX-512, eight 64-byte loads a step into eight accumulators
 *   prefetch   wide, each line asked for 1 KiB ahead (the engine's habit)
 *   far        wide, each line asked for 4 KiB ahead
 *   streams    wide over two halves of the buffer at once (two streams for
 *              the prefetchers to follow)
 *   quarters   the same over the four quarters of each 4 MiB of it in turn
 *              (four streams: on an AMD Zen 3 core, the most a single core
 *              read, and how the float rows decode there)
 *   rows       four streams 4 KiB apart, a 4 KiB stretch of each at a time,
 *              the next four stretches asked for into L2 (as decoding reads
 *              four rows side by side: on a Xeon Emerald Rapids core this
 *              beat every loop above)
 *
 * On a CPU without AVX-512 but with AVX2 (an AMD Zen 2 or Zen 3) the wide
 * loops are the same with 32-byte loads, sixteen a step.
 *
 * and the peaks of the instructions that do a product's work, one core:
 *
 *   fma        AVX-512 vfmadd on 16 independent accumulators: 2 x 16 flops
 *              each (AVX2: 10 accumulators, 2 x 8)
 *   vnni       AVX-512 VNNI vpdpbusd on 16 accumulators: 64 u8 x s8 products
 *              and their sums into 16 int32, 128 operations each. Without
 *              VNNI, on AVX2, vpmaddubsw, the instruction that multiplies
 *              (32 u8 x s8 products and their sums in pairs, 64 operations),
 *              alone; a kernel also adds its results and widens them to
 *              int32 (vpaddw, vpmaddwd: ours one vpmaddwd for four
 *              vpmaddubsw), so none quite reaches it
 *   amx        where the CPU has AMX (Intel since Sapphire Rapids): tdpbssd
 *              on 4 tiles of 16 x 16 int32, 16 x 16 x 64 s8 x s8 products
 *              and sums each, 32768 operations; llama.cpp's batched
 *              quantized products use it there, and so do the engine's
 *              from 16 tokens (src/kernels/tiles_amx.c), so its peak is the
 *              ceiling of int8 work on such a CPU
 *
 * Each read is the median of CEIL_RUNS runs after one untimed run, each
 * peak the best of them: an instruction's chains take the same cycles every
 * run, so a slower run is only the machine taking the core away (a virtual
 * machine's other guests), and a median of runs disturbed that way once put
 * two threads' FMA peak at half of it. With several threads each thread
 * reads its own part of the buffer (or runs its own chain), all at once.
 * The CPU kind (vendor, family, model: cpuid) is printed beside them, since
 * figures of another kind do not compare. */
#ifndef CEILINGS_H
#define CEILINGS_H
#include "base/clock.h"
#include "bench_util.h"
#include <cpuid.h>
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { CEIL_RUNS = 5, CEIL_READS = 7 };
static const char *const CEIL_READ_NAMES[CEIL_READS] = {"plain", "wide", "prefetch", "far", "streams", "rows", "quarters"};

/* "GenuineIntel family 6 model 207" (cpuid leaves 0 and 1, with the
 * extended family and model folded in as the vendors document). */
static inline void cpu_kind(char *buf, size_t cap) {
    unsigned a, b, c, d;
    char vendor[13] = "unknown";
    if (!__get_cpuid(0, &a, &b, &c, &d)) {
        snprintf(buf, cap, "unknown CPU kind");
        return;
    }
    memcpy(vendor, &b, 4);
    memcpy(vendor + 4, &d, 4);
    memcpy(vendor + 8, &c, 4);
    vendor[12] = 0;
    __get_cpuid(1, &a, &b, &c, &d);
    unsigned family = (a >> 8) & 0xf, model = (a >> 4) & 0xf;
    if (family == 0xf) family += (a >> 20) & 0xff;
    if (family == 0x6 || family >= 0xf) model += ((a >> 16) & 0xf) << 4;
    snprintf(buf, cap, "%s family %u model %u", vendor, family, model);
}

static inline int ceil_has_avx512(void) { return __builtin_cpu_supports("avx512f"); }
static inline int ceil_has_vnni(void) { return __builtin_cpu_supports("avx512vnni"); }
static inline int ceil_has_avx2(void) { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

#define CEIL_AVX512 __attribute__((target("avx512f")))
#define CEIL_AVX2 __attribute__((target("avx2,fma")))
#define CEIL_AMX __attribute__((target("amx-tile,amx-int8")))
#define CEIL_VNNI __attribute__((target("avx512f,avx512vnni")))

/* One pass of read loop `which` over bytes at p (a multiple of 16 KiB); the
 * sum is returned so that no load can be dropped. */
static inline uint64_t read_plain(const uint8_t *p, size_t bytes) {
    const uint64_t *w = (const uint64_t *)p;
    uint64_t s = 0;
    for (size_t i = 0; i < bytes / 8; i++) s += w[i];
    return s;
}

CEIL_AVX512 static inline uint64_t read_wide(const uint8_t *p, size_t bytes, size_t ahead) {
    __m512i a[8];
    for (int v = 0; v < 8; v++) a[v] = _mm512_setzero_si512();
    for (size_t i = 0; i < bytes; i += 512) {
        if (ahead)
            for (int v = 0; v < 8; v++) _mm_prefetch((const char *)(p + i + ahead + 64 * v), _MM_HINT_T0);
        for (int v = 0; v < 8; v++) a[v] = _mm512_add_epi64(a[v], _mm512_loadu_si512(p + i + 64 * v));
    }
    for (int v = 1; v < 8; v++) a[0] = _mm512_add_epi64(a[0], a[v]);
    uint64_t lanes[8], s = 0;
    _mm512_storeu_si512(lanes, a[0]);
    for (int l = 0; l < 8; l++) s += lanes[l];
    return s;
}

CEIL_AVX512 static inline uint64_t read_two_streams(const uint8_t *p, size_t bytes) {
    const uint8_t *q = p + bytes / 2;
    __m512i a[8];
    for (int v = 0; v < 8; v++) a[v] = _mm512_setzero_si512();
    for (size_t i = 0; i < bytes / 2; i += 256) {
        for (int v = 0; v < 4; v++) a[v] = _mm512_add_epi64(a[v], _mm512_loadu_si512(p + i + 64 * v));
        for (int v = 0; v < 4; v++) a[4 + v] = _mm512_add_epi64(a[4 + v], _mm512_loadu_si512(q + i + 64 * v));
    }
    for (int v = 1; v < 8; v++) a[0] = _mm512_add_epi64(a[0], a[v]);
    uint64_t lanes[8], s = 0;
    _mm512_storeu_si512(lanes, a[0]);
    for (int l = 0; l < 8; l++) s += lanes[l];
    return s;
}

/* Four streams over each window of QUARTER_WINDOW bytes in turn, one a
 * quarter of it: quarter q read from QUARTER_SKEW q bytes in, round to its
 * start, so that the streams are not a power of two apart (quarters of the
 * whole 1 GiB exactly 256 MiB apart read 8.6 GB/s on one Zen 3 core, where
 * the rows of a matrix a quarter of its height apart, 11 MiB, read at
 * 15.9; skewed, the whole buffer's quarters still read 15.0 where the
 * kernel read 16.0, and a window's 16.2, as the kernel). */
enum { QUARTER_SKEW = 3 * 4096 + 640, QUARTER_WINDOW = 4 << 20 };
static inline size_t quarter_at(size_t quarter, int q, size_t i) {
    size_t at = i + (size_t)q * QUARTER_SKEW % quarter;
    return (size_t)q * quarter + (at >= quarter ? at - quarter : at);
}

CEIL_AVX512 static inline uint64_t read_four_streams(const uint8_t *p, size_t bytes) {
    __m512i a[8];
    for (int v = 0; v < 8; v++) a[v] = _mm512_setzero_si512();
    for (size_t at = 0; at < bytes; at += QUARTER_WINDOW) {
        size_t quarter = (bytes - at < QUARTER_WINDOW ? bytes - at : QUARTER_WINDOW) / 4;
        for (size_t i = 0; i < quarter; i += 128)
            for (int q = 0; q < 4; q++)
                for (int v = 0; v < 2; v++)
                    a[2 * q + v] =
                        _mm512_add_epi64(a[2 * q + v], _mm512_loadu_si512(p + at + quarter_at(quarter, q, i) + 64 * v));
    }
    for (int v = 1; v < 8; v++) a[0] = _mm512_add_epi64(a[0], a[v]);
    uint64_t lanes[8], s = 0;
    _mm512_storeu_si512(lanes, a[0]);
    for (int l = 0; l < 8; l++) s += lanes[l];
    return s;
}

/* The 128 bytes at r of each of the next four rows of `row` bytes, into L2. */
static inline void ask_next_four_rows(const uint8_t *r, size_t row) {
    for (int v = 0; v < 4; v++) {
        _mm_prefetch((const char *)(r + (4 + v) * row), _MM_HINT_T1);
        _mm_prefetch((const char *)(r + (4 + v) * row + 64), _MM_HINT_T1);
    }
}

/* Four rows of 4 KiB side by side, 64 bytes of each a step (bytes a
 * multiple of 16 KiB). */
CEIL_AVX512 static inline uint64_t read_four_rows(const uint8_t *p, size_t bytes) {
    enum { ROW = 4096 };
    __m512i a[8];
    for (int v = 0; v < 8; v++) a[v] = _mm512_setzero_si512();
    for (size_t g = 0; g < bytes; g += 4 * ROW) {
        const uint8_t *r = p + g;
        for (size_t i = 0; i < ROW; i += 128) {
            ask_next_four_rows(r + i, ROW);
            for (int v = 0; v < 4; v++) {
                a[v] = _mm512_add_epi64(a[v], _mm512_loadu_si512(r + v * ROW + i));
                a[4 + v] = _mm512_add_epi64(a[4 + v], _mm512_loadu_si512(r + v * ROW + i + 64));
            }
        }
    }
    for (int v = 1; v < 8; v++) a[0] = _mm512_add_epi64(a[0], a[v]);
    uint64_t lanes[8], s = 0;
    _mm512_storeu_si512(lanes, a[0]);
    for (int l = 0; l < 8; l++) s += lanes[l];
    return s;
}

/* The same three on AVX2: sixteen 32-byte loads a step. */
CEIL_AVX2 static inline uint64_t avx2_sum(const __m256i a[16]) {
    __m256i t = a[0];
    for (int v = 1; v < 16; v++) t = _mm256_add_epi64(t, a[v]);
    uint64_t lanes[4];
    _mm256_storeu_si256((__m256i *)lanes, t);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

CEIL_AVX2 static inline uint64_t read_wide_avx2(const uint8_t *p, size_t bytes, size_t ahead) {
    __m256i a[16];
    for (int v = 0; v < 16; v++) a[v] = _mm256_setzero_si256();
    for (size_t i = 0; i < bytes; i += 512) {
        if (ahead)
            for (int v = 0; v < 8; v++) _mm_prefetch((const char *)(p + i + ahead + 64 * v), _MM_HINT_T0);
        for (int v = 0; v < 16; v++) a[v] = _mm256_add_epi64(a[v], _mm256_loadu_si256((const __m256i *)(p + i + 32 * v)));
    }
    return avx2_sum(a);
}

CEIL_AVX2 static inline uint64_t read_two_streams_avx2(const uint8_t *p, size_t bytes) {
    const uint8_t *q = p + bytes / 2;
    __m256i a[16];
    for (int v = 0; v < 16; v++) a[v] = _mm256_setzero_si256();
    for (size_t i = 0; i < bytes / 2; i += 256) {
        for (int v = 0; v < 8; v++) a[v] = _mm256_add_epi64(a[v], _mm256_loadu_si256((const __m256i *)(p + i + 32 * v)));
        for (int v = 0; v < 8; v++)
            a[8 + v] = _mm256_add_epi64(a[8 + v], _mm256_loadu_si256((const __m256i *)(q + i + 32 * v)));
    }
    return avx2_sum(a);
}

CEIL_AVX2 static inline uint64_t read_four_streams_avx2(const uint8_t *p, size_t bytes) {
    __m256i a[16];
    for (int v = 0; v < 16; v++) a[v] = _mm256_setzero_si256();
    for (size_t at = 0; at < bytes; at += QUARTER_WINDOW) {
        size_t quarter = (bytes - at < QUARTER_WINDOW ? bytes - at : QUARTER_WINDOW) / 4;
        for (size_t i = 0; i < quarter; i += 128)
            for (int q = 0; q < 4; q++)
                for (int v = 0; v < 4; v++)
                    a[4 * q + v] = _mm256_add_epi64(
                        a[4 * q + v], _mm256_loadu_si256((const __m256i *)(p + at + quarter_at(quarter, q, i) + 32 * v)));
    }
    return avx2_sum(a);
}

CEIL_AVX2 static inline uint64_t read_four_rows_avx2(const uint8_t *p, size_t bytes) {
    enum { ROW = 4096 };
    __m256i a[16];
    for (int v = 0; v < 16; v++) a[v] = _mm256_setzero_si256();
    for (size_t g = 0; g < bytes; g += 4 * ROW) {
        const uint8_t *r = p + g;
        for (size_t i = 0; i < ROW; i += 128) {
            ask_next_four_rows(r + i, ROW);
            for (int v = 0; v < 4; v++)
                for (int k = 0; k < 4; k++)
                    a[4 * v + k] = _mm256_add_epi64(a[4 * v + k],
                                                    _mm256_loadu_si256((const __m256i *)(r + v * ROW + i + 32 * k)));
        }
    }
    return avx2_sum(a);
}

static inline uint64_t read_once(int which, const uint8_t *p, size_t bytes) {
    if (which > 0 && !ceil_has_avx512() && ceil_has_avx2()) {
        switch (which) {
        case 1: return read_wide_avx2(p, bytes, 0);
        case 2: return read_wide_avx2(p, bytes, 1024);
        case 3: return read_wide_avx2(p, bytes, 4096);
        case 4: return read_two_streams_avx2(p, bytes);
        case 5: return read_four_rows_avx2(p, bytes);
        default: return read_four_streams_avx2(p, bytes);
        }
    }
    if (which > 0 && !ceil_has_avx512()) return read_plain(p, bytes);
    switch (which) {
    case 1: return read_wide(p, bytes, 0);
    case 2: return read_wide(p, bytes, 1024);
    case 3: return read_wide(p, bytes, 4096);
    case 4: return read_two_streams(p, bytes);
    case 5: return read_four_rows(p, bytes);
    case 6: return read_four_streams(p, bytes);
    default: return read_plain(p, bytes);
    }
}

/* GB/s of read loop `which` on `threads` threads over bytes at buf (far
 * larger than the last-level cache; each thread reads a whole number of
 * 16 KiB of it). */
static inline double ceil_read_gbs(int which, const uint8_t *buf, size_t bytes, int threads, uint64_t *sink) {
    double gbs[CEIL_RUNS];
    size_t per = bytes / (size_t)threads / 16384 * 16384;
    for (int r = -1; r < CEIL_RUNS; r++) {
        uint64_t s = 0;
        double t0 = clock_seconds();
#pragma omp parallel for num_threads(threads) reduction(+ : s) schedule(static)
        for (int i = 0; i < threads; i++) s += read_once(which, buf + per * (size_t)i, per);
        double t = clock_seconds() - t0;
        *sink += s;
        if (r >= 0) gbs[r] = (double)per * threads / t * 1e-9;
    }
    qsort(gbs, CEIL_RUNS, sizeof *gbs, cmp_double);
    return gbs[CEIL_RUNS / 2];
}

/* The best read of every loop: its GB/s, and the loop's index in *which. */
static inline double ceil_read_best(const uint8_t *buf, size_t bytes, int threads, int *which, double each[CEIL_READS],
                             uint64_t *sink) {
    double best = 0.0;
    for (int w = 0; w < CEIL_READS; w++) {
        each[w] = ceil_read_gbs(w, buf, bytes, threads, sink);
        if (each[w] > best) {
            best = each[w];
            *which = w;
        }
    }
    return best;
}

/* n steps of 16 independent FMA chains: 2 * 16 * 16 flops a step. */
CEIL_AVX512 static inline float fma_chains(long n) {
    __m512 a[16], x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
    for (int v = 0; v < 16; v++) a[v] = _mm512_set1_ps((float)v);
    for (long i = 0; i < n; i++)
        for (int v = 0; v < 16; v++) a[v] = _mm512_fmadd_ps(a[v], x, y);
    for (int v = 1; v < 16; v++) a[0] = _mm512_add_ps(a[0], a[v]);
    return _mm512_reduce_add_ps(a[0]);
}

/* The same on AVX2 with 10 chains (16 registers, not 32; ten cover the FMA
 * latency times two a cycle): 2 * 10 * 8 flops a step. */
enum { CEIL_FMA_CHAINS_AVX2 = 10, CEIL_INT8_CHAINS_AVX2 = 10 };
CEIL_AVX2 static inline float fma_chains_avx2(long n) {
    __m256 a[CEIL_FMA_CHAINS_AVX2], x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
    for (int v = 0; v < CEIL_FMA_CHAINS_AVX2; v++) a[v] = _mm256_set1_ps((float)v);
    for (long i = 0; i < n; i++)
        for (int v = 0; v < CEIL_FMA_CHAINS_AVX2; v++) a[v] = _mm256_fmadd_ps(a[v], x, y);
    for (int v = 1; v < CEIL_FMA_CHAINS_AVX2; v++) a[0] = _mm256_add_ps(a[0], a[v]);
    float lanes[8], s = 0.0f;
    _mm256_storeu_ps(lanes, a[0]);
    for (int l = 0; l < 8; l++) s += lanes[l];
    return s;
}

/* AVX2's int8 products: CEIL_INT8_CHAINS_AVX2 (10) chains of vpmaddubsw, each
 * taking its own last result as its signed bytes against one register of
 * unsigned ones: 64 operations a link (32 products, 32 sums); a sink, not a
 * value. Ten chains cover its latency (3 cycles on Zen 3, 5 on Intel) at
 * two a cycle. */
CEIL_AVX2 static inline int int8_chains_avx2(long n) {
    __m256i x = _mm256_set1_epi8(3), a0 = _mm256_set1_epi8(-1), a1 = _mm256_set1_epi8(-2), a2 = _mm256_set1_epi8(-3),
            a3 = _mm256_set1_epi8(-4), a4 = _mm256_set1_epi8(-5), a5 = _mm256_set1_epi8(-6), a6 = _mm256_set1_epi8(-7),
            a7 = _mm256_set1_epi8(-8), a8 = _mm256_set1_epi8(-9), a9 = _mm256_set1_epi8(-10);
    /* in asm: GCC 12 at -O3 rotated some of the chains through memory at
     * every step (named variables or not), and they ran at half speed */
    for (long i = 0; i < n; i++)
        __asm__("vpmaddubsw %0, %10, %0\n\tvpmaddubsw %1, %10, %1\n\tvpmaddubsw %2, %10, %2\n\t"
                "vpmaddubsw %3, %10, %3\n\tvpmaddubsw %4, %10, %4\n\tvpmaddubsw %5, %10, %5\n\t"
                "vpmaddubsw %6, %10, %6\n\tvpmaddubsw %7, %10, %7\n\tvpmaddubsw %8, %10, %8\n\t"
                "vpmaddubsw %9, %10, %9"
                : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(a6), "+x"(a7), "+x"(a8), "+x"(a9)
                : "x"(x));
    __m256i t = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)),
                                 _mm256_add_epi32(_mm256_add_epi32(a4, a5), _mm256_add_epi32(a6, a7)));
    t = _mm256_add_epi32(t, _mm256_add_epi32(a8, a9));
    uint32_t lanes[8], s = 0;
    _mm256_storeu_si256((__m256i *)lanes, t);
    for (int l = 0; l < 8; l++) s += lanes[l];
    return (int)(s & 0x7fffffff);
}

/* The same products as a dot product must use them on AVX2: each
 * vpmaddubsw's sixteen pair sums added into one of eight int16 sums by a
 * vpaddw, the least work an int8 dot product does per product there (VNNI's
 * vpdpbusd does both in one instruction). 64 operations a pair, as above. */
CEIL_AVX2 static inline int int8_dot_chains_avx2(long n) {
    __m256i x = _mm256_set1_epi8(3), y = _mm256_set1_epi8(-1), a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0,
            a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (long i = 0; i < n; i++)
        __asm__("vpmaddubsw %9, %8, %%ymm12\n\tvpaddw %%ymm12, %0, %0\n\tvpmaddubsw %9, %8, %%ymm13\n\tvpaddw %%ymm13, %1, %1\n\t"
                "vpmaddubsw %9, %8, %%ymm14\n\tvpaddw %%ymm14, %2, %2\n\tvpmaddubsw %9, %8, %%ymm15\n\tvpaddw %%ymm15, %3, %3\n\t"
                "vpmaddubsw %9, %8, %%ymm12\n\tvpaddw %%ymm12, %4, %4\n\tvpmaddubsw %9, %8, %%ymm13\n\tvpaddw %%ymm13, %5, %5\n\t"
                "vpmaddubsw %9, %8, %%ymm14\n\tvpaddw %%ymm14, %6, %6\n\tvpmaddubsw %9, %8, %%ymm15\n\tvpaddw %%ymm15, %7, %7"
                : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(a6), "+x"(a7)
                : "x"(x), "x"(y)
                : "xmm12", "xmm13", "xmm14", "xmm15");
    __m256i t = _mm256_add_epi16(_mm256_add_epi16(_mm256_add_epi16(a0, a1), _mm256_add_epi16(a2, a3)),
                                 _mm256_add_epi16(_mm256_add_epi16(a4, a5), _mm256_add_epi16(a6, a7)));
    uint32_t lanes[8], s = 0;
    _mm256_storeu_si256((__m256i *)lanes, t);
    for (int l = 0; l < 8; l++) s += lanes[l];
    return (int)(s & 0x7fffffff);
}

/* n steps of 16 independent vpdpbusd chains: 16 x 128 operations a step. */
CEIL_VNNI static inline int vnni_chains(long n) {
    __m512i a[16], x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(-2);
    for (int v = 0; v < 16; v++) a[v] = _mm512_set1_epi32(v);
    for (long i = 0; i < n; i++)
        for (int v = 0; v < 16; v++) a[v] = _mm512_dpbusd_epi32(a[v], x, y);
    for (int v = 1; v < 16; v++) a[0] = _mm512_add_epi32(a[0], a[v]);   /* wraps: a sink, not a value */
    uint32_t lanes[16], s = 0;
    _mm512_storeu_si512(lanes, a[0]);
    for (int l = 0; l < 16; l++) s += lanes[l];   /* unsigned: no overflow to be undefined */
    return (int)(s & 0x7fffffff);
}

/* AMX: the CPU says it has tiles and int8 products (cpuid leaf 7: EDX bits
 * 24 and 25), and Linux lets this process use the tile registers (they are
 * off until asked for: arch_prctl ARCH_REQ_XCOMP_PERM, XTILEDATA). */
static inline int ceil_has_amx(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d >> 24 & 1) || !(d >> 25 & 1)) return 0;
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
}

/* n steps of tdpbssd into 4 tiles of int32 from two tiles of A and two of
 * B (16 rows of 64 bytes each): 4 x 16 x 16 x 64 x 2 operations a step. */
CEIL_AMX static inline int amx_chains(long n) {
    struct __attribute__((packed)) {
        uint8_t palette, start_row, reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
    } cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    static int8_t ones[16 * 64];
    memset(ones, 1, sizeof ones);
    int32_t c[16 * 16];
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, ones, 64);
    _tile_loadd(5, ones, 64);
    _tile_loadd(6, ones, 64);
    _tile_loadd(7, ones, 64);
    for (long i = 0; i < n; i++) {
        _tile_dpbssd(0, 4, 6);
        _tile_dpbssd(1, 4, 7);
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
    }
    _tile_stored(0, c, 64);
    _tile_release();
    return c[0];
}

/* GFLOP/s (kind 0, FMA) or GOP/s (1, VNNI; 2, AMX; 3, AVX2's int8 with
 * its adds) of all threads together, each running its own chains; 0 where
 * the CPU lacks the instruction. */
static inline double ceil_peak(int kind, int threads, uint64_t *sink) {
    int avx2 = !ceil_has_avx512() && ceil_has_avx2() && kind != 2;   /* the AVX2 forms of FMA and int8 */
    if (kind == 3 && !avx2) return 0.0;   /* int8 with its adds: AVX2 only */
    if (!avx2 && (kind == 2 ? !ceil_has_amx() : kind ? !ceil_has_vnni() : !ceil_has_avx512())) return 0.0;
    const long steps = kind == 2 ? 100 * 1000 : 20 * 1000 * 1000;
    const double ops = kind == 2 ? 4.0 * 16 * 16 * 64 * 2
                       : kind == 3 ? 8 * 64.0
                       : kind      ? (avx2 ? CEIL_INT8_CHAINS_AVX2 * 64.0 : 16.0 * 128.0)
                                   : (avx2 ? CEIL_FMA_CHAINS_AVX2 * 16.0 : 16.0 * 32.0);
    double best = 0.0;
    for (int r = -1; r < CEIL_RUNS; r++) {
        uint64_t s = 0;
        double t0 = clock_seconds();
#pragma omp parallel for num_threads(threads) reduction(+ : s) schedule(static)
        for (int i = 0; i < threads; i++)
            s += kind == 2 ? (uint64_t)amx_chains(steps)
                 : kind == 3 ? (uint64_t)int8_dot_chains_avx2(steps)
                 : kind     ? (uint64_t)(avx2 ? int8_chains_avx2(steps) : vnni_chains(steps))
                            : (uint64_t)(avx2 ? fma_chains_avx2(steps) : fma_chains(steps));
        double t = clock_seconds() - t0;
        *sink += s;
        double rate = ops * (double)steps * threads / t * 1e-9;
        if (r >= 0 && rate > best) best = rate;   /* the best run (above) */
    }
    return best;
}

#endif
