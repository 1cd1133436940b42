/* gpu_kernels.cuh - the CUDA kernels' launchers, for gpu_model.cu and the
 * checker (tools/kcheck.cu). Each launcher names the C reference it
 * mirrors; the kernel files open with the mapping of work to threads.
 *
 * Every pointer here is a device pointer. Launchers return the number of
 * kernels they launched (the figure "kernels per token" counts them). */
#ifndef GPU_KERNELS_CUH
#define GPU_KERNELS_CUH
#include <cuda_runtime.h>
#include <stdint.h>
extern "C" {
#include "kernels/ops.h"
#include "kernels/gpu.h"
}

/* A weight matrix on the GPU: F32, F16 or BF16 rows as in the file (ops.h's
 * Mat, with a device pointer). Q8_0 is split at upload (gpu_pack_q8_0): w
 * holds the int8 values, N rows of K bytes (16-byte aligned, so a lane reads
 * 16 of them in one load), and d the fp16 scales, N rows of K / 32; the same
 * numbers as the file's 34-byte blocks, in two planes. */
typedef struct DevCoded DevCoded;
typedef struct {
    DType type;
    int N, K;
    const void *w;
    const uint16_t *d;       /* Q8_0: (N, K / 32) scales; else NULL */
    const DevCoded *coded;   /* BF16E: its parts (a host pointer; kernels never read it); else NULL */
} DevMat;

/* A BF16E matrix on the GPU (formats.h's Bf16eData, the same numbers and
 * sizes, laid out by gpu_pack_bf16e for the decoder): blocks of 64 weights
 * in 88 bytes, row after row, each its 64 sign and mantissa bytes in the
 * weights' order, then for each quarter (weights 16 j .. 16 j + 15) their
 * 3-bit codes as a 48-bit number, weight 16 j + i at bit 3 i; the escaped
 * exponents of row n after esc_row[n] of them, in the weights' order.
 * exps_lo and exps_hi hold the exponents of codes 0-3 and 4-7, a byte
 * each, as __byte_perm selects. */
typedef struct {
    const uint8_t *blocks;   /* (N, K / 64) blocks of 88 bytes */
    const uint32_t *esc_row; /* (N + 1) */
    const uint8_t *esc;      /* (esc_row[N]) escaped exponents, rotated right by one bit */
    uint32_t exps_lo, exps_hi;
    int N;
} DevBf16e;
/* A stacked matrix (q|k|v, gate|up) whose parts are BF16E, each with its
 * own exponent table: part i holds the next part[i].N rows. */
struct DevCoded {
    int n_parts;
    DevBf16e part[3];
};

/* The rows of a BF16E matrix (bf16e: its Bf16eData, N rows of K) in the
 * GPU's layout, on the host: blocks (N * K / 64 * 88 bytes) and esc (as many
 * as the matrix has). */
void gpu_pack_bf16e(uint8_t *blocks, uint8_t *esc, const void *bf16e, int N, int K);

/* Rows of a BF16E part decoded (bf16e_row_to_bf16 in src/kernels/ref.c, bit
 * for bit) into out, n rows of K values as BF16 (as = DT_BF16) or widened
 * to F32 (as = DT_F32): rows r0 .. r0 + n - 1, or, where rows is not NULL,
 * rows[0 .. n - 1] (a device array no kernel of the step writes: the
 * embedding's tokens). Launched with programmatic dependent launch: its
 * loads of P start before the kernel ahead ends, its stores after; with
 * `early`, its stores too, so that it runs beside the kernel ahead: only
 * for an `out` that no kernel still running may read (gpu_model.cu's
 * second buffer, once the product that read it has passed its wait). */
int gpu_bf16e_decode(void *out, DType as, const DevBf16e *P, int K, int r0, int n, const int *rows, int early,
                     cudaStream_t st);

/* An rANS stream on the GPU (gpu.h's GpuRansHost uploaded), for the chunk
 * decoder (symbol -> freq | start << 16). */
typedef struct {
    const uint8_t *payload;
    const uint8_t *index;
    const uint8_t *slot_sym;
    const uint32_t *info;    /* (256) */
    int bits, n_states;
    uint32_t chunk_size, L;
    uint64_t n, n_chunks;
    void *mem;               /* the one allocation behind the pointers */
} GpuRans;
/* Upload a stream and its tables; gpu_rans_free frees it. 0 or a cudaError_t. */
int gpu_rans_upload(GpuRans *g, const GpuRansHost *h);
void gpu_rans_free(GpuRans *g);
/* Decode every chunk into out (n bytes): a warp per chunk, lane j its
 * state j, as rans.c's decode_plain does, bit for bit. A chunk whose
 * payload runs out or does not end with every state at L and every byte
 * read sets *bad (a device u64, set to ~0 before) to the smallest such
 * chunk. */
