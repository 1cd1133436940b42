/* trace.c - the engine, told four ways: text for reading, JSON for Perfetto,
 * SVG for a glance, and a page to replay the run (written by page.c, which
 * every hook below tells what it was told).
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
 * The trace is told everything it prints (see trace.h): ids, counts, times,
 * and the text of the KV map drawn by the engine that owns the pool. What it
 * must remember between events, each live request's phase and arrival time,
 * it keeps in a small table of its own, grown when a request arrives (never
 * inside a step) and shrunk when it finishes. */
#include "trace/trace.h"
#include "base/mem.h"
#include "trace/trace_internal.h"
#include <assert.h>
#include <stdarg.h>
#include <string.h>

enum { RUN_MAX = 32 };
static void json_name(Trace *t, const char *what, int pid, int tid, const char *name);
static const char *const PHASE_NAMES[] = {"none", "queued", "prefill", "decode"};

int trace_init(Trace *t, int level, FILE *text, FILE *json, int svg_spans, int virtual_clock,
               Err *e) {
    *t = (Trace){.level = level, .text = level > TRACE_OFF ? text : NULL, .json = json,
                 .max_req = -1, .virtual_clock = virtual_clock};
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
    page_free(t->page);
    t->page = NULL;
    mem_free(t->spans);
    mem_free(t->reqs);
    t->spans = NULL;
    t->reqs = NULL;
    t->cap_spans = t->n_spans = 0;
    t->cap_reqs = t->n_reqs = 0;
}

static double ms(double s) { return s * 1e3; }

/* ---- the table of live requests ---- */

static TraceReq *find(Trace *t, int id) {
    for (int i = t->n_reqs - 1; i >= 0; i--)
        if (t->reqs[i].id == id) return &t->reqs[i];
    return NULL;
}

/* A request the trace was never told about (it arrived before the trace was
 * attached) is treated as having arrived at time 0. */
static TraceReq *req(Trace *t, int id) {
    static TraceReq unknown;
    TraceReq *r = find(t, id);
    if (r) return r;
    unknown = (TraceReq){.id = id, .phase = PH_NONE};
    return &unknown;
}

static void forget(Trace *t, int id) {
    TraceReq *r = find(t, id);
    if (r) *r = t->reqs[--t->n_reqs];
}

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

static void record(Trace *t, int id, int phase, double t0, double t1, int prompt, int cached) {
    if (!t->spans) return;
    if (t->n_spans == t->cap_spans) {
        t->dropped++;
        return;
    }
    t->spans[t->n_spans++] = (TraceSpan){id, phase, t0, t1, prompt, cached};
}

static void enter(Trace *t, TraceReq *r, int phase, double now) {
    if (r->phase != PH_NONE) {
        if (t->json) {
            char args[64];
            snprintf(args, sizeof args, "\"request\": %d", r->id);
            json_span(t, PHASE_NAMES[r->phase], 2, r->id + 1, r->since, now, args);
        }
        record(t, r->id, r->phase, r->since, now, r->prompt, r->phase == PH_PREFILL ? r->cached : 0);
    }
    r->phase = phase;
    r->since = now;
}

