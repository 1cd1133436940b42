/* gguf.h - a reader for GGUF v2/v3 files, memory-mapped.
 *
 * A GGUF file is: magic "GGUF", version, counts; metadata as typed key/value
 * pairs; a table of tensors (name, shape, type, offset); padding; tensor data.
 * gguf_open checks every length and offset against the file size before the
 * rest of the engine sees a pointer, so a truncated or lying file is refused
 * with one line naming the file, the byte offset and the field. */
#ifndef GGUF_H
#define GGUF_H
#include "base/err.h"
#include <stddef.h>
#include <stdint.h>

/* Metadata value types, numbered as in the specification. */
enum {
    GG_U8 = 0, GG_I8, GG_U16, GG_I16, GG_U32, GG_I32, GG_F32, GG_BOOL,
    GG_STRING, GG_ARRAY, GG_U64, GG_I64, GG_F64, GG_NTYPES
};

typedef struct {
    const char *s;       /* points into the mapping; NOT NUL-terminated */
    uint64_t len;
} GgufStr;

typedef struct {
    GgufStr key;
    uint32_t type;        /* GG_* */
    const uint8_t *val;   /* the raw value in the mapping */
    uint64_t val_len;     /* its bytes (what a copy of the pair must carry) */
    uint32_t arr_type;    /* for GG_ARRAY: element type */
    uint64_t arr_n;       /* for GG_ARRAY: element count */
} GgufKV;

/* ggml's I8: one signed byte per element. A compressed model file
 * (wcodec.h) stores each coded matrix as a 1-D I8 tensor of its blob's bytes. */
#define GGUF_TYPE_I8 24

#define GGUF_MAX_DIMS 4
typedef struct {
    GgufStr name;
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS];   /* ne[0] is the contiguous (row) dimension */
    uint32_t type;                /* ggml type: F32 0, F16 1, Q8_0 8 */
    uint64_t offset;              /* from the start of the data section */
    const void *data;             /* into the mapping */
    size_t nbytes;
} GgufTensor;

typedef struct {
    const char *path;
    const uint8_t *map;
    size_t size;
    uint32_t version;
    uint64_t n_kv, n_tensors;
    GgufKV *kv;
    GgufTensor *tensors;
    size_t alignment;
    size_t data_offset;
} Gguf;

int gguf_open(Gguf *g, const char *path, Err *e);
void gguf_close(Gguf *g);                        /* accepts a zeroed Gguf */

const GgufKV *gguf_find(const Gguf *g, const char *key);   /* NULL if absent */
const GgufTensor *gguf_tensor(const Gguf *g, const char *name);

/* Typed getters: ST_OK, or ST_FORMAT with a message if the key is missing or
 * of a type that cannot be converted. Integers of any width are accepted. */
int gguf_get_int(const Gguf *g, const char *key, int64_t *out, Err *e);
int gguf_get_float(const Gguf *g, const char *key, double *out, Err *e);
int gguf_get_str(const Gguf *g, const char *key, GgufStr *out, Err *e);
/* Array of a key: type and count checked; *data points at the first element. */
int gguf_get_array(const Gguf *g, const char *key, uint32_t elem_type, const uint8_t **data,
                   uint64_t *n, Err *e);
/* Walk an array of strings: reads one string at *p and advances *p. The array
 * bounds were checked by gguf_open, so this cannot run off the mapping. */
GgufStr gguf_next_str(const uint8_t **p);

int gguf_str_eq(GgufStr s, const char *c);

/* Per-tensor checksums: `key` holds one u32 per tensor, in tensor order, the
 * CRC-32 (rans_crc32) of that tensor's bytes in this file (tools/compress.c
 * writes them as "rans.tensor.crc32"). Every tensor is hashed; `each`, when
 * given, hears every tensor's index, stored and computed CRC. ST_OK if all
 * match; else ST_FORMAT and e names the first tensor that does not (its
 * name, offset in the file and both CRCs). */
typedef void (*GgufCrcFn)(void *ctx, uint64_t i, uint32_t stored, uint32_t got);
int gguf_check_crcs(const Gguf *g, const char *key, GgufCrcFn each, void *ctx, Err *e);
/* The header's checksum: `key`, a u32, holds the CRC-32 of the file's bytes
 * before its data section (the key/value pairs and the tensor table) taken
 * with the key's own 4 value bytes as zeros. gguf_header_crc computes it
 * (for a writer to patch in, or to compare); gguf_check_header_crc compares:
 * ST_OK, or ST_FORMAT naming both CRCs. *off: where the value bytes are. */
int gguf_header_crc(const Gguf *g, const char *key, uint32_t *crc, size_t *off, Err *e);
int gguf_check_header_crc(const Gguf *g, const char *key, Err *e);

#endif
