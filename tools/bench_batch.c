/* bench_batch.c - batched decode through the serving engine: throughput as
 * concurrency grows, and how much of the paged KV cache is wasted.
 *
 *   bench_batch [--threads 2] [--concurrency 1,4,16,64] [--prompt 32] [--decode 32]
 *               [--block 16] [--runs 1] [--low-mem 0|1|2] [--kv 0|1] [--ceilings 0|1]
 *               [--device cpu|cuda] MODEL.gguf ...
 *
 * Single-stream decode (tools/bench.c) reads every weight for one token, so
 * it is bound by memory bandwidth. A batched decode step reads them once for N
 * sequences: the step costs more than a single-stream one, but far less than N
 * of them. This benchmark measures that through the whole engine (runtime,
 * scheduler, paged KV cache, executor, step loop), as a server would run it.
 *
 * For each model, thread count and concurrency N in --concurrency, one engine:
 * max_seqs = N, token_budget = max(256, N), chunk 0 (the budget), FCFS,
 * --block tokens per KV block, and a pool of N * ceil((prompt + max_tokens) /
 * block) + 4 blocks, so nothing is ever preempted. N requests are submitted at
 * once, each a different prompt of --prompt tokens, greedy, ignore_eos.
 *
 *   prompt tok      the prompts' token counts, BOS included (a range when they
 *                   differ). The text is cut so that the model's own
 *                   tokenizer gives exactly --prompt; with mkmodel's files
 *                   (one character per token) it always does.
 *   prefill s       the wall time of the steps from the first until every
 *                   request has sampled its first token, with their count in
 *                   brackets. The scheduler mixes decode tokens of the requests
 *                   already through their prompt into these steps (chunked
 *                   prefill), so this phase is not pure prefill.
 *   steps           then --decode steps are timed, each of which must run
 *                   exactly N decode tokens and no prefill (checked: a step
 *                   that does not ends the phase, and steps shows fewer). So
 *                   that no request can finish inside it, max_tokens is
 *                   --decode plus a headroom of ceil(N * prompt / (budget - N))
 *                   + 2 (a bound on the tokens a request can decode during the
 *                   prefill phase); the requests are dropped unfinished after.
 *   decode tok/s    N * steps / the wall time of those steps (each rt_step
 *                   call timed on its own; nothing else is inside the timer)
 *   per seq tok/s   decode tok/s / N: the rate each request sees
 *   ms/step         the mean wall time of one decode step
 *   speed-up        decode tok/s over that of N = 1 (same model, same threads;
 *                   "-" if 1 is not in --concurrency). Target: >= 8x at N = 16.
 *   stage %         the step's StageTimes (Runtime.last) over the timed steps,
 *                   summed, as shares of their summed wall time: schedule
 *                   (sched_step), build (flattening the batch), forward (the
 *                   model), sample, output (engine: append, finish; runtime:
 *                   decode text, stream, stop checks). What is left to 100% is
 *                   rt_step's own overhead.
 *   limit tok/s     the most a step of N tokens allows on this machine: N over
 *                   the longer of two times, the weights' bytes that every
 *                   step reads (bench.c's bytes per token) at the best read
 *                   and the step's matmul operations (2 N per weight of the
 *                   layers and the classifier, every sequence needing its
 *                   logits) at the peak of the instruction its products run
 *                   on (FMA for the float types, int8 for the quantized ones:
 *                   VNNI, AVX2's vpmaddubsw, AMX where the engine's AMX
 *                   tiles take them). Which of the three binds is named.
 *                   The read and the peaks are tools/ceilings.h's, measured
 *                   at the start by a child process (its 1 GiB buffer stays
 *                   out of this process's peak RSS), with the CPU kind
 *                   (cpuid vendor, family, model); both again by it
 *                   right after each row, the row taking the best of all
 *                   their measurements so far. Attention, norms and
 *                   sampling are left out, so nothing passes the limit,
 *                   except weights that fit in the last-level cache (marked
 *                   *: they are read faster than memory). "-" with
 *                   --ceilings 0, on a GPU, and for the rANS tier of
 *                   --low-mem 2, whose limit is its decoding.
 *   % of limit      decode tok/s over it.
 *
 * With --runs R > 1 each row is run R times and the run with the median decode
 * time is reported, all its figures together. Before the first row of each
 * model and thread count, a warm-up (one short request, 2 tokens generated, on
 * an engine of its own) touches every weight so the mapping is resident.
 *
 * KV waste. The pool hands out whole blocks; the rows of a block past a
 * sequence's last token are held but unused (internal fragmentation).
 *
 *   held rows       kv_held_blocks * block (blocks with refcount >= 1)
 *   used rows       rows written in held blocks, a block shared by several
 *                   sequences counted once: a block at table index i of a
 *                   sequence with n_tokens K/V rows has min(block, n_tokens -
 *                   i * block) rows filled; the most over its holders counts
 *   waste %         1 - used / held. Target: < 4% at block 16.
 *   mean waste %    waste % averaged over the timed decode steps (measured
 *                   after each, outside the timer): the two instants above
 *                   can fall just after many sequences opened a new block
 *   empty blocks    held blocks with no row written: 0 means every wasted row
 *                   is in the unfilled tail of a sequence's last block, which
 *                   no allocator of blocks of this size can avoid
 *   common prefix   tokens that every prompt shares with the first one
 *   logical tok     the sum over the sequences of n_tokens: the rows needed
 *                   without sharing
 *   saved %         1 - used / logical: what sharing blocks saves
 *   prefix hits     the sum of Sequence.prefix_hit_tokens: prompt tokens found
 *                   in the prefix cache instead of being computed
 *
 * p/d: at the end of the prefill phase / after the last timed decode step
 * (every request still running). Two workloads:
 *   distinct        the N different prompts above, submitted together
 *   shared prefix   N prompts whose first 3/4 is the same text (a "system
 *                   prompt"), then different. One is submitted first and
 *                   stepped until its prompt is in the cache (its full blocks
 *                   registered), then the other N - 1, which find the shared
 *                   full blocks there. Only whole blocks are shared (and the
 *                   last prompt token is always computed), so with a 32-token
 *                   prompt and blocks of 16 one block is shared.
 * Waste depends only on the token counts, the block size and the scheduler,
 * not on the weights or the thread count, and every mkmodel file has the same
 * tokenizer, so it is measured once, on the smallest model file given (the
 * cheapest to run), with the first thread count, for every N of --concurrency
 * and for 16 and 64. A prompt of a multiple of --block tokens fills its blocks
 * exactly, so waste at the end of the prefill phase then comes only from the
 * tokens some requests already decoded in it.
 *
 * The closing lines give 16 requests against one and the KV waste. A peer's figures are never
 * printed here: measured on another machine they would not compare;
 * tools/bench_llamacpp.sh runs llama.cpp on the same files, on this machine,
 * in the same run. Units: MB = 1e6 bytes. */
