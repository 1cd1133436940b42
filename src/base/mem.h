/* mem.h - the one allocation seam of the engine.
 *
 * Every heap allocation in src/ goes through mem_alloc / mem_free, so a test can
 * count bytes and calls, find leaks (live count back to zero) and inject
 * failures (fail the N-th allocation) without touching the code under test.
 * Counters are process-wide, updated atomically: any thread may allocate. */
#ifndef MEM_H
#define MEM_H
#include <stddef.h>

void *mem_alloc(size_t bytes);               /* zeroed; NULL on failure (or injected failure) */
void *mem_realloc(void *p, size_t bytes);    /* like realloc; new tail is not zeroed */
void  mem_free(void *p);                     /* accepts NULL */
char *mem_strdup(const char *s);

typedef struct {
    size_t live_bytes;     /* bytes allocated and not yet freed */
    size_t peak_bytes;     /* high-water mark of live_bytes */
    size_t live_count;     /* blocks allocated and not yet freed */
    size_t total_count;    /* every successful allocation since start */
} MemStats;

MemStats mem_stats(void);
/* Make the n-th allocation from now fail (n = 1: the next one). 0 disarms. */
void mem_fail_after(long n);

/* Ask the kernel to back [p, p + n) with huge pages (Linux's transparent
 * huge pages, MADV_HUGEPAGE) before its pages are first touched: a matrix
 * read from end to end each step then crosses a page every 2 MiB rather than
 * every 4 KiB. Advice only: where huge pages are off, or the pages were
 * touched already, nothing changes. Returns 1 if the advice was taken. */
int mem_advise_huge(void *p, size_t n);

/* Bytes of [p, p + n) resident in physical memory (mincore, page by page):
 * how much of a mapped file has really been read. 0 if it cannot tell. */
size_t mem_resident_bytes(const void *p, size_t n);

#endif
