/* test_jinja.c - the chat-template interpreter (src/chat/) against Python's
 * jinja2: the 45 real templates of ../shared/fixtures/chat/templates, each
 * rendered on 15 conversations (765 renders) byte for byte as jinja2 run the
 * way Hugging Face runs it, or failing where it fails (with the template's
 * own message where it raised); then the rules a small interpreter most
 * easily gets wrong, one test each, checked against what jinja2 3.1 prints
 * (written out in each test). */
#include "testutil.h"
#include "chat/jinja.h"
#include <cjson/cJSON.h>
#include <dirent.h>

static const time_t JULY_26_2024 = 1721952000;   /* 2024-07-26 00:00:00 UTC: the fixtures' strftime_now */
static long steps_limit;                          /* 0: the default */

/* Render src over vars (JSON object text: each key a variable; strings in
 * "messages" plain); returns the status and fills out or e. */
static int render(const char *src, const char *vars_json, JOutput *out, Err *e) {
    JTemplate *t;
    int st = jinja_parse(src, strlen(src), &t, e);
    if (st) return st;
    JVars *v = jinja_vars_new();
    cJSON *j = cJSON_Parse(vars_json);
    assert_non_null(v);
    assert_non_null(j);
    for (cJSON *c = j->child; c; c = c->next) assert_int_equal(jinja_vars_set_cjson(v, c->string, c, !strcmp(c->string, "messages"), e), ST_OK);
    JLimits lim = {.now = JULY_26_2024, .max_steps = steps_limit};
    st = jinja_render(t, v, &lim, out, e);
    cJSON_Delete(j);
    jinja_vars_free(v);
    jinja_free(t);
    return st;
}

/* src over vars must print want. */
static void check(const char *src, const char *vars_json, const char *want) {
    JOutput o;
    Err e = {{0}};
    int st = render(src, vars_json, &o, &e);
    if (st) {
        print_error("template %s: failed: %s\n", src, e.msg);
        fail();
    }
    if (strcmp(o.text, want)) {
        print_error("template %s\n printed [%s]\n  wanted [%s]\n", src, o.text, want);
        jinja_output_free(&o);
        fail();
    }
    jinja_output_free(&o);
}

/* src over vars must fail, with a message holding want. */
static void check_fails(const char *src, const char *vars_json, const char *want) {
    JOutput o;
    Err e = {{0}};
    int st = render(src, vars_json, &o, &e);
    if (st == ST_OK) {
        print_error("template %s printed [%s]; a failure was wanted\n", src, o.text);
        jinja_output_free(&o);
        fail();
    }
    if (!strstr(e.msg, want)) {
        print_error("template %s failed with [%s], wanted a message holding [%s]\n", src, e.msg, want);
        fail();
    }
}

/* ---- the real templates ---- */

static char *slurp(const char *path, size_t *n) {
    char *s = read_file(path, n);
    if (!s) {
        print_error("cannot read %s\n", path);
        fail();
    }
    return s;
}

/* One render of a template: the variables as HF passes them (tools and
 * documents None, unless tools_undefined), compared with what jinja2 did. */
