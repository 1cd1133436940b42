/* test_tokenizer.c - the tokenizer against other implementations' answers.
 *
 * Golden data (../shared/fixtures, see its README):
 *  - tokenizers/<name>.inp/.out: llama.cpp's tokenizer test vectors, expected ids
 *    made by the Hugging Face tokenizers, for Llama 2's sentencepiece
 *    vocabulary and GPT-2's byte-level BPE;
 *  - tiny/greedy.tsv: the prompt ids llama.cpp and llama2.c fed the tiny model;
 *  - tiny/runc/<k>.txt: what llama2.c's run.c printed, i.e. its decoder's
 *    output for the prompt and the generated ids.
 * Small hand-made vocabularies check the merge rules on cases worked out by
 * hand, and corrupt files check that loading fails with a useful message. */
#include "testutil.h"
#include "load/gguf.h"
#include "base/mem.h"
#include "text/tokenizer.h"
#include <math.h>
#include <time.h>

#define MAX_IDS 4096

/* ---- helpers --------------------------------------------------------------- */

/* Printable form of s for failure messages: C escapes, \xNN beyond ASCII. */
static const char *show(const char *s, char *buf, size_t cap) {
    size_t w = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && w + 8 < cap; p++) {
        if (*p == '\n') w += (size_t)snprintf(buf + w, cap - w, "\\n");
        else if (*p == '\t') w += (size_t)snprintf(buf + w, cap - w, "\\t");
        else if (*p < 0x20 || *p >= 0x7f) w += (size_t)snprintf(buf + w, cap - w, "\\x%02X", *p);
        else buf[w++] = (char)*p;
    }
    buf[w] = 0;
    return buf;
}

/* The test strings of a .inp file: each is followed by the separator. The
 * strings point into *mem (free it when done). */
static int read_inp(const char *path, char ***strs, char **mem) {
    static const char SEP[] = "\n__ggml_vocab_test__\n";
    char *buf = read_file(path, NULL);
    assert_non_null(buf);
    int n = 0, cap = 64;
    char **v = malloc((size_t)cap * sizeof *v);
    for (char *p = buf, *q; (q = strstr(p, SEP)) != NULL; p = q + strlen(SEP)) {
        *q = 0;
        if (n == cap) v = realloc(v, (size_t)(cap *= 2) * sizeof *v);
        v[n++] = p;
    }
    *strs = v;
    *mem = buf;
    return n;
}

/* Parse whitespace-separated ids from s; returns the count. */
static int parse_ids(const char *s, int *ids, int cap) {
    int n = 0;
    char *end;
    for (long v = strtol(s, &end, 10); end != s; v = strtol(s, &end, 10)) {
        assert_true(n < cap);
        ids[n++] = (int)v;
        s = end;
    }
    return n;
}

/* Fail with the first difference between two id lists, naming the case. */
static void expect_ids(const char *what, const int *got, int n_got, const int *want, int n_want) {
    int i = 0;
    while (i < n_got && i < n_want && got[i] == want[i]) i++;
    if (i == n_got && i == n_want) return;
    print_error("%s: first mismatch at id %d of %d (want %d ids): got %d, want %d\n", what, i,
                n_got, n_want, i < n_got ? got[i] : -1, i < n_want ? want[i] : -1);
    fail();
}

static Tokenizer *load_gguf(const char *rel) {
    char path[512];
    if (!fixture(path, sizeof path, rel)) return NULL;
    Gguf g;
    Err e;
    Tokenizer *t = NULL;
    int st = gguf_open(&g, path, &e);
    if (st == ST_OK) st = tok_from_gguf(&t, &g, &e);
    if (st != ST_OK) print_error("%s: %s\n", path, e.msg);
    assert_int_equal(st, ST_OK);
    gguf_close(&g);   /* the tokenizer keeps its own copy */
    return t;
}

static Tokenizer *load_tiny_bin(void) {
    char path[512];
    if (!fixture(path, sizeof path, "tiny/tokenizer.bin")) return NULL;
    Err e;
    Tokenizer *t = NULL;
    int st = tok_from_llama2c(&t, path, 512, &e);
    if (st != ST_OK) print_error("%s\n", e.msg);
    assert_int_equal(st, ST_OK);
    return t;
}

static int encode(const Tokenizer *t, const char *text, int add_bos, int *ids) {
    Err e;
    int n = tok_encode(t, text, add_bos, ids, MAX_IDS, &e);
    if (n < 0) print_error("encoding '%s' failed: %s\n", text, e.msg);
    assert_true(n >= 0);
    return n;
}

/* Decode ids as a stream, then flush; the text goes to out (cap bytes). */
static size_t decode_all(const Tokenizer *t, const int *ids, int n, char *out, size_t cap) {
    TokDecoder d;
    char piece[TOK_MAX_PIECE];
    size_t w = 0;
    tok_decoder_init(&d);
    for (int i = 0; i <= n; i++) {
        int k = i < n ? tok_decode(t, &d, ids[i], piece) : tok_decode_flush(&d, piece);
        assert_true(k >= 0 && k < TOK_MAX_PIECE && w + (size_t)k < cap);
        memcpy(out + w, piece, (size_t)k);
        w += (size_t)k;
    }
    out[w] = 0;
    return w;
}

/* 1 if s[0..n) is whole, valid UTF-8 (a check written independently of the
 * decoder: decode each character to its code point and re-check its range). */
static int is_valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        int k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (k == 0 || i + (size_t)k > n) return 0;
        unsigned cp = k == 1 ? c : c & (0x7F >> k);
        for (int j = 1; j < k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        static const unsigned min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[k] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += (size_t)k;
    }
    return 1;
}

/* ---- the llama.cpp test vectors -------------------------------------------- */

/* Every string of <name>.inp encodes (no BOS) to the ids on its line of .out. */
static void check_vectors(const char *name) {
    char rel[128], inp_path[512], out_path[512], what[600], shown[200];
    snprintf(rel, sizeof rel, "tokenizers/%s.gguf", name);
    Tokenizer *t = load_gguf(rel);
    snprintf(rel, sizeof rel, "tokenizers/%s.inp", name);
    fixture(inp_path, sizeof inp_path, rel);
    snprintf(rel, sizeof rel, "tokenizers/%s.out", name);
    fixture(out_path, sizeof out_path, rel);

    char **strs, *mem;
    int n = read_inp(inp_path, &strs, &mem);
    assert_int_equal(n, 46);
    char *out = read_file(out_path, NULL);
    assert_non_null(out);
    char *line = out;
    static int got[MAX_IDS], want[MAX_IDS];
    for (int i = 0; i < n; i++) {
        char *nl = strchr(line, '\n');
        assert_non_null(nl);
        *nl = 0;
        int n_want = parse_ids(line, want, MAX_IDS);
        int n_got = encode(t, strs[i], 0, got);
        snprintf(what, sizeof what, "%s string %d '%s'", name, i, show(strs[i], shown, sizeof shown));
        expect_ids(what, got, n_got, want, n_want);
        line = nl + 1;
    }
    free(out);
    free(strs);
    free(mem);
    tok_free(t);
}

static void spm_encodes_llama_vocab_test_vectors(void **state) { check_vectors("llama-spm"); }
static void gpt2_encodes_gpt2_vocab_test_vectors(void **state) { check_vectors("gpt-2"); }

/* The byte-level vocabularies that each name their own pre-tokenizer: every
 * digit alone (StarCoder), punctuation runs and three-digit groups first
 * (Falcon), letters, punctuation and CJK runs apart (DeepSeek LLM), and
 * llama.cpp's default rules for a file without tokenizer.ggml.pre
 * (GPT-NeoX). StarCoder and GPT-NeoX have pieces longer than the old limit
 * of 167 bytes; Falcon has no piece for byte 0x03. */
