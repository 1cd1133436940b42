/* rans.c - interleaved rANS over bytes, in chunks (see rans.h for the promises).
 *
 * The coder in one paragraph. A message is a number x. To append a symbol s of
 * probability freq[s] / M, rANS maps x to about x * M / freq[s]: it keeps the
 * quotient x / freq[s] in the high part of the new state and puts the remainder
 * inside s's own interval of slots [start[s], start[s] + freq[s]) in the low
 * `bits` bits:
 *
 *     C(s, x) = (x / freq[s]) * M + start[s] + x % freq[s]
 *     D(x)    = s such that start[s] <= x % M < start[s + 1], then
 *               freq[s] * (x / M) + x % M - start[s]            (== the x before C)
 *
 * A frequent symbol multiplies x by little, a rare one by a lot: log2 of the
 * growth is the symbol's information, so the state's size counts the message's
 * bits. D undoes C exactly, which is why decoding pops symbols in the reverse
 * of the order they were pushed: the encoder walks the input from the end, and
 * the decoder then produces it from the front.
 *
 * Renormalisation. x cannot grow forever, so it is kept in [L, 256 L) with
 * L = 2^23 (32-bit arithmetic). Before pushing s, the encoder shifts out the
 * low byte of x while x >= freq[s] * 2^(31 - bits), which guarantees that
 * C(s, x) < 2^31; after popping, the decoder shifts bytes in while x < L. The
 * two conditions mirror each other, so the decoder reads exactly the bytes the
 * encoder wrote, in the reverse order. A pop leaves x >= freq * 2^(23 - bits)
 * >= 2^8, so at most two bytes come in per symbol, for any stream, damaged or
 * not, as long as the states begin in range.
 *
 * Interleaving. One state is a chain: each step needs the previous state. N
 * states take turns (byte i of a chunk belongs to state i mod N), so a CPU
 * can work on N chains at once, and with N = 16 one AVX-512 register holds a
 * group of 16 states. The states share one byte stream. Within a group of N
 * symbols the decoder first pops all of them, then reads renormalisation
 * bytes in rounds: round 0 gives one byte to every state still below L, in
 * state order; round 1 a second byte to those still below. That is the order a
 * vector does it in (a masked expand of consecutive bytes into the lanes that
 * need one), and the plain loop follows the same order so both decoders read
 * the same bytes. The encoder, working backwards, writes each group's round 1
 * bytes and then its round 0 bytes, lanes from last to first.
 *
 * Chunks. The input is cut into chunks of C bytes (the last may be shorter),
 * each coded with fresh states, so any chunk decodes alone (one tensor, one
 * tile, one thread each). All chunks share one frequency table. Encoders
 * start every state at L; since D undoes C, a correct decode ends with every
 * state back at exactly L and the byte pointer at the chunk's end. The
 * decoders check both: a damaged payload almost always breaks one of them.
 *
 * Two decoders. decode_plain is the reference: one state at a time, the
 * slot's symbol from a table of 2^bits bytes, its (freq, start) from
 * per-symbol tables. The AVX-512 decoder keeps 16 states in a register, looks
 * their 16 slots up with two gathers (the symbol; freq and slot - start packed
 * in 32 bits) and refills with masked expands. A gather takes some 30 cycles
 * before the next group of that chunk can start, so the whole-stream decoder
 * runs two chunks in lockstep to give the core independent work. Near a
 * chunk's end (2 N bytes, where a group's 16-byte loads could pass it) the
 * plain loop takes over the same states, so both decoders read the same bytes
 * and write the same output; the tests compare them.
 *
 * Stream layout (little-endian; notes/rans.md walks an example):
 *
 *   offset      bytes  field
 *   0           4      magic "rANS"
 *   4           1      version (1)
 *   5           1      bits, 10..15 (M = 2^bits)
 *   6           1      N, the number of states: 1, 2, 4, 8, 16 or 32
 *   7           1      reserved, 0
 *   8           8      n, original size in bytes
 *   16          4      C, chunk size in bytes, 1..2^30
 *   20          4      T, bytes of the frequency table
 *   24          T      frequency table: a 32-byte bitmap of present symbols
 *                      (bit s % 8 of byte s / 8), then freq[s] of each present
 *                      s in ascending order as LEB128 (7 bits a byte, low
 *                      first, 0x80 = more); the frequencies sum to M (no
 *                      symbol at all when n == 0)
 *   24+T        12 K   chunk index, K = ceil(n / C): for each chunk a u64
 *                      offset from the payload start and a u32 size; chunks
 *                      lie back to back in order
 *   24+T+12K    4      CRC-32 (IEEE, as zlib) of every byte before it
 *   28+T+12K    ...    payload: the chunks. A chunk is N u32 states (what the
 *                      decoder starts from), then the renormalisation bytes
 *                      in the order the decoder reads them.
 *
 * The CRC makes any damage to the header, table or index an error before a
 * single symbol is decoded; the payload relies on the final-state check.
 *
 * Reading order: little-endian and CRC helpers, frequencies, the table's
 * bytes, the encoder, opening a stream, the plain decoder, the AVX-512
 * decoder, the chunk and whole-stream entry points. */
#include "rans.h"
#include "base/le.h"
#include "base/mem.h"
#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#define RANS_X86 1
#include <immintrin.h>
/* The fast decoder's functions; callers check rans_best_isa() first. */
#define RANS_AVX512_FN __attribute__((target("avx512f,avx512bw,popcnt")))
#define RANS_AVX512_INLINE static inline __attribute__((always_inline)) RANS_AVX512_FN
#endif

enum {
    FIXED_BYTES = 24,            /* magic .. T */
    BITMAP_BYTES = 32,           /* 256 bits: which symbols occur */
    TABLE_MAX = BITMAP_BYTES + 256 * 3,   /* a frequency up to 2^15 takes at most 3 LEB128 bytes */
    INDEX_ENTRY = 12,            /* u64 offset, u32 size */
    CRC_BYTES = 4,
};
static const uint8_t MAGIC[4] = {'r', 'A', 'N', 'S'};

static int valid_states(int N) { return N == 1 || N == 2 || N == 4 || N == 8 || N == 16 || N == 32; }

