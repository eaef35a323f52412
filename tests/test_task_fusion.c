/* Fused op tasks (pl_engine_options.fuse_tasks, engine/task_fusion.c).
 *
 * One runtime with 4 StarPU CPU workers and profiling on; GPT V=256 T=16
 * C=32 L=4 NH=4, batch 8, graph seed 1234, AdamW, 4 steps on fixed
 * pseudo-random tokens.
 *
 * 1. Same results. For each configuration — none with 1, 4 and 8 tiles
 *    (8 tiles on 4 workers: groups per block, otherwise per item),
 *    1F1B p=2 m=4, interleaved p=2 v=2 m=4, ZB-H1 p=2 m=4, 1F1B with
 *    gradient accumulation (2) and clipping (max_norm 0.5), bf16 with 2
 *    tiles — an engine with fuse_tasks and one without train on the same
 *    batches: the losses and every parameter afterwards must be equal BIT
 *    FOR BIT (fusion runs the same kernels on the same buffers in the
 *    order StarPU's sequential consistency gave the separate tasks), and
 *    the parameters must have moved (not vacuous).
 *
 * 2. Records. One step with record_tasks of ZB-H1 p=2 m=4 and of none
 *    with 2 tiles, fused and not:
 *    - both list the same tasks (the same multiset of names): members of
 *      a fused task are recorded one by one;
 *    - unfused, every record says fused = -1; fused, the F/L/B records
 *      (and on the pipeline the W records too) ran as fewer than a third
 *      as many StarPU tasks (distinct fused ids, plus records of their
 *      own), so fusion did happen; without pipelining every W record is a
 *      task of its own (they are kept apart by design);
 *    - the members of one fused task ran on one worker, one after another
 *      in record order (each starts at or after the previous one's end),
 *      are of one kind (forward/loss, input gradient or weight gradient)
 *      and one microbatch, and on a pipeline of one stage and chunk;
 *    - the Chrome trace of the fused step names the fused task of each
 *      member ("fused_task").
 *
 * 3. A placement policy turns fusion off (it moves chunks per op task):
 *    under a static placement (a runtime with a 256 MiB budget) every
 *    record says fused = -1.
 *
 * Exit status 0 on success; every failed check prints a FAIL line. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pleiades.h"
#include "test_util.h"

enum { V = 256, T = 16, C = 32, NH = 4, LAYERS = 4, BATCH = 8, STEPS = 4, WORKERS = 4 };
#define SEED 1234

static int32_t tokens[STEPS][BATCH * T], targets[STEPS][BATCH * T];

static void make_data(void) {
    uint64_t s = 77;
    for (int st = 0; st < STEPS; st++)
        tu_ramp_tokens(&s, V, T, BATCH, tokens[st], targets[st]);
}

typedef struct config {
    const char *name;
    pl_schedule_kind schedule;
    int p, v, m;
    int accumulate;
    float max_norm;
    pl_precision precision;
} config;

typedef struct model {
    pl_graph_t *g;
    pl_engine_t *e;
} model;

static void model_free(model *md) {
    pl_engine_free(md->e);
    pl_graph_free(md->g);
}

static bool model_new(pl_runtime_t *rt, const config *c, bool fuse, bool record,
                      bool placement, model *md) {
    md->e = NULL;
    md->g = pl_graph_new(SEED);
    if (!md->g) return false;
    pl_gpt_config gc = {.vocab = V, .context = T, .channels = C, .layers = LAYERS,
                        .heads = NH};
    pl_gpt_model gm;
    if (pl_gpt_build(md->g, &gc, &gm) != PL_STATUS_OK) {
        pl_graph_free(md->g);
        return false;
    }
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = BATCH;
    eo.tiles = c->m;
    eo.schedule = c->schedule;
    eo.stages = c->schedule == PL_SCHEDULE_NONE ? 0 : c->p;
    eo.model_chunks = c->v;
    /* A fixed cut: the measured one would time a step, and the timed
     * step's tasks are never fused. */
    eo.stage_balance = PL_STAGE_BALANCE_FLOPS;
    eo.accumulate_size = c->accumulate;
    eo.max_norm = c->max_norm;
    eo.precision = c->precision;
    eo.record_tasks = record;
    eo.fuse_tasks = fuse;
    if (placement) eo.placement.policy = pl_placement_static();
    md->e = pl_engine_new(rt, md->g, &eo);
    if (!md->e) {
        pl_graph_free(md->g);
        return false;
    }
    return true;
}

