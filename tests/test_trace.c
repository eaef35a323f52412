/* pl_engine_write_trace on one pipelined GPT step.
 *
 * Model: pl_gpt_build with V=256 T=16 C=32 L=4 NH=4, batch 8 in 4
 * microbatches, 1F1B over 2 stages on a runtime of 4 CPU workers with
 * profiling and record_tasks. After one training step the trace is written
 * as JSON and Paje, and checked:
 *   JSON (decoded with jansson): the top level
 *   has traceEvents, displayTimeUnit and otherData (schedule "1f1b", 2
 *   stages, 4 microbatches, the engine's theoretical bubble); one "X"
 *   event per task record, each with name, ph, ts, dur, pid, tid and args
 *   op/phase/microbatch/stage/chunk (cat = phase); every flow start "s"
 *   has exactly one end "f" with the same id and vice versa, there are
 *   flows (two stages exchange activations and gradients), each end lies
 *   inside a slice of its thread, and the consumer slice starts after the
 *   producer slice ended (they are data dependencies); each thread with
 *   slices has a "thread_name", "stage s / CPU k" for the pipeline tasks
 *   of stage s; each stage's "live activations" counter starts at the
 *   trace's start, rises above 0 and ends at 0; each stage's F/B slices in
 *   time order are exactly the 1F1B order computed from its rule.
 *   Paje: when /usr/bin/pj_dump exists it must read the file (exit 0)
 *   and report one State per task and one Link per flow.
 *   Errors: an unwritable path is PL_STATUS_IO_ERROR naming it, and no
 *   temporary file is left behind.
 *   Where malformed JSON breaks (util/json_where.c, which the trace and
 *   checkpoint readers use): offset, line, column and member of errors
 *   of each kind jansson reports, and the offsets of values.
 *
 * Usage: test_trace [DIR] — with DIR the traces are kept there as
 * DIR/trace.json and DIR/trace.paje (test_trace_summary.sh uses them);
 * otherwise they go to a temporary directory that is removed. */
#define _GNU_SOURCE /* mkdtemp */
#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "pleiades.h"
#include "test_util.h"
#include "util/json_where.h"

enum { V = 256, T = 16, C = 32, L = 4, NH = 4, BATCH = 8, TILES = 4, STAGES = 2 };

static bool is_number(const json_t *v) { return json_is_number(v); }
static bool is_string(const json_t *v) { return json_is_string(v); }

/* Object members (NULL or the fallback when v is no object, or the member
 * is absent or of another type). */
static const json_t *member(const json_t *v, const char *key) {
    return json_object_get(v, key);
}
static double member_number(const json_t *v, const char *key, double fallback) {
    const json_t *m = json_object_get(v, key);
    return json_is_number(m) ? json_number_value(m) : fallback;
}
static const char *member_string(const json_t *v, const char *key, const char *fallback) {
    const char *s = json_string_value(json_object_get(v, key));
    return s ? s : fallback;
}

/* One pipelined training step of the small GPT; returns the task count. */
static int run_step(pl_engine_t *e) {
    int32_t tokens[BATCH * T], targets[BATCH * T];
    uint32_t x = 12345;
    for (int i = 0; i < BATCH * T; i++) {
        x = x * 1664525u + 1013904223u;
        tokens[i] = (int32_t)(x >> 24);
        targets[i] = (int32_t)((x >> 16) & 0xFF);
    }
    const void *data[2] = {tokens, targets};
    pl_batch batch = {.size = BATCH, .data = data};
    pl_step_result r;
    pl_status st = pl_engine_train_step(e, &batch, &r);
    CHECK(st == PL_STATUS_OK, "train step: %s", pl_last_error());
    return pl_engine_task_records(e, NULL);
}

/* The slice (index into xs) of thread tid that contains ts, or -1. */
static int enclosing(const json_t **xs, int n, double tid, double ts) {
    for (int i = 0; i < n; i++) {
        double s = member_number(xs[i], "ts", 0), d = member_number(xs[i], "dur", 0);
        if (member_number(xs[i], "tid", -1) == tid && s <= ts && ts <= s + d) return i;
    }
    return -1;
}

