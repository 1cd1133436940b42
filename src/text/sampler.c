/* sampler.c - see sampler.h.
 *
 * Sorting all V candidates for every token would cost more than it needs to:
 * top-k keeps a small min-heap of the k best, and top-p first drops every token
 * whose probability is below (1 - top_p) / (V - 1). Those can never be in the
 * nucleus: together they hold less than 1 - top_p, so the tokens left hold more
 * than top_p and the nucleus is among them. Only the survivors are sorted. */
#include "text/sampler.h"
#include "base/mem.h"
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct SamplerCand Cand;

int sampler_init(Sampler *s, int V, SamplerParams p, Err *e) {
    *s = (Sampler){0};
    if (!(p.temperature >= 0.0f) || isinf(p.temperature))
        return err_set(e, ST_ARG, "temperature %g must be a finite number >= 0", (double)p.temperature);
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
        return err_set(e, ST_ARG, "top-p %g must be in (0, 1]", (double)p.top_p);
    if (p.top_k < 0) return err_set(e, ST_ARG, "top-k %d must be >= 0", p.top_k);
    if (V < 1) return err_set(e, ST_ARG, "vocabulary size %d must be >= 1", V);
    if (!(fabsf(p.presence_penalty) <= 2.0f) || !(fabsf(p.frequency_penalty) <= 2.0f))
        return err_set(e, ST_ARG, "presence and frequency penalties %g, %g must be in [-2, 2]",
                       (double)p.presence_penalty, (double)p.frequency_penalty);
    if (p.n_bias < 0 || p.n_bias > SAMPLER_MAX_BIAS)
        return err_set(e, ST_ARG, "%d logit biases: at most %d", p.n_bias, SAMPLER_MAX_BIAS);
    for (int i = 0; i < p.n_bias; i++)
        if (p.bias[i].id < 0 || p.bias[i].id >= V || !(fabsf(p.bias[i].bias) <= 100.0f))
            return err_set(e, ST_ARG, "logit bias %d: token %d (vocabulary 0..%d), bias %g (want -100..100)", i,
                           p.bias[i].id, V - 1, (double)p.bias[i].bias);
    if (p.top_logprobs < 0 || p.top_logprobs > SAMPLER_MAX_TOP)
        return err_set(e, ST_ARG, "top_logprobs %d must be in 0..%d", p.top_logprobs, SAMPLER_MAX_TOP);
    s->p = p;
    s->V = V;
    s->rng = p.seed ? p.seed : 0x9E3779B97F4A7C15ull;   /* xorshift must not start at 0 */
    s->cand = mem_alloc((size_t)V * sizeof(Cand));
    if (p.presence_penalty != 0.0f) s->seen = mem_alloc((size_t)V);
    if (p.logprobs) s->row = mem_alloc((size_t)V * sizeof(float));
    if (!s->cand || (p.presence_penalty != 0.0f && !s->seen) || (p.logprobs && !s->row)) {
        sampler_free(s);
        return err_set(e, ST_NOMEM, "sampler: out of memory");
    }
    return ST_OK;
}

void sampler_free(Sampler *s) {
    mem_free(s->cand);
    mem_free(s->seen);
    mem_free(s->row);
    *s = (Sampler){0};
}

int sampler_argmax(const float *logits, int V) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

float sampler_uniform(Sampler *s) {
    s->rng ^= s->rng >> 12;
    s->rng ^= s->rng << 25;
    s->rng ^= s->rng >> 27;
    uint64_t r = s->rng * 0x2545F4914F6CDD1Dull;
    return (float)(r >> 40) * 0x1p-24f;   /* 24 random bits: exactly representable */
}

static int by_prob_desc(const void *a, const void *b) {
    const Cand *x = a, *y = b;
    if (x->prob != y->prob) return x->prob < y->prob ? 1 : -1;
    return x->id - y->id;   /* stable order on ties, so results never depend on qsort */
}

/* Min-heap on prob of the k best candidates seen so far. */
static void sift_down(Cand *h, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && by_prob_desc(&h[l], &h[m]) > 0) m = l;
        if (r < n && by_prob_desc(&h[r], &h[m]) > 0) m = r;
        if (m == i) return;
        Cand t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* exercises/sampler_nucleus/ hollows this function: built with -DEXERCISE_SAMPLER_NUCLEUS,
 * the file that macro names stands in its place (tools/exercise.sh). */
