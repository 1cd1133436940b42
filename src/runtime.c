/* runtime.c - the edge of the engine: requests in, text out.
 *
 * Everything a caller can get wrong is caught here, before the request costs
 * anything: an empty prompt with no BOS to stand in for it, a prompt that
 * fills the context, max_tokens < 1, bad sampling parameters, an unknown
 * priority, or a request that would need more KV blocks than the whole pool
 * has (it could never run, so it must not wait forever). Each gets a one-line
 * reason and nothing is queued.
 *
 * A valid request is tokenized and given everything it will need while it
 * runs (its token array, its sampler with its own seed, its stop strings), so
 * the step loop never allocates.
 *
 * On the way out, each sampled token is turned into text by a streaming
 * decoder that only releases whole UTF-8 characters. Stop strings add one
 * twist: text that might be the beginning of a stop string is held back until
 * it is clear that it is not (or it is, and the request ends without it), so a
 * stream never shows a reader half a stop string. Serving APIs behave this way
 * (the stop string is not part of the completion).
 *
 * Telemetry, the numbers a serving system is judged by: queue wait (arrival to
 * first scheduled), TTFT (arrival to first token), TPOT (mean time per output
 * token after the first), end-to-end latency. */
#include "runtime.h"
#include "engine.h"
#include "mem.h"
#include <math.h>
#include <string.h>

static const char *const PRIO_NAMES[] = {"low", "normal", "high"};

const char *rt_priority_name(Priority p) {
    return p >= PRIO_LOW && p <= PRIO_HIGH ? PRIO_NAMES[p] : "unknown";
}

int rt_parse_priority(const char *s, Priority *out, Err *e) {
    for (int i = PRIO_LOW; i <= PRIO_HIGH; i++)
        if (s && strcmp(s, PRIO_NAMES[i]) == 0) {
            *out = (Priority)i;
            return ST_OK;
        }
    return err_set(e, ST_ARG, "unknown priority \"%s\" (low, normal or high)", s ? s : "(null)");
}

const char *rt_finish_name(FinishReason f) {
    static const char *const names[] = {"none", "length", "eos", "stop", "cancel", "context"};
    return f >= FIN_NONE && f <= FIN_CONTEXT ? names[f] : "unknown";
}

RtParams rt_params_default(void) {
    RtParams p = {0};
    p.add_bos = 1;
    p.sampling = (SamplerParams){.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 0};
    p.max_tokens = 16;
    p.n = 1;
    p.priority = PRIO_NORMAL;
    return p;
}

/* ---- submission ---- */

static int check_params(const Engine *en, const RtParams *p, Err *e) {
    int V = en->model->cfg.vocab_size;
    if (p->max_tokens < 1) return err_set(e, ST_ARG, "max_tokens %d must be at least 1", p->max_tokens);
    if (p->n < 1 || p->n > RT_MAX_SAMPLES)
        return err_set(e, ST_ARG, "n %d samples must be in 1..%d", p->n, RT_MAX_SAMPLES);
    if (!(p->sampling.temperature >= 0.0f) || isinf(p->sampling.temperature))
        return err_set(e, ST_ARG, "temperature %g must be a finite number >= 0",
                       (double)p->sampling.temperature);
    if (!(p->sampling.top_p > 0.0f && p->sampling.top_p <= 1.0f))
        return err_set(e, ST_ARG, "top_p %g must be in (0, 1]", (double)p->sampling.top_p);
    if (p->sampling.top_k < 0 || p->sampling.top_k > V)
        return err_set(e, ST_ARG, "top_k %d must be in 0..%d (0: no limit)", p->sampling.top_k, V);
    if (p->priority < PRIO_LOW || p->priority > PRIO_HIGH)
        return err_set(e, ST_ARG, "unknown priority %d (low 0, normal 1, high 2)", (int)p->priority);
    for (int i = 0; i < RT_MAX_STOP && p->stop[i]; i++) {
        size_t n = strlen(p->stop[i]);
        if (n == 0) return err_set(e, ST_ARG, "stop string %d is empty", i);
        if (n >= RT_STOP_LEN)
            return err_set(e, ST_ARG, "stop string %d is %zu bytes; at most %d", i, n, RT_STOP_LEN - 1);
    }
    return ST_OK;
}

