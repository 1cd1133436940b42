/* test_kv_paged.c - the paged KV cache: block tables, prefix cache,
 * copy-on-write, LRU eviction, and a randomized run against a reference.
 *
 * Tests write K/V through kv_seq_slot with values that say who wrote them
 * (a tag, the position, the layer), then read them back through a sequence's
 * table: a block handed to the wrong sequence, a missing copy-on-write or a
 * prefix hit on the wrong block shows up as a wrong number, not only as a
 * wrong count. Every test ends by releasing everything and checking that the
 * pool is sound, every block is back, and nothing leaked. */
#include "kv_paged.h"
#include "base/mem.h"
#include "testutil.h"
#include <limits.h>

enum { MAX_SEQ = 8 };

/* A pool, a few sequences, and the allocation count before any of them. */
typedef struct {
    KvPool p;
    KvSeq s[MAX_SEQ];
    int n_seq;
    size_t live0;
} Fix;

static void assert_sound(const KvPool *p) {
    Err e;
    if (kv_pool_check(p, &e) != ST_OK) fail_msg("%s", e.msg);
}

static void fix_init(Fix *f, int L, int kvd, int BS, int NB, int n_seq, int cap) {
    memset(f, 0, sizeof *f);
    f->live0 = mem_stats().live_count;
    Err e;
    assert_int_equal(kv_pool_init(&f->p, L, kvd, BS, NB, &e), ST_OK);
    f->n_seq = n_seq;
    for (int i = 0; i < n_seq; i++) assert_int_equal(kv_seq_init(&f->s[i], cap, &e), ST_OK);
    assert_sound(&f->p);
}

/* Release everything: the pool must be sound, hold nothing, and free no leak. */
static void fix_done(Fix *f) {
    assert_sound(&f->p);
    for (int i = 0; i < f->n_seq; i++) {
        int n = f->s[i].n_blocks;
        assert_int_equal(kv_seq_release(&f->p, &f->s[i]), n);
        assert_int_equal(f->s[i].n_blocks, 0);
    }
    assert_sound(&f->p);
    assert_int_equal(kv_held_blocks(&f->p), 0);
    assert_int_equal(kv_free_blocks(&f->p) + kv_cached_blocks(&f->p), f->p.NB);
    for (int i = 0; i < f->n_seq; i++) kv_seq_free(&f->s[i]);
    kv_pool_free(&f->p);
    assert_int_equal(mem_stats().live_count, f->live0);
}

static float *key_at(const KvPool *p, int layer, int slot) {
    return p->key + ((size_t)layer * p->NB * p->BS + (size_t)slot) * p->KVD;
}
static float *value_at(const KvPool *p, int layer, int slot) {
    return p->value + ((size_t)layer * p->NB * p->BS + (size_t)slot) * p->KVD;
}

/* What sequence `tag` writes for position pos (exact in float for the sizes used). */
static float tagged(int tag, int pos, int layer, int c) {
    return (float)(tag * 65536 + pos * 64 + layer * 8 + c);
}

static void write_kv(KvPool *p, const KvSeq *s, int from, int to, int tag) {
    for (int pos = from; pos < to; pos++)
        for (int l = 0; l < p->L; l++)
            for (int c = 0; c < p->KVD; c++) {
                int slot = kv_seq_slot(s, p->BS, pos);
                key_at(p, l, slot)[c] = tagged(tag, pos, l, c);
                value_at(p, l, slot)[c] = -tagged(tag, pos, l, c);
            }
}

static void expect_kv(const KvPool *p, const KvSeq *s, int from, int to, int tag) {
    for (int pos = from; pos < to; pos++)
        for (int l = 0; l < p->L; l++)
            for (int c = 0; c < p->KVD; c++) {
                int slot = kv_seq_slot(s, p->BS, pos);
                float k = key_at(p, l, slot)[c], v = value_at(p, l, slot)[c];
                float want = tagged(tag, pos, l, c);
                if (k != want || v != -want)
                    fail_msg("pos %d layer %d c %d: K %g V %g, want %g / %g (tag %d)", pos, l, c,
                             (double)k, (double)v, (double)want, (double)-want, tag);
            }
}

/* Reserve, write as `tag`, commit: one step of a sequence's life. */
static void grow(KvPool *p, KvSeq *s, const int *tokens, int n, int tag) {
    assert_int_equal(kv_seq_reserve(p, s, n), ST_OK);
    write_kv(p, s, s->n_tokens, s->n_tokens + n, tag);
    kv_seq_commit(p, s, tokens, n);
}

/* ------------------------------------------------------------ growth and reservation */

static void kv_sequence_grows_block_by_block_and_release_returns_every_block(void **st) {
    Fix f;
    fix_init(&f, 2, 3, 4, 8, 1, 8);
    KvPool *p = &f.p;
    KvSeq *s = &f.s[0];
    int tokens[18];
    for (int i = 0; i < 18; i++) tokens[i] = 100 + i;
    for (int pos = 0; pos < 18; pos++) {
        grow(p, s, tokens, 1, 1);
        assert_int_equal(s->n_blocks, pos / 4 + 1);
        assert_int_equal(s->n_tokens, pos + 1);
        assert_int_equal(s->n_registered, (pos + 1) / 4);
        assert_int_equal(kv_held_blocks(p), pos / 4 + 1);
        assert_sound(p);
    }
    int slots[18];
    for (int pos = 0; pos < 18; pos++) {
        slots[pos] = kv_seq_slot(s, 4, pos);
        assert_int_equal(slots[pos], s->table[pos / 4] * 4 + pos % 4);
        for (int q = 0; q < pos; q++) assert_int_not_equal(slots[q], slots[pos]);
    }
    expect_kv(p, s, 0, 18, 1);
    assert_int_equal(p->peak_held, 5);
    assert_int_equal(kv_seq_release(p, s), 5);
    assert_int_equal(kv_held_blocks(p), 0);
    assert_int_equal(kv_cached_blocks(p), 4);   /* the four full blocks stay findable */
    assert_int_equal(kv_free_blocks(p), 4);     /* the partial one and the untouched three */
    fix_done(&f);
}

