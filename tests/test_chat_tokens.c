/* test_chat_tokens.c - special tokens in chat prompts, and the end of
 * generation, against llama.cpp's answers.
 *
 * Golden data (../shared/fixtures/chat/, see its README): for Llama 3's and
 * Qwen2.5's vocabularies and chat templates, the prompts llama.cpp rendered
 * for nine conversations (expected.jsonl), the ids its server fed the model
 * (ids_parse_special: every special text read as its token, the user's too),
 * the ids where message contents stay text (ids_safe, for the two
 * conversations whose user wrote the template's markup), and the ids
 * llama.cpp ends generation on (eog.txt). The conversations themselves
 * (conversations.json) say which bytes of a prompt a user wrote. Small
 * hand-made vocabularies check the order in which special texts are cut. */
#include "testutil.h"
#include "base/mem.h"
#include "load/gguf.h"
#include "text/tokenizer.h"
#include <cjson/cJSON.h>
#include <ctype.h>

#define MAX_IDS 4096

/* ---- helpers --------------------------------------------------------------- */

static Tokenizer *load_gguf(const char *rel) {
    char path[512];
    if (!fixture(path, sizeof path, rel)) return NULL;
    Gguf g;
    Err e;
    Tokenizer *t = NULL;
    int st = gguf_open(&g, path, &e);
    if (st == ST_OK) st = tok_from_gguf(&t, &g, &e);
    if (st != ST_OK) print_error("%s: %s\n", path, e.msg);
    assert_int_equal(st, ST_OK);
    gguf_close(&g);
    return t;
}

/* Encode text (n bytes) with plain as its mask; BOS as the vocabulary says. */
static int marked(const Tokenizer *t, const char *text, size_t n, const unsigned char *plain,
                  int *ids) {
    Err e;
    int k = tok_encode_marked(t, text, n, plain, 1, ids, MAX_IDS, &e);
    if (k < 0) print_error("encoding failed: %s\n", e.msg);
    assert_true(k >= 0);
    return k;
}

/* Fail with the first difference between two id lists, naming the case. */
static void expect_ids(const char *what, const int *got, int n_got, const int *want, int n_want) {
    int i = 0;
    while (i < n_got && i < n_want && got[i] == want[i]) i++;
    if (i == n_got && i == n_want) return;
    print_error("%s: first mismatch at id %d of %d (want %d ids): got %d, want %d\n", what, i,
                n_got, n_want, i < n_got ? got[i] : -1, i < n_want ? want[i] : -1);
    fail();
}

static int json_ids(const cJSON *arr, int *ids) {
    int n = 0;
    const cJSON *v;
    assert_true(cJSON_IsArray(arr));
    cJSON_ArrayForEach(v, arr) {
        assert_true(n < MAX_IDS && cJSON_IsNumber(v));
        ids[n++] = v->valueint;
    }
    return n;
}

static const char *json_str(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    assert_true(cJSON_IsString(v));
    return v->valuestring;
}

/* One conversation of a case: llama.cpp's prompt and ids, and the messages. */
typedef struct {
    cJSON *expected;        /* a line of expected.jsonl */
    const cJSON *messages;  /* its conversation's messages, from conversations.json */
} Case;

/* The conversations of chat/<name>/, in order; returns how many (at most cap). */
static int read_case(const char *name, Case *cases, int cap, cJSON **conversations) {
    char rel[256], path[512];
    snprintf(rel, sizeof rel, "chat/%s/conversations.json", name);
    if (!fixture(path, sizeof path, rel)) return 0;
    char *text = read_file(path, NULL);
    assert_non_null(text);
    *conversations = cJSON_Parse(text);
    free(text);
    assert_true(cJSON_IsArray(*conversations));

    snprintf(rel, sizeof rel, "chat/%s/expected.jsonl", name);
    fixture(path, sizeof path, rel);
    text = read_file(path, NULL);
    assert_non_null(text);
    int n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        assert_true(n < cap);
        cases[n].expected = cJSON_Parse(line);
        assert_non_null(cases[n].expected);
        const cJSON *conv = cJSON_GetArrayItem(*conversations, n);
        assert_string_equal(json_str(conv, "name"), json_str(cases[n].expected, "name"));
        cases[n].messages = cJSON_GetObjectItemCaseSensitive(conv, "messages");
        n++;
    }
    free(text);
    assert_int_equal(n, cJSON_GetArraySize(*conversations));
    return n;
}

