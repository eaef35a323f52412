/* The Gantt chart: gnuplot (cli_gnuplot_png) reads a script with the
 * slices inline as datablocks ($F << EOD ... EOD), one per phase, and the
 * microbatch labels as one more datablock ($LABELS) drawn `with labels`.
 *
 * Labels make an order checkable by eye (which microbatch each F, B and
 * W slice belongs to), but a label wider than its slice would spill onto
 * the neighbours and mislabel them. So the script fixes the geometry the
 * label widths are judged against: the plot's left and right edges at
 * known pixels (set lmargin/rmargin at screen) and the time axis at a
 * known range, which gives the pixels per millisecond; a label is written
 * only where its text, at a conservative character width, fits inside
 * its slice. That also bounds the labels to about one per CHAR_PX +
 * LABEL_PAD_PX pixels of each row, however many tasks the trace has. */
#include "trace_gantt.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "gnuplot.h"

/* The same colours as the Paje trace's phases; `text` is the colour of
 * labels on them, white except on the light collective yellow. */
static const struct {
    char phase;
    const char *block, *title, *color;
    long text;
} PHASES[] = {
    {'F', "$F", "forward", "#4073d9", 0xffffff},
    {'L', "$L", "loss", "#994dbf", 0xffffff},
    {'B', "$B", "input gradient", "#e65933", 0xffffff},
    {'W', "$W", "weight gradient", "#4db34d", 0xffffff},
    {'R', "$R", "recomputation", "#8cc6ff", 0x000000},
    {'O', "$O", "optimizer", "#8c8c8c", 0xffffff},
    {'C', "$C", "collective", "#d9b31a", 0x000000},
    {'M', "$M", "memory", "#73b3b3", 0x000000},
    {'?', "$X", "other", "#333333", 0xffffff},
};
#define N_PHASES ((int)(sizeof PHASES / sizeof PHASES[0]))

/* The picture's geometry in pixels. CHAR_PX over-estimates a character
 * of the terminal's font (pngcairo's sans 9 draws digits about 6 px wide,
 * the libgd png fallback's medium font 7 px), so a label judged to fit
 * does fit on either terminal. */
enum {
    WIDTH_PX = 1400,
    ROW_PX = 28,
    HEIGHT_BASE_PX = 160, /* title, time axis */
    CHAR_PX = 7,
    LABEL_PAD_PX = 4, /* free space either side of a label, together */
    MERGE_GAP_PX = 2, /* see put_labels */
    RIGHT_MARGIN_PX = 12,
    /* The key, right of the plot: a gap from the plot's border, then a
     * line sample and gaps (about 8 characters) beside the longest
     * title; each entry a line of text. */
    KEY_GAP_PX = 12,
    KEY_EXTRA_CHARS = 8,
    KEY_ENTRY_PX = 16,
    HEIGHT_KEY_PX = 110, /* the height besides the key's entries */
};

/* The least share of a label's span that its slices cover. */
#define MIN_BUSY 0.75

/* The largest microbatch a name's digits may spell (trace_load.c's bound
 * on args.microbatch); larger ones are not labelled. */
#define MAX_MICROBATCH (1 << 20)

static int phase_index(char phase) {
    for (int i = 0; i < N_PHASES - 1; i++)
        if (PHASES[i].phase == phase)
            return i;
    return N_PHASES - 1;
}

/* ------------------------------------------------------ microbatches */

/* What a slice belongs to: its microbatch (-1: none, e.g. an optimizer
 * update) and model chunk. */
typedef struct item {
    int microbatch, chunk;
} item;

/* The microbatch of a name that ends in "mb<k>" (how Pleiades names task
 * slices: "F h0.ln1 mb3") or "t<k>" (the engine's task names, "op.F.t3"),
 * after a space or a dot; -1 when it does not. For traces whose slices
 * carry no args.microbatch. */
static int name_microbatch(const char *name) {
    size_t n = strlen(name), d = n;
    while (d > 0 && name[d - 1] >= '0' && name[d - 1] <= '9')
        d--;
    if (d == n || n - d > 7) /* no digits, or beyond MAX_MICROBATCH */
        return -1;
    size_t p = d >= 2 && name[d - 2] == 'm' && name[d - 1] == 'b' ? d - 2
               : d >= 1 && name[d - 1] == 't'                     ? d - 1
                                                                  : SIZE_MAX;
    if (p == SIZE_MAX || p == 0 || (name[p - 1] != ' ' && name[p - 1] != '.'))
        return -1;
    long k = strtol(name + d, NULL, 10);
    return k <= MAX_MICROBATCH ? (int)k : -1;
}

/* Each slice's item, into items[t->n_events]: its args.microbatch and
 * args.chunk (range-checked by trace_load); a slice without them falls
 * back to the microbatch its name spells, chunk 0. */
static void slice_items(const trace_data *t, item *items) {
    for (int i = 0; i < t->n_events; i++) {
        const trace_event *e = &t->events[i];
        items[i] = e->has_microbatch ? (item){e->microbatch, e->chunk}
                                     : (item){name_microbatch(e->name), 0};
    }
}

