/* soak.c - many mixed requests through the runtime, then every promise checked:
 * nothing lost, nothing served twice, nothing left behind.
 *
 *   soak [--model data/shakespeare.gguf] [--requests 10000] [--seed 1]
 *        [--kv-blocks 24] [--max-seqs 8] [--chunk 64] [--max-tokens 64]
 *        [--check-alone 50] [--rss-growth 5] [--threads N] [--corpus FILE]
 *
 * A server runs for days: a leak of one block per thousand requests, a
 * sample served twice after a preemption, a stop string that slips through
 * once in a while, do not show in a test of ten requests. This tool drives
 * the runtime API (runtime.h) the way a server would, on the step clock, with
 * a KV pool much smaller than the requests want, so that preemption, resumes
 * from the prefix cache, forks of samples and cancels all happen many times.
 *
 * The requests. Request i is a pure function of (--seed, i): a prompt of
 * 1-120 bytes cut from the corpus (one in 20 of 600-1000 bytes cut to at most
 * 240 tokens, so that some reach the model's context of 256), max_tokens 1..--max-tokens, n = 1 (in
 * 7 of 10) or 2-4 samples, greedy (4 in 10) or temperature 0.5-1.2 with
 * top-k and top-p, priority low, normal or high, and in 3 of 10 one or two
 * stop strings. Before each step 0-3 new requests arrive while fewer than
 * 2 x --max-seqs samples wait; now and then (1 step in 64) a running sample
 * is cancelled with rt_cancel. The engine: priority policy with aging,
 * --max-seqs running sequences, prefill in chunks of --chunk tokens,
 * --kv-blocks blocks of 16 tokens, Runtime.release_finished = 1 (each
 * request is freed once its on_finish has run).
 *
 * What is checked (each failure is one line; the exit status is 1 if any):
 *   1. every sample submitted finishes exactly once (on_finish), with a
 *      legal reason: n_out <= max_tokens; FIN_LENGTH means n_out ==
 *      max_tokens; FIN_CONTEXT means the sequence filled the context; FIN_EOS
 *      ends with the EOS token; FIN_CANCEL exactly for the samples cancelled;
 *      never FIN_ERROR;
 *   2. the streamed text (on_text) is the decoded output: all of it (the EOS
 *      token aside), except for FIN_STOP, where it stops right before a stop
 *      string; it never contains a stop string;
 *   3. greedy samples equal the same request run alone: a uniform random
 *      sample of --check-alone of them (reservoir sampling) is rerun, each in
 *      a fresh Runtime with the default, roomy pool, and must give the same
 *      tokens and finish reason;
 *   4. afterwards, idle, every KV block is back: none held, every refcount 0,
 *      kv_pool_check sound; and the engine's step loop allocated nothing;
 *   5. the heap (mem_stats().live_bytes: every allocation of the engine) is
 *      back to its level right after rt_init;
 *   6. the resident set (/proc/self/statm) at the end is within --rss-growth
 *      percent of what it was once the first 1,000 requests had finished
 *      (min(1000, requests / 3)); a negative value only reports it (under
 *      ASan, whose quarantine keeps freed memory resident).
 * Then the figures: requests, samples, finish reasons, preemptions, cancels,
 * tokens, steps, RSS, wall time. make soak runs it with 10,000 requests;
 * tests/soak.sh runs 300 under ASan. See notes/reliability.md. */
#include "runtime.h"
#include "bench_util.h"
#include "base/fileio.h"
#include "base/mem.h"
#include "model.h"
#include "kernels/ops.h"
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_SAMPLES 4        /* n of one request, at most */
#define PROMPT_MAX 1000      /* bytes of a prompt, NUL included */
#define LONG_PROMPT 240      /* tokens of a long prompt, at most (the context is 256) */
#define TEXT_CAP 8192        /* bytes of one sample's streamed text */
#define MAX_FAILURES 20      /* lines printed; the count goes on */

static const char *const STOPS[] = {"\n\n", "the", ",", ".", "ROMEO", "e ", "\n", "I", "and", "?"};
#define N_STOPS (int)(sizeof STOPS / sizeof STOPS[0])

typedef struct {
    const char *model, *corpus;
    int requests, kv_blocks, max_seqs, chunk, max_tokens, check_alone, threads;
    double rss_growth;
    uint64_t seed;
} Args;

/* A request, as generated. */
typedef struct {
    char prompt[PROMPT_MAX];
    RtParams p;
} Gen;

