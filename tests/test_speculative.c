/* test_speculative.c - speculative decoding inside the paged, batched engine.
 *
 * The claim: speculation changes how many tokens a step yields, never which
 * tokens. So the reference for every run with --speculate is the same run
 * without it: greedy text byte for byte, alone, sixteen at once, under
 * preemption, on every model; sampled text in distribution (a chi-square
 * test, since the random numbers are drawn differently). And the KV pool
 * must end as it always does: every block back, every refcount zero, the
 * prefix cache holding only tokens that were kept. Each test also checks
 * that guesses were made, accepted and rejected, or it would prove nothing.
 *
 * Models: data/shakespeare.gguf (in the repository), and the fixtures of
 * ../shared/fixtures (skipped when absent, a failure under CI=true). */
#include "runtime.h"
#include "base/mem.h"
#include "kernels/ops.h"
#include <math.h>
#include "testutil.h"

static Model M;

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

enum { MAXTEXT = 16384, MAXTOK = 256 };

/* One request: what to ask, and what came back. */
typedef struct {
    const char *prompt;
    int max_tokens;
    float temperature;
    uint64_t seed;
    const char *stop;
    int speculate;           /* the request's own field: -1 the engine's default */
    int cancel_at;           /* cancel it once it has this many tokens (0: never) */
    /* results */
    int id;
    char text[MAXTEXT];
    int n_text;
    int out[MAXTOK];
    int n_out;
    FinishReason finish;
} Req;

/* What a run did, from the engine's figures. */
typedef struct {
    long proposed, accepted, rewinds, rewound_blocks, preemptions, cow, steps;
} Figures;

static void on_text(int id, const char *s, int len, void *user) {
    Req *r = user;
    assert_true(r->n_text + len < MAXTEXT);
    memcpy(r->text + r->n_text, s, (size_t)len);
    r->n_text += len;
}

static EngineConfig config(int max_seqs, int max_draft, int spec_limit, int n_blocks) {
    EngineConfig c = engine_config_default();
    c.sched.max_seqs = max_seqs;
    c.sched.max_draft = max_draft;
    c.sched.spec_limit = spec_limit;
    c.n_blocks = n_blocks;
    return c;
}

/* Every block back: nobody holds one, every refcount 0, the pool sound. */
static void assert_pool_empty(Runtime *rt) {
    Err e = {{0}};
    const KvPool *pool = &rt->en.pool;
    assert_int_equal(kv_held_blocks(pool), 0);
    for (int b = 0; b < pool->NB; b++) assert_int_equal(pool->refcount[b], 0);
    assert_int_equal(kv_free_blocks(pool) + kv_cached_blocks(pool), pool->NB);
    if (kv_pool_check(pool, &e)) fail_msg("pool: %s", e.msg);
}

/* Submit every request at once, step to idle (the pool checked after every
 * step), collect. */
static Figures run(const Model *m, const EngineConfig *cfg, Req *r, int n) {
    Runtime rt;
    Err e = {{0}};
    assert_int_equal(rt_init(&rt, m, cfg, &e), ST_OK);
    for (int i = 0; i < n; i++) {
        RtParams p = rt_params_default();
        p.prompt = r[i].prompt;
        p.max_tokens = r[i].max_tokens;
        p.sampling.temperature = r[i].temperature;
        p.sampling.seed = r[i].seed;
        p.stop[0] = r[i].stop;
        p.speculate = r[i].speculate;
        p.on_text = on_text;
        p.user = &r[i];
        r[i].n_text = 0;
        r[i].id = rt_submit(&rt, &p, &e);
        if (r[i].id < 0) fail_msg("submit: %s", e.msg);
    }
    while (!rt_idle(&rt)) {
        rt_step(&rt);
        if (rt_check(&rt, &e)) fail_msg("pool after step %ld: %s", rt.en.steps, e.msg);
        for (int i = 0; i < n; i++) {
            const Sequence *q = rt_sequence(&rt, r[i].id);
            if (r[i].cancel_at > 0 && q->state != SEQ_FINISHED && q->n_out >= r[i].cancel_at)
                assert_int_equal(rt_cancel(&rt, r[i].id, &e), ST_OK);
        }
    }
    for (int i = 0; i < n; i++) {
        const Sequence *q = rt_sequence(&rt, r[i].id);
        assert_int_equal(q->state, SEQ_FINISHED);
        assert_true(q->n_out <= MAXTOK);
        r[i].n_out = q->n_out;
        memcpy(r[i].out, q->tokens + q->n_prompt, (size_t)q->n_out * sizeof(int));
        r[i].finish = q->finish;
    }
    assert_pool_empty(&rt);
    EngineStats es = rt_stats(&rt).engine;
    Figures f = {.proposed = es.spec_proposed, .accepted = es.spec_accepted,
                 .rewinds = es.sched.rewinds, .rewound_blocks = es.sched.rewound_blocks,
                 .preemptions = es.sched.preemptions, .cow = es.kv.cow_copies, .steps = es.steps};
    rt_free(&rt);
    return f;
}

