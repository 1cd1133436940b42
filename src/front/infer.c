/* infer.c - the command-line front end: load a model, serve requests.
 *
 *   build/infer --model FILE [--prompt TEXT] [-n N] [--temperature T] ...
 *   build/infer --model FILE --workload FILE [--out-dir DIR] [engine options]
 *
 * Both go through the serving engine (runtime -> engine -> scheduler ->
 * executor -> model): one prompt is a workload of one request. With one
 * prompt, the text streams to stdout as it is produced (the prompt echoed
 * first, as llama2.c does, so stdout reads as one text). With a workload, each
 * request's text goes to stdout line by line, prefixed by "[id] ", or to
 * DIR/<id>.txt; a telemetry table follows on stderr. The trace, the summary and
 * errors go to stderr, so stdout can be piped. This is the only file that
 * prints errors and exits; the library returns Status codes. */
#include "front/cli_opts.h"
#include "base/clock.h"
#include "base/mem.h"
#include "model.h"
#include "runtime.h"
#include "text/sampler.h"
#include "trace/trace.h"
#include "front/workload.h"
#include <math.h>
#include <sys/stat.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    CliEngine cli;                    /* the engine options, shared with serve (cli_opts.h) */
    const char *prompt, *workload, *out_dir;
    const char *trace_html;           /* --trace-html FILE: the run as a page (infer's own: a
                                         server's run never ends) */
    char title[1024];                 /* the command line, for the page's header */
    const char *stop[RT_MAX_STOP];
    int n_stop, max_tokens;
    SamplerParams sp;
    const char *one_prompt_option;   /* the last option given that only --prompt uses */
} Options;

/* errno of the first failed write to stdout (0: none), reported at the end:
 * output that could not be written is an error, not a silent loss. */
static int stdout_errno;

static void write_stdout(const char *text, size_t len) {
    if ((len && fwrite(text, 1, len, stdout) != len) || fflush(stdout))
        if (!stdout_errno) stdout_errno = errno ? errno : EIO;
}

static void usage(FILE *f) {
    fprintf(f,
        "usage: infer --model FILE [options]\n"
        "  --prompt TEXT        text to continue (default: empty, BOS alone)\n"
        "  -n, --max-tokens N   new tokens to generate (default 256)\n"
        "  --temperature T      0 = greedy (default 0.8)\n"
        "  --top-k K            keep the K most likely tokens, 0 = all (default 0)\n"
        "  --top-p P            nucleus sampling, in (0, 1] (default 0.95)\n"
        "  --seed S             random seed (default 42)\n"
        "  --stop TEXT          end the text before TEXT (up to 4 times)\n"
        "  --workload FILE      requests as JSON lines (prompt, max_tokens, temperature,\n"
        "                       top_k, top_p, seed, priority, stop, n, arrival_ms), replayed\n"
        "                       at their arrival times\n"
        "  --out-dir DIR        write request i's text to DIR/i.txt instead of stdout\n"
        "  --trace-html FILE    the run as one web page that replays it step by step: the\n"
        "                       batch, the scheduler's decisions, the KV pool block by block,\n"
        "                       each request's text as it grows (open it in a browser)\n"
        "engine:\n");
    cli_engine_usage(f);
    fprintf(f, "  -h, --help           this text\n");
}

/* infer's own options (each takes a value). */
static const char *const OWN[] = {"--prompt", "-n", "--max-tokens", "--temperature", "--top-k", "--top-p",
                                  "--seed", "--stop", "--workload", "--out-dir", "--trace-html", NULL};

/* Options that describe the one request of --prompt; a workload's lines
 * set their own, so with --workload these would be ignored: refused. */
static int only_for_one_prompt(const char *a) {
    static const char *const opts[] = {"--prompt", "-n", "--max-tokens", "--temperature", "--top-k",
                                       "--top-p", "--seed", "--stop", NULL};
    for (int i = 0; opts[i]; i++)
        if (!strcmp(a, opts[i])) return 1;
    return 0;
}

