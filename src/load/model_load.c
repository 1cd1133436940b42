/* model_load.c - the loaders of the model stage: a file's header checked,
 * its weights bound into a Model, never copied.
 *
 * Two formats (notes/formats.md): GGUF, whose tensors are named and typed,
 * and llama2.c's checkpoint, a header of seven ints and the float weights in
 * a fixed order. The big matrices stay where the file's memory mapping has
 * them: a Mat points into it, in whatever type the file stores (eleven of
 * them: the float types F32, F16, BF16, and the block formats of
 * kernels/ops.h), and the kernels read that type directly. A compressed file
 * (tools/compress) binds coded tensors instead, decoded up front or, with
 * --low-mem, on demand by codec/lowmem.c. With --device cuda every weight is
 * then handed to the CUDA wing (kernels/gpu.h) as plain data.
 *
 * This half of the model stage reads files; model.c, the other, runs the
 * forward pass over what it bound. Both fill and read the one Model of
 * model.h. */
#include "model.h"
#include "base/clock.h"
#include "base/fileio.h"
#include "base/mem.h"
#include "codec/expcode.h"
#include "kernels/gpu.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

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
    if (c->head_dim == c->dim / c->n_heads && c->dim % c->n_heads)   /* the head size derived */
        return err_set(e, ST_FORMAT, "%s: dim %d is not a multiple of n_heads %d", path, c->dim,
                       c->n_heads);
    if (c->head_dim < 2 || (long)c->head_dim * c->n_heads > 4L * MAX_DIM)
        return err_set(e, ST_FORMAT, "%s: absurd head size %d for %d heads", path, c->head_dim, c->n_heads);
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
    snprintf(c->name, sizeof c->name, "%s", name);
    size_t into = (size_t)((char *)out - (char *)m->layers);
    c->layer = (char *)out >= (char *)m->layers && into < (size_t)m->cfg.n_layers * sizeof(Layer)
                   ? (int)(into / sizeof(Layer)) : -1;
    *out = (Mat){.type = (DType)c->wt.type, .N = N, .K = K, .data = NULL};
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
    char key[64];
    snprintf(key, sizeof key, "%s.rope.scaling.type", model_arch_name(m->cfg.arch));
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
    mem_advise_huge(m->decoded, total + 64);
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

/* Low memory on the fast tier: can every coded matrix take it? BF16 with
 * rows of whole blocks of 64 (the others would need the pipeline anyway). */
static int fast_tier_fits(const Model *m) {
    for (int i = 0; i < m->n_coded; i++)
        if (m->coded[i].wt.type != DT_BF16 || m->coded[i].mat->K % BF16E_BLOCK) return 0;
    return m->n_coded > 0;
}

enum { FAST_PIECE_BYTES = 4 << 20 };   /* BF16 bytes decoded at a time, per thread */

/* Pass 1 (w == NULL): count matrix c's exponents into hist; pass 2: write
 * its rows with w. Its blob decoded a piece of whole rows at a time. */
static int fast_pass(const CodedMat *c, uint64_t hist[256], EcWriter *w, uint8_t *scratch, uint16_t *piece, Err *e) {
    int N = c->mat->N, K = c->mat->K;
    int rows = FAST_PIECE_BYTES / 2 / K > 0 ? FAST_PIECE_BYTES / 2 / K : 1;
    for (int n = 0; n < N; n += rows) {
        int r = N - n < rows ? N - n : rows;
        int st = wc_decode_range(&c->wt, (uint64_t)n * K * 2, (size_t)r * K * 2, piece, scratch, codec_isa(), e);
        if (st) return st;
        if (!w) ec_count(hist, piece, (size_t)r * K);
        else if ((st = ec_write_rows(w, piece, r, e))) return st;
    }
    return ST_OK;
}

/* Low memory, the fast tier: each coded BF16 matrix decoded from its blob
 * twice, a piece at a time, to choose its exponent table and then to write
 * it as BF16E into one allocation (m->decoded), where the products read it.
 * About 70% of the BF16 bytes stay resident, and no layer is ever decoded
 * again (notes/rans.md, "The fast tier"). */
