/* test_loaders.c - every loader refuses bad files with one clear line.
 *
 * Each case starts from a good fixture file, breaks one thing in a copy
 * (truncate it, change the magic, give a tensor an unknown type, point a
 * tensor past the end, make a dimension absurd) and checks that loading fails
 * with a format error whose message names the file and the problem. */
#include "load/gguf.h"
#include "base/mem.h"
#include "model.h"
#include "testutil.h"
#include "text/tokenizer.h"
#include "codec/wcodec.h"
#include "front/workload.h"
#include <signal.h>
#include <sys/stat.h>

typedef struct {
    unsigned char *bytes;
    size_t size;
} Blob;

static int load_fixture(Blob *b, const char *rel) {
    char path[512];
    if (!fixture(path, sizeof path, rel)) return 0;
    b->bytes = read_file(path, &b->size);
    assert_non_null(b->bytes);
    return 1;
}

/* Load a broken copy; expect failure with a message containing `want`. */
static void expect_refused(const Blob *b, size_t size, const char *want) {
    char path[64];
    write_temp(path, sizeof path, b->bytes, size);
    MemStats before = mem_stats();
    Model m;
    Err e = {{0}};
    int rc = model_load(&m, path, "/nonexistent/tokenizer.bin", &e);
    unlink(path);
    if (rc == ST_OK) {
        model_free(&m);
        fail_msg("a broken file (%s expected) was accepted", want);
    }
    assert_true(rc == ST_FORMAT || rc == ST_UNSUPPORTED);
    if (!strstr(e.msg, path) || !strstr(e.msg, want))
        fail_msg("message \"%s\" should name the file and say \"%s\"", e.msg, want);
    assert_null(strchr(e.msg, '\n'));   /* one line */
    assert_int_equal(mem_stats().live_count, before.live_count);
}

/* Where tensor i's header fields sit in the file (found with the reader). */
typedef struct { size_t name, dims, type, offset; } TensorAt;

static TensorAt tensor_at(const Blob *b, uint64_t i) {
    char path[64];
    write_temp(path, sizeof path, b->bytes, b->size);
    Gguf g;
    Err e;
    assert_int_equal(gguf_open(&g, path, &e), ST_OK);
    const GgufTensor *t = &g.tensors[i];
    TensorAt at;
    at.name = (size_t)((const unsigned char *)t->name.s - g.map) - 8;
    at.dims = at.name + 8 + t->name.len + 4;
    at.type = at.dims + 8 * t->n_dims;
    at.offset = at.type + 4;
    gguf_close(&g);
    unlink(path);
    return at;
}

static void gguf_truncated_header_is_refused(void **st) {
    Blob b;
    if (!load_fixture(&b, "tiny/tiny-f32.gguf")) return;
    expect_refused(&b, 100, "truncated");
    expect_refused(&b, 10, "truncated");
    free(b.bytes);
}

static void gguf_truncated_data_is_refused(void **st) {
    Blob b;
    if (!load_fixture(&b, "tiny/tiny-f32.gguf")) return;
    expect_refused(&b, b.size / 2, "past the end");
    expect_refused(&b, b.size - 1, "past the end");
    free(b.bytes);
}

static void gguf_wrong_magic_is_refused(void **st) {
    Blob b;
    if (!load_fixture(&b, "tiny/tiny-f32.gguf")) return;
    /* "GGUX": not GGUF, so it is read as a llama2.c checkpoint whose header
     * is absurd; "GGUF" with a bad version is the reader's own error. */
    b.bytes[3] = 'X';
    expect_refused(&b, b.size, "absurd");
    b.bytes[3] = 'F';
    b.bytes[4] = 9;
    expect_refused(&b, b.size, "version 9");
    free(b.bytes);
}

static void gguf_unknown_tensor_type_is_refused(void **st) {
    Blob b;
    if (!load_fixture(&b, "tiny/tiny-f32.gguf")) return;
    TensorAt at = tensor_at(&b, 3);
    uint32_t bad = 42;
    memcpy(b.bytes + at.type, &bad, 4);
    expect_refused(&b, b.size, "unknown or unsupported type 42");
    free(b.bytes);
}

static void gguf_tensor_past_the_end_is_refused(void **st) {
    Blob b;
    if (!load_fixture(&b, "tiny/tiny-f32.gguf")) return;
    TensorAt at = tensor_at(&b, 0);
    uint64_t off = (uint64_t)b.size;   /* aligned to 32 only by luck: round up */
    off = (off + 31) / 32 * 32;
    memcpy(b.bytes + at.offset, &off, 8);
    expect_refused(&b, b.size, "past the end");
    free(b.bytes);
}