static void starcoder_encodes_its_test_vectors(void **state) { check_vectors("starcoder"); }
static void falcon_encodes_its_test_vectors(void **state) { check_vectors("falcon"); }
static void deepseek_llm_encodes_its_test_vectors(void **state) { check_vectors("deepseek-llm"); }
static void gpt_neox_without_a_pre_key_encodes_by_the_default_rules(void **state) {
    check_vectors("gpt-neox");
}

/* GPT-2's vocabulary cut by Llama 3's and Qwen2's rules: numbers in threes
 * or one digit at a time, contractions in any case, runs of newlines. The
 * ids come from llama.cpp; 10 and 12 of the 46 strings differ from GPT-2's
 * own cutting, so GPT-2's rules would fail here. */
static void gpt2_vocab_under_llama_bpe_rules_encodes_as_llama_cpp(void **state) {
    check_vectors("gpt2-vocab-llama-bpe");
}
static void gpt2_vocab_under_qwen2_rules_encodes_as_llama_cpp(void **state) {
    check_vectors("gpt2-vocab-qwen2");
}

/* Encode -> decode gives back each test string. Sentencepiece decodes after
 * BOS, which drops the space the encoder put in front. */
static void check_round_trip(const Tokenizer *t, const char *inp_rel, int after_bos) {
    char path[512], shown[200];
    fixture(path, sizeof path, inp_rel);
    char **strs, *mem;
    int n = read_inp(path, &strs, &mem);
    static int ids[MAX_IDS];
    static char text[16384];
    for (int i = 0; i < n; i++) {
        int k = encode(t, strs[i], after_bos, ids);
        if (after_bos) assert_int_equal(ids[0], tok_bos(t));
        decode_all(t, ids, k, text, sizeof text);
        if (strcmp(text, strs[i]) != 0) {
            print_error("%s string %d: '%s' decodes back to", inp_rel, i,
                        show(strs[i], shown, sizeof shown));
            print_error(" '%s'\n", show(text, shown, sizeof shown));
            fail();
        }
    }
    free(strs);
    free(mem);
}

static void spm_round_trips_test_strings(void **state) {
    Tokenizer *t = load_gguf("tokenizers/llama-spm.gguf");
    check_round_trip(t, "tokenizers/llama-spm.inp", 1);
    tok_free(t);
    /* The tiny 512-piece vocabulary spells most of these in byte tokens. */
    t = load_tiny_bin();
    check_round_trip(t, "tokenizers/llama-spm.inp", 1);
    tok_free(t);
}

static void gpt2_round_trips_test_strings(void **state) {
    Tokenizer *t = load_gguf("tokenizers/gpt-2.gguf");
    check_round_trip(t, "tokenizers/gpt-2.inp", 0);
    tok_free(t);
}

/* ---- the tiny model's prompts and llama2.c's output -------------------------- */

typedef struct {
    char format[16], prompt[512], producer[64];
    int prompt_ids[256], n_prompt;
    int gen_ids[256], n_gen;
} GreedyRow;

/* Undo the C escapes \n \t \\ of greedy.tsv's prompt column. */
static void unescape(const char *s, char *out) {
    for (; *s; s++) {
        if (*s == '\\' && s[1]) {
            s++;
            *out++ = *s == 'n' ? '\n' : *s == 't' ? '\t' : *s;
        } else {
            *out++ = *s;
        }
    }
    *out = 0;
}

/* All rows of tiny/greedy.tsv; returns the count. */
static int read_greedy(GreedyRow *rows, int cap) {
    char path[512];
    fixture(path, sizeof path, "tiny/greedy.tsv");
    char *buf = read_file(path, NULL);
    assert_non_null(buf);
    int n = 0;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        char *col[5] = {0};
        int k = 0;
        for (char *p = line; p && k < 5; k++) {   /* split on tabs, keeping empty columns */
            col[k] = p;
            p = strchr(p, '\t');
            if (p) *p++ = 0;
        }
        assert_int_equal(k, 5);
        assert_non_null(col[4]);
        assert_true(n < cap);
        GreedyRow *r = &rows[n++];
        snprintf(r->format, sizeof r->format, "%s", col[0]);
        unescape(col[1], r->prompt);
        r->n_prompt = parse_ids(col[2], r->prompt_ids, 256);
        r->n_gen = parse_ids(col[3], r->gen_ids, 256);
        snprintf(r->producer, sizeof r->producer, "%s", col[4]);
    }
    free(buf);
    return n;
}

static void check_greedy_prompts(const Tokenizer *t, const char *which) {
    static GreedyRow rows[64];
    int n = read_greedy(rows, 64);
    assert_true(n >= 4);
    int ids[MAX_IDS];
    char what[700], shown[600];
    for (int i = 0; i < n; i++) {
        int k = encode(t, rows[i].prompt, 1, ids);
        snprintf(what, sizeof what, "%s, greedy.tsv row %d prompt '%s'", which, i + 1,
                 show(rows[i].prompt, shown, sizeof shown));
        expect_ids(what, ids, k, rows[i].prompt_ids, rows[i].n_prompt);
    }
}

static void tiny_gguf_encodes_greedy_prompts_with_bos_first(void **state) {
    Tokenizer *t = load_gguf("tiny/tiny-f32.gguf");
    assert_int_equal(tok_n_vocab(t), 512);
    check_greedy_prompts(t, "tiny-f32.gguf");
    tok_free(t);
}

static void tiny_llama2c_encodes_greedy_prompts_with_bos_first(void **state) {
    Tokenizer *t = load_tiny_bin();
    assert_int_equal(tok_n_vocab(t), 512);
    assert_int_equal(tok_bos(t), 1);
    assert_int_equal(tok_eos(t), 2);
    check_greedy_prompts(t, "tokenizer.bin");
    tok_free(t);
}

/* The same vocabulary in two files (U+2581 in GGUF, ' ' in tokenizer.bin)
 * gives the same ids. */
static void llama2c_and_gguf_vocabularies_encode_alike(void **state) {
    Tokenizer *a = load_tiny_bin(), *b = load_gguf("tiny/tiny-f32.gguf");
    char path[512], what[300], shown[200];
    fixture(path, sizeof path, "tokenizers/llama-spm.inp");
    char **strs, *mem;
    int n = read_inp(path, &strs, &mem);
    static int ia[MAX_IDS], ib[MAX_IDS];
    for (int i = 0; i < n; i++) {
        int na = encode(a, strs[i], 1, ia), nb = encode(b, strs[i], 1, ib);
        snprintf(what, sizeof what, "string %d '%s'", i, show(strs[i], shown, sizeof shown));
        expect_ids(what, ib, nb, ia, na);
    }
    free(strs);
    free(mem);
    tok_free(a);
    tok_free(b);
}

/* run.c printed each prompt token after BOS and each generated token with its
 * decoder, then one '\n'. Our decoder must give the same bytes. The F32 rows
 * agree between producers; llama.cpp's are used where present. */
