/* gpu_model.cu - model_forward_batch on the GPU: weights uploaded once, a KV
 * pool in GPU memory under the host's block tables, one step a stream of
 * kernels (replayed from a CUDA graph when the step's shape repeats).
 *
 * C reference: model_forward_batch (src/model.c), line for line:
 *
 *   x = embedding[token]                          gpu_embed
 *   for each layer:
 *     qkv = rmsnorm(x) Wqkv^T                     one product, the norm fused in
 *     rope q, k; k, v -> their slots              in that product's epilogue (or gpu_rope_store)
 *     att = paged attention                       gpu_attention (+ a merge when split)
 *     x += att Wo^T                               one product, the residual add fused
 *     gu = rmsnorm(x) [Wgate; Wup]^T              one product, the norm fused
 *     h = swiglu(gu)                              in that product's epilogue (or gpu_swiglu_apart)
 *     x += h Wdown^T                              one product, the add fused
 *   logits = rmsnorm(x[logit rows]) Wout^T        one product, the gather and norm fused
 *
 * Five kernels a layer (one more when attention is split; RoPE and the K/V
 * store are the q|k|v product's epilogue, a kernel of their own after
 * cuBLAS) and two more per step: on TinyLlama's 22 layers, 112 per decoded
 * token of one sequence.
 * SwiGLU is the gate|up product's epilogue in a decode of one sequence with
 * float weights; otherwise gpu_swiglu_apart runs it, spread over many
 * blocks (a Q8_0 down product wants h rounded in blocks of 32 values, which
 * no group of gate|up rows holds): six a layer (LLM_CUDA_SWIGLU_APART=0
 * computes it in every block of the down product's prologue instead). A
 * step of 4 rows or more runs each product's prologue as a kernel of its
 * own (gpu_prepare). 
 *
 * Weights: q, k and v are stored as one matrix of H*S + 2*Hkv*S rows, gate
 * and up as one of 2F rows, so each pair of products is one launch. F32,
 * F16, BF16 and Q8_0 stay as the file has them; the 4, 5 and 6-bit formats
 * are widened to F32 at upload (dequantize_row), which computes what the CPU's
 * plain path computes for them, at four bytes a weight.
 *
 * Prefill: from LLM_CUDA_GEMM_T rows on (default 64), each product of float
 * weights (F32, F16, BF16, and the formats widened at upload) is cuBLAS's
 * sgemm on the weights widened to float in a scratch matrix (fp32 throughout,
 * no tensor-float rounding); below it, and for Q8_0 at every T, the kernels
 * of gpu_matvec.cu, whose sums do not depend on the batch. cuBLAS is opened at run time (dlopen):
 * without it every product takes the kernels. */
#include "kernels/gpu_kernels.cuh"
#include "kernels/gpu_util.cuh"
#include <cublas_v2.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
extern "C" {
#include "kernels/gpu.h"
#include "base/clock.h"
#include "base/fileio.h"
}

/* From gpu_tune.ready_t rows on (LLM_CUDA_READY_T, default 4), a product's
 * prologue (the RMSNorm or SwiGLU of its input, the Q8_0 rounding) runs
 * once, as its own kernel, before it. */
enum { MAX_GRAPHS = 64, MAX_ALLOCS = 16, MAX_SPLIT = 32 };

typedef struct {
    float *attn_norm, *ffn_norm;
    DevMat qkv, wo, gu, down;
    DevCoded cqkv, cwo, cgu, cdown;   /* their parts, where they are BF16E */
} DevLayer;

typedef struct {
    int T, nl, nsplit;
    int seen;                 /* times this shape ran uncaptured */
    int kernels;
    cudaGraphExec_t exec;
    long used;                /* step number of last use (the oldest goes first) */
} GraphSlot;

struct GpuModel {
    GpuModelDesc d;
    cudaStream_t st;
    int sms;
    GpuStats stats;
    /* weights: every allocation in one list */
    void *alloc[MAX_ALLOCS + 8];
    int n_alloc;
    void **lalloc;            /* (L * 6) per-layer allocations */
    DevMat embd, output;
    DevCoded cembd, coutput;
    float *out_norm;
    /* BF16E weights are decoded a product at a time into wscratch, which
     * holds piece_floats floats: a layer's largest matrix, once as F32 for
     * cuBLAS, or twice as BF16 (two buffers, one decoded while the other is
     * read); the classifier goes in pieces */
    int coded;
    size_t piece_floats;
    const DevMat *pend;       /* decoded early into buffer pend_buf: rows pend_r0.. of this matrix */
    int pend_r0, pend_buf, cur_buf;
    DevLayer *layers;
    /* activations, for cap_T rows and cap_nl logit rows */
    int cap_T, cap_nl, tstride;
    float *x, *qkv, *att, *gu, *logits, *part, *rope_cs, *ascratch, *wscratch;
    int *flags;               /* LLM_CUDA_FLAGS: per layer, Hkv counters of q|k|v rows written and one of heads attended */
    size_t wscratch_floats;
    int *meta, *meta_h;       /* device, pinned host: token | pos | seq | slot | logit_row | tables */
    size_t meta_ints;
    /* the KV pool */
    const void *pool_id;
    int NB, BS;
    float *kc, *vc;
    /* graphs */
    GraphSlot graphs[MAX_GRAPHS];
    int use_graphs;
    /* cuBLAS, opened at run time */
    void *blas_lib;
    cublasHandle_t blas;
    decltype(&cublasSgemm_v2) sgemm;
    int gemm_T;
};

