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
 *   4. Speculation (notes/speculative.md): a decoding sequence with a draft
 *      (tokens guessed by the engine) may run it after its own token, to be
 *      verified in the same pass, the way a prefill chunk runs several
 *      positions. Drafts come last, best rank first, and only while the
 *      step stays small: at most spec_limit tokens in all. A step already
 *      at that size is compute-bound, where every extra row costs its full
 *      share of the forward pass, and a guess that may be thrown away would
 *      take that time from tokens that are sure to be kept. A draft never
 *      preempts anyone: if its blocks cannot be had, it is dropped.
 *
 * Rank: FCFS ranks everyone equal, so arrival order decides. The priority
 * policy ranks by level (low 0, normal 1, high 2) plus one level per
 * aging_steps steps since arrival, so a low request is never starved: after
 * 2 * aging_steps steps it ties with a fresh high request and, being older,
 * goes first. Ties go to the older request. */
#include "scheduler.h"
#include "base/mem.h"
#include <string.h>

SchedStats sched_stats(const Scheduler *s) {
    return (SchedStats){.step = s->step, .preemptions = s->n_preemptions, .rewinds = s->n_rewinds,
                        .rewound_blocks = s->rewound_blocks, .running = s->n_running,
                        .waiting = s->n_waiting + s->n_preempted_queued, .max_seqs = s->cfg.max_seqs,
                        .token_budget = s->cfg.token_budget,
                        .max_draft = s->cfg.max_draft, .spec_limit = s->cfg.spec_limit};
}

int sched_init(Scheduler *s, const SchedConfig *cfg, KvPool *pool, Err *e) {
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
    if (cfg->max_draft < 0 || cfg->max_draft > SEQ_MAX_DRAFT)
        return err_set(e, ST_ARG, "scheduler: max_draft %d outside 0..%d", cfg->max_draft,
                       SEQ_MAX_DRAFT);
    if (cfg->spec_limit < 0)
        return err_set(e, ST_ARG, "scheduler: spec_limit %d must be 0 or more", cfg->spec_limit);
    s->cfg = *cfg;
    s->pool = pool;
    size_t n = (size_t)cfg->max_seqs;
    s->running = mem_alloc(n * sizeof *s->running);
    s->order = mem_alloc(n * sizeof *s->order);
    s->out.items = mem_alloc(n * sizeof *s->out.items);
    s->out.preempted = mem_alloc(n * sizeof *s->out.preempted);
    s->out.admitted = mem_alloc(n * sizeof *s->out.admitted);
    s->out.cow = mem_alloc(n * sizeof *s->out.cow);
    if (!s->running || !s->order || !s->out.items || !s->out.preempted || !s->out.admitted ||
        !s->out.cow) {
        sched_free(s);
        return err_set(e, ST_NOMEM, "scheduler: cannot allocate %zu sequence slots", n);
    }
    memset(s->running, 0, n * sizeof *s->running);
    return ST_OK;
}

void sched_free(Scheduler *s) {
    mem_free(s->running);
    mem_free(s->order);
    mem_free(s->out.items);
    mem_free(s->out.preempted);
    mem_free(s->out.admitted);
    mem_free(s->out.cow);
    memset(s, 0, sizeof *s);
}

/* exercises/sched_rank/ hollows this function: built with -DEXERCISE_SCHED_RANK,
 * the file that macro names stands in its place (tools/exercise.sh). */
#ifdef EXERCISE_SCHED_RANK
#include EXERCISE_SCHED_RANK
#else
long sched_rank(const Scheduler *s, const Sequence *q) {
    if (s->cfg.policy == SCHED_FCFS) return 0;
    long rank = q->priority;
    if (s->cfg.aging_steps > 0) rank += (s->step - q->arrival_step) / s->cfg.aging_steps;
    return rank;
}
#endif

/* Does a go before b? Higher rank, then earlier arrival, then lower id. */
static int before(const Scheduler *s, const Sequence *a, const Sequence *b) {
    long ra = sched_rank(s, a), rb = sched_rank(s, b);
    if (ra != rb) return ra > rb;
    if (a->arrival_step != b->arrival_step) return a->arrival_step < b->arrival_step;
    return a->id < b->id;
}

/* ---- queues: singly linked, appended at the tail ---- */

static void queue_push(Sequence **head, Sequence *q) {
    q->next = NULL;
    while (*head) head = &(*head)->next;
    *head = q;
}

