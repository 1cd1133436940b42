/* mkmodel.c - write a Llama, Qwen2 or Qwen3 model in GGUF with random weights, for benchmarks.
 *
 * Speed does not depend on what the weights are, only on their shape and type,
 * so a benchmark of TinyLlama's shape needs no TinyLlama: this tool writes a
 * file with the same tensors, metadata keys and tokenizer layout that
 * llama.cpp's converter produces, filled from a seeded generator.
 *
 *   mkmodel --preset tinyllama --type q8_0 build/bench-models/tinyllama-q8_0.gguf
 *   mkmodel --dim 256 --hidden 768 --layers 4 --heads 8 --kv-heads 2 \
 *           --vocab 512 --ctx 256 --type f16 --seed 7 small.gguf
 *   mkmodel --preset tinyllama --type f32 --size-only out.gguf   (prints the byte count)
 *   mkmodel --preset qwen3-0.6b --type q8_0 qwen3.gguf
 *   mkmodel --arch qwen2 --dim 896 ... (any shape, with the architecture's extra tensors)
 *
 * Architectures (--arch, or the preset's). llama: the tensors above. qwen2:
 * also a bias after each of the Q, K and V products (blk.N.attn_{q,k,v}.bias,
 * F32, uniform in +-0.1). qwen3: also each head's Q and K RMSNorm weights
 * (blk.N.attn_{q,k}_norm.weight, head size floats, all 1), and a head size
 * of its own (--head-dim; the presets' 128), written as
 * qwen3.attention.key_length / value_length. Their keys are under their own
 * name (qwen2.embedding_length, ...) and RoPE's base is Qwen's 1000000.
 *
 * Values. Each matrix of N rows by K columns is uniform in [-1/sqrt(K),
 * 1/sqrt(K)), PyTorch's default for a fresh nn.Linear: every output of a
 * matmul of a unit-RMS input then has a standard deviation near 0.58, so the
 * forward pass stays far from overflow at any depth (RMSNorm resets the scale
 * before every sublayer). Norm weights are all 1, as at initialisation.
 * Each tensor draws from its own xorshift64* stream, seeded from --seed and the
 * tensor's place in the file, so the same arguments always give the same bytes.
 *
 * Types. --type sets the type of every matrix (the token embedding and the
 * classifier included, as llama.cpp's Q8_0 files have them); the norms are
 * always F32. Rounding to F16 / Q8_0 is the writer's (gguf_write.h), which
 * uses ops.h: Q8_0 blocks of 32 with d = max|x| / 127 stored as F16, values
 * rounded to nearest; the 4, 5 and 6-bit formats (q4_0 .. q6_k) by
 * quantize_row's round-to-nearest (every matrix in one format, where
 * llama.cpp's _M files mix two).
 *
 * The classifier is its own tensor (output.weight), as in TinyLlama; llama2.c's
 * stories models share it with the embedding, so their files here are larger
 * than the originals (stories15M: 24.4M parameters, not 15.2M), though a
 * decoded token reads the same bytes either way: the embedding table is only
 * looked up, one row per token.
 *
 * Tokenizer: sentencepiece style ("llama"), as llama.cpp lays it out: <unk>,
 * <s>, </s>, the 256 byte pieces <0x00>..<0xFF>, the printable ASCII characters
 * and U+2581 (sentencepiece's space), then unique filler pieces up to the
 * vocabulary size. Text therefore encodes one character per token. */
#include "base/err.h"
#include "train/gguf_write.h"
#include "base/mem.h"
#include "kernels/ops.h"
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const char *name;
    int dim, hidden, layers, heads, kv_heads, vocab, ctx;
    const char *arch;   /* "llama", "qwen2", "qwen3" */
    int head_dim;       /* 0: dim / heads */
} Shape;

