/* fileio.c - see fileio.h.
 *
 * The order matters: open with O_NONBLOCK (so a FIFO without a writer does
 * not hold us in open()), fstat the descriptor we got (not the path, which
 * could be replaced in between), refuse what is not a regular file, and only
 * then clear O_NONBLOCK so reads behave normally. */
#include "base/fileio.h"
#include "base/mem.h"
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind_of(mode_t m) {
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    return "not a plain file";
}

int fio_open(const char *path, int *fd, size_t *size, Err *e) {
    *fd = -1;
    *size = 0;
    int f = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (f < 0) return err_set(e, ST_IO, "%s: cannot open: %m", path);
    struct stat sb;
    int st = ST_OK;
    if (fstat(f, &sb) != 0) st = err_set(e, ST_IO, "%s: cannot stat: %m", path);
    else if (S_ISDIR(sb.st_mode)) st = err_set(e, ST_IO, "%s: is a directory", path);
    else if (!S_ISREG(sb.st_mode))
        st = err_set(e, ST_IO, "%s: not a regular file (%s)", path, kind_of(sb.st_mode));
    else if ((uint64_t)sb.st_size > SIZE_MAX / 2)
        st = err_set(e, ST_IO, "%s: absurd size %lld", path, (long long)sb.st_size);
    else {
        int flags = fcntl(f, F_GETFL);
        if (flags < 0 || fcntl(f, F_SETFL, flags & ~O_NONBLOCK) < 0)
            st = err_set(e, ST_IO, "%s: cannot clear O_NONBLOCK: %m", path);
    }
    if (st) {
        close(f);
        return st;
    }
    *fd = f;
    *size = (size_t)sb.st_size;
    return ST_OK;
}

int fio_fopen(const char *path, FILE **f, size_t *size, Err *e) {
    *f = NULL;
    int fd;
    int st = fio_open(path, &fd, size, e);
    if (st) return st;
    *f = fdopen(fd, "rb");
    if (!*f) {
        st = err_set(e, ST_IO, "%s: cannot open: %m", path);
        close(fd);
    }
    return st;
}

int fio_slurp(const char *path, unsigned char **data, size_t *size, Err *e) {
    *data = NULL;
    *size = 0;
    int fd;
    size_t n;
    int st = fio_open(path, &fd, &n, e);
    if (st) return st;
    unsigned char *buf = mem_alloc(n + 1);
    if (!buf) {
        close(fd);
        return err_set(e, ST_NOMEM, "%s: out of memory reading %zu bytes", path, n);
    }
    size_t got = 0;
    ssize_t r = 0;
    while (got < n) {
        r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    if (got != n) {
        st = r < 0 ? err_set(e, ST_IO, "%s: read error after %zu of %zu bytes: %m", path, got, n)
                   : err_set(e, ST_IO, "%s: read %zu of %zu bytes (did the file shrink?)", path,
                             got, n);
        close(fd);
        mem_free(buf);
        return st;
    }
    close(fd);
    buf[n] = 0;
    *data = buf;
    *size = n;
    return ST_OK;
}
