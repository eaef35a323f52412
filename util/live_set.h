/* The live handles of one kind (engines, graphs): a free of a handle that
 * is not in its set (freed twice, or never made) is detected by its
 * address alone, without reading the memory it points to, which may have
 * been freed and reused. A handle freed and then made again at the same
 * address is live again: that cannot be told apart, and is not needed. */
#ifndef PL_UTIL_LIVE_SET_H
#define PL_UTIL_LIVE_SET_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct pl_live_set {
    pthread_mutex_t lock;
    const void **p;
    int n, cap;
} pl_live_set;

#define PL_LIVE_SET_INIT {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0}

/* Adds p; false when out of memory. */
bool pl_live_add(pl_live_set *s, const void *p);
/* Removes p; false when p was not in the set. */
bool pl_live_remove(pl_live_set *s, const void *p);
/* Whether p is in the set. */
bool pl_live_has(pl_live_set *s, const void *p);

/* A free the library refuses (the handle is not live, or others still
 * depend on it): the message goes to stderr, as the free functions return
 * nothing, and is also the thread's last error (INVALID_ARGUMENT). */
void pl_refuse_free(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Overwrites a handle about to be freed with a pattern in debug builds
 * (NDEBUG unset), so that a use after its free reads garbage pointers and
 * fails at once instead of working on by chance; a no-op otherwise. */
void pl_poison(void *p, size_t size);

#endif