static const Shape PRESETS[] = {
    /* name          D     F     L   H   Hkv  V      P      arch     S */
    {"stories15M", 288, 768, 6, 6, 6, 32000, 256, "llama", 0},
    {"stories110M", 768, 2048, 12, 12, 12, 32000, 1024, "llama", 0},
    {"tinyllama", 2048, 5632, 22, 32, 4, 32000, 2048, "llama", 0},
    {"qwen2.5-0.5b", 896, 4864, 24, 14, 2, 151936, 32768, "qwen2", 0},   /* Qwen2.5-0.5B */
    {"qwen3-0.6b", 1024, 3072, 28, 16, 8, 151936, 40960, "qwen3", 128},  /* Qwen3-0.6B */
};

static int head_dim(const Shape *s) { return s->head_dim ? s->head_dim : s->dim / s->heads; }
#define N_PRESETS (int)(sizeof PRESETS / sizeof PRESETS[0])

#define ROPE_BASE 10000.0f
#define QWEN_ROPE_BASE 1000000.0f
#define RMS_EPS 1e-5f
#define N_SPECIAL 3                 /* <unk> <s> </s> */
#define FIRST_BYTE_TOKEN N_SPECIAL  /* <0x00> is token 3, as in llama's vocabulary */
#define MIN_VOCAB (N_SPECIAL + 256)
#define PIECE_CAP 24                /* bytes per vocabulary piece, NUL included */

/* GGUF token types (llama.cpp's llama_token_type). */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_BYTE = 6 };

/* ------------------------------------------------------------ the weights */

/* One tensor's generator: uniform in [center - spread, center + spread). */
typedef struct {
    uint64_t state;    /* xorshift64*; never 0 */
    float center, spread;
} WeightGen;

/* splitmix64: turns (seed, index) into well-mixed, nonzero xorshift seeds. */
static uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* xorshift64* (Vigna), top 24 bits as a float in [-1, 1). */
static float next_uniform(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    uint64_t r = *s * 0x2545f4914f6cdd1dULL;
    return (float)(r >> 40) * 0x1p-23f - 1.0f;
}

/* GgufRowFn: the writer asks for rows in order, so the stream just continues. */
static int weight_rows(void *ctx, int64_t row, float *out, int64_t n, Err *e) {
    WeightGen *g = ctx;
    for (int64_t i = 0; i < n; i++) out[i] = g->center + g->spread * next_uniform(&g->state);
    return ST_OK;
}

/* ------------------------------------------------------------ the model */

typedef struct {
    Shape shape;
    DType type;
    uint64_t seed;
    /* tensors: one generator each, alive until the file is written */
    WeightGen *gens;
    int n_tensors;
    uint64_t n_params;
    /* tokenizer */
    char *piece_text;      /* (V, PIECE_CAP) */
    const char **pieces;   /* (V) */
    float *scores;         /* (V) */
    int32_t *token_types;  /* (V) */
} Builder;

/* Give the next tensor its own generator stream and describe it to the writer. */
static void add_tensor(GgufWriter *w, Builder *b, const char *name, int64_t ne0, int64_t ne1,
                       int n_dims, DType type, float center, float spread) {
    WeightGen *g = &b->gens[b->n_tensors++];
    g->state = splitmix64(b->seed ^ splitmix64((uint64_t)b->n_tensors)) | 1;
    g->center = center;
    g->spread = spread;
    int64_t ne[2] = {ne0, ne1};
    gguf_w_add_tensor_rows(w, name, n_dims, ne, type, weight_rows, g);
    b->n_params += (uint64_t)ne0 * (uint64_t)ne1;
}

/* A matrix of N rows by K columns (ne = {K, N}): uniform in +-1/sqrt(K). */
static void add_matrix(GgufWriter *w, Builder *b, const char *name, int64_t K, int64_t N) {
    add_tensor(w, b, name, K, N, 2, b->type, 0.0f, 1.0f / sqrtf((float)K));
}

