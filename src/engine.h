/* engine.h - the step loop: the scheduler decides, the executor runs, the
 * engine processes what came out (appends tokens, finishes sequences, forks
 * samples) and reports it upward.
 *
 * An Engine owns the KV pool, the scheduler and the executor. It is told
 * about sequences by the runtime (engine_add, engine_finish, engine_drop)
 * and answers each step with a StepReport; it never calls up, and it is the
 * only caller of the scheduler and the executor. Two engines can live side
 * by side: there is no global state. See notes/engine.md. */
#ifndef ENGINE_H
#define ENGINE_H
#include "base/clock.h"
#include "base/kv_view.h"
#include "base/err.h"
#include "executor.h"
#include "kv_paged.h"
#include "model.h"
#include "scheduler.h"
#include "sequence.h"

/* Speculation's default spec_limit (scheduler.h): drafts join a step only
 * while it has at most this many tokens. Measured: notes/speculative.md. */
enum { ENGINE_SPEC_LIMIT = 16 };

typedef struct {
    int block_size;       /* tokens per KV block (default 16) */
    int n_blocks;         /* pool size in blocks; 0: from kv_bytes */
    size_t kv_bytes;      /* pool size in bytes when n_blocks is 0; both 0: the default */
    SchedConfig sched;
    ClockKind clock;      /* CLOCK_WALL (default) or CLOCK_STEPS (see clock.h) */
} EngineConfig;

/* Seconds spent in each stage of a step. */
typedef struct {
    double schedule, build, forward, sample, output;
} StageTimes;

/* One token a step produced. A sample forked in this step gets its first
 * token here too, with what the fork gave it. */
typedef struct {
    Sequence *seq;
    int token;            /* appended to seq->tokens; -1 with FIN_ERROR (nothing appended) */
    FinishReason finish;  /* FIN_NONE, or why the engine finished it: EOS, length, context,
                             error (the logits of its last position were not all finite) */
    const char *error;    /* FIN_ERROR: what the model said went wrong (a weight that could
                             not be decoded, ...), or NULL: the arithmetic gave NaN */
    int draft;            /* 1: an accepted draft token (speculation: a step may then give
                             one sequence several tokens, in order) */
    struct {
        int from;         /* -1, or the id of the sequence whose blocks it now shares */
        int slot, blocks, tokens;   /* where it went, blocks shared, prompt tokens they hold */
    } fork;
} StepOutput;

/* What one step did, for the stage above. Valid until the next step. */
typedef struct {
    long step;            /* its number, from 1 */
    double start, end;    /* clock times (seconds since the engine started) */
    const StepPlan *plan; /* the scheduler's decision (admitted, preempted, items ...) */
    StepOutput *out;      /* (2 * max_seqs) tokens in the order they were sampled */
    int n_out;
    StageTimes times;     /* output: the engine's part (appending, finishing, forking) */
    struct {
        int proposed;     /* draft tokens verified in this step (plan->n_draft_tokens) */
        int accepted;     /* of those, accepted */
        int rewinds;      /* sequences with positions to take back (a rejected guess) */
        int blocks;       /* blocks those rewinds gave back to the pool */
    } spec;
    const int *accepted;  /* (plan->n_items) per item, of its items[i].draft guesses, how many
                             were accepted */
} StepReport;

struct Engine {
    const Model *model;
    EngineConfig cfg;
    KvPool pool;
    Scheduler sched;
    Executor exec;
    Clock clock;
    int cap_blocks;       /* block-table capacity of a sequence (the model's context) */
    long steps;           /* steps taken (engine_step calls), the number of the last one */
    long tokens_run;      /* tokens through the model (prefill + decode) */
    long tokens_out;      /* tokens sampled */
    long spec_proposed;   /* draft tokens verified (speculation) */
    long spec_accepted;   /* of those, accepted */
    int *rejected;        /* (max_seqs) per item of the step: draft positions to rewind */
    StepReport report;
    KvViewSeq *view_seqs;      /* (max_seqs) engine_kv_view's */
    size_t step_allocations;   /* allocations made inside engine_step (should stay 0) */
};
typedef struct Engine Engine;

/* Defaults: block 16, FCFS, 16 sequences, budget 256 tokens, chunk 0 (the
 * budget), aging 32 steps, the wall clock, pool: every sequence's full
 * context, capped at 1 GiB of K/V (but never below one full context). */
EngineConfig engine_config_default(void);

int engine_init(Engine *en, const Model *m, const EngineConfig *cfg, Err *e);
void engine_free(Engine *en);    /* the sequences are the caller's: engine_drop them first */

/* Seconds since engine_init, on the engine's clock. */
double engine_now(const Engine *en);
/* Wait (or, on the step clock, jump) until time t on the engine's clock. */
void engine_wait_until(Engine *en, double t);
/* A clock_seconds() stamp as a time on the engine's wall clock (seconds
 * since it started); on the step clock, which no stamp can name, -1. */
double engine_time_of(const Engine *en, double wall);
/* Every invariant of the KV pool and the block tables (kv_pool_check):
 * ST_OK, or ST_FORMAT with the first one broken in e. */
int engine_check(const Engine *en, Err *e);

/* The engine's figures at one moment, by value, with those of the stages it
 * owns: what the runtime, the front ends, the tools and the trace read
 * instead of fields (notes/stages.md, "Snapshots"). */
typedef struct {
    long steps;                  /* steps taken, the number of the last one */
    long tokens_run, tokens_out; /* through the model (prefill + decode); sampled */
    long spec_proposed, spec_accepted;   /* draft tokens verified; accepted */
    size_t step_allocations;     /* allocations made inside engine_step (should stay 0) */
    ClockKind clock;
    int cap_blocks;              /* block-table capacity of a sequence (the model's context) */
    size_t activations;          /* bytes of the executor's run state */
    SchedStats sched;
    KvStats kv;
} EngineStats;
EngineStats engine_stats(const Engine *en);

/* Take a new sequence (made by the caller, fields as sequence.h says:
 * state SEQ_WAITING, slot -1, arrival_step -1, counters 0): allocate its
 * block table and queue it, or, with fork_of set, hold it until fork_of's
 * prompt is computed and fork it then. ST_NOMEM with a message. */
int engine_add(Engine *en, Sequence *q, Sequence *fork_of, Err *e);

/* One step: schedule, run, sample, append, finish. Sequences finished here
 * (EOS, length, context) have already given their blocks back. */
const StepReport *engine_step(Engine *en);

/* The caller ends a sequence (a stop string, a cancel): its blocks go back
 * at once; its waiting samples are queued to run on their own. On a
 * sequence the engine already finished, only the reason changes (a stop
 * string found in its last token outranks "length"). */
void engine_finish(Engine *en, Sequence *q, FinishReason why);

/* A stop string ended q at its n_out-th output token. A speculative step
 * appends several tokens at once, so the ones after it are taken back
 * (n_tokens, n_out) before q finishes with FIN_STOP, as engine_finish. */
void engine_stop(Engine *en, Sequence *q, int n_out);

/* Forget a sequence, finished or not: out of every queue and list, its block
 * table freed. The caller then frees the Sequence itself. */
void engine_drop(Engine *en, Sequence *q);

/* True when nothing is running or waiting. */
int engine_idle(const Engine *en);

/* Sequences waiting (new or preempted) and running. */
int engine_waiting(const Engine *en);
int engine_running(const Engine *en);

/* The KV pool as plain data (kv_view.h): each block's refcount, and each
 * running sequence's block table, for the trace to draw and the tools to
 * measure. Valid until the next step. */
KvView engine_kv_view(Engine *en);

#endif