/* A request with its own token array (the prompt ids), sampler (the seed
 * plus seed_offset) and stop strings. Not yet in the engine. NULL with e
 * filled on failure. */
static Request *new_request(Engine *en, const RtParams *p, const int *ids, int n, int cap,
                            uint64_t seed_offset, Err *e) {
    const Model *m = en->model;
    Request *r = mem_alloc(sizeof *r);
    int *tokens = mem_alloc((size_t)cap * sizeof(int));
    SamplerParams sp = p->sampling;
    sp.seed += seed_offset;
    if (!r || !tokens || sampler_init(&r->sampler, m->cfg.vocab_size, sp, e)) {
        mem_free(tokens);
        if (r) sampler_free(&r->sampler);
        mem_free(r);
        err_set(e, ST_NOMEM, "request: cannot allocate %d tokens and a sampler", cap);
        return NULL;
    }
    memcpy(tokens, ids, (size_t)n * sizeof(int));
    r->priority = p->priority;
    r->tokens = tokens;
    r->cap = cap;
    r->n_prompt = r->n_tokens = n;
    r->max_tokens = p->max_tokens;
    r->ignore_eos = p->ignore_eos;
    r->slot = -1;
    /* The output continues the prompt's text: run the prompt through the
     * decoder (discarding its text) so the first generated token decodes in
     * context (sentencepiece drops the space of a token that follows BOS). */
    tok_decoder_init(&r->dec);
    char piece[TOK_MAX_PIECE];
    for (int i = 0; i < n; i++) tok_decode(m->tok, &r->dec, tokens[i], piece);
    for (int i = 0; i < RT_MAX_STOP && p->stop[i]; i++) {
        strcpy(r->stop[i], p->stop[i]);
        int len = (int)strlen(p->stop[i]);
        if (len > r->stop_max) r->stop_max = len;
        r->n_stop++;
    }
    r->on_text = p->on_text;
    r->user = p->user;
    r->tm.first_scheduled = r->tm.first_token = r->tm.finished = -1.0;
    return r;
}

static void free_request(Request *r) {
    sampler_free(&r->sampler);
    mem_free(r->tokens);
    mem_free(r);
}

