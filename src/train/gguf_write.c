/* gguf_write.c - GGUF v3 writer (see gguf_write.h).
 *
 * Reading order: the byte buffer and its put_* helpers; the sticky error; the
 * metadata adds, which encode a key/value pair into w->meta at once; the tensor
 * adds, which only validate and record; then gguf_w_write, which encodes the
 * header, streams the data and renames the finished file into place.
 *
 * Every integer is stored as the host holds it, which is GGUF's little-endian
 * order on every target we build for; the static assert below keeps it so. */
#include "train/gguf_write.h"
#include "base/mem.h"
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "GGUF is little-endian; this writer stores host integers as they are");

#define GGUF_W_VERSION 3
#define GGUF_W_MAX_ELEMENTS ((uint64_t)1 << 40)   /* gguf.c refuses larger tensors */
static const char ALIGNMENT_KEY[] = "general.alignment";

/* ------------------------------------------------------------ the buffer */

/* Make room for n more bytes; doubling keeps appends amortised O(1). */
static int buf_reserve(GgufWBuf *b, size_t n) {
    if (n <= b->cap - b->len) return ST_OK;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < n) {
        if (cap > SIZE_MAX / 2) return ST_NOMEM;
        cap *= 2;
    }
    uint8_t *p = mem_realloc(b->p, cap);
    if (!p) return ST_NOMEM;
    b->p = p;
    b->cap = cap;
    return ST_OK;
}

static int put_bytes(GgufWBuf *b, const void *v, size_t n) {
    if (buf_reserve(b, n)) return ST_NOMEM;
    if (n) memcpy(b->p + b->len, v, n);
    b->len += n;
    return ST_OK;
}

static int put_u32(GgufWBuf *b, uint32_t v) { return put_bytes(b, &v, 4); }
static int put_u64(GgufWBuf *b, uint64_t v) { return put_bytes(b, &v, 8); }

/* A GGUF string: u64 length, then the bytes (no terminating NUL). */
static int put_str(GgufWBuf *b, const char *s) {
    size_t n = strlen(s);
    return put_u64(b, n) || put_bytes(b, s, n) ? ST_NOMEM : ST_OK;
}

static uint64_t align_up(uint64_t n) {
    return (n + GGUF_W_ALIGNMENT - 1) / GGUF_W_ALIGNMENT * GGUF_W_ALIGNMENT;
}

/* ----------------------------------------------------- the sticky error */

