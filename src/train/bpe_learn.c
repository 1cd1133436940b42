/* bpe.c - learning a byte-level BPE vocabulary (see bpe.h).
 *
 * The idea (Sennrich et al. 2016): start with a vocabulary of single symbols
 * (here the 256 byte values) and a text written in them. Count every pair of
 * neighbouring symbols; the most frequent pair becomes a new symbol, and
 * every occurrence of the pair in the text is rewritten as that one symbol.
 * Repeat until the vocabulary has the size wanted. The list of merges, in
 * the order they were learned, is the tokenizer: encoding new text replays
 * them (tokenizer.c applies the earliest-learned pair first).
 *
 * Words. Pairs are never counted across the cuts of the GPT-2 pre-tokenizer
 * (a pattern that splits text into words with at most one leading space,
 * numbers, punctuation runs and whitespace), so a token never glues the end
 * of one word to the start of the next. The cuts come from the engine's own
 * pre-tokenizer (tok_splitter_* in tokenizer.h), because training must cut
 * exactly where encoding will. Inside the cuts the text repeats
 * itself a lot: the 1 MB training split of tinyshakespeare has 267,000
 * pre-tokens but only 14,000 different ones. So the trainer never holds the
 * text itself: it holds each distinct pre-token once (a "word"), with the
 * number of times it occurs and the symbols it is currently split into. A
 * pair occurring once in a word that occurs 500 times counts 500.
 *
 * Incremental counts. Recounting every pair after every merge would cost the
 * whole word list per merge. But a merge of (A, B) only changes the words
 * that contain A B, and in them only the pairs next to it. So the trainer
 * keeps:
 *  - a pair table: (left, right) -> its current count, and a list of the
 *    words it occurs in (a word stays listed after it loses the pair; such
 *    stale entries are skipped when met, which is cheaper than removing them);
 *  - a max-heap of pairs ordered by count, then by smaller ids (the tie
 *    rule). A merge lowers the counts of some pairs without touching the
 *    heap, so an entry can be stale: its key is larger than its pair's count.
 *    When one comes to the top it is put back with the true count ("lazy
 *    deletion"). This is sound because the only pairs whose counts can rise
 *    are those with the new symbol, and those are pushed after the merge.
 * Merging (A, B) into Z then walks the words listed for (A, B): for each
 * word that still contains it, subtract the word's count from each of its
 * pairs, rewrite the word left to right, and add the count to each pair of
 * the new word. Pairs containing Z are new; they are pushed on the heap once
 * the merge is done.
 *
 * Why the engine's encoder reproduces this. After merge r, no word holds a
 * pair of rank r or below: every occurrence of the pair was rewritten (the
 * left-to-right rewrite leaves no A A behind in a run of As), and the pairs
 * made by the merge contain the new token Z, which no earlier merge can
 * name. The encoder merges the lowest-ranked pair present, leftmost first,
 * so on any training word it takes exactly the trainer's steps in the
 * trainer's order.
 *
 * That argument needs Z to be a new string, not only a new id: the encoder
 * knows tokens by their bytes, so a second token spelling the bytes of an
 * earlier one would be confused with it. It is, always. Merges act locally:
 * a stretch of a word whose ends are token boundaries is split exactly as
 * that stretch alone would be, since a merge inside it never depends on
 * anything outside (a pair reaching outside would have made a token that
 * crosses the boundary). Now say merge r joined X1 Y1 into the bytes T, and
 * a later merge s joins X2 Y2, also T. Just before s, some word holds X2 Y2,
 * a stretch with boundaries at both ends, so T alone would be split X2 Y2
 * then. But T alone was X1 Y1 just before r (by the same locality, in the
 * word where r happened), became one token at r, and tokens never split. So
 * every merge makes a new string, and the vocabulary is exactly 256 +
 * merges + 1. (The tests check it on real text.)
 *
 * A pair that would join into more than BPE_MAX_TOKEN_BYTES bytes is passed
 * over for good (the engine refuses such pieces): a run of hundreds of '='
 * characters must not become one token.
 *
 * Determinism: words are numbered in order of first appearance, the heap
 * order is total (a count, then two ids that no other pair shares), and
 * nothing depends on addresses or time. The same text and size give the
 * same merges and the same file.
 *
 * Dimensions as in bpe.h: n bytes of text, W words, V tokens, M merges. */
