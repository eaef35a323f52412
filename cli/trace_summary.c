/* `pleiades trace-summary FILE.json [--png OUT.png]`; see trace_summary.h.
 *
 * Definitions (all over the trace's slices, times from their timestamps):
 *   span          first slice start to last slice end, whole trace;
 *   busy (track)  time covered by the track's slices, idle = span − busy;
 *   stage tasks   slices whose args.stage is the stage, optimizer excluded;
 *   stage span    the stage's last task end − its first task start;
 *   bubble        (w · span − busy) / busy over the stage's tasks, w the
 *                 number of tracks that ran them: idle time per unit of
 *                 work, the quantity 1F1B's (p−1)/m describes (w = 1 for a
 *                 pipeline stage of one worker, where this is
 *                 (span − busy) / busy);
 *   stage idle    a pipeline stage of several workers: (span − any) / any,
 *                 `any` the time at least one of them was busy — what a
 *                 schedule's theory describes there, since its workers
 *                 overlap consecutive items only where the data allows;
 *   critical path the heaviest chain of slices through the edges the trace
 *                 has — flows, and each slice to the next on its track —
 *                 weighted by duration;
 *   idle by cause a track's idle split by the slices' args.ready_ts (see
 *                 track_idle_causes): the span's head and tail, waiting
 *                 for dependencies, and the time between a StarPU task's
 *                 end and the start of a next one that was already ready.
 * The theoretical bubble assumes every stage is busy from the first
 * forward of the pipeline to its last backward, so the bubble over the
 * whole step's span is printed as well: over its own span the last stage
 * of a 1F1B pipeline looks bubble-free. */
#include "trace_summary.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "flags.h"
#include "trace_gantt.h"
#include "trace_load.h"

typedef struct summary_options {
    const char *png;
} summary_options;

static const cli_flag ROWS[] = {
    {"png", "OUT.png", CLI_PATH, CLI_FIELD(CLI_DEST_COMMAND, summary_options, png),
     .what = "a file name", .help = "also draw a Gantt chart (needs gnuplot)"},
    {"help", NULL, CLI_HELP, .help = "show this help and exit"},
};

static void flags_init(cli_flags *f, summary_options *o) {
    *o = (summary_options){NULL};
    const cli_flag_table table = CLI_TABLE(ROWS);
    void *const dest[CLI_N_DESTS] = {o, NULL, NULL, NULL};
    cli_flags_init(f, &table, 1, dest);
}

void cli_trace_summary_usage(FILE *out) {
    fprintf(out,
            "Usage: %s trace-summary FILE.json [--png OUT.png]\n"
            "\n"
            "Summarise a Chrome trace written by pl_engine_write_trace: busy "
            "and idle time\nper worker and where the idle time went (waiting "
            "for dependencies, or between\ntasks that were ready), the measured "
            "pipeline bubble per stage against the\nschedule's theoretical "
            "one, and the critical path through the trace's\ndependencies.\n"
            "\n",
            CLI_PROGRAM);
    cli_flags f;
    summary_options o;
    flags_init(&f, &o);
    cli_flags_usage(&f, out);
}

/* --------------------------------------------------------- stats */

/* Time covered by slices (a track's nested or overlapping slices count
 * once); `idx` is sorted by start. */
static double covered(const trace_data *t, const int *idx, int n) {
    double total = 0, cur_s = 0, cur_e = -1;
    bool open = false;
    for (int i = 0; i < n; i++) {
        const trace_event *ev = &t->events[idx[i]];
        if (open && ev->start <= cur_e) {
            if (ev->end > cur_e)
                cur_e = ev->end;
            continue;
        }
        if (open)
            total += cur_e - cur_s;
        cur_s = ev->start;
        cur_e = ev->end;
        open = true;
    }
    return open ? total + cur_e - cur_s : 0;
}

static void span_of(const trace_data *t, double *first, double *last) {
    *first = t->events[0].start;
    *last = t->events[0].end;
    for (int i = 1; i < t->n_events; i++) {
        if (t->events[i].start < *first)
            *first = t->events[i].start;
        if (t->events[i].end > *last)
            *last = t->events[i].end;
    }
}

