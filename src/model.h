/* model.h - a Llama-style transformer: weights, loading, and the forward pass.
 *
 * Dimensions, named once: T tokens in this call, D model width (dim),
 * F FFN width (hidden_dim), H query heads, Hkv key/value heads, S head size
 * (D / H), V vocabulary, L layers, P context length (seq_len). */
#ifndef MODEL_H
#define MODEL_H
#include "base/err.h"
#include "load/gguf.h"
#include "codec/lowmem.h"
#include "kernels/ops.h"
#include "text/tokenizer.h"
#include "codec/wcodec.h"

/* The architectures this engine runs: Llama, and two that differ from it in
 * three places of the attention block (model.c marks each). */
typedef enum {
    ARCH_LLAMA = 0,
    ARCH_QWEN2,       /* biases after the Q, K and V products; NEOX rotation */
    ARCH_QWEN3,       /* an RMSNorm on each head's Q and K before RoPE; its own head size; NEOX */
} ModelArch;

const char *model_arch_name(ModelArch a);   /* "llama", "qwen2", "qwen3" */

typedef struct {
    int dim;          /* D */
    int hidden_dim;   /* F */
    int n_layers;     /* L */
    int n_heads;      /* H */
    int n_kv_heads;   /* Hkv; H % Hkv == 0, each KV head serves H / Hkv query heads */
    int head_dim;     /* S: D / H for Llama; Qwen3 names its own (attention.key_length) */
    int vocab_size;   /* V */
    int seq_len;      /* P: positions the model was trained for */
    int n_rot;        /* RoPE rotates the first n_rot dims of each head (usually S) */
    float rope_base;  /* theta: pair i turns by pos * base^(-2i / n_rot) */
    float rms_eps;
    ModelArch arch;   /* what the forward pass adds to Llama's (notes/model.md, "Qwen") */
    int rope_neox;    /* RoPE's pairs: 0 adjacent (x[2i], x[2i+1]), Llama; 1 the two halves of
                         each head (x[i], x[i + n_rot/2]), "NEOX", Qwen2 and Qwen3 */
} ModelConfig;

typedef struct {
    const float *attn_norm;   /* (D) */
    Mat wq;                   /* (H*S, D) */
    Mat wk;                   /* (Hkv*S, D) */
    Mat wv;                   /* (Hkv*S, D) */
    Mat wo;                   /* (D, H*S) */
    const float *ffn_norm;    /* (D) */
    Mat w_gate;               /* (F, D)  "w1" in llama2.c */
    Mat w_down;               /* (D, F)  "w2" */
    Mat w_up;                 /* (F, D)  "w3" */
    const float *bq, *bk, *bv;        /* Qwen2: (H*S), (Hkv*S), (Hkv*S) added after the
                                         products; NULL for the others */
    const float *q_norm, *k_norm;     /* Qwen3: (S) each head's RMSNorm weights, Q and K,
                                         before RoPE; NULL for the others */
} Layer;

/* A coded matrix of a compressed file (wcodec.h, tools/compress.c) and the
 * Mat it stands for. */
typedef struct {
    WcTensor wt;
    Mat *mat;                 /* in layers[], or tok_embd / output */
    int layer;                /* its layer, -1 for the embedding and the classifier */
    int part;                 /* its place in its layer's unit (lowmem.h) */
    char name[96];            /* its tensor's name, for messages */
} CodedMat;

