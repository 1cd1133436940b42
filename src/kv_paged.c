/* kv_paged.c - the paged KV cache (see kv_paged.h for the layout).
 *
 * A block is BS consecutive positions of one sequence: their K and V rows in
 * every layer. Instead of giving each sequence one slab as long as the longest
 * context, the pool hands out blocks as a sequence grows, and a per-sequence
 * table maps position p to block table[p / BS]. This is the paging of virtual
 * memory applied to attention (PagedAttention, Kwon et al., SOSP 2023): no
 * memory is reserved for tokens that never come, and a block can appear in the
 * tables of several sequences at once, counted by its refcount.
 *
 * Life of a block: free -> held (refcount >= 1) -> released. A released block
 * that is full and registered in the prefix cache is kept as "cached": its K/V
 * stay valid, a later request with the same prefix takes it back instead of
 * recomputing. Cached blocks sit on an LRU list and are evicted (reused for new
 * content) only when the free list is empty, least recently released first.
 *
 * The prefix cache key of a block is a hash of its tokens chained with its
 * parent's hash, so it stands for the whole prefix, not for the block alone.
 * A hash can collide, so a hit also compares the stored tokens and the
 * parent's identity (block id and gen, the count of its registrations): a
 * collision then costs a miss, never wrong K/V.
 *
 * Sharing makes writes dangerous: a sequence about to write into a block that
 * others hold (after a fork) first copies it (copy-on-write). Full committed
 * blocks are never written again, so only the block being filled is copied. */
#include "kv_paged.h"
#include "base/mem.h"
#include <assert.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

/* Parent hash of a sequence's first block. Any constant works; a nonzero one
 * keeps an empty prefix from looking like a zeroed field. */
#define ROOT_HASH 0x6b765f7061676564ULL   /* "kv_paged" */

/* splitmix64's finalizer: a bijection that spreads every input bit. */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Folding token by token makes the hash depend on order and on the parent. */
static uint64_t block_hash(uint64_t parent_hash, const int *tokens, int BS) {
    uint64_t h = parent_hash;
    for (int i = 0; i < BS; i++) h = mix64(h + 0x9e3779b97f4a7c15ULL + (uint32_t)tokens[i]);
    return h;
}

static size_t round64(size_t n) { return (n + 63) / 64 * 64; }

/* ------------------------------------------------------------ pool */

