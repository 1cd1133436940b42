/* server_internal.h - what the server's two sides share: the Job (one
 * generation request, owned by its HTTP thread and the engine thread
 * together, counted), the trace's HTTP events, and the few functions both
 * call. Only server_engine.c and server_http.c include it. */
#ifndef SERVER_INTERNAL_H
#define SERVER_INTERNAL_H
#include "front/server.h"

enum { J_QUEUED, J_RUNNING, J_REFUSED, J_DONE };

typedef struct {
    char *text;
    size_t len, cap;
    size_t sent;                 /* streamed so far (the HTTP side's) */
    int role_sent, final_sent;   /* the HTTP side's */
    int done;
    FinishReason finish;
    int n_out;
    SamplerLast *lp;             /* (n_lp, cap_lp) each token's logprobs, when asked for */
    int n_lp, cap_lp;
    int lp_sent;                 /* streamed so far (the HTTP side's) */
    size_t lp_offset;            /* text bytes of the tokens streamed so far (the HTTP side's) */
} JobChoice;

struct Job {
    Job *next;                   /* on the server's queue */
    pthread_mutex_t mu;
    pthread_cond_t cv;           /* new text, a state change */
    int refs;
    Server *srv;
    SrvRequest req;
    long conn;                   /* the connection it came on */
    char id[48];                 /* "cmpl-..." / "chatcmpl-..." */
    long created;
    int state;                   /* J_* */
    char why[sizeof(Err)];       /* J_REFUSED: the runtime's reason, as long as an Err holds */
    int refused_status;
    int first_id;                /* the runtime's id of choice 0 */
    int cancel;                  /* the client went away (set by the HTTP side) */
    int cancel_sent;             /* rt_cancel was called (the engine side's) */
    int n_done, prompt_tokens, cached_tokens;
    char error[560];             /* FIN_ERROR's reason (the runtime's, whole) */
    JobChoice *ch;               /* (req.n) */
};

struct SrvEvent {
    SrvEvent *next;
    double at;                   /* clock_seconds() when it happened */
    char line[240];
};

/* A job for req (taken: *req is zeroed), one reference held; NULL when out
 * of memory. */
Job *srv_job_new(Server *s, long conn, SrvRequest *req);
/* Let go of one reference; the last frees the job. */
void srv_job_unref(Job *j);
/* From any thread: a line for the trace, queued under the server's lock and
 * printed by the engine thread (nothing when the trace is off). */
void srv_note(Server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