static void check_x_event(const json_t *ev) {
    const char *name = member_string(ev, "name", NULL);
    const json_t *args = member(ev, "args");
    CHECK(name && *name, "X event without a name");
    CHECK(is_number(member(ev, "ts")) && is_number(member(ev, "dur")) &&
              member_number(ev, "dur", -1) >= 0,
          "%s: ts/dur missing or negative", name ? name : "?");
    CHECK(is_number(member(ev, "pid")) && is_number(member(ev, "tid")),
          "%s: pid/tid missing", name ? name : "?");
    CHECK(args && is_string(member(args, "op")) && is_string(member(args, "phase")) &&
              is_number(member(args, "microbatch")) &&
              is_number(member(args, "stage")) && is_number(member(args, "chunk")),
          "%s: args lack op/phase/microbatch/stage/chunk", name ? name : "?");
    const char *phase = member_string(args, "phase", "");
    CHECK(strlen(phase) == 1 && strchr("FLBWO", phase[0]) &&
              strcmp(member_string(ev, "cat", ""), phase) == 0,
          "%s: phase '%s', cat '%s'", name ? name : "?", phase,
          member_string(ev, "cat", ""));
    /* When it could start: recorded for every task (profiling is on). */
    CHECK(is_number(member(args, "ready_ts")) &&
              member_number(args, "ready_ts", 0) <= member_number(ev, "ts", 0) + 0.001,
          "%s: args.ready_ts missing or after ts (%g > %g)", name ? name : "?",
          member_number(args, "ready_ts", 0), member_number(ev, "ts", 0));
}

/* A fused task's ops run back to back: each after the first was ready
 * when the one before it ended. */
static void check_fused_ready(const json_t **xs, int nx) {
    int checked = 0;
    for (int i = 0; i < nx; i++) {
        double fused = member_number(member(xs[i], "args"), "fused_task", -1);
        if (fused < 0) continue;
        double ts = member_number(xs[i], "ts", 0), prev_end = -1, prev_ts = -1e300;
        for (int j = 0; j < nx; j++) { /* the member just before it */
            double tj = member_number(xs[j], "ts", 0);
            if (j != i && member_number(member(xs[j], "args"), "fused_task", -1) == fused &&
                tj < ts && tj > prev_ts)
                prev_ts = tj, prev_end = tj + member_number(xs[j], "dur", 0);
        }
        if (prev_ts == -1e300) continue;
        double ready = member_number(member(xs[i], "args"), "ready_ts", 0);
        CHECK(fabs(ready - prev_end) < 0.002, "%s: ready_ts %g, but the op before it in "
              "its fused task ended at %g", member_string(xs[i], "name", "?"), ready,
              prev_end);
        checked++;
    }
    CHECK(checked > 0, "no fused task with two ops");
}

/* Flow pairs: every "s" id has one "f", the ends bind to slices, and
 * the consumer starts after the producer ended. Returns the pair count. */
static int check_flows(const json_t *list, const json_t **xs, int nx) {
    int pairs = 0;
    for (size_t i = 0; i < json_array_size(list); i++) {
        const json_t *s = json_array_get(list, i);
        if (strcmp(member_string(s, "ph", ""), "s") != 0) continue;
        double id = member_number(s, "id", -1);
        const json_t *f = NULL;
        int ends = 0;
        for (size_t j = 0; j < json_array_size(list); j++) {
            const json_t *c = json_array_get(list, j);
            if (strcmp(member_string(c, "ph", ""), "f") == 0 &&
                member_number(c, "id", -2) == id &&
                strcmp(member_string(c, "cat", ""), member_string(s, "cat", "?")) == 0) {
                f = c;
                ends++;
            }
        }
        CHECK(ends == 1, "flow %g: %d ends", id, ends);
        if (!f) continue;
        pairs++;
        CHECK(strcmp(member_string(f, "bp", ""), "e") == 0, "flow %g: no bp e", id);
        int a = enclosing(xs, nx, member_number(s, "tid", -1), member_number(s, "ts", -1));
        int b = enclosing(xs, nx, member_number(f, "tid", -1), member_number(f, "ts", -1));
        CHECK(a >= 0 && b >= 0, "flow %g: an end is outside every slice", id);
        if (a < 0 || b < 0) continue;
        double a_end = member_number(xs[a], "ts", 0) + member_number(xs[a], "dur", 0);
        CHECK(member_number(xs[b], "ts", 0) >= a_end - 0.002,
              "flow %g: %s starts before %s ends", id, member_string(xs[b], "name", "?"),
              member_string(xs[a], "name", "?"));
        CHECK(member_number(member(xs[b], "args"), "ready_ts", 0) >= a_end - 0.002,
              "flow %g: %s ready at %g, before %s, whose output it reads, ended at %g", id,
              member_string(xs[b], "name", "?"),
              member_number(member(xs[b], "args"), "ready_ts", 0),
              member_string(xs[a], "name", "?"), a_end);
    }
    int ends = 0;
    for (size_t j = 0; j < json_array_size(list); j++)
        ends += strcmp(member_string(json_array_get(list, j), "ph", ""), "f") == 0;
    CHECK(ends == pairs, "%d flow ends for %d starts", ends, pairs);
    return pairs;
}

