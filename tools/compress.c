/* compress.c - write a GGUF model with its matrices rANS-coded, restore one
 * byte for byte, or round a model's matrices to another type.
 *
 *   compress IN.gguf OUT.gguf [--bits B] [--states N] [--group G]
 *   compress --decode IN.rans.gguf OUT.gguf       the original, byte for byte
 *   compress --check IN.rans.gguf                 every tensor against its CRC-32
 *   compress --retype bf16|f16|q8_0|f32 IN.gguf OUT.gguf
 *
 * Compressing prints one row per tensor (stdout): its type, bytes, what was
 * stored, the ratio, and for each plane (wcodec.h) the order-0 entropy of its
 * bytes beside the bits per byte rANS spent on them ("raw" where coding did not
 * pay). A progress bar goes to stderr when it is a terminal.
 *
 * The file it writes (notes/rans.md, "The compressed file") is a GGUF: every
 * pair of the original, then
 *   rans.version              u32, 2
 *   rans.original.size        u64, bytes of the original file
 *   rans.original.crc32       u32, CRC-32 of the whole original
 *   rans.original.header      u8 array, the original's bytes before its data
 *   rans.original.offsets     u64 array, each tensor's offset in the original's data
 *   rans.tensor.crc32         u32 array, each tensor's CRC-32 as stored in this
 *                             file (coded blob or plain bytes), which the loader
 *                             checks before it uses any of them (version 2)
 *   rans.header.crc32         u32, the CRC-32 of this file's bytes before its
 *                             data, taken with these 4 bytes as zeros: written
 *                             as zeros, then patched in once the file is whole
 * and the tensors in the original's order and names: a matrix that coding
 * shrinks is a 1-D I8 tensor holding its blob; any other tensor as it was.
 * --decode lays the original out again from these: the header, each tensor
 * at its offset, zeros between, and checks the CRC before it renames the file
 * into place. Compressing refuses an original whose padding is not zeros,
 * since that could not be restored. */
#include "base/err.h"
#include "base/le.h"
#include "load/gguf.h"
#include "train/gguf_write.h"
#include "base/mem.h"
#include "kernels/ops.h"
#include "rans.h"
#include "codec/wcodec.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

typedef struct {
    const char *in, *out;
    int decode, check;
    int retype;            /* -1: no; else the DType */
    RansParams p;
    uint32_t group;
} Options;

static void usage(FILE *f) {
    fprintf(f, "usage: compress IN.gguf OUT.gguf [--bits 10..15 (12)] [--states 1|2|4|8|16|32 (32)] [--group G (65536)]\n"
               "       compress --decode IN.gguf OUT.gguf\n"
               "       compress --check IN.gguf\n"
               "       compress --retype bf16|f16|q8_0|f32 IN.gguf OUT.gguf\n");
}

static int parse_int(const char *flag, const char *v, long lo, long hi, long *out, Err *e) {
    char *end;
    long x = strtol(v, &end, 10);
    if (!*v || *end || x < lo || x > hi)
        return err_set(e, ST_ARG, "%s: '%s' is not an integer in %ld..%ld", flag, v, lo, hi);
    *out = x;
    return ST_OK;
}

