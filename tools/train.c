/* train.c - train a small Llama on a text file, write it as GGUF.
 *
 *   build/fast/train --tokenizer tok.gguf --corpus tinyshakespeare.txt --out model.gguf
 *
 * The text is split by bytes: the first 90% trains, the last 10% validates
 * (never seen by the optimizer). Both parts are tokenized by the engine's own
 * tokenizer, loaded from the vocabulary file tools/bpe_train.c wrote.
 *
 * Each step draws B windows of T tokens at random positions of the training
 * tokens, each preceded by BOS, runs forward and backward (src/train/trainer.c),
 * clips the gradient norm and takes one AdamW step on a warm-up + cosine
 * schedule. Which windows a step draws depends only on (seed, step), and
 * dropout masks likewise, so a run resumed from a checkpoint continues
 * exactly as if it had never stopped: checkpoints hold the weights, the Adam
 * moments and the step.
 *
 * The model written is the one with the best validation loss seen (checked
 * every --eval-every steps and at the end): on a 1 MB corpus a long run
 * starts to overfit, and the best point is kept, as early stopping does.
 * With --no-eval there is no validation, and the last weights are written.
 *
 * Validation loss is reported in nats per character over the WHOLE
 * validation split: windows of T tokens advance by T/2, each scores only the
 * tokens in its second half (the first window scores all), so every token is
 * scored once with at least T/2 tokens of context; the sum of -ln p over all
 * validation tokens is divided by the number of validation characters. */
#include "base/fileio.h"
#include "train/gguf_write.h"
#include "base/mem.h"
#include "model.h"
#include "kernels/ops.h"
#include "train/trainer.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { MAX_TEACHERS = 4 };

typedef struct {
    const char *tokenizer, *corpus, *out, *checkpoint, *log;
    int dim, hidden, layers, heads, kv_heads, ctx, batch, threads, tied;
    long steps, warmup, eval_every, ckpt_every;
    float lr, min_lr, wd, dropout, clip, beta2, ema, distill;
    const char *teacher[MAX_TEACHERS];
    int n_teachers;
    uint64_t seed;
    int resume, q8, no_eval;
    double train_fraction;
} Args;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(FILE *f) {
    fprintf(f,
        "usage: train --tokenizer TOK.gguf --corpus TEXT --out MODEL.gguf [options]\n"
        "  shape:   --dim 256 --hidden 704 --layers 6 --heads 8 --kv-heads 2 --ctx 256 [--untied]\n"
        "  steps:   --steps 3000 --batch 8 --lr 1e-3 --min-lr 1e-4 --warmup 100\n"
        "           --wd 0.1 --dropout 0.1 --clip 1.0 --beta2 0.99 --seed 1\n"
        "           --ema 0 (e.g. 0.999: validate and write an average of the weights)\n"
        "  teacher: --teacher MODEL.gguf (up to 4 times) --distill 0.5: train towards the\n"
        "           teachers' averaged probabilities mixed with the text's tokens (weight 0.5)\n"
        "  output:  --f32 (default Q8_0 matrices) --log FILE.csv --eval-every 250\n"
        "  resume:  --checkpoint FILE --checkpoint-every 100 --resume\n"
        "  other:   --threads N --train-fraction 0.9 --no-eval (skip validation: for tests)\n");
}

