/* mkcorpus.c - write the seed inputs of the fuzz targets that no other tool
 * makes: llama2.c checkpoints with their tokenizer, and rANS streams.
 *
 *   mkcorpus [--tokenizer ../shared/fixtures/tiny/tokenizer.bin] DIR
 *
 * writes DIR/fuzz_llama2c/ and DIR/fuzz_rans/ (tests/fuzz/seeds.sh calls it
 * with DIR = tests/fuzz, beside mkmodel, bpe_train and train for the GGUF
 * seeds). Everything is seeded, so the same arguments give the same bytes.
 *
 * A fuzz_llama2c input is both files in one (tests/fuzz/fuzz_llama2c.c): a
 * little-endian u32 n, n bytes of checkpoint, then tokenizer.bin. The
 * checkpoints are tiny (dim 8 or 16, one or two layers, context 8 or 16),
 * so each seed is a few tens of kilobytes and a forward pass costs
 * microseconds; their shapes differ where the loader branches (a shared or
 * separate classifier, grouped-query or not). Tokenizers: the fixtures'
 * 512-piece tokenizer.bin when --tokenizer names one that exists, and a
 * made-up one of 300 pieces (llama2.c's <unk>, <s>, </s>, the 256 byte
 * pieces <0x00>..<0xFF>, then letters and a few words).
 *
 * A fuzz_rans input is decoded as a stream and also encoded (its first 4
 * bytes choosing the parameters), so the seeds are streams the encoder
 * wrote: empty, one symbol repeated, text, every byte value, over several
 * probability bits, state counts and chunk sizes. */
#include "base/err.h"
#include "base/mem.h"
#include "kernels/ops.h"
#include "rans.h"
#include "codec/wcodec.h"
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    unsigned char *p;
    size_t len, cap;
} Buf;

static void put(Buf *b, const void *p, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p) {
            fprintf(stderr, "mkcorpus: out of memory\n");
            exit(1);
        }
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}
static void put_i32(Buf *b, int32_t v) { put(b, &v, 4); }
static void put_f32(Buf *b, float v) { put(b, &v, 4); }

static int write_file(const char *dir, const char *name, const void *p, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "mkcorpus: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    printf("%s (%zu bytes)\n", path, n);
    return 0;
}

/* ------------------------------------------------------------ llama2.c */

typedef struct {
    const char *name;
    int dim, hidden, layers, heads, kv_heads, vocab, seq_len, shared;
} Ckpt;