static bool step(model *md, int s, double *loss) {
    return tu_train_tokens(md->e, tokens[s % STEPS], targets[s % STEPS], BATCH, s, loss);
}

static int64_t read_params(model *md, float *dst) {
    return tu_read_params(md->g, md->e, dst);
}

typedef struct train_result {
    double losses[STEPS];
    float *params, *initial;
    int64_t n;
} train_result;

static bool train(pl_runtime_t *rt, const config *c, bool fuse, train_result *r) {
    memset(r, 0, sizeof *r);
    model md;
    if (!model_new(rt, c, fuse, false, false, &md)) {
        printf("FAIL: engine for %s (fuse_tasks %d): %s\n", c->name, fuse, pl_last_error());
        tu_failures++;
        return false;
    }
    r->n = read_params(&md, NULL);
    r->params = tu_xmalloc((size_t)r->n * sizeof *r->params);
    r->initial = tu_xmalloc((size_t)r->n * sizeof *r->initial);
    bool ok = read_params(&md, r->initial) == r->n;
    for (int s = 0; ok && s < STEPS; s++) ok = step(&md, s, &r->losses[s]);
    ok = ok && read_params(&md, r->params) == r->n;
    model_free(&md);
    CHECK(ok, "training %s (fuse_tasks %d) failed", c->name, fuse);
    return ok;
}

/* ---------------------------------------------------------- 1. same results */

static void test_same_results(pl_runtime_t *rt) {
    const config cfgs[] = {
        {"none, 1 tile", PL_SCHEDULE_NONE, 1, 1, 1, 1, 0.0f, PL_PRECISION_FP32},
        {"none, 4 tiles", PL_SCHEDULE_NONE, 1, 1, 4, 1, 0.0f, PL_PRECISION_FP32},
        {"none, 8 tiles (per block)", PL_SCHEDULE_NONE, 1, 1, 8, 1, 0.0f, PL_PRECISION_FP32},
        {"1f1b p=2 m=4", PL_SCHEDULE_1F1B, 2, 1, 4, 1, 0.0f, PL_PRECISION_FP32},
        {"interleaved p=2 v=2 m=4", PL_SCHEDULE_INTERLEAVED, 2, 2, 4, 1, 0.0f,
         PL_PRECISION_FP32},
        {"zb-h1 p=2 m=4", PL_SCHEDULE_ZB_H1, 2, 1, 4, 1, 0.0f, PL_PRECISION_FP32},
        {"1f1b p=2 m=4, accumulate 2, max_norm 0.5", PL_SCHEDULE_1F1B, 2, 1, 4, 2, 0.5f,
         PL_PRECISION_FP32},
        {"bf16 none, 2 tiles", PL_SCHEDULE_NONE, 1, 1, 2, 1, 0.0f, PL_PRECISION_BF16},
    };
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        const config *c = &cfgs[i];
        train_result a, b;
        bool ok = train(rt, c, false, &a);
        ok = train(rt, c, true, &b) && ok;
        if (ok) {
            bool same_loss = memcmp(a.losses, b.losses, sizeof a.losses) == 0;
            size_t bytes = (size_t)a.n * sizeof *a.params;
            bool same_params = a.n == b.n && memcmp(a.params, b.params, bytes) == 0;
            bool moved = memcmp(a.params, a.initial, bytes) != 0;
            printf("same results: %-42s losses %.9g .. %.9g (fused %.9g .. %.9g)\n",
                   c->name, a.losses[0], a.losses[STEPS - 1], b.losses[0],
                   b.losses[STEPS - 1]);
            CHECK(same_loss, "%s: fused losses differ from separate tasks'", c->name);
            CHECK(same_params, "%s: fused parameters differ from separate tasks'", c->name);
            CHECK(moved, "%s: parameters never moved (comparison vacuous)", c->name);
        }
        free(a.params);
        free(a.initial);
        free(b.params);
        free(b.initial);
    }
}