static void check_runc(const Tokenizer *t, const char *which) {
    static GreedyRow rows[64];
    int n = read_greedy(rows, 64);
    const GreedyRow *pick[8] = {0};
    int n_prompts = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(rows[i].format, "f32") != 0) continue;
        int k = 0;
        while (k < n_prompts && strcmp(pick[k]->prompt, rows[i].prompt) != 0) k++;
        if (k == n_prompts) pick[n_prompts++] = &rows[i];
        else if (strcmp(rows[i].producer, "llama.cpp") == 0) pick[k] = &rows[i];
    }
    assert_int_equal(n_prompts, 4);
    for (int k = 0; k < n_prompts; k++) {
        char rel[64], path[512];
        snprintf(rel, sizeof rel, "tiny/runc/%d.txt", k);
        fixture(path, sizeof path, rel);
        size_t size = 0;
        char *want = read_file(path, &size);
        assert_non_null(want);
        int ids[512];
        int m = 0;
        for (int i = 0; i < pick[k]->n_prompt; i++) ids[m++] = pick[k]->prompt_ids[i];
        for (int i = 0; i < pick[k]->n_gen; i++) ids[m++] = pick[k]->gen_ids[i];
        char got[8192];
        size_t w = decode_all(t, ids, m, got, sizeof got - 1);
        got[w++] = '\n';   /* run.c's closing printf("\n") */
        got[w] = 0;
        if (w != size || memcmp(got, want, size) != 0) {
            size_t i = 0;
            while (i < w && i < size && got[i] == want[i]) i++;
            print_error("%s, runc/%d.txt: first difference at byte %zu of %zu (we have %zu)\n",
                        which, k, i, size, w);
            fail();
        }
        free(want);
    }
}

static void decoding_prompt_and_greedy_ids_reproduces_runc_output(void **state) {
    Tokenizer *t = load_tiny_bin();
    check_runc(t, "tokenizer.bin");
    tok_free(t);
    t = load_gguf("tiny/tiny-f32.gguf");
    check_runc(t, "tiny-f32.gguf");
    tok_free(t);
}

/* ---- hand-made vocabularies: the merge rules on cases worked by hand ------- */

/* A llama2.c tokenizer.bin: <unk>, BOS, EOS, the 256 byte tokens, then the
 * given pieces and scores. Returns the path of a temporary file. */
static const char *write_spm_bin(char *path, size_t cap, const char **pieces, const float *scores,
                                 int n) {
    static unsigned char buf[8192];
    size_t w = 0;
    int32_t max_len = 16;
    memcpy(buf, &max_len, 4);
    w = 4;
    for (int id = 0; id < 3 + 256 + n; id++) {
        char piece[16];
        float score = 0;
        if (id == 0) snprintf(piece, sizeof piece, "<unk>");
        else if (id == 1) snprintf(piece, sizeof piece, "\n<s>\n");
        else if (id == 2) snprintf(piece, sizeof piece, "\n</s>\n");
        else if (id < 259) snprintf(piece, sizeof piece, "<0x%02X>", id - 3);
        else {
            snprintf(piece, sizeof piece, "%s", pieces[id - 259]);
            score = scores[id - 259];
        }
        int32_t len = (int32_t)strlen(piece);
        memcpy(buf + w, &score, 4);
        memcpy(buf + w + 4, &len, 4);
        memcpy(buf + w + 8, piece, (size_t)len);
        w += 8 + (size_t)len;
    }
    return write_temp(path, cap, buf, w);
}

/* Pieces " ", "a", "b", "c", " a", "ab", "bc", "abc", "aa" are ids 259..267. */
static const char *HAND_PIECES[] = {" ", "a", "b", "c", " a", "ab", "bc", "abc", "aa"};
static const float HAND_SCORES[] = {-9, -9, -9, -9, -5, -3, -1, -2, -4};

static void spm_merges_the_highest_scoring_pair_first(void **state) {
    char path[64];
    write_spm_bin(path, sizeof path, HAND_PIECES, HAND_SCORES, 9);
    Tokenizer *t;
    Err e;
    assert_int_equal(tok_from_llama2c(&t, path, 3 + 256 + 9, &e), ST_OK);
    unlink(path);
    int ids[16];
    /* " abc": pairs " a" -5, "ab" -3, "bc" -1. "bc" wins although "ab" is
     * further left; then "a"+"bc" = "abc" (-2) beats " a" (-5); " abc" is no
     * piece, so we end with " " "abc". A left-to-right greedy would give
     * " a" "bc". */
    int n = encode(t, "abc", 0, ids);
    int want1[] = {259, 266};
    expect_ids("'abc'", ids, n, want1, 2);
    /* Equal scores: the leftmost pair merges first. " aaa" -> " a" (-5) loses
     * to "aa" (-4) at positions 1-2 and 2-3; the left one wins: " " "aa" "a". */
    n = encode(t, "aaa", 0, ids);
    int want2[] = {259, 267, 260};
    expect_ids("'aaa'", ids, n, want2, 3);
    /* A character the vocabulary lacks falls back to its bytes: 'é' is C3 A9,
     * byte token <0xNN> is id 3 + NN. */
    n = encode(t, "\xC3\xA9", 0, ids);
    int want3[] = {259, 3 + 0xC3, 3 + 0xA9};
    expect_ids("'\\xC3\\xA9'", ids, n, want3, 3);
    tok_free(t);
}

/* ---- streaming UTF-8 decoding --------------------------------------------- */

/* A token whose text is the single byte b, in a sentencepiece vocabulary with
 * byte fallback: the last id of encoding 0xFF then b. A byte that is no
 * character on its own gives its byte token <0xNN>; an ASCII letter gives its
 * own piece (0xFF keeps it from merging with the dummy-prefix space). */
static int byte_token(const Tokenizer *t, unsigned char b) {
    char s[3] = {(char)0xFF, (char)b, 0};
    int ids[8];
    int n = encode(t, s, 0, ids);
    return ids[n - 1];
}

static int decode_one(const Tokenizer *t, TokDecoder *d, int id, const char *want) {
    char out[TOK_MAX_PIECE];
    int n = tok_decode(t, d, id, out);
    assert_int_equal(n, (int)strlen(want));
    assert_memory_equal(out, want, (size_t)n);
    return n;
}

static void utf8_character_split_across_byte_tokens_is_emitted_once_complete(void **state) {
    Tokenizer *t = load_tiny_bin();
    TokDecoder d;
    tok_decoder_init(&d);
    decode_one(t, &d, byte_token(t, 0xC3), "");
    assert_int_equal(d.n_pending, 1);
    decode_one(t, &d, byte_token(t, 0xA9), "\xC3\xA9");
    assert_int_equal(d.n_pending, 0);
    /* A four-byte character, one byte at a time: only the last one prints. */
    const unsigned char llama[] = {0xF0, 0x9F, 0xA6, 0x99};
    for (int i = 0; i < 3; i++) decode_one(t, &d, byte_token(t, llama[i]), "");
    decode_one(t, &d, byte_token(t, llama[3]), "\xF0\x9F\xA6\x99");

    /* The same through encoding: every chunk the decoder hands out is whole
     * UTF-8, and together they are the text. */
    const char *text = "caf\xC3\xA9 \xF0\x9F\xA6\x99 \xE2\x9C\x85!";
    int ids[64];
    int n = encode(t, text, 1, ids);
    char all[256], out[TOK_MAX_PIECE];
    size_t w = 0;
    tok_decoder_init(&d);
    for (int i = 0; i < n; i++) {
        int k = tok_decode(t, &d, ids[i], out);
        assert_true(is_valid_utf8((unsigned char *)out, (size_t)k));
        memcpy(all + w, out, (size_t)k);
        w += (size_t)k;
    }
    assert_int_equal(tok_decode_flush(&d, out), 0);
    all[w] = 0;
    assert_string_equal(all, text);
    tok_free(t);
}