/* ------------------------------------------------------------ CRC */

/* CRC-32 with zlib's polynomial (reflected 0xEDB88320), eight bytes a step
 * ("slicing by 8"): table k holds the CRC of a byte followed by k zero
 * bytes, so the eight bytes of a step are looked up independently and their
 * contributions xored. The loader hashes every tensor of a compressed model
 * with it; a byte at a time ran at about 330 MB/s, this about five times
 * that (1.6 GB/s on one core of a Xeon). The 8 KiB of tables are built once
 * (pthread_once). */
static uint32_t crc_tab[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int b = 0; b < 8; b++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_tab[0][i] = c;
    }
    for (int k = 1; k < 8; k++)
        for (int i = 0; i < 256; i++) crc_tab[k][i] = crc_tab[k - 1][i] >> 8 ^ crc_tab[0][crc_tab[k - 1][i] & 0xFF];
}

uint32_t rans_crc32(const uint8_t *p, size_t n) {
    pthread_once(&crc_once, crc_init);
    uint32_t crc = 0xFFFFFFFFu;
    for (; n >= 8; p += 8, n -= 8) {
        uint32_t lo = crc ^ get_u32(p), hi = get_u32(p + 4);
        crc = crc_tab[7][lo & 0xFF] ^ crc_tab[6][lo >> 8 & 0xFF] ^ crc_tab[5][lo >> 16 & 0xFF] ^ crc_tab[4][lo >> 24] ^
              crc_tab[3][hi & 0xFF] ^ crc_tab[2][hi >> 8 & 0xFF] ^ crc_tab[1][hi >> 16 & 0xFF] ^ crc_tab[0][hi >> 24];
    }
    for (; n; p++, n--) crc = crc_tab[0][(crc ^ *p) & 0xFF] ^ crc >> 8;
    return crc ^ 0xFFFFFFFFu;
}

/* ------------------------------------------------------------ frequencies */

void rans_count(const uint8_t *src, size_t n, uint64_t count[256]) {
    /* Four sub-histograms: runs of one byte value would otherwise make every
     * increment wait for the previous one to the same counter. */
    uint64_t c[4][256];
    memset(c, 0, sizeof c);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        c[0][src[i]]++;
        c[1][src[i + 1]]++;
        c[2][src[i + 2]]++;
        c[3][src[i + 3]]++;
    }
    for (; i < n; i++) c[0][src[i]]++;
    for (int s = 0; s < 256; s++) count[s] = c[0][s] + c[1][s] + c[2][s] + c[3][s];
}

double rans_entropy(const uint8_t *src, size_t n) {
    if (n == 0) return 0.0;
    uint64_t count[256];
    rans_count(src, n, count);
    double h = 0.0;
    for (int s = 0; s < 256; s++)
        if (count[s]) {
            double p = (double)count[s] / (double)n;
            h -= p * log2(p);
        }
    return h;
}

double rans_cost_bits(const uint64_t count[256], const uint32_t freq[256], int bits) {
    double cost = 0.0;
    for (int s = 0; s < 256; s++) {
        if (!count[s]) continue;
        if (!freq[s]) return INFINITY;
        cost += (double)count[s] * ((double)bits - log2((double)freq[s]));
    }
    return cost;
}

/* What one more slot for s saves, and what one fewer costs, in bits. */
static double gain_of_one_more(uint64_t c, uint32_t f) { return (double)c * log2((f + 1.0) / f); }
static double loss_of_one_fewer(uint64_t c, uint32_t f) { return (double)c * log2(f / (f - 1.0)); }

/* The coding cost sum c[s] log2(M / f[s]) is a sum of convex functions of
 * each f[s], under one linear constraint (sum f = M). Starting from counts
 * scaled and rounded (each present symbol at least 1), we move single slots:
 * first to make the sum exact, from where a slot costs least or saves most,
 * then from one symbol to another while that lowers the cost. For a separable
 * convex cost no single move improving means no set of moves can, so the
 * result is the cheapest table with integer frequencies.
 *
 * exercises/rans_normalize/ hollows this function: built with
 * -DEXERCISE_RANS_NORMALIZE, the file that macro names stands in its place
 * (tools/exercise.sh). */
#ifdef EXERCISE_RANS_NORMALIZE
#include EXERCISE_RANS_NORMALIZE
#else
int rans_normalize(const uint64_t count[256], int bits, uint32_t freq[256], Err *e) {
    memset(freq, 0, 256 * sizeof freq[0]);
    if (bits < RANS_BITS_MIN || bits > RANS_BITS_MAX)
        return err_set(e, ST_ARG, "rans: probability bits %d outside %d..%d", bits, RANS_BITS_MIN,
                       RANS_BITS_MAX);
    uint64_t total = 0;
    for (int s = 0; s < 256; s++)
        if (__builtin_add_overflow(total, count[s], &total))
            return err_set(e, ST_ARG, "rans: counts overflow 64 bits at symbol %d", s);
    if (total == 0) return ST_OK;
    const uint32_t M = 1u << bits;
    int64_t sum = 0;
    for (int s = 0; s < 256; s++) {
        if (!count[s]) continue;
        unsigned __int128 scaled = ((unsigned __int128)count[s] * M + total / 2) / total;
        freq[s] = scaled < 1 ? 1 : (uint32_t)scaled;
        sum += freq[s];
    }
    /* Make the sum exact. Below M: give a slot where it saves most. Above M
     * (many rare symbols raised to 1): take one where it costs least. */
    while (sum != M) {
        int best = -1;
        double best_v = 0.0;
        for (int s = 0; s < 256; s++) {
            if (!count[s]) continue;
            if (sum < M) {
                double v = gain_of_one_more(count[s], freq[s]);
                if (best < 0 || v > best_v) best = s, best_v = v;
            } else if (freq[s] > 1) {
                double v = loss_of_one_fewer(count[s], freq[s]);
                if (best < 0 || v < best_v) best = s, best_v = v;
            }
        }
        assert(best >= 0);   /* M >= 2^10 > 256: above M some symbol has freq > 1 */
        if (sum < M) freq[best]++, sum++;
        else freq[best]--, sum--;
    }
    /* Move slots between symbols while a move lowers the cost. The two best
     * givers and takers are kept so that a pair of distinct symbols is found
     * even when one symbol is both. The bound on rounds is a safety net. */
    for (uint32_t round = 0; round < 4 * M; round++) {
        int g[2] = {-1, -1}, t[2] = {-1, -1};   /* best takers by gain, givers by loss */
        double gv[2] = {0, 0}, tv[2] = {0, 0};
        for (int s = 0; s < 256; s++) {
            if (!count[s]) continue;
            double v = gain_of_one_more(count[s], freq[s]);
            if (g[0] < 0 || v > gv[0]) g[1] = g[0], gv[1] = gv[0], g[0] = s, gv[0] = v;
            else if (g[1] < 0 || v > gv[1]) g[1] = s, gv[1] = v;
            if (freq[s] > 1) {
                v = loss_of_one_fewer(count[s], freq[s]);
                if (t[0] < 0 || v < tv[0]) t[1] = t[0], tv[1] = tv[0], t[0] = s, tv[0] = v;
                else if (t[1] < 0 || v < tv[1]) t[1] = s, tv[1] = v;
            }
        }
        int to = -1, from = -1;
        double saving = 0.0;
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++)
                if (g[a] >= 0 && t[b] >= 0 && g[a] != t[b] && gv[a] - tv[b] > saving)
                    to = g[a], from = t[b], saving = gv[a] - tv[b];
        /* A relative margin keeps rounding noise from swapping a slot back and forth. */
        if (to < 0 || saving <= 1e-9 * (gv[0] + 1.0)) break;
        freq[to]++;
        freq[from]--;
    }
    return ST_OK;
}
#endif

