/* test_trace.c - the trace tells the truth.
 *
 * Each check compares what the trace says with what the engine did, recorded
 * independently by the test as it drives the engine step by step: which
 * requests the scheduler preempted and resumed in which step, each request's
 * telemetry, the list of requests. The JSON is parsed with cJSON (not with the
 * writer's own code); the SVG with a small XML checker written here.
 *
 * Workloads: the two examples shipped in data/ (the pool and policy their
 * header comments name), on the step clock (one millisecond per step, the
 * rule of clock.h) so the run repeats exactly. */
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

enum { MAXREQ = 16, MAXEV = 256 };

/* What the engine did, as the test saw it. */
typedef struct {
    int n_req;
    int preempt_req[MAXEV], resume_req[MAXEV];
    long preempt_step[MAXEV], resume_step[MAXEV];
    int n_preempt, n_resume;
    Telemetry tm[MAXREQ];
    int n_preempted[MAXREQ], prefix_hit[MAXREQ], n_out[MAXREQ];
} Record;

typedef struct {
    char *text, *json, *svg;
    size_t text_n, json_n, svg_n;
} Outputs;

static void replay(const char *path, int preempt_config, Record *rec, Outputs *out) {
    Err e = {{0}};
    Workload w;
    assert_int_equal(workload_load(&w, path, &e), ST_OK);
    assert_true(w.n <= MAXREQ);
    EngineConfig c = engine_config_default();
    c.clock = CLOCK_STEPS;
    if (preempt_config) {   /* what data/workload-preempt.jsonl's header says */
        c.sched.policy = SCHED_PRIORITY;
        c.n_blocks = 10;
        c.sched.max_seqs = 4;
    }
    Runtime rt;
    assert_int_equal(rt_init(&rt, &M, &c, &e), ST_OK);
    FILE *text = open_memstream(&out->text, &out->text_n);
    FILE *json = open_memstream(&out->json, &out->json_n);
    Trace t;
    assert_int_equal(trace_init(&t, TRACE_ON, text, json, 4096, 1, &e), ST_OK);
    assert_int_equal(rt_set_trace(&rt, &t, &e), ST_OK);
    memset(rec, 0, sizeof *rec);
    int next = 0;
    while (next < w.n || !rt_idle(&rt)) {
        while (next < w.n && w.items[next].arrival_ms <= rt_now(&rt) * 1e3) {
            int id = rt_submit(&rt, &w.items[next].params, &e);
            assert_int_equal(id, next);
            next++;
        }
        if (rt_idle(&rt)) {
            rt_wait_until(&rt, w.items[next].arrival_ms * 1e-3);
            continue;
        }
        const StepReport *rep = rt_step(&rt);
        const StepPlan *o = rep->plan;
        for (int i = 0; i < o->n_preempted; i++) {
            rec->preempt_req[rec->n_preempt] = o->preempted[i]->id;
            rec->preempt_step[rec->n_preempt++] = rep->step;
        }
        for (int i = 0; i < o->n_admitted; i++)
            if (o->admitted[i]->n_preempted > 0) {
                rec->resume_req[rec->n_resume] = o->admitted[i]->id;
                rec->resume_step[rec->n_resume++] = rep->step;
            }
    }
    trace_finish(&t);
    rec->n_req = w.n;
    for (int i = 0; i < w.n; i++) {
        const Sequence *q = rt_sequence(&rt, i);
        rec->tm[i] = *rt_telemetry(&rt, i);
        rec->n_preempted[i] = q->n_preempted;
        rec->prefix_hit[i] = q->prefix_hit_tokens;
        rec->n_out[i] = q->n_out;
    }
    FILE *svg = open_memstream(&out->svg, &out->svg_n);
    assert_int_equal(trace_write_svg(&t, svg), ST_OK);
    fclose(svg);
    fclose(text);
    fclose(json);
    trace_free(&t);
    rt_free(&rt);
    workload_free(&w);
}

static void free_outputs(Outputs *o) {
    free(o->text);
    free(o->json);
    free(o->svg);
}

static double num(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(v)) fail_msg("event has no number \"%s\"", key);
    return v->valuedouble;
}

