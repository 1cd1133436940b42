/* utf8_ref.h - well-formed UTF-8, byte by byte (Unicode's table 3-7): the
 * tests' own reference, written apart from src/base/utf8.h so that the
 * engine's rules are checked against an independent reading of the table.
 * Shared by tests/test_server.c and tests/fuzz/fuzz_request.c. */
#ifndef UTF8_REF_H
#define UTF8_REF_H
#include <stddef.h>

static inline int valid_utf8(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        size_t need = c < 0x80 ? 1 : c >= 0xC2 && c < 0xE0 ? 2 : c >= 0xE0 && c < 0xF0 ? 3 : c >= 0xF0 && c < 0xF5 ? 4 : 0;
        if (!need || i + need > n) return 0;
        for (size_t k = 1; k < need; k++) {
            unsigned lo = 0x80, hi = 0xBF;
            if (k == 1 && c == 0xE0) lo = 0xA0;
            if (k == 1 && c == 0xED) hi = 0x9F;
            if (k == 1 && c == 0xF0) lo = 0x90;
            if (k == 1 && c == 0xF4) hi = 0x8F;
            if (p[i + k] < lo || p[i + k] > hi) return 0;
        }
        i += need;
    }
    return 1;
}

#endif
