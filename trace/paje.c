/* The Paje trace writer (the format of ViTE and PajeNG's pj_dump; see
 * "Paje trace file format", Schnorr et al.).
 *
 * Type hierarchy: a "Program" container holding one "Worker" container per
 * track; tasks are states of the worker (PajePushState/PajePopState, so a
 * task is exactly one state and idle time is no state at all), valued and
 * coloured by phase; counters are variables of the program; flows are
 * links between workers. Times are in seconds.
 *
 * Paje readers simulate the file in order, so the body is sorted by time;
 * at equal times a task's pop comes before the next task's push on the
 * same worker and a link starts before it ends. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "trace/trace.h"

/* Event ids of the header below, in the order they appear there. */
enum {
    DEF_CONTAINER_TYPE, DEF_STATE_TYPE, DEF_VARIABLE_TYPE, DEF_LINK_TYPE,
    DEF_ENTITY_VALUE, CREATE_CONTAINER, DESTROY_CONTAINER, SET_STATE,
    PUSH_STATE, POP_STATE, SET_VARIABLE, START_LINK, END_LINK,
};

static const char HEADER[] =
    "%EventDef PajeDefineContainerType 0\n"
    "% Alias string\n% Type string\n% Name string\n%EndEventDef\n"
    "%EventDef PajeDefineStateType 1\n"
    "% Alias string\n% Type string\n% Name string\n%EndEventDef\n"
    "%EventDef PajeDefineVariableType 2\n"
    "% Alias string\n% Type string\n% Name string\n% Color color\n%EndEventDef\n"
    "%EventDef PajeDefineLinkType 3\n"
    "% Alias string\n% Type string\n% StartContainerType string\n"
    "% EndContainerType string\n% Name string\n%EndEventDef\n"
    "%EventDef PajeDefineEntityValue 4\n"
    "% Alias string\n% Type string\n% Name string\n% Color color\n%EndEventDef\n"
    "%EventDef PajeCreateContainer 5\n"
    "% Time date\n% Alias string\n% Type string\n% Container string\n"
    "% Name string\n%EndEventDef\n"
    "%EventDef PajeDestroyContainer 6\n"
    "% Time date\n% Type string\n% Name string\n%EndEventDef\n"
    "%EventDef PajeSetState 7\n"
    "% Time date\n% Container string\n% Type string\n% Value string\n%EndEventDef\n"
    /* The task's own name rides along as an extra field (pj_dump -u and
     * ViTE show it). */
    "%EventDef PajePushState 8\n"
    "% Time date\n% Container string\n% Type string\n% Value string\n"
    "% Task string\n%EndEventDef\n"
    "%EventDef PajePopState 9\n"
    "% Time date\n% Container string\n% Type string\n%EndEventDef\n"
    "%EventDef PajeSetVariable 10\n"
    "% Time date\n% Container string\n% Type string\n% Value double\n%EndEventDef\n"
    "%EventDef PajeStartLink 11\n"
    "% Time date\n% Container string\n% Type string\n% StartContainer string\n"
    "% Value string\n% Key string\n%EndEventDef\n"
    "%EventDef PajeEndLink 12\n"
    "% Time date\n% Container string\n% Type string\n% EndContainer string\n"
    "% Value string\n% Key string\n%EndEventDef\n";

/* Phases: entity value alias, name, colour (also the Gantt chart's). */
static const struct {
    char phase;
    const char *name, *color;
} PHASES[] = {
    {'F', "forward", "0.25 0.45 0.85"},      {'L', "loss", "0.60 0.30 0.75"},
    {'B', "input gradient", "0.90 0.35 0.20"}, {'W', "weight gradient", "0.30 0.70 0.30"},
    {'R', "recomputation", "0.55 0.78 1.00"},
    {'O', "optimizer", "0.55 0.55 0.55"},      {'C', "collective", "0.85 0.70 0.10"},
    {'M', "memory", "0.45 0.70 0.70"},
};
#define N_PHASES ((int)(sizeof PHASES / sizeof PHASES[0]))

/* Paje strings have no escapes: a double quote would end the field. */
static void put_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) fputc(*s == '"' ? '\'' : (unsigned char)*s < 0x20 ? ' ' : *s, f);
    fputc('"', f);
}

/* One line of the body, to be sorted: `order` breaks ties at equal times. */
typedef struct paje_line {
    double time_us;
    int order; /* pop, link start, link end, variable, push */
    int kind;
    int index; /* event, flow or counter */
} paje_line;

enum { L_POP, L_START_LINK, L_END_LINK, L_VARIABLE, L_PUSH };

static int cmp_line(const void *pa, const void *pb) {
    const paje_line *a = pa, *b = pb;
    if (a->time_us != b->time_us) return a->time_us < b->time_us ? -1 : 1;
    if (a->order != b->order) return a->order - b->order;
    return a->index - b->index;
}

/* Variable types: one per distinct counter track (a handful: one per
 * stage and one for StarPU's memory), numbered in order of first sample.
 * Writes type[i] for every counter; returns the number of types. */
static int counter_types(const pl_trace *t, int *type, int *first) {
    int n = 0;
    for (int i = 0; i < t->n_counters; i++) {
        int k = 0;
        while (k < n && strcmp(t->counters[first[k]].track, t->counters[i].track)) k++;
        if (k == n) first[n++] = i;
        type[i] = k;
    }
    return n;
}

