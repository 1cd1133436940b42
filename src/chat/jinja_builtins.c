/* jinja_builtins.c - what the operators, filters, tests, methods and global
 * functions do: each the way Python (and jinja2 on top of it) does it,
 * down to the cases templates lean on:
 *  - obj.name looks for an attribute (a method) first, then the key;
 *    obj['name'] the key first. A dict's method name wins for '.': m.items
 *    is the method, m['items'] the key. What is found nowhere is undefined,
 *    not an error; using an undefined value further is.
 *  - HF's sandbox is immutable: list.append, dict.pop and the other
 *    methods that change an object are undefined ("unsafe") and fail when
 *    called.
 *  - Strings index, slice and count by code point, strip Unicode
 *    whitespace, and split() without a separator drops empty pieces.
 *  - tojson is HF's json.dumps(ensure_ascii=False, ...), not jinja2's own
 *    (which escapes < > & ' for HTML).
 * Only what chat templates use is here; anything else is refused by name,
 * so a template that needs more says what. */
#include "chat/jinja_internal.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int nomem(JCtx *c) { return jinja_fail(c, "the template went over its memory limit (%zu bytes)", c->lim->max_memory); }

/* A string that could not be built: over the output limit, or out of memory. */
static int buf_fail(JCtx *c) {
    if (c->a->over) return nomem(c);
    return jinja_fail(c, "a string went over the output limit (%zu bytes)", c->lim->max_output);
}

static JVal list_val(JList *l) {
    JVal v = {.k = JV_LIST};
    v.l = l;
    return v;
}
static JVal dict_val(JDict *d) {
    JVal v = {.k = JV_DICT};
    v.d = d;
    return v;
}

/* The argument named name, or at position pos, or NULL. */
static const JVal *arg(const JArgs *a, int pos, const char *name) {
    for (int k = 0; k < a->n_kw; k++) if (!strcmp(a->kw_names[k], name)) return &a->kw[k];
    return pos >= 0 && pos < a->n_pos ? &a->pos[pos] : NULL;
}

static int undefined_fail(JCtx *c, JVal v) {
    if (v.undef && !strncmp(v.undef, "access to", 9)) return jinja_fail(c, "%s", v.undef);
    if (v.undef) return jinja_fail(c, "'%s' is undefined", v.undef);
    return jinja_fail(c, "a value is undefined");
}

static int want_str(JCtx *c, const JVal *v, const char *what) {
    if (v && v->k == JV_STR) return 0;
    return jinja_fail(c, "%s must be a string, not %s", what, v ? jv_type_name(*v) : "nothing");
}

static JVal sub(JVal s, size_t a, size_t b) { return jv_str(s.s.p + a, b - a, s.s.plain ? s.s.plain + a : NULL); }

static int find(JVal h, size_t from, const char *needle, size_t n) {
    if (n == 0) return (int)from;
    for (size_t i = from; i + n <= h.s.n; i++)
        if (!memcmp(h.s.p + i, needle, n)) return (int)i;
    return -1;
}

/* ---- iteration and length ---- */

int jinja_iter(JCtx *c, JVal v, JList **out) {
    JList *l;
    switch (v.k) {
    case JV_UNDEF:
        if (!(*out = jv_list_new(c->a, 0))) return nomem(c);
        return 0;
    case JV_LIST:
        *out = v.l;
        return 0;
    case JV_DICT:
        if (v.d->ns) break;
        if (!(l = jv_list_new(c->a, v.d->n))) return nomem(c);
        for (size_t i = 0; i < v.d->n; i++) jv_list_push(c->a, l, v.d->keys[i]);
        *out = l;
        return 0;
    case JV_STR:
        if (!(l = jv_list_new(c->a, v.s.n))) return nomem(c);
        for (size_t at = 0; at < v.s.n;) {
            size_t next = at + ju_offset(v.s.p + at, v.s.n - at, 1);
            if (jv_list_push(c->a, l, sub(v, at, next))) return nomem(c);
            at = next;
        }
        *out = l;
        return 0;
    default:
        break;
    }
    return jinja_fail(c, "'%s' object is not iterable", jv_type_name(v));
}

int jinja_len(JCtx *c, JVal v, long long *out) {
    switch (v.k) {
    case JV_UNDEF: *out = 0; return 0;
    case JV_STR: *out = (long long)ju_count(v.s.p, v.s.n); return 0;
    case JV_LIST: *out = (long long)v.l->n; return 0;
    case JV_DICT: if (!v.d->ns) { *out = (long long)v.d->n; return 0; } break;
    default: break;
    }
    return jinja_fail(c, "object of type '%s' has no len()", jv_type_name(v));
}

/* ---- operators ---- */

static int is_num(JVal v) { return v.k == JV_INT || v.k == JV_FLOAT || v.k == JV_BOOL; }
static double dbl(JVal v) { return v.k == JV_FLOAT ? v.f : v.k == JV_INT ? (double)v.i : v.b; }
static long long lng(JVal v) { return v.k == JV_INT ? v.i : v.b; }

static int concat(JCtx *c, JVal x, JVal y, JVal *out) {
    JBuf b;
    jb_init(&b, c->a, c->lim->max_output);
    jb_str(&b, x);
    jb_str(&b, y);
    if (b.failed) return buf_fail(c);
    *out = jb_val(&b);
    return 0;
}

static int arith(JCtx *c, char op, JVal x, JVal y, JVal *out) {
    if (x.k != JV_FLOAT && y.k != JV_FLOAT) {
        long long a = lng(x), b = lng(y), r = 0;
        int over = 0;
        switch (op) {
        case '+': over = __builtin_add_overflow(a, b, &r); break;
        case '-': over = __builtin_sub_overflow(a, b, &r); break;
        case '*': over = __builtin_mul_overflow(a, b, &r); break;
        case '/':
            if (b == 0) return jinja_fail(c, "division by zero");
            *out = jv_float((double)a / (double)b);
            return 0;
        case 'f': case '%':                                   /* floor division, modulo: Python's signs */
            if (b == 0) return jinja_fail(c, "integer division or modulo by zero");
            if (a == (-9223372036854775807LL - 1) && b == -1) return jinja_fail(c, "integer overflow");
            r = op == 'f' ? a / b : a % b;
            if (op == 'f' && (a % b != 0) && ((a < 0) != (b < 0))) r--;
            if (op == '%' && r != 0 && ((r < 0) != (b < 0))) r += b;
            break;
        case 'p':
            if (b < 0) {
                *out = jv_float(pow((double)a, (double)b));
                return 0;
            }
            r = 1;
            for (long long k = 0; k < b && !over; k++) over = __builtin_mul_overflow(r, a, &r);
            break;
        }
        if (over) return jinja_fail(c, "integer overflow");
        *out = jv_int(r);
        return 0;
    }
    double a = dbl(x), b = dbl(y), r = 0;
    switch (op) {
    case '+': r = a + b; break;
    case '-': r = a - b; break;
    case '*': r = a * b; break;
    case '/': case 'f': case '%':
        if (b == 0) return jinja_fail(c, "float division by zero");
        r = op == '/' ? a / b : op == 'f' ? floor(a / b) : a - floor(a / b) * b;
        break;
    case 'p': r = pow(a, b); break;
    }
    *out = jv_float(r);
    return 0;
}

