/* fuzz_rans.c - the rANS codec on any bytes: decoded as a stream, and
 * encoded and decoded back.
 *
 * Three things happen to every input:
 *   1. The input as a stream: rans_open, then (when it holds at most 1 MiB)
 *      rans_decode with the plain decoder and, where the CPU has AVX-512,
 *      with the vector one. rans.h promises that decoding never reads
 *      outside the stream or writes outside the buffer and always ends, and
 *      that the two decoders give identical output: so they must agree on
 *      the status too, and on every byte when both succeed.
 *   2. The same with the header CRC made right. The CRC guards the header,
 *      so a mutated header is almost always refused there; recomputing it
 *      (where the fixed fields say it lies inside the input) lets the
 *      fuzzer reach the table, index and payload checks behind it.
 *   3. A round trip: the first 4 bytes choose the parameters (bits 10..15,
 *      1..32 states, chunks of 1..4096 bytes), the rest is the message.
 *      rans_encode_alloc, then the stream must decode back bit for bit with
 *      both decoders; the same stream written into a buffer of exactly its
 *      size must come out identical, and into one byte less be refused
 *      with ST_ARG (it "does not fit in cap").
 * Seeds (tests/fuzz/fuzz_rans/): streams made by the encoder (empty, one
 * symbol, text, every byte value; several parameters), from tools/mkcorpus. */
#include "fuzz.h"
#include "base/mem.h"
#include "rans.h"

#define MAX_DECODED (1u << 20)

static RansIsa best;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    best = rans_best_isa();
    return 0;
}

/* CRC-32 as zlib computes it (reflected polynomial 0xEDB88320), bit by bit. */
static uint32_t crc32(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int b = 0; b < 8; b++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    }
    return c ^ 0xFFFFFFFFu;
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Decode a stream with both decoders; they must agree. */
static void decode_both(const uint8_t *data, size_t size) {
    RansStream s;
    Err e = {{0}};
    if (rans_open(&s, data, size, &e) != ST_OK) {
        if (!e.msg[0]) fuzz_fail("rans_open refused a stream without a message");
        if (fuzz_verbose()) fprintf(stderr, "fuzz_rans: %s\n", e.msg);
        return;
    }
    if (s.n <= MAX_DECODED) {
        size_t n = (size_t)s.n;
        uint8_t *a = malloc(n + 1), *b = malloc(n + 1);
        Err ea, eb;
        int sa = rans_decode(&s, a, n, RANS_PLAIN, 1, &ea);
        if (fuzz_verbose()) fprintf(stderr, "fuzz_rans: %zu bytes, %s\n", n, sa ? ea.msg : "decoded");
        if (best == RANS_AVX512) {
            int sb = rans_decode(&s, b, n, RANS_AVX512, 1, &eb);
            if (sa != sb) fuzz_fail("plain decoder says %d, AVX-512 says %d", sa, sb);
            if (sa == ST_OK && memcmp(a, b, n) != 0) fuzz_fail("plain and AVX-512 decoders differ");
        }
        for (uint64_t k = 0; k < s.n_chunks && k < 4; k++) {   /* chunk by chunk agrees with the whole */
            size_t len = rans_chunk_len(&s, k);
            int sk = rans_decode_chunk(&s, k, b, len, RANS_PLAIN, &eb);
            if (sa == ST_OK && (sk != ST_OK || memcmp(b, a + k * s.chunk_size, len) != 0))
                fuzz_fail("chunk %llu decoded alone differs from the whole decode", (unsigned long long)k);
        }
        free(a);
        free(b);
    }
    rans_close(&s);
}

/* The input with its header CRC recomputed, if the fixed fields place it
 * inside the input. */
static void decode_with_crc_fixed(const uint8_t *data, size_t size) {
    if (size < 24 || memcmp(data, "rANS", 4) != 0) return;
    uint64_t n = (uint64_t)le32(data + 8) | (uint64_t)le32(data + 12) << 32;
    uint32_t C = le32(data + 16), T = le32(data + 20);
    if (C == 0 || T > size) return;
    uint64_t K = n / C + (n % C != 0);
    if (K > size / 12) return;
    uint64_t at = 24 + (uint64_t)T + 12 * K;
    if (at + 4 > size) return;
    uint8_t *copy = malloc(size);
    memcpy(copy, data, size);
    uint32_t crc = crc32(copy, (size_t)at);
    for (int i = 0; i < 4; i++) copy[at + i] = (uint8_t)(crc >> (8 * i));
    decode_both(copy, size);
    free(copy);
}

static void round_trip(const uint8_t *data, size_t size) {
    if (size < 4) return;
    RansParams p = {.bits = RANS_BITS_MIN + data[0] % (RANS_BITS_MAX - RANS_BITS_MIN + 1),
                    .n_states = 1 << (data[1] % 6),
                    .chunk_size = 1 + ((uint32_t)data[2] | (uint32_t)data[3] << 8) % 4096};
    const uint8_t *msg = data + 4;
    size_t n = size - 4;
    uint8_t *stream = NULL;
    size_t len = 0;
    Err e;
    if (rans_encode_alloc(msg, n, &p, &stream, &len, NULL, &e) != ST_OK)
        fuzz_fail("encoding %zu bytes (bits %d, %d states, chunks of %u) failed: %s", n, p.bits,
                  p.n_states, p.chunk_size, e.msg);
    if (len > rans_encode_bound(n, &p)) fuzz_fail("a stream of %zu bytes exceeds the bound", len);
    uint8_t *out = malloc(n + 1);
    RansIsa isas[2] = {RANS_PLAIN, RANS_AVX512};
    for (int i = 0; i < (best == RANS_AVX512 ? 2 : 1); i++) {
        size_t got = 0;
        int st = rans_decode_all(stream, len, out, n, &got, isas[i], 1, &e);
        if (st != ST_OK) fuzz_fail("the encoder's own stream is refused (%s): %s", rans_isa_name(isas[i]), e.msg);
        if (got != n || memcmp(out, msg, n) != 0)
            fuzz_fail("round trip through %s is not bit-exact", rans_isa_name(isas[i]));
    }
    uint8_t *exact = malloc(len);
    size_t len2 = 0;
    if (rans_encode(msg, n, &p, exact, len, &len2, NULL, &e) != ST_OK || len2 != len ||
        memcmp(exact, stream, len) != 0)
        fuzz_fail("encoding into a buffer of exactly %zu bytes differs", len);
    if (rans_encode(msg, n, &p, exact, len - 1, &len2, NULL, &e) != ST_ARG)
        fuzz_fail("encoding into %zu bytes, one short, was not refused with ST_ARG", len - 1);
    free(exact);
    free(out);
    mem_free(stream);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    decode_both(data, size);
    decode_with_crc_fixed(data, size);
    round_trip(data, size);
    return 0;
}
