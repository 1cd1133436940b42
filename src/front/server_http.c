/* server_http.c - the server's HTTP threads, one per connection: a
 * request read (http1.h), its body parsed (openai.h) and put on the queue
 * as a Job, and the job's text sent back whole or as Server-Sent Events;
 * the listening socket, the thread that accepts, and the server started
 * and stopped (srv_init, srv_free). server_engine.c has the request's whole
 * path. */
#include "front/server_internal.h"
#include "front/http1.h"
#include "front/strbuf.h"
#include "base/clock.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ==== the HTTP side ========================================================== */

typedef struct Track Track;

/* One open connection, on the server's list (under its lock) so that
 * srv_free can shut the sockets still open and wait for their threads. */
struct Track {
    long id;
    int fd;
    Server *srv;
    Track *prev, *next;
};

/* One request on a connection, from its head to the end of its answer. */
typedef struct {
    Server *srv;
    long conn;
    HttpConn *hc;
    int fd;                      /* the connection's socket (to notice a client gone) */
    HttpBody body;
    int counted_off;             /* the body is whole: its bytes are off the server's count */
    int keep;                    /* the connection stays open after the answer */
    Job *job;
    int queued;                  /* the job went on the queue (the engine has it) */
    char *out;                   /* (out_len) a stream's next bytes */
    size_t out_len;
    int ended;                   /* [DONE] is in out */
    long bytes_sent;
    int first_byte;
    int status;
} Conn;

/* Every connection's unfinished body counts against one bound
 * (--max-buffered), so that a thousand slow bodies cannot take the memory:
 * asked by http_read_body before a body's buffer grows (or, new_cap below
 * cap, told that it shrank back). */
static int body_grow(void *ctx, size_t cap, size_t new_cap, HttpFail *f) {
    Server *s = ctx;
    pthread_mutex_lock(&s->mu);
    int room = new_cap <= cap || s->buffered + (new_cap - cap) <= s->cfg.max_buffered;
    if (room) s->buffered = s->buffered + new_cap - cap;
    else s->metrics.rejected_full++;
    pthread_mutex_unlock(&s->mu);
    if (room) return 0;
    f->status = 503;
    snprintf(f->msg, sizeof f->msg, "the server holds %zu bytes of request bodies not yet whole "
             "(--max-buffered); try again", s->cfg.max_buffered);
    return 1;
}

/* A body's bytes no longer held: taken off the server's count (once). */
static void release_body_count(Conn *k) {
    if (k->counted_off || !k->body.counted) return;
    pthread_mutex_lock(&k->srv->mu);
    k->srv->buffered -= k->body.counted;
    pthread_mutex_unlock(&k->srv->mu);
    k->counted_off = 1;
}

static void release_body(Conn *k) {
    release_body_count(k);
    free(k->body.p);
    k->body = (HttpBody){0};
}

/* Is the peer gone? A hang-up or an error on the socket: the connection is
 * dead both ways. End of file alone (POLLRDHUP) is not: a client may shut
 * down its sending side once the request is out and still read the answer
 * (a half-close), and from here that looks exactly like the FIN of a client
 * that closed for good. A client that did close is found when the answer is
 * written to it (the write fails, request_end cancels the job): for a
 * stream within a chunk or two, for a whole answer at its end, the request
 * having run to completion. */
static int peer_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = {.fd = fd, .events = 0};   /* POLLHUP and POLLERR are always reported */
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR));
}

static void wake_engine(Server *s) {
    pthread_mutex_lock(&s->mu);
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
}

/* The client left: mark the job, and tell the engine thread. */
static void job_cancel(Job *j) {
    pthread_mutex_lock(&j->mu);
    int was = j->cancel, ended = j->state == J_DONE || j->state == J_REFUSED;
    j->cancel = 1;
    pthread_mutex_unlock(&j->mu);
    if (!was && !ended) wake_engine(j->srv);
}

typedef int (*JobReady)(const Job *j);
static int accepted(const Job *j) { return j->state != J_QUEUED; }
static int finished(const Job *j) { return j->state == J_DONE || j->state == J_REFUSED; }

/* Has a streamed job something new for its client? */
static int news(const Job *j) {
    if (finished(j)) return 1;
    for (int i = 0; i < j->req.n; i++)
        if (j->ch[i].sent < j->ch[i].len || (j->ch[i].done && !j->ch[i].final_sent)) return 1;
    return 0;
}

