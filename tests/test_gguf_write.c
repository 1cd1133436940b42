/* test_gguf_write.c - the GGUF writer, checked through the reader.
 *
 * Every file here is written by gguf_write.c and read back by gguf.c, an
 * independent parser with its own bounds checks: metadata of every kind the
 * writer offers, tensors of every type from both sources (a data pointer and a
 * row callback), offsets and alignment, every byte of data and padding, and the
 * failure paths: bad descriptions, an unwritable path, a failing callback,
 * failed allocations, and a written file cut short at every possible length. */
#include "testutil.h"
#include "load/gguf.h"
#include "train/gguf_write.h"
#include "base/mem.h"
#include "kernels/ops.h"
#include <math.h>

/* A fresh, unused path in /tmp (the writer creates the file itself). */
static const char *temp_path(char *buf, size_t cap) {
    snprintf(buf, cap, "/tmp/llm-test-gw-XXXXXX");
    int fd = mkstemp(buf);
    assert_true(fd >= 0);
    close(fd);
    unlink(buf);
    return buf;
}

static int exists(const char *path) { return access(path, F_OK) == 0; }

static int part_exists(const char *path) {
    char part[600];
    snprintf(part, sizeof part, "%s.part", path);
    return exists(part);
}

/* ------------------------------------------------------------ metadata */

static void metadata_of_every_kind_reads_back_with_its_type_and_value(void **state) {
    char path[64];
    temp_path(path, sizeof path);
    const char *pieces[] = {"<unk>", "", "\xe2\x96\x81" "hello"};   /* U+2581 then "hello" */
    const float scores[] = {1.5f, -2.25f, 1e-5f};
    const int32_t types[] = {-1, 0, 6, INT32_MAX};

    GgufWriter w;
    gguf_w_init(&w, path);
    assert_int_equal(gguf_w_add_u32(&w, "test.u32", 4000000000u), ST_OK);
    assert_int_equal(gguf_w_add_i32(&w, "test.i32", -7), ST_OK);
    assert_int_equal(gguf_w_add_f32(&w, "test.f32", 0.15625f), ST_OK);
    assert_int_equal(gguf_w_add_bool(&w, "test.yes", 42), ST_OK);
    assert_int_equal(gguf_w_add_bool(&w, "test.no", 0), ST_OK);
    assert_int_equal(gguf_w_add_str(&w, "test.str", "h\xc3\xa9llo world"), ST_OK);
    assert_int_equal(gguf_w_add_str(&w, "test.empty", ""), ST_OK);
    assert_int_equal(gguf_w_add_str_array(&w, "test.strs", pieces, 3), ST_OK);
    assert_int_equal(gguf_w_add_f32_array(&w, "test.f32s", scores, 3), ST_OK);
    assert_int_equal(gguf_w_add_i32_array(&w, "test.i32s", types, 4), ST_OK);
    assert_int_equal(gguf_w_add_i32_array(&w, "test.none", NULL, 0), ST_OK);
    Err e = {{0}};
    assert_int_equal(gguf_w_write(&w, &e), ST_OK);
    uint64_t promised = gguf_w_file_size(&w);
    gguf_w_free(&w);
    assert_false(part_exists(path));

    Gguf g;
    assert_int_equal(gguf_open(&g, path, &e), ST_OK);
    assert_int_equal(g.version, 3);
    assert_int_equal(g.n_kv, 12);           /* the eleven above and general.alignment */
    assert_int_equal(g.n_tensors, 0);
    assert_int_equal(g.alignment, 32);
    assert_int_equal(g.size, promised);
    assert_int_equal(g.size % 32, 0);

    const GgufKV *kv = gguf_find(&g, "general.alignment");
    assert_non_null(kv);
    assert_int_equal(kv->type, GG_U32);
    int64_t i;
    assert_int_equal(gguf_get_int(&g, "general.alignment", &i, &e), ST_OK);
    assert_int_equal(i, 32);

    assert_int_equal(gguf_find(&g, "test.u32")->type, GG_U32);
    assert_int_equal(gguf_get_int(&g, "test.u32", &i, &e), ST_OK);
    assert_int_equal(i, 4000000000LL);
    assert_int_equal(gguf_find(&g, "test.i32")->type, GG_I32);
    assert_int_equal(gguf_get_int(&g, "test.i32", &i, &e), ST_OK);
    assert_int_equal(i, -7);
    double f;
    assert_int_equal(gguf_find(&g, "test.f32")->type, GG_F32);
    assert_int_equal(gguf_get_float(&g, "test.f32", &f, &e), ST_OK);
    assert_true(f == 0.15625);
    assert_int_equal(gguf_find(&g, "test.yes")->type, GG_BOOL);
    assert_int_equal(gguf_find(&g, "test.yes")->val[0], 1);   /* stored as exactly 1 */
    assert_int_equal(gguf_find(&g, "test.no")->val[0], 0);

    GgufStr s;
    assert_int_equal(gguf_get_str(&g, "test.str", &s, &e), ST_OK);
    assert_true(gguf_str_eq(s, "h\xc3\xa9llo world"));
    assert_int_equal(gguf_get_str(&g, "test.empty", &s, &e), ST_OK);
    assert_int_equal(s.len, 0);

    const uint8_t *p;
    uint64_t n;
    assert_int_equal(gguf_get_array(&g, "test.strs", GG_STRING, &p, &n, &e), ST_OK);
    assert_int_equal(n, 3);
    for (int k = 0; k < 3; k++) assert_true(gguf_str_eq(gguf_next_str(&p), pieces[k]));
    assert_int_equal(gguf_get_array(&g, "test.f32s", GG_F32, &p, &n, &e), ST_OK);
    assert_int_equal(n, 3);
    assert_memory_equal(p, scores, sizeof scores);
    assert_int_equal(gguf_get_array(&g, "test.i32s", GG_I32, &p, &n, &e), ST_OK);
    assert_int_equal(n, 4);
    assert_memory_equal(p, types, sizeof types);
    assert_int_equal(gguf_get_array(&g, "test.none", GG_I32, &p, &n, &e), ST_OK);
    assert_int_equal(n, 0);

    gguf_close(&g);
    unlink(path);
}

