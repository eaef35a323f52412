/* What the built-in hooks share (hook_util.h). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include "trainer/hooks/hook_util.h"

#include <stdarg.h>
#include <stdlib.h>
#include <time.h>

#include "pleiades.h"
#include "util/error.h"

void *pl_hook_alloc(size_t size, const char *name) {
    void *p = calloc(1, size);
    if (!p)
        pl_fail(PL_STATUS_OUT_OF_MEMORY, "%s: out of memory", name);
    return p;
}

double pl_hook_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void pl_hook_print(FILE *out, const char *fmt, ...) {
    if (!out)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(out, fmt, ap);
    va_end(ap);
    fflush(out);
}