static int one_render(const char *name, const JTemplate *t, const cJSON *conv, const char *bos,
                      const char *eos, int add_gen, int tools_undefined, const cJSON *want) {
    Err e = {{0}};
    JVars *v = jinja_vars_new();
    assert_non_null(v);
    assert_int_equal(jinja_vars_set_cjson(v, "messages", cJSON_GetObjectItem(conv, "messages"), 1, &e), ST_OK);
    if (!tools_undefined) {
        assert_int_equal(jinja_vars_set_json(v, "tools", "null", 1, &e), ST_OK);
        assert_int_equal(jinja_vars_set_json(v, "documents", "null", 1, &e), ST_OK);
    }
    assert_int_equal(jinja_vars_set_bool(v, "add_generation_prompt", add_gen, &e), ST_OK);
    assert_int_equal(jinja_vars_set_str(v, "bos_token", bos, 0, &e), ST_OK);
    assert_int_equal(jinja_vars_set_str(v, "eos_token", eos, 0, &e), ST_OK);
    const cJSON *kw = cJSON_GetObjectItem(conv, "chat_template_kwargs");
    for (const cJSON *k = kw ? kw->child : NULL; k; k = k->next)
        assert_int_equal(jinja_vars_set_cjson(v, k->string, k, 1, &e), ST_OK);
    JLimits lim = {.now = JULY_26_2024};
    JOutput o;
    int st = jinja_render(t, v, &lim, &o, &e);
    jinja_vars_free(v);
    const char *conv_name = cJSON_GetObjectItem(conv, "name")->valuestring;
    const cJSON *out = cJSON_GetObjectItem(want, "output"), *err = cJSON_GetObjectItem(want, "error");
    const cJSON *kind = cJSON_GetObjectItem(want, "error_kind");
    int ok = 1;
    if (out) {
        if (st) {
            print_message("  %s / %s (add_generation_prompt %d): failed: %s\n", name, conv_name, add_gen, e.msg);
            ok = 0;
        } else if (o.len != strlen(out->valuestring) || memcmp(o.text, out->valuestring, o.len)) {
            size_t at = 0;
            while (at < o.len && o.text[at] == out->valuestring[at]) at++;
            print_message("  %s / %s (add_generation_prompt %d): differs at byte %zu: [%.60s] against [%.60s]\n", name,
                          conv_name, add_gen, at, o.text + at, out->valuestring + at);
            ok = 0;
        }
    } else if (st == ST_OK) {
        print_message("  %s / %s: printed, where jinja2 failed with %s\n", name, conv_name, err->valuestring);
        ok = 0;
    } else if (!strcmp(kind->valuestring, "raise_exception") && (!o.raised || strcmp(e.msg, err->valuestring))) {
        print_message("  %s / %s: failed with [%s] (raised %d), jinja2 raised [%s]\n", name, conv_name, e.msg,
                      o.raised, err->valuestring);
        ok = 0;
    }
    if (st == ST_OK) jinja_output_free(&o);
    return ok;
}

