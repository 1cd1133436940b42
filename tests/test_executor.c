/* test_executor.c - the executor's flattening (src/executor.c: exec_flatten)
 * on a plan built by hand: no model, no scheduler, only the arrays.
 *
 * The end-to-end tests in test_engine.c compare outputs, and they cannot see
 * every mistake here: a lone request gets blocks 0, 1, 2 ... in order, so its
 * slot equals its position, and an executor that ignores the block table
 * gives the right text. The plan below has block tables out of order, a
 * prefill chunk that crosses a block boundary, a chunk that samples nothing,
 * and sequences whose order in the plan is not their order of arrival; every
 * row is checked against the table worked out in notes/executor.md's way. */
#include "executor.h"
#include "testutil.h"

enum { BS = 4, MAXT = 16, MAXB = 4 };

static void flatten_follows_each_block_table_and_lists_the_sampling_rows(void **st) {
    /* A: positions 2..6 across its blocks {7, 2}, samples (its last known token is 6).
     * C: a prefill chunk, positions 5..7 in block table[1] = 0, samples nothing.
     * B: one decode token at position 1 in its block {5}. */
    int ta[2] = {7, 2}, tc[3] = {3, 0, 6}, tb[1] = {5};
    int tok_a[7], tok_b[2], tok_c[12];
    for (int i = 0; i < 7; i++) tok_a[i] = 100 + i;
    for (int i = 0; i < 2; i++) tok_b[i] = 200 + i;
    for (int i = 0; i < 12; i++) tok_c[i] = 300 + i;
    Sequence A = {.id = 0, .tokens = tok_a, .n_tokens = 7, .kv = {.table = ta, .cap = 2, .n_blocks = 2}};
    Sequence C = {.id = 2, .tokens = tok_c, .n_tokens = 12, .kv = {.table = tc, .cap = 3, .n_blocks = 3}};
    Sequence B = {.id = 1, .tokens = tok_b, .n_tokens = 2, .kv = {.table = tb, .cap = 1, .n_blocks = 1}};
    StepItem items[3] = {
        {.seq = &A, .slot = 0, .n = 5, .from = 2, .sample = 1},
        {.seq = &C, .slot = 2, .n = 3, .from = 5, .sample = 0},
        {.seq = &B, .slot = 1, .n = 1, .from = 1, .sample = 1},
    };
    StepPlan plan = {.items = items, .n_items = 3, .n_tokens = 9};

    KvPool pool = {.BS = BS, .NB = 8};
    int token[MAXT], pos[MAXT], seq[MAXT], slot[MAXT], logit_row[MAXB];
    const int *table[MAXB];
    for (int t = 0; t < MAXT; t++) token[t] = pos[t] = seq[t] = slot[t] = -9;
    for (int i = 0; i < MAXB; i++) logit_row[i] = -9;
    Executor x = {.pool = &pool, .max_T = MAXT, .max_seqs = MAXB, .token = token, .pos = pos,
                  .seq = seq, .slot = slot, .logit_row = logit_row, .table = table};

    int n_logits = -1;
    int T = exec_flatten(&x, &plan, &n_logits);
    assert_int_equal(T, 9);

    /* row t:      0    1    2    3    4    5    6    7    8 */
    int want_token[] = {102, 103, 104, 105, 106, 305, 306, 307, 201};
    int want_pos[]   = {2,   3,   4,   5,   6,   5,   6,   7,   1};
    int want_seq[]   = {0,   0,   0,   0,   0,   1,   1,   1,   2};
    /* A: pos 2, 3 in block table[0] = 7 (slots 7*4 + 2, + 3); pos 4..6 in table[1] = 2.
     * C: pos 5..7 in table[1] = 0, rows 1..3. B: pos 1 in table[0] = 5, row 1. */
    int want_slot[]  = {30,  31,  8,   9,   10,  1,   2,   3,   21};
    for (int t = 0; t < 9; t++) {
        if (token[t] != want_token[t] || pos[t] != want_pos[t] || seq[t] != want_seq[t] ||
            slot[t] != want_slot[t])
            fail_msg("row %d: token %d pos %d seq %d slot %d, want token %d pos %d seq %d slot %d",
                     t, token[t], pos[t], seq[t], slot[t], want_token[t], want_pos[t],
                     want_seq[t], want_slot[t]);
    }
    assert_int_equal(token[9], -9);   /* nothing written past row T - 1 */
    assert_ptr_equal(table[0], ta);
    assert_ptr_equal(table[1], tc);
    assert_ptr_equal(table[2], tb);
    assert_int_equal(n_logits, 2);    /* C's chunk samples nothing */
    assert_int_equal(logit_row[0], 4);
    assert_int_equal(logit_row[1], 8);
}

static void an_empty_plan_flattens_to_no_rows(void **st) {
    KvPool pool = {.BS = BS, .NB = 8};
    Executor x = {.pool = &pool};
    StepPlan plan = {.n_items = 0};
    int n_logits = -1;
    assert_int_equal(exec_flatten(&x, &plan, &n_logits), 0);
    assert_int_equal(n_logits, 0);
}

int main(int argc, char **argv) {
    select_tests(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(flatten_follows_each_block_table_and_lists_the_sampling_rows),
        cmocka_unit_test(an_empty_plan_flattens_to_no_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
