/* lowmem.c - the two-buffer decode pipeline of lowmem.h.
 *
 * One mutex guards everything the two threads share: which unit each buffer
 * holds (slot_unit) and whether it is decoded (slot_ready), the helper's one
 * pending job, its status and the stats. Decoding itself runs unlocked; the
 * helper only ever writes into the buffer the caller gave it, which the
 * caller does not read until slot_ready says so. The helper allocates
 * nothing (mem.h counts allocations from one thread): its scratch is made
 * here, up front. */
#include "codec/lowmem.h"
#include "base/clock.h"
#include "base/mem.h"
#include <pthread.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <string.h>

/* A piece of a unit's work: bytes [from, from + len) of part `part`, cut at
 * multiples of two groups so that no group is decoded twice. */
typedef struct {
    int part;
    uint64_t from, len;
} Piece;

struct LowMem {
    LmUnit *units;
    int n_units;
    size_t *off;               /* (n_units, LM_MAX_PARTS) where each part sits in a buffer */
    size_t cap;                /* bytes of one buffer */
    uint8_t *block;            /* both buffers and the scratches, one allocation */
    uint8_t *buf[2];
    int decoders;              /* threads the helper decodes a unit with */
    uint8_t *scratch[LM_MAX_DECODERS + 1];   /* one per helper thread, then the caller's */
    Piece *pieces;             /* (max_pieces) the helper's work list */
    int max_pieces;
    RansIsa isa;
    int threaded;
    pthread_t helper;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int slot_unit[2];          /* unit in the buffer (decoded or being decoded), -1 none */
    int slot_ready[2];
    int job_slot, job_unit;    /* the helper's next job; job_unit -1 none */
    int busy;                  /* the helper is decoding */
    int quit;
    int status;
    Err err;
    LmStats st;
};

static double now_s(void) { return clock_seconds(); }

/* Cut unit u's parts into pieces (into `out`, when not NULL); returns their count. */
static int cut_unit(const LmUnit *un, Piece *out) {
    int n = 0;
    for (int i = 0; i < un->n; i++) {
        const LmPart *p = &un->part[i];
        uint64_t step = 2 * wc_group_span(p->t), end = p->from + p->len;
        for (uint64_t at = p->from; at < end;) {
            uint64_t next = (at / step + 1) * step;
            if (next > end) next = end;
            if (out) out[n] = (Piece){i, at, next - at};
            n++;
            at = next;
        }
    }
    return n;
}

/* Decode unit u into buf on `threads` threads (OpenMP, scratch[first +
 * thread] each), the pieces shared out as they come. */
static int decode_unit(LowMem *lm, int u, uint8_t *buf, int first, int threads, Err *e) {
    const LmUnit *un = &lm->units[u];
    if (threads <= 1) {
        for (int i = 0; i < un->n; i++) {
            const LmPart *p = &un->part[i];
            int st = wc_decode_range(p->t, p->from, (size_t)p->len, buf + lm->off[(size_t)u * LM_MAX_PARTS + i],
                                     lm->scratch[first], lm->isa, e);
            if (st) return st;
        }
        return ST_OK;
    }
    int n = cut_unit(un, lm->pieces);
    int st = ST_OK;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int k = 0; k < n; k++) {
        int me = 0;
#ifdef _OPENMP
        me = omp_get_thread_num();
#endif
        const Piece *q = &lm->pieces[k];
        const LmPart *p = &un->part[q->part];
        Err eq;
        int r = wc_decode_range(p->t, q->from, (size_t)q->len,
                                buf + lm->off[(size_t)u * LM_MAX_PARTS + q->part] + (q->from - p->from),
                                lm->scratch[first + me], lm->isa, &eq);
        if (r) {
#pragma omp critical(lowmem_error)
            if (!st) {
                st = r;
                *e = eq;
            }
        }
    }
    return st;
}

static void count_decode(LowMem *lm, int u, double s) {   /* under the mutex */
    LmStats *st = &lm->st;
    uint64_t b = 0;
    for (int i = 0; i < lm->units[u].n; i++) b += lm->units[u].part[i].len;
    if (st->decodes == 0 || s < st->unit_min_s) st->unit_min_s = s;
    if (s > st->unit_max_s) st->unit_max_s = s;
    st->decodes++;
    st->bytes += b;
    st->decode_s += s;
}

