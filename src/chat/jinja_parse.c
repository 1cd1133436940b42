/* jinja_parse.c - tokens into a tree, by recursive descent.
 *
 * Two grammars meet here. Statements nest by name: {% if %} runs until
 * {% elif %}, {% else %} or {% endif %}; parse_body reads statements until
 * one of the names its caller is waiting for, and hands that name back.
 * Expressions follow jinja2's precedence, loosest first; each level is one
 * function that calls the next:
 *
 *   tuple      a, b                 (only where jinja2 allows one: {{ }}, set, for)
 *   cond       x if c else y
 *   or, and, not
 *   compare    == != < <= > >= in, not in
 *   math1      + -
 *   concat     ~
 *   math2      * / // %
 *   pow        **
 *   unary      -x +x, then postfix (.name [i] [a:b] (args)), then filters
 *              and tests (x | f(args), x is [not] t): a filter binds tighter
 *              than any operator, so a + b | length is a + (b | length)
 *
 * The iterable of a for loop is parsed without the cond level, so that
 * "for m in messages if m.role != 'system'" keeps its "if" as the loop's
 * filter. */
#include "chat/jinja_internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const JTok *t;
    int n, i;
    JArena *a;
    Err *e;
    int depth;
} Parser;

enum { MAX_DEPTH = 200 };      /* nesting of expressions and blocks: a hostile template stays finite */

static const JTok *cur(const Parser *p) { return &p->t[p->i]; }

static int fail(Parser *p, const char *what) {
    const JTok *t = cur(p);
    char got[40];
    if (t->kind == TK_NAME || t->kind == TK_OP) snprintf(got, sizeof got, "'%.*s'", (int)(t->n > 30 ? 30 : t->n), t->s);
    else snprintf(got, sizeof got, "%s",
                  t->kind == TK_EOF ? "the end of the template" : t->kind == TK_STMT_END ? "'%}'"
                  : t->kind == TK_VAR_END ? "'}}'" : t->kind == TK_STRING ? "a string"
                  : t->kind == TK_TEXT ? "text" : "a number");
    return err_set(p->e, ST_FORMAT, "template line %d: %s, got %s", t->line, what, got);
}

static int is_op(const Parser *p, const char *op) {
    const JTok *t = cur(p);
    return t->kind == TK_OP && t->n == strlen(op) && !memcmp(t->s, op, t->n);
}
static int is_name(const Parser *p, const char *name) {
    const JTok *t = cur(p);
    return t->kind == TK_NAME && t->n == strlen(name) && !memcmp(t->s, name, t->n);
}
static int is_name_at(const Parser *p, int k, const char *name) {
    if (p->i + k >= p->n) return 0;
    const JTok *t = &p->t[p->i + k];
    return t->kind == TK_NAME && t->n == strlen(name) && !memcmp(t->s, name, t->n);
}
static int skip_op(Parser *p, const char *op) {
    if (!is_op(p, op)) return 0;
    p->i++;
    return 1;
}
static int skip_name(Parser *p, const char *name) {
    if (!is_name(p, name)) return 0;
    p->i++;
    return 1;
}
static int expect_op(Parser *p, const char *op) {
    if (skip_op(p, op)) return ST_OK;
    char what[32];
    snprintf(what, sizeof what, "expected '%s'", op);
    return fail(p, what);
}
static int expect_end(Parser *p) {
    if (cur(p)->kind == TK_STMT_END) {
        p->i++;
        return ST_OK;
    }
    return fail(p, "expected the end of the statement");
}

static JNode *node(Parser *p, JNodeKind k, int line) {
    JNode *x = ja_alloc(p->a, sizeof *x);
    if (x) {
        x->kind = k;
        x->line = line;
    }
    return x;
}
static int nomem(Parser *p) { return err_set(p->e, ST_NOMEM, "template: out of memory"); }

