/* trainer.c - forward with saved activations, backward, AdamW (see trainer.h).
 *
 * Reading order: parameter layout and initialisation; the pieces (RMSNorm,
 * attention, SwiGLU) forward and backward; the whole-model forward; the
 * whole-model backward, which walks the forward in reverse; the optimizer.
 *
 * The backward pass is the chain rule applied to each line of the forward:
 *
 *   forward                          backward (dY is the gradient arriving)
 *   Y = X W^T                        dX = dY W          dW += dY^T X
 *   Y = X + f(X)                     dX = dY + df(dY)   the residual passes dY on
 *   y = x * r * w, r = 1/rms(x)      dx = r (dy w) - r^3/D x sum(dy w x)
 *                                    dw += sum over rows of dy x r
 *   h = silu(g) * u                  dg = dh u silu'(g)   du = dh silu(g)
 *   P = softmax(Q K^T / sqrt(S))     dS = P * (dP - rowsum(dP * P))
 *   O = P V                          dP = dO V^T        dV += P^T dO
 *   RoPE rotates by +angle           its gradient rotates back by -angle
 *   loss = -log softmax(z)[y]        dz = softmax(z) - onehot(y)
 *
 * Threads split the batch: each runs forward and backward on its own whole
 * sequences, every matrix product on all of its rows at once (one gemm,
 * single-threaded inside a parallel region), and the threads' parameter
 * gradients are summed at the end (see forward_slice). The products are
 * src/train/gemm.c's, whose summation order is fixed, not OpenBLAS's, whose
 * order depends on the CPU: so a run gives the same bits on every CPU
 * with AVX-512 (notes/training.md, "Determinism").
 * Dropout masks are not stored: a hash of (seed, step, layer, site, index)
 * decides each element, so the backward pass regenerates the same mask. */
#include "train/trainer.h"
#include "train/gemm.h"
#include "base/mem.h"
#include "kernels/ops.h"
#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif


/* ------------------------------------------------------------ parameters */

size_t tr_param_count(const ModelConfig *c, int tied) {
    size_t D = c->dim, F = c->hidden_dim, L = c->n_layers, V = c->vocab_size;
    size_t qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
    return V * D + L * (D + qd * D + 2 * kvd * D + D * qd + D + 3 * F * D) + D + (tied ? 0 : V * D);
}

void tr_param_views(TrParams *p, float *base, const ModelConfig *c, int tied) {
    size_t D = c->dim, F = c->hidden_dim, L = c->n_layers, V = c->vocab_size;
    size_t qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
    float *q = base;
#define TAKE(n) (q += (n), q - (n))
    p->emb = TAKE(V * D);
    p->attn_norm = TAKE(L * D);
    p->wq = TAKE(L * qd * D);
    p->wk = TAKE(L * kvd * D);
    p->wv = TAKE(L * kvd * D);
    p->wo = TAKE(L * D * qd);
    p->ffn_norm = TAKE(L * D);
    p->w_gate = TAKE(L * F * D);
    p->w_down = TAKE(L * D * F);
    p->w_up = TAKE(L * F * D);
    p->out_norm = TAKE(D);
    p->out = tied ? NULL : TAKE(V * D);
#undef TAKE
}

/* A small counter-based generator: the same (key, index) always gives the
 * same 64 bits, whatever the thread or the order of calls. */
static uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float normal01(uint64_t key, uint64_t i) {
    uint64_t a = mix64(key ^ mix64(2 * i)), b = mix64(key ^ mix64(2 * i + 1));
    double u1 = ((a >> 11) + 1.0) * 0x1p-53, u2 = (b >> 11) * 0x1p-53;   /* u1 in (0, 1] */
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));        /* Box-Muller */
}

static void fill_normal(float *w, size_t n, float std, uint64_t key) {
    for (size_t i = 0; i < n; i++) w[i] = std * normal01(key, i);
}

