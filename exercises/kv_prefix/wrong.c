/* exercises/kv_prefix/wrong.c - a plausible answer that is wrong.
 *
 * It reasons: "the hash is chained, so it already stands for the whole
 * prefix; a block with the same hash is the same block". It walks the hash
 * bucket and takes the first block with an equal hash, without asking for
 * the same parent (and its gen) or the same tokens. Two prefixes whose hashes
 * collide would then share K/V: the request gets another prompt's attention
 * state and says the wrong thing, silently. A 64-bit collision is rare, but
 * "rare" is not "never", and a block id that was evicted and registered
 * again under another parent is not rare at all.
 * kv_a_hash_collision_is_a_miss_not_wrong_output catches it. */
int kv_seq_match_prefix(KvPool *p, KvSeq *s, const int *tokens, int n, int max_tokens) {
    assert(s->n_blocks == 0 && s->n_tokens == 0);
    int BS = p->BS, limit = n < max_tokens ? n : max_tokens;
    int want = limit > 0 ? limit / BS : 0;
    if (want > s->cap) want = s->cap;
    uint64_t h = ROOT_HASH;
    int prev = -1, got = 0;
    uint32_t prev_gen = 0;
    for (; got < want; got++) {
        h = block_hash(h, tokens + (size_t)got * BS, BS);
        int b = p->bucket[bucket_of(p, h)];
        while (b >= 0 && p->hash[b] != h) b = p->chain[b];   /* the hash alone decides */
        if (b < 0) break;
        if (p->refcount[b]++ == 0) lru_unlink(p, b);
        s->table[got] = b;
        prev = b;
        prev_gen = p->gen[b];
    }
    s->n_blocks = s->n_registered = got;
    s->n_tokens = got * BS;
    s->chain_block = prev;
    s->chain_gen = prev_gen;
    p->hits_tokens += (long)got * BS;
    note_held(p);
    return got * BS;
}