/* A growing array of node pointers, in the arena. */
typedef struct {
    JNode **v;
    int n, cap;
} Vec;
static int vec_push(Parser *p, Vec *v, JNode *x) {
    if (v->n == v->cap) {
        int cap = v->cap ? 2 * v->cap : 4;
        JNode **grown = ja_alloc(p->a, (size_t)cap * sizeof *grown);
        if (!grown) return nomem(p);
        if (v->n) memcpy(grown, v->v, (size_t)v->n * sizeof *grown);
        v->v = grown;
        v->cap = cap;
    }
    v->v[v->n++] = x;
    return ST_OK;
}

static char *name_of(Parser *p, const JTok *t) { return ja_strndup(p->a, t->s, t->n); }

static int parse_expr(Parser *p, int with_cond, JNode **out);
static int parse_unary(Parser *p, int with_filter, JNode **out);

/* Call arguments after "(": positional, then name=value; up to ")". */
static int parse_args(Parser *p, JNode *call) {
    Vec pos = {0}, kv = {0};
    const char **names = NULL;
    int n_names = 0;
    while (!skip_op(p, ")")) {
        if (pos.n + kv.n > 0 && expect_op(p, ",")) return ST_FORMAT;
        if (skip_op(p, ")")) break;                  /* a trailing comma */
        if (cur(p)->kind == TK_NAME && p->i + 1 < p->n && p->t[p->i + 1].kind == TK_OP &&
            p->t[p->i + 1].n == 1 && p->t[p->i + 1].s[0] == '=') {
            const char **grown = ja_alloc(p->a, (size_t)(n_names + 1) * sizeof *grown);
            if (!grown) return nomem(p);
            if (n_names) memcpy(grown, names, (size_t)n_names * sizeof *grown);
            names = grown;
            if (!(names[n_names++] = name_of(p, cur(p)))) return nomem(p);
            p->i += 2;
            JNode *v;
            if (parse_expr(p, 1, &v) || vec_push(p, &kv, v)) return ST_FORMAT;
        } else {
            if (kv.n) return fail(p, "a positional argument after a keyword argument");
            JNode *v;
            if (parse_expr(p, 1, &v) || vec_push(p, &pos, v)) return ST_FORMAT;
        }
    }
    call->args = pos.v;
    call->n_args = pos.n;
    call->kw_names = names;
    call->kw_vals = kv.v;
    call->n_kw = kv.n;
    return ST_OK;
}

/* Items up to the closing bracket, comma separated (a trailing comma allowed). */
static int parse_items(Parser *p, const char *close, Vec *items) {
    while (!skip_op(p, close)) {
        if (items->n > 0 && expect_op(p, ",")) return ST_FORMAT;
        if (skip_op(p, close)) break;
        JNode *v;
        if (parse_expr(p, 1, &v) || vec_push(p, items, v)) return ST_FORMAT;
    }
    return ST_OK;
}