/* An RMSNorm weight vector of n ones, F32 whatever the matrices are. */
static void add_norm(GgufWriter *w, Builder *b, const char *name, int64_t n) {
    add_tensor(w, b, name, n, 1, 1, DT_F32, 1.0f, 0.0f);
}

/* "blk.<l>.<suffix>" into buf. */
static const char *blk(char *buf, int l, const char *suffix) {
    snprintf(buf, GGUF_W_MAX_NAME + 1, "blk.%d.%s", l, suffix);
    return buf;
}

/* A bias vector of n values, F32, uniform in +-0.1. */
static void add_bias(GgufWriter *w, Builder *b, const char *name, int64_t n) {
    add_tensor(w, b, name, n, 1, 1, DT_F32, 0.0f, 0.1f);
}

static int add_tensors(GgufWriter *w, Builder *b, Err *e) {
    const Shape *s = &b->shape;
    int64_t D = s->dim, F = s->hidden, V = s->vocab;
    int64_t S = head_dim(s), HS = s->heads * S, KVS = s->kv_heads * S;
    int qwen2 = strcmp(s->arch, "qwen2") == 0, qwen3 = strcmp(s->arch, "qwen3") == 0;
    int n_tensors = (9 + 3 * qwen2 + 2 * qwen3) * s->layers + 3;
    b->gens = mem_alloc((size_t)n_tensors * sizeof *b->gens);
    if (!b->gens) return err_set(e, ST_NOMEM, "out of memory for %d tensors", n_tensors);

    char n[GGUF_W_MAX_NAME + 1];
    add_matrix(w, b, "token_embd.weight", D, V);                /* (V, D) */
    for (int l = 0; l < s->layers; l++) {
        add_norm(w, b, blk(n, l, "attn_norm.weight"), D);        /* (D) */
        add_matrix(w, b, blk(n, l, "attn_q.weight"), D, HS);     /* (H*S, D) */
        add_matrix(w, b, blk(n, l, "attn_k.weight"), D, KVS);    /* (Hkv*S, D) */
        add_matrix(w, b, blk(n, l, "attn_v.weight"), D, KVS);    /* (Hkv*S, D) */
        add_matrix(w, b, blk(n, l, "attn_output.weight"), HS, D);/* (D, H*S) */
        if (qwen2) {
            add_bias(w, b, blk(n, l, "attn_q.bias"), HS);
            add_bias(w, b, blk(n, l, "attn_k.bias"), KVS);
            add_bias(w, b, blk(n, l, "attn_v.bias"), KVS);
        }
        if (qwen3) {
            add_norm(w, b, blk(n, l, "attn_q_norm.weight"), S);
            add_norm(w, b, blk(n, l, "attn_k_norm.weight"), S);
        }
        add_norm(w, b, blk(n, l, "ffn_norm.weight"), D);         /* (D) */
        add_matrix(w, b, blk(n, l, "ffn_gate.weight"), D, F);    /* (F, D) */
        add_matrix(w, b, blk(n, l, "ffn_down.weight"), F, D);    /* (D, F) */
        add_matrix(w, b, blk(n, l, "ffn_up.weight"), D, F);      /* (F, D) */
    }
    add_norm(w, b, "output_norm.weight", D);                    /* (D) */
    add_matrix(w, b, "output.weight", D, V);                    /* (V, D) */
    assert(b->n_tensors == n_tensors);
    return ST_OK;
}