static void init_params(Trainer *t) {
    const ModelConfig *c = &t->c;
    size_t D = c->dim, F = c->hidden_dim, L = c->n_layers, V = c->vocab_size;
    size_t qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
    TrParams *p = &t->P;
    float std = 0.02f, resid = 0.02f / sqrtf(2.0f * L);   /* GPT-2's scaling of residual outputs */
    uint64_t k = mix64(t->seed);
    fill_normal(p->emb, V * D, std, k + 1);
    fill_normal(p->wq, L * qd * D, std, k + 2);
    fill_normal(p->wk, L * kvd * D, std, k + 3);
    fill_normal(p->wv, L * kvd * D, std, k + 4);
    fill_normal(p->wo, L * D * qd, resid, k + 5);
    fill_normal(p->w_gate, L * F * D, std, k + 6);
    fill_normal(p->w_down, L * D * F, resid, k + 7);
    fill_normal(p->w_up, L * F * D, std, k + 8);
    if (p->out) fill_normal(p->out, V * D, std, k + 9);
    for (size_t i = 0; i < L * D; i++) p->attn_norm[i] = p->ffn_norm[i] = 1.0f;
    for (size_t i = 0; i < D; i++) p->out_norm[i] = 1.0f;
}

static int n_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* Scratch one thread's products need: the largest gemm_scratch_floats(N, K)
 * over every product of forward_slice and backward_slice. */
static size_t gemm_ws_floats(const ModelConfig *c, int B, int T, int nth) {
    int D = c->dim, F = c->hidden_dim, V = c->vocab_size, S = c->head_dim;
    int qd = c->n_heads * S, kvd = c->n_kv_heads * S, R = (B + nth - 1) / nth * T;
    /* (N, K) of each weight W (N, K): y = x W^T, dx = dy W, dW += dy^T x */
    const int w[][2] = {{qd, D}, {kvd, D}, {D, qd}, {F, D}, {D, F}, {V, D}};
    size_t most = tr_attention_scratch_floats(T, S);
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
        size_t need[3] = {gemm_scratch_floats(w[i][0], w[i][1]), gemm_scratch_floats(w[i][1], w[i][0]),
                          gemm_scratch_floats(w[i][1], R)};
        for (int j = 0; j < 3; j++) most = need[j] > most ? need[j] : most;
    }
    return (most + 15) / 16 * 16;   /* each thread's part starts 64-byte aligned */
}

int tr_init(Trainer *t, const ModelConfig *c, int tied, int B, int T, uint64_t seed, Err *e) {
    memset(t, 0, sizeof *t);
    if (B < 1 || T < 1 || T > c->seq_len)
        return err_set(e, ST_ARG, "trainer: batch %d x %d outside 1.. x 1..%d", B, T, c->seq_len);
    if (c->n_rot != c->head_dim || c->head_dim % 2)
        return err_set(e, ST_ARG, "trainer: RoPE must rotate the whole (even) head");
    t->c = *c;
    t->tied = tied;
    t->B = B;
    t->T = T;
    t->seed = seed;
    t->n_params = tr_param_count(c, tied);
    t->gemm_ws_floats = gemm_ws_floats(c, B, T, n_threads());
    size_t BT = (size_t)B * T, D = c->dim, F = c->hidden_dim, L = c->n_layers, V = c->vocab_size;
    size_t H = c->n_heads, S = c->head_dim, qd = H * S, kvd = (size_t)c->n_kv_heads * S;
    size_t TT = (size_t)T * T, nth = (size_t)n_threads();
    struct { void *dst; size_t n; } parts[] = {
        {&t->params, t->n_params}, {&t->grads, t->n_params},
        {&t->x, (L + 1) * BT * D}, {&t->xmid, L * BT * D},
        {&t->rs1, L * BT}, {&t->rs2, L * BT}, {&t->rsf, BT},
        {&t->xn1, L * BT * D}, {&t->xn2, L * BT * D},
        {&t->q, L * BT * qd}, {&t->k, L * BT * kvd}, {&t->v, L * BT * kvd},
        {&t->p, L * B * H * TT}, {&t->ao, L * BT * qd},
        {&t->g, L * BT * F}, {&t->u, L * BT * F}, {&t->hact, L * BT * F},
        {&t->xf, BT * D}, {&t->logits, BT * V}, {&t->row_loss, BT},
        {&t->dx, BT * D}, {&t->dxn, BT * D}, {&t->dproj, BT * D},
        {&t->dh, BT * F}, {&t->du, BT * F},
        {&t->dq, BT * qd}, {&t->dk, BT * kvd}, {&t->dv, BT * kvd}, {&t->dao, BT * qd},
        {&t->dP, nth * TT}, {&t->thread_grads, (nth - 1) * t->n_params}, {&t->rope_cs, (size_t)T * S}, {&t->rope_cs_inv, (size_t)T * S},
        {&t->gemm_ws, nth * gemm_ws_floats(c, B, T, (int)nth)},
        {&t->tokens, BT + B},   /* ints, same size as floats */
    };
    size_t n = sizeof parts / sizeof parts[0], total = 0;
    for (size_t i = 0; i < n; i++) total += (parts[i].n + 15) / 16 * 16;
    t->bytes = total * 4 + 64;
    t->block = mem_alloc(t->bytes);
    if (!t->block) return err_set(e, ST_NOMEM, "trainer: cannot allocate %zu bytes", t->bytes);
    float *q = (float *)(((uintptr_t)t->block + 63) & ~(uintptr_t)63);
    for (size_t i = 0; i < n; i++) {
        *(float **)parts[i].dst = q;
        q += (parts[i].n + 15) / 16 * 16;
    }
    tr_param_views(&t->P, t->params, c, tied);
    tr_param_views(&t->G, t->grads, c, tied);
    for (int pos = 0; pos < T; pos++)
        for (size_t i = 0; i < S / 2; i++) {
            double a = pos * pow((double)c->rope_base, -2.0 * i / S);
            size_t at = ((size_t)pos * (S / 2) + i) * 2;
            t->rope_cs[at] = t->rope_cs_inv[at] = (float)cos(a);
            t->rope_cs[at + 1] = (float)sin(a);
            t->rope_cs_inv[at + 1] = -(float)sin(a);
        }
    init_params(t);
    return ST_OK;
}