/* got (with speculation) says exactly what want (without) said. */
static void assert_same(const Req *got, const Req *want, int n, const char *what) {
    for (int i = 0; i < n; i++) {
        if (got[i].n_out != want[i].n_out || memcmp(got[i].out, want[i].out, (size_t)got[i].n_out * sizeof(int))) {
            int k = 0;
            while (k < got[i].n_out && k < want[i].n_out && got[i].out[k] == want[i].out[k]) k++;
            fail_msg("%s: request %d (\"%.24s\"): %d tokens vs %d without speculation, first difference "
                     "at %d", what, i, got[i].prompt, got[i].n_out, want[i].n_out, k);
        }
        if (got[i].n_text != want[i].n_text || memcmp(got[i].text, want[i].text, (size_t)got[i].n_text))
            fail_msg("%s: request %d: the text differs (%d bytes vs %d)", what, i, got[i].n_text, want[i].n_text);
        assert_int_equal(got[i].finish, want[i].finish);
    }
}

/* The guesses were made, some accepted, some rejected: the run tested something. */
static void assert_speculated(const Figures *f, const char *what) {
    if (f->proposed == 0 || f->accepted == 0 || f->accepted == f->proposed || f->rewinds == 0)
        fail_msg("%s: %ld guesses, %ld accepted, %ld rewinds: the run did not exercise both ways", what,
                 f->proposed, f->accepted, f->rewinds);
}

/* Prompts that the model continues by copying (a line said three times),
 * and ordinary ones. */
#define LINE1 "And, by the world, and Romeo's dead,\n"
#define LINE2 "O Romeo, Romeo! wherefore art thou Romeo?\n"
#define LINE3 "Good night, good night! parting is such sweet sorrow.\n"
static const char *PROMPTS[] = {
    "ROMEO:\n" LINE1 LINE1 LINE1,
    "JULIET:\n" LINE2 LINE2 LINE2 "JULIET:\n",
    "ROMEO:",
    "First Citizen:\nBefore we proceed any further, hear me speak.",
    LINE3 LINE3 LINE3,
    "KING RICHARD II:\nNow, my lord, what says the",
    "MENENIUS:\nI tell you, friends, most charitable care\nHave the patricians of you.",
    "M",
};
enum { NPROMPTS = sizeof PROMPTS / sizeof PROMPTS[0] };

static void make(Req *r, int n, int max_tokens, int speculate) {
    memset(r, 0, (size_t)n * sizeof *r);
    for (int i = 0; i < n; i++) {
        r[i].prompt = PROMPTS[i % NPROMPTS];
        r[i].max_tokens = max_tokens + (i * 13) % 40;
        r[i].speculate = speculate;
    }
}

/* ---- greedy: byte for byte ---- */

static void greedy_text_is_the_same_with_speculation_alone(void **state) {
    static Req want[NPROMPTS], got[NPROMPTS];
    for (int i = 0; i < NPROMPTS; i++) {   /* the reference, once */
        make(&want[i], 1, 60, 0);
        want[i].prompt = PROMPTS[i];
        EngineConfig off = config(1, 0, 32, 0);
        run(&M, &off, &want[i], 1);
    }
    for (int k = 1; k <= 8; k *= 2) {
        Figures all = {0};
        for (int i = 0; i < NPROMPTS; i++) {
            got[i] = want[i];
            got[i].speculate = -1;   /* the engine's --speculate */
            EngineConfig on = config(1, k, 32, 0);
            Figures f = run(&M, &on, &got[i], 1);
            all.proposed += f.proposed, all.accepted += f.accepted, all.rewinds += f.rewinds;
            /* fewer steps: the point of it, when anything was accepted */
            if (f.accepted > 0) assert_true(f.steps < 1 + want[i].n_out);
        }
        char what[32];
        snprintf(what, sizeof what, "alone, K = %d", k);
        assert_same(got, want, NPROMPTS, what);
        assert_speculated(&all, what);
    }
}