#include "runtime.h"
#include "bench_util.h"
#include "ceilings.h"
#include <errno.h>
#include <math.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include "base/clock.h"
#include "base/err.h"
#include "base/mem.h"
#include "model.h"
#include "kernels/gpu.h"
#include "kernels/ops.h"
#include <cblas.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREAD_COUNTS 8
#define MAX_CONC 16
#define MAX_RUNS 15
#define MAX_N 1024
#define POOL_SPARE 4          /* blocks beyond what the requests can need */
#define PROMPT_TEXT_CAP 8192  /* bytes of one prompt's text */

typedef struct {
    int threads[MAX_THREAD_COUNTS];
    int n_threads;
    int conc[MAX_CONC];
    int n_conc;
    int prompt, decode, block, runs;
    int kv;               /* --kv 0: no KV-waste table (its runs take longer than the rest) */
    int ceilings;         /* --ceilings 0: no limit column (its measurement takes about 5 s a thread count) */
    int low_mem;          /* --low-mem 1: compressed models stay compressed (model.h), on the
                             fast tier where it fits; 2: on the rANS tier, a layer at a time */
    int device;           /* --device cuda: the forward pass on the GPU (model.h) */
    char **models;
    int n_models;
} Args;

/* ------------------------------------------------------------ ceilings */

#define BW_BYTES ((size_t)1 << 30)   /* the read's buffer: far beyond any cache */

/* What bounds a step at one thread count (ceilings.h): the best of the read
 * loops, and the peaks of FMA, int8 (VNNI, or AVX2's vpmaddubsw) and AMX
 * (0 where the CPU lacks it). */
typedef struct {
    double read_gbs, fma_gflops, int8_gops, amx_gops;
    int read_loop;
    uint64_t sink;   /* the loops' sums, so that none is optimized away */
} Ceilings;

/* The ceilings are measured by a child process, forked before this one has
 * started any thread (a child forked after OpenMP's threads exist may
 * hang), which keeps its 1 GiB buffer out of this process's peak RSS (the
 * tables print it) and waits to read it again on request: a virtual
 * machine's bandwidth drifts by 10% between minutes, so the read and the
 * peaks are measured again right after each row, and the row's limit takes
 * the best of all their measurements so far (a ceiling is the most the
 * machine has given). */
typedef struct {
    pid_t pid;
    int fd;   /* a socket to it; requests: a thread count's index (its read and peaks again), -1 - index (all) */
} Meter;

static int meter_serve(const Args *a, int fd) {
    uint8_t *buf = malloc(BW_BYTES);
    if (!buf) return 1;
    mem_advise_huge(buf, BW_BYTES);   /* in pages like the weights' copies (model.h) */
    memset(buf, 1, BW_BYTES);   /* every page written: untouched ones all map the zero page */
    Ceilings c[MAX_THREAD_COUNTS];
    memset(c, 0, sizeof c);
    int ask;
    while (read(fd, &ask, sizeof ask) == (ssize_t)sizeof ask) {
        int i = ask < 0 ? -1 - ask : ask;
        if (i >= a->n_threads) return 1;
        Ceilings *o = &c[i];
        if (ask < 0) {
            double each[CEIL_READS];
            o->read_gbs = ceil_read_best(buf, BW_BYTES, a->threads[i], &o->read_loop, each, &o->sink);
            o->fma_gflops = ceil_peak(0, a->threads[i], &o->sink);
            o->int8_gops = ceil_peak(1, a->threads[i], &o->sink);
            o->amx_gops = ceil_peak(2, a->threads[i], &o->sink);
        } else {
            /* each again, the best so far kept: a core lent elsewhere
             * while one was measured would understate it */
            o->read_gbs = fmax(o->read_gbs, ceil_read_gbs(o->read_loop, buf, BW_BYTES, a->threads[i], &o->sink));
            o->fma_gflops = fmax(o->fma_gflops, ceil_peak(0, a->threads[i], &o->sink));
            o->int8_gops = fmax(o->int8_gops, ceil_peak(1, a->threads[i], &o->sink));
            o->amx_gops = fmax(o->amx_gops, ceil_peak(2, a->threads[i], &o->sink));
        }
        if (write(fd, o, sizeof *o) != (ssize_t)sizeof *o) return 1;
    }
    return 0;
}

static int meter_start(const Args *a, Meter *mt, Err *e) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return err_set(e, ST_IO, "ceilings: socketpair: %s", strerror(errno));
    fflush(stdout);
    mt->pid = fork();
    if (mt->pid < 0) {
        close(sv[0]), close(sv[1]);
        return err_set(e, ST_IO, "ceilings: fork: %s", strerror(errno));
    }
    if (mt->pid == 0) {
        close(sv[0]);
        _exit(meter_serve(a, sv[1]));
    }
    close(sv[1]);
    mt->fd = sv[0];
    return ST_OK;
}

