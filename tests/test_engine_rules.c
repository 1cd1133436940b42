/* test_engine_rules.c - the engine's own rules (src/engine.c) on a model
 * built by hand, so that every token is known in advance: when a request
 * ends, that its slot and blocks are free for the next step, the order of a
 * step's report, and the forking of samples.
 *
 * The model: V = D = 16, one layer whose weights are all zero, so attention
 * and the FFN add nothing and the residual stream of a token is its
 * embedding; embeddings are one-hot (row t is e_t) and classifier row j is
 * e_{j-1}, so the logits of token t are sqrt(D)-ish at t + 1 (mod V) and 0
 * elsewhere. Greedy sampling then continues any prompt ending in t with
 * t + 1, t + 2, ... (mod V), whatever the batch, the chunks or the cache:
 * the "successor model". tests/test_engine.c runs the same rules on a real
 * model, where outputs can only be compared, not predicted. */
#include "engine.h"
#include "base/mem.h"
#include <math.h>
#include "testutil.h"

enum { V = 16, D = 16, H = 2, HKV = 1, S = 8, F = 8, P = 32, BS = 4 };

static float ZERO[D * D];            /* every weight matrix of the layer (the largest is D x D) */
static float ONES[D];                /* the norms */
static float EMBD[V * D];            /* (V, D) one-hot rows */
static float OUT[V * D];             /* (V, D) row j = e_{j-1} */
static Layer LAYER;
static Model M;

static int setup(void **state) {
    for (int i = 0; i < D; i++) ONES[i] = 1.0f;
    for (int t = 0; t < V; t++) EMBD[t * D + t] = 1.0f;
    for (int j = 0; j < V; j++) OUT[j * D + (j + V - 1) % V] = 1.0f;
    LAYER = (Layer){ONES, {DT_F32, H * S, D, ZERO}, {DT_F32, HKV * S, D, ZERO},
                    {DT_F32, HKV * S, D, ZERO}, {DT_F32, D, H * S, ZERO}, ONES,
                    {DT_F32, F, D, ZERO}, {DT_F32, D, F, ZERO}, {DT_F32, F, D, ZERO}};
    M = (Model){.cfg = {.dim = D, .hidden_dim = F, .n_layers = 1, .n_heads = H, .n_kv_heads = HKV,
                        .head_dim = S, .vocab_size = V, .seq_len = P, .n_rot = S,
                        .rope_base = 10000.0f, .rms_eps = 1e-5f},
                .format = "by hand", .wtype = DT_F32, .tok_embd = {DT_F32, V, D, EMBD},
                .layers = &LAYER, .out_norm = ONES, .output = {DT_F32, V, D, OUT}};
    return 0;
}

static int next_token(int t) { return (t + 1) % V; }

static EngineConfig config(SchedPolicy policy, int max_seqs, int chunk) {
    EngineConfig c = engine_config_default();
    c.block_size = BS;
    c.n_blocks = 16;
    c.sched = (SchedConfig){.policy = policy, .token_budget = 16, .max_seqs = max_seqs,
                            .chunk = chunk, .aging_steps = 0};
    c.clock = CLOCK_STEPS;
    return c;
}

static void engine_start(Engine *en, const EngineConfig *c) {
    Err e = {{0}};
    if (engine_init(en, &M, c, &e)) fail_msg("engine_init: %s", e.msg);
}

/* A greedy request as the runtime makes one (src/runtime.c: new_request):
 * its prompt, max_tokens, eos (-1: none) and cap (0: prompt + max_tokens,
 * at most P + 1). */
static void seq_init(Sequence *q, int id, Priority prio, const int *prompt, int n, int max_tokens,
                     int eos, int cap) {
    Err e = {{0}};
    memset(q, 0, sizeof *q);
    if (!cap) cap = n + max_tokens < P + 1 ? n + max_tokens : P + 1;
    q->id = id;
    q->priority = prio;
    q->state = SEQ_WAITING;
    q->tokens = malloc((size_t)cap * sizeof(int));
    assert_non_null(q->tokens);
    memcpy(q->tokens, prompt, (size_t)n * sizeof(int));
    q->cap = cap;
    q->n_prompt = q->n_tokens = n;
    q->max_tokens = max_tokens;
    q->eog[0] = eos;
    q->n_eog = eos >= 0;
    q->slot = -1;
    q->arrival_step = -1;
    SamplerParams sp = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 0};
    assert_int_equal(sampler_init(&q->sampler, V, sp, &e), ST_OK);
}

