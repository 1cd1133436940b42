/* tokenizer_internal.h - what the tokenizer's three files share, and no one else
 * sees: the vocabulary in memory (struct Tokenizer, built by vocab.c), the
 * UTF-8 rules (base/utf8.h), the two hash tables' lookups (encode and decode in
 * tokenizer.c read them), and the pre-tokenizers by name (pretok.c). */
#ifndef TOKENIZER_INTERNAL_H
#define TOKENIZER_INTERNAL_H
#include "text/tokenizer.h"
#include "base/utf8.h"
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>
#include <string.h>

enum { KIND_SPM, KIND_GPT2 };

/* Token types, numbered as GGUF numbers them (tokenizer.ggml.token_type). */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* Where tok_encode_marked recognises a piece's text as the token itself
 * (tokenizer.h): never; only where no byte of it is the user's (control and
 * unknown tokens, and those vocab.c makes control by their text); anywhere
 * (user-defined pieces). */
enum { SPECIAL_NONE = 0, SPECIAL_CONTROL = 1, SPECIAL_USER = 2 };

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
    int special;      /* SPECIAL_*: may the text stand for this token? */
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
    /* special tokens (vocab.c's index_specials) */
    int *specials;            /* (n_specials) ids whose special is set, longest text first,
                                 then lower id: the order text is cut at them */
    int n_specials;
    int *eog;                 /* (n_eog) the ids that end generation, ascending */
    int n_eog;
};

/* ---- the piece table ---------------------------------------------------- */

static inline uint32_t hash_bytes(const char *s, int n) {   /* FNV-1a */
    uint32_t h = 2166136261u;
    for (int i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static inline int table_size_for(int n) {   /* a power of two >= 2n, so probes stay short */
    int size = 16;
    while (size < 2 * n) size *= 2;
    return size;
}

/* Token id of the piece whose bytes are s[0..n), or -1. Only pieces that text
 * can encode to (normal and user-defined) are in the table: control tokens
 * like <s> and byte tokens like <0x41> are never produced by matching text. */
static inline int piece_find(const Tokenizer *t, const char *s, int n) {
    uint32_t mask = (uint32_t)t->n_slots - 1;
    for (uint32_t i = hash_bytes(s, n) & mask;; i = (i + 1) & mask) {
        int id = t->slots[i];
        if (id < 0) return -1;
        const Piece *p = &t->pieces[id];
        if (p->len == n && memcmp(p->s, s, (size_t)n) == 0) return id;
    }
}

static inline int is_text_piece(int type) { return type == TT_NORMAL || type == TT_USER; }

/* ---- merges (byte-level BPE) -------------------------------------------- */

static inline uint32_t hash_pair(int a, int b) {
    uint64_t x = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(x >> 32);
}

/* Rank of the merge (left, right), or -1 when there is none. */
static inline int merge_find(const Tokenizer *t, int left, int right) {
    uint32_t mask = (uint32_t)t->n_merge_slots - 1;
    for (uint32_t i = hash_pair(left, right) & mask;; i = (i + 1) & mask) {
        int r = t->merge_slots[i];
        if (r < 0) return -1;
        if (t->merges[r].left == left && t->merges[r].right == right) return r;
    }
}

/* ---- pre-tokenizers by name (pretok.c) ----------------------------------- */

/* The pre-tokenizer tokenizer.ggml.pre names, compiled into p, with two
 * traits of its vocabulary: whether a pre-token that is a piece is taken
 * whole (Llama 3), and whether a sequence starts with BOS by default. On
 * failure (ST_UNSUPPORTED: a name it does not know, listing those it knows)
 * e holds a line that starts with "tokenizer.ggml.pre". */
int pretok_by_name(TokPattern *p, const char *name, int *whole_words, int *add_bos, Err *e);

#endif