#define CK(call)                                                                                  \
    do {                                                                                          \
        cudaError_t ck_ = (call);                                                                 \
        if (ck_ != cudaSuccess)                                                                   \
            return err_set(e, ST_IO, "cuda: %s: %s", #call, cudaGetErrorString(ck_));             \
    } while (0)

/* ------------------------------------------------------------ weights */

static int dev_type(DType t) { return t == DT_F32 || t == DT_F16 || t == DT_BF16 || t == DT_Q8_0; }

static size_t up16(size_t n) { return (n + 15) / 16 * 16; }

/* The matrix at rest that a Mat stands for (gpu.h GpuAtRest), or NULL. */
static const GpuAtRest *at_rest(const GpuModel *g, const Mat *m) {
    for (int i = 0; m->data && i < g->d.n_rest; i++)
        if (g->d.rest[i].data == m->data) return &g->d.rest[i];
    return NULL;
}

/* Matrices m[0..n) of the fast tier (BF16E, same K), part after part in one
 * allocation: the coded bytes stay coded on the GPU too. A part is the
 * CPU's BF16E, laid out for the decoder on the host (gpu_pack_bf16e) and
 * copied, or a matrix at rest (rest[i]), which the GPU decodes from the
 * file's rANS planes and lays out itself (gpu_rest_*): the same bytes. */
static int upload_coded(GpuModel *g, void **slot, DevMat *out, DevCoded *c, const Mat *const *m,
                        const GpuAtRest *const *rest, int n, Err *e) {
    int K = m[0]->K, N = 0, st = ST_OK;
    double t0 = clock_seconds();
    GpuRestPart rp[3];
    memset(rp, 0, sizeof rp);
    size_t bytes = 0;
    for (int i = 0; !st && i < n; i++) {
        uint64_t ne = 0;
        if (rest[i] && !(st = gpu_rest_begin(&rp[i], rest[i], m[i]->N, K, g->d.choose_table, e))) {
            ne = rp[i].escapes;
            memcpy(rest[i]->exps, rp[i].exps, 8);   /* told back: the host's Mat says what the GPU holds */
            memcpy(rest[i]->esc_row, rp[i].esc_row, ((size_t)m[i]->N + 1) * 4);
        }
        if (!rest[i]) ne = ((const Bf16eData *)m[i]->data)->esc_row[m[i]->N];
        bytes += up16(dtype_row_bytes(DT_BF16E, K) * m[i]->N) + up16(((size_t)m[i]->N + 1) * 4) + up16((size_t)ne + 1);
        N += m[i]->N;
    }
    char *p = NULL;
    cudaError_t ce = cudaSuccess;
    if (!st && (ce = cudaMalloc((void **)&p, bytes)) != cudaSuccess)
        st = err_set(e, ST_NOMEM, "gpu: cannot allocate %zu bytes of coded weights: %s", bytes, cudaGetErrorString(ce));
    if (!st) {
        *slot = p;
        g->stats.weight_bytes += bytes;
        c->n_parts = n;
    }
    for (int i = 0; !st && i < n; i++) {
        DevBf16e *P = &c->part[i];
        size_t nb = dtype_row_bytes(DT_BF16E, K) * m[i]->N;
        P->N = m[i]->N;
        P->blocks = (const uint8_t *)p;
        P->esc_row = (const uint32_t *)(p + up16(nb));
        P->esc = (const uint8_t *)(p + up16(nb) + up16(((size_t)m[i]->N + 1) * 4));
        if (rest[i]) {
            st = gpu_rest_finish(P, &rp[i], K, e, rest[i]->name);
            if (!st && rest[i]->blob) fio_drop(rest[i]->blob, rest[i]->blob_bytes);
            p += up16(nb) + up16(((size_t)m[i]->N + 1) * 4) + up16((size_t)rp[i].escapes + 1);
            g->stats.rest_bytes += rp[i].coded_bytes;
            continue;
        }
        const Bf16eData *d = (const Bf16eData *)m[i]->data;
        size_t ne = d->esc_row[m[i]->N];
        uint8_t *hb = (uint8_t *)malloc(nb + ne + 1);
        if (!hb) {
            st = err_set(e, ST_NOMEM, "gpu: cannot allocate %zu bytes to lay out coded weights", nb + ne + 1);
            break;
        }
        gpu_pack_bf16e(hb, hb + nb, d, m[i]->N, K);
        ce = cudaMemcpy((void *)P->blocks, hb, nb, cudaMemcpyHostToDevice);
        if (ce == cudaSuccess) ce = cudaMemcpy((void *)P->esc_row, d->esc_row, ((size_t)m[i]->N + 1) * 4, cudaMemcpyHostToDevice);
        if (ce == cudaSuccess && ne) ce = cudaMemcpy((void *)P->esc, hb + nb, ne, cudaMemcpyHostToDevice);
        p += up16(nb) + up16(((size_t)m[i]->N + 1) * 4) + up16(ne + 1);
        memcpy(&P->exps_lo, d->exps, 4);
        memcpy(&P->exps_hi, d->exps + 4, 4);
        free(hb);
        if (ce != cudaSuccess) st = err_set(e, ST_IO, "cuda: copying coded weights: %s", cudaGetErrorString(ce));
    }
    for (int i = 0; i < n; i++) gpu_rest_free(&rp[i]);
    if (rest[0]) g->stats.rest_s += clock_seconds() - t0;
    if (st) return st;
    *out = (DevMat){DT_BF16E, N, K, c->part[0].blocks, NULL, c};
    g->coded = 1;
    return ST_OK;
}

/* Rows of m into dst on the device as type `as` (m's own type, or F32 for a
 * type the kernels do not read: widened on the host a piece at a time). */
static int put_rows(char *dst, const Mat *m, DType as, Err *e) {
    if (as == DT_Q8_0) return ST_OK;   /* upload_stack packs these */
    if (as == m->type) {
        CK(cudaMemcpy(dst, m->data, dtype_row_bytes(m->type, m->K) * m->N, cudaMemcpyHostToDevice));
        return ST_OK;
    }
    size_t out_row = (size_t)m->K * 4;
    int rows = (int)((1u << 22) / out_row) + 1;
    float *buf = (float *)malloc(out_row * rows);
    if (!buf) return err_set(e, ST_NOMEM, "gpu: cannot allocate %zu bytes to widen weights", out_row * rows);
    for (int r0 = 0; r0 < m->N; r0 += rows) {
        int n = m->N - r0 < rows ? m->N - r0 : rows;
        for (int r = 0; r < n; r++)
            dequantize_mat_row(buf + (size_t)r * m->K, m, r0 + r);   /* any type, BF16E included */
        cudaError_t ce = cudaMemcpy(dst + (size_t)r0 * out_row, buf, out_row * n, cudaMemcpyHostToDevice);
        if (ce != cudaSuccess) {
            free(buf);
            return err_set(e, ST_IO, "cuda: copying weights: %s", cudaGetErrorString(ce));
        }
    }
    free(buf);
    return ST_OK;
}

/* Q8_0 rows of m into the two planes (gpu_pack_q8_0), a piece at a time. */
static int put_q8_0(char *qs, uint16_t *d, const Mat *m, Err *e) {
    int K = m->K, rows = (int)((1u << 22) / K) + 1;
    size_t in_row = dtype_row_bytes(DT_Q8_0, K);
    int8_t *bq = (int8_t *)malloc((size_t)rows * K);
    uint16_t *bd = (uint16_t *)malloc((size_t)rows * (K / 32) * 2);
    int st = bq && bd ? ST_OK : err_set(e, ST_NOMEM, "gpu: cannot allocate a buffer to pack Q8_0 weights");
    for (int r0 = 0; !st && r0 < m->N; r0 += rows) {
        int n = m->N - r0 < rows ? m->N - r0 : rows;
        gpu_pack_q8_0(bq, bd, (const char *)m->data + (size_t)r0 * in_row, n, K);
        cudaError_t ce = cudaMemcpy(qs + (size_t)r0 * K, bq, (size_t)n * K, cudaMemcpyHostToDevice);
        if (ce == cudaSuccess)
            ce = cudaMemcpy(d + (size_t)r0 * (K / 32), bd, (size_t)n * (K / 32) * 2, cudaMemcpyHostToDevice);
        if (ce != cudaSuccess) st = err_set(e, ST_IO, "cuda: copying weights: %s", cudaGetErrorString(ce));
    }
    free(bq);
    free(bd);
    return st;
}

/* Matrices m[0..n) (same K) stacked into one device matrix, in the type
 * they share, or all widened to F32 when they do not share one the kernels read. */
static int upload_stack(GpuModel *g, void **slot, DevMat *out, DevCoded *c, const Mat *const *m, int n, Err *e) {
    DType as = m[0]->type;
    int N = 0, coded = 0, resting = 0;
    const GpuAtRest *rest[3] = {NULL, NULL, NULL};
    for (int i = 0; i < n; i++) {
        const GpuAtRest *r = at_rest(g, m[i]);
        if (i < 3) rest[i] = r;
        resting += r != NULL;
        coded += m[i]->type == DT_BF16E || r;
        if (m[i]->type != as || !dev_type(m[i]->type)) as = DT_F32;
        if (m[i]->K != m[0]->K) return err_set(e, ST_UNSUPPORTED, "gpu: stacked matrices differ in width");
        N += m[i]->N;
    }
    if (coded == n && n <= 3) return upload_coded(g, slot, out, c, m, rest, n, e);
    if (resting)   /* its rows are on no host: it cannot be widened there */
        return err_set(e, ST_UNSUPPORTED, "gpu: %d matrices at rest stacked with %d of other types (or more than 3)",
                       resting, n - resting);
    int K = m[0]->K;
    size_t plane = (dev_row_bytes(as, K) * N + 15) / 16 * 16;   /* Q8_0: the scales' plane follows */
    size_t bytes = plane + (as == DT_Q8_0 ? (size_t)N * (K / 32) * 2 : 0);
    char *p;
    cudaError_t ce = cudaMalloc((void **)&p, bytes);
    if (ce != cudaSuccess)
        return err_set(e, ST_NOMEM, "gpu: cannot allocate %zu bytes of weights: %s", bytes, cudaGetErrorString(ce));
    *slot = p;
    g->stats.weight_bytes += bytes;
    size_t at = 0, row0 = 0;
    for (int i = 0; i < n; i++) {
        int st = as == DT_Q8_0 ? put_q8_0(p + row0 * K, (uint16_t *)(p + plane) + row0 * (K / 32), m[i], e)
                               : put_rows(p + at, m[i], as, e);
        if (st) return st;
        at += dev_row_bytes(as, K) * m[i]->N;
        row0 += m[i]->N;
    }
    *out = (DevMat){as, N, K, p, as == DT_Q8_0 ? (const uint16_t *)(p + plane) : NULL, NULL};
    return ST_OK;
}

static int upload_floats(GpuModel *g, void **slot, float **out, const float *h, int n, Err *e) {
    CK(cudaMalloc((void **)out, (size_t)n * 4));
    *slot = *out;
    g->stats.weight_bytes += (size_t)n * 4;
    CK(cudaMemcpy(*out, h, (size_t)n * 4, cudaMemcpyHostToDevice));
    return ST_OK;
}

static void open_blas(GpuModel *g) {
    const char *env = getenv("LLM_CUDA_GEMM_T");
    g->gemm_T = env && *env ? atoi(env) : 64;
    if (g->gemm_T <= 0) return;
    const char *names[] = {"libcublas.so.13", "libcublas.so"};
    for (int i = 0; i < 2 && !g->blas_lib; i++) g->blas_lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!g->blas_lib) return;
    auto create = (decltype(&cublasCreate_v2))dlsym(g->blas_lib, "cublasCreate_v2");
    auto set_stream = (decltype(&cublasSetStream_v2))dlsym(g->blas_lib, "cublasSetStream_v2");
    g->sgemm = (decltype(&cublasSgemm_v2))dlsym(g->blas_lib, "cublasSgemm_v2");
    if (!create || !set_stream || !g->sgemm || create(&g->blas) != CUBLAS_STATUS_SUCCESS) {
        g->blas = NULL;
        return;
    }
    set_stream(g->blas, g->st);
}

