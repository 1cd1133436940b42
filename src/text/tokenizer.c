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
 *  - GPT-2 and the byte-level BPE vocabularies after it (Llama 3, Qwen2,
 *    DeepSeek, StarCoder, Falcon ...): the file lists the merges themselves,
 *    in the order they were learned; the pair with the lowest rank (earliest
 *    learned) wins. Units are bytes, so byte fallback is built in. Before
 *    merging, a pre-tokenizer cuts the text into words, numbers, punctuation
 *    and runs of spaces, and merging never crosses those cuts. Each
 *    vocabulary was trained with its own cutting rules, one to six regular
 *    expressions applied in turn, and tokenizer.ggml.pre names them; cut
 *    differently, the same text merges into different ids, which the model
 *    has never seen in that order. The patterns need Unicode's letter and
 *    number classes, so they run on PCRE2 rather than hand-written code. The
 *    pre-tokenizers are public (tok_splitter_*): the vocabulary trainer,
 *    bpe.c, cuts its training text with the very same code.
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
#include "text/tokenizer.h"
#include "base/fileio.h"
#include "base/mem.h"
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
 * pending bytes, so a piece of this many bytes always fits in TOK_MAX_PIECE.
 * Longer pieces load and encode; decoding cuts them here (tokenizer.h). */
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
    char source[128];         /* the file it came from, for messages */
    /* byte-level BPE only */
    Merge *merges;            /* (n_merges), in rank order */
    int n_merges;
    int *merge_slots;         /* (n_merge_slots) hash table: (left, right) -> rank */
    int n_merge_slots;
    TokPattern pattern;       /* the pre-tokenizer, compiled */
    int whole_words;          /* a pre-token that is a piece is taken whole (Llama 3) */
    int *user;                /* (n_user) user-defined pieces, by first byte, longest first */
    int n_user;
    int user_from[257];       /* user[user_from[b] .. user_from[b+1]) start with byte b */
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
        if (p->type == TT_BYTE && t->byte_id[p->byte] < 0) t->byte_id[p->byte] = id;
        if (!is_text_piece(p->type) || piece_find(t, p->s, p->len) >= 0) continue;
        uint32_t i = hash_bytes(p->s, p->len) & mask;
        while (t->slots[i] >= 0) i = (i + 1) & mask;
        t->slots[i] = id;
    }
    /* GPT-2 has no byte tokens: its single-byte pieces play that role. A
     * vocabulary may lack some (Falcon's has no piece for 0x03): those bytes
     * stay -1, and encoding says so if a text holds one. */
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
    mem_free(t->user);
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
    snprintf(t->source, sizeof t->source, "%s", path);
    st = index_pieces(t, path, e);
done:
    mem_free(data);
    if (st) tok_free(t);
    else *out = t;
    return st;
}

/* ---- pre-tokenizers (tokenizer.h) -------------------------------------------- */

/* GPT-2's pattern: contractions, a letter run, a number run or a run of other
 * symbols (each with at most one leading space), then whitespace. The
 * \s+(?!\S) alternative leaves the last space of a run to start the next
 * word, so " Hello" stays one word after several spaces. Several rule sets
 * below reuse it as one of their stages. */
#define GPT2_WORDS "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* Llama 3's pattern (tiktoken's cl100k): contractions in either case; a
 * letter run, which may take one non-letter, non-digit, non-newline in
 * front (" Hello", but also "$Hello" or "'Hello"); numbers in groups of at
 * most three digits; a symbol run with a space in front and newlines after
 * it; newlines with the whitespace before them; then other whitespace as
 * GPT-2 has it. Qwen2's differs in one place: every digit on its own. */
#define LLAMA3_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define LLAMA3_REST "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define LLAMA3_WORDS LLAMA3_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}" LLAMA3_REST
#define QWEN2_WORDS LLAMA3_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}" LLAMA3_REST

/* Chinese, Japanese and Korean runs, as DeepSeek's tokenizers write them:
 * the CJK ideographs U+4E00..U+9FA5 and the wide range U+0800..U+4E00 that
 * sweeps in kana among much else, then Hangul syllables. */
#define DEEPSEEK_CJK "[\xE4\xB8\x80-\xE9\xBE\xA5\xE0\xA0\x80-\xE4\xB8\x80\xEA\xB0\x80-\xED\x9F\xBF]+"