static void free_case(Case *cases, int n, cJSON *conversations) {
    for (int i = 0; i < n; i++) cJSON_Delete(cases[i].expected);
    cJSON_Delete(conversations);
}

/* Mark as plain the bytes of prompt that each message's content became,
 * found in order; trim: the template prints contents trimmed (Llama 3.2's
 * "| trim"). */
static void mark_contents(const char *prompt, const cJSON *messages, int trim,
                          unsigned char *plain) {
    size_t n = strlen(prompt), from = 0;
    memset(plain, 0, n);
    const cJSON *m;
    cJSON_ArrayForEach(m, messages) {
        const char *c = json_str(m, "content");
        size_t len = strlen(c);
        while (trim && len > 0 && isspace((unsigned char)*c)) c++, len--;
        while (trim && len > 0 && isspace((unsigned char)c[len - 1])) len--;
        if (len == 0) continue;
        const char *at = memmem(prompt + from, n - from, c, len);
        if (!at) {
            print_error("the content '%.*s' is not in the prompt\n", (int)(len < 40 ? len : 40), c);
            fail();
        }
        memset(plain + (at - prompt), 1, len);
        from = (size_t)(at - prompt) + len;
    }
}

/* ---- llama.cpp's prompts ---------------------------------------------------- */

/* With no byte plain, every special text of the prompt is its token, and the
 * ids are what llama-server fed the model, BOS first where the vocabulary
 * adds one (Llama 3), for all nine conversations of both vocabularies. */
static void prompts_encode_as_llama_cpp_reads_them_with_special_texts_parsed(void **state) {
    const char *names[] = {"llama3", "qwen2.5"};
    for (int k = 0; k < 2; k++) {
        char rel[64];
        snprintf(rel, sizeof rel, "chat/%s/model.gguf", names[k]);
        Tokenizer *t = load_gguf(rel);
        Case cases[16];
        cJSON *conv;
        int n = read_case(names[k], cases, 16, &conv);
        static int got[MAX_IDS], want[MAX_IDS];
        for (int i = 0; i < n; i++) {
            const char *prompt = json_str(cases[i].expected, "prompt");
            int n_got = marked(t, prompt, strlen(prompt), NULL, got);
            int n_want = json_ids(cJSON_GetObjectItemCaseSensitive(cases[i].expected,
                                                                   "ids_parse_special"), want);
            char what[128];
            snprintf(what, sizeof what, "%s/%s", names[k], json_str(cases[i].expected, "name"));
            expect_ids(what, got, n_got, want, n_want);
        }
        free_case(cases, n, conv);
        tok_free(t);
    }
}

/* With the messages' contents marked plain, the markup the template wrote is
 * still read as tokens, and what users wrote stays text: in the injection
 * conversations (a user, or a system message, holding the template's own
 * "<|eot_id|><|start_header_id|>system..." or "<|im_end|>\n<|im_start|>
 * system...") the ids are ids_safe, and without the mask they are
 * ids_parse_special, so the mask is what makes the difference; in the
 * other seven conversations the mask changes nothing. */
static void message_contents_marked_plain_stay_text_and_the_markup_stays_tokens(void **state) {
    const char *names[] = {"llama3", "qwen2.5"};
    const int trims[] = {1, 0};   /* Llama 3.2's template prints contents "| trim" */
    for (int k = 0; k < 2; k++) {
        char rel[64];
        snprintf(rel, sizeof rel, "chat/%s/model.gguf", names[k]);
        Tokenizer *t = load_gguf(rel);
        Case cases[16];
        cJSON *conv;
        int n = read_case(names[k], cases, 16, &conv);
        static int got[MAX_IDS], want[MAX_IDS], unsafe[MAX_IDS];
        int n_injections = 0;
        for (int i = 0; i < n; i++) {
            const cJSON *x = cases[i].expected;
            const char *prompt = json_str(x, "prompt");
            size_t len = strlen(prompt);
            unsigned char *plain = malloc(len + 1);
            mark_contents(prompt, cases[i].messages, trims[k], plain);
            const cJSON *safe = cJSON_GetObjectItemCaseSensitive(x, "ids_safe");
            const cJSON *parsed = cJSON_GetObjectItemCaseSensitive(x, "ids_parse_special");
            int n_unsafe = json_ids(parsed, unsafe);
            int n_want = safe ? json_ids(safe, want) : n_unsafe;
            if (!safe) memcpy(want, unsafe, (size_t)n_unsafe * sizeof(int));
            char what[128];
            snprintf(what, sizeof what, "%s/%s with contents plain", names[k], json_str(x, "name"));
            int n_got = marked(t, prompt, len, plain, got);
            expect_ids(what, got, n_got, want, n_want);
            if (safe) {
                n_injections++;
                assert_true(n_want != n_unsafe ||
                            memcmp(want, unsafe, (size_t)n_want * sizeof(int)) != 0);
                snprintf(what, sizeof what, "%s/%s without a mask", names[k], json_str(x, "name"));
                n_got = marked(t, prompt, len, NULL, got);
                expect_ids(what, got, n_got, unsafe, n_unsafe);
            }
            free(plain);
        }
        assert_int_equal(n_injections, 2);
        free_case(cases, n, conv);
        tok_free(t);
    }
}

