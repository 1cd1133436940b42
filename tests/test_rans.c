/* test_rans.c - the rANS codec: normalisation, round trips, the two decoders,
 * compression against the entropy, damaged streams.
 *
 * Every stream under test lives in a buffer of exactly its size, and every
 * output buffer is exactly as long as the output, so AddressSanitizer stops
 * the first byte read or written past either end. Inputs come from a seeded
 * generator: a failure names its seed and parameters and repeats. */
#include "base/mem.h"
#include "rans.h"
#include "testutil.h"
#include <math.h>

static const int ALL_STATES[] = {1, 2, 4, 8, 16, 32};
enum { N_COUNTS = sizeof ALL_STATES / sizeof ALL_STATES[0] };

/* ------------------------------------------------------------ inputs */

static uint64_t next_random(uint64_t *s) {   /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double uniform01(uint64_t *s) { return ((double)(next_random(s) >> 11) + 0.5) * 0x1p-53; }

typedef enum { IN_RANDOM, IN_GEOMETRIC, IN_GAUSSIAN, IN_CONSTANT, IN_TWO, IN_ALL256, IN_KINDS } InputKind;
static const char *KIND_NAME[IN_KINDS] = {"random", "geometric", "gaussian", "constant", "two-symbol",
                                          "all-256"};

/* n bytes of a kind: uniform bytes; a geometric law (P(k) ~ 0.7^k, most mass
 * on a few values, long thin tail); Gaussian int8 (sigma 20, as two's
 * complement bytes); one value; two values at 9:1; every value 0..255 once
 * each and then uniformly. */
static void fill(uint8_t *buf, size_t n, InputKind kind, uint64_t seed) {
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        switch (kind) {
        case IN_RANDOM: buf[i] = (uint8_t)next_random(&s); break;
        case IN_GEOMETRIC: {
            double k = floor(log(uniform01(&s)) / log(0.7));
            buf[i] = (uint8_t)(k > 255 ? 255 : k);
            break;
        }
        case IN_GAUSSIAN: {
            double g = sqrt(-2.0 * log(uniform01(&s))) * cos(2 * M_PI * uniform01(&s)) * 20.0;
            g = g < -128 ? -128 : g > 127 ? 127 : g;
            buf[i] = (uint8_t)(int8_t)lrint(g);
            break;
        }
        case IN_CONSTANT: buf[i] = 0xA5; break;
        case IN_TWO: buf[i] = next_random(&s) % 10 == 0 ? 200 : 3; break;
        case IN_ALL256: buf[i] = i < 256 ? (uint8_t)(i * 7 + 1) : (uint8_t)next_random(&s); break;
        default: fail();
        }
    }
}

/* A copy in a buffer of exactly n bytes (malloc(0) may return NULL: keep 1). */
static uint8_t *exact_copy(const uint8_t *p, size_t n) {
    uint8_t *c = malloc(n ? n : 1);
    assert_non_null(c);
    if (n) memcpy(c, p, n);
    return c;
}

static uint8_t *encode_or_fail(const uint8_t *src, size_t n, RansParams p, size_t *len, RansSizes *sizes) {
    uint8_t *enc;
    Err e;
    int st = rans_encode_alloc(src, n, &p, &enc, len, sizes, &e);
    if (st) fail_msg("encode n %zu bits %d N %d C %u: %s", n, p.bits, p.n_states, p.chunk_size, e.msg);
    return enc;
}

/* Decode with isa into a buffer of exactly n bytes and compare with want. */
static void expect_decodes_to(const uint8_t *enc, size_t len, const uint8_t *want, size_t n, RansIsa isa,
                              int threads, const char *what) {
    uint8_t *out = malloc(n ? n : 1);
    size_t got = (size_t)-1;
    Err e;
    int st = rans_decode_all(enc, len, out, n, &got, isa, threads, &e);
    if (st) fail_msg("%s (%s): %s", what, rans_isa_name(isa), e.msg);
    assert_int_equal(got, n);
    for (size_t i = 0; i < n; i++)
        if (out[i] != want[i])
            fail_msg("%s (%s): byte %zu is %u, want %u", what, rans_isa_name(isa), i, out[i], want[i]);
    free(out);
}

/* The decoders a test should run: plain always, AVX-512 where the CPU has it. */
static int n_isas(RansIsa isas[2]) {
    isas[0] = RANS_PLAIN;
    if (rans_best_isa() == RANS_AVX512) {
        isas[1] = RANS_AVX512;
        return 2;
    }
    print_message("[  NOTE    ] no AVX-512 on this CPU: only the plain decoder is tested\n");
    return 1;
}

/* zlib's CRC-32, written again here so tests can forge consistent headers. */
static uint32_t crc32_ref(const uint8_t *p, size_t n) {
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int b = 0; b < 8; b++) crc = crc & 1 ? 0xEDB88320u ^ (crc >> 1) : crc >> 1;
    }
    return ~crc;
}
/* rans_crc32 (eight bytes a step) against the bit-at-a-time definition, at
 * every length 0..300 and every start 0..7, and zlib's check value. */