static int parse_args(int argc, char **argv, Options *o, Err *e) {
    *o = (Options){.retype = -1, .p = rans_default_params(), .group = WC_GROUP_DEFAULT};
    o->p.bits = WC_BITS_DEFAULT;
    const char *pos[2];
    int n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long v;
        if (!strcmp(a, "--decode")) { o->decode = 1; continue; }
        if (!strcmp(a, "--check")) { o->check = 1; continue; }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); exit(0); }
        if (a[0] == '-' && a[1] == '-') {
            if (strcmp(a, "--bits") && strcmp(a, "--states") && strcmp(a, "--group") && strcmp(a, "--retype"))
                return err_set(e, ST_ARG, "unknown option %s", a);
            if (i + 1 >= argc) return err_set(e, ST_ARG, "%s needs a value", a);
            const char *val = argv[++i];
            if (!strcmp(a, "--bits")) {
                if (parse_int(a, val, RANS_BITS_MIN, RANS_BITS_MAX, &v, e)) return ST_ARG;
                o->p.bits = (int)v;
            } else if (!strcmp(a, "--states")) {
                if (parse_int(a, val, 1, RANS_MAX_STATES, &v, e)) return ST_ARG;
                o->p.n_states = (int)v;
            } else if (!strcmp(a, "--group")) {
                if (parse_int(a, val, 32, 1 << 24, &v, e) || v % 32)
                    return err_set(e, ST_ARG, "--group: '%s' is not a multiple of 32 in 32..%d", val, 1 << 24);
                o->group = (uint32_t)v;
            } else if (!strcmp(a, "--retype")) {
                static const struct { const char *name; DType t; } types[] = {
                    {"f32", DT_F32}, {"f16", DT_F16}, {"bf16", DT_BF16}, {"q8_0", DT_Q8_0}};
                for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
                    if (!strcmp(val, types[k].name)) o->retype = types[k].t;
                if (o->retype < 0) return err_set(e, ST_ARG, "--retype: '%s' is not f32, f16, bf16 or q8_0", val);
            }
            continue;
        }
        if (n_pos == 2) return err_set(e, ST_ARG, "one input and one output, not a third: %s", a);
        pos[n_pos++] = a;
    }
    if (o->check && (o->decode || o->retype >= 0)) return err_set(e, ST_ARG, "--check goes alone");
    if (o->check && n_pos != 1) return err_set(e, ST_ARG, "--check takes one file");
    if (!o->check && n_pos != 2) return err_set(e, ST_ARG, "want an input and an output file");
    if (o->decode && o->retype >= 0) return err_set(e, ST_ARG, "--decode and --retype do not go together");
    o->in = pos[0];
    o->out = o->check ? NULL : pos[1];
    return ST_OK;
}

static void name_of(const GgufTensor *t, char *buf, size_t cap) {
    snprintf(buf, cap, "%.*s", (int)(t->name.len < 64 ? t->name.len : 64), t->name.s);
}

static void progress(int done, int total, const char *name) {
    if (!isatty(2)) return;
    int w = 30, fill = total ? done * w / total : w;
    fprintf(stderr, "\r[%.*s%*s] %d/%d %-40.40s", fill, "##############################", w - fill, "", done,
            total, name);
    if (done == total) fputc('\n', stderr);
    fflush(stderr);
}

/* ------------------------------------------------------------ compress */

/* The original's data section must be its tensors and zeros only: walk the
 * tensors by offset and look at every byte between them, and after the last. */
static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int check_padding(const Gguf *g, Err *e) {
    uint64_t nt = g->n_tensors;
    uint64_t *ext = mem_alloc((2 * nt + 2) * sizeof *ext);   /* (offset, end) pairs */
    if (!ext) return err_set(e, ST_NOMEM, "%s: out of memory", g->path);
    for (uint64_t i = 0; i < nt; i++) {
        ext[2 * i] = g->tensors[i].offset;
        ext[2 * i + 1] = g->tensors[i].offset + g->tensors[i].nbytes;
    }
    qsort(ext, nt, 2 * sizeof *ext, cmp_u64);   /* gguf_open proved they do not overlap */
    ext[2 * nt] = ext[2 * nt + 1] = g->size - g->data_offset;
    const uint8_t *data = g->map + g->data_offset;
    int st = ST_OK;
    for (uint64_t i = 0, at = 0; i <= nt && !st; at = ext[2 * i + 1], i++)
        for (uint64_t b = at; b < ext[2 * i] && !st; b++)
            if (data[b])
                st = err_set(e, ST_FORMAT, "%s: byte %llu (between tensors) is 0x%02x, not padding: the file "
                             "could not be restored byte for byte, so it is not compressed", g->path,
                             (unsigned long long)(g->data_offset + b), data[b]);
    mem_free(ext);
    return st;
}

/* rans.header.crc32 into the file just written (its header is final now). */
static int patch_header_crc(const char *path, Err *e) {
    Gguf g;
    int st = gguf_open(&g, path, e);
    if (st) return st;
    uint32_t crc;
    size_t off;
    st = gguf_header_crc(&g, "rans.header.crc32", &crc, &off, e);
    gguf_close(&g);
    if (st) return st;
    uint8_t b[4];
    put_u32(b, crc);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return err_set(e, ST_IO, "%s: cannot reopen to write its header CRC: %m", path);
    ssize_t n = pwrite(fd, b, 4, (off_t)off);
    if (close(fd) != 0 || n != 4) return err_set(e, ST_IO, "%s: cannot write its header CRC: %m", path);
    return ST_OK;
}

