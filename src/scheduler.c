/* scheduler.c - who runs this step.
 *
 * An engine step runs one forward pass over a batch of tokens. The scheduler
 * fills that batch. Its rules, in the order they are applied:
 *
 *   1. Running requests first, best rank first. A running request wants one
 *      token (decode) or the rest of its prompt (prefill); a prefill takes at
 *      most `chunk` tokens per step, and all of them together at most
 *      `token_budget`. Mixing decode tokens and prefill chunks in one batch is
 *      Sarathi's chunked prefill (Agrawal et al., OSDI 2024): decodes never
 *      stall behind a long prompt, and a step's cost stays bounded. Deciding
 *      again at every step, rather than once per batch, is Orca's
 *      iteration-level scheduling (Yu et al., OSDI 2022), "continuous batching".
 *   2. Every scheduled token needs a K/V slot. When the pool cannot give one,
 *      the worst-ranked running request (lowest priority, newest) is
 *      preempted: its blocks are released and it goes back to a queue, to be
 *      recomputed later from its tokens (the recompute policy of vLLM, Kwon et
 *      al., SOSP 2023). Its full blocks stay in the prefix cache, so when it
 *      resumes, much of the recompute is often a cache hit.
 *   3. Then waiting and preempted requests are admitted, best rank first,
 *      while slots, budget and blocks last. Admission looks the prompt up in
 *      the prefix cache first. No admission in a step that had to preempt
 *      (the pool is tight: admitting would only cause more preemption), nor
 *      one that would leave fewer than a watermark of blocks available (1% of
 *      the pool, at least one: vLLM keeps such a reserve too), since the
 *      running requests need room to grow.
 *
 * Rank: FCFS ranks everyone equal, so arrival order decides. The priority
 * policy ranks by level (low 0, normal 1, high 2) plus one level per
 * aging_steps steps since arrival, so a low request is never starved: after
 * 2 * aging_steps steps it ties with a fresh high request and, being older,
 * goes first. Ties go to the older request. */
#include "scheduler.h"
#include "mem.h"
#include <assert.h>
#include <string.h>

int sched_init(Scheduler *s, const SchedConfig *cfg, KvPool *pool, int cap_blocks, Err *e) {
    memset(s, 0, sizeof *s);
    if (cfg->max_seqs < 1 || cfg->max_seqs > 65536)
        return err_set(e, ST_ARG, "scheduler: max_seqs %d outside 1..65536", cfg->max_seqs);
    if (cfg->token_budget < 1)
        return err_set(e, ST_ARG, "scheduler: token_budget %d must be at least 1", cfg->token_budget);
    if (cfg->chunk < 0)
        return err_set(e, ST_ARG, "scheduler: chunk %d must be 0 (no limit) or more", cfg->chunk);
    if (cfg->aging_steps < 0)
        return err_set(e, ST_ARG, "scheduler: aging_steps %d must be 0 (no aging) or more",
                       cfg->aging_steps);
    s->cfg = *cfg;
    s->pool = pool;
    int n = cfg->max_seqs;
    s->seqs = mem_alloc((size_t)n * sizeof *s->seqs);
    s->running = mem_alloc((size_t)n * sizeof *s->running);
    s->order = mem_alloc((size_t)n * sizeof *s->order);
    s->out.items = mem_alloc((size_t)n * sizeof *s->out.items);
    s->out.preempted = mem_alloc((size_t)n * sizeof *s->out.preempted);
    s->out.admitted = mem_alloc((size_t)n * sizeof *s->out.admitted);
    s->out.cow = mem_alloc((size_t)n * sizeof *s->out.cow);
    int st = (s->seqs && s->running && s->order && s->out.items && s->out.preempted &&
              s->out.admitted && s->out.cow)
                 ? ST_OK
                 : err_set(e, ST_NOMEM, "scheduler: cannot allocate %d sequence slots", n);
    for (int i = 0; i < n && st == ST_OK; i++) st = kv_seq_init(&s->seqs[i], cap_blocks, e);
    if (st) sched_free(s);
    return st;
}

