/* jinja_eval.c - the tree run over the variables, into text.
 *
 * A tree-walking interpreter: exec() runs a statement, eval() computes an
 * expression. Both read like the grammar they walk; the Python behaviour
 * of each operation is in jinja_builtins.c, the values in jinja_value.c.
 *
 * Scopes are jinja2's, and they matter to real templates:
 *  - each pass of a for loop gets a scope of its own: a {% set %} in the
 *    body is gone after the pass (and the name from before the loop is seen
 *    again), which is why templates carry state out of loops in
 *    namespace() objects: {% set ns.found = true %} changes the object,
 *    not a name;
 *  - {% if %} makes no scope: a set there is a set where the if is;
 *  - a macro runs in a scope whose parent is the template's top level, not
 *    its caller's scope.
 * A name is looked up from the innermost scope out, then among the render's
 * variables, then the global functions (range, namespace, raise_exception,
 * strftime_now ...); missing everywhere, it is undefined (not an error).
 *
 * Everything a render makes lives in one arena freed at its end, and three
 * limits keep any template finite: output bytes, memory and steps (a step
 * is one statement or expression). A loop over range(10**12) fails with a
 * message instead of running for days. */
#include "chat/jinja_internal.h"
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Scope Scope;
struct Scope {
    Scope *parent;
    JDict *vars;
};

struct JVars {
    JArena arena;              /* the values, kept as JSON's become them */
    JDict *d;
};

typedef struct {
    JCtx c;                    /* first: builtins take a JCtx * */
    const JDict *vars;
    Scope *root;
    JBuf *out;                 /* where text goes now (a macro or a set block captures) */
    const JNode *hole;         /* in a filter block: the node that stands for its text */
    JVal hole_val;
    int depth;                 /* macro calls in progress */
} Eval;

enum { MAX_CALL_DEPTH = 64 };
enum { FLOW_NEXT = 0, FLOW_BREAK = 1, FLOW_CONTINUE = 2, FLOW_ERROR = -1 };

int jinja_fail(JCtx *c, const char *fmt, ...) {
    if (c->failed) return -1;
    c->failed = 1;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    err_set(c->e, ST_ARG, "template line %d: %s", c->line, msg);
    return -1;
}

static int out_of_memory(JCtx *c) {
    return jinja_fail(c, "the template went over its memory limit (%zu bytes)", c->lim->max_memory);
}

int jinja_to_str(JCtx *c, JVal v, JVal *out) {
    if (v.k == JV_STR) {
        *out = v;
        return 0;
    }
    JBuf b;
    jb_init(&b, c->a, c->lim->max_output);
    jb_str(&b, v);
    if (b.failed) return out_of_memory(c);
    *out = jb_val(&b);
    return 0;
}

/* ---- scopes ---- */

static Scope *scope_new(Eval *ev, Scope *parent) {
    Scope *s = ja_alloc(ev->c.a, sizeof *s);
    if (!s || !(s->vars = jv_dict_new(ev->c.a, 4))) return NULL;
    s->parent = parent;
    return s;
}

static int scope_set(Eval *ev, Scope *s, const char *name, JVal v) {
    if (jv_dict_set(ev->c.a, s->vars, jv_str(name, strlen(name), NULL), v)) return out_of_memory(&ev->c);
    return 0;
}

static JVal lookup(Eval *ev, const Scope *s, const char *name) {
    size_t n = strlen(name);
    for (; s; s = s->parent) {
        const JVal *v = jv_dict_get(s->vars, name, n);
        if (v) return *v;
    }
    const JVal *v = jv_dict_get(ev->vars, name, n);
    if (v) return *v;
    int fn = jinja_func_id(name);
    if (fn >= 0) {
        JVal f = {.k = JV_FUNC};
        f.fn = fn;
        return f;
    }
    return jv_undef(name);
}

/* ---- expressions ---- */

static int eval(Eval *ev, Scope *s, const JNode *x, JVal *out);
static int exec_body(Eval *ev, Scope *s, JNode *const *body, int n);

static int step(Eval *ev, const JNode *x) {
    ev->c.line = x->line;
    if (++ev->c.steps > ev->c.lim->max_steps)
        return jinja_fail(&ev->c, "the template ran more than %ld steps", ev->c.lim->max_steps);
    return 0;
}

