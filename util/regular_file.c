/* Opening a file to read it; see regular_file.h. */
#include "util/regular_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The kind of a file that is not a regular one, for messages. */
static const char *kind_of(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory, not a regular file";
    if (S_ISFIFO(mode)) return "a FIFO, not a regular file (reading it would wait for a writer)";
    if (S_ISSOCK(mode)) return "a socket, not a regular file";
    if (S_ISCHR(mode)) return "a character device, not a regular file";
    if (S_ISBLK(mode)) return "a block device, not a regular file";
    return "not a regular file";
}

int pl_open_regular(const char *path, int flags, const char **why) {
    return pl_open_regular_at(AT_FDCWD, path, flags, why);
}

int pl_open_regular_at(int dir_fd, const char *path, int flags, const char **why) {
    const char *unused;
    if (!why) why = &unused;
    *why = NULL;
    /* O_NONBLOCK: opening a FIFO would otherwise block until a writer
     * appears. On a regular file it changes nothing (and is cleared). */
    int fd = openat(dir_fd, path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | flags);
    if (fd < 0) {
        int err = errno;
        struct stat st;
        /* A socket cannot be opened at all (ENXIO): say what it is. */
        if (err == ENXIO && fstatat(dir_fd, path, &st, 0) == 0 && !S_ISREG(st.st_mode)) {
            *why = kind_of(st.st_mode);
            errno = EINVAL;
            return -1;
        }
        /* ELOOP names its cause obscurely ("Too many levels of symbolic
         * links"); without O_NOFOLLOW it is almost always a loop. */
        *why = err == ELOOP && !(flags & O_NOFOLLOW)
                   ? "a symbolic link loop (too many levels of symbolic links)"
                   : strerror(err);
        errno = err;
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        *why = strerror(err);
        errno = err;
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        *why = kind_of(st.st_mode);
        errno = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int err = errno;
        close(fd);
        *why = strerror(err);
        errno = err;
        return -1;
    }
    return fd;
}
