/* model.c - the Llama forward pass, and the loaders that bind a file's weights.
 *
 * What this file promises: for a sequence of tokens, the logits a Llama-style
 * transformer computes, to within float rounding of an independent float64
 * implementation (tests/test_model.c checks every position against one).
 *
 * The architecture, in reading order (see notes/model.md for shapes):
 *
 *   x = embedding[token]                                 (T, D)
 *   for each layer:
 *       h = rmsnorm(x) * attn_norm
 *       q, k, v = h Wq^T, h Wk^T, h Wv^T                 one matmul_group, all T rows
 *       rotate q and k by their position (RoPE)          Su et al. 2021
 *       append k, v to this layer's cache
 *       each query head attends to its KV head's cache   grouped-query attention,
 *                                                        Ainslie et al. 2023
 *       x += attention_out Wo^T
 *       h = rmsnorm(x) * ffn_norm
 *       x += (silu(h Wgate^T) * (h Wup^T)) Wdown^T       SwiGLU, Shazeer 2020
 *   logits = rmsnorm(x) * out_norm  Wout^T
 *
 * Attention uses the online softmax (Milakov & Gimelshein 2018): one pass over
 * the cached keys keeps a running maximum and running sum, rescaling the
 * partial output when the maximum grows, so no row of scores is stored. That
 * is what paged attention needs: a sequence's keys lie in scattered blocks of
 * the KV pool (kv_paged.c), visited one block at a time.
 *
 * The weights: load/model_load.c, the stage's other half, binds them from the
 * file (every format of kernels/ops.h: the float types and the block formats,
 * read where the file's mapping has them), and the products of kernels/ read
 * each type directly. With --device cuda the whole pass runs in the CUDA wing
 * (kernels/gpu.h), told the batch as plain data. */
#include "model.h"
#include "base/fileio.h"
#include "base/mem.h"
#include "kernels/gpu.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ run state */

/* One allocation, carved into 64-byte aligned pieces. cache: with a
 * contiguous (L, P, Hkv*S) cache for model_forward. */
static int runstate_alloc(RunState *s, const Model *m, int max_T, int max_logits, int cache,
                          Err *e) {
    memset(s, 0, sizeof *s);
    const ModelConfig *c = &m->cfg;
    if (max_T < 1 || max_T > (1 << 20))
        return err_set(e, ST_ARG, "runstate: max_T %d outside 1..%d", max_T, 1 << 20);
    if (max_logits < 1 || max_logits > max_T)
        return err_set(e, ST_ARG, "runstate: max_logits %d outside 1..%d", max_logits, max_T);
    size_t T = max_T, D = c->dim, F = c->hidden_dim, V = c->vocab_size, P = c->seq_len;
    size_t qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
    size_t L = c->n_layers, C = cache ? L * P * kvd : 0;
    size_t scratch = 0;
    const Mat *mats[] = {&m->layers[0].wq, &m->layers[0].wk, &m->layers[0].wo, &m->layers[0].w_gate,
                         &m->layers[0].w_down, &m->output};   /* wo: K = H*S, which need not be D */
    for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) {
        size_t b = matmul_scratch_bytes(mats[i]->type, max_T, mats[i]->K);
        if (b > scratch) scratch = b;
    }
    /* Sizes in 4-byte units (floats and ints alike). */
    size_t row = m->embd_coded ? D : 0, head = m->head_coded ? (size_t)max_logits * m->head_rows : 0;
    size_t sizes[] = {T * D, T * D, T * qd, T * kvd, T * kvd, T * qd, T * D, T * F, T * F,
                      (size_t)max_logits * V, P * (c->n_rot / 2) * 2, C, C, T, T, T, T,
                      (scratch + 3) / 4, row, head};
    void **ptrs[] = {(void **)&s->x, (void **)&s->xb, (void **)&s->q, (void **)&s->k,
                     (void **)&s->v, (void **)&s->att_out, (void **)&s->proj, (void **)&s->hb,
                     (void **)&s->hb2, (void **)&s->logits, (void **)&s->rope_cs,
                     (void **)&s->key_cache, (void **)&s->value_cache, (void **)&s->b_pos,
                     (void **)&s->b_slot, (void **)&s->b_rows, (void **)&s->b_seq, &s->scratch,
                     (void **)&s->row, (void **)&s->head};
    size_t n = sizeof sizes / sizeof sizes[0], total = 0;
    for (size_t i = 0; i < n; i++) total += (sizes[i] + 15) / 16 * 16;
    s->bytes = total * sizeof(float) + 64;
    char *block = mem_alloc(s->bytes);
    if (!block)
        return err_set(e, ST_NOMEM, "runstate: cannot allocate %zu bytes of activations%s",
                       s->bytes, cache ? " and cache" : "");
    float *p = (float *)(((uintptr_t)block + 63) & ~(uintptr_t)63);
    s->block_ = block;
    for (size_t i = 0; i < n; i++) {
        *ptrs[i] = sizes[i] ? p : NULL;
        p += (sizes[i] + 15) / 16 * 16;
    }
    s->max_T = max_T;
    s->max_logits = max_logits;
    /* RoPE angles in double: pair i of position pos turns by pos * base^(-2i/n_rot),
     * divided by rope_freqs[i] where the model has them (Llama 3). */
    for (size_t pos = 0; pos < P; pos++)
        for (int i = 0; i < c->n_rot / 2; i++) {
            double freq = pow((double)c->rope_base, -2.0 * i / c->n_rot);
            if (m->rope_freqs) freq /= m->rope_freqs[i];
            double a = (double)pos * freq;
            s->rope_cs[(pos * (c->n_rot / 2) + i) * 2] = (float)cos(a);
            s->rope_cs[(pos * (c->n_rot / 2) + i) * 2 + 1] = (float)sin(a);
        }
    return ST_OK;
}