/* ------------------------------------------------------------ script */

typedef struct layout {
    double t0;         /* µs at x = 0 */
    double xmax;       /* ms, the right end of the time axis */
    int height;        /* pixels */
    int left, right;   /* the plot's edges, pixels from the left */
    double px_per_ms;
    bool chunk_labels; /* "3/c1": the trace has more than one chunk */
    bool used[N_PHASES]; /* phases with slices: the key's entries */
} layout;

static layout plan(const trace_data *t, const item *items) {
    layout l = {.t0 = t->events[0].start, .chunk_labels = t->chunks > 1};
    double end = t->events[0].end;
    for (int i = 0; i < t->n_events; i++) {
        if (t->events[i].start < l.t0)
            l.t0 = t->events[i].start;
        if (t->events[i].end > end)
            end = t->events[i].end;
        if (items[i].chunk > 0) /* chunks, though otherData has no count */
            l.chunk_labels = true;
        l.used[phase_index(t->events[i].phase)] = true;
    }
    /* The axis ends just past the last slice, not at gnuplot's next round
     * tic (up to a fifth of the width lost to the labels); a trace of
     * instantaneous slices still gets a range gnuplot accepts. */
    l.xmax = (end - l.t0) / 1e3 * 1.01;
    if (!(l.xmax > 0))
        l.xmax = 1e-3;
    /* The track names are the y tics, left of the plot. */
    size_t longest = 0;
    for (int k = 0; k < t->n_tracks; k++) {
        size_t n = strlen(t->tracks[k].name);
        if (n > longest)
            longest = n;
    }
    int left = 24 + CHAR_PX * (int)(longest < 60 ? longest : 60);
    l.left = left < WIDTH_PX / 3 ? left : WIDTH_PX / 3;
    /* The key lies right of the plot (see put_script), in one column:
     * the picture is made tall enough for its entries, so that gnuplot
     * does not wrap it into more columns than the margin holds. */
    int entries = 0;
    size_t title = 0;
    for (int p = 0; p < N_PHASES; p++)
        if (l.used[p]) {
            entries++;
            if (strlen(PHASES[p].title) > title)
                title = strlen(PHASES[p].title);
        }
    l.right = WIDTH_PX - RIGHT_MARGIN_PX - KEY_GAP_PX -
              CHAR_PX * (int)(title + KEY_EXTRA_CHARS);
    l.height = HEIGHT_BASE_PX + ROW_PX * t->n_tracks;
    if (l.height < HEIGHT_KEY_PX + KEY_ENTRY_PX * entries)
        l.height = HEIGHT_KEY_PX + KEY_ENTRY_PX * entries;
    l.px_per_ms = (l.right - l.left) / l.xmax;
    return l;
}

/* One label span: consecutive slices of one track with the same phase
 * and item, e.g. all the ops of a stage's forward of microbatch 3, so the
 * item is labelled once and where its whole extent has room. */
typedef struct span {
    int phase, row;
    item it;
    double start, end; /* ms from t0 */
    double busy;       /* ms of it covered by slices */
} span;

/* Writes the span's label when its text fits; returns the labels
 * written (0 or 1). */
static int put_label(FILE *g, const layout *l, const span *s) {
    if (s->it.microbatch < 0)
        return 0;
    char text[32];
    int n = l->chunk_labels
                ? snprintf(text, sizeof text, "%d/c%d", s->it.microbatch,
                           s->it.chunk)
                : snprintf(text, sizeof text, "%d", s->it.microbatch);
    double width = s->end - s->start;
    /* White text needs its slices beneath it: a run of slices thinner
     * than their gaps draws a pale tint it would vanish on. */
    if (width * l->px_per_ms < n * CHAR_PX + LABEL_PAD_PX ||
        s->busy < MIN_BUSY * width)
        return 0;
    fprintf(g, "%.6f %d \"%s\" %ld\n", (s->start + s->end) / 2, s->row, text,
            PHASES[s->phase].text);
    return 1;
}

/* The $LABELS datablock; returns how many labels it holds. */
static int put_labels(FILE *g, const trace_data *t, const item *items,
                      const layout *l) {
    /* Slices whose gap is at most MERGE_GAP_PX merge: the gaps between
     * one item's ops (dispatch, tens of µs) draw as hairlines, and the
     * item reads as one block. Wider gaps, of a slice waiting for data,
     * show: the pieces are labelled on their own, where they fit. */
    double merge_gap = MERGE_GAP_PX / l->px_per_ms;
    int labels = 0;
    fputs("$LABELS << EOD\n", g);
    for (int k = 0; k < t->n_tracks; k++) {
        const trace_track *track = &t->tracks[k];
        span cur = {.phase = -1};
        for (int j = 0; j < track->n_events; j++) {
            int i = track->events[j];
            const trace_event *e = &t->events[i];
            double s = (e->start - l->t0) / 1e3, f = (e->end - l->t0) / 1e3;
            int p = phase_index(e->phase);
            if (p == cur.phase && items[i].microbatch == cur.it.microbatch &&
                items[i].chunk == cur.it.chunk && s - cur.end <= merge_gap) {
                /* Slices by start: what lies beyond cur.end is new
                 * (a nested slice adds nothing). */
                double from = s > cur.end ? s : cur.end;
                if (f > from)
                    cur.busy += f - from;
                if (f > cur.end)
                    cur.end = f;
                continue;
            }
            if (cur.phase >= 0)
                labels += put_label(g, l, &cur);
            cur = (span){p, t->n_tracks - 1 - k, items[i], s, f, f - s};
        }
        if (cur.phase >= 0)
            labels += put_label(g, l, &cur);
    }
    fputs("EOD\n", g);
    return labels;
}

