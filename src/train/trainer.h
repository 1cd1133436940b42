/* trainer.h - training a Llama model: forward with saved activations, the
 * backward pass of every layer, AdamW.
 *
 * The forward pass is the engine's (the same ops.c kernels: matmul, rmsnorm,
 * rope, swiglu), run over a batch of B sequences of T tokens with causal
 * attention inside each sequence, keeping what the backward pass needs.
 * tests/test_train.c checks the forward against model_forward on the same
 * weights, and every gradient against finite differences in double precision.
 *
 * Dimensions: B sequences, T tokens each, BT = B*T rows; D, F, H, Hkv, S, V, L
 * as in model.h. */
#ifndef TRAINER_H
#define TRAINER_H
#include "base/err.h"
#include "model.h"
#include <stddef.h>
#include <stdint.h>

/* Views of one flat array of parameters (or gradients, or Adam moments):
 * every tensor of one kind for all layers together, as llama2.c lays them out. */
typedef struct {
    float *emb;        /* (V, D) */
    float *attn_norm;  /* (L, D) */
    float *wq;         /* (L, H*S, D) */
    float *wk;         /* (L, Hkv*S, D) */
    float *wv;         /* (L, Hkv*S, D) */
    float *wo;         /* (L, D, H*S) */
    float *ffn_norm;   /* (L, D) */
    float *w_gate;     /* (L, F, D) */
    float *w_down;     /* (L, D, F) */
    float *w_up;       /* (L, F, D) */
    float *out_norm;   /* (D) */
    float *out;        /* (V, D), or NULL when tied to emb */
} TrParams;

size_t tr_param_count(const ModelConfig *c, int tied);
void tr_param_views(TrParams *p, float *base, const ModelConfig *c, int tied);

typedef struct {
    ModelConfig c;
    int tied;
    int B, T;
    float dropout;          /* on both residual branches, training only */
    /* Distillation: when soft is set, the target of row r is the mixture
     * (1 - soft_weight) onehot(token) + soft_weight soft[r] (soft: (BT, V)
     * probabilities, a teacher's), and tr_backward follows its gradient;
     * row_loss stays -log p(token). */
    const float *soft;
    float soft_weight;
    uint64_t seed;          /* weights init and dropout masks */
    long step;              /* dropout masks differ per step */

    size_t n_params;
    float *params, *grads;  /* (n_params) each */
    TrParams P, G;

    /* Saved activations, per layer l (see trainer.c for what each holds). */
    int *tokens;            /* (B, T+1) the batch being trained */
    float *x;               /* (L+1, BT, D) residual stream entering layer l; [L]: final */
    float *xmid;            /* (L, BT, D) after the attention residual */
    float *rs1, *rs2, *rsf; /* (L, BT), (L, BT), (BT) 1 / rms of each row */
    float *xn1, *xn2;       /* (L, BT, D) normed inputs of attention and FFN */
    float *q, *k, *v;       /* (L, BT, H*S), (L, BT, Hkv*S) x2; q and k after RoPE */
    float *p;               /* (L, B, H, T, T) attention probabilities */
    float *ao;              /* (L, BT, H*S) attention output before Wo */
    float *g, *u, *hact;    /* (L, BT, F) gate, up, silu(gate) * up */
    float *xf;              /* (BT, D) final normed */
    float *logits;          /* (BT, V): logits, then probabilities, then their gradient */
    float *row_loss;        /* (BT) -log p(target) of each row */
    /* Backward scratch. */
    float *dx, *dxn, *dproj;        /* (BT, D) */
    float *dh, *du;                 /* (BT, F) */
    float *dq, *dk, *dv, *dao;      /* (BT, H*S), (BT, Hkv*S) x2, (BT, H*S) */
    float *dP;                      /* (threads, T, T) */
    float *thread_grads;            /* (threads - 1, n_params): each thread's own gradients */
    float *rope_cs, *rope_cs_inv;   /* (T, S/2, 2) rotation by +angle and -angle */
    float *gemm_ws;                 /* (threads, gemm_ws_floats) each thread's product scratch */
    size_t gemm_ws_floats;
    void *block;                    /* the one allocation */
    size_t bytes;
} Trainer;

/* Allocate for batches of B x T; parameters initialised from seed (normal,
 * std 0.02, residual projections scaled by 1/sqrt(2L); norms 1). */
int tr_init(Trainer *t, const ModelConfig *c, int tied, int B, int T, uint64_t seed, Err *e);
void tr_free(Trainer *t);   /* accepts a zeroed Trainer */

/* Forward over tokens (B, T+1): row (b, i) reads tokens[b][i] and predicts
 * tokens[b][i+1]. Fills row_loss; returns the mean loss in nats per token.
 * With train set, dropout is applied (when t->dropout > 0). */
float tr_forward(Trainer *t, const int *tokens, int train);
/* Gradient of the mean loss of the last tr_forward(train) into t->grads. */
void tr_backward(Trainer *t);

/* Global L2 norm of the gradients (double accumulation); if it exceeds
 * max_norm (> 0), scale the gradients down to it. Returns the norm before. */
double tr_clip_grads(Trainer *t, float max_norm);

/* AdamW moments, same layout as the parameters. */
typedef struct {
    float *m, *v;
    long t;          /* steps taken */
    size_t n;
} TrAdam;
int tr_adam_init(TrAdam *a, size_t n, Err *e);
void tr_adam_free(TrAdam *a);
/* One AdamW step (Loshchilov & Hutter 2019). Weight decay applies to
 * matrices only, never to norm gains. */
void tr_adam_step(TrAdam *a, Trainer *t, float lr, float beta1, float beta2, float eps,
                  float weight_decay);

/* Learning rate at step s: linear warm-up to lr over `warmup` steps, then a
 * cosine from lr down to min_lr at step `total`. */
float tr_lr_schedule(long s, long warmup, long total, float lr, float min_lr);

/* The pieces, exported so tests can check each against finite differences.
 * Backward functions ADD into their outputs (dx, dw). */
void tr_rmsnorm_forward(float *y, float *rs, const float *x, const float *w, int rows, int D, float eps);
void tr_rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *rs,
                         const float *w, int rows, int D);
void tr_swiglu_backward(float *dg, float *du, const float *dh, const float *g, const float *u, int n);
/* Causal attention of one sequence for all heads: q (T, H*S), k, v (T, Hkv*S),
 * out (T, H*S), p (H, T, T). ws: tr_attention_scratch_floats(T, S) floats,
 * 64-byte aligned, for the products (src/train/gemm.h). */
size_t tr_attention_scratch_floats(int T, int S);
void tr_attention_forward(float *out, float *p, const float *q, const float *k, const float *v,
                          int T, int H, int Hkv, int S, float *ws);
/* dq (T, H*S), dk, dv (T, Hkv*S) are ADDED to; dP is (T, T) scratch. */
void tr_attention_backward(float *dq, float *dk, float *dv, float *dP, const float *dout,
                           const float *p, const float *q, const float *k, const float *v,
                           int T, int H, int Hkv, int S, float *ws);

#endif