/* Ask for ask (see Meter) and take the answer into c. */
static int meter_ask(const Meter *mt, int ask, Ceilings *c, Err *e) {
    size_t got = 0;
    /* MSG_NOSIGNAL: a measuring process that has stopped is an error here, not a SIGPIPE */
    if (send(mt->fd, &ask, sizeof ask, MSG_NOSIGNAL) == (ssize_t)sizeof ask)
        while (got < sizeof *c) {
            ssize_t r = read(mt->fd, (char *)c + got, sizeof *c - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            got += (size_t)r;
        }
    if (got != sizeof *c)
        return err_set(e, ST_NOMEM, "ceilings: the measuring process stopped (no memory for its %zu-byte buffer?)",
                       BW_BYTES);
    return ST_OK;
}

static void meter_stop(Meter *mt) {
    close(mt->fd);
    int status;
    while (waitpid(mt->pid, &status, 0) < 0 && errno == EINTR) {}
}

static void print_ceilings(const Args *a, const Ceilings *c) {
    int avx2 = !ceil_has_avx512() && ceil_has_avx2();
    char kind[96];
    cpu_kind(kind, sizeof kind);
    printf("ceilings of this %s (tools/ceilings.h, at the start; each row's limit takes the best of "
           "these and of the same measured again after each row so far):", kind);
    for (int i = 0; i < a->n_threads; i++) {
        printf("%s %d thread%s: best read %.1f GB/s (%s), FMA %.1f GFLOP/s, %s %.1f GOP/s", i ? ";" : "",
               a->threads[i], a->threads[i] > 1 ? "s" : "", c[i].read_gbs, CEIL_READ_NAMES[c[i].read_loop],
               c[i].fma_gflops, avx2 ? "int8 (vpmaddubsw)" : "int8 (VNNI)", c[i].int8_gops);
        if (c[i].amx_gops > 0) printf(", AMX %.1f GOP/s", c[i].amx_gops);
    }
    printf("\nlimit tok/s = N / the longer of (the weights' bytes a step reads / best read) and (the "
           "step's matmul operations, 2 N per weight, / the peak of the instruction its products run on); "
           "attention, norms and sampling not counted, so no engine can pass it\n\n");
}

/* ------------------------------------------------------------- timing */

/* ------------------------------------------------------------ prompts */

static const char *WORDS[] = {
    "the", "king", "river", "night", "stone", "light", "horse", "garden", "winter", "sea",
    "bright", "old", "quiet", "storm", "field", "crown", "letter", "fire", "road", "tower",
    "silver", "wind", "cloud", "bread", "mountain", "song", "door", "forest", "glass", "morning",
    "shadow", "island", "iron", "candle", "bird", "market", "ship", "valley", "bell", "harbor",
};
#define N_WORDS (int)(sizeof WORDS / sizeof WORDS[0])

static uint64_t xorshift(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Tokens of text (BOS included), or a negative Status. */
static int count_tokens(const Tokenizer *t, const char *text, int *ids, int cap) {
    Err e = {{0}};
    return tok_encode(t, text, 1, ids, cap, &e);
}

/* Fill buf with head followed by pseudo-random words (seeded), then cut it at
 * the longest length whose tokenization (BOS included) has at most target
 * tokens, never inside head. Returns the token count obtained: target, unless
 * the tokenizer makes it impossible (head alone longer, say). ids gets them. */
static int build_prompt(const Tokenizer *t, const char *head, uint64_t seed, int target, char *buf,
                        int *ids, int ids_cap) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    if (s == 0) s = 1;
    size_t n = (size_t)snprintf(buf, PROMPT_TEXT_CAP, "%s", head);
    size_t head_len = n < PROMPT_TEXT_CAP ? n : PROMPT_TEXT_CAP - 1;
    n = head_len;
    /* Grow until the text has more than target tokens (or the buffer is full). */
    while (n + 16 < PROMPT_TEXT_CAP) {
        const char *w = WORDS[xorshift(&s) % N_WORDS];
        n += (size_t)snprintf(buf + n, PROMPT_TEXT_CAP - n, "%s%s", n ? " " : "", w);
        int c = count_tokens(t, buf, ids, ids_cap);
        if (c < 0 || c > target) break;
    }
    /* Longest cut in [head_len, n] with at most target tokens (binary search:
     * the count grows with the length, give or take a merge). */
    size_t lo = head_len, hi = n;
    char keep = buf[lo];
    buf[lo] = 0;
    int c_lo = count_tokens(t, buf, ids, ids_cap);
    buf[lo] = keep;
    if (c_lo >= target || c_lo < 0) {
        buf[lo] = 0;
        return count_tokens(t, buf, ids, ids_cap);
    }
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        keep = buf[mid];
        buf[mid] = 0;
        int c = count_tokens(t, buf, ids, ids_cap);
        buf[mid] = keep;
        if (c >= 0 && c <= target)
            lo = mid;
        else
            hi = mid;
    }
    buf[hi] = 0;   /* try the full candidate, else the safe one */
    int c = count_tokens(t, buf, ids, ids_cap);
    if (c < 0 || c > target) {
        buf[lo] = 0;
        c = count_tokens(t, buf, ids, ids_cap);
    }
    return c;
}

/* The prompts of one workload. */
typedef struct {
    char (*text)[PROMPT_TEXT_CAP];   /* (n) */
    int *len;                        /* (n) tokens, BOS included */
    int n;
    int common;                      /* tokens every prompt shares with the first */
} Prompts;

static void prompts_free(Prompts *p) {
    mem_free(p->text);
    mem_free(p->len);
    memset(p, 0, sizeof *p);
}

/* n prompts of `target` tokens: all different from the first words on, or
 * (shared) the same system prompt of 3/4 of them, then different. */
static int make_prompts(const Tokenizer *t, int n, int target, int shared, Prompts *p, Err *e) {
    memset(p, 0, sizeof *p);
    p->text = mem_alloc((size_t)n * sizeof *p->text);
    p->len = mem_alloc((size_t)n * sizeof *p->len);
    int cap = PROMPT_TEXT_CAP + 2;
    int *ids = mem_alloc((size_t)cap * sizeof(int)), *first = mem_alloc((size_t)cap * sizeof(int));
    char *system = mem_alloc(PROMPT_TEXT_CAP), *head = mem_alloc(PROMPT_TEXT_CAP);
    if (!p->text || !p->len || !ids || !first || !system || !head) {
        prompts_free(p);
        mem_free(ids);
        mem_free(first);
        mem_free(system);
        mem_free(head);
        return err_set(e, ST_NOMEM, "out of memory for %d prompts", n);
    }
    p->n = n;
    if (shared)
        build_prompt(t, "system:", 12345, target * 3 / 4, system, ids, cap);
    int n_first = 0;
    for (int i = 0; i < n; i++) {
        if (shared)
            snprintf(head, PROMPT_TEXT_CAP, "%s\n%d:", system, i);
        else {   /* different from the first character: Aa, Ba, ..., Zz, Aab, ... */
            char third[2] = {i >= 676 ? (char)('a' + i / 676 % 26) : 0, 0};
            snprintf(head, PROMPT_TEXT_CAP, "%c%c%s:", 'A' + i % 26, 'a' + i / 26 % 26, third);
        }
        p->len[i] = build_prompt(t, head, (uint64_t)i + 1, target, p->text[i], ids, cap);
        if (i == 0) {
            memcpy(first, ids, (size_t)(p->len[0] > 0 ? p->len[0] : 0) * sizeof(int));
            n_first = p->common = p->len[0];
        }
        int k = 0;
        while (k < p->len[i] && k < n_first && ids[k] == first[k]) k++;
        if (i > 0 && k < p->common) p->common = k;
    }
    mem_free(ids);
    mem_free(first);
    mem_free(system);
    mem_free(head);
    return ST_OK;
}