/* One sample, by id. */
typedef struct {
    int req;                 /* the request it belongs to */
    unsigned char finished;  /* on_finish calls */
    unsigned char cancelled; /* rt_cancel was called for it */
    short text;              /* its text buffer, -1 when it has none */
} Rec;

/* A greedy sample kept for the rerun. */
typedef struct {
    int req, n_out, finish;
    int *tokens;             /* (max_tokens) its output */
} Kept;

typedef struct {
    const Args *a;
    const Model *m;
    Runtime *rt;
    const char *corpus;
    size_t corpus_len;
    Rec *rec;                /* (requests * MAX_SAMPLES) by id */
    int *left;               /* (requests) samples of each request not yet finished */
    char *text;              /* (n_text, TEXT_CAP) streamed text of live samples */
    int *text_len;           /* (n_text) */
    int *free_text, n_free_text, n_text;
    int *live, n_live;       /* ids submitted and not finished */
    Kept *kept;              /* (check_alone) */
    int n_kept;
    long eligible;           /* greedy samples seen, for the reservoir */
    uint64_t rng;            /* the driver's own choices (arrivals, cancels) */
    uint64_t pick;           /* the reservoir's, apart: --check-alone does not change the run */
    /* figures */
    long samples, finished, requests_done, tokens, cancels, overflow;
    long by_reason[FIN_ERROR + 1];
    long failures;
} Soak;

/* ------------------------------------------------------------ helpers */

static uint64_t next(uint64_t *s) {   /* xorshift64* */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}
static int below(uint64_t *s, int n) { return (int)(next(s) % (uint64_t)n); }

__attribute__((format(printf, 2, 3)))
static void failure(Soak *s, const char *fmt, ...) {
    if (s->failures++ < MAX_FAILURES) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "soak: FAIL: ");
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\n");
        va_end(ap);
    } else if (s->failures == MAX_FAILURES + 1) {
        fprintf(stderr, "soak: (more failures; only the count is kept)\n");
    }
}

static double rss_mb(void) {
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    fclose(f);
    return (double)resident * (double)sysconf(_SC_PAGESIZE) / 1e6;
}

static int usable_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    return 1;
}

/* ------------------------------------------------------------ requests */

/* Request i, from (seed, i) alone: the same every time it is asked for. */
static void gen_request(const Soak *s, int i, Gen *g) {
    uint64_t r = (s->a->seed + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)i + 1) * 0xD1B54A32D192ED03ull;
    if (r == 0) r = 1;
    for (int k = 0; k < 4; k++) next(&r);
    int long_one = below(&r, 20) == 0;
    int len = long_one ? 600 + below(&r, PROMPT_MAX - 600) : 1 + below(&r, 120);
    size_t at = (size_t)below(&r, (int)(s->corpus_len - (size_t)len));
    memcpy(g->prompt, s->corpus + at, (size_t)len);
    g->prompt[len] = 0;
    if (long_one) {   /* cut to LONG_PROMPT tokens at most: near the context, never over it */
        static int ids[PROMPT_MAX + 8];
        int n = tok_encode(s->m->tok, g->prompt, 1, ids, PROMPT_MAX + 8, NULL);
        if (n > LONG_PROMPT) g->prompt[len = len * LONG_PROMPT / n] = 0;
        while (tok_encode(s->m->tok, g->prompt, 1, ids, PROMPT_MAX + 8, NULL) > LONG_PROMPT)
            g->prompt[len -= 4] = 0;
    }
    RtParams *p = &g->p;
    *p = rt_params_default();
    p->prompt = g->prompt;
    p->max_tokens = 1 + below(&r, s->a->max_tokens);
    p->n = below(&r, 10) < 7 ? 1 : 2 + below(&r, MAX_SAMPLES - 1);
    if (below(&r, 10) >= 4) {
        p->sampling.temperature = 0.5f + 0.7f * (float)below(&r, 1000) / 1000.0f;
        p->sampling.top_k = below(&r, 2) ? 40 : 0;
        p->sampling.top_p = below(&r, 2) ? 0.9f : 1.0f;
    }
    p->sampling.seed = (uint64_t)i;
    p->priority = (Priority)below(&r, 3);
    if (below(&r, 10) < 3) {
        int k = 1 + below(&r, 2);
        for (int j = 0; j < k; j++) p->stop[j] = STOPS[below(&r, N_STOPS)];
        if (k == 2 && p->stop[0] == p->stop[1]) p->stop[1] = NULL;
    }
}