static const char *str(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsString(v)) fail_msg("event has no string \"%s\"", key);
    return v->valuestring;
}

/* ---- JSON ---- */

static void check_json(const Record *rec, const char *json) {
    cJSON *root = cJSON_Parse(json);
    if (!root) fail_msg("the JSON trace does not parse near: %.40s", cJSON_GetErrorPtr());
    const cJSON *events = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    assert_true(cJSON_IsArray(events));
    double arrived[MAXREQ], first[MAXREQ], finished[MAXREQ];
    int n_arrived[MAXREQ] = {0}, n_first[MAXREQ] = {0}, n_finished[MAXREQ] = {0};
    double span_end[MAXREQ];
    int n_spans[MAXREQ] = {0}, preempts = 0, resumes = 0, steps = 0, kv_counters = 0;
    const cJSON *ev;
    cJSON_ArrayForEach(ev, events) {
        const char *name = str(ev, "name"), *ph = str(ev, "ph");
        int pid = (int)num(ev, "pid");
        if (ph[0] == 'M') continue;
        double ts = num(ev, "ts") / 1e3;   /* ms */
        if (pid == 1) {
            if (ph[0] == 'X' && strncmp(name, "step ", 5) == 0) steps++;
            if (ph[0] == 'C' && strcmp(name, "KV blocks") == 0) kv_counters++;
            continue;
        }
        assert_int_equal(pid, 2);
        int req = (int)num(ev, "tid") - 1;
        assert_true(req >= 0 && req < rec->n_req);
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(ev, "args");
        if (ph[0] == 'X') {   /* a phase span: in time order, each starting where the last ended */
            double dur = num(ev, "dur") / 1e3;
            assert_true(dur >= 0);
            assert_true(!strcmp(name, "queued") || !strcmp(name, "prefill") || !strcmp(name, "decode"));
            if (n_spans[req] == 0)
                assert_true(!strcmp(name, "queued"));
            else if (ts < span_end[req] - 1e-6)
                fail_msg("request %d: span %s at %.6f ms overlaps the previous one (ends %.6f)", req,
                         name, ts, span_end[req]);
            span_end[req] = ts + dur;
            n_spans[req]++;
        } else if (!strcmp(name, "arrived")) {
            arrived[req] = ts, n_arrived[req]++;
        } else if (!strcmp(name, "first token")) {
            first[req] = ts, n_first[req]++;
        } else if (!strcmp(name, "finished")) {
            finished[req] = ts, n_finished[req]++;
            /* the telemetry in the trace is the runtime's, to the nanosecond */
            const Telemetry *t = &rec->tm[req];
            assert_float_equal(num(args, "queue_wait_ms"), t->queue_wait * 1e3, 1e-5);
            assert_float_equal(num(args, "ttft_ms"), t->ttft * 1e3, 1e-5);
            assert_float_equal(num(args, "tpot_ms"), t->tpot * 1e3, 1e-5);
            assert_float_equal(num(args, "e2e_ms"), t->e2e * 1e3, 1e-5);
            assert_int_equal((int)num(args, "output_tokens"), rec->n_out[req]);
            assert_int_equal((int)num(args, "preemptions"), rec->n_preempted[req]);
            assert_int_equal((int)num(args, "prefix_hit_tokens"), rec->prefix_hit[req]);
        } else if (!strcmp(name, "preempted")) {
            /* the k-th preemption in the trace is the k-th the scheduler made */
            assert_true(preempts < rec->n_preempt);
            assert_int_equal(req, rec->preempt_req[preempts]);
            assert_int_equal((long)num(args, "step"), rec->preempt_step[preempts]);
            preempts++;
        } else if (!strcmp(name, "resumed")) {
            assert_true(resumes < rec->n_resume);
            assert_int_equal(req, rec->resume_req[resumes]);
            assert_int_equal((long)num(args, "step"), rec->resume_step[resumes]);
            resumes++;
        }
    }
    assert_int_equal(preempts, rec->n_preempt);
    assert_int_equal(resumes, rec->n_resume);
    assert_true(steps > 0);
    assert_int_equal(kv_counters, steps);
    for (int i = 0; i < rec->n_req; i++) {
        if (n_arrived[i] != 1 || n_first[i] != 1 || n_finished[i] != 1)
            fail_msg("request %d: %d arrived, %d first token, %d finished events", i, n_arrived[i],
                     n_first[i], n_finished[i]);
        assert_true(arrived[i] <= first[i] && first[i] <= finished[i]);
        assert_float_equal(arrived[i], rec->tm[i].arrival * 1e3, 1e-3);
        assert_float_equal(finished[i], rec->tm[i].finished * 1e3, 1e-3);
        /* the spans end where the request finished */
        assert_float_equal(span_end[i], rec->tm[i].finished * 1e3, 1e-3);
    }
    cJSON_Delete(root);
}

