/* page.c - the trace as one web page (--trace-html FILE): the run's events, and a
 * viewer that replays them step by step.
 *
 * The text trace tells a run line by line and the SVG draws it whole; what
 * a learner most wants to watch is what changes at every step: which
 * sequences run and how many tokens each gets, which KV blocks each holds,
 * which are cached or shared, who was preempted and what came back from the
 * prefix cache. The page shows one step at a time, with a cursor to move
 * through them.
 *
 * One source of truth. The page is written from what the trace's hooks are
 * told, nothing else: each hook adds one record (trace_internal.h), and
 * after every step the page keeps the KV map and the block tables exactly as
 * trace_kv_map and trace_block_tables drew them for the text trace, read
 * back from that text. A page and a text trace of the same run therefore
 * cannot disagree about the pool, and tests/browser.sh checks that what the
 * page shows at a step is what the text trace printed there.
 *
 * The file. It is written as the run goes, so it costs no memory however
 * long the run is: first the head, the style and the markup (page_viewer.c)
 * and the run's description; then one JSON array of records, one per line,
 * each an array whose first element names it:
 *
 *   ["A", id, ms, prompt_tokens, max_tokens, priority, temperature, top_k,
 *         top_p, seed, waiting]                              arrived
 *   ["Q", id, prompt text]                                   (from the front end)
 *   ["M", id, ms, slot, prefix_hit_tokens, preemptions]      admitted; resumed if
 *                                                            preemptions > 0
 *   ["P", id, ms, blocks_freed, tokens_to_recompute]         preempted
 *   ["C", id, ms, position, rows_copied]                     copy-on-write
 *   ["F", id, ms, from_id, slot, blocks, tokens]             forked
 *   ["I", id, from, n, samples]                              in the batch
 *   ["T", id, token, text, n_out, position]                  a token
 *   ["X", id, ms, reason, output_tokens, prompt_tokens, preemptions,
 *         prefix_hit_tokens, blocks_released, queue, ttft, tpot, e2e]  finished
 *   ["N", ms, text]                                          a front end's note
 *   ["S", step, start, end, seqs, prefill, decode, tokens, budget, preempted,
 *         admitted, cow, held, cached, free, running, waiting,
 *         stages, kv, n_tokens]                              a step ended
 *
 * Times are ms since the engine started. The records before an "S" are the
 * events of that step (and the arrivals just before it). In "S", stages is
 * the step's ms in schedule, build, forward, sample, output, and the
 * weights decoded and waited for (--low-mem), or 0 on the step clock; kv is
 * [map, tables], or 0 when both are as in the last step that wrote them: map
 * is one character per block as the text trace's map draws it ('.' free, '+'
 * cached, '*' shared, else the holder's id in base 62), a run of five or more
 * of one character written c{n}; tables holds [id, slot, block, block, ...]
 * for each running sequence in slot order; n_tokens gives each one's written
 * positions, in the same order. A token's text is its bytes, those from 0x80
 * up written \u00XX one by one, so a character cut between two tokens
 * survives; the viewer decodes each request's bytes as UTF-8. Every '<' in a
 * string is written \u003c, so no text can end the script it sits in.
 *
 * At the end: the memory report, the program's closing line, and the viewer's
 * script. With --clock steps nothing in the file depends on the machine or
 * the moment, so the same run writes the same bytes. */
#include "trace/trace_internal.h"
#include "base/mem.h"
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

struct TracePage {
    FILE *f;
    int n_blocks;
    long records;            /* records written, for the commas */
    char *row;               /* (n_blocks + 1) this step's map, a character per block */
    char *kv, *last_kv;      /* (kv_cap) this step's [map, tables] as JSON; the last written */
    int kv_len, last_len, kv_cap;
    char *ntok;              /* (ntok_cap) this step's n_tokens as JSON */
    int ntok_len, ntok_cap;
    char problem[200];       /* the first picture that could not be kept, reported at the end */
};

/* ---- writing ---- */

/* A string as JSON. bytes: a token's raw bytes, those from 0x80 up written
 * \u00XX; else UTF-8 text, passed through. */