static uint64_t rng_next(uint64_t *s) {   /* xorshift64* */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* n weights uniform in [-0.5, 0.5), or n ones (the norms). */
static void put_weights(Buf *b, size_t n, uint64_t *s, int ones) {
    for (size_t i = 0; i < n; i++)
        put_f32(b, ones ? 1.0f : (float)((rng_next(s) >> 40) / (double)(1 << 24)) - 0.5f);
}

/* The arrays in llama2.c's order (see load_llama2c in src/model.c). */
static void checkpoint(Buf *b, const Ckpt *c) {
    size_t D = c->dim, F = c->hidden, L = c->layers, V = c->vocab, P = c->seq_len;
    size_t S = D / c->heads, kvd = (size_t)c->kv_heads * S;
    uint64_t s = 0x9E3779B97F4A7C15ull ^ (uint64_t)D * 31 ^ L;
    int32_t h[7] = {c->dim, c->hidden, c->layers, c->heads, c->kv_heads, c->shared ? c->vocab : -c->vocab,
                    c->seq_len};
    put(b, h, sizeof h);
    put_weights(b, V * D, &s, 0);       /* token embedding */
    put_weights(b, L * D, &s, 1);       /* attention norms */
    put_weights(b, L * D * D, &s, 0);   /* wq */
    put_weights(b, L * kvd * D, &s, 0); /* wk */
    put_weights(b, L * kvd * D, &s, 0); /* wv */
    put_weights(b, L * D * D, &s, 0);   /* wo */
    put_weights(b, L * D, &s, 1);       /* ffn norms */
    put_weights(b, L * F * D, &s, 0);   /* w1 (gate) */
    put_weights(b, L * D * F, &s, 0);   /* w2 (down) */
    put_weights(b, L * F * D, &s, 0);   /* w3 (up) */
    put_weights(b, D, &s, 1);           /* final norm */
    put_weights(b, P * S, &s, 0);       /* freq_cis_real, freq_cis_imag (unused) */
    if (!c->shared) put_weights(b, V * D, &s, 0);   /* classifier */
}

/* A made-up tokenizer.bin of n pieces (n >= 259). */
static void made_up_tokenizer(Buf *b, int n) {
    static const char *const words[] = {" the", " and", "ing", " to", "er", " of", "th", " I", "ou", "en"};
    put_i32(b, 16);   /* max_token_length */
    char piece[32];
    for (int id = 0; id < n; id++) {
        if (id == 0) snprintf(piece, sizeof piece, "<unk>");
        else if (id == 1) snprintf(piece, sizeof piece, "\n<s>\n");
        else if (id == 2) snprintf(piece, sizeof piece, "\n</s>\n");
        else if (id < 259) snprintf(piece, sizeof piece, "<0x%02X>", id - 3);
        else if (id - 259 < 10) snprintf(piece, sizeof piece, "%s", words[id - 259]);
        else snprintf(piece, sizeof piece, "%c", id - 269 < 26 ? 'a' + (id - 269) : 'A' + (id - 295) % 26);
        put_f32(b, id < 259 ? 0.0f : -(float)(id - 259));
        put_i32(b, (int32_t)strlen(piece));
        put(b, piece, strlen(piece));
    }
}

static int llama2c_seed(const char *dir, const Ckpt *c, const Buf *tok) {
    Buf model = {0}, all = {0};
    checkpoint(&model, c);
    uint32_t n = (uint32_t)model.len;
    put(&all, &n, 4);
    put(&all, model.p, model.len);
    put(&all, tok->p, tok->len);
    int st = write_file(dir, c->name, all.p, all.len);
    free(model.p);
    free(all.p);
    return st;
}

static int llama2c_seeds(const char *dir, const char *tok_path) {
    int st = 0;
    Buf made = {0};
    made_up_tokenizer(&made, 300);
    static const Ckpt made_up[] = {
        {"made-up-300-mha.bin", 8, 16, 1, 2, 2, 300, 8, 1},
        {"made-up-300-gqa-unshared.bin", 16, 24, 2, 4, 2, 300, 16, 0},
    };
    for (int i = 0; i < 2; i++) st |= llama2c_seed(dir, &made_up[i], &made);
    free(made.p);
    FILE *f = tok_path ? fopen(tok_path, "rb") : NULL;
    if (!f) {
        fprintf(stderr, "mkcorpus: %s not found: seeds with the fixtures' tokenizer skipped\n",
                tok_path ? tok_path : "(no --tokenizer)");
        return st;
    }
    Buf tiny = {0};
    unsigned char chunk[4096];
    for (size_t r; (r = fread(chunk, 1, sizeof chunk, f)) > 0;) put(&tiny, chunk, r);
    fclose(f);
    static const Ckpt fixture[] = {
        {"tiny-512-mqa.bin", 8, 16, 1, 2, 1, 512, 8, 1},
        {"tiny-512-gqa-unshared.bin", 16, 16, 2, 4, 2, 512, 8, 0},
    };
    for (int i = 0; i < 2; i++) st |= llama2c_seed(dir, &fixture[i], &tiny);
    free(tiny.p);
    return st;
}

/* ------------------------------------------------------------ rANS */

static int rans_seed(const char *dir, const char *name, const unsigned char *msg, size_t n, int bits,
                     int states, uint32_t chunk) {
    RansParams p = {bits, states, chunk};
    uint8_t *out;
    size_t len;
    Err e;
    if (rans_encode_alloc(msg, n, &p, &out, &len, NULL, &e) != ST_OK) {
        fprintf(stderr, "mkcorpus: %s: %s\n", name, e.msg);
        return 1;
    }
    int st = write_file(dir, name, out, len);
    mem_free(out);
    return st;
}

static int rans_seeds(const char *dir) {
    static const char text[] =
        "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
        "First Citizen:\nYou are all resolved rather to die than to famish?\n\nAll:\nResolved. "
        "resolved.\n\nFirst Citizen:\nFirst, you know Caius Marcius is chief enemy to the people.\n";
    unsigned char bytes[512], same[300], skew[2000];
    for (int i = 0; i < 512; i++) bytes[i] = (unsigned char)(i * 7);
    memset(same, 'a', sizeof same);
    uint64_t s = 12345;
    for (size_t i = 0; i < sizeof skew; i++) {   /* roughly geometric: a few symbols dominate */
        uint64_t r = rng_next(&s);
        int k = 0;
        while (k < 40 && (r >> k & 1)) k++;
        skew[i] = (unsigned char)k;
    }
    int st = 0;
    st |= rans_seed(dir, "empty.rans", NULL, 0, 14, 32, 65536);
    st |= rans_seed(dir, "one-symbol.rans", same, sizeof same, 10, 1, 64);
    st |= rans_seed(dir, "text-default.rans", (const unsigned char *)text, sizeof text - 1, 14, 32, 65536);
    st |= rans_seed(dir, "text-16-states-chunks-100.rans", (const unsigned char *)text, sizeof text - 1,
                    12, 16, 100);
    st |= rans_seed(dir, "all-bytes-15-bits.rans", bytes, sizeof bytes, 15, 4, 128);
    st |= rans_seed(dir, "skewed-32-states.rans", skew, sizeof skew, 11, 32, 700);
    st |= rans_seed(dir, "skewed-2-states-chunks-1.rans", skew, 40, 13, 2, 1);
    return st;
}

/* ------------------------------------------------------------ coded tensors */

/* A blob of each layout (wcodec.h): Gaussian-ish weights in F32, F16, BF16
 * and Q8_0, small groups so there are several chunks, and raw bytes. */
static int wcodec_seeds(const char *dir) {
    static const struct { const char *name; int type; uint64_t ne0, ne1; uint32_t group; } seed[] = {
        {"bf16-64x8-group-128.rnsw", DT_BF16, 64, 8, 128}, {"f16-40x3-group-32.rnsw", DT_F16, 40, 3, 32},
        {"f32-32x4.rnsw", DT_F32, 32, 4, 0},               {"q8_0-64x6-group-64.rnsw", DT_Q8_0, 64, 6, 64},
        {"raw-100x2.rnsw", 12, 100, 2, 64},
    };
    int st = 0;
    uint64_t s = 99;
    for (size_t k = 0; k < sizeof seed / sizeof seed[0]; k++) {
        uint64_t n = seed[k].ne0 * seed[k].ne1, ne[2] = {seed[k].ne0, seed[k].ne1};
        float row[128];
        uint8_t buf[4096];
        size_t at = 0;
        for (uint64_t i = 0; i < n; i += seed[k].ne0) {
            for (uint64_t j = 0; j < seed[k].ne0; j++) {   /* a sum of uniforms: near Gaussian, small */
                double g = 0;
                for (int u = 0; u < 4; u++) g += (double)(rng_next(&s) >> 11) * 0x1p-53 - 0.5;
                row[j] = (float)(g * 0.05);
            }
            int t = seed[k].type;
            if (t == DT_Q8_0) {
                quantize_row_q8_0_ref((BlockQ8_0 *)(buf + at), row, (int)seed[k].ne0);
                at += seed[k].ne0 / 32 * sizeof(BlockQ8_0);
            } else {
                for (uint64_t j = 0; j < seed[k].ne0; j++) {
                    if (t == DT_F32) memcpy(buf + at + 4 * j, &row[j], 4);
                    else if (t == 12) buf[at + j] = (uint8_t)rng_next(&s);
                    else {
                        uint16_t h = t == DT_F16 ? fp32_to_fp16(row[j]) : fp32_to_bf16(row[j]);
                        memcpy(buf + at + 2 * j, &h, 2);
                    }
                }
                at += seed[k].ne0 * (t == DT_F32 ? 4 : t == 12 ? 1 : 2);
            }
        }
        uint8_t *out;
        size_t len;
        Err e;
        if (wc_encode(buf, at, seed[k].type, 2, ne, seed[k].group, NULL, &out, &len, NULL, NULL, &e) != ST_OK) {
            fprintf(stderr, "mkcorpus: %s: %s\n", seed[k].name, e.msg);
            st = 1;
            continue;
        }
        st |= write_file(dir, seed[k].name, out, len);
        mem_free(out);
    }
    return st;
}

/* ------------------------------------------------------------ main */

static void usage(FILE *f) {
    fprintf(f, "usage: mkcorpus [--tokenizer TOKENIZER.BIN] DIR\n"
               "  writes DIR/fuzz_llama2c/ (checkpoint + tokenizer pairs), DIR/fuzz_rans/\n"
               "  (encoder streams) and DIR/fuzz_wcodec/ (coded tensors): the fuzz seeds no\n"
               "  other tool makes (tests/fuzz/seeds.sh)\n");
}

int main(int argc, char **argv) {
    const char *dir = NULL, *tok = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--tokenizer")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "mkcorpus: --tokenizer needs a value\n");
                return 2;
            }
            tok = argv[++i];
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "mkcorpus: unknown option %s (see --help)\n", argv[i]);
            return 2;
        } else {
            dir = argv[i];
        }
    }
    if (!dir) {
        usage(stderr);
        return 2;
    }
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/fuzz_llama2c", dir);
    mkdir(sub, 0755);
    int st = llama2c_seeds(sub, tok);
    snprintf(sub, sizeof sub, "%s/fuzz_rans", dir);
    mkdir(sub, 0755);
    st |= rans_seeds(sub);
    snprintf(sub, sizeof sub, "%s/fuzz_wcodec", dir);
    mkdir(sub, 0755);
    st |= wcodec_seeds(sub);
    return st ? 1 : 0;
}
