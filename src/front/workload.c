/* workload.c - read a workload file (JSON lines) into request parameters.
 *
 * Each line is parsed on its own, so an error names its line, and each field
 * is checked for its type and range here, with the field's name in the
 * message; the runtime checks the values again when the request is submitted
 * (a workload is one way in, not the only one). */
#include "front/workload.h"
#include "front/json_nul.h"
#include "base/fileio.h"
#include "base/mem.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *keep(Workload *w, const char *s) {
    char **grown = mem_realloc(w->owned_, (size_t)(w->n_owned_ + 1) * sizeof *grown);
    if (!grown) return NULL;
    w->owned_ = grown;
    char *copy = mem_strdup(s);
    if (copy) w->owned_[w->n_owned_++] = copy;
    return copy;
}

static int number(const cJSON *f, const char *where, double lo, double hi, int integer,
                  double *out, Err *e) {
    if (!cJSON_IsNumber(f))
        return err_set(e, ST_FORMAT, "%s: field \"%s\" must be a number", where, f->string);
    double v = f->valuedouble;
    if (!(v >= lo && v <= hi) || (integer && v != floor(v)))
        return err_set(e, ST_FORMAT, "%s: field \"%s\" is %.15g; expected %s in %.15g..%.15g", where,
                       f->string, v, integer ? "an integer" : "a number", lo, hi);
    *out = v;
    return ST_OK;
}

static int parse_line(Workload *w, WorkItem *it, const char *text, const char *where, Err *e) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        return err_set(e, ST_FORMAT, "%s: not valid JSON (column %d)", where,
                       at && at >= text ? (int)(at - text) + 1 : 1);
    }
    int st = ST_OK;
    char key[64];
    int nul = json_escaped_nul(text, strlen(text), key, sizeof key);
    if (!cJSON_IsObject(root)) st = err_set(e, ST_FORMAT, "%s: expected a JSON object", where);
    else if (nul == 2)
        st = err_set(e, ST_FORMAT, "%s: a field name contains \\u0000 (a NUL character), which "
                     "would cut it short", where);
    else if (nul == 1)
        st = err_set(e, ST_FORMAT, "%s: field \"%s\" contains \\u0000 (a NUL character), which "
                     "would cut the text short", where, key);
    RtParams *p = &it->params;
    *p = rt_params_default();
    p->max_tokens = 64;
    int n_stop = 0, have_prompt = 0;
    double v = 0;
    for (const cJSON *f = root->child; f && st == ST_OK; f = f->next) {
        const char *k = f->string;
        for (const cJSON *g = root->child; g != f && st == ST_OK; g = g->next)
            if (!strcmp(g->string, k))   /* cJSON keeps both; the last would silently win */
                st = err_set(e, ST_FORMAT, "%s: duplicate field \"%s\"", where, k);
        if (st) break;
        if (!strcmp(k, "prompt")) {
            if (!cJSON_IsString(f)) st = err_set(e, ST_FORMAT, "%s: field \"prompt\" must be a string", where);
            else if (!(p->prompt = keep(w, f->valuestring))) st = ST_NOMEM;
            have_prompt = 1;
        } else if (!strcmp(k, "max_tokens")) {
            if (!(st = number(f, where, 1, 1 << 30, 1, &v, e))) p->max_tokens = (int)v;
        } else if (!strcmp(k, "temperature")) {
            if (!(st = number(f, where, 0, 1e6, 0, &v, e))) p->sampling.temperature = (float)v;
        } else if (!strcmp(k, "top_k")) {
            if (!(st = number(f, where, 0, 1 << 30, 1, &v, e))) p->sampling.top_k = (int)v;
        } else if (!strcmp(k, "top_p")) {
            if (!(st = number(f, where, 0, 1, 0, &v, e))) p->sampling.top_p = (float)v;
        } else if (!strcmp(k, "seed")) {
            if (!(st = number(f, where, 0, 9007199254740992.0, 1, &v, e))) p->sampling.seed = (uint64_t)v;
        } else if (!strcmp(k, "n")) {
            if (!(st = number(f, where, 1, RT_MAX_SAMPLES, 1, &v, e))) p->n = (int)v;
        } else if (!strcmp(k, "speculate")) {
            if (!(st = number(f, where, 0, SEQ_MAX_DRAFT, 1, &v, e))) p->speculate = (int)v;
        } else if (!strcmp(k, "arrival_ms")) {
            if (!(st = number(f, where, 0, 1e9, 0, &v, e))) it->arrival_ms = v;
        } else if (!strcmp(k, "priority")) {
            if (!cJSON_IsString(f))
                st = err_set(e, ST_FORMAT, "%s: field \"priority\" must be \"low\", \"normal\" or \"high\"", where);
            else if (rt_parse_priority(f->valuestring, &p->priority, e))
                st = err_set(e, ST_FORMAT, "%s: field \"priority\": unknown value \"%s\" (low, normal or high)",
                             where, f->valuestring);
        } else if (!strcmp(k, "stop")) {
            const cJSON *s = cJSON_IsArray(f) ? f->child : f;
            for (; s && st == ST_OK; s = cJSON_IsArray(f) ? s->next : NULL) {
                if (!cJSON_IsString(s))
                    st = err_set(e, ST_FORMAT, "%s: field \"stop\" must be a string or an array of strings", where);
                else if (n_stop == RT_MAX_STOP)
                    st = err_set(e, ST_FORMAT, "%s: field \"stop\": more than %d stop strings", where, RT_MAX_STOP);
                else if (!(p->stop[n_stop++] = keep(w, s->valuestring)))
                    st = ST_NOMEM;
            }
        } else {
            st = err_set(e, ST_FORMAT, "%s: unknown field \"%s\"", where, k);
        }
    }
    if (st == ST_NOMEM) err_set(e, ST_NOMEM, "%s: out of memory", where);
    if (st == ST_OK && !have_prompt) st = err_set(e, ST_FORMAT, "%s: field \"prompt\" is missing", where);
    cJSON_Delete(root);
    return st;
}

