/* test_sampler.c - greedy, temperature, top-k and top-p sampling.
 *
 * The distribution tests draw many samples and compare frequencies with the
 * probabilities computed independently here in double precision; the bounds
 * are several standard deviations wide, so they fail for a wrong sampler, not
 * for an unlucky seed (and the seed is fixed, so a run repeats exactly). */
#include "base/mem.h"
#include "text/sampler.h"
#include "testutil.h"
#include <math.h>

enum { V = 8, DRAWS = 200000 };
static const float LOGITS[V] = {2.0f, 1.0f, 0.5f, 3.0f, -1.0f, 0.0f, 2.5f, 1.5f};

/* Probabilities the sampler should follow: softmax(logits / temperature),
 * restricted to the top k (0 = all) and the top-p nucleus, renormalised. */
static void expected(double *p, float temperature, int k, float top_p) {
    int order[V];
    double sum = 0;
    for (int i = 0; i < V; i++) {
        p[i] = exp(LOGITS[i] / temperature);
        sum += p[i];
        order[i] = i;
    }
    for (int i = 0; i < V; i++) p[i] /= sum;
    for (int i = 0; i < V; i++)   /* selection sort by probability, descending */
        for (int j = i + 1; j < V; j++)
            if (p[order[j]] > p[order[i]]) { int t = order[i]; order[i] = order[j]; order[j] = t; }
    int keep = k > 0 && k < V ? k : V;
    double kept = 0;
    for (int i = 0; i < keep; i++) kept += p[order[i]];
    double cum = 0;
    int last = keep - 1;
    for (int i = 0; i < keep; i++) {
        cum += p[order[i]];
        if (cum > top_p * kept) { last = i; break; }
    }
    double total = 0;
    for (int i = 0; i <= last; i++) total += p[order[i]];
    double q[V] = {0};
    for (int i = 0; i <= last; i++) q[order[i]] = p[order[i]] / total;
    memcpy(p, q, sizeof q);
}

static void check_distribution(float temperature, int k, float top_p) {
    Sampler s;
    Err e;
    assert_int_equal(sampler_init(&s, V, (SamplerParams){.temperature = temperature, .top_k = k, .top_p = top_p, .seed = 1234}, &e), ST_OK);
    int count[V] = {0};
    for (int n = 0; n < DRAWS; n++) {
        float lg[V];
        memcpy(lg, LOGITS, sizeof lg);
        int id = sampler_sample(&s, lg);
        assert_true(id >= 0 && id < V);
        count[id]++;
    }
    double p[V];
    expected(p, temperature, k, top_p);
    for (int i = 0; i < V; i++) {
        double f = (double)count[i] / DRAWS, sd = sqrt(p[i] * (1 - p[i]) / DRAWS);
        if (p[i] == 0) {
            if (count[i]) fail_msg("token %d outside top-k/top-p was drawn %d times", i, count[i]);
        } else if (fabs(f - p[i]) > 6 * sd + 1e-4) {
            fail_msg("T=%g k=%d p=%g: token %d drawn %.4f, want %.4f", (double)temperature, k,
                     (double)top_p, i, f, p[i]);
        }
    }
    sampler_free(&s);
}

static void temperature_zero_is_argmax_with_lowest_id_on_ties(void **st) {
    Sampler s;
    Err e;
    assert_int_equal(sampler_init(&s, V, (SamplerParams){.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 1}, &e), ST_OK);
    float lg[V];
    memcpy(lg, LOGITS, sizeof lg);
    assert_int_equal(sampler_sample(&s, lg), 3);
    lg[6] = 3.0f;   /* tie between 3 and 6 */
    assert_int_equal(sampler_sample(&s, lg), 3);
    sampler_free(&s);
}

static void plain_sampling_follows_softmax(void **st) { check_distribution(1.0f, 0, 1.0f); }
static void temperature_sharpens_and_flattens(void **st) {
    check_distribution(0.5f, 0, 1.0f);
    check_distribution(2.0f, 0, 1.0f);
}
static void top_k_keeps_only_the_k_best(void **st) {
    check_distribution(1.0f, 3, 1.0f);
    check_distribution(1.0f, 1, 1.0f);
}
static void top_p_keeps_the_smallest_nucleus(void **st) {
    check_distribution(1.0f, 0, 0.5f);
    check_distribution(1.0f, 0, 0.9f);
    check_distribution(0.7f, 4, 0.8f);
}