/* ------------------------------------------------------------ the table's bytes */

static size_t leb128_len(uint32_t v) { return v < 0x80 ? 1 : v < 0x4000 ? 2 : 3; }

static size_t table_bytes(const uint32_t freq[256]) {
    size_t T = BITMAP_BYTES;
    for (int s = 0; s < 256; s++)
        if (freq[s]) T += leb128_len(freq[s]);
    return T;
}

static void write_table(uint8_t *p, const uint32_t freq[256]) {
    memset(p, 0, BITMAP_BYTES);
    for (int s = 0; s < 256; s++)
        if (freq[s]) p[s / 8] |= (uint8_t)(1u << (s % 8));
    p += BITMAP_BYTES;
    for (int s = 0; s < 256; s++) {
        uint32_t v = freq[s];
        if (!v) continue;
        while (v >= 0x80) {
            *p++ = (uint8_t)(v | 0x80);
            v >>= 7;
        }
        *p++ = (uint8_t)v;
    }
}

/* Parse T bytes at stream offset `at` into freq, checking every value. */
static int read_table(const uint8_t *p, size_t T, size_t at, int bits, uint64_t n, uint32_t freq[256],
                      Err *e) {
    const uint32_t M = 1u << bits;
    memset(freq, 0, 256 * sizeof freq[0]);
    if (T < BITMAP_BYTES || T > TABLE_MAX)
        return err_set(e, ST_FORMAT, "rans: header byte 20: table size %zu outside %d..%d", T,
                       BITMAP_BYTES, TABLE_MAX);
    size_t pos = BITMAP_BYTES;
    uint64_t sum = 0;
    for (int s = 0; s < 256; s++) {
        if (!(p[s / 8] >> (s % 8) & 1)) continue;
        uint32_t v = 0;
        size_t first = pos;
        for (int shift = 0;; shift += 7) {
            if (pos >= T)
                return err_set(e, ST_FORMAT, "rans: table ends at byte %zu inside the frequency of symbol %d",
                               at + T, s);
            uint8_t b = p[pos++];
            if (shift == 14 && b >= 0x80)
                return err_set(e, ST_FORMAT, "rans: byte %zu: frequency of symbol %d runs past 3 bytes",
                               at + pos - 1, s);
            if (b == 0 && pos - first > 1)
                return err_set(e, ST_FORMAT, "rans: byte %zu: frequency of symbol %d has a padding byte",
                               at + pos - 1, s);
            v |= (uint32_t)(b & 0x7F) << shift;
            if (b < 0x80) break;
        }
        if (v == 0 || v > M)
            return err_set(e, ST_FORMAT, "rans: byte %zu: frequency %u of symbol %d outside 1..%u",
                           at + first, v, s, M);
        freq[s] = v;
        sum += v;
    }
    if (pos != T)
        return err_set(e, ST_FORMAT, "rans: table of %zu bytes at byte %zu holds only %zu bytes of frequencies",
                       T, at, pos);
    if (sum != (n ? M : 0))
        return err_set(e, ST_FORMAT, "rans: table at byte %zu: frequencies sum to %llu, not %u", at,
                       (unsigned long long)sum, n ? M : 0);
    return ST_OK;
}

/* ------------------------------------------------------------ encoder */

RansParams rans_default_params(void) {
    return (RansParams){.bits = RANS_BITS_DEFAULT, .n_states = 32, .chunk_size = 64u << 10};
}

static int check_params(const RansParams *p, Err *e) {
    if (!p) return err_set(e, ST_ARG, "rans: no parameters");
    if (p->bits < RANS_BITS_MIN || p->bits > RANS_BITS_MAX)
        return err_set(e, ST_ARG, "rans: probability bits %d outside %d..%d", p->bits, RANS_BITS_MIN,
                       RANS_BITS_MAX);
    if (!valid_states(p->n_states))
        return err_set(e, ST_ARG, "rans: %d states; want 1, 2, 4, 8, 16 or 32", p->n_states);
    if (p->chunk_size < 1 || p->chunk_size > RANS_CHUNK_MAX)
        return err_set(e, ST_ARG, "rans: chunk size %u outside 1..%u", p->chunk_size, RANS_CHUNK_MAX);
    return ST_OK;
}

static uint64_t chunk_count(uint64_t n, uint32_t C) { return n / C + (n % C != 0); }

