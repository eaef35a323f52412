/* Status codes, the thread-local last error and the version query. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util/error.h"

static _Thread_local char last_error[1024];
static _Thread_local pl_status last_status = PL_STATUS_OK;

const char *pl_version(void) { return PL_VERSION_STRING; }

const char *pl_status_string(pl_status status) {
    switch (status) {
    case PL_STATUS_OK: return "ok";
    case PL_STATUS_INVALID_ARGUMENT: return "invalid argument";
    case PL_STATUS_SHAPE_MISMATCH: return "shape mismatch";
    case PL_STATUS_IO_ERROR: return "I/O error";
    case PL_STATUS_FORMAT_ERROR: return "format error";
    case PL_STATUS_OUT_OF_MEMORY: return "out of memory";
    case PL_STATUS_RUNTIME_ERROR: return "runtime error";
    case PL_STATUS_UNSUPPORTED: return "unsupported";
    }
    return "unknown status";
}

const char *pl_last_error(void) { return last_error; }
pl_status pl_last_status(void) { return last_status; }

void pl_clear_error(void) {
    last_error[0] = '\0';
    last_status = PL_STATUS_OK;
}

pl_status pl_fail(pl_status status, const char *fmt, ...) {
    /* Formatted aside first: callers often wrap the previous message
     * (pl_fail(st, "...: %s", pl_last_error())), which points into
     * last_error itself. */
    char message[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    memcpy(last_error, message, sizeof last_error);
    last_status = status;
    return status;
}

void pl_warn(const char *fmt, ...) {
    char message[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    fprintf(stderr, "pleiades: warning: %s\n", message);
}
