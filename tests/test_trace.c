/* pl_engine_write_trace on one pipelined GPT step.
 *
 * Model: pl_gpt_build with V=256 T=16 C=32 L=4 NH=4, batch 8 in 4
 * microbatches, 1F1B over 2 stages on a runtime of 4 CPU workers with
 * profiling and record_tasks. After one training step the trace is written
 * as JSON and Paje, and checked:
 *   JSON (parsed with cli/json.c, a general JSON reader): the top level
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
 *   The JSON reader itself: escapes (surrogate pairs too), numbers,
 *   nesting, and malformed input rejected with a position.
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

#include "cli/json.h"
#include "pleiades.h"
#include "test_util.h"

enum { V = 256, T = 16, C = 32, L = 4, NH = 4, BATCH = 8, TILES = 4, STAGES = 2 };

static bool is_number(const json_value *v) { return v && v->type == JSON_NUMBER; }
static bool is_string(const json_value *v) { return v && v->type == JSON_STRING; }

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
static int enclosing(const json_value **xs, int n, double tid, double ts) {
    for (int i = 0; i < n; i++) {
        double s = json_get_number(xs[i], "ts", 0), d = json_get_number(xs[i], "dur", 0);
        if (json_get_number(xs[i], "tid", -1) == tid && s <= ts && ts <= s + d) return i;
    }
    return -1;
}

static void check_x_event(const json_value *ev) {
    const char *name = json_get_string(ev, "name", NULL);
    const json_value *args = json_get(ev, "args");
    CHECK(name && *name, "X event without a name");
    CHECK(is_number(json_get(ev, "ts")) && is_number(json_get(ev, "dur")) &&
              json_get_number(ev, "dur", -1) >= 0,
          "%s: ts/dur missing or negative", name ? name : "?");
    CHECK(is_number(json_get(ev, "pid")) && is_number(json_get(ev, "tid")),
          "%s: pid/tid missing", name ? name : "?");
    CHECK(args && is_string(json_get(args, "op")) && is_string(json_get(args, "phase")) &&
              is_number(json_get(args, "microbatch")) &&
              is_number(json_get(args, "stage")) && is_number(json_get(args, "chunk")),
          "%s: args lack op/phase/microbatch/stage/chunk", name ? name : "?");
    const char *phase = json_get_string(args, "phase", "");
    CHECK(strlen(phase) == 1 && strchr("FLBWO", phase[0]) &&
              strcmp(json_get_string(ev, "cat", ""), phase) == 0,
          "%s: phase '%s', cat '%s'", name ? name : "?", phase,
          json_get_string(ev, "cat", ""));
}

/* Flow pairs: every "s" id has one "f", the ends bind to slices, and
 * the consumer starts after the producer ended. Returns the pair count. */
static int check_flows(const json_value *list, const json_value **xs, int nx) {
    int pairs = 0;
    for (size_t i = 0; i < list->n; i++) {
        const json_value *s = &list->items[i];
        if (strcmp(json_get_string(s, "ph", ""), "s") != 0) continue;
        double id = json_get_number(s, "id", -1);
        const json_value *f = NULL;
        int ends = 0;
        for (size_t j = 0; j < list->n; j++) {
            const json_value *c = &list->items[j];
            if (strcmp(json_get_string(c, "ph", ""), "f") == 0 &&
                json_get_number(c, "id", -2) == id &&
                strcmp(json_get_string(c, "cat", ""), json_get_string(s, "cat", "?")) == 0) {
                f = c;
                ends++;
            }
        }
        CHECK(ends == 1, "flow %g: %d ends", id, ends);
        if (!f) continue;
        pairs++;
        CHECK(strcmp(json_get_string(f, "bp", ""), "e") == 0, "flow %g: no bp e", id);
        int a = enclosing(xs, nx, json_get_number(s, "tid", -1), json_get_number(s, "ts", -1));
        int b = enclosing(xs, nx, json_get_number(f, "tid", -1), json_get_number(f, "ts", -1));
        CHECK(a >= 0 && b >= 0, "flow %g: an end is outside every slice", id);
        if (a < 0 || b < 0) continue;
        double a_end = json_get_number(xs[a], "ts", 0) + json_get_number(xs[a], "dur", 0);
        CHECK(json_get_number(xs[b], "ts", 0) >= a_end - 0.002,
              "flow %g: %s starts before %s ends", id, json_get_string(xs[b], "name", "?"),
              json_get_string(xs[a], "name", "?"));
    }
    int ends = 0;
    for (size_t j = 0; j < list->n; j++)
        ends += strcmp(json_get_string(&list->items[j], "ph", ""), "f") == 0;
    CHECK(ends == pairs, "%d flow ends for %d starts", ends, pairs);
    return pairs;
}

