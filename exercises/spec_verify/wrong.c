/* exercises/spec_verify/wrong.c - a plausible answer that is wrong.
 *
 * It accepts the draft with probability p(draft), as the rule says, and on
 * a rejection draws a fresh token from p, as the sampler always does. But
 * that fresh draw can be the draft again, so the draft comes out with
 * p(draft) + (1 - p(draft)) * p(draft): too often, and every other token too
 * rarely. The draft must be taken out of the second draw (renormalising
 * what is left), which is exactly what makes the sum come out as p. With
 * the drafts of prompt lookup this bias is invisible in greedy runs and in
 * any single sample; only a distribution shows it. */
static int spec_accept(Sampler *s, const Cand *c, int n, int draft) {
    double total = 0.0, p_draft = 0.0;
    for (int i = 0; i < n; i++) {
        total += c[i].prob;
        if (c[i].id == draft) p_draft = c[i].prob;
    }
    if (sampler_uniform(s) * total < p_draft) return draft;
    double r = sampler_uniform(s) * total, cdf = 0.0;
    for (int i = 0; i < n; i++) {
        cdf += c[i].prob;   /* the draft included: the mistake */
        if (r < cdf) return c[i].id;
    }
    return c[n - 1].id;
}
