/* bench_mlp: the MLP training step of Pleiades against this machine's
 * OpenBLAS sgemm ceiling and against PyTorch, in one run.
 *
 *   1. sgemm ceiling: cblas_sgemm 2048x2048x2048 with `workers` OpenBLAS
 *      threads, best of 3, in GFLOP/s (measured before StarPU starts, so
 *      nothing else competes for the cores).
 *   2. Pleiades: MLP 784-1024-1024-10 (Linear, ReLU, Linear, ReLU, Linear),
 *      cross-entropy, AdamW(lr 1e-3, weight decay 0.01), batch 256, fp32,
 *      pl_engine_train_step on one fixed random batch: warm-up steps, then
 *      `reps` repetitions of `steps` timed steps (each repetition ends with
 *      a wait for all tasks, since a step returns once its loss is known
 *      while the rest of backward and the optimizer update still run); the
 *      figure is the median of the repetitions' mean ms/step.
 *   3. PyTorch: bench/mlp_torch.py, the same step timed the same way, run
 *      with /usr/bin/python3 after the StarPU runtime is shut down (its
 *      workers would otherwise compete for the cores).
 *
 * Achieved GFLOP/s uses the usual 6*N*B convention for one training step of
 * a dense model with N parameters and batch B: forward 2*N*B, backward
 * 4*N*B (input gradient plus weight gradient). The first layer's input
 * gradient is never needed, so the work actually required is a little less;
 * that count is printed too but the percentages use 6*N*B.
 *
 * Usage: bench_mlp [--workers N] [--tiles N] [--steps N] [--warmup N]
 *                  [--reps N] [--no-torch] [--torch-threads N]
 */
#define _POSIX_C_SOURCE 200809L /* setenv */

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <pleiades.h>

#include "bench_util.h"

#ifndef PL_SOURCE_DIR
#define PL_SOURCE_DIR "" /* then the script is looked up next to the binary */
#endif

#define TORCH_SCRIPT "bench/mlp_torch.py"

enum {
    BATCH = 256,
    N_IN = 784,
    N_HIDDEN = 1024,
    N_CLASSES = 10,
};

typedef bench_common_options bench_options; /* bench_mlp has no others */

/* ------------------------------------------------------------ options */

static void usage(FILE *f) {
    fprintf(f,
            "usage: bench_mlp [options]\n"
            "  --workers N        StarPU CPU workers and sgemm threads (default 2)\n"
            "  --tiles N          batch tiles per step, 0 = one per worker (default 0)\n"
            "  --steps N          timed steps per repetition (default 30)\n"
            "  --warmup N         untimed warm-up steps (default 5)\n"
            "  --reps N           timed repetitions, the median is reported (default 5)\n"
            "  --no-torch         skip the PyTorch peer\n"
            "  --torch-threads N  torch.set_num_threads (default = workers)\n"
            "  -h, --help         this help\n");
}

/* 0 on success, 1 on a bad option, -1 after --help. */
static int parse_options(int argc, char **argv, bench_options *o) {
    static const struct option longopts[] = {
        BENCH_COMMON_LONGOPTS,
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (bench_options){.workers = 2, .tiles = 0, .steps = 30, .warmup = 5,
                         .reps = 5, .torch = true, .torch_threads = 0};
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        int common = bench_common_option("bench_mlp", c, optarg, o);
        if (common == 0) return 1;
        if (common > 0) continue;
        if (c == 'h') {
            usage(stdout);
            return -1;
        }
        usage(stderr);
        return 1;
    }
    if (optind < argc) {
        fprintf(stderr, "bench_mlp: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 1;
    }
    if (o->torch_threads == 0) o->torch_threads = o->workers;
    return 0;
}

/* ----------------------------------------------------------- Pleiades */

typedef struct pleiades_result {
    double ms_per_step;
    double first_loss, last_loss;
    int64_t n_params;     /* N */
    int64_t n_fc1_weight; /* numel of the first layer's weight */
    int workers, tiles;
} pleiades_result;

static bool build_mlp(pl_graph_t *g) {
    int64_t in_shape[1] = {N_IN};
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, in_shape);
    pl_tensor_t *y = pl_graph_input(g, "y", PL_DTYPE_I32, 0, NULL);
    pl_tensor_t *h = x && y ? pl_relu(g, pl_linear(g, x, N_HIDDEN, "fc1")) : NULL;
    h = h ? pl_relu(g, pl_linear(g, h, N_HIDDEN, "fc2")) : NULL;
    pl_tensor_t *logits = h ? pl_linear(g, h, N_CLASSES, "head") : NULL;
    pl_tensor_t *loss = logits ? pl_cross_entropy(g, logits, y) : NULL;
    return loss && pl_graph_set_loss(g, loss) == PL_STATUS_OK;
}

