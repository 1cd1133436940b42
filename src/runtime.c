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
 * token after the first), end-to-end latency.
 *
 * The runtime sits on top and drives: rt_step asks the engine for one step
 * and gets back a report of what happened (who was admitted, preempted,
 * which tokens came out, who the engine finished); it turns the tokens into
 * text, tells the engine about any stop string it found (engine_finish), and
 * tells the trace everything. The engine never calls back up. */
#include "runtime.h"
#include "base/clock.h"
#include <math.h>
#include <stddef.h>
#include <string.h>
#include <sys/resource.h>

/* A request: the engine's Sequence, and the text side only the runtime sees. */
struct Request {
    Sequence seq;
    TokDecoder dec;
    char stop[RT_MAX_STOP][RT_STOP_LEN];
    int n_stop, stop_max;        /* stop strings and the longest one's length */
    char held[RT_STOP_LEN + TOK_MAX_PIECE];   /* text that could be the start of a stop string */
    int n_held;
    char piece[TOK_MAX_PIECE];   /* the text of the last token */
    int n_piece;
    RtStreamFn on_text;
    RtTokenFn on_token;
    RtFinishFn on_finish;
    void *user;
    Telemetry tm;
    int n_delivered;             /* output tokens delivered so far (a step may bring several) */
    int ended;                   /* finalized: its last text and on_finish are out */
    char error[560];             /* why it ended with FIN_ERROR, or "" (an Err line and a position) */
    struct Request *all_next;    /* the runtime's list of every request */
};

static Request *request_of(Sequence *q) { return (Request *)((char *)q - offsetof(Request, seq)); }

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
    static const char *const names[] = {"none", "length", "eos", "stop", "cancel", "context", "error"};
    return f >= FIN_NONE && f <= FIN_ERROR ? names[f] : "unknown";
}

RtParams rt_params_default(void) {
    RtParams p = {0};
    p.add_bos = 1;
    p.sampling = (SamplerParams){.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 0};
    p.max_tokens = 16;
    p.n = 1;
    p.priority = PRIO_NORMAL;
    p.speculate = -1;
    return p;
}

int rt_init(Runtime *rt, const Model *m, const EngineConfig *cfg, Err *e) {
    memset(rt, 0, sizeof *rt);
    rt->model = m;
    rt->low_mem = model_stats(m).low_mem;
    return engine_init(&rt->en, m, cfg, e);
}

static void free_request(Request *r) {
    sampler_free(&r->seq.sampler);
    mem_free(r->seq.tokens);
    mem_free(r);
}

void rt_free(Runtime *rt) {
    while (rt->all) {
        Request *r = rt->all;
        rt->all = r->all_next;
        engine_drop(&rt->en, &r->seq);
        free_request(r);
    }
    engine_free(&rt->en);
    mem_free(rt->pictures);
    memset(rt, 0, sizeof *rt);
}

int rt_set_trace(Runtime *rt, Trace *t, Err *e) {
    rt->trace = t;
    if (!t || rt->pictures) return ST_OK;
    /* room for the KV map (a line of 64 blocks) and every block table */
    EngineStats es = engine_stats(&rt->en);
    size_t map = 160 + ((size_t)es.kv.n_blocks / 64 + 1) * 96;
    size_t tables = (size_t)es.sched.max_seqs * (64 + (size_t)es.cap_blocks * 12);
    rt->pictures_cap = (int)(map + tables);
    rt->pictures = mem_alloc((size_t)rt->pictures_cap);
    if (!rt->pictures) return err_set(e, ST_NOMEM, "trace: cannot allocate %d bytes for the KV map",
                                      rt->pictures_cap);
    return ST_OK;
}

int rt_idle(const Runtime *rt) { return engine_idle(&rt->en); }

double rt_now(const Runtime *rt) { return engine_now(&rt->en); }

void rt_wait_until(Runtime *rt, double t) { engine_wait_until(&rt->en, t); }