static int parse_primary(Parser *p, JNode **out) {
    const JTok *t = cur(p);
    int line = t->line;
    JNode *x = NULL;
    if (t->kind == TK_NAME) {
        static const char *const consts[] = {"true", "True", "false", "False", "none", "None"};
        int which = -1;
        for (int k = 0; k < 6; k++) if (is_name(p, consts[k])) which = k;
        p->i++;
        if (which >= 0) {
            if (!(x = node(p, E_LIT, line))) return nomem(p);
            x->lit = which < 2 ? jv_bool(1) : which < 4 ? jv_bool(0) : jv_none();
        } else {
            if (!(x = node(p, E_NAME, line)) || !(x->name = name_of(p, t))) return nomem(p);
        }
    } else if (t->kind == TK_STRING) {
        /* adjacent strings join: "a" "b" is "ab" */
        size_t n = 0;
        int k = p->i;
        for (; k < p->n && p->t[k].kind == TK_STRING; k++) n += p->t[k].n;
        char *s = ja_alloc(p->a, n + 1);
        if (!s || !(x = node(p, E_LIT, line))) return nomem(p);
        size_t at = 0;
        for (; p->i < k; p->i++) {
            memcpy(s + at, p->t[p->i].s, p->t[p->i].n);
            at += p->t[p->i].n;
        }
        x->lit = jv_str(s, n, NULL);
    } else if (t->kind == TK_INT || t->kind == TK_FLOAT) {
        if (!(x = node(p, E_LIT, line))) return nomem(p);
        x->lit = t->kind == TK_INT ? jv_int(t->i) : jv_float(t->f);
        p->i++;
    } else if (skip_op(p, "(")) {
        if (skip_op(p, ")")) {
            if (!(x = node(p, E_TUPLE, line))) return nomem(p);
        } else {
            JNode *first;
            if (parse_expr(p, 1, &first)) return ST_FORMAT;
            if (is_op(p, ",")) {
                Vec items = {0};
                if (vec_push(p, &items, first)) return ST_FORMAT;
                while (skip_op(p, ",")) {
                    if (is_op(p, ")")) break;
                    JNode *v;
                    if (parse_expr(p, 1, &v) || vec_push(p, &items, v)) return ST_FORMAT;
                }
                if (!(x = node(p, E_TUPLE, line))) return nomem(p);
                x->args = items.v;
                x->n_args = items.n;
            } else {
                x = first;
            }
            if (expect_op(p, ")")) return ST_FORMAT;
        }
    } else if (skip_op(p, "[")) {
        Vec items = {0};
        if (parse_items(p, "]", &items)) return ST_FORMAT;
        if (!(x = node(p, E_LIST, line))) return nomem(p);
        x->args = items.v;
        x->n_args = items.n;
    } else if (skip_op(p, "{")) {
        Vec keys = {0}, vals = {0};
        while (!skip_op(p, "}")) {
            if (keys.n > 0 && expect_op(p, ",")) return ST_FORMAT;
            if (skip_op(p, "}")) break;
            JNode *k, *v;
            if (parse_expr(p, 1, &k) || expect_op(p, ":") || parse_expr(p, 1, &v)) return ST_FORMAT;
            if (vec_push(p, &keys, k) || vec_push(p, &vals, v)) return ST_FORMAT;
        }
        if (!(x = node(p, E_DICT, line))) return nomem(p);
        x->args = keys.v;
        x->n_args = keys.n;
        x->kw_vals = vals.v;
        x->n_kw = vals.n;
    } else {
        return fail(p, "expected a value");
    }
    *out = x;
    return ST_OK;
}

/* .name, [index], [a:b:c], (args) after a value. */
static int parse_postfix(Parser *p, JNode **x) {
    for (;;) {
        int line = cur(p)->line;
        if (skip_op(p, ".")) {
            JNode *y;
            if (cur(p)->kind == TK_NAME) {
                if (!(y = node(p, E_ATTR, line)) || !(y->name = name_of(p, cur(p)))) return nomem(p);
            } else if (cur(p)->kind == TK_INT) {           /* x.0 is x[0] */
                JNode *k = node(p, E_LIT, line);
                if (!(y = node(p, E_ITEM, line)) || !k) return nomem(p);
                k->lit = jv_int(cur(p)->i);
                y->b = k;
            } else {
                return fail(p, "expected a name after '.'");
            }
            p->i++;
            y->a = *x;
            *x = y;
        } else if (skip_op(p, "[")) {
            JNode *part[3] = {NULL, NULL, NULL};
            int colons = 0;
            for (;;) {
                if (is_op(p, ":")) {
                    if (++colons > 2) return fail(p, "a slice has at most two ':'");
                    p->i++;
                    continue;
                }
                if (is_op(p, "]")) break;
                if (part[colons]) return fail(p, "expected ':' or ']'");
                if (parse_expr(p, 1, &part[colons])) return ST_FORMAT;
            }
            p->i++;
            JNode *y;
            if (colons == 0) {
                if (!part[0]) return fail(p, "an empty subscript");
                if (!(y = node(p, E_ITEM, line))) return nomem(p);
                y->b = part[0];
            } else {
                if (!(y = node(p, E_SLICE, line)) || !(y->args = ja_alloc(p->a, 3 * sizeof *y->args))) return nomem(p);
                memcpy(y->args, part, sizeof part);
                y->n_args = 3;
            }
            y->a = *x;
            *x = y;
        } else if (skip_op(p, "(")) {
            JNode *y = node(p, E_CALL, line);
            if (!y) return nomem(p);
            y->a = *x;
            if (parse_args(p, y)) return ST_FORMAT;
            *x = y;
        } else {
            return ST_OK;
        }
    }
}