static bool run_pleiades(const bench_options *o, pleiades_result *res) {
    bool ok = false;
    float *images = malloc((size_t)BATCH * N_IN * sizeof *images);
    int32_t *labels = malloc((size_t)BATCH * sizeof *labels);
    double *rep_ms = malloc((size_t)o->reps * sizeof *rep_ms);
    pl_runtime_t *rt = NULL;
    pl_graph_t *g = NULL;
    pl_engine_t *e = NULL;
    if (!images || !labels || !rep_ms) {
        fprintf(stderr, "bench_mlp: out of memory\n");
        goto out;
    }
    uint64_t s = 42;
    for (size_t i = 0; i < (size_t)BATCH * N_IN; i++)
        images[i] = 2.0f * bench_rng_uniform(&s) - 1.0f;
    for (int i = 0; i < BATCH; i++)
        labels[i] = (int32_t)(bench_rng_next(&s) % N_CLASSES);

    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = o->workers;
    if (!(rt = pl_runtime_new(&ro))) {
        bench_fail("bench_mlp", "pl_runtime_new");
        goto out;
    }
    if (!(g = pl_graph_new(42)) || !build_mlp(g)) {
        bench_fail("bench_mlp", "building the MLP graph");
        goto out;
    }
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = BATCH;
    eo.tiles = o->tiles;
    bench_set_adamw(&eo);
    if (!(e = pl_engine_new(rt, g, &eo))) {
        bench_fail("bench_mlp", "pl_engine_new");
        goto out;
    }
    res->workers = pl_runtime_cpu_workers(rt);
    res->tiles = o->tiles ? o->tiles : res->workers;
    res->n_params = pl_graph_param_count(g);
    const pl_tensor_t *w1 = pl_graph_find(g, "fc1.weight");
    res->n_fc1_weight = w1 ? pl_tensor_numel(w1) : 0;

    const void *data[2] = {images, labels};
    pl_batch b = {.size = BATCH, .data = data};
    if (!bench_timed_steps("bench_mlp", e, &b, o->warmup, o->steps, o->reps, rep_ms,
                           &res->first_loss, &res->last_loss))
        goto out;
    res->ms_per_step = bench_median(rep_ms, o->reps);
    ok = true;
out:
    pl_engine_free(e);
    pl_graph_free(g);
    pl_runtime_free(rt); /* before PyTorch runs: idle workers still poll */
    free(images);
    free(labels);
    free(rep_ms);
    return ok;
}

/* ------------------------------------------------------------ PyTorch */

static bench_torch_status run_torch(const bench_options *o, double *ms_per_step,
                                    double *samples_per_s) {
    char args[128];
    snprintf(args, sizeof args, "%d %d %d %d", o->torch_threads, o->steps, o->warmup,
             o->reps);
    return bench_run_torch(PL_SOURCE_DIR, TORCH_SCRIPT, args, "samples_per_s", ms_per_step,
                           samples_per_s);
}

/* --------------------------------------------------------------- main */

