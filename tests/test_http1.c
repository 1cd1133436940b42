/* test_http1.c - the server's HTTP/1.1 (src/front/http1.c): request heads
 * parsed or refused with the status RFC 9112 gives each defect (400, 413,
 * 414, 417, 431, 501, 505), refusals known before the head is whole; chunked
 * bodies decoded against an encoder written here, whole, byte by byte and in
 * random pieces; then one connection over a socket pair: pipelined requests,
 * a body announced with 100-continue, an answer streamed in chunks that
 * decode back, and a trickled head refused at its deadline. tests/server.sh
 * sends the same defects to the live server and reads the error objects. */
#include "front/http1.h"
#include "base/clock.h"
#include "testutil.h"
#include <fcntl.h>
#include <pthread.h>
#include <sys/socket.h>

static const HttpLimits LIM = {.max_line = 1024, .max_head = 4096, .max_body = 10000};

/* parse s whole: the result, with *h and *f */
static long parse(const char *s, HttpHead *h, HttpFail *f) { return http_head_parse(s, strlen(s), &LIM, h, f); }

static void a_head_is_parsed_with_its_path_decoded_and_its_query_dropped(void **st) {
    static const char req[] = "POST /v1/comp%6Cetions?stream=1 HTTP/1.1\r\nHost: a\r\n"
                              "Content-Type: application/json\r\ncontent-length:  12 \r\n\r\n{\"prompt\":1}";
    HttpHead h;
    HttpFail f;
    assert_int_equal(parse(req, &h, &f), strlen(req) - 12);
    assert_string_equal(h.method, "POST");
    assert_string_equal(h.path, "/v1/completions");
    assert_int_equal(h.length, 12);
    assert_int_equal(h.minor, 1);
    assert_int_equal(h.keep_alive, 1);
    assert_int_equal(h.chunked, 0);
}

static void every_prefix_of_a_good_head_asks_for_more_bytes(void **st) {
    static const char req[] = "GET /health HTTP/1.1\r\nHost: a\r\nX-Long: one two three\r\n\r\n";
    HttpHead h;
    HttpFail f;
    for (size_t n = 0; n < sizeof req - 1; n++) assert_int_equal(http_head_parse(req, n, &LIM, &h, &f), 0);
    assert_int_equal(http_head_parse(req, sizeof req - 1, &LIM, &h, &f), sizeof req - 1);
}

