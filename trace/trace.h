/* Trace writers: one training step's tasks as a Chrome Trace Event JSON
 * file (Perfetto, chrome://tracing) or a Paje trace (ViTE, pj_dump).
 *
 * The writers take plain data only — tracks, events, flows and counters
 * that engine/trace.c extracts from the engine — so this layer needs
 * nothing but libc and StarPU (for worker names), and both formats are
 * produced from exactly the same description of the step.
 *
 * Times are microseconds relative to the first task's start. Both writers
 * write "<path>.tmp.<pid>" and rename it over `path`, so a reader (or a
 * crash) never sees a half-written trace; failures are PL_STATUS_IO_ERROR
 * with a message naming the path. */
#ifndef PL_TRACE_H
#define PL_TRACE_H

#include <stdio.h>

#include "pleiades.h"
#include "util/atomic_file.h"

/* One row of the chart: a StarPU worker. */
typedef struct pl_trace_track {
    int worker;     /* StarPU worker id */
    int stage;      /* the pipeline stage it serves, -1 for none */
    bool comm;      /* a distributed runtime's communication worker */
    char name[64];  /* "stage 0 / CPU 1"; empty: the writers fill it in from
                       starpu_worker_get_name ("CPU 1") and the stage */
} pl_trace_track;

/* One task. */
typedef struct pl_trace_event {
    char name[96];  /* "F h0.attn mb3" */
    char op[48];    /* op name, or "optimizer" */
    char phase;     /* F, L, B, W, O or C (a collective) */
    int microbatch; /* -1 for the optimizer */
    int stage, chunk;
    int64_t bytes;  /* collectives ('C'): bytes reduced or gathered */
    double wait_us; /* collectives ('C'): of their time, the wait for the
                       other ranks (pl_task_record.wait_us) */
    int64_t fused;  /* >= 0: the fused StarPU task it ran in (events with
                       the same value ran as one task); -1: its own task */
    int64_t start_order; /* >= 0: its place in its stage's schedule order
                       (pl_task_record.start_order); -1: none */
    int track;      /* index into pl_trace.tracks */
    double start_us, end_us;
    double ready_us; /* when it could start (pl_task_record.ready_us: its
                       inputs were there and it was queued; a fused task's
                       later members, when the one before ended), on the
                       start_us clock; NaN: not known */
} pl_trace_event;

/* A data dependency drawn as an arrow: event `from` produced what event
 * `to` consumes (indices into pl_trace.events). */
typedef struct pl_trace_flow {
    int from, to;
} pl_trace_flow;

/* One sample of a counter ("stage 0 live activations (bytes)"); samples of
 * one track are in time order. */
typedef struct pl_trace_counter {
    char track[64];
    double time_us;
    double value;
} pl_trace_counter;

typedef struct pl_trace {
    const char *schedule; /* "none", "1f1b", "interleaved" */
    int stages, chunks, microbatches;
    double theoretical_bubble;
    /* The mean F, B and W item times the theory used (µs; ZB-H1's
     * depends on them), when has_item_times. */
    double item_us[3];
    bool has_item_times;
    pl_trace_track *tracks;
    int n_tracks;
    pl_trace_event *events;
    int n_events;
    pl_trace_flow *flows;
    int n_flows;
    pl_trace_counter *counters;
    int n_counters;
} pl_trace;

/* Fills in empty track names ("stage s / CPU k", or "CPU k" for a worker
 * that serves no stage). The writers call it themselves. */
void pl_trace_name_tracks(pl_trace *t);

pl_status pl_trace_write_json(pl_trace *t, const char *path);
pl_status pl_trace_write_paje(pl_trace *t, const char *path);

/* Shared by the writers (trace/file.c): opens a file that
 * becomes `path` only when complete (util/atomic_file.h: no partial trace,
 * no temporary left by a killed writer) and its stream into *out; commit
 * checks that every write succeeded and puts it in place, or removes it. */
pl_status pl_trace_file_open(const char *path, pl_atomic_file *af, FILE **out);
pl_status pl_trace_file_commit(pl_atomic_file *af, const char *path);
/* Writes s as a JSON string literal, quotes included. */
void pl_trace_put_json_string(FILE *f, const char *s);

#endif
