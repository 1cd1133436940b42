/* bpe_train.c - learn a byte-level BPE tokenizer from a text file.
 *
 *   bpe_train --input ../shared/corpus/tinyshakespeare.txt --train-fraction 0.9 \
 *             --vocab 1024 --out tok.gguf
 *
 * The first floor(fraction * size) bytes of the file are the training split;
 * the trainer (src/train/bpe_learn.c) sees nothing else. The rest is the validation split.
 * The result is a GGUF file with a vocabulary and no tensors, which the
 * engine's tokenizer loads like any GPT-2 style model file: 256 byte tokens,
 * vocab - 257 merged tokens, and <|endoftext|> as BOS and EOS.
 *
 * Then the tool checks its own output through the engine: it loads the file
 * with gguf_open and tok_from_gguf, encodes the training split and compares
 * the ids with the tokens the trainer ended with (bpe_segment), encodes the
 * validation split, and decodes both back to the original bytes (when they
 * are UTF-8: the decoder prints other bytes as U+FFFD). On stderr it reports
 * the merges, the training time, the compression (bytes per token) on both
 * splits and the engine's encoding time. Any mismatch is an error.
 *
 * Exit status: 0 done; 1 training, writing or the check failed; 2 bad
 * arguments or unreadable input. */
#include "train/bpe_learn.h"
#include "base/err.h"
#include "base/fileio.h"
#include "load/gguf.h"
#include "base/mem.h"
#include "text/tokenizer.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const char *input, *out;
    double fraction;
    int vocab;
    int help;   /* --help / -h: print the usage and stop */
} Args;

static void usage(FILE *f) {
    fprintf(f, "usage: bpe_train --input TEXT --vocab N --out TOK.gguf [--train-fraction F]\n"
               "  --input           the text to learn from (any bytes)\n"
               "  --vocab           tokens in all: 256 bytes + merges + <|endoftext|> (%d..%d)\n"
               "  --out             the GGUF file to write (a vocabulary, no tensors)\n"
               "  --train-fraction  the leading share of the file's bytes to train on, in (0, 1];\n"
               "                    the rest is the validation split (default 0.9)\n",
            BPE_MIN_VOCAB, BPE_MAX_VOCAB);
}

static int parse_args(int argc, char **argv, Args *a, Err *e) {
    *a = (Args){NULL, NULL, 0.9, 0, 0};
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            a->help = 1;
            return ST_OK;
        }
        if (strcmp(arg, "--input") && strcmp(arg, "--out") && strcmp(arg, "--vocab") &&
            strcmp(arg, "--train-fraction"))
            return err_set(e, ST_ARG, "unknown option %s (see --help)", arg);
        if (i + 1 >= argc) return err_set(e, ST_ARG, "%s needs a value", arg);
        const char *val = argv[++i];
        char *end;
        errno = 0;
        if (strcmp(arg, "--input") == 0) {
            a->input = val;
        } else if (strcmp(arg, "--out") == 0) {
            a->out = val;
        } else if (strcmp(arg, "--vocab") == 0) {
            long v = strtol(val, &end, 10);
            if (errno || end == val || *end || v < BPE_MIN_VOCAB || v > BPE_MAX_VOCAB)
                return err_set(e, ST_ARG, "--vocab wants an integer in %d..%d, got '%s'",
                               BPE_MIN_VOCAB, BPE_MAX_VOCAB, val);
            a->vocab = (int)v;
        } else {   /* --train-fraction */
            double v = strtod(val, &end);
            if (errno || end == val || *end || !(v > 0.0 && v <= 1.0))
                return err_set(e, ST_ARG, "--train-fraction wants a number in (0, 1], got '%s'",
                               val);
            a->fraction = v;
        }
    }
    if (!a->input) return err_set(e, ST_ARG, "no --input given");
    if (!a->vocab) return err_set(e, ST_ARG, "no --vocab given");
    if (!a->out) return err_set(e, ST_ARG, "no --out given");
    return ST_OK;
}

