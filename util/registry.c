/* Registries of named entries (see registry.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "util/registry.h"

/* Both helpers below run with r->lock held. */
static const void *entry_at(const pl_registry *r, int i) {
    if (i < 0) return NULL;
    if (i < r->n_builtins) return r->builtin(i);
    return i - r->n_builtins < r->n_added ? r->added[i - r->n_builtins] : NULL;
}

static const void *find_locked(const pl_registry *r, const char *name, int *index) {
    for (int i = 0; i < r->n_builtins + r->n_added; i++) {
        const void *e = entry_at(r, i);
        if (strcmp(r->name(e), name) == 0) {
            if (index) *index = i;
            return e;
        }
    }
    return NULL;
}

pl_status pl_registry_add(pl_registry *r, const void *entry) {
    if (!entry)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "%s_register: the %s is NULL", r->api,
                       r->kind);
    const char *name = r->name(entry);
    if (!name || !*name)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "%s_register: a %s needs a name (its name is %s): the CLI and "
                       "%s_find look it up by it", r->api, r->kind, name ? "empty" : "NULL",
                       r->api);
    pthread_mutex_lock(&r->lock);
    pl_status st = PL_STATUS_OK;
    int at = -1;
    if (find_locked(r, name, &at)) {
        st = pl_fail(PL_STATUS_INVALID_ARGUMENT,
                     "%s_register: a %s named '%s' is already registered (%s); names "
                     "are unique", r->api, r->kind, name,
                     at < r->n_builtins ? "a built-in" : "registered before");
    } else if (r->n_added == r->cap_added) {
        int cap = r->cap_added ? 2 * r->cap_added : 8;
        const void **grown = realloc(r->added, (size_t)cap * sizeof *grown);
        if (!grown)
            st = pl_fail(PL_STATUS_OUT_OF_MEMORY, "%s_register: out of memory", r->api);
        else
            r->added = grown, r->cap_added = cap;
    }
    if (!st) r->added[r->n_added++] = entry;
    pthread_mutex_unlock(&r->lock);
    return st;
}

const void *pl_registry_find(pl_registry *r, const char *name) {
    if (!name) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "%s_find: name is NULL", r->api);
        return NULL;
    }
    pthread_mutex_lock(&r->lock);
    const void *e = find_locked(r, name, NULL);
    if (!e) {
        /* The names a caller could have meant: the message is what a
         * user reads when a name is mistyped. */
        char names[512] = "";
        size_t used = 0;
        for (int i = 0; i < r->n_builtins + r->n_added && used < sizeof names; i++) {
            int w = snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "",
                             r->name(entry_at(r, i)));
            if (w < 0) break;
            used += (size_t)w;
        }
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "%s_find: no %s named '%s' (registered: %s)",
                r->api, r->kind, name, names);
    }
    pthread_mutex_unlock(&r->lock);
    return e;
}

int pl_registry_count(pl_registry *r) {
    pthread_mutex_lock(&r->lock);
    int n = r->n_builtins + r->n_added;
    pthread_mutex_unlock(&r->lock);
    return n;
}

const void *pl_registry_at(pl_registry *r, int index) {
    pthread_mutex_lock(&r->lock);
    const void *e = entry_at(r, index);
    pthread_mutex_unlock(&r->lock);
    return e;
}
