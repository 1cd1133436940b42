/* serve.c - the HTTP server's program: load a model, answer OpenAI-style
 * requests until SIGINT or SIGTERM.
 *
 *   build/fast/serve --model FILE [--host A] [--port P] [engine options]
 *
 * The engine options are infer's (cli_opts.c). This thread becomes the
 * engine thread (srv_run); a thread per connection answers the sockets. The
 * line "serve: listening on http://HOST:PORT ..." goes to stderr once the
 * socket is bound (with --port 0 it names the port chosen), then the trace
 * if asked. See notes/server.md. */
#include "base/fileio.h"
#include "front/cli_opts.h"
#include "front/server.h"
#include "trace/trace.h"
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

typedef struct {
    CliEngine cli;
    const char *host, *model_name, *chat_template;
    int port, max_queue;
    long max_body;
    long max_buffered;
    long max_connections, idle_timeout, request_timeout;
} Options;

static volatile sig_atomic_t stop_asked;
static void on_signal(int sig) { stop_asked = sig; }

static void usage(FILE *f) {
    fprintf(f,
        "usage: serve --model FILE [options]\n"
        "  --host A             address to listen on (default 127.0.0.1)\n"
        "  --port P             port, 0 = any free one (default 8000)\n"
        "  --model-name NAME    the model's id in the API (default: the file's name\n"
        "                       without its extension)\n"
        "  --max-queue N        requests waiting beyond --max-seqs running; more get\n"
        "                       503 (default 256)\n"
        "  --max-body BYTES     largest request body; larger gets 413 (default 1048576)\n"
        "  --max-buffered BYTES request bodies held while they arrive, all clients together;\n"
        "                       a body that would pass it gets 503 (default 67108864)\n"
        "  --max-connections N  connections open at once, a thread each; one more is\n"
        "                       closed at once (default 4096)\n"
        "  --idle-timeout S     a connection that sends and takes nothing for S seconds is\n"
        "                       closed (default 60; waiting for the engine is not idle)\n"
        "  --request-timeout S  a request must be whole, headers and body, within S seconds\n"
        "                       of its connection opening or its last answer ending, or the\n"
        "                       connection is closed (default 60; a client trickling a byte\n"
        "                       at a time is never idle)\n"
        "  --chat-template FILE a Jinja chat template to use instead of the model file's\n"
        "                       tokenizer.chat_template (notes/chat.md)\n"
        "engine:\n");
    cli_engine_usage(f);
    fprintf(f, "  -h, --help           this text\n");
}

static const char *const OWN[] = {"--host", "--port", "--max-queue", "--max-body", "--max-buffered", "--model-name",
                                  "--max-connections", "--idle-timeout", "--request-timeout", "--chat-template",
                                  NULL};

/* One of serve's own options and its value; ST_ARG with a line in e. */
static int own_option(void *ctx, const char *a, const char *v, Err *e) {
    Options *o = ctx;
    long n = 0;
    if (!strcmp(a, "--host")) o->host = v;
    else if (!strcmp(a, "--chat-template")) o->chat_template = v;
    else if (!strcmp(a, "--model-name")) {
        /* the id is kept in 256 bytes: a longer one would be cut, and no client could name it */
        if (!*v || strlen(v) > 255)
            return err_set(e, ST_ARG, "--model-name: %zu bytes (want 1..255)", strlen(v));
        o->model_name = v;
    }
    else if (!strcmp(a, "--max-body")) return cli_parse_long(a, v, 1, 1L << 30, &o->max_body, e);
    else if (!strcmp(a, "--max-buffered")) return cli_parse_long(a, v, 4096, 1L << 40, &o->max_buffered, e);
    else if (!strcmp(a, "--max-connections")) return cli_parse_long(a, v, 1, 1 << 16, &o->max_connections, e);
    else if (!strcmp(a, "--idle-timeout")) return cli_parse_long(a, v, 1, 86400, &o->idle_timeout, e);
    else if (!strcmp(a, "--request-timeout")) return cli_parse_long(a, v, 1, 86400, &o->request_timeout, e);
    else if (!strcmp(a, "--port")) {
        if (cli_parse_long(a, v, 0, 65535, &n, e)) return ST_ARG;
        o->port = (int)n;
    } else {
        if (cli_parse_long(a, v, 0, 1 << 20, &n, e)) return ST_ARG;
        o->max_queue = (int)n;
    }
    return ST_OK;
}

