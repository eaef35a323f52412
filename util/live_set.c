/* Live handle sets (util/live_set.h): a short array under a lock. Handles
 * are few (a runtime's engines, a program's graphs), and these calls run
 * once per handle, so a linear search costs nothing. */
#include "util/live_set.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

bool pl_live_add(pl_live_set *s, const void *p) {
    pthread_mutex_lock(&s->lock);
    bool ok = true;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        const void **q = realloc(s->p, (size_t)cap * sizeof *q);
        if (q) s->p = q, s->cap = cap;
        else ok = false;
    }
    if (ok) s->p[s->n++] = p;
    pthread_mutex_unlock(&s->lock);
    return ok;
}

bool pl_live_remove(pl_live_set *s, const void *p) {
    pthread_mutex_lock(&s->lock);
    bool found = false;
    for (int i = s->n - 1; i >= 0 && !found; i--)
        if (s->p[i] == p) {
            s->p[i] = s->p[--s->n];
            found = true;
        }
    if (s->n == 0) { /* none left: nothing held at exit */
        free(s->p);
        s->p = NULL;
        s->cap = 0;
    }
    pthread_mutex_unlock(&s->lock);
    return found;
}

bool pl_live_has(pl_live_set *s, const void *p) {
    pthread_mutex_lock(&s->lock);
    bool found = false;
    for (int i = 0; i < s->n && !found; i++) found = s->p[i] == p;
    pthread_mutex_unlock(&s->lock);
    return found;
}

void pl_refuse_free(const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "pleiades: %s\n", msg);
    pl_fail(PL_STATUS_INVALID_ARGUMENT, "%s", msg);
}

void pl_poison(void *p, size_t size) {
#ifndef NDEBUG
    memset(p, 0xA5, size);
#else
    (void)p;
    (void)size;
#endif
}