extern "C" int gpu_model_create(GpuModel **out, const GpuModelDesc *d, Err *e) {
    *out = NULL;
    int n_dev = 0;
    cudaError_t ce = cudaGetDeviceCount(&n_dev);
    if (ce != cudaSuccess || n_dev == 0)
        return err_set(e, ST_UNSUPPORTED, "--device cuda: no CUDA GPU here (%s)",
                       ce != cudaSuccess ? cudaGetErrorString(ce) : "none found");
    if (d->S > 256 || d->S % 2)
        return err_set(e, ST_UNSUPPORTED, "--device cuda: head size %d (the kernels take even sizes up to 256)", d->S);
    GpuModel *g = (GpuModel *)calloc(1, sizeof *g);
    if (!g) return err_set(e, ST_NOMEM, "gpu: out of host memory");
    g->d = *d;
    g->d.layers = NULL;   /* (told for this call only, as d->rest is: both are reset below) */
    cudaDeviceProp prop;
    int st = ST_OK;
    if ((ce = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess || (ce = cudaStreamCreate(&g->st)) != cudaSuccess) {
        free(g);
        return err_set(e, ST_IO, "cuda: %s", cudaGetErrorString(ce));
    }
    g->sms = prop.multiProcessorCount;
    snprintf(g->stats.device, sizeof g->stats.device, "%.80s, %d SMs", prop.name, g->sms);
    const char *env = getenv("LLM_CUDA_GRAPHS");
    g->use_graphs = !(env && !strcmp(env, "0"));
    gpu_tune_from_env();
    g->stats.pdl = gpu_tune.pdl;
    g->stats.prefetch = gpu_tune.prefetch;
    g->stats.early = gpu_tune.early;
    g->stats.fuse_rope = gpu_tune.fuse_rope;
    g->stats.one_pass = gpu_tune.one_pass;
    g->stats.deep = gpu_tune.deep;
    g->stats.swiglu_epi = gpu_tune.swiglu_epi;
    g->stats.omit = gpu_tune.omit;
    g->stats.l2_ahead = gpu_tune.l2_ahead;
    g->stats.flags = gpu_tune.flags;
    open_blas(g);

    g->layers = (DevLayer *)calloc(d->L, sizeof *g->layers);
    g->lalloc = (void **)calloc((size_t)d->L * 6, sizeof(void *));
    if (!g->layers || !g->lalloc) st = err_set(e, ST_NOMEM, "gpu: out of host memory");
    for (int l = 0; !st && l < d->L; l++) {
        const GpuLayer *w = &d->layers[l];
        DevLayer *o = &g->layers[l];
        void **a = g->lalloc + (size_t)l * 6;
        const Mat *qkv[] = {&w->wq, &w->wk, &w->wv}, *gu[] = {&w->w_gate, &w->w_up};
        const Mat *wo[] = {&w->wo}, *down[] = {&w->w_down};
        if (!st) st = upload_stack(g, &a[0], &o->qkv, &o->cqkv, qkv, 3, e);
        if (!st) st = upload_stack(g, &a[1], &o->wo, &o->cwo, wo, 1, e);
        if (!st) st = upload_stack(g, &a[2], &o->gu, &o->cgu, gu, 2, e);
        if (!st) st = upload_stack(g, &a[3], &o->down, &o->cdown, down, 1, e);
        if (!st) st = upload_floats(g, &a[4], &o->attn_norm, w->attn_norm, d->D, e);
        if (!st) st = upload_floats(g, &a[5], &o->ffn_norm, w->ffn_norm, d->D, e);
    }
    const Mat *em[] = {&d->tok_embd}, *om[] = {&d->output};
    if (!st) st = upload_stack(g, &g->alloc[g->n_alloc++], &g->embd, &g->cembd, em, 1, e);
    if (!st) {
        if (d->output.data == d->tok_embd.data && d->output.type == d->tok_embd.type)
            g->output = g->embd;   /* a classifier shared with the embedding (llama2.c) */
        else st = upload_stack(g, &g->alloc[g->n_alloc++], &g->output, &g->coutput, om, 1, e);
    }
    g->stats.coded = g->coded;
    if (!st) st = upload_floats(g, &g->alloc[g->n_alloc++], &g->out_norm, d->out_norm, d->D, e);
    g->d.rest = NULL;
    g->d.n_rest = 0;
    if (st) {
        gpu_model_free(g);
        return st;
    }
    *out = g;
    return ST_OK;
}

/* ------------------------------------------------------------ buffers */

static void drop_graphs(GpuModel *g) {
    for (int i = 0; i < MAX_GRAPHS; i++) {
        if (g->graphs[i].exec) cudaGraphExecDestroy(g->graphs[i].exec);
        memset(&g->graphs[i], 0, sizeof g->graphs[i]);
    }
}

static void free_acts(GpuModel *g) {
    float **f[] = {&g->x, &g->qkv, &g->att, &g->gu, &g->logits, &g->part, &g->ascratch, &g->wscratch};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        cudaFree(*f[i]);
        *f[i] = NULL;
    }
    cudaFree(g->meta);
    cudaFreeHost(g->meta_h);
    g->meta = g->meta_h = NULL;
    g->cap_T = g->cap_nl = 0;
}

