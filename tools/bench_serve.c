/* bench_serve.c - a load generator for any OpenAI-compatible server.
 *
 *   build/fast/bench_serve --url http://127.0.0.1:8000 --concurrency 4 --requests 64
 *   build/fast/bench_serve --url http://127.0.0.1:8000 --rate 2.5 --requests 100
 *
 * Each request is a streamed /v1/completions (or, with --chat, a
 * /v1/chat/completions) with stream_options.include_usage, sent over a
 * plain socket (HTTP/1.1, one connection per request) by a thread of its
 * own; the SSE events are timed as they arrive. Arrivals: a fixed number of
 * clients, each sending its next request when the last one ends
 * (--concurrency), or a Poisson process of --rate requests per second
 * (exponential gaps from --seed). Prompts are slices of the corpus, starting
 * at a line.
 *
 * The figures are vLLM's (benchmarks/benchmark_serving.py), per request:
 *   TTFT  time to first token: from sending to the first event with text
 *   E2EL  end-to-end latency: from sending to the end of the response
 *   TPOT  (E2EL - TTFT) / (output tokens - 1), for requests of 2+ tokens
 *   ITL   every gap between two successive events with text (an event may
 *         carry several tokens: the gap is the client's view)
 * each as mean, median, p90 and p99 (linear interpolation between ranks, as
 * numpy's percentile), then requests per second and output tokens per
 * second over the whole run. Output tokens are the server's own count
 * (usage.completion_tokens), else the events with text.
 *
 * --disconnect-every K closes the connection after the first text of every
 * K-th request (a client that goes away; the soak uses it): those count as
 * disconnected, not failed. Exit status: 0 if every request that was not
 * cut on purpose completed with status 200 and [DONE]. */
#include "bench_util.h"
#include "base/clock.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
    const char *url, *model, *corpus, *endpoint;
    char host[256], port[16];
    int requests, concurrency, max_tokens, prompt_chars, chat, ignore_eos, disconnect_every;
    double rate, temperature;
    unsigned long long seed;
} Options;

/* One request: what to send, what came back. */
typedef struct {
    char *prompt;
    double arrival;              /* seconds after the start (--rate) */
    double start, ttft, e2el;    /* seconds */
    double *gaps;                /* (n_gaps) inter-token latencies */
    int n_gaps, cap_gaps;
    int out_tokens, events;
    int status, ok, disconnected;
    char error[200];
} Req;

typedef struct {
    const Options *o;
    Req *reqs;
    double t0;
    pthread_mutex_t mu;
    int next;                    /* --concurrency: the next request to take */
} Run;

/* ---- HTTP over a socket ---- */

static int connect_to(const Options *o) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai, *p;
    if (getaddrinfo(o->host, o->port, &hints, &ai)) return -1;
    int fd = -1;
    for (p = ai; p; p = p->ai_next) {
        fd = socket(p->ai_family, p->ai_socktype, p->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, p->ai_addr, p->ai_addrlen) == 0) break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

static int send_all(int fd, const char *s, size_t n) {
    while (n) {
        ssize_t k = send(fd, s, n, MSG_NOSIGNAL);
        if (k <= 0) return -1;
        s += k;
        n -= (size_t)k;
    }
    return 0;
}

/* The response body as it arrives, de-chunked (Transfer-Encoding: chunked),
 * cut into SSE events ("...\n\n"), each handed to on_event. */
typedef struct {
    int headers_done, chunked, status;
    char *head;                  /* header bytes so far */
    size_t head_len;
    long chunk_left;             /* chunked: body bytes left in this chunk; -1: reading a size line */
    char line[64];
    int line_len;
    int skip_crlf;               /* bytes of CRLF after a chunk still to skip */
    char *ev;                    /* the event being gathered */
    size_t ev_len, ev_cap;
    int done;                    /* [DONE] seen */
} Http;