/* The vocabulary described in the header comment. */
static int add_tokenizer(GgufWriter *w, Builder *b, Err *e) {
    int V = b->shape.vocab;
    b->piece_text = mem_alloc((size_t)V * PIECE_CAP);
    b->pieces = mem_alloc((size_t)V * sizeof *b->pieces);
    b->scores = mem_alloc((size_t)V * sizeof *b->scores);
    b->token_types = mem_alloc((size_t)V * sizeof *b->token_types);
    if (!b->piece_text || !b->pieces || !b->scores || !b->token_types)
        return err_set(e, ST_NOMEM, "out of memory for a vocabulary of %d pieces", V);

    int next_char = 0x21;          /* printable ASCII after the bytes, then U+2581 */
    for (int id = 0; id < V; id++) {
        char *p = b->piece_text + (size_t)id * PIECE_CAP;
        b->pieces[id] = p;
        b->scores[id] = 0.0f;
        b->token_types[id] = TT_NORMAL;
        if (id < N_SPECIAL) {
            static const char *const special[N_SPECIAL] = {"<unk>", "<s>", "</s>"};
            strcpy(p, special[id]);
            b->token_types[id] = id == 0 ? TT_UNKNOWN : TT_CONTROL;
        } else if (id < FIRST_BYTE_TOKEN + 256) {
            snprintf(p, PIECE_CAP, "<0x%02X>", id - FIRST_BYTE_TOKEN);
            b->token_types[id] = TT_BYTE;
        } else if (next_char <= 0x7f) {
            if (next_char < 0x7f) snprintf(p, PIECE_CAP, "%c", next_char);
            else strcpy(p, "\xe2\x96\x81");                       /* U+2581 */
            next_char++;
            b->scores[id] = -(float)id;
        } else {
            snprintf(p, PIECE_CAP, "<filler%d>", id);            /* unique, never typed */
            b->scores[id] = -(float)id;
        }
    }
    gguf_w_add_str(w, "tokenizer.ggml.model", "llama");
    gguf_w_add_str_array(w, "tokenizer.ggml.tokens", b->pieces, (uint64_t)V);
    gguf_w_add_f32_array(w, "tokenizer.ggml.scores", b->scores, (uint64_t)V);
    gguf_w_add_i32_array(w, "tokenizer.ggml.token_type", b->token_types, (uint64_t)V);
    gguf_w_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_w_add_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_w_add_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    gguf_w_add_bool(w, "tokenizer.ggml.add_bos_token", 1);
    gguf_w_add_bool(w, "tokenizer.ggml.add_eos_token", 0);
    return ST_OK;
}

static void add_hparams(GgufWriter *w, const Builder *b) {
    const Shape *s = &b->shape;
    /* llama.cpp's general.file_type: the type most tensors have */
    uint32_t file_type = 0;
    switch (b->type) {   /* llama_ftype's numbers, ALL_ rather than the _M mixes */
    case DT_F32: file_type = 0; break;
    case DT_F16: file_type = 1; break;
    case DT_Q4_0: file_type = 2; break;
    case DT_Q4_1: file_type = 3; break;
    case DT_Q8_0: file_type = 7; break;
    case DT_Q5_0: file_type = 8; break;
    case DT_Q5_1: file_type = 9; break;
    case DT_Q4_K: file_type = 14; break;   /* Q4_K_S */
    case DT_Q5_K: file_type = 16; break;   /* Q5_K_S */
    case DT_Q6_K: file_type = 18; break;
    case DT_BF16: file_type = 32; break;
    case DT_BF16E: break;   /* made in memory only, never a file's type */
    }
    char desc[128];
    snprintf(desc, sizeof desc, "random weights from tools/mkmodel.c, seed %llu",
             (unsigned long long)b->seed);
    gguf_w_add_str(w, "general.architecture", s->arch);
    gguf_w_add_str(w, "general.name", s->name);
    gguf_w_add_str(w, "general.description", desc);
    gguf_w_add_u32(w, "general.file_type", file_type);
    if (b->type == DT_Q8_0 || dtype_is_small_quant(b->type))
        gguf_w_add_u32(w, "general.quantization_version", 2);
    char key[64];
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", s->arch, suffix), key)
    gguf_w_add_u32(w, KEY("context_length"), (uint32_t)s->ctx);
    gguf_w_add_u32(w, KEY("embedding_length"), (uint32_t)s->dim);
    gguf_w_add_u32(w, KEY("block_count"), (uint32_t)s->layers);
    gguf_w_add_u32(w, KEY("feed_forward_length"), (uint32_t)s->hidden);
    gguf_w_add_u32(w, KEY("rope.dimension_count"), (uint32_t)head_dim(s));
    gguf_w_add_u32(w, KEY("attention.head_count"), (uint32_t)s->heads);
    gguf_w_add_u32(w, KEY("attention.head_count_kv"), (uint32_t)s->kv_heads);
    if (strcmp(s->arch, "qwen3") == 0) {
        gguf_w_add_u32(w, KEY("attention.key_length"), (uint32_t)head_dim(s));
        gguf_w_add_u32(w, KEY("attention.value_length"), (uint32_t)head_dim(s));
    }
    gguf_w_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), RMS_EPS);
    gguf_w_add_f32(w, KEY("rope.freq_base"), strcmp(s->arch, "llama") ? QWEN_ROPE_BASE : ROPE_BASE);
    gguf_w_add_u32(w, KEY("vocab_size"), (uint32_t)s->vocab);
