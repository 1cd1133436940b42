/* engine.c - the step loop.
 *
 *     guess what follows each decoding sequence   (speculation, when asked for)
 *     plan    = scheduler.step()             who runs, how many tokens each
 *     sampled = executor.run(plan)           one forward pass, then sampling
 *     scheduler.commit(plan)                 the K/V written are the sequences' now
 *                                            (a rejected guess's positions go back)
 *     for each sampled token:
 *         fork the samples waiting on it     (the first token of an n > 1 request)
 *         append it; EOS, length or context? finish: its blocks go back
 *     report what happened                   the runtime turns it into text
 *
 * That is all an engine is. Every interesting decision lives in the stages it
 * calls; this file keeps them in order, times them, and applies the few
 * rules that need more than one stage: a sequence's end (the scheduler lets
 * go of its blocks) and the forking of samples (the scheduler shares the
 * blocks, the executor samples from the saved logits). A sequence that
 * finishes in step k gives its blocks back before step k + 1 is scheduled, so
 * the next step can admit a waiting one at once: continuous batching.
 *
 * Speculative decoding (notes/speculative.md) adds the first line and two
 * rules that need several stages: the guess is made here, from the
 * sequence's own tokens, and written past its last token; the scheduler
 * decides whether it runs; the executor says how much of it the model
 * accepted; the scheduler commits only that much and gives the rest of the
 * positions back; and the accepted guesses are appended here like sampled
 * tokens, before the token the model chose after them.
 *
 * Nothing here calls up. The runtime learns what happened from the
 * StepReport, and tells the engine what only it can know (a stop string in
 * the text, a cancel) through engine_finish. */
#include "engine.h"
#include "base/mem.h"
#include <assert.h>
#include <stdio.h>
#include <string.h>

EngineConfig engine_config_default(void) {
    EngineConfig c = {
        .block_size = 16,
        .n_blocks = 0,
        .kv_bytes = 0,
        .sched = {.policy = SCHED_FCFS, .token_budget = 256, .max_seqs = 16, .chunk = 0,
                  .aging_steps = 32, .max_draft = 0, .spec_limit = ENGINE_SPEC_LIMIT},
        .clock = CLOCK_WALL,
    };
    return c;
}

int engine_init(Engine *en, const Model *m, const EngineConfig *cfg, Err *e) {
    memset(en, 0, sizeof *en);
    const ModelConfig *c = &m->cfg;
    int BS = cfg->block_size;
    if (BS < 1 || BS > 4096)
        return err_set(e, ST_ARG, "engine: block size %d outside 1..4096", BS);
    if (cfg->sched.max_seqs > cfg->sched.token_budget)
        return err_set(e, ST_ARG, "engine: max_seqs %d exceeds the token budget %d (each running "
                                  "sequence needs a token per step)",
                       cfg->sched.max_seqs, cfg->sched.token_budget);
    int kvd = c->n_kv_heads * c->head_dim;
    int ctx_blocks = (c->seq_len + BS - 1) / BS;
    int nb = cfg->n_blocks;
    if (nb <= 0 && cfg->kv_bytes > 0) {
        nb = kv_blocks_for_bytes(cfg->kv_bytes, c->n_layers, kvd, BS);
        if (nb < 1)
            return err_set(e, ST_ARG, "engine: %zu bytes of KV pool hold no block of %d tokens",
                           cfg->kv_bytes, BS);
    }
    if (nb <= 0) {   /* default: every sequence's full context, at most 1 GiB */
        long want = (long)cfg->sched.max_seqs * ctx_blocks;
        long cap = kv_blocks_for_bytes((size_t)1 << 30, c->n_layers, kvd, BS);
        nb = (int)(want < cap ? want : cap);
        if (nb < ctx_blocks) nb = ctx_blocks;
    }
    en->model = m;
    en->cfg = *cfg;
    en->cfg.n_blocks = nb;
    en->cap_blocks = ctx_blocks;
    int st = kv_pool_init(&en->pool, c->n_layers, kvd, BS, nb, e);
    if (!st) st = sched_init(&en->sched, &cfg->sched, &en->pool, e);
    if (!st)
        st = exec_init(&en->exec, m, &en->pool, cfg->sched.token_budget, cfg->sched.max_seqs,
                       cfg->sched.max_draft, e);
    if (!st) {
        /* a step's outputs: each sequence's token and a fork's first, plus
         * every draft token it may accept */
        size_t n_out = (2 + (size_t)cfg->sched.max_draft) * (size_t)cfg->sched.max_seqs;
        en->report.out = mem_alloc(n_out * sizeof *en->report.out);
        en->view_seqs = mem_alloc((size_t)cfg->sched.max_seqs * sizeof *en->view_seqs);
        en->rejected = mem_alloc((size_t)cfg->sched.max_seqs * sizeof *en->rejected);
        if (!en->report.out || !en->view_seqs || !en->rejected)
            st = err_set(e, ST_NOMEM, "engine: cannot allocate the step report");
    }
    if (st) {
        engine_free(en);
        return st;
    }
    clock_start(&en->clock, cfg->clock);
    return ST_OK;
}

