/* Atomic, litter-free file replacement (see atomic_file.h for why). */
#define _GNU_SOURCE /* O_TMPFILE, linkat */
#include "util/atomic_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The directory part of path ("." when it has none), malloc'd. */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

static const char *base_of(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* The pid in "<base>.tmp.<pid>" or "<base>.tmp.<pid>.<seq>", or -1 when
 * `name` is not a temporary of `base`. */
static long temp_pid(const char *name, const char *base) {
    size_t n = strlen(base);
    if (strncmp(name, base, n) != 0 || strncmp(name + n, ".tmp.", 5) != 0) return -1;
    const char *p = name + n + 5;
    char *end;
    errno = 0;
    long pid = strtol(p, &end, 10);
    if (end == p || errno || pid <= 0 || *p < '0' || *p > '9') return -1;
    if (*end == '.') {
        const char *q = end + 1;
        if (*q < '0' || *q > '9') return -1;
        strtol(q, &end, 10);
    }
    return *end ? -1 : pid;
}

int pl_atomic_file_sweep(const char *path) {
    char *dir = dir_of(path);
    DIR *d = dir ? opendir(dir) : NULL;
    free(dir);
    if (!d) return 0;
    const char *base = base_of(path);
    int removed = 0;
    for (struct dirent *ent; (ent = readdir(d));) {
        long pid = temp_pid(ent->d_name, base);
        /* ESRCH: no such process. EPERM means alive (another user's). */
        if (pid < 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 ||
            errno != ESRCH)
            continue;
        if (unlinkat(dirfd(d), ent->d_name, 0) == 0) removed++;
    }
    closedir(d);
    return removed;
}

static void sync_dir(const char *path) {
    char *dir = dir_of(path);
    int fd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

/* A fresh "<path>.tmp.<pid>.<seq>" (seq: saves of one path from several
 * threads of this process never collide). */
static char *temp_name(const char *path) {
    static atomic_uint seq;
    unsigned s = atomic_fetch_add(&seq, 1);
    int len = snprintf(NULL, 0, "%s.tmp.%ld.%u", path, (long)getpid(), s);
    char *tmp = len < 0 ? NULL : malloc((size_t)len + 1);
    if (tmp) snprintf(tmp, (size_t)len + 1, "%s.tmp.%ld.%u", path, (long)getpid(), s);
    return tmp;
}

static void release(pl_atomic_file *f) {
    if (f->stream)
        fclose(f->stream); /* closes fd too */
    else if (f->fd >= 0)
        close(f->fd);
    free(f->path);
    free(f->tmp);
    *f = (pl_atomic_file){.fd = -1};
}

int pl_atomic_file_open(pl_atomic_file *f, const char *path) {
    *f = (pl_atomic_file){.fd = -1};
    if (!path || !*path) return EINVAL;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return EISDIR;
    pl_atomic_file_sweep(path);
    f->path = strdup(path);
    if (!f->path) return ENOMEM;
    /* Naming an anonymous file later needs /proc/self/fd (linkat with
     * AT_EMPTY_PATH would need CAP_DAC_READ_SEARCH). */
    if (access("/proc/self/fd", X_OK) == 0) {
        char *dir = dir_of(path);
        if (!dir) {
            release(f);
            return ENOMEM;
        }
        f->fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
        int err = errno;
        free(dir);
        if (f->fd >= 0) return 0;
        /* Not supported here (filesystem or kernel): use a named file. Any
         * other error (no such directory, no permission) is the answer. */
        if (err != EOPNOTSUPP && err != EISDIR && err != EINVAL) {
            release(f);
            return err;
        }
    }
    f->tmp = temp_name(path);
    if (!f->tmp) {
        release(f);
        return ENOMEM;
    }
    f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (f->fd < 0) {
        int err = errno;
        release(f);
        return err;
    }
    return 0;
}

FILE *pl_atomic_file_stream(pl_atomic_file *f) {
    if (!f->stream) f->stream = fdopen(f->fd, "w");
    return f->stream;
}

int pl_atomic_file_commit(pl_atomic_file *f) {
    int err = 0;
    /* fprintf's errors are sticky in the stream: one check here catches a
     * full disk anywhere in the file. */
    if (f->stream && (fflush(f->stream) != 0 || ferror(f->stream))) err = errno ? errno : EIO;
    if (!err && fsync(f->fd) != 0) err = errno;
    if (!err && !f->tmp) {
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", f->fd);
        f->tmp = temp_name(f->path);
        if (!f->tmp)
            err = ENOMEM;
        else if (linkat(AT_FDCWD, proc, AT_FDCWD, f->tmp, AT_SYMLINK_FOLLOW) != 0) {
            err = errno;
            free(f->tmp);
            f->tmp = NULL;
        }
    }
    /* Close before the rename: on NFS, close reports write errors. */
    int fd_close = f->stream ? fclose(f->stream) : close(f->fd);
    f->stream = NULL;
    f->fd = -1;
    if (!err && fd_close != 0) err = errno;
    if (!err && rename(f->tmp, f->path) != 0) err = errno;
    if (err && f->tmp)
        unlink(f->tmp);
    else if (!err)
        sync_dir(f->path);
    release(f);
    return err;
}

void pl_atomic_file_discard(pl_atomic_file *f) {
    if (f->tmp) unlink(f->tmp);
    release(f);
}
