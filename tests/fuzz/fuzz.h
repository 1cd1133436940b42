/* fuzz.h - what the fuzz targets share.
 *
 * A target is two functions that libFuzzer calls: LLVMFuzzerInitialize once
 * (optional: load what every input needs), LLVMFuzzerTestOneInput for each
 * input. The same source builds two ways (see the Makefile):
 *
 *   make fuzz   clang -fsanitize=fuzzer,address,undefined: libFuzzer's own
 *               main mutates inputs for FUZZ_SECONDS (build/fuzz/fuzz_X)
 *   make test   gcc with the repository's sanitizers, linked with replay.c:
 *               every file of tests/fuzz/fuzz_X/ once (build/asan/fuzz_X)
 *
 * A target may do anything with its input but must never crash, leak, hang
 * or break a promise of the code it drives; a broken promise calls
 * fuzz_fail, which prints one line and aborts, so either build reports the
 * input that did it.
 *
 * Helpers here: an input as a file (the loaders take a path), an
 * independent UTF-8 check, a tokenizer driven end to end, and one short
 * forward pass of a loaded model. */
#ifndef FUZZ_H
#define FUZZ_H
#include "model.h"
#include "text/tokenizer.h"
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken promise: one line on stderr, then abort (the fuzzer saves the
 * input as a crash; the replay names the file). */
__attribute__((noreturn, format(printf, 1, 2)))
static inline void fuzz_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fuzz: broken promise: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

/* FUZZ_VERBOSE=1 in the environment: the targets say on stderr what each
 * input did (loaded, or refused and why), to see how far a seed gets. */
static inline int fuzz_verbose(void) {
    static int v = -1;
    if (v < 0) v = getenv("FUZZ_VERBOSE") && atoi(getenv("FUZZ_VERBOSE")) > 0;
    return v;
}

/* ---- an input as a file ----------------------------------------------------
 * The loaders open a path. A memfd is a file that lives in memory, with a
 * path (/proc/self/fd/N) that open() and mmap() treat like any regular
 * file: no disk, nothing to clean up, one per process, rewritten per input. */
typedef struct {
    int fd;
    char path[32];
} MemFile;

/* Make the file once (in LLVMFuzzerInitialize or on first use). */
static inline void memfile_open(MemFile *f, const char *name) {
    f->fd = memfd_create(name, MFD_CLOEXEC);
    if (f->fd < 0) {
        perror("memfd_create");
        abort();
    }
    snprintf(f->path, sizeof f->path, "/proc/self/fd/%d", f->fd);
}

/* Replace the file's contents by data[0..n). */
static inline void memfile_set(MemFile *f, const void *data, size_t n) {
    if (ftruncate(f->fd, 0) != 0) abort();
    size_t done = 0;
    while (done < n) {
        ssize_t w = pwrite(f->fd, (const char *)data + done, n - done, (off_t)done);
        if (w <= 0) abort();
        done += (size_t)w;
    }
}

/* ---- UTF-8 -----------------------------------------------------------------
 * Written apart from the tokenizer's own code, from the Unicode table of
 * well-formed byte sequences (The Unicode Standard, table 3-7). */

/* Bytes of the well-formed character at s[0..n), or 0 if none starts there;
 * *prefix gets how many leading bytes could still begin one (the "maximal
 * subpart" that a decoder replaces by one U+FFFD), at least 1. */
static inline int fuzz_utf8_char(const unsigned char *s, size_t n, int *prefix) {
    unsigned c = s[0];
    int need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) need = 1;
    else if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) need = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) need = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else need = 0;
    *prefix = 1;
    if (need == 0) return 0;
    int k = 1;
    for (; k < need && (size_t)k < n; k++) {
        unsigned b = s[k];
        if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
    }
    *prefix = k;
    return k == need ? need : 0;
}

/* 1 if s[0..n) is whole, well-formed UTF-8. */
static inline int fuzz_utf8_valid(const unsigned char *s, size_t n) {
    int prefix;
    for (size_t i = 0; i < n;) {
        int k = fuzz_utf8_char(s + i, n - i, &prefix);
        if (k == 0) return 0;
        i += (size_t)k;
    }
    return 1;
}

