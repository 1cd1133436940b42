/* server_engine.c - the server's engine thread, and the path of a request
 * through the server (server.h; notes/server.md).
 *
 * A request's path, with the functions to break on:
 *
 *   conn_main          an HTTP thread (one per connection) reads a request
 *                      (http1.h) and routes it; answer_generate parses it
 *                      (srv_parse_request), makes a Job and queue_job puts it on
 *                      the server's queue, then waits for the engine to take it
 *   srv_run            the engine thread takes the queue (take_work), submits
 *                      each job (submit_job -> rt_submit), steps the engine
 *   on_text, on_finish the runtime's callbacks, on the engine thread: text
 *                      appended to the job under its lock, waiters woken
 *   stream_answer      sends a streamed response: the job's new text as SSE
 *                      chunks (refill), one HTTP chunk each
 *   request_end        the request ended: if the client went away before the
 *                      end, the job is marked cancelled (job_cancel) and the
 *                      engine thread calls rt_cancel at its next turn (sweep)
 *
 * Memory: the HTTP threads allocate with malloc, not mem_alloc: mem.h's
 * counters belong to one thread, the engine's. A Job is shared by two
 * owners (the HTTP request and the engine) and counted: the last to let go
 * frees it. Locks: Server.mu guards the queue, the trace events and the
 * metrics; Job.mu guards a job's text and state. Neither is held while the
 * engine steps, except a job's, briefly, inside the callbacks. */
#include "front/server_internal.h"
#include "base/clock.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

