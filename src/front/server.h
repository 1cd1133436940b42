/* server.h - an OpenAI-compatible HTTP front end over the runtime.
 *
 * The server is one more stage above the runtime, beside infer.c: it turns
 * HTTP requests into rt_submit calls and the text that comes back into JSON
 * or Server-Sent Events. Two kinds of thread meet in it:
 *
 *   HTTP threads (one per connection, http1.h) read and validate a
 *   body, put a Job on the server's queue, and wait on the job's condition
 *   variable for its text;
 *   the engine thread (the one that calls srv_run) alone owns the Runtime:
 *   it takes jobs off the queue (rt_submit), cancels the ones whose client
 *   went away (rt_cancel), and steps the engine. Its callbacks append text
 *   to the job under the job's own lock, the only lock taken while the
 *   engine runs.
 *
 * Its pieces, one job a file: openai.h (the wire format, pure functions),
 * metrics.h (the counters and their Prometheus text), server_engine.c (the
 * engine thread), server_http.c (the HTTP threads); server_internal.h is
 * what the last two share. See notes/server.md. */
#ifndef SERVER_H
#define SERVER_H
#include "base/err.h"
#include "front/chat.h"
#include "front/metrics.h"
#include "front/openai.h"
#include "runtime.h"
#include <pthread.h>
#include <signal.h>
#include <stddef.h>

/* ---- the server ---- */

typedef struct {
    const char *host;            /* address to bind (default 127.0.0.1) */
    int port;                    /* 0: any free port (see Server.port) */
    const char *model_id;
    int max_queue;               /* jobs waiting beyond max_seqs running; 503 beyond */
    size_t max_body;             /* bytes; 413 beyond */
    size_t max_buffered;         /* bytes of unfinished bodies held, all connections together;
                                    a body that would pass it gets 503 (0: 64 MiB) */
    int max_connections;         /* connections open at once; one more is closed at once (0: 4096) */
    int idle_timeout;            /* seconds a connection may send or take nothing before it is
                                    closed (0: 60); waiting for the engine is not idle */
    int request_timeout;         /* seconds from a connection's start, or the end of its last
                                    answer, by which its next request must be whole, headers
                                    and body; beyond, it is refused (408) and closed (0: 60) */
    const SrvChat *chat;         /* the model's chat template (front/chat.h); must outlive the server */
    const Tokenizer *tok;        /* the model's vocabulary, for /tokenize and /detokenize: read-only,
                                    so the HTTP threads may share it with the engine's */
    size_t max_prompt;           /* bytes of a prompt, given or rendered (0: 4 MiB); 413 beyond */
} SrvConfig;

typedef struct Job Job;          /* private to the server (server_internal.h) */
typedef struct SrvEvent SrvEvent;

typedef struct {
    SrvConfig cfg;
    SrvLimits lim;
    Runtime *rt;                 /* the engine thread's alone */
    int listen_fd;               /* the listening socket */
    int wake_fd[2];              /* a pipe: a byte in it stops the accepting thread */
    pthread_t acceptor;          /* the accepting thread (server_http.c) */
    int accepting;               /* it runs: srv_free stops it */
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
    size_t buffered;             /* bytes held for bodies not yet whole (under mu) */
    int max_seqs, context;       /* the runtime's, read once at srv_init: the HTTP threads
                                    never touch the Runtime, which is the engine thread's */
    int answering;               /* connections whose job was queued and whose answer is not
                                    yet all sent (under mu): srv_free lets them finish */
    int n_live, cap_live;
    struct Track *tracks;        /* every open connection (under mu): server_http.c */
    int n_conns;                 /* how many (under mu) */
    pthread_cond_t conns_gone;   /* n_conns fell to 0 */
} Server;

/* Bind and start listening (HTTP threads start answering; requests wait
 * for srv_run). The runtime must outlive the server. */
int srv_init(Server *s, Runtime *rt, const SrvConfig *cfg, Err *e);
/* The engine loop, on the calling thread, until *stop becomes non-zero:
 * then every request still running is cancelled and the loop returns. */
int srv_run(Server *s, volatile sig_atomic_t *stop, Err *e);
enum { SRV_DRAIN_SECONDS = 10 };

/* Let every answer under way finish (its job ended or cancelled by srv_run:
 * streams get their last chunk and [DONE]), for at most SRV_DRAIN_SECONDS;
 * then stop listening, wait for the HTTP threads, free everything. */
void srv_free(Server *s);

#endif
