/* executor.h - run one step's plan: flatten it into one batch, call the
 * model, sample each sequence's next token.
 *
 * Its input is the StepPlan alone (sequence.h): each item names its
 * sequence, whose tokens, block table and sampler are all the executor
 * reads. It knows neither the scheduler nor the runtime. See
 * notes/executor.md. Everything is allocated by exec_init. */
#ifndef EXECUTOR_H
#define EXECUTOR_H
#include "base/err.h"
#include "kv_paged.h"
#include "model.h"
#include "sequence.h"

typedef struct {
    const Model *model;
    KvPool *pool;
    RunState rs;          /* activations for token_budget rows, logits for max_logits */
    int max_T, max_seqs;
    int max_logits;       /* max_seqs * (1 + max_draft), at most max_T: a verified draft
                             needs logits at each of its positions */
    /* the batch, rebuilt every step */
    int *token, *pos, *seq, *slot;   /* (max_T) */
    int *logit_row;                  /* (max_logits) */
    const int **table;               /* (max_seqs) */
    int *sampled;                    /* (max_seqs) token sampled for item i, or -1 */
    int *accepted;                   /* (max_seqs) of item i's draft tokens, how many the
                                        model agreed with (the first ones): see exec_run */
    float *fork_logits;              /* (max_seqs, V) logits of item i, saved before sampling
                                        when its sequence has samples waiting to fork */
    float *fork_scratch;             /* (V) a copy for each forked sample to sample from */
    double t_build, t_forward, t_sample;   /* seconds spent in the last step */
} Executor;

/* exec_run's entries for an item that sampled nothing: a prefill chunk that
 * stops before the end of the prompt, or logits that were not all finite
 * (sampling from NaN would pick garbage, and casting it is undefined). */
enum { EXEC_NO_TOKEN = -1, EXEC_NONFINITE = -2 };

/* max_draft: the most draft tokens one item may carry (0: no speculation). */
int exec_init(Executor *x, const Model *m, KvPool *pool, int max_T, int max_seqs, int max_draft,
              Err *e);
void exec_free(Executor *x);                        /* accepts a zeroed one */

/* The plan as one batch (notes/executor.md, "From items to a batch"): for
 * every position of every item, in order, a row t of x->token, x->pos, x->seq
 * (the item's index) and x->slot (the position's slot through the item's
 * block table); x->table[i] = item i's block table; x->logit_row: the last row
 * of each item that samples, *n_logits of them. Returns T, the rows. exec_run's
 * first half, apart so that it can be tested alone. */
int exec_flatten(Executor *x, const StepPlan *p, int *n_logits);

/* Run a plan whose KV slots are reserved: write the K/V of every item's
 * tokens, and sample a token for every item whose run ends at its last known
 * token. Returns x->sampled (one entry per item: the token, EXEC_NO_TOKEN, or
 * EXEC_NONFINITE). The caller commits the K/V to the sequences afterwards.
 *
 * An item with a draft (item.draft = k: its last k tokens are guesses,
 * sitting in the sequence's tokens past n_tokens) is verified: the guesses
 * are checked in order against the logits of the position before each
 * (sampler_verify), and x->accepted[i] is how many were accepted before the
 * first that was not; x->sampled[i] is then the token the model put in the
 * place of that one, or, when all k were accepted, the token after them.
 * Its output is accepted[i] + 1 tokens; k - accepted[i] positions are to be
 * rewound. Items without a draft have accepted[i] = 0. */
const int *exec_run(Executor *x, const StepPlan *p);

/* Why the last exec_run's logits were not finite when the model knows a
 * reason other than the arithmetic (a weight that could not be decoded, a
 * GPU that failed): its one line, or NULL. Valid until the next run. */
const char *exec_error(const Executor *x);

/* Sample `child`'s first token from the logits item i had in the last
 * exec_run (its sequence had samples waiting: see Sequence.fork_next). */
int exec_sample_fork(Executor *x, int i, Sequence *child);

#endif
