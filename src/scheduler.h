/* scheduler.h - who runs this step: waiting, running and preempted queues,
 * FCFS or priority (with aging), a token budget and a sequence cap per step,
 * chunked prefill mixed with decode, preemption by recompute.
 *
 * The scheduler owns the sequence slots (a KvSeq each, allocated once) and
 * decides; it never runs the model. See notes/scheduler.md. */
#ifndef SCHEDULER_H
#define SCHEDULER_H
#include "err.h"
#include "kv_paged.h"
#include "runtime.h"

typedef enum { SCHED_FCFS = 0, SCHED_PRIORITY = 1 } SchedPolicy;

typedef struct {
    SchedPolicy policy;
    int token_budget;    /* most tokens in one step (decode tokens + prefill chunks) */
    int max_seqs;        /* most sequences running at once (and in one step) */
    int chunk;           /* most prefill tokens of one sequence in one step; 0 = budget */
    int aging_steps;     /* priority policy: a waiting request rises one level per this many steps */
} SchedConfig;

/* One sequence's work in this step: positions n_computed .. n_computed + n - 1. */
typedef struct {
    Request *req;
    int n;               /* tokens to run */
    int from;            /* first position (req->n_computed when scheduled) */
    int sample;          /* 1 if this run reaches the last known token: sample the next */
} SchedItem;

/* What sched_step decided. Arrays allocated once by sched_init. */
typedef struct {
    SchedItem *items;    /* (max_seqs) */
    int n_items;
    int n_tokens;        /* sum of items[].n (<= token_budget) */
    int n_prefill_tokens, n_decode_tokens;
    Request **preempted; /* (max_seqs) requests preempted in this step */
    int n_preempted;
    Request **admitted;  /* (max_seqs) requests that got a slot in this step */
    int n_admitted;
    Request **cow;       /* (max_seqs) requests whose reservation copied a shared block */
    int n_cow;
} SchedOutput;

typedef struct {
    SchedConfig cfg;
    KvPool *pool;
    KvSeq *seqs;         /* (max_seqs) one per slot */
    Request **running;   /* (max_seqs) by slot; NULL = free slot */
    int n_running;
    Request *waiting;    /* queue in arrival order (linked by next) */
    Request *preempted;  /* queue in the order they were preempted */
    int n_waiting, n_preempted_queued;
    long step;           /* steps decided so far */
    long n_preemptions;  /* total */
    SchedOutput out;
    Request **order;     /* (max_seqs) scratch: running requests by rank */
} Scheduler;

/* cap_blocks: table capacity of each slot (blocks for the model's context). */
int sched_init(Scheduler *s, const SchedConfig *cfg, KvPool *pool, int cap_blocks, Err *e);
void sched_free(Scheduler *s);                      /* accepts a zeroed one */

/* Queue a new request (state RQ_WAITING). */
void sched_add(Scheduler *s, Request *r);

/* Decide one step: fills s->out and returns it. Reserves the KV blocks of
 * every scheduled token, preempting (lowest priority, newest first) when the
 * pool runs out, and admits waiting requests while budget, slots and blocks
 * last. An empty output with requests waiting means they wait for blocks. */
const SchedOutput *sched_step(Scheduler *s);

/* A running or waiting request leaves (finished or cancelled): its blocks go
 * back to the pool, its slot is freed; it is taken out of any queue. */
void sched_remove(Scheduler *s, Request *r);

/* Put `child` (waiting, holding nothing) into a free slot as a fork of the
 * running `parent`: the same blocks (refcounts + 1, copied on the first
 * write), the same computed positions. 0 if no slot is free. */
int sched_fork(Scheduler *s, const Request *parent, Request *child);

/* The KvSeq of a running request. */
KvSeq *sched_seq(Scheduler *s, const Request *r);

/* True when nothing is running or waiting. */
int sched_idle(const Scheduler *s);

/* Where a request stands in the queue order (higher runs first): the
 * priority level, plus one per aging_steps waited under SCHED_PRIORITY. */
long sched_rank(const Scheduler *s, const Request *r);

#endif
