/* openai.c - the OpenAI wire format (see openai.h and notes/server.md):
 * a request body (chat messages rendered by the model's template, chat.c)
 * parsed and checked field by field (every refusal names the field), and
 * responses and SSE chunks shaped as OpenAI's. Pure functions: any thread
 * may call them, and they allocate with malloc (strbuf.h says why). */
#include "front/openai.h"
#include "front/chat.h"
#include "front/json_nul.h"
#include "front/strbuf.h"
#include "base/utf8.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ==== a request body ======================================================== */

int srv_error_set(SrvError *err, int status, const char *param, const char *fmt, ...) {
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
        return srv_error_set(err, 400, key, "%s must be an integer in %.0f..%.0f", key, lo, hi);
    *out = (long long)v;
    return 1;
}

static int get_number(const cJSON *o, const char *key, double lo, double hi, int lo_open, float *out,
                      SrvError *err) {
    const cJSON *f = field(o, key);
    if (!f) return 0;
    double v = f->valuedouble;
    if (!cJSON_IsNumber(f) || v < lo || v > hi || (lo_open && v == lo))
        return srv_error_set(err, 400, key, "%s must be a number in %s%g, %g]", key, lo_open ? "(" : "[", lo, hi);
    *out = (float)v;
    return 1;
}

static int get_bool(const cJSON *o, const char *key, int *out, SrvError *err) {
    const cJSON *f = field(o, key);
    if (!f) return 0;
    if (!cJSON_IsBool(f)) return srv_error_set(err, 400, key, "%s must be true or false", key);
    *out = cJSON_IsTrue(f);
    return 1;
}

/* A chat request's prompt, by the model's template (front/chat.c). */
static int parse_messages(const cJSON *body, const SrvLimits *lim, SrvRequest *r, SrvError *err) {
    SrvPrompt p;
    int status = 400;
    Err e = {{0}};
    if (srv_chat_prompt(lim->chat, body, time(NULL), lim->max_prompt, &p, &status, err->param, sizeof err->param, &e)) {
        char param[sizeof err->param];
        snprintf(param, sizeof param, "%s", err->param);
        return srv_error_set(err, status, param, "%s", e.msg);
    }
    r->prompt = p.text;
    r->plain = p.plain;
    r->prompt_len = p.len;
    r->parse_special = 1;
    return ST_OK;
}

static int parse_stop(const cJSON *body, SrvRequest *r, SrvError *err) {
    const cJSON *s = field(body, "stop");
    if (!s) return ST_OK;
    const cJSON *one[1] = {s};
    int n = cJSON_IsString(s) ? 1 : cJSON_IsArray(s) ? cJSON_GetArraySize(s) : -1;
    if (n < 0 || n > RT_MAX_STOP)
        return srv_error_set(err, 400, "stop", "stop must be a string or an array of at most %d strings", RT_MAX_STOP);
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_IsString(s) ? one[0] : cJSON_GetArrayItem(s, i);
        if (!cJSON_IsString(e) || !e->valuestring[0] || strlen(e->valuestring) > RT_STOP_LEN)
            return srv_error_set(err, 400, "stop", "stop strings must be strings of 1 to %d bytes", RT_STOP_LEN);
        snprintf(r->stop[i], sizeof r->stop[i], "%s", e->valuestring);
    }
    r->n_stop = n;
    return ST_OK;
}

/* logprobs: chat's true/false with top_logprobs 0..20; the completions'
 * number of alternatives 0..20 (OpenAI's own limit there is 5). */
static int parse_logprobs(const cJSON *body, int chat, SrvRequest *r, SrvError *err) {
    long long v = 0;
    int got;
    if (chat) {
        if (get_bool(body, "logprobs", &r->sp.logprobs, err) < 0) return ST_ARG;
        if ((got = get_int(body, "top_logprobs", 0, SAMPLER_MAX_TOP, &v, err)) < 0) return ST_ARG;
        if (got && !r->sp.logprobs)
            return srv_error_set(err, 400, "top_logprobs", "top_logprobs needs logprobs: true");
        r->sp.top_logprobs = (int)v;
        return ST_OK;
    }
    if ((got = get_int(body, "logprobs", 0, SAMPLER_MAX_TOP, &v, err)) < 0) return ST_ARG;
    r->sp.logprobs = got;
    r->sp.top_logprobs = (int)v;
    return ST_OK;
}