int main(int argc, char **argv) {
    bench_options o;
    int pr = parse_options(argc, argv, &o);
    if (pr) return pr < 0 ? 0 : 2;
    setenv("STARPU_SILENT", "1", 0); /* keep one set by the user */

    printf("bench_mlp: MLP %d-%d-%d-%d, batch %d, fp32, AdamW; %d worker%s, "
           "tiles %s, %d warm-up + %d x %d timed steps (median of %d)\n",
           N_IN, N_HIDDEN, N_HIDDEN, N_CLASSES, BATCH, o.workers,
           o.workers == 1 ? "" : "s", o.tiles ? "set" : "auto", o.warmup, o.reps,
           o.steps, o.reps);
    fflush(stdout);

    /* 1. Before pl_runtime_new, which sets OpenBLAS back to 1 thread. */
    double ceiling = bench_sgemm_ceiling(o.workers);
    if (ceiling <= 0.0) {
        fprintf(stderr, "bench_mlp: cannot allocate the sgemm matrices\n");
        return 1;
    }

    /* 2. */
    pleiades_result pl = {0};
    if (!run_pleiades(&o, &pl)) return 1;
    double pl_sps = BATCH * 1e3 / pl.ms_per_step;
    double flop_step = 6.0 * (double)pl.n_params * BATCH;
    double useful_step = flop_step - 2.0 * (double)pl.n_fc1_weight * BATCH;
    double pl_gflops = flop_step / (pl.ms_per_step * 1e-3) * 1e-9;
    double frac = pl_gflops / ceiling;

    /* 3. Sequentially, with the StarPU runtime already shut down. */
    double t_ms = 0.0, t_sps = 0.0;
    bench_torch_status ts = BENCH_TORCH_SKIPPED;

    printf("\n");
    bench_print_ceiling(o.workers, ceiling);
    printf("flops/step (6*N*B: fwd 2NB + bwd 4NB, N=%lld params, B=%d): "
           "%.3f GFLOP (%.3f without fc1's unneeded input gradient)\n",
           (long long)pl.n_params, BATCH, flop_step * 1e-9, useful_step * 1e-9);
    printf("pleiades: %.2f ms/step, %.0f samples/s, %.1f GFLOP/s (%.0f%% of ceiling)"
           "  [%d worker%s, %d tile%s, loss %.4f -> %.4f]\n",
           pl.ms_per_step, pl_sps, pl_gflops, 100.0 * frac, pl.workers,
           pl.workers == 1 ? "" : "s", pl.tiles, pl.tiles == 1 ? "" : "s", pl.first_loss, pl.last_loss);
    fflush(stdout);
    /* Debian's torch runs OpenBLAS threads beside its OpenMP ones; idle
     * OpenMP threads that spin steal the cores, so the peer is measured
     * with passive waiting: PyTorch at its best (as in bench_gpt). */
    if (o.torch) {
        setenv("OMP_WAIT_POLICY", "PASSIVE", 0); /* keep one set by the user */
        ts = run_torch(&o, &t_ms, &t_sps);
    } else {
        printf("pytorch : skipped (--no-torch)\n");
    }
    if (ts == BENCH_TORCH_OK) {
        printf("pytorch : %.2f ms/step, %.0f samples/s, %.1f GFLOP/s  [%d thread%s, "
               "OMP_WAIT_POLICY=%s]\n",
               t_ms, t_sps, flop_step / (t_ms * 1e-3) * 1e-9, o.torch_threads,
               o.torch_threads == 1 ? "" : "s", getenv("OMP_WAIT_POLICY"));
        printf("ratio   : %.2fx pytorch (target 2x), %.0f%% of ceiling (target 50%%)\n",
               pl_sps / t_sps, 100.0 * frac);
    } else {
        printf("ratio   : n/a vs pytorch, %.0f%% of ceiling (target 50%%)\n", 100.0 * frac);
    }
    printf("result pleiades_ms_per_step=%.3f pleiades_samples_per_s=%.1f "
           "pleiades_gflops=%.2f sgemm_gflops=%.2f ceiling_fraction=%.3f",
           pl.ms_per_step, pl_sps, pl_gflops, ceiling, frac);
    if (ts == BENCH_TORCH_OK)
        printf(" torch_ms_per_step=%.3f torch_samples_per_s=%.1f ratio=%.3f", t_ms, t_sps,
               pl_sps / t_sps);
    printf("\n");
    return ts == BENCH_TORCH_FAILED ? 1 : 0;
}