int runstate_init(RunState *s, const Model *m, int max_T, Err *e) {
    if (max_T < 1 || max_T > m->cfg.seq_len) {
        memset(s, 0, sizeof *s);
        return err_set(e, ST_ARG, "runstate: max_T %d outside 1..%d", max_T, m->cfg.seq_len);
    }
    return runstate_alloc(s, m, max_T, max_T, 1, e);
}

int runstate_init_paged(RunState *s, const Model *m, int max_T, int max_logits, Err *e) {
    return runstate_alloc(s, m, max_T, max_logits, 0, e);
}

void runstate_free(RunState *s) {
    mem_free(s->block_);
    memset(s, 0, sizeof *s);
}

/* ------------------------------------------------------------ forward */

/* Online softmax (Milakov & Gimelshein 2018; the heart of FlashAttention):
 * one pass over the keys keeps a running maximum m, a running sum l of
 * exp(score - m) and an unnormalised output o; when a new maximum appears, what
 * was summed so far is rescaled by exp(old m - new m). No score row is ever
 * stored, so a query can walk its keys block by block through a block table. */
typedef struct {
    float max, sum;
} Online;

/* exercises/attention/ hollows this function: built with -DEXERCISE_ATTENTION,
 * the file that macro names stands in its place (tools/exercise.sh). */
#ifdef EXERCISE_ATTENTION
#include EXERCISE_ATTENTION
#else
/* Fold n consecutive rows of keys/values (row stride kvd, already offset to
 * this KV head) into the running state of one query head. */
static void attend_rows(Online *st, float *out, const float *q, const float *keys,
                        const float *values, int n, int S, size_t kvd, float scale) {
    for (int p = 0; p < n; p++) {
        const float *k = keys + (size_t)p * kvd;
        float score = 0.0f;
        /* in order, one term at a time, in every build: the plain path's
         * bits do not depend on the flavour (-O0 or -O3 -march=native) */
        for (int i = 0; i < S; i++) score += q[i] * k[i];
        score *= scale;
        if (score > st->max) {   /* new maximum: rescale what was summed so far */
            float c = ops_exp(st->max - score);
            st->sum *= c;
            for (int i = 0; i < S; i++) out[i] *= c;
            st->max = score;
        }
        float w = ops_exp(score - st->max);
        st->sum += w;
        const float *v = values + (size_t)p * kvd;
        for (int i = 0; i < S; i++) out[i] += w * v[i];
    }
}
#endif

/* The fast path beside attend_rows: the same online softmax, a chunk of
 * ATT_CHUNK positions at a time: the chunk's scores (ops_scores), one
 * rescale for the chunk's maximum where attend_rows may rescale at every
 * key, their exponentials in one loop the compiler vectorizes (ops_exp is
 * branch-free), then the weighted values (ops_add_weighted_rows). Per key
 * attend_rows waits on a scalar exponential and a compare; here those run 16
 * to a vector. Chunks start at multiples of ATT_CHUNK whatever the block
 * size, a chunk read piece by piece from its blocks, so the bits do not
 * depend on how the cache is cut into blocks (nor on the batch). The sums
 * are the same terms as attend_rows' in another order: within float
 * rounding of it, not the same bits. */
