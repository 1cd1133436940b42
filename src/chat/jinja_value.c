/* jinja_value.c - the values a template computes with, as Python has them.
 *
 * Chat templates are Python programs in disguise: they were written against
 * jinja2, which hands every operation to Python. So a value here behaves as
 * the Python object would: an empty list is false, 1 == 1.0, "a" + 1 fails,
 * str(None) is "None", len() counts code points, and json.dumps spells
 * floats the way Python's repr does. What the evaluator needs of values is
 * in this file: the arena they live in, lists and dicts, truth, equality,
 * printing (str) and JSON (tojson).
 *
 * Strings carry their plain flags along: which bytes came from a caller's
 * plain string (a message's content). Every string operation keeps them on
 * the bytes it keeps, so the output knows, byte by byte, what the template
 * wrote and what the user did. */
#include "chat/jinja_internal.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the arena ---- */

struct JChunk {
    JChunk *next;
    size_t used, size;
    _Alignas(16) unsigned char data[];
};

void *ja_alloc(JArena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (a->over || n > a->cap - a->used || a->used > a->cap) {
        a->over = 1;
        return NULL;
    }
    JChunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t size = n > 60000 ? n : 60000;
        c = malloc(sizeof *c + size);
        if (!c) {
            a->over = 1;
            return NULL;
        }
        c->used = 0;
        c->size = size;
        c->next = a->head;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

char *ja_strndup(JArena *a, const char *s, size_t n) {
    char *d = ja_alloc(a, n + 1);
    if (d && n) memcpy(d, s, n);
    return d;
}

void ja_free(JArena *a) {
    while (a->head) {
        JChunk *next = a->head->next;
        free(a->head);
        a->head = next;
    }
    a->used = 0;
    a->over = 0;
}

/* ---- lists and dicts ---- */

JList *jv_list_new(JArena *a, size_t cap) {
    JList *l = ja_alloc(a, sizeof *l);
    if (!l) return NULL;
    if (cap && !(l->v = ja_alloc(a, cap * sizeof *l->v))) return NULL;
    l->cap = cap;
    return l;
}

int jv_list_push(JArena *a, JList *l, JVal x) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8;
        JVal *grown = ja_alloc(a, cap * sizeof *grown);
        if (!grown) return -1;
        if (l->n) memcpy(grown, l->v, l->n * sizeof *grown);
        l->v = grown;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return 0;
}

JDict *jv_dict_new(JArena *a, size_t cap) {
    JDict *d = ja_alloc(a, sizeof *d);
    if (!d) return NULL;
    if (cap && (!(d->keys = ja_alloc(a, cap * sizeof *d->keys)) || !(d->vals = ja_alloc(a, cap * sizeof *d->vals))))
        return NULL;
    d->cap = cap;
    return d;
}

const JVal *jv_dict_getv(const JDict *d, JVal key) {
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->keys[i], key)) return &d->vals[i];
    return NULL;
}

const JVal *jv_dict_get(const JDict *d, const char *key, size_t n) {
    for (size_t i = 0; i < d->n; i++)
        if (d->keys[i].k == JV_STR && d->keys[i].s.n == n && !memcmp(d->keys[i].s.p, key, n)) return &d->vals[i];
    return NULL;
}

/* Set key to val: in place if the key is there (keeping its order), else at the end. */
int jv_dict_set(JArena *a, JDict *d, JVal key, JVal val) {
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->keys[i], key)) {
            d->vals[i] = val;
            return 0;
        }
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 8;
        JVal *k = ja_alloc(a, cap * sizeof *k), *v = ja_alloc(a, cap * sizeof *v);
        if (!k || !v) return -1;
        if (d->n) {
            memcpy(k, d->keys, d->n * sizeof *k);
            memcpy(v, d->vals, d->n * sizeof *v);
        }
        d->keys = k;
        d->vals = v;
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n++] = val;
    return 0;
}

/* ---- truth, equality, names ---- */

