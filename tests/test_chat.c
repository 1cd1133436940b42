/* test_chat.c - a chat request's way to the model's ids, end to end on real
 * vocabularies and templates, against llama.cpp.
 *
 * ../shared/fixtures/chat/{llama3,qwen2.5}: a model file carrying Llama 3's
 * (Qwen2.5's) vocabulary and its real chat template, nine conversations,
 * and what llama.cpp's server made of each (expected.jsonl): the prompt
 * /apply-template returned, the ids it fed the model (ids_parse_special),
 * and the ids an engine that keeps message contents as text feeds it
 * (ids_safe, where a user typed the template's markup). Here the server's
 * own path runs: the body through srv_chat_prompt (the model's
 * tokenizer.chat_template in the Jinja interpreter, the users' bytes
 * marked), then tok_encode_marked, as a chat request's prompt is tokenized
 * in the runtime. */
#include "testutil.h"
#include "front/chat.h"
#include "load/gguf.h"
#include "text/tokenizer.h"
#include <cjson/cJSON.h>

static const time_t JULY_26_2024 = 1721952000;

typedef struct {
    Gguf g;
    Tokenizer *tok;
    SrvChat chat;
} Case;

/* The model's vocabulary and chat as serve sets them up (serve.c, model_chat). */
static int open_case(Case *c, const char *dir) {
    char rel[128], path[512];
    snprintf(rel, sizeof rel, "chat/%s/model.gguf", dir);
    if (!fixture(path, sizeof path, rel)) return 0;
    Err e = {{0}};
    assert_int_equal(gguf_open(&c->g, path, &e), ST_OK);
    assert_int_equal(tok_from_gguf(&c->tok, &c->g, &e), ST_OK);
    GgufStr src;
    assert_int_equal(gguf_get_str(&c->g, "tokenizer.chat_template", &src, &e), ST_OK);
    char bos[256] = "", eos[256] = "";
    if (tok_bos(c->tok) >= 0) tok_piece(c->tok, tok_bos(c->tok), bos, sizeof bos);
    tok_piece(c->tok, tok_eos(c->tok), eos, sizeof eos);
    int ids[4];
    int adds_bos = tok_bos(c->tok) >= 0 && tok_encode(c->tok, "", 1, ids, 4, &e) >= 1 && ids[0] == tok_bos(c->tok);
    assert_int_equal(srv_chat_init(&c->chat, src.s, (size_t)src.len, "model", "tokenizer.chat_template", bos, eos,
                                   adds_bos, &e), ST_OK);
    return 1;
}

static void close_case(Case *c) {
    srv_chat_free(&c->chat);
    tok_free(c->tok);
    gguf_close(&c->g);
}

static int ids_equal(const int *got, int n, const cJSON *want, const char *what, const char *name) {
    int m = cJSON_GetArraySize(want);
    int k = 0;
    for (; k < n && k < m; k++)
        if (got[k] != cJSON_GetArrayItem(want, k)->valueint) break;
    if (k == n && n == m) return 1;
    print_message("  %s: %s differ at id %d (%d ids, want %d): got %d, want %d\n", name, what, k, n, m,
                  k < n ? got[k] : -1, k < m ? cJSON_GetArrayItem(want, k)->valueint : -1);
    return 0;
}

static void one_case(const char *dir) {
    Case c;
    if (!open_case(&c, dir)) return;
    char rel[128], path[512];
    snprintf(rel, sizeof rel, "chat/%s/conversations.json", dir);
    assert_non_null(fixture(path, sizeof path, rel));
    size_t n;
    char *text = read_file(path, &n);
    assert_non_null(text);
    cJSON *convs = cJSON_Parse(text);
    free(text);
    snprintf(rel, sizeof rel, "chat/%s/expected.jsonl", dir);
    assert_non_null(fixture(path, sizeof path, rel));
    text = read_file(path, &n);
    assert_non_null(text);
    int bad = 0, lines = 0, safe_cases = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *want = cJSON_Parse(line);
        assert_non_null(want);
        const char *name = cJSON_GetObjectItem(want, "name")->valuestring;
        const cJSON *conv = NULL, *x;
        cJSON_ArrayForEach(x, convs) if (!strcmp(cJSON_GetObjectItem(x, "name")->valuestring, name)) conv = x;
        assert_non_null(conv);
        /* the request's body: its messages and chat_template_kwargs */
        cJSON *body = cJSON_CreateObject();
        cJSON_AddItemToObject(body, "messages", cJSON_Duplicate(cJSON_GetObjectItem(conv, "messages"), 1));
        const cJSON *kw = cJSON_GetObjectItem(conv, "chat_template_kwargs");
        if (kw) cJSON_AddItemToObject(body, "chat_template_kwargs", cJSON_Duplicate(kw, 1));
        SrvPrompt p;
        int status;
        char param[48];
        Err e = {{0}};
        if (srv_chat_prompt(&c.chat, body, JULY_26_2024, 1 << 20, &p, &status, param, sizeof param, &e)) {
            print_message("  %s/%s: refused (%d): %s\n", dir, name, status, e.msg);
            bad++;
        } else {
            const char *prompt = cJSON_GetObjectItem(want, "prompt")->valuestring;
            if (p.len != strlen(prompt) || memcmp(p.text, prompt, p.len)) {
                print_message("  %s/%s: the prompt differs from llama.cpp's /apply-template\n", dir, name);
                bad++;
            }
            int cap = (int)p.len + 3;
            int *ids = malloc((size_t)cap * sizeof *ids);
            assert_non_null(ids);
            /* what the server feeds the model: the users' bytes never special */
            const cJSON *safe = cJSON_GetObjectItem(want, "ids_safe");
            const cJSON *all = cJSON_GetObjectItem(want, "ids_parse_special");
            int k = tok_encode_marked(c.tok, p.text, p.len, p.plain, 1, ids, cap, &e);
            assert_true(k > 0);
            if (!ids_equal(ids, k, safe ? safe : all, safe ? "ids_safe" : "ids_parse_special", name)) bad++;
            safe_cases += safe != NULL;
            /* and without the marks, llama.cpp's own reading (its /tokenize with parse_special) */
            k = tok_encode_marked(c.tok, p.text, p.len, NULL, 1, ids, cap, &e);
            if (!ids_equal(ids, k, all, "ids_parse_special (no marks)", name)) bad++;
            free(ids);
            srv_prompt_free(&p);
        }
        cJSON_Delete(body);
        cJSON_Delete(want);
        lines++;
    }
    free(text);
    cJSON_Delete(convs);
    close_case(&c);
    print_message("  %s: %d conversations, %d with injected markup, %d differ\n", dir, lines, safe_cases, bad);
    assert_int_equal(lines, 9);
    assert_int_equal(safe_cases, 2);
    assert_int_equal(bad, 0);
}

static void llama3_chats_reach_the_model_as_llama_cpp_with_user_text_kept_text(void **st) { one_case("llama3"); }
static void qwen25_chats_reach_the_model_as_llama_cpp_with_user_text_kept_text(void **st) { one_case("qwen2.5"); }

int main(int argc, char **argv) {
    select_tests(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(llama3_chats_reach_the_model_as_llama_cpp_with_user_text_kept_text),
        cmocka_unit_test(qwen25_chats_reach_the_model_as_llama_cpp_with_user_text_kept_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