static void kv_reserve_is_all_or_nothing_and_refuses_past_the_table(void **st) {
    Fix f;
    fix_init(&f, 1, 2, 4, 4, 2, 3);
    KvPool *p = &f.p;
    KvSeq *a = &f.s[0], *b = &f.s[1];
    assert_int_equal(kv_seq_reserve(p, a, 12), ST_OK);
    assert_int_equal(kv_free_blocks(p), 1);
    assert_int_equal(kv_seq_reserve(p, b, 8), KV_FULL);   /* needs 2, one left */
    assert_int_equal(b->n_blocks, 0);
    assert_int_equal(kv_free_blocks(p), 1);
    assert_int_equal(kv_held_blocks(p), 3);
    assert_int_equal(kv_seq_reserve(p, b, 4), ST_OK);
    int kept = b->table[0];
    assert_int_equal(kv_seq_reserve(p, b, 5), KV_FULL);   /* one more block, none left */
    assert_int_equal(b->n_blocks, 1);
    assert_int_equal(b->table[0], kept);
    assert_int_equal(kv_available_blocks(p), 0);
    assert_int_equal(kv_seq_reserve(p, a, 13), ST_ARG);   /* capacity 3 blocks = 12 tokens */
    assert_int_equal(a->n_blocks, 3);
    assert_int_equal(kv_seq_reserve(p, a, 12), ST_OK);    /* already covered: nothing to get */
    assert_int_equal(a->n_blocks, 3);
    assert_int_equal(kv_seq_reserve(p, a, 0), ST_OK);
    fix_done(&f);
}