/* Wait on the job (its lock held) until ready(j), looking at the socket
 * every 50 ms: -1 if the client went away first (the job is cancelled). */
/* Wait (j->mu held) until ready(j): 0; -1 if the peer left meanwhile (the
 * job is cancelled); 1 if max_s seconds (> 0) passed first. */
static int wait_for(Conn *k, JobReady ready, double max_s) {
    Job *j = k->job;
    double until = max_s > 0 ? clock_seconds() + max_s : 0;
    while (!ready(j)) {
        if (until && clock_seconds() >= until) return 1;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        if (!ready(j) && peer_gone(k->fd)) {
            pthread_mutex_unlock(&j->mu);
            job_cancel(j);
            pthread_mutex_lock(&j->mu);
            return -1;
        }
    }
    return 0;
}

static void out_add(Conn *k, Buf *b, char *chunk) {
    if (!chunk) {
        b->failed = 1;
        return;
    }
    buf_str(b, chunk);
    free(chunk);
}

/* The next SSE bytes of a streamed job into k->out: its new text, a final
 * chunk per choice that ended, then usage and [DONE]. -1: the client went
 * away (or memory ran out). */
/* The logprobs of ch not yet sent (under j->mu): none when not asked for. */
static SrvLogprobs logprobs_of(const Server *s, const Job *j, const JobChoice *ch) {
    static const SamplerLast none[1];   /* asked for, none yet: an empty list, not null */
    if (!j->req.sp.logprobs) return (SrvLogprobs){0};
    return (SrvLogprobs){.lp = ch->lp ? ch->lp + ch->lp_sent : none, .n = ch->n_lp - ch->lp_sent,
                         .top = j->req.sp.top_logprobs, .offset = ch->lp_offset, .tok = s->cfg.tok};
}

/* They went out: the next chunk starts after them. */
static void logprobs_sent(const Server *s, JobChoice *ch) {
    for (int i = ch->lp_sent; i < ch->n_lp; i++) {
        int n = tok_piece(s->cfg.tok, ch->lp[i].id, NULL, 0);
        ch->lp_offset += n > 0 ? (size_t)n : 0;
    }
    ch->lp_sent = ch->n_lp;
}

static int refill(Conn *k) {
    Job *j = k->job;
    Server *s = k->srv;
    Buf b = {0};
    pthread_mutex_lock(&j->mu);
    /* Nothing new for half the idle timeout (a request queued behind
     * others, a long prefill): an SSE comment line, which clients skip,
     * keeps the connection from being closed as idle. */
    int w = wait_for(k, news, s->cfg.idle_timeout / 2.0);
    if (w) {
        pthread_mutex_unlock(&j->mu);
        if (w < 0) return -1;
        free(k->out);
        k->out = strdup(SRV_SSE_KEEPALIVE);
        k->out_len = k->out ? strlen(k->out) : 0;
        return k->out ? 0 : -1;
    }
    SrvChunk c = {.chat = j->req.chat, .id = j->id, .model = s->cfg.model_id, .created = j->created,
                  .usage_null = j->req.include_usage};
    for (int i = 0; i < j->req.n; i++) {
        JobChoice *ch = &j->ch[i];
        c.index = i;
        c.finish = NULL;
        /* the logprobs of the tokens made so far go with the text that is ready */
        c.logprobs = logprobs_of(s, j, ch);
        if (ch->sent < ch->len) {
            c.text = ch->text + ch->sent;
            c.len = ch->len - ch->sent;
            c.role = !ch->role_sent;
            out_add(k, &b, srv_sse_chunk(&c));
            ch->sent = ch->len;
            ch->role_sent = 1;
            logprobs_sent(s, ch);
            c.logprobs = logprobs_of(s, j, ch);
        }
        if (ch->done && !ch->final_sent) {
            if (ch->finish == FIN_ERROR || ch->finish == FIN_CANCEL || j->error[0]) {
                SrvError err;
                srv_error_set(&err, ch->finish == FIN_CANCEL ? 503 : 500, "", "%s",
                              j->error[0] ? j->error : ch->finish == FIN_ERROR ? "error" : "cancelled: the server is stopping");
                err.type = "server_error";
                out_add(k, &b, srv_sse_error(&err));
            }
            c.text = j->req.chat ? NULL : "";
            c.len = 0;
            c.role = !ch->role_sent;
            c.finish = srv_finish_reason(ch->finish);
            out_add(k, &b, srv_sse_chunk(&c));
            ch->final_sent = ch->role_sent = 1;
            logprobs_sent(s, ch);
        }
    }
    if (j->state == J_DONE) {
        SrvUsage u = {.prompt_tokens = j->prompt_tokens, .cached_tokens = j->cached_tokens};
        for (int i = 0; i < j->req.n; i++) u.completion_tokens += j->ch[i].n_out;
        if (j->req.include_usage) {
            SrvChunk uc = c;
            uc.usage = &u;
            out_add(k, &b, srv_sse_chunk(&uc));
        }
        buf_str(&b, SRV_SSE_DONE);
        k->ended = 1;
    } else if (j->state == J_REFUSED) {   /* the server is stopping */
        buf_str(&b, SRV_SSE_DONE);
        k->ended = 1;
    }
    pthread_mutex_unlock(&j->mu);
    free(k->out);
    k->out = buf_take(&b);
    k->out_len = k->out ? strlen(k->out) : 0;
    return k->out ? 0 : -1;
}