static void gpt2_emoji_split_across_tokens_is_emitted_once_complete(void **state) {
    Tokenizer *t = load_gguf("tokenizers/gpt-2.gguf");
    const char *text = " this is \xF0\x9F\xA6\x99.cpp \xE4\xBD\xA0\xE5\xA5\xBD";
    int ids[64];
    int n = encode(t, text, 0, ids);
    TokDecoder d;
    tok_decoder_init(&d);
    char all[256], out[TOK_MAX_PIECE];
    size_t w = 0;
    int held = 0;   /* tokens that ended inside a character */
    for (int i = 0; i < n; i++) {
        int k = tok_decode(t, &d, ids[i], out);
        assert_true(is_valid_utf8((unsigned char *)out, (size_t)k));
        held += d.n_pending > 0;
        memcpy(all + w, out, (size_t)k);
        w += (size_t)k;
    }
    all[w] = 0;
    assert_string_equal(all, text);
    assert_true(held > 0);   /* GPT-2 does split the llama emoji across tokens */
    tok_free(t);
}

static void invalid_bytes_flush_as_replacement_character(void **state) {
    Tokenizer *t = load_tiny_bin();
    const char *FFFD = "\xEF\xBF\xBD";
    TokDecoder d;
    char out[TOK_MAX_PIECE], want[32];
    tok_decoder_init(&d);
    /* 0xFF never occurs in UTF-8. */
    decode_one(t, &d, byte_token(t, 0xFF), FFFD);
    /* A lead byte followed by a non-continuation: U+FFFD, then the byte. */
    decode_one(t, &d, byte_token(t, 0xC3), "");
    snprintf(want, sizeof want, "%sA", FFFD);
    decode_one(t, &d, byte_token(t, 'A'), want);
    /* E2 82 is a valid start of a three-byte character cut short: one U+FFFD. */
    decode_one(t, &d, byte_token(t, 0xE2), "");
    decode_one(t, &d, byte_token(t, 0x82), "");
    assert_int_equal(tok_decode_flush(&d, out), 3);
    assert_string_equal(out, FFFD);
    assert_int_equal(tok_decode_flush(&d, out), 0);
    /* ED A0 would start a UTF-16 surrogate: both bytes are invalid. */
    decode_one(t, &d, byte_token(t, 0xED), "");
    snprintf(want, sizeof want, "%s%s", FFFD, FFFD);
    decode_one(t, &d, byte_token(t, 0xA0), want);
    tok_free(t);
}

/* A character that breaks off is one U+FFFD for the part that was valid, not
 * one per byte; the byte that broke it is looked at again. E2 82 is the start
 * of a three-byte character; F0 9F A6 of a four-byte one; then a letter,
 * or a byte that begins a character of its own. */
static void a_broken_character_is_one_replacement_not_one_per_byte(void **state) {
    Tokenizer *t = load_tiny_bin();
    const char *FFFD = "\xEF\xBF\xBD";
    const struct {
        unsigned char in[5];
        int n;
        const char *tail;   /* after the one U+FFFD */
    } cases[] = {
        {{0xE2, 0x82, 'A'}, 3, "A"},
        {{0xF0, 0x9F, 0xA6, 'x'}, 4, "x"},
        {{0xE2, 0x82, 0xC3, 0xA9}, 4, "\xC3\xA9"},   /* the breaking byte starts an e-acute */
    };
    for (int c = 0; c < 3; c++) {
        TokDecoder d;
        tok_decoder_init(&d);
        char out[TOK_MAX_PIECE], all[64], want[64];
        int w = 0;
        for (int i = 0; i < cases[c].n; i++) {
            int k = tok_decode(t, &d, byte_token(t, cases[c].in[i]), out);
            memcpy(all + w, out, (size_t)k);
            w += k;
        }
        w += tok_decode_flush(&d, all + w);
        snprintf(want, sizeof want, "%s%s", FFFD, cases[c].tail);
        if (w != (int)strlen(want) || memcmp(all, want, (size_t)w))
            fail_msg("case %d: %d bytes out, want %d (one U+FFFD, then \"%s\")", c, w, (int)strlen(want),
                     cases[c].tail);
    }
    tok_free(t);
}

static void control_tokens_decode_to_nothing(void **state) {
    Tokenizer *s = load_gguf("tokenizers/llama-spm.gguf"), *g = load_gguf("tokenizers/gpt-2.gguf");
    TokDecoder d;
    char out[TOK_MAX_PIECE];
    tok_decoder_init(&d);
    assert_int_equal(tok_decode(s, &d, tok_bos(s), out), 0);
    assert_int_equal(tok_decode(s, &d, tok_eos(s), out), 0);
    tok_decoder_init(&d);
    assert_int_equal(tok_decode(g, &d, tok_eos(g), out), 0);   /* <|endoftext|> */
    assert_string_equal(out, "");
    tok_free(s);
    tok_free(g);
}

/* llama2.c drops the leading space of the first piece after BOS (the space
 * the encoder added); without BOS before it the space stays. */
static void leading_space_is_dropped_only_after_bos(void **state) {
    Tokenizer *t = load_gguf("tokenizers/llama-spm.gguf");
    int ids[8];
    assert_int_equal(encode(t, "Hello", 0, ids), 1);   /* one piece, "▁Hello" */
    TokDecoder d;
    tok_decoder_init(&d);
    decode_one(t, &d, ids[0], " Hello");
    tok_decoder_init(&d);
    decode_one(t, &d, tok_bos(t), "");
    decode_one(t, &d, ids[0], "Hello");
    decode_one(t, &d, ids[0], " Hello");
    tok_free(t);
}

/* ---- encoding edge cases --------------------------------------------------- */

static void empty_text_encodes_to_bos_alone_or_nothing(void **state) {
    Tokenizer *s = load_gguf("tokenizers/llama-spm.gguf"), *g = load_gguf("tokenizers/gpt-2.gguf");
    int ids[4];
    assert_int_equal(encode(s, "", 0, ids), 0);
    assert_int_equal(encode(s, "", 1, ids), 1);
    assert_int_equal(ids[0], tok_bos(s));
    assert_int_equal(encode(g, "", 1, ids), 0);   /* GPT-2 starts without BOS */
    assert_int_equal(encode(g, "Hello", 1, ids), 1);
    assert_int_not_equal(ids[0], tok_bos(g));
    tok_free(s);
    tok_free(g);
}

static void encode_reports_too_small_cap(void **state) {
    Tokenizer *t = load_gguf("tokenizers/llama-spm.gguf");
    int ids[2];
    Err e;
    assert_int_equal(tok_encode(t, "Hello, world!", 1, ids, 2, &e), ST_ARG);
    assert_non_null(strstr(e.msg, "needs 5 token ids"));
    tok_free(t);
}

/* Invalid UTF-8 in the input is encoded byte by byte, never dropped; the
 * decoder turns those bytes into U+FFFD. */
static void invalid_utf8_input_keeps_every_byte(void **state) {
    Tokenizer *s = load_gguf("tokenizers/llama-spm.gguf"), *g = load_gguf("tokenizers/gpt-2.gguf");
    const char *text = "ab\xFF" "cd \xC3(\xE2\x82";
    const char *want = "ab\xEF\xBF\xBD" "cd \xEF\xBF\xBD(\xEF\xBF\xBD";
    int ids[64];
    char out[256];
    int n = encode(s, text, 1, ids);
    decode_all(s, ids, n, out, sizeof out);
    assert_string_equal(out, want);
    n = encode(g, text, 0, ids);
    decode_all(g, ids, n, out, sizeof out);
    assert_string_equal(out, want);
    tok_free(s);
    tok_free(g);
}

/* The pre-tokenizer on its own, cuts worked out by hand: a run of spaces
 * gives its last space to the word after it, contractions and symbol runs
 * are cut off, a NUL is a character like another, and a run of bytes that
 * are not UTF-8 is one pre-token. Two walks share one compiled pattern. */