/* -------------------------------------------------------------- tensors */

/* The value every test tensor holds at (tag, row, i): varied signs and sizes. */
static float pattern(int tag, int64_t row, int64_t i) {
    return sinf(0.37f * (float)tag + 0.71f * (float)row + 0.13f * (float)i) * (float)(row + 1);
}

typedef struct {
    int tag;
    int64_t next_row;      /* the writer must ask for rows in order */
    int out_of_order;
    int fail_at_row;       /* -1: never fail */
} RowGen;

static int gen_rows(void *ctx, int64_t row, float *out, int64_t n, Err *e) {
    RowGen *g = ctx;
    if (row != g->next_row) g->out_of_order = 1;
    g->next_row = row + 1;
    if (row == g->fail_at_row) return err_set(e, ST_IO, "the source went away");
    for (int64_t i = 0; i < n; i++) out[i] = pattern(g->tag, row, i);
    return ST_OK;
}

/* The stored bytes a tensor of (tag, ne, type) must have, built row by row
 * with ops.h's own rounding; caller frees. */
static uint8_t *expected_bytes(int tag, const int64_t ne[4], DType type, size_t *nbytes) {
    int64_t rows = ne[1] * ne[2] * ne[3];
    size_t row_bytes = dtype_row_bytes(type, ne[0]);
    uint8_t *out = malloc(row_bytes * (size_t)rows);
    float *x = malloc((size_t)ne[0] * sizeof(float));
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < ne[0]; i++) x[i] = pattern(tag, r, i);
        uint8_t *o = out + (size_t)r * row_bytes;
        if (type == DT_F32) memcpy(o, x, row_bytes);
        if (type == DT_F16)
            for (int64_t i = 0; i < ne[0]; i++) ((uint16_t *)o)[i] = fp32_to_fp16(x[i]);
        if (type == DT_Q8_0) quantize_row_q8_0((BlockQ8_0 *)o, x, (int)ne[0]);
    }
    free(x);
    *nbytes = row_bytes * (size_t)rows;
    return out;
}