/* logit_bias: {"token id": bias in -100..100, ...}, at most SAMPLER_MAX_BIAS. */
static int parse_logit_bias(const cJSON *body, const SrvLimits *lim, SrvRequest *r, SrvError *err) {
    const cJSON *lb = field(body, "logit_bias"), *e;
    if (!lb) return ST_OK;
    if (!cJSON_IsObject(lb)) return srv_error_set(err, 400, "logit_bias", "logit_bias must be an object");
    if (cJSON_GetArraySize(lb) > SAMPLER_MAX_BIAS)
        return srv_error_set(err, 400, "logit_bias", "logit_bias holds more than %d tokens", SAMPLER_MAX_BIAS);
    cJSON_ArrayForEach(e, lb) {
        char *end;
        errno = 0;
        long id = strtol(e->string, &end, 10);
        if (!e->string[0] || *end || errno || id < 0 || id >= lim->n_vocab)
            return srv_error_set(err, 400, "logit_bias", "logit_bias: \"%.40s\" is not a token id (0..%d)", e->string,
                                 lim->n_vocab - 1);
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= -100 && e->valuedouble <= 100))
            return srv_error_set(err, 400, "logit_bias", "logit_bias: the bias of %ld must be a number in -100..100", id);
        r->sp.bias[r->sp.n_bias++] = (struct SamplerBias){(int)id, (float)e->valuedouble};
    }
    return ST_OK;
}

/* The rest of the fields, on a parsed object. */
static int parse_fields(const cJSON *body, int chat, const SrvLimits *lim, SrvRequest *r, SrvError *err) {
    const cJSON *model = field(body, "model");
    if (model && !cJSON_IsString(model)) return srv_error_set(err, 400, "model", "model must be a string");
    if (model && strcmp(model->valuestring, lim->model_id))
        return srv_error_set(err, 404, "model", "the model '%s' does not exist (this server serves '%s')",
                    model->valuestring, lim->model_id);
    if (chat) {
        if (parse_messages(body, lim, r, err)) return ST_ARG;
    } else {
        const cJSON *p = field(body, "prompt");
        if (p && cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1) p = cJSON_GetArrayItem(p, 0);
        if (!p) return srv_error_set(err, 400, "prompt", "prompt is required");
        if (!cJSON_IsString(p)) return srv_error_set(err, 400, "prompt", "prompt must be a string (or an array of one)");
        r->prompt_len = strlen(p->valuestring);
        if (r->prompt_len > lim->max_prompt)
            return srv_error_set(err, 413, "prompt", "prompt is %zu bytes, over the limit of %zu", r->prompt_len,
                                 lim->max_prompt);
        if (!(r->prompt = strdup(p->valuestring))) return srv_error_set(err, 500, "", "out of memory");
        r->parse_special = 1;   /* a raw prompt's markup is its writer's own, as in llama.cpp */
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
        if (!r->stream) return srv_error_set(err, 400, "stream_options", "stream_options is only allowed with stream: true");
        if (!cJSON_IsObject(so)) return srv_error_set(err, 400, "stream_options", "stream_options must be an object");
        if (get_bool(so, "include_usage", &r->include_usage, err) < 0)
            return srv_error_set(err, 400, "stream_options.include_usage", "stream_options.include_usage must be true or false");
        int obfuscation;                                /* padding against side channels: nothing to pad here */
        if (get_bool(so, "include_obfuscation", &obfuscation, err) < 0)
            return srv_error_set(err, 400, "stream_options.include_obfuscation",
                                 "stream_options.include_obfuscation must be true or false");
    }
    if (get_bool(body, "ignore_eos", &r->ignore_eos, err) < 0) return ST_ARG;
    r->speculate = -1;   /* speculative decoding: as many guesses as the server's --speculate */
    if ((got = get_int(body, "speculate", 0, SEQ_MAX_DRAFT, &v, err)) < 0) return ST_ARG;
    if (got) r->speculate = (int)v;
    r->priority = PRIO_NORMAL;
    const cJSON *pr = field(body, "priority");
    if (pr) {
        Err e;
        if (!cJSON_IsString(pr) || rt_parse_priority(pr->valuestring, &r->priority, &e))
            return srv_error_set(err, 400, "priority", "priority must be \"low\", \"normal\" or \"high\"");
    }
    if (parse_logprobs(body, chat, r, err) || parse_logit_bias(body, lim, r, err)) return ST_ARG;
    if (get_number(body, "presence_penalty", -2, 2, 0, &r->sp.presence_penalty, err) < 0) return ST_ARG;
    if (get_number(body, "frequency_penalty", -2, 2, 0, &r->sp.frequency_penalty, err) < 0) return ST_ARG;
    const cJSON *user = field(body, "user");            /* an end user's id: accepted, not used */
    if (user && !cJSON_IsString(user)) return srv_error_set(err, 400, "user", "user must be a string");
    /* What this engine does not do is refused by name, not ignored. */
    int flag = 0;
    if (get_bool(body, "echo", &flag, err) < 0 || flag)
        return srv_error_set(err, 400, "echo", "echo is not supported");
    if ((got = get_int(body, "best_of", 1, 1, &v, err)) < 0)
        return srv_error_set(err, 400, "best_of", "best_of is not supported (only 1)");
    if (field(body, "tools")) return srv_error_set(err, 400, "tools", "tools are not supported");
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
    if (!j) st = srv_error_set(err, 400, "", "the body is not valid JSON");
    else if (!cJSON_IsObject(j)) st = srv_error_set(err, 400, "", "the body must be a JSON object");
    else if (rest) st = srv_error_set(err, 400, "", "the body has text after its JSON object (at byte %zu)", len - rest);
    else if (json_escaped_nul(body, len, key, sizeof key))
        st = srv_error_set(err, 400, key, "field \"%s\" holds \\u0000 (a NUL character), which would cut the text short",
                  key);
    else st = parse_fields(j, chat, lim, r, err);
    cJSON_Delete(j);
    if (st) srv_request_free(r);
    return st;
}

