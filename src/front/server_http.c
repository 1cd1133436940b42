/* server_http.c - the server's HTTP threads (libmicrohttpd's, one per
 * connection): a body gathered, parsed (openai.h), put on the queue as a
 * Job, and the job's text sent back whole or as Server-Sent Events; the
 * server started and stopped (srv_init, srv_free). server_engine.c has the
 * request's whole path. */
#include "front/server_internal.h"
#include "front/strbuf.h"
#include "base/clock.h"
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ==== the HTTP side ========================================================== */

/* One HTTP request (libmicrohttpd's per-request pointer). */
typedef struct Track Track;

typedef struct {
    Server *srv;
    long conn;
    Track *track;                /* the connection's deadline (below) */
    int fd;                      /* the connection's socket (to notice a client gone) */
    char *body;
    size_t len, cap;
    int too_big;
    int too_many;                /* the server holds max_buffered bytes of bodies: 503 */
    int counted_off;             /* the body is whole: its cap is off the server's count */
    Job *job;
    int queued;                  /* the job went on the queue (the engine has it) */
    /* a streamed response: bytes made and not yet sent */
    char *out;
    size_t out_len, out_off;
    int ended;                   /* [DONE] is in out */
    long bytes_sent;
    int first_byte;
    int status;
} Conn;

/* ---- the request deadline ----
 *
 * libmicrohttpd closes a connection that sends nothing for idle_timeout
 * seconds, but one that trickles a byte every few seconds is never idle and
 * could hold its thread forever. So every connection is tracked from the
 * moment it opens: by request_timeout seconds after it opened, or after its
 * last answer ended, its next request must be whole (headers and body), or
 * the reaper shuts its socket. An answer under way (waiting for the engine,
 * streaming) is never cut. The reaper shuts a duplicate of the socket's
 * descriptor, held until the connection is closed: the descriptor it uses
 * can never be one the system has since given to another connection. */
struct Track {
    long id;
    int fd;                      /* a dup of the connection's socket; -1 if none */
    double since;                /* when the wait for a whole request began */
    int whole;                   /* the request is whole: its answer is under way */
    Track *prev, *next;
};

/* The request on k's connection is whole (1), or its answer has ended (0). */
static void track_mark(Server *s, Track *t, int whole) {
    if (!t) return;
    pthread_mutex_lock(&s->mu);
    t->whole = whole;
    t->since = clock_seconds();
    pthread_mutex_unlock(&s->mu);
}