static void pre_tokenizer_cuts_text_as_gpt2_does(void **state) {
    static const char text[] = "Hello  world's 42!!\n\n x\xFF\xFEy\0z";
    static const char *const want[] = {"Hello", " ", " world", "'s", " 42", "!!", "\n\n",
                                       " x", "\xFF\xFE", "y", "\0", "z"};
    const size_t want_len[] = {5, 1, 6, 2, 3, 2, 2, 2, 2, 1, 1, 1};
    TokPattern pat;
    Err e;
    assert_int_equal(tok_pattern_init(&pat, &e), ST_OK);
    for (int walk = 0; walk < 2; walk++) {
        TokSplitter sp;
        assert_int_equal(tok_splitter_init(&sp, &pat, text, sizeof text - 1, &e), ST_OK);
        size_t start, end, at = 0;
        int k = 0;
        while (tok_splitter_next(&sp, &start, &end, &e) == 1) {
            assert_true(k < 12);
            assert_int_equal(start, at);   /* back to back: nothing skipped */
            assert_int_equal(end - start, want_len[k]);
            assert_memory_equal(text + start, want[k], want_len[k]);
            at = end;
            k++;
        }
        assert_int_equal(k, 12);
        assert_int_equal(at, sizeof text - 1);
        assert_int_equal(tok_splitter_next(&sp, &start, &end, &e), 0);   /* and stays done */
        tok_splitter_free(&sp);
        tok_splitter_free(&sp);   /* freeing twice is harmless */
    }
    tok_pattern_free(&pat);
    tok_pattern_free(&pat);
}

/* The pre-tokens of text under the rules tokenizer.ggml.pre calls name,
 * joined by '|', into out. */
static void cut_with(const char *name, const char *text, char *out, size_t cap) {
    TokPattern pat;
    TokSplitter sp;
    Err e;
    size_t start, end, w = 0, at = 0;
    int st = tok_pattern_init_named(&pat, name, &e);
    if (st != ST_OK) print_error("%s\n", e.msg);
    assert_int_equal(st, ST_OK);
    assert_int_equal(tok_splitter_init(&sp, &pat, text, strlen(text), &e), ST_OK);
    while (tok_splitter_next(&sp, &start, &end, &e) == 1) {
        assert_int_equal(start, at);   /* back to back: nothing skipped */
        assert_true(end > start && w + (end - start) + 2 < cap);
        if (w > 0) out[w++] = '|';
        memcpy(out + w, text + start, end - start);
        w += end - start;
        at = end;
    }
    out[w] = 0;
    assert_int_equal(at, strlen(text));
    tok_splitter_free(&sp);
    tok_pattern_free(&pat);
}

/* One sample through every family of rules, the cuts worked out by hand
 * from each name's patterns (tokenizer.c, notes/tokenizer.md): where the
 * number goes (whole, in threes, digit by digit, space apart or not),
 * whether "'T" is a contraction, whether newlines stand alone. */
static void each_pre_tokenizer_cuts_as_its_rules_say(void **state) {
    static const char text[] = "abc 12345 don'T\n\n";
    static const struct {
        const char *name, *want;
    } cases[] = {
        {"gpt-2", "abc| 12345| don|'|T|\n\n"},
        {"mpt", "abc| 12345| don|'|T|\n\n"},
        {"llama-bpe", "abc| |123|45| don|'T|\n\n"},
        {"llama3", "abc| |123|45| don|'T|\n\n"},
        {"qwen2", "abc| |1|2|3|4|5| don|'T|\n\n"},
        {"starcoder", "abc| |1|2|3|4|5| don|'|T|\n\n"},
        {"refact", "abc| |1|2|3|4|5| don|'|T|\n\n"},
        {"command-r", "abc| |1|2|3|4|5| don|'|T|\n\n"},
        {"smollm", "abc| |1|2|3|4|5| don|'|T|\n\n"},
        {"default", "abc| |123|45| don|'|T|\n\n"},
        {"falcon", "abc| |123|45| don|'|T|\n\n"},
        {"deepseek-llm", "abc| |12345| don|'|T|\n|\n"},
        {"deepseek-coder", "abc| |1|2|3|4|5| don|'|T|\n|\n"},
        {"deepseek-v3", "abc| |123|45| don|'T|\n\n"},
        {"bloom", "abc| 12345| don'T|\n\n"},
    };
    char got[256], shown[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cut_with(cases[i].name, text, got, sizeof got);
        if (strcmp(got, cases[i].want) != 0) {
            print_error("%s cuts it as '%s',", cases[i].name, show(got, shown, sizeof shown));
            print_error(" want '%s'\n", show(cases[i].want, shown, sizeof shown));
            fail();
        }
    }
    /* Falcon's first pattern takes ` into a punctuation run, the default
     * rules' leaves it to be cut off by GPT-2's; DeepSeek LLM keeps
     * ideographs apart from Latin letters. */
    cut_with("falcon", "a`!b", got, sizeof got);
    assert_string_equal(got, "a|`!|b");
    cut_with("default", "a`!b", got, sizeof got);
    assert_string_equal(got, "a|`|!|b");
    cut_with("deepseek-llm", "\xE4\xBD\xA0\xE5\xA5\xBDworld", got, sizeof got);   /* 你好world */
    assert_string_equal(got, "\xE4\xBD\xA0\xE5\xA5\xBD|world");
}

/* A long text (every test string, many times, 512 KiB) encodes and decodes
 * back, and quickly: the merges cost O(n log n) and the pattern is matched
 * once per word. A quadratic slip (say, PCRE2 re-checking the UTF-8 of the
 * rest of the text at every word) takes tens of seconds here under ASan;
 * the limit leaves a wide margin for a slow, busy machine. */
static void long_text_round_trips(void **state) {
    char path[512];
    fixture(path, sizeof path, "tokenizers/gpt-2.inp");
    char **strs, *mem;
    int n = read_inp(path, &strs, &mem);
    size_t cap = 1 << 20, w = 0;
    char *text = malloc(cap), *back = malloc(cap);
    for (int rep = 0; w < cap / 2; rep++)
        for (int i = 0; i < n; i++) w += (size_t)snprintf(text + w, cap - w, "%s\n", strs[i]);
    int max_ids = (int)w + 2;
    int *ids = malloc((size_t)max_ids * sizeof *ids);
    const char *names[] = {"tokenizers/llama-spm.gguf", "tokenizers/gpt-2.gguf"};
    for (int k = 0; k < 2; k++) {
        Tokenizer *t = load_gguf(names[k]);
        Err e;
        clock_t start = clock();
        int m = tok_encode(t, text, k == 0, ids, max_ids, &e);
        double seconds = (double)(clock() - start) / CLOCKS_PER_SEC;
        assert_true(m > 0);
        if (seconds > 5.0) {
            print_error("%s: encoding %zu bytes took %.1f s of CPU; is it quadratic?\n", names[k],
                        w, seconds);
            fail();
        }
        decode_all(t, ids, m, back, cap);
        assert_true(strcmp(back, text) == 0);
        tok_free(t);
    }
    free(ids);
    free(text);
    free(back);
    free(strs);
    free(mem);
}

/* Long runs that a pattern may try from every position: 128 KiB of spaces
 * before a digit, of tabs before a letter, of newlines, through every
 * family of rules. Each walk is linear; written naively, DeepSeek LLM's
 * \s+$ took over ten seconds here (every space of the run started a try
 * that ran to its end). */
