/* http1.c - HTTP/1.1 for the server: the head and chunk parsers over bytes
 * in memory, then one connection's reads and writes over a non-blocking
 * socket, each wait bounded by poll. See http1.h for the contract and
 * notes/server.md ("HTTP") for the choices.
 *
 * The parsers are strict where leniency lets one request be read two ways
 * (RFC 9112 section 11: request smuggling): a header line that starts with
 * white space (obsolete folding), a space before the colon, two differing
 * Content-Lengths, a Content-Length beside Transfer-Encoding, and any
 * transfer coding but chunked are refused. They are lenient where the RFC
 * asks: blank lines before the request line are skipped, and a bare LF
 * ends a line as CRLF does. */
#include "front/http1.h"
#include "base/clock.h"
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

static int fail(HttpFail *f, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(HttpFail *f, int status, const char *fmt, ...) {
    f->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->msg, sizeof f->msg, fmt, ap);
    va_end(ap);
    return -1;
}

const char *http_reason(int status) {
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 417: return "Expectation Failed";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
    }
}

/* ==== the head ============================================================= */

/* A byte of a token (a method, a header's name): RFC 9110's tchar. */
static int tchar(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int digit(char c) { return c >= '0' && c <= '9'; }

static int hexval(unsigned char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A printable byte of a field's value: visible ASCII, space, tab, or any
 * byte of 0x80 and up (obs-text; UTF-8 passes). */
static int value_byte(unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7f); }

/* The request line at p[0..n) (no line end): method, target, version. */
static int parse_request_line(const char *p, size_t n, HttpHead *h, HttpFail *f) {
    size_t i = 0;
    while (i < n && tchar((unsigned char)p[i])) i++;
    if (i == 0 || i >= n || p[i] != ' ')
        return fail(f, 400, "not an HTTP request: the request line must be METHOD TARGET HTTP/1.1");
    if (i >= sizeof h->method) return fail(f, 501, "a method of %zu bytes: none is known", i);
    memcpy(h->method, p, i);
    h->method[i] = 0;
    size_t t0 = ++i;
    while (i < n && p[i] > ' ' && p[i] < 0x7f) i++;
    size_t t1 = i;
    if (t1 == t0 || i >= n || p[i] != ' ')
        return fail(f, 400, "the request line must be METHOD TARGET HTTP/1.1 (a target of visible ASCII)");
    const char *v = p + i + 1;
    size_t vn = n - i - 1;
    if (vn != 8 || memcmp(v, "HTTP/", 5) || !digit(v[5]) || v[6] != '.' || !digit(v[7]))
        return fail(f, 400, "the request line must end in HTTP/1.1 or HTTP/1.0");
    if (v[5] != '1' || v[7] > '1')
        return fail(f, 505, "HTTP/%c.%c is not supported (HTTP/1.1 and HTTP/1.0 are)", v[5], v[7]);
    h->minor = v[7] - '0';
    /* the target: origin-form (/path?query); absolute-form (http://host/path)
     * is taken for its path; asterisk-form (*) names no path */
    const char *t = p + t0;
    size_t tn = t1 - t0;
    if (tn == 1 && t[0] == '*') {
        strcpy(h->path, "*");
        return 0;
    }
    if (t[0] != '/') {
        size_t s = tn > 7 && !strncasecmp(t, "http://", 7) ? 7 : tn > 8 && !strncasecmp(t, "https://", 8) ? 8 : 0;
        if (!s) return fail(f, 400, "the target must be a path that starts with '/'");
        const char *slash = memchr(t + s, '/', tn - s);
        if (!slash) {
            strcpy(h->path, "/");
            return 0;
        }
        tn -= (size_t)(slash - t);
        t = slash;
    }
    size_t o = 0;
    for (size_t k = 0; k < tn && t[k] != '?' && t[k] != '#'; k++) {
        unsigned char c = (unsigned char)t[k];
        if (c == '%') {
            int hi = k + 2 < tn ? hexval((unsigned char)t[k + 1]) : -1, lo = hi >= 0 ? hexval((unsigned char)t[k + 2]) : -1;
            if (lo < 0) return fail(f, 400, "a bad %%-escape in the target at byte %zu", k);
            c = (unsigned char)(hi * 16 + lo);
            if (!c) return fail(f, 400, "%%00 in the target: a NUL in the path");
            k += 2;
        }
        h->path[o++] = (char)c;   /* o <= k < tn < HTTP_LINE_MAX */
    }
    h->path[o] = 0;
    return 0;
}

/* Does the comma-separated list v[0..n) hold the token tok (any case)? */
static int list_has(const char *v, size_t n, const char *tok) {
    size_t len = strlen(tok);
    for (size_t i = 0; i < n;) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ',')) i++;
        size_t j = i;
        while (j < n && v[j] != ',') j++;
        size_t e = j;
        while (e > i && (v[e - 1] == ' ' || v[e - 1] == '\t')) e--;
        if (e - i == len && !strncasecmp(v + i, tok, len)) return 1;
        i = j;
    }
    return 0;
}