static void kv_reserve_counts_the_copy_on_write_block_as_one_it_needs(void **st) {
    Fix f;
    fix_init(&f, 1, 2, 4, 3, 2, 4);
    KvPool *p = &f.p;
    KvSeq *a = &f.s[0], *b = &f.s[1];
    int tokens[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    grow(p, a, tokens, 6, 1);   /* one full block and a partial one */
    assert_int_equal(kv_seq_fork(p, b, a), ST_OK);
    assert_int_equal(kv_available_blocks(p), 1);
    /* Positions 6..8: a copy of the shared partial block and a new one: 2 > 1. */
    assert_int_equal(kv_seq_reserve(p, b, 3), KV_FULL);
    assert_memory_equal(b->table, a->table, 2 * sizeof(int));
    assert_int_equal(b->n_blocks, 2);
    assert_int_equal(p->refcount[a->table[1]], 2);
    assert_int_equal(p->cow_copies, 0);
    assert_int_equal(kv_available_blocks(p), 1);
    assert_int_equal(kv_seq_reserve(p, b, 2), ST_OK);     /* the copy alone fits */
    assert_int_equal(p->cow_copies, 1);
    fix_done(&f);
}

/* ------------------------------------------------------------ prefix cache */

static void kv_prefix_hit_reuses_the_full_blocks_of_a_released_sequence(void **st) {
    Fix f;
    fix_init(&f, 2, 4, 16, 16, 3, 8);
    KvPool *p = &f.p;
    KvSeq *a = &f.s[0], *b = &f.s[1], *c = &f.s[2];
    int ta[56], tb[48];
    for (int i = 0; i < 56; i++) ta[i] = 7 + i * 3;
    for (int i = 0; i < 48; i++) tb[i] = i < 40 ? ta[i] : 5000 + i;
    assert_int_equal(kv_seq_match_prefix(p, a, ta, 56, 56), 0);
    grow(p, a, ta, 56, 1);
    assert_int_equal(a->n_registered, 3);
    int a_table[4];
    memcpy(a_table, a->table, sizeof a_table);
    kv_seq_release(p, a);
    assert_int_equal(kv_cached_blocks(p), 3);

    assert_int_equal(kv_seq_match_prefix(p, b, tb, 40, 40), 32);   /* 40 tokens: 2 full blocks */
    assert_int_equal(b->n_blocks, 2);
    assert_int_equal(b->n_tokens, 32);
    assert_int_equal(b->n_registered, 2);
    assert_int_equal(b->table[0], a_table[0]);
    assert_int_equal(b->table[1], a_table[1]);
    assert_int_equal(b->chain_block, a_table[1]);
    assert_int_equal(p->hits_tokens, 32);
    assert_int_equal(kv_cached_blocks(p), 1);   /* taken back out of the LRU list */
    assert_int_equal(kv_held_blocks(p), 2);
    expect_kv(p, b, 0, 32, 1);                  /* what A wrote */
    grow(p, b, tb, 16, 2);                      /* B goes on with its own third block */
    expect_kv(p, b, 32, 48, 2);
    kv_seq_release(p, b);

    assert_int_equal(kv_seq_match_prefix(p, c, ta, 56, 31), 16);   /* max_tokens 31: one block */
    assert_int_equal(c->table[0], a_table[0]);
    kv_seq_release(p, c);
    assert_int_equal(kv_seq_match_prefix(p, c, ta, 56, 56), 48);   /* A's full chain, not B's block */
    assert_memory_equal(c->table, a_table, 3 * sizeof(int));
    expect_kv(p, c, 0, 48, 1);
    kv_seq_release(p, c);
    assert_int_equal(kv_seq_match_prefix(p, c, tb, 48, 48), 48);   /* B's third block hangs on A's two */
    expect_kv(p, c, 0, 32, 1);
    expect_kv(p, c, 32, 48, 2);
    assert_int_equal(p->hits_tokens, 32 + 16 + 48 + 48);
    assert_int_equal(kv_seq_match_prefix(p, a, ta, 15, 56), 0);    /* under one block: nothing */
    fix_done(&f);
}

static void kv_hit_needs_the_whole_prefix_equal_not_only_the_block(void **st) {
    Fix f;
    fix_init(&f, 1, 2, 4, 8, 3, 4);
    KvPool *p = &f.p;
    KvSeq *a = &f.s[0], *b = &f.s[1], *c = &f.s[2];
    int ta[8] = {1, 2, 3, 4, 9, 9, 9, 9}, tb[8] = {5, 6, 7, 8, 9, 9, 9, 9};
    grow(p, a, ta, 8, 1);
    assert_int_equal(kv_seq_match_prefix(p, b, tb, 8, 8), 0);   /* block 1 equal, block 0 not */
    grow(p, b, tb, 8, 2);
    assert_int_not_equal(b->table[1], a->table[1]);
    assert_true(p->registered[b->table[1]]);                    /* not A's twin: other parent */
    assert_int_not_equal(p->hash[b->table[1]], p->hash[a->table[1]]);
    kv_seq_release(p, a);
    assert_int_equal(kv_seq_match_prefix(p, c, tb, 8, 8), 8);
    assert_memory_equal(c->table, b->table, 2 * sizeof(int));
    expect_kv(p, c, 0, 8, 2);
    kv_seq_release(p, c);
    assert_int_equal(kv_seq_match_prefix(p, c, ta, 8, 8), 8);
    expect_kv(p, c, 0, 8, 1);
    fix_done(&f);
}

/* A real 64-bit collision cannot be produced on demand, so the test makes the
 * situation it would create: a registered block whose stored tokens differ
 * from the tokens its hash was computed from. Overwriting the stored tokens
 * of A's second block (leaving hash, parent and bucket alone) gives a block
 * that "holds" {99, 6, 7, 8} under the hash of {5, 6, 7, 8}: exactly what a
 * colliding pair would look like. A lookup for {5, 6, 7, 8} then finds a block
 * with the right hash and parent and must still refuse it. */
static void kv_a_hash_collision_is_a_miss_not_wrong_output(void **st) {
    Fix f;
    fix_init(&f, 1, 2, 4, 8, 3, 4);
    KvPool *p = &f.p;
    KvSeq *a = &f.s[0], *b = &f.s[1], *c = &f.s[2];
    int t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    grow(p, a, t, 8, 1);
    int a0 = a->table[0], a1 = a->table[1];
    kv_seq_release(p, a);
    p->tokens[a1 * 4] = 99;
    assert_int_equal(kv_seq_match_prefix(p, b, t, 8, 8), 4);   /* same hash, other tokens: miss */
    assert_int_equal(b->table[0], a0);
    /* B computes its second block itself; the look-alike block is no twin, so
     * two registered blocks now share a hash and a bucket. */
    assert_int_equal(kv_seq_reserve(p, b, 4), ST_OK);
    write_kv(p, b, 4, 8, 2);
    kv_seq_commit(p, b, t, 4);
    int b1 = b->table[1];
    assert_int_not_equal(b1, a1);
    assert_true(p->registered[b1] && p->registered[a1]);
    assert_true(p->hash[b1] == p->hash[a1]);
    kv_seq_release(p, b);
    assert_int_equal(kv_seq_match_prefix(p, c, t, 8, 8), 8);   /* finds B's, the equal one */
    assert_int_equal(c->table[1], b1);
    expect_kv(p, c, 4, 8, 2);
    kv_seq_release(p, c);
    p->tokens[a1 * 4] = 5;   /* with the tokens equal again, the other block matches too */
    assert_int_equal(kv_seq_match_prefix(p, c, t, 8, 8), 8);
    assert_true(c->table[1] == a1 || c->table[1] == b1);
    kv_seq_release(p, c);
    /* The parent's identity is part of the key: a stale parent gen is a miss. */
    p->tokens[a1 * 4] = 99;
    p->parent_gen[b1]++;
    assert_int_equal(kv_seq_match_prefix(p, c, t, 8, 8), 4);
    p->parent_gen[b1]--;
    p->tokens[a1 * 4] = 5;
    fix_done(&f);
}

/* ------------------------------------------------------------ copy-on-write */

static void kv_fork_shares_blocks_until_the_first_write_into_a_partial_one(void **st) {
    Fix f;
    fix_init(&f, 2, 3, 4, 8, 2, 4);
    KvPool *p = &f.p;
    KvSeq *a = &f.s[0], *b = &f.s[1];
    int ta[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    int tb[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 77, 78};   /* B's own future after the fork */
    grow(p, a, ta, 10, 1);
    assert_int_equal(kv_seq_fork(p, b, a), ST_OK);
    assert_memory_equal(b->table, a->table, 3 * sizeof(int));
    for (int i = 0; i < 3; i++) assert_int_equal(p->refcount[a->table[i]], 2);
    assert_int_equal(b->n_tokens, 10);
    assert_int_equal(kv_held_blocks(p), 3);
    expect_kv(p, b, 0, 10, 1);

    assert_int_equal(kv_seq_reserve(p, b, 1), ST_OK);
    assert_int_equal(p->cow_copies, 1);
    assert_int_equal(b->table[0], a->table[0]);   /* full blocks: still shared */
    assert_int_equal(b->table[1], a->table[1]);
    assert_int_equal(p->refcount[a->table[0]], 2);
    assert_int_not_equal(b->table[2], a->table[2]);
    assert_int_equal(p->refcount[a->table[2]], 1);
    assert_int_equal(p->refcount[b->table[2]], 1);
    expect_kv(p, b, 0, 10, 1);                    /* the copy holds the rows written before */
    write_kv(p, b, 10, 11, 2);
    kv_seq_commit(p, b, tb, 1);
    expect_kv(p, a, 0, 10, 1);                    /* the parent's block is untouched... */
    int a_slot = kv_seq_slot(a, 4, 10);
    for (int l = 0; l < 2; l++)
        for (int c = 0; c < 3; c++) assert_true(key_at(p, l, a_slot)[c] == 0.0f);   /* ...row 10 too */

    assert_int_equal(kv_seq_reserve(p, a, 1), ST_OK);   /* A alone holds its block now: no copy */
    assert_int_equal(p->cow_copies, 1);
    write_kv(p, a, 10, 11, 3);
    kv_seq_commit(p, a, ta, 1);
    expect_kv(p, a, 10, 11, 3);
    expect_kv(p, b, 10, 11, 2);
    fix_done(&f);
}

/* A cache kept elsewhere (a GPU's) must make the same copies: every copy
 * is logged as (src, dst, rows), taken once, and a log nobody takes says
 * so (-1) rather than dropping copies silently. */
static void kv_copy_on_write_is_logged_for_a_cache_kept_elsewhere(void **st) {
    Fix f;
    fix_init(&f, 2, 3, 4, 8, 2, 4);
    KvPool *p = &f.p;
    KvSeq *a = &f.s[0], *b = &f.s[1];
    int ta[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    const int *log;
    grow(p, a, ta, 10, 1);
    assert_int_equal(kv_take_copies(p, &log), 0);            /* no fork yet: nothing copied */
    assert_int_equal(kv_seq_fork(p, b, a), ST_OK);
    int shared = a->table[2];
    assert_int_equal(kv_seq_reserve(p, b, 1), ST_OK);
    assert_int_equal(kv_take_copies(p, &log), 1);
    assert_int_equal(log[0], shared);                        /* from the shared block */
    assert_int_equal(log[1], b->table[2]);                   /* to b's own copy */
    assert_int_equal(log[2], 2);                             /* its two written rows (8, 9) */
    assert_int_equal(kv_take_copies(p, &log), 0);            /* taken: the log is empty */
    /* a log that fills up loses copies: the next take says so, once */
    p->n_copies = p->cap_copies;
    kv_seq_release(p, b);
    assert_int_equal(kv_seq_fork(p, b, a), ST_OK);
    assert_int_equal(kv_seq_reserve(p, b, 1), ST_OK);
    assert_int_equal(kv_take_copies(p, &log), -1);
    assert_int_equal(kv_take_copies(p, &log), 0);
    fix_done(&f);
}

/* The header's rule ("the block the first position lands in") generalised:
 * a fork taken after reserving ahead shares blocks nobody has written yet;
 * the first writer must still get its own. */
static void kv_fork_after_reserving_ahead_does_not_share_the_unwritten_block(void **st) {
    Fix f;
    fix_init(&f, 1, 2, 4, 8, 2, 4);
    KvPool *p = &f.p;
    KvSeq *a = &f.s[0], *b = &f.s[1];
    int t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    assert_int_equal(kv_seq_reserve(p, a, 8), ST_OK);
    write_kv(p, a, 0, 4, 1);
    kv_seq_commit(p, a, t, 4);   /* block 0 full, block 1 reserved and empty */
    assert_int_equal(kv_seq_fork(p, b, a), ST_OK);
    assert_int_equal(kv_seq_reserve(p, b, 1), ST_OK);
    assert_int_not_equal(b->table[1], a->table[1]);
    assert_int_equal(b->table[0], a->table[0]);
    assert_int_equal(p->cow_copies, 1);
    write_kv(p, b, 4, 5, 2);
    assert_int_equal(kv_seq_reserve(p, a, 1), ST_OK);
    write_kv(p, a, 4, 5, 3);
    expect_kv(p, b, 0, 4, 1);
    expect_kv(p, b, 4, 5, 2);
    expect_kv(p, a, 4, 5, 3);
    fix_done(&f);
}

static void kv_fork_refuses_a_busy_or_small_destination(void **st) {
    Fix f;
    fix_init(&f, 1, 2, 4, 8, 3, 3);
    KvPool *p = &f.p;
    KvSeq *a = &f.s[0], *b = &f.s[1], small;
    Err e;
    assert_int_equal(kv_seq_init(&small, 2, &e), ST_OK);
    assert_int_equal(kv_seq_reserve(p, a, 12), ST_OK);
    assert_int_equal(kv_seq_reserve(p, b, 1), ST_OK);
    assert_int_equal(kv_seq_fork(p, b, a), ST_ARG);       /* b holds a block */
    assert_int_equal(kv_seq_fork(p, &small, a), ST_ARG);  /* 2 < 3 blocks */
    assert_int_equal(p->refcount[a->table[0]], 1);
    assert_int_equal(small.n_blocks, 0);
    kv_seq_free(&small);
    fix_done(&f);
}

/* ------------------------------------------------------------ LRU eviction */

static void kv_cached_blocks_are_evicted_least_recently_released_first(void **st) {
    Fix f;
    fix_init(&f, 1, 2, 4, 4, 3, 4);
    KvPool *p = &f.p;
    KvSeq *a = &f.s[0], *b = &f.s[1], *c = &f.s[2];
    int ta[4] = {1, 2, 3, 4}, tb[4] = {11, 12, 13, 14}, tc[12] = {0};
    grow(p, a, ta, 4, 1);
    grow(p, b, tb, 4, 2);
    int a0 = a->table[0], b0 = b->table[0];
    kv_seq_release(p, a);   /* released first: evicted first */
    kv_seq_release(p, b);
    assert_int_equal(kv_cached_blocks(p), 2);
    assert_int_equal(kv_free_blocks(p), 2);
    assert_int_equal(kv_seq_reserve(p, c, 8), ST_OK);   /* the free list still suffices */
    assert_int_equal(p->evictions, 0);
    assert_int_equal(kv_cached_blocks(p), 2);
    assert_int_equal(kv_seq_reserve(p, c, 12), ST_OK);  /* now a cached block must go */
    assert_int_equal(p->evictions, 1);
    assert_int_equal(c->table[2], a0);
    assert_false(p->registered[a0]);
    write_kv(p, c, 0, 12, 3);
    kv_seq_commit(p, c, tc, 12);
    assert_int_equal(kv_seq_match_prefix(p, a, ta, 4, 4), 0);   /* evicted: gone from the cache */
    assert_int_equal(kv_seq_match_prefix(p, b, tb, 4, 4), 4);   /* still there */
    assert_int_equal(b->table[0], b0);
    expect_kv(p, b, 0, 4, 2);
    assert_int_equal(kv_available_blocks(p), 0);
    assert_int_equal(kv_seq_reserve(p, a, 1), KV_FULL);
    fix_done(&f);
}

static void kv_release_evicts_a_chains_last_block_before_its_first(void **st) {
    Fix f;
    fix_init(&f, 1, 2, 4, 3, 2, 3);
    KvPool *p = &f.p;
    KvSeq *a = &f.s[0], *b = &f.s[1];
    int t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    grow(p, a, t, 8, 1);
    int a0 = a->table[0], a1 = a->table[1];
    kv_seq_release(p, a);
    assert_int_equal(p->lru_head, a1);   /* the deepest block is the first to go */
    assert_int_equal(kv_seq_reserve(p, b, 8), ST_OK);   /* the free block, then one eviction */
    assert_int_equal(p->evictions, 1);
    assert_int_equal(b->table[1], a1);
    kv_seq_release(p, b);
    assert_int_equal(kv_seq_match_prefix(p, b, t, 8, 8), 4);   /* the root survived */
    assert_int_equal(b->table[0], a0);
    expect_kv(p, b, 0, 4, 1);
    fix_done(&f);
}

/* ------------------------------------------------------------ concurrency of prompts */

static void kv_identical_prompts_computed_at_once_leave_one_chain(void **st) {
    Fix f;
    fix_init(&f, 1, 2, 4, 8, 3, 4);
    KvPool *p = &f.p;
    KvSeq *a = &f.s[0], *b = &f.s[1], *c = &f.s[2];
    int t[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    assert_int_equal(kv_seq_match_prefix(p, a, t, 10, 10), 0);   /* neither has committed yet */
    assert_int_equal(kv_seq_match_prefix(p, b, t, 10, 10), 0);
    assert_int_equal(kv_seq_reserve(p, a, 10), ST_OK);
    assert_int_equal(kv_seq_reserve(p, b, 10), ST_OK);
    write_kv(p, a, 0, 10, 1);
    write_kv(p, b, 0, 10, 2);
    kv_seq_commit(p, a, t, 10);
    kv_seq_commit(p, b, t, 10);
    assert_true(p->registered[a->table[0]] && p->registered[a->table[1]]);
    assert_false(p->registered[b->table[0]] || p->registered[b->table[1]]);   /* twins exist */
    assert_int_equal(b->chain_block, a->table[1]);
    grow(p, b, t, 2, 2);   /* B completes its third block: registered under A's second */
    int b2 = b->table[2];
    assert_true(p->registered[b2]);
    assert_int_equal(p->parent[b2], a->table[1]);
    assert_int_equal(kv_seq_match_prefix(p, c, t, 12, 12), 12);
    assert_int_equal(c->table[0], a->table[0]);
    assert_int_equal(c->table[1], a->table[1]);
    assert_int_equal(c->table[2], b2);
    expect_kv(p, c, 0, 8, 1);
    expect_kv(p, c, 8, 12, 2);
    kv_seq_release(p, a);   /* A's partial block goes free, its chain stays with C */
    kv_seq_release(p, b);   /* B's twins go free */
    assert_int_equal(kv_free_blocks(p), 5);
    assert_int_equal(kv_held_blocks(p), 3);
    kv_seq_release(p, c);
    assert_int_equal(kv_cached_blocks(p), 3);
    assert_int_equal(kv_free_blocks(p), 5);
    fix_done(&f);
}

/* A block's gen counts its registrations, and a child records its parent's
 * gen. Here block P is registered, gets a child C (through B, whose own first
 * block was P's twin), is evicted while C lives on, and is registered again.
 * Its new life happens to hold the same tokens, but in general the pool
 * cannot tell a new life from the old one except by hash, and trusting a hash
 * alone is what the token and parent checks exist to avoid: C must not be
 * found through the new P. */
static void kv_a_block_registered_again_does_not_lead_to_children_of_its_old_life(void **st) {
    Fix f;
    fix_init(&f, 1, 2, 4, 3, 3, 2);
    KvPool *p = &f.p;
    KvSeq *a = &f.s[0], *b = &f.s[1], *e = &f.s[2];
    int t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    grow(p, a, t, 4, 1);             /* P */
    grow(p, b, t, 8, 1);             /* P's twin, then C hung on P */
    int P = a->table[0], C = b->table[1];
    assert_int_equal(p->parent[C], P);
    kv_seq_release(p, a);
    grow(p, e, t, 4, 1);             /* evicts P (nothing free), registers it again */
    assert_int_equal(e->table[0], P);
    assert_int_equal(p->evictions, 1);
    assert_true(p->registered[P] && p->registered[C]);
    assert_int_equal(kv_seq_match_prefix(p, a, t, 8, 8), 4);   /* P, but not C */
    assert_int_equal(a->table[0], P);
    fix_done(&f);
}

/* B's first block is a twin of A's, so B hangs its later blocks on A's block.
 * When A's block is evicted, B has nothing registered to hang them on: they
 * would be unreachable, so they are not registered (and go free, not to the
 * cache, when B lets go). */
static void kv_a_chain_whose_twin_was_evicted_stops_registering(void **st) {
    Fix f;
    fix_init(&f, 1, 2, 4, 3, 3, 2);
    KvPool *p = &f.p;
    KvSeq *a = &f.s[0], *b = &f.s[1], *e = &f.s[2];
    int t[8] = {1, 2, 3, 4, 5, 6, 7, 8}, u[4] = {9, 9, 9, 9};
    grow(p, a, t, 4, 1);
    assert_int_equal(kv_seq_reserve(p, b, 8), ST_OK);
    write_kv(p, b, 0, 4, 1);
    kv_seq_commit(p, b, t, 4);
    assert_int_equal(b->chain_block, a->table[0]);
    kv_seq_release(p, a);
    grow(p, e, u, 4, 3);             /* evicts A's block */
    assert_int_equal(p->evictions, 1);
    write_kv(p, b, 4, 8, 1);
    kv_seq_commit(p, b, t, 4);
    assert_int_equal(b->n_registered, 2);
    assert_int_equal(b->chain_block, -1);
    assert_false(p->registered[b->table[1]]);
    expect_kv(p, b, 0, 8, 1);
    kv_seq_release(p, b);
    assert_int_equal(kv_cached_blocks(p), 0);
    fix_done(&f);
}

/* ------------------------------------------------------------ randomized run */

enum { R_L = 2, R_KVD = 2, R_BS = 4, R_NB = 16, R_SEQ = 6, R_CAP = 8, R_LEN = R_CAP * R_BS };

static uint64_t rng_next(uint64_t *state) {   /* splitmix64 */
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static int rng_int(uint64_t *state, int n) { return (int)(rng_next(state) % (uint64_t)n); }

/* A sequence's K/V depend on its whole prefix (as a model's do), so the
 * expected value is derived from a hash of tokens[0..pos]: sequences that
 * share a prefix legitimately hold equal data, and a block hit on the wrong
 * prefix reads as wrong. 20 bits keep it exact in a float. */
static float expected_kv(const int *tokens, int pos, int layer, int c) {
    uint64_t h = 0x1234, state;
    for (int i = 0; i <= pos; i++) {
        state = h ^ (uint64_t)(tokens[i] + 1);
        h = rng_next(&state);
    }
    state = h + (uint64_t)(layer * R_KVD + c);
    return (float)(rng_next(&state) & 0xFFFFF);
}

typedef struct {
    int live;
    int tokens[R_LEN];   /* the whole planned sequence; n_tokens of them committed */
} Ref;

/* The reference: every block's refcount is the number of live tables that
 * hold it, and every live sequence reads back its own expected K/V. */
static void check_against_reference(const KvPool *p, const KvSeq *s, const Ref *ref) {
    assert_sound(p);
    int count[R_NB] = {0}, distinct = 0;
    for (int i = 0; i < R_SEQ; i++) {
        if (!ref[i].live) {
            assert_int_equal(s[i].n_blocks, 0);
            continue;
        }
        for (int j = 0; j < s[i].n_blocks; j++) count[s[i].table[j]]++;
        for (int pos = 0; pos < s[i].n_tokens; pos++) {
            int slot = kv_seq_slot(&s[i], R_BS, pos);
            for (int l = 0; l < R_L; l++)
                for (int c = 0; c < R_KVD; c++) {
                    float want = expected_kv(ref[i].tokens, pos, l, c);
                    float k = key_at(p, l, slot)[c], v = value_at(p, l, slot)[c];
                    if (k != want || v != -want)
                        fail_msg("seq %d pos %d layer %d: K %g V %g, want %g", i, pos, l, (double)k,
                                 (double)v, (double)want);
                }
        }
    }
    for (int b = 0; b < R_NB; b++) {
        if (p->refcount[b] != count[b])
            fail_msg("block %d: refcount %d, but %d live tables hold it", b, p->refcount[b], count[b]);
        distinct += count[b] > 0;
    }
    assert_int_equal(kv_held_blocks(p), distinct);
}

/* Random future tokens from a 3-letter alphabet, so that prefixes (and twin
 * blocks) recur often; half the time the start copies another plan's prefix. */
static void plan_tokens(uint64_t *rng, Ref *ref, int slot, int keep) {
    for (int i = keep; i < R_LEN; i++) ref[slot].tokens[i] = rng_int(rng, 3);
}

/* 2000 random operations, fixed seed, on a pool too small for all six
 * sequences at once: start (prefix match, often on a prefix copied from
 * another plan), fork into an empty slot (then diverge), release, and
 * reserve-write-commit of 1..9 tokens, sometimes committing fewer than
 * reserved, with preemption on KV_FULL. After every operation: the pool's
 * invariants, refcounts against the live tables, and every live sequence's
 * K/V read through its own table. */
static void kv_random_operations_agree_with_a_reference_model(void **st) {
    Fix f;
    fix_init(&f, R_L, R_KVD, R_BS, R_NB, R_SEQ, R_CAP);
    KvPool *p = &f.p;
    KvSeq *s = f.s;
    Ref ref[R_SEQ];
    memset(ref, 0, sizeof ref);
    uint64_t rng = 20240607;
    int full = 0, forks = 0;
    for (int op = 0; op < 2000; op++) {
        int i = rng_int(&rng, R_SEQ), kind = rng_int(&rng, 20);
        if (!ref[i].live && kind < 14) {   /* start: prefix match on a fresh plan */
            int other = rng_int(&rng, R_SEQ), keep = rng_int(&rng, 2) ? rng_int(&rng, R_LEN + 1) : 0;
            memmove(ref[i].tokens, ref[other].tokens, (size_t)keep * sizeof(int));
            plan_tokens(&rng, ref, i, keep);
            int n = 1 + rng_int(&rng, R_LEN), max = n - rng_int(&rng, 2);
            int got = kv_seq_match_prefix(p, &s[i], ref[i].tokens, n, max);
            assert_true(got % R_BS == 0 && got <= max && got <= n);
            assert_int_equal(s[i].n_tokens, got);
            assert_int_equal(s[i].n_blocks, got / R_BS);
            ref[i].live = 1;
        } else if (!ref[i].live) {         /* fork some live sequence into this slot */
            int src = rng_int(&rng, R_SEQ);
            if (!ref[src].live) continue;
            assert_int_equal(kv_seq_fork(p, &s[i], &s[src]), ST_OK);
            memcpy(ref[i].tokens, ref[src].tokens, (size_t)s[src].n_tokens * sizeof(int));
            plan_tokens(&rng, ref, i, s[src].n_tokens);   /* and then diverge */
            ref[i].live = 1;
            forks++;
        } else if (kind < 3) {             /* release */
            int n = s[i].n_blocks;
            assert_int_equal(kv_seq_release(p, &s[i]), n);
            ref[i].live = 0;
        } else {                           /* reserve, write, commit (possibly less) */
            int room = R_LEN - s[i].n_tokens;
            if (room == 0) continue;
            int n = 1 + rng_int(&rng, room < 9 ? room : 9);
            KvSeq before = s[i];
            int table[R_CAP], avail = kv_available_blocks(p), held = kv_held_blocks(p);
            memcpy(table, s[i].table, sizeof table);
            int r = kv_seq_reserve(p, &s[i], n);
            if (r == KV_FULL) {
                full++;
                assert_int_equal(s[i].n_blocks, before.n_blocks);
                assert_memory_equal(s[i].table, table, (size_t)before.n_blocks * sizeof(int));
                assert_int_equal(kv_available_blocks(p), avail);
                assert_int_equal(kv_held_blocks(p), held);
                if (rng_int(&rng, 2)) {    /* the scheduler's answer: preempt it */
                    kv_seq_release(p, &s[i]);
                    ref[i].live = 0;
                }
            } else {
                assert_int_equal(r, ST_OK);
                int done = rng_int(&rng, 4) ? n : rng_int(&rng, n + 1);
                for (int pos = s[i].n_tokens; pos < s[i].n_tokens + done; pos++) {
                    int slot = kv_seq_slot(&s[i], R_BS, pos);
                    for (int l = 0; l < R_L; l++)
                        for (int c = 0; c < R_KVD; c++) {
                            key_at(p, l, slot)[c] = expected_kv(ref[i].tokens, pos, l, c);
                            value_at(p, l, slot)[c] = -expected_kv(ref[i].tokens, pos, l, c);
                        }
                }
                kv_seq_commit(p, &s[i], ref[i].tokens, done);
            }
        }
        check_against_reference(p, s, ref);
    }
    /* The run must have gone through the interesting paths, or it proves little. */
    assert_true(p->hits_tokens > 0);
    assert_true(p->cow_copies > 0);
    assert_true(p->evictions > 0);
    assert_true(full > 0 && forks > 0);
    assert_true(p->peak_held <= R_NB);
    fix_done(&f);
}

/* ------------------------------------------------------------ setup failures and checks */

static void kv_pool_init_refuses_bad_sizes_and_survives_allocation_failure(void **st) {
    size_t live0 = mem_stats().live_count;
    KvPool p;
    KvSeq s;
    Err e;
    struct { int L, kvd, bs, nb; const char *word; } bad[] = {
        {0, 4, 16, 8, "L 0"},
        {2, -1, 16, 8, "kvd -1"},
        {2, 4, 0, 8, "block_size 0"},
        {2, 4, 16, 0, "n_blocks 0"},
        {2, 4, 1 << 12, 1 << 20, "n_blocks 1048576"},                  /* slots overflow int */
        {INT_MAX, INT_MAX, 1 << 10, 1 << 20, "overflows"},             /* bytes overflow size_t */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&e, 0, sizeof e);
        assert_int_equal(kv_pool_init(&p, bad[i].L, bad[i].kvd, bad[i].bs, bad[i].nb, &e), ST_ARG);
        if (!strstr(e.msg, bad[i].word))
            fail_msg("case %zu: \"%s\" does not name %s", i, e.msg, bad[i].word);
        assert_null(p.block_);
        assert_int_equal(p.NB, 0);
    }
    mem_fail_after(1);
    assert_int_equal(kv_pool_init(&p, 2, 4, 16, 8, &e), ST_NOMEM);
    mem_fail_after(0);
    assert_non_null(strstr(e.msg, "cannot allocate"));
    assert_null(p.block_);
    assert_int_equal(p.bytes, 0);
    kv_pool_free(&p);   /* a zeroed pool is fine to free */
    assert_int_equal(kv_seq_init(&s, 0, &e), ST_ARG);
    assert_non_null(strstr(e.msg, "cap_blocks 0"));
    mem_fail_after(1);
    assert_int_equal(kv_seq_init(&s, 4, &e), ST_NOMEM);
    mem_fail_after(0);
    kv_seq_free(&s);
    assert_int_equal(mem_stats().live_count, live0);

    size_t per_block = 2 * 2 * 16 * 4 * sizeof(float);
    assert_int_equal(kv_blocks_for_bytes(10 * per_block, 2, 4, 16), 10);
    assert_int_equal(kv_blocks_for_bytes(10 * per_block - 1, 2, 4, 16), 9);
    assert_int_equal(kv_pool_init(&p, 2, 4, 16, 10, &e), ST_OK);
    assert_true(p.bytes >= 10 * per_block);
    assert_true(((uintptr_t)p.key & 63) == 0 && ((uintptr_t)p.value & 63) == 0);
    assert_true((p.n_buckets & (p.n_buckets - 1)) == 0 && p.n_buckets >= 20);
    kv_pool_free(&p);
    assert_null(p.block_);
    assert_int_equal(mem_stats().live_count, live0);
}

static void kv_pool_check_names_the_block_that_breaks_an_invariant(void **st) {
    Fix f;
    fix_init(&f, 1, 2, 4, 8, 2, 4);
    KvPool *p = &f.p;
    int t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    grow(p, &f.s[0], t, 8, 1);
    grow(p, &f.s[1], t, 4, 1);   /* a twin: held, unregistered */
    kv_seq_release(p, &f.s[0]);  /* blocks 0 and 1 cached */
    Err e;
    int free_top = p->free_stack[p->n_free - 1];
    p->refcount[free_top] = 1;   /* held and free at once */
    assert_int_equal(kv_pool_check(p, &e), ST_ARG);
    assert_non_null(strstr(e.msg, "free"));
    p->refcount[free_top] = 0;
    int head = p->lru_head;
    p->lru_prev[head] = 5;       /* a broken back link */
    assert_int_equal(kv_pool_check(p, &e), ST_ARG);
    assert_non_null(strstr(e.msg, "LRU prev"));
    p->lru_prev[head] = -1;
    p->registered[f.s[1].table[0]] = 1;   /* registered but not in any bucket */
    assert_int_equal(kv_pool_check(p, &e), ST_ARG);
    assert_non_null(strstr(e.msg, "reachable"));
    p->registered[f.s[1].table[0]] = 0;
    p->refcount[head] = -1;
    assert_int_equal(kv_pool_check(p, &e), ST_ARG);
    char want[32];
    snprintf(want, sizeof want, "block %d", head);
    assert_non_null(strstr(e.msg, want));
    p->refcount[head] = 0;
    fix_done(&f);
}

/* Speculation: a sequence reserves positions for a guess, writes them, and
 * the model keeps only some. The rewind gives back exactly the blocks that
 * hold no kept position; the partly kept block stays, its kept rows intact,
 * and a later write covers the rejected rows. Nothing rejected ever reaches
 * the prefix cache, and a fork's shared blocks are not touched. */
static void kv_rewind_gives_back_only_the_blocks_past_the_kept_positions(void **st) {
    Fix f;
    fix_init(&f, 2, 3, 4, 10, 2, 6);
    KvPool *p = &f.p;
    KvSeq *a = &f.s[0], *b = &f.s[1];
    int ta[24] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
    grow(p, a, ta, 6, 1);                          /* 6 kept: blocks 0 and 1 (2 rows of it) */
    assert_int_equal(kv_seq_fork(p, b, a), ST_OK); /* b shares both */
    assert_int_equal(kv_seq_rewind(p, a), 0);      /* nothing past the kept positions: no-op */
    int free0 = kv_free_blocks(p);

    /* a guesses 9 positions (6..14): block 1 is copied (shared), 2 and 3 are new */
    assert_int_equal(kv_seq_reserve(p, a, 9), ST_OK);
    assert_int_equal(a->n_blocks, 4);
    assert_int_equal(p->cow_copies, 1);
    write_kv(p, a, 6, 15, 2);
    int guess_blocks[2] = {a->table[2], a->table[3]};
    kv_seq_commit(p, a, ta, 1);                    /* the model kept one: position 6 */
    assert_int_equal(kv_seq_rewind(p, a), 2);      /* blocks 2 and 3 held only rejected rows */
    assert_int_equal(a->n_blocks, 2);
    assert_int_equal(a->n_tokens, 7);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(p->refcount[guess_blocks[i]], 0);
        assert_false(p->registered[guess_blocks[i]]);
    }
    assert_int_equal(kv_free_blocks(p), free0 - 1);   /* only the copy of block 1 is still held */
    expect_kv(p, a, 0, 6, 1);                      /* rows from before the fork, in the copy... */
    expect_kv(p, a, 6, 7, 2);                      /* ...the kept guess... */
    expect_kv(p, b, 0, 6, 1);                      /* ...and b's view untouched */
    assert_sound(p);

    /* the next write covers the rejected rows 7.. and fills block 1: registered
     * with the kept tokens only */
    assert_int_equal(kv_seq_reserve(p, a, 1), ST_OK);
    write_kv(p, a, 7, 8, 3);
    kv_seq_commit(p, a, ta, 1);
    assert_true(p->registered[a->table[1]]);
    assert_memory_equal(p->tokens + (size_t)a->table[1] * 4, ta + 4, 4 * sizeof(int));
    expect_kv(p, a, 7, 8, 3);
    assert_int_equal(kv_seq_rewind(p, a), 0);
    fix_done(&f);
}

int main(int argc, char **argv) {
    select_tests(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(kv_sequence_grows_block_by_block_and_release_returns_every_block),
        cmocka_unit_test(kv_reserve_is_all_or_nothing_and_refuses_past_the_table),
        cmocka_unit_test(kv_reserve_counts_the_copy_on_write_block_as_one_it_needs),
        cmocka_unit_test(kv_prefix_hit_reuses_the_full_blocks_of_a_released_sequence),
        cmocka_unit_test(kv_hit_needs_the_whole_prefix_equal_not_only_the_block),
        cmocka_unit_test(kv_a_hash_collision_is_a_miss_not_wrong_output),
        cmocka_unit_test(kv_fork_shares_blocks_until_the_first_write_into_a_partial_one),
        cmocka_unit_test(kv_copy_on_write_is_logged_for_a_cache_kept_elsewhere),
        cmocka_unit_test(kv_fork_after_reserving_ahead_does_not_share_the_unwritten_block),
        cmocka_unit_test(kv_fork_refuses_a_busy_or_small_destination),
        cmocka_unit_test(kv_rewind_gives_back_only_the_blocks_past_the_kept_positions),
        cmocka_unit_test(kv_cached_blocks_are_evicted_least_recently_released_first),
        cmocka_unit_test(kv_release_evicts_a_chains_last_block_before_its_first),
        cmocka_unit_test(kv_identical_prompts_computed_at_once_leave_one_chain),
        cmocka_unit_test(kv_a_block_registered_again_does_not_lead_to_children_of_its_old_life),
        cmocka_unit_test(kv_a_chain_whose_twin_was_evicted_stops_registering),
        cmocka_unit_test(kv_random_operations_agree_with_a_reference_model),
        cmocka_unit_test(kv_pool_init_refuses_bad_sizes_and_survives_allocation_failure),
        cmocka_unit_test(kv_pool_check_names_the_block_that_breaks_an_invariant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
