/* `pleiades plot METRICS.jsonl... --png OUT.png`; see plot.h.
 *
 * The files are what `pleiades train --metrics` writes (cli/metrics.c),
 * one JSON object a line:
 *   {"step":3,"epoch":1,"loss":0.52,"lr":0.001,...}   an iteration
 *   {"step":5,"val_loss":2.1}                         a GPT validation
 *   {"epoch":1,"test_loss":0.4,"test_accuracy":0.85}  an MLP evaluation
 * A line keyed by epoch alone is placed at the step that ended the epoch:
 * the last line with a step seen for that epoch (else the last step seen
 * at all, else 0). A null value (a loss that was not finite) is no point.
 * Every other irregularity is an error naming the file and line, since a
 * plot that silently drops data would mislead. The one exception is a
 * last line without its newline that does not decode: a run still writing
 * it, skipped with a warning, so that a live run can be plotted. */
#define _POSIX_C_SOURCE 200809L /* getline */

#include "plot.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "args.h"
#include "common.h"
#include "flags.h"
#include "gnuplot.h"
#include "util/regular_file.h"

#define PLOT_MIN_SIZE 200   /* pixels, each way */
#define PLOT_MAX_SIZE 10000
#define PLOT_JSON_FLAGS                                                        \
    (JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL | JSON_REJECT_DUPLICATES)

/* --------------------------------------------------------- data */

/* Points (x[i], y[i]) in file order. */
typedef struct series {
    double *x, *y;
    size_t n, cap;
} series;

/* One metrics file. */
typedef struct run {
    const char *path;
    const char *label;   /* in the legend: the base name, or the path when
                            two files share a base name */
    const char *val_key; /* "val_loss" or "test_loss", the first seen */
    series train, val, lr;
} run;

/* The step that ended each epoch seen so far. */
typedef struct epoch_end {
    double epoch, step;
} epoch_end;

typedef struct reader {
    const char *path;
    long line;
    epoch_end *ends;
    size_t n_ends, cap_ends;
    bool any_step;
    double last_step;
} reader;

static void series_free(series *s) {
    free(s->x);
    free(s->y);
    *s = (series){0};
}

static bool push(series *s, double x, double y) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        double *nx = realloc(s->x, cap * sizeof *nx);
        if (!nx)
            return false;
        s->x = nx;
        double *ny = realloc(s->y, cap * sizeof *ny);
        if (!ny)
            return false;
        s->y = ny;
        s->cap = cap;
    }
    s->x[s->n] = x;
    s->y[s->n] = y;
    s->n++;
    return true;
}

static bool record_epoch_end(reader *rd, double epoch, double step) {
    /* Lines come in order: the epoch is almost always the last one. */
    for (size_t i = rd->n_ends; i-- > 0;)
        if (rd->ends[i].epoch == epoch) {
            rd->ends[i].step = step;
            return true;
        }
    if (rd->n_ends == rd->cap_ends) {
        size_t cap = rd->cap_ends ? 2 * rd->cap_ends : 16;
        epoch_end *e = realloc(rd->ends, cap * sizeof *e);
        if (!e)
            return false;
        rd->ends = e;
        rd->cap_ends = cap;
    }
    rd->ends[rd->n_ends++] = (epoch_end){epoch, step};
    return true;
}

static double epoch_step(const reader *rd, double epoch) {
    for (size_t i = rd->n_ends; i-- > 0;)
        if (rd->ends[i].epoch == epoch)
            return rd->ends[i].step;
    return rd->any_step ? rd->last_step : 0;
}

/* Member `key` of `obj`: *present says whether it is there and not null,
 * *value its number. False after an error (a value that is not a number,
 * or null where `null_ok` is false). */
static bool number_member(const reader *rd, const json_t *obj,
                          const char *key, bool null_ok, bool *present,
                          double *value) {
    const json_t *v = json_object_get(obj, key);
    *present = false;
    if (!v || (null_ok && json_is_null(v)))
        return true;
    if (!json_is_number(v)) {
        cli_error("plot: %s:%ld: \"%s\" is not a number", rd->path, rd->line,
                  key);
        return false;
    }
    *value = json_number_value(v);
    *present = true;
    return true;
}