void sched_free(Scheduler *s) {
    if (s->seqs)
        for (int i = 0; i < s->cfg.max_seqs; i++) kv_seq_free(&s->seqs[i]);
    mem_free(s->seqs);
    mem_free(s->running);
    mem_free(s->order);
    mem_free(s->out.items);
    mem_free(s->out.preempted);
    mem_free(s->out.admitted);
    mem_free(s->out.cow);
    memset(s, 0, sizeof *s);
}

long sched_rank(const Scheduler *s, const Request *r) {
    if (s->cfg.policy == SCHED_FCFS) return 0;
    long rank = r->priority;
    if (s->cfg.aging_steps > 0) rank += (s->step - r->arrival_step) / s->cfg.aging_steps;
    return rank;
}

/* Does a go before b? Higher rank, then earlier arrival, then lower id. */
static int before(const Scheduler *s, const Request *a, const Request *b) {
    long ra = sched_rank(s, a), rb = sched_rank(s, b);
    if (ra != rb) return ra > rb;
    if (a->arrival_step != b->arrival_step) return a->arrival_step < b->arrival_step;
    return a->id < b->id;
}

/* ---- queues: singly linked, appended at the tail ---- */

static void queue_push(Request **head, Request *r) {
    r->next = NULL;
    while (*head) head = &(*head)->next;
    *head = r;
}

static int queue_unlink(Request **head, Request *r) {
    for (; *head; head = &(*head)->next)
        if (*head == r) {
            *head = r->next;
            r->next = NULL;
            return 1;
        }
    return 0;
}

void sched_add(Scheduler *s, Request *r) {
    r->state = RQ_WAITING;
    r->slot = -1;
    queue_push(&s->waiting, r);
    s->n_waiting++;
}

int sched_fork(Scheduler *s, const Request *parent, Request *child) {
    if (s->n_running == s->cfg.max_seqs) return 0;
    int slot = 0;
    while (s->running[slot]) slot++;
    if (kv_seq_fork(s->pool, &s->seqs[slot], &s->seqs[parent->slot]) != ST_OK) return 0;
    child->slot = slot;
    child->state = RQ_RUNNING;
    child->n_computed = parent->n_computed;
    s->running[slot] = child;
    s->n_running++;
    return 1;
}

KvSeq *sched_seq(Scheduler *s, const Request *r) {
    assert(r->slot >= 0 && r->slot < s->cfg.max_seqs && s->running[r->slot] == r);
    return &s->seqs[r->slot];
}

int sched_idle(const Scheduler *s) {
    return s->n_running == 0 && s->waiting == NULL && s->preempted == NULL;
}

/* Give a running request's slot and blocks back. */
static void leave_slot(Scheduler *s, Request *r) {
    r->blocks_released = kv_seq_release(s->pool, &s->seqs[r->slot]);
    s->running[r->slot] = NULL;
    s->n_running--;
    r->slot = -1;
}

void sched_remove(Scheduler *s, Request *r) {
    if (r->state == RQ_RUNNING) {
        leave_slot(s, r);
    } else if (queue_unlink(&s->waiting, r)) {
        s->n_waiting--;
    } else if (queue_unlink(&s->preempted, r)) {
        s->n_preempted_queued--;
    }
}

/* Recompute preemption: drop the K/V, keep the tokens. */
static void preempt(Scheduler *s, Request *r) {
    leave_slot(s, r);
    r->state = RQ_WAITING;
    r->n_computed = 0;
    r->n_preempted++;
    queue_push(&s->preempted, r);
    s->n_preempted_queued++;
    s->n_preemptions++;
    s->out.preempted[s->out.n_preempted++] = r;
}

static void add_item(Scheduler *s, Request *r, int n) {
    SchedOutput *o = &s->out;
    SchedItem *it = &o->items[o->n_items++];
    it->req = r;
    it->n = n;
    it->from = r->n_computed;
    it->sample = r->n_computed + n == r->n_tokens;
    o->n_tokens += n;
    if (r->n_tokens - r->n_computed == 1 && r->n_out > 0)
        o->n_decode_tokens += n;    /* one new token after the first output: decode */
    else
        o->n_prefill_tokens += n;   /* prompt (or recompute after preemption) */
}

