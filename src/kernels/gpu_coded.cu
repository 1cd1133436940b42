/* gpu_coded.cu - coded weights on the GPU: the fast tier's BF16E decoded
 * into rows a product then reads, and the rANS chunk decoder.
 *
 * C references: bf16e_row_to_bf16 (src/kernels/ref.c, with formats.h's
 * bf16e_weight) for gpu_bf16e_decode; decode_plain (src/rans.c) for
 * gpu_rans_decode. tools/kcheck.cu holds both to them bit for bit.
 *
 * BF16E (formats.h): a block of 64 weights is 88 bytes, the 64 sign and
 * mantissa bytes, then 3-bit codes: codes 0-6 name one of the matrix's 7
 * exponents, code 7 is an escape whose exponent comes from the row's list
 * of escapes. The CPU's order (bf16e_pos, three bit planes) suits 512-bit
 * vectors; at upload gpu_pack_bf16e lays each block out for a lane of four
 * (gpu_kernels.cuh, DevBf16e): the weights' bytes in order, each quarter's
 * 16 codes as 48 contiguous bits. The same bytes in number. The mapping:
 *
 *   grid (ceil(n / 8))     block: 256 threads = 8 warps, a warp per row
 *
 *   warp w -> row i = 8 blockIdx.x + w of the output; first the row's
 *             escaped exponents (at most K bytes) are staged in shared
 *             memory, so that an escape costs a shared-memory read
 *     a round: eight blocks of the row, four lanes each
 *     lane 4 g + j: quarter j of block g, weights 16 j .. 16 j + 15: their
 *             bytes (two 8-byte loads: blocks are 8-byte aligned) and 48
 *             bits of codes (three 2-byte loads); the next round's issued
 *             before this one decodes
 *     warp:   an inclusive scan of the lanes' escape counts (shuffles), in
 *             lane order, which is the row's order: where each lane's
 *             escapes start in the row's list
 *     lane:   16 weights, four at a time (their 12 bits of codes spread into
 *             the nibbles of one __byte_perm selector, which picks four
 *             exponents out of the table), stored as 32 contiguous bytes of
 *             BF16 (64 of F32): a block's four lanes write 128 (256)
 *
 * rANS (rans.h): chunks are independent and each interleaves N <= 32
 * states, symbol i of a group belonging to state i % N. The mapping:
 *
 *   grid (ceil(chunks / 4))   block: 128 threads = 4 warps, a warp per chunk
 *   smem: the slot -> symbol table (2^bits bytes) and freq | start << 16 of
 *         each symbol, loaded once per block
 *
 *   warp -> chunk k; lane j < N -> state j
 *     each group of N symbols: every lane pops its symbol (two shared-memory
 *     lookups, x = freq (x >> bits) + slot - start), then two refill rounds:
 *     the lanes still below L take the next bytes in lane order (a ballot,
 *     and each lane's rank among those set), exactly the bytes decode_plain
 *     gives them, in the same order. */
#include "kernels/gpu_kernels.cuh"
#include "kernels/gpu_util.cuh"
#include <string.h>

/* ------------------------------------------------------------ BF16E */

enum { BE_WARPS = 8 };

/* ------------------------------------------------------------ BF16E: the GPU's layout */

/* formats.h's bf16e_pos: where weight k's sign and mantissa byte lies. */
static inline int be_pos(int k) { return 16 * (k / 4 % 4) + 4 * (k / 16) + k % 4; }

void gpu_pack_bf16e(uint8_t *blocks, uint8_t *esc, const void *bf16e, int N, int K) {
    const Bf16eData *d = (const Bf16eData *)bf16e;
    const uint8_t *in = d->blocks, *ein = d->esc;
    for (size_t b = 0; b < (size_t)N * (K / BF16E_BLOCK); b++, in += BF16E_BLOCK_BYTES, blocks += BF16E_BLOCK_BYTES) {
        uint64_t pl[3];
        memcpy(pl, in + BF16E_BLOCK, sizeof pl);
        uint64_t escs = pl[0] & pl[1] & pl[2], quarter[4] = {0, 0, 0, 0};
        for (int k = 0; k < BF16E_BLOCK; k++) {
            int p = be_pos(k);
            uint64_t code = (pl[0] >> p & 1) | (pl[1] >> p & 1) << 1 | (pl[2] >> p & 1) << 2;
            blocks[k] = in[p];
            quarter[k / 16] |= code << (3 * (k % 16));
            if (code == BF16E_ESCAPE)   /* its exponent: after those at the bytes before p */
                *esc++ = ein[__builtin_popcountll(escs & ((UINT64_C(1) << p) - 1))];
        }
        for (int j = 0; j < 4; j++)
            for (int i = 0; i < 6; i++) blocks[BF16E_BLOCK + 6 * j + i] = (uint8_t)(quarter[j] >> (8 * i));
        ein += __builtin_popcountll(escs);
    }
}