static void greedy_text_is_the_same_with_speculation_in_a_batch_of_16(void **state) {
    static Req want[16], got[16];
    make(want, 16, 40, 0);
    make(got, 16, 40, 4);
    EngineConfig off = config(16, 0, 32, 0), on = config(16, 4, 256, 0);   /* no limit: guesses in every step */
    run(&M, &off, want, 16);
    Figures f = run(&M, &on, got, 16);
    assert_same(got, want, 16, "16 at once");
    assert_speculated(&f, "16 at once");
}

static void greedy_text_is_the_same_with_speculation_under_preemption(void **state) {
    static Req want[16], got[16];
    make(want, 16, 60, 0);
    make(got, 16, 60, 8);
    EngineConfig off = config(16, 0, 32, 0), on = config(16, 8, 256, 14);   /* 14 blocks for 16 requests */
    run(&M, &off, want, 16);
    Figures f = run(&M, &on, got, 16);
    assert_same(got, want, 16, "a pool of 14 blocks");
    assert_speculated(&f, "a pool of 14 blocks");
    assert_true(f.preemptions > 0);
    assert_true(f.rewound_blocks > 0);   /* some rejected guesses had crossed into a new block */
}

/* Every fixture model: alone, and four at once (at most 4 x 5 rows a step:
 * under the 36 where F32 products switch to OpenBLAS, whose sums in another
 * order could move a near tie; notes/executor.md). */
static void greedy_text_is_the_same_with_speculation_on_every_fixture(void **state) {
    static const char *const models[] = {
        "tiny/tiny-f32.gguf", "tiny/tiny-f16.gguf", "tiny/tiny-bf16.gguf", "tiny/tiny-q8_0.gguf",
        "tiny/tiny.bin", "rand/rand-f32.gguf", "rand/rand-f16.gguf", "quant/quant-f32.gguf",
        "quant/quant-q4_0.gguf", "quant/quant-q4_k_m.gguf", "quant/quant-q6_k.gguf",
        "llama3/llama3-f32.gguf", "llama3/llama3-q8_0.gguf", "qwen/qwen2/qwen2-f32.gguf",
        "qwen/qwen2/qwen2-q8_0.gguf", "qwen/qwen3/qwen3-f32.gguf", "qwen/qwen3/qwen3-q8_0.gguf",
        "chat/llama3/model.gguf", "chat/qwen2.5/model.gguf"};
    static Req want[4], got[4];
    long proposed = 0, accepted = 0;
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char path[512];
        if (!fixture(path, sizeof path, models[i])) return;
        Model m = {0};
        Err e = {{0}};
        if (model_load(&m, path, NULL, &e)) fail_msg("%s: %s", models[i], e.msg);
        for (int batch = 1; batch <= 4; batch += 3) {
            make(want, batch, 40, 0);
            make(got, batch, 40, 4);
            for (int r = 0; r < batch; r++) {   /* greedy past EOS too: a fixed length */
                want[r].max_tokens = got[r].max_tokens = m.cfg.seq_len / 2 < 64 ? m.cfg.seq_len / 2 : 64;
                want[r].prompt = got[r].prompt = PROMPTS[(r * 3) % NPROMPTS];
            }
            EngineConfig off = config(4, 0, 32, 0), on = config(4, 4, 32, 0);
            run(&m, &off, want, batch);
            Figures f = run(&m, &on, got, batch);
            assert_same(got, want, batch, models[i]);
            if (f.proposed == 0) fail_msg("%s: no guess was made", models[i]);
            proposed += f.proposed;
            accepted += f.accepted;
        }
        model_free(&m);
    }
    print_message("fixtures: %ld guesses, %ld accepted\n", proposed, accepted);
    assert_true(accepted > 0 && accepted < proposed);
}

/* A stop string ends the text where it would without speculation, even
 * when the step that found it appended guesses after it. */