static int undefined_error(Eval *ev, JVal v) {
    if (v.undef && !strncmp(v.undef, "access to", 9)) return jinja_fail(&ev->c, "%s", v.undef);
    if (v.undef) return jinja_fail(&ev->c, "'%s' is undefined", v.undef);
    return jinja_fail(&ev->c, "a value is undefined");
}

/* Positional and keyword arguments of a call, filter or test, evaluated. */
static int eval_args(Eval *ev, Scope *s, const JNode *x, JArgs *args) {
    *args = (JArgs){.n_pos = x->n_args, .kw_names = x->kw_names, .n_kw = x->n_kw};
    if ((x->n_args && !(args->pos = ja_alloc(ev->c.a, (size_t)x->n_args * sizeof *args->pos))) ||
        (x->n_kw && !(args->kw = ja_alloc(ev->c.a, (size_t)x->n_kw * sizeof *args->kw))))
        return out_of_memory(&ev->c);
    for (int i = 0; i < x->n_args; i++) if (eval(ev, s, x->args[i], &args->pos[i])) return -1;
    for (int i = 0; i < x->n_kw; i++) if (eval(ev, s, x->kw_vals[i], &args->kw[i])) return -1;
    return 0;
}

/* A macro called: its parameters bound in a scope under the top level, its
 * body rendered to a string, which is the call's value. */
static int call_macro(Eval *ev, const JNode *m, const JArgs *args, JVal *out) {
    if (ev->depth >= MAX_CALL_DEPTH) return jinja_fail(&ev->c, "macros call each other more than %d deep", MAX_CALL_DEPTH);
    Scope *s = scope_new(ev, ev->root);
    if (!s) return out_of_memory(&ev->c);
    JList *varargs = jv_list_new(ev->c.a, 0);
    JDict *kwargs = jv_dict_new(ev->c.a, 0);
    if (!varargs || !kwargs) return out_of_memory(&ev->c);
    for (int i = 0; i < args->n_pos; i++) {
        if (i < m->n_args) {
            if (scope_set(ev, s, m->args[i]->name, args->pos[i])) return -1;
        } else if (jv_list_push(ev->c.a, varargs, args->pos[i])) {
            return out_of_memory(&ev->c);
        }
    }
    for (int k = 0; k < args->n_kw; k++) {
        int found = 0;
        for (int i = 0; i < m->n_args; i++)
            if (!strcmp(m->args[i]->name, args->kw_names[k])) found = 1;
        if (found) {
            if (scope_set(ev, s, args->kw_names[k], args->kw[k])) return -1;
        } else if (jv_dict_set(ev->c.a, kwargs, jv_str(args->kw_names[k], strlen(args->kw_names[k]), NULL),
                               args->kw[k])) {
            return out_of_memory(&ev->c);
        }
    }
    for (int i = 0; i < m->n_args; i++) {
        const char *name = m->args[i]->name;
        if (jv_dict_get(s->vars, name, strlen(name))) continue;
        JVal v = jv_undef(name);
        if (m->args[i]->a && eval(ev, s, m->args[i]->a, &v)) return -1;
        if (scope_set(ev, s, name, v)) return -1;
    }
    JVal vl = {.k = JV_LIST}, vd = {.k = JV_DICT};
    vl.l = varargs;
    vd.d = kwargs;
    if (scope_set(ev, s, "varargs", vl) || scope_set(ev, s, "kwargs", vd)) return -1;
    JBuf buf, *saved = ev->out;
    jb_init(&buf, ev->c.a, ev->c.lim->max_output);
    ev->out = &buf;
    ev->depth++;
    int flow = exec_body(ev, s, m->body, m->n_body);
    ev->depth--;
    ev->out = saved;
    if (flow < 0) return -1;
    if (buf.failed) return jinja_fail(&ev->c, "a macro's text is over the output limit");
    *out = jb_val(&buf);
    return 0;
}

static int eval_call(Eval *ev, Scope *s, const JNode *x, JVal *out) {
    JVal f;
    if (eval(ev, s, x->a, &f)) return -1;
    JArgs args;
    if (eval_args(ev, s, x, &args)) return -1;
    ev->c.line = x->line;
    switch (f.k) {
    case JV_MACRO: return call_macro(ev, f.macro, &args, out);
    case JV_FUNC: return jinja_call_func(&ev->c, f.fn, &args, out);
    case JV_METHOD: return jinja_call_method(&ev->c, f.m, &args, out);
    case JV_UNDEF: return undefined_error(ev, f);
    default: return jinja_fail(&ev->c, "'%s' object is not callable", jv_type_name(f));
    }
}

