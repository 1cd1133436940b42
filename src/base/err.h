/* err.h - status codes and one-line error messages.
 *
 * Library functions return a Status and, on failure, fill an Err with one line
 * that names the problem (file, offset, field, value). Only main() prints it
 * and exits; library code never does. */
#ifndef ERR_H
#define ERR_H

typedef enum {
    ST_OK = 0,
    ST_IO = -1,        /* cannot open / read / map a file */
    ST_FORMAT = -2,    /* the file is not what it claims to be */
    ST_NOMEM = -3,     /* an allocation failed */
    ST_ARG = -4,       /* a caller passed a bad value */
    ST_UNSUPPORTED = -5,
} Status;

typedef struct { char msg[512]; } Err;

/* Format a message into e (when e is not NULL) and return code, so callers can
 * write: return err_set(e, ST_FORMAT, "%s: bad magic", path); */
int err_set(Err *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
const char *status_name(int code);

#endif