typedef struct gantt {
    const trace_data *t;
    const item *items;
    layout l;
} gantt;

static void put_script(FILE *g, const char *out, void *context) {
    const gantt *c = context;
    const trace_data *t = c->t;
    const layout *l = &c->l;
    int rows = t->n_tracks;
    cli_gnuplot_png_terminal(g, WIDTH_PX, l->height, out);
    char title[256];
    snprintf(title, sizeof title, "schedule %s: %d stage(s), %d microbatch(es)",
             t->schedule ? t->schedule : "?", t->stages, t->microbatches);
    fputs("set title ", g);
    cli_gnuplot_quote(g, t->schedule ? title : "trace");
    /* The key goes right of the plot, in the margin plan() reserved for
     * it: below the plot gnuplot 5.4 draws it over the time axis's label,
     * and above it, over the title. It is placed at the screen position
     * KEY_GAP_PX right of the border, as `set key outside` would set it
     * against the border and 5.4 has no key offset. The margins left and
     * right are fixed (see the top of the file); top and bottom stay
     * automatic, for the title and the time axis. */
    fprintf(g,
            "\nset xlabel 'time (ms)'\nunset ylabel\nset xrange [0:%.6f]\n"
            "set yrange [-0.6:%f]\nset grid xtics\n"
            "set lmargin at screen %.6f\nset rmargin at screen %.6f\n"
            "set key at screen %.6f, graph 1 left top vertical Left reverse\n"
            "set style fill solid 1.0 noborder\nset ytics nomirror (",
            l->xmax, rows - 0.4, (double)l->left / WIDTH_PX,
            (double)l->right / WIDTH_PX,
            (double)(l->right + KEY_GAP_PX) / WIDTH_PX);
    for (int k = 0; k < rows; k++) {
        cli_gnuplot_quote(g, t->tracks[k].name);
        fprintf(g, " %d%s", rows - 1 - k, k + 1 < rows ? ", " : ")\n");
    }
    /* One datablock per phase: x centre, y, half width, half height. */
    for (int p = 0; p < N_PHASES; p++) {
        fprintf(g, "%s << EOD\n", PHASES[p].block);
        for (int i = 0; i < t->n_events; i++) {
            const trace_event *ev = &t->events[i];
            if (phase_index(ev->phase) != p)
                continue;
            double s = (ev->start - l->t0) / 1e3, e = (ev->end - l->t0) / 1e3;
            fprintf(g, "%.6f %d %.6f 0.35\n", (s + e) / 2, rows - 1 - ev->track,
                    (e - s) / 2);
        }
        fputs("EOD\n", g);
    }
    /* Labels: x, y, text, text colour (0xRRGGBB). */
    int labels = put_labels(g, t, c->items, l);
    fputs("plot", g);
    const char *sep = " ";
    for (int p = 0; p < N_PHASES; p++) {
        if (!l->used[p])
            continue; /* an empty block is an error to plot */
        fprintf(g, "%s%s using 1:2:3:4 with boxxyerror lc rgb '%s' title '%s'",
                sep, PHASES[p].block, PHASES[p].color, PHASES[p].title);
        sep = ", \\\n     ";
    }
    if (labels > 0) /* after the boxes, so that the text lies on them */
        fprintf(g, "%s$LABELS using 1:2:3:4 with labels tc rgb variable "
                   "notitle", sep);
    fputs("\n", g);
}

/* PLEIADES_GANTT_SCRIPT=PATH: the script, as it would draw png_path,
 * also goes to PATH (tests read its labels and layout; `gnuplot PATH`
 * redraws the chart). Written first, so it exists even when gnuplot is
 * missing. */
static bool dump_script(const char *png_path, gantt *c) {
    const char *path = getenv("PLEIADES_GANTT_SCRIPT");
    if (!path || !*path)
        return true;
    FILE *f = fopen(path, "w");
    if (f) {
        put_script(f, png_path, c);
        if (fclose(f) == 0)
            return true;
    }
    cli_error("PLEIADES_GANTT_SCRIPT: cannot write '%s': %s", path,
              strerror(errno));
    return false;
}

bool trace_gantt_png(const trace_data *t, const char *png_path) {
    item *items = malloc(((size_t)t->n_events + 1) * sizeof *items);
    if (!items) {
        cli_error("--png: out of memory");
        return false;
    }
    slice_items(t, items);
    gantt c = {t, items, plan(t, items)};
    bool ok = dump_script(png_path, &c) &&
              cli_gnuplot_png("--png", png_path, put_script, &c);
    free(items);
    return ok;
}