static int parse(int argc, char **argv, Args *a) {
    *a = (Args){.dim = 256, .hidden = 704, .layers = 6, .heads = 8, .kv_heads = 2, .ctx = 256,
                .batch = 8, .threads = 2, .tied = 1, .steps = 3000, .warmup = 100,
                .eval_every = 250, .ckpt_every = 100, .lr = 1e-3f, .min_lr = 1e-4f, .wd = 0.1f,
                .dropout = 0.1f, .clip = 1.0f, .beta2 = 0.99f, .distill = 0.5f, .seed = 1, .q8 = 1,
                .train_fraction = 0.9};
    struct { const char *name; int *i; long *l; float *f; double lo, hi; } nums[] = {
        {"--dim", &a->dim, 0, 0, 8, 4096}, {"--hidden", &a->hidden, 0, 0, 8, 16384},
        {"--layers", &a->layers, 0, 0, 1, 64}, {"--heads", &a->heads, 0, 0, 1, 64},
        {"--kv-heads", &a->kv_heads, 0, 0, 1, 64}, {"--ctx", &a->ctx, 0, 0, 2, 4096},
        {"--batch", &a->batch, 0, 0, 1, 1024}, {"--threads", &a->threads, 0, 0, 1, 256},
        {"--steps", 0, &a->steps, 0, 1, 1e9}, {"--warmup", 0, &a->warmup, 0, 0, 1e9},
        {"--eval-every", 0, &a->eval_every, 0, 1, 1e9},
        {"--checkpoint-every", 0, &a->ckpt_every, 0, 1, 1e9},
        {"--lr", 0, 0, &a->lr, 0, 1}, {"--min-lr", 0, 0, &a->min_lr, 0, 1},
        {"--wd", 0, 0, &a->wd, 0, 10}, {"--dropout", 0, 0, &a->dropout, 0, 0.9},
        {"--clip", 0, 0, &a->clip, 0, 1e6}, {"--beta2", 0, 0, &a->beta2, 0.5, 0.99999},
        {"--ema", 0, 0, &a->ema, 0, 0.99999}, {"--distill", 0, 0, &a->distill, 0, 1},
    };
    static const char *const strs[] = {"--tokenizer", "--corpus", "--out", "--checkpoint", "--log",
                                       "--seed", "--train-fraction", "--teacher"};
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (!strcmp(k, "-h") || !strcmp(k, "--help")) { usage(stdout); exit(0); }
        if (!strcmp(k, "--untied")) { a->tied = 0; continue; }
        if (!strcmp(k, "--resume")) { a->resume = 1; continue; }
        if (!strcmp(k, "--f32")) { a->q8 = 0; continue; }
        if (!strcmp(k, "--no-eval")) { a->no_eval = 1; continue; }
        int known = 0;
        for (size_t n = 0; n < sizeof nums / sizeof nums[0]; n++) known |= !strcmp(k, nums[n].name);
        for (size_t n = 0; n < sizeof strs / sizeof strs[0]; n++) known |= !strcmp(k, strs[n]);
        if (!known) { fprintf(stderr, "train: unknown option %s (see --help)\n", k); return -1; }
        if (i + 1 >= argc) { fprintf(stderr, "train: %s needs a value\n", k); return -1; }
        const char *v = argv[++i];
        char *end = NULL;
        errno = 0;
        double num = strtod(v, &end);
        int isnum = errno == 0 && end != v && *end == 0;
        int done = 0;
        for (size_t n = 0; n < sizeof nums / sizeof nums[0] && !done; n++) {
            if (strcmp(k, nums[n].name)) continue;
            if (!isnum || num < nums[n].lo || num > nums[n].hi ||
                ((nums[n].i || nums[n].l) && num != floor(num))) {
                fprintf(stderr, "train: %s: '%s' is not a number in %g..%g\n", k, v, nums[n].lo,
                        nums[n].hi);
                return -1;
            }
            if (nums[n].i) *nums[n].i = (int)num;
            if (nums[n].l) *nums[n].l = (long)num;
            if (nums[n].f) *nums[n].f = (float)num;
            done = 1;
        }
        if (done) continue;
        if (!strcmp(k, "--tokenizer")) a->tokenizer = v;
        else if (!strcmp(k, "--corpus")) a->corpus = v;
        else if (!strcmp(k, "--out")) a->out = v;
        else if (!strcmp(k, "--checkpoint")) a->checkpoint = v;
        else if (!strcmp(k, "--log")) a->log = v;
        else if (!strcmp(k, "--teacher")) {
            if (a->n_teachers == MAX_TEACHERS) {
                fprintf(stderr, "train: --teacher: at most %d teachers\n", MAX_TEACHERS);
                return -1;
            }
            a->teacher[a->n_teachers++] = v;
        }
        else if (!strcmp(k, "--seed") && isnum && num >= 0) a->seed = (uint64_t)num;
        else if (!strcmp(k, "--train-fraction") && isnum && num > 0 && num < 1) a->train_fraction = num;
        else {   /* --seed or --train-fraction with a bad value */
            fprintf(stderr, "train: %s: bad value '%s' (want %s)\n", k, v,
                    !strcmp(k, "--seed") ? "a number >= 0" : "a number in (0, 1)");
            return -1;
        }
    }
    if (!a->tokenizer || !a->corpus || !a->out) {
        fprintf(stderr, "train: --tokenizer, --corpus and --out are required (see --help)\n");
        return -1;
    }
    if (a->dim % a->heads || a->heads % a->kv_heads || (a->dim / a->heads) % 2) {
        fprintf(stderr, "train: dim %d, heads %d, kv-heads %d: need dim %% heads == 0, heads %% "
                "kv-heads == 0 and an even head size\n", a->dim, a->heads, a->kv_heads);
        return -1;
    }
    if (a->q8 && (a->dim % 32 || a->hidden % 32)) {
        fprintf(stderr, "train: Q8_0 output needs dim and hidden to be multiples of 32 (or --f32)\n");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ data */

typedef struct {
    int *train, *val;          /* token ids */
    long n_train, n_val;
    long val_chars;
} Data;

static int encode_all(const Tokenizer *tok, const char *text, int **ids, long *n, Err *e) {
    size_t len = strlen(text);
    *ids = mem_alloc((len + 2) * sizeof(int));
    if (!*ids) return err_set(e, ST_NOMEM, "out of memory for %zu tokens", len + 2);
    int got = tok_encode(tok, text, 0, *ids, (int)len + 2, e);
    if (got < 0) return got;
    *n = got;
    return ST_OK;
}

static int load_data(Data *d, const Args *a, const Tokenizer *tok, Err *e) {
    unsigned char *bytes;
    size_t bytes_n;
    int rc = fio_slurp(a->corpus, &bytes, &bytes_n, e);   /* refuses a directory or a FIFO */
    if (rc) return rc;
    char *text = (char *)bytes;
    long size = (long)bytes_n;
    long split = (long)(size * a->train_fraction);
    char *val = mem_strdup(text + split);
    text[split] = 0;
    int st = val ? ST_OK : ST_NOMEM;
    if (!st) st = encode_all(tok, text, &d->train, &d->n_train, e);
    if (!st) st = encode_all(tok, val, &d->val, &d->n_val, e);
    d->val_chars = size - split;
    mem_free(text);
    mem_free(val);
    return st;
}

/* Window b of step s starts at a position chosen by hashing (seed, s, b). */
static uint64_t hash3(uint64_t a, uint64_t b, uint64_t c) {
    uint64_t z = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^ c;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void fill_batch(int *tokens, const Data *d, int B, int T, int bos, uint64_t seed, long step) {
    for (int b = 0; b < B; b++) {
        long start = (long)(hash3(seed, (uint64_t)step, (uint64_t)b) % (uint64_t)(d->n_train - T + 1));
        tokens[b * (T + 1)] = bos;
        memcpy(tokens + b * (T + 1) + 1, d->train + start, (size_t)T * sizeof(int));
    }
}

/* Validation windows (see the header): window w reads T tokens of the split
 * starting at `start` (the last window is pulled back to end at the split's
 * end), preceded by the token before it or BOS, and scores the tokens
 * [from, to) of the split, the ones no earlier window scored. */
typedef struct { long start, from, to; } ValWindow;

static long val_windows(long n, int T) { return n <= T ? 1 : 1 + (n - T + T / 2 - 1) / (T / 2); }

static ValWindow val_window(const Data *d, int T, long w, int bos, int *row) {
    long n = d->n_val, half = T / 2;
    ValWindow v = {w * half, w == 0 ? 0 : (w - 1) * half + T, 0};
    if (v.start + T > n) v.start = n > T ? n - T : 0;
    v.to = v.start + T < n ? v.start + T : n;
    row[0] = v.start == 0 ? bos : d->val[v.start - 1];
    for (int i = 0; i < T; i++) row[i + 1] = v.start + i < n ? d->val[v.start + i] : bos;
    return v;
}

/* What a validation row scores: -ln p(target), p from model 0 (its forward
 * pass already has it), or from the average of n models' probabilities. */
typedef double (*RowScore)(const Trainer *tt, int n, size_t row, int target);

static double score_one(const Trainer *tt, int n, size_t row, int target) { return tt[0].row_loss[row]; }

static double score_mean(const Trainer *tt, int n, size_t row, int target) {
    double p = 0.0;
    for (int k = 0; k < n; k++) p += tt[k].logits[row * tt[k].c.vocab_size + target];
    return -log(fmax(p / n, 1e-30));
}

/* Sum of the scores of every validation token, in nats, with the trainer's
 * forward pass of each of the n models; B windows per batch (rows past the
 * last window repeat it and are not counted). */
static double val_sum(Trainer *tt, int n, const Data *d, int bos, RowScore score) {
    int B = tt[0].B, T = tt[0].T;
    long n_windows = val_windows(d->n_val, T);
    double total = 0.0;
    int *tokens = mem_alloc((size_t)B * (T + 1) * sizeof(int));
    ValWindow *win = mem_alloc((size_t)B * sizeof(ValWindow));
    if (!tokens || !win) {
        mem_free(tokens);
        mem_free(win);
        return NAN;
    }
    for (long w0 = 0; w0 < n_windows; w0 += B) {
        for (int b = 0; b < B; b++)
            win[b] = val_window(d, T, w0 + b < n_windows ? w0 + b : n_windows - 1, bos,
                                tokens + b * (T + 1));
        for (int k = 0; k < n; k++) tr_forward(&tt[k], tokens, 0);
        for (int b = 0; b < B && w0 + b < n_windows; b++)
            for (long i = win[b].from; i < win[b].to; i++) {
                long j = i - win[b].start;   /* the row in the window */
                total += score(tt, n, (size_t)b * T + (size_t)j, tokens[b * (T + 1) + j + 1]);
            }
    }
    mem_free(tokens);
    mem_free(win);
    return total;
}

/* The validation split's nats with one model; with several, of the average
 * of their probabilities (the teachers' ensemble, what a student distilled
 * from them is trained towards). */
static double val_nats(Trainer *t, const Data *d, int bos) { return val_sum(t, 1, d, bos, score_one); }
static double val_nats_mean(Trainer *tt, int n, const Data *d, int bos) { return val_sum(tt, n, d, bos, score_mean); }

/* ------------------------------------------------------------ checkpoints */

/* What this run distils from, for the checkpoint: a resumed run must have
 * the same teachers (their files' bytes, in order) and weight. */
static struct {
    uint64_t id;    /* FNV-1a over the teachers' files; 0: no teachers */
    float weight;   /* --distill, or 0 */
} teaching;

static int teachers_id(const Args *a, uint64_t *id, Err *e) {
    uint64_t h = a->n_teachers ? 0xcbf29ce484222325ull : 0;
    for (int k = 0; k < a->n_teachers; k++) {
        unsigned char *bytes;
        size_t n;
        int st = fio_slurp(a->teacher[k], &bytes, &n, e);
        if (st) return st;
        for (size_t i = 0; i < n; i++) h = (h ^ bytes[i]) * 0x100000001b3ull;
        h = (h ^ 0xff) * 0x100000001b3ull;   /* the end of one file */
        mem_free(bytes);
    }
    *id = h;
    return ST_OK;
}

typedef struct {
    char magic[8];           /* "LLMTRCK3" */
    int32_t shape[8];        /* dim hidden layers heads kv_heads vocab ctx tied */
    uint64_t seed;
    int64_t step, adam_t, n_params;
    double best_val;         /* best validation nats/char so far (the exported model's) */
    float ema;               /* the --ema decay; > 0: the average follows the moments */
    float distill;           /* --distill with teachers, else 0 */
    uint64_t teachers;       /* teachers_id: which teachers' files, in order; 0: none */
} CkptHeader;

static void ckpt_header(CkptHeader *h, const Trainer *t, const TrAdam *ad, const float *ema,
                        float decay, double best_val) {
    memset(h, 0, sizeof *h);
    memcpy(h->magic, "LLMTRCK3", 8);
    h->distill = teaching.weight;
    h->teachers = teaching.id;
    h->ema = ema ? decay : 0.0f;
    const ModelConfig *c = &t->c;
    int32_t s[8] = {c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads, c->vocab_size,
                    c->seq_len, t->tied};
    memcpy(h->shape, s, sizeof s);
    h->seed = t->seed;
    h->step = t->step;
    h->adam_t = ad->t;
    h->n_params = (int64_t)t->n_params;
    h->best_val = best_val;
}

/* Write to path.tmp, then rename: a run killed mid-write leaves the previous
 * checkpoint intact. */
static int ckpt_save(const char *path, const Trainer *t, const TrAdam *ad, const float *ema,
                     float decay, double best_val, Err *e) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return err_set(e, ST_IO, "%s: cannot create: %s", tmp, strerror(errno));
    CkptHeader h;
    ckpt_header(&h, t, ad, ema, decay, best_val);
    size_t n = t->n_params;
    int ok = fwrite(&h, sizeof h, 1, f) == 1 && fwrite(t->params, 4, n, f) == n &&
             fwrite(ad->m, 4, n, f) == n && fwrite(ad->v, 4, n, f) == n &&
             (!ema || fwrite(ema, 4, n, f) == n);
    ok = (fflush(f) == 0) & ok & (fsync(fileno(f)) == 0);
    ok = (fclose(f) == 0) & ok;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return err_set(e, ST_IO, "%s: cannot write the checkpoint", path);
    }
    return ST_OK;
}

