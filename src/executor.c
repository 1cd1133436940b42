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
 * output does not depend on who else shared the batch. */
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

int exec_init(Executor *x, const Model *m, KvPool *pool, int max_T, int max_seqs, Err *e) {
    memset(x, 0, sizeof *x);
    if (max_seqs > max_T) max_seqs = max_T;   /* each sequence runs at least one token */
    int st = runstate_init_paged(&x->rs, m, max_T, max_seqs, e);
    if (st) return st;
    x->model = m;
    x->pool = pool;
    x->max_T = max_T;
    x->max_seqs = max_seqs;
    size_t T = (size_t)max_T, B = (size_t)max_seqs;
    x->token = mem_alloc(T * sizeof(int));
    x->pos = mem_alloc(T * sizeof(int));
    x->seq = mem_alloc(T * sizeof(int));
    x->slot = mem_alloc(T * sizeof(int));
    x->logit_row = mem_alloc(B * sizeof(int));
    x->table = mem_alloc(B * sizeof(*x->table));
    x->sampled = mem_alloc(B * sizeof(int));
    size_t V = (size_t)m->cfg.vocab_size;
    x->fork_logits = mem_alloc(B * V * sizeof(float));
    x->fork_scratch = mem_alloc(V * sizeof(float));
    if (!x->token || !x->pos || !x->seq || !x->slot || !x->logit_row || !x->table || !x->sampled ||
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

const int *exec_run(Executor *x, const StepPlan *p) {
    double t0 = clock_seconds();
    const KvPool *pool = x->pool;
    int n_logits;
    int T = exec_flatten(x, p, &n_logits);
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
        if (!it->sample) continue;
        /* logits rows are this executor's own buffer: sampling may scale them,
         * so a sequence whose samples wait to fork keeps a copy for them */
        float *row = (float *)logits + (size_t)k * V;
        k++;
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