static int repeat(JCtx *c, JVal s, long long k, JVal *out) {
    if (s.k == JV_STR) {
        JBuf b;
        jb_init(&b, c->a, c->lim->max_output);
        for (long long i = 0; i < k && !b.failed; i++) jb_add(&b, s.s.p, s.s.n, s.s.plain);
        if (b.failed) return buf_fail(c);
        *out = jb_val(&b);
        return 0;
    }
    JList *l = jv_list_new(c->a, 0);
    if (!l) return nomem(c);
    l->tuple = s.l->tuple;
    for (long long i = 0; i < k; i++)
        for (size_t j = 0; j < s.l->n; j++)
            if (jv_list_push(c->a, l, s.l->v[j])) return nomem(c);
    *out = list_val(l);
    return 0;
}

/* <, <=, >, >=: -2 when the two cannot be ordered. */
static int order(JVal x, JVal y) {
    if (is_num(x) && is_num(y)) {
        if (x.k != JV_FLOAT && y.k != JV_FLOAT) return lng(x) < lng(y) ? -1 : lng(x) > lng(y);
        return dbl(x) < dbl(y) ? -1 : dbl(x) > dbl(y);
    }
    if (x.k == JV_STR && y.k == JV_STR) {
        size_t m = x.s.n < y.s.n ? x.s.n : y.s.n;
        int r = memcmp(x.s.p, y.s.p, m);
        if (r) return r < 0 ? -1 : 1;
        return x.s.n < y.s.n ? -1 : x.s.n > y.s.n;
    }
    if (x.k == JV_LIST && y.k == JV_LIST) {
        for (size_t i = 0; i < x.l->n && i < y.l->n; i++) {
            if (jv_equal(x.l->v[i], y.l->v[i])) continue;
            return order(x.l->v[i], y.l->v[i]);
        }
        return x.l->n < y.l->n ? -1 : x.l->n > y.l->n;
    }
    return -2;
}

static int contains(JCtx *c, JVal x, JVal y, int *out) {
    switch (y.k) {
    case JV_STR:
        if (x.k != JV_STR) return jinja_fail(c, "'in <string>' requires string as left operand, not %s", jv_type_name(x));
        *out = find(y, 0, x.s.p, x.s.n) >= 0;
        return 0;
    case JV_LIST:
        *out = 0;
        for (size_t i = 0; i < y.l->n && !*out; i++) *out = jv_equal(x, y.l->v[i]);
        return 0;
    case JV_DICT:
        *out = jv_dict_getv(y.d, x) != NULL;
        return 0;
    case JV_UNDEF:
        *out = 0;
        return 0;
    default:
        return jinja_fail(c, "argument of type '%s' is not iterable", jv_type_name(y));
    }
}

int jinja_binop(JCtx *c, const char *op, JVal x, JVal y, JVal *out) {
    if (!strcmp(op, "~")) return concat(c, x, y, out);
    if (!strcmp(op, "==") || !strcmp(op, "!=")) {
        *out = jv_bool(jv_equal(x, y) == (op[0] == '='));
        return 0;
    }
    if (!strcmp(op, "in") || !strcmp(op, "not in")) {
        int r;
        if (contains(c, x, y, &r)) return -1;
        *out = jv_bool(op[0] == 'i' ? r : !r);
        return 0;
    }
    if (x.k == JV_UNDEF) return undefined_fail(c, x);
    if (y.k == JV_UNDEF) return undefined_fail(c, y);
    if (op[0] == '<' || op[0] == '>') {
        int r = order(x, y);
        if (r == -2)
            return jinja_fail(c, "'%s' not supported between instances of '%s' and '%s'", op, jv_type_name(x),
                              jv_type_name(y));
        *out = jv_bool(op[0] == '<' ? (op[1] ? r <= 0 : r < 0) : (op[1] ? r >= 0 : r > 0));
        return 0;
    }
    char code = !strcmp(op, "//") ? 'f' : !strcmp(op, "**") ? 'p' : op[0];
    if (is_num(x) && is_num(y)) return arith(c, code, x, y, out);
    if (code == '+' && x.k == JV_STR && y.k == JV_STR) return concat(c, x, y, out);
    if (code == '+' && x.k == JV_LIST && y.k == JV_LIST) {
        JList *l = jv_list_new(c->a, x.l->n + y.l->n);
        if (!l) return nomem(c);
        l->tuple = x.l->tuple;
        for (size_t i = 0; i < x.l->n; i++) jv_list_push(c->a, l, x.l->v[i]);
        for (size_t i = 0; i < y.l->n; i++) jv_list_push(c->a, l, y.l->v[i]);
        *out = list_val(l);
        return 0;
    }
    if (code == '*' && (x.k == JV_STR || x.k == JV_LIST) && (y.k == JV_INT || y.k == JV_BOOL))
        return repeat(c, x, lng(y), out);
    if (code == '*' && (y.k == JV_STR || y.k == JV_LIST) && (x.k == JV_INT || x.k == JV_BOOL))
        return repeat(c, y, lng(x), out);
    if (code == '+' && x.k == JV_STR)
        return jinja_fail(c, "can only concatenate str (not \"%s\") to str", jv_type_name(y));
    return jinja_fail(c, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(x), jv_type_name(y));
}

/* ---- attributes and items ---- */

static const char *const str_methods[] = {"strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith",
                                          "replace", "lower", "upper", "title", "capitalize", "format", "find",
                                          "rfind", "count", "join", "isdigit", "isalpha", "isspace", "splitlines",
                                          NULL};
static const char *const dict_methods[] = {"items", "keys", "values", "get", "copy", NULL};
static const char *const dict_mutators[] = {"pop", "popitem", "update", "clear", "setdefault", NULL};
static const char *const list_methods[] = {"index", "count", "copy", NULL};
static const char *const list_mutators[] = {"append", "pop", "extend", "insert", "remove", "reverse", "sort",
                                            "clear", NULL};

static int in_list(const char *const *names, const char *name) {
    for (int k = 0; names[k]; k++) if (!strcmp(names[k], name)) return 1;
    return 0;
}

/* The method self.name as a value, or 0 when self's type has none by that name. */
static int method(JCtx *c, JVal self, const char *name, JVal *out, int *found) {
    const char *const *ok = self.k == JV_STR ? str_methods : self.k == JV_LIST ? list_methods
                          : self.k == JV_DICT && !self.d->ns ? dict_methods : NULL;
    const char *const *unsafe = self.k == JV_LIST ? list_mutators : self.k == JV_DICT && !self.d->ns ? dict_mutators : NULL;
    *found = 0;
    if (unsafe && in_list(unsafe, name)) {
        /* HF's immutable sandbox: undefined, and an error once called */
        char msg[96];
        snprintf(msg, sizeof msg, "access to attribute '%s' of '%s' object is unsafe.", name, jv_type_name(self));
        *out = jv_undef(ja_strndup(c->a, msg, strlen(msg)));
        *found = 1;
        return 0;
    }
    if (!ok || !in_list(ok, name)) return 0;
    JMethod *m = ja_alloc(c->a, sizeof *m);
    if (!m) return nomem(c);
    m->self = self;
    m->name = name;
    *out = (JVal){.k = JV_METHOD};
    out->m = m;
    *found = 1;
    return 0;
}