/* Record the first failure (later ones are consequences) and return it. */
static int fail(GgufWriter *w, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(GgufWriter *w, int code, const char *fmt, ...) {
    if (w->status != ST_OK) return w->status;
    char what[sizeof w->err.msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    w->status = code;
    return err_set(&w->err, code, "%s: %s", w->path, what);
}

void gguf_w_init(GgufWriter *w, const char *path) {
    memset(w, 0, sizeof *w);
    w->path = path;
}

void gguf_w_free(GgufWriter *w) {
    mem_free(w->meta.p);
    mem_free(w->key_at);
    for (uint64_t i = 0; i < w->n_tensors; i++) mem_free(w->tensors[i].name);
    mem_free(w->tensors);
    const char *path = w->path;
    memset(w, 0, sizeof *w);
    w->path = path;
}

/* ------------------------------------------------------------- metadata */

static int key_taken(const GgufWriter *w, const char *key) {
    size_t n = strlen(key);
    for (uint64_t i = 0; i < w->n_kv; i++) {
        uint64_t len;
        memcpy(&len, w->meta.p + w->key_at[i], 8);
        if (len == n && memcmp(w->meta.p + w->key_at[i] + 8, key, n) == 0) return 1;
    }
    return 0;
}

/* Start a pair: check the key, remember where it starts, encode key and type.
 * The caller then appends the value. A failure part way leaves half a pair in
 * meta, which is harmless: the writer is failed from then on and never writes. */
static int begin_kv(GgufWriter *w, const char *key, uint32_t type, size_t *start) {
    if (w->status != ST_OK) return w->status;
    if (!key[0]) return fail(w, ST_ARG, "metadata key is empty");
    if (strcmp(key, ALIGNMENT_KEY) == 0)
        return fail(w, ST_ARG, "metadata key %s is set by the writer (always %d)", key,
                    GGUF_W_ALIGNMENT);
    if (key_taken(w, key)) return fail(w, ST_ARG, "metadata key %s is added twice", key);
    size_t *at = mem_realloc(w->key_at, (size_t)(w->n_kv + 1) * sizeof *at);
    if (!at) return fail(w, ST_NOMEM, "out of memory adding metadata key %s", key);
    w->key_at = at;
    *start = w->meta.len;
    if (put_str(&w->meta, key) || put_u32(&w->meta, type))
        return fail(w, ST_NOMEM, "out of memory adding metadata key %s", key);
    return ST_OK;
}

/* Finish a pair whose value was appended with status value_status. */
static int end_kv(GgufWriter *w, const char *key, size_t start, int value_status) {
    if (value_status != ST_OK) return fail(w, ST_NOMEM, "out of memory adding metadata key %s", key);
    w->key_at[w->n_kv++] = start;
    return ST_OK;
}

/* One scalar value of size n bytes. */
static int add_scalar(GgufWriter *w, const char *key, uint32_t type, const void *v, size_t n) {
    size_t start;
    if (begin_kv(w, key, type, &start)) return w->status;
    return end_kv(w, key, start, put_bytes(&w->meta, v, n));
}

int gguf_w_add_u32(GgufWriter *w, const char *key, uint32_t v) { return add_scalar(w, key, GG_U32, &v, 4); }
int gguf_w_add_i32(GgufWriter *w, const char *key, int32_t v) { return add_scalar(w, key, GG_I32, &v, 4); }
int gguf_w_add_f32(GgufWriter *w, const char *key, float v) { return add_scalar(w, key, GG_F32, &v, 4); }

int gguf_w_add_u64(GgufWriter *w, const char *key, uint64_t v) { return add_scalar(w, key, GG_U64, &v, 8); }

int gguf_w_add_raw(GgufWriter *w, const char *key, uint32_t type, const void *val, uint64_t len) {
    if (len > SIZE_MAX) return fail(w, ST_ARG, "metadata key %s: value of %llu bytes", key, (unsigned long long)len);
    return add_scalar(w, key, type, val, (size_t)len);
}

int gguf_w_copy_meta(GgufWriter *w, const Gguf *g, const char *skip) {
    char key[256];
    for (uint64_t i = 0; i < g->n_kv && w->status == ST_OK; i++) {
        const GgufKV *kv = &g->kv[i];
        if (kv->key.len >= sizeof key)
            return fail(w, ST_ARG, "metadata key of %llu bytes is too long to copy", (unsigned long long)kv->key.len);
        memcpy(key, kv->key.s, kv->key.len);
        key[kv->key.len] = 0;
        if (strcmp(key, ALIGNMENT_KEY) == 0 || (skip && strncmp(key, skip, strlen(skip)) == 0)) continue;
        gguf_w_add_raw(w, key, kv->type, kv->val, kv->val_len);
    }
    return w->status;
}

int gguf_w_add_bool(GgufWriter *w, const char *key, int v) {
    uint8_t b = v != 0;   /* GGUF bools are one byte, 0 or 1 */
    return add_scalar(w, key, GG_BOOL, &b, 1);
}

int gguf_w_add_str(GgufWriter *w, const char *key, const char *v) {
    size_t start;
    if (begin_kv(w, key, GG_STRING, &start)) return w->status;
    return end_kv(w, key, start, put_str(&w->meta, v));
}

/* An array value: element type, count, then the elements. */
static int add_array(GgufWriter *w, const char *key, uint32_t elem_type, const void *v,
                     size_t elem_size, uint64_t n) {
    size_t start;
    if (begin_kv(w, key, GG_ARRAY, &start)) return w->status;
    int st = put_u32(&w->meta, elem_type) || put_u64(&w->meta, n) ? ST_NOMEM : ST_OK;
    if (st == ST_OK && n > SIZE_MAX / elem_size) st = ST_NOMEM;
    if (st == ST_OK) st = put_bytes(&w->meta, v, (size_t)n * elem_size);
    return end_kv(w, key, start, st);
}

int gguf_w_add_f32_array(GgufWriter *w, const char *key, const float *v, uint64_t n) {
    return add_array(w, key, GG_F32, v, 4, n);
}

int gguf_w_add_i32_array(GgufWriter *w, const char *key, const int32_t *v, uint64_t n) {
    return add_array(w, key, GG_I32, v, 4, n);
}

int gguf_w_add_u8_array(GgufWriter *w, const char *key, const uint8_t *v, uint64_t n) {
    return add_array(w, key, GG_U8, v, 1, n);
}

int gguf_w_add_u64_array(GgufWriter *w, const char *key, const uint64_t *v, uint64_t n) {
    return add_array(w, key, GG_U64, v, 8, n);
}

int gguf_w_add_u32_array(GgufWriter *w, const char *key, const uint32_t *v, uint64_t n) {
    return add_array(w, key, GG_U32, v, 4, n);
}

int gguf_w_add_str_array(GgufWriter *w, const char *key, const char *const *v, uint64_t n) {
    size_t start;
    if (begin_kv(w, key, GG_ARRAY, &start)) return w->status;
    int st = put_u32(&w->meta, GG_STRING) || put_u64(&w->meta, n) ? ST_NOMEM : ST_OK;
    for (uint64_t i = 0; i < n && st == ST_OK; i++) st = put_str(&w->meta, v[i]);
    return end_kv(w, key, start, st);
}

/* -------------------------------------------------------------- tensors */

/* Check a tensor's description and append it to the table with its offset. */
static int add_tensor(GgufWriter *w, const char *name, int n_dims, const int64_t *ne, DType type,
                      const void *data, GgufRowFn fn, void *ctx) {
    if (w->status != ST_OK) return w->status;
    size_t name_len = strlen(name);
    if (name_len == 0 || name_len > GGUF_W_MAX_NAME)
        return fail(w, ST_ARG, "tensor name '%.80s' is %zu bytes (want 1..%d)", name, name_len,
                    GGUF_W_MAX_NAME);
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return fail(w, ST_ARG, "tensor '%s' is added twice", name);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return fail(w, ST_ARG, "tensor '%s' has %d dimensions (want 1..%d)", name, n_dims,
                    GGUF_MAX_DIMS);
    int bytes = (int)type == GGUF_TYPE_I8;
    if (!bytes && !dtype_known((int)type))
        return fail(w, ST_ARG, "tensor '%s' has unsupported type %d (want F32, F16, BF16, Q8_0 or a 4, 5, 6-bit block format)", name,
                    (int)type);
    uint64_t count = 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] < 1 || (uint64_t)ne[d] > GGUF_W_MAX_ELEMENTS / count)
            return fail(w, ST_ARG, "tensor '%s' dimension %d = %lld is out of range (each >= 1, "
                        "at most 2^40 elements in all)", name, d, (long long)ne[d]);
        count *= (uint64_t)ne[d];
    }
    /* Row callbacks hand the row to int-sized kernels (quantize_row_q8_0). */
    if (fn && ne[0] > INT_MAX)
        return fail(w, ST_ARG, "tensor '%s' row of %lld values is too long for a row callback",
                    name, (long long)ne[0]);
    size_t row_bytes = bytes ? (size_t)ne[0] : dtype_row_bytes(type, ne[0]);
    if (row_bytes == 0)
        return fail(w, ST_ARG, "tensor '%s' row of %lld values is not a whole number of %s blocks "
                    "(%d values each)", name, (long long)ne[0], dtype_name((int)type), QK8_0);

    if (w->n_tensors == w->cap_tensors) {
        uint64_t cap = w->cap_tensors ? 2 * w->cap_tensors : 16;
        GgufWTensor *t = mem_realloc(w->tensors, (size_t)cap * sizeof *t);
        if (!t) return fail(w, ST_NOMEM, "out of memory adding tensor '%s'", name);
        w->tensors = t;
        w->cap_tensors = cap;
    }
    GgufWTensor *t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = mem_strdup(name);
    if (!t->name) return fail(w, ST_NOMEM, "out of memory adding tensor '%s'", name);
    t->n_dims = (uint32_t)n_dims;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    t->type = type;
    t->data = data;
    t->rows = fn;
    t->ctx = ctx;
    t->offset = w->data_bytes;
    t->nbytes = (uint64_t)row_bytes * (count / (uint64_t)ne[0]);
    w->data_bytes = align_up(t->offset + t->nbytes);
    w->n_tensors++;
    return ST_OK;
}

