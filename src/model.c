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
 * partial output when the maximum grows, so no row of scores is stored. This
 * is the form the paged cache will need, where keys live in scattered blocks.
 *
 * Loading: the big matrices are never copied. A Mat points into the memory
 * mapping of the file, in whatever type the file stores (F32, F16, Q8_0), and
 * the kernels in ops.c read that type directly. */
#include "model.h"
#include "base/clock.h"
#include "base/fileio.h"
#include "base/mem.h"
#include "kernels/gpu.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

/* Limits that no real model exceeds; a header beyond them is corrupt, and
 * checking here keeps every size product below far from overflow. */
enum { MAX_DIM = 65536, MAX_LAYERS = 1024, MAX_HEADS = 1024, MAX_VOCAB = 1 << 22,
       MAX_CTX = 1 << 20 };

/* ------------------------------------------------------------ validation */

static int check_config(const ModelConfig *c, const char *path, Err *e) {
    struct { const char *name; long v, lo, hi; } f[] = {
        {"dim", c->dim, 1, MAX_DIM},           {"hidden_dim", c->hidden_dim, 1, 4 * MAX_DIM},
        {"n_layers", c->n_layers, 1, MAX_LAYERS}, {"n_heads", c->n_heads, 1, MAX_HEADS},
        {"n_kv_heads", c->n_kv_heads, 1, MAX_HEADS}, {"vocab_size", c->vocab_size, 1, MAX_VOCAB},
        {"seq_len", c->seq_len, 1, MAX_CTX},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v < f[i].lo || f[i].v > f[i].hi)
            return err_set(e, ST_FORMAT, "%s: absurd %s = %ld (want %ld..%ld)", path, f[i].name,
                           f[i].v, f[i].lo, f[i].hi);
    if (c->seq_len < 2)   /* BOS fills a context of 1: nothing could ever be generated */
        return err_set(e, ST_FORMAT, "%s: seq_len %d is too small: the context must hold BOS and "
                       "at least one generated token (want 2..%d)", path, c->seq_len, MAX_CTX);
    if (c->dim % c->n_heads)
        return err_set(e, ST_FORMAT, "%s: dim %d is not a multiple of n_heads %d", path, c->dim,
                       c->n_heads);
    if (c->n_heads % c->n_kv_heads)
        return err_set(e, ST_FORMAT, "%s: n_heads %d is not a multiple of n_kv_heads %d", path,
                       c->n_heads, c->n_kv_heads);
    if (c->n_rot < 2 || c->n_rot > c->head_dim || c->n_rot % 2)
        return err_set(e, ST_FORMAT, "%s: rope dimension %d must be even and in 2..%d", path,
                       c->n_rot, c->head_dim);
    if (!(c->rope_base > 0.0f) || !(c->rms_eps > 0.0f) || !(c->rms_eps < 1.0f))
        return err_set(e, ST_FORMAT, "%s: bad rope base %g or rms epsilon %g", path,
                       (double)c->rope_base, (double)c->rms_eps);
    return ST_OK;
}

/* ------------------------------------------------------------ GGUF */

static int gguf_int_or(const Gguf *g, const char *key, int64_t dflt, int64_t lo, int64_t hi,
                       int *out, Err *e) {
    int64_t v = dflt;
    if (gguf_find(g, key) && gguf_get_int(g, key, &v, e)) return ST_FORMAT;
    if (v < lo || v > hi)
        return err_set(e, ST_FORMAT, "%s: absurd %s = %lld (want %lld..%lld)", g->path, key,
                       (long long)v, (long long)lo, (long long)hi);
    *out = (int)v;
    return ST_OK;
}

/* A coded matrix of a compressed file: its blob is checked here, its bytes
 * are decoded once everything is bound (finish_coded). */
static int bind_coded(Model *m, const char *name, const GgufTensor *t, int N, int K, Mat *out, Err *e) {
    CodedMat *c = &m->coded[m->n_coded];
    char what[160];
    snprintf(what, sizeof what, "%s: tensor %s", m->gguf.path, name);
    int st = wc_open(&c->wt, t->data, t->nbytes, what, e);
    if (st) return st;
    m->n_coded++;   /* open: model_free closes it */
    if (!dtype_known(c->wt.type))
        return err_set(e, ST_UNSUPPORTED, "%s codes type %d, which the kernels do not read", what, c->wt.type);
    if (c->wt.ne[0] != (uint64_t)K || c->wt.ne[1] != (uint64_t)N || c->wt.n_dims > 2)
        return err_set(e, ST_FORMAT, "%s has shape [%llu, %llu], want [%d, %d]", what,
                       (unsigned long long)c->wt.ne[0], (unsigned long long)c->wt.ne[1], K, N);
    /* The codec checks the size of the layouts it splits; a type it stores
     * whole (the 4 to 6-bit formats) must still decode to whole rows. */
    size_t want = dtype_row_bytes((DType)c->wt.type, K) * (size_t)N;
    if (want == 0 || c->wt.nbytes != want)
        return err_set(e, ST_FORMAT, "%s codes %llu bytes of %s, want %zu (%d rows of %d)", what,
                       (unsigned long long)c->wt.nbytes, dtype_name(c->wt.type), want, N, K);
    c->mat = out;
    size_t into = (size_t)((char *)out - (char *)m->layers);
    c->layer = (char *)out >= (char *)m->layers && into < (size_t)m->cfg.n_layers * sizeof(Layer)
                   ? (int)(into / sizeof(Layer)) : -1;
    *out = (Mat){(DType)c->wt.type, N, K, NULL};
    m->weight_bytes += c->wt.nbytes;
    m->coded_bytes += t->nbytes;
    return ST_OK;
}