/* What a lane decodes: quarter j of a block, weights 16 j .. 16 j + 15:
 * their 16 sign and mantissa bytes and their 16 codes (48 bits). */
typedef struct {
    uint4 sm;
    unsigned long long c;
} BeQuarter;

__device__ static inline BeQuarter be_load(const uint8_t *blk, int j) {
    BeQuarter q;
    const uint2 *h = (const uint2 *)(blk + 16 * j);   /* a block is 88 bytes: 8-byte aligned only */
    uint2 a = __ldg(h), b = __ldg(h + 1);
    q.sm = make_uint4(a.x, a.y, b.x, b.y);
    const uint16_t *c = (const uint16_t *)(blk + BF16E_BLOCK + 6 * j);
    q.c = (unsigned long long)__ldg(c) | (unsigned long long)__ldg(c + 1) << 16 | (unsigned long long)__ldg(c + 2) << 32;
    return q;
}

/* The bit of each code (at 3 i) that says it is the escape (all three set). */
__device__ static inline unsigned long long be_escapes(unsigned long long c) {
    return c & c >> 1 & c >> 2 & 0x249249249249ull;
}

/* Weights 16 j + 4 m .. + 3 as BF16 bits, two to a word. Their four 3-bit
 * codes (12 bits) are spread into the nibbles of one __byte_perm selector,
 * which picks the four exponents out of the table at once; an escape takes
 * its exponent from the row's escapes in shared memory, after `first` of
 * them and those of the quarter's weights before it. */
template <int m>
__device__ static inline uint2 be_four(const BeQuarter &q, unsigned long long esc, uint32_t first,
                                       const uint8_t *sesc, const DevBf16e &P) {
    uint32_t x = (uint32_t)(q.c >> 12 * m) & 0xfffu;
    uint32_t sel = (x & 0x7u) | (x << 1 & 0x70u) | (x << 2 & 0x700u) | (x << 3 & 0x7000u);
    uint32_t e4 = __byte_perm(P.exps_lo, P.exps_hi, sel);
    uint32_t em = (uint32_t)(esc >> 12 * m) & 0x249u;
    if (em) {
#pragma unroll
        for (int i = 0; i < 4; i++)
            if (em >> 3 * i & 1) {
                uint32_t v = sesc[first + __popcll(esc & ((1ull << (12 * m + 3 * i)) - 1))];
                v = (v << 1 | v >> 7) & 0xffu;   /* rotated left: back to the exponent */
                e4 = (e4 & ~(0xffu << 8 * i)) | v << 8 * i;
            }
    }
    uint32_t sm = m == 0 ? q.sm.x : m == 1 ? q.sm.y : m == 2 ? q.sm.z : q.sm.w;
    /* two weights a word, 16 bits each: sign << 15 | exponent << 7 | mantissa */
    uint32_t s01 = __byte_perm(sm, 0, 0x4140), s23 = __byte_perm(sm, 0, 0x4342);
    uint32_t e01 = __byte_perm(e4, 0, 0x4140), e23 = __byte_perm(e4, 0, 0x4342);
    return make_uint2((s01 & 0x00800080u) << 8 | e01 << 7 | (s01 & 0x007f007fu),
                      (s23 & 0x00800080u) << 8 | e23 << 7 | (s23 & 0x007f007fu));
}

/* Row `row` of P decoded into row i of out, by one warp: q holds the
 * lane's quarter of the first round, sesc the row's escapes. */