/* The X-Chat-Template header every answer carries (and more lines). */
static void answer_headers(const Server *s, char *out, size_t cap, const char *more) {
    snprintf(out, cap, "%sX-Chat-Template: %s\r\n", more, s->cfg.chat->kind);
}

/* A whole answer: body (malloc'd, taken) with its type. 0, or -1 when the
 * client is gone. */
static int reply(Conn *k, int status, char *body, const char *type) {
    if (!body) {
        static const char oom[] = "{\"error\": {\"message\": \"out of memory\", \"type\": \"server_error\", "
                                  "\"param\": null, \"code\": null}}";
        body = strdup(oom);
        status = 500;
        if (!body) return -1;
    }
    size_t len = strlen(body);
    char extra[320];
    answer_headers(k->srv, extra, sizeof extra, "");
    int r = http_send_head(k->hc, status, type, extra, (long long)len, k->keep);
    if (!r) r = http_send(k->hc, body, len);
    free(body);
    k->status = status;
    k->bytes_sent = r ? 0 : (long)len;
    return r;
}

static int reply_error(Conn *k, const SrvError *err) {
    return reply(k, err->status, srv_error_json(err), "application/json");
}

static int answer_models(Conn *k) {
    Server *s = k->srv;
    return reply(k, 200, srv_models_json(s->cfg.model_id, s->start_time, s->context, s->cfg.chat->kind),
                 "application/json");
}

static int answer_metrics(Conn *k) {
    Server *s = k->srv;
    pthread_mutex_lock(&s->mu);
    SrvMetrics m = s->metrics;
    pthread_mutex_unlock(&s->mu);
    return reply(k, 200, srv_metrics_text(&m), "text/plain; version=0.0.4");
}

static void count_invalid(Server *s) {
    pthread_mutex_lock(&s->mu);
    s->metrics.rejected_invalid++;
    pthread_mutex_unlock(&s->mu);
}

/* /tokenize, /detokenize, /apply-template: answered on the HTTP thread
 * (the vocabulary and the template are read-only). */
static int answer_extension(Conn *k, const char *url) {
    Server *s = k->srv;
    SrvError err;
    const char *body = k->body.p ? k->body.p : "";
    char *json = !strcmp(url, "/tokenize") ? srv_tokenize_json(s->cfg.tok, body, k->body.len, &err)
               : !strcmp(url, "/detokenize") ? srv_detokenize_json(s->cfg.tok, body, k->body.len, &err)
               : srv_apply_template_json(&s->lim, body, k->body.len, &err);
    if (!json) {
        count_invalid(s);
        return reply_error(k, &err);
    }
    return reply(k, 200, json, "application/json");
}