/* Bind a 2-D weight tensor as a Mat of N rows by K columns, checking shape. */
static int bind_mat(Model *m, const char *name, int N, int K, Mat *out, Err *e) {
    const GgufTensor *t = gguf_tensor(&m->gguf, name);
    if (!t) return err_set(e, ST_FORMAT, "%s: missing tensor %s", m->gguf.path, name);
    if (m->coded && t->type == GGUF_TYPE_I8 && t->n_dims == 1) return bind_coded(m, name, t, N, K, out, e);
    if (!dtype_known((int)t->type))
        return err_set(e, ST_FORMAT, "%s: tensor %s has type %u, which is not a weight type here%s",
                       m->gguf.path, name, t->type,
                       t->type == GGUF_TYPE_I8 ? " (bytes: a coded matrix outside a compressed file?)" : "");
    if (t->ne[0] != (uint64_t)K || t->ne[1] != (uint64_t)N || t->ne[2] != 1 || t->ne[3] != 1)
        return err_set(e, ST_FORMAT, "%s: tensor %s has shape [%llu, %llu], want [%d, %d]",
                       m->gguf.path, name, (unsigned long long)t->ne[0],
                       (unsigned long long)t->ne[1], K, N);
    out->type = (DType)t->type;
    out->N = N;
    out->K = K;
    out->data = t->data;
    m->weight_bytes += t->nbytes;
    return ST_OK;
}

/* Bind a norm vector of n floats. Norms are tiny; a file that stores them as
 * F16 gets them widened into dst (part of m->owned). */
static int bind_vec(Model *m, const char *name, int n, float *dst, const float **out, Err *e) {
    const GgufTensor *t = gguf_tensor(&m->gguf, name);
    if (!t) return err_set(e, ST_FORMAT, "%s: missing tensor %s", m->gguf.path, name);
    if (t->ne[0] != (uint64_t)n || t->ne[1] * t->ne[2] * t->ne[3] != 1)
        return err_set(e, ST_FORMAT, "%s: tensor %s has %llu values, want %d", m->gguf.path, name,
                       (unsigned long long)t->ne[0], n);
    if (!dtype_known((int)t->type))
        return err_set(e, ST_FORMAT, "%s: tensor %s has type %u, which is not a weight type here",
                       m->gguf.path, name, t->type);
    m->weight_bytes += t->nbytes;
    if (t->type == DT_F32 && ((uintptr_t)t->data % 4) == 0) {
        *out = t->data;
    } else {
        dequantize_row(dst, t->data, (DType)t->type, n);
        *out = dst;
    }
    return ST_OK;
}

/* RoPE beyond the plain rotation. Llama 3 stretches the long wavelengths by
 * dividing each pair's angle by its own factor, stored as the tensor
 * rope_freqs.weight (n_rot/2 floats); we apply it wherever angles are made
 * (runstate_alloc), so every path sees it. Other schemes announce themselves
 * in rope.scaling.type (linear, yarn, ...): none is implemented, and running
 * without them would produce plausible garbage, so they are refused. */