static void json_trace_of_a_preempting_workload_matches_the_engine(void **state) {
    Record rec;
    Outputs out = {0};
    replay("data/workload-preempt.jsonl", 1, &rec, &out);
    if (rec.n_preempt == 0) fail_msg("the example workload was meant to preempt");
    assert_true(rec.n_resume > 0);
    check_json(&rec, out.json);
    free_outputs(&out);
}

static void json_trace_of_a_shared_prefix_workload_matches_the_engine(void **state) {
    Record rec;
    Outputs out = {0};
    replay("data/workload-shared-prefix.jsonl", 0, &rec, &out);
    int hits = 0;
    for (int i = 0; i < rec.n_req; i++) hits += rec.prefix_hit[i] > 0;
    if (hits < rec.n_req - 1) fail_msg("only %d of %d requests hit the prefix cache", hits, rec.n_req);
    check_json(&rec, out.json);
    free_outputs(&out);
}

/* ---- text ---- */

static int count_lines(const char *text, const char *needle) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static void check_text(const Record *rec, const char *text) {
    char needle[64];
    for (int i = 0; i < rec->n_req; i++) {
        const char *events[] = {"arrived:", "admitted to slot", "first token", "finished ("};
        for (int k = 0; k < 4; k++) {
            snprintf(needle, sizeof needle, "] #%d %s", i, events[k]);
            if (count_lines(text, needle) != 1)
                fail_msg("the text trace has %d lines \"%s\"", count_lines(text, needle), needle);
        }
        snprintf(needle, sizeof needle, "] #%d preempted:", i);
        assert_int_equal(count_lines(text, needle), rec->n_preempted[i]);
        snprintf(needle, sizeof needle, "] #%d resumed", i);
        assert_int_equal(count_lines(text, needle), rec->n_preempted[i]);
        snprintf(needle, sizeof needle, "] #%d prefill [", i);
        assert_true(count_lines(text, needle) >= 1);
        /* the hits its admitted / resumed lines name add up to its telemetry */
        int hit_sum = 0;
        snprintf(needle, sizeof needle, "] #%d ", i);
        for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle)) {
            const char *end = strchr(p, '\n');
            const char *hit = strstr(p, "prefix cache hit: ");
            if (hit && hit < end) hit_sum += atoi(hit + strlen("prefix cache hit: "));
        }
        assert_int_equal(hit_sum, rec->prefix_hit[i]);
    }
    assert_true(count_lines(text, "] step ") + count_lines(text, "] steps ") > 0);
}

static void text_trace_of_the_examples_names_every_request_and_event(void **state) {
    const char *paths[] = {"data/workload-preempt.jsonl", "data/workload-shared-prefix.jsonl"};
    for (int k = 0; k < 2; k++) {
        Record rec;
        Outputs out = {0};
        replay(paths[k], k == 0, &rec, &out);
        check_text(&rec, out.text);
        if (k == 0) assert_true(count_lines(out.text, "KV pool, 10 blocks") >= 1);   /* map at preemption */
        free_outputs(&out);
    }
}

/* ---- SVG: a small XML checker ---- */

/* Well-formed enough for a browser: every tag closes in order, attributes are
 * quoted, one root element. Returns the number of <g class="request"> rows, or
 * -1 with a message. */
