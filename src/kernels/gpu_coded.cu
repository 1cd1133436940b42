/* gpu_coded.cu - coded weights on the GPU: the fast tier's BF16E decoded
 * into rows a product then reads, and the rANS chunk decoder.
 *
 * C references: bf16e_row_to_bf16 (src/kernels/ref.c, with formats.h's
 * bf16e_weight) for gpu_bf16e_decode; decode_plain (src/rans.c) for
 * gpu_rans_decode. tools/kcheck.cu holds both to them bit for bit.
 *
 * BF16E (formats.h): a block of 64 weights is 88 bytes, the 64 sign and
 * mantissa bytes (in bf16e_pos order), then three 8-byte planes of a 3-bit
 * code per weight: codes 0-6 name one of the matrix's 7 exponents, code 7
 * is an escape whose exponent comes from the row's list of escapes. The
 * mapping:
 *
 *   grid (ceil(n / 8))     block: 256 threads = 8 warps, a warp per row
 *
 *   warp w -> row i = 8 blockIdx.x + w of the output
 *     lane l: blocks l, l + 32, l + 64, ... of the row (88 bytes each, eleven
 *             8-byte loads, the next block's issued before this one decodes)
 *     warp:   an inclusive scan of the lanes' escape counts (shuffles) says
 *             where each lane's escapes start in the row's list
 *     the row's escaped exponents (at most K bytes) staged in shared
 *             memory first, so that an escape costs a shared-memory read
 *     lane:   64 weights decoded four at a time (their 3-bit codes spread
 *             into the nibbles of one __byte_perm selector, which picks four
 *             exponents out of the table), written as 8 x 16 bytes of BF16
 *             or 16 x 16 of F32
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
extern "C" {
#include "rans.h"
}

/* ------------------------------------------------------------ BF16E */

enum { BE_WARPS = 8, BE_WORDS = BF16E_BLOCK_BYTES / 8 };

__device__ static inline void be_load(unsigned long long w[BE_WORDS], const unsigned long long *src) {
#pragma unroll
    for (int i = 0; i < BE_WORDS; i++) w[i] = __ldg(src + i);
}

/* Bits pb .. pb + 3 of v as the low bits of each of four nibbles (bit i to
 * bit 4 i). */
__device__ static inline uint32_t be_spread(unsigned long long v, int pb) {
    uint32_t x = (uint32_t)(v >> pb) & 0xfu;
    x = (x | x << 6) & 0x0303u;   /* bits 0 1 2 3 -> 0 1 8 9 */
    return (x | x << 3) & 0x1111u; /* -> 0 4 8 12 */
}

/* Weights k = 4 r .. 4 r + 3 of a block (bf16e_weight for each), which lie
 * at bytes and code bits pb .. pb + 3, pb = 16 (r % 4) + 4 (r / 4)
 * (formats.h's bf16e_pos): their BF16 bits, two to a word. The four codes
 * are gathered into the nibbles of a __byte_perm selector that picks the
 * four exponents out of the table at once; an escape takes its exponent
 * from the row's escapes (sesc, staged in shared memory), after `first` of
 * them and the escapes at bytes before its own in this block. */
