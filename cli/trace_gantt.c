/* The Gantt chart: gnuplot reads a script with the slices inline as
 * datablocks ($F << EOD ... EOD, gnuplot 5) on its standard input, so no
 * temporary data file needs cleaning up; the PNG goes to a temporary name
 * that is renamed once gnuplot succeeded, so a failed plot never leaves a
 * truncated image behind. */
#define _POSIX_C_SOURCE 200809L /* popen, access */

#include "trace_gantt.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "args.h"
#include "util/atomic_file.h"

/* The same colours as the Paje trace's phases. */
static const struct {
    char phase;
    const char *block, *title, *color;
} PHASES[] = {
    {'F', "$F", "forward", "#4073d9"},
    {'L', "$L", "loss", "#994dbf"},
    {'B', "$B", "input gradient", "#e65933"},
    {'W', "$W", "weight gradient", "#4db34d"},
    {'O', "$O", "optimizer", "#8c8c8c"},
    {'?', "$X", "other", "#333333"},
};
#define N_PHASES ((int)(sizeof PHASES / sizeof PHASES[0]))

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

/* A gnuplot single-quoted string: no escapes, a quote is doubled. */
static void put_quoted(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputc('\'', f);
        fputc(*s == '\n' ? ' ' : *s, f);
    }
    fputc('\'', f);
}

static int phase_index(char phase) {
    for (int i = 0; i < N_PHASES - 1; i++)
        if (PHASES[i].phase == phase)
            return i;
    return N_PHASES - 1;
}

static void put_script(FILE *g, const trace_data *t, const char *out) {
    int rows = t->n_tracks;
    double t0 = t->events[0].start;
    for (int i = 0; i < t->n_events; i++)
        if (t->events[i].start < t0)
            t0 = t->events[i].start;
    int height = 160 + 28 * rows;
    fprintf(g,
            "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) "
            "{ set terminal pngcairo noenhanced size 1400,%d font 'sans,9' } "
            "else { set terminal png noenhanced size 1400,%d }\n",
            height, height);
    fputs("set output ", g);
    put_quoted(g, out);
    char title[256];
    snprintf(title, sizeof title, "schedule %s: %d stage(s), %d microbatch(es)",
             t->schedule ? t->schedule : "?", t->stages, t->microbatches);
    fputs("\nset title ", g);
    put_quoted(g, t->schedule ? title : "trace");
    fprintf(g,
            "\nset xlabel 'time (ms)'\nset xrange [0:*]\n"
            "set yrange [-0.6:%f]\nset grid xtics\n"
            "set key outside below horizontal\n"
            "set style fill solid 1.0 noborder\nset ytics nomirror (",
            rows - 0.4);
    for (int k = 0; k < rows; k++) {
        put_quoted(g, t->tracks[k].name);
        fprintf(g, " %d%s", rows - 1 - k, k + 1 < rows ? ", " : ")\n");
    }
    /* One datablock per phase: x centre, y, half width, half height. */
    bool used[N_PHASES] = {false};
    for (int p = 0; p < N_PHASES; p++) {
        fprintf(g, "%s << EOD\n", PHASES[p].block);
        for (int i = 0; i < t->n_events; i++) {
            const trace_event *ev = &t->events[i];
            if (phase_index(ev->phase) != p)
                continue;
            double s = (ev->start - t0) / 1e3, e = (ev->end - t0) / 1e3;
            fprintf(g, "%.6f %d %.6f 0.35\n", (s + e) / 2, rows - 1 - ev->track,
                    (e - s) / 2);
            used[p] = true;
        }
        fputs("EOD\n", g);
    }
    fputs("plot", g);
    const char *sep = " ";
    for (int p = 0; p < N_PHASES; p++) {
        if (!used[p])
            continue; /* an empty block is an error to plot */
        fprintf(g, "%s%s using 1:2:3:4 with boxxyerror lc rgb '%s' title '%s'",
                sep, PHASES[p].block, PHASES[p].color, PHASES[p].title);
        sep = ", \\\n     ";
    }
    fputs("\n", g);
}

bool trace_gantt_png(const trace_data *t, const char *png_path) {
    if (!on_path("gnuplot")) {
        cli_error("--png: gnuplot not found in PATH (Debian/Ubuntu: apt-get "
                  "install gnuplot-nox)");
        return false;
    }
    /* gnuplot writes the PNG by name, so it gets a named temporary; one
     * left by a run that was killed is removed here. */
    pl_atomic_file_sweep(png_path);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", png_path, (long)getpid());
    /* gnuplot exiting early must not kill us with SIGPIPE mid-script. */
    void (*old)(int) = signal(SIGPIPE, SIG_IGN);
    FILE *g = popen("gnuplot", "w");
    if (!g) {
        signal(SIGPIPE, old);
        cli_error("--png: cannot run gnuplot: %s", strerror(errno));
        return false;
    }
    put_script(g, t, tmp);
    int status = pclose(g);
    signal(SIGPIPE, old);
    struct stat st;
    bool made = stat(tmp, &st) == 0 && st.st_size > 0;
    if (status != 0 || !made) {
        remove(tmp);
        cli_error("--png: gnuplot failed (exit status %d%s)", status,
                  made ? "" : ", no image written");
        return false;
    }
    if (rename(tmp, png_path) != 0) {
        int err = errno;
        remove(tmp);
        cli_error("--png: cannot write '%s': %s", png_path, strerror(err));
        return false;
    }
    return true;
}