static int parse_args(int argc, char **argv, Options *o) {
    *o = (Options){.host = "127.0.0.1", .port = 8000, .max_queue = 256, .max_body = 1 << 20,
                   .max_buffered = 64L << 20, .max_connections = 4096, .idle_timeout = 60,
                   .request_timeout = 60};
    Err e;
    CliProgram prog = {.own = OWN, .take = own_option, .ctx = o, .usage = usage};
    int st = cli_parse(argc, argv, &o->cli, &prog, &e);
    if (st) {
        if (st != CLI_HELP) fprintf(stderr, "serve: %s\n", e.msg);
        return st;
    }
    if (o->cli.trace_json || o->cli.trace_svg) {
        fprintf(stderr, "serve: --trace-json and --trace-svg are infer's (a server never ends a run); "
                "use --trace\n");
        return -1;
    }
    return 0;
}

/* The model's id: --model-name, else the file's name without directory or extension. */
static void model_id(const Options *o, char *out, size_t cap) {
    if (o->model_name) {
        snprintf(out, cap, "%s", o->model_name);
        return;
    }
    const char *base = strrchr(o->cli.model, '/');
    snprintf(out, cap, "%s", base ? base + 1 : o->cli.model);
    char *dot = strrchr(out, '.');
    if (dot && dot != out) *dot = 0;
}

/* The model's chat: --chat-template FILE, else the file's
 * tokenizer.chat_template, else the fallback (chat.h); with the texts of
 * its BOS and EOS, and whether the vocabulary puts BOS first itself. */
static int model_chat(const Options *o, const Model *m, SrvChat *c, Err *e) {
    const Tokenizer *t = m->tok;
    char bos[256] = "", eos[256] = "";
    if (tok_bos(t) >= 0 && tok_piece(t, tok_bos(t), bos, sizeof bos) >= (int)sizeof bos) bos[0] = 0;
    if (tok_eos(t) >= 0 && tok_piece(t, tok_eos(t), eos, sizeof eos) >= (int)sizeof eos) eos[0] = 0;
    int ids[4];
    int adds_bos = tok_bos(t) >= 0 && tok_encode(t, "", 1, ids, 4, e) >= 1 && ids[0] == tok_bos(t);
    if (o->chat_template) {
        size_t n;
        unsigned char *src;
        if (fio_slurp(o->chat_template, &src, &n, e)) return ST_IO;
        char origin[200];
        snprintf(origin, sizeof origin, "--chat-template %s", o->chat_template);
        int st = srv_chat_init(c, (const char *)src, n, "file", origin, bos, eos, adds_bos, e);
        mem_free(src);
        return st;
    }
    GgufStr s;
    Err ge;
    if (!strcmp(m->format, "gguf") && !gguf_get_str(&m->gguf, "tokenizer.chat_template", &s, &ge))
        return srv_chat_init(c, s.s, (size_t)s.len, "model", "the model's tokenizer.chat_template", bos, eos, adds_bos, e);
    return srv_chat_init(c, NULL, 0, "fallback", "the fallback template (the model file has none): "
                         "\"role: content\" lines, then \"assistant:\"", bos, eos, adds_bos, e);
}