size_t rans_encode_bound(size_t n, const RansParams *p) {
    if (check_params(p, NULL) != ST_OK) return 0;
    uint64_t K = chunk_count(n, p->chunk_size);
    size_t per_chunk = INDEX_ENTRY + 4 * (size_t)p->n_states, total;
    if (__builtin_mul_overflow((size_t)K, per_chunk, &total) ||
        __builtin_add_overflow(total, (size_t)(FIXED_BYTES + TABLE_MAX + CRC_BYTES), &total) ||
        __builtin_add_overflow(total, n, &total) || __builtin_add_overflow(total, n, &total))
        return 0;
    return total;
}

/* Encode one chunk src (len bytes) backwards into the bytes that end at
 * `end`, never writing below `limit`. Returns where the chunk starts, or NULL
 * when it does not fit. Symbol i goes to state i % N; groups of N symbols are
 * coded from the last group to the first, and each group's bytes are written
 * in the reverse of the order the decoder reads them (see the top). */
static uint8_t *encode_chunk(const uint8_t *src, size_t len, int N, int bits, const uint32_t freq[256],
                             const uint32_t start[257], uint8_t *limit, uint8_t *end) {
    uint32_t x[RANS_MAX_STATES];
    for (int j = 0; j < N; j++) x[j] = RANS_L;
    const uint32_t x_max_unit = (RANS_L >> bits) << 8;   /* x must be below freq * this before C */
    uint8_t *p = end;
    for (size_t g = (len + N - 1) / N; g-- > 0;) {
        size_t i0 = g * (size_t)N;
        int m = len - i0 < (size_t)N ? (int)(len - i0) : N;
        uint8_t round0[RANS_MAX_STATES], round1[RANS_MAX_STATES];
        int k[RANS_MAX_STATES], n_bytes = 0;
        for (int j = 0; j < m; j++) {
            uint8_t s = src[i0 + j];
            uint32_t f = freq[s], y = x[j], x_max = x_max_unit * f;
            k[j] = 0;
            if (y >= x_max) {   /* shift out one byte; the decoder reads it last */
                round1[j] = round0[j] = (uint8_t)y;
                y >>= 8;
                k[j] = 1;
                if (y >= x_max) {   /* and a second, which the decoder reads first */
                    round0[j] = (uint8_t)y;
                    y >>= 8;
                    k[j] = 2;
                }
            }
            assert(y < x_max);
            x[j] = (y / f << bits) + y % f + start[s];
            n_bytes += k[j];
        }
        if (p - limit < n_bytes) return NULL;
        for (int j = m - 1; j >= 0; j--)
            if (k[j] == 2) *--p = round1[j];
        for (int j = m - 1; j >= 0; j--)
            if (k[j] >= 1) *--p = round0[j];
    }
    if (p - limit < 4 * N) return NULL;
    p -= 4 * N;
    for (int j = 0; j < N; j++) put_u32(p + 4 * j, x[j]);
    return p;
}

int rans_encode(const uint8_t *src, size_t n, const RansParams *p, uint8_t *dst, size_t cap,
                size_t *len, RansSizes *sizes, Err *e) {
    int st = check_params(p, e);
    if (st) return st;
    if (n > 0 && !src) return err_set(e, ST_ARG, "rans: no input for %zu bytes", n);
    const int N = p->n_states, bits = p->bits;
    const uint32_t C = p->chunk_size;
    uint64_t count[256];
    uint32_t freq[256], start[257];
    rans_count(src, n, count);
    if ((st = rans_normalize(count, bits, freq, e))) return st;
    start[0] = 0;
    for (int s = 0; s < 256; s++) start[s + 1] = start[s] + freq[s];

    const uint64_t K = chunk_count(n, C);
    const size_t T = table_bytes(freq);
    const size_t index_at = FIXED_BYTES + T;
    size_t header;
    if (__builtin_mul_overflow((size_t)K, (size_t)INDEX_ENTRY, &header) ||
        __builtin_add_overflow(header, index_at + CRC_BYTES, &header) || header > cap)
        return err_set(e, ST_ARG, "rans: output of %zu bytes cannot hold the header of %llu chunks", cap,
                       (unsigned long long)K);
    memcpy(dst, MAGIC, 4);
    dst[4] = RANS_VERSION;
    dst[5] = (uint8_t)bits;
    dst[6] = (uint8_t)N;
    dst[7] = 0;
    put_u64(dst + 8, n);
    put_u32(dst + 16, C);
    put_u32(dst + 20, (uint32_t)T);
    write_table(dst + FIXED_BYTES, freq);

    /* Each chunk is coded backwards from the end of dst, then moved down to
     * follow the previous one: no scratch buffer. */
    size_t pos = header;
    for (uint64_t k = 0; k < K; k++) {
        size_t from = (size_t)(k * C), clen = n - from < C ? n - from : C;
        uint8_t *at = encode_chunk(src + from, clen, N, bits, freq, start, dst + pos, dst + cap);
        if (!at)
            return err_set(e, ST_ARG, "rans: output of %zu bytes is too small at chunk %llu (bound %zu)", cap,
                           (unsigned long long)k, rans_encode_bound(n, p));
        size_t size = (size_t)(dst + cap - at);
        memmove(dst + pos, at, size);
        put_u64(dst + index_at + k * INDEX_ENTRY, pos - header);
        put_u32(dst + index_at + k * INDEX_ENTRY + 8, (uint32_t)size);
        pos += size;
    }
    size_t crc_at = header - CRC_BYTES;
    put_u32(dst + crc_at, rans_crc32(dst, crc_at));
    *len = pos;
    if (sizes)
        *sizes = (RansSizes){.header = header, .table = T, .index = (size_t)K * INDEX_ENTRY,
                             .payload = pos - header, .states = (size_t)K * 4 * N, .total = pos,
                             .n_chunks = K};
    return ST_OK;
}

int rans_encode_alloc(const uint8_t *src, size_t n, const RansParams *p, uint8_t **out, size_t *len,
                      RansSizes *sizes, Err *e) {
    *out = NULL;
    int st = check_params(p, e);
    if (st) return st;
    size_t bound = rans_encode_bound(n, p);
    if (!bound) return err_set(e, ST_ARG, "rans: the bound for %zu bytes overflows", n);
    uint8_t *buf = mem_alloc(bound);
    if (!buf) return err_set(e, ST_NOMEM, "rans: cannot allocate %zu bytes to encode %zu", bound, n);
    if ((st = rans_encode(src, n, p, buf, bound, len, sizes, e))) {
        mem_free(buf);
        return st;
    }
    uint8_t *fit = mem_realloc(buf, *len);   /* shrinking; keep the big one if even that fails */
    *out = fit ? fit : buf;
    return ST_OK;
}