/* Onto the server's queue; 503 (in err) when full or stopping. */
static int queue_job(Server *s, Job *j, SrvError *err) {
    pthread_mutex_lock(&s->mu);
    int limit = s->max_seqs + s->cfg.max_queue;
    if (s->stopping || s->in_flight >= limit) {
        if (!s->stopping) s->metrics.rejected_full++;
        pthread_mutex_unlock(&s->mu);
        return srv_error_set(err, 503, "", s->stopping ? "the server is shutting down"
                    : "the queue is full (%d requests in flight; --max-queue)", limit);
    }
    snprintf(j->id, sizeof j->id, "%s-%lx%05lx", j->req.chat ? "chatcmpl" : "cmpl", s->start_time, s->next_job);
    if (!j->req.seed_given) j->req.sp.seed = (unsigned long long)s->start_time * 1000003ull + (unsigned long long)s->next_job;
    s->next_job++;
    j->refs++;                   /* the engine's */
    if (s->queue_tail) s->queue_tail->next = j;
    else s->queue_head = j;
    s->queue_tail = j;
    s->in_flight++;
    s->metrics.http_in_flight = s->in_flight;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
    return ST_OK;
}

/* A stream: the head, then each piece of text as it comes, to [DONE]. */
static int stream_answer(Conn *k) {
    Server *s = k->srv;
    char extra[320];
    answer_headers(s, extra, sizeof extra, "Cache-Control: no-cache\r\n");
    k->status = 200;
    if (http_send_head(k->hc, 200, "text/event-stream", extra, -1, k->keep)) return -1;
    while (!k->ended) {
        if (refill(k)) return -1;
        if (!k->out_len) continue;
        if (http_send(k->hc, k->out, k->out_len)) return -1;
        k->bytes_sent += (long)k->out_len;
        if (!k->first_byte) {
            k->first_byte = 1;
            srv_note(s, "conn %ld: first byte of the stream sent (%s)", k->conn, k->job->id);
        }
    }
    return http_send_end(k->hc);
}

static int answer_generate(Conn *k, int chat) {
    Server *s = k->srv;
    SrvRequest req;
    SrvError err;
    if (srv_parse_request(k->body.p ? k->body.p : "", k->body.len, chat, &s->lim, &req, &err)) {
        count_invalid(s);
        srv_note(s, "conn %ld: invalid request: %s", k->conn, err.msg);
        return reply_error(k, &err);
    }
    Job *j = srv_job_new(s, k->conn, &req);
    if (!j) {
        srv_request_free(&req);
        return reply(k, 500, NULL, "");
    }
    k->job = j;
    if (queue_job(s, j, &err)) {
        srv_note(s, "conn %ld: refused, %s", k->conn, err.msg);
        return reply_error(k, &err);
    }
    k->queued = 1;
    pthread_mutex_lock(&s->mu);
    s->answering++;              /* until request_end: srv_free waits for it */
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&j->mu);
    int gone = wait_for(k, j->req.stream ? accepted : finished, 0);
    int state = j->state;
    pthread_mutex_unlock(&j->mu);
    if (gone) return -1;         /* the engine thread cancels it */
    if (state == J_REFUSED) {
        srv_error_set(&err, j->refused_status == 503 ? 503 : 400, "", "%s", j->why);
        return reply_error(k, &err);
    }
    if (j->req.stream) return stream_answer(k);
    /* Whole: every choice has ended. */
    pthread_mutex_lock(&j->mu);
    SrvChoice ch[RT_MAX_SAMPLES];
    SrvUsage u = {.prompt_tokens = j->prompt_tokens, .cached_tokens = j->cached_tokens};
    for (int i = 0; i < j->req.n; i++) {
        ch[i] = (SrvChoice){.text = j->ch[i].text, .len = j->ch[i].len, .finish = srv_finish_reason(j->ch[i].finish),
                            .logprobs = logprobs_of(s, j, &j->ch[i])};
        u.completion_tokens += j->ch[i].n_out;
    }
    char *body = NULL;
    if (j->error[0]) srv_error_set(&err, 500, "", "%s", j->error);
    else body = srv_response_json(chat, j->id, s->cfg.model_id, j->created, ch, j->req.n, &u);
    pthread_mutex_unlock(&j->mu);
    if (j->error[0]) {
        err.type = "server_error";
        return reply_error(k, &err);
    }
    return reply(k, 200, body, "application/json");
}

