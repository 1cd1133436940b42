/* exercises/kv_map/wrong.c - a plausible answer that is wrong.
 *
 * It asks the prefix cache first: "a registered block is a cached block, draw
 * '+'", and only then who holds the others. But registering is not letting
 * go: a running request's full blocks are registered as soon as they are
 * computed, so that a request arriving meanwhile can share them, and they are
 * held all the same. On this map a request that is halfway through a long
 * prompt seems to hold only its last, partial block, and the pool looks
 * emptier than it is; the trace's memory line, counting refcounts, disagrees
 * with the picture. Cached means registered *and* held by nobody: ask the
 * refcount first. */
int trace_kv_map(const KvView *v, char *buf, int cap) {
    enum { PER_LINE = 64 };
    char line[PER_LINE + 32];
    int n = 0;
    if (cap > 0) buf[0] = 0;
    int k = snprintf(line, sizeof line, "%15sKV pool, %d blocks of %d tokens", "", v->n_blocks, v->block_size);
    put(buf, cap, &n, line, k);
    const char *legend = " ('.' free, '+' cached, id = held by that request, '*' shared):\n";
    put(buf, cap, &n, legend, (int)strlen(legend));
    for (int b0 = 0; b0 < v->n_blocks; b0 += PER_LINE) {
        int w = v->n_blocks - b0 < PER_LINE ? v->n_blocks - b0 : PER_LINE;
        char row[PER_LINE];
        for (int i = 0; i < w; i++) {
            int b = b0 + i;
            row[i] = v->registered[b] ? '+' : v->refcount[b] > 1 ? '*' : v->refcount[b] == 1 ? '?' : '.';
        }
        for (int s = 0; s < v->n_seqs; s++) {
            const KvViewSeq *q = &v->seqs[s];
            for (int j = 0; j < q->n_blocks; j++) {
                int b = q->table[j];
                if (b >= b0 && b < b0 + w && row[b - b0] == '?') row[b - b0] = owner_char(q->id);
            }
        }
        k = snprintf(line, sizeof line, "%15s%5d %.*s\n", "", b0, w, row);
        put(buf, cap, &n, line, k);
    }
    return n;
}