/* DeepSeek LLM's letters: its tokenizer.json lists the cased letters (upper,
 * lower and title case, the class Unicode calls LC) range by range, as of
 * the Unicode version it was made with; we keep its list rather than
 * PCRE2's \p{L&}, which newer Unicode has grown. Written in UTF-8. */
#define DEEPSEEK_LETTERS                                                                          \
    "\\s?[A-Za-z\xC2\xB5\xC3\x80-\xC3\x96\xC3\x98-\xC3\xB6\xC3\xB8-\xC6\xBA\xC6\xBC-\xC6\xBF"     \
    "\xC7\x84-\xCA\x93\xCA\x95-\xCA\xAF\xCD\xB0-\xCD\xB3\xCD\xB6\xCD\xB7\xCD\xBB-\xCD\xBD\xCD\xBF" \
    "\xCE\x86\xCE\x88-\xCE\x8A\xCE\x8C\xCE\x8E-\xCE\xA1\xCE\xA3-\xCF\xB5\xCF\xB7-\xD2\x81"         \
    "\xD2\x8A-\xD4\xAF\xD4\xB1-\xD5\x96\xE1\x82\xA0-\xE1\x83\x85\xE1\x8E\xA0-\xE1\x8F\xB5"         \
    "\xE1\x8F\xB8-\xE1\x8F\xBD\xE1\xB2\x90-\xE1\xB2\xBA\xE1\xB2\xBD-\xE1\xB2\xBF"                 \
    "\xE1\xB4\x80-\xE1\xB4\xAB\xE1\xB5\xAB-\xE1\xB5\xB7\xE1\xB5\xB9-\xE1\xB6\x9A"                 \
    "\xE1\xB8\x80-\xE1\xBC\x95\xE1\xBC\x98-\xE1\xBC\x9D\xE1\xBC\xA0-\xE1\xBD\x85"                 \
    "\xE1\xBD\x88-\xE1\xBD\x8D\xE1\xBD\x90-\xE1\xBD\x97\xE1\xBD\x99\xE1\xBD\x9B\xE1\xBD\x9D"       \
    "\xE1\xBD\x9F-\xE1\xBD\xBD\xE1\xBE\x80-\xE1\xBE\xB4\xE1\xBE\xB6-\xE1\xBE\xBC\xE1\xBE\xBE"     \
    "\xE1\xBF\x82-\xE1\xBF\x84\xE1\xBF\x86-\xE1\xBF\x8C\xE1\xBF\x90-\xE1\xBF\x93"                 \
    "\xE1\xBF\x96-\xE1\xBF\x9B\xE1\xBF\xA0-\xE1\xBF\xAC\xE1\xBF\xB2-\xE1\xBF\xB4"                 \
    "\xE1\xBF\xB6-\xE1\xBF\xBC\xE2\x84\x82\xE2\x84\x87\xE2\x84\x8A-\xE2\x84\x93\xE2\x84\x95"       \
    "\xE2\x84\x99-\xE2\x84\x9D\xE2\x84\xA4\xE2\x84\xA6\xE2\x84\xA8\xE2\x84\xAA-\xE2\x84\xAD"       \
    "\xE2\x84\xAF-\xE2\x84\xB4\xE2\x84\xB9\xE2\x84\xBC-\xE2\x84\xBF\xE2\x85\x85-\xE2\x85\x89"     \
    "\xE2\x85\x8E\xE2\x86\x83\xE2\x86\x84\xE2\xB0\x80-\xE2\xB1\xBB\xE2\xB1\xBE-\xE2\xB3\xA4"       \
    "\xE2\xB3\xAB-\xE2\xB3\xAE\xE2\xB3\xB2\xE2\xB3\xB3\xEA\x99\x80-\xEA\x99\xAD"                  \
    "\xEA\x9A\x80-\xEA\x9A\x9B\xEA\x9C\xA2-\xEA\x9D\xAF\xEA\x9D\xB1-\xEA\x9E\x87"                 \
    "\xEA\x9E\x8B-\xEA\x9E\x8E\xEA\xAD\xB0-\xEA\xAE\xBF\xEF\xAC\x80-\xEF\xAC\x86"                 \
    "\xEF\xAC\x93-\xEF\xAC\x97\xEF\xBC\xA1-\xEF\xBC\xBA\xEF\xBD\x81-\xEF\xBD\x9A"                 \
    "\xF0\x90\x90\x80-\xF0\x90\x91\x8F\xF0\x90\x92\xB0-\xF0\x90\x93\x93"                          \
    "\xF0\x90\x93\x98-\xF0\x90\x93\xBB\xF0\x90\xB2\x80-\xF0\x90\xB2\xB2"                          \
    "\xF0\x90\xB3\x80-\xF0\x90\xB3\xB2\xF0\x91\xA2\xA0-\xF0\x91\xA3\x9F"                          \
    "\xF0\x9E\xA4\x80-\xF0\x9E\xA5\x83]+"

