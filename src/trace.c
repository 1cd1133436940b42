/* trace.c - the engine, told three ways: text for reading, JSON for Perfetto,
 * SVG for a glance.
 *
 * Text: each line starts with the time since the engine started, then the
 * request (#id) or the step it is about:
 *
 *   [      0.3 ms] #0 arrived: 3 prompt tokens, priority normal, max 64 new, ...
 *   [      0.4 ms] #0 admitted to slot 0 after 0.1 ms in the queue
 *   [      0.4 ms] #0 prefill [0, 3)
 *   [      1.9 ms] #0 first token 281 (TTFT 1.6 ms)
 *   [      1.9 ms] step 1: 1 seq (3 prefill, 0 decode tokens), 3 of 256 ...
 *   [     48.0 ms] steps 2-33: decode only, 1 seq, 32 tokens; 1.4 ms/step ...
 *   [     90.2 ms] #0 finished (length): 64 tokens; queue 0.1 ms, TTFT ...
 *
 * A step in which nothing happens but decoding is "plain"; at TRACE_ON runs
 * of plain steps are summed into one line (up to 32 steps), so a long
 * generation does not bury the events that matter.
 *
 * JSON: the Chrome trace-event format, written as events happen. pid 1 is the
 * engine: a track of steps, each a span with its five stages nested inside,
 * and counters (KV blocks, requests). pid 2 holds one track per request (tid =
 * id + 1) with spans queued / prefill / decode, which never overlap: a phase
 * is closed before the next opens, and instant events for arrived, first
 * token, preempted, resumed and finished (its args carry the telemetry).
 *
 * A request's phase lives in the request itself (tr_phase, tr_since), so the
 * trace needs no table of its own. */
#include "trace.h"
#include "engine.h"
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

enum { RUN_MAX = 32 };
static void json_name(Trace *t, const char *what, int pid, int tid, const char *name);
static const char *const PHASE_NAMES[] = {"none", "queued", "prefill", "decode"};