enum { ATT_GROUP = 16 };   /* query heads attended together, at most (attend_heads) */
#ifndef EXERCISE_ATTENTION
enum { ATT_CHUNK = 32 };

/* Position p's row of a layer's keys (or values), and in *len how many of
 * the rows from it on lie in the same block, at most `want`. */
static const float *kv_rows(const float *base, const int *table, int BS, int p, size_t kvd, int want, int *len) {
    *len = BS - p % BS < want ? BS - p % BS : want;
    return base + ((size_t)table[p / BS] * BS + p % BS) * kvd;
}

/* Folds positions [p0, p0 + c) (c <= ATT_CHUNK) into the running state. */
static void attend_chunk(Online *st, float *out, const float *q, const float *kbase, const float *vbase,
                         const int *table, int BS, int p0, int c, int S, size_t kvd, float scale) {
    float w[ATT_CHUNK], max = st->max, sum = 0.0f;
    for (int j = 0, len; j < c; j += len) {
        const float *k = kv_rows(kbase, table, BS, p0 + j, kvd, c - j, &len);
        ops_scores(w + j, q, k, len, S, kvd, scale);
    }
    for (int j = 0; j < c; j++) max = w[j] > max ? w[j] : max;
    if (max > st->max) {   /* a new maximum in this chunk: rescale once */
        float r = ops_exp(st->max - max);
        st->sum *= r;
        for (int i = 0; i < S; i++) out[i] *= r;
        st->max = max;
    }
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < c; j++) {
        w[j] = ops_exp(w[j] - max);
        sum += w[j];
    }
    st->sum += sum;
    for (int j = 0, len; j < c; j += len) {
        const float *v = kv_rows(vbase, table, BS, p0 + j, kvd, c - j, &len);
        ops_add_weighted_rows(out, w + j, v, len, S, kvd);
    }
}

/* nh query heads over the same keys (q and out hold theirs S floats
 * apart), a chunk at a time, each chunk through every head before the next:
 * its keys and values come from memory once for all of them. Each head's
 * steps are those of the head alone, in its order: the same bits. */
static void attend_chunks(float *out, const float *q, int nh, const float *kbase, const float *vbase,
                          const int *table, int BS, int n, int S, size_t kvd, float scale) {
    Online st[ATT_GROUP];
    for (int i = 0; i < nh; i++) st[i] = (Online){-INFINITY, 0.0f};
    for (size_t i = 0; i < (size_t)nh * S; i++) out[i] = 0.0f;
    for (int p = 0; p < n; p += ATT_CHUNK)
        for (int i = 0; i < nh; i++)
            attend_chunk(&st[i], out + (size_t)i * S, q + (size_t)i * S, kbase, vbase, table, BS, p,
                         n - p < ATT_CHUNK ? n - p : ATT_CHUNK, S, kvd, scale);
    for (int i = 0; i < nh; i++)
        for (int k = 0; k < S; k++) out[(size_t)i * S + k] /= st[i].sum;
}
#endif

/* Paged attention of one query head (model.h). kbase/vbase: this layer's
 * (NB * BS, kvd) rows, offset to the query's KV head. The plain path folds
 * the keys in with attend_rows, block by block; the others a chunk at a time
 * (attend_chunk). Built for the exercise, every path takes attend_rows, so
 * the exercise's code is what runs. */
void model_attend_paged(float *out, const float *q, const float *kbase, const float *vbase,
                        const int *table, int BS, int n, int S, size_t kvd, float scale) {
#ifndef EXERCISE_ATTENTION
    if (ops_isa() != OPS_PLAIN) {
        attend_chunks(out, q, 1, kbase, vbase, table, BS, n, S, kvd, scale);
        return;
    }
#endif
    Online st = {-INFINITY, 0.0f};
    for (int i = 0; i < S; i++) out[i] = 0.0f;
    for (int p = 0; p < n; p += BS) {
        size_t row = (size_t)table[p / BS] * BS;
        int rows = n - p < BS ? n - p : BS;
        attend_rows(&st, out, q, kbase + row * kvd, vbase + row * kvd, rows, S, kvd, scale);
    }
    for (int i = 0; i < S; i++) out[i] /= st.sum;
}


/* Below this many (key, head) pairs in a step's attention, and 64 (token,
 * head) pairs, one thread attends alone: waking the other costs more. */
