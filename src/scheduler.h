/* scheduler.h - who runs this step: waiting, running and preempted queues,
 * FCFS or priority (with aging), a token budget and a sequence cap per step,
 * chunked prefill mixed with decode, preemption by recompute.
 *
 * The scheduler decides; it never runs the model, and only the engine calls
 * it. It owns the running slots and each sequence's place in the KV pool
 * (its block table, n_computed). See notes/scheduler.md. */
#ifndef SCHEDULER_H
#define SCHEDULER_H
#include "base/err.h"
#include "kv_paged.h"
#include "sequence.h"

typedef enum { SCHED_FCFS = 0, SCHED_PRIORITY = 1 } SchedPolicy;

typedef struct {
    SchedPolicy policy;
    int token_budget;    /* most tokens in one step (decode tokens + prefill chunks) */
    int max_seqs;        /* most sequences running at once (and in one step) */
    int chunk;           /* most prefill tokens of one sequence in one step; 0 = budget */
    int aging_steps;     /* priority policy: a waiting request rises one level per this many steps */
    int max_draft;       /* speculation: most draft tokens of one sequence in one step; 0 = off */
    int spec_limit;      /* speculation: drafts join a step only while its tokens stay at most
                            this many (more: the step is compute-bound; notes/speculative.md) */
} SchedConfig;

typedef struct {
    SchedConfig cfg;
    KvPool *pool;
    Sequence **running;  /* (max_seqs) by slot; NULL = free slot */
    int n_running;
    Sequence *waiting;   /* queue in arrival order (linked by next) */
    Sequence *preempted; /* queue in the order they were preempted */
    int n_waiting, n_preempted_queued;
    long step;           /* steps decided so far */
    long n_preemptions;  /* total */
    long n_rewinds;      /* commits that dropped rejected draft positions */
    long rewound_blocks; /* blocks those rewinds gave back to the pool */
    StepPlan out;
    Sequence **order;    /* (max_seqs) scratch: running sequences by rank */
} Scheduler;

int sched_init(Scheduler *s, const SchedConfig *cfg, KvPool *pool, Err *e);

/* The scheduler's figures at one moment, by value. */
typedef struct {
    long step;                   /* steps decided so far */
    long preemptions;            /* total */
    long rewinds, rewound_blocks;   /* speculation: commits that dropped rejected positions;
                                       blocks they gave back */
    int running, waiting;        /* sequences in a slot; queued (new or preempted) */
    int max_seqs, token_budget;  /* from its config */
    int max_draft, spec_limit;   /* from its config: speculation */
} SchedStats;
SchedStats sched_stats(const Scheduler *s);
void sched_free(Scheduler *s);                      /* accepts a zeroed one */

/* Queue a sequence: state SEQ_WAITING. Its arrival_step is stamped with the
 * current step unless it was stamped before (-1 = not yet: a new sequence). */
void sched_add(Scheduler *s, Sequence *q);

/* Decide one step: fills s->out and returns it. Reserves the KV blocks of
 * every scheduled token, preempting (lowest priority, newest first) when the
 * pool runs out, and admits waiting sequences while budget, slots and blocks
 * last. An empty plan with sequences waiting means they wait for blocks. */
const StepPlan *sched_step(Scheduler *s);

/* The plan's K/V are written: advance each item's n_computed and offer the
 * blocks it completed to the prefix cache. rejected (NULL: none) holds, per
 * item, how many of its last positions were draft tokens the model
 * rejected: those are not committed, and blocks that hold only them go back
 * to the pool (kv_seq_rewind). Returns the blocks given back. */
int sched_commit(Scheduler *s, const StepPlan *p, const int *rejected);

/* A running or waiting sequence leaves (finished or cancelled): its blocks go
 * back to the pool, its slot is freed; it is taken out of any queue. */
void sched_remove(Scheduler *s, Sequence *q);

/* Put `child` (waiting, holding nothing, in no queue) into a free slot as a
 * fork of the running `parent`: the same blocks (refcounts + 1, copied on the
 * first write), the same computed positions, the parent's arrival step if it
 * has none. 0 if no slot is free. */
int sched_fork(Scheduler *s, const Sequence *parent, Sequence *child);

/* True when nothing is running or waiting. */
int sched_idle(const Scheduler *s);

/* Where a sequence stands in the queue order (higher runs first): the
 * priority level, plus one per aging_steps waited under SCHED_PRIORITY. */
long sched_rank(const Scheduler *s, const Sequence *q);

#endif