/* Draw n times; count[id] says how often each token came. */
static void draw(float temperature, int k, float top_p, int n, int count[V]) {
    Sampler s;
    Err e;
    assert_int_equal(sampler_init(&s, V, (SamplerParams){.temperature = temperature, .top_k = k, .top_p = top_p, .seed = 99}, &e), ST_OK);
    memset(count, 0, V * sizeof count[0]);
    for (int i = 0; i < n; i++) {
        float lg[V];
        memcpy(lg, LOGITS, sizeof lg);
        count[sampler_sample(&s, lg)]++;
    }
    sampler_free(&s);
}

/* Exactly which tokens can come, worked by hand from LOGITS (tokens by
 * probability: 3, 6, 0, 7, 1, 2, 5, 4). At temperature 0.7 the top 4 hold
 * 0.513 + 0.251 + 0.123 + 0.060 = 0.947, so top-p 0.8 wants 0.8 * 0.947 =
 * 0.758 of it: 3 and 6 (0.764) reach it. At temperature 1 the top 3 hold
 * 0.403 + 0.244 + 0.148 = 0.795; 0.7 of that is 0.556, reached by 3 and 6
 * (0.647). A nucleus measured against 1 instead would keep a third token in
 * both cases. */
static void the_nucleus_after_top_k_is_a_share_of_what_top_k_kept(void **st) {
    int count[V];
    draw(0.7f, 4, 0.8f, 4000, count);
    for (int i = 0; i < V; i++)
        if ((i == 3 || i == 6) != (count[i] > 0))
            fail_msg("T 0.7, top-k 4, top-p 0.8: token %d drawn %d times (want only 3 and 6)", i, count[i]);
    draw(1.0f, 3, 0.7f, 4000, count);
    for (int i = 0; i < V; i++)
        if ((i == 3 || i == 6) != (count[i] > 0))
            fail_msg("T 1, top-k 3, top-p 0.7: token %d drawn %d times (want only 3 and 6)", i, count[i]);
}

/* The nucleus holds the token that crosses top_p, so it is never empty: a
 * top-p below the best token's probability (0.403) keeps that token alone,
 * and sampling becomes greedy. */
static void a_top_p_below_the_best_probability_keeps_the_best_alone(void **st) {
    const float ps[] = {0.05f, 0.4f};
    for (int j = 0; j < 2; j++) {
        int count[V];
        draw(1.0f, 0, ps[j], 2000, count);
        if (count[3] != 2000) fail_msg("top-p %g: token 3 drawn %d of 2000 times", (double)ps[j], count[3]);
    }
}

/* Two tokens and a tiny top-p: the cut-off that skips hopeless candidates,
 * (1 - top_p) / (V - 1), is then above both probabilities. The nucleus still
 * holds the better token (and, on a tie, one of the two): never nothing. */
static void a_tiny_top_p_over_two_tokens_still_draws_the_best(void **st) {
    static const float two[][2] = {{0.0f, 0.0f}, {1.0f, 0.0f}, {-3.0f, 2.0f}};
    for (int k = 0; k < 3; k++) {
        Sampler s;
        Err e;
        assert_int_equal(sampler_init(&s, 2, (SamplerParams){.temperature = 1.0f, .top_k = 0, .top_p = 0.001f, .seed = 5}, &e), ST_OK);
        for (int n = 0; n < 50; n++) {
            float lg[2] = {two[k][0], two[k][1]};
            int id = sampler_sample(&s, lg);
            if (k == 0) assert_true(id == 0 || id == 1);
            else assert_int_equal(id, two[k][0] > two[k][1] ? 0 : 1);
        }
        sampler_free(&s);
    }
}

