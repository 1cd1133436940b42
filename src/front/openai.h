/* openai.h - the OpenAI wire format, as pure functions: a body in, a
 * request or an OpenAI error out; a choice or a chunk in, its JSON or SSE
 * bytes out. No socket, no thread, no engine: the
 * server (server.h) calls these, and tests/test_server.c tests them
 * directly. See notes/server.md. */
#ifndef OPENAI_H
#define OPENAI_H
#include "runtime.h"
#include <stddef.h>

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
    int n_vocab;                 /* token ids in logit_bias are below it */
    const struct SrvChat *chat;  /* how chat messages become a prompt (front/chat.h) */
    size_t max_prompt;           /* bytes of a prompt, rendered or given: more is a 413, never cut */
    int max_tokens_default;      /* when the body gives none (completions: 16, as OpenAI) */
    int chat_max_tokens_default; /* chat: up to the context */
} SrvLimits;

typedef struct {
    int chat;                    /* /v1/chat/completions */
    char *prompt;                /* malloc'd: the text, or the rendered messages */
    unsigned char *plain;        /* malloc'd (prompt_len flags): 1 on the bytes a chat's messages
                                    put there, which never become special tokens; NULL for a
                                    completion's raw prompt */
    size_t prompt_len;
    int parse_special;           /* special-token texts are read as their tokens (outside plain) */
    int max_tokens, n, stream, include_usage, ignore_eos;
    SamplerParams sp;
    int seed_given;              /* 0: the server picks a seed */
    Priority priority;
    int speculate;               /* draft tokens per step (notes/speculative.md); -1: the server's */
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
    int cached_tokens;           /* of the prompt, found in the prefix cache */
} SrvUsage;

/* The log-probabilities of a choice's tokens (from the sampler), with the
 * vocabulary to spell them: chat's "logprobs": {"content": [...]}, or the
 * completions' {"tokens", "token_logprobs", "top_logprobs", "text_offset"}. */
typedef struct {
    const SamplerLast *lp;       /* (n) NULL: the request asked for none */
    int n;
    int top;                     /* alternatives asked for per token */
    size_t offset;               /* completions: text bytes before lp[0] */
    const Tokenizer *tok;
} SrvLogprobs;

/* One choice of a whole response. */
typedef struct {
    const char *text;
    size_t len;
    const char *finish;          /* "stop", "length", ... */
    SrvLogprobs logprobs;
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
    SrvLogprobs logprobs;        /* the tokens whose text this chunk brings */
} SrvChunk;

/* "data: {...}\n\n", malloc'd; NULL if out of memory. */
char *srv_sse_chunk(const SrvChunk *c);
#define SRV_SSE_DONE "data: [DONE]\n\n"
/* An SSE comment (a line that starts with ':'), which every client skips:
 * sent while a stream waits long for its next token, so that the connection
 * does not count as idle (serve --idle-timeout). */
#define SRV_SSE_KEEPALIVE ": keep-alive\n\n"

/* The finish_reason OpenAI names for a FinishReason: "length" for max
 * tokens or a full context, "stop" for the rest (an end-of-generation
 * token, a stop string; a cancelled or failed choice too, whose stream
 * carries an error event before it). */
const char *srv_finish_reason(FinishReason f);
/* An error in the middle of a stream, as OpenAI sends one: "data:
 * {"error": {...}}\n\n", malloc'd. */
char *srv_sse_error(const SrvError *err);

/* Fill err (status, its OpenAI type, the field at fault, the message);
 * returns ST_ARG. */
int srv_error_set(SrvError *err, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- llama.cpp's extension endpoints, with its shapes ----
 * Each takes the request body and returns the answer, malloc'd JSON, or
 * NULL with err (400 naming the field; 500 out of memory). */
/* POST /tokenize {"content", "add_special" (false), "parse_special" (true),
 * "with_pieces" (false)} -> {"tokens": [id, ...]} or [{"id", "piece"}, ...]. */
char *srv_tokenize_json(const Tokenizer *tok, const char *body, size_t len, SrvError *err);
/* POST /detokenize {"tokens": [id, ...]} -> {"content": text}: every token's
 * bytes, control tokens spelled out. */
char *srv_detokenize_json(const Tokenizer *tok, const char *body, size_t len, SrvError *err);
/* POST /apply-template {"messages", "chat_template_kwargs"} -> {"prompt"}:
 * exactly what a chat request with those messages feeds the tokenizer. */
char *srv_apply_template_json(const SrvLimits *lim, const char *body, size_t len, SrvError *err);

/* /v1/models: the one model this server runs, malloc'd JSON. */
char *srv_models_json(const char *id, long created, int max_model_len, const char *chat_template);

#endif