static void put_text(FILE *f, const char *s, int len, int bytes) {
    fputc('"', f);
    for (int i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c < 0x20 || c == 0x7f || c == '<' || c == '>' || c == '&' || (bytes && c >= 0x80))
            fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void put_string(FILE *f, const char *s) { put_text(f, s, (int)strlen(s), 0); }

/* sep, then milliseconds from seconds, to the microsecond, without
 * trailing zeros. */
static void put_ms(FILE *f, const char *sep, double seconds) {
    char buf[48];
    int n = snprintf(buf, sizeof buf, "%.3f", seconds * 1e3);
    while (n > 1 && buf[n - 1] == '0') n--;
    if (n > 1 && buf[n - 1] == '.') n--;
    buf[n] = 0;
    if (!strcmp(buf, "-0")) strcpy(buf, "0");
    fprintf(f, "%s%s", sep, buf);
}

static void record(TracePage *p, char kind, int id) {
    fprintf(p->f, "%s[\"%c\"", p->records++ ? ",\n" : "", kind);
    if (id >= 0) fprintf(p->f, ",%d", id);
}

static void ints(TracePage *p, int n, ...) {
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) fprintf(p->f, ",%d", va_arg(ap, int));
    va_end(ap);
}

static void end(TracePage *p) { fputc(']', p->f); }

/* ---- the hooks' records ---- */

void page_arrived(TracePage *p, double now, const TraceArrival *a) {
    record(p, 'A', a->id);
    put_ms(p->f, ",", now);
    ints(p, 2, a->prompt_tokens, a->max_tokens);
    fputc(',', p->f);
    put_string(p->f, a->priority);
    fprintf(p->f, ",%g,%d,%g,\"%llu\",%d", a->temperature, a->top_k, a->top_p, a->seed, a->waiting);
    end(p);
}

void page_admitted(TracePage *p, double now, int id, int slot, int hit_tokens, int n_preempted) {
    record(p, 'M', id);
    put_ms(p->f, ",", now);
    ints(p, 3, slot, hit_tokens, n_preempted);
    end(p);
}

void page_preempted(TracePage *p, double now, int id, int blocks_freed, int tokens) {
    record(p, 'P', id);
    put_ms(p->f, ",", now);
    ints(p, 2, blocks_freed, tokens);
    end(p);
}

void page_cow(TracePage *p, double now, int id, int position, int rows) {
    record(p, 'C', id);
    put_ms(p->f, ",", now);
    ints(p, 2, position, rows);
    end(p);
}

void page_forked(TracePage *p, double now, int id, int from_id, int slot, int blocks, int tokens) {
    record(p, 'F', id);
    put_ms(p->f, ",", now);
    ints(p, 4, from_id, slot, blocks, tokens);
    end(p);
}

void page_item(TracePage *p, int id, int from, int n, int sample) {
    record(p, 'I', id);
    ints(p, 3, from, n, sample);
    end(p);
}

void page_token(TracePage *p, int id, int token, const char *piece, int len, int n_out, int position) {
    record(p, 'T', id);
    fprintf(p->f, ",%d,", token);
    put_text(p->f, piece, len, 1);
    ints(p, 2, n_out, position);
    end(p);
}

void page_finished(TracePage *p, double now, const TraceFinish *f) {
    record(p, 'X', f->id);
    put_ms(p->f, ",", now);
    fputc(',', p->f);
    put_string(p->f, f->reason);
    ints(p, 5, f->output_tokens, f->prompt_tokens, f->preemptions, f->prefix_hit_tokens, f->blocks_released);
    put_ms(p->f, ",", f->queue_wait);
    put_ms(p->f, ",", f->ttft);
    put_ms(p->f, ",", f->tpot);
    put_ms(p->f, ",", f->e2e);
    end(p);
}

void page_note(TracePage *p, double now, const char *line) {
    record(p, 'N', -1);
    put_ms(p->f, ",", now);
    fputc(',', p->f);
    put_string(p->f, line);
    end(p);
}

void trace_page_prompt(Trace *t, int id, const char *text) {
    if (!t->page) return;
    record(t->page, 'Q', id);
    fputc(',', t->page->f);
    put_string(t->page->f, text);
    end(t->page);
}

/* ---- the KV pictures, read back from the text the trace was told ---- */

static void problem(TracePage *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(TracePage *p, const char *fmt, ...) {
    if (p->problem[0]) return;   /* the first one says the most */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->problem, sizeof p->problem, fmt, ap);
    va_end(ap);
}

/* Append to buf[*n .. cap) like snprintf; 0 when it did not fit. */
static int add(char *buf, int cap, int *n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int add(char *buf, int cap, int *n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *n, (size_t)(cap - *n), fmt, ap);
    va_end(ap);
    if (k < 0 || k >= cap - *n) return 0;
    *n += k;
    return 1;
}