static int build_fast_tier(Model *m, Err *e) {
    double t0 = clock_seconds();
    int n = m->n_coded, threads = ops_isa() == OPS_PLAIN ? 1 : ops_threads();
    if (threads > n) threads = n;
    size_t scratch = 0;
    for (int i = 0; i < n; i++)
        if (wc_scratch_bytes(&m->coded[i].wt) > scratch) scratch = wc_scratch_bytes(&m->coded[i].wt);
    scratch = (scratch + 63) / 64 * 64;
    size_t per_thread = scratch + FAST_PIECE_BYTES;   /* K <= 4 MAX_DIM: a piece holds a row at least */
    uint8_t *work = mem_alloc((size_t)threads * per_thread);
    uint64_t *esc = mem_alloc((size_t)n * sizeof *esc);
    uint8_t(*exps)[8] = mem_alloc((size_t)n * 8);
    if (!work || !esc || !exps) {
        mem_free(work), mem_free(esc), mem_free(exps);
        return err_set(e, ST_NOMEM, "%s: out of memory for the fast tier's work buffers", m->gguf.path);
    }
    int st = ST_OK;
    for (int pass = 0; pass < 2 && !st; pass++) {
        if (pass == 1) {   /* the tables are known: lay every matrix out */
            size_t total = (size_t)n * sizeof(Bf16eData) + 64;
            for (int i = 0; i < n; i++) total += ec_bytes(m->coded[i].mat->N, m->coded[i].mat->K, esc[i]);
            m->decoded = mem_alloc(total);
            if (!m->decoded) {
                st = err_set(e, ST_NOMEM, "%s: cannot allocate %zu bytes for the fast tier", m->gguf.path, total);
                break;
            }
            mem_advise_huge(m->decoded, total);
            m->decoded_bytes = total;
        }
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
        for (int i = 0; i < n; i++) {
            int me = 0;
#ifdef _OPENMP
            me = omp_get_thread_num();
#endif
            uint8_t *sc = work + (size_t)me * per_thread;
            CodedMat *c = &m->coded[i];
            Err ei;
            int r;
            if (pass == 0) {
                uint64_t hist[256] = {0};
                r = fast_pass(c, hist, NULL, sc, (uint16_t *)(sc + scratch), &ei);
                esc[i] = ec_table(hist, exps[i]);
            } else {
                uint8_t *at = (uint8_t *)m->decoded + (size_t)n * sizeof(Bf16eData);
                at = (uint8_t *)(((uintptr_t)at + 63) & ~(uintptr_t)63);
                for (int j = 0; j < i; j++) at += ec_bytes(m->coded[j].mat->N, m->coded[j].mat->K, esc[j]);
                EcWriter w;
                ec_writer_init(&w, at, c->mat->N, c->mat->K, exps[i], esc[i], c->mat, (Bf16eData *)m->decoded + i);
                r = fast_pass(c, NULL, &w, sc, (uint16_t *)(sc + scratch), &ei);
                /* its blob's pages are read no more: given back as the
                 * fast tier grows, resident weights stay near the file's */
                if (!r) fio_drop(c->wt.data[0] - c->wt.header, c->wt.size);
            }
            if (r) {
#pragma omp critical(fast_tier_error)
                if (!st) {
                    st = r;
                    *e = ei;
                }
            }
        }
    }
    mem_free(work), mem_free(esc), mem_free(exps);
    m->fast_tier = 1;
    m->decode_load_s = clock_seconds() - t0;
    return st;
}

/* Low memory on the GPU: the coded BF16 matrices stay at rest in the
 * mapping, and gpu_upload hands their rANS planes to the GPU, which builds
 * the fast tier itself (kernels/gpu.h GpuAtRest: the same bytes as
 * build_fast_tier's). Each Mat is made DT_BF16E now, its Bf16eData without
 * blocks; the GPU writes back its table and row index. LLM_CUDA_REST=0
 * builds the tier here instead, as on the CPU. */