int rt_submit(Engine *en, const RtParams *p, Err *e) {
    const Model *m = en->model;
    int P = m->cfg.seq_len, BS = en->pool.BS;
    int st = check_params(en, p, e);
    if (st) return st;

    const char *text = p->prompt ? p->prompt : "";
    size_t cap_ids = strlen(text) + 3;   /* at most one id per byte, plus BOS and a leading space */
    int *ids = mem_alloc(cap_ids * sizeof(int));
    if (!ids) return err_set(e, ST_NOMEM, "request: cannot allocate %zu token ids", cap_ids);
    int n = tok_encode(m->tok, text, p->add_bos, ids, (int)cap_ids, e);
    if (n < 0) {
        mem_free(ids);
        return n;
    }
    if (n == 0) {
        mem_free(ids);
        return err_set(e, ST_ARG, "empty prompt and %s: nothing to start from",
                       tok_bos(m->tok) < 0 ? "the vocabulary has no BOS token" : "add_bos is off");
    }
    if (n >= P) {
        mem_free(ids);
        return err_set(e, ST_ARG, "prompt is %d tokens; the context holds %d, leaving no room to "
                                  "generate", n, P);
    }
    /* Tokens it may hold: the prompt and max_tokens, but no more than the
     * context and one token sampled from its last position (which is never
     * run, so needs no K/V). */
    int cap = n + p->max_tokens < P + 1 ? n + p->max_tokens : P + 1;
    int kv_tokens = cap < P ? cap : P;
    int blocks = (kv_tokens + BS - 1) / BS;
    if (blocks > en->pool.NB) {
        mem_free(ids);
        return err_set(e, ST_ARG, "request needs up to %d tokens = %d KV blocks of %d, but the "
                                  "whole pool has %d blocks: it could never run",
                       kv_tokens, blocks, BS, en->pool.NB);
    }

    /* The request, and n - 1 more samples of the same prompt: each its own
     * Request with seed + i, waiting to be forked from the first (see
     * rt_fork_pending in engine.c). All or nothing. */
    Request *first = NULL;
    for (int i = 0; i < p->n; i++) {
        Request *r = new_request(en, p, ids, n, cap, (uint64_t)i, e);
        if (!r) {
            mem_free(ids);
            while (first) {   /* undo: free the ones made so far */
                Request *next = first->fork_next;
                free_request(first);
                first = next;
            }
            return ST_NOMEM;
        }
        if (first) {   /* a sample waits on the first one's list */
            r->fork_parent = first;
            Request **tail = &first->fork_next;
            while (*tail) tail = &(*tail)->fork_next;
            *tail = r;
        } else {
            first = r;
        }
    }
    mem_free(ids);
    /* Only now, when nothing can fail: ids in order, into the engine. */
    for (Request *r = first; r; r = r->fork_next) {
        r->id = en->next_id++;
        r->tm.arrival = engine_now(en);
        r->arrival_step = en->sched.step;
        r->all_next = en->all;
        en->all = r;
        if (r == first) sched_add(&en->sched, r);
        if (en->trace) trace_arrived(en->trace, en, r);
    }
    return first->id;
}

Request *rt_find(Engine *en, int id) {
    for (Request *r = en->all; r; r = r->all_next)
        if (r->id == id) return r;
    return NULL;
}

int rt_cancel(Engine *en, int id, Err *e) {
    Request *r = rt_find(en, id);
    if (!r) return err_set(e, ST_ARG, "cancel: no request %d", id);
    if (r->state == RQ_FINISHED)
        return err_set(e, ST_ARG, "cancel: request %d already finished (%s)", id,
                       rt_finish_name(r->finish));
    rt_finish(en, r, FIN_CANCEL, engine_now(en));
    return ST_OK;
}

/* ---- output ---- */

static void stream(Request *r, const char *s, int len) {
    if (r->on_text && len > 0) r->on_text(r, s, len, r->user);
}

/* Does a stop string begin with the k bytes at s? */
static int starts_a_stop(const Request *r, const char *s, int k) {
    for (int i = 0; i < r->n_stop; i++)
        if ((int)strlen(r->stop[i]) > k && memcmp(r->stop[i], s, (size_t)k) == 0) return 1;
    return 0;
}

/* Pass text on, holding back what could be the start of a stop string.
 * Returns 1 if a stop string is now complete (text before it was streamed). */
static int emit(Request *r, const char *s, int len) {
    if (r->n_stop == 0) {
        stream(r, s, len);
        return 0;
    }
    memcpy(r->held + r->n_held, s, (size_t)len);   /* n_held < RT_STOP_LEN, len < TOK_MAX_PIECE */
    r->n_held += len;
    int cut = -1;
    for (int i = 0; i < r->n_stop; i++) {
        const char *at = memmem(r->held, (size_t)r->n_held, r->stop[i], strlen(r->stop[i]));
        if (at && (cut < 0 || at - r->held < cut)) cut = (int)(at - r->held);
    }
    if (cut >= 0) {
        stream(r, r->held, cut);
        r->n_held = 0;
        return 1;
    }
    int keep = r->n_held < r->stop_max - 1 ? r->n_held : r->stop_max - 1;
    while (keep > 0 && !starts_a_stop(r, r->held + r->n_held - keep, keep)) keep--;
    stream(r, r->held, r->n_held - keep);
    memmove(r->held, r->held + r->n_held - keep, (size_t)keep);
    r->n_held = keep;
    return 0;
}