/* ------------------------------------------------------------ KV usage */

typedef struct {
    long held, used, logical;   /* rows (tokens) */
    int empty;                  /* held blocks with no row written */
    int n_running;
} KvUse;

/* Held and used rows of the pool now (see the header comment). rows: (NB) scratch. */
static KvUse kv_use(Runtime *rt, int *rows) {
    KvView v = rt_kv_view(rt);
    int BS = v.block_size;
    KvUse u = {0};
    memset(rows, 0, (size_t)v.n_blocks * sizeof *rows);
    for (int s = 0; s < v.n_seqs; s++) {
        const KvViewSeq *q = &v.seqs[s];
        u.n_running++;
        u.logical += q->n_tokens;
        for (int i = 0; i < q->n_blocks; i++) {
            int f = q->n_tokens - i * BS;
            if (f > BS) f = BS;
            if (f < 0) f = 0;
            int b = q->table[i];
            if (f > rows[b]) rows[b] = f;
        }
    }
    long held = 0;
    for (int b = 0; b < v.n_blocks; b++)
        if (v.refcount[b] > 0) {
            held++;
            u.used += rows[b];
            u.empty += rows[b] == 0;
        }
    u.held = held * BS;
    return u;
}

static double waste_pct(const KvUse *u) { return u->held ? 100.0 * (1.0 - (double)u->used / u->held) : 0.0; }

/* ------------------------------------------------------------ one run */

typedef struct {
    int N;
    int prompt_min, prompt_max, common;  /* tokens */
    double prefill_s;
    int prefill_steps;
    int decode_steps;                    /* pure decode steps timed */
    double decode_s;                     /* their wall time */
    StageTimes stages;                   /* summed over them */
    KvUse kv_prefill, kv_decode;
    double waste_sum;                    /* waste % summed over the decode steps */
    int waste_n;                         /* ... that many (all N running) */
    long prefix_hits;
} RunResult;

static double decode_tps(const RunResult *r) {
    return r->decode_s > 0 ? (double)r->N * r->decode_steps / r->decode_s : 0.0;
}

/* Headroom of max_tokens over --decode (see the header comment). */
static int headroom(int N, int prompt, int budget) {
    int room = budget - N > 0 ? budget - N : 1;
    return (int)(((long)N * prompt + room - 1) / room) + 2;
}

static int submit_one(Runtime *rt, const char *text, int max_tokens, Err *e) {
    RtParams p = rt_params_default();
    p.prompt = text;
    p.max_tokens = max_tokens;
    p.ignore_eos = 1;
    p.sampling.temperature = 0.0f;
    return rt_submit(rt, &p, e);
}

/* Step once; ST_ARG if nothing could be scheduled (it would loop forever). */
static int step_or_fail(Runtime *rt, Err *e) {
    if (rt_step(rt)->plan->n_tokens == 0 && !rt_idle(rt))
        return err_set(e, ST_ARG, "a step scheduled nothing while %d request(s) wait",
                       rt_stats(rt).engine.sched.waiting);
    return ST_OK;
}

static int all_have_first_token(const Runtime *rt, const int *ids, int n) {
    for (int i = 0; i < n; i++) {
        const Sequence *q = rt_sequence(rt, ids[i]);
        if (!q || q->n_out < 1) return 0;
    }
    return 1;
}

/* One workload of N requests (see the header comment): prompts from pr. */
static int run_workload(const Model *m, const Args *a, int N, int shared, const Prompts *pr,
                        RunResult *res, Err *e) {
    memset(res, 0, sizeof *res);
    res->N = N;
    int budget = N > 256 ? N : 256;
    int max_tokens = a->decode + headroom(N, a->prompt, budget);
    int need = a->prompt + max_tokens;
    if (need > m->cfg.seq_len)
        return err_set(e, ST_ARG, "N %d: %d prompt + %d generated tokens (--decode %d plus headroom) "
                                  "exceed the context of %d",
                       N, a->prompt, max_tokens, a->decode, m->cfg.seq_len);
    EngineConfig cfg = engine_config_default();
    cfg.block_size = a->block;
    cfg.sched.max_seqs = N;
    cfg.sched.token_budget = budget;
    cfg.sched.chunk = 0;
    cfg.n_blocks = N * ((need + a->block - 1) / a->block) + POOL_SPARE;
    Runtime rt;
    int st = rt_init(&rt, m, &cfg, e);
    if (st) {
        rt_free(&rt);
        return st;
    }
    int *ids = mem_alloc((size_t)N * sizeof(int));
    int *rows = mem_alloc((size_t)rt_stats(&rt).engine.kv.n_blocks * sizeof(int));
    if (!ids || !rows) {
        st = err_set(e, ST_NOMEM, "out of memory for %d requests", N);
        goto done;
    }
    res->prompt_min = res->prompt_max = pr->len[0];
    for (int i = 0; i < N; i++) {
        if (pr->len[i] < res->prompt_min) res->prompt_min = pr->len[i];
        if (pr->len[i] > res->prompt_max) res->prompt_max = pr->len[i];
    }
    res->common = pr->common;

    double t0 = clock_seconds();
    int submitted = 0;
    if (shared && N > 1) {
        /* The first request alone until its whole prompt is committed (its
         * full blocks are then registered in the prefix cache). */
        if ((ids[0] = submit_one(&rt, pr->text[0], max_tokens, e)) < 0) {
            st = ids[0];
            goto done;
        }
        submitted = 1;
        while (rt_sequence(&rt, ids[0])->n_out < 1) {
            if ((st = step_or_fail(&rt, e))) goto done;
            res->prefill_steps++;
        }
    }
    for (int i = submitted; i < N; i++)
        if ((ids[i] = submit_one(&rt, pr->text[i], max_tokens, e)) < 0) {
            st = ids[i];
            goto done;
        }
    while (!all_have_first_token(&rt, ids, N)) {
        if ((st = step_or_fail(&rt, e))) goto done;
        res->prefill_steps++;
    }
    res->prefill_s = clock_seconds() - t0;
    res->kv_prefill = kv_use(&rt, rows);

    for (int k = 0; k < a->decode; k++) {
        double s0 = clock_seconds();
        const StepPlan *o = rt_step(&rt)->plan;
        double dt = clock_seconds() - s0;
        if (o->n_tokens != N || o->n_decode_tokens != N || o->n_prefill_tokens != 0) break;
        res->decode_steps++;
        res->decode_s += dt;
        res->stages.schedule += rt.last.schedule;
        res->stages.build += rt.last.build;
        res->stages.forward += rt.last.forward;
        res->stages.sample += rt.last.sample;
        res->stages.output += rt.last.output;
        KvUse u = kv_use(&rt, rows);
        if (u.n_running == N) {
            res->kv_decode = u;
            res->waste_sum += waste_pct(&u);
            res->waste_n++;
        }
    }
    for (int i = 0; i < N; i++) {
        const Sequence *q = rt_sequence(&rt, ids[i]);
        if (q) res->prefix_hits += q->prefix_hit_tokens;
    }
done:
    mem_free(ids);
    mem_free(rows);
    rt_free(&rt);   /* frees the requests, finished or not */
    return st;
}