int trace_init(Trace *t, int level, FILE *text, FILE *json, int svg_spans, Err *e) {
    *t = (Trace){.level = level, .text = level > TRACE_OFF ? text : NULL, .json = json, .max_req = -1};
    if (svg_spans > 0) {
        t->spans = mem_alloc((size_t)svg_spans * sizeof *t->spans);
        if (!t->spans) return err_set(e, ST_NOMEM, "trace: cannot allocate %d timeline spans", svg_spans);
        t->cap_spans = svg_spans;
    }
    if (json) {
        fprintf(json, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
        json_name(t, "process_name", 1, 0, "engine");
        json_name(t, "thread_name", 1, 1, "steps");
        json_name(t, "process_name", 2, 0, "requests");
    }
    return ST_OK;
}

void trace_free(Trace *t) {
    mem_free(t->spans);
    t->spans = NULL;
    t->cap_spans = t->n_spans = 0;
}

static double ms(double s) { return s * 1e3; }

/* ---- JSON ---- */

/* Start one event object: {"name": ..., "ph": ..., "pid": ..., "tid": ..., "ts": ...
 * (microseconds). The caller adds fields and ends it with json_end. */
static void json_begin(Trace *t, const char *name, char ph, int pid, int tid, double ts) {
    fprintf(t->json, "%s{\"name\": \"%s\", \"ph\": \"%c\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f",
            t->json_events++ ? ",\n" : "", name, ph, pid, tid, ts * 1e6);
}

static void json_end(Trace *t) { fputc('}', t->json); }

static void json_span(Trace *t, const char *name, int pid, int tid, double t0, double t1,
                      const char *args) {
    json_begin(t, name, 'X', pid, tid, t0);
    fprintf(t->json, ", \"dur\": %.3f", (t1 - t0) * 1e6);
    if (args) fprintf(t->json, ", \"args\": {%s}", args);
    json_end(t);
}

static void json_instant(Trace *t, const char *name, int tid, double ts, const char *args) {
    json_begin(t, name, 'i', 2, tid, ts);
    fprintf(t->json, ", \"s\": \"t\"");
    if (args) fprintf(t->json, ", \"args\": {%s}", args);
    json_end(t);
}

static void json_name(Trace *t, const char *what, int pid, int tid, const char *name) {
    json_begin(t, what, 'M', pid, tid, 0.0);
    fprintf(t->json, ", \"args\": {\"name\": \"%s\"}", name);
    json_end(t);
}

/* ---- phases: each change closes the open span ---- */

static void record(Trace *t, int req, int phase, double t0, double t1) {
    if (!t->spans) return;
    if (t->n_spans == t->cap_spans) {
        t->dropped++;
        return;
    }
    t->spans[t->n_spans++] = (TraceSpan){req, phase, t0, t1};
}

static void enter(Trace *t, Request *r, int phase, double now) {
    if (r->tr_phase != PH_NONE) {
        if (t->json) {
            char args[64];
            snprintf(args, sizeof args, "\"request\": %d", r->id);
            json_span(t, PHASE_NAMES[r->tr_phase], 2, r->id + 1, r->tr_since, now, args);
        }
        record(t, r->id, r->tr_phase, r->tr_since, now);
    }
    r->tr_phase = phase;
    r->tr_since = now;
}

static void mark(Trace *t, Request *r, const char *name, int kind, double now, const char *args) {
    if (t->json) json_instant(t, name, r->id + 1, now, args);
    if (kind) record(t, r->id, kind, now, now);
}

/* ---- text ---- */

static void say(Trace *t, double at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(Trace *t, double at, const char *fmt, ...) {
    if (!t->text) return;
    fprintf(t->text, "[%9.1f ms] ", ms(at));
    va_list ap;
    va_start(ap, fmt);
    vfprintf(t->text, fmt, ap);
    va_end(ap);
    fputc('\n', t->text);
}

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

/* ---- hooks ---- */

void trace_arrived(Trace *t, const Engine *en, Request *r) {
    event(t, en);
    double now = r->tm.arrival;
    if (r->id > t->max_req) t->max_req = r->id;
    const SamplerParams *p = &r->sampler.p;
    say(t, now, "#%d arrived: %d prompt tokens, priority %s, max %d new, temperature %g, top-k %d, "
        "top-p %g, seed %llu; %d waiting", r->id, r->n_prompt, rt_priority_name(r->priority),
        r->max_tokens, (double)p->temperature, p->top_k, (double)p->top_p,
        (unsigned long long)p->seed, en->sched.n_waiting + en->sched.n_preempted_queued);
    if (t->json) {
        char name[48], args[160];
        snprintf(name, sizeof name, "#%d %s", r->id, rt_priority_name(r->priority));
        json_name(t, "thread_name", 2, r->id + 1, name);
        snprintf(args, sizeof args, "\"request\": %d, \"prompt_tokens\": %d, \"max_tokens\": %d, "
                 "\"priority\": \"%s\"", r->id, r->n_prompt, r->max_tokens, rt_priority_name(r->priority));
        json_instant(t, "arrived", r->id + 1, now, args);
    }
    enter(t, r, PH_QUEUED, now);
}

static int plain_step(const SchedOutput *o) {
    return o->n_preempted == 0 && o->n_admitted == 0 && o->n_prefill_tokens == 0 && o->n_cow == 0;
}

void trace_scheduled(Trace *t, const Engine *en, const SchedOutput *o) {
    if (!plain_step(o)) event(t, en);
    double now = engine_now(en);
    char args[160];
    for (int i = 0; i < o->n_preempted; i++) {
        Request *r = o->preempted[i];
        say(t, now, "#%d preempted: the pool ran out and it ranked lowest of the requests still to "
            "run this step; %d blocks freed, %d tokens to recompute when it resumes", r->id,
            r->blocks_released, r->n_tokens);
        snprintf(args, sizeof args, "\"request\": %d, \"blocks_freed\": %d, \"tokens\": %d, \"step\": %ld",
                 r->id, r->blocks_released, r->n_tokens, en->steps);
        enter(t, r, PH_QUEUED, now);
        mark(t, r, "preempted", 'p', now, args);
    }
    for (int i = 0; i < o->n_cow; i++) {
        Request *r = o->cow[i];
        say(t, now, "#%d copy-on-write: position %d falls in a block it shared with other samples "
            "of its prompt; that block was copied (%d rows) before the write", r->id, r->n_computed,
            r->n_computed % en->pool.BS);
        snprintf(args, sizeof args, "\"request\": %d, \"position\": %d, \"step\": %ld", r->id,
                 r->n_computed, en->steps);
        mark(t, r, "copy-on-write", 0, now, args);
    }
    for (int i = 0; i < o->n_admitted; i++) {
        Request *r = o->admitted[i];
        const KvSeq *q = &en->sched.seqs[r->slot];
        char hit[64] = "";
        if (q->n_tokens > 0) snprintf(hit, sizeof hit, "; prefix cache hit: %d tokens reused", q->n_tokens);
        double at = r->n_preempted > 0 ? now : r->tm.first_scheduled;
        if (r->n_preempted > 0) {
            say(t, at, "#%d resumed in slot %d after preemption %d%s", r->id, r->slot, r->n_preempted, hit);
            snprintf(args, sizeof args, "\"request\": %d, \"prefix_hit_tokens\": %d, \"step\": %ld",
                     r->id, q->n_tokens, en->steps);
            mark(t, r, "resumed", 0, at, args);
        } else {
            say(t, at, "#%d admitted to slot %d after %.1f ms in the queue%s", r->id, r->slot,
                ms(r->tm.first_scheduled - r->tm.arrival), hit);
            if (q->n_tokens > 0) {
                snprintf(args, sizeof args, "\"request\": %d, \"prefix_hit_tokens\": %d", r->id, q->n_tokens);
                mark(t, r, "prefix hit", 0, at, args);
            }
        }
        enter(t, r, PH_PREFILL, at);
    }
    for (int i = 0; i < o->n_items; i++) {
        const SchedItem *it = &o->items[i];
        if (it->req->tr_phase == PH_PREFILL)   /* (a resumed request's recompute is a prefill too) */
            say(t, now, "#%d prefill [%d, %d)%s", it->req->id, it->from, it->from + it->n,
                it->sample ? "" : " (a chunk: more to come)");
        else if (t->level >= TRACE_VERBOSE)
            say(t, now, "#%d decode at position %d", it->req->id, it->from);
    }
}

/* The text of the request's last token, escaped and cut short if long. */
static void piece_text(const Request *r, char *text, int cap) {
    int n = 0;
    for (int i = 0; i < r->n_piece && n < cap - 8; i++) {
        unsigned char c = (unsigned char)r->piece[i];
        if (c == '\n') n += snprintf(text + n, (size_t)(cap - n), "\\n");
        else if (c == '"' || c == '\\') n += snprintf(text + n, (size_t)(cap - n), "\\%c", c);
        else if (c < 32) n += snprintf(text + n, (size_t)(cap - n), "\\x%02x", c);
        else text[n++] = (char)c;
    }
    text[n] = 0;
}

void trace_token(Trace *t, const Engine *en, Request *r, int token, double now) {
    char text[64];
    if (r->n_out == 1) {
        event(t, en);
        piece_text(r, text, sizeof text);
        say(t, now, "#%d first token %d \"%s\" (TTFT %.1f ms)", r->id, token, text,
            ms(r->tm.first_token - r->tm.arrival));
        char args[64];
        snprintf(args, sizeof args, "\"request\": %d, \"token\": %d", r->id, token);
        mark(t, r, "first token", 'f', now, args);
    } else if (t->level >= TRACE_VERBOSE) {
        piece_text(r, text, sizeof text);
        say(t, now, "#%d token %d \"%s\" at position %d", r->id, token, text, r->n_tokens - 1);
    }
    if (r->tr_phase == PH_PREFILL) enter(t, r, PH_DECODE, now);
}

void trace_forked(Trace *t, const Engine *en, const Request *first, Request *sample) {
    event(t, en);
    double now = sample->tm.first_scheduled;
    const KvSeq *q = &en->sched.seqs[sample->slot];
    say(t, now, "#%d forked from #%d into slot %d: shares its %d block%s (%d prompt tokens), no "
        "prefill of its own", sample->id, first->id, sample->slot, q->n_blocks,
        q->n_blocks == 1 ? "" : "s", q->n_tokens);
    if (t->json) {
        char args[96];
        snprintf(args, sizeof args, "\"request\": %d, \"from\": %d, \"shared_blocks\": %d",
                 sample->id, first->id, q->n_blocks);
        json_instant(t, "forked", sample->id + 1, now, args);
    }
    enter(t, sample, PH_PREFILL, now);   /* a prefill of no length: its prompt came with the fork */
}

void trace_finished(Trace *t, const Engine *en, Request *r) {
    event(t, en);
    const Telemetry *m = &r->tm;
    say(t, m->finished, "#%d finished (%s): %d tokens; queue %.1f ms, TTFT %.1f ms, TPOT %.2f ms, e2e "
        "%.1f ms; %d blocks released", r->id, rt_finish_name(r->finish), r->n_out, ms(m->queue_wait),
        m->ttft >= 0 ? ms(m->ttft) : 0.0, ms(m->tpot), ms(m->e2e), r->blocks_released);
    enter(t, r, PH_NONE, m->finished);
    if (t->json) {
        char args[400];
        snprintf(args, sizeof args, "\"request\": %d, \"reason\": \"%s\", \"output_tokens\": %d, "
                 "\"prompt_tokens\": %d, \"preemptions\": %d, \"prefix_hit_tokens\": %d, "
                 "\"queue_wait_ms\": %.6f, \"ttft_ms\": %.6f, \"tpot_ms\": %.6f, \"e2e_ms\": %.6f",
                 r->id, rt_finish_name(r->finish), r->n_out, r->n_prompt, r->n_preempted,
                 r->prefix_hit_tokens, ms(m->queue_wait), ms(m->ttft), ms(m->tpot), ms(m->e2e));
        json_instant(t, "finished", r->id + 1, m->finished, args);
    }
}

static void add_times(StageTimes *a, const StageTimes *b) {
    a->schedule += b->schedule;
    a->build += b->build;
    a->forward += b->forward;
    a->sample += b->sample;
    a->output += b->output;
}

static void json_step(Trace *t, const Engine *en, const SchedOutput *o, const StageTimes *st) {
    static const char *const stage[] = {"schedule", "build batch", "forward", "sample", "output"};
    const double d[] = {st->schedule, st->build, st->forward, st->sample, st->output};
    double t0 = en->step_started, end = t0;
    for (int i = 0; i < 5; i++) end += d[i];
    char name[32], args[200];
    snprintf(name, sizeof name, "step %ld", en->steps);
    snprintf(args, sizeof args, "\"seqs\": %d, \"prefill_tokens\": %d, \"decode_tokens\": %d, "
             "\"budget\": %d, \"preempted\": %d, \"admitted\": %d", o->n_items, o->n_prefill_tokens,
             o->n_decode_tokens, en->sched.cfg.token_budget, o->n_preempted, o->n_admitted);
    json_span(t, name, 1, 1, t0, end, args);
    for (int i = 0; i < 5; i++) {   /* nested inside the step: Perfetto draws them below it */
        json_span(t, stage[i], 1, 1, t0, t0 + d[i], NULL);
        t0 += d[i];
    }
    const KvPool *p = &en->pool;
    json_begin(t, "KV blocks", 'C', 1, 1, end);
    fprintf(t->json, ", \"args\": {\"held\": %d, \"cached\": %d, \"free\": %d}", kv_held_blocks(p),
            kv_cached_blocks(p), kv_free_blocks(p));
    json_end(t);
    json_begin(t, "requests", 'C', 1, 1, end);
    fprintf(t->json, ", \"args\": {\"running\": %d, \"waiting\": %d}", en->sched.n_running,
            en->sched.n_waiting + en->sched.n_preempted_queued);
    json_end(t);
}

void trace_step_done(Trace *t, const Engine *en, const SchedOutput *o, const StageTimes *st) {
    if (t->json) json_step(t, en, o, st);
    long step = en->steps;
    int plain = plain_step(o) && t->step_events == 0;
    t->step_events = 0;
    int map = t->text && ((t->level >= TRACE_VERBOSE) ||
                          (t->kv_map_every > 0 && step % t->kv_map_every == 0) ||
                          (t->level >= TRACE_ON && o->n_preempted > 0));
    if (t->level < TRACE_VERBOSE && plain && !map) {   /* add to the run of plain steps */
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
        t->run_end = ms(engine_now(en));
        if (t->run_last - t->run_first + 1 >= RUN_MAX) trace_flush(t, en);
        return;
    }
    trace_flush(t, en);
    if (!t->text) return;
    const KvPool *p = &en->pool;
    double total = st->schedule + st->build + st->forward + st->sample + st->output;
    say(t, engine_now(en), "step %ld: %d seq%s (%d prefill, %d decode tokens), %d of %d tokens; KV "
        "%d held, %d cached, %d free; %.2f ms: schedule %.3f, build %.3f, forward %.2f, sample %.3f, "
        "output %.3f", step, o->n_items, o->n_items == 1 ? "" : "s", o->n_prefill_tokens,
        o->n_decode_tokens, o->n_tokens, en->sched.cfg.token_budget, kv_held_blocks(p),
        kv_cached_blocks(p), kv_free_blocks(p), ms(total), ms(st->schedule), ms(st->build),
        ms(st->forward), ms(st->sample), ms(st->output));
    if (t->level >= TRACE_VERBOSE)
        for (int i = 0; i < en->sched.cfg.max_seqs; i++) {
            const Request *r = en->sched.running[i];
            if (!r) continue;
            const KvSeq *q = &en->sched.seqs[i];
            fprintf(t->text, "%15s#%d slot %d, %d tokens in blocks [", "", r->id, i, q->n_tokens);
            for (int b = 0; b < q->n_blocks; b++)
                fprintf(t->text, "%s%d%s", b ? " " : "", q->table[b],
                        p->refcount[q->table[b]] > 1 ? "*" : "");
            fprintf(t->text, "]\n");
        }
    if (map) trace_kv_map(t->text, en);
}

void trace_finish(Trace *t, const Engine *en) {
    trace_flush(t, en);
    if (t->json) {
        fprintf(t->json, "\n]}\n");
        fflush(t->json);
    }
}

/* ---- pictures ---- */

static char owner_char(int id) {
    static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    return digits[id % 62];
}

void trace_kv_map(FILE *f, const Engine *en) {
    const KvPool *p = &en->pool;
    /* who holds each block: scan the running sequences' tables */
    enum { PER_LINE = 64 };
    fprintf(f, "%15sKV pool, %d blocks of %d tokens ('.' free, '+' cached, id = held by that request, "
            "'*' shared):\n", "", p->NB, p->BS);
    char line[PER_LINE + 1];
    for (int b0 = 0; b0 < p->NB; b0 += PER_LINE) {
        int n = p->NB - b0 < PER_LINE ? p->NB - b0 : PER_LINE;
        for (int i = 0; i < n; i++) {
            int b = b0 + i;
            line[i] = p->refcount[b] > 1 ? '*' : p->refcount[b] == 1 ? '?' : p->registered[b] ? '+' : '.';
        }
        for (int s = 0; s < en->sched.cfg.max_seqs; s++) {
            const Request *r = en->sched.running[s];
            if (!r) continue;
            const KvSeq *q = &en->sched.seqs[s];
            for (int k = 0; k < q->n_blocks; k++) {
                int b = q->table[k];
                if (b >= b0 && b < b0 + n && line[b - b0] == '?') line[b - b0] = owner_char(r->id);
            }
        }
        line[n] = 0;
        fprintf(f, "%15s%5d %s\n", "", b0, line);
    }
}

int trace_write_svg(const Trace *t, const Engine *en, FILE *f) {
    int rows = t->max_req + 1;
    double end = 0;
    for (int i = 0; i < t->n_spans; i++)
        if (t->spans[i].t1 > end) end = t->spans[i].t1;
    if (end <= 0) end = 1e-3;
    const int left = 90, width = 900, row_h = 18, top = 40;
    int height = top + rows * row_h + 40;
    double scale = width / end;   /* pixels per second */
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "font-family=\"monospace\" font-size=\"11\">\n", left + width + 20, height);
    fprintf(f, "<title>requests over time: %d requests, %.1f ms</title>\n", rows, ms(end));
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"white\"/>\n", left + width + 20, height);
    /* legend */
    static const char *const colour[] = {"#ffffff", "#c8c8c8", "#f0a030", "#3070d0"};
    for (int ph = PH_QUEUED; ph <= PH_DECODE; ph++) {
        int x = left + (ph - 1) * 110;
        fprintf(f, "<rect x=\"%d\" y=\"10\" width=\"14\" height=\"10\" fill=\"%s\"/>"
                "<text x=\"%d\" y=\"19\">%s</text>\n", x, colour[ph], x + 18, PHASE_NAMES[ph]);
    }
    fprintf(f, "<text x=\"%d\" y=\"19\">| first token   &#9660; preempted</text>\n", left + 3 * 110);
    /* time axis: 10 ticks */
    for (int k = 0; k <= 10; k++) {
        double x = left + width * k / 10.0;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#eeeeee\"/>"
                "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.0f ms</text>\n",
                x, top - 4, x, top + rows * row_h, x, top + rows * row_h + 14, ms(end) * k / 10.0);
    }
    /* one row per request */
    for (int r = 0; r < rows; r++)
        fprintf(f, "<g class=\"request\" id=\"request-%d\"><text x=\"4\" y=\"%d\">#%d</text></g>\n", r,
                top + r * row_h + 13, r);
    for (int i = 0; i < t->n_spans; i++) {
        const TraceSpan *s = &t->spans[i];
        double x = left + s->t0 * scale, y = top + s->req * row_h + 2;
        if (s->phase >= PH_QUEUED && s->phase <= PH_DECODE) {
            double w = (s->t1 - s->t0) * scale;
            fprintf(f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" fill=\"%s\">"
                    "<title>#%d %s %.1f-%.1f ms</title></rect>\n", x, y, w < 0.5 ? 0.5 : w, row_h - 4,
                    colour[s->phase], s->req, PHASE_NAMES[s->phase], ms(s->t0), ms(s->t1));
        } else if (s->phase == 'f') {
            fprintf(f, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#109010\" "
                    "stroke-width=\"2\"/>\n", x, y - 1, x, y + row_h - 3);
        } else if (s->phase == 'p') {
            fprintf(f, "<path d=\"M %.2f %.1f l -4 -6 l 8 0 z\" fill=\"#d02020\"/>\n", x, y + 4);
        }
    }
    if (t->dropped)
        fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"#d02020\">%d spans did not fit the buffer and are "
                "missing</text>\n", left, height - 6, t->dropped);
    fprintf(f, "</svg>\n");
    return ferror(f) ? ST_IO : ST_OK;
}

