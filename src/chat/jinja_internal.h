/* jinja_internal.h - what the phases of the template interpreter share:
 * the arena every phase allocates from, the tokens (lexer -> parser), the
 * tree (parser -> evaluator) and the values (evaluator <-> builtins).
 * Not part of the wing's interface: only src/chat/jinja_*.c include it. */
#ifndef CHAT_JINJA_INTERNAL_H
#define CHAT_JINJA_INTERNAL_H
#include "chat/jinja.h"
#include <stdint.h>

/* ---- the arena ----
 * A template's tree lives in one arena, freed with it; a render's values
 * live in another, freed when the render ends. Nothing is freed one by one,
 * so no value needs a reference count, and a render cannot leak. cap bounds
 * the bytes handed out (a hostile template's memory). */
typedef struct JChunk JChunk;
typedef struct {
    JChunk *head;
    size_t used, cap;
    int over;                  /* an allocation failed: over cap, or malloc said no */
} JArena;

void *ja_alloc(JArena *a, size_t n);           /* zeroed, 16-byte aligned; NULL when over */
char *ja_strndup(JArena *a, const char *s, size_t n);
void ja_free(JArena *a);

/* ---- tokens (jinja_lex.c) ---- */
typedef enum {
    TK_TEXT,                   /* template text, whitespace rules applied (s, n) */
    TK_VAR_BEGIN, TK_VAR_END,  /* {{ }} */
    TK_STMT_BEGIN, TK_STMT_END,/* {% %} */
    TK_NAME, TK_STRING,        /* s, n: the name; the string's decoded bytes */
    TK_INT, TK_FLOAT,          /* i, f */
    TK_OP,                     /* s, n: one of + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } , . : | */
    TK_EOF,
} JTokKind;

typedef struct {
    JTokKind kind;
    const char *s;             /* in the arena (strings, text) or the source (names, operators) */
    size_t n;
    long long i;
    double f;
    int line;                  /* 1-based line of the source where it starts */
} JTok;

/* Cut src into tokens (in a, which holds them and their text); ST_FORMAT with
 * e naming the line for an unclosed tag or string. */
int jinja_lex(const char *src, size_t n, JArena *a, JTok **toks, int *n_toks, Err *e);

/* ---- values (jinja_value.c) ---- */
typedef enum {
    JV_UNDEF,                  /* a missing name, key or element: prints as nothing */
    JV_NONE, JV_BOOL, JV_INT, JV_FLOAT,
    JV_STR,
    JV_LIST,                   /* lists and tuples (tuple = 1) */
    JV_DICT,                   /* dicts, and namespace() objects (ns = 1) */
    JV_MACRO,                  /* a {% macro %}: the node */
    JV_FUNC,                   /* a global function: range, namespace, ... */
    JV_METHOD,                 /* obj.name not yet called: self and name */
} JKind;

typedef struct JList JList;
typedef struct JDict JDict;
typedef struct JNode JNode;
typedef struct JMethod JMethod;

typedef struct {
    JKind k;
    union {
        int b;                 /* JV_BOOL */
        long long i;           /* JV_INT */
        double f;              /* JV_FLOAT */
        struct {               /* JV_STR: n bytes of UTF-8; plain NULL when no byte is plain */
            const char *p;
            const unsigned char *plain;
            size_t n;
        } s;
        JList *l;
        JDict *d;
        const JNode *macro;
        int fn;                /* JV_FUNC: which (jinja_builtins.c) */
        JMethod *m;
        const char *undef;     /* JV_UNDEF: the name that was missing, for messages (may be NULL) */
    };
} JVal;

struct JList {
    JVal *v;
    size_t n, cap;
    int tuple;
};
struct JDict {
    JVal *keys, *vals;
    size_t n, cap;
    int ns;                    /* a namespace(): the one mutable object a template may make */
};
struct JMethod {
    JVal self;
    const char *name;
};

/* Constructors: the value by copy; strings are not copied (the caller's
 * bytes must live as long as the render, e.g. in the arena). */