static int eval_slice(Eval *ev, Scope *s, const JNode *x, JVal *out) {
    JVal v;
    long long part[3] = {0, 0, 1};
    int given[3] = {0, 0, 0};
    if (eval(ev, s, x->a, &v)) return -1;
    for (int k = 0; k < 3; k++) {
        if (!x->args[k]) continue;
        JVal p;
        if (eval(ev, s, x->args[k], &p)) return -1;
        if (p.k == JV_NONE) continue;
        if (p.k != JV_INT && p.k != JV_BOOL) return jinja_fail(&ev->c, "slice indices must be integers");
        part[k] = p.k == JV_INT ? p.i : p.b;
        given[k] = 1;
    }
    if (part[2] == 0) return jinja_fail(&ev->c, "slice step cannot be zero");
    long long len;
    if (v.k != JV_STR && v.k != JV_LIST) {
        if (v.k == JV_UNDEF) return undefined_error(ev, v);
        return jinja_fail(&ev->c, "'%s' object is not subscriptable", jv_type_name(v));
    }
    len = v.k == JV_STR ? (long long)ju_count(v.s.p, v.s.n) : (long long)v.l->n;
    /* Python's slice.indices */
    long long st = part[2], lo, hi;
    for (int k = 0; k < 2; k++) {
        long long *p = &part[k];
        if (!given[k]) {
            *p = st > 0 ? (k == 0 ? 0 : len) : (k == 0 ? len - 1 : -1);
            continue;
        }
        if (*p < 0) *p += len;
        if (*p < 0) *p = st > 0 ? 0 : -1;
        if (*p >= len) *p = st > 0 ? len : len - 1;
    }
    lo = part[0];
    hi = part[1];
    if (v.k == JV_LIST) {
        JList *l = jv_list_new(ev->c.a, 0);
        if (!l) return out_of_memory(&ev->c);
        l->tuple = v.l->tuple;
        for (long long i = lo; st > 0 ? i < hi : i > hi; i += st)
            if (jv_list_push(ev->c.a, l, v.l->v[i])) return out_of_memory(&ev->c);
        *out = (JVal){.k = JV_LIST};
        out->l = l;
        return 0;
    }
    if (st == 1) {
        if (hi < lo) hi = lo;
        size_t a = ju_offset(v.s.p, v.s.n, (size_t)lo), b = ju_offset(v.s.p, v.s.n, (size_t)hi);
        *out = jv_str(v.s.p + a, b - a, v.s.plain ? v.s.plain + a : NULL);
        return 0;
    }
    JBuf b;
    jb_init(&b, ev->c.a, ev->c.lim->max_output);
    for (long long i = lo; st > 0 ? i < hi : i > hi; i += st) {
        size_t a = ju_offset(v.s.p, v.s.n, (size_t)i), e = ju_offset(v.s.p + a, v.s.n - a, 1) + a;
        jb_add(&b, v.s.p + a, e - a, v.s.plain ? v.s.plain + a : NULL);
    }
    if (b.failed) return out_of_memory(&ev->c);
    *out = jb_val(&b);
    return 0;
}