/* Bytes of [p, p + n) resident in memory (mincore, page by page). */
static size_t resident_bytes(const void *p, size_t n) {
    if (!p || n == 0) return 0;
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)p & ~(uintptr_t)(page - 1);
    size_t len = (uintptr_t)p + n - start, pages = (len + page - 1) / page, resident = 0;
    unsigned char vec[4096];
    for (size_t i = 0; i < pages; i += sizeof vec) {
        size_t k = pages - i < sizeof vec ? pages - i : sizeof vec;
        if (mincore((void *)(start + i * page), k * page, vec)) return 0;
        for (size_t j = 0; j < k; j++) resident += vec[j] & 1;
    }
    return resident * page;
}

void trace_memory_report(FILE *f, const Engine *en, MemStats ready) {
    const Model *m = en->model;
    const void *map = m->gguf.map ? (const void *)m->gguf.map : m->map;
    size_t map_size = m->gguf.map ? m->gguf.size : m->map_size;
    MemStats now = mem_stats();
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const KvPool *p = &en->pool;
    size_t block_bytes = 2 * (size_t)p->L * p->BS * p->KVD * sizeof(float);
    fprintf(f, "memory: weights %.1f MB mapped, %.1f MB resident; KV pool %.1f MB (%d blocks of %.1f KB, "
            "peak %d held = %.1f MB); activations and scratch %.1f MB; heap peak %.1f MB; peak RSS "
            "%.1f MB; allocations after start-up: %zu inside engine steps, %zu outside them (requests, workload)\n",
            map_size / 1e6,
            resident_bytes(map, map_size) / 1e6, p->bytes / 1e6, p->NB, block_bytes / 1e3,
            p->peak_held, p->peak_held * (double)block_bytes / 1e6, en->exec.rs.bytes / 1e6,
            now.peak_bytes / 1e6, ru.ru_maxrss / 1e3, en->step_allocations,
            now.total_count - ready.total_count - en->step_allocations);
}
