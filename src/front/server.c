/* server.c - the OpenAI-compatible HTTP front end (see server.h and
 * notes/server.md).
 *
 * A request's path, with the functions to break on:
 *
 *   handle_request     an HTTP thread (libmicrohttpd's, one per connection)
 *                      gathers the body; answer_generate parses it
 *                      (srv_parse_request), makes a Job and queue_job puts it on
 *                      the server's queue, then waits for the engine to take it
 *   srv_run            the engine thread takes the queue (take_work), submits
 *                      each job (submit_job -> rt_submit), steps the engine
 *   on_text, on_finish the runtime's callbacks, on the engine thread: text
 *                      appended to the job under its lock, waiters woken
 *   stream_reader      libmicrohttpd asks for the next bytes of a streamed
 *                      response: the job's new text as SSE chunks (refill)
 *   request_done       the request ended: if the client went away before the
 *                      end, the job is marked cancelled (job_cancel) and the
 *                      engine thread calls rt_cancel at its next turn (sweep)
 *
 * Memory: the HTTP threads allocate with malloc, not mem_alloc: mem.h's
 * counters belong to one thread, the engine's. A Job is shared by two
 * owners (the HTTP request and the engine) and counted: the last to let go
 * frees it. Locks: Server.mu guards the queue, the trace events and the
 * metrics; Job.mu guards a job's text and state. Neither is held while the
 * engine steps, except a job's, briefly, inside the callbacks. */
#include "front/server.h"
#include "front/json_nul.h"
#include "base/clock.h"
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ==== a growing string (malloc'd) ========================================= */

typedef struct {
    char *s;
    size_t len, cap;
    int failed;               /* an allocation failed: the result is NULL */
} Buf;

static void buf_add(Buf *b, const char *s, size_t n) {
    if (b->failed) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *grown = realloc(b->s, cap);
        if (!grown) {
            b->failed = 1;
            return;
        }
        b->s = grown;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static void buf_str(Buf *b, const char *s) { buf_add(b, s, strlen(s)); }

static void buf_printf(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_printf(Buf *b, const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0) buf_add(b, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

/* The string, handed over (NULL if an allocation failed). */
static char *buf_take(Buf *b) {
    if (b->failed || !b->s) {
        free(b->s);
        if (b->failed) return NULL;
        char *empty = malloc(1);
        if (empty) empty[0] = 0;
        return empty;
    }
    return b->s;
}

/* ==== chat templates ======================================================== */

const char *srv_template_name(ChatTemplate t) {
    static const char *const names[] = {"plain", "chatml", "llama2", "llama3", "zephyr"};
    return t >= TMPL_PLAIN && t <= TMPL_ZEPHYR ? names[t] : "unknown";
}

static int has(const char *s, size_t n, const char *marker) {
    return s && memmem(s, n, marker, strlen(marker)) != NULL;
}

/* As llama.cpp does, by the markers a Jinja template writes out: it is
 * never run, only recognised. Phi-3 also writes <|user|> but ends turns
 * with <|end|>: not Zephyr, so plain. */
ChatTemplate srv_template_detect(const char *t, size_t n) {
    if (has(t, n, "<|im_start|>")) return TMPL_CHATML;
    if (has(t, n, "<|start_header_id|>") && has(t, n, "<|end_header_id|>")) return TMPL_LLAMA3;
    if (has(t, n, "[INST]")) return TMPL_LLAMA2;
    if (has(t, n, "<|user|>") && !has(t, n, "<|end|>")) return TMPL_ZEPHYR;
    return TMPL_PLAIN;
}

/* BOS is not written: the runtime puts it first (RtParams.add_bos). */
char *srv_chat_render(ChatTemplate t, const SrvMessage *m, int n) {
    Buf b = {0};
    int i = 0;
    switch (t) {
    case TMPL_CHATML:
        for (; i < n; i++) buf_printf(&b, "<|im_start|>%s\n%s<|im_end|>\n", m[i].role, m[i].content);
        buf_str(&b, "<|im_start|>assistant\n");
        break;
    case TMPL_LLAMA3:
        for (; i < n; i++)
            buf_printf(&b, "<|start_header_id|>%s<|end_header_id|>\n\n%s<|eot_id|>", m[i].role, m[i].content);
        buf_str(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case TMPL_LLAMA2: {
        /* [INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST] answer</s><s>[INST] ... */
        const char *sys = NULL;
        int first = 1;
        for (; i < n; i++) {
            if (!strcmp(m[i].role, "system")) {
                sys = m[i].content;
            } else if (!strcmp(m[i].role, "user")) {
                buf_str(&b, first ? "[INST] " : "<s>[INST] ");
                if (sys) buf_printf(&b, "<<SYS>>\n%s\n<</SYS>>\n\n", sys);
                sys = NULL;
                buf_printf(&b, "%s [/INST]", m[i].content);
                first = 0;
            } else {
                buf_printf(&b, " %s</s>", m[i].content);
            }
        }
        break;
    }
    case TMPL_ZEPHYR:
        for (; i < n; i++) buf_printf(&b, "<|%s|>\n%s</s>\n", m[i].role, m[i].content);
        buf_str(&b, "<|assistant|>\n");
        break;
    default:
        for (; i < n; i++) buf_printf(&b, "%s: %s\n", m[i].role, m[i].content);
        buf_str(&b, "assistant:");
        break;
    }
    return buf_take(&b);
}

/* ==== a request body ======================================================== */

static int fail(SrvError *err, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(SrvError *err, int status, const char *param, const char *fmt, ...) {
    err->status = status;
    err->type = status >= 500 ? "server_error" : status == 404 ? "not_found_error" : "invalid_request_error";
    snprintf(err->param, sizeof err->param, "%s", param);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return ST_ARG;
}

/* The field, or NULL when absent or null (OpenAI's clients send null for "not given"). */
static const cJSON *field(const cJSON *o, const char *key) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, key);
    return f && !cJSON_IsNull(f) ? f : NULL;
}

/* An integer field in lo..hi: 1 given (in *out), 0 absent, ST_ARG bad. */
static int get_int(const cJSON *o, const char *key, double lo, double hi, long long *out, SrvError *err) {
    const cJSON *f = field(o, key);
    if (!f) return 0;
    double v = f->valuedouble;
    if (!cJSON_IsNumber(f) || !(v >= lo && v <= hi) || v != (double)(long long)v)
        return fail(err, 400, key, "%s must be an integer in %.0f..%.0f", key, lo, hi);
    *out = (long long)v;
    return 1;
}

static int get_number(const cJSON *o, const char *key, double lo, double hi, int lo_open, float *out,
                      SrvError *err) {
    const cJSON *f = field(o, key);
    if (!f) return 0;
    double v = f->valuedouble;
    if (!cJSON_IsNumber(f) || v < lo || v > hi || (lo_open && v == lo))
        return fail(err, 400, key, "%s must be a number in %s%g, %g]", key, lo_open ? "(" : "[", lo, hi);
    *out = (float)v;
    return 1;
}

static int get_bool(const cJSON *o, const char *key, int *out, SrvError *err) {
    const cJSON *f = field(o, key);
    if (!f) return 0;
    if (!cJSON_IsBool(f)) return fail(err, 400, key, "%s must be true or false", key);
    *out = cJSON_IsTrue(f);
    return 1;
}

/* A message's content: a string, or an array of {"type": "text", "text": ...}
 * parts joined. malloc'd; NULL with err. */
static char *message_content(const cJSON *c, int i, SrvError *err) {
    char param[48];
    snprintf(param, sizeof param, "messages[%d].content", i);
    if (cJSON_IsString(c)) return strdup(c->valuestring);
    if (!cJSON_IsArray(c)) {
        fail(err, 400, param, "%s must be a string or an array of text parts", param);
        return NULL;
    }
    Buf b = {0};
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text)) {
            free(b.s);
            fail(err, 400, param, "%s: only parts of type \"text\" are supported", param);
            return NULL;
        }
        buf_str(&b, text->valuestring);
    }
    char *s = buf_take(&b);
    if (!s) fail(err, 500, "", "out of memory");
    return s;
}

static int parse_messages(const cJSON *body, const SrvLimits *lim, SrvRequest *r, SrvError *err) {
    const cJSON *ms = field(body, "messages");
    if (!ms) return fail(err, 400, "messages", "messages is required");
    int n = cJSON_GetArraySize(ms);
    if (!cJSON_IsArray(ms) || n < 1 || n > 1024)
        return fail(err, 400, "messages", "messages must be an array of 1 to 1024 messages");
    SrvMessage *m = calloc((size_t)n, sizeof *m);
    char **content = calloc((size_t)n, sizeof *content);
    int st = ST_OK, i = 0;
    if (!m || !content) st = fail(err, 500, "", "out of memory");
    const cJSON *msg;
    cJSON_ArrayForEach(msg, ms) {
        if (st) break;
        char param[48];
        snprintf(param, sizeof param, "messages[%d].role", i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
        if (!cJSON_IsObject(msg) || !cJSON_IsString(role)) {
            st = fail(err, 400, param, "%s must be a string", param);
            break;
        }
        const char *rs = role->valuestring;
        if (!strcmp(rs, "developer")) rs = "system";   /* OpenAI's newer name for it */
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant")) {
            st = fail(err, 400, param, "%s \"%s\" is not system, user or assistant", param, rs);
            break;
        }
        content[i] = message_content(cJSON_GetObjectItemCaseSensitive(msg, "content"), i, err);
        if (!content[i]) {
            st = ST_ARG;
            break;
        }
        m[i] = (SrvMessage){.role = rs, .content = content[i]};
        i++;
    }
    if (!st && !(r->prompt = srv_chat_render(lim->tmpl, m, n))) st = fail(err, 500, "", "out of memory");
    for (int k = 0; content && k < n; k++) free(content[k]);
    free(content);
    free(m);
    return st;
}

static int parse_stop(const cJSON *body, SrvRequest *r, SrvError *err) {
    const cJSON *s = field(body, "stop");
    if (!s) return ST_OK;
    const cJSON *one[1] = {s};
    int n = cJSON_IsString(s) ? 1 : cJSON_IsArray(s) ? cJSON_GetArraySize(s) : -1;
    if (n < 0 || n > RT_MAX_STOP)
        return fail(err, 400, "stop", "stop must be a string or an array of at most %d strings", RT_MAX_STOP);
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_IsString(s) ? one[0] : cJSON_GetArrayItem(s, i);
        if (!cJSON_IsString(e) || !e->valuestring[0] || strlen(e->valuestring) > RT_STOP_LEN)
            return fail(err, 400, "stop", "stop strings must be strings of 1 to %d bytes", RT_STOP_LEN);
        snprintf(r->stop[i], sizeof r->stop[i], "%s", e->valuestring);
    }
    r->n_stop = n;
    return ST_OK;
}

