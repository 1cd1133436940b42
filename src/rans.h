/* rans.h - the weight codec's entropy coder: interleaved rANS over bytes, in
 * independent chunks, with a self-describing stream layout.
 *
 * What it promises: rans_decode(rans_encode(x)) == x, bit for bit, for any
 * bytes x (empty included), any parameters in range, and any instruction set;
 * the plain decoder and the AVX-512 one give identical output. A stream that
 * was damaged is refused with ST_FORMAT and a one-line message naming the
 * field, offset or chunk; decoding never reads outside the stream it was
 * given, never writes outside the caller's buffer, and always ends.
 *
 * Names used throughout: n bytes of input, M = 2^bits the total of the
 * normalised frequencies ("probability bits"), N interleaved states, C bytes
 * per chunk, K = ceil(n / C) chunks, L = 2^23 the low end of a state's range.
 *
 * Groups, one line each:
 *   frequencies   count bytes, normalise to M, order-0 entropy
 *   encoding      bound, encode into a caller's buffer or a new one
 *   decoding      open a stream (checks it, builds tables), decode a chunk or all
 * The layout of a stream, byte by byte, is in rans.c and notes/rans.md. */
#ifndef RANS_H
#define RANS_H
#include "base/err.h"
#include <stddef.h>
#include <stdint.h>

enum {
    RANS_BITS_MIN = 10,          /* M = 2^bits; 256 symbols need at least 2^8, and we keep slack */
    RANS_BITS_MAX = 15,          /* a frequency (up to M) fits in 16 bits */
    RANS_BITS_DEFAULT = 14,
    RANS_MAX_STATES = 32,        /* N is 1, 2, 4, 8, 16 or 32 */
    RANS_L_BITS = 23,            /* states live in [L, 256 L) = [2^23, 2^31) */
    RANS_VERSION = 1,
    RANS_PACKED_BITS = 12,       /* up to here a slot's symbol, freq - 1 and offset fit 32 bits */
};
#define RANS_L (1u << RANS_L_BITS)
#define RANS_CHUNK_MAX (1u << 30)    /* largest chunk size C */

/* ------------------------------------------------------------ frequencies */

/* count[s] = occurrences of byte s in src (n bytes). */
void rans_count(const uint8_t *src, size_t n, uint64_t count[256]);

/* Normalise counts to frequencies that sum to exactly 2^bits: a symbol that
 * occurs gets at least 1, one that does not gets 0, and among such tables the
 * one returned has (close to) the least coding cost sum count[s] *
 * log2(M / freq[s]). All-zero counts give all-zero frequencies. ST_ARG if bits
 * is outside RANS_BITS_MIN..RANS_BITS_MAX. */
int rans_normalize(const uint64_t count[256], int bits, uint32_t freq[256], Err *e);

/* Order-0 entropy of src in bits per byte: -sum p log2 p over byte
 * frequencies. 0 for empty or constant input. */
double rans_entropy(const uint8_t *src, size_t n);

/* Ideal cost in bits of coding count with freq (total 2^bits): what rANS spends
 * on the symbols, before states and renormalisation rounding. */
double rans_cost_bits(const uint64_t count[256], const uint32_t freq[256], int bits);

/* ------------------------------------------------------------ encoding */

typedef struct {
    int bits;              /* probability bits, RANS_BITS_MIN..RANS_BITS_MAX */
    int n_states;          /* N: 1, 2, 4, 8, 16 or 32 */
    uint32_t chunk_size;   /* C: input bytes per chunk, 1..RANS_CHUNK_MAX */
} RansParams;

/* 14 bits, 32 states, 64 KiB chunks. */
RansParams rans_default_params(void);

/* Where the bytes of a stream go. header + payload == total. */
typedef struct {
    size_t header;         /* everything before the first chunk: fixed fields, table, index, CRC */
    size_t table;          /* of header: the frequency table */
    size_t index;          /* of header: the chunk index, 12 bytes per chunk */
    size_t payload;        /* the chunks: states and renormalisation bytes */
    size_t states;         /* of payload: 4 N bytes per chunk of initial decoder states */
    size_t total;
    uint64_t n_chunks;     /* K */
} RansSizes;

/* Bytes rans_encode may need for n input bytes (a safe upper bound: 2 bytes
 * per symbol, plus states and header). 0 if p is invalid or it overflows. */
size_t rans_encode_bound(size_t n, const RansParams *p);

