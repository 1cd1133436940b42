/* wcodec.c - weight tensors split into planes and rANS-coded (see wcodec.h
 * for the promise and the blob's layout).
 *
 * The idea (notes/rans.md, "Coding a weight tensor"). A float's exponent is
 * far from uniform: trained weights cluster around one magnitude, so the 8
 * exponent bits of BF16 carry some 2.6-3 bits of information, while the sign
 * and the mantissa are close to random. Coding each weight's bytes as they are
 * mixes the two and gains little; splitting every weight into its fields and
 * coding each field as its own stream of bytes ("plane") lets rANS find the
 * exponent's skew:
 *
 *   type   planes (one byte per weight each, unless said)      coded with rANS
 *   BF16   exponent (8 bits) | sign + 7 mantissa bits          whichever of the two is smaller
 *   F16    exponent (5 bits) | sign + top 2 mantissa bits | low 8 mantissa bits
 *   F32    exponent (8 bits) | sign + top 7 | middle 8 | low 8 mantissa bits
 *   Q8_0   scales (2 bytes per block of 32) | the int8 values
 *   other  the bytes as stored, one plane
 *
 * Each plane is rANS-coded when that saves at least 1/64 of its bytes, and
 * kept raw otherwise (decoding costs a pass over every byte; a saving below
 * 1.6% does not repay it: BF16's sign + mantissa plane stays raw). Weights are cut
 * into groups of G (a multiple of 32): chunk k of every coded plane holds
 * exactly group k's bytes, so a group, a row range or a whole tensor decodes
 * without touching the rest, and groups decode in parallel.
 *
 *
 * Three pieces: the field split (a weight's bytes to one byte per plane, and
 * back: split_* and merge_*), the blob header (written by wc_encode, checked
 * field by field by wc_open), and the group loop that decodes two groups at a
 * time (rans_decode_chunks runs their chunks in lockstep) and merges them. */
#include "codec/wcodec.h"
#include "base/le.h"
#include "base/mem.h"
#include "kernels/ops.h"
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

enum { HEADER_FIXED = 64, PLANE_ENTRY = 24, CRC_BYTES = 4, MAX_GROUP = 1 << 24 };
static const uint8_t MAGIC[4] = {'R', 'N', 'S', 'W'};


/* ------------------------------------------------------------ the shape of a layout */

/* How a type is split: its layout, its planes, and the unit the groups count
 * (a weight; for the raw layout, a byte). */
typedef struct {
    WcLayout layout;
    int n_planes;
    int unit_bytes;     /* original bytes per unit (Q8_0: 0, blocks of 32 weights are 34 bytes) */
} Shape;

static Shape shape_of(int type) {
    switch (type) {
    case DT_BF16: return (Shape){WC_LAYOUT_FLOAT, 2, 2};
    case DT_F16: return (Shape){WC_LAYOUT_FLOAT, 3, 2};
    case DT_F32: return (Shape){WC_LAYOUT_FLOAT, 4, 4};
    case DT_Q8_0: return (Shape){WC_LAYOUT_Q8_0, 2, 0};
    default: return (Shape){WC_LAYOUT_RAW, 1, 1};
    }
}

/* Units in the tensor: weights, or bytes for the raw layout. */
static uint64_t units_of(const Shape *s, uint64_t n, uint64_t nbytes) {
    return s->layout == WC_LAYOUT_RAW ? nbytes : n;
}

/* Bytes of plane i for u units (u a multiple of 32 for Q8_0's scales). */
static uint64_t plane_bytes(const Shape *s, int i, uint64_t u) {
    return s->layout == WC_LAYOUT_Q8_0 && i == 0 ? u / QK8_0 * 2 : u;
}

/* Original bytes before unit u. */
static uint64_t byte_of_unit(const Shape *s, uint64_t u) {
    return s->layout == WC_LAYOUT_Q8_0 ? u / QK8_0 * sizeof(BlockQ8_0) : u * (uint64_t)s->unit_bytes;
}

/* ------------------------------------------------------------ fields */