/* One decoded line into `r`; false after an error. */
static bool take_object(reader *rd, run *r, const json_t *obj) {
    bool has_step, has_epoch, has;
    double step = 0, epoch = 0, v = 0;
    if (!number_member(rd, obj, "step", false, &has_step, &step) ||
        !number_member(rd, obj, "epoch", false, &has_epoch, &epoch))
        return false;
    if (!has_step && !has_epoch) {
        cli_error("plot: %s:%ld: neither \"step\" nor \"epoch\"", rd->path,
                  rd->line);
        return false;
    }
    double x;
    if (has_step) {
        x = step;
        rd->any_step = true;
        rd->last_step = step;
        if (has_epoch && !record_epoch_end(rd, epoch, step))
            goto no_memory;
    } else {
        x = epoch_step(rd, epoch);
    }
    if (!number_member(rd, obj, "loss", true, &has, &v))
        return false;
    if (has && !push(&r->train, x, v))
        goto no_memory;
    if (!number_member(rd, obj, "lr", true, &has, &v))
        return false;
    if (has && !push(&r->lr, x, v))
        goto no_memory;
    static const char *const VAL_KEYS[] = {"val_loss", "test_loss"};
    for (int k = 0; k < 2; k++) {
        if (!number_member(rd, obj, VAL_KEYS[k], true, &has, &v))
            return false;
        if (json_object_get(obj, VAL_KEYS[k]) && !r->val_key)
            r->val_key = VAL_KEYS[k];
        if (has && !push(&r->val, x, v))
            goto no_memory;
    }
    return true;
no_memory:
    cli_error("plot: %s: out of memory", rd->path);
    return false;
}

/* The line text[0..len), without its newline; `complete` when it had one.
 * -1: an error (printed), 0: nothing to take, 1: taken. */
static int take_line(reader *rd, run *r, const char *text, size_t len,
                     bool complete) {
    size_t blank = strspn(text, " \t\r");
    if (blank >= len)
        return 0; /* an empty line */
    if (memchr(text, '\0', len)) {
        /* JSON has no place for one, and jansson 2.14 skips one that
         * follows a number instead of refusing it. */
        cli_error("plot: %s:%ld: not a JSON object: a NUL byte", rd->path,
                  rd->line);
        return -1;
    }
    json_error_t err;
    json_t *root = json_loadb(text, len, PLOT_JSON_FLAGS, &err);
    if (!root) {
        if (json_error_code(&err) == json_error_out_of_memory) {
            cli_error("plot: %s: out of memory", rd->path);
            return -1;
        }
        if (!complete) {
            cli_error("plot: %s:%ld: warning: skipped the last line, which "
                      "is incomplete (a run still writing it?)",
                      rd->path, rd->line);
            return 0;
        }
        cli_error("plot: %s:%ld: not valid JSON (column %d: %s)",
                  rd->path, rd->line, err.column, err.text);
        return -1;
    }
    bool ok = json_is_object(root);
    if (!ok)
        cli_error("plot: %s:%ld: not a JSON object", rd->path, rd->line);
    else
        ok = take_object(rd, r, root);
    json_decref(root);
    return ok ? 1 : -1;
}

static bool load_run(run *r) {
    /* A FIFO would block the open forever: only a regular file will do. */
    const char *why;
    int fd = pl_open_regular(r->path, 0, &why);
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (!f) {
        if (fd >= 0) {
            why = strerror(errno);
            close(fd);
        }
        cli_error("plot: cannot open '%s': %s", r->path, why);
        return false;
    }
    reader rd = {.path = r->path};
    char *line = NULL;
    size_t size = 0;
    ssize_t n;
    bool ok = true;
    while (ok && (n = getline(&line, &size, f)) != -1) {
        rd.line++;
        size_t len = (size_t)n;
        bool complete = len > 0 && line[len - 1] == '\n';
        if (complete)
            len--;
        ok = take_line(&rd, r, line, len, complete) >= 0;
    }
    if (ok && ferror(f)) {
        cli_error("plot: cannot read '%s': %s", r->path, strerror(errno));
        ok = false;
    }
    free(line);
    free(rd.ends);
    fclose(f);
    if (ok && r->train.n == 0 && r->val.n == 0) {
        cli_error("plot: %s: no loss to plot (no \"loss\", \"val_loss\" or "
                  "\"test_loss\" with a number)", r->path);
        ok = false;
    }
    return ok;
}

/* ------------------------------------------------------- drawing */

typedef struct chart {
    run *runs;
    int n_runs;
    int width, height;
    const char *title;
} chart;

static const char *const COLORS[] = {
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
    "#9467bd", "#8c564b", "#e377c2", "#17becf",
};
#define N_COLORS ((int)(sizeof COLORS / sizeof COLORS[0]))