/* One request of 8 tokens, 2 generated: every weight is read at least once. */
static int warm_up(const Model *m, Err *e) {
    EngineConfig cfg = engine_config_default();
    cfg.sched.max_seqs = 1;
    Runtime rt;
    int st = rt_init(&rt, m, &cfg, e);
    int id = st ? st : submit_one(&rt, "once upon a time", 2, e);
    st = id < 0 ? id : rt_run(&rt, e);
    rt_free(&rt);
    return st;
}

/* ------------------------------------------------------------ reports */

/* What the closing lines need from each model and thread count. */
typedef struct {
    char label[64];
    const char *type;
    int threads;
    double tps1, tps16;   /* 0 when not measured */
} Summary;

#define MAX_SUMMARIES 64
static Summary SUMMARIES[MAX_SUMMARIES];
static int ANY_FITS;   /* a model whose weights fit in the last-level cache had a limit printed */
static int N_SUMMARIES;
/* KV waste at N = 16 and 64 (index 0, 1), distinct prompts: end of decode and
 * mean over the decode steps; empty blocks seen anywhere. */
static double WASTE_END[2] = {-1.0, -1.0}, WASTE_MEAN[2];
static int EMPTY_BLOCKS;

static void print_prompt_col(const RunResult *r) {
    if (r->prompt_min == r->prompt_max)
        printf("%d", r->prompt_min);
    else
        printf("%d-%d", r->prompt_min, r->prompt_max);
}

/* Resident bytes of this process now, in MB (/proc/self/statm; 0 without it). */
static double rss_now_mb(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, rss = 0;
    if (!f) return 0.0;
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
    fclose(f);
    return rss * (double)sysconf(_SC_PAGESIZE) / 1e6;
}

/* Load a model and label it ("... rANS" for a compressed file, "... rANS
 * low-mem" when it stays compressed on the rANS tier, "... fast-tier
 * low-mem" on the fast one). low_mem: --low-mem's helper decodes
 * with the kernels' thread count at load, so the most asked for is set first. */
static int load_model(Model *m, const char *path, const Args *a, int low_mem, char *label, size_t cap, Err *e) {
    ModelOpts mo = {.low_mem = low_mem > 0, .rans_tier = low_mem == 2, .device = (Device)a->device};
    int most = 1;
    for (int i = 0; i < a->n_threads; i++)
        if (a->threads[i] > most) most = a->threads[i];
    ops_set_threads(most);
    int st = model_load_opts(m, path, NULL, &mo, e);
    if (st) return st;
    model_label(m, path, label, cap);
    if (m->n_coded)
        snprintf(label + strlen(label), cap - strlen(label), " %s",
                 m->fast_tier ? "fast-tier low-mem" : low_mem ? "rANS low-mem" : "rANS");
    return ST_OK;
}

/* The limit of a step of N tokens and what binds it (print_ceilings). */
static double step_limit(const Model *m, const Ceilings *c, int N, const char **binds) {
    double layers, classifier;
    model_matmul_params(m, &layers, &classifier);
    const char *peak_name;
    double peak = type_peak(m->wtype, c->fma_gflops, c->int8_gops, c->amx_gops, &peak_name);
    double read_s = model_step_bytes(m) / (c->read_gbs * 1e9), ops_s = 2.0 * N * (layers + classifier) / (peak * 1e9);
    *binds = read_s >= ops_s ? "read" : peak_name;
    return N / (read_s > ops_s ? read_s : ops_s);
}

/* ceil: the ceilings at each of a->threads, measured by mt, or NULL (no
 * limit column). */