static int eval(Eval *ev, Scope *s, const JNode *x, JVal *out) {
    if (step(ev, x)) return -1;
    JVal a, b;
    switch (x->kind) {
    case E_LIT:
        *out = x == ev->hole ? ev->hole_val : x->lit;
        return 0;
    case E_NAME:
        *out = lookup(ev, s, x->name);
        return 0;
    case E_ATTR:
        if (eval(ev, s, x->a, &a)) return -1;
        ev->c.line = x->line;
        if (a.k == JV_UNDEF) return undefined_error(ev, a);
        return jinja_getattr(&ev->c, a, x->name, out);
    case E_ITEM:
        if (eval(ev, s, x->a, &a) || eval(ev, s, x->b, &b)) return -1;
        ev->c.line = x->line;
        if (a.k == JV_UNDEF) return undefined_error(ev, a);
        return jinja_getitem(&ev->c, a, b, out);
    case E_SLICE:
        return eval_slice(ev, s, x, out);
    case E_CALL:
        return eval_call(ev, s, x, out);
    case E_FILTER: {
        JArgs args;
        if (eval(ev, s, x->a, &a) || eval_args(ev, s, x, &args)) return -1;
        ev->c.line = x->line;
        return jinja_filter(&ev->c, x->name, a, &args, out);
    }
    case E_TEST: {
        JArgs args;
        int r;
        if (eval(ev, s, x->a, &a) || eval_args(ev, s, x, &args)) return -1;
        ev->c.line = x->line;
        if (jinja_test(&ev->c, x->name, a, &args, &r)) return -1;
        *out = jv_bool(x->op ? !r : r);
        return 0;
    }
    case E_NOT:
        if (eval(ev, s, x->a, &a)) return -1;
        *out = jv_bool(!jv_truthy(a));
        return 0;
    case E_NEG: case E_POS:
        if (eval(ev, s, x->a, &a)) return -1;
        ev->c.line = x->line;
        if (a.k == JV_INT || a.k == JV_BOOL) {
            long long i = a.k == JV_INT ? a.i : a.b;
            if (x->kind == E_NEG && i == (-9223372036854775807LL - 1)) return jinja_fail(&ev->c, "integer overflow");
            *out = jv_int(x->kind == E_NEG ? -i : i);
        } else if (a.k == JV_FLOAT) {
            *out = jv_float(x->kind == E_NEG ? -a.f : a.f);
        } else {
            if (a.k == JV_UNDEF) return undefined_error(ev, a);
            return jinja_fail(&ev->c, "bad operand type for unary %s: '%s'", x->kind == E_NEG ? "-" : "+",
                              jv_type_name(a));
        }
        return 0;
    case E_BIN:
        if (eval(ev, s, x->a, &a) || eval(ev, s, x->b, &b)) return -1;
        ev->c.line = x->line;
        return jinja_binop(&ev->c, x->op, a, b, out);
    case E_AND: case E_OR:
        /* Python's: the deciding operand itself, not a bool */
        if (eval(ev, s, x->a, &a)) return -1;
        if (jv_truthy(a) == (x->kind == E_OR)) {
            *out = a;
            return 0;
        }
        return eval(ev, s, x->b, out);
    case E_COND:
        if (eval(ev, s, x->a, &a)) return -1;
        if (jv_truthy(a)) return eval(ev, s, x->b, out);
        if (x->c) return eval(ev, s, x->c, out);
        *out = jv_undef(NULL);
        return 0;
    case E_LIST: case E_TUPLE: {
        JList *l = jv_list_new(ev->c.a, (size_t)x->n_args);
        if (!l) return out_of_memory(&ev->c);
        l->tuple = x->kind == E_TUPLE;
        for (int i = 0; i < x->n_args; i++) {
            if (eval(ev, s, x->args[i], &a)) return -1;
            if (jv_list_push(ev->c.a, l, a)) return out_of_memory(&ev->c);
        }
        *out = (JVal){.k = JV_LIST};
        out->l = l;
        return 0;
    }
    case E_DICT: {
        JDict *d = jv_dict_new(ev->c.a, (size_t)x->n_args);
        if (!d) return out_of_memory(&ev->c);
        for (int i = 0; i < x->n_args; i++) {
            if (eval(ev, s, x->args[i], &a) || eval(ev, s, x->kw_vals[i], &b)) return -1;
            if (a.k == JV_LIST && !a.l->tuple) return jinja_fail(&ev->c, "unhashable type: 'list'");
            if (a.k == JV_DICT) return jinja_fail(&ev->c, "unhashable type: 'dict'");
            if (jv_dict_set(ev->c.a, d, a, b)) return out_of_memory(&ev->c);
        }
        *out = (JVal){.k = JV_DICT};
        out->d = d;
        return 0;
    }
    default:
        return jinja_fail(&ev->c, "a statement where a value belongs");
    }
}

/* ---- statements ---- */

/* Bind target (a name, or names for unpacking) to v in s. */
static int assign(Eval *ev, Scope *s, const JNode *target, JVal v) {
    if (target->kind == E_NAME) return scope_set(ev, s, target->name, v);
    if (target->kind == E_ATTR) {
        JVal ns = lookup(ev, s, target->a->name);
        if (ns.k != JV_DICT || !ns.d->ns)
            return jinja_fail(&ev->c, "cannot assign attribute on non-namespace object");
        if (jv_dict_set(ev->c.a, ns.d, jv_str(target->name, strlen(target->name), NULL), v)) return out_of_memory(&ev->c);
        return 0;
    }
    /* a tuple of names: unpack */
    JList *items;
    if (jinja_iter(&ev->c, v, &items)) return -1;
    if (items->n != (size_t)target->n_args)
        return jinja_fail(&ev->c, "cannot unpack %zu values into %d names", items->n, target->n_args);
    for (int i = 0; i < target->n_args; i++)
        if (assign(ev, s, target->args[i], items->v[i])) return -1;
    return 0;
}