/* DeepSeek LLM's punctuation: ASCII's, its full-width forms, the curly
 * quotes U+2018..U+201F, and the CJK ideographic space, comma and full stop
 * U+3000..U+3002. */
#define DEEPSEEK_PUNCT \
    "\\s?[!-/:-~\xEF\xBC\x81-\xEF\xBC\x8F\xEF\xBC\x9A-\xEF\xBD\x9E\xE2\x80\x98-\xE2\x80\x9F\xE3\x80\x80-\xE3\x80\x82]+"

/* Whitespace at the end of the piece: DeepSeek's \s+$. Written as is, PCRE2
 * would try it from every space of a long run that does not end the piece,
 * each try running to the run's end: quadratic. Starting only where a run
 * starts, and never giving back, it is linear and matches the same. */
#define TRAILING_SPACE "(?<!\\s)\\s++\\z"

/* One rule set: patterns applied in turn. The first cuts the text; each
 * next one cuts every piece the one before left, the stretches between its
 * matches becoming pieces too (so nothing is ever dropped). A pattern sees
 * only its piece: \z and (?!\S) look at the end of the piece, not of the
 * text. */
typedef struct {
    const char *name;   /* the name this engine calls it by, in messages */
    const char *stages[TOK_MAX_STAGES + 1];   /* NULL after the last */
    int whole_words;    /* a pre-token that is a piece is taken whole, unmerged */
    int add_bos;        /* tokenizer.ggml.add_bos_token when the file does not say */
} PreRules;

static const PreRules PRE_GPT2 = {"gpt-2", {GPT2_WORDS}, 0, 0};
/* What llama.cpp uses when tokenizer.ggml.pre is absent or "default":
 * punctuation runs first (with the ASCII symbols that Unicode files as math
 * or currency), then GPT-2's words, then number runs, then three digits at
 * a time from the left. */