/* One header line p[0..n) (no line end), the k-th. */
static int parse_header(const char *p, size_t n, int k, const HttpLimits *lim, HttpHead *h, int *hosts, int *close,
                        int *te, HttpFail *f) {
    if (p[0] == ' ' || p[0] == '\t') return fail(f, 400, "header line %d starts with white space (obsolete line folding)", k);
    size_t i = 0;
    while (i < n && tchar((unsigned char)p[i])) i++;
    if (i == 0 || i >= n || p[i] != ':')
        return fail(f, 400, "header line %d is not NAME: VALUE (a name of token bytes, no space before the colon)", k);
    size_t name = i++;
    while (i < n && (p[i] == ' ' || p[i] == '\t')) i++;
    size_t e = n;
    while (e > i && (p[e - 1] == ' ' || p[e - 1] == '\t')) e--;
    const char *v = p + i;
    size_t vn = e - i;
    for (size_t j = 0; j < vn; j++)
        if (!value_byte((unsigned char)v[j]))
            return fail(f, 400, "header line %d: byte 0x%02x in its value", k, (unsigned char)v[j]);
#define IS(s) (name == sizeof s - 1 && !strncasecmp(p, s, name))
    if (IS("Content-Length")) {
        if (!vn) return fail(f, 400, "an empty Content-Length");
        long long len = 0;
        for (size_t j = 0; j < vn; j++) {
            if (v[j] < '0' || v[j] > '9') return fail(f, 400, "Content-Length is not a number of bytes");
            len = len > (LLONG_MAX - 9) / 10 ? LLONG_MAX : len * 10 + (v[j] - '0');
        }
        if (h->length >= 0 && h->length != len) return fail(f, 400, "two Content-Lengths that differ");
        h->length = len;
        if ((unsigned long long)len > lim->max_body)
            return fail(f, 413, "the body is larger than %zu bytes (--max-body)", lim->max_body);
    } else if (IS("Transfer-Encoding")) {
        if (*te || vn != 7 || strncasecmp(v, "chunked", 7))
            return fail(f, 501, "Transfer-Encoding '%.*s' is not supported (only chunked, once)", (int)(vn < 40 ? vn : 40), v);
        *te = 1;
    } else if (IS("Connection")) {
        *close |= list_has(v, vn, "close");   /* keep-alive is 1.1's default; 1.0's is not offered */
    } else if (IS("Expect")) {
        if (vn != 12 || strncasecmp(v, "100-continue", 12))
            return fail(f, 417, "Expect '%.*s' is not supported (only 100-continue)", (int)(vn < 40 ? vn : 40), v);
        h->expect_continue = 1;
    } else if (IS("Host")) {
        ++*hosts;
    }
#undef IS
    return 0;
}

/* The length of the line at p[0..n) without its end (LF or CRLF), with
 * *next after its end; -1 if no LF is there yet; -2 for a CR not before LF. */
static long line_at(const char *p, size_t n, size_t *next) {
    const char *lf = memchr(p, '\n', n);
    if (!lf) return -1;
    size_t len = (size_t)(lf - p);
    *next = len + 1;
    if (len && p[len - 1] == '\r') len--;
    return memchr(p, '\r', len) ? -2 : (long)len;
}