#undef KEY
}

static void builder_free(Builder *b) {
    mem_free(b->gens);
    mem_free(b->piece_text);
    mem_free(b->pieces);
    mem_free(b->scores);
    mem_free(b->token_types);
}

/* ------------------------------------------------------------ arguments */

typedef struct {
    Shape shape;
    DType type;
    uint64_t seed;
    int size_only;
    int help;          /* --help / -h: print the usage and stop */
    const char *out;
} Args;

static void usage(FILE *f) {
    fprintf(f,
            "usage: mkmodel [--preset NAME] [--dim D] [--hidden F] [--layers L] [--heads H]\n"
            "               [--kv-heads Hkv] [--vocab V] [--ctx P] [--type T]\n"
            "               [--arch llama|qwen2|qwen3] [--head-dim S] [--seed N] [--size-only] OUT.gguf\n"
            "presets (D F L H Hkv V P arch S):\n");
    for (int i = 0; i < N_PRESETS; i++) {
        const Shape *s = &PRESETS[i];
        fprintf(f, "  %-12s %d %d %d %d %d %d %d %s %d\n", s->name, s->dim, s->hidden, s->layers,
                s->heads, s->kv_heads, s->vocab, s->ctx, s->arch, head_dim(s));
    }
    fprintf(f, "Shape flags override the preset's values; without a preset all seven are needed\n"
               "(--arch defaults to llama, --head-dim to D / H).\n"
               "--type (default f32) applies to every matrix; norms are always F32.\n"
               "--size-only prints the number of bytes the file would have and writes nothing.\n");
}

/* A whole decimal integer in [lo, hi], or ST_ARG with a message. */
static int parse_int(const char *flag, const char *text, long long lo, long long hi, long long *out,
                     Err *e) {
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi)
        return err_set(e, ST_ARG, "%s wants an integer in %lld..%lld, got '%s'", flag, lo, hi, text);
    *out = v;
    return ST_OK;
}

static int check_shape(const Shape *s, DType type, Err *e) {
    if (!s->head_dim && s->dim % s->heads)
        return err_set(e, ST_ARG, "--dim %d is not a multiple of --heads %d", s->dim, s->heads);
    if (s->head_dim && strcmp(s->arch, "qwen3"))
        return err_set(e, ST_ARG, "--head-dim is for qwen3 (llama and qwen2 take D / H)");
    if (s->heads % s->kv_heads)
        return err_set(e, ST_ARG, "--heads %d is not a multiple of --kv-heads %d", s->heads,
                       s->kv_heads);
    if (head_dim(s) % 2)
        return err_set(e, ST_ARG, "head size %d is odd; RoPE rotates pairs", head_dim(s));
    if ((s->heads * head_dim(s)) % dtype_block(type))
        return err_set(e, ST_ARG, "%s needs heads x head size to be a multiple of %d (got %d)",
                       dtype_name(type), dtype_block(type), s->heads * head_dim(s));
    if (s->vocab < MIN_VOCAB)
        return err_set(e, ST_ARG, "--vocab %d is below %d (3 special and 256 byte pieces)", s->vocab,
                       MIN_VOCAB);
    int B = dtype_block(type);
    if (s->dim % B || s->hidden % B)
        return err_set(e, ST_ARG, "%s needs --dim and --hidden to be multiples of %d (got %d, %d)",
                       dtype_name(type), B, s->dim, s->hidden);
    return ST_OK;
}