/* "stage s / CPU k" for every thread that ran stage-s pipeline tasks. */
static void check_thread_names(const json_value *list, const json_value **xs, int nx) {
    for (int i = 0; i < nx; i++) {
        double tid = json_get_number(xs[i], "tid", -1);
        const json_value *args = json_get(xs[i], "args");
        const char *name = NULL;
        for (size_t j = 0; j < list->n; j++) {
            const json_value *m = &list->items[j];
            if (strcmp(json_get_string(m, "ph", ""), "M") == 0 &&
                strcmp(json_get_string(m, "name", ""), "thread_name") == 0 &&
                json_get_number(m, "tid", -2) == tid)
                name = json_get_string(json_get(m, "args"), "name", NULL);
        }
        CHECK(name, "thread %g has slices but no thread_name", tid);
        if (!name || json_get_string(args, "phase", "O")[0] == 'O') continue;
        char want[32];
        snprintf(want, sizeof want, "stage %d / CPU ",
                 (int)json_get_number(args, "stage", -1));
        CHECK(strncmp(name, want, strlen(want)) == 0, "%s runs on thread '%s', not '%s*'",
              json_get_string(xs[i], "name", "?"), name, want);
    }
}

static void check_counters(const json_value *list) {
    for (int s = 0; s < STAGES; s++) {
        char track[64];
        snprintf(track, sizeof track, "stage %d live activations (bytes)", s);
        double first_ts = -1, last = -1, max = 0, prev_ts = -1;
        int n = 0;
        for (size_t j = 0; j < list->n; j++) {
            const json_value *c = &list->items[j];
            if (strcmp(json_get_string(c, "ph", ""), "C") != 0 ||
                strcmp(json_get_string(c, "name", ""), track) != 0)
                continue;
            double v = json_get_number(json_get(c, "args"), "value", -1);
            double ts = json_get_number(c, "ts", -1);
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

static int cmp_ts(const void *pa, const void *pb) {
    double a = json_get_number(*(const json_value *const *)pa, "ts", 0);
    double b = json_get_number(*(const json_value *const *)pb, "ts", 0);
    return (a > b) - (a < b);
}

/* The schedule read back from the trace: on each stage, the F/L and B
 * slices in time order, collapsed into items, must be exactly 1F1B's
 * order, computed here from the rule: min(p−s−1, m) warm-up forwards,
 * then one forward / one backward, then the remaining backwards. */
static void check_order(const json_value **xs, int nx) {
    const json_value **sorted = malloc((nx + 1) * sizeof *sorted);
    for (int s = 0; s < STAGES; s++) {
        int n = 0;
        for (int i = 0; i < nx; i++) {
            const json_value *args = json_get(xs[i], "args");
            const char *ph = json_get_string(args, "phase", "");
            if (json_get_number(args, "stage", -1) == s && strchr("FLB", ph[0]))
                sorted[n++] = xs[i];
        }
        qsort(sorted, n, sizeof *sorted, cmp_ts);
        char got[256] = "", want[256] = "", last[16] = "";
        for (int i = 0; i < n; i++) {
            const json_value *args = json_get(sorted[i], "args");
            char item[16];
            snprintf(item, sizeof item, "%c%d ",
                     json_get_string(args, "phase", "?")[0] == 'B' ? 'B' : 'F',
                     (int)json_get_number(args, "microbatch", -1));
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
    char err[256];
    json_value *root = json_parse(text, size, err, sizeof err);
    free(text);
    CHECK(root, "%s: %s", path, err);
    if (!root) return;
    const json_value *list = json_get(root, "traceEvents");
    const json_value *other = json_get(root, "otherData");
    CHECK(list && list->type == JSON_ARRAY, "no traceEvents array");
    CHECK(strcmp(json_get_string(root, "displayTimeUnit", ""), "ms") == 0,
          "displayTimeUnit");
    CHECK(strcmp(json_get_string(other, "schedule", ""), "1f1b") == 0 &&
              json_get_number(other, "stages", 0) == STAGES &&
              json_get_number(other, "microbatches", 0) == TILES &&
              fabs(json_get_number(other, "theoretical_bubble", -1) - bubble) < 1e-12,
          "otherData: schedule %s, stages %g, microbatches %g, bubble %g (want %g)",
          json_get_string(other, "schedule", "?"), json_get_number(other, "stages", 0),
          json_get_number(other, "microbatches", 0),
          json_get_number(other, "theoretical_bubble", -1), bubble);
    if (!list || list->type != JSON_ARRAY) {
        json_free(root);
        return;
    }
    const json_value **xs = malloc((list->n + 1) * sizeof *xs);
    int nx = 0;
    for (size_t i = 0; i < list->n; i++)
        if (strcmp(json_get_string(&list->items[i], "ph", ""), "X") == 0) {
            check_x_event(&list->items[i]);
            xs[nx++] = &list->items[i];
        }
    CHECK(nx == n_tasks, "%d X events for %d tasks", nx, n_tasks);
    check_order(xs, nx);
    *n_flows = check_flows(list, xs, nx);
    CHECK(*n_flows > 0, "no flows between the two stages");
    check_thread_names(list, xs, nx);
    check_counters(list);
    free(xs);
    json_free(root);
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

/* The reader the trace checks rely on (cli/json.c), on the general JSON
 * grammar rather than our writer's layout. */
static void check_json_reader(void) {
    const char *good =
        " { \"a\" : [ 1, -0.5e+2, 3E-1, 0, true, false, null, [], {} ],\n"
        "\t\"s\": \"q\\\" \\\\ \\/ \\b\\f\\n\\r\\t \\u00e9 \\ud83d\\ude00\","
        " \"nested\": {\"x\": {\"y\": [[[\"deep\"]]]}}, \"a\": 2 } ";
    char err[256];
    json_value *v = json_parse(good, strlen(good), err, sizeof err);
    CHECK(v, "valid JSON rejected: %s", err);
    if (v) {
        const json_value *s = json_get(v, "s");
        CHECK(s && s->type == JSON_STRING &&
                  strcmp(s->string, "q\" \\ / \b\f\n\r\t \xc3\xa9 \xf0\x9f\x98\x80") == 0,
              "string escapes decoded as '%s'", s ? s->string : "?");
        CHECK(json_get_number(v, "a", 0) == 2, "a repeated key: the last one wins");
        const json_value *a = &v->items[0];
        CHECK(a->type == JSON_ARRAY && a->n == 9 && a->items[1].number == -50 &&
                  fabs(a->items[2].number - 0.3) < 1e-15 && a->items[4].boolean &&
                  a->items[6].type == JSON_NULL && a->items[8].type == JSON_OBJECT,
              "array values");
        const json_value *y = json_get(json_get(json_get(v, "nested"), "x"), "y");
        CHECK(y && strcmp(y->items[0].items[0].items[0].string, "deep") == 0, "nesting");
        json_free(v);
    }
    const char *bad[] = {"", "{", "[1,]", "{\"a\":1,}", "01", "1.", "-", ".5", "1e",
                         "\"\\x\"", "\"\\ud800\"", "\"a\nb\"", "tru", "{\"a\" 1}",
                         "[1] 2", "{1:2}", "\"unterminated", "nul"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v = json_parse(bad[i], strlen(bad[i]), err, sizeof err);
        CHECK(!v && strncmp(err, "line 1, column ", 15) == 0,
              "invalid JSON '%s' accepted or no position (%s)", bad[i], err);
        json_free(v);
    }
    char deep[2000];
    memset(deep, '[', sizeof deep);
    v = json_parse(deep, sizeof deep, err, sizeof err);
    CHECK(!v && strstr(err, "nesting"), "2000 nested arrays: %s", err);
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
    check_json_reader();
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