/* Original bytes of u units -> planes. */
static void split(const Shape *s, int type, const uint8_t *src, uint64_t u, uint8_t *const *pl) {
    switch (s->layout) {
    case WC_LAYOUT_RAW: memcpy(pl[0], src, u); return;
    case WC_LAYOUT_Q8_0:
        for (uint64_t b = 0; b < u / QK8_0; b++) {
            memcpy(pl[0] + 2 * b, src + b * sizeof(BlockQ8_0), 2);
            memcpy(pl[1] + b * QK8_0, src + b * sizeof(BlockQ8_0) + 2, QK8_0);
        }
        return;
    case WC_LAYOUT_FLOAT: break;
    }
    for (uint64_t i = 0; i < u; i++) {
        if (type == DT_BF16) {   /* s eeeeeeee mmmmmmm */
            uint32_t w = (uint32_t)src[2 * i] | (uint32_t)src[2 * i + 1] << 8;
            pl[0][i] = (uint8_t)(w >> 7);
            pl[1][i] = (uint8_t)((w >> 8 & 0x80) | (w & 0x7f));
        } else if (type == DT_F16) {   /* s eeeee mmmmmmmmmm */
            uint32_t w = (uint32_t)src[2 * i] | (uint32_t)src[2 * i + 1] << 8;
            pl[0][i] = (uint8_t)(w >> 10 & 0x1f);
            pl[1][i] = (uint8_t)((w >> 15) << 2 | (w >> 8 & 3));
            pl[2][i] = (uint8_t)w;
        } else {   /* F32: s eeeeeeee m(23) */
            uint32_t w;
            memcpy(&w, src + 4 * i, 4);
            pl[0][i] = (uint8_t)(w >> 23);
            pl[1][i] = (uint8_t)((w >> 24 & 0x80) | (w >> 16 & 0x7f));
            pl[2][i] = (uint8_t)(w >> 8);
            pl[3][i] = (uint8_t)w;
        }
    }
}

/* Planes of u units -> original bytes: the inverse of split, one loop per
 * type so that each vectorises. */
static void merge(const Shape *s, int type, const uint8_t *const *pl, uint64_t u, uint8_t *restrict dst) {
    switch (s->layout) {
    case WC_LAYOUT_RAW: memcpy(dst, pl[0], u); return;
    case WC_LAYOUT_Q8_0:
        for (uint64_t b = 0; b < u / QK8_0; b++) {
            memcpy(dst + b * sizeof(BlockQ8_0), pl[0] + 2 * b, 2);
            memcpy(dst + b * sizeof(BlockQ8_0) + 2, pl[1] + b * QK8_0, QK8_0);
        }
        return;
    case WC_LAYOUT_FLOAT: break;
    }
    const uint8_t *restrict p0 = pl[0], *restrict p1 = pl[1];
    if (type == DT_BF16) {
        for (uint64_t i = 0; i < u; i++) {
            dst[2 * i] = (uint8_t)(p0[i] << 7 | (p1[i] & 0x7f));
            dst[2 * i + 1] = (uint8_t)((p1[i] & 0x80) | p0[i] >> 1);
        }
    } else if (type == DT_F16) {
        const uint8_t *restrict p2 = pl[2];
        for (uint64_t i = 0; i < u; i++) {
            dst[2 * i] = p2[i];
            dst[2 * i + 1] = (uint8_t)((p1[i] >> 2) << 7 | p0[i] << 2 | (p1[i] & 3));
        }
    } else {
        const uint8_t *restrict p2 = pl[2], *restrict p3 = pl[3];
        for (uint64_t i = 0; i < u; i++) {
            dst[4 * i] = p3[i];
            dst[4 * i + 1] = p2[i];
            dst[4 * i + 2] = (uint8_t)(p0[i] << 7 | (p1[i] & 0x7f));
            dst[4 * i + 3] = (uint8_t)((p1[i] & 0x80) | p0[i] >> 1);
        }
    }
}

/* ------------------------------------------------------------ encoding */

static int check_shape(int n_dims, const uint64_t *ne, uint64_t *n, const char *what, Err *e) {
    if (n_dims < 1 || n_dims > 4)
        return err_set(e, ST_FORMAT, "%s: %d dimensions (want 1..4)", what, n_dims);
    *n = 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] == 0 || ne[d] > ((uint64_t)1 << 40) || *n > ((uint64_t)1 << 40) / ne[d])
            return err_set(e, ST_FORMAT, "%s: absurd dimension %d = %llu", what, d, (unsigned long long)ne[d]);
        *n *= ne[d];
    }
    return ST_OK;
}

/* Original bytes a tensor of n weights (rows of ne0) has in type; 0 if the
 * layout cannot hold it (a Q8_0 row that is not whole blocks). */
