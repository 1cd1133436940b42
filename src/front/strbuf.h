/* strbuf.h - a growing string, malloc'd (not mem_alloc: the HTTP threads
 * use it too, and mem.h's counters belong to the engine's thread). Out of
 * memory leaves it marked failed; buf_take then returns NULL. */
#ifndef STRBUF_H
#define STRBUF_H
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *s;
    size_t len, cap;
    int failed;               /* an allocation failed: the result is NULL */
} Buf;

/* Room for n more bytes and the terminator; 0 when it cannot be had. */
static inline int buf_room(Buf *b, size_t n) {
    if (b->failed) return 0;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *grown = realloc(b->s, cap);
        if (!grown) {
            b->failed = 1;
            return 0;
        }
        b->s = grown;
        b->cap = cap;
    }
    return 1;
}

static inline void buf_add(Buf *b, const char *s, size_t n) {
    if (!buf_room(b, n)) return;
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static inline void buf_str(Buf *b, const char *s) { buf_add(b, s, strlen(s)); }

static inline void buf_printf(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Whatever its length: measured first, then printed in place (a chat turn
 * of any size goes through here whole). */
static inline void buf_printf(Buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = 1;
        return;
    }
    if (!buf_room(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* The string, handed over (NULL if an allocation failed). */
static inline char *buf_take(Buf *b) {
    if (b->failed || !b->s) {
        free(b->s);
        if (b->failed) return NULL;
        char *empty = malloc(1);
        if (empty) empty[0] = 0;
        return empty;
    }
    return b->s;
}

#endif
