/* exercises/engine_output/wrong.c - a plausible answer that is wrong.
 *
 * append is right. step_outputs does things in the order that reads most
 * naturally: the first sequence's own token, then its samples'. But the
 * first's token can finish it (max_tokens 1, or eos at once), and finishing
 * gives its blocks back and lets its waiting samples go to be queued on
 * their own (engine_finish); by the time fork_samples runs there is nothing
 * left to fork. The answers are still right, because each sample, run on its
 * own, computes the prompt again (or finds it in the prefix cache): it costs
 * a prefill per sample, which is what forking exists to avoid, and no test
 * of the text alone can see it. */
static void append(Engine *en, Sequence *q, int token, const Sequence *forked_from) {
    q->tokens[q->n_tokens++] = token;
    q->n_out++;
    en->tokens_out++;
    FinishReason why = FIN_NONE;
    if (ends_on(q, token)) why = FIN_EOS;
    else if (q->n_out >= q->max_tokens) why = FIN_LENGTH;
    else if (q->n_tokens >= q->cap) why = FIN_CONTEXT;
    StepOutput *o = &en->report.out[en->report.n_out++];
    *o = (StepOutput){.seq = q, .token = token, .finish = why, .fork = {.from = -1}};
    if (forked_from)
        o->fork = (typeof(o->fork)){forked_from->id, q->slot, q->kv.n_blocks, q->kv.n_tokens};
    if (why != FIN_NONE) engine_finish(en, q, why);
}

static void step_outputs(Engine *en, const StepPlan *plan, const int *sampled) {
    for (int i = 0; i < plan->n_items; i++) {
        if (sampled[i] == EXEC_NO_TOKEN) continue;
        Sequence *q = plan->items[i].seq;
        if (sampled[i] == EXEC_NONFINITE) {
            en->report.out[en->report.n_out++] =
                (StepOutput){.seq = q, .token = -1, .finish = FIN_ERROR, .fork = {.from = -1}};
            engine_finish(en, q, FIN_ERROR);
            continue;
        }
        int first = q->fork_next && !q->fork_parent;
        append(en, q, sampled[i], NULL);             /* may finish q: its samples are let go */
        if (first) fork_samples(en, q, i);           /* ... and find nothing to fork */
    }
}