static int has_stop(const RtParams *p, const char *text, int n) {
    for (int i = 0; i < RT_MAX_STOP && p->stop[i]; i++)
        if (memmem(text, (size_t)n, p->stop[i], strlen(p->stop[i]))) return 1;
    return 0;
}

static int starts_with_stop(const RtParams *p, const char *text, int n) {
    for (int i = 0; i < RT_MAX_STOP && p->stop[i]; i++) {
        int k = (int)strlen(p->stop[i]);
        if (k <= n && memcmp(text, p->stop[i], (size_t)k) == 0) return 1;
    }
    return 0;
}

/* ------------------------------------------------------------ callbacks */

static void on_text(int id, const char *text, int len, void *user) {
    Soak *s = user;
    Rec *r = &s->rec[id];
    if (len == 0 || r->text < 0) return;
    int *n = &s->text_len[r->text];
    if (*n + len >= TEXT_CAP) {   /* cannot be checked; counted */
        s->overflow++;
        s->free_text[s->n_free_text++] = r->text;
        r->text = -1;
        return;
    }
    memcpy(s->text + (size_t)r->text * TEXT_CAP + *n, text, (size_t)len);
    *n += len;
}

/* The decoded output: the prompt primes the decoder (as the runtime does),
 * then every output token but a final EOS, then the flush. */
static int decode_output(const Soak *s, const Sequence *q, char *out, int cap) {
    const Tokenizer *t = s->m->tok;
    TokDecoder d;
    char piece[TOK_MAX_PIECE];
    tok_decoder_init(&d);
    for (int i = 0; i < q->n_prompt; i++) tok_decode(t, &d, q->tokens[i], piece);
    int w = 0, end = q->n_tokens;
    if (q->finish == FIN_EOS) end--;
    for (int i = q->n_prompt; i <= end; i++) {
        int k = i < end ? tok_decode(t, &d, q->tokens[i], piece) : tok_decode_flush(&d, piece);
        if (w + k >= cap) return -1;
        memcpy(out + w, piece, (size_t)k);
        w += k;
    }
    out[w] = 0;
    return w;
}

static void check_finish(Soak *s, int id, const Sequence *q, const Gen *g) {
    const RtParams *p = &g->p;
    int P = s->m->cfg.seq_len;
    const char *why = rt_finish_name(q->finish);
    if (q->n_out > p->max_tokens) failure(s, "#%d: %d tokens out, max_tokens %d", id, q->n_out, p->max_tokens);
    switch (q->finish) {
    case FIN_LENGTH:
        if (q->n_out != p->max_tokens) failure(s, "#%d: length after %d of %d tokens", id, q->n_out, p->max_tokens);
        break;
    case FIN_CONTEXT:
        if (q->n_tokens != P + 1 || q->n_out >= p->max_tokens)
            failure(s, "#%d: context with %d tokens (context %d), %d of %d out", id, q->n_tokens, P,
                    q->n_out, p->max_tokens);
        break;
    case FIN_EOS:
        if (q->n_out < 1 || !tok_is_eog(s->m->tok, q->tokens[q->n_tokens - 1]))
            failure(s, "#%d: eos without an end-of-generation token", id);
        break;
    case FIN_STOP:
        if (!p->stop[0]) failure(s, "#%d: stop without stop strings", id);
        break;
    case FIN_CANCEL:
        break;
    default:
        failure(s, "#%d: finish reason %s", id, why);
    }
    if ((q->finish == FIN_CANCEL) != (s->rec[id].cancelled != 0))
        failure(s, "#%d: finished %s, %scancelled", id, why, s->rec[id].cancelled ? "" : "not ");

    Rec *r = &s->rec[id];
    if (r->text < 0) return;   /* overflowed: counted */
    const char *streamed = s->text + (size_t)r->text * TEXT_CAP;
    int n = s->text_len[r->text];
    static char decoded[TEXT_CAP];
    int m = decode_output(s, q, decoded, TEXT_CAP);
    if (m < 0) return;
    if (has_stop(p, streamed, n)) failure(s, "#%d: the streamed text contains a stop string", id);
    if (q->finish == FIN_STOP) {
        if (n > m || memcmp(streamed, decoded, (size_t)n) != 0 || !starts_with_stop(p, decoded + n, m - n))
            failure(s, "#%d: stop: the streamed text (%d bytes) is not the output (%d bytes) cut "
                    "right before a stop string", id, n, m);
    } else if (n != m || memcmp(streamed, decoded, (size_t)n) != 0) {
        failure(s, "#%d: %s: the streamed text (%d bytes) differs from the decoded output (%d bytes)",
                id, why, n, m);
    }
}

