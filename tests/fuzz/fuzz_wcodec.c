/* fuzz_wcodec.c - coded weight tensors (src/codec/wcodec.c) from any bytes.
 *
 * Two things happen to every input:
 *   1. The input as a blob: wc_open, then (when the tensor is at most 1 MiB)
 *      wc_decode with the plain decoder and, where the CPU has AVX-512, the
 *      vector one, and wc_decode_range on its second half. wcodec.h promises
 *      that a blob is checked before anything is decoded, that decoding never
 *      reads or writes out of bounds and always ends: the two decoders must
 *      agree on the status, and on every byte when both succeed. The header
 *      CRC is made right first (where the header's fixed part fits), so the
 *      field checks behind it are reached.
 *   2. A round trip: the first 4 bytes choose the type (F32, F16, BF16, Q8_0,
 *      or another, kept raw), the row length and the group; the rest, cut to
 *      whole values, is the tensor. wc_encode, wc_open, wc_decode: the same
 *      bytes, with both decoders.
 * Seeds (tests/fuzz/fuzz_wcodec/): blobs of each layout, from tools/mkcorpus. */
#include "fuzz.h"
#include "base/mem.h"
#include "kernels/ops.h"
#include "rans.h"
#include "codec/wcodec.h"

#define MAX_DECODED (1u << 20)

static RansIsa best;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    best = rans_best_isa();
    return 0;
}

static void decode_both(const uint8_t *data, size_t size) {
    WcTensor t;
    Err e = {{0}};
    if (wc_open(&t, data, size, "fuzz", &e) != ST_OK) {
        if (!e.msg[0]) fuzz_fail("wc_open refused a blob without a message");
        return;
    }
    if (t.nbytes <= MAX_DECODED) {
        size_t n = (size_t)t.nbytes;
        uint8_t *a = mem_alloc(n ? n : 1), *b = mem_alloc(n ? n : 1), *scratch = mem_alloc(wc_scratch_bytes(&t));
        if (a && b && scratch) {
            Err ea, eb;
            int ra = wc_decode(&t, a, n, scratch, RANS_PLAIN, &ea);
            int rb = wc_decode(&t, b, n, scratch, best, &eb);
            if (ra != rb) fuzz_fail("plain decoder says %d, fast one %d", ra, rb);
            if (ra == ST_OK && memcmp(a, b, n)) fuzz_fail("the decoders disagree on the bytes");
            if (ra != ST_OK && !ea.msg[0]) fuzz_fail("a decode failed without a message");
            /* the second half as a range, when it is whole values */
            size_t step = t.layout == WC_LAYOUT_Q8_0 ? sizeof(BlockQ8_0) : t.type == DT_F32 ? 4
                          : t.layout == WC_LAYOUT_FLOAT ? 2 : 1;
            size_t from = n / step / 2 * step;
            int rr = wc_decode_range(&t, from, n - from, b, scratch, best, &eb);
            if (ra == ST_OK && rr != ST_OK) fuzz_fail("the whole decoded, its second half did not: %s", eb.msg);
            if (ra == ST_OK && rr == ST_OK && memcmp(a + from, b, n - from))
                fuzz_fail("a range decoded to other bytes than the whole");
        }
        mem_free(a);
        mem_free(b);
        mem_free(scratch);
    }
    wc_close(&t);
}

static void round_trip(const uint8_t *data, size_t size) {
    if (size < 4) return;
    static const int types[] = {DT_F32, DT_F16, DT_BF16, DT_Q8_0, 12};
    int type = types[data[0] % 5];
    uint64_t ne0 = 1 + data[1] % 96;
    uint32_t group = 32u * (1 + data[2] % 8);
    data += 4;
    size -= 4;
    size_t row;
    if (type == DT_Q8_0) {
        ne0 = 32 * (1 + ne0 % 3);
        row = (size_t)(ne0 / 32) * sizeof(BlockQ8_0);
    } else {
        row = (size_t)ne0 * (type == DT_F32 ? 4 : type == 12 ? 1 : 2);
    }
    uint64_t rows = size / row;
    if (rows == 0) return;
    size_t n = (size_t)(rows * row);
    uint8_t *src = mem_alloc(n);
    if (!src) return;
    memcpy(src, data, n);
    uint64_t ne[2] = {ne0, rows};
    uint8_t *blob;
    size_t len;
    Err e;
    if (wc_encode(src, n, type, 2, ne, group, NULL, &blob, &len, NULL, NULL, &e) != ST_OK)
        fuzz_fail("wc_encode refused a valid tensor: %s", e.msg);
    WcTensor t;
    if (wc_open(&t, blob, len, "round trip", &e) != ST_OK) fuzz_fail("its own blob refused: %s", e.msg);
    uint8_t *out = mem_alloc(n), *scratch = mem_alloc(wc_scratch_bytes(&t));
    RansIsa isas[2] = {RANS_PLAIN, best};
    for (int k = 0; k < 2 && out && scratch; k++) {
        if (wc_decode(&t, out, n, scratch, isas[k], &e) != ST_OK) fuzz_fail("round trip decode: %s", e.msg);
        if (memcmp(out, src, n)) fuzz_fail("round trip gave other bytes (decoder %d)", k);
    }
    mem_free(out);
    mem_free(scratch);
    wc_close(&t);
    mem_free(blob);
    mem_free(src);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *copy = mem_alloc(size ? size : 1);   /* exactly its size: ASan sees any overread */
    if (!copy) return 0;
    memcpy(copy, data, size);
    decode_both(copy, size);
    /* the header CRC made right, where the fixed part says where it is */
    if (size >= 68 && copy[6] >= 1 && copy[6] <= 4) {
        size_t crc_at = 64 + 24 * (size_t)copy[6];
        if (crc_at + 4 <= size) {
            uint32_t c = rans_crc32(copy, crc_at);
            for (int i = 0; i < 4; i++) copy[crc_at + i] = (uint8_t)(c >> (8 * i));
            decode_both(copy, size);
        }
    }
    mem_free(copy);
    round_trip(data, size);
    return 0;
}