/* "stage s / CPU k" for every thread that ran stage-s pipeline tasks. */
static void check_thread_names(const json_t *list, const json_t **xs, int nx) {
    for (int i = 0; i < nx; i++) {
        double tid = member_number(xs[i], "tid", -1);
        const json_t *args = member(xs[i], "args");
        const char *name = NULL;
        for (size_t j = 0; j < json_array_size(list); j++) {
            const json_t *m = json_array_get(list, j);
            if (strcmp(member_string(m, "ph", ""), "M") == 0 &&
                strcmp(member_string(m, "name", ""), "thread_name") == 0 &&
                member_number(m, "tid", -2) == tid)
                name = member_string(member(m, "args"), "name", NULL);
        }
        CHECK(name, "thread %g has slices but no thread_name", tid);
        if (!name || member_string(args, "phase", "O")[0] == 'O') continue;
        char want[32];
        snprintf(want, sizeof want, "stage %d / CPU ",
                 (int)member_number(args, "stage", -1));
        CHECK(strncmp(name, want, strlen(want)) == 0, "%s runs on thread '%s', not '%s*'",
              member_string(xs[i], "name", "?"), name, want);
    }
}

static void check_counters(const json_t *list) {
    for (int s = 0; s < STAGES; s++) {
        char track[64];
        snprintf(track, sizeof track, "stage %d live activations (bytes)", s);
        double first_ts = -1, last = -1, max = 0, prev_ts = -1;
        int n = 0;
        for (size_t j = 0; j < json_array_size(list); j++) {
            const json_t *c = json_array_get(list, j);
            if (strcmp(member_string(c, "ph", ""), "C") != 0 ||
                strcmp(member_string(c, "name", ""), track) != 0)
                continue;
            double v = member_number(member(c, "args"), "value", -1);
            double ts = member_number(c, "ts", -1);
            CHECK(v >= 0 && ts >= prev_ts, "%s: value %g at %g", track, v, ts);
            if (n++ == 0) first_ts = ts;
            last = v;
            prev_ts = ts;
            if (v > max) max = v;
        }
        CHECK(n >= 3 && first_ts == 0 && last == 0 && max > 0,
              "%s: %d samples, first at %g, last %g, max %g", track, n, first_ts, last,
              max);
    }
}

/* A stage's slices in the order its workers started them: args.start_order
 * (a stage has 2 workers here, whose start times may tie or cross), then
 * the timestamp (a fused task's slices share a start order). */
static int cmp_ts(const void *pa, const void *pb) {
    const json_t *x = *(const json_t *const *)pa, *y = *(const json_t *const *)pb;
    double ox = member_number(member(x, "args"), "start_order", -1);
    double oy = member_number(member(y, "args"), "start_order", -1);
    if (ox != oy) return (ox > oy) - (ox < oy);
    double a = member_number(x, "ts", 0);
    double b = member_number(y, "ts", 0);
    return (a > b) - (a < b);
}

/* The schedule read back from the trace: on each stage, the F/L and B
 * slices in start order, collapsed into items, must be exactly 1F1B's
 * order, computed here from the rule: min(p−s−1, m) warm-up forwards,
 * then one forward / one backward, then the remaining backwards. */