int jv_truthy(JVal v) {
    switch (v.k) {
    case JV_UNDEF: case JV_NONE: return 0;
    case JV_BOOL: return v.b;
    case JV_INT: return v.i != 0;
    case JV_FLOAT: return v.f != 0;
    case JV_STR: return v.s.n != 0;
    case JV_LIST: return v.l->n != 0;
    case JV_DICT: return v.d->ns || v.d->n != 0;   /* a namespace object is always true */
    default: return 1;
    }
}

static int is_number(JVal v) { return v.k == JV_BOOL || v.k == JV_INT || v.k == JV_FLOAT; }
static double as_double(JVal v) { return v.k == JV_FLOAT ? v.f : v.k == JV_INT ? (double)v.i : v.b; }
static long long as_int(JVal v) { return v.k == JV_INT ? v.i : v.b; }

int jv_equal(JVal a, JVal b) {
    if (is_number(a) && is_number(b)) {
        if (a.k != JV_FLOAT && b.k != JV_FLOAT) return as_int(a) == as_int(b);
        return as_double(a) == as_double(b);
    }
    if (a.k != b.k) return 0;
    switch (a.k) {
    case JV_UNDEF: case JV_NONE: return 1;
    case JV_STR: return a.s.n == b.s.n && !memcmp(a.s.p, b.s.p, a.s.n);
    case JV_LIST:
        if (a.l->n != b.l->n) return 0;
        for (size_t i = 0; i < a.l->n; i++) if (!jv_equal(a.l->v[i], b.l->v[i])) return 0;
        return 1;
    case JV_DICT:
        if (a.d->ns || b.d->ns) return a.d == b.d;
        if (a.d->n != b.d->n) return 0;
        for (size_t i = 0; i < a.d->n; i++) {
            const JVal *o = jv_dict_getv(b.d, a.d->keys[i]);
            if (!o || !jv_equal(a.d->vals[i], *o)) return 0;
        }
        return 1;
    case JV_MACRO: return a.macro == b.macro;
    case JV_FUNC: return a.fn == b.fn;
    default: return 0;
    }
}

const char *jv_type_name(JVal v) {
    switch (v.k) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v.l->tuple ? "tuple" : "list";
    case JV_DICT: return v.d->ns ? "Namespace" : "dict";
    case JV_MACRO: return "Macro";
    case JV_FUNC: return "function";
    case JV_METHOD: return "builtin_function_or_method";
    }
    return "object";
}

/* Python's repr of a float: the shortest digits that read back the same,
 * in fixed notation from 1e-4 up to 1e16, else as 1e+16 / 1.5e-05. */
void jv_float_repr(double f, char out[40]) {
    if (isnan(f)) { strcpy(out, "nan"); return; }
    if (isinf(f)) { strcpy(out, f < 0 ? "-inf" : "inf"); return; }
    char digits[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(digits, sizeof digits, "%.*e", prec - 1, f);
        if (strtod(digits, NULL) == f) break;
    }
    /* digits is "[-]d.ddde[+-]xx": take the mantissa's digits and the exponent */
    const char *s = digits;
    int neg = *s == '-';
    if (neg) s++;
    char mant[24];
    int k = 0;
    for (; *s && *s != 'e'; s++) if (*s != '.') mant[k++] = *s;
    mant[k] = 0;
    int exp = atoi(s + 1);
    while (k > 1 && mant[k - 1] == '0') mant[--k] = 0;       /* 1.50e+00 -> 15 */
    char *o = out;
    if (neg) *o++ = '-';
    if (exp >= 16 || exp < -4) {
        *o++ = mant[0];
        if (k > 1) {
            *o++ = '.';
            memcpy(o, mant + 1, (size_t)k - 1);
            o += k - 1;
        }
        snprintf(o, (size_t)(out + 40 - o), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
        return;
    }
    if (exp < 0) {
        *o++ = '0';
        *o++ = '.';
        for (int z = 0; z < -exp - 1; z++) *o++ = '0';
        memcpy(o, mant, (size_t)k);
        o += k;
    } else {
        for (int d = 0; d <= exp; d++) *o++ = d < k ? mant[d] : '0';
        *o++ = '.';
        if (k > exp + 1) {
            memcpy(o, mant + exp + 1, (size_t)(k - exp - 1));
            o += k - exp - 1;
        } else {
            *o++ = '0';
        }
    }
    *o = 0;
}

/* ---- building strings ---- */

void jb_init(JBuf *b, JArena *a, size_t limit) { *b = (JBuf){.a = a, .limit = limit}; }

static int jb_room(JBuf *b, size_t n) {
    if (b->failed) return 0;
    if (n > b->limit || b->n > b->limit - n) {
        b->failed = 1;
        return 0;
    }
    if (b->n + n <= b->cap) return 1;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + n) cap *= 2;
    char *p = ja_alloc(b->a, cap + 1);
    unsigned char *plain = b->plain ? ja_alloc(b->a, cap) : NULL;
    if (!p || (b->plain && !plain)) {
        b->failed = 1;
        return 0;
    }
    if (b->n) memcpy(p, b->p, b->n);
    if (plain && b->n) memcpy(plain, b->plain, b->n);
    b->p = p;
    b->plain = plain;
    b->cap = cap;
    return 1;
}