static JVal dict_val(JDict *d) {
    JVal v = {.k = JV_DICT};
    v.d = d;
    return v;
}

static int set_key(Eval *ev, JDict *d, const char *key, JVal v) {
    if (jv_dict_set(ev->c.a, d, jv_str(key, strlen(key), NULL), v)) return out_of_memory(&ev->c);
    return 0;
}

static int exec_for(Eval *ev, Scope *s, const JNode *x) {
    JVal seq;
    if (eval(ev, s, x->b, &seq)) return FLOW_ERROR;
    ev->c.line = x->line;
    JList *all;
    if (jinja_iter(&ev->c, seq, &all)) return FLOW_ERROR;
    JList *items = all;
    if (x->c) {                                  /* for x in xs if cond: filtered first */
        if (!(items = jv_list_new(ev->c.a, all->n))) return out_of_memory(&ev->c);
        for (size_t i = 0; i < all->n; i++) {
            Scope *t = scope_new(ev, s);
            JVal keep;
            if (!t) return out_of_memory(&ev->c);
            if (assign(ev, t, x->a, all->v[i]) || eval(ev, t, x->c, &keep)) return FLOW_ERROR;
            if (jv_truthy(keep) && jv_list_push(ev->c.a, items, all->v[i])) return out_of_memory(&ev->c);
        }
    }
    for (size_t i = 0; i < items->n; i++) {
        if (step(ev, x)) return FLOW_ERROR;          /* a pass is a step, even with an empty body */
        Scope *t = scope_new(ev, s);
        JDict *loop = jv_dict_new(ev->c.a, 12);
        if (!t || !loop) return out_of_memory(&ev->c);
        long long n = (long long)items->n, k = (long long)i;
        if (set_key(ev, loop, "index", jv_int(k + 1)) || set_key(ev, loop, "index0", jv_int(k)) ||
            set_key(ev, loop, "revindex", jv_int(n - k)) || set_key(ev, loop, "revindex0", jv_int(n - k - 1)) ||
            set_key(ev, loop, "first", jv_bool(k == 0)) || set_key(ev, loop, "last", jv_bool(k == n - 1)) ||
            set_key(ev, loop, "length", jv_int(n)) || set_key(ev, loop, "depth", jv_int(1)) ||
            set_key(ev, loop, "depth0", jv_int(0)))
            return FLOW_ERROR;
        if (k > 0 && set_key(ev, loop, "previtem", items->v[i - 1])) return FLOW_ERROR;
        if (k < n - 1 && set_key(ev, loop, "nextitem", items->v[i + 1])) return FLOW_ERROR;
        if (scope_set(ev, t, "loop", dict_val(loop)) || assign(ev, t, x->a, items->v[i])) return FLOW_ERROR;
        int flow = exec_body(ev, t, x->body, x->n_body);
        if (flow == FLOW_ERROR) return FLOW_ERROR;
        if (flow == FLOW_BREAK) break;
    }
    if (items->n == 0 && x->n_body2) return exec_body(ev, s, x->body2, x->n_body2) < 0 ? FLOW_ERROR : FLOW_NEXT;
    return FLOW_NEXT;
}

/* Render body into a string of its own (a set block, a filter block). */
static int capture(Eval *ev, Scope *s, const JNode *x, JVal *out) {
    JBuf buf, *saved = ev->out;
    jb_init(&buf, ev->c.a, ev->c.lim->max_output);
    ev->out = &buf;
    int flow = exec_body(ev, s, x->body, x->n_body);
    ev->out = saved;
    if (flow < 0) return -1;
    if (buf.failed) return jinja_fail(&ev->c, "a block's text is over the output limit");
    *out = jb_val(&buf);
    if (!x->b) return 0;
    const JNode *saved_hole = ev->hole;
    JVal saved_val = ev->hole_val;
    ev->hole = x->c;
    ev->hole_val = *out;
    int st = eval(ev, s, x->b, out);
    ev->hole = saved_hole;
    ev->hole_val = saved_val;
    return st;
}