void tr_free(Trainer *t) {
    mem_free(t->block);
    memset(t, 0, sizeof *t);
}

/* ------------------------------------------------------------ the pieces */

static void rmsnorm_rows(float *y, float *rs, const float *x, const float *w, int rows, int D, float eps);

void tr_rmsnorm_forward(float *y, float *rs, const float *x, const float *w, int rows, int D, float eps) {
    rmsnorm_rows(y, rs, x, w, rows, D, eps);
}

void tr_rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *rs,
                         const float *w, int rows, int D) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * D, *dyr = dy + (size_t)r * D;
        float *dxr = dx + (size_t)r * D, s = rs[r], dot = 0.0f;
        for (int i = 0; i < D; i++) dot += dyr[i] * w[i] * xr[i];
        float c = s * s * s * dot / D;
        for (int i = 0; i < D; i++) dxr[i] += s * dyr[i] * w[i] - c * xr[i];
    }
    for (int r = 0; r < rows; r++)   /* serial: every row adds into the same dw */
        for (int i = 0; i < D; i++) dw[i] += dy[(size_t)r * D + i] * x[(size_t)r * D + i] * rs[r];
}

void tr_swiglu_backward(float *dg, float *du, const float *dh, const float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) {
        float sg = 1.0f / (1.0f + ops_exp(-g[i])), silu = g[i] * sg;
        du[i] = dh[i] * silu;
        dg[i] = dh[i] * u[i] * sg * (1.0f + g[i] * (1.0f - sg));
    }
}

size_t tr_attention_scratch_floats(int T, int S) {
    size_t a = gemm_scratch_floats(T, S), b = gemm_scratch_floats(S, T);
    return a > b ? a : b;
}

/* One query head of one sequence: p (T, T) = causal softmax(q k^T * scale),
 * out = p v. q, out rows have stride qd; k, v rows stride kvd. */
static void attend_head(float *out, float *p, const float *q, const float *k, const float *v,
                        int T, int S, int qd, int kvd, float *ws) {
    float scale = 1.0f / sqrtf((float)S);
    gemm(GEMM_N, GEMM_T, T, T, S, scale, q, qd, k, kvd, 0.0f, p, T, ws);
    for (int i = 0; i < T; i++) {
        float *row = p + (size_t)i * T;
        softmax(row, i + 1);                       /* positions 0..i: the causal mask */
        for (int j = i + 1; j < T; j++) row[j] = 0.0f;
    }
    gemm(GEMM_N, GEMM_N, T, S, T, 1.0f, p, T, v, kvd, 0.0f, out, qd, ws);
}

void tr_attention_forward(float *out, float *p, const float *q, const float *k, const float *v,
                          int T, int H, int Hkv, int S, float *ws) {
    int qd = H * S, kvd = Hkv * S, group = H / Hkv;
    for (int h = 0; h < H; h++)
        attend_head(out + h * S, p + (size_t)h * T * T, q + h * S, k + (h / group) * S,
                    v + (h / group) * S, T, S, qd, kvd, ws);
}