static void put_block(FILE *g, char kind, int index, const series *s) {
    if (s->n == 0)
        return; /* an empty block is an error to plot: none is written */
    fprintf(g, "$%c%d << EOD\n", kind, index);
    for (size_t i = 0; i < s->n; i++)
        fprintf(g, "%.10g %.10g\n", s->x[i], s->y[i]);
    fputs("EOD\n", g);
}

/* One curve of the plot command, in `style` (after "with"); a single point
 * gets a marker instead, since a line through one point shows nothing. */
static void put_curve(FILE *g, const char **sep, char kind, int index,
                      const series *s, bool y2, const char *style,
                      const char *label, const char *what) {
    if (s->n == 0)
        return;
    fprintf(g, "%s$%c%d using 1:2%s with %s lc rgb '%s' title ", *sep, kind,
            index, y2 ? " axes x1y2" : "", s->n == 1 ? "points pt 7" : style,
            COLORS[index % N_COLORS]);
    char title[1024];
    snprintf(title, sizeof title, "%s: %s", label, what);
    cli_gnuplot_quote(g, title);
    *sep = ", \\\n     ";
}

static void widen(const double *v, size_t n, double *lo, double *hi) {
    for (size_t i = 0; i < n; i++) {
        *lo = fmin(*lo, v[i]);
        *hi = fmax(*hi, v[i]);
    }
}

/* Sets `axis`'s range around a single value [lo, hi = lo]: one point, or a
 * constant series (the learning rate of a constant schedule), leaves
 * gnuplot's autoscaled range empty, which it widens itself after printing
 * a warning on every such plot. */
static void put_range(FILE *g, const char *axis, double lo, double hi) {
    if (lo < hi || !isfinite(lo)) return; /* a real range, or no points */
    double pad = fabs(lo) > 0 ? fabs(lo) * 0.05 : 1.0;
    fprintf(g, "set %srange [%.17g:%.17g]\n", axis, lo - pad, lo + pad);
}

static void put_script(FILE *g, const char *out, void *context) {
    const chart *c = context;
    cli_gnuplot_png_terminal(g, c->width, c->height, out);
    fputs("set title ", g);
    cli_gnuplot_quote(g, c->title);
    fputs("\nset xlabel 'step'\nset ylabel 'loss'\nset grid\n"
          "set key outside below horizontal\n",
          g);
    bool any_lr = false;
    for (int i = 0; i < c->n_runs; i++)
        any_lr = any_lr || c->runs[i].lr.n > 0;
    if (any_lr)
        fputs("set ytics nomirror\nset y2tics\nset format y2 '%g'\n"
              "set y2label 'learning rate'\n",
              g);
    double x[2] = {INFINITY, -INFINITY}, y[2] = {INFINITY, -INFINITY},
           y2[2] = {INFINITY, -INFINITY};
    for (int i = 0; i < c->n_runs; i++) {
        const run *r = &c->runs[i];
        const series *all[3] = {&r->train, &r->val, &r->lr};
        for (int k = 0; k < 3; k++) {
            widen(all[k]->x, all[k]->n, &x[0], &x[1]);
            widen(all[k]->y, all[k]->n, k < 2 ? &y[0] : &y2[0], k < 2 ? &y[1] : &y2[1]);
        }
    }
    put_range(g, "x", x[0], x[1]);
    put_range(g, "y", y[0], y[1]);
    if (any_lr) put_range(g, "y2", y2[0], y2[1]);
    for (int i = 0; i < c->n_runs; i++) {
        put_block(g, 'T', i, &c->runs[i].train);
        put_block(g, 'V', i, &c->runs[i].val);
        put_block(g, 'L', i, &c->runs[i].lr);
    }
    fputs("plot", g);
    const char *sep = " ";
    for (int i = 0; i < c->n_runs; i++) {
        const run *r = &c->runs[i];
        bool test = r->val_key && strcmp(r->val_key, "test_loss") == 0;
        put_curve(g, &sep, 'T', i, &r->train, false, "lines dt 1 lw 2",
                  r->label, "train loss");
        put_curve(g, &sep, 'V', i, &r->val, false,
                  "linespoints dt 2 lw 2 pt 7 ps 0.6", r->label,
                  test ? "test loss" : "val loss");
        put_curve(g, &sep, 'L', i, &r->lr, true, "lines dt 3 lw 1", r->label,
                  "lr");
    }
    fputs("\n", g);
}

/* --------------------------------------------------------- command */

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash && slash[1] ? slash + 1 : path;
}