int jinja_getattr(JCtx *c, JVal obj, const char *name, JVal *out) {
    int found;
    if (method(c, obj, name, out, &found)) return -1;
    if (found) return 0;
    if (obj.k == JV_DICT) {
        const JVal *v = jv_dict_get(obj.d, name, strlen(name));
        *out = v ? *v : jv_undef(name);
        return 0;
    }
    *out = jv_undef(name);
    return 0;
}

int jinja_getitem(JCtx *c, JVal obj, JVal key, JVal *out) {
    if (obj.k == JV_DICT && !obj.d->ns) {
        const JVal *v = jv_dict_getv(obj.d, key);
        if (v) {
            *out = *v;
            return 0;
        }
    } else if ((obj.k == JV_LIST || obj.k == JV_STR) && (key.k == JV_INT || key.k == JV_BOOL)) {
        long long i = lng(key);
        long long n = obj.k == JV_LIST ? (long long)obj.l->n : (long long)ju_count(obj.s.p, obj.s.n);
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
            if (obj.k == JV_LIST) {
                *out = obj.l->v[i];
            } else {
                size_t a = ju_offset(obj.s.p, obj.s.n, (size_t)i);
                *out = sub(obj, a, a + ju_offset(obj.s.p + a, obj.s.n - a, 1));
            }
            return 0;
        }
    }
    if (key.k == JV_STR) {
        char *name = ja_strndup(c->a, key.s.p, key.s.n);
        if (!name) return nomem(c);
        if (obj.k == JV_DICT && obj.d->ns) {
            const JVal *v = jv_dict_get(obj.d, key.s.p, key.s.n);
            *out = v ? *v : jv_undef(name);
            return 0;
        }
        int found;
        if (method(c, obj, name, out, &found)) return -1;
        if (found) return 0;
        *out = jv_undef(name);
        return 0;
    }
    *out = jv_undef(NULL);
    return 0;
}

/* ---- string methods ---- */

/* Is the code point at s (k bytes) one of chars (a string of code points)? */
static int in_chars(const char *s, size_t k, JVal chars) {
    for (size_t at = 0; at < chars.s.n;) {
        size_t ck = ju_offset(chars.s.p + at, chars.s.n - at, 1);
        if (ck == k && !memcmp(chars.s.p + at, s, k)) return 1;
        at += ck;
    }
    return 0;
}

/* strip, lstrip, rstrip: whitespace, or the code points of chars. */
static JVal strip(JVal s, int left, int right, const JVal *chars) {
    size_t a = 0, b = s.s.n;
    if (!chars || chars->k == JV_NONE) {
        if (left) a = ju_lspace(s.s.p, s.s.n);
        if (right && a < b) b -= ju_rspace(s.s.p + a, b - a);
        return sub(s, a, b);
    }
    while (left && a < b) {
        size_t k = ju_offset(s.s.p + a, b - a, 1);
        if (!in_chars(s.s.p + a, k, *chars)) break;
        a += k;
    }
    while (right && b > a) {
        size_t st = b - 1;
        while (st > a && ((unsigned char)s.s.p[st] & 0xC0) == 0x80) st--;
        if (!in_chars(s.s.p + st, b - st, *chars)) break;
        b = st;
    }
    return sub(s, a, b);
}

static int split(JCtx *c, JVal s, const JVal *sep, long long maxsplit, JVal *out) {
    JList *l = jv_list_new(c->a, 4);
    if (!l) return nomem(c);
    if (!sep || sep->k == JV_NONE) {                 /* runs of whitespace; no empty pieces */
        size_t at = 0;
        for (;;) {
            at += ju_lspace(s.s.p + at, s.s.n - at);
            if (at >= s.s.n) break;
            size_t end = at;
            if (maxsplit >= 0 && (long long)l->n >= maxsplit) {
                end = s.s.n - ju_rspace(s.s.p + at, s.s.n - at);
            } else {
                while (end < s.s.n && ju_lspace(s.s.p + end, s.s.n - end) == 0)
                    end += ju_offset(s.s.p + end, s.s.n - end, 1);
            }
            if (jv_list_push(c->a, l, sub(s, at, end))) return nomem(c);
            at = end;
        }
    } else {
        if (want_str(c, sep, "the separator")) return -1;
        if (sep->s.n == 0) return jinja_fail(c, "empty separator");
        size_t at = 0;
        for (;;) {
            int hit = maxsplit >= 0 && (long long)l->n >= maxsplit ? -1 : find(s, at, sep->s.p, sep->s.n);
            size_t end = hit < 0 ? s.s.n : (size_t)hit;
            if (jv_list_push(c->a, l, sub(s, at, end))) return nomem(c);
            if (hit < 0) break;
            at = end + sep->s.n;
        }
    }
    *out = list_val(l);
    return 0;
}

/* old replaced by new in s, at most count times (count < 0: all). */
static int replace(JCtx *c, JVal s, JVal old, JVal new, long long count, JVal *out) {
    JBuf b;
    jb_init(&b, c->a, c->lim->max_output);
    size_t at = 0;
    long long done = 0;
    if (old.s.n == 0) {                               /* Python puts new between every character */
        for (;;) {
            if (count < 0 || done < count) { jb_add(&b, new.s.p, new.s.n, new.s.plain); done++; }
            if (at >= s.s.n) break;
            size_t k = ju_offset(s.s.p + at, s.s.n - at, 1);
            jb_add(&b, s.s.p + at, k, s.s.plain ? s.s.plain + at : NULL);
            at += k;
        }
    } else {
        for (;;) {
            int hit = count >= 0 && done >= count ? -1 : find(s, at, old.s.p, old.s.n);
            size_t end = hit < 0 ? s.s.n : (size_t)hit;
            jb_add(&b, s.s.p + at, end - at, s.s.plain ? s.s.plain + at : NULL);
            if (hit < 0) break;
            jb_add(&b, new.s.p, new.s.n, new.s.plain);
            at = end + old.s.n;
            done++;
        }
    }
    if (b.failed) return buf_fail(c);
    *out = jb_val(&b);
    return 0;
}

/* ASCII case mapping (what the templates' role names and markers need). */
enum { CASE_LOWER, CASE_UPPER, CASE_TITLE, CASE_CAPITALIZE };
static int recase(JCtx *c, JVal s, int how, JVal *out) {
    char *p = ja_alloc(c->a, s.s.n + 1);
    if (!p) return nomem(c);
    int word_start = 1;
    for (size_t i = 0; i < s.s.n; i++) {
        char ch = s.s.p[i];
        int alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
        int up = how == CASE_UPPER || (how == CASE_TITLE && word_start) || (how == CASE_CAPITALIZE && i == 0);
        if (alpha) p[i] = up ? (char)(ch & ~0x20) : (char)(ch | 0x20);
        else p[i] = ch;
        word_start = !alpha && !((unsigned char)ch >= 0x80);
    }
    *out = jv_str(p, s.s.n, s.s.plain);
    return 0;
}

