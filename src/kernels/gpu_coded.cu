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
 *     gives them, in the same order.
 *
 * The fast tier from a matrix at rest (gpu.h GpuAtRest; C references
 * ec_count, ec_table's caller and ec_write_rows in src/codec/expcode.c, then
 * gpu_pack_bf16e above): the two planes decoded by the rANS kernel (or
 * copied, where raw), then three kernels over them:
 *
 *   exp_count   grid-stride, 256 threads a block, 16 exponents a thread a
 *               turn into a histogram in shared memory, added to the
 *               matrix's (64-bit atomics) at the end; the host reads it and
 *               the loader's rule (ec_table) picks the 7 codes
 *   esc_count   a warp per row, 16 exponents a lane a turn: the row's
 *               escapes under that table; the host sums them into esc_row
 *   encode      a warp per row, the decoder's mapping run backwards: lane
 *               4 g + j writes quarter j of block g of the round (its 16
 *               sign and mantissa bytes as they are, its 16 codes as 48
 *               bits), and its escapes after those of the lanes before it
 *               (the same shuffle scan) */
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

/* ------------------------------------------------------------ the fast tier from a matrix at rest */

/* The code of exponent x under the table lo | hi (codes 0-6; 7 the
 * escape), as ec_writer_init's code[] gives it. */
__device__ static inline unsigned rest_code(unsigned x, uint32_t lo, uint32_t hi) {
#pragma unroll
    for (int c = 0; c < BF16E_ESCAPE; c++)
        if (((c < 4 ? lo >> 8 * c : hi >> 8 * (c - 4)) & 0xffu) == x) return (unsigned)c;
    return BF16E_ESCAPE;
}

__global__ void __launch_bounds__(256) exp_count_kernel(unsigned long long *hist, const uint4 *ex, size_t n16) {
    __shared__ unsigned h[256];
    h[threadIdx.x] = 0;
    __syncthreads();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += (size_t)gridDim.x * blockDim.x) {
        uint4 v = ex[i];
        uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 16; k++) atomicAdd(&h[w[k / 4] >> 8 * (k % 4) & 0xffu], 1u);
    }
    __syncthreads();
    if (h[threadIdx.x]) atomicAdd(&hist[threadIdx.x], (unsigned long long)h[threadIdx.x]);
}

__global__ void __launch_bounds__(BE_WARPS * 32) esc_count_kernel(uint32_t *rows, const uint8_t *ex, int N, int K,
                                                                  uint32_t lo, uint32_t hi) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, n = blockIdx.x * BE_WARPS + warp;
    if (n >= N) return;
    const uint8_t *er = ex + (size_t)n * K;
    unsigned cnt = 0;
    for (int k = 16 * lane; k < K; k += 512) {
        uint4 v = *(const uint4 *)(er + k);
        uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 16; i++) cnt += rest_code(w[i / 4] >> 8 * (i % 4) & 0xffu, lo, hi) == BF16E_ESCAPE;
    }
    for (int o = 16; o > 0; o /= 2) cnt += __shfl_xor_sync(0xffffffffu, cnt, o);
    if (lane == 0) rows[n] = cnt;
}

