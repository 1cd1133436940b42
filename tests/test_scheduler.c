/* test_scheduler.c - the scheduler's rules taken one at a time, on values
 * built by hand (no model, no engine): what a rule says is checked here
 * number by number; tests/test_engine.c checks what it does to a workload.
 *
 * A sequence's rank (src/scheduler.c: sched_rank) is the priority level
 * (low 0, normal 1, high 2) plus one per aging_steps steps waited since its
 * arrival step, in integer division (notes/scheduler.md, "Rank"); FCFS ranks
 * everyone 0. */
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

int main(int argc, char **argv) {
    select_tests(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rank_is_the_level_plus_one_per_aging_steps_waited),
        cmocka_unit_test(without_aging_the_rank_is_the_level_however_long_it_waits),
        cmocka_unit_test(fcfs_ranks_everyone_zero),
        cmocka_unit_test(a_low_request_ranks_like_a_high_one_two_aging_periods_younger),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
