/* The main() of a harness built without libFuzzer: runs
 * LLVMFuzzerTestOneInput once over every file named on the command line
 * and every regular file inside the directories named there (in name
 * order), so a saved crash input, or any generated seed, that breaks the
 * code again fails the test suite. Arguments that start with '-' are
 * libFuzzer flags and are ignored, so both builds take the same command
 * line. Each input gets REPLAY_TIMEOUT_S seconds: a hang fails too.
 *
 *   fuzz_NAME [--make-seeds DIR] [-flag...] DIR|FILE...
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_common.h"

#define REPLAY_TIMEOUT_S 60

static const char *current; /* the input being run, for the alarm */

static void on_alarm(int sig) {
    (void)sig;
    /* Only async-signal-safe calls here. */
    static const char msg[] = "replay: timed out on input ";
    (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)!write(STDERR_FILENO, current, strlen(current));
    (void)!write(STDERR_FILENO, "\n", 1);
    _exit(1);
}

static void *read_all(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *grown = realloc(buf, cap *= 2);
        if (!grown)
            free(buf);
        buf = grown;
    }
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    *size = n;
    return buf;
}

static int run_file(const char *path) {
    size_t size = 0;
    void *data = read_all(path, &size);
    if (!data) {
        fprintf(stderr, "replay: cannot read %s: %s\n", path,
                strerror(errno));
        return 1;
    }
    printf("replay: %s (%zu bytes)\n", path, size);
    fflush(stdout);
    current = path;
    alarm(REPLAY_TIMEOUT_S);
    LLVMFuzzerTestOneInput(data, size);
    alarm(0);
    free(data);
    return 0;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file directly in `dir`, in name order. */
static int run_dir(const char *dir, int *count) {
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "replay: cannot open %s: %s\n", dir, strerror(errno));
        return 1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *ent;
    while ((ent = readdir(d))) {
        if (ent->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **grown = realloc(names, cap * sizeof *names);
            if (!grown)
                abort();
            names = grown;
        }
        names[n] = malloc(strlen(dir) + strlen(ent->d_name) + 2);
        if (!names[n])
            abort();
        sprintf(names[n], "%s/%s", dir, ent->d_name);
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
            failed |= run_file(names[i]);
            ++*count;
        }
        free(names[i]);
    }
    free(names);
    return failed;
}

int main(int argc, char **argv) {
    LLVMFuzzerInitialize(&argc, &argv);
    signal(SIGALRM, on_alarm);
    int failed = 0, count = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (argv[i][0] == '-')
            continue;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            failed = 1;
        } else if (S_ISDIR(st.st_mode)) {
            failed |= run_dir(argv[i], &count);
        } else {
            failed |= run_file(argv[i]);
            count++;
        }
    }
    fuzz_teardown();
    printf("fuzz %s: replayed %d inputs%s\n", fuzz_name, count,
           failed ? ", some could not be read" : "");
    return failed;
}