static int compress(const Options *o, Err *e) {
    Gguf g;
    int st = gguf_open(&g, o->in, e);
    if (st) return st;
    if (gguf_find(&g, "rans.version")) {
        gguf_close(&g);
        return err_set(e, ST_ARG, "%s is compressed already (it has rans.version)", o->in);
    }
    if ((st = check_padding(&g, e))) {
        gguf_close(&g);
        return st;
    }
    uint64_t nt = g.n_tensors;
    uint8_t **blobs = mem_alloc((nt ? nt : 1) * sizeof *blobs);
    uint64_t *offsets = mem_alloc((nt ? nt : 1) * sizeof *offsets);
    uint32_t *crcs = mem_alloc((nt ? nt : 1) * sizeof *crcs);
    GgufWriter w;
    gguf_w_init(&w, o->out);
    if (!blobs || !offsets || !crcs) st = err_set(e, ST_NOMEM, "out of memory");
    if (!st) {
        gguf_w_copy_meta(&w, &g, "rans.");
        gguf_w_add_u32(&w, "rans.version", WC_FILE_VERSION);
        gguf_w_add_u64(&w, "rans.original.size", g.size);
        gguf_w_add_u32(&w, "rans.original.crc32", rans_crc32(g.map, g.size));
        gguf_w_add_u8_array(&w, "rans.original.header", g.map, g.data_offset);
        for (uint64_t i = 0; i < nt; i++) offsets[i] = g.tensors[i].offset;
        gguf_w_add_u64_array(&w, "rans.original.offsets", offsets, nt);
    }
    printf("%-28s %-5s %12s %12s %6s  %s\n", "tensor", "type", "bytes", "stored", "ratio",
           "planes: entropy -> coded (bits/byte)");
    uint64_t total_in = 0, total_out = 0, coded_in = 0, coded_out = 0;
    double sum_entropy_bits = 0, sum_symbol_bits = 0, coded_plane_bytes = 0;
    uint64_t states = 0, index = 0, tables = 0, headers = 0;
    for (uint64_t i = 0; i < nt && !st; i++) {
        const GgufTensor *t = &g.tensors[i];
        char name[72];
        name_of(t, name, sizeof name);
        progress((int)i, (int)nt, name);
        int type = (int)t->type;
        size_t len = 0;
        WcPlane pl[WC_MAX_PLANES];
        int np = 0;
        int try = t->n_dims >= 2 && (type == DT_F32 || type == DT_F16 || type == DT_BF16 || type == DT_Q8_0);
        if (try && (st = wc_encode(t->data, t->nbytes, type, (int)t->n_dims, t->ne, o->group, &o->p, &blobs[i], &len,
                                   pl, &np, e)))
            break;
        int keep = try && len < t->nbytes;
        if (keep) {
            gguf_w_add_tensor_bytes(&w, name, blobs[i], len);
        } else {
            int64_t ne[GGUF_MAX_DIMS];
            for (int d = 0; d < GGUF_MAX_DIMS; d++) ne[d] = (int64_t)t->ne[d];
            gguf_w_add_tensor(&w, name, (int)t->n_dims, ne, (DType)type, t->data);
        }
        uint64_t stored = keep ? len : t->nbytes;
        crcs[i] = keep ? rans_crc32(blobs[i], len) : rans_crc32(t->data, t->nbytes);
        total_in += t->nbytes;
        total_out += stored;
        printf("%-28s %-5s %12zu %12llu %6.3f ", name, type == GGUF_TYPE_I8 ? "I8" : dtype_name(type), t->nbytes,
               (unsigned long long)stored, (double)stored / (double)t->nbytes);
        if (!keep) {
            printf(" %s\n", try ? "kept as it is: coding did not pay" : "kept as it is");
            continue;
        }
        coded_in += t->nbytes;
        coded_out += len;
        for (int k = 0; k < np; k++) {
            double paid = pl[k].coded ? 8.0 * (double)pl[k].sizes.payload / (double)pl[k].bytes : 8.0;
            printf(" %.2f->%s%.2f", pl[k].entropy, pl[k].coded ? "" : "raw ", paid);
            if (!pl[k].coded) continue;
            sum_entropy_bits += pl[k].entropy * (double)pl[k].bytes;
            sum_symbol_bits += 8.0 * (double)(pl[k].sizes.payload - pl[k].sizes.states);
            coded_plane_bytes += (double)pl[k].bytes;
            states += pl[k].sizes.states;
            index += pl[k].sizes.index;
            tables += pl[k].sizes.header - pl[k].sizes.index;
        }
        headers += len;
        for (int k = 0; k < np; k++) headers -= pl[k].stored;
        printf("\n");
    }
    if (!st) {
        progress((int)nt, (int)nt, "");
        gguf_w_add_u32_array(&w, "rans.tensor.crc32", crcs, nt);   /* metadata is written last, with the data */
        gguf_w_add_u32(&w, "rans.header.crc32", 0);
        st = gguf_w_write(&w, e);
        if (!st) st = patch_header_crc(o->out, e);
    }
    if (!st) {
        uint64_t file = gguf_w_file_size(&w);
        printf("coded matrices: %llu -> %llu bytes (%.4f); all tensors %llu -> %llu (%.4f)\n",
               (unsigned long long)coded_in, (unsigned long long)coded_out,
               coded_in ? (double)coded_out / (double)coded_in : 1.0, (unsigned long long)total_in,
               (unsigned long long)total_out, total_in ? (double)total_out / (double)total_in : 1.0);
        if (coded_plane_bytes > 0)
            printf("coded planes: %.0f bytes at %.4f bits/byte of symbols against an order-0 entropy of %.4f "
                   "(%+.3f%%); apart: chunk states %llu bytes, chunk index %llu, frequency tables and stream "
                   "headers %llu, tensor headers %llu\n", coded_plane_bytes, sum_symbol_bits / coded_plane_bytes,
                   sum_entropy_bits / coded_plane_bytes, 100.0 * (sum_symbol_bits / sum_entropy_bits - 1.0),
                   (unsigned long long)states, (unsigned long long)index, (unsigned long long)tables,
                   (unsigned long long)headers);
        printf("file: %s %zu bytes -> %s %llu bytes (%.4f)\n", o->in, g.size, o->out, (unsigned long long)file,
               (double)file / (double)g.size);
    }
    gguf_w_free(&w);
    for (uint64_t i = 0; blobs && i < nt; i++) mem_free(blobs[i]);
    mem_free(blobs);
    mem_free(offsets);
    mem_free(crcs);
    gguf_close(&g);
    return st;
}