/* name(args) of a filter (after its '|'), applied to *x. */
static int parse_one_filter(Parser *p, JNode **x) {
    if (cur(p)->kind != TK_NAME) return fail(p, "expected a filter name");
    JNode *y = node(p, E_FILTER, cur(p)->line);
    if (!y || !(y->name = name_of(p, cur(p)))) return nomem(p);
    p->i++;
    if (skip_op(p, "(") && parse_args(p, y)) return ST_FORMAT;
    y->a = *x;
    *x = y;
    return ST_OK;
}

/* | filter(args) and is [not] test(args), as many as follow. */
static int parse_filters(Parser *p, JNode **x) {
    for (;;) {
        int line = cur(p)->line;
        if (skip_op(p, "|")) {
            if (parse_one_filter(p, x)) return ST_FORMAT;
        } else if (skip_name(p, "is")) {
            JNode *y = node(p, E_TEST, line);
            if (!y) return nomem(p);
            if (skip_name(p, "not")) y->op = "not";
            if (cur(p)->kind != TK_NAME) return fail(p, "expected a test name after 'is'");
            if (!(y->name = name_of(p, cur(p)))) return nomem(p);
            p->i++;
            const JTok *t = cur(p);
            if (skip_op(p, "(")) {
                if (parse_args(p, y)) return ST_FORMAT;
            } else if ((t->kind == TK_NAME || t->kind == TK_STRING || t->kind == TK_INT || t->kind == TK_FLOAT ||
                        is_op(p, "[") || is_op(p, "{")) &&
                       !is_name(p, "else") && !is_name(p, "or") && !is_name(p, "and") && !is_name(p, "is") &&
                       !is_name(p, "if") && !is_name(p, "in") && !is_name(p, "not")) {
                /* one argument without parentheses: x is divisibleby 3 */
                JNode *arg;
                if (parse_primary(p, &arg) || parse_postfix(p, &arg)) return ST_FORMAT;
                if (!(y->args = ja_alloc(p->a, sizeof *y->args))) return nomem(p);
                y->args[0] = arg;
                y->n_args = 1;
            }
            y->a = *x;
            *x = y;
        } else {
            return ST_OK;
        }
    }
}

static int parse_unary(Parser *p, int with_filter, JNode **out) {
    if (++p->depth > MAX_DEPTH) return fail(p, "expressions nested too deep");
    int line = cur(p)->line;
    JNode *x;
    if (is_op(p, "-") || is_op(p, "+")) {
        JNodeKind k = is_op(p, "-") ? E_NEG : E_POS;
        p->i++;
        JNode *operand;
        if (parse_unary(p, 0, &operand)) return ST_FORMAT;
        if (!(x = node(p, k, line))) return nomem(p);
        x->a = operand;
    } else if (parse_primary(p, &x)) {
        return ST_FORMAT;
    }
    if (parse_postfix(p, &x)) return ST_FORMAT;
    if (with_filter && parse_filters(p, &x)) return ST_FORMAT;
    p->depth--;
    *out = x;
    return ST_OK;
}

static JNode *binary(Parser *p, const char *op, JNode *a, JNode *b, int line) {
    JNode *x = node(p, E_BIN, line);
    if (x) {
        x->op = op;
        x->a = a;
        x->b = b;
    }
    return x;
}

/* One level of left-associative binary operators: ops (a NULL-ended list) over next. */
static int parse_level(Parser *p, const char *const *ops, int (*next)(Parser *, JNode **), JNode **out) {
    JNode *x;
    if (next(p, &x)) return ST_FORMAT;
    for (;;) {
        const char *op = NULL;
        for (int k = 0; ops[k]; k++) if (is_op(p, ops[k])) op = ops[k];
        if (!op) break;
        int line = cur(p)->line;
        p->i++;
        JNode *y;
        if (next(p, &y)) return ST_FORMAT;
        if (!(x = binary(p, op, x, y, line))) return nomem(p);
    }
    *out = x;
    return ST_OK;
}