/* The rest of the fields, on a parsed object. */
static int parse_fields(const cJSON *body, int chat, const SrvLimits *lim, SrvRequest *r, SrvError *err) {
    const cJSON *model = field(body, "model");
    if (model && !cJSON_IsString(model)) return fail(err, 400, "model", "model must be a string");
    if (model && strcmp(model->valuestring, lim->model_id))
        return fail(err, 404, "model", "the model '%s' does not exist (this server serves '%s')",
                    model->valuestring, lim->model_id);
    if (chat) {
        if (parse_messages(body, lim, r, err)) return ST_ARG;
    } else {
        const cJSON *p = field(body, "prompt");
        if (p && cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1) p = cJSON_GetArrayItem(p, 0);
        if (!p) return fail(err, 400, "prompt", "prompt is required");
        if (!cJSON_IsString(p)) return fail(err, 400, "prompt", "prompt must be a string (or an array of one)");
        if (!(r->prompt = strdup(p->valuestring))) return fail(err, 500, "", "out of memory");
    }
    long long v = 0;
    int got;
    r->max_tokens = chat ? lim->chat_max_tokens_default : lim->max_tokens_default;
    const char *mt = field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if ((got = get_int(body, mt, 1, 1 << 30, &v, err)) < 0) return ST_ARG;
    if (got) r->max_tokens = (int)v;
    r->sp = (SamplerParams){.temperature = 1.0f, .top_k = 0, .top_p = 1.0f};
    if (get_number(body, "temperature", 0, 2, 0, &r->sp.temperature, err) < 0) return ST_ARG;
    if (get_number(body, "top_p", 0, 1, 1, &r->sp.top_p, err) < 0) return ST_ARG;
    if ((got = get_int(body, "top_k", -1, 1 << 30, &v, err)) < 0) return ST_ARG;
    if (got) r->sp.top_k = v < 0 ? 0 : (int)v;   /* -1 means off, as in vLLM */
    if ((got = get_int(body, "seed", 0, 9007199254740991.0, &v, err)) < 0) return ST_ARG;
    if (got) r->sp.seed = (unsigned long long)v, r->seed_given = 1;
    r->n = 1;
    if ((got = get_int(body, "n", 1, RT_MAX_SAMPLES, &v, err)) < 0) return ST_ARG;
    if (got) r->n = (int)v;
    if (parse_stop(body, r, err)) return ST_ARG;
    if (get_bool(body, "stream", &r->stream, err) < 0) return ST_ARG;
    const cJSON *so = field(body, "stream_options");
    if (so) {
        if (!r->stream) return fail(err, 400, "stream_options", "stream_options is only allowed with stream: true");
        if (!cJSON_IsObject(so)) return fail(err, 400, "stream_options", "stream_options must be an object");
        if (get_bool(so, "include_usage", &r->include_usage, err) < 0)
            return fail(err, 400, "stream_options.include_usage", "stream_options.include_usage must be true or false");
    }
    if (get_bool(body, "ignore_eos", &r->ignore_eos, err) < 0) return ST_ARG;
    r->priority = PRIO_NORMAL;
    const cJSON *pr = field(body, "priority");
    if (pr) {
        Err e;
        if (!cJSON_IsString(pr) || rt_parse_priority(pr->valuestring, &r->priority, &e))
            return fail(err, 400, "priority", "priority must be \"low\", \"normal\" or \"high\"");
    }
    /* What this engine does not do is refused by name, not ignored. */
    int flag = 0;
    if (get_bool(body, "echo", &flag, err) < 0 || flag)
        return fail(err, 400, "echo", "echo is not supported");
    if (field(body, "logprobs") && !cJSON_IsFalse(field(body, "logprobs")))
        return fail(err, 400, "logprobs", "logprobs is not supported");
    if ((got = get_int(body, "best_of", 1, 1, &v, err)) < 0)
        return fail(err, 400, "best_of", "best_of is not supported (only 1)");
    if (field(body, "tools")) return fail(err, 400, "tools", "tools are not supported");
    return ST_OK;
}