int kv_pool_init(KvPool *p, int L, int kvd, int block_size, int n_blocks, Err *e) {
    memset(p, 0, sizeof *p);
    if (L < 1) return err_set(e, ST_ARG, "kv pool: L %d is not a layer count (need >= 1)", L);
    if (kvd < 1) return err_set(e, ST_ARG, "kv pool: kvd %d must be >= 1", kvd);
    if (block_size < 1) return err_set(e, ST_ARG, "kv pool: block_size %d must be >= 1", block_size);
    if (n_blocks < 1) return err_set(e, ST_ARG, "kv pool: n_blocks %d must be >= 1", n_blocks);
    /* Slots (block * BS + row) are ints, and so is the bucket count (2 * NB). */
    if (n_blocks > INT_MAX / 4 || (long long)n_blocks * block_size > INT_MAX)
        return err_set(e, ST_ARG, "kv pool: n_blocks %d of block_size %d overflow int slots",
                       n_blocks, block_size);
    size_t NB = (size_t)n_blocks, rows = NB * (size_t)block_size, kv;
    if (__builtin_mul_overflow(rows, (size_t)L, &kv) || __builtin_mul_overflow(kv, (size_t)kvd, &kv) ||
        kv > SIZE_MAX / 16)
        return err_set(e, ST_ARG, "kv pool: L %d x kvd %d x %zu rows overflows size_t", L, kvd, rows);
    int n_buckets = 1;
    while (n_buckets < 2 * n_blocks) n_buckets *= 2;

    enum { KEY, VALUE, REFCOUNT, HASH, GEN, PARENT, PARENT_GEN, TOKENS, REGISTERED,
           FREE_STACK, LRU_PREV, LRU_NEXT, BUCKET, CHAIN, COPY_LOG, N_PIECES };
    const size_t size[N_PIECES] = {
        [KEY] = kv * sizeof(float), [VALUE] = kv * sizeof(float), [REFCOUNT] = NB * sizeof(int),
        [HASH] = NB * sizeof(uint64_t), [GEN] = NB * sizeof(uint32_t), [PARENT] = NB * sizeof(int),
        [PARENT_GEN] = NB * sizeof(uint32_t), [TOKENS] = rows * sizeof(int), [REGISTERED] = NB,
        [FREE_STACK] = NB * sizeof(int), [LRU_PREV] = NB * sizeof(int), [LRU_NEXT] = NB * sizeof(int),
        [BUCKET] = (size_t)n_buckets * sizeof(int), [CHAIN] = NB * sizeof(int),
        [COPY_LOG] = 2 * NB * 3 * sizeof(int)};
    size_t total = 64;   /* room to align the start */
    for (int i = 0; i < N_PIECES; i++) total += round64(size[i]);
    char *block = mem_alloc(total);
    if (!block)
        return err_set(e, ST_NOMEM, "kv pool: cannot allocate %zu bytes for %d blocks", total, n_blocks);
    char *piece[N_PIECES], *at = (char *)(((uintptr_t)block + 63) & ~(uintptr_t)63);
    for (int i = 0; i < N_PIECES; i++) {
        piece[i] = at;
        at += round64(size[i]);
    }
    p->key = (float *)piece[KEY];
    p->value = (float *)piece[VALUE];
    p->refcount = (int *)piece[REFCOUNT];
    p->hash = (uint64_t *)piece[HASH];
    p->gen = (uint32_t *)piece[GEN];
    p->parent = (int *)piece[PARENT];
    p->parent_gen = (uint32_t *)piece[PARENT_GEN];
    p->tokens = (int *)piece[TOKENS];
    p->registered = (unsigned char *)piece[REGISTERED];
    p->free_stack = (int *)piece[FREE_STACK];
    p->lru_prev = (int *)piece[LRU_PREV];
    p->lru_next = (int *)piece[LRU_NEXT];
    p->bucket = (int *)piece[BUCKET];
    p->chain = (int *)piece[CHAIN];
    p->copy_log = (int *)piece[COPY_LOG];
    p->cap_copies = 2 * n_blocks;
    p->block_ = block;
    p->bytes = total;
    p->L = L;
    p->KVD = kvd;
    p->NB = n_blocks;
    p->BS = block_size;
    p->n_buckets = n_buckets;
    /* Stacked in reverse so blocks come out 0, 1, 2...: easier to follow in a trace. */
    for (int b = 0; b < n_blocks; b++) {
        p->free_stack[b] = n_blocks - 1 - b;
        p->parent[b] = p->lru_prev[b] = p->lru_next[b] = p->chain[b] = -1;
    }
    p->n_free = n_blocks;
    for (int i = 0; i < n_buckets; i++) p->bucket[i] = -1;
    p->lru_head = p->lru_tail = -1;
    return ST_OK;
}

void kv_pool_free(KvPool *p) {
    mem_free(p->block_);
    memset(p, 0, sizeof *p);
}

int kv_blocks_for_bytes(size_t bytes, int L, int kvd, int block_size) {
    assert(L >= 1 && kvd >= 1 && block_size >= 1);
    size_t per_block;
    if (__builtin_mul_overflow(2 * sizeof(float) * (size_t)L, (size_t)block_size, &per_block) ||
        __builtin_mul_overflow(per_block, (size_t)kvd, &per_block))
        return 0;   /* one block is bigger than any size_t */
    size_t n = bytes / per_block;
    return n > INT_MAX ? INT_MAX : (int)n;
}

int kv_free_blocks(const KvPool *p) { return p->n_free; }
int kv_cached_blocks(const KvPool *p) { return p->n_cached; }
int kv_held_blocks(const KvPool *p) { return p->NB - p->n_free - p->n_cached; }
int kv_available_blocks(const KvPool *p) { return p->n_free + p->n_cached; }

