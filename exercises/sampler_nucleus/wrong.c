/* exercises/sampler_nucleus/wrong.c - a plausible answer that is wrong.
 *
 * It adds probabilities until the sum passes top_p, as the definition of
 * top-p says, and forgets that the candidates are not the whole distribution:
 * after top-k, the n candidates hold less than 1, so "0.8 of the mass" is
 * 0.8 of what they hold, not 0.8 of 1. Without top-k it is right (the
 * sampler's cut-off drops so little that it hardly shows), which is why
 * plain top-p draws look fine. With top-k 4 and top-p 0.8 the candidates
 * hold 0.95; the nucleus is reached at 0.76 after two tokens, and this answer
 * keeps a third. */
static int nucleus_size(const Cand *c, int n, float top_p) {
    double cum = 0.0;
    for (int i = 0; i < n; i++) {
        cum += c[i].prob;
        if (cum > top_p) return i + 1;   /* top_p of 1, not of what the candidates hold */
    }
    return n;
}