void jb_add(JBuf *b, const char *s, size_t n, const unsigned char *plain) {
    if (!n || !jb_room(b, n)) return;
    if (plain && !b->plain) {
        if (!(b->plain = ja_alloc(b->a, b->cap))) {
            b->failed = 1;
            return;
        }
    }
    memcpy(b->p + b->n, s, n);
    if (b->plain) {
        if (plain) memcpy(b->plain + b->n, plain, n);
        else memset(b->plain + b->n, 0, n);
    }
    b->n += n;
    b->p[b->n] = 0;
}

void jb_addc(JBuf *b, const char *s) { jb_add(b, s, strlen(s), NULL); }

JVal jb_val(JBuf *b) {
    if (!b->p) return jv_str("", 0, NULL);
    return jv_str(b->p, b->n, b->plain);
}

/* Python's repr of a string: single quotes unless it holds one and no double. */
static void jb_repr_str(JBuf *b, JVal v) {
    int single = !memchr(v.s.p, '\'', v.s.n) || memchr(v.s.p, '"', v.s.n);
    char q = single ? '\'' : '"';
    jb_add(b, &q, 1, NULL);
    for (size_t i = 0; i < v.s.n; i++) {
        char c = v.s.p[i];
        char esc[8];
        if (c == '\\' || c == q) snprintf(esc, sizeof esc, "\\%c", c);
        else if (c == '\n') strcpy(esc, "\\n");
        else if (c == '\t') strcpy(esc, "\\t");
        else if (c == '\r') strcpy(esc, "\\r");
        else if ((unsigned char)c < 0x20 || c == 0x7f) snprintf(esc, sizeof esc, "\\x%02x", (unsigned char)c);
        else {
            jb_add(b, &c, 1, v.s.plain ? v.s.plain + i : NULL);
            continue;
        }
        jb_addc(b, esc);
    }
    jb_add(b, &q, 1, NULL);
}

/* repr(v): how a value prints inside a list or dict. */
static int jb_repr(JBuf *b, JVal v) {
    if (v.k == JV_STR) {
        jb_repr_str(b, v);
        return 0;
    }
    return jb_str(b, v);
}

int jb_str(JBuf *b, JVal v) {
    char num[40];
    switch (v.k) {
    case JV_UNDEF: return 0;
    case JV_NONE: jb_addc(b, "None"); return 0;
    case JV_BOOL: jb_addc(b, v.b ? "True" : "False"); return 0;
    case JV_INT: snprintf(num, sizeof num, "%lld", v.i); jb_addc(b, num); return 0;
    case JV_FLOAT: jv_float_repr(v.f, num); jb_addc(b, num); return 0;
    case JV_STR: jb_add(b, v.s.p, v.s.n, v.s.plain); return 0;
    case JV_LIST:
        jb_addc(b, v.l->tuple ? "(" : "[");
        for (size_t i = 0; i < v.l->n; i++) {
            if (i) jb_addc(b, ", ");
            jb_repr(b, v.l->v[i]);
        }
        jb_addc(b, v.l->tuple ? (v.l->n == 1 ? ",)" : ")") : "]");
        return 0;
    case JV_DICT:
        if (v.d->ns) jb_addc(b, "<Namespace {");
        else jb_addc(b, "{");
        for (size_t i = 0; i < v.d->n; i++) {
            if (i) jb_addc(b, ", ");
            jb_repr(b, v.d->keys[i]);
            jb_addc(b, ": ");
            jb_repr(b, v.d->vals[i]);
        }
        jb_addc(b, v.d->ns ? "}>" : "}");
        return 0;
    case JV_MACRO: jb_addc(b, "<Macro>"); return 0;
    case JV_FUNC: case JV_METHOD: jb_addc(b, "<function>"); return 0;
    }
    return 0;
}