static int keep_at_rest(Model *m, Err *e) {
    int n = m->n_coded;
    size_t total = (size_t)n * sizeof(Bf16eData);
    for (int i = 0; i < n; i++) total += ((size_t)m->coded[i].mat->N + 1) * 4;
    m->decoded = mem_alloc(total);
    if (!m->decoded) return err_set(e, ST_NOMEM, "%s: out of memory for the fast tier's row index", m->gguf.path);
    m->decoded_bytes = total;
    uint32_t *rows = (uint32_t *)((Bf16eData *)m->decoded + n);
    for (int i = 0; i < n; i++) {
        Bf16eData *d = (Bf16eData *)m->decoded + i;
        Mat *w = m->coded[i].mat;
        memset(d, 0, sizeof *d);
        d->esc_row = rows;
        rows += w->N + 1;
        *w = (Mat){.type = DT_BF16E, .N = w->N, .K = w->K, .data = d};
    }
    m->fast_tier = 1;
    m->tier_on_gpu = 1;
    return ST_OK;
}

static int tier_on_gpu(const ModelOpts *o) {
    const char *v = getenv("LLM_CUDA_REST");
    return o->device == DEVICE_CUDA && !(v && !strcmp(v, "0"));
}

static int finish_coded(Model *m, const ModelOpts *o, int tied, Err *e) {
    if (o->low_mem && !m->n_coded)
        return err_set(e, ST_ARG, "%s: --low-mem needs a compressed file (tools/compress), and this one has "
                       "no coded matrices", m->gguf.path);
    if (!m->n_coded) return ST_OK;
    if (o->low_mem && !o->rans_tier && fast_tier_fits(m))
        return tier_on_gpu(o) ? keep_at_rest(m, e) : build_fast_tier(m, e);
    if (o->low_mem) return build_units(m, o, tied, e);
    double t0 = clock_seconds();
    int st = decode_all(m, e);
    m->decode_load_s = clock_seconds() - t0;
    return st;
}

/* The matrices every step reads from end to end, each layer's seven and the
 * classifier, of them those `want` takes, into mats (7 L + 1 of room, the
 * caller's to free) with their offsets in one allocation of *total bytes,
 * each on a 64-byte line; *n of them. */
static int list_mats(Model *m, int (*want)(const Model *, const Mat *), const char *path, Mat ***mats, size_t **at,
                     int *n, size_t *total, Err *e) {
    int L = m->cfg.n_layers;
    *mats = mem_alloc((size_t)(7 * L + 1) * sizeof **mats);
    *at = mem_alloc((size_t)(7 * L + 1) * sizeof **at);
    *n = 0, *total = 0;
    if (!*mats || !*at) {
        mem_free(*mats), mem_free(*at);
        return err_set(e, ST_NOMEM, "%s: out of memory listing the matrices", path);
    }
    for (int l = 0; l <= L; l++) {
        Layer *w = &m->layers[l < L ? l : 0];
        Mat *each[] = {&w->wq, &w->wk, &w->wv, &w->wo, &w->w_gate, &w->w_up, &w->w_down};
        for (int i = 0; i < (l < L ? 7 : 1); i++) {
            Mat *x = l < L ? each[i] : &m->output;
            if (!x->data || !want(m, x)) continue;
            (*at)[*n] = *total;
            (*mats)[(*n)++] = x;
            *total += (dtype_row_bytes(x->type, x->K) * x->N + 63) / 64 * 64;
        }
    }
    return ST_OK;
}

/* The mapped file, a GGUF's or a llama2.c checkpoint's, and its *size. */
static const void *mapping(const Model *m, size_t *size) {
    *size = m->gguf.map ? m->gguf.size : m->map_size;
    return m->gguf.map ? (const void *)m->gguf.map : m->map;
}

/* Whether p .. p + bytes lies in the file's mapping (not on the heap, as a
 * matrix decoded at load does). */
static int in_mapping(const Model *m, const void *p, size_t bytes) {
    size_t size;
    uintptr_t d = (uintptr_t)p, map = (uintptr_t)mapping(m, &size);
    return map && d >= map && d + bytes <= map + size;
}

/* In eights where the path reads them so; not a coded matrix that
 * --low-mem decodes a layer at a time (the classifier's head_coded). */
