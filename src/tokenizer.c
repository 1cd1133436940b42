/* tokenizer.c - text to token ids and back (see tokenizer.h).
 *
 * A language model reads and writes token ids; a tokenizer is the dictionary
 * between those ids and bytes of text. Both families here are byte-pair
 * encoders: start from the smallest units of the text and glue neighbours
 * together, one pair at a time, until no pair can be glued. They differ in
 * what "the best pair" means.
 *
 *  - Sentencepiece (Llama): every piece of the vocabulary has a score, and the
 *    pair whose glued text is a piece with the highest score wins. The score
 *    encodes the order in which the trainer learned the pieces, so the file
 *    needs no separate list of merges: a pair is mergeable exactly when its
 *    concatenation is itself a piece. Units are UTF-8 characters. A character
 *    the vocabulary lacks (an emoji in a 32k vocabulary) falls back to its raw
 *    bytes, each of which has a token <0x00>..<0xFF>, so nothing is ever
 *    unknown. The text is prefixed with one space first, so that "Hello" at
 *    the start of a prompt is the same piece as " Hello" in the middle.
 *  - GPT-2: the file lists the merges themselves, in the order they were
 *    learned; the pair with the lowest rank (earliest learned) wins. Units are
 *    bytes, so byte fallback is built in. Before merging, a regular expression
 *    cuts the text into words, numbers, punctuation and runs of spaces, and
 *    merging never crosses those cuts. The pattern needs Unicode's letter and
 *    number classes, so it runs on PCRE2 rather than hand-written code. This
 *    pre-tokenizer is public (tok_splitter_*): the vocabulary trainer, bpe.c,
 *    cuts its training text with the very same code.
 *
 * The vocabulary files store pieces in a printable disguise: sentencepiece
 * writes a space as U+2581 "▁", GPT-2 writes every byte as a printable
 * character (space is "Ġ", newline "Ċ"). We undo the disguise once, while
 * loading, and keep every piece as the raw bytes it stands for ("▁Hello" is
 * stored as " Hello"). Then llama2.c's tokenizer.bin, which already uses plain
 * spaces, needs no special case; the encoder looks up spans of the input text
 * directly; and the decoder just copies bytes. For GPT-2 this is the same
 * algorithm as mapping the text into the disguise before merging, because
 * the mapping is one-to-one.
 *
 * Merging, in both families, runs on a doubly linked list of symbols (spans
 * of the text) and a max-heap of candidate pairs. Merging a pair changes only
 * its two neighbouring pairs, so each merge costs O(log n) and a long prompt
 * is not quadratic. A heap entry can go stale (one of its symbols was merged
 * into something else after it was pushed); it is recognised when popped,
 * because the two symbols are no longer adjacent with the lengths they had.
 *
 * Decoding is streaming: the engine decodes one token at a time, as it is
 * generated. A byte-fallback token, or a GPT-2 token, can end in the middle of
 * a multi-byte character, so the decoder holds such bytes until the
 * character is complete; printing them one by one would put broken characters
 * on the terminal. Bytes that can never become a character come out as
 * U+FFFD, the replacement character.
 *
 * Dimensions: n is the length of a text in bytes; n_vocab the number of
 * pieces. */
#include "tokenizer.h"
#include "fileio.h"
#include "mem.h"
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <assert.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum { KIND_SPM, KIND_GPT2 };

/* Token types, numbered as GGUF numbers them (tokenizer.ggml.token_type). */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* The decoder turns one byte into at most one 3-byte U+FFFD and may hold 3
 * pending bytes, so a piece of this many bytes always fits in TOK_MAX_PIECE. */
#define MAX_PIECE_BYTES ((TOK_MAX_PIECE - 1) / 3 - 3)

static const char REPLACEMENT[] = "\xEF\xBF\xBD";   /* U+FFFD in UTF-8 */

typedef struct {
    const char *s;    /* raw bytes (spaces as ' '), NUL-terminated, in t->arena */
    int len;
    float score;      /* sentencepiece: higher merges first; 0 for GPT-2 */
    int type;         /* TT_* */
    int byte;         /* TT_BYTE: the byte it stands for; -1 otherwise */
} Piece;

typedef struct {
    int left, right;  /* token ids of the two halves */
    int merged;       /* token id of their concatenation */
} Merge;              /* GPT-2; the rank is the index in t->merges */

struct Tokenizer {
    int kind;                 /* KIND_SPM or KIND_GPT2 */
    int n_vocab;
    Piece *pieces;            /* (n_vocab) */
    char *arena;              /* the bytes of all pieces, one allocation */
    int *slots;               /* (n_slots) hash table: piece text -> id, -1 empty */
    int n_slots;              /* a power of two, at least twice the pieces in it */
    int byte_id[256];         /* the token of each raw byte, -1 if none */
    int bos, eos, unk;        /* -1 when the vocabulary has none */
    int add_bos;              /* does this vocabulary start a sequence with BOS? */
    int add_space_prefix;     /* sentencepiece's dummy prefix */
    /* GPT-2 only */
    Merge *merges;            /* (n_merges), in rank order */
    int n_merges;
    int *merge_slots;         /* (n_merge_slots) hash table: (left, right) -> rank */
    int n_merge_slots;
    TokPattern pattern;       /* the pre-tokenizer, compiled */
};

/* ---- UTF-8 ------------------------------------------------------------- */

/* Length of the UTF-8 sequence that byte b starts: 1..4, or 0 when b cannot
 * start one (a continuation byte 80..BF, or C0, C1, F5..FF, which would only
 * start overlong or out-of-range sequences). */