KvStats kv_stats(const KvPool *p) {
    return (KvStats){.n_blocks = p->NB, .block_size = p->BS, .held = kv_held_blocks(p),
                     .cached = p->n_cached, .free = p->n_free, .peak_held = p->peak_held,
                     .bytes = p->bytes, .block_bytes = 2 * (size_t)p->L * p->BS * p->KVD * sizeof(float),
                     .hits_tokens = p->hits_tokens, .cow_copies = p->cow_copies,
                     .evictions = p->evictions};
}

static void note_held(KvPool *p) {
    int held = kv_held_blocks(p);
    if (held > p->peak_held) p->peak_held = held;
}

/* ------------------------------------------------------------ LRU list and hash table */

static void lru_unlink(KvPool *p, int b) {
    int prev = p->lru_prev[b], next = p->lru_next[b];
    if (prev >= 0) p->lru_next[prev] = next; else p->lru_head = next;
    if (next >= 0) p->lru_prev[next] = prev; else p->lru_tail = prev;
    p->lru_prev[b] = p->lru_next[b] = -1;
    p->n_cached--;
}

static void lru_append(KvPool *p, int b) {
    p->lru_prev[b] = p->lru_tail;
    p->lru_next[b] = -1;
    if (p->lru_tail >= 0) p->lru_next[p->lru_tail] = b; else p->lru_head = b;
    p->lru_tail = b;
    p->n_cached++;
}

static int bucket_of(const KvPool *p, uint64_t h) { return (int)(h & (uint64_t)(p->n_buckets - 1)); }

/* A registered block equal to the one described, or -1. The hash only narrows
 * the search; equality is decided by parent identity and the tokens. */
static int cache_find(const KvPool *p, uint64_t h, int parent, uint32_t parent_gen, const int *tokens) {
    for (int b = p->bucket[bucket_of(p, h)]; b >= 0; b = p->chain[b])
        if (p->hash[b] == h && p->parent[b] == parent && p->parent_gen[b] == parent_gen &&
            memcmp(p->tokens + (size_t)b * p->BS, tokens, (size_t)p->BS * sizeof(int)) == 0)
            return b;
    return -1;
}

static void cache_register(KvPool *p, int b, uint64_t h, int parent, uint32_t parent_gen,
                           const int *tokens) {
    assert(!p->registered[b]);
    p->gen[b]++;   /* children registered under an earlier life of b no longer match */
    p->hash[b] = h;
    p->parent[b] = parent;
    p->parent_gen[b] = parent_gen;
    memcpy(p->tokens + (size_t)b * p->BS, tokens, (size_t)p->BS * sizeof(int));
    int k = bucket_of(p, h);
    p->chain[b] = p->bucket[k];
    p->bucket[k] = b;
    p->registered[b] = 1;
}

static void cache_unregister(KvPool *p, int b) {
    int *link = &p->bucket[bucket_of(p, p->hash[b])];
    while (*link != b) {
        assert(*link >= 0);   /* a registered block is always in its bucket */
        link = &p->chain[*link];
    }
    *link = p->chain[b];
    p->chain[b] = -1;
    p->parent[b] = -1;
    p->registered[b] = 0;
}

/* One block with refcount 1: a free one if any, else the least recently
 * released cached block, whose old content is forgotten. */
static int take_block(KvPool *p) {
    int b;
    if (p->n_free > 0) {
        b = p->free_stack[--p->n_free];
    } else {
        b = p->lru_head;
        assert(b >= 0);   /* callers check kv_available_blocks first */
        lru_unlink(p, b);
        cache_unregister(p, b);
        p->evictions++;
    }
    assert(p->refcount[b] == 0 && !p->registered[b]);
    p->refcount[b] = 1;
    return b;
}

static void drop_ref(KvPool *p, int b) {
    assert(p->refcount[b] > 0);
    if (--p->refcount[b] > 0) return;
    if (p->registered[b]) lru_append(p, b);
    else p->free_stack[p->n_free++] = b;
}