static int parse_args(int argc, char **argv, Args *a, Err *e) {
    static const char *const flags[] = {"--dim", "--hidden", "--layers", "--heads",
                                        "--kv-heads", "--vocab", "--ctx"};
    static const long long max[] = {1 << 16, 1 << 18, 1024, 1024, 1024, 1 << 22, 1 << 20};
    int given[7] = {-1, -1, -1, -1, -1, -1, -1};   /* shape flags, in the order above */
    const Shape *preset = NULL;
    const char *arch = NULL;   /* --arch, over the preset's */
    int head = -1;             /* --head-dim, over the preset's */
    a->type = DT_F32;
    a->seed = 1;
    a->size_only = 0;
    a->help = 0;
    a->out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            a->help = 1;
            return ST_OK;
        }
        if (strcmp(arg, "--size-only") == 0) {
            a->size_only = 1;
            continue;
        }
        if (arg[0] != '-' || arg[1] == 0) {
            if (a->out) return err_set(e, ST_ARG, "two output paths: '%s' and '%s'", a->out, arg);
            a->out = arg;
            continue;
        }
        int f = 0;
        while (f < 7 && strcmp(arg, flags[f]) != 0) f++;
        if (f == 7 && strcmp(arg, "--preset") && strcmp(arg, "--type") && strcmp(arg, "--seed") &&
            strcmp(arg, "--arch") && strcmp(arg, "--head-dim"))
            return err_set(e, ST_ARG, "unknown option %s (see --help)", arg);
        if (i + 1 >= argc) return err_set(e, ST_ARG, "%s needs a value", arg);
        const char *val = argv[++i];
        long long v;
        if (f < 7) {
            if (parse_int(arg, val, 1, max[f], &v, e)) return ST_ARG;
            given[f] = (int)v;
        } else if (strcmp(arg, "--preset") == 0) {
            for (int p = 0; p < N_PRESETS; p++)
                if (strcmp(val, PRESETS[p].name) == 0) preset = &PRESETS[p];
            if (!preset)
                return err_set(e, ST_ARG, "unknown preset '%s' (stories15M, stories110M, tinyllama, "
                               "qwen2.5-0.5b, qwen3-0.6b)", val);
        } else if (strcmp(arg, "--type") == 0) {
            if (strcmp(val, "f32") == 0) a->type = DT_F32;
            else if (strcmp(val, "f16") == 0) a->type = DT_F16;
            else if (strcmp(val, "q8_0") == 0) a->type = DT_Q8_0;
            else if (strcmp(val, "bf16") == 0) a->type = DT_BF16;
            else if (strcmp(val, "q4_0") == 0) a->type = DT_Q4_0;
            else if (strcmp(val, "q4_1") == 0) a->type = DT_Q4_1;
            else if (strcmp(val, "q5_0") == 0) a->type = DT_Q5_0;
            else if (strcmp(val, "q5_1") == 0) a->type = DT_Q5_1;
            else if (strcmp(val, "q4_k") == 0) a->type = DT_Q4_K;
            else if (strcmp(val, "q5_k") == 0) a->type = DT_Q5_K;
            else if (strcmp(val, "q6_k") == 0) a->type = DT_Q6_K;
            else return err_set(e, ST_ARG, "--type wants f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, "
                                "q5_1, q4_k, q5_k or q6_k, got '%s'", val);
        } else if (strcmp(arg, "--arch") == 0) {
            if (strcmp(val, "llama") && strcmp(val, "qwen2") && strcmp(val, "qwen3"))
                return err_set(e, ST_ARG, "--arch wants llama, qwen2 or qwen3, got '%s'", val);
            arch = val;
        } else if (strcmp(arg, "--head-dim") == 0) {
            if (parse_int(arg, val, 2, 1 << 12, &v, e)) return ST_ARG;
            head = (int)v;
        } else {   /* --seed */
            if (parse_int(arg, val, 0, INT64_MAX, &v, e)) return ST_ARG;
            a->seed = (uint64_t)v;
        }
    }
    if (!a->out) return err_set(e, ST_ARG, "no output path given");

    /* The preset's shape, then each flag given on top of it (the name then
     * no longer applies). Without a preset, every flag is needed. */
    Shape s = preset ? *preset : (Shape){"custom", 0, 0, 0, 0, 0, 0, 0, "llama", 0};
    if (arch && strcmp(arch, s.arch)) {
        s.arch = arch;
        s.name = "custom";
        if (strcmp(arch, "qwen3")) s.head_dim = 0;
    }
    if (head >= 0) {
        s.head_dim = head;
        s.name = "custom";
    }
    int *field[] = {&s.dim, &s.hidden, &s.layers, &s.heads, &s.kv_heads, &s.vocab, &s.ctx};
    for (int f = 0; f < 7; f++) {
        if (given[f] >= 0) {
            *field[f] = given[f];
            s.name = "custom";
        } else if (!preset) {
            return err_set(e, ST_ARG, "%s is needed when no --preset is given", flags[f]);
        }
    }
    a->shape = s;
    return check_shape(&a->shape, a->type, e);
}

