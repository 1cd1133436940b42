/* vocab.c - the vocabulary loaded: llama2.c's tokenizer.bin, or a GGUF
 * file's tokenizer.ggml.* keys, into one Tokenizer (tokenizer_internal.h) whose
 * pieces are the raw bytes they stand for (the disguises undone here; the
 * essay is in tokenizer.c), with the hash tables encoding looks pieces and
 * merges up in. */
#include "text/tokenizer_internal.h"
#include "base/fileio.h"
#include "base/mem.h"
#include <assert.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>

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
    mem_free(t->specials);
    mem_free(t->eog);
    tok_pattern_free(&t->pattern);
    mem_free(t);
}

int tok_n_vocab(const Tokenizer *t) { return t->n_vocab; }
int tok_bos(const Tokenizer *t) { return t->bos; }
int tok_eos(const Tokenizer *t) { return t->eos; }

int tok_eog(const Tokenizer *t, int *ids, int cap) {
    for (int i = 0; i < t->n_eog && i < cap; i++) ids[i] = t->eog[i];
    return t->n_eog;
}

int tok_is_eog(const Tokenizer *t, int id) {
    for (int i = 0; i < t->n_eog; i++)   /* a handful of ids */
        if (t->eog[i] == id) return 1;
    return 0;
}

/* ---- special tokens and the end of generation -------------------------- */

/* Texts that end generation whatever the token's id or type: llama.cpp's
 * list (src/llama-vocab.cpp, special_eog_ids), spelled as the vocabularies
 * spell them. Llama 3's "<|eot_id|>", Qwen's "<|im_end|>", Gemma's
 * "<end_of_turn>", gpt-oss's "<|return|>" and "<|call|>", DeepSeek's
 * "<｜end▁of▁sentence｜>" (full-width bars) ... A token so spelled is made a
 * control token too, even where the file calls it ordinary: Qwen's
 * vocabulary has "</s>" as an ordinary piece (id 128247), and llama.cpp both
 * stops on it and reads the text "</s>" in a prompt as that token. */