/* Activations for T rows and nl logit rows (grown, never shrunk). */
static int ensure_acts(GpuModel *g, int T, int nl, int tstride, const float *rope_cs, Err *e) {
    const GpuModelDesc *d = &g->d;
    if (!g->rope_cs) {
        size_t n = (size_t)d->P * (d->n_rot / 2) * 2;
        CK(cudaMalloc((void **)&g->rope_cs, n * 4));
        CK(cudaMemcpy(g->rope_cs, rope_cs, n * 4, cudaMemcpyHostToDevice));
        CK(cudaMalloc((void **)&g->flags, (size_t)d->L * (d->Hkv + 1) * 4));
    }
    if (T <= g->cap_T && nl <= g->cap_nl && tstride == g->tstride) return ST_OK;
    drop_graphs(g);
    free_acts(g);
    size_t qd = (size_t)d->H * d->S, kvd = (size_t)d->Hkv * d->S, D = d->D, F = d->F;
    size_t Kmax = D > F ? D : F;
    size_t wmax = 0, lmax = 0;   /* the largest matrix cuBLAS may be handed (every layer has layer 0's shapes) */
    const DevLayer *w = &g->layers[0];
    const DevMat *m[] = {&w->qkv, &w->wo, &w->gu, &w->down, &g->output};
    for (int i = 0; i < 5; i++) {
        size_t n = (size_t)m[i]->N * m[i]->K;
        wmax = n > wmax ? n : wmax;
        lmax = i < 4 && n > lmax ? n : lmax;
    }
    if (g->coded) {   /* a layer's largest matrix, decoded: once as F32 (cuBLAS), or twice as BF16 */
        g->piece_floats = lmax;
        wmax = lmax;
    }
    g->stats.scratch_bytes = g->blas || g->coded ? wmax * 4 : 0;
    struct { float **p; size_t n; } b[] = {
        {&g->x, T * D}, {&g->qkv, T * (qd + 2 * kvd)}, {&g->att, T * qd}, {&g->gu, T * 2 * F},
        {&g->logits, (size_t)nl * d->V}, {&g->part, gpu_attention_part_floats(T, d->H, d->S, MAX_SPLIT) + 1},
        {&g->ascratch, T * (Kmax + 8) + 16}, {&g->wscratch, g->blas || g->coded ? wmax : 1}};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) {
        cudaError_t ce = cudaMalloc((void **)b[i].p, b[i].n * 4);
        if (ce != cudaSuccess)
            return err_set(e, ST_NOMEM, "gpu: cannot allocate %zu bytes of activations: %s", b[i].n * 4,
                           cudaGetErrorString(ce));
    }
    g->meta_ints = (size_t)4 * T + nl + (size_t)T * tstride;
    CK(cudaMalloc((void **)&g->meta, g->meta_ints * 4));
    CK(cudaMallocHost((void **)&g->meta_h, g->meta_ints * 4));
    g->cap_T = T;
    g->cap_nl = nl;
    g->tstride = tstride;
    return ST_OK;
}

