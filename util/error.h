/* Internal error reporting, the bottom layer every folder may use: every
 * public failure goes through pl_fail(), which records a status and a
 * formatted message in thread-local storage (read back with
 * pl_last_error()/pl_last_status()) and returns the status, so call sites
 * read `return pl_fail(PL_STATUS_..., "fmt", ...);`. */
#ifndef PL_UTIL_ERROR_H
#define PL_UTIL_ERROR_H

#include "pleiades.h"

pl_status pl_fail(pl_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A warning the library cannot return (something it left alone, a
 * fallback it took): one line "pleiades: warning: ..." on stderr. */
void pl_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
