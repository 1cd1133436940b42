/* test_scheduler.c - the scheduler's rules taken one at a time, on values
 * built by hand (no model, no engine): what a rule says is checked here
 * number by number; tests/test_engine.c checks what it does to a workload.
 *
 * A sequence's rank (src/scheduler.c: sched_rank) is the priority level
 * (low 0, normal 1, high 2) plus one per aging_steps steps waited since its
 * arrival step, in integer division (notes/scheduler.md, "Rank"); FCFS ranks
 * everyone 0.
 *
 * The tests after the ranks drive a real KvPool and Scheduler with sequences
 * made by hand, and play the engine themselves (`step` below): plan, commit,
 * then give every item that samples a made-up token. The scheduler never
 * reads a token's value except to hash full blocks, so any value will do;
 * each sequence's tokens are its own (id * 1000 + position), so no two share
 * a prefix unless a test wants them to. Every expected number is worked out
 * from the rules of notes/scheduler.md in the comment beside it. */
#include "scheduler.h"
#include "testutil.h"

static long rank_at(SchedPolicy policy, int aging, long step, Priority prio, long arrival) {
    Scheduler s = {.cfg = {.policy = policy, .aging_steps = aging}, .step = step};
    Sequence q = {.priority = prio, .arrival_step = arrival};
    return sched_rank(&s, &q);
}

static void rank_is_the_level_plus_one_per_aging_steps_waited(void **st) {
    /* aging every 4 steps, arrival at step 3 */
    static const struct { long step; Priority prio; long want; } cases[] = {
        {3, PRIO_LOW, 0},  {3, PRIO_NORMAL, 1},  {3, PRIO_HIGH, 2},   /* just arrived: the level */
        {6, PRIO_LOW, 0},                                            /* 3 steps waited: not yet */
        {7, PRIO_LOW, 1},  {7, PRIO_NORMAL, 2},                      /* 4 steps: one level up */
        {10, PRIO_LOW, 1},                                           /* 7 / 4 rounds down */
        {11, PRIO_LOW, 2}, {11, PRIO_HIGH, 4},                       /* 8 steps: two levels */
        {403, PRIO_LOW, 100},                                        /* no ceiling */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        long got = rank_at(SCHED_PRIORITY, 4, cases[i].step, cases[i].prio, 3);
        if (got != cases[i].want)
            fail_msg("priority %d, arrived at step 3, aging every 4 steps: rank %ld at step %ld, "
                     "want %ld", cases[i].prio, got, cases[i].step, cases[i].want);
    }
}

static void without_aging_the_rank_is_the_level_however_long_it_waits(void **st) {
    for (int prio = PRIO_LOW; prio <= PRIO_HIGH; prio++) {
        assert_int_equal(rank_at(SCHED_PRIORITY, 0, 0, (Priority)prio, 0), prio);
        assert_int_equal(rank_at(SCHED_PRIORITY, 0, 1000, (Priority)prio, 0), prio);
    }
}

static void fcfs_ranks_everyone_zero(void **st) {
    for (int prio = PRIO_LOW; prio <= PRIO_HIGH; prio++) {
        assert_int_equal(rank_at(SCHED_FCFS, 0, 50, (Priority)prio, 0), 0);
        assert_int_equal(rank_at(SCHED_FCFS, 4, 50, (Priority)prio, 0), 0);   /* aging is the priority policy's */
    }
}

/* The bound of notes/scheduler.md: a low request ranks like a high one that
 * arrived 2A steps after it, at every step; one arriving a step earlier than
 * that outranks it now and then. */
static void a_low_request_ranks_like_a_high_one_two_aging_periods_younger(void **st) {
    enum { A = 5, a = 7 };
    int outranked = 0;
    for (long s = a + 2 * A; s < a + 2 * A + 40; s++) {
        long low = rank_at(SCHED_PRIORITY, A, s, PRIO_LOW, a);
        assert_int_equal(rank_at(SCHED_PRIORITY, A, s, PRIO_HIGH, a + 2 * A), low);
        outranked += rank_at(SCHED_PRIORITY, A, s, PRIO_HIGH, a + 2 * A - 1) > low;
    }
    assert_int_equal(outranked, 40 / A);
}

/* ---- a pool, a scheduler, sequences made by hand ---------------------- */

enum { BS = 4 };   /* tokens per KV block, in every test below */

typedef struct {
    KvPool pool;
    Scheduler s;
} Bench;

static void bench_init(Bench *b, int n_blocks, SchedConfig cfg) {
    Err e = {{0}};
    assert_int_equal(kv_pool_init(&b->pool, 1, 1, BS, n_blocks, &e), ST_OK);
    if (sched_init(&b->s, &cfg, &b->pool, &e)) fail_msg("sched_init: %s", e.msg);
}

