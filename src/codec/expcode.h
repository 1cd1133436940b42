/* expcode.h - the fast tier of the weight codec: BF16 matrices rewritten
 * with a fixed-length exponent code (DT_BF16E, kernels/formats.h), which the
 * matrix-product tiles decode in registers as they read it.
 *
 * The rANS blobs of wcodec.h are the form at rest; this is the form in
 * memory for --low-mem. A matrix is made in two passes over its BF16 rows
 * (which the caller decodes from the blob a piece at a time): the first
 * counts exponents (ec_count) and chooses the table (ec_table), the second
 * writes the rows (ec_write_rows). Lossless: bf16e_row_to_bf16 gives every
 * row back bit for bit (tests/test_wcodec.c).
 *
 * Where it pays, and what it costs, is notes/rans.md, "The fast tier". */
#ifndef EXPCODE_H
#define EXPCODE_H
#include "base/err.h"
#include "kernels/formats.h"
#include <stddef.h>
#include <stdint.h>

/* hist[e] += how many of the n BF16 values have exponent e. */
void ec_count(uint64_t hist[256], const uint16_t *bf16, size_t n);
/* The table: the 7 most frequent exponents of hist, most frequent first
 * (ties to the smaller exponent), into exps[0..6], exps[7] = 0. Returns how
 * many values are left to escapes. */
uint64_t ec_table(const uint64_t hist[256], uint8_t exps[8]);

/* Bytes of a BF16E matrix of N rows by K (K % 64 == 0) with `escapes`
 * escaped exponents: its blocks, row index and escapes, 64-byte aligned
 * pieces, plus room for the tiles' masked loads. 0 if K is not a multiple
 * of 64 or a count overflows 32 bits. */
size_t ec_bytes(int N, int K, uint64_t escapes);

/* Writes the rows of one matrix, in order, into mem (ec_bytes of it). */
typedef struct {
    uint8_t *blocks;          /* (N, K / 64 blocks of 88 bytes) */
    uint32_t *esc_row;        /* (N + 1) */
    uint8_t *esc;             /* (escapes) */
    uint64_t escapes, esc_at; /* room, and how many are written */
    int N, K, next;           /* next: the row to write next */
    uint8_t code[256];        /* exponent -> code (7: escape) */
} EcWriter;

/* Lays the matrix out in mem and fills *d (exps copied, its arrays in
 * mem) and *W (type DT_BF16E, N, K, data d). The rows are written next. */
void ec_writer_init(EcWriter *w, void *mem, int N, int K, const uint8_t exps[8], uint64_t escapes,
                    Mat *W, Bf16eData *d);
/* The next `rows` rows, from rows * K BF16 values. ST_FORMAT (one line in
 * e) if they hold more escapes than the room left, or rows run past N:
 * the counts of the first pass were not of these values. */
int ec_write_rows(EcWriter *w, const uint16_t *bf16, int rows, Err *e);

#endif