static int min3(int a, int b, int c) {
    int m = a < b ? a : b;
    return m < c ? m : c;
}

/* The best request in either queue, or NULL. */
static Request *best_queued(const Scheduler *s) {
    Request *best = NULL;
    for (Request *r = s->preempted; r; r = r->next)
        if (!best || before(s, r, best)) best = r;
    for (Request *r = s->waiting; r; r = r->next)
        if (!best || before(s, r, best)) best = r;
    return best;
}

const SchedOutput *sched_step(Scheduler *s) {
    SchedOutput *o = &s->out;
    o->n_items = o->n_tokens = o->n_prefill_tokens = o->n_decode_tokens = 0;
    o->n_preempted = o->n_admitted = o->n_cow = 0;
    int budget = s->cfg.token_budget;
    int chunk = s->cfg.chunk > 0 ? s->cfg.chunk : budget;

    /* 1. running requests, best rank first (insertion sort: a handful of them) */
    int n = 0;
    for (int i = 0; i < s->cfg.max_seqs; i++)
        if (s->running[i]) {
            Request *r = s->running[i];
            int j = n++;
            while (j > 0 && before(s, r, s->order[j - 1])) {
                s->order[j] = s->order[j - 1];
                j--;
            }
            s->order[j] = r;
        }
    for (int i = 0; i < n && budget > 0; i++) {
        Request *r = s->order[i];
        if (r->state != RQ_RUNNING) continue;   /* preempted below as a victim */
        int take = min3(r->n_tokens - r->n_computed, chunk, budget);
        long copies = s->pool->cow_copies;   /* to notice a copy-on-write (forked samples) */
        /* 2. no room: preempt the worst-ranked unscheduled request, maybe r itself */
        while (kv_seq_reserve(s->pool, &s->seqs[r->slot], take) != ST_OK) {
            int j = n - 1;
            while (s->order[j]->state != RQ_RUNNING) j--;
            Request *victim = s->order[j];
            preempt(s, victim);
            if (victim == r) break;
        }
        if (r->state != RQ_RUNNING) continue;
        if (s->pool->cow_copies > copies) o->cow[o->n_cow++] = r;
        add_item(s, r, take);
        budget -= take;
    }

    /* 3. admissions, while slots, budget and blocks last */
    while (o->n_preempted == 0 && budget > 0 && s->n_running < s->cfg.max_seqs) {
        Request *r = best_queued(s);
        if (!r) break;
        int slot = 0;
        while (s->running[slot]) slot++;
        KvSeq *q = &s->seqs[slot];
        /* Reuse cached blocks of the prompt (and of tokens generated before a
         * preemption), but always leave the last token to compute: its logits
         * give the next token. */
        int hit = kv_seq_match_prefix(s->pool, q, r->tokens, r->n_tokens, r->n_tokens - 1);
        int take = min3(r->n_tokens - hit, chunk, budget);
        /* Admit only if a few blocks stay available afterwards (the
         * watermark, 1% of the pool, at least one), so the running requests
         * can grow into their next block without preempting the newcomer at
         * once. With nothing running, admit regardless: progress first. */
        int watermark = s->pool->NB / 100 > 1 ? s->pool->NB / 100 : 1;
        if (kv_seq_reserve(s->pool, q, take) != ST_OK ||
            (s->n_running > 0 && kv_available_blocks(s->pool) < watermark)) {
            kv_seq_release(s->pool, q);   /* not now: it waits for blocks */
            break;
        }
        if (queue_unlink(&s->preempted, r))
            s->n_preempted_queued--;
        else if (queue_unlink(&s->waiting, r))
            s->n_waiting--;
        r->slot = slot;
        r->state = RQ_RUNNING;
        r->n_computed = hit;
        r->prefix_hit_tokens += hit;
        s->running[slot] = r;
        s->n_running++;
        o->admitted[o->n_admitted++] = r;
        add_item(s, r, take);
        budget -= take;
    }
    s->step++;
    return o;
}