static int ckpt_load(const char *path, Trainer *t, TrAdam *ad, float *ema, float decay,
                     double *best_val, Err *e) {
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(e, ST_IO, "%s: cannot open: %s", path, strerror(errno));
    CkptHeader h, want;
    ckpt_header(&want, t, ad, ema, decay, 0.0);
    size_t n = t->n_params;
    int ok = fread(&h, sizeof h, 1, f) == 1;
    if (ok && (memcmp(h.magic, want.magic, 8) || memcmp(h.shape, want.shape, sizeof h.shape) ||
               h.seed != want.seed || h.n_params != want.n_params || h.ema != want.ema ||
               h.distill != want.distill || h.teachers != want.teachers)) {
        fclose(f);
        return err_set(e, ST_FORMAT, "%s: checkpoint is for another shape, seed, --ema, --distill or set "
                       "of teachers (or from an older trainer): remove it to start afresh", path);
    }
    ok = ok && fread(t->params, 4, n, f) == n && fread(ad->m, 4, n, f) == n && fread(ad->v, 4, n, f) == n &&
         (!ema || fread(ema, 4, n, f) == n);
    fclose(f);
    if (!ok) return err_set(e, ST_FORMAT, "%s: truncated checkpoint", path);
    t->step = h.step;
    ad->t = h.adam_t;
    *best_val = h.best_val;
    return ST_OK;
}