long http_head_parse(const char *buf, size_t n, const HttpLimits *lim, HttpHead *h, HttpFail *f) {
    size_t max_line = lim->max_line ? lim->max_line : HTTP_LINE_MAX, max_head = lim->max_head ? lim->max_head : HTTP_HEAD_MAX;
    if (max_line > HTTP_LINE_MAX - 1) max_line = HTTP_LINE_MAX - 1;
    memset(h, 0, sizeof *h);
    h->length = -1;
    size_t at = 0;
    while (at < n && (buf[at] == '\r' || buf[at] == '\n')) at++;   /* blank lines before a request */
    if (at > max_head) return fail(f, 431, "%zu bytes of blank lines before a request", at);
    /* The request line: refused as soon as its bytes show it, whole or not,
     * and from its first max_line + 1 bytes alone, so that more bytes never
     * change the answer that fewer gave (a line with no end in those bytes
     * is too long, whatever follows). */
    size_t have = n - at < max_line + 1 ? n - at : max_line + 1, next = 0;
    const char *lf = memchr(buf + at, '\n', have);
    size_t end = lf ? (size_t)(lf - (buf + at)) : have, m = 0;
    while (m < end && tchar((unsigned char)buf[at + m])) m++;
    if (m < end && (m == 0 || buf[at + m] != ' '))
        return fail(f, 400, "not an HTTP request: byte 0x%02x at offset %zu of the request line",
                    (unsigned char)buf[at + m], m);
    if (!lf) return have > max_line ? fail(f, 414, "the request line is longer than %zu bytes", max_line) : 0;
    long len = (long)end;
    next = end + 1;
    if (len && buf[at + len - 1] == '\r') len--;
    if (memchr(buf + at, '\r', (size_t)len)) return fail(f, 400, "a CR inside the request line");
    if (parse_request_line(buf + at, (size_t)len, h, f)) return -1;
    at += next;
    int hosts = 0, close = 0, te = 0;
    for (int k = 1;; k++) {
        len = line_at(buf + at, n - at, &next);
        if (len == -1) {
            if (n > max_head) return fail(f, 431, "the request's head is longer than %zu bytes", max_head);
            return 0;
        }
        if (at + next > max_head) return fail(f, 431, "the request's head is longer than %zu bytes", max_head);
        if (len == -2) return fail(f, 400, "header line %d: a CR not followed by LF", k);
        if (len == 0) {
            at += next;
            break;
        }
        if (parse_header(buf + at, (size_t)len, k, lim, h, &hosts, &close, &te, f)) return -1;
        at += next;
    }
    if (te && h->length >= 0) return fail(f, 400, "both Transfer-Encoding and Content-Length");
    if (h->minor == 1 && hosts != 1) return fail(f, 400, hosts ? "more than one Host header" : "no Host header (HTTP/1.1 needs one)");
    h->chunked = te;
    h->keep_alive = h->minor == 1 && !close;
    return (long)at;
}

/* ==== chunks ================================================================ */

enum { CH_SIZE, CH_EXT, CH_SIZE_LF, CH_DATA, CH_DATA_CR, CH_DATA_LF, CH_TRAILER, CH_TRAILER_LINE, CH_TRAILER_LF, CH_END_LF };

static void size_line_done(HttpChunks *c) {
    c->state = c->left ? CH_DATA : CH_TRAILER;
    c->line = 0;
}

