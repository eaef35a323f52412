/* Checkpoint directories on disk: the marker, safe removal, the
 * "step-<N>" folders of a checkpoint root (see checkpoint_dir.h). */
#define _GNU_SOURCE /* O_NOFOLLOW, O_DIRECTORY, fdopendir, openat */

#include "checkpoint/checkpoint_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/error.h"
#include "util/regular_file.h"

#define STATE_FORMAT "pleiades-checkpoint"

pl_status pl_ckpt_mark(const char *dir) {
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, PL_CKPT_MARKER) >= sizeof path)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "checkpoint path too long: %s", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0)
        return pl_fail(PL_STATUS_IO_ERROR, "%s: cannot create: %s", path, strerror(errno));
    static const char text[] = STATE_FORMAT " (written by Pleiades; its presence lets Pleiades "
                                            "remove this directory when pruning)\n";
    ssize_t n = write(fd, text, sizeof text - 1);
    int err = n == (ssize_t)(sizeof text - 1) ? 0 : n < 0 ? errno : ENOSPC;
    if (close(fd) != 0 && !err) err = errno;
    if (err) return pl_fail(PL_STATUS_IO_ERROR, "%s: cannot write: %s", path, strerror(err));
    return PL_STATUS_OK;
}

/* A checkpoint written before the marker: a regular state.json (not
 * followed through a link) whose "format" is Pleiades'. */
static bool legacy_state(int dfd) {
    int fd = pl_open_regular_at(dfd, "state.json", O_NOFOLLOW, NULL);
    if (fd < 0) return false;
    struct stat sb;
    bool ours = false;
    if (fstat(fd, &sb) == 0 && sb.st_size < (1 << 20)) {
        json_t *root = json_loadfd(fd, 0, NULL);
        const char *format = json_string_value(json_object_get(root, "format"));
        ours = format && !strcmp(format, STATE_FORMAT);
        json_decref(root);
    }
    close(fd);
    return ours;
}

static bool has_marker(int dfd) {
    struct stat sb;
    if (fstatat(dfd, PL_CKPT_MARKER, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode))
        return true;
    return legacy_state(dfd);
}

/* Opens `path` as a directory without following a final symbolic link:
 * the descriptor, or -1 with *why saying what it is instead (NULL when it
 * does not exist). */
static int open_real_dir(const char *path, const char **why) {
    *why = NULL;
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) return fd;
    int err = errno;
    struct stat sb;
    if (lstat(path, &sb) != 0)
        *why = errno == ENOENT ? NULL : "not readable";
    else if (S_ISLNK(sb.st_mode))
        *why = "a symbolic link";
    else if (!S_ISDIR(sb.st_mode))
        *why = "not a directory";
    else
        *why = err == EACCES ? "a directory Pleiades may not read" : "a directory it cannot open";
    return -1;
}

const char *pl_ckpt_foreign(const char *path, bool *exists) {
    const char *why;
    int fd = open_real_dir(path, &why);
    *exists = fd >= 0 || why != NULL;
    if (fd < 0) return why;
    bool ours = has_marker(fd);
    close(fd);
    return ours ? NULL : "a directory without Pleiades' marker file " PL_CKPT_MARKER;
}

/* Unlinks every entry of directory dfd but subdirectories (left, counted)
 * and the two files that make it ours, which go last: a removal cut short
 * leaves a directory that is still recognisably ours. */
static int empty_ours(int dfd) {
    int left = 0;
    int dup_fd = dup(dfd);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d) {
        if (dup_fd >= 0) close(dup_fd);
        return 1;
    }
    struct dirent *ent;
    while ((ent = readdir(d))) {
        const char *n = ent->d_name;
        if (!strcmp(n, ".") || !strcmp(n, "..") || !strcmp(n, PL_CKPT_MARKER) ||
            !strcmp(n, "state.json"))
            continue;
        struct stat sb;
        /* A link inside is removed as a link: its target is not touched. */
        if (fstatat(dfd, n, &sb, AT_SYMLINK_NOFOLLOW) != 0 || S_ISDIR(sb.st_mode) ||
            unlinkat(dfd, n, 0) != 0)
            left++;
    }
    closedir(d);
    unlinkat(dfd, "state.json", 0);
    unlinkat(dfd, PL_CKPT_MARKER, 0);
    return left;
}

bool pl_ckpt_remove(const char *path) {
    const char *why;
    int fd = open_real_dir(path, &why);
    if (fd < 0) {
        if (why) pl_warn("left '%s' alone: it is %s, not a checkpoint Pleiades wrote", path, why);
        return why == NULL;
    }
    if (!has_marker(fd)) {
        close(fd);
        /* An empty directory holds nothing of anyone's (a save killed
         * between its mkdir and its marker leaves one). */
        if (rmdir(path) == 0) return true;
        pl_warn("left '%s' alone: it is a directory without Pleiades' marker file %s, not a "
                "checkpoint Pleiades wrote", path, PL_CKPT_MARKER);
        return false;
    }
    int left = empty_ours(fd);
    close(fd);
    if (rmdir(path) == 0) return true;
    pl_warn("could not remove checkpoint '%s' entirely: %s%s", path, strerror(errno),
            left ? " (it holds directories Pleiades did not write; they were left alone)" : "");
    return false;
}

