/* Reading a Chrome Trace Event file into slices, tracks and flow edges;
 * see trace_load.h. */
#include "trace_load.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "util/json_where.h"
#include "util/regular_file.h"

/* How traces are decoded. Any top-level value: one that is neither an
 * object nor an array is then "not a Chrome trace" like any other JSON
 * that is not one. Every number as a double, as the range checks below
 * expect: an integer beyond 64 bits is a number out of range, not a
 * syntax error. "\u0000" in a string is valid JSON that another tool may
 * write: the string is read up to it. A member given twice is allowed,
 * the last one winning, as in the viewers. */
#define TRACE_JSON_FLAGS                                                       \
    (JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL)

/* The member `key` of object `obj` when it is a string, else `fallback`
 * (also when obj is no object). */
static const char *get_string(const json_t *obj, const char *key,
                              const char *fallback) {
    const char *s = json_string_value(json_object_get(obj, key));
    return s ? s : fallback;
}

/* Every number taken from the file is range-checked before it is used: a
 * trace is arbitrary input, and a double such as 2e9 or 1e300 would
 * otherwise become a loop bound (one line per claimed stage), an
 * undefined cast to int, or an infinite time whose differences are NaN.
 * The bounds are far beyond any real trace: times within ±1e18 µs (31 000
 * years; any sum of them stays finite), identifiers and sort indices
 * within ±1e18. */
#define TRACE_TIME_MAX 1e18
#define TRACE_ID_MAX 1e18
#define TRACE_MAX_CHUNKS 1024
#define TRACE_MAX_MICROBATCHES (1 << 20)
#define TRACE_MAX_BUBBLE 1e6

typedef struct number_range {
    double min, max;
    bool integral;
} number_range;

static const number_range TIME = {-TRACE_TIME_MAX, TRACE_TIME_MAX, false};
static const number_range DURATION = {0, TRACE_TIME_MAX, false};
static const number_range IDENTIFIER = {-TRACE_ID_MAX, TRACE_ID_MAX, false};
/* args.stage: -1 is what the writer puts on tasks of no stage. */
static const number_range STAGE = {-1, TRACE_MAX_STAGES - 1, true};
static const number_range STAGES = {0, TRACE_MAX_STAGES, true};
static const number_range CHUNKS = {0, TRACE_MAX_CHUNKS, true};
static const number_range MICROBATCHES = {0, TRACE_MAX_MICROBATCHES, true};
static const number_range BUBBLE = {0, TRACE_MAX_BUBBLE, false};
/* args.microbatch: -1 on tasks of no microbatch (optimizer, collectives). */
static const number_range MICROBATCH = {-1, TRACE_MAX_MICROBATCHES - 1, true};
static const number_range CHUNK = {0, TRACE_MAX_CHUNKS - 1, true};
/* args.fused_task: an id the writer counts up from 0. */
static const number_range FUSED = {0, TRACE_ID_MAX, true};

static bool in_range(double v, number_range r) {
    /* NaN fails every comparison, so it is refused too. */
    return v >= r.min && v <= r.max && (!r.integral || v == floor(v));
}

/* false after "pleiades: PATH: FIELD: expected ..., got V". */
static bool check_number(const char *path, const char *field, double v,
                         number_range r) {
    if (in_range(v, r))
        return true;
    if (r.integral)
        cli_error("%s: %s: expected an integer in %.0f..%.0f, got %.17g",
                  path, field, r.min, r.max, v);
    else
        cli_error("%s: %s: expected a number in [%g, %g], got %.17g", path,
                  field, r.min, r.max, v);
    return false;
}

/* --------------------------------------------------------- file */

/* "traceEvents[3].args.stage" ("[3].tid" in a bare array): a path named
 * the way the range checks name fields. */
static void format_path(char *buf, size_t size, const pl_json_path *p) {
    size_t at = 0;
    buf[0] = '\0';
    for (int d = 0; d < p->n && at < size; d++) {
        const pl_json_step *s = &p->step[d];
        int w = s->member ? snprintf(buf + at, size - at, "%s%s",
                                     d ? "." : "", s->name)
                          : snprintf(buf + at, size - at, "[%zu]", s->index);
        if (w < 0)
            break;
        at += (size_t)w;
    }
}