int workload_load(Workload *w, const char *path, Err *e) {
    memset(w, 0, sizeof *w);
    static cJSON_Hooks hooks = {mem_alloc, mem_free};   /* cJSON allocates through our seam too */
    cJSON_InitHooks(&hooks);
    FILE *f;
    size_t size;
    int st = fio_fopen(path, &f, &size, e);
    if (st) return st;
    int line_no = 0, cap = 0;
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t len;
    while (st == ST_OK && (len = getline(&line, &line_cap, f)) >= 0) {
        line_no++;
        const char *s = line;
        while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n') s++;
        if (*s == 0 || *s == '#') continue;
        if ((long)strlen(line) != (long)len) {
            st = err_set(e, ST_FORMAT, "%s:%d: the line contains a NUL byte", path, line_no);
            break;
        }
        if (w->n == cap) {
            cap = cap ? 2 * cap : 16;
            WorkItem *grown = mem_realloc(w->items, (size_t)cap * sizeof *grown);
            if (!grown) {
                st = err_set(e, ST_NOMEM, "%s: out of memory at line %d", path, line_no);
                break;
            }
            w->items = grown;
        }
        WorkItem *it = &w->items[w->n];
        memset(it, 0, sizeof *it);
        it->line = line_no;
        char where[600];
        snprintf(where, sizeof where, "%s:%d", path, line_no);
        st = parse_line(w, it, s, where, e);
        if (st == ST_OK) w->n++;
    }
    free(line);   /* getline's buffer comes from libc's malloc */
    if (st == ST_OK && ferror(f)) st = err_set(e, ST_IO, "%s: read error", path);
    fclose(f);
    if (st == ST_OK && w->n == 0) st = err_set(e, ST_ARG, "%s: no request in the file", path);
    if (st) {
        workload_free(w);
        return st;
    }
    /* stable insertion sort by arrival time */
    for (int i = 1; i < w->n; i++) {
        WorkItem x = w->items[i];
        int j = i;
        while (j > 0 && w->items[j - 1].arrival_ms > x.arrival_ms) {
            w->items[j] = w->items[j - 1];
            j--;
        }
        w->items[j] = x;
    }
    return ST_OK;
}

void workload_free(Workload *w) {
    for (int i = 0; i < w->n_owned_; i++) mem_free(w->owned_[i]);
    mem_free(w->owned_);
    mem_free(w->items);
    memset(w, 0, sizeof *w);
}
