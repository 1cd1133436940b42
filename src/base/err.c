/* err.c - see err.h. */
#include "base/err.h"
#include <stdarg.h>
#include <stdio.h>

int err_set(Err *e, int code, const char *fmt, ...) {
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

const char *status_name(int code) {
    switch (code) {
    case ST_OK: return "ok";
    case ST_IO: return "i/o error";
    case ST_FORMAT: return "bad format";
    case ST_NOMEM: return "out of memory";
    case ST_ARG: return "bad argument";
    case ST_UNSUPPORTED: return "unsupported";
    default: return "unknown status";
    }
}