void srv_request_free(SrvRequest *r) {
    free(r->prompt);
    free(r->plain);
    r->prompt = NULL;
    r->plain = NULL;
}

/* ==== JSON out ================================================================ */

/* cJSON's text for o, malloc'd, and o deleted. */
static char *print_json(cJSON *o) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

/* s made well-formed UTF-8 for JSON (malloc'd): a byte that starts no whole
 * character becomes U+FFFD. A message may quote the client's bytes (a model
 * name, a role), and its fixed buffer may have cut a character short; the
 * JSON around it must stay valid whatever they were. */
static char *utf8_clean(const char *s) {
    Buf b = {0};
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        int k = utf8_char_len((const unsigned char *)s + i, n - i);
        if (k) buf_add(&b, s + i, (size_t)k);
        else buf_str(&b, "\xEF\xBF\xBD");
        i += k ? (size_t)k : 1;
    }
    return buf_take(&b);
}

char *srv_error_json(const SrvError *err) {
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    char *msg = utf8_clean(err->msg), *param = utf8_clean(err->param);
    if (!e || !msg || !param) {
        free(msg);
        free(param);
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", err->type ? err->type : "invalid_request_error");
    if (param[0]) cJSON_AddStringToObject(e, "param", param);
    else cJSON_AddNullToObject(e, "param");
    cJSON_AddNullToObject(e, "code");
    free(msg);
    free(param);
    return print_json(o);
}

const char *srv_finish_reason(FinishReason f) {
    /* OpenAI's words only: a cancelled or failed choice ends with "stop",
     * after an error event that says why (srv_sse_error) */
    return f == FIN_LENGTH || f == FIN_CONTEXT ? "length" : "stop";
}

char *srv_sse_error(const SrvError *err) {
    char *json = srv_error_json(err);
    if (!json) return NULL;
    Buf b = {0};
    buf_printf(&b, "data: %s\n\n", json);
    free(json);
    return buf_take(&b);
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
    cJSON *details = cJSON_AddObjectToObject(us, "prompt_tokens_details");
    cJSON_AddNumberToObject(details, "cached_tokens", u->cached_tokens);
}

/* A token's bytes: its text (made valid UTF-8) and, for chat, the bytes themselves. */
static int token_text(const Tokenizer *tok, int id, char *piece, int cap) {
    int n = tok_piece(tok, id, piece, cap);
    return n < 0 ? 0 : n < cap ? n : cap - 1;
}

static cJSON *chat_token_json(const Tokenizer *tok, int id, float logprob) {
    char piece[TOK_MAX_PIECE];
    int n = token_text(tok, id, piece, sizeof piece);
    cJSON *o = cJSON_CreateObject(), *bytes;
    char *text = utf8_clean(piece);
    cJSON_AddStringToObject(o, "token", text ? text : "");
    free(text);
    cJSON_AddNumberToObject(o, "logprob", logprob);
    bytes = cJSON_AddArrayToObject(o, "bytes");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)piece[i]));
    return o;
}

