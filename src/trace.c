/* trace.c - the text trace: one line per event, for a person to read.
 *
 * Each line starts with the time since the engine started, then the request
 * (#id) or the step it is about:
 *
 *   [    0.3 ms] #0 arrived: 3 prompt tokens, priority normal, max 64 new, ...
 *   [    0.4 ms] #0 admitted to slot 0 after 0.1 ms in the queue
 *   [    0.4 ms] #0 prefill [0, 3)
 *   [    1.9 ms] #0 first token 281 (TTFT 1.6 ms)
 *   [    1.9 ms] step 1: 1 seq (1 prefill), 3 of 256 tokens; KV 1 held ...
 *   [   48.0 ms] steps 2-33: decode only, 1 seq, 32 tokens; 1.4 ms/step ...
 *   [   90.2 ms] #0 finished (length): 64 tokens; queue 0.1 ms, TTFT ...
 *
 * A step in which nothing happens but decoding is "plain"; at TRACE_ON runs
 * of plain steps are summed into one line (up to 32 steps), so a long
 * generation does not bury the events that matter. TRACE_VERBOSE prints every
 * step, every token and every running request's block table. */
#include "trace.h"
#include "engine.h"
#include <stdarg.h>

enum { RUN_MAX = 32 };

void trace_init(Trace *t, int level, FILE *text) {
    *t = (Trace){.level = level, .text = text};
}