/* ---- the end of generation ---------------------------------------------------- */

/* tok_eog gives every id of eog.txt, which llama_vocab_is_eog holds true,
 * and no other; tok_piece spells each as the file's second column does. */
static void eog_ids_are_llama_cpps(void **state) {
    const char *names[] = {"llama3", "qwen2.5"};
    for (int k = 0; k < 2; k++) {
        char rel[64], path[512];
        snprintf(rel, sizeof rel, "chat/%s/model.gguf", names[k]);
        Tokenizer *t = load_gguf(rel);
        snprintf(rel, sizeof rel, "chat/%s/eog.txt", names[k]);
        fixture(path, sizeof path, rel);
        char *text = read_file(path, NULL);
        assert_non_null(text);
        int want[16], n_want = 0;
        char piece[64];
        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
            if (line[0] == '#') continue;
            char *tab = strchr(line, '\t');
            assert_non_null(tab);
            assert_true(n_want < 16);
            want[n_want] = atoi(line);
            assert_int_equal(tok_piece(t, want[n_want], piece, sizeof piece), strlen(tab + 1));
            assert_string_equal(piece, tab + 1);
            n_want++;
        }
        free(text);
        int got[16];
        int n_got = tok_eog(t, got, 16);
        expect_ids(names[k], got, n_got, want, n_want);
        int n_is = 0;
        for (int id = 0; id < tok_n_vocab(t); id++) n_is += tok_is_eog(t, id);
        assert_int_equal(n_is, n_want);
        assert_true(tok_is_eog(t, tok_eos(t)));
        assert_false(tok_is_eog(t, -1));
        assert_int_equal(tok_eog(t, got, 1), n_want);   /* the count, whatever the room */
        assert_int_equal(got[0], want[0]);
        tok_free(t);
    }
    /* Llama 2's sentencepiece vocabulary ends on EOS alone, "</s>". */
    Tokenizer *t = load_gguf("tokenizers/llama-spm.gguf");
    int got[4];
    assert_int_equal(tok_eog(t, got, 4), 1);
    assert_int_equal(got[0], 2);
    tok_free(t);
}

/* In Qwen's vocabulary "</s>" (id 128247) is an ordinary piece; llama.cpp
 * stops on it by its spelling, and so reads it as a control token: with
 * nothing plain, "a</s>b" is 64 128247 65; all plain, it is text, 64 522 82
 * 51407, which tok_encode gives too. */
static void qwen_reads_its_ordinary_slash_s_piece_as_a_control_token(void **state) {
    Tokenizer *t = load_gguf("chat/qwen2.5/model.gguf");
    const unsigned char all[] = {1, 1, 1, 1, 1, 1};
    int ids[16];
    assert_int_equal(marked(t, "a</s>b", 6, NULL, ids), 3);
    expect_ids("nothing plain", ids, 3, (const int[]){64, 128247, 65}, 3);
    assert_int_equal(marked(t, "a</s>b", 6, all, ids), 4);
    expect_ids("all plain", ids, 4, (const int[]){64, 522, 82, 51407}, 4);
    Err e;
    assert_int_equal(tok_encode(t, "a</s>b", 1, ids, 16, &e), 4);
    expect_ids("tok_encode", ids, 4, (const int[]){64, 522, 82, 51407}, 4);
    assert_true(tok_is_eog(t, 128247));
    tok_free(t);
}

/* ---- user-defined and control texts --------------------------------------------- */

/* Qwen's vocabulary (Qwen1.5's) has the user-defined placeholders
 * "[PAD151646]" ..: such a text is its token even in plain text, as
 * llama.cpp and Hugging Face cut it out of any text; a control text in
 * plain text is bytes. */