/* Reservoir sampling (Vitter's algorithm R): after k eligible samples,
 * each is kept with probability check_alone / k. */
static void keep_greedy(Soak *s, const Sequence *q, int req) {
    int K = s->a->check_alone;
    if (K <= 0) return;
    long k = s->eligible++;
    int slot = k < K ? (int)k : (int)(next(&s->pick) % (uint64_t)(k + 1));
    if (slot >= K) return;
    if (slot == s->n_kept) s->n_kept++;
    Kept *kp = &s->kept[slot];
    kp->req = req;
    kp->n_out = q->n_out;
    kp->finish = q->finish;
    memcpy(kp->tokens, q->tokens + q->n_prompt, (size_t)q->n_out * sizeof(int));
}

static void on_finish(int id, const Sequence *q, const Telemetry *t, const char *error, void *user) {
    Soak *s = user;
    Rec *r = &s->rec[id];
    if (r->finished++) {
        failure(s, "#%d finished a second time (%s)", id, rt_finish_name(q->finish));
        return;
    }
    Gen g;
    gen_request(s, r->req, &g);
    check_finish(s, id, q, &g);
    if (error) failure(s, "#%d: %s", id, error);
    s->finished++;
    s->tokens += q->n_out;
    if (q->finish >= FIN_NONE && q->finish <= FIN_ERROR) s->by_reason[q->finish]++;
    if (g.p.sampling.temperature == 0.0f && q->finish != FIN_CANCEL) keep_greedy(s, q, r->req);
    if (--s->left[r->req] == 0) s->requests_done++;
    if (r->text >= 0) s->free_text[s->n_free_text++] = r->text;
    r->text = -1;
    for (int i = 0; i < s->n_live; i++)
        if (s->live[i] == id) {
            s->live[i] = s->live[--s->n_live];
            break;
        }
}

/* ------------------------------------------------------------ the run */

static int submit(Soak *s, int i) {
    Gen g;
    gen_request(s, i, &g);
    g.p.on_text = on_text;
    g.p.on_finish = on_finish;
    g.p.user = s;
    if (s->n_free_text < g.p.n || s->n_live + g.p.n > s->n_text) return 0;   /* wait for room */
    Err e;
    int id = rt_submit(s->rt, &g.p, &e);
    if (id < 0) {
        failure(s, "request %d refused: %s", i, e.msg);
        return 1;
    }
    s->left[i] = g.p.n;
    for (int k = 0; k < g.p.n; k++) {
        Rec *r = &s->rec[id + k];
        r->req = i;
        r->text = (short)s->free_text[--s->n_free_text];
        s->text_len[r->text] = 0;
        s->live[s->n_live++] = id + k;
    }
    s->samples += g.p.n;
    return 1;
}

/* Cancel a running sample, if there is one (a random one). */
static void cancel_one(Soak *s) {
    int running[64], n = 0;
    for (int i = 0; i < s->n_live && n < 64; i++) {
        const Sequence *q = rt_sequence(s->rt, s->live[i]);
        if (q && q->state == SEQ_RUNNING) running[n++] = s->live[i];
    }
    if (n == 0) return;
    int id = running[below(&s->rng, n)];
    s->rec[id].cancelled = 1;
    Err e;
    if (rt_cancel(s->rt, id, &e) != ST_OK) failure(s, "cancelling #%d: %s", id, e.msg);
    else s->cancels++;
    if (!s->rec[id].finished) failure(s, "#%d cancelled but not finished", id);
}

