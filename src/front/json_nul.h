/* json_nul.h - finding \u0000 in JSON text.
 *
 * cJSON decodes the escape \u0000 to a NUL, and its strings are C strings
 * that end there: "a\u0000b" would reach the runtime as the prompt "a",
 * without a word. So the readers of JSON (workload files, the server's
 * request bodies) look for the escape in the raw text, and refuse it. */
#ifndef JSON_NUL_H
#define JSON_NUL_H
#include <stddef.h>

/* In text[0 .. len) (valid JSON: cJSON has just parsed it): 0 if no string
 * holds \u0000, 1 if a value does (*key is then the top-level field it
 * belongs to, "?" if none), 2 if a key does. */
int json_escaped_nul(const char *text, size_t len, char *key, size_t cap);

#endif