static void print_tracks(const trace_data *t, double span) {
    printf("\n%-28s %6s %11s %11s %7s\n", "Tracks", "tasks", "busy ms",
           "idle ms", "busy");
    for (int k = 0; k < t->n_tracks; k++) {
        const trace_track *tr = &t->tracks[k];
        double busy = covered(t, tr->events, tr->n_events);
        printf("  %-26.26s %6d %11.3f %11.3f %6.1f%%\n", tr->name, tr->n_events,
               busy / 1e3, (span - busy) / 1e3,
               span > 0 ? 100 * busy / span : 0);
    }
}

/* Task time by phase (every track's slices, summed): what each kind of
 * work cost, e.g. the share of activation recomputation's re-runs (R). */
static void print_phases(const trace_data *t) {
    static const struct {
        char phase;
        const char *name;
    } phases[] = {{'F', "forward"}, {'L', "loss"}, {'B', "input gradient"},
                  {'W', "weight gradient"}, {'R', "recomputation"}, {'O', "optimizer"},
                  {'C', "collective"}, {'M', "memory"}, {'?', "other"}};
    enum { N = sizeof phases / sizeof phases[0] };
    double ms[N] = {0}, total = 0;
    int n[N] = {0};
    for (int i = 0; i < t->n_events; i++) {
        const trace_event *ev = &t->events[i];
        if (!isfinite(ev->end) || ev->end < ev->start) continue;
        int k = N - 1;
        for (int j = 0; j < N - 1; j++)
            if (phases[j].phase == ev->phase) k = j;
        ms[k] += (ev->end - ev->start) / 1e3;
        n[k]++;
        total += (ev->end - ev->start) / 1e3;
    }
    printf("\n%-28s %6s %11s %7s\n", "Phases", "tasks", "time ms", "share");
    for (int k = 0; k < N; k++)
        if (n[k] > 0)
            printf("  %-26s %6d %11.3f %6.1f%%\n", phases[k].name, n[k], ms[k],
                   total > 0 ? 100 * ms[k] / total : 0);
}

static const trace_data *order_data; /* qsort has no context argument */

static int cmp_start(const void *pa, const void *pb) {
    const trace_event *a = &order_data->events[*(const int *)pa];
    const trace_event *b = &order_data->events[*(const int *)pb];
    if (a->start != b->start)
        return a->start < b->start ? -1 : 1;
    if (a->end != b->end)
        return a->end < b->end ? -1 : 1;
    return *(const int *)pa - *(const int *)pb;
}

static bool stage_task(const trace_event *ev) {
    return ev->stage >= 0 && ev->phase != 'O' && ev->phase != 'M';
}

/* The stage's work: busy time summed over its tracks, the time at least
 * one of them was busy (the same with one worker), the tracks, and its
 * first and last task. */
typedef struct stage_work {
    double busy, any_busy, first, last;
    int tasks, workers;
} stage_work;

/* The work of one stage's tasks idx[0..n), sorted by track and within a
 * track by start; scratch holds n entries. */
static stage_work measure_stage(const trace_data *t, const int *idx, int n, int *scratch) {
    stage_work w = {0, 0, 0, 0, 0, 0};
    for (int i = 0; i < n;) {
        int track = t->events[idx[i]].track, end = i;
        for (; end < n && t->events[idx[end]].track == track; end++) {
            const trace_event *ev = &t->events[idx[end]];
            if (w.tasks == 0 || ev->start < w.first)
                w.first = ev->start;
            if (w.tasks == 0 || ev->end > w.last)
                w.last = ev->end;
            w.tasks++;
        }
        w.busy += covered(t, idx + i, end - i);
        w.workers++;
        i = end;
    }
    memcpy(scratch, idx, (size_t)n * sizeof *scratch);
    order_data = t;
    qsort(scratch, (size_t)n, sizeof *scratch, cmp_start);
    w.any_busy = covered(t, scratch, n);
    return w;
}

/* By stage, then track, then start: each stage's tasks in one run, its
 * tracks' in runs within it. */
static int cmp_stage_track(const void *pa, const void *pb) {
    const trace_event *a = &order_data->events[*(const int *)pa];
    const trace_event *b = &order_data->events[*(const int *)pb];
    if (a->stage != b->stage)
        return a->stage < b->stage ? -1 : 1;
    if (a->track != b->track)
        return a->track < b->track ? -1 : 1;
    return cmp_start(pa, pb);
}

/* A stage of several workers is in a bubble only while none of them
 * works: the figure comparable to a schedule's theory. */