/* ------------------------------------------------------------ export */

typedef struct { const float *base; int64_t K; } Rows;

static int rows_fn(void *ctx, int64_t row, float *out, int64_t n, Err *e) {
    const Rows *r = ctx;
    memcpy(out, r->base + row * r->K, (size_t)n * sizeof(float));
    return ST_OK;
}

/* Copy the tokenizer's keys from its vocabulary file. Strings in the file are
 * not NUL-terminated: copy them into `pool`, freed by the caller. */
static int copy_str_array(GgufWriter *w, const Gguf *g, const char *key, char ***pool, Err *e) {
    const uint8_t *p;
    uint64_t n;
    if (gguf_get_array(g, key, GG_STRING, &p, &n, e)) return ST_FORMAT;
    char **s = mem_alloc((n + 1) * sizeof(char *));
    if (!s) return ST_NOMEM;
    for (uint64_t i = 0; i < n; i++) {
        GgufStr str = gguf_next_str(&p);
        s[i] = mem_alloc(str.len + 1);
        if (!s[i]) return ST_NOMEM;
        memcpy(s[i], str.s, str.len);
    }
    *pool = s;
    return gguf_w_add_str_array(w, key, (const char *const *)s, n);
}

static void free_pool(char **s, uint64_t n) {
    if (!s) return;
    for (uint64_t i = 0; i < n; i++) mem_free(s[i]);
    mem_free(s);
}