static int bind_rope_freqs(Model *m, Err *e) {
    const Gguf *g = &m->gguf;
    const char *key = "llama.rope.scaling.type";
    if (gguf_find(g, key)) {
        GgufStr type;
        if (gguf_get_str(g, key, &type, e)) return ST_FORMAT;
        if (!gguf_str_eq(type, "none"))
            return err_set(e, ST_UNSUPPORTED, "%s: %s '%.*s' is not supported (implemented: none, "
                           "and Llama 3's per-pair divisors in rope_freqs.weight)", g->path, key,
                           (int)(type.len > 32 ? 32 : type.len), type.s);
    }
    const GgufTensor *t = gguf_tensor(g, "rope_freqs.weight");
    if (!t) return ST_OK;
    int half = m->cfg.n_rot / 2;
    if (t->type != DT_F32 || t->ne[0] != (uint64_t)half || t->ne[1] * t->ne[2] * t->ne[3] != 1)
        return err_set(e, ST_FORMAT, "%s: tensor rope_freqs.weight is %s with %llu values, want F32 "
                       "with %d (one per RoPE pair)", g->path, dtype_name((int)t->type),
                       (unsigned long long)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]), half);
    if ((uintptr_t)t->data % 4)
        return err_set(e, ST_FORMAT, "%s: tensor rope_freqs.weight is not aligned to 4 bytes", g->path);
    const float *f = t->data;
    for (int i = 0; i < half; i++)
        if (!(f[i] > 0.0f) || isinf(f[i]))
            return err_set(e, ST_FORMAT, "%s: rope_freqs.weight[%d] = %g, want a positive finite "
                           "divisor", g->path, i, (double)f[i]);
    m->rope_freqs = f;
    m->weight_bytes += t->nbytes;
    return ST_OK;
}

/* ------------------------------------------------------------ compressed files */

static RansIsa codec_isa(void) { return ops_isa() == OPS_PLAIN ? RANS_PLAIN : rans_best_isa(); }

/* Decode every coded matrix into one allocation, once. */
static int decode_all(Model *m, Err *e) {
    size_t total = 0;
    for (int i = 0; i < m->n_coded; i++) total += ((size_t)m->coded[i].wt.nbytes + 63) / 64 * 64;
    m->decoded = mem_alloc(total + 64);
    if (!m->decoded)
        return err_set(e, ST_NOMEM, "%s: cannot allocate %zu bytes for the decoded matrices (--low-mem "
                       "keeps them coded)", m->gguf.path, total);
    m->decoded_bytes = total;
    uint8_t *p = (uint8_t *)(((uintptr_t)m->decoded + 63) & ~(uintptr_t)63);
    for (int i = 0; i < m->n_coded; i++) {
        CodedMat *c = &m->coded[i];
        int st = wc_decode_parallel(&c->wt, p, (size_t)c->wt.nbytes, codec_isa(),
                                    ops_isa() == OPS_PLAIN ? 1 : ops_threads(), e);
        if (st) return st;
        c->mat->data = p;
        p += ((size_t)c->wt.nbytes + 63) / 64 * 64;
    }
    return ST_OK;
}

/* Low memory: unit l holds layer l's coded matrices; the classifier, when
 * coded, follows in pieces of whole rows no bigger than the largest layer, so
 * that two buffers of a layer's size hold any unit. The embedding is only
 * looked up a row at a time: its rows are decoded when a token needs them. */
static int build_units(Model *m, const ModelOpts *o, int tied, Err *e) {
    int L = m->cfg.n_layers, V = m->cfg.vocab_size, D = m->cfg.dim;
    const WcTensor *embd = NULL, *head = NULL;
    for (int i = 0; i < m->n_coded; i++) {
        if (m->coded[i].mat == &m->tok_embd) embd = &m->coded[i].wt;
        if (m->coded[i].mat == &m->output) head = &m->coded[i].wt;
    }
    if (tied) head = embd;
    size_t layer_max = 0;
    LmUnit *units = mem_alloc(((size_t)L + V) * sizeof *units);
    if (!units) return err_set(e, ST_NOMEM, "%s: out of memory", m->gguf.path);
    for (int i = 0; i < m->n_coded; i++) {
        CodedMat *c = &m->coded[i];
        if (c->layer < 0) continue;
        LmUnit *u = &units[c->layer];
        c->part = u->n;
        u->part[u->n++] = (LmPart){&c->wt, 0, c->wt.nbytes};
    }
    for (int l = 0; l < L; l++) {
        size_t b = 0;
        for (int i = 0; i < units[l].n; i++) b += (size_t)units[l].part[i].len;
        if (b > layer_max) layer_max = b;
    }
    int n = L;
    if (head) {
        size_t row = dtype_row_bytes((DType)head->type, D);
        int rows = layer_max / row >= (size_t)V ? V : layer_max / row >= 1 ? (int)(layer_max / row) : 1;
        m->head_rows = rows;
        m->head_pieces = (V + rows - 1) / rows;
        for (int p = 0; p < m->head_pieces; p++) {
            int r0 = p * rows, r1 = r0 + rows < V ? r0 + rows : V;
            units[n++] = (LmUnit){1, {{head, (uint64_t)r0 * row, (uint64_t)(r1 - r0) * row}}};
        }
    }
    m->embd_coded = embd;
    m->head_coded = head;
    double t0 = clock_seconds();
    /* the helper decodes with as many threads as the kernels use: while the
     * forward pass waits for a layer, its cores are free */
    int helpers = o->serial ? 0 : ops_isa() == OPS_PLAIN ? 1 : ops_threads();
    int st = lm_create(&m->lowmem, units, n, codec_isa(), helpers, 1, e);
    m->decode_load_s = clock_seconds() - t0;
    mem_free(units);
    return st;
}

