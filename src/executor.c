/* executor.c - from the step's plan to sampled tokens.
 *
 * The scheduler says "request A: positions 40..55, request B: position 97,
 * request C: position 12". The model wants flat arrays: row t is token[t] at
 * pos[t] of sequence seq[t], writing its K/V to slot[t]. Flattening is this
 * file's first job; it is what lets one matrix product per weight serve every
 * sequence at once (the point of batching: a decode step reads all the weights
 * for one token, so 16 sequences cost little more than one).
 *
 * Its second job is sampling: only rows that end a sequence's known tokens
 * need logits (a prefill chunk that stops mid-prompt samples nothing), and each
 * request samples with its own parameters and its own random stream, so its
 * output does not depend on who else shared the batch.
 *
 * Speculative decoding adds a third: an item that ends with k draft tokens
 * wants logits at each of its last k + 1 positions (logits at the position
 * before a guess say what the model would have put there), and its guesses
 * are checked one by one, the first rejection ending the run
 * (notes/speculative.md). */
#include "executor.h"
#include "base/clock.h"
#include "base/mem.h"
#include <string.h>

/* 1 if every logit is finite. x * 0 is 0 for a finite x and NaN for NaN or
 * an infinity, so one sum tells; the simd reduction lets it vectorize. The
 * cost is one pass over V floats per sampled row, against the V x D matrix
 * product that made them. */
static int all_finite(const float *x, int n) {
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int i = 0; i < n; i++) acc += x[i] * 0.0f;
    return acc == 0.0f;
}

int exec_init(Executor *x, const Model *m, KvPool *pool, int max_T, int max_seqs, int max_draft,
              Err *e) {
    memset(x, 0, sizeof *x);
    if (max_seqs > max_T) max_seqs = max_T;   /* each sequence runs at least one token */
    long rows = (long)max_seqs * (1 + (max_draft > 0 ? max_draft : 0));
    int max_logits = rows < max_T ? (int)rows : max_T;
    int st = runstate_init_paged(&x->rs, m, max_T, max_logits, e);
    if (st) return st;
    x->model = m;
    x->pool = pool;
    x->max_T = max_T;
    x->max_seqs = max_seqs;
    x->max_logits = max_logits;
    size_t T = (size_t)max_T, B = (size_t)max_seqs;
    x->token = mem_alloc(T * sizeof(int));
    x->pos = mem_alloc(T * sizeof(int));
    x->seq = mem_alloc(T * sizeof(int));
    x->slot = mem_alloc(T * sizeof(int));
    x->logit_row = mem_alloc((size_t)max_logits * sizeof(int));
    x->table = mem_alloc(B * sizeof(*x->table));
    x->sampled = mem_alloc(B * sizeof(int));
    x->accepted = mem_alloc(B * sizeof(int));
    size_t V = (size_t)m->cfg.vocab_size;
    x->fork_logits = mem_alloc(B * V * sizeof(float));
    x->fork_scratch = mem_alloc(V * sizeof(float));
    if (!x->token || !x->pos || !x->seq || !x->slot || !x->logit_row || !x->table || !x->sampled || !x->accepted ||
        !x->fork_logits || !x->fork_scratch) {
        exec_free(x);
        return err_set(e, ST_NOMEM, "executor: cannot allocate the batch arrays for %d tokens", max_T);
    }
    return ST_OK;
}

void exec_free(Executor *x) {
    runstate_free(&x->rs);
    mem_free(x->token);
    mem_free(x->pos);
    mem_free(x->seq);
    mem_free(x->slot);
    mem_free(x->logit_row);
    mem_free(x->table);
    mem_free(x->sampled);
    mem_free(x->accepted);
    mem_free(x->fork_logits);
    mem_free(x->fork_scratch);
    memset(x, 0, sizeof *x);
}

/* exercises/exec_flatten/ hollows this function: built with -DEXERCISE_EXEC_FLATTEN,
 * the file that macro names stands in its place (tools/exercise.sh). */
#ifdef EXERCISE_EXEC_FLATTEN
#include EXERCISE_EXEC_FLATTEN
#else
int exec_flatten(Executor *x, const StepPlan *p, int *n_logits) {
    int T = 0, nl = 0;
    for (int i = 0; i < p->n_items; i++) {
        const StepItem *it = &p->items[i];
        const Sequence *q = it->seq;
        x->table[i] = q->kv.table;
        for (int j = 0; j < it->n; j++, T++) {
            int pos = it->from + j;
            x->token[T] = q->tokens[pos];
            x->pos[T] = pos;
            x->seq[T] = i;
            x->slot[T] = kv_seq_slot(&q->kv, x->pool->BS, pos);
        }
        if (it->sample) x->logit_row[nl++] = T - 1;
    }
    *n_logits = nl;
    return T;
}
#endif

