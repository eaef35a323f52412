/* The Chrome Trace Event Format writer (the "JSON Object Format" of
 * https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSJK2UvHHqI),
 * which Perfetto and chrome://tracing read:
 *
 *   {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}
 *
 * One process (pid 1) with one thread per worker (tid = StarPU worker id)
 * named by a "thread_name" metadata event; tasks are "X" (complete) events
 * whose category is their phase, so the viewers can filter by phase;
 * dependencies crossing stages are "s"/"f" flow pairs; counters are "C"
 * events. The schedule and its theoretical bubble go in otherData, where
 * `pleiades trace-summary` reads them back. */
#include <math.h>
#include <stdio.h>

#include "trace/trace.h"

enum { PL_TRACE_PID = 1 };

/* JSON has no NaN or infinity. */
static double finite_or_zero(double x) { return isfinite(x) ? x : 0.0; }

static void put_metadata(FILE *f, const pl_trace *t) {
    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
               "\"args\":{\"name\":\"pleiades\"}}",
            PL_TRACE_PID);
    for (int i = 0; i < t->n_tracks; i++) {
        const pl_trace_track *k = &t->tracks[i];
        fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                   "\"args\":{\"name\":",
                PL_TRACE_PID, k->worker);
        pl_trace_put_json_string(f, k->name);
        /* Rows in stage order, workers without a stage last. */
        fprintf(f, ",\"stage\":%d}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\","
                   "\"pid\":%d,\"tid\":%d,\"args\":{\"sort_index\":%d}}",
                k->stage, PL_TRACE_PID, k->worker,
                (k->stage >= 0 ? k->stage : 1 << 20) * 1024 + k->worker);
    }
}

static void put_event(FILE *f, const pl_trace *t, const pl_trace_event *ev) {
    fputs(",\n{\"name\":", f);
    pl_trace_put_json_string(f, ev->name);
    fprintf(f, ",\"cat\":\"%c\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,"
               "\"tid\":%d,\"args\":{\"op\":",
            ev->phase, finite_or_zero(ev->start_us), finite_or_zero(ev->end_us - ev->start_us),
            PL_TRACE_PID, t->tracks[ev->track].worker);
    pl_trace_put_json_string(f, ev->op);
    fprintf(f, ",\"phase\":\"%c\",\"microbatch\":%d,\"stage\":%d,\"chunk\":%d", ev->phase,
            ev->microbatch, ev->stage, ev->chunk);
    if (ev->phase == 'C')
        fprintf(f, ",\"bytes\":%lld,\"wait_us\":%.3f", (long long)ev->bytes,
                finite_or_zero(ev->wait_us));
    if (ev->fused >= 0) fprintf(f, ",\"fused_task\":%lld", (long long)ev->fused);
    if (ev->start_order >= 0) fprintf(f, ",\"start_order\":%lld", (long long)ev->start_order);
    /* On the ts clock (µs): from ready_ts to ts the task could have run
     * but had not started (its worker busy, or taking it up). */
    if (isfinite(ev->ready_us)) fprintf(f, ",\"ready_ts\":%.3f", ev->ready_us);
    fputs("}}", f);
}

/* A flow's ends sit in the middle of their slices: "s" binds to the slice
 * enclosing its timestamp, and so does "f" with bp "e"; a timestamp on a
 * slice boundary could bind to the neighbouring slice instead. */
static void put_flow(FILE *f, const pl_trace *t, int id, const pl_trace_flow *fl) {
    const pl_trace_event *a = &t->events[fl->from], *b = &t->events[fl->to];
    const char *what = b->phase == 'F' || b->phase == 'L' || b->phase == 'R' ? "activation" : "gradient";
    fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"flow\",\"ph\":\"s\",\"id\":%d,"
               "\"ts\":%.3f,\"pid\":%d,\"tid\":%d}",
            what, id, finite_or_zero((a->start_us + a->end_us) / 2), PL_TRACE_PID,
            t->tracks[a->track].worker);
    fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"flow\",\"ph\":\"f\",\"bp\":\"e\","
               "\"id\":%d,\"ts\":%.3f,\"pid\":%d,\"tid\":%d}",
            what, id, finite_or_zero((b->start_us + b->end_us) / 2), PL_TRACE_PID,
            t->tracks[b->track].worker);
}

static void put_counter(FILE *f, const pl_trace_counter *c) {
    fputs(",\n{\"name\":", f);
    pl_trace_put_json_string(f, c->track);
    fprintf(f, ",\"ph\":\"C\",\"ts\":%.3f,\"pid\":%d,\"args\":{\"value\":%.17g}}",
            finite_or_zero(c->time_us), PL_TRACE_PID, finite_or_zero(c->value));
}

pl_status pl_trace_write_json(pl_trace *t, const char *path) {
    pl_atomic_file tmp;
    FILE *f;
    pl_status st = pl_trace_file_open(path, &tmp, &f);
    if (st) return st;
    pl_trace_name_tracks(t);
    fputs("{\"traceEvents\":[\n", f);
    put_metadata(f, t);
    for (int i = 0; i < t->n_events; i++) put_event(f, t, &t->events[i]);
    for (int i = 0; i < t->n_flows; i++) put_flow(f, t, i, &t->flows[i]);
    for (int i = 0; i < t->n_counters; i++) put_counter(f, &t->counters[i]);
    fputs("\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"schedule\":", f);
    pl_trace_put_json_string(f, t->schedule ? t->schedule : "none");
    fprintf(f, ",\"stages\":%d,\"chunks\":%d,\"microbatches\":%d,"
               "\"theoretical_bubble\":%.17g,",
            t->stages, t->chunks, t->microbatches, finite_or_zero(t->theoretical_bubble));
    if (t->has_item_times)
        fprintf(f, "\"item_f_us\":%.17g,\"item_b_us\":%.17g,\"item_w_us\":%.17g,",
                finite_or_zero(t->item_us[0]), finite_or_zero(t->item_us[1]),
                finite_or_zero(t->item_us[2]));
    fprintf(f, "\"version\":\"%s\"}}\n", PL_VERSION_STRING);
    return pl_trace_file_commit(&tmp, path);
}