static int affix(JCtx *c, JVal s, const JVal *x, int end, int *out) {
    if (!x) return jinja_fail(c, "%s() takes at least 1 argument", end ? "endswith" : "startswith");
    if (x->k == JV_LIST && x->l->tuple) {
        *out = 0;
        for (size_t i = 0; i < x->l->n && !*out; i++)
            if (affix(c, s, &x->l->v[i], end, out)) return -1;
        return 0;
    }
    if (x->k != JV_STR)
        return jinja_fail(c, "%s first arg must be str or a tuple of str, not %s", end ? "endswith" : "startswith",
                          jv_type_name(*x));
    *out = x->s.n <= s.s.n && !memcmp(s.s.p + (end ? s.s.n - x->s.n : 0), x->s.p, x->s.n);
    return 0;
}

/* '{} and {0} and {name}'.format(...): fields without format specs. */
static int format(JCtx *c, JVal s, const JArgs *args, JVal *out) {
    JBuf b;
    jb_init(&b, c->a, c->lim->max_output);
    int next = 0;
    for (size_t i = 0; i < s.s.n; i++) {
        char ch = s.s.p[i];
        if ((ch == '{' || ch == '}') && i + 1 < s.s.n && s.s.p[i + 1] == ch) {
            jb_add(&b, &ch, 1, s.s.plain ? s.s.plain + i : NULL);
            i++;
            continue;
        }
        if (ch == '}') return jinja_fail(c, "Single '}' encountered in format string");
        if (ch != '{') {
            jb_add(&b, s.s.p + i, 1, s.s.plain ? s.s.plain + i : NULL);
            continue;
        }
        size_t close = i + 1;
        while (close < s.s.n && s.s.p[close] != '}') close++;
        if (close >= s.s.n) return jinja_fail(c, "Single '{' encountered in format string");
        const char *f = s.s.p + i + 1;
        size_t fn = close - i - 1;
        if (memchr(f, ':', fn) || memchr(f, '!', fn)) return jinja_fail(c, "format specs are not supported");
        const JVal *v = NULL;
        if (fn == 0) {
            v = next < args->n_pos ? &args->pos[next] : NULL;
            next++;
        } else if (f[0] >= '0' && f[0] <= '9') {
            int k = atoi(f);
            v = k < args->n_pos ? &args->pos[k] : NULL;
        } else {
            for (int k = 0; k < args->n_kw; k++)
                if (strlen(args->kw_names[k]) == fn && !memcmp(args->kw_names[k], f, fn)) v = &args->kw[k];
        }
        if (!v) return jinja_fail(c, "format: no argument for {%.*s}", (int)fn, f);
        jb_str(&b, *v);
        i = close;
    }
    if (b.failed) return buf_fail(c);
    *out = jb_val(&b);
    return 0;
}

static int join(JCtx *c, JList *items, JVal sep, const char *attribute, JVal *out) {
    JBuf b;
    jb_init(&b, c->a, c->lim->max_output);
    for (size_t i = 0; i < items->n; i++) {
        JVal v = items->v[i];
        if (attribute && jinja_getattr(c, v, attribute, &v)) return -1;
        if (i) jb_str(&b, sep);
        jb_str(&b, v);
    }
    if (b.failed) return buf_fail(c);
    *out = jb_val(&b);
    return 0;
}

static int str_method(JCtx *c, JVal s, const char *name, const JArgs *a, JVal *out) {
    const JVal *x = arg(a, 0, "");
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
        if (x && x->k != JV_STR && x->k != JV_NONE) return want_str(c, x, "the characters to strip");
        *out = strip(s, name[0] != 'r', name[0] != 'l', x);
        return 0;
    }
    if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
        const JVal *sep = arg(a, 0, "sep"), *max = arg(a, 1, "maxsplit");
        if (!strcmp(name, "rsplit") && max && lng(*max) >= 0) return jinja_fail(c, "rsplit with maxsplit is not supported");
        return split(c, s, sep, max ? lng(*max) : -1, out);
    }
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
        int r;
        if (affix(c, s, x, name[0] == 'e', &r)) return -1;
        *out = jv_bool(r);
        return 0;
    }
    if (!strcmp(name, "replace")) {
        const JVal *old = arg(a, 0, "old"), *new = arg(a, 1, "new"), *count = arg(a, 2, "count");
        if (want_str(c, old, "replace's first argument") || want_str(c, new, "replace's second argument")) return -1;
        return replace(c, s, *old, *new, count ? lng(*count) : -1, out);
    }
    if (!strcmp(name, "lower")) return recase(c, s, CASE_LOWER, out);
    if (!strcmp(name, "upper")) return recase(c, s, CASE_UPPER, out);
    if (!strcmp(name, "title")) return recase(c, s, CASE_TITLE, out);
    if (!strcmp(name, "capitalize")) return recase(c, s, CASE_CAPITALIZE, out);
    if (!strcmp(name, "format")) return format(c, s, a, out);
    if (!strcmp(name, "find") || !strcmp(name, "rfind") || !strcmp(name, "count")) {
        if (want_str(c, x, name)) return -1;
        long long r = -1, n = 0;
        for (int at = find(s, 0, x->s.p, x->s.n); at >= 0;
             at = find(s, (size_t)at + (x->s.n ? x->s.n : 1), x->s.p, x->s.n)) {
            if (r < 0 || name[0] == 'r') r = (long long)ju_count(s.s.p, (size_t)at);
            n++;
            if (name[0] == 'f') break;
            if ((size_t)at >= s.s.n) break;
        }
        *out = jv_int(name[0] == 'c' ? n : r);
        return 0;
    }
    if (!strcmp(name, "join")) {
        JList *items;
        if (!x) return jinja_fail(c, "join() takes exactly one argument");
        if (jinja_iter(c, *x, &items)) return -1;
        for (size_t i = 0; i < items->n; i++)
            if (items->v[i].k != JV_STR)
                return jinja_fail(c, "sequence item %zu: expected str instance, %s found", i, jv_type_name(items->v[i]));
        return join(c, items, s, NULL, out);
    }
    if (!strcmp(name, "isdigit") || !strcmp(name, "isalpha") || !strcmp(name, "isspace")) {
        int r = s.s.n > 0;
        for (size_t i = 0; i < s.s.n && r; i++) {
            char ch = s.s.p[i];
            r = name[2] == 'd' ? (ch >= '0' && ch <= '9')
              : name[2] == 'a' ? ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z')
              : (ch == ' ' || (ch >= '\t' && ch <= '\r'));
        }
        *out = jv_bool(r);
        return 0;
    }
    if (!strcmp(name, "splitlines")) {
        JVal nl = jv_str("\n", 1, NULL);
        if (split(c, s, &nl, -1, out)) return -1;
        if (out->l->n && out->l->v[out->l->n - 1].s.n == 0) out->l->n--;
        return 0;
    }
    return jinja_fail(c, "str has no method '%s'", name);
}