/* ------------------------------------------------------------ check */

typedef struct {
    const Gguf *g;
    int bad;
} CheckRun;

static void check_one(void *ctx, uint64_t i, uint32_t stored, uint32_t got) {
    CheckRun *r = ctx;
    const GgufTensor *t = &r->g->tensors[i];
    char name[72];
    name_of(t, name, sizeof name);
    int coded = t->type == GGUF_TYPE_I8 && t->n_dims == 1 && wc_is_blob(t->data, t->nbytes);
    printf("%-28s %-5s offset %12llu %12zu bytes  crc %08x  %s\n", name, coded ? "coded" : "as is",
           (unsigned long long)((const uint8_t *)t->data - r->g->map), t->nbytes, got,
           stored == got ? "ok" : "DAMAGED");
    r->bad += stored != got;
}

/* Every tensor of a compressed file against its CRC-32, one line each. */
static int check(const Options *o, Err *e) {
    Gguf g;
    int st = gguf_open(&g, o->in, e);
    if (st) return st;
    int64_t v = 0;
    if (!gguf_find(&g, "rans.version") || gguf_get_int(&g, "rans.version", &v, e) || v != WC_FILE_VERSION) {
        gguf_close(&g);
        return err_set(e, ST_FORMAT, "%s: rans.version %lld: --check reads files compress writes (version %d)", o->in,
                       (long long)v, WC_FILE_VERSION);
    }
    CheckRun r = {&g, 0};
    Err he = {{0}};
    int hst = gguf_check_header_crc(&g, "rans.header.crc32", &he);
    printf("%-28s       offset %12d %12zu bytes  %s\n", "(header)", 0, g.data_offset, hst ? "DAMAGED" : "ok");
    st = gguf_check_crcs(&g, "rans.tensor.crc32", check_one, &r, e);
    if (hst) {
        r.bad++;
        if (!st) *e = he;
        st = ST_FORMAT;
    }
    if (!st) printf("%s: %llu tensors, every CRC-32 matches\n", o->in, (unsigned long long)g.n_tensors);
    else if (r.bad) printf("%s: %d of %llu tensors damaged\n", o->in, r.bad, (unsigned long long)g.n_tensors);
    gguf_close(&g);
    return st;
}

