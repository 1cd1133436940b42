/* http1.h - the server's HTTP/1.1 (RFC 9112), as much of it as an OpenAI
 * endpoint needs, written for it: a request's head read and checked, its
 * body read by Content-Length or in chunks, under limits and deadlines; an
 * answer written whole, or as a stream of chunks.
 *
 * Why not a library: the one Debian has (libmicrohttpd) answered an
 * oversized head, a long URL, an unknown HTTP version or a bad chunk with
 * HTML of its own before any handler ran, and could not refuse a body
 * before reading it to its end. Here every refusal is a status and one line
 * (HttpFail), which the server sends as an OpenAI error object, and a body
 * over the limit is refused at the header that says so, or at the chunk
 * that passes it.
 *
 * Two layers. The parsers (http_head_parse, http_chunks_feed) take bytes
 * in memory and touch nothing else: the unit tests and the fuzz target
 * drive them. HttpConn reads and writes one socket with them, never
 * waiting past a deadline. See notes/server.md, "HTTP". */
#ifndef HTTP1_H
#define HTTP1_H
#include <stddef.h>

enum {
    HTTP_LINE_MAX = 8192,        /* the request line: 414 beyond */
    HTTP_HEAD_MAX = 32768,       /* the request line and headers together: 431 beyond */
    HTTP_EXT_MAX = 1024,         /* a chunk's size line with its extensions: 400 beyond */
};

typedef struct {
    int status;                  /* 400, 408, 413, 414, 417, 431, 501, 503 or 505 */
    char msg[240];               /* one line, for the error object */
} HttpFail;

typedef struct {
    size_t max_line;             /* 0: HTTP_LINE_MAX */
    size_t max_head;             /* 0: HTTP_HEAD_MAX */
    size_t max_body;             /* bytes of body (decoded, for chunks): 413 beyond */
} HttpLimits;

/* A request's head, parsed. */
typedef struct {
    char method[24];
    char path[HTTP_LINE_MAX];    /* the target's path, percent-decoded, without its query */
    int minor;                   /* HTTP/1.minor: 0 or 1 */
    int keep_alive;              /* 1.1 without "Connection: close" (1.0: never) */
    int chunked;                 /* Transfer-Encoding: chunked */
    long long length;            /* Content-Length; -1 when none (then no body, unless chunked) */
    int expect_continue;         /* Expect: 100-continue */
} HttpHead;

/* The head at buf[0..n): how many bytes it takes (through its blank line)
 * when whole; 0 when more are needed; -1 with *f when it is refused: 400
 * (not HTTP, a bad header), 414 (the request line over lim->max_line), 431
 * (the head over lim->max_head), 413 (a Content-Length over lim->max_body),
 * 417 (an Expect other than 100-continue), 501 (a transfer coding other
 * than chunked), 505 (an HTTP version other than 1.0 and 1.1). A refusal is
 * known as soon as the bytes show it, whole head or not. */
long http_head_parse(const char *buf, size_t n, const HttpLimits *lim, HttpHead *h, HttpFail *f);

/* The chunked body decoder: hex size, optional extensions, CRLF, data,
 * CRLF, ... a chunk of size 0, optional trailers, CRLF. */
typedef struct {
    int state;
    unsigned long long left;     /* bytes of the current chunk still to come */
    size_t decoded;              /* bytes of body so far */
    size_t at;                   /* bytes of encoded body so far (for messages) */
    size_t line;                 /* bytes of the current size or trailer line */
    int digits;
    int done;                    /* the last chunk and its trailers are in */
} HttpChunks;

/* Decode in[0..n) into out (room for n bytes; out may be in): the bytes of
 * in used (fewer than n only when the body ended: the rest is the next
 * request's), with *out_n the body bytes written; -1 with *f (400: a bad
 * size line or framing; 413: the body would pass max_body, known at the
 * size line that says so). */
long http_chunks_feed(HttpChunks *c, const char *in, size_t n, char *out, size_t *out_n, size_t max_body,
                      HttpFail *f);

/* ---- one connection ---- */

typedef struct {
    int fd;
    char *in;                    /* (cap) bytes read and not yet used: [off, len) */
    size_t off, len, cap;
    double deadline;             /* clock_seconds() by which the request must be whole (0: none) */
    int idle_s;                  /* a read or write waiting this long ends the connection */
    int minor;                   /* the current request's HTTP/1.minor (for the answer) */
    int chunked_out;             /* the answer under way is sent in chunks */
    size_t got;                  /* bytes of the current request read so far */
} HttpConn;

/* Results of the reading calls besides HTTP_OK. */
enum {
    HTTP_OK = 0,
    HTTP_CLOSED = 1,             /* the peer closed (or the socket failed) before a byte of a request */
    HTTP_REFUSED = 2,            /* *f says why; answer it, then close */
    HTTP_TIMEOUT = 3,            /* the deadline passed, or the peer sent nothing for idle_s */
};

/* Read the next request's head: HTTP_OK with *h, or one of the above. On
 * HTTP_TIMEOUT *f is a 408 whose message says which limit passed. */
int http_read_head(HttpConn *c, const HttpLimits *lim, HttpHead *h, HttpFail *f);

/* A body's buffer. grow is asked before the bytes counted for an
 * unfinished body go from cap to new_cap (the server counts every
 * connection's against one bound): non-zero refuses, with *f set by it.
 * A body that came whole with its head is not counted. */
typedef struct {
    char *p;                     /* (cap) malloc'd; len bytes of body; a NUL after them */
    size_t len, cap;
    size_t counted;              /* bytes of cap that grow accepted (0 for a body not counted) */
    int (*grow)(void *ctx, size_t cap, size_t new_cap, HttpFail *f);
    void *ctx;
} HttpBody;

/* Read the body h announces into b (sending "100 Continue" first when the
 * client waits for it): HTTP_OK, HTTP_REFUSED (413, a bad chunk, the
 * grow callback's refusal) or HTTP_TIMEOUT / HTTP_CLOSED. */
int http_read_body(HttpConn *c, const HttpHead *h, const HttpLimits *lim, HttpBody *b, HttpFail *f);

/* The answer's status line and headers: Content-Type type, extra (whole
 * "Name: value\r\n" lines, or NULL), and either Content-Length len or, with
 * len < 0, a stream (chunked under 1.1, to the close under 1.0); keep says
 * whether the connection stays open. 0, or -1 when the peer is gone. */
int http_send_head(HttpConn *c, int status, const char *type, const char *extra, long long len, int keep);
/* Bytes of the body: all sent (as one chunk in a stream), or -1. */
int http_send(HttpConn *c, const char *p, size_t n);
/* The end of a stream (the last chunk under 1.1): 0 or -1. */
int http_send_end(HttpConn *c);
/* After refusing a request whose body was not read: stop sending, then
 * read and drop what the client still sends (at most a second, 64 MiB), so
 * that the answer is not lost to the reset that closing a socket with
 * unread bytes sends. http_close follows. */
void http_linger(HttpConn *c);
/* Close the socket and free the buffer. */
void http_close(HttpConn *c);

/* The reason phrase of a status ("Not Found"). */
const char *http_reason(int status);

#endif