static void add(Engine *en, Sequence *q, Sequence *fork_of) {
    Err e = {{0}};
    if (engine_add(en, q, fork_of, &e)) fail_msg("engine_add: %s", e.msg);
}

static void seq_drop(Engine *en, Sequence *q) {
    engine_drop(en, q);
    sampler_free(&q->sampler);
    free(q->tokens);
}

/* Every block is back: held by nobody, free or cached. */
static void assert_pool_empty(const Engine *en) {
    assert_int_equal(kv_held_blocks(&en->pool), 0);
    assert_int_equal(kv_available_blocks(&en->pool), en->pool.NB);
    Err e = {{0}};
    if (kv_pool_check(&en->pool, &e)) fail_msg("pool: %s", e.msg);
}

static void assert_out(const StepReport *r, int i, const Sequence *q, int token, FinishReason why) {
    if (i >= r->n_out)
        fail_msg("step %ld: output %d wanted (#%d), the report has %d", r->step, i, q->id, r->n_out);
    const StepOutput *o = &r->out[i];
    if (o->seq != q || o->token != token || o->finish != why)
        fail_msg("step %ld, output %d: #%d token %d finish %d; want #%d token %d finish %d", r->step, i,
                 o->seq->id, o->token, o->finish, q->id, token, why);
}

/* append checks EOS, then max_tokens, then the context (cap), after each
 * token; prompt [1] continues 2, 3, 4, ... one token a step, the first in
 * step 1. The request ends in the step of its last token, and its blocks are
 * back before engine_step returns. */
static void a_request_ends_at_eos_then_length_then_context(void **st) {
    static const struct { int eos, max_tokens, cap; FinishReason why; int n_out; } cases[] = {
        {4, 10, 11, FIN_EOS, 3},       /* 2, 3, 4 = eos */
        {2, 10, 11, FIN_EOS, 1},       /* the first token is eos: in the prompt's step */
        {9, 2, 11, FIN_LENGTH, 2},     /* 2, 3: max_tokens */
        {9, 10, 3, FIN_CONTEXT, 2},    /* 1, 2, 3: cap reached */
        {3, 2, 3, FIN_EOS, 2},         /* all three at once: eos first */
        {9, 2, 3, FIN_LENGTH, 2},      /* length and context at once: length first */
        {-1, 20, 0, FIN_LENGTH, 20},   /* no eos: through 16 and on, wrapping round the vocabulary */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        Engine en;
        EngineConfig cfg = config(SCHED_FCFS, 2, 0);
        engine_start(&en, &cfg);
        Sequence q;
        int prompt[1] = {1};
        seq_init(&q, 7, PRIO_NORMAL, prompt, 1, cases[c].max_tokens, cases[c].eos, cases[c].cap);
        add(&en, &q, NULL);
        for (int k = 1; k <= cases[c].n_out; k++) {
            assert_int_equal(q.state, k == 1 ? SEQ_WAITING : SEQ_RUNNING);
            const StepReport *r = engine_step(&en);
            assert_int_equal(r->step, k);
            assert_int_equal(r->n_out, 1);
            int last = k == cases[c].n_out;
            assert_out(r, 0, &q, (1 + k) % V, last ? cases[c].why : FIN_NONE);
        }
        if (q.state != SEQ_FINISHED || q.finish != cases[c].why)
            fail_msg("case %zu: state %d finish %d after %d tokens; want finished, %d", c, q.state,
                     q.finish, q.n_out, cases[c].why);
        assert_int_equal(q.n_out, cases[c].n_out);
        assert_int_equal(q.n_tokens, 1 + cases[c].n_out);
        for (int i = 1; i < q.n_tokens; i++) assert_int_equal(q.tokens[i], next_token(q.tokens[i - 1]));
        assert_int_equal(q.slot, -1);
        assert_true(engine_idle(&en));
        assert_pool_empty(&en);
        seq_drop(&en, &q);
        engine_free(&en);
    }
}

/* One slot. A (prompt 3, 4, 5; 3 tokens) finishes in step 3 and gives its
 * slot and blocks back inside that step, so B is admitted in step 4, not
 * later: continuous batching. A stop string found afterwards (engine_finish
 * on a finished request) changes only the reason. The steps allocate
 * nothing. */