static void same_seed_repeats_and_other_seed_differs(void **st) {
    int runs[3][64];
    uint64_t seeds[3] = {7, 7, 8};
    for (int r = 0; r < 3; r++) {
        Sampler s;
        Err e;
        assert_int_equal(sampler_init(&s, V, (SamplerParams){.temperature = 1.0f, .top_k = 0, .top_p = 0.95f, .seed = seeds[r]}, &e), ST_OK);
        for (int n = 0; n < 64; n++) {
            float lg[V];
            memcpy(lg, LOGITS, sizeof lg);
            runs[r][n] = sampler_sample(&s, lg);
        }
        sampler_free(&s);
    }
    assert_memory_equal(runs[0], runs[1], sizeof runs[0]);
    assert_memory_not_equal(runs[0], runs[2], sizeof runs[0]);
}

static void bad_parameters_are_refused_with_a_reason(void **st) {
    Sampler s;
    Err e;
    assert_int_equal(sampler_init(&s, V, (SamplerParams){.temperature = -0.1f, .top_k = 0, .top_p = 1.0f, .seed = 1}, &e), ST_ARG);
    assert_non_null(strstr(e.msg, "temperature"));
    assert_int_equal(sampler_init(&s, V, (SamplerParams){.temperature = 1.0f, .top_k = 0, .top_p = 0.0f, .seed = 1}, &e), ST_ARG);
    assert_non_null(strstr(e.msg, "top-p"));
    assert_int_equal(sampler_init(&s, V, (SamplerParams){.temperature = 1.0f, .top_k = 0, .top_p = 1.5f, .seed = 1}, &e), ST_ARG);
    assert_int_equal(sampler_init(&s, V, (SamplerParams){.temperature = 1.0f, .top_k = -2, .top_p = 1.0f, .seed = 1}, &e), ST_ARG);
    assert_non_null(strstr(e.msg, "top-k"));
    assert_int_equal(sampler_init(&s, V, (SamplerParams){.temperature = NAN, .top_k = 0, .top_p = 1.0f, .seed = 1}, &e), ST_ARG);
}

/* OpenAI's adjustments, computed here in double: the biases, then for each
 * generated token its count times frequency_penalty and presence_penalty
 * once; then the log-softmax the logprobs report. */
static void adjusted_logprobs(double *lp, const SamplerParams *p, const int *out, int n_out) {
    double a[V];
    for (int i = 0; i < V; i++) {
        a[i] = LOGITS[i];
        int count = 0;
        for (int j = 0; j < n_out; j++) count += out[j] == i;
        for (int j = 0; j < p->n_bias; j++) if (p->bias[j].id == i) a[i] += p->bias[j].bias;
        a[i] -= count * (double)p->frequency_penalty + (count > 0) * (double)p->presence_penalty;
    }
    double max = a[0], sum = 0;
    for (int i = 1; i < V; i++) max = a[i] > max ? a[i] : max;
    for (int i = 0; i < V; i++) sum += exp(a[i] - max);
    for (int i = 0; i < V; i++) lp[i] = a[i] - max - log(sum);
}

static void a_bias_of_100_forces_a_token_and_minus_100_bans_one(void **st) {
    Sampler s;
    Err e;
    SamplerParams p = {.temperature = 0.0f, .top_p = 1.0f, .n_bias = 1};
    p.bias[0] = (struct SamplerBias){4, 100.0f};                 /* the least likely */
    assert_int_equal(sampler_init(&s, V, p, &e), ST_OK);
    float lg[V];
    memcpy(lg, LOGITS, sizeof lg);
    assert_int_equal(sampler_pick(&s, lg, NULL, 0), 4);
    sampler_free(&s);
    p.bias[0] = (struct SamplerBias){3, -100.0f};                /* the most likely: 6 is next */
    p.temperature = 1.0f;
    p.seed = 7;
    assert_int_equal(sampler_init(&s, V, p, &e), ST_OK);
    for (int k = 0; k < 2000; k++) {
        memcpy(lg, LOGITS, sizeof lg);
        assert_int_not_equal(sampler_pick(&s, lg, NULL, 0), 3);
    }
    sampler_free(&s);
}

/* The logprobs a pick reports are the adjusted distribution's, before the
 * temperature: the picked token's and the top ones', most likely first. */
