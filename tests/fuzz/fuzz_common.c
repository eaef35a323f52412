/* Shared parts of the fuzz harnesses; see fuzz_common.h. */
#define _XOPEN_SOURCE 700 /* nftw */
#include "fuzz_common.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pleiades.h>

void fuzz_die(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "fuzz %s: ", fuzz_name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

/* ------------------------------------------------------------ scratch */

static char scratch[4096];

static int remove_entry(const char *path, const struct stat *sb, int type,
                        struct FTW *ftw) {
    (void)sb;
    (void)type;
    (void)ftw;
    remove(path);
    return 0;
}

static void scratch_remove(void) {
    if (scratch[0])
        nftw(scratch, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *fuzz_scratch(void) {
    if (!scratch[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(scratch, sizeof scratch, "%s/pl_fuzz_%s_XXXXXX",
                 tmp && *tmp ? tmp : "/tmp", fuzz_name);
        if (!mkdtemp(scratch))
            fuzz_die("mkdtemp %s: %s", scratch, strerror(errno));
        atexit(scratch_remove);
    }
    return scratch;
}

void fuzz_scratch_path(char *out, size_t size, const char *name) {
    int n = snprintf(out, size, "%s/%s", fuzz_scratch(), name);
    if (n < 0 || (size_t)n >= size)
        fuzz_die("path too long: %s/%s", fuzz_scratch(), name);
}

void fuzz_write_file(const char *path, const void *data, size_t size) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        fuzz_die("cannot create %s: %s", path, strerror(errno));
    const char *p = data;
    while (size > 0) {
        ssize_t n = write(fd, p, size);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            fuzz_die("cannot write %s: %s", path, strerror(errno));
        p += n;
        size -= (size_t)n;
    }
    if (close(fd) != 0)
        fuzz_die("cannot close %s: %s", path, strerror(errno));
}

void fuzz_seed_put(const char *dir, const char *name, const void *data,
                   size_t size, int *count) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    fuzz_write_file(path, data, size);
    ++*count;
}

void fuzz_starpu_env(void) {
    char home[4096];
    fuzz_scratch_path(home, sizeof home, "starpu-home");
    mkdir(home, 0700);
    setenv("STARPU_HOME", home, 1);
    setenv("STARPU_SILENT", "1", 1);
    setenv("STARPU_NCPU", "1", 1);
    setenv("STARPU_WORKERS_NOBIND", "1", 1);
}

int fuzz_run_silenced(int (*fn)(void *), void *arg) {
    fflush(stdout);
    int saved = dup(STDOUT_FILENO);
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (saved < 0 || null < 0 || dup2(null, STDOUT_FILENO) < 0)
        fuzz_die("cannot silence stdout: %s", strerror(errno));
    close(null);
    int rc = fn(arg);
    fflush(stdout);
    if (dup2(saved, STDOUT_FILENO) < 0)
        fuzz_die("cannot restore stdout: %s", strerror(errno));
    close(saved);
    return rc;
}

/* ------------------------------------------------------------- reader */

uint8_t fuzz_byte(fuzz_reader *r) {
    if (r->size == 0)
        return 0;
    r->size--;
    return *r->data++;
}

uint16_t fuzz_u16(fuzz_reader *r) {
    uint16_t lo = fuzz_byte(r);
    return (uint16_t)(lo | (uint16_t)fuzz_byte(r) << 8);
}

uint64_t fuzz_u64(fuzz_reader *r) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)fuzz_byte(r) << (8 * i);
    return v;
}

/* ---------------------------------------------------------------- init */

static void make_dirs(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s", dir);
    for (char *p = path + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        fuzz_die("cannot create %s: %s", path, strerror(errno));
}

/* libFuzzer calls this before it parses its own flags, so `--make-seeds
 * DIR` can be taken out of argv here: the flags that remain are libFuzzer's
 * (or the replay program's input paths). */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *seed_dir = NULL;
    char **av = *argv;
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        if (strcmp(av[i], "--make-seeds") == 0 && i + 1 < *argc) {
            seed_dir = av[++i];
            continue;
        }
        av[out++] = av[i];
    }
    av[out] = NULL;
    *argc = out;
    fuzz_setup();
    if (seed_dir) {
        make_dirs(seed_dir);
        int n = fuzz_make_seeds(seed_dir);
        printf("fuzz %s: wrote %d seed inputs into %s\n", fuzz_name, n,
               seed_dir);
        fflush(stdout);
        if (*argc == 1) {
            fuzz_teardown();
            exit(0);
        }
    }
    return 0;
}

struct pl_graph *fuzz_tiny_mlp(void) {
    pl_graph_t *g = pl_graph_new(11);
    int64_t in[1] = {5};
    pl_tensor_t *x = g ? pl_graph_input(g, "x", PL_DTYPE_F32, 1, in) : NULL;
    pl_tensor_t *y = g ? pl_graph_input(g, "y", PL_DTYPE_I32, 0, NULL) : NULL;
    pl_tensor_t *h = x ? pl_relu(g, pl_linear(g, x, 3, "fc1")) : NULL;
    pl_tensor_t *logits = h ? pl_linear(g, h, 4, "head") : NULL;
    pl_tensor_t *loss = logits ? pl_cross_entropy(g, logits, y) : NULL;
    if (!loss || pl_graph_set_loss(g, loss) != PL_STATUS_OK)
        fuzz_die("building the tiny MLP: %s", pl_last_error());
    return g;
}