static void ev_add(Http *h, const char *s, size_t n) {
    if (h->ev_len + n + 1 > h->ev_cap) {
        h->ev_cap = (h->ev_len + n + 1) * 2;
        h->ev = realloc(h->ev, h->ev_cap);
    }
    memcpy(h->ev + h->ev_len, s, n);
    h->ev_len += n;
    h->ev[h->ev_len] = 0;
}

/* One SSE event's data line: its text, its usage. */
static void on_event(Req *r, Http *h, const char *data, double now) {
    if (!strcmp(data, "[DONE]")) {
        h->done = 1;
        return;
    }
    cJSON *o = cJSON_Parse(data);
    if (!o) return;
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    const cJSON *text = cJSON_GetObjectItem(ch, "text");
    if (!text) text = cJSON_GetObjectItem(cJSON_GetObjectItem(ch, "delta"), "content");
    if (cJSON_IsString(text) && text->valuestring[0]) {
        double t = now - r->start;
        if (r->events == 0) {
            r->ttft = t;
        } else {
            if (r->n_gaps == r->cap_gaps) {
                r->cap_gaps = r->cap_gaps ? 2 * r->cap_gaps : 64;
                r->gaps = realloc(r->gaps, (size_t)r->cap_gaps * sizeof *r->gaps);
            }
            r->gaps[r->n_gaps++] = t - r->e2el;
        }
        r->e2el = t;             /* the last text so far */
        r->events++;
    }
    const cJSON *u = cJSON_GetObjectItem(o, "usage");
    const cJSON *ct = cJSON_GetObjectItem(u, "completion_tokens");
    if (cJSON_IsNumber(ct)) r->out_tokens = ct->valueint;
    cJSON_Delete(o);
}

/* Body bytes (de-chunked): events end at a blank line. */
static void body_bytes(Req *r, Http *h, const char *s, size_t n, double now) {
    ev_add(h, s, n);
    char *end;
    while (h->ev && (end = strstr(h->ev, "\n\n"))) {
        *end = 0;
        for (char *line = h->ev; line && *line;) {
            char *nl = strchr(line, '\n');
            if (nl) *nl = 0;
            if (!strncmp(line, "data: ", 6)) on_event(r, h, line + 6, now);
            line = nl ? nl + 1 : NULL;
        }
        size_t used = (size_t)(end + 2 - h->ev);
        memmove(h->ev, end + 2, h->ev_len - used + 1);
        h->ev_len -= used;
    }
}

static void feed(Req *r, Http *h, const char *s, size_t n, double now) {
    if (!h->headers_done) {
        h->head = realloc(h->head, h->head_len + n + 1);
        memcpy(h->head + h->head_len, s, n);
        h->head_len += n;
        h->head[h->head_len] = 0;
        char *end = strstr(h->head, "\r\n\r\n");
        if (!end) return;
        h->headers_done = 1;
        *end = 0;
        sscanf(h->head, "HTTP/%*s %d", &h->status);
        for (char *p = h->head; *p; p++) *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
        h->chunked = strstr(h->head, "transfer-encoding: chunked") != NULL;
        h->chunk_left = -1;
        size_t rest = h->head_len - (size_t)(end + 4 - h->head);
        char *tail = malloc(rest + 1);
        memcpy(tail, end + 4, rest);
        feed(r, h, tail, rest, now);
        free(tail);
        return;
    }
    if (!h->chunked) {
        body_bytes(r, h, s, n, now);
        return;
    }
    while (n) {
        if (h->skip_crlf) {
            h->skip_crlf--;
            s++, n--;
        } else if (h->chunk_left < 0) {   /* the size line, in hex */
            char c = *s++;
            n--;
            if (c == '\n') {
                h->line[h->line_len] = 0;
                h->chunk_left = strtol(h->line, NULL, 16);
                h->line_len = 0;
                if (h->chunk_left == 0) return;   /* the last chunk */
            } else if (c != '\r' && h->line_len < (int)sizeof h->line - 1) {
                h->line[h->line_len++] = c;
            }
        } else {
            size_t k = (size_t)h->chunk_left < n ? (size_t)h->chunk_left : n;
            body_bytes(r, h, s, k, now);
            s += k, n -= k;
            h->chunk_left -= (long)k;
            if (h->chunk_left == 0) h->chunk_left = -1, h->skip_crlf = 2;
        }
    }
}

