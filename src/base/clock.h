/* clock.h - the engine's clock: the wall clock, or a virtual one that
 * advances by exactly one millisecond per engine step.
 *
 * Every time the engine reports (arrivals, first tokens, telemetry, the
 * trace) is read from a Clock. On the wall clock a run's times vary with the
 * machine and its load; on the step clock (`--clock steps`) they are a pure
 * function of what the scheduler decided, so a trace repeats byte for byte,
 * run to run and machine to machine. The rule that maps a workload's
 * arrival_ms onto steps follows: step k runs from (k - 1) ms to k ms of
 * virtual time, and a request with arrival_ms a is submitted before the first
 * step that starts at or after a ms (so arrival_ms 0..1 -> before step 1 or 2
 * ...: a request arrives before step ceil(a) + 1). Durations measured inside a
 * step (how long the forward pass took) are still real: they are facts about
 * the machine, and a step-clock trace leaves them out. */
#ifndef CLOCK_H
#define CLOCK_H
#include <math.h>
#include <time.h>

/* Seconds on a monotonic clock (never jumps with the wall clock). */
static inline double clock_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef enum { CLOCK_WALL = 0, CLOCK_STEPS = 1 } ClockKind;

/* Virtual time is counted in whole microseconds, so that a step's
 * millisecond is exact and equal times compare equal: summing 1e-3 a step
 * in floating point fell short of k ms after k steps for most k past 1000,
 * and a request arriving at k ms waited a step longer than the rule says. */
#define CLOCK_STEP_US 1000LL   /* one engine step of virtual time */

typedef struct {
    ClockKind kind;
    double t0;       /* CLOCK_WALL: clock_seconds() at the start */
    long long vus;   /* CLOCK_STEPS: virtual microseconds since the start */
} Clock;

static inline void clock_start(Clock *c, ClockKind kind) {
    c->kind = kind;
    c->t0 = clock_seconds();
    c->vus = 0;
}

/* Whole microseconds as seconds: the one conversion both the clock and a
 * time compared with it use (clock_at), so that equal counts give equal
 * doubles. */
static inline double clock_us_seconds(long long us) { return (double)us / 1e6; }

/* A time given in ms (a workload's arrival_ms), in seconds on the clock's
 * grain: rounded to a whole microsecond, converted as clock_now converts. */
static inline double clock_at(double ms) { return clock_us_seconds(llround(ms * 1e3)); }

/* Seconds since clock_start. */
static inline double clock_now(const Clock *c) {
    return c->kind == CLOCK_STEPS ? clock_us_seconds(c->vus) : clock_seconds() - c->t0;
}

/* An engine step ended: virtual time moves on by one step. */
static inline void clock_step_done(Clock *c) {
    if (c->kind == CLOCK_STEPS) c->vus += CLOCK_STEP_US;
}

/* Nothing to do until time t: sleep (wall), or jump there (steps). */
static inline void clock_wait_until(Clock *c, double t) {
    double now = clock_now(c);
    if (t <= now) return;
    if (c->kind == CLOCK_STEPS) {
        long long us = llround(t * 1e6);
        if (us > c->vus) c->vus = us;
        return;
    }
    double d = t - now;
    struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
    nanosleep(&ts, NULL);
}

#endif