/* trace_kv_map's text: a header line, then lines of "<first block> <a
 * character per block>". The characters into p->row; 1 when there are
 * exactly n_blocks of them, in order. */
static int read_map(TracePage *p, const char *map) {
    const char *s = strchr(map, '\n');
    int n = 0;
    while (s && *++s) {
        char *after;
        long first = strtol(s, &after, 10);
        if (after == s || *after != ' ' || first != n) return 0;
        for (s = after + 1; *s && *s != '\n'; s++) {
            if (n == p->n_blocks) return 0;
            p->row[n++] = *s;
        }
        if (*s != '\n') return 0;
    }
    return n == p->n_blocks;
}

/* The map, runs of five or more written c{n}, as a JSON string into p->kv. */
static int put_map(TracePage *p) {
    if (!add(p->kv, p->kv_cap, &p->kv_len, "[\"")) return 0;
    for (int i = 0; i < p->n_blocks;) {
        int run = 1;
        while (i + run < p->n_blocks && p->row[i + run] == p->row[i]) run++;
        int ok = run >= 5 ? add(p->kv, p->kv_cap, &p->kv_len, "%c{%d}", p->row[i], run)
                          : add(p->kv, p->kv_cap, &p->kv_len, "%.*s", run, p->row + i);
        if (!ok) return 0;
        i += run;
    }
    return add(p->kv, p->kv_cap, &p->kv_len, "\",[");
}

/* trace_block_tables's text, a line per running sequence:
 * "#3 slot 1, 40 tokens in blocks [4 5* 9]". Each as [id,slot,blocks...]
 * into p->kv, its tokens into p->ntok. 0 on text of another shape (said in
 * p->problem) or when the buffers are full. */
static int put_tables(TracePage *p, const char *tables, long step) {
    p->ntok_len = 0;
    if (!add(p->ntok, p->ntok_cap, &p->ntok_len, "[")) return 0;
    int first = 1;
    for (const char *s = tables; *s;) {
        int id, slot, n_tokens, at = 0;
        if (sscanf(s, " #%d slot %d, %d tokens in blocks [%n", &id, &slot, &n_tokens, &at) != 3 || !at) {
            problem(p, "step %ld: a block table the page cannot read: %.40s", step, s);
            return 0;
        }
        if (!add(p->kv, p->kv_cap, &p->kv_len, "%s[%d,%d", first ? "" : ",", id, slot) ||
            !add(p->ntok, p->ntok_cap, &p->ntok_len, "%s%d", first ? "" : ",", n_tokens))
            return 0;
        first = 0;
        s += at;
        while (*s != ']') {
            char *after;
            long b = strtol(s, &after, 10);
            if (after == s || b < 0 || b >= p->n_blocks) {
                problem(p, "step %ld: #%d's block table names no block of the pool: %.20s", step, id, s);
                return 0;
            }
            if (!add(p->kv, p->kv_cap, &p->kv_len, ",%ld", b)) return 0;
            s = after;
            if (*s == '*') s++;
            if (*s == ' ') s++;
        }
        if (strncmp(s, "]\n", 2)) {
            problem(p, "step %ld: #%d's block table does not end its line", step, id);
            return 0;
        }
        s += 2;
        if (!add(p->kv, p->kv_cap, &p->kv_len, "]")) return 0;
    }
    return add(p->kv, p->kv_cap, &p->kv_len, "]]") && add(p->ntok, p->ntok_cap, &p->ntok_len, "]");
}

/* This step's pictures into p->kv and p->ntok; 0 if they could not be kept
 * (p->problem says why). */
static int read_pictures(TracePage *p, const TraceStep *s) {
    p->kv_len = 0;
    if (!s->kv_map || !s->block_tables) {
        problem(p, "step %ld: the trace was not told the KV map and the block tables", s->step);
        return 0;
    }
    if (!read_map(p, s->kv_map)) {
        problem(p, "step %ld: the KV map the trace was told does not hold the pool's %d blocks",
                s->step, p->n_blocks);
        return 0;
    }
    if (!put_map(p) || !put_tables(p, s->block_tables, s->step)) {
        problem(p, "step %ld: its KV picture needs more than the %d bytes the page set aside", s->step,
                p->kv_cap);
        return 0;
    }
    return 1;
}