static void gguf_absurd_dimensions_are_refused(void **st) {
    Blob b;
    if (!load_fixture(&b, "tiny/tiny-f32.gguf")) return;
    TensorAt at = tensor_at(&b, 1);
    uint64_t huge = (uint64_t)1 << 50;
    memcpy(b.bytes + at.dims, &huge, 8);
    expect_refused(&b, b.size, "absurd dimension");
    free(b.bytes);
}

static void gguf_absurd_tensor_count_is_refused(void **st) {
    Blob b;
    if (!load_fixture(&b, "tiny/tiny-f32.gguf")) return;
    uint64_t huge = (uint64_t)1 << 60;
    memcpy(b.bytes + 8, &huge, 8);
    expect_refused(&b, b.size, "absurd counts");
    free(b.bytes);
}

static void gguf_absurd_layer_count_is_refused(void **st) {
    Blob b;
    if (!load_fixture(&b, "tiny/tiny-f32.gguf")) return;
    /* Find the value of llama.block_count and make it a million. */
    const char key[] = "llama.block_count";
    unsigned char *p = memmem(b.bytes, b.size, key, sizeof key - 1);
    assert_non_null(p);
    uint32_t type;
    memcpy(&type, p + sizeof key - 1, 4);
    assert_true(type == GG_U32 || type == GG_I32);
    uint32_t big = 1000000;
    memcpy(p + sizeof key - 1 + 4, &big, 4);
    expect_refused(&b, b.size, "absurd llama.block_count");
    free(b.bytes);
}

/* ---- the 4 and 6-bit block formats (quant/) and RoPE settings (llama3/) */

/* The index of the first tensor of a type in a GGUF blob. */
static uint64_t first_tensor_of_type(const Blob *b, DType type) {
    char path[64];
    write_temp(path, sizeof path, b->bytes, b->size);
    Gguf g;
    Err e;
    assert_int_equal(gguf_open(&g, path, &e), ST_OK);
    uint64_t i = 0;
    while (i < g.n_tensors && g.tensors[i].type != (uint32_t)type) i++;
    assert_true(i < g.n_tensors);
    gguf_close(&g);
    unlink(path);
    return i;
}

/* A file cut inside the blocks of its last tensor, and a row length that is
 * not a whole number of blocks (the block size of each format: 32 for Q4_0,
 * 256 for the K formats), are each one line naming the file and the tensor. */