/* Why text[0..size) did not decode: "PATH: not valid JSON: line L, column
 * C (byte B), in FIELD: what jansson says". A number beyond a double's
 * range (which jansson refuses to decode) is reported like the range
 * checks' refusals, naming its field. */
static void report_json_error(const char *path, const char *text,
                              size_t size, const json_error_t *err) {
    if (json_error_code(err) == json_error_out_of_memory) {
        cli_error("%s: out of memory", path);
        return;
    }
    pl_json_where w = pl_json_error_where(text, size, err);
    pl_json_path p;
    pl_json_error_path(text, size, TRACE_JSON_FLAGS, err, &p);
    char field[512];
    format_path(field, sizeof field, &p);
    size_t end = err->position > 0 ? (size_t)err->position : 0;
    if (json_error_code(err) == json_error_numeric_overflow && p.n > 0 &&
        end > w.offset && end <= size) {
        size_t len = end - w.offset;
        cli_error("%s: %s: expected a number within the range of a double, "
                  "got %.*s%s (line %d, column %d, byte %zu)",
                  path, field, (int)(len < 40 ? len : 40), text + w.offset,
                  len < 40 ? "" : "...", w.line, w.column, w.offset);
        return;
    }
    cli_error("%s: not valid JSON: line %d, column %d (byte %zu)%s%s: %s",
              path, w.line, w.column, w.offset, p.n ? ", in " : "", field,
              err->text);
}

static char *read_file(const char *path, size_t *size) {
    /* A FIFO would block the open forever: only a regular file will do. */
    const char *why;
    int fd = pl_open_regular(path, 0, &why);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        if (fd >= 0) {
            why = strerror(errno);
            close(fd);
        }
        cli_error("%s: cannot open: %s", path, why);
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
    const char *path;
    const char *list; /* "traceEvents", or "" for a bare array */
    size_t index;     /* of the event being loaded */
    int cap_events, cap_tracks;
    /* The tracks by key, an open-addressing hash table of track indices
     * (-1: empty slot), kept at most half full: a trace may have hundreds
     * of thousands of tracks, and looking each event's up by scanning
     * them all made loading quadratic in their number. */
    int *slots;
    size_t n_slots; /* a power of two, or 0 before the first track */
    flow_point *points;
    int n_points, cap_points;
} loader;

/* What loading an event came to; a refused event has printed why. */
typedef enum load_result { LOAD_OK, LOAD_NO_MEMORY, LOAD_REFUSED } load_result;

/* The number `key` of object `obj` (of the current event; `field` names
 * the object within it, e.g. "args.") into *out, when it is present and a
 * number: false, after a message naming the file and the field, when it
 * is out of `r`. Other types are left to the caller's fallback. */
static bool event_number(loader *ld, const json_t *obj, const char *field,
                         const char *key, number_range r, double *out,
                         bool *present) {
    const json_t *v = json_object_get(obj, key);
    *present = json_is_number(v);
    if (!*present)
        return true;
    char where[160];
    snprintf(where, sizeof where, "%s[%zu].%s%s", ld->list, ld->index, field,
             key);
    if (!check_number(ld->path, where, json_number_value(v), r))
        return false;
    *out = json_number_value(v);
    return true;
}

/* Counts are ints: growth stops short of overflowing them (a trace of
 * 2^30 events is far beyond what a decoded JSON tree in memory can hold
 * anyway). */
static bool reserve(void **items, int *cap, int n, size_t size) {
    if (n < *cap)
        return true;
    if (*cap > INT_MAX / 2)
        return false;
    int c = *cap ? 2 * *cap : 64;
    void *p = realloc(*items, (size_t)c * size);
    if (!p)
        return false;
    *items = p;
    *cap = c;
    return true;
}

/* The event's member `key` (pid, tid, id) as text: numbers or strings. */
static bool id_text(loader *ld, const json_t *ev, const char *key,
                    char *out, size_t size) {
    const json_t *v = json_object_get(ev, key);
    double number = 0;
    bool present;
    if (!event_number(ld, ev, "", key, IDENTIFIER, &number, &present))
        return false;
    if (!v)
        snprintf(out, size, "0");
    else if (present)
        snprintf(out, size, "%.17g", number);
    else if (json_is_string(v))
        snprintf(out, size, "%s", json_string_value(v));
    else
        snprintf(out, size, "?");
    return true;
}