/* ------------------------------------------------------------ opening a stream */

RansIsa rans_best_isa(void) {
#ifdef RANS_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("popcnt"))
        return RANS_AVX512;
#endif
    return RANS_PLAIN;
}

const char *rans_isa_name(RansIsa isa) { return isa == RANS_AVX512 ? "avx512" : "plain"; }

int rans_open(RansStream *s, const uint8_t *data, size_t size, Err *e) {
    memset(s, 0, sizeof *s);
    if (!data && size) return err_set(e, ST_ARG, "rans: no stream bytes");
    if (size < FIXED_BYTES + BITMAP_BYTES + CRC_BYTES)
        return err_set(e, ST_FORMAT, "rans: stream of %zu bytes is shorter than the smallest (%d)", size,
                       FIXED_BYTES + BITMAP_BYTES + CRC_BYTES);
    if (memcmp(data, MAGIC, 4) != 0)
        return err_set(e, ST_FORMAT, "rans: bytes 0-3: magic %02x %02x %02x %02x is not 'rANS'", data[0],
                       data[1], data[2], data[3]);
    if (data[4] != RANS_VERSION)
        return err_set(e, ST_FORMAT, "rans: byte 4: version %u, this reader knows %d", data[4], RANS_VERSION);
    int bits = data[5], N = data[6];
    if (bits < RANS_BITS_MIN || bits > RANS_BITS_MAX)
        return err_set(e, ST_FORMAT, "rans: byte 5: probability bits %d outside %d..%d", bits,
                       RANS_BITS_MIN, RANS_BITS_MAX);
    if (!valid_states(N))
        return err_set(e, ST_FORMAT, "rans: byte 6: %d states; want 1, 2, 4, 8, 16 or 32", N);
    if (data[7] != 0) return err_set(e, ST_FORMAT, "rans: byte 7: reserved byte is %u, not 0", data[7]);
    uint64_t n = get_u64(data + 8);
    uint32_t C = get_u32(data + 16), T = get_u32(data + 20);
    if (C < 1 || C > RANS_CHUNK_MAX)
        return err_set(e, ST_FORMAT, "rans: byte 16: chunk size %u outside 1..%u", C, RANS_CHUNK_MAX);
    if (T < BITMAP_BYTES || T > TABLE_MAX)
        return err_set(e, ST_FORMAT, "rans: byte 20: table size %u outside %d..%d", T, BITMAP_BYTES, TABLE_MAX);
    uint64_t K = chunk_count(n, C);
    size_t index_at = FIXED_BYTES + T;
    /* The index and CRC must fit in what is left: K * 12 <= size - index_at - 4. */
    if (size < index_at + CRC_BYTES || K > (size - index_at - CRC_BYTES) / INDEX_ENTRY)
        return err_set(e, ST_FORMAT, "rans: size %llu in chunks of %u needs an index of %llu entries; "
                       "the stream has %zu bytes", (unsigned long long)n, C, (unsigned long long)K, size);
    size_t crc_at = index_at + (size_t)K * INDEX_ENTRY, header = crc_at + CRC_BYTES;
    uint32_t crc = rans_crc32(data, crc_at), stored = get_u32(data + crc_at);
    if (crc != stored)
        return err_set(e, ST_FORMAT, "rans: byte %zu: header CRC 0x%08x, computed 0x%08x", crc_at, stored, crc);
    int st = read_table(data + FIXED_BYTES, T, FIXED_BYTES, bits, n, s->freq, e);
    if (st) return st;
    /* The chunks must lie back to back, each at least N states long and no
     * longer than its symbols could make it (2 bytes each). */
    const uint8_t *index = data + index_at;
    uint64_t expect = 0, payload = size - header;
    for (uint64_t k = 0; k < K; k++) {
        uint64_t off = get_u64(index + k * INDEX_ENTRY);
        uint32_t csize = get_u32(index + k * INDEX_ENTRY + 8);
        uint64_t clen = k + 1 < K ? C : n - k * C;
        if (off != expect)
            return err_set(e, ST_FORMAT, "rans: index entry %llu: offset %llu, expected %llu",
                           (unsigned long long)k, (unsigned long long)off, (unsigned long long)expect);
        if (csize < 4u * N || csize > 4u * N + 2 * clen)
            return err_set(e, ST_FORMAT, "rans: index entry %llu: size %u outside %d..%llu",
                           (unsigned long long)k, csize, 4 * N, (unsigned long long)(4u * N + 2 * clen));
        if (csize > payload - expect)
            return err_set(e, ST_FORMAT, "rans: index entry %llu: chunk of %u bytes at %llu passes the "
                           "payload's end (%llu)", (unsigned long long)k, csize, (unsigned long long)off,
                           (unsigned long long)payload);
        expect += csize;
    }
    if (expect != payload)
        return err_set(e, ST_FORMAT, "rans: the chunks end at payload byte %llu but the stream has %llu",
                       (unsigned long long)expect, (unsigned long long)payload);

    s->data = data;
    s->size = size;
    s->bits = bits;
    s->n_states = N;
    s->n = n;
    s->chunk_size = C;
    s->n_chunks = K;
    s->index = index;
    s->payload = data + header;
    s->sizes = (RansSizes){.header = header, .table = T, .index = (size_t)K * INDEX_ENTRY,
                           .payload = (size_t)payload, .states = (size_t)K * 4 * N, .total = size,
                           .n_chunks = K};
    s->start[0] = 0;
    for (int c = 0; c < 256; c++) s->start[c + 1] = s->start[c] + s->freq[c];
    if (n == 0) return ST_OK;   /* nothing to decode: no tables */

    const size_t M = (size_t)1 << bits;
    const int packed = bits <= RANS_PACKED_BITS;
    s->block_ = mem_alloc((packed ? 2 : 1) * M * sizeof(uint32_t) + M + 4);
    if (!s->block_) return err_set(e, ST_NOMEM, "rans: cannot allocate decode tables for 2^%d slots", bits);
    s->slot_info = s->block_;
    s->slot_packed = packed ? s->slot_info + M : NULL;
    s->slot_sym = (uint8_t *)(s->slot_info + (packed ? 2 : 1) * M);
    for (int c = 0; c < 256; c++)
        for (uint32_t slot = s->start[c]; slot < s->start[c + 1]; slot++) {
            s->slot_sym[slot] = (uint8_t)c;
            s->slot_info[slot] = s->freq[c] | (slot - s->start[c]) << 16;
            if (packed)   /* freq - 1 and slot - start fit 12 bits each, the symbol the top 8 */
                s->slot_packed[slot] = (s->freq[c] - 1) | (slot - s->start[c]) << 12 | (uint32_t)c << 24;
        }
    return ST_OK;
}