static int xml_rows(const char *s, char *why, size_t cap) {
    char stack[32][32];
    int depth = 0, roots = 0, rows = 0;
    const char *p = s;
    if (strncmp(p, "<?xml", 5) == 0) {
        p = strstr(p, "?>");
        if (!p) return snprintf(why, cap, "unterminated <?xml"), -1;
        p += 2;
    }
    for (; *p; p++) {
        if (*p != '<') {
            if (*p == '&') {   /* an entity: &name; or &#digits; */
                const char *semi = strchr(p, ';');
                if (!semi || semi - p > 10) return snprintf(why, cap, "bare & in text"), -1;
            }
            continue;
        }
        int closing = p[1] == '/';
        const char *name = p + 1 + closing;
        size_t n = strcspn(name, " \t\n/>");
        if (n == 0 || n >= 32) return snprintf(why, cap, "bad tag name"), -1;
        const char *q = name + n;
        /* attributes: name="value" */
        while (*q == ' ' || *q == '\t' || *q == '\n') {
            q++;
            size_t an = strcspn(q, "=/> ");
            if (an == 0) break;
            if (q[an] != '=' || q[an + 1] != '"') return snprintf(why, cap, "unquoted attribute in <%.*s>", (int)n, name), -1;
            const char *end = strchr(q + an + 2, '"');
            if (!end) return snprintf(why, cap, "unterminated attribute"), -1;
            if (strncmp(name, "g", n) == 0 && n == 1 && strncmp(q, "class=\"request\"", 15) == 0) rows++;
            q = end + 1;
        }
        int self = q[0] == '/' && q[1] == '>';
        if (!self && q[0] != '>') return snprintf(why, cap, "malformed <%.*s>", (int)n, name), -1;
        if (closing) {
            if (depth == 0 || strncmp(stack[depth - 1], name, n) || stack[depth - 1][n])
                return snprintf(why, cap, "</%.*s> closes the wrong element", (int)n, name), -1;
            depth--;
        } else if (!self) {
            if (depth == 0) roots++;
            if (depth == 32) return snprintf(why, cap, "too deep"), -1;
            memcpy(stack[depth], name, n);
            stack[depth++][n] = 0;
        } else if (depth == 0) {
            roots++;
        }
        p = q + self;
    }
    if (depth) return snprintf(why, cap, "<%s> never closes", stack[depth - 1]), -1;
    if (roots != 1) return snprintf(why, cap, "%d root elements", roots), -1;
    return rows;
}

