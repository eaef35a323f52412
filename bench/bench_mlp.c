/* bench_mlp: the MLP training step of Pleiades against this machine's
 * fp32 GEMM ceiling and against PyTorch, in one run.
 *
 *   1. sgemm ceiling: the better of cblas_sgemm 2048x2048x2048 on
 *      `workers` OpenBLAS threads and `workers` single-threaded pl_sgemm
 *      products of that size at once (the library the ops' kernels use:
 *      oneDNN on AVX512 CPUs), best of 3, in GFLOP/s (measured before
 *      StarPU starts, so nothing else competes for the cores).
 *   2. Pleiades: MLP 784-1024-1024-10 (Linear, ReLU, Linear, ReLU, Linear),
 *      cross-entropy, AdamW(lr 1e-3, weight decay 0.01), batch 256, fp32,
 *      pl_engine_train_step on one fixed random batch, each repetition of
 *      `steps` steps started idle and ended with a wait for all tasks
 *      (a step returns once its loss is known while the rest of backward
 *      and the optimizer update still run).
 *   3. PyTorch: bench/mlp_torch.py served by /usr/bin/python3, the same
 *      step. Its thread configurations (torch threads x OPENBLAS_NUM_THREADS
 *      x OMP_WAIT_POLICY) are calibrated first, then repetitions of
 *      Pleiades and of the fastest configuration alternate (A B A B ...),
 *      StarPU's workers paused while the peer runs; both sides report min,
 *      median and max, and the ratios best vs best (the headline) and
 *      median vs median (bench_compare in bench/common).
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
            "  --reps N           interleaved repetitions per side (default 12)\n"
            "  --no-torch         skip the PyTorch peer\n"
            "  --torch-threads N  the peer's thread counts tried: 1..N (default = workers)\n"
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
                         .reps = 12, .torch = true, .torch_threads = 0};
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
    bench_comparison cmp;
    bench_torch_status torch;
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

/* Pleiades and, interleaved with it, the PyTorch peer. */
static bool run_both(const bench_options *o, pleiades_result *res) {
    bool ok = false;
    float *images = malloc((size_t)BATCH * N_IN * sizeof *images);
    int32_t *labels = malloc((size_t)BATCH * sizeof *labels);
    pl_runtime_t *rt = NULL;
    pl_graph_t *g = NULL;
    pl_engine_t *e = NULL;
    if (!images || !labels) {
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
    double warm_ms;
    if (!bench_timed_steps("bench_mlp", e, &b, 0, o->warmup > 0 ? o->warmup : 1, 1,
                           &warm_ms, &res->first_loss, &res->last_loss))
        goto out;
    /* Debian's torch runs OpenBLAS threads beside its OpenMP ones: the
     * comparison tries each combination and keeps the fastest. */
    bench_engine_rep m = {"bench_mlp", e, &b, &res->last_loss};
    char args[64];
    snprintf(args, sizeof args, "%d %d %d", o->steps, o->warmup, 1);
    bench_compare_options co = {
        .source_dir = PL_SOURCE_DIR, .script = o->torch ? TORCH_SCRIPT : NULL,
        .args = args, .cores = o->torch_threads, .steps = o->steps,
        .warmup = o->warmup, .reps = o->reps, .calibration_reps = 3};
    res->torch = bench_compare("bench_mlp", &co, bench_engine_rep_run, &m, &res->cmp);
    ok = res->torch != BENCH_TORCH_FAILED || res->cmp.pleiades.median > 0;
out:
    pl_engine_free(e);
    pl_graph_free(g);
    pl_runtime_free(rt);
    free(images);
    free(labels);
    return ok;
}

/* --------------------------------------------------------------- main */

int main(int argc, char **argv) {
    bench_options o;
    int pr = parse_options(argc, argv, &o);
    if (pr) return pr < 0 ? 0 : 2;
    setenv("STARPU_SILENT", "1", 0); /* keep one set by the user */

    printf("bench_mlp: MLP %d-%d-%d-%d, batch %d, fp32, AdamW; %d worker%s "
           "(one per core: StarPU's workers are Pleiades' only threads), tiles %s; "
           "%d interleaved repetitions of %d steps per side\n",
           N_IN, N_HIDDEN, N_HIDDEN, N_CLASSES, BATCH, o.workers,
           o.workers == 1 ? "" : "s", o.tiles ? "set" : "= workers (one tile each)",
           o.reps, o.steps);
    fflush(stdout);

    /* 1. Before pl_runtime_new, which sets OpenBLAS back to 1 thread. */
    double ceiling = bench_sgemm_ceiling(o.workers);
    if (ceiling <= 0.0) {
        fprintf(stderr, "bench_mlp: cannot allocate the sgemm matrices\n");
        return 1;
    }

    /* 2 and 3, interleaved. */
    pleiades_result pl = {0};
    if (!run_both(&o, &pl)) return 1;
    bool peer = pl.torch == BENCH_TORCH_OK;
    double flop_step = 6.0 * (double)pl.n_params * BATCH;
    double useful_step = flop_step - 2.0 * (double)pl.n_fc1_weight * BATCH;
    double best_gflops = flop_step / (pl.cmp.pleiades.min * 1e-3) * 1e-9;
    double median_gflops = flop_step / (pl.cmp.pleiades.median * 1e-3) * 1e-9;

    printf("\n");
    bench_print_ceiling(o.workers, ceiling);
    printf("flops/step (6*N*B: fwd 2NB + bwd 4NB, N=%lld params, B=%d): "
           "%.3f GFLOP (%.3f without fc1's unneeded input gradient)\n",
           (long long)pl.n_params, BATCH, flop_step * 1e-9, useful_step * 1e-9);
    bench_print_comparison(&pl.cmp, peer, BATCH, "samples");
    printf("pleiades: best %.1f GFLOP/s (%.0f%% of ceiling), median %.1f GFLOP/s "
           "(%.0f%%)  [%d worker%s, %d tile%s, loss %.4f -> %.4f]\n",
           best_gflops, 100.0 * best_gflops / ceiling, median_gflops,
           100.0 * median_gflops / ceiling, pl.workers, pl.workers == 1 ? "" : "s",
           pl.tiles, pl.tiles == 1 ? "" : "s", pl.first_loss, pl.last_loss);
    if (peer)
        printf("targets : 2x pytorch best vs best: %s (%.2fx); 50%% of ceiling: %s\n",
               pl.cmp.peer.min / pl.cmp.pleiades.min >= 2.0 ? "met" : "missed",
               pl.cmp.peer.min / pl.cmp.pleiades.min,
               best_gflops / ceiling >= 0.5 ? "met" : "missed");
    printf("result pleiades_ms_min=%.3f pleiades_ms_median=%.3f pleiades_ms_max=%.3f "
           "sgemm_gflops=%.2f ceiling_fraction=%.3f",
           pl.cmp.pleiades.min, pl.cmp.pleiades.median, pl.cmp.pleiades.max, ceiling,
           best_gflops / ceiling);
    if (peer)
        printf(" torch_ms_min=%.3f torch_ms_median=%.3f torch_ms_max=%.3f "
               "ratio_best=%.3f ratio_median=%.3f",
               pl.cmp.peer.min, pl.cmp.peer.median, pl.cmp.peer.max,
               pl.cmp.peer.min / pl.cmp.pleiades.min,
               pl.cmp.peer.median / pl.cmp.pleiades.median);
    printf("\n");
    return pl.torch == BENCH_TORCH_FAILED ? 1 : 0;
}
