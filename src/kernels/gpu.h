/* gpu.h - the forward pass on an NVIDIA GPU: what model.c hands the CUDA wing.
 *
 * model.c owns the model; this wing is told its shapes and weights once
 * (gpu_model_create, which uploads every matrix) and then one batch at a
 * time (gpu_forward), in plain data: it includes no stage header. The CPU
 * code around it is unchanged: the runtime, engine, scheduler, the KV pool's
 * block tables, the executor and the sampler run on the host, and the batch
 * that model_forward_batch would compute arrives here with the same block
 * tables and slots, addressing a KV pool that lives in GPU memory.
 *
 * Builds: `make cuda` links the kernels (gpu_*.cu beside this file); every
 * other build links gpu_none.c, whose gpu_model_create says that this build
 * has no CUDA. notes/cuda.md draws the kernels and their mappings. */
#ifndef GPU_H
#define GPU_H
#include "base/err.h"
#include "kernels/formats.h"

typedef struct GpuModel GpuModel;

/* One layer's weights, host pointers (the mapping); as model.h's Layer. */
typedef struct {
    const float *attn_norm, *ffn_norm;      /* (D) */
    Mat wq, wk, wv, wo, w_gate, w_up, w_down;
} GpuLayer;

/* An rANS stream (src/rans.h) as its caller tells it, plain data from an
 * open RansStream (host pointers): the payload and the chunk index as the
 * stream holds them, and the decode tables. */
typedef struct {
    const uint8_t *payload;
    size_t payload_bytes;
    const uint8_t *index;    /* (n_chunks, 12): u64 offset, u32 size, little-endian */
    const uint8_t *slot_sym; /* (2^bits) the symbol of each slot */
    const uint32_t *freq, *start;   /* (256) each */
    int bits, n_states;      /* M = 2^bits; N states, at most 32 */
    uint32_t chunk_size, L;  /* C; L, the low end of a state's range (RANS_L) */
    uint64_t n, n_chunks;
} GpuRansHost;

/* A BF16 matrix at rest: its blob in a compressed file (codec/wcodec.h),
 * told as plain data. The two planes of its weights, a byte each (plane 0
 * the exponent, bits 14..7; plane 1 the sign and the 7 mantissa bits), each
 * raw or an rANS stream; N K bytes either way. gpu_model_create decodes it
 * on the GPU into the fast tier (BF16E) that the CPU would have built from
 * the same blob (model_load.c build_fast_tier): the same table, the same
 * bytes, never decoded on the host. It stands for a DT_BF16E Mat whose
 * Bf16eData has no blocks (they exist on the GPU only) and whose data
 * pointer is `data` here; the table and the row index the GPU made are
 * written back into that Bf16eData's arrays (exps, esc_row below), so the
 * host knows the matrix's size and its escapes. */
typedef struct {
    const void *data;                       /* the Mat.data that names it */
    const char *name;                       /* for messages: "file: tensor blk.0.attn_q.weight" */
    int coded[2];                           /* plane p: 1 an rANS stream, 0 raw bytes */
    const uint8_t *raw[2];                  /* coded 0 */
    GpuRansHost rans[2];                    /* coded 1 */
    const void *blob;                       /* its bytes in the file's mapping, given back (fio_drop) */
    size_t blob_bytes;                      /*   once the GPU holds the matrix: the host keeps no copy */
    uint8_t *exps;                          /* written: (8) the table */
    uint32_t *esc_row;                      /* written: (N + 1) escapes before each row */
} GpuAtRest;

typedef struct {
    int D, F, L, H, Hkv, S, V, P;           /* model.h's names */
    int n_rot;
    float eps;
    Mat tok_embd, output;
    const float *out_norm;
    const GpuLayer *layers;                 /* (L) */
    int n_rest;                             /* matrices at rest, decoded on the GPU (above) */
    const GpuAtRest *rest;
    /* the fast tier's table from a matrix's exponent counts (expcode.h
     * ec_table, which the loader hands in): the one rule for both builds */
    uint64_t (*choose_table)(const uint64_t hist[256], uint8_t exps[8]);
} GpuModelDesc;

/* One step: model.h's Batch, with its KV geometry, the rope table of the
 * RunState, and the copy-on-write copies to make before it runs. */
typedef struct {
    int T;
    const int *token, *pos, *seq, *slot;    /* (T) */
    const int *const *table;                /* per sequence: block ids */
    int n_logits;
    const int *logit_row;                   /* (n_logits) */
    int NB, BS;                             /* the pool: NB blocks of BS rows */
    const void *pool_id;                    /* the host pool it stands for: a new one is a new GPU pool */
    const float *rope_cs;                   /* (P, n_rot/2, 2) the RunState's table */
    int max_T, max_logits;                  /* the RunState's sizes */
    int n_copies;                           /* blocks to copy first (kv_paged.h, copy-on-write): */
    const int *copies;                      /* (n_copies, 3) src block, dst block, rows */
} GpuBatch;

/* What one GpuModel did, for the benchmarks and the trace. */
typedef struct {
    char device[96];                        /* "NVIDIA H100 80GB HBM3, 132 SMs" */
    long steps, graph_steps;                /* forward calls; of them replayed from a CUDA graph */
    long kernels;                           /* kernels launched (replayed graphs count theirs) */
    long gemm_calls;                        /* products handed to cuBLAS */
    size_t weight_bytes;                    /* bytes of weights on the GPU */
    double rest_s;                          /* seconds building the fast tier from matrices at rest */
    size_t rest_bytes;                      /* their coded bytes decoded by the rANS kernel */
    size_t scratch_bytes;                   /* of a matrix widened or decoded for a product (cuBLAS, BF16E) */
    int coded;                              /* 1: the weights stay BF16E on the GPU, decoded a product at a time */
    size_t kv_bytes;                        /* bytes of the KV pool on the GPU */
    int last_kernels;                       /* kernels of the last step */
    int pdl, prefetch, early, fuse_rope, one_pass, deep;   /* launch settings (gpu_kernels.cuh GpuTune) */
    int swiglu_epi, omit, l2_ahead, flags;
} GpuStats;

/* Upload the weights. ST_UNSUPPORTED where this build or machine has no
 * CUDA GPU; ST_NOMEM where the weights do not fit. */
int gpu_model_create(GpuModel **out, const GpuModelDesc *d, Err *e);
/* Run one batch; logits (n_logits, V) land in `logits` (host). On failure
 * (a CUDA error) the message is in e and the logits are not written. */
int gpu_forward(GpuModel *g, const GpuBatch *b, float *logits, Err *e);
GpuStats gpu_stats(const GpuModel *g);
void gpu_model_free(GpuModel *g);           /* accepts NULL */

/* The ceilings a decode step is measured against, on a buffer of `bytes`
 * (far beyond the L2), medians of `reps` timed runs: a device-to-device
 * copy (GB/s counting the bytes read and the bytes written, as CUDA's
 * bandwidthTest does) and the fastest read we know how to write (16-byte
 * loads, four in flight per thread, every SM busy; GB/s read). The larger
 * is the ceiling. */
typedef struct {
    double copy_gbs, read_gbs;
    char device[96];
} GpuBandwidth;
int gpu_bandwidth(GpuBandwidth *out, size_t bytes, int reps, Err *e);

#endif