/* "logprobs" of a choice or chunk: null when not asked for. */
static void add_logprobs(cJSON *ch, int chat, const SrvLogprobs *l) {
    if (!l->lp) {
        cJSON_AddNullToObject(ch, "logprobs");
        return;
    }
    cJSON *o = cJSON_AddObjectToObject(ch, "logprobs");
    if (chat) {
        cJSON *content = cJSON_AddArrayToObject(o, "content");
        for (int i = 0; i < l->n; i++) {
            cJSON *t = chat_token_json(l->tok, l->lp[i].id, l->lp[i].logprob);
            cJSON *tops = cJSON_AddArrayToObject(t, "top_logprobs");
            for (int k = 0; k < l->lp[i].n_top && k < l->top; k++)
                cJSON_AddItemToArray(tops, chat_token_json(l->tok, l->lp[i].top[k].id, l->lp[i].top[k].logprob));
            cJSON_AddItemToArray(content, t);
        }
        cJSON_AddNullToObject(o, "refusal");
        return;
    }
    cJSON *tokens = cJSON_AddArrayToObject(o, "tokens"), *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs"), *offs = cJSON_AddArrayToObject(o, "text_offset");
    size_t at = l->offset;
    for (int i = 0; i < l->n; i++) {
        char piece[TOK_MAX_PIECE];
        int n = token_text(l->tok, l->lp[i].id, piece, sizeof piece);
        char *text = utf8_clean(piece);
        cJSON_AddItemToArray(tokens, cJSON_CreateString(text ? text : ""));
        free(text);
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(l->lp[i].logprob));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)at));
        at += (size_t)n;
        cJSON *top = cJSON_CreateObject();
        for (int k = 0; k < l->lp[i].n_top && k < l->top; k++) {
            char tp[TOK_MAX_PIECE];
            token_text(l->tok, l->lp[i].top[k].id, tp, sizeof tp);
            char *tt = utf8_clean(tp);
            if (tt && !cJSON_GetObjectItemCaseSensitive(top, tt))
                cJSON_AddNumberToObject(top, tt, l->lp[i].top[k].logprob);
            free(tt);
        }
        cJSON_AddItemToArray(tops, top);
    }
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
        add_logprobs(ch, chat, &c[i].logprobs);
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
        add_logprobs(ch, c->chat, &c->logprobs);
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

/* ==== llama.cpp's extension endpoints ========================================= */

/* The body as a JSON object, or NULL with err. */
static cJSON *body_object(const char *body, size_t len, SrvError *err) {
    cJSON *j = cJSON_ParseWithLength(body, len);
    if (!j) srv_error_set(err, 400, "", "the body is not valid JSON");
    else if (!cJSON_IsObject(j)) srv_error_set(err, 400, "", "the body must be a JSON object");
    else return j;
    cJSON_Delete(j);
    return NULL;
}

/* A boolean field with a default; -1 (err set) when it is not a boolean. */
static int flag(const cJSON *o, const char *key, int dflt, SrvError *err) {
    int v = dflt;
    return get_bool(o, key, &v, err) < 0 ? -1 : v;
}

/* A piece's bytes as JSON: a string when they are whole UTF-8, else the
 * byte values (as llama.cpp answers with_pieces). */
static cJSON *piece_json(const char *s, int n) {
    for (int i = 0; i < n;) {
        int k = utf8_char_len((const unsigned char *)s + i, (size_t)(n - i));
        if (!k) {
            cJSON *a = cJSON_CreateArray();
            for (int j = 0; j < n; j++) cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)s[j]));
            return a;
        }
        i += k;
    }
    char *z = strndup(s, (size_t)n);
    cJSON *str = z ? cJSON_CreateString(z) : NULL;
    free(z);
    return str;
}