static void rans_crc32_matches_the_definition_at_every_length_and_alignment(void **state) {
    (void)state;
    uint8_t buf[320];
    for (int i = 0; i < 320; i++) buf[i] = (uint8_t)(i * 151 + 7);
    for (int at = 0; at < 8; at++)
        for (size_t n = 0; n <= 300; n++) assert_int_equal(rans_crc32(buf + at, n), crc32_ref(buf + at, n));
    assert_int_equal(rans_crc32((const uint8_t *)"123456789", 9), 0xCBF43926u);
}

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> 8 * i);
}

/* ------------------------------------------------------------ frequencies */

/* A random histogram: how many symbols occur, and how their counts spread,
 * both drawn, from one symbol to all 256 and from flat to very skewed. */
static void random_histogram(uint64_t count[256], uint64_t *s) {
    memset(count, 0, 256 * sizeof count[0]);
    int present = 1 + (int)(next_random(s) % 256);
    int shape = (int)(next_random(s) % 4);
    for (int i = 0; i < present; i++) {
        int sym = (int)(next_random(s) % 256);
        uint64_t c;
        switch (shape) {
        case 0: c = 1 + next_random(s) % 10; break;                   /* flat, small */
        case 1: c = 1 + (next_random(s) >> (8 + next_random(s) % 52)); break;   /* 1 .. 2^56 */
        case 2: c = i == 0 ? 1000000000ull : 1; break;                /* one giant, singletons */
        default: c = (uint64_t)(1e6 * pow(0.6, i)) + 1; break;         /* geometric */
        }
        count[sym] += c;
    }
}

static void rans_normalize_sums_exactly_keeps_present_symbols_and_drops_absent_ones(void **st) {
    uint64_t seed = 1, count[256];
    uint32_t freq[256];
    Err e;
    for (int trial = 0; trial < 1500; trial++) {
        random_histogram(count, &seed);
        int bits = RANS_BITS_MIN + trial % (RANS_BITS_MAX - RANS_BITS_MIN + 1);
        assert_int_equal(rans_normalize(count, bits, freq, &e), ST_OK);
        uint64_t sum = 0;
        for (int s = 0; s < 256; s++) {
            if (count[s] && freq[s] < 1) fail_msg("trial %d: present symbol %d got 0", trial, s);
            if (!count[s] && freq[s]) fail_msg("trial %d: absent symbol %d got %u", trial, s, freq[s]);
            sum += freq[s];
        }
        if (sum != 1u << bits) fail_msg("trial %d: sum %llu, want %u", trial, (unsigned long long)sum, 1u << bits);
    }
    /* the edges: nothing, one symbol, all 256 once, a count near 2^64 */
    memset(count, 0, sizeof count);
    assert_int_equal(rans_normalize(count, 14, freq, &e), ST_OK);
    for (int s = 0; s < 256; s++) assert_int_equal(freq[s], 0);
    count[77] = 5;
    assert_int_equal(rans_normalize(count, 10, freq, &e), ST_OK);
    assert_int_equal(freq[77], 1024);
    for (int s = 0; s < 256; s++) count[s] = 1;
    assert_int_equal(rans_normalize(count, 10, freq, &e), ST_OK);
    for (int s = 0; s < 256; s++) assert_int_equal(freq[s], 4);
    count[0] = UINT64_MAX - 255;
    assert_int_equal(rans_normalize(count, 15, freq, &e), ST_OK);
    assert_int_equal(freq[0], (1u << 15) - 255);
    count[1] = 2;   /* the total no longer fits 64 bits */
    assert_int_equal(rans_normalize(count, 15, freq, &e), ST_ARG);
    assert_int_equal(rans_normalize(count, 9, freq, &e), ST_ARG);
    assert_non_null(strstr(e.msg, "bits 9"));
}

/* No single slot moved from one symbol to another lowers the cost: for a
 * cost that is a sum of convex terms, that makes the table the cheapest. */