static int bench_model(const char *path, const Args *a, Ceilings *ceil, const Meter *mt, Err *e) {
    Model m;
    char label[64];
    int st = load_model(&m, path, a, a->low_mem, label, sizeof label, e);
    if (st) return st;
    int maxN = 1;
    for (int i = 0; i < a->n_conc; i++)
        if (a->conc[i] > maxN) maxN = a->conc[i];
    Prompts pr;
    if ((st = make_prompts(m.tok, maxN, a->prompt, 0, &pr, e))) {
        model_free(&m);
        return st;
    }
    /* the limit needs the weights in memory as the products read them:
     * not on a GPU, not decoded a layer at a time from the rANS tier */
    if (m.gpu || m.lowmem) ceil = NULL;
    /* weights that fit in the last-level cache can be read faster than
     * memory allows: their limit is marked, and may be passed */
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    int fits = ceil && l3 > 0 && model_step_bytes(&m) <= (double)l3;
    if (fits) ANY_FITS = 1;
    for (int ti = 0; ti < a->n_threads && st == ST_OK; ti++) {
        ops_set_threads(a->threads[ti]);
        if ((st = warm_up(&m, e))) break;
        printf("%s %s (%.1f MB of weights), %d thread%s, block %d, %d decode steps timed per row:\n\n",
               label, dtype_name(m.wtype), (double)m.weight_bytes * 1e-6, a->threads[ti],
               a->threads[ti] > 1 ? "s" : "", a->block, a->decode);
        printf("| N | prompt tok | steps | decode tok/s | per seq tok/s | ms/step | speed-up "
               "| prefill s (steps) | schedule %% | build %% | forward %% | sample %% | output %% "
               "| limit tok/s (binds) | %% of limit |\n");
        printf("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
        Summary *sm = N_SUMMARIES < MAX_SUMMARIES ? &SUMMARIES[N_SUMMARIES++] : NULL;
        if (sm) {
            memset(sm, 0, sizeof *sm);
            snprintf(sm->label, sizeof sm->label, "%s", label);
            sm->type = dtype_name(m.wtype);
            sm->threads = a->threads[ti];
        }
        double tps1 = 0.0;
        for (int ci = 0; ci < a->n_conc && st == ST_OK; ci++) {
            int N = a->conc[ci];
            RunResult runs[MAX_RUNS];
            double t[MAX_RUNS];
            for (int r = 0; r < a->runs && st == ST_OK; r++) {
                st = run_workload(&m, a, N, 0, &pr, &runs[r], e);
                t[r] = runs[r].decode_s;
            }
            if (st) break;
            /* the run whose decode time is the median (the lower one for even R) */
            double sorted[MAX_RUNS];
            memcpy(sorted, t, (size_t)a->runs * sizeof *t);
            qsort(sorted, (size_t)a->runs, sizeof *sorted, cmp_double);
            const RunResult *r = &runs[0];
            for (int k = 0; k < a->runs; k++)
                if (t[k] == sorted[(a->runs - 1) / 2]) r = &runs[k];
            double tps = decode_tps(r);
            if (N == 1) tps1 = tps;
            if (sm && N == 1) sm->tps1 = tps;
            if (sm && N == 16) sm->tps16 = tps;
            double ms = r->decode_steps ? 1e3 * r->decode_s / r->decode_steps : 0.0;
            double d = r->decode_s > 0 ? 100.0 / r->decode_s : 0.0;
            printf("| %d | ", N);
            print_prompt_col(r);
            printf(" | %d | %.1f | %.2f | %.1f | ", r->decode_steps, tps, tps / N, ms);
            if (tps1 > 0)
                printf("%.2fx", tps / tps1);
            else
                printf("-");
            printf(" | %.2f (%d) | %.1f | %.1f | %.1f | %.1f | %.1f |", r->prefill_s,
                   r->prefill_steps, d * r->stages.schedule, d * r->stages.build,
                   d * r->stages.forward, d * r->stages.sample, d * r->stages.output);
            if (ceil && (st = meter_ask(mt, ti, &ceil[ti], e))) break;   /* the read again, now */
            if (ceil) {
                const char *binds;
                double limit = step_limit(&m, &ceil[ti], N, &binds);
                printf(" %.1f (%s)%s | %.0f%% |\n", limit, binds, fits ? "*" : "", 100.0 * tps / limit);
            } else
                printf(" - | - |\n");
            fflush(stdout);
        }
        printf("\n");
    }
    if (st) {
        char inner[sizeof e->msg];
        snprintf(inner, sizeof inner, "%s", e->msg);
        err_set(e, st, "%s: %s", path, inner);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    if (!st && m.gpu) {   /* what lives on the GPU */
        GpuStats gs = gpu_stats(m.gpu);
        printf("gpu: %s; %.1f MB of weights%s, %.1f MB of decode scratch, %.1f MB of KV pool\n", gs.device,
               gs.weight_bytes / 1e6, gs.coded ? " (kept BF16E, decoded a product at a time)" : "",
               gs.scratch_bytes / 1e6, gs.kv_bytes / 1e6);
    }
    if (!st && !m.n_coded) printf("peak RSS of this process %.1f MB\n\n", ru.ru_maxrss / 1e3);
    if (!st && m.n_coded) {   /* what the codec cost: compressed bytes, buffers, decode time */
        printf("codec: %zu coded bytes in the file, ", m.coded_bytes);
        if (m.lowmem) {
            LmStats ls = lm_stats(m.lowmem);
            printf("2 buffers of %.1f MB; %llu units decoded (%llu by the caller), %.1f ms each "
                   "(%.1f-%.1f), %.2f GB/s of decoded bytes (the helper's threads: as many as the kernels'); "
                   "the forward pass waited %.2f s",
                   ls.buffer_bytes / 2e6, (unsigned long long)ls.decodes, (unsigned long long)ls.misses,
                   ls.decodes ? 1e3 * ls.decode_s / ls.decodes : 0.0, 1e3 * ls.unit_min_s, 1e3 * ls.unit_max_s,
                   ls.decode_s > 0 ? ls.bytes / ls.decode_s / 1e9 : 0.0, ls.wait_s);
        } else {
            double tier = 0, bf16 = 0, weights = 0, esc = 0;
            for (int i = 0; m.fast_tier && i < m.n_coded; i++) {   /* against the BF16 bytes of the same matrices */
                const Mat *w = m.coded[i].mat;
                double ne = ((const Bf16eData *)w->data)->esc_row[w->N];
                bf16 += (double)m.coded[i].wt.nbytes;
                weights += (double)w->N * w->K;
                esc += ne;
                tier += (double)dtype_row_bytes(DT_BF16E, w->K) * w->N + 4.0 * (w->N + 1) + ne;
            }
            if (m.tier_on_gpu)
                printf("fast tier (BF16E) built on the GPU from the file's rANS planes: %.1f MB in %.2f s", tier / 1e6,
                       m.decode_load_s);
            else printf("%s %.1f MB in %.2f s", m.fast_tier ? "fast tier (BF16E, resident weights) built at load:" :
                        "decoded at load into", m.decoded_bytes / 1e6, m.decode_load_s);
            if (m.fast_tier)
                printf(" (%.4f of their %.1f MB in BF16; %.2f%% of exponents escaped)", tier / bf16, bf16 / 1e6,
                       100.0 * esc / weights);
        }
        printf("; peak RSS of this process %.1f MB, %.1f MB at the end\n\n", ru.ru_maxrss / 1e3, rss_now_mb());
    }
    prompts_free(&pr);
    model_free(&m);
    return st;
}

static int add_unique(int *v, int n, int x) {
    for (int i = 0; i < n; i++)
        if (v[i] == x) return n;
    v[n] = x;
    return n + 1;
}

/* KV waste on one model for every N of --concurrency, and 16 and 64. */
static int bench_kv(const char *path, const Args *a, Err *e) {
    Model m;
    char label[64];
    /* the KV cache's use does not depend on where the weights live: never --low-mem here */
    int st = load_model(&m, path, a, 0, label, sizeof label, e);
    if (st) return st;
    int ns[MAX_CONC + 2], n_ns = 0;
    for (int i = 0; i < a->n_conc; i++) n_ns = add_unique(ns, n_ns, a->conc[i]);
    n_ns = add_unique(ns, n_ns, 16);
    n_ns = add_unique(ns, n_ns, 64);
    for (int i = 1; i < n_ns; i++)   /* sort ascending */
        for (int j = i; j > 0 && ns[j - 1] > ns[j]; j--) {
            int x = ns[j];
            ns[j] = ns[j - 1];
            ns[j - 1] = x;
        }
    ops_set_threads(a->threads[0]);
    printf("KV waste, block %d, on %s %s, %d thread%s (waste does not depend on the weights; see the "
           "header):\n\n", a->block, label, dtype_name(m.wtype), a->threads[0], a->threads[0] > 1 ? "s" : "");
    printf("| workload | N | prompt tok | common prefix tok | held rows p/d | used rows p/d "
           "| waste %% p/d | mean waste %% | empty blocks p/d | logical tok d | saved by sharing %% d "
           "| prefix hits tok |\n");
    printf("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
    for (int shared = 0; shared <= 1 && st == ST_OK; shared++) {
        for (int i = 0; i < n_ns && st == ST_OK; i++) {
            int N = ns[i];
            Prompts pr;
            if ((st = make_prompts(m.tok, N, a->prompt, shared, &pr, e))) break;
            RunResult r;
            st = run_workload(&m, a, N, shared, &pr, &r, e);
            prompts_free(&pr);
            if (st) break;
            int w = N == 16 ? 0 : N == 64 ? 1 : -1;
            if (!shared && w >= 0) {
                WASTE_END[w] = waste_pct(&r.kv_decode);
                WASTE_MEAN[w] = r.waste_n ? r.waste_sum / r.waste_n : 0.0;
            }
            EMPTY_BLOCKS += r.kv_prefill.empty + r.kv_decode.empty;
            printf("| %s | %d | ", shared ? "shared prefix" : "distinct", N);
            print_prompt_col(&r);
            printf(" | %d | %ld/%ld | %ld/%ld | %.2f/%.2f | %.2f | %d/%d | %ld | %.1f | %ld |\n",
                   N > 1 ? r.common : 0, r.kv_prefill.held, r.kv_decode.held, r.kv_prefill.used,
                   r.kv_decode.used, waste_pct(&r.kv_prefill), waste_pct(&r.kv_decode),
                   r.waste_n ? r.waste_sum / r.waste_n : 0.0, r.kv_prefill.empty, r.kv_decode.empty,
                   r.kv_decode.logical,
                   r.kv_decode.logical ? 100.0 * (1.0 - (double)r.kv_decode.used / r.kv_decode.logical)
                                       : 0.0,
                   r.prefix_hits);
            fflush(stdout);
        }
    }
    printf("\np: at the end of the prefill phase; d: after the last decode step (every request still "
           "running, %d steps later); mean: over every decode step.\n\n", a->decode);
    if (st) {
        char inner[sizeof e->msg];
        snprintf(inner, sizeof inner, "%s", e->msg);
        err_set(e, st, "%s: %s", path, inner);
    }
    model_free(&m);
    return st;
}

static void print_summary(void) {
    int any = 0;
    for (int i = 0; i < N_SUMMARIES; i++) {
        const Summary *s = &SUMMARIES[i];
        if (s->tps1 > 0 && s->tps16 > 0) {
            double x = s->tps16 / s->tps1;
            printf("16 requests against one: %s %s, %d thread%s: %.2fx (%.1f vs %.2f tok/s)\n", s->label,
                   s->type, s->threads, s->threads > 1 ? "s" : "", x, s->tps16, s->tps1);
            any = 1;
        }
    }
    if (!any) printf("16 requests against one: not measured (needs 1 and 16 in --concurrency)\n");
    printf("llama.cpp on the same files, on this machine and in the same run: tools/bench_llamacpp.sh "
           "(make bench runs it last)\n");
}

/* ------------------------------------------------------------ context */

/* "model name" from /proc/cpuinfo into buf. */
/* The commit (git rev-parse --short HEAD), "+ uncommitted changes" when
 * tracked files differ from it; "none" outside a repository. */
static void commit_name(char *buf, size_t cap) {
    snprintf(buf, cap, "none");
    FILE *f = popen("git rev-parse --short HEAD 2>/dev/null", "r");
    if (!f) return;
    char line[64] = "";
    int ok = fgets(line, sizeof line, f) != NULL;
    pclose(f);
    line[strcspn(line, "\n")] = 0;
    if (!ok || !line[0]) return;
    snprintf(buf, cap, "%s", line);
    f = popen("git --no-optional-locks status --porcelain --untracked-files=no 2>/dev/null", "r");
    if (!f) return;
    int dirty = fgetc(f) != EOF;
    pclose(f);
    if (dirty) snprintf(buf, cap, "%s + uncommitted changes", line);
}

static void print_context(int argc, char **argv) {
    char cpu[128], load[64] = "unknown", commit[96];
    cpu_name(cpu, sizeof cpu);
    commit_name(commit, sizeof commit);
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        double l1, l5, l15;
        if (fscanf(f, "%lf %lf %lf", &l1, &l5, &l15) == 3)
            snprintf(load, sizeof load, "%.2f %.2f %.2f", l1, l5, l15);
        fclose(f);
    }
    time_t now = time(NULL);
    char date[32];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    const char *coretype = getenv("OPENBLAS_CORETYPE");
    printf("command:");
    if (coretype) printf(" OPENBLAS_CORETYPE=%s", coretype);
    for (int i = 0; i < argc; i++) printf(" %s", argv[i]);
    printf("\ncommit %s, %s\n", commit, date);
    printf("machine: %s, %ld cores online, load average %s\n", cpu, sysconf(_SC_NPROCESSORS_ONLN), load);
    printf("OPENBLAS_CORETYPE=%s (OpenBLAS uses its %s kernels); engine kernels: %s\n\n",
           coretype ? coretype : "(unset)", openblas_get_corename(), ops_isa_name(ops_best_isa()));
}

/* ------------------------------------------------------------ arguments */

/* "1,4,16" into v (at most max values in lo..hi). */
static int parse_list(const char *flag, const char *val, int lo, int hi, int *v, int max, int *n, Err *e) {
    *n = 0;
    for (const char *p = val; *p;) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || x < lo || x > hi || *n == max || (*end && *end != ','))
            return err_set(e, ST_ARG, "%s wants a list like 1,2 (up to %d values in %d..%d), got '%s'",
                           flag, max, lo, hi, val);
        v[(*n)++] = (int)x;
        p = *end ? end + 1 : end;
    }
    if (*n == 0) return err_set(e, ST_ARG, "%s is empty", flag);
    return ST_OK;
}