/* The KV pool for this batch's host pool: a new pool, a new GPU pool. */
static int ensure_pool(GpuModel *g, const GpuBatch *b, Err *e) {
    if (g->kc && g->pool_id == b->pool_id && g->NB == b->NB && g->BS == b->BS) return ST_OK;
    drop_graphs(g);
    cudaFree(g->kc);
    cudaFree(g->vc);
    g->kc = g->vc = NULL;
    const GpuModelDesc *d = &g->d;
    size_t n = (size_t)d->L * b->NB * b->BS * d->Hkv * d->S;
    cudaError_t ce = cudaMalloc((void **)&g->kc, n * 4);
    if (ce == cudaSuccess) ce = cudaMalloc((void **)&g->vc, n * 4);
    if (ce != cudaSuccess)
        return err_set(e, ST_NOMEM, "gpu: cannot allocate a KV pool of %d blocks of %d rows (%zu bytes): %s", b->NB,
                       b->BS, 2 * n * 4, cudaGetErrorString(ce));
    CK(cudaMemset(g->kc, 0, n * 4));
    CK(cudaMemset(g->vc, 0, n * 4));
    g->pool_id = b->pool_id;
    g->NB = b->NB;
    g->BS = b->BS;
    g->stats.kv_bytes = 2 * n * 4;
    return ST_OK;
}

/* ------------------------------------------------------------ one step */

/* One product: the kernels, or cuBLAS from gemm_T rows on. Q8_0 always
 * takes the kernels: they round the activations to int8 blocks as the CPU
 * does, at any T, where an sgemm would keep them in float. */
static int on_kernels(const GpuModel *g, const DevMat *W, int T) {
    return !g->blas || T < g->gemm_T || W->type == DT_Q8_0;
}

static int product_on(GpuModel *g, const DevMat *W, MvArgs a);

/* Rows r0 .. r0 + n - 1 of a BF16E stack decoded into dst, a launch per
 * part they cross. */
static int decode_rows(GpuModel *g, const DevMat *W, int r0, int n, DType as, void *dst, int early) {
    int k = 0, at = 0;
    for (int i = 0; i < W->coded->n_parts; i++) {
        const DevBf16e *P = &W->coded->part[i];
        int lo = r0 > at ? r0 : at, hi = r0 + n < at + P->N ? r0 + n : at + P->N;
        if (lo < hi) {
            char *d = (char *)dst + (size_t)(lo - r0) * W->K * (as == DT_F32 ? 4 : 2);
            k += gpu_bf16e_decode(d, as, P, W->K, lo - at, hi - lo, NULL, early, g->st);
        }
        at += P->N;
    }
    return k;
}

/* Rows of a BF16E matrix the scratch holds at once (a layer's largest
 * matrix: only the classifier is cut in pieces, so q|k|v, whose epilogue
 * numbers its rows, is always whole). */
static int piece_rows(const GpuModel *g, const DevMat *W) {
    size_t fit = g->piece_floats / W->K;
    return fit >= (size_t)W->N ? W->N : (int)fit;
}

/* A BF16E product: its rows decoded into the scratch (BF16 for the
 * kernels, F32 for cuBLAS), a piece at a time, each piece then multiplied as
 * a BF16 (or F32) matrix: the bits the BF16 file gives. For the kernels the
 * scratch is two buffers: while a piece is multiplied out of one, the next
 * piece, or the next product's matrix (`next`, of `next_T` rows), is
 * decoded into the other by an early gpu_bf16e_decode, which runs beside
 * the product (g->pend remembers it). */
