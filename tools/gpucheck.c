/* gpucheck.c - the forward pass on the GPU against the same model on the CPU,
 * and its speed against the GPU's memory bandwidth.
 *
 *   gpucheck --model FILE [--prompt TEXT] [--steps 64] [--limit X]
 *   gpucheck --bench FILE [--prompt-len 512] [--decode 128] [--runs 5]
 *
 * --model: both devices read the same prompt (model_forward, all rows of
 * logits: the prefill), then --steps greedy tokens chosen by the CPU are fed
 * to both (teacher forcing, so one near tie cannot make the rest of the
 * comparison meaningless). Every row: max |gpu - cpu| / max |cpu|, and
 * whether the argmax agrees. A disagreement is a certified near tie when the
 * CPU's own margin between its choice and the GPU's is no larger than the
 * largest logit difference between the two devices on that row: then the
 * rounding of the sums decides, and either answer is the model's. The CPU
 * runs its fast path, except for the 4, 5 and 6-bit formats, where the GPU
 * computes on weights widened to float as the plain path does (ops.h), so
 * that path is the one compared. Exit 1 when an error passes --limit (by
 * default 1e-4; 2e-2 for Q8_0, whose activations are rounded to int8 on
 * both sides, so that a value two orders of summation put an ulp apart can
 * land on neighbouring integers: the CPU's own plain and AVX-512 paths are
 * held to the same 2e-2 in tests/test_model.c) or a disagreement is not a
 * near tie.
 *
 * --bench: the GPU's ceilings (gpu_bandwidth: device-to-device copy and the
 * read kernel, medians of 10 over 1 GiB), then decode of one sequence
 * (an 8-token prompt, then --decode greedy steps of T = 1; tok/s, the
 * median and range of --runs runs) with the bytes of weights one token
 * reads and that rate as GB/s and as a share of the ceiling; prefill of
 * --prompt-len tokens (one model_forward call); kernels per decoded token.
 *
 * --low-mem 1 loads both with --low-mem: a compressed file's BF16 matrices
 * on the fast tier (BF16E), which the GPU keeps coded and decodes a product
 * at a time (notes/cuda.md, "Coded weights"). */
#include "base/clock.h"
#include "base/err.h"
#include "kernels/gpu.h"
#include "base/mem.h"
#include "model.h"
#include "kernels/ops.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_RUNS = 15, DECODE_PROMPT = 8 };

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

typedef struct {
    long rows, disagree, near_ties;
    double max_err;
} Tally;

/* Compare one row of logits; prints the row when the argmax differs. */
static void compare_row(const float *c, const float *g, int V, int pos, Tally *t) {
    double num = 0.0, den = 0.0;
    for (int i = 0; i < V; i++) {
        double d = fabs((double)g[i] - c[i]);
        num = d > num || d != d ? d : num;
        den = fabs(c[i]) > den ? fabs(c[i]) : den;
    }
    double err = den > 0 ? num / den : num;
    if (err > t->max_err || err != err) t->max_err = err;
    t->rows++;
    int ac = argmax(c, V), ag = argmax(g, V);
    if (ac == ag) return;
    t->disagree++;
    double margin = (double)c[ac] - c[ag];
    int tie = margin <= num;
    t->near_ties += tie;
    printf("  position %d: cpu argmax %d, gpu argmax %d; cpu margin %.3g, largest difference %.3g: %s\n", pos, ac, ag,
           margin, num, tie ? "a near tie" : "NOT a near tie");
}

static int low_mem;   /* --low-mem 1 */

static int load(Model *m, const char *path, Device dev, Err *e) {
    ModelOpts o = {.device = dev, .low_mem = low_mem};
    return model_load_opts(m, path, NULL, &o, e);
}

