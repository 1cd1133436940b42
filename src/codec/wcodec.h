/* wcodec.h - one weight tensor, rANS-coded: the form a compressed model file
 * stores its matrices in, and the decoder that restores their bytes.
 *
 * What it promises: wc_decode(wc_encode(t)) gives t's bytes back exactly, for
 * any tensor of any type (F32, F16, BF16 and Q8_0 are split into fields and
 * coded; any other type is kept as it is), on every instruction set. A coded
 * tensor ("blob") describes itself: the original type and shape travel in it,
 * so one tensor decodes alone. A damaged blob is refused with ST_FORMAT and one
 * line naming the field, and decoding never reads or writes out of bounds.
 *
 * How and why (the fields, the planes, the groups) opens wcodec.c.
 *
 * Blob layout (little-endian), header then planes back to back:
 *
 *   offset  bytes  field
 *   0       4      magic "RNSW"
 *   4       1      version (1)
 *   5       1      layout: 0 raw, 1 float fields, 2 Q8_0
 *   6       1      P, planes (1..4)
 *   7       1      reserved, 0
 *   8       4      ggml type of the original
 *   12      4      n_dims (1..4)
 *   16      32     ne[0..3], u64 each (unused dims 1)
 *   48      4      G, weights per group (a multiple of 32)
 *   52      4      reserved, 0
 *   56      8      original bytes
 *   64      24 P   per plane: u8 coded (0 raw, 1 rANS), 3 reserved bytes,
 *                  u32 bytes per group, u64 plane bytes, u64 stored bytes
 *   64+24P  4      CRC-32 of every header byte before it
 *   68+24P  ...    the planes: raw bytes, or an rANS stream (rans.h) whose
 *                  chunk size is the plane's bytes per group */
#ifndef WCODEC_H
#define WCODEC_H
#include "base/err.h"
#include "rans.h"
#include <stddef.h>
#include <stdint.h>

enum {
    WC_MAX_PLANES = 4,
    WC_GROUP_DEFAULT = 65536,    /* weights per group: 64 KiB chunks for byte planes */
    WC_VERSION = 1,
    /* rans.version of the compressed model files tools/compress.c writes:
     * 2 adds rans.tensor.crc32, every tensor's checksum (notes/rans.md) */
    WC_FILE_VERSION = 2,
    /* 12 probability bits, where the fast decoder needs one gather a symbol
     * (rans.h, RANS_PACKED_BITS): on exponent planes 14 bits code no smaller
     * (+0.1% at most) and decode at about half the speed */
    WC_BITS_DEFAULT = 12,
};
typedef enum { WC_LAYOUT_RAW = 0, WC_LAYOUT_FLOAT = 1, WC_LAYOUT_Q8_0 = 2 } WcLayout;

/* What one plane became: its bytes, how many are stored, their entropy. */
typedef struct {
    int coded;              /* 1: an rANS stream; 0: raw */
    uint32_t group_bytes;   /* plane bytes per group of G weights */
    uint64_t bytes;         /* plane bytes */
    uint64_t stored;        /* bytes in the blob */
    double entropy;         /* order-0, bits per byte (filled by wc_encode only) */
    RansSizes sizes;        /* when coded: header and payload of its stream */
} WcPlane;

/* A checked blob, ready to decode. Points into the caller's bytes. */
typedef struct {
    WcLayout layout;
    int type;               /* ggml type of the original */
    int n_dims;
    uint64_t ne[4];
    uint64_t n;             /* weights: ne[0] * ne[1] * ne[2] * ne[3] */
    uint64_t nbytes;        /* original bytes */
    uint32_t group;         /* G */
    uint64_t n_groups;
    int n_planes;
    WcPlane plane[WC_MAX_PLANES];
    const uint8_t *data[WC_MAX_PLANES];    /* where each plane's stored bytes start */
    RansStream rs[WC_MAX_PLANES];          /* open streams of the coded planes */
    size_t header;          /* blob header bytes */
    size_t size;            /* blob bytes */
} WcTensor;

/* Encode a tensor of ggml type `type`, shape ne (n_dims entries), whose
 * nbytes bytes are at data, into a new blob (*out, *len; mem_free it). group:
 * weights per group (0 for WC_GROUP_DEFAULT). p: bits and states of the
 * streams (NULL: WC_BITS_DEFAULT and 32 states; the chunk size is the group's). planes (may be NULL) receives
 * what each plane became and *n_planes their count. ST_ARG for a shape or
 * size that does not match the type. */
int wc_encode(const void *data, size_t nbytes, int type, int n_dims, const uint64_t *ne,
              uint32_t group, const RansParams *p, uint8_t **out, size_t *len,
              WcPlane planes[WC_MAX_PLANES], int *n_planes, Err *e);

/* 1 if blob (size bytes) starts like a blob (its magic); nothing else checked. */
int wc_is_blob(const uint8_t *blob, size_t size);

/* Check a blob and open its coded planes. `what` names it in messages (a
 * tensor name). ST_FORMAT names the field that is wrong. */
int wc_open(WcTensor *t, const uint8_t *blob, size_t size, const char *what, Err *e);
void wc_close(WcTensor *t);                   /* accepts a zeroed WcTensor */

/* Scratch bytes the decoders below need (for two groups of every plane). */
size_t wc_scratch_bytes(const WcTensor *t);

/* Decode the whole tensor into dst (cap >= t->nbytes), one thread. */
int wc_decode(const WcTensor *t, void *dst, size_t cap, void *scratch, RansIsa isa, Err *e);

/* Decode original bytes [from, from + len) into dst: the groups that cover
 * them are decoded and the range copied out. from and len need no alignment,
 * but a range that cuts a Q8_0 block or a float in two is refused (ST_ARG). */
int wc_decode_range(const WcTensor *t, uint64_t from, size_t len, void *dst, void *scratch,
                    RansIsa isa, Err *e);

/* Original bytes that one group of G weights decodes to (the last group of
 * a tensor may be shorter): ranges cut at multiples of it decode no group
 * twice. */
uint64_t wc_group_span(const WcTensor *t);

/* Every group, spread over `threads` OpenMP threads, each with its own
 * scratch (threads * wc_scratch_bytes, allocated here, so call from the thread
 * that allocates). */
int wc_decode_parallel(const WcTensor *t, void *dst, size_t cap, RansIsa isa, int threads, Err *e);

#endif
