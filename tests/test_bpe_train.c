/* test_bpe_train.c - the BPE trainer (src/train/bpe_learn.c) against slower, independent
 * answers, and against the engine's own tokenizer.
 *
 *  - A naive trainer written here, which recounts every pair of every word
 *    before each merge, must choose the same merges with the same counts as
 *    the incremental one; on small texts it also cuts the words itself.
 *  - The engine (gguf_open, tok_from_gguf, tok_encode, tok_decode) loads the
 *    file the trainer writes, must encode the training text to exactly the
 *    tokens the trainer ended with, and must decode any text back to itself.
 *  - Properties: ties, vocabulary size, pre-token boundaries, token length,
 *    distinct tokens, determinism, allocation failures.
 *
 * Text from ../shared/corpus (override with CORPUS_DIR=dir) is used in slices, to
 * stay fast under the sanitizers; without it those tests are skipped, and
 * under CI (CI=true) they fail. */
#include "testutil.h"
#include "train/bpe_learn.h"
#include "load/gguf.h"
#include "base/mem.h"
#include "text/tokenizer.h"
#include <ctype.h>

/* ---- helpers --------------------------------------------------------------- */

/* The corpus text into malloc'd memory (NUL-terminated), or NULL after a skip
 * (or a failure under CI). */
static char *load_corpus(size_t *size) {
    char path[512];
    if (!corpus_file(path, sizeof path)) return NULL;
    char *text = read_file(path, size);
    assert_non_null(text);
    return text;
}

static void train(Bpe *b, const char *text, size_t n, int vocab) {
    Err e;
    int st = bpe_train(b, text, n, vocab, &e);
    if (st != ST_OK) print_error("bpe_train: %s\n", e.msg);
    assert_int_equal(st, ST_OK);
}