static inline JVal jv_undef(const char *name) { JVal v = {.k = JV_UNDEF}; v.undef = name; return v; }
static inline JVal jv_none(void) { return (JVal){.k = JV_NONE}; }
static inline JVal jv_bool(int b) { JVal v = {.k = JV_BOOL}; v.b = !!b; return v; }
static inline JVal jv_int(long long i) { JVal v = {.k = JV_INT}; v.i = i; return v; }
static inline JVal jv_float(double f) { JVal v = {.k = JV_FLOAT}; v.f = f; return v; }
static inline JVal jv_str(const char *p, size_t n, const unsigned char *plain) {
    JVal v = {.k = JV_STR};
    v.s.p = p; v.s.n = n; v.s.plain = plain;
    return v;
}

JList *jv_list_new(JArena *a, size_t cap);
int jv_list_push(JArena *a, JList *l, JVal x);      /* 0, or -1 when out of memory */
JDict *jv_dict_new(JArena *a, size_t cap);
int jv_dict_set(JArena *a, JDict *d, JVal key, JVal val);
/* The value under a string key, or NULL. */
const JVal *jv_dict_get(const JDict *d, const char *key, size_t n);
const JVal *jv_dict_getv(const JDict *d, JVal key);

int jv_truthy(JVal v);                   /* Python's bool() */
int jv_equal(JVal a, JVal b);            /* Python's ==, undefined equal to undefined */
const char *jv_type_name(JVal v);        /* Python's name of its type, for messages */
/* Python's float repr: the shortest text that reads back the same ("2.0", "1e+16"). */
void jv_float_repr(double f, char out[40]);

/* ---- building strings: text with its plain flags ---- */
typedef struct {
    JArena *a;
    char *p;
    unsigned char *plain;      /* NULL until a plain byte arrives */
    size_t n, cap;
    size_t limit;              /* bytes at most (the render's max_output) */
    int failed;                /* out of memory or over limit */
} JBuf;

void jb_init(JBuf *b, JArena *a, size_t limit);
void jb_add(JBuf *b, const char *s, size_t n, const unsigned char *plain); /* plain NULL: none */
void jb_addc(JBuf *b, const char *s);          /* a C string of the template's own */
JVal jb_val(JBuf *b);                          /* the string built (shares b's bytes) */
/* Append str(v), as Python prints it (None, True, 1.5, ['a'] ...); undefined adds nothing. */
int jb_str(JBuf *b, JVal v);
/* Append JSON text of v, as Python's json.dumps with HF's arguments; -1
 * (with *bad set to the offending value) for a value JSON cannot hold. */
typedef struct {
    int indent;                /* -1: none */
    int ensure_ascii, sort_keys;
    const char *item_sep, *key_sep;
} JJsonOpts;
int jb_json(JBuf *b, JVal v, const JJsonOpts *o, int depth, JVal *bad);

/* ---- the tree (jinja_parse.c) ---- */
typedef enum {
    /* statements */
    N_TEXT,                    /* lit: the text */
    N_OUTPUT,                  /* {{ a }} */
    N_IF,                      /* if a: body else: body2 (elif is an N_IF alone in body2) */
    N_FOR,                     /* for target a in b [if c]: body else: body2 */
    N_SET,                     /* set target a = b */
    N_SET_BLOCK,               /* set target a: body rendered to a string */
    N_MACRO,                   /* macro name(params: args, each with its default in ->a): body */
    N_FILTER_BLOCK,            /* filter name(args): body */
    N_BLOCK,                   /* just its body: HF's {% generation %} */
    N_BREAK, N_CONTINUE,
    /* expressions */
    E_LIT,                     /* lit */
    E_NAME,                    /* name */
    E_ATTR,                    /* a.name */
    E_ITEM,                    /* a[b] */
    E_SLICE,                   /* a[args[0]:args[1]:args[2]], each NULL when left out */
    E_CALL,                    /* a(args, kw) */
    E_FILTER,                  /* a | name(args, kw); a NULL in a filter block */
    E_TEST,                    /* a is [not] name(args): op = 1 for not */
    E_NOT, E_NEG, E_POS,       /* unary on a */
    E_BIN,                     /* a op b: op is the operator's text */
    E_AND, E_OR,
    E_COND,                    /* b if a else c (c NULL: undefined) */
    E_LIST, E_TUPLE,           /* args */
    E_DICT,                    /* keys args, values kw_vals */
} JNodeKind;