static int wants_rows8(const Model *m, const Mat *x) {
    return ops_rows8(x->type, x->N) && !(x == &m->output && m->head_coded);
}

/* The matrices that the path in use reads in eights (ops_rows8; formats.h,
 * "In eights"): copied into one allocation, a matrix a thread, in huge pages
 * where the system gives them (mem_advise_huge; notes/formats.md, "Huge
 * pages"), and their pages of the mapping given back, so that the resident
 * weights stay about the file's size. The embedding's rows are looked up in
 * the mapping: a tied classifier gets its copy and keeps its pages. */
static int make_rows8(Model *m, int tied, Err *e) {
    Mat **mats;
    size_t *at, total;
    int n, st = list_mats(m, wants_rows8, m->gguf.path, &mats, &at, &n, &total, e);
    if (st) return st;
    if (n && !(m->rows8 = mem_alloc(total))) {
        mem_free(mats), mem_free(at);
        return err_set(e, ST_NOMEM, "%s: cannot allocate %zu bytes for the matrices in eights (LLM_ROWS8=0 "
                       "reads them in place)", m->gguf.path, total);
    }
    m->rows8_bytes = n ? total : 0;
    mem_advise_huge(m->rows8, total);
    int threads = ops_threads() < n ? ops_threads() : n > 0 ? n : 1;
    (void)threads;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int i = 0; i < n; i++) {
        mat_to_rows8(m->rows8 + at[i], mats[i]);
        mats[i]->rows8 = m->rows8 + at[i];
        /* pages of the file only: a matrix decoded at load lives on the heap */
        size_t bytes = dtype_row_bytes(mats[i]->type, mats[i]->K) * mats[i]->N;
        if (!(tied && mats[i] == &m->output) && in_mapping(m, mats[i]->data, bytes)) fio_drop(mats[i]->data, bytes);
    }
    mem_free(mats), mem_free(at);
    return ST_OK;
}

/* Read in place from the mapping: neither in eights nor decoded at load. */
static int wants_copy(const Model *m, const Mat *x) {
    return !x->rows8 && in_mapping(m, x->data, dtype_row_bytes(x->type, x->K) * x->N);
}

/* With LLM_COPY=1, the matrices still read in place from the mapping are
 * copied into one allocation in huge pages (mem_advise_huge), their pages of
 * the mapping given back as with the copies in eights, so the resident
 * weights stay about the file's size: a step that reads every matrix from
 * end to end then crosses a page every 2 MiB, not every 4 KiB (the file's
 * pages are 4 KiB ones). The same bytes, so the same bits. Off by default:
 * on the Zen 3 core one stream decoded 1.06 to 1.33 times as fast from the
 * copies in eights in huge pages, but the matrices read in place gained
 * 0-8%, and copying a 4.4 GB F32 file made its load 3 to 5 times as long
 * (notes/formats.md, "Huge pages"). The embedding's rows are always looked
 * up in the mapping; a tied classifier gets its copy and keeps its pages. */
static int copy_weights(Model *m, const char *path, Err *e) {
    const char *v = getenv("LLM_COPY");
    if (v && *v && strcmp(v, "0") && strcmp(v, "1")) return err_set(e, ST_ARG, "LLM_COPY: '%.40s' is not 0 or 1", v);
    if (!v || strcmp(v, "1")) return ST_OK;
    Mat **mats;
    size_t *at, total;
    int n, st = list_mats(m, wants_copy, path, &mats, &at, &n, &total, e);
    if (st || !n) {
        if (!st) mem_free(mats), mem_free(at);
        return st;
    }
    if (!(m->copies = mem_alloc(total))) {
        mem_free(mats), mem_free(at);
        return err_set(e, ST_NOMEM, "%s: cannot allocate %zu bytes to copy the matrices out of the mapping (without "
                       "LLM_COPY=1 they are read in place)", path, total);
    }
    m->copies_bytes = total;
    mem_advise_huge(m->copies, total);
    int threads = ops_threads() < n ? ops_threads() : n;
    (void)threads;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int i = 0; i < n; i++) {
        size_t bytes = dtype_row_bytes(mats[i]->type, mats[i]->K) * mats[i]->N;
        const void *was = mats[i]->data;
        memcpy(m->copies + at[i], was, bytes);
        mats[i]->data = m->copies + at[i];
        if (was != m->tok_embd.data) fio_drop(was, bytes);   /* a tied classifier's are the embedding's */
    }
    mem_free(mats), mem_free(at);
    return ST_OK;
}

