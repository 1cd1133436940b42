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

/* Q4_K and Q6_K: where byte j of the block of row i (a BlockQ4_K's or
 * BlockQ6_K's bytes) goes within the super-block of the copy. */
static size_t rows8_k_byte(DType type, int i, int j) {
    int x = i / 2 % 2, y = i / 4 * 2 + i % 2;   /* rows8_row(x, y) == i */
    if (type == DT_Q6_K) {
        if (j >= 208) return (size_t)(2 * i + j - 208);             /* d */
        if (j >= 192) return 16 + (size_t)(j - 192) * 8 + (size_t)i;   /* scales[j][i] */
        int h, r, part;
        if (j < 128) h = j / 64, r = j % 64, part = r / 32, r %= 32;   /* ql: loads A and B */
        else h = (j - 128) / 32, r = (j - 128) % 32, part = 2;         /* qh: load C */
        return 144 + (size_t)((((h * 4 + r / 8) * 2 + x) * 3 + part) * 32 + y * 8 + r % 8);
    }
    if (j < 4) return (size_t)(j < 2 ? 2 * i + j : 16 + 2 * i + j - 2);   /* d, dmin */
    if (j < 16) return 32 + (size_t)((j - 4) / 4 * 8 + i) * 4 + (size_t)(j - 4) % 4;   /* sc[w][i] */
    int v = j - 16, c = v / 32, q = v % 32 / 8;
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

/* The K types' copy a block at a time, in the runs of bytes that stay
 * together (found once per row slot i): a byte at a time was 1 s for a
 * 600 MB file. */
static void rows8_k_copy(uint8_t *out, const Mat *W) {
    int nb = W->K / QK_K, bs = (int)dtype_row_bytes(W->type, QK_K), src[8][256], dst[8][256], len[8][256], runs[8];
    for (int i = 0; i < 8; i++) {
        runs[i] = 0;
        for (int j = 0; j < bs; j++) {
            int d = (int)rows8_k_byte(W->type, i, j), r = runs[i] - 1;
            if (r >= 0 && src[i][r] + len[i][r] == j && dst[i][r] + len[i][r] == d) len[i][r]++;
            else src[i][runs[i]] = j, dst[i][runs[i]] = d, len[i][runs[i]++] = 1;
        }
    }
    for (int n = 0; n < W->N; n++) {
        const uint8_t *row = (const uint8_t *)W->data + (size_t)n * nb * bs;
        for (int b = 0; b < nb; b++) {
            uint8_t *blk = out + rows8_at(W->type, W->K, n, b);
            const uint8_t *from = row + (size_t)b * bs;
            for (int r = 0; r < runs[n % 8]; r++) memcpy(blk + dst[n % 8][r], from + src[n % 8][r], (size_t)len[n % 8][r]);
        }
    }
}

void mat_to_rows8(uint8_t *out, const Mat *W) {
    if (W->type == DT_Q4_K || W->type == DT_Q6_K) {
        rows8_k_copy(out, W);
        return;
    }
    int nb = W->K / QK8_0, bytes = rows8_values(W->type);
    size_t bs = rows8_block_bytes(W->type) / 8;
    for (int n = 0; n < W->N; n++) {
        const uint8_t *row = (const uint8_t *)W->data + (size_t)n * nb * bs;
        for (int b = 0; b < nb; b++) {
            uint8_t *blk = out + rows8_at(W->type, W->K, n, b);
            memcpy(blk + 2 * (n % 8), row + b * bs, 2);
            for (int j = 0; j < bytes; j += 8)   /* eight values stay together */
                memcpy(blk + rows8_byte(bytes / 8, n % 8, j), row + b * bs + 2 + j, 8);
        }
    }
}

void rows8_block(void *out, const uint8_t *rows8, DType type, int K, int n, int b) {
    const uint8_t *blk = rows8 + rows8_at(type, K, n, b);
    uint8_t *o = out;
    if (type == DT_Q4_K || type == DT_Q6_K) {
        for (int j = 0; j < (int)dtype_row_bytes(type, QK_K); j++) o[j] = blk[rows8_k_byte(type, n % 8, j)];
        return;
    }
    int bytes = rows8_values(type);
    memcpy(o, blk + 2 * (n % 8), 2);
    for (int j = 0; j < bytes; j++) o[2 + j] = blk[rows8_byte(bytes / 8, n % 8, j)];
}
