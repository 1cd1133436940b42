/* test_engine.c - the serving engine, end to end: runtime, scheduler, paged
 * KV cache, executor and the step loop together.
 *
 * The central claim: batching changes when a request runs, never what it
 * says. So the reference for every request in a concurrent workload is the
 * same request run alone, and the reference for "alone" is the plain
 * single-sequence loop over model_forward with its contiguous cache (no
 * pages, no scheduler). Each test also asserts that the mechanism it is about
 * really happened (a preemption, a prefix hit), or it would prove nothing.
 *
 * Model: data/shakespeare.gguf, the project's own default model (in the
 * repository, so these tests never skip). */
#include "runtime.h"
#include "load/gguf.h"
#include "base/mem.h"
#include <math.h>
#include "testutil.h"

static Model M;
enum { MAXOUT = 64 };

static int setup(void **state) {
    Err e = {{0}};
    if (model_load(&M, "data/shakespeare.gguf", NULL, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    model_free(&M);
    return 0;
}

typedef struct {
    const char *prompt;
    int max_tokens;
    float temperature;
    uint64_t seed;
    Priority priority;
    long at_step;            /* submitted once the engine has run this many steps */
    const char *stop;        /* one stop string or NULL */
    /* results */
    int id;
    int out[MAXOUT];
    int n_out;
    FinishReason finish;
    int n_preempted, prefix_hit_tokens;
    Telemetry tm;
    long first_token_step;   /* engine steps run when its first token came */
} Job;

static const char *PROMPTS[] = {
    "ROMEO:",
    "First Citizen:\nBefore we proceed any further, hear me speak.",
    "KING RICHARD II:\nNow, my lord, what says the",
    "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo? Deny thy father and refuse thy name;",
    "M",
    "MENENIUS:\nI tell you, friends, most charitable care\nHave the patricians of you.",
    "CORIOLANUS:\nWhat is the matter, you dissentious rogues,",
    "LADY",
};
enum { NPROMPTS = sizeof PROMPTS / sizeof PROMPTS[0] };

static EngineConfig config(int max_seqs, int budget, int chunk, int n_blocks) {
    EngineConfig c = engine_config_default();
    c.sched.max_seqs = max_seqs;
    c.sched.token_budget = budget;
    c.sched.chunk = chunk;
    c.n_blocks = n_blocks;
    return c;
}

static int submit(Runtime *rt, Job *j) {
    RtParams p = rt_params_default();
    p.prompt = j->prompt;
    p.max_tokens = j->max_tokens;
    p.sampling.temperature = j->temperature;
    p.sampling.seed = j->seed;
    p.priority = j->priority;
    p.stop[0] = j->stop;
    Err e = {{0}};
    int id = rt_submit(rt, &p, &e);
    if (id < 0) print_error("submit: %s\n", e.msg);
    assert_true(id >= 0);
    return id;
}

/* Replay jobs (each submitted at its at_step; when the engine goes idle
 * early, the next job is submitted at once), run to idle, collect results.
 * Checks that every block came back. */
static void run_jobs(const EngineConfig *cfg, Job *jobs, int n) {
    Runtime rt;
    Err e = {{0}};
    assert_int_equal(rt_init(&rt, &M, cfg, &e), ST_OK);
    int next = 0;
    for (int i = 0; i < n; i++) jobs[i].first_token_step = -1;
    while (next < n || !rt_idle(&rt)) {
        while (next < n && (jobs[next].at_step <= rt.en.steps || rt_idle(&rt)))
            jobs[next].id = submit(&rt, &jobs[next]), next++;
        rt_step(&rt);
        for (int i = 0; i < next; i++) {
            const Sequence *q = rt_sequence(&rt, jobs[i].id);
            if (jobs[i].first_token_step < 0 && q->n_out > 0) jobs[i].first_token_step = rt.en.steps;
        }
    }
    for (int i = 0; i < n; i++) {
        const Sequence *q = rt_sequence(&rt, jobs[i].id);
        assert_non_null(q);
        assert_int_equal(q->state, SEQ_FINISHED);
        jobs[i].n_out = q->n_out;
        memcpy(jobs[i].out, q->tokens + q->n_prompt, (size_t)q->n_out * sizeof(int));
        jobs[i].finish = q->finish;
        jobs[i].n_preempted = q->n_preempted;
        jobs[i].prefix_hit_tokens = q->prefix_hit_tokens;
        jobs[i].tm = *rt_telemetry(&rt, jobs[i].id);
    }
    /* Every block is back: nobody holds one, and the pool is consistent. */
    const KvPool *pool = &rt.en.pool;
    assert_int_equal(kv_held_blocks(pool), 0);
    for (int b = 0; b < pool->NB; b++) assert_int_equal(pool->refcount[b], 0);
    assert_int_equal(kv_free_blocks(pool) + kv_cached_blocks(pool), pool->NB);
    if (kv_pool_check(pool, &e)) fail_msg("pool: %s", e.msg);
    rt_free(&rt);
}

/* The same job alone in a roomy engine. */
static void run_alone(Job *j) {
    EngineConfig c = config(4, 256, 0, 0);
    Job copy = *j;
    copy.at_step = 0;
    run_jobs(&c, &copy, 1);
    memcpy(j->out, copy.out, sizeof copy.out);
    j->n_out = copy.n_out;
    j->finish = copy.finish;
}

static void make_jobs(Job *jobs, int n) {
    memset(jobs, 0, (size_t)n * sizeof *jobs);
    for (int i = 0; i < n; i++) {
        jobs[i].prompt = PROMPTS[i % NPROMPTS];
        jobs[i].max_tokens = 12 + (i * 7) % 20;
        jobs[i].priority = PRIO_NORMAL;
    }
}

static void assert_same_tokens(const Job *got, const Job *want, int i) {
    if (got->n_out != want->n_out || memcmp(got->out, want->out, (size_t)got->n_out * sizeof(int))) {
        int k = 0;
        while (k < got->n_out && k < want->n_out && got->out[k] == want->out[k]) k++;
        fail_msg("request %d (\"%.20s\"): %d tokens vs %d alone, first difference at %d", i,
                 got->prompt, got->n_out, want->n_out, k);
    }
}

/* ---- the reference: the single-sequence loop over model_forward ---- */

static void engine_alone_matches_the_contiguous_forward_loop(void **state) {
    for (int p = 0; p < NPROMPTS; p++) {
        Job j = {.prompt = PROMPTS[p], .max_tokens = 24};
        run_alone(&j);
        /* plain loop */
        int ids[256];
        Err e = {{0}};
        int n = tok_encode(M.tok, PROMPTS[p], 1, ids, 256, &e);
        assert_true(n > 0);
        RunState rs;
        assert_int_equal(runstate_init(&rs, &M, M.cfg.seq_len, &e), ST_OK);
        float *logits = model_forward(&M, &rs, ids, n, 0, 0);
        for (int k = 0; k < 24; k++) {
            int next = sampler_argmax(logits, M.cfg.vocab_size);
            assert_int_equal(j.out[k], next);
            logits = model_forward(&M, &rs, &next, 1, n + k, 0);
        }
        runstate_free(&rs);
        assert_int_equal(j.n_out, 24);
        assert_int_equal(j.finish, FIN_LENGTH);
    }
}

/* ---- concurrency must not change any request's tokens ---- */

static void check_against_alone(Job *jobs, int n) {
    for (int i = 0; i < n; i++) {
        Job alone = jobs[i];
        run_alone(&alone);
        assert_same_tokens(&jobs[i], &alone, i);
    }
}

static void concurrent_greedy_equals_alone_for_mixed_prompt_lengths(void **state) {
    Job jobs[12];
    make_jobs(jobs, 12);
    EngineConfig c = config(8, 128, 0, 0);
    run_jobs(&c, jobs, 12);
    check_against_alone(jobs, 12);
}

static void sampled_requests_follow_their_own_seed_in_any_company(void **state) {
    Job jobs[8];
    make_jobs(jobs, 8);
    for (int i = 0; i < 8; i++) {
        jobs[i].temperature = 0.8f;
        jobs[i].seed = 100 + (uint64_t)i;
    }
    EngineConfig c = config(8, 64, 0, 0);
    run_jobs(&c, jobs, 8);
    check_against_alone(jobs, 8);
}

/* Chunk sizes around one prompt's length: shorter (several chunks), equal
 * (exactly one), one longer (one chunk with room to spare). */
static void chunked_prefill_of_any_chunk_size_equals_alone(void **state) {
    Err e = {{0}};
    int ids[256];
    int len = tok_encode(M.tok, PROMPTS[3], 1, ids, 256, &e);   /* the longest prompt */
    assert_true(len > 8);
    int chunks[] = {3, len - 1, len, len + 1};
    for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
        Job jobs[8];
        make_jobs(jobs, 8);
        EngineConfig c = config(6, 64, chunks[k], 0);
        run_jobs(&c, jobs, 8);
        check_against_alone(jobs, 8);
    }
}

static void a_small_pool_preempts_and_every_output_is_still_exact(void **state) {
    Job jobs[10];
    make_jobs(jobs, 10);
    for (int i = 0; i < 10; i++) jobs[i].max_tokens = 40;
    /* 14 blocks of 16 = 224 token slots for 10 requests of up to ~75 tokens */
    EngineConfig c = config(8, 64, 16, 14);
    run_jobs(&c, jobs, 10);
    int preempted = 0;
    for (int i = 0; i < 10; i++) preempted += jobs[i].n_preempted;
    if (preempted == 0) fail_msg("the pool was meant to be too small, yet nothing was preempted");
    check_against_alone(jobs, 10);
}

static void shared_prefixes_hit_the_cache_and_outputs_are_exact(void **state) {
    static char prompts[6][256];
    const char *system = "You are the Duke of Vienna. Answer in verse, as a Duke should, "
                         "and never break the measure of the line.\n";
    const char *tails[] = {"ROMEO:", "ISABELLA:\nAlas", "LUCIO:", "ANGELO:\nNever",
                           "ESCALUS:", "PROVOST:\nI"};
    Job jobs[6];
    make_jobs(jobs, 6);
    for (int i = 0; i < 6; i++) {
        snprintf(prompts[i], sizeof prompts[i], "%s%s", system, tails[i]);
        jobs[i].prompt = prompts[i];
        jobs[i].at_step = i == 0 ? 0 : 2 + i;   /* the first one fills the cache */
    }
    EngineConfig c = config(4, 64, 0, 0);
    run_jobs(&c, jobs, 6);
    assert_int_equal(jobs[0].prefix_hit_tokens, 0);
    for (int i = 1; i < 6; i++)
        if (jobs[i].prefix_hit_tokens < 16)
            fail_msg("request %d reused %d tokens of the shared prefix", i, jobs[i].prefix_hit_tokens);
    check_against_alone(jobs, 6);
}

static void preemption_resumes_from_the_prefix_cache(void **state) {
    /* Same prompts twice, tiny pool: a preempted request's full blocks stay
     * cached, so its resume finds them. */
    Job jobs[6];
    make_jobs(jobs, 6);
    for (int i = 0; i < 6; i++) {
        jobs[i].prompt = PROMPTS[3];
        jobs[i].max_tokens = 48;
    }
    EngineConfig c = config(6, 64, 8, 16);
    run_jobs(&c, jobs, 6);
    int preempted = 0, hits = 0;
    for (int i = 0; i < 6; i++) {
        preempted += jobs[i].n_preempted;
        hits += jobs[i].prefix_hit_tokens;
    }
    assert_true(preempted > 0);
    assert_true(hits > 0);
    check_against_alone(jobs, 6);
}

/* n samples of one prompt: the first computes the prompt, the others fork
 * from it (sharing its blocks) and copy only the block they write into. With
 * fewer free slots than samples, the rest run on their own. Either way each
 * sample is the same as a request alone with its seed (seed + i). */
static void samples_of_one_prompt_fork_and_copy_only_on_write(void **state) {
    Err e = {{0}};
    int ids[256];
    int len = tok_encode(M.tok, PROMPTS[3], 1, ids, 256, &e);
    assert_true(len > 16 && len % 16 != 0);   /* a shared, partly filled last block */
    for (int slots = 4; slots >= 2; slots -= 2) {
        Runtime rt;
        EngineConfig c = config(slots, 64, 0, 0);
        assert_int_equal(rt_init(&rt, &M, &c, &e), ST_OK);
        RtParams p = rt_params_default();
        p.prompt = PROMPTS[3];
        p.max_tokens = 20;
        p.sampling.temperature = 0.8f;
        p.sampling.seed = 10;
        p.n = 4;
        int id = rt_submit(&rt, &p, &e);
        if (id < 0) fail_msg("submit: %s", e.msg);
        assert_int_equal(rt_run(&rt, &e), ST_OK);
        /* slots 4: the three others fork and each but the last sharer copies the
         * shared block once; slots 2: one forks (one copy), two run on their own
         * and find the prompt's full block in the prefix cache */
        assert_int_equal(rt.en.pool.cow_copies, slots == 4 ? 3 : 1);
        for (int i = 0; i < 4; i++) {
            const Sequence *q = rt_sequence(&rt, id + i);
            assert_int_equal(q->state, SEQ_FINISHED);
            Job got = {.prompt = PROMPTS[3], .max_tokens = 20, .temperature = 0.8f, .seed = 10 + (uint64_t)i};
            got.n_out = q->n_out;
            memcpy(got.out, q->tokens + q->n_prompt, (size_t)q->n_out * sizeof(int));
            Job alone = got;
            run_alone(&alone);
            assert_same_tokens(&got, &alone, i);
            if (slots == 2 && i >= 2) assert_true(q->prefix_hit_tokens >= 16);
            if (i > 0) assert_int_equal(rt_telemetry(&rt, id + i)->first_scheduled >= 0, 1);
        }
        assert_int_equal(kv_held_blocks(&rt.en.pool), 0);
        if (kv_pool_check(&rt.en.pool, &e)) fail_msg("pool: %s", e.msg);
        rt_free(&rt);
    }
    /* n beyond RT_MAX_SAMPLES is refused */
    Runtime rt;
    EngineConfig c = config(2, 64, 0, 0);
    assert_int_equal(rt_init(&rt, &M, &c, &e), ST_OK);
    RtParams p = rt_params_default();
    p.prompt = "ROMEO:";
    p.n = RT_MAX_SAMPLES + 1;
    assert_int_equal(rt_submit(&rt, &p, &e), ST_ARG);
    assert_non_null(strstr(e.msg, "samples must be in 1.."));
    assert_null(rt.all);
    rt_free(&rt);
}

/* n samples of a one-token request (a label, a yes or no): the first's token
 * ends it, and with it the blocks its samples are to share. So the samples
 * fork before that token is appended: all four come in the one step that
 * computes the prompt, and nothing is computed twice. */
static void samples_of_a_one_token_request_fork_before_it_finishes(void **state) {
    Runtime rt;
    Err e = {{0}};
    EngineConfig c = config(4, 64, 0, 0);
    assert_int_equal(rt_init(&rt, &M, &c, &e), ST_OK);
    RtParams p = rt_params_default();
    p.prompt = PROMPTS[3];
    p.max_tokens = 1;
    p.sampling.temperature = 0.8f;
    p.sampling.seed = 3;
    p.n = 4;
    int id = rt_submit(&rt, &p, &e);
    if (id < 0) fail_msg("submit: %s", e.msg);
    assert_int_equal(rt_run(&rt, &e), ST_OK);
    assert_int_equal(rt.en.steps, 1);   /* one step: the prompt, and four tokens from its logits */
    const Sequence *first = rt_sequence(&rt, id);
    for (int i = 0; i < 4; i++) {
        const Sequence *q = rt_sequence(&rt, id + i);
        assert_int_equal(q->n_out, 1);
        assert_int_equal(q->finish, FIN_LENGTH);
        assert_int_equal(q->prefix_hit_tokens, 0);   /* never recomputed, so never looked up */
        assert_int_equal(q->tokens[q->n_prompt - 1], first->tokens[first->n_prompt - 1]);
    }
    assert_int_equal(rt.en.tokens_run, first->n_prompt);
    assert_int_equal(kv_held_blocks(&rt.en.pool), 0);
    rt_free(&rt);
}

static int count_of(const int *a, int n, int x) {
    int c = 0;
    for (int i = 0; i < n; i++) c += a[i] == x;
    return c;
}

/* Greedy "ROMEO:" once, then again with its k-th token declared the end of
 * text (eos), at three lengths: more room than k, exactly k (the last token
 * allowed is eos: eos wins, and it is appended but not text), and fewer. And
 * a request longer than the context ends by context, with the context full. */
static void a_request_ends_by_eos_length_or_context_whichever_comes_first(void **state) {
    Job j = {.prompt = "ROMEO:", .max_tokens = 30, .priority = PRIO_NORMAL};
    run_alone(&j);
    assert_int_equal(j.n_out, 30);
    int k = 8;   /* from the 8th on, the first token that has not come before */
    while (k < 30 && count_of(j.out, k - 1, j.out[k - 1]) > 0) k++;
    assert_true(k < 30);
    const int max[] = {20, k, k - 1};
    const FinishReason want[] = {FIN_EOS, FIN_EOS, FIN_LENGTH};
    for (int c = 0; c < 3; c++) {
        Runtime rt;
        Err e = {{0}};
        EngineConfig cfg = config(2, 64, 0, 0);
        assert_int_equal(rt_init(&rt, &M, &cfg, &e), ST_OK);
        RtParams p = rt_params_default();
        p.prompt = j.prompt;
        p.max_tokens = max[c];
        int id = rt_submit(&rt, &p, &e);
        assert_true(id >= 0);
        Sequence *sq = (Sequence *)rt_sequence(&rt, id);   /* a test's liberty: the runtime set it */
        sq->eog[0] = j.out[k - 1];
        sq->n_eog = 1;
        assert_int_equal(rt_run(&rt, &e), ST_OK);
        const Sequence *q = rt_sequence(&rt, id);
        assert_int_equal(q->finish, want[c]);
        assert_int_equal(q->n_out, want[c] == FIN_EOS ? k : max[c]);
        assert_memory_equal(q->tokens + q->n_prompt, j.out, (size_t)q->n_out * sizeof(int));
        rt_free(&rt);
    }
    Runtime rt;
    Err e = {{0}};
    EngineConfig cfg = config(2, 64, 0, 0);
    assert_int_equal(rt_init(&rt, &M, &cfg, &e), ST_OK);
    RtParams p = rt_params_default();
    p.prompt = "ROMEO:";
    p.max_tokens = 2 * M.cfg.seq_len;
    p.ignore_eos = 1;
    int id = rt_submit(&rt, &p, &e);
    assert_true(id >= 0);
    assert_int_equal(rt_run(&rt, &e), ST_OK);
    const Sequence *q = rt_sequence(&rt, id);
    assert_int_equal(q->finish, FIN_CONTEXT);
    assert_int_equal(q->n_tokens, M.cfg.seq_len + 1);   /* the last token needs no K/V */
    assert_int_equal(q->n_out, M.cfg.seq_len + 1 - q->n_prompt);
    rt_free(&rt);
}

/* The KV map, drawn from what the sequences hold rather than from the
 * refcounts: each running request's block table says who holds a block; a
 * block nobody holds is cached when the prefix cache can still find it. A
 * long prompt that finished leaves cached blocks, two samples of another
 * share their prompt's blocks, a third request holds its own: all four kinds
 * are on the map, which has two rows (80 blocks), and a short buffer gets
 * the map's beginning. */
static void the_kv_map_draws_every_block_as_its_holders_see_it(void **state) {
    static const char id_char[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    Runtime rt;
    Err e = {{0}};
    EngineConfig c = config(4, 64, 0, 80);
    assert_int_equal(rt_init(&rt, &M, &c, &e), ST_OK);
    int ids[4];
    const char *prompts[3] = {PROMPTS[5], PROMPTS[3], PROMPTS[1]};
    const int max[3] = {1, 30, 30}, n[3] = {1, 2, 1};
    for (int r = 0, k = 0; r < 3; r++) {
        RtParams p = rt_params_default();
        p.prompt = prompts[r];
        p.max_tokens = max[r];
        p.n = n[r];
        p.sampling.temperature = n[r] > 1 ? 0.8f : 0.0f;
        int id = rt_submit(&rt, &p, &e);
        assert_true(id >= 0);
        for (int i = 0; i < n[r]; i++) ids[k++] = id + i;
    }
    for (int s = 0; s < 3; s++) rt_step(&rt);
    const KvPool *pool = &rt.en.pool;
    char want[80];
    int holders[80] = {0};
    memset(want, '.', sizeof want);
    for (int b = 0; b < 80; b++)
        if (pool->registered[b]) want[b] = '+';
    for (int i = 0; i < 4; i++) {
        const Sequence *q = rt_sequence(&rt, ids[i]);
        if (q->state != SEQ_RUNNING) continue;
        for (int j = 0; j < q->kv.n_blocks; j++) {
            int b = q->kv.table[j];
            want[b] = ++holders[b] > 1 ? '*' : id_char[q->id % 62];
        }
    }
    for (const char *kind = ".+*"; *kind; kind++)
        if (!memchr(want, *kind, sizeof want)) fail_msg("no block drawn '%c': the setup missed a case", *kind);
    int owned = 0;
    for (int b = 0; b < 80; b++) owned += holders[b] == 1;
    assert_true(owned > 0);
    char map[2048], line[128];
    KvView view = rt_kv_view(&rt);
    int len = trace_kv_map(&view, map, sizeof map);
    assert_int_equal(len, (int)strlen(map));
    snprintf(line, sizeof line, "%15sKV pool, 80 blocks of 16 tokens ('.' free, '+' cached, "
             "id = held by that request, '*' shared):\n", "");
    assert_memory_equal(map, line, strlen(line));
    int at = (int)strlen(line);
    for (int b0 = 0; b0 < 80; b0 += 64) {
        int w = b0 + 64 <= 80 ? 64 : 80 - b0;
        snprintf(line, sizeof line, "%15s%5d %.*s\n", "", b0, w, want + b0);
        if (strncmp(map + at, line, strlen(line)))
            fail_msg("the map's row %d:\n%.*s\nwant\n%s", b0, (int)strlen(line), map + at, line);
        at += (int)strlen(line);
    }
    assert_int_equal(len, at);
    char part[40];   /* cut short: the beginning, terminated */
    assert_int_equal(trace_kv_map(&view, part, sizeof part), (int)sizeof part - 1);
    assert_memory_equal(part, map, sizeof part - 1);
    assert_int_equal(part[sizeof part - 1], 0);
    assert_int_equal(rt_run(&rt, &e), ST_OK);
    rt_free(&rt);
}

/* ---- priorities ---- */

static void a_high_request_behind_many_low_ones_gets_its_first_token_first(void **state) {
    for (int policy = SCHED_FCFS; policy <= SCHED_PRIORITY; policy++) {
        Job jobs[7];
        make_jobs(jobs, 7);
        for (int i = 0; i < 7; i++) {
            jobs[i].priority = i == 6 ? PRIO_HIGH : PRIO_LOW;
            jobs[i].max_tokens = 8;
        }
        EngineConfig c = config(2, 64, 0, 0);
        c.sched.policy = (SchedPolicy)policy;
        run_jobs(&c, jobs, 7);
        int before_high = 0;   /* low requests whose first token came before the high one's */
        for (int i = 0; i < 6; i++) before_high += jobs[i].tm.first_token < jobs[6].tm.first_token;
        if (policy == SCHED_PRIORITY)
            assert_int_equal(before_high, 0);
        else
            assert_true(before_high >= 4);   /* FCFS: it waits its turn */
    }
}

static void aging_bounds_how_long_a_low_request_waits(void **state) {
    /* One slot; a low request arrives among a long stream of high ones, one
     * per step, each of which holds the slot for several steps, so a queue
     * builds. Without aging every high request overtakes the low one. With
     * aging every A steps a waiting request rises one level per A steps, so
     * the low one ranks like a high request that arrived 2 * A steps after it:
     * exactly the high requests that arrived before that may overtake it. */
    enum { NH = 24, A = 4, LOW = 1 };
    for (int aging = 0; aging <= A; aging += A) {
        Job jobs[NH + 1];
        make_jobs(jobs, NH + 1);
        for (int i = 0; i <= NH; i++) {
            jobs[i].priority = i == LOW ? PRIO_LOW : PRIO_HIGH;
            jobs[i].max_tokens = 4;
            jobs[i].prompt = "ROMEO:";
            jobs[i].at_step = i;
        }
        EngineConfig c = config(1, 64, 0, 0);
        c.sched.policy = SCHED_PRIORITY;
        c.sched.aging_steps = aging;
        run_jobs(&c, jobs, NH + 1);
        int overtaken = 0;
        for (int i = LOW + 1; i <= NH; i++) {
            int before = jobs[i].tm.first_token < jobs[LOW].tm.first_token;
            overtaken += before;
            if (aging && before && jobs[i].at_step >= LOW + 2 * A)
                fail_msg("high request %d arrived at step %ld, %ld steps after the low one, and "
                         "still overtook it", i, jobs[i].at_step, jobs[i].at_step - LOW);
        }
        if (aging == 0)
            assert_int_equal(overtaken, NH - LOW);   /* starved until the highs are gone */
        else
            assert_true(overtaken > 0 && overtaken < NH - LOW);   /* some did, not all */
    }
}

/* ---- what the runtime promises ---- */

static void the_decode_loop_allocates_nothing(void **state) {
    Runtime rt;
    Err e = {{0}};
    EngineConfig c = config(8, 64, 0, 0);
    assert_int_equal(rt_init(&rt, &M, &c, &e), ST_OK);
    Job jobs[8];
    make_jobs(jobs, 8);
    for (int i = 0; i < 8; i++) {
        jobs[i].max_tokens = 40;
        jobs[i].temperature = i % 2 ? 0.9f : 0.0f;
        jobs[i].stop = i % 3 ? NULL : "zzz";
        submit(&rt, &jobs[i]);
    }
    /* run until every request is decoding */
    for (int guard = 0; guard < 100 && rt.en.sched.out.n_prefill_tokens + rt.en.sched.n_waiting; guard++)
        rt_step(&rt);
    assert_int_equal(rt.en.sched.n_running, 8);
    MemStats before = mem_stats();
    long tokens = rt.en.tokens_out;
    for (int k = 0; k < 10; k++) rt_step(&rt);
    MemStats after = mem_stats();
    assert_int_equal(rt.en.tokens_out - tokens, 80);
    assert_int_equal(after.total_count, before.total_count);
    assert_int_equal(after.live_bytes, before.live_bytes);
    assert_int_equal(rt_run(&rt, &e), ST_OK);
    rt_free(&rt);
}

static void bad_requests_are_refused_with_a_reason_and_nothing_is_queued(void **state) {
    Runtime rt;
    Err e = {{0}};
    EngineConfig c = config(4, 64, 0, 8);   /* 8 blocks = 128 tokens */
    assert_int_equal(rt_init(&rt, &M, &c, &e), ST_OK);
    static char longp[4096];
    memset(longp, 'a', sizeof longp - 1);
    struct {
        const char *what, *expect;
        RtParams p;
    } cases[8];
    for (int i = 0; i < 8; i++) {
        cases[i].p = rt_params_default();
        cases[i].p.prompt = "ROMEO:";
    }
    cases[0].what = "empty prompt without BOS", cases[0].expect = "empty prompt";
    cases[0].p.prompt = "", cases[0].p.add_bos = 0;
    cases[1].what = "prompt longer than the context", cases[1].expect = "context";
    cases[1].p.prompt = longp;
    cases[2].what = "max_tokens 0", cases[2].expect = "max_tokens 0";
    cases[2].p.max_tokens = 0;
    cases[3].what = "negative temperature", cases[3].expect = "temperature";
    cases[3].p.sampling.temperature = -1.0f;
    cases[4].what = "top_p 0", cases[4].expect = "top_p 0";
    cases[4].p.sampling.top_p = 0.0f;
    cases[5].what = "top_p 1.5", cases[5].expect = "top_p 1.5";
    cases[5].p.sampling.top_p = 1.5f;
    cases[6].what = "unknown priority", cases[6].expect = "priority 7";
    cases[6].p.priority = (Priority)7;
    cases[7].what = "larger than the pool", cases[7].expect = "whole pool has 8 blocks";
    cases[7].p.max_tokens = 200;
    for (int i = 0; i < 8; i++) {
        e.msg[0] = 0;
        int st = rt_submit(&rt, &cases[i].p, &e);
        if (st != ST_ARG || !strstr(e.msg, cases[i].expect))
            fail_msg("%s: status %d, message \"%s\"", cases[i].what, st, e.msg);
        assert_true(rt_idle(&rt));
        assert_null(rt.all);
    }
    Priority pr;
    assert_int_equal(rt_parse_priority("urgent", &pr, &e), ST_ARG);
    assert_non_null(strstr(e.msg, "urgent"));
    assert_int_equal(rt_parse_priority("high", &pr, &e), ST_OK);
    assert_int_equal(pr, PRIO_HIGH);
    rt_free(&rt);
}

typedef struct {
    char text[4096];
    int len, ends;
} Sink;

static void collect(int id, const char *s, int len, void *user) {
    Sink *k = user;
    if (len == 0) {
        k->ends++;
        return;
    }
    assert_true(k->len + len < (int)sizeof k->text);
    memcpy(k->text + k->len, s, (size_t)len);
    k->len += len;
    k->text[k->len] = 0;
}

static int run_streamed(const char *prompt, int max_tokens, const char *stop, Sink *k,
                        FinishReason *why) {
    Runtime rt;
    Err e = {{0}};
    EngineConfig c = config(2, 64, 0, 0);
    assert_int_equal(rt_init(&rt, &M, &c, &e), ST_OK);
    RtParams p = rt_params_default();
    p.prompt = prompt;
    p.max_tokens = max_tokens;
    p.stop[0] = stop;
    p.on_text = collect;
    p.user = k;
    memset(k, 0, sizeof *k);
    int id = rt_submit(&rt, &p, &e);
    assert_true(id >= 0);
    assert_int_equal(rt_run(&rt, &e), ST_OK);
    const Sequence *q = rt_sequence(&rt, id);
    *why = q->finish;
    int n = q->n_out;
    rt_free(&rt);
    return n;
}

static void a_stop_string_ends_the_text_just_before_it(void **state) {
    Sink full, cut;
    FinishReason why;
    run_streamed("ROMEO:", 60, NULL, &full, &why);
    assert_int_equal(why, FIN_LENGTH);
    assert_int_equal(full.ends, 1);
    assert_true(full.len > 40);
    /* a stop string taken from the middle of the unstopped text */
    char stop[8];
    memcpy(stop, full.text + full.len / 2, 5);
    stop[5] = 0;
    int at = (int)(strstr(full.text, stop) - full.text);
    run_streamed("ROMEO:", 60, stop, &cut, &why);
    assert_int_equal(why, FIN_STOP);
    assert_int_equal(cut.ends, 1);
    assert_int_equal(cut.len, at);
    assert_memory_equal(cut.text, full.text, (size_t)at);
}

/* "ROMEO:" greedy, 40 tokens, with the stop strings given (NULL-terminated),
 * one step at a time: after[t] = bytes streamed once step t is done. Returns
 * the number of steps. */
static int stream_by_step(const char *const *stops, Sink *k, int *after, int cap) {
    Runtime rt;
    Err e = {{0}};
    EngineConfig c = config(2, 64, 0, 0);
    assert_int_equal(rt_init(&rt, &M, &c, &e), ST_OK);
    RtParams p = rt_params_default();
    p.prompt = "ROMEO:";
    p.max_tokens = 40;
    for (int i = 0; stops[i]; i++) p.stop[i] = stops[i];
    p.on_text = collect;
    p.user = k;
    memset(k, 0, sizeof *k);
    assert_true(rt_submit(&rt, &p, &e) >= 0);
    int n = 0;
    while (!rt_idle(&rt)) {
        rt_step(&rt);
        assert_true(n < cap);
        after[n++] = k->len;
    }
    rt_free(&rt);
    return n;
}

/* The longest tail of text[0..n) that is the beginning, and not the whole, of
 * one of the stop strings: what the runtime may not stream yet. */
static int could_start_a_stop(const char *const *stops, const char *text, int n) {
    int best = 0;
    for (int i = 0; stops[i]; i++)
        for (int k = 1; k < (int)strlen(stops[i]) && k <= n; k++)
            if (k > best && memcmp(text + n - k, stops[i], (size_t)k) == 0) best = k;
    return best;
}

/* Hold-back, exactly: after every step the runtime has streamed all the text
 * so far except its longest tail that could begin a stop string; at the end,
 * when no stop string came, all of it. The stop string is built from the text
 * itself so that the tail matters: the last 3 bytes before a token boundary,
 * then the last 2, e.g. "the" + "he". Those 3 bytes begin it, while the last
 * byte alone, or the last 2, do not; the stop never occurs in the text, so
 * every byte held back must come out later. It is the second of two stops,
 * the first never seen at all. */
static void text_that_could_begin_a_stop_string_is_held_back_and_no_more(void **state) {
    enum { CAP = 64 };
    Sink full, got;
    int whole[CAP], held[CAP];
    const char *none[] = {NULL};
    int n = stream_by_step(none, &full, whole, CAP);
    assert_true(n > 20 && full.len > 60);
    char stop[8] = "";
    int at = -1;   /* the step whose boundary it was built at */
    for (int t = n / 3; t < n - 1 && at < 0; t++) {
        int b = whole[t];
        if (b < 3 || whole[t - 1] == b) continue;
        const char *x = full.text + b - 3;
        snprintf(stop, sizeof stop, "%.3s%.2s", x, x + 1);
        const char *list[] = {stop, NULL};
        if (!strchr(stop, '\n') && !strstr(full.text, stop) && could_start_a_stop(list, full.text, b) == 3 &&
            x[2] != stop[0] && memcmp(x + 1, stop, 2) != 0)
            at = t;
    }
    if (at < 0) fail_msg("no token boundary with a tail of 3 that only begins a stop");
    const char *stops[] = {"\x01\x02", stop, NULL};
    assert_int_equal(stream_by_step(stops, &got, held, CAP), n);
    assert_int_equal(got.len, full.len);
    assert_memory_equal(got.text, full.text, (size_t)full.len);
    for (int t = 0; t < n; t++) {
        int want = t == n - 1 ? whole[t] : whole[t] - could_start_a_stop(stops, full.text, whole[t]);
        if (held[t] != want)
            fail_msg("stop \"%s\": after step %d, %d bytes streamed of %d, want %d", stop, t + 1,
                     held[t], whole[t], want);
    }
    assert_int_equal(whole[at] - held[at], 3);   /* the case the stop was built for happened */
}

static void cancel_returns_the_blocks_and_spares_the_others(void **state) {
    Runtime rt;
    Err e = {{0}};
    EngineConfig c = config(4, 64, 0, 0);
    assert_int_equal(rt_init(&rt, &M, &c, &e), ST_OK);
    Job jobs[3];
    make_jobs(jobs, 3);
    for (int i = 0; i < 3; i++) jobs[i].id = submit(&rt, &jobs[i]);
    for (int k = 0; k < 4; k++) rt_step(&rt);
    int held = kv_held_blocks(&rt.en.pool);
    const Sequence *q = rt_sequence(&rt, jobs[1].id);
    assert_int_equal(q->state, SEQ_RUNNING);
    int its_blocks = q->kv.n_blocks;
    assert_true(its_blocks > 0);
    assert_int_equal(rt_cancel(&rt, jobs[1].id, &e), ST_OK);
    assert_int_equal(q->finish, FIN_CANCEL);
    assert_int_equal(kv_held_blocks(&rt.en.pool), held - its_blocks);
    assert_int_equal(rt_cancel(&rt, jobs[1].id, &e), ST_ARG);   /* already finished */
    assert_int_equal(rt_cancel(&rt, 999, &e), ST_ARG);
    assert_int_equal(rt_run(&rt, &e), ST_OK);
    for (int i = 0; i < 3; i += 2) {
        const Sequence *r = rt_sequence(&rt, jobs[i].id);
        jobs[i].n_out = r->n_out;
        memcpy(jobs[i].out, r->tokens + r->n_prompt, (size_t)r->n_out * sizeof(int));
        Job alone = jobs[i];
        run_alone(&alone);
        assert_same_tokens(&jobs[i], &alone, i);
    }
    assert_int_equal(kv_held_blocks(&rt.en.pool), 0);
    rt_free(&rt);
}

static void telemetry_is_ordered_and_consistent(void **state) {
    Job jobs[6];
    make_jobs(jobs, 6);
    EngineConfig c = config(3, 32, 8, 0);
    run_jobs(&c, jobs, 6);
    for (int i = 0; i < 6; i++) {
        Telemetry *t = &jobs[i].tm;
        assert_true(t->first_scheduled >= t->arrival);
        assert_true(t->first_token >= t->first_scheduled);
        assert_true(t->finished >= t->first_token);
        /* the same arithmetic in doubles, so exactly equal (cmocka's
         * assert_float_equal would round both sides to float) */
        assert_true(t->queue_wait == t->first_scheduled - t->arrival);
        assert_true(t->ttft == t->first_token - t->arrival);
        assert_true(t->e2e == t->finished - t->arrival);
        assert_true(t->tpot == (t->finished - t->first_token) / (jobs[i].n_out - 1));
        assert_int_equal(jobs[i].n_out, jobs[i].max_tokens);
    }
}

static void count_finish(int id, const Sequence *q, const Telemetry *t, const char *error, void *user) {
    assert_int_equal(q->state, SEQ_FINISHED);
    assert_true(t->finished >= t->arrival);
    ++*(int *)user;
}

/* D11: with release_finished a request is freed once it has ended and its
 * telemetry was delivered, so memory does not grow with the requests served:
 * after every round of 60 the engine's live heap is exactly what it was
 * before the first. Without it, the same rounds keep every request. */
static void finished_requests_are_released_and_memory_stays_flat(void **state) {
    for (int release = 1; release >= 0; release--) {
        Runtime rt;
        Err e = {{0}};
        EngineConfig c = config(4, 64, 0, 0);
        assert_int_equal(rt_init(&rt, &M, &c, &e), ST_OK);
        rt.release_finished = release;
        size_t base = mem_stats().live_bytes;
        int finished = 0;
        for (int round = 1; round <= 3; round++) {
            for (int i = 0; i < 60; i++) {
                RtParams p = rt_params_default();
                p.prompt = PROMPTS[i % NPROMPTS];
                p.max_tokens = 1 + i % 5;
                p.n = 1 + i % 3;
                p.sampling.temperature = i % 2 ? 0.7f : 0.0f;
                p.on_finish = count_finish;
                p.user = &finished;
                assert_true(rt_submit(&rt, &p, &e) >= 0);
            }
            assert_int_equal(rt_run(&rt, &e), ST_OK);
            assert_int_equal(finished, 120 * round);   /* 60 lines of 1, 2 or 3 samples */
            if (release) {
                assert_null(rt.all);
                assert_int_equal(mem_stats().live_bytes, base);
            } else {
                assert_true(mem_stats().live_bytes > base + (size_t)round * 120 * sizeof(int));
            }
        }
        rt_free(&rt);
    }
}

/* D6: a NaN weight makes every logit NaN. A request must end with an error
 * naming the position, never sample from NaN (garbage text, and a float to
 * int cast that is undefined), and give its blocks back like any other. */
static void non_finite_logits_end_the_request_with_an_error(void **state) {
    Err e = {{0}};
    Gguf g;
    assert_int_equal(gguf_open(&g, "data/shakespeare.gguf", &e), ST_OK);
    const GgufTensor *norm = gguf_tensor(&g, "output_norm.weight");
    assert_non_null(norm);
    assert_int_equal(norm->type, 0);   /* F32 */
    size_t at = (size_t)((const uint8_t *)norm->data - g.map);
    gguf_close(&g);
    size_t size;
    uint8_t *bytes = read_file("data/shakespeare.gguf", &size);
    assert_non_null(bytes);
    float nan = NAN;
    memcpy(bytes + at + 4 * 7, &nan, sizeof nan);   /* one element of the final norm */
    char path[64];
    write_temp(path, sizeof path, bytes, size);
    free(bytes);
    Model bad;
    assert_int_equal(model_load(&bad, path, NULL, &e), ST_OK);
    for (int plain = 1; plain >= 0; plain--) {   /* both quantizers of the activations */
        ops_set_isa(plain ? OPS_PLAIN : OPS_BEST);
        Runtime rt;
        EngineConfig c = config(4, 64, 0, 0);
        assert_int_equal(rt_init(&rt, &bad, &c, &e), ST_OK);
        RtParams p = rt_params_default();
        p.prompt = "ROMEO:";
        int greedy = rt_submit(&rt, &p, &e);
        p.sampling.temperature = 0.8f;
        p.n = 2;
        int sampled = rt_submit(&rt, &p, &e);
        assert_true(greedy >= 0 && sampled >= 0);
        assert_int_equal(rt_run(&rt, &e), ST_OK);
        int ids[] = {greedy, sampled, sampled + 1};
        for (int i = 0; i < 3; i++) {
            const Sequence *q = rt_sequence(&rt, ids[i]);
            assert_int_equal(q->state, SEQ_FINISHED);
            assert_int_equal(q->finish, FIN_ERROR);
            assert_int_equal(q->n_out, 0);
            const char *why = rt_error(&rt, ids[i]);
            assert_non_null(why);
            char want[80];   /* the prompt's last position: its logits give the first token */
            snprintf(want, sizeof want, "error: non-finite logits at position %d", q->n_prompt - 1);
            assert_string_equal(why, want);
        }
        assert_string_equal(rt_finish_name(FIN_ERROR), "error");
        assert_int_equal(kv_held_blocks(&rt.en.pool), 0);
        if (kv_pool_check(&rt.en.pool, &e)) fail_msg("pool: %s", e.msg);
        rt_free(&rt);
    }
    ops_set_isa(OPS_BEST);
    model_free(&bad);
    unlink(path);
}

/* ---- Llama 3's RoPE divisors (rope_freqs.weight) in the paged runtime:
 * the llama3 fixture's four prompts, submitted together and prefilled in
 * chunks of 5 through the paged cache, on the default and the plain path,
 * must give the float64 reference's greedy ids exactly (without the divisors
 * they part from the second token; fixtures/README.md). */

/* C escapes of greedy.tsv's prompt column (\n, \t, \\) in place. */
static void unescape(char *s) {
    char *o = s;
    for (; *s; s++) {
        if (*s == '\\' && s[1]) {
            s++;
            *o++ = *s == 'n' ? '\n' : *s == 't' ? '\t' : *s;
        } else {
            *o++ = *s;
        }
    }
    *o = 0;
}

/* The float64 reference's greedy ids for the four prompts of a fixture,
 * generated by four requests at once through the paged runtime (batched,
 * chunked, continuous), on the default and the plain path. */
static void reference_greedy_through_the_paged_runtime(const char *model_rel, const char *tsv_rel,
                                                      const char *name, Model *m) {
    char path[512], tsv[512];
    if (!fixture(path, sizeof path, model_rel) || !fixture(tsv, sizeof tsv, tsv_rel)) return;
    Err e = {{0}};
    assert_int_equal(model_load(m, path, NULL, &e), ST_OK);
    char *text = read_file(tsv, NULL), *save = NULL;
    assert_non_null(text);
    char *prompt[4];
    int want[4][64], n_want_prompt[4], rows = 0;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *f[5];
        int nf = 0;
        for (char *p = line; nf < 5 && p; nf++) {
            f[nf] = p;
            p = strchr(p, '\t');
            if (p) *p++ = 0;
        }
        if (line[0] == '#' || nf != 5 || strcmp(f[0], "f32") || strcmp(f[4], "reference float64")) continue;
        assert_true(rows < 4);
        unescape(f[1]);
        prompt[rows] = f[1];
        n_want_prompt[rows] = 0;
        for (char *p = f[2]; *p; n_want_prompt[rows]++) strtol(p, &p, 10);
        char *p = f[3];
        for (int i = 0; i < 64; i++) want[rows][i] = (int)strtol(p, &p, 10);
        rows++;
    }
    assert_int_equal(rows, 4);
    for (int plain = 0; plain < 2; plain++) {
        ops_set_isa(plain ? OPS_PLAIN : OPS_BEST);
        Runtime rt;
        EngineConfig c = config(4, 64, 5, 0);
        assert_int_equal(rt_init(&rt, m, &c, &e), ST_OK);
        int id[4];
        for (int r = 0; r < 4; r++) {
            RtParams p = rt_params_default();
            p.prompt = prompt[r];
            p.sampling.temperature = 0.0f;
            p.max_tokens = 64;
            p.ignore_eos = 1;
            id[r] = rt_submit(&rt, &p, &e);
            assert_true(id[r] >= 0);
        }
        assert_int_equal(rt_run(&rt, &e), ST_OK);
        for (int r = 0; r < 4; r++) {
            const Sequence *q = rt_sequence(&rt, id[r]);
            assert_int_equal(q->n_prompt, n_want_prompt[r]);
            assert_int_equal(q->n_out, 64);
            if (memcmp(q->tokens + q->n_prompt, want[r], sizeof want[r]) != 0) {
                int i = 0;
                while (q->tokens[q->n_prompt + i] == want[r][i]) i++;
                fail_msg("%s prompt %d (%s path): token %d is %d, the reference's %d", name, r,
                         plain ? "plain" : "default", i, q->tokens[q->n_prompt + i], want[r][i]);
            }
        }
        rt_free(&rt);
    }
    ops_set_isa(OPS_BEST);
    free(text);
}

static void llama3_rope_divisors_reach_the_paged_runtime(void **state) {
    Model m = {0};
    reference_greedy_through_the_paged_runtime("llama3/llama3-f32.gguf", "llama3/greedy.tsv", "llama3", &m);
    if (m.layers) assert_non_null(m.rope_freqs);
    model_free(&m);
}

/* Qwen2's biases, Qwen3's head norms and head size, both NEOX: the same
 * through the paged engine, four requests at once. */
static void qwen_architectures_reach_the_paged_runtime(void **state) {
    Model m = {0};
    reference_greedy_through_the_paged_runtime("qwen/qwen2/qwen2-f32.gguf", "qwen/qwen2/greedy.tsv", "qwen2", &m);
    if (m.layers) assert_non_null(m.layers[0].bq);
    model_free(&m);
    memset(&m, 0, sizeof m);
    reference_greedy_through_the_paged_runtime("qwen/qwen3/qwen3-f32.gguf", "qwen/qwen3/greedy.tsv", "qwen3", &m);
    if (m.layers) assert_true(m.layers[0].q_norm && m.cfg.head_dim * m.cfg.n_heads != m.cfg.dim);
    model_free(&m);
}

int main(int argc, char **argv) {
    select_tests(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(engine_alone_matches_the_contiguous_forward_loop),
        cmocka_unit_test(concurrent_greedy_equals_alone_for_mixed_prompt_lengths),
        cmocka_unit_test(sampled_requests_follow_their_own_seed_in_any_company),
        cmocka_unit_test(chunked_prefill_of_any_chunk_size_equals_alone),
        cmocka_unit_test(a_small_pool_preempts_and_every_output_is_still_exact),
        cmocka_unit_test(shared_prefixes_hit_the_cache_and_outputs_are_exact),
        cmocka_unit_test(preemption_resumes_from_the_prefix_cache),
        cmocka_unit_test(samples_of_one_prompt_fork_and_copy_only_on_write),
        cmocka_unit_test(samples_of_a_one_token_request_fork_before_it_finishes),
        cmocka_unit_test(a_request_ends_by_eos_length_or_context_whichever_comes_first),
        cmocka_unit_test(the_kv_map_draws_every_block_as_its_holders_see_it),
        cmocka_unit_test(a_high_request_behind_many_low_ones_gets_its_first_token_first),
        cmocka_unit_test(aging_bounds_how_long_a_low_request_waits),
        cmocka_unit_test(the_decode_loop_allocates_nothing),
        cmocka_unit_test(bad_requests_are_refused_with_a_reason_and_nothing_is_queued),
        cmocka_unit_test(a_stop_string_ends_the_text_just_before_it),
        cmocka_unit_test(text_that_could_begin_a_stop_string_is_held_back_and_no_more),
        cmocka_unit_test(cancel_returns_the_blocks_and_spares_the_others),
        cmocka_unit_test(telemetry_is_ordered_and_consistent),
        cmocka_unit_test(finished_requests_are_released_and_memory_stays_flat),
        cmocka_unit_test(non_finite_logits_end_the_request_with_an_error),
        cmocka_unit_test(llama3_rope_divisors_reach_the_paged_runtime),
        cmocka_unit_test(qwen_architectures_reach_the_paged_runtime),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