static void bench_free(Bench *b) {
    sched_free(&b->s);
    kv_pool_free(&b->pool);
}

/* A new sequence of n_prompt tokens with room for max_out more, as the
 * runtime makes one: waiting, no slot, no arrival step yet. */
static void seq_init(Sequence *q, int id, Priority prio, int n_prompt, int max_out) {
    Err e = {{0}};
    memset(q, 0, sizeof *q);
    q->id = id;
    q->priority = prio;
    q->state = SEQ_WAITING;
    q->cap = n_prompt + max_out;
    q->tokens = malloc((size_t)q->cap * sizeof(int));
    assert_non_null(q->tokens);
    for (int i = 0; i < n_prompt; i++) q->tokens[i] = id * 1000 + i;
    q->n_prompt = q->n_tokens = n_prompt;
    q->max_tokens = max_out;
    q->n_eog = 0;
    q->slot = -1;
    q->arrival_step = -1;
    assert_int_equal(kv_seq_init(&q->kv, (q->cap + BS - 1) / BS, &e), ST_OK);
}

static void seq_free(Sequence *q) {
    kv_seq_free(&q->kv);
    free(q->tokens);
}

static int ceil_blocks(int tokens) { return (tokens + BS - 1) / BS; }

/* What every plan promises, whatever the test (src/sequence.h, StepPlan):
 * items of running sequences, each from its n_computed, at most `chunk`
 * tokens (the budget when chunk is 0), sampling exactly when it reaches the
 * last known token; token counts that add up, within the budget; at most
 * max_seqs items; no item for a sequence preempted in the same step. */
static void check_plan(const Bench *b, const StepPlan *p) {
    const SchedConfig *c = &b->s.cfg;
    int chunk = c->chunk > 0 ? c->chunk : c->token_budget, sum = 0;
    assert_true(p->n_items <= c->max_seqs);
    assert_true(b->s.n_running <= c->max_seqs);
    for (int i = 0; i < p->n_items; i++) {
        const StepItem *it = &p->items[i];
        const Sequence *q = it->seq;
        if (q->state != SEQ_RUNNING || it->slot != q->slot || b->s.running[q->slot] != q)
            fail_msg("item %d: #%d is not running in slot %d", i, q->id, it->slot);
        assert_int_equal(it->from, q->n_computed);
        assert_int_equal(it->from, q->kv.n_tokens);
        assert_true(it->n >= 1 && it->n <= chunk);
        assert_true(it->from + it->n <= q->n_tokens);
        assert_true(it->from + it->n <= q->kv.n_blocks * BS);   /* every row reserved */
        assert_int_equal(it->sample, it->from + it->n == q->n_tokens);
        for (int j = 0; j < p->n_preempted; j++) assert_ptr_not_equal(p->preempted[j], q);
        sum += it->n;
    }
    assert_int_equal(p->n_tokens, sum);
    assert_int_equal(p->n_prefill_tokens + p->n_decode_tokens, sum);
    assert_true(sum <= c->token_budget);
    Err e = {{0}};
    if (kv_pool_check(&b->pool, &e)) fail_msg("pool: %s", e.msg);
}

/* One engine step without a model: plan (checked), commit (each item's
 * n_computed moves on by exactly its n), then each item that samples gets
 * its next token. */
static const StepPlan *step(Bench *b) {
    const StepPlan *p = sched_step(&b->s);
    check_plan(b, p);
    int before[64];
    assert_true(p->n_items <= 64);
    for (int i = 0; i < p->n_items; i++) before[i] = p->items[i].seq->n_computed;
    sched_commit(&b->s, p, NULL);
    for (int i = 0; i < p->n_items; i++) {
        Sequence *q = p->items[i].seq;
        assert_int_equal(q->n_computed, before[i] + p->items[i].n);
        assert_int_equal(q->kv.n_tokens, q->n_computed);
        if (!p->items[i].sample) continue;
        assert_true(q->n_tokens < q->cap);
        q->tokens[q->n_tokens] = q->id * 1000 + q->n_tokens;
        q->n_tokens++;
        q->n_out++;
    }
    return p;
}

/* The item of q in plan p, or NULL. */
static const StepItem *item_of(const StepPlan *p, const Sequence *q) {
    for (int i = 0; i < p->n_items; i++)
        if (p->items[i].seq == q) return &p->items[i];
    return NULL;
}

static void assert_item(const StepPlan *p, int i, const Sequence *q, int from, int n, int sample) {
    if (i >= p->n_items)
        fail_msg("item %d wanted (#%d), the plan has %d", i, q->id, p->n_items);
    const StepItem *it = &p->items[i];
    if (it->seq != q || it->from != from || it->n != n || it->sample != sample)
        fail_msg("item %d: #%d from %d n %d sample %d; want #%d from %d n %d sample %d", i,
                 it->seq->id, it->from, it->n, it->sample, q->id, from, n, sample);
}