static void rans_normalize_finds_a_table_that_no_single_move_improves(void **st) {
    uint64_t seed = 7, count[256];
    uint32_t freq[256];
    Err e;
    for (int trial = 0; trial < 300; trial++) {
        random_histogram(count, &seed);
        int bits = RANS_BITS_MIN + trial % 6;
        assert_int_equal(rans_normalize(count, bits, freq, &e), ST_OK);
        uint64_t sum = 0;   /* a table first: exact, every present symbol codable */
        for (int s = 0; s < 256; s++) {
            if (count[s] && !freq[s]) fail_msg("trial %d: present symbol %d got 0", trial, s);
            sum += freq[s];
        }
        if (sum != 1u << bits) fail_msg("trial %d: sum %llu, want %u", trial, (unsigned long long)sum, 1u << bits);
        double best_gain = 0, least_loss = INFINITY;
        int gi = -1, li = -1;
        for (int s = 0; s < 256; s++) {
            if (!count[s]) continue;
            double g = count[s] * log2((freq[s] + 1.0) / freq[s]);
            if (g > best_gain) best_gain = g, gi = s;
        }
        for (int s = 0; s < 256; s++) {
            if (!count[s] || freq[s] < 2 || s == gi) continue;
            double l = count[s] * log2(freq[s] / (freq[s] - 1.0));
            if (l < least_loss) least_loss = l, li = s;
        }
        if (gi >= 0 && li >= 0 && best_gain > least_loss * (1 + 1e-6) + 1e-6)
            fail_msg("trial %d: moving a slot from %d to %d saves %g bits", trial, li, gi,
                     best_gain - least_loss);
        /* and the table costs little more than the entropy of the counts */
        double total = 0, h = 0;
        for (int s = 0; s < 256; s++) total += (double)count[s];
        for (int s = 0; s < 256; s++)
            if (count[s]) h -= count[s] * log2(count[s] / total);
        assert_true(rans_cost_bits(count, freq, bits) >= h - 1e-6 * h - 1e-9);
    }
}

static void rans_entropy_is_eight_bits_for_uniform_one_for_a_fair_coin_zero_for_constant(void **st) {
    uint8_t buf[1024];
    for (int i = 0; i < 1024; i++) buf[i] = (uint8_t)i;
    assert_true(fabs(rans_entropy(buf, 1024) - 8.0) < 1e-12);
    for (int i = 0; i < 1024; i++) buf[i] = i % 2 ? 'a' : 'b';
    assert_true(fabs(rans_entropy(buf, 1024) - 1.0) < 1e-12);
    memset(buf, 9, sizeof buf);
    assert_true(rans_entropy(buf, 1024) == 0.0);
    assert_true(rans_entropy(buf, 0) == 0.0);
}

/* ------------------------------------------------------------ round trips */

/* Every kind of input, every interleave count, chunks of 1 byte, a few bytes,
 * between, and larger than the input, each decoded by both decoders. */
static void rans_round_trips_every_input_kind_state_count_and_chunk_size_bit_exact(void **st) {
    RansIsa isas[2];
    int ni = n_isas(isas);
    const size_t sizes[] = {0, 1, 31, 33, 1000, 5003};
    const uint32_t chunks[] = {1, 3, 64, 1000, 4096, 1u << 20};
    for (int kind = 0; kind < IN_KINDS; kind++)
        for (size_t zi = 0; zi < sizeof sizes / sizeof sizes[0]; zi++) {
            size_t n = sizes[zi];
            uint8_t *src = malloc(n ? n : 1);
            fill(src, n, (InputKind)kind, 100 + zi);
            for (int si = 0; si < N_COUNTS; si++)
                for (size_t ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++) {
                    if (chunks[ci] == 1 && n > 1000) continue;   /* 5003 one-byte chunks: slow under ASan */
                    RansParams p = {.bits = 10 + (int)((zi + ci + si) % 6), .n_states = ALL_STATES[si],
                                    .chunk_size = chunks[ci]};
                    size_t len;
                    RansSizes z;
                    uint8_t *enc = encode_or_fail(src, n, p, &len, &z);
                    assert_int_equal(z.header + z.payload, len);
                    assert_true(len <= rans_encode_bound(n, &p));
                    char what[160];
                    snprintf(what, sizeof what, "%s n %zu bits %d N %d C %u", KIND_NAME[kind], n, p.bits,
                             p.n_states, p.chunk_size);
                    for (int i = 0; i < ni; i++) expect_decodes_to(enc, len, src, n, isas[i], 1, what);
                    mem_free(enc);
                }
            free(src);
        }
}

/* Long inputs at N = 16 and 32 exercise the vector loop for thousands of
 * groups, then its hand-over to the plain loop near each chunk's end, one
 * chunk at a time and two in lockstep (chunks of different sizes: 8 of them,
 * the last shorter); the two decoders must agree byte for byte. */