static void *reaper_main(void *arg) {
    Server *s = arg;
    pthread_mutex_lock(&s->mu);
    while (s->reaper_on) {
        double now = clock_seconds();
        long shut[64];
        int n = 0;
        for (Track *t = s->tracks; t; t = t->next)
            if (!t->whole && t->fd >= 0 && now - t->since > s->cfg.request_timeout) {
                shutdown(t->fd, SHUT_RDWR);   /* its thread's next read ends; libmicrohttpd closes it */
                t->whole = 1;                 /* once */
                if (n < 64) shut[n++] = t->id;
            }
        pthread_mutex_unlock(&s->mu);
        for (int i = 0; i < n; i++)
            srv_note(s, "conn %ld: no whole request within %d s (--request-timeout): closed", shut[i],
                     s->cfg.request_timeout);
        struct timespec nap = {0, 250 * 1000 * 1000};   /* a quarter of a second between looks */
        nanosleep(&nap, NULL);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* A body's bytes no longer held: freed, and taken off the server's count. */
static void release_body_count(Conn *k) {
    if (!k->cap) return;
    pthread_mutex_lock(&k->srv->mu);
    k->srv->buffered -= k->cap;
    pthread_mutex_unlock(&k->srv->mu);
    k->counted_off = 1;
}

static void release_body(Conn *k) {
    if (!k->counted_off) release_body_count(k);
    free(k->body);
    k->body = NULL;
    k->len = k->cap = 0;
    k->counted_off = 0;
}

/* Is the peer gone? A hang-up or an error on the socket: the connection is
 * dead both ways. End of file alone (POLLRDHUP) is not: a client may shut
 * down its sending side once the request is out and still read the answer
 * (a half-close), and from here that looks exactly like the FIN of a client
 * that closed for good. A client that did close is found when the answer is
 * written to it (libmicrohttpd then ends the request, request_done cancels
 * the job): for a stream within a chunk or two, for a whole answer at its
 * end, the request having run to completion. */
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
        k->out_off = 0;
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
    k->out_off = 0;
    return k->out ? 0 : -1;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    Conn *k = cls;
    while (k->out_off == k->out_len) {
        if (k->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        if (refill(k)) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = k->out_len - k->out_off < max ? k->out_len - k->out_off : max;
    memcpy(buf, k->out + k->out_off, n);
    k->out_off += n;
    k->bytes_sent += (long)n;
    if (!k->first_byte) {
        k->first_byte = 1;
        srv_note(k->srv, "conn %ld: first byte of the stream sent (%s)", k->conn, k->job->id);
    }
    return (ssize_t)n;
}

/* A whole response: body (malloc'd, handed over) with its type. */
static enum MHD_Result reply(struct MHD_Connection *c, Conn *k, int status, char *body, const char *type) {
    if (!body) {
        static char oom[] = "{\"error\": {\"message\": \"out of memory\", \"type\": \"server_error\", "
                            "\"param\": null, \"code\": null}}";
        body = strdup(oom);
        status = 500;
        if (!body) return MHD_NO;
    }
    size_t len = strlen(body);
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, "X-Chat-Template", k->srv->cfg.chat->kind);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    k->status = status;
    k->bytes_sent = (long)len;
    return ret;
}

static enum MHD_Result reply_error(struct MHD_Connection *c, Conn *k, const SrvError *err) {
    return reply(c, k, err->status, srv_error_json(err), "application/json");
}

static enum MHD_Result answer_models(struct MHD_Connection *c, Conn *k) {
    Server *s = k->srv;
    return reply(c, k, 200, srv_models_json(s->cfg.model_id, s->start_time, s->context, s->cfg.chat->kind),
                 "application/json");
}

static enum MHD_Result answer_metrics(struct MHD_Connection *c, Conn *k) {
    Server *s = k->srv;
    pthread_mutex_lock(&s->mu);
    SrvMetrics m = s->metrics;
    pthread_mutex_unlock(&s->mu);
    return reply(c, k, 200, srv_metrics_text(&m), "text/plain; version=0.0.4");
}

static void count_invalid(Server *s) {
    pthread_mutex_lock(&s->mu);
    s->metrics.rejected_invalid++;
    pthread_mutex_unlock(&s->mu);
}

/* /tokenize, /detokenize, /apply-template: answered on the HTTP thread
 * (the vocabulary and the template are read-only). */
static enum MHD_Result answer_extension(struct MHD_Connection *c, Conn *k, const char *url) {
    Server *s = k->srv;
    SrvError err;
    const char *body = k->body ? k->body : "";
    char *json = !strcmp(url, "/tokenize") ? srv_tokenize_json(s->cfg.tok, body, k->len, &err)
               : !strcmp(url, "/detokenize") ? srv_detokenize_json(s->cfg.tok, body, k->len, &err)
               : srv_apply_template_json(&s->lim, body, k->len, &err);
    if (!json) {
        count_invalid(s);
        return reply_error(c, k, &err);
    }
    return reply(c, k, 200, json, "application/json");
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

static enum MHD_Result answer_generate(struct MHD_Connection *c, Conn *k, int chat) {
    Server *s = k->srv;
    SrvRequest req;
    SrvError err;
    if (srv_parse_request(k->body ? k->body : "", k->len, chat, &s->lim, &req, &err)) {
        count_invalid(s);
        srv_note(s, "conn %ld: invalid request: %s", k->conn, err.msg);
        return reply_error(c, k, &err);
    }
    Job *j = srv_job_new(s, k->conn, &req);
    if (!j) {
        srv_request_free(&req);
        return reply(c, k, 500, NULL, "");
    }
    k->job = j;
    if (queue_job(s, j, &err)) {
        srv_note(s, "conn %ld: refused, %s", k->conn, err.msg);
        return reply_error(c, k, &err);
    }
    k->queued = 1;
    pthread_mutex_lock(&s->mu);
    s->answering++;              /* until request_done: srv_free waits for it */
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&j->mu);
    int gone = wait_for(k, j->req.stream ? accepted : finished, 0);
    int state = j->state;
    pthread_mutex_unlock(&j->mu);
    if (gone) return MHD_NO;     /* the engine thread cancels it */
    if (state == J_REFUSED) {
        srv_error_set(&err, j->refused_status == 503 ? 503 : 400, "", "%s", j->why);
        return reply_error(c, k, &err);
    }
    if (j->req.stream) {
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_reader, k, NULL);
        if (!r) return MHD_NO;
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(r, "X-Chat-Template", s->cfg.chat->kind);
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        k->status = 200;
        return ret;
    }
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
        return reply_error(c, k, &err);
    }
    return reply(c, k, 200, body, "application/json");
}

