/* gguf_write.h - a writer for GGUF v3 files, the reader's (gguf.h) mirror image.
 *
 * A file is described first and written last. Metadata values are encoded into
 * memory as they are added (they are small: a 32000-piece vocabulary is about
 * half a megabyte). Tensors are only recorded: a name, a shape, a type and where
 * the bytes will come from. gguf_w_write then lays the file out in one pass:
 *
 *     "GGUF", version 3, tensor count, key count
 *     key/value pairs (the caller's, then general.alignment = 32)
 *     tensor table: name, dims, ne[0..], type, offset in the data section
 *     zero padding to a multiple of 32
 *     tensor data, each tensor starting at a multiple of 32 (zero padded)
 *
 * Tensor bytes come from one of two sources:
 *   - a pointer to data already in the stored type (F32, F16 or Q8_0 bytes), or
 *   - a row callback that produces one row of ne[0] floats at a time; the writer
 *     rounds each row to the stored type (F16: nearest even; Q8_0: blocks of 32
 *     with d = max|x| / 127, via ops.h). Only one row is ever held in memory, so
 *     a 4 GB model streams to disk from a few kilobytes of buffer.
 *
 * Errors. Every add returns a Status. The first failure is also kept in the
 * writer (like a stream's error flag): later adds do nothing and return it,
 * and gguf_w_write reports it. So a caller can describe a whole model without
 * checking each line and still never write a half-described file.
 *
 * The file appears atomically: bytes go to "<path>.part", which is renamed to
 * path only once everything was written and closed. A failed or interrupted
 * write never leaves a truncated file under the final name.
 *
 * Byte order: GGUF is little-endian, and so is every host this engine builds on
 * (checked at compile time in gguf_write.c). */
#ifndef GGUF_WRITE_H
#define GGUF_WRITE_H
#include "base/err.h"
#include "load/gguf.h"
#include "kernels/ops.h"
#include <stddef.h>
#include <stdint.h>

#define GGUF_W_ALIGNMENT 32      /* written as general.alignment */
#define GGUF_W_MAX_NAME 64       /* tensor names are at most 64 bytes (GGUF spec) */

/* Produce row `row` (0 .. rows-1, where rows = ne[1] * ne[2] * ne[3]) of a
 * tensor: write n = ne[0] floats to out. Rows are requested in order, once
 * each, so a generator may keep its state in ctx. Return ST_OK, or a Status
 * with e filled (the write is then abandoned and reports that message). */
typedef int (*GgufRowFn)(void *ctx, int64_t row, float *out, int64_t n, Err *e);

/* A growable byte buffer (the encoded metadata). */
typedef struct {
    uint8_t *p;
    size_t len, cap;
} GgufWBuf;

typedef struct {
    char *name;                   /* owned copy */
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];    /* ne[0] is the row length; unused dims are 1 */
    DType type;
    const void *data;             /* stored-type bytes, or NULL when rows is set */
    GgufRowFn rows;
    void *ctx;
    uint64_t offset;              /* from the start of the data section */
    uint64_t nbytes;
} GgufWTensor;

typedef struct {
    const char *path;             /* the caller's string; must outlive the writer */
    GgufWBuf meta;                /* encoded key/value pairs */
    uint64_t n_kv;
    size_t *key_at;               /* (n_kv) offset of each key in meta, for duplicate checks */
    GgufWTensor *tensors;         /* (n_tensors) */
    uint64_t n_tensors, cap_tensors;
    uint64_t data_bytes;          /* size of the data section so far (padded) */
    int status;                   /* first failure; ST_OK while there is none */
    Err err;                      /* its message, naming the file */
} GgufWriter;

/* Lifetime. init allocates nothing and cannot fail; free accepts a zeroed or
 * failed writer and releases everything (the file on disk is not touched). */
void gguf_w_init(GgufWriter *w, const char *path);
void gguf_w_free(GgufWriter *w);

/* Metadata. Keys must be unique; general.alignment is reserved for the writer.
 * Strings are copied, so the caller's buffers may be reused at once. Returns
 * ST_OK, ST_ARG (duplicate or reserved key) or ST_NOMEM. */
int gguf_w_add_u32(GgufWriter *w, const char *key, uint32_t v);
int gguf_w_add_i32(GgufWriter *w, const char *key, int32_t v);
int gguf_w_add_f32(GgufWriter *w, const char *key, float v);
int gguf_w_add_bool(GgufWriter *w, const char *key, int v);
int gguf_w_add_str(GgufWriter *w, const char *key, const char *v);
int gguf_w_add_str_array(GgufWriter *w, const char *key, const char *const *v, uint64_t n);
int gguf_w_add_f32_array(GgufWriter *w, const char *key, const float *v, uint64_t n);
int gguf_w_add_i32_array(GgufWriter *w, const char *key, const int32_t *v, uint64_t n);

int gguf_w_add_u64(GgufWriter *w, const char *key, uint64_t v);
int gguf_w_add_u8_array(GgufWriter *w, const char *key, const uint8_t *v, uint64_t n);
int gguf_w_add_u64_array(GgufWriter *w, const char *key, const uint64_t *v, uint64_t n);
int gguf_w_add_u32_array(GgufWriter *w, const char *key, const uint32_t *v, uint64_t n);
/* A pair as another file holds it: type and value bytes copied verbatim (a
 * GgufKV's type, val and val_len), so any value, nested arrays included,
 * passes through unchanged. */
int gguf_w_add_raw(GgufWriter *w, const char *key, uint32_t type, const void *val, uint64_t len);

/* Every pair of g except general.alignment (the writer sets its own) and
 * those whose key starts with skip (NULL: none), copied verbatim. */
int gguf_w_copy_meta(GgufWriter *w, const Gguf *g, const char *skip);

/* Tensors, written in the order they are added. ne has n_dims (1..4) entries,
 * each >= 1, ne[0] the row length (a multiple of 32 for Q8_0), at most 2^40
 * elements in all (the reader's limit). Names are unique, 1..64 bytes.
 * add_tensor: data holds the tensor in the stored type and is read during
 *   gguf_w_write, so it must stay valid until then (it is not copied).
 * add_tensor_rows: fn produces float rows that are rounded to type.
 * Returns ST_OK or ST_ARG / ST_NOMEM. */
int gguf_w_add_tensor(GgufWriter *w, const char *name, int n_dims, const int64_t *ne, DType type,
                      const void *data);
int gguf_w_add_tensor_rows(GgufWriter *w, const char *name, int n_dims, const int64_t *ne,
                           DType type, GgufRowFn fn, void *ctx);

/* A 1-D tensor of nbytes raw bytes, stored as ggml's I8 (GGUF_TYPE_I8):
 * how a compressed model file holds a coded matrix. Not copied, as above. */
int gguf_w_add_tensor_bytes(GgufWriter *w, const char *name, const void *data, uint64_t nbytes);

/* Bytes the file will have once written (header, padding and data). */
uint64_t gguf_w_file_size(const GgufWriter *w);

/* Write the file (see the layout above). Returns ST_OK, the first failure of
 * an add, ST_IO (cannot create, write or rename; errno's text in e), ST_NOMEM,
 * or the Status of a row callback. On failure no file is left at path or at
 * path.part. The writer can be freed afterwards either way. */
int gguf_w_write(GgufWriter *w, Err *e);

#endif