/* -------------------------------------------------------------- 2. records */

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const pl_task_record *)a)->name, ((const pl_task_record *)b)->name);
}

/* One training step's records (after a first, untimed one), copied. */
static int step_records(pl_runtime_t *rt, const config *c, bool fuse, bool placement,
                        pl_task_record **out, const char *trace_path) {
    *out = NULL;
    model md;
    if (!model_new(rt, c, fuse, true, placement, &md)) {
        printf("FAIL: engine for %s (fuse_tasks %d, records): %s\n", c->name, fuse,
               pl_last_error());
        tu_failures++;
        return -1;
    }
    int n = -1;
    if (step(&md, 0, NULL) && step(&md, 1, NULL)) {
        const pl_task_record *rec;
        n = pl_engine_task_records(md.e, &rec);
        if (n > 0) {
            *out = tu_xmalloc((size_t)n * sizeof **out);
            memcpy(*out, rec, (size_t)n * sizeof **out);
        }
        if (trace_path && pl_engine_write_trace(md.e, trace_path, NULL) != PL_STATUS_OK) {
            printf("FAIL: %s: writing the trace: %s\n", c->name, pl_last_error());
            tu_failures++;
        }
    }
    model_free(&md);
    CHECK(n > 0, "%s (fuse_tasks %d): no task records", c->name, fuse);
    return n;
}

static bool op_phase(char ph) { return ph == 'F' || ph == 'L' || ph == 'B' || ph == 'W'; }

/* The kind of work a record is: forward (with the loss), input gradient,
 * weight gradient. */
static int kind_of(char ph) { return ph == 'F' || ph == 'L' ? 0 : ph == 'B' ? 1 : 2; }

static void check_records(pl_runtime_t *rt, const config *c) {
    char trace[4096];
    tu_scratch_path(trace, sizeof trace, "fused.json");
    pl_task_record *sep, *fus;
    int ns = step_records(rt, c, false, false, &sep, NULL);
    int nf = step_records(rt, c, true, false, &fus, trace);
    if (ns <= 0 || nf <= 0) {
        free(sep);
        free(fus);
        return;
    }
    /* The same tasks, fused or not. */
    CHECK(ns == nf, "%s: %d records fused, %d separate", c->name, nf, ns);
    if (ns == nf) {
        pl_task_record *a = tu_xmalloc((size_t)ns * sizeof *a);
        pl_task_record *b = tu_xmalloc((size_t)nf * sizeof *b);
        memcpy(a, sep, (size_t)ns * sizeof *a);
        memcpy(b, fus, (size_t)nf * sizeof *b);
        qsort(a, (size_t)ns, sizeof *a, cmp_name);
        qsort(b, (size_t)nf, sizeof *b, cmp_name);
        bool same = true;
        for (int i = 0; i < ns && same; i++) same = strcmp(a[i].name, b[i].name) == 0;
        CHECK(same, "%s: the fused step's records name other tasks than the separate "
              "step's", c->name);
        free(a);
        free(b);
    }
    bool all_own = true;
    for (int i = 0; i < ns; i++) all_own = all_own && sep[i].fused == -1;
    CHECK(all_own, "%s: fuse_tasks off, yet a record says it ran fused", c->name);

    /* Fused: how many StarPU tasks ran the op records, and each fused
     * task's members. */
    int ops = 0, tasks = 0;
    bool ok_worker = true, ok_order = true, ok_kind = true, ok_mb = true, ok_place = true,
         ok_w_own = true;
    for (int i = 0; i < nf; i++) {
        const pl_task_record *r = &fus[i];
        if (!op_phase(r->phase)) continue;
        if (r->phase == 'W' && c->schedule == PL_SCHEDULE_NONE) {
            ok_w_own = ok_w_own && r->fused == -1;
            continue;
        }
        ops++;
        const pl_task_record *first = NULL, *prev = NULL;
        for (int j = 0; j < i && !first; j++)
            if (fus[j].fused >= 0 && fus[j].fused == r->fused) first = &fus[j];
        if (r->fused < 0 || !first) {
            tasks++;
            continue;
        }
        for (int j = i - 1; j >= 0 && !prev; j--)
            if (fus[j].fused == r->fused) prev = &fus[j];
        ok_worker = ok_worker && r->worker == first->worker;
        ok_order = ok_order && r->start_us >= prev->end_us;
        ok_kind = ok_kind && kind_of(r->phase) == kind_of(first->phase);
        ok_mb = ok_mb && r->microbatch == first->microbatch;
        ok_place = ok_place && (c->schedule == PL_SCHEDULE_NONE ||
                                (r->stage == first->stage && r->chunk == first->chunk));
    }
    printf("records: %-24s %d op records (W too on pipelines) ran as %d StarPU tasks "
           "fused\n", c->name, ops, tasks);
    CHECK(ops > 0 && 3 * tasks < ops,
          "%s: %d op records ran as %d StarPU tasks: fusion should cut them to under a "
          "third", c->name, ops, tasks);
    CHECK(ok_w_own, "%s: a weight gradient ran fused without pipelining", c->name);
    CHECK(ok_worker, "%s: a fused task's members ran on different workers", c->name);
    CHECK(ok_order, "%s: a fused task's members overlap or are out of record order",
          c->name);
    CHECK(ok_kind, "%s: a fused task mixes forward, input and weight gradients", c->name);
    CHECK(ok_mb, "%s: a fused task mixes microbatches", c->name);
    CHECK(ok_place, "%s: a fused task spans pipeline stages or chunks", c->name);
    size_t len = 0;
    char *json = tu_read_file(trace, &len);
    CHECK(json && strstr(json, "\"fused_task\":"),
          "%s: the Chrome trace does not name the fused tasks", c->name);
    free(json);
    free(sep);
    free(fus);
}