static int finish_coded(Model *m, const ModelOpts *o, int tied, Err *e) {
    if (o->low_mem && !m->n_coded)
        return err_set(e, ST_ARG, "%s: --low-mem needs a compressed file (tools/compress), and this one has "
                       "no coded matrices", m->gguf.path);
    if (!m->n_coded) return ST_OK;
    if (o->low_mem) return build_units(m, o, tied, e);
    double t0 = clock_seconds();
    int st = decode_all(m, e);
    m->decode_load_s = clock_seconds() - t0;
    return st;
}

static int load_gguf(Model *m, const char *path, const ModelOpts *o, Err *e) {
    int st = gguf_open(&m->gguf, path, e);
    if (st) return st;
    Gguf *g = &m->gguf;
    if (gguf_find(g, "rans.version")) {   /* compressed by tools/compress.c */
        int64_t v;
        if (gguf_get_int(g, "rans.version", &v, e)) return ST_FORMAT;
        if (v != 1)
            return err_set(e, ST_UNSUPPORTED, "%s: rans.version %lld (this engine reads 1)", path, (long long)v);
        m->coded = mem_alloc((g->n_tensors ? g->n_tensors : 1) * sizeof *m->coded);
        if (!m->coded) return err_set(e, ST_NOMEM, "%s: out of memory", path);
    }
    GgufStr arch;
    if (gguf_get_str(g, "general.architecture", &arch, e)) return ST_FORMAT;
    if (!gguf_str_eq(arch, "llama"))
        return err_set(e, ST_UNSUPPORTED, "%s: architecture '%.*s' is not supported (want llama)",
                       path, (int)(arch.len > 32 ? 32 : arch.len), arch.s);
    ModelConfig *c = &m->cfg;
    if (gguf_int_or(g, "llama.embedding_length", -1, 1, MAX_DIM, &c->dim, e) ||
        gguf_int_or(g, "llama.block_count", -1, 1, MAX_LAYERS, &c->n_layers, e) ||
        gguf_int_or(g, "llama.feed_forward_length", -1, 1, 4 * MAX_DIM, &c->hidden_dim, e) ||
        gguf_int_or(g, "llama.attention.head_count", -1, 1, MAX_HEADS, &c->n_heads, e) ||
        gguf_int_or(g, "llama.attention.head_count_kv", c->n_heads, 1, MAX_HEADS, &c->n_kv_heads, e) ||
        gguf_int_or(g, "llama.context_length", -1, 1, MAX_CTX, &c->seq_len, e))
        return ST_FORMAT;
    if (c->dim % c->n_heads)
        return err_set(e, ST_FORMAT, "%s: dim %d is not a multiple of n_heads %d", path, c->dim,
                       c->n_heads);
    c->head_dim = c->dim / c->n_heads;
    if (gguf_int_or(g, "llama.rope.dimension_count", c->head_dim, 0, MAX_DIM, &c->n_rot, e))
        return ST_FORMAT;
    double base = 10000.0, eps = 1e-5;
    if (gguf_find(g, "llama.rope.freq_base") && gguf_get_float(g, "llama.rope.freq_base", &base, e))
        return ST_FORMAT;
    if (gguf_find(g, "llama.attention.layer_norm_rms_epsilon") &&
        gguf_get_float(g, "llama.attention.layer_norm_rms_epsilon", &eps, e))
        return ST_FORMAT;
    c->rope_base = (float)base;
    c->rms_eps = (float)eps;
    const GgufTensor *emb = gguf_tensor(g, "token_embd.weight");
    if (!emb) return err_set(e, ST_FORMAT, "%s: missing tensor token_embd.weight", path);
    uint64_t rows = emb->ne[1];
    if (m->coded && emb->type == GGUF_TYPE_I8 && emb->n_dims == 1) {   /* the shape is in the blob */
        WcTensor wt;
        if ((st = wc_open(&wt, emb->data, emb->nbytes, "token_embd.weight", e))) return st;
        rows = wt.ne[1];
        wc_close(&wt);
    }
    c->vocab_size = rows > MAX_VOCAB ? MAX_VOCAB + 1 : (int)rows;
    if ((st = check_config(c, path, e))) return st;

    int D = c->dim, F = c->hidden_dim, kvd = c->n_kv_heads * c->head_dim, V = c->vocab_size;
    int L = c->n_layers;
    m->layers = mem_alloc((size_t)L * sizeof(Layer));
    if (!m->layers) return err_set(e, ST_NOMEM, "%s: out of memory", path);
    if ((st = bind_mat(m, "token_embd.weight", V, D, &m->tok_embd, e))) return st;
    /* The matrices first: once they are bound, the file is known to hold L
     * layers of width D, and only then is the buffer for the norms, (2L + 1)
     * D floats, allocated. Before, a 70 KB file whose header claimed 1024
     * layers of 65536 had the loader ask for 537 MB before finding out. */
    char name[96];
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%d.%s", l, suffix), name)
    for (int l = 0; l < L; l++) {
        Layer *w = &m->layers[l];
        if ((st = bind_mat(m, NAME("attn_q.weight"), D, D, &w->wq, e)) ||
            (st = bind_mat(m, NAME("attn_k.weight"), kvd, D, &w->wk, e)) ||
            (st = bind_mat(m, NAME("attn_v.weight"), kvd, D, &w->wv, e)) ||
            (st = bind_mat(m, NAME("attn_output.weight"), D, D, &w->wo, e)) ||
            (st = bind_mat(m, NAME("ffn_gate.weight"), F, D, &w->w_gate, e)) ||
            (st = bind_mat(m, NAME("ffn_down.weight"), D, F, &w->w_down, e)) ||
            (st = bind_mat(m, NAME("ffn_up.weight"), F, D, &w->w_up, e)))
            return st;
    }
    m->owned = mem_alloc((size_t)(2 * L + 1) * D * sizeof(float));
    if (!m->owned) return err_set(e, ST_NOMEM, "%s: out of memory", path);
    for (int l = 0; l < L; l++) {
        Layer *w = &m->layers[l];
        float *own = m->owned + (size_t)2 * l * D;
        if ((st = bind_vec(m, NAME("attn_norm.weight"), D, own, &w->attn_norm, e)) ||
            (st = bind_vec(m, NAME("ffn_norm.weight"), D, own + D, &w->ffn_norm, e)))
            return st;
    }
#undef NAME
    if ((st = bind_vec(m, "output_norm.weight", D, m->owned + (size_t)2 * L * D, &m->out_norm, e)))
        return st;
    int tied = !gguf_tensor(g, "output.weight");
    if (!tied && (st = bind_mat(m, "output.weight", V, D, &m->output, e))) return st;
    if ((st = finish_coded(m, o, tied, e))) return st;
    if (tied) m->output = m->tok_embd;   /* tied classifier: the embedding read backwards */
    m->wtype = m->layers[0].wq.type;
    if ((st = bind_rope_freqs(m, e))) return st;
    return tok_from_gguf(&m->tok, g, e);
}