/* ---- JSON, as Python's json.dumps writes it ---- */

static void jb_json_str(JBuf *b, const char *s, size_t n, const unsigned char *plain, int ensure_ascii) {
    jb_addc(b, "\"");
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        const unsigned char *fl = plain ? plain + i : NULL;
        char esc[16];
        size_t len = 1;
        if (c == '"') strcpy(esc, "\\\"");
        else if (c == '\\') strcpy(esc, "\\\\");
        else if (c == '\n') strcpy(esc, "\\n");
        else if (c == '\r') strcpy(esc, "\\r");
        else if (c == '\t') strcpy(esc, "\\t");
        else if (c == '\b') strcpy(esc, "\\b");
        else if (c == '\f') strcpy(esc, "\\f");
        else if (c < 0x20 || (ensure_ascii && c == 0x7f)) snprintf(esc, sizeof esc, "\\u%04x", c);
        else if (c >= 0x80 && ensure_ascii) {
            /* decode one character; outside the BMP it is a surrogate pair */
            unsigned cp = c;
            int more = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
            cp &= more == 3 ? 0x07 : more == 2 ? 0x0F : more == 1 ? 0x1F : 0xFF;
            for (int k = 1; k <= more && i + (size_t)k < n; k++) cp = cp << 6 | ((unsigned char)s[i + (size_t)k] & 0x3F);
            len = (size_t)more + 1;
            if (i + len > n) len = n - i;
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else {
                snprintf(esc, sizeof esc, "\\u%04x", cp);
            }
        } else {
            jb_add(b, s + i, 1, fl);
            i++;
            continue;
        }
        /* an escape of a plain byte stays plain: it is still the user's text */
        size_t at = b->n;
        jb_add(b, esc, strlen(esc), NULL);
        if (fl && fl[0] && b->plain && !b->failed) memset(b->plain + at, 1, b->n - at);
        i += len;
    }
    jb_addc(b, "\"");
}

static void jb_newline(JBuf *b, const JJsonOpts *o, int depth) {
    jb_addc(b, "\n");
    for (int k = 0; k < o->indent * depth; k++) jb_addc(b, " ");
}

/* The order a dict's keys print in: as they came, or sorted (sort_keys). */
static int key_order(JArena *a, const JDict *d, int sorted, size_t **out) {
    size_t *ix = ja_alloc(a, (d->n + 1) * sizeof *ix);
    if (!ix) return -1;
    for (size_t i = 0; i < d->n; i++) ix[i] = i;
    for (size_t i = 1; sorted && i < d->n; i++)           /* insertion sort: stable, dicts are small */
        for (size_t j = i; j > 0; j--) {
            JVal x = d->keys[ix[j - 1]], y = d->keys[ix[j]];
            size_t m = x.s.n < y.s.n ? x.s.n : y.s.n;
            int c = x.k == JV_STR && y.k == JV_STR ? memcmp(x.s.p, y.s.p, m) : 0;
            if (c > 0 || (c == 0 && x.k == JV_STR && y.k == JV_STR && x.s.n > y.s.n)) {
                size_t t = ix[j]; ix[j] = ix[j - 1]; ix[j - 1] = t;
            } else {
                break;
            }
        }
    *out = ix;
    return 0;
}