void tr_attention_backward(float *dq, float *dk, float *dv, float *dP, const float *dout,
                           const float *p, const float *q, const float *k, const float *v,
                           int T, int H, int Hkv, int S, float *ws) {
    int qd = H * S, kvd = Hkv * S, group = H / Hkv;
    float scale = 1.0f / sqrtf((float)S);
    for (int h = 0; h < H; h++) {
        const float *ph = p + (size_t)h * T * T, *doh = dout + h * S;
        const float *kh = k + (h / group) * S, *vh = v + (h / group) * S;
        /* dP = dO V^T;  dV += P^T dO */
        gemm(GEMM_N, GEMM_T, T, T, S, 1.0f, doh, qd, vh, kvd, 0.0f, dP, T, ws);
        gemm(GEMM_T, GEMM_N, T, S, T, 1.0f, ph, T, doh, qd, 1.0f, dv + (h / group) * S, kvd, ws);
        /* through the softmax: dS = P * (dP - sum_j dP P), then the scale */
        for (int i = 0; i < T; i++) {
            const float *pr = ph + (size_t)i * T;
            float *dr = dP + (size_t)i * T, dot = 0.0f;
            for (int j = 0; j <= i; j++) dot += dr[j] * pr[j];
            for (int j = 0; j <= i; j++) dr[j] = pr[j] * (dr[j] - dot) * scale;
            for (int j = i + 1; j < T; j++) dr[j] = 0.0f;
        }
        /* dQ += dS K;  dK += dS^T Q */
        gemm(GEMM_N, GEMM_N, T, S, T, 1.0f, dP, T, kh, kvd, 1.0f, dq + h * S, qd, ws);
        gemm(GEMM_T, GEMM_N, T, S, T, 1.0f, dP, T, q + h * S, qd, 1.0f, dk + (h / group) * S, kvd, ws);
    }
}

/* ------------------------------------------------------------ helpers */

/* y (rows, N) = x (rows, K) W^T, W (N, K): what matmul computes, in gemm's order */
static void mm_y(float *y, const float *x, const float *W, int rows, int N, int K, float *ws) {
    gemm(GEMM_N, GEMM_T, rows, N, K, 1.0f, x, K, W, K, 0.0f, y, N, ws);
}

/* dx (rows, K) (+)= dy (rows, N) W (N, K) */
static void mm_dx(float *dx, const float *dy, const float *W, int rows, int N, int K, float beta,
                  float *ws) {
    gemm(GEMM_N, GEMM_N, rows, K, N, 1.0f, dy, N, W, K, beta, dx, K, ws);
}

/* dW (N, K) += dy^T (N, rows) x (rows, K) */
static void mm_dw(float *dW, const float *dy, const float *x, int rows, int N, int K, float *ws) {
    gemm(GEMM_T, GEMM_N, N, K, rows, 1.0f, dy, N, x, K, 1.0f, dW, K, ws);
}

/* The calling thread's gemm scratch. */
static float *my_scratch(const Trainer *t) {
#ifdef _OPENMP
    return t->gemm_ws + (size_t)omp_get_thread_num() * t->gemm_ws_floats;
#else
    return t->gemm_ws;
#endif
}

/* Dropout on a residual branch: zero an element with probability p, scale the
 * rest by 1 / (1 - p). Element i of the layer's (BT, D) array gets the same
 * decision in the forward and the backward pass, whichever thread asks. */
static void dropout(float *x, size_t first, size_t n, float p, uint64_t seed, long step, int layer,
                    int site) {
    if (p <= 0.0f) return;
    uint64_t key = mix64(seed ^ mix64(((uint64_t)step << 16) ^ ((uint64_t)layer << 2) ^ (uint64_t)site));
    uint64_t cut = (uint64_t)(p * 4294967296.0);
    float keep = 1.0f / (1.0f - p);
    for (size_t i = 0; i < n; i++) x[i] = (mix64(key ^ (first + i)) >> 32) < cut ? 0.0f : x[i] * keep;
}

/* Apply RoPE to rows of one or more whole sequences; row r is at position r % T. */
static void rope_rows(float *x, int rows, int T, int heads, int S, const float *cs) {
    for (int r = 0; r < rows; r++) rope(x + (size_t)r * heads * S, heads, S, S, cs + (size_t)(r % T) * S);
}