/* ------------------------------------------------------------ llama2.c */

/* The file must hold exactly what the header describes: a header that claims
 * fewer layers, a narrower model or fewer KV heads than were written would
 * otherwise load the first bytes of each array and generate garbage. The one
 * optional part, the unshared classifier, is announced by the sign of
 * vocab_size; when the size is off by exactly that classifier, say so. */
static int check_llama2c_size(const ModelConfig *c, int shared, size_t want, size_t size,
                              const char *path, Err *e) {
    if (size == want) return ST_OK;
    char hdr[200];
    snprintf(hdr, sizeof hdr, "the header (dim %d, hidden_dim %d, n_layers %d, n_heads %d, "
             "n_kv_heads %d, vocab_size %d, seq_len %d) implies", c->dim, c->hidden_dim,
             c->n_layers, c->n_heads, c->n_kv_heads, shared ? c->vocab_size : -c->vocab_size,
             c->seq_len);
    size_t cls = (size_t)c->vocab_size * c->dim * 4;
    if (shared && size == want + cls)
        return err_set(e, ST_FORMAT, "%s: %s %zu bytes, the file has %zu: the extra %zu bytes are an "
                       "unshared classifier, which llama2.c announces with a negative vocab_size",
                       path, hdr, want, size, cls);
    if (!shared && size + cls == want)
        return err_set(e, ST_FORMAT, "%s: %s %zu bytes, the file has %zu: the negative vocab_size "
                       "announces an unshared classifier, and the file ends before it", path, hdr,
                       want, size);
    if (size < want)
        return err_set(e, ST_FORMAT, "%s: truncated: %s %zu bytes, the file has %zu", path, hdr,
                       want, size);
    return err_set(e, ST_FORMAT, "%s: %s %zu bytes, the file has %zu (%zu bytes more): the header "
                   "does not describe these weights", path, hdr, want, size, size - want);
}

/* llama2.c's checkpoint: seven int32 (dim, hidden_dim, n_layers, n_heads,
 * n_kv_heads, vocab_size, seq_len; a negative vocab_size means a separate
 * classifier follows), then float32 arrays in a fixed order, all layers of one
 * kind together. It has no RoPE settings: base 10000 over the whole head. */
