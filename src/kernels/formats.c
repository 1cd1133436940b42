/* formats.c - the weight formats' names and sizes, and the conversions
 * between half floats and floats (see formats.h). */
#include "kernels/formats.h"
#include <math.h>
#include <string.h>

const char *dtype_name(int type) {
    switch (type) {
    case DT_F32: return "F32";
    case DT_F16: return "F16";
    case DT_BF16: return "BF16";
    case DT_BF16E: return "BF16E";
    case DT_Q8_0: return "Q8_0";
    case DT_Q4_0: return "Q4_0";
    case DT_Q4_1: return "Q4_1";
    case DT_Q5_0: return "Q5_0";
    case DT_Q5_1: return "Q5_1";
    case DT_Q4_K: return "Q4_K";
    case DT_Q5_K: return "Q5_K";
    case DT_Q6_K: return "Q6_K";
    default: return "unknown";
    }
}

int dtype_known(int type) {
    return type == DT_F32 || type == DT_F16 || type == DT_Q8_0 || type == DT_BF16 ||
           dtype_is_small_quant((DType)type);
}

int dtype_block(DType type) {
    if (type == DT_Q8_0) return QK8_0;
    if (dtype_is_k(type)) return QK_K;
    return dtype_is_small_quant(type) ? QK4 : 1;
}

/* The layouts are ggml's, byte for byte: a compiler that padded them would
 * read every file wrong. */
_Static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
               sizeof(BlockQ5_1) == 24, "32-value blocks must be packed as in GGUF");
_Static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210,
               "K super-blocks must be packed as in GGUF");

float fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else {                      /* subnormal: value = mant * 2^-24 */
            float f = (float)mant * 0x1p-24f;
            return sign ? -f : f;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);            /* inf / nan */
    } else {
        bits = sign | ((exp + 112) << 23) | (mant << 13);    /* rebias 15 -> 127 */
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t fp32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);   /* NaN: keep it quiet */
    u += 0x7fffu + ((u >> 16) & 1);   /* to nearest, ties to even (carries into the exponent) */
    return (uint16_t)(u >> 16);
}

uint16_t fp32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffff;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);  /* rounds to >= 65536: inf */
    if (ax < 0x38800000u) {                                    /* below 2^-14: subnormal */
        float a;
        memcpy(&a, &ax, 4);
        return (uint16_t)(sign | (uint32_t)lrintf(a * 0x1p24f)); /* ties to even */
    }
    uint32_t mant = ax & 0x7fffff, exp = (ax >> 23) - 112;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fff;                             /* 13 bits dropped */
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;     /* nearest, ties to even */
    return (uint16_t)(sign | h);
}

/* In eights (formats.h): block b of row n sits in group n / 8, at lane
 * i = n % 8; its values are spread over the loads of the block, eight bytes
 * in each of C = bytes / 8 of them. */
static size_t rows8_at(DType type, int K, int n, int b) {
    return ((size_t)(n / 8) * (K / dtype_block(type)) + (size_t)b) * rows8_block_bytes(type);
}

/* Q4_K: where byte j of the block of row i (a BlockQ4_K's bytes) goes
 * within the super-block of the copy. */
static size_t rows8_k_byte(int i, int j) {
    if (j < 4) return (size_t)(j < 2 ? 2 * i + j : 16 + 2 * i + j - 2);   /* d, dmin */
    if (j < 16) return 32 + (size_t)((j - 4) / 4 * 8 + i) * 4 + (size_t)(j - 4) % 4;   /* sc[w][i] */
    int v = j - 16, c = v / 32, q = v % 32 / 8, x = i / 2 % 2, y = i / 4 * 2 + i % 2;
    return 128 + (size_t)((((c * 4 + q) * 2 + x) * 4 + y) * 8 + v % 8);
}

/* Where byte j of row i's values (16 of Q4_0's nibbles, 32 of Q8_0's
 * values) goes within a block of the copy. */
static size_t rows8_byte(int chunks, int i, int j) {
    int c = j / 8, x = i / 2 % 2, y = i / 4 * 2 + i % 2;   /* rows8_row(x, y) == i */
    return 16 + (size_t)((x * chunks + c) * 4 + y) * 8 + (size_t)(j % 8);
}

/* The block's scale and values: Q4_0 and Q8_0 both start with d. */
static int rows8_values(DType type) { return type == DT_Q8_0 ? QK8_0 : QK4 / 2; }

void mat_to_rows8(uint8_t *out, const Mat *W) {
    if (W->type == DT_Q4_K) {
        int nb = W->K / QK_K;
        for (int n = 0; n < W->N; n++) {
            const uint8_t *row = (const uint8_t *)W->data + (size_t)n * nb * sizeof(BlockQ4_K);
            for (int b = 0; b < nb; b++) {   /* rows8_k_byte's places, in runs of 2, 4 and 8 bytes */
                uint8_t *blk = out + rows8_at(DT_Q4_K, W->K, n, b);
                const uint8_t *src = row + b * sizeof(BlockQ4_K);
                memcpy(blk + rows8_k_byte(n % 8, 0), src, 2);
                memcpy(blk + rows8_k_byte(n % 8, 2), src + 2, 2);
                for (int j = 4; j < 16; j += 4) memcpy(blk + rows8_k_byte(n % 8, j), src + j, 4);
                for (int j = 16; j < (int)sizeof(BlockQ4_K); j += 8) memcpy(blk + rows8_k_byte(n % 8, j), src + j, 8);
            }
        }
        return;
    }
    int nb = W->K / QK8_0, bytes = rows8_values(W->type);
    size_t bs = rows8_block_bytes(W->type) / 8;
    for (int n = 0; n < W->N; n++) {
        const uint8_t *row = (const uint8_t *)W->data + (size_t)n * nb * bs;
        for (int b = 0; b < nb; b++) {
            uint8_t *blk = out + rows8_at(W->type, W->K, n, b);
            memcpy(blk + 2 * (n % 8), row + b * bs, 2);
            for (int j = 0; j < bytes; j++) blk[rows8_byte(bytes / 8, n % 8, j)] = row[b * bs + 2 + j];
        }
    }
}

void rows8_block(void *out, const uint8_t *rows8, DType type, int K, int n, int b) {
    const uint8_t *blk = rows8 + rows8_at(type, K, n, b);
    uint8_t *o = out;
    if (type == DT_Q4_K) {
        for (int j = 0; j < (int)sizeof(BlockQ4_K); j++) o[j] = blk[rows8_k_byte(n % 8, j)];
        return;
    }
    int bytes = rows8_values(type);
    memcpy(o, blk + 2 * (n % 8), 2);
    for (int j = 0; j < bytes; j++) o[2 + j] = blk[rows8_byte(bytes / 8, n % 8, j)];
}