static int exec_one(Eval *ev, Scope *s, const JNode *x) {
    if (step(ev, x)) return FLOW_ERROR;
    JVal v;
    switch (x->kind) {
    case N_TEXT:
        jb_add(ev->out, x->lit.s.p, x->lit.s.n, NULL);
        return FLOW_NEXT;
    case N_OUTPUT:
        if (eval(ev, s, x->a, &v)) return FLOW_ERROR;
        jb_str(ev->out, v);
        return FLOW_NEXT;
    case N_IF:
        if (eval(ev, s, x->a, &v)) return FLOW_ERROR;
        if (jv_truthy(v)) return exec_body(ev, s, x->body, x->n_body);
        return exec_body(ev, s, x->body2, x->n_body2);
    case N_FOR:
        return exec_for(ev, s, x);
    case N_SET:
        if (eval(ev, s, x->b, &v)) return FLOW_ERROR;
        ev->c.line = x->line;
        return assign(ev, s, x->a, v) ? FLOW_ERROR : FLOW_NEXT;
    case N_SET_BLOCK:
        if (capture(ev, s, x, &v)) return FLOW_ERROR;
        return assign(ev, s, x->a, v) ? FLOW_ERROR : FLOW_NEXT;
    case N_FILTER_BLOCK:
        if (capture(ev, s, x, &v)) return FLOW_ERROR;
        jb_str(ev->out, v);
        return FLOW_NEXT;
    case N_MACRO:
        v = (JVal){.k = JV_MACRO};
        v.macro = x;
        return scope_set(ev, s, x->name, v) ? FLOW_ERROR : FLOW_NEXT;
    case N_BLOCK:
        return exec_body(ev, s, x->body, x->n_body);
    case N_BREAK:
        return FLOW_BREAK;
    case N_CONTINUE:
        return FLOW_CONTINUE;
    default:
        return jinja_fail(&ev->c, "an expression where a statement belongs");
    }
}

static int exec_body(Eval *ev, Scope *s, JNode *const *body, int n) {
    for (int i = 0; i < n; i++) {
        int flow = exec_one(ev, s, body[i]);
        if (flow != FLOW_NEXT) return flow;
        if (ev->out->failed) {
            ev->c.line = body[i]->line;
            if (ev->c.a->over) return out_of_memory(&ev->c);
            return jinja_fail(&ev->c, "the output is over its limit (%zu bytes)", ev->c.lim->max_output);
        }
    }
    return FLOW_NEXT;
}

/* ---- variables, from JSON ---- */

JVars *jinja_vars_new(void) {
    JVars *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    v->arena.cap = (size_t)1 << 30;
    if (!(v->d = jv_dict_new(&v->arena, 8))) {
        jinja_vars_free(v);
        return NULL;
    }
    return v;
}

void jinja_vars_free(JVars *v) {
    if (!v) return;
    ja_free(&v->arena);
    free(v);
}

static const unsigned char *all_plain(JArena *a, size_t n) {
    unsigned char *p = ja_alloc(a, n ? n : 1);
    if (p) memset(p, 1, n);
    return p;
}

/* A JSON value as a template value: numbers that are whole become ints (JSON
 * does not say, and cJSON keeps only the double). */
static int from_cjson(JArena *a, const cJSON *j, int plain, int depth, JVal *out) {
    if (depth > 64) return -1;
    if (cJSON_IsString(j)) {
        size_t n = strlen(j->valuestring);
        char *s = ja_strndup(a, j->valuestring, n);
        const unsigned char *fl = plain ? all_plain(a, n) : NULL;
        if (!s || (plain && !fl)) return -1;
        *out = jv_str(s, n, fl);
    } else if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        /* the range first: converting a double past long long's is undefined */
        *out = d > -9e15 && d < 9e15 && d == (double)(long long)d ? jv_int((long long)d) : jv_float(d);
    } else if (cJSON_IsBool(j)) {
        *out = jv_bool(cJSON_IsTrue(j));
    } else if (cJSON_IsNull(j)) {
        *out = jv_none();
    } else if (cJSON_IsArray(j)) {
        JList *l = jv_list_new(a, (size_t)cJSON_GetArraySize(j));
        if (!l) return -1;
        for (const cJSON *c = j->child; c; c = c->next) {
            JVal x;
            if (from_cjson(a, c, plain, depth + 1, &x) || jv_list_push(a, l, x)) return -1;
        }
        *out = (JVal){.k = JV_LIST};
        out->l = l;
    } else if (cJSON_IsObject(j)) {
        JDict *d = jv_dict_new(a, (size_t)cJSON_GetArraySize(j));
        if (!d) return -1;
        for (const cJSON *c = j->child; c; c = c->next) {
            JVal x;
            size_t kn = strlen(c->string);
            char *k = ja_strndup(a, c->string, kn);
            if (!k || from_cjson(a, c, plain, depth + 1, &x) || jv_dict_set(a, d, jv_str(k, kn, NULL), x)) return -1;
        }
        *out = (JVal){.k = JV_DICT};
        out->d = d;
    } else {
        return -1;
    }
    return 0;
}