/* ------------------------------------------------------------ decode */

static int get_u64_key(const Gguf *g, const char *key, uint64_t *v, Err *e) {
    int64_t x;
    if (gguf_get_int(g, key, &x, e)) return ST_FORMAT;
    *v = (uint64_t)x;
    return ST_OK;
}

static int restore(const Options *o, Err *e) {
    Gguf g;
    int st = gguf_open(&g, o->in, e);
    if (st) return st;
    uint64_t version = 0, size = 0, crc = 0, n_off = 0, n_head = 0;
    const uint8_t *head = NULL, *offs = NULL;
    if ((st = get_u64_key(&g, "rans.version", &version, e)) || (st = get_u64_key(&g, "rans.original.size", &size, e)) ||
        (st = get_u64_key(&g, "rans.original.crc32", &crc, e)) ||
        (st = gguf_get_array(&g, "rans.original.header", GG_U8, &head, &n_head, e)) ||
        (st = gguf_get_array(&g, "rans.original.offsets", GG_U64, &offs, &n_off, e))) {
        gguf_close(&g);
        return st;
    }
    if (version < 1 || version > WC_FILE_VERSION || n_off != g.n_tensors || n_head > size ||
        size > ((uint64_t)1 << 42)) {
        gguf_close(&g);
        return err_set(e, ST_FORMAT, "%s: rans.version %llu, %llu offsets for %llu tensors, header %llu of %llu "
                       "bytes: not a file compress wrote", o->in, (unsigned long long)version,
                       (unsigned long long)n_off, (unsigned long long)g.n_tensors, (unsigned long long)n_head,
                       (unsigned long long)size);
    }
    /* version 2 names a damaged header or tensor before decoding anything */
    if (version >= 2 && ((st = gguf_check_header_crc(&g, "rans.header.crc32", e)) ||
                         (st = gguf_check_crcs(&g, "rans.tensor.crc32", NULL, NULL, e)))) {
        gguf_close(&g);
        return st;
    }
    uint8_t *out = mem_alloc(size ? size : 1);
    if (!out) {
        gguf_close(&g);
        return err_set(e, ST_NOMEM, "%s: cannot hold the %llu-byte original in memory", o->in,
                       (unsigned long long)size);
    }
    memcpy(out, head, n_head);
    RansIsa isa = rans_best_isa();
    for (uint64_t i = 0; i < g.n_tensors && !st; i++) {
        const GgufTensor *t = &g.tensors[i];
        char name[72];
        name_of(t, name, sizeof name);
        progress((int)i, (int)g.n_tensors, name);
        uint64_t off;
        memcpy(&off, offs + 8 * i, 8);
        int coded = t->type == GGUF_TYPE_I8 && t->n_dims == 1 && wc_is_blob(t->data, t->nbytes);
        WcTensor wt = {0};
        uint64_t n = t->nbytes;
        if (coded && !(st = wc_open(&wt, t->data, t->nbytes, name, e))) n = wt.nbytes;
        if (!st && (off > size - n_head || n > size - n_head - off))
            st = err_set(e, ST_FORMAT, "%s: tensor %s (%llu bytes at offset %llu) lies past the original's %llu "
                         "bytes", o->in, name, (unsigned long long)n, (unsigned long long)off,
                         (unsigned long long)size);
        if (!st && coded) st = wc_decode_parallel(&wt, out + n_head + off, n, isa, 2, e);
        else if (!st) memcpy(out + n_head + off, t->data, n);
        wc_close(&wt);
    }
    if (!st) {
        progress((int)g.n_tensors, (int)g.n_tensors, "");
        uint32_t got = rans_crc32(out, size);
        if (got != (uint32_t)crc)
            st = err_set(e, ST_FORMAT, "%s: the restored file's CRC-32 is %08x, the original's was %08llx", o->in,
                         got, (unsigned long long)crc);
    }
    if (!st) {
        char part[4096];
        snprintf(part, sizeof part, "%s.part", o->out);
        FILE *f = fopen(part, "wb");
        if (!f) st = err_set(e, ST_IO, "%s: cannot create: %m", part);
        if (!st && fwrite(out, 1, size, f) != size) st = err_set(e, ST_IO, "%s: cannot write: %m", part);
        if (f && fclose(f) && !st) st = err_set(e, ST_IO, "%s: cannot write: %m", part);
        if (!st && rename(part, o->out)) st = err_set(e, ST_IO, "%s: cannot rename to %s: %m", part, o->out);
        if (st) remove(part);
        else printf("%s: %llu bytes restored to %s, CRC-32 %08llx matches\n", o->in, (unsigned long long)size,
                    o->out, (unsigned long long)crc);
    }
    mem_free(out);
    gguf_close(&g);
    return st;
}