static void a_stop_string_in_an_accepted_guess_ends_the_text_there(void **state) {
    static const struct { int prompt; const char *stop; } cases[] = {
        {0, "Romeo's"}, {0, "the dead"}, {0, "dead!"}, {0, "\n\n"}, {1, "Romeo, Romeo, Romeo"},
        {1, "JULIET:\nO"}, {1, "!\n"}};
    enum { NS = sizeof cases / sizeof cases[0] };
    static Req want[NS], got[NS];
    make(want, NS, 120, 0);
    make(got, NS, 120, 8);
    for (int i = 0; i < NS; i++) {
        want[i].prompt = got[i].prompt = PROMPTS[cases[i].prompt];
        want[i].stop = got[i].stop = cases[i].stop;
    }
    EngineConfig off = config(8, 0, 32, 0), on = config(8, 8, 256, 0);
    run(&M, &off, want, NS);
    Figures f = run(&M, &on, got, NS);
    assert_same(got, want, NS, "stop strings");
    for (int i = 0; i < NS; i++)
        if (want[i].finish != FIN_STOP) fail_msg("case %d: \"%s\" never came: the test needs a new stop", i, cases[i].stop);
    assert_true(f.accepted > 0);
}

/* n samples of one prompt fork from the first, share its blocks and copy
 * on write; each then speculates on its own. Greedy samples all say what
 * the request says alone. */
static void samples_of_one_prompt_fork_and_speculate_each_on_their_own(void **state) {
    for (int k = 0; k <= 8; k += 8) {
        Runtime rt;
        Err e = {{0}};
        EngineConfig c = config(8, k, 256, 0);
        assert_int_equal(rt_init(&rt, &M, &c, &e), ST_OK);
        RtParams p = rt_params_default();
        p.prompt = PROMPTS[0];
        p.max_tokens = 50;
        p.n = 4;
        int id = rt_submit(&rt, &p, &e);
        assert_true(id >= 0);
        assert_int_equal(rt_run(&rt, &e), ST_OK);
        const Sequence *first = rt_sequence(&rt, id);
        for (int s = 1; s < 4; s++) {
            const Sequence *q = rt_sequence(&rt, id + s);
            assert_int_equal(q->n_out, first->n_out);
            assert_memory_equal(q->tokens, first->tokens, (size_t)q->n_tokens * sizeof(int));
            if (k > 0) assert_true(q->spec_accepted > 0);
        }
        EngineStats es = rt_stats(&rt).engine;
        assert_true(es.kv.cow_copies >= 3);   /* each sample copied the shared last block */
        if (k > 0) assert_true(es.spec_proposed > es.spec_accepted && es.spec_accepted > 0);
        assert_pool_empty(&rt);
        rt_free(&rt);
    }
}

/* The prefix cache only ever sees committed tokens: after a run with many
 * rejected guesses, every registered block holds the tokens of the
 * request at its place in the chain (its depth from the first block). */
static void the_prefix_cache_holds_only_committed_tokens(void **state) {
    Runtime rt;
    Err e = {{0}};
    EngineConfig c = config(1, 8, 32, 0);
    assert_int_equal(rt_init(&rt, &M, &c, &e), ST_OK);
    RtParams p = rt_params_default();
    p.prompt = PROMPTS[2];
    p.max_tokens = 200;
    p.ignore_eos = 1;
    int id = rt_submit(&rt, &p, &e);
    assert_int_equal(rt_run(&rt, &e), ST_OK);
    const Sequence *q = rt_sequence(&rt, id);
    const KvPool *pool = &rt.en.pool;
    EngineStats es = rt_stats(&rt).engine;
    assert_true(es.sched.rewinds > 0);
    int registered = 0;
    for (int b = 0; b < pool->NB; b++) {
        if (!pool->registered[b]) continue;
        int depth = 0;
        for (int a = pool->parent[b]; a >= 0; a = pool->parent[a]) depth++;
        assert_true((depth + 1) * pool->BS <= q->n_tokens - 1);   /* committed: the last token has no K/V */
        assert_memory_equal(pool->tokens + (size_t)b * pool->BS, q->tokens + (size_t)depth * pool->BS,
                            (size_t)pool->BS * sizeof(int));
        registered++;
    }
    assert_int_equal(registered, (q->n_tokens - 1) / pool->BS);
    assert_pool_empty(&rt);
    rt_free(&rt);
}

/* ---- the scheduler's rule ---- */