void engine_free(Engine *en) {
    mem_free(en->report.out);
    mem_free(en->view_seqs);
    mem_free(en->rejected);
    exec_free(&en->exec);
    sched_free(&en->sched);
    kv_pool_free(&en->pool);
    memset(en, 0, sizeof *en);
}

double engine_now(const Engine *en) { return clock_now(&en->clock); }

void engine_wait_until(Engine *en, double t) { clock_wait_until(&en->clock, t); }

double engine_time_of(const Engine *en, double wall) {
    return en->clock.kind == CLOCK_WALL ? wall - en->clock.t0 : -1.0;
}

int engine_check(const Engine *en, Err *e) { return kv_pool_check(&en->pool, e); }

EngineStats engine_stats(const Engine *en) {
    return (EngineStats){.steps = en->steps, .tokens_run = en->tokens_run, .tokens_out = en->tokens_out,
                         .spec_proposed = en->spec_proposed, .spec_accepted = en->spec_accepted,
                         .step_allocations = en->step_allocations, .clock = en->clock.kind,
                         .cap_blocks = en->cap_blocks, .activations = en->exec.rs.bytes,
                         .sched = sched_stats(&en->sched), .kv = kv_stats(&en->pool)};
}

int engine_idle(const Engine *en) { return sched_idle(&en->sched); }

int engine_waiting(const Engine *en) { return en->sched.n_waiting + en->sched.n_preempted_queued; }

int engine_running(const Engine *en) { return en->sched.n_running; }

int engine_add(Engine *en, Sequence *q, Sequence *fork_of, Err *e) {
    if (kv_seq_init(&q->kv, en->cap_blocks, e)) return ST_NOMEM;
    if (!fork_of) {
        sched_add(&en->sched, q);
        return ST_OK;
    }
    /* a sample waits on the first one's list until its prompt is computed */
    q->fork_parent = fork_of;
    Sequence **tail = &fork_of->fork_next;
    while (*tail) tail = &(*tail)->fork_next;
    *tail = q;
    return ST_OK;
}

/* Undo q's place among the samples of its prompt: a waiting sample leaves
 * its first's list; a first that still has samples waiting lets them go,
 * each queued to run on its own when requeue is set. */
static void fork_detach(Engine *en, Sequence *q, int requeue) {
    if (q->fork_parent) {
        for (Sequence **p = &q->fork_parent->fork_next; *p; p = &(*p)->fork_next)
            if (*p == q) {
                *p = q->fork_next;
                break;
            }
        q->fork_parent = NULL;
        q->fork_next = NULL;
        return;
    }
    Sequence *c = q->fork_next;
    q->fork_next = NULL;
    while (c) {
        Sequence *next = c->fork_next;
        c->fork_parent = c->fork_next = NULL;
        if (requeue) sched_add(&en->sched, c);
        c = next;
    }
}

void engine_finish(Engine *en, Sequence *q, FinishReason why) {
    if (q->state == SEQ_FINISHED) {
        q->finish = why;
        return;
    }
    fork_detach(en, q, 1);
    sched_remove(&en->sched, q);
    q->state = SEQ_FINISHED;
    q->finish = why;
}

void engine_stop(Engine *en, Sequence *q, int n_out) {
    if (n_out < q->n_out) {
        en->tokens_out -= q->n_out - n_out;
        q->n_tokens -= q->n_out - n_out;
        q->n_out = n_out;
    }
    engine_finish(en, q, FIN_STOP);
}

void engine_drop(Engine *en, Sequence *q) {
    fork_detach(en, q, 0);
    if (q->state != SEQ_FINISHED) sched_remove(&en->sched, q);
    kv_seq_free(&q->kv);
}

static void fork_samples(Engine *en, Sequence *first, int i);

/* exercises/engine_output/ hollows these two functions: built with
 * -DEXERCISE_ENGINE_OUTPUT, the file that macro names stands in their place
 * (tools/exercise.sh). */
/* Does token end q (one of its end-of-generation tokens)? */
static int ends_on(const Sequence *q, int token) {
    for (int i = 0; i < q->n_eog; i++)
        if (q->eog[i] == token) return 1;
    return 0;
}