static void logprobs_are_the_log_softmax_after_bias_and_penalties(void **st) {
    static const int out[] = {3, 3, 6, 0, 3};
    static const float temps[] = {0.0f, 0.7f, 1.5f};
    for (int t = 0; t < 3; t++) {
        SamplerParams p = {.temperature = temps[t], .top_p = 0.9f, .seed = 11, .presence_penalty = 0.5f,
                           .frequency_penalty = 0.75f, .n_bias = 2, .logprobs = 1, .top_logprobs = 5};
        p.bias[0] = (struct SamplerBias){1, 2.0f};
        p.bias[1] = (struct SamplerBias){6, -0.25f};
        double want[V];
        adjusted_logprobs(want, &p, out, 5);
        Sampler s;
        Err e;
        assert_int_equal(sampler_init(&s, V, p, &e), ST_OK);
        for (int k = 0; k < 50; k++) {
            float lg[V];
            memcpy(lg, LOGITS, sizeof lg);
            int id = sampler_pick(&s, lg, out, 5);
            assert_int_equal(s.last.id, id);
            if (fabs(s.last.logprob - want[id]) > 1e-5) fail_msg("token %d: logprob %g, want %g", id, s.last.logprob, want[id]);
            assert_int_equal(s.last.n_top, 5);
            for (int i = 0; i < 5; i++) {
                int tid = s.last.top[i].id;
                if (fabs(s.last.top[i].logprob - want[tid]) > 1e-5) fail_msg("top %d", i);
                if (i && s.last.top[i].logprob > s.last.top[i - 1].logprob) fail_msg("top %d out of order", i);
                for (int j = 0; j < V; j++)                      /* nothing left out is likelier */
                    if (want[j] > want[tid] + 1e-9) {
                        int listed = 0;
                        for (int m = 0; m < i; m++) listed |= s.last.top[m].id == j;
                        if (!listed) fail_msg("token %d (%g) is likelier than top %d (%g)", j, want[j], i, want[tid]);
                    }
            }
            if (temps[t] == 0.0f) {                            /* greedy picks the adjusted argmax */
                for (int j = 0; j < V; j++) assert_true(want[j] <= want[id] + 1e-9);
            }
        }
        sampler_free(&s);
    }
}

static void penalties_and_biases_out_of_range_are_refused(void **st) {
    Sampler s;
    Err e;
    SamplerParams p = {.temperature = 1.0f, .top_p = 1.0f, .presence_penalty = 2.5f};
    assert_int_equal(sampler_init(&s, V, p, &e), ST_ARG);
    p = (SamplerParams){.temperature = 1.0f, .top_p = 1.0f, .n_bias = 1};
    p.bias[0] = (struct SamplerBias){V, 1.0f};
    assert_int_equal(sampler_init(&s, V, p, &e), ST_ARG);
    assert_non_null(strstr(e.msg, "token 8"));
    p.bias[0] = (struct SamplerBias){1, 101.0f};
    assert_int_equal(sampler_init(&s, V, p, &e), ST_ARG);
    p = (SamplerParams){.temperature = 1.0f, .top_p = 1.0f, .logprobs = 1, .top_logprobs = 21};
    assert_int_equal(sampler_init(&s, V, p, &e), ST_ARG);
}

/* ---- speculative decoding: sampler_verify ---- */

/* Draw n tokens through sampler_verify with the given draft; count them. */
static void verify_counts(Sampler *s, int draft, int n, int *count) {
    for (int i = 0; i < V; i++) count[i] = 0;
    for (int d = 0; d < n; d++) {
        float lg[V];
        memcpy(lg, LOGITS, sizeof lg);
        int id = sampler_verify(s, lg, draft, NULL, 0);
        assert_true(id >= 0 && id < V);
        count[id]++;
    }
}

/* Whatever the draft, the token sampler_verify returns is distributed as
 * sampler_sample's: a chi-square goodness-of-fit test against the
 * probabilities computed here, at a significance of 0.001, for a likely
 * draft, an unlikely one, and under top-k and top-p. */
