/* runtime.h - requests in, text out: validation, tokenization, streaming,
 * stop strings, cancel, telemetry, and the trace.
 *
 * The first stage a request meets and the only one a front end (the CLI, a
 * server) talks to: a Runtime owns the Engine below it and every request
 * submitted to it. A request's text-side state (its decoder, stop strings,
 * stream callback, telemetry) is private to runtime.c; the Sequence it hands
 * the engine holds what the stages below need (sequence.h). Everything a
 * request needs while running is allocated at submission, so the step loop
 * allocates nothing. See notes/runtime.md. */
#ifndef RUNTIME_H
#define RUNTIME_H
#include "engine.h"
#include "base/err.h"
#include "base/mem.h"
#include "text/sampler.h"
#include "sequence.h"
#include "text/tokenizer.h"
#include "trace/trace.h"
#include <stdint.h>

typedef struct Request Request;   /* private to runtime.c */

/* RT_MAX_STOP: editors' completion clients send 9 to 14 stop strings */
enum { RT_MAX_STOP = 16, RT_STOP_LEN = 64, RT_MAX_SAMPLES = 64 };

/* Called with each piece of request `id`'s text as soon as it is final
 * (whole UTF-8 characters, never a part of a possible stop string), and once
 * more with len 0 when the request finishes. */
typedef void (*RtStreamFn)(int id, const char *text, int len, void *user);

/* Called with each token request `id` generates, before its text: the
 * token, and when the request asked for logprobs (sampling.logprobs) what
 * the sampler saw (SamplerLast: the token's log-probability and the most
 * likely alternatives), else NULL. Not called for the end-of-generation
 * token that finishes it (it has no text). */
typedef void (*RtTokenFn)(int id, int token, const SamplerLast *lp, void *user);

typedef struct RtTelemetry Telemetry;

/* Called once when request `id` has ended, after its last text: its
 * sequence (tokens, finish reason, counters), its telemetry, and for
 * FIN_ERROR the reason ("error: non-finite logits at position P", else
 * NULL). With Runtime.release_finished the request is freed right after. */
typedef void (*RtFinishFn)(int id, const Sequence *q, const Telemetry *t, const char *error,
                           void *user);

typedef struct {
    const char *prompt;          /* UTF-8 text */
    int parse_special;           /* 0: the prompt is all text (the CLI's); 1: special-token texts
                                    in it are read as their tokens (tok_encode_marked), except on
                                    the bytes prompt_plain marks */
    const unsigned char *prompt_plain;   /* (strlen(prompt)) 1: a user's byte (a chat message's),
                                    never a special token; NULL: none */
    int add_bos;                 /* put BOS first when the vocabulary has one */
    SamplerParams sampling;      /* temperature, top_k, top_p, seed */
    int max_tokens;              /* >= 1 */
    int ignore_eos;              /* keep going past EOS (benchmarks want fixed lengths) */
    int n;                       /* samples of this prompt (default 1); sample i uses seed + i.
                                    Samples 1.. are forked from sample 0 once its prompt is
                                    computed: they share its KV blocks, copied on write */
    const char *stop[RT_MAX_STOP];   /* stop strings (NULL-terminated list, may be empty) */
    Priority priority;
    int speculate;               /* draft tokens to have verified per step (speculative decoding,
                                    notes/speculative.md): 0 none, up to SEQ_MAX_DRAFT, capped
                                    by the engine's sched.max_draft; -1 (default): that cap.
                                    Off for a request that asks for logprobs */
    RtStreamFn on_text;          /* may be NULL */
    RtTokenFn on_token;          /* may be NULL */
    RtFinishFn on_finish;        /* may be NULL */
    void *user;
} RtParams;

/* Times in seconds since the engine started, on its clock. */
struct RtTelemetry {
    double arrival, first_scheduled, first_token, finished;
    double queue_wait;           /* first_scheduled - arrival */
    double ttft;                 /* first_token - arrival */
    double tpot;                 /* (finished - first_token) / (n_out - 1); 0 if n_out < 2 */
    double e2e;                  /* finished - arrival */
    long guesses, accepted;      /* speculation: its guessed tokens verified, and accepted */
};

