/* test_train.c - the trainer's gradients against finite differences.
 *
 * The reference is written here, independently, with plain loops in double
 * precision: the loss of the whole model, and each piece (RMSNorm, attention,
 * SwiGLU) on its own. Central differences of the double reference
 * (h = 1e-5, truncation error ~h^2) are exact to about 1e-9, so what the
 * comparison measures is the float rounding of the trainer's analytic
 * gradient: we allow 1e-3 relative plus a small absolute floor. */
#include "base/mem.h"
#include "model.h"
#include "train/trainer.h"
#include "testutil.h"
#include <math.h>

/* ------------------------------------------------------------ reference */

static void d_rmsnorm(double *y, const double *x, const double *w, int D, double eps) {
    double ss = 0;
    for (int i = 0; i < D; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / D + eps);
    for (int i = 0; i < D; i++) y[i] = x[i] * r * w[i];
}

/* y (N) = W (N, K) x (K) */
static void d_matvec(double *y, const double *W, const double *x, int N, int K) {
    for (int n = 0; n < N; n++) {
        double s = 0;
        for (int k = 0; k < K; k++) s += W[(size_t)n * K + k] * x[k];
        y[n] = s;
    }
}

static void d_rope(double *x, int heads, int S, int pos, double base) {
    for (int h = 0; h < heads; h++)
        for (int i = 0; i < S / 2; i++) {
            double a = pos * pow(base, -2.0 * i / S), c = cos(a), s = sin(a);
            double *p = x + h * S + 2 * i, x0 = p[0], x1 = p[1];
            p[0] = x0 * c - x1 * s;
            p[1] = x0 * s + x1 * c;
        }
}

/* Causal attention of one sequence: q (T, H*S), k, v (T, Hkv*S) -> out (T, H*S). */
static void d_attention(double *out, const double *q, const double *k, const double *v, int T,
                        int H, int Hkv, int S) {
    int qd = H * S, kvd = Hkv * S;
    double sc[512];
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            int kh = h / (H / Hkv);
            double mx = -1e300, sum = 0;
            for (int j = 0; j <= t; j++) {
                double s = 0;
                for (int i = 0; i < S; i++) s += q[t * qd + h * S + i] * k[j * kvd + kh * S + i];
                sc[j] = s / sqrt((double)S);
                mx = fmax(mx, sc[j]);
            }
            for (int j = 0; j <= t; j++) sum += sc[j] = exp(sc[j] - mx);
            for (int i = 0; i < S; i++) {
                double o = 0;
                for (int j = 0; j <= t; j++) o += sc[j] / sum * v[j * kvd + kh * S + i];
                out[t * qd + h * S + i] = o;
            }
        }
}

/* Mean cross-entropy of the whole model, all in double. p: parameters in the
 * trainer's layout, widened to double. With soft (B*T rows of V
 * probabilities), each row's target is (1 - w) onehot + w soft: the loss is
 * -(1 - w) log p(token) - w sum_i soft_i log p_i (distillation). */