static double stage_idle(const stage_work *w, double span) {
    return w->any_busy > 0 ? (span - w->any_busy) / w->any_busy : 0;
}

static double bubble(const stage_work *w, double span) {
    return w->busy > 0 ? (w->workers * span - w->busy) / w->busy : 0;
}

static bool print_stages(const trace_data *t) {
    int max_stage = t->stages - 1;
    double step_first = 0, step_last = 0;
    bool any = false;
    for (int i = 0; i < t->n_events; i++) {
        const trace_event *ev = &t->events[i];
        if (!stage_task(ev))
            continue;
        if (ev->stage > max_stage)
            max_stage = ev->stage;
        if (!any || ev->start < step_first)
            step_first = ev->start;
        if (!any || ev->end > step_last)
            step_last = ev->end;
        any = true;
    }
    printf("\nStages: bubble = (span - busy) / busy from the stage's first "
           "to last task\n");
    if (!any) {
        printf("  no slices with args.stage: no per-stage bubble\n");
        return true;
    }
    /* The stage tasks grouped by stage by one sort, rather than every
     * track scanned once per stage (up to TRACE_MAX_STAGES times over
     * hundreds of thousands of tracks). */
    int *idx = malloc(2 * (size_t)t->n_events * sizeof *idx);
    if (!idx)
        return false;
    int *scratch = idx + t->n_events, n_idx = 0;
    for (int i = 0; i < t->n_events; i++)
        if (stage_task(&t->events[i]))
            idx[n_idx++] = i;
    order_data = t;
    qsort(idx, (size_t)n_idx, sizeof *idx, cmp_stage_track);
    int at = 0; /* the next stage's first task in idx */
    char theory[32] = "n/a";
    if (t->has_theory)
        snprintf(theory, sizeof theory, "%.4f", t->theoretical_bubble);
    if (t->has_theory && t->has_item_times)
        printf("  theoretical bubble %.4f: %s's formula with the measured mean item times "
               "F %.3f ms, B %.3f ms, W %.3f ms\n",
               t->theoretical_bubble, t->schedule ? t->schedule : "the schedule",
               t->item_us[0] / 1e3, t->item_us[1] / 1e3, t->item_us[2] / 1e3);
    for (int s = 0; s <= max_stage; s++) {
        while (at < n_idx && t->events[idx[at]].stage < s)
            at++;
        int n = 0;
        while (at + n < n_idx && t->events[idx[at + n]].stage == s)
            n++;
        stage_work w = measure_stage(t, idx + at, n, scratch);
        if (w.tasks == 0) {
            printf("  stage %d: bubble n/a (no tasks)\n", s);
            continue;
        }
        printf(
            "  stage %d: bubble %.4f measured, %s theoretical; span %.3f ms, "
            "busy %.3f ms, %d tasks on %d worker%s; over the step's span "
            "%.4f\n",
            s, bubble(&w, w.last - w.first), theory, (w.last - w.first) / 1e3,
            w.busy / 1e3, w.tasks, w.workers, w.workers == 1 ? "" : "s",
            bubble(&w, step_last - step_first));
        if (w.workers > 1 && t->stages > 1)
            printf("  stage %d: idle with none of its %d workers busy %.4f over its span, "
                   "%.4f over the step's (the bubble a schedule's theory describes)\n", s,
                   w.workers,
                   stage_idle(&w, w.last - w.first), stage_idle(&w, step_last - step_first));
    }
    free(idx);
    return true;
}

/* ------------------------------------------------ critical path */


static int cmp_edge_target(const void *pa, const void *pb) {
    const trace_edge *a = pa, *b = pb;
    return a->to - b->to;
}

/* Longest path in the DAG of slices; edges are kept only when they go
 * forward in start order, which is a topological order of any trace a
 * real execution produced (and turns a malformed trace's cycle into a
 * dropped edge rather than a hang). Writes the path, last slice first,
 * into path[]; returns its length. */
