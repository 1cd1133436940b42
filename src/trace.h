/* trace.h - what the engine does, told as it happens.
 *
 * The engine and the runtime call these hooks at each event of a request's
 * life and after each step; with no Trace attached (Engine.trace == NULL) they
 * are never called, so tracing costs one pointer test per event when off.
 *
 * Three outputs, each optional:
 *   text   one line per event on a FILE (stderr in the CLI), times in ms since
 *          the engine started.
 *            TRACE_ON       (--trace) lifecycle events and step summaries; runs
 *                           of plain decode steps are summed into one line
 *            TRACE_VERBOSE  (--trace=verbose) every step, every token, block
 *                           tables, and a map of the KV pool every step
 *   json   Chrome trace-event JSON (opens in Perfetto and chrome://tracing):
 *          one track per request (queued / prefill / decode spans, instant
 *          events), one track of engine steps with their stages, counters.
 *   svg    a timeline of requests, written at the end from spans recorded in
 *          a buffer allocated at trace_init (no allocation while running).
 * See notes/tracing.md. */
#ifndef TRACE_H
#define TRACE_H
#include "err.h"
#include "mem.h"
#include "runtime.h"
#include "scheduler.h"
#include <stdio.h>

/* Seconds spent in each stage of a step. */
typedef struct {
    double schedule, build, forward, sample, output;
} StageTimes;

enum { TRACE_OFF = 0, TRACE_ON = 1, TRACE_VERBOSE = 2 };

/* Phases of a request, the spans of its track. */
enum { PH_NONE = 0, PH_QUEUED, PH_PREFILL, PH_DECODE };

typedef struct {
    int req;                 /* request id */
    int phase;               /* PH_* for a span; for a mark: 'f' first token, 'p' preempted */
    double t0, t1;           /* seconds since engine start (t1 = t0 for a mark) */
} TraceSpan;

typedef struct Trace {
    int level;               /* TRACE_OFF: no text, but json/svg may still be on */
    FILE *text;              /* text trace, or NULL */
    FILE *json;              /* Chrome trace JSON, or NULL */
    int json_events;         /* events written (for the commas) */
    int kv_map_every;        /* print the KV map every this many steps (0: at verbose only) */
    int step_events;         /* lifecycle events printed since the last step ended */
    /* a run of plain decode steps not printed yet */
    long run_first, run_last;          /* step numbers; run_first 0 = no run */
    long run_tokens;
    int run_seqs_min, run_seqs_max;
    StageTimes run_time;               /* summed over the run */
    double run_end;                    /* ms at the end of the run's last step */
    /* spans for the SVG timeline */
    TraceSpan *spans;
    int n_spans, cap_spans, dropped;
    int max_req;                       /* highest request id seen */
} Trace;

/* level: TRACE_OFF/ON/VERBOSE for text (text may be NULL); json: an open
 * file for the JSON trace or NULL; svg_spans: room for that many spans and
 * marks for trace_write_svg (0: no SVG). */
int trace_init(Trace *t, int level, FILE *text, FILE *json, int svg_spans, Err *e);
/* Print what is pending, close the JSON array; free the span buffer. The
 * FILEs stay open (the caller owns them). */
void trace_finish(Trace *t, const Engine *en);
void trace_free(Trace *t);

/* Print what is pending (a run of decode steps). */
void trace_flush(Trace *t, const Engine *en);

/* Hooks, called by the engine and the runtime. now: seconds since start. */
void trace_arrived(Trace *t, const Engine *en, Request *r);
void trace_scheduled(Trace *t, const Engine *en, const SchedOutput *o);
void trace_token(Trace *t, const Engine *en, Request *r, int token, double now);
void trace_forked(Trace *t, const Engine *en, const Request *first, Request *sample);
void trace_finished(Trace *t, const Engine *en, Request *r);
void trace_step_done(Trace *t, const Engine *en, const SchedOutput *o, const StageTimes *st);

/* The KV pool as text: one character per block, 64 to a line. '.' free,
 * '+' cached (nobody holds it, its K/V kept for the prefix cache), a request's
 * id in base 36 (0-9, a-z, then A-Z for ids 36-61 modulo 62) for a block one
 * sequence holds, '*' for a block several hold (shared prefix). */
void trace_kv_map(FILE *f, const Engine *en);

/* The timeline: one row per request, spans coloured by phase. */
int trace_write_svg(const Trace *t, const Engine *en, FILE *f);

/* Memory at the end: weights (bytes mapped, bytes resident), the KV pool
 * (bytes, blocks, peak held), activations and scratch, peak RSS, and the
 * allocations made since `ready` (the counters when start-up ended): inside
 * engine steps (the promise is zero) and at request submission (each request
 * gets its token array and sampler then, outside the step loop). */
void trace_memory_report(FILE *f, const Engine *en, MemStats ready);

#endif
