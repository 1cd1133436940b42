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
 *    train/bpe_learn.c, cuts its training text with the very same code.
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
 * A chat prompt is markup and messages: "<|im_start|>user\nHi<|im_end|>".
 * The model knows each marker as one token, never produced by merging, so
 * tok_encode_marked first cuts the text at the texts of special tokens,
 * each in turn, longest first (llama.cpp's order), and encodes the stretches
 * between them as ordinary text. Which bytes a user wrote is the caller's to
 * say: there a control token's text stays text, so a message cannot close
 * its own turn. Which tokens are special, and which end generation, is
 * decided once, when the vocabulary loads (vocab.c).
 *
 * Dimensions: n is the length of a text in bytes; n_vocab the number of
 * pieces.
 *
 * Three files, one job each: vocab.c loads a vocabulary (either family) and
 * undoes its disguise, pretok.c holds the pre-tokenizers, and this file
 * encodes and decodes; tokenizer_internal.h is what they share. */
#include "text/tokenizer_internal.h"
#include "base/mem.h"
#include <assert.h>
#include <limits.h>
#include <stdio.h>

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

typedef struct {      /* scratch of one encoding: about 90 bytes per byte of text */
    const char *text; /* the text being merged: the caller's, or buf */
    int shift;        /* index in text minus index in the caller's text (1 where
                         sentencepiece's space is put in front of the whole text) */
    char *buf;        /* (n + 1) sentencepiece: a stretch of the text, the space in front */
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
            /* -1, or a special token's last byte: the space put in front */
            int at = s->start + k - w->shift;
            return err_set(e, ST_ARG, "%s: the vocabulary has no token for byte 0x%02X (byte %d "
                           "of the text) and no unknown token, so the text cannot be encoded",
                           t->source, bytes[k], at);
        }
    }
    return ST_OK;
}

/* Sentencepiece on text[from .. to) of the caller's text: copied to w->buf,
 * after the space that sentencepiece puts in front when space is set; one
 * symbol per UTF-8 character (a byte that is not part of a valid character
 * is a symbol of its own), merge, emit. */
