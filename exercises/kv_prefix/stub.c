/* exercises/kv_prefix/stub.c - the handout: kv_seq_match_prefix finds nothing.
 *
 * Copy this file to mine.c and write the function there; `make exercise
 * EX=kv_prefix` compiles your mine.c in the place of the solution, inside
 * src/kv_paged.c, so the file's types and static helpers are yours to use:
 * ROOT_HASH, block_hash, cache_find, lru_unlink, note_held.
 *
 * The contract (src/kv_paged.h): for a sequence that holds nothing yet, walk
 * the full blocks of tokens[0 .. min(n, max_tokens)), find each in the prefix
 * cache by the hash chained from its parent, take a reference to every hit,
 * stop at the first miss; return the tokens reused (a multiple of BS), with
 * the sequence holding those blocks. */
int kv_seq_match_prefix(KvPool *p, KvSeq *s, const int *tokens, int n, int max_tokens) {
    assert(s->n_blocks == 0 && s->n_tokens == 0);
    /* TODO: a cache that never hits is correct but useless: every prompt is
     * computed from scratch. Find the blocks. */
    return 0;
}