FinishReason rt_accept_token(Engine *en, Request *r, int token, double now) {
    const Tokenizer *tok = en->model->tok;
    if (r->n_out == 0) r->tm.first_token = now;
    r->tokens[r->n_tokens++] = token;
    r->n_out++;
    r->n_piece = 0;
    if (token == tok_eos(tok) && !r->ignore_eos) return FIN_EOS;
    r->n_piece = tok_decode(tok, &r->dec, token, r->piece);
    if (emit(r, r->piece, r->n_piece)) return FIN_STOP;
    if (r->n_out >= r->max_tokens) return FIN_LENGTH;
    if (r->n_tokens >= r->cap) return FIN_CONTEXT;   /* cap < prompt + max_tokens: context full */
    return FIN_NONE;
}

/* Undo r's place among the samples of its prompt: a waiting sample leaves
 * its first's list; a first request that still has samples waiting lets
 * them go, each queued to run on its own when requeue is set. */
static void fork_detach(Engine *en, Request *r, int requeue) {
    if (r->fork_parent) {
        for (Request **q = &r->fork_parent->fork_next; *q; q = &(*q)->fork_next)
            if (*q == r) {
                *q = r->fork_next;
                break;
            }
        r->fork_parent = NULL;
        r->fork_next = NULL;
        return;
    }
    Request *c = r->fork_next;
    r->fork_next = NULL;
    while (c) {
        Request *next = c->fork_next;
        c->fork_parent = c->fork_next = NULL;
        if (requeue) sched_add(&en->sched, c);
        c = next;
    }
}

void rt_fork_samples(Engine *en, Request *first, const float *logits, float *scratch, double now) {
    int V = en->model->cfg.vocab_size;
    Request *c = first->fork_next;
    first->fork_next = NULL;
    while (c) {
        Request *next = c->fork_next;
        c->fork_parent = c->fork_next = NULL;
        if (!sched_fork(&en->sched, first, c)) {   /* no free slot: it runs on its own */
            sched_add(&en->sched, c);
            c = next;
            continue;
        }
        c->tm.first_scheduled = now;
        if (en->trace) trace_forked(en->trace, en, first, c);
        memcpy(scratch, logits, (size_t)V * sizeof(float));   /* sampling scales them in place */
        int token = sampler_sample(&c->sampler, scratch);
        en->tokens_out++;
        FinishReason why = rt_accept_token(en, c, token, now);
        if (en->trace) trace_token(en->trace, en, c, token, now);
        if (why != FIN_NONE) rt_finish(en, c, why, now);
        c = next;
    }
}

void rt_finish(Engine *en, Request *r, FinishReason why, double now) {
    fork_detach(en, r, 1);
    sched_remove(&en->sched, r);
    r->state = RQ_FINISHED;
    r->finish = why;
    if (why != FIN_STOP) {   /* held text turned out not to be a stop string */
        char tail[TOK_MAX_PIECE];
        stream(r, r->held, r->n_held);
        stream(r, tail, tok_decode_flush(&r->dec, tail));
    }
    r->n_held = 0;
    if (r->on_text) r->on_text(r, "", 0, r->user);
    Telemetry *t = &r->tm;
    t->finished = now;
    t->queue_wait = (t->first_scheduled >= 0 ? t->first_scheduled : now) - t->arrival;
    t->ttft = t->first_token >= 0 ? t->first_token - t->arrival : -1.0;
    t->tpot = r->n_out > 1 ? (now - t->first_token) / (r->n_out - 1) : 0.0;
    t->e2e = now - t->arrival;
    if (en->trace) trace_finished(en->trace, en, r);
}

void rt_request_free(Engine *en, Request *r) {
    if (!r) return;
    fork_detach(en, r, 0);
    if (r->state != RQ_FINISHED) sched_remove(&en->sched, r);
    for (Request **p = &en->all; *p; p = &(*p)->all_next)
        if (*p == r) {
            *p = r->all_next;
            break;
        }
    free_request(r);
}
