/* kv_paged.h - the paged KV cache: a pool of fixed-size blocks, per-sequence
 * block tables, refcounts, a prefix cache, copy-on-write, LRU eviction.
 *
 * Dimensions: L layers, NB blocks in the pool, BS tokens per block (block
 * size), KVD floats of K (and of V) per token per layer (Hkv * S).
 *
 * A sequence's token at position p lives in block table[p / BS], row p % BS.
 * The K of layer l for that token is at key + ((l * NB + block) * BS + row) * KVD,
 * so within a layer a block's BS rows are contiguous and "slot" block * BS + row
 * names a row of a (NB * BS, KVD) matrix; model.c reads and writes through slots.
 *
 * Life of a block: free -> held (refcount >= 1) -> when the last holder lets
 * go, either free again, or, if it is full and registered in the prefix cache,
 * "cached": refcount 0, still holding its tokens' K/V, findable by hash, and
 * evicted (least recently released first) only when the free list is empty. */
#ifndef KV_PAGED_H
#define KV_PAGED_H
#include "base/err.h"
#include <stddef.h>
#include <stdint.h>

/* Returned by kv_seq_reserve when the pool cannot give the blocks: the
 * scheduler's cue to preempt. Not an error of the caller. */
enum { KV_FULL = 1 };

typedef struct {
    int L, KVD;
    int NB;                  /* blocks in the pool */
    int BS;                  /* tokens per block */
    float *key;              /* (L, NB, BS, KVD) */
    float *value;            /* (L, NB, BS, KVD) */
    /* per block */
    int *refcount;           /* (NB) holders; 0 = free or cached */
    uint64_t *hash;          /* (NB) chained hash, valid while registered */
    uint32_t *gen;           /* (NB) bumped each time the block is registered */
    int *parent;             /* (NB) block before it in the chain, -1 for the first */
    uint32_t *parent_gen;    /* (NB) the parent's gen when this block was registered */
    int *tokens;             /* (NB, BS) the tokens a registered block holds */
    unsigned char *registered; /* (NB) 1 when findable in the prefix cache */
    int *free_stack;         /* (NB) free blocks; n_free on top */
    int n_free;
    int *lru_prev, *lru_next;/* (NB) doubly linked list of cached blocks */
    int lru_head, lru_tail;  /* head = least recently released (evicted first) */
    int n_cached;
    int *bucket;             /* (n_buckets) hash table of registered blocks */
    int *chain;              /* (NB) next block in the same bucket, -1 ends */
    int n_buckets;           /* power of two */
    /* counters, for tests, trace and bench */
    long hits_tokens;        /* tokens whose K/V were found in the prefix cache */
    long cow_copies;         /* blocks copied on write */
    long evictions;          /* cached blocks reused for new content */
    int peak_held;           /* most blocks held at once */
    /* Copy-on-write copies since the last kv_take_copies, (src, dst, rows)
     * each: the pool copies the host rows itself, and a KV cache kept
     * elsewhere (a GPU's) makes the same copies from this log before the
     * step that writes them, as vLLM's blocks_to_copy does. */
    int *copy_log;           /* (cap_copies, 3) */
    int n_copies, cap_copies;
    int copies_lost;         /* copies that found the log full since the last take */
    void *block_;            /* the one allocation behind everything above */
    size_t bytes;
} KvPool;

/* A sequence's view of the pool. The table is allocated once (capacity
 * blocks, enough for the model's context) when the sequence is taken
 * (engine_add), and emptied and refilled as it is preempted and resumed,
 * so the step loop allocates nothing. */
typedef struct {
    int *table;              /* (cap) block ids */
    int cap;                 /* capacity of table, in blocks */
    int n_blocks;            /* entries of table in use */
    int n_tokens;            /* positions whose K/V are written (committed) */
    int n_registered;        /* leading full blocks already offered to the prefix cache */
    /* The registered block that stands for this sequence's first n_registered
     * blocks: table[n_registered - 1] itself, or, when an equal block was
     * already registered by another sequence, that twin. -1: none yet (or the
     * chain was broken and later blocks are not registered). */
    int chain_block;
    uint32_t chain_gen;      /* gen of chain_block when it was taken as parent */
} KvSeq;

/* Pool of n_blocks blocks of block_size tokens, for L layers of kvd floats. */
int kv_pool_init(KvPool *p, int L, int kvd, int block_size, int n_blocks, Err *e);
void kv_pool_free(KvPool *p);                      /* accepts a zeroed pool */
/* Blocks that n bytes of K and V buy (for a pool sized in bytes). */
int kv_blocks_for_bytes(size_t bytes, int L, int kvd, int block_size);