/* Nobody holds a block: each is free or, full and registered, cached for the
 * prefix cache (so "free == total" would be wrong: kv_paged.h). */
static void assert_every_block_back(const Bench *b) {
    assert_int_equal(kv_held_blocks(&b->pool), 0);
    assert_int_equal(kv_free_blocks(&b->pool) + kv_cached_blocks(&b->pool), b->pool.NB);
    assert_int_equal(kv_available_blocks(&b->pool), b->pool.NB);
    Err e = {{0}};
    if (kv_pool_check(&b->pool, &e)) fail_msg("pool: %s", e.msg);
}

/* ---- chunked prefill -------------------------------------------------- */

/* A prompt alone takes min(rest of the prompt, chunk, budget) tokens a step,
 * chunk 0 meaning the budget; only the chunk that reaches its last token
 * samples; its blocks grow with what it has computed. */
static void a_long_prompt_is_read_in_chunks_of_at_most_chunk_tokens(void **st) {
    static const struct { int chunk, budget, prompt; int want[5]; } cases[] = {
        {5, 64, 13, {5, 5, 3}},         /* the chunk limits */
        {0, 8, 13, {8, 5}},             /* chunk 0: the budget */
        {4, 6, 13, {4, 4, 4, 1}},       /* a chunk under the budget */
        {16, 6, 13, {6, 6, 1}},         /* a budget under the chunk */
        {13, 64, 13, {13}},             /* a chunk as long as the prompt: one step */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        Bench b;
        bench_init(&b, 16, (SchedConfig){.policy = SCHED_FCFS, .token_budget = cases[c].budget,
                                         .max_seqs = 2, .chunk = cases[c].chunk});
        Sequence q;
        seq_init(&q, 1, PRIO_NORMAL, cases[c].prompt, 4);
        sched_add(&b.s, &q);
        int from = 0;
        for (int k = 0; k < 5 && cases[c].want[k]; k++) {
            int n = cases[c].want[k], last = from + n == cases[c].prompt;
            const StepPlan *p = step(&b);
            assert_int_equal(p->n_items, 1);
            assert_item(p, 0, &q, from, n, last);
            assert_int_equal(p->n_admitted, k == 0);   /* admitted once, in the first step */
            assert_int_equal(p->n_prefill_tokens, n);
            assert_int_equal(p->n_decode_tokens, 0);
            from += n;
            assert_int_equal(q.n_computed, from);
            assert_int_equal(q.kv.n_blocks, ceil_blocks(from));
            assert_int_equal(q.n_out, last);   /* a chunk short of the end samples nothing */
        }
        assert_int_equal(from, cases[c].prompt);
        /* then one token a step: decode */
        const StepPlan *p = step(&b);
        assert_item(p, 0, &q, cases[c].prompt, 1, 1);
        assert_int_equal(p->n_decode_tokens, 1);
        assert_int_equal(p->n_prefill_tokens, 0);
        sched_remove(&b.s, &q);
        assert_every_block_back(&b);
        assert_true(sched_idle(&b.s));
        seq_free(&q);
        bench_free(&b);
    }
}

/* ---- the token budget ----------------------------------------------------- */

/* Budget 10, no chunk limit, FCFS; prompts of 7, 6 and 9 arrive together.
 * Running sequences are served first (a decode is one token), then
 * admissions get what is left of the budget, the last one a partial chunk;
 * one that finds no budget left waits. */
