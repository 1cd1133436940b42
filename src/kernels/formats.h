/* formats.h - the weight formats: the types a tensor is stored in (numbered
 * as GGUF numbers them), the block layouts exactly as ggml packs them, the
 * size of a row, half floats and bfloats to and from floats, and rows
 * rounded to a format or widened back. A Mat is a matrix in one of them.
 * Every kernel reads these; nothing here chooses a path (that is ops.h). */
#ifndef FORMATS_H
#define FORMATS_H
#include "base/err.h"
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Weight storage types, numbered as GGUF numbers them (ggml_type). */
typedef enum {
    DT_F32 = 0, DT_F16 = 1, DT_Q4_0 = 2, DT_Q4_1 = 3, DT_Q5_0 = 6, DT_Q5_1 = 7, DT_Q8_0 = 8,
    DT_Q4_K = 12, DT_Q5_K = 13, DT_Q6_K = 14, DT_BF16 = 30,
    DT_BF16E = 1030    /* not a GGUF type: BF16 with coded exponents, made in memory only (below) */
} DType;

/* Q8_0: blocks of 32 values sharing one scale: value = d * qs[i].
 * 34 bytes, packed, exactly as in GGUF files (d is IEEE half precision). */
#define QK8_0 32
typedef struct {
    uint16_t d;          /* scale, fp16 bits */
    int8_t qs[QK8_0];    /* quantized values */
} BlockQ8_0;

/* The smaller block formats, packed exactly as ggml writes them (notes/formats.md
 * draws each one byte by byte). Blocks of 32 with an fp16 scale d (and an
 * fp16 offset m for the _1 kinds): value = d * q + m, or d * (q - 8) for
 * Q4_0, d * (q - 16) for Q5_0. A byte of qs holds value i in its low nibble
 * and value i + 16 in its high one; bit i of qh is the fifth bit of value i. */
#define QK4 32
typedef struct { uint16_t d; uint8_t qs[16]; } BlockQ4_0;                  /* 18 bytes */
typedef struct { uint16_t d, m; uint8_t qs[16]; } BlockQ4_1;               /* 20 */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; } BlockQ5_0;   /* 22 */
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; } BlockQ5_1;/* 24 */

/* K formats: super-blocks of 256 values. Q4_K and Q5_K cut one into 8
 * sub-blocks of 32, each with a 6-bit scale and a 6-bit min packed into 12
 * bytes: value = d * sc[j] * q - dmin * mn[j]. Q6_K cuts it into 16 groups of
 * 16 with signed 8-bit scales: value = d * sc[g] * (q - 32), q of 6 bits. */
#define QK_K 256
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; } BlockQ4_K;   /* 144 */
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[32];      /* fifth bits */
    uint8_t qs[128];     /* low four bits */
} BlockQ5_K;                                                                           /* 176 */
typedef struct {
    uint8_t ql[128];     /* low four bits */
    uint8_t qh[64];      /* high two bits */
    int8_t scales[16];
    uint16_t d;          /* last, unlike the others */
} BlockQ6_K;                                                                           /* 210 */

/* What the K formats' fast kernels round activations to (as llama.cpp does):
 * one float scale per 256 values, d = max / -127 where max is the value of
 * largest magnitude (its sign kept), q = round(x / d) to nearest even, and the
 * sums of each 16 values, which the offsets of Q4_K, Q5_K and Q6_K need. */
typedef struct {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
} BlockQ8_K;                                                                           /* 292 */

const char *dtype_name(int type);        /* "F32", "Q4_K", ... as ggml names them, or "unknown" */
int dtype_known(int type);               /* 1 for the types of DType */
/* BF16E: BF16 with a fixed-length exponent code, the fast tier of the
 * weight codec (notes/rans.md, "The fast tier"). A weight keeps its sign
 * and 7 mantissa bits as they are, one byte; its 8-bit exponent becomes a
 * 3-bit code: codes 0-6 name the 7 exponents most frequent in the matrix
 * (Bf16eSide.exps), code 7 is an escape whose exponent is stored apart. A
 * block of 64 weights of a row is 88 bytes:
 *   uint8_t  sm[64]     sign << 7 | mantissa, weight k of the block at byte
 *                       16 * (k / 4 % 4) + 4 * (k / 16) + k % 4 (the order in
 *                       which two rounds of unpacks hand out 16 floats at a
 *                       time, tiles_avx512.c)
 *   uint64_t plane[3]   bit p of plane b: bit b of the code of the weight at
 *                       byte p
 * 11 bits a weight before escapes. The escaped exponents of the whole matrix
 * follow each other in Bf16eSide.esc, row by row and within a block in byte
 * order, each rotated right by one bit ((e >> 1) | (e & 1) << 7: the byte
 * the tile needs); esc_row[n] is the number of them before row n. A Mat of
 * this type points (data) at its Bf16eData, which points at the rest. */
