/* A Chrome Trace Event file read into what `pleiades trace-summary`
 * analyses: slices per track, the flow edges between slices, and the
 * schedule that produced it (otherData, when Pleiades wrote the file).
 *
 * Both container forms of the format are accepted — {"traceEvents": [...]}
 * and a bare array — and so are "X" complete events and "B"/"E" pairs,
 * "s"/"t"/"f" flows bound the way the viewers bind them (the start to the
 * enclosing slice, the end to the next slice unless "bp" is "e"). */
#ifndef PL_CLI_TRACE_LOAD_H
#define PL_CLI_TRACE_LOAD_H

#include <stdbool.h>

struct json_t; /* jansson's; only trace_load.c needs its header */

/* The most stages a trace may declare (otherData.stages; args.stage lies
 * below it): far beyond any pipeline, and a bound on the summary's
 * per-stage loop and output. */
#define TRACE_MAX_STAGES 1024

typedef struct trace_event {
    const char *name;
    char phase; /* args.phase or a one-letter cat (F L B W O), else '?' */
    int stage;  /* args.stage (-1..TRACE_MAX_STAGES-1), -1 when absent */
    int microbatch; /* args.microbatch (-1: none, e.g. an optimizer task) */
    bool has_microbatch; /* args.microbatch was present */
    int chunk;  /* args.chunk (0..TRACE_MAX_CHUNKS-1), 0 when absent */
    double fused; /* args.fused_task: events with the same value ran as one
                     StarPU task (fused op tasks); -1 when absent */
    double wait;  /* args.wait_us (collectives): of the slice, the wait for
                     the other ranks, µs; 0 when absent */
    int track;
    double start, end; /* µs */
    double ready;      /* args.ready_ts: when it could have started (µs, on
                          the ts clock; no later than start); NaN: absent */
    int open_prev;     /* while loading: the enclosing open "B" event */
} trace_event;

typedef struct trace_track {
    char key[80];     /* "pid/tid" */
    const char *name; /* thread_name metadata, else key */
    double sort_index;
    int *events; /* indices, by start time */
    int n_events;
    int open_top; /* while loading: innermost open "B" event */
} trace_track;

typedef struct trace_edge {
    int from, to; /* event indices */
} trace_edge;

typedef struct trace_data {
    struct json_t *root; /* the decoded file: owns every string above */
    trace_event *events;
    int n_events;
    trace_track *tracks; /* in display order (sort index, then first seen) */
    int n_tracks;
    trace_edge *flows;
    int n_flows;
    const char *schedule;             /* otherData, NULL when absent */
    int stages, chunks, microbatches; /* 0 when absent; range-checked */
    double theoretical_bubble;
    bool has_theory;
    double item_us[3];                /* F, B, W item times the theory used */
    bool has_item_times;
} trace_data;

/* Reads `path`; on failure prints "pleiades: PATH: why" and returns
 * false. Malformed JSON is reported with its line, column and byte offset
 * and the member it lies in. Every number used from the file is
 * range-checked first: one out of range fails the load with a message
 * naming the file and the field ("traceEvents[3].ts", "otherData.stages"). */
bool trace_load(const char *path, trace_data *out);
void trace_data_free(trace_data *t);

#endif