static void check_order(const json_t **xs, int nx) {
    const json_t **sorted = malloc((nx + 1) * sizeof *sorted);
    for (int s = 0; s < STAGES; s++) {
        int n = 0;
        for (int i = 0; i < nx; i++) {
            const json_t *args = member(xs[i], "args");
            const char *ph = member_string(args, "phase", "");
            if (member_number(args, "stage", -1) == s && strchr("FLB", ph[0])) {
                CHECK(member_number(args, "start_order", -1) >= 0,
                      "stage %d slice %s has no args.start_order", s,
                      member_string(xs[i], "name", "?"));
                sorted[n++] = xs[i];
            }
        }
        qsort(sorted, n, sizeof *sorted, cmp_ts);
        char got[256] = "", want[256] = "", last[16] = "";
        for (int i = 0; i < n; i++) {
            const json_t *args = member(sorted[i], "args");
            char item[16];
            snprintf(item, sizeof item, "%c%d ",
                     member_string(args, "phase", "?")[0] == 'B' ? 'B' : 'F',
                     (int)member_number(args, "microbatch", -1));
            if (strcmp(item, last) != 0 && strlen(got) + strlen(item) < sizeof got)
                strcat(got, item);
            snprintf(last, sizeof last, "%s", item);
        }
        int warm = STAGES - s - 1 < TILES ? STAGES - s - 1 : TILES, f = 0, b = 0;
        char item[16];
        for (; f < warm; f++) {
            snprintf(item, sizeof item, "F%d ", f);
            strcat(want, item);
        }
        for (; f < TILES; f++, b++) {
            snprintf(item, sizeof item, "F%d B%d ", f, b);
            strcat(want, item);
        }
        for (; b < TILES; b++) {
            snprintf(item, sizeof item, "B%d ", b);
            strcat(want, item);
        }
        CHECK(strcmp(got, want) == 0, "stage %d order from the trace: %s, 1F1B: %s", s,
              got, want);
    }
    free(sorted);
}

static void check_json(const char *path, int n_tasks, double bubble, int *n_flows) {
    size_t size;
    char *text = tu_read_file(path, &size);
    CHECK(text, "cannot read %s", path);
    if (!text) return;
    json_error_t err;
    json_t *root = json_loadb(text, size, 0, &err);
    free(text);
    CHECK(root, "%s: line %d: %s", path, err.line, err.text);
    if (!root) return;
    const json_t *list = member(root, "traceEvents");
    const json_t *other = member(root, "otherData");
    CHECK(json_is_array(list), "no traceEvents array");
    CHECK(strcmp(member_string(root, "displayTimeUnit", ""), "ms") == 0,
          "displayTimeUnit");
    CHECK(strcmp(member_string(other, "schedule", ""), "1f1b") == 0 &&
              member_number(other, "stages", 0) == STAGES &&
              member_number(other, "microbatches", 0) == TILES &&
              fabs(member_number(other, "theoretical_bubble", -1) - bubble) < 1e-12,
          "otherData: schedule %s, stages %g, microbatches %g, bubble %g (want %g)",
          member_string(other, "schedule", "?"), member_number(other, "stages", 0),
          member_number(other, "microbatches", 0),
          member_number(other, "theoretical_bubble", -1), bubble);
    if (!json_is_array(list)) {
        json_decref(root);
        return;
    }
    const json_t **xs = malloc((json_array_size(list) + 1) * sizeof *xs);
    int nx = 0;
    for (size_t i = 0; i < json_array_size(list); i++)
        if (strcmp(member_string(json_array_get(list, i), "ph", ""), "X") == 0) {
            check_x_event(json_array_get(list, i));
            xs[nx++] = json_array_get(list, i);
        }
    CHECK(nx == n_tasks, "%d X events for %d tasks", nx, n_tasks);
    check_order(xs, nx);
    check_fused_ready(xs, nx);
    *n_flows = check_flows(list, xs, nx);
    CHECK(*n_flows > 0, "no flows between the two stages");
    check_thread_names(list, xs, nx);
    check_counters(list);
    free(xs);
    json_decref(root);
}

static int count_prefix(const char *path, const char *prefix) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) n += strncmp(line, prefix, strlen(prefix)) == 0;
    fclose(f);
    return n;
}

static void check_paje(const char *dir, const char *path, int n_tasks, int n_flows) {
    if (access("/usr/bin/pj_dump", X_OK) != 0) {
        printf("note: /usr/bin/pj_dump not found (Debian: pajeng); Paje check skipped\n");
        return;
    }
    char dump[4200], cmd[9000];
    snprintf(dump, sizeof dump, "%s/pj_dump.out", dir);
    snprintf(cmd, sizeof cmd, "/usr/bin/pj_dump '%s' > '%s'", path, dump);
    int rc = system(cmd);
    CHECK(rc == 0, "pj_dump %s: status %d", path, rc);
    int states = count_prefix(dump, "State"), links = count_prefix(dump, "Link");
    CHECK(states == n_tasks, "pj_dump: %d State lines for %d tasks", states, n_tasks);
    CHECK(links == n_flows, "pj_dump: %d Link lines for %d flows", links, n_flows);
    printf("pj_dump: %d states, %d links\n", states, links);
    remove(dump);
}