/* A compressed file's tensor, once its checksum is known, gives its pages of
 * the mapping back: the check reads the whole file, and keeping all of it
 * resident would put the file's size on top of what the load builds (the
 * fast tier, or nothing at all where the GPU builds it). The pages stay in
 * the page cache; the decoders fault them back in as they read. */
static void drop_checked(void *ctx, uint64_t i, uint32_t stored, uint32_t got) {
    (void)stored, (void)got;
    const Gguf *g = ctx;
    fio_drop(g->tensors[i].data, g->tensors[i].nbytes);
}

static int load_gguf(Model *m, const char *path, const ModelOpts *o, Err *e) {
    int st = gguf_open(&m->gguf, path, e);
    if (st) return st;
    Gguf *g = &m->gguf;
    if (gguf_find(g, "rans.version")) {   /* compressed by tools/compress.c */
        int64_t v;
        if (gguf_get_int(g, "rans.version", &v, e)) return ST_FORMAT;
        if (v != WC_FILE_VERSION)
            return err_set(e, ST_UNSUPPORTED, "%s: rans.version %lld (this engine reads %d%s)", path, (long long)v,
                           WC_FILE_VERSION, v == 1 ? ", which checksums every tensor: compress the original again" : "");
        /* every tensor, coded or stored as it was, against its CRC-32 before
         * any of it is used: a flipped byte is a refusal, never other weights */
        if ((st = gguf_check_header_crc(g, "rans.header.crc32", e)) ||
            (st = gguf_check_crcs(g, "rans.tensor.crc32", drop_checked, g, e)))
            return st;
        m->coded = mem_alloc((g->n_tensors ? g->n_tensors : 1) * sizeof *m->coded);
        if (!m->coded) return err_set(e, ST_NOMEM, "%s: out of memory", path);
    }
    GgufStr arch;
    if (gguf_get_str(g, "general.architecture", &arch, e)) return ST_FORMAT;
    ModelConfig *c = &m->cfg;
    static const ModelArch known[] = {ARCH_LLAMA, ARCH_QWEN2, ARCH_QWEN3};
    int found = 0;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (gguf_str_eq(arch, model_arch_name(known[i]))) {
            c->arch = known[i];
            found = 1;
        }
    if (!found)
        return err_set(e, ST_UNSUPPORTED, "%s: architecture '%.*s' is not supported (want llama, qwen2 or "
                       "qwen3)", path, (int)(arch.len > 32 ? 32 : arch.len), arch.s);
    c->rope_neox = c->arch != ARCH_LLAMA;   /* llama.cpp's LLAMA_ROPE_TYPE_NEOX for both Qwens */
    /* The hyper-parameters live under the architecture's name: llama.*, qwen2.*, qwen3.* */
    const char *a = model_arch_name(c->arch);
    char key[96];
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", a, suffix), key)
    if (gguf_int_or(g, KEY("embedding_length"), -1, 1, MAX_DIM, &c->dim, e) ||
        gguf_int_or(g, KEY("block_count"), -1, 1, MAX_LAYERS, &c->n_layers, e) ||
        gguf_int_or(g, KEY("feed_forward_length"), -1, 1, 4 * MAX_DIM, &c->hidden_dim, e) ||
        gguf_int_or(g, KEY("attention.head_count"), -1, 1, MAX_HEADS, &c->n_heads, e) ||
        gguf_int_or(g, KEY("attention.head_count_kv"), c->n_heads, 1, MAX_HEADS, &c->n_kv_heads, e) ||
        gguf_int_or(g, KEY("context_length"), -1, 1, MAX_CTX, &c->seq_len, e))
        return ST_FORMAT;
    /* The head size: dim / heads, unless the file names its own (Qwen3-0.6B:
     * 16 heads of 128 in a model 1024 wide). K and V must agree on it. */
    int key_len = 0, value_len = 0;
    if (gguf_int_or(g, KEY("attention.key_length"), 0, 0, MAX_DIM, &key_len, e) ||
        gguf_int_or(g, KEY("attention.value_length"), key_len, 0, MAX_DIM, &value_len, e))
        return ST_FORMAT;
    if (key_len != value_len)
        return err_set(e, ST_UNSUPPORTED, "%s: %s.attention.key_length %d differs from value_length %d "
                       "(this engine wants one head size)", path, a, key_len, value_len);
    if (key_len == 0 && c->dim % c->n_heads)
        return err_set(e, ST_FORMAT, "%s: dim %d is not a multiple of n_heads %d", path, c->dim,
                       c->n_heads);
    c->head_dim = key_len ? key_len : c->dim / c->n_heads;
    if (gguf_int_or(g, KEY("rope.dimension_count"), c->head_dim, 0, MAX_DIM, &c->n_rot, e))
        return ST_FORMAT;
    double base = 10000.0, eps = 1e-5;
    if (gguf_find(g, KEY("rope.freq_base")) && gguf_get_float(g, key, &base, e))
        return ST_FORMAT;
    if (gguf_find(g, KEY("attention.layer_norm_rms_epsilon")) && gguf_get_float(g, key, &eps, e))
        return ST_FORMAT;
#undef KEY
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

    int D = c->dim, F = c->hidden_dim, V = c->vocab_size, L = c->n_layers, S = c->head_dim;
    int qd = c->n_heads * S, kvd = c->n_kv_heads * S;
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
        if ((st = bind_mat(m, NAME("attn_q.weight"), qd, D, &w->wq, e)) ||
            (st = bind_mat(m, NAME("attn_k.weight"), kvd, D, &w->wk, e)) ||
            (st = bind_mat(m, NAME("attn_v.weight"), kvd, D, &w->wv, e)) ||
            (st = bind_mat(m, NAME("attn_output.weight"), D, qd, &w->wo, e)) ||
            (st = bind_mat(m, NAME("ffn_gate.weight"), F, D, &w->w_gate, e)) ||
            (st = bind_mat(m, NAME("ffn_down.weight"), D, F, &w->w_down, e)) ||
            (st = bind_mat(m, NAME("ffn_up.weight"), F, D, &w->w_up, e)))
            return st;
    }
    /* Per layer: two norms of D, and what the architecture adds (Qwen2's
     * three biases, Qwen3's two head norms of S), each widened to float here
     * when the file stores it narrower. */
    size_t extra = c->arch == ARCH_QWEN2 ? (size_t)qd + 2 * (size_t)kvd : c->arch == ARCH_QWEN3 ? 2 * (size_t)S : 0;
    size_t per_layer = 2 * (size_t)D + extra;
    m->owned = mem_alloc(((size_t)L * per_layer + D) * sizeof(float));
    if (!m->owned) return err_set(e, ST_NOMEM, "%s: out of memory", path);
    for (int l = 0; l < L; l++) {
        Layer *w = &m->layers[l];
        float *own = m->owned + (size_t)l * per_layer;
        if ((st = bind_vec(m, NAME("attn_norm.weight"), D, own, &w->attn_norm, e)) ||
            (st = bind_vec(m, NAME("ffn_norm.weight"), D, own + D, &w->ffn_norm, e)))
            return st;
        own += 2 * D;
        if (c->arch == ARCH_QWEN2 &&
            ((st = bind_vec(m, NAME("attn_q.bias"), qd, own, &w->bq, e)) ||
             (st = bind_vec(m, NAME("attn_k.bias"), kvd, own + qd, &w->bk, e)) ||
             (st = bind_vec(m, NAME("attn_v.bias"), kvd, own + qd + kvd, &w->bv, e))))
            return st;
        if (c->arch == ARCH_QWEN3 &&
            ((st = bind_vec(m, NAME("attn_q_norm.weight"), S, own, &w->q_norm, e)) ||
             (st = bind_vec(m, NAME("attn_k_norm.weight"), S, own + S, &w->k_norm, e))))
            return st;
    }