/* A whole request: routed and answered. 0, or -1 when the client is gone. */
static int answer(Conn *k, const char *method, const char *url) {
    SrvError err;
    int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/health") && get) return reply(k, 200, strdup("{\"status\":\"ok\"}"), "application/json");
    if (!strcmp(url, "/v1/models") && get) return answer_models(k);
    if (!strcmp(url, "/metrics") && get) return answer_metrics(k);
    if (!strcmp(url, "/v1/completions") && post) return answer_generate(k, 0);
    if (!strcmp(url, "/v1/chat/completions") && post) return answer_generate(k, 1);
    int extension = !strcmp(url, "/tokenize") || !strcmp(url, "/detokenize") || !strcmp(url, "/apply-template");
    if (extension && post) return answer_extension(k, url);
    int known = extension || !strcmp(url, "/health") || !strcmp(url, "/v1/models") || !strcmp(url, "/metrics") ||
                !strcmp(url, "/v1/completions") || !strcmp(url, "/v1/chat/completions");
    if (known) srv_error_set(&err, 405, "", "%s is not allowed on %s", method, url);
    else srv_error_set(&err, 404, "", "no such endpoint: %s %s", method, url);
    err.type = "invalid_request_error";
    return reply_error(k, &err);
}

/* The request has ended: its answer sent whole (failed 0), or cut off. A
 * job not done by then is cancelled: its client will read no more. */
static void request_end(Conn *k, int failed) {
    Server *s = k->srv;
    Job *j = k->job;
    int cut = 0;
    if (j && k->queued) {
        pthread_mutex_lock(&j->mu);
        cut = !finished(j) || (j->req.stream && !k->ended);
        pthread_mutex_unlock(&j->mu);
        if (cut) job_cancel(j);
        pthread_mutex_lock(&s->mu);
        s->answering--;
        pthread_cond_broadcast(&s->wake);
        pthread_mutex_unlock(&s->mu);
    }
    if (failed || cut)
        srv_note(s, "conn %ld: client disconnected before the end%s%s; %ld bytes sent", k->conn,
                 j ? ", cancelling " : "", j ? j->id : "", k->bytes_sent);
    else
        srv_note(s, "conn %ld: done, status %d, %ld bytes", k->conn, k->status, k->bytes_sent);
    srv_job_unref(j);
    release_body(k);
    free(k->out);
}

/* A request refused before it was whole (its head, its body, a deadline):
 * the refusal as an error object, the connection closed after it. */
static void refuse(Server *s, HttpConn *hc, long conn, const HttpFail *f) {
    SrvError err;
    srv_error_set(&err, f->status, "", "%s", f->msg);
    err.type = f->status == 503 ? "server_error" : "invalid_request_error";
    if (f->status != 503 && f->status != 408) count_invalid(s);
    srv_note(s, "conn %ld: refused %d: %s", conn, f->status, f->msg);
    Conn k = {.srv = s, .conn = conn, .hc = hc, .keep = 0};
    reply_error(&k, &err);
    http_linger(hc);   /* closed by conn_main, once off the server's list */
}

/* t off the server's list: srv_free no longer waits for it. */
static void untrack(Server *s, Track *t) {
    pthread_mutex_lock(&s->mu);
    if (t->prev) t->prev->next = t->next;
    else s->tracks = t->next;
    if (t->next) t->next->prev = t->prev;
    if (--s->n_conns == 0) pthread_cond_broadcast(&s->conns_gone);
    pthread_mutex_unlock(&s->mu);
}

/* A connection's thread: its requests one after another, until it closes,
 * a deadline passes, a request is refused before it was whole, or the
 * server stops. */