void rans_close(RansStream *s) {
    mem_free(s->block_);
    memset(s, 0, sizeof *s);
}

size_t rans_chunk_len(const RansStream *s, uint64_t k) {
    if (k >= s->n_chunks) return 0;
    uint64_t from = k * s->chunk_size;
    return (size_t)(s->n - from < s->chunk_size ? s->n - from : s->chunk_size);
}

/* ------------------------------------------------------------ plain decoder */

/* Where a chunk's decoding stands: its states, the next byte to read, the end. */
typedef struct {
    uint32_t x[RANS_MAX_STATES];
    const uint8_t *p, *end;
} Cursor;

/* Decode symbols i .. len-1 of a chunk (i a multiple of N) into out. The
 * reference: one state at a time, the slot's symbol from slot_sym, its
 * (freq, start) from the per-symbol tables. */
static int decode_plain(const RansStream *s, Cursor *c, uint8_t *out, size_t i, size_t len, uint64_t k,
                        Err *e) {
    const int N = s->n_states, bits = s->bits;
    const uint32_t mask = (1u << bits) - 1;
    for (; i < len; i += N) {
        int m = len - i < (size_t)N ? (int)(len - i) : N;
        for (int j = 0; j < m; j++) {   /* pop one symbol from each state */
            uint32_t slot = c->x[j] & mask;
            uint8_t sym = s->slot_sym[slot];
            out[i + j] = sym;
            c->x[j] = s->freq[sym] * (c->x[j] >> bits) + slot - s->start[sym];
        }
        for (int round = 0; round < 2; round++)   /* refill, state order, one byte a round */
            for (int j = 0; j < m; j++) {
                if (c->x[j] >= RANS_L) continue;
                if (c->p == c->end)
                    return err_set(e, ST_FORMAT, "rans: chunk %llu: payload ends while state %d needs a "
                                   "byte at symbol %zu of %zu", (unsigned long long)k, j, i + j, len);
                c->x[j] = c->x[j] << 8 | *c->p++;
            }
        for (int j = 0; j < m; j++) assert(c->x[j] >= RANS_L);
    }
    return ST_OK;
}

/* ------------------------------------------------------------ AVX-512 decoder */

#ifdef RANS_X86
/* Pop one symbol from each of 16 states: two gathers by slot (the symbol and
 * its freq | bias << 16), x = freq * (x >> bits) + bias, 16 symbols stored. */
RANS_AVX512_INLINE __m512i pop16(__m512i x, const RansStream *s, __m512i mask, __m128i shift, uint8_t *out) {
    __m512i slot = _mm512_and_si512(x, mask);
    __m512i info = _mm512_i32gather_epi32(slot, (const void *)s->slot_info, 4);
    __m512i sym = _mm512_i32gather_epi32(slot, (const void *)s->slot_sym, 1);
    _mm_storeu_si128((__m128i *)out, _mm512_cvtepi32_epi8(sym));   /* low byte of each lane */
    __m512i freq = _mm512_and_si512(info, _mm512_set1_epi32(0xFFFF));
    __m512i bias = _mm512_srli_epi32(info, 16);
    return _mm512_add_epi32(_mm512_mullo_epi32(freq, _mm512_srl_epi32(x, shift)), bias);
}

/* The same from the packed table (bits <= 12): one gather gives the symbol,
 * freq - 1 and slot - start together. Gathers bound this decoder, so halving
 * them is most of its speed on low-entropy planes, whose streams use few bits. */
RANS_AVX512_INLINE __m512i pop16_packed(__m512i x, const RansStream *s, __m512i mask, __m128i shift, uint8_t *out) {
    __m512i slot = _mm512_and_si512(x, mask);
    __m512i v = _mm512_i32gather_epi32(slot, (const void *)s->slot_packed, 4);
    _mm_storeu_si128((__m128i *)out, _mm512_cvtepi32_epi8(_mm512_srli_epi32(v, 24)));
    __m512i freq = _mm512_add_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0xFFF)), _mm512_set1_epi32(1));
    __m512i bias = _mm512_and_si512(_mm512_srli_epi32(v, 12), _mm512_set1_epi32(0xFFF));
    return _mm512_add_epi32(_mm512_mullo_epi32(freq, _mm512_srl_epi32(x, shift)), bias);
}

/* One refill round for the lanes in `need`: they take consecutive bytes from
 * at, in lane order (a masked expand), x = x << 8 | byte. */
RANS_AVX512_INLINE __m512i refill16(__m512i x, __mmask16 need, const uint8_t *at) {
    __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)at));
    return _mm512_mask_or_epi32(x, need, _mm512_slli_epi32(x, 8), _mm512_maskz_expand_epi32(need, bytes));
}

/* The lanes below L take a byte in round 0; those below 2^15 (x << 8 still
 * below L) a second one in round 1. Both masks come from the popped states,
 * so every byte position of a group is known before any byte is loaded. */
RANS_AVX512_INLINE __mmask16 below_L(__m512i x) { return _mm512_cmplt_epu32_mask(x, _mm512_set1_epi32((int)RANS_L)); }
RANS_AVX512_INLINE __mmask16 below_L8(__m512i x) {
    return _mm512_cmplt_epu32_mask(x, _mm512_set1_epi32((int)(RANS_L >> 8)));
}

