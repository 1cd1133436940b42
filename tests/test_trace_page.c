/* test_trace_page.c - the page of --trace-html holds what the engine did.
 *
 * The test drives the engine through data/workload-preempt.jsonl on the step
 * clock with a page being written, and after every step draws the KV pool
 * itself from the engine (engine_kv_view, then trace_kv_map and
 * trace_block_tables, as the text trace would). Then it reads the page's
 * records back with cJSON, not with the writer's code, and checks that every
 * step's map, block tables and token counts are the ones it drew, that each
 * request arrived and finished once, that every token and preemption is
 * there, and that the same run gives the same bytes. The viewer in a real
 * browser is tests/browser.sh's. */
#include "base/mem.h"
#include "runtime.h"
#include "testutil.h"
#include "trace/trace.h"
#include "front/workload.h"
#include <cjson/cJSON.h>

static Model M;

static int setup(void **state) {
    Err e = {{0}};
    if (model_load(&M, "data/shakespeare.gguf", NULL, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    model_free(&M);
    return 0;
}

enum { MAXSTEPS = 512, PICTURE = 4096 };

/* What the engine's pool looked like after each step, drawn by the test. */
typedef struct {
    long n_steps;
    char map[MAXSTEPS][PICTURE], tables[MAXSTEPS][PICTURE];
    int preemptions, tokens, requests;
} Seen;

/* The preempting example, traced into a page (and nothing else); its bytes
 * in *page. seen: what the test drew after each step (may be NULL). */
static void run_page(char **page, size_t *page_n, Seen *seen) {
    Err e = {{0}};
    Workload w;
    assert_int_equal(workload_load(&w, "data/workload-preempt.jsonl", &e), ST_OK);
    EngineConfig c = engine_config_default();   /* what the file's header says */
    c.clock = CLOCK_STEPS;
    c.sched.policy = SCHED_PRIORITY;
    c.n_blocks = 10;
    c.sched.max_seqs = 4;
    Runtime rt;
    assert_int_equal(rt_init(&rt, &M, &c, &e), ST_OK);
    FILE *f = open_memstream(page, page_n);
    Trace t;
    assert_int_equal(trace_init(&t, TRACE_OFF, NULL, NULL, 0, 1, &e), ST_OK);
    assert_int_equal(rt_set_trace(&rt, &t, &e), ST_OK);
    EngineStats es = rt_stats(&rt).engine;
    TracePageInfo info = {.title = "test <run> & more", .n_blocks = es.kv.n_blocks,
                          .block_size = es.kv.block_size, .max_seqs = es.sched.max_seqs,
                          .cap_blocks = es.cap_blocks, .token_budget = es.sched.token_budget};
    assert_int_equal(trace_page_begin(&t, f, &info, &e), ST_OK);
    int next = 0;
    while (next < w.n || !rt_idle(&rt)) {
        while (next < w.n && w.items[next].arrival_ms <= rt_now(&rt) * 1e3) {
            int id = rt_submit(&rt, &w.items[next].params, &e);
            assert_int_equal(id, next);
            trace_page_prompt(&t, id, w.items[next].params.prompt);
            next++;
        }
        if (rt_idle(&rt)) {
            rt_wait_until(&rt, w.items[next].arrival_ms * 1e-3);
            continue;
        }
        const StepReport *rep = rt_step(&rt);
        if (!seen) continue;
        assert_true(rep->step <= MAXSTEPS);
        KvView v = engine_kv_view(&rt.en);
        assert_true(trace_kv_map(&v, seen->map[rep->step - 1], PICTURE) < PICTURE - 1);
        assert_true(trace_block_tables(&v, seen->tables[rep->step - 1], PICTURE) < PICTURE - 1);
        seen->n_steps = rep->step;
        seen->preemptions += rep->plan->n_preempted;
    }
    trace_finish(&t);
    if (seen) {
        seen->requests = w.n;
        for (int i = 0; i < w.n; i++) seen->tokens += rt_sequence(&rt, i)->n_out;
    }
    TraceMemory m = {.kv_blocks = es.kv.n_blocks};
    assert_int_equal(trace_page_end(&t, &m, "closing line\n", &e), ST_OK);
    assert_int_equal(rt.en.step_allocations, 0);   /* the page allocates nothing inside steps */
    fclose(f);
    trace_free(&t);
    rt_free(&rt);
    workload_free(&w);
}

/* The JSON inside <script type="application/json" id="ID">...</script>. */
static cJSON *script_json(const char *page, const char *id) {
    char open[64];
    snprintf(open, sizeof open, "<script type=\"application/json\" id=\"%s\">", id);
    const char *a = strstr(page, open);
    if (!a) fail_msg("the page has no script %s", id);
    a += strlen(open);
    const char *b = strstr(a, "</script>");
    assert_non_null(b);
    char *text = strndup(a, (size_t)(b - a));
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) fail_msg("script %s is not JSON", id);
    return j;
}

static int item_int(const cJSON *rec, int i) {
    const cJSON *v = cJSON_GetArrayItem(rec, i);
    if (!cJSON_IsNumber(v)) fail_msg("record element %d is not a number", i);
    return v->valueint;
}

/* The page's map "01+{5}1" back to one character per block. */
static void expand(const char *rle, char *out, int cap) {
    int n = 0;
    for (const char *s = rle; *s; s++) {
        int run = 1;
        if (s[1] == '{') {
            run = atoi(s + 2);
            const char *close = strchr(s, '}');
            assert_non_null(close);
            for (int k = 0; k < run && n < cap - 1; k++) out[n++] = *s;
            s = close;
            continue;
        }
        if (n < cap - 1) out[n++] = *s;
    }
    out[n] = 0;
}

/* The map's characters from trace_kv_map's text (its rows, numbers dropped). */
static void map_chars(const char *text, char *out, int cap) {
    int n = 0;
    const char *s = strchr(text, '\n');
    while (s && *++s) {
        while (*s == ' ') s++;
        while (*s >= '0' && *s <= '9') s++;
        s++;
        while (*s && *s != '\n' && n < cap - 1) out[n++] = *s++;
        if (!*s) break;
    }
    out[n] = 0;
}

/* trace_block_tables's text as the page writes it: [[id,slot,b,...],...] and [n_tokens,...]. */
static void tables_json(const char *text, char *tables, char *ntok, int cap) {
    int nt = snprintf(tables, (size_t)cap, "["), nn = snprintf(ntok, (size_t)cap, "[");
    for (const char *s = text; *s;) {
        int id, slot, tokens, at = 0;
        assert_int_equal(sscanf(s, " #%d slot %d, %d tokens in blocks [%n", &id, &slot, &tokens, &at), 3);
        nt += snprintf(tables + nt, (size_t)(cap - nt), "%s[%d,%d", nt > 1 ? "," : "", id, slot);
        nn += snprintf(ntok + nn, (size_t)(cap - nn), "%s%d", nn > 1 ? "," : "", tokens);
        for (s += at; *s != ']';) {
            char *after;
            long b = strtol(s, &after, 10);
            nt += snprintf(tables + nt, (size_t)(cap - nt), ",%ld", b);
            s = after + (*after == '*');
            if (*s == ' ') s++;
        }
        s += 2;
        nt += snprintf(tables + nt, (size_t)(cap - nt), "]");
    }
    snprintf(tables + nt, (size_t)(cap - nt), "]");
    snprintf(ntok + nn, (size_t)(cap - nn), "]");
}

static void page_holds_every_step_s_kv_pool_as_the_engine_drew_it(void **state) {
    static Seen seen;
    memset(&seen, 0, sizeof seen);
    char *page = NULL;
    size_t page_n = 0;
    run_page(&page, &page_n, &seen);
    assert_true(seen.n_steps > 40 && seen.preemptions > 0);
    cJSON *recs = script_json(page, "trace-events");
    assert_true(cJSON_IsArray(recs));
    long steps = 0;
    int arrived[16] = {0}, finished[16] = {0}, tokens = 0, preempted = 0, kv_written = 0;
    char map[PICTURE] = "", tables[PICTURE] = "";
    const cJSON *rec;
    cJSON_ArrayForEach(rec, recs) {
        const char *kind = cJSON_GetArrayItem(rec, 0)->valuestring;
        if (!strcmp(kind, "A")) arrived[item_int(rec, 1)]++;
        else if (!strcmp(kind, "X")) finished[item_int(rec, 1)]++;
        else if (!strcmp(kind, "T")) tokens++;
        else if (!strcmp(kind, "P")) preempted++;
        if (strcmp(kind, "S")) continue;
        assert_int_equal(cJSON_GetArraySize(rec), 20);
        assert_int_equal(item_int(rec, 1), ++steps);
        const cJSON *kv = cJSON_GetArrayItem(rec, 18);
        if (cJSON_IsArray(kv)) {   /* else: the same as the last step that wrote one */
            kv_written++;
            expand(cJSON_GetArrayItem(kv, 0)->valuestring, map, sizeof map);
            char *t = cJSON_PrintUnformatted(cJSON_GetArrayItem(kv, 1));
            snprintf(tables, sizeof tables, "%s", t);
            cJSON_free(t);
        } else {
            assert_true(cJSON_IsNumber(kv) && kv->valueint == 0 && steps > 1);
        }
        char want_map[PICTURE], want_tables[PICTURE], want_ntok[PICTURE];
        map_chars(seen.map[steps - 1], want_map, sizeof want_map);
        tables_json(seen.tables[steps - 1], want_tables, want_ntok, sizeof want_tables);
        if (strcmp(map, want_map)) fail_msg("step %ld: the page's map %s, the engine's %s", steps, map, want_map);
        if (strcmp(tables, want_tables))
            fail_msg("step %ld: the page's block tables %s, the engine's %s", steps, tables, want_tables);
        char *ntok = cJSON_PrintUnformatted(cJSON_GetArrayItem(rec, 19));
        if (strcmp(ntok, want_ntok))
            fail_msg("step %ld: the page's tokens %s, the engine's %s", steps, ntok, want_ntok);
        cJSON_free(ntok);
        assert_true(cJSON_IsNumber(cJSON_GetArrayItem(rec, 17)));   /* no stage times on the step clock */
    }
    assert_int_equal(steps, seen.n_steps);
    assert_true(kv_written > 1 && kv_written < steps);   /* written when it changed, not every step */
    for (int i = 0; i < seen.requests; i++) {
        assert_int_equal(arrived[i], 1);
        assert_int_equal(finished[i], 1);
    }
    assert_int_equal(tokens, seen.tokens);
    assert_int_equal(preempted, seen.preemptions);
    cJSON_Delete(recs);
    cJSON *end = script_json(page, "trace-end");
    assert_string_equal(cJSON_GetObjectItem(end, "closing")->valuestring, "closing line\n");
    assert_string_equal(cJSON_GetObjectItem(end, "problem")->valuestring, "");
    assert_non_null(strstr(cJSON_GetObjectItem(end, "memory")->valuestring, "KV pool"));
    cJSON_Delete(end);
    /* self-contained: nothing to fetch, and one whole document */
    assert_null(strstr(page, "src="));
    assert_null(strstr(page, "href="));
    assert_null(strstr(page, "http"));
    assert_non_null(strstr(page, "<title>test &lt;run&gt; &amp; more</title>"));
    assert_int_equal(strncmp(page, "<!DOCTYPE html>", 15), 0);
    assert_non_null(strstr(page + page_n - 20, "</html>"));
    free(page);
}

static void page_of_the_same_run_on_the_step_clock_is_the_same_bytes(void **state) {
    char *a = NULL, *b = NULL;
    size_t an = 0, bn = 0;
    run_page(&a, &an, NULL);
    run_page(&b, &bn, NULL);
    assert_int_equal(an, bn);
    assert_int_equal(memcmp(a, b, an), 0);
    free(a);
    free(b);
}

/* No text reaches the page as markup: a prompt that closes the script, and a
 * token's raw bytes, come back as they went in. */
static void page_strings_cannot_end_their_script(void **state) {
    Err e = {{0}};
    char *page = NULL;
    size_t page_n = 0;
    FILE *f = open_memstream(&page, &page_n);
    Trace t;
    assert_int_equal(trace_init(&t, TRACE_OFF, NULL, NULL, 0, 1, &e), ST_OK);
    TracePageInfo info = {.title = "t", .n_blocks = 4, .block_size = 16, .max_seqs = 2, .cap_blocks = 4};
    assert_int_equal(trace_page_begin(&t, f, &info, &e), ST_OK);
    const char *evil = "</script><script>alert(1)</script>\"\\\n";
    TraceArrival a = {.id = 0, .prompt_tokens = 3, .max_tokens = 4, .priority = "normal"};
    assert_int_equal(trace_arrived(&t, 0, &a), ST_OK);
    trace_page_prompt(&t, 0, evil);
    const char bytes[] = {'<', '/', (char)0xe2, (char)0x82};   /* a euro sign's first two bytes */
    trace_token(&t, 0.001, 0, 7, bytes, 4, 1, 3);
    TraceMemory m = {0};
    assert_int_equal(trace_page_end(&t, &m, "", &e), ST_OK);
    fclose(f);
    assert_null(strstr(page, "<script>alert"));
    cJSON *recs = script_json(page, "trace-events");
    const cJSON *q = cJSON_GetArrayItem(recs, 1), *tok = cJSON_GetArrayItem(recs, 2);
    assert_string_equal(cJSON_GetArrayItem(q, 0)->valuestring, "Q");
    assert_string_equal(cJSON_GetArrayItem(q, 2)->valuestring, evil);
    /* the bytes from 0x80 up as \u00XX each: U+00E2 U+0082 in cJSON's UTF-8 */
    assert_string_equal(cJSON_GetArrayItem(tok, 3)->valuestring, "</\xc3\xa2\xc2\x82");
    cJSON_Delete(recs);
    free(page);
    trace_free(&t);
}

/* A KV picture the page cannot keep is an error at the end, naming the
 * step, not a page that shows less than the run did. */
static void page_says_which_step_it_could_not_keep(void **state) {
    Err e = {{0}};
    char *page = NULL;
    size_t page_n = 0;
    FILE *f = open_memstream(&page, &page_n);
    Trace t;
    assert_int_equal(trace_init(&t, TRACE_OFF, NULL, NULL, 0, 1, &e), ST_OK);
    TracePageInfo info = {.title = "t", .n_blocks = 4, .block_size = 16, .max_seqs = 1, .cap_blocks = 2};
    assert_int_equal(trace_page_begin(&t, f, &info, &e), ST_OK);
    assert_true(trace_wants_kv_map(&t, 1, 0) && trace_wants_block_tables(&t));
    /* a pool of 5 blocks, where the page was told 4 */
    int refcount[5] = {1, 0, 0, 0, 0}, table[1] = {0};
    unsigned char registered[5] = {0};
    KvViewSeq seq = {.id = 0, .slot = 0, .n_tokens = 3, .n_blocks = 1, .table = table};
    KvView v = {.n_blocks = 5, .block_size = 16, .refcount = refcount, .registered = registered,
                .n_seqs = 1, .seqs = &seq};
    char map[256], tables[256];
    trace_kv_map(&v, map, sizeof map);
    trace_block_tables(&v, tables, sizeof tables);
    TraceStep s = {.step = 1, .end = 0.001, .seqs = 1, .kv_map = map, .block_tables = tables};
    trace_step_done(&t, &s);
    TraceMemory m = {0};
    assert_int_equal(trace_page_end(&t, &m, "", &e), ST_FORMAT);
    assert_non_null(strstr(e.msg, "step 1"));
    assert_non_null(strstr(e.msg, "4 blocks"));
    fclose(f);
    cJSON *end = script_json(page, "trace-end");   /* and the page itself says so */
    assert_non_null(strstr(cJSON_GetObjectItem(end, "problem")->valuestring, "step 1"));
    cJSON_Delete(end);
    free(page);
    trace_free(&t);
}

int main(int argc, char **argv) {
    select_tests(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(page_holds_every_step_s_kv_pool_as_the_engine_drew_it),
        cmocka_unit_test(page_of_the_same_run_on_the_step_clock_is_the_same_bytes),
        cmocka_unit_test(page_strings_cannot_end_their_script),
        cmocka_unit_test(page_says_which_step_it_could_not_keep),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