static int utf8_seq_len(unsigned char b) {
    if (b < 0x80) return 1;
    if (b < 0xC2) return 0;
    if (b < 0xE0) return 2;
    if (b < 0xF0) return 3;
    if (b < 0xF5) return 4;
    return 0;
}

/* How many of the n bytes at p (n >= 1) form a valid beginning of one
 * character. It equals utf8_seq_len(p[0]) for a whole character; it is
 * smaller when the bytes run out (n is short) or when a byte breaks the
 * sequence. The second byte's range is narrower after E0, ED, F0, F4: that
 * rules out overlong forms, UTF-16 surrogates and code points past U+10FFFF.
 * These are Unicode's well-formed sequences, exactly what PCRE2 accepts as
 * UTF-8. */
static int utf8_valid_prefix(const unsigned char *p, size_t n) {
    int need = utf8_seq_len(p[0]);
    if (need == 0) return 0;
    int k = 1;
    for (; k < need && (size_t)k < n; k++) {
        unsigned char lo = 0x80, hi = 0xBF;
        if (k == 1) {
            if (p[0] == 0xE0) lo = 0xA0;
            if (p[0] == 0xED) hi = 0x9F;
            if (p[0] == 0xF0) lo = 0x90;
            if (p[0] == 0xF4) hi = 0x8F;
        }
        if (p[k] < lo || p[k] > hi) break;
    }
    return k;
}

/* Length of the whole, valid character at p (n >= 1 bytes available), or 0. */
static int utf8_char_len(const unsigned char *p, size_t n) {
    int need = utf8_seq_len(p[0]);
    return need > 0 && utf8_valid_prefix(p, n) == need ? need : 0;
}

/* ---- the piece table ---------------------------------------------------- */