static int parse_pow_unary(Parser *p, JNode **out) { return parse_unary(p, 1, out); }
static int parse_pow(Parser *p, JNode **out) {
    static const char *const ops[] = {"**", NULL};
    return parse_level(p, ops, parse_pow_unary, out);
}
static int parse_math2(Parser *p, JNode **out) {
    static const char *const ops[] = {"*", "/", "//", "%", NULL};
    return parse_level(p, ops, parse_pow, out);
}
static int parse_concat(Parser *p, JNode **out) {
    static const char *const ops[] = {"~", NULL};
    return parse_level(p, ops, parse_math2, out);
}
static int parse_math1(Parser *p, JNode **out) {
    static const char *const ops[] = {"+", "-", NULL};
    return parse_level(p, ops, parse_concat, out);
}

/* a < b < c is (a < b) and (b < c), as in Python. */
static int parse_compare(Parser *p, JNode **out) {
    JNode *x, *left;
    if (parse_math1(p, &x)) return ST_FORMAT;
    left = x;
    JNode *chain = NULL;
    for (;;) {
        static const char *const ops[] = {"==", "!=", "<", "<=", ">", ">=", NULL};
        const char *op = NULL;
        int line = cur(p)->line;
        for (int k = 0; ops[k]; k++) if (is_op(p, ops[k])) op = ops[k];
        if (op) p->i++;
        else if (skip_name(p, "in")) op = "in";
        else if (is_name(p, "not") && is_name_at(p, 1, "in")) op = "not in", p->i += 2;
        else break;
        JNode *right, *cmp;
        if (parse_math1(p, &right)) return ST_FORMAT;
        if (!(cmp = binary(p, op, left, right, line))) return nomem(p);
        if (chain) {
            JNode *both = node(p, E_AND, line);
            if (!both) return nomem(p);
            both->a = chain;
            both->b = cmp;
            chain = both;
        } else {
            chain = cmp;
        }
        left = right;
    }
    *out = chain ? chain : x;
    return ST_OK;
}

static int parse_not(Parser *p, JNode **out) {
    int line = cur(p)->line;
    if (is_name(p, "not") && !is_name_at(p, 1, "in")) {
        p->i++;
        JNode *x = node(p, E_NOT, line);
        if (!x) return nomem(p);
        if (++p->depth > MAX_DEPTH) return fail(p, "expressions nested too deep");
        if (parse_not(p, &x->a)) return ST_FORMAT;
        p->depth--;
        *out = x;
        return ST_OK;
    }
    return parse_compare(p, out);
}

static int parse_logic(Parser *p, const char *word, JNodeKind k, int (*next)(Parser *, JNode **), JNode **out) {
    JNode *x;
    if (next(p, &x)) return ST_FORMAT;
    while (is_name(p, word)) {
        int line = cur(p)->line;
        p->i++;
        JNode *y = node(p, k, line);
        if (!y) return nomem(p);
        y->a = x;
        if (next(p, &y->b)) return ST_FORMAT;
        x = y;
    }
    *out = x;
    return ST_OK;
}
static int parse_and(Parser *p, JNode **out) { return parse_logic(p, "and", E_AND, parse_not, out); }
static int parse_or(Parser *p, JNode **out) { return parse_logic(p, "or", E_OR, parse_and, out); }

/* An expression; with_cond 0 leaves a trailing "if" to the caller (for loops). */
static int parse_expr(Parser *p, int with_cond, JNode **out) {
    JNode *x;
    if (parse_or(p, &x)) return ST_FORMAT;
    while (with_cond && is_name(p, "if")) {
        JNode *y = node(p, E_COND, cur(p)->line);
        if (!y) return nomem(p);
        p->i++;
        y->b = x;
        if (parse_or(p, &y->a)) return ST_FORMAT;
        if (skip_name(p, "else") && parse_expr(p, 1, &y->c)) return ST_FORMAT;
        x = y;
    }
    *out = x;
    return ST_OK;
}

