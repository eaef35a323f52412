/* The Gantt chart: gnuplot (cli_gnuplot_png) reads a script with the
 * slices inline as datablocks ($F << EOD ... EOD), one per phase. */
#include "trace_gantt.h"

#include <stdio.h>

#include "gnuplot.h"

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
    {'C', "$C", "collective", "#d9b31a"},
    {'?', "$X", "other", "#333333"},
};
#define N_PHASES ((int)(sizeof PHASES / sizeof PHASES[0]))

static int phase_index(char phase) {
    for (int i = 0; i < N_PHASES - 1; i++)
        if (PHASES[i].phase == phase)
            return i;
    return N_PHASES - 1;
}

static void put_script(FILE *g, const char *out, void *context) {
    const trace_data *t = context;
    int rows = t->n_tracks;
    double t0 = t->events[0].start;
    for (int i = 0; i < t->n_events; i++)
        if (t->events[i].start < t0)
            t0 = t->events[i].start;
    int height = 160 + 28 * rows;
    cli_gnuplot_png_terminal(g, 1400, height, out);
    char title[256];
    snprintf(title, sizeof title, "schedule %s: %d stage(s), %d microbatch(es)",
             t->schedule ? t->schedule : "?", t->stages, t->microbatches);
    fputs("set title ", g);
    cli_gnuplot_quote(g, t->schedule ? title : "trace");
    fprintf(g,
            "\nset xlabel 'time (ms)'\nset xrange [0:*]\n"
            "set yrange [-0.6:%f]\nset grid xtics\n"
            "set key outside below horizontal\n"
            "set style fill solid 1.0 noborder\nset ytics nomirror (",
            rows - 0.4);
    for (int k = 0; k < rows; k++) {
        cli_gnuplot_quote(g, t->tracks[k].name);
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
    /* The script only reads the trace. */
    return cli_gnuplot_png("--png", png_path, put_script, (void *)t);
}