static int load_llama2c(Model *m, const char *path, const char *tok_path, Err *e) {
    int fd;
    size_t size;
    int st = fio_open(path, &fd, &size, e);
    if (st) return st;
    if (size < 28) {
        close(fd);
        return err_set(e, ST_FORMAT, "%s: truncated: %zu bytes is shorter than the 28-byte llama2.c "
                       "header", path, size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return err_set(e, ST_IO, "%s: cannot map: %m", path);
    m->map = map;
    m->map_size = size;

    int32_t h[7];
    memcpy(h, map, sizeof h);
    ModelConfig *c = &m->cfg;
    int shared = h[5] > 0;
    *c = (ModelConfig){.dim = h[0], .hidden_dim = h[1], .n_layers = h[2], .n_heads = h[3],
                       .n_kv_heads = h[4], .vocab_size = h[5] == INT32_MIN ? 0 : abs(h[5]),
                       .seq_len = h[6], .rope_base = 10000.0f, .rms_eps = 1e-5f};
    c->head_dim = c->n_heads > 0 ? c->dim / c->n_heads : 0;
    c->n_rot = c->head_dim;
    if ((st = check_config(c, path, e))) return st;

    size_t D = c->dim, F = c->hidden_dim, L = c->n_layers, V = c->vocab_size, P = c->seq_len;
    size_t kvd = (size_t)c->n_kv_heads * c->head_dim, S = c->head_dim;
    size_t floats = V * D + L * D + L * D * D + 2 * L * kvd * D + L * D * D + L * D + 3 * L * F * D +
                    D + P * S + (shared ? 0 : V * D);   /* P*S: the unused RoPE tables */
    if ((st = check_llama2c_size(c, shared, 28 + floats * 4, size, path, e))) return st;
    const float *p = (const float *)((const char *)map + 28);
    m->layers = mem_alloc(L * sizeof(Layer));
    if (!m->layers) return err_set(e, ST_NOMEM, "%s: out of memory", path);
#define TAKE(n) (p += (n), p - (n))
    m->tok_embd = (Mat){DT_F32, (int)V, (int)D, TAKE(V * D)};
    for (size_t l = 0; l < L; l++) m->layers[l].attn_norm = TAKE(D);
    for (size_t l = 0; l < L; l++) m->layers[l].wq = (Mat){DT_F32, (int)D, (int)D, TAKE(D * D)};
    for (size_t l = 0; l < L; l++) m->layers[l].wk = (Mat){DT_F32, (int)kvd, (int)D, TAKE(kvd * D)};
    for (size_t l = 0; l < L; l++) m->layers[l].wv = (Mat){DT_F32, (int)kvd, (int)D, TAKE(kvd * D)};
    for (size_t l = 0; l < L; l++) m->layers[l].wo = (Mat){DT_F32, (int)D, (int)D, TAKE(D * D)};
    for (size_t l = 0; l < L; l++) m->layers[l].ffn_norm = TAKE(D);
    for (size_t l = 0; l < L; l++) m->layers[l].w_gate = (Mat){DT_F32, (int)F, (int)D, TAKE(F * D)};
    for (size_t l = 0; l < L; l++) m->layers[l].w_down = (Mat){DT_F32, (int)D, (int)F, TAKE(D * F)};
    for (size_t l = 0; l < L; l++) m->layers[l].w_up = (Mat){DT_F32, (int)F, (int)D, TAKE(F * D)};
    m->out_norm = TAKE(D);
    p += P * S;    /* freq_cis_real and freq_cis_imag: recomputed in runstate_init */
    m->output = shared ? m->tok_embd : (Mat){DT_F32, (int)V, (int)D, TAKE(V * D)};
#undef TAKE
    m->weight_bytes = (floats - P * S) * 4;
    m->wtype = DT_F32;

    char buf[4096];
    if (!tok_path) {   /* tokenizer.bin beside the checkpoint */
        const char *slash = strrchr(path, '/');
        int dir = slash ? (int)(slash - path + 1) : 0;
        snprintf(buf, sizeof buf, "%.*stokenizer.bin", dir, path);
        tok_path = buf;
    }
    return tok_from_llama2c(&m->tok, tok_path, c->vocab_size, e);
}

int model_load(Model *m, const char *path, const char *tokenizer_path, Err *e) {
    return model_load_opts(m, path, tokenizer_path, NULL, e);
}

/* --device cuda: every weight to the GPU (kernels/gpu.h), told as plain data. */
static int gpu_upload(Model *m, const ModelOpts *o, Err *e) {
    if (o->low_mem)
        return err_set(e, ST_ARG, "--low-mem with --device cuda: the GPU keeps every weight decoded; choose one");
    const ModelConfig *c = &m->cfg;
    GpuLayer *ls = mem_alloc((size_t)c->n_layers * sizeof *ls);
    if (!ls) return err_set(e, ST_NOMEM, "gpu: out of memory describing %d layers", c->n_layers);
    for (int l = 0; l < c->n_layers; l++) {
        const Layer *w = &m->layers[l];
        ls[l] = (GpuLayer){w->attn_norm, w->ffn_norm, w->wq, w->wk, w->wv, w->wo, w->w_gate, w->w_up, w->w_down};
    }
    GpuModelDesc d = {c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim, c->vocab_size,
                      c->seq_len, c->n_rot, c->rms_eps, m->tok_embd, m->output, m->out_norm, ls};
    int st = gpu_model_create(&m->gpu, &d, e);
    mem_free(ls);
    return st;
}

int model_load_opts(Model *m, const char *path, const char *tokenizer_path, const ModelOpts *o, Err *e) {
    static const ModelOpts defaults = {0};
    if (!o) o = &defaults;
    memset(m, 0, sizeof *m);
    /* The magic decides the loader. fio_open refuses directories and FIFOs
     * before anything is read (each loader opens the file again). */
    char magic[4] = {0};
    int fd;
    size_t size;
    int st = fio_open(path, &fd, &size, e);
    if (st) return st;
    ssize_t got = pread(fd, magic, 4, 0);
    close(fd);
    if (got < 0) return err_set(e, ST_IO, "%s: cannot read: %m", path);
    if (size == 0) return err_set(e, ST_FORMAT, "%s: empty file", path);
    /* A file named *.gguf goes to the GGUF reader whatever its magic, so that
     * a broken one hears "not a GGUF file" rather than llama2.c's complaints. */
    size_t n = strlen(path);
    int named_gguf = n >= 5 && strcasecmp(path + n - 5, ".gguf") == 0;
    if ((got == 4 && memcmp(magic, "GGUF", 4) == 0) || named_gguf) {
        m->format = "gguf";
        st = load_gguf(m, path, o, e);
        if (st == ST_OK && tokenizer_path)   /* it would be ignored: say so instead */
            st = err_set(e, ST_ARG, "%s: a GGUF file carries its own vocabulary; the tokenizer "
                                    "file %s is for llama2.c checkpoints", path, tokenizer_path);
    } else {
        m->format = "llama2.c";
        st = load_llama2c(m, path, tokenizer_path, e);
        if (st == ST_OK && o->low_mem)
            st = err_set(e, ST_ARG, "%s: --low-mem needs a compressed GGUF file (tools/compress)", path);
    }
    if (st == ST_OK && tok_n_vocab(m->tok) != m->cfg.vocab_size)
        st = err_set(e, ST_FORMAT, "%s: the tokenizer has %d tokens but the model's vocabulary is %d",
                     path, tok_n_vocab(m->tok), m->cfg.vocab_size);
    if (st == ST_OK && o->device == DEVICE_CUDA) st = gpu_upload(m, o, e);
    if (st) model_free(m);
    return st;
}

void model_free(Model *m) {
    gpu_model_free(m->gpu);
    lm_free(m->lowmem);   /* first: its helper thread may be decoding from the mapping */
    tok_free(m->tok);
    gguf_close(&m->gguf);
    if (m->map) munmap((void *)m->map, m->map_size);
    mem_free(m->layers);
    mem_free(m->owned);
    for (int i = 0; i < m->n_coded; i++) wc_close(&m->coded[i].wt);
    mem_free(m->coded);
    mem_free(m->decoded);
    memset(m, 0, sizeof *m);
}

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
    const Mat *mats[] = {&m->layers[0].wq, &m->layers[0].wk, &m->layers[0].w_gate,
                         &m->layers[0].w_down, &m->output};
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
#endif

/* Paged attention of one query head (model.h). kbase/vbase: this layer's
 * (NB * BS, kvd) rows, offset to the query's KV head. The plain path folds
 * the keys in with attend_rows, block by block; the others a chunk at a time
 * (attend_chunk). Built for the exercise, every path takes attend_rows, so
 * the exercise's code is what runs. */
void model_attend_paged(float *out, const float *q, const float *kbase, const float *vbase,
                        const int *table, int BS, int n, int S, size_t kvd, float scale) {
    Online st = {-INFINITY, 0.0f};
    for (int i = 0; i < S; i++) out[i] = 0.0f;
#ifndef EXERCISE_ATTENTION
    if (ops_isa() != OPS_PLAIN) {
        for (int p = 0; p < n; p += ATT_CHUNK)
            attend_chunk(&st, out, q, kbase, vbase, table, BS, p, n - p < ATT_CHUNK ? n - p : ATT_CHUNK, S, kvd,
                         scale);
        for (int i = 0; i < S; i++) out[i] /= st.sum;
        return;
    }
#endif
    for (int p = 0; p < n; p += BS) {
        size_t row = (size_t)table[p / BS] * BS;
        int rows = n - p < BS ? n - p : BS;
        attend_rows(&st, out, q, kbase + row * kvd, vbase + row * kvd, rows, S, kvd, scale);
    }
    for (int i = 0; i < S; i++) out[i] /= st.sum;
}


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

/* A decode that failed mid-run: no logits can be trusted (model.h). */
static float *nan_logits(RunState *s, int V, int n_logits) {
    for (size_t i = 0; i < (size_t)n_logits * V; i++) s->logits[i] = NAN;
    return s->logits;
}

/* Layer l with its coded matrices pointed at their decoded bytes. */
static int lowmem_layer(const Model *m, int l, Layer *out) {
    const void *ptr[LM_MAX_PARTS];
    int st = lm_acquire(m->lowmem, l, ptr, NULL);
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

float *model_forward_batch(const Model *m, RunState *s, const KvStore *kv, const Batch *b) {
    if (m->gpu) return forward_gpu(m, s, kv, b);
    const ModelConfig *c = &m->cfg;
    int D = c->dim, F = c->hidden_dim, S = c->head_dim, H = c->n_heads, Hkv = c->n_kv_heads;
    int half = c->n_rot / 2, T = b->T, BS = kv->BS, V = c->vocab_size;
    size_t qd = (size_t)H * S, kvd = (size_t)Hkv * S;
    size_t layer_rows = (size_t)kv->NB * BS;   /* rows of one layer's K (or V) */

    size_t embd_row = dtype_row_bytes(m->tok_embd.type, D);
    for (int t = 0; t < T; t++) {
        const void *row = (const char *)m->tok_embd.data + (size_t)b->token[t] * embd_row;
        if (m->embd_coded) {   /* low_mem: this token's row, decoded */
            if (lm_decode_range(m->lowmem, m->embd_coded, (uint64_t)b->token[t] * embd_row, embd_row, s->row,
                                NULL))
                return nan_logits(s, V, b->n_logits);
            row = s->row;
        }
        dequantize_row(s->x + (size_t)t * D, row, m->tok_embd.type, D);
    }

    for (int l = 0; l < c->n_layers; l++) {
        const Layer *w = &m->layers[l];
        Layer coded;
        if (m->lowmem) {   /* this layer's matrices, decoded into a reused buffer */
            if (lowmem_layer(m, l, &coded)) return nan_logits(s, V, b->n_logits);
            w = &coded;
        }
        float *kc = kv->key + (size_t)l * layer_rows * kvd;
        float *vc = kv->value + (size_t)l * layer_rows * kvd;

        for (int t = 0; t < T; t++)
            rmsnorm(s->xb + (size_t)t * D, s->x + (size_t)t * D, w->attn_norm, D, c->rms_eps);
        /* One product per weight for every token of every sequence in the batch. */
        matmul_group((float *const[]){s->q, s->k, s->v}, s->xb, (const Mat *const[]){&w->wq, &w->wk, &w->wv},
                     3, T, s->scratch);
        /* RoPE at each token's own position, then its K/V go to its slot, so
         * later tokens of the same sequence in this batch can see them. */
        for (int t = 0; t < T; t++) {
            const float *cs = s->rope_cs + (size_t)b->pos[t] * half * 2;
            rope(s->q + t * qd, H, S, c->n_rot, cs);
            rope(s->k + t * kvd, Hkv, S, c->n_rot, cs);
            memcpy(kc + (size_t)b->slot[t] * kvd, s->k + t * kvd, kvd * sizeof(float));
            memcpy(vc + (size_t)b->slot[t] * kvd, s->v + t * kvd, kvd * sizeof(float));
        }
        /* Every (token, head) pair is independent: threads share them out
         * when there are enough, with the same results. On the plain path
         * (ops.h) it is a plain loop, which a debugger steps straight into. */
        if (ops_isa() == OPS_PLAIN || T * H < 64) {
            for (int t = 0; t < T; t++)
                for (int h = 0; h < H; h++) attend_head(c, s, b, kc, vc, BS, t, h);
        } else {
#pragma omp parallel for collapse(2) schedule(static)
            for (int t = 0; t < T; t++)
                for (int h = 0; h < H; h++) attend_head(c, s, b, kc, vc, BS, t, h);
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
        if (lm_acquire(m->lowmem, c->n_layers + p, ptr, NULL)) return nan_logits(s, V, b->n_logits);
        int r0 = p * m->head_rows, n = r0 + m->head_rows < V ? m->head_rows : V - r0;
        Mat piece = {m->output.type, n, D, ptr[0]};
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
