/* trace_internal.h - what trace.c shares with the files beside it: the
 * page of --trace-html (page.c writes it, page_viewer.c holds its viewer).
 * trace.h is the interface; this is the trace's own, hook by hook: each
 * page_ function takes what the trace hook of the same name was told, and
 * adds one record to the page. Nothing outside src/trace/ includes it. */
#ifndef TRACE_INTERNAL_H
#define TRACE_INTERNAL_H
#include "trace/trace.h"

typedef struct TracePage TracePage;

void page_arrived(TracePage *p, double now, const TraceArrival *a);
void page_admitted(TracePage *p, double now, int id, int slot, int hit_tokens, int n_preempted);
void page_preempted(TracePage *p, double now, int id, int blocks_freed, int tokens);
void page_cow(TracePage *p, double now, int id, int position, int rows);
void page_item(TracePage *p, int id, int from, int n, int sample);
void page_forked(TracePage *p, double now, int id, int from_id, int slot, int blocks, int tokens);
void page_token(TracePage *p, int id, int token, const char *piece, int len, int n_out, int position);
void page_finished(TracePage *p, double now, const TraceFinish *f);
void page_note(TracePage *p, double now, const char *line);
/* After every step: its figures, and its KV map and block tables as
 * trace_kv_map and trace_block_tables drew them (both asked for by
 * trace_wants_*, which say yes to a page). */
void page_step(TracePage *p, const TraceStep *s, int virtual_clock);
void page_free(TracePage *p);                    /* accepts NULL */

/* The viewer (page_viewer.c): the style and markup that open the page, and
 * the script that closes it. */
extern const char PAGE_STYLE[], PAGE_BODY[], PAGE_SCRIPT[];

#endif