/* Rerun a kept greedy sample alone, in a fresh runtime with the default pool. */
static int rerun_alone(Soak *s, const Kept *k) {
    EngineConfig cfg = engine_config_default();
    cfg.clock = CLOCK_STEPS;
    Runtime rt;
    Err e;
    if (rt_init(&rt, s->m, &cfg, &e)) {
        failure(s, "rerun: %s", e.msg);
        return 0;
    }
    Gen g;
    gen_request(s, k->req, &g);
    g.p.n = 1;
    int id = rt_submit(&rt, &g.p, &e), same = 0;
    if (id < 0 || rt_run(&rt, &e) != ST_OK) {
        failure(s, "rerun of request %d: %s", k->req, e.msg);
    } else {
        const Sequence *q = rt_sequence(&rt, id);
        same = q->n_out == k->n_out && (int)q->finish == k->finish &&
               memcmp(q->tokens + q->n_prompt, k->tokens, (size_t)k->n_out * sizeof(int)) == 0;
        if (!same) {
            int at = 0;
            while (at < q->n_out && at < k->n_out && q->tokens[q->n_prompt + at] == k->tokens[at]) at++;
            failure(s, "request %d (greedy) alone: %d tokens, %s; in the soak: %d tokens, %s; first "
                    "difference at output token %d", k->req, q->n_out, rt_finish_name(q->finish), k->n_out,
                    rt_finish_name((FinishReason)k->finish), at);
        }
    }
    rt_free(&rt);
    return same;
}