double rt_time_of(const Runtime *rt, double wall) { return engine_time_of(&rt->en, wall); }

int rt_check(const Runtime *rt, Err *e) { return engine_check(&rt->en, e); }

KvView rt_kv_view(Runtime *rt) { return engine_kv_view(&rt->en); }

RtStats rt_stats(const Runtime *rt) {
    RtStats s = {.engine = engine_stats(&rt->en), .context = rt->model->cfg.seq_len};
    return s;
}

/* ---- submission ---- */

static int check_params(const Runtime *rt, const RtParams *p, Err *e) {
    int V = rt->model->cfg.vocab_size;
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
    if (p->speculate < -1 || p->speculate > SEQ_MAX_DRAFT)
        return err_set(e, ST_ARG, "speculate %d must be in 0..%d (draft tokens per step)", p->speculate,
                       SEQ_MAX_DRAFT);
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
static Request *new_request(const Runtime *rt, const RtParams *p, const int *ids, int n, int cap,
                            uint64_t seed_offset, Err *e) {
    const Model *m = rt->model;
    Request *r = mem_alloc(sizeof *r);
    int *tokens = mem_alloc((size_t)cap * sizeof(int));
    SamplerParams sp = p->sampling;
    sp.seed += seed_offset;
    if (!r || !tokens || sampler_init(&r->seq.sampler, m->cfg.vocab_size, sp, e)) {
        mem_free(tokens);
        if (r) sampler_free(&r->seq.sampler);
        mem_free(r);
        err_set(e, ST_NOMEM, "request: cannot allocate %d tokens and a sampler", cap);
        return NULL;
    }
    memcpy(tokens, ids, (size_t)n * sizeof(int));
    Sequence *q = &r->seq;
    q->priority = p->priority;
    q->state = SEQ_WAITING;
    q->tokens = tokens;
    q->cap = cap;
    q->n_prompt = q->n_tokens = n;
    q->max_tokens = p->max_tokens;
    /* the scheduler caps it at max_draft; a draft's tokens would have no
     * logprobs of their own (sampler_verify fills none) */
    int max_draft = engine_stats(&rt->en).sched.max_draft;
    q->speculate = p->speculate < 0 || p->speculate > max_draft ? max_draft : p->speculate;
    if (p->sampling.logprobs) q->speculate = 0;
    if (!p->ignore_eos) {
        int n_eog = tok_eog(m->tok, q->eog, SEQ_MAX_EOG);
        q->n_eog = n_eog < SEQ_MAX_EOG ? n_eog : SEQ_MAX_EOG;
    }
    q->slot = -1;
    q->arrival_step = -1;
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
    r->on_token = p->on_token;
    r->on_finish = p->on_finish;
    r->user = p->user;
    r->tm.first_scheduled = r->tm.first_token = r->tm.finished = -1.0;
    return r;
}

static void trace_arrival(Runtime *rt, const Request *r) {
    const Sequence *q = &r->seq;
    const SamplerParams *sp = &q->sampler.p;
    TraceArrival a = {.id = q->id, .prompt_tokens = q->n_prompt, .max_tokens = q->max_tokens,
                      .priority = rt_priority_name(q->priority), .temperature = sp->temperature,
                      .top_p = sp->top_p, .top_k = sp->top_k, .seed = (unsigned long long)sp->seed,
                      .waiting = engine_waiting(&rt->en)};
    if (trace_arrived(rt->trace, r->tm.arrival, &a)) rt->trace = NULL;   /* out of memory: stop tracing */
}

int rt_submit(Runtime *rt, const RtParams *p, Err *e) {
    const Model *m = rt->model;
    KvStats kv = engine_stats(&rt->en).kv;
    int P = m->cfg.seq_len, BS = kv.block_size;
    int st = check_params(rt, p, e);
    if (st) return st;

    const char *text = p->prompt ? p->prompt : "";
    size_t len = strlen(text);
    size_t cap_ids = len + 3;   /* at most one id per byte, plus BOS and a leading space */
    int *ids = mem_alloc(cap_ids * sizeof(int));
    if (!ids) return err_set(e, ST_NOMEM, "request: cannot allocate %zu token ids", cap_ids);
    int n = p->parse_special ? tok_encode_marked(m->tok, text, len, p->prompt_plain, p->add_bos, ids, (int)cap_ids, e)
                             : tok_encode(m->tok, text, p->add_bos, ids, (int)cap_ids, e);
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
    int cap = p->max_tokens < P + 1 - n ? n + p->max_tokens : P + 1;   /* (no overflow at INT_MAX) */
    int kv_tokens = cap < P ? cap : P;
    int blocks = (kv_tokens + BS - 1) / BS;
    if (blocks > kv.n_blocks) {
        mem_free(ids);
        return err_set(e, ST_ARG, "request needs up to %d tokens = %d KV blocks of %d, but the "
                                  "whole pool has %d blocks: it could never run",
                       kv_tokens, blocks, BS, kv.n_blocks);
    }

    /* The request, and n - 1 more samples of the same prompt: each its own
     * Request with seed + i, handed to the engine to be forked from the
     * first once its prompt is computed. All or nothing. */
    Request *made[RT_MAX_SAMPLES];
    int k = 0;
    for (; k < p->n; k++) {
        made[k] = new_request(rt, p, ids, n, cap, (uint64_t)k, e);
        if (!made[k]) break;
        made[k]->seq.id = rt->next_id + k;
        if (engine_add(&rt->en, &made[k]->seq, k ? &made[0]->seq : NULL, e)) {
            free_request(made[k]);
            break;
        }
    }
    mem_free(ids);
    if (k < p->n) {   /* undo: the engine forgets the ones it took */
        while (k-- > 0) {
            engine_drop(&rt->en, &made[k]->seq);
            free_request(made[k]);
        }
        return ST_NOMEM;
    }
    /* Only now, when nothing can fail: ids in order, into the list. */
    rt->next_id += p->n;
    for (k = 0; k < p->n; k++) {
        Request *r = made[k];
        r->tm.arrival = rt_now(rt);
        r->all_next = rt->all;
        rt->all = r;
        if (rt->trace) trace_arrival(rt, r);
    }
    return made[0]->seq.id;
}

static Request *find(const Runtime *rt, int id) {
    for (Request *r = rt->all; r; r = r->all_next)
        if (r->seq.id == id) return r;
    return NULL;
}

const Sequence *rt_sequence(const Runtime *rt, int id) {
    const Request *r = find(rt, id);
    return r ? &r->seq : NULL;
}

const Telemetry *rt_telemetry(const Runtime *rt, int id) {
    const Request *r = find(rt, id);
    return r ? &r->tm : NULL;
}

const char *rt_error(const Runtime *rt, int id) {
    const Request *r = find(rt, id);
    return r && r->error[0] ? r->error : NULL;
}

/* ---- output ---- */

static void stream(Request *r, const char *s, int len) {
    if (r->on_text && len > 0) r->on_text(r->seq.id, s, len, r->user);
}

/* Does a stop string begin with the k bytes at s? */
static int starts_a_stop(const Request *r, const char *s, int k) {
    for (int i = 0; i < r->n_stop; i++)
        if ((int)strlen(r->stop[i]) > k && memcmp(r->stop[i], s, (size_t)k) == 0) return 1;
    return 0;
}

/* exercises/stop_hold/ hollows this function: built with -DEXERCISE_STOP_HOLD,
 * the file that macro names stands in its place (tools/exercise.sh). */
#ifdef EXERCISE_STOP_HOLD
#include EXERCISE_STOP_HOLD
#else
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
#endif

/* Take r out of the list, out of the engine, and free it. */
static void release(Runtime *rt, Request *r) {
    for (Request **p = &rt->all; *p; p = &(*p)->all_next)
        if (*p == r) {
            *p = r->all_next;
            break;
        }
    engine_drop(&rt->en, &r->seq);
    free_request(r);
}

/* The request has ended (the engine has finished its sequence): the rest
 * of its text is streamed (unless a stop string ended it), then on_text
 * with len 0; telemetry set; the trace told. */
static void finalize(Runtime *rt, Request *r, double now) {
    const Sequence *q = &r->seq;
    if (q->finish != FIN_STOP) {   /* held text turned out not to be a stop string */
        char tail[TOK_MAX_PIECE];
        stream(r, r->held, r->n_held);
        stream(r, tail, tok_decode_flush(&r->dec, tail));
    }
    r->n_held = 0;
    if (r->on_text) r->on_text(q->id, "", 0, r->user);
    Telemetry *t = &r->tm;
    t->finished = now;
    t->queue_wait = (t->first_scheduled >= 0 ? t->first_scheduled : now) - t->arrival;
    t->ttft = t->first_token >= 0 ? t->first_token - t->arrival : -1.0;
    t->tpot = q->n_out > 1 ? (now - t->first_token) / (q->n_out - 1) : 0.0;
    t->e2e = now - t->arrival;
    t->guesses = q->spec_proposed;
    t->accepted = q->spec_accepted;
    if (rt->trace) {
        TraceFinish f = {.id = q->id, .reason = r->error[0] ? r->error : rt_finish_name(q->finish),
                         .output_tokens = q->n_out,
                         .prompt_tokens = q->n_prompt, .preemptions = q->n_preempted,
                         .prefix_hit_tokens = q->prefix_hit_tokens,
                         .blocks_released = q->blocks_released, .queue_wait = t->queue_wait,
                         .ttft = t->ttft, .tpot = t->tpot, .e2e = t->e2e};
        trace_finished(rt->trace, now, &f);
    }
    if (r->on_finish) r->on_finish(q->id, q, t, r->error[0] ? r->error : NULL, r->user);
    r->ended = 1;   /* with release_finished, freed by the caller once nothing refers to it */
}

/* With release_finished: free every request that has ended. At the end of
 * a step, when the report's outputs (several per sequence, with
 * speculation) have all been delivered. */
static void release_ended(Runtime *rt) {
    Request **p = &rt->all;
    while (*p) {
        Request *r = *p;
        if (!r->ended) {
            p = &r->all_next;
            continue;
        }
        *p = r->all_next;
        engine_drop(&rt->en, &r->seq);
        free_request(r);
    }
}

/* One token the engine produced: its text, a stop string, the end. */
static void deliver(Runtime *rt, const StepOutput *o, double now) {
    Request *r = request_of(o->seq);
    Sequence *q = &r->seq;
    if (r->ended) return;   /* a stop string ended it at an earlier token of this step */
    if (o->fork.from >= 0) {
        r->tm.first_scheduled = now;
        if (rt->trace)
            trace_forked(rt->trace, now, q->id, o->fork.from, o->fork.slot, o->fork.blocks,
                         o->fork.tokens);
    }
    r->n_piece = 0;
    if (o->finish == FIN_ERROR) {
        if (o->error)
            snprintf(r->error, sizeof r->error, "error: at position %d: %s", q->n_tokens - 1, o->error);
        else
            snprintf(r->error, sizeof r->error, "error: non-finite logits at position %d", q->n_tokens - 1);
        finalize(rt, r, now);
        return;
    }
    int n_out = ++r->n_delivered;
    if (n_out == 1) r->tm.first_token = now;
    if (o->finish != FIN_EOS) {
        if (r->on_token) r->on_token(q->id, o->token, q->sampler.p.logprobs ? &q->sampler.last : NULL, r->user);
        r->n_piece = tok_decode(rt->model->tok, &r->dec, o->token, r->piece);
        if (emit(r, r->piece, r->n_piece)) engine_stop(&rt->en, q, n_out);
    }
    if (rt->trace)
        trace_token(rt->trace, now, q->id, o->token, r->piece, r->n_piece, n_out, q->n_prompt + n_out - 1);
    /* finished, and this is its last token (an accepted guess comes before the token that ended it) */
    if (q->state == SEQ_FINISHED && n_out >= q->n_out) finalize(rt, r, now);
}

/* q's work in this step: where it began (for an admitted sequence, the
 * tokens found in the prefix cache; for a copy-on-write, the position
 * written) and its slot, as they were when the step was planned. */
static const StepItem *item_of(const StepPlan *p, const Sequence *q) {
    for (int i = 0; i < p->n_items; i++)
        if (p->items[i].seq == q) return &p->items[i];
    return &p->items[0];   /* not reached: every admitted or copied sequence has an item */
}

/* Tell the trace what the scheduler decided, in the order it decided it. */
static void trace_plan(Runtime *rt, const StepReport *rep) {
    Trace *t = rt->trace;
    const StepPlan *p = rep->plan;
    double now = rep->start;
    int BS = engine_stats(&rt->en).kv.block_size;
    for (int i = 0; i < p->n_preempted; i++) {
        const Sequence *q = p->preempted[i];
        trace_preempted(t, now, rep->step, q->id, q->blocks_released, q->n_tokens);
    }
    for (int i = 0; i < p->n_cow; i++)
        trace_cow(t, now, rep->step, p->cow[i]->id, item_of(p, p->cow[i])->from, BS);
    for (int i = 0; i < p->n_admitted; i++) {
        const StepItem *it = item_of(p, p->admitted[i]);
        trace_admitted(t, now, rep->step, it->seq->id, it->slot, it->from, it->seq->n_preempted);
    }
    for (int i = 0; i < p->n_items; i++) {
        const StepItem *it = &p->items[i];
        trace_item(t, now, it->seq->id, it->from, it->n, it->sample);
    }
}

static void trace_step(Runtime *rt, const StepReport *rep, double end) {
    const StepPlan *p = rep->plan;
    EngineStats es = engine_stats(&rt->en);
    KvView view = engine_kv_view(&rt->en);
    TraceStep s = {.step = rep->step, .start = rep->start, .end = end, .seqs = p->n_items,
                   .prefill_tokens = p->n_prefill_tokens, .decode_tokens = p->n_decode_tokens,
                   .tokens = p->n_tokens, .budget = es.sched.token_budget,
                   .preempted = p->n_preempted, .admitted = p->n_admitted, .cow = p->n_cow,
                   .guesses = rep->spec.proposed, .accepted = rep->spec.accepted,
                   .rewinds = rep->spec.rewinds, .rewound_blocks = rep->spec.blocks,
                   .spec_off = p->n_spec_off,
                   .kv_held = es.kv.held, .kv_cached = es.kv.cached,
                   .kv_free = es.kv.free, .running = es.sched.running,
                   .waiting = es.sched.waiting,
                   .stage = {rt->last.schedule, rt->last.build, rt->last.forward, rt->last.sample,
                             rt->last.output},
                   .decode = rt->last_decode, .decode_wait = rt->last_wait};
    int used = 0;
    if (trace_wants_block_tables(rt->trace)) {
        s.block_tables = rt->pictures;
        used = trace_block_tables(&view, rt->pictures, rt->pictures_cap) + 1;
    }
    if (trace_wants_kv_map(rt->trace, rep->step, p->n_preempted)) {
        s.kv_map = rt->pictures + used;
        trace_kv_map(&view, rt->pictures + used, rt->pictures_cap - used);
    }
    trace_step_done(rt->trace, &s);
}

const StepReport *rt_step(Runtime *rt) {
    const StepReport *rep = engine_step(&rt->en);
    double t0 = clock_seconds();
    const StepPlan *p = rep->plan;
    for (int i = 0; i < p->n_admitted; i++) {
        Request *r = request_of(p->admitted[i]);
        if (r->tm.first_scheduled < 0) r->tm.first_scheduled = rep->start;
    }
    if (rt->trace) trace_plan(rt, rep);
    if (rt->trace)
        for (int i = 0; i < p->n_items; i++)   /* before the tokens: what was guessed, what was kept */
            if (p->items[i].draft > 0)
                trace_spec(rt->trace, rep->end, rep->step, p->items[i].seq->id, p->items[i].draft,
                           rep->accepted[i]);
    for (int i = 0; i < rep->n_out; i++) deliver(rt, &rep->out[i], rep->end);
    if (rt->release_finished) release_ended(rt);
    rt->last = rep->times;
    rt->last.output += clock_seconds() - t0;
    if (rt->low_mem) {   /* weights decoded during the step (model.h, lowmem.h) */
        LmStats ls = model_stats(rt->model).lm;
        rt->last_decode = ls.decode_s - rt->codec_decode;
        rt->last_wait = ls.wait_s - rt->codec_wait;
        rt->codec_decode = ls.decode_s;
        rt->codec_wait = ls.wait_s;
    }
    rt->total.schedule += rt->last.schedule;
    rt->total.build += rt->last.build;
    rt->total.forward += rt->last.forward;
    rt->total.sample += rt->last.sample;
    rt->total.output += rt->last.output;
    if (rt->trace) trace_step(rt, rep, engine_stats(&rt->en).clock == CLOCK_STEPS ? rep->end : rt_now(rt));
    return rep;
}

int rt_run(Runtime *rt, Err *e) {
    while (!rt_idle(rt)) {
        const StepReport *rep = rt_step(rt);
        if (rep->plan->n_items == 0 && engine_running(&rt->en) == 0 && rep->plan->n_preempted == 0)
            return err_set(e, ST_ARG, "engine: %d request(s) wait but none can be scheduled",
                           engine_waiting(&rt->en));
    }
    return ST_OK;
}

int rt_cancel(Runtime *rt, int id, Err *e) {
    Request *r = find(rt, id);
    if (!r) return err_set(e, ST_ARG, "cancel: no request %d", id);
    if (r->seq.state == SEQ_FINISHED)
        return err_set(e, ST_ARG, "cancel: request %d already finished (%s)", id,
                       rt_finish_name(r->seq.finish));
    engine_finish(&rt->en, &r->seq, FIN_CANCEL);
    finalize(rt, r, rt_now(rt));
    if (rt->release_finished) release(rt, r);
    return ST_OK;
}

void rt_request_free(Runtime *rt, int id) {
    Request *r = find(rt, id);
    if (r) release(rt, r);
}

TraceMemory rt_memory(const Runtime *rt, MemStats ready) {
    ModelStats ms = model_stats(rt->model);
    EngineStats es = engine_stats(&rt->en);
    MemStats now = mem_stats();
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    TraceMemory tm = {
        .weights_mapped = ms.mapped, .weights_resident = model_resident_bytes(rt->model),
        .kv_bytes = es.kv.bytes, .kv_block_bytes = es.kv.block_bytes,
        .kv_blocks = es.kv.n_blocks, .kv_peak_held = es.kv.peak_held, .activations = es.activations,
        .heap_peak = now.peak_bytes, .peak_rss_kb = ru.ru_maxrss,
        .allocs_in_steps = es.step_allocations,
        .allocs_outside = now.total_count - ready.total_count - es.step_allocations,
        .weights_coded = ms.coded, .weights_decoded = ms.decoded, .weights_rows8 = ms.rows8, .weights_copied = ms.copied,
        .decode_load_s = ms.decode_load_s, .fast_tier = ms.fast_tier};
    if (ms.low_mem) {
        LmStats ls = ms.lm;
        tm.low_mem = 1;
        tm.weights_decoded = ls.buffer_bytes;
        tm.decodes = (long)ls.decodes;
        tm.decode_s = ls.decode_s;
        tm.decode_min_s = ls.unit_min_s;
        tm.decode_max_s = ls.unit_max_s;
        tm.decode_wait_s = ls.wait_s;
    }
    return tm;
}