#include "train/bpe_learn.h"
#include "train/gguf_write.h"
#include "base/mem.h"
#include "text/tokenizer.h"
#include <assert.h>
#include <limits.h>
#include <string.h>

/* ---- growing arrays ------------------------------------------------------ */

/* Make room for need elements of elem bytes in the array whose pointer is
 * at arr (a T ** passed as void *), doubling its capacity *cap. The pointer
 * is read and written with memcpy, which is valid for any T. */
static int reserve(void *arr, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return ST_OK;
    size_t new_cap = *cap ? *cap : 16;
    while (new_cap < need) new_cap *= 2;
    void *old;
    memcpy(&old, arr, sizeof old);
    void *p = mem_realloc(old, new_cap * elem);
    if (!p) return ST_NOMEM;
    memcpy(arr, &p, sizeof p);
    *cap = new_cap;
    return ST_OK;
}

static uint32_t hash_bytes(const char *s, int n) {   /* FNV-1a */
    uint32_t h = 2166136261u;
    for (int i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static uint32_t hash_pair(int a, int b) {
    uint64_t x = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(x >> 32);
}

/* ---- words: the distinct pre-tokens ------------------------------------- */

/* Index of the word with bytes s[0..len), or -1. */
static int word_find(const Bpe *b, const char *s, int len) {
    uint32_t mask = (uint32_t)b->n_word_slots - 1;
    for (uint32_t i = hash_bytes(s, len) & mask;; i = (i + 1) & mask) {
        int w = b->word_slots[i];
        if (w < 0) return -1;
        const BpeSpan *t = &b->words[w].text;
        if (t->len == len && memcmp(b->word_text + t->off, s, (size_t)len) == 0) return w;
    }
}

static void word_slot_put(Bpe *b, int w) {
    const BpeSpan *t = &b->words[w].text;
    uint32_t mask = (uint32_t)b->n_word_slots - 1;
    uint32_t i = hash_bytes(b->word_text + t->off, t->len) & mask;
    while (b->word_slots[i] >= 0) i = (i + 1) & mask;
    b->word_slots[i] = w;
}

/* Double the word hash table (kept at most half full) and re-insert. */
static int word_slots_grow(Bpe *b) {
    int n_slots = b->n_word_slots ? 2 * b->n_word_slots : 1024;
    int *slots = mem_alloc((size_t)n_slots * sizeof *slots);
    if (!slots) return ST_NOMEM;
    memset(slots, 0xff, (size_t)n_slots * sizeof *slots);   /* all -1 */
    mem_free(b->word_slots);
    b->word_slots = slots;
    b->n_word_slots = n_slots;
    for (int w = 0; w < b->n_words; w++) word_slot_put(b, w);
    return ST_OK;
}

/* Scratch of one training run; bpe.h's Bpe holds what is kept. */
typedef struct {
    int left, right;    /* token ids */
    int64_t count;      /* occurrences in the words now, each weighted by its word's count */
    int first_occ;      /* its word list: index into occ, -1 when empty */
} Pair;

typedef struct {
    int word;           /* a word that holds (or once held) the pair */
    int next;           /* next link of the same list, -1 at the end */
} Occ;

typedef struct {
    int64_t count;      /* the pair's count when pushed: never below its count now */
    int pair;
} HeapEntry;

typedef struct {
    size_t cap_words, cap_word_text, cap_tok_text;   /* capacities of Bpe's arrays */
    Pair *pairs;        /* (n_pairs) */
    size_t n_pairs, cap_pairs;
    int *pair_slots;    /* (n_pair_slots) hash table: (left, right) -> pair, -1 empty */
    size_t n_pair_slots;
    Occ *occ;           /* (n_occ) the links of every pair's word list */
    size_t n_occ, cap_occ;
    HeapEntry *heap;    /* (n_heap) at most one entry per pair */
    size_t n_heap, cap_heap;
} Trainer;

static void trainer_free(Trainer *t) {
    mem_free(t->pairs);
    mem_free(t->pair_slots);
    mem_free(t->occ);
    mem_free(t->heap);
}

/* Add one occurrence of the word s[0..len) to b->words. */
static int word_count(Bpe *b, Trainer *t, const char *s, int len) {
    int w = b->n_word_slots ? word_find(b, s, len) : -1;
    if (w < 0) {
        size_t used = b->n_words ? (size_t)b->words[b->n_words - 1].text.off +
                                       (size_t)b->words[b->n_words - 1].text.len : 0;
        if (2 * (b->n_words + 1) > b->n_word_slots && word_slots_grow(b)) return ST_NOMEM;
        if (reserve(&b->words, &t->cap_words, (size_t)b->n_words + 1, sizeof *b->words) ||
            reserve(&b->word_text, &t->cap_word_text, used + (size_t)len, 1))
            return ST_NOMEM;
        w = b->n_words++;
        memcpy(b->word_text + used, s, (size_t)len);
        b->words[w] = (BpeWord){{(int)used, len}, 0, len};
        word_slot_put(b, w);
    }
    b->words[w].count++;
    return ST_OK;
}

/* Count the pre-tokens of text[0..n) into b->words, and start each word as
 * its bytes (token id c is byte c). */
static int count_words(Bpe *b, Trainer *t, const char *text, size_t n, Err *e) {
    TokPattern pat;
    TokSplitter sp = {0};
    int st = tok_pattern_init(&pat, e);
    if (!st) st = tok_splitter_init(&sp, &pat, text, n, e);
    size_t start, end;
    while (st == ST_OK) {
        st = tok_splitter_next(&sp, &start, &end, e);
        if (st <= 0) break;   /* 0: the text is used up; < 0: an error */
        st = word_count(b, t, text + start, (int)(end - start));
        if (st) st = err_set(e, ST_NOMEM, "out of memory counting words (%d so far)", b->n_words);
    }
    tok_splitter_free(&sp);
    tok_pattern_free(&pat);
    if (st) return st;

    size_t text_len = b->n_words ? (size_t)b->words[b->n_words - 1].text.off +
                                       (size_t)b->words[b->n_words - 1].text.len : 0;
    b->word_sym = mem_alloc((text_len ? text_len : 1) * sizeof *b->word_sym);
    if (!b->word_sym) return err_set(e, ST_NOMEM, "out of memory for %zu word bytes", text_len);
    for (size_t i = 0; i < text_len; i++) b->word_sym[i] = (unsigned char)b->word_text[i];
    return ST_OK;
}

/* ---- tokens -------------------------------------------------------------- */

/* Append token id b->n_vocab spelled s[0..len) (s must not point into
 * tok_text, which may move). */
static int token_add(Bpe *b, Trainer *t, const char *s, int len) {
    size_t used = b->n_vocab ? (size_t)b->tokens[b->n_vocab - 1].off +
                                   (size_t)b->tokens[b->n_vocab - 1].len : 0;
    if (reserve(&b->tok_text, &t->cap_tok_text, used + (size_t)len, 1)) return ST_NOMEM;
    memcpy(b->tok_text + used, s, (size_t)len);
    b->tokens[b->n_vocab++] = (BpeSpan){(int)used, len};
    return ST_OK;
}

/* ---- pairs --------------------------------------------------------------- */

static int pair_find(const Trainer *t, int left, int right) {
    if (t->n_pair_slots == 0) return -1;   /* no pair yet, no table yet */
    uint32_t mask = (uint32_t)t->n_pair_slots - 1;
    for (uint32_t i = hash_pair(left, right) & mask;; i = (i + 1) & mask) {
        int p = t->pair_slots[i];
        if (p < 0) return -1;
        if (t->pairs[p].left == left && t->pairs[p].right == right) return p;
    }
}

static void pair_slot_put(Trainer *t, int p) {
    uint32_t mask = (uint32_t)t->n_pair_slots - 1;
    uint32_t i = hash_pair(t->pairs[p].left, t->pairs[p].right) & mask;
    while (t->pair_slots[i] >= 0) i = (i + 1) & mask;
    t->pair_slots[i] = p;
}

/* A new pair (left, right) with count 0 and no words; its index in *p. */
static int pair_new(Trainer *t, int left, int right, int *p) {
    if (2 * (t->n_pairs + 1) > t->n_pair_slots) {   /* keep the table at most half full */
        size_t n_slots = t->n_pair_slots ? 2 * t->n_pair_slots : 1024;
        int *slots = mem_alloc(n_slots * sizeof *slots);
        if (!slots) return ST_NOMEM;
        memset(slots, 0xff, n_slots * sizeof *slots);
        mem_free(t->pair_slots);
        t->pair_slots = slots;
        t->n_pair_slots = n_slots;
        for (size_t q = 0; q < t->n_pairs; q++) pair_slot_put(t, (int)q);
    }
    if (t->n_pairs >= INT_MAX || reserve(&t->pairs, &t->cap_pairs, t->n_pairs + 1, sizeof *t->pairs))
        return ST_NOMEM;
    *p = (int)t->n_pairs++;
    t->pairs[*p] = (Pair){left, right, 0, -1};
    pair_slot_put(t, *p);
    return ST_OK;
}

/* Put word w on pair p's list, unless it is already first there. A word
 * joins a list only while it is being rewritten (or first counted), so a
 * repeat could only be at the head: no word is on a list twice. */
static int pair_note_word(Trainer *t, int p, int w) {
    int head = t->pairs[p].first_occ;
    if (head >= 0 && t->occ[head].word == w) return ST_OK;
    if (t->n_occ >= INT_MAX || reserve(&t->occ, &t->cap_occ, t->n_occ + 1, sizeof *t->occ))
        return ST_NOMEM;
    t->occ[t->n_occ] = (Occ){w, head};
    t->pairs[p].first_occ = (int)t->n_occ++;
    return ST_OK;
}

/* Add count to the pair (left, right), creating it if needed; when listed
 * is set, also put word w on its list. */
static int pair_add(Trainer *t, int left, int right, int64_t count, int w, int listed) {
    int p = pair_find(t, left, right);
    if (p < 0 && pair_new(t, left, right, &p)) return ST_NOMEM;
    t->pairs[p].count += count;
    return listed ? pair_note_word(t, p, w) : ST_OK;
}

/* Take count away from the pair (left, right), which a word holds. */
static void pair_sub(Trainer *t, int left, int right, int64_t count) {
    int p = pair_find(t, left, right);
    assert(p >= 0 && t->pairs[p].count >= count);
    t->pairs[p].count -= count;
}

/* ---- the heap ------------------------------------------------------------ */

/* Entry a comes out before b: higher count, then smaller left id, then
 * smaller right id. This is the tie rule of bpe.h. */
static int heap_before(const Trainer *t, HeapEntry a, HeapEntry b) {
    if (a.count != b.count) return a.count > b.count;
    const Pair *pa = &t->pairs[a.pair], *pb = &t->pairs[b.pair];
    if (pa->left != pb->left) return pa->left < pb->left;
    return pa->right < pb->right;
}

static void heap_push(Trainer *t, HeapEntry x) {
    assert(t->n_heap < t->cap_heap);   /* reserved by the caller */
    size_t i = t->n_heap++;
    while (i > 0 && heap_before(t, x, t->heap[(i - 1) / 2])) {   /* sift up */
        t->heap[i] = t->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    t->heap[i] = x;
}

static HeapEntry heap_pop(Trainer *t) {
    HeapEntry top = t->heap[0], last = t->heap[--t->n_heap];
    size_t i = 0;
    for (;;) {   /* sift the last entry down from the root */
        size_t c = 2 * i + 1;
        if (c >= t->n_heap) break;
        if (c + 1 < t->n_heap && heap_before(t, t->heap[c + 1], t->heap[c])) c++;
        if (!heap_before(t, t->heap[c], last)) break;
        t->heap[i] = t->heap[c];
        i = c;
    }
    if (t->n_heap > 0) t->heap[i] = last;
    return top;
}

/* Push every pair from index first on with its count. */
static int heap_push_pairs(Trainer *t, size_t first) {
    if (reserve(&t->heap, &t->cap_heap, t->n_pairs, sizeof *t->heap)) return ST_NOMEM;
    for (size_t p = first; p < t->n_pairs; p++)
        if (t->pairs[p].count > 0) heap_push(t, (HeapEntry){t->pairs[p].count, (int)p});
    return ST_OK;
}

/* ---- training ------------------------------------------------------------ */

/* Count the pairs of every word, list the words of each pair, fill the heap. */
static int count_pairs(Bpe *b, Trainer *t) {
    for (int w = 0; w < b->n_words; w++) {
        const int *s = b->word_sym + b->words[w].text.off;
        for (int i = 0; i + 1 < b->words[w].n_sym; i++)
            if (pair_add(t, s[i], s[i + 1], b->words[w].count, w, 1)) return ST_NOMEM;
    }
    return heap_push_pairs(t, 0);
}

/* The pair to merge next, or -1 when none is left: the top of the heap once
 * stale entries are refreshed and pairs too long to join dropped. */
static int pick_pair(Bpe *b, Trainer *t) {
    while (t->n_heap > 0) {
        HeapEntry top = heap_pop(t);
        const Pair *p = &t->pairs[top.pair];
        assert(top.count >= p->count);   /* an old pair's count only falls */
        if (p->count == 0) continue;     /* every occurrence was merged away */
        if (top.count > p->count) {      /* stale: back in, at its true count */
            top.count = p->count;
            heap_push(t, top);
            continue;
        }
        if (b->tokens[p->left].len + b->tokens[p->right].len > BPE_MAX_TOKEN_BYTES) {
            b->n_skipped++;   /* too long to be a token, now and later */
            continue;
        }
        return top.pair;
    }
    return -1;
}

/* Rewrite word w, if it holds (left, right), with z in its place, keeping
 * the pair counts right: the word's pairs are taken out, the word merged
 * left to right, and the new word's pairs put back. */
static int rewrite_word(Bpe *b, Trainer *t, int w, int left, int right, int z) {
    BpeWord *wd = &b->words[w];
    int *s = b->word_sym + wd->text.off;
    int n = wd->n_sym, found = 0;
    for (int i = 0; i + 1 < n && !found; i++) found = s[i] == left && s[i + 1] == right;
    if (!found) return ST_OK;   /* a stale entry of the pair's list */

    for (int i = 0; i + 1 < n; i++) pair_sub(t, s[i], s[i + 1], wd->count);
    int k = 0;
    for (int i = 0; i < n;) {
        if (i + 1 < n && s[i] == left && s[i + 1] == right) {
            s[k++] = z;
            i += 2;
        } else {
            s[k++] = s[i++];
        }
    }
    wd->n_sym = k;
    for (int i = 0; i + 1 < k; i++) {
        int has_z = s[i] == z || s[i + 1] == z;   /* a pair new to this word */
        if (pair_add(t, s[i], s[i + 1], wd->count, w, has_z)) return ST_NOMEM;
    }
    return ST_OK;
}

/* Learn merge number b->n_merges from pair p. */
static int merge_pair(Bpe *b, Trainer *t, int p) {
    Pair pr = t->pairs[p];   /* a copy: the pair table may move */
    const BpeSpan *l = &b->tokens[pr.left], *r = &b->tokens[pr.right];
    char buf[2 * BPE_MAX_TOKEN_BYTES];
    memcpy(buf, b->tok_text + l->off, (size_t)l->len);
    memcpy(buf + l->len, b->tok_text + r->off, (size_t)r->len);
    int z = b->n_vocab;
    if (token_add(b, t, buf, l->len + r->len)) return ST_NOMEM;
    b->merges[b->n_merges++] = (BpeMerge){pr.left, pr.right, pr.count};

    size_t first_new = t->n_pairs;
    for (int o = pr.first_occ; o >= 0; o = t->occ[o].next)
        if (rewrite_word(b, t, t->occ[o].word, pr.left, pr.right, z)) return ST_NOMEM;
    assert(t->pairs[p].count == 0);   /* every word holding the pair was on its list */
    return heap_push_pairs(t, first_new);
}

int bpe_train(Bpe *b, const char *text, size_t n, int vocab_size, Err *e) {
    memset(b, 0, sizeof *b);
    if (vocab_size < BPE_MIN_VOCAB || vocab_size > BPE_MAX_VOCAB)
        return err_set(e, ST_ARG, "vocabulary size %d is outside %d..%d (256 bytes, merges, "
                       "<|endoftext|>)", vocab_size, BPE_MIN_VOCAB, BPE_MAX_VOCAB);
    if (n >= (size_t)1 << 30)
        return err_set(e, ST_ARG, "training text of %zu bytes is too long (at most 1 GiB)", n);
    Trainer t = {0};
    int st = count_words(b, &t, text, n, e);
    if (st) goto done;

    b->tokens = mem_alloc((size_t)vocab_size * sizeof *b->tokens);
    b->merges = mem_alloc((size_t)(vocab_size - BPE_MIN_VOCAB + 1) * sizeof *b->merges);
    if (!b->tokens || !b->merges) {
        st = err_set(e, ST_NOMEM, "out of memory for a vocabulary of %d tokens", vocab_size);
        goto done;
    }
    for (int c = 0; c < 256 && !st; c++) {
        char byte = (char)c;
        st = token_add(b, &t, &byte, 1);
    }
    if (!st) st = count_pairs(b, &t);
    while (!st && b->n_vocab < vocab_size - 1) {   /* the last id is <|endoftext|> */
        int p = pick_pair(b, &t);
        if (p < 0) break;   /* the text has no pair left that could be merged */
        st = merge_pair(b, &t, p);
    }
    if (!st) st = token_add(b, &t, BPE_EOT_TEXT, (int)strlen(BPE_EOT_TEXT));
    if (st) {
        st = err_set(e, ST_NOMEM, "out of memory after %d merges (%zu pairs)", b->n_merges,
                     t.n_pairs);
        goto done;
    }
    b->eot = b->n_vocab - 1;
    b->n_bytes = n;
    for (int w = 0; w < b->n_words; w++) b->n_tokens += b->words[w].count * b->words[w].n_sym;
done:
    trainer_free(&t);
    if (st) bpe_free(b);
    return st;
}

void bpe_free(Bpe *b) {
    mem_free(b->merges);
    mem_free(b->tokens);
    mem_free(b->tok_text);
    mem_free(b->words);
    mem_free(b->word_text);
    mem_free(b->word_sym);
    mem_free(b->word_slots);
    memset(b, 0, sizeof *b);
}

/* ---- using the result ---------------------------------------------------- */

int bpe_segment(const Bpe *b, const char *text, size_t n, int *ids, size_t cap, size_t *n_ids,
                Err *e) {
    *n_ids = 0;
    TokPattern pat;
    TokSplitter sp = {0};
    int st = tok_pattern_init(&pat, e);
    if (!st) st = tok_splitter_init(&sp, &pat, text, n, e);
    size_t start, end, count = 0;
    while (st == ST_OK) {
        int got = tok_splitter_next(&sp, &start, &end, e);
        if (got <= 0) {   /* 0: the text is used up; < 0: an error */
            st = got;
            break;
        }
        size_t len = end - start;
        int w = b->n_words > 0 && len < INT_MAX ? word_find(b, text + start, (int)len) : -1;
        if (w < 0) {
            st = err_set(e, ST_ARG, "the pre-token at byte %zu ('%.*s') was not in the training "
                         "text", start, len > 40 ? 40 : (int)len, text + start);
            break;
        }
        const BpeWord *wd = &b->words[w];
        for (int i = 0; i < wd->n_sym; i++, count++)
            if (count < cap) ids[count] = b->word_sym[wd->text.off + i];
    }
    tok_splitter_free(&sp);
    tok_pattern_free(&pat);
    *n_ids = count;
    if (st) return st;
    if (count > cap)
        return err_set(e, ST_ARG, "the text is %zu tokens, more than the %zu there is room for",
                       count, cap);
    return ST_OK;
}

size_t bpe_train_bytes(size_t n, double fraction) {
    assert(fraction >= 0.0 && fraction <= 1.0);
    size_t k = (size_t)(fraction * (double)n);   /* truncation: the floor */
    return k > n ? n : k;
}

/* ---- writing GGUF -------------------------------------------------------- */

/* GPT-2's printable disguise for bytes, the inverse of tokenizer.c's
 * gpt2_alphabet: printable non-space bytes ('!'..'~', A1..AC, AE..FF) are
 * their own code points; the other 68, in order, become U+0100, U+0101 ...
 * So every token is a string without spaces or control characters, and a
 * merge can be written as two tokens with a space between them. */
static void gpt2_byte_alphabet(int byte_to_cp[256]) {
    int next = 0x100;
    for (int c = 0; c < 256; c++) {
        int printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
        byte_to_cp[c] = printable ? c : next++;
    }
}

/* Write the disguised form of s[0..len) at out as UTF-8 (at most 2 bytes per
 * byte, all code points being below U+0800); returns the bytes written. */
static size_t gpt2_spell(const int byte_to_cp[256], const char *s, int len, char *out) {
    size_t w = 0;
    for (int i = 0; i < len; i++) {
        int cp = byte_to_cp[(unsigned char)s[i]];
        if (cp < 0x80) {
            out[w++] = (char)cp;
        } else {
            out[w++] = (char)(0xC0 | cp >> 6);
            out[w++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    return w;
}

int bpe_write_gguf(const Bpe *b, const char *path, Err *e) {
    int V = b->n_vocab, M = b->n_merges;
    /* Room for every string, disguised, NUL-terminated: the tokens, and the
     * merges (two tokens, a space, a NUL). */
    size_t bytes = 0;
    for (int id = 0; id < V; id++) bytes += 2 * (size_t)b->tokens[id].len + 1;
    for (int r = 0; r < M; r++)
        bytes += 2 * (size_t)(b->tokens[b->merges[r].left].len +
                              b->tokens[b->merges[r].right].len) + 2;
    char *arena = mem_alloc(bytes);
    const char **tokens = mem_alloc((size_t)V * sizeof *tokens);
    const char **merges = mem_alloc((size_t)(M ? M : 1) * sizeof *merges);
    int32_t *types = mem_alloc((size_t)V * sizeof *types);
    int st = ST_OK;
    if (!arena || !tokens || !merges || !types) {
        st = err_set(e, ST_NOMEM, "%s: out of memory for the strings of %d tokens", path, V);
        goto done;
    }

    int byte_to_cp[256];
    gpt2_byte_alphabet(byte_to_cp);
    size_t w = 0;
    for (int id = 0; id < V; id++) {
        const BpeSpan *k = &b->tokens[id];
        tokens[id] = arena + w;
        if (id == b->eot) {   /* control tokens are written as they are */
            memcpy(arena + w, b->tok_text + k->off, (size_t)k->len);
            w += (size_t)k->len;
        } else {
            w += gpt2_spell(byte_to_cp, b->tok_text + k->off, k->len, arena + w);
        }
        arena[w++] = 0;
        types[id] = id == b->eot ? 3 : 1;   /* GGUF's token types: 3 control, 1 normal */
    }
    for (int r = 0; r < M; r++) {
        const BpeSpan *l = &b->tokens[b->merges[r].left], *rt = &b->tokens[b->merges[r].right];
        merges[r] = arena + w;
        w += gpt2_spell(byte_to_cp, b->tok_text + l->off, l->len, arena + w);
        arena[w++] = ' ';
        w += gpt2_spell(byte_to_cp, b->tok_text + rt->off, rt->len, arena + w);
        arena[w++] = 0;
    }
    assert(w <= bytes);

    /* Adds record their first failure in the writer; gguf_w_write reports it. */
    GgufWriter gw;
    gguf_w_init(&gw, path);
    gguf_w_add_str(&gw, "general.architecture", "llama");
    gguf_w_add_str(&gw, "tokenizer.ggml.model", "gpt2");
    gguf_w_add_str(&gw, "tokenizer.ggml.pre", "gpt-2");
    gguf_w_add_str_array(&gw, "tokenizer.ggml.tokens", tokens, (uint64_t)V);
    gguf_w_add_i32_array(&gw, "tokenizer.ggml.token_type", types, (uint64_t)V);
    gguf_w_add_str_array(&gw, "tokenizer.ggml.merges", merges, (uint64_t)M);
    gguf_w_add_u32(&gw, "tokenizer.ggml.bos_token_id", (uint32_t)b->eot);
    gguf_w_add_u32(&gw, "tokenizer.ggml.eos_token_id", (uint32_t)b->eot);
    gguf_w_add_bool(&gw, "tokenizer.ggml.add_bos_token", 1);
    st = gguf_w_write(&gw, e);
    gguf_w_free(&gw);
done:
    mem_free(arena);
    mem_free(tokens);
    mem_free(merges);
    mem_free(types);
    return st;
}