typedef struct {
    const char *name;
    int n_dims;
    int64_t ne[4];
    DType type;
    int from_rows;         /* 1: row callback, 0: data pointer */
} Spec;

static const Spec SPECS[] = {
    {"vec.f32", 1, {5, 1, 1, 1}, DT_F32, 0},          /* 20 bytes: 12 of padding follow */
    {"mat.f16", 2, {3, 2, 1, 1}, DT_F16, 0},
    {"mat.q8_0", 2, {64, 3, 1, 1}, DT_Q8_0, 0},
    {"cube.f32.rows", 3, {7, 2, 3, 1}, DT_F32, 1},
    {"mat.f16.rows", 2, {33, 4, 1, 1}, DT_F16, 1},
    {"blk.0.attn_q.weight", 4, {96, 5, 1, 2}, DT_Q8_0, 1},
};
#define N_SPECS (int)(sizeof SPECS / sizeof SPECS[0])

static void tensors_of_every_type_read_back_byte_for_byte_at_aligned_offsets(void **state) {
    char path[64];
    temp_path(path, sizeof path);
    uint8_t *want[N_SPECS];
    size_t want_bytes[N_SPECS];
    RowGen gens[N_SPECS];

    GgufWriter w;
    gguf_w_init(&w, path);
    assert_int_equal(gguf_w_add_str(&w, "general.architecture", "llama"), ST_OK);
    for (int k = 0; k < N_SPECS; k++) {
        const Spec *sp = &SPECS[k];
        want[k] = expected_bytes(k, sp->ne, sp->type, &want_bytes[k]);
        gens[k] = (RowGen){k, 0, 0, -1};
        int st = sp->from_rows
                     ? gguf_w_add_tensor_rows(&w, sp->name, sp->n_dims, sp->ne, sp->type, gen_rows, &gens[k])
                     : gguf_w_add_tensor(&w, sp->name, sp->n_dims, sp->ne, sp->type, want[k]);
        assert_int_equal(st, ST_OK);
    }
    Err e = {{0}};
    assert_int_equal(gguf_w_write(&w, &e), ST_OK);
    uint64_t promised = gguf_w_file_size(&w);
    gguf_w_free(&w);
    for (int k = 0; k < N_SPECS; k++) {
        assert_false(gens[k].out_of_order);
        if (SPECS[k].from_rows)
            assert_int_equal(gens[k].next_row, SPECS[k].ne[1] * SPECS[k].ne[2] * SPECS[k].ne[3]);
    }

    Gguf g;
    assert_int_equal(gguf_open(&g, path, &e), ST_OK);
    assert_int_equal(g.size, promised);
    assert_int_equal(g.n_tensors, N_SPECS);
    assert_int_equal(g.data_offset % 32, 0);
    uint64_t end_of_previous = 0;   /* data-section offset where the last tensor ended */
    for (int k = 0; k < N_SPECS; k++) {
        const Spec *sp = &SPECS[k];
        const GgufTensor *t = gguf_tensor(&g, sp->name);
        assert_non_null(t);
        assert_ptr_equal(t, &g.tensors[k]);                 /* in the order added */
        assert_int_equal(t->n_dims, sp->n_dims);
        for (int d = 0; d < 4; d++) assert_int_equal(t->ne[d], sp->ne[d]);
        assert_int_equal(t->type, sp->type);
        assert_int_equal(t->offset % 32, 0);
        assert_int_equal(((const uint8_t *)t->data - g.map) % 32, 0);
        assert_int_equal(t->nbytes, want_bytes[k]);
        assert_memory_equal(t->data, want[k], want_bytes[k]);
        /* Padding before this tensor is zero, and tensors are packed tightly. */
        assert_int_equal(t->offset, (end_of_previous + 31) / 32 * 32);
        for (uint64_t b = end_of_previous; b < t->offset; b++)
            assert_int_equal(g.map[g.data_offset + b], 0);
        end_of_previous = t->offset + t->nbytes;
    }
    for (uint64_t b = g.data_offset + end_of_previous; b < g.size; b++) assert_int_equal(g.map[b], 0);

    /* The header's padding: from the end of the last tensor record (name,
     * n_dims, ne[], type, offset) to the data section, all zero. */
    const GgufTensor *last = &g.tensors[N_SPECS - 1];
    const uint8_t *table_end =
        (const uint8_t *)last->name.s + last->name.len + 4 + 8 * last->n_dims + 4 + 8;
    assert_true(table_end <= g.map + g.data_offset);
    assert_true(g.map + g.data_offset - table_end < 32);
    for (const uint8_t *b = table_end; b < g.map + g.data_offset; b++) assert_int_equal(*b, 0);

    /* Q8_0 rows decode to within half a step of the source values. */
    const GgufTensor *q = gguf_tensor(&g, "blk.0.attn_q.weight");
    float row[96];
    for (int64_t r = 0; r < 10; r++) {
        const BlockQ8_0 *blk = (const BlockQ8_0 *)q->data + r * 3;
        dequantize_row(row, blk, DT_Q8_0, 96);
        for (int i = 0; i < 96; i++) {
            float d = fp16_to_fp32(blk[i / 32].d);
            assert_true(fabsf(row[i] - pattern(5, r, i)) <= 0.5f * d + 1e-3f * fabsf(d * 127));
        }
    }

    gguf_close(&g);
    for (int k = 0; k < N_SPECS; k++) free(want[k]);
    unlink(path);
}