static double d_loss(const double *p, const ModelConfig *c, int tied, const int *tok, int B, int T,
                     const double *soft, double w) {
    int D = c->dim, F = c->hidden_dim, L = c->n_layers, V = c->vocab_size, H = c->n_heads;
    int Hkv = c->n_kv_heads, S = c->head_dim, qd = H * S, kvd = Hkv * S;
    /* the same layout as tr_param_views, computed independently */
    const double *emb = p, *an = emb + V * D, *wq = an + L * D, *wk = wq + L * qd * D;
    const double *wv = wk + L * kvd * D, *wo = wv + L * kvd * D, *fn = wo + L * D * qd;
    const double *wg = fn + L * D, *wd = wg + L * F * D, *wu = wd + L * D * F, *on = wu + L * F * D;
    const double *wout = tied ? emb : on + D;
    double *x = calloc((size_t)T * D, 8), *xn = calloc(D, 8), *q = calloc((size_t)T * qd, 8);
    double *k = calloc((size_t)T * kvd, 8), *v = calloc((size_t)T * kvd, 8);
    double *ao = calloc((size_t)T * qd, 8), *tmp = calloc(F > D ? F : D, 8);
    double *gg = calloc(F, 8), *uu = calloc(F, 8), *z = calloc(V, 8), total = 0;
    for (int b = 0; b < B; b++) {
        const int *tk = tok + b * (T + 1);
        for (int t = 0; t < T; t++) memcpy(x + t * D, emb + tk[t] * D, D * 8);
        for (int l = 0; l < L; l++) {
            for (int t = 0; t < T; t++) {
                d_rmsnorm(xn, x + t * D, an + l * D, D, c->rms_eps);
                d_matvec(q + t * qd, wq + (size_t)l * qd * D, xn, qd, D);
                d_matvec(k + t * kvd, wk + (size_t)l * kvd * D, xn, kvd, D);
                d_matvec(v + t * kvd, wv + (size_t)l * kvd * D, xn, kvd, D);
                d_rope(q + t * qd, H, S, t, c->rope_base);
                d_rope(k + t * kvd, Hkv, S, t, c->rope_base);
            }
            d_attention(ao, q, k, v, T, H, Hkv, S);
            for (int t = 0; t < T; t++) {
                d_matvec(tmp, wo + (size_t)l * D * qd, ao + t * qd, D, qd);
                for (int i = 0; i < D; i++) x[t * D + i] += tmp[i];
                d_rmsnorm(xn, x + t * D, fn + l * D, D, c->rms_eps);
                d_matvec(gg, wg + (size_t)l * F * D, xn, F, D);
                d_matvec(uu, wu + (size_t)l * F * D, xn, F, D);
                for (int i = 0; i < F; i++) gg[i] = gg[i] / (1 + exp(-gg[i])) * uu[i];
                d_matvec(tmp, wd + (size_t)l * D * F, gg, D, F);
                for (int i = 0; i < D; i++) x[t * D + i] += tmp[i];
            }
        }
        for (int t = 0; t < T; t++) {
            d_rmsnorm(xn, x + t * D, on, D, c->rms_eps);
            d_matvec(z, wout, xn, V, D);
            double mx = -1e300, sum = 0;
            for (int i = 0; i < V; i++) mx = fmax(mx, z[i]);
            for (int i = 0; i < V; i++) sum += exp(z[i] - mx);
            if (!soft) {
                total += -(z[tk[t + 1]] - mx - log(sum));
                continue;
            }
            const double *qt = soft + ((size_t)b * T + t) * V;
            total += -(1 - w) * (z[tk[t + 1]] - mx - log(sum));
            for (int i = 0; i < V; i++) total += -w * qt[i] * (z[i] - mx - log(sum));
        }
    }
    free(x), free(xn), free(q), free(k), free(v), free(ao), free(tmp), free(gg), free(uu), free(z);
    return total / (B * T);
}

/* ------------------------------------------------------------ helpers */

static ModelConfig tiny_config(void) {
    ModelConfig c = {.dim = 8, .hidden_dim = 12, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                     .head_dim = 2, .vocab_size = 13, .seq_len = 16, .n_rot = 2,
                     .rope_base = 10000.0f, .rms_eps = 1e-5f};
    return c;
}

static uint64_t rng_state = 88172645463325252ull;
static double urand(void) {   /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1p-52 - 1.0;
}

/* An F32 matrix of N rows by K over data. */
static Mat f32_mat(int N, int K, const float *data) { return (Mat){.type = DT_F32, .N = N, .K = K, .data = data}; }

/* Compare analytic gradient a with numeric n: |a - n| <= atol + rtol * |n|. */
static void check_close(const char *what, size_t i, double a, double n, double atol, double rtol) {
    if (fabs(a - n) > atol + rtol * fabs(n))
        fail_msg("%s[%zu]: analytic %.8g, finite difference %.8g", what, i, a, n);
}

/* ------------------------------------------------------------ whole model */