static int product_coded(GpuModel *g, const DevMat *W, MvArgs a, const DevMat *next, int next_T) {
    bool kern = on_kernels(g, W, a.T);
    DType as = kern ? DT_BF16 : DT_F32;
    size_t half = g->piece_floats / 2;   /* floats: a buffer of piece_floats BF16 values */
    int rows = piece_rows(g, W), k = 0;
    for (int r0 = 0; r0 < W->N; r0 += rows) {
        int n = W->N - r0 < rows ? W->N - r0 : rows;
        float *buf;
        if (kern && g->pend == W && g->pend_r0 == r0) {
            buf = g->wscratch + g->pend_buf * half;   /* decoded already, beside the product before */
            g->cur_buf = g->pend_buf;
        } else {
            if (kern) g->cur_buf ^= 1;
            buf = kern ? g->wscratch + g->cur_buf * half : g->wscratch;
            k += decode_rows(g, W, r0, n, as, buf, 0);
        }
        g->pend = NULL;
        DevMat piece = {as, n, W->K, buf, NULL, NULL};
        MvArgs b = a;
        b.out = a.out + r0;
        b.late = 1;   /* the decode writes it: read it after the wait */
        k += product_on(g, &piece, b);
        /* the next piece of this matrix, or the next matrix's first, into the other buffer */
        const DevMat *nw = r0 + rows < W->N ? W : next;
        int nr0 = nw == W ? r0 + rows : 0;
        if (!gpu_tune.overlap || !kern || !nw || nw->type != DT_BF16E || !on_kernels(g, nw, nw == W ? a.T : next_T))
            continue;
        int nn = nw->N - nr0 < piece_rows(g, nw) ? nw->N - nr0 : piece_rows(g, nw);
        g->pend = nw;
        g->pend_r0 = nr0;
        g->pend_buf = g->cur_buf ^ 1;
        k += decode_rows(g, nw, nr0, nn, DT_BF16, g->wscratch + g->pend_buf * half, 1);
    }
    return k;
}

/* next, next_T: the product after this one in the step, and its rows
 * (where W is BF16E, its matrix is decoded while this one runs). */
static int product(GpuModel *g, const DevMat *W, MvArgs a, const DevMat *next, int next_T) {
    return W->type == DT_BF16E ? product_coded(g, W, a, next, next_T) : product_on(g, W, a);
}

static int product_on(GpuModel *g, const DevMat *W, MvArgs a) {
    if (on_kernels(g, W, a.T)) {
        if (a.pre == PRE_READY) return gpu_matvec(W, &a, g->st);   /* SwiGLU from the gate|up epilogue */
        bool apart = a.pre == PRE_SWIGLU && gpu_tune.swiglu_apart;
        if (a.T < gpu_tune.ready_t && !apart) return gpu_matvec(W, &a, g->st);
        /* the prologue once for every row, not once per block of rows */
        int k = apart ? gpu_swiglu_apart(g->ascratch, W, &a, g->st) : gpu_prepare(g->ascratch, W, &a, g->st);
        MvArgs r = a;
        r.x = g->ascratch;
        r.ldx = 0;
        r.rows = NULL;
        r.pre = PRE_READY;
        r.norm = NULL;
        r.x2 = NULL;
        return k + gpu_matvec(W, &r, g->st);
    }
    int k = gpu_prologue(g->ascratch, W, &a, g->st);
    const float *w = (const float *)W->w;
    if (W->type != DT_F32) {   /* (decoded BF16E arrives as F32 already) */
        k += gpu_dequantize(g->wscratch, W, g->st);
        w = g->wscratch;
    }
    /* row-major out (T, N) = act (T, K) W^T is column-major out^T = W act^T */
    float one = 1.0f, beta = a.accumulate ? 1.0f : 0.0f;
    g->sgemm(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, W->N, a.T, W->K, &one, w, W->K, g->ascratch, W->K, &beta, a.out, a.ldo);
    g->stats.gemm_calls++;
    return k + 1;
}

/* SwiGLU in the gate|up product's epilogue (MvArgs.swiglu_out), as floats
 * in gpu_prepare's layout (F a multiple of 8, so its rows need no padding),
 * which the down product copies (PRE_READY): in a step of one row, where
 * the kernel it saves is 8% of a decode step on the H200 (batched steps
 * keep their tile kernels as measured), and where both products run on
 * the kernels with float weights. Not Q8_0: its down product wants h
 * rounded in blocks of 32 values, which no group of gate|up rows holds
 * (rounding it in each block of the down product's prologue instead was
 * slower than gpu_swiglu_apart: notes/cuda.md). Not BF16E: decoded in
 * pieces of rows, which would part gate from up. */
static bool swiglu_in_epilogue(const GpuModel *g, const DevLayer *w, int T) {
    if (!gpu_tune.swiglu_epi || T != 1 || g->d.F % 8) return false;
    const DevMat *m[2] = {&w->gu, &w->down};
    for (int i = 0; i < 2; i++)
        if ((m[i]->type != DT_F32 && m[i]->type != DT_F16 && m[i]->type != DT_BF16) || !on_kernels(g, m[i], T))
            return false;
    return true;
}

/* What attention asks into L2 for the products after it (LLM_CUDA_L2_AHEAD
 * MB): wo's weights, then the first rows of gate|up, where they run on the
 * kernels from the weights as uploaded (not BF16E, decoded into scratch). */
static L2Ahead l2_ahead_of(const GpuModel *g, const DevLayer *w, int T) {
    L2Ahead ah = {{NULL, NULL}, {0, 0}};
    size_t budget = (size_t)gpu_tune.l2_ahead << 20;
    const DevMat *m[2] = {&w->wo, &w->gu};
    for (int i = 0; i < 2 && budget; i++) {
        if (m[i]->type == DT_BF16E || !on_kernels(g, m[i], T)) break;
        size_t n = (size_t)m[i]->N * dev_row_bytes(m[i]->type, m[i]->K);
        ah.p[i] = m[i]->w;
        ah.bytes[i] = n < budget ? n : budget;
        budget -= ah.bytes[i];
    }
    return ah;
}

