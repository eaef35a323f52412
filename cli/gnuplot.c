/* Drawing a PNG with gnuplot (see gnuplot.h). */
#define _POSIX_C_SOURCE 200809L /* popen, access */

#include "gnuplot.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "args.h"
#include "util/atomic_file.h"

/* Whether `program` is an executable in a directory of PATH: popen runs it
 * through the shell, whose "not found" would be a confusing message. */
static bool on_path(const char *program) {
    const char *path = getenv("PATH");
    if (!path)
        return false;
    char dir[4096];
    while (*path) {
        size_t n = strcspn(path, ":");
        snprintf(dir, sizeof dir, "%.*s/%s", (int)(n ? n : 1), n ? path : ".",
                 program);
        if (access(dir, X_OK) == 0)
            return true;
        path += n + (path[n] == ':');
    }
    return false;
}

void cli_gnuplot_quote(FILE *g, const char *s) {
    fputc('\'', g);
    for (; *s; s++) {
        if (*s == '\'')
            fputc('\'', g);
        fputc(*s == '\n' ? ' ' : *s, g);
    }
    fputc('\'', g);
}

void cli_gnuplot_png_terminal(FILE *g, int width, int height,
                              const char *output) {
    fprintf(g,
            "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) "
            "{ set terminal pngcairo noenhanced size %d,%d font 'sans,9' } "
            "else { set terminal png noenhanced size %d,%d font 'sans,9' }\n",
            width, height, width, height);
    fputs("set output ", g);
    cli_gnuplot_quote(g, output);
    fputc('\n', g);
}

bool cli_gnuplot_png(const char *what, const char *png_path,
                     cli_gnuplot_script_fn script, void *context) {
    if (!on_path("gnuplot")) {
        cli_error("%s: gnuplot not found in PATH (Debian/Ubuntu: apt-get "
                  "install gnuplot-nox)", what);
        return false;
    }
    /* gnuplot writes the PNG by name, so it gets a named temporary; one
     * left by a run that was killed is removed here. */
    pl_atomic_file_sweep(png_path);
    char tmp[4096];
    int len = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", png_path, (long)getpid());
    if (len < 0 || (size_t)len >= sizeof tmp) {
        cli_error("%s: the path '%s' is too long", what, png_path);
        return false;
    }
    /* gnuplot exiting early must not kill us with SIGPIPE mid-script. */
    void (*old)(int) = signal(SIGPIPE, SIG_IGN);
    FILE *g = popen("gnuplot", "w");
    if (!g) {
        signal(SIGPIPE, old);
        cli_error("%s: cannot run gnuplot: %s", what, strerror(errno));
        return false;
    }
    script(g, tmp, context);
    int status = pclose(g);
    signal(SIGPIPE, old);
    struct stat st;
    bool made = stat(tmp, &st) == 0 && st.st_size > 0;
    if (status != 0 || !made) {
        remove(tmp);
        if (status != 0 && WIFEXITED(status))
            cli_error("%s: gnuplot failed (exit status %d%s)", what,
                      WEXITSTATUS(status), made ? "" : ", no image written");
        else
            cli_error("%s: gnuplot failed (%s)", what,
                      status != 0 ? "killed by a signal" : "no image written");
        return false;
    }
    if (rename(tmp, png_path) != 0) {
        int err = errno;
        remove(tmp);
        cli_error("%s: cannot write '%s': %s", what, png_path, strerror(err));
        return false;
    }
    return true;
}