static void *helper_main(void *arg) {
    LowMem *lm = arg;
    pthread_mutex_lock(&lm->mu);
    for (;;) {
        while (!lm->quit && lm->job_unit < 0) pthread_cond_wait(&lm->cv, &lm->mu);
        if (lm->quit) break;
        int slot = lm->job_slot, u = lm->job_unit;
        lm->job_unit = -1;
        lm->busy = 1;
        pthread_mutex_unlock(&lm->mu);
        Err e;
        double t0 = now_s();
        int st = decode_unit(lm, u, lm->buf[slot], 0, lm->decoders, &e);
        double t1 = now_s();
        pthread_mutex_lock(&lm->mu);
        lm->busy = 0;
        if (st) {
            if (!lm->status) {
                lm->status = st;
                lm->err = e;
            }
        } else {
            lm->slot_ready[slot] = 1;
            count_decode(lm, u, t1 - t0);
        }
        pthread_cond_broadcast(&lm->cv);
    }
    pthread_mutex_unlock(&lm->mu);
    return NULL;
}

int lm_create(LowMem **out, const LmUnit *units, int n_units, RansIsa isa, int threads, int verify, Err *e) {
    int threaded = threads > 0;
    int decoders = threads < 1 ? 1 : threads > LM_MAX_DECODERS ? LM_MAX_DECODERS : threads;
    *out = NULL;
    if (n_units < 1) return err_set(e, ST_ARG, "lowmem: no units");
    LowMem *lm = mem_alloc(sizeof *lm);
    if (!lm) return err_set(e, ST_NOMEM, "lowmem: out of memory");
    lm->units = mem_alloc((size_t)n_units * sizeof *lm->units);
    lm->off = mem_alloc((size_t)n_units * LM_MAX_PARTS * sizeof *lm->off);
    if (!lm->units || !lm->off) {
        lm_free(lm);
        return err_set(e, ST_NOMEM, "lowmem: out of memory for %d units", n_units);
    }
    memcpy(lm->units, units, (size_t)n_units * sizeof *units);
    lm->n_units = n_units;
    size_t scratch = 1;
    for (int u = 0; u < n_units; u++) {
        size_t at = 0;
        for (int i = 0; i < units[u].n; i++) {
            lm->off[(size_t)u * LM_MAX_PARTS + i] = at;
            at += ((size_t)units[u].part[i].len + 63) / 64 * 64;
            size_t s = wc_scratch_bytes(units[u].part[i].t);
            if (s > scratch) scratch = s;
        }
        if (at > lm->cap) lm->cap = at;
        if (at > lm->st.unit_bytes_max) lm->st.unit_bytes_max = at;
    }
    scratch = (scratch + 63) / 64 * 64;
    for (int u = 0; u < n_units; u++) {
        int n = cut_unit(&units[u], NULL);
        if (n > lm->max_pieces) lm->max_pieces = n;
    }
    lm->decoders = decoders;
    lm->pieces = mem_alloc((size_t)(lm->max_pieces ? lm->max_pieces : 1) * sizeof *lm->pieces);
    lm->block = mem_alloc(2 * lm->cap + (size_t)(decoders + 1) * scratch + 64);
    if (!lm->block || !lm->pieces) {
        size_t want = 2 * lm->cap + (size_t)(decoders + 1) * scratch;
        lm_free(lm);
        return err_set(e, ST_NOMEM, "lowmem: cannot allocate two %zu-byte decode buffers and scratch (%zu bytes)",
                       lm->cap, want);
    }
    uint8_t *p = (uint8_t *)(((uintptr_t)lm->block + 63) & ~(uintptr_t)63);
    lm->buf[0] = p;
    lm->buf[1] = p + lm->cap;
    for (int i = 0; i <= decoders; i++) lm->scratch[i] = p + 2 * lm->cap + (size_t)i * scratch;
    lm->st.buffer_bytes = 2 * lm->cap;
    lm->isa = isa;
    lm->slot_unit[0] = lm->slot_unit[1] = -1;
    lm->job_unit = -1;
    pthread_mutex_init(&lm->mu, NULL);
    pthread_cond_init(&lm->cv, NULL);
    for (int u = 0; verify && u < n_units; u++) {
        int st = decode_unit(lm, u, lm->buf[0], lm->decoders, 1, e);
        if (st) {
            lm_free(lm);
            return st;
        }
    }
    if (threaded) {
        if (pthread_create(&lm->helper, NULL, helper_main, lm)) {
            lm_free(lm);
            return err_set(e, ST_NOMEM, "lowmem: cannot start the decoding thread");
        }
        lm->threaded = 1;
    }
    *out = lm;
    return ST_OK;
}