static uint64_t want_bytes(const Shape *s, uint64_t ne0, uint64_t n) {
    if (s->layout == WC_LAYOUT_Q8_0) return ne0 % QK8_0 ? 0 : n / QK8_0 * sizeof(BlockQ8_0);
    if (s->layout == WC_LAYOUT_FLOAT) return n * (uint64_t)s->unit_bytes;
    return 0;   /* raw: any */
}

int wc_encode(const void *data, size_t nbytes, int type, int n_dims, const uint64_t *ne, uint32_t group,
              const RansParams *params, uint8_t **out, size_t *len, WcPlane planes[WC_MAX_PLANES],
              int *n_planes, Err *e) {
    *out = NULL;
    *len = 0;
    uint64_t n = 0;
    int st = check_shape(n_dims, ne, &n, "wcodec", e);
    if (st) return ST_ARG;
    Shape s = shape_of(type);
    uint64_t want = want_bytes(&s, ne[0], n);
    if (s.layout != WC_LAYOUT_RAW && want != nbytes)
        return err_set(e, ST_ARG, "wcodec: a %s tensor of %llu weights has %llu bytes, not %zu",
                       dtype_name(type), (unsigned long long)n, (unsigned long long)want, nbytes);
    if (group == 0) group = WC_GROUP_DEFAULT;
    if (group % QK8_0 || group > MAX_GROUP)
        return err_set(e, ST_ARG, "wcodec: group %u is not a multiple of 32 in 32..%d", group, MAX_GROUP);
    RansParams p = rans_default_params();
    p.bits = WC_BITS_DEFAULT;
    if (params) p = *params;
    uint64_t units = units_of(&s, n, nbytes);

    WcPlane pl[WC_MAX_PLANES];
    uint8_t *raw[WC_MAX_PLANES] = {0}, *coded[WC_MAX_PLANES] = {0};
    memset(pl, 0, sizeof pl);
    size_t total = HEADER_FIXED + (size_t)PLANE_ENTRY * s.n_planes + CRC_BYTES;
    for (int i = 0; i < s.n_planes && !st; i++) {
        pl[i].group_bytes = (uint32_t)plane_bytes(&s, i, group);
        pl[i].bytes = plane_bytes(&s, i, units);
        if (!(raw[i] = mem_alloc(pl[i].bytes ? pl[i].bytes : 1)))
            st = err_set(e, ST_NOMEM, "wcodec: cannot allocate a plane of %llu bytes",
                         (unsigned long long)pl[i].bytes);
    }
    if (!st) split(&s, type, data, units, raw);
    for (int i = 0; i < s.n_planes && !st; i++) {
        pl[i].entropy = rans_entropy(raw[i], pl[i].bytes);
        p.chunk_size = pl[i].group_bytes;
        size_t clen;
        if ((st = rans_encode_alloc(raw[i], pl[i].bytes, &p, &coded[i], &clen, &pl[i].sizes, e))) break;
        /* Coded only when that saves at least 1/64 of the plane: decoding a
         * plane costs a pass of rANS over every byte (about a millisecond per
         * MB on one core), which a sliver of size does not repay. A BF16
         * sign + mantissa plane (some 7.9 bits of entropy a byte) stays raw. */
        pl[i].coded = clen < pl[i].bytes - pl[i].bytes / 64;
        pl[i].stored = pl[i].coded ? clen : pl[i].bytes;
        if (!pl[i].coded) memset(&pl[i].sizes, 0, sizeof pl[i].sizes);
        total += pl[i].stored;
    }
    uint8_t *b = st ? NULL : mem_alloc(total);
    if (!st && !b) st = err_set(e, ST_NOMEM, "wcodec: cannot allocate a blob of %zu bytes", total);
    if (!st) {
        memcpy(b, MAGIC, 4);
        b[4] = WC_VERSION;
        b[5] = (uint8_t)s.layout;
        b[6] = (uint8_t)s.n_planes;
        put_u32(b + 8, (uint32_t)type);
        put_u32(b + 12, (uint32_t)n_dims);
        for (int d = 0; d < 4; d++) put_u64(b + 16 + 8 * d, d < n_dims ? ne[d] : 1);
        put_u32(b + 48, group);
        put_u64(b + 56, nbytes);
        size_t at = HEADER_FIXED;
        for (int i = 0; i < s.n_planes; i++, at += PLANE_ENTRY) {
            b[at] = (uint8_t)pl[i].coded;
            put_u32(b + at + 4, pl[i].group_bytes);
            put_u64(b + at + 8, pl[i].bytes);
            put_u64(b + at + 16, pl[i].stored);
        }
        put_u32(b + at, rans_crc32(b, at));
        at += CRC_BYTES;
        for (int i = 0; i < s.n_planes; i++) {
            memcpy(b + at, pl[i].coded ? coded[i] : raw[i], pl[i].stored);
            at += pl[i].stored;
        }
        *out = b;
        *len = total;
        if (planes) memcpy(planes, pl, sizeof pl);
        if (n_planes) *n_planes = s.n_planes;
    }
    for (int i = 0; i < WC_MAX_PLANES; i++) {
        mem_free(raw[i]);
        mem_free(coded[i]);
    }
    return st;
}

