/* Opening a file to read it, refusing what is not a regular file without
 * hanging on it.
 *
 * open(2) of a FIFO for reading blocks until a writer appears, that is
 * forever when none will; a device may block, or never end. Every reader
 * of user-named files (data sets, checkpoints, state.json, traces,
 * metrics) opens through here: O_NONBLOCK for the open itself, then
 * fstat on the descriptor (no race with a rename in between), and
 * blocking mode restored for the reads.
 *
 * This layer sits below the error reporting: the caller words the message
 * with the reason given. */
#ifndef PL_UTIL_REGULAR_FILE_H
#define PL_UTIL_REGULAR_FILE_H

/* Opens `path` read-only (O_CLOEXEC, plus `flags`, e.g. O_NOFOLLOW) when
 * it is a regular file: the descriptor, in blocking mode. Otherwise -1,
 * with *why (when not NULL) set to what is wrong, for a message such as
 * "PATH: cannot open: WHY" — open's error ("No such file or directory")
 * or the kind of file ("a FIFO, not a regular file") — and errno to
 * open's error, EISDIR for a directory, or EINVAL for another kind of
 * file. */
int pl_open_regular(const char *path, int flags, const char **why);

/* The same, `path` relative to directory descriptor `dir_fd` (openat;
 * AT_FDCWD: as pl_open_regular). */
int pl_open_regular_at(int dir_fd, const char *path, int flags, const char **why);

#endif