#ifdef EXERCISE_ENGINE_OUTPUT
#include EXERCISE_ENGINE_OUTPUT
#else
/* A sampled token joins its sequence; the engine's stop rules are checked. */
static void append(Engine *en, Sequence *q, int token, const Sequence *forked_from) {
    q->tokens[q->n_tokens++] = token;
    q->n_out++;
    en->tokens_out++;
    FinishReason why = FIN_NONE;
    if (ends_on(q, token)) why = FIN_EOS;
    else if (q->n_out >= q->max_tokens) why = FIN_LENGTH;
    else if (q->n_tokens >= q->cap) why = FIN_CONTEXT;   /* cap < prompt + max_tokens: context full */
    StepOutput *o = &en->report.out[en->report.n_out++];
    *o = (StepOutput){.seq = q, .token = token, .finish = why, .fork = {.from = -1}};
    if (forked_from)
        o->fork = (typeof(o->fork)){forked_from->id, q->slot, q->kv.n_blocks, q->kv.n_tokens};
    if (why != FIN_NONE) engine_finish(en, q, why);
}

/* What the step produced, item by item of the plan: nothing for a chunk of
 * prefill that samples no token; the end for a sequence whose logits were
 * not finite; otherwise its samples fork (if it is the first of n and they
 * wait on it), and then its own token is appended. That order matters: the
 * token may finish the sequence, which gives its blocks back, and the
 * samples are to share them. */
static void step_outputs(Engine *en, const StepPlan *plan, const int *sampled) {
    for (int i = 0; i < plan->n_items; i++) {
        if (sampled[i] == EXEC_NO_TOKEN) continue;
        Sequence *q = plan->items[i].seq;
        if (sampled[i] == EXEC_NONFINITE) {   /* never sample from NaN: it ends here */
            en->report.out[en->report.n_out++] =
                (StepOutput){.seq = q, .token = -1, .finish = FIN_ERROR, .error = exec_error(&en->exec),
                             .fork = {.from = -1}};
            engine_finish(en, q, FIN_ERROR);
            continue;
        }
        if (q->fork_next && !q->fork_parent) fork_samples(en, q, i);
        append(en, q, sampled[i], NULL);
    }
}
#endif

/* first's prompt is computed and item i of the plan sampled its first token:
 * each sample waiting on it goes into a free slot sharing its blocks and
 * samples its own first token from the same logits; a sample that finds no
 * free slot is queued to run on its own (its prompt mostly from the prefix
 * cache). Done before first's own token is appended, which might finish it
 * and release the blocks the samples are to share. */
static void fork_samples(Engine *en, Sequence *first, int i) {
    Sequence *c = first->fork_next;
    first->fork_next = NULL;
    while (c) {
        Sequence *next = c->fork_next;
        c->fork_parent = c->fork_next = NULL;
        if (sched_fork(&en->sched, first, c))
            append(en, c, exec_sample_fork(&en->exec, i, c), first);
        else
            sched_add(&en->sched, c);
        c = next;
    }
}

/* ---- speculation: guesses from the sequence's own tokens ---- */

/* Prompt lookup (Saxena, "Prompt Lookup Decoding", 2023; llama.cpp's
 * lookup decoding): find the latest earlier place where q's last g tokens
 * occur (g = 3, else 2, else 1) and guess that what followed them there
 * follows again, up to k tokens. Text that quotes its prompt or repeats
 * itself is guessed well, and a wrong guess costs only the rows it took in
 * the batch. No end-of-generation token is guessed (nor anything after
 * one), so an accepted guess never ends the sequence: the token the model
 * chooses after the guesses may. The guess is written past n_tokens, where
 * exec_flatten reads it like any token; returns its length. */
enum { NGRAM_MAX = 3 };

static int propose_draft(Sequence *q, int k) {
    int n = q->n_tokens, *t = q->tokens;
    for (int g = NGRAM_MAX; g >= 1; g--) {
        if (n <= g) continue;
        const int *tail = t + n - g;
        for (int at = n - g - 1; at >= 0; at--) {   /* the latest occurrence first */
            if (memcmp(t + at, tail, (size_t)g * sizeof(int)) != 0) continue;
            int m = 0;   /* reads stay below n, writes start at n: they never overlap */
            while (m < k && at + g + m < n && !ends_on(q, t[at + g + m])) {
                t[n + m] = t[at + g + m];
                m++;
            }
            if (m > 0) return m;
        }
    }
    return 0;
}

/* Before the plan: a draft for every running sequence that decodes and asks
 * for one. Its length leaves room for the token that follows an accepted
 * draft: inside max_tokens and inside the sequence's cap (its context). */