/* Guesses join a step only while it has at most spec_limit tokens: in a
 * step whose own tokens already reach the limit they all stay out (the
 * step is compute-bound), and as the batch thins out they come back. */
static void guesses_stay_out_of_a_step_that_is_already_full(void **state) {
    Runtime rt;
    Err e = {{0}};
    enum { LIMIT = 12 };
    EngineConfig c = config(16, 4, LIMIT, 0);
    assert_int_equal(rt_init(&rt, &M, &c, &e), ST_OK);
    for (int i = 0; i < 16; i++) {
        RtParams p = rt_params_default();
        p.prompt = PROMPTS[i % 2 ? 0 : 4];   /* prompts it copies: guesses every step */
        p.max_tokens = 10 + 5 * i;
        assert_true(rt_submit(&rt, &p, &e) >= 0);
    }
    int full = 0, guessing = 0;
    while (!rt_idle(&rt)) {
        const StepPlan *p = rt_step(&rt)->plan;
        int own = p->n_tokens - p->n_draft_tokens;
        if (p->n_draft_tokens > 0) {
            assert_true(p->n_tokens <= LIMIT);
            guessing++;
        }
        if (own >= LIMIT) assert_int_equal(p->n_draft_tokens, 0);
        if (p->n_spec_off > 0) {
            assert_true(p->n_tokens >= LIMIT);   /* a guess is left out only when no room is left */
            full++;
        }
    }
    print_message("%d steps left guesses out, %d steps verified some\n", full, guessing);
    assert_true(full > 0 && guessing > 0);
    assert_pool_empty(&rt);
    rt_free(&rt);
}

/* ---- the trace and the figures ---- */

/* The verbose trace says, per step and sequence, how many tokens were
 * guessed and how many accepted; the step lines say it per step. Both add
 * up to the engine's totals, and to each request's telemetry. */
static void the_trace_tells_every_guess_and_the_totals_agree(void **state) {
    Runtime rt;
    Err e = {{0}};
    EngineConfig c = config(4, 4, 64, 0);
    c.clock = CLOCK_STEPS;
    assert_int_equal(rt_init(&rt, &M, &c, &e), ST_OK);
    char *text = NULL;
    size_t text_n = 0;
    FILE *tf = open_memstream(&text, &text_n);
    Trace t;
    assert_int_equal(trace_init(&t, TRACE_VERBOSE, tf, NULL, 0, 1, &e), ST_OK);
    assert_int_equal(rt_set_trace(&rt, &t, &e), ST_OK);
    int id[4];
    for (int i = 0; i < 4; i++) {
        RtParams p = rt_params_default();
        p.prompt = PROMPTS[i];
        p.max_tokens = 40;
        id[i] = rt_submit(&rt, &p, &e);
        assert_true(id[i] >= 0);
    }
    assert_int_equal(rt_run(&rt, &e), ST_OK);
    trace_finish(&t);
    fclose(tf);
    long seq_guessed = 0, seq_accepted = 0, step_guessed = 0, step_accepted = 0, per_req[4] = {0};
    for (char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        int who, g, a, r;
        long step;
        const char *at = strchr(line, ']');
        if (!at) continue;
        if (sscanf(at + 1, " #%d guessed %d token%*[s ]after its own: %d accepted, %d rewound", &who, &g, &a, &r) == 4) {
            assert_int_equal(g, a + r);
            seq_guessed += g, seq_accepted += a;
            for (int i = 0; i < 4; i++) per_req[i] += who == id[i] ? a : 0;
        }
        const char *sp = strstr(line, "; guessed "), *end = strchr(line, '\n');
        if (sscanf(at + 1, " step %ld:", &step) == 1 && sp && (!end || sp < end) &&
            sscanf(sp, "; guessed %d, accepted %d", &g, &a) == 2)
            step_guessed += g, step_accepted += a;
    }
    EngineStats es = rt_stats(&rt).engine;
    assert_true(es.spec_proposed > 0 && es.spec_accepted > 0);
    assert_int_equal(seq_guessed, es.spec_proposed);
    assert_int_equal(seq_accepted, es.spec_accepted);
    assert_int_equal(step_guessed, es.spec_proposed);
    assert_int_equal(step_accepted, es.spec_accepted);
    for (int i = 0; i < 4; i++) {
        const Telemetry *tm = rt_telemetry(&rt, id[i]);
        assert_int_equal(tm->accepted, per_req[i]);
        assert_int_equal(tm->accepted, rt_sequence(&rt, id[i])->spec_accepted);
        assert_true(tm->guesses >= tm->accepted);
    }
    trace_free(&t);
    free(text);
    rt_free(&rt);
}