void lm_free(LowMem *lm) {
    if (!lm) return;
    if (lm->threaded) {
        pthread_mutex_lock(&lm->mu);
        lm->quit = 1;
        pthread_cond_broadcast(&lm->cv);
        pthread_mutex_unlock(&lm->mu);
        pthread_join(lm->helper, NULL);
    }
    if (lm->block) {   /* the mutex exists once the block does */
        pthread_mutex_destroy(&lm->mu);
        pthread_cond_destroy(&lm->cv);
    }
    mem_free(lm->block);
    mem_free(lm->pieces);
    mem_free(lm->units);
    mem_free(lm->off);
    mem_free(lm);
}

int lm_acquire(LowMem *lm, int u, const void *ptr[LM_MAX_PARTS], Err *e) {
    if (u < 0 || u >= lm->n_units) return err_set(e, ST_ARG, "lowmem: unit %d of %d", u, lm->n_units);
    pthread_mutex_lock(&lm->mu);
    double t0 = now_s();
    /* Let the helper finish what it is doing: the unit asked for, or (when it
     * guessed wrong) whatever else, before its buffer is reused. */
    while (!lm->status && (lm->busy || lm->job_unit >= 0)) pthread_cond_wait(&lm->cv, &lm->mu);
    lm->st.wait_s += now_s() - t0;
    /* A failure of the helper's is not kept: its unit was left not ready,
     * so it is decoded here when asked for, and fails here, with its own
     * message, only if it still does (a file changed and changed back). */
    lm->status = 0;
    int s = lm->slot_unit[0] == u && lm->slot_ready[0] ? 0 : lm->slot_unit[1] == u && lm->slot_ready[1] ? 1 : -1;
    int st = ST_OK;
    if (s < 0) {   /* a miss: decode it here, keeping a decoded next unit if there is one */
        int next = (u + 1) % lm->n_units;
        s = lm->slot_unit[0] == next && lm->slot_ready[0] ? 1 : 0;
        lm->slot_unit[s] = u;
        lm->slot_ready[s] = 0;
        pthread_mutex_unlock(&lm->mu);
        double d0 = now_s();
        st = decode_unit(lm, u, lm->buf[s], lm->decoders, 1, &lm->err);
        double d1 = now_s();
        pthread_mutex_lock(&lm->mu);
        if (!st) {
            lm->slot_ready[s] = 1;
            lm->st.misses++;
            count_decode(lm, u, d1 - d0);
        }
    }
    if (!st && lm->threaded && lm->n_units > 1) {   /* the helper starts on the next unit */
        int next = (u + 1) % lm->n_units, o = 1 - s;
        if (!(lm->slot_unit[o] == next && lm->slot_ready[o])) {
            lm->slot_unit[o] = next;
            lm->slot_ready[o] = 0;
            lm->job_slot = o;
            lm->job_unit = next;
            pthread_cond_broadcast(&lm->cv);
        }
    }
    if (st && e) *e = lm->err;
    pthread_mutex_unlock(&lm->mu);
    if (st) return st;
    for (int i = 0; i < lm->units[u].n; i++) ptr[i] = lm->buf[s] + lm->off[(size_t)u * LM_MAX_PARTS + i];
    return ST_OK;
}

int lm_decode_range(LowMem *lm, const WcTensor *t, uint64_t from, size_t len, void *dst, Err *e) {
    return wc_decode_range(t, from, len, dst, lm->scratch[lm->decoders], lm->isa, e);
}

LmStats lm_stats(LowMem *lm) {
    pthread_mutex_lock(&lm->mu);
    LmStats s = lm->st;
    pthread_mutex_unlock(&lm->mu);
    return s;
}
