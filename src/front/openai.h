/* openai.h - the OpenAI wire format, as pure functions: a body in, a
 * request or an OpenAI error out; a choice or a chunk in, its JSON or SSE
 * bytes out; the chat templates. No socket, no thread, no engine: the
 * server (server.h) calls these, and tests/test_server.c tests them
 * directly. See notes/server.md. */
#ifndef OPENAI_H
#define OPENAI_H
#include "runtime.h"
#include <stddef.h>

/* ---- chat templates: recognised by markers, rendered here ---- */

typedef enum { TMPL_PLAIN = 0, TMPL_CHATML, TMPL_LLAMA2, TMPL_LLAMA3, TMPL_ZEPHYR } ChatTemplate;

typedef struct {
    const char *role, *content;
} SrvMessage;

const char *srv_template_name(ChatTemplate t);   /* "plain", "chatml", "llama2", "llama3", "zephyr" */
/* The template a model's tokenizer.chat_template (len bytes, NULL: none)
 * is, recognised by the markers it contains; TMPL_PLAIN if none matches. */
ChatTemplate srv_template_detect(const char *tmpl, size_t len);
/* The prompt for messages m[0..n) ending where the assistant speaks next,
 * malloc'd (free it); NULL if out of memory. */
char *srv_chat_render(ChatTemplate t, const SrvMessage *m, int n);

/* ---- a request body, parsed and checked ---- */

/* An OpenAI error: HTTP status, type, the field at fault ("" for none). */
typedef struct {
    int status;
    const char *type;
    char param[48];
    char msg[640];           /* long enough for any Err line with its prefix: never cut */
} SrvError;

/* What a request's body is checked against. */
typedef struct {
    const char *model_id;        /* the name in /v1/models; "model" must be it when given */
    ChatTemplate tmpl;           /* how chat messages become a prompt */
    int max_tokens_default;      /* when the body gives none (completions: 16, as OpenAI) */
    int chat_max_tokens_default; /* chat: up to the context */
} SrvLimits;

typedef struct {
    int chat;                    /* /v1/chat/completions */
    char *prompt;                /* malloc'd: the text, or the rendered messages */
    int max_tokens, n, stream, include_usage, ignore_eos;
    SamplerParams sp;
    int seed_given;              /* 0: the server picks a seed */
    Priority priority;
    char stop[RT_MAX_STOP][RT_STOP_LEN + 1];
    int n_stop;
} SrvRequest;

/* Parse body (len bytes, JSON) for /v1/completions (chat 0) or
 * /v1/chat/completions (chat 1). ST_OK with *r filled (free it with
 * srv_request_free), or ST_ARG with err: 400 naming the field, 404 for
 * another model. */
int srv_parse_request(const char *body, size_t len, int chat, const SrvLimits *lim, SrvRequest *r,
                      SrvError *err);
void srv_request_free(SrvRequest *r);               /* accepts a zeroed one */

/* {"error": {"message", "type", "param", "code"}}, malloc'd; NULL if out of memory. */
char *srv_error_json(const SrvError *err);

/* ---- responses and SSE chunks, shaped as OpenAI's ---- */

typedef struct {
    int prompt_tokens, completion_tokens;
} SrvUsage;

/* One choice of a whole response. */
typedef struct {
    const char *text;
    size_t len;
    const char *finish;          /* "stop", "length", ... */
} SrvChoice;

/* A whole (not streamed) response, malloc'd JSON. */
char *srv_response_json(int chat, const char *id, const char *model, long created, const SrvChoice *c,
                        int n, const SrvUsage *u);

/* One streamed event. */
typedef struct {
    int chat;
    const char *id, *model;
    long created;
    int index;                   /* the choice */
    const char *text;            /* new text (len bytes), or NULL */
    size_t len;
    int role;                    /* chat: the choice's first chunk carries "role": "assistant" */
    const char *finish;          /* NULL while the choice runs */
    const SrvUsage *usage;       /* the closing usage chunk (choices empty), or NULL */
    int usage_null;              /* stream_options.include_usage: "usage": null on the others */
} SrvChunk;

/* "data: {...}\n\n", malloc'd; NULL if out of memory. */
char *srv_sse_chunk(const SrvChunk *c);
#define SRV_SSE_DONE "data: [DONE]\n\n"
/* An SSE comment (a line that starts with ':'), which every client skips:
 * sent while a stream waits long for its next token, so that the connection
 * does not count as idle (serve --idle-timeout). */
#define SRV_SSE_KEEPALIVE ": keep-alive\n\n"

/* The finish_reason OpenAI names for a FinishReason. */
const char *srv_finish_reason(FinishReason f);

/* Fill err (status, its OpenAI type, the field at fault, the message);
 * returns ST_ARG. */
int srv_error_set(SrvError *err, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* /v1/models: the one model this server runs, malloc'd JSON. */
char *srv_models_json(const char *id, long created, int max_model_len, const char *chat_template);

#endif