int main(int argc, char **argv) {
    Options o;
    Err e = {{0}};
    if (ops_isa_from_env(&e)) {   /* LLM_ISA; --isa overrides it */
        fprintf(stderr, "serve: %s\n", e.msg);
        return 2;
    }
    int st = parse_args(argc, argv, &o);
    if (st) return st == CLI_HELP ? 0 : 2;
    ops_set_threads(o.cli.threads);
    SchedConfig *sc = &o.cli.ec.sched;
    if (sc->max_seqs > sc->token_budget) sc->token_budget = sc->max_seqs;

    Model m;
    Runtime rt;
    Trace trace = {0};
    Server srv = {0};
    SrvChat chat = {0};
    int rc = 1;
    if (model_load_opts(&m, o.cli.model, o.cli.tokenizer, &o.cli.mo, &e)) {
        fprintf(stderr, "serve: %s\n", e.msg);
        return 1;
    }
    int init = rt_init(&rt, &m, &o.cli.ec, &e);
    if (init) {   /* ST_ARG: the options asked for what cannot be */
        fprintf(stderr, "serve: %s\n", e.msg);
        rt_free(&rt);
        model_free(&m);
        return init == ST_ARG ? 2 : 1;
    }
    if (o.cli.trace) {
        if (trace_init(&trace, o.cli.trace, stderr, NULL, 0, o.cli.ec.clock == CLOCK_STEPS, &e) ||
            rt_set_trace(&rt, &trace, &e)) {
            fprintf(stderr, "serve: %s\n", e.msg);
            goto out;
        }
        trace.kv_map_every = o.cli.kv_map;
    }
    char id[256];
    model_id(&o, id, sizeof id);
    /* Every connection is a descriptor: the soft limit goes up to the hard
     * one (as far as 65536), and the cap stays below what it allows. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rlim_t want = rl.rlim_max < 65536 ? rl.rlim_max : 65536;
        if (rl.rlim_cur < want) {
            rl.rlim_cur = want;
            if (setrlimit(RLIMIT_NOFILE, &rl) != 0) getrlimit(RLIMIT_NOFILE, &rl);
        }
        long room = (long)rl.rlim_cur - 64;
        if (o.max_connections > room) {
            fprintf(stderr, "serve: --max-connections %ld lowered to %ld (the process may open %ld files)\n",
                    o.max_connections, room > 16 ? room : 16, (long)rl.rlim_cur);
            o.max_connections = room > 16 ? room : 16;
        }
    }
    SrvConfig cfg = {.host = o.host, .port = o.port, .model_id = id, .max_queue = o.max_queue,
                     .max_body = (size_t)o.max_body, .max_buffered = (size_t)o.max_buffered,
                     .max_connections = (int)o.max_connections, .idle_timeout = (int)o.idle_timeout,
                     .request_timeout = (int)o.request_timeout};
    if (model_chat(&o, &m, &chat, &e)) {
        fprintf(stderr, "serve: %s\n", e.msg);
        goto out;
    }
    cfg.chat = &chat;
    cfg.tok = m.tok;
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    MemStats ready = mem_stats();
    if (srv_init(&srv, &rt, &cfg, &e)) {
        fprintf(stderr, "serve: %s\n", e.msg);
        goto out;
    }
    fprintf(stderr, "serve: listening on http://%s:%d (model %s, chat template %s, %d sequences, "
            "KV pool %d blocks of %d tokens)\n", o.host, srv.port, id, chat.origin,
            sc->max_seqs, rt_stats(&rt).engine.kv.n_blocks, rt_stats(&rt).engine.kv.block_size);
    fflush(stderr);
    rc = srv_run(&srv, &stop_asked, &e) ? 1 : 0;
    if (rc) fprintf(stderr, "serve: %s\n", e.msg);
    srv_free(&srv);
    fprintf(stderr, "serve: stopped (%s)\n", stop_asked == SIGTERM ? "SIGTERM" : "SIGINT");
    if (o.cli.trace) {
        trace_finish(&trace);
        TraceMemory mem = rt_memory(&rt, ready);
        trace_memory_report(&trace, stderr, &mem);
    }
out:
    srv_chat_free(&chat);
    trace_free(&trace);
    rt_free(&rt);
    model_free(&m);
    return rc;
}
