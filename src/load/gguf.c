/* gguf.c - GGUF reader (see gguf.h).
 *
 * The whole file is mapped read-only; nothing is copied. Parsing walks a
 * cursor through the header, and every read goes through take(), which refuses
 * to step past the end. Arrays of strings are walked once here to check their
 * bounds, so later readers (the tokenizer) can walk them without checks. */
#include "load/gguf.h"
#include "base/fileio.h"
#include "base/le.h"
#include "base/mem.h"
#include "kernels/ops.h"
#include "rans.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const Gguf *g;
    size_t pos;
    Err *e;
} Cursor;

/* Reserve n bytes at the cursor; NULL (with a message naming what) if short. */
static const uint8_t *take(Cursor *c, uint64_t n, const char *what) {
    if (n > c->g->size || c->pos > c->g->size - n) {
        err_set(c->e, ST_FORMAT, "%s: truncated at offset %zu reading %s (file is %zu bytes)",
                c->g->path, c->pos, what, c->g->size);
        return NULL;
    }
    const uint8_t *p = c->g->map + c->pos;
    c->pos += n;
    return p;
}

static int read_u32(Cursor *c, uint32_t *v, const char *what) {
    const uint8_t *p = take(c, 4, what);
    if (!p) return ST_FORMAT;
    memcpy(v, p, 4);
    return ST_OK;
}

static int read_u64(Cursor *c, uint64_t *v, const char *what) {
    const uint8_t *p = take(c, 8, what);
    if (!p) return ST_FORMAT;
    memcpy(v, p, 8);
    return ST_OK;
}

static int read_str(Cursor *c, GgufStr *s, const char *what) {
    uint64_t len;
    if (read_u64(c, &len, what)) return ST_FORMAT;
    const uint8_t *p = take(c, len, what);
    if (!p) return ST_FORMAT;
    s->s = (const char *)p;
    s->len = len;
    return ST_OK;
}