/* One of infer's own options and its value; ST_ARG with a line in e. */
static int own_option(void *ctx, const char *a, const char *v, Err *e) {
    Options *o = ctx;
    long n;
    if (only_for_one_prompt(a)) o->one_prompt_option = a;
    if (!strcmp(a, "--prompt")) o->prompt = v;
    else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) {
        if (cli_parse_long(a, v, 1, INT_MAX, &n, e)) return ST_ARG;
        o->max_tokens = (int)n;
    } else if (!strcmp(a, "--temperature")) return cli_parse_float(a, v, &o->sp.temperature, e);
    else if (!strcmp(a, "--top-k")) {
        if (cli_parse_long(a, v, 0, INT_MAX, &n, e)) return ST_ARG;
        o->sp.top_k = (int)n;
    } else if (!strcmp(a, "--top-p")) return cli_parse_float(a, v, &o->sp.top_p, e);
    else if (!strcmp(a, "--seed")) {
        char *end;
        errno = 0;
        unsigned long long s = strtoull(v, &end, 10);
        if (errno || end == v || *end || v[0] == '-')
            return err_set(e, ST_ARG, "--seed: '%s' is not a non-negative integer", v);
        o->sp.seed = s;
    } else if (!strcmp(a, "--stop")) {
        if (o->n_stop == RT_MAX_STOP) return err_set(e, ST_ARG, "--stop: at most %d stop strings", RT_MAX_STOP);
        if (!*v) return err_set(e, ST_ARG, "--stop: an empty stop string would end every text before it began");
        o->stop[o->n_stop++] = v;
    } else if (!strcmp(a, "--workload")) o->workload = v;
    else if (!strcmp(a, "--out-dir")) o->out_dir = v;
    else if (!strcmp(a, "--trace-html")) o->trace_html = v;
    return ST_OK;
}

static int parse_args(int argc, char **argv, Options *o) {
    *o = (Options){.prompt = "", .max_tokens = 256,
                   .sp = {.temperature = 0.8f, .top_k = 0, .top_p = 0.95f, .seed = 42}};
    Err e;
    CliProgram prog = {.own = OWN, .take = own_option, .ctx = o, .usage = usage};
    int st = cli_parse(argc, argv, &o->cli, &prog, &e);
    if (st) {
        if (st != CLI_HELP) fprintf(stderr, "infer: %s\n", e.msg);
        return st;
    }
    if (o->workload && o->one_prompt_option) {
        fprintf(stderr, "infer: %s is for a single --prompt; with --workload each line sets its own "
                "(see notes/serving.md)\n", o->one_prompt_option);
        return -1;
    }
    /* the page's header: the command, less the page's own file name (so
     * the same run written to two files is the same bytes) */
    int n = snprintf(o->title, sizeof o->title, "infer");
    for (int i = 1; i < argc && n < (int)sizeof o->title; i++) {
        if (!strcmp(argv[i], "--trace-html") && i + 1 < argc) {
            i++;
            continue;
        }
        int plain = argv[i][strcspn(argv[i], " \t\n\"'\\$`;&|<>()*?")] == 0 && argv[i][0];
        n += snprintf(o->title + n, sizeof o->title - (size_t)n, plain ? " %s" : " '%s'", argv[i]);
    }
    if (n >= (int)sizeof o->title) strcpy(o->title + sizeof o->title - 5, " ...");
    return 0;
}

/* An output file: a FIFO is refused (opening it would wait for a reader
 * forever), as is a directory; anything else is created or truncated. NULL
 * after one line on stderr. */
static FILE *open_output(const char *what, const char *path) {
    struct stat st;
    if (stat(path, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISDIR(st.st_mode))) {
        fprintf(stderr, "infer: %s%s: %s\n", what, path,
                S_ISDIR(st.st_mode) ? "is a directory" : "is a FIFO (refused: opening it would wait for a reader)");
        return NULL;
    }
    FILE *f = fopen(path, "w");
    if (!f) fprintf(stderr, "infer: %s%s: cannot create: %s\n", what, path, strerror(errno));
    return f;
}

/* ---- one prompt: stream its text to stdout ---- */