static const char *const EOG_TEXTS[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>", "[e~[",
};
enum { N_EOG_TEXTS = (int)(sizeof EOG_TEXTS / sizeof EOG_TEXTS[0]) };

/* The fill-in-the-middle tokens of code models. Their ids come from the
 * file; where it lacks the key, llama.cpp takes the token spelled one of
 * these ways (we take the lowest such id; llama.cpp, whichever its hash map
 * meets first) and makes it a control token. The last three end
 * generation. (llama.cpp finds an end-of-turn and an end-of-message token
 * the same way; all their spellings are among EOG_TEXTS.) */
typedef struct {
    const char *key, *old_key;   /* old_key: the earlier name, which wins when both are there */
    int ends;                    /* does the token end generation? */
    const char *texts[9];        /* NULL-terminated */
} FimRole;

static const FimRole FIM_ROLES[] = {
    {"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id", 0,
     {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
      "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", "<PRE>", "\xE2\x96\x81<PRE>",
      "<|code_prefix|>", "<|prefix|>"}},
    {"tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id", 0,
     {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
      "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "hole\xEF\xBD\x9C>", "<SUF>", "\xE2\x96\x81<SUF>",
      "<|code_suffix|>", "<|suffix|>"}},
    {"tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id", 0,
     {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
      "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>", "<MID>", "\xE2\x96\x81<MID>",
      "<|code_middle|>", "<|middle|>"}},
    {"tokenizer.ggml.fim_pad_token_id", NULL, 1,
     {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}},
    {"tokenizer.ggml.fim_rep_token_id", NULL, 1,
     {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
    {"tokenizer.ggml.fim_sep_token_id", NULL, 1, {"<|file_sep|>"}},
};
enum { N_FIM_ROLES = (int)(sizeof FIM_ROLES / sizeof FIM_ROLES[0]) };

/* The tokens spelled text in the file: the ordinary or user-defined piece of
 * those bytes, found in the piece table, and the control and unknown pieces
 * among ctl[0..n_ctl), which are kept as the file spells them. In a
 * sentencepiece vocabulary, text's "▁" is the space the loader put in its
 * place; in a byte-level one, the ASCII texts above look the same in the
 * disguise, and the others are stored outside it. Writes the first cap ids
 * to ids; returns how many there are. */
static int spelled_ids(const Tokenizer *t, const char *text, const int *ctl, int n_ctl, int *ids,
                       int cap) {
    char form[64];
    int len = 0, n = 0;
    for (const char *c = text; *c;) {
        int space = t->kind == KIND_SPM && strncmp(c, "\xE2\x96\x81", 3) == 0;
        assert(len < (int)sizeof form);
        form[len++] = space ? ' ' : *c;
        c += space ? 3 : 1;
    }
    int id = piece_find(t, form, len);
    if (id >= 0) {
        if (n < cap) ids[n] = id;
        n++;
    }
    int stored = (int)strlen(text);
    for (int i = 0; i < n_ctl; i++) {
        const Piece *p = &t->pieces[ctl[i]];
        if (p->len != stored || memcmp(p->s, text, (size_t)stored) != 0) continue;
        if (n < cap) ids[n] = ctl[i];
        n++;
    }
    return n;
}

static int eog_text_index(const char *text) {
    for (int k = 0; k < N_EOG_TEXTS; k++)
        if (strcmp(EOG_TEXTS[k], text) == 0) return k;
    assert(0 && "not one of EOG_TEXTS");
    return -1;
}

/* A token id the file may give: -1 when the key is absent, not an integer,
 * or outside the vocabulary (llama.cpp ignores such a value too). */
static int gguf_optional_id(const Gguf *g, const char *key, int n_vocab) {
    int64_t v;
    if (!g || !key || !gguf_find(g, key) || gguf_get_int(g, key, &v, NULL) != ST_OK) return -1;
    return v >= 0 && v < n_vocab ? (int)v : -1;
}

static int by_id(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

typedef struct {
    int len, id;
} SpecialText;

static int longest_first(const void *a, const void *b) {
    const SpecialText *x = a, *y = b;
    if (x->len != y->len) return y->len - x->len;
    return (x->id > y->id) - (x->id < y->id);
}

/* The ids that end generation (t->eog), and a list of them and of the
 * fill-in-the-middle tokens found by spelling, all made control tokens;
 * ctl[0..n_ctl) are the control and unknown pieces. */
static int find_eog(Tokenizer *t, const Gguf *g, const int *ctl, int n_ctl, const char *path,
                    Err *e) {
    /* The ids the file gives, and the fill-in-the-middle ones it does not. */
    int role_id[N_FIM_ROLES + 3], n_roles = 0;
    role_id[n_roles++] = t->eos;
    role_id[n_roles++] = gguf_optional_id(g, "tokenizer.ggml.eot_token_id", t->n_vocab);
    role_id[n_roles++] = gguf_optional_id(g, "tokenizer.ggml.eom_token_id", t->n_vocab);
    for (int r = 0; r < N_FIM_ROLES; r++) {
        const FimRole *f = &FIM_ROLES[r];
        int id = gguf_optional_id(g, f->key, t->n_vocab);
        int old = gguf_optional_id(g, f->old_key, t->n_vocab);
        if (old >= 0) id = old;
        if (id < 0) {
            int ids[8];
            for (int j = 0; f->texts[j]; j++) {
                int n = spelled_ids(t, f->texts[j], ctl, n_ctl, ids, 8);
                for (int i = 0; i < n && i < 8; i++)
                    if (id < 0 || ids[i] < id) id = ids[i];
            }
            if (id >= 0) t->pieces[id].special = SPECIAL_CONTROL;
        }
        if (f->ends) role_id[n_roles++] = id;
    }

    /* The tokens spelled as an end of generation, less llama.cpp's two
     * exceptions: in gpt-oss and Solar Open "<|end|>" closes one message of
     * a reply that may go on, so it does not end generation where
     * "<|return|>" or "<|flush|>" is there with "<|call|>" or "<|calls|>";
     * and "</s>" does not where "<|tool_response>" is there (Gemma 4).
     * llama.cpp also retypes some tokens at this point: that "<|end|>", and
     * gpt-oss's "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>",
     * become user-defined, so that they are printed, and that "</s>"
     * ordinary. Those we leave as the file has them: a user-defined text
     * stands for its token even inside a message, and a chat's markup must
     * not be forged from what a user wrote. */
    int count[N_EOG_TEXTS], n_spelled = 0;
    for (int k = 0; k < N_EOG_TEXTS; k++)
        count[k] = spelled_ids(t, EOG_TEXTS[k], ctl, n_ctl, NULL, 0);
    int call = count[eog_text_index("<|call|>")] || count[eog_text_index("<|calls|>")];
    int drop_end = (count[eog_text_index("<|return|>")] && call) ||
                   (call && count[eog_text_index("<|flush|>")]);
    int dropped[2] = {drop_end ? eog_text_index("<|end|>") : -1,
                      count[eog_text_index("<|tool_response>")] ? eog_text_index("</s>") : -1};
    for (int k = 0; k < N_EOG_TEXTS; k++) n_spelled += count[k];
    t->eog = mem_alloc((size_t)(n_spelled + n_roles) * sizeof(int));
    if (!t->eog)
        return err_set(e, ST_NOMEM, "%s: out of memory for the end-of-generation ids", path);
    int n = 0, gone[8], n_gone = 0;
    for (int r = 0; r < n_roles; r++)
        if (role_id[r] >= 0) t->eog[n++] = role_id[r];
    for (int k = 0; k < N_EOG_TEXTS; k++) {
        if (k == dropped[0] || k == dropped[1]) {   /* not even when the file names it */
            int m = spelled_ids(t, EOG_TEXTS[k], ctl, n_ctl, gone + n_gone, 4);
            n_gone += m < 4 ? m : 4;
            continue;
        }
        int m = spelled_ids(t, EOG_TEXTS[k], ctl, n_ctl, t->eog + n, count[k]);
        for (int i = n; i < n + m; i++) t->pieces[t->eog[i]].special = SPECIAL_CONTROL;
        n += m;
    }
    qsort(t->eog, (size_t)n, sizeof(int), by_id);
    t->n_eog = 0;
    for (int i = 0; i < n; i++) {   /* drop repeats, and the exceptions */
        int id = t->eog[i], keep = t->n_eog == 0 || t->eog[t->n_eog - 1] != id;
        for (int j = 0; j < n_gone; j++) keep &= gone[j] != id;
        if (keep) t->eog[t->n_eog++] = id;
    }
    return ST_OK;
}

/* Which pieces' texts stand for the token itself (Piece.special), in the
 * order text is cut at them (t->specials), and the ids that end generation
 * (t->eog), as llama.cpp decides them when it loads a vocabulary. g is
 * NULL for llama2.c's file, which has no keys. */
static int index_specials(Tokenizer *t, const Gguf *g, const char *path, Err *e) {
    int n_ctl = 0;
    for (int id = 0; id < t->n_vocab; id++) {
        int type = t->pieces[id].type;
        t->pieces[id].special = type == TT_CONTROL || type == TT_UNKNOWN ? SPECIAL_CONTROL
                                : type == TT_USER                        ? SPECIAL_USER
                                                                         : SPECIAL_NONE;
        n_ctl += t->pieces[id].special == SPECIAL_CONTROL;
    }
    int *ctl = mem_alloc(((size_t)n_ctl + 1) * sizeof(int));
    if (!ctl) return err_set(e, ST_NOMEM, "%s: out of memory for %d control tokens", path, n_ctl);
    n_ctl = 0;
    for (int id = 0; id < t->n_vocab; id++)
        if (t->pieces[id].special == SPECIAL_CONTROL) ctl[n_ctl++] = id;
    int st = find_eog(t, g, ctl, n_ctl, path, e);
    mem_free(ctl);
    if (st) return st;

    /* The special texts, longest first: llama.cpp cuts the text at each in
     * turn (tokenizer.c). It sorts by length alone, and its sort is not
     * stable; of two texts of one length, we take the lower id first. */
    t->n_specials = 0;
    for (int id = 0; id < t->n_vocab; id++)
        t->n_specials += t->pieces[id].special != SPECIAL_NONE && t->pieces[id].len > 0;
    SpecialText *order = mem_alloc((size_t)(t->n_specials + 1) * sizeof *order);
    t->specials = mem_alloc((size_t)(t->n_specials + 1) * sizeof(int));
    if (!order || !t->specials) {
        mem_free(order);
        return err_set(e, ST_NOMEM, "%s: out of memory for %d special tokens", path, t->n_specials);
    }
    int m = 0;
    for (int id = 0; id < t->n_vocab; id++)
        if (t->pieces[id].special != SPECIAL_NONE && t->pieces[id].len > 0)
            order[m++] = (SpecialText){t->pieces[id].len, id};
    qsort(order, (size_t)m, sizeof *order, longest_first);
    for (int i = 0; i < m; i++) t->specials[i] = order[i].id;
    mem_free(order);
    return ST_OK;
}

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
    if (!st) st = index_specials(t, NULL, path, e);
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
    Err why;
    int st = pretok_by_name(&t->pattern, name, &t->whole_words, &t->add_bos, &why);
    /* add_bos is the default; tokenizer.ggml.add_bos_token overrides it */
    if (st) return err_set(e, st, "%s: %s", g->path, why.msg);
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
         * not disguised: DeepSeek's "ü" is the two bytes C3 BC. Control and
         * unknown pieces are kept as the file spells them, in both families:
         * they are never looked up by encoding, and that spelling is the
         * text that stands for them (tok_encode_marked) and that tok_piece
         * gives back, as in llama.cpp. */
        char *dst = t->arena + used;   /* unmapping never grows a piece */
        int as_stored = type == TT_CONTROL || type == TT_UNKNOWN ||
                        (kind == KIND_GPT2 && type == TT_USER);
        int len = as_stored ? -1
                  : kind == KIND_SPM ? spm_unmap(s.s, (int)s.len, dst)
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
    if (!st) st = index_specials(t, g, g->path, e);
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
