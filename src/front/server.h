/* server.h - an OpenAI-compatible HTTP front end over the runtime.
 *
 * The server is one more stage above the runtime, beside infer.c: it turns
 * HTTP requests into rt_submit calls and the text that comes back into JSON
 * or Server-Sent Events. Two kinds of thread meet in it:
 *
 *   HTTP threads (libmicrohttpd, one per connection) read and validate a
 *   body, put a Job on the server's queue, and wait on the job's condition
 *   variable for its text;
 *   the engine thread (the one that calls srv_run) alone owns the Runtime:
 *   it takes jobs off the queue (rt_submit), cancels the ones whose client
 *   went away (rt_cancel), and steps the engine. Its callbacks append text
 *   to the job under the job's own lock, the only lock taken while the
 *   engine runs.
 *
 * The first half of this header is pure functions (a body in, a request or
 * an OpenAI error out; a chunk in, its SSE bytes out; chat templates; the
 * metrics text), testable without a socket. See notes/server.md. */
#ifndef SERVER_H
#define SERVER_H
#include "base/err.h"
#include "runtime.h"
#include <pthread.h>
#include <signal.h>
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
    char msg[400];
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

/* The finish_reason OpenAI names for a FinishReason. */
const char *srv_finish_reason(FinishReason f);

/* ---- metrics ---- */

enum { SRV_BUCKETS = 12 };

typedef struct {
    double le[SRV_BUCKETS];      /* upper bounds, seconds; +Inf is implicit */
    long count[SRV_BUCKETS + 1]; /* per bucket (not cumulative); the last is above them all */
    double sum;
    long n;
} SrvHistogram;

typedef struct {
    long finished[FIN_ERROR + 1];    /* requests by how they ended (FinishReason) */
    long rejected_invalid, rejected_full, rejected_other;   /* 4xx, 503, refused by the runtime */
    long prompt_tokens, completion_tokens;
    SrvHistogram ttft, tpot;
    int kv_held, kv_cached, kv_free; /* blocks, after the last step */
    int running, waiting;            /* requests in the engine */
    int http_in_flight;              /* jobs handed to the engine and not finished */
    long preemptions, steps;
} SrvMetrics;

void srv_metrics_init(SrvMetrics *m);
void srv_histogram_add(SrvHistogram *h, double v);
/* Prometheus text (HELP and TYPE lines), malloc'd; NULL if out of memory. */
char *srv_metrics_text(const SrvMetrics *m);

/* ---- the server ---- */

typedef struct {
    const char *host;            /* address to bind (default 127.0.0.1) */
    int port;                    /* 0: any free port (see Server.port) */
    const char *model_id;
    int max_queue;               /* jobs waiting beyond max_seqs running; 503 beyond */
    size_t max_body;             /* bytes; 413 beyond */
} SrvConfig;

typedef struct Job Job;          /* private to server.c */
typedef struct SrvEvent SrvEvent;

typedef struct {
    SrvConfig cfg;
    SrvLimits lim;
    Runtime *rt;                 /* the engine thread's alone */
    struct MHD_Daemon *daemon;
    int port;                    /* the port bound */
    pthread_mutex_t mu;          /* guards the fields down to `metrics` */
    pthread_cond_t wake;         /* the engine thread waits on it when idle */
    Job *queue_head, *queue_tail;    /* jobs not yet handed to the runtime */
    SrvEvent *events, *events_tail;  /* HTTP events for the trace, in order */
    int in_flight;               /* jobs queued or in the engine */
    int stopping;
    long next_conn, next_job;
    long start_time;             /* time(NULL) at start: the ids' prefix */
    SrvMetrics metrics;
    Job **live;                  /* (cap_live) jobs in the runtime: the engine thread's */
    int n_live, cap_live;
} Server;

/* Bind and start listening (HTTP threads start answering; requests wait
 * for srv_run). The runtime must outlive the server. */
int srv_init(Server *s, Runtime *rt, const SrvConfig *cfg, ChatTemplate tmpl, Err *e);
/* The engine loop, on the calling thread, until *stop becomes non-zero:
 * then every request still running is cancelled and the loop returns. */
int srv_run(Server *s, volatile sig_atomic_t *stop, Err *e);
/* Stop listening, wait for the HTTP threads, free everything. */
void srv_free(Server *s);

#endif
