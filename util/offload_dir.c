/* A run's files in its offload directory; see offload_dir.h. */
#define _GNU_SOURCE /* fdopendir, O_DIRECTORY, O_NOFOLLOW */

#include "util/offload_dir.h"
#include "util/regular_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define OWNER "owner"
#define SUFFIX ".offload"

/* Shared with the janitor (a MAP_SHARED page): which files it may find. */
typedef struct shared_count {
    atomic_int next;    /* data files created so far: ids 0..next-1 */
    atomic_int created; /* the run folder exists (made by this run) */
} shared_count;

struct pl_offload_run {
    int dir_fd;           /* the offload directory */
    int run_fd;           /* this run's folder in it */
    char name[64];        /* that folder's name */
    char *dir;            /* the offload directory's path */
    shared_count *count;  /* in shared memory */
    atomic_llong bytes;   /* held by the data files now */
    pid_t janitor;        /* -1: none (fork failed) */
    int janitor_pipe;     /* the write end; -1: none */
};

/* The open run: one per process (one runtime at a time). */
static _Atomic(pl_offload_run *) current;

static void start_janitor(pl_offload_run *run);
static void stop_janitor(pl_offload_run *run);

/* ------------------------------------------------------------ identity */

/* What tells a process apart from a later one with the same pid: its
 * start time (clock ticks after boot, /proc/PID/stat's 22nd field), the
 * boot (a reboot restarts pids) and the host (an offload directory on a
 * shared filesystem may hold another machine's runs, which this one cannot
 * see). Empty strings where /proc says nothing. */
typedef struct identity {
    long pid;
    char start[32], boot[64], host[256];
} identity;

/* Reads up to cap-1 bytes of a small regular file (not through a link). */
static bool read_small(int at, const char *path, char *buf, size_t cap) {
    int fd = pl_open_regular_at(at, path, O_NOFOLLOW, NULL);
    if (fd < 0) return false;
    ssize_t n = read(fd, buf, cap - 1);
    close(fd);
    if (n < 0) return false;
    buf[n] = '\0';
    return true;
}

static void start_time_of(long pid, char *out, size_t cap) {
    char path[64], stat[1024];
    out[0] = '\0';
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    if (!read_small(AT_FDCWD, path, stat, sizeof stat)) return;
    const char *p = strrchr(stat, ')'); /* the command may hold spaces */
    if (!p) return;
    /* After ")": field 3 (the state); the start time is field 22. */
    for (int field = 2; field < 22 && p; field++) p = strchr(p + 1, ' ');
    if (!p) return;
    size_t len = strcspn(p + 1, " \n");
    if (len >= cap) return;
    memcpy(out, p + 1, len);
    out[len] = '\0';
}

static void self_identity(identity *id) {
    memset(id, 0, sizeof *id);
    id->pid = (long)getpid();
    start_time_of(id->pid, id->start, sizeof id->start);
    if (read_small(AT_FDCWD, "/proc/sys/kernel/random/boot_id", id->boot, sizeof id->boot))
        id->boot[strcspn(id->boot, "\n")] = '\0';
    if (gethostname(id->host, sizeof id->host - 1) != 0) id->host[0] = '\0';
}

static int format_identity(const identity *id, char *buf, size_t cap) {
    return snprintf(buf, cap, "pleiades offload run\npid %ld\nstart %s\nboot %s\nhost %s\n",
                    id->pid, id->start, id->boot, id->host);
}

/* Parses an owner file; false when it is not one of ours. */
static bool parse_identity(const char *text, identity *id) {
    memset(id, 0, sizeof *id);
    const char *head = "pleiades offload run\n";
    if (strncmp(text, head, strlen(head))) return false;
    const char *p = text + strlen(head);
    /* %[^\n] fields: empty values are allowed, hence the checks by hand. */
    char start[32] = "", boot[64] = "", host[256] = "";
    if (sscanf(p, "pid %ld\n", &id->pid) != 1 || id->pid <= 0) return false;
    const char *s = strstr(p, "\nstart "), *b = strstr(p, "\nboot "), *h = strstr(p, "\nhost ");
    if (!s || !b || !h) return false;
    sscanf(s + 7, "%31[^\n]", start);
    sscanf(b + 6, "%63[^\n]", boot);
    sscanf(h + 6, "%255[^\n]", host);
    memcpy(id->start, start, sizeof start);
    memcpy(id->boot, boot, sizeof boot);
    memcpy(id->host, host, sizeof host);
    return true;
}