int gguf_w_add_tensor(GgufWriter *w, const char *name, int n_dims, const int64_t *ne, DType type,
                      const void *data) {
    if (!data && w->status == ST_OK) return fail(w, ST_ARG, "tensor '%s' has no data", name);
    return add_tensor(w, name, n_dims, ne, type, data, NULL, NULL);
}

int gguf_w_add_tensor_bytes(GgufWriter *w, const char *name, const void *data, uint64_t nbytes) {
    if (!data && w->status == ST_OK) return fail(w, ST_ARG, "tensor '%s' has no data", name);
    int64_t ne = (int64_t)nbytes;
    return add_tensor(w, name, 1, &ne, (DType)GGUF_TYPE_I8, data, NULL, NULL);
}

int gguf_w_add_tensor_rows(GgufWriter *w, const char *name, int n_dims, const int64_t *ne,
                           DType type, GgufRowFn fn, void *ctx) {
    if (!fn && w->status == ST_OK) return fail(w, ST_ARG, "tensor '%s' has no row callback", name);
    return add_tensor(w, name, n_dims, ne, type, NULL, fn, ctx);
}

/* ------------------------------------------------------------ the header */

/* general.alignment as a pair: key string, type, u32 value. */
#define ALIGNMENT_KV_BYTES (8 + sizeof ALIGNMENT_KEY - 1 + 4 + 4)

