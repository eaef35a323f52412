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

/* Overwrites n bytes at `from_end` bytes before the end of file `path`
 * with `byte` (a flipped bit or a zeroed block: still a well-formed
 * file, whose values are merely other floats); returns the old bytes. */
static void damage(const char *path, long from_end, int n, int byte, unsigned char *old) {
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL, "opening %s", path);
    if (!f) return;
    fseek(f, -from_end, SEEK_END);
    CHECK(fread(old, 1, (size_t)n, f) == (size_t)n, "reading %s", path);
    fseek(f, -from_end, SEEK_END);
    for (int i = 0; i < n; i++) fputc(byte < 0 ? old[i] ^ 0x01 : byte, f);
    fclose(f);
}

static void restore(const char *path, long from_end, int n, const unsigned char *old) {
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL, "opening %s", path);
    if (!f) return;
    fseek(f, -from_end, SEEK_END);
    CHECK(fwrite(old, 1, (size_t)n, f) == (size_t)n, "restoring %s", path);
    fclose(f);
}

/* Checksums: a flipped bit in the weights, a zeroed block in the
 * optimizer states, a truncated file are refused naming the file; values
 * that disagree with the fields they restate are refused naming both;
 * resuming from a root skips a damaged newest checkpoint for the newest
 * valid one. */