static int parse_args(int argc, char **argv, Args *a, Err *e) {
    *a = (Args){.threads = {2}, .n_threads = 1, .conc = {1, 4, 16, 64}, .n_conc = 4, .prompt = 32,
                .decode = 32, .block = 16, .runs = 1, .kv = 1, .ceilings = 1};
    int i = 1;
    for (; i < argc && argv[i][0] == '-' && argv[i][1]; i += 2) {
        const char *flag = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!val) return err_set(e, ST_ARG, "%s needs a value", flag);
        if (strcmp(flag, "--threads") == 0) {
            if (parse_list(flag, val, 1, 256, a->threads, MAX_THREAD_COUNTS, &a->n_threads, e)) return ST_ARG;
        } else if (strcmp(flag, "--concurrency") == 0) {
            if (parse_list(flag, val, 1, MAX_N, a->conc, MAX_CONC, &a->n_conc, e)) return ST_ARG;
            for (int k = 1; k < a->n_conc; k++)   /* ascending, so N = 1 comes first */
                for (int j = k; j > 0 && a->conc[j - 1] > a->conc[j]; j--) {
                    int x = a->conc[j];
                    a->conc[j] = a->conc[j - 1];
                    a->conc[j - 1] = x;
                }
        } else if (strcmp(flag, "--prompt") == 0) {
            if (parse_int(flag, val, 8, 4096, &a->prompt, e)) return ST_ARG;
        } else if (strcmp(flag, "--decode") == 0) {
            if (parse_int(flag, val, 1, 4096, &a->decode, e)) return ST_ARG;
        } else if (strcmp(flag, "--block") == 0) {
            if (parse_int(flag, val, 1, 4096, &a->block, e)) return ST_ARG;
        } else if (strcmp(flag, "--runs") == 0) {
            if (parse_int(flag, val, 1, MAX_RUNS, &a->runs, e)) return ST_ARG;
        } else if (strcmp(flag, "--low-mem") == 0) {
            if (parse_int(flag, val, 0, 2, &a->low_mem, e)) return ST_ARG;
        } else if (strcmp(flag, "--kv") == 0) {
            if (parse_int(flag, val, 0, 1, &a->kv, e)) return ST_ARG;
        } else if (strcmp(flag, "--ceilings") == 0) {
            if (parse_int(flag, val, 0, 1, &a->ceilings, e)) return ST_ARG;
        } else if (strcmp(flag, "--device") == 0) {
            if (strcmp(val, "cpu") && strcmp(val, "cuda"))
                return err_set(e, ST_ARG, "--device: '%s' is not cpu or cuda", val);
            a->device = strcmp(val, "cuda") == 0 ? DEVICE_CUDA : DEVICE_CPU;
        } else {
            return err_set(e, ST_ARG, "unknown option %s", flag);
        }
    }
    a->models = argv + i;
    a->n_models = argc - i;
    if (a->n_models == 0) return err_set(e, ST_ARG, "no model given");
    return ST_OK;
}