/* One group of N = 16 symbols; returns the new byte position. */
RANS_AVX512_INLINE const uint8_t *group16(__m512i *a, const uint8_t *p, const RansStream *s, __m512i mask,
                                           __m128i shift, uint8_t *out, const int packed) {
    __m512i x = packed ? pop16_packed(*a, s, mask, shift, out) : pop16(*a, s, mask, shift, out);
    __mmask16 r0 = below_L(x), r1 = below_L8(x);
    const uint8_t *p1 = p + __builtin_popcount(r0);
    x = refill16(x, r0, p);
    *a = refill16(x, r1, p1);
    return p1 + __builtin_popcount(r1);
}

/* One group of N = 32 symbols, states 0-15 in a and 16-31 in b: round 0 of
 * a, round 0 of b, round 1 of a, round 1 of b, as the plain loop reads. */
RANS_AVX512_INLINE const uint8_t *group32(__m512i *a, __m512i *b, const uint8_t *p, const RansStream *s,
                                           __m512i mask, __m128i shift, uint8_t *out, const int packed) {
    __m512i xa = packed ? pop16_packed(*a, s, mask, shift, out) : pop16(*a, s, mask, shift, out);
    __m512i xb = packed ? pop16_packed(*b, s, mask, shift, out + 16) : pop16(*b, s, mask, shift, out + 16);
    __mmask16 a0 = below_L(xa), b0 = below_L(xb), a1 = below_L8(xa), b1 = below_L8(xb);
    const uint8_t *pb0 = p + __builtin_popcount(a0);
    const uint8_t *pa1 = pb0 + __builtin_popcount(b0);
    const uint8_t *pb1 = pa1 + __builtin_popcount(a1);
    xa = refill16(xa, a0, p);
    xb = refill16(xb, b0, pb0);
    *a = refill16(xa, a1, pa1);
    *b = refill16(xb, b1, pb1);
    return pb1 + __builtin_popcount(b1);
}

/* Room for one more group at symbol i: N symbols left, and 2 N bytes (a
 * group reads at most 2 bytes a state, and its 16-byte loads stay below p + 2 N). */
static inline int room(const Cursor *c, const uint8_t *p, size_t i, size_t len, int N) {
    return len - i >= (size_t)N && c->end - p >= 2 * N;
}

/* Whole groups of one chunk, or of two chunks in lockstep (`two`, N constant
 * after inlining). Each group's states wait some 60 cycles on their gathers
 * and bytes; a second chunk gives the core independent work meanwhile. Stops
 * when either chunk has no room for a group; returns the symbols decoded in
 * each. The states live in named registers: GCC keeps arrays of vectors in
 * memory. */
RANS_AVX512_INLINE size_t run_avx512(const RansStream *s, Cursor *c, uint8_t *const *out, const size_t *len,
                                     const int two, const int N, const int packed) {
    const __m512i mask = _mm512_set1_epi32((int)((1u << s->bits) - 1));
    const __m128i shift = _mm_cvtsi32_si128(s->bits);
    __m512i a0 = _mm512_loadu_si512(c[0].x), b0 = _mm512_setzero_si512();
    __m512i a1 = _mm512_setzero_si512(), b1 = _mm512_setzero_si512();
    const uint8_t *p0 = c[0].p, *p1 = two ? c[1].p : NULL;
    if (N == 32) b0 = _mm512_loadu_si512(c[0].x + 16);
    if (two) a1 = _mm512_loadu_si512(c[1].x);
    if (two && N == 32) b1 = _mm512_loadu_si512(c[1].x + 16);
    size_t i = 0;
    while (room(&c[0], p0, i, len[0], N) && (!two || room(&c[1], p1, i, len[1], N))) {
        if (N == 16) {
            p0 = group16(&a0, p0, s, mask, shift, out[0] + i, packed);
            if (two) p1 = group16(&a1, p1, s, mask, shift, out[1] + i, packed);
        } else {
            p0 = group32(&a0, &b0, p0, s, mask, shift, out[0] + i, packed);
            if (two) p1 = group32(&a1, &b1, p1, s, mask, shift, out[1] + i, packed);
        }
        i += (size_t)N;
    }
    _mm512_storeu_si512(c[0].x, a0);
    if (N == 32) _mm512_storeu_si512(c[0].x + 16, b0);
    c[0].p = p0;
    if (two) {
        _mm512_storeu_si512(c[1].x, a1);
        if (N == 32) _mm512_storeu_si512(c[1].x + 16, b1);
        c[1].p = p1;
    }
    return i;
}

/* The fast decoder for n_chunks (1 or 2) cursors, all at symbol done[]. It
 * takes them as far as whole groups go, together and then one by one; the
 * plain loop finishes each. N must be 16 or 32. */
static RANS_AVX512_FN void decode_avx512(const RansStream *s, Cursor *c, int n_chunks, uint8_t *const *out,
                                         const size_t *len, size_t *done) {
    const int N = s->n_states, packed = s->slot_packed != NULL;
    /* each combination spelt out, so that every loop is compiled for its constants */
#define RUN(cur, o, l, two) (packed ? (N == 16 ? run_avx512(s, cur, o, l, two, 16, 1) : run_avx512(s, cur, o, l, two, 32, 1)) \
                                    : (N == 16 ? run_avx512(s, cur, o, l, two, 16, 0) : run_avx512(s, cur, o, l, two, 32, 0)))
    if (n_chunks == 2) {
        size_t i = RUN(c, out, len, 1);
        done[0] = done[1] = i;
    }
    for (int k = 0; k < n_chunks; k++) {
        uint8_t *o = out[k] + done[k];
        size_t rest = len[k] - done[k];
        done[k] += RUN(&c[k], &o, &rest, 0);
    }
#undef RUN
}
#endif

/* ------------------------------------------------------------ chunks and streams */