static void mark(Trace *t, int id, const char *name, int kind, double now, const char *args) {
    if (t->json) json_instant(t, name, id + 1, now, args);
    if (kind) record(t, id, kind, now, now, 0, 0);
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

/* "; 1.23 ms: schedule 0.001, build ..." for n steps, or nothing on the
 * step clock (the times are real, the clock is not). */
static void stage_times(const Trace *t, char *buf, size_t cap, const double *st, const double *codec,
                        long n) {
    buf[0] = 0;
    if (t->virtual_clock) return;
    double total = 0;
    for (int i = 0; i < TRACE_STAGES; i++) total += st[i];
    int k = snprintf(buf, cap, "; %.2f ms%s: schedule %.3f, build %.3f, forward %.2f, sample %.3f, output %.3f",
                     ms(total) / n, n > 1 ? "/step" : "", ms(st[0]) / n, ms(st[1]) / n, ms(st[2]) / n,
                     ms(st[3]) / n, ms(st[4]) / n);
    if (codec[0] > 0 && k > 0 && (size_t)k < cap)   /* --low-mem */
        snprintf(buf + k, cap - (size_t)k, "; weights decoded %.2f ms, forward waited %.2f of them",
                 ms(codec[0]) / n, ms(codec[1]) / n);
}

void trace_flush(Trace *t) {
    if (t->run_first == 0) return;
    long n = t->run_last - t->run_first + 1;
    char seqs[32], times[240];
    if (t->run_seqs_min == t->run_seqs_max)
        snprintf(seqs, sizeof seqs, "%d seq%s", t->run_seqs_min, t->run_seqs_min == 1 ? "" : "s");
    else
        snprintf(seqs, sizeof seqs, "%d-%d seqs", t->run_seqs_min, t->run_seqs_max);
    stage_times(t, times, sizeof times, t->run_time, t->run_codec, n);
    char spec[80] = "";
    if (t->run_guesses > 0)
        snprintf(spec, sizeof spec, " (%ld guessed, %ld accepted)", t->run_guesses, t->run_accepted);
    say(t, t->run_end, "steps %ld-%ld: decode only, %s, %ld tokens%s%s", t->run_first, t->run_last,
        seqs, t->run_tokens, spec, times);
    t->run_first = 0;
}

/* Every event but a plain step ends the pending run first, so lines stay in time order. */
static void event(Trace *t) {
    trace_flush(t);
    t->step_events++;
}

void trace_note(Trace *t, double now, const char *fmt, ...) {
    if (!t->text && !t->page) return;
    event(t);
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    say(t, now, "%s", line);
    if (t->page) page_note(t->page, now, line);
}

/* What the text trace draws after a step; the page wants more (below). */
static int text_wants_kv_map(const Trace *t, long step, int n_preempted) {
    return t->text && (t->level >= TRACE_VERBOSE || (t->kv_map_every > 0 && step % t->kv_map_every == 0) ||
                       (t->level >= TRACE_ON && n_preempted > 0));
}

static int text_wants_block_tables(const Trace *t) { return t->text && t->level >= TRACE_VERBOSE; }

int trace_wants_kv_map(const Trace *t, long step, int n_preempted) {
    return t->page || text_wants_kv_map(t, step, n_preempted);
}

int trace_wants_block_tables(const Trace *t) { return t->page || text_wants_block_tables(t); }

/* ---- hooks ---- */

int trace_arrived(Trace *t, double now, const TraceArrival *a) {
    if (t->n_reqs == t->cap_reqs) {
        int cap = t->cap_reqs ? 2 * t->cap_reqs : 64;
        TraceReq *grown = mem_alloc((size_t)cap * sizeof *grown);
        if (!grown) return ST_NOMEM;
        if (t->n_reqs) memcpy(grown, t->reqs, (size_t)t->n_reqs * sizeof *grown);
        mem_free(t->reqs);
        t->reqs = grown;
        t->cap_reqs = cap;
    }
    TraceReq *r = &t->reqs[t->n_reqs++];
    *r = (TraceReq){.id = a->id, .phase = PH_NONE, .arrival = now, .prompt = a->prompt_tokens};
    event(t);
    if (a->id > t->max_req) t->max_req = a->id;
    say(t, now, "#%d arrived: %d prompt tokens, priority %s, max %d new, temperature %g, top-k %d, "
        "top-p %g, seed %llu; %d waiting", a->id, a->prompt_tokens, a->priority, a->max_tokens,
        a->temperature, a->top_k, a->top_p, a->seed, a->waiting);
    if (t->json) {
        char name[48], args[160];
        snprintf(name, sizeof name, "#%d %s", a->id, a->priority);
        json_name(t, "thread_name", 2, a->id + 1, name);
        snprintf(args, sizeof args, "\"request\": %d, \"prompt_tokens\": %d, \"max_tokens\": %d, "
                 "\"priority\": \"%s\"", a->id, a->prompt_tokens, a->max_tokens, a->priority);
        json_instant(t, "arrived", a->id + 1, now, args);
    }
    enter(t, r, PH_QUEUED, now);
    if (t->page) page_arrived(t->page, now, a);
    return ST_OK;
}

void trace_preempted(Trace *t, double now, long step, int id, int blocks_freed, int tokens) {
    event(t);
    say(t, now, "#%d preempted: the pool ran out and it ranked lowest of the requests still to "
        "run this step; %d blocks freed, %d tokens to recompute when it resumes", id, blocks_freed,
        tokens);
    char args[160];
    snprintf(args, sizeof args, "\"request\": %d, \"blocks_freed\": %d, \"tokens\": %d, \"step\": %ld",
             id, blocks_freed, tokens, step);
    enter(t, req(t, id), PH_QUEUED, now);
    mark(t, id, "preempted", 'p', now, args);
    if (t->page) page_preempted(t->page, now, id, blocks_freed, tokens);
}

void trace_spec(Trace *t, double now, long step, int id, int guessed, int accepted) {
    if (t->level >= TRACE_VERBOSE) {   /* a line per sequence and step: verbose only */
        event(t);
        say(t, now, "#%d guessed %d token%s after its own: %d accepted, %d rewound", id, guessed,
            guessed == 1 ? "" : "s", accepted, guessed - accepted);
    }
    char args[128];
    snprintf(args, sizeof args, "\"request\": %d, \"step\": %ld, \"guessed\": %d, \"accepted\": %d", id,
             step, guessed, accepted);
    mark(t, id, "speculated", 0, now, args);
}

void trace_cow(Trace *t, double now, long step, int id, int position, int block_size) {
    event(t);
    say(t, now, "#%d copy-on-write: position %d falls in a block it shared with other samples "
        "of its prompt; that block was copied (%d rows) before the write", id, position,
        position % block_size);
    char args[96];
    snprintf(args, sizeof args, "\"request\": %d, \"position\": %d, \"step\": %ld", id, position, step);
    mark(t, id, "copy-on-write", 0, now, args);
    if (t->page) page_cow(t->page, now, id, position, position % block_size);
}

void trace_admitted(Trace *t, double now, long step, int id, int slot, int hit_tokens,
                    int n_preempted) {
    event(t);
    TraceReq *r = req(t, id);
    r->cached = hit_tokens;
    char hit[64] = "", args[128];
    if (hit_tokens > 0) snprintf(hit, sizeof hit, "; prefix cache hit: %d tokens reused", hit_tokens);
    if (n_preempted > 0) {
        say(t, now, "#%d resumed in slot %d after preemption %d%s", id, slot, n_preempted, hit);
        snprintf(args, sizeof args, "\"request\": %d, \"prefix_hit_tokens\": %d, \"step\": %ld", id,
                 hit_tokens, step);
        mark(t, id, "resumed", 0, now, args);
    } else {
        say(t, now, "#%d admitted to slot %d after %.1f ms in the queue%s", id, slot,
            ms(now - r->arrival), hit);
        if (hit_tokens > 0) {
            snprintf(args, sizeof args, "\"request\": %d, \"prefix_hit_tokens\": %d", id, hit_tokens);
            mark(t, id, "prefix hit", 0, now, args);
        }
    }
    enter(t, r, PH_PREFILL, now);
    if (t->page) page_admitted(t->page, now, id, slot, hit_tokens, n_preempted);
}

void trace_item(Trace *t, double now, int id, int from, int n, int sample) {
    if (req(t, id)->phase == PH_PREFILL)   /* (a resumed request's recompute is a prefill too) */
        say(t, now, "#%d prefill [%d, %d)%s", id, from, from + n, sample ? "" : " (a chunk: more to come)");
    else if (t->level >= TRACE_VERBOSE)
        say(t, now, "#%d decode at position %d", id, from);
    if (t->page) page_item(t->page, id, from, n, sample);
}

/* The text of a token, escaped and cut short if long. */
static void piece_text(const char *piece, int len, char *text, int cap) {
    int n = 0;
    for (int i = 0; i < len && n < cap - 8; i++) {
        unsigned char c = (unsigned char)piece[i];
        if (c == '\n') n += snprintf(text + n, (size_t)(cap - n), "\\n");
        else if (c == '"' || c == '\\') n += snprintf(text + n, (size_t)(cap - n), "\\%c", c);
        else if (c < 32) n += snprintf(text + n, (size_t)(cap - n), "\\x%02x", c);
        else text[n++] = (char)c;
    }
    text[n] = 0;
}

void trace_forked(Trace *t, double now, int id, int from_id, int slot, int blocks, int tokens) {
    event(t);
    say(t, now, "#%d forked from #%d into slot %d: shares its %d block%s (%d prompt tokens), no "
        "prefill of its own", id, from_id, slot, blocks, blocks == 1 ? "" : "s", tokens);
    if (t->json) {
        char args[96];
        snprintf(args, sizeof args, "\"request\": %d, \"from\": %d, \"shared_blocks\": %d", id,
                 from_id, blocks);
        json_instant(t, "forked", id + 1, now, args);
    }
    enter(t, req(t, id), PH_PREFILL, now);   /* a prefill of no length: its prompt came with the fork */
    if (t->page) page_forked(t->page, now, id, from_id, slot, blocks, tokens);
}

void trace_token(Trace *t, double now, int id, int token, const char *piece, int len, int n_out,
                 int position) {
    TraceReq *r = req(t, id);
    char text[64];
    if (n_out == 1) {
        event(t);
        piece_text(piece, len, text, sizeof text);
        say(t, now, "#%d first token %d \"%s\" (TTFT %.1f ms)", id, token, text, ms(now - r->arrival));
        char args[64];
        snprintf(args, sizeof args, "\"request\": %d, \"token\": %d", id, token);
        mark(t, id, "first token", 'f', now, args);
    } else if (t->level >= TRACE_VERBOSE) {
        piece_text(piece, len, text, sizeof text);
        say(t, now, "#%d token %d \"%s\" at position %d", id, token, text, position);
    }
    if (r->phase == PH_PREFILL) enter(t, r, PH_DECODE, now);
    if (t->page) page_token(t->page, id, token, piece, len, n_out, position);
}

void trace_finished(Trace *t, double now, const TraceFinish *f) {
    event(t);
    say(t, now, "#%d finished (%s): %d tokens; queue %.1f ms, TTFT %.1f ms, TPOT %.2f ms, e2e "
        "%.1f ms; %d blocks released", f->id, f->reason, f->output_tokens, ms(f->queue_wait),
        f->ttft >= 0 ? ms(f->ttft) : 0.0, ms(f->tpot), ms(f->e2e), f->blocks_released);
    enter(t, req(t, f->id), PH_NONE, now);
    if (t->json) {
        char args[400];
        snprintf(args, sizeof args, "\"request\": %d, \"reason\": \"%s\", \"output_tokens\": %d, "
                 "\"prompt_tokens\": %d, \"preemptions\": %d, \"prefix_hit_tokens\": %d, "
                 "\"queue_wait_ms\": %.6f, \"ttft_ms\": %.6f, \"tpot_ms\": %.6f, \"e2e_ms\": %.6f",
                 f->id, f->reason, f->output_tokens, f->prompt_tokens, f->preemptions,
                 f->prefix_hit_tokens, ms(f->queue_wait), ms(f->ttft), ms(f->tpot), ms(f->e2e));
        json_instant(t, "finished", f->id + 1, now, args);
    }
    forget(t, f->id);
    if (t->page) page_finished(t->page, now, f);
}

static void json_step(Trace *t, const TraceStep *s) {
    static const char *const stage[] = {"schedule", "build batch", "forward", "sample", "output"};
    char name[32], args[200];
    snprintf(name, sizeof name, "step %ld", s->step);
    int k = snprintf(args, sizeof args, "\"seqs\": %d, \"prefill_tokens\": %d, \"decode_tokens\": %d, "
             "\"budget\": %d, \"preempted\": %d, \"admitted\": %d", s->seqs, s->prefill_tokens,
             s->decode_tokens, s->budget, s->preempted, s->admitted);
    if (s->guesses > 0)
        snprintf(args + k, sizeof args - (size_t)k, ", \"guessed\": %d, \"accepted\": %d", s->guesses,
                 s->accepted);
    json_span(t, name, 1, 1, s->start, s->end, args);
    if (!t->virtual_clock) {   /* nested inside the step: Perfetto draws them below it */
        double t0 = s->start;
        for (int i = 0; i < TRACE_STAGES; i++) {
            json_span(t, stage[i], 1, 1, t0, t0 + s->stage[i], NULL);
            t0 += s->stage[i];
        }
    }
    json_begin(t, "KV blocks", 'C', 1, 1, s->end);
    fprintf(t->json, ", \"args\": {\"held\": %d, \"cached\": %d, \"free\": %d}", s->kv_held,
            s->kv_cached, s->kv_free);
    json_end(t);
    json_begin(t, "requests", 'C', 1, 1, s->end);
    fprintf(t->json, ", \"args\": {\"running\": %d, \"waiting\": %d}", s->running, s->waiting);
    json_end(t);
}

static int plain_step(const TraceStep *s) {
    return s->preempted == 0 && s->admitted == 0 && s->prefill_tokens == 0 && s->cow == 0;
}

void trace_step_done(Trace *t, const TraceStep *s) {
    if (t->json) json_step(t, s);
    if (t->page) page_step(t->page, s, t->virtual_clock);
    /* the pictures the text asked for (a page asks for them at every step) */
    const char *kv_map = text_wants_kv_map(t, s->step, s->preempted) ? s->kv_map : NULL;
    const char *tables = text_wants_block_tables(t) ? s->block_tables : NULL;
    int plain = plain_step(s) && t->step_events == 0;
    t->step_events = 0;
    if (t->level < TRACE_VERBOSE && plain && !kv_map) {   /* add to the run of plain steps */
        if (t->run_first == 0) {
            t->run_first = s->step;
            t->run_tokens = t->run_guesses = t->run_accepted = 0;
            t->run_seqs_min = t->run_seqs_max = s->seqs;
            memset(t->run_time, 0, sizeof t->run_time);
            memset(t->run_codec, 0, sizeof t->run_codec);
        }
        t->run_last = s->step;
        t->run_tokens += s->tokens;
        t->run_guesses += s->guesses;
        t->run_accepted += s->accepted;
        if (s->seqs < t->run_seqs_min) t->run_seqs_min = s->seqs;
        if (s->seqs > t->run_seqs_max) t->run_seqs_max = s->seqs;
        for (int i = 0; i < TRACE_STAGES; i++) t->run_time[i] += s->stage[i];
        t->run_codec[0] += s->decode;
        t->run_codec[1] += s->decode_wait;
        t->run_end = s->end;
        if (t->run_last - t->run_first + 1 >= RUN_MAX) trace_flush(t);
        return;
    }
    trace_flush(t);
    if (!t->text) return;
    char times[240];
    double codec[2] = {s->decode, s->decode_wait};
    stage_times(t, times, sizeof times, s->stage, codec, 1);
    char spec[160] = "";
    if (s->guesses > 0 || s->spec_off > 0) {
        int n = snprintf(spec, sizeof spec, "; guessed %d, accepted %d, %d rewind%s (%d block%s back)",
                         s->guesses, s->accepted, s->rewinds, s->rewinds == 1 ? "" : "s",
                         s->rewound_blocks, s->rewound_blocks == 1 ? "" : "s");
        if (s->spec_off > 0)
            snprintf(spec + n, sizeof spec - (size_t)n, ", %d guess%s left out: the step was full",
                     s->spec_off, s->spec_off == 1 ? "" : "es");
    }
    say(t, s->end, "step %ld: %d seq%s (%d prefill, %d decode tokens), %d of %d tokens%s; KV "
        "%d held, %d cached, %d free%s", s->step, s->seqs, s->seqs == 1 ? "" : "s", s->prefill_tokens,
        s->decode_tokens, s->tokens, s->budget, spec, s->kv_held, s->kv_cached, s->kv_free, times);
    if (tables) fputs(tables, t->text);
    if (kv_map) fputs(kv_map, t->text);
}

void trace_finish(Trace *t) {
    trace_flush(t);
    if (t->json) {
        fprintf(t->json, "\n]}\n");
        fflush(t->json);
    }
}

/* ---- the KV pool drawn (told as plain data, kv_view.h) ---- */

static char owner_char(int id) {
    static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    return digits[id % 62];
}

/* Append to buf[*n .. cap), keeping it terminated. */
static void put(char *buf, int cap, int *n, const char *s, int len) {
    if (*n + len > cap - 1) len = cap - 1 - *n;
    if (len <= 0) return;
    memcpy(buf + *n, s, (size_t)len);
    *n += len;
    buf[*n] = 0;
}

/* exercises/kv_map/ hollows this function: built with -DEXERCISE_KV_MAP,
 * the file that macro names stands in its place (tools/exercise.sh). */
#ifdef EXERCISE_KV_MAP
#include EXERCISE_KV_MAP
#else
int trace_kv_map(const KvView *v, char *buf, int cap) {
    enum { PER_LINE = 64 };
    char line[PER_LINE + 32];
    int n = 0;
    if (cap > 0) buf[0] = 0;
    int k = snprintf(line, sizeof line, "%15sKV pool, %d blocks of %d tokens", "", v->n_blocks, v->block_size);
    put(buf, cap, &n, line, k);
    const char *legend = " ('.' free, '+' cached, id = held by that request, '*' shared):\n";
    put(buf, cap, &n, legend, (int)strlen(legend));
    for (int b0 = 0; b0 < v->n_blocks; b0 += PER_LINE) {
        int w = v->n_blocks - b0 < PER_LINE ? v->n_blocks - b0 : PER_LINE;
        char row[PER_LINE];
        for (int i = 0; i < w; i++) {
            int b = b0 + i;
            row[i] = v->refcount[b] > 1 ? '*' : v->refcount[b] == 1 ? '?' : v->registered[b] ? '+' : '.';
        }
        for (int s = 0; s < v->n_seqs; s++) {   /* who holds each block */
            const KvViewSeq *q = &v->seqs[s];
            for (int j = 0; j < q->n_blocks; j++) {
                int b = q->table[j];
                if (b >= b0 && b < b0 + w && row[b - b0] == '?') row[b - b0] = owner_char(q->id);
            }
        }
        k = snprintf(line, sizeof line, "%15s%5d %.*s\n", "", b0, w, row);
        put(buf, cap, &n, line, k);
    }
    return n;
}
#endif

int trace_block_tables(const KvView *v, char *buf, int cap) {
    int n = 0;
    if (cap > 0) buf[0] = 0;
    for (int s = 0; s < v->n_seqs; s++) {
        const KvViewSeq *q = &v->seqs[s];
        char item[32];
        int k = snprintf(item, sizeof item, "%15s#%d slot %d, ", "", q->id, q->slot);
        put(buf, cap, &n, item, k);
        k = snprintf(item, sizeof item, "%d tokens in blocks [", q->n_tokens);
        put(buf, cap, &n, item, k);
        for (int j = 0; j < q->n_blocks; j++) {
            int b = q->table[j];
            k = snprintf(item, sizeof item, "%s%d%s", j ? " " : "", b, v->refcount[b] > 1 ? "*" : "");
            put(buf, cap, &n, item, k);
        }
        put(buf, cap, &n, "]\n", 2);
    }
    return n;
}

/* ---- pictures ---- */

#define CACHED_COLOUR "#60b060"

int trace_write_svg(const Trace *t, FILE *f) {
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
    fprintf(f, "<rect x=\"%d\" y=\"10\" width=\"14\" height=\"10\" fill=\"%s\"/>"
            "<text x=\"%d\" y=\"19\">prompt from the prefix cache</text>\n", left + 3 * 110, CACHED_COLOUR,
            left + 3 * 110 + 18);
    fprintf(f, "<text x=\"%d\" y=\"19\">| first token   &#9660; preempted</text>\n", left + 3 * 110 + 220);
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
        if (s->phase == PH_PREFILL && s->cached > 0 && s->prompt > 0) {
            /* the prefix cache's share of the prompt drawn apart, in green:
             * those tokens were not computed, whatever the bar's length */
            double w = (s->t1 - s->t0) * scale, h = row_h - 4, hc = h * s->cached / s->prompt;
            fprintf(f, "<g><title>#%d prefill %.1f-%.1f ms: %d of %d prompt tokens from the prefix cache, "
                    "%d computed</title><rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" "
                    "fill=\"%s\"/><rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"/></g>\n",
                    s->req, ms(s->t0), ms(s->t1), s->cached, s->prompt, s->prompt - s->cached, x, y,
                    w < 0.5 ? 0.5 : w, hc, CACHED_COLOUR, x, y + hc, w < 0.5 ? 0.5 : w, h - hc, colour[s->phase]);
        } else if (s->phase >= PH_QUEUED && s->phase <= PH_DECODE) {
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

/* Append to buf[*n .. cap) like snprintf, counting what it needed past cap. */
static void addf(char *buf, int cap, int *n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void addf(char *buf, int cap, int *n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(*n < cap ? buf + *n : NULL, *n < cap ? (size_t)(cap - *n) : 0, fmt, ap);
    va_end(ap);
    if (k > 0) *n += k;
}

int trace_memory_text(const Trace *t, const TraceMemory *m, char *buf, int cap) {
    int n = 0;
    if (cap > 0) buf[0] = 0;
    char resident[48] = "", rss[40] = "";
    if (!t->virtual_clock) {   /* what the machine and its load decide */
        snprintf(resident, sizeof resident, ", %.1f MB resident", m->weights_resident / 1e6);
        snprintf(rss, sizeof rss, "; peak RSS %.1f MB", m->peak_rss_kb / 1e3);
    }
    addf(buf, cap, &n, "memory: weights %.1f MB mapped%s; KV pool %.1f MB (%d blocks of %.1f KB, peak %d "
         "held = %.1f MB); activations and scratch %.1f MB; heap peak %.1f MB%s; allocations "
         "after start-up: %zu inside engine steps, %zu outside them (requests, workload)\n",
         m->weights_mapped / 1e6, resident, m->kv_bytes / 1e6, m->kv_blocks,
         m->kv_block_bytes / 1e3, m->kv_peak_held, m->kv_peak_held * (double)m->kv_block_bytes / 1e6,
         m->activations / 1e6, m->heap_peak / 1e6, rss, m->allocs_in_steps, m->allocs_outside);
    if (m->weights_rows8 && !t->virtual_clock)   /* the CPU's path decides it */
        addf(buf, cap, &n, "weights: %.1f MB of Q4_0, Q4_K, Q6_K and Q8_0 matrices copied in eights at load for the AVX2 tiles "
             "(in huge pages where the system gives them; their pages of the mapping given back)\n", m->weights_rows8 / 1e6);
    if (m->weights_copied && !t->virtual_clock)
        addf(buf, cap, &n, "weights: %.1f MB of matrices copied at load (LLM_COPY=1; in huge pages where the system "
             "gives them; their pages of the mapping given back)\n", m->weights_copied / 1e6);
    if (!m->weights_coded) return n;
    /* a compressed model: what is held coded, what decoded, and what decoding cost */
    addf(buf, cap, &n, "codec: %.1f MB of coded matrices in the file; ", m->weights_coded / 1e6);
    if (!m->low_mem) {
        if (m->fast_tier == 2)
            addf(buf, cap, &n, "--low-mem, the fast tier (BF16E): built on the GPU from the file's rANS planes, "
                 "and kept there");
        else if (m->fast_tier)
            addf(buf, cap, &n, "--low-mem, the fast tier (BF16E): rewritten at load into %.1f MB, read as it is",
                 m->weights_decoded / 1e6);
        else addf(buf, cap, &n, "decoded at load into %.1f MB", m->weights_decoded / 1e6);
        if (!t->virtual_clock) addf(buf, cap, &n, " in %.3f s", m->decode_load_s);
        addf(buf, cap, &n, "\n");
        return n;
    }
    addf(buf, cap, &n, "--low-mem: kept coded, decoded a layer at a time into two buffers of %.1f MB; %ld "
         "units decoded", m->weights_decoded / 2e6, m->decodes);
    if (!t->virtual_clock && m->decodes)
        addf(buf, cap, &n, ", %.2f ms each (%.2f-%.2f), %.3f s in all, the forward pass waited %.3f s of it; peak "
             "resident weights %.1f MB (the resident file and both buffers)", 1e3 * m->decode_s / m->decodes,
             1e3 * m->decode_min_s, 1e3 * m->decode_max_s, m->decode_s, m->decode_wait_s,
             (m->weights_resident + m->weights_decoded) / 1e6);
    addf(buf, cap, &n, "\n");
    return n;
}

void trace_memory_report(const Trace *t, FILE *f, const TraceMemory *m) {
    char text[1024];
    int n = trace_memory_text(t, m, text, sizeof text);
    assert(n < (int)sizeof text);   /* two lines of bounded fields */
    (void)n;
    fputs(text, f);
}
