/* bpe.h - learning a byte-level BPE vocabulary from text.
 *
 * The trainer behind tools/bpe_train.c: it reads a training text and learns
 * the merges that the engine's GPT-2 tokenizer (tokenizer.h) later applies.
 * Byte-pair encoding as a way to build a vocabulary is Sennrich, Haddow and
 * Birch, "Neural Machine Translation of Rare Words with Subword Units" (2016);
 * working on bytes rather than characters, behind a pre-tokenizer pattern, is
 * GPT-2's (Radford et al. 2019). notes/tokenizer-training.md walks through it.
 *
 * What the engine's encoder does with the result must equal what the trainer
 * did while learning it, token for token, on the training text. That holds
 * because (bpe.c explains why):
 *  - the text is cut into pre-tokens by the engine's own pre-tokenizer
 *    (tok_splitter_* in tokenizer.h), and no merge crosses a cut;
 *  - each merge replaces every occurrence of its pair, left to right;
 *  - it follows that every merge makes a string no earlier token spells,
 *    so the vocabulary is exactly 256 + merges + 1 distinct tokens.
 * A pair whose joined bytes would be longer than BPE_MAX_TOKEN_BYTES is
 * never merged.
 *
 * Which pair is merged: the most frequent one; among equally frequent pairs,
 * the one with the smaller left token id, then the smaller right token id.
 *
 * Ids: 0..255 are the bytes (id b is byte b), 256 + r is the token made by
 * merge r, and the last id is the one special token <|endoftext|>.
 *
 * Dimensions: n bytes of training text, W distinct pre-tokens ("words"),
 * V tokens in the vocabulary, M merges (V = 256 + M + 1). */
#ifndef BPE_H
#define BPE_H
#include "base/err.h"
#include <stddef.h>
#include <stdint.h>

#define BPE_MIN_VOCAB 257            /* the 256 bytes and <|endoftext|>: no merges */
#define BPE_MAX_VOCAB (1 << 20)
/* No token is longer than this. The engine's tokenizer refuses pieces over
 * 167 bytes (what its streaming decoder can hold); 128 stays clear of it. */
#define BPE_MAX_TOKEN_BYTES 128
#define BPE_EOT_TEXT "<|endoftext|>"

typedef struct {
    int left, right;      /* the two token ids joined, in text order */
    int64_t count;        /* how often the pair occurred when it was chosen */
} BpeMerge;

typedef struct {
    int off, len;         /* where its bytes are: in tok_text or word_text */
} BpeSpan;

typedef struct {
    BpeSpan text;         /* the pre-token's bytes, in word_text */
    int64_t count;        /* how many times it occurs in the training text */
    int n_sym;            /* its tokens after training: word_sym + text.off, n_sym of them */
} BpeWord;

/* What training learned, and the counted text it learned from. Fields are
 * read-only for callers; bpe_train fills them, bpe_free releases them. */
typedef struct {
    /* the vocabulary */
    int n_vocab;          /* V = 256 + n_merges + 1 */
    int n_merges;         /* M */
    BpeMerge *merges;     /* (M) in the order learned; merge r makes token 256 + r */
    BpeSpan *tokens;      /* (V) each token's bytes in tok_text */
    char *tok_text;       /* the bytes of every token, back to back */
    int eot;              /* id of <|endoftext|>: V - 1 */
    int n_skipped;        /* pairs passed over: joined, over BPE_MAX_TOKEN_BYTES bytes */
    /* the training text, counted */
    size_t n_bytes;       /* n: bytes of training text */
    int64_t n_tokens;     /* tokens that text encodes to: sum of count * n_sym */
    int n_words;          /* W */
    BpeWord *words;       /* (W) in order of first appearance */
    char *word_text;      /* the bytes of every word, back to back */
    int *word_sym;        /* token ids of every word, at the same offsets as its bytes */
    int *word_slots;      /* (n_word_slots) hash table: word bytes -> word index, -1 empty */
    int n_word_slots;
} Bpe;

/* Learn a vocabulary of vocab_size tokens (BPE_MIN_VOCAB..BPE_MAX_VOCAB,
 * <|endoftext|> included) from text[0..n), which may hold any bytes. When the
 * text runs out of pairs first, training stops early and b->n_vocab is
 * smaller than asked; that is not an error. Returns ST_OK, ST_ARG (bad size,
 * n >= 2^30) or ST_NOMEM; on failure *b is left empty (bpe_free is still
 * safe). */
int bpe_train(Bpe *b, const char *text, size_t n, int vocab_size, Err *e);
void bpe_free(Bpe *b);   /* accepts an empty or failed Bpe; leaves it empty */

/* The token ids the learned merges give text[0..n): cut into pre-tokens,
 * each looked up among the counted words, each word's final tokens copied
 * out. Every pre-token must be one the trainer counted, so this works for
 * the training text (or pieces of it cut at pre-token boundaries), not for
 * new text. Writes at most cap ids and sets *n_ids to the number needed.
 * Returns ST_OK, ST_ARG (a pre-token never counted, naming its offset; or
 * cap too small) or ST_NOMEM. */
int bpe_segment(const Bpe *b, const char *text, size_t n, int *ids, size_t cap, size_t *n_ids,
                Err *e);

/* Write the vocabulary as a GGUF file with no tensors, in the layout the
 * engine's loader (tok_from_gguf) and llama.cpp read: tokenizer.ggml.model
 * "gpt2", tokens spelled in GPT-2's printable byte alphabet, token types,
 * merges "left right" in rank order, <|endoftext|> as BOS and EOS. The same
 * Bpe always gives the same bytes. Returns ST_OK, ST_IO or ST_NOMEM. */
int bpe_write_gguf(const Bpe *b, const char *path, Err *e);

/* Bytes of a text of n bytes that go to training: floor(fraction * n), the
 * rest being validation. fraction is in [0, 1]. */
size_t bpe_train_bytes(size_t n, double fraction);

#endif
