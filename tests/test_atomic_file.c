/* util/atomic_file: files appear whole or not at all, and a writer killed
 * at any moment leaves no temporary behind (after the next write of the
 * same path at the latest).
 *
 * The kill test forks writers that replace an 8 MiB file over and over,
 * each version one repeated byte, and SIGKILLs them at random moments: the
 * target must always be a complete version, and once swept no temporary
 * may remain. With the old "<path>.tmp.<pid>" files and no sweep, about
 * half of such kills left one behind. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"
#include "util/atomic_file.h"

enum { FILE_BYTES = 8 << 20, PIECE = 64 << 10, KILLS = 30 };

/* Entries of the scratch directory other than `keep` (a base name). */
static int litter(const char *keep) {
    DIR *d = opendir(tu_scratch_dir());
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
            strcmp(e->d_name, keep))
            n++;
    if (d) closedir(d);
    return n;
}

static int write_version(const char *path, unsigned char byte) {
    static unsigned char buf[PIECE];
    memset(buf, byte, sizeof buf);
    pl_atomic_file f;
    int err = pl_atomic_file_open(&f, path);
    for (size_t done = 0; !err && done < FILE_BYTES; done += PIECE)
        if (write(f.fd, buf, PIECE) != PIECE) err = errno ? errno : EIO;
    if (err) {
        if (f.fd >= 0) pl_atomic_file_discard(&f);
        return err;
    }
    return pl_atomic_file_commit(&f);
}

/* The target holds one whole version: FILE_BYTES of one byte value. */
static bool whole(const char *path) {
    size_t n;
    uint8_t *d = tu_read_file(path, &n);
    bool ok = d && n == FILE_BYTES;
    for (size_t i = 1; ok && i < n; i++) ok = d[i] == d[0];
    free(d);
    return ok;
}

static void test_basics(void) {
    char path[512], sub[512];
    tu_scratch_path(path, sizeof path, "basic.bin");
    CHECK(write_version(path, 1) == 0 && whole(path), "first write");
    CHECK(write_version(path, 2) == 0 && whole(path), "replacing write");
    pl_atomic_file f;
    CHECK(pl_atomic_file_open(&f, path) == 0, "open for discard");
    CHECK(write(f.fd, "partial", 7) == 7, "write");
    pl_atomic_file_discard(&f);
    CHECK(whole(path) && litter("basic.bin") == 0,
          "a discarded write changed the target or left a file");
    FILE *s = NULL;
    bool opened = pl_atomic_file_open(&f, path) == 0;
    if (opened) s = pl_atomic_file_stream(&f);
    CHECK(s != NULL, "stream");
    if (s) fputs("text\n", s);
    if (opened) CHECK(pl_atomic_file_commit(&f) == 0, "commit through a stream");
    size_t n;
    char *text = (char *)tu_read_file(path, &n);
    CHECK(text && n == 5 && !memcmp(text, "text\n", 5), "stream contents");
    free(text);
    tu_scratch_path(sub, sizeof sub, "missing/x.bin");
    CHECK(pl_atomic_file_open(&f, sub) == ENOENT, "missing directory: ENOENT");
    tu_scratch_path(sub, sizeof sub, "adir");
    mkdir(sub, 0755);
    CHECK(pl_atomic_file_open(&f, sub) == EISDIR, "a directory: EISDIR");
    rmdir(sub);
    unlink(path);
}

static void test_kills(void) {
    char path[512];
    tu_scratch_path(path, sizeof path, "killed.bin");
    CHECK(write_version(path, 0) == 0, "initial version");
    srand((unsigned)time(NULL));
    int left = 0;
    for (int k = 0; k < KILLS; k++) {
        pid_t child = fork();
        if (child == 0) {
            for (unsigned v = 1;; v++) write_version(path, (unsigned char)v);
        }
        /* 1-40 ms: mostly mid-write, sometimes mid-commit. */
        usleep(1000 + (useconds_t)(rand() % 40000));
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        CHECK(whole(path), "kill %d: the target is torn", k);
        left += litter("killed.bin");
        pl_atomic_file_sweep(path);
        CHECK(litter("killed.bin") == 0, "kill %d: a temporary survived the sweep", k);
    }
    /* Only a kill between naming the file and the rename (microseconds)
     * can leave a name for the sweep; with named temporaries it was half. */
    pl_atomic_file f;
    bool anonymous = pl_atomic_file_open(&f, path) == 0 && f.tmp == NULL;
    if (f.fd >= 0) pl_atomic_file_discard(&f);
    printf("%d of %d kills left a temporary for the sweep (%s files)\n", left,
           KILLS, anonymous ? "O_TMPFILE" : "named temporary");
    CHECK(!anonymous || left <= 3, "%d of %d kills left a temporary", left, KILLS);
    unlink(path);
}

int main(void) {
    if (!tu_scratch_create("pl_atomic")) return 1;
    test_basics();
    test_kills();
    tu_remove_tree(tu_scratch_dir());
    if (tu_failures) {
        printf("%d check(s) failed\n", tu_failures);
        return 1;
    }
    printf("atomic_file: all checks passed\n");
    return 0;
}
