/* Full checkpoints (pleiades/checkpoint.h): 20 updates straight vs 10,
 * save, a fresh engine (other initial weights), load, 10 more — the last 10
 * losses and the final parameters must be bitwise identical. Under AdamW
 * and SGD with momentum, with gradient accumulation, an LR schedule and
 * clipping, under 1F1B and under a memory budget with the auto placement.
 * Then what must be refused (a save mid-accumulation, another optimizer,
 * another model shape, a damaged state file), leaving the engine as it
 * was; checkpoint folders (latest, prune) and what a killed save leaves. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pleiades.h"
#include "reference_util.h"
#include "test_util.h"

enum { B = 8, IN = 12, K = 4, STEPS = 20, HALF = 10 };

static pl_graph_t *build(int hidden, uint64_t seed) {
    pl_graph_t *g = pl_graph_new(seed);
    int64_t shape[1] = {IN};
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, shape);
    pl_tensor_t *y = pl_graph_input(g, "y", PL_DTYPE_I32, 0, NULL);
    pl_tensor_t *h = pl_relu(g, pl_linear(g, x, hidden, "fc1"));
    pl_graph_begin_block(g, "b1");
    h = pl_relu(g, pl_linear(g, h, hidden, "fc2"));
    pl_graph_begin_block(g, "b2");
    h = pl_relu(g, pl_linear(g, h, hidden, "fc3"));
    pl_graph_begin_block(g, "b3");
    CHECK_PL(pl_graph_set_loss(g, pl_cross_entropy(g, pl_linear(g, h, K, "head"), y)));
    return g;
}

static void make_batch(int64_t index, float *x, int32_t *y) {
    tu_class_batch(index, B, IN, x, y);
}

typedef struct scenario {
    const char *name;
    pl_optimizer_kind optimizer;
    int accumulate;
    pl_schedule_kind schedule;
    bool budget, schedule_lr, clip;
} scenario;

static pl_engine_t *engine(pl_runtime_t *rt, pl_graph_t *g, const scenario *s) {
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = B;
    eo.tiles = 4;
    eo.optimizer.kind = s->optimizer;
    eo.optimizer.lr = s->optimizer == PL_OPTIMIZER_SGD ? 0.05f : 3e-3f;
    eo.optimizer.momentum = s->optimizer == PL_OPTIMIZER_SGD ? 0.9f : 0.0f;
    eo.accumulate_size = s->accumulate;
    eo.schedule = s->schedule;
    eo.stages = s->schedule == PL_SCHEDULE_NONE ? 0 : 2;
    if (s->schedule_lr) {
        eo.lr_scheduler = pl_lr_scheduler_default(PL_LR_COSINE_ANNEALING_WARMUP);
        eo.lr_scheduler.total_steps = STEPS;
        eo.lr_scheduler.warmup_steps = 4;
    }
    if (s->clip) eo.max_norm = 0.5f;
    if (s->budget) {
        eo.placement.policy = pl_placement_auto();
        eo.chunk_elems = 64 * 65;
    }
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK_PTR(e, "pl_engine_new");
    return e;
}

/* Updates [from, to): each accumulates s->accumulate batches. */
static void train(pl_engine_t *e, const scenario *s, int from, int to, double *losses) {
    float x[B * IN];
    int32_t y[B];
    const void *data[2] = {x, y};
    pl_batch batch = {.size = B, .data = data};
    for (int u = from; u < to; u++) {
        double sum = 0;
        for (int a = 0; a < s->accumulate; a++) {
            make_batch((int64_t)u * s->accumulate + a, x, y);
            pl_step_result r;
            CHECK_PL(pl_engine_train_step(e, &batch, &r));
            sum += r.loss;
        }
        losses[u] = sum / s->accumulate;
    }
}