static void *conn_main(void *arg) {
    Track *t = arg;
    Server *s = t->srv;
    HttpConn hc = {.fd = t->fd, .idle_s = s->cfg.idle_timeout};
    HttpLimits lim = {.max_body = s->cfg.max_body};
    HttpHead *h = malloc(sizeof *h);
    for (int open = h != NULL; open;) {
        /* by request_timeout seconds after the connection opened, or after
         * its last answer ended, the next request must be whole */
        hc.deadline = clock_seconds() + s->cfg.request_timeout;
        HttpFail f;
        int r = http_read_head(&hc, &lim, h, &f);
        if (r == HTTP_REFUSED) {
            refuse(s, &hc, t->id, &f);
            break;
        }
        if (r == HTTP_TIMEOUT && hc.got == 0) {   /* a connection kept open, and no request came */
            srv_note(s, "conn %ld: idle for %d s (--idle-timeout): closed", t->id, s->cfg.idle_timeout);
            break;
        }
        if (r == HTTP_TIMEOUT) {
            srv_note(s, "conn %ld: no whole request within %d s (--request-timeout): closed", t->id,
                     s->cfg.request_timeout);
            refuse(s, &hc, t->id, &f);
            break;
        }
        if (r != HTTP_OK) break;
        if (h->chunked) srv_note(s, "conn %ld: %s %s arrived, chunked", t->id, h->method, h->path);
        else if (h->length >= 0) srv_note(s, "conn %ld: %s %s arrived, %lld bytes", t->id, h->method, h->path, h->length);
        else srv_note(s, "conn %ld: %s %s arrived", t->id, h->method, h->path);
        Conn k = {.srv = s, .conn = t->id, .hc = &hc, .fd = hc.fd, .body = {.grow = body_grow, .ctx = s}};
        r = http_read_body(&hc, h, &lim, &k.body, &f);
        if (r != HTTP_OK) {
            release_body(&k);
            if (r == HTTP_REFUSED || r == HTTP_TIMEOUT) refuse(s, &hc, t->id, &f);
            break;
        }
        release_body_count(&k);  /* whole: the body no longer counts as unfinished */
        pthread_mutex_lock(&s->mu);
        k.keep = h->keep_alive && !s->stopping;
        pthread_mutex_unlock(&s->mu);
        int failed = answer(&k, h->method, h->path) != 0;
        request_end(&k, failed);
        open = !failed && k.keep;
    }
    free(h);
    untrack(s, t);   /* s is not touched past this: srv_free may be freeing it */
    http_close(&hc);
    free(t);
    return NULL;
}

/* The accepting thread: each connection numbered (the trace's "conn N") and
 * given a thread, up to max_connections open; one more is closed at once. */
static void *accept_main(void *arg) {
    Server *s = arg;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* a connection's thread parses JSON (cJSON recurses at most 1000 deep)
     * and renders a prompt: 2 MiB is room to spare even under ASan, and
     * 4096 of them are 8 GiB of address space, not of memory */
    pthread_attr_setstacksize(&attr, (size_t)2 << 20);
    for (;;) {
        struct pollfd p[2] = {{.fd = s->listen_fd, .events = POLLIN}, {.fd = s->wake_fd[0], .events = POLLIN}};
        if (poll(p, 2, -1) < 0 && errno != EINTR) break;
        if (p[1].revents) break;     /* srv_free */
        if (!(p[0].revents & POLLIN)) continue;
        struct sockaddr_in from;
        socklen_t len = sizeof from;
        int fd = accept4(s->listen_fd, (struct sockaddr *)&from, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS) {
                struct timespec nap = {0, 50 * 1000 * 1000};   /* out of descriptors: wait, do not spin */
                nanosleep(&nap, NULL);
            }
            continue;
        }
        Track *t = calloc(1, sizeof *t);
        pthread_mutex_lock(&s->mu);
        int over = s->n_conns >= s->cfg.max_connections;
        long id = ++s->next_conn;
        if (t && !over) {
            *t = (Track){.id = id, .fd = fd, .srv = s, .next = s->tracks};
            if (s->tracks) s->tracks->prev = t;
            s->tracks = t;
            s->n_conns++;
        }
        pthread_mutex_unlock(&s->mu);
        if (!t || over) {
            srv_note(s, "conn %ld: closed at once: %s", id, over ? "--max-connections open already" : "out of memory");
            close(fd);
            free(t);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);   /* an SSE chunk goes out when written */
        char ip[INET_ADDRSTRLEN] = "?";
        inet_ntop(AF_INET, &from.sin_addr, ip, sizeof ip);
        srv_note(s, "conn %ld: opened from %s:%d", id, ip, ntohs(from.sin_port));
        pthread_t th;
        if (pthread_create(&th, &attr, conn_main, t) != 0) {
            srv_note(s, "conn %ld: closed at once: no thread for it", id);
            untrack(s, t);
            close(fd);
            free(t);
        }
    }
    pthread_attr_destroy(&attr);
    return NULL;
}
int srv_init(Server *s, Runtime *rt, const SrvConfig *cfg, Err *e) {
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    if (!s->cfg.max_buffered) s->cfg.max_buffered = (size_t)64 << 20;
    if (!s->cfg.max_connections) s->cfg.max_connections = 4096;
    if (!s->cfg.idle_timeout) s->cfg.idle_timeout = 60;
    if (!s->cfg.request_timeout) s->cfg.request_timeout = 60;
    s->rt = rt;
    s->listen_fd = s->wake_fd[0] = s->wake_fd[1] = -1;
    s->start_time = (long)time(NULL);
    RtStats rs = rt_stats(rt);   /* read here, before any HTTP thread starts */
    s->max_seqs = rs.engine.sched.max_seqs;
    s->context = rs.context;
    if (!s->cfg.max_prompt) s->cfg.max_prompt = (size_t)4 << 20;
    s->lim = (SrvLimits){.model_id = cfg->model_id, .n_vocab = tok_n_vocab(cfg->tok), .chat = cfg->chat,
                         .max_prompt = s->cfg.max_prompt,
                         .max_tokens_default = 16, .chat_max_tokens_default = rs.context};
    srv_metrics_init(&s->metrics);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    pthread_cond_init(&s->conns_gone, NULL);
    rt->release_finished = 1;   /* memory stays flat however many requests come */

    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int gai = getaddrinfo(cfg->host, NULL, &hints, &ai);
    if (gai) return err_set(e, ST_ARG, "--host %s: %s", cfg->host, gai_strerror(gai));
    struct sockaddr_in addr = *(struct sockaddr_in *)ai->ai_addr;
    freeaddrinfo(ai);
    addr.sin_port = htons((uint16_t)cfg->port);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr) || listen(fd, SOMAXCONN)) {
        if (fd >= 0) close(fd);
        return err_set(e, ST_IO, "cannot listen on %s:%d (in use, or not an address of this machine)",
                       cfg->host, cfg->port);
    }
    socklen_t len = sizeof addr;
    s->port = getsockname(fd, (struct sockaddr *)&addr, &len) ? cfg->port : ntohs(addr.sin_port);
    s->listen_fd = fd;
    if (pipe2(s->wake_fd, O_CLOEXEC) || pthread_create(&s->acceptor, NULL, accept_main, s)) {
        close(fd);
        s->listen_fd = -1;
        return err_set(e, ST_NOMEM, "cannot start the thread that accepts connections");
    }
    s->accepting = 1;
    return ST_OK;
}

