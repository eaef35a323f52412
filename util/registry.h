/* Named entries the library looks up by name: the registries of pipeline
 * schedules (scheduling/schedule_registry.c) and placement policies
 * (memory/placement_registry.c) are both one of these. Built-ins come
 * from a fixed table of the registry's file (so that a built-in is its
 * own file plus one line there), then come the entries users add at run
 * time, in order. Names are unique across both.
 *
 * Entries are pointers the registry keeps (never copies): their owners
 * make them static. Adding, finding and listing take the registry's lock,
 * so engines created on several threads may look names up while a user
 * registers one. The bottom layer: no Pleiades includes but the public
 * API. */
#ifndef PL_UTIL_REGISTRY_H
#define PL_UTIL_REGISTRY_H

#include <pthread.h>
#include <stddef.h>

#include "pleiades.h"

typedef struct pl_registry {
    const char *api;  /* "pl_schedule": messages say pl_schedule_register … */
    const char *kind; /* "schedule": what an entry is, for messages */
    int n_builtins;
    const void *(*builtin)(int i);          /* 0 <= i < n_builtins */
    const char *(*name)(const void *entry); /* the entry's name (non-NULL) */
    pthread_mutex_t lock;
    const void **added; /* users' entries, n_added of cap_added */
    int n_added, cap_added;
} pl_registry;

#define PL_REGISTRY_INIT(API, KIND, N_BUILTINS, BUILTIN, NAME)                  \
    {.api = API, .kind = KIND, .n_builtins = N_BUILTINS, .builtin = BUILTIN,    \
     .name = NAME, .lock = PTHREAD_MUTEX_INITIALIZER}

/* Adds `entry` (already checked by the caller for what its kind needs)
 * under name(entry): INVALID_ARGUMENT for a NULL entry, a NULL or empty
 * name or a name taken; OUT_OF_MEMORY if the list cannot grow. Messages
 * start "<api>_register: ". */
pl_status pl_registry_add(pl_registry *r, const void *entry);
/* The entry named `name`, or NULL with INVALID_ARGUMENT ("<api>_find: no
 * <kind> named 'x' (registered: a, b, c)"). */
const void *pl_registry_find(pl_registry *r, const char *name);
int pl_registry_count(pl_registry *r);
/* Built-ins first, then users' entries; NULL outside [0, count). */
const void *pl_registry_at(pl_registry *r, int index);

#endif
