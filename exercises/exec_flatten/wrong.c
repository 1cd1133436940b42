/* exercises/exec_flatten/wrong.c - a plausible answer that is wrong.
 *
 * It writes each token's K/V at its position: slot = pos. For a request
 * alone in a fresh pool that is even right, since its blocks come 0, 1, 2 ...
 * in order, so engine_alone_matches_the_contiguous_forward_loop passes. With
 * two sequences they write over each other's keys (both have a position 0),
 * and a sequence whose table is {7, 2} reads its keys from blocks 7 and 2
 * while they were written to blocks 0 and 1. */
int exec_flatten(Executor *x, const StepPlan *p, int *n_logits) {
    int T = 0, nl = 0;
    for (int i = 0; i < p->n_items; i++) {
        const StepItem *it = &p->items[i];
        const Sequence *q = it->seq;
        x->table[i] = q->kv.table;
        for (int j = 0; j < it->n; j++, T++) {
            int pos = it->from + j;
            x->token[T] = q->tokens[pos];
            x->pos[T] = pos;
            x->seq[T] = i;
            x->slot[T] = pos;   /* the block table is never asked */
        }
        if (it->sample) x->logit_row[nl++] = T - 1;
    }
    *n_logits = nl;
    return T;
}