static void to_stdout(int id, const char *text, int len, void *user) {
    write_stdout(text, (size_t)(len > 0 ? len : 0));
}

/* The finish reasons as this CLI has always named them. */
/* "; ..." when the machine had more runnable work than cores (the load
 * average over the last minute, which counts this run's own threads): the
 * kernels' threads then wait at every barrier for one that another process
 * holds, and decode can run many times slower than on one thread. Else "". */
static void load_hint(int threads, char *out, size_t cap) {
    out[0] = 0;
    double load;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f) return;
    int got = fscanf(f, "%lf", &load);
    fclose(f);
    if (got == 1 && threads > 1 && load > cores + 0.5)
        snprintf(out, cap, "; the load average was %.1f on %ld cores, so the %d threads waited for each other: "
                 "--threads 1 may be faster", load, cores, threads);
}

static const char *why_name(FinishReason f) {
    switch (f) {
    case FIN_LENGTH: return "max-tokens";
    case FIN_CONTEXT: return "context full";
    default: return rt_finish_name(f);
    }
}

/* closing (cap bytes): the line printed last, kept for the page. */

/* "; speculation: P guesses, A accepted (R%)" when the run speculated, else "". */
static void spec_note(EngineStats es, char *buf, size_t cap) {
    buf[0] = 0;
    if (es.spec_proposed > 0)
        snprintf(buf, cap, "; speculation: %ld guesses, %ld accepted (%.0f%%)", es.spec_proposed,
                 es.spec_accepted, 100.0 * es.spec_accepted / es.spec_proposed);
}
static int run_prompt(const Options *o, const Model *m, Runtime *rt, char *closing, size_t cap) {
    Err e = {{0}};
    RtParams p = rt_params_default();
    p.prompt = o->prompt;
    p.sampling = o->sp;
    p.max_tokens = o->max_tokens;
    for (int i = 0; i < o->n_stop; i++) p.stop[i] = o->stop[i];
    p.on_text = to_stdout;
    int id = rt_submit(rt, &p, &e);
    if (id < 0) {
        fprintf(stderr, "infer: %s\n", e.msg);
        return 1;
    }
    if (rt->trace) trace_page_prompt(rt->trace, id, o->prompt);
    /* Echo the prompt as its tokens decode (what llama2.c prints). */
    const Sequence *q = rt_sequence(rt, id);
    TokDecoder d;
    tok_decoder_init(&d);
    char piece[TOK_MAX_PIECE];
    for (int i = 0; i < q->n_prompt; i++) write_stdout(piece, (size_t)tok_decode(m->tok, &d, q->tokens[i], piece));
    if (rt_run(rt, &e)) {
        fprintf(stderr, "infer: %s\n", e.msg);
        return 1;
    }
    write_stdout("\n", 1);
    if (rt->trace) trace_finish(rt->trace);
    const Telemetry *t = rt_telemetry(rt, id);
    if (rt_error(rt, id)) {   /* the model failed it: its text is cut short */
        fprintf(stderr, "infer: %s: %s\n", o->cli.model, rt_error(rt, id));
        return 1;
    }
    if (o->cli.ec.clock == CLOCK_STEPS) {   /* no speeds: the clock counts steps, not seconds */
        char spec[96];
        spec_note(rt_stats(rt).engine, spec, sizeof spec);
        snprintf(closing, cap, "infer: %s %s, prompt %d tokens, generated %d (%s); %ld steps on the step "
                 "clock%s\n", m->format, dtype_name(m->wtype), q->n_prompt, q->n_out, why_name(q->finish),
                 rt_stats(rt).engine.steps, spec);
        fputs(closing, stderr);
        return 0;
    }
    double prefill = t->first_token - t->first_scheduled, decode = t->finished - t->first_token;
    char hint[192], spec[96];
    load_hint(o->cli.threads, hint, sizeof hint);
    spec_note(rt_stats(rt).engine, spec, sizeof spec);
    snprintf(closing, cap, "infer: %s %s, prompt %d tokens, generated %d (%s); prefill %.1f tok/s, "
             "decode %.1f tok/s%s, %d thread%s%s\n", m->format, dtype_name(m->wtype), q->n_prompt,
             q->n_out, why_name(q->finish), prefill > 0 ? q->n_prompt / prefill : 0.0,
             q->n_out > 1 && decode > 0 ? (q->n_out - 1) / decode : 0.0, spec, o->cli.threads,
             o->cli.threads == 1 ? "" : "s", hint);
    fputs(closing, stderr);
    return 0;
}