/* ------------------------------------------------------------ opening */

int wc_is_blob(const uint8_t *blob, size_t size) { return size >= 4 && memcmp(blob, MAGIC, 4) == 0; }

int wc_open(WcTensor *t, const uint8_t *b, size_t size, const char *what, Err *e) {
    memset(t, 0, sizeof *t);
    if (size < HEADER_FIXED + PLANE_ENTRY + CRC_BYTES)
        return err_set(e, ST_FORMAT, "%s: coded tensor of %zu bytes is shorter than its header", what, size);
    if (!wc_is_blob(b, size))
        return err_set(e, ST_FORMAT, "%s: coded tensor has bad magic %02x%02x%02x%02x (want \"RNSW\")", what,
                       b[0], b[1], b[2], b[3]);
    if (b[4] != WC_VERSION)
        return err_set(e, ST_FORMAT, "%s: coded tensor version %u (want %d)", what, b[4], WC_VERSION);
    t->type = (int)get_u32(b + 8);
    Shape s = shape_of(t->type);
    t->layout = s.layout;
    t->n_planes = b[6];
    if (b[5] != s.layout || b[6] != s.n_planes)
        return err_set(e, ST_FORMAT, "%s: coded tensor of type %u has layout %u with %u planes (want %d, %d)",
                       what, (unsigned)t->type, b[5], b[6], (int)s.layout, s.n_planes);
    size_t header = HEADER_FIXED + (size_t)PLANE_ENTRY * s.n_planes + CRC_BYTES;
    if (size < header)
        return err_set(e, ST_FORMAT, "%s: coded tensor of %zu bytes is shorter than its %zu-byte header", what,
                       size, header);
    uint32_t crc = rans_crc32(b, header - CRC_BYTES), stored = get_u32(b + header - CRC_BYTES);
    if (crc != stored)
        return err_set(e, ST_FORMAT, "%s: coded tensor header CRC is %08x, the header hashes to %08x", what,
                       stored, crc);
    /* The CRC only proves the header is what the encoder wrote, not that an
     * encoder wrote it: every field is still checked. */
    t->n_dims = (int)get_u32(b + 12);
    for (int d = 0; d < 4; d++) t->ne[d] = get_u64(b + 16 + 8 * d);
    int st = check_shape(t->n_dims, t->ne, &t->n, what, e);
    if (st) return st;
    for (int d = t->n_dims; d < 4; d++)
        if (t->ne[d] != 1)
            return err_set(e, ST_FORMAT, "%s: unused dimension %d is %llu (want 1)", what, d,
                           (unsigned long long)t->ne[d]);
    t->group = get_u32(b + 48);
    if (t->group < QK8_0 || t->group % QK8_0 || t->group > MAX_GROUP)
        return err_set(e, ST_FORMAT, "%s: group of %u weights (want a multiple of 32 in 32..%d)", what, t->group,
                       MAX_GROUP);
    t->nbytes = get_u64(b + 56);
    uint64_t want = want_bytes(&s, t->ne[0], t->n);
    if (s.layout != WC_LAYOUT_RAW && want != t->nbytes)
        return err_set(e, ST_FORMAT, "%s: %s tensor of %llu weights claims %llu bytes (want %llu)", what,
                       dtype_name(t->type), (unsigned long long)t->n, (unsigned long long)t->nbytes,
                       (unsigned long long)want);
    if (t->nbytes > ((uint64_t)1 << 42))
        return err_set(e, ST_FORMAT, "%s: absurd size %llu", what, (unsigned long long)t->nbytes);
    uint64_t units = units_of(&s, t->n, t->nbytes);
    t->n_groups = units / t->group + (units % t->group != 0);
    size_t at = HEADER_FIXED, data_at = header;
    for (int i = 0; i < s.n_planes; i++, at += PLANE_ENTRY) {
        WcPlane *p = &t->plane[i];
        p->coded = b[at];
        p->group_bytes = get_u32(b + at + 4);
        p->bytes = get_u64(b + at + 8);
        p->stored = get_u64(b + at + 16);
        if (p->coded > 1 || b[at + 1] || b[at + 2] || b[at + 3])
            return err_set(e, ST_FORMAT, "%s: plane %d kind %u (want 0 raw or 1 rANS)", what, i, b[at]);
        if (p->group_bytes != plane_bytes(&s, i, t->group) || p->bytes != plane_bytes(&s, i, units))
            return err_set(e, ST_FORMAT, "%s: plane %d has %llu bytes, %u a group (want %llu, %llu)", what, i,
                           (unsigned long long)p->bytes, p->group_bytes,
                           (unsigned long long)plane_bytes(&s, i, units),
                           (unsigned long long)plane_bytes(&s, i, t->group));
        if (p->stored > size - data_at || (!p->coded && p->stored != p->bytes))
            return err_set(e, ST_FORMAT, "%s: plane %d stores %llu bytes at offset %zu of a %zu-byte tensor", what,
                           i, (unsigned long long)p->stored, data_at, size);
        t->data[i] = b + data_at;
        data_at += p->stored;
    }
    if (data_at != size)
        return err_set(e, ST_FORMAT, "%s: coded tensor has %zu bytes, its planes end at %zu", what, size, data_at);
    for (int i = 0; i < s.n_planes; i++) {
        WcPlane *p = &t->plane[i];
        if (!p->coded) continue;
        Err re;
        if ((st = rans_open(&t->rs[i], t->data[i], p->stored, &re))) {
            wc_close(t);
            return err_set(e, ST_FORMAT, "%s: plane %d: %s", what, i, re.msg);
        }
        p->sizes = t->rs[i].sizes;
        if (t->rs[i].n != p->bytes || t->rs[i].chunk_size != p->group_bytes) {
            wc_close(t);
            return err_set(e, ST_FORMAT, "%s: plane %d's stream holds %llu bytes in chunks of %u (want %llu, %u)",
                           what, i, (unsigned long long)t->rs[i].n, t->rs[i].chunk_size,
                           (unsigned long long)p->bytes, p->group_bytes);
        }
    }
    t->header = header;
    t->size = size;
    return ST_OK;
}