static enum MHD_Result handle_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                      const char *version, const char *upload, size_t *upload_size,
                                      void **req_cls) {
    Server *s = cls;
    Conn *k = *req_cls;
    if (!k) {                    /* the headers are in; the body follows */
        if (!(k = calloc(1, sizeof *k))) return MHD_NO;
        *req_cls = k;
        k->srv = s;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        k->track = ci ? ci->socket_context : NULL;
        k->conn = k->track ? k->track->id : 0;
        ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        k->fd = ci ? ci->connect_fd : -1;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        srv_note(s, "conn %ld: %s %s arrived%s%s%s", k->conn, method, url, cl ? ", " : "", cl ? cl : "",
             cl ? " bytes" : "");
        if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body) k->too_big = 1;
        if (!k->too_big) return MHD_YES;
    }
    if (*upload_size) {          /* a piece of the body */
        if (!k->too_big && k->len + *upload_size > s->cfg.max_body) {
            k->too_big = 1;
            release_body(k);
        }
        if (!k->too_big && !k->too_many) {
            if (k->len + *upload_size > k->cap) {
                size_t cap = k->cap ? k->cap : 4096;
                while (cap < k->len + *upload_size) cap *= 2;
                /* every connection's unfinished body counts against one bound,
                 * so that a thousand slow bodies cannot take the memory */
                pthread_mutex_lock(&s->mu);
                int room = s->buffered + (cap - k->cap) <= s->cfg.max_buffered;
                if (room) s->buffered += cap - k->cap;
                pthread_mutex_unlock(&s->mu);
                if (!room) {
                    k->too_many = 1;
                    release_body(k);
                    *upload_size = 0;
                    return MHD_YES;
                }
                char *grown = realloc(k->body, cap);
                if (!grown) {
                    k->cap = cap;    /* counted: release_body takes it back */
                    release_body(k);
                    return MHD_NO;
                }
                k->body = grown;
                k->cap = cap;
            }
            memcpy(k->body + k->len, upload, *upload_size);
            k->len += *upload_size;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    track_mark(s, k->track, 1);   /* whole: no deadline now */
    SrvError err;
    if (k->too_big) {
        count_invalid(s);
        srv_error_set(&err, 413, "", "the body is larger than %zu bytes (--max-body)", s->cfg.max_body);
        return reply_error(c, k, &err);
    }
    if (k->too_many) {
        pthread_mutex_lock(&s->mu);
        s->metrics.rejected_full++;
        pthread_mutex_unlock(&s->mu);
        srv_error_set(&err, 503, "", "the server holds %zu bytes of request bodies not yet whole "
                      "(--max-buffered); try again", s->cfg.max_buffered);
        return reply_error(c, k, &err);
    }
    release_body_count(k);   /* whole: the body no longer counts as unfinished */
    int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/health") && get) return reply(c, k, 200, strdup("{\"status\":\"ok\"}"), "application/json");
    if (!strcmp(url, "/v1/models") && get) return answer_models(c, k);
    if (!strcmp(url, "/metrics") && get) return answer_metrics(c, k);
    if (!strcmp(url, "/v1/completions") && post) return answer_generate(c, k, 0);
    if (!strcmp(url, "/v1/chat/completions") && post) return answer_generate(c, k, 1);
    int extension = !strcmp(url, "/tokenize") || !strcmp(url, "/detokenize") || !strcmp(url, "/apply-template");
    if (extension && post) return answer_extension(c, k, url);
    int known = extension || !strcmp(url, "/health") || !strcmp(url, "/v1/models") || !strcmp(url, "/metrics") ||
                !strcmp(url, "/v1/completions") || !strcmp(url, "/v1/chat/completions");
    if (known) srv_error_set(&err, 405, "", "%s is not allowed on %s", method, url);
    else srv_error_set(&err, 404, "", "no such endpoint: %s %s", method, url);
    err.type = "invalid_request_error";
    return reply_error(c, k, &err);
}

/* The request has ended: sent whole, or cut off. A job not done by then is
 * cancelled: its client will read no more. */
static void request_done(void *cls, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode why) {
    Server *s = cls;
    Conn *k = *req_cls;
    if (!k) return;
    *req_cls = NULL;
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
    if (why != MHD_REQUEST_TERMINATED_COMPLETED_OK || cut)
        srv_note(s, "conn %ld: client disconnected before the end%s%s; %ld bytes sent", k->conn,
             j ? ", cancelling " : "", j ? j->id : "", k->bytes_sent);
    else
        srv_note(s, "conn %ld: done, status %d, %ld bytes", k->conn, k->status, k->bytes_sent);
    track_mark(s, k->track, 0);   /* the next request's wait begins */
    srv_job_unref(j);
    release_body(k);
    free(k->out);
    free(k);
}

