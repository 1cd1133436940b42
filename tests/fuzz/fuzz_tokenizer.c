/* fuzz_tokenizer.c - any text through fixed vocabularies, encoded and decoded.
 *
 * The vocabularies are loaded once (LLVMFuzzerInitialize), each that is
 * found: Llama 2's 32,000-piece sentencepiece vocabulary and GPT-2's
 * byte-level BPE (../shared/fixtures/tokenizers, FIXTURES=dir overrides),
 * the tiny model's 512-piece llama2.c tokenizer.bin (fixtures tiny/), and
 * the default model's 2048-piece BPE (data/shakespeare.gguf). Every input
 * is a text (up to its first NUL: tok_encode takes a C string), and goes
 * through all of them. What tokenizer.h and tests/test_tokenizer.c promise,
 * and what is checked here:
 *   - decode(encode(text)) == text for well-formed UTF-8 text, with BOS
 *     first (the runtime's default; the decoder then drops the space that
 *     sentencepiece's encoder put in front);
 *   - any text, UTF-8 or not, encodes (nothing is dropped): decoding gives
 *     the text with each maximal ill-formed subpart replaced by U+FFFD,
 *     computed here independently (fuzz.h);
 *   - every id is inside the vocabulary, every decoded piece is whole,
 *     well-formed UTF-8 (fuzz.h);
 *   - the count tok_encode needs is what it reports when the room is short.
 * Seeds (tests/fuzz/fuzz_tokenizer/): the test strings of llama.cpp's
 * tokenizer tests, lines of the corpus, and invalid UTF-8. */
#include "fuzz.h"
#include "load/gguf.h"
#include <stdlib.h>

#define MAX_TEXT 4096          /* bytes of one input used (libFuzzer's default -max_len) */
#define MAX_VOCABS 4

static struct {
    const char *name;
    Tokenizer *t;
} vocab[MAX_VOCABS];
static int n_vocab;

/* A fixture that is not there is skipped, loudly; under CI (CI=true) that
 * is a failure, as in the cmocka suites (tests/testutil.h). */
static int missing(const char *path) {
    if (access(path, R_OK) == 0) return 0;
    const char *ci = getenv("CI");
    if (ci && strcmp(ci, "true") == 0) {
        fprintf(stderr, "fuzz_tokenizer: %s is missing, and under CI that is a failure\n", path);
        abort();
    }
    fprintf(stderr, "fuzz_tokenizer: %s not found, skipped\n", path);
    return 1;
}

static void load_gguf_vocab(const char *path) {
    Gguf g;
    Err e;
    Tokenizer *t = NULL;
    if (missing(path)) return;
    if (gguf_open(&g, path, &e) != ST_OK || tok_from_gguf(&t, &g, &e) != ST_OK) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", e.msg);
        abort();
    }
    gguf_close(&g);
    vocab[n_vocab].name = path;
    vocab[n_vocab++].t = t;
}

static void load_llama2c_vocab(const char *path, int n) {
    Err e;
    Tokenizer *t = NULL;
    if (missing(path)) return;
    if (tok_from_llama2c(&t, path, n, &e) != ST_OK) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", e.msg);
        abort();
    }
    vocab[n_vocab].name = path;
    vocab[n_vocab++].t = t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *fx = getenv("FIXTURES");
    if (!fx || !*fx) fx = "../shared/fixtures";
    static char paths[3][512];
    snprintf(paths[0], sizeof paths[0], "%s/tokenizers/llama-spm.gguf", fx);
    snprintf(paths[1], sizeof paths[1], "%s/tokenizers/gpt-2.gguf", fx);
    snprintf(paths[2], sizeof paths[2], "%s/tiny/tokenizer.bin", fx);
    load_gguf_vocab(paths[0]);
    load_gguf_vocab(paths[1]);
    load_llama2c_vocab(paths[2], 512);
    load_gguf_vocab("data/shakespeare.gguf");
    if (n_vocab == 0) {
        fprintf(stderr, "fuzz_tokenizer: no vocabulary found (run from the repository root)\n");
        abort();
    }
    return 0;
}

/* Show the first bytes of a text in a failure message, escaped. */
static const char *show(const char *s, size_t n) {
    static char buf[200];
    size_t w = 0;
    for (size_t i = 0; i < n && w + 5 < sizeof buf; i++) {
        unsigned char c = (unsigned char)s[i];
        w += (size_t)(c >= 0x20 && c < 0x7f && c != '\\' ? snprintf(buf + w, sizeof buf - w, "%c", c)
                                                          : snprintf(buf + w, sizeof buf - w, "\\x%02X", c));
    }
    buf[w] = 0;
    return buf;
}

static void round_trip(const char *name, const Tokenizer *t, const char *text, size_t n, int *ids,
                       int cap, char *got, char *want) {
    Err e;
    int k = tok_encode(t, text, 1, ids, cap, &e);
    if (k < 0) fuzz_fail("%s: encoding '%s' failed: %s", name, show(text, n), e.msg);
    int V = tok_n_vocab(t);
    for (int i = 0; i < k; i++)
        if (ids[i] < 0 || ids[i] >= V) fuzz_fail("%s: id %d outside 0..%d", name, ids[i], V - 1);
    if (k > 0) {   /* with one id less of room, it says how many it needs */
        int short_k = tok_encode(t, text, 1, ids, k - 1, &e);
        if (short_k != ST_ARG) fuzz_fail("%s: encoding into %d ids of room gave %d, want ST_ARG", name, k - 1, short_k);
        k = tok_encode(t, text, 1, ids, cap, &e);
    }
    TokDecoder d;
    char piece[TOK_MAX_PIECE];
    size_t w = 0;
    tok_decoder_init(&d);
    for (int i = 0; i <= k; i++) {
        int m = i < k ? tok_decode(t, &d, ids[i], piece) : tok_decode_flush(&d, piece);
        if (m < 0 || m >= TOK_MAX_PIECE) fuzz_fail("%s: a piece of %d bytes", name, m);
        memcpy(got + w, piece, (size_t)m);
        w += (size_t)m;
    }
    got[w] = 0;
    size_t want_n = fuzz_utf8_sanitize((const unsigned char *)text, n, want);
    if (w != want_n || memcmp(got, want, w) != 0) {
        size_t at = 0;
        while (at < w && at < want_n && got[at] == want[at]) at++;
        fprintf(stderr, "fuzz_tokenizer: %s: text '%s'\n", name, show(text, n));
        fprintf(stderr, "  decoded '%s'\n", show(got, w));
        fuzz_fail("%s: decode(encode(text)) differs from the text at byte %zu (%s UTF-8)", name, at,
                  fuzz_utf8_valid((const unsigned char *)text, n) ? "well-formed" : "ill-formed");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char text[MAX_TEXT + 1], got[3 * MAX_TEXT + 16], want[3 * MAX_TEXT + 16];
    static int ids[MAX_TEXT + 8];
    size_t n = size < MAX_TEXT ? size : MAX_TEXT;
    memcpy(text, data, n);
    text[n] = 0;
    n = strlen(text);
    for (int i = 0; i < n_vocab; i++)
        round_trip(vocab[i].name, vocab[i].t, text, n, ids, MAX_TEXT + 8, got, want);
    return 0;
}
