/* Files that appear whole or not at all, and leave nothing behind when the
 * writer dies.
 *
 * A file is written into an anonymous inode (O_TMPFILE) in the target's
 * directory, synced, then given a unique temporary name and renamed over
 * the target: the target is never torn, and a writer killed while writing
 * (the long part) leaves no file at all, because an anonymous inode has no
 * name to leave. Where the filesystem has no O_TMPFILE, the file is written
 * under "<path>.tmp.<pid>" instead; such names, and the one the O_TMPFILE
 * path holds for the microseconds between link and rename, are removed by
 * the next write of the same path once their process is gone
 * (pl_atomic_file_sweep).
 *
 *   pl_atomic_file f;
 *   int err = pl_atomic_file_open(&f, "model.safetensors");
 *   if (!err) err = write_all(f.fd, ...) ? 0 : errno;
 *   err = err ? (pl_atomic_file_discard(&f), err) : pl_atomic_file_commit(&f);
 *
 * Functions return 0 or an errno value; the caller words the message (this
 * layer sits below the error reporting). */
#ifndef PL_UTIL_ATOMIC_FILE_H
#define PL_UTIL_ATOMIC_FILE_H

#include <stdio.h>

typedef struct pl_atomic_file {
    int fd;          /* write the contents here (or through stream) */
    FILE *stream;    /* pl_atomic_file_stream's FILE over fd, or NULL */
    char *path;      /* the target */
    char *tmp;       /* the named temporary ("<path>.tmp.<pid>"), or NULL
                        while the file is anonymous */
} pl_atomic_file;

/* Removes "<path>.tmp.<pid>" files whose process no longer exists (left by
 * a writer that was killed); returns how many were removed. */
int pl_atomic_file_sweep(const char *path);

/* Sweeps, then opens a new file that will become `path` on commit. On
 * failure *f is cleared and nothing exists on disk. */
int pl_atomic_file_open(pl_atomic_file *f, const char *path);

/* A stdio stream over f->fd (owned by f: do not fclose it). NULL on
 * failure, with errno set. */
FILE *pl_atomic_file_stream(pl_atomic_file *f);

/* Flushes the stream, if any, syncs the file and puts it at its path
 * (replacing what was there), then syncs the directory. Always releases f;
 * on failure the target is as it was and no temporary remains. */
int pl_atomic_file_commit(pl_atomic_file *f);

/* Abandons the file: nothing is left on disk. Releases f. */
void pl_atomic_file_discard(pl_atomic_file *f);

#endif