static void whole_model_check(int tied, int Hkv, int distill) {
    ModelConfig c = tiny_config();
    c.n_kv_heads = Hkv;
    c.head_dim = 2;
    c.n_rot = 2;
    int B = 2, T = 5;
    Trainer t;
    Err e;
    assert_int_equal(tr_init(&t, &c, tied, B, T, 7, &e), ST_OK);
    /* Larger weights than the 0.02 init, so every path carries a real signal. */
    for (size_t i = 0; i < t.n_params; i++) t.params[i] = (float)(0.5 * urand());
    for (int l = 0; l < c.n_layers * c.dim; l++) t.P.attn_norm[l] = t.P.ffn_norm[l] = (float)(1 + 0.3 * urand());
    int tok[2 * 6];
    for (int i = 0; i < B * (T + 1); i++) tok[i] = (int)((urand() + 1) * 6.5) % c.vocab_size;

    /* a teacher's probabilities: random, positive, each row summing to 1 */
    int V = c.vocab_size;
    float *soft = malloc((size_t)B * T * V * sizeof(float));
    double *dsoft = malloc((size_t)B * T * V * 8), w = 0.4;
    for (int r = 0; distill && r < B * T; r++) {
        double sum = 0;
        for (int i = 0; i < V; i++) sum += soft[r * V + i] = (float)(urand() + 1.1);
        for (int i = 0; i < V; i++) dsoft[r * V + i] = soft[r * V + i] /= (float)sum;
    }
    if (distill) t.soft = soft, t.soft_weight = (float)w;

    float loss = tr_forward(&t, tok, 1);
    tr_backward(&t);
    double *p = malloc(t.n_params * 8);
    for (size_t i = 0; i < t.n_params; i++) p[i] = t.params[i];
    if (distill) {   /* the trainer reports the cross-entropy with the tokens alone */
        double hard = d_loss(p, &c, tied, tok, B, T, NULL, 0);
        assert_true(fabs(loss - hard) < 1e-5 * fmax(1, fabs(hard)));
    }
    const double *ds = distill ? dsoft : NULL;
    double ref = d_loss(p, &c, tied, tok, B, T, ds, w);
    if (!distill) assert_true(fabs(loss - ref) < 1e-5 * fmax(1, fabs(ref)));

    double worst = 0, h = 1e-5;
    for (size_t i = 0; i < t.n_params; i++) {
        double keep = p[i];
        p[i] = keep + h;
        double up = d_loss(p, &c, tied, tok, B, T, ds, w);
        p[i] = keep - h;
        double down = d_loss(p, &c, tied, tok, B, T, ds, w);
        p[i] = keep;
        double num = (up - down) / (2 * h);
        worst = fmax(worst, fabs(t.grads[i] - num) / (1e-4 + fabs(num)));
        check_close("grad", i, t.grads[i], num, 2e-5, 1e-3);
    }
    print_message("           %zu parameters, worst |analytic - numeric| / (1e-4 + |numeric|) = %.2g\n",
                  t.n_params, worst);
    free(p);
    free(soft);
    free(dsoft);
    tr_free(&t);
}

static void whole_model_gradients_match_finite_differences(void **st) { whole_model_check(1, 2, 0); }
static void untied_classifier_gradients_match_finite_differences(void **st) { whole_model_check(0, 2, 0); }
static void multi_query_gradients_match_finite_differences(void **st) { whole_model_check(1, 1, 0); }
/* Distillation (train --teacher): the gradient of the mixed target's loss. */
static void distillation_gradients_match_finite_differences(void **st) { whole_model_check(1, 2, 1); }

/* ------------------------------------------------------------ pieces */