/* K and V rows [0, rows) of block src, every layer, into block dst. */
static void copy_rows(KvPool *p, int dst, int src, int rows) {
    size_t stride = (size_t)p->BS * p->KVD, n = (size_t)rows * p->KVD * sizeof(float);
    for (int l = 0; l < p->L; l++) {
        size_t layer = (size_t)l * p->NB;
        memcpy(p->key + (layer + dst) * stride, p->key + (layer + src) * stride, n);
        memcpy(p->value + (layer + dst) * stride, p->value + (layer + src) * stride, n);
    }
}

/* ------------------------------------------------------------ sequences */

int kv_seq_init(KvSeq *s, int cap_blocks, Err *e) {
    memset(s, 0, sizeof *s);
    s->chain_block = -1;
    if (cap_blocks < 1) return err_set(e, ST_ARG, "kv seq: cap_blocks %d must be >= 1", cap_blocks);
    s->table = mem_alloc((size_t)cap_blocks * sizeof(int));
    if (!s->table)
        return err_set(e, ST_NOMEM, "kv seq: cannot allocate a table of %d blocks", cap_blocks);
    s->cap = cap_blocks;
    return ST_OK;
}

void kv_seq_free(KvSeq *s) {
    mem_free(s->table);
    memset(s, 0, sizeof *s);
}

/* exercises/kv_prefix/ hollows this function: built with -DEXERCISE_KV_PREFIX,
 * the file that macro names stands in its place (tools/exercise.sh). */