/* All parameters, concatenated (caller frees). */
static float *params_of(pl_engine_t *e, const pl_graph_t *g, size_t *n) {
    *n = (size_t)pl_graph_param_count(g);
    float *all = tu_xmalloc(*n * sizeof *all), *p = all;
    for (int i = 0; i < pl_graph_num_params(g); i++) {
        const pl_tensor_t *t = pl_graph_param(g, i);
        CHECK_PL(pl_engine_get_param(e, t, p, (size_t)pl_tensor_numel(t)));
        p += pl_tensor_numel(t);
    }
    return all;
}

static void check_resume(pl_runtime_t *rt, const scenario *s, const char *dir) {
    double straight[STEPS], resumed[STEPS];
    pl_graph_t *g = build(64, 1);
    pl_engine_t *e = engine(rt, g, s);
    train(e, s, 0, STEPS, straight);
    size_t n;
    float *want = params_of(e, g, &n);
    pl_engine_free(e);
    pl_graph_free(g);

    g = build(64, 1);
    e = engine(rt, g, s);
    train(e, s, 0, HALF, resumed);
    pl_checkpoint_values v = {0};
    CHECK_PL(pl_checkpoint_values_set(&v, "next_update", HALF));
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, s->name);
    CHECK_PL(pl_engine_save_checkpoint(e, path, &v));
    pl_engine_free(e);
    pl_graph_free(g);

    /* Another seed: every weight must come from the checkpoint. */
    g = build(64, 99);
    e = engine(rt, g, s);
    pl_checkpoint_values got = {0};
    CHECK_PL(pl_engine_load_checkpoint(e, path, &got));
    int64_t next = -1;
    CHECK_PL(pl_checkpoint_values_get(&got, "next_update", &next));
    CHECK(next == HALF, "%s: value next_update %lld, saved %d", s->name, (long long)next, HALF);
    /* The values alone, without an engine (what a tool rebuilds from). */
    pl_checkpoint_values alone;
    next = -1;
    CHECK_PL(pl_checkpoint_read_values(path, &alone));
    CHECK(alone.n == 1 && pl_checkpoint_values_get(&alone, "next_update", &next) == 0 &&
              next == HALF,
          "%s: pl_checkpoint_read_values: %d values, next_update %lld", s->name, alone.n,
          (long long)next);
    CHECK(pl_engine_steps(e) == HALF, "%s: %lld steps after loading, saved at %d", s->name,
          (long long)pl_engine_steps(e), HALF);
    train(e, s, HALF, STEPS, resumed);
    float *have = params_of(e, g, &n);
    CHECK(memcmp(straight + HALF, resumed + HALF, HALF * sizeof *straight) == 0,
          "%s: losses after resuming differ (update 20: %.9g vs %.9g)", s->name,
          resumed[STEPS - 1], straight[STEPS - 1]);
    CHECK(memcmp(want, have, n * sizeof *want) == 0, "%s: final parameters differ",
          s->name);
    CHECK(straight[STEPS - 1] < straight[0], "%s: the loss did not fall (%.4f -> %.4f)",
          s->name, straight[0], straight[STEPS - 1]);
    printf("%-22s resumed at update %d: losses and parameters bitwise identical "
           "(loss %.4f -> %.4f)\n", s->name, HALF, straight[0], straight[STEPS - 1]);
    free(want);
    free(have);
    pl_engine_free(e);
    pl_graph_free(g);
}

/* A refused load leaves every parameter as it was. */
static void expect_load_refused(pl_engine_t *e, const pl_graph_t *g, const char *path,
                                const char *what, pl_status want, const char *frag1,
                                const char *frag2) {
    size_t n;
    float *before = params_of(e, g, &n);
    int64_t steps = pl_engine_steps(e);
    tu_expect_error(__LINE__, what, pl_engine_load_checkpoint(e, path, NULL), want, frag1,
                    frag2);
    float *after = params_of(e, g, &n);
    CHECK(memcmp(before, after, n * sizeof *before) == 0 && pl_engine_steps(e) == steps,
          "%s: the engine changed", what);
    free(before);
    free(after);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f && fputs(text, f) >= 0, "writing %s", path);
    if (f) fclose(f);
}