static void pre_tokenizers_stay_linear_on_long_runs(void **state) {
    static const char *const names[] = {"gpt-2", "default", "llama-bpe", "qwen2",
                                        "deepseek-llm", "deepseek-coder", "deepseek-v3",
                                        "falcon", "starcoder", "bloom", "viking"};
    static const char units[] = " \t\n", tails[] = "1a ";
    size_t n = 128 << 10;
    char *text = malloc(n + 2);
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        TokPattern pat;
        Err e;
        assert_int_equal(tok_pattern_init_named(&pat, names[k], &e), ST_OK);
        clock_t start = clock();
        for (int u = 0; u < 3; u++) {
            memset(text, units[u], n);
            text[n] = tails[u];
            TokSplitter sp;
            size_t a, b, at = 0;
            assert_int_equal(tok_splitter_init(&sp, &pat, text, n + 1, &e), ST_OK);
            while (tok_splitter_next(&sp, &a, &b, &e) == 1) at = b;
            assert_int_equal(at, n + 1);
            tok_splitter_free(&sp);
        }
        double seconds = (double)(clock() - start) / CLOCKS_PER_SEC;
        if (seconds > 5.0) {
            print_error("%s: cutting 3 x 128 KiB took %.1f s of CPU; is it quadratic?\n", names[k],
                        seconds);
            fail();
        }
        tok_pattern_free(&pat);
    }
    free(text);
}

/* ---- corrupt files ----------------------------------------------------------- */

static void expect_load_error(const char *path, int n_vocab, int want_st, const char *want_msg) {
    Tokenizer *t = (Tokenizer *)1;
    Err e = {{0}};
    int st = tok_from_llama2c(&t, path, n_vocab, &e);
    if (st != want_st || !strstr(e.msg, path) || (want_msg && !strstr(e.msg, want_msg))) {
        print_error("loading %s: got %s '%s', want %s with '%s'\n", path, status_name(st), e.msg,
                    status_name(want_st), want_msg ? want_msg : "");
        fail();
    }
    assert_null(t);
}

static void llama2c_rejects_truncated_file_at_every_cut(void **state) {
    char path[512], tmp[64];
    fixture(path, sizeof path, "tiny/tokenizer.bin");
    size_t size = 0;
    char *data = read_file(path, &size);
    write_temp(tmp, sizeof tmp, data, size);
    for (size_t cut = size; cut-- > 0;) {
        assert_int_equal(truncate(tmp, (off_t)cut), 0);
        expect_load_error(tmp, 512, ST_FORMAT, cut ? "truncated at offset" : "empty file");
    }
    unlink(tmp);
    free(data);
}

/* Offset of token id's length field in a tokenizer.bin image. */
static size_t length_offset(const unsigned char *data, int id) {
    size_t off = 4;
    for (int i = 0; i < id; i++) {
        int32_t len;
        memcpy(&len, data + off + 4, 4);
        off += 8 + (size_t)len;
    }
    return off + 4;
}

static void llama2c_rejects_bad_lengths_and_scores(void **state) {
    char path[512], tmp[64], want[64];
    fixture(path, sizeof path, "tiny/tokenizer.bin");
    size_t size = 0;
    unsigned char *data = read_file(path, &size);
    unsigned char *bad = malloc(size);
    int32_t v;
    float f;

    size_t at = length_offset(data, 300);
    int32_t lens[] = {-3, 7 /* > max_token_length 6 */, 1 << 30, INT32_MIN};
    for (int i = 0; i < 4; i++) {
        memcpy(bad, data, size);
        memcpy(bad + at, &lens[i], 4);
        write_temp(tmp, sizeof tmp, bad, size);
        snprintf(want, sizeof want, "token 300 has length %d at offset %zu", (int)lens[i], at);
        expect_load_error(tmp, 512, ST_FORMAT, want);
        unlink(tmp);
    }

    memcpy(bad, data, size);
    v = -1;
    memcpy(bad, &v, 4);   /* max_token_length */
    write_temp(tmp, sizeof tmp, bad, size);
    expect_load_error(tmp, 512, ST_FORMAT, "max_token_length -1 at offset 0");
    unlink(tmp);

    memcpy(bad, data, size);
    f = NAN;
    memcpy(bad + at - 4, &f, 4);   /* the score of token 300 */
    write_temp(tmp, sizeof tmp, bad, size);
    expect_load_error(tmp, 512, ST_FORMAT, "token 300 has a score that is not a number");
    unlink(tmp);

    /* The wrong vocabulary size: bytes left over, or too few. */
    expect_load_error(path, 511, ST_FORMAT, "unexpected bytes");
    expect_load_error(path, 513, ST_FORMAT, "truncated at offset 6217 reading the score of token 512");
    expect_load_error("/nonexistent/tokenizer.bin", 512, ST_IO, "cannot open");
    free(bad);
    free(data);
}

/* A GGUF file of metadata only: n_kv string-valued or string-array keys. */
typedef struct {
    unsigned char b[4096];
    size_t n;
    int n_kv;
} GgufImage;

static void put(GgufImage *g, const void *p, size_t n) {
    assert_true(g->n + n <= sizeof g->b);
    memcpy(g->b + g->n, p, n);
    g->n += n;
}

static void put_str(GgufImage *g, const char *s) {
    uint64_t n = strlen(s);
    put(g, &n, 8);
    put(g, s, n);
}

static void kv_str(GgufImage *g, const char *key, const char *val) {
    uint32_t type = GG_STRING;
    put_str(g, key);
    put(g, &type, 4);
    put_str(g, val);
    g->n_kv++;
}

static void kv_strs(GgufImage *g, const char *key, const char **vals, int n) {
    uint32_t type = GG_ARRAY, et = GG_STRING;
    uint64_t count = (uint64_t)n;
    put_str(g, key);
    put(g, &type, 4);
    put(g, &et, 4);
    put(g, &count, 8);
    for (int i = 0; i < n; i++) put_str(g, vals[i]);
    g->n_kv++;
}

static void kv_u32(GgufImage *g, const char *key, uint32_t val) {
    uint32_t type = GG_U32;
    put_str(g, key);
    put(g, &type, 4);
    put(g, &val, 4);
    g->n_kv++;
}

static void gguf_header(GgufImage *g) {
    uint32_t version = 3;
    uint64_t zero = 0;
    g->n = 0;
    g->n_kv = 0;
    put(g, "GGUF", 4);
    put(g, &version, 4);
    put(g, &zero, 8);   /* tensors */
    put(g, &zero, 8);   /* metadata count, patched by expect_gguf_error */
}

static void expect_gguf_error(GgufImage *img, int want_st, const char *want_msg) {
    uint64_t n_kv = (uint64_t)img->n_kv;
    memcpy(img->b + 16, &n_kv, 8);
    char tmp[64];
    write_temp(tmp, sizeof tmp, img->b, img->n);
    Gguf g;
    Err e = {{0}};
    assert_int_equal(gguf_open(&g, tmp, &e), ST_OK);
    Tokenizer *t = (Tokenizer *)1;
    int st = tok_from_gguf(&t, &g, &e);
    if (st != want_st || !strstr(e.msg, tmp) || !strstr(e.msg, want_msg)) {
        print_error("got %s '%s', want %s with '%s'\n", status_name(st), e.msg,
                    status_name(want_st), want_msg);
        fail();
    }
    assert_null(t);
    gguf_close(&g);
    unlink(tmp);
}