static char *request_body(const Options *o, const char *prompt) {
    cJSON *b = cJSON_CreateObject();
    if (o->model) cJSON_AddStringToObject(b, "model", o->model);
    if (o->chat) {
        cJSON *ms = cJSON_AddArrayToObject(b, "messages"), *m = cJSON_CreateObject();
        cJSON_AddItemToArray(ms, m);
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", prompt);
    } else {
        cJSON_AddStringToObject(b, "prompt", prompt);
    }
    cJSON_AddNumberToObject(b, "max_tokens", o->max_tokens);
    cJSON_AddNumberToObject(b, "temperature", o->temperature);
    if (o->ignore_eos) cJSON_AddBoolToObject(b, "ignore_eos", 1);
    cJSON_AddBoolToObject(b, "stream", 1);
    cJSON_AddBoolToObject(cJSON_AddObjectToObject(b, "stream_options"), "include_usage", 1);
    char *s = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    return s;
}

static void run_one(Run *run, int i) {
    const Options *o = run->o;
    Req *r = &run->reqs[i];
    int cut = o->disconnect_every > 0 && (i + 1) % o->disconnect_every == 0;
    char *body = request_body(o, r->prompt);
    char head[1024];
    int hn = snprintf(head, sizeof head, "POST %s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
                      "Accept: text/event-stream\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                      o->endpoint, o->host, o->port, strlen(body));
    r->start = clock_seconds() - run->t0;
    int fd = connect_to(o);
    Http h = {0};
    if (fd < 0) {
        snprintf(r->error, sizeof r->error, "cannot connect to %.100s:%s", o->host, o->port);
    } else if (send_all(fd, head, (size_t)hn) || send_all(fd, body, strlen(body))) {
        snprintf(r->error, sizeof r->error, "send: %s", strerror(errno));
    } else {
        char buf[16384];
        ssize_t n;
        while ((n = recv(fd, buf, sizeof buf, 0)) > 0) {
            feed(r, &h, buf, (size_t)n, clock_seconds() - run->t0);
            if (cut && r->events > 0) {
                r->disconnected = 1;
                break;
            }
            if (h.done) break;
        }
        double end = clock_seconds() - run->t0 - r->start;
        r->status = h.status;
        if (!r->disconnected) {
            if (h.status != 200) {
                snprintf(r->error, sizeof r->error, "status %d", h.status);
                if (h.ev && h.ev_len) snprintf(r->error, sizeof r->error, "status %d: %.150s", h.status, h.ev);
            } else if (!h.done) {
                snprintf(r->error, sizeof r->error, "the stream ended without [DONE]");
            } else {
                r->ok = 1;
                r->e2el = end;
                if (r->out_tokens == 0) r->out_tokens = r->events;
            }
        }
    }
    if (fd >= 0) close(fd);
    free(h.head);
    free(h.ev);
    cJSON_free(body);
}

static void *closed_loop(void *arg) {
    Run *run = arg;
    for (;;) {
        pthread_mutex_lock(&run->mu);
        int i = run->next < run->o->requests ? run->next++ : -1;
        pthread_mutex_unlock(&run->mu);
        if (i < 0) return NULL;
        run_one(run, i);
    }
}

typedef struct {
    Run *run;
    int i;
} OneArg;

static void *open_loop(void *arg) {
    OneArg *a = arg;
    double wait = a->run->reqs[a->i].arrival - (clock_seconds() - a->run->t0);
    if (wait > 0) {
        struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
        nanosleep(&ts, NULL);
    }
    run_one(a->run, a->i);
    return NULL;
}

/* ---- prompts ---- */

static unsigned long long rng_next(unsigned long long *s) {   /* splitmix64 */
    unsigned long long z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double rng_unit(unsigned long long *s) { return (double)(rng_next(s) >> 11) / 9007199254740992.0; }

/* n prompts of about chars bytes, each starting at a line of the corpus
 * (a few fixed ones if there is no corpus). */
static int make_prompts(const Options *o, Req *reqs, unsigned long long *rng) {
    static const char *const fixed[] = {"ROMEO:", "JULIET:\nO Romeo, Romeo!", "First Citizen:\nBefore we proceed",
                                        "KING RICHARD III:\nNow is the winter"};
    char *text = NULL;
    long size = 0;
    FILE *f = o->corpus ? fopen(o->corpus, "rb") : NULL;
    if (f) {
        fseek(f, 0, SEEK_END);
        size = ftell(f);
        fseek(f, 0, SEEK_SET);
        text = malloc((size_t)size + 1);
        if (!text || fread(text, 1, (size_t)size, f) != (size_t)size) size = 0;
        fclose(f);
    }
    if (size <= o->prompt_chars * 2) {
        fprintf(stderr, "bench_serve: no corpus%s%s: %zu fixed prompts\n", o->corpus ? " at " : "",
                o->corpus ? o->corpus : "", sizeof fixed / sizeof fixed[0]);
        for (int i = 0; i < o->requests; i++) reqs[i].prompt = strdup(fixed[i % 4]);
        free(text);
        return 0;
    }
    for (int i = 0; i < o->requests; i++) {
        long at = (long)(rng_unit(rng) * (double)(size - o->prompt_chars - 1));
        while (at > 0 && text[at - 1] != '\n') at--;
        reqs[i].prompt = strndup(text + at, (size_t)o->prompt_chars);
    }
    free(text);
    return 0;
}

/* ---- figures ---- */

/* Linear interpolation between ranks (numpy's default) of n sorted values. */
static double pct(const double *v, int n, double p) {
    if (n == 0) return 0;
    double x = p / 100.0 * (n - 1);
    int k = (int)x;
    return k + 1 < n ? v[k] + (x - k) * (v[k + 1] - v[k]) : v[n - 1];
}

static void report(const char *name, double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += v[i];
    printf("%-5s ms  mean %9.2f  median %9.2f  p90 %9.2f  p99 %9.2f  (%d values)\n", name,
           n ? 1e3 * sum / n : 0.0, 1e3 * pct(v, n, 50), 1e3 * pct(v, n, 90), 1e3 * pct(v, n, 99), n);
}

/* The model the server serves: GET /v1/models, the first id. */
static char *served_model(const Options *o) {
    int fd = connect_to(o);
    if (fd < 0) return NULL;
    char req[512], buf[65536];
    int n = snprintf(req, sizeof req, "GET /v1/models HTTP/1.1\r\nHost: %s:%s\r\nConnection: close\r\n\r\n",
                     o->host, o->port);
    size_t got = 0;
    ssize_t k;
    if (send_all(fd, req, (size_t)n) == 0)
        while (got < sizeof buf - 1 && (k = recv(fd, buf + got, sizeof buf - 1 - got, 0)) > 0) got += (size_t)k;
    close(fd);
    buf[got] = 0;
    char *body = strstr(buf, "\r\n\r\n"), *id = NULL;
    cJSON *j = body ? cJSON_Parse(body + 4) : NULL;
    const cJSON *s = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "data"), 0), "id");
    if (cJSON_IsString(s)) id = strdup(s->valuestring);
    cJSON_Delete(j);
    return id;
}

