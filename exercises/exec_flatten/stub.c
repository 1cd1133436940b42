/* exercises/exec_flatten/stub.c - the handout: an empty batch.
 *
 * Copy this file to mine.c and write the function there; `make exercise
 * EX=exec_flatten` compiles your mine.c in the place of the solution, inside
 * src/executor.c.
 *
 * The contract (src/executor.h): for every position of every item of the
 * plan, in order, one row t of x->token, x->pos, x->seq (the item's index)
 * and x->slot (where that position's K/V live, through the sequence's block
 * table); x->table[i] = item i's block table; x->logit_row lists the last row
 * of each item that samples, and *n_logits counts them. Returns T, the rows.
 * With the handout the engine runs no rows and then samples from logits that
 * do not exist: expect the engine tests to crash. */
int exec_flatten(Executor *x, const StepPlan *p, int *n_logits) {
    /* TODO: flatten the plan (notes/executor.md, "From items to a batch"). */
    *n_logits = 0;
    return 0;
}