static uint64_t tensor_info_bytes(const GgufWTensor *t) {
    /* name (u64 length + bytes), n_dims u32, ne u64 each, type u32, offset u64 */
    return 8 + strlen(t->name) + 4 + 8 * (uint64_t)t->n_dims + 4 + 8;
}

/* Bytes before the data section, padding included. */
static uint64_t header_bytes(const GgufWriter *w) {
    uint64_t n = 4 + 4 + 8 + 8 + w->meta.len + ALIGNMENT_KV_BYTES;
    for (uint64_t i = 0; i < w->n_tensors; i++) n += tensor_info_bytes(&w->tensors[i]);
    return align_up(n);
}

uint64_t gguf_w_file_size(const GgufWriter *w) { return header_bytes(w) + w->data_bytes; }

static int encode_header(const GgufWriter *w, GgufWBuf *h) {
    int st = put_bytes(h, "GGUF", 4) || put_u32(h, GGUF_W_VERSION) || put_u64(h, w->n_tensors) ||
             put_u64(h, w->n_kv + 1) || put_bytes(h, w->meta.p, w->meta.len) ||
             put_str(h, ALIGNMENT_KEY) || put_u32(h, GG_U32) || put_u32(h, GGUF_W_ALIGNMENT);
    for (uint64_t i = 0; i < w->n_tensors && !st; i++) {
        const GgufWTensor *t = &w->tensors[i];
        st = put_str(h, t->name) || put_u32(h, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims && !st; d++) st = put_u64(h, (uint64_t)t->ne[d]);
        st = st || put_u32(h, (uint32_t)t->type) || put_u64(h, t->offset);
    }
    static const uint8_t zeros[GGUF_W_ALIGNMENT];
    if (!st) st = put_bytes(h, zeros, align_up(h->len) - h->len);
    if (st) return ST_NOMEM;
    assert(h->len == header_bytes(w));
    return ST_OK;
}

/* ---------------------------------------------------------- the writing */

typedef struct {
    FILE *f;
    const char *part;     /* the temporary name being written */
    uint64_t pos;         /* bytes written so far */
    Err *e;
} Sink;

static int sink_write(Sink *s, const void *p, size_t n) {
    if (n && fwrite(p, 1, n, s->f) != n)
        return err_set(s->e, ST_IO, "%s: write failed at byte %llu: %s", s->part,
                       (unsigned long long)s->pos, strerror(errno));
    s->pos += n;
    return ST_OK;
}

static int sink_pad_to(Sink *s, uint64_t to) {
    static const uint8_t zeros[GGUF_W_ALIGNMENT];
    assert(to >= s->pos && to - s->pos < GGUF_W_ALIGNMENT);
    return sink_write(s, zeros, (size_t)(to - s->pos));
}