static void every_real_template_renders_every_conversation_as_jinja2_does(void **state) {
    char dir[512], path[1024];
    if (!fixture(dir, sizeof dir, "chat/templates/conversations.json")) return;
    size_t n;
    char *cj = slurp(dir, &n);
    cJSON *convs = cJSON_Parse(cj);
    free(cj);
    assert_non_null(convs);
    *strrchr(dir, '/') = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    int templates = 0, renders = 0, bad = 0, bad_templates = 0;
    struct dirent *ent;
    while ((ent = readdir(d))) {
        size_t len = strlen(ent->d_name);
        if (len < 6 || strcmp(ent->d_name + len - 6, ".jinja")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
        size_t src_n;
        char *src = slurp(path, &src_n);
        snprintf(path, sizeof path, "%s/%.*s.expected.json", dir, (int)(len - 6), ent->d_name);
        char *ej = slurp(path, &n);
        cJSON *exp = cJSON_Parse(ej);
        free(ej);
        assert_non_null(exp);
        JTemplate *t;
        Err e = {{0}};
        templates++;
        if (jinja_parse(src, src_n, &t, &e)) {
            print_message("  %s: does not parse: %s\n", ent->d_name, e.msg);
            bad_templates++;
            bad += cJSON_GetArraySize(cJSON_GetObjectItem(exp, "renders"));
            cJSON_Delete(exp);
            free(src);
            continue;
        }
        const char *bos = cJSON_GetObjectItem(exp, "bos_token")->valuestring;
        const char *eos = cJSON_GetObjectItem(exp, "eos_token")->valuestring;
        int bad_before = bad;
        const cJSON *r;
        cJSON_ArrayForEach(r, cJSON_GetObjectItem(exp, "renders")) {
            const char *cname = cJSON_GetObjectItem(r, "conversation")->valuestring;
            const cJSON *conv = NULL, *c;
            cJSON_ArrayForEach(c, convs) if (!strcmp(cJSON_GetObjectItem(c, "name")->valuestring, cname)) conv = c;
            assert_non_null(conv);
            int add_gen = cJSON_IsTrue(cJSON_GetObjectItem(r, "add_generation_prompt"));
            renders++;
            if (!one_render(ent->d_name, t, conv, bos, eos, add_gen, 0, r)) bad++;
            /* the same with tools and documents undefined (llama.cpp's way), where that differs */
            const cJSON *undef = cJSON_GetObjectItem(r, "if_tools_undefined");
            if (undef) {
                renders++;
                if (!one_render(ent->d_name, t, conv, bos, eos, add_gen, 1, undef)) bad++;
            }
        }
        if (bad > bad_before) bad_templates++;
        jinja_free(t);
        cJSON_Delete(exp);
        free(src);
    }
    closedir(d);
    cJSON_Delete(convs);
    print_message("  real templates: %d, renders %d, %d differ from jinja2 (in %d templates)\n", templates, renders, bad,
                  bad_templates);
    assert_int_equal(templates, 45);
    assert_int_equal(bad, 0);
}

/* ---- the rules, one at a time ---- */

static void trim_blocks_drops_one_newline_after_a_block_tag_only(void **state) {
    check("{% if true %}\nA{% endif %}\n\nB", "{}", "A\nB");
    check("{{ 'x' }}\nB", "{}", "x\nB");                         /* not after }} */
    check("{# note #}\nB", "{}", "B");
    check("{% if true +%}\nA{% endif %}", "{}", "\nA");        /* + keeps it */
}

static void lstrip_blocks_drops_blanks_before_a_tag_that_starts_a_line(void **state) {
    check("A\n    {% if true %}B{% endif %}", "{}", "A\nB");
    check("A  {% if true %}B{% endif %}", "{}", "A  B");          /* not at a line's start */
    check("A\n  {{ 'x' }}", "{}", "A\n  x");                     /* not before {{ */
    check("  {% if true %}B{% endif %}", "{}", "B");              /* the template's start is a line's start */
    check("{% if true %}\n  {% if true %}B{% endif %}{% endif %}", "{}", "B");
    check("{{ 'a' }}  {% if true %}B{% endif %}", "{}", "a  B");
}

static void minus_markers_strip_every_whitespace_on_their_side(void **state) {
    check("A  \n\n  {%- if true -%}  \n\n B {%- endif %}", "{}", "AB");
    check("A \n {{- 'x' -}} \n B", "{}", "AxB");
    check("A\n{#- c -#}\nB", "{}", "AB");
}

static void one_trailing_newline_of_the_source_is_dropped(void **state) {
    check("A\n", "{}", "A");
    check("A\n\n", "{}", "A\n");
    check("A\r\nB", "{}", "A\nB");
}

static void a_set_in_a_loop_is_gone_after_it_and_a_namespace_carries_state(void **state) {
    check("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 10 %}{{ x }},{% endfor %}{{ x }}", "{}",
          "111,111,1");
    check("{% set ns = namespace(n=0) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}", "{}",
          "6");
    check("{% if true %}{% set y = 2 %}{% endif %}{{ y }}", "{}", "2");   /* if makes no scope */
    check_fails("{% set s = 'a' %}{% set s.x = 1 %}", "{}", "non-namespace");
}

static void undefined_prints_nothing_but_fails_when_used(void **state) {
    check("[{{ nothing }}][{{ m.x }}][{{ l[5] }}]", "{\"m\": {}, \"l\": []}", "[][][]");
    check("{{ nothing is defined }} {{ nothing | length }} {% for x in nothing %}x{% endfor %}{{ not nothing }}", "{}",
          "False 0 True");
    check("{{ nothing ~ 'a' }}{{ nothing | default('d') }}", "{}", "ad");
    check_fails("{{ nothing + 'a' }}", "{}", "'nothing' is undefined");
    check_fails("{{ nothing.attr }}", "{}", "'nothing' is undefined");
    check_fails("{{ m.x.y }}", "{\"m\": {}}", "'x' is undefined");
}

static void attribute_and_key_lookup_follow_jinja2s_order(void **state) {
    check("{{ m.role }}{{ m['role'] }}", "{\"m\": {\"role\": \"user\"}}", "useruser");
    check("{{ m['items'] }}{{ m.items is defined }}", "{\"m\": {\"items\": \"k\"}}", "kTrue");
    check("{% for k, v in m.items() %}{{ k }}={{ v }};{% endfor %}", "{\"m\": {\"a\": 1, \"b\": [1, 2]}}", "a=1;b=[1, 2];");
    check("{{ m.get('x', 'none') }}{{ m.get('a') }}", "{\"m\": {\"a\": 1}}", "none1");
    check_fails("{{ l.append(1) }}", "{\"l\": []}", "unsafe");
}

static void strings_act_as_python_strings(void **state) {
    check("{{ 'héllo'[1] }}{{ 'héllo' | length }}{{ 'héllo'[::-1] }}{{ 'abc'[-1] }}{{ 'abcdef'[1:3] }}", "{}",
          "é5olléhcbc");
    check("{{ '  a  b  '.split() }}{{ 'a,b,,c'.split(',') }}{{ 'a b c'.split(' ', 1) }}", "{}",
          "['a', 'b']['a', 'b', '', 'c']['a', 'b c']");
    check("[{{ '\u3000 x \\n'.strip() }}][{{ 'xxaxx'.strip('x') }}][{{ '  a'.lstrip() }}]", "{}", "[x][a][a]");
    check("{{ 'ab' in 'cabd' }}{{ 'a' + 'b' }}{{ 1 ~ 'b' }}{{ 'x'.startswith(('a', 'x')) }}", "{}", "Trueab1bTrue");
    check("{{ '<think>a</think>b'.split('</think>')[-1] }}{{ 'A-b'.upper() }}{{ 'AbC'.lower() }}", "{}", "bA-Babc");
    check("{{ '{} and {}'.format(1, 'x') }}{{ 'a%b'.replace('%', '%%') }}", "{}", "1 and xa%%b");
    check_fails("{{ 'a' + 1 }}", "{}", "can only concatenate str");
}

static void numbers_and_values_print_as_python_prints_them(void **state) {
    check("{{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 4 / 2 }} {{ 1e20 }} {{ 0.1 + 0.2 }}",
          "{}", "3.5 3 -4 2 1024 2.0 1e+20 0.30000000000000004");
    check("{{ none }} {{ true }} {{ [1, 'a', none] }} {{ {'a': 1} }} {{ (1,) }}", "{}",
          "None True [1, 'a', None] {'a': 1} (1,)");
    check("{{ 1 == 1.0 }} {{ [1] == [1] }} {{ 'a' < 'b' }} {{ 3 > 2 > 1 }}", "{}", "True True True True");
    check_fails("{{ 1 < 'a' }}", "{}", "not supported");
    check_fails("{{ 1 / 0 }}", "{}", "division by zero");
}

static void tojson_is_hf_json_dumps(void **state) {
    check("{{ m | tojson }}", "{\"m\": {\"a\": \"é\\n\\\"\", \"b\": [1, 2.5, true, null]}}",
          "{\"a\": \"é\\n\\\"\", \"b\": [1, 2.5, true, null]}");
    check("{{ m | tojson(indent=2) }}", "{\"m\": {\"a\": [1], \"b\": {}}}", "{\n  \"a\": [\n    1\n  ],\n  \"b\": {}\n}");
    check("{{ 'é😀' | tojson(ensure_ascii=true) }}{{ m | tojson(sort_keys=true) }}", "{\"m\": {\"b\": 1, \"a\": 2}}",
          "\"\\u00e9\\ud83d\\ude00\"{\"a\": 2, \"b\": 1}");
    check("{{ m | tojson(separators=(',', ':')) }}", "{\"m\": {\"a\": [1, 2]}}", "{\"a\":[1,2]}");
    check_fails("{{ nothing | tojson }}", "{}", "not JSON serializable");
}

static void filters_tests_and_loops_do_what_templates_need(void **state) {
    const char *msgs = "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"U\"},"
                       " {\"role\": \"assistant\", \"content\": \"A\"}]}";
    check("{{ messages | selectattr('role', 'equalto', 'user') | list | length }}", msgs, "1");
    check("{{ messages | rejectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') }}", msgs, "S,A");
    check("{% for m in messages if m.role != 'system' %}{{ loop.index }}{{ m.content }}{{ loop.last }} {% endfor %}", msgs,
          "1UFalse 2ATrue ");
    check("{% for m in messages %}{% if loop.first %}F{% endif %}{{ loop.previtem is defined }}{% if m.role == 'user' %}"
          "{% break %}{% endif %}{% endfor %}", msgs, "FFalseTrue");
    check("{% for x in [] %}x{% else %}empty{% endfor %}", "{}", "empty");
    check("{{ {'b': 1, 'A': 2} | dictsort }}{{ [3, 1, 2] | sort }}{{ ['a', 'b'] | first }}{{ '  x ' | trim }}", "{}",
          "[('A', 2), ('b', 1)][1, 2, 3]ax");
    check("{{ 'a' is string }}{{ 1 is string }}{{ {} is mapping }}{{ 'a' is iterable }}{{ none is none }}"
          "{{ 1 is number }}{{ 4 is divisibleby 2 }}", "{}", "TrueFalseTrueTrueTrueTrueTrue");
    check("{{ range(3) | list }}{{ range(1, 7, 2) | list }}{{ 'x' if false }}{{ 'y' if 0 else 'z' }}", "{}",
          "[0, 1, 2][1, 3, 5]z");
    check("{{ 'ab' | upper }}{{ 'a\\nb' | indent(2) }}{{ strftime_now('%B %d, %Y') }}", "{}", "ABa\n  bJuly 26, 2024");
}

static void macros_take_defaults_and_see_the_top_level_only(void **state) {
    check("{% macro m(a, b='B') %}[{{ a }}{{ b }}{{ top }}{{ inner }}]{% endmacro %}{% set top = 'T' %}"
          "{% for i in [1] %}{% set inner = 'I' %}{{ m(1) }}{{ m(2, b='x') }}{% endfor %}", "{}", "[1BT][2xT]");
    check("{% set x %}a{{ 1 + 1 }}{% endset %}[{{ x }}]{% set y | upper %}b{% endset %}{{ y }}", "{}", "[a2]B");
    check("{% generation %}G{% endgeneration %}{% filter upper %}f{% endfilter %}", "{}", "GF");
}

static void raise_exception_gives_the_templates_own_message(void **state) {
    JOutput o;
    Err e = {{0}};
    int st = render("{{ raise_exception('Conversation roles must alternate') }}", "{}", &o, &e);
    assert_int_equal(st, ST_ARG);
    assert_string_equal(e.msg, "Conversation roles must alternate");
    assert_int_equal(o.raised, 1);
    st = render("{{ 1 + 'a' }}", "{}", &o, &e);
    assert_int_equal(st, ST_ARG);
    assert_int_equal(o.raised, 0);
    assert_non_null(strstr(e.msg, "template line 1:"));
}

static void bad_templates_are_refused_with_the_line(void **state) {
    JTemplate *t;
    Err e = {{0}};
    static const char *const bad[][2] = {
        {"a\n{% if x %}b", "line 2"},          {"{{ 'x' ", "not closed"},   {"{% for x %}{% endfor %}", "expected 'in'"},
        {"a\n\n{{ 1 + }}", "line 3"},          {"{% frobnicate %}", "unknown statement 'frobnicate'"},
        {"{{ 'abc }}", "string is not closed"}, {"{# x", "comment is not closed"}, {"{% endif %}", "unknown statement"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        int st = jinja_parse(bad[k][0], strlen(bad[k][0]), &t, &e);
        if (st != ST_FORMAT || !strstr(e.msg, bad[k][1])) {
            print_error("template %s: status %d, message [%s], wanted [%s]\n", bad[k][0], st, e.msg, bad[k][1]);
            fail();
        }
    }
}

static void hostile_templates_stop_at_their_limits(void **state) {
    check_fails("{% for i in range(100000000) %}{% endfor %}", "{}", "more than a template may make");
    steps_limit = 100000;
    check_fails("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", "{}", "100000 steps");
    steps_limit = 0;
    check_fails("{% for i in range(5000000) %}{% for j in range(20) %}{% endfor %}{% endfor %}", "{}", "memory");
    check_fails("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{}", "deep");
    check_fails("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
                "{% endfor %}{{ ns.s }}", "{}", "limit");
    char deep[3000];
    memset(deep, '(', 1000);
    strcpy(deep + 1000, "1");
    memset(deep + 1001, ')', 1000);
    strcpy(deep + 2001, "");
    char src[3100];
    snprintf(src, sizeof src, "{{ %s }}", deep);
    JTemplate *t;
    Err e = {{0}};
    assert_int_equal(jinja_parse(src, strlen(src), &t, &e), ST_FORMAT);
    assert_non_null(strstr(e.msg, "too deep"));
}

static void plain_flags_follow_the_users_bytes_through_every_operation(void **state) {
    const char *vars = "{\"messages\": [{\"role\": \"user\", \"content\": \"  <|x|>hi  \"}]}";
    JOutput o;
    Err e = {{0}};
    int st = render("<|s|>{% for m in messages %}{{ m.role }}:{{ m.content | trim }}|{{ (m.content.strip() + '!')[0:3] }}"
                    "|{{ m.content.split('>')[1] | upper }}{% endfor %}<|e|>", vars, &o, &e);
    assert_int_equal(st, ST_OK);
    /* roles come from the messages too: they are the user's, like the content */
    const char *want = "<|s|>user:<|x|>hi|<|x|HI  <|e|>";
    const char *flags = "00000" "1111" "0" "1111111" "0" "111" "0" "1111" "00000";
    assert_string_equal(o.text, want);
    for (size_t i = 0; i < o.len; i++)
        if (o.plain[i] != (flags[i] == '1')) {
            print_error("byte %zu ('%c') plain %d, wanted %c\n", i, o.text[i], o.plain[i], flags[i]);
            fail();
        }
    jinja_output_free(&o);
}

int main(int argc, char **argv) {
    select_tests(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_real_template_renders_every_conversation_as_jinja2_does),
        cmocka_unit_test(trim_blocks_drops_one_newline_after_a_block_tag_only),
        cmocka_unit_test(lstrip_blocks_drops_blanks_before_a_tag_that_starts_a_line),
        cmocka_unit_test(minus_markers_strip_every_whitespace_on_their_side),
        cmocka_unit_test(one_trailing_newline_of_the_source_is_dropped),
        cmocka_unit_test(a_set_in_a_loop_is_gone_after_it_and_a_namespace_carries_state),
        cmocka_unit_test(undefined_prints_nothing_but_fails_when_used),
        cmocka_unit_test(attribute_and_key_lookup_follow_jinja2s_order),
        cmocka_unit_test(strings_act_as_python_strings),
        cmocka_unit_test(numbers_and_values_print_as_python_prints_them),
        cmocka_unit_test(tojson_is_hf_json_dumps),
        cmocka_unit_test(filters_tests_and_loops_do_what_templates_need),
        cmocka_unit_test(macros_take_defaults_and_see_the_top_level_only),
        cmocka_unit_test(raise_exception_gives_the_templates_own_message),
        cmocka_unit_test(bad_templates_are_refused_with_the_line),
        cmocka_unit_test(hostile_templates_stop_at_their_limits),
        cmocka_unit_test(plain_flags_follow_the_users_bytes_through_every_operation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