static int plot(char **files, int n_files, const char *png, int width,
                int height, const char *title) {
    int rc = cli_check_output_path("--png", png);
    if (rc != CLI_EXIT_OK)
        return rc;
    run *runs = calloc((size_t)n_files, sizeof *runs);
    if (!runs) {
        cli_error("plot: out of memory");
        return CLI_EXIT_FAILURE;
    }
    for (int i = 0; i < n_files && rc == CLI_EXIT_OK; i++) {
        runs[i].path = files[i];
        runs[i].label = base_name(files[i]);
        for (int j = 0; j < n_files; j++)
            if (j != i && strcmp(base_name(files[j]), runs[i].label) == 0)
                runs[i].label = files[i];
        if (!load_run(&runs[i]))
            rc = CLI_EXIT_FAILURE;
    }
    char default_title[64];
    if (!title) {
        snprintf(default_title, sizeof default_title, "loss of %d runs",
                 n_files);
        title = n_files == 1 ? runs[0].label : default_title;
    }
    chart c = {runs, n_files, width, height, title};
    if (rc == CLI_EXIT_OK &&
        !cli_gnuplot_png("plot: --png", png, put_script, &c))
        rc = CLI_EXIT_FAILURE;
    if (rc == CLI_EXIT_OK)
        for (int i = 0; i < n_files; i++)
            printf("%s: %zu loss, %zu %s, %zu lr points\n", runs[i].path,
                   runs[i].train.n, runs[i].val.n,
                   runs[i].val_key ? runs[i].val_key : "val_loss",
                   runs[i].lr.n);
    for (int i = 0; i < n_files; i++) {
        series_free(&runs[i].train);
        series_free(&runs[i].val);
        series_free(&runs[i].lr);
    }
    free(runs);
    return rc;
}

static int usage_error(void) {
    cli_usage_hint("plot");
    return CLI_EXIT_USAGE;
}

typedef struct plot_options {
    const char *png, *title;
    int64_t width, height;
} plot_options;

#define OPTION(member) CLI_FIELD(CLI_DEST_COMMAND, plot_options, member)

static const cli_flag ROWS[] = {
    {"png", "OUT.png", CLI_PATH, OPTION(png), .what = "a file name",
     .help = "the image to write (required)"},
    {"width", "W", CLI_INT, OPTION(width), .min = PLOT_MIN_SIZE, .max = PLOT_MAX_SIZE,
     .help = "its width in pixels, {range} (default {default})"},
    {"height", "H", CLI_INT, OPTION(height), .min = PLOT_MIN_SIZE, .max = PLOT_MAX_SIZE,
     .help = "its height in pixels, {range} (default {default})"},
    {"title", "T", CLI_TEXT, OPTION(title),
     .help = "the chart's title (default: the file name, or the number of runs)"},
    {"help", NULL, CLI_HELP, .help = "show this help and exit"},
};

static void flags_init(cli_flags *f, plot_options *o) {
    *o = (plot_options){.width = 1000, .height = 600};
    const cli_flag_table table = CLI_TABLE(ROWS);
    void *const dest[CLI_N_DESTS] = {o, NULL, NULL, NULL};
    cli_flags_init(f, &table, 1, dest);
}

void cli_plot_usage(FILE *out) {
    fprintf(out,
            "Usage: %s plot METRICS.jsonl [METRICS.jsonl...] --png OUT.png "
            "[options]\n"
            "\n"
            "Draw the loss curves of training runs from the files written "
            "by\n'train --metrics': training loss (solid) and validation or "
            "test loss (dashed)\nagainst the step, the learning rate "
            "(dotted) on a second y axis; one colour\nper file, to compare "
            "runs. Needs gnuplot.\n"
            "\n",
            CLI_PROGRAM);
    cli_flags f;
    plot_options o; /* the defaults, for "{default}" */
    flags_init(&f, &o);
    cli_flags_usage(&f, out);
}

int cli_plot(int argc, char **argv) {
    plot_options o;
    cli_flags f;
    flags_init(&f, &o);
    int first = argc;
    switch (cli_flags_parse(&f, argc, argv, &first)) {
    case CLI_PARSE_HELP:
        cli_plot_usage(stdout);
        return CLI_EXIT_OK;
    case CLI_PARSE_ERROR:
        return usage_error();
    case CLI_PARSE_RUN:
        break;
    }
    if (first >= argc) {
        cli_error("plot: missing metrics file (METRICS.jsonl)");
        return usage_error();
    }
    if (!o.png) {
        cli_error("plot: missing --png OUT.png");
        return usage_error();
    }
    return plot(argv + first, argc - first, o.png, (int)o.width, (int)o.height, o.title);
}