int main(int argc, char **argv) {
    Args a;
    Err e = {{0}};
    if (argc == 1 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        printf("usage: bench_batch [--threads 2] [--concurrency 1,4,16,64] [--prompt 32] [--decode 32] "
               "[--block 16] [--runs 1] [--low-mem 0|1|2] [--kv 0|1] [--ceilings 0|1] [--device cpu|cuda] "
               "MODEL.gguf ...\n");
        return 0;
    }
    if (parse_args(argc, argv, &a, &e) || ops_isa_from_env(&e)) {   /* LLM_ISA, LLM_DECODE_ROWS */
        fprintf(stderr, "bench_batch: %s\n", e.msg);
        return 2;
    }
    /* first, before this process has started any thread (Meter) */
    Ceilings ceil[MAX_THREAD_COUNTS];
    Meter mt;
    int with_ceil = a.ceilings && a.device != DEVICE_CUDA;
    if (with_ceil && meter_start(&a, &mt, &e)) {
        fprintf(stderr, "bench_batch: %s\n", e.msg);
        return 1;
    }
    for (int i = 0; with_ceil && i < a.n_threads; i++)
        if (meter_ask(&mt, -1 - i, &ceil[i], &e)) {
            fprintf(stderr, "bench_batch: %s\n", e.msg);
            meter_stop(&mt);
            return 1;
        }
    print_context(argc, argv);
    if (with_ceil) print_ceilings(&a, ceil);
    int failed = 0;
    const char *smallest = NULL;
    long smallest_size = -1;
    for (int i = 0; i < a.n_models; i++) {
        if (bench_model(a.models[i], &a, with_ceil ? ceil : NULL, &mt, &e)) {
            fprintf(stderr, "bench_batch: %s\n", e.msg);
            failed = 1;
            continue;
        }
        struct stat sb;
        if (stat(a.models[i], &sb) == 0 && (smallest_size < 0 || (long)sb.st_size < smallest_size)) {
            smallest_size = (long)sb.st_size;
            smallest = a.models[i];
        }
    }
    if (smallest && a.kv && bench_kv(smallest, &a, &e)) {
        fprintf(stderr, "bench_batch: %s\n", e.msg);
        failed = 1;
    }
    printf("prompts: %d tokens each (BOS included), greedy, ignore_eos; decode: %d steps of N tokens "
           "timed after every request has its first token; %s.\n",
           a.prompt, a.decode,
           a.runs > 1 ? "each row the run with the median decode time" : "one run per row");
    print_summary();
    if (ANY_FITS)
        printf("*: the weights fit in the last-level cache (%.0f MiB), where they are read faster than "
               "memory allows: the read is not their limit, and the %% of limit can pass 100\n",
               (double)sysconf(_SC_LEVEL3_CACHE_SIZE) / (1 << 20));
    if (WASTE_END[0] < 0)
        printf("KV waste, distinct prompts: not measured\n");
    else {
        printf("KV waste, distinct prompts, at the end of decode / mean over the decode steps: "
               "N = 16 %.2f%% / %.2f%%, N = 64 %.2f%% / %.2f%% (block %d).",
               WASTE_END[0], WASTE_MEAN[0], WASTE_END[1], WASTE_MEAN[1], a.block);
        if (EMPTY_BLOCKS == 0)
            printf(" No block was ever held empty: every wasted row is in the unfilled tail of a "
                   "sequence's last block, (%d - 1) / 2 rows per sequence on average, the floor for "
                   "blocks of %d; under 4%% needs sequences of about %.0f tokens or more.",
                   a.block, a.block, (a.block - 1) / 2.0 / 0.04);
        printf("\n");
    }
    if (with_ceil) meter_stop(&mt);
    return failed;
}
