/* jinja_lex.c - a template's source cut into tokens.
 *
 * A template is text with three kinds of tags in it: {{ expression }},
 * {% statement %} and {# comment #}. The lexer walks the source once; in
 * text it looks for the next tag, inside a tag it cuts names, numbers,
 * strings and operators until the tag's end.
 *
 * Nearly all of the difficulty is whitespace, because chat templates are
 * written on many lines for people and must print as few as the model was
 * trained on. Hugging Face runs them with two jinja2 options on, and the
 * markers inside tags add more:
 *  - trim_blocks: the one newline right after a %} or #} is dropped (not
 *    after }}).
 *  - lstrip_blocks: spaces and tabs from the start of a line up to a {% or
 *    {# are dropped (not before {{). "Start of a line" means after a newline
 *    in the text, or at the start of the text when the tag before it ended
 *    its line (the newline trim_blocks removed counts) or at the start of
 *    the template.
 *  - {%- {{- {#- strip all whitespace before the tag, newlines included;
 *    -%} -}} -#} all whitespace after it. {%+ and +%} turn lstrip and trim
 *    off for that tag.
 * And one that surprises: a single newline at the very end of the source
 * is dropped (jinja2's keep_trailing_newline is off), and every newline in
 * text and strings is written as "\n" (a "\r\n" template prints "\n").
 *
 * Inside {{ }} and {% %}, an end marker counts only when the brackets
 * opened in the tag are closed: {{ {'a': {'b': 1}} }} is one expression. */
#include "chat/jinja_internal.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *src;
    size_t n, pos;
    int line;
    JArena *a;
    JTok *toks;
    int n_toks, cap;
    int line_start;            /* the last tag ended its line (or nothing came yet) */
    Err *e;
} Lexer;

static int push(Lexer *L, JTok t) {
    if (L->n_toks == L->cap) {
        int cap = L->cap ? 2 * L->cap : 256;
        JTok *grown = ja_alloc(L->a, (size_t)cap * sizeof *grown);
        if (!grown) return err_set(L->e, ST_NOMEM, "template: out of memory");
        if (L->n_toks) memcpy(grown, L->toks, (size_t)L->n_toks * sizeof *grown);
        L->toks = grown;
        L->cap = cap;
    }
    L->toks[L->n_toks++] = t;
    return ST_OK;
}

static int count_lines(const char *s, size_t n) {
    int k = 0;
    for (size_t i = 0; i < n; i++) k += s[i] == '\n';
    return k;
}

/* Text (or a string's bytes) with "\r\n" and "\r" written as "\n", in the arena. */
static char *normalize_newlines(JArena *a, const char *s, size_t n, size_t *out_n) {
    char *d = ja_alloc(a, n + 1);
    if (!d) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\r') {
            d[k++] = '\n';
            if (i + 1 < n && s[i + 1] == '\n') i++;
        } else {
            d[k++] = s[i];
        }
    }
    *out_n = k;
    return d;
}

static int emit_text(Lexer *L, const char *s, size_t n, int line) {
    if (n == 0) return ST_OK;
    size_t k;
    char *d = normalize_newlines(L->a, s, n, &k);
    if (!d) return err_set(L->e, ST_NOMEM, "template: out of memory");
    return push(L, (JTok){.kind = TK_TEXT, .s = d, .n = k, .line = line});
}

/* Where the next tag starts at or after pos, and which ('{', '%', '#'); n if none. */
static size_t next_tag(const Lexer *L, size_t pos, char *which) {
    for (size_t i = pos; i + 1 < L->n; i++) {
        if (L->src[i] == '{' && (L->src[i + 1] == '{' || L->src[i + 1] == '%' || L->src[i + 1] == '#')) {
            *which = L->src[i + 1];
            return i;
        }
    }
    return L->n;
}

/* The text before a tag, its end trimmed by the tag's rules; returns the kept length. */
static size_t trim_before(const Lexer *L, const char *text, size_t n, char which, char sign) {
    if (sign == '-') return n - ju_rspace(text, n);
    if (sign == '+' || which == '{') return n;
    /* lstrip_blocks: only blanks between the line's start and the tag */
    size_t l_pos = 0;
    for (size_t i = n; i > 0; i--)
        if (text[i - 1] == '\n') {
            l_pos = i;
            break;
        }
    if (l_pos == 0 && !L->line_start) return n;
    if (l_pos == n) return n;
    if (ju_lspace(text + l_pos, n - l_pos) == n - l_pos) return l_pos;
    return n;
}

/* After a tag's close at L->pos (just past "%}", "}}" or "#}"): its rules. */
static void trim_after(Lexer *L, char which, char sign) {
    size_t p = L->pos;
    if (sign == '-') {
        p += ju_lspace(L->src + p, L->n - p);
    } else if (sign != '+' && which != '{' && p < L->n && L->src[p] == '\n') {
        p++;                              /* trim_blocks */
    } else if (sign != '+' && which != '{' && p + 1 < L->n && L->src[p] == '\r' && L->src[p + 1] == '\n') {
        p += 2;
    }
    L->line += count_lines(L->src + L->pos, p - L->pos);
    L->line_start = p > 0 && L->src[p - 1] == '\n';
    L->pos = p;
}