char *srv_tokenize_json(const Tokenizer *tok, const char *body, size_t len, SrvError *err) {
    cJSON *j = body_object(body, len, err);
    if (!j) return NULL;
    const cJSON *content = field(j, "content");
    int add_special = flag(j, "add_special", 0, err), parse_special = add_special < 0 ? -1 : flag(j, "parse_special", 1, err);
    int pieces = parse_special < 0 ? -1 : flag(j, "with_pieces", 0, err);
    char *out = NULL;
    if (pieces < 0) {
        /* err says which */
    } else if (!cJSON_IsString(content)) {
        srv_error_set(err, 400, "content", "content must be a string");
    } else {
        size_t n = strlen(content->valuestring);
        int *ids = malloc((n + 3) * sizeof *ids);
        unsigned char *plain = parse_special ? NULL : malloc(n ? n : 1);
        Err e = {{0}};
        int k = -1;
        if (ids && (parse_special || plain)) {
            if (plain) memset(plain, 1, n);
            k = tok_encode_marked(tok, content->valuestring, n, plain, add_special, ids, (int)(n + 3), &e);
            if (k < 0) srv_error_set(err, 400, "content", "%s", e.msg);
        } else {
            srv_error_set(err, 500, "", "out of memory");
        }
        if (k >= 0) {
            cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "tokens");
            for (int i = 0; i < k; i++) {
                if (!pieces) {
                    cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
                    continue;
                }
                char piece[TOK_MAX_PIECE];
                int pn = tok_piece(tok, ids[i], piece, sizeof piece);
                cJSON *item = cJSON_CreateObject();
                cJSON_AddNumberToObject(item, "id", ids[i]);
                cJSON_AddItemToObject(item, "piece", piece_json(piece, pn < (int)sizeof piece ? pn : (int)sizeof piece - 1));
                cJSON_AddItemToArray(arr, item);
            }
            if (!(out = print_json(o))) srv_error_set(err, 500, "", "out of memory");
        }
        free(ids);
        free(plain);
    }
    cJSON_Delete(j);
    return out;
}

char *srv_detokenize_json(const Tokenizer *tok, const char *body, size_t len, SrvError *err) {
    cJSON *j = body_object(body, len, err);
    if (!j) return NULL;
    const cJSON *tokens = field(j, "tokens"), *t;
    char *out = NULL;
    if (!cJSON_IsArray(tokens)) {
        srv_error_set(err, 400, "tokens", "tokens must be an array of token ids");
        cJSON_Delete(j);
        return NULL;
    }
    Buf b = {0};
    int i = 0, ok = 1;
    cJSON_ArrayForEach(t, tokens) {
        double v = cJSON_IsNumber(t) ? t->valuedouble : -1;
        if (!(v >= 0 && v < tok_n_vocab(tok)) || v != (double)(int)v) {
            srv_error_set(err, 400, "tokens", "tokens[%d] is not an id of this vocabulary (0..%d)", i, tok_n_vocab(tok) - 1);
            ok = 0;
            break;
        }
        char piece[TOK_MAX_PIECE];
        int pn = tok_piece(tok, (int)v, piece, sizeof piece);
        buf_add(&b, piece, (size_t)(pn < (int)sizeof piece ? pn : (int)sizeof piece - 1));
        i++;
    }
    if (ok) {
        buf_add(&b, "", 0);
        char *text = b.failed ? NULL : utf8_clean(b.s ? b.s : "");
        cJSON *o = cJSON_CreateObject();
        if (text) cJSON_AddStringToObject(o, "content", text);
        free(text);
        if (!text || !(out = print_json(o))) srv_error_set(err, 500, "", "out of memory");
    }
    free(b.s);
    cJSON_Delete(j);
    return out;
}

char *srv_apply_template_json(const SrvLimits *lim, const char *body, size_t len, SrvError *err) {
    cJSON *j = body_object(body, len, err);
    if (!j) return NULL;
    SrvPrompt p;
    int status = 400;
    char param[sizeof err->param];
    Err e = {{0}};
    char *out = NULL;
    if (srv_chat_prompt(lim->chat, j, time(NULL), lim->max_prompt, &p, &status, param, sizeof param, &e)) {
        srv_error_set(err, status, param, "%s", e.msg);
    } else {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "prompt", p.text);
        if (!(out = print_json(o))) srv_error_set(err, 500, "", "out of memory");
        srv_prompt_free(&p);
    }
    cJSON_Delete(j);
    return out;
}

char *srv_models_json(const char *id, long created, int max_model_len, const char *chat_template) {
    cJSON *o = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(o, "data"), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(data, m);
    cJSON_AddStringToObject(m, "id", id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)created);
    cJSON_AddStringToObject(m, "owned_by", "local");
    cJSON_AddStringToObject(m, "root", id);
    cJSON_AddNumberToObject(m, "max_model_len", max_model_len);
    cJSON_AddStringToObject(m, "chat_template", chat_template);
    return print_json(o);
}