/* The whole file, NUL-terminated, in memory from mem_alloc (a directory or a
 * FIFO is refused before anything is read). */
static int read_text(const char *path, char **text, size_t *size, Err *e) {
    unsigned char *bytes;
    int st = fio_slurp(path, &bytes, size, e);
    *text = (char *)bytes;
    return st;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Is s[0..n) well-formed UTF-8? (Unicode's table of well-formed byte
 * sequences: no overlong forms, surrogates, or code points past U+10FFFF.) */
static int is_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        int need = c < 0x80 ? 1 : c < 0xC2 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 0;
        if (need == 0 || (size_t)need > n - i) return 0;
        for (int k = 1; k < need; k++) {
            unsigned char lo = 0x80, hi = 0xBF;
            if (k == 1 && c == 0xE0) lo = 0xA0;
            if (k == 1 && c == 0xED) hi = 0x9F;
            if (k == 1 && c == 0xF0) lo = 0x90;
            if (k == 1 && c == 0xF4) hi = 0x8F;
            if (s[i + k] < lo || s[i + k] > hi) return 0;
        }
        i += (size_t)need;
    }
    return 1;
}

/* Encode text[0..n) (text[n] must be NUL) with the engine: the ids go to ids
 * (room for n + 1), their number to *n_ids, the time taken to *sec. */
static int engine_encode(const Tokenizer *tok, const char *text, size_t n, int *ids,
                         size_t *n_ids, double *sec, Err *e) {
    double t0 = now_s();
    int got = tok_encode(tok, text, 0, ids, (int)n + 1, e);
    *sec = now_s() - t0;
    if (got < 0) return got;
    *n_ids = (size_t)got;
    return ST_OK;
}

/* Decode ids with the engine: it must give back text[0..n) byte for byte.
 * Only UTF-8 can come back (the decoder turns other bytes into U+FFFD), so
 * other text is left unchecked, and the tool says so. */
static int engine_decode_check(const Tokenizer *tok, const char *what, const char *text, size_t n,
                               const int *ids, size_t n_ids, Err *e) {
    if (!is_utf8((const unsigned char *)text, n)) {
        fprintf(stderr, "bpe_train: engine: the %s split is not all UTF-8, which decoding cannot "
                "give back; round trip not checked\n", what);
        return ST_OK;
    }
    char *back = mem_alloc(n + TOK_MAX_PIECE);
    if (!back) return err_set(e, ST_NOMEM, "out of memory decoding the %s split", what);
    TokDecoder d;
    tok_decoder_init(&d);
    size_t len = 0;
    for (size_t i = 0; i < n_ids && len <= n; i++) len += (size_t)tok_decode(tok, &d, ids[i], back + len);
    if (len <= n) len += (size_t)tok_decode_flush(&d, back + len);
    int st = ST_OK;
    if (len != n || memcmp(back, text, n) != 0) {
        size_t i = 0;
        while (i < n && i < len && back[i] == text[i]) i++;
        st = err_set(e, ST_FORMAT, "decode(encode(%s split)) differs from it at byte %zu", what, i);
    } else {
        fprintf(stderr, "bpe_train: engine: decode(encode(%s split)) gives back all %zu bytes\n",
                what, n);
    }
    mem_free(back);
    return st;
}

/* Load the file just written and check it against the trainer: the engine
 * must give the training split the trainer's tokens, and give both splits
 * back unchanged when decoding. Prints the compression on both splits. */