static void rans_fast_decoder_equals_plain_decoder_chunk_by_chunk(void **st) {
    if (rans_best_isa() != RANS_AVX512) {
        print_message("[  SKIP    ] no AVX-512 on this CPU\n");
        skip();
    }
    const size_t n = 300000;
    uint8_t *src = malloc(n), *a = malloc(n), *b = malloc(n);
    for (int kind = 0; kind < IN_KINDS; kind++)
        for (int N = 16; N <= 32; N *= 2)
            /* 10 and 12 take the one-gather packed table (RANS_PACKED_BITS), 13 and 15 the two tables */
            for (int bits = RANS_BITS_MIN; bits <= RANS_BITS_MAX; bits += bits == 10 || bits == 13 ? 2 : 1) {
                fill(src, n, (InputKind)kind, 9000 + (uint64_t)kind * 64 + (uint64_t)N + (uint64_t)bits);
                RansParams p = {.bits = bits, .n_states = N, .chunk_size = 40000 + 17 * (uint32_t)kind};
                size_t len;
                uint8_t *enc = encode_or_fail(src, n, p, &len, NULL);
                RansStream s;
                Err e;
                assert_int_equal(rans_open(&s, enc, len, &e), ST_OK);
                for (uint64_t k = 0; k < s.n_chunks; k++) {
                    size_t at = (size_t)(k * s.chunk_size), cl = rans_chunk_len(&s, k);
                    memset(a + at, 0, cl);
                    memset(b + at, 1, cl);
                    if (rans_decode_chunk(&s, k, a + at, cl, RANS_PLAIN, &e)) fail_msg("plain: %s", e.msg);
                    if (rans_decode_chunk(&s, k, b + at, cl, RANS_AVX512, &e)) fail_msg("avx512: %s", e.msg);
                }
                if (memcmp(a, b, n) != 0 || memcmp(a, src, n) != 0)
                    fail_msg("%s N %d bits %d: decoders disagree", KIND_NAME[kind], N, bits);
                /* the whole stream: two chunks in lockstep, the odd last one alone */
                memset(b, 2, n);
                if (rans_decode(&s, b, n, RANS_AVX512, 1, &e)) fail_msg("avx512 whole: %s", e.msg);
                if (memcmp(a, b, n) != 0) fail_msg("%s N %d bits %d: whole-stream decode differs", KIND_NAME[kind], N, bits);
                rans_close(&s);
                mem_free(enc);
            }
    free(src);
    free(a);
    free(b);
}

static void rans_one_chunk_decodes_alone_into_a_buffer_of_exactly_its_size(void **st) {
    RansIsa isas[2];
    int ni = n_isas(isas);
    const size_t n = 10000;
    uint8_t *src = malloc(n);
    fill(src, n, IN_GEOMETRIC, 5);
    RansParams p = {.bits = 12, .n_states = 16, .chunk_size = 3000};
    size_t len;
    uint8_t *enc = encode_or_fail(src, n, p, &len, NULL);
    RansStream s;
    Err e;
    assert_int_equal(rans_open(&s, enc, len, &e), ST_OK);
    assert_int_equal(s.n_chunks, 4);
    assert_int_equal(rans_chunk_len(&s, 0), 3000);
    assert_int_equal(rans_chunk_len(&s, 3), 1000);
    assert_int_equal(rans_chunk_len(&s, 4), 0);
    for (int i = 0; i < ni; i++)
        for (uint64_t k = 4; k-- > 0;) {   /* last first: no chunk depends on another */
            size_t cl = rans_chunk_len(&s, k);
            uint8_t *out = malloc(cl);
            assert_int_equal(rans_decode_chunk(&s, k, out, cl, isas[i], &e), ST_OK);
            assert_memory_equal(out, src + k * 3000, cl);
            assert_int_equal(rans_decode_chunk(&s, k, out, cl - 1, isas[i], &e), ST_ARG);
            free(out);
        }
    assert_int_equal(rans_decode_chunk(&s, 4, src, n, RANS_PLAIN, &e), ST_ARG);
    rans_close(&s);
    mem_free(enc);
    free(src);
}

static void rans_decoding_on_two_threads_equals_one_thread(void **st) {
    const size_t n = 200000;
    uint8_t *src = malloc(n);
    fill(src, n, IN_GAUSSIAN, 11);
    RansParams p = {.bits = 14, .n_states = 32, .chunk_size = 7000};
    size_t len;
    uint8_t *enc = encode_or_fail(src, n, p, &len, NULL);
    expect_decodes_to(enc, len, src, n, rans_best_isa(), 2, "two threads");
    expect_decodes_to(enc, len, src, n, RANS_PLAIN, 3, "three threads, plain");
    mem_free(enc);
    free(src);
}

/* The stream that notes/rans.md takes apart byte by byte: "abracadabra",
 * 10 bits, one state. If this changes, the notes are wrong. */
static void rans_encodes_the_notes_example_to_the_bytes_it_shows(void **st) {
    static const uint8_t want[86] = {
        0x72, 0x41, 0x4e, 0x53, 0x01, 0x0a, 0x01, 0x00, 0x0b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x01, 0x00, 0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x1e, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xd2, 0x03, 0xba, 0x01, 0x5d, 0x5d, 0xba, 0x01,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x06, 0x00, 0x00, 0x00, 0xa3, 0x7d, 0xc2, 0x9e,
        0xc0, 0xc4, 0x88, 0x2b, 0x8f, 0xbe};
    const char *msg = "abracadabra";
    RansParams p = {.bits = 10, .n_states = 1, .chunk_size = 65536};
    uint8_t buf[256];
    size_t len;
    Err e;
    assert_int_equal(rans_encode((const uint8_t *)msg, 11, &p, buf, sizeof buf, &len, NULL, &e), ST_OK);
    assert_int_equal(len, sizeof want);
    assert_memory_equal(buf, want, sizeof want);
    expect_decodes_to(want, sizeof want, (const uint8_t *)msg, 11, RANS_PLAIN, 1, "notes example");
}