static void say(Trace *t, const Engine *en, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(Trace *t, const Engine *en, const char *fmt, ...) {
    if (!t->text) return;
    fprintf(t->text, "[%9.1f ms] ", engine_now(en) * 1e3);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(t->text, fmt, ap);
    va_end(ap);
    fputc('\n', t->text);
}

static double ms(double s) { return s * 1e3; }

void trace_flush(Trace *t, const Engine *en) {
    if (t->run_first == 0) return;
    long n = t->run_last - t->run_first + 1;
    const StageTimes *s = &t->run_time;
    double total = s->schedule + s->build + s->forward + s->sample + s->output;
    char seqs[32];
    if (t->run_seqs_min == t->run_seqs_max)
        snprintf(seqs, sizeof seqs, "%d seq%s", t->run_seqs_min, t->run_seqs_min == 1 ? "" : "s");
    else
        snprintf(seqs, sizeof seqs, "%d-%d seqs", t->run_seqs_min, t->run_seqs_max);
    if (t->text)
        fprintf(t->text,
                "[%9.1f ms] steps %ld-%ld: decode only, %s, %ld tokens; %.2f ms/step: schedule %.3f, "
                "build %.3f, forward %.2f, sample %.3f, output %.3f\n",
                t->run_end, t->run_first, t->run_last, seqs, t->run_tokens, ms(total) / n,
                ms(s->schedule) / n, ms(s->build) / n, ms(s->forward) / n, ms(s->sample) / n,
                ms(s->output) / n);
    t->run_first = 0;
}

/* Every event but a plain step ends the pending run first, so lines stay in time order. */
static void event(Trace *t, const Engine *en) {
    trace_flush(t, en);
    t->step_events++;
}

void trace_arrived(Trace *t, const Engine *en, const Request *r) {
    event(t, en);
    const SamplerParams *p = &r->sampler.p;
    say(t, en, "#%d arrived: %d prompt tokens, priority %s, max %d new, temperature %g, top-k %d, "
        "top-p %g, seed %llu; %d waiting", r->id, r->n_prompt, rt_priority_name(r->priority),
        r->max_tokens, (double)p->temperature, p->top_k, (double)p->top_p,
        (unsigned long long)p->seed, en->sched.n_waiting + en->sched.n_preempted_queued);
}

static int plain_step(const SchedOutput *o) {
    return o->n_preempted == 0 && o->n_admitted == 0 && o->n_prefill_tokens == 0;
}

void trace_scheduled(Trace *t, const Engine *en, const SchedOutput *o) {
    if (!plain_step(o)) event(t, en);
    for (int i = 0; i < o->n_preempted; i++) {
        const Request *r = o->preempted[i];
        say(t, en, "#%d preempted: the pool had no block for a higher-ranked request; %d blocks "
            "freed, %d tokens to recompute when it resumes", r->id, r->blocks_released, r->n_tokens);
    }
    for (int i = 0; i < o->n_admitted; i++) {
        const Request *r = o->admitted[i];
        const KvSeq *q = &en->sched.seqs[r->slot];
        char hit[64] = "";
        if (q->n_tokens > 0) snprintf(hit, sizeof hit, "; prefix cache hit: %d tokens reused", q->n_tokens);
        if (r->n_preempted > 0)
            say(t, en, "#%d resumed in slot %d after preemption %d%s", r->id, r->slot, r->n_preempted, hit);
        else
            say(t, en, "#%d admitted to slot %d after %.1f ms in the queue%s", r->id, r->slot,
                ms(r->tm.first_scheduled - r->tm.arrival), hit);
    }
    for (int i = 0; i < o->n_items; i++) {
        const SchedItem *it = &o->items[i];
        if (it->n > 1 || it->req->n_out == 0 || it->from + it->n < it->req->n_tokens)
            say(t, en, "#%d prefill [%d, %d)%s", it->req->id, it->from, it->from + it->n,
                it->sample ? "" : " (chunk; more to come)");
        else if (t->level >= TRACE_VERBOSE)
            say(t, en, "#%d decode at position %d", it->req->id, it->from);
    }
}

void trace_token(Trace *t, const Engine *en, const Request *r, int token) {
    if (r->n_out == 1) {
        event(t, en);
        say(t, en, "#%d first token %d (TTFT %.1f ms)", r->id, token, ms(r->tm.first_token - r->tm.arrival));
    } else if (t->level >= TRACE_VERBOSE) {
        say(t, en, "#%d token %d at position %d", r->id, token, r->n_tokens - 1);
    }
}

void trace_finished(Trace *t, const Engine *en, const Request *r) {
    event(t, en);
    const Telemetry *m = &r->tm;
    say(t, en, "#%d finished (%s): %d tokens; queue %.1f ms, TTFT %.1f ms, TPOT %.2f ms, e2e %.1f ms; "
        "%d blocks released", r->id, rt_finish_name(r->finish), r->n_out, ms(m->queue_wait),
        m->ttft >= 0 ? ms(m->ttft) : 0.0, ms(m->tpot), ms(m->e2e), r->blocks_released);
}

static void add_times(StageTimes *a, const StageTimes *b) {
    a->schedule += b->schedule;
    a->build += b->build;
    a->forward += b->forward;
    a->sample += b->sample;
    a->output += b->output;
}

void trace_step_done(Trace *t, const Engine *en, const SchedOutput *o, const StageTimes *st) {
    long step = en->steps;
    int plain = plain_step(o) && t->step_events == 0;
    t->step_events = 0;
    if (t->level < TRACE_VERBOSE && plain) {   /* add to the run of plain steps */
        if (t->run_first == 0) {
            t->run_first = step;
            t->run_tokens = 0;
            t->run_seqs_min = t->run_seqs_max = o->n_items;
            t->run_time = (StageTimes){0};
        }
        t->run_last = step;
        t->run_tokens += o->n_tokens;
        if (o->n_items < t->run_seqs_min) t->run_seqs_min = o->n_items;
        if (o->n_items > t->run_seqs_max) t->run_seqs_max = o->n_items;
        add_times(&t->run_time, st);
        t->run_end = engine_now(en) * 1e3;
        if (t->run_last - t->run_first + 1 >= RUN_MAX) trace_flush(t, en);
        return;
    }
    trace_flush(t, en);
    const KvPool *p = &en->pool;
    double total = st->schedule + st->build + st->forward + st->sample + st->output;
    say(t, en, "step %ld: %d seq%s (%d prefill, %d decode tokens), %d of %d tokens; KV %d held, %d "
        "cached, %d free; %.2f ms: schedule %.3f, build %.3f, forward %.2f, sample %.3f, output %.3f",
        step, o->n_items, o->n_items == 1 ? "" : "s", o->n_prefill_tokens, o->n_decode_tokens,
        o->n_tokens, en->sched.cfg.token_budget, kv_held_blocks(p), kv_cached_blocks(p),
        kv_free_blocks(p), ms(total), ms(st->schedule), ms(st->build), ms(st->forward),
        ms(st->sample), ms(st->output));
    if (t->level >= TRACE_VERBOSE && t->text)
        for (int i = 0; i < en->sched.cfg.max_seqs; i++) {
            const Request *r = en->sched.running[i];
            if (!r) continue;
            const KvSeq *q = &en->sched.seqs[i];
            fprintf(t->text, "%14s#%d slot %d, %d tokens in blocks [", "", r->id, i, q->n_tokens);
            for (int b = 0; b < q->n_blocks; b++)
                fprintf(t->text, "%s%d%s", b ? " " : "", q->table[b],
                        p->refcount[q->table[b]] > 1 ? "*" : "");
            fprintf(t->text, "]\n");
        }
}