/* Every kernel of the step for T rows and nl logit rows; returns their count. */
static int record(GpuModel *g, int T, int nl, int nsplit) {
    g->pend = NULL;   /* no decode crosses steps */
    const GpuModelDesc *d = &g->d;
    int D = d->D, F = d->F, qd = d->H * d->S, kvd = d->Hkv * d->S, k = 0;
    const int *token = g->meta, *pos = token + g->cap_T, *seq = pos + g->cap_T, *slot = seq + g->cap_T;
    const int *logit_row = slot + g->cap_T, *tables = logit_row + g->cap_nl;
    size_t layer = (size_t)g->NB * g->BS * kvd;
    /* LLM_CUDA_FLAGS: q|k|v, attention and wo hand over through counters,
     * zeroed by the embedding's kernel, where the step is one row,
     * attention in one piece, the weights not coded (decoded in pieces of
     * rows; the embedding then is a decode); each layer also needs both
     * products on the kernels, RoPE in q|k|v's epilogue (layer_flags) */
    bool flags = gpu_tune.flags && T == 1 && nsplit == 1 && !g->coded && g->embd.type != DT_BF16E && !gpu_tune.omit;
    int nflags = flags ? d->L * (d->Hkv + 1) : 0;
    if (g->embd.type == DT_BF16E) k += gpu_bf16e_decode(g->x, DT_F32, &g->embd.coded->part[0], D, 0, T, token, 0, g->st);
    else k += gpu_embed(g->x, &g->embd, token, T, g->flags, nflags, g->st);
    for (int l = 0; l < d->L; l++) {
        const DevLayer *w = &g->layers[l];
        AttnArgs at = {g->qkv, qd + 2 * kvd, g->kc + l * layer, g->vc + l * layer, pos, slot, seq, tables,
                       g->tstride, g->BS, g->rope_cs, d->H, d->Hkv, d->S, d->n_rot, T, NULL, NULL};
        MvArgs a = {g->qkv, qd + 2 * kvd, 0, g->x, D, NULL, PRE_NORM, w->attn_norm, d->eps, NULL, T, 0, {}, 0, 0, NULL, NULL, 0};
        /* RoPE and the K/V store in the product's epilogue where the kernels
         * run it; after cuBLAS, their own kernel */
        a.use_rope = gpu_tune.fuse_rope && on_kernels(g, &w->qkv, T);
        a.rope = (RopeKv){at.kc, at.vc, pos, slot, g->rope_cs, d->H, d->Hkv, d->S, d->n_rot};
        int *rows_done = g->flags + (size_t)l * (d->Hkv + 1), *heads_done = rows_done + d->Hkv;
        bool layer_flags = flags && a.use_rope && on_kernels(g, &w->wo, T);   /* layers' types may differ */
        if (layer_flags) {
            a.signal = rows_done;
            at.wait_on = rows_done;
            at.signal = heads_done;
        }
        int omit = gpu_tune.omit;   /* measurement only (GpuTune) */
        if (!(omit & 1)) k += product(g, &w->qkv, a, &w->wo, T);
        if (!a.use_rope && !(omit & 1)) k += gpu_rope_store(&at, g->st);
        L2Ahead ah = l2_ahead_of(g, w, T);
        if (!(omit & 2)) k += gpu_attention(g->att, &at, nsplit, g->part, &ah, g->st);
        a = (MvArgs){g->x, D, 1, g->att, qd, NULL, PRE_NONE, NULL, 0.0f, NULL, T, 0, {}, 0, 0, NULL,
                     layer_flags ? heads_done : NULL, d->H};
        if (!(omit & 4)) k += product(g, &w->wo, a, &w->gu, T);
        /* gu = gate|up, or, with SwiGLU in its epilogue, h = swiglu(gate, up)
         * in gpu_prepare's layout (F floats a row), which down copies */
        bool epi = swiglu_in_epilogue(g, w, T);
        a = (MvArgs){g->gu, epi ? F : 2 * F, 0, g->x, D, NULL, PRE_NORM, w->ffn_norm, d->eps, NULL, T, 0, {}, 0, epi, NULL, NULL, 0};
        if (!(omit & 8)) k += product(g, &w->gu, a, &w->down, T);
        a = (MvArgs){g->x, D, 1, g->gu, 2 * F, NULL, PRE_SWIGLU, NULL, 0.0f, g->gu + F, T, 0, {}, 0, 0, NULL, NULL, 0};
        if (epi) a = (MvArgs){g->x, D, 1, g->gu, 0, NULL, PRE_READY, NULL, 0.0f, NULL, T, 0, {}, 0, 0, NULL, NULL, 0};
        if (omit & 16) continue;
        if (l + 1 < d->L) k += product(g, &w->down, a, &g->layers[l + 1].qkv, T);
        else k += product(g, &w->down, a, &g->output, nl);
    }
    MvArgs a = {g->logits, d->V, 0, g->x, D, logit_row, PRE_NORM, g->out_norm, d->eps, NULL, nl, 0, {}, 0, 0, NULL, NULL, 0};
    if (!(gpu_tune.omit & 32)) k += product(g, &g->output, a, NULL, 0);
    return k;
}

/* Splits of attention: enough thread blocks for two per SM, but no split
 * shorter than gpu_tune.split_min chunks of 32 positions (default 4: a
 * shorter split gains little against the merge's extra kernel).
 * maxpos: the batch's last position. */
static int choose_split(const GpuModel *g, int T, int maxpos) {
    int blocks = T * g->d.H, s = (2 * g->sms + blocks - 1) / blocks, chunks = maxpos / 32 + 1;
    if (s > chunks / gpu_tune.split_min) s = chunks / gpu_tune.split_min;
    return s < 1 ? 1 : s > MAX_SPLIT ? MAX_SPLIT : s;
}