template <bool F32>
__device__ static void bf16e_row(void *out, const DevBf16e &P, int K, int i, const uint8_t *src, BeQuarter q,
                                 const uint8_t *sesc) {
    int lane = threadIdx.x % 32, g = lane / 4, j = lane % 4, nb = K / BF16E_BLOCK;
    char *o = (char *)out + (size_t)i * K * (F32 ? 4 : 2);
    BeQuarter next = {};
    uint32_t first = 0;   /* escapes of the row before this round's blocks */
    for (int b0 = 0; b0 < nb; b0 += 8) {   /* eight blocks a round, four lanes each */
        int b = b0 + g;
        if (b + 8 < nb) next = be_load(src + (size_t)(b + 8) * BF16E_BLOCK_BYTES, j);
        unsigned long long esc = b < nb ? be_escapes(q.c) : 0;
        int cnt = __popcll(esc), inc = cnt;
        for (int d = 1; d < 32; d *= 2) {   /* inclusive scan over the lanes: row order */
            int v = __shfl_up_sync(0xffffffffu, inc, d);
            if (lane >= d) inc += v;
        }
        uint32_t mine = first + inc - cnt;
        first += __shfl_sync(0xffffffffu, inc, 31);
        if (b < nb) {
            uint2 w0 = be_four<0>(q, esc, mine, sesc, P), w1 = be_four<1>(q, esc, mine, sesc, P);
            uint2 w2 = be_four<2>(q, esc, mine, sesc, P), w3 = be_four<3>(q, esc, mine, sesc, P);
            char *ob = o + ((size_t)b * BF16E_BLOCK + 16 * j) * (F32 ? 4 : 2);   /* 16 weights in a row */
            if (F32) {
                uint4 *f = (uint4 *)ob;
                f[0] = make_uint4(w0.x << 16, w0.x & 0xffff0000u, w0.y << 16, w0.y & 0xffff0000u);
                f[1] = make_uint4(w1.x << 16, w1.x & 0xffff0000u, w1.y << 16, w1.y & 0xffff0000u);
                f[2] = make_uint4(w2.x << 16, w2.x & 0xffff0000u, w2.y << 16, w2.y & 0xffff0000u);
                f[3] = make_uint4(w3.x << 16, w3.x & 0xffff0000u, w3.y << 16, w3.y & 0xffff0000u);
            } else {
                ((uint4 *)ob)[0] = make_uint4(w0.x, w0.y, w1.x, w1.y);
                ((uint4 *)ob)[1] = make_uint4(w2.x, w2.y, w3.x, w3.y);
            }
        }
        q = next;
    }
}

template <bool F32>
__global__ void __launch_bounds__(BE_WARPS * 32) bf16e_kernel(void *out, DevBf16e P, int K, int r0, int n,
                                                               const int *rows, int early) {
    extern __shared__ uint8_t besm[];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, i = blockIdx.x * BE_WARPS + warp, nb = K / BF16E_BLOCK;
    /* before the kernel ahead ends only the weights (and the tokens, which
     * the batch's upload wrote) may be read: the row's first blocks are
     * asked for, and its escapes (at most K) staged in shared memory */
    int row = i < n ? (rows ? rows[i] : r0 + i) : -1;
    const uint8_t *src = P.blocks + (size_t)(row < 0 ? 0 : row) * nb * BF16E_BLOCK_BYTES;
    BeQuarter q = {};
    if (row >= 0 && lane / 4 < nb) q = be_load(src + (size_t)(lane / 4) * BF16E_BLOCK_BYTES, lane % 4);
    uint8_t *sesc = besm + (size_t)warp * K;
    if (row >= 0) {
        uint32_t e0 = __ldg(P.esc_row + row), ne = __ldg(P.esc_row + row + 1) - e0;
        for (uint32_t t = lane; t < ne && t < (uint32_t)K; t += 32) sesc[t] = __ldg(P.esc + e0 + t);
    }
    __syncwarp();
    if (!early) pdl_wait();   /* out may still be read by the kernel ahead: store after it ends */
    pdl_release();
    if (row >= 0) bf16e_row<F32>(out, P, K, i, src, q, sesc);
    /* early: end only after the kernel ahead, so that a later kernel's wait
     * still covers every kernel before it */
    if (early) pdl_wait();
}

