/* The disk tier: StarPU's unistd disk driver, with Pleiades' own files.
 *
 * StarPU's unistd driver creates each object as a sparse file (ftruncate)
 * under random names in random subfolders of the offload directory, and
 * writes into it with asynchronous I/O whose errors abort the process: a
 * disk that fills while training ends in "aio_error returned 28" and exit
 * 134, and a killed run's files cannot be told from anyone else's.
 *
 * This driver is unistd's, but for where objects come from: each is a
 * file of this run's folder (util/offload_dir), allocated on disk in full
 * when created (posix_fallocate) and then opened by unistd's `open`, so
 * every later write lands in blocks that already exist and cannot fail for
 * space; unistd's own I/O (asynchronous reads and writes, their
 * completion) is used unchanged. A full disk is met only when an object is
 * created: there the run ends with a message naming the directory and the
 * bytes (exit 1) rather than StarPU retrying the allocation forever or
 * aborting; the run's janitor (util/offload_dir) then removes its offload
 * files. Checkpoints written before are complete (they are renamed into
 * place whole).
 *
 * Disk-to-disk copies are left out (one disk tier: never needed). */
#include "engine/offload.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/offload_dir.h"

/* The run of the disk tier in use (one runtime, hence one, at a time). */
static pl_offload_run *run;
/* While starpu_disk_register measures the disk (an allocation of its
 * own): a failure is returned to it, which then fails the registration,
 * rather than ending the process; the error is kept here. */
static bool registering;
static int register_err;

/* Which file each object StarPU holds is: unistd's object pointer -> the
 * file's id and size, a chained hash table under a mutex (objects come and
 * go from StarPU's worker threads). */
typedef struct object {
    void *obj;
    int id;
    size_t size;
    struct object *next;
} object;

#define BUCKETS 4096
static object *buckets[BUCKETS];
static pthread_mutex_t objects_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t bucket_of(const void *obj) {
    uintptr_t p = (uintptr_t)obj;
    return (size_t)((p >> 4) ^ (p >> 16)) % BUCKETS;
}

/* Ends the process after a disk-tier failure StarPU cannot be told of
 * (its allocation and write paths have no way to fail a task). _exit, not
 * exit: StarPU's threads keep running, and exit's teardown under them
 * could crash; the janitor removes the files once the process is gone. */
static void offload_fatal(const char *what, size_t bytes, int err) {
    const char *dir = pl_offload_run_dir(run);
    fprintf(stderr,
            "pleiades: offload directory '%s': cannot %s %zu bytes: %s (this run's disk tier "
            "held %lld bytes there); the run ends here and its offload files are removed "
            "(checkpoints already written are complete)\n",
            dir ? dir : "?", what, bytes, strerror(err), (long long)pl_offload_run_bytes(run));
    fflush(NULL);
    _exit(1);
}

static void *plug(void *parameter, starpu_ssize_t size) {
    return starpu_disk_unistd_ops.plug(parameter, size);
}

static void unplug(void *base) {
    starpu_disk_unistd_ops.unplug(base);
    pl_offload_run_close(run);
    run = NULL;
    /* StarPU frees its objects before unplugging: whatever is left in the
     * table is only bookkeeping. */
    pthread_mutex_lock(&objects_lock);
    for (size_t b = 0; b < BUCKETS; b++)
        while (buckets[b]) {
            object *o = buckets[b];
            buckets[b] = o->next;
            free(o);
        }
    pthread_mutex_unlock(&objects_lock);
}

static void *alloc(void *base, size_t size) {
    char rel[128];
    int id;
    int err = pl_offload_file_create(run, size, rel, sizeof rel, &id);
    if (err && registering) {
        register_err = err;
        return NULL;
    }
    if (err) offload_fatal("allocate", size, err);
    /* unistd's `open` of an existing file: O_RDWR, no truncation. */
    void *obj = starpu_disk_unistd_ops.open(base, rel, size);
    object *o = obj ? malloc(sizeof *o) : NULL;
    if (!o) {
        err = errno ? errno : ENOMEM;
        if (obj) starpu_disk_unistd_ops.close(base, obj, size);
        pl_offload_file_remove(run, id);
        offload_fatal("open a file of", size, err);
    }
    *o = (object){obj, id, size, NULL};
    pthread_mutex_lock(&objects_lock);
    size_t b = bucket_of(obj);
    o->next = buckets[b];
    buckets[b] = o;
    pthread_mutex_unlock(&objects_lock);
    return obj;
}

/* The entry of `obj`, unlinked from the table when `take`. */
static object *find(void *obj, bool take) {
    pthread_mutex_lock(&objects_lock);
    object **at = &buckets[bucket_of(obj)];
    while (*at && (*at)->obj != obj) at = &(*at)->next;
    object *o = *at;
    if (o && take) *at = o->next;
    pthread_mutex_unlock(&objects_lock);
    return o;
}

static void free_object(void *base, void *obj, size_t size) {
    object *o = find(obj, true);
    /* unistd's `close` keeps the file (its `free` would also try to remove
     * the folders above it, which here are ours and the user's). */
    starpu_disk_unistd_ops.close(base, obj, size);
    if (o) pl_offload_file_remove(run, o->id);
    free(o);
}

/* A full write sets the object's size: more blocks first, if it grows. */
static void reserve(void *obj, size_t size) {
    object *o = find(obj, false);
    if (!o || size <= o->size) return;
    int err = pl_offload_file_reserve(run, o->id, size);
    if (err) offload_fatal("allocate", size - o->size, err);
    o->size = size;
}

static int full_write(void *base, void *obj, void *ptr, size_t size) {
    reserve(obj, size);
    return starpu_disk_unistd_ops.full_write(base, obj, ptr, size);
}

static void *async_full_write(void *base, void *obj, void *ptr, size_t size) {
    reserve(obj, size);
    return starpu_disk_unistd_ops.async_full_write
               ? starpu_disk_unistd_ops.async_full_write(base, obj, ptr, size)
               : NULL;
}

static struct starpu_disk_ops ops;

int pl_offload_open(const char *dir, int *removed) {
    if (run) return EBUSY;
    return pl_offload_run_open(dir, &run, removed);
}

void pl_offload_abandon(void) {
    pl_offload_run_close(run);
    run = NULL;
}

int pl_offload_register(starpu_ssize_t size, int *err) {
    ops = starpu_disk_unistd_ops;
    ops.plug = plug;
    ops.unplug = unplug;
    ops.alloc = alloc;
    ops.free = free_object;
    ops.full_write = full_write;
    ops.async_full_write = async_full_write;
    ops.copy = NULL;
    registering = true;
    register_err = 0;
    int node = starpu_disk_register(&ops, (void *)pl_offload_run_dir(run), size);
    registering = false;
    /* On failure StarPU keeps the disk in its list and unplugs it at
     * shutdown, which closes the run. */
    if (node < 0) *err = register_err ? register_err : EIO;
    return node;
}

int64_t pl_offload_bytes(void) { return pl_offload_run_bytes(run); }

const char *pl_offload_dir(void) { return pl_offload_run_dir(run); }