int srv_parse_request(const char *body, size_t len, int chat, const SrvLimits *lim, SrvRequest *r,
                      SrvError *err) {
    memset(r, 0, sizeof *r);
    r->chat = chat;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    int st;
    char key[64];
    size_t rest = j && end ? (size_t)(body + len - end) : 0;
    while (rest && (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n')) end++, rest--;
    if (!j) st = fail(err, 400, "", "the body is not valid JSON");
    else if (!cJSON_IsObject(j)) st = fail(err, 400, "", "the body must be a JSON object");
    else if (rest) st = fail(err, 400, "", "the body has text after its JSON object (at byte %zu)", len - rest);
    else if (json_escaped_nul(body, len, key, sizeof key))
        st = fail(err, 400, key, "field \"%s\" holds \\u0000 (a NUL character), which would cut the text short",
                  key);
    else st = parse_fields(j, chat, lim, r, err);
    cJSON_Delete(j);
    if (st) srv_request_free(r);
    return st;
}

void srv_request_free(SrvRequest *r) {
    free(r->prompt);
    r->prompt = NULL;
}

/* ==== JSON out ================================================================ */

/* cJSON's text for o, malloc'd, and o deleted. */
static char *print_json(cJSON *o) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

char *srv_error_json(const SrvError *err) {
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    if (!e) {
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddStringToObject(e, "message", err->msg);
    cJSON_AddStringToObject(e, "type", err->type ? err->type : "invalid_request_error");
    if (err->param[0]) cJSON_AddStringToObject(e, "param", err->param);
    else cJSON_AddNullToObject(e, "param");
    cJSON_AddNullToObject(e, "code");
    return print_json(o);
}

const char *srv_finish_reason(FinishReason f) {
    switch (f) {
    case FIN_LENGTH: case FIN_CONTEXT: return "length";
    case FIN_EOS: case FIN_STOP: return "stop";
    case FIN_CANCEL: return "abort";
    case FIN_ERROR: return "error";
    default: return "none";
    }
}

/* A string of exactly len bytes (text may hold no NUL; the model's text never does). */
static cJSON *add_text(cJSON *o, const char *key, const char *text, size_t len) {
    char *z = malloc(len + 1);
    if (!z) return NULL;
    memcpy(z, text ? text : "", len);
    z[len] = 0;
    cJSON *s = cJSON_AddStringToObject(o, key, z);
    free(z);
    return s;
}

static cJSON *head(int chat, int chunk, const char *id, const char *model, long created) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                              : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)created);
    cJSON_AddStringToObject(o, "model", model);
    return o;
}

static void add_usage(cJSON *o, const SrvUsage *u) {
    cJSON *us = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(us, "prompt_tokens", u->prompt_tokens);
    cJSON_AddNumberToObject(us, "completion_tokens", u->completion_tokens);
    cJSON_AddNumberToObject(us, "total_tokens", u->prompt_tokens + u->completion_tokens);
}

char *srv_response_json(int chat, const char *id, const char *model, long created, const SrvChoice *c,
                        int n, const SrvUsage *u) {
    cJSON *o = head(chat, 0, id, model, created), *choices = cJSON_AddArrayToObject(o, "choices");
    for (int i = 0; i < n; i++) {
        cJSON *ch = cJSON_CreateObject();
        cJSON_AddItemToArray(choices, ch);
        cJSON_AddNumberToObject(ch, "index", i);
        if (chat) {
            cJSON *m = cJSON_AddObjectToObject(ch, "message");
            cJSON_AddStringToObject(m, "role", "assistant");
            add_text(m, "content", c[i].text, c[i].len);
        } else {
            add_text(ch, "text", c[i].text, c[i].len);
        }
        cJSON_AddNullToObject(ch, "logprobs");
        cJSON_AddStringToObject(ch, "finish_reason", c[i].finish);
    }
    add_usage(o, u);
    return print_json(o);
}

char *srv_sse_chunk(const SrvChunk *c) {
    cJSON *o = head(c->chat, 1, c->id, c->model, c->created), *choices = cJSON_AddArrayToObject(o, "choices");
    if (!c->usage) {
        cJSON *ch = cJSON_CreateObject();
        cJSON_AddItemToArray(choices, ch);
        cJSON_AddNumberToObject(ch, "index", c->index);
        if (c->chat) {
            cJSON *d = cJSON_AddObjectToObject(ch, "delta");
            if (c->role) cJSON_AddStringToObject(d, "role", "assistant");
            if (c->text) add_text(d, "content", c->text, c->len);
        } else {
            add_text(ch, "text", c->text, c->text ? c->len : 0);
        }
        cJSON_AddNullToObject(ch, "logprobs");
        if (c->finish) cJSON_AddStringToObject(ch, "finish_reason", c->finish);
        else cJSON_AddNullToObject(ch, "finish_reason");
        if (c->usage_null) cJSON_AddNullToObject(o, "usage");
    } else {
        add_usage(o, c->usage);
    }
    char *json = print_json(o);
    if (!json) return NULL;
    Buf b = {0};
    buf_str(&b, "data: ");
    buf_str(&b, json);
    buf_str(&b, "\n\n");
    free(json);
    return buf_take(&b);
}