static void running_sequences_are_served_before_admissions_within_the_budget(void **st) {
    Bench b;
    bench_init(&b, 64, (SchedConfig){.policy = SCHED_FCFS, .token_budget = 10, .max_seqs = 4});
    Sequence A, B, C;
    seq_init(&A, 0, PRIO_NORMAL, 7, 8);
    seq_init(&B, 1, PRIO_NORMAL, 6, 8);
    seq_init(&C, 2, PRIO_NORMAL, 9, 8);
    sched_add(&b.s, &A);
    sched_add(&b.s, &B);
    sched_add(&b.s, &C);

    /* step 1: A 7 (all of it, samples), B min(6, 10 - 7) = 3; C: no budget */
    const StepPlan *p = step(&b);
    assert_int_equal(p->n_items, 2);
    assert_item(p, 0, &A, 0, 7, 1);
    assert_item(p, 1, &B, 0, 3, 0);
    assert_int_equal(p->n_tokens, 10);
    assert_int_equal(p->n_admitted, 2);
    assert_int_equal(C.state, SEQ_WAITING);
    assert_int_equal(C.slot, -1);
    assert_int_equal(b.s.n_waiting, 1);

    /* step 2: running first: A decodes 1, B's last 3; then C gets 10 - 4 = 6 */
    p = step(&b);
    assert_int_equal(p->n_items, 3);
    assert_item(p, 0, &A, 7, 1, 1);
    assert_item(p, 1, &B, 3, 3, 1);
    assert_item(p, 2, &C, 0, 6, 0);
    assert_int_equal(p->n_tokens, 10);
    assert_int_equal(p->n_decode_tokens, 1);
    assert_int_equal(p->n_prefill_tokens, 9);
    assert_int_equal(p->n_admitted, 1);
    assert_ptr_equal(p->admitted[0], &C);

    /* step 3: A and B decode, C's last 3: 5 of the 10 */
    p = step(&b);
    assert_int_equal(p->n_items, 3);
    assert_item(p, 0, &A, 8, 1, 1);
    assert_item(p, 1, &B, 6, 1, 1);
    assert_item(p, 2, &C, 6, 3, 1);
    assert_int_equal(p->n_decode_tokens, 2);
    assert_int_equal(p->n_prefill_tokens, 3);

    sched_remove(&b.s, &A);
    sched_remove(&b.s, &B);
    sched_remove(&b.s, &C);
    assert_every_block_back(&b);
    seq_free(&A), seq_free(&B), seq_free(&C);
    bench_free(&b);
}

/* Running sequences take the budget in rank order whether they decode or
 * prefill (notes/scheduler.md, "Budget, cap and chunked prefill"): with
 * chunk 0 a high prompt ranked first takes the whole budget of 8 and the low
 * request decoding behind it gets no token that step; with chunk 4 both run. */
static void with_no_chunk_limit_a_prompt_ranked_first_can_starve_a_decode(void **st) {
    for (int chunk = 0; chunk <= 4; chunk += 4) {
        Bench b;
        bench_init(&b, 64, (SchedConfig){.policy = SCHED_PRIORITY, .token_budget = 8,
                                         .max_seqs = 2, .chunk = chunk});
        Sequence L, H;
        seq_init(&L, 0, PRIO_LOW, 2, 8);
        seq_init(&H, 1, PRIO_HIGH, 20, 8);
        sched_add(&b.s, &L);
        step(&b);                         /* L: its prompt, and its first token */
        sched_add(&b.s, &H);
        /* step 2: L decodes 1; H is admitted with min(20, chunk or 8, 7) */
        const StepPlan *p = step(&b);
        int h1 = chunk ? chunk : 7;
        assert_item(p, 0, &L, 2, 1, 1);
        assert_item(p, 1, &H, 0, h1, 0);
        /* step 3: H ranks first */
        p = step(&b);
        if (chunk == 0) {
            assert_int_equal(p->n_items, 1);
            assert_item(p, 0, &H, h1, 8, 0);
            assert_null(item_of(p, &L));
        } else {
            assert_int_equal(p->n_items, 2);
            assert_item(p, 0, &H, h1, 4, 0);
            assert_item(p, 1, &L, 3, 1, 1);
        }
        sched_remove(&b.s, &H);
        sched_remove(&b.s, &L);
        assert_every_block_back(&b);
        seq_free(&L), seq_free(&H);
        bench_free(&b);
    }
}

/* ---- admission -------------------------------------------------------------- */

/* Two slots, four requests: the two high ones get them (equal rank, equal
 * arrival: the lower id first); a freed slot goes to the normal one next,
 * the first free slot; the low one waits until it is taken out. */
static void waiting_requests_are_admitted_best_rank_first_while_slots_last(void **st) {
    Bench b;
    bench_init(&b, 64, (SchedConfig){.policy = SCHED_PRIORITY, .token_budget = 64, .max_seqs = 2});
    Sequence L, N, H1, H2;
    seq_init(&L, 0, PRIO_LOW, 3, 4);
    seq_init(&N, 1, PRIO_NORMAL, 3, 4);
    seq_init(&H1, 2, PRIO_HIGH, 3, 4);
    seq_init(&H2, 3, PRIO_HIGH, 3, 4);
    Sequence *all[] = {&L, &N, &H1, &H2};
    for (int i = 0; i < 4; i++) sched_add(&b.s, all[i]);

    const StepPlan *p = step(&b);
    assert_int_equal(p->n_admitted, 2);
    assert_ptr_equal(p->admitted[0], &H1);
    assert_ptr_equal(p->admitted[1], &H2);
    assert_int_equal(H1.slot, 0);
    assert_int_equal(H2.slot, 1);
    assert_int_equal(b.s.n_running, 2);
    assert_int_equal(b.s.n_waiting, 2);
    assert_int_equal(N.state, SEQ_WAITING);
    assert_int_equal(L.state, SEQ_WAITING);

    sched_remove(&b.s, &H1);          /* it finished: slot 0 is free */
    assert_int_equal(b.s.n_running, 1);
    p = step(&b);
    assert_int_equal(p->n_admitted, 1);
    assert_ptr_equal(p->admitted[0], &N);
    assert_int_equal(N.slot, 0);
    assert_int_equal(L.state, SEQ_WAITING);

    sched_remove(&b.s, &L);           /* cancelled while waiting: out of the queue */
    assert_int_equal(b.s.n_waiting, 0);
    assert_null(b.s.waiting);
    sched_remove(&b.s, &H2);
    p = step(&b);
    assert_int_equal(p->n_admitted, 0);
    assert_int_equal(p->n_items, 1);  /* N alone */
    sched_remove(&b.s, &N);
    assert_true(sched_idle(&b.s));
    assert_every_block_back(&b);
    for (int i = 0; i < 4; i++) seq_free(all[i]);
    bench_free(&b);
}