static GraphSlot *find_graph(GpuModel *g, int T, int nl, int nsplit) {
    GraphSlot *free_slot = NULL, *oldest = &g->graphs[0];
    for (int i = 0; i < MAX_GRAPHS; i++) {
        GraphSlot *s = &g->graphs[i];
        if (s->T == T && s->nl == nl && s->nsplit == nsplit) return s;
        if (!s->T && !free_slot) free_slot = s;
        if (s->used < oldest->used) oldest = s;
    }
    GraphSlot *s = free_slot ? free_slot : oldest;
    if (s->exec) cudaGraphExecDestroy(s->exec);
    *s = (GraphSlot){T, nl, nsplit, 0, 0, NULL, 0};
    return s;
}

/* The step's kernels: from a graph when this shape was seen before (the
 * second sighting captures it), else launched one by one. */
static int run_step(GpuModel *g, int T, int nl, int maxpos, Err *e) {
    int nsplit = choose_split(g, T, maxpos);
    if (!g->use_graphs || (g->blas && T >= g->gemm_T)) {
        g->stats.last_kernels = record(g, T, nl, nsplit);
        return ST_OK;
    }
    GraphSlot *s = find_graph(g, T, nl, nsplit);
    s->used = g->stats.steps;
    if (!s->exec && s->seen++ >= 1) {
        cudaGraph_t graph;
        CK(cudaStreamBeginCapture(g->st, cudaStreamCaptureModeThreadLocal));
        s->kernels = record(g, T, nl, nsplit);
        CK(cudaStreamEndCapture(g->st, &graph));
        cudaError_t ce = cudaGraphInstantiate(&s->exec, graph, 0);
        cudaGraphDestroy(graph);
        if (ce != cudaSuccess) return err_set(e, ST_IO, "cuda: graph instantiate: %s", cudaGetErrorString(ce));
    }
    if (s->exec) {
        CK(cudaGraphLaunch(s->exec, g->st));
        g->stats.graph_steps++;
        g->stats.last_kernels = s->kernels;
    } else {
        g->stats.last_kernels = record(g, T, nl, nsplit);
    }
    return ST_OK;
}

extern "C" int gpu_forward(GpuModel *g, const GpuBatch *b, float *logits, Err *e) {
    const GpuModelDesc *d = &g->d;
    int T = b->T, nl = b->n_logits, tstride = (d->P + b->BS - 1) / b->BS;
    int st = ensure_pool(g, b, e);
    if (!st) st = ensure_acts(g, b->max_T > T ? b->max_T : T, b->max_logits > nl ? b->max_logits : nl, tstride,
                              b->rope_cs, e);
    if (st) return st;
    /* copy-on-write copies first: a block shared by a fork, about to be written */
    size_t kvd = (size_t)d->Hkv * d->S, blk = (size_t)b->BS * kvd;
    for (int i = 0; i < b->n_copies; i++)
        for (int l = 0; l < d->L; l++) {
            const int *c = b->copies + 3 * i;
            size_t src = ((size_t)l * g->NB + c[0]) * blk, dst = ((size_t)l * g->NB + c[1]) * blk;
            size_t n = (size_t)c[2] * kvd * 4;
            CK(cudaMemcpyAsync(g->kc + dst, g->kc + src, n, cudaMemcpyDeviceToDevice, g->st));
            CK(cudaMemcpyAsync(g->vc + dst, g->vc + src, n, cudaMemcpyDeviceToDevice, g->st));
        }
    /* the batch, in one upload */
    int *m = g->meta_h, cap = g->cap_T, n_seqs = 0, maxpos = 0;
    memcpy(m, b->token, T * 4);
    memcpy(m + cap, b->pos, T * 4);
    memcpy(m + 2 * cap, b->seq, T * 4);
    memcpy(m + 3 * cap, b->slot, T * 4);
    memcpy(m + 4 * cap, b->logit_row, nl * 4);
    int *tables = m + 4 * cap + g->cap_nl;
    for (int t = 0; t < T; t++) {
        n_seqs = b->seq[t] + 1 > n_seqs ? b->seq[t] + 1 : n_seqs;
        maxpos = b->pos[t] > maxpos ? b->pos[t] : maxpos;
    }
    for (int s = 0; s < n_seqs; s++) {
        int last = -1;
        for (int t = 0; t < T; t++)
            if (b->seq[t] == s && b->pos[t] > last) last = b->pos[t];
        if (last >= 0) memcpy(tables + (size_t)s * tstride, b->table[s], (size_t)(last / b->BS + 1) * 4);
    }
    size_t used = 4 * (size_t)cap + g->cap_nl + (size_t)n_seqs * tstride;
    CK(cudaMemcpyAsync(g->meta, m, used * 4, cudaMemcpyHostToDevice, g->st));
    st = run_step(g, T, nl, maxpos, e);
    if (st) return st;
    CK(cudaGetLastError());
    CK(cudaMemcpyAsync(logits, g->logits, (size_t)nl * d->V * 4, cudaMemcpyDeviceToHost, g->st));
    CK(cudaStreamSynchronize(g->st));
    g->stats.steps++;
    g->stats.kernels += g->stats.last_kernels;
    return ST_OK;
}

extern "C" GpuStats gpu_stats(const GpuModel *g) {
    GpuStats s;
    memset(&s, 0, sizeof s);
    return g ? g->stats : s;
}

extern "C" void gpu_model_free(GpuModel *g) {
    if (!g) return;
    cudaStreamSynchronize(g->st);
    drop_graphs(g);
    free_acts(g);
    cudaFree(g->rope_cs);
    cudaFree(g->flags);
    cudaFree(g->kc);
    cudaFree(g->vc);
    for (int i = 0; i < g->n_alloc; i++) cudaFree(g->alloc[i]);
    if (g->lalloc)
        for (int i = 0; i < g->d.L * 6; i++) cudaFree(g->lalloc[i]);
    free(g->lalloc);
    free(g->layers);
    if (g->blas) {
        auto destroy = (decltype(&cublasDestroy_v2))dlsym(g->blas_lib, "cublasDestroy_v2");
        if (destroy) destroy(g->blas);
    }
    if (g->blas_lib) dlclose(g->blas_lib);
    cudaStreamDestroy(g->st);
    free(g);
}
