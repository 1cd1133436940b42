/* engine.c - the step loop.
 *
 *     while something is running or waiting:
 *         decision = scheduler.step()          who runs, how many tokens each
 *         sampled  = executor.run(decision)    one forward pass, then sampling
 *         for each sampled token:
 *             runtime.accept(token)            stream text, check stop conditions
 *             if finished: release its blocks
 *
 * That is all an engine is. Every interesting decision lives in the stages it
 * calls; this file only keeps them in order and times them. A request that
 * finishes in step k gives its blocks back before step k+1 is scheduled, so
 * the next step can admit a waiting request at once: continuous batching. */
#include "engine.h"
#include "clock.h"
#include "mem.h"
#include <string.h>

EngineConfig engine_config_default(void) {
    EngineConfig c = {
        .block_size = 16,
        .n_blocks = 0,
        .kv_bytes = 0,
        .sched = {.policy = SCHED_FCFS, .token_budget = 256, .max_seqs = 16, .chunk = 0,
                  .aging_steps = 32},
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
    int st = kv_pool_init(&en->pool, c->n_layers, kvd, BS, nb, e);
    if (!st) st = sched_init(&en->sched, &cfg->sched, &en->pool, ctx_blocks, e);
    if (!st) st = exec_init(&en->exec, m, &en->pool, cfg->sched.token_budget, cfg->sched.max_seqs, e);
    if (st) {
        engine_free(en);
        return st;
    }
    en->t0 = clock_seconds();
    return ST_OK;
}

void engine_free(Engine *en) {
    while (en->all) rt_request_free(en, en->all);
    exec_free(&en->exec);
    sched_free(&en->sched);
    kv_pool_free(&en->pool);
    memset(en, 0, sizeof *en);
}

double engine_now(const Engine *en) { return clock_seconds() - en->t0; }

int engine_idle(const Engine *en) { return sched_idle(&en->sched); }

int engine_step(Engine *en) {
    size_t allocs = mem_stats().total_count;
    en->steps++;   /* this step's number, from 1 */
    double t0 = clock_seconds();
    en->step_started = t0 - en->t0;
    const SchedOutput *o = sched_step(&en->sched);
    double t1 = clock_seconds();
    for (int i = 0; i < o->n_admitted; i++)
        if (o->admitted[i]->tm.first_scheduled < 0) o->admitted[i]->tm.first_scheduled = t1 - en->t0;
    StageTimes *st = &en->last;
    memset(st, 0, sizeof *st);
    st->schedule = t1 - t0;
    if (en->trace) trace_scheduled(en->trace, en, o);
    if (o->n_items == 0) {
        en->step_allocations += mem_stats().total_count - allocs;
        return 0;
    }

    const int *sampled = exec_run(&en->exec, &en->sched, o);
    double t2 = clock_seconds();
    double now = t2 - en->t0;
    for (int i = 0; i < o->n_items; i++) {
        if (sampled[i] < 0) continue;
        Request *r = o->items[i].req;
        /* Its prompt is computed: the other samples of it fork from it now,
         * before its own token can finish it and release its blocks. */
        if (r->fork_next && !r->fork_parent)
            rt_fork_samples(en, r, en->exec.fork_logits + (size_t)i * en->model->cfg.vocab_size,
                            en->exec.fork_scratch, now);
        en->tokens_out++;
        FinishReason why = rt_accept_token(en, r, sampled[i], now);
        if (en->trace) trace_token(en->trace, en, r, sampled[i], now);
        if (why != FIN_NONE) rt_finish(en, r, why, now);
    }
    double t3 = clock_seconds();
    st->build = en->exec.t_build;
    st->forward = en->exec.t_forward;
    st->sample = en->exec.t_sample;
    st->output = t3 - t2;
    en->total.schedule += st->schedule;
    en->total.build += st->build;
    en->total.forward += st->forward;
    en->total.sample += st->sample;
    en->total.output += st->output;
    en->tokens_run += o->n_tokens;
    if (en->trace) trace_step_done(en->trace, en, o, st);
    en->step_allocations += mem_stats().total_count - allocs;
    return o->n_tokens;
}

int engine_run(Engine *en, Err *e) {
    while (!engine_idle(en)) {
        int n = engine_step(en);
        if (n == 0 && en->sched.n_running == 0 && en->sched.out.n_preempted == 0)
            return err_set(e, ST_ARG, "engine: %d request(s) wait but none can be scheduled",
                           en->sched.n_waiting + en->sched.n_preempted_queued);
    }
    return ST_OK;
}