/* One slot, held by R. A low request arrives in step 1, a high one in step 2
 * (with a lower id). When R leaves, FCFS admits the earlier arrival, the
 * priority policy the higher level. */
static void fcfs_admits_by_arrival_and_priority_by_level(void **st) {
    for (int policy = SCHED_FCFS; policy <= SCHED_PRIORITY; policy++) {
        Bench b;
        bench_init(&b, 64, (SchedConfig){.policy = (SchedPolicy)policy, .token_budget = 64,
                                         .max_seqs = 1});
        Sequence R, L, H;
        seq_init(&R, 9, PRIO_NORMAL, 3, 8);
        seq_init(&L, 5, PRIO_LOW, 3, 8);
        seq_init(&H, 4, PRIO_HIGH, 3, 8);
        sched_add(&b.s, &R);
        step(&b);
        sched_add(&b.s, &L);
        assert_int_equal(L.arrival_step, 1);
        step(&b);
        sched_add(&b.s, &H);
        assert_int_equal(H.arrival_step, 2);
        const StepPlan *p = step(&b);
        assert_int_equal(p->n_admitted, 0);   /* no slot */
        sched_remove(&b.s, &R);
        p = step(&b);
        assert_int_equal(p->n_admitted, 1);
        assert_ptr_equal(p->admitted[0], policy == SCHED_FCFS ? &L : &H);
        sched_remove(&b.s, &L);
        sched_remove(&b.s, &H);
        assert_true(sched_idle(&b.s));
        assert_every_block_back(&b);
        seq_free(&R), seq_free(&L), seq_free(&H);
        bench_free(&b);
    }
}

/* An 8-block pool, nothing running: B's 36 tokens need 9 blocks and cannot
 * be admitted; C behind it would fit, but admission stops at the first
 * request that does not fit (no skipping ahead: a stream of small requests
 * could keep a large one out for ever). */
static void admission_stops_at_the_first_request_that_does_not_fit(void **st) {
    Bench b;
    bench_init(&b, 8, (SchedConfig){.policy = SCHED_FCFS, .token_budget = 64, .max_seqs = 4});
    Sequence B, C;
    seq_init(&B, 0, PRIO_NORMAL, 36, 1);
    seq_init(&C, 1, PRIO_NORMAL, 4, 1);
    sched_add(&b.s, &B);
    sched_add(&b.s, &C);
    const StepPlan *p = step(&b);
    assert_int_equal(p->n_items, 0);
    assert_int_equal(p->n_admitted, 0);
    assert_int_equal(B.kv.n_blocks, 0);   /* a refused admission keeps nothing */
    assert_int_equal(C.state, SEQ_WAITING);
    assert_int_equal(b.s.n_waiting, 2);
    assert_every_block_back(&b);
    sched_remove(&b.s, &B);
    p = step(&b);
    assert_int_equal(p->n_admitted, 1);
    assert_ptr_equal(p->admitted[0], &C);
    sched_remove(&b.s, &C);
    assert_every_block_back(&b);
    seq_free(&B), seq_free(&C);
    bench_free(&b);
}

/* ---- the watermark ------------------------------------------------------------ */

/* With a request running, another is admitted only if at least
 * max(NB / 100, 1) blocks stay available after its first chunk: 3 of 300,
 * 1 of 100. A runs with a 4 * blocks - 1 token prompt (its first decode
 * stays in its last block); B then asks for the rest of the pool less
 * `left` blocks. With nothing running, the watermark does not apply. */