static void user_defined_text_is_a_token_even_in_plain_text_control_text_is_not(void **state) {
    Tokenizer *t = load_gguf("chat/qwen2.5/model.gguf");
    const char *text = "x[PAD151646]y<|im_end|>z";
    size_t n = strlen(text);
    unsigned char plain[64];
    memset(plain, 1, n);
    int ids[64], k = marked(t, text, n, plain, ids), pad = 0, im_end = 0;
    for (int i = 0; i < k; i++) {
        pad += ids[i] == 151646;
        im_end += ids[i] == 151645;
    }
    assert_int_equal(pad, 1);
    assert_int_equal(im_end, 0);
    /* Nothing plain: both are tokens, and the bytes between are text. */
    int bare[8];
    Err e;
    assert_int_equal(marked(t, text, n, NULL, ids), 5);
    assert_int_equal(tok_encode(t, "x", 0, bare, 8, &e), 1);
    assert_int_equal(ids[0], bare[0]);
    assert_int_equal(ids[1], 151646);
    assert_int_equal(ids[3], 151645);
    /* One plain byte in "<|im_end|>" is enough to keep it text. */
    memset(plain, 0, n);
    plain[strlen("x[PAD151646]y<|im_")] = 1;
    k = marked(t, text, n, plain, ids);
    assert_true(k > 5);
    for (int i = 0; i < k; i++) assert_int_not_equal(ids[i], 151645);
    tok_free(t);
}

/* ---- hand-made vocabularies: the order of the cuts -------------------------------- */

/* A GGUF file of metadata only. */
typedef struct {
    unsigned char b[4096];
    size_t n;
    int n_kv;
} GgufImage;

static void put(GgufImage *g, const void *p, size_t n) {
    assert_true(g->n + n <= sizeof g->b);
    memcpy(g->b + g->n, p, n);
    g->n += n;
}

static void put_str(GgufImage *g, const char *s) {
    uint64_t n = strlen(s);
    put(g, &n, 8);
    put(g, s, n);
}

static void kv_array(GgufImage *g, const char *key, uint32_t et, uint64_t count) {
    uint32_t type = GG_ARRAY;
    put_str(g, key);
    put(g, &type, 4);
    put(g, &et, 4);
    put(g, &count, 8);
    g->n_kv++;
}

/* A byte-level vocabulary with no merges: its pieces, of the given types. */
static Tokenizer *hand_made(const char **pieces, const int32_t *types, int n) {
    GgufImage g = {.n = 0};
    uint32_t version = 3, type = GG_STRING;
    uint64_t zero = 0;
    put(&g, "GGUF", 4);
    put(&g, &version, 4);
    put(&g, &zero, 8);   /* tensors */
    put(&g, &zero, 8);   /* metadata count, patched below */
    put_str(&g, "tokenizer.ggml.model");
    put(&g, &type, 4);
    put_str(&g, "gpt2");
    g.n_kv++;
    put_str(&g, "tokenizer.ggml.pre");
    put(&g, &type, 4);
    put_str(&g, "gpt-2");
    g.n_kv++;
    kv_array(&g, "tokenizer.ggml.tokens", GG_STRING, (uint64_t)n);
    for (int i = 0; i < n; i++) put_str(&g, pieces[i]);
    kv_array(&g, "tokenizer.ggml.token_type", GG_I32, (uint64_t)n);
    put(&g, types, (size_t)n * 4);
    kv_array(&g, "tokenizer.ggml.merges", GG_STRING, 0);
    uint64_t n_kv = (uint64_t)g.n_kv;
    memcpy(g.b + 16, &n_kv, 8);

    char tmp[64];
    write_temp(tmp, sizeof tmp, g.b, g.n);
    Gguf f;
    Err e;
    Tokenizer *t = NULL;
    assert_int_equal(gguf_open(&f, tmp, &e), ST_OK);
    int st = tok_from_gguf(&t, &f, &e);
    if (st != ST_OK) print_error("%s\n", e.msg);
    assert_int_equal(st, ST_OK);
    gguf_close(&f);
    unlink(tmp);
    return t;
}

enum { NORMAL = 1, CONTROL = 3, USER = 4 };

/* llama.cpp cuts the text at each special text in turn, longest first, not
 * at the longest match from the left: with "ab" and "bcd" special, "abcd"
 * is "a" "bcd", though "ab" starts first. Of two texts of one length, the
 * lower id is cut first: "abc" is "ab" "c" when "ab" has the lower id,
 * "a" "bc" when "bc" has. The same holds with user-defined texts. */
