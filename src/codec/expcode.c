/* expcode.c - BF16 rows to the fixed-length exponent code (expcode.h).
 *
 * Why this code and not rANS in the products. A product at 16 requests
 * spends about 2 cycles of one core per weight on multiply-adds; rANS needs
 * about 1.9 cycles per symbol before a weight is even assembled, so a
 * product that decoded rANS as it went would run at about half the speed
 * (notes/rans.md, the law of the ratio). A fixed-length code needs no state:
 * every weight's bits sit at a place known in advance, 64 weights decode
 * with a dozen vector instructions, and nothing depends on the weight
 * before. It spends 3 bits where rANS spends 2.5 on an exponent, and a byte
 * on each escape: about 70% of BF16 where rANS gets 67%.
 *
 * The table. A BF16 matrix's exponents pile up on a few values (the weights
 * of a trained layer are roughly Gaussian, so most of them lie within a
 * factor of 100 of each other: some 7 binades). The 7 most frequent get
 * codes 0-6; the rest, the smallest weights mostly, are escapes. */
#include "codec/expcode.h"
#include <string.h>

void ec_count(uint64_t hist[256], const uint16_t *bf16, size_t n) {
    for (size_t i = 0; i < n; i++) hist[bf16[i] >> 7 & 0xff]++;
}

uint64_t ec_table(const uint64_t hist[256], uint8_t exps[8]) {
    int taken[256] = {0};
    uint64_t total = 0, kept = 0;
    for (int e = 0; e < 256; e++) total += hist[e];
    for (int c = 0; c < BF16E_ESCAPE; c++) {
        int best = -1;
        for (int e = 0; e < 256; e++)
            if (!taken[e] && (best < 0 || hist[e] > hist[best])) best = e;
        taken[best] = 1;
        exps[c] = (uint8_t)best;
        kept += hist[best];
    }
    exps[BF16E_ESCAPE] = 0;
    return total - kept;
}

static size_t up64(size_t n) { return (n + 63) / 64 * 64; }

size_t ec_bytes(int N, int K, uint64_t escapes) {
    if (N <= 0 || K <= 0 || K % BF16E_BLOCK || escapes > UINT32_MAX) return 0;
    return up64((size_t)N * dtype_row_bytes(DT_BF16E, K)) + up64(((size_t)N + 1) * 4) + up64((size_t)escapes) + 64;
}

void ec_writer_init(EcWriter *w, void *mem, int N, int K, const uint8_t exps[8], uint64_t escapes,
                    Mat *W, Bf16eData *d) {
    uint8_t *p = mem;
    memset(w, 0, sizeof *w);
    w->blocks = p;
    p += up64((size_t)N * dtype_row_bytes(DT_BF16E, K));
    w->esc_row = (uint32_t *)p;
    p += up64(((size_t)N + 1) * 4);
    w->esc = p;
    memset(p, 0, up64((size_t)escapes) + 64);   /* the tail a masked load may touch: defined bytes */
    w->escapes = escapes;
    w->N = N;
    w->K = K;
    memset(w->code, BF16E_ESCAPE, sizeof w->code);
    for (int c = BF16E_ESCAPE - 1; c >= 0; c--) w->code[exps[c]] = (uint8_t)c;
    d->blocks = w->blocks;
    memcpy(d->exps, exps, 8);
    memset(d->rot, 0, sizeof d->rot);
    for (int c = 0; c < BF16E_ESCAPE; c++) d->rot[c] = (uint8_t)(exps[c] >> 1 | (exps[c] & 1) << 7);
    d->esc_row = w->esc_row;
    d->esc = w->esc;
    *W = (Mat){.type = DT_BF16E, .N = N, .K = K, .data = d};
}

int ec_write_rows(EcWriter *w, const uint16_t *bf16, int rows, Err *e) {
    if (rows < 0 || rows > w->N - w->next)
        return err_set(e, ST_FORMAT, "fast tier: %d rows from row %d of a matrix of %d", rows, w->next, w->N);
    size_t row_bytes = dtype_row_bytes(DT_BF16E, w->K);
    for (int r = 0; r < rows; r++, w->next++) {
        const uint16_t *src = bf16 + (size_t)r * w->K;
        uint8_t *blk = w->blocks + (size_t)w->next * row_bytes;
        w->esc_row[w->next] = (uint32_t)w->esc_at;
        for (int b = 0; b < w->K / BF16E_BLOCK; b++, blk += BF16E_BLOCK_BYTES) {
            uint64_t plane[3] = {0, 0, 0};
            uint8_t esc[BF16E_BLOCK];   /* by byte position; 0: none */
            uint64_t escm = 0;
            for (int k = 0; k < BF16E_BLOCK; k++) {
                unsigned v = src[b * BF16E_BLOCK + k], ex = v >> 7 & 0xff, c = w->code[ex];
                int p = bf16e_pos(k);
                blk[p] = (uint8_t)((v >> 8 & 0x80) | (v & 0x7f));
                for (int i = 0; i < 3; i++) plane[i] |= (uint64_t)(c >> i & 1) << p;
                if (c == BF16E_ESCAPE) {
                    esc[p] = (uint8_t)(ex >> 1 | (ex & 1) << 7);
                    escm |= UINT64_C(1) << p;
                }
            }
            memcpy(blk + BF16E_BLOCK, plane, sizeof plane);
            int n_esc = __builtin_popcountll(escm);
            if ((uint64_t)n_esc > w->escapes - w->esc_at)
                return err_set(e, ST_FORMAT, "fast tier: row %d holds more escaped exponents than counted (%llu)",
                               w->next, (unsigned long long)w->escapes);
            for (int p = 0; p < BF16E_BLOCK; p++)
                if (escm >> p & 1) w->esc[w->esc_at++] = esc[p];
        }
    }
    w->esc_row[w->next] = (uint32_t)w->esc_at;
    return ST_OK;
}