/* util/json_where.c, which the readers of traces (`pleiades trace-summary`)
 * and checkpoints use to name where malformed JSON breaks: the offset,
 * line and column of the offending token and the member holding it, on
 * errors of every kind jansson reports; and the offsets of values. */
static void path_text(char *buf, size_t size, const pl_json_path *p) {
    size_t at = 0;
    buf[0] = '\0';
    for (int d = 0; d < p->n && at < size; d++)
        at += (size_t)(p->step[d].member
                           ? snprintf(buf + at, size - at, "%s%s", d ? "." : "",
                                      p->step[d].name)
                           : snprintf(buf + at, size - at, "[%zu]", p->step[d].index));
}

static void check_json_where(void) {
    static char big[500];
    snprintf(big, sizeof big, "{\"n\": 1%0400d}", 0); /* a 401-digit integer */
    const struct {
        const char *text;
        size_t flags, offset;
        int line, column;
        const char *path;
    } bad[] = {
        {"{\"a\": [1, 2, {\"b\": tru}]}", 0, 19, 1, 20, "a[2].b"},
        /* the column counts characters: é is two bytes */
        {"{\n  \"x\": 1,\n  \"y\": \"caf\xc3\xa9\" 7}", 0, 27, 3, 15, ""},
        /* a name too long for jansson to quote in its message */
        {"{\"a_rather_long_member_name\": 1, \"a_rather_long_member_name\": 2}",
         JSON_REJECT_DUPLICATES, 33, 1, 34, "a_rather_long_member_name"},
        {"{\"k\\u0065y\": {\"dup\": 1, \"dup\": 2}}", JSON_REJECT_DUPLICATES, 24, 1,
         25, "key.dup"},
        {"[0, {\"ts\": -1e400}]", JSON_DECODE_INT_AS_REAL, 11, 1, 12, "[1].ts"},
        {big, 0, 6, 1, 7, "n"},
        {"[\"a\xff\"]", 0, 3, 1, 4, "[0]"},
        {"{} x", 0, 3, 1, 4, ""},
        {"[1,]", 0, 3, 1, 4, ""},
        {"{\"traceEvents\": [ {\"ph\": \"X\", ", 0, 30, 1, 31, "traceEvents[0]"},
        {"", 0, 0, 1, 1, ""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *t = bad[i].text;
        size_t n = strlen(t);
        json_error_t err;
        json_t *v = json_loadb(t, n, bad[i].flags, &err);
        CHECK(!v, "case %zu: '%s' decoded", i, t);
        json_decref(v);
        if (v) continue;
        pl_json_where w = pl_json_error_where(t, n, &err);
        pl_json_path p;
        pl_json_error_path(t, n, bad[i].flags, &err, &p);
        char path[256];
        path_text(path, sizeof path, &p);
        CHECK(w.offset == bad[i].offset && w.line == bad[i].line &&
                  w.column == bad[i].column && strcmp(path, bad[i].path) == 0,
              "case %zu (%s): byte %zu, line %d, column %d, in '%s'; want byte %zu, "
              "line %d, column %d, in '%s'",
              i, err.text, w.offset, w.line, w.column, path, bad[i].offset,
              bad[i].line, bad[i].column, bad[i].path);
    }
    /* Offsets of values by the index of each member and element. */
    const char *t = "{\"t\": {\"dtype\": \"F32\", \"shape\": [1, 2.5]}, \"u\": {}}";
    size_t n = strlen(t);
    const pl_json_step shape1[] = {{.member = true, .index = 0},
                                   {.member = true, .index = 1},
                                   {.member = false, .index = 1}};
    const pl_json_step u[] = {{.member = true, .index = 1}};
    const pl_json_step none[] = {{.member = true, .index = 0},
                                 {.member = true, .index = 2}};
    const pl_json_step not_array[] = {{.member = false, .index = 0}};
    CHECK(pl_json_offset(t, n, 0, shape1, 3) == 36, "t.shape[1] at %zu, want 36",
          pl_json_offset(t, n, 0, shape1, 3));
    CHECK(pl_json_offset(t, n, 0, u, 1) == 48, "u at %zu, want 48",
          pl_json_offset(t, n, 0, u, 1));
    CHECK(pl_json_offset(t, n, 0, none, 2) == n, "a third member of t found");
    CHECK(pl_json_offset(t, n, 0, not_array, 1) == n, "an element of an object found");
    CHECK(pl_json_offset(t, n, 0, NULL, 0) == 0, "the top level not at 0");
    t = " {\n \"a\\\"b\" :\t[ true ,\n null ] }"; /* blanks, an escaped name */
    const pl_json_step ab1[] = {{.member = true, .index = 0}, {.member = false, .index = 1}};
    CHECK(pl_json_offset(t, strlen(t), 0, ab1, 2) == 23, "a\"b[1] at %zu, want 23",
          pl_json_offset(t, strlen(t), 0, ab1, 2));
}

static void check_errors(pl_engine_t *e, const char *dir) {
    pl_status st = pl_engine_write_trace(NULL, "x.json", NULL);
    CHECK(st == PL_STATUS_INVALID_ARGUMENT, "NULL engine: %s", pl_status_string(st));
    st = pl_engine_write_trace(e, "/nonexistent-dir/trace.json", NULL);
    CHECK(st == PL_STATUS_IO_ERROR && strstr(pl_last_error(), "/nonexistent-dir/trace.json"),
          "unwritable JSON path: %s, '%s'", pl_status_string(st), pl_last_error());
    st = pl_engine_write_trace(e, NULL, "/nonexistent-dir/trace.paje");
    CHECK(st == PL_STATUS_IO_ERROR && strstr(pl_last_error(), "/nonexistent-dir/trace.paje"),
          "unwritable Paje path: %s, '%s'", pl_status_string(st), pl_last_error());
    DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d));)
        CHECK(!strstr(de->d_name, ".tmp."), "temporary file %s left behind", de->d_name);
    if (d) closedir(d);
}