static void check_refusals(pl_runtime_t *rt, const char *dir) {
    char path[512], file[600];
    snprintf(path, sizeof path, "%s/ref", dir);
    scenario adam = {"ref", PL_OPTIMIZER_ADAMW, 2, PL_SCHEDULE_NONE, false, false, false};
    pl_graph_t *g = build(64, 1);
    pl_engine_t *e = engine(rt, g, &adam);
    double losses[STEPS];
    train(e, &adam, 0, 2, losses);
    /* Half an accumulation: refused. */
    float x[B * IN];
    int32_t y[B];
    make_batch(0, x, y);
    const void *data[2] = {x, y};
    pl_batch batch = {.size = B, .data = data};
    pl_step_result r;
    CHECK_PL(pl_engine_train_step(e, &batch, &r));
    tu_expect_error(__LINE__, "save mid-accumulation", pl_engine_save_checkpoint(e, path, NULL),
                    PL_STATUS_INVALID_ARGUMENT, "1 of 2 accumulated", "between updates");
    CHECK_PL(pl_engine_train_step(e, &batch, &r));
    CHECK_PL(pl_engine_save_checkpoint(e, path, NULL));
    pl_engine_free(e);
    pl_graph_free(g);

    /* Another optimizer. */
    scenario sgd = {"sgd", PL_OPTIMIZER_SGD, 1, PL_SCHEDULE_NONE, false, false, false};
    g = build(64, 1);
    e = engine(rt, g, &sgd);
    expect_load_refused(e, g, path, "load into SGD", PL_STATUS_INVALID_ARGUMENT, "adamw",
                        "sgd");
    pl_engine_free(e);
    pl_graph_free(g);
    /* Another model shape. */
    g = build(32, 1);
    e = engine(rt, g, &adam);
    expect_load_refused(e, g, path, "load into a narrower model", PL_STATUS_SHAPE_MISMATCH,
                        "parameters", NULL);
    pl_engine_free(e);
    pl_graph_free(g);
    /* Damaged files. */
    g = build(64, 1);
    e = engine(rt, g, &adam);
    expect_load_refused(e, g, "/nonexistent/ckpt", "load from nowhere", PL_STATUS_IO_ERROR,
                        "/nonexistent/ckpt/state.json", NULL);
    snprintf(file, sizeof file, "%s/state.json", path);
    write_text(file, "{\"format\": \"pleiades-checkpoint\", \"version\": 1, \"step\": -3}");
    expect_load_refused(e, g, path, "a negative step", PL_STATUS_FORMAT_ERROR, "state.json",
                        "'step'");
    write_text(file, "{\"format\": ");
    expect_load_refused(e, g, path, "truncated state.json", PL_STATUS_FORMAT_ERROR,
                        "state.json", NULL);
    pl_engine_free(e);
    pl_graph_free(g);
}