int jinja_call_method(JCtx *c, const JMethod *m, const JArgs *a, JVal *out) {
    JVal self = m->self;
    if (self.k == JV_STR) return str_method(c, self, m->name, a, out);
    if (self.k == JV_DICT) {
        const JDict *d = self.d;
        if (!strcmp(m->name, "get")) {
            const JVal *k = arg(a, 0, "key"), *dflt = arg(a, 1, "default");
            if (!k) return jinja_fail(c, "get expected at least 1 argument, got 0");
            const JVal *v = jv_dict_getv(d, *k);
            *out = v ? *v : dflt ? *dflt : jv_none();
            return 0;
        }
        if (!strcmp(m->name, "copy")) {
            JDict *e = jv_dict_new(c->a, d->n);
            if (!e) return nomem(c);
            for (size_t i = 0; i < d->n; i++) jv_dict_set(c->a, e, d->keys[i], d->vals[i]);
            *out = dict_val(e);
            return 0;
        }
        JList *l = jv_list_new(c->a, d->n);
        if (!l) return nomem(c);
        for (size_t i = 0; i < d->n; i++) {
            JVal item = d->keys[i];
            if (!strcmp(m->name, "values")) item = d->vals[i];
            if (!strcmp(m->name, "items")) {
                JList *pair = jv_list_new(c->a, 2);
                if (!pair) return nomem(c);
                pair->tuple = 1;
                jv_list_push(c->a, pair, d->keys[i]);
                jv_list_push(c->a, pair, d->vals[i]);
                item = list_val(pair);
            }
            if (jv_list_push(c->a, l, item)) return nomem(c);
        }
        *out = list_val(l);
        return 0;
    }
    if (self.k == JV_LIST) {
        const JVal *x = arg(a, 0, "");
        if (!strcmp(m->name, "copy")) {
            JList *l = jv_list_new(c->a, self.l->n);
            if (!l) return nomem(c);
            for (size_t i = 0; i < self.l->n; i++) jv_list_push(c->a, l, self.l->v[i]);
            *out = list_val(l);
            return 0;
        }
        if (!x) return jinja_fail(c, "%s() takes exactly one argument", m->name);
        long long n = 0, first = -1;
        for (size_t i = 0; i < self.l->n; i++)
            if (jv_equal(self.l->v[i], *x)) {
                if (first < 0) first = (long long)i;
                n++;
            }
        if (!strcmp(m->name, "index") && first < 0) return jinja_fail(c, "value is not in list");
        *out = jv_int(!strcmp(m->name, "index") ? first : n);
        return 0;
    }
    return jinja_fail(c, "'%s' object has no method '%s'", jv_type_name(self), m->name);
}

/* ---- global functions ---- */

enum { FN_RANGE, FN_NAMESPACE, FN_RAISE, FN_STRFTIME, FN_DICT, FN_COUNT };
static const char *const fn_names[FN_COUNT] = {"range", "namespace", "raise_exception", "strftime_now", "dict"};

int jinja_func_id(const char *name) {
    for (int k = 0; k < FN_COUNT; k++) if (!strcmp(fn_names[k], name)) return k;
    return -1;
}

static int kwargs_dict(JCtx *c, const JArgs *a, int ns, JVal *out) {
    JDict *d = jv_dict_new(c->a, (size_t)a->n_kw + 4);
    if (!d) return nomem(c);
    d->ns = ns;
    if (a->n_pos > 0) {                              /* namespace(other_dict) / dict(other_dict) */
        if (a->pos[0].k != JV_DICT) return jinja_fail(c, "%s() takes a mapping", ns ? "namespace" : "dict");
        for (size_t i = 0; i < a->pos[0].d->n; i++) jv_dict_set(c->a, d, a->pos[0].d->keys[i], a->pos[0].d->vals[i]);
    }
    for (int k = 0; k < a->n_kw; k++)
        if (jv_dict_set(c->a, d, jv_str(a->kw_names[k], strlen(a->kw_names[k]), NULL), a->kw[k])) return nomem(c);
    *out = dict_val(d);
    return 0;
}

int jinja_call_func(JCtx *c, int fn, const JArgs *a, JVal *out) {
    switch (fn) {
    case FN_RANGE: {
        long long p[3] = {0, 0, 1};
        if (a->n_pos < 1 || a->n_pos > 3) return jinja_fail(c, "range expected 1 to 3 arguments, got %d", a->n_pos);
        for (int k = 0; k < a->n_pos; k++) {
            if (a->pos[k].k != JV_INT && a->pos[k].k != JV_BOOL)
                return jinja_fail(c, "'%s' object cannot be interpreted as an integer", jv_type_name(a->pos[k]));
            p[a->n_pos == 1 ? 1 : k] = lng(a->pos[k]);
        }
        if (p[2] == 0) return jinja_fail(c, "range() arg 3 must not be zero");
        long double count = p[2] > 0 ? ((long double)p[1] - p[0] + p[2] - 1) / p[2] : ((long double)p[0] - p[1] - p[2] - 1) / -p[2];
        if (count > 1e7) return jinja_fail(c, "range of %.0Lf numbers is more than a template may make", count);
        JList *l = jv_list_new(c->a, count > 0 ? (size_t)count : 0);
        if (!l) return nomem(c);
        for (long long i = p[0]; p[2] > 0 ? i < p[1] : i > p[1]; i += p[2])
            if (jv_list_push(c->a, l, jv_int(i))) return nomem(c);
        *out = list_val(l);
        return 0;
    }
    case FN_NAMESPACE: return kwargs_dict(c, a, 1, out);
    case FN_DICT: return kwargs_dict(c, a, 0, out);
    case FN_RAISE: {
        /* the template's own message, exactly: the server returns it */
        JVal msg = a->n_pos ? a->pos[0] : jv_str("", 0, NULL);
        if (jinja_to_str(c, msg, &msg)) return -1;
        if (c->failed) return -1;
        c->failed = 1;
        c->raised = 1;
        err_set(c->e, ST_ARG, "%.*s", (int)(msg.s.n > 500 ? 500 : msg.s.n), msg.s.p);
        return -1;
    }
    case FN_STRFTIME: {
        const JVal *f = arg(a, 0, "format");
        if (want_str(c, f, "strftime_now's format")) return -1;
        char fmt[128], buf[256];
        if (f->s.n >= sizeof fmt) return jinja_fail(c, "strftime_now: the format is too long");
        memcpy(fmt, f->s.p, f->s.n);
        fmt[f->s.n] = 0;
        struct tm tm;
        time_t now = c->lim->now;
        gmtime_r(&now, &tm);
        size_t n = strftime(buf, sizeof buf, fmt, &tm);
        char *s = ja_strndup(c->a, buf, n);
        if (!s) return nomem(c);
        *out = jv_str(s, n, NULL);
        return 0;
    }
    }
    return jinja_fail(c, "unknown function");
}

/* ---- tests ---- */

