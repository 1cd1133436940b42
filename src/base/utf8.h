/* utf8.h - Unicode's well-formed UTF-8 (table 3-7 of the standard), byte by
 * byte: what the tokenizer holds text to, and what the server makes an
 * error message into before it goes out as JSON. Leaves: no allocation. */
#ifndef UTF8_H
#define UTF8_H
#include <stddef.h>

/* Length of the UTF-8 sequence that byte b starts: 1..4, or 0 when b cannot
 * start one (a continuation byte 80..BF, or C0, C1, F5..FF, which would only
 * start overlong or out-of-range sequences). */
static inline int utf8_seq_len(unsigned char b) {
    if (b < 0x80) return 1;
    if (b < 0xC2) return 0;
    if (b < 0xE0) return 2;
    if (b < 0xF0) return 3;
    if (b < 0xF5) return 4;
    return 0;
}

/* How many of the n bytes at p (n >= 1) form a valid beginning of one
 * character. It equals utf8_seq_len(p[0]) for a whole character; it is
 * smaller when the bytes run out (n is short) or when a byte breaks the
 * sequence. The second byte's range is narrower after E0, ED, F0, F4: that
 * rules out overlong forms, UTF-16 surrogates and code points past U+10FFFF.
 * These are Unicode's well-formed sequences, exactly what PCRE2 accepts as
 * UTF-8. */
static inline int utf8_valid_prefix(const unsigned char *p, size_t n) {
    int need = utf8_seq_len(p[0]);
    if (need == 0) return 0;
    int k = 1;
    for (; k < need && (size_t)k < n; k++) {
        unsigned char lo = 0x80, hi = 0xBF;
        if (k == 1) {
            if (p[0] == 0xE0) lo = 0xA0;
            if (p[0] == 0xED) hi = 0x9F;
            if (p[0] == 0xF0) lo = 0x90;
            if (p[0] == 0xF4) hi = 0x8F;
        }
        if (p[k] < lo || p[k] > hi) break;
    }
    return k;
}

/* Length of the whole, valid character at p (n >= 1 bytes available), or 0. */
static inline int utf8_char_len(const unsigned char *p, size_t n) {
    int need = utf8_seq_len(p[0]);
    return need > 0 && utf8_valid_prefix(p, n) == need ? need : 0;
}

#endif