static int run(const Args *a, const Model *m, const char *corpus, size_t corpus_len) {
    double t0 = clock_seconds();
    EngineConfig cfg = engine_config_default();
    cfg.clock = CLOCK_STEPS;
    cfg.n_blocks = a->kv_blocks;
    cfg.sched.policy = SCHED_PRIORITY;
    cfg.sched.max_seqs = a->max_seqs;
    cfg.sched.chunk = a->chunk;
    Runtime rt;
    Err e;
    if (rt_init(&rt, m, &cfg, &e)) {
        fprintf(stderr, "soak: %s\n", e.msg);
        return 1;
    }
    rt.release_finished = 1;
    size_t heap0 = mem_stats().live_bytes;

    /* Every buffer of the driver, allocated and touched now, before the RSS
     * is first read. */
    Soak s = {.a = a, .m = m, .rt = &rt, .corpus = corpus, .corpus_len = corpus_len,
              .rng = a->seed * 0x2545F4914F6CDD1Dull + 1, .pick = a->seed * 0x9E3779B97F4A7C15ull + 7};
    size_t ids = (size_t)a->requests * MAX_SAMPLES;
    /* Live samples: at most max_seqs running and fewer than 2 max_seqs waiting
     * (then arrivals pause), each request with up to MAX_SAMPLES; with room
     * to spare. A submission waits when buffers run short. */
    s.n_text = MAX_SAMPLES * (3 * a->max_seqs + 4) + 64;
    s.rec = calloc(ids, sizeof *s.rec);
    s.left = calloc((size_t)a->requests, sizeof *s.left);
    s.text = calloc((size_t)s.n_text, TEXT_CAP);
    s.text_len = calloc((size_t)s.n_text, sizeof *s.text_len);
    s.free_text = calloc((size_t)s.n_text, sizeof *s.free_text);
    s.live = calloc((size_t)s.n_text, sizeof *s.live);
    s.kept = calloc((size_t)(a->check_alone > 0 ? a->check_alone : 1), sizeof *s.kept);
    if (!s.rec || !s.left || !s.text || !s.text_len || !s.free_text || !s.live || !s.kept) {
        fprintf(stderr, "soak: out of memory\n");
        return 1;
    }
    for (int i = 0; i < a->check_alone; i++) s.kept[i].tokens = calloc((size_t)a->max_tokens, sizeof(int));
    memset(s.rec, 0, ids * sizeof *s.rec);
    memset(s.text, 0, (size_t)s.n_text * TEXT_CAP);
    for (size_t i = 0; i < ids; i++) s.rec[i].text = -1;
    for (int i = 0; i < s.n_text; i++) s.free_text[s.n_free_text++] = s.n_text - 1 - i;

    int warm = a->requests / 3 < 1000 ? a->requests / 3 : 1000;
    double rss_warm = 0, t_warm = 0;
    int submitted = 0;
    long stuck = 0;
    while (submitted < a->requests || !rt_idle(&rt)) {
        int arrivals = below(&s.rng, 4);
        for (int k = 0; k < arrivals && submitted < a->requests; k++) {
            if (rt_stats(&rt).engine.sched.waiting >= 2 * a->max_seqs) break;
            if (!submit(&s, submitted)) break;
            submitted++;
        }
        if (below(&s.rng, 64) == 0) cancel_one(&s);
        if (rt_idle(&rt)) continue;
        const StepReport *rep = rt_step(&rt);
        if (rep->plan->n_items == 0 && rt_stats(&rt).engine.sched.running == 0 && rep->plan->n_preempted == 0) {
            if (++stuck > 1000) {
                failure(&s, "the engine schedules nothing while %d samples wait", rt_stats(&rt).engine.sched.waiting);
                break;
            }
        } else {
            stuck = 0;
        }
        if (!rss_warm && s.requests_done >= warm) {
            rss_warm = rss_mb();
            t_warm = clock_seconds() - t0;
        }
    }
    double wall = clock_seconds() - t0;
    double rss_end = rss_mb();

    /* nothing lost */
    long never = 0;
    for (int i = 0; i < a->requests; i++) never += s.left[i];
    if (s.finished != s.samples || never)
        failure(&s, "%ld samples submitted, %ld finished (%ld never)", s.samples, s.finished, never);
    /* nothing held */
    EngineStats es = rt_stats(&rt).engine;
    int held = es.kv.held, sound = rt_check(&rt, &e) == ST_OK;
    if (held) failure(&s, "%d KV blocks still held after the run", held);
    if (!sound) failure(&s, "the KV pool's check: %s", e.msg);
    if (es.step_allocations) failure(&s, "the step loop allocated %zu times", es.step_allocations);
    size_t heap1 = mem_stats().live_bytes;
    if (heap1 != heap0) failure(&s, "heap: %zu bytes live after init, %zu at the end", heap0, heap1);
    double growth = rss_warm > 0 ? 100.0 * (rss_end - rss_warm) / rss_warm : 0;
    if (a->rss_growth >= 0 && growth > a->rss_growth)
        failure(&s, "RSS grew %.1f%% from %.1f MB to %.1f MB (limit %.1f%%)", growth, rss_warm, rss_end,
                a->rss_growth);

    char cpu[128];
    cpu_name(cpu, sizeof cpu);
    printf("soak: %d requests (%ld samples) in %ld steps of the step clock, %.1f s wall on %s, %d thread%s\n",
           a->requests, s.samples, es.steps, wall, cpu, ops_threads(), ops_threads() == 1 ? "" : "s");
    printf("  engine: KV pool of %d blocks of %d tokens, max_seqs %d, chunk %d, priority policy\n",
           es.kv.n_blocks, es.kv.block_size, a->max_seqs, a->chunk);
    printf("  finishes: length %ld, eos %ld, stop %ld, cancel %ld, context %ld, error %ld\n",
           s.by_reason[FIN_LENGTH], s.by_reason[FIN_EOS], s.by_reason[FIN_STOP], s.by_reason[FIN_CANCEL],
           s.by_reason[FIN_CONTEXT], s.by_reason[FIN_ERROR]);
    printf("  %ld tokens out (%.1f per step), %ld preemptions, %ld cancels, %ld prefix-cache hit tokens, "
           "%ld copy-on-write blocks\n", s.tokens, (double)s.tokens / (double)(es.steps ? es.steps : 1),
           es.sched.preemptions, s.cancels, es.kv.hits_tokens, es.kv.cow_copies);
    printf("  after the run: %d blocks held, pool check %s, %zu allocations in steps\n", held,
           sound ? "sound" : "FAILED", es.step_allocations);
    printf("  heap: %zu bytes live after init, %zu at the end\n", heap0, heap1);
    char limit[32];
    snprintf(limit, sizeof limit, a->rss_growth >= 0 ? "%g%%" : "none: reported only", a->rss_growth);
    printf("  RSS: %.1f MB after %d requests (%.1f s), %.1f MB at the end: %+.2f%% (limit %s)\n", rss_warm,
           warm, t_warm, rss_end, growth, limit);
    if (s.overflow) printf("  %ld samples' text longer than %d bytes: not compared\n", s.overflow, TEXT_CAP);
    rt_free(&rt);

    int same = 0;
    for (int i = 0; i < s.n_kept; i++) same += rerun_alone(&s, &s.kept[i]);
    printf("  greedy: %d of %ld greedy samples rerun alone in a fresh runtime: %d identical\n", s.n_kept,
           s.eligible, same);

    for (int i = 0; i < a->check_alone; i++) free(s.kept[i].tokens);
    free(s.kept);
    free(s.rec);
    free(s.left);
    free(s.text);
    free(s.text_len);
    free(s.free_text);
    free(s.live);
    printf("soak: %s (%ld failure%s)\n", s.failures ? "FAILED" : "OK", s.failures, s.failures == 1 ? "" : "s");
    return s.failures ? 1 : 0;
}