int jinja_test(JCtx *c, const char *name, JVal v, const JArgs *a, int *out) {
    const JVal *x = arg(a, 0, "");
    JVal r;
    if (!strcmp(name, "defined")) *out = v.k != JV_UNDEF;
    else if (!strcmp(name, "undefined")) *out = v.k == JV_UNDEF;
    else if (!strcmp(name, "none")) *out = v.k == JV_NONE;
    else if (!strcmp(name, "string")) *out = v.k == JV_STR;
    else if (!strcmp(name, "number")) *out = is_num(v);
    else if (!strcmp(name, "integer")) *out = v.k == JV_INT;
    else if (!strcmp(name, "float")) *out = v.k == JV_FLOAT;
    else if (!strcmp(name, "boolean")) *out = v.k == JV_BOOL;
    else if (!strcmp(name, "true")) *out = v.k == JV_BOOL && v.b;
    else if (!strcmp(name, "false")) *out = v.k == JV_BOOL && !v.b;
    else if (!strcmp(name, "mapping")) *out = v.k == JV_DICT && !v.d->ns;
    else if (!strcmp(name, "iterable")) *out = v.k == JV_UNDEF || v.k == JV_STR || v.k == JV_LIST || (v.k == JV_DICT && !v.d->ns);
    else if (!strcmp(name, "sequence")) *out = v.k == JV_UNDEF || v.k == JV_STR || v.k == JV_LIST || (v.k == JV_DICT && !v.d->ns);
    else if (!strcmp(name, "callable")) *out = v.k == JV_MACRO || v.k == JV_FUNC || v.k == JV_METHOD;
    else if (!strcmp(name, "odd") || !strcmp(name, "even")) {
        if (v.k != JV_INT && v.k != JV_BOOL) return jinja_fail(c, "the %s test needs an integer", name);
        *out = (lng(v) % 2 != 0) == (name[0] == 'o');
    } else if (!strcmp(name, "divisibleby")) {
        if (!x || !is_num(v) || !is_num(*x)) return jinja_fail(c, "divisibleby needs two numbers");
        if (arith(c, '%', v, *x, &r)) return -1;
        *out = !jv_truthy(r);
    } else if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        if (jinja_to_str(c, v, &r)) return -1;
        int cased = 0, ok = 1;
        for (size_t i = 0; i < r.s.n; i++) {
            char ch = r.s.p[i];
            if (ch >= 'a' && ch <= 'z') { cased = 1; if (name[0] == 'u') ok = 0; }
            if (ch >= 'A' && ch <= 'Z') { cased = 1; if (name[0] == 'l') ok = 0; }
        }
        *out = cased && ok;
    } else if (!strcmp(name, "in")) {
        if (!x) return jinja_fail(c, "the in test needs a container");
        return contains(c, v, *x, out);
    } else if (!strcmp(name, "sameas")) {
        if (!x) return jinja_fail(c, "sameas needs a value");
        *out = v.k == x->k && (v.k == JV_LIST ? v.l == x->l : v.k == JV_DICT ? v.d == x->d : jv_equal(v, *x));
    } else {
        static const char *const cmp[][2] = {{"eq", "=="}, {"equalto", "=="}, {"==", "=="}, {"ne", "!="}, {"!=", "!="},
                                             {"lt", "<"}, {"lessthan", "<"}, {"<", "<"}, {"le", "<="}, {"<=", "<="},
                                             {"gt", ">"}, {"greaterthan", ">"}, {">", ">"}, {"ge", ">="}, {">=", ">="}};
        for (size_t k = 0; k < sizeof cmp / sizeof *cmp; k++)
            if (!strcmp(name, cmp[k][0])) {
                if (!x) return jinja_fail(c, "the %s test needs a value to compare with", name);
                if (jinja_binop(c, cmp[k][1], v, *x, &r)) return -1;
                *out = r.b;
                return 0;
            }
        return jinja_fail(c, "no test named '%s'", name);
    }
    return 0;
}

/* ---- filters ---- */

/* select / reject / selectattr / rejectattr: keep items whose test (from
 * the arguments starting at first; none: truth) is want. */
static int select_items(JCtx *c, JVal seq, const JArgs *a, const char *attribute, int first, int want, JVal *out) {
    JList *items, *kept;
    if (!jv_truthy(seq)) seq = jv_undef(NULL);        /* jinja2: "if value:" first, so none selects nothing */
    if (jinja_iter(c, seq, &items) || !(kept = jv_list_new(c->a, items->n))) return c->failed ? -1 : nomem(c);
    const char *test = NULL;
    char tbuf[32];
    if (a->n_pos > first) {
        JVal t = a->pos[first];
        if (t.k != JV_STR || t.s.n >= sizeof tbuf) return jinja_fail(c, "a test name must be a string");
        memcpy(tbuf, t.s.p, t.s.n);
        tbuf[t.s.n] = 0;
        test = tbuf;
    }
    JArgs rest = {.pos = a->n_pos > first + 1 ? a->pos + first + 1 : NULL, .n_pos = a->n_pos > first + 1 ? a->n_pos - first - 1 : 0};
    for (size_t i = 0; i < items->n; i++) {
        JVal v = items->v[i];
        if (attribute && jinja_getattr(c, v, attribute, &v)) return -1;
        int r;
        if (test) {
            if (jinja_test(c, test, v, &rest, &r)) return -1;
        } else {
            r = jv_truthy(v);
        }
        if (r == want && jv_list_push(c->a, kept, items->v[i])) return nomem(c);
    }
    *out = list_val(kept);
    return 0;
}

static char *cstr(JCtx *c, const JVal *v) { return v && v->k == JV_STR ? ja_strndup(c->a, v->s.p, v->s.n) : NULL; }

static int do_tojson(JCtx *c, JVal v, const JArgs *a, JVal *out) {
    if (v.k == JV_UNDEF) return jinja_fail(c, "Object of type Undefined is not JSON serializable");
    const JVal *ea = arg(a, 0, "ensure_ascii"), *ind = arg(a, 1, "indent"), *sep = arg(a, 2, "separators"),
               *sk = arg(a, 3, "sort_keys");
    JJsonOpts o = {.indent = -1, .ensure_ascii = ea && jv_truthy(*ea), .sort_keys = sk && jv_truthy(*sk),
                   .item_sep = ", ", .key_sep = ": "};
    if (ind && ind->k != JV_NONE) {
        if (ind->k != JV_INT) return jinja_fail(c, "tojson: indent must be an integer");
        o.indent = ind->i < 0 ? 0 : ind->i > 64 ? 64 : (int)ind->i;
        o.item_sep = ",";
    }
    if (sep && sep->k != JV_NONE) {
        if (sep->k != JV_LIST || sep->l->n != 2 || sep->l->v[0].k != JV_STR || sep->l->v[1].k != JV_STR)
            return jinja_fail(c, "tojson: separators must be two strings");
        if (!(o.item_sep = cstr(c, &sep->l->v[0])) || !(o.key_sep = cstr(c, &sep->l->v[1]))) return nomem(c);
    }
    JBuf b;
    JVal bad;
    jb_init(&b, c->a, c->lim->max_output);
    if (jb_json(&b, v, &o, 0, &bad)) return jinja_fail(c, "Object of type %s is not JSON serializable", jv_type_name(bad));
    if (b.failed) return buf_fail(c);
    *out = jb_val(&b);
    return 0;
}