#ifdef EXERCISE_SAMPLER_NUCLEUS
#include EXERCISE_SAMPLER_NUCLEUS
#else
/* The nucleus among n candidates sorted by probability, highest first: how
 * many of the first ones to keep, 1..n. Their probabilities may sum to less
 * than 1 (top-k, or the cut-off above, dropped some), so top_p is a share of
 * what they hold, not of 1: renormalising first, then cutting, is the same
 * thing. The nucleus is the smallest prefix whose share exceeds top_p; the
 * candidate that crosses the line is in it, so it is never empty. */
static int nucleus_size(const Cand *c, int n, float top_p) {
    double kept = 0.0;
    for (int i = 0; i < n; i++) kept += c[i].prob;
    double target = top_p * kept, cum = 0.0;
    for (int i = 0; i < n; i++) {
        cum += c[i].prob;
        if (cum > target) return i + 1;
    }
    return n;   /* top_p = 1, or rounding: everything */
}
#endif

/* softmax(logits / temperature), in place. Returns the sum of the
 * exponentials (the largest is exp(0) = 1, so 1 / sum is its probability). */
static double softmax_t(Sampler *s, float *logits) {
    int V = s->V;
    float max = logits[0];
    for (int i = 1; i < V; i++) max = fmaxf(max, logits[i]);
    double sum = 0.0;
    for (int i = 0; i < V; i++) {
        logits[i] = expf((logits[i] - max) / s->p.temperature);
        sum += logits[i];
    }
    for (int i = 0; i < V; i++) logits[i] = (float)(logits[i] / sum);
    return sum;
}

/* top-k, then top-p, over the probabilities: the candidates left in
 * s->cand, most likely first, and how many. 0 when neither truncates (the
 * draw is then from all V tokens, in id order). */
static int truncate_probs(Sampler *s, const float *probs, double sum) {
    int V = s->V;
    Cand *c = s->cand;
    int n = 0;
    if (s->p.top_k > 0 && s->p.top_k < V) {
        int k = s->p.top_k;
        for (int i = 0; i < V; i++) {
            Cand x = {probs[i], i};
            if (n < k) {
                c[n++] = x;
                if (n == k)
                    for (int j = k / 2 - 1; j >= 0; j--) sift_down(c, k, j);
            } else if (by_prob_desc(&x, &c[0]) < 0) {   /* better than the worst kept */
                c[0] = x;
                sift_down(c, k, 0);
            }
        }
    } else if (s->p.top_p < 1.0f) {
        float cutoff = V > 1 ? (1.0f - s->p.top_p) / (float)(V - 1) : 0.0f;
        /* never above the most likely token (probability 1 / sum: its
         * exponent was 0), which every nucleus holds: with V = 2 and a tiny
         * top_p the bound alone would keep no candidate at all */
        cutoff = fminf(cutoff, (float)(1.0 / sum));
        for (int i = 0; i < V; i++)
            if (probs[i] >= cutoff) c[n++] = (Cand){probs[i], i};
    } else {
        return 0;
    }
    qsort(c, (size_t)n, sizeof(Cand), by_prob_desc);
    int kept = nucleus_size(c, n, s->p.top_p);
    /* The nucleus is never empty (the candidate that crosses top_p is in
     * it): an empty one is a bug in nucleus_size, said here rather than
     * read as c[-1]. Without asserts (NDEBUG) it keeps the best candidate. */
    assert(kept >= 1 && kept <= n && "nucleus_size returned an empty nucleus (or more than n)");
    return kept < 1 ? 1 : kept > n ? n : kept;
}

int sampler_sample(Sampler *s, float *logits) {
    int V = s->V;
    if (s->p.temperature == 0.0f) return sampler_argmax(logits, V);
    double sum = softmax_t(s, logits);
    int kept = truncate_probs(s, logits, sum);
    if (kept == 0) {   /* no truncation: draw from the whole distribution */
        float r = sampler_uniform(s), cdf = 0.0f;
        for (int i = 0; i < V; i++) {
            cdf += logits[i];
            if (r < cdf) return i;
        }
        return V - 1;   /* rounding left cdf just below 1 */
    }
    const Cand *c = s->cand;
    int last = kept - 1;
    double total = 0.0;
    for (int i = 0; i <= last; i++) total += c[i].prob;
    double r = sampler_uniform(s) * total, cdf = 0.0;
    for (int i = 0; i <= last; i++) {
        cdf += c[i].prob;
        if (r < cdf) return c[i].id;
    }
    return c[last].id;
}

/* exercises/spec_verify/ hollows this function: built with -DEXERCISE_SPEC_VERIFY,
 * the file that macro names stands in its place (tools/exercise.sh). */
