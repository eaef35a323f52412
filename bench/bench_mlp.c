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
#define _POSIX_C_SOURCE 200809L /* clock_gettime, popen, setenv */

#include <cblas.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <starpu.h>

#include <pleiades.h>

#ifndef PL_SOURCE_DIR
#define PL_SOURCE_DIR "" /* then the script is looked up next to the binary */
#endif

#define TORCH_PYTHON "/usr/bin/python3"
#define TORCH_SCRIPT "bench/mlp_torch.py"

enum {
    BATCH = 256,
    N_IN = 784,
    N_HIDDEN = 1024,
    N_CLASSES = 10,
    GEMM_N = 2048,
    GEMM_TRIES = 3,
    MAX_REPS = 1000,
};

typedef struct bench_options {
    int workers;
    int tiles;
    int steps;
    int warmup;
    int reps;
    bool torch;
    int torch_threads; /* 0 = workers */
} bench_options;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* xorshift64*: fixed, reproducible inputs without touching rand(). */
static uint64_t rng_next(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

static float rng_uniform(uint64_t *s) { /* [0, 1) */
    return (float)(rng_next(s) >> 40) * (1.0f / 16777216.0f);
}

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

static bool parse_int(const char *opt, const char *text, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi) {
        fprintf(stderr, "bench_mlp: %s: '%s' is not an integer in [%d, %d]\n", opt,
                text, lo, hi);
        return false;
    }
    *out = (int)v;
    return true;
}

/* 0 on success, 1 on a bad option, -1 after --help. */
static int parse_options(int argc, char **argv, bench_options *o) {
    enum { OPT_WORKERS = 256, OPT_TILES, OPT_STEPS, OPT_WARMUP, OPT_REPS,
           OPT_NO_TORCH, OPT_TORCH_THREADS };
    static const struct option longopts[] = {
        {"workers", required_argument, NULL, OPT_WORKERS},
        {"tiles", required_argument, NULL, OPT_TILES},
        {"steps", required_argument, NULL, OPT_STEPS},
        {"warmup", required_argument, NULL, OPT_WARMUP},
        {"reps", required_argument, NULL, OPT_REPS},
        {"no-torch", no_argument, NULL, OPT_NO_TORCH},
        {"torch-threads", required_argument, NULL, OPT_TORCH_THREADS},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (bench_options){.workers = 2, .tiles = 0, .steps = 30, .warmup = 5,
                         .reps = 5, .torch = true, .torch_threads = 0};
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        bool ok = true;
        switch (c) {
        case OPT_WORKERS: ok = parse_int("--workers", optarg, 1, 256, &o->workers); break;
        case OPT_TILES: ok = parse_int("--tiles", optarg, 0, 64, &o->tiles); break;
        case OPT_STEPS: ok = parse_int("--steps", optarg, 1, 1000000, &o->steps); break;
        case OPT_WARMUP: ok = parse_int("--warmup", optarg, 0, 1000000, &o->warmup); break;
        case OPT_REPS: ok = parse_int("--reps", optarg, 1, MAX_REPS, &o->reps); break;
        case OPT_NO_TORCH: o->torch = false; break;
        case OPT_TORCH_THREADS:
            ok = parse_int("--torch-threads", optarg, 1, 256, &o->torch_threads);
            break;
        case 'h': usage(stdout); return -1;
        default: usage(stderr); return 1;
        }
        if (!ok) return 1;
    }
    if (optind < argc) {
        fprintf(stderr, "bench_mlp: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 1;
    }
    if (o->torch_threads == 0) o->torch_threads = o->workers;
    return 0;
}

/* ------------------------------------------------------- sgemm ceiling */

/* Best of GEMM_TRIES of C = A B with n = GEMM_N on `threads` OpenBLAS
 * threads, in GFLOP/s; 0 if the matrices cannot be allocated. Leaves
 * OpenBLAS on one thread, as the runtime expects. */
static double sgemm_ceiling(int threads) {
    const size_t n = GEMM_N, nn = n * n;
    float *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b),
          *c = malloc(nn * sizeof *c);
    double best = 0.0;
    if (a && b && c) {
        uint64_t s = 0x5eed;
        for (size_t i = 0; i < nn; i++) {
            a[i] = rng_uniform(&s) - 0.5f;
            b[i] = rng_uniform(&s) - 0.5f;
            c[i] = 0.0f;
        }
        openblas_set_num_threads(threads);
        for (int t = 0; t < GEMM_TRIES; t++) {
            double t0 = now_s();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n,
                        (int)n, 1.0f, a, (int)n, b, (int)n, 0.0f, c, (int)n);
            double dt = now_s() - t0;
            double gflops = 2.0 * (double)n * (double)n * (double)n / dt * 1e-9;
            if (gflops > best) best = gflops;
        }
        openblas_set_num_threads(1);
    }
    free(a);
    free(b);
    free(c);
    return best;
}

/* ----------------------------------------------------------- Pleiades */

typedef struct pleiades_result {
    double ms_per_step;
    double first_loss, last_loss;
    int64_t n_params;     /* N */
    int64_t n_fc1_weight; /* numel of the first layer's weight */
    int workers, tiles;
} pleiades_result;

