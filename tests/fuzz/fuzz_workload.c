/* fuzz_workload.c - any bytes as a workload file (JSON lines).
 *
 * The input goes to a memfd and through workload_load. What must hold: no
 * crash, leak or undefined behaviour; a refusal is a status with a message
 * naming the file; an accepted workload keeps the promises of workload.h:
 * at least one request, every field in its documented range (max_tokens
 * >= 1, n in 1..64, top_p in [0, 1], temperature and arrival_ms >= 0, at
 * most 4 stop strings, a known priority), each string a C string the
 * workload owns, the items sorted by arrival (stable: ties in file order,
 * so line numbers grow within a tie), and workload_free leaving it zeroed.
 * Seeds (tests/fuzz/fuzz_workload/): the example workloads in data/ and
 * lines with every field, escapes, comments and errors. */
#include "fuzz.h"
#include "front/workload.h"

static MemFile file;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    memfile_open(&file, "fuzz_workload.jsonl");
    return 0;
}

static int owned(const Workload *w, const char *s) {
    for (int i = 0; i < w->n_owned_; i++)
        if (w->owned_[i] == s) return 1;
    return 0;
}

static void check(const Workload *w) {
    if (w->n < 1) fuzz_fail("a workload accepted with %d requests", w->n);
    for (int i = 0; i < w->n; i++) {
        const WorkItem *it = &w->items[i];
        const RtParams *p = &it->params;
        if (!p->prompt || !owned(w, p->prompt)) fuzz_fail("item %d: prompt not owned by the workload", i);
        if (p->max_tokens < 1) fuzz_fail("item %d: max_tokens %d", i, p->max_tokens);
        if (p->n < 1 || p->n > RT_MAX_SAMPLES) fuzz_fail("item %d: n %d", i, p->n);
        if (!(p->sampling.temperature >= 0)) fuzz_fail("item %d: temperature %g", i, (double)p->sampling.temperature);
        if (!(p->sampling.top_p >= 0 && p->sampling.top_p <= 1)) fuzz_fail("item %d: top_p %g", i, (double)p->sampling.top_p);
        if (p->sampling.top_k < 0) fuzz_fail("item %d: top_k %d", i, p->sampling.top_k);
        if (p->priority < PRIO_LOW || p->priority > PRIO_HIGH) fuzz_fail("item %d: priority %d", i, (int)p->priority);
        if (!(it->arrival_ms >= 0)) fuzz_fail("item %d: arrival_ms %g", i, it->arrival_ms);
        for (int k = 0; k < RT_MAX_STOP && p->stop[k]; k++)
            if (!owned(w, p->stop[k])) fuzz_fail("item %d: stop string %d not owned", i, k);
        (void)strlen(p->prompt);   /* ASan: a whole C string */
        if (i > 0) {
            const WorkItem *prev = &w->items[i - 1];
            if (prev->arrival_ms > it->arrival_ms) fuzz_fail("items %d, %d out of arrival order", i - 1, i);
            if (prev->arrival_ms == it->arrival_ms && prev->line >= it->line)
                fuzz_fail("items %d, %d: a tie not in file order (lines %d, %d)", i - 1, i, prev->line, it->line);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    memfile_set(&file, data, size);
    Workload w;
    Err e = {{0}};
    if (workload_load(&w, file.path, &e) == ST_OK) {
        if (fuzz_verbose()) fprintf(stderr, "fuzz_workload: %d requests\n", w.n);
        check(&w);
        workload_free(&w);
        if (w.items || w.n || w.owned_ || w.n_owned_) fuzz_fail("workload_free left fields set");
    } else {
        if (fuzz_verbose()) fprintf(stderr, "fuzz_workload: %s\n", e.msg);
        if (!strstr(e.msg, file.path)) fuzz_fail("a refusal that does not name the file: %s", e.msg);
        if (w.items || w.n || w.owned_) fuzz_fail("a refused workload left memory behind");
    }
    return 0;
}