static void rmsnorm_rows(float *y, float *rs, const float *x, const float *w, int rows, int D, float eps) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * D;
        float ss = 0.0f;
        for (int i = 0; i < D; i++) ss += xr[i] * xr[i];
        rs[r] = 1.0f / sqrtf(ss / D + eps);
        rmsnorm(y + (size_t)r * D, xr, w, D, eps);   /* the engine's kernel */
    }
}

/* ------------------------------------------------------------ forward */

/* Data parallelism: the batch is cut into one slice of whole sequences per
 * thread; each thread runs the full forward and backward on its rows with
 * single-threaded BLAS, and only the parameter gradients are summed at the
 * end. With small matrices this beats splitting each product across threads,
 * which would synchronise dozens of times per layer. */
typedef struct { int b0, nb; } Slice;

static Slice my_slice(int B) {
#ifdef _OPENMP
    int n = omp_get_num_threads(), i = omp_get_thread_num();
#else
    int n = 1, i = 0;
#endif
    int per = B / n, extra = B % n;
    Slice s = {i * per + (i < extra ? i : extra), per + (i < extra)};
    return s;
}

static void forward_slice(Trainer *t, Slice sl, const int *tokens, float drop) {
    const ModelConfig *c = &t->c;
    int B = t->B, T = t->T, BT = B * T, D = c->dim, F = c->hidden_dim, V = c->vocab_size;
    int H = c->n_heads, Hkv = c->n_kv_heads, S = c->head_dim, qd = H * S, kvd = Hkv * S;
    int R = sl.nb * T;                       /* rows of this slice */
    size_t r0 = (size_t)sl.b0 * T;           /* its first row */
    const TrParams *P = &t->P;
    float *ws = my_scratch(t);
    if (sl.nb == 0) return;

    for (int b = sl.b0; b < sl.b0 + sl.nb; b++)
        for (int i = 0; i < T; i++)
            memcpy(t->x + ((size_t)b * T + i) * D, P->emb + (size_t)tokens[b * (T + 1) + i] * D,
                   (size_t)D * sizeof(float));

    for (int l = 0; l < c->n_layers; l++) {
        size_t o = (size_t)l * BT + r0;
        float *xin = t->x + o * D, *xmid = t->xmid + o * D, *xout = t->x + (o + BT) * D;
        float *xn1 = t->xn1 + o * D, *xn2 = t->xn2 + o * D, *proj = t->dproj + r0 * D;
        float *q = t->q + o * qd, *k = t->k + o * kvd, *v = t->v + o * kvd, *ao = t->ao + o * qd;
        float *pl = t->p + ((size_t)l * B + sl.b0) * H * T * T;
        float *g = t->g + o * F, *u = t->u + o * F, *hact = t->hact + o * F;

        rmsnorm_rows(xn1, t->rs1 + o, xin, P->attn_norm + (size_t)l * D, R, D, c->rms_eps);
        mm_y(q, xn1, P->wq + (size_t)l * qd * D, R, qd, D, ws);
        mm_y(k, xn1, P->wk + (size_t)l * kvd * D, R, kvd, D, ws);
        mm_y(v, xn1, P->wv + (size_t)l * kvd * D, R, kvd, D, ws);
        rope_rows(q, R, T, H, S, t->rope_cs);
        rope_rows(k, R, T, Hkv, S, t->rope_cs);
        for (int b = 0; b < sl.nb; b++)
            tr_attention_forward(ao + (size_t)b * T * qd, pl + (size_t)b * H * T * T,
                                 q + (size_t)b * T * qd, k + (size_t)b * T * kvd,
                                 v + (size_t)b * T * kvd, T, H, Hkv, S, ws);
        mm_y(proj, ao, P->wo + (size_t)l * D * qd, R, D, qd, ws);
        dropout(proj, r0 * D, (size_t)R * D, drop, t->seed, t->step, l, 0);
        for (size_t i = 0; i < (size_t)R * D; i++) xmid[i] = xin[i] + proj[i];

        rmsnorm_rows(xn2, t->rs2 + o, xmid, P->ffn_norm + (size_t)l * D, R, D, c->rms_eps);
        mm_y(g, xn2, P->w_gate + (size_t)l * F * D, R, F, D, ws);
        mm_y(u, xn2, P->w_up + (size_t)l * F * D, R, F, D, ws);
        memcpy(hact, g, (size_t)R * F * sizeof(float));
        swiglu(hact, u, R * F);
        mm_y(proj, hact, P->w_down + (size_t)l * D * F, R, D, F, ws);
        dropout(proj, r0 * D, (size_t)R * D, drop, t->seed, t->step, l, 1);
        for (size_t i = 0; i < (size_t)R * D; i++) xout[i] = xmid[i] + proj[i];
    }

    float *xL = t->x + ((size_t)c->n_layers * BT + r0) * D, *xf = t->xf + r0 * D;
    rmsnorm_rows(xf, t->rsf + r0, xL, P->out_norm, R, D, c->rms_eps);
    mm_y(t->logits + r0 * V, xf, P->out ? P->out : P->emb, R, V, D, ws);

    /* Cross-entropy: logits become probabilities (kept for the backward). */
    for (int r = (int)r0; r < (int)r0 + R; r++) {
        float *z = t->logits + (size_t)r * V;
        int target = tokens[(r / T) * (T + 1) + r % T + 1];
        softmax(z, V);
        t->row_loss[r] = -logf(fmaxf(z[target], 1e-30f));
    }
}

