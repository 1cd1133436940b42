/* sequence.h - the data every serving stage below the runtime shares: one
 * sequence of tokens being generated, and the plan for one engine step.
 *
 * A leaf: types only, no functions. Who writes what (each field has one
 * owner; everyone else only reads it):
 *
 *   runtime    creates a Sequence at submission (id, priority, tokens of the
 *              prompt, limits, speculate, sampler) and never writes it again
 *   engine     appends sampled tokens (n_tokens, n_out), finishes it (state,
 *              finish), links samples of one prompt (fork_parent, fork_next),
 *              proposes drafts (n_draft, written past n_tokens in tokens; their
 *              length spec_len) and counts them (spec_proposed, spec_accepted)
 *   scheduler  state WAITING <-> RUNNING, slot, the KV sequence, n_computed,
 *              arrival_step, the counters n_preempted, prefix_hit_tokens,
 *              blocks_released, and its queue link `next`
 *   executor   reads tokens, the block table and the sampler (the sampler's
 *              random stream advances when it draws: that is the only write)
 *
 * The runtime keeps its text-side state (decoder, stop strings, stream
 * callback, telemetry) in its own Request, which embeds a Sequence; the
 * trace keeps its own per-request state. Neither lives here. */
#ifndef SEQUENCE_H
#define SEQUENCE_H
#include "kv_paged.h"
#include "text/sampler.h"

typedef enum { PRIO_LOW = 0, PRIO_NORMAL = 1, PRIO_HIGH = 2 } Priority;

typedef enum {
    SEQ_WAITING,     /* submitted (or preempted), not holding KV blocks */
    SEQ_RUNNING,     /* holds a sequence slot and its blocks */
    SEQ_FINISHED,
} SeqState;

typedef enum {
    FIN_NONE = 0,
    FIN_LENGTH,      /* max_tokens generated */
    FIN_EOS,         /* the model produced end-of-sequence */
    FIN_STOP,        /* a stop string appeared (it is not part of the output) */
    FIN_CANCEL,      /* cancelled by the caller */
    FIN_CONTEXT,     /* the sequence reached the model's context length */
    FIN_ERROR,       /* the model produced non-finite logits (NaN or infinity) for it */
} FinishReason;

enum { SEQ_MAX_EOG = 8 };   /* end-of-generation tokens a sequence stops on, at most */
enum { SEQ_MAX_DRAFT = 16 }; /* draft tokens a sequence may ask to have verified per step */

typedef struct Sequence {
    int id;
    Priority priority;
    SeqState state;
    FinishReason finish;
    /* tokens: the prompt, then each generated token as it is sampled */
    int *tokens;                 /* (cap) */
    int cap;                     /* min(prompt + max_tokens, P + 1): the last token needs no K/V */
    int n_prompt, n_tokens, n_out;
    int max_tokens;
    int eog[SEQ_MAX_EOG];        /* (n_eog) the tokens that end it: the vocabulary's end of
                                    generation (EOS, end of turn, ...; tok_eog) */
    int n_eog;                   /* 0: nothing ends it but its length (or ignore_eos) */
    Sampler sampler;             /* its own parameters and random stream */
    /* speculative decoding (notes/speculative.md): up to `speculate` tokens
     * guessed from its own tokens are checked per step. A draft lives in
     * tokens[n_tokens .. n_tokens + n_draft), past the last real token,
     * until the step that verifies it: accepted tokens then stay where they
     * are, rejected ones are written over. */
    int speculate;               /* most draft tokens per step it asks for; 0: none */
    int n_draft;                 /* draft tokens proposed for the next step */
    int spec_len;                /* how long the next guess may be: one past what its last
                                    guess had accepted, up to speculate (0: not yet guessed) */
    long spec_proposed, spec_accepted;   /* draft tokens verified, and accepted, so far */
    /* the scheduler's */
    int n_computed;              /* leading tokens whose K/V are in the cache */
    int slot;                    /* index among the running sequences, or -1 */
    KvSeq kv;                    /* its block table (allocated once, at submission) */
    long arrival_step;           /* scheduler step at submission (aging counts from it) */
    int n_preempted;             /* times it lost its blocks */
    int prefix_hit_tokens;       /* prompt tokens found in the prefix cache (all admissions) */
    int blocks_released;         /* blocks let go when it last left its slot */
    struct Sequence *next;       /* link in the scheduler's waiting or preempted queue */
    /* samples of one prompt: the first heads a list of the others
     * (fork_next), which wait to be forked from it (fork_parent) */
    struct Sequence *fork_parent, *fork_next;
} Sequence;

/* One sequence's work in a step: positions from .. from + n - 1. */
typedef struct {
    Sequence *seq;
    int slot;            /* its running slot this step */
    int n;               /* tokens to run */
    int from;            /* first position (seq->n_computed when scheduled) */
    int sample;          /* 1 if this run reaches the last known token: sample the next */
    int draft;           /* of the n, the last `draft` are draft tokens to verify (speculation):
                            logits for each of the last draft + 1 positions */
} StepItem;

/* What the scheduler decided for one step: the executor's whole input, and
 * the events the engine reports upward. Arrays allocated once (max_seqs). */
typedef struct {
    StepItem *items;
    int n_items;
    int n_tokens;        /* sum of items[].n (<= token budget) */
    int n_prefill_tokens, n_decode_tokens;
    int n_draft_tokens;  /* sum of items[].draft: guesses to verify (also in n_tokens) */
    int n_spec_off;      /* sequences with a draft that runs without it: the step was full */
    Sequence **preempted;   /* preempted in this step */
    int n_preempted;
    Sequence **admitted;    /* got a slot in this step (new or resumed) */
    int n_admitted;
    Sequence **cow;         /* their reservation copied a shared block */
    int n_cow;
} StepPlan;

#endif