typedef struct {
    ModelConfig cfg;
    const char *format;       /* "gguf" or "llama2.c" */
    DType wtype;              /* type of the big matrices (for reports) */
    Mat tok_embd;             /* (V, D), rows looked up, any type */
    Layer *layers;            /* (L) */
    const float *out_norm;    /* (D) */
    Mat output;               /* (V, D) classifier; may share tok_embd's data */
    const float *rope_freqs;  /* (n_rot/2) Llama 3: pair i's angle is divided by
                                 rope_freqs[i] (rope_freqs.weight); NULL: none */
    size_t weight_bytes;      /* bytes of all weights (what one token reads, about) */
    Tokenizer *tok;
    /* ownership */
    Gguf gguf;                /* when format is gguf */
    const void *map;          /* llama2.c: the mapped checkpoint */
    size_t map_size;
    float *owned;             /* norms widened to float when the file stores them narrower */
    /* A compressed file's coded matrices: decoded once at load into `decoded`,
     * or, with low_mem, kept coded and decoded a layer at a time by `lowmem`:
     * units 0 .. L-1 are the layers, then the classifier in pieces of
     * head_rows rows (each no bigger than a layer). */
    CodedMat *coded;
    int n_coded;
    size_t coded_bytes;       /* their bytes in the file */
    void *decoded;            /* (decoded_bytes) not low_mem */
    size_t decoded_bytes;
    double decode_load_s;     /* seconds decoding at load (low_mem: verifying) */
    LowMem *lowmem;
    int fast_tier;            /* low_mem on the codec's fast tier: the coded BF16 matrices
                                 rewritten at load as BF16E (codec/expcode.h) into `decoded`,
                                 read by the products as they are; lowmem stays NULL */
    int tier_on_gpu;          /* fast_tier with --device cuda: the GPU built it from the file's
                                 rANS planes (kernels/gpu.h GpuAtRest); `decoded` holds only each
                                 matrix's Bf16eData, table and row index, without blocks */
    struct GpuModel *gpu;     /* --device cuda: the weights on the GPU (kernels/gpu.h); NULL on the CPU */
    const WcTensor *embd_coded, *head_coded;   /* low_mem: rows decoded on demand */
    int head_rows, head_pieces;
    uint8_t *rows8;           /* (rows8_bytes) the Q4_0, Q8_0 matrices copied in eights at load where
                                 ops_rows8 asks for them (formats.h); their rows' pages of
                                 the mapping are given back */
    size_t rows8_bytes;
    uint8_t *copies;          /* (copies_bytes) the matrices read in place otherwise, copied at load into
                                 huge pages (LLM_COPY=1; else none); their pages of the mapping are given back */
    size_t copies_bytes;
} Model;

/* Where the forward pass runs. */
typedef enum { DEVICE_CPU = 0, DEVICE_CUDA = 1 } Device;

typedef struct {
    int low_mem;              /* keep coded matrices coded (see Model) */
    Device device;            /* DEVICE_CUDA: weights uploaded at load, every forward pass
                                 on the GPU (build/cuda only; notes/cuda.md) */
    int serial;               /* low_mem without the helper thread: decode when asked */
    int rans_tier;            /* low_mem: decode a layer at a time (lowmem) even where
                                 the fast tier could hold the matrices (every coded one
                                 BF16 with rows of whole blocks of 64) */
} ModelOpts;

/* Load a model by content: GGUF ("GGUF" magic) or a llama2.c checkpoint, whose
 * tokenizer.bin is tokenizer_path (NULL: tokenizer.bin beside the model).
 * Weights stay in the mapping, but for the matrices that the AVX2 path reads
 * in eights (Model.rows8), copied at load into huge pages, and with
 * LLM_COPY=1 the other big matrices too, as they are (Model.copies). */
int model_load(Model *m, const char *path, const char *tokenizer_path, Err *e);
/* The same with options (NULL: the defaults, as model_load). low_mem is
 * refused for a file that has no coded matrices. */
int model_load_opts(Model *m, const char *path, const char *tokenizer_path, const ModelOpts *o, Err *e);
void model_free(Model *m);                  /* accepts a zeroed Model */

/* The model's memory figures at one moment, by value (notes/stages.md,
 * "Snapshots"). */
typedef struct {
    size_t mapped;               /* bytes of the file mapped (the weights read in place) */
    size_t coded, decoded;       /* compressed files: the coded bytes; the decoded ones */
    double decode_load_s;        /* decoding at load */
    int low_mem;                 /* 1: weights decoded on demand; lm holds the decoder's figures */
    int fast_tier;               /* low_mem on the fast tier: 1 built at load here (decoded: its bytes),
                                    2 built on the GPU from the file's rANS planes */
    size_t rows8;                /* bytes of matrices copied in eights at load (Q4_0, Q8_0, Q4_K, Q6_K) */
    size_t copied;               /* bytes of the other matrices copied at load into huge pages */
    LmStats lm;
} ModelStats;
ModelStats model_stats(const Model *m);
/* Bytes of the mapping in memory now (mincore: a whole-file walk, so call it
 * at the end of a run, not every step). */
size_t model_resident_bytes(const Model *m);

/* Activations (and, for runstate_init, a contiguous KV cache for one
 * sequence of up to P tokens). Everything the forward pass touches is
 * allocated here, once. */