static void test_records(pl_runtime_t *rt) {
    const config zb = {"zb-h1 p=2 m=4", PL_SCHEDULE_ZB_H1, 2, 1, 4, 1, 0.0f,
                       PL_PRECISION_FP32};
    const config none = {"none, 2 tiles", PL_SCHEDULE_NONE, 1, 1, 2, 1, 0.0f,
                         PL_PRECISION_FP32};
    check_records(rt, &zb);
    check_records(rt, &none);
}

/* ------------------------------------------------------------ 3. placement */

static void test_placement_off(pl_runtime_t *rt) {
    const config c = {"none, 2 tiles, static placement", PL_SCHEDULE_NONE, 1, 1, 2, 1,
                      0.0f, PL_PRECISION_FP32};
    pl_task_record *rec;
    int n = step_records(rt, &c, true, true, &rec, NULL);
    bool all_own = n > 0;
    for (int i = 0; i < n; i++) all_own = all_own && rec[i].fused == -1;
    CHECK(all_own, "%s: a task ran fused under a placement policy", c.name);
    free(rec);
}

int main(void) {
    tu_time_limit(300, "a fused step deadlocked?");
    if (!tu_scratch_create("task_fusion")) return 1;
    make_data();
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = WORKERS;
    ro.profiling = true;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) {
        printf("FAIL: pl_runtime_new: %s\n", pl_last_error());
        return 1;
    }
    test_same_results(rt);
    test_records(rt);
    pl_runtime_free(rt);
    /* Placement needs a runtime with a compute-tier budget. */
    ro.compute_budget_mb = 256;
    if (!(rt = pl_runtime_new(&ro))) {
        printf("FAIL: pl_runtime_new with a budget: %s\n", pl_last_error());
        return 1;
    }
    test_placement_off(rt);
    pl_runtime_free(rt);
    tu_remove_tree(tu_scratch_dir());
    if (tu_failures) {
        printf("%d check(s) failed\n", tu_failures);
        return 1;
    }
    printf("all task fusion checks passed\n");
    return 0;
}