static void gguf_without_a_usable_tokenizer_is_refused(void **state) {
    GgufImage img;
    gguf_header(&img);
    kv_str(&img, "general.architecture", "llama");
    expect_gguf_error(&img, ST_FORMAT, "missing metadata key tokenizer.ggml.model");

    gguf_header(&img);
    kv_str(&img, "tokenizer.ggml.model", "bert");
    expect_gguf_error(&img, ST_UNSUPPORTED, "'bert' is not supported");

    const char *pieces[] = {"a", "b"};
    gguf_header(&img);
    kv_str(&img, "tokenizer.ggml.model", "llama");
    kv_strs(&img, "tokenizer.ggml.tokens", pieces, 2);
    expect_gguf_error(&img, ST_FORMAT, "missing metadata key tokenizer.ggml.scores");

    /* GPT-2: a merge must name pieces of the vocabulary. */
    gguf_header(&img);
    kv_str(&img, "tokenizer.ggml.model", "gpt2");
    kv_strs(&img, "tokenizer.ggml.tokens", pieces, 2);
    const char *merges[] = {"a c"};
    kv_strs(&img, "tokenizer.ggml.merges", merges, 1);
    expect_gguf_error(&img, ST_FORMAT, "merge 0 'a c' names a piece that is not in the vocabulary");

    /* A left half outside the disguise (a 3-byte character) cannot be
     * decoded: the merge is refused without reading before the buffer. */
    gguf_header(&img);
    kv_str(&img, "tokenizer.ggml.model", "gpt2");
    kv_strs(&img, "tokenizer.ggml.tokens", pieces, 2);
    const char *undecodable[] = {"\xE2\x82\xAC b"};
    kv_strs(&img, "tokenizer.ggml.merges", undecodable, 1);
    expect_gguf_error(&img, ST_FORMAT, "names a piece that is not in the vocabulary");
}

/* Load a GGUF image that must load. */
static Tokenizer *load_image(GgufImage *img) {
    uint64_t n_kv = (uint64_t)img->n_kv;
    memcpy(img->b + 16, &n_kv, 8);
    char tmp[64];
    write_temp(tmp, sizeof tmp, img->b, img->n);
    Gguf g;
    Err e;
    Tokenizer *t = NULL;
    assert_int_equal(gguf_open(&g, tmp, &e), ST_OK);
    int st = tok_from_gguf(&t, &g, &e);
    if (st != ST_OK) print_error("%s\n", e.msg);
    assert_int_equal(st, ST_OK);
    gguf_close(&g);
    unlink(tmp);
    return t;
}

/* A name the table lacks is refused, never cut some other way: by the
 * pre-tokenizer on its own, and when a vocabulary names it (the message
 * names the file, the key and the value). */
static void unknown_pre_tokenizer_is_refused_by_name(void **state) {
    TokPattern pat;
    Err e;
    assert_int_equal(tok_pattern_init_named(&pat, "llama-5", &e), ST_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "'llama-5'"));
    assert_null(pat.re[0]);
    tok_pattern_free(&pat);   /* harmless on a failed one */

    const char *pieces[] = {"a", "b", "ab"}, *merges[] = {"a b"};
    GgufImage img;
    gguf_header(&img);
    kv_str(&img, "tokenizer.ggml.model", "gpt2");
    kv_strs(&img, "tokenizer.ggml.tokens", pieces, 3);
    kv_strs(&img, "tokenizer.ggml.merges", merges, 1);
    kv_str(&img, "tokenizer.ggml.pre", "llama-5");
    expect_gguf_error(&img, ST_UNSUPPORTED, "tokenizer.ggml.pre 'llama-5' is not a pre-tokenizer");

    /* The same file naming a known one loads and merges. */
    gguf_header(&img);
    kv_str(&img, "tokenizer.ggml.model", "gpt2");
    kv_strs(&img, "tokenizer.ggml.tokens", pieces, 3);
    kv_strs(&img, "tokenizer.ggml.merges", merges, 1);
    kv_str(&img, "tokenizer.ggml.pre", "qwen2");
    Tokenizer *t = load_image(&img);
    int ids[4];
    assert_int_equal(encode(t, "ab", 0, ids), 1);
    assert_int_equal(ids[0], 2);
    tok_free(t);
}

/* Llama 3's rules take a word that is itself a piece whole, even when its
 * merges would not rebuild it (llama.cpp's ignore_merges): here "b c" is
 * learned before "a b", so merging "abc" stops at "a" "bc", yet "abc" is a
 * piece. GPT-2's rules merge. Llama 3's also start with BOS unless the file
 * says otherwise. */
static void llama3_rules_take_a_word_that_is_a_piece_whole(void **state) {
    const char *pieces[] = {"a", "b", "c", "ab", "bc", "abc", "<s>"}, *merges[] = {"b c", "a b"};
    const char *names[] = {"gpt-2", "llama-bpe"};
    for (int k = 0; k < 2; k++) {
        GgufImage img;
        gguf_header(&img);
        kv_str(&img, "tokenizer.ggml.model", "gpt2");
        kv_strs(&img, "tokenizer.ggml.tokens", pieces, 7);
        kv_strs(&img, "tokenizer.ggml.merges", merges, 2);
        kv_str(&img, "tokenizer.ggml.pre", names[k]);
        kv_u32(&img, "tokenizer.ggml.bos_token_id", 6);
        Tokenizer *t = load_image(&img);
        int ids[8];
        if (k == 0) {
            assert_int_equal(encode(t, "abc", 1, ids), 2);   /* no BOS for GPT-2 */
            assert_int_equal(ids[0], 0);
            assert_int_equal(ids[1], 4);
        } else {
            assert_int_equal(encode(t, "abc", 1, ids), 2);
            assert_int_equal(ids[0], 6);   /* BOS */
            assert_int_equal(ids[1], 5);   /* "abc" whole */
        }
        tok_free(t);
    }
}

/* GPT-NeoX has a piece of 512 spaces (1,024 bytes in the file's disguise),
 * which decodes whole. A piece longer than the decoder's room (here 2,000
 * bytes, hand-made) still loads, and decodes cut short, the cut marked with
 * U+FFFD, never past the end of out. */
static void pieces_of_any_length_load_and_decode(void **state) {
    Tokenizer *t = load_gguf("tokenizers/gpt-neox.gguf");
    TokDecoder d;
    char out[TOK_MAX_PIECE];
    tok_decoder_init(&d);
    assert_int_equal(tok_decode(t, &d, 19979, out), 512);
    assert_int_equal(strspn(out, " "), 512);
    tok_free(t);

    static char long_piece[2001];
    memset(long_piece, 'a', 2000);
    const char *pieces[] = {"a", long_piece};
    GgufImage img;
    gguf_header(&img);
    kv_str(&img, "tokenizer.ggml.model", "gpt2");
    kv_strs(&img, "tokenizer.ggml.tokens", pieces, 2);
    kv_strs(&img, "tokenizer.ggml.merges", NULL, 0);
    t = load_image(&img);
    tok_decoder_init(&d);
    int n = tok_decode(t, &d, 1, out);
    assert_true(n > 512 && n < TOK_MAX_PIECE);
    assert_int_equal(strspn(out, "a"), n - 3);
    assert_string_equal(out + n - 3, "\xEF\xBF\xBD");
    int ids[4];
    assert_int_equal(encode(t, "aa", 0, ids), 2);   /* no merges: two "a" */
    assert_int_equal(ids[1], 0);
    tok_free(t);
}

/* Falcon's vocabulary has no piece for byte 0x03 and no unknown token. It
 * loads; a text holding that byte is refused with one line naming the file,
 * the byte and where it is; other text encodes. */
