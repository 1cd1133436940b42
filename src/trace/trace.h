/* trace.h - what the engine does, told as it happens.
 *
 * The trace is told; it never asks. The runtime calls these hooks with small
 * structs and plain values (ids, counts, times, text) at each event of a
 * request's life and after each step, and the trace includes no stage's
 * header: it cannot reach into the engine, and the engine does not know it
 * exists. With no Trace attached the hooks are never called, so tracing costs
 * one pointer test per step when off.
 *
 * Three outputs, each optional:
 *   text   one line per event on a FILE (stderr in the CLI), times in ms since
 *          the engine started.
 *            TRACE_ON       (--trace) lifecycle events and step summaries; runs
 *                           of plain decode steps are summed into one line
 *            TRACE_VERBOSE  (--trace=verbose) every step, every token, block
 *                           tables, and a map of the KV pool every step
 *   json   Chrome trace-event JSON (opens in Perfetto and chrome://tracing):
 *          one track per request (queued / prefill / decode spans, instant
 *          events), one track of engine steps with their stages, counters.
 *   svg    a timeline of requests, written at the end from spans recorded in
 *          a buffer allocated at trace_init (no allocation while running).
 *   page   one self-contained HTML file (--trace-html): every event and, after
 *          every step, the KV pool's map and block tables as the text trace
 *          draws them, written as they happen, then a viewer that replays the
 *          run step by step (page.c; notes/tracing.md).
 *
 * On the step clock (virtual: one millisecond per step, see clock.h) the
 * trace leaves out every duration it was told that the virtual clock did not
 * make (stage times, peak RSS), so its output repeats byte for byte.
 * See notes/tracing.md. */
#ifndef TRACE_H
#define TRACE_H
#include "base/err.h"
#include "base/kv_view.h"
#include <stdint.h>
#include <stdio.h>

enum { TRACE_OFF = 0, TRACE_ON = 1, TRACE_VERBOSE = 2 };

/* Phases of a request, the spans of its track. */
enum { PH_NONE = 0, PH_QUEUED, PH_PREFILL, PH_DECODE };

enum { TRACE_STAGES = 5 };   /* schedule, build, forward, sample, output */

typedef struct {
    int req;                 /* request id */
    int phase;               /* PH_* for a span; for a mark: 'f' first token, 'p' preempted */
    double t0, t1;           /* seconds since engine start (t1 = t0 for a mark) */
    int prompt, cached;      /* a prefill span: its prompt tokens, and how many the prefix cache gave */
} TraceSpan;

/* What the trace remembers of a request between its events. */
typedef struct {
    int id, phase;
    double since;            /* when the current phase began */
    double arrival;
    int prompt, cached;      /* prompt tokens; of them found in the prefix cache at admission */
} TraceReq;

/* A request as it arrives. */
typedef struct {
    int id;
    int prompt_tokens, max_tokens;
    const char *priority;
    double temperature, top_p;
    int top_k;
    unsigned long long seed;
    int waiting;             /* requests waiting, this one included */
} TraceArrival;

/* A request as it ends. Times in seconds. */
typedef struct {
    int id;
    const char *reason;
    int output_tokens, prompt_tokens, preemptions, prefix_hit_tokens, blocks_released;
    double queue_wait, ttft, tpot, e2e;
} TraceFinish;

/* One engine step, after its output was delivered. */
typedef struct {
    long step;
    double start, end;               /* clock times, seconds */
    int seqs, prefill_tokens, decode_tokens, tokens, budget;
    int preempted, admitted, cow;
    int guesses, accepted;           /* speculation: guessed tokens verified, and accepted */
    int rewinds, rewound_blocks;     /* sequences that took rejected positions back; blocks freed */
    int spec_off;                    /* sequences whose guess stayed out: the step was full */
    int kv_held, kv_cached, kv_free; /* blocks, after the step */
    int running, waiting;            /* requests, after the step */
    double stage[TRACE_STAGES];      /* seconds in schedule, build, forward, sample, output */
    double decode, decode_wait;      /* --low-mem: seconds decoding weights (on the helper thread,
                                        overlapping forward) and of forward spent waiting for them */
    const char *kv_map;              /* the pool drawn (trace_kv_map), or NULL */
    const char *block_tables;        /* each running sequence's blocks, or NULL */
} TraceStep;

/* Memory at the end of a run, measured by the runtime from what it owns. */
typedef struct {
    size_t weights_mapped, weights_resident;
    size_t kv_bytes, kv_block_bytes;
    int kv_blocks, kv_peak_held;
    size_t activations;
    size_t heap_peak;
    long peak_rss_kb;
    size_t allocs_in_steps, allocs_outside;
    /* a compressed model (tools/compress.c): its coded matrices' bytes in the
     * file, and the bytes they were decoded into (all of them at load, or
     * --low-mem's two buffers); for --low-mem, per unit (a layer or a piece of
     * the classifier) decoded: the count, the time, and the forward pass's wait */
    size_t weights_coded, weights_decoded;
    size_t weights_rows8;    /* Q4_0, Q4_K, Q6_K, Q8_0 matrices copied in eights at load (formats.h), or 0 */
    size_t weights_copied;   /* the other matrices copied at load into huge pages (LLM_COPY=1), or 0 */
    int low_mem;
    int fast_tier;           /* --low-mem on the fast tier: 1 built at load here, 2 on the GPU */
    long decodes;
    double decode_s, decode_min_s, decode_max_s, decode_wait_s, decode_load_s;
} TraceMemory;

