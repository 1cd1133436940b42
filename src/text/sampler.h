/* sampler.h - choosing the next token from the logits.
 *
 * temperature 0 is greedy (argmax, lowest id on ties). Otherwise, in order:
 * divide logits by the temperature, softmax, keep the top_k most likely
 * (0 = all), keep the smallest set whose probability exceeds top_p (1 = all),
 * renormalise, draw with the sampler's own random stream (seeded, so a run
 * repeats exactly). */
#ifndef SAMPLER_H
#define SAMPLER_H
#include "base/err.h"
#include <stdint.h>

typedef struct {
    float temperature;   /* >= 0 */
    int top_k;           /* 0 or 1..V */
    float top_p;         /* (0, 1] */
    uint64_t seed;
} SamplerParams;

typedef struct {
    SamplerParams p;
    int V;
    uint64_t rng;        /* xorshift64* state */
    struct SamplerCand { float prob; int id; } *cand;   /* (V) work space */
} Sampler;

/* Checks the parameters (ST_ARG with a message naming the bad one). */
int sampler_init(Sampler *s, int V, SamplerParams p, Err *e);
void sampler_free(Sampler *s);                   /* accepts a zeroed Sampler */
/* Pick a token; logits (V) may be overwritten. */
int sampler_sample(Sampler *s, float *logits);
int sampler_argmax(const float *logits, int V);
/* Uniform float in [0, 1) from the sampler's stream. */
float sampler_uniform(Sampler *s);

#endif