/* Round one row of floats to the stored type. */
static void encode_row(void *out, const float *x, DType type, int64_t n) {
    switch (type) {
    case DT_F32: memcpy(out, x, (size_t)n * 4); break;
    case DT_F16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)out)[i] = fp32_to_fp16(x[i]);
        break;
    case DT_BF16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)out)[i] = fp32_to_bf16(x[i]);
        break;
    case DT_Q8_0: quantize_row_q8_0(out, x, (int)n); break;
    default: quantize_row(out, x, type, (int)n); break;   /* 4, 5, 6-bit: round to nearest */
    }
}

/* Stream one tensor made by a row callback through the two row buffers. */
static int write_rows(Sink *s, const GgufWTensor *t, float *xrow, void *orow) {
    int64_t n = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    size_t row_bytes = dtype_row_bytes(t->type, n);
    for (int64_t r = 0; r < rows; r++) {
        Err cb;
        cb.msg[0] = 0;
        int st = t->rows(t->ctx, r, xrow, n, &cb);
        if (st != ST_OK)
            return err_set(s->e, st, "%s: tensor '%s' row %lld: %s", s->part, t->name, (long long)r,
                           cb.msg[0] ? cb.msg : status_name(st));
        encode_row(orow, xrow, t->type, n);
        if (sink_write(s, orow, row_bytes)) return ST_IO;
    }
    return ST_OK;
}

/* Header, then each tensor at its offset; the caller closes and renames. */
static int write_all(GgufWriter *w, Sink *s, const GgufWBuf *header) {
    int64_t max_row = 0;   /* longest row of a callback tensor sizes the buffers */
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (w->tensors[i].rows && w->tensors[i].ne[0] > max_row) max_row = w->tensors[i].ne[0];
    float *xrow = NULL;
    void *orow = NULL;
    if (max_row > 0) {
        xrow = mem_alloc((size_t)max_row * sizeof(float));
        orow = mem_alloc((size_t)max_row * sizeof(float));   /* F32 is the widest type */
        if (!xrow || !orow) {
            mem_free(xrow);
            mem_free(orow);
            return err_set(s->e, ST_NOMEM, "%s: out of memory for a row of %lld values", w->path,
                           (long long)max_row);
        }
    }
    int st = sink_write(s, header->p, header->len);
    for (uint64_t i = 0; i < w->n_tensors && st == ST_OK; i++) {
        const GgufWTensor *t = &w->tensors[i];
        st = sink_pad_to(s, header->len + t->offset);
        if (st == ST_OK)
            st = t->rows ? write_rows(s, t, xrow, orow) : sink_write(s, t->data, (size_t)t->nbytes);
    }
    if (st == ST_OK) st = sink_pad_to(s, header->len + w->data_bytes);
    mem_free(xrow);
    mem_free(orow);
    return st;
}

int gguf_w_write(GgufWriter *w, Err *e) {
    if (w->status != ST_OK) {
        if (e) *e = w->err;
        return w->status;
    }
    GgufWBuf header = {0};
    if (encode_header(w, &header)) {
        mem_free(header.p);
        return err_set(e, ST_NOMEM, "%s: out of memory encoding the header", w->path);
    }
    char part[PATH_MAX];
    if ((size_t)snprintf(part, sizeof part, "%s.part", w->path) >= sizeof part) {
        mem_free(header.p);
        return err_set(e, ST_ARG, "%s: path is too long", w->path);
    }
    Sink s = {fopen(part, "wb"), part, 0, e};
    if (!s.f) {
        mem_free(header.p);
        return err_set(e, ST_IO, "%s: cannot create: %s", part, strerror(errno));
    }
    int st = write_all(w, &s, &header);
    mem_free(header.p);
    /* fclose flushes the last buffered bytes, so a full disk can show up here. */
    if (fclose(s.f) != 0 && st == ST_OK)
        st = err_set(e, ST_IO, "%s: write failed at close: %s", part, strerror(errno));
    if (st == ST_OK && rename(part, w->path) != 0)
        st = err_set(e, ST_IO, "%s: cannot rename to %s: %s", part, w->path, strerror(errno));
    if (st != ST_OK) unlink(part);
    return st;
}