/* dictsort: (key, value) pairs ordered by key (case-insensitive) or by value. */
static int do_dictsort(JCtx *c, JVal v, const JArgs *a, JVal *out) {
    if (v.k != JV_DICT) return jinja_fail(c, "dictsort: a mapping is needed, not %s", jv_type_name(v));
    const JVal *cs = arg(a, 0, "case_sensitive"), *by = arg(a, 1, "by"), *rev = arg(a, 2, "reverse");
    int by_value = by && by->k == JV_STR && by->s.n == 5 && !memcmp(by->s.p, "value", 5);
    int sensitive = cs && jv_truthy(*cs), reverse = rev && jv_truthy(*rev);
    JList *l = jv_list_new(c->a, v.d->n);
    if (!l) return nomem(c);
    for (size_t i = 0; i < v.d->n; i++) {
        JList *pair = jv_list_new(c->a, 2);
        if (!pair) return nomem(c);
        pair->tuple = 1;
        jv_list_push(c->a, pair, v.d->keys[i]);
        jv_list_push(c->a, pair, v.d->vals[i]);
        jv_list_push(c->a, l, list_val(pair));
    }
    for (size_t i = 1; i < l->n; i++)                  /* insertion sort: stable, as Python's */
        for (size_t j = i; j > 0; j--) {
            JVal x = l->v[j - 1].l->v[by_value], y = l->v[j].l->v[by_value];
            JVal lx = x, ly = y;
            if (!sensitive && x.k == JV_STR && recase(c, x, CASE_LOWER, &lx)) return -1;
            if (!sensitive && y.k == JV_STR && recase(c, y, CASE_LOWER, &ly)) return -1;
            int r = order(lx, ly);
            if (r == -2) return jinja_fail(c, "dictsort: cannot order %s and %s", jv_type_name(x), jv_type_name(y));
            if (reverse ? r < 0 : r > 0) {
                JVal t = l->v[j]; l->v[j] = l->v[j - 1]; l->v[j - 1] = t;
            } else {
                break;
            }
        }
    *out = list_val(l);
    return 0;
}

static int do_indent(JCtx *c, JVal v, const JArgs *a, JVal *out) {
    const JVal *w = arg(a, 0, "width"), *first = arg(a, 1, "first"), *blank = arg(a, 2, "blank");
    JVal pad = w && w->k == JV_STR ? *w : jv_str("    ", w && w->k == JV_INT && w->i >= 0 && w->i <= 4 ? (size_t)w->i : 4, NULL);
    if (w && w->k == JV_INT && w->i > 4) {
        char *p = ja_alloc(c->a, (size_t)(w->i > 256 ? 256 : w->i) + 1);
        if (!p) return nomem(c);
        memset(p, ' ', (size_t)(w->i > 256 ? 256 : w->i));
        pad = jv_str(p, (size_t)(w->i > 256 ? 256 : w->i), NULL);
    }
    if (jinja_to_str(c, v, &v)) return -1;
    JBuf b;
    jb_init(&b, c->a, c->lim->max_output);
    int line_start = first && jv_truthy(*first);
    for (size_t i = 0; i < v.s.n; i++) {
        if (line_start) {
            int empty = v.s.p[i] == '\n';
            if (!empty || (blank && jv_truthy(*blank))) jb_add(&b, pad.s.p, pad.s.n, NULL);
        }
        jb_add(&b, v.s.p + i, 1, v.s.plain ? v.s.plain + i : NULL);
        line_start = v.s.p[i] == '\n';
    }
    if (b.failed) return buf_fail(c);
    *out = jb_val(&b);
    return 0;
}

static int do_map(JCtx *c, JVal v, const JArgs *a, JVal *out) {
    JList *items, *l;
    if (!jv_truthy(v)) v = jv_undef(NULL);            /* as select: none maps to nothing */
    if (jinja_iter(c, v, &items)) return -1;
    if (!(l = jv_list_new(c->a, items->n))) return nomem(c);
    const JVal *attr = arg(a, -1, "attribute"), *dflt = arg(a, -1, "default");
    char *attribute = cstr(c, attr);
    if (attr && !attribute) return jinja_fail(c, "map: attribute must be a string");
    char *filter = NULL;
    if (!attr) {
        if (a->n_pos < 1 || !(filter = cstr(c, &a->pos[0]))) return jinja_fail(c, "map: a filter name or attribute= is needed");
    }
    JArgs rest = {.pos = a->n_pos > 1 ? a->pos + 1 : NULL, .n_pos = a->n_pos ? a->n_pos - 1 : 0};
    for (size_t i = 0; i < items->n; i++) {
        JVal x = items->v[i];
        if (attribute) {
            if (jinja_getattr(c, x, attribute, &x)) return -1;
            if (x.k == JV_UNDEF && dflt) x = *dflt;
        } else if (jinja_filter(c, filter, x, &rest, &x)) {
            return -1;
        }
        if (jv_list_push(c->a, l, x)) return nomem(c);
    }
    *out = list_val(l);
    return 0;
}

static int do_sort(JCtx *c, JVal v, const JArgs *a, JVal *out, int unique) {
    JList *items, *l;
    if (jinja_iter(c, v, &items) || !(l = jv_list_new(c->a, items->n))) return c->failed ? -1 : nomem(c);
    const JVal *rev = arg(a, unique ? -1 : 0, "reverse"), *attr = arg(a, -1, "attribute");
    char *attribute = cstr(c, attr);
    for (size_t i = 0; i < items->n; i++) {
        int seen = 0;
        for (size_t j = 0; unique && j < l->n && !seen; j++) seen = jv_equal(l->v[j], items->v[i]);
        if (!seen && jv_list_push(c->a, l, items->v[i])) return nomem(c);
    }
    for (size_t i = 1; !unique && i < l->n; i++)
        for (size_t j = i; j > 0; j--) {
            JVal x = l->v[j - 1], y = l->v[j];
            if (attribute && (jinja_getattr(c, x, attribute, &x) || jinja_getattr(c, y, attribute, &y))) return -1;
            int r = order(x, y);
            if (r == -2) return jinja_fail(c, "sort: cannot order %s and %s", jv_type_name(x), jv_type_name(y));
            if (rev && jv_truthy(*rev) ? r < 0 : r > 0) {
                JVal t = l->v[j]; l->v[j] = l->v[j - 1]; l->v[j - 1] = t;
            } else {
                break;
            }
        }
    *out = list_val(l);
    return 0;
}

