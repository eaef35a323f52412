/* bench_training: what the training features cost, measured side by side
 * in one run on the GPT of bench_gpt (smaller by default so that it runs
 * in about a minute on two cores):
 *
 *   baseline   one pl_engine_train_step of B sequences per update
 *   clip       the same with gradient clipping (max_norm 1, the 2-norm):
 *              a partial-norm task per chunk, a combining task, the scale
 *              inside the optimizer tasks
 *   accum      accumulate_size 4: four steps of B/4 sequences per update
 *              (the same samples per update as baseline)
 *   clip+scal  clipping and the dynamic loss scaler (its overflow check
 *              tasks and the host's wait for their verdict)
 *   checkpoint pl_engine_save_checkpoint of the baseline engine (weights,
 *              AdamW states, state.json), synced to disk
 *
 * Repetitions of the training variants alternate (baseline, clip,
 * accum, baseline, ...), each timing `steps` updates from idle to the end
 * of the last update's tasks; the table shows min / median / max ms per
 * update and, from the medians, clipping's overhead and accumulation's
 * throughput relative to baseline (issue targets: <= 3 % and >= 90 %).
 *
 * Usage: bench_training [--workers N] [--steps N] [--warmup N] [--reps N]
 *                       [--batch N] [--layers N] [--channels N] [--context N]
 */
#define _POSIX_C_SOURCE 200809L

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <starpu.h>

#include <pleiades.h>

#include "bench_util.h"

static const char *PROG = "bench_training";

enum { V = 256, MAX_REPS = 100 };

typedef struct variant {
    const char *name;
    pl_graph_t *g;
    pl_engine_t *e;
    int micro;  /* train_step calls per update */
    int batch;  /* sequences per call */
    double ms[MAX_REPS];
} variant;

static int32_t *tokens, *targets;

static bool make(variant *v, pl_runtime_t *rt, const pl_gpt_config *cfg, int batch,
                 int micro, float max_norm, bool scaler) {
    v->g = pl_graph_new(1);
    pl_gpt_model m;
    if (pl_gpt_build(v->g, cfg, &m) != PL_STATUS_OK) return bench_fail(PROG, "pl_gpt_build");
    pl_engine_options eo = pl_engine_options_default();
    bench_set_adamw(&eo);
    eo.batch_size = batch / micro;
    eo.accumulate_size = micro;
    eo.max_norm = max_norm;
    eo.loss_scaler.enabled = scaler;
    v->e = pl_engine_new(rt, v->g, &eo);
    v->micro = micro;
    v->batch = batch / micro;
    return v->e ? true : bench_fail(PROG, "pl_engine_new");
}

/* `steps` updates from idle to the end of their tasks, in ms per update. */
static bool run(variant *v, int steps, double *ms) {
    starpu_task_wait_for_all();
    double t0 = bench_now_s();
    /* Every call feeds the first v->batch sequences: the values do not
     * change the work. */
    const void *d[2] = {tokens, targets};
    pl_batch b = {.size = v->batch, .data = d};
    for (int s = 0; s < steps; s++)
        for (int k = 0; k < v->micro; k++) {
            pl_step_result r;
            if (pl_engine_train_step(v->e, &b, &r) != PL_STATUS_OK)
                return bench_fail(PROG, v->name);
        }
    starpu_task_wait_for_all();
    *ms = (bench_now_s() - t0) * 1e3 / steps;
    return true;
}

