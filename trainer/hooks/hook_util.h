/* What the built-in hooks share. */
#ifndef PL_TRAINER_HOOK_UTIL_H
#define PL_TRAINER_HOOK_UTIL_H

#include <stddef.h>
#include <stdio.h>

/* Zeroed user data for hook `name`; NULL with an OUT_OF_MEMORY naming it
 * (the constructor then returns a hook with a NULL name). */
void *pl_hook_alloc(size_t size, const char *name);

/* Monotonic seconds. */
double pl_hook_now(void);

/* Writes a line to `out` and flushes it (progress must show up when the
 * output is piped, e.g. into tee); nothing when `out` is NULL. */
void pl_hook_print(FILE *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
