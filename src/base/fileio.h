/* fileio.h - opening input files safely.
 *
 * Every reader of a model, tokenizer, workload or corpus file opens it here,
 * so all of them refuse the same things the same way: a directory (ftell on
 * one says LONG_MAX, and a reader that trusts it asks for 2^63 bytes), and a
 * FIFO, socket or device (open() on a FIFO waits for a writer forever).
 * The check happens before any byte is read, with one line naming the path. */
#ifndef FILEIO_H
#define FILEIO_H
#include "base/err.h"
#include <stddef.h>
#include <stdio.h>

/* Open path for reading, refusing anything but a regular file without ever
 * blocking: "PATH: is a directory", "PATH: not a regular file (a FIFO)".
 * On success *fd is a blocking descriptor (the caller closes it) and *size
 * the file's size. ST_IO on failure, with *fd = -1. */
int fio_open(const char *path, int *fd, size_t *size, Err *e);

/* The same, as a stdio stream opened "rb" (the caller fcloses it). */
int fio_fopen(const char *path, FILE **f, size_t *size, Err *e);

/* The whole file in memory from mem_alloc, with a NUL after its *size bytes
 * (the caller mem_frees *data). ST_IO, ST_NOMEM. */
int fio_slurp(const char *path, unsigned char **data, size_t *size, Err *e);

/* Map `size` (> 0) bytes of fd read-only and private, and watch the mapping.
 * A file that another program truncates while it is mapped would kill this
 * process with SIGBUS at the first read past its new end. Instead the
 * first fio_map installs a SIGBUS handler which, for an address inside a
 * watched mapping, maps a page of zeros there (so the read completes, with
 * zeros) and marks the mapping damaged; any other SIGBUS keeps its default
 * action. Readers call fio_map_check when a result depends on the bytes.
 * At most FIO_MAX_MAPS mappings are watched at once (more are still mapped,
 * unwatched). ST_IO if mmap fails. */
enum { FIO_MAX_MAPS = 16 };
int fio_map(const char *path, int fd, size_t size, const void **map, Err *e);
void fio_unmap(const void *map, size_t size);   /* accepts NULL */
/* The whole pages inside [p, p + len) of a mapping given back to the system
 * (madvise MADV_DONTNEED): bytes read there later come back from the file.
 * For bytes a caller has copied elsewhere and will not read again. */
void fio_drop(const void *p, size_t len);
/* ST_OK, or ST_IO naming the file and its size now if a read of the mapping
 * at map ever faulted: the bytes read since were zeros, not the file's. */
int fio_map_check(const void *map, Err *e);

#endif