static int check_with_engine(const Bpe *b, const char *path, const char *text, size_t n_train,
                             size_t size, Err *e) {
    Gguf g = {0};
    Tokenizer *tok = NULL;
    size_t n_valid = size - n_train, n_ids = 0, n_want = 0;
    double sec;
    int *ids = mem_alloc((size + 1) * sizeof *ids);
    int *want = mem_alloc((n_train + 1) * sizeof *want);
    char *train = mem_alloc(n_train + 1);   /* the training split, NUL-terminated */
    int st = !ids || !want || !train ? err_set(e, ST_NOMEM, "out of memory for the check") : ST_OK;
    if (!st) st = gguf_open(&g, path, e);
    if (!st) st = tok_from_gguf(&tok, &g, e);

    if (!st) {
        memcpy(train, text, n_train);
        st = engine_encode(tok, train, n_train, ids, &n_ids, &sec, e);
    }
    if (!st) st = bpe_segment(b, text, n_train, want, n_train + 1, &n_want, e);
    if (!st) {
        size_t i = 0;
        while (i < n_ids && i < n_want && ids[i] == want[i]) i++;
        if (i < n_ids || i < n_want)
            st = err_set(e, ST_FORMAT, "the engine's tokens for the training split differ from "
                         "the trainer's at token %zu of %zu (engine %d, trainer %d)", i, n_want,
                         i < n_ids ? ids[i] : -1, i < n_want ? want[i] : -1);
        else
            fprintf(stderr, "bpe_train: engine: training split %zu bytes -> %zu tokens, %.3f "
                    "bytes/token, identical to the trainer's; encoded in %.2f s\n", n_train,
                    n_ids, (double)n_train / (double)(n_ids ? n_ids : 1), sec);
    }
    if (!st) st = engine_decode_check(tok, "training", train, n_train, ids, n_ids, e);

    if (!st && n_valid > 0) {   /* --train-fraction 1 leaves none */
        st = engine_encode(tok, text + n_train, n_valid, ids, &n_ids, &sec, e);
        if (!st)
            fprintf(stderr, "bpe_train: engine: validation split %zu bytes -> %zu tokens, %.3f "
                    "bytes/token\n", n_valid, n_ids, (double)n_valid / (double)(n_ids ? n_ids : 1));
        if (!st) st = engine_decode_check(tok, "validation", text + n_train, n_valid, ids, n_ids, e);
    }
    tok_free(tok);
    gguf_close(&g);
    mem_free(ids);
    mem_free(want);
    mem_free(train);
    return st;
}

int main(int argc, char **argv) {
    Args a;
    Err e = {{0}};
    char *text = NULL;
    size_t size = 0;
    int parsed = parse_args(argc, argv, &a, &e);
    if (argc == 1 || (parsed == ST_OK && a.help)) {
        usage(stdout);
        return 0;
    }
    if (parsed || read_text(a.input, &text, &size, &e)) {
        fprintf(stderr, "bpe_train: %s\n", e.msg);
        return 2;
    }
    size_t n_train = bpe_train_bytes(size, a.fraction);

    Bpe b;
    double t0 = now_s();
    int st = bpe_train(&b, text, n_train, a.vocab, &e);
    double t_train = now_s() - t0;
    if (!st) {
        fprintf(stderr, "bpe_train: %d merges learned from %zu bytes (%d distinct pre-tokens) in "
                "%.2f s; %d tokens; training split: %lld tokens, %.3f bytes/token\n", b.n_merges,
                n_train, b.n_words, t_train, b.n_vocab, (long long)b.n_tokens,
                (double)n_train / (double)(b.n_tokens ? b.n_tokens : 1));
        if (b.n_skipped > 0)
            fprintf(stderr, "bpe_train: %d pairs were passed over: joined, they would be over %d "
                    "bytes\n", b.n_skipped, BPE_MAX_TOKEN_BYTES);
        if (b.n_vocab < a.vocab)
            fprintf(stderr, "bpe_train: the text ran out of pairs to merge: %d tokens, not %d\n",
                    b.n_vocab, a.vocab);
        st = bpe_write_gguf(&b, a.out, &e);
    }
    if (!st) {
        fprintf(stderr, "bpe_train: wrote %s\n", a.out);
        if (memchr(text, 0, size))
            fprintf(stderr, "bpe_train: the text holds NUL bytes, which tok_encode cannot take; "
                    "engine check skipped\n");
        else
            st = check_with_engine(&b, a.out, text, n_train, size, &e);
    }
    bpe_free(&b);
    mem_free(text);
    if (st) {
        fprintf(stderr, "bpe_train: %s\n", e.msg);
        return 1;
    }
    return 0;
}