static void gguf_block_formats_with_cut_blocks_or_partial_rows_are_refused(void **st) {
    static const struct { const char *rel; DType type; uint64_t bad_row; const char *want; } cases[] = {
        {"quant/quant-q4_0.gguf", DT_Q4_0, 48, "row of 48 values is not a whole number of Q4_0 blocks"},
        {"quant/quant-q4_k_m.gguf", DT_Q4_K, 200, "row of 200 values is not a whole number of Q4_K blocks"},
        {"quant/quant-q6_k.gguf", DT_Q6_K, 128, "row of 128 values is not a whole number of Q6_K blocks"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        Blob b;
        if (!load_fixture(&b, cases[c].rel)) return;
        /* cut: 7 bytes short, in the middle of the last block */
        expect_refused(&b, b.size - 7, "points past the end");
        TensorAt at = tensor_at(&b, first_tensor_of_type(&b, cases[c].type));
        memcpy(b.bytes + at.dims, &cases[c].bad_row, 8);
        expect_refused(&b, b.size, cases[c].want);
        free(b.bytes);
    }
}

/* Two string entries inserted before the first key of a GGUF blob, sized so
 * that everything after them moves by a whole number of alignment units (96
 * bytes): the tensors' data then still starts where their offsets say. */
static Blob with_rope_scaling_type(const Blob *b, const char *type) {
    char pad[32];
    size_t tl = strlen(type);
    assert_true(tl <= 21);
    memset(pad, '.', 21 - tl);   /* 43 + tl + 32 + (21 - tl) = 96 bytes */
    pad[21 - tl] = 0;
    unsigned char kv[96], *p = kv;
    const char *keys[2] = {"llama.rope.scaling.type", "test.padding"}, *vals[2] = {type, pad};
    for (int i = 0; i < 2; i++) {
        uint64_t kl = strlen(keys[i]), vl = strlen(vals[i]);
        uint32_t t = GG_STRING;
        memcpy(p, &kl, 8), memcpy(p + 8, keys[i], kl), p += 8 + kl;
        memcpy(p, &t, 4), p += 4;
        memcpy(p, &vl, 8), memcpy(p + 8, vals[i], vl), p += 8 + vl;
    }
    assert_int_equal(p - kv, 96);
    Blob out = {malloc(b->size + 96), b->size + 96};
    assert_non_null(out.bytes);
    memcpy(out.bytes, b->bytes, 24);   /* magic, version, tensor and key counts */
    memcpy(out.bytes + 24, kv, 96);
    memcpy(out.bytes + 120, b->bytes + 24, b->size - 24);
    uint64_t n_kv;
    memcpy(&n_kv, out.bytes + 16, 8);
    n_kv += 2;
    memcpy(out.bytes + 16, &n_kv, 8);
    return out;
}

/* A RoPE scaling we do not implement would run and print plausible garbage:
 * it is refused by name. "none" loads, with the file's rope_freqs. */
static void rope_scaling_types_not_implemented_are_refused(void **st) {
    Blob b;
    if (!load_fixture(&b, "llama3/llama3-f32.gguf")) return;
    const char *refused[] = {"linear", "yarn"};
    for (int i = 0; i < 2; i++) {
        Blob x = with_rope_scaling_type(&b, refused[i]);
        char want[96];
        snprintf(want, sizeof want, "llama.rope.scaling.type '%s' is not supported", refused[i]);
        expect_refused(&x, x.size, want);
        free(x.bytes);
    }
    Blob none = with_rope_scaling_type(&b, "none");
    char path[64];
    write_temp(path, sizeof path, none.bytes, none.size);
    Model m;
    Err e;
    assert_int_equal(model_load(&m, path, NULL, &e), ST_OK);
    assert_non_null(m.rope_freqs);
    model_free(&m);
    unlink(path);
    free(none.bytes), free(b.bytes);
}

/* A compressed file (tools/compress) whose coded matrix claims a 4-bit type
 * with bytes that are not its rows: the codec keeps such types whole and
 * checks no size, so the loader does. Made from the Q4_K_M fixture:
 * blk.0.attn_q.weight (256 x 256 Q4_K, 36864 bytes) becomes a 1-D byte
 * tensor holding a coded blob of one block less, and the keys compress
 * writes (rans.version 2 and the CRCs, right, and a padding key) mark the
 * file. */
static void coded_small_format_matrix_of_the_wrong_size_is_refused(void **st) {
    Blob b;
    if (!load_fixture(&b, "quant/quant-q4_k_m.gguf")) return;
    char path[64];
    write_temp(path, sizeof path, b.bytes, b.size);
    Gguf g;
    Err e;
    assert_int_equal(gguf_open(&g, path, &e), ST_OK);
    uint64_t i = 0;
    while (i < g.n_tensors && !gguf_str_eq(g.tensors[i].name, "blk.0.attn_q.weight")) i++;
    assert_true(i < g.n_tensors);
    assert_int_equal(g.tensors[i].type, DT_Q4_K);
    assert_int_equal(g.tensors[i].nbytes, 36864);
    size_t data_at = (size_t)((const unsigned char *)g.tensors[i].data - g.map);
    gguf_close(&g);
    unlink(path);
    TensorAt at = tensor_at(&b, i);

    uint64_t ne[4] = {256, 256, 1, 1};
    uint8_t *blob;
    size_t len;
    WcPlane planes[WC_MAX_PLANES];
    int np;
    assert_int_equal(wc_encode(b.bytes + data_at, 36864 - 144, DT_Q4_K, 2, ne, 0, NULL, &blob, &len,
                               planes, &np, &e), ST_OK);
    assert_true(len <= 36864);

    /* the keys compress writes (rans.version 2, the header's and every
     * tensor's CRC-32, filled in below), and a padding string that keeps the
     * data section's shift (the keys, less the 8 bytes of the dropped
     * dimension) a multiple of the 32-byte alignment */
    uint64_t nt;
    memcpy(&nt, b.bytes + 8, 8);
    size_t fixed = 28 + 33 + 41 + 4 * nt + 32, pad = (32 - (fixed - 8) % 32) % 32, kvn = fixed + pad;
    unsigned char *kv = calloc(1, kvn), *p = kv;
    assert_non_null(kv);
    uint64_t l12 = 12, l17 = 17, lpad = pad;
    uint32_t t32 = GG_U32, two = 2, zero = 0, tarr = GG_ARRAY, tstr = GG_STRING;
    memcpy(p, &l12, 8), memcpy(p + 8, "rans.version", 12), memcpy(p + 20, &t32, 4), memcpy(p + 24, &two, 4), p += 28;
    size_t hcrc_at = (size_t)(p - kv) + 29;   /* the header CRC's value bytes, within kv */
    memcpy(p, &l17, 8), memcpy(p + 8, "rans.header.crc32", 17), memcpy(p + 25, &t32, 4), memcpy(p + 29, &zero, 4), p += 33;
    size_t tcrc_at = (size_t)(p - kv) + 41;   /* the first tensor CRC, within kv */
    memcpy(p, &l17, 8), memcpy(p + 8, "rans.tensor.crc32", 17), memcpy(p + 25, &tarr, 4), memcpy(p + 29, &t32, 4);
    memcpy(p + 33, &nt, 8), p += 41 + 4 * nt;
    memcpy(p, &l12, 8), memcpy(p + 8, "test.padding", 12), memcpy(p + 20, &tstr, 4), memcpy(p + 24, &lpad, 8), p += 32;
    memset(p, 'x', pad), p += pad;
    assert_int_equal((size_t)(p - kv), kvn);
    size_t shift = kvn - 8;
    Blob c = {calloc(1, b.size + shift), b.size + shift};
    assert_non_null(c.bytes);
    size_t o = 0;
    memcpy(c.bytes, b.bytes, 24), o = 24;
    memcpy(c.bytes + o, kv, kvn), o += kvn;
    memcpy(c.bytes + o, b.bytes + 24, at.dims - 4 - 24), o += at.dims - 4 - 24;   /* up to n_dims */
    uint32_t dims1 = 1, i8 = GGUF_TYPE_I8;
    uint64_t blob_len = len;
    memcpy(c.bytes + o, &dims1, 4), o += 4;
    memcpy(c.bytes + o, &blob_len, 8), o += 8;
    memcpy(c.bytes + o, &i8, 4), o += 4;
    memcpy(c.bytes + o, b.bytes + at.offset, b.size - at.offset), o += b.size - at.offset;
    assert_int_equal(o, c.size);
    uint64_t n_kv;
    memcpy(&n_kv, c.bytes + 16, 8);
    n_kv += 4;
    memcpy(c.bytes + 16, &n_kv, 8);
    memcpy(c.bytes + data_at + shift, blob, len);
    /* the checksums, as compress computes them, so the loader gets as far as the size */
    write_temp(path, sizeof path, c.bytes, c.size);
    assert_int_equal(gguf_open(&g, path, &e), ST_OK);
    for (uint64_t k = 0; k < nt; k++) {
        uint32_t crc = rans_crc32(g.tensors[k].data, g.tensors[k].nbytes);
        memcpy(c.bytes + 24 + tcrc_at + 4 * k, &crc, 4);
    }
    gguf_close(&g);
    write_temp(path, sizeof path, c.bytes, c.size);
    assert_int_equal(gguf_open(&g, path, &e), ST_OK);
    uint32_t hcrc;
    size_t hoff;
    assert_int_equal(gguf_header_crc(&g, "rans.header.crc32", &hcrc, &hoff, &e), ST_OK);
    assert_int_equal(hoff, 24 + hcrc_at);
    gguf_close(&g);
    unlink(path);
    memcpy(c.bytes + hoff, &hcrc, 4);
    free(kv);
    expect_refused(&c, c.size, "codes 36720 bytes of Q4_K, want 36864 (256 rows of 256)");
    mem_free(blob), free(c.bytes), free(b.bytes);
}

/* The index of tensor `name` in a GGUF blob (found with the reader). */
static uint64_t tensor_index(const Blob *b, const char *name) {
    char path[64];
    write_temp(path, sizeof path, b->bytes, b->size);
    Gguf g;
    Err e;
    assert_int_equal(gguf_open(&g, path, &e), ST_OK);
    uint64_t i = 0;
    while (i < g.n_tensors && !gguf_str_eq(g.tensors[i].name, name)) i++;
    assert_true(i < g.n_tensors);
    gguf_close(&g);
    unlink(path);
    return i;
}

/* rope_freqs.weight must hold one positive finite divisor per RoPE pair. */
static void rope_freqs_of_the_wrong_size_or_value_are_refused(void **st) {
    Blob b;
    if (!load_fixture(&b, "llama3/llama3-f32.gguf")) return;
    uint64_t i = tensor_index(&b, "rope_freqs.weight");
    char path[64];
    write_temp(path, sizeof path, b.bytes, b.size);
    Gguf g;
    Err e;
    assert_int_equal(gguf_open(&g, path, &e), ST_OK);
    size_t data_at = (size_t)((const unsigned char *)g.tensors[i].data - g.map);
    gguf_close(&g);
    unlink(path);
    TensorAt at = tensor_at(&b, i);
    uint64_t sixteen = 16, thirty_two;
    memcpy(&thirty_two, b.bytes + at.dims, 8);
    assert_int_equal(thirty_two, 32);
    memcpy(b.bytes + at.dims, &sixteen, 8);
    expect_refused(&b, b.size, "rope_freqs.weight is F32 with 16 values, want F32 with 32");
    memcpy(b.bytes + at.dims, &thirty_two, 8);
    float bad = -1.0f;
    memcpy(b.bytes + data_at + 3 * 4, &bad, 4);
    expect_refused(&b, b.size, "rope_freqs.weight[3] = -1, want a positive finite divisor");
    free(b.bytes);
}

/* Qwen files: a bias or a head norm missing or of the wrong length, and an
 * architecture this engine does not run, each refused in one line naming it. */
static void qwen_files_missing_a_bias_or_with_a_wrong_norm_are_refused(void **st) {
    Blob b;
    if (!load_fixture(&b, "qwen/qwen2/qwen2-f32.gguf")) return;
    TensorAt at = tensor_at(&b, tensor_index(&b, "blk.1.attn_k.bias"));
    b.bytes[at.name + 8 + strlen("blk.1.attn_k.bia")] = 'z';   /* now "blk.1.attn_k.biaz" */
    expect_refused(&b, b.size, "missing tensor blk.1.attn_k.bias");
    free(b.bytes);

    if (!load_fixture(&b, "qwen/qwen3/qwen3-f32.gguf")) return;
    at = tensor_at(&b, tensor_index(&b, "blk.0.attn_q_norm.weight"));
    uint64_t was, half = 32;
    memcpy(&was, b.bytes + at.dims, 8);
    assert_int_equal(was, 64);   /* the head size, not dim / heads = 32 */
    memcpy(b.bytes + at.dims, &half, 8);
    expect_refused(&b, b.size, "tensor blk.0.attn_q_norm.weight has 32 values, want 64");
    memcpy(b.bytes + at.dims, &was, 8);

    const char *key = "general.architecture";
    unsigned char *k = memmem(b.bytes, b.size, key, strlen(key));
    assert_non_null(k);
    unsigned char *value = k + strlen(key) + 4 + 8;   /* the type, the string's length */
    assert_memory_equal(value, "qwen3", 5);
    value[4] = '9';
    expect_refused(&b, b.size, "architecture 'qwen9' is not supported (want llama, qwen2 or qwen3)");
    free(b.bytes);
}

static void llama2c_truncated_checkpoint_is_refused(void **st) {
    Blob b;
    if (!load_fixture(&b, "tiny/tiny.bin")) return;
    expect_refused(&b, b.size - 4, "truncated");
    expect_refused(&b, 20, "truncated");
    free(b.bytes);
}

static void llama2c_absurd_header_is_refused(void **st) {
    Blob b;
    if (!load_fixture(&b, "tiny/tiny.bin")) return;
    int32_t h[7];
    memcpy(h, b.bytes, sizeof h);
    int32_t bad = -5;
    memcpy(b.bytes, &bad, 4);   /* dim */
    expect_refused(&b, b.size, "absurd dim");
    memcpy(b.bytes, h, sizeof h);
    bad = 3;                    /* n_kv_heads that does not divide n_heads */
    memcpy(b.bytes + 16, &bad, 4);
    expect_refused(&b, b.size, "not a multiple of n_kv_heads");
    memcpy(b.bytes, h, sizeof h);
    bad = 1 << 30;              /* seq_len */
    memcpy(b.bytes + 24, &bad, 4);
    expect_refused(&b, b.size, "absurd seq_len");
    free(b.bytes);
}

/* A header that claims a smaller model than the file holds would load the
 * first bytes of every array and print garbage: the size must be exact. */
static void llama2c_header_that_disagrees_with_the_file_size_is_refused(void **st) {
    Blob b;
    if (!load_fixture(&b, "tiny/tiny.bin")) return;
    int32_t h[7];
    memcpy(h, b.bytes, sizeof h);
    char want[96];
    snprintf(want, sizeof want, "the file has %zu", b.size);
    const int fields[] = {2, 1, 4};   /* n_layers, hidden_dim, n_kv_heads: each one less */
    for (int i = 0; i < 3; i++) {
        int32_t smaller = h[fields[i]] - (fields[i] == 1 ? 32 : 1);
        memcpy(b.bytes + 4 * fields[i], &smaller, 4);
        expect_refused(&b, b.size, want);
        expect_refused(&b, b.size, "implies");
        memcpy(b.bytes, h, sizeof h);
    }
    /* a negative vocab_size says a classifier follows, and none does */
    int32_t unshared = -h[5];
    memcpy(b.bytes + 20, &unshared, 4);
    expect_refused(&b, b.size, "classifier");
    /* one float too many */
    memcpy(b.bytes, h, sizeof h);
    unsigned char *longer = malloc(b.size + 4);
    memcpy(longer, b.bytes, b.size);
    memset(longer + b.size, 0, 4);
    Blob l = {longer, b.size + 4};
    expect_refused(&l, l.size, "4 bytes more");
    free(longer);
    free(b.bytes);
}

/* Two tensors whose data overlap: one of them would read the other's bytes. */
static void gguf_overlapping_tensors_are_refused(void **st) {
    Blob b;
    if (!load_fixture(&b, "tiny/tiny-f32.gguf")) return;
    char path[64];
    write_temp(path, sizeof path, b.bytes, b.size);
    Gguf g;
    Err e;
    assert_int_equal(gguf_open(&g, path, &e), ST_OK);
    unlink(path);
    /* the smallest tensor moved onto the start of the largest: inside the file */
    uint64_t small = 0, big = 0;
    for (uint64_t i = 1; i < g.n_tensors; i++) {
        if (g.tensors[i].nbytes < g.tensors[small].nbytes) small = i;
        if (g.tensors[i].nbytes > g.tensors[big].nbytes) big = i;
    }
    uint64_t off = g.tensors[big].offset + 32;
    char small_name[80], big_name[80];
    snprintf(small_name, sizeof small_name, "%.*s", (int)g.tensors[small].name.len, g.tensors[small].name.s);
    snprintf(big_name, sizeof big_name, "%.*s", (int)g.tensors[big].name.len, g.tensors[big].name.s);
    gguf_close(&g);
    TensorAt at = tensor_at(&b, small);
    memcpy(b.bytes + at.offset, &off, 8);
    expect_refused(&b, b.size, "overlap");
    expect_refused(&b, b.size, small_name);
    expect_refused(&b, b.size, big_name);
    free(b.bytes);
}

/* Write n bytes to dir/name in a fresh temporary directory; path gets the
 * file's path. remove_named() undoes it. */
static void write_named(char *path, size_t cap, const char *name, const void *data, size_t n) {
    char dir[] = "/tmp/llm-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    snprintf(path, cap, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

static void remove_named(const char *path) {
    unlink(path);
    char dir[512];
    snprintf(dir, sizeof dir, "%.*s", (int)(strrchr(path, '/') - path), path);
    rmdir(dir);
}

/* Load path as a model; expect ST_FORMAT and a message naming it and `want`. */
static void expect_model_refused(const char *path, const char *want) {
    Model m;
    Err e = {{0}};
    int rc = model_load(&m, path, "/nonexistent/tokenizer.bin", &e);
    if (rc == ST_OK) model_free(&m);
    if (rc != ST_FORMAT || !strstr(e.msg, path) || !strstr(e.msg, want))
        fail_msg("status %d, message \"%s\": want a format error naming %s and saying \"%s\"", rc,
                 e.msg, path, want);
}

/* An empty file is neither a short llama2.c header nor a short GGUF one. */
static void an_empty_file_is_called_empty_whatever_its_name(void **st) {
    const char *names[] = {"model.gguf", "model.bin", "model"};
    for (int i = 0; i < 3; i++) {
        char path[512];
        write_named(path, sizeof path, names[i], "", 0);
        expect_model_refused(path, ": empty file");
        Err e = {{0}};
        Gguf g;
        assert_int_equal(gguf_open(&g, path, &e), ST_FORMAT);
        assert_non_null(strstr(e.msg, ": empty file"));
        Tokenizer *t;
        assert_int_equal(tok_from_llama2c(&t, path, 512, &e), ST_FORMAT);
        assert_non_null(strstr(e.msg, ": empty file"));
        remove_named(path);
    }
}

/* A file named *.gguf is read as GGUF whatever its first bytes: "not a
 * GGUF file" explains more than a llama2.c header of absurd numbers. */
static void a_gguf_named_file_without_the_magic_says_so(void **st) {
    Blob b;
    if (!load_fixture(&b, "tiny/tiny.bin")) return;
    size_t sizes[] = {b.size, 10};
    for (int i = 0; i < 2; i++) {
        char path[512];
        write_named(path, sizeof path, "tiny.gguf", b.bytes, sizes[i]);
        expect_model_refused(path, "not a GGUF file");
        remove_named(path);
    }
    free(b.bytes);
}

/* A context of one position holds BOS and nothing more: nothing could ever
 * be generated, and the runtime's complaint would not name the file. */
static void llama2c_seq_len_too_small_is_refused_naming_the_file(void **st) {
    Blob b;
    if (!load_fixture(&b, "tiny/tiny.bin")) return;
    int32_t h[7];
    memcpy(h, b.bytes, sizeof h);
    size_t S = (size_t)(h[0] / h[3]), rope = (size_t)h[6] * S * 4;
    int32_t one = 1;
    memcpy(b.bytes + 24, &one, 4);
    /* keep the size consistent: the (unused) RoPE tables shrink to one position */
    expect_refused(&b, b.size - rope + S * 4, "seq_len 1");
    free(b.bytes);
}

static void missing_file_is_an_io_error(void **st) {
    Model m;
    Err e;
    assert_int_equal(model_load(&m, "/nonexistent/model.gguf", NULL, &e), ST_IO);
    assert_non_null(strstr(e.msg, "/nonexistent/model.gguf"));
}

/* ---- what is not a regular file ----------------------------------------- */

/* Every reader given `path` fails with ST_IO and one line "path: want",
 * and leaks nothing. */
static void expect_every_reader_refuses(const char *path, const char *want) {
    char line[600];
    snprintf(line, sizeof line, "%s: %s", path, want);
    MemStats before = mem_stats();
    Err e = {{0}};
    Model m;
    assert_int_equal(model_load(&m, path, NULL, &e), ST_IO);
    if (!strstr(e.msg, line)) fail_msg("model_load: \"%s\", want \"%s\"", e.msg, line);
    Gguf g;
    assert_int_equal(gguf_open(&g, path, &e), ST_IO);
    if (!strstr(e.msg, line)) fail_msg("gguf_open: \"%s\", want \"%s\"", e.msg, line);
    Tokenizer *t = NULL;
    assert_int_equal(tok_from_llama2c(&t, path, 512, &e), ST_IO);
    if (!strstr(e.msg, line)) fail_msg("tok_from_llama2c: \"%s\", want \"%s\"", e.msg, line);
    assert_null(t);
    Workload w;
    assert_int_equal(workload_load(&w, path, &e), ST_IO);
    if (!strstr(e.msg, line)) fail_msg("workload_load: \"%s\", want \"%s\"", e.msg, line);
    assert_null(strchr(e.msg, '\n'));
    /* the tokenizer of a llama2.c checkpoint, the case that asked for 2^63 bytes */
    char tiny[512];
    if (fixture(tiny, sizeof tiny, "tiny/tiny.bin")) {
        assert_int_equal(model_load(&m, tiny, path, &e), ST_IO);
        if (!strstr(e.msg, line)) fail_msg("model_load tokenizer: \"%s\", want \"%s\"", e.msg, line);
    }
    assert_int_equal(mem_stats().live_count, before.live_count);
}

static void a_directory_is_refused_by_every_reader(void **st) {
    char dir[] = "/tmp/llm-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    expect_every_reader_refuses(dir, "is a directory");
    rmdir(dir);
}

/* open() on a FIFO waits for a writer: the readers must refuse it without
 * opening it for blocking reads. The alarm turns a regression into a
 * failure rather than a hung suite. */
static void a_fifo_is_refused_without_blocking(void **st) {
    char dir[] = "/tmp/llm-test-XXXXXX", fifo[64];
    assert_non_null(mkdtemp(dir));
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    alarm(20);
    expect_every_reader_refuses(fifo, "not a regular file (a FIFO)");
    alarm(0);
    unlink(fifo);
    rmdir(dir);
}

/* ---- workload files --------------------------------------------------------- */

/* Load a workload made of `text`; returns the status, the message in e. */
static int load_workload_text(const char *text, char *path, size_t cap, Workload *w, Err *e) {
    write_temp(path, cap, text, strlen(text));
    int rc = workload_load(w, path, e);
    unlink(path);
    return rc;
}

/* Expect text refused with ST_FORMAT and one line holding "path:want". */
static void expect_workload_refused(const char *text, const char *want) {
    char path[64], line[160];
    Workload w;
    Err e = {{0}};
    MemStats before = mem_stats();
    int rc = load_workload_text(text, path, sizeof path, &w, &e);
    if (rc == ST_OK) {
        workload_free(&w);
        fail_msg("workload accepted, want \"%s\": %s", want, text);
    }
    assert_int_equal(rc, ST_FORMAT);
    snprintf(line, sizeof line, "%s:%s", path, want);
    if (!strstr(e.msg, line)) fail_msg("message \"%s\" should say \"%s\"", e.msg, line);
    assert_null(strchr(e.msg, '\n'));
    assert_int_equal(mem_stats().live_count, before.live_count);
}

/* cJSON decodes "\u0000" to a NUL and the string ends there: "a\u0000b"
 * would become the prompt "a" without a word. */
static void workload_escaped_nul_is_refused_naming_line_and_field(void **st) {
    expect_workload_refused("{\"prompt\": \"a\"}\n{\"prompt\": \"a\\u0000b\"}\n",
                            "2: field \"prompt\" contains \\u0000");
    expect_workload_refused("{\"prompt\": \"a\", \"stop\": [\"x\", \"y\\u0000\"]}\n",
                            "1: field \"stop\" contains \\u0000");
    expect_workload_refused("{\"prompt\": \"a\", \"stop\": \"\\u0000\"}\n",
                            "1: field \"stop\" contains \\u0000");
    /* the key itself: "prompt\u0000x" would be read as "prompt" */
    expect_workload_refused("{\"prompt\\u0000x\": \"a\"}\n", "1: a field name contains \\u0000");
}

/* "\\u0000" is a backslash followed by the text u0000: an ordinary prompt. */
static void workload_escaped_backslash_before_u0000_is_plain_text(void **st) {
    char path[64];
    Workload w;
    Err e = {{0}};
    assert_int_equal(load_workload_text("{\"prompt\": \"a\\\\u0000b\", \"stop\": \"\\\\\"}\n",
                                        path, sizeof path, &w, &e), ST_OK);
    assert_int_equal(w.n, 1);
    assert_string_equal(w.items[0].params.prompt, "a\\u0000b");
    assert_string_equal(w.items[0].params.stop[0], "\\");
    workload_free(&w);
}

/* cJSON keeps both copies of a repeated key and the last would silently win. */
static void workload_duplicate_field_is_refused(void **st) {
    expect_workload_refused("{\"prompt\": \"a\", \"max_tokens\": 3, \"max_tokens\": 5}\n",
                            "1: duplicate field \"max_tokens\"");
    expect_workload_refused("\n{\"prompt\": \"a\", \"seed\": 1, \"prompt\": \"b\"}\n",
                            "2: duplicate field \"prompt\"");
}

int main(int argc, char **argv) {
    select_tests(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gguf_truncated_header_is_refused),
        cmocka_unit_test(gguf_truncated_data_is_refused),
        cmocka_unit_test(gguf_wrong_magic_is_refused),
        cmocka_unit_test(gguf_unknown_tensor_type_is_refused),
        cmocka_unit_test(gguf_tensor_past_the_end_is_refused),
        cmocka_unit_test(gguf_absurd_dimensions_are_refused),
        cmocka_unit_test(gguf_absurd_tensor_count_is_refused),
        cmocka_unit_test(gguf_absurd_layer_count_is_refused),
        cmocka_unit_test(gguf_block_formats_with_cut_blocks_or_partial_rows_are_refused),
        cmocka_unit_test(rope_scaling_types_not_implemented_are_refused),
        cmocka_unit_test(coded_small_format_matrix_of_the_wrong_size_is_refused),
        cmocka_unit_test(rope_freqs_of_the_wrong_size_or_value_are_refused),
        cmocka_unit_test(qwen_files_missing_a_bias_or_with_a_wrong_norm_are_refused),
        cmocka_unit_test(llama2c_truncated_checkpoint_is_refused),
        cmocka_unit_test(llama2c_absurd_header_is_refused),
        cmocka_unit_test(llama2c_header_that_disagrees_with_the_file_size_is_refused),
        cmocka_unit_test(gguf_overlapping_tensors_are_refused),
        cmocka_unit_test(an_empty_file_is_called_empty_whatever_its_name),
        cmocka_unit_test(a_gguf_named_file_without_the_magic_says_so),
        cmocka_unit_test(llama2c_seq_len_too_small_is_refused_naming_the_file),
        cmocka_unit_test(missing_file_is_an_io_error),
        cmocka_unit_test(a_directory_is_refused_by_every_reader),
        cmocka_unit_test(a_fifo_is_refused_without_blocking),
        cmocka_unit_test(workload_escaped_nul_is_refused_naming_line_and_field),
        cmocka_unit_test(workload_escaped_backslash_before_u0000_is_plain_text),
        cmocka_unit_test(workload_duplicate_field_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