static void admission_keeps_a_watermark_of_one_percent_of_the_pool(void **st) {
    static const struct { int nb, a_blocks, b_blocks, admitted; } cases[] = {
        {300, 200, 97, 1},   /* leaves 3: the watermark, admitted */
        {300, 200, 98, 0},   /* leaves 2 < 3: waits */
        {100, 50, 49, 1},    /* leaves 1 */
        {100, 50, 50, 0},    /* leaves 0 */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        Bench b;
        bench_init(&b, cases[c].nb, (SchedConfig){.policy = SCHED_FCFS, .token_budget = 1024,
                                                  .max_seqs = 2});
        Sequence A, B;
        seq_init(&A, 0, PRIO_NORMAL, cases[c].a_blocks * BS - 1, 4);
        seq_init(&B, 1, PRIO_NORMAL, cases[c].b_blocks * BS, 4);
        sched_add(&b.s, &A);
        step(&b);
        assert_int_equal(A.kv.n_blocks, cases[c].a_blocks);
        sched_add(&b.s, &B);
        const StepPlan *p = step(&b);
        assert_item(p, 0, &A, cases[c].a_blocks * BS - 1, 1, 1);
        if (p->n_admitted != cases[c].admitted)
            fail_msg("pool %d, %d blocks held, B asks %d: admitted %d, want %d", cases[c].nb,
                     cases[c].a_blocks, cases[c].b_blocks, p->n_admitted, cases[c].admitted);
        assert_int_equal(B.kv.n_blocks, cases[c].admitted ? cases[c].b_blocks : 0);
        assert_int_equal(kv_available_blocks(&b.pool),
                         cases[c].nb - cases[c].a_blocks - (cases[c].admitted ? cases[c].b_blocks : 0));
        sched_remove(&b.s, &A);
        sched_remove(&b.s, &B);
        assert_every_block_back(&b);
        seq_free(&A), seq_free(&B);
        bench_free(&b);
    }

    /* nothing running: a request that takes the whole pool starts */
    Bench b;
    bench_init(&b, 100, (SchedConfig){.policy = SCHED_FCFS, .token_budget = 1024, .max_seqs = 2});
    Sequence A;
    seq_init(&A, 0, PRIO_NORMAL, 100 * BS, 1);
    sched_add(&b.s, &A);
    const StepPlan *p = step(&b);
    assert_int_equal(p->n_admitted, 1);
    assert_int_equal(kv_available_blocks(&b.pool), 0);
    sched_remove(&b.s, &A);
    assert_every_block_back(&b);
    seq_free(&A);
    bench_free(&b);
}

/* ---- preemption ------------------------------------------------------------------ */

/* Three requests of 6, 7 and 8 prompt tokens arrive in steps 0, 1 and 2 and
 * are admitted one a step, so that after step 3 each holds 2 blocks of a
 * 7-block pool with 9 tokens known, and each wants a third block for
 * position 8 in step 4: the one free block goes to the best ranked, and the
 * next one finds the pool empty. The victim is the worst-ranked request not
 * yet served: lowest rank, among equals the newest arrival. Ids run against
 * arrival order, so that a victim chosen by id would be the wrong one. */