long http_chunks_feed(HttpChunks *c, const char *in, size_t n, char *out, size_t *out_n, size_t max_body,
                      HttpFail *f) {
    size_t o = 0, i = 0;
    *out_n = 0;
    while (i < n && !c->done) {
        unsigned char b = (unsigned char)in[i];
        size_t pos = c->at + i;
        switch (c->state) {
        case CH_SIZE: {
            int v = hexval(b);
            if (v >= 0) {
                if (c->digits >= 16) return fail(f, 413, "a chunk size of more than 16 hex digits");
                c->left = c->left * 16 + (unsigned)v;
                c->digits++;
                if (c->left > max_body - c->decoded)
                    return fail(f, 413, "the body is larger than %zu bytes (--max-body)", max_body);
            } else if (!c->digits) {
                return fail(f, 400, "a bad chunk size (byte 0x%02x at offset %zu of the body)", b, pos);
            } else if (b == ';' || b == ' ' || b == '\t') {
                c->state = CH_EXT;
            } else if (b == '\r') {
                c->state = CH_SIZE_LF;
            } else if (b == '\n') {
                size_line_done(c);
            } else {
                return fail(f, 400, "a bad chunk size (byte 0x%02x at offset %zu of the body)", b, pos);
            }
            i++;
            break;
        }
        case CH_EXT:
            if (++c->line > HTTP_EXT_MAX) return fail(f, 400, "a chunk's extensions longer than %d bytes", HTTP_EXT_MAX);
            if (b == '\r') c->state = CH_SIZE_LF;
            else if (b == '\n') size_line_done(c);
            else if (!value_byte(b)) return fail(f, 400, "byte 0x%02x in a chunk extension at offset %zu of the body", b, pos);
            i++;
            break;
        case CH_SIZE_LF:
            if (b != '\n') return fail(f, 400, "a chunk size line with a CR not followed by LF (offset %zu of the body)", pos);
            size_line_done(c);
            i++;
            break;
        case CH_DATA: {
            size_t k = n - i < c->left ? n - i : (size_t)c->left;
            memmove(out + o, in + i, k);
            o += k;
            i += k;
            c->left -= k;
            c->decoded += k;
            if (!c->left) c->state = CH_DATA_CR;
            break;
        }
        case CH_DATA_CR:
        case CH_DATA_LF:
            if (b == '\r' && c->state == CH_DATA_CR) c->state = CH_DATA_LF;
            else if (b == '\n') c->state = CH_SIZE, c->digits = 0;
            else return fail(f, 400, "a chunk longer than its size (offset %zu of the body)", pos);
            i++;
            break;
        case CH_TRAILER:
            if (b == '\r') c->state = CH_END_LF;
            else if (b == '\n') c->done = 1;
            else c->state = CH_TRAILER_LINE;
            i++;
            break;
        case CH_TRAILER_LINE:
            if (++c->line > HTTP_HEAD_MAX) return fail(f, 431, "trailers longer than %d bytes", HTTP_HEAD_MAX);
            if (b == '\n') c->state = CH_TRAILER;
            else if (b == '\r') c->state = CH_TRAILER_LF;
            i++;
            break;
        case CH_TRAILER_LF:
            if (b != '\n') return fail(f, 400, "a trailer line with a CR not followed by LF (offset %zu of the body)", pos);
            c->state = CH_TRAILER;
            i++;
            break;
        case CH_END_LF:
            if (b != '\n') return fail(f, 400, "the last chunk's blank line has a CR not followed by LF");
            c->done = 1;
            i++;
            break;
        }
    }
    c->at += i;
    *out_n = o;
    return (long)i;
}

/* ==== one connection ========================================================= */

enum { IO_READY = 1, IO_DEADLINE = -2, IO_IDLE = -3, IO_FAILED = -1 };

/* Wait until fd is ready for ev, the request's deadline (reading) or
 * idle_s: IO_READY, IO_DEADLINE, IO_IDLE or IO_FAILED. */
static int wait_fd(HttpConn *c, short ev, int reading) {
    for (;;) {
        double now = clock_seconds(), wait = c->idle_s > 0 ? c->idle_s : 86400;
        int which = IO_IDLE;
        if (reading && c->deadline > 0 && c->deadline - now < wait) {
            wait = c->deadline - now;
            which = IO_DEADLINE;
        }
        if (wait <= 0) return which;
        struct pollfd p = {.fd = c->fd, .events = ev};
        int r = poll(&p, 1, (int)(wait * 1000) + 1);
        if (r > 0) return IO_READY;   /* readable, writable, or hung up: the call that follows says */
        if (r < 0 && errno != EINTR) return IO_FAILED;
        if (r == 0 && wait < 86400) return which;
    }
}