static bool exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* step-<N> folders: latest, prune, and the temporary a killed save left. */
static void check_folders(pl_runtime_t *rt, const char *dir) {
    char root[512], path[700], got[700];
    snprintf(root, sizeof root, "%s/run", dir);
    CHECK(mkdir(root, 0777) == 0, "mkdir %s", root);
    tu_expect_error(__LINE__, "latest of an empty folder",
                    pl_checkpoint_latest(root, got, sizeof got), PL_STATUS_IO_ERROR,
                    "no checkpoint", NULL);
    scenario s = {"f", PL_OPTIMIZER_ADAMW, 1, PL_SCHEDULE_NONE, false, false, false};
    pl_graph_t *g = build(64, 1);
    pl_engine_t *e = engine(rt, g, &s);
    double losses[STEPS];
    int saved[] = {1, 5, 10};
    for (int i = 0, done = 0; i < 3; i++) {
        train(e, &s, done, saved[i], losses);
        done = saved[i];
        snprintf(path, sizeof path, "%s/step-%d", root, saved[i]);
        CHECK_PL(pl_engine_save_checkpoint(e, path, NULL));
    }
    /* What a save killed midway leaves: a temporary of a dead process. */
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0);
    char stale[640];
    snprintf(stale, sizeof stale, "%s/step-20.tmp.%ld", root, (long)child);
    CHECK(mkdir(stale, 0777) == 0, "mkdir %s", stale);
    snprintf(path, sizeof path, "%s/model.safetensors", stale);
    write_text(path, "half a file");
    CHECK_PL(pl_checkpoint_latest(root, got, sizeof got));
    snprintf(path, sizeof path, "%s/step-10", root);
    CHECK(!strcmp(got, path), "latest is %s, want %s", got, path);
    /* find: the root's newest, or a checkpoint itself */
    CHECK_PL(pl_checkpoint_find(root, got, sizeof got));
    CHECK(!strcmp(got, path), "find(root) is %s, want %s", got, path);
    snprintf(path, sizeof path, "%s/step-5", root);
    CHECK_PL(pl_checkpoint_find(path, got, sizeof got));
    CHECK(!strcmp(got, path), "find(step-5) is %s, want itself", got);
    tu_expect_error(__LINE__, "values of a folder that is no checkpoint",
                    pl_checkpoint_read_values(root, &(pl_checkpoint_values){0}),
                    PL_STATUS_IO_ERROR, "state.json", NULL);
    snprintf(path, sizeof path, "%s/step-10", root);
    CHECK_PL(pl_engine_load_checkpoint(e, got, NULL)); /* the previous one loads */
    CHECK_PL(pl_checkpoint_prune(root, 2));
    snprintf(path, sizeof path, "%s/step-1", root);
    CHECK(!exists(path), "prune kept %s", path);
    snprintf(path, sizeof path, "%s/step-5", root);
    CHECK(exists(path), "prune removed %s", path);
    /* The next save sweeps the dead temporary. */
    snprintf(path, sizeof path, "%s/step-11", root);
    CHECK_PL(pl_engine_save_checkpoint(e, path, NULL));
    CHECK(!exists(stale), "the killed save's temporary %s is still there", stale);
    printf("folders: latest, prune and a killed save's leftovers as expected\n");
    pl_engine_free(e);
    pl_graph_free(g);
}

int main(void) {
    CHECK(tu_scratch_create("pleiades_resume"), "cannot create a scratch directory");
    const char *dir = tu_scratch_dir();
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 2;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    CHECK_PTR(rt, "pl_runtime_new");
    static const scenario plain[] = {
        {"adamw", PL_OPTIMIZER_ADAMW, 1, PL_SCHEDULE_NONE, false, false, false},
        {"adamw+accum+cosine+clip", PL_OPTIMIZER_ADAMW, 2, PL_SCHEDULE_NONE, false, true, true},
        {"sgd-momentum+1f1b", PL_OPTIMIZER_SGD, 1, PL_SCHEDULE_1F1B, false, false, false},
    };
    for (size_t i = 0; i < sizeof plain / sizeof *plain; i++)
        if (plain[i].schedule == PL_SCHEDULE_NONE || !tu_pipeline_skipped(rt, 2, plain[i].name))
            check_resume(rt, &plain[i], dir);
    check_refusals(rt, dir);
    check_folders(rt, dir);
    pl_runtime_free(rt);

    /* Under a 1 MB budget (the optimizer states live partly on disk). */
    char swap[600];
    snprintf(swap, sizeof swap, "%s/swap", dir);
    CHECK(mkdir(swap, 0777) == 0, "mkdir %s", swap);
    ro.compute_budget_mb = 1;
    ro.offload_dir = swap;
    rt = pl_runtime_new(&ro);
    CHECK_PTR(rt, "pl_runtime_new (budget)");
    scenario budget = {"adamw+budget", PL_OPTIMIZER_ADAMW, 1, PL_SCHEDULE_NONE, true, false,
                       false};
    check_resume(rt, &budget, dir);
    pl_runtime_free(rt);
    tu_remove_tree(dir);
    return tu_failures ? 1 : 0;
}