static bool fail(const char *what) {
    fprintf(stderr, "bench_mlp: %s failed: %s (%s)\n", what, pl_last_error(),
                    pl_status_string(pl_last_status()));
    return false;
}

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
        images[i] = 2.0f * rng_uniform(&s) - 1.0f;
    for (int i = 0; i < BATCH; i++) labels[i] = (int32_t)(rng_next(&s) % N_CLASSES);

    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = o->workers;
    if (!(rt = pl_runtime_new(&ro))) {
        fail("pl_runtime_new");
        goto out;
    }
    if (!(g = pl_graph_new(42)) || !build_mlp(g)) {
        fail("building the MLP graph");
        goto out;
    }
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = BATCH;
    eo.tiles = o->tiles;
    eo.optimizer.kind = PL_OPTIMIZER_ADAMW;
    eo.optimizer.lr = 1e-3f;
    eo.optimizer.weight_decay = 0.01f;
    eo.optimizer.beta1 = 0.9f;
    eo.optimizer.beta2 = 0.999f;
    eo.optimizer.eps = 1e-8f;
    if (!(e = pl_engine_new(rt, g, &eo))) {
        fail("pl_engine_new");
        goto out;
    }
    res->workers = pl_runtime_cpu_workers(rt);
    res->tiles = o->tiles ? o->tiles : res->workers;
    res->n_params = pl_graph_param_count(g);
    const pl_tensor_t *w1 = pl_graph_find(g, "fc1.weight");
    res->n_fc1_weight = w1 ? pl_tensor_numel(w1) : 0;

    const void *data[2] = {images, labels};
    pl_batch b = {.size = BATCH, .data = data};
    pl_step_result r;
    double t0 = 0.0;
    for (int i = 0; i < o->warmup + o->reps * o->steps; i++) {
        bool timed = i >= o->warmup;
        int k = timed ? (i - o->warmup) % o->steps : -1;
        if (k == 0) {
            starpu_task_wait_for_all(); /* start each repetition idle */
            t0 = now_s();
        }
        if (pl_engine_train_step(e, &b, &r) != PL_STATUS_OK) {
            fail("pl_engine_train_step");
            goto out;
        }
        if (!isfinite(r.loss)) {
            fprintf(stderr, "bench_mlp: step %d: loss is %g\n", i, r.loss);
            goto out;
        }
        if (i == 0) res->first_loss = r.loss;
        res->last_loss = r.loss;
        if (k == o->steps - 1) {
            starpu_task_wait_for_all(); /* the step's backward and update */
            rep_ms[(i - o->warmup) / o->steps] = (now_s() - t0) * 1e3 / o->steps;
        }
    }
    res->ms_per_step = median(rep_ms, o->reps);
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

/* The peer script: the source tree's bench/ (compiled in), else
 * ../../bench/ relative to this executable (build/bench/bench_mlp). */
static bool find_torch_script(char *path, size_t size) {
    if (PL_SOURCE_DIR[0]) {
        snprintf(path, size, "%s/%s", PL_SOURCE_DIR, TORCH_SCRIPT);
        if (access(path, R_OK) == 0) return true;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        snprintf(path, size, "%s/../../%s", exe, TORCH_SCRIPT);
        if (access(path, R_OK) == 0) return true;
    }
    return false;
}

typedef enum { TORCH_OK, TORCH_SKIPPED, TORCH_FAILED } torch_status;

static torch_status run_torch(const bench_options *o, double *ms_per_step,
                              double *samples_per_s) {
    char script[PATH_MAX + 64];
    if (access(TORCH_PYTHON, X_OK) != 0) {
        printf("pytorch : skipped (%s not found)\n", TORCH_PYTHON);
        return TORCH_SKIPPED;
    }
    if (!find_torch_script(script, sizeof script)) {
        printf("pytorch : skipped (%s not found under %s or next to the binary)\n",
               TORCH_SCRIPT, PL_SOURCE_DIR[0] ? PL_SOURCE_DIR : "(unknown source dir)");
        return TORCH_SKIPPED;
    }
    if (strchr(script, '\'')) {
        printf("pytorch : skipped (a quote in the script path %s)\n", script);
        return TORCH_SKIPPED;
    }
    char cmd[2 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "%s '%s' %d %d %d %d 2>&1", TORCH_PYTHON, script,
             o->torch_threads, o->steps, o->warmup, o->reps);
    fflush(stdout);
    FILE *p = popen(cmd, "r");
    if (!p) {
        printf("pytorch : failed to start %s (%s)\n", cmd, strerror(errno));
        return TORCH_FAILED;
    }
    char line[1024], tail[4096] = "";
    bool found = false, no_torch = false;
    while (fgets(line, sizeof line, p)) {
        if (sscanf(line, "torch ms_per_step=%lf samples_per_s=%lf", ms_per_step,
                   samples_per_s) == 2)
            found = true;
        if (strstr(line, "No module named 'torch'")) no_torch = true;
        if (strlen(tail) + strlen(line) >= sizeof tail) tail[0] = '\0';
        strcat(tail, line); /* the last lines, to show if it failed */
    }
    int st = pclose(p);
    bool exited_ok = st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (found && exited_ok) return TORCH_OK;
    if (no_torch) {
        printf("pytorch : skipped (PyTorch is not installed for %s)\n", TORCH_PYTHON);
        return TORCH_SKIPPED;
    }
    printf("pytorch : failed (%s, status %d); its output:\n%s", cmd, st, tail);
    return TORCH_FAILED;
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
    double ceiling = sgemm_ceiling(o.workers);
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
    torch_status ts = TORCH_SKIPPED;

    printf("\n");
    printf("sgemm ceiling (%d thread%s, %d^3): %.1f GFLOP/s (best of %d)\n",
           o.workers, o.workers == 1 ? "" : "s", GEMM_N, ceiling, GEMM_TRIES);
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
    if (ts == TORCH_OK) {
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
    if (ts == TORCH_OK)
        printf(" torch_ms_per_step=%.3f torch_samples_per_s=%.1f ratio=%.3f", t_ms, t_sps,
               pl_sps / t_sps);
    printf("\n");
    return ts == TORCH_FAILED ? 1 : 0;
}
