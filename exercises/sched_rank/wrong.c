/* exercises/sched_rank/wrong.c - a plausible answer that is wrong.
 *
 * It makes aging a bonus proportional to the priority: "a request gains
 * (waited / aging_steps) times its own level". It looks fair (everyone's rank
 * grows while it waits) until you take the level of a low request: 0. Zero
 * times any wait is zero, so the request aging exists for never rises, and a
 * stream of high requests starves it forever. The direct test sees the
 * numbers; aging_bounds_how_long_a_low_request_waits sees the starvation. */
long sched_rank(const Scheduler *s, const Sequence *q) {
    if (s->cfg.policy == SCHED_FCFS) return 0;
    long rank = q->priority;
    if (s->cfg.aging_steps > 0) rank *= 1 + (s->step - q->arrival_step) / s->cfg.aging_steps;
    return rank;
}
