/* chat.h - a chat request's messages into the prompt the model was trained
 * on, by the model's own template (src/chat/, notes/chat.md).
 *
 * The server renders tokenizer.chat_template as Hugging Face's
 * apply_chat_template does, and keeps, byte by byte, which bytes are the
 * users' (message contents, roles, names: everything from the request) and
 * which the template wrote: the tokenizer reads special tokens only in the
 * template's bytes (tok_encode_marked), so no message can forge a turn.
 * Pure functions over a parsed template: any HTTP thread may call them. */
#ifndef FRONT_CHAT_H
#define FRONT_CHAT_H
#include "base/err.h"
#include "chat/jinja.h"
#include <stddef.h>
#include <time.h>

/* What a model's chat looks like: its template, and what bos_token and
 * eos_token print in it. */
typedef struct SrvChat {
    JTemplate *tmpl;
    char *source;                /* the Jinja text (malloc'd) */
    char kind[16];               /* "model" (the file's), "file" (--chat-template), "fallback" */
    char origin[200];            /* where it came from, in words, for the log */
    char bos[256], eos[256];     /* the texts of the vocabulary's BOS and EOS ("" when none) */
    int vocab_adds_bos;          /* the tokenizer puts BOS first itself: a leading bos text is dropped */
} SrvChat;

/* The template used when a model file has none: each message as "role:
 * content" on a line, then "assistant:" (a base model continues that). */
extern const char SRV_CHAT_FALLBACK[];

/* Parse source (n bytes; NULL: the fallback). kind and origin say where it
 * came from (the file's tokenizer.chat_template, --chat-template FILE).
 * ST_FORMAT, naming origin and the template's line, when it does not
 * parse; ST_NOMEM. */
int srv_chat_init(SrvChat *c, const char *source, size_t n, const char *kind, const char *origin,
                  const char *bos, const char *eos, int vocab_adds_bos, Err *e);
void srv_chat_free(SrvChat *c);              /* accepts a zeroed one */

/* A rendered prompt: text (malloc'd, NUL-terminated, len bytes) and plain
 * (malloc'd, len flags, 1 where the byte is the request's). */
typedef struct {
    char *text;
    unsigned char *plain;
    size_t len;
} SrvPrompt;
void srv_prompt_free(SrvPrompt *p);          /* accepts a zeroed one */

/* Limits on what a chat body may hold (a message's content, the rendered
 * prompt): refused with 413, never cut. */
enum { SRV_MAX_MESSAGES = 4096 };

/* The prompt of a chat request body (a parsed JSON object: "messages",
 * "chat_template_kwargs"): messages checked (an object each, a string role,
 * content a string, null, or an array of text parts, joined), rendered with
 * add_generation_prompt true at time now (strftime_now), a leading BOS text
 * dropped when the tokenizer adds BOS itself (as llama.cpp does). ST_OK, or
 * ST_ARG with *status (400; 413 over max_prompt bytes) and a message in e:
 * the template's own words when it called raise_exception. */
int srv_chat_prompt(const SrvChat *c, const void *body_cjson, time_t now, size_t max_prompt, SrvPrompt *p,
                    int *status, char *param, size_t param_cap, Err *e);

#endif