int kv_seq_init(KvSeq *s, int cap_blocks, Err *e);
void kv_seq_free(KvSeq *s);                        /* accepts a zeroed KvSeq */

/* Counts. held + cached + free == NB at all times. */
int kv_free_blocks(const KvPool *p);               /* on the free list */
int kv_cached_blocks(const KvPool *p);             /* refcount 0, findable, evictable */
int kv_held_blocks(const KvPool *p);               /* refcount >= 1 */
/* Blocks a request could get right now: free + cached (evictable). */
int kv_available_blocks(const KvPool *p);

/* The pool's figures at one moment, by value: what a stage above reads
 * instead of the pool's fields (notes/stages.md, "Snapshots"). */
typedef struct {
    int n_blocks, block_size;    /* NB, BS */
    int held, cached, free;      /* refcount >= 1; refcount 0 and findable; on the free list */
    int peak_held;               /* most blocks held at once */
    size_t bytes, block_bytes;   /* the pool, and one block (K and V of every layer) */
    long hits_tokens;            /* tokens whose K/V were found in the prefix cache */
    long cow_copies;             /* blocks copied on write */
    long evictions;              /* cached blocks reused for new content */
} KvStats;
KvStats kv_stats(const KvPool *p);

/* Prefix cache lookup for a sequence that holds nothing yet: walk the full
 * blocks of tokens[0 .. n) (at most max_tokens of them), find each by the hash
 * chained from its parent, compare its tokens (so a hash collision cannot
 * give wrong K/V), and take a reference to every hit. Stops at the first
 * miss. Returns the number of tokens reused (a multiple of BS); the sequence
 * then has those blocks and n_tokens set to that count. */
int kv_seq_match_prefix(KvPool *p, KvSeq *s, const int *tokens, int n, int max_tokens);

/* Make room for positions n_tokens .. n_tokens + n - 1: allocate the blocks
 * they need (from the free list, else by evicting the least recently cached
 * block) and, if the block that the first of them lands in is shared
 * (refcount > 1), copy it first (copy-on-write) so the writes touch only this
 * sequence's copy. All or nothing: returns KV_FULL and changes nothing if the
 * pool cannot give every block; ST_ARG if the table's capacity would be exceeded. */
int kv_seq_reserve(KvPool *p, KvSeq *s, int n);

/* The slot (block * BS + row) of position pos, which must be reserved. */
int kv_seq_slot(const KvSeq *s, int BS, int pos);

/* The K/V of positions n_tokens .. n_tokens + n - 1 are now written: advance
 * n_tokens and register every block this completes in the prefix cache
 * (tokens: the sequence's tokens from position 0). A block is registered with
 * its parent (the chain block, with its gen), so a lookup hit proves the whole
 * prefix equal, not only this block's tokens. If an equal block (same parent,
 * same tokens) is already registered, this one stays unregistered (it is
 * freed, not cached, when released) and the twin becomes the chain block. */
void kv_seq_commit(KvPool *p, KvSeq *s, const int *tokens, int n);

/* Speculation's rewind: positions past n_tokens were reserved, and perhaps
 * written, for draft tokens that were then rejected. Their rows need
 * nothing (the next write covers them), but blocks that hold no committed
 * position go back: refcount - 1 each, to the free list (they were never
 * full of committed tokens, so never registered). Returns how many. */
int kv_seq_rewind(KvPool *p, KvSeq *s);

/* The copy-on-write log: *log gets its (src, dst, rows) triples, oldest
 * first, and the log is emptied. Returns how many, or -1 when some were
 * lost to a full log (2 NB entries: only a caller that never takes them
 * fills it). */
int kv_take_copies(KvPool *p, const int **log);
/* Let go of every block (refcount - 1 each; a block nobody holds goes to the
 * cache if registered, else to the free list). Returns the blocks released;
 * the KvSeq is empty afterwards and can be reused. */
int kv_seq_release(KvPool *p, KvSeq *s);

/* dst (empty) shares every block of src: the same table, refcounts + 1.
 * The first write into a shared block copies it (see kv_seq_reserve).
 * ST_ARG if dst's capacity is too small or dst is not empty. */
int kv_seq_fork(KvPool *p, KvSeq *dst, const KvSeq *src);

/* Check the pool's invariants (refcounts >= 0, every block in exactly one of
 * free / cached / held, list and table consistency). Returns 0 when sound,
 * otherwise fills e with the first problem found. For tests. */
int kv_pool_check(const KvPool *p, Err *e);

#endif