int jinja_filter(JCtx *c, const char *name, JVal v, const JArgs *a, JVal *out) {
    const JVal *x = arg(a, 0, "");
    long long n = 0;
    if (!strcmp(name, "tojson")) return do_tojson(c, v, a, out);
    if (!strcmp(name, "safe") || !strcmp(name, "e") || !strcmp(name, "escape") || !strcmp(name, "forceescape")) {
        if (name[0] == 's') {
            *out = v;
            return 0;
        }
        if (jinja_to_str(c, v, &v)) return -1;
        JBuf b;
        jb_init(&b, c->a, c->lim->max_output);
        for (size_t i = 0; i < v.s.n; i++) {
            const char *rep = v.s.p[i] == '&' ? "&amp;" : v.s.p[i] == '<' ? "&lt;" : v.s.p[i] == '>' ? "&gt;"
                            : v.s.p[i] == '"' ? "&#34;" : v.s.p[i] == '\'' ? "&#39;" : NULL;
            if (rep) jb_addc(&b, rep);
            else jb_add(&b, v.s.p + i, 1, v.s.plain ? v.s.plain + i : NULL);
        }
        if (b.failed) return buf_fail(c);
        *out = jb_val(&b);
        return 0;
    }
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
        if (jinja_len(c, v, &n)) return -1;
        *out = jv_int(n);
        return 0;
    }
    if (!strcmp(name, "string")) return jinja_to_str(c, v, out);
    if (!strcmp(name, "trim")) {
        const JVal *chars = arg(a, 0, "chars");
        if (jinja_to_str(c, v, &v)) return -1;
        *out = strip(v, 1, 1, chars);
        return 0;
    }
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        const JVal *dflt = arg(a, 0, "default_value"), *boolean = arg(a, 1, "boolean");
        int use = v.k == JV_UNDEF || (boolean && jv_truthy(*boolean) && !jv_truthy(v));
        *out = use ? (dflt ? *dflt : jv_str("", 0, NULL)) : v;
        return 0;
    }
    if (!strcmp(name, "join")) {
        JList *items;
        const JVal *sep = arg(a, 0, "d"), *attr = arg(a, 1, "attribute");
        if (jinja_iter(c, v, &items)) return -1;
        return join(c, items, sep ? *sep : jv_str("", 0, NULL), cstr(c, attr), out);
    }
    if (!strcmp(name, "list")) {
        JList *items, *l;
        if (jinja_iter(c, v, &items) || !(l = jv_list_new(c->a, items->n))) return c->failed ? -1 : nomem(c);
        for (size_t i = 0; i < items->n; i++) jv_list_push(c->a, l, items->v[i]);
        *out = list_val(l);
        return 0;
    }
    if (!strcmp(name, "items")) {
        if (v.k == JV_UNDEF) {
            JList *l = jv_list_new(c->a, 0);
            if (!l) return nomem(c);
            *out = list_val(l);
            return 0;
        }
        if (v.k != JV_DICT || v.d->ns) return jinja_fail(c, "items: a mapping is needed, not %s", jv_type_name(v));
        JMethod m = {.self = v, .name = "items"};
        JArgs none = {0};
        return jinja_call_method(c, &m, &none, out);
    }
    if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr")) {
        char *attribute = cstr(c, x);
        if (!attribute) return jinja_fail(c, "%s: the attribute name must be a string", name);
        return select_items(c, v, a, attribute, 1, name[0] == 's', out);
    }
    if (!strcmp(name, "select") || !strcmp(name, "reject")) return select_items(c, v, a, NULL, 0, name[0] == 's', out);
    if (!strcmp(name, "dictsort")) return do_dictsort(c, v, a, out);
    if (!strcmp(name, "lower") || !strcmp(name, "upper") || !strcmp(name, "title") || !strcmp(name, "capitalize")) {
        if (jinja_to_str(c, v, &v)) return -1;
        return recase(c, v, name[0] == 'l' ? CASE_LOWER : name[0] == 'u' ? CASE_UPPER : name[0] == 't' ? CASE_TITLE
                                                                                                    : CASE_CAPITALIZE, out);
    }
    if (!strcmp(name, "replace")) {
        const JVal *old = arg(a, 0, "old"), *new = arg(a, 1, "new"), *count = arg(a, 2, "count");
        if (jinja_to_str(c, v, &v)) return -1;
        if (want_str(c, old, "replace's first argument") || want_str(c, new, "replace's second argument")) return -1;
        return replace(c, v, *old, *new, count && count->k != JV_NONE ? lng(*count) : -1, out);
    }
    if (!strcmp(name, "map")) return do_map(c, v, a, out);
    if (!strcmp(name, "sort")) return do_sort(c, v, a, out, 0);
    if (!strcmp(name, "unique")) return do_sort(c, v, a, out, 1);
    if (!strcmp(name, "indent")) return do_indent(c, v, a, out);
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        JList *items;
        if (jinja_iter(c, v, &items)) return -1;
        *out = items->n == 0 ? jv_undef(NULL) : items->v[name[0] == 'f' ? 0 : items->n - 1];
        return 0;
    }
    if (!strcmp(name, "min") || !strcmp(name, "max")) {
        JList *items;
        if (jinja_iter(c, v, &items)) return -1;
        *out = jv_undef(NULL);
        for (size_t i = 0; i < items->n; i++) {
            int r = out->k == JV_UNDEF ? 1 : order(items->v[i], *out);
            if (r == -2) return jinja_fail(c, "%s: cannot order the items", name);
            if (out->k == JV_UNDEF || (name[1] == 'i' ? r < 0 : r > 0)) *out = items->v[i];
        }
        return 0;
    }
    if (!strcmp(name, "int") || !strcmp(name, "float") || !strcmp(name, "abs") || !strcmp(name, "round")) {
        double d = 0;
        int ok = 1;
        if (is_num(v)) d = dbl(v);
        else if (v.k == JV_STR) {
            char *s = ja_strndup(c->a, v.s.p, v.s.n), *end;
            if (!s) return nomem(c);
            d = strtod(s, &end);
            ok = end != s && *end == 0;
        } else ok = 0;
        if (!strcmp(name, "abs")) {
            if (!is_num(v)) return jinja_fail(c, "bad operand type for abs(): '%s'", jv_type_name(v));
            if (v.k != JV_FLOAT && lng(v) == -9223372036854775807LL - 1) return jinja_fail(c, "integer overflow");
            *out = v.k == JV_FLOAT ? jv_float(fabs(v.f)) : jv_int(llabs(lng(v)));
        } else if (!strcmp(name, "round")) {
            *out = jv_float(nearbyint(d));
        } else if (name[0] == 'i') {
            *out = ok && fabs(d) < 9e18 ? jv_int((long long)d) : (x ? *x : jv_int(0));
        } else {
            *out = ok ? jv_float(d) : (x ? *x : jv_float(0));
        }
        return 0;
    }
    if (!strcmp(name, "sum")) {
        JList *items;
        if (jinja_iter(c, v, &items)) return -1;
        *out = jv_int(0);
        for (size_t i = 0; i < items->n; i++)
            if (jinja_binop(c, "+", *out, items->v[i], out)) return -1;
        return 0;
    }
    if (!strcmp(name, "wordcount")) {
        JVal parts;
        if (jinja_to_str(c, v, &v) || split(c, v, NULL, -1, &parts)) return -1;
        *out = jv_int((long long)parts.l->n);
        return 0;
    }
    return jinja_fail(c, "no filter named '%s'", name);
}
