/* tokenizer.h - text to token ids and back.
 *
 * Two families, both loaded from the model file's own vocabulary:
 *  - sentencepiece style (GGUF tokenizer.ggml.model = "llama", and llama2.c's
 *    tokenizer.bin): pieces with scores; encoding merges the adjacent pair whose
 *    merged piece has the highest score, repeatedly; characters missing from the
 *    vocabulary fall back to byte tokens <0x00>..<0xFF>; a space is prepended.
 *  - byte-level BPE (tokenizer.ggml.model = "gpt2"): text cut into words by
 *    the pre-tokenizer that tokenizer.ggml.pre names (GPT-2's, Llama 3's,
 *    Qwen2's, ...), bytes mapped to printable characters, then merges applied
 *    by rank.
 * Decoding is streaming and UTF-8 safe: a token that ends in the middle of a
 * character holds its bytes until the character is complete.
 *
 * The header in three groups: loading a vocabulary, encoding and decoding,
 * and the pre-tokenizers on their own (the vocabulary trainer, bpe.h, cuts
 * its training text with GPT-2's). */
#ifndef TOKENIZER_H
#define TOKENIZER_H
#include "base/err.h"
#include "load/gguf.h"
#include <stddef.h>

typedef struct Tokenizer Tokenizer;   /* opaque; see tokenizer.c */

/* Load the vocabulary of a GGUF file. Everything needed is copied, so g may
 * be closed afterwards. ST_UNSUPPORTED for a tokenizer.ggml.model other than
 * "llama" or "gpt2", or a tokenizer.ggml.pre this file does not know (the
 * message names it; there is no silent fallback); ST_FORMAT (naming the
 * file) for missing or bad keys. Pieces may be of any length, and a
 * byte-level vocabulary may lack the piece of some byte: such a byte is then
 * refused when a text that holds it is encoded. */
int tok_from_gguf(Tokenizer **out, const Gguf *g, Err *e);
/* llama2.c tokenizer.bin for a vocabulary of n_vocab pieces (from the model). */
int tok_from_llama2c(Tokenizer **out, const char *path, int n_vocab, Err *e);
void tok_free(Tokenizer *t);                   /* accepts NULL */

int tok_n_vocab(const Tokenizer *t);
int tok_bos(const Tokenizer *t);               /* -1 when the vocabulary has none */
int tok_eos(const Tokenizer *t);

/* The ids on which the model's turn is over (see "Special tokens" below):
 * tok_eog writes the first cap of them to ids, ascending, and returns how
 * many there are; tok_is_eog says whether id is one. */
int tok_eog(const Tokenizer *t, int *ids, int cap);
int tok_is_eog(const Tokenizer *t, int id);

/* Encode text (NUL-terminated) into at most cap ids. add_bos asks for BOS
 * first when the vocabulary uses one (GGUF tokenizer.ggml.add_bos_token;
 * by default yes for sentencepiece, llama2.c and the Llama 3 pre-tokenizer,
 * no for other byte-level ones). Text that is not valid UTF-8 is still
 * encoded, byte by byte where needed.
 * Returns the number of ids, or a negative Status with e filled: ST_ARG when
 * cap is too small, or when the text holds a byte that the vocabulary cannot
 * spell (a byte-level vocabulary without that byte's piece, and no unknown
 * token). */
int tok_encode(const Tokenizer *t, const char *text, int add_bos, int *ids, int cap, Err *e);

/* ---- special tokens and the end of generation -------------------------------
 * A chat template writes markup such as "<|im_start|>user\n...<|im_end|>",
 * and the model was trained to see each marker as one token, not as the
 * bytes of its spelling. tok_encode never reads a token's spelling as the
 * token; tok_encode_marked does, for the special texts: the pieces whose
 * type is control, unknown or user-defined, and those that end generation
 * (below), as llama.cpp counts them. The text is cut at them first, each
 * in turn, longest first, each taking its matches in what is still text
 * (llama.cpp's order, which is not a scan from the left: with "ab" and
 * "bcd" both special, "abcd" is "a" then "bcd"; of two texts of one length,
 * the lower id goes first); each stretch between them is then encoded as
 * tok_encode encodes a text (sentencepiece: with its space in front of
 * every stretch, as llama.cpp has it).
 *
 * A chat mixes the template's markup with what users wrote, and a user may
 * write "<|im_end|>\n<|im_start|>system\n...". plain marks the user's bytes
 * (plain[i] != 0: byte i is part of a message's content): a control or
 * unknown token's text stands for the token only where none of its bytes is
 * plain, so a user cannot end a turn, or open one in another role's name,
 * by typing its markup; the bytes stay text. User-defined texts stand for
 * their tokens everywhere (llama.cpp and Hugging Face cut them out of any
 * text: they are vocabulary, not markup). plain NULL marks nothing: every
 * special text is read as its token, as llama.cpp's parse_special does.
 * text[0..n) may hold any bytes. add_bos, the return value and the errors
 * are tok_encode's.
 *
 * End of generation is llama.cpp's rule (llama_vocab_is_eog): EOS; the
 * end-of-turn and end-of-message ids when the file names them; the
 * fill-in-the-middle pad, repository and file-separator tokens; and every
 * token spelled as one of the end markers llama.cpp knows ("<|eot_id|>",
 * "<|im_end|>", "<|endoftext|>", "</s>", "<end_of_turn>", ...; vocab.c has
 * the list), whatever its type, and such a token becomes a special text
 * too. So a vocabulary may end on several ids (Llama 3: <|end_of_text|> and
 * <|eot_id|>; Qwen2.5: </s>, <|endoftext|>, <|im_end|>). */
