/* engine.h - the step loop: scheduler decides, executor runs, outputs are
 * processed, finished requests give their blocks back. Run until idle.
 *
 * An Engine owns the KV pool, the scheduler, the executor and every request
 * submitted to it (runtime.h's rt_submit). Two engines can live side by side:
 * there is no global state. See notes/engine.md. */
#ifndef ENGINE_H
#define ENGINE_H
#include "err.h"
#include "executor.h"
#include "kv_paged.h"
#include "model.h"
#include "runtime.h"
#include "scheduler.h"
#include "trace.h"

typedef struct {
    int block_size;       /* tokens per KV block (default 16) */
    int n_blocks;         /* pool size in blocks; 0: from kv_bytes */
    size_t kv_bytes;      /* pool size in bytes when n_blocks is 0; both 0: the default */
    SchedConfig sched;
} EngineConfig;

struct Engine {
    const Model *model;
    EngineConfig cfg;
    KvPool pool;
    Scheduler sched;
    Executor exec;
    Request *all;         /* every request not yet freed, newest first (all_next) */
    int next_id;
    double t0;            /* clock_seconds() at engine_init */
    long steps;           /* steps taken (engine_step calls), the number of the last one */
    long tokens_run;      /* tokens through the model (prefill + decode) */
    long tokens_out;      /* tokens sampled */
    StageTimes last;      /* the last step's stage times */
    double step_started;  /* seconds since start when the last step began */
    size_t step_allocations;   /* allocations made inside engine_step (should stay 0) */
    StageTimes total;     /* summed over all steps */
    Trace *trace;         /* NULL: no tracing */
};

/* Defaults: block 16, FCFS, 16 sequences, budget 256 tokens, chunk 0 (the
 * budget), aging 32 steps, pool: every sequence's full context, capped at
 * 1 GiB of K/V (but never below one full context). */
EngineConfig engine_config_default(void);

int engine_init(Engine *en, const Model *m, const EngineConfig *cfg, Err *e);
void engine_free(Engine *en);                       /* frees every request too */

/* Seconds since engine_init. */
double engine_now(const Engine *en);

/* One step. Returns the tokens run (0 when nothing was scheduled). */
int engine_step(Engine *en);

/* Step until nothing is running or waiting. ST_ARG (with a message) if a
 * step could schedule nothing while requests wait and none run, which would
 * otherwise loop forever; ST_OK when idle. */
int engine_run(Engine *en, Err *e);

int engine_idle(const Engine *en);

#endif
