/* fuzz_http.c - any bytes as what a client sends on a connection, through
 * the server's HTTP/1.1 parsers (src/front/http1.c): the request's head,
 * then, for a chunked body, the chunk decoder.
 *
 * The first byte sets the limits (a request line of 16 to 520 bytes, a head
 * of up to four times that, a body of 0 to 2 KB) and how the body is cut
 * into pieces; the remaining bytes are the connection's. What must hold:
 * no crash, leak or undefined behaviour; a head taken is no more than the
 * bytes given, with a method, a path that is "*" or starts with '/' and
 * holds no NUL, HTTP/1.0 or 1.1, keep-alive only under 1.1, never both a
 * length and chunks, a length within the body limit; a refusal is one of
 * the statuses http1.h names, with a message; a prefix of a head taken
 * whole asks for more bytes, and a head refused on a prefix is refused whole
 * (a refusal is known as soon as the bytes show it, and no later bytes undo
 * it). A chunked body decodes to the same bytes, the same end and the same
 * refusal whether it comes in one piece or in many, and never to more than
 * the body limit. Seeds (tests/fuzz/fuzz_http/): requests good and bad, one
 * of each refusal. */
#include "fuzz.h"
#include "front/http1.h"

static void check_refusal(const HttpFail *f) {
    static const int known[] = {400, 408, 413, 414, 417, 431, 501, 503, 505};
    int ok = 0;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) ok |= f->status == known[i];
    if (!ok) fuzz_fail("refused with status %d", f->status);
    if (!f->msg[0]) fuzz_fail("refused (%d) with no message", f->status);
}

static void check_head(const HttpHead *h, const HttpLimits *lim) {
    if (!h->method[0]) fuzz_fail("a head with no method");
    if (strcmp(h->path, "*") && h->path[0] != '/') fuzz_fail("a path that is not '*' and does not start with '/': %s", h->path);
    if (strnlen(h->path, sizeof h->path) == sizeof h->path) fuzz_fail("a path with no end");
    if (h->minor != 0 && h->minor != 1) fuzz_fail("HTTP/1.%d", h->minor);
    if (h->keep_alive && h->minor != 1) fuzz_fail("keep-alive under HTTP/1.0");
    if (h->chunked && h->length >= 0) fuzz_fail("both chunked and a length");
    if (h->length > (long long)lim->max_body) fuzz_fail("a length of %lld over the limit %zu", h->length, lim->max_body);
}

/* The body at p[0..n) decoded in pieces of at most step bytes (0: whole). */
typedef struct {
    long used;                   /* bytes of p used; -1 refused */
    int status, done;
    size_t len;
    char out[2048];
} Decoded;

static void decode(const char *p, size_t n, size_t step, size_t max_body, Decoded *d) {
    HttpChunks c = {0};
    HttpFail f = {0};
    char *piece = malloc(n ? n : 1);
    d->used = 0, d->len = 0, d->status = 0;
    while ((size_t)d->used < n && !c.done) {
        size_t k = step && step < n - (size_t)d->used ? step : n - (size_t)d->used;
        memcpy(piece, p + d->used, k);
        size_t got;
        long r = http_chunks_feed(&c, piece, k, piece, &got, max_body, &f);   /* in place, as the server does */
        if (r < 0) {
            check_refusal(&f);
            d->used = -1;
            d->status = f.status;
            break;
        }
        if ((size_t)r > k || got > (size_t)r) fuzz_fail("the decoder used %ld of %zu bytes, wrote %zu", r, k, got);
        if (d->len + got > max_body) fuzz_fail("a body of %zu bytes over the limit %zu", d->len + got, max_body);
        memcpy(d->out + d->len, piece, got);
        d->len += got;
        d->used += r;
        if ((size_t)r < k && !c.done) fuzz_fail("the decoder stopped early without an end");
    }
    d->done = c.done;
    free(piece);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    HttpLimits lim = {.max_line = 16 + (size_t)(data[0] & 15) * 32, .max_body = (size_t)(data[0] >> 4) * 128};
    lim.max_head = lim.max_line * (1 + (data[0] >> 6));
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    HttpHead *h = malloc(sizeof *h), *hp = malloc(sizeof *hp);
    HttpFail f = {0}, fp;
    long r = http_head_parse(p, n, &lim, h, &f);
    if (r < -1 || r > (long)n) fuzz_fail("a head of %ld bytes out of %zu", r, n);
    if (r < 0) check_refusal(&f);
    if (r > 0) check_head(h, &lim);
    /* prefixes: more bytes never take a refusal back, and a head taken whole
     * is not taken (nor refused) before its last byte */
    size_t cuts[3] = {n / 2, n ? n - 1 : 0, r > 0 ? (size_t)r - 1 : n / 3};
    for (int i = 0; i < 3; i++) {
        if (cuts[i] >= n) continue;
        long rp = http_head_parse(p, cuts[i], &lim, hp, &fp);
        if (rp < 0 && r >= 0) fuzz_fail("refused (%d) on %zu bytes, not on %zu", fp.status, cuts[i], n);
        if (rp < 0 && fp.status != f.status) fuzz_fail("refused %d on %zu bytes, %d on %zu", fp.status, cuts[i], f.status, n);
        if (r > 0 && cuts[i] < (size_t)r && rp != 0) fuzz_fail("a head of %ld bytes answered %ld on %zu", r, rp, cuts[i]);
    }
    if (r > 0 && h->chunked) {
        static Decoded whole, pieces;
        size_t step = 1 + (data[0] & 7) * 3;
        decode(p + r, n - (size_t)r, 0, lim.max_body, &whole);
        decode(p + r, n - (size_t)r, step, lim.max_body, &pieces);
        if (whole.used != pieces.used || whole.status != pieces.status || whole.done != pieces.done ||
            (whole.used >= 0 && (whole.len != pieces.len || memcmp(whole.out, pieces.out, whole.len))))
            fuzz_fail("the body in one piece (used %ld, %d, end %d, %zu bytes) and in pieces of %zu (used %ld, %d, end %d, "
                      "%zu bytes) differ", whole.used, whole.status, whole.done, whole.len, step, pieces.used,
                      pieces.status, pieces.done, pieces.len);
    }
    free(h);
    free(hp);
    return 0;
}
