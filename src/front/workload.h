/* workload.h - a workload file: one JSON object per line, one request each.
 *
 *   {"prompt": "ROMEO:", "max_tokens": 40, "temperature": 0.8, "seed": 7,
 *    "priority": "high", "stop": ["\n\n"], "arrival_ms": 250}
 *
 * Fields (all but prompt optional): prompt (string), max_tokens (integer >= 1,
 * default 64), temperature (number, default 0), top_k (integer, default 0),
 * top_p (number, default 1), seed (integer >= 0, default 0), priority ("low",
 * "normal", "high"), stop (a string or an array of up to 4 strings), n
 * (samples of the prompt, 1..64, default 1: forked from the first),
 * arrival_ms (number >= 0, default 0: when to submit it, relative to the start
 * of the replay). Blank lines and lines starting with # are skipped. An
 * unknown field is an error (a typo must not pass silently), and so are a
 * field given twice and a \u0000 in a string (C strings would end there).
 * Parsed with cJSON (Debian's libcjson): see notes/runtime.md for why. */
#ifndef WORKLOAD_H
#define WORKLOAD_H
#include "base/err.h"
#include "runtime.h"

typedef struct {
    int line;                /* line number in the file, from 1 */
    double arrival_ms;
    RtParams params;         /* its strings are owned by the Workload */
} WorkItem;

typedef struct {
    WorkItem *items;         /* sorted by arrival_ms (stable: file order on ties) */
    int n;
    char **owned_;           /* (n_owned_) prompts and stop strings */
    int n_owned_;
} Workload;

/* Parse path. ST_IO if it cannot be read; ST_FORMAT with "path:line: ..."
 * naming the field and the problem; ST_ARG if it holds no request. */
int workload_load(Workload *w, const char *path, Err *e);
void workload_free(Workload *w);                    /* accepts a zeroed one */

#endif