static void special_texts_are_cut_longest_first_not_from_the_left(void **state) {
    const char *pieces[] = {"a", "b", "c", "d", "ab", "bcd"};
    for (int kind = CONTROL; kind <= USER; kind++) {
        int32_t types[] = {NORMAL, NORMAL, NORMAL, NORMAL, kind, kind};
        Tokenizer *t = hand_made(pieces, types, 6);
        int ids[8];
        assert_int_equal(marked(t, "abcd", 4, NULL, ids), 2);
        expect_ids("abcd", ids, 2, (const int[]){0, 5}, 2);
        /* "ab" where "bcd" is not there */
        assert_int_equal(marked(t, "abab", 4, NULL, ids), 2);
        expect_ids("abab", ids, 2, (const int[]){4, 4}, 2);
        tok_free(t);
    }
    const char *ab_first[] = {"a", "b", "c", "ab", "bc"}, *bc_first[] = {"a", "b", "c", "bc", "ab"};
    int32_t types[] = {NORMAL, NORMAL, NORMAL, CONTROL, CONTROL};
    Tokenizer *t = hand_made(ab_first, types, 5);
    int ids[8];
    assert_int_equal(marked(t, "abc", 3, NULL, ids), 2);
    expect_ids("ab first", ids, 2, (const int[]){3, 2}, 2);
    tok_free(t);
    t = hand_made(bc_first, types, 5);
    assert_int_equal(marked(t, "abc", 3, NULL, ids), 2);
    expect_ids("bc first", ids, 2, (const int[]){0, 3}, 2);
    tok_free(t);
}

/* A control text stands for its token only where none of its bytes is
 * plain; a user-defined one everywhere. A control text that a plain byte
 * spoils leaves its bytes to shorter special texts inside it. */
static void a_control_text_counts_only_where_no_byte_is_plain(void **state) {
    const char *pieces[] = {"<", ">", "c", "u", "<c>", "<u>", "c>"};
    int32_t types[] = {NORMAL, NORMAL, NORMAL, NORMAL, CONTROL, USER, CONTROL};
    Tokenizer *t = hand_made(pieces, types, 7);
    int ids[8];
    const unsigned char none[6] = {0}, all[6] = {1, 1, 1, 1, 1, 1}, first[6] = {1, 0, 0, 0, 0, 0};
    assert_int_equal(marked(t, "<c><u>", 6, none, ids), 2);
    expect_ids("none plain", ids, 2, (const int[]){4, 5}, 2);
    assert_int_equal(marked(t, "<c><u>", 6, all, ids), 4);
    expect_ids("all plain", ids, 4, (const int[]){0, 2, 1, 5}, 4);
    assert_int_equal(marked(t, "<c><u>", 6, first, ids), 3);
    expect_ids("'<' plain", ids, 3, (const int[]){0, 6, 5}, 3);
    tok_free(t);
}

/* ---- sentencepiece ------------------------------------------------------------------ */

/* Sentencepiece puts a space in front of the text; llama.cpp, in front of
 * every stretch of text between special tokens. Llama 2's "</s>" in
 * "Hello</s>world" is EOS, and each side is encoded as a text of its own;
 * all plain, the text encodes as tok_encode encodes it. */
static void sentencepiece_puts_its_space_in_front_of_every_stretch(void **state) {
    Tokenizer *t = load_gguf("tokenizers/llama-spm.gguf");
    const char *text = "Hello</s>world";
    size_t n = strlen(text);
    int want[64], n_want = 0, part[32];
    Err e;
    want[n_want++] = tok_bos(t);
    int k = tok_encode(t, "Hello", 0, part, 32, &e);
    for (int i = 0; i < k; i++) want[n_want++] = part[i];
    want[n_want++] = 2;
    k = tok_encode(t, "world", 0, part, 32, &e);
    for (int i = 0; i < k; i++) want[n_want++] = part[i];
    int ids[64];
    int n_got = marked(t, text, n, NULL, ids);
    expect_ids("nothing plain", ids, n_got, want, n_want);

    unsigned char plain[32];
    memset(plain, 1, n);
    n_want = tok_encode(t, text, 1, want, 64, &e);
    n_got = marked(t, text, n, plain, ids);
    expect_ids("all plain", ids, n_got, want, n_want);
    tok_free(t);
}