#undef NAME
    if ((st = bind_vec(m, "output_norm.weight", D, m->owned + (size_t)L * per_layer, &m->out_norm, e)))
        return st;
    int tied = !gguf_tensor(g, "output.weight");
    if (!tied && (st = bind_mat(m, "output.weight", V, D, &m->output, e))) return st;
    if ((st = finish_coded(m, o, tied, e))) return st;
    if (tied) m->output = m->tok_embd;   /* tied classifier: the embedding read backwards */
    m->wtype = m->layers[0].wq.type;
    if ((st = bind_rope_freqs(m, e))) return st;
    if (o->device == DEVICE_CPU && (st = make_rows8(m, tied, e))) return st;
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
    const void *map;
    st = fio_map(path, fd, size, &map, e);
    close(fd);
    if (st) return st;
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
#define MAT(n, k) ((Mat){.type = DT_F32, .N = (int)(n), .K = (int)(k), .data = TAKE((n) * (k))})   /* the next n x k */
    m->tok_embd = MAT(V, D);
    for (size_t l = 0; l < L; l++) m->layers[l].attn_norm = TAKE(D);
    for (size_t l = 0; l < L; l++) m->layers[l].wq = MAT(D, D);
    for (size_t l = 0; l < L; l++) m->layers[l].wk = MAT(kvd, D);
    for (size_t l = 0; l < L; l++) m->layers[l].wv = MAT(kvd, D);
    for (size_t l = 0; l < L; l++) m->layers[l].wo = MAT(D, D);
    for (size_t l = 0; l < L; l++) m->layers[l].ffn_norm = TAKE(D);
    for (size_t l = 0; l < L; l++) m->layers[l].w_gate = MAT(F, D);
    for (size_t l = 0; l < L; l++) m->layers[l].w_down = MAT(D, F);
    for (size_t l = 0; l < L; l++) m->layers[l].w_up = MAT(F, D);
    m->out_norm = TAKE(D);
    p += P * S;    /* freq_cis_real and freq_cis_imag: recomputed in runstate_init */
    m->output = shared ? m->tok_embd : MAT(V, D);