/* ---- a workload: replay it, one output per request, then a table ---- */

/* One per request; a line with "n": k has k sinks side by side, and its
 * samples (consecutive ids) find theirs from the first one's. */
typedef struct {
    int id, line;
    int used;                /* 1: a request was submitted for it (or refused, below) */
    FILE *file;              /* --out-dir: its own file */
    char buf[1024];          /* stdout: the current line, printed whole with its prefix */
    int n;
    int refused;
    char why[600];
    int write_errno;         /* --out-dir: the first failed write to its file (0: none) */
    /* what the summary needs, kept when the request ends (the runtime then
     * frees it: memory stays flat however many requests a workload has) */
    int done;
    Priority priority;
    int n_prompt, n_out, n_preempted, prefix_hit_tokens;
    FinishReason finish;
    Telemetry tm;
    char error[560];
} Sink;

static void sink_line(Sink *k) {
    char prefix[24];
    int len = snprintf(prefix, sizeof prefix, "[%d] ", k->id);
    write_stdout(prefix, (size_t)len);
    write_stdout(k->buf, (size_t)k->n);
    write_stdout("\n", 1);
    k->n = 0;
}

static void to_sink(int id, const char *text, int len, void *user) {
    Sink *first = user, *k = first + (id - first->id);   /* samples of one line */
    if (k->file) {
        if (len > 0) {
            if (fwrite(text, 1, (size_t)len, k->file) != (size_t)len && !k->write_errno)
                k->write_errno = errno ? errno : EIO;
        } else {   /* the request finished: its file is complete */
            if ((fputc('\n', k->file) == EOF || fclose(k->file)) && !k->write_errno)
                k->write_errno = errno ? errno : EIO;
            k->file = NULL;
        }
        return;
    }
    for (int i = 0; i < len; i++) {
        if (text[i] == '\n') {
            sink_line(k);
            continue;
        }
        if (k->n == (int)sizeof k->buf) sink_line(k);   /* a very long line: split it */
        k->buf[k->n++] = text[i];
    }
    if (len == 0 && k->n > 0) sink_line(k);   /* finished: the last, unterminated line */
}