enum { ATTEND_SPLIT_KEYS = 4096 };

/* Attention of token t's query head h over its sequence's cache, into its
 * row of att_out. Query head h reads KV head h / (H / Hkv): grouped-query
 * attention. kc, vc: this layer's keys and values. */
static void attend_head(const ModelConfig *c, RunState *s, const Batch *b, const float *kc,
                        const float *vc, int BS, int t, int h) {
    int S = c->head_dim, H = c->n_heads, Hkv = c->n_kv_heads;
    size_t qd = (size_t)H * S, kvd = (size_t)Hkv * S, off = (size_t)(h / (H / Hkv)) * S;
    float scale = 1.0f / sqrtf((float)S);
    model_attend_paged(s->att_out + t * qd + (size_t)h * S, s->q + t * qd + (size_t)h * S,
                       kc + off, vc + off, b->table[b->seq[t]], BS, b->pos[t] + 1, S, kvd, scale);
}

/* Token t's query heads h0 .. h0 + nh - 1, which share one KV head: on the
 * chunked path together (attend_chunks), their keys read once for all of
 * them where head by head they were read once a head (eight times in
 * TinyLlama); on the plain path (and the exercise's build) one by one. */
static void attend_heads(const ModelConfig *c, RunState *s, const Batch *b, const float *kc, const float *vc,
                         int BS, int t, int h0, int nh) {
#ifndef EXERCISE_ATTENTION
    if (ops_isa() != OPS_PLAIN) {
        int S = c->head_dim, H = c->n_heads, Hkv = c->n_kv_heads;
        size_t qd = (size_t)H * S, kvd = (size_t)Hkv * S, off = (size_t)(h0 / (H / Hkv)) * S;
        attend_chunks(s->att_out + t * qd + (size_t)h0 * S, s->q + t * qd + (size_t)h0 * S, nh, kc + off, vc + off,
                      b->table[b->seq[t]], BS, b->pos[t] + 1, S, kvd, 1.0f / sqrtf((float)S));
        return;
    }
#endif
    for (int h = h0; h < h0 + nh; h++) attend_head(c, s, b, kc, vc, BS, t, h);
}

/* Heads a call of attend_heads: the most (up to ATT_GROUP) that divide a KV
 * head's group and still leave every thread two calls or more. */
static int heads_a_call(const ModelConfig *c, int T) {
    int G = c->n_heads / c->n_kv_heads;
    for (int d = G < ATT_GROUP ? G : ATT_GROUP; d > 1; d--)
        if (G % d == 0 && T * (c->n_heads / d) >= 2 * ops_threads()) return d;
    return 1;
}

/* A decode that failed mid-run: no logits can be trusted (model.h). */
static float *nan_logits(RunState *s, int V, int n_logits) {
    for (size_t i = 0; i < (size_t)n_logits * V; i++) s->logits[i] = NAN;
    return s->logits;
}

/* Layer l with its coded matrices pointed at their decoded bytes. */
static void add_bias(float *x, const float *bias, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] += bias[i];
}

static int lowmem_layer(const Model *m, int l, Layer *out, Err *e) {
    const void *ptr[LM_MAX_PARTS];
    int st = lm_acquire(m->lowmem, l, ptr, e);
    if (st) return st;
    *out = m->layers[l];
    for (int i = 0; i < m->n_coded; i++) {
        const CodedMat *c = &m->coded[i];
        if (c->layer != l) continue;
        Mat *mat = (Mat *)((char *)out + ((const char *)c->mat - (const char *)&m->layers[l]));
        mat->data = ptr[c->part];
    }
    return ST_OK;
}

/* The batch on the GPU (kernels/gpu_model.cu mirrors the loop below). The
 * KV pool there stands for the host pool whose key pointer names it. */
static float *forward_gpu(const Model *m, RunState *s, const KvStore *kv, const Batch *b) {
    GpuBatch g = {b->T, b->token, b->pos, b->seq, b->slot, b->table, b->n_logits, b->logit_row, kv->NB, kv->BS,
                  kv->key, s->rope_cs, s->max_T, s->max_logits, b->n_copies, b->copies};
    if (b->n_copies < 0) {
        err_set(&s->err, ST_ARG, "gpu: copy-on-write copies were lost (the pool's log overflowed)");
        return nan_logits(s, m->cfg.vocab_size, b->n_logits);
    }
    if (gpu_forward(m->gpu, &g, s->logits, &s->err)) return nan_logits(s, m->cfg.vocab_size, b->n_logits);
    return s->logits;
}