static const PreRules PRE_DEFAULT = {
    "default", {"[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2_WORDS, "\\p{N}+", "[0-9][0-9][0-9]"}, 0, 0};
static const PreRules PRE_LLAMA3 = {"llama-bpe", {LLAMA3_WORDS}, 1, 1};
/* DBRX and Smaug use Llama 3's pattern without its whole-word shortcut. */
static const PreRules PRE_LLAMA3_MERGED = {"dbrx", {LLAMA3_WORDS}, 0, 0};
static const PreRules PRE_QWEN2 = {"qwen2", {QWEN2_WORDS}, 0, 0};
static const PreRules PRE_DEEPSEEK_LLM = {
    "deepseek-llm",
    {"[\\r\\n]", DEEPSEEK_LETTERS, DEEPSEEK_PUNCT, TRAILING_SPACE, DEEPSEEK_CJK, "\\p{N}+"}, 0, 0};
static const PreRules PRE_DEEPSEEK_CODER = {
    "deepseek-coder", {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", DEEPSEEK_CJK, "\\p{N}"}, 0, 0};
/* DeepSeek V3: digits in threes, runs of ideographs and kana, then a
 * Llama 3 style pattern in which a letter run may start with one ASCII
 * punctuation mark and symbols (\p{S}) go with punctuation. */
static const PreRules PRE_DEEPSEEK_V3 = {
    "deepseek-v3",
    {"\\p{N}{1,3}",
     "[\xE4\xB8\x80-\xE9\xBE\xA5\xE3\x81\x80-\xE3\x82\x9F\xE3\x82\xA0-\xE3\x83\xBF]+",
     "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?"
     "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    0, 0};
static const PreRules PRE_FALCON = {
    "falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", GPT2_WORDS, "[0-9][0-9][0-9]"}, 0, 0};
/* StarCoder and the code models after it: every digit alone, then GPT-2. */
static const PreRules PRE_STARCODER = {"starcoder", {"\\p{N}", GPT2_WORDS}, 0, 0};
/* BLOOM: a space and a run of anything but whitespace and the listed
 * punctuation (the parentheses and | are members of the class too, as the
 * original pattern has them). */
#define BLOOM_WORDS " ?[^(\\s|.,!?\xE2\x80\xA6\xE3\x80\x82\xEF\xBC\x8C\xE3\x80\x81\xE0\xA5\xA4\xDB\x94\xD8\x8C)]+"
static const PreRules PRE_BLOOM = {"bloom", {BLOOM_WORDS}, 0, 0};
static const PreRules PRE_VIKING = {"viking", {BLOOM_WORDS, "\\p{N}"}, 0, 0};

/* tokenizer.ggml.pre values, as llama.cpp (build 4748) names them, and the
 * rules of each. */
static const struct {
    const char *name;
    const PreRules *rules;
} PRE_NAMES[] = {
    {"default", &PRE_DEFAULT},
    {"gpt-2", &PRE_GPT2}, {"mpt", &PRE_GPT2}, {"olmo", &PRE_GPT2}, {"jais", &PRE_GPT2},
    {"phi-2", &PRE_GPT2}, {"jina-es", &PRE_GPT2}, {"jina-de", &PRE_GPT2},
    {"gigachat", &PRE_GPT2}, {"jina-v1-en", &PRE_GPT2}, {"jina-v2-es", &PRE_GPT2},
    {"jina-v2-de", &PRE_GPT2}, {"jina-v2-code", &PRE_GPT2}, {"roberta-bpe", &PRE_GPT2},
    {"llama-bpe", &PRE_LLAMA3}, {"llama3", &PRE_LLAMA3}, {"llama-v3", &PRE_LLAMA3},
    {"falcon3", &PRE_LLAMA3},
    {"dbrx", &PRE_LLAMA3_MERGED}, {"smaug-bpe", &PRE_LLAMA3_MERGED},
    {"qwen2", &PRE_QWEN2}, {"deepseek-r1-qwen", &PRE_QWEN2}, {"stablelm2", &PRE_QWEN2},
    {"megrez", &PRE_QWEN2},
    {"deepseek-llm", &PRE_DEEPSEEK_LLM},
    {"deepseek-coder", &PRE_DEEPSEEK_CODER},
    {"deepseek-v3", &PRE_DEEPSEEK_V3},
    {"falcon", &PRE_FALCON},
    {"starcoder", &PRE_STARCODER}, {"refact", &PRE_STARCODER}, {"command-r", &PRE_STARCODER},
    {"smollm", &PRE_STARCODER}, {"codeshell", &PRE_STARCODER}, {"exaone", &PRE_STARCODER},
    {"minerva-7b", &PRE_STARCODER},
    {"bloom", &PRE_BLOOM}, {"poro-chat", &PRE_BLOOM}, {"gpt3-finnish", &PRE_BLOOM},
    {"viking", &PRE_VIKING},
};

/* The rules for a tokenizer.ggml.pre value, or NULL. */
static const PreRules *pre_rules(const char *name) {
    for (size_t i = 0; i < sizeof PRE_NAMES / sizeof PRE_NAMES[0]; i++)
        if (strcmp(PRE_NAMES[i].name, name) == 0) return PRE_NAMES[i].rules;
    return NULL;
}

/* PCRE2 allocates through these, so its memory is counted (and can be made to
 * fail) like the rest of the engine's. */
static void *pcre_alloc(PCRE2_SIZE n, void *unused) { return mem_alloc(n); }
static void pcre_free(void *p, void *unused) { mem_free(p); }

/* Compile every stage of r into p. */
static int compile_rules(TokPattern *p, const PreRules *r, Err *e) {
    memset(p, 0, sizeof *p);
    pcre2_general_context *gc = pcre2_general_context_create(pcre_alloc, pcre_free, NULL);
    pcre2_compile_context *cc = gc ? pcre2_compile_context_create(gc) : NULL;
    int code = PCRE2_ERROR_HEAP_FAILED, k = 0;
    PCRE2_SIZE where = 0;
    /* UTF: the text is UTF-8; UCP: \s, \w, \d mean their Unicode classes. The
     * compiled code keeps the allocator, and match data made from it uses it. */
    for (; cc && k < TOK_MAX_STAGES && r->stages[k]; k++) {
        p->re[k] = pcre2_compile((PCRE2_SPTR)r->stages[k], PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP, &code, &where, cc);
        if (!p->re[k]) break;
        p->n_stages = k + 1;
    }
    pcre2_compile_context_free(cc);   /* both accept NULL */
    pcre2_general_context_free(gc);
    if (cc && (k == TOK_MAX_STAGES || !r->stages[k])) return ST_OK;
    tok_pattern_free(p);
    if (code == PCRE2_ERROR_HEAP_FAILED)
        return err_set(e, ST_NOMEM, "out of memory compiling the '%s' pre-tokenizer", r->name);
    PCRE2_UCHAR msg[128];
    pcre2_get_error_message(code, msg, sizeof msg);
    return err_set(e, ST_UNSUPPORTED, "PCRE2 cannot compile pattern %d of the '%s' "
                   "pre-tokenizer at %zu: %s", k + 1, r->name, (size_t)where, (const char *)msg);
}

int tok_pattern_init(TokPattern *p, Err *e) { return compile_rules(p, &PRE_GPT2, e); }

int tok_pattern_init_named(TokPattern *p, const char *name, Err *e) {
    memset(p, 0, sizeof *p);
    const PreRules *r = pre_rules(name);
    if (!r) return err_set(e, ST_UNSUPPORTED, "unknown pre-tokenizer '%.64s'", name);
    return compile_rules(p, r, e);
}

void tok_pattern_free(TokPattern *p) {
    for (int k = 0; k < TOK_MAX_STAGES; k++) {
        pcre2_code_free(p->re[k]);   /* accepts NULL */
        p->re[k] = NULL;
    }
    p->n_stages = 0;
}

int tok_splitter_init(TokSplitter *s, const TokPattern *p, const char *text, size_t n, Err *e) {
    memset(s, 0, sizeof *s);
    s->pattern = p;
    s->text = (const unsigned char *)text;
    s->n = n;
    /* Only the whole match is read (no pattern captures), so one match data
     * serves every stage; made from the first, it uses the pattern's
     * allocator. */
    s->md = pcre2_match_data_create_from_pattern(p->re[0], NULL);
    if (!s->md) return err_set(e, ST_NOMEM, "out of memory for a pattern match");
    return ST_OK;
}

void tok_splitter_free(TokSplitter *s) {
    pcre2_match_data_free(s->md);   /* accepts NULL */
    s->md = NULL;
}

/* Level 0 of the walk: the text in runs, well-formed UTF-8 or not. Only the
 * UTF-8 runs go through the patterns; a run of other bytes is one
 * pre-token (byte-level BPE can spell any byte, so nothing is dropped). */
static int next_run(TokSplitter *s, size_t *start, size_t *end) {
    if (s->pos >= s->n) return 0;
    size_t i = s->pos;
    s->run_valid = utf8_char_len(s->text + i, s->n - i) > 0;
    while (i < s->n) {
        int k = utf8_char_len(s->text + i, s->n - i);
        if ((k > 0) != s->run_valid) break;
        i += k > 0 ? (size_t)k : 1;
    }
    *start = s->pos;
    *end = s->pos = i;
    return 1;
}

/* The next piece of level k: level 0 is the runs, level k >= 1 the pieces
 * that stage k-1 cuts from the pieces of level k-1. Each level holds the
 * piece it is cutting (lo, hi) and how far it has got (at), and pulls a new
 * one from the level below when that is used up. Returns 1, 0 at the end,
 * or a negative Status. */
static int pull(TokSplitter *s, int k, size_t *start, size_t *end, Err *e) {
    if (k == 0) return next_run(s, start, end);
    int j = k - 1;   /* the stage that cuts at this level */
    if (s->at[j] >= s->hi[j]) {
        int st = pull(s, j, start, end, e);
        if (st <= 0 || !s->run_valid) return st;   /* not UTF-8: passes every stage whole */
        s->lo[j] = s->at[j] = *start;
        s->hi[j] = *end;
    }
    size_t lo = s->lo[j], hi = s->hi[j], at = s->at[j];
    *start = at;
    *end = hi;   /* if the pattern matches nowhere: the rest of the piece */
    /* The subject is the piece alone, so a match never runs past it and
     * lookarounds see its ends. NO_UTF_CHECK: the run is known to be UTF-8
     * (without it PCRE2 would check the whole subject again on every call,
     * which makes a walk quadratic); NOTEMPTY: an empty match would cut
     * nothing. */
    int rc = pcre2_match(s->pattern->re[j], s->text + lo, hi - lo, at - lo,
                         PCRE2_NO_UTF_CHECK | PCRE2_NOTEMPTY, s->md, NULL);
    if (rc >= 0) {
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
        assert(ov[1] > ov[0] && ov[0] >= at - lo);
        /* The stretch before the match is a piece of its own; the next
         * call finds the match again and hands it out. */
        *end = lo + (ov[0] > at - lo ? ov[0] : ov[1]);
    } else if (rc == PCRE2_ERROR_NOMEMORY || rc == PCRE2_ERROR_HEAPLIMIT) {
        return err_set(e, ST_NOMEM, "out of memory while matching pre-tokenizer pattern %d", k);
    } else if (rc != PCRE2_ERROR_NOMATCH) {
        PCRE2_UCHAR msg[128];
        pcre2_get_error_message(rc, msg, sizeof msg);
        return err_set(e, ST_ARG, "pre-tokenizer pattern %d failed at byte %zu: %s", k, at,
                       (const char *)msg);
    }
    s->at[j] = *end;
    return 1;
}

int tok_splitter_next(TokSplitter *s, size_t *start, size_t *end, Err *e) {
    return pull(s, s->pattern->n_stages, start, end, e);
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

    /* Room for two pieces, undisguised. The disguise spends one or two bytes
     * on a byte, so a merge longer than two of the longest piece, disguised,
     * cannot name two pieces. */
    int longest = 1;
    for (int id = 0; id < t->n_vocab; id++)
        if (t->pieces[id].len > longest) longest = t->pieces[id].len;
    size_t cap = 4 * (size_t)longest + 1;
    char *buf = mem_alloc(cap);
    if (!buf) return err_set(e, ST_NOMEM, "%s: out of memory for a merge", g->path);
    int st = ST_OK;
    uint32_t mask = (uint32_t)t->n_merge_slots - 1;
    for (int r = 0; r < t->n_merges && st == ST_OK; r++) {
        GgufStr s = gguf_next_str(&p);
        int shown = s.len > 64 ? 64 : (int)s.len;
        if (s.len > cap) {
            st = err_set(e, ST_FORMAT, "%s: tokenizer.ggml.merges: merge %d is %llu bytes long, "
                         "more than two of its longest piece", g->path, r,
                         (unsigned long long)s.len);
            break;
        }
        /* A half never holds a space (the disguise has none), so the first
         * space after the first character separates the halves. */
        const char *sp = s.len > 1 ? memchr(s.s + 1, ' ', s.len - 1) : NULL;
        if (!sp) {
            st = err_set(e, ST_FORMAT, "%s: merge %d '%.*s' is not two pieces separated by a space",
                         g->path, r, shown, s.s);
            break;
        }
        int nl = (int)(sp - s.s), nr = (int)s.len - nl - 1;
        int ll = gpt2_unmap(s.s, nl, cp_to_byte, buf);
        int lr = gpt2_unmap(sp + 1, nr, cp_to_byte, buf + (ll > 0 ? ll : 0));
        Merge *m = &t->merges[r];
        m->left = ll > 0 ? piece_find(t, buf, ll) : -1;
        m->right = ll > 0 && lr > 0 ? piece_find(t, buf + ll, lr) : -1;
        m->merged = m->left >= 0 && m->right >= 0 ? piece_find(t, buf, ll + lr) : -1;
        if (m->merged < 0) {
            st = err_set(e, ST_FORMAT, "%s: merge %d '%.*s' names a piece that is not in the "
                         "vocabulary", g->path, r, shown, s.s);
            break;
        }
        if (merge_find(t, m->left, m->right) >= 0) continue;   /* a repeat never wins */
        uint32_t i = hash_pair(m->left, m->right) & mask;
        while (t->merge_slots[i] >= 0) i = (i + 1) & mask;
        t->merge_slots[i] = r;
    }
    mem_free(buf);
    return st;
}

/* The pre-tokenizer that tokenizer.ggml.pre names ("default" when the key
 * is absent, as llama.cpp has it), compiled; a name we do not know is
 * refused, naming it, rather than cut some other way without a word. */
static int load_pre(Tokenizer *t, const Gguf *g, Err *e) {
    char name[64] = "default";
    if (gguf_find(g, "tokenizer.ggml.pre")) {
        GgufStr v;
        if (gguf_get_str(g, "tokenizer.ggml.pre", &v, e)) return ST_FORMAT;
        if (v.len >= sizeof name || memchr(v.s, 0, v.len))
            return err_set(e, ST_UNSUPPORTED, "%s: tokenizer.ggml.pre '%.*s' is not a "
                           "pre-tokenizer this engine knows", g->path, v.len > 64 ? 64 : (int)v.len,
                           v.s);
        memcpy(name, v.s, v.len);
        name[v.len] = 0;
    }
    const PreRules *r = pre_rules(name);
    if (!r) {
        char known[320];
        size_t w = 0;
        known[0] = 0;
        for (size_t i = 0; i < sizeof PRE_NAMES / sizeof PRE_NAMES[0] && w < sizeof known; i++)
            if (strcmp(PRE_NAMES[i].rules->name, PRE_NAMES[i].name) == 0)   /* not an alias */
                w += (size_t)snprintf(known + w, sizeof known - w, "%s%s", w ? ", " : "",
                                      PRE_NAMES[i].name);
        return err_set(e, ST_UNSUPPORTED, "%s: tokenizer.ggml.pre '%s' is not a pre-tokenizer this "
                       "engine knows (it knows %s, and their aliases)", g->path, name, known);
    }
    Err why;
    int st = compile_rules(&t->pattern, r, &why);
    if (st) return err_set(e, st, "%s: tokenizer.ggml.pre '%s': %s", g->path, name, why.msg);
    t->whole_words = r->whole_words;
    t->add_bos = r->add_bos;   /* the default; tokenizer.ggml.add_bos_token overrides it */
    return ST_OK;
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
        int32_t type = TT_NORMAL;
        if (types) memcpy(&type, types + 4 * (size_t)id, 4);
        /* A user-defined piece of a byte-level vocabulary is plain UTF-8,
         * not disguised: DeepSeek's "ü" is the two bytes C3 BC. */
        char *dst = t->arena + used;   /* unmapping never grows a piece */
        int len = kind == KIND_SPM ? spm_unmap(s.s, (int)s.len, dst)
                  : type == TT_USER ? -1
                                    : gpt2_unmap(s.s, (int)s.len, cp_to_byte, dst);
        set_piece(t, id, len < 0 ? s.s : dst, len < 0 ? (int)s.len : len, &used);
        Piece *pc = &t->pieces[id];
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

/* The user-defined pieces (GPT-NeoX's runs of spaces, DeepSeek's Latin-1
 * letters): the text is cut at them before the pre-tokenizer runs, as
 * llama.cpp and Hugging Face do. Indexed by first byte, longest first, so
 * that the encoder tries few and takes the longest. */
static int index_user_pieces(Tokenizer *t, const char *path, Err *e) {
    int count[256] = {0};
    for (int id = 0; id < t->n_vocab; id++)
        if (t->pieces[id].type == TT_USER && t->pieces[id].len > 0)
            count[(unsigned char)t->pieces[id].s[0]]++;
    t->user_from[0] = 0;
    for (int b = 0; b < 256; b++) t->user_from[b + 1] = t->user_from[b] + count[b];
    t->n_user = t->user_from[256];
    if (t->n_user == 0) return ST_OK;
    t->user = mem_alloc((size_t)t->n_user * sizeof(int));
    if (!t->user) return err_set(e, ST_NOMEM, "%s: out of memory for %d user pieces", path, t->n_user);
    int fill[256];
    memcpy(fill, t->user_from, sizeof fill);
    for (int id = 0; id < t->n_vocab; id++) {
        const Piece *p = &t->pieces[id];
        if (p->type != TT_USER || p->len == 0) continue;
        int b = (unsigned char)p->s[0], i = fill[b]++;
        /* insertion into its bucket: longer first, then lower id */
        while (i > t->user_from[b] && t->pieces[t->user[i - 1]].len < p->len) {
            t->user[i] = t->user[i - 1];
            i--;
        }
        t->user[i] = id;
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
        if (!st) st = load_pre(t, g, e);
        if (!st) st = index_user_pieces(t, g->path, e);
    }
    if (st) {
        tok_free(t);
        return st;
    }
    snprintf(t->source, sizeof t->source, "%s", g->path);
    if (kind == KIND_SPM) t->add_bos = 1;
    t->add_bos = gguf_optional_int(g, "tokenizer.ggml.add_bos_token", t->add_bos);
    t->add_space_prefix = gguf_optional_int(g, "tokenizer.ggml.add_space_prefix", kind == KIND_SPM);
    if (t->bos < 0) t->add_bos = 0;
    *out = t;
    return ST_OK;
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
    int prefix;       /* bytes put in front of the caller's text (sentencepiece's space) */
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
 * vocabulary without byte tokens, one unknown token; in one that has
 * neither (Falcon's lacks byte 0x03 and has no unknown token), the text
 * cannot be encoded, and we say which byte rather than drop it. */
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
            int k = 0;
            while (t->byte_id[bytes[k]] >= 0) k++;   /* the first byte it cannot spell */
            int at = s->start + k - w->prefix;   /* -1: the space put in front */
            return err_set(e, ST_ARG, "%s: the vocabulary has no token for byte 0x%02X (byte %d "
                           "of the text) and no unknown token, so the text cannot be encoded",
                           t->source, bytes[k], at);
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

/* Byte-level BPE on one word text[start .. end): one symbol per byte. With
 * Llama 3's rules a word that is itself a piece is that piece, merged or
 * not: its merges might not rebuild it (llama.cpp's ignore_merges, from
 * tiktoken, which looks words up before merging). */
static int gpt2_word(const Tokenizer *t, Work *w, int start, int end, Err *e) {
    w->n_sym = 0;
    int whole = t->whole_words ? piece_find(t, w->text + start, end - start) : -1;
    if (whole >= 0) {
        add_symbol(t, w, start, end - start);
        return emit_symbols(t, w, e);
    }
    for (int i = start; i < end; i++) add_symbol(t, w, i, 1);
    merge_all(t, w);
    return emit_symbols(t, w, e);
}

/* GPT-2: cut the text into words with the pre-tokenizer, merge inside each. */
static int gpt2_cut(const Tokenizer *t, Work *w, int from, int to, Err *e) {
    TokSplitter sp;
    int st = tok_splitter_init(&sp, &t->pattern, w->text + from, (size_t)(to - from), e);
    size_t start, end;
    while (st == ST_OK) {
        st = tok_splitter_next(&sp, &start, &end, e);
        if (st <= 0) break;   /* 0: the text is used up; < 0: an error */
        st = gpt2_word(t, w, from + (int)start, from + (int)end, e);
    }
    tok_splitter_free(&sp);
    return st;
}

/* The longest user-defined piece at text[i ..], its length (0: none) and id. */
static int user_piece_at(const Tokenizer *t, const char *text, int i, int n, int *id) {
    int b = (unsigned char)text[i];
    for (int k = t->user_from[b]; k < t->user_from[b + 1]; k++) {
        const Piece *p = &t->pieces[t->user[k]];
        if (p->len <= n - i && memcmp(p->s, text + i, (size_t)p->len) == 0) {
            *id = t->user[k];
            return p->len;
        }
    }
    return 0;
}

/* Byte-level BPE: the user-defined pieces where the text spells them, and
 * between them, words cut by the pre-tokenizer and merged one by one. */
static int gpt2_encode(const Tokenizer *t, Work *w, int n, Err *e) {
    int from = 0, st = ST_OK;
    for (int i = 0; i < n && t->n_user > 0 && st == ST_OK;) {
        int id, len = user_piece_at(t, w->text, i, n, &id);
        if (len == 0) {
            i++;
            continue;
        }
        if (from < i) st = gpt2_cut(t, w, from, i, e);
        emit(w, id);
        from = i += len;
    }
    if (st == ST_OK && from < n) st = gpt2_cut(t, w, from, n, e);
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
    w.prefix = prefix;

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
            int keep = len <= MAX_PIECE_BYTES ? len : MAX_PIECE_BYTES - 3;
            memcpy(buf + n, s, (size_t)keep);
            n += keep;
            if (keep < len) {   /* too long for out: cut, the cut marked (tokenizer.h) */
                memcpy(buf + n, REPLACEMENT, 3);
                n += 3;
            }
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