int gpu_rans_decode(uint8_t *out, const GpuRans *g, unsigned long long *bad, cudaStream_t st);

/* The fast tier of one BF16 matrix at rest (gpu.h GpuAtRest, N rows of K,
 * K % 64 == 0), built on the GPU to the bytes gpu_pack_bf16e makes of the
 * CPU's (model_load.c build_fast_tier), in two calls, since the caller
 * allocates once the escapes are known:
 *   gpu_rest_begin: the planes decoded into work (2 N K bytes of GPU memory;
 *     a damaged chunk is ST_FORMAT, one line naming plane and chunk), the
 *     exponents counted, the table chosen by `choose` (expcode.h ec_table),
 *     the escapes counted by row into esc_row (host, N + 1: before each row);
 *   gpu_rest_finish: P's esc_row uploaded, its blocks and escapes written
 *     (P's pointers: GPU memory of the sizes upload_coded gives them), and
 *     P's table set; synchronous.
 * gpu_rest_free frees work and esc_row, after either or on failure. */
typedef struct {
    uint8_t *work;           /* GPU: the exponent plane, the sign and mantissa plane, 256 counts */
    uint8_t exps[8];         /* the table (codes 0-6) */
    uint32_t exps_lo, exps_hi;
    uint64_t escapes;
    uint32_t *esc_row;       /* host (N + 1) */
    size_t coded_bytes;      /* rANS payload bytes decoded */
} GpuRestPart;
int gpu_rest_begin(GpuRestPart *p, const GpuAtRest *r, int N, int K, uint64_t (*choose)(const uint64_t *, uint8_t *),
                   Err *e);
int gpu_rest_finish(DevBf16e *P, GpuRestPart *p, int K, Err *e, const char *name);
void gpu_rest_free(GpuRestPart *p);

/* Q8_0 rows as the file lays them out (N rows of K / 32 blocks) into the two
 * planes of a DevMat, on the host. */
void gpu_pack_q8_0(int8_t *qs, uint16_t *d, const void *rows, int N, int K);

/* What a product does to its input before the weights see it: nothing, the
 * RMSNorm of the row (ops.c rmsnorm), or SwiGLU of its two halves (ops.c
 * swiglu; x2 the up half). Fusing them into the product saves a kernel and
 * a round trip through memory per sublayer. */
enum { PRE_NONE = 0, PRE_NORM = 1, PRE_SWIGLU = 2, PRE_READY = 3 };

/* RoPE and the K/V store done by the q|k|v product as it writes its rows
 * (gpu_rope_store's work, the same operations, so the same bits): rows
 * q (H*S) | k (Hkv*S) | v (Hkv*S); the pairs (2p, 2p+1) of each q and k head
 * below n_rot rotated by the row's position, then k and v copied to the
 * row's slot of this layer's cache. */
typedef struct {
    float *kc, *vc;          /* this layer's (NB * BS, Hkv * S) rows */
    const int *pos, *slot;   /* (T) */
    const float *rope_cs;    /* (P, n_rot / 2, 2) */
    int H, Hkv, S, n_rot;
} RopeKv;

typedef struct {
    float *out;              /* (T, ldo) */
    int ldo;
    int accumulate;          /* out += product (the residual add), else out = product */
    const float *x;          /* input rows, ldx apart */
    int ldx;
    const int *rows;         /* token t reads row rows[t] of x; NULL: row t */
    int pre;                 /* PRE_* (PRE_READY: x is gpu_prepare's output) */
    const float *norm;       /* PRE_NORM: (K) weights */
    float eps;
    const float *x2;         /* PRE_SWIGLU: the up half, ldx apart like x */
    int T;
    int use_rope;            /* rows are q|k|v: apply `rope` as they are written (rows NULL, no accumulate) */
    RopeKv rope;
    int late;                /* W was written by a kernel of this step (decoded BF16E): read it only after
                                pdl_wait, where it would otherwise be asked for before */
    int swiglu_out;          /* one token (T = 1), W gate|up stacked (N = 2F, F even), float weights:
                                each group of 4 rows is gate p, p+1 and up p, p+1, and the product
                                writes silu(gate) * up of its two pairs into out (F floats, gpu_prepare's
                                layout) instead of the rows; no accumulate, no RoPE; ignored (rows
                                written) for Q8_0 and for more tokens */
    int *signal;             /* LLM_CUDA_FLAGS, one token, with use_rope: after its rows are written, a block adds
                                how many rows of each key/value group it wrote (q heads of the group, its
                                k and v) to signal[group] */
    const int *wait_on;      /* LLM_CUDA_FLAGS, one token: wait until *wait_on >= wait_for instead of for the whole
                                kernel ahead (pdl_wait); NULL: pdl_wait */
    int wait_for;
} MvArgs;

