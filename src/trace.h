/* trace.h - what the engine does, told as it happens.
 *
 * The engine calls these hooks at each event of a request's life and after
 * each step; with no Trace attached (Engine.trace == NULL) they are never
 * called, so tracing costs one pointer test per event when off.
 *
 * Text goes to a FILE (stderr in the CLI), one event per line, times in ms
 * since the engine started:
 *   TRACE_ON       (--trace)          lifecycle events and step summaries;
 *                                     runs of plain decode steps are summed
 *                                     into one line
 *   TRACE_VERBOSE  (--trace=verbose)  every step, every token, block tables */
#ifndef TRACE_H
#define TRACE_H
#include "runtime.h"
#include "scheduler.h"
#include <stdio.h>

/* Seconds spent in each stage of a step. */
typedef struct {
    double schedule, build, forward, sample, output;
} StageTimes;

enum { TRACE_OFF = 0, TRACE_ON = 1, TRACE_VERBOSE = 2 };

typedef struct Trace {
    int level;
    FILE *text;              /* where the text trace goes */
    int step_events;         /* lifecycle events printed since the last step ended */
    /* a run of plain decode steps not printed yet (TRACE_ON) */
    long run_first, run_last;          /* step numbers; run_first 0 = no run */
    long run_tokens;
    int run_seqs_min, run_seqs_max;
    StageTimes run_time;               /* summed over the run */
    double run_end;                    /* ms at the end of the run's last step */
} Trace;

void trace_init(Trace *t, int level, FILE *text);
/* Print what is pending (a run of decode steps). */
void trace_flush(Trace *t, const Engine *en);

/* Hooks, called by the engine and the runtime. */
void trace_arrived(Trace *t, const Engine *en, const Request *r);
void trace_scheduled(Trace *t, const Engine *en, const SchedOutput *o);
void trace_token(Trace *t, const Engine *en, const Request *r, int token);
void trace_finished(Trace *t, const Engine *en, const Request *r);
void trace_step_done(Trace *t, const Engine *en, const SchedOutput *o, const StageTimes *st);

#endif