enum { BF16E_BLOCK = 64, BF16E_BLOCK_BYTES = 88, BF16E_ESCAPE = 7 };
typedef struct {
    const uint8_t *blocks;    /* (N, K / 64) blocks of 88 bytes, row after row */
    uint8_t exps[8];          /* exponent of codes 0-6 (exps[7] unused, 0) */
    uint8_t rot[16];          /* the same rotated right by one bit, then zeros: the tiles' table */
    const uint32_t *esc_row;  /* (N + 1) escapes before row n; esc_row[N] all of them */
    const uint8_t *esc;       /* (esc_row[N]) escaped exponents, rotated */
} Bf16eData;
static inline int bf16e_pos(int k) { return 16 * (k / 4 % 4) + 4 * (k / 16) + k % 4; }
/* Plane b of a block (its 8 bytes copied: a block is not aligned). */
static inline uint64_t bf16e_plane(const uint8_t *blk, int b) {
    uint64_t v;
    memcpy(&v, blk + BF16E_BLOCK + 8 * b, 8);
    return v;
}
/* The bytes of a block whose code is the escape, as a mask of 64 bits. */
static inline uint64_t bf16e_escapes(const uint8_t *blk) {
    return bf16e_plane(blk, 0) & bf16e_plane(blk, 1) & bf16e_plane(blk, 2);
}
/* Weight k (0..63) of the block blk, whose escapes start at esc: its BF16
 * bits. The plain decoder, one weight at a time. */
static inline uint16_t bf16e_weight(const uint8_t *blk, const uint8_t *esc, const uint8_t exps[8], int k) {
    int p = bf16e_pos(k);
    unsigned code = 0;
    for (int b = 0; b < 3; b++) code |= (unsigned)(bf16e_plane(blk, b) >> p & 1) << b;
    unsigned e;
    if (code == BF16E_ESCAPE) {   /* the escapes of the bytes before p come first */
        uint64_t before = bf16e_escapes(blk) & ((UINT64_C(1) << p) - 1);
        unsigned r = esc[__builtin_popcountll(before)];
        e = (r << 1 | r >> 7) & 0xff;   /* rotated left: back to the exponent */
    } else {
        e = exps[code];
    }
    unsigned sm = blk[p];
    return (uint16_t)((sm & 0x80) << 8 | e << 7 | (sm & 0x7f));
}

/* Values per block of a type (1 for the float types). */
int dtype_block(DType type);
/* 1 for the block formats whose fast kernels round activations to Q8_K
 * (the K formats), 0 for those that round them to Q8_0 or keep floats. */
static inline int dtype_is_k(DType type) { return type == DT_Q4_K || type == DT_Q5_K || type == DT_Q6_K; }
/* 1 for the formats with 4, 5 or 6-bit values (every block format but Q8_0). */
static inline int dtype_is_small_quant(DType type) {
    return type == DT_Q4_0 || type == DT_Q4_1 || type == DT_Q5_0 || type == DT_Q5_1 || dtype_is_k(type);
}
/* Bytes of one row of n values; 0 if n is not a whole number of blocks.
 * Inline: the AVX-512 tiles ask for it at every tile. */
static inline size_t dtype_row_bytes(DType type, int64_t n) {
    if (n <= 0) return 0;
    switch (type) {
    case DT_F32: return (size_t)n * 4;
    case DT_F16: return (size_t)n * 2;
    case DT_BF16: return (size_t)n * 2;
    case DT_BF16E: return n % BF16E_BLOCK ? 0 : (size_t)(n / BF16E_BLOCK) * BF16E_BLOCK_BYTES;
    case DT_Q8_0: return n % QK8_0 ? 0 : (size_t)(n / QK8_0) * sizeof(BlockQ8_0);
    case DT_Q4_0: return n % QK4 ? 0 : (size_t)(n / QK4) * sizeof(BlockQ4_0);
    case DT_Q4_1: return n % QK4 ? 0 : (size_t)(n / QK4) * sizeof(BlockQ4_1);
    case DT_Q5_0: return n % QK4 ? 0 : (size_t)(n / QK4) * sizeof(BlockQ5_0);
    case DT_Q5_1: return n % QK4 ? 0 : (size_t)(n / QK4) * sizeof(BlockQ5_1);
    case DT_Q4_K: return n % QK_K ? 0 : (size_t)(n / QK_K) * sizeof(BlockQ4_K);
    case DT_Q5_K: return n % QK_K ? 0 : (size_t)(n / QK_K) * sizeof(BlockQ5_K);
    case DT_Q6_K: return n % QK_K ? 0 : (size_t)(n / QK_K) * sizeof(BlockQ6_K);
    }
    return 0;
}

