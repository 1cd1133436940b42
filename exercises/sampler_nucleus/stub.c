/* exercises/sampler_nucleus/stub.c - the handout: the nucleus is everything.
 *
 * Copy this file to mine.c and write the function there; `make exercise
 * EX=sampler_nucleus` compiles your mine.c in the place of the solution,
 * inside src/text/sampler.c, where Cand (a candidate: prob, id) is.
 *
 * The contract: c holds n >= 1 candidates sorted by probability, highest
 * first. Their probabilities may sum to less than 1, since top-k (or the
 * sampler's cut-off for hopeless tokens) dropped some before. Return how many
 * of the first candidates form the nucleus: the smallest prefix whose
 * probability exceeds top_p of what the n candidates hold together, so 1..n.
 * The caller (sampler_sample) then draws among c[0 .. returned - 1] in
 * proportion to their probabilities. With the handout top_p changes nothing:
 * every candidate can be drawn, however unlikely. */
static int nucleus_size(const Cand *c, int n, float top_p) {
    /* TODO: the nucleus (notes/sampler.md, "Top-p: the nucleus"). */
    return n;
}