static int spm_encode(const Tokenizer *t, Work *w, const char *text, int from, int to, int space,
                      Err *e) {
    if (space) w->buf[0] = ' ';
    memcpy(w->buf + space, text + from, (size_t)(to - from));
    w->text = w->buf;
    w->shift = space - from;
    int n = to - from + space;
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

/* Byte-level BPE on text[start .. end) of the caller's text: the
 * user-defined pieces where the text spells them, and between them, words
 * cut by the pre-tokenizer and merged one by one. */
static int gpt2_encode(const Tokenizer *t, Work *w, const char *text, int start, int end, Err *e) {
    w->text = text;
    w->shift = 0;
    int from = start, st = ST_OK;
    for (int i = start; i < end && t->n_user > 0 && st == ST_OK;) {
        int id, len = user_piece_at(t, w->text, i, end, &id);
        if (len == 0) {
            i++;
            continue;
        }
        if (from < i) st = gpt2_cut(t, w, from, i, e);
        emit(w, id);
        from = i += len;
    }
    if (st == ST_OK && from < end) st = gpt2_cut(t, w, from, end, e);
    return st;
}

/* ---- special tokens: the text cut at them first -------------------------- */

/* mark[i] for byte i of the text: RAW while no special token has taken it;
 * the token's id at the first byte of a match; INSIDE at its other bytes. */
enum { RAW = -1, INSIDE = -2 };

/* Take the matches of special token id in bytes that are still text,
 * leftmost first, each search going on after the match before (as
 * llama.cpp's find from the end of it). A control token's text counts only
 * where none of its bytes is plain. */
static void cut_at(const Tokenizer *t, int id, const char *text, int n, const unsigned char *plain,
                   int *mark) {
    const Piece *p = &t->pieces[id];
    int control = p->special == SPECIAL_CONTROL;
    for (int i = 0; i + p->len <= n;) {
        const char *hit = memchr(text + i, p->s[0], (size_t)(n - p->len + 1 - i));
        if (!hit) return;
        int at = (int)(hit - text);
        int ok = memcmp(hit, p->s, (size_t)p->len) == 0;
        for (int k = at; ok && k < at + p->len; k++)
            ok = mark[k] == RAW && !(control && plain && plain[k]);
        if (!ok) {
            i = at + 1;
            continue;
        }
        mark[at] = id;
        for (int k = at + 1; k < at + p->len; k++) mark[k] = INSIDE;
        i = at + p->len;
    }
}

/* Mark where special tokens stand in text[0..n). Each special text in
 * turn, longest first, takes its matches in what the texts before it left;
 * that is llama.cpp's order (tokenizer_st_partition), and it is not the
 * same as taking the longest match at each position from left to right:
 * with "ab" and "bcd" both special, "abcd" is "a" then "bcd" here, where a
 * scan from the left would take "ab" first. Each pass is one memchr over
 * the text, so the cost is (special texts whose first byte the text holds)
 * x n. */
static void cut_at_specials(const Tokenizer *t, const char *text, int n,
                            const unsigned char *plain, int *mark) {
    unsigned char present[256] = {0};
    for (int i = 0; i < n; i++) {
        present[(unsigned char)text[i]] = 1;
        mark[i] = RAW;
    }
    for (int k = 0; k < t->n_specials; k++) {
        int id = t->specials[k];
        if (present[(unsigned char)t->pieces[id].s[0]]) cut_at(t, id, text, n, plain, mark);
    }
}

/* ---- encoding: the entry points ------------------------------------------ */

/* Encode text[from .. to) as ordinary text, with sentencepiece's space in
 * front when space is set. */
static int encode_stretch(const Tokenizer *t, Work *w, const char *text, int from, int to,
                          int space, Err *e) {
    return t->kind == KIND_SPM ? spm_encode(t, w, text, from, to, space, e)
                               : gpt2_encode(t, w, text, from, to, e);
}

/* What tok_encode and tok_encode_marked share: the scratch, BOS, and the
 * check on cap. Without specials the whole text is one stretch; with them
 * it is cut at special tokens first, and each stretch between two of them
 * is encoded as a whole text would be. */
static int encode(const Tokenizer *t, const char *text, size_t len, int specials,
                  const unsigned char *plain, int add_bos, int *ids, int cap, Err *e) {
    if (len > (size_t)INT_MAX / 8) return err_set(e, ST_ARG, "text of %zu bytes is too long", len);
    int n = (int)len;
    int spm = t->kind == KIND_SPM;
    Work w = {.ids = ids, .cap_ids = cap < 0 ? 0 : cap};
    int *mark = specials ? mem_alloc(((size_t)n + 1) * sizeof(int)) : NULL;
    w.buf = spm ? mem_alloc((size_t)n + 1) : NULL;
    w.sym = mem_alloc(((size_t)n + 1) * sizeof(Symbol));
    w.cap_heap = 3 * (n + 1);
    w.heap = mem_alloc((size_t)w.cap_heap * sizeof(Pair));
    int st = ST_OK;
    if ((specials && !mark) || (spm && !w.buf) || !w.sym || !w.heap) {
        st = err_set(e, ST_NOMEM, "out of memory encoding %d bytes of text", n);
        goto done;
    }

    if (add_bos && t->add_bos) emit(&w, t->bos);
    /* Sentencepiece puts a space in front of the text. llama.cpp puts it in
     * front of every stretch that comes first or right after a special
     * token, which, stretches being separated by special tokens, is every
     * stretch. */
    int space = spm && t->add_space_prefix;
    if (!specials) {
        if (n > 0) st = encode_stretch(t, &w, text, 0, n, space, e);
    } else {
        cut_at_specials(t, text, n, plain, mark);
        for (int i = 0; i < n && st == ST_OK;) {
            if (mark[i] >= 0) {
                emit(&w, mark[i]);
                i += t->pieces[mark[i]].len;
                continue;
            }
            int j = i;
            while (j < n && mark[j] == RAW) j++;
            st = encode_stretch(t, &w, text, i, j, space, e);
            i = j;
        }
    }
    if (st == ST_OK && w.n_ids > cap)
        st = err_set(e, ST_ARG, "text needs %d token ids, more than the %d there is room for",
                     w.n_ids, cap);
done:
    mem_free(mark);
    mem_free(w.buf);
    mem_free(w.sym);
    mem_free(w.heap);
    return st ? st : w.n_ids;
}

int tok_encode(const Tokenizer *t, const char *text, int add_bos, int *ids, int cap, Err *e) {
    return encode(t, text, strlen(text), 0, NULL, add_bos, ids, cap, e);
}

int tok_encode_marked(const Tokenizer *t, const char *text, size_t n, const unsigned char *plain,
                      int add_bos, int *ids, int cap, Err *e) {
    return encode(t, text, n, 1, plain, add_bos, ids, cap, e);
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

int tok_piece(const Tokenizer *t, int id, char *out, int cap) {
    if (id < 0 || id >= t->n_vocab) return -1;
    const Piece *p = &t->pieces[id];
    char byte = (char)p->byte;
    const char *s = p->type == TT_BYTE ? &byte : p->s;
    int len = p->type == TT_BYTE ? 1 : p->len;
    if (cap > 0) {
        int k = len < cap ? len : cap - 1;
        memcpy(out, s, (size_t)k);
        out[k] = 0;
    }
    return len;
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