static void an_empty_description_still_makes_a_file_the_reader_opens(void **state) {
    char path[64];
    temp_path(path, sizeof path);
    GgufWriter w;
    gguf_w_init(&w, path);
    Err e = {{0}};
    assert_int_equal(gguf_w_write(&w, &e), ST_OK);
    gguf_w_free(&w);
    Gguf g;
    assert_int_equal(gguf_open(&g, path, &e), ST_OK);
    assert_int_equal(g.n_kv, 1);
    assert_int_equal(g.n_tensors, 0);
    gguf_close(&g);
    unlink(path);
}

/* -------------------------------------------------------------- failures */

/* A small model-like file whose last tensor ends exactly at the end of the
 * file (128 bytes, no padding after it), so every shorter prefix loses data. */
static void write_small_file(const char *path, float *data32) {
    for (int i = 0; i < 32; i++) data32[i] = (float)i - 15.5f;
    GgufWriter w;
    gguf_w_init(&w, path);
    const char *toks[] = {"<unk>", "<s>"};
    gguf_w_add_str(&w, "general.architecture", "llama");
    gguf_w_add_str_array(&w, "tokenizer.ggml.tokens", toks, 2);
    int64_t ne_norm[1] = {5}, ne_w[2] = {32, 1};
    gguf_w_add_tensor(&w, "output_norm.weight", 1, ne_norm, DT_F32, data32);
    gguf_w_add_tensor(&w, "output.weight", 2, ne_w, DT_F32, data32);
    Err e = {{0}};
    assert_int_equal(gguf_w_write(&w, &e), ST_OK);
    gguf_w_free(&w);
}

static void the_reader_refuses_a_written_file_cut_short_at_any_length(void **state) {
    char path[64], cut[64];
    float data32[32];
    temp_path(path, sizeof path);
    write_small_file(path, data32);
    size_t size;
    uint8_t *bytes = read_file(path, &size);
    assert_non_null(bytes);

    Gguf g;
    Err e = {{0}};
    assert_int_equal(gguf_open(&g, path, &e), ST_OK);   /* the whole file is fine */
    assert_int_equal(g.size, size);
    assert_int_equal(g.tensors[1].offset + g.data_offset + 128, size);
    gguf_close(&g);

    for (size_t n = 0; n < size; n++) {
        write_temp(cut, sizeof cut, bytes, n);
        e.msg[0] = 0;
        int st = gguf_open(&g, cut, &e);
        if (st == ST_OK) fail_msg("a prefix of %zu of %zu bytes was accepted", n, size);
        assert_int_equal(st, ST_FORMAT);
        assert_non_null(strstr(e.msg, cut));   /* the message names the file */
        unlink(cut);
    }
    free(bytes);
    unlink(path);
}