static int queue_unlink(Sequence **head, Sequence *q) {
    for (; *head; head = &(*head)->next)
        if (*head == q) {
            *head = q->next;
            q->next = NULL;
            return 1;
        }
    return 0;
}

void sched_add(Scheduler *s, Sequence *q) {
    q->state = SEQ_WAITING;
    q->slot = -1;
    if (q->arrival_step < 0) q->arrival_step = s->step;
    queue_push(&s->waiting, q);
    s->n_waiting++;
}

static int free_slot(const Scheduler *s) {
    int slot = 0;
    while (s->running[slot]) slot++;
    return slot;
}

int sched_fork(Scheduler *s, const Sequence *parent, Sequence *child) {
    if (s->n_running == s->cfg.max_seqs) return 0;
    if (kv_seq_fork(s->pool, &child->kv, &parent->kv) != ST_OK) return 0;
    int slot = free_slot(s);
    child->slot = slot;
    child->state = SEQ_RUNNING;
    child->n_computed = parent->n_computed;
    if (child->arrival_step < 0) child->arrival_step = parent->arrival_step;
    s->running[slot] = child;
    s->n_running++;
    return 1;
}

int sched_idle(const Scheduler *s) {
    return s->n_running == 0 && s->waiting == NULL && s->preempted == NULL;
}

/* Give a running sequence's slot and blocks back. */
static void leave_slot(Scheduler *s, Sequence *q) {
    q->blocks_released = kv_seq_release(s->pool, &q->kv);
    s->running[q->slot] = NULL;
    s->n_running--;
    q->slot = -1;
}

void sched_remove(Scheduler *s, Sequence *q) {
    if (q->state == SEQ_RUNNING) {
        leave_slot(s, q);
    } else if (queue_unlink(&s->waiting, q)) {
        s->n_waiting--;
    } else if (queue_unlink(&s->preempted, q)) {
        s->n_preempted_queued--;
    }
}

/* Recompute preemption: drop the K/V, keep the tokens. */
static void preempt(Scheduler *s, Sequence *q) {
    leave_slot(s, q);
    q->state = SEQ_WAITING;
    q->n_computed = 0;
    q->n_preempted++;
    queue_push(&s->preempted, q);
    s->n_preempted_queued++;
    s->n_preemptions++;
    s->out.preempted[s->out.n_preempted++] = q;
}

static void add_item(Scheduler *s, Sequence *q, int n) {
    StepPlan *o = &s->out;
    StepItem *it = &o->items[o->n_items++];
    it->seq = q;
    it->slot = q->slot;
    it->n = n;
    it->from = q->n_computed;
    it->sample = q->n_computed + n == q->n_tokens;
    it->draft = 0;
    o->n_tokens += n;
    if (q->n_tokens - q->n_computed == 1 && q->n_out > 0)
        o->n_decode_tokens += n;    /* one new token after the first output: decode */
    else
        o->n_prefill_tokens += n;   /* prompt (or recompute after preemption) */
}

static int min3(int a, int b, int c) {
    int m = a < b ? a : b;
    return m < c ? m : c;
}

/* The best sequence in either queue, or NULL. */
static Sequence *best_queued(const Scheduler *s) {
    Sequence *best = NULL;
    for (Sequence *q = s->preempted; q; q = q->next)
        if (!best || before(s, q, best)) best = q;
    for (Sequence *q = s->waiting; q; q = q->next)
        if (!best || before(s, q, best)) best = q;
    return best;
}

