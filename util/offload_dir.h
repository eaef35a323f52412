/* The files a run keeps in its offload directory (the disk tier), and
 * removing them however the run ends.
 *
 * A run's files live in a folder of its own in the offload directory,
 * "pleiades-offload-<pid>", holding an "owner" file (pid, process start
 * time, boot id and host: enough to tell whether that process still runs)
 * and the data files "<n>.offload", each preallocated in full when created
 * (posix_fallocate), so that writing into it later cannot run out of
 * space: a full disk is met when a file is created, where it can be
 * reported, never in the middle of StarPU's asynchronous writes.
 *
 *   - a run that ends normally removes its folder (pl_offload_run_close);
 *   - a run that ends any other way (SIGINT, SIGTERM, an abort, kill -9):
 *     a small process forked when the run opens (the janitor) waits on a
 *     pipe whose only writer is the run's process, and removes the folder
 *     when that pipe closes, i.e. the moment the run's process is gone.
 *     Removing the files from a signal handler instead would pull them
 *     from under StarPU's threads, still running until the process ends
 *     (StarPU asserts when a file it reopens is missing);
 *   - should the janitor itself be killed (kill -9 of the whole process
 *     group), the next run that uses the directory removes the folders of
 *     runs whose process is gone (pl_offload_run_open sweeps).
 * Nothing else is ever deleted: only a real directory (never a symlink)
 * named like ours whose owner file is ours and names a dead process on
 * this host, and in it only regular files named like ours. Anything else
 * in the offload directory is left alone.
 *
 * One run at a time per process (one runtime). Functions return 0 or an
 * errno value; the caller words the message (this layer sits below the
 * error reporting). */
#ifndef PL_UTIL_OFFLOAD_DIR_H
#define PL_UTIL_OFFLOAD_DIR_H

#include <stddef.h>
#include <stdint.h>

#define PL_OFFLOAD_RUN_PREFIX "pleiades-offload-"

typedef struct pl_offload_run pl_offload_run;

/* Sweeps `dir` (see above), then makes this process's run folder in it.
 * *removed (may be NULL) gets how many folders of dead runs were removed. */
int pl_offload_run_open(const char *dir, pl_offload_run **out, int *removed);

/* Removes the run's files and folder and frees it (NULL: nothing). */
void pl_offload_run_close(pl_offload_run *run);

/* A new data file of `size` bytes, allocated on disk in full. Its path
 * relative to the offload directory goes into rel[0..cap), its number into
 * *id. ENOSPC (or EDQUOT) when the filesystem cannot hold it. */
int pl_offload_file_create(pl_offload_run *run, size_t size, char *rel, size_t cap,
                           int *id);

/* Allocates file `id` on disk up to `size` bytes (for a file that grows). */
int pl_offload_file_reserve(pl_offload_run *run, int id, size_t size);

/* Removes data file `id`. */
void pl_offload_file_remove(pl_offload_run *run, int id);

/* Bytes held by the run's data files now. */
int64_t pl_offload_run_bytes(const pl_offload_run *run);

/* The offload directory's path, as given. */
const char *pl_offload_run_dir(const pl_offload_run *run);


#endif
