/* exercises/kv_map/stub.c - the handout: an empty picture.
 *
 * Copy this file to mine.c and write the function there; `make exercise
 * EX=kv_map` compiles your mine.c in the place of the solution, inside
 * src/engine.c, where put (append to a bounded buffer, keeping it
 * terminated) and owner_char (a request id as one base-62 character) are.
 *
 * The contract (src/engine.h): the KV pool en->pool as text, for the trace.
 * A first line "KV pool, NB blocks of BS tokens" with its legend, indented 15
 * spaces; then one character per block, 64 to a line, each line indented
 * 15 spaces and numbered with its first block ("%5d "): '.' a free block, '+'
 * a cached one (nobody holds it; the prefix cache can still find it), the id
 * of the request that holds it (owner_char), '*' for a block several hold.
 * Who holds what: the running sequences, en->sched.running[0 ..
 * en->sched.cfg.max_seqs) (NULL for an empty slot), each with its block
 * table q->kv.table[0 .. q->kv.n_blocks). Writes at most cap - 1 characters
 * and the NUL; returns the length written. */
int engine_kv_map(const Engine *en, char *buf, int cap) {
    /* TODO: draw the pool (notes/tracing.md, "The KV map"). */
    if (cap > 0) buf[0] = 0;
    return 0;
}