int main(int argc, char **argv) {
    bench_common_options co = {.workers = 2, .steps = 5, .warmup = 3, .reps = 9};
    int batch = 16;
    pl_gpt_config cfg = {.vocab = V, .context = 128, .channels = 128, .layers = 2,
                         .heads = 4};
    enum { OPT_BATCH = BENCH_OPT_NEXT, OPT_LAYERS, OPT_CHANNELS, OPT_CONTEXT };
    static const struct option longopts[] = {
        BENCH_COMMON_LONGOPTS,
        {"batch", required_argument, NULL, OPT_BATCH},
        {"layers", required_argument, NULL, OPT_LAYERS},
        {"channels", required_argument, NULL, OPT_CHANNELS},
        {"context", required_argument, NULL, OPT_CONTEXT},
        {NULL, 0, NULL, 0},
    };
    int c, v;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        int r = bench_common_option(PROG, c, optarg, &co);
        if (r == 1) continue;
        if (r == 0) return 2;
        bool ok = true;
        switch (c) {
        case OPT_BATCH: ok = bench_parse_int_opt(PROG, "--batch", optarg, 4, 4096, &batch); break;
        case OPT_LAYERS:
            ok = bench_parse_int_opt(PROG, "--layers", optarg, 1, 64, &v), cfg.layers = v;
            break;
        case OPT_CHANNELS:
            ok = bench_parse_int_opt(PROG, "--channels", optarg, 4, 4096, &v), cfg.channels = v;
            break;
        case OPT_CONTEXT:
            ok = bench_parse_int_opt(PROG, "--context", optarg, 2, 2048, &v), cfg.context = v;
            break;
        default: ok = false;
        }
        if (!ok) {
            fprintf(stderr, "usage: %s [--workers N] [--steps N] [--warmup N] [--reps N] "
                    "[--batch N] [--layers N] [--channels N] [--context N]\n", PROG);
            return 2;
        }
    }
    if (batch % 4 || co.reps > MAX_REPS || cfg.channels % cfg.heads) {
        fprintf(stderr, "%s: --batch must be a multiple of 4, --reps at most %d, "
                "--channels a multiple of %lld\n", PROG, MAX_REPS, (long long)cfg.heads);
        return 2;
    }
    size_t n = (size_t)batch * cfg.context;
    tokens = malloc(n * sizeof *tokens);
    targets = malloc(n * sizeof *targets);
    uint64_t seed = 42;
    for (size_t i = 0; tokens && targets && i < n; i++) {
        tokens[i] = (int32_t)(bench_rng_next(&seed) % V);
        targets[i] = (int32_t)(bench_rng_next(&seed) % V);
    }
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = co.workers;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) return bench_fail(PROG, "pl_runtime_new"), 1;
    enum { N_VARIANTS = 4 };
    variant vs[N_VARIANTS] = {{.name = "baseline"}, {.name = "clip"}, {.name = "accum"},
                              {.name = "clip+scal"}};
    if (!make(&vs[0], rt, &cfg, batch, 1, 0.0f, false) ||
        !make(&vs[1], rt, &cfg, batch, 1, 1.0f, false) ||
        !make(&vs[2], rt, &cfg, batch, 4, 0.0f, false) ||
        !make(&vs[3], rt, &cfg, batch, 1, 1.0f, true))
        return 1;
    printf("GPT %lld layers, %lld channels, context %lld: %lld parameters; batch %d "
           "(accum: 4 x %d); %d workers; %d reps of %d updates\n",
           (long long)cfg.layers, (long long)cfg.channels, (long long)cfg.context,
           (long long)pl_graph_param_count(vs[0].g), batch, batch / 4, co.workers, co.reps,
           co.steps);
    double ms;
    for (int i = 0; i < N_VARIANTS; i++)
        if (!run(&vs[i], co.warmup, &ms)) return 1;
    for (int r = 0; r < co.reps; r++)
        for (int i = 0; i < N_VARIANTS; i++)
            if (!run(&vs[i], co.steps, &vs[i].ms[r])) return 1;
    bench_stats st[N_VARIANTS];
    printf("%-9s %10s %10s %10s   ms per update\n", "variant", "min", "median", "max");
    for (int i = 0; i < N_VARIANTS; i++) {
        st[i] = bench_stats_of(vs[i].ms, co.reps);
        printf("%-9s %10.2f %10.2f %10.2f\n", vs[i].name, st[i].min, st[i].median,
               st[i].max);
    }
    printf("clipping overhead: %+.1f %% of the step (median vs median; target <= 3 %%)\n",
           100.0 * (st[1].median / st[0].median - 1.0));
    printf("accumulation 4 x B/4: %.1f %% of baseline throughput (target >= 90 %%)\n",
           100.0 * st[0].median / st[2].median);
    printf("clipping + dynamic loss scaler: %+.1f %% of the step (target <= 3 %%)\n",
           100.0 * (st[3].median / st[0].median - 1.0));

    /* Checkpoint saves of the baseline engine into a scratch directory. */
    char dir[] = "/tmp/bench_training_XXXXXX", path[64];
    if (mkdtemp(dir)) {
        snprintf(path, sizeof path, "%s/ckpt", dir);
        double best = 1e30;
        for (int i = 0; i < 3; i++) {
            double t0 = bench_now_s();
            if (pl_engine_save_checkpoint(vs[0].e, path, NULL) != PL_STATUS_OK)
                return bench_fail(PROG, "pl_engine_save_checkpoint"), 1;
            double t = bench_now_s() - t0;
            if (t < best) best = t;
        }
        double mb = (double)pl_graph_param_count(vs[0].g) * 3 * sizeof(float) / 1048576.0;
        printf("checkpoint save: %.1f ms for %.1f MiB (weights + AdamW states), %.0f MiB/s "
               "(best of 3, synced)\n", best * 1e3, mb, mb / best);
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "%s: could not remove %s\n", PROG, dir);
    }
    for (int i = 0; i < N_VARIANTS; i++) {
        pl_engine_free(vs[i].e);
        pl_graph_free(vs[i].g);
    }
    pl_runtime_free(rt);
    free(tokens);
    free(targets);
    return 0;
}