void wc_close(WcTensor *t) {
    for (int i = 0; i < WC_MAX_PLANES; i++) rans_close(&t->rs[i]);
    memset(t, 0, sizeof *t);
}

/* ------------------------------------------------------------ decoding */

size_t wc_scratch_bytes(const WcTensor *t) {
    size_t b = 0;
    for (int i = 0; i < t->n_planes; i++)
        if (t->plane[i].coded) b += 2 * (size_t)t->plane[i].group_bytes;
    return b ? b : 1;
}

/* Groups k .. k + count - 1 (count 1 or 2), units [u0, u1) of them, into dst
 * (which receives the bytes of unit u0 first). */
static int decode_groups(const WcTensor *t, uint64_t k, int count, uint64_t u0, uint64_t u1, uint8_t *dst,
                         uint8_t *scratch, RansIsa isa, Err *e) {
    Shape s = shape_of(t->type);
    const uint8_t *pl[WC_MAX_PLANES];
    uint64_t first = k * t->group;   /* the groups' first unit */
    for (int i = 0; i < t->n_planes; i++) {
        const WcPlane *p = &t->plane[i];
        const uint8_t *base;
        if (p->coded) {
            int st = rans_decode_chunks(&t->rs[i], k, count, scratch, 2 * (size_t)p->group_bytes, isa, e);
            if (st) return st;
            base = scratch;
            scratch += 2 * (size_t)p->group_bytes;
        } else {
            base = t->data[i] + k * p->group_bytes;
        }
        pl[i] = base + plane_bytes(&s, i, u0 - first);
    }
    merge(&s, t->type, pl, u1 - u0, dst);
    return ST_OK;
}