__global__ void __launch_bounds__(BE_WARPS * 32) encode_kernel(DevBf16e P, const uint8_t *ex, const uint8_t *sm, int K) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, n = blockIdx.x * BE_WARPS + warp;
    if (n >= P.N) return;   /* a whole warp */
    const uint8_t *er = ex + (size_t)n * K, *sr = sm + (size_t)n * K;
    uint8_t *row = (uint8_t *)P.blocks + (size_t)n * (K / BF16E_BLOCK) * BF16E_BLOCK_BYTES;
    uint8_t *esc = (uint8_t *)P.esc;
    uint32_t at = P.esc_row[n];
    for (int k0 = 0; k0 < K; k0 += 512) {   /* eight blocks a round, four lanes each */
        int k = k0 + 16 * lane;
        bool act = k < K;
        uint4 e = make_uint4(0, 0, 0, 0), s = e;
        if (act) {
            e = *(const uint4 *)(er + k);
            s = *(const uint4 *)(sr + k);
        }
        uint32_t w[4] = {e.x, e.y, e.z, e.w};
        unsigned long long codes = 0;
        unsigned cnt = 0;
#pragma unroll
        for (int i = 0; i < 16; i++) {
            unsigned c = rest_code(w[i / 4] >> 8 * (i % 4) & 0xffu, P.exps_lo, P.exps_hi);
            codes |= (unsigned long long)c << 3 * i;
            cnt += c == BF16E_ESCAPE;
        }
        if (!act) cnt = 0;
        unsigned inc = cnt;
        for (int d = 1; d < 32; d *= 2) {   /* inclusive scan over the lanes: row order */
            unsigned v = __shfl_up_sync(0xffffffffu, inc, d);
            if (lane >= d) inc += v;
        }
        if (act) {
            uint8_t *blk = row + (size_t)(k / BF16E_BLOCK) * BF16E_BLOCK_BYTES;
            int j = k / 16 % 4;
            uint2 *h = (uint2 *)(blk + 16 * j);   /* 8-byte aligned, as be_load reads them */
            h[0] = make_uint2(s.x, s.y);
            h[1] = make_uint2(s.z, s.w);
            uint16_t *c = (uint16_t *)(blk + BF16E_BLOCK + 6 * j);
            c[0] = (uint16_t)codes, c[1] = (uint16_t)(codes >> 16), c[2] = (uint16_t)(codes >> 32);
            uint32_t o = at + inc - cnt;
            for (int i = 0; i < 16 && o < at + inc; i++)
                if ((codes >> 3 * i & 7u) == BF16E_ESCAPE) {
                    uint32_t x = w[i / 4] >> 8 * (i % 4) & 0xffu;
                    esc[o++] = (uint8_t)(x >> 1 | (x & 1u) << 7);   /* rotated, as the CPU stores it */
                }
        }
        at += __shfl_sync(0xffffffffu, inc, 31);
    }
}

static int rest_fail(Err *e, const char *name, cudaError_t ce) {
    return err_set(e, ST_IO, "%s: building the fast tier on the GPU: %s", name, cudaGetErrorString(ce));
}

static const char *const PLANE_NAME[2] = {"exponents", "signs and mantissas"};