const StepPlan *sched_step(Scheduler *s) {
    StepPlan *o = &s->out;
    o->n_items = o->n_tokens = o->n_prefill_tokens = o->n_decode_tokens = 0;
    o->n_preempted = o->n_admitted = o->n_cow = 0;
    o->n_draft_tokens = o->n_spec_off = 0;
    int budget = s->cfg.token_budget;
    int chunk = s->cfg.chunk > 0 ? s->cfg.chunk : budget;

    /* 1. running sequences, best rank first (insertion sort: a handful of them) */
    int n = 0;
    for (int i = 0; i < s->cfg.max_seqs; i++)
        if (s->running[i]) {
            Sequence *q = s->running[i];
            int j = n++;
            while (j > 0 && before(s, q, s->order[j - 1])) {
                s->order[j] = s->order[j - 1];
                j--;
            }
            s->order[j] = q;
        }
    for (int i = 0; i < n && budget > 0; i++) {
        Sequence *q = s->order[i];
        if (q->state != SEQ_RUNNING) continue;   /* preempted below as a victim */
        int take = min3(q->n_tokens - q->n_computed, chunk, budget);
        long copies = s->pool->cow_copies;   /* to notice a copy-on-write (forked samples) */
        /* 2. no room: preempt the worst-ranked unscheduled sequence, maybe q itself */
        while (kv_seq_reserve(s->pool, &q->kv, take) != ST_OK) {
            int j = n - 1;
            while (s->order[j]->state != SEQ_RUNNING) j--;
            Sequence *victim = s->order[j];
            preempt(s, victim);
            if (victim == q) break;
        }
        if (q->state != SEQ_RUNNING) continue;
        if (s->pool->cow_copies > copies) o->cow[o->n_cow++] = q;
        add_item(s, q, take);
        budget -= take;
    }

    /* 3. admissions, while slots, budget and blocks last */
    while (o->n_preempted == 0 && budget > 0 && s->n_running < s->cfg.max_seqs) {
        Sequence *q = best_queued(s);
        if (!q) break;
        /* Reuse cached blocks of the prompt (and of tokens generated before a
         * preemption), but always leave the last token to compute: its logits
         * give the next token. */
        int hit = kv_seq_match_prefix(s->pool, &q->kv, q->tokens, q->n_tokens, q->n_tokens - 1);
        int take = min3(q->n_tokens - hit, chunk, budget);
        /* Admit only if a few blocks stay available afterwards (the
         * watermark, 1% of the pool, at least one), so the running sequences
         * can grow into their next block without preempting the newcomer at
         * once. With nothing running, admit regardless: progress first. */
        int watermark = s->pool->NB / 100 > 1 ? s->pool->NB / 100 : 1;
        if (kv_seq_reserve(s->pool, &q->kv, take) != ST_OK ||
            (s->n_running > 0 && kv_available_blocks(s->pool) < watermark)) {
            kv_seq_release(s->pool, &q->kv);   /* not now: it waits for blocks */
            break;
        }
        if (queue_unlink(&s->preempted, q))
            s->n_preempted_queued--;
        else if (queue_unlink(&s->waiting, q))
            s->n_waiting--;
        int slot = free_slot(s);
        q->slot = slot;
        q->state = SEQ_RUNNING;
        q->n_computed = hit;
        q->prefix_hit_tokens += hit;
        s->running[slot] = q;
        s->n_running++;
        o->admitted[o->n_admitted++] = q;
        add_item(s, q, take);
        budget -= take;
    }

    /* 4. drafts, best rank first, while the step stays under spec_limit */
    int limit = s->cfg.spec_limit < s->cfg.token_budget ? s->cfg.spec_limit : s->cfg.token_budget;
    for (int i = 0; i < o->n_items && s->cfg.max_draft > 0; i++) {
        StepItem *it = &o->items[i];
        Sequence *q = it->seq;
        /* only a decode: one new token, the last known one, already past the prompt */
        if (q->n_draft == 0 || it->n != 1 || !it->sample || q->n_out == 0) continue;
        int k = min3(q->n_draft, s->cfg.max_draft, limit - o->n_tokens);
        if (k <= 0) {
            o->n_spec_off++;   /* the step is full enough: it decodes without its guess */
            continue;
        }
        if (kv_seq_reserve(s->pool, &q->kv, 1 + k) != ST_OK) continue;   /* no room for a guess */
        it->n += k;
        it->draft = k;
        o->n_tokens += k;
        o->n_draft_tokens += k;
    }
    s->step++;
    return o;
}

int sched_commit(Scheduler *s, const StepPlan *p, const int *rejected) {
    int given_back = 0;
    for (int i = 0; i < p->n_items; i++) {
        const StepItem *it = &p->items[i];
        int drop = rejected ? rejected[i] : 0, keep = it->n - drop;
        kv_seq_commit(s->pool, &it->seq->kv, it->seq->tokens, keep);
        it->seq->n_computed += keep;
        if (drop > 0) {
            given_back += kv_seq_rewind(s->pool, &it->seq->kv);
            s->n_rewinds++;
        }
    }
    s->rewound_blocks += given_back;
    return given_back;
}
