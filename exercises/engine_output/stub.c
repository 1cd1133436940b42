/* exercises/engine_output/stub.c - the handout: every request ends at its
 * first token, which is reported but never appended.
 *
 * Copy this file to mine.c and write the two functions there; `make exercise
 * EX=engine_output` compiles your mine.c in the place of the solution,
 * inside src/engine.c, where engine_finish and fork_samples are.
 *
 * append: token joins sequence q (its tokens, n_tokens, n_out; the engine's
 * en->tokens_out); the step report gets one StepOutput for it (en->report.out
 * [en->report.n_out++]: seq, token, finish, and fork = {from, slot, blocks,
 * tokens} when q was just forked from forked_from, else fork.from = -1); and
 * if the token ends q (one of its end-of-generation tokens: ends_on(q,
 * token), FIN_EOS; max_tokens generated; n_tokens reaching
 * q->cap, the context), q finishes with that reason (engine_finish).
 *
 * step_outputs: for each item i of the plan, sampled[i] is the token it
 * sampled, EXEC_NO_TOKEN (a prefill chunk that samples nothing) or
 * EXEC_NONFINITE (its logits held NaN or an infinity: it ends with FIN_ERROR,
 * reported with token -1). A sequence that is the first of n samples
 * (q->fork_next set, q->fork_parent not) lets its samples fork
 * (fork_samples(en, q, i), which calls append for each). */
static void append(Engine *en, Sequence *q, int token, const Sequence *forked_from) {
    /* TODO: append, report, finish (notes/engine.md, "One step"). */
    en->report.out[en->report.n_out++] =
        (StepOutput){.seq = q, .token = token, .finish = FIN_LENGTH, .fork = {.from = -1}};
    engine_finish(en, q, FIN_LENGTH);
}

static void step_outputs(Engine *en, const StepPlan *plan, const int *sampled) {
    /* TODO: what each item produced, and the samples' forks. */
    for (int i = 0; i < plan->n_items; i++)
        if (sampled[i] != EXEC_NO_TOKEN) append(en, plan->items[i].seq, sampled[i], NULL);
}