static int check_model(const char *path, const char *prompt, int steps, double limit, Err *e) {
    Model mc, mg;
    RunState sc, sg;
    int st = load(&mc, path, DEVICE_CPU, e);
    if (st) return st;
    if ((st = load(&mg, path, DEVICE_CUDA, e))) {
        model_free(&mc);
        return st;
    }
    int P = mc.cfg.seq_len, V = mc.cfg.vocab_size;
    int *ids = mem_alloc((size_t)P * sizeof(int)), n = 0;
    if (!ids) st = err_set(e, ST_NOMEM, "out of memory");
    if (!st) n = tok_encode(mc.tok, prompt, 1, ids, P, e);
    if (!st && n < 0) st = ST_ARG;
    if (!st && n == 0) st = err_set(e, ST_ARG, "the prompt gave no tokens");
    if (!st && n + steps > P) steps = P - n;
    if (!st) st = runstate_init(&sc, &mc, P, e);
    if (!st && (st = runstate_init(&sg, &mg, P, e))) runstate_free(&sc);
    if (st) {
        mem_free(ids);
        model_free(&mc);
        model_free(&mg);
        return st;
    }
    if (limit <= 0) limit = mc.wtype == DT_Q8_0 ? 2e-2 : 1e-4;
    if (dtype_is_small_quant(mc.wtype)) ops_set_isa(OPS_PLAIN);
    printf("%s: %s, %d prompt tokens, %d steps; cpu path %s; limit %.0e\n", path, dtype_name(mc.wtype), n, steps,
           ops_isa_name(ops_isa()), limit);
    Tally t = {0};
    const float *lc = model_forward(&mc, &sc, ids, n, 0, 1);
    const float *lg = model_forward(&mg, &sg, ids, n, 0, 1);
    for (int r = 0; r < n; r++) compare_row(lc + (size_t)r * V, lg + (size_t)r * V, V, r, &t);
    int next = argmax(lc + (size_t)(n - 1) * V, V);
    for (int i = 0; i < steps; i++) {
        lc = model_forward(&mc, &sc, &next, 1, n + i, 0);
        lg = model_forward(&mg, &sg, &next, 1, n + i, 0);
        compare_row(lc, lg, V, n + i, &t);
        next = argmax(lc, V);
    }
    if (sg.err.msg[0]) printf("  gpu error: %s\n", sg.err.msg);
    GpuStats gs = gpu_stats(mg.gpu);
    printf("  gpu: %s; %ld steps, %ld from CUDA graphs, %ld cuBLAS products, %d kernels in the last\n", gs.device,
           gs.steps, gs.graph_steps, gs.gemm_calls, gs.last_kernels);
    int ok = t.max_err <= limit && t.disagree == t.near_ties;
    printf("  %ld rows: max error %.2e; argmax differs on %ld (%ld certified near ties): %s\n", t.rows, t.max_err,
           t.disagree, t.near_ties, ok ? "ok" : "FAIL");
    if (!ok) st = err_set(e, ST_FORMAT, "%s: the GPU's logits are not the CPU's", path);
    runstate_free(&sc);
    runstate_free(&sg);
    mem_free(ids);
    model_free(&mc);
    model_free(&mg);
    return st;
}

/* ------------------------------------------------------------ bench */

/* Bytes of weights on the GPU that one decode step reads (the GPU holds the
 * 4, 5 and 6-bit formats as F32). */
static double dev_bytes(const Mat *w) {
    if (w->type == DT_BF16E)   /* coded: blocks, row index and escapes */
        return (double)dtype_row_bytes(w->type, w->K) * w->N + 4.0 * (w->N + 1) +
               ((const Bf16eData *)w->data)->esc_row[w->N];
    int dev = w->type == DT_F32 || w->type == DT_F16 || w->type == DT_BF16 || w->type == DT_Q8_0;
    return dev ? (double)dtype_row_bytes(w->type, w->K) * w->N : 4.0 * w->N * w->K;
}

