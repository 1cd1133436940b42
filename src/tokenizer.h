/* tokenizer.h - text to token ids and back.
 *
 * Two families, both loaded from the model file's own vocabulary:
 *  - sentencepiece style (GGUF tokenizer.ggml.model = "llama", and llama2.c's
 *    tokenizer.bin): pieces with scores; encoding merges the adjacent pair whose
 *    merged piece has the highest score, repeatedly; characters missing from the
 *    vocabulary fall back to byte tokens <0x00>..<0xFF>; a space is prepended.
 *  - GPT-2 byte-level BPE (tokenizer.ggml.model = "gpt2"): text split by the
 *    GPT-2 pre-tokenizer pattern, bytes mapped to printable characters, then
 *    merges applied by rank.
 * Decoding is streaming and UTF-8 safe: a token that ends in the middle of a
 * character holds its bytes until the character is complete.
 *
 * The header in three groups: loading a vocabulary, encoding and decoding,
 * and the GPT-2 pre-tokenizer on its own (the vocabulary trainer, bpe.h,
 * cuts its training text with it). */
#ifndef TOKENIZER_H
#define TOKENIZER_H
#include "err.h"
#include "gguf.h"
#include <stddef.h>

typedef struct Tokenizer Tokenizer;   /* opaque; see tokenizer.c */

/* Load the vocabulary of a GGUF file. Everything needed is copied, so g may
 * be closed afterwards. ST_UNSUPPORTED for a tokenizer.ggml.model other than
 * "llama" or "gpt2"; ST_FORMAT (naming the file) for missing or bad keys. */
int tok_from_gguf(Tokenizer **out, const Gguf *g, Err *e);
/* llama2.c tokenizer.bin for a vocabulary of n_vocab pieces (from the model). */
int tok_from_llama2c(Tokenizer **out, const char *path, int n_vocab, Err *e);
void tok_free(Tokenizer *t);                   /* accepts NULL */

int tok_n_vocab(const Tokenizer *t);
int tok_bos(const Tokenizer *t);               /* -1 when the vocabulary has none */
int tok_eos(const Tokenizer *t);

/* Encode text (NUL-terminated) into at most cap ids. add_bos asks for BOS
 * first when the vocabulary uses one (GGUF tokenizer.ggml.add_bos_token;
 * by default yes for sentencepiece and llama2.c, no for GPT-2). Text that is
 * not valid UTF-8 is still encoded, byte by byte where needed.
 * Returns the number of ids, or a negative Status with e filled (for example
 * ST_ARG when cap is too small). */
int tok_encode(const Tokenizer *t, const char *text, int add_bos, int *ids, int cap, Err *e);

/* Streaming decoder state: bytes of an unfinished UTF-8 character. */
typedef struct {
    unsigned char pending[8];
    int n_pending;
    int prev;            /* previous token id, -1 at the start */
} TokDecoder;

void tok_decoder_init(TokDecoder *d);
/* Append the text of token id; writes only whole UTF-8 characters to out
 * (NUL-terminated) and returns the number of bytes written. Control tokens
 * (BOS, EOS) produce no text. out must hold TOK_MAX_PIECE bytes. */
#define TOK_MAX_PIECE 512
int tok_decode(const Tokenizer *t, TokDecoder *d, int id, char *out);
/* At the end of a stream: pending bytes that never formed a character come
 * out as U+FFFD. Returns bytes written (out holds TOK_MAX_PIECE). */
int tok_decode_flush(TokDecoder *d, char *out);

/* ---- the GPT-2 pre-tokenizer ----------------------------------------------
 * Before byte-level BPE merges anything, GPT-2 cuts the text into
 * pre-tokens with a regular expression: contractions ('s 't 're 've 'm 'll
 * 'd), then a run of letters, of numbers or of other symbols, each with at
 * most one space in front, then whitespace. No merge crosses a cut. Bytes
 * that are not UTF-8 cannot go through the pattern: each run of them is one
 * pre-token. tok_encode cuts GPT-2 text with this, and so does the trainer
 * (bpe.h), which is how the two are sure to cut alike. */

/* The compiled pattern. Nothing changes it after tok_pattern_init, so one
 * serves any number of walks. The field is private. */
typedef struct {
    void *re;            /* pcre2_code */
} TokPattern;

/* Compile the pattern (PCRE2 allocates through mem_alloc). Returns ST_OK,
 * ST_NOMEM, or ST_UNSUPPORTED when the PCRE2 library cannot compile it (one
 * built without Unicode support). On failure p is left zeroed. */
int tok_pattern_init(TokPattern *p, Err *e);
void tok_pattern_free(TokPattern *p);   /* accepts a zeroed one; leaves it zeroed */

/* One walk over one text, front to back. Fields are private. */
typedef struct {
    const TokPattern *pattern;
    void *md;                   /* pcre2_match_data: where a match is reported */
    const unsigned char *text;  /* (n) the caller's */
    size_t n;
    size_t pos;                 /* bytes before pos have been handed out */
    size_t run_end;             /* end of the run (UTF-8 or not) that pos is in */
    int run_valid;              /* is that run UTF-8? */
} TokSplitter;

/* Start a walk over text[0..n), which may hold any bytes (a NUL is a byte
 * like another; none is needed at the end). p and text must outlive the
 * walk. Returns ST_OK or ST_NOMEM; on failure there is nothing to free
 * (tok_splitter_free is still safe). */
int tok_splitter_init(TokSplitter *s, const TokPattern *p, const char *text, size_t n, Err *e);
/* The next pre-token: text[*start .. *end), never empty. Pre-tokens come
 * back to back, from byte 0 to byte n, so together they are the text.
 * Returns 1, 0 once the text is used up, or a negative Status: ST_NOMEM
 * when PCRE2 runs out of memory while matching, ST_ARG if the match fails
 * otherwise. */
int tok_splitter_next(TokSplitter *s, size_t *start, size_t *end, Err *e);
void tok_splitter_free(TokSplitter *s);   /* accepts a zeroed or failed one */

#endif