/* a, b, c without brackets (where jinja2 allows it): one value, or a tuple. */
static int parse_tuple(Parser *p, int with_cond, JNode **out) {
    int line = cur(p)->line;
    JNode *x;
    if (parse_expr(p, with_cond, &x)) return ST_FORMAT;
    if (!is_op(p, ",")) {
        *out = x;
        return ST_OK;
    }
    Vec items = {0};
    if (vec_push(p, &items, x)) return ST_FORMAT;
    while (skip_op(p, ",")) {
        if (cur(p)->kind == TK_STMT_END || cur(p)->kind == TK_VAR_END || is_op(p, "=") || is_name(p, "in")) break;
        if (parse_expr(p, with_cond, &x) || vec_push(p, &items, x)) return ST_FORMAT;
    }
    JNode *t = node(p, E_TUPLE, line);
    if (!t) return nomem(p);
    t->args = items.v;
    t->n_args = items.n;
    *out = t;
    return ST_OK;
}

/* What a set or a for assigns to: a name, ns.attr, or names separated by commas. */
static int parse_target(Parser *p, int allow_attr, JNode **out) {
    int line = cur(p)->line;
    Vec names = {0};
    do {
        if (cur(p)->kind != TK_NAME) return fail(p, "expected a name to assign to");
        JNode *x = node(p, E_NAME, cur(p)->line);
        if (!x || !(x->name = name_of(p, cur(p)))) return nomem(p);
        p->i++;
        if (allow_attr && names.n == 0 && is_op(p, ".")) {
            p->i++;
            if (cur(p)->kind != TK_NAME) return fail(p, "expected a name after '.'");
            JNode *y = node(p, E_ATTR, line);
            if (!y || !(y->name = name_of(p, cur(p)))) return nomem(p);
            p->i++;
            y->a = x;
            *out = y;
            return ST_OK;
        }
        if (vec_push(p, &names, x)) return ST_FORMAT;
    } while (skip_op(p, ","));
    if (names.n == 1) {
        *out = names.v[0];
        return ST_OK;
    }
    JNode *t = node(p, E_TUPLE, line);
    if (!t) return nomem(p);
    t->args = names.v;
    t->n_args = names.n;
    *out = t;
    return ST_OK;
}

static int parse_body(Parser *p, const char *const *ends, Vec *body, const char **found);

/* The body of a block statement up to one of ends (consumed, with its %}). */
static int parse_block(Parser *p, const char *const *ends, JNode ***body, int *n, const char **found) {
    Vec v = {0};
    if (++p->depth > MAX_DEPTH) return fail(p, "blocks nested too deep");
    if (parse_body(p, ends, &v, found)) return ST_FORMAT;
    p->depth--;
    *body = v.v;
    *n = v.n;
    return ST_OK;
}

static int parse_if(Parser *p, int line, JNode **out) {
    JNode *x = node(p, N_IF, line);
    if (!x) return nomem(p);
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    const char *found;
    if (parse_tuple(p, 1, &x->a) || expect_end(p) || parse_block(p, ends, &x->body, &x->n_body, &found))
        return ST_FORMAT;
    if (!strcmp(found, "elif")) {
        JNode *inner;
        if (parse_if(p, cur(p)->line, &inner)) return ST_FORMAT;
        if (!(x->body2 = ja_alloc(p->a, sizeof *x->body2))) return nomem(p);
        x->body2[0] = inner;
        x->n_body2 = 1;
    } else if (!strcmp(found, "else")) {
        static const char *const endif[] = {"endif", NULL};
        if (expect_end(p) || parse_block(p, endif, &x->body2, &x->n_body2, &found) || expect_end(p)) return ST_FORMAT;
    } else if (expect_end(p)) {
        return ST_FORMAT;
    }
    *out = x;
    return ST_OK;
}

