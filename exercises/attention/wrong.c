/* exercises/attention/wrong.c - a plausible answer that is wrong.
 *
 * When a new maximum appears it rescales the output accumulated so far, but
 * not the running sum: out and sum are then in different units (exp(s - old
 * max) against exp(s - new max)), and the final out / sum is too small. When
 * the first key has the largest score the maximum never changes and the
 * answer is right, which is why a test with one position, or with falling
 * scores, passes. */
static void attend_rows(Online *st, float *out, const float *q, const float *keys,
                        const float *values, int n, int S, size_t kvd, float scale) {
    for (int p = 0; p < n; p++) {
        const float *k = keys + (size_t)p * kvd;
        float score = 0.0f;
        for (int i = 0; i < S; i++) score += q[i] * k[i];
        score *= scale;
        if (score > st->max) {
            float c = ops_exp(st->max - score);
            for (int i = 0; i < S; i++) out[i] *= c;   /* ... and st->sum? */
            st->max = score;
        }
        float w = ops_exp(score - st->max);
        st->sum += w;
        const float *v = values + (size_t)p * kvd;
        for (int i = 0; i < S; i++) out[i] += w * v[i];
    }
}
