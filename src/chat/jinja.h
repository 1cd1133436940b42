/* jinja.h - chat templates: the Jinja subset real models' templates use,
 * run the way Hugging Face's apply_chat_template runs them.
 *
 * A model file carries its chat template (GGUF tokenizer.chat_template) as
 * Jinja source. This wing turns it into a prompt in three readable phases,
 * one file each (notes/chat.md walks through them):
 *   jinja_lex.c    source -> tokens: text, {{ }}, {% %}, with the whitespace
 *                  rules (trim_blocks, lstrip_blocks, the '-' markers)
 *   jinja_parse.c  tokens -> a tree of statements and expressions
 *   jinja_eval.c   the tree, run over the variables -> text; values,
 *                  filters, tests and methods in jinja_value.c and
 *                  jinja_builtins.c
 *
 * The output says, byte by byte, which bytes came from a caller's string
 * marked as plain text (a message's content): the tokenizer then never reads
 * a special-token text there, so a user cannot forge a control token by
 * typing its spelling (notes/chat.md, "Segments").
 *
 * Semantics are jinja2 3.1's with trim_blocks, lstrip_blocks, autoescape
 * off, the loopcontrols extension and HF's {% generation %} tag, inside
 * HF's immutable sandbox (list.append and friends refuse). Limits keep a
 * hostile template finite: output bytes, memory, evaluation steps, depth. */
#ifndef CHAT_JINJA_H
#define CHAT_JINJA_H
#include "base/err.h"
#include <stddef.h>
#include <time.h>

typedef struct JTemplate JTemplate;   /* a parsed template; immutable, so many renders may share one */

/* Parse src[0..n). ST_OK with *out set (free it with jinja_free), ST_FORMAT
 * with e naming the line and the problem, ST_NOMEM. */
int jinja_parse(const char *src, size_t n, JTemplate **out, Err *e);
void jinja_free(JTemplate *t);                 /* accepts NULL */

/* ---- the variables a render sees ----
 * Built from JSON text (the shape of a request's fields), so a caller needs
 * no value API: JVars holds a list of top-level names, each with a JSON
 * value, and whether its strings are a user's (plain) or the caller's. */
typedef struct JVars JVars;
JVars *jinja_vars_new(void);                   /* NULL if out of memory */
void jinja_vars_free(JVars *v);                /* accepts NULL */
/* Set name to the JSON text json (a whole value: "true", "\"<s>\"", an
 * array ...). plain: every string inside is user text (see above).
 * ST_ARG if json does not parse, ST_NOMEM. A later set of a name wins. */
int jinja_vars_set_json(JVars *v, const char *name, const char *json, int plain, Err *e);
/* The same from a parsed cJSON value (a const cJSON *), copied. */
int jinja_vars_set_cjson(JVars *v, const char *name, const void *cjson, int plain, Err *e);
int jinja_vars_set_str(JVars *v, const char *name, const char *s, int plain, Err *e);
int jinja_vars_set_bool(JVars *v, const char *name, int b, Err *e);

/* What a render may spend: 0 in a field takes the default. */
typedef struct {
    size_t max_output;         /* bytes of output (default 16 MiB) */
    size_t max_memory;         /* bytes of values made while running (default 256 MiB) */
    long max_steps;            /* expressions and statements evaluated (default 50 million) */
    time_t now;                /* what strftime_now formats (UTC); 0: the clock */
} JLimits;

/* A finished render. */
typedef struct {
    char *text;                /* malloc'd, NUL-terminated, len bytes */
    size_t len;
    unsigned char *plain;      /* malloc'd, len flags: 1 where the byte is a plain (user) string's */
    int raised;                /* on failure: 1 if the template called raise_exception, and
                                  e holds exactly its message (no prefix) */
} JOutput;

/* Run t over vars. ST_OK with out filled (free with jinja_output_free);
 * ST_ARG when the template fails (raise_exception, a type error, an
 * undefined value used, a limit reached: e says which, with the template's
 * line); ST_NOMEM. */
int jinja_render(const JTemplate *t, const JVars *vars, const JLimits *lim, JOutput *out, Err *e);
void jinja_output_free(JOutput *o);            /* accepts a zeroed one */

#endif