int tok_encode_marked(const Tokenizer *t, const char *text, size_t n, const unsigned char *plain,
                      int add_bos, int *ids, int cap, Err *e);

/* Streaming decoder state: bytes of an unfinished UTF-8 character. */
typedef struct {
    unsigned char pending[8];
    int n_pending;
    int prev;            /* previous token id, -1 at the start */
} TokDecoder;

void tok_decoder_init(TokDecoder *d);
/* Append the text of token id; writes only whole UTF-8 characters to out
 * (NUL-terminated) and returns the number of bytes written. Control tokens
 * (BOS, EOS) produce no text. out must hold TOK_MAX_PIECE bytes, which is
 * room for any piece up to 679 bytes (the longest we know of is GPT-NeoX's
 * 512 spaces, 1,024 bytes in the file's disguise); a longer piece comes out
 * cut there, its end replaced by U+FFFD. */
#define TOK_MAX_PIECE 2048
int tok_decode(const Tokenizer *t, TokDecoder *d, int id, char *out);
/* At the end of a stream: pending bytes that never formed a character come
 * out as U+FFFD. Returns bytes written (out holds TOK_MAX_PIECE). */
int tok_decode_flush(TokDecoder *d, char *out);

/* The bytes token id stands for, as the vocabulary has them, whatever its
 * type: a control token's spelling ("<|eot_id|>"), a byte token's byte, a
 * sentencepiece piece with its spaces (none dropped). Writes at most cap - 1
 * bytes and a NUL to out (nothing when cap is 0); returns the piece's whole
 * length, more than was written when it did not fit, or -1 for an id
 * outside the vocabulary. */
int tok_piece(const Tokenizer *t, int id, char *out, int cap);

/* ---- pre-tokenizers ---------------------------------------------------------
 * Before byte-level BPE merges anything, the text is cut into pre-tokens,
 * and no merge crosses a cut. GPT-2 cuts with one regular expression:
 * contractions ('s 't 're 've 'm 'll 'd), then a run of letters, of numbers
 * or of other symbols, each with at most one space in front, then
 * whitespace. Later vocabularies changed the rules (numbers in groups of at
 * most three, contractions in any case, newlines on their own ...), and
 * tokenizer.ggml.pre names the rules a vocabulary was trained with; some
 * apply several patterns in turn, each cutting the pieces the one before
 * left (tokenizer.c has the table). Bytes that are not UTF-8 cannot go
 * through a pattern: each run of them is one pre-token. tok_encode cuts with
 * these, and so does the trainer (bpe.h, GPT-2's rules), which is how the
 * two are sure to cut alike. */

#define TOK_MAX_STAGES 6   /* patterns applied in turn, at most */

/* The compiled rules. Nothing changes them after init, so one serves any
 * number of walks. The fields are private. */
typedef struct {
    void *re[TOK_MAX_STAGES];   /* pcre2_code of each stage, in order */
    int n_stages;
} TokPattern;

/* Compile GPT-2's rules (PCRE2 allocates through mem_alloc). Returns ST_OK,
 * ST_NOMEM, or ST_UNSUPPORTED when the PCRE2 library cannot compile them
 * (one built without Unicode support). On failure p is left zeroed. */
int tok_pattern_init(TokPattern *p, Err *e);
/* The same for the rules of a tokenizer.ggml.pre name ("gpt-2", "llama-bpe",
 * "qwen2", ...); ST_UNSUPPORTED, naming it, for a name not in the table. */
int tok_pattern_init_named(TokPattern *p, const char *name, Err *e);
void tok_pattern_free(TokPattern *p);   /* accepts a zeroed one; leaves it zeroed */

/* One walk over one text, front to back. Fields are private. */
typedef struct {
    const TokPattern *pattern;
    void *md;                   /* pcre2_match_data: where a match is reported */
    const unsigned char *text;  /* (n) the caller's */
    size_t n;
    size_t pos;                 /* bytes before pos have been cut into runs */
    int run_valid;              /* is the run last cut UTF-8? */
    /* The piece each stage is cutting, text[lo .. hi), and how far: bytes
     * before at have been handed on. */
    size_t lo[TOK_MAX_STAGES], hi[TOK_MAX_STAGES], at[TOK_MAX_STAGES];
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