/* ==== metrics ================================================================ */

void srv_metrics_init(SrvMetrics *m) {
    static const double ttft[SRV_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
    static const double tpot[SRV_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25,
                                             0.5, 1, 2.5};
    memset(m, 0, sizeof *m);
    memcpy(m->ttft.le, ttft, sizeof ttft);
    memcpy(m->tpot.le, tpot, sizeof tpot);
}

void srv_histogram_add(SrvHistogram *h, double v) {
    int i = 0;
    while (i < SRV_BUCKETS && v > h->le[i]) i++;
    h->count[i]++;
    h->sum += v;
    h->n++;
}

static void metric_head(Buf *b, const char *name, const char *type, const char *help) {
    buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void histogram_text(Buf *b, const char *name, const char *help, const SrvHistogram *h) {
    metric_head(b, name, "histogram", help);
    long cum = 0;
    for (int i = 0; i < SRV_BUCKETS; i++) {
        cum += h->count[i];
        buf_printf(b, "%s_bucket{le=\"%g\"} %ld\n", name, h->le[i], cum);
    }
    buf_printf(b, "%s_bucket{le=\"+Inf\"} %ld\n%s_sum %.6f\n%s_count %ld\n", name, h->n, name, h->sum,
               name, h->n);
}

char *srv_metrics_text(const SrvMetrics *m) {
    Buf b = {0};
    metric_head(&b, "llm_requests_total", "counter", "Requests that ended, by how they ended.");
    for (int f = FIN_LENGTH; f <= FIN_ERROR; f++)
        buf_printf(&b, "llm_requests_total{state=\"%s\"} %ld\n", rt_finish_name((FinishReason)f), m->finished[f]);
    metric_head(&b, "llm_requests_rejected_total", "counter", "Requests refused before they ran, by why.");
    buf_printf(&b, "llm_requests_rejected_total{reason=\"invalid\"} %ld\n", m->rejected_invalid);
    buf_printf(&b, "llm_requests_rejected_total{reason=\"queue_full\"} %ld\n", m->rejected_full);
    buf_printf(&b, "llm_requests_rejected_total{reason=\"engine\"} %ld\n", m->rejected_other);
    metric_head(&b, "llm_prompt_tokens_total", "counter", "Prompt tokens of the requests that ended.");
    buf_printf(&b, "llm_prompt_tokens_total %ld\n", m->prompt_tokens);
    metric_head(&b, "llm_generation_tokens_total", "counter", "Tokens generated.");
    buf_printf(&b, "llm_generation_tokens_total %ld\n", m->completion_tokens);
    histogram_text(&b, "llm_time_to_first_token_seconds", "From arrival to the first token.", &m->ttft);
    histogram_text(&b, "llm_time_per_output_token_seconds",
                   "Per request: (end - first token) / (tokens - 1).", &m->tpot);
    metric_head(&b, "llm_kv_blocks", "gauge", "KV cache blocks after the last step, by state.");
    buf_printf(&b, "llm_kv_blocks{state=\"held\"} %d\nllm_kv_blocks{state=\"cached\"} %d\n"
               "llm_kv_blocks{state=\"free\"} %d\n", m->kv_held, m->kv_cached, m->kv_free);
    metric_head(&b, "llm_requests_running", "gauge", "Sequences running in the engine.");
    buf_printf(&b, "llm_requests_running %d\n", m->running);
    metric_head(&b, "llm_requests_waiting", "gauge", "Sequences waiting in the engine's queue.");
    buf_printf(&b, "llm_requests_waiting %d\n", m->waiting);
    metric_head(&b, "llm_http_requests_in_flight", "gauge", "Generation requests accepted and not finished.");
    buf_printf(&b, "llm_http_requests_in_flight %d\n", m->http_in_flight);
    metric_head(&b, "llm_preemptions_total", "counter", "Sequences preempted to free KV blocks.");
    buf_printf(&b, "llm_preemptions_total %ld\n", m->preemptions);
    metric_head(&b, "llm_engine_steps_total", "counter", "Engine steps taken.");
    buf_printf(&b, "llm_engine_steps_total %ld\n", m->steps);
    return buf_take(&b);
}

/* ==== jobs: one generation request, shared by its HTTP thread and the engine === */

enum { J_QUEUED, J_RUNNING, J_REFUSED, J_DONE };

typedef struct {
    char *text;
    size_t len, cap;
    size_t sent;                 /* streamed so far (the HTTP side's) */
    int role_sent, final_sent;   /* the HTTP side's */
    int done;
    FinishReason finish;
    int n_out;
} JobChoice;

struct Job {
    Job *next;                   /* on the server's queue */
    pthread_mutex_t mu;
    pthread_cond_t cv;           /* new text, a state change */
    int refs;
    Server *srv;
    SrvRequest req;
    long conn;                   /* the connection it came on */
    char id[48];                 /* "cmpl-..." / "chatcmpl-..." */
    long created;
    int state;                   /* J_* */
    char why[300];               /* J_REFUSED: the runtime's reason */
    int refused_status;
    int first_id;                /* the runtime's id of choice 0 */
    int cancel;                  /* the client went away (set by the HTTP side) */
    int cancel_sent;             /* rt_cancel was called (the engine side's) */
    int n_done, prompt_tokens;
    char error[128];             /* FIN_ERROR's reason */
    JobChoice *ch;               /* (req.n) */
};

static Job *job_new(Server *s, long conn, SrvRequest *req) {
    Job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->ch = calloc((size_t)req->n, sizeof *j->ch);
    if (!j->ch) {
        free(j);
        return NULL;
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->srv = s;
    j->req = *req;               /* the prompt is the job's now */
    memset(req, 0, sizeof *req);
    j->conn = conn;
    j->created = (long)time(NULL);
    j->first_id = -1;
    return j;
}

static void job_unref(Job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    for (int i = 0; i < j->req.n; i++) free(j->ch[i].text);
    free(j->ch);
    srv_request_free(&j->req);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

/* ==== the trace: HTTP events, printed by the engine thread ================= */

struct SrvEvent {
    SrvEvent *next;
    double at;                   /* clock_seconds() when it happened */
    char line[240];
};

static int tracing(const Server *s) { return s->rt->trace && s->rt->trace->text; }

/* From any thread: queued under the server's lock, printed by the engine
 * thread between steps, so its lines never cut into the engine's. */
static void note(Server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(Server *s, const char *fmt, ...) {
    if (!tracing(s)) return;
    SrvEvent *ev = malloc(sizeof *ev);
    if (!ev) return;
    ev->next = NULL;
    ev->at = clock_seconds();
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ev->line, sizeof ev->line, fmt, ap);
    va_end(ap);
    /* a client's bytes (a URL with %0A, a field with \n) must not start a
     * line of their own in the trace: control characters become '?' */
    for (char *c = ev->line; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
    pthread_mutex_lock(&s->mu);
    if (s->events_tail) s->events_tail->next = ev;
    else s->events = ev;
    s->events_tail = ev;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
}

/* Each line is stamped when it is printed, so the trace's times never go
 * back; a line that waited for the engine thread says when it happened. */
static void print_events(Server *s, SrvEvent *ev) {
    const Clock *c = &s->rt->en.clock;
    while (ev) {
        SrvEvent *next = ev->next;
        double now = clock_now(c), at = ev->at - c->t0;
        if (c->kind == CLOCK_WALL && now - at >= 0.0001)
            trace_note(s->rt->trace, now, "%s (at %.1f ms)", ev->line, at * 1e3);
        else
            trace_note(s->rt->trace, now, "%s", ev->line);
        free(ev);
        ev = next;
    }
}

/* The events queued so far, printed (engine thread). */
static void drain_events(Server *s) {
    pthread_mutex_lock(&s->mu);
    SrvEvent *ev = s->events;
    s->events = s->events_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    print_events(s, ev);
}

/* ==== the engine thread ====================================================== */

/* The runtime's callbacks (engine thread). */
static void on_text(int id, const char *text, int len, void *user) {
    Job *j = user;
    if (len <= 0) return;
    pthread_mutex_lock(&j->mu);
    JobChoice *c = &j->ch[id - j->first_id];
    if (c->len + (size_t)len + 1 > c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 256;
        while (cap < c->len + (size_t)len + 1) cap *= 2;
        char *grown = realloc(c->text, cap);
        if (!grown) {           /* the text is cut short; the request goes on */
            pthread_mutex_unlock(&j->mu);
            return;
        }
        c->text = grown;
        c->cap = cap;
    }
    memcpy(c->text + c->len, text, (size_t)len);
    c->len += (size_t)len;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static void on_finish(int id, const Sequence *q, const Telemetry *t, const char *error, void *user) {
    Job *j = user;
    Server *s = j->srv;
    pthread_mutex_lock(&j->mu);
    JobChoice *c = &j->ch[id - j->first_id];
    c->done = 1;
    c->finish = q->finish;
    c->n_out = q->n_out;
    j->prompt_tokens = q->n_prompt;
    if (error) snprintf(j->error, sizeof j->error, "%s", error);
    if (++j->n_done == j->req.n) j->state = J_DONE;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);

    pthread_mutex_lock(&s->mu);
    SrvMetrics *m = &s->metrics;
    if (q->finish >= FIN_LENGTH && q->finish <= FIN_ERROR) m->finished[q->finish]++;
    if (id == j->first_id) m->prompt_tokens += q->n_prompt;
    m->completion_tokens += q->n_out;
    if (t->ttft >= 0 && q->n_out > 0) srv_histogram_add(&m->ttft, t->ttft);
    if (q->n_out > 1) srv_histogram_add(&m->tpot, t->tpot);
    pthread_mutex_unlock(&s->mu);
}

/* The job leaves the engine (done or refused): one job fewer in flight,
 * and the engine's reference let go. */
static void job_leaves(Server *s, Job *j) {
    pthread_mutex_lock(&s->mu);
    s->in_flight--;
    s->metrics.http_in_flight = s->in_flight;
    pthread_mutex_unlock(&s->mu);
    job_unref(j);
}

static void refuse(Server *s, Job *j, int status, const char *why) {
    pthread_mutex_lock(&j->mu);
    j->state = J_REFUSED;
    j->refused_status = status;
    snprintf(j->why, sizeof j->why, "%s", why);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    job_leaves(s, j);
}

static void submit_job(Server *s, Job *j) {
    Runtime *rt = s->rt;
    pthread_mutex_lock(&j->mu);
    int gone = j->cancel;
    pthread_mutex_unlock(&j->mu);
    if (gone) {                  /* its client left before it was taken */
        refuse(s, j, 499, "the client went away");
        return;
    }
    RtParams p = rt_params_default();
    p.prompt = j->req.prompt;
    p.sampling = j->req.sp;
    p.max_tokens = j->req.max_tokens;
    p.n = j->req.n;
    p.ignore_eos = j->req.ignore_eos;
    p.priority = j->req.priority;
    for (int i = 0; i < j->req.n_stop; i++) p.stop[i] = j->req.stop[i];
    p.on_text = on_text;
    p.on_finish = on_finish;
    p.user = j;
    Err e = {{0}};
    /* The id is known before any callback: they come from rt_step, later. */
    int id = rt_submit(rt, &p, &e);
    if (id < 0) {
        pthread_mutex_lock(&s->mu);
        s->metrics.rejected_other++;
        pthread_mutex_unlock(&s->mu);
        if (tracing(s)) trace_note(rt->trace, rt_now(rt), "conn %ld: refused by the runtime: %s", j->conn, e.msg);
        refuse(s, j, 400, e.msg);
        return;
    }
    pthread_mutex_lock(&j->mu);
    j->first_id = id;
    j->state = J_RUNNING;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (tracing(s))
        trace_note(rt->trace, rt_now(rt), "conn %ld: %s is request #%d%s%s", j->conn, j->id, id,
                   j->req.n > 1 ? " and its samples" : "", j->req.stream ? ", streamed" : "");
    s->live[s->n_live++] = j;
}

/* Jobs whose client went away: rt_cancel each choice still running (its
 * blocks go back at once); jobs done: out of the live list. */
static void sweep(Server *s, int cancel_all) {
    Runtime *rt = s->rt;
    for (int i = 0; i < s->n_live;) {
        Job *j = s->live[i];
        pthread_mutex_lock(&j->mu);
        int cancel = (j->cancel || cancel_all) && !j->cancel_sent && j->state != J_DONE;
        if (cancel) j->cancel_sent = 1;
        pthread_mutex_unlock(&j->mu);
        if (cancel) {
            drain_events(s);     /* "client disconnected" before the cancel it causes */
            if (tracing(s)) trace_note(rt->trace, rt_now(rt), "conn %ld: cancelling #%d", j->conn, j->first_id);
            for (int k = j->req.n - 1; k >= 0; k--) {
                pthread_mutex_lock(&j->mu);
                int done = j->ch[k].done;
                pthread_mutex_unlock(&j->mu);
                Err e;
                if (!done) rt_cancel(rt, j->first_id + k, &e);   /* calls on_finish */
            }
        }
        pthread_mutex_lock(&j->mu);
        int done = j->state == J_DONE;
        pthread_mutex_unlock(&j->mu);
        if (done) {
            s->live[i] = s->live[--s->n_live];
            job_leaves(s, j);
        } else {
            i++;
        }
    }
}

/* The engine's numbers for /metrics, after a step. */
static void publish(Server *s) {
    const Engine *en = &s->rt->en;
    pthread_mutex_lock(&s->mu);
    SrvMetrics *m = &s->metrics;
    m->kv_held = kv_held_blocks(&en->pool);
    m->kv_cached = kv_cached_blocks(&en->pool);
    m->kv_free = kv_free_blocks(&en->pool);
    m->running = engine_running(en);
    m->waiting = engine_waiting(en);
    m->preemptions = en->sched.n_preemptions;
    m->steps = en->steps;
    pthread_mutex_unlock(&s->mu);
}

/* Wait for work, then take the whole queue and the pending events. */
static void take_work(Server *s, volatile sig_atomic_t *stop, Job **jobs, SrvEvent **events) {
    pthread_mutex_lock(&s->mu);
    /* Idle: wait for a job, an event or the stop signal (polled every 100
     * ms: a signal handler cannot signal a condition variable). An idle
     * engine has no job to cancel: every live job is done. */
    while (!*stop && !s->queue_head && !s->events && rt_idle(s->rt)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&s->wake, &s->mu, &ts);
    }
    *jobs = s->queue_head;
    s->queue_head = s->queue_tail = NULL;
    *events = s->events;
    s->events = s->events_tail = NULL;
    pthread_mutex_unlock(&s->mu);
}

int srv_run(Server *s, volatile sig_atomic_t *stop, Err *e) {
    Runtime *rt = s->rt;
    publish(s);
    while (!*stop) {
        Job *jobs;
        SrvEvent *events;
        take_work(s, stop, &jobs, &events);
        print_events(s, events);
        while (jobs) {
            Job *next = jobs->next;
            if (s->n_live == s->cap_live) {   /* grown here, never inside a step */
                int cap = s->cap_live ? 2 * s->cap_live : 64;
                Job **grown = realloc(s->live, (size_t)cap * sizeof *grown);
                if (!grown) {
                    refuse(s, jobs, 503, "out of memory");
                    jobs = next;
                    continue;
                }
                s->live = grown;
                s->cap_live = cap;
            }
            submit_job(s, jobs);
            jobs = next;
        }
        sweep(s, 0);
        if (!rt_idle(rt)) {
            rt_step(rt);
            sweep(s, 0);
        }
        publish(s);              /* a cancel gives blocks back without a step */
    }
    /* Stopping: no more jobs are taken; those queued are refused, those
     * running cancelled. */
    Job *jobs;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    jobs = s->queue_head;
    s->queue_head = s->queue_tail = NULL;
    SrvEvent *events = s->events;
    s->events = s->events_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    print_events(s, events);
    while (jobs) {
        Job *next = jobs->next;
        refuse(s, jobs, 503, "the server is shutting down");
        jobs = next;
    }
    sweep(s, 1);
    publish(s);
    (void)e;
    return ST_OK;
}

/* ==== the HTTP side ========================================================== */

/* One HTTP request (libmicrohttpd's per-request pointer). */
typedef struct {
    Server *srv;
    long conn;
    int fd;                      /* the connection's socket (to notice a client gone) */
    char *body;
    size_t len, cap;
    int too_big;
    Job *job;
    int queued;                  /* the job went on the queue (the engine has it) */
    /* a streamed response: bytes made and not yet sent */
    char *out;
    size_t out_len, out_off;
    int ended;                   /* [DONE] is in out */
    long bytes_sent;
    int first_byte;
    int status;
} Conn;

/* Has the peer closed its end? (A hang-up, an error, or end of file on the
 * socket; a request pipelined behind this one is not a close.) */
static int peer_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static void wake_engine(Server *s) {
    pthread_mutex_lock(&s->mu);
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
}

/* The client left: mark the job, and tell the engine thread. */
static void job_cancel(Job *j) {
    pthread_mutex_lock(&j->mu);
    int was = j->cancel, ended = j->state == J_DONE || j->state == J_REFUSED;
    j->cancel = 1;
    pthread_mutex_unlock(&j->mu);
    if (!was && !ended) wake_engine(j->srv);
}

typedef int (*JobReady)(const Job *j);
static int accepted(const Job *j) { return j->state != J_QUEUED; }
static int finished(const Job *j) { return j->state == J_DONE || j->state == J_REFUSED; }

/* Has a streamed job something new for its client? */
static int news(const Job *j) {
    if (finished(j)) return 1;
    for (int i = 0; i < j->req.n; i++)
        if (j->ch[i].sent < j->ch[i].len || (j->ch[i].done && !j->ch[i].final_sent)) return 1;
    return 0;
}

/* Wait on the job (its lock held) until ready(j), looking at the socket
 * every 50 ms: -1 if the client went away first (the job is cancelled). */
static int wait_for(Conn *k, JobReady ready) {
    Job *j = k->job;
    while (!ready(j)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        if (!ready(j) && peer_gone(k->fd)) {
            pthread_mutex_unlock(&j->mu);
            job_cancel(j);
            pthread_mutex_lock(&j->mu);
            return -1;
        }
    }
    return 0;
}

static void out_add(Conn *k, Buf *b, char *chunk) {
    if (!chunk) {
        b->failed = 1;
        return;
    }
    buf_str(b, chunk);
    free(chunk);
}

/* The next SSE bytes of a streamed job into k->out: its new text, a final
 * chunk per choice that ended, then usage and [DONE]. -1: the client went
 * away (or memory ran out). */
static int refill(Conn *k) {
    Job *j = k->job;
    Server *s = k->srv;
    Buf b = {0};
    pthread_mutex_lock(&j->mu);
    if (wait_for(k, news)) {
        pthread_mutex_unlock(&j->mu);
        return -1;
    }
    SrvChunk c = {.chat = j->req.chat, .id = j->id, .model = s->cfg.model_id, .created = j->created,
                  .usage_null = j->req.include_usage};
    for (int i = 0; i < j->req.n; i++) {
        JobChoice *ch = &j->ch[i];
        c.index = i;
        c.finish = NULL;
        if (ch->sent < ch->len) {
            c.text = ch->text + ch->sent;
            c.len = ch->len - ch->sent;
            c.role = !ch->role_sent;
            out_add(k, &b, srv_sse_chunk(&c));
            ch->sent = ch->len;
            ch->role_sent = 1;
        }
        if (ch->done && !ch->final_sent) {
            c.text = j->req.chat ? NULL : "";
            c.len = 0;
            c.role = !ch->role_sent;
            c.finish = srv_finish_reason(ch->finish);
            out_add(k, &b, srv_sse_chunk(&c));
            ch->final_sent = ch->role_sent = 1;
        }
    }
    if (j->state == J_DONE) {
        SrvUsage u = {.prompt_tokens = j->prompt_tokens};
        for (int i = 0; i < j->req.n; i++) u.completion_tokens += j->ch[i].n_out;
        if (j->req.include_usage) {
            SrvChunk uc = c;
            uc.usage = &u;
            out_add(k, &b, srv_sse_chunk(&uc));
        }
        buf_str(&b, SRV_SSE_DONE);
        k->ended = 1;
    } else if (j->state == J_REFUSED) {   /* the server is stopping */
        buf_str(&b, SRV_SSE_DONE);
        k->ended = 1;
    }
    pthread_mutex_unlock(&j->mu);
    free(k->out);
    k->out = buf_take(&b);
    k->out_len = k->out ? strlen(k->out) : 0;
    k->out_off = 0;
    return k->out ? 0 : -1;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    Conn *k = cls;
    while (k->out_off == k->out_len) {
        if (k->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        if (refill(k)) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = k->out_len - k->out_off < max ? k->out_len - k->out_off : max;
    memcpy(buf, k->out + k->out_off, n);
    k->out_off += n;
    k->bytes_sent += (long)n;
    if (!k->first_byte) {
        k->first_byte = 1;
        note(k->srv, "conn %ld: first byte of the stream sent (%s)", k->conn, k->job->id);
    }
    return (ssize_t)n;
}

/* A whole response: body (malloc'd, handed over) with its type. */
static enum MHD_Result reply(struct MHD_Connection *c, Conn *k, int status, char *body, const char *type) {
    if (!body) {
        static char oom[] = "{\"error\": {\"message\": \"out of memory\", \"type\": \"server_error\", "
                            "\"param\": null, \"code\": null}}";
        body = strdup(oom);
        status = 500;
        if (!body) return MHD_NO;
    }
    size_t len = strlen(body);
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, "X-Chat-Template", srv_template_name(k->srv->lim.tmpl));
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    k->status = status;
    k->bytes_sent = (long)len;
    return ret;
}

static enum MHD_Result reply_error(struct MHD_Connection *c, Conn *k, const SrvError *err) {
    return reply(c, k, err->status, srv_error_json(err), "application/json");
}

static enum MHD_Result answer_models(struct MHD_Connection *c, Conn *k) {
    Server *s = k->srv;
    cJSON *o = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(o, "data"), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(data, m);
    cJSON_AddStringToObject(m, "id", s->cfg.model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->start_time);
    cJSON_AddStringToObject(m, "owned_by", "local");
    cJSON_AddNumberToObject(m, "max_model_len", s->rt->model->cfg.seq_len);
    cJSON_AddStringToObject(m, "chat_template", srv_template_name(s->lim.tmpl));
    return reply(c, k, 200, print_json(o), "application/json");
}

static enum MHD_Result answer_metrics(struct MHD_Connection *c, Conn *k) {
    Server *s = k->srv;
    pthread_mutex_lock(&s->mu);
    SrvMetrics m = s->metrics;
    pthread_mutex_unlock(&s->mu);
    return reply(c, k, 200, srv_metrics_text(&m), "text/plain; version=0.0.4");
}

static void count_invalid(Server *s) {
    pthread_mutex_lock(&s->mu);
    s->metrics.rejected_invalid++;
    pthread_mutex_unlock(&s->mu);
}

/* Onto the server's queue; 503 (in err) when full or stopping. */
static int queue_job(Server *s, Job *j, SrvError *err) {
    pthread_mutex_lock(&s->mu);
    int limit = s->rt->en.cfg.sched.max_seqs + s->cfg.max_queue;
    if (s->stopping || s->in_flight >= limit) {
        if (!s->stopping) s->metrics.rejected_full++;
        pthread_mutex_unlock(&s->mu);
        return fail(err, 503, "", s->stopping ? "the server is shutting down"
                    : "the queue is full (%d requests in flight; --max-queue)", limit);
    }
    snprintf(j->id, sizeof j->id, "%s-%lx%05lx", j->req.chat ? "chatcmpl" : "cmpl", s->start_time, s->next_job);
    if (!j->req.seed_given) j->req.sp.seed = (unsigned long long)s->start_time * 1000003ull + (unsigned long long)s->next_job;
    s->next_job++;
    j->refs++;                   /* the engine's */
    if (s->queue_tail) s->queue_tail->next = j;
    else s->queue_head = j;
    s->queue_tail = j;
    s->in_flight++;
    s->metrics.http_in_flight = s->in_flight;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
    return ST_OK;
}

static enum MHD_Result answer_generate(struct MHD_Connection *c, Conn *k, int chat) {
    Server *s = k->srv;
    SrvRequest req;
    SrvError err;
    if (srv_parse_request(k->body ? k->body : "", k->len, chat, &s->lim, &req, &err)) {
        count_invalid(s);
        note(s, "conn %ld: invalid request: %s", k->conn, err.msg);
        return reply_error(c, k, &err);
    }
    Job *j = job_new(s, k->conn, &req);
    if (!j) {
        srv_request_free(&req);
        return reply(c, k, 500, NULL, "");
    }
    k->job = j;
    if (queue_job(s, j, &err)) {
        note(s, "conn %ld: refused, %s", k->conn, err.msg);
        return reply_error(c, k, &err);
    }
    k->queued = 1;
    pthread_mutex_lock(&j->mu);
    int gone = wait_for(k, j->req.stream ? accepted : finished);
    int state = j->state;
    pthread_mutex_unlock(&j->mu);
    if (gone) return MHD_NO;     /* the engine thread cancels it */
    if (state == J_REFUSED) {
        fail(&err, j->refused_status == 503 ? 503 : 400, "", "%s", j->why);
        return reply_error(c, k, &err);
    }
    if (j->req.stream) {
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_reader, k, NULL);
        if (!r) return MHD_NO;
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(r, "X-Chat-Template", srv_template_name(s->lim.tmpl));
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        k->status = 200;
        return ret;
    }
    /* Whole: every choice has ended. */
    pthread_mutex_lock(&j->mu);
    SrvChoice ch[RT_MAX_SAMPLES];
    SrvUsage u = {.prompt_tokens = j->prompt_tokens};
    for (int i = 0; i < j->req.n; i++) {
        ch[i] = (SrvChoice){.text = j->ch[i].text, .len = j->ch[i].len, .finish = srv_finish_reason(j->ch[i].finish)};
        u.completion_tokens += j->ch[i].n_out;
    }
    char *body = NULL;
    if (j->error[0]) fail(&err, 500, "", "%s", j->error);
    else body = srv_response_json(chat, j->id, s->cfg.model_id, j->created, ch, j->req.n, &u);
    pthread_mutex_unlock(&j->mu);
    if (j->error[0]) {
        err.type = "server_error";
        return reply_error(c, k, &err);
    }
    return reply(c, k, 200, body, "application/json");
}

static enum MHD_Result handle_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                      const char *version, const char *upload, size_t *upload_size,
                                      void **req_cls) {
    Server *s = cls;
    Conn *k = *req_cls;
    if (!k) {                    /* the headers are in; the body follows */
        if (!(k = calloc(1, sizeof *k))) return MHD_NO;
        *req_cls = k;
        k->srv = s;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        k->conn = ci && ci->socket_context ? (long)(intptr_t)ci->socket_context : 0;
        ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        k->fd = ci ? ci->connect_fd : -1;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        note(s, "conn %ld: %s %s arrived%s%s%s", k->conn, method, url, cl ? ", " : "", cl ? cl : "",
             cl ? " bytes" : "");
        if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body) k->too_big = 1;
        if (!k->too_big) return MHD_YES;
    }
    if (*upload_size) {          /* a piece of the body */
        if (!k->too_big && k->len + *upload_size > s->cfg.max_body) {
            k->too_big = 1;
            free(k->body);
            k->body = NULL;
        }
        if (!k->too_big) {
            if (k->len + *upload_size > k->cap) {
                size_t cap = k->cap ? k->cap : 4096;
                while (cap < k->len + *upload_size) cap *= 2;
                char *grown = realloc(k->body, cap);
                if (!grown) return MHD_NO;
                k->body = grown;
                k->cap = cap;
            }
            memcpy(k->body + k->len, upload, *upload_size);
            k->len += *upload_size;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    SrvError err;
    if (k->too_big) {
        count_invalid(s);
        fail(&err, 413, "", "the body is larger than %zu bytes (--max-body)", s->cfg.max_body);
        return reply_error(c, k, &err);
    }
    int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/health") && get) return reply(c, k, 200, strdup("{\"status\":\"ok\"}"), "application/json");
    if (!strcmp(url, "/v1/models") && get) return answer_models(c, k);
    if (!strcmp(url, "/metrics") && get) return answer_metrics(c, k);
    if (!strcmp(url, "/v1/completions") && post) return answer_generate(c, k, 0);
    if (!strcmp(url, "/v1/chat/completions") && post) return answer_generate(c, k, 1);
    int known = !strcmp(url, "/health") || !strcmp(url, "/v1/models") || !strcmp(url, "/metrics") ||
                !strcmp(url, "/v1/completions") || !strcmp(url, "/v1/chat/completions");
    if (known) fail(&err, 405, "", "%s is not allowed on %s", method, url);
    else fail(&err, 404, "", "no such endpoint: %s %s", method, url);
    err.type = "invalid_request_error";
    return reply_error(c, k, &err);
}

/* The request has ended: sent whole, or cut off. A job not done by then is
 * cancelled: its client will read no more. */
static void request_done(void *cls, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode why) {
    Server *s = cls;
    Conn *k = *req_cls;
    if (!k) return;
    *req_cls = NULL;
    Job *j = k->job;
    int cut = 0;
    if (j && k->queued) {
        pthread_mutex_lock(&j->mu);
        cut = !finished(j) || (j->req.stream && !k->ended);
        pthread_mutex_unlock(&j->mu);
        if (cut) job_cancel(j);
    }
    if (why != MHD_REQUEST_TERMINATED_COMPLETED_OK || cut)
        note(s, "conn %ld: client disconnected before the end%s%s; %ld bytes sent", k->conn,
             j ? ", cancelling " : "", j ? j->id : "", k->bytes_sent);
    else
        note(s, "conn %ld: done, status %d, %ld bytes", k->conn, k->status, k->bytes_sent);
    job_unref(j);
    free(k->body);
    free(k->out);
    free(k);
}

/* A connection opened: number it (the trace's "conn N"). */
static void connection_event(void *cls, struct MHD_Connection *c, void **socket_ctx,
                             enum MHD_ConnectionNotificationCode what) {
    Server *s = cls;
    if (what != MHD_CONNECTION_NOTIFY_STARTED) return;
    pthread_mutex_lock(&s->mu);
    long n = ++s->next_conn;
    pthread_mutex_unlock(&s->mu);
    *socket_ctx = (void *)(intptr_t)n;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    char addr[64] = "?";
    if (ci && ci->client_addr && ci->client_addr->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)ci->client_addr;
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
        snprintf(addr, sizeof addr, "%s:%d", ip, ntohs(in->sin_port));
    }
    note(s, "conn %ld: opened from %s", n, addr);
}

int srv_init(Server *s, Runtime *rt, const SrvConfig *cfg, ChatTemplate tmpl, Err *e) {
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    s->rt = rt;
    s->start_time = (long)time(NULL);
    s->lim = (SrvLimits){.model_id = cfg->model_id, .tmpl = tmpl, .max_tokens_default = 16,
                         .chat_max_tokens_default = rt->model->cfg.seq_len};
    srv_metrics_init(&s->metrics);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    rt->release_finished = 1;   /* memory stays flat however many requests come */

    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int gai = getaddrinfo(cfg->host, NULL, &hints, &ai);
    if (gai) return err_set(e, ST_ARG, "--host %s: %s", cfg->host, gai_strerror(gai));
    struct sockaddr_in addr = *(struct sockaddr_in *)ai->ai_addr;
    freeaddrinfo(ai);
    addr.sin_port = htons((uint16_t)cfg->port);
    s->daemon = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL,
                                 (uint16_t)cfg->port, NULL, NULL, handle_request, s,
                                 MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                                 MHD_OPTION_NOTIFY_COMPLETED, request_done, s,
                                 MHD_OPTION_NOTIFY_CONNECTION, connection_event, s,
                                 MHD_OPTION_END);
    if (!s->daemon)
        return err_set(e, ST_IO, "cannot listen on %s:%d (in use, or not an address of this machine)",
                       cfg->host, cfg->port);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : cfg->port;
    return ST_OK;
}

void srv_free(Server *s) {
    if (s->daemon) MHD_stop_daemon(s->daemon);   /* waits for every HTTP thread */
    s->daemon = NULL;
    /* Left after the threads: events never printed, jobs the engine holds. */
    for (SrvEvent *ev = s->events; ev;) {
        SrvEvent *next = ev->next;
        free(ev);
        ev = next;
    }
    for (Job *j = s->queue_head; j;) {
        Job *next = j->next;
        job_unref(j);
        j = next;
    }
    for (int i = 0; i < s->n_live; i++) job_unref(s->live[i]);
    free(s->live);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->wake);
    memset(s, 0, sizeof *s);
}