Job *srv_job_new(Server *s, long conn, SrvRequest *req) {
    Job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->ch = calloc((size_t)req->n, sizeof *j->ch);
    if (!j->ch) {
        free(j);
        return NULL;
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->srv = s;
    j->req = *req;               /* the prompt is the job's now */
    memset(req, 0, sizeof *req);
    j->conn = conn;
    j->created = (long)time(NULL);
    j->first_id = -1;
    return j;
}

void srv_job_unref(Job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    for (int i = 0; i < j->req.n; i++) {
        free(j->ch[i].text);
        free(j->ch[i].lp);
    }
    free(j->ch);
    srv_request_free(&j->req);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

/* ==== the trace: HTTP events, printed by the engine thread ================= */



static int tracing(const Server *s) { return s->rt->trace && s->rt->trace->text; }

/* From any thread: queued under the server's lock, printed by the engine
 * thread between steps, so its lines never cut into the engine's. */
void srv_note(Server *s, const char *fmt, ...) {
    if (!tracing(s)) return;
    SrvEvent *ev = malloc(sizeof *ev);
    if (!ev) return;
    ev->next = NULL;
    ev->at = clock_seconds();
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ev->line, sizeof ev->line, fmt, ap);
    va_end(ap);
    /* a client's bytes (a URL with %0A, a field with \n) must not start a
     * line of their own in the trace: control characters become '?' */
    for (char *c = ev->line; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
    pthread_mutex_lock(&s->mu);
    if (s->events_tail) s->events_tail->next = ev;
    else s->events = ev;
    s->events_tail = ev;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
}

/* Each line is stamped when it is printed, so the trace's times never go
 * back; a line that waited for the engine thread says when it happened. */
static void print_events(Server *s, SrvEvent *ev) {
    while (ev) {
        SrvEvent *next = ev->next;
        double now = rt_now(s->rt), at = rt_time_of(s->rt, ev->at);
        if (at >= 0 && now - at >= 0.0001)
            trace_note(s->rt->trace, now, "%s (at %.1f ms)", ev->line, at * 1e3);
        else
            trace_note(s->rt->trace, now, "%s", ev->line);
        free(ev);
        ev = next;
    }
}

/* The events queued so far, printed (engine thread). */
static void drain_events(Server *s) {
    pthread_mutex_lock(&s->mu);
    SrvEvent *ev = s->events;
    s->events = s->events_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    print_events(s, ev);
}

/* ==== the engine thread ====================================================== */

/* The runtime's callbacks (engine thread). */
static void on_text(int id, const char *text, int len, void *user) {
    Job *j = user;
    if (len <= 0) return;
    pthread_mutex_lock(&j->mu);
    JobChoice *c = &j->ch[id - j->first_id];
    if (c->len + (size_t)len + 1 > c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 256;
        while (cap < c->len + (size_t)len + 1) cap *= 2;
        char *grown = realloc(c->text, cap);
        if (!grown) {           /* the text cannot be held whole: the answer is an error, never cut */
            snprintf(j->error, sizeof j->error, "out of memory holding %zu bytes of text", c->len + (size_t)len);
            pthread_cond_broadcast(&j->cv);
            pthread_mutex_unlock(&j->mu);
            return;
        }
        c->text = grown;
        c->cap = cap;
    }
    memcpy(c->text + c->len, text, (size_t)len);
    c->len += (size_t)len;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* A token's logprobs, kept until the HTTP side sends them with its text. */
static void on_token(int id, int token, const SamplerLast *lp, void *user) {
    Job *j = user;
    if (!lp) return;
    pthread_mutex_lock(&j->mu);
    JobChoice *c = &j->ch[id - j->first_id];
    if (c->n_lp == c->cap_lp) {
        int cap = c->cap_lp ? 2 * c->cap_lp : 64;
        SamplerLast *grown = realloc(c->lp, (size_t)cap * sizeof *grown);
        if (!grown) {           /* the logprobs of this token are lost: said, not hidden */
            snprintf(j->error, sizeof j->error, "out of memory keeping the logprobs of token %d", token);
            pthread_mutex_unlock(&j->mu);
            return;
        }
        c->lp = grown;
        c->cap_lp = cap;
    }
    c->lp[c->n_lp++] = *lp;
    pthread_mutex_unlock(&j->mu);
}

static void on_finish(int id, const Sequence *q, const Telemetry *t, const char *error, void *user) {
    Job *j = user;
    Server *s = j->srv;
    pthread_mutex_lock(&j->mu);
    JobChoice *c = &j->ch[id - j->first_id];
    c->done = 1;
    c->finish = q->finish;
    c->n_out = q->n_out;
    j->prompt_tokens = q->n_prompt;
    j->cached_tokens = q->prefix_hit_tokens < q->n_prompt ? q->prefix_hit_tokens : q->n_prompt;
    if (error) snprintf(j->error, sizeof j->error, "%s", error);
    if (++j->n_done == j->req.n) j->state = J_DONE;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);

    pthread_mutex_lock(&s->mu);
    SrvMetrics *m = &s->metrics;
    if (q->finish >= FIN_LENGTH && q->finish <= FIN_ERROR) m->finished[q->finish]++;
    if (id == j->first_id) m->prompt_tokens += q->n_prompt;
    m->completion_tokens += q->n_out;
    if (t->ttft >= 0 && q->n_out > 0) srv_histogram_add(&m->ttft, t->ttft);
    if (q->n_out > 1) srv_histogram_add(&m->tpot, t->tpot);
    pthread_mutex_unlock(&s->mu);
}

/* The job leaves the engine (done or refused): one job fewer in flight,
 * and the engine's reference let go. */
static void job_leaves(Server *s, Job *j) {
    pthread_mutex_lock(&s->mu);
    s->in_flight--;
    s->metrics.http_in_flight = s->in_flight;
    pthread_mutex_unlock(&s->mu);
    srv_job_unref(j);
}

static void refuse(Server *s, Job *j, int status, const char *why) {
    pthread_mutex_lock(&j->mu);
    j->state = J_REFUSED;
    j->refused_status = status;
    snprintf(j->why, sizeof j->why, "%s", why);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    job_leaves(s, j);
}

static void submit_job(Server *s, Job *j) {
    Runtime *rt = s->rt;
    pthread_mutex_lock(&j->mu);
    int gone = j->cancel;
    pthread_mutex_unlock(&j->mu);
    if (gone) {                  /* its client left before it was taken */
        refuse(s, j, 499, "the client went away");
        return;
    }
    RtParams p = rt_params_default();
    p.prompt = j->req.prompt;
    p.parse_special = j->req.parse_special;
    p.prompt_plain = j->req.plain;
    p.sampling = j->req.sp;
    p.max_tokens = j->req.max_tokens;
    p.n = j->req.n;
    p.ignore_eos = j->req.ignore_eos;
    p.speculate = j->req.speculate;
    p.priority = j->req.priority;
    for (int i = 0; i < j->req.n_stop; i++) p.stop[i] = j->req.stop[i];
    p.on_text = on_text;
    p.on_finish = on_finish;
    p.on_token = on_token;
    p.user = j;
    Err e = {{0}};
    /* The id is known before any callback: they come from rt_step, later. */
    int id = rt_submit(rt, &p, &e);
    if (id < 0) {
        pthread_mutex_lock(&s->mu);
        s->metrics.rejected_other++;
        pthread_mutex_unlock(&s->mu);
        if (tracing(s)) trace_note(rt->trace, rt_now(rt), "conn %ld: refused by the runtime: %s", j->conn, e.msg);
        refuse(s, j, 400, e.msg);
        return;
    }
    pthread_mutex_lock(&j->mu);
    j->first_id = id;
    j->state = J_RUNNING;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (tracing(s))
        trace_note(rt->trace, rt_now(rt), "conn %ld: %s is request #%d%s%s", j->conn, j->id, id,
                   j->req.n > 1 ? " and its samples" : "", j->req.stream ? ", streamed" : "");
    s->live[s->n_live++] = j;
}

/* Jobs whose client went away: rt_cancel each choice still running (its
 * blocks go back at once); jobs done: out of the live list. */
static void sweep(Server *s, int cancel_all) {
    Runtime *rt = s->rt;
    for (int i = 0; i < s->n_live;) {
        Job *j = s->live[i];
        pthread_mutex_lock(&j->mu);
        int cancel = (j->cancel || cancel_all) && !j->cancel_sent && j->state != J_DONE;
        if (cancel) j->cancel_sent = 1;
        pthread_mutex_unlock(&j->mu);
        if (cancel) {
            drain_events(s);     /* "client disconnected" before the cancel it causes */
            if (tracing(s)) trace_note(rt->trace, rt_now(rt), "conn %ld: cancelling #%d", j->conn, j->first_id);
            for (int k = j->req.n - 1; k >= 0; k--) {
                pthread_mutex_lock(&j->mu);
                int done = j->ch[k].done;
                pthread_mutex_unlock(&j->mu);
                Err e;
                if (!done) rt_cancel(rt, j->first_id + k, &e);   /* calls on_finish */
            }
        }
        pthread_mutex_lock(&j->mu);
        int done = j->state == J_DONE;
        pthread_mutex_unlock(&j->mu);
        if (done) {
            s->live[i] = s->live[--s->n_live];
            job_leaves(s, j);
        } else {
            i++;
        }
    }
}

/* The engine's numbers for /metrics, after a step. */
static void publish(Server *s) {
    EngineStats es = rt_stats(s->rt).engine;
    pthread_mutex_lock(&s->mu);
    SrvMetrics *m = &s->metrics;
    m->kv_held = es.kv.held;
    m->kv_cached = es.kv.cached;
    m->kv_free = es.kv.free;
    m->running = es.sched.running;
    m->waiting = es.sched.waiting;
    m->preemptions = es.sched.preemptions;
    m->steps = es.steps;
    m->spec_proposed = es.spec_proposed;
    m->spec_accepted = es.spec_accepted;
    m->spec_rewinds = es.sched.rewinds;
    pthread_mutex_unlock(&s->mu);
}

/* Wait for work, then take the whole queue and the pending events. */
static void take_work(Server *s, volatile sig_atomic_t *stop, Job **jobs, SrvEvent **events) {
    pthread_mutex_lock(&s->mu);
    /* Idle: wait for a job, an event or the stop signal (polled every 100
     * ms: a signal handler cannot signal a condition variable). An idle
     * engine has no job to cancel: every live job is done. */
    while (!*stop && !s->queue_head && !s->events && rt_idle(s->rt)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&s->wake, &s->mu, &ts);
    }
    *jobs = s->queue_head;
    s->queue_head = s->queue_tail = NULL;
    *events = s->events;
    s->events = s->events_tail = NULL;
    pthread_mutex_unlock(&s->mu);
}

int srv_run(Server *s, volatile sig_atomic_t *stop, Err *e) {
    Runtime *rt = s->rt;
    publish(s);
    while (!*stop) {
        Job *jobs;
        SrvEvent *events;
        take_work(s, stop, &jobs, &events);
        print_events(s, events);
        while (jobs) {
            Job *next = jobs->next;
            if (s->n_live == s->cap_live) {   /* grown here, never inside a step */
                int cap = s->cap_live ? 2 * s->cap_live : 64;
                Job **grown = realloc(s->live, (size_t)cap * sizeof *grown);
                if (!grown) {
                    refuse(s, jobs, 503, "out of memory");
                    jobs = next;
                    continue;
                }
                s->live = grown;
                s->cap_live = cap;
            }
            submit_job(s, jobs);
            jobs = next;
        }
        sweep(s, 0);
        if (!rt_idle(rt)) {
            rt_step(rt);
            sweep(s, 0);
        }
        publish(s);              /* a cancel gives blocks back without a step */
    }
    /* Stopping: no more jobs are taken; those queued are refused, those
     * running cancelled. */
    Job *jobs;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    jobs = s->queue_head;
    s->queue_head = s->queue_tail = NULL;
    SrvEvent *events = s->events;
    s->events = s->events_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    print_events(s, events);
    while (jobs) {
        Job *next = jobs->next;
        refuse(s, jobs, 503, "the server is shutting down");
        jobs = next;
    }
    sweep(s, 1);
    publish(s);
    (void)e;
    return ST_OK;
}
