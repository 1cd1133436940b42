/* runtime.h - requests in, text out: validation, tokenization, streaming,
 * stop conditions, cancel, telemetry.
 *
 * The first stage a request meets (see notes/runtime.md). A Request is made by
 * rt_submit and lives until rt_request_free (the engine frees those it still
 * holds in engine_free); everything it needs while running is allocated at
 * submission, so the step loop allocates nothing. */
#ifndef RUNTIME_H
#define RUNTIME_H
#include "err.h"
#include "sampler.h"
#include "tokenizer.h"
#include <stdint.h>

typedef struct Engine Engine;
typedef struct Request Request;

typedef enum { PRIO_LOW = 0, PRIO_NORMAL = 1, PRIO_HIGH = 2 } Priority;

typedef enum {
    RQ_WAITING,      /* submitted (or preempted), not holding KV blocks */
    RQ_RUNNING,      /* holds a sequence slot and its blocks */
    RQ_FINISHED,
} RequestState;

typedef enum {
    FIN_NONE = 0,
    FIN_LENGTH,      /* max_tokens generated */
    FIN_EOS,         /* the model produced end-of-sequence */
    FIN_STOP,        /* a stop string appeared (it is not part of the output) */
    FIN_CANCEL,      /* rt_cancel */
    FIN_CONTEXT,     /* the sequence reached the model's context length */
} FinishReason;

enum { RT_MAX_STOP = 4, RT_STOP_LEN = 64, RT_MAX_SAMPLES = 64 };

/* Called with each piece of a request's text as soon as it is final (whole
 * UTF-8 characters, never a part of a possible stop string), and once more
 * with len 0 when the request finishes. */
typedef void (*RtStreamFn)(const Request *r, const char *text, int len, void *user);

typedef struct {
    const char *prompt;          /* UTF-8 text */
    int add_bos;                 /* put BOS first when the vocabulary has one */
    SamplerParams sampling;      /* temperature, top_k, top_p, seed */
    int max_tokens;              /* >= 1 */
    int ignore_eos;              /* keep going past EOS (benchmarks want fixed lengths) */
    int n;                       /* samples of this prompt (default 1); sample i uses seed + i.
                                    Samples 1.. are forked from sample 0 once its prompt is
                                    computed: they share its KV blocks, copied on write */
    const char *stop[RT_MAX_STOP];   /* stop strings (NULL-terminated list, may be empty) */
    Priority priority;
    RtStreamFn on_text;          /* may be NULL */
    void *user;
} RtParams;

/* Times in seconds since the engine started. */
typedef struct {
    double arrival, first_scheduled, first_token, finished;
    double queue_wait;           /* first_scheduled - arrival */
    double ttft;                 /* first_token - arrival */
    double tpot;                 /* (finished - first_token) / (n_out - 1); 0 if n_out < 2 */
    double e2e;                  /* finished - arrival */
} Telemetry;

struct Request {
    int id;
    Priority priority;
    RequestState state;
    FinishReason finish;
    /* tokens: the prompt, then each generated token as it is sampled */
    int *tokens;                 /* (cap) */
    int cap;                     /* min(prompt + max_tokens, P + 1): the last token needs no K/V */
    int n_prompt, n_tokens, n_out, max_tokens;
    int ignore_eos;
    int n_computed;              /* leading tokens whose K/V are in the cache */
    int slot;                    /* the scheduler's sequence slot while running, else -1 */
    /* scheduling */
    long arrival_step;           /* engine step at submission (aging counts from it) */
    int n_preempted;             /* times it lost its blocks */
    int prefix_hit_tokens;       /* prompt tokens found in the prefix cache (all admissions) */
    int blocks_released;         /* blocks let go when it last left its slot */
    struct Request *next;        /* link in the scheduler's waiting or preempted queue */
    struct Request *all_next;    /* link in the engine's list of every request */
    /* samples of one prompt (RtParams.n): the first request heads a list of
     * the others (fork_next), which wait to be forked from it (fork_parent) */
    struct Request *fork_parent, *fork_next;
    /* output */
    Sampler sampler;
    TokDecoder dec;
    char stop[RT_MAX_STOP][RT_STOP_LEN];
    int n_stop, stop_max;        /* stop strings and the longest one's length */
    char held[RT_STOP_LEN + TOK_MAX_PIECE];   /* text that could be the start of a stop string */
    char piece[TOK_MAX_PIECE];   /* the text of the last token (for the trace) */
    int n_piece;
    int n_held;
    RtStreamFn on_text;
    void *user;
    Telemetry tm;
    /* trace bookkeeping (trace.c): the phase the request is in and since when */
    int tr_phase;
    double tr_since;
};

const char *rt_priority_name(Priority p);           /* "low", "normal", "high" */
/* Parse "low" / "normal" / "high"; ST_ARG with a message otherwise. */
int rt_parse_priority(const char *s, Priority *out, Err *e);
const char *rt_finish_name(FinishReason f);         /* "length", "eos", "stop", ... */

/* Default parameters: greedy, 16 tokens, normal priority, BOS on. */
RtParams rt_params_default(void);

/* Validate, tokenize, and queue a request (with n > 1: n requests, ids id ..
 * id + n - 1, sharing on_text and user). Returns its id (>= 0), or a
 * negative Status with a one-line reason in e: an empty prompt when the
 * vocabulary has no BOS, a prompt longer than the context, max_tokens < 1,
 * temperature < 0, top_p outside (0, 1], top_k outside 0..V, an unknown
 * priority, a stop string too long, or a request that needs more KV blocks
 * than the whole pool holds. Nothing is queued on error. */
int rt_submit(Engine *en, const RtParams *p, Err *e);

/* Find a request by id (NULL if unknown or already freed). */
Request *rt_find(Engine *en, int id);

/* Cancel a waiting or running request: it finishes with FIN_CANCEL and its
 * blocks go back at once. ST_ARG if the id is unknown or already finished. */
int rt_cancel(Engine *en, int id, Err *e);

/* The engine's output stage calls this with each sampled token: append it,
 * stream its text, and say whether the request is now finished (FIN_NONE if
 * not). now: seconds since the engine started. */
FinishReason rt_accept_token(Engine *en, Request *r, int token, double now);

/* Finish a request: its blocks go back, the rest of its text is streamed
 * (unless a stop string ended it), then on_text with len 0; telemetry set. */
void rt_finish(Engine *en, Request *r, FinishReason why, double now);

/* Fork the samples waiting on `first` (RtParams.n > 1), whose prompt has just
 * been computed and whose first token has just been sampled from `logits`
 * (V floats, saved before sampling): each goes into a free sequence slot
 * sharing first's KV blocks and samples its own first token from the same
 * logits with its own sampler; a sample that finds no free slot is queued
 * to run on its own (its prompt mostly from the prefix cache). Engine use. */
void rt_fork_samples(Engine *en, Request *first, const float *logits, float *scratch, double now);

/* Free one finished request (the engine forgets it). */
void rt_request_free(Engine *en, Request *r);

#endif