/* ------------------------------------------------------------ sizes and compression */

/* The constant input costs only its states; the empty one only a header. */
static void rans_sizes_add_up_and_degenerate_inputs_cost_only_their_headers(void **st) {
    uint8_t src[5000];
    fill(src, sizeof src, IN_CONSTANT, 0);
    RansParams p = {.bits = 15, .n_states = 8, .chunk_size = 1000};
    size_t len;
    RansSizes z;
    uint8_t *enc = encode_or_fail(src, sizeof src, p, &len, &z);
    assert_int_equal(z.n_chunks, 5);
    assert_int_equal(z.payload, 5 * 4 * 8);   /* states only: freq = M leaves x unchanged */
    assert_int_equal(z.states, z.payload);
    assert_int_equal(z.table, 32 + 3);         /* bitmap + 32768 in three LEB128 bytes */
    assert_int_equal(z.index, 5 * 12);
    assert_int_equal(z.header, 24 + z.table + z.index + 4);
    assert_int_equal(z.total, len);
    RansStream s;
    Err e;
    assert_int_equal(rans_open(&s, enc, len, &e), ST_OK);
    assert_memory_equal(&s.sizes, &z, sizeof z);
    rans_close(&s);
    mem_free(enc);

    enc = encode_or_fail(NULL, 0, rans_default_params(), &len, &z);
    assert_int_equal(len, 24 + 32 + 4);
    assert_int_equal(z.payload, 0);
    assert_int_equal(z.n_chunks, 0);
    uint8_t *copy = exact_copy(enc, len);
    expect_decodes_to(copy, len, NULL, 0, RANS_PLAIN, 1, "empty");
    free(copy);
    mem_free(enc);
}

/* On 1.5 MiB at 14 bits in 128 KiB chunks, the payload (states and bytes,
 * no header) is within 0.5% of n times the order-0 entropy for the data a
 * weight codec meets. Uniform bytes cannot be compressed: the payload is then
 * within 0.5% of n. Each chunk also costs its N states, 4 N bytes that carry
 * only about one byte of information each: on very skewed data (two symbols,
 * 0.47 bits a byte) they alone are about 1.5% of the payload at N = 32, so there
 * the bound holds for the payload without them. */
static void rans_payload_of_large_inputs_is_within_half_a_percent_of_the_entropy(void **st) {
    const size_t n = 3u << 19;
    uint8_t *src = malloc(n);
    const InputKind kinds[] = {IN_GAUSSIAN, IN_GEOMETRIC, IN_RANDOM, IN_ALL256, IN_TWO};
    for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++)
        for (int si = 0; si < N_COUNTS; si += 5) {   /* N = 1 and 32 */
            fill(src, n, kinds[ki], 77 + ki);
            RansParams p = {.bits = 14, .n_states = ALL_STATES[si], .chunk_size = 128u << 10};
            size_t len;
            RansSizes z;
            uint8_t *enc = encode_or_fail(src, n, p, &len, &z);
            double h = rans_entropy(src, n), ideal = h * (double)n / 8.0;
            size_t counted = kinds[ki] == IN_TWO ? z.payload - z.states : z.payload;
            double ratio = (double)counted / ideal;
            print_message("[  INFO    ] %-10s N %2d: entropy %.4f, payload %.4f bits/byte (%+.3f%%), "
                          "without states %+.3f%%, header %zu bytes\n", KIND_NAME[kinds[ki]], p.n_states, h,
                          8.0 * (double)z.payload / (double)n, 100 * ((double)z.payload / ideal - 1),
                          100 * ((double)(z.payload - z.states) / ideal - 1), z.header);
            if (ratio > 1.005)
                fail_msg("%s N %d: %zu payload bytes vs entropy %.0f (ratio %.5f)", KIND_NAME[kinds[ki]],
                         p.n_states, counted, ideal, ratio);
            assert_true((double)z.payload >= ideal);   /* nothing beats the entropy */
            mem_free(enc);
        }
    free(src);
}

/* ------------------------------------------------------------ parameters and memory */