/* ------------------------------------------------------------ main */

static void usage(FILE *f) {
    fprintf(f,
            "usage: soak [--model data/shakespeare.gguf] [--requests 10000] [--seed 1]\n"
            "            [--kv-blocks 24] [--max-seqs 8] [--chunk 64] [--max-tokens 64]\n"
            "            [--check-alone 50] [--rss-growth 5] [--threads N] [--corpus FILE]\n"
            "Mixed requests through the runtime (priorities, samples, stop strings, cancels,\n"
            "arrivals over time) with a small KV pool; then checks that every sample finished\n"
            "once with a legal reason and its text, that greedy samples equal a run alone, and\n"
            "that blocks, heap and RSS are back. --rss-growth < 0 reports RSS without a limit.\n"
            "--corpus default: $CORPUS_DIR/tinyshakespeare.txt, else ../shared/corpus/.\n");
}

static int parse_args(int argc, char **argv, Args *a, Err *e) {
    static char corpus[4096];
    const char *dir = getenv("CORPUS_DIR");
    snprintf(corpus, sizeof corpus, "%s/tinyshakespeare.txt", dir && *dir ? dir : "../shared/corpus");
    *a = (Args){.model = "data/shakespeare.gguf", .corpus = corpus, .requests = 10000, .kv_blocks = 24,
                .max_seqs = 8, .chunk = 64, .max_tokens = 64, .check_alone = 50, .threads = usable_cores(),
                .rss_growth = 5, .seed = 1};
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            usage(stdout);
            exit(0);
        }
        static const char *const known[] = {"--model", "--requests", "--seed", "--kv-blocks", "--max-seqs",
                                            "--chunk", "--max-tokens", "--check-alone", "--rss-growth",
                                            "--threads", "--corpus"};
        int k = 0;
        while (k < (int)(sizeof known / sizeof known[0]) && strcmp(f, known[k])) k++;
        if (k == (int)(sizeof known / sizeof known[0])) return err_set(e, ST_ARG, "unknown option %s", f);
        if (i + 1 >= argc) return err_set(e, ST_ARG, "%s needs a value", f);
        const char *v = argv[++i];
        int st = ST_OK, seed;
        if (k == 0) a->model = v;
        else if (k == 1) st = parse_int(f, v, 1, 10000000, &a->requests, e);
        else if (k == 2) {
            st = parse_int(f, v, 0, 1 << 30, &seed, e);
            a->seed = (uint64_t)seed;
        } else if (k == 3) st = parse_int(f, v, 1, 1 << 20, &a->kv_blocks, e);
        else if (k == 4) st = parse_int(f, v, 1, 256, &a->max_seqs, e);
        else if (k == 5) st = parse_int(f, v, 0, 1 << 20, &a->chunk, e);
        else if (k == 6) st = parse_int(f, v, 1, 4096, &a->max_tokens, e);
        else if (k == 7) st = parse_int(f, v, 0, 100000, &a->check_alone, e);
        else if (k == 8) {
            char *end;
            a->rss_growth = strtod(v, &end);
            if (end == v || *end) st = err_set(e, ST_ARG, "%s wants a number, got '%s'", f, v);
        } else if (k == 9) st = parse_int(f, v, 1, 1024, &a->threads, e);
        else a->corpus = v;
        if (st) return st;
    }
    return ST_OK;
}

int main(int argc, char **argv) {
    Args a;
    Err e = {{0}};
    if (parse_args(argc, argv, &a, &e)) {
        fprintf(stderr, "soak: %s\n", e.msg);
        return 2;
    }
    ops_set_threads(a.threads);
    Model m;
    if (model_load(&m, a.model, NULL, &e)) {
        fprintf(stderr, "soak: %s\n", e.msg);
        return 1;
    }
    unsigned char *corpus;
    size_t n;
    if (fio_slurp(a.corpus, &corpus, &n, &e)) {
        fprintf(stderr, "soak: %s\n", e.msg);
        model_free(&m);
        return 1;
    }
    int rc = 1;
    if (n < 400) fprintf(stderr, "soak: %s: %zu bytes is too short a corpus\n", a.corpus, n);
    else if (memchr(corpus, 0, n)) fprintf(stderr, "soak: %s: the corpus holds a NUL byte\n", a.corpus);
    else rc = run(&a, &m, (const char *)corpus, n);
    mem_free(corpus);
    model_free(&m);
    return rc;
}
