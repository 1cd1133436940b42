/* hook.c - function entry/exit hooks for tools/count_hops.sh.
 *
 * GCC's -finstrument-functions calls these at the entry and exit of every
 * function compiled with it; each writes one line ("> ADDR" or "< ADDR") to
 * the file named by HOPS_LOG. The hooks themselves are not instrumented. */
#include <stdio.h>
#include <stdlib.h>

static FILE *hops_log;

void __cyg_profile_func_enter(void *fn, void *site) __attribute__((no_instrument_function));
void __cyg_profile_func_exit(void *fn, void *site) __attribute__((no_instrument_function));

void __cyg_profile_func_enter(void *fn, void *site) {
    if (!hops_log) {
        const char *path = getenv("HOPS_LOG");
        hops_log = fopen(path ? path : "/dev/null", "w");
        if (!hops_log) return;
    }
    fprintf(hops_log, "> %p\n", fn);
}

void __cyg_profile_func_exit(void *fn, void *site) {
    if (hops_log) fprintf(hops_log, "< %p\n", fn);
}
