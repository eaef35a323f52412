/* Reading a Chrome Trace Event file into slices, tracks and flow edges;
 * see trace_load.h. */
#include "trace_load.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"

/* --------------------------------------------------------- file */

static char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        cli_error("%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *text = malloc(cap);
    while (text) {
        n += fread(text + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *grown = realloc(text, cap *= 2);
        if (!grown)
            free(text);
        text = grown;
    }
    bool bad = !text || ferror(f);
    fclose(f);
    if (bad) {
        cli_error("%s: %s", path, text ? "read failed" : "out of memory");
        free(text);
        return NULL;
    }
    *size = n;
    return text;
}

/* ------------------------------------------------------ loading */

/* Flow points wait until every slice is known: a flow may be written
 * before the slices it binds to. */
typedef struct flow_point {
    char key[96]; /* cat + id */
    char ph;
    bool enclosing; /* bind to the enclosing slice, not the next one */
    int track;
    double ts;
    int seq; /* file order: breaks ties */
} flow_point;

typedef struct loader {
    trace_data *t;
    int cap_events, cap_tracks;
    flow_point *points;
    int n_points, cap_points;
} loader;

static bool reserve(void **items, int *cap, int n, size_t size) {
    if (n < *cap)
        return true;
    int c = *cap ? 2 * *cap : 64;
    void *p = realloc(*items, (size_t)c * size);
    if (!p)
        return false;
    *items = p;
    *cap = c;
    return true;
}

/* pid and tid may be numbers or strings. */
static void id_text(const json_value *v, char *out, size_t size) {
    if (!v)
        snprintf(out, size, "0");
    else if (v->type == JSON_NUMBER)
        snprintf(out, size, "%.17g", v->number);
    else if (v->type == JSON_STRING)
        snprintf(out, size, "%s", v->string);
    else
        snprintf(out, size, "?");
}

static int track_of(loader *ld, const json_value *ev) {
    trace_data *t = ld->t;
    char pid[32], tid[32], key[80];
    id_text(json_get(ev, "pid"), pid, sizeof pid);
    id_text(json_get(ev, "tid"), tid, sizeof tid);
    snprintf(key, sizeof key, "%s/%s", pid, tid);
    for (int i = 0; i < t->n_tracks; i++)
        if (strcmp(t->tracks[i].key, key) == 0)
            return i;
    if (!reserve((void **)&t->tracks, &ld->cap_tracks, t->n_tracks,
                 sizeof *t->tracks))
        return -1;
    trace_track *k = &t->tracks[t->n_tracks];
    *k = (trace_track){.sort_index = 1e300, .open_top = -1};
    snprintf(k->key, sizeof k->key, "%s", key);
    return t->n_tracks++;
}

static bool is_phase(const char *p) {
    return p && p[0] && !p[1] && strchr("FLBWO", p[0]);
}

static char phase_of(const json_value *ev) {
    const char *p = json_get_string(json_get(ev, "args"), "phase", NULL);
    if (is_phase(p))
        return p[0];
    p = json_get_string(ev, "cat", NULL);
    return is_phase(p) ? p[0] : '?';
}

static bool add_event(loader *ld, const json_value *ev, int track, double ts,
                      double end) {
    trace_data *t = ld->t;
    if (!reserve((void **)&t->events, &ld->cap_events, t->n_events,
                 sizeof *t->events))
        return false;
    double stage = json_get_number(json_get(ev, "args"), "stage", -1);
    t->events[t->n_events++] = (trace_event){
        .name = json_get_string(ev, "name", "?"),
        .phase = phase_of(ev),
        .stage = stage >= 0 && stage < 1e6 ? (int)stage : -1,
        .track = track,
        .start = ts,
        .end = end,
        .open_prev = -1,
    };
    return true;
}

static bool add_point(loader *ld, const json_value *ev, char ph, int track,
                      double ts) {
    if (!reserve((void **)&ld->points, &ld->cap_points, ld->n_points,
                 sizeof *ld->points))
        return false;
    flow_point *p = &ld->points[ld->n_points];
    char id[64];
    id_text(json_get(ev, "id"), id, sizeof id);
    snprintf(p->key, sizeof p->key, "%s\x1f%s", json_get_string(ev, "cat", ""),
             id);
    p->ph = ph;
    p->enclosing = ph != 'f' || strcmp(json_get_string(ev, "bp", ""), "e") == 0;
    p->track = track;
    p->ts = ts;
    p->seq = ld->n_points++;
    return true;
}

/* One element of traceEvents. Returns false only when out of memory;
 * events this summary has no use for are skipped. */
static bool load_event(loader *ld, const json_value *ev) {
    const char *ph = json_get_string(ev, "ph", "");
    const json_value *ts = json_get(ev, "ts");
    if (ph[0] == 'M') {
        if (strcmp(json_get_string(ev, "name", ""), "thread_name") &&
            strcmp(json_get_string(ev, "name", ""), "thread_sort_index"))
            return true;
        int k = track_of(ld, ev);
        if (k < 0)
            return false;
        const json_value *args = json_get(ev, "args");
        const char *name = json_get_string(args, "name", NULL);
        if (name)
            ld->t->tracks[k].name = name;
        const json_value *sort = json_get(args, "sort_index");
        if (sort && sort->type == JSON_NUMBER)
            ld->t->tracks[k].sort_index = sort->number;
        return true;
    }
    if (!ts || ts->type != JSON_NUMBER || !ph[0] || ph[1])
        return true;
    if (!strchr("XBEstf", ph[0]))
        return true;
    int k = track_of(ld, ev);
    if (k < 0)
        return false;
    trace_track *track = &ld->t->tracks[k];
    switch (ph[0]) {
    case 'X': {
        double dur = json_get_number(ev, "dur", 0);
        return add_event(ld, ev, k, ts->number,
                         ts->number + (dur > 0 ? dur : 0));
    }
    case 'B':
        if (!add_event(ld, ev, k, ts->number, -1))
            return false;
        ld->t->events[ld->t->n_events - 1].open_prev = track->open_top;
        track->open_top = ld->t->n_events - 1;
        return true;
    case 'E':
        if (track->open_top >= 0) {
            trace_event *open = &ld->t->events[track->open_top];
            open->end = ts->number;
            track->open_top = open->open_prev;
        }
        return true;
    default:
        return add_point(ld, ev, ph[0], k, ts->number);
    }
}

/* ------------------------------------------------ tracks and flows */

static trace_data *sort_data; /* qsort has no context argument */

static int cmp_track(const void *pa, const void *pb) {
    int a = *(const int *)pa, b = *(const int *)pb;
    double sa = sort_data->tracks[a].sort_index;
    double sb = sort_data->tracks[b].sort_index;
    if (sa != sb)
        return sa < sb ? -1 : 1;
    return a - b;
}

static int cmp_event_start(const void *pa, const void *pb) {
    const trace_event *a = &sort_data->events[*(const int *)pa];
    const trace_event *b = &sort_data->events[*(const int *)pb];
    if (a->start != b->start)
        return a->start < b->start ? -1 : 1;
    return (a->end < b->end) - (a->end > b->end); /* outer slice first */
}

static int cmp_point(const void *pa, const void *pb) {
    const flow_point *a = pa, *b = pb;
    int c = strcmp(a->key, b->key);
    if (c)
        return c;
    if (a->ts != b->ts)
        return a->ts < b->ts ? -1 : 1;
    return a->seq - b->seq;
}

/* Drops unfinished "B" slices, puts the tracks in display order (rank[k]:
 * the new place of loading-order track k) and lists each track's slices
 * by start time. */
static bool organise(trace_data *t, int *rank) {
    if (t->n_tracks == 0)
        return true;
    int kept = 0;
    for (int i = 0; i < t->n_events; i++)
        if (t->events[i].end >= t->events[i].start)
            t->events[kept++] = t->events[i];
    t->n_events = kept;
    int *order = malloc((t->n_tracks + 1) * sizeof *order);
    trace_track *sorted = malloc((t->n_tracks + 1) * sizeof *sorted);
    bool ok = order && sorted;
    if (ok) {
        for (int i = 0; i < t->n_tracks; i++)
            order[i] = i;
        sort_data = t;
        qsort(order, t->n_tracks, sizeof *order, cmp_track);
        for (int i = 0; i < t->n_tracks; i++) {
            rank[order[i]] = i;
            sorted[i] = t->tracks[order[i]];
        }
        memcpy(t->tracks, sorted, t->n_tracks * sizeof *sorted);
        for (int i = 0; i < t->n_tracks; i++) /* unnamed: "pid/tid" */
            if (!t->tracks[i].name)
                t->tracks[i].name = t->tracks[i].key;
        for (int i = 0; i < t->n_events; i++)
            t->events[i].track = rank[t->events[i].track];
        for (int i = 0; i < t->n_events; i++)
            t->tracks[t->events[i].track].n_events++;
        for (int k = 0; k < t->n_tracks && ok; k++) {
            t->tracks[k].events =
                malloc((t->tracks[k].n_events + 1) * sizeof(int));
            ok = t->tracks[k].events != NULL;
            t->tracks[k].n_events = 0;
        }
    }
    for (int i = 0; ok && i < t->n_events; i++) {
        trace_track *k = &t->tracks[t->events[i].track];
        k->events[k->n_events++] = i;
    }
    for (int k = 0; ok && k < t->n_tracks; k++)
        qsort(t->tracks[k].events, t->tracks[k].n_events, sizeof(int),
              cmp_event_start);
    free(order);
    free(sorted);
    return ok;
}

/* The slice a flow point binds to, or -1: the innermost slice enclosing
 * ts, or (for a flow end without bp "e") the first slice starting at or
 * after ts. */
static int bind_point(const trace_data *t, const flow_point *p, int track) {
    const trace_track *k = &t->tracks[track];
    int lo = 0, hi = k->n_events; /* first slice starting after ts */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (t->events[k->events[mid]].start <= p->ts)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (!p->enclosing) {
        int i = lo; /* a slice starting exactly at ts counts as next */
        while (i > 0 && t->events[k->events[i - 1]].start == p->ts)
            i--;
        return i < k->n_events ? k->events[i] : -1;
    }
    for (int i = lo - 1; i >= 0; i--)
        if (t->events[k->events[i]].end >= p->ts)
            return k->events[i];
    return -1;
}

static bool bind_flows(trace_data *t, loader *ld, const int *rank) {
    if (ld->n_points == 0)
        return true;
    qsort(ld->points, ld->n_points, sizeof *ld->points, cmp_point);
    int cap = 0, prev = -1;
    for (int i = 0; i < ld->n_points; i++) {
        const flow_point *p = &ld->points[i];
        bool same = i > 0 && strcmp(p->key, ld->points[i - 1].key) == 0;
        int ev = bind_point(t, p, rank[p->track]);
        if (same && prev >= 0 && ev >= 0 && ev != prev) {
            if (!reserve((void **)&t->flows, &cap, t->n_flows,
                         sizeof *t->flows))
                return false;
            t->flows[t->n_flows++] = (trace_edge){prev, ev};
        }
        prev = ev;
        if (p->ph == 'f')
            prev = -1; /* an id may be reused after its end */
    }
    return true;
}

static void load_other_data(trace_data *t) {
    const json_value *o = json_get(t->root, "otherData");
    t->schedule = json_get_string(o, "schedule", NULL);
    t->stages = (int)json_get_number(o, "stages", 0);
    t->chunks = (int)json_get_number(o, "chunks", 0);
    t->microbatches = (int)json_get_number(o, "microbatches", 0);
    const json_value *b = json_get(o, "theoretical_bubble");
    t->has_theory = b && b->type == JSON_NUMBER;
    t->theoretical_bubble = t->has_theory ? b->number : 0;
}

bool trace_load(const char *path, trace_data *out) {
    *out = (trace_data){0};
    size_t size;
    char *text = read_file(path, &size);
    if (!text)
        return false;
    char err[256];
    out->root = json_parse(text, size, err, sizeof err);
    free(text);
    if (!out->root) {
        cli_error("%s: not valid JSON: %s", path, err);
        return false;
    }
    const json_value *list = out->root->type == JSON_ARRAY
                                 ? out->root
                                 : json_get(out->root, "traceEvents");
    if (!list || list->type != JSON_ARRAY) {
        cli_error("%s: not a Chrome trace: no \"traceEvents\" array", path);
        trace_data_free(out);
        return false;
    }
    loader ld = {.t = out};
    bool ok = true;
    for (size_t i = 0; ok && i < list->n; i++)
        ok = load_event(&ld, &list->items[i]);
    /* Flow points name tracks in loading order: rank maps them. */
    int *rank = ok ? malloc((out->n_tracks + 1) * sizeof *rank) : NULL;
    ok = rank && organise(out, rank) && bind_flows(out, &ld, rank);
    free(rank);
    free(ld.points);
    if (!ok) {
        cli_error("%s: out of memory", path);
        trace_data_free(out);
        return false;
    }
    if (out->n_events == 0) {
        cli_error("%s: the trace has no complete slices (\"X\" or \"B\"/\"E\" "
                  "events)",
                  path);
        trace_data_free(out);
        return false;
    }
    load_other_data(out);
    return true;
}

void trace_data_free(trace_data *t) {
    for (int k = 0; k < t->n_tracks; k++)
        free(t->tracks[k].events);
    free(t->tracks);
    free(t->events);
    free(t->flows);
    json_free(t->root);
    *t = (trace_data){0};
}