static void usage(FILE *f) {
    fprintf(f,
        "usage: bench_serve --url http://HOST:PORT [options]\n"
        "  --url URL            the server (http only)\n"
        "  --model NAME         the model to ask for (default: the first of /v1/models)\n"
        "  --chat               /v1/chat/completions (default /v1/completions)\n"
        "  --requests N         requests to send (default 32)\n"
        "  --concurrency C      C clients, each sending its next request when one ends (default 1)\n"
        "  --rate R             instead: Poisson arrivals, R requests per second\n"
        "  --max-tokens N       tokens per request (default 64)\n"
        "  --ignore-eos         ask for exactly max-tokens (the server's ignore_eos)\n"
        "  --temperature T      (default 0)\n"
        "  --prompt-chars N     prompt length in bytes of corpus (default 200)\n"
        "  --corpus FILE        where prompts come from (default ../shared/corpus/tinyshakespeare.txt)\n"
        "  --seed S             prompts and arrival times (default 1)\n"
        "  --disconnect-every K every K-th request leaves after its first text\n");
}

static int parse_args(int argc, char **argv, Options *o) {
    *o = (Options){.requests = 32, .concurrency = 1, .max_tokens = 64, .prompt_chars = 200, .seed = 1,
                   .corpus = "../shared/corpus/tinyshakespeare.txt"};
    Err e;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int st = ST_OK;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--chat")) {
            o->chat = 1;
            continue;
        } else if (!strcmp(a, "--ignore-eos")) {
            o->ignore_eos = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "bench_serve: %s: missing value (see --help)\n", a);
            return -1;
        }
        i++;
        if (!strcmp(a, "--url")) o->url = v;
        else if (!strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--corpus")) o->corpus = v;
        else if (!strcmp(a, "--requests")) st = parse_int(a, v, 1, 1000000, &o->requests, &e);
        else if (!strcmp(a, "--concurrency")) st = parse_int(a, v, 1, 4096, &o->concurrency, &e);
        else if (!strcmp(a, "--max-tokens")) st = parse_int(a, v, 1, 1 << 20, &o->max_tokens, &e);
        else if (!strcmp(a, "--prompt-chars")) st = parse_int(a, v, 1, 1 << 20, &o->prompt_chars, &e);
        else if (!strcmp(a, "--disconnect-every")) st = parse_int(a, v, 1, 1 << 30, &o->disconnect_every, &e);
        else if (!strcmp(a, "--seed")) o->seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--rate") || !strcmp(a, "--temperature")) {
            char *end;
            double d = strtod(v, &end);
            if (end == v || *end || d < 0 || (!strcmp(a, "--rate") && d <= 0)) {
                fprintf(stderr, "bench_serve: %s: '%s' is not a %snumber\n", a, v, a[2] == 'r' ? "positive " : "");
                return -1;
            }
            if (a[2] == 'r') o->rate = d;
            else o->temperature = d;
        } else {
            fprintf(stderr, "bench_serve: unknown option %s (see --help)\n", a);
            return -1;
        }
        if (st) {
            fprintf(stderr, "bench_serve: %s\n", e.msg);
            return -1;
        }
    }
    if (!o->url || strncmp(o->url, "http://", 7)) {
        fprintf(stderr, "bench_serve: --url http://HOST:PORT is required\n");
        return -1;
    }
    const char *hp = o->url + 7, *colon = strrchr(hp, ':'), *slash = strchr(hp, '/');
    size_t hl = colon ? (size_t)(colon - hp) : slash ? (size_t)(slash - hp) : strlen(hp);
    if (hl == 0 || hl >= sizeof o->host) {
        fprintf(stderr, "bench_serve: --url %s: no host\n", o->url);
        return -1;
    }
    memcpy(o->host, hp, hl);
    o->host[hl] = 0;
    snprintf(o->port, sizeof o->port, "%.*s", colon ? (int)strcspn(colon + 1, "/") : 2, colon ? colon + 1 : "80");
    o->endpoint = o->chat ? "/v1/chat/completions" : "/v1/completions";
    return 0;
}