#ifdef EXERCISE_SPEC_VERIFY
#include EXERCISE_SPEC_VERIFY
#else
/* Speculative sampling's rule (Leviathan et al. 2023; Chen et al. 2023)
 * for a draft that came with no distribution of its own: a guess the
 * drafter was sure of, q(draft) = 1. c[0..n) are the tokens the sampler may
 * draw, with probabilities p that may sum to less than 1 (top-k and top-p
 * dropped the rest): renormalise. Accept the draft with probability
 * min(1, p/q) = p(draft); otherwise draw from (p - q)+, which is p with the
 * draft taken out, renormalised. Any token y other than the draft then
 * comes out with (1 - p(draft)) * p(y) / (1 - p(draft)) = p(y), and the
 * draft with p(draft): exactly p, whatever the guess was. */
static int spec_accept(Sampler *s, const Cand *c, int n, int draft) {
    double total = 0.0, p_draft = 0.0;
    for (int i = 0; i < n; i++) {
        total += c[i].prob;
        if (c[i].id == draft) p_draft = c[i].prob;
    }
    if (sampler_uniform(s) * total < p_draft) return draft;
    double rest = total - p_draft, r = sampler_uniform(s) * rest, cdf = 0.0;
    int last = -1;
    for (int i = 0; i < n; i++) {
        if (c[i].id == draft || c[i].prob <= 0.0f) continue;
        cdf += c[i].prob;
        last = c[i].id;
        if (r < cdf) return c[i].id;
    }
    return last >= 0 ? last : draft;   /* rounding left cdf just below rest */
}
#endif

/* OpenAI's adjustments, in its order: the biases, then the penalties. */
static void adjust(Sampler *s, float *logits, const int *out, int n_out) {
    const SamplerParams *p = &s->p;
    for (int i = 0; i < p->n_bias; i++) logits[p->bias[i].id] += p->bias[i].bias;
    if (p->frequency_penalty != 0.0f)
        for (int i = 0; i < n_out; i++) logits[out[i]] -= p->frequency_penalty;
    if (p->presence_penalty != 0.0f) {
        for (int i = 0; i < n_out; i++) s->seen[out[i]] = 0;
        for (int i = 0; i < n_out; i++)
            if (!s->seen[out[i]]) {
                s->seen[out[i]] = 1;
                logits[out[i]] -= p->presence_penalty;
            }
    }
}

/* log(sum(exp(logits))), computed from the largest. */
static double log_sum_exp(const float *logits, int V) {
    float max = logits[0];
    for (int i = 1; i < V; i++) max = fmaxf(max, logits[i]);
    double sum = 0.0;
    for (int i = 0; i < V; i++) sum += exp((double)logits[i] - max);
    return max + log(sum);
}

int sampler_verify(Sampler *s, float *logits, int draft, const int *out, int n_out) {
    adjust(s, logits, out, n_out);
    int V = s->V;
    if (s->p.temperature == 0.0f) return sampler_argmax(logits, V);   /* p is all on the argmax */
    double sum = softmax_t(s, logits);
    int n = truncate_probs(s, logits, sum);
    if (n == 0) {   /* no truncation: every token is a candidate */
        for (int i = 0; i < V; i++) s->cand[i] = (Cand){logits[i], i};
        n = V;
    }
    return spec_accept(s, s->cand, n, draft);
}

int sampler_pick(Sampler *s, float *logits, const int *out, int n_out) {
    adjust(s, logits, out, n_out);
    if (!s->p.logprobs) return sampler_sample(s, logits);
    /* the top alternatives, before sampling scales the row: a min-heap of the k best */
    int V = s->V, k = s->p.top_logprobs < V ? s->p.top_logprobs : V, n = 0;
    Cand *c = s->cand;
    for (int i = 0; i < V && k > 0; i++) {
        Cand x = {logits[i], i};
        if (n < k) {
            c[n++] = x;
            if (n == k)
                for (int j = k / 2 - 1; j >= 0; j--) sift_down(c, k, j);
        } else if (by_prob_desc(&x, &c[0]) < 0) {
            c[0] = x;
            sift_down(c, k, 0);
        }
    }
    qsort(c, (size_t)n, sizeof(Cand), by_prob_desc);
    double lse = log_sum_exp(logits, V);
    SamplerLast *last = &s->last;
    last->n_top = n;
    for (int i = 0; i < n; i++) last->top[i] = (struct SamplerTop){c[i].id, (float)(c[i].prob - lse)};
    /* Sampling turns the row into probabilities at the temperature; the
     * picked token's log-probability is its adjusted logit's, so the row is
     * kept until the pick is known. */
    memcpy(s->row, logits, (size_t)V * sizeof(float));
    int id = sampler_sample(s, logits);
    last->id = id;
    last->logprob = (float)(s->row[id] - lse);
    return id;
}