/* ------------------------------------------------------------------ main */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc == 1) {
        usage(stdout);
        return 0;
    }
    Args a;
    Err e = {{0}};
    if (parse_args(argc, argv, &a, &e)) {
        fprintf(stderr, "mkmodel: %s\n", e.msg);
        return 2;
    }
    if (a.help) {
        usage(stdout);
        return 0;
    }
    const Shape *s = &a.shape;
    double t0 = now_s();
    Builder b = {.shape = *s, .type = a.type, .seed = a.seed};
    GgufWriter w;
    gguf_w_init(&w, a.out);
    add_hparams(&w, &b);
    int st = add_tokenizer(&w, &b, &e);
    if (st == ST_OK) st = add_tensors(&w, &b, &e);
    if (st == ST_OK && a.size_only) {
        st = w.status;   /* a description error shows up here rather than in write */
        if (st == ST_OK) printf("%llu\n", (unsigned long long)gguf_w_file_size(&w));
        else e = w.err;
    } else if (st == ST_OK) {
        st = gguf_w_write(&w, &e);
    }
    uint64_t bytes = gguf_w_file_size(&w);
    gguf_w_free(&w);
    builder_free(&b);
    if (st != ST_OK) {
        fprintf(stderr, "mkmodel: %s\n", e.msg);
        return 1;
    }
    if (a.size_only) return 0;
    double sec = now_s() - t0;
    printf("mkmodel: wrote %s: %s (%s), D=%d F=%d L=%d H=%d Hkv=%d S=%d V=%d P=%d, %s matrices, "
           "%.2fM parameters, %.3f GB in %.1f s (%.0f MB/s), seed %llu\n",
           a.out, s->name, s->arch, s->dim, s->hidden, s->layers, s->heads, s->kv_heads, head_dim(s), s->vocab,
           s->ctx,
           dtype_name(a.type), 1e-6 * (double)b.n_params, 1e-9 * (double)bytes, sec,
           1e-6 * (double)bytes / sec, (unsigned long long)a.seed);
    return 0;
}