/* s[0..n) with each maximal ill-formed subpart replaced by U+FFFD, into out
 * (3 n + 1 bytes); returns the length. */
static inline size_t fuzz_utf8_sanitize(const unsigned char *s, size_t n, char *out) {
    size_t w = 0;
    int prefix;
    for (size_t i = 0; i < n;) {
        int k = fuzz_utf8_char(s + i, n - i, &prefix);
        if (k > 0) {
            memcpy(out + w, s + i, (size_t)k);
            w += (size_t)k;
            i += (size_t)k;
        } else {
            memcpy(out + w, "\xEF\xBF\xBD", 3);
            w += 3;
            i += (size_t)prefix;
        }
    }
    out[w] = 0;
    return w;
}

/* ---- a tokenizer, end to end -----------------------------------------------
 * For a vocabulary read from a fuzzed file only the decoder's promises hold
 * (any pieces may be in it): every id decodes to whole, well-formed UTF-8 of
 * fewer than TOK_MAX_PIECE bytes, and encoding any text either fails with a
 * status or gives ids inside the vocabulary. */

/* Decode ids[0..n) as one stream, then flush, checking each piece. */
static inline void fuzz_decode_checked(const Tokenizer *t, const int *ids, int n) {
    TokDecoder d;
    char piece[TOK_MAX_PIECE];
    tok_decoder_init(&d);
    for (int i = 0; i <= n; i++) {
        int k = i < n ? tok_decode(t, &d, ids[i], piece) : tok_decode_flush(&d, piece);
        if (k < 0 || k >= TOK_MAX_PIECE)
            fuzz_fail("decoding id %d wrote %d bytes (want 0..%d)", i < n ? ids[i] : -1, k,
                      TOK_MAX_PIECE - 1);
        if (!fuzz_utf8_valid((const unsigned char *)piece, (size_t)k))
            fuzz_fail("decoding id %d gave text that is not well-formed UTF-8", i < n ? ids[i] : -1);
    }
}

/* Encode a fixed text and the text of the input (up to 256 bytes), decode
 * the ids, and decode every id of the vocabulary (up to 4096) after BOS and
 * alone. */
static inline void fuzz_use_tokenizer(const Tokenizer *t, const uint8_t *data, size_t size) {
    static const char fixed[] = " Hello, world!\n\tÀ la volée: 日本語 🦙 \xFF\xC3(";
    char text[sizeof fixed + 256];
    size_t n = size < 256 ? size : 256;
    memcpy(text, fixed, sizeof fixed - 1);
    memcpy(text + sizeof fixed - 1, data, n);
    text[sizeof fixed - 1 + n] = 0;   /* (a NUL in data ends the text early: it is a C string) */
    enum { CAP = 2 * (sizeof fixed + 256) + 4 };
    int ids[CAP];
    Err e;
    int V = tok_n_vocab(t);
    for (int bos = 0; bos < 2; bos++) {
        int k = tok_encode(t, text, bos, ids, CAP, &e);
        if (k < 0) continue;   /* refused, with a status: allowed */
        for (int i = 0; i < k; i++)
            if (ids[i] < 0 || ids[i] >= V) fuzz_fail("encode gave id %d outside 0..%d", ids[i], V - 1);
        fuzz_decode_checked(t, ids, k);
    }
    int all = V < 4096 ? V : 4096;
    for (int id = 0; id < all; id++) {
        int pair[2] = {tok_bos(t), id};
        fuzz_decode_checked(t, pair + (pair[0] < 0), 2 - (pair[0] < 0));
    }
}