/* A fresh temporary file name (the file exists, empty). */
static void temp_path(char *path, size_t cap) {
    snprintf(path, cap, "/tmp/bpe-test-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
}

/* Write b as GGUF and load it with the engine's own loader. */
static Tokenizer *load_in_engine(const Bpe *b) {
    char path[64];
    temp_path(path, sizeof path);
    Err e;
    Gguf g;
    Tokenizer *t = NULL;
    int st = bpe_write_gguf(b, path, &e);
    if (st == ST_OK) st = gguf_open(&g, path, &e);
    if (st == ST_OK) {
        st = tok_from_gguf(&t, &g, &e);
        gguf_close(&g);
    }
    unlink(path);
    if (st != ST_OK) print_error("%s\n", e.msg);
    assert_int_equal(st, ST_OK);
    return t;
}

/* The engine's ids for text (NUL-terminated), malloc'd; count in *n. */
static int *engine_encode(const Tokenizer *t, const char *text, size_t *n) {
    size_t len = strlen(text);
    int *ids = malloc((len + 1) * sizeof *ids);
    assert_non_null(ids);
    Err e;
    int got = tok_encode(t, text, 0, ids, (int)len + 1, &e);
    if (got < 0) print_error("tok_encode: %s\n", e.msg);
    assert_true(got >= 0);
    *n = (size_t)got;
    return ids;
}

/* The trainer's ids for text[0..n), malloc'd; count in *n_ids. */
static int *trainer_segment(const Bpe *b, const char *text, size_t n, size_t *n_ids) {
    int *ids = malloc((n + 1) * sizeof *ids);
    assert_non_null(ids);
    Err e;
    int st = bpe_segment(b, text, n, ids, n + 1, n_ids, &e);
    if (st != ST_OK) print_error("bpe_segment: %s\n", e.msg);
    assert_int_equal(st, ST_OK);
    return ids;
}

static void expect_same_ids(const char *what, const int *got, size_t n_got, const int *want,
                            size_t n_want) {
    size_t i = 0;
    while (i < n_got && i < n_want && got[i] == want[i]) i++;
    if (i == n_got && i == n_want) return;
    print_error("%s: first difference at id %zu (of %zu, want %zu): got %d, want %d\n", what, i,
                n_got, n_want, i < n_got ? got[i] : -1, i < n_want ? want[i] : -1);
    fail();
}

/* The engine encodes text to the trainer's tokens (text must be the text
 * the trainer learned from, NUL-terminated). */
static void expect_engine_agrees(const Bpe *b, const char *text) {
    Tokenizer *t = load_in_engine(b);
    size_t n_got, n_want;
    int *got = engine_encode(t, text, &n_got);
    int *want = trainer_segment(b, text, strlen(text), &n_want);
    expect_same_ids("engine vs trainer", got, n_got, want, n_want);
    assert_int_equal(n_want, b->n_tokens);
    free(got);
    free(want);
    tok_free(t);
}

/* decode(encode(text)) == text through the engine. */
static void expect_round_trip(const Tokenizer *t, const char *text) {
    size_t n_ids, len = strlen(text);
    int *ids = engine_encode(t, text, &n_ids);
    char *back = malloc(len + TOK_MAX_PIECE);
    assert_non_null(back);
    char piece[TOK_MAX_PIECE];
    TokDecoder d;
    tok_decoder_init(&d);
    size_t w = 0;
    for (size_t i = 0; i <= n_ids; i++) {
        int k = i < n_ids ? tok_decode(t, &d, ids[i], piece) : tok_decode_flush(&d, piece);
        assert_true(k >= 0 && w + (size_t)k <= len);
        memcpy(back + w, piece, (size_t)k);
        w += (size_t)k;
    }
    assert_int_equal(w, len);
    size_t i = 0;
    while (i < len && back[i] == text[i]) i++;
    if (i < len) print_error("decode(encode(text)) differs from the text at byte %zu\n", i);
    assert_int_equal(i, len);
    free(back);
    free(ids);
}

static const char *token_text(const Bpe *b, int id) { return b->tok_text + b->tokens[id].off; }

/* ---- the naive trainer ------------------------------------------------------ */

/* Words as arrays of token ids, with counts; merges are chosen by counting
 * every pair of every word from scratch, then applied to every word. */
typedef struct {
    int n_words;
    int **sym;       /* (n_words) each word's ids */
    int *len;        /* (n_words) */
    int64_t *count;  /* (n_words) */
    int *tok_len;    /* bytes of each token id */
    int64_t *pair;   /* (V * V) scratch counts */
    int V;           /* room for this many ids */
} Naive;

static void naive_init(Naive *nv, int V) {
    memset(nv, 0, sizeof *nv);
    nv->V = V;
    nv->tok_len = calloc((size_t)V, sizeof *nv->tok_len);
    nv->pair = calloc((size_t)V * (size_t)V, sizeof *nv->pair);
    assert_true(nv->tok_len && nv->pair);
    for (int c = 0; c < 256; c++) nv->tok_len[c] = 1;
}

static void naive_add_word(Naive *nv, const char *s, int len, int64_t count) {
    for (int w = 0; w < nv->n_words; w++) {   /* slow, and obviously right */
        int same = nv->len[w] == len;
        for (int i = 0; same && i < len; i++) same = nv->sym[w][i] == (unsigned char)s[i];
        if (same) {
            nv->count[w] += count;
            return;
        }
    }
    int w = nv->n_words++;
    nv->sym = realloc(nv->sym, (size_t)nv->n_words * sizeof *nv->sym);
    nv->len = realloc(nv->len, (size_t)nv->n_words * sizeof *nv->len);
    nv->count = realloc(nv->count, (size_t)nv->n_words * sizeof *nv->count);
    nv->sym[w] = malloc((size_t)(len ? len : 1) * sizeof(int));
    for (int i = 0; i < len; i++) nv->sym[w][i] = (unsigned char)s[i];
    nv->len[w] = len;
    nv->count[w] = count;
}

/* Find the pair to merge (most frequent; then smaller left, smaller right;
 * none longer than BPE_MAX_TOKEN_BYTES). Returns 0 when there is none. */
static int naive_best(Naive *nv, int *left, int *right, int64_t *count) {
    int64_t best = 0;
    for (int w = 0; w < nv->n_words; w++)
        for (int i = 0; i + 1 < nv->len[w]; i++)
            nv->pair[(size_t)nv->sym[w][i] * nv->V + nv->sym[w][i + 1]] += nv->count[w];
    for (int w = 0; w < nv->n_words; w++)
        for (int i = 0; i + 1 < nv->len[w]; i++) {
            int l = nv->sym[w][i], r = nv->sym[w][i + 1];
            int64_t c = nv->pair[(size_t)l * nv->V + r];
            if (nv->tok_len[l] + nv->tok_len[r] > BPE_MAX_TOKEN_BYTES) continue;
            if (c > best || (c == best && (l < *left || (l == *left && r < *right)))) {
                best = c;
                *left = l;
                *right = r;
            }
        }
    for (int w = 0; w < nv->n_words; w++)   /* clear the scratch for next time */
        for (int i = 0; i + 1 < nv->len[w]; i++)
            nv->pair[(size_t)nv->sym[w][i] * nv->V + nv->sym[w][i + 1]] = 0;
    *count = best;
    return best > 0;
}

static void naive_merge(Naive *nv, int left, int right, int z) {
    nv->tok_len[z] = nv->tok_len[left] + nv->tok_len[right];
    for (int w = 0; w < nv->n_words; w++) {
        int k = 0, *s = nv->sym[w];
        for (int i = 0; i < nv->len[w]; i++) {
            if (i + 1 < nv->len[w] && s[i] == left && s[i + 1] == right) {
                s[k++] = z;
                i++;
            } else {
                s[k++] = s[i];
            }
        }
        nv->len[w] = k;
    }
}

static void naive_free(Naive *nv) {
    for (int w = 0; w < nv->n_words; w++) free(nv->sym[w]);
    free(nv->sym);
    free(nv->len);
    free(nv->count);
    free(nv->tok_len);
    free(nv->pair);
}

/* Run the naive trainer to the size of b and compare every merge, then the
 * tokens each word ends with. */
static void expect_naive_agrees(Naive *nv, const Bpe *b) {
    int m = 0;
    while (m < nv->V - 257) {
        int l = INT32_MAX, r = INT32_MAX;
        int64_t c;
        if (!naive_best(nv, &l, &r, &c)) break;
        assert_true(m < b->n_merges);
        if (b->merges[m].left != l || b->merges[m].right != r || b->merges[m].count != c) {
            print_error("merge %d: trainer (%d, %d) x%lld, naive (%d, %d) x%lld\n", m,
                        b->merges[m].left, b->merges[m].right, (long long)b->merges[m].count, l, r,
                        (long long)c);
            fail();
        }
        naive_merge(nv, l, r, 256 + m);
        m++;
    }
    assert_int_equal(m, b->n_merges);
    int64_t tokens = 0;
    for (int w = 0; w < nv->n_words; w++) tokens += nv->count[w] * nv->len[w];
    assert_int_equal(tokens, b->n_tokens);
}

/* Cut ASCII text made of letters and single spaces the way the GPT-2 pattern
 * does (a word takes the space before it), without the pattern. */
static void naive_words_of_letters(Naive *nv, const char *text) {
    for (const char *p = text; *p;) {
        const char *q = p + (*p == ' ');
        while (*q && *q != ' ') q++;
        naive_add_word(nv, p, (int)(q - p), 1);
        p = q;
    }
}

/* ---- merges: which pair, in what order ------------------------------------- */

/* Sennrich et al.'s example: "low" x5, "lower" x2, "newest" x6, "widest" x3,
 * here as one text with spaces. */
static const char LOW_LOWER[] =
    "low low low low low lower lower newest newest newest newest newest newest "
    "widest widest widest";

static void first_merges_are_the_most_frequent_pairs(void **state) {
    Bpe b;
    train(&b, LOW_LOWER, strlen(LOW_LOWER), 257 + 12);
    assert_int_equal(b.n_merges, 12);

    /* By hand: " newest" x6 and " widest" x3 give "es" and "st" 9 times
     * each, more than any other pair ("we" 8, "lo" 7); 'e' (101) < 's' (115),
     * so "es" is first; then "es" + "t", still 9 times. */
    assert_int_equal(b.merges[0].left, 'e');
    assert_int_equal(b.merges[0].right, 's');
    assert_int_equal(b.merges[0].count, 9);
    assert_int_equal(b.merges[1].left, 256);
    assert_int_equal(b.merges[1].right, 't');
    assert_int_equal(b.merges[1].count, 9);
    assert_memory_equal(token_text(&b, 257), "est", 3);

    /* Every merge, against words cut and pairs counted here from scratch. */
    Naive nv;
    naive_init(&nv, 257 + 12);
    naive_words_of_letters(&nv, LOW_LOWER);
    assert_int_equal(nv.n_words, b.n_words);
    expect_naive_agrees(&nv, &b);
    naive_free(&nv);
    bpe_free(&b);
}

static void ties_go_to_the_smaller_left_id_then_the_smaller_right_id(void **state) {
    /* Words "zb", "za", "ab" (newlines are words of their own): the three
     * pairs occur once each. 'a' < 'z' puts (a, b) first; then (z, a) before
     * (z, b) on the right id. */
    static const char text[] = "zb\nza\nab";
    Bpe b;
    train(&b, text, strlen(text), 257 + 3);
    assert_int_equal(b.n_merges, 3);
    int want[3][2] = {{'a', 'b'}, {'z', 'a'}, {'z', 'b'}};
    for (int m = 0; m < 3; m++) {
        assert_int_equal(b.merges[m].left, want[m][0]);
        assert_int_equal(b.merges[m].right, want[m][1]);
        assert_int_equal(b.merges[m].count, 1);
    }
    bpe_free(&b);

    /* A count beats any id: "zz" twice wins over (a, b) once. */
    static const char text2[] = "zz\nzz\nab";
    train(&b, text2, strlen(text2), 257 + 1);
    assert_int_equal(b.merges[0].left, 'z');
    assert_int_equal(b.merges[0].right, 'z');
    assert_int_equal(b.merges[0].count, 2);
    bpe_free(&b);
}

static void merges_match_a_naive_trainer_on_shakespeare(void **state) {
    size_t size;
    char *text = load_corpus(&size);
    if (!text) return;
    size_t n = 30000;
    int V = 257 + 300;
    Bpe b;
    train(&b, text, n, V);
    assert_int_equal(b.n_merges, 300);
    Naive nv;
    naive_init(&nv, V);
    for (int w = 0; w < b.n_words; w++)   /* the trainer's words; their cutting is tested below */
        naive_add_word(&nv, b.word_text + b.words[w].text.off, b.words[w].text.len,
                       b.words[w].count);
    expect_naive_agrees(&nv, &b);
    naive_free(&nv);
    bpe_free(&b);
    free(text);
}

/* ---- the vocabulary ---------------------------------------------------------- */

static void vocabulary_has_exactly_the_size_asked_for(void **state) {
    size_t size;
    char *text = load_corpus(&size);
    if (!text) return;
    static const int sizes[] = {257, 258, 300, 1000};
    for (int k = 0; k < 4; k++) {
        Bpe b;
        train(&b, text, 50000, sizes[k]);
        assert_int_equal(b.n_vocab, sizes[k]);
        assert_int_equal(b.n_merges, sizes[k] - 257);
        assert_int_equal(b.eot, sizes[k] - 1);
        assert_int_equal(b.tokens[b.eot].len, (int)strlen(BPE_EOT_TEXT));
        assert_memory_equal(token_text(&b, b.eot), BPE_EOT_TEXT, strlen(BPE_EOT_TEXT));
        for (int c = 0; c < 256; c++) {
            assert_int_equal(b.tokens[c].len, 1);
            assert_int_equal((unsigned char)token_text(&b, c)[0], c);
        }
        Tokenizer *t = load_in_engine(&b);
        assert_int_equal(tok_n_vocab(t), sizes[k]);
        assert_int_equal(tok_bos(t), sizes[k] - 1);
        assert_int_equal(tok_eos(t), sizes[k] - 1);
        tok_free(t);
        bpe_free(&b);
    }
    free(text);
}

static void training_stops_early_when_no_pair_is_left(void **state) {
    /* "ab" x2 has one pair: one merge, then every word is a single token. */
    Bpe b;
    train(&b, "ab ab", 5, 1000);
    assert_int_equal(b.n_merges, 2);   /* "ab", then " " + "ab" */
    assert_int_equal(b.n_vocab, 256 + 2 + 1);
    assert_int_equal(b.n_tokens, 2);
    bpe_free(&b);
    train(&b, "", 0, 1000);
    assert_int_equal(b.n_merges, 0);
    assert_int_equal(b.n_vocab, 257);
    Tokenizer *t = load_in_engine(&b);   /* no merges is still a valid file */
    expect_round_trip(t, "any text at all");
    tok_free(t);
    bpe_free(&b);
}

/* Every token spells different bytes: so the engine, which knows tokens by
 * their bytes, can never confuse two of them. */
static void expect_distinct_tokens(const Bpe *b) {
    for (int i = 0; i < b->n_vocab; i++)
        for (int j = i + 1; j < b->n_vocab; j++)
            if (b->tokens[i].len == b->tokens[j].len &&
                memcmp(token_text(b, i), token_text(b, j), (size_t)b->tokens[i].len) == 0) {
                print_error("tokens %d and %d both spell '%.*s'\n", i, j, b->tokens[i].len,
                            token_text(b, i));
                fail();
            }
}

static void every_merge_makes_a_string_no_earlier_token_spells(void **state) {
    /* Random texts of a few letters, which repeat the same substrings in
     * many ways (runs of one letter, overlaps). */
    uint64_t x = 88172645463325252ull;   /* xorshift64 */
    char text[400];
    for (int trial = 0; trial < 300; trial++) {
        int n = 0, words = 2 + trial % 11;
        for (int w = 0; w < words; w++) {
            if (w) text[n++] = ' ';
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            int len = 1 + (int)(x % 16);
            for (int i = 0; i < len; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                text[n++] = "abc"[x % (2 + trial % 2)];
            }
        }
        text[n] = 0;
        Bpe b;
        train(&b, text, (size_t)n, 2000);
        expect_distinct_tokens(&b);
        if (trial % 30 == 0) expect_engine_agrees(&b, text);
        bpe_free(&b);
    }
    size_t size;
    char *corpus = load_corpus(&size);
    if (!corpus) return;
    Bpe b;
    train(&b, corpus, 100000, 2048);
    expect_distinct_tokens(&b);
    bpe_free(&b);
    free(corpus);
}

/* ---- pre-token boundaries ---------------------------------------------------- */

/* Could bytes s[0..n) (ASCII) lie inside one GPT-2 pre-token? Whitespace
 * only; or an optional leading space and then letters only, digits only or
 * other symbols only; or a piece of a contraction ('s, 't, 're, 've, 'm,
 * 'll, 'd). Written from the pattern's alternatives, not with it. */
static int inside_one_pre_token(const char *s, int n) {
    int spaces = 0;
    while (spaces < n && isspace((unsigned char)s[spaces])) spaces++;
    if (spaces == n) return 1;
    static const char *const contractions[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"};
    for (int k = 0; k < 7; k++)
        if (n >= 2 && (size_t)n <= strlen(contractions[k]) && memcmp(s, contractions[k], (size_t)n) == 0)
            return 1;
    int i = s[0] == ' ' ? 1 : 0;
    if (i == n) return 1;
    int letter = 0, digit = 0, other = 0;
    for (int k = i; k < n; k++) {
        unsigned char c = (unsigned char)s[k];
        if (isspace(c)) return 0;
        if (isalpha(c)) letter = 1;
        else if (isdigit(c)) digit = 1;
        else other = 1;
    }
    return letter + digit + other == 1;
}

static void expect_tokens_inside_pre_tokens(const Bpe *b) {
    for (int id = 256; id < b->n_vocab; id++) {
        if (id == b->eot) continue;
        if (!inside_one_pre_token(token_text(b, id), b->tokens[id].len)) {
            print_error("token %d '%.*s' crosses a pre-token boundary\n", id, b->tokens[id].len,
                        token_text(b, id));
            fail();
        }
    }
}

static void merged_tokens_never_cross_pre_token_boundaries(void **state) {
    /* The most frequent raw byte pairs here are "x!", "! " and " x", which
     * cross boundaries (letters, symbols, and a space that belongs to the
     * next word); "!!" and "xx" are the pairs inside pre-tokens. */
    static const char text[] = "x! x! x! x! x! x! x! xx !! 12a a12 \n\n  y";
    Bpe b;
    train(&b, text, strlen(text), 400);
    expect_tokens_inside_pre_tokens(&b);
    expect_engine_agrees(&b, text);
    bpe_free(&b);
    assert_false(inside_one_pre_token("x!", 2));   /* the check can say no */
    assert_false(inside_one_pre_token("a ", 2));

    size_t size;
    char *corpus = load_corpus(&size);
    if (!corpus) return;
    train(&b, corpus, 100000, 2048);
    expect_tokens_inside_pre_tokens(&b);
    bpe_free(&b);
    free(corpus);
}

static void no_token_is_longer_than_the_limit(void **state) {
    /* A 300-letter word, 4 times: merges double the run of 'a's, up to the
     * limit; joining two halves of 128 would make 256 and is passed over. */
    char text[1300];
    int n = 0;
    for (int w = 0; w < 4; w++) {
        if (w) text[n++] = '\n';
        memset(text + n, 'a', 300);
        n += 300;
    }
    text[n] = 0;
    Bpe b;
    train(&b, text, (size_t)n, 1000);
    assert_true(b.n_skipped > 0);
    int longest = 0;
    for (int id = 0; id < b.n_vocab; id++)
        if (b.tokens[id].len > longest) longest = b.tokens[id].len;
    assert_int_equal(longest, BPE_MAX_TOKEN_BYTES);
    Tokenizer *t = load_in_engine(&b);   /* the engine takes every token */
    expect_round_trip(t, text);
    tok_free(t);
    expect_engine_agrees(&b, text);
    bpe_free(&b);
}

/* ---- through the engine ------------------------------------------------------- */

static void engine_encodes_shakespeare_to_the_trainers_tokens(void **state) {
    size_t size;
    char *text = load_corpus(&size);
    if (!text) return;
    text[65536] = 0;   /* the slice the trainer sees, cut mid-word on purpose */
    Bpe b;
    train(&b, text, 65536, 1024);
    expect_engine_agrees(&b, text);
    bpe_free(&b);
    free(text);
}

static void engine_encodes_utf8_and_invalid_bytes_to_the_trainers_tokens(void **state) {
    /* Letters beyond ASCII, CJK, an emoji, digits of another script,
     * spaces that only Unicode calls spaces (no-break U+00A0, ideographic
     * U+3000, thin U+2009), contractions, and bytes that are not UTF-8 (a
     * lone continuation byte, a cut-off character, FF). */
    static const char text[] =
        "Naïve café-goers can't say 東京の天気 is 🙂🙂 — they'll ask 42 times.\n"
        "naïve\x80 café\xC3 東京\xFF\xFE 🙂\xF0\x9F 42,000\t\t 'll 've 're ٣٤\n"
        "a\xC2\xA0" "b\xC2\xA0\xC2\xA0" "c 東京\xE3\x80\x80東京\xE3\x80\x80 x\xE2\x80\x89y\xE2\x80\x89\n"
        "Naïve naïve NAÏVE café café 東京 東京 🙂 🙂 42 42 \xFF\xFF\xFF  ";
    Bpe b;
    train(&b, text, strlen(text), 2000);   /* every pair the text has: any cut that differs shows */
    expect_engine_agrees(&b, text);
    bpe_free(&b);
}

static void a_run_of_bytes_that_are_not_utf8_is_one_pre_token(void **state) {
    /* Runs: "ab" (UTF-8), FF FE FD (not), "cd " (UTF-8), C3 (a character cut
     * off by the space after it), " x". The pattern cuts the UTF-8 runs; a
     * subject ends with its run, so the space after "cd" is a word alone. */
    static const char text[] = "ab\xFF\xFE\xFD" "cd \xC3 x";
    static const char *const want[] = {"ab", "\xFF\xFE\xFD", "cd", " ", "\xC3", " x"};
    Bpe b;
    train(&b, text, strlen(text), 400);
    assert_int_equal(b.n_words, 6);
    for (int w = 0; w < 6; w++) {
        assert_int_equal(b.words[w].text.len, (int)strlen(want[w]));
        assert_memory_equal(b.word_text + b.words[w].text.off, want[w], strlen(want[w]));
        assert_int_equal(b.words[w].count, 1);
        assert_int_equal(b.words[w].n_sym, 1);   /* merged into one token each */
    }
    expect_engine_agrees(&b, text);   /* so the engine keeps the run together too */
    bpe_free(&b);
}

static void decoding_the_encoded_corpus_gives_it_back(void **state) {
    size_t size;
    char *text = load_corpus(&size);
    if (!text) return;
    size_t n_train = bpe_train_bytes(size, 0.9);
    Bpe b;
    train(&b, text, 100000, 512);   /* a vocabulary from a slice of the training split */
    Tokenizer *t = load_in_engine(&b);
    expect_round_trip(t, text + n_train);   /* the validation split */
    text[n_train] = 0;
    expect_round_trip(t, text);             /* the whole training split */
    tok_free(t);
    bpe_free(&b);
    free(text);
}

/* ---- files, arguments, memory -------------------------------------------------- */

static void two_runs_write_identical_files(void **state) {
    size_t size;
    char *text = load_corpus(&size);
    if (!text) return;
    char p1[64], p2[64];
    temp_path(p1, sizeof p1);
    temp_path(p2, sizeof p2);
    Err e;
    Bpe b;
    train(&b, text, 50000, 700);
    assert_int_equal(bpe_write_gguf(&b, p1, &e), ST_OK);
    bpe_free(&b);
    train(&b, text, 50000, 700);
    assert_int_equal(bpe_write_gguf(&b, p2, &e), ST_OK);
    bpe_free(&b);
    size_t n1, n2;
    char *f1 = read_file(p1, &n1), *f2 = read_file(p2, &n2);
    assert_true(f1 && f2);
    assert_int_equal(n1, n2);
    assert_memory_equal(f1, f2, n1);
    unlink(p1);
    unlink(p2);
    free(f1);
    free(f2);
    free(text);
}

static void file_has_the_gpt2_keys_llama_cpp_reads(void **state) {
    static const char text[] = "hello hello world\n";
    Bpe b;
    train(&b, text, strlen(text), 260);
    char path[64];
    temp_path(path, sizeof path);
    Err e;
    assert_int_equal(bpe_write_gguf(&b, path, &e), ST_OK);
    Gguf g;
    assert_int_equal(gguf_open(&g, path, &e), ST_OK);
    GgufStr s;
    int64_t v;
    assert_int_equal(g.n_tensors, 0);
    assert_int_equal(gguf_get_str(&g, "general.architecture", &s, &e), ST_OK);
    assert_true(gguf_str_eq(s, "llama"));
    assert_int_equal(gguf_get_str(&g, "tokenizer.ggml.model", &s, &e), ST_OK);
    assert_true(gguf_str_eq(s, "gpt2"));
    assert_int_equal(gguf_get_str(&g, "tokenizer.ggml.pre", &s, &e), ST_OK);
    assert_true(gguf_str_eq(s, "gpt-2"));
    assert_int_equal(gguf_get_int(&g, "tokenizer.ggml.bos_token_id", &v, &e), ST_OK);
    assert_int_equal(v, 259);
    assert_int_equal(gguf_get_int(&g, "tokenizer.ggml.eos_token_id", &v, &e), ST_OK);
    assert_int_equal(v, 259);
    assert_int_equal(gguf_get_int(&g, "tokenizer.ggml.add_bos_token", &v, &e), ST_OK);
    assert_int_equal(v, 1);

    /* Tokens in GPT-2's printable alphabet: byte 0x20 (space) is U+0120 "Ġ",
     * byte 0x0A (newline) U+010A "Ċ", 'A' itself; the merges likewise. */
    const uint8_t *p;
    uint64_t n;
    assert_int_equal(gguf_get_array(&g, "tokenizer.ggml.tokens", GG_STRING, &p, &n, &e), ST_OK);
    assert_int_equal(n, 260);
    GgufStr tok[260];
    for (uint64_t i = 0; i < n; i++) tok[i] = gguf_next_str(&p);
    assert_true(gguf_str_eq(tok[' '], "\xC4\xA0"));
    assert_true(gguf_str_eq(tok['\n'], "\xC4\x8A"));
    assert_true(gguf_str_eq(tok['A'], "A"));
    assert_true(gguf_str_eq(tok[259], BPE_EOT_TEXT));
    assert_int_equal(gguf_get_array(&g, "tokenizer.ggml.token_type", GG_I32, &p, &n, &e), ST_OK);
    int32_t type;
    memcpy(&type, p + 4 * 'A', 4);
    assert_int_equal(type, 1);
    memcpy(&type, p + 4 * 259, 4);
    assert_int_equal(type, 3);
    assert_int_equal(gguf_get_array(&g, "tokenizer.ggml.merges", GG_STRING, &p, &n, &e), ST_OK);
    assert_int_equal(n, 3);
    /* The words are "hello", " hello", " world", "\n": (h, e), (e, l),
     * (l, l) and (l, o) occur twice each, a tie that the smallest left id,
     * 'e', wins. */
    assert_true(gguf_str_eq(gguf_next_str(&p), "e l"));
    gguf_close(&g);
    unlink(path);
    bpe_free(&b);
}

static void bad_arguments_are_refused(void **state) {
    Bpe b;
    Err e;
    assert_int_equal(bpe_train(&b, "abc", 3, 256, &e), ST_ARG);
    assert_non_null(strstr(e.msg, "256"));
    assert_int_equal(bpe_train(&b, "abc", 3, BPE_MAX_VOCAB + 1, &e), ST_ARG);
    bpe_free(&b);   /* a failed Bpe is empty and can be freed */

    train(&b, "one two", 7, 300);
    int ids[8];
    size_t n;
    assert_int_equal(bpe_segment(&b, "one three", 9, ids, 8, &n, &e), ST_ARG);
    assert_non_null(strstr(e.msg, "byte 3"));   /* " three" was never counted */
    assert_int_equal(bpe_segment(&b, "one two", 7, ids, 1, &n, &e), ST_ARG);
    assert_int_equal(n, 2);                      /* how many were needed */
    assert_int_equal(bpe_segment(&b, "one two", 7, ids, 8, &n, &e), ST_OK);
    assert_int_equal(n, 2);
    bpe_free(&b);

    assert_int_equal(bpe_train_bytes(1000, 0.9), 900);
    assert_int_equal(bpe_train_bytes(1115394, 0.9), 1003854);
    assert_int_equal(bpe_train_bytes(9, 0.9), 8);
    assert_int_equal(bpe_train_bytes(10, 1.0), 10);
    assert_int_equal(bpe_train_bytes(10, 0.0), 0);
}

static void training_reads_no_byte_past_the_length_it_is_given(void **state) {
    /* An exact-size copy with no NUL after it: under AddressSanitizer, any
     * read past the end (of the validation split, say) stops the test. */
    static const char text[] = "the training split ends here";
    char *exact = malloc(sizeof text - 1);
    memcpy(exact, text, sizeof text - 1);
    Bpe b;
    train(&b, exact, sizeof text - 1, 300);
    size_t n;
    int ids[64];
    Err e;
    assert_int_equal(bpe_segment(&b, exact, sizeof text - 1, ids, 64, &n, &e), ST_OK);
    bpe_free(&b);
    free(exact);
}

static void allocation_failures_give_nomem_without_leaks(void **state) {
    static const char text[] = "low low low lower lower newest newest widest \xFF caf\xC3\xA9 42";
    size_t live = mem_stats().live_count;
    int failures = 0;
    for (long k = 1;; k++) {
        Bpe b;
        Err e;
        mem_fail_after(k);
        int st = bpe_train(&b, text, strlen(text), 300, &e);
        char path[64];
        if (st == ST_OK) {
            temp_path(path, sizeof path);
            st = bpe_write_gguf(&b, path, &e);
            if (st == ST_OK) {
                int ids[64];
                size_t n;
                st = bpe_segment(&b, text, strlen(text), ids, 64, &n, &e);
            }
            unlink(path);
            bpe_free(&b);
        }
        mem_fail_after(0);
        assert_int_equal(mem_stats().live_count, live);
        if (st == ST_OK) break;
        assert_int_equal(st, ST_NOMEM);
        failures++;
    }
    assert_true(failures > 20);   /* the loop did reach the allocations */
}

int main(int argc, char **argv) {
    select_tests(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(first_merges_are_the_most_frequent_pairs),
        cmocka_unit_test(ties_go_to_the_smaller_left_id_then_the_smaller_right_id),
        cmocka_unit_test(merges_match_a_naive_trainer_on_shakespeare),
        cmocka_unit_test(vocabulary_has_exactly_the_size_asked_for),
        cmocka_unit_test(training_stops_early_when_no_pair_is_left),
        cmocka_unit_test(every_merge_makes_a_string_no_earlier_token_spells),
        cmocka_unit_test(merged_tokens_never_cross_pre_token_boundaries),
        cmocka_unit_test(no_token_is_longer_than_the_limit),
        cmocka_unit_test(engine_encodes_shakespeare_to_the_trainers_tokens),
        cmocka_unit_test(engine_encodes_utf8_and_invalid_bytes_to_the_trainers_tokens),
        cmocka_unit_test(a_run_of_bytes_that_are_not_utf8_is_one_pre_token),
        cmocka_unit_test(decoding_the_encoded_corpus_gives_it_back),
        cmocka_unit_test(two_runs_write_identical_files),
        cmocka_unit_test(file_has_the_gpt2_keys_llama_cpp_reads),
        cmocka_unit_test(bad_arguments_are_refused),
        cmocka_unit_test(training_reads_no_byte_past_the_length_it_is_given),
        cmocka_unit_test(allocation_failures_give_nomem_without_leaks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