static void byte_without_a_piece_is_refused_at_encode_time(void **state) {
    Tokenizer *t = load_gguf("tokenizers/falcon.gguf");
    int ids[16];
    Err e;
    assert_int_equal(tok_encode(t, "ab\x03" "c", 0, ids, 16, &e), ST_ARG);
    assert_non_null(strstr(e.msg, "falcon.gguf"));
    assert_non_null(strstr(e.msg, "no token for byte 0x03 (byte 2 of the text)"));
    assert_true(encode(t, "abc", 0, ids) > 0);
    tok_free(t);
}

/* User-defined pieces are cut out of the text before the pre-tokenizer
 * runs, and are stored as plain UTF-8, not in the byte disguise:
 * DeepSeek's "u with diaeresis" is its own piece, GPT-NeoX's runs of
 * spaces are pieces of their own (GPT-2's rules would have given the
 * second space to "b"). */
static void user_defined_pieces_are_cut_out_first(void **state) {
    Tokenizer *t = load_gguf("tokenizers/deepseek-llm.gguf");
    int ids[16];
    assert_int_equal(encode(t, "\xC3\xBC", 0, ids), 1);
    assert_int_equal(ids[0], 100014);
    TokDecoder d;
    tok_decoder_init(&d);
    decode_one(t, &d, 100014, "\xC3\xBC");
    tok_free(t);

    t = load_gguf("tokenizers/gpt-neox.gguf");
    assert_int_equal(encode(t, "a  b", 0, ids), 3);
    assert_int_equal(ids[1], 50276);   /* "  " */
    tok_decoder_init(&d);
    decode_one(t, &d, ids[1], "  ");
    tok_free(t);
}

/* ---- allocation failures ------------------------------------------------------ */

typedef struct {
    const char *path;     /* tokenizer.bin, or NULL for GGUF */
    const Gguf *g;
    const Tokenizer *t;   /* set: exercise tok_encode instead of loading */
    const char *text;
} Attempt;

static int attempt(const Attempt *a) {
    Err e;
    if (a->t) {
        int ids[MAX_IDS];
        int n = tok_encode(a->t, a->text, 1, ids, MAX_IDS, &e);
        return n < 0 ? n : ST_OK;
    }
    Tokenizer *t = NULL;
    int st = a->path ? tok_from_llama2c(&t, a->path, 512, &e) : tok_from_gguf(&t, a->g, &e);
    if (st == ST_NOMEM) assert_null(t);
    tok_free(t);
    return st;
}

/* Fail the 1st, 2nd, ... allocation until the call succeeds; each failure must
 * be ST_NOMEM and leave no block behind. */
static void fail_each_allocation(const Attempt *a, const char *what) {
    size_t live = mem_stats().live_count;
    int n = 1;
    for (;; n++) {
        mem_fail_after(n);
        int st = attempt(a);
        mem_fail_after(0);
        if (mem_stats().live_count != live) {
            print_error("%s: failing allocation %d leaked %zu blocks\n", what, n,
                        mem_stats().live_count - live);
            fail();
        }
        if (st == ST_OK) break;
        if (st != ST_NOMEM) {
            print_error("%s: failing allocation %d gave %s, want out of memory\n", what, n,
                        status_name(st));
            fail();
        }
    }
    assert_true(n > 1);   /* at least one failure was exercised */
}

static void allocation_failures_return_nomem_without_leaks(void **state) {
    char bin[512], spm[512], gpt2[512], neox[512];
    fixture(bin, sizeof bin, "tiny/tokenizer.bin");
    fixture(spm, sizeof spm, "tokenizers/llama-spm.gguf");
    fixture(gpt2, sizeof gpt2, "tokenizers/gpt-2.gguf");
    /* GPT-NeoX: four patterns in turn, user-defined pieces, long pieces */
    fixture(neox, sizeof neox, "tokenizers/gpt-neox.gguf");
    Attempt a = {.path = bin};
    fail_each_allocation(&a, "loading tokenizer.bin");

    Gguf g;
    Err e;
    const char *paths[] = {spm, gpt2, neox};
    for (int k = 0; k < 3; k++) {
        assert_int_equal(gguf_open(&g, paths[k], &e), ST_OK);
        a = (Attempt){.g = &g};
        fail_each_allocation(&a, paths[k]);
        Tokenizer *t;
        assert_int_equal(tok_from_gguf(&t, &g, &e), ST_OK);
        a = (Attempt){.t = t, .text = "Hello, y'all!  \xF0\x9F\xA6\x99 \xD0\xBD\xD0\xB5 3333 \xFF"};
        fail_each_allocation(&a, "encoding");
        tok_free(t);
        gguf_close(&g);
    }
}

int main(int argc, char **argv) {
    select_tests(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(spm_encodes_llama_vocab_test_vectors),
        cmocka_unit_test(gpt2_encodes_gpt2_vocab_test_vectors),
        cmocka_unit_test(starcoder_encodes_its_test_vectors),
        cmocka_unit_test(falcon_encodes_its_test_vectors),
        cmocka_unit_test(deepseek_llm_encodes_its_test_vectors),
        cmocka_unit_test(gpt_neox_without_a_pre_key_encodes_by_the_default_rules),
        cmocka_unit_test(gpt2_vocab_under_llama_bpe_rules_encodes_as_llama_cpp),
        cmocka_unit_test(gpt2_vocab_under_qwen2_rules_encodes_as_llama_cpp),
        cmocka_unit_test(spm_round_trips_test_strings),
        cmocka_unit_test(gpt2_round_trips_test_strings),
        cmocka_unit_test(tiny_gguf_encodes_greedy_prompts_with_bos_first),
        cmocka_unit_test(tiny_llama2c_encodes_greedy_prompts_with_bos_first),
        cmocka_unit_test(llama2c_and_gguf_vocabularies_encode_alike),
        cmocka_unit_test(decoding_prompt_and_greedy_ids_reproduces_runc_output),
        cmocka_unit_test(spm_merges_the_highest_scoring_pair_first),
        cmocka_unit_test(utf8_character_split_across_byte_tokens_is_emitted_once_complete),
        cmocka_unit_test(gpt2_emoji_split_across_tokens_is_emitted_once_complete),
        cmocka_unit_test(invalid_bytes_flush_as_replacement_character),
        cmocka_unit_test(a_broken_character_is_one_replacement_not_one_per_byte),
        cmocka_unit_test(control_tokens_decode_to_nothing),
        cmocka_unit_test(leading_space_is_dropped_only_after_bos),
        cmocka_unit_test(empty_text_encodes_to_bos_alone_or_nothing),
        cmocka_unit_test(encode_reports_too_small_cap),
        cmocka_unit_test(invalid_utf8_input_keeps_every_byte),
        cmocka_unit_test(pre_tokenizer_cuts_text_as_gpt2_does),
        cmocka_unit_test(each_pre_tokenizer_cuts_as_its_rules_say),
        cmocka_unit_test(long_text_round_trips),
        cmocka_unit_test(pre_tokenizers_stay_linear_on_long_runs),
        cmocka_unit_test(llama2c_rejects_truncated_file_at_every_cut),
        cmocka_unit_test(llama2c_rejects_bad_lengths_and_scores),
        cmocka_unit_test(gguf_without_a_usable_tokenizer_is_refused),
        cmocka_unit_test(unknown_pre_tokenizer_is_refused_by_name),
        cmocka_unit_test(llama3_rules_take_a_word_that_is_a_piece_whole),
        cmocka_unit_test(pieces_of_any_length_load_and_decode),
        cmocka_unit_test(byte_without_a_piece_is_refused_at_encode_time),
        cmocka_unit_test(user_defined_pieces_are_cut_out_first),
        cmocka_unit_test(allocation_failures_return_nomem_without_leaks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