int gpu_bf16e_decode(void *out, DType as, const DevBf16e *P, int K, int r0, int n, const int *rows, int early,
                     cudaStream_t st) {
    if (n <= 0) return 0;
    dim3 grid((n + BE_WARPS - 1) / BE_WARPS);
    size_t smem = (size_t)BE_WARPS * K;   /* each warp's row of escapes */
    if (smem > 48 * 1024) {
        cudaFuncSetAttribute(bf16e_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        cudaFuncSetAttribute(bf16e_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    }
    if (as == DT_F32) gpu_launch(bf16e_kernel<true>, grid, BE_WARPS * 32, smem, st, out, *P, K, r0, n, rows, early);
    else gpu_launch(bf16e_kernel<false>, grid, BE_WARPS * 32, smem, st, out, *P, K, r0, n, rows, early);
    return 1;
}

/* ------------------------------------------------------------ rANS */

enum { RD_WARPS = 4 };

__device__ static inline uint64_t rd_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
__device__ static inline uint32_t rd_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

__global__ void __launch_bounds__(RD_WARPS * 32) rans_kernel(uint8_t *out, GpuRans r, unsigned long long *bad) {
    extern __shared__ __align__(16) unsigned char rsm[];
    uint32_t *info = (uint32_t *)rsm;
    uint8_t *sym_of = rsm + 256 * 4;
    const uint32_t M = 1u << r.bits, mask = M - 1;
    for (int i = threadIdx.x; i < 256; i += blockDim.x) info[i] = r.info[i];
    for (uint32_t i = threadIdx.x; i < M / 4; i += blockDim.x) ((uint32_t *)sym_of)[i] = ((const uint32_t *)r.slot_sym)[i];
    __syncthreads();
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, N = r.n_states;
    uint64_t k = (uint64_t)blockIdx.x * RD_WARPS + warp;
    if (k >= r.n_chunks) return;
    const uint8_t *ix = r.index + k * 12;
    const uint8_t *p = r.payload + rd_u64(ix), *end = p + rd_u32(ix + 8);
    uint64_t len = r.n - k * r.chunk_size < r.chunk_size ? r.n - k * r.chunk_size : r.chunk_size;
    uint8_t *o = out + k * r.chunk_size;
    uint32_t x = lane < N ? rd_u32(p + 4 * lane) : r.L;
    p += 4 * N;
    bool ok = true;
    const unsigned below = (1u << lane) - 1;
    for (uint64_t i = 0; i < len && ok; i += N) {
        bool act = (uint64_t)lane < len - i && lane < N;
        if (act) {   /* pop one symbol */
            uint32_t slot = x & mask, s = sym_of[slot], f = info[s];
            o[i + lane] = (uint8_t)s;
            x = (f & 0xffffu) * (x >> r.bits) + slot - (f >> 16);
        }
        for (int round = 0; round < 2; round++) {   /* refill: state order, one byte a round */
            bool need = act && x < r.L;
            unsigned want = __ballot_sync(0xffffffffu, need);
            int count = __popc(want);
            if (count > end - p) {   /* the payload ends while states need bytes */
                ok = false;
                break;
            }
            if (need) x = x << 8 | p[__popc(want & below)];
            p += count;
        }
    }
    bool good = __all_sync(0xffffffffu, ok && p == end && x == r.L);
    if (!good && lane == 0) atomicMin(bad, (unsigned long long)k);
}

int gpu_rans_decode(uint8_t *out, const GpuRans *g, unsigned long long *bad, cudaStream_t st) {
    if (g->n_chunks == 0) return 0;
    size_t smem = 256 * 4 + ((size_t)1 << g->bits);
    rans_kernel<<<(unsigned)((g->n_chunks + RD_WARPS - 1) / RD_WARPS), RD_WARPS * 32, smem, st>>>(out, *g, bad);
    return 1;
}

int gpu_rans_upload(GpuRans *g, const GpuRansHost *s) {
    memset(g, 0, sizeof *g);
    size_t M = (size_t)1 << s->bits, idx = (size_t)s->n_chunks * 12;
    size_t at_idx = (s->payload_bytes + 15) / 16 * 16, at_sym = at_idx + (idx + 15) / 16 * 16, at_info = at_sym + M;
    uint32_t info[256];
    for (int c = 0; c < 256; c++) info[c] = s->freq[c] | s->start[c] << 16;
    char *p;
    cudaError_t ce = cudaMalloc((void **)&p, at_info + sizeof info);
    if (ce != cudaSuccess) return ce;
    g->mem = p;
    if ((ce = cudaMemcpy(p, s->payload, s->payload_bytes, cudaMemcpyHostToDevice)) ||
        (ce = cudaMemcpy(p + at_idx, s->index, idx, cudaMemcpyHostToDevice)) ||
        (s->n && (ce = cudaMemcpy(p + at_sym, s->slot_sym, M, cudaMemcpyHostToDevice))) ||
        (ce = cudaMemcpy(p + at_info, info, sizeof info, cudaMemcpyHostToDevice))) {
        gpu_rans_free(g);
        return ce;
    }
    g->payload = (const uint8_t *)p;
    g->index = (const uint8_t *)p + at_idx;
    g->slot_sym = (const uint8_t *)p + at_sym;
    g->info = (const uint32_t *)(p + at_info);
    g->bits = s->bits;
    g->n_states = s->n_states;
    g->chunk_size = s->chunk_size;
    g->L = s->L;
    g->n = s->n;
    g->n_chunks = s->n_chunks;
    return 0;
}

void gpu_rans_free(GpuRans *g) {
    cudaFree(g->mem);
    memset(g, 0, sizeof *g);
}