static void a_finished_request_gives_its_slot_to_a_waiting_one_the_next_step(void **st) {
    Engine en;
    EngineConfig cfg = config(SCHED_FCFS, 1, 0);
    engine_start(&en, &cfg);
    Sequence A, B;
    int pa[3] = {3, 4, 5}, pb[1] = {10};
    seq_init(&A, 0, PRIO_NORMAL, pa, 3, 3, -1, 0);
    seq_init(&B, 1, PRIO_NORMAL, pb, 1, 2, -1, 0);
    add(&en, &A, NULL);
    add(&en, &B, NULL);
    assert_int_equal(engine_waiting(&en), 2);

    const StepReport *r = engine_step(&en);
    assert_out(r, 0, &A, 6, FIN_NONE);
    assert_int_equal(r->n_out, 1);
    assert_int_equal(engine_waiting(&en), 1);   /* B: no slot */
    r = engine_step(&en);
    assert_out(r, 0, &A, 7, FIN_NONE);
    r = engine_step(&en);
    assert_out(r, 0, &A, 8, FIN_LENGTH);
    assert_int_equal(engine_running(&en), 0);
    assert_pool_empty(&en);
    assert_int_equal(A.blocks_released, 2);   /* positions 0..5 in blocks of 4 */

    engine_finish(&en, &A, FIN_STOP);
    assert_int_equal(A.finish, FIN_STOP);
    assert_int_equal(engine_waiting(&en), 1);
    assert_pool_empty(&en);

    r = engine_step(&en);
    assert_int_equal(r->step, 4);
    assert_int_equal(r->plan->n_admitted, 1);
    assert_ptr_equal(r->plan->admitted[0], &B);
    assert_out(r, 0, &B, 11, FIN_NONE);
    r = engine_step(&en);
    assert_out(r, 0, &B, 12, FIN_LENGTH);
    assert_true(engine_idle(&en));
    assert_pool_empty(&en);

    assert_int_equal(en.tokens_out, 5);
    assert_int_equal(en.tokens_run, 3 + 1 + 1 + 1 + 1);   /* A's prompt, 2 decodes; B's prompt, 1 decode */
    assert_int_equal(en.step_allocations, 0);
    seq_drop(&en, &A);
    seq_drop(&en, &B);
    engine_free(&en);
}

/* A step reports its tokens in the plan's order: running requests by rank,
 * then the admitted ones by rank. L (low) runs alone in step 1; H (high) and
 * N (normal) arrive after it. Step 2: L decodes, then H and N are admitted.
 * Step 3: H, N, L by rank, and H and L, both at max_tokens, finish in that
 * order. */
static void a_step_reports_its_tokens_best_rank_first(void **st) {
    Engine en;
    EngineConfig cfg = config(SCHED_PRIORITY, 3, 0);
    engine_start(&en, &cfg);
    Sequence L, N, Hi;
    int pl[1] = {0}, pn[1] = {5}, ph[1] = {10};
    seq_init(&L, 0, PRIO_LOW, pl, 1, 3, -1, 0);
    seq_init(&N, 1, PRIO_NORMAL, pn, 1, 5, -1, 0);
    seq_init(&Hi, 2, PRIO_HIGH, ph, 1, 2, -1, 0);
    add(&en, &L, NULL);
    const StepReport *r = engine_step(&en);
    assert_out(r, 0, &L, 1, FIN_NONE);
    add(&en, &N, NULL);
    add(&en, &Hi, NULL);

    r = engine_step(&en);
    assert_int_equal(r->n_out, 3);
    assert_out(r, 0, &L, 2, FIN_NONE);
    assert_out(r, 1, &Hi, 11, FIN_NONE);
    assert_out(r, 2, &N, 6, FIN_NONE);

    r = engine_step(&en);
    assert_int_equal(r->n_out, 3);
    assert_out(r, 0, &Hi, 12, FIN_LENGTH);
    assert_out(r, 1, &N, 7, FIN_NONE);
    assert_out(r, 2, &L, 3, FIN_LENGTH);
    assert_int_equal(engine_running(&en), 1);

    while (!engine_idle(&en)) engine_step(&en);
    assert_int_equal(N.n_out, 5);
    assert_pool_empty(&en);
    seq_drop(&en, &L), seq_drop(&en, &N), seq_drop(&en, &Hi);
    engine_free(&en);
}

/* Two samples wait on A (prompt 1..5, read in chunks of 2). They are forked
 * in the step whose chunk reaches A's last prompt token (step 3), before A's
 * own token, each into a free slot, sharing A's 2 blocks (refcount 3), with
 * A's computed positions, and each samples its first token from A's logits.
 * In step 4 all three write position 5, in the shared, partly filled block
 * 1: A (ranked first) copies it, then C1 copies it, and C2, left its only
 * holder, writes in place. Block 0, full, stays shared. */