/* ---- a loaded model, run -----------------------------------------------------
 * Two tokens (the tokenizer's ids for "Hi", BOS first where there is one)
 * at positions 0 and 1, every logit read, when the model is small: one pass
 * reads every weight once and allocates L * P * Hkv * S floats of cache, and
 * beyond these limits a run would cost more time than it could find bugs.
 *
 * And, while fuzzing, only when every weight is finite and at most
 * FUZZ_MAX_WEIGHT in magnitude. A NaN weight once made ops_exp (src/kernels/ops.h)
 * convert NaN to an integer (undefined behaviour; fixed, and its inputs are
 * in the corpora as nan-weight*); skipping such models keeps the fuzzer on
 * the loaders. FUZZ_ALL_WEIGHTS=1 in the environment runs every model that
 * loads: the replay in make test (tests/fuzz.sh) sets it. */
#define FUZZ_MAX_WEIGHTS (1 << 22)   /* values in the matrices */
#define FUZZ_MAX_CACHE (1 << 22)     /* floats of K/V cache and RoPE table */
#define FUZZ_MAX_WEIGHT 1e3f

static inline int fuzz_sane_values(const float *v, int n) {
    for (int i = 0; i < n; i++)
        if (!(v[i] >= -FUZZ_MAX_WEIGHT && v[i] <= FUZZ_MAX_WEIGHT)) return 0;
    return 1;
}

static inline int fuzz_sane_mat(const Mat *w) {
    float *row = malloc((size_t)w->K * sizeof *row);
    int ok = row != NULL;
    size_t bytes = dtype_row_bytes(w->type, w->K);
    for (int r = 0; ok && r < w->N; r++) {
        dequantize_row(row, (const char *)w->data + (size_t)r * bytes, w->type, w->K);
        ok = fuzz_sane_values(row, w->K);
    }
    free(row);
    return ok;
}

static inline int fuzz_sane_weights(const Model *m) {
    const ModelConfig *c = &m->cfg;
    if (!fuzz_sane_mat(&m->tok_embd) || !fuzz_sane_mat(&m->output) ||
        !fuzz_sane_values(m->out_norm, c->dim))
        return 0;
    for (int l = 0; l < c->n_layers; l++) {
        const Layer *w = &m->layers[l];
        const Mat *mats[] = {&w->wq, &w->wk, &w->wv, &w->wo, &w->w_gate, &w->w_down, &w->w_up};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++)
            if (!fuzz_sane_mat(mats[i])) return 0;
        if (!fuzz_sane_values(w->attn_norm, c->dim) || !fuzz_sane_values(w->ffn_norm, c->dim)) return 0;
    }
    return 1;
}

static inline void fuzz_forward(const Model *m) {
    const ModelConfig *c = &m->cfg;
    double kvd = (double)c->n_kv_heads * c->head_dim;
    double weights = (double)c->n_layers * ((double)c->dim * (2.0 * c->dim + 2.0 * kvd) +
                                             3.0 * c->dim * c->hidden_dim) +
                     2.0 * c->vocab_size * c->dim;
    double cache = 2.0 * c->n_layers * c->seq_len * kvd + (double)c->seq_len * c->n_rot;
    if (weights > FUZZ_MAX_WEIGHTS || cache > FUZZ_MAX_CACHE) return;
    static int all = -1;
    if (all < 0) all = getenv("FUZZ_ALL_WEIGHTS") && atoi(getenv("FUZZ_ALL_WEIGHTS")) > 0;
    if (!all && !fuzz_sane_weights(m)) {
        if (fuzz_verbose()) fprintf(stderr, "fuzz: weights not finite or above %g: not run\n",
                                    (double)FUZZ_MAX_WEIGHT);
        return;
    }
    int ids[16], tokens[2] = {0, 0};
    int n = tok_encode(m->tok, "Hi", 1, ids, 16, NULL);
    for (int i = 0; i < 2 && i < n; i++) tokens[i] = ids[i];
    RunState s;
    Err e;
    if (runstate_init(&s, m, 2, &e) != ST_OK) return;
    const float *logits = model_forward(m, &s, tokens, 2, 0, 1);
    volatile float sum = 0;   /* ASan checks each read */
    for (size_t i = 0; i < 2 * (size_t)c->vocab_size; i++) sum += logits[i];
    (void)sum;
    runstate_free(&s);
}

#endif
