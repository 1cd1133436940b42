/* exercises/sched_rank/stub.c - the handout: every sequence ranks 0.
 *
 * Copy this file to mine.c and write the function there; `make exercise
 * EX=sched_rank` compiles your mine.c in the place of the solution, inside
 * src/scheduler.c.
 *
 * The contract (src/scheduler.h): where a sequence stands in the queue order,
 * higher first: under SCHED_PRIORITY its priority level, plus one for every
 * s->cfg.aging_steps steps it has waited since q->arrival_step (no aging when
 * aging_steps is 0); under SCHED_FCFS, 0 for everyone. s->step is the step
 * being decided. */
long sched_rank(const Scheduler *s, const Sequence *q) {
    /* TODO: with every rank equal, ties go to the earlier arrival: this is
     * FCFS whatever the policy says. */
    return 0;
}