static int parse_for(Parser *p, int line, JNode **out) {
    JNode *x = node(p, N_FOR, line);
    if (!x) return nomem(p);
    if (parse_target(p, 0, &x->a)) return ST_FORMAT;
    if (!skip_name(p, "in")) return fail(p, "expected 'in' in a for loop");
    if (parse_tuple(p, 0, &x->b)) return ST_FORMAT;
    if (skip_name(p, "if") && parse_expr(p, 1, &x->c)) return ST_FORMAT;
    if (skip_name(p, "recursive")) return fail(p, "recursive loops are not supported");
    static const char *const ends[] = {"else", "endfor", NULL};
    const char *found;
    if (expect_end(p) || parse_block(p, ends, &x->body, &x->n_body, &found) || expect_end(p)) return ST_FORMAT;
    if (!strcmp(found, "else")) {
        static const char *const endfor[] = {"endfor", NULL};
        if (parse_block(p, endfor, &x->body2, &x->n_body2, &found) || expect_end(p)) return ST_FORMAT;
    }
    *out = x;
    return ST_OK;
}

static int parse_set(Parser *p, int line, JNode **out) {
    JNode *target;
    if (parse_target(p, 1, &target)) return ST_FORMAT;
    JNode *x;
    if (skip_op(p, "=")) {
        if (!(x = node(p, N_SET, line))) return nomem(p);
        x->a = target;
        if (parse_tuple(p, 1, &x->b) || expect_end(p)) return ST_FORMAT;
    } else {
        /* {% set x %}...{% endset %}, optionally {% set x | filter %} */
        if (!(x = node(p, N_SET_BLOCK, line))) return nomem(p);
        x->a = target;
        if (is_op(p, "|")) {
            JNode *f = NULL;
            JNode *hole = node(p, E_LIT, line);     /* stands for the body's text */
            if (!hole) return nomem(p);
            hole->lit = jv_undef(NULL);
            f = hole;
            if (parse_filters(p, &f)) return ST_FORMAT;
            x->b = f;
            x->c = hole;
        }
        static const char *const ends[] = {"endset", NULL};
        const char *found;
        if (expect_end(p) || parse_block(p, ends, &x->body, &x->n_body, &found) || expect_end(p)) return ST_FORMAT;
    }
    *out = x;
    return ST_OK;
}

static int parse_macro(Parser *p, int line, JNode **out) {
    JNode *x = node(p, N_MACRO, line);
    if (!x) return nomem(p);
    if (cur(p)->kind != TK_NAME) return fail(p, "expected the macro's name");
    if (!(x->name = name_of(p, cur(p)))) return nomem(p);
    p->i++;
    if (expect_op(p, "(")) return ST_FORMAT;
    Vec params = {0};
    while (!skip_op(p, ")")) {
        if (params.n > 0 && expect_op(p, ",")) return ST_FORMAT;
        if (cur(p)->kind != TK_NAME) return fail(p, "expected a parameter name");
        JNode *param = node(p, E_NAME, cur(p)->line);
        if (!param || !(param->name = name_of(p, cur(p)))) return nomem(p);
        p->i++;
        if (skip_op(p, "=") && parse_expr(p, 1, &param->a)) return ST_FORMAT;
        if (vec_push(p, &params, param)) return ST_FORMAT;
    }
    x->args = params.v;
    x->n_args = params.n;
    static const char *const ends[] = {"endmacro", NULL};
    const char *found;
    if (expect_end(p) || parse_block(p, ends, &x->body, &x->n_body, &found)) return ST_FORMAT;
    if (cur(p)->kind == TK_NAME) p->i++;              /* {% endmacro name %} */
    if (expect_end(p)) return ST_FORMAT;
    *out = x;
    return ST_OK;
}