static void rans_refuses_bad_parameters_and_an_output_buffer_too_small(void **st) {
    uint8_t src[100], out[2000];
    fill(src, sizeof src, IN_RANDOM, 3);
    size_t len;
    Err e;
    RansParams bad[] = {{9, 4, 10}, {16, 4, 10}, {12, 3, 10}, {12, 64, 10}, {12, 4, 0},
                        {12, 4, RANS_CHUNK_MAX + 1}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(rans_encode(src, sizeof src, &bad[i], out, sizeof out, &len, NULL, &e), ST_ARG);
        assert_int_equal(rans_encode_bound(sizeof src, &bad[i]), 0);
    }
    RansParams p = {.bits = 12, .n_states = 4, .chunk_size = 30};
    size_t bound = rans_encode_bound(sizeof src, &p);
    assert_true(bound <= sizeof out);
    assert_int_equal(rans_encode(src, sizeof src, &p, out, bound, &len, NULL, &e), ST_OK);
    /* a buffer one byte short of the stream fails cleanly at any size */
    for (size_t cap = 0; cap < len; cap++) {
        uint8_t *small = malloc(cap ? cap : 1);
        size_t l2;
        assert_int_equal(rans_encode(src, sizeof src, &p, small, cap, &l2, NULL, &e), ST_ARG);
        free(small);
    }
    uint8_t *dec = malloc(sizeof src - 1);
    assert_int_equal(rans_decode_all(out, len, dec, sizeof src - 1, &len, RANS_PLAIN, 1, &e), ST_ARG);
    free(dec);
}

/* Opening allocates one block for the tables, decoding nothing, closing frees
 * it; a failed allocation is ST_NOMEM and leaks nothing. */
static void rans_open_allocates_one_block_decoding_none_and_failures_leak_nothing(void **st) {
    const size_t n = 20000;
    uint8_t *src = malloc(n), *out = malloc(n);
    fill(src, n, IN_GAUSSIAN, 4);
    MemStats m0 = mem_stats();
    size_t len;
    uint8_t *enc = encode_or_fail(src, n, rans_default_params(), &len, NULL);
    RansStream s;
    Err e;
    assert_int_equal(rans_open(&s, enc, len, &e), ST_OK);
    MemStats m1 = mem_stats();
    assert_int_equal(m1.live_count, m0.live_count + 2);   /* the stream and the tables */
    assert_int_equal(rans_decode(&s, out, n, rans_best_isa(), 1, &e), ST_OK);
    assert_int_equal(mem_stats().total_count, m1.total_count);
    assert_memory_equal(out, src, n);
    rans_close(&s);
    mem_fail_after(1);
    assert_int_equal(rans_open(&s, enc, len, &e), ST_NOMEM);
    assert_null(s.block_);
    mem_fail_after(1);
    uint8_t *enc2 = NULL;
    assert_int_equal(rans_encode_alloc(src, n, &(RansParams){12, 4, 100}, &enc2, &len, NULL, &e), ST_NOMEM);
    assert_null(enc2);
    mem_fail_after(0);
    mem_free(enc);
    assert_int_equal(mem_stats().live_count, m0.live_count);
    free(src);
    free(out);
}

/* ------------------------------------------------------------ damaged streams */

/* Decode a damaged stream with every decoder; returns 1 when it was refused
 * (ST_FORMAT), 0 when it decoded to n bytes. Anything else fails the test.
 * Both decoders must give the same verdict. */
static int damaged_verdict(const uint8_t *enc, size_t len, size_t n, const char *what) {
    RansIsa isas[2];
    int ni = n_isas(isas), verdict = -1;
    uint8_t *copy = exact_copy(enc, len), *out = malloc(n ? n : 1);
    for (int i = 0; i < ni; i++) {
        size_t got = 0;
        Err e = {{0}};
        int st = rans_decode_all(copy, len, out, n, &got, isas[i], 1, &e);
        if (st != ST_OK && st != ST_FORMAT) fail_msg("%s: status %d (%s)", what, st, e.msg);
        if (st == ST_FORMAT && (!e.msg[0] || strchr(e.msg, '\n'))) fail_msg("%s: message '%s'", what, e.msg);
        if (st == ST_OK) assert_int_equal(got, n);
        int v = st == ST_FORMAT;
        if (verdict >= 0 && v != verdict) fail_msg("%s: the decoders disagree", what);
        verdict = v;
    }
    free(copy);
    free(out);
    return verdict;
}

/* The CRC covers header, table and index: changing any of their bytes to
 * any other value is refused before decoding starts. */
