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
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
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

/* ------------------------------------------------------------ watched mappings */

/* The handler reads this table, so a slot is filled before it is marked in
 * use and cleared after it is marked free (under `maps_mu`, which the handler
 * never takes: it only reads words and sets `damaged`). */
typedef struct {
    volatile sig_atomic_t used, damaged;
    uintptr_t lo, hi;
    char path[256];
} Watched;
static Watched maps[FIO_MAX_MAPS];
static pthread_mutex_t maps_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sigaction old_bus;
static uintptr_t page_size;
static int handler_set;

static void on_sigbus(int sig, siginfo_t *si, void *ctx) {
    uintptr_t a = (uintptr_t)si->si_addr;
    for (int i = 0; i < FIO_MAX_MAPS; i++) {
        if (!maps[i].used || a < maps[i].lo || a >= maps[i].hi) continue;
        void *page = (void *)(a & ~(page_size - 1));
        /* mmap is a plain system call, safe here in practice though POSIX does not list it */
        if (mmap(page, page_size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) {
            maps[i].damaged = 1;
            return;   /* the read runs again and finds zeros */
        }
        break;
    }
    /* not ours (or no page to put there): what would have happened anyway */
    sigaction(SIGBUS, &old_bus, NULL);
    if (!(old_bus.sa_flags & SA_SIGINFO) && old_bus.sa_handler != SIG_DFL && old_bus.sa_handler != SIG_IGN)
        old_bus.sa_handler(sig);
    else if (old_bus.sa_flags & SA_SIGINFO && old_bus.sa_sigaction)
        old_bus.sa_sigaction(sig, si, ctx);
}

int fio_map(const char *path, int fd, size_t size, const void **map, Err *e) {
    *map = NULL;
    void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) return err_set(e, ST_IO, "%s: cannot map: %m", path);
    *map = m;
    pthread_mutex_lock(&maps_mu);
    if (!handler_set) {
        page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        handler_set = sigaction(SIGBUS, &sa, &old_bus) == 0;
    }
    for (int i = 0; i < FIO_MAX_MAPS; i++)
        if (!maps[i].used) {
            snprintf(maps[i].path, sizeof maps[i].path, "%s", path);
            maps[i].lo = (uintptr_t)m;
            maps[i].hi = (uintptr_t)m + size;
            maps[i].damaged = 0;
            __atomic_store_n(&maps[i].used, 1, __ATOMIC_RELEASE);
            break;
        }
    pthread_mutex_unlock(&maps_mu);
    return ST_OK;
}

void fio_drop(const void *p, size_t len) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), lo = ((uintptr_t)p + page - 1) / page * page,
              hi = ((uintptr_t)p + len) / page * page;
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

void fio_unmap(const void *map, size_t size) {
    if (!map) return;
    pthread_mutex_lock(&maps_mu);
    for (int i = 0; i < FIO_MAX_MAPS; i++)
        if (maps[i].used && maps[i].lo == (uintptr_t)map) __atomic_store_n(&maps[i].used, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&maps_mu);
    munmap((void *)map, size);
}

int fio_map_check(const void *map, Err *e) {
    for (int i = 0; i < FIO_MAX_MAPS; i++) {
        if (!maps[i].used || maps[i].lo != (uintptr_t)map || !maps[i].damaged) continue;
        struct stat sb;
        long long now = stat(maps[i].path, &sb) == 0 ? (long long)sb.st_size : -1;
        return err_set(e, ST_IO, "%s: the file changed while mapped (now %lld bytes, %llu when loaded): its weights "
                       "can no longer be read; restart once the file is whole", maps[i].path, now,
                       (unsigned long long)(maps[i].hi - maps[i].lo));
    }
    return ST_OK;
}