/* ---- sampling: the same distribution ---- */

/* N requests of one prompt at temperature 1, seeds seed0.., six tokens
 * each; count[j][t]: how many had token t as output token j + 2 (the
 * second and third tokens: the first comes from the prompt's step, where
 * nothing is guessed). Returns the engine's figures. */
static Figures sample_counts(const Model *m, int speculate, int n, uint64_t seed0, int (*count)[4096]) {
    Runtime rt;
    Err e = {{0}};
    EngineConfig c = config(16, speculate, 256, 0);
    assert_int_equal(rt_init(&rt, m, &c, &e), ST_OK);
    rt.release_finished = 0;
    int first = -1;
    for (int i = 0; i < n; i++) {
        RtParams p = rt_params_default();
        p.prompt = "to them, and therefore, and therefore, and";   /* the model repeats it, a little */
        p.max_tokens = 6;
        p.ignore_eos = 1;
        p.sampling.temperature = 1.0f;
        p.sampling.seed = seed0 + (uint64_t)i;
        int id = rt_submit(&rt, &p, &e);
        if (id < 0) fail_msg("submit: %s", e.msg);
        if (first < 0) first = id;
    }
    assert_int_equal(rt_run(&rt, &e), ST_OK);
    for (int i = 0; i < n; i++) {
        const Sequence *q = rt_sequence(&rt, first + i);
        assert_int_equal(q->n_out, 6);
        for (int j = 0; j < 2; j++) count[j][q->tokens[q->n_prompt + 1 + j]]++;
    }
    assert_pool_empty(&rt);
    EngineStats es = rt_stats(&rt).engine;
    Figures f = {.proposed = es.spec_proposed, .accepted = es.spec_accepted, .rewinds = es.sched.rewinds};
    rt_free(&rt);
    return f;
}

/* On a tiny fixture, the second and third sampled tokens of 3,000
 * requests with speculation (K = 4) and of 3,000 without: a two-sample chi-square
 * test of homogeneity for each position, at a significance of 0.001 each
 * (0.002 for the pair). Tokens seen fewer than 10 times in both runs
 * together are pooled into one category, so that no expected count is
 * small. The two runs draw with different seeds, so that they are
 * independent samples (with the same seeds they would share most draws,
 * and agree far better than chance). The seeds are fixed: the verdict
 * repeats. This model's distributions are flat (it accepts a few percent
 * of the guesses), so the test guards the whole path (rows, positions,
 * rewinds) more than the rule's arithmetic, which test_sampler's
 * verify_draws_exactly_the_sampler_distribution pins down. */
static void sampled_tokens_keep_their_distribution_with_speculation(void **state) {
    char path[512];
    if (!fixture(path, sizeof path, "tiny/tiny-q8_0.gguf")) return;
    Model m = {0};
    Err e = {{0}};
    if (model_load(&m, path, NULL, &e)) fail_msg("%s", e.msg);
    assert_true(m.cfg.vocab_size <= 4096);
    enum { N = 3000 };
    static int off[2][4096], on[2][4096];
    memset(off, 0, sizeof off);
    memset(on, 0, sizeof on);
    sample_counts(&m, 0, N, 1, off);
    Figures f = sample_counts(&m, 4, N, 1 + N, on);   /* other seeds: two independent samples */
    assert_speculated(&f, "sampling");
    for (int j = 0; j < 2; j++) {
        double chi2 = 0.0;
        int cats = 0, pooled_off = 0, pooled_on = 0, distinct = 0;
        for (int t = 0; t < m.cfg.vocab_size; t++) {
            int a = off[j][t], b = on[j][t];
            distinct += a + b > 0;
            if (a + b < 10) {
                pooled_off += a, pooled_on += b;
                continue;
            }
            chi2 += (double)(a - b) * (a - b) / (a + b);   /* equal sample sizes */
            cats++;
        }
        if (pooled_off + pooled_on > 0) {
            chi2 += (double)(pooled_off - pooled_on) * (pooled_off - pooled_on) / (pooled_off + pooled_on);
            cats++;
        }
        assert_true(cats >= 4);   /* a distribution, not a certainty */
        double limit = chi_square_critical(cats - 1, 3.0902);
        print_message("output token %d: %d distinct tokens in %d categories, chi-square %.1f (limit %.1f at "
                      "0.001)\n", j + 2, distinct, cats, chi2, limit);
        if (chi2 > limit) fail_msg("output token %d: chi-square %.1f above %.1f", j + 2, chi2, limit);
    }
    model_free(&m);
}