#undef MAT
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

/* The coded matrices kept at rest (keep_at_rest), told to the GPU as
 * plain data: their planes in the mapping, and where to write back. */
static void describe_rest(const Model *m, GpuAtRest *r, char (*names)[160]) {
    for (int i = 0; i < m->n_coded; i++) {
        const CodedMat *c = &m->coded[i];
        Bf16eData *d = (Bf16eData *)c->mat->data;
        snprintf(names[i], 160, "%s: tensor %s", m->gguf.path, c->name);
        r[i] = (GpuAtRest){.data = d, .name = names[i], .blob = c->wt.data[0] - c->wt.header, .blob_bytes = c->wt.size,
                           .exps = d->exps, .esc_row = (uint32_t *)d->esc_row};
        for (int p = 0; p < 2; p++) {
            const RansStream *s = &c->wt.rs[p];
            r[i].coded[p] = c->wt.plane[p].coded;
            r[i].raw[p] = c->wt.data[p];
            if (r[i].coded[p])
                r[i].rans[p] = (GpuRansHost){s->payload, s->sizes.payload, s->index, s->slot_sym, s->freq, s->start,
                                             s->bits, s->n_states, s->chunk_size, RANS_L, s->n, s->n_chunks};
        }
    }
}

/* --device cuda: every weight to the GPU (kernels/gpu.h), told as plain data. */
static int gpu_upload(Model *m, const ModelOpts *o, Err *e) {
    if (o->low_mem && !m->fast_tier)   /* the fast tier (BF16E) stays coded on the GPU; the rANS tier does not */
        return err_set(e, ST_ARG, "--low-mem with --device cuda: the GPU takes the fast tier (BF16 matrices, "
                       "rows of whole blocks of 64, not --low-mem=rans), and %s takes the rANS tier", m->gguf.path);
    if (m->cfg.arch != ARCH_LLAMA)
        return err_set(e, ST_UNSUPPORTED, "--device cuda: the CUDA kernels run llama files; this one is %s "
                       "(it runs on the CPU)", model_arch_name(m->cfg.arch));
    const ModelConfig *c = &m->cfg;
    GpuLayer *ls = mem_alloc((size_t)c->n_layers * sizeof *ls);
    if (!ls) return err_set(e, ST_NOMEM, "gpu: out of memory describing %d layers", c->n_layers);
    for (int l = 0; l < c->n_layers; l++) {
        const Layer *w = &m->layers[l];
        ls[l] = (GpuLayer){w->attn_norm, w->ffn_norm, w->wq, w->wk, w->wv, w->wo, w->w_gate, w->w_up, w->w_down};
    }
    int n_rest = m->tier_on_gpu ? m->n_coded : 0;
    GpuAtRest *rest = n_rest ? mem_alloc((size_t)n_rest * sizeof *rest) : NULL;
    char(*names)[160] = n_rest ? mem_alloc((size_t)n_rest * 160) : NULL;
    if (n_rest && (!rest || !names)) {
        mem_free(ls), mem_free(rest), mem_free(names);
        return err_set(e, ST_NOMEM, "gpu: out of memory describing %d coded matrices", n_rest);
    }
    if (n_rest) describe_rest(m, rest, names);
    GpuModelDesc d = {c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim, c->vocab_size,
                      c->seq_len, c->n_rot, c->rms_eps, m->tok_embd, m->output, m->out_norm, ls,
                      n_rest, rest, ec_table};
    int st = gpu_model_create(&m->gpu, &d, e);
    mem_free(ls), mem_free(rest), mem_free(names);
    if (st || !n_rest) return st;
    for (int i = 0; i < m->n_coded; i++) {   /* the table's rotated form, as ec_writer_init sets it */
        Bf16eData *bd = (Bf16eData *)m->coded[i].mat->data;
        for (int k = 0; k < BF16E_ESCAPE; k++) bd->rot[k] = (uint8_t)(bd->exps[k] >> 1 | (bd->exps[k] & 1) << 7);
    }
    m->decode_load_s = gpu_stats(m->gpu).rest_s;
    return ST_OK;
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
    if (st == ST_OK && o->device == DEVICE_CPU && !o->low_mem) st = copy_weights(m, path, e);
    if (st == ST_OK && o->device == DEVICE_CUDA) st = gpu_upload(m, o, e);
    if (st) model_free(m);
    return st;
}

