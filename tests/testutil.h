/* testutil.h - helpers shared by the cmocka suites.
 *
 * Golden data lives in ../shared/fixtures (override with FIXTURES=dir). A
 * user's clone may not have it: then tests that need it are skipped, loudly.
 * Under CI (CI=true) a missing fixture is a failure, never a skip. */
#ifndef TESTUTIL_H
#define TESTUTIL_H
#include <setjmp.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "kernels/ops.h"

/* The kernel paths this CPU runs, from the least to the best: plain (when
 * `plain` is 1), generic, then AVX2 and AVX-512 where the CPU has them. So a
 * test of every path covers the AVX2 kernels on an AVX-512 machine too.
 * Returns how many were written to out (at most 4). */
static inline int cpu_isas(OpsIsa out[4], int plain) {
    int n = 0;
    OpsIsa got;
    Err e;
    if (plain) out[n++] = OPS_PLAIN;
    out[n++] = OPS_GENERIC;
    if (ops_parse_isa("avx2", &got, &e) == ST_OK) out[n++] = OPS_AVX2;
    if (ops_parse_isa("avx512", &got, &e) == ST_OK) out[n++] = OPS_AVX512;
    return n;
}

/* cmocka's integer asserts print both sides in hexadecimal ("0x1 != 0");
 * these print them in decimal, with the expressions, where the test failed. */
#undef assert_int_equal
#undef assert_int_not_equal
#define assert_int_equal(a, b) int_check_((long long)(a), (long long)(b), 1, #a, #b, __FILE__, __LINE__)
#define assert_int_not_equal(a, b) int_check_((long long)(a), (long long)(b), 0, #a, #b, __FILE__, __LINE__)
static inline void int_check_(long long a, long long b, int equal, const char *ea, const char *eb, const char *file,
                              int line) {
    if ((a == b) == equal) return;
    print_error("ERROR: %lld %s %lld: %s %s %s\n", a, equal ? "!=" : "==", b, ea, equal ? "==" : "!=", eb);
    _fail(file, line);
}

/* Every test binary runs all its tests, or, given an argument, only those it
 * names (cmocka's filter: '*' and '?' match anything):
 *     build/asan/test_kv_paged 'kv_prefix_*'
 * tools/exercise.sh runs the tests that judge an exercise one at a time so. */
static inline void select_tests(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]);
}

/* Full path of rel under the directory named by the environment variable
 * env (default dflt) into buf, or NULL after a skip (or a failure under CI)
 * when the file is absent. `what` names it in the message. */
static inline const char *shared_path(char *buf, size_t cap, const char *env, const char *dflt,
                                      const char *rel, const char *what) {
    const char *dir = getenv(env);
    if (!dir || !*dir) dir = dflt;
    snprintf(buf, cap, "%s/%s", dir, rel);
    if (access(buf, R_OK) == 0) return buf;
    const char *ci = getenv("CI");
    if (ci && strcmp(ci, "true") == 0) {
        print_error("%s %s is missing, and under CI that is a failure\n", what, buf);
        fail();
    }
    print_message("[  SKIP    ] %s %s not found (no ../shared here)\n", what, buf);
    skip();
    return NULL;
}

/* A golden-data file from ../shared/fixtures (FIXTURES=dir overrides). */
static inline const char *fixture(char *buf, size_t cap, const char *rel) {
    return shared_path(buf, cap, "FIXTURES", "../shared/fixtures", rel, "fixture");
}

/* The training corpus in ../shared/corpus (CORPUS_DIR=dir overrides). */
static inline const char *corpus_file(char *buf, size_t cap) {
    return shared_path(buf, cap, "CORPUS_DIR", "../shared/corpus", "tinyshakespeare.txt", "corpus");
}

/* Read a whole file into malloc'd memory; NULL if it cannot. */
static inline void *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf) buf[n] = 0;
    fclose(f);
    if (size) *size = (size_t)n;
    return buf;
}

/* Write bytes to a fresh temporary file; returns its path in buf. */
static inline const char *write_temp(char *buf, size_t cap, const void *data, size_t n) {
    snprintf(buf, cap, "/tmp/llm-test-XXXXXX");
    int fd = mkstemp(buf);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, n), (ssize_t)n);
    close(fd);
    return buf;
}

/* The chi-square statistic's critical value for df degrees of freedom at
 * the significance whose standard normal quantile is z (z = 3.0902: 0.001,
 * one-sided), by Wilson and Hilferty's cube-root approximation (within a
 * percent for df >= 3). */
static inline double chi_square_critical(int df, double z) {
    double a = 2.0 / (9.0 * df), c = 1.0 - a + z * sqrt(a);
    return df * c * c * c;
}

#endif