/* out = pre(x) @ W^T as matmul_ref (ops.c), one token tile of up to 8 rows per
 * thread block. Each (row, token) sum is added in the same order whatever T
 * is: a batch gives every sequence the bits it would get alone. Q8_0 rounds
 * the activations to Q8_0 blocks first, as quantize_row_q8_0 does. */
int gpu_matvec(const DevMat *W, const MvArgs *a, cudaStream_t st);
/* The prologue of gpu_matvec done once for all T rows, into `ready` (for
 * float weights T rows of Kp = K rounded up to 8 floats; for Q8_0 T rows of
 * K int8 values, then at ready_q8_scales the T rows of K / 32 scales),
 * which a gpu_matvec with pre = PRE_READY and x = ready then reads: the
 * same bits as the fused prologue, which a block of 32 rows would otherwise
 * compute again for its tokens (the bulk of the work at T = 64 or 512).
 * ready holds gpu_ready_bytes(W, T) bytes. */
int gpu_prepare(void *ready, const DevMat *W, const MvArgs *a, cudaStream_t st);
size_t gpu_ready_bytes(const DevMat *W, int T);
/* gpu_prepare for a PRE_SWIGLU product, elementwise over many blocks: the
 * same bits into the same layout, sooner for few rows. */
int gpu_swiglu_apart(void *ready, const DevMat *W, const MvArgs *a, cudaStream_t st);

/* pre(x) written out as (T, K) floats: the input of a cuBLAS product. */
int gpu_prologue(float *out, const DevMat *W, const MvArgs *a, cudaStream_t st);
/* W widened to (N, K) floats (ops.c dequantize_row, every row). */
int gpu_dequantize(float *out, const DevMat *W, cudaStream_t st);
/* x[t] = row token[t] of the embedding, widened (model.c's first loop);
 * and zero[0 .. nzero) set to 0 (the step's counters; NULL, 0: none). */
int gpu_embed(float *x, const DevMat *E, const int *token, int T, int *zero, int nzero, cudaStream_t st);

/* RoPE on q and k of each row (ops.c rope, with the RunState's table), then
 * k and v stored at the row's slot of this layer's cache (model.c's loop
 * after the q/k/v product). qkv rows: q (H*S) | k (Hkv*S) | v (Hkv*S). */
typedef struct {
    float *qkv;
    int ld;                  /* floats per qkv row */
    float *kc, *vc;          /* this layer's (NB * BS, Hkv * S) rows */
    const int *pos, *slot, *seq;
    const int *tables;       /* (sequences, tstride) block ids */
    int tstride, BS;
    const float *rope_cs;    /* (P, n_rot / 2, 2) */
    int H, Hkv, S, n_rot, T;
    const int *wait_on;      /* LLM_CUDA_FLAGS: head h waits until wait_on[h / (H / Hkv)] counts the rows of
                                its group, (H / Hkv + 2) S, instead of for the kernel ahead; NULL: pdl_wait */
    int *signal;             /* and each block adds 1 to *signal once its output is written */
} AttnArgs;
int gpu_rope_store(const AttnArgs *a, cudaStream_t st);

/* Weights a kernel asks into L2 for products still to come (gpu_util.cuh
 * l2_ahead): up to two ranges, bytes 0 for none. */
typedef struct {
    const void *p[2];
    size_t bytes[2];
} L2Ahead;

/* Paged attention of every (row, query head) (model.c model_attend_paged)
 * into out (T, H*S). nsplit > 1 cuts each row's positions into nsplit
 * ranges, each folded by its own thread block into a partial (max, sum,
 * output) in `part`, then merged (Flash-Decoding). part holds
 * gpu_attention_part_floats(T, H, S, nsplit) floats. ahead (or NULL):
 * weights of the products to come, asked into L2 while it runs. */
int gpu_attention(float *out, const AttnArgs *a, int nsplit, float *part, const L2Ahead *ahead, cudaStream_t st);
size_t gpu_attention_part_floats(int T, int H, int S, int nsplit);

#define GPU_MAX_TT 8