void model_free(Model *m) {
    gpu_model_free(m->gpu);
    lm_free(m->lowmem);   /* first: its helper thread may be decoding from the mapping */
    tok_free(m->tok);
    gguf_close(&m->gguf);
    fio_unmap(m->map, m->map_size);
    mem_free(m->layers);
    mem_free(m->owned);
    for (int i = 0; i < m->n_coded; i++) wc_close(&m->coded[i].wt);
    mem_free(m->coded);
    mem_free(m->decoded);
    mem_free(m->rows8);
    mem_free(m->copies);
    memset(m, 0, sizeof *m);
}

ModelStats model_stats(const Model *m) {
    size_t mapped;
    mapping(m, &mapped);
    ModelStats s = {.mapped = mapped, .coded = m->coded_bytes,
                    .decoded = m->decoded_bytes, .decode_load_s = m->decode_load_s, .fast_tier = m->fast_tier + m->tier_on_gpu,
                    .rows8 = m->rows8_bytes, .copied = m->copies_bytes};
    if (m->lowmem) {
        s.low_mem = 1;
        s.lm = lm_stats(m->lowmem);
    }
    return s;
}

size_t model_resident_bytes(const Model *m) {
    size_t size;
    const void *map = mapping(m, &size);
    return mem_resident_bytes(map, size);
}

const char *model_arch_name(ModelArch a) {
    switch (a) {
    case ARCH_LLAMA: return "llama";
    case ARCH_QWEN2: return "qwen2";
    case ARCH_QWEN3: return "qwen3";
    }
    return "unknown";
}