struct JNode {
    JNodeKind kind;
    int line;
    const char *op;            /* E_BIN and comparisons: "+", "==", "in", "not in", ...; E_TEST: "not" or NULL */
    const char *name;          /* E_NAME, E_ATTR, E_FILTER, E_TEST, N_MACRO, N_FILTER_BLOCK */
    JNode *a, *b, *c;
    JNode **args;              /* call arguments, list items, macro parameters */
    int n_args;
    const char **kw_names;     /* keyword arguments (E_CALL, E_FILTER, E_TEST) */
    JNode **kw_vals;
    int n_kw;
    JNode **body, **body2;     /* statements */
    int n_body, n_body2;
    JVal lit;                  /* N_TEXT, E_LIT */
};

struct JTemplate {
    JArena arena;              /* the tokens and the tree */
    JNode **body;
    int n_body;
};

int jinja_parse_tokens(JTemplate *t, const JTok *toks, int n_toks, Err *e);

/* ---- the builtins (jinja_builtins.c), called by the evaluator ---- */
typedef struct JCtx JCtx;
/* Call arguments, evaluated. */
typedef struct {
    JVal *pos;
    int n_pos;
    const char **kw_names;
    JVal *kw;
    int n_kw;
} JArgs;

/* Each returns 0 with *out, or -1 with the error set in c (jinja_fail). */
int jinja_filter(JCtx *c, const char *name, JVal v, const JArgs *args, JVal *out);
int jinja_test(JCtx *c, const char *name, JVal v, const JArgs *args, int *out);
/* obj.name: a dict's key or method, a string's method; *out undefined if none. */
int jinja_getattr(JCtx *c, JVal obj, const char *name, JVal *out);
int jinja_getitem(JCtx *c, JVal obj, JVal key, JVal *out);
int jinja_call_method(JCtx *c, const JMethod *m, const JArgs *args, JVal *out);
int jinja_call_func(JCtx *c, int fn, const JArgs *args, JVal *out);
/* The global function a name stands for (range, namespace, ...), or -1. */
int jinja_func_id(const char *name);
/* Iterate v (list, tuple, dict keys, string characters, undefined: none)
 * into a fresh list; -1 with an error for a value that does not iterate. */
int jinja_iter(JCtx *c, JVal v, JList **out);
/* Python's len(); -1 with an error for a value that has none. */
int jinja_len(JCtx *c, JVal v, long long *out);
/* Binary operators and comparisons: + - * / // % ** ~ == != < <= > >= in, not in. */
int jinja_binop(JCtx *c, const char *op, JVal x, JVal y, JVal *out);

/* ---- the evaluator's context, as the builtins need it ---- */
struct JCtx {
    JArena *a;                 /* the render's values */
    const JLimits *lim;
    Err *e;
    int line;                  /* of the node being run, for messages */
    int raised;                /* the error is raise_exception's message */
    int failed;
    long steps;
};

/* Set the error (once: the first one stands); returns -1. */
int jinja_fail(JCtx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A value's text as a plain-flagged string value (str(v)); -1 if out of memory. */
int jinja_to_str(JCtx *c, JVal v, JVal *out);

/* UTF-8: the byte offset of code point i of s[0..n) (n if past the end), and the count. */
size_t ju_offset(const char *s, size_t n, size_t i);
size_t ju_count(const char *s, size_t n);
/* Python's str.isspace, on UTF-8: the bytes of whitespace at the start of
 * s[0..n) (ju_lspace) or at its end (ju_rspace). */
size_t ju_lspace(const char *s, size_t n);
size_t ju_rspace(const char *s, size_t n);

#endif