static void rans_refuses_every_change_to_a_header_table_or_index_byte(void **st) {
    uint8_t src[600];
    fill(src, sizeof src, IN_GEOMETRIC, 8);
    RansParams p = {.bits = 11, .n_states = 4, .chunk_size = 100};
    size_t len;
    RansSizes z;
    uint8_t *enc = encode_or_fail(src, sizeof src, p, &len, &z);
    uint8_t *copy = malloc(len);
    for (size_t at = 0; at < z.header; at++)
        for (int x = 1; x < 256; x += 17) {
            memcpy(copy, enc, len);
            copy[at] ^= (uint8_t)x;
            RansStream s;
            Err e;
            int r = rans_open(&s, copy, len, &e);
            if (r != ST_FORMAT) fail_msg("byte %zu ^ 0x%02x: open gave %d", at, x, r);
        }
    /* and every named field is named in the message */
    struct { size_t at; uint8_t v; const char *words; } cases[] = {
        {0, 'R', "magic"}, {4, 2, "version"}, {5, 16, "bits 16"}, {6, 5, "5 states"},
        {7, 1, "reserved"}, {16, 0, "chunk size"}, {20, 3, "table size"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memcpy(copy, enc, len);
        if (cases[i].at == 16) memset(copy + 16, 0, 4);
        else copy[cases[i].at] = cases[i].v;
        RansStream s;
        Err e;
        assert_int_equal(rans_open(&s, copy, len, &e), ST_FORMAT);
        if (!strstr(e.msg, cases[i].words)) fail_msg("want '%s' in '%s'", cases[i].words, e.msg);
    }
    free(copy);
    mem_free(enc);
}

/* A table or index with a valid CRC but wrong contents (what a buggy writer
 * would make) is refused by the checks behind the CRC. */
static void rans_refuses_a_bad_table_or_index_even_with_a_matching_crc(void **st) {
    uint8_t src[400];
    fill(src, sizeof src, IN_TWO, 2);
    RansParams p = {.bits = 10, .n_states = 2, .chunk_size = 150};
    size_t len;
    RansSizes z;
    uint8_t *enc = encode_or_fail(src, sizeof src, p, &len, &z);
    /* The table: a bitmap with symbols 3 and 200, then freq[3] (about 0.9 M:
     * two LEB128 bytes) and freq[200] (one byte). */
    const size_t table = 24, index = 24 + z.table, crc = z.header - 4;
    assert_int_equal(z.table, 32 + 2 + 1);
    struct { size_t at; uint8_t v; const char *words; } cases[] = {
        {table + 34, 0x10, "sum to"},          /* freq[200] = 16: the sum is off */
        {table + 0, 0x0C, "table ends"},       /* symbol 2 too: three values in three bytes */
        {table + 25, 0x00, "holds only"},      /* symbol 200 gone: its byte left over */
        {table + 33, 0x00, "padding"},         /* freq[3] = 922 written with a zero last byte */
        {index + 0, 0x01, "offset 1"},         /* chunk 0 not at the payload's start */
        {index + 8, 0x00, "size 0"},           /* chunk 0 shorter than its states */
        {index + 12 + 8, 0xFF, "index entry 1"},
    };
    uint8_t *copy = malloc(len);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memcpy(copy, enc, len);
        copy[cases[i].at] = cases[i].v;
        put32(copy + crc, crc32_ref(copy, crc));
        RansStream s;
        Err e;
        assert_int_equal(rans_open(&s, copy, len, &e), ST_FORMAT);
        if (!strstr(e.msg, cases[i].words)) fail_msg("case %zu: want '%s' in '%s'", i, cases[i].words, e.msg);
    }
    free(copy);
    mem_free(enc);
}

static void rans_truncation_at_every_length_is_an_error(void **st) {
    uint8_t src[300];
    fill(src, sizeof src, IN_GAUSSIAN, 12);
    RansParams p = {.bits = 13, .n_states = 16, .chunk_size = 128};
    size_t len;
    uint8_t *enc = encode_or_fail(src, sizeof src, p, &len, NULL);
    char what[64];
    for (size_t cut = 0; cut < len; cut++) {
        snprintf(what, sizeof what, "cut to %zu of %zu", cut, len);
        if (!damaged_verdict(enc, cut, sizeof src, what)) fail_msg("%s decoded", what);
    }
    assert_int_equal(damaged_verdict(enc, len, sizeof src, "whole"), 0);
    mem_free(enc);
}

/* A chunk whose payload lost its last j bytes, with index and CRC forged to
 * match, gets past rans_open; the decoder must find it: the bytes run out,
 * or the states do not end at L. */
static void rans_a_chunk_cut_short_behind_a_valid_header_is_caught_by_the_decoder(void **st) {
    const size_t n = 3000;
    uint8_t *src = malloc(n);
    fill(src, n, IN_GAUSSIAN, 21);
    for (int si = 0; si < N_COUNTS; si++) {
        RansParams p = {.bits = 14, .n_states = ALL_STATES[si], .chunk_size = (uint32_t)n};
        size_t len;
        RansSizes z;
        uint8_t *enc = encode_or_fail(src, n, p, &len, &z);
        size_t crc = z.header - 4, size_at = 24 + z.table + 8;
        for (size_t cut = 1; cut <= z.payload - z.states; cut++) {
            uint8_t *copy = exact_copy(enc, len - cut);
            put32(copy + size_at, (uint32_t)(z.payload - cut));
            put32(copy + crc, crc32_ref(copy, crc));
            char what[64];
            snprintf(what, sizeof what, "N %d, chunk cut by %zu", p.n_states, cut);
            if (!damaged_verdict(copy, len - cut, n, what)) fail_msg("%s decoded", what);
            free(copy);
        }
        mem_free(enc);
    }
    free(src);
}

/* Random changes to payload bytes: never a crash, an over-read or a hang
 * (ASan and the test's time watch that), the two decoders agree, and the
 * final-state check catches nearly all of them. */