typedef struct {
    int max_T;            /* most tokens one forward call may take */
    int max_logits;       /* most rows of logits one call may ask for */
    float *x;             /* (max_T, D) residual stream */
    float *xb;            /* (max_T, D) normed input of a sublayer */
    float *q;             /* (max_T, H*S) */
    float *k, *v;         /* (max_T, Hkv*S) */
    float *att_out;       /* (max_T, H*S) */
    float *proj;          /* (max_T, D) output of wo / w_down */
    float *hb, *hb2;      /* (max_T, F) gate and up */
    float *logits;        /* (max_logits, V) */
    float *rope_cs;       /* (P, n_rot/2, 2) cos and sin for every position */
    float *key_cache;     /* (L, P, Hkv*S) runstate_init only, else NULL */
    float *value_cache;   /* (L, P, Hkv*S) */
    int *b_pos, *b_slot, *b_rows;   /* (max_T) the batch model_forward builds */
    int *b_seq;           /* (max_T) zeros: model_forward's one sequence */
    float *row;           /* (D) low_mem: an embedding row's bytes, decoded */
    float *head;          /* (max_logits, head_rows) low_mem: one piece of the logits */
    void *scratch;        /* quantized activations, widened weight rows */
    void *block_;         /* the one allocation all of the above are carved from */
    size_t bytes;         /* total allocated */
    Err err;              /* why the last forward pass gave NaN logits, when it knows (a weight
                             that could not be decoded under --low-mem, a GPU error); "" else */
} RunState;

/* For model_forward: activations for max_T tokens and a contiguous cache. */
int runstate_init(RunState *s, const Model *m, int max_T, Err *e);
/* For model_forward_batch: activations for max_T tokens, logits for
 * max_logits rows, no cache (K/V live in a paged pool the caller owns). */
int runstate_init_paged(RunState *s, const Model *m, int max_T, int max_logits, Err *e);
void runstate_free(RunState *s);            /* accepts a zeroed RunState */

/* Run T tokens of one sequence at positions pos .. pos+T-1 against the
 * RunState's contiguous cache (causal; earlier positions must already be in
 * it). Returns the logits: of the last token, or of all T rows (T, V) when
 * all_logits is set. Preconditions, checked by the caller: 1 <= T <= max_T,
 * pos + T <= P, 0 <= tokens[i] < V. */
float *model_forward(const Model *m, RunState *s, const int *tokens, int T, int pos, int all_logits);

/* Where K/V live: blocks of BS token rows, (L, NB, BS, Hkv*S) floats each for
 * K and V (kv_paged.h's layout). A contiguous cache is one block of P rows. */
typedef struct {
    float *key, *value;
    int NB, BS;
} KvStore;

/* A batch: tokens of several sequences, each a run of consecutive positions
 * (a prefill chunk, or one decode token). Row t is token[t] of sequence
 * seq[t] at position pos[t]; its K/V are written to slot[t] (block * BS + row)
 * and it attends to positions 0 .. pos[t] of its sequence, read through
 * table[seq[t]] (position p is in block table[..][p / BS], row p % BS). */
typedef struct {
    int T;
    const int *token, *pos, *seq, *slot;      /* (T) each */
    const int *const *table;                  /* (sequences) block tables */
    int n_logits;                             /* rows whose logits are wanted */
    const int *logit_row;                     /* (n_logits) ascending rows */
    /* Copy-on-write copies the pool made for this step (kv_take_copies):
     * (src block, dst block, rows) each, already done in the host pool; a
     * GPU's pool makes them before the step. -1: some were lost. */
    int n_copies;
    const int *copies;
} Batch;

/* Run a batch: one matrix product per weight for all T rows, paged attention
 * per row. Returns the logits (n_logits, V), row i for logit_row[i].
 * Preconditions (the executor's job): 1 <= T <= max_T, n_logits <= max_logits,
 * positions < P, slots reserved, positions before each run already written. */
float *model_forward_batch(const Model *m, RunState *s, const KvStore *kv, const Batch *b);
/* With low_mem, a coded layer that fails to decode mid-run (the file changed
 * under the mapping; every unit was decoded once at load) makes every logit
 * NaN, which the executor reports as an error for each sequence: never
 * logits computed from garbage. */

/* The attention of one query head q (S floats) over positions 0 .. n-1 of a
 * sequence, into out (S floats): softmax(q . k * scale) over the keys, applied
 * to the values, in one pass (online softmax). Position p's key is the row
 * table[p / BS] * BS + p % BS of kbase (rows of kvd floats), its value the
 * same row of vbase. model_forward_batch calls it for every token and head;
 * it is public for its tests (tests/test_model.c). */
void model_attend_paged(float *out, const float *q, const float *kbase, const float *vbase,
                        const int *table, int BS, int n, int S, size_t kvd, float scale);

#endif