/* The text may hold any bytes, a NUL too; an empty one is BOS alone where
 * the vocabulary adds it, nothing where it does not. */
static void any_bytes_encode_and_an_empty_text_is_bos_alone(void **state) {
    Tokenizer *t = load_gguf("chat/qwen2.5/model.gguf");
    int ids[8], nul[8];
    Err e;
    assert_int_equal(marked(t, "a\0<|im_end|>", 12, NULL, ids), 3);
    assert_int_equal(tok_encode_marked(t, "\0", 1, NULL, 0, nul, 8, &e), 1);
    expect_ids("a NUL <|im_end|>", ids, 3, (const int[]){64, nul[0], 151645}, 3);
    assert_int_equal(marked(t, "", 0, NULL, ids), 0);
    tok_free(t);
    t = load_gguf("chat/llama3/model.gguf");
    assert_int_equal(marked(t, "", 0, NULL, ids), 1);
    assert_int_equal(ids[0], 128000);
    tok_free(t);
}

/* ---- pieces, and failures ------------------------------------------------------------- */

/* tok_piece gives a token's bytes as the vocabulary has them, control tokens
 * and byte tokens included, and says how long a piece is that did not fit. */
static void pieces_come_back_as_the_vocabulary_spells_them(void **state) {
    Tokenizer *t = load_gguf("chat/llama3/model.gguf");
    char out[64];
    assert_int_equal(tok_piece(t, 128009, out, sizeof out), 10);
    assert_string_equal(out, "<|eot_id|>");
    assert_int_equal(tok_piece(t, 128009, out, 4), 10);   /* cut to fit, NUL-terminated */
    assert_string_equal(out, "<|e");
    int ids[8];
    Err e;
    assert_int_equal(tok_encode(t, " Hello", 0, ids, 8, &e), 1);
    assert_int_equal(tok_piece(t, ids[0], out, sizeof out), 6);
    assert_string_equal(out, " Hello");
    assert_int_equal(tok_piece(t, -1, out, sizeof out), -1);
    assert_int_equal(tok_piece(t, tok_n_vocab(t), out, sizeof out), -1);
    tok_free(t);

    t = load_gguf("tokenizers/llama-spm.gguf");
    assert_int_equal(tok_piece(t, 3 + 0x41, out, sizeof out), 1);   /* <0x41> */
    assert_string_equal(out, "A");
    assert_int_equal(tok_piece(t, 1, out, sizeof out), 3);
    assert_string_equal(out, "<s>");
    tok_free(t);
}

/* Failing each allocation of an encoding returns ST_NOMEM and leaks nothing. */
static void marked_encoding_fails_cleanly_when_memory_runs_out(void **state) {
    Tokenizer *t = load_gguf("chat/qwen2.5/model.gguf");
    const char *text = "<|im_start|>user\nHi [PAD151646]!<|im_end|>\n";
    size_t n = strlen(text);
    unsigned char plain[64] = {0};
    memset(plain + 17, 1, 16);
    size_t live = mem_stats().live_count;
    int ids[64], i = 1;
    for (;; i++) {
        Err e;
        mem_fail_after(i);
        int k = tok_encode_marked(t, text, n, plain, 1, ids, 64, &e);
        mem_fail_after(0);
        assert_int_equal(mem_stats().live_count, live);
        if (k >= 0) break;
        assert_int_equal(k, ST_NOMEM);
    }
    assert_true(i > 1);
    tok_free(t);
}

int main(int argc, char **argv) {
    select_tests(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(prompts_encode_as_llama_cpp_reads_them_with_special_texts_parsed),
        cmocka_unit_test(message_contents_marked_plain_stay_text_and_the_markup_stays_tokens),
        cmocka_unit_test(eog_ids_are_llama_cpps),
        cmocka_unit_test(qwen_reads_its_ordinary_slash_s_piece_as_a_control_token),
        cmocka_unit_test(user_defined_text_is_a_token_even_in_plain_text_control_text_is_not),
        cmocka_unit_test(special_texts_are_cut_longest_first_not_from_the_left),
        cmocka_unit_test(a_control_text_counts_only_where_no_byte_is_plain),
        cmocka_unit_test(sentencepiece_puts_its_space_in_front_of_every_stretch),
        cmocka_unit_test(any_bytes_encode_and_an_empty_text_is_bos_alone),
        cmocka_unit_test(pieces_come_back_as_the_vocabulary_spells_them),
        cmocka_unit_test(marked_encoding_fails_cleanly_when_memory_runs_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