/* Encode src (n bytes) into dst (cap bytes); *len = bytes written. sizes
 * (may be NULL) gets the breakdown. ST_ARG for bad parameters or when the
 * stream does not fit in cap (rans_encode_bound(n, p) always fits). */
int rans_encode(const uint8_t *src, size_t n, const RansParams *p, uint8_t *dst, size_t cap,
                size_t *len, RansSizes *sizes, Err *e);

/* The same into a new buffer of exactly *len bytes (free with mem_free). */
int rans_encode_alloc(const uint8_t *src, size_t n, const RansParams *p, uint8_t **out,
                      size_t *len, RansSizes *sizes, Err *e);

/* ------------------------------------------------------------ decoding */

/* Decoders. RANS_AVX512 decodes 16 states per instruction and needs N = 16 or
 * 32 (other N decode with the plain loop under either choice). */
typedef enum { RANS_PLAIN = 0, RANS_AVX512 = 1 } RansIsa;
RansIsa rans_best_isa(void);             /* AVX512 when the CPU has AVX-512 F and BW */
const char *rans_isa_name(RansIsa isa);  /* "plain" or "avx512" */

/* A checked stream, ready to decode: header fields, the frequency table and
 * the tables the decoders look up. It points into the caller's bytes, which
 * must outlive it. */
typedef struct {
    const uint8_t *data;   /* (size) the whole stream */
    size_t size;
    int bits, n_states;
    uint64_t n;            /* original size */
    uint32_t chunk_size;
    uint64_t n_chunks;
    RansSizes sizes;
    const uint8_t *index;  /* (n_chunks, 12) u64 offset, u32 size, little-endian */
    const uint8_t *payload;/* (sizes.payload) */
    uint32_t freq[256];    /* sums to 2^bits (all zero when n == 0) */
    uint32_t start[257];   /* start[s] = freq[0] + ... + freq[s - 1] */
    uint8_t *slot_sym;     /* (2^bits + 4) symbol of each slot; 4 spare bytes for 32-bit gathers */
    uint32_t *slot_info;   /* (2^bits) freq | (slot - start) << 16, what the fast decoder gathers */
    uint32_t *slot_packed; /* bits <= RANS_PACKED_BITS: (freq - 1) | (slot - start) << 12 | symbol << 24,
                              so the fast decoder needs one gather a symbol instead of two; else NULL */
    void *block_;          /* the one allocation behind the tables */
} RansStream;

/* Check data (size bytes) as a stream: magic, version, fields in range, the
 * table (sum exact), the index (chunks back to back, sizes consistent) and the
 * header CRC; build the decode tables. ST_FORMAT names what is wrong. */
int rans_open(RansStream *s, const uint8_t *data, size_t size, Err *e);
void rans_close(RansStream *s);          /* accepts a zeroed stream */

/* Output bytes of chunk k (C, or what is left for the last one). */
size_t rans_chunk_len(const RansStream *s, uint64_t k);

/* Decode chunk k into dst (cap >= rans_chunk_len(s, k)). ST_FORMAT when the
 * payload runs out, or does not end with every state back at L and every
 * byte read: a damaged chunk is found here. Allocates nothing. */
int rans_decode_chunk(const RansStream *s, uint64_t k, uint8_t *dst, size_t cap, RansIsa isa, Err *e);

/* Chunks k .. k + count - 1 (count 1 or 2) into dst, back to back: two
 * chunks decode in lockstep, which hides the gathers' latency (the fast
 * decoder's speed comes from it). cap >= their total length. */
int rans_decode_chunks(const RansStream *s, uint64_t k, int count, uint8_t *dst, size_t cap, RansIsa isa,
                       Err *e);

/* Decode every chunk into dst (cap >= s->n), chunks spread over `threads`
 * OpenMP threads (<= 1: this thread alone). On failure the message names the
 * first damaged chunk. */
int rans_decode(const RansStream *s, uint8_t *dst, size_t cap, RansIsa isa, int threads, Err *e);

/* Open, decode all, close: for callers holding a stream in memory. */
int rans_decode_all(const uint8_t *data, size_t size, uint8_t *dst, size_t cap, size_t *len,
                    RansIsa isa, int threads, Err *e);

/* CRC-32 with zlib's polynomial: what a stream's header carries (and the
 * blobs of wcodec.h). */
uint32_t rans_crc32(const uint8_t *p, size_t n);

#endif