/* exec_flatten asks for one row of logits per sampling item, its last. An
 * item with a draft of k needs its last k + 1: the list is made again, in
 * the same ascending order. Returns its length. */
static int draft_rows(Executor *x, const StepPlan *p) {
    int T = 0, nl = 0;
    for (int i = 0; i < p->n_items; i++) {
        const StepItem *it = &p->items[i];
        T += it->n;
        if (!it->sample) continue;
        for (int j = it->draft; j >= 0; j--) x->logit_row[nl++] = T - 1 - j;
    }
    return nl;
}

/* Item i's draft of k tokens checked against its k + 1 rows of logits
 * (rows[j] is the model's view of what follows position from + j): accept
 * while sampler_verify agrees, then the model's own token. Sets
 * x->accepted[i] and x->sampled[i]. */
static void verify_draft(Executor *x, int i, Sequence *q, int k, float *rows) {
    int V = x->model->cfg.vocab_size, n_gen = q->n_tokens - q->n_prompt;
    const int *out = q->tokens + q->n_prompt, *guess = q->tokens + q->n_tokens;
    x->accepted[i] = 0;
    for (int j = 0; j <= k; j++) {
        float *row = rows + (size_t)j * V;
        if (!all_finite(row, V)) {
            /* never sample from NaN; the guess before this row was accepted
             * from a finite row, so it can stand as the step's last token */
            if (j == 0) {
                x->sampled[i] = EXEC_NONFINITE;
            } else {
                x->accepted[i] = j - 1;
                x->sampled[i] = guess[j - 1];
            }
            return;
        }
        if (j == k) {   /* every guess accepted: the token after them, as in any decode */
            x->sampled[i] = sampler_pick(&q->sampler, row, out, n_gen + j);
            return;
        }
        int t = sampler_verify(&q->sampler, row, guess[j], out, n_gen + j);
        if (t != guess[j]) {   /* rejected: t takes its place, the rest are dropped */
            x->sampled[i] = t;
            return;
        }
        x->accepted[i] = j + 1;
    }
}

const int *exec_run(Executor *x, const StepPlan *p) {
    double t0 = clock_seconds();
    const KvPool *pool = x->pool;
    int n_logits;
    int T = exec_flatten(x, p, &n_logits);
    if (p->n_draft_tokens > 0) n_logits = draft_rows(x, p);
    double t1 = clock_seconds();

    const float *logits = NULL;
    if (T > 0) {
        /* the pool's copy-on-write copies since the last step go with the
         * batch: a model whose cache lives elsewhere (a GPU) makes them too */
        const int *copies;
        int n_copies = kv_take_copies(x->pool, &copies);
        Batch b = {.T = T, .token = x->token, .pos = x->pos, .seq = x->seq, .slot = x->slot,
                   .table = x->table, .n_logits = n_logits, .logit_row = x->logit_row,
                   .n_copies = n_copies, .copies = copies};
        KvStore kv = {pool->key, pool->value, pool->NB, pool->BS};
        logits = model_forward_batch(x->model, &x->rs, &kv, &b);
    }
    double t2 = clock_seconds();

    /* Sample, each sequence with its own sampler. */
    int V = x->model->cfg.vocab_size, k = 0;
    for (int i = 0; i < p->n_items; i++) {
        const StepItem *it = &p->items[i];
        x->sampled[i] = EXEC_NO_TOKEN;
        x->accepted[i] = 0;
        if (!it->sample) continue;
        /* logits rows are this executor's own buffer: sampling may scale them,
         * so a sequence whose samples wait to fork keeps a copy for them */
        float *row = (float *)logits + (size_t)k * V;
        k += 1 + it->draft;
        if (it->draft > 0) {
            verify_draft(x, i, it->seq, it->draft, row);
            continue;
        }
        if (!all_finite(row, V)) {
            x->sampled[i] = EXEC_NONFINITE;
            continue;
        }
        if (it->seq->fork_next && !it->seq->fork_parent)
            memcpy(x->fork_logits + (size_t)i * V, row, (size_t)V * sizeof(float));
        const Sequence *q = it->seq;
        x->sampled[i] = sampler_pick(&it->seq->sampler, row, q->tokens + q->n_prompt, q->n_tokens - q->n_prompt);
    }
    double t3 = clock_seconds();
    x->t_build = t1 - t0;
    x->t_forward = t2 - t1;
    x->t_sample = t3 - t2;
    return x->sampled;
}

const char *exec_error(const Executor *x) {
    return x->rs.err.msg[0] ? x->rs.err.msg : NULL;
}

int exec_sample_fork(Executor *x, int i, Sequence *child) {
    size_t V = (size_t)x->model->cfg.vocab_size;
    memcpy(x->fork_scratch, x->fork_logits + (size_t)i * V, V * sizeof(float));   /* sampling scales it */
    return sampler_pick(&child->sampler, x->fork_scratch, NULL, 0);   /* its first token: nothing generated yet */
}