static int is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* Append the UTF-8 of code point cp to d. */
static size_t put_utf8(char *d, unsigned cp) {
    if (cp < 0x80) { d[0] = (char)cp; return 1; }
    if (cp < 0x800) { d[0] = (char)(0xC0 | cp >> 6); d[1] = (char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        d[0] = (char)(0xE0 | cp >> 12); d[1] = (char)(0x80 | (cp >> 6 & 63)); d[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    d[0] = (char)(0xF0 | cp >> 18); d[1] = (char)(0x80 | (cp >> 12 & 63));
    d[2] = (char)(0x80 | (cp >> 6 & 63)); d[3] = (char)(0x80 | (cp & 63));
    return 4;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A string literal at L->pos (its quote); Python's escapes decoded. */
static int lex_string(Lexer *L) {
    char q = L->src[L->pos];
    size_t start = L->pos + 1, i = start;
    while (i < L->n && L->src[i] != q) i += L->src[i] == '\\' ? 2 : 1;
    if (i >= L->n) return err_set(L->e, ST_FORMAT, "template line %d: a string is not closed", L->line);
    size_t raw_n = 0;
    char *raw = normalize_newlines(L->a, L->src + start, i - start, &raw_n);
    char *d = ja_alloc(L->a, raw_n * 2 + 1);   /* an escape never grows past twice its text */
    if (!raw || !d) return err_set(L->e, ST_NOMEM, "template: out of memory");
    size_t k = 0;
    for (size_t j = 0; j < raw_n; j++) {
        if (raw[j] != '\\' || j + 1 >= raw_n) {
            d[k++] = raw[j];
            continue;
        }
        char c = raw[++j];
        int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
        if (digits) {
            unsigned cp = 0;
            int ok = j + (size_t)digits < raw_n;
            for (int h = 1; ok && h <= digits; h++) {
                int v = hexval(raw[j + (size_t)h]);
                if (v < 0) ok = 0;
                else cp = cp * 16 + (unsigned)v;
            }
            if (!ok || cp > 0x10FFFF)
                return err_set(L->e, ST_FORMAT, "template line %d: a bad \\%c escape in a string", L->line, c);
            k += put_utf8(d + k, cp);
            j += (size_t)digits;
            continue;
        }
        switch (c) {
        case 'n': d[k++] = '\n'; break;
        case 't': d[k++] = '\t'; break;
        case 'r': d[k++] = '\r'; break;
        case '0': d[k++] = '\0'; break;
        case 'a': d[k++] = '\a'; break;
        case 'b': d[k++] = '\b'; break;
        case 'f': d[k++] = '\f'; break;
        case 'v': d[k++] = '\v'; break;
        case '\\': case '\'': case '"': d[k++] = c; break;
        case '\n': break;                       /* a backslash before a newline joins the lines */
        default: d[k++] = '\\'; d[k++] = c; break;   /* Python keeps unknown escapes as written */
        }
    }
    L->line += count_lines(L->src + start, i - start);
    L->pos = i + 1;
    return push(L, (JTok){.kind = TK_STRING, .s = d, .n = k, .line = L->line});
}

static int lex_number(Lexer *L) {
    size_t i = L->pos;
    char buf[64];
    size_t k = 0;
    int is_float = 0;
    while (i < L->n && (is_digit(L->src[i]) || L->src[i] == '_')) {
        if (L->src[i] != '_' && k < sizeof buf - 1) buf[k++] = L->src[i];
        i++;
    }
    if (i + 1 < L->n && L->src[i] == '.' && is_digit(L->src[i + 1])) {
        is_float = 1;
        buf[k < sizeof buf - 1 ? k++ : k] = '.';
        for (i++; i < L->n && (is_digit(L->src[i]) || L->src[i] == '_'); i++)
            if (L->src[i] != '_' && k < sizeof buf - 1) buf[k++] = L->src[i];
    }
    if (i < L->n && (L->src[i] == 'e' || L->src[i] == 'E')) {
        size_t j = i + 1;
        if (j < L->n && (L->src[j] == '+' || L->src[j] == '-')) j++;
        if (j < L->n && is_digit(L->src[j])) {
            is_float = 1;
            for (; i < j; i++) if (k < sizeof buf - 1) buf[k++] = L->src[i];
            for (; i < L->n && is_digit(L->src[i]); i++) if (k < sizeof buf - 1) buf[k++] = L->src[i];
        }
    }
    buf[k] = 0;
    if (k >= sizeof buf - 1) return err_set(L->e, ST_FORMAT, "template line %d: a number too long", L->line);
    JTok t = {.kind = is_float ? TK_FLOAT : TK_INT, .line = L->line};
    if (is_float) {
        t.f = strtod(buf, NULL);
    } else {
        errno = 0;
        t.i = strtoll(buf, NULL, 10);
        if (errno) return err_set(L->e, ST_FORMAT, "template line %d: the integer %s is out of range", L->line, buf);
    }
    L->pos = i;
    return push(L, t);
}

/* Inside a tag: tokens up to its end marker. which: '{' or '%'. */
static int lex_tag(Lexer *L, char which) {
    const char close = which == '{' ? '}' : '%';
    int depth = 0;
    for (;;) {
        while (L->pos < L->n && (L->src[L->pos] == ' ' || L->src[L->pos] == '\t' || L->src[L->pos] == '\n' ||
                                 L->src[L->pos] == '\r')) {
            L->line += L->src[L->pos] == '\n';
            L->pos++;
        }
        if (L->pos >= L->n)
            return err_set(L->e, ST_FORMAT, "template line %d: a tag is not closed (no %c})", L->line, close);
        const char *s = L->src + L->pos;
        size_t left = L->n - L->pos;
        /* the end: "-%}", "+%}" or "%}" (for {{ }}: "-}}" or "}}"), brackets closed */
        char sign = 0;
        size_t end_len = 0;
        if (depth == 0) {
            if (left >= 3 && (s[0] == '-' || s[0] == '+') && s[1] == close && s[2] == '}') sign = s[0], end_len = 3;
            else if (left >= 2 && s[0] == close && s[1] == '}') end_len = 2;
        }
        if (end_len) {
            int st = push(L, (JTok){.kind = which == '{' ? TK_VAR_END : TK_STMT_END, .line = L->line});
            if (st) return st;
            L->pos += end_len;
            trim_after(L, which, sign);
            return ST_OK;
        }
        int st;
        if (*s == '\'' || *s == '"') {
            st = lex_string(L);
        } else if (is_digit(*s)) {
            st = lex_number(L);
        } else if (is_name_start(*s)) {
            size_t k = 1;
            while (k < left && (is_name_start(s[k]) || is_digit(s[k]))) k++;
            st = push(L, (JTok){.kind = TK_NAME, .s = s, .n = k, .line = L->line});
            L->pos += k;
        } else {
            static const char *const two[] = {"//", "**", "==", "!=", "<=", ">="};
            size_t k = 0;
            for (size_t j = 0; j < sizeof two / sizeof *two; j++)
                if (left >= 2 && s[0] == two[j][0] && s[1] == two[j][1]) k = 2;
            if (!k && strchr("+-*/%~<>=()[]{},.:|", *s)) k = 1;
            if (!k)
                return err_set(L->e, ST_FORMAT, "template line %d: unexpected character '%c' in a tag", L->line, *s);
            if (k == 1 && strchr("([{", *s)) depth++;
            if (k == 1 && strchr(")]}", *s) && depth > 0) depth--;
            st = push(L, (JTok){.kind = TK_OP, .s = s, .n = k, .line = L->line});
            L->pos += k;
        }
        if (st) return st;
    }
}

int jinja_lex(const char *src, size_t n, JArena *a, JTok **toks, int *n_toks, Err *e) {
    if (n > 0 && src[n - 1] == '\n') n--;        /* keep_trailing_newline off */
    Lexer L = {.src = src, .n = n, .line = 1, .a = a, .line_start = 1, .e = e};
    int st = ST_OK;
    while (!st && L.pos < L.n) {
        char which = 0;
        size_t at = next_tag(&L, L.pos, &which);
        const char *text = L.src + L.pos;
        size_t text_n = at - L.pos;
        int text_line = L.line;
        char sign = at + 2 < L.n ? L.src[at + 2] : 0;
        if (sign != '-' && sign != '+') sign = 0;
        if (at < L.n) text_n = trim_before(&L, text, text_n, which, sign);
        st = emit_text(&L, text, text_n, text_line);
        L.line += count_lines(L.src + L.pos, at - L.pos);
        if (st || at >= L.n) break;
        L.pos = at + 2 + (sign ? 1 : 0);
        if (which == '#') {
            const char *end = NULL;
            for (size_t i = L.pos; i + 1 < L.n; i++)
                if (L.src[i] == '#' && L.src[i + 1] == '}') {
                    end = L.src + i;
                    break;
                }
            if (!end) return err_set(e, ST_FORMAT, "template line %d: a comment is not closed (no #})", L.line);
            char csign = end > L.src + L.pos && (end[-1] == '-' || end[-1] == '+') ? end[-1] : 0;
            L.line += count_lines(L.src + L.pos, (size_t)(end - (L.src + L.pos)));
            L.pos = (size_t)(end - L.src) + 2;
            trim_after(&L, '#', csign);
            continue;
        }
        st = push(&L, (JTok){.kind = which == '{' ? TK_VAR_BEGIN : TK_STMT_BEGIN, .line = L.line});
        if (!st) st = lex_tag(&L, which);
    }
    if (!st) st = push(&L, (JTok){.kind = TK_EOF, .line = L.line});
    *toks = L.toks;
    *n_toks = L.n_toks;
    return st;
}