float fp16_to_fp32(uint16_t h);

/* fp16_to_fp32 without a branch, for loops the compiler turns into vector
 * code: the same bits for each of the 65536 halves (test_ops checks them
 * all). Exponent and mantissa move into place together and the exponent is
 * rebiased by 112 (127 - 15); infinities and NaNs (exponent 31) by 112 more,
 * to 255; a subnormal half (exponent 0) is its mantissa times 2^-24, which a
 * float holds exactly. The sign goes back on last, zeros included. */
static inline float fp16_to_fp32_branchless(uint16_t h) {
    uint32_t em = h & 0x7fffu, sign = (uint32_t)(h & 0x8000u) << 16;
    union { uint32_t u; float f; } normal, tiny;
    uint32_t special = em >= 0x7c00u, subnormal = 0u - (em < 0x400u);   /* 0 or 1; 0 or all ones */
    normal.u = (em << 13) + (112u << 23) + special * (112u << 23);
    tiny.f = (float)(int32_t)em * 0x1p-24f;
    normal.u = (tiny.u & subnormal) | (normal.u & ~subnormal) | sign;
    return normal.f;
}

/* BF16 is the top half of an IEEE float (sign, the 8-bit exponent, 7
 * mantissa bits): widening it is exact, a shift by 16. */
static inline float bf16_to_fp32(uint16_t b) {
    union { uint32_t u; float f; } v = {.u = (uint32_t)b << 16};
    return v.f;
}
uint16_t fp32_to_fp16(float f);          /* round to nearest even */
uint16_t fp32_to_bf16(float f);          /* round to nearest even; a NaN stays a NaN */

/* A weight matrix W of N rows by K columns, row-major, as stored in the file.
 * out = x @ W^T, the convention of every linear layer here. */
typedef struct {
    DType type;
    int N, K;
    const void *data;    /* usually points into the memory-mapped file; DT_BF16E: a Bf16eData */
    const uint8_t *rows8;   /* DT_Q4_0, DT_Q8_0, DT_Q4_K, DT_Q6_K only, or NULL: the same rows in eights (below),
                               made at load for the AVX2 tiles; every other path reads data */
} Mat;

/* In eights: a copy of a Q4_0, Q8_0, Q4_K or Q6_K matrix (N a multiple of 8) laid out
 * for the AVX2 tiles (tiles_avx2.c, "In eights"), which take eight rows by
 * one load of their values and one float step for all eight. Group g, rows
 * 8g .. 8g+7, is the same bytes as those rows (8 * row bytes, so group g
 * starts where row 8g does), block after block; block b of the group is
 * rows8_block_bytes(type) = 8 blocks' bytes, 144 (Q4_0) or 272 (Q8_0):
 *   uint16_t d[8]            the scales of rows 8g + i, i = 0 .. 7
 *   uint8_t  qs[2][C][4][8]  [x][c][y]: bytes 8c .. 8c+7 of the values of
 *                            row 8g + rows8_row(x, y); C = 2 for Q4_0
 *                            (16 bytes of nibbles), 4 for Q8_0 (32 bytes)
 * A 32-byte load of qs[x][c] has four rows' bytes 8c .. 8c+7: for Q4_0
 * values 8c .. 8c+7 in the low nibbles and 16 + 8c .. 23 + 8c in the high
 * ones, for Q8_0 values 8c .. 8c+7. The order of the rows within a load is
 * the order in which vphaddd (an add of neighbouring int32 pairs within
 * each 128-bit half) brings the sums of the loads x = 0 and 1 out in rows
 * 0 .. 7. */