typedef struct {
    const Model *model;
    Engine en;
    Request *all;                /* every request not yet freed, newest first */
    int next_id;
    Trace *trace;                /* NULL: no tracing */
    char *pictures;              /* (pictures_cap) the KV map and block tables, for the trace */
    int pictures_cap;
    int low_mem;                 /* the model decodes weights on demand (--low-mem) */
    double codec_decode, codec_wait;   /* --low-mem: the model's decode totals after the last step */
    double last_decode, last_wait;     /* and what the last step added to them */
    StageTimes last, total;      /* the last step's stage times, and their sums;
                                    output includes delivering the text */
    int release_finished;        /* 1: free a request as soon as it has ended and its
                                    callbacks ran (rt_sequence then finds it no more). A
                                    front end that runs for long sets it, or memory grows
                                    with every request served; 0 (default): keep them
                                    until rt_request_free or rt_free */
} Runtime;

const char *rt_priority_name(Priority p);           /* "low", "normal", "high" */
/* Parse "low" / "normal" / "high"; ST_ARG with a message otherwise. */
int rt_parse_priority(const char *s, Priority *out, Err *e);
const char *rt_finish_name(FinishReason f);         /* "length", "eos", "stop", ... */

/* Default parameters: greedy, 16 tokens, normal priority, BOS on. */
RtParams rt_params_default(void);

int rt_init(Runtime *rt, const Model *m, const EngineConfig *cfg, Err *e);
void rt_free(Runtime *rt);                          /* frees every request too */

/* Attach a trace (before the first submission): it is told every event
 * from now on. NULL detaches. ST_NOMEM if the picture buffer cannot be had. */
int rt_set_trace(Runtime *rt, Trace *t, Err *e);

/* Validate, tokenize, and queue a request (with n > 1: n requests, ids id ..
 * id + n - 1, sharing on_text and user). Returns its id (>= 0), or a
 * negative Status with a one-line reason in e: an empty prompt when the
 * vocabulary has no BOS, a prompt longer than the context, max_tokens < 1,
 * temperature < 0, top_p outside (0, 1], top_k outside 0..V, an unknown
 * priority, speculate outside -1..SEQ_MAX_DRAFT, a stop string too long, or a request that needs more KV blocks
 * than the whole pool holds. Nothing is queued on error. */
int rt_submit(Runtime *rt, const RtParams *p, Err *e);

/* One engine step, then its output delivered: text streamed, stop strings
 * found (the engine is told to finish those), telemetry and trace. With
 * release_finished, the sequences that ended in this step are freed before
 * it returns: read only the counts of the report's plan, not its pointers. */
const StepReport *rt_step(Runtime *rt);

/* Step until idle. ST_ARG (with a message) if a step could schedule nothing
 * while requests wait and none run, which would otherwise loop forever. */
int rt_run(Runtime *rt, Err *e);

int rt_idle(const Runtime *rt);

/* The engine's clock: seconds since start; wait (or, on the step clock,
 * jump) until time t. */
double rt_now(const Runtime *rt);
void rt_wait_until(Runtime *rt, double t);
/* A clock_seconds() stamp on the engine's clock; -1 on the step clock. */
double rt_time_of(const Runtime *rt, double wall);
/* The engine's invariants (engine_check): ST_OK, or the first broken in e. */
int rt_check(const Runtime *rt, Err *e);

/* Cancel a waiting or running request: it finishes with FIN_CANCEL and its
 * blocks go back at once. ST_ARG if the id is unknown or already finished. */
int rt_cancel(Runtime *rt, int id, Err *e);

/* A request's sequence (tokens, state, finish reason, counters) and its
 * telemetry; NULL if the id is unknown or freed. */
const Sequence *rt_sequence(const Runtime *rt, int id);
const Telemetry *rt_telemetry(const Runtime *rt, int id);

/* Why a request ended with FIN_ERROR ("error: non-finite logits at position
 * P"), or NULL. */
const char *rt_error(const Runtime *rt, int id);

/* Free one request (finished or not: a running one is cancelled first). */
void rt_request_free(Runtime *rt, int id);

/* Memory at the end of a run (see trace.h), handed to the trace's report.
 * ready: the allocation counters when start-up ended. */
TraceMemory rt_memory(const Runtime *rt, MemStats ready);

/* The runtime's figures at one moment, by value: the engine's (with the
 * scheduler's and the KV pool's) and the model's context. A front end reads
 * these, never the fields of the stages below (notes/stages.md, "Snapshots"). */
typedef struct {
    EngineStats engine;
    int context;                 /* positions of a sequence: prompt and output together */
} RtStats;
RtStats rt_stats(const Runtime *rt);
/* The KV pool as plain data (engine_kv_view): valid until the next step. */
KvView rt_kv_view(Runtime *rt);

#endif