void srv_free(Server *s) {
    /* Every answer under way is finished first: srv_run has ended or
     * cancelled its job, so a stream ends with its last chunk and [DONE]
     * and a whole answer is sent; only then are the sockets closed. A
     * client too slow to take its bytes is not waited for beyond
     * SRV_DRAIN_SECONDS. */
    if (s->accepting) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += SRV_DRAIN_SECONDS;
        pthread_mutex_lock(&s->mu);
        while (s->answering > 0 && pthread_cond_timedwait(&s->wake, &s->mu, &until) != ETIMEDOUT) {}
        pthread_mutex_unlock(&s->mu);
        /* no new connections; then every open one shut (a thread waiting
         * for a request reads the end, one writing fails), and waited for */
        if (write(s->wake_fd[1], "", 1) == 1) pthread_join(s->acceptor, NULL);
        close(s->listen_fd);
        pthread_mutex_lock(&s->mu);
        for (Track *t = s->tracks; t; t = t->next) shutdown(t->fd, SHUT_RDWR);
        while (s->n_conns > 0) pthread_cond_wait(&s->conns_gone, &s->mu);
        pthread_mutex_unlock(&s->mu);
    }
    for (int i = 0; i < 2; i++)
        if (s->wake_fd[i] >= 0) close(s->wake_fd[i]);
    /* Left after the threads: events never printed, jobs the engine holds. */
    for (SrvEvent *ev = s->events; ev;) {
        SrvEvent *next = ev->next;
        free(ev);
        ev = next;
    }
    for (Job *j = s->queue_head; j;) {
        Job *next = j->next;
        srv_job_unref(j);
        j = next;
    }
    for (int i = 0; i < s->n_live; i++) srv_job_unref(s->live[i]);
    free(s->live);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->wake);
    pthread_cond_destroy(&s->conns_gone);
    memset(s, 0, sizeof *s);
}