static int vars_put(JVars *v, const char *name, JVal x, Err *e) {
    size_t n = strlen(name);
    char *k = ja_strndup(&v->arena, name, n);
    if (!k || jv_dict_set(&v->arena, v->d, jv_str(k, n, NULL), x)) return err_set(e, ST_NOMEM, "template variables: out of memory");
    return ST_OK;
}

int jinja_vars_set_cjson(JVars *v, const char *name, const void *cjson, int plain, Err *e) {
    JVal x;
    if (from_cjson(&v->arena, cjson, plain, 0, &x))
        return v->arena.over ? err_set(e, ST_NOMEM, "template variables: out of memory")
                             : err_set(e, ST_ARG, "template variable %s: nested too deep", name);
    return vars_put(v, name, x, e);
}

int jinja_vars_set_json(JVars *v, const char *name, const char *json, int plain, Err *e) {
    cJSON *j = cJSON_Parse(json);
    if (!j) return err_set(e, ST_ARG, "template variable %s: not JSON", name);
    int st = jinja_vars_set_cjson(v, name, j, plain, e);
    cJSON_Delete(j);
    return st;
}

int jinja_vars_set_str(JVars *v, const char *name, const char *s, int plain, Err *e) {
    size_t n = strlen(s);
    char *d = ja_strndup(&v->arena, s, n);
    const unsigned char *fl = plain ? all_plain(&v->arena, n) : NULL;
    if (!d || (plain && !fl)) return err_set(e, ST_NOMEM, "template variables: out of memory");
    return vars_put(v, name, jv_str(d, n, fl), e);
}

int jinja_vars_set_bool(JVars *v, const char *name, int b, Err *e) { return vars_put(v, name, jv_bool(b), e); }

/* ---- a render ---- */

int jinja_render(const JTemplate *t, const JVars *vars, const JLimits *lim_in, JOutput *out, Err *e) {
    *out = (JOutput){0};
    JLimits lim = lim_in ? *lim_in : (JLimits){0};
    if (!lim.max_output) lim.max_output = (size_t)16 << 20;
    if (!lim.max_memory) lim.max_memory = (size_t)256 << 20;
    if (!lim.max_steps) lim.max_steps = 50000000;
    if (!lim.now) lim.now = time(NULL);
    JArena arena = {.cap = lim.max_memory};
    Eval ev = {.c = {.a = &arena, .lim = &lim, .e = e}, .vars = vars->d};
    JBuf buf;
    jb_init(&buf, &arena, lim.max_output);
    ev.out = &buf;
    int st = ST_OK;
    if (!(ev.root = scope_new(&ev, NULL))) st = err_set(e, ST_NOMEM, "template: out of memory");
    if (!st && exec_body(&ev, ev.root, t->body, t->n_body) < 0) st = ST_ARG;
    if (!st && buf.failed) st = err_set(e, ST_ARG, "template: the output is over its limit (%zu bytes)", lim.max_output);
    if (!st) {
        out->len = buf.n;
        out->text = malloc(buf.n + 1);
        out->plain = calloc(buf.n ? buf.n : 1, 1);
        if (!out->text || !out->plain) {
            jinja_output_free(out);
            st = err_set(e, ST_NOMEM, "template: out of memory");
        } else {
            if (buf.n) memcpy(out->text, buf.p, buf.n);
            out->text[buf.n] = 0;
            if (buf.plain) memcpy(out->plain, buf.plain, buf.n);
        }
    }
    if (st) out->raised = ev.c.raised;
    ja_free(&arena);
    return st;
}

void jinja_output_free(JOutput *o) {
    free(o->text);
    free(o->plain);
    *o = (JOutput){0};
}
