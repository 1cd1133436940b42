/* exercises/attention/stub.c - the handout: the keys are never looked at.
 *
 * Copy this file to mine.c and write the function there; `make exercise
 * EX=attention` compiles your mine.c in the place of the solution, inside
 * src/model.c, where Online (the running state: max, sum) and ops_exp are.
 *
 * The contract: fold n consecutive rows of keys and values (row p's key at
 * keys + p * kvd, its value at values + p * kvd, S floats each) into the
 * running state of one query head: st->max, the largest score so far;
 * st->sum, the sum of exp(score - max); out (S floats), the sum of
 * exp(score - max) * value. score = (q . key) * scale. The caller
 * (model_attend_paged) starts with max = -INFINITY, sum = 0, out = 0, calls
 * this once per block of the sequence, and divides out by sum at the end.
 * With the handout, sum stays 0 and the output is 0 / 0: NaN. */
static void attend_rows(Online *st, float *out, const float *q, const float *keys,
                        const float *values, int n, int S, size_t kvd, float scale) {
    /* TODO: the online softmax (notes/executor.md, "Paged attention with an
     * online softmax"). */
}