int main(int argc, char **argv) {
    char tmpdir[] = "/tmp/pl_test_trace_XXXXXX";
    const char *dir = argc > 1 ? argv[1] : mkdtemp(tmpdir);
    if (!dir) {
        perror("mkdtemp");
        return 1;
    }
    check_json_where();
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 4;
    ro.profiling = true;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) {
        printf("FAIL: runtime: %s\n", pl_last_error());
        return 1;
    }
    pl_graph_t *g = pl_graph_new(7);
    pl_gpt_config cfg = {.vocab = V, .context = T, .channels = C, .layers = L, .heads = NH};
    pl_gpt_model model;
    CHECK(pl_gpt_build(g, &cfg, &model) == PL_STATUS_OK, "gpt: %s", pl_last_error());
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = BATCH;
    eo.tiles = TILES;
    eo.schedule = PL_SCHEDULE_1F1B;
    eo.stages = STAGES;
    eo.record_tasks = true;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK(e, "engine: %s", pl_last_error());
    if (e) {
        CHECK(pl_engine_write_trace(e, NULL, NULL) == PL_STATUS_INVALID_ARGUMENT,
              "a trace before any step");
        int n_tasks = run_step(e);
        char json[4096], paje[4096];
        snprintf(json, sizeof json, "%s/trace.json", dir);
        snprintf(paje, sizeof paje, "%s/trace.paje", dir);
        pl_status st = pl_engine_write_trace(e, json, paje);
        CHECK(st == PL_STATUS_OK, "write_trace: %s", pl_last_error());
        int n_flows = 0;
        check_json(json, n_tasks, pl_engine_theoretical_bubble(e), &n_flows);
        printf("%d tasks, %d flows\n", n_tasks, n_flows);
        check_paje(dir, paje, n_tasks, n_flows);
        check_errors(e, dir);
        if (argc <= 1) {
            remove(json);
            remove(paje);
        }
    }
    pl_engine_free(e);
    pl_graph_free(g);
    pl_runtime_free(rt);
    if (argc <= 1) rmdir(dir);
    if (tu_failures) printf("%d check(s) failed\n", tu_failures);
    else printf("ok\n");
    return tu_failures ? 1 : 0;
}