/* How the step's kernels are launched, read once from the environment by
 * gpu_tune_from_env (gpu_model_create and kcheck call it):
 *   pdl       LLM_CUDA_PDL (default 1): launch with programmatic dependent
 *             launch (gpu_util.cuh pdl_wait), so a kernel's start and its
 *             weight prefetch overlap the end of the kernel before it
 *   prefetch  LLM_CUDA_PREFETCH (default 0): bytes of each weight row's
 *             slice a product asks into L2 before it waits for the kernel
 *             before (0: none)
 *   early     LLM_CUDA_EARLY (default 1): a product loads its first weights
 *             into registers before its prologue (and before that wait)
 *   fuse_rope LLM_CUDA_FUSE_ROPE (default 1): the q|k|v product applies RoPE
 *             and stores k and v (MvArgs.rope) where the kernels run it
 *   one_pass  LLM_CUDA_ONE_PASS (default 1): a product's RMSNorm prologue
 *             reads a row of up to 2048 values once, not twice
 *   deep      LLM_CUDA_DEEP (default -1, auto: 4, and 3 for Q8_0): a
 *             one-token product keeps this many steps of weights in flight
 *             (2, 3, 4 or 6), copied into shared memory (gpu_matvec.cu
 *             mv_deep_kernel); 0: two, in registers (mv_kernel)
 *   waves     LLM_CUDA_WAVES (default 1): how many waves of thread blocks
 *             a product may have when k_split cuts K into slices (more
 *             slices: smaller blocks, the work spread more evenly)
 *   swiglu_apart LLM_CUDA_SWIGLU_APART (default 1): below 4 rows too, the
 *             down product's SwiGLU runs once, as gpu_swiglu_apart, and the
 *             product copies it (PRE_READY) instead of computing it in
 *             every block
 *   ready_t   LLM_CUDA_READY_T (default 4): from this many rows on, every
 *             product's prologue (RMSNorm, SwiGLU, the Q8_0 rounding) runs
 *             once as gpu_prepare, not in every block of rows; 1: always
 *   split_min LLM_CUDA_SPLIT_MIN (default 4): a split of attention covers
 *             at least this many chunks of 32 positions (gpu_model.cu
 *             choose_split); fewer: more thread blocks at short contexts,
 *             and the merge kernel
 *   overlap   LLM_CUDA_CODED_OVERLAP (default 1): BF16E weights (--low-mem)
 *             are decoded into one buffer while the product before reads
 *             the other (gpu_model.cu product_coded); 0: each right before
 *             its product
 *   swiglu_epi LLM_CUDA_SWIGLU_EPI (default 1): in a step of one row, where
 *             gate|up and down have float weights, the gate|up product
 *             computes SwiGLU as it writes its rows (MvArgs.swiglu_out)
 *             and the down product copies it: one kernel fewer a layer
 *             than swiglu_apart, the same bits; 0: never
 *   l2_ahead  LLM_CUDA_L2_AHEAD (default 16): MB of weights the attention
 *             kernel asks into L2 for the products after it (wo's, then the
 *             first of gate|up's) while memory would otherwise idle; 0: none
 *   flags     LLM_CUDA_FLAGS (default 0): in a decode step of one row, q|k|v,
 *             attention and wo hand over through counters in memory
 *             (gpu_util.cuh flag_add, flag_wait) instead of each waiting
 *             for the whole kernel before it: a head's attention starts
 *             once its group's rows are written, wo once every head is
 *   omit      LLM_CUDA_OMIT (default 0; for measurement only: the logits
 *             are wrong): a step leaves out the kernels of the bits set,
 *             1 q|k|v, 2 attention, 4 wo, 8 gate|up, 16 down and its
 *             SwiGLU, 32 the logits, so that the time of a stage in the
 *             overlapped step is a difference of two runs */
typedef struct {
    int pdl;
    int prefetch;
    int early;
    int fuse_rope;
    int one_pass;
    int deep;
    int waves;
    int swiglu_apart;
    int ready_t;
    int split_min;
    int overlap;
    int swiglu_epi;
    int omit;
    int l2_ahead;
    int flags;
} GpuTune;
extern GpuTune gpu_tune;
void gpu_tune_from_env(void);

/* kernel<<<grid, block, smem, st>>>(args...), with the programmatic
 * dependent launch attribute when gpu_tune.pdl is set. The kernel must call
 * pdl_wait() before it reads anything a kernel writes (gpu_util.cuh). */
template <typename... P, typename... A>
static inline void gpu_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, A... args) {
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cfg.attrs = at;
    cfg.numAttrs = gpu_tune.pdl ? 1 : 0;
    cudaLaunchKernelEx(&cfg, kernel, args...);
}

#endif
