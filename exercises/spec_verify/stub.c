/* exercises/spec_verify/stub.c - the handout: no token at all.
 *
 * Copy this file to mine.c and write the function there; `make exercise
 * EX=spec_verify` compiles your mine.c in the place of the solution, inside
 * src/text/sampler.c, where Cand (a candidate: prob, id) and
 * sampler_uniform (a float in [0, 1) from the request's own random stream)
 * are.
 *
 * The contract: c[0 .. n) are the tokens the sampler may draw at this
 * position, with their probabilities p, which may sum to less than 1 (top-k
 * and top-p dropped the rest: renormalise by their total). draft is the
 * token the drafter guessed, with no distribution of its own: it may be
 * among the candidates or not. Return draft to accept it, or another token
 * to put in its place; over many calls the token returned must be
 * distributed exactly as p, whatever the draft. The caller
 * (sampler_verify, just below) has made c from the logits the way
 * sampler_sample would; the executor stops at the first token that is not
 * the draft. */
static int spec_accept(Sampler *s, const Cand *c, int n, int draft) {
    /* TODO: the rejection rule (notes/speculative.md, "Sampling: the
     * rejection rule"). */
    return -1;
}