static void bare_line_feeds_blank_lines_before_and_absolute_targets_are_read(void **st) {
    HttpHead h;
    HttpFail f;
    const char *req = "\r\n\nGET http://example.com/metrics?x HTTP/1.0\nHost: a\n\n";
    assert_int_equal(parse(req, &h, &f), strlen(req));
    assert_string_equal(h.path, "/metrics");
    assert_int_equal(h.minor, 0);
    assert_int_equal(h.keep_alive, 0);   /* 1.0: the connection ends with the answer */
    req = "GET http://example.com HTTP/1.1\r\nHost: a\r\n\r\n";
    assert_int_equal(parse(req, &h, &f), strlen(req));
    assert_string_equal(h.path, "/");
    assert_true(parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, close\r\n\r\n", &h, &f) > 0);
    assert_int_equal(h.keep_alive, 0);
}

/* Each defect, and the status it gets. */
static void each_defect_of_a_head_gets_its_status(void **st) {
    static const struct {
        const char *req;
        int status;
    } cases[] = {
        {"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400},   /* a TLS hello */
        {"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505},
        {"GET / HTTP/1.2\r\nHost: a\r\n\r\n", 505},
        {"GET / HTTP/1.1 x\r\nHost: a\r\n\r\n", 400},
        {"GET / HTTX/1.1\r\nHost: a\r\n\r\n", 400},
        {"GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
        {"GET nopath HTTP/1.1\r\nHost: a\r\n\r\n", 400},
        {"GET /a%zz HTTP/1.1\r\nHost: a\r\n\r\n", 400},
        {"GET /a%00b HTTP/1.1\r\nHost: a\r\n\r\n", 400},
        {"GET /a%4 HTTP/1.1\r\nHost: a\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\n\r\n", 400},                        /* no Host */
        {"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a\r\nX: a\001b\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a\r\nnocolon\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 12a\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10001\r\n\r\n", 413},
        {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999999\r\n\r\n", 413},
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 501},
        {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\n\r\n", 417},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        HttpHead h;
        HttpFail f = {0};
        long r = parse(cases[i].req, &h, &f);
        if (r != -1 || f.status != cases[i].status)
            fail_msg("case %zu: got %ld, status %d (%s); want status %d", i, r, f.status, f.msg, cases[i].status);
        assert_true(f.msg[0] != 0);
    }
    HttpHead h;
    HttpFail f;
    assert_true(parse("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", &h, &f) > 0);
    assert_int_equal(h.length, 5);
    assert_true(parse("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10000\r\n\r\n", &h, &f) > 0);
}

/* A long request line or head is refused once its bytes pass the limit, its
 * end not yet come; garbage at its first byte. */
static void a_refusal_is_known_before_the_head_is_whole(void **st) {
    char *buf = malloc(8192);
    HttpHead h;
    HttpFail f;
    assert_int_equal(http_head_parse("\x16", 1, &LIM, &h, &f), -1);
    assert_int_equal(f.status, 400);
    memcpy(buf, "GET /", 5);
    memset(buf + 5, 'a', 2000);
    assert_int_equal(http_head_parse(buf, LIM.max_line, &LIM, &h, &f), 0);
    assert_int_equal(http_head_parse(buf, LIM.max_line + 1, &LIM, &h, &f), -1);
    assert_int_equal(f.status, 414);
    int n = snprintf(buf, 8192, "GET / HTTP/1.1\r\nHost: a\r\nX-Big: ");
    memset(buf + n, 'b', 8192 - (size_t)n);
    assert_int_equal(http_head_parse(buf, LIM.max_head, &LIM, &h, &f), 0);
    assert_int_equal(http_head_parse(buf, LIM.max_head + 1, &LIM, &h, &f), -1);
    assert_int_equal(f.status, 431);
    free(buf);
}

/* ---- chunks ---- */

static unsigned long long rng = 88172645463325252ull;
static unsigned rnd(unsigned n) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (unsigned)(rng % n);
}

/* body[0..n) chunked as a client might: random sizes in any case of hex,
 * now and then an extension, trailers at the end. */
static size_t encode_chunked(const char *body, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = 1 + rnd(700);
        if (k > n - i) k = n - i;
        o += (size_t)sprintf(out + o, rnd(2) ? "%zx" : "%zX", k);
        if (!rnd(4)) o += (size_t)sprintf(out + o, " ;name=\"v\";x");
        o += (size_t)sprintf(out + o, "\r\n");
        memcpy(out + o, body + i, k);
        o += k;
        o += (size_t)sprintf(out + o, "\r\n");
        i += k;
    }
    return o + (size_t)sprintf(out + o, "0\r\nX-Trailer: 1\r\nX-Other: two\r\n\r\n");
}

/* Decode in[0..n) in pieces of at most step bytes (0: random); returns the
 * bytes used, the body in out. */
static long decode_in_pieces(const char *in, size_t n, size_t step, char *out, size_t *out_len) {
    HttpChunks c = {0};
    HttpFail f;
    size_t at = 0, o = 0;
    while (at < n && !c.done) {
        size_t k = step ? step : 1 + rnd(300);
        if (k > n - at) k = n - at;
        char piece[1024];
        memcpy(piece, in + at, k);
        size_t got;
        long used = http_chunks_feed(&c, piece, k, piece, &got, 10000, &f);   /* decoded in place */
        if (used < 0) fail_msg("refused at %zu: %d %s", at, f.status, f.msg);
        memcpy(out + o, piece, got);
        o += got;
        at += (size_t)used;
        if ((size_t)used < k) break;
    }
    *out_len = o;
    return c.done ? (long)at : -1;
}

static void chunked_bodies_decode_whole_byte_by_byte_and_in_random_pieces(void **st) {
    char body[6000], *enc = malloc(20000), *out = malloc(20000);
    for (int round = 0; round < 20; round++) {
        size_t n = rnd(2) ? 1 + rnd(sizeof body) : rnd(40);
        for (size_t i = 0; i < n; i++) body[i] = (char)rnd(256);
        size_t e = encode_chunked(body, n, enc);
        static const char next[] = "GET /health HTTP/1.1\r\n";   /* pipelined behind it: not the body's */
        memcpy(enc + e, next, sizeof next - 1);
        for (size_t step = 0; step <= 3; step += 1) {
            size_t got;
            HttpChunks c = {0};
            HttpFail f;
            long used = step == 3 ? http_chunks_feed(&c, enc, e + sizeof next - 1, out, &got, 10000, &f)
                                  : decode_in_pieces(enc, e + sizeof next - 1, step, out, &got);
            if (step == 3) assert_true(c.done);
            assert_int_equal(used, e);
            assert_int_equal(got, n);
            assert_memory_equal(out, body, n);
        }
    }
    free(enc);
    free(out);
}

static void each_defect_of_a_chunked_body_gets_its_status(void **st) {
    static const struct {
        const char *in;
        int status;
    } cases[] = {
        {"zz\r\n", 400},
        {";x\r\n", 400},
        {"5\r\nhelloX", 400},          /* data longer than its size */
        {"5\r\nhello\r\r", 400},
        {"5\rX", 400},
        {"5 x\001\r\n", 400},
        {"2711\r\n", 413},             /* 10001 bytes: known at the size line */
        {"1388\r\n", 0},               /* 5000: fine so far */
        {"11111111111111111\r\n", 413},
        {"0\r\nX: y\r\r", 400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        HttpChunks c = {0};
        HttpFail f = {0};
        char out[64];
        size_t got, n = strlen(cases[i].in);
        long r = http_chunks_feed(&c, cases[i].in, n, out, &got, 10000, &f);
        if (cases[i].status ? r != -1 || f.status != cases[i].status : r != (long)n)
            fail_msg("case %zu: got %ld, status %d (%s); want status %d", i, r, f.status, f.msg, cases[i].status);
    }
    /* exactly max_body is whole; one byte more is refused at the chunk that passes it */
    char *enc = malloc(30000), *out = malloc(30000), *body = calloc(1, 10001);
    HttpChunks c = {0};
    HttpFail f;
    size_t got, e = encode_chunked(body, 10000, enc);
    assert_int_equal(http_chunks_feed(&c, enc, e, out, &got, 10000, &f), e);
    assert_int_equal(got, 10000);
    e = encode_chunked(body, 10001, enc);
    c = (HttpChunks){0};
    assert_int_equal(http_chunks_feed(&c, enc, e, out, &got, 10000, &f), -1);
    assert_int_equal(f.status, 413);
    free(enc);
    free(out);
    free(body);
}

/* ---- one connection, over a socket pair ---- */

typedef struct {
    int fd;
    const char *bytes;
    double gap_s;                /* between bytes (0: all at once) */
    const char *then;            /* sent a tenth of a second after bytes (or NULL) */
} Writer;

static void send_str(const Writer *w, const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t k = w->gap_s > 0 ? 1 : n - i;
        if (send(w->fd, s + i, k, MSG_NOSIGNAL) != (ssize_t)k) break;
        i += k;
        if (w->gap_s > 0) usleep((useconds_t)(w->gap_s * 1e6));
    }
}

static void *writer_main(void *arg) {
    Writer *w = arg;
    send_str(w, w->bytes);
    if (w->then) {
        usleep(100000);
        send_str(w, w->then);
    }
    return NULL;
}

static HttpConn conn_pair(int *peer) {
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
    *peer = sv[1];
    return (HttpConn){.fd = sv[0], .idle_s = 5};
}

/* what the peer has been sent, up to cap bytes, once the server side closed */
static size_t read_all(int fd, char *buf, size_t cap) {
    size_t n = 0;
    for (ssize_t r; n < cap - 1 && (r = recv(fd, buf + n, cap - 1 - n, 0)) > 0;) n += (size_t)r;
    buf[n] = 0;
    return n;
}

static void pipelined_requests_and_a_continued_body_are_read_in_turn(void **st) {
    int peer;
    HttpConn c = conn_pair(&peer);
    Writer w = {peer, "POST /a HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n", 0,
                "hello"
                "POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
                "GET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"};
    pthread_t th;
    pthread_create(&th, NULL, writer_main, &w);
    HttpHead h;
    HttpFail f;
    HttpBody b = {0};
    const char *want_path[] = {"/a", "/b", "/c"}, *want_body[] = {"hello", "abc", ""};
    for (int i = 0; i < 3; i++) {
        c.deadline = clock_seconds() + 5;
        assert_int_equal(http_read_head(&c, &LIM, &h, &f), HTTP_OK);
        assert_string_equal(h.path, want_path[i]);
        assert_int_equal(http_read_body(&c, &h, &LIM, &b, &f), HTTP_OK);
        assert_int_equal(b.len, strlen(want_body[i]));
        assert_string_equal(b.p, want_body[i]);
    }
    assert_int_equal(h.keep_alive, 0);
    free(b.p);
    pthread_join(th, NULL);
    /* the answer to the last: a stream in chunks */
    assert_int_equal(http_send_head(&c, 200, "text/event-stream", "X-A: b\r\n", -1, 0), 0);
    assert_int_equal(http_send(&c, "data: one\n\n", 11), 0);
    assert_int_equal(http_send(&c, "data: [DONE]\n\n", 14), 0);
    assert_int_equal(http_send_end(&c), 0);
    http_close(&c);
    char got[2048];
    read_all(peer, got, sizeof got);
    close(peer);
    /* the first request waited for "100 Continue"; it came before the answer */
    assert_true(strncmp(got, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n", 42) == 0);
    assert_non_null(strstr(got, "\r\nTransfer-Encoding: chunked\r\n"));
    assert_non_null(strstr(got, "\r\nConnection: close\r\n"));
    assert_non_null(strstr(got, "\r\nX-A: b\r\n"));
    /* the body decodes back with the decoder */
    const char *body = strstr(got, "\r\n\r\n") + 4;
    body = strstr(body, "\r\n\r\n") + 4;
    char out[256];
    size_t out_n;
    HttpChunks ch = {0};
    assert_int_equal(http_chunks_feed(&ch, body, strlen(body), out, &out_n, 1000, &f), strlen(body));
    assert_true(ch.done);
    out[out_n] = 0;
    assert_string_equal(out, "data: one\n\ndata: [DONE]\n\n");
}

/* The next request on a kept connection, sent after the last was read to
 * its end (the buffer starts over): read whole. */
static void a_request_after_a_pause_on_a_kept_connection_is_read(void **st) {
    int peer;
    HttpConn c = conn_pair(&peer);
    char first[400];
    int n = snprintf(first, sizeof first, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 300\r\n\r\n");
    memset(first + n, 'x', 300);
    first[n + 300] = 0;
    Writer w = {peer, first, 0, "GET /b HTTP/1.1\r\nHost: x\r\n\r\n"};
    pthread_t th;
    pthread_create(&th, NULL, writer_main, &w);
    HttpHead h;
    HttpFail f;
    HttpBody b = {0};
    c.deadline = clock_seconds() + 5;
    assert_int_equal(http_read_head(&c, &LIM, &h, &f), HTTP_OK);
    assert_int_equal(http_read_body(&c, &h, &LIM, &b, &f), HTTP_OK);
    assert_int_equal(b.len, 300);
    assert_int_equal(http_read_head(&c, &LIM, &h, &f), HTTP_OK);
    assert_string_equal(h.path, "/b");
    free(b.p);
    pthread_join(th, NULL);
    http_close(&c);
    close(peer);
}

/* Many requests of every shape on one connection, sent in pieces of
 * random sizes with pauses between some (so the buffer fills, moves and
 * starts over at every point of a request): each read back as written. */
typedef struct {
    int fd;
    const char *bytes;
    size_t n;
} Pieces;

static void *pieces_main(void *arg) {
    Pieces *p = arg;
    for (size_t i = 0; i < p->n;) {
        size_t k = 1 + rnd(rnd(4) ? 64 : 9000);
        if (k > p->n - i) k = p->n - i;
        if (send(p->fd, p->bytes + i, k, MSG_NOSIGNAL) != (ssize_t)k) break;
        i += k;
        if (!rnd(8)) usleep(200);
    }
    return NULL;
}

static void requests_sent_in_random_pieces_are_read_in_order(void **st) {
    enum { N = 60 };
    char *all = malloc(1 << 20), paths[N][32], *bodies[N];
    size_t n = 0, blen[N];
    for (int i = 0; i < N; i++) {
        int kind = (int)rnd(3);   /* 0: GET, 1: a body by its length, 2: in chunks */
        const char *eol = rnd(4) ? "\r\n" : "\n";
        snprintf(paths[i], sizeof paths[i], "/r%d", i);
        blen[i] = kind ? rnd(5000) : 0;
        bodies[i] = malloc(blen[i] + 1);
        for (size_t j = 0; j < blen[i]; j++) bodies[i][j] = (char)('a' + rnd(26));
        bodies[i][blen[i]] = 0;
        n += (size_t)sprintf(all + n, "%s %s?q=%d HTTP/1.1%sHOST: x%sX-Pad: %0*d%s", kind ? "POST" : "GET", paths[i], i,
                             eol, eol, (int)rnd(300), 0, eol);
        if (kind == 1) n += (size_t)sprintf(all + n, "content-length: %zu%s%s", blen[i], eol, eol);
        if (kind == 2) n += (size_t)sprintf(all + n, "Transfer-Encoding: CHUNKED%s%s", eol, eol);
        if (kind == 0) n += (size_t)sprintf(all + n, "%s", eol);
        if (kind == 1) memcpy(all + n, bodies[i], blen[i]), n += blen[i];
        if (kind == 2) n += encode_chunked(bodies[i], blen[i], all + n);
    }
    int peer;
    HttpConn c = conn_pair(&peer);
    Pieces p = {peer, all, n};
    pthread_t th;
    pthread_create(&th, NULL, pieces_main, &p);
    HttpHead h;
    HttpFail f;
    HttpBody b = {0};
    for (int i = 0; i < N; i++) {
        c.deadline = clock_seconds() + 10;
        int r = http_read_head(&c, &LIM, &h, &f);
        if (r != HTTP_OK) fail_msg("request %d: %d (%d %s)", i, r, f.status, f.msg);
        assert_string_equal(h.path, paths[i]);
        r = http_read_body(&c, &h, &LIM, &b, &f);
        if (r != HTTP_OK) fail_msg("request %d's body: %d (%d %s)", i, r, f.status, f.msg);
        assert_int_equal(b.len, blen[i]);
        assert_memory_equal(b.p, bodies[i], blen[i]);
        free(bodies[i]);
    }
    pthread_join(th, NULL);
    free(b.p);
    free(all);
    http_close(&c);
    close(peer);
}

static void a_trickled_head_is_refused_at_its_deadline_not_before(void **st) {
    int peer;
    HttpConn c = conn_pair(&peer);
    Writer w = {peer, "GET /health HTTP/1.1\r\nHost: x\r\nX-1: a\r\nX-2: a\r\nX-3: a\r\nX-4: a\r\nX-5: a\r\n", 0.02, NULL};
    pthread_t th;
    pthread_create(&th, NULL, writer_main, &w);
    double t0 = clock_seconds();
    c.deadline = t0 + 0.5;
    HttpHead h;
    HttpFail f;
    assert_int_equal(http_read_head(&c, &LIM, &h, &f), HTTP_TIMEOUT);
    double took = clock_seconds() - t0;
    assert_int_equal(f.status, 408);
    assert_true(took >= 0.45 && took < 3);
    assert_true(c.got > 0);
    pthread_join(th, NULL);
    http_close(&c);
    close(peer);
}

int main(int argc, char **argv) {
    select_tests(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_head_is_parsed_with_its_path_decoded_and_its_query_dropped),
        cmocka_unit_test(every_prefix_of_a_good_head_asks_for_more_bytes),
        cmocka_unit_test(bare_line_feeds_blank_lines_before_and_absolute_targets_are_read),
        cmocka_unit_test(each_defect_of_a_head_gets_its_status),
        cmocka_unit_test(a_refusal_is_known_before_the_head_is_whole),
        cmocka_unit_test(chunked_bodies_decode_whole_byte_by_byte_and_in_random_pieces),
        cmocka_unit_test(each_defect_of_a_chunked_body_gets_its_status),
        cmocka_unit_test(pipelined_requests_and_a_continued_body_are_read_in_turn),
        cmocka_unit_test(a_request_after_a_pause_on_a_kept_connection_is_read),
        cmocka_unit_test(requests_sent_in_random_pieces_are_read_in_order),
        cmocka_unit_test(a_trickled_head_is_refused_at_its_deadline_not_before),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