template <int r>
__device__ static inline void be_four(uint32_t &lo, uint32_t &hi, const unsigned long long w[BE_WORDS],
                                      unsigned long long esc, uint32_t first, const uint8_t *sesc,
                                      const DevBf16e &P) {
    constexpr int pb = 16 * (r % 4) + 4 * (r / 4);
    uint32_t sel = be_spread(w[8], pb) | be_spread(w[9], pb) << 1 | be_spread(w[10], pb) << 2;
    uint32_t e4 = __byte_perm(P.exps_lo, P.exps_hi, sel);
    uint32_t em = (uint32_t)(esc >> pb) & 0xfu;
    if (em) {
#pragma unroll
        for (int i = 0; i < 4; i++)
            if (em >> i & 1) {
                uint32_t x = sesc[first + __popcll(esc & ((1ull << (pb + i)) - 1))];
                x = (x << 1 | x >> 7) & 0xffu;   /* rotated left: back to the exponent */
                e4 = (e4 & ~(0xffu << 8 * i)) | x << 8 * i;
            }
    }
    uint32_t sm = (uint32_t)(w[pb / 8] >> (8 * (pb % 8)));   /* the 4 sign and mantissa bytes */
    /* two weights a word, 16 bits each: sign << 15 | exponent << 7 | mantissa */
    uint32_t s01 = __byte_perm(sm, 0, 0x4140), s23 = __byte_perm(sm, 0, 0x4342);
    uint32_t e01 = __byte_perm(e4, 0, 0x4140), e23 = __byte_perm(e4, 0, 0x4342);
    lo = (s01 & 0x00800080u) << 8 | e01 << 7 | (s01 & 0x007f007fu);
    hi = (s23 & 0x00800080u) << 8 | e23 << 7 | (s23 & 0x007f007fu);
}

/* Weights 8 g .. 8 g + 7 of a block, stored at out (BF16: one 16-byte
 * store; F32: two). */
template <int g, bool F32>
__device__ static inline void be_eight(void *out, const unsigned long long w[BE_WORDS], unsigned long long esc,
                                       uint32_t first, const uint8_t *sesc, const DevBf16e &P) {
    uint32_t a, b, c, d;
    be_four<2 * g>(a, b, w, esc, first, sesc, P);
    be_four<2 * g + 1>(c, d, w, esc, first, sesc, P);
    if (F32) {
        uint4 *o = (uint4 *)out + 2 * g;
        o[0] = make_uint4(a << 16, a & 0xffff0000u, b << 16, b & 0xffff0000u);
        o[1] = make_uint4(c << 16, c & 0xffff0000u, d << 16, d & 0xffff0000u);
    } else {
        ((uint4 *)out)[g] = make_uint4(a, b, c, d);
    }
}

template <bool F32>
__global__ void __launch_bounds__(BE_WARPS * 32) bf16e_kernel(void *out, DevBf16e P, int K, int r0, int n,
                                                               const int *rows) {
    extern __shared__ uint8_t besm[];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, i = blockIdx.x * BE_WARPS + warp, nb = K / BF16E_BLOCK;
    /* before the kernel ahead ends only the weights (and the tokens, which
     * the batch's upload wrote) may be read: the row's first blocks are
     * asked for, and its escapes (at most K) staged in shared memory */
    int row = i < n ? (rows ? rows[i] : r0 + i) : -1;
    const unsigned long long *src = (const unsigned long long *)(P.blocks + (size_t)(row < 0 ? 0 : row) * nb * BF16E_BLOCK_BYTES);
    unsigned long long w[BE_WORDS], next[BE_WORDS];
    if (row >= 0 && lane < nb) be_load(w, src + (size_t)lane * BE_WORDS);
    uint8_t *sesc = besm + (size_t)warp * K;
    if (row >= 0) {
        uint32_t e0 = __ldg(P.esc_row + row), ne = __ldg(P.esc_row + row + 1) - e0;
        for (uint32_t j = lane; j < ne && j < (uint32_t)K; j += 32) sesc[j] = __ldg(P.esc + e0 + j);
    }
    __syncwarp();
    pdl_wait();
    pdl_release();
    if (row < 0) return;   /* the whole warp */
    char *o = (char *)out + (size_t)i * K * (F32 ? 4 : 2);
    uint32_t first = 0;   /* escapes of the row before this round's blocks */
    for (int b0 = 0; b0 < nb; b0 += 32) {
        int b = b0 + lane;
        if (b + 32 < nb) be_load(next, src + (size_t)(b + 32) * BE_WORDS);
        unsigned long long esc = b < nb ? w[8] & w[9] & w[10] : 0;
        int cnt = __popcll(esc), inc = cnt;
        for (int d = 1; d < 32; d *= 2) {   /* inclusive scan over the lanes */
            int v = __shfl_up_sync(0xffffffffu, inc, d);
            if (lane >= d) inc += v;
        }
        uint32_t mine = first + inc - cnt;
        first += __shfl_sync(0xffffffffu, inc, 31);
        if (b < nb) {
            void *ob = o + (size_t)b * BF16E_BLOCK * (F32 ? 4 : 2);
            be_eight<0, F32>(ob, w, esc, mine, sesc, P);
            be_eight<1, F32>(ob, w, esc, mine, sesc, P);
            be_eight<2, F32>(ob, w, esc, mine, sesc, P);
            be_eight<3, F32>(ob, w, esc, mine, sesc, P);
            be_eight<4, F32>(ob, w, esc, mine, sesc, P);
            be_eight<5, F32>(ob, w, esc, mine, sesc, P);
            be_eight<6, F32>(ob, w, esc, mine, sesc, P);
            be_eight<7, F32>(ob, w, esc, mine, sesc, P);
        }
#pragma unroll
        for (int j = 0; j < BE_WORDS; j++) w[j] = next[j];
    }
}