static void verify_draws_exactly_the_sampler_distribution(void **state) {
    static const struct { float t; int k; float p; int draft; } cases[] = {
        {1.0f, 0, 1.0f, 0}, {1.0f, 0, 1.0f, 4}, {0.7f, 5, 1.0f, 6}, {1.3f, 0, 0.8f, 7}, {1.0f, 4, 0.9f, 3}};
    enum { N = 60000 };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        Sampler s;
        Err e;
        SamplerParams sp = {.temperature = cases[c].t, .top_k = cases[c].k, .top_p = cases[c].p, .seed = 99 + c};
        assert_int_equal(sampler_init(&s, V, sp, &e), ST_OK);
        int count[V];
        verify_counts(&s, cases[c].draft, N, count);
        double p[V], chi2 = 0.0;
        expected(p, cases[c].t, cases[c].k, cases[c].p);
        int df = -1;
        for (int i = 0; i < V; i++) {
            if (p[i] == 0.0) {
                assert_int_equal(count[i], 0);   /* outside the kept tokens: never, draft or not */
                continue;
            }
            double want = p[i] * N;
            chi2 += (count[i] - want) * (count[i] - want) / want;
            df++;
        }
        double limit = chi_square_critical(df, 3.0902);
        if (chi2 > limit)
            fail_msg("case %zu (draft %d): chi-square %.1f over %d degrees of freedom, above %.1f (0.001)",
                     c, cases[c].draft, chi2, df, limit);
        sampler_free(&s);
    }
}

/* A draft the sampler could never draw (outside top-k) is never returned;
 * the replacement is drawn among the kept tokens. */
static void verify_never_returns_a_draft_outside_the_kept_tokens(void **state) {
    Sampler s;
    Err e;
    assert_int_equal(sampler_init(&s, V, (SamplerParams){.temperature = 1.0f, .top_k = 3, .top_p = 1.0f, .seed = 5}, &e),
                     ST_OK);
    int count[V];
    verify_counts(&s, 4, 5000, count);   /* token 4 has the lowest logit */
    assert_int_equal(count[4], 0);
    assert_int_equal(count[3] + count[6] + count[0], 5000);   /* the top 3: logits 3, 2.5, 2 */
    assert_true(count[3] > count[6] && count[6] > count[0] && count[0] > 0);
    sampler_free(&s);
}

/* A draft that holds all of the probability is always accepted; greedy
 * verification is the argmax, whatever the draft. */
static void verify_accepts_a_certain_draft_every_time(void **state) {
    Sampler s;
    Err e;
    assert_int_equal(sampler_init(&s, V, (SamplerParams){.temperature = 1.0f, .top_k = 1, .top_p = 1.0f, .seed = 8}, &e),
                     ST_OK);
    int count[V];
    verify_counts(&s, 3, 2000, count);   /* top-k 1 keeps token 3 alone */
    assert_int_equal(count[3], 2000);
    sampler_free(&s);
    assert_int_equal(sampler_init(&s, V, (SamplerParams){.temperature = 0.0f, .top_p = 1.0f}, &e), ST_OK);
    for (int draft = 0; draft < V; draft++) {
        float lg[V];
        memcpy(lg, LOGITS, sizeof lg);
        assert_int_equal(sampler_verify(&s, lg, draft, NULL, 0), 3);
    }
    sampler_free(&s);
}

int main(int argc, char **argv) {
    select_tests(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(temperature_zero_is_argmax_with_lowest_id_on_ties),
        cmocka_unit_test(plain_sampling_follows_softmax),
        cmocka_unit_test(temperature_sharpens_and_flattens),
        cmocka_unit_test(top_k_keeps_only_the_k_best),
        cmocka_unit_test(top_p_keeps_the_smallest_nucleus),
        cmocka_unit_test(the_nucleus_after_top_k_is_a_share_of_what_top_k_kept),
        cmocka_unit_test(a_top_p_below_the_best_probability_keeps_the_best_alone),
        cmocka_unit_test(a_tiny_top_p_over_two_tokens_still_draws_the_best),
        cmocka_unit_test(same_seed_repeats_and_other_seed_differs),
        cmocka_unit_test(bad_parameters_are_refused_with_a_reason),
        cmocka_unit_test(a_bias_of_100_forces_a_token_and_minus_100_bans_one),
        cmocka_unit_test(logprobs_are_the_log_softmax_after_bias_and_penalties),
        cmocka_unit_test(penalties_and_biases_out_of_range_are_refused),
        cmocka_unit_test(verify_draws_exactly_the_sampler_distribution),
        cmocka_unit_test(verify_never_returns_a_draft_outside_the_kept_tokens),
        cmocka_unit_test(verify_accepts_a_certain_draft_every_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