static int critical_path(const trace_data *t, int *path, double *length) {
    int n = t->n_events, n_edges = 0;
    int *order = malloc(n * sizeof *order), *pos = malloc(n * sizeof *pos);
    int *pred = malloc(n * sizeof *pred),
        *first = malloc((n + 1) * sizeof *first);
    double *best = malloc(n * sizeof *best);
    trace_edge *edges = malloc((n + t->n_flows + 1) * sizeof *edges);
    int count = -1;
    if (!order || !pos || !pred || !first || !best || !edges)
        goto done;
    for (int i = 0; i < n; i++)
        order[i] = i;
    order_data = t;
    qsort(order, n, sizeof *order, cmp_start);
    for (int i = 0; i < n; i++)
        pos[order[i]] = i;
    /* Edges by position: same-track successors, then flows. */
    for (int k = 0; k < t->n_tracks; k++)
        for (int i = 1; i < t->tracks[k].n_events; i++)
            edges[n_edges++] = (trace_edge){pos[t->tracks[k].events[i - 1]],
                                            pos[t->tracks[k].events[i]]};
    for (int i = 0; i < t->n_flows; i++)
        edges[n_edges++] =
            (trace_edge){pos[t->flows[i].from], pos[t->flows[i].to]};
    qsort(edges, n_edges, sizeof *edges, cmp_edge_target);
    for (int v = 0, e = 0; v <= n; v++) {
        while (e < n_edges && edges[e].to < v)
            e++;
        first[v] = e;
    }
    int end = 0;
    for (int v = 0; v < n; v++) {
        const trace_event *ev = &t->events[order[v]];
        best[v] = ev->end - ev->start;
        pred[v] = -1;
        for (int e = first[v]; e < first[v + 1]; e++) {
            int u = edges[e].from;
            if (u >= v)
                continue;
            if (best[u] + (ev->end - ev->start) > best[v]) {
                best[v] = best[u] + (ev->end - ev->start);
                pred[v] = u;
            }
        }
        if (best[v] > best[end])
            end = v;
    }
    count = 0;
    for (int v = n ? end : -1; v >= 0; v = pred[v]) /* no slices: no path */
        path[count++] = order[v];
    *length = n ? best[end] : 0.0;
done:
    free(order);
    free(pos);
    free(pred);
    free(first);
    free(best);
    free(edges);
    return count;
}

/* Names joined by arrows, wrapped; a long path shows its ends. */
static void print_path_names(const trace_data *t, const int *path, int count) {
    enum { SHOWN = 8, WIDTH = 78 };
    int col = printf("  ");
    bool first = true;
    for (int i = count - 1; i >= 0; i--) {
        int from_start = count - 1 - i;
        char item[128];
        if (count > 2 * SHOWN && from_start == SHOWN)
            snprintf(item, sizeof item, "... (%d more) ...", count - 2 * SHOWN);
        else if (count > 2 * SHOWN && from_start > SHOWN && i >= SHOWN)
            continue;
        else
            snprintf(item, sizeof item, "%s", t->events[path[i]].name);
        if (!first) {
            bool wrap = col + 4 + (int)strlen(item) > WIDTH;
            if (wrap) {
                printf(" ->\n  ");
                col = 2;
            } else {
                col += printf(" -> ");
            }
        }
        col += printf("%s", item);
        first = false;
    }
    printf("\n");
}

static bool print_critical_path(const trace_data *t, double span) {
    int *path = malloc(t->n_events * sizeof *path);
    double length = 0;
    int count = path ? critical_path(t, path, &length) : -1;
    if (count < 0) {
        free(path);
        return false;
    }
    printf("\nCritical path: %.3f ms over %d tasks (%.1f%% of the span), "
           "through %d flows and track order\n",
           length / 1e3, count, span > 0 ? 100 * length / span : 0, t->n_flows);
    print_path_names(t, path, count);
    free(path);
    return true;
}

/* ------------------------------------------------------ command */

/* The rank a track belongs to in a trace merged over ranks ("rank 2 /
 * stage 1 / CPU 0"), else -1 (one rank's own trace). */
static int track_rank(const trace_data *t, int track) {
    const char *name = t->tracks[track].name;
    int rank = -1, used = 0;
    if (name && sscanf(name, "rank %d /%n", &rank, &used) == 1 && used > 0 && rank >= 0)
        return rank;
    return -1;
}

typedef struct comm_totals {
    int n;
    double total, hidden, waited; /* µs */
} comm_totals;

/* The union of some compute slices as disjoint intervals by start, with
 * the time they cover before each: the part of a collective that
 * computation hid is then two binary searches, not a scan of every
 * compute slice per collective (quadratic in a trace merged over many
 * ranks, i.e. many tracks). */
typedef struct cover {
    double *lo, *hi, *before;
    int n;
} cover;