static float *forward_cpu(const Model *m, RunState *s, const KvStore *kv, const Batch *b);

float *model_forward_batch(const Model *m, RunState *s, const KvStore *kv, const Batch *b) {
    s->err.msg[0] = 0;
    float *logits = m->gpu ? forward_gpu(m, s, kv, b) : forward_cpu(m, s, kv, b);
    /* A file truncated under its mapping reads as zeros past its new end
     * (base/fileio.h, fio_map): these are not the model's logits, now or
     * ever again, and the step says why. */
    if (fio_map_check(m->gguf.map ? (const void *)m->gguf.map : m->map, &s->err))
        return nan_logits(s, m->cfg.vocab_size, b->n_logits);
    return logits;
}

static float *forward_cpu(const Model *m, RunState *s, const KvStore *kv, const Batch *b) {
    const ModelConfig *c = &m->cfg;
    int D = c->dim, F = c->hidden_dim, S = c->head_dim, H = c->n_heads, Hkv = c->n_kv_heads;
    int half = c->n_rot / 2, T = b->T, BS = kv->BS, V = c->vocab_size;
    size_t qd = (size_t)H * S, kvd = (size_t)Hkv * S;
    size_t layer_rows = (size_t)kv->NB * BS;   /* rows of one layer's K (or V) */

    size_t embd_row = dtype_row_bytes(m->tok_embd.type, D);
    for (int t = 0; t < T; t++) {
        if (!m->embd_coded) {   /* any type, the fast tier's BF16E included */
            dequantize_mat_row(s->x + (size_t)t * D, &m->tok_embd, b->token[t]);
            continue;
        }
        /* low_mem: this token's row, decoded */
        if (lm_decode_range(m->lowmem, m->embd_coded, (uint64_t)b->token[t] * embd_row, embd_row, s->row, &s->err))
            return nan_logits(s, V, b->n_logits);
        dequantize_row(s->x + (size_t)t * D, s->row, m->tok_embd.type, D);
    }

    /* Every (token, head) pair of attention is independent: threads share
     * them out when there are enough, or when the keys they visit are (one
     * sequence decoding over a long context), with the same results, the
     * heads that share a KV head nh at a time. On the plain path (ops.h) it
     * is a plain loop, which a debugger steps straight into. */
    long keys = 0;
    for (int t = 0; t < T; t++) keys += b->pos[t] + 1;
    int attend_alone = ops_isa() == OPS_PLAIN || (T * H < 64 && keys * H < ATTEND_SPLIT_KEYS);
    int nh = heads_a_call(c, T);

    for (int l = 0; l < c->n_layers; l++) {
        const Layer *w = &m->layers[l];
        Layer coded;
        if (m->lowmem) {   /* this layer's matrices, decoded into a reused buffer */
            if (lowmem_layer(m, l, &coded, &s->err)) return nan_logits(s, V, b->n_logits);
            w = &coded;
        }
        float *kc = kv->key + (size_t)l * layer_rows * kvd;
        float *vc = kv->value + (size_t)l * layer_rows * kvd;

        for (int t = 0; t < T; t++)
            rmsnorm(s->xb + (size_t)t * D, s->x + (size_t)t * D, w->attn_norm, D, c->rms_eps);
        /* One product per weight for every token of every sequence in the batch. */
        matmul_group((float *const[]){s->q, s->k, s->v}, s->xb, (const Mat *const[]){&w->wq, &w->wk, &w->wv},
                     3, T, s->scratch);
        /* Qwen2 (1 of 3): a bias after each of the three products. */
        if (w->bq)
            for (int t = 0; t < T; t++) {
                add_bias(s->q + t * qd, w->bq, qd);
                add_bias(s->k + t * kvd, w->bk, kvd);
                add_bias(s->v + t * kvd, w->bv, kvd);
            }
        /* Qwen3 (2 of 3): each head's Q and K through an RMSNorm of its own
         * (the same S weights for every head), before the rotation. */
        if (w->q_norm)
            for (int t = 0; t < T; t++) {
                for (int h = 0; h < H; h++) {
                    float *qh = s->q + t * qd + (size_t)h * S;
                    rmsnorm(qh, qh, w->q_norm, S, c->rms_eps);
                }
                for (int h = 0; h < Hkv; h++) {
                    float *kh = s->k + t * kvd + (size_t)h * S;
                    rmsnorm(kh, kh, w->k_norm, S, c->rms_eps);
                }
            }
        /* RoPE at each token's own position, then its K/V go to its slot, so
         * later tokens of the same sequence in this batch can see them.
         * Qwen2 and Qwen3 (3 of 3): NEOX's pairs, the halves of each head. */
        for (int t = 0; t < T; t++) {
            const float *cs = s->rope_cs + (size_t)b->pos[t] * half * 2;
            if (c->rope_neox) {
                rope_neox(s->q + t * qd, H, S, c->n_rot, cs);
                rope_neox(s->k + t * kvd, Hkv, S, c->n_rot, cs);
            } else {
                rope(s->q + t * qd, H, S, c->n_rot, cs);
                rope(s->k + t * kvd, Hkv, S, c->n_rot, cs);
            }
            memcpy(kc + (size_t)b->slot[t] * kvd, s->k + t * kvd, kvd * sizeof(float));
            memcpy(vc + (size_t)b->slot[t] * kvd, s->v + t * kvd, kvd * sizeof(float));
        }
        /* attention: its split chosen above */
        if (attend_alone) {
            for (int t = 0; t < T; t++)
                for (int h = 0; h < H; h++) attend_head(c, s, b, kc, vc, BS, t, h);
        } else {
#pragma omp parallel for collapse(2) schedule(static)
            for (int t = 0; t < T; t++)
                for (int h = 0; h < H; h += nh) attend_heads(c, s, b, kc, vc, BS, t, h, nh);
        }
        matmul(s->proj, s->att_out, &w->wo, T, s->scratch);
        for (size_t i = 0; i < (size_t)T * D; i++) s->x[i] += s->proj[i];

        for (int t = 0; t < T; t++)
            rmsnorm(s->xb + (size_t)t * D, s->x + (size_t)t * D, w->ffn_norm, D, c->rms_eps);
        matmul_group((float *const[]){s->hb, s->hb2}, s->xb, (const Mat *const[]){&w->w_gate, &w->w_up}, 2, T,
                     s->scratch);
        swiglu(s->hb, s->hb2, T * F);
        matmul(s->proj, s->hb, &w->w_down, T, s->scratch);
        for (size_t i = 0; i < (size_t)T * D; i++) s->x[i] += s->proj[i];
    }

    /* Logits only for the rows that sample: gathered into the first n_logits
     * rows of xb (logit_row is ascending, so row i is never overwritten before
     * it is read), then one product with the classifier. */
    for (int i = 0; i < b->n_logits; i++)
        rmsnorm(s->xb + (size_t)i * D, s->x + (size_t)b->logit_row[i] * D, m->out_norm, D,
                c->rms_eps);
    if (!m->head_coded) {
        matmul(s->logits, s->xb, &m->output, b->n_logits, s->scratch);
        return s->logits;
    }
    /* low_mem: the classifier a piece of rows at a time, each piece's logits
     * put in their columns */
    for (int p = 0; p < m->head_pieces; p++) {
        const void *ptr[LM_MAX_PARTS];
        if (lm_acquire(m->lowmem, c->n_layers + p, ptr, &s->err)) return nan_logits(s, V, b->n_logits);
        int r0 = p * m->head_rows, n = r0 + m->head_rows < V ? m->head_rows : V - r0;
        Mat piece = {.type = m->output.type, .N = n, .K = D, .data = ptr[0]};
        matmul(s->head, s->xb, &piece, b->n_logits, s->scratch);
        for (int i = 0; i < b->n_logits; i++)
            memcpy(s->logits + (size_t)i * V + r0, s->head + (size_t)i * n, (size_t)n * sizeof(float));
    }
    return s->logits;
}

/* One sequence against the contiguous cache: the batch of T consecutive
 * positions whose slots are the positions themselves (one block of P rows). */
float *model_forward(const Model *m, RunState *s, const int *tokens, int T, int pos, int all_logits) {
    static const int zero = 0;
    const int *table[1] = {&zero};
    for (int t = 0; t < T; t++) {
        s->b_pos[t] = s->b_slot[t] = pos + t;
        s->b_rows[t] = t;
    }
    int first = all_logits ? 0 : T - 1;
    Batch b = {.T = T, .token = tokens, .pos = s->b_pos, .seq = s->b_seq, .slot = s->b_slot,
               .table = table, .n_logits = T - first, .logit_row = s->b_rows + first};
    KvStore kv = {s->key_cache, s->value_cache, 1, m->cfg.seq_len};
    return model_forward_batch(m, s, &kv, &b);
}