static void svg_timeline_is_well_formed_with_one_row_per_request(void **state) {
    char why[128] = "";
    /* the checker itself must reject broken XML */
    assert_int_equal(xml_rows("<svg><g></svg>", why, sizeof why), -1);
    assert_int_equal(xml_rows("<svg><rect x=1/></svg>", why, sizeof why), -1);
    assert_int_equal(xml_rows("<svg/><svg/>", why, sizeof why), -1);
    assert_int_equal(xml_rows("<svg><g class=\"request\"/></svg>", why, sizeof why), 1);
    const char *paths[] = {"data/workload-preempt.jsonl", "data/workload-shared-prefix.jsonl"};
    for (int k = 0; k < 2; k++) {
        Record rec;
        Outputs out = {0};
        replay(paths[k], k == 0, &rec, &out);
        int rows = xml_rows(out.svg, why, sizeof why);
        if (rows < 0) fail_msg("%s: SVG not well-formed: %s", paths[k], why);
        assert_int_equal(rows, rec.n_req);
        assert_non_null(strstr(out.svg, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
        if (k == 1) {   /* each prefix hit drawn apart in its prefill bar, with its count */
            int hits = 0, drawn = 0;
            for (int i = 0; i < rec.n_req; i++) hits += rec.prefix_hit[i] > 0;
            for (const char *p = out.svg; (p = strstr(p, " prompt tokens from the prefix cache, ")); p++) drawn++;
            assert_true(hits > 0);
            assert_int_equal(drawn, hits);
        }
        free_outputs(&out);
    }
}

static void forks_and_copies_on_write_are_traced_as_they_happen(void **state) {
    Err e = {{0}};
    EngineConfig c = engine_config_default();
    Runtime rt;
    assert_int_equal(rt_init(&rt, &M, &c, &e), ST_OK);
    char *text = NULL, *json = NULL;
    size_t text_n = 0, json_n = 0;
    FILE *tf = open_memstream(&text, &text_n), *jf = open_memstream(&json, &json_n);
    Trace t;
    assert_int_equal(trace_init(&t, TRACE_ON, tf, jf, 0, 0, &e), ST_OK);
    assert_int_equal(rt_set_trace(&rt, &t, &e), ST_OK);
    RtParams p = rt_params_default();
    p.prompt = "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?";
    p.n = 3;
    p.max_tokens = 8;
    p.sampling.temperature = 0.8f;
    assert_int_equal(rt_submit(&rt, &p, &e), 0);
    assert_int_equal(rt_run(&rt, &e), ST_OK);
    trace_finish(&t);
    fclose(tf);
    fclose(jf);
    long copies = rt.en.pool.cow_copies;
    assert_int_equal(count_lines(text, "] #1 forked from #0"), 1);
    assert_int_equal(count_lines(text, "] #2 forked from #0"), 1);
    assert_int_equal(count_lines(text, "copy-on-write: position"), (int)copies);
    assert_true(copies > 0);
    cJSON *root = cJSON_Parse(json);
    assert_non_null(root);
    int forked = 0, cow = 0;
    const cJSON *ev;
    cJSON_ArrayForEach(ev, cJSON_GetObjectItemCaseSensitive(root, "traceEvents")) {
        forked += !strcmp(str(ev, "name"), "forked");
        cow += !strcmp(str(ev, "name"), "copy-on-write");
    }
    assert_int_equal(forked, 2);
    assert_int_equal(cow, (int)copies);
    cJSON_Delete(root);
    free(text);
    free(json);
    trace_free(&t);
    rt_free(&rt);
}

/* Steps allocate nothing, traced or not: the trace's table of live requests
 * grows when a request arrives, outside the step loop. */
static void steps_allocate_nothing_with_tracing_off_or_on(void **state) {
    Err e = {{0}};
    Workload w;
    assert_int_equal(workload_load(&w, "data/workload-shared-prefix.jsonl", &e), ST_OK);
    for (int traced = 0; traced <= 1; traced++) {
        EngineConfig c = engine_config_default();
        Runtime rt;
        assert_int_equal(rt_init(&rt, &M, &c, &e), ST_OK);
        char *text = NULL;
        size_t text_n = 0;
        FILE *tf = open_memstream(&text, &text_n);
        Trace t;
        assert_int_equal(trace_init(&t, TRACE_VERBOSE, tf, NULL, 0, 0, &e), ST_OK);
        if (traced) assert_int_equal(rt_set_trace(&rt, &t, &e), ST_OK);
        for (int i = 0; i < w.n; i++) assert_true(rt_submit(&rt, &w.items[i].params, &e) >= 0);
        assert_int_equal(rt_run(&rt, &e), ST_OK);
        trace_finish(&t);
        fclose(tf);
        assert_int_equal(rt.en.step_allocations, 0);
        /* off: the trace heard nothing; on: every request arrived and finished */
        assert_int_equal(count_lines(text, "arrived:"), traced ? w.n : 0);
        assert_int_equal(count_lines(text, "finished ("), traced ? w.n : 0);
        assert_int_equal(t.n_reqs, 0);
        free(text);
        trace_free(&t);
        rt_free(&rt);
    }
    workload_free(&w);
}

int main(int argc, char **argv) {
    select_tests(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(json_trace_of_a_preempting_workload_matches_the_engine),
        cmocka_unit_test(json_trace_of_a_shared_prefix_workload_matches_the_engine),
        cmocka_unit_test(text_trace_of_the_examples_names_every_request_and_event),
        cmocka_unit_test(svg_timeline_is_well_formed_with_one_row_per_request),
        cmocka_unit_test(forks_and_copies_on_write_are_traced_as_they_happen),
        cmocka_unit_test(steps_allocate_nothing_with_tracing_off_or_on),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
