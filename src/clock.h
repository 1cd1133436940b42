/* clock.h - one monotonic clock for every timing in the engine. */
#ifndef CLOCK_H
#define CLOCK_H
#include <time.h>

/* Seconds on a monotonic clock (never jumps with the wall clock). */
static inline double clock_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