/* More bytes into c->in: 1; 0 when the peer closed; IO_* otherwise. */
static int fill(HttpConn *c, size_t room_max) {
    if (c->off == c->len) c->off = c->len = 0;
    if (c->len == c->cap) {
        if (c->off) {
            memmove(c->in, c->in + c->off, c->len - c->off);
            c->len -= c->off;
            c->off = 0;
        } else {
            size_t cap = c->cap ? c->cap * 2 : 4096;
            if (cap > room_max) cap = room_max;
            if (cap <= c->cap) return IO_FAILED;   /* the parsers refuse before this */
            char *p = realloc(c->in, cap);
            if (!p) return IO_FAILED;
            c->in = p;
            c->cap = cap;
        }
    }
    for (;;) {
        ssize_t got = recv(c->fd, c->in + c->len, c->cap - c->len, 0);
        if (got > 0) {
            c->len += (size_t)got;
            c->got += (size_t)got;
            return 1;
        }
        if (got == 0) return 0;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return IO_FAILED;
        int w = wait_fd(c, POLLIN, 1);
        if (w != IO_READY) return w;
    }
}

static int timed_out(HttpConn *c, int r, HttpFail *f) {
    if (r == IO_DEADLINE) fail(f, 408, "the request was not whole within the deadline (--request-timeout)");
    else fail(f, 408, "nothing was sent for %d s (--idle-timeout)", c->idle_s);
    return HTTP_TIMEOUT;
}

int http_read_head(HttpConn *c, const HttpLimits *lim, HttpHead *h, HttpFail *f) {
    size_t max_head = lim->max_head ? lim->max_head : HTTP_HEAD_MAX;
    size_t max_line = lim->max_line ? lim->max_line : HTTP_LINE_MAX;
    c->got = c->len - c->off;    /* bytes of it already here, sent behind the last request */
    int parse = c->got > 0, newline = 0;
    for (;;) {
        if (parse) {
            long r = http_head_parse(c->in + c->off, c->len - c->off, lim, h, f);
            if (r < 0) return HTTP_REFUSED;
            if (r > 0) {
                c->off += (size_t)r;
                c->minor = h->minor;
                return HTTP_OK;
            }
        }
        size_t had = c->len - c->off;   /* fill may move the bytes to the buffer's start */
        int r = fill(c, max_head + 4096);
        if (r == 1) {
            size_t from = c->off + had;
            /* parsed again only when it can change the answer: a new line
             * end, the request line still open (its bytes are checked as
             * they come), or past a limit; a head trickled a byte at a time
             * is not parsed anew for every byte */
            int nl = memchr(c->in + from, '\n', c->len - from) != NULL;
            parse = nl || !newline || c->len - c->off > max_line;
            newline |= nl;
            continue;
        }
        if (r == 0 || r == IO_FAILED) return HTTP_CLOSED;
        return timed_out(c, r, f);
    }
}

static int send_iov(HttpConn *c, struct iovec *iov, int n);

/* Room for need bytes in b (growing by doubling, but never past most:
 * the body's whole size, when it is known), asking b->grow first when the
 * body is to be counted. */
static int body_room(HttpBody *b, size_t need, size_t most, int count, HttpFail *f) {
    if (need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < need) cap *= 2;
    if (cap > most && most >= need) cap = most;
    size_t counted = count ? cap : b->counted;
    if (count && b->grow && b->grow(b->ctx, b->counted, counted, f)) return -1;
    char *p = realloc(b->p, cap);
    if (!p) {
        if (count && b->grow) b->grow(b->ctx, counted, b->counted, f);   /* given back */
        return fail(f, 503, "out of memory for a body of %zu bytes", need);
    }
    b->p = p;
    b->cap = cap;
    b->counted = counted;
    return 0;
}