#ifdef EXERCISE_KV_PREFIX
#include EXERCISE_KV_PREFIX
#else
int kv_seq_match_prefix(KvPool *p, KvSeq *s, const int *tokens, int n, int max_tokens) {
    assert(s->n_blocks == 0 && s->n_tokens == 0);
    int BS = p->BS, limit = n < max_tokens ? n : max_tokens;
    int want = limit > 0 ? limit / BS : 0;
    if (want > s->cap) want = s->cap;
    uint64_t h = ROOT_HASH;
    int prev = -1, got = 0;
    uint32_t prev_gen = 0;
    for (; got < want; got++) {
        const int *t = tokens + (size_t)got * BS;
        h = block_hash(h, t, BS);
        int b = cache_find(p, h, prev, prev_gen, t);
        if (b < 0) break;
        if (p->refcount[b]++ == 0) lru_unlink(p, b);   /* it was cached: now held again */
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
#endif

int kv_seq_reserve(KvPool *p, KvSeq *s, int n) {
    assert(n >= 0 && s->n_tokens <= s->n_blocks * p->BS);
    if (n == 0) return ST_OK;
    int BS = p->BS;
    long long end_blocks = ((long long)s->n_tokens + n + BS - 1) / BS;
    if (end_blocks > s->cap) return ST_ARG;
    int end = (int)end_blocks, fresh = end > s->n_blocks ? end - s->n_blocks : 0;
    /* The writes land in blocks first .. end-1. Those before first are full and
     * committed, never written again, so shared is safe for them; a block from
     * first on that others hold needs a private copy. Normally only the
     * partially filled block at first is shared (a fork), but a fork made after
     * reserving ahead shares later, unwritten blocks too: they get a fresh
     * block each (nothing to copy). */
    int first = s->n_tokens / BS, shared_end = end < s->n_blocks ? end : s->n_blocks, cow = 0;
    for (int i = first; i < shared_end; i++) cow += p->refcount[s->table[i]] > 1;
    if (fresh + cow > kv_available_blocks(p)) return KV_FULL;
    for (int i = first; i < shared_end; i++) {
        int old = s->table[i];
        if (p->refcount[old] <= 1) continue;
        int b = take_block(p), rows = s->n_tokens - i * BS;
        rows = rows < 0 ? 0 : rows > BS ? BS : rows;
        copy_rows(p, b, old, rows);
        if (p->n_copies < p->cap_copies) {
            int *c = p->copy_log + 3 * p->n_copies++;
            c[0] = old, c[1] = b, c[2] = rows;
        } else {
            p->copies_lost++;
        }
        p->refcount[old]--;   /* still >= 1: the other holders keep it */
        s->table[i] = b;
        p->cow_copies++;
    }
    for (int i = s->n_blocks; i < end; i++) s->table[i] = take_block(p);
    if (end > s->n_blocks) s->n_blocks = end;
    note_held(p);
    return ST_OK;
}

int kv_take_copies(KvPool *p, const int **log) {
    int n = p->copies_lost ? -1 : p->n_copies;
    *log = p->copy_log;
    p->n_copies = p->copies_lost = 0;
    return n;
}

int kv_seq_slot(const KvSeq *s, int BS, int pos) {
    assert(pos >= 0 && pos < s->n_blocks * BS);
    return s->table[pos / BS] * BS + pos % BS;
}

/* The chain block can be another sequence's block (a twin), which may have
 * been evicted, and perhaps registered again for other content, since. */
static int chain_alive(const KvPool *p, const KvSeq *s) {
    int c = s->chain_block;
    return c >= 0 && p->registered[c] && p->gen[c] == s->chain_gen;
}

void kv_seq_commit(KvPool *p, KvSeq *s, const int *tokens, int n) {
    int BS = p->BS;
    assert(n >= 0 && s->n_tokens + n <= s->n_blocks * BS);
    s->n_tokens += n;
    for (int i = s->n_registered; (i + 1) * BS <= s->n_tokens; i = ++s->n_registered) {
        int b = s->table[i];
        const int *t = tokens + (size_t)i * BS;
        if (i > 0 && !chain_alive(p, s)) {
            /* No registered parent to hang this block on: a lookup could never
             * reach it, so it and the blocks after it stay unregistered. */
            s->chain_block = -1;
            continue;
        }
        if (p->registered[b]) {   /* defensive: already offered (shared with its registrar) */
            s->chain_block = b;
            s->chain_gen = p->gen[b];
            continue;
        }
        int parent = i > 0 ? s->chain_block : -1;
        uint32_t parent_gen = i > 0 ? s->chain_gen : 0;
        uint64_t h = block_hash(i > 0 ? p->hash[parent] : ROOT_HASH, t, BS);
        int twin = cache_find(p, h, parent, parent_gen, t);
        if (twin < 0) {   /* first of its kind: this block stands for the prefix */
            cache_register(p, b, h, parent, parent_gen, t);
            twin = b;
        }
        s->chain_block = twin;
        s->chain_gen = p->gen[twin];
    }
}

int kv_seq_rewind(KvPool *p, KvSeq *s) {
    int keep = (s->n_tokens + p->BS - 1) / p->BS, n = 0;
    for (int i = s->n_blocks - 1; i >= keep; i--, n++) {
        assert(!p->registered[s->table[i]]);   /* no committed token: never offered to the cache */
        drop_ref(p, s->table[i]);
    }
    if (s->n_blocks > keep) s->n_blocks = keep;
    return n;
}

int kv_seq_release(KvPool *p, KvSeq *s) {
    int n = s->n_blocks;
    /* Last block first. A chain's later blocks are reachable only through
     * their parents, so evicting a first block would strand its descendants
     * in the cache; releasing the tail first makes the deepest block the
     * least recently released, evicted before the blocks it depends on. */
    for (int i = n - 1; i >= 0; i--) drop_ref(p, s->table[i]);
    s->n_blocks = s->n_tokens = s->n_registered = 0;
    s->chain_block = -1;
    s->chain_gen = 0;
    return n;
}

int kv_seq_fork(KvPool *p, KvSeq *dst, const KvSeq *src) {
    if (dst->n_blocks != 0 || dst->cap < src->n_blocks) return ST_ARG;
    memcpy(dst->table, src->table, (size_t)src->n_blocks * sizeof(int));
    for (int i = 0; i < src->n_blocks; i++) {
        assert(p->refcount[src->table[i]] >= 1);
        p->refcount[src->table[i]]++;
    }
    dst->n_blocks = src->n_blocks;
    dst->n_tokens = src->n_tokens;
    dst->n_registered = src->n_registered;
    dst->chain_block = src->chain_block;
    dst->chain_gen = src->chain_gen;
    return ST_OK;
}

/* ------------------------------------------------------------ checking */

int kv_pool_check(const KvPool *p, Err *e) {
    int NB = p->NB, zero_unreg = 0, zero_reg = 0, n_registered = 0;
    for (int b = 0; b < NB; b++) {
        if (p->refcount[b] < 0)
            return err_set(e, ST_ARG, "kv check: block %d has refcount %d", b, p->refcount[b]);
        zero_unreg += p->refcount[b] == 0 && !p->registered[b];
        zero_reg += p->refcount[b] == 0 && p->registered[b];
        n_registered += p->registered[b];
    }
    if (p->n_free < 0 || p->n_cached < 0 || p->n_free + p->n_cached > NB)
        return err_set(e, ST_ARG, "kv check: %d free + %d cached blocks do not fit %d", p->n_free,
                       p->n_cached, NB);
    /* Free list: unheld, unregistered, no repeats (quadratic, but this is for tests). */
    for (int i = 0; i < p->n_free; i++) {
        int b = p->free_stack[i];
        if (b < 0 || b >= NB)
            return err_set(e, ST_ARG, "kv check: free list entry %d is block %d", i, b);
        if (p->refcount[b] || p->registered[b])
            return err_set(e, ST_ARG, "kv check: block %d is free but has refcount %d, registered %d", b,
                           p->refcount[b], p->registered[b]);
        for (int j = 0; j < i; j++)
            if (p->free_stack[j] == b)
                return err_set(e, ST_ARG, "kv check: block %d is twice on the free list", b);
    }
    /* LRU list: unheld, registered, links both ways agree, length n_cached. */
    int count = 0, prev = -1;
    for (int b = p->lru_head; b >= 0; prev = b, b = p->lru_next[b]) {
        if (b >= NB || ++count > p->n_cached)
            return err_set(e, ST_ARG, "kv check: LRU list longer than n_cached %d (at block %d)",
                           p->n_cached, b);
        if (p->lru_prev[b] != prev)
            return err_set(e, ST_ARG, "kv check: block %d's LRU prev is %d, not %d", b, p->lru_prev[b],
                           prev);
        if (p->refcount[b] || !p->registered[b])
            return err_set(e, ST_ARG, "kv check: block %d is cached but has refcount %d, registered %d",
                           b, p->refcount[b], p->registered[b]);
    }
    if (count != p->n_cached || p->lru_tail != prev)
        return err_set(e, ST_ARG, "kv check: LRU list of %d blocks ends at %d; n_cached %d, tail %d",
                       count, prev, p->n_cached, p->lru_tail);
    /* Both lists are duplicate-free and hold only unheld blocks of their kind,
     * so matching counts mean every unheld block is on exactly one of them. */
    if (zero_unreg != p->n_free)
        return err_set(e, ST_ARG, "kv check: %d unheld unregistered blocks but %d free", zero_unreg,
                       p->n_free);
    if (zero_reg != p->n_cached)
        return err_set(e, ST_ARG, "kv check: %d unheld registered blocks but %d cached", zero_reg,
                       p->n_cached);
    /* Hash table: each chain holds registered blocks of its bucket, as many as are registered. */
    int reachable = 0;
    for (int k = 0; k < p->n_buckets; k++)
        for (int b = p->bucket[k]; b >= 0; b = p->chain[b]) {
            if (b >= NB || ++reachable > n_registered)
                return err_set(e, ST_ARG, "kv check: bucket %d chains more blocks than are registered "
                               "(at block %d)", k, b);
            if (!p->registered[b])
                return err_set(e, ST_ARG, "kv check: block %d is in bucket %d but not registered", b, k);
            if (bucket_of(p, p->hash[b]) != k)
                return err_set(e, ST_ARG, "kv check: block %d is in bucket %d, its hash says %d", b, k,
                               bucket_of(p, p->hash[b]));
        }
    if (reachable != n_registered)
        return err_set(e, ST_ARG, "kv check: %d registered blocks but %d reachable by hash",
                       n_registered, reachable);
    return ST_OK;
}