static uint32_t hash_bytes(const char *s, int n) {   /* FNV-1a */
    uint32_t h = 2166136261u;
    for (int i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static int table_size_for(int n) {   /* a power of two >= 2n, so probes stay short */
    int size = 16;
    while (size < 2 * n) size *= 2;
    return size;
}

/* Token id of the piece whose bytes are s[0..n), or -1. Only pieces that text
 * can encode to (normal and user-defined) are in the table: control tokens
 * like <s> and byte tokens like <0x41> are never produced by matching text. */
static int piece_find(const Tokenizer *t, const char *s, int n) {
    uint32_t mask = (uint32_t)t->n_slots - 1;
    for (uint32_t i = hash_bytes(s, n) & mask;; i = (i + 1) & mask) {
        int id = t->slots[i];
        if (id < 0) return -1;
        const Piece *p = &t->pieces[id];
        if (p->len == n && memcmp(p->s, s, (size_t)n) == 0) return id;
    }
}

static int is_text_piece(int type) { return type == TT_NORMAL || type == TT_USER; }

/* Fill the hash table and the byte table from t->pieces. When two pieces have
 * the same bytes, the lower id wins. */
static int index_pieces(Tokenizer *t, const char *path, Err *e) {
    int n_text = 0;
    for (int id = 0; id < t->n_vocab; id++) n_text += is_text_piece(t->pieces[id].type);
    t->n_slots = table_size_for(n_text);
    t->slots = mem_alloc((size_t)t->n_slots * sizeof(int));
    if (!t->slots) return err_set(e, ST_NOMEM, "%s: out of memory for the piece table", path);
    memset(t->slots, 0xff, (size_t)t->n_slots * sizeof(int));   /* all -1 */
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;

    uint32_t mask = (uint32_t)t->n_slots - 1;
    for (int id = 0; id < t->n_vocab; id++) {
        const Piece *p = &t->pieces[id];
        if (p->len > MAX_PIECE_BYTES)
            return err_set(e, ST_FORMAT, "%s: token %d is %d bytes long (at most %d supported)",
                           path, id, p->len, MAX_PIECE_BYTES);
        if (p->type == TT_BYTE && t->byte_id[p->byte] < 0) t->byte_id[p->byte] = id;
        if (!is_text_piece(p->type) || piece_find(t, p->s, p->len) >= 0) continue;
        uint32_t i = hash_bytes(p->s, p->len) & mask;
        while (t->slots[i] >= 0) i = (i + 1) & mask;
        t->slots[i] = id;
    }
    /* GPT-2 has no byte tokens: its single-byte pieces play that role. */
    if (t->kind == KIND_GPT2)
        for (int b = 0; b < 256; b++) {
            char c = (char)b;
            t->byte_id[b] = piece_find(t, &c, 1);
        }
    return ST_OK;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* "<0x41>" -> 0x41; -1 if s[0..n) is not of that form. */
static int parse_byte_piece(const char *s, int n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int hi = hex_digit(s[3]), lo = hex_digit(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/* A Tokenizer with room for n pieces and arena_bytes bytes of piece text
 * (plus a NUL after each piece). */
static Tokenizer *tok_new(int kind, int n, size_t arena_bytes) {
    Tokenizer *t = mem_alloc(sizeof *t);
    if (!t) return NULL;
    t->kind = kind;
    t->n_vocab = n;
    t->bos = t->eos = t->unk = -1;
    t->pieces = mem_alloc((size_t)n * sizeof(Piece));
    t->arena = mem_alloc(arena_bytes + (size_t)n);
    if (!t->pieces || !t->arena) {
        tok_free(t);
        return NULL;
    }
    return t;
}

/* Copy a piece's bytes to the arena at *used (s may already be there). */
static void set_piece(Tokenizer *t, int id, const char *s, int len, size_t *used) {
    char *dst = t->arena + *used;
    memmove(dst, s, (size_t)len);
    dst[len] = 0;
    *used += (size_t)len + 1;
    t->pieces[id].s = dst;
    t->pieces[id].len = len;
    t->pieces[id].byte = -1;
}

void tok_free(Tokenizer *t) {
    if (!t) return;
    mem_free(t->pieces);
    mem_free(t->arena);
    mem_free(t->slots);
    mem_free(t->merges);
    mem_free(t->merge_slots);
    tok_pattern_free(&t->pattern);
    mem_free(t);
}

int tok_n_vocab(const Tokenizer *t) { return t->n_vocab; }
int tok_bos(const Tokenizer *t) { return t->bos; }
int tok_eos(const Tokenizer *t) { return t->eos; }

/* ---- llama2.c tokenizer.bin --------------------------------------------- */

/* The file: int32 max_token_length; then for each of n_vocab tokens: float32
 * score, int32 length, that many bytes. Spaces are already ' '. The file
 * carries no token types; llama2.c's conventions supply them: 0 is <unk>,
 * 1 BOS, 2 EOS, and pieces spelled <0xNN> are byte tokens. */

typedef struct {
    const unsigned char *p;
    size_t size, pos;
    const char *path;
    Err *e;
} BinCursor;

static int bin_read(BinCursor *c, void *dst, size_t n, const char *what, int token) {
    if (n > c->size - c->pos) {
        if (token >= 0)
            return err_set(c->e, ST_FORMAT, "%s: truncated at offset %zu reading %s of token %d "
                           "(file is %zu bytes)", c->path, c->pos, what, token, c->size);
        return err_set(c->e, ST_FORMAT, "%s: truncated at offset %zu reading %s (file is %zu bytes)",
                       c->path, c->pos, what, c->size);
    }
    if (dst) memcpy(dst, c->p + c->pos, n);
    c->pos += n;
    return ST_OK;
}

/* Walk the token records after the header. With t NULL: check every field
 * and add up the piece bytes into *total. With t: copy the pieces in (the
 * checks have passed, so nothing can fail). */
static int bin_walk(BinCursor *c, int n_vocab, int max_len, Tokenizer *t, size_t *total) {
    size_t used = 0;
    *total = 0;
    for (int id = 0; id < n_vocab; id++) {
        float score = 0;
        int32_t len = 0;
        if (bin_read(c, &score, 4, "the score", id)) return ST_FORMAT;
        if (isnan(score))
            return err_set(c->e, ST_FORMAT, "%s: token %d has a score that is not a number "
                           "(offset %zu)", c->path, id, c->pos - 4);
        if (bin_read(c, &len, 4, "the length", id)) return ST_FORMAT;
        if (len < 0 || len > max_len)
            return err_set(c->e, ST_FORMAT, "%s: token %d has length %d at offset %zu "
                           "(max_token_length is %d)", c->path, id, (int)len, c->pos - 4, max_len);
        const char *s = (const char *)c->p + c->pos;
        if (bin_read(c, NULL, (size_t)len, "the bytes", id)) return ST_FORMAT;
        *total += (size_t)len;
        if (!t) continue;
        set_piece(t, id, s, len, &used);
        Piece *p = &t->pieces[id];
        p->score = score;
        p->byte = parse_byte_piece(s, len);
        p->type = id == 0 ? TT_UNKNOWN : id <= 2 ? TT_CONTROL : p->byte >= 0 ? TT_BYTE : TT_NORMAL;
    }
    if (c->pos != c->size)
        return err_set(c->e, ST_FORMAT, "%s: %zu unexpected bytes at offset %zu after the last of "
                       "%d tokens (does the vocabulary size match the model?)", c->path,
                       c->size - c->pos, c->pos, n_vocab);
    return ST_OK;
}

int tok_from_llama2c(Tokenizer **out, const char *path, int n_vocab, Err *e) {
    *out = NULL;
    if (n_vocab < 3)
        return err_set(e, ST_ARG, "%s: vocabulary size %d is too small (llama2.c needs <unk>, "
                       "BOS and EOS at 0, 1, 2)", path, n_vocab);
    unsigned char *data = NULL;
    size_t size = 0;
    int st = fio_slurp(path, &data, &size, e);
    if (st) return st;
    if (size == 0) {
        mem_free(data);
        return err_set(e, ST_FORMAT, "%s: empty file", path);
    }

    BinCursor c = {data, size, 0, path, e};
    int32_t max_len = 0;
    size_t total = 0;
    Tokenizer *t = NULL;
    if ((st = bin_read(&c, &max_len, 4, "max_token_length", -1))) goto done;
    if (max_len < 1 || max_len > 65536) {
        st = err_set(e, ST_FORMAT, "%s: max_token_length %d at offset 0 is not in 1..65536", path,
                     (int)max_len);
        goto done;
    }
    if ((st = bin_walk(&c, n_vocab, max_len, NULL, &total))) goto done;

    t = tok_new(KIND_SPM, n_vocab, total);
    if (!t) {
        st = err_set(e, ST_NOMEM, "%s: out of memory for %d pieces", path, n_vocab);
        goto done;
    }
    c.pos = 4;
    st = bin_walk(&c, n_vocab, max_len, t, &total);
    assert(st == ST_OK);   /* the same bytes passed the checks above */
    t->unk = 0;
    t->bos = 1;
    t->eos = 2;
    t->add_bos = 1;
    t->add_space_prefix = 1;
    st = index_pieces(t, path, e);
done:
    mem_free(data);
    if (st) tok_free(t);
    else *out = t;
    return st;
}

/* ---- GGUF --------------------------------------------------------------- */

/* GPT-2's printable disguise for bytes: the bytes that are printable and not
 * a space ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) stand for themselves as code
 * points; the other 68, in increasing order, become U+0100, U+0101, ...
 * Fills cp_to_byte for code points below 0x144 (-1 where none). */
static void gpt2_alphabet(int cp_to_byte[0x144]) {
    for (int c = 0; c < 0x144; c++) cp_to_byte[c] = -1;
    int next = 0x100;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        cp_to_byte[printable ? b : next++] = b;
    }
}

/* Undo the disguise of s[0..n) into dst (which holds n bytes: every character
 * shrinks or keeps its size). Returns the new length, or -1 when s has a
 * character outside the alphabet (then the piece is kept as it is). */
static int gpt2_unmap(const char *s, int n, const int cp_to_byte[0x144], char *dst) {
    int len = 0;
    for (int i = 0; i < n;) {
        const unsigned char *u = (const unsigned char *)s + i;
        int k = utf8_char_len(u, n - i);
        if (k == 0 || k > 2) return -1;
        unsigned c = k == 1 ? u[0] : ((unsigned)(u[0] & 0x1F) << 6) | (u[1] & 0x3F);
        if (c >= 0x144 || cp_to_byte[c] < 0) return -1;
        dst[len++] = (char)cp_to_byte[c];
        i += k;
    }
    return len;
}

/* Sentencepiece's disguise: U+2581 "▁" (E2 96 81) stands for a space. */
static int spm_unmap(const char *s, int n, char *dst) {
    int len = 0;
    for (int i = 0; i < n; i++) {
        if (i + 2 < n && memcmp(s + i, "\xE2\x96\x81", 3) == 0) {
            dst[len++] = ' ';
            i += 2;
        } else {
            dst[len++] = s[i];
        }
    }
    return len;
}

static int gguf_optional_int(const Gguf *g, const char *key, int64_t dflt) {
    int64_t v;
    return gguf_find(g, key) && gguf_get_int(g, key, &v, NULL) == ST_OK ? (int)v : (int)dflt;
}

/* A special token id from the file, or -1; an id outside the vocabulary is
 * an error. */
static int gguf_special(const Gguf *g, const char *key, int n_vocab, int *id, Err *e) {
    int64_t v;
    *id = -1;
    if (!gguf_find(g, key)) return ST_OK;
    if (gguf_get_int(g, key, &v, e)) return ST_FORMAT;
    if (v < 0 || v >= n_vocab)
        return err_set(e, ST_FORMAT, "%s: %s is %lld, outside the vocabulary of %d", g->path, key,
                       (long long)v, n_vocab);
    *id = (int)v;
    return ST_OK;
}

static uint32_t hash_pair(int a, int b) {
    uint64_t x = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(x >> 32);
}

/* Rank of the merge (left, right), or -1 when there is none. */
static int merge_find(const Tokenizer *t, int left, int right) {
    uint32_t mask = (uint32_t)t->n_merge_slots - 1;
    for (uint32_t i = hash_pair(left, right) & mask;; i = (i + 1) & mask) {
        int r = t->merge_slots[i];
        if (r < 0) return -1;
        if (t->merges[r].left == left && t->merges[r].right == right) return r;
    }
}

/* tokenizer.ggml.merges: strings "left right" in rank order, both halves and
 * their concatenation being pieces (in the disguise). */
static int load_merges(Tokenizer *t, const Gguf *g, const int cp_to_byte[0x144], Err *e) {
    const uint8_t *p;
    uint64_t n;
    if (gguf_get_array(g, "tokenizer.ggml.merges", GG_STRING, &p, &n, e)) return ST_FORMAT;
    if (n > (uint64_t)INT_MAX / 4)
        return err_set(e, ST_FORMAT, "%s: %llu merges is absurd", g->path, (unsigned long long)n);
    t->n_merges = (int)n;
    t->n_merge_slots = table_size_for(t->n_merges);
    t->merges = mem_alloc((n ? n : 1) * sizeof(Merge));
    t->merge_slots = mem_alloc((size_t)t->n_merge_slots * sizeof(int));
    if (!t->merges || !t->merge_slots)
        return err_set(e, ST_NOMEM, "%s: out of memory for %llu merges", g->path,
                       (unsigned long long)n);
    memset(t->merge_slots, 0xff, (size_t)t->n_merge_slots * sizeof(int));

    char buf[4 * MAX_PIECE_BYTES + 1];   /* two pieces, disguised: up to 2 bytes per byte */
    uint32_t mask = (uint32_t)t->n_merge_slots - 1;
    for (int r = 0; r < t->n_merges; r++) {
        GgufStr s = gguf_next_str(&p);
        int shown = s.len > 64 ? 64 : (int)s.len;
        if (s.len > sizeof buf)
            return err_set(e, ST_FORMAT, "%s: merge %d is %llu bytes long", g->path, r,
                           (unsigned long long)s.len);
        /* A half never holds a space (the disguise has none), so the first
         * space after the first character separates the halves. */
        const char *sp = s.len > 1 ? memchr(s.s + 1, ' ', s.len - 1) : NULL;
        if (!sp)
            return err_set(e, ST_FORMAT, "%s: merge %d '%.*s' is not two pieces separated by a space",
                           g->path, r, shown, s.s);
        int nl = (int)(sp - s.s), nr = (int)s.len - nl - 1;
        int ll = gpt2_unmap(s.s, nl, cp_to_byte, buf);
        int lr = gpt2_unmap(sp + 1, nr, cp_to_byte, buf + (ll > 0 ? ll : 0));
        Merge *m = &t->merges[r];
        m->left = ll > 0 ? piece_find(t, buf, ll) : -1;
        m->right = ll > 0 && lr > 0 ? piece_find(t, buf + ll, lr) : -1;
        m->merged = m->left >= 0 && m->right >= 0 ? piece_find(t, buf, ll + lr) : -1;
        if (m->merged < 0)
            return err_set(e, ST_FORMAT, "%s: merge %d '%.*s' names a piece that is not in the "
                           "vocabulary", g->path, r, shown, s.s);
        if (merge_find(t, m->left, m->right) >= 0) continue;   /* a repeat never wins */
        uint32_t i = hash_pair(m->left, m->right) & mask;
        while (t->merge_slots[i] >= 0) i = (i + 1) & mask;
        t->merge_slots[i] = r;
    }
    return ST_OK;
}

/* The pre-tokenizer's pattern, with the file's name in any error. */
static int compile_pattern(Tokenizer *t, const char *path, Err *e) {
    Err why;
    int st = tok_pattern_init(&t->pattern, &why);
    return st ? err_set(e, st, "%s: %s", path, why.msg) : ST_OK;
}

/* Pieces, scores and types from the file, undisguised. */
static int load_pieces(Tokenizer **tp, const Gguf *g, int kind, Err *e) {
    const uint8_t *tokens, *scores = NULL, *types = NULL;
    uint64_t n, n2;
    if (gguf_get_array(g, "tokenizer.ggml.tokens", GG_STRING, &tokens, &n, e)) return ST_FORMAT;
    if (n == 0 || n > (uint64_t)INT_MAX / 4)
        return err_set(e, ST_FORMAT, "%s: tokenizer.ggml.tokens has %llu pieces", g->path,
                       (unsigned long long)n);
    if (kind == KIND_SPM) {
        if (gguf_get_array(g, "tokenizer.ggml.scores", GG_F32, &scores, &n2, e)) return ST_FORMAT;
        if (n2 != n)
            return err_set(e, ST_FORMAT, "%s: %llu scores for %llu pieces", g->path,
                           (unsigned long long)n2, (unsigned long long)n);
    }
    if (gguf_find(g, "tokenizer.ggml.token_type")) {
        if (gguf_get_array(g, "tokenizer.ggml.token_type", GG_I32, &types, &n2, e)) return ST_FORMAT;
        if (n2 != n)
            return err_set(e, ST_FORMAT, "%s: %llu token types for %llu pieces", g->path,
                           (unsigned long long)n2, (unsigned long long)n);
    }

    size_t total = 0;
    const uint8_t *p = tokens;
    for (uint64_t i = 0; i < n; i++) total += gguf_next_str(&p).len;
    Tokenizer *t = tok_new(kind, (int)n, total);
    if (!t) return err_set(e, ST_NOMEM, "%s: out of memory for %llu pieces", g->path,
                           (unsigned long long)n);
    *tp = t;

    int cp_to_byte[0x144];
    gpt2_alphabet(cp_to_byte);
    size_t used = 0;
    p = tokens;
    for (int id = 0; id < t->n_vocab; id++) {
        GgufStr s = gguf_next_str(&p);
        if (s.len > 4 * MAX_PIECE_BYTES)
            return err_set(e, ST_FORMAT, "%s: token %d is %llu bytes long", g->path, id,
                           (unsigned long long)s.len);
        char *dst = t->arena + used;   /* unmapping never grows a piece */
        int len = kind == KIND_SPM ? spm_unmap(s.s, (int)s.len, dst)
                                   : gpt2_unmap(s.s, (int)s.len, cp_to_byte, dst);
        set_piece(t, id, len < 0 ? s.s : dst, len < 0 ? (int)s.len : len, &used);
        Piece *pc = &t->pieces[id];
        int32_t type = TT_NORMAL;
        if (types) memcpy(&type, types + 4 * (size_t)id, 4);
        if (scores) memcpy(&pc->score, scores + 4 * (size_t)id, 4);
        if (isnan(pc->score))
            return err_set(e, ST_FORMAT, "%s: token %d has a score that is not a number", g->path, id);
        pc->type = type;
        if (type == TT_BYTE) {
            pc->byte = parse_byte_piece(s.s, (int)s.len);
            if (pc->byte < 0)
                return err_set(e, ST_FORMAT, "%s: token %d has the byte type but is not spelled "
                               "<0xNN>", g->path, id);
        }
    }
    return ST_OK;
}

int tok_from_gguf(Tokenizer **out, const Gguf *g, Err *e) {
    *out = NULL;
    GgufStr model;
    int kind;
    if (gguf_get_str(g, "tokenizer.ggml.model", &model, e)) return ST_FORMAT;
    if (gguf_str_eq(model, "llama")) kind = KIND_SPM;
    else if (gguf_str_eq(model, "gpt2")) kind = KIND_GPT2;
    else
        return err_set(e, ST_UNSUPPORTED, "%s: tokenizer.ggml.model '%.*s' is not supported "
                       "(want llama or gpt2)", g->path, model.len > 64 ? 64 : (int)model.len,
                       model.s);

    Tokenizer *t = NULL;
    int st = load_pieces(&t, g, kind, e);
    if (!st) st = gguf_special(g, "tokenizer.ggml.bos_token_id", t->n_vocab, &t->bos, e);
    if (!st) st = gguf_special(g, "tokenizer.ggml.eos_token_id", t->n_vocab, &t->eos, e);
    if (!st) st = gguf_special(g, "tokenizer.ggml.unknown_token_id", t->n_vocab, &t->unk, e);
    if (!st) st = index_pieces(t, g->path, e);
    if (!st && kind == KIND_GPT2) {
        int cp_to_byte[0x144];
        gpt2_alphabet(cp_to_byte);
        st = load_merges(t, g, cp_to_byte, e);
        if (!st) st = compile_pattern(t, g->path, e);
        for (int b = 0; !st && b < 256; b++)
            if (t->byte_id[b] < 0)
                st = err_set(e, ST_FORMAT, "%s: the GPT-2 vocabulary has no piece for byte 0x%02X",
                             g->path, b);
    }
    if (st) {
        tok_free(t);
        return st;
    }
    t->add_bos = gguf_optional_int(g, "tokenizer.ggml.add_bos_token", kind == KIND_SPM);
    t->add_space_prefix = gguf_optional_int(g, "tokenizer.ggml.add_space_prefix", kind == KIND_SPM);
    if (t->bos < 0) t->add_bos = 0;
    *out = t;
    return ST_OK;
}

/* ---- the GPT-2 pre-tokenizer (tokenizer.h) --------------------------------- */

/* Contractions, a letter run, a number run or a run of other symbols (each
 * with at most one leading space), then whitespace. The \s+(?!\S)
 * alternative leaves the last space of a run to start the next word, so
 * " Hello" stays one word after several spaces. */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* PCRE2 allocates through these, so its memory is counted (and can be made to
 * fail) like the rest of the engine's. */
static void *pcre_alloc(PCRE2_SIZE n, void *unused) { return mem_alloc(n); }
static void pcre_free(void *p, void *unused) { mem_free(p); }

int tok_pattern_init(TokPattern *p, Err *e) {
    p->re = NULL;
    pcre2_general_context *gc = pcre2_general_context_create(pcre_alloc, pcre_free, NULL);
    pcre2_compile_context *cc = gc ? pcre2_compile_context_create(gc) : NULL;
    int code = PCRE2_ERROR_HEAP_FAILED;
    PCRE2_SIZE where = 0;
    /* UTF: the text is UTF-8; UCP: \s, \w, \d mean their Unicode classes. The
     * compiled code keeps the allocator, and match data made from it uses it. */
    if (cc)
        p->re = pcre2_compile((PCRE2_SPTR)GPT2_PATTERN, PCRE2_ZERO_TERMINATED,
                              PCRE2_UTF | PCRE2_UCP, &code, &where, cc);
    pcre2_compile_context_free(cc);   /* both accept NULL */
    pcre2_general_context_free(gc);
    if (p->re) return ST_OK;
    if (code == PCRE2_ERROR_HEAP_FAILED)
        return err_set(e, ST_NOMEM, "out of memory compiling the GPT-2 pattern");
    PCRE2_UCHAR msg[128];
    pcre2_get_error_message(code, msg, sizeof msg);
    return err_set(e, ST_UNSUPPORTED, "PCRE2 cannot compile the GPT-2 pattern at %zu: %s",
                   (size_t)where, (const char *)msg);
}

void tok_pattern_free(TokPattern *p) {
    pcre2_code_free(p->re);   /* accepts NULL */
    p->re = NULL;
}

int tok_splitter_init(TokSplitter *s, const TokPattern *p, const char *text, size_t n, Err *e) {
    memset(s, 0, sizeof *s);
    s->pattern = p;
    s->text = (const unsigned char *)text;
    s->n = n;
    s->md = pcre2_match_data_create_from_pattern(p->re, NULL);   /* the pattern's allocator */
    if (!s->md) return err_set(e, ST_NOMEM, "out of memory for a pattern match");
    return ST_OK;
}

void tok_splitter_free(TokSplitter *s) {
    pcre2_match_data_free(s->md);   /* accepts NULL */
    s->md = NULL;
}

/* The text goes in runs: a run of well-formed UTF-8 is cut by the pattern, a
 * run of bytes that are not UTF-8 is one pre-token (byte-level BPE can spell
 * any byte, so nothing is dropped). A run's end is found once, when the walk
 * enters it. */
int tok_splitter_next(TokSplitter *s, size_t *start, size_t *end, Err *e) {
    if (s->pos >= s->n) return 0;
    if (s->pos >= s->run_end) {   /* a new run: how far do bytes stay (in)valid? */
        size_t i = s->pos;
        s->run_valid = utf8_char_len(s->text + i, s->n - i) > 0;
        while (i < s->n) {
            int k = utf8_char_len(s->text + i, s->n - i);
            if ((k > 0) != s->run_valid) break;
            i += k > 0 ? (size_t)k : 1;
        }
        s->run_end = i;
    }
    *start = s->pos;
    *end = s->run_end;   /* a run of invalid bytes, whole */
    if (s->run_valid) {
        /* The subject ends with the run, so no match runs past it.
         * NO_UTF_CHECK: the run is known to be UTF-8; without it PCRE2 would
         * check the rest of the subject again on every call, which makes a
         * walk quadratic in the text. */
        int rc = pcre2_match(s->pattern->re, s->text, s->run_end, s->pos, PCRE2_NO_UTF_CHECK,
                             s->md, NULL);
        if (rc >= 0) {
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
            assert(ov[1] > ov[0]);   /* no alternative of the pattern matches nothing */
            /* Every character matches some alternative, so the match starts
             * at pos. If one ever did not, the bytes it skipped would be a
             * pre-token of their own (the next call finds the match again),
             * not lost. */
            *end = ov[0] > s->pos ? ov[0] : ov[1];
        } else if (rc == PCRE2_ERROR_NOMEMORY || rc == PCRE2_ERROR_HEAPLIMIT) {
            return err_set(e, ST_NOMEM, "out of memory while matching the GPT-2 pattern");
        } else if (rc != PCRE2_ERROR_NOMATCH) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return err_set(e, ST_ARG, "GPT-2 pattern failed at byte %zu: %s", s->pos,
                           (const char *)msg);
        }   /* no match at all: the rest of the run is one pre-token */
    }
    s->pos = *end;
    return 1;
}

/* ---- encoding: merging on a linked list with a heap ---------------------- */

typedef struct {
    int start, len;   /* the bytes text[start .. start+len) */
    int prev, next;   /* neighbours in the list, -1 at either end */
    int id;           /* token id of these bytes, -1 when they are no piece */
} Symbol;

typedef struct {
    double score;     /* higher merges first: the piece's score, or -rank for GPT-2 */
    int left, right;  /* symbol indices */
    int len;          /* left.len + right.len when pushed; detects stale pairs */
    int id;           /* token id of the merged piece */
} Pair;

typedef struct {      /* scratch of one tok_encode call: about 90 bytes per byte of text */
    const char *text;
    Symbol *sym;      /* (n + 1) */
    int n_sym;
    Pair *heap;       /* (3 * (n + 1)): pairs pushed per word <= 3 * symbols */
    int n_heap, cap_heap;
    int *ids;         /* the caller's output */
    int n_ids, cap_ids;
} Work;

/* Pair a comes out of the heap before b: higher score first, then the
 * leftmost (symbol indices grow left to right). */
static int pair_before(const Pair *a, const Pair *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(Work *w, Pair p) {
    assert(w->n_heap < w->cap_heap);
    int i = w->n_heap++;
    while (i > 0 && pair_before(&p, &w->heap[(i - 1) / 2])) {   /* sift up */
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = p;
}

static Pair heap_pop(Work *w) {
    Pair top = w->heap[0], last = w->heap[--w->n_heap];
    int i = 0;
    for (;;) {   /* sift the last element down from the root */
        int c = 2 * i + 1;
        if (c >= w->n_heap) break;
        if (c + 1 < w->n_heap && pair_before(&w->heap[c + 1], &w->heap[c])) c++;
        if (!pair_before(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (w->n_heap > 0) w->heap[i] = last;
    return top;
}

/* Push the pair (left, right) if the vocabulary can merge it. Sentencepiece:
 * when the concatenated bytes are a piece (their score decides). GPT-2: when
 * the merge list has the two pieces (their rank decides). */
static void propose(const Tokenizer *t, Work *w, int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol *l = &w->sym[left], *r = &w->sym[right];
    Pair p = {0, left, right, l->len + r->len, -1};
    if (t->kind == KIND_SPM) {
        p.id = piece_find(t, w->text + l->start, p.len);
        if (p.id < 0) return;
        p.score = t->pieces[p.id].score;
    } else {
        if (l->id < 0 || r->id < 0) return;
        int rank = merge_find(t, l->id, r->id);
        if (rank < 0) return;
        p.id = t->merges[rank].merged;
        p.score = -(double)rank;
    }
    heap_push(w, p);
}

/* Merge the symbols, a linked list in text order, until no pair can be
 * merged. */
static void merge_all(const Tokenizer *t, Work *w) {
    w->n_heap = 0;
    for (int i = 0; i + 1 < w->n_sym; i++) propose(t, w, i, i + 1);
    while (w->n_heap > 0) {
        Pair p = heap_pop(w);
        Symbol *l = &w->sym[p.left], *r = &w->sym[p.right];
        if (l->len == 0 || r->len == 0 || l->next != p.right || l->len + r->len != p.len)
            continue;   /* stale: one side has been merged with something else */
        l->len += r->len;   /* r is absorbed into l and unlinked */
        l->id = p.id;
        l->next = r->next;
        if (r->next >= 0) w->sym[r->next].prev = p.left;
        r->len = 0;
        propose(t, w, l->prev, p.left);
        propose(t, w, p.left, l->next);
    }
}

/* Append one symbol for text[start .. start+len) to the list. */
static void add_symbol(const Tokenizer *t, Work *w, int start, int len) {
    int i = w->n_sym++;
    w->sym[i] = (Symbol){start, len, i - 1, -1, -1};
    if (i > 0) w->sym[i - 1].next = i;
    w->sym[i].id = piece_find(t, w->text + start, len);
}

static void emit(Work *w, int id) {
    if (w->n_ids < w->cap_ids) w->ids[w->n_ids] = id;
    w->n_ids++;   /* keep counting past cap, to say how many were needed */
}

/* Output the ids of the list, left to right. A symbol that is no piece (a
 * character missing from the vocabulary) becomes its byte tokens; in a
 * vocabulary without byte tokens, one unknown token. */
static int emit_symbols(const Tokenizer *t, Work *w, Err *e) {
    for (int i = w->n_sym > 0 ? 0 : -1; i >= 0; i = w->sym[i].next) {
        const Symbol *s = &w->sym[i];
        if (s->id >= 0) {
            emit(w, s->id);
            continue;
        }
        const unsigned char *bytes = (const unsigned char *)w->text + s->start;
        int have_bytes = 1;
        for (int k = 0; k < s->len; k++) have_bytes &= t->byte_id[bytes[k]] >= 0;
        if (have_bytes) {
            for (int k = 0; k < s->len; k++) emit(w, t->byte_id[bytes[k]]);
        } else if (t->unk >= 0) {
            emit(w, t->unk);
        } else {
            return err_set(e, ST_FORMAT, "the vocabulary can spell neither byte 0x%02X nor an "
                           "unknown token", bytes[0]);
        }
    }
    return ST_OK;
}

/* Sentencepiece: one symbol per UTF-8 character of text (a byte that is not
 * part of a valid character is a symbol of its own), merge, emit. */
static int spm_encode(const Tokenizer *t, Work *w, int n, Err *e) {
    const unsigned char *u = (const unsigned char *)w->text;
    w->n_sym = 0;
    for (int i = 0; i < n;) {
        int k = utf8_char_len(u + i, n - i);
        if (k == 0) k = 1;
        add_symbol(t, w, i, k);
        i += k;
    }
    merge_all(t, w);
    return emit_symbols(t, w, e);
}

/* GPT-2 byte-level BPE on one word text[start .. end): one symbol per byte. */
static int gpt2_word(const Tokenizer *t, Work *w, int start, int end, Err *e) {
    w->n_sym = 0;
    for (int i = start; i < end; i++) add_symbol(t, w, i, 1);
    merge_all(t, w);
    return emit_symbols(t, w, e);
}

/* GPT-2: cut the text into words with the pre-tokenizer, merge inside each. */
static int gpt2_encode(const Tokenizer *t, Work *w, int n, Err *e) {
    TokSplitter sp;
    int st = tok_splitter_init(&sp, &t->pattern, w->text, (size_t)n, e);
    size_t start, end;
    while (st == ST_OK) {
        st = tok_splitter_next(&sp, &start, &end, e);
        if (st <= 0) break;   /* 0: the text is used up; < 0: an error */
        st = gpt2_word(t, w, (int)start, (int)end, e);
    }
    tok_splitter_free(&sp);
    return st;
}

int tok_encode(const Tokenizer *t, const char *text, int add_bos, int *ids, int cap, Err *e) {
    size_t len = strlen(text);
    if (len > (size_t)INT_MAX / 8) return err_set(e, ST_ARG, "text of %zu bytes is too long", len);
    int n = (int)len;
    int prefix = t->kind == KIND_SPM && t->add_space_prefix && n > 0;
    Work w = {.ids = ids, .cap_ids = cap < 0 ? 0 : cap};
    char *buf = mem_alloc((size_t)n + 2);
    w.sym = mem_alloc(((size_t)n + 1) * sizeof(Symbol));
    w.cap_heap = 3 * (n + 1);
    w.heap = mem_alloc((size_t)w.cap_heap * sizeof(Pair));
    int st = ST_OK;
    if (!buf || !w.sym || !w.heap) {
        st = err_set(e, ST_NOMEM, "out of memory encoding %d bytes of text", n);
        goto done;
    }
    /* The working text: sentencepiece's dummy prefix, then the text. */
    if (prefix) buf[0] = ' ';
    memcpy(buf + prefix, text, (size_t)n + 1);
    w.text = buf;

    if (add_bos && t->add_bos) emit(&w, t->bos);
    st = t->kind == KIND_SPM ? spm_encode(t, &w, n + prefix, e) : gpt2_encode(t, &w, n, e);
    if (st == ST_OK && w.n_ids > cap)
        st = err_set(e, ST_ARG, "text needs %d token ids, more than the %d there is room for",
                     w.n_ids, cap);
done:
    mem_free(buf);
    mem_free(w.sym);
    mem_free(w.heap);
    return st ? st : w.n_ids;
}

/* ---- decoding ------------------------------------------------------------ */

void tok_decoder_init(TokDecoder *d) {
    memset(d, 0, sizeof *d);
    d->prev = -1;
}

/* exercises/utf8_stream/ hollows this function: built with -DEXERCISE_UTF8_STREAM,
 * the file that macro names stands in its place (tools/exercise.sh). */
#ifdef EXERCISE_UTF8_STREAM
#include EXERCISE_UTF8_STREAM
#else
/* Write the whole characters of buf[0..n) to out; invalid bytes become
 * U+FFFD (one per maximal invalid run that began like a character, as the
 * Unicode standard recommends); an unfinished character at the end goes to
 * d->pending. Returns the bytes written (out is NUL-terminated). */
static int utf8_drain(TokDecoder *d, const unsigned char *buf, int n, char *out) {
    int w = 0;
    d->n_pending = 0;
    for (int i = 0; i < n;) {
        int need = utf8_seq_len(buf[i]);
        int k = utf8_valid_prefix(buf + i, n - i);
        if (need > 0 && k == need) {
            memcpy(out + w, buf + i, (size_t)k);
            w += k;
            i += k;
        } else if (need > 0 && k == n - i) {   /* valid so far, but cut short */
            memcpy(d->pending, buf + i, (size_t)k);
            d->n_pending = k;
            break;
        } else {
            memcpy(out + w, REPLACEMENT, 3);
            w += 3;
            i += k > 0 ? k : 1;
        }
    }
    out[w] = 0;
    return w;
}
#endif

int tok_decode(const Tokenizer *t, TokDecoder *d, int id, char *out) {
    unsigned char buf[8 + MAX_PIECE_BYTES];
    int n = d->n_pending;
    memcpy(buf, d->pending, (size_t)n);
    int prev = d->prev;
    d->prev = id;

    if (id < 0 || id >= t->n_vocab) {   /* not a token at all */
        memcpy(buf + n, REPLACEMENT, 3);
        n += 3;
    } else {
        const Piece *p = &t->pieces[id];
        if (p->type == TT_CONTROL) {
            /* no text */
        } else if (p->type == TT_UNKNOWN) {
            memcpy(buf + n, REPLACEMENT, 3);
            n += 3;
        } else if (p->type == TT_BYTE) {
            buf[n++] = (unsigned char)p->byte;
        } else {
            const char *s = p->s;
            int len = p->len;
            /* The dummy prefix space: the text began after BOS, so its
             * first space is the one encoding added (as llama2.c does). */
            if (t->kind == KIND_SPM && t->add_space_prefix && prev == t->bos && prev >= 0 &&
                len > 0 && s[0] == ' ') {
                s++;
                len--;
            }
            memcpy(buf + n, s, (size_t)len);
            n += len;
        }
    }
    return utf8_drain(d, buf, n, out);
}

int tok_decode_flush(TokDecoder *d, char *out) {
    int w = 0;
    if (d->n_pending > 0) {   /* the start of a character that never finished */
        memcpy(out, REPLACEMENT, 3);
        w = 3;
    }
    d->n_pending = 0;
    out[w] = 0;
    return w;
}