/*
 * Q4_K the same way, a super-block of eight rows (8 * 144 = 1152 bytes):
 *   uint16_t d[8], dmin[8]      rows 8g + i, i = 0 .. 7
 *   uint32_t sc[3][8]           [w][i]: bytes 4w .. 4w+3 of row 8g + i's
 *                               twelve bytes of scales and mins, so that one
 *                               32-byte load holds a word of all eight rows
 *   uint8_t  qs[4][4][2][4][8]  [c][q][x][y]: bytes 32c + 8q .. +7 of the
 *                               row's qs, of row 8g + rows8_row(x, y): low
 *                               nibbles values 64c + 8q .. +7 (sub-block 2c),
 *                               high ones 64c + 32 + 8q .. (sub-block 2c+1)
 *
 * Q6_K, a super-block of eight rows (8 * 210 = 1680 bytes):
 *   uint16_t d[8]
 *   int8_t   scales[16][8]       [j][i]: sub-block j's scale of row 8g + i
 *   uint8_t  q[2][4][2][3][4][8] [h][q][x][part][y]: bytes 8q .. 8q+7 of the
 *                               row's ql + 64h (part 0), ql + 64h + 32
 *                               (part 1) and qh + 32h (part 2), of row
 *                               8g + rows8_row(x, y) */
static inline int rows8_type(DType type) {
    return type == DT_Q4_0 || type == DT_Q8_0 || type == DT_Q4_K || type == DT_Q6_K;
}
static inline size_t rows8_block_bytes(DType type) {
    return 8 * (type == DT_Q8_0   ? sizeof(BlockQ8_0)
                : type == DT_Q4_K ? sizeof(BlockQ4_K)
                : type == DT_Q6_K ? sizeof(BlockQ6_K)
                                  : sizeof(BlockQ4_0));
}
static inline int rows8_row(int x, int y) { return 4 * (y >> 1) + 2 * x + (y & 1); }
/* W (rows8_type, N % 8 == 0) into out: N * dtype_row_bytes(type, K) bytes. */
void mat_to_rows8(uint8_t *out, const Mat *W);
/* Block b of row n (a BlockQ4_0, BlockQ8_0, BlockQ4_K or BlockQ6_K) back
 * out of the copy: the plain reader of the layout. */
void rows8_block(void *out, const uint8_t *rows8, DType type, int K, int n, int b);

/* Row n of a DT_BF16E matrix: its first block. */
static inline const uint8_t *bf16e_row(const Mat *W, int n) {
    return ((const Bf16eData *)W->data)->blocks + (size_t)n * dtype_row_bytes(DT_BF16E, W->K);
}

/* Round one row of K floats (K % 32 == 0) to Q8_0 blocks: d = max|x| / 127.
 * The fast version (AVX-512 or AVX2 when ops_isa() is) is bit-identical to the plain one. */
void quantize_row_q8_0(BlockQ8_0 *out, const float *x, int K);
void quantize_row_q8_0_ref(BlockQ8_0 *out, const float *x, int K);
/* Round one row of K floats (K % 256 == 0) to Q8_K super-blocks, as
 * llama.cpp's quantize_row_q8_K_ref does (see BlockQ8_K); the fast version
 * likewise bit-identical to the plain one. */
void quantize_row_q8_k(BlockQ8_K *out, const float *x, int K);
void quantize_row_q8_k_ref(BlockQ8_K *out, const float *x, int K);

/* Widen one row of a weight matrix to float (K a whole number of blocks;
 * not DT_BF16E, whose rows need their side: dequantize_mat_row). */
void dequantize_row(float *out, const void *row, DType type, int K);
/* Row n of W as floats, any type, DT_BF16E included. */
void dequantize_mat_row(float *out, const Mat *W, int n);
/* Row n of a DT_BF16E matrix back to its BF16 bits: the plain decoder that
 * every fast one is checked against. */
void bf16e_row_to_bf16(uint16_t *out, const Mat *W, int n);

/* Round one row of K floats to a block format by round-to-nearest: per block
 * (or sub-block) the scale that maps the range onto the integer grid, values
 * rounded to nearest, K-format sub-block scales and mins rounded to 6 bits
 * (Q6_K: 8 bits) against a super-block scale. Simpler than llama.cpp's
 * quantizers, which search for the scale of least squared error, but it
 * writes the same layout. ST_ARG if the type is not a 4, 5 or 6-bit block
 * format or K is not a whole number of its blocks. */
int quantize_row(void *out, const float *x, DType type, int K);

#endif