static void rmsnorm_backward_matches_finite_differences(void **st) {
    enum { R = 3, D = 7 };
    float x[R * D], w[D], y[R * D], rs[R], dy[R * D], dx[R * D] = {0}, dw[D] = {0};
    for (int i = 0; i < R * D; i++) x[i] = (float)urand(), dy[i] = (float)urand();
    for (int i = 0; i < D; i++) w[i] = (float)(1 + 0.5 * urand());
    tr_rmsnorm_forward(y, rs, x, w, R, D, 1e-5f);
    tr_rmsnorm_backward(dx, dw, dy, x, rs, w, R, D);
    /* objective: sum(dy * y), so its gradient is what the backward computes */
    double xd[R * D], wd[D], yd[D], h = 1e-6;
    for (int i = 0; i < R * D; i++) xd[i] = x[i];
    for (int i = 0; i < D; i++) wd[i] = w[i];
    for (int which = 0; which < 2; which++)
        for (int i = 0; i < (which ? D : R * D); i++) {
            double *p = which ? &wd[i] : &xd[i], keep = *p, f[2];
            for (int s = 0; s < 2; s++) {
                *p = keep + (s ? -h : h);
                f[s] = 0;
                for (int r = 0; r < R; r++) {
                    d_rmsnorm(yd, xd + r * D, wd, D, 1e-5);
                    for (int j = 0; j < D; j++) f[s] += dy[r * D + j] * yd[j];
                }
            }
            *p = keep;
            check_close(which ? "dw" : "dx", (size_t)i, which ? dw[i] : dx[i], (f[0] - f[1]) / (2 * h), 1e-5, 1e-3);
        }
}

static void attention_backward_matches_finite_differences(void **st) {
    enum { T = 6, H = 4, Hkv = 2, S = 4, QD = H * S, KVD = Hkv * S };
    float q[T * QD], k[T * KVD], v[T * KVD], out[T * QD], p[H * T * T], dout[T * QD], dP[T * T];
    float dq[T * QD] = {0}, dk[T * KVD] = {0}, dv[T * KVD] = {0};
    for (int i = 0; i < T * QD; i++) q[i] = (float)urand(), dout[i] = (float)urand();
    for (int i = 0; i < T * KVD; i++) k[i] = (float)urand(), v[i] = (float)urand();
    float *ws = mem_alloc(tr_attention_scratch_floats(T, S) * sizeof(float));
    assert_non_null(ws);
    tr_attention_forward(out, p, q, k, v, T, H, Hkv, S, ws);
    tr_attention_backward(dq, dk, dv, dP, dout, p, q, k, v, T, H, Hkv, S, ws);
    mem_free(ws);
    double qd[T * QD], kd[T * KVD], vd[T * KVD], od[T * QD], h = 1e-6;
    for (int i = 0; i < T * QD; i++) qd[i] = q[i];
    for (int i = 0; i < T * KVD; i++) kd[i] = k[i], vd[i] = v[i];
    d_attention(od, qd, kd, vd, T, H, Hkv, S);
    for (int i = 0; i < T * QD; i++) assert_true(fabs(out[i] - od[i]) < 1e-5);
    struct { double *x; const float *g; int n; const char *name; } sets[] = {
        {qd, dq, T * QD, "dq"}, {kd, dk, T * KVD, "dk"}, {vd, dv, T * KVD, "dv"}};
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < sets[s].n; i++) {
            double keep = sets[s].x[i], f[2];
            for (int side = 0; side < 2; side++) {
                sets[s].x[i] = keep + (side ? -h : h);
                d_attention(od, qd, kd, vd, T, H, Hkv, S);
                f[side] = 0;
                for (int j = 0; j < T * QD; j++) f[side] += dout[j] * od[j];
            }
            sets[s].x[i] = keep;
            check_close(sets[s].name, (size_t)i, sets[s].g[i], (f[0] - f[1]) / (2 * h), 1e-5, 1e-3);
        }
}

static void swiglu_backward_matches_finite_differences(void **st) {
    enum { N = 50 };
    float g[N], u[N], dh[N], dg[N], du[N];
    for (int i = 0; i < N; i++) g[i] = (float)(4 * urand()), u[i] = (float)urand(), dh[i] = (float)urand();
    tr_swiglu_backward(dg, du, dh, g, u, N);
    for (int i = 0; i < N; i++) {
        double h = 1e-6, G = g[i], U = u[i];
        double fg = ((G + h) / (1 + exp(-(G + h))) - (G - h) / (1 + exp(-(G - h)))) * U / (2 * h);
        double fu = G / (1 + exp(-G));
        check_close("dg", (size_t)i, dg[i], dh[i] * fg, 1e-6, 1e-4);
        check_close("du", (size_t)i, du[i], dh[i] * fu, 1e-6, 1e-4);
    }
}