void pl_ckpt_sweep_temporaries(const char *parent, const char *name) {
    DIR *d = opendir(parent);
    if (!d) return;
    struct dirent *ent;
    while ((ent = readdir(d))) {
        const char *t = strstr(ent->d_name, ".tmp.");
        if (!t) continue;
        size_t stem = (size_t)(t - ent->d_name);
        if (stem >= 4 && !strncmp(t - 4, ".old", 4)) stem -= 4;
        bool named = (stem == strlen(name) && !strncmp(ent->d_name, name, stem)) ||
                     !strncmp(ent->d_name, PL_CKPT_STEP_PREFIX, strlen(PL_CKPT_STEP_PREFIX));
        char *end;
        long pid = strtol(t + 5, &end, 10);
        if (!named || *end || pid <= 0) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* still running */
        char path[PATH_MAX];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", parent, ent->d_name) < sizeof path)
            pl_ckpt_remove(path);
    }
    closedir(d);
}

/* -------------------------------------------------- step-<N> folders */

/* N of "step-<N>", or -1 for any other name. */
static int64_t step_of(const char *name) {
    if (strncmp(name, PL_CKPT_STEP_PREFIX, strlen(PL_CKPT_STEP_PREFIX))) return -1;
    const char *digits = name + strlen(PL_CKPT_STEP_PREFIX);
    if (!*digits || strlen(digits) > 15) return -1;
    for (const char *c = digits; *c; c++)
        if (*c < '0' || *c > '9') return -1;
    return strtoll(digits, NULL, 10);
}

static int by_step(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The N of root's "step-<N>" entries, ascending (caller frees); with
 * ours_only, only the directories Pleiades wrote, the others named in a
 * warning. */
static pl_status list_steps(const char *root, bool ours_only, int64_t **steps, int *n) {
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(root);
    if (!d)
        return pl_fail(PL_STATUS_IO_ERROR, "%s: cannot open the checkpoint directory: %s",
                       root, strerror(errno));
    int cap = 0;
    struct dirent *ent;
    pl_status st = PL_STATUS_OK;
    while (!st && (ent = readdir(d))) {
        int64_t s = step_of(ent->d_name);
        if (s < 0) continue;
        if (ours_only) {
            char path[PATH_MAX];
            bool exists;
            const char *why = (size_t)snprintf(path, sizeof path, "%s/%s", root,
                                               ent->d_name) < sizeof path
                                  ? pl_ckpt_foreign(path, &exists)
                                  : "a path too long";
            if (why) {
                pl_warn("left '%s' alone: it is %s, not a checkpoint Pleiades wrote", path,
                        why);
                continue;
            }
        }
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *grown = realloc(*steps, (size_t)cap * sizeof *grown);
            if (!grown) st = pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory");
            else *steps = grown;
        }
        if (!st) (*steps)[(*n)++] = s;
    }
    closedir(d);
    if (*n > 1) qsort(*steps, (size_t)*n, sizeof **steps, by_step);
    return st;
}

pl_status pl_checkpoint_steps(const char *root, int64_t **steps, int *n) {
    if (!root || !steps || !n)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_checkpoint_steps: %s is NULL",
                       !root ? "root" : !steps ? "steps" : "n");
    return list_steps(root, false, steps, n);
}

pl_status pl_checkpoint_latest(const char *root, char *path, size_t size) {
    if (!root || !path || !size)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_checkpoint_latest: bad arguments");
    int64_t *steps;
    int n;
    pl_status st = list_steps(root, false, &steps, &n);
    if (!st && n == 0)
        st = pl_fail(PL_STATUS_IO_ERROR, "%s: no checkpoint (no %s<N> directory) in it", root,
                     PL_CKPT_STEP_PREFIX);
    if (!st && (size_t)snprintf(path, size, "%s/" PL_CKPT_STEP_PREFIX "%" PRId64, root,
                                steps[n - 1]) >= size)
        st = pl_fail(PL_STATUS_INVALID_ARGUMENT, "checkpoint path too long: %s", root);
    free(steps);
    return st;
}

bool pl_ckpt_has_state(const char *path) {
    char state[PATH_MAX];
    struct stat sb;
    /* lstat, not access(): access follows the link and fails on a loop. */
    return (size_t)snprintf(state, sizeof state, "%s/state.json", path) < sizeof state &&
           lstat(state, &sb) == 0;
}

pl_status pl_checkpoint_find(const char *path, char *out, size_t size) {
    if (!path || !out || size == 0)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_checkpoint_find: %s",
                       !path ? "path is NULL" : "no room for the result");
    char state[PATH_MAX];
    if ((size_t)snprintf(state, sizeof state, "%s/state.json", path) >= sizeof state)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "checkpoint path too long: %s", path);
    if (!pl_ckpt_has_state(path)) return pl_checkpoint_latest(path, out, size);
    if ((size_t)snprintf(out, size, "%s", path) >= size)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "checkpoint path too long: %s", path);
    return PL_STATUS_OK;
}

pl_status pl_checkpoint_prune(const char *root, int keep_last) {
    if (!root || keep_last < 1)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_checkpoint_prune: %s",
                       !root ? "root is NULL" : "keep_last must be >= 1");
    /* Only directories Pleiades wrote count towards keep_last: a user's
     * "step-999" must neither be deleted nor push ours out. */
    int64_t *steps;
    int n;
    pl_status st = list_steps(root, true, &steps, &n);
    for (int i = 0; !st && i + keep_last < n; i++) {
        char path[PATH_MAX];
        if ((size_t)snprintf(path, sizeof path, "%s/" PL_CKPT_STEP_PREFIX "%" PRId64, root,
                             steps[i]) < sizeof path)
            pl_ckpt_remove(path);
    }
    free(steps);
    return st;
}