static void samples_fork_when_the_prompt_is_computed_and_copy_only_on_write(void **st) {
    Engine en;
    EngineConfig cfg = config(SCHED_FCFS, 3, 2);
    engine_start(&en, &cfg);
    Sequence A, C1, C2;
    int prompt[5] = {1, 2, 3, 4, 5};
    seq_init(&A, 0, PRIO_NORMAL, prompt, 5, 3, -1, 0);
    seq_init(&C1, 1, PRIO_NORMAL, prompt, 5, 3, -1, 0);
    seq_init(&C2, 2, PRIO_NORMAL, prompt, 5, 3, -1, 0);
    add(&en, &A, NULL);
    add(&en, &C1, &A);
    add(&en, &C2, &A);
    assert_int_equal(engine_waiting(&en), 1);   /* the samples are in no queue */

    for (int k = 1; k <= 2; k++) {
        const StepReport *r = engine_step(&en);
        assert_int_equal(r->n_out, 0);           /* a chunk short of the end */
        assert_int_equal(engine_running(&en), 1);
        assert_int_equal(C1.state, SEQ_WAITING);
        assert_int_equal(C1.slot, -1);
    }
    const StepReport *r = engine_step(&en);
    assert_int_equal(r->n_out, 3);
    assert_out(r, 0, &C1, 6, FIN_NONE);
    assert_out(r, 1, &C2, 6, FIN_NONE);
    assert_out(r, 2, &A, 6, FIN_NONE);
    for (int i = 0; i < 2; i++) {
        const StepOutput *o = &r->out[i];
        assert_int_equal(o->fork.from, A.id);
        assert_int_equal(o->fork.slot, 1 + i);
        assert_int_equal(o->fork.blocks, 2);
        assert_int_equal(o->fork.tokens, 5);
    }
    assert_int_equal(r->out[2].fork.from, -1);
    assert_int_equal(engine_running(&en), 3);
    assert_int_equal(C1.n_computed, 5);
    assert_int_equal(kv_held_blocks(&en.pool), 2);
    for (int j = 0; j < 2; j++) {
        assert_int_equal(C1.kv.table[j], A.kv.table[j]);
        assert_int_equal(C2.kv.table[j], A.kv.table[j]);
        assert_int_equal(en.pool.refcount[A.kv.table[j]], 3);
    }
    int shared = A.kv.table[1];

    r = engine_step(&en);
    assert_int_equal(r->plan->n_cow, 2);
    assert_ptr_equal(r->plan->cow[0], &A);
    assert_ptr_equal(r->plan->cow[1], &C1);
    assert_int_equal(C2.kv.table[1], shared);
    assert_int_not_equal(A.kv.table[1], shared);
    assert_int_not_equal(C1.kv.table[1], shared);
    assert_int_not_equal(A.kv.table[1], C1.kv.table[1]);
    assert_int_equal(en.pool.refcount[A.kv.table[0]], 3);
    assert_int_equal(kv_held_blocks(&en.pool), 4);
    assert_int_equal(r->n_out, 3);
    for (int i = 0; i < 3; i++) assert_int_equal(r->out[i].token, 7);

    r = engine_step(&en);   /* the third token: all finish by length */
    assert_int_equal(r->n_out, 3);
    for (int i = 0; i < 3; i++) assert_int_equal(r->out[i].finish, FIN_LENGTH);
    assert_true(engine_idle(&en));
    assert_pool_empty(&en);
    seq_drop(&en, &A), seq_drop(&en, &C1), seq_drop(&en, &C2);
    engine_free(&en);
}

/* One slot: the sample finds none free when A's prompt is computed, so it is
 * queued to run on its own; when A has finished (step 2), it is admitted and
 * finds A's full first block in the prefix cache: only position 4 is run. */
static void a_sample_with_no_free_slot_runs_alone_from_the_prefix_cache(void **st) {
    Engine en;
    EngineConfig cfg = config(SCHED_FCFS, 1, 0);
    engine_start(&en, &cfg);
    Sequence A, C;
    int prompt[5] = {1, 2, 3, 4, 5};
    seq_init(&A, 0, PRIO_NORMAL, prompt, 5, 2, -1, 0);
    seq_init(&C, 1, PRIO_NORMAL, prompt, 5, 2, -1, 0);
    add(&en, &A, NULL);
    add(&en, &C, &A);

    const StepReport *r = engine_step(&en);
    assert_int_equal(r->n_out, 1);
    assert_out(r, 0, &A, 6, FIN_NONE);
    assert_int_equal(engine_waiting(&en), 1);   /* C, queued */
    assert_null(C.fork_parent);
    assert_null(A.fork_next);
    r = engine_step(&en);
    assert_out(r, 0, &A, 7, FIN_LENGTH);

    r = engine_step(&en);
    assert_ptr_equal(r->plan->admitted[0], &C);
    assert_int_equal(r->plan->items[0].from, 4);
    assert_int_equal(r->plan->items[0].n, 1);
    assert_int_equal(C.prefix_hit_tokens, 4);
    assert_out(r, 0, &C, 6, FIN_NONE);
    assert_int_equal(r->out[0].fork.from, -1);
    while (!engine_idle(&en)) engine_step(&en);
    assert_int_equal(C.n_out, 2);
    assert_pool_empty(&en);
    seq_drop(&en, &A), seq_drop(&en, &C);
    engine_free(&en);
}

