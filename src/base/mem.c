/* mem.c - counting allocator (see mem.h).
 *
 * Each block carries a 16-byte header holding its size, so mem_free can keep
 * live_bytes exact without the caller passing the size back. The counters
 * are updated with atomic operations: the server's HTTP threads tokenize
 * (POST /tokenize) while the engine thread runs. */
#include "base/mem.h"
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct { size_t size; size_t pad; } Header;   /* 16 bytes keeps malloc's alignment */

static MemStats g_stats;
static long g_fail_countdown;   /* > 0: fail when it reaches 0 */

static int should_fail(void) {
    if (__atomic_load_n(&g_fail_countdown, __ATOMIC_RELAXED) <= 0) return 0;
    return __atomic_sub_fetch(&g_fail_countdown, 1, __ATOMIC_RELAXED) == 0;
}

/* live_bytes += add - sub, and the peak raised to it. */
static void count(size_t add, size_t sub) {
    size_t live = __atomic_add_fetch(&g_stats.live_bytes, add - sub, __ATOMIC_RELAXED);
    size_t peak = __atomic_load_n(&g_stats.peak_bytes, __ATOMIC_RELAXED);
    while (live > peak && !__atomic_compare_exchange_n(&g_stats.peak_bytes, &peak, live, 1, __ATOMIC_RELAXED,
                                                       __ATOMIC_RELAXED)) {
    }
}

void *mem_alloc(size_t bytes) {
    if (should_fail() || bytes > (size_t)-1 - sizeof(Header)) return NULL;
    Header *h = calloc(1, sizeof(Header) + bytes);
    if (!h) return NULL;
    h->size = bytes;
    __atomic_add_fetch(&g_stats.live_count, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&g_stats.total_count, 1, __ATOMIC_RELAXED);
    count(bytes, 0);
    return h + 1;
}

void *mem_realloc(void *p, size_t bytes) {
    if (!p) return mem_alloc(bytes);
    if (should_fail() || bytes > (size_t)-1 - sizeof(Header)) return NULL;
    Header *old = (Header *)p - 1;
    size_t old_size = old->size;
    Header *h = realloc(old, sizeof(Header) + bytes);
    if (!h) return NULL;
    h->size = bytes;
    __atomic_add_fetch(&g_stats.total_count, 1, __ATOMIC_RELAXED);
    count(bytes, old_size);
    return h + 1;
}

void mem_free(void *p) {
    if (!p) return;
    Header *h = (Header *)p - 1;
    __atomic_sub_fetch(&g_stats.live_bytes, h->size, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&g_stats.live_count, 1, __ATOMIC_RELAXED);
    free(h);
}

char *mem_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = mem_alloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

MemStats mem_stats(void) {
    MemStats s;
    s.live_bytes = __atomic_load_n(&g_stats.live_bytes, __ATOMIC_RELAXED);
    s.peak_bytes = __atomic_load_n(&g_stats.peak_bytes, __ATOMIC_RELAXED);
    s.live_count = __atomic_load_n(&g_stats.live_count, __ATOMIC_RELAXED);
    s.total_count = __atomic_load_n(&g_stats.total_count, __ATOMIC_RELAXED);
    return s;
}

void mem_fail_after(long n) { __atomic_store_n(&g_fail_countdown, n, __ATOMIC_RELAXED); }

int mem_advise_huge(void *p, size_t n) {
#ifdef MADV_HUGEPAGE
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), lo = ((uintptr_t)p + page - 1) / page * page,
              hi = ((uintptr_t)p + n) / page * page;
    return p && hi > lo && madvise((void *)lo, hi - lo, MADV_HUGEPAGE) == 0;
#else
    (void)p, (void)n;
    return 0;
#endif
}

size_t mem_resident_bytes(const void *p, size_t n) {
    if (!p || n == 0) return 0;
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)p & ~(uintptr_t)(page - 1);
    size_t len = (uintptr_t)p + n - start, pages = (len + page - 1) / page, resident = 0;
    unsigned char vec[4096];
    for (size_t i = 0; i < pages; i += sizeof vec) {
        size_t k = pages - i < sizeof vec ? pages - i : sizeof vec;
        if (mincore((void *)(start + i * page), k * page, vec)) return 0;
        for (size_t j = 0; j < k; j++) resident += vec[j] & 1;
    }
    return resident * page;
}