/* Builds the union of slices comp[0..n) (sorted by start) into c, whose
 * arrays hold n entries. */
static void cover_build(const trace_data *t, const int *comp, int n, cover *c) {
    c->n = 0;
    double total = 0;
    for (int i = 0; i < n; i++) {
        const trace_event *w = &t->events[comp[i]];
        if (c->n > 0 && w->start <= c->hi[c->n - 1]) {
            if (w->end > c->hi[c->n - 1]) c->hi[c->n - 1] = w->end;
            continue;
        }
        if (c->n > 0) total += c->hi[c->n - 1] - c->lo[c->n - 1];
        c->lo[c->n] = w->start;
        c->hi[c->n] = w->end;
        c->before[c->n] = total;
        c->n++;
    }
}

/* Time the union covers before x. */
static double cover_until(const cover *c, double x) {
    int lo = 0, hi = c->n; /* first interval starting after x */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (c->lo[mid] <= x) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return 0;
    double end = c->hi[lo - 1] < x ? c->hi[lo - 1] : x;
    return c->before[lo - 1] + (end - c->lo[lo - 1]);
}

/* The collectives comm[0..n): their time, their waits, and how much of
 * their time the computation in `c` covered. */
static comm_totals comm_of(const trace_data *t, const int *comm, int n, const cover *c) {
    comm_totals r = {0};
    for (int i = 0; i < n; i++) {
        const trace_event *ev = &t->events[comm[i]];
        r.n++;
        r.total += ev->end - ev->start;
        r.waited += ev->wait;
        r.hidden += cover_until(c, ev->end) - cover_until(c, ev->start);
    }
    return r;
}

static void print_comm_line(const char *what, const char *indent, const comm_totals *c) {
    printf("%s%d collective(s), %.3f ms, %.1f%% of it hidden behind computation\n", what, c->n,
           c->total / 1e3, c->total > 0 ? 100 * c->hidden / c->total : 0.0);
    /* What the slices hold: the slower ranks' lateness, or the data. */
    printf("%s%.3f ms of it waiting for the other ranks to arrive, %.3f ms moving and "
           "summing data\n", indent, c->waited / 1e3, (c->total - c->waited) / 1e3);
}

static const int *order_rank; /* each track's rank, for cmp_rank_start */

/* By the rank of the slice's track, then by start. */
static int cmp_rank_start(const void *pa, const void *pb) {
    int ra = order_rank[order_data->events[*(const int *)pa].track];
    int rb = order_rank[order_data->events[*(const int *)pb].track];
    if (ra != rb) return ra < rb ? -1 : 1;
    return cmp_start(pa, pb);
}

/* Data parallelism: the collectives' time (waits for the other ranks
 * included, and told apart where the trace has args.wait_us) and how much
 * of it computation covered; in a trace merged over ranks (stages across
 * ranks), each rank's too, against that rank's own computation. Nothing
 * when the trace has no collective. Slices are grouped by rank by
 * sorting: O(n log n) whatever the number of ranks and tracks. */