/* The trainer's forward is the engine's: the same weights through
 * model_forward give the same probabilities. */
static void trainer_forward_equals_engine_forward(void **st) {
    ModelConfig c = {.dim = 32, .hidden_dim = 48, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                     .head_dim = 8, .vocab_size = 40, .seq_len = 16, .n_rot = 8,
                     .rope_base = 10000.0f, .rms_eps = 1e-5f};
    int B = 1, T = 12, tok[13];
    Trainer t;
    Err e;
    assert_int_equal(tr_init(&t, &c, 0, B, T, 3, &e), ST_OK);
    for (size_t i = 0; i < t.n_params; i++) t.params[i] = (float)(0.3 * urand());
    for (int i = 0; i <= T; i++) tok[i] = (i * 7 + 3) % c.vocab_size;
    tr_forward(&t, tok, 0);

    Model m = {0};
    Layer layers[2];
    int D = c.dim, F = c.hidden_dim, qd = 32, kvd = 16, V = c.vocab_size;
    m.cfg = c;
    m.layers = layers;
    m.tok_embd = f32_mat(V, D, t.P.emb);
    m.output = f32_mat(V, D, t.P.out);
    m.out_norm = t.P.out_norm;
    for (int l = 0; l < 2; l++)
        layers[l] = (Layer){.attn_norm = t.P.attn_norm + l * D,
                            .wq = f32_mat(qd, D, t.P.wq + l * qd * D),
                            .wk = f32_mat(kvd, D, t.P.wk + l * kvd * D),
                            .wv = f32_mat(kvd, D, t.P.wv + l * kvd * D),
                            .wo = f32_mat(D, qd, t.P.wo + l * D * qd),
                            .ffn_norm = t.P.ffn_norm + l * D,
                            .w_gate = f32_mat(F, D, t.P.w_gate + l * F * D),
                            .w_down = f32_mat(D, F, t.P.w_down + l * D * F),
                            .w_up = f32_mat(F, D, t.P.w_up + l * F * D)};
    RunState s;
    assert_int_equal(runstate_init(&s, &m, T, &e), ST_OK);
    float *lg = model_forward(&m, &s, tok, T, 0, 1);
    for (int r = 0; r < T; r++) {
        softmax(lg + r * V, V);
        for (int i = 0; i < V; i++) assert_float_equal(lg[r * V + i], t.logits[r * V + i], 1e-5);
    }
    runstate_free(&s);
    tr_free(&t);
}

static void lr_schedule_warms_up_then_decays_to_the_floor(void **st) {
    assert_float_equal(tr_lr_schedule(0, 10, 100, 1.0f, 0.1f), 0.1f, 1e-6);
    assert_float_equal(tr_lr_schedule(9, 10, 100, 1.0f, 0.1f), 1.0f, 1e-6);
    assert_float_equal(tr_lr_schedule(55, 10, 100, 1.0f, 0.1f), 0.55f, 1e-6);   /* halfway: mean */
    assert_float_equal(tr_lr_schedule(100, 10, 100, 1.0f, 0.1f), 0.1f, 1e-6);
    for (long s = 10; s < 100; s++)
        assert_true(tr_lr_schedule(s + 1, 10, 100, 1.0f, 0.1f) <= tr_lr_schedule(s, 10, 100, 1.0f, 0.1f));
}

int main(int argc, char **argv) {
    select_tests(argc, argv);
    ops_set_threads(2);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rmsnorm_backward_matches_finite_differences),
        cmocka_unit_test(attention_backward_matches_finite_differences),
        cmocka_unit_test(swiglu_backward_matches_finite_differences),
        cmocka_unit_test(whole_model_gradients_match_finite_differences),
        cmocka_unit_test(untied_classifier_gradients_match_finite_differences),
        cmocka_unit_test(multi_query_gradients_match_finite_differences),
        cmocka_unit_test(distillation_gradients_match_finite_differences),
        cmocka_unit_test(trainer_forward_equals_engine_forward),
        cmocka_unit_test(lr_schedule_warms_up_then_decays_to_the_floor),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