/* Units [u0, u1) into dst, two groups at a time. */
static int decode_units(const WcTensor *t, uint64_t u0, uint64_t u1, uint8_t *dst, void *scratch, RansIsa isa,
                        Err *e) {
    Shape s = shape_of(t->type);
    uint64_t G = t->group;
    for (uint64_t u = u0; u < u1;) {
        uint64_t k = u / G;
        int count = k + 1 < t->n_groups && u1 > (k + 1) * G ? 2 : 1;
        uint64_t end = (k + (uint64_t)count) * G;
        if (end > u1) end = u1;
        int st = decode_groups(t, k, count, u, end, dst + (byte_of_unit(&s, u) - byte_of_unit(&s, u0)), scratch,
                               isa, e);
        if (st) return st;
        u = end;
    }
    return ST_OK;
}

int wc_decode(const WcTensor *t, void *dst, size_t cap, void *scratch, RansIsa isa, Err *e) {
    if (cap < t->nbytes)
        return err_set(e, ST_ARG, "wcodec: tensor needs %llu bytes, buffer has %zu", (unsigned long long)t->nbytes,
                       cap);
    Shape s = shape_of(t->type);
    return decode_units(t, 0, units_of(&s, t->n, t->nbytes), dst, scratch, isa, e);
}

int wc_decode_range(const WcTensor *t, uint64_t from, size_t len, void *dst, void *scratch, RansIsa isa,
                    Err *e) {
    if (from > t->nbytes || len > t->nbytes - from)
        return err_set(e, ST_ARG, "wcodec: bytes %llu..+%zu of a %llu-byte tensor", (unsigned long long)from, len,
                       (unsigned long long)t->nbytes);
    Shape s = shape_of(t->type);
    uint64_t step = s.layout == WC_LAYOUT_Q8_0 ? sizeof(BlockQ8_0) : (uint64_t)s.unit_bytes;
    if (from % step || len % step)
        return err_set(e, ST_ARG, "wcodec: bytes %llu..+%zu cut a %s value in two", (unsigned long long)from, len,
                       dtype_name(t->type));
    uint64_t per = s.layout == WC_LAYOUT_Q8_0 ? QK8_0 : 1;   /* units per step */
    return decode_units(t, from / step * per, (from + len) / step * per, dst, scratch, isa, e);
}

uint64_t wc_group_span(const WcTensor *t) {
    Shape s = shape_of(t->type);
    return byte_of_unit(&s, t->group);
}

int wc_decode_parallel(const WcTensor *t, void *dst, size_t cap, RansIsa isa, int threads, Err *e) {
    if (threads < 1) threads = 1;
    if ((uint64_t)threads > (t->n_groups + 1) / 2) threads = (int)((t->n_groups + 1) / 2);
    if (threads <= 1) {
        uint8_t *scratch = mem_alloc(wc_scratch_bytes(t));
        if (!scratch) return err_set(e, ST_NOMEM, "wcodec: cannot allocate decode scratch");
        int st = wc_decode(t, dst, cap, scratch, isa, e);
        mem_free(scratch);
        return st;
    }
    if (cap < t->nbytes)
        return err_set(e, ST_ARG, "wcodec: tensor needs %llu bytes, buffer has %zu", (unsigned long long)t->nbytes,
                       cap);
    size_t per = wc_scratch_bytes(t);
    uint8_t *scratch = mem_alloc(per * (size_t)threads);
    if (!scratch) return err_set(e, ST_NOMEM, "wcodec: cannot allocate decode scratch for %d threads", threads);
    Shape s = shape_of(t->type);
    uint64_t units = units_of(&s, t->n, t->nbytes), G = t->group;
    int64_t pairs = (int64_t)((t->n_groups + 1) / 2);
    int st = ST_OK;
    int64_t first_bad = pairs;
    Err first_err = {{0}};
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int64_t q = 0; q < pairs; q++) {
        int me = 0;
#ifdef _OPENMP
        me = omp_get_thread_num();
#endif
        uint64_t u0 = (uint64_t)q * 2 * G, u1 = u0 + 2 * G < units ? u0 + 2 * G : units;
        Err eq;
        int r = decode_units(t, u0, u1, (uint8_t *)dst + byte_of_unit(&s, u0), scratch + per * (size_t)me, isa,
                             &eq);
        if (r) {
#pragma omp critical(wc_decode_error)
            if (q < first_bad) {
                first_bad = q;
                st = r;
                first_err = eq;
            }
        }
    }
    mem_free(scratch);
    if (st && e) *e = first_err;
    return st;
}