static bool print_communication(const trace_data *t) {
    int n_comm = 0, n_comp = 0;
    for (int i = 0; i < t->n_events; i++) {
        if (t->events[i].phase == 'C') n_comm++;
        else n_comp++;
    }
    if (n_comm == 0) return true;
    size_t room = (size_t)(n_comp ? n_comp : 1);
    int *comp = malloc(room * sizeof *comp);
    int *comm = malloc((size_t)n_comm * sizeof *comm);
    int *rank_of = malloc((size_t)(t->n_tracks ? t->n_tracks : 1) * sizeof *rank_of);
    cover c = {malloc(room * sizeof *c.lo), malloc(room * sizeof *c.hi),
               malloc(room * sizeof *c.before), 0};
    bool ok = comp && comm && rank_of && c.lo && c.hi && c.before;
    if (ok) {
        for (int k = 0; k < t->n_tracks; k++) rank_of[k] = track_rank(t, k);
        int k = 0, m = 0;
        bool ranked = false; /* some collective lies on a rank's track */
        for (int i = 0; i < t->n_events; i++) {
            if (t->events[i].phase != 'C') {
                comp[k++] = i;
            } else {
                comm[m++] = i;
                ranked = ranked || rank_of[t->events[i].track] >= 0;
            }
        }
        order_data = t;
        order_rank = rank_of;
        printf("\n");
        if (!ranked) {
            qsort(comp, (size_t)n_comp, sizeof *comp, cmp_start);
            cover_build(t, comp, n_comp, &c);
            comm_totals all = comm_of(t, comm, n_comm, &c);
            print_comm_line("Communication (data parallelism): ", "  ", &all);
        } else {
            printf("Communication (data parallelism), per rank (hidden behind that rank's own "
                   "computation):\n");
            qsort(comp, (size_t)n_comp, sizeof *comp, cmp_rank_start);
            qsort(comm, (size_t)n_comm, sizeof *comm, cmp_rank_start);
            /* Both lists by rank: walk them together, a rank at a time
             * (the collectives on tracks of no rank are left out). */
            int i = 0, j = 0;
            while (i < n_comm) {
                int rank = rank_of[t->events[comm[i]].track], end = i;
                while (end < n_comm && rank_of[t->events[comm[end]].track] == rank) end++;
                if (rank >= 0) {
                    while (j < n_comp && rank_of[t->events[comp[j]].track] < rank) j++;
                    int from = j;
                    while (j < n_comp && rank_of[t->events[comp[j]].track] == rank) j++;
                    cover_build(t, comp + from, j - from, &c);
                    comm_totals totals = comm_of(t, comm + i, end - i, &c);
                    char what[48];
                    snprintf(what, sizeof what, "  rank %d: ", rank);
                    print_comm_line(what, "    ", &totals);
                }
                i = end;
            }
        }
    }
    free(comp);
    free(comm);
    free(rank_of);
    free(c.lo);
    free(c.hi);
    free(c.before);
    return ok;
}

static int cmp_double(const void *pa, const void *pb) {
    double a = *(const double *)pa, b = *(const double *)pb;
    return (a > b) - (a < b);
}

/* Where a track's idle time went, from its slices' args.ready_ts. Slices
 * of one fused StarPU task (the same args.fused_task), and slices that
 * overlap, form one unit: the worker ran them back to back. Between two
 * units, the time before the second was ready is spent waiting for its
 * dependencies (nothing was ready for this worker), and the rest, from
 * max(end of the first, ready) to its start, between tasks: the worker
 * finishing one StarPU task and starting the next (StarPU's job
 * termination, the scheduler's pop, fetching the data: a transfer when it
 * lies on another memory node, and under a memory limit the policy
 * holding it until memory frees), plus the fused tasks' own steps between
 * their ops. Head and tail are the span's ends. They add up to the
 * track's idle time. */
typedef struct idle_causes {
    double head, tail, deps, between, unknown;
    int transitions;  /* between two units whose second has ready_ts */
    double median_us; /* of those transitions' `between` part */
} idle_causes;

static bool track_idle_causes(const trace_data *t, const trace_track *tr, double first,
                              double last, idle_causes *c) {
    *c = (idle_causes){0};
    if (tr->n_events == 0) {
        c->head = last - first;
        return true;
    }
    double *between = malloc((size_t)tr->n_events * sizeof *between);
    if (!between)
        return false;
    const trace_event *ev0 = &t->events[tr->events[0]];
    double unit_end = ev0->end, fused = ev0->fused;
    c->head = ev0->start - first;
    for (int i = 1; i < tr->n_events; i++) {
        const trace_event *ev = &t->events[tr->events[i]];
        bool same_task = fused >= 0 && ev->fused == fused;
        if (same_task || ev->start <= unit_end) {
            if (ev->start > unit_end) /* the fused task between two of its ops */
                c->between += ev->start - unit_end;
            if (ev->end > unit_end)
                unit_end = ev->end;
            continue;
        }
        double gap = ev->start - unit_end;
        if (isnan(ev->ready)) {
            c->unknown += gap;
        } else {
            double picked = ev->ready > unit_end ? ev->ready : unit_end;
            c->deps += picked - unit_end;
            c->between += ev->start - picked;
            between[c->transitions++] = ev->start - picked;
        }
        unit_end = ev->end;
        fused = ev->fused;
    }
    c->tail = last - unit_end;
    if (c->transitions > 0) {
        qsort(between, (size_t)c->transitions, sizeof *between, cmp_double);
        c->median_us = between[c->transitions / 2];
    }
    free(between);
    return true;
}