int gpu_bf16e_decode(void *out, DType as, const DevBf16e *P, int K, int r0, int n, const int *rows, cudaStream_t st) {
    if (n <= 0) return 0;
    dim3 grid((n + BE_WARPS - 1) / BE_WARPS);
    size_t smem = (size_t)BE_WARPS * K;   /* each warp's row of escapes */
    if (smem > 48 * 1024) {
        cudaFuncSetAttribute(bf16e_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        cudaFuncSetAttribute(bf16e_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    }
    if (as == DT_F32) gpu_launch(bf16e_kernel<true>, grid, BE_WARPS * 32, smem, st, out, *P, K, r0, n, rows);
    else gpu_launch(bf16e_kernel<false>, grid, BE_WARPS * 32, smem, st, out, *P, K, r0, n, rows);
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
    uint32_t x = lane < N ? rd_u32(p + 4 * lane) : RANS_L;
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
            bool need = act && x < RANS_L;
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
    bool good = __all_sync(0xffffffffu, ok && p == end && x == RANS_L);
    if (!good && lane == 0) atomicMin(bad, (unsigned long long)k);
}

int gpu_rans_decode(uint8_t *out, const GpuRans *g, unsigned long long *bad, cudaStream_t st) {
    if (g->n_chunks == 0) return 0;
    size_t smem = 256 * 4 + ((size_t)1 << g->bits);
    rans_kernel<<<(unsigned)((g->n_chunks + RD_WARPS - 1) / RD_WARPS), RD_WARPS * 32, smem, st>>>(out, *g, bad);
    return 1;
}

int gpu_rans_upload(GpuRans *g, const void *stream) {
    const RansStream *s = (const RansStream *)stream;
    memset(g, 0, sizeof *g);
    size_t M = (size_t)1 << s->bits, idx = (size_t)s->n_chunks * 12;
    size_t at_idx = (s->sizes.payload + 15) / 16 * 16, at_sym = at_idx + (idx + 15) / 16 * 16, at_info = at_sym + M;
    uint32_t info[256];
    for (int c = 0; c < 256; c++) info[c] = s->freq[c] | s->start[c] << 16;
    char *p;
    cudaError_t ce = cudaMalloc((void **)&p, at_info + sizeof info);
    if (ce != cudaSuccess) return ce;
    g->mem = p;
    if ((ce = cudaMemcpy(p, s->payload, s->sizes.payload, cudaMemcpyHostToDevice)) ||
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
    g->n = s->n;
    g->n_chunks = s->n_chunks;
    return 0;
}

void gpu_rans_free(GpuRans *g) {
    cudaFree(g->mem);
    memset(g, 0, sizeof *g);
}