/* ------------------------------------------------------------ retype */

typedef struct {
    const GgufTensor *t;
} Rows;

static int widen_row(void *ctx, int64_t row, float *out, int64_t n, Err *e) {
    const GgufTensor *t = ((Rows *)ctx)->t;
    size_t rb = dtype_row_bytes((DType)t->type, n);
    dequantize_row(out, (const uint8_t *)t->data + (size_t)row * rb, (DType)t->type, (int)n);
    return ST_OK;
}

static int retype(const Options *o, Err *e) {
    Gguf g;
    int st = gguf_open(&g, o->in, e);
    if (st) return st;
    if (gguf_find(&g, "rans.version")) {
        gguf_close(&g);
        return err_set(e, ST_ARG, "%s is compressed: restore it with --decode first", o->in);
    }
    GgufWriter w;
    gguf_w_init(&w, o->out);
    gguf_w_copy_meta(&w, &g, "general.file_type");
    /* llama.cpp's numbering of the file's main type */
    uint32_t ft = o->retype == DT_F32 ? 0 : o->retype == DT_F16 ? 1 : o->retype == DT_Q8_0 ? 7 : 32;
    gguf_w_add_u32(&w, "general.file_type", ft);
    Rows *rows = mem_alloc((g.n_tensors ? g.n_tensors : 1) * sizeof *rows);
    if (!rows) st = err_set(e, ST_NOMEM, "out of memory");
    for (uint64_t i = 0; i < g.n_tensors && !st; i++) {
        const GgufTensor *t = &g.tensors[i];
        char name[72];
        name_of(t, name, sizeof name);
        int64_t ne[GGUF_MAX_DIMS];
        for (int d = 0; d < GGUF_MAX_DIMS; d++) ne[d] = (int64_t)t->ne[d];
        rows[i].t = t;
        int matrix = t->n_dims >= 2 && dtype_known((int)t->type) && dtype_row_bytes((DType)o->retype, ne[0]);
        if (matrix) gguf_w_add_tensor_rows(&w, name, (int)t->n_dims, ne, (DType)o->retype, widen_row, &rows[i]);
        else gguf_w_add_tensor(&w, name, (int)t->n_dims, ne, (DType)t->type, t->data);
    }
    if (!st) st = gguf_w_write(&w, e);
    if (!st) printf("%s -> %s: matrices as %s, %llu bytes\n", o->in, o->out, dtype_name(o->retype),
                    (unsigned long long)gguf_w_file_size(&w));
    gguf_w_free(&w);
    mem_free(rows);
    gguf_close(&g);
    return st;
}

int main(int argc, char **argv) {
    Options o;
    Err e = {{0}};
    int st = parse_args(argc, argv, &o, &e);
    if (st) {
        fprintf(stderr, "compress: %s\n", e.msg);
        usage(stderr);
        return 2;
    }
    st = o.check ? check(&o, &e) : o.decode ? restore(&o, &e) : o.retype >= 0 ? retype(&o, &e) : compress(&o, &e);
    if (st) {
        fprintf(stderr, "compress: %s\n", e.msg);
        return 1;
    }
    return 0;
}