/* FNV-1a: the keys are short ("pid/tid"), and any spread will do. */
static size_t key_hash(const char *key) {
    uint64_t h = 14695981039346656037u;
    for (const unsigned char *c = (const unsigned char *)key; *c; c++)
        h = (h ^ *c) * 1099511628211u;
    return (size_t)h;
}

/* The slot of `key` in the table: the one holding its track, or the empty
 * slot where it would go. */
static size_t slot_of(const loader *ld, const char *key) {
    size_t mask = ld->n_slots - 1, i = key_hash(key) & mask;
    while (ld->slots[i] >= 0 && strcmp(ld->t->tracks[ld->slots[i]].key, key))
        i = (i + 1) & mask;
    return i;
}

/* Makes room for one more track in the table (doubling it, and rehashing
 * every track, when it would be over half full). */
static bool reserve_slot(loader *ld) {
    if (ld->n_slots > 2 * (size_t)ld->t->n_tracks + 2)
        return true;
    size_t n = ld->n_slots ? 2 * ld->n_slots : 256;
    int *slots = malloc(n * sizeof *slots);
    if (!slots)
        return false;
    for (size_t i = 0; i < n; i++)
        slots[i] = -1;
    free(ld->slots);
    ld->slots = slots;
    ld->n_slots = n;
    for (int k = 0; k < ld->t->n_tracks; k++)
        ld->slots[slot_of(ld, ld->t->tracks[k].key)] = k;
    return true;
}

/* The event's track, created when new: its index, or -1 (*result says
 * why). */
static int track_of(loader *ld, const json_t *ev, load_result *result) {
    trace_data *t = ld->t;
    char pid[32], tid[32], key[80];
    *result = LOAD_REFUSED;
    if (!id_text(ld, ev, "pid", pid, sizeof pid) ||
        !id_text(ld, ev, "tid", tid, sizeof tid))
        return -1;
    snprintf(key, sizeof key, "%s/%s", pid, tid);
    *result = LOAD_NO_MEMORY;
    if (!reserve_slot(ld))
        return -1;
    size_t slot = slot_of(ld, key);
    *result = LOAD_OK;
    if (ld->slots[slot] >= 0)
        return ld->slots[slot];
    if (!reserve((void **)&t->tracks, &ld->cap_tracks, t->n_tracks,
                 sizeof *t->tracks)) {
        *result = LOAD_NO_MEMORY;
        return -1;
    }
    trace_track *k = &t->tracks[t->n_tracks];
    *k = (trace_track){.sort_index = 1e300, .open_top = -1};
    snprintf(k->key, sizeof k->key, "%s", key);
    ld->slots[slot] = t->n_tracks;
    return t->n_tracks++;
}

static bool is_phase(const char *p) {
    return p && p[0] && !p[1] && strchr("FLBWROCM", p[0]);
}

static char phase_of(const json_t *ev) {
    const char *p = get_string(json_object_get(ev, "args"), "phase", NULL);
    if (is_phase(p))
        return p[0];
    p = get_string(ev, "cat", NULL);
    return is_phase(p) ? p[0] : '?';
}