static void put_types(FILE *f, const pl_trace *t, const int *first, int n_types) {
    fprintf(f, "%d CT_Prog 0 \"Program\"\n", DEF_CONTAINER_TYPE);
    fprintf(f, "%d CT_Worker CT_Prog \"Worker\"\n", DEF_CONTAINER_TYPE);
    fprintf(f, "%d ST_Task CT_Worker \"Task\"\n", DEF_STATE_TYPE);
    fprintf(f, "%d LT_Flow CT_Prog CT_Worker CT_Worker \"Flow\"\n", DEF_LINK_TYPE);
    for (int i = 0; i < N_PHASES; i++)
        fprintf(f, "%d S_%c ST_Task \"%s\" \"%s\"\n", DEF_ENTITY_VALUE,
                PHASES[i].phase, PHASES[i].name, PHASES[i].color);
    fprintf(f, "%d L_act LT_Flow \"activation\" \"0.2 0.2 0.8\"\n", DEF_ENTITY_VALUE);
    fprintf(f, "%d L_grad LT_Flow \"gradient\" \"0.8 0.2 0.2\"\n", DEF_ENTITY_VALUE);
    for (int i = 0; i < n_types; i++) {
        fprintf(f, "%d V%d CT_Prog ", DEF_VARIABLE_TYPE, i);
        put_string(f, t->counters[first[i]].track);
        fputs(" \"0.5 0.5 0.5\"\n", f);
    }
}

static void put_line(FILE *f, const pl_trace *t, const int *ctype,
                     const paje_line *l) {
    double s = l->time_us * 1e-6;
    if (l->kind == L_PUSH || l->kind == L_POP) {
        const pl_trace_event *ev = &t->events[l->index];
        if (l->kind == L_POP) {
            fprintf(f, "%d %.9f W%d ST_Task\n", POP_STATE, s, ev->track);
            return;
        }
        char phase = 'O'; /* an unknown phase shows as the optimizer's */
        for (int i = 0; i < N_PHASES; i++)
            if (PHASES[i].phase == ev->phase) phase = ev->phase;
        fprintf(f, "%d %.9f W%d ST_Task S_%c ", PUSH_STATE, s, ev->track, phase);
        put_string(f, ev->name);
        fputc('\n', f);
    } else if (l->kind == L_VARIABLE) {
        const pl_trace_counter *c = &t->counters[l->index];
        fprintf(f, "%d %.9f prog V%d %.17g\n", SET_VARIABLE, s, ctype[l->index],
                c->value);
    } else {
        const pl_trace_flow *fl = &t->flows[l->index];
        const pl_trace_event *to = &t->events[fl->to];
        const char *value = to->phase == 'F' || to->phase == 'L' || to->phase == 'R' ? "L_act" : "L_grad";
        bool start = l->kind == L_START_LINK;
        fprintf(f, "%d %.9f prog LT_Flow W%d %s flow%d\n",
                start ? START_LINK : END_LINK, s,
                t->events[start ? fl->from : fl->to].track, value, l->index);
    }
}

pl_status pl_trace_write_paje(pl_trace *t, const char *path) {
    size_t n = 2 * (size_t)t->n_events + 2 * (size_t)t->n_flows + t->n_counters;
    paje_line *lines = malloc((n ? n : 1) * sizeof *lines);
    int *ctype = malloc(2 * (t->n_counters + 1) * sizeof *ctype);
    pl_atomic_file tmp;
    FILE *f = NULL;
    pl_status st = lines && ctype
                       ? pl_trace_file_open(path, &tmp, &f)
                       : pl_fail(PL_STATUS_OUT_OF_MEMORY,
                                 "%s: out of memory writing the trace",
                                 path ? path : "(null)");
    if (st) {
        free(lines);
        free(ctype);
        return st;
    }
    int *first = ctype + t->n_counters + 1;
    int n_types = counter_types(t, ctype, first);
    pl_trace_name_tracks(t);
    size_t k = 0;
    double end = 0;
    for (int i = 0; i < t->n_events; i++) {
        const pl_trace_event *ev = &t->events[i];
        lines[k++] = (paje_line){ev->start_us, L_PUSH, L_PUSH, i};
        lines[k++] = (paje_line){ev->end_us, L_POP, L_POP, i};
        if (ev->end_us > end) end = ev->end_us;
    }
    /* A link runs from the producer's end to the consumer's start. */
    for (int i = 0; i < t->n_flows; i++) {
        lines[k++] = (paje_line){t->events[t->flows[i].from].end_us, L_START_LINK,
                                 L_START_LINK, i};
        lines[k++] = (paje_line){t->events[t->flows[i].to].start_us, L_END_LINK,
                                 L_END_LINK, i};
    }
    for (int i = 0; i < t->n_counters; i++) {
        lines[k++] = (paje_line){t->counters[i].time_us, L_VARIABLE, L_VARIABLE, i};
        if (t->counters[i].time_us > end) end = t->counters[i].time_us;
    }
    qsort(lines, k, sizeof *lines, cmp_line);

    fputs(HEADER, f);
    put_types(f, t, first, n_types);
    fprintf(f, "%d 0.000000000 prog CT_Prog 0 \"pleiades\"\n", CREATE_CONTAINER);
    for (int i = 0; i < t->n_tracks; i++) {
        fprintf(f, "%d 0.000000000 W%d CT_Worker prog ", CREATE_CONTAINER, i);
        put_string(f, t->tracks[i].name);
        fputc('\n', f);
    }
    for (size_t i = 0; i < k; i++) put_line(f, t, ctype, &lines[i]);
    for (int i = 0; i < t->n_tracks; i++)
        fprintf(f, "%d %.9f CT_Worker W%d\n", DESTROY_CONTAINER, end * 1e-6, i);
    fprintf(f, "%d %.9f CT_Prog prog\n", DESTROY_CONTAINER, end * 1e-6);
    free(lines);
    free(ctype);
    return pl_trace_file_commit(&tmp, path);
}
