/* json_nul.c - see json_nul.h. */
#include "front/json_nul.h"
#include <stdio.h>
#include <string.h>

int json_escaped_nul(const char *text, size_t len, char *key, size_t cap) {
    const char *end = text + len;
    int depth = 0;
    snprintf(key, cap, "?");
    for (const char *p = text; p < end && *p; p++) {
        if (*p == '{' || *p == '[') depth++;
        else if (*p == '}' || *p == ']') depth--;
        if (*p != '"') continue;
        const char *s = ++p;   /* a string: find its end, noting a \u0000 */
        int nul = 0;
        while (p < end && *p && *p != '"') {
            if (*p != '\\') { p++; continue; }
            if (end - p >= 6 && p[1] == 'u' && strncmp(p + 2, "0000", 4) == 0) nul = 1;
            p += end - p >= 2 && p[1] ? 2 : 1;   /* past the backslash and its letter; hex digits are plain */
        }
        const char *after = p < end ? p + 1 : end;
        while (after < end && (*after == ' ' || *after == '\t' || *after == '\r' || *after == '\n')) after++;
        int is_key = after < end && *after == ':';
        if (is_key && depth == 1) snprintf(key, cap, "%.*s", (int)(p - s), s);
        if (nul) return is_key ? 2 : 1;
        if (p >= end || !*p) break;
    }
    return 0;
}