float tr_forward(Trainer *t, const int *tokens, int train) {
    memcpy(t->tokens, tokens, (size_t)t->B * (t->T + 1) * sizeof(int));
    float drop = train ? t->dropout : 0.0f;
#pragma omp parallel
    forward_slice(t, my_slice(t->B), tokens, drop);
    double total = 0.0;   /* summed in row order: the same for any thread count */
    for (int r = 0; r < t->B * t->T; r++) total += t->row_loss[r];
    return (float)(total / (t->B * t->T));
}

/* ------------------------------------------------------------ backward */

/* Backward over one slice; parameter gradients go into G (this thread's). */
static void backward_slice(Trainer *t, Slice sl, TrParams *G, float *dP) {
    const ModelConfig *c = &t->c;
    int B = t->B, T = t->T, BT = B * T, D = c->dim, F = c->hidden_dim, V = c->vocab_size;
    int H = c->n_heads, Hkv = c->n_kv_heads, S = c->head_dim, qd = H * S, kvd = Hkv * S;
    int R = sl.nb * T;
    size_t r0 = (size_t)sl.b0 * T;
    const TrParams *P = &t->P;
    const int *tokens = t->tokens;
    float *dx = t->dx + r0 * D, *dxn = t->dxn + r0 * D, *dproj = t->dproj + r0 * D;
    float *dh = t->dh + r0 * F, *du = t->du + r0 * F, *dao = t->dao + r0 * qd;
    float *dq = t->dq + r0 * qd, *dk = t->dk + r0 * kvd, *dv = t->dv + r0 * kvd;
    float *dz = t->logits + r0 * V, *ws = my_scratch(t);
    if (sl.nb == 0) return;

    /* dz = (p - target) / BT, in place over the probabilities; the target
     * is onehot, or with distillation (1 - w) onehot + w soft */
    for (int r = (int)r0; r < (int)r0 + R; r++) {
        float *z = t->logits + (size_t)r * V;
        int target = tokens[(r / T) * (T + 1) + r % T + 1];
        if (t->soft) {
            const float *q = t->soft + (size_t)r * V;
            float w = t->soft_weight;
            for (int i = 0; i < V; i++) z[i] -= w * q[i];
            z[target] -= 1.0f - w;
        } else {
            z[target] -= 1.0f;
        }
        for (int i = 0; i < V; i++) z[i] /= (float)BT;
    }
    const float *wout = P->out ? P->out : P->emb;
    mm_dw(P->out ? G->out : G->emb, dz, t->xf + r0 * D, R, V, D, ws);
    mm_dx(dxn, dz, wout, R, V, D, 0.0f, ws);
    float *xL = t->x + ((size_t)c->n_layers * BT + r0) * D;
    memset(dx, 0, (size_t)R * D * sizeof(float));
    tr_rmsnorm_backward(dx, G->out_norm, dxn, xL, t->rsf + r0, P->out_norm, R, D);

    for (int l = c->n_layers - 1; l >= 0; l--) {
        size_t o = (size_t)l * BT + r0;
        float *xin = t->x + o * D, *xmid = t->xmid + o * D;
        float *xn1 = t->xn1 + o * D, *xn2 = t->xn2 + o * D;
        float *q = t->q + o * qd, *k = t->k + o * kvd, *v = t->v + o * kvd, *ao = t->ao + o * qd;
        float *pl = t->p + ((size_t)l * B + sl.b0) * H * T * T;
        float *g = t->g + o * F, *u = t->u + o * F, *hact = t->hact + o * F;

        /* FFN branch: xout = xmid + drop(hact Wd^T); dx holds d xout */
        memcpy(dproj, dx, (size_t)R * D * sizeof(float));
        dropout(dproj, r0 * D, (size_t)R * D, t->dropout, t->seed, t->step, l, 1);
        mm_dw(G->w_down + (size_t)l * D * F, dproj, hact, R, D, F, ws);
        mm_dx(dh, dproj, P->w_down + (size_t)l * D * F, R, D, F, 0.0f, ws);
        tr_swiglu_backward(dh, du, dh, g, u, R * F);   /* dh becomes dg */
        mm_dw(G->w_gate + (size_t)l * F * D, dh, xn2, R, F, D, ws);
        mm_dw(G->w_up + (size_t)l * F * D, du, xn2, R, F, D, ws);
        mm_dx(dxn, dh, P->w_gate + (size_t)l * F * D, R, F, D, 0.0f, ws);
        mm_dx(dxn, du, P->w_up + (size_t)l * F * D, R, F, D, 1.0f, ws);
        tr_rmsnorm_backward(dx, G->ffn_norm + (size_t)l * D, dxn, xmid, t->rs2 + o,
                            P->ffn_norm + (size_t)l * D, R, D);   /* dx: now d xmid */

        /* Attention branch: xmid = xin + drop(ao Wo^T) */
        memcpy(dproj, dx, (size_t)R * D * sizeof(float));
        dropout(dproj, r0 * D, (size_t)R * D, t->dropout, t->seed, t->step, l, 0);
        mm_dw(G->wo + (size_t)l * D * qd, dproj, ao, R, D, qd, ws);
        mm_dx(dao, dproj, P->wo + (size_t)l * D * qd, R, D, qd, 0.0f, ws);
        memset(dq, 0, (size_t)R * qd * sizeof(float));
        memset(dk, 0, (size_t)R * kvd * sizeof(float));
        memset(dv, 0, (size_t)R * kvd * sizeof(float));
        for (int b = 0; b < sl.nb; b++) {
            size_t rq = (size_t)b * T * qd, rk = (size_t)b * T * kvd;
            tr_attention_backward(dq + rq, dk + rk, dv + rk, dP, dao + rq, pl + (size_t)b * H * T * T,
                                  q + rq, k + rk, v + rk, T, H, Hkv, S, ws);
        }
        rope_rows(dq, R, T, H, S, t->rope_cs_inv);   /* rotate gradients back */
        rope_rows(dk, R, T, Hkv, S, t->rope_cs_inv);
        mm_dw(G->wq + (size_t)l * qd * D, dq, xn1, R, qd, D, ws);
        mm_dw(G->wk + (size_t)l * kvd * D, dk, xn1, R, kvd, D, ws);
        mm_dw(G->wv + (size_t)l * kvd * D, dv, xn1, R, kvd, D, ws);
        mm_dx(dxn, dq, P->wq + (size_t)l * qd * D, R, qd, D, 0.0f, ws);
        mm_dx(dxn, dk, P->wk + (size_t)l * kvd * D, R, kvd, D, 1.0f, ws);
        mm_dx(dxn, dv, P->wv + (size_t)l * kvd * D, R, kvd, D, 1.0f, ws);
        tr_rmsnorm_backward(dx, G->attn_norm + (size_t)l * D, dxn, xin, t->rs1 + o,
                            P->attn_norm + (size_t)l * D, R, D);   /* dx: now d xin */
    }

    for (int b = sl.b0; b < sl.b0 + sl.nb; b++)
        for (int i = 0; i < T; i++) {
            float *de = G->emb + (size_t)tokens[b * (T + 1) + i] * D;
            const float *dr = t->dx + ((size_t)b * T + i) * D;
            for (int j = 0; j < D; j++) de[j] += dr[j];
        }
}