static int export_gguf(const char *path, const Trainer *t, const Gguf *tokg, int q8, Err *e) {
    const ModelConfig *c = &t->c;
    const TrParams *P = &t->P;
    GgufWriter w;
    gguf_w_init(&w, path);
    int64_t D = c->dim, F = c->hidden_dim, V = c->vocab_size;
    int64_t qd = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv_heads * c->head_dim;
    gguf_w_add_str(&w, "general.architecture", "llama");
    gguf_w_add_str(&w, "general.name", "shakespeare");
    gguf_w_add_u32(&w, "general.file_type", q8 ? 7 : 0);   /* llama.cpp: 7 = mostly Q8_0 */
    gguf_w_add_u32(&w, "llama.context_length", (uint32_t)c->seq_len);
    gguf_w_add_u32(&w, "llama.embedding_length", (uint32_t)D);
    gguf_w_add_u32(&w, "llama.block_count", (uint32_t)c->n_layers);
    gguf_w_add_u32(&w, "llama.feed_forward_length", (uint32_t)F);
    gguf_w_add_u32(&w, "llama.attention.head_count", (uint32_t)c->n_heads);
    gguf_w_add_u32(&w, "llama.attention.head_count_kv", (uint32_t)c->n_kv_heads);
    gguf_w_add_u32(&w, "llama.rope.dimension_count", (uint32_t)c->head_dim);
    gguf_w_add_f32(&w, "llama.rope.freq_base", c->rope_base);
    gguf_w_add_f32(&w, "llama.attention.layer_norm_rms_epsilon", c->rms_eps);
    gguf_w_add_u32(&w, "llama.vocab_size", (uint32_t)V);

    GgufStr s;
    char model[64] = "gpt2", pre[64] = "";
    if (gguf_get_str(tokg, "tokenizer.ggml.model", &s, NULL) == ST_OK && s.len < 64)
        memcpy(model, s.s, s.len), model[s.len] = 0;
    gguf_w_add_str(&w, "tokenizer.ggml.model", model);
    if (gguf_get_str(tokg, "tokenizer.ggml.pre", &s, NULL) == ST_OK && s.len < 64) {
        memcpy(pre, s.s, s.len), pre[s.len] = 0;
        gguf_w_add_str(&w, "tokenizer.ggml.pre", pre);
    }
    char **tokens = NULL, **merges = NULL;
    uint64_t n_tokens = 0, n_merges = 0;
    const uint8_t *arr;
    int st = copy_str_array(&w, tokg, "tokenizer.ggml.tokens", &tokens, e);
    gguf_get_array(tokg, "tokenizer.ggml.tokens", GG_STRING, &arr, &n_tokens, NULL);
    if (!st && gguf_find(tokg, "tokenizer.ggml.merges")) {
        st = copy_str_array(&w, tokg, "tokenizer.ggml.merges", &merges, e);
        gguf_get_array(tokg, "tokenizer.ggml.merges", GG_STRING, &arr, &n_merges, NULL);
    }
    if (!st && gguf_get_array(tokg, "tokenizer.ggml.token_type", GG_I32, &arr, &n_tokens, NULL) == ST_OK) {
        int32_t *types = mem_alloc(n_tokens * 4);
        if (!types) st = ST_NOMEM;
        else {
            memcpy(types, arr, n_tokens * 4);   /* the mapping may not be 4-byte aligned */
            st = gguf_w_add_i32_array(&w, "tokenizer.ggml.token_type", types, n_tokens);
            mem_free(types);   /* metadata is encoded when added */
        }
    }
    if (!st && gguf_get_array(tokg, "tokenizer.ggml.scores", GG_F32, &arr, &n_tokens, NULL) == ST_OK) {
        float *scores = mem_alloc(n_tokens * 4);
        if (!scores) st = ST_NOMEM;
        else {
            memcpy(scores, arr, n_tokens * 4);
            st = gguf_w_add_f32_array(&w, "tokenizer.ggml.scores", scores, n_tokens);
            mem_free(scores);
        }
    }
    int64_t id;
    const char *ids[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"};
    for (int i = 0; i < 2; i++)
        if (gguf_get_int(tokg, ids[i], &id, NULL) == ST_OK) gguf_w_add_u32(&w, ids[i], (uint32_t)id);
    if (gguf_get_int(tokg, "tokenizer.ggml.add_bos_token", &id, NULL) == ST_OK)
        gguf_w_add_bool(&w, "tokenizer.ggml.add_bos_token", (int)id);

    DType mt = q8 ? DT_Q8_0 : DT_F32;
    Rows rows[16 * 64 + 4];
    int nr = 0;
    char name[96];
#define MATRIX(nm, ptr, N, K) do { rows[nr] = (Rows){(ptr), (K)}; int64_t ne[2] = {(K), (N)}; \
        gguf_w_add_tensor_rows(&w, (nm), 2, ne, mt, rows_fn, &rows[nr++]); } while (0)
#define VECTOR(nm, ptr, N) do { int64_t ne[1] = {(N)}; gguf_w_add_tensor(&w, (nm), 1, ne, DT_F32, (ptr)); } while (0)
    MATRIX("token_embd.weight", P->emb, V, D);
    for (int l = 0; l < c->n_layers; l++) {
#define NM(x) (snprintf(name, sizeof name, "blk.%d.%s", l, x), name)
        VECTOR(NM("attn_norm.weight"), P->attn_norm + l * D, D);
        MATRIX(NM("attn_q.weight"), P->wq + l * qd * D, qd, D);
        MATRIX(NM("attn_k.weight"), P->wk + l * kvd * D, kvd, D);
        MATRIX(NM("attn_v.weight"), P->wv + l * kvd * D, kvd, D);
        MATRIX(NM("attn_output.weight"), P->wo + l * D * qd, D, qd);
        VECTOR(NM("ffn_norm.weight"), P->ffn_norm + l * D, D);
        MATRIX(NM("ffn_gate.weight"), P->w_gate + l * F * D, F, D);
        MATRIX(NM("ffn_down.weight"), P->w_down + l * D * F, D, F);
        MATRIX(NM("ffn_up.weight"), P->w_up + l * F * D, F, D);
#undef NM
    }
    VECTOR("output_norm.weight", P->out_norm, D);
    if (P->out) MATRIX("output.weight", P->out, V, D);
#undef MATRIX
#undef VECTOR
    if (!st) st = gguf_w_write(&w, e);
    gguf_w_free(&w);
    free_pool(tokens, n_tokens);
    free_pool(merges, n_merges);
    return st;
}

