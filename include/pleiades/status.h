/*
 * pleiades/status.h — version, status codes and the thread-local last error
 * (part of pleiades.h).
 *
 *   pl_engine_t *e = pl_engine_new(rt, g, &eo);
 *   if (!e)
 *       fprintf(stderr, "%s (%s)\n", pl_last_error(),
 *               pl_status_string(pl_last_status()));
 */
#ifndef PLEIADES_STATUS_H
#define PLEIADES_STATUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PL_VERSION_MAJOR 0
#define PL_VERSION_MINOR 1
#define PL_VERSION_PATCH 0
#define PL_VERSION_STRING "0.1.0"

/* The runtime version of the library (may differ from PL_VERSION_STRING of
 * the headers an application was built with). Static string, never freed. */
const char *pl_version(void);

/* ---------------------------------------------------------------- status */

typedef enum pl_status {
    PL_STATUS_OK = 0,
    PL_STATUS_INVALID_ARGUMENT, /* NULL pointer, out-of-range value */
    PL_STATUS_SHAPE_MISMATCH,   /* shapes of an op's operands disagree */
    PL_STATUS_IO_ERROR,         /* a file could not be opened/read/written */
    PL_STATUS_FORMAT_ERROR,     /* a file is truncated or malformed */
    PL_STATUS_OUT_OF_MEMORY,
    PL_STATUS_RUNTIME_ERROR,    /* StarPU failed (init, task submission) */
    PL_STATUS_UNSUPPORTED,      /* valid request this build cannot do */
} pl_status;

/* A static, human-readable name for a status ("invalid argument"). */
const char *pl_status_string(pl_status status);

/* The message of the last error on the calling thread, e.g.
 * "pl_add: shapes [B, 10] and [B, 12] of 'res' differ". Thread-local; valid
 * until the next failing call on this thread. "" when there was none. */
const char *pl_last_error(void);

/* The status of the last failing call on the calling thread (thread-local). */
pl_status pl_last_status(void);

/* Clears the calling thread's last error. */
void pl_clear_error(void);

#ifdef __cplusplus
}
#endif

#endif /* PLEIADES_STATUS_H */