static void check_integrity(pl_runtime_t *rt, const char *dir) {
    scenario adam = {"integrity", PL_OPTIMIZER_ADAMW, 1, PL_SCHEDULE_NONE, false, false, false};
    pl_graph_t *g = build(64, 1);
    pl_engine_t *e = engine(rt, g, &adam);
    double losses[STEPS];
    char root[512], one[600], two[600], file[700], loaded[700];
    snprintf(root, sizeof root, "%s/integrity", dir);
    CHECK(mkdir(root, 0777) == 0, "mkdir %s", root);
    snprintf(one, sizeof one, "%s/step-1", root);
    snprintf(two, sizeof two, "%s/step-2", root);
    train(e, &adam, 0, 1, losses);
    CHECK_PL(pl_engine_save_checkpoint(e, one, NULL));
    train(e, &adam, 1, 2, losses);
    pl_checkpoint_values v = {0};
    CHECK_PL(pl_checkpoint_values_set(&v, "step", 2));
    CHECK_PL(pl_engine_save_checkpoint(e, two, &v));
    unsigned char old[64];
    snprintf(file, sizeof file, "%s/model.safetensors", two);
    damage(file, 5, 1, -1, old);
    expect_load_refused(e, g, two, "a flipped bit in the weights", PL_STATUS_FORMAT_ERROR,
                        "model.safetensors", "checksum mismatch");
    restore(file, 5, 1, old);
    CHECK_PL(pl_engine_load_checkpoint(e, two, NULL)); /* restored: loads again */
    snprintf(file, sizeof file, "%s/optimizer.safetensors", two);
    damage(file, 64, 64, 0, old);
    expect_load_refused(e, g, two, "a zeroed block in the optimizer states",
                        PL_STATUS_FORMAT_ERROR, "optimizer.safetensors", "checksum mismatch");
    /* The root resumes from the newest valid one and says which. */
    pl_engine_t *fresh = engine(rt, g, &adam);
    CHECK_PL(pl_engine_resume_checkpoint(fresh, root, NULL, loaded, sizeof loaded));
    CHECK(!strcmp(loaded, one) && pl_engine_steps(fresh) == 1,
          "resume from %s loaded %s at step %lld, want %s at step 1", root, loaded,
          (long long)pl_engine_steps(fresh), one);
    /* One checkpoint named: refused, not replaced by another. */
    tu_expect_error(__LINE__, "resume from one damaged checkpoint",
                    pl_engine_resume_checkpoint(fresh, two, NULL, loaded, sizeof loaded),
                    PL_STATUS_FORMAT_ERROR, "optimizer.safetensors", "checksum mismatch");
    pl_engine_free(fresh);
    restore(file, 64, 64, old);
    CHECK(truncate(file, 100) == 0, "truncating %s", file);
    expect_load_refused(e, g, two, "a truncated file", PL_STATUS_FORMAT_ERROR,
                        "optimizer.safetensors", "truncated");
    /* values.step restates the step (no loss scaler: no skipped update). */
    CHECK_PL(pl_checkpoint_values_set(&v, "step", 5));
    CHECK_PL(pl_engine_save_checkpoint(e, two, &v));
    expect_load_refused(e, g, two, "values.step disagreeing with step", PL_STATUS_FORMAT_ERROR,
                        "'step' is 2", "'values.step' is 5");
    CHECK_PL(pl_checkpoint_values_set(&v, "step", 2));
    CHECK_PL(pl_checkpoint_values_set(&v, "accumulate", 3));
    CHECK_PL(pl_engine_save_checkpoint(e, two, &v));
    expect_load_refused(e, g, two, "values.accumulate disagreeing", PL_STATUS_FORMAT_ERROR,
                        "'accumulate_size' is 1", "'values.accumulate' is 3");
    pl_engine_free(e);
    pl_graph_free(g);
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
    snprintf(path, sizeof path, "%s/.pleiades-checkpoint", stale); /* a save's first file */
    write_text(path, "pleiades-checkpoint\n");
    snprintf(path, sizeof path, "%s/model.safetensors", stale);
    write_text(path, "half a file");
    /* What is not ours under the same names: a link to a user's folder
     * (as a killed save's temporary, and as a checkpoint), a user's own
     * folder called step-<N>. None may be deleted, nor count for
     * --keep-last, nor be followed. */
    char precious[640], keep[700], link_tmp[640], link_step[640], theirs[640];
    snprintf(precious, sizeof precious, "%s/precious", tu_scratch_dir());
    CHECK(mkdir(precious, 0777) == 0, "mkdir %s", precious);
    snprintf(keep, sizeof keep, "%s/important.txt", precious);
    write_text(keep, "keep");
    snprintf(link_tmp, sizeof link_tmp, "%s/step-9.tmp.%ld", root, (long)child);
    snprintf(link_step, sizeof link_step, "%s/step-0", root);
    CHECK(symlink(precious, link_tmp) == 0 && symlink(precious, link_step) == 0,
          "symlink to %s", precious);
    snprintf(theirs, sizeof theirs, "%s/step-3", root);
    CHECK(mkdir(theirs, 0777) == 0, "mkdir %s", theirs);
    snprintf(path, sizeof path, "%s/notes.txt", theirs);
    write_text(path, "mine");
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
    CHECK_PL(pl_checkpoint_prune(root, 1)); /* step-5 goes; the user's step-3, step-0 stay */
    CHECK(!exists(path), "prune kept %s", path);
    snprintf(path, sizeof path, "%s/step-10", root);
    CHECK(exists(path), "prune removed %s, the newest of ours", path);
    /* The next save sweeps the dead temporary. */
    snprintf(path, sizeof path, "%s/step-11", root);
    CHECK_PL(pl_engine_save_checkpoint(e, path, NULL));
    CHECK(!exists(stale), "the killed save's temporary %s is still there", stale);
    struct stat sb;
    CHECK(exists(keep), "pruning or the sweep deleted %s through a link", keep);
    CHECK(lstat(link_tmp, &sb) == 0 && lstat(link_step, &sb) == 0,
          "a link of the user's in the checkpoint folder was removed");
    snprintf(path, sizeof path, "%s/notes.txt", theirs);
    CHECK(exists(path), "a folder of the user's named step-3 lost %s", path);
    /* A save never replaces what is not a checkpoint of ours. */
    tu_expect_error(__LINE__, "a save over a link", pl_engine_save_checkpoint(e, link_step, NULL),
                    PL_STATUS_IO_ERROR, "refusing to replace it", "symbolic link");
    tu_expect_error(__LINE__, "a save over a user's folder",
                    pl_engine_save_checkpoint(e, theirs, NULL), PL_STATUS_IO_ERROR,
                    "refusing to replace it", "marker file .pleiades-checkpoint");
    CHECK(exists(keep) && exists(path), "a refused save deleted something");
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
    check_integrity(rt, dir);
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