static void sink_done(int id, const Sequence *q, const Telemetry *t, const char *error, void *user) {
    Sink *first = user, *k = first + (id - first->id);
    k->done = 1;
    k->priority = q->priority;
    k->n_prompt = q->n_prompt;
    k->n_out = q->n_out;
    k->n_preempted = q->n_preempted;
    k->prefix_hit_tokens = q->prefix_hit_tokens;
    k->finish = q->finish;
    k->tm = *t;
    snprintf(k->error, sizeof k->error, "%s", error ? error : "");
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of n sorted values. */
static double percentile(const double *v, int n, double pct) {
    if (n == 0) return 0.0;
    int k = (int)ceil(pct / 100.0 * n);
    return v[k < 1 ? 0 : k - 1];
}

static void summary(const Runtime *rt, Sink *sinks, int n, int lines, double seconds, char *closing,
                    size_t cap) {
    fprintf(stderr, "\n%4s %5s %-6s %6s %5s %-7s %9s %9s %9s %9s %7s %6s\n", "id", "line", "prio",
            "prompt", "out", "finish", "queue ms", "TTFT ms", "TPOT ms", "e2e ms", "preempt", "hit");
    double *ttft = mem_alloc((size_t)n * sizeof(double)), *tpot = mem_alloc((size_t)n * sizeof(double));
    int n_ttft = 0, n_tpot = 0, served = 0, refused = 0;
    long out = 0;
    for (int i = 0; i < n; i++) {
        Sink *k = &sinks[i];
        if (!k->used) continue;
        if (k->refused) {
            fprintf(stderr, "%4s %5d refused: %s\n", "-", k->line, k->why);
            refused++;
            continue;
        }
        const Telemetry *t = &k->tm;
        fprintf(stderr, "%4d %5d %-6s %6d %5d %-7s %9.1f %9.1f %9.2f %9.1f %7d %6d\n", k->id, k->line,
                rt_priority_name(k->priority), k->n_prompt, k->n_out, rt_finish_name(k->finish),
                t->queue_wait * 1e3, t->ttft * 1e3, t->tpot * 1e3, t->e2e * 1e3, k->n_preempted,
                k->prefix_hit_tokens);
        served++;
        out += k->n_out;
        if (ttft && t->ttft >= 0) ttft[n_ttft++] = t->ttft * 1e3;
        if (tpot && k->n_out > 1) tpot[n_tpot++] = t->tpot * 1e3;
    }
    /* "n" makes several requests of one line: say how many lines they came from */
    char from[96] = "";
    if (lines != served)
        snprintf(from, sizeof from, " (from %d workload line%s: \"n\" made the other %d)", lines,
                 lines == 1 ? "" : "s", served - lines);
    if (ttft) qsort(ttft, (size_t)n_ttft, sizeof *ttft, cmp_double);
    if (tpot) qsort(tpot, (size_t)n_tpot, sizeof *tpot, cmp_double);
    char rate[160];   /* per second on the wall clock; per step on the step clock */
    EngineStats es = rt_stats(rt).engine;
    if (es.clock == CLOCK_STEPS)
        snprintf(rate, sizeof rate, "in %ld steps of the step clock: %ld output tokens, %.2f per step",
                 es.steps, out, es.steps ? (double)out / es.steps : 0.0);
    else
        snprintf(rate, sizeof rate, "in %.2f s: %.2f requests/s, %ld output tokens, %.1f output tok/s",
                 seconds, served / seconds, out, out / seconds);
    char spec[96];
    spec_note(es, spec, sizeof spec);
    snprintf(closing, cap, "totals: %d requests served%s, %d refused, %s; TTFT p50 %.1f ms, p99 %.1f ms; "
             "TPOT p50 %.2f ms, p99 %.2f ms; %ld steps, %ld preemptions%s, KV pool %d blocks of %d "
             "tokens (peak %d held)\n", served, from, refused, rate,
             ttft ? percentile(ttft, n_ttft, 50) : 0.0, ttft ? percentile(ttft, n_ttft, 99) : 0.0,
             tpot ? percentile(tpot, n_tpot, 50) : 0.0, tpot ? percentile(tpot, n_tpot, 99) : 0.0,
             es.steps, es.sched.preemptions, spec, es.kv.n_blocks, es.kv.block_size, es.kv.peak_held);
    fputs(closing, stderr);
    mem_free(ttft);
    mem_free(tpot);
}

static int run_workload(const Options *o, Runtime *rt, char *closing, size_t cap) {
    Err e = {{0}};
    Workload w;
    if (workload_load(&w, o->workload, &e)) {
        fprintf(stderr, "infer: %s\n", e.msg);
        return 1;
    }
    int rc = 1, total = 0, used = 0;
    for (int i = 0; i < w.n; i++) total += w.items[i].params.n;
    Sink *sinks = mem_alloc((size_t)total * sizeof *sinks);
    if (!sinks) {
        fprintf(stderr, "infer: out of memory for %d requests\n", total);
        goto out;
    }
    if (o->out_dir && mkdir(o->out_dir, 0777) && errno != EEXIST) {
        fprintf(stderr, "infer: --out-dir %s: cannot create: %s\n", o->out_dir, strerror(errno));
        goto out;
    }
    /* A request is submitted before the first step that starts at or after
     * its arrival_ms (on the step clock a step lasts 1 ms: see clock.h). */
    rt->release_finished = 1;   /* each request's row is kept in its Sink */
    double start = rt_now(rt);
    int next = 0, lines = 0;
    while (next < w.n || !rt_idle(rt)) {
        /* arrival times in seconds on the clock's own grain (clock_at): on
         * the step clock an arrival and the step that reaches it compare
         * equal, so none is missed or taken a step late */
        double now = rt_now(rt);
        for (; next < w.n && start + clock_at(w.items[next].arrival_ms) <= now; next++) {
            WorkItem *it = &w.items[next];
            Sink *k = &sinks[used];
            it->params.on_text = to_sink;
            it->params.on_finish = sink_done;
            it->params.user = k;
            int id = rt_submit(rt, &it->params, &e);
            if (id < 0) {   /* refused, with its reason; the others go on */
                *k = (Sink){.line = it->line, .used = 1, .refused = 1};
                snprintf(k->why, sizeof k->why, "%s", e.msg);
                fprintf(stderr, "infer: %s:%d: request refused: %s\n", o->workload, it->line, e.msg);
                if (rt->trace) trace_note(rt->trace, now, "line %d refused: %s", it->line, e.msg);
                used++;
                continue;
            }
            lines++;   /* a line served: its n requests follow */
            for (int j = 0; j < it->params.n; j++, used++) {
                if (rt->trace) trace_page_prompt(rt->trace, id + j, it->params.prompt);
                k = &sinks[used];
                k->id = id + j;
                k->line = it->line;
                k->used = 1;
                if (o->out_dir) {
                    char path[4096];
                    snprintf(path, sizeof path, "%s/%d.txt", o->out_dir, k->id);
                    if (!(k->file = open_output("", path))) goto out;
                }
            }
        }
        if (rt_idle(rt)) {   /* nothing to do until the next arrival */
            rt_wait_until(rt, start + clock_at(w.items[next].arrival_ms));
            continue;
        }
        rt_step(rt);
    }
    if (rt->trace) trace_finish(rt->trace);
    summary(rt, sinks, used, lines, rt_now(rt) - start, closing, cap);
    rc = 0;
    for (int i = 0; i < used; i++)
        if (sinks[i].done && sinks[i].error[0]) {
            fprintf(stderr, "infer: %s:%d: request %d: %s\n", o->workload, sinks[i].line, sinks[i].id,
                    sinks[i].error);
            rc = 1;
        }
    for (int i = 0; i < used; i++)
        if (sinks[i].write_errno) {
            fprintf(stderr, "infer: %s/%d.txt: cannot write: %s\n", o->out_dir, sinks[i].id,
                    strerror(sinks[i].write_errno));
            rc = 1;
        }
out:
    if (sinks)
        for (int i = 0; i < used; i++)
            if (sinks[i].file) fclose(sinks[i].file);
    mem_free(sinks);
    workload_free(&w);
    return rc;
}

int main(int argc, char **argv) {
    Options o;
    Err isa_err;
    if (ops_isa_from_env(&isa_err)) {   /* LLM_ISA; --isa overrides it */
        fprintf(stderr, "infer: %s\n", isa_err.msg);
        return 2;
    }
    int st = parse_args(argc, argv, &o);
    if (st) return st == CLI_HELP ? 0 : 2;
    ops_set_threads(o.cli.threads);

    Err e = {{0}};
    Model m;
    Runtime rt;
    Trace trace = {0};
    FILE *json = NULL, *html = NULL;
    char closing[1024] = "";   /* the last line printed: the summary (a few hundred bytes) */
    int rc = 1;
    if (model_load_opts(&m, o.cli.model, o.cli.tokenizer, &o.cli.mo, &e)) {
        fprintf(stderr, "infer: %s\n", e.msg);
        return 1;
    }
    if (!o.workload) {   /* one request: a sequence slot, no more */
        o.cli.ec.sched.max_seqs = 1;
        if (o.cli.ec.n_blocks == 0 && o.cli.ec.kv_bytes == 0)
            o.cli.ec.n_blocks = (m.cfg.seq_len + o.cli.ec.block_size - 1) / o.cli.ec.block_size;
    }
    SchedConfig *sc = &o.cli.ec.sched;
    if (sc->max_seqs > sc->token_budget) sc->token_budget = sc->max_seqs;
    st = rt_init(&rt, &m, &o.cli.ec, &e);
    if (st) {   /* ST_ARG: the options asked for what cannot be (a pool past int slots...) */
        fprintf(stderr, "infer: %s\n", e.msg);
        rt_free(&rt);
        model_free(&m);
        return st == ST_ARG ? 2 : 1;
    }
    if (o.cli.trace_json && !(json = open_output("--trace-json ", o.cli.trace_json))) goto out;
    if (o.trace_html && !(html = open_output("--trace-html ", o.trace_html))) goto out;
    if (o.cli.trace || json || o.cli.trace_svg || html) {
        if (trace_init(&trace, o.cli.trace, stderr, json, o.cli.trace_svg ? 1 << 18 : 0,
                       o.cli.ec.clock == CLOCK_STEPS, &e) ||
            rt_set_trace(&rt, &trace, &e)) {
            fprintf(stderr, "infer: %s\n", e.msg);
            goto out;
        }
        trace.kv_map_every = o.cli.kv_map;
    }
    if (html) {
        EngineStats es = rt_stats(&rt).engine;
        TracePageInfo info = {.title = o.title, .n_blocks = es.kv.n_blocks, .block_size = es.kv.block_size,
                              .max_seqs = es.sched.max_seqs, .cap_blocks = es.cap_blocks,
                              .token_budget = es.sched.token_budget};
        if (trace_page_begin(&trace, html, &info, &e)) {
            fprintf(stderr, "infer: --trace-html %s: %s\n", o.trace_html, e.msg);
            goto out;
        }
    }
    MemStats ready = mem_stats();
    rc = o.workload ? run_workload(&o, &rt, closing, sizeof closing)
                    : run_prompt(&o, &m, &rt, closing, sizeof closing);
    if (rc == 0 && o.cli.trace_svg) {
        FILE *f = open_output("--trace-svg ", o.cli.trace_svg);
        if (!f) {
            rc = 1;
        } else {
            int bad = trace_write_svg(&trace, f) != ST_OK || fflush(f) != 0, why = errno ? errno : EIO;
            if (fclose(f) && !bad) bad = 1, why = errno;
            if (bad) {
                fprintf(stderr, "infer: --trace-svg %s: cannot write: %s\n", o.cli.trace_svg, strerror(why));
                rc = 1;
            }
        }
    }
    if (rc == 0 && o.cli.trace) {
        TraceMemory mem = rt_memory(&rt, ready);
        trace_memory_report(&trace, stderr, &mem);
    }
    if (html) {   /* ended even after a failed run: the page shows how far it got */
        TraceMemory mem = rt_memory(&rt, ready);
        if (trace_page_end(&trace, &mem, closing, &e)) {
            fprintf(stderr, "infer: --trace-html %s: %s\n", o.trace_html, e.msg);
            rc = 1;
        }
    }
out:
    if (json) {   /* a full disk shows at the flush or the close: either is an error */
        int bad = fflush(json) != 0 || ferror(json), why = errno ? errno : EIO;
        if (fclose(json) && !bad) bad = 1, why = errno;
        if (bad) {
            fprintf(stderr, "infer: --trace-json %s: cannot write: %s\n", o.cli.trace_json, strerror(why));
            rc = 1;
        }
    }
    if (html) {
        int bad = fflush(html) != 0 || ferror(html), why = errno ? errno : EIO;
        if (fclose(html) && !bad) bad = 1, why = errno;
        if (bad) {
            fprintf(stderr, "infer: --trace-html %s: cannot write: %s\n", o.trace_html, strerror(why));
            rc = 1;
        }
    }
    if (stdout_errno || fflush(stdout) || ferror(stdout)) {
        fprintf(stderr, "infer: stdout: cannot write: %s\n", strerror(stdout_errno ? stdout_errno : errno ? errno : EIO));
        rc = 1;
    }
    trace_free(&trace);
    rt_free(&rt);
    model_free(&m);
    return rc;
}