int main(int argc, char **argv) {
    Options o;
    if (parse_args(argc, argv, &o)) return 2;
    printf("command:");
    for (int i = 0; i < argc; i++) printf(" %s", argv[i]);
    printf("\n");
    char *model = NULL;
    if (!o.model && !(o.model = model = served_model(&o))) {
        fprintf(stderr, "bench_serve: %s/v1/models: no model named (is the server up?)\n", o.url);
        return 1;
    }
    Req *reqs = calloc((size_t)o.requests, sizeof *reqs);
    unsigned long long rng = o.seed;
    make_prompts(&o, reqs, &rng);
    double t = 0;
    for (int i = 0; i < o.requests && o.rate > 0; i++) {   /* Poisson: exponential gaps */
        t += -log(1.0 - rng_unit(&rng)) / o.rate;
        reqs[i].arrival = t;
    }
    Run run = {.o = &o, .reqs = reqs};
    pthread_mutex_init(&run.mu, NULL);
    int n_threads = o.rate > 0 ? o.requests : (o.concurrency < o.requests ? o.concurrency : o.requests);
    pthread_t *th = calloc((size_t)n_threads, sizeof *th);
    OneArg *args = calloc((size_t)n_threads, sizeof *args);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 << 10);
    run.t0 = clock_seconds();
    for (int i = 0; i < n_threads; i++) {
        args[i] = (OneArg){&run, i};
        pthread_create(&th[i], &attr, o.rate > 0 ? open_loop : closed_loop, o.rate > 0 ? (void *)&args[i] : (void *)&run);
    }
    for (int i = 0; i < n_threads; i++) pthread_join(th[i], NULL);
    double dur = clock_seconds() - run.t0;

    int ok = 0, cut = 0, failed = 0, n_itl = 0, n_tpot = 0;
    long out = 0;
    for (int i = 0; i < o.requests; i++) n_itl += reqs[i].n_gaps;
    double *ttft = calloc((size_t)o.requests + 1, sizeof(double)), *e2el = calloc((size_t)o.requests + 1, sizeof(double));
    double *tpot = calloc((size_t)o.requests + 1, sizeof(double)), *itl = calloc((size_t)n_itl + 1, sizeof(double));
    n_itl = 0;
    for (int i = 0; i < o.requests; i++) {
        Req *r = &reqs[i];
        if (r->disconnected) {
            cut++;
            continue;
        }
        if (!r->ok) {
            if (failed++ < 3) fprintf(stderr, "bench_serve: request %d failed: %s\n", i, r->error);
            continue;
        }
        ttft[ok] = r->ttft;
        e2el[ok] = r->e2el;
        ok++;
        out += r->out_tokens;
        if (r->out_tokens > 1) tpot[n_tpot++] = (r->e2el - r->ttft) / (r->out_tokens - 1);
        for (int k = 0; k < r->n_gaps; k++) itl[n_itl++] = r->gaps[k];
    }
    printf("model %s at %s%s, %s, %d requests, max %d tokens%s\n", o.model, o.url, o.endpoint,
           o.rate > 0 ? "Poisson arrivals" : "closed loop", o.requests, o.max_tokens,
           o.ignore_eos ? " (ignore_eos)" : "");
    if (o.rate > 0) printf("rate %.2f requests/s\n", o.rate);
    else printf("concurrency %d\n", o.concurrency);
    printf("completed %d, failed %d, disconnected on purpose %d\n", ok, failed, cut);
    printf("duration %.2f s, request throughput %.2f requests/s, output tokens %ld, output %.1f tok/s\n",
           dur, ok / dur, out, out / dur);
    report("TTFT", ttft, ok);
    report("TPOT", tpot, n_tpot);
    report("ITL", itl, n_itl);
    report("E2EL", e2el, ok);
    for (int i = 0; i < o.requests; i++) {
        free(reqs[i].prompt);
        free(reqs[i].gaps);
    }
    free(ttft), free(e2el), free(tpot), free(itl), free(reqs), free(th), free(args), free(model);
    pthread_attr_destroy(&attr);
    return failed ? 1 : 0;
}