static int parse_statement(Parser *p, JNode **out) {
    const JTok *t = cur(p);
    int line = t->line;
    if (t->kind != TK_NAME) return fail(p, "expected a statement name");
    p->i++;
    static const char *const simple[] = {"break", "continue"};
    for (int k = 0; k < 2; k++)
        if (t->n == strlen(simple[k]) && !memcmp(t->s, simple[k], t->n)) {
            if (!(*out = node(p, k ? N_CONTINUE : N_BREAK, line))) return nomem(p);
            return expect_end(p);
        }
#define IS(word) (t->n == sizeof word - 1 && !memcmp(t->s, word, t->n))
    if (IS("if")) return parse_if(p, line, out);
    if (IS("for")) return parse_for(p, line, out);
    if (IS("set")) return parse_set(p, line, out);
    if (IS("macro")) return parse_macro(p, line, out);
    if (IS("generation")) {
        JNode *x = node(p, N_BLOCK, line);
        static const char *const ends[] = {"endgeneration", NULL};
        const char *found;
        if (!x) return nomem(p);
        if (expect_end(p) || parse_block(p, ends, &x->body, &x->n_body, &found) || expect_end(p)) return ST_FORMAT;
        *out = x;
        return ST_OK;
    }
    if (IS("filter")) {
        JNode *x = node(p, N_FILTER_BLOCK, line);
        if (!x) return nomem(p);
        JNode *hole = node(p, E_LIT, line), *f;
        if (!hole) return nomem(p);
        hole->lit = jv_undef(NULL);
        f = hole;
        int st = parse_one_filter(p, &f);
        if (st) return st;
        x->b = f;
        x->c = hole;
        static const char *const ends[] = {"endfilter", NULL};
        const char *found;
        if (expect_end(p) || parse_block(p, ends, &x->body, &x->n_body, &found) || expect_end(p)) return ST_FORMAT;
        *out = x;
        return ST_OK;
    }
#undef IS
    p->i--;
    char what[80];
    snprintf(what, sizeof what, "unknown statement '%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s);
    return fail(p, what);
}

static int parse_body(Parser *p, const char *const *ends, Vec *body, const char **found) {
    for (;;) {
        const JTok *t = cur(p);
        JNode *x = NULL;
        if (t->kind == TK_EOF) {
            if (!ends) return ST_OK;
            char what[64];
            snprintf(what, sizeof what, "expected {%% %s %%} before the end", ends[0]);
            return fail(p, what);
        }
        if (t->kind == TK_TEXT) {
            if (!(x = node(p, N_TEXT, t->line))) return nomem(p);
            x->lit = jv_str(t->s, t->n, NULL);
            p->i++;
        } else if (t->kind == TK_VAR_BEGIN) {
            p->i++;
            if (!(x = node(p, N_OUTPUT, t->line))) return nomem(p);
            if (parse_tuple(p, 1, &x->a)) return ST_FORMAT;
            if (cur(p)->kind != TK_VAR_END) return fail(p, "expected '}}'");
            p->i++;
        } else if (t->kind == TK_STMT_BEGIN) {
            p->i++;
            for (int k = 0; ends && ends[k]; k++)
                if (is_name(p, ends[k])) {
                    *found = ends[k];
                    p->i++;
                    return ST_OK;
                }
            if (parse_statement(p, &x)) return ST_FORMAT;
        } else {
            return fail(p, "unexpected token");
        }
        if (vec_push(p, body, x)) return ST_FORMAT;
    }
}

int jinja_parse_tokens(JTemplate *t, const JTok *toks, int n_toks, Err *e) {
    Parser p = {.t = toks, .n = n_toks, .a = &t->arena, .e = e};
    Vec body = {0};
    const char *found = NULL;
    int st = parse_body(&p, NULL, &body, &found);
    if (st) return t->arena.over ? err_set(e, ST_NOMEM, "template: out of memory") : st;
    t->body = body.v;
    t->n_body = body.n;
    return ST_OK;
}

int jinja_parse(const char *src, size_t n, JTemplate **out, Err *e) {
    *out = NULL;
    JTemplate *t = calloc(1, sizeof *t);
    if (!t) return err_set(e, ST_NOMEM, "template: out of memory");
    t->arena.cap = (size_t)64 << 20;
    JTok *toks;
    int n_toks;
    int st = jinja_lex(src, n, &t->arena, &toks, &n_toks, e);
    if (!st) st = jinja_parse_tokens(t, toks, n_toks, e);
    if (st) {
        jinja_free(t);
        return st;
    }
    *out = t;
    return ST_OK;
}

void jinja_free(JTemplate *t) {
    if (!t) return;
    ja_free(&t->arena);
    free(t);
}