void page_step(TracePage *p, const TraceStep *s, int virtual_clock) {
    fprintf(p->f, "%s[\"S\",%ld", p->records++ ? ",\n" : "", s->step);
    put_ms(p->f, ",", s->start);
    put_ms(p->f, ",", s->end);
    ints(p, 13, s->seqs, s->prefill_tokens, s->decode_tokens, s->tokens, s->budget, s->preempted,
         s->admitted, s->cow, s->kv_held, s->kv_cached, s->kv_free, s->running, s->waiting);
    if (virtual_clock) {   /* the step's real durations: none on the step clock */
        fputs(",0", p->f);
    } else {
        fputc(',', p->f);
        for (int i = 0; i < TRACE_STAGES; i++) put_ms(p->f, i ? "," : "[", s->stage[i]);
        put_ms(p->f, ",", s->decode);
        put_ms(p->f, ",", s->decode_wait);
        fputc(']', p->f);
    }
    if (!read_pictures(p, s)) {
        fputs(",0,[]]", p->f);
        return;
    }
    if (p->kv_len == p->last_len && !memcmp(p->kv, p->last_kv, (size_t)p->kv_len)) {
        fputs(",0,", p->f);
    } else {
        fprintf(p->f, ",%.*s,", p->kv_len, p->kv);
        memcpy(p->last_kv, p->kv, (size_t)p->kv_len);
        p->last_len = p->kv_len;
    }
    fprintf(p->f, "%.*s]", p->ntok_len, p->ntok);
}

/* ---- the page's two ends ---- */

int trace_page_begin(Trace *t, FILE *f, const TracePageInfo *in, Err *e) {
    TracePage *p = mem_alloc(sizeof *p);
    if (!p) return err_set(e, ST_NOMEM, "out of memory");
    *p = (TracePage){.f = f, .n_blocks = in->n_blocks};
    /* the longest [map, tables]: a character per block, and for each
     * running sequence its id, slot and blocks, each number at most 11
     * characters and a comma */
    p->kv_cap = in->n_blocks + 16 + in->max_seqs * (2 * 12 + in->cap_blocks * 12 + 4);
    p->ntok_cap = 4 + in->max_seqs * 12;
    p->row = mem_alloc((size_t)in->n_blocks + 1);
    p->kv = mem_alloc((size_t)p->kv_cap);
    p->last_kv = mem_alloc((size_t)p->kv_cap);
    p->ntok = mem_alloc((size_t)p->ntok_cap);
    t->page = p;
    if (!p->row || !p->kv || !p->last_kv || !p->ntok)
        return err_set(e, ST_NOMEM, "cannot allocate %d bytes for the KV pictures", 2 * p->kv_cap);
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>", f);
    for (const char *c = in->title; *c; c++) {   /* the title as HTML text */
        if (*c == '<') fputs("&lt;", f);
        else if (*c == '>') fputs("&gt;", f);
        else if (*c == '&') fputs("&amp;", f);
        else fputc(*c, f);
    }
    fprintf(f, "</title>\n<style>\n%s</style>\n</head>\n<body>\n%s", PAGE_STYLE, PAGE_BODY);
    fputs("<script type=\"application/json\" id=\"trace-run\">{\"title\":", f);
    put_string(f, in->title);
    fprintf(f, ",\"kv_blocks\":%d,\"block_size\":%d,\"max_seqs\":%d,\"token_budget\":%d,\"clock\":\"%s\"}"
            "</script>\n<script type=\"application/json\" id=\"trace-events\">[\n", in->n_blocks,
            in->block_size, in->max_seqs, in->token_budget, t->virtual_clock ? "steps" : "wall");
    return ST_OK;
}

int trace_page_end(Trace *t, const TraceMemory *m, const char *closing, Err *e) {
    TracePage *p = t->page;
    if (!p) return ST_OK;
    FILE *f = p->f;
    char memory[1024];
    int n = trace_memory_text(t, m, memory, sizeof memory);
    if (n >= (int)sizeof memory) n = (int)sizeof memory - 1;   /* not reached: two lines of fixed fields */
    fputs("\n]</script>\n<script type=\"application/json\" id=\"trace-end\">{\"memory\":", f);
    put_text(f, memory, n, 0);
    fputs(",\"closing\":", f);
    put_string(f, closing ? closing : "");
    fputs(",\"problem\":", f);
    put_string(f, p->problem);
    fprintf(f, "}</script>\n<script>\n%s</script>\n</body>\n</html>\n", PAGE_SCRIPT);
    return p->problem[0] ? err_set(e, ST_FORMAT, "%s", p->problem) : ST_OK;
}

void page_free(TracePage *p) {
    if (!p) return;
    mem_free(p->row);
    mem_free(p->kv);
    mem_free(p->last_kv);
    mem_free(p->ntok);
    mem_free(p);
}