/* ---- the pool after a soak ---- */

/* Hundreds of requests with speculation on, arriving while others run:
 * mixed lengths, guesses per request, temperatures, stop strings, samples
 * of one prompt, cancels, and a pool small enough to preempt. Afterwards
 * every block is back, every refcount is zero, the pool is sound (checked
 * after every step too), and guesses were rejected across block edges. */
static void a_soak_with_speculation_gives_every_block_back(void **state) {
    Runtime rt;
    Err e = {{0}};
    EngineConfig c = config(8, 8, 64, 24);
    assert_int_equal(rt_init(&rt, &M, &c, &e), ST_OK);
    rt.release_finished = 1;
    uint64_t x = 12345;
    int submitted = 0;
    enum { N = 240 };
    static const char *const stops[] = {NULL, NULL, "Romeo", "\n\n", "the"};
    while (submitted < N || !rt_idle(&rt)) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int arrivals = submitted < N ? (int)(x >> 61) : 0;   /* 0..7 this step */
        for (int a = 0; a < arrivals && submitted < N; a++, submitted++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            RtParams p = rt_params_default();
            p.prompt = PROMPTS[(x >> 33) % NPROMPTS];
            p.max_tokens = 1 + (int)((x >> 20) % 90);
            p.speculate = (int)((x >> 40) % 10) - 1;   /* -1 (the engine's 8), or 0..8 */
            p.sampling.temperature = (x >> 45) % 3 == 0 ? 0.9f : 0.0f;
            p.sampling.top_k = (x >> 47) % 2 ? 20 : 0;
            p.sampling.seed = x >> 10;
            p.stop[0] = stops[(x >> 50) % 5];
            p.n = (x >> 53) % 8 == 0 ? 3 : 1;
            int id = rt_submit(&rt, &p, &e);
            if (id < 0) fail_msg("submit: %s", e.msg);
            if ((x >> 57) % 16 == 0) rt_cancel(&rt, id, &e);   /* at once, or never */
        }
        rt_step(&rt);
        if (rt_check(&rt, &e)) fail_msg("pool after step %ld: %s", rt.en.steps, e.msg);
    }
    assert_pool_empty(&rt);
    EngineStats es = rt_stats(&rt).engine;
    print_message("soak: %ld steps, %ld guesses, %ld accepted, %ld rewinds giving back %ld blocks, "
                  "%ld preemptions, %ld copies on write\n", es.steps, es.spec_proposed, es.spec_accepted,
                  es.sched.rewinds, es.sched.rewound_blocks, es.sched.preemptions, es.kv.cow_copies);
    assert_true(es.spec_accepted > 0 && es.sched.rewound_blocks > 0);
    assert_true(es.sched.preemptions > 0 && es.kv.cow_copies > 0);
    assert_int_equal(es.step_allocations, 0);
    rt_free(&rt);
}

int main(int argc, char **argv) {
    select_tests(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(greedy_text_is_the_same_with_speculation_alone),
        cmocka_unit_test(greedy_text_is_the_same_with_speculation_in_a_batch_of_16),
        cmocka_unit_test(greedy_text_is_the_same_with_speculation_under_preemption),
        cmocka_unit_test(greedy_text_is_the_same_with_speculation_on_every_fixture),
        cmocka_unit_test(a_stop_string_in_an_accepted_guess_ends_the_text_there),
        cmocka_unit_test(samples_of_one_prompt_fork_and_speculate_each_on_their_own),
        cmocka_unit_test(the_prefix_cache_holds_only_committed_tokens),
        cmocka_unit_test(guesses_stay_out_of_a_step_that_is_already_full),
        cmocka_unit_test(the_trace_tells_every_guess_and_the_totals_agree),
        cmocka_unit_test(sampled_tokens_keep_their_distribution_with_speculation),
        cmocka_unit_test(a_soak_with_speculation_gives_every_block_back),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