static void the_victim_is_the_lowest_rank_and_among_equals_the_newest(void **st) {
    static const struct {
        SchedPolicy policy;
        Priority prio[3];      /* A, B, C in arrival order */
        int first, second, victim;   /* by arrival index */
    } cases[] = {
        {SCHED_FCFS, {PRIO_NORMAL, PRIO_NORMAL, PRIO_NORMAL}, 0, 1, 2},   /* the newest */
        {SCHED_FCFS, {PRIO_HIGH, PRIO_LOW, PRIO_HIGH}, 0, 1, 2},          /* FCFS ignores levels */
        {SCHED_PRIORITY, {PRIO_LOW, PRIO_LOW, PRIO_HIGH}, 2, 0, 1},       /* low, and the newer low */
        {SCHED_PRIORITY, {PRIO_LOW, PRIO_HIGH, PRIO_HIGH}, 1, 2, 0},      /* lowest, though oldest */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        Bench b;
        bench_init(&b, 7, (SchedConfig){.policy = cases[c].policy, .token_budget = 64, .max_seqs = 3});
        Sequence q[3];
        for (int i = 0; i < 3; i++) seq_init(&q[i], 2 - i, cases[c].prio[i], 6 + i, 8);
        for (int i = 0; i < 3; i++) {
            sched_add(&b.s, &q[i]);
            assert_int_equal(q[i].arrival_step, i);
            const StepPlan *p = step(&b);
            assert_int_equal(p->n_admitted, 1);
            assert_int_equal(p->n_preempted, 0);
        }
        for (int i = 0; i < 3; i++) {
            assert_int_equal(q[i].n_tokens, 9);
            assert_int_equal(q[i].kv.n_blocks, 2);
        }
        assert_int_equal(kv_available_blocks(&b.pool), 1);

        const StepPlan *p = step(&b);
        Sequence *first = &q[cases[c].first], *second = &q[cases[c].second], *v = &q[cases[c].victim];
        assert_int_equal(p->n_items, 2);
        assert_item(p, 0, first, 8, 1, 1);
        assert_item(p, 1, second, 8, 1, 1);
        assert_int_equal(p->n_preempted, 1);
        if (p->preempted[0] != v)
            fail_msg("case %zu: #%d preempted, want #%d", c, p->preempted[0]->id, v->id);
        assert_int_equal(p->n_admitted, 0);
        /* the victim: back in a queue, no blocks, its tokens kept for recompute */
        assert_int_equal(v->state, SEQ_WAITING);
        assert_int_equal(v->slot, -1);
        assert_int_equal(v->n_computed, 0);
        assert_int_equal(v->n_preempted, 1);
        assert_int_equal(v->kv.n_blocks, 0);
        assert_int_equal(v->blocks_released, 2);
        assert_int_equal(v->n_tokens, 9);
        assert_int_equal(v->n_out, 3 - cases[c].victim);   /* one token a step since its admission */
        assert_ptr_equal(b.s.preempted, v);
        assert_int_equal(b.s.n_preempted_queued, 1);
        assert_int_equal(b.s.n_preemptions, 1);
        assert_int_equal(b.s.n_running, 2);
        assert_int_equal(kv_held_blocks(&b.pool), 6);   /* the two others: 3 blocks each */

        /* The survivors leave; the victim resumes through the prefix cache.
         * Its 2 full blocks were cached, tail first, and the second survivor's
         * block was the least recently released of them: the tail. Its first
         * block is found again (4 tokens), positions 4..8 are recomputed. */
        sched_remove(&b.s, first);
        sched_remove(&b.s, second);
        p = step(&b);
        assert_int_equal(p->n_admitted, 1);
        assert_ptr_equal(p->admitted[0], v);
        assert_item(p, 0, v, 4, 5, 1);
        assert_int_equal(v->prefix_hit_tokens, 4);
        assert_int_equal(v->n_computed, 9);
        assert_int_equal(v->n_out, 4 - cases[c].victim);
        assert_null(b.s.preempted);
        assert_int_equal(b.s.n_preempted_queued, 0);
        sched_remove(&b.s, v);
        assert_true(sched_idle(&b.s));
        assert_every_block_back(&b);
        for (int i = 0; i < 3; i++) seq_free(&q[i]);
        bench_free(&b);
    }
}

/* A 7-block pool, priority policy. A (8 tokens, 2 blocks) and B (16 tokens,
 * 4 blocks), both normal, are admitted in step 1. D, high, arrives after it
 * (3 tokens, 1 block). In step 2 A and B each need a block for their first
 * decode: A, ranked first (older), takes the last one; B, ranked last, finds
 * none and is its own victim. Its 4 full blocks go to the prefix cache, so
 * D, the best-ranked request queued, would fit with 3 to spare; but a step
 * that preempted admits nobody. In step 3 D is admitted (evicting B's last
 * block, the least recently released); B, next, finds its first 12 tokens in
 * the cache but no 2 blocks for positions 12..16, and waits. When A leaves
 * (its 2 full blocks cached, its third free), B resumes from position 12. */
static void a_request_with_no_block_left_preempts_itself_and_the_step_admits_nobody(void **st) {
    Bench b;
    bench_init(&b, 7, (SchedConfig){.policy = SCHED_PRIORITY, .token_budget = 64, .max_seqs = 4});
    Sequence A, B, D;
    seq_init(&A, 0, PRIO_NORMAL, 8, 8);
    seq_init(&B, 1, PRIO_NORMAL, 16, 8);
    seq_init(&D, 2, PRIO_HIGH, 3, 8);
    sched_add(&b.s, &A);
    sched_add(&b.s, &B);
    const StepPlan *p = step(&b);
    assert_int_equal(p->n_admitted, 2);
    assert_int_equal(kv_available_blocks(&b.pool), 1);
    sched_add(&b.s, &D);

    p = step(&b);
    assert_int_equal(p->n_items, 1);
    assert_item(p, 0, &A, 8, 1, 1);
    assert_int_equal(p->n_preempted, 1);
    assert_ptr_equal(p->preempted[0], &B);
    assert_null(item_of(p, &B));
    assert_int_equal(B.blocks_released, 4);
    assert_int_equal(kv_cached_blocks(&b.pool), 4);
    assert_int_equal(kv_available_blocks(&b.pool), 4);
    assert_int_equal(p->n_admitted, 0);
    assert_int_equal(D.state, SEQ_WAITING);

    p = step(&b);
    assert_int_equal(p->n_preempted, 0);
    assert_int_equal(p->n_admitted, 1);
    assert_ptr_equal(p->admitted[0], &D);
    assert_item(p, 0, &A, 9, 1, 1);
    assert_item(p, 1, &D, 0, 3, 1);
    assert_int_equal(B.state, SEQ_WAITING);
    assert_int_equal(B.kv.n_blocks, 0);     /* the cache hits were let go again */
    assert_int_equal(kv_cached_blocks(&b.pool), 3);

    sched_remove(&b.s, &A);
    p = step(&b);
    assert_int_equal(p->n_admitted, 1);
    assert_ptr_equal(p->admitted[0], &B);
    assert_item(p, 0, &D, 3, 1, 1);
    assert_item(p, 1, &B, 12, 5, 1);
    assert_int_equal(B.prefix_hit_tokens, 12);
    assert_int_equal(B.n_preempted, 1);
    assert_int_equal(kv_available_blocks(&b.pool), 1);

    sched_remove(&b.s, &B);
    sched_remove(&b.s, &D);
    assert_every_block_back(&b);
    seq_free(&A), seq_free(&B), seq_free(&D);
    bench_free(&b);
}