int jb_json(JBuf *b, JVal v, const JJsonOpts *o, int depth, JVal *bad) {
    char num[40];
    if (depth > 100) {
        *bad = v;
        return -1;
    }
    switch (v.k) {
    case JV_NONE: jb_addc(b, "null"); return 0;
    case JV_BOOL: jb_addc(b, v.b ? "true" : "false"); return 0;
    case JV_INT: snprintf(num, sizeof num, "%lld", v.i); jb_addc(b, num); return 0;
    case JV_FLOAT:
        if (isnan(v.f)) jb_addc(b, "NaN");
        else if (isinf(v.f)) jb_addc(b, v.f < 0 ? "-Infinity" : "Infinity");
        else { jv_float_repr(v.f, num); jb_addc(b, num); }
        return 0;
    case JV_STR: jb_json_str(b, v.s.p, v.s.n, v.s.plain, o->ensure_ascii); return 0;
    case JV_LIST:
        jb_addc(b, "[");
        for (size_t i = 0; i < v.l->n; i++) {
            if (i) jb_addc(b, o->item_sep);
            if (o->indent >= 0) jb_newline(b, o, depth + 1);
            if (jb_json(b, v.l->v[i], o, depth + 1, bad)) return -1;
        }
        if (o->indent >= 0 && v.l->n) jb_newline(b, o, depth);
        jb_addc(b, "]");
        return 0;
    case JV_DICT: {
        if (v.d->ns) break;
        size_t *ix;
        if (key_order(b->a, v.d, o->sort_keys, &ix)) {
            b->failed = 1;
            return 0;
        }
        jb_addc(b, "{");
        for (size_t i = 0; i < v.d->n; i++) {
            JVal k = v.d->keys[ix[i]];
            if (i) jb_addc(b, o->item_sep);
            if (o->indent >= 0) jb_newline(b, o, depth + 1);
            if (k.k == JV_STR) {
                jb_json_str(b, k.s.p, k.s.n, k.s.plain, o->ensure_ascii);
            } else if (k.k == JV_INT || k.k == JV_FLOAT || k.k == JV_BOOL || k.k == JV_NONE) {
                jb_addc(b, "\"");
                if (k.k == JV_BOOL) jb_addc(b, k.b ? "true" : "false");
                else if (k.k == JV_NONE) jb_addc(b, "null");
                else jb_json(b, k, o, depth + 1, bad);
                jb_addc(b, "\"");
            } else {
                *bad = k;
                return -1;
            }
            jb_addc(b, o->key_sep);
            if (jb_json(b, v.d->vals[ix[i]], o, depth + 1, bad)) return -1;
        }
        if (o->indent >= 0 && v.d->n) jb_newline(b, o, depth);
        jb_addc(b, "}");
        return 0;
    }
    default: break;
    }
    *bad = v;
    return -1;
}

/* ---- UTF-8 ---- */

static size_t char_len(const char *s, size_t n) {
    unsigned char c = (unsigned char)s[0];
    size_t k = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return k > n ? n : k;
}

size_t ju_offset(const char *s, size_t n, size_t i) {
    size_t at = 0;
    for (; i > 0 && at < n; i--) at += char_len(s + at, n - at);
    return at;
}

size_t ju_count(const char *s, size_t n) {
    size_t k = 0;
    for (size_t at = 0; at < n; k++) at += char_len(s + at, n - at);
    return k;
}

/* The code point at s (k bytes long). */
static unsigned decode(const char *s, size_t k) {
    unsigned c = (unsigned char)s[0];
    if (k == 1) return c;
    unsigned cp = c & (k == 2 ? 0x1F : k == 3 ? 0x0F : 0x07);
    for (size_t j = 1; j < k; j++) cp = cp << 6 | ((unsigned char)s[j] & 0x3F);
    return cp;
}

/* Python's str.isspace for one code point. */
static int is_space(unsigned cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

size_t ju_lspace(const char *s, size_t n) {
    size_t at = 0;
    while (at < n) {
        size_t k = char_len(s + at, n - at);
        if (!is_space(decode(s + at, k))) break;
        at += k;
    }
    return at;
}

size_t ju_rspace(const char *s, size_t n) {
    size_t end = n;
    while (end > 0) {
        size_t start = end - 1;
        while (start > 0 && ((unsigned char)s[start] & 0xC0) == 0x80 && end - start < 4) start--;
        size_t k = end - start;
        if (char_len(s + start, k) != k || !is_space(decode(s + start, k))) break;
        end = start;
    }
    return n - end;
}