void tr_backward(Trainer *t) {
    size_t n = t->n_params;
#pragma omp parallel
    {
#ifdef _OPENMP
        int me = omp_get_thread_num();
#else
        int me = 0;
#endif
        /* thread 0 writes t->grads; the others their own copies */
        float *mine = me == 0 ? t->grads : t->thread_grads + (size_t)(me - 1) * n;
        memset(mine, 0, n * sizeof(float));
        TrParams G;
        tr_param_views(&G, mine, &t->c, t->tied);
        backward_slice(t, my_slice(t->B), &G, t->dP + (size_t)me * t->T * t->T);
#pragma omp barrier
        /* sum the copies into t->grads, each thread a range of parameters */
        int nth = 1;
#ifdef _OPENMP
        nth = omp_get_num_threads();
#endif
        size_t lo = n * me / nth, hi = n * (me + 1) / nth;
        for (int c = 1; c < nth; c++) {
            const float *src = t->thread_grads + (size_t)(c - 1) * n;
            for (size_t i = lo; i < hi; i++) t->grads[i] += src[i];
        }
    }
}

/* ------------------------------------------------------------ optimizer */

double tr_clip_grads(Trainer *t, float max_norm) {
    double ss = 0.0;
    for (size_t i = 0; i < t->n_params; i++) ss += (double)t->grads[i] * t->grads[i];
    double norm = sqrt(ss);
    if (max_norm > 0.0f && norm > max_norm) {
        float s = (float)(max_norm / norm);
        for (size_t i = 0; i < t->n_params; i++) t->grads[i] *= s;
    }
    return norm;
}