static bool print_idle_causes(const trace_data *t, double first, double last) {
    bool any_ready = false;
    for (int i = 0; i < t->n_events && !any_ready; i++)
        any_ready = !isnan(t->events[i].ready);
    if (!any_ready) {
        printf("\n(no args.ready_ts in this trace: idle time is not split by cause)\n");
        return true;
    }
    printf("\nIdle by cause (adding up to each track's idle): the span's head and tail;\n"
           "deps, waiting for the next task's dependencies (nothing ready for the track);\n"
           "between tasks, the next one ready while the worker ended a StarPU task and\n"
           "started it (under placement also memory waits and transfers; gaps: how\n"
           "many, a fused task once)\n");
    printf("%-28s %9s %9s %10s %11s %6s %10s\n", "Track", "head ms", "tail ms",
           "deps ms", "between ms", "gaps", "median us");
    for (int k = 0; k < t->n_tracks; k++) {
        const trace_track *tr = &t->tracks[k];
        idle_causes c;
        if (!track_idle_causes(t, tr, first, last, &c))
            return false;
        printf("  %-26.26s %9.3f %9.3f %10.3f %11.3f %6d %10.1f", tr->name, c.head / 1e3,
               c.tail / 1e3, c.deps / 1e3, c.between / 1e3, c.transitions, c.median_us);
        if (c.unknown > 0)
            printf("  (+%.3f ms before slices without ready_ts)", c.unknown / 1e3);
        printf("\n");
    }
    return true;
}

/* How many StarPU tasks ran the trace's events: events that name a fused
 * task (args.fused_task) count once per distinct id, the others once each.
 * Printed only when some task was fused. */
static bool print_fused(const trace_data *t) {
    double *ids = malloc((size_t)(t->n_events ? t->n_events : 1) * sizeof *ids);
    if (!ids)
        return false;
    int n_ids = 0, own = 0;
    for (int i = 0; i < t->n_events; i++) {
        if (t->events[i].fused >= 0)
            ids[n_ids++] = t->events[i].fused;
        else
            own++;
    }
    qsort(ids, (size_t)n_ids, sizeof *ids, cmp_double);
    int distinct = 0;
    for (int i = 0; i < n_ids; i++)
        distinct += i == 0 || ids[i] != ids[i - 1];
    if (n_ids > 0)
        printf("  ran as %d StarPU tasks: %d fused ones holding %d of the tasks above, "
               "%d on their own\n", distinct + own, distinct, n_ids, own);
    free(ids);
    return true;
}

static int summarise(const char *file, const char *png) {
    trace_data t;
    if (!trace_load(file, &t))
        return CLI_EXIT_FAILURE;
    double first, last;
    span_of(&t, &first, &last);
    printf("Trace %s\n", file);
    if (t.schedule)
        printf("  schedule %s: %d stage(s) x %d chunk(s), %d microbatch(es)\n",
               t.schedule, t.stages, t.chunks, t.microbatches);
    printf("  %d tasks on %d tracks, %d flows; span %.3f ms\n", t.n_events,
           t.n_tracks, t.n_flows, (last - first) / 1e3);
    bool ok = print_fused(&t);
    print_tracks(&t, last - first);
    print_phases(&t);
    ok = ok && print_idle_causes(&t, first, last) && print_stages(&t) &&
         print_critical_path(&t, last - first) && print_communication(&t);
    if (!ok)
        cli_error("out of memory");
    if (ok && png) {
        ok = trace_gantt_png(&t, png);
        if (ok)
            printf("\nGantt chart: %s\n", png);
    }
    trace_data_free(&t);
    return ok ? CLI_EXIT_OK : CLI_EXIT_FAILURE;
}

static int usage_error(void) {
    cli_usage_hint("trace-summary");
    return CLI_EXIT_USAGE;
}

int cli_trace_summary(int argc, char **argv) {
    summary_options o;
    cli_flags f;
    flags_init(&f, &o);
    int first = argc;
    switch (cli_flags_parse(&f, argc, argv, &first)) {
    case CLI_PARSE_HELP:
        cli_trace_summary_usage(stdout);
        return CLI_EXIT_OK;
    case CLI_PARSE_ERROR:
        return usage_error();
    case CLI_PARSE_RUN:
        break;
    }
    if (first >= argc) {
        cli_error("missing trace file (FILE.json)");
        return usage_error();
    }
    if (first + 1 < argc) {
        cli_error("unexpected argument '%s'", argv[first + 1]);
        return usage_error();
    }
    return summarise(argv[first], o.png);
}
