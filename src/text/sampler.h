/* sampler.h - choosing the next token from the logits.
 *
 * First, when a request asks for them, OpenAI's adjustments: logit_bias
 * and the presence and frequency penalties (sampler_pick). Then:
 * temperature 0 is greedy (argmax, lowest id on ties). Otherwise, in order:
 * divide logits by the temperature, softmax, keep the top_k most likely
 * (0 = all), keep the smallest set whose probability exceeds top_p (1 = all),
 * renormalise, draw with the sampler's own random stream (seeded, so a run
 * repeats exactly). */
#ifndef SAMPLER_H
#define SAMPLER_H
#include "base/err.h"
#include <stdint.h>

enum { SAMPLER_MAX_BIAS = 300, SAMPLER_MAX_TOP = 20 };

typedef struct {
    float temperature;   /* >= 0 */
    int top_k;           /* 0 or 1..V */
    float top_p;         /* (0, 1] */
    uint64_t seed;
    /* Before any of the above (sampler_pick), OpenAI's adjustments of the
     * logits: each token's bias added; then for each token already
     * generated, frequency_penalty times its count and presence_penalty once
     * subtracted. All zero: the logits as the model made them. */
    float presence_penalty, frequency_penalty;   /* [-2, 2] */
    int n_bias;
    struct SamplerBias { int id; float bias; } bias[SAMPLER_MAX_BIAS];   /* bias in [-100, 100] */
    /* Report each picked token's log-probability and the top_logprobs most
     * likely tokens' (sampler_pick fills Sampler.last): the log-softmax of
     * the adjusted logits, before temperature, top-k and top-p. */
    int logprobs;        /* 0 or 1 */
    int top_logprobs;    /* 0..SAMPLER_MAX_TOP */
} SamplerParams;

/* What sampler_pick saw of the token it picked (when logprobs is on). */
typedef struct {
    int id;
    float logprob;
    int n_top;
    struct SamplerTop { int id; float logprob; } top[SAMPLER_MAX_TOP];   /* most likely first */
} SamplerLast;

typedef struct {
    SamplerParams p;
    int V;
    uint64_t rng;        /* xorshift64* state */
    struct SamplerCand { float prob; int id; } *cand;   /* (V) work space */
    unsigned char *seen; /* (V) presence_penalty's marks, when it is on */
    float *row;          /* (V) the adjusted logits kept while sampling, when logprobs is on */
    SamplerLast last;    /* the last pick's, when logprobs is on */
} Sampler;

/* Checks the parameters (ST_ARG with a message naming the bad one). */
int sampler_init(Sampler *s, int V, SamplerParams p, Err *e);
void sampler_free(Sampler *s);                   /* accepts a zeroed Sampler */
/* Pick a token; logits (V) may be overwritten. */
int sampler_sample(Sampler *s, float *logits);
/* The same after OpenAI's adjustments (bias, then the penalties over the
 * n_out tokens generated so far, out), and with the log-probabilities
 * recorded in s->last when asked for. */
int sampler_pick(Sampler *s, float *logits, const int *out, int n_out);
/* Speculative decoding: check a draft token against what sampler_pick would
 * draw from these logits (the same adjustments, temperature, top-k, top-p).
 * Greedy: the argmax (the draft is accepted when it is the argmax).
 * Sampling: the draft with probability p(draft), else a token drawn from p
 * without the draft, so the token returned is distributed exactly as
 * sampler_pick's. Returns the draft when accepted, another token when not.
 * Fills no logprobs. logits (V) may be overwritten. */
int sampler_verify(Sampler *s, float *logits, int draft, const int *out, int n_out);
int sampler_argmax(const float *logits, int V);
/* Uniform float in [0, 1) from the sampler's stream. */
float sampler_uniform(Sampler *s);

#endif