int gpu_rest_begin(GpuRestPart *p, const GpuAtRest *r, int N, int K, uint64_t (*choose)(const uint64_t *, uint8_t *),
                   Err *e) {
    memset(p, 0, sizeof *p);
    size_t n = (size_t)N * K;
    if (K % BF16E_BLOCK || N <= 0)
        return err_set(e, ST_ARG, "%s: the fast tier takes rows of whole blocks of 64, not %d x %d", r->name, N, K);
    cudaError_t ce = cudaMalloc((void **)&p->work, 2 * n + 256 * 8);
    if (ce != cudaSuccess)
        return err_set(e, ST_NOMEM, "%s: cannot allocate %zu bytes of GPU memory to decode it: %s", r->name, 2 * n,
                       cudaGetErrorString(ce));
    unsigned long long *dhist = (unsigned long long *)(p->work + 2 * n);
    for (int pl = 0; pl < 2; pl++) {
        uint8_t *dst = p->work + pl * n;
        if (!r->coded[pl]) {
            if ((ce = cudaMemcpy(dst, r->raw[pl], n, cudaMemcpyHostToDevice))) return rest_fail(e, r->name, ce);
            continue;
        }
        const GpuRansHost *h = &r->rans[pl];
        if (h->n != n)
            return err_set(e, ST_FORMAT, "%s: plane %d (%s) codes %llu bytes, want %zu", r->name, pl, PLANE_NAME[pl],
                           (unsigned long long)h->n, n);
        GpuRans g;
        if ((ce = (cudaError_t)gpu_rans_upload(&g, h))) return rest_fail(e, r->name, ce);
        unsigned long long bad = ~0ull;
        ce = cudaMemcpy(dhist, &bad, 8, cudaMemcpyHostToDevice);
        if (!ce) gpu_rans_decode(dst, &g, dhist, 0);
        if (!ce) ce = cudaMemcpy(&bad, dhist, 8, cudaMemcpyDeviceToHost);
        gpu_rans_free(&g);
        if (ce) return rest_fail(e, r->name, ce);
        p->coded_bytes += h->payload_bytes;
        if (bad != ~0ull)
            return err_set(e, ST_FORMAT, "%s: plane %d (%s), chunk %llu of %llu: the payload does not decode (the "
                           "rANS kernel's check: damaged)", r->name, pl, PLANE_NAME[pl], bad,
                           (unsigned long long)h->n_chunks);
    }
    uint64_t hist[256];
    if ((ce = cudaMemset(dhist, 0, 256 * 8))) return rest_fail(e, r->name, ce);
    size_t n16 = n / 16, blocks = (n16 + 255) / 256 < 4096 ? (n16 + 255) / 256 : 4096;
    exp_count_kernel<<<(unsigned)blocks, 256>>>(dhist, (const uint4 *)p->work, n16);
    if ((ce = cudaMemcpy(hist, dhist, sizeof hist, cudaMemcpyDeviceToHost))) return rest_fail(e, r->name, ce);
    p->escapes = choose(hist, p->exps);
    memcpy(&p->exps_lo, p->exps, 4);
    memcpy(&p->exps_hi, p->exps + 4, 4);
    uint32_t *drows = (uint32_t *)dhist, *rows = NULL;   /* the counts, in the histogram's room where they fit */
    if ((size_t)N * 4 > 256 * 8) {
        if ((ce = cudaMalloc((void **)&rows, (size_t)N * 4))) return rest_fail(e, r->name, ce);
        drows = rows;
    }
    esc_count_kernel<<<(N + BE_WARPS - 1) / BE_WARPS, BE_WARPS * 32>>>(drows, p->work, N, K, p->exps_lo, p->exps_hi);
    p->esc_row = (uint32_t *)malloc(((size_t)N + 1) * 4);
    if (!p->esc_row) {
        cudaFree(rows);
        return err_set(e, ST_NOMEM, "%s: out of host memory", r->name);
    }
    ce = cudaMemcpy(p->esc_row + 1, drows, (size_t)N * 4, cudaMemcpyDeviceToHost);
    cudaFree(rows);
    if (ce) return rest_fail(e, r->name, ce);
    uint64_t sum = 0;
    p->esc_row[0] = 0;
    for (int i = 1; i <= N; i++) {   /* counts -> escapes before each row */
        sum += p->esc_row[i];
        p->esc_row[i] = (uint32_t)sum;
    }
    if (sum != p->escapes || sum > UINT32_MAX)
        return err_set(e, ST_FORMAT, "%s: %llu escaped exponents counted by row, %llu by the table", r->name,
                       (unsigned long long)sum, (unsigned long long)p->escapes);
    return ST_OK;
}

int gpu_rest_finish(DevBf16e *P, GpuRestPart *p, int K, Err *e, const char *name) {
    cudaError_t ce = cudaMemcpy((void *)P->esc_row, p->esc_row, ((size_t)P->N + 1) * 4, cudaMemcpyHostToDevice);
    if (ce) return rest_fail(e, name, ce);
    P->exps_lo = p->exps_lo;
    P->exps_hi = p->exps_hi;
    size_t n = (size_t)P->N * K;
    encode_kernel<<<(P->N + BE_WARPS - 1) / BE_WARPS, BE_WARPS * 32>>>(*P, p->work, p->work + n, K);
    if ((ce = cudaGetLastError()) || (ce = cudaDeviceSynchronize())) return rest_fail(e, name, ce);
    return ST_OK;
}

void gpu_rest_free(GpuRestPart *p) {
    cudaFree(p->work);
    free(p->esc_row);
    memset(p, 0, sizeof *p);
}