/* Whether the run of `owner` can no longer be running. Only a run of this
 * host is judged (false otherwise): gone if the host rebooted since, if no
 * process has its pid, or if the one that has it started at another time
 * (the pid was reused). */
static bool run_is_dead(const identity *owner, const identity *self) {
    if (strcmp(owner->host, self->host) != 0) return false;
    if (owner->boot[0] && self->boot[0] && strcmp(owner->boot, self->boot) != 0) return true;
    if (kill((pid_t)owner->pid, 0) != 0 && errno == ESRCH) return true;
    if (!owner->start[0]) return false;
    char start[32];
    start_time_of(owner->pid, start, sizeof start);
    return start[0] && strcmp(start, owner->start) != 0;
}

/* ------------------------------------------------------------- names */

/* "<n>.offload" into buf (at least 32 bytes), without stdio: also used
 * from a signal handler. */
static void file_name(int n, char *buf) {
    char digits[16];
    int len = 0;
    unsigned u = (unsigned)n;
    do {
        digits[len++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    for (int i = 0; i < len; i++) buf[i] = digits[len - 1 - i];
    memcpy(buf + len, SUFFIX, sizeof SUFFIX);
}

/* Whether `name` is "<digits>.offload". */
static bool is_data_name(const char *name) {
    size_t digits = strspn(name, "0123456789");
    return digits > 0 && digits <= 10 && strcmp(name + digits, SUFFIX) == 0;
}

/* The pid in "pleiades-offload-<pid>", or -1. */
static long pid_of_run_name(const char *name) {
    size_t len = strlen(PL_OFFLOAD_RUN_PREFIX);
    if (strncmp(name, PL_OFFLOAD_RUN_PREFIX, len)) return -1;
    const char *digits = name + len;
    size_t n = strspn(digits, "0123456789");
    if (n == 0 || n > 9 || digits[n]) return -1;
    return strtol(digits, NULL, 10);
}

/* ------------------------------------------------------------- sweep */

/* Removes the folder `name` in dir_fd if it is a dead run's of this host
 * (see the header): true when it was. */
static bool sweep_one(int dir_fd, const char *name, const identity *self) {
    long pid = pid_of_run_name(name);
    if (pid <= 0) return false;
    struct stat st;
    /* lstat semantics: a symlink is no run folder, and is not followed. */
    if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != geteuid())
        return false;
    int run_fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (run_fd < 0) return false;
    char text[512];
    identity owner;
    /* This process's own pid on this host: an earlier runtime's folder of
     * this process (or of a dead one that had the pid), no longer in use
     * since one run is open at a time. */
    bool dead = read_small(run_fd, OWNER, text, sizeof text) && parse_identity(text, &owner) &&
                owner.pid == pid &&
                (run_is_dead(&owner, self) ||
                 (owner.pid == self->pid && strcmp(owner.host, self->host) == 0));
    if (dead) {
        int fd = dup(run_fd);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d && fd >= 0) close(fd);
        for (struct dirent *e; d && (e = readdir(d));) {
            if (!is_data_name(e->d_name)) continue;
            /* unlinkat never follows a symlink: at worst it removes one
             * that replaced our file, never what it points to. */
            if (fstatat(run_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
                unlinkat(run_fd, e->d_name, 0);
        }
        if (d) closedir(d);
        unlinkat(run_fd, OWNER, 0);
        /* Fails, leaving it, if anything not ours is still inside. */
        dead = unlinkat(dir_fd, name, AT_REMOVEDIR) == 0;
    }
    close(run_fd);
    return dead;
}

static int sweep(int dir_fd, const identity *self) {
    int fd = dup(dir_fd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0) close(fd);
        return 0;
    }
    int removed = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (pid_of_run_name(e->d_name) > 0 && sweep_one(dir_fd, e->d_name, self)) removed++;
    closedir(d);
    return removed;
}

/* --------------------------------------------------------------- run */

int pl_offload_run_open(const char *dir, pl_offload_run **out, int *removed) {
    *out = NULL;
    if (removed) *removed = 0;
    if (atomic_load(&current)) return EBUSY;
    pl_offload_run *run = calloc(1, sizeof *run);
    if (!run || !(run->dir = strdup(dir))) {
        free(run);
        return ENOMEM;
    }
    run->run_fd = -1;
    run->count = mmap(NULL, sizeof *run->count, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (run->count == MAP_FAILED) {
        free(run->dir);
        free(run);
        return ENOMEM;
    }
    atomic_init(&run->count->next, 0);
    atomic_init(&run->count->created, 0);
    run->janitor = -1;
    run->janitor_pipe = -1;
    run->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int err = run->dir_fd < 0 ? errno : 0;
    identity self;
    self_identity(&self);
    if (!err) {
        int n = sweep(run->dir_fd, &self);
        if (removed) *removed = n;
        snprintf(run->name, sizeof run->name, PL_OFFLOAD_RUN_PREFIX "%ld", self.pid);
        start_janitor(run);
        if (mkdirat(run->dir_fd, run->name, 0700) != 0) err = errno;
        else atomic_store(&run->count->created, 1);
    }
    if (!err) {
        run->run_fd = openat(run->dir_fd, run->name,
                             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (run->run_fd < 0) err = errno;
    }
    if (!err) {
        char text[512];
        int len = format_identity(&self, text, sizeof text);
        int fd = openat(run->run_fd, OWNER, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                        0600);
        if (fd < 0 || write(fd, text, (size_t)len) != len) err = errno ? errno : EIO;
        if (fd >= 0) close(fd);
    }
    if (err) {
        if (run->run_fd >= 0) {
            unlinkat(run->run_fd, OWNER, 0);
            close(run->run_fd);
        }
        if (atomic_load(&run->count->created)) unlinkat(run->dir_fd, run->name, AT_REMOVEDIR);
        atomic_store(&run->count->created, 0);
        stop_janitor(run);
        if (run->dir_fd >= 0) close(run->dir_fd);
        munmap(run->count, sizeof *run->count);
        free(run->dir);
        free(run);
        return err;
    }
    atomic_store(&current, run);
    *out = run;
    return 0;
}

/* Removes the run's data files, owner file and folder, using only
 * async-signal-safe calls (the janitor, a child of a possibly
 * multithreaded process, may call nothing else). */
static void remove_files(int dir_fd, int run_fd, const char *name, const shared_count *count) {
    int n = atomic_load(&count->next);
    char file[32];
    for (int i = 0; i < n; i++) {
        file_name(i, file);
        unlinkat(run_fd, file, 0); /* ENOENT for the files already freed */
    }
    unlinkat(run_fd, OWNER, 0);
    unlinkat(dir_fd, name, AT_REMOVEDIR);
}

/* The janitor: waits for the run's process to end (EOF on the pipe, whose
 * write end only that process holds), then removes the run's files, if
 * the run got as far as making its folder. It ignores the signals that
 * end a run (a Ctrl-C reaches the whole process group), and holds no other
 * descriptor (a pipe of a shell pipeline kept open would delay its
 * reader). */
static void janitor(int dir_fd, const char *name, const shared_count *count, int pipe_r,
                    int max_fd) {
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGQUIT, SIG_IGN);
    for (int fd = 0; fd <= max_fd; fd++)
        if (fd != dir_fd && fd != pipe_r) close(fd);
    char byte;
    while (read(pipe_r, &byte, 1) != 0 && errno == EINTR) {
    }
    if (!atomic_load(&count->created)) _exit(0);
    int run_fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (run_fd >= 0) remove_files(dir_fd, run_fd, name, count);
    _exit(0);
}

/* The highest open descriptor (the janitor closes all up to it). */
static int highest_fd(void) {
    int max = 2;
    DIR *d = opendir("/proc/self/fd");
    for (struct dirent *e; d && (e = readdir(d));) {
        int fd = atoi(e->d_name);
        if (fd > max) max = fd;
    }
    if (d) closedir(d);
    else max = 1023;
    return max;
}

/* Starts the janitor, before the run folder exists (a run killed at any
 * moment after is cleaned up); without one (fork failed) the next run's
 * sweep is what removes the files of a killed run. */
static void start_janitor(pl_offload_run *run) {
    int fds[2];
    run->janitor = -1;
    run->janitor_pipe = -1;
    if (pipe2(fds, O_CLOEXEC) != 0) return;
    int max_fd = highest_fd();
    pid_t pid = fork();
    if (pid == 0) janitor(run->dir_fd, run->name, run->count, fds[0], max_fd);
    close(fds[0]);
    if (pid < 0) {
        close(fds[1]);
        return;
    }
    run->janitor = pid;
    run->janitor_pipe = fds[1];
}

/* Ends the janitor (its run is closed, or never made its folder). */
static void stop_janitor(pl_offload_run *run) {
    if (run->janitor_pipe >= 0) close(run->janitor_pipe);
    if (run->janitor > 0)
        while (waitpid(run->janitor, NULL, 0) < 0 && errno == EINTR) {
        }
    run->janitor_pipe = -1;
    run->janitor = -1;
}

void pl_offload_run_close(pl_offload_run *run) {
    if (!run) return;
    remove_files(run->dir_fd, run->run_fd, run->name, run->count);
    atomic_store(&run->count->created, 0);
    stop_janitor(run);
    if (atomic_load(&current) == run) atomic_store(&current, NULL);
    close(run->run_fd);
    close(run->dir_fd);
    munmap(run->count, sizeof *run->count);
    free(run->dir);
    free(run);
}

int pl_offload_file_create(pl_offload_run *run, size_t size, char *rel, size_t cap, int *id) {
    int n = atomic_fetch_add(&run->count->next, 1);
    char name[32];
    file_name(n, name);
    if ((size_t)snprintf(rel, cap, "%s/%s", run->name, name) >= cap) return ENAMETOOLONG;
    int fd = openat(run->run_fd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return errno;
    /* Every block now: a write into the file later cannot meet a full
     * disk (see the header). */
    int err = size > 0 ? posix_fallocate(fd, 0, (off_t)size) : 0;
    close(fd);
    if (err) {
        unlinkat(run->run_fd, name, 0);
        return err;
    }
    atomic_fetch_add(&run->bytes, (long long)size);
    *id = n;
    return 0;
}

int pl_offload_file_reserve(pl_offload_run *run, int id, size_t size) {
    char name[32];
    file_name(id, name);
    int fd = openat(run->run_fd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return errno;
    struct stat st;
    int err = fstat(fd, &st) != 0 ? errno : 0;
    if (!err && (off_t)size > st.st_size) {
        err = posix_fallocate(fd, 0, (off_t)size);
        if (!err) atomic_fetch_add(&run->bytes, (long long)((off_t)size - st.st_size));
    }
    close(fd);
    return err;
}

void pl_offload_file_remove(pl_offload_run *run, int id) {
    char name[32];
    file_name(id, name);
    struct stat st;
    if (fstatat(run->run_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
        atomic_fetch_sub(&run->bytes, (long long)st.st_size);
    unlinkat(run->run_fd, name, 0);
}

int64_t pl_offload_run_bytes(const pl_offload_run *run) {
    return run ? (int64_t)atomic_load(&((pl_offload_run *)run)->bytes) : 0;
}

const char *pl_offload_run_dir(const pl_offload_run *run) { return run ? run->dir : NULL; }