static void rans_damaged_payload_never_crashes_and_is_almost_always_detected(void **st) {
    const size_t n = 4000;
    uint8_t *src = malloc(n);
    uint64_t seed = 99;
    int trials = 0, caught = 0;
    for (int si = 0; si < N_COUNTS; si++)
        for (int kind = 0; kind < 3; kind++) {
            fill(src, n, (InputKind)kind, 31 + (uint64_t)kind);
            RansParams p = {.bits = 14, .n_states = ALL_STATES[si], .chunk_size = 1500};
            size_t len;
            RansSizes z;
            uint8_t *enc = encode_or_fail(src, n, p, &len, &z);
            uint8_t *copy = malloc(len);
            for (int t = 0; t < 40; t++) {
                memcpy(copy, enc, len);
                size_t at = z.header + next_random(&seed) % z.payload;
                copy[at] ^= (uint8_t)(1 + next_random(&seed) % 255);
                char what[80];
                snprintf(what, sizeof what, "N %d %s byte %zu", p.n_states, KIND_NAME[kind], at);
                caught += damaged_verdict(copy, len, n, what);
                trials++;
            }
            free(copy);
            mem_free(enc);
        }
    print_message("[  INFO    ] %d of %d damaged payloads refused\n", caught, trials);
    assert_true(caught >= trials * 99 / 100);
    free(src);
}

/* Every byte of a small stream, changed three ways: refused, or decoded to
 * the right length (the decoders agree either way; ASan watches the reads).
 * A few changes do decode, to wrong bytes: a slot moved into another symbol's
 * run of the same frequency, at the same offset, leaves the state exactly as
 * it was (notes/rans.md). They must stay rare. */
static void rans_any_changed_byte_of_a_small_stream_is_refused_or_decodes_to_the_right_length(void **st) {
    uint8_t src[700];
    fill(src, sizeof src, IN_GAUSSIAN, 64);
    int trials = 0, caught = 0;
    for (int N = 4; N <= 16; N *= 4) {
        RansParams p = {.bits = 12, .n_states = N, .chunk_size = 256};
        size_t len;
        uint8_t *enc = encode_or_fail(src, sizeof src, p, &len, NULL);
        uint8_t *copy = malloc(len);
        for (size_t at = 0; at < len; at++)
            for (int x = 0x01; x < 0x100; x = x * 5 + 3) {   /* 0x01, 0x08, 0x2b, 0xda */
                memcpy(copy, enc, len);
                copy[at] ^= (uint8_t)x;
                char what[64];
                snprintf(what, sizeof what, "N %d byte %zu ^ 0x%02x", N, at, x);
                caught += damaged_verdict(copy, len, sizeof src, what);
                trials++;
            }
        free(copy);
        mem_free(enc);
    }
    print_message("[  INFO    ] %d of %d single-byte changes refused\n", caught, trials);
    assert_true(caught >= trials * 99 / 100);
}

int main(int argc, char **argv) {
    select_tests(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rans_crc32_matches_the_definition_at_every_length_and_alignment),
        cmocka_unit_test(rans_normalize_sums_exactly_keeps_present_symbols_and_drops_absent_ones),
        cmocka_unit_test(rans_normalize_finds_a_table_that_no_single_move_improves),
        cmocka_unit_test(rans_entropy_is_eight_bits_for_uniform_one_for_a_fair_coin_zero_for_constant),
        cmocka_unit_test(rans_round_trips_every_input_kind_state_count_and_chunk_size_bit_exact),
        cmocka_unit_test(rans_fast_decoder_equals_plain_decoder_chunk_by_chunk),
        cmocka_unit_test(rans_one_chunk_decodes_alone_into_a_buffer_of_exactly_its_size),
        cmocka_unit_test(rans_decoding_on_two_threads_equals_one_thread),
        cmocka_unit_test(rans_encodes_the_notes_example_to_the_bytes_it_shows),
        cmocka_unit_test(rans_sizes_add_up_and_degenerate_inputs_cost_only_their_headers),
        cmocka_unit_test(rans_payload_of_large_inputs_is_within_half_a_percent_of_the_entropy),
        cmocka_unit_test(rans_refuses_bad_parameters_and_an_output_buffer_too_small),
        cmocka_unit_test(rans_open_allocates_one_block_decoding_none_and_failures_leak_nothing),
        cmocka_unit_test(rans_refuses_every_change_to_a_header_table_or_index_byte),
        cmocka_unit_test(rans_refuses_a_bad_table_or_index_even_with_a_matching_crc),
        cmocka_unit_test(rans_truncation_at_every_length_is_an_error),
        cmocka_unit_test(rans_a_chunk_cut_short_behind_a_valid_header_is_caught_by_the_decoder),
        cmocka_unit_test(rans_damaged_payload_never_crashes_and_is_almost_always_detected),
        cmocka_unit_test(rans_any_changed_byte_of_a_small_stream_is_refused_or_decodes_to_the_right_length),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