/* ------------------------------------------------------------ main */

/* Validation loss of the exported file, through the engine's own loader and
 * forward pass (model_forward), with the same windows as val_nats. */
static double engine_val_nats(const char *path, const Data *d, int T, Err *e) {
    Model m;
    if (model_load(&m, path, NULL, e)) return NAN;
    RunState s;
    if (runstate_init(&s, &m, T, e)) { model_free(&m); return NAN; }
    int V = m.cfg.vocab_size, bos = tok_bos(m.tok);
    long n_windows = val_windows(d->n_val, T);
    int *row = mem_alloc((size_t)(T + 1) * sizeof(int));
    double total = 0.0;
    for (long w = 0; row && w < n_windows; w++) {
        ValWindow v = val_window(d, T, w, bos, row);
        float *lg = model_forward(&m, &s, row, T, 0, 1);
        for (long i = v.from; i < v.to; i++) {
            float *z = lg + (size_t)(i - v.start) * V;
            softmax(z, V);
            total += -log(fmax(z[row[i - v.start + 1]], 1e-30));
        }
    }
    mem_free(row);
    runstate_free(&s);
    model_free(&m);
    return total;
}

/* ------------------------------------------------------------ teachers */

static void widen(float *dst, const Mat *w) {
    size_t row = dtype_row_bytes(w->type, w->K);
    for (int r = 0; r < w->N; r++)
        dequantize_row(dst + (size_t)r * w->K, (const uint8_t *)w->data + r * row, w->type, w->K);
}

/* A model file's weights, widened to float, in a Trainer of the student's
 * shape: its forward pass (the trainer's own, src/train/gemm.c's products: the
 * same bits on every CPU) gives the distillation targets. */
static int load_teacher(Trainer *tt, const char *path, const ModelConfig *c, int B, int T, Err *e) {
    Model m;
    int st = model_load(&m, path, NULL, e);
    if (st) return st;
    const ModelConfig *mc = &m.cfg;
    if (mc->arch != ARCH_LLAMA) {   /* the trainer's forward pass is Llama's alone */
        st = err_set(e, ST_ARG, "%s: a teacher must be a llama model (the trainer has no biases, head "
                     "norms or NEOX rotation); this one is %s", path, model_arch_name(mc->arch));
        model_free(&m);
        return st;
    }
    if (mc->dim != c->dim || mc->hidden_dim != c->hidden_dim || mc->n_layers != c->n_layers ||
        mc->n_heads != c->n_heads || mc->n_kv_heads != c->n_kv_heads || mc->vocab_size != c->vocab_size ||
        mc->rope_base != c->rope_base || mc->n_rot != c->n_rot) {
        st = err_set(e, ST_ARG, "%s: a teacher must have the student's shape: it has dim %d, hidden %d, "
                     "%d layers, %d heads, %d KV heads, vocab %d; the student dim %d, hidden %d, %d layers, "
                     "%d heads, %d KV heads, vocab %d", path, mc->dim, mc->hidden_dim, mc->n_layers,
                     mc->n_heads, mc->n_kv_heads, mc->vocab_size, c->dim, c->hidden_dim, c->n_layers,
                     c->n_heads, c->n_kv_heads, c->vocab_size);
        model_free(&m);
        return st;
    }
    int tied = m.output.data == m.tok_embd.data;
    if ((st = tr_init(tt, c, tied, B, T, 0, e))) { model_free(&m); return st; }
    size_t D = (size_t)c->dim;
    widen(tt->P.emb, &m.tok_embd);
    if (!tied) widen(tt->P.out, &m.output);
    memcpy(tt->P.out_norm, m.out_norm, D * sizeof(float));
    for (int l = 0; l < c->n_layers; l++) {
        const Layer *ly = &m.layers[l];
        size_t qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
        size_t F = (size_t)c->hidden_dim;
        memcpy(tt->P.attn_norm + l * D, ly->attn_norm, D * sizeof(float));
        memcpy(tt->P.ffn_norm + l * D, ly->ffn_norm, D * sizeof(float));
        widen(tt->P.wq + l * qd * D, &ly->wq);
        widen(tt->P.wk + l * kvd * D, &ly->wk);
        widen(tt->P.wv + l * kvd * D, &ly->wv);
        widen(tt->P.wo + l * D * qd, &ly->wo);
        widen(tt->P.w_gate + l * F * D, &ly->w_gate);
        widen(tt->P.w_down + l * D * F, &ly->w_down);
        widen(tt->P.w_up + l * F * D, &ly->w_up);
    }
    model_free(&m);
    return ST_OK;
}

/* The teachers' probabilities for a batch, averaged in teacher order (so
 * the same bits whatever the threads): (BT, V). */
static const float *teacher_targets(Trainer *tt, int n, const int *batch, float *avg) {
    for (int k = 0; k < n; k++) tr_forward(&tt[k], batch, 0);
    if (n == 1) return tt[0].logits;
    size_t count = (size_t)tt[0].B * tt[0].T * tt[0].c.vocab_size;
    for (size_t i = 0; i < count; i++) {
        float sum = 0.0f;
        for (int k = 0; k < n; k++) sum += tt[k].logits[i];
        avg[i] = sum / (float)n;
    }
    return avg;
}