/* Cancelling the first sample before its prompt ran lets the others go: each
 * is queued to run on its own (engine_finish requeues them). */
static void cancelling_the_first_sample_queues_the_others_on_their_own(void **st) {
    Engine en;
    EngineConfig cfg = config(SCHED_FCFS, 2, 0);
    engine_start(&en, &cfg);
    Sequence A, C;
    int prompt[2] = {8, 9};
    seq_init(&A, 0, PRIO_NORMAL, prompt, 2, 2, -1, 0);
    seq_init(&C, 1, PRIO_NORMAL, prompt, 2, 2, -1, 0);
    add(&en, &A, NULL);
    add(&en, &C, &A);
    engine_finish(&en, &A, FIN_CANCEL);
    assert_int_equal(A.state, SEQ_FINISHED);
    assert_int_equal(A.finish, FIN_CANCEL);
    assert_null(C.fork_parent);
    assert_int_equal(engine_waiting(&en), 1);   /* C alone */

    const StepReport *r = engine_step(&en);
    assert_int_equal(r->n_out, 1);
    assert_out(r, 0, &C, 10, FIN_NONE);
    assert_int_equal(r->out[0].fork.from, -1);
    assert_int_equal(A.n_out, 0);
    while (!engine_idle(&en)) engine_step(&en);
    assert_pool_empty(&en);
    seq_drop(&en, &A), seq_drop(&en, &C);
    engine_free(&en);
}

/* Logits that are not finite end the request that produced them with
 * FIN_ERROR and token -1 (nothing appended), its blocks back; the request
 * beside it in the same batch goes on. Token 15's embedding is made NaN. */
static void non_finite_logits_end_only_their_own_request(void **st) {
    Engine en;
    EngineConfig cfg = config(SCHED_FCFS, 2, 0);
    engine_start(&en, &cfg);
    Sequence A, B;
    int pa[2] = {14, 15}, pb[1] = {1};
    seq_init(&A, 0, PRIO_NORMAL, pa, 2, 4, -1, 0);
    seq_init(&B, 1, PRIO_NORMAL, pb, 1, 4, -1, 0);
    add(&en, &A, NULL);
    add(&en, &B, NULL);
    for (int i = 0; i < D; i++) EMBD[15 * D + i] = NAN;
    const StepReport *r = engine_step(&en);
    for (int i = 0; i < D; i++) EMBD[15 * D + i] = i == 15 ? 1.0f : 0.0f;
    assert_int_equal(r->n_out, 2);
    assert_out(r, 0, &A, -1, FIN_ERROR);
    assert_out(r, 1, &B, 2, FIN_NONE);
    assert_int_equal(A.n_out, 0);
    assert_int_equal(A.n_tokens, 2);
    assert_int_equal(A.state, SEQ_FINISHED);
    assert_int_equal(engine_running(&en), 1);
    while (!engine_idle(&en)) engine_step(&en);
    assert_int_equal(B.n_out, 4);
    assert_int_equal(B.tokens[4], 5);
    assert_pool_empty(&en);
    seq_drop(&en, &A), seq_drop(&en, &B);
    engine_free(&en);
}

int main(int argc, char **argv) {
    select_tests(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_request_ends_at_eos_then_length_then_context),
        cmocka_unit_test(a_finished_request_gives_its_slot_to_a_waiting_one_the_next_step),
        cmocka_unit_test(a_step_reports_its_tokens_best_rank_first),
        cmocka_unit_test(samples_fork_when_the_prompt_is_computed_and_copy_only_on_write),
        cmocka_unit_test(a_sample_with_no_free_slot_runs_alone_from_the_prefix_cache),
        cmocka_unit_test(cancelling_the_first_sample_queues_the_others_on_their_own),
        cmocka_unit_test(non_finite_logits_end_only_their_own_request),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
