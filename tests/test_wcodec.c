/* test_wcodec.c - coded weight tensors (src/codec/wcodec.c) and the low-memory
 * decode pipeline (src/codec/lowmem.c).
 *
 * The fields a float is split into are checked against an independent
 * extraction written here from the IEEE layouts (not the codec's own split),
 * round trips cover every type, odd shapes and group sizes, both decoders and
 * threads; ranges, damaged blobs, and the pipeline's buffers under the order
 * the forward pass asks in and under orders it does not. */
#include "codec/lowmem.h"
#include "base/mem.h"
#include "kernels/ops.h"
#include "testutil.h"
#include "codec/wcodec.h"
#include <math.h>

static uint64_t next_random(uint64_t *s) {   /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double gaussian(uint64_t *s) {
    double u1 = ((double)(next_random(s) >> 11) + 0.5) * 0x1p-53;
    double u2 = ((double)(next_random(s) >> 11) + 0.5) * 0x1p-53;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* n weights like a trained matrix's (Gaussian, sigma 0.02), in type, with a
 * few special values planted in the floats: zeros of both signs, infinities,
 * a NaN, subnormals. Returns the byte count. */
static size_t make_tensor(uint8_t *buf, int type, uint64_t n, uint64_t seed) {
    uint64_t s = seed;
    float row[32];
    size_t at = 0;
    for (uint64_t i = 0; i < n; i += 32) {
        for (int j = 0; j < 32; j++) row[j] = (float)(gaussian(&s) * 0.02);
        if (i == 0) {
            row[1] = -0.0f, row[2] = INFINITY, row[3] = -INFINITY, row[4] = 1e-40f, row[5] = 0.0f;
            if (type != DT_Q8_0) row[6] = NAN;
        }
        int m = n - i < 32 ? (int)(n - i) : 32;
        if (type == DT_Q8_0) {
            row[2] = row[3] = 0;   /* Q8_0 scales must stay finite */
            quantize_row_q8_0_ref((BlockQ8_0 *)(buf + at), row, 32);
            at += sizeof(BlockQ8_0);
            continue;
        }
        for (int j = 0; j < m; j++) {
            if (type == DT_F32) memcpy(buf + at + 4 * j, &row[j], 4);
            else if (type == DT_F16) { uint16_t h = fp32_to_fp16(row[j]); memcpy(buf + at + 2 * j, &h, 2); }
            else { uint16_t h = fp32_to_bf16(row[j]); memcpy(buf + at + 2 * j, &h, 2); }
        }
        at += (size_t)m * (type == DT_F32 ? 4 : 2);
    }
    return at;
}

static int bytes_per(int type) { return type == DT_F32 ? 4 : 2; }

/* A matrix of make_tensor's weights (ne1 rows of ne0), encoded in groups of
 * `group` weights and opened. */
typedef struct {
    uint8_t *src, *blob;
    size_t nbytes, len;
    WcTensor t;
} Coded;

static void coded_make(Coded *c, int type, uint64_t ne0, uint64_t ne1, uint32_t group, uint64_t seed) {
    uint64_t ne[2] = {ne0, ne1};
    c->src = malloc((size_t)(ne0 * ne1) * 4 + 64);
    c->nbytes = make_tensor(c->src, type, ne0 * ne1, seed);
    Err e;
    if (wc_encode(c->src, c->nbytes, type, 2, ne, group, NULL, &c->blob, &c->len, NULL, NULL, &e) != ST_OK)
        fail_msg("type %d shape %llux%llu group %u: %s", type, (unsigned long long)ne0, (unsigned long long)ne1,
                 group, e.msg);
    if (wc_open(&c->t, c->blob, c->len, "test", &e) != ST_OK) fail_msg("its own blob refused: %s", e.msg);
}

static void coded_free(Coded *c) {
    wc_close(&c->t);
    mem_free(c->blob);
    free(c->src);
}

/* Encode, open, decode whole (plain and fast, 1 and 3 threads): the bytes back. */
static void round_trip(int type, uint64_t ne0, uint64_t ne1, uint32_t group, uint64_t seed) {
    Coded c;
    coded_make(&c, type, ne0, ne1, group, seed);
    const WcTensor t = c.t;
    const uint8_t *src = c.src;
    size_t nbytes = c.nbytes;
    Err e;
    assert_int_equal(t.type, type);
    assert_true(t.ne[0] == ne0 && t.ne[1] == ne1 && t.nbytes == nbytes);
    uint8_t *out = malloc(nbytes), *scratch = malloc(wc_scratch_bytes(&t));
    RansIsa isas[2] = {RANS_PLAIN, rans_best_isa()};
    for (int k = 0; k < 2; k++) {
        memset(out, 0xEE, nbytes);
        assert_int_equal(wc_decode(&t, out, nbytes, scratch, isas[k], &e), ST_OK);
        if (memcmp(out, src, nbytes))
            fail_msg("type %d shape %llux%llu group %u seed %llu isa %d: decode differs", type,
                     (unsigned long long)ne0, (unsigned long long)ne1, group, (unsigned long long)seed, k);
        memset(out, 0xEE, nbytes);
        assert_int_equal(wc_decode_parallel(&t, out, nbytes, isas[k], 3, &e), ST_OK);
        assert_memory_equal(out, src, nbytes);
    }
    free(scratch);
    free(out);
    coded_free(&c);
}

static void round_trips_every_type_shape_and_group(void **state) {
    static const int types[] = {DT_F32, DT_F16, DT_BF16, DT_Q8_0};
    static const uint64_t shapes[][2] = {{32, 1}, {64, 3}, {96, 70}, {256, 300}, {4096, 40}};
    static const uint32_t groups[] = {32, 96, 4096, 65536};
    uint64_t seed = 1;
    for (size_t a = 0; a < 4; a++)
        for (size_t b = 0; b < sizeof shapes / sizeof shapes[0]; b++)
            for (size_t c = 0; c < sizeof groups / sizeof groups[0]; c++)
                round_trip(types[a], shapes[b][0], shapes[b][1], groups[c], seed++);
    /* Float rows need not be whole blocks */
    round_trip(DT_BF16, 33, 7, 64, seed++);
    round_trip(DT_F32, 5, 3, 32, seed++);
}

/* Any other type passes through as one raw plane, any length. */
static void other_types_are_kept_as_bytes(void **state) {
    uint8_t src[1001];
    uint64_t s = 9;
    for (size_t i = 0; i < sizeof src; i++) src[i] = (uint8_t)next_random(&s);
    uint64_t ne[2] = {1001, 1};
    uint8_t *blob;
    size_t len;
    WcPlane pl[WC_MAX_PLANES];
    int np = 0;
    Err e;
    assert_int_equal(wc_encode(src, sizeof src, 12, 2, ne, 64, NULL, &blob, &len, pl, &np, &e), ST_OK);
    assert_int_equal(np, 1);
    assert_int_equal(pl[0].coded, 0);   /* random bytes do not shrink */
    WcTensor t;
    assert_int_equal(wc_open(&t, blob, len, "raw", &e), ST_OK);
    assert_int_equal(t.layout, WC_LAYOUT_RAW);
    uint8_t out[1001], scratch[16];
    assert_int_equal(wc_decode(&t, out, sizeof out, scratch, RANS_PLAIN, &e), ST_OK);
    assert_memory_equal(out, src, sizeof src);
    wc_close(&t);
    mem_free(blob);
}

/* The planes hold the fields the layouts define: the exponent plane of BF16
 * is bits 7..14 of each weight, F16's bits 10..14, F32's bits 23..30, and
 * Q8_0's second plane the int8 values. Extracted here with shifts on the
 * original bytes, and compared with the decoded first plane's stream. */
static void planes_hold_the_fields_of_each_layout(void **state) {
    static const int types[] = {DT_F32, DT_F16, DT_BF16, DT_Q8_0};
    for (size_t a = 0; a < 4; a++) {
        int type = types[a];
        uint64_t n = 64 * 64;
        Coded c;
        coded_make(&c, type, 64, 64, 1024, 77 + a);
        const WcTensor *t = &c.t;
        const uint8_t *src = c.src;
        Err e;
        int p = type == DT_Q8_0 ? 1 : 0;   /* the plane whose field we extract */
        assert_true(t->plane[p].bytes == n);
        uint8_t *plane = malloc(n);
        if (t->plane[p].coded) {
            assert_int_equal(rans_decode(&t->rs[p], plane, n, RANS_PLAIN, 1, &e), ST_OK);
        } else {
            memcpy(plane, t->data[p], n);
        }
        for (uint64_t i = 0; i < n; i++) {
            uint32_t want;
            if (type == DT_Q8_0) {
                want = src[i / 32 * sizeof(BlockQ8_0) + 2 + i % 32];
            } else if (type == DT_F32) {
                uint32_t w;
                memcpy(&w, src + 4 * i, 4);
                want = (w >> 23) & 0xFF;
            } else {
                uint16_t h;
                memcpy(&h, src + 2 * i, 2);
                want = type == DT_F16 ? (h >> 10) & 0x1F : (h >> 7) & 0xFF;
            }
            if (plane[i] != want) fail_msg("type %d weight %llu: field %u, plane %u", type, (unsigned long long)i, want, plane[i]);
        }
        free(plane);
        coded_free(&c);
    }
}

/* The skew rANS is there for: Gaussian BF16 weights' exponent plane costs
 * within 0.5% of its order-0 entropy (the symbols alone: the chunks' initial
 * states and the tables are counted apart), and the blob is at most 70% of
 * the tensor. */
static void exponent_plane_codes_within_half_a_percent_of_entropy(void **state) {
    uint64_t n = 1 << 20, ne[2] = {1024, 1024};
    uint8_t *src = malloc(n * 2);
    size_t nbytes = make_tensor(src, DT_BF16, n, 5);
    uint8_t *blob;
    size_t len;
    WcPlane pl[WC_MAX_PLANES];
    int np;
    Err e;
    assert_int_equal(wc_encode(src, nbytes, DT_BF16, 2, ne, 0, NULL, &blob, &len, pl, &np, &e), ST_OK);
    assert_int_equal(np, 2);
    assert_int_equal(pl[0].coded, 1);
    assert_int_equal(pl[1].coded, 0);   /* sign and mantissa are close to random */
    double symbols_bits = 8.0 * (double)(pl[0].sizes.payload - pl[0].sizes.states);
    double entropy_bits = pl[0].entropy * (double)pl[0].bytes;
    print_message("exponent plane: entropy %.4f bits/byte, symbols %.4f (%+.3f%%), blob %.4f of the tensor\n",
                  pl[0].entropy, symbols_bits / (double)pl[0].bytes, 100 * (symbols_bits / entropy_bits - 1),
                  (double)len / (double)nbytes);
    assert_true(symbols_bits <= 1.005 * entropy_bits);
    assert_true(symbols_bits >= entropy_bits * 0.999);   /* below the entropy would be a bug in the count */
    assert_true((double)len <= 0.70 * (double)nbytes);
    mem_free(blob);
    free(src);
}

/* Ranges decode exactly the bytes asked for, wherever they start and end;
 * a range that cuts a value in two is refused. */
static void ranges_decode_exactly_their_bytes(void **state) {
    static const int types[] = {DT_F32, DT_BF16, DT_Q8_0};
    for (size_t a = 0; a < 3; a++) {
        int type = types[a];
        Coded c;
        coded_make(&c, type, 96, 50, 256, 31 + a);
        const WcTensor *t = &c.t;
        const uint8_t *src = c.src;
        size_t nbytes = c.nbytes;
        Err e;
        uint8_t *scratch = malloc(wc_scratch_bytes(t));
        size_t step = type == DT_Q8_0 ? sizeof(BlockQ8_0) : (size_t)bytes_per(type);
        uint64_t s = 3;
        for (int k = 0; k < 200; k++) {
            size_t units = nbytes / step;
            size_t u0 = next_random(&s) % units, u1 = u0 + next_random(&s) % (units - u0 + 1);
            size_t from = u0 * step, n_b = (u1 - u0) * step;
            uint8_t *out = malloc(n_b ? n_b : 1);
            assert_int_equal(wc_decode_range(t, from, n_b, out, scratch, rans_best_isa(), &e), ST_OK);
            assert_memory_equal(out, src + from, n_b);
            free(out);
        }
        uint8_t one[64];
        assert_int_equal(wc_decode_range(t, 1, step, one, scratch, RANS_PLAIN, &e), ST_ARG);
        assert_non_null(strstr(e.msg, "in two"));
        assert_int_equal(wc_decode_range(t, nbytes - step, 2 * step, one, scratch, RANS_PLAIN, &e), ST_ARG);
        free(scratch);
        coded_free(&c);
    }
}

/* A blob with any header byte changed is refused at open (the CRC, or the
 * field itself); a truncated one too; a damaged coded payload is refused by
 * the decoder, never decoded into other bytes without a word. */
static void damaged_blobs_are_refused(void **state) {
    uint64_t n = 64 * 64, ne[2] = {64, 64};
    uint8_t *src = malloc(n * 2);
    size_t nbytes = make_tensor(src, DT_BF16, n, 11);
    uint8_t *blob;
    size_t len;
    Err e;
    assert_int_equal(wc_encode(src, nbytes, DT_BF16, 2, ne, 512, NULL, &blob, &len, NULL, NULL, &e), ST_OK);
    WcTensor t;
    assert_int_equal(wc_open(&t, blob, len, "good", &e), ST_OK);
    size_t header = t.header;
    wc_close(&t);
    for (size_t i = 0; i < header; i++) {
        uint8_t *bad = malloc(len);   /* exactly its size: ASan sees any read past it */
        memcpy(bad, blob, len);
        bad[i] ^= 0x40;
        assert_int_equal(wc_open(&t, bad, len, "bad", &e), ST_FORMAT);
        free(bad);
    }
    for (size_t cut = 0; cut < len; cut += 97) {
        uint8_t *bad = malloc(cut ? cut : 1);
        memcpy(bad, blob, cut);
        assert_int_equal(wc_open(&t, bad, cut, "short", &e), ST_FORMAT);
        free(bad);
    }
    /* every byte of the coded exponent plane, one at a time */
    assert_int_equal(wc_open(&t, blob, len, "good", &e), ST_OK);
    size_t from = (size_t)(t.data[0] - blob) + t.plane[0].sizes.header, to = from + t.plane[0].sizes.payload;
    wc_close(&t);
    uint8_t *out = malloc(nbytes), *scratch = NULL;
    int refused = 0, same = 0;
    for (size_t i = from; i < to; i++) {
        uint8_t *bad = malloc(len);
        memcpy(bad, blob, len);
        bad[i] ^= 0x01;
        assert_int_equal(wc_open(&t, bad, len, "payload", &e), ST_OK);   /* the header is intact */
        scratch = realloc(scratch, wc_scratch_bytes(&t));
        int rc = wc_decode(&t, out, nbytes, scratch, rans_best_isa(), &e);
        if (rc == ST_FORMAT) refused++;
        else if (rc == ST_OK && memcmp(out, src, nbytes) == 0) same++;
        else fail_msg("byte %zu of the payload changed: decode returned %d with other bytes", i, rc);
        wc_close(&t);
        free(bad);
    }
    print_message("%d of %zu one-bit payload errors refused, %d decoded to the same bytes\n", refused, to - from,
                  same);
    assert_true(refused > 0);
    free(scratch);
    free(out);
    mem_free(blob);
    free(src);
}

/* wc_encode refuses what it cannot describe. */
static void bad_arguments_are_refused(void **state) {
    uint8_t buf[64 * 4] = {0};
    uint64_t ne[2] = {64, 1};
    uint8_t *blob;
    size_t len;
    Err e;
    assert_int_equal(wc_encode(buf, 100, DT_F32, 2, ne, 0, NULL, &blob, &len, NULL, NULL, &e), ST_ARG);
    assert_int_equal(wc_encode(buf, 256, DT_F32, 2, ne, 33, NULL, &blob, &len, NULL, NULL, &e), ST_ARG);
    assert_int_equal(wc_encode(buf, 256, DT_F32, 0, ne, 0, NULL, &blob, &len, NULL, NULL, &e), ST_ARG);
    uint64_t odd[2] = {40, 1};
    assert_int_equal(wc_encode(buf, 34, DT_Q8_0, 2, odd, 0, NULL, &blob, &len, NULL, NULL, &e), ST_ARG);
}

/* ------------------------------------------------------------ the pipeline */

/* Three matrices of different types, rows of 128, groups of 1024. */
static void three_tensors(Coded x[3]) {
    static const int types[] = {DT_BF16, DT_Q8_0, DT_F16};
    for (int i = 0; i < 3; i++) coded_make(&x[i], types[i], 128, 40 + 8 * (uint64_t)i, 1024, 100 + (uint64_t)i);
}

static void three_free(Coded x[3]) {
    for (int i = 0; i < 3; i++) coded_free(&x[i]);
}

/* Units asked for in order, round after round (the forward pass), and out of
 * order (a caller that skips): every acquire gives exactly the unit's bytes,
 * threaded or not; in order, the helper decodes all but the first. */
static void pipeline_gives_each_unit_its_bytes(void **state) {
    Coded x[3];
    three_tensors(x);
    /* unit 0: tensors 0 and 1 whole; unit 1: tensor 2; unit 2: rows 8..24 of tensor 0 */
    size_t row0 = 128 * 2;
    LmUnit units[3] = {{2, {{&x[0].t, 0, x[0].nbytes}, {&x[1].t, 0, x[1].nbytes}}},
                       {1, {{&x[2].t, 0, x[2].nbytes}}},
                       {1, {{&x[0].t, 8 * row0, 16 * row0}}}};
    const uint8_t *want[3][2] = {{x[0].src, x[1].src}, {x[2].src, NULL}, {x[0].src + 8 * row0, NULL}};
    size_t want_n[3][2] = {{x[0].nbytes, x[1].nbytes}, {x[2].nbytes, 0}, {16 * row0, 0}};
    static const int helpers[] = {0, 1, 3};   /* none (the caller decodes), one thread, three */
    for (int h = 0; h < 3; h++) {
        int threaded = helpers[h];
        LowMem *lm;
        Err e;
        assert_int_equal(lm_create(&lm, units, 3, rans_best_isa(), threaded, 1, &e), ST_OK);
        static const int order[] = {0, 1, 2, 0, 1, 2, 0, 1, 2, 2, 0, 2, 1, 1, 0};
        for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
            int u = order[k];
            const void *ptr[LM_MAX_PARTS];
            assert_int_equal(lm_acquire(lm, u, ptr, &e), ST_OK);
            for (int i = 0; i < units[u].n; i++) {
                assert_int_equal((uintptr_t)ptr[i] % 64, 0);
                if (memcmp(ptr[i], want[u][i], want_n[u][i]))
                    fail_msg("threaded %d, acquire %zu (unit %d) part %d: wrong bytes", threaded, k, u, i);
            }
        }
        LmStats s = lm_stats(lm);
        print_message("helper threads %d: %llu decodes, %llu by the caller, buffers %zu bytes\n", threaded,
                      (unsigned long long)s.decodes, (unsigned long long)s.misses, s.buffer_bytes);
        assert_true(s.buffer_bytes >= 2 * (x[0].nbytes + x[1].nbytes));
        if (threaded) assert_true(s.misses < s.decodes);   /* the in-order rounds were prefetched */
        else assert_true(s.misses == s.decodes);
        assert_int_equal(lm_acquire(lm, 3, NULL, &e), ST_ARG);
        lm_free(lm);
    }
    three_free(x);
}

/* A payload damaged after lm_create checked every unit is reported by
 * lm_acquire, from the helper's threads as from the caller, for that unit
 * alone and for as long as it is damaged: the other unit still decodes, and
 * once the bytes are back the damaged one decodes again (nothing is stopped
 * for good). Damaged before, lm_create refuses it. */
static void pipeline_reports_a_damaged_unit_until_it_is_repaired(void **state) {
    Coded x[3];
    three_tensors(x);
    WcTensor *t = &x[0].t;
    assert_true(t->plane[0].coded);
    uint8_t *payload = (uint8_t *)t->data[0] + t->plane[0].sizes.header;
    LmUnit units[2] = {{1, {{&x[1].t, 0, x[1].nbytes}}}, {1, {{t, 0, x[0].nbytes}}}};
    for (int threaded = 0; threaded < 3; threaded++) {   /* no helper, one thread, two */
        LowMem *lm;
        Err e;
        assert_int_equal(lm_create(&lm, units, 2, RANS_PLAIN, threaded, 1, &e), ST_OK);
        for (size_t i = 0; i < 8; i++) payload[i + 40] ^= 0x5A;   /* after the load's check */
        const void *ptr[LM_MAX_PARTS];
        for (int round = 0; round < 2; round++) {
            assert_int_equal(lm_acquire(lm, 0, ptr, &e), ST_OK);   /* the helper starts on unit 1 */
            assert_memory_equal(ptr[0], x[1].src, x[1].nbytes);
            e.msg[0] = 0;
            assert_int_equal(lm_acquire(lm, 1, ptr, &e), ST_FORMAT);
            assert_non_null(strstr(e.msg, "chunk"));
        }
        for (size_t i = 0; i < 8; i++) payload[i + 40] ^= 0x5A;   /* repaired */
        assert_int_equal(lm_acquire(lm, 0, ptr, &e), ST_OK);
        assert_int_equal(lm_acquire(lm, 1, ptr, &e), ST_OK);
        assert_memory_equal(ptr[0], x[0].src, x[0].nbytes);
        lm_free(lm);
        /* and with verify on, the damage is found at creation */
        for (size_t i = 0; i < 8; i++) payload[i + 40] ^= 0x5A;
        assert_int_equal(lm_create(&lm, units, 2, RANS_PLAIN, threaded, 1, &e), ST_FORMAT);
        for (size_t i = 0; i < 8; i++) payload[i + 40] ^= 0x5A;
    }
    three_free(x);
}

int main(int argc, char **argv) {
    select_tests(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trips_every_type_shape_and_group),
        cmocka_unit_test(other_types_are_kept_as_bytes),
        cmocka_unit_test(planes_hold_the_fields_of_each_layout),
        cmocka_unit_test(exponent_plane_codes_within_half_a_percent_of_entropy),
        cmocka_unit_test(ranges_decode_exactly_their_bytes),
        cmocka_unit_test(damaged_blobs_are_refused),
        cmocka_unit_test(bad_arguments_are_refused),
        cmocka_unit_test(pipeline_gives_each_unit_its_bytes),
        cmocka_unit_test(pipeline_reports_a_damaged_unit_until_it_is_repaired),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