static load_result add_event(loader *ld, const json_t *ev, int track,
                             double ts, double end) {
    trace_data *t = ld->t;
    double stage = -1, microbatch = -1, chunk = 0, fused = -1, wait = 0, ready = NAN;
    bool present, has_microbatch, has_ready;
    const json_t *args = json_object_get(ev, "args");
    if (!event_number(ld, args, "args.", "stage", STAGE, &stage, &present) ||
        !event_number(ld, args, "args.", "microbatch", MICROBATCH, &microbatch,
                      &has_microbatch) ||
        !event_number(ld, args, "args.", "chunk", CHUNK, &chunk, &present) ||
        !event_number(ld, args, "args.", "fused_task", FUSED, &fused, &present) ||
        !event_number(ld, args, "args.", "wait_us", DURATION, &wait, &present) ||
        !event_number(ld, args, "args.", "ready_ts", TIME, &ready, &has_ready))
        return LOAD_REFUSED;
    if (!reserve((void **)&t->events, &ld->cap_events, t->n_events,
                 sizeof *t->events))
        return LOAD_NO_MEMORY;
    t->events[t->n_events++] = (trace_event){
        .name = get_string(ev, "name", "?"),
        .phase = phase_of(ev),
        .stage = (int)stage, /* an integer in -1..TRACE_MAX_STAGES-1 */
        .microbatch = (int)microbatch, /* integers in range, like stage */
        .has_microbatch = has_microbatch,
        .chunk = (int)chunk,
        .fused = fused,
        /* No longer than the slice: a wait is part of its time. */
        .wait = wait < end - ts ? wait : end - ts,
        .track = track,
        .start = ts,
        .end = end,
        /* A slice cannot start before it was ready: a later ready_ts
         * (another writer's clock) counts as ready at its start. */
        .ready = !has_ready ? NAN : ready < ts ? ready : ts,
        .open_prev = -1,
    };
    return LOAD_OK;
}

static load_result add_point(loader *ld, const json_t *ev, char ph,
                             int track, double ts) {
    char id[64];
    if (!id_text(ld, ev, "id", id, sizeof id))
        return LOAD_REFUSED;
    if (!reserve((void **)&ld->points, &ld->cap_points, ld->n_points,
                 sizeof *ld->points))
        return LOAD_NO_MEMORY;
    flow_point *p = &ld->points[ld->n_points];
    snprintf(p->key, sizeof p->key, "%s\x1f%s", get_string(ev, "cat", ""),
             id);
    p->ph = ph;
    p->enclosing = ph != 'f' || strcmp(get_string(ev, "bp", ""), "e") == 0;
    p->track = track;
    p->ts = ts;
    p->seq = ld->n_points++;
    return LOAD_OK;
}

/* A "thread_name" or "thread_sort_index" metadata event. */
static load_result load_metadata(loader *ld, const json_t *ev) {
    load_result result;
    int k = track_of(ld, ev, &result);
    if (k < 0)
        return result;
    const json_t *args = json_object_get(ev, "args");
    const char *name = get_string(args, "name", NULL);
    if (name)
        ld->t->tracks[k].name = name;
    double sort = 0;
    bool present;
    if (!event_number(ld, args, "args.", "sort_index", IDENTIFIER, &sort,
                      &present))
        return LOAD_REFUSED;
    if (present)
        ld->t->tracks[k].sort_index = sort;
    return LOAD_OK;
}

/* One element of traceEvents; events this summary has no use for are
 * skipped. */