/* The running average of the weights (--ema): after each step
 * avg += (1 - d) (w - avg), with d growing as (1 + s) / (10 + s) up to the
 * decay, so the first steps are not averaged with the random start. An
 * average of the weights along the end of a run usually generalises better
 * than its last point (Polyak and Juditsky 1992); the average is what is
 * validated and written. Element by element: the same bits on any thread count. */
static void ema_update(float *avg, const float *w, size_t n, float decay, long step) {
    float ramp = (float)(1 + step) / (float)(10 + step), d = ramp < decay ? ramp : decay;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) avg[i] += (1.0f - d) * (w[i] - avg[i]);
}

/* Exchange the weights with their average, to validate or write it (and back). */
static void swap_weights(float *a, float *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = a[i];
        a[i] = b[i];
        b[i] = x;
    }
}

int main(int argc, char **argv) {
    Args a;
    if (parse(argc, argv, &a)) return 2;
    ops_set_threads(a.threads);
    Err e = {{0}};
    if (ops_isa_from_env(&e)) {
        fprintf(stderr, "train: %s\n", e.msg);
        return 2;
    }
    Gguf tokg;
    Tokenizer *tok = NULL;
    Data d = {0};
    Trainer t = {0};
    TrAdam ad = {0};
    FILE *log = NULL;
    float *ema = NULL;   /* (n_params) the average of the weights, with --ema */
    Trainer teachers[MAX_TEACHERS];
    memset(teachers, 0, sizeof teachers);
    float *soft_avg = NULL;   /* (BT, V) with more than one teacher */
    int rc = 1;
    if (gguf_open(&tokg, a.tokenizer, &e) || tok_from_gguf(&tok, &tokg, &e)) {
        fprintf(stderr, "train: %s\n", e.msg);
        return 1;
    }
    double t0 = now_s();
    if (load_data(&d, &a, tok, &e)) goto fail;
    if (d.n_train <= a.ctx || d.n_val < 2) {
        err_set(&e, ST_ARG, "%s: too little text for a context of %d tokens", a.corpus, a.ctx);
        goto fail;
    }
    int bos = tok_bos(tok);
    if (bos < 0) { err_set(&e, ST_FORMAT, "%s: the vocabulary has no BOS token", a.tokenizer); goto fail; }
    fprintf(stderr, "train: %s: %ld train tokens, %ld validation tokens (%ld chars), encoded in %.1f s\n",
            a.corpus, d.n_train, d.n_val, d.val_chars, now_s() - t0);

    ModelConfig c = {.dim = a.dim, .hidden_dim = a.hidden, .n_layers = a.layers, .n_heads = a.heads,
                     .n_kv_heads = a.kv_heads, .head_dim = a.dim / a.heads,
                     .vocab_size = tok_n_vocab(tok), .seq_len = a.ctx, .n_rot = a.dim / a.heads,
                     .rope_base = 10000.0f, .rms_eps = 1e-5f};
    if (tr_init(&t, &c, a.tied, a.batch, a.ctx, a.seed, &e) || tr_adam_init(&ad, t.n_params, &e)) goto fail;
    t.dropout = a.dropout;
    if (teachers_id(&a, &teaching.id, &e)) goto fail;
    teaching.weight = a.n_teachers ? a.distill : 0.0f;
    for (int k = 0; k < a.n_teachers; k++) {
        if (load_teacher(&teachers[k], a.teacher[k], &c, a.batch, a.ctx, &e)) goto fail;
        fprintf(stderr, "train: teacher %s: validation %.4f nats/char\n", a.teacher[k],
                val_nats(&teachers[k], &d, bos) / d.val_chars);
    }
    if (a.n_teachers > 1) {
        fprintf(stderr, "train: the %d teachers together (their probabilities averaged): validation "
                "%.4f nats/char\n", a.n_teachers, val_nats_mean(teachers, a.n_teachers, &d, bos) / d.val_chars);
        soft_avg = mem_alloc((size_t)a.batch * a.ctx * c.vocab_size * sizeof(float));
        if (!soft_avg) { err_set(&e, ST_NOMEM, "out of memory for the teachers' targets"); goto fail; }
    }
    if (a.n_teachers)
        fprintf(stderr, "train: distilling from %d teacher%s, weight %.2f\n", a.n_teachers,
                a.n_teachers > 1 ? "s (their probabilities averaged)" : "", a.distill);
    if (a.ema > 0.0f) {
        ema = mem_alloc(t.n_params * sizeof(float));
        if (!ema) { err_set(&e, ST_NOMEM, "out of memory for the average of the weights"); goto fail; }
        memcpy(ema, t.params, t.n_params * sizeof(float));
    }
    double best = INFINITY;   /* best validation loss so far: the model on disk */
    if (a.resume && a.checkpoint && access(a.checkpoint, R_OK) == 0) {
        if (ckpt_load(a.checkpoint, &t, &ad, ema, a.ema, &best, &e)) goto fail;
        fprintf(stderr, "train: resumed from %s at step %ld\n", a.checkpoint, t.step);
    }
    fprintf(stderr, "train: %zu parameters (dim %d, hidden %d, %d layers, %d heads, %d KV heads, "
            "vocab %d, ctx %d, %s), batch %d x %d, %ld steps, %d threads, %.0f MB of activations\n",
            t.n_params, a.dim, a.hidden, a.layers, a.heads, a.kv_heads, c.vocab_size, a.ctx,
            a.tied ? "tied" : "untied", a.batch, a.ctx, a.steps, a.threads, t.bytes / 1e6);
    /* The file's bytes depend on the thread count and on whether the plain
     * loops run, on nothing else: src/train/gemm.c fixes the order of every sum
     * (notes/training.md, "Determinism"). */
    fprintf(stderr, "train: kernels: %s (%s)\n", ops_isa_name(ops_isa()),
            ops_isa() != OPS_PLAIN ? "the same bytes on every x86-64 CPU, for this thread count"
                                   : "the plain loops: other bytes than the fast paths', close losses");
    if (a.log) {
        log = fopen(a.log, a.resume && t.step > 0 ? "a" : "w");
        if (!log) { err_set(&e, ST_IO, "%s: cannot open: %s", a.log, strerror(errno)); goto fail; }
        if (t.step == 0) fprintf(log, "step,lr,train_loss,val_nats_per_char,elapsed_s\n");
    }

    int *batch = mem_alloc((size_t)a.batch * (a.ctx + 1) * sizeof(int));
    if (!batch) { err_set(&e, ST_NOMEM, "out of memory for a batch"); goto fail; }
    double start = now_s(), smooth = 0;
    long first = t.step;
    while (t.step < a.steps) {
        long s = t.step;
        float lr = tr_lr_schedule(s, a.warmup, a.steps, a.lr, a.min_lr);
        fill_batch(batch, &d, a.batch, a.ctx, bos, a.seed, s);
        if (a.n_teachers) {
            t.soft = teacher_targets(teachers, a.n_teachers, batch, soft_avg);
            t.soft_weight = a.distill;
        }
        float loss = tr_forward(&t, batch, 1);
        tr_backward(&t);
        double norm = tr_clip_grads(&t, a.clip);
        tr_adam_step(&ad, &t, lr, 0.9f, a.beta2, 1e-8f, a.wd);
        if (ema) ema_update(ema, t.params, t.n_params, a.ema, s);
        smooth = s == first ? loss : 0.9 * smooth + 0.1 * loss;
        int last = t.step == a.steps;
        if (!a.no_eval && (t.step % a.eval_every == 0 || last)) {
            if (ema) swap_weights(t.params, ema, t.n_params);   /* validate (and write) the average */
            double vn = val_nats(&t, &d, bos) / d.val_chars;
            double el = now_s() - start, tps = (double)(t.step - first) * a.batch * a.ctx / el;
            double left = el / (t.step - first) * (a.steps - t.step);
            fprintf(stderr, "step %6ld  lr %.2e  train %.4f nats/token  val %.4f nats/char  |g| %.2f  "
                    "%.0f tok/s  %.0f s left\n", t.step, lr, smooth, vn, norm, tps, left);
            if (log) {
                fprintf(log, "%ld,%.6g,%.5f,%.5f,%.1f\n", t.step, lr, smooth, vn, el);
                fflush(log);
            }
            /* Keep the model of the best validation loss (early stopping):
             * on a small corpus a long run starts to overfit. */
            if (vn < best) {
                best = vn;
                if (export_gguf(a.out, &t, &tokg, a.q8, &e)) goto fail_batch;
                fprintf(stderr, "train: step %ld is the best so far: wrote %s\n", t.step, a.out);
            }
            if (ema) swap_weights(t.params, ema, t.n_params);
        }
        if (a.checkpoint && (t.step % a.ckpt_every == 0 || last) && ckpt_save(a.checkpoint, &t, &ad, ema, a.ema, best, &e))
            goto fail_batch;
    }
    double el = now_s() - start;
    if (t.step > first)
        fprintf(stderr, "train: %ld steps in %.1f s, %.0f tokens/s\n", t.step - first, el,
                (double)(t.step - first) * a.batch * a.ctx / el);
    /* Without validation there is no best: the last weights are the model. A
     * finished run resumed after its model file was removed has no file
     * either: write the weights it has, and say so. */
    int missing = !a.no_eval && access(a.out, R_OK) != 0;
    if (missing)
        fprintf(stderr, "train: %s is missing; writing the weights of step %ld\n", a.out, t.step);
    if (ema) swap_weights(t.params, ema, t.n_params);
    if ((a.no_eval || missing) && export_gguf(a.out, &t, &tokg, a.q8, &e)) goto fail_batch;
    if (a.no_eval) {
        fprintf(stderr, "train: wrote %s\n", a.out);
    } else {
        double vn = engine_val_nats(a.out, &d, a.ctx, &e);
        if (isnan(vn)) goto fail_batch;
        fprintf(stderr, "train: %s holds the best of the run (validation %.4f nats/char in training); "
                "through the engine its validation loss is %.4f nats/char\n", a.out, best, vn / d.val_chars);
    }
    rc = 0;
fail_batch:
    mem_free(batch);
fail:
    if (rc) fprintf(stderr, "train: %s\n", e.msg);
    if (log) fclose(log);
    mem_free(ema);
    mem_free(soft_avg);
    for (int k = 0; k < MAX_TEACHERS; k++) tr_free(&teachers[k]);
    tr_adam_free(&ad);
    tr_free(&t);
    mem_free(d.train);
    mem_free(d.val);
    tok_free(tok);
    gguf_close(&tokg);
    return rc;
}