int tr_adam_init(TrAdam *a, size_t n, Err *e) {
    memset(a, 0, sizeof *a);
    a->m = mem_alloc(n * sizeof(float));
    a->v = mem_alloc(n * sizeof(float));
    a->n = n;
    if (!a->m || !a->v) {
        tr_adam_free(a);
        return err_set(e, ST_NOMEM, "adam: cannot allocate 2 x %zu floats", n);
    }
    return ST_OK;
}

void tr_adam_free(TrAdam *a) {
    mem_free(a->m);
    mem_free(a->v);
    memset(a, 0, sizeof *a);
}

/* Update params[from, to) with or without weight decay. */
static void adam_range(TrAdam *a, Trainer *t, size_t from, size_t to, float lr, float b1, float b2,
                       float eps, float wd, float c1, float c2) {
    float *w = t->params, *gr = t->grads, *m = a->m, *v = a->v;
#pragma omp parallel for schedule(static)
    for (size_t i = from; i < to; i++) {
        m[i] = b1 * m[i] + (1.0f - b1) * gr[i];
        v[i] = b2 * v[i] + (1.0f - b2) * gr[i] * gr[i];
        float mh = m[i] / c1, vh = v[i] / c2;
        w[i] -= lr * (mh / (sqrtf(vh) + eps) + wd * w[i]);
    }
}

void tr_adam_step(TrAdam *a, Trainer *t, float lr, float beta1, float beta2, float eps,
                  float weight_decay) {
    a->t++;
    float c1 = 1.0f - powf(beta1, (float)a->t), c2 = 1.0f - powf(beta2, (float)a->t);
    /* Walk the layout in order: [emb][attn_norm][wq..wo][ffn_norm][gate..up][out_norm][out] */
    const TrParams *P = &t->P;
    size_t base = 0, at;
#define OFF(ptr) ((size_t)((ptr) - t->params))
    at = OFF(P->attn_norm);
    adam_range(a, t, base, at, lr, beta1, beta2, eps, weight_decay, c1, c2);   /* emb */
    base = at, at = OFF(P->wq);
    adam_range(a, t, base, at, lr, beta1, beta2, eps, 0.0f, c1, c2);           /* attn_norm */
    base = at, at = OFF(P->ffn_norm);
    adam_range(a, t, base, at, lr, beta1, beta2, eps, weight_decay, c1, c2);   /* wq wk wv wo */
    base = at, at = OFF(P->w_gate);
    adam_range(a, t, base, at, lr, beta1, beta2, eps, 0.0f, c1, c2);           /* ffn_norm */
    base = at, at = OFF(P->out_norm);
    adam_range(a, t, base, at, lr, beta1, beta2, eps, weight_decay, c1, c2);   /* gate down up */
    base = at, at = base + (size_t)t->c.dim;
    adam_range(a, t, base, at, lr, beta1, beta2, eps, 0.0f, c1, c2);           /* out_norm */
    adam_range(a, t, at, t->n_params, lr, beta1, beta2, eps, weight_decay, c1, c2);   /* out */
#undef OFF
    t->step++;
}

float tr_lr_schedule(long s, long warmup, long total, float lr, float min_lr) {
    if (s < warmup) return lr * (float)(s + 1) / (float)warmup;
    if (s >= total) return min_lr;
    double progress = (double)(s - warmup) / (double)(total - warmup > 0 ? total - warmup : 1);
    return min_lr + (float)(0.5 * (1.0 + cos(M_PI * progress))) * (lr - min_lr);
}
