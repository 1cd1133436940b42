/* pretok.c - the pre-tokenizers: a text cut into words, numbers, punctuation
 * and runs of spaces before byte-level BPE merges inside each cut (the
 * essay is in tokenizer.c; the public face, tok_pattern_* and
 * tok_splitter_*, is in tokenizer.h). Each vocabulary names its rules
 * (tokenizer.ggml.pre): one to six regular expressions applied in turn, run
 * on PCRE2 for Unicode's letter and number classes. */
#include "text/tokenizer_internal.h"
#include "base/mem.h"
#include <assert.h>
#include <stdio.h>

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

int pretok_by_name(TokPattern *p, const char *name, int *whole_words, int *add_bos, Err *e) {
    memset(p, 0, sizeof *p);
    const PreRules *r = pre_rules(name);
    if (!r) {
        char known[320];
        size_t w = 0;
        known[0] = 0;
        for (size_t i = 0; i < sizeof PRE_NAMES / sizeof PRE_NAMES[0] && w < sizeof known; i++)
            if (strcmp(PRE_NAMES[i].rules->name, PRE_NAMES[i].name) == 0)   /* not an alias */
                w += (size_t)snprintf(known + w, sizeof known - w, "%s%s", w ? ", " : "",
                                      PRE_NAMES[i].name);
        return err_set(e, ST_UNSUPPORTED, "tokenizer.ggml.pre '%s' is not a pre-tokenizer this "
                       "engine knows (it knows %s, and their aliases)", name, known);
    }
    Err why;
    int st = compile_rules(p, r, &why);
    if (st) return err_set(e, st, "tokenizer.ggml.pre '%s': %s", name, why.msg);
    *whole_words = r->whole_words;
    *add_bos = r->add_bos;
    return ST_OK;
}
