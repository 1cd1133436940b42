/* kv_view.h - the KV pool as plain data: each block's refcount and whether
 * the prefix cache can find it, and each running sequence's block table.
 * The engine fills one (engine_kv_view), the trace draws it (trace_kv_map,
 * trace_block_tables), tools/bench_batch measures it; none of them reads
 * the pool's fields. Its pointers point into the pool and the sequences:
 * read it before the engine steps again. */
#ifndef KV_VIEW_H
#define KV_VIEW_H

typedef struct {
    int id;                      /* the sequence's (the request's) id */
    int slot;                    /* its running slot */
    int n_tokens;                /* positions whose K/V are written */
    int n_blocks;
    const int *table;            /* (n_blocks) block ids, in position order */
} KvViewSeq;

typedef struct {
    int n_blocks, block_size;
    const int *refcount;         /* (n_blocks) holders; 0 = free or cached */
    const unsigned char *registered;   /* (n_blocks) 1 when the prefix cache can find it */
    int n_seqs;                  /* running sequences, in slot order */
    const KvViewSeq *seqs;
} KvView;

#endif