/* Read chunk k's states into c (each in [L, 256 L)) and point it at its bytes. */
static int begin_chunk(const RansStream *s, uint64_t k, Cursor *c, Err *e) {
    const int N = s->n_states;
    const uint8_t *src = s->payload + get_u64(s->index + k * INDEX_ENTRY);
    uint32_t csize = get_u32(s->index + k * INDEX_ENTRY + 8);   /* >= 4 N: checked by rans_open */
    c->p = src + 4 * N;
    c->end = src + csize;
    for (int j = 0; j < N; j++) {
        c->x[j] = get_u32(src + 4 * j);
        if (c->x[j] < RANS_L || c->x[j] >= RANS_L << 8)
            return err_set(e, ST_FORMAT, "rans: chunk %llu: state %d starts at 0x%08x, outside [2^23, 2^31)",
                           (unsigned long long)k, j, c->x[j]);
    }
    return ST_OK;
}

/* Decode chunk k's symbols from `done` on with the plain loop, then check
 * that every state is back at L and every byte was read. */
static int finish_chunk(const RansStream *s, uint64_t k, Cursor *c, uint8_t *out, size_t done, Err *e) {
    size_t len = rans_chunk_len(s, k);
    int st = decode_plain(s, c, out, done, len, k, e);
    if (st) return st;
    for (int j = 0; j < s->n_states; j++)
        if (c->x[j] != RANS_L)
            return err_set(e, ST_FORMAT, "rans: chunk %llu: state %d ends at 0x%08x, not 2^23: payload damaged",
                           (unsigned long long)k, j, c->x[j]);
    if (c->p != c->end)
        return err_set(e, ST_FORMAT, "rans: chunk %llu: %zu of its bytes left unread: payload damaged",
                       (unsigned long long)k, (size_t)(c->end - c->p));
    return ST_OK;
}

static int check_isa(RansIsa isa, Err *e) {
    if (isa == RANS_AVX512 && rans_best_isa() != RANS_AVX512)
        return err_set(e, ST_UNSUPPORTED, "rans: the avx512 decoder was asked for on a CPU without AVX-512");
    return ST_OK;
}

/* Chunk k into dst, or chunks k and k + 1 (n_chunks = 2) into dst and
 * dst + C. On failure e names the first bad chunk. */
static int decode_chunks(const RansStream *s, uint64_t k, int n_chunks, uint8_t *dst, RansIsa isa, Err *e) {
    Cursor c[2];
    uint8_t *out[2] = {NULL, NULL};
    size_t len[2] = {0, 0}, done[2] = {0, 0};
    for (int q = 0; q < n_chunks; q++) {
        int st = begin_chunk(s, k + q, &c[q], e);
        if (st) return st;
        out[q] = dst + (size_t)q * s->chunk_size;
        len[q] = rans_chunk_len(s, k + q);
    }
#ifdef RANS_X86
    if (isa == RANS_AVX512 && (s->n_states == 16 || s->n_states == 32))
        decode_avx512(s, c, n_chunks, out, len, done);
#endif
    for (int q = 0; q < n_chunks; q++) {
        int st = finish_chunk(s, k + q, &c[q], out[q], done[q], e);
        if (st) return st;
    }
    return ST_OK;
}

int rans_decode_chunk(const RansStream *s, uint64_t k, uint8_t *dst, size_t cap, RansIsa isa, Err *e) {
    return rans_decode_chunks(s, k, 1, dst, cap, isa, e);
}

int rans_decode_chunks(const RansStream *s, uint64_t k, int count, uint8_t *dst, size_t cap, RansIsa isa,
                       Err *e) {
    if (count < 1 || count > 2 || k >= s->n_chunks || (uint64_t)count > s->n_chunks - k)
        return err_set(e, ST_ARG, "rans: chunks %llu..%llu of %llu", (unsigned long long)k,
                       (unsigned long long)k + (unsigned)count - 1, (unsigned long long)s->n_chunks);
    size_t len = (size_t)(count - 1) * s->chunk_size + rans_chunk_len(s, k + (uint64_t)count - 1);
    if (cap < len) return err_set(e, ST_ARG, "rans: chunk %llu needs %zu bytes, buffer has %zu",
                                  (unsigned long long)k, len, cap);
    int st = check_isa(isa, e);
    if (st) return st;
    return decode_chunks(s, k, count, dst, isa, e);
}

/* The whole stream goes two chunks at a time (see run_avx512), pairs spread
 * over threads. */
int rans_decode(const RansStream *s, uint8_t *dst, size_t cap, RansIsa isa, int threads, Err *e) {
    if (cap < s->n)
        return err_set(e, ST_ARG, "rans: output needs %llu bytes, buffer has %zu", (unsigned long long)s->n, cap);
    int st = check_isa(isa, e);
    if (st) return st;
    const int64_t K = (int64_t)s->n_chunks, pairs = (K + 1) / 2;
    const size_t C = s->chunk_size;
#ifdef _OPENMP
    if (threads > 1 && pairs > 1) {
        int64_t first_bad = pairs;
        Err first_err = {{0}};
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
        for (int64_t q = 0; q < pairs; q++) {
            Err eq;
            int r = decode_chunks(s, (uint64_t)(2 * q), 2 * q + 1 < K ? 2 : 1, dst + (size_t)(2 * q) * C, isa, &eq);
            if (r) {
#pragma omp critical(rans_decode_error)
                if (q < first_bad) {
                    first_bad = q;
                    st = r;
                    first_err = eq;
                }
            }
        }
        if (st && e) *e = first_err;
        return st;
    }
#endif
    (void)threads;
    for (int64_t q = 0; q < pairs; q++)
        if ((st = decode_chunks(s, (uint64_t)(2 * q), 2 * q + 1 < K ? 2 : 1, dst + (size_t)(2 * q) * C, isa, e)))
            return st;
    return ST_OK;
}

int rans_decode_all(const uint8_t *data, size_t size, uint8_t *dst, size_t cap, size_t *len, RansIsa isa,
                    int threads, Err *e) {
    RansStream s;
    int st = rans_open(&s, data, size, e);
    if (st) return st;
    if (s.n > cap) {
        st = err_set(e, ST_ARG, "rans: stream holds %llu bytes, buffer has %zu", (unsigned long long)s.n, cap);
    } else {
        st = rans_decode(&s, dst, cap, isa, threads, e);
        if (!st) *len = (size_t)s.n;
    }
    rans_close(&s);
    return st;
}