static void propose_drafts(Engine *en) {
    int max_draft = en->cfg.sched.max_draft;
    if (max_draft == 0) return;
    for (int s = 0; s < en->cfg.sched.max_seqs; s++) {
        Sequence *q = en->sched.running[s];
        if (!q) continue;
        q->n_draft = 0;
        if (q->speculate <= 0 || q->n_out == 0 || q->n_tokens - q->n_computed != 1) continue;
        int k = q->speculate < max_draft ? q->speculate : max_draft;
        if (q->spec_len > 0 && q->spec_len < k) k = q->spec_len;
        if (k > q->cap - q->n_tokens - 1) k = q->cap - q->n_tokens - 1;
        if (k > q->max_tokens - q->n_out - 1) k = q->max_tokens - q->n_out - 1;
        if (k > 0) q->n_draft = propose_draft(q, k);
    }
}

/* After the pass: how many positions of each item to take back (the
 * guesses the model did not accept), counted for the report. */
static void count_rejected(Engine *en, const StepPlan *plan, const int *sampled) {
    StepReport *rep = &en->report;
    for (int i = 0; i < plan->n_items; i++) {
        const StepItem *it = &plan->items[i];
        int ok = sampled[i] == EXEC_NONFINITE ? 0 : en->exec.accepted[i];
        en->rejected[i] = it->draft - ok;
        it->seq->n_draft = 0;
        if (it->draft == 0) continue;
        it->seq->spec_proposed += it->draft;
        it->seq->spec_accepted += ok;
        /* the next guess: one longer than this one's accepted run, so a
         * sequence that copies grows its guesses and one that does not
         * keeps them short (each rejected position cost a row) */
        it->seq->spec_len = ok + 1;
        rep->spec.accepted += ok;
        rep->spec.rewinds += en->rejected[i] > 0;
    }
    rep->spec.proposed = plan->n_draft_tokens;
    en->spec_proposed += plan->n_draft_tokens;
    en->spec_accepted += rep->spec.accepted;
}

/* The accepted guesses join their sequences like sampled tokens, each
 * with its own output, before step_outputs appends the token the model
 * chose after them. They are already in place in q->tokens; by
 * propose_drafts' limits none of them can finish the sequence. */
static void append_accepted(Engine *en, const StepPlan *plan, const int *sampled) {
    for (int i = 0; i < plan->n_items; i++) {
        Sequence *q = plan->items[i].seq;
        if (plan->items[i].draft == 0 || sampled[i] == EXEC_NONFINITE) continue;
        for (int j = 0; j < en->exec.accepted[i]; j++) {
            int first = en->report.n_out;
            append(en, q, q->tokens[q->n_tokens], NULL);
            en->report.out[first].draft = 1;
            assert(q->state != SEQ_FINISHED);
        }
    }
}

const StepReport *engine_step(Engine *en) {
    size_t allocs = mem_stats().total_count;
    StepReport *rep = &en->report;
    rep->step = ++en->steps;   /* this step's number, from 1 */
    rep->start = engine_now(en);
    rep->n_out = 0;
    rep->times = (StageTimes){0};
    rep->spec.proposed = rep->spec.accepted = rep->spec.rewinds = rep->spec.blocks = 0;
    double t0 = clock_seconds();
    propose_drafts(en);
    const StepPlan *plan = sched_step(&en->sched);
    rep->plan = plan;
    double t1 = clock_seconds();
    rep->times.schedule = t1 - t0;
    if (plan->n_items > 0) {
        const int *sampled = exec_run(&en->exec, plan);
        double t2 = clock_seconds();
        count_rejected(en, plan, sampled);
        rep->accepted = en->exec.accepted;
        rep->spec.blocks = sched_commit(&en->sched, plan, en->rejected);
        append_accepted(en, plan, sampled);
        step_outputs(en, plan, sampled);
        rep->times.build = en->exec.t_build;
        rep->times.forward = en->exec.t_forward;
        rep->times.sample = en->exec.t_sample;
        rep->times.output = clock_seconds() - t2;
        en->tokens_run += plan->n_tokens;
    }
    clock_step_done(&en->clock);
    rep->end = engine_now(en);
    en->step_allocations += mem_stats().total_count - allocs;
    return rep;
}

/* ---- the pool as plain data (kv_view.h), for the trace and the tools ---- */

KvView engine_kv_view(Engine *en) {
    const KvPool *p = &en->pool;
    int n = 0;
    for (int s = 0; s < en->sched.cfg.max_seqs; s++) {
        const Sequence *q = en->sched.running[s];
        if (!q) continue;
        en->view_seqs[n++] = (KvViewSeq){.id = q->id, .slot = s, .n_tokens = q->kv.n_tokens,
                                         .n_blocks = q->kv.n_blocks, .table = q->kv.table};
    }
    return (KvView){.n_blocks = p->NB, .block_size = p->BS, .refcount = p->refcount,
                    .registered = p->registered, .n_seqs = n, .seqs = en->view_seqs};
}