static void a_bad_description_is_refused_and_the_first_error_sticks(void **state) {
    char path[64];
    temp_path(path, sizeof path);
    GgufWriter w;
    gguf_w_init(&w, path);
    assert_int_equal(gguf_w_add_u32(&w, "llama.block_count", 6), ST_OK);
    assert_int_equal(gguf_w_add_u32(&w, "llama.block_count", 7), ST_ARG);
    int64_t ne[2] = {32, 2};
    float data[64] = {0};
    /* Later adds, even valid ones, report the first failure and do nothing. */
    assert_int_equal(gguf_w_add_tensor(&w, "ok.weight", 2, ne, DT_F32, data), ST_ARG);
    assert_int_equal(w.n_tensors, 0);
    Err e = {{0}};
    assert_int_equal(gguf_w_write(&w, &e), ST_ARG);
    assert_non_null(strstr(e.msg, path));
    assert_non_null(strstr(e.msg, "llama.block_count is added twice"));
    assert_false(exists(path));
    assert_false(part_exists(path));
    gguf_w_free(&w);
}

static void each_kind_of_bad_tensor_is_refused_with_its_reason(void **state) {
    static const char long_name[] =
        "a.name.that.is.longer.than.the.sixty.four.bytes.the.gguf.format.allows";
    int64_t ne_ok[2] = {32, 2}, ne_33[2] = {33, 2}, ne_zero[2] = {32, 0}, ne_huge[2] = {1 << 21, 1 << 20};
    float data[64] = {0};
    struct {
        const char *name;
        int n_dims;
        const int64_t *ne;
        DType type;
        const char *reason;
    } cases[] = {
        {"q.weight", 2, ne_33, DT_Q8_0, "not a whole number of Q8_0 blocks"},
        {long_name, 2, ne_ok, DT_F32, "want 1..64"},
        {"", 2, ne_ok, DT_F32, "want 1..64"},
        {"no.dims", 0, ne_ok, DT_F32, "0 dimensions"},
        {"five.dims", 5, ne_ok, DT_F32, "5 dimensions"},
        {"empty.dim", 2, ne_zero, DT_F32, "dimension 1 = 0"},
        {"too.big", 2, ne_huge, DT_F32, "at most 2^40"},
        {"odd.type", 2, ne_ok, (DType)4, "unsupported type 4"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        GgufWriter w;
        gguf_w_init(&w, "/tmp/never-written.gguf");
        assert_int_equal(gguf_w_add_tensor(&w, cases[k].name, cases[k].n_dims, cases[k].ne,
                                           cases[k].type, data), ST_ARG);
        if (!strstr(w.err.msg, cases[k].reason))
            fail_msg("case %zu: '%s' does not say '%s'", k, w.err.msg, cases[k].reason);
        gguf_w_free(&w);
    }
    /* Duplicates, the reserved key, and a tensor without a source. */
    GgufWriter w;
    gguf_w_init(&w, "/tmp/never-written.gguf");
    assert_int_equal(gguf_w_add_tensor(&w, "t", 2, ne_ok, DT_F32, data), ST_OK);
    assert_int_equal(gguf_w_add_tensor(&w, "t", 2, ne_ok, DT_F32, data), ST_ARG);
    assert_non_null(strstr(w.err.msg, "tensor 't' is added twice"));
    gguf_w_free(&w);
    gguf_w_init(&w, "/tmp/never-written.gguf");
    assert_int_equal(gguf_w_add_u32(&w, "general.alignment", 64), ST_ARG);
    assert_non_null(strstr(w.err.msg, "set by the writer"));
    gguf_w_free(&w);
    gguf_w_init(&w, "/tmp/never-written.gguf");
    assert_int_equal(gguf_w_add_tensor(&w, "t", 2, ne_ok, DT_F32, NULL), ST_ARG);
    assert_non_null(strstr(w.err.msg, "has no data"));
    gguf_w_free(&w);
}

static void an_unwritable_path_is_an_io_error_naming_the_file(void **state) {
    GgufWriter w;
    gguf_w_init(&w, "/nonexistent-dir/model.gguf");
    assert_int_equal(gguf_w_add_u32(&w, "x", 1), ST_OK);
    Err e = {{0}};
    assert_int_equal(gguf_w_write(&w, &e), ST_IO);
    assert_non_null(strstr(e.msg, "/nonexistent-dir/model.gguf.part: cannot create"));
    gguf_w_free(&w);
}

static void a_failing_row_callback_abandons_the_file_and_says_where(void **state) {
    char path[64];
    temp_path(path, sizeof path);
    GgufWriter w;
    gguf_w_init(&w, path);
    RowGen gen = {0, 0, 0, 2};
    int64_t ne[2] = {64, 4};
    assert_int_equal(gguf_w_add_tensor_rows(&w, "blk.3.ffn_up.weight", 2, ne, DT_Q8_0, gen_rows, &gen),
                     ST_OK);
    Err e = {{0}};
    assert_int_equal(gguf_w_write(&w, &e), ST_IO);
    assert_non_null(strstr(e.msg, "tensor 'blk.3.ffn_up.weight' row 2: the source went away"));
    assert_false(exists(path));
    assert_false(part_exists(path));
    gguf_w_free(&w);
}

/* Describe and write a small file; the status of the first failure. */
static int describe_and_write(const char *path, const float *data, RowGen *gen) {
    GgufWriter w;
    gguf_w_init(&w, path);
    const char *toks[] = {"a", "b", "c"};
    const float sc[] = {0, 1, 2};
    gguf_w_add_str(&w, "general.architecture", "llama");
    gguf_w_add_str_array(&w, "tokenizer.ggml.tokens", toks, 3);
    gguf_w_add_f32_array(&w, "tokenizer.ggml.scores", sc, 3);
    int64_t ne[2] = {32, 2};
    for (int k = 0; k < 20; k++) {   /* enough tensors to grow the table twice */
        char name[32];
        snprintf(name, sizeof name, "t%d", k);
        if (k % 2) gguf_w_add_tensor(&w, name, 2, ne, DT_F32, data);
        else gguf_w_add_tensor_rows(&w, name, 2, ne, DT_Q8_0, gen_rows, gen);
    }
    Err e;
    int st = gguf_w_write(&w, &e);
    gguf_w_free(&w);
    return st;
}

static void failed_allocations_are_reported_and_leak_nothing(void **state) {
    char path[64];
    temp_path(path, sizeof path);
    float data[64] = {0};
    size_t live = mem_stats().live_count;
    int failures = 0, n = 1;
    for (;; n++) {
        RowGen gen = {0, 0, 0, -1};
        mem_fail_after(n);
        int st = describe_and_write(path, data, &gen);
        mem_fail_after(0);
        assert_int_equal(mem_stats().live_count, live);
        if (st == ST_OK) break;
        assert_int_equal(st, ST_NOMEM);
        assert_false(exists(path));
        failures++;
        assert_true(n < 200);
    }
    assert_true(failures > 5);
    assert_true(exists(path));
    unlink(path);
    GgufWriter zeroed = {0};
    gguf_w_free(&zeroed);   /* accepts a writer that was never used */
}

int main(int argc, char **argv) {
    select_tests(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(metadata_of_every_kind_reads_back_with_its_type_and_value),
        cmocka_unit_test(tensors_of_every_type_read_back_byte_for_byte_at_aligned_offsets),
        cmocka_unit_test(an_empty_description_still_makes_a_file_the_reader_opens),
        cmocka_unit_test(the_reader_refuses_a_written_file_cut_short_at_any_length),
        cmocka_unit_test(a_bad_description_is_refused_and_the_first_error_sticks),
        cmocka_unit_test(each_kind_of_bad_tensor_is_refused_with_its_reason),
        cmocka_unit_test(an_unwritable_path_is_an_io_error_naming_the_file),
        cmocka_unit_test(a_failing_row_callback_abandons_the_file_and_says_where),
        cmocka_unit_test(failed_allocations_are_reported_and_leak_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