/* A connection opened: number it (the trace's "conn N"). */
static void connection_event(void *cls, struct MHD_Connection *c, void **socket_ctx,
                             enum MHD_ConnectionNotificationCode what) {
    Server *s = cls;
    Track *t = *socket_ctx;
    if (what == MHD_CONNECTION_NOTIFY_CLOSED) {
        if (!t) return;
        pthread_mutex_lock(&s->mu);
        if (t->prev) t->prev->next = t->next;
        else s->tracks = t->next;
        if (t->next) t->next->prev = t->prev;
        pthread_mutex_unlock(&s->mu);
        if (t->fd >= 0) close(t->fd);
        free(t);
        *socket_ctx = NULL;
        return;
    }
    if (what != MHD_CONNECTION_NOTIFY_STARTED) return;
    t = calloc(1, sizeof *t);   /* without it the connection is served, only not watched */
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    pthread_mutex_lock(&s->mu);
    long n = ++s->next_conn;
    if (t) {
        t->id = n;
        t->fd = ci ? dup(ci->connect_fd) : -1;
        t->since = clock_seconds();
        t->next = s->tracks;
        if (s->tracks) s->tracks->prev = t;
        s->tracks = t;
    }
    pthread_mutex_unlock(&s->mu);
    *socket_ctx = t;
    ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    char addr[64] = "?";
    if (ci && ci->client_addr && ci->client_addr->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)ci->client_addr;
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
        snprintf(addr, sizeof addr, "%s:%d", ip, ntohs(in->sin_port));
    }
    srv_note(s, "conn %ld: opened from %s", n, addr);
}

int srv_init(Server *s, Runtime *rt, const SrvConfig *cfg, Err *e) {
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    if (!s->cfg.max_buffered) s->cfg.max_buffered = (size_t)64 << 20;
    if (!s->cfg.max_connections) s->cfg.max_connections = 4096;
    if (!s->cfg.idle_timeout) s->cfg.idle_timeout = 60;
    if (!s->cfg.request_timeout) s->cfg.request_timeout = 60;
    s->rt = rt;
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
    rt->release_finished = 1;   /* memory stays flat however many requests come */

    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int gai = getaddrinfo(cfg->host, NULL, &hints, &ai);
    if (gai) return err_set(e, ST_ARG, "--host %s: %s", cfg->host, gai_strerror(gai));
    struct sockaddr_in addr = *(struct sockaddr_in *)ai->ai_addr;
    freeaddrinfo(ai);
    addr.sin_port = htons((uint16_t)cfg->port);
    s->daemon = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL,
                                 (uint16_t)cfg->port, NULL, NULL, handle_request, s,
                                 MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                                 MHD_OPTION_NOTIFY_COMPLETED, request_done, s,
                                 MHD_OPTION_NOTIFY_CONNECTION, connection_event, s,
                                 /* a connection beyond the cap is closed as it is accepted; one
                                  * that sends and takes nothing for idle_timeout seconds is closed
                                  * (a thread waiting in our handler or stream reader for the
                                  * engine is not polled, so a queued request is never cut) */
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->cfg.max_connections,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->cfg.idle_timeout,
                                 /* a connection's thread parses JSON (cJSON recurses at most
                                  * 1000 deep) and renders a prompt: 2 MiB is room to spare even
                                  * under ASan, and 4096 of them are 8 GiB of address space, not
                                  * of memory */
                                 MHD_OPTION_THREAD_STACK_SIZE, (size_t)2 << 20,
                                 MHD_OPTION_END);
    if (!s->daemon)
        return err_set(e, ST_IO, "cannot listen on %s:%d (in use, or not an address of this machine)",
                       cfg->host, cfg->port);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : cfg->port;
    s->reaper_on = 1;
    if (pthread_create(&s->reaper, NULL, reaper_main, s) != 0) {
        s->reaper_on = 0;
        MHD_stop_daemon(s->daemon);
        s->daemon = NULL;
        return err_set(e, ST_NOMEM, "cannot start the thread that watches request deadlines");
    }
    return ST_OK;
}

void srv_free(Server *s) {
    /* Every answer under way is finished first: srv_run has ended or
     * cancelled its job, so a stream ends with its last chunk and [DONE]
     * and a whole answer is sent; only then are the sockets closed. A
     * client too slow to take its bytes is not waited for beyond
     * SRV_DRAIN_SECONDS. */
    if (s->daemon) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += SRV_DRAIN_SECONDS;
        pthread_mutex_lock(&s->mu);
        while (s->answering > 0 && pthread_cond_timedwait(&s->wake, &s->mu, &until) != ETIMEDOUT) {}
        int reaping = s->reaper_on;
        s->reaper_on = 0;
        pthread_mutex_unlock(&s->mu);
        if (reaping) pthread_join(s->reaper, NULL);
        MHD_stop_daemon(s->daemon);   /* waits for every HTTP thread */
    }
    s->daemon = NULL;
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
    memset(s, 0, sizeof *s);
}