static double bytes_per_token(const Model *m) {
    int D = m->cfg.dim;
    double b = 0.0;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const Layer *y = &m->layers[l];
        b += dev_bytes(&y->wq) + dev_bytes(&y->wk) + dev_bytes(&y->wv) + dev_bytes(&y->wo) + dev_bytes(&y->w_gate) +
             dev_bytes(&y->w_up) + dev_bytes(&y->w_down) + 2.0 * D * 4;
    }
    return b + D * 4.0 + dev_bytes(&m->output) + dev_bytes(&m->tok_embd) / m->cfg.vocab_size;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int bench(const char *path, int prompt_len, int decode, int runs, Err *e) {
    GpuBandwidth bw;
    int st = gpu_bandwidth(&bw, (size_t)1 << 30, 10, e);
    if (st) return st;
    double ceiling = bw.copy_gbs > bw.read_gbs ? bw.copy_gbs : bw.read_gbs;
    printf("device: %s\n", bw.device);
    printf("ceilings (1 GiB, median of 10): device-to-device copy %.0f GB/s (bytes read + written), "
           "read kernel %.0f GB/s; ceiling %.0f GB/s\n",
           bw.copy_gbs, bw.read_gbs, ceiling);
    Model m;
    if ((st = load(&m, path, DEVICE_CUDA, e))) return st;
    const ModelConfig *c = &m.cfg;
    if (prompt_len > c->seq_len || DECODE_PROMPT + decode > c->seq_len) {
        model_free(&m);
        return err_set(e, ST_ARG, "%s: context %d is shorter than --prompt-len or 8 + --decode", path, c->seq_len);
    }
    RunState s;
    if ((st = runstate_init(&s, &m, prompt_len > DECODE_PROMPT ? prompt_len : DECODE_PROMPT, e))) {
        model_free(&m);
        return st;
    }
    int *tok = mem_alloc((size_t)prompt_len * sizeof(int));
    for (int i = 0; i < prompt_len; i++) tok[i] = 3 + (int)((i * 7919u) % (unsigned)(c->vocab_size - 3));
    double bpt = bytes_per_token(&m), td[MAX_RUNS], tp[MAX_RUNS];
    /* decode: warm-up run first (uploads the rope table, captures graphs) */
    for (int r = -1; r < runs; r++) {
        float *lg = model_forward(&m, &s, tok, DECODE_PROMPT, 0, 0);
        int next = argmax(lg, c->vocab_size);
        double t0 = clock_seconds();
        for (int i = 0; i < decode; i++) next = argmax(model_forward(&m, &s, &next, 1, DECODE_PROMPT + i, 0), c->vocab_size);
        if (r >= 0) td[r] = decode / (clock_seconds() - t0);
    }
    GpuStats gs = gpu_stats(m.gpu);
    int kernels = gs.last_kernels;
    for (int r = -1; r < runs; r++) {
        double t0 = clock_seconds();
        model_forward(&m, &s, tok, prompt_len, 0, 0);
        if (r >= 0) tp[r] = prompt_len / (clock_seconds() - t0);
    }
    qsort(td, runs, sizeof td[0], cmp_double);
    qsort(tp, runs, sizeof tp[0], cmp_double);
    double dmed = td[runs / 2], pmed = tp[runs / 2];
    double flops = 0.0;
    for (int l = 0; l < c->n_layers; l++) {
        const Layer *y = &m.layers[l];
        const Mat *ms[] = {&y->wq, &y->wk, &y->wv, &y->wo, &y->w_gate, &y->w_up, &y->w_down};
        for (int i = 0; i < 7; i++) flops += 2.0 * ms[i]->N * ms[i]->K;
    }
    printf("| model | type | weights on GPU MB | read/token MB | decode tok/s (median, range) | decode GB/s | "
           "%% of ceiling | kernels/token | prefill %d tok/s | prefill TFLOP/s |\n", prompt_len);
    printf("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n");
    printf("| %s | %s | %.0f | %.1f | %.1f (%.1f-%.1f) | %.0f | %.1f%% | %d | %.0f | %.1f |\n", path,
           dtype_name(m.wtype), gs.weight_bytes / 1e6, bpt / 1e6, dmed, td[0], td[runs - 1], bpt * dmed / 1e9,
           100.0 * bpt * dmed / 1e9 / ceiling, kernels, pmed, flops * pmed / 1e12);
    char deep[16] = "auto";   /* LLM_CUDA_DEEP unset: per type */
    if (gs.deep >= 0) snprintf(deep, sizeof deep, "%d", gs.deep);
    char omitted[80] = "";   /* LLM_CUDA_OMIT: a measurement, not a model */
    if (gs.omit) snprintf(omitted, sizeof omitted, "; kernels left out (LLM_CUDA_OMIT=%d): the logits are wrong", gs.omit);
    char ahead[112] = "";
    if (gs.l2_ahead) snprintf(ahead, sizeof ahead, ", %d MB asked into L2 by attention", gs.l2_ahead);
    if (gs.flags) snprintf(ahead + strlen(ahead), sizeof ahead - strlen(ahead), ", counters between q|k|v, attention and wo");
    printf("(%ld steps, %ld from CUDA graphs, %ld cuBLAS products; runs %d; programmatic dependent launch %s, "
           "L2 prefetch %d bytes a row slice, early weights %s, RoPE in the q|k|v epilogue %s, "
           "one-pass norm %s, deep pipeline %s, SwiGLU in the gate|up epilogue %s%s%s%s; scratch %.0f MB)\n",
           gs.steps, gs.graph_steps, gs.gemm_calls, runs, gs.pdl ? "on" : "off", gs.prefetch, gs.early ? "on" : "off",
           gs.fuse_rope ? "on" : "off", gs.one_pass ? "on" : "off", deep, gs.swiglu_epi ? "on" : "off", ahead, omitted,
           gs.coded ? "; weights coded (BF16E), decoded a product at a time" : "", gs.scratch_bytes / 1e6);
    mem_free(tok);
    runstate_free(&s);
    model_free(&m);
    return ST_OK;
}