typedef struct Trace {
    int level;               /* TRACE_OFF: no text, but json/svg may still be on */
    int virtual_clock;       /* 1: leave out real durations (see above) */
    FILE *text;              /* text trace, or NULL */
    FILE *json;              /* Chrome trace JSON, or NULL */
    int json_events;         /* events written (for the commas) */
    int kv_map_every;        /* print the KV map every this many steps (0: at verbose only) */
    int step_events;         /* lifecycle events printed since the last step ended */
    /* a run of plain decode steps not printed yet */
    long run_first, run_last;          /* step numbers; run_first 0 = no run */
    long run_tokens;
    long run_guesses, run_accepted;    /* speculation over the run */
    int run_seqs_min, run_seqs_max;
    double run_time[TRACE_STAGES];     /* summed over the run */
    double run_codec[2];               /* decode, decode_wait summed over the run */
    double run_end;                    /* seconds at the end of the run's last step */
    /* requests alive (arrived, not finished) */
    TraceReq *reqs;
    int n_reqs, cap_reqs;
    /* spans for the SVG timeline */
    TraceSpan *spans;
    int n_spans, cap_spans, dropped;
    int max_req;                       /* highest request id seen */
    struct TracePage *page;            /* --trace-html, or NULL (page.c) */
} Trace;

/* level: TRACE_OFF/ON/VERBOSE for text (text may be NULL); json: an open
 * file for the JSON trace or NULL; svg_spans: room for that many spans and
 * marks for trace_write_svg (0: no SVG); virtual_clock: times come from the
 * step clock. */
int trace_init(Trace *t, int level, FILE *text, FILE *json, int svg_spans, int virtual_clock,
               Err *e);
/* Print what is pending, close the JSON array. The FILEs stay open (the
 * caller owns them). */
void trace_finish(Trace *t);
void trace_free(Trace *t);                           /* accepts a zeroed one */

/* Print what is pending (a run of decode steps). */
void trace_flush(Trace *t);

/* Does step `step` (which preempted n) want the KV map, the block tables?
 * A page wants both after every step. */
int trace_wants_kv_map(const Trace *t, long step, int n_preempted);
int trace_wants_block_tables(const Trace *t);

/* The KV pool as text: one character per block, 64 to a line, each line
 * indented and numbered. '.' free, '+' cached (nobody holds it, its K/V
 * kept for the prefix cache), a sequence's id in base 62 (0-9, a-z, A-Z,
 * modulo 62) for a block one sequence holds, '*' for a block several hold.
 * Returns the length written (cut short at cap - 1, terminated). */
int trace_kv_map(const KvView *v, char *buf, int cap);

/* Each running sequence's block table as text, a line each
 * ("#3 slot 1, 40 tokens in blocks [4 5* 9]", '*' = shared). */
int trace_block_tables(const KvView *v, char *buf, int cap);

/* Hooks. now: seconds since start. ST_NOMEM from trace_arrived only (its
 * table of live requests grows then, outside the step loop). */
int trace_arrived(Trace *t, double now, const TraceArrival *a);
void trace_admitted(Trace *t, double now, long step, int id, int slot, int hit_tokens,
                    int n_preempted);
void trace_preempted(Trace *t, double now, long step, int id, int blocks_freed, int tokens);
void trace_cow(Trace *t, double now, long step, int id, int position, int block_size);
void trace_item(Trace *t, double now, int id, int from, int n, int sample);
/* Speculation, per sequence and step: `guessed` tokens verified after its
 * own, `accepted` of them kept, the rest rewound (verbose text; a JSON mark). */
void trace_spec(Trace *t, double now, long step, int id, int guessed, int accepted);
void trace_forked(Trace *t, double now, int id, int from_id, int slot, int blocks, int tokens);
void trace_token(Trace *t, double now, int id, int token, const char *text, int len, int n_out,
                 int position);
void trace_finished(Trace *t, double now, const TraceFinish *f);
void trace_step_done(Trace *t, const TraceStep *s);

/* A front end's own event, one line in the text trace beside the engine's
 * (the server's HTTP requests: arrived, first byte sent, disconnected). */
void trace_note(Trace *t, double now, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The page: what it says of the run in its header, and the room its KV
 * pictures need (the pool's blocks; per sequence, at most cap_blocks). */
typedef struct {
    const char *title;       /* the command that made the run */
    int n_blocks, block_size, max_seqs, cap_blocks, token_budget;
} TracePageInfo;

/* Start the page on f (open, the caller's: it checks f's errors when it
 * closes it, as for the JSON trace): its head, style and the run's
 * description are written now, each event as it happens. ST_NOMEM. */
int trace_page_begin(Trace *t, FILE *f, const TracePageInfo *info, Err *e);
/* A front end tells the page a request's prompt (the runtime tells the
 * trace only its length). */
void trace_page_prompt(Trace *t, int id, const char *text);
/* End the page: the memory report (m, as trace_memory_report prints it),
 * the program's closing line, and the viewer. ST_FORMAT with a line in e
 * if a step's KV pictures could not be kept (the page says so too): its
 * map had another number of blocks than info said, or they outgrew the
 * room info's sizes gave them. Call after trace_finish. */
int trace_page_end(Trace *t, const TraceMemory *m, const char *closing, Err *e);

/* The timeline: one row per request, spans coloured by phase. */
int trace_write_svg(const Trace *t, FILE *f);

/* Memory at the end: weights (bytes mapped, bytes resident), the KV pool
 * (bytes, blocks, peak held), activations and scratch, peak RSS, and the
 * allocations made after start-up: inside engine steps (the promise is zero)
 * and outside them (each request gets its token array and sampler at
 * submission). On the step clock, resident bytes and RSS are left out. */
void trace_memory_report(const Trace *t, FILE *f, const TraceMemory *m);
/* The same report as text in buf (lines ending in '\n'); the length it
 * needed, so a result >= cap means it was cut. */
int trace_memory_text(const Trace *t, const TraceMemory *m, char *buf, int cap);

#endif