static load_result load_event(loader *ld, const json_t *ev) {
    const char *ph = get_string(ev, "ph", "");
    if (ph[0] == 'M') {
        if (strcmp(get_string(ev, "name", ""), "thread_name") &&
            strcmp(get_string(ev, "name", ""), "thread_sort_index"))
            return LOAD_OK;
        return load_metadata(ld, ev);
    }
    if (!ph[0] || ph[1] || !strchr("XBEstf", ph[0]))
        return LOAD_OK;
    double ts = 0;
    bool has_ts;
    if (!event_number(ld, ev, "", "ts", TIME, &ts, &has_ts))
        return LOAD_REFUSED;
    if (!has_ts)
        return LOAD_OK;
    load_result result;
    int k = track_of(ld, ev, &result);
    if (k < 0)
        return result;
    trace_track *track = &ld->t->tracks[k];
    switch (ph[0]) {
    case 'X': {
        double dur = 0;
        bool has_dur;
        if (!event_number(ld, ev, "", "dur", DURATION, &dur, &has_dur))
            return LOAD_REFUSED;
        return add_event(ld, ev, k, ts, ts + dur);
    }
    case 'B':
        result = add_event(ld, ev, k, ts, -INFINITY);
        if (result != LOAD_OK)
            return result;
        ld->t->events[ld->t->n_events - 1].open_prev = track->open_top;
        track->open_top = ld->t->n_events - 1;
        return LOAD_OK;
    case 'E':
        if (track->open_top >= 0) {
            trace_event *open = &ld->t->events[track->open_top];
            open->end = ts;
            track->open_top = open->open_prev;
        }
        return LOAD_OK;
    default:
        return add_point(ld, ev, ph[0], k, ts);
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

/* otherData.`key` into *out when it is a number; false after a message
 * when it is out of `r`. */
static bool other_number(const char *path, const json_t *o,
                         const char *key, number_range r, double *out,
                         bool *present) {
    const json_t *v = json_object_get(o, key);
    *present = json_is_number(v);
    if (!*present)
        return true;
    char field[64];
    snprintf(field, sizeof field, "otherData.%s", key);
    if (!check_number(path, field, json_number_value(v), r))
        return false;
    *out = json_number_value(v);
    return true;
}

static bool load_other_data(const char *path, trace_data *t) {
    const json_t *o = json_object_get(t->root, "otherData");
    double stages = 0, chunks = 0, microbatches = 0, bubble = 0;
    bool present;
    t->schedule = get_string(o, "schedule", NULL);
    if (!other_number(path, o, "stages", STAGES, &stages, &present) ||
        !other_number(path, o, "chunks", CHUNKS, &chunks, &present) ||
        !other_number(path, o, "microbatches", MICROBATCHES, &microbatches,
                      &present) ||
        !other_number(path, o, "theoretical_bubble", BUBBLE, &bubble,
                      &t->has_theory))
        return false;
    /* ZB-H1's theory: the measured item times it used (all three or none). */
    static const char *const item_keys[3] = {"item_f_us", "item_b_us", "item_w_us"};
    int items = 0;
    for (int k = 0; k < 3; k++) {
        if (!other_number(path, o, item_keys[k], DURATION, &t->item_us[k], &present))
            return false;
        items += present;
    }
    t->has_item_times = items == 3;
    /* Integers within int range: the casts are exact. */
    t->stages = (int)stages;
    t->chunks = (int)chunks;
    t->microbatches = (int)microbatches;
    t->theoretical_bubble = bubble;
    return true;
}

bool trace_load(const char *path, trace_data *out) {
    *out = (trace_data){0};
    size_t size;
    char *text = read_file(path, &size);
    if (!text)
        return false;
    /* JSON has no place for a NUL byte (in strings it is escaped), but
     * jansson 2.14 skips one that follows a number instead of refusing it. */
    const char *nul = memchr(text, '\0', size);
    if (nul) {
        pl_json_where w = pl_json_where_at(text, size, (size_t)(nul - text));
        cli_error("%s: not valid JSON: line %d, column %d (byte %zu): a NUL "
                  "byte", path, w.line, w.column, w.offset);
        free(text);
        return false;
    }
    json_error_t err;
    out->root = json_loadb(text, size, TRACE_JSON_FLAGS, &err);
    if (!out->root)
        report_json_error(path, text, size, &err);
    free(text);
    if (!out->root)
        return false;
    const json_t *list = json_is_array(out->root)
                             ? out->root
                             : json_object_get(out->root, "traceEvents");
    if (!json_is_array(list)) {
        cli_error("%s: not a Chrome trace: no \"traceEvents\" array", path);
        trace_data_free(out);
        return false;
    }
    loader ld = {.t = out,
                 .path = path,
                 .list = list == out->root ? "" : "traceEvents"};
    load_result result = LOAD_OK;
    for (size_t i = 0; result == LOAD_OK && i < json_array_size(list); i++) {
        ld.index = i;
        result = load_event(&ld, json_array_get(list, i));
    }
    if (result == LOAD_OK && !load_other_data(path, out))
        result = LOAD_REFUSED;
    /* Flow points name tracks in loading order: rank maps them. */
    int *rank = NULL;
    if (result == LOAD_OK) {
        rank = malloc(((size_t)out->n_tracks + 1) * sizeof *rank);
        if (!rank || !organise(out, rank) || !bind_flows(out, &ld, rank))
            result = LOAD_NO_MEMORY;
    }
    free(rank);
    free(ld.points);
    free(ld.slots);
    if (result != LOAD_OK) {
        if (result == LOAD_NO_MEMORY)
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
    return true;
}

void trace_data_free(trace_data *t) {
    for (int k = 0; k < t->n_tracks; k++)
        free(t->tracks[k].events);
    free(t->tracks);
    free(t->events);
    free(t->flows);
    json_decref(t->root);
    *t = (trace_data){0};
}