int http_read_body(HttpConn *c, const HttpHead *h, const HttpLimits *lim, HttpBody *b, HttpFail *f) {
    b->len = 0;
    if (!h->chunked && h->length <= 0) return body_room(b, 1, 1, 0, f) ? HTTP_REFUSED : (b->p[0] = 0, HTTP_OK);
    /* A body that came whole with its head is not an unfinished one: it is
     * not counted (a small request is served while slow bodies hold the
     * server's whole allowance). */
    int count = h->chunked || c->len - c->off < (size_t)h->length;
    if (h->expect_continue && h->minor == 1 && c->off == c->len) {
        static const char go[] = "HTTP/1.1 100 Continue\r\n\r\n";
        struct iovec v = {(void *)go, sizeof go - 1};
        if (send_iov(c, &v, 1)) return HTTP_CLOSED;
    }
    HttpChunks ch = {0};
    for (;;) {
        size_t avail = c->len - c->off;
        if (avail && h->chunked) {
            size_t most = lim->max_body - b->len < avail ? lim->max_body - b->len : avail;
            if (body_room(b, b->len + most + 1, lim->max_body + 1, count, f)) return HTTP_REFUSED;
            /* the decoder writes no more than max_body in all, so most is room enough */
            size_t out_n;
            long used = http_chunks_feed(&ch, c->in + c->off, avail, b->p + b->len, &out_n, lim->max_body, f);
            if (used < 0) return HTTP_REFUSED;
            c->off += (size_t)used;
            b->len += out_n;
            if (ch.done) break;
        } else if (avail) {
            size_t want = (size_t)h->length - b->len, take = avail < want ? avail : want;
            if (body_room(b, b->len + take + 1, (size_t)h->length + 1, count, f)) return HTTP_REFUSED;
            memcpy(b->p + b->len, c->in + c->off, take);
            c->off += take;
            b->len += take;
            if (b->len == (size_t)h->length) break;
        }
        int r = fill(c, (lim->max_head ? lim->max_head : HTTP_HEAD_MAX) + 4096);
        if (r == 1) continue;
        if (r == 0 || r == IO_FAILED) return HTTP_CLOSED;
        return timed_out(c, r, f);
    }
    b->p[b->len] = 0;   /* each body_room above made room for it */
    return HTTP_OK;
}

/* iov[0..n) sent whole, waiting (up to idle_s) while the socket is full. */
static int send_iov(HttpConn *c, struct iovec *iov, int n) {
    while (n > 0) {
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(c->fd, &m, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
            if (wait_fd(c, POLLOUT, 0) != IO_READY) return -1;
            continue;
        }
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++, n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return 0;
}

int http_send_head(HttpConn *c, int status, const char *type, const char *extra, long long len, int keep) {
    char head[1024];
    if (c->minor == 0) keep = 0;
    c->chunked_out = len < 0 && c->minor == 1;
    /* the status line names the highest version spoken (RFC 9110 section
     * 6.2), to a 1.0 client too; c->minor decides the framing */
    int n = snprintf(head, sizeof head, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n%s", status, http_reason(status), type,
                     extra ? extra : "");
    if (n < 0 || (size_t)n >= sizeof head - 64) return -1;
    if (len >= 0) n += snprintf(head + n, sizeof head - (size_t)n, "Content-Length: %lld\r\n", len);
    else if (c->chunked_out) n += snprintf(head + n, sizeof head - (size_t)n, "Transfer-Encoding: chunked\r\n");
    n += snprintf(head + n, sizeof head - (size_t)n, "%s\r\n", keep ? "" : "Connection: close\r\n");
    struct iovec v = {head, (size_t)n};
    return send_iov(c, &v, 1);
}

int http_send(HttpConn *c, const char *p, size_t n) {
    if (!n) return 0;
    if (!c->chunked_out) {
        struct iovec v = {(void *)p, n};
        return send_iov(c, &v, 1);
    }
    char size[24];
    int k = snprintf(size, sizeof size, "%zx\r\n", n);
    struct iovec v[3] = {{size, (size_t)k}, {(void *)p, n}, {"\r\n", 2}};
    return send_iov(c, v, 3);
}

int http_send_end(HttpConn *c) {
    if (!c->chunked_out) return 0;
    c->chunked_out = 0;
    struct iovec v = {"0\r\n\r\n", 5};
    return send_iov(c, &v, 1);
}

void http_linger(HttpConn *c) {
    if (c->fd >= 0) {
        shutdown(c->fd, SHUT_WR);
        double until = clock_seconds() + 1;
        size_t dropped = 0;
        char sink[16384];
        while (dropped < (size_t)64 << 20) {
            double left = until - clock_seconds();
            struct pollfd p = {.fd = c->fd, .events = POLLIN};
            if (left <= 0 || poll(&p, 1, (int)(left * 1000) + 1) <= 0) break;
            ssize_t got = recv(c->fd, sink, sizeof sink, 0);
            if (got <= 0 && !(got < 0 && (errno == EINTR || errno == EAGAIN))) break;
            if (got > 0) dropped += (size_t)got;
        }
    }
}

void http_close(HttpConn *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    free(c->in);
    c->in = NULL;
    c->off = c->len = c->cap = 0;
}