static size_t scalar_size(uint32_t type) {
    static const size_t sz[GG_NTYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return type < GG_NTYPES ? sz[type] : 0;
}

/* Skip over one value of the given type, checking bounds. */
static int skip_value(Cursor *c, GgufKV *kv, uint32_t type, int depth) {
    if (type == GG_STRING) {
        GgufStr s;
        return read_str(c, &s, "string value");
    }
    if (type == GG_ARRAY) {
        uint32_t et;
        uint64_t n;
        if (depth > 0)
            return err_set(c->e, ST_FORMAT, "%s: nested array at offset %zu", c->g->path, c->pos);
        if (read_u32(c, &et, "array type") || read_u64(c, &n, "array length")) return ST_FORMAT;
        if (et >= GG_NTYPES)
            return err_set(c->e, ST_FORMAT, "%s: array of unknown type %u at offset %zu",
                           c->g->path, et, c->pos - 12);
        kv->arr_type = et;
        kv->arr_n = n;
        if (et == GG_STRING || et == GG_ARRAY) {
            for (uint64_t i = 0; i < n; i++)
                if (skip_value(c, kv, et, depth + 1)) return ST_FORMAT;
            return ST_OK;
        }
        if (n > c->g->size / scalar_size(et))
            return err_set(c->e, ST_FORMAT, "%s: array length %llu at offset %zu exceeds the file",
                           c->g->path, (unsigned long long)n, c->pos - 8);
        return take(c, n * scalar_size(et), "array data") ? ST_OK : ST_FORMAT;
    }
    if (type >= GG_NTYPES)
        return err_set(c->e, ST_FORMAT, "%s: unknown metadata value type %u at offset %zu",
                       c->g->path, type, c->pos - 4);
    return take(c, scalar_size(type), "metadata value") ? ST_OK : ST_FORMAT;
}

/* One tensor's bytes in the data section, for the overlap check. */
typedef struct {
    uint64_t offset, end;
    uint64_t index;
} Extent;

static int extent_cmp(const void *a, const void *b) {
    const Extent *x = a, *y = b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* No two tensors may share bytes: a lying offset would make one tensor read
 * another's weights. Sorted by offset, each extent must end where the next
 * begins or before. Called once every extent is known to lie inside the file. */
static int check_overlaps(const Gguf *g, Err *e) {
    uint64_t n = g->n_tensors;
    if (n < 2) return ST_OK;
    Extent *x = mem_alloc(n * sizeof *x);
    if (!x) return err_set(e, ST_NOMEM, "%s: out of memory for %llu tensor extents", g->path,
                           (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++)
        x[i] = (Extent){g->tensors[i].offset, g->tensors[i].offset + g->tensors[i].nbytes, i};
    qsort(x, n, sizeof *x, extent_cmp);
    int st = ST_OK;
    for (uint64_t i = 1; i < n && st == ST_OK; i++) {
        if (x[i].offset >= x[i - 1].end) continue;
        const GgufTensor *a = &g->tensors[x[i - 1].index], *b = &g->tensors[x[i].index];
        st = err_set(e, ST_FORMAT, "%s: tensor '%.*s' (%zu bytes at offset %llu) overlaps tensor "
                     "'%.*s' (%zu bytes at offset %llu)", g->path,
                     a->name.len > 64 ? 64 : (int)a->name.len, a->name.s, a->nbytes,
                     (unsigned long long)(g->data_offset + a->offset),
                     b->name.len > 64 ? 64 : (int)b->name.len, b->name.s, b->nbytes,
                     (unsigned long long)(g->data_offset + b->offset));
    }
    mem_free(x);
    return st;
}

static int parse(Gguf *g, Err *e) {
    Cursor c = {g, 0, e};
    uint32_t magic;
    if (read_u32(&c, &magic, "magic")) return ST_FORMAT;
    if (memcmp(g->map, "GGUF", 4) != 0)
        return err_set(e, ST_FORMAT, "%s: not a GGUF file (magic at offset 0 is 0x%08x, want \"GGUF\")",
                       g->path, magic);
    if (read_u32(&c, &g->version, "version")) return ST_FORMAT;
    if (g->version != 2 && g->version != 3)
        return err_set(e, ST_FORMAT, "%s: GGUF version %u at offset 4 is not supported (want 2 or 3)",
                       g->path, g->version);
    if (read_u64(&c, &g->n_tensors, "tensor count") || read_u64(&c, &g->n_kv, "metadata count"))
        return ST_FORMAT;
    /* Each entry takes at least 8 bytes of the file, so counts beyond that lie. */
    if (g->n_tensors > g->size / 8 || g->n_kv > g->size / 8)
        return err_set(e, ST_FORMAT, "%s: absurd counts at offset 8 (%llu tensors, %llu metadata keys) "
                       "for a file of %zu bytes: corrupt or truncated", g->path, (unsigned long long)g->n_tensors,
                       (unsigned long long)g->n_kv, g->size);
    g->kv = mem_alloc((g->n_kv ? g->n_kv : 1) * sizeof(GgufKV));
    g->tensors = mem_alloc((g->n_tensors ? g->n_tensors : 1) * sizeof(GgufTensor));
    if (!g->kv || !g->tensors) return err_set(e, ST_NOMEM, "%s: out of memory for the header", g->path);

    g->alignment = 32;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        GgufKV *kv = &g->kv[i];
        if (read_str(&c, &kv->key, "metadata key") || read_u32(&c, &kv->type, "metadata type"))
            return ST_FORMAT;
        kv->val = g->map + c.pos;
        if (skip_value(&c, kv, kv->type, 0)) return ST_FORMAT;
        kv->val_len = (uint64_t)(g->map + c.pos - kv->val);
        if (gguf_str_eq(kv->key, "general.alignment")) {
            uint32_t a = 0;
            if (kv->type == GG_U32) memcpy(&a, kv->val, 4);
            if (a == 0 || (a & (a - 1)) || a > 65536)
                return err_set(e, ST_FORMAT, "%s: general.alignment is %u, want a power of two",
                               g->path, a);
            g->alignment = a;
        }
    }

    for (uint64_t i = 0; i < g->n_tensors; i++) {
        GgufTensor *t = &g->tensors[i];
        size_t at = c.pos;
        if (read_str(&c, &t->name, "tensor name") || read_u32(&c, &t->n_dims, "tensor dims"))
            return ST_FORMAT;
        int nl = t->name.len > 64 ? 64 : (int)t->name.len;
        if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS)
            return err_set(e, ST_FORMAT, "%s: tensor '%.*s' at offset %zu has %u dimensions (want 1..4)",
                           g->path, nl, t->name.s, at, t->n_dims);
        uint64_t count = 1;
        for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            if (read_u64(&c, &t->ne[d], "tensor shape")) return ST_FORMAT;
            if (t->ne[d] == 0 || t->ne[d] > ((uint64_t)1 << 40) || count > ((uint64_t)1 << 40) / t->ne[d])
                return err_set(e, ST_FORMAT, "%s: tensor '%.*s' has absurd dimension %u = %llu",
                               g->path, nl, t->name.s, d, (unsigned long long)t->ne[d]);
            count *= t->ne[d];
        }
        if (read_u32(&c, &t->type, "tensor type") || read_u64(&c, &t->offset, "tensor offset"))
            return ST_FORMAT;
        if (t->type == GGUF_TYPE_I8) {   /* bytes: a coded tensor's blob, or plain int8 */
            t->nbytes = count;
            continue;
        }
        if (!dtype_known((int)t->type))
            return err_set(e, ST_FORMAT, "%s: tensor '%.*s' has unknown or unsupported type %u "
                           "(supported: F32 0, F16 1, Q4_0 2, Q4_1 3, Q5_0 6, Q5_1 7, Q8_0 8, Q4_K 12, Q5_K 13, Q6_K 14, BF16 30)", g->path, nl, t->name.s, t->type);
        size_t row = dtype_row_bytes((DType)t->type, (int64_t)t->ne[0]);
        if (row == 0)
            return err_set(e, ST_FORMAT, "%s: tensor '%.*s' row of %llu values is not a whole number "
                           "of %s blocks", g->path, nl, t->name.s, (unsigned long long)t->ne[0],
                           dtype_name((int)t->type));
        t->nbytes = row * (count / t->ne[0]);
    }

    size_t a = g->alignment;
    g->data_offset = (c.pos + a - 1) / a * a;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        GgufTensor *t = &g->tensors[i];
        int nl = t->name.len > 64 ? 64 : (int)t->name.len;
        if (t->offset % a)
            return err_set(e, ST_FORMAT, "%s: tensor '%.*s' offset %llu is not aligned to %zu",
                           g->path, nl, t->name.s, (unsigned long long)t->offset, a);
        if (g->data_offset > g->size || t->offset > g->size - g->data_offset ||
            t->nbytes > g->size - g->data_offset - t->offset)
            return err_set(e, ST_FORMAT, "%s: tensor '%.*s' (%zu bytes at offset %llu) points past "
                           "the end of the file (%zu bytes)", g->path, nl, t->name.s, t->nbytes,
                           (unsigned long long)(g->data_offset + t->offset), g->size);
        t->data = g->map + g->data_offset + t->offset;
    }
    return check_overlaps(g, e);
}