static void usage(FILE *f) {
    fprintf(f, "usage: gpucheck --model FILE [--prompt TEXT] [--steps 64] [--limit X] [--low-mem 0|1]\n"
               "       gpucheck --bench FILE [--prompt-len 512] [--decode 128] [--runs 5] [--low-mem 0|1]\n");
}

int main(int argc, char **argv) {
    const char *model = NULL, *bench_model = NULL, *prompt = "ROMEO:";
    int steps = 64, prompt_len = 512, decode = 128, runs = 5;
    double limit = 0.0;
    Err e = {{0}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "gpucheck: %s needs a value (see --help)\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--bench")) bench_model = v;
        else if (!strcmp(a, "--prompt")) prompt = v;
        else if (!strcmp(a, "--steps")) steps = atoi(v);
        else if (!strcmp(a, "--limit")) limit = atof(v);
        else if (!strcmp(a, "--prompt-len")) prompt_len = atoi(v);
        else if (!strcmp(a, "--decode")) decode = atoi(v);
        else if (!strcmp(a, "--runs")) runs = atoi(v);
        else if (!strcmp(a, "--low-mem")) low_mem = atoi(v) != 0;
        else {
            fprintf(stderr, "gpucheck: unknown option %s (see --help)\n", a);
            return 2;
        }
    }
    if ((!model) == (!bench_model) || steps < 0 || prompt_len < 1 || decode < 1 || runs < 1 || runs > MAX_RUNS) {
        usage(stderr);
        return 2;
    }
    int st = model ? check_model(model, prompt, steps, limit, &e) : bench(bench_model, prompt_len, decode, runs, &e);
    if (st) {
        fprintf(stderr, "gpucheck: %s\n", e.msg);
        return 1;
    }
    return 0;
}
