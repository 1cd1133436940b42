/* lowmem.h - weights that stay compressed: a model's coded matrices decoded
 * a unit (a layer, or a piece of the classifier) at a time into one of two
 * reused buffers, the next unit on a helper thread while this one computes.
 *
 * The forward pass asks for units in order, 0 .. n-1, then 0 again for the
 * next token. lm_acquire(u) hands back unit u's bytes (waiting, if the helper
 * is still decoding it) and starts the helper on unit u + 1 in the other
 * buffer; the buffer of the unit before u is free from then on. So at most two
 * decoded units are ever resident beside the compressed file: the one being
 * computed with and the one being decoded.
 *
 *     forward pass:  [ layer 0 ][ layer 1 ][ layer 2 ] ...
 *     helper:        [dec 1]    [dec 2]    [dec 3]   ...   (buffers A, B, A, B)
 *
 * The helper decodes a unit on several threads of its own (lm_create's
 * `threads`), pieces of two groups each shared out as they come, since the
 * forward pass is waiting and its cores idle whenever decoding is the slower.
 *
 * When decoding a layer takes longer than computing with one, the forward
 * pass waits; the stats say for how long (wait_s), and how long decoding took
 * (decode_s), so a trace can show which of the two bounds a step. */
#ifndef LOWMEM_H
#define LOWMEM_H
#include "base/err.h"
#include "rans.h"
#include "codec/wcodec.h"
#include <stddef.h>
#include <stdint.h>

enum { LM_MAX_PARTS = 8, LM_MAX_DECODERS = 8 };

/* Bytes [from, from + len) of a coded tensor (a whole matrix, or a range of
 * its rows). */
typedef struct {
    const WcTensor *t;
    uint64_t from, len;
} LmPart;

typedef struct {
    int n;
    LmPart part[LM_MAX_PARTS];
} LmUnit;

typedef struct {
    uint64_t decodes;       /* units decoded */
    uint64_t misses;        /* of them, decoded by the caller: the helper had not been asked */
    uint64_t bytes;         /* decoded bytes */
    double decode_s;        /* seconds spent decoding (helper and caller) */
    double unit_min_s, unit_max_s;   /* of one unit */
    double wait_s;          /* seconds the caller waited for the helper */
    size_t buffer_bytes;    /* the two buffers */
    size_t unit_bytes_max;  /* the largest unit */
} LmStats;

typedef struct LowMem LowMem;

/* Two buffers of the largest unit's size, scratch, and the helper thread,
 * which decodes each unit on `threads` threads of its own (1 ..
 * LM_MAX_DECODERS; 0: no helper, units are decoded by lm_acquire when asked
 * for). verify: decode every unit once now, so a damaged payload is found
 * at load rather than in the middle of a run. The units are copied; the
 * tensors they point to must outlive the LowMem. */
int lm_create(LowMem **out, const LmUnit *units, int n_units, RansIsa isa, int threads, int verify,
              Err *e);
void lm_free(LowMem *lm);                  /* stops the helper; accepts NULL */

/* Unit u's parts, decoded: ptr[i] for part i (64-byte aligned), valid until
 * the next lm_acquire. Starts the helper on unit (u + 1) % n. ST_FORMAT if
 * unit u could not be decoded (e says where); nothing is kept of it, so the
 * next lm_acquire of u decodes it again (a file changed under its mapping
 * and changed back then works again). */
int lm_acquire(LowMem *lm, int u, const void *ptr[LM_MAX_PARTS], Err *e);

/* Decode bytes of a coded tensor outside the units (an embedding row) with
 * the caller's own scratch; the caller's thread only. */
int lm_decode_range(LowMem *lm, const WcTensor *t, uint64_t from, size_t len, void *dst, Err *e);

LmStats lm_stats(LowMem *lm);

#endif