int gguf_open(Gguf *g, const char *path, Err *e) {
    memset(g, 0, sizeof *g);
    g->path = path;
    int fd;
    int st_ = fio_open(path, &fd, &g->size, e);
    if (st_) return st_;
    if (g->size == 0) {   /* (mmap refuses a length of 0; a short file is parse's to judge) */
        close(fd);
        return err_set(e, ST_FORMAT, "%s: empty file", path);
    }
    const void *m;
    st_ = fio_map(path, fd, g->size, &m, e);   /* watched: a truncation is reported, not a SIGBUS */
    close(fd);
    if (st_) return st_;
    g->map = m;
    st_ = parse(g, e);
    if (st_ != ST_OK) gguf_close(g);
    return st_;
}

void gguf_close(Gguf *g) {
    fio_unmap(g->map, g->size);
    mem_free(g->kv);
    mem_free(g->tensors);
    const char *path = g->path;
    memset(g, 0, sizeof *g);
    g->path = path;
}

int gguf_str_eq(GgufStr s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && memcmp(s.s, c, n) == 0;
}

const GgufKV *gguf_find(const Gguf *g, const char *key) {
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (gguf_str_eq(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

const GgufTensor *gguf_tensor(const Gguf *g, const char *name) {
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (gguf_str_eq(g->tensors[i].name, name)) return &g->tensors[i];
    return NULL;
}

int gguf_get_int(const Gguf *g, const char *key, int64_t *out, Err *e) {
    const GgufKV *kv = gguf_find(g, key);
    if (!kv) return err_set(e, ST_FORMAT, "%s: missing metadata key %s", g->path, key);
    const uint8_t *v = kv->val;
    switch (kv->type) {
    case GG_U8: *out = v[0]; return ST_OK;
    case GG_I8: *out = (int8_t)v[0]; return ST_OK;
    case GG_BOOL: *out = v[0] != 0; return ST_OK;
    case GG_U16: { uint16_t x; memcpy(&x, v, 2); *out = x; return ST_OK; }
    case GG_I16: { int16_t x; memcpy(&x, v, 2); *out = x; return ST_OK; }
    case GG_U32: { uint32_t x; memcpy(&x, v, 4); *out = x; return ST_OK; }
    case GG_I32: { int32_t x; memcpy(&x, v, 4); *out = x; return ST_OK; }
    case GG_I64: { int64_t x; memcpy(&x, v, 8); *out = x; return ST_OK; }
    case GG_U64: {
        uint64_t x;
        memcpy(&x, v, 8);
        if (x > INT64_MAX) break;
        *out = (int64_t)x;
        return ST_OK;
    }
    }
    return err_set(e, ST_FORMAT, "%s: metadata key %s has type %u, want an integer", g->path, key,
                   kv->type);
}

int gguf_get_float(const Gguf *g, const char *key, double *out, Err *e) {
    const GgufKV *kv = gguf_find(g, key);
    if (!kv) return err_set(e, ST_FORMAT, "%s: missing metadata key %s", g->path, key);
    if (kv->type == GG_F32) {
        float f;
        memcpy(&f, kv->val, 4);
        *out = f;
        return ST_OK;
    }
    if (kv->type == GG_F64) {
        memcpy(out, kv->val, 8);
        return ST_OK;
    }
    int64_t i;
    if (gguf_get_int(g, key, &i, NULL) == ST_OK) {
        *out = (double)i;
        return ST_OK;
    }
    return err_set(e, ST_FORMAT, "%s: metadata key %s has type %u, want a number", g->path, key,
                   kv->type);
}

int gguf_get_str(const Gguf *g, const char *key, GgufStr *out, Err *e) {
    const GgufKV *kv = gguf_find(g, key);
    if (!kv) return err_set(e, ST_FORMAT, "%s: missing metadata key %s", g->path, key);
    if (kv->type != GG_STRING)
        return err_set(e, ST_FORMAT, "%s: metadata key %s has type %u, want a string", g->path, key,
                       kv->type);
    const uint8_t *p = kv->val;
    *out = gguf_next_str(&p);
    return ST_OK;
}

int gguf_get_array(const Gguf *g, const char *key, uint32_t elem_type, const uint8_t **data,
                   uint64_t *n, Err *e) {
    const GgufKV *kv = gguf_find(g, key);
    if (!kv) return err_set(e, ST_FORMAT, "%s: missing metadata key %s", g->path, key);
    if (kv->type != GG_ARRAY || kv->arr_type != elem_type)
        return err_set(e, ST_FORMAT, "%s: metadata key %s is not an array of type %u", g->path, key,
                       elem_type);
    *data = kv->val + 12;   /* after element type (4) and count (8) */
    *n = kv->arr_n;
    return ST_OK;
}

GgufStr gguf_next_str(const uint8_t **p) {
    GgufStr s;
    memcpy(&s.len, *p, 8);
    s.s = (const char *)*p + 8;
    *p += 8 + s.len;
    return s;
}

/* ------------------------------------------------------------ checksums */

int gguf_check_crcs(const Gguf *g, const char *key, GgufCrcFn each, void *ctx, Err *e) {
    const uint8_t *crcs;
    uint64_t n;
    int st = gguf_get_array(g, key, GG_U32, &crcs, &n, e);
    if (st) return st;
    if (n != g->n_tensors)
        return err_set(e, ST_FORMAT, "%s: %s has %llu entries for %llu tensors", g->path, key, (unsigned long long)n,
                       (unsigned long long)g->n_tensors);
    int bad = 0;
    for (uint64_t i = 0; i < n; i++) {
        const GgufTensor *t = &g->tensors[i];
        uint32_t stored = get_u32(crcs + 4 * i), got = rans_crc32(t->data, t->nbytes);
        if (each) each(ctx, i, stored, got);
        if (stored != got && !bad++)
            err_set(e, ST_FORMAT, "%s: tensor '%.*s' (%zu bytes at offset %llu) is damaged: its CRC-32 is %08x, "
                    "the file says %08x", g->path, (int)t->name.len, t->name.s, t->nbytes,
                    (unsigned long long)((const uint8_t *)t->data - (const uint8_t *)g->map), got, stored);
    }
    return bad ? ST_FORMAT : ST_OK;
}

int gguf_header_crc(const Gguf *g, const char *key, uint32_t *crc, size_t *off, Err *e) {
    const GgufKV *kv = gguf_find(g, key);
    if (!kv || kv->type != GG_U32)
        return err_set(e, ST_FORMAT, "%s: %s is missing or not a u32", g->path, key);
    *off = (size_t)(kv->val - g->map);
    uint8_t *copy = mem_alloc(g->data_offset);
    if (!copy) return err_set(e, ST_NOMEM, "%s: cannot hold its %zu-byte header", g->path, g->data_offset);
    memcpy(copy, g->map, g->data_offset);
    memset(copy + *off, 0, 4);
    *crc = rans_crc32(copy, g->data_offset);
    mem_free(copy);
    return ST_OK;
}

int gguf_check_header_crc(const Gguf *g, const char *key, Err *e) {
    uint32_t got;
    size_t off;
    int st = gguf_header_crc(g, key, &got, &off, e);
    if (st) return st;
    uint32_t stored = get_u32(g->map + off);
    if (got != stored)
        return err_set(e, ST_FORMAT, "%s: its header (the %zu bytes before the tensor data) is damaged: its CRC-32 is "
                       "%08x, the file says %08x", g->path, g->data_offset, got, stored);
    return ST_OK;
}