/* ---- all of it at once ------------------------------------------------------ */

/* Twelve requests of mixed length, level and arrival through a pool too small
 * for them (8 blocks, 3 slots, budget 8, chunk 3, priority with aging 2; the
 * longest request needs 6 blocks),
 * each leaving when it has its max_tokens, as the engine does. Every plan
 * keeps the rules (check_plan), the blocks held are exactly those of the
 * running tables, preemption happens, everyone finishes, and at the end every
 * block is back. */
static void every_block_comes_back_after_a_preempting_workload(void **st) {
    enum { N = 12, MAX_STEPS = 2000 };
    Bench b;
    bench_init(&b, 8, (SchedConfig){.policy = SCHED_PRIORITY, .token_budget = 8, .max_seqs = 3,
                                     .chunk = 3, .aging_steps = 2});
    Sequence q[N];
    int arrive[N], done = 0, finished[N] = {0};
    for (int i = 0; i < N; i++) {
        seq_init(&q[i], i, (Priority)(i % 3), 1 + (i * 5) % 13, 3 + (i * 7) % 9);
        arrive[i] = (i * 3) % 10;
    }
    long step_no;
    for (step_no = 0; done < N && step_no < MAX_STEPS; step_no++) {
        for (int i = 0; i < N; i++)
            if (arrive[i] == step_no) sched_add(&b.s, &q[i]);
        const StepPlan *p = step(&b);
        int held = 0;
        for (int s = 0; s < 3; s++)
            if (b.s.running[s]) held += b.s.running[s]->kv.n_blocks;
        assert_int_equal(kv_held_blocks(&b.pool), held);
        for (int i = 0; i < p->n_items; i++) {
            Sequence *x = p->items[i].seq;
            if (x->n_out >= x->max_tokens) {
                sched_remove(&b.s, x);
                x->state = SEQ_FINISHED;
                finished[x->id] = 1;
                done++;
            }
        }
    }
    if (done < N) fail_msg("%d of %d finished in %d steps", done, N, MAX_STEPS);
    for (int i = 0; i < N; i++) {
        assert_true(finished[i]);
        assert_int_equal(q[i].n_out, q[i].max_tokens);
    }
    assert_true(b.s.n_preemptions > 0);
    assert_true(sched_idle(&b.s));
    assert_int_equal(b.s.n_running, 0);
    assert_int_equal(b.s.n_waiting, 0);
    assert_int_equal(b.s.n_preempted_queued, 0);
    assert_every_block_back(&b);
    for (int i = 0; i < N; i++) seq_free(&q[i]);
    bench_free(&b);
}

int main(int argc, char **argv) {
    select_tests(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rank_is_the_level_plus_one_per_aging_steps_waited),
        cmocka_unit_test(without_aging_the_rank_is_the_level_however_long_it_waits),
        cmocka_unit_test(fcfs_ranks_everyone_zero),
        cmocka_unit_test(a_low_request_ranks_like_a_high_one_two_aging_periods_younger),
        cmocka_unit_test(a_long_prompt_is_read_in_chunks_of_at_most_chunk_tokens),
        cmocka_unit_test(running_sequences_are_served_before_admissions_within_the_budget),
        cmocka_unit_test(with_no_chunk_limit_a_prompt_ranked_first_can_starve_a_decode),
        cmocka_unit_test(waiting_requests_are_admitted_best_rank_first_while_slots_last),
        cmocka_unit_test(fcfs_admits_by_arrival_and_priority_by_level),
        cmocka_unit_test(admission_stops_at_the_first_request_that_does_not_fit),
        cmocka_unit_test(admission_keeps_a_watermark_of_one_percent_of_the_pool),
        cmocka_unit_test(the_victim_is_the_lowest_rank_and_among_equals_the_newest),
        cmocka_unit_test(a_request_with_no_block_left_preempts_itself_and_the_step_admits_nobody),
        cmocka_unit_test(every_block_comes_back_after_a_preempting_workload),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
