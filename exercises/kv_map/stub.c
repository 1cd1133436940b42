/* exercises/kv_map/stub.c - the handout: an empty picture.
 *
 * Copy this file to mine.c and write the function there; `make exercise
 * EX=kv_map` compiles your mine.c in the place of the solution, inside
 * src/trace/trace.c, where put (append to a bounded buffer, keeping it
 * terminated) and owner_char (a request id as one base-62 character) are.
 *
 * The contract (src/trace/trace.h): the KV pool, told as plain data
 * (src/base/kv_view.h: v->refcount and v->registered for each of its
 * v->n_blocks blocks), as text for the trace.
 * A first line "KV pool, NB blocks of BS tokens" with its legend, indented 15
 * spaces; then one character per block, 64 to a line, each line indented
 * 15 spaces and numbered with its first block ("%5d "): '.' a free block, '+'
 * a cached one (nobody holds it; the prefix cache can still find it), the id
 * of the request that holds it (owner_char), '*' for a block several hold.
 * Who holds what: the running sequences, v->seqs[0 .. v->n_seqs), each
 * with its id and its block table q->table[0 .. q->n_blocks). Writes at most cap - 1 characters
 * and the NUL; returns the length written. */
int trace_kv_map(const KvView *v, char *buf, int cap) {
    /* TODO: draw the pool (notes/tracing.md, "The KV map"). */
    if (cap > 0) buf[0] = 0;
    return 0;
}
