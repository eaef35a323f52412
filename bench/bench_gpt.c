/* bench_gpt: the GPT-2 training step of Pleiades against this machine's
 * OpenBLAS sgemm ceiling and against PyTorch, in one run, plus a per-op
 * breakdown of one profiled step.
 *
 *   1. sgemm ceiling: cblas_sgemm 2048x2048x2048 with `workers` OpenBLAS
 *      threads, best of 3, in GFLOP/s (measured before StarPU starts, so
 *      nothing else competes for the cores).
 *   2. Pleiades: pl_gpt_build with V=256, T=128, C=256, L=4, NH=4 (sizes
 *      but V can be changed), batch 16 sequences, fp32, AdamW(lr 1e-3,
 *      weight decay 0.01), pl_engine_train_step on one fixed batch of random
 *      tokens and targets: warm-up steps, then `reps` repetitions of `steps`
 *      timed steps (each repetition starts idle and ends with a wait for all
 *      tasks, since a step returns once its loss is known while the rest of
 *      backward and the optimizer update still run); the figure is the
 *      median of the repetitions' mean ms/step.
 *   3. One profiled step, separate from the timed ones (recording adds a
 *      callback per task): a fresh engine with record_tasks, a few warm-up
 *      steps, then the task records of one step (the fastest of three, the
 *      one least disturbed by other load) grouped by op kind and phase
 *      (layer prefixes stripped: "h3.attn.qkv" -> "attn.qkv"; F forward,
 *      L loss, B input gradient, W weight gradient, O optimizer), sorted by
 *      total task time, with worker utilisation = busy / (span x workers).
 *   4. PyTorch: bench/gpt_torch.py, the same step timed the same way, run
 *      with /usr/bin/python3 after the StarPU runtime is shut down (its
 *      workers would otherwise compete for the cores), with
 *      OMP_WAIT_POLICY=PASSIVE in its environment unless already set:
 *      Debian's torch runs OpenBLAS threads beside its OpenMP threads, and
 *      actively spinning OpenMP threads steal their cores.
 *
 * FLOPs per step: 6*N*tokens + attention, tokens = B*T.
 *   N: the parameters that take part in matmuls or per-element work: all of
 *      them except wpe (a lookup, as nanoGPT's estimate_mfu leaves it out);
 *      wte counts once, as the tied LM head's matmul (its lookup is free).
 *   attention: per layer, forward 2*2*B*T^2*C (q k^T and att v, FULL T^2:
 *      the kernels compute the whole score matrix and ignore the upper
 *      triangle, so this counts what they do, not the causal half), times 3
 *      for forward + backward: 12*L*B*T^2*C (= nanoGPT's 12*L*H*Q*T per
 *      token).
 *
 * Usage: bench_gpt [--workers N] [--tiles N] [--steps N] [--warmup N]
 *                  [--reps N] [--no-torch] [--torch-threads N] [--batch N]
 *                  [--layers N] [--channels N] [--context N] [--heads N]
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, popen, setenv */

#include <cblas.h>
#include <ctype.h>
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
#define TORCH_SCRIPT "bench/gpt_torch.py"

enum {
    VOCAB = 256,
    GEMM_N = 2048,
    GEMM_TRIES = 3,
    MAX_REPS = 1000,
    PROFILE_WARMUP = 2, /* steps of the profiling engine before the recorded ones */
    PROFILE_STEPS = 3,  /* recorded steps; the fastest one is shown */
    MAX_GROUPS = 128,
};

#define TARGET_TORCH_RATIO 2.0
#define TARGET_CEILING 0.45

typedef struct bench_options {
    int workers;
    int tiles;
    int steps;
    int warmup;
    int reps;
    bool torch;
    int torch_threads; /* 0 = workers */
    int batch;
    pl_gpt_config cfg;
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
            "usage: bench_gpt [options]\n"
            "  --workers N        StarPU CPU workers and sgemm threads (default 2)\n"
            "  --tiles N          batch tiles per step, 0 = one per worker (default 0)\n"
            "  --steps N          timed steps per repetition (default 10)\n"
            "  --warmup N         untimed warm-up steps (default 3)\n"
            "  --reps N           timed repetitions, the median is reported (default 5)\n"
            "  --no-torch         skip the PyTorch peer\n"
            "  --torch-threads N  torch.set_num_threads (default = workers)\n"
            "  --batch N          sequences per step B (default 16)\n"
            "  --layers N         transformer blocks L (default 4)\n"
            "  --channels N       channels C (default 256)\n"
            "  --context N        sequence length T (default 128)\n"
            "  --heads N          attention heads NH, C %% NH == 0 (default 4)\n"
            "  -h, --help         this help\n"
            "The vocabulary is fixed at %d (bytes).\n",
            VOCAB);
}

static bool parse_int(const char *opt, const char *text, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi) {
        fprintf(stderr, "bench_gpt: %s: '%s' is not an integer in [%d, %d]\n", opt,
                text, lo, hi);
        return false;
    }
    *out = (int)v;
    return true;
}

/* 0 on success, 1 on a bad option, -1 after --help. */
static int parse_options(int argc, char **argv, bench_options *o) {
    enum { OPT_WORKERS = 256, OPT_TILES, OPT_STEPS, OPT_WARMUP, OPT_REPS,
           OPT_NO_TORCH, OPT_TORCH_THREADS, OPT_BATCH, OPT_LAYERS, OPT_CHANNELS,
           OPT_CONTEXT, OPT_HEADS };
    static const struct option longopts[] = {
        {"workers", required_argument, NULL, OPT_WORKERS},
        {"tiles", required_argument, NULL, OPT_TILES},
        {"steps", required_argument, NULL, OPT_STEPS},
        {"warmup", required_argument, NULL, OPT_WARMUP},
        {"reps", required_argument, NULL, OPT_REPS},
        {"no-torch", no_argument, NULL, OPT_NO_TORCH},
        {"torch-threads", required_argument, NULL, OPT_TORCH_THREADS},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"layers", required_argument, NULL, OPT_LAYERS},
        {"channels", required_argument, NULL, OPT_CHANNELS},
        {"context", required_argument, NULL, OPT_CONTEXT},
        {"heads", required_argument, NULL, OPT_HEADS},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (bench_options){.workers = 2, .tiles = 0, .steps = 10, .warmup = 3,
                         .reps = 5, .torch = true, .torch_threads = 0, .batch = 16};
    int layers = 4, channels = 256, context = 128, heads = 4;
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
        case OPT_BATCH: ok = parse_int("--batch", optarg, 1, 4096, &o->batch); break;
        case OPT_LAYERS: ok = parse_int("--layers", optarg, 1, 256, &layers); break;
        case OPT_CHANNELS: ok = parse_int("--channels", optarg, 1, 16384, &channels); break;
        case OPT_CONTEXT: ok = parse_int("--context", optarg, 1, 16384, &context); break;
        case OPT_HEADS: ok = parse_int("--heads", optarg, 1, 1024, &heads); break;
        case 'h': usage(stdout); return -1;
        default: usage(stderr); return 1;
        }
        if (!ok) return 1;
    }
    if (optind < argc) {
        fprintf(stderr, "bench_gpt: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 1;
    }
    if (channels % heads) {
        fprintf(stderr, "bench_gpt: --channels %d is not divisible by --heads %d\n",
                channels, heads);
        return 1;
    }
    if (o->torch_threads == 0) o->torch_threads = o->workers;
    o->cfg = (pl_gpt_config){.vocab = VOCAB, .context = context, .channels = channels,
                             .layers = layers, .heads = heads};
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

/* ------------------------------------------------------ the per-op table */

/* One row of the breakdown: an op kind (layer prefix stripped) and phase. */
typedef struct op_group {
    char op[48];
    char phase;
    int tasks;
    double busy_us;
    double flops; /* matmul/attention FLOPs of the group, 0 if elementwise */
} op_group;

typedef struct profile {
    op_group groups[MAX_GROUPS];
    int n_groups;
    int n_tasks;
    double busy_us;           /* total task time, all workers */
    double span_us;           /* first task start to last task end */
    double wall_us;           /* train_step call to the end of its last task */
    double phase_us[6];       /* F L B W O, other */
    double worker_busy_us[64];
    int workers;
} profile;

static const char PHASES[] = "FLBWO";

/* "h3.attn.qkv" -> "attn.qkv"; unnamed ops "gelu17" / "cross_entropy53" ->
 * "gelu" / "cross_entropy". */
static void op_kind(const char *name, char *out, size_t size) {
    const char *p = name;
    if (p[0] == 'h' && isdigit((unsigned char)p[1])) {
        const char *q = p + 1;
        while (isdigit((unsigned char)*q)) q++;
        if (*q == '.') p = q + 1;
    }
    snprintf(out, size, "%s", p);
    if (!strchr(out, '.')) {
        size_t n = strlen(out);
        while (n > 0 && isdigit((unsigned char)out[n - 1])) n--;
        if (n > 0 && n < strlen(out)) out[n] = '\0';
    }
}

/* Matmul FLOPs of one op in one phase over the whole batch (all tiles):
 * linear and the tied LM head 2*rows*C*OC per phase F/B/W (their weight
 * gives C and OC); attention F 4*B*T^2*C, B 8*B*T^2*C (full T^2, four
 * sgemms); 0 for the rest (memory-bound). */
static double op_phase_flops(const pl_graph_t *g, const bench_options *o,
                             const char *op, char phase) {
    double B = o->batch, T = (double)o->cfg.context, C = (double)o->cfg.channels;
    const char *kind = strrchr(op, '.') ? strrchr(op, '.') + 1 : op;
    if (strcmp(kind, "attn") == 0) {
        if (phase == 'F') return 4.0 * B * T * T * C;
        if (phase == 'B') return 8.0 * B * T * T * C;
        return 0.0;
    }
    if (phase != 'F' && phase != 'B' && phase != 'W') return 0.0;
    char wname[80];
    if (strcmp(op, "lm_head") == 0) snprintf(wname, sizeof wname, "embedding.wte");
    else snprintf(wname, sizeof wname, "%s.weight", op);
    const pl_tensor_t *w = pl_graph_find(g, wname);
    int64_t shape[PL_MAX_DIMS];
    if (!w || pl_tensor_shape(w, shape) != 2) return 0.0;
    if (strcmp(op, "embedding") == 0) return 0.0;
    return 2.0 * B * T * (double)shape[0] * (double)shape[1];
}

static int cmp_group(const void *pa, const void *pb) {
    const op_group *a = pa, *b = pb;
    return (a->busy_us < b->busy_us) - (a->busy_us > b->busy_us);
}

static void build_profile(const pl_graph_t *g, const bench_options *o,
                          const pl_task_record *rec, int n, int workers,
                          profile *p) {
    memset(p, 0, sizeof *p);
    p->workers = workers;
    double t0 = INFINITY, t1 = -INFINITY;
    /* FLOPs per (full op name, phase) are counted once per group member op,
     * not once per tile: remember which were seen. */
    char (*seen)[52] = calloc((size_t)n, sizeof *seen);
    int n_seen = 0;
    for (int i = 0; i < n; i++) {
        const pl_task_record *r = &rec[i];
        double d = r->end_us - r->start_us;
        if (d < 0) d = 0;
        t0 = fmin(t0, r->start_us);
        t1 = fmax(t1, r->end_us);
        p->busy_us += d;
        p->n_tasks++;
        const char *ph = strchr(PHASES, r->phase);
        p->phase_us[ph && r->phase ? ph - PHASES : 5] += d;
        if (r->worker >= 0 && r->worker < 64) p->worker_busy_us[r->worker] += d;
        char kind[48];
        op_kind(r->phase == 'O' ? "optimizer" : r->op, kind, sizeof kind);
        int k;
        for (k = 0; k < p->n_groups; k++)
            if (p->groups[k].phase == r->phase && strcmp(p->groups[k].op, kind) == 0)
                break;
        if (k == p->n_groups) {
            if (p->n_groups == MAX_GROUPS) continue;
            op_group *ng = &p->groups[p->n_groups++];
            snprintf(ng->op, sizeof ng->op, "%s", kind);
            ng->phase = r->phase;
        }
        op_group *gr = &p->groups[k];
        gr->tasks++;
        gr->busy_us += d;
        if (seen) {
            char key[52];
            snprintf(key, sizeof key, "%c %.48s", r->phase, r->op);
            int s;
            for (s = 0; s < n_seen && strcmp(seen[s], key) != 0; s++) {}
            if (s == n_seen) {
                memcpy(seen[n_seen++], key, sizeof key);
                gr->flops += op_phase_flops(g, o, r->op, r->phase);
            }
        }
    }
    free(seen);
    p->span_us = n ? t1 - t0 : 0.0;
    qsort(p->groups, (size_t)p->n_groups, sizeof *p->groups, cmp_group);
}

static void print_profile(const profile *p) {
    printf("\nper-op breakdown of one profiled step (record_tasks; the fastest of %d, "
           "separate from the timed steps; %d tasks; op kinds with layer prefixes "
           "stripped; F forward, L loss, B input grad, W weight grad, O optimizer; "
           "GFLOP/s per worker for the sgemm-bound groups, attention with full "
           "T^2):\n", PROFILE_STEPS, p->n_tasks);
    printf("  %-18s %5s %6s %10s %7s %9s %9s\n", "op", "phase", "tasks", "total ms",
           "%busy", "us/task", "GFLOP/s");
    double cum = 0.0;
    for (int k = 0; k < p->n_groups; k++) {
        const op_group *gr = &p->groups[k];
        cum += gr->busy_us;
        char gf[16] = "-";
        if (gr->flops > 0 && gr->busy_us > 0)
            snprintf(gf, sizeof gf, "%.1f", gr->flops / (gr->busy_us * 1e-6) * 1e-9);
        printf("  %-18s %5c %6d %10.2f %6.1f%% %9.0f %9s\n", gr->op, gr->phase,
               gr->tasks, gr->busy_us * 1e-3, 100.0 * gr->busy_us / p->busy_us,
               gr->busy_us / gr->tasks, gf);
    }
    printf("  by phase:");
    const char *names[6] = {"F", "L", "B", "W", "O", "?"};
    for (int i = 0; i < 6; i++)
        if (p->phase_us[i] > 0)
            printf(" %s %.1f ms (%.0f%%)", names[i], p->phase_us[i] * 1e-3,
                   100.0 * p->phase_us[i] / p->busy_us);
    printf("\n");
    double matmul_us = 0.0, matmul_flops = 0.0;
    for (int k = 0; k < p->n_groups; k++)
        if (p->groups[k].flops > 0) {
            matmul_us += p->groups[k].busy_us;
            matmul_flops += p->groups[k].flops;
        }
    if (matmul_us > 0)
        printf("  sgemm-bound groups (linear, lm_head, attention): %.1f ms = %.0f%% of "
               "busy time at %.1f GFLOP/s per worker; the rest %.1f ms = %.0f%%\n",
               matmul_us * 1e-3, 100.0 * matmul_us / p->busy_us,
               matmul_flops / (matmul_us * 1e-6) * 1e-9, (p->busy_us - matmul_us) * 1e-3,
               100.0 * (p->busy_us - matmul_us) / p->busy_us);
    printf("  workers: busy %.1f ms of span %.1f ms x %d worker%s = %.0f%% utilisation"
           " (per worker:", p->busy_us * 1e-3, p->span_us * 1e-3, p->workers,
           p->workers == 1 ? "" : "s",
           100.0 * p->busy_us / (p->span_us * (p->workers > 0 ? p->workers : 1)));
    for (int w = 0; w < p->workers && w < 64; w++)
        printf(" %.0f%%", 100.0 * p->worker_busy_us[w] / p->span_us);
    printf(")\n  profiled step wall time %.1f ms (train_step call to its last task's "
           "end; the span is %.0f%% of it)\n",
           p->wall_us * 1e-3, 100.0 * p->span_us / p->wall_us);
}

/* ----------------------------------------------------------- Pleiades */

typedef struct pleiades_result {
    double ms_per_step;
    double first_loss, last_loss;
    int64_t n_params; /* all parameters */
    int64_t n_wpe;    /* numel of embedding.wpe */
    int workers, tiles;
    bool have_profile;
    profile prof;
} pleiades_result;

static bool fail(const char *what) {
    fprintf(stderr, "bench_gpt: %s failed: %s (%s)\n", what, pl_last_error(),
                    pl_status_string(pl_last_status()));
    return false;
}

static pl_engine_t *new_engine(pl_runtime_t *rt, pl_graph_t *g, const bench_options *o,
                               bool record) {
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = o->batch;
    eo.tiles = o->tiles;
    eo.optimizer.kind = PL_OPTIMIZER_ADAMW;
    eo.optimizer.lr = 1e-3f;
    eo.optimizer.weight_decay = 0.01f;
    eo.optimizer.beta1 = 0.9f;
    eo.optimizer.beta2 = 0.999f;
    eo.optimizer.eps = 1e-8f;
    eo.record_tasks = record;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    if (!e) fail(record ? "pl_engine_new (profiling)" : "pl_engine_new");
    return e;
}

static pl_graph_t *new_gpt(const bench_options *o) {
    pl_graph_t *g = pl_graph_new(42);
    pl_gpt_model m;
    if (!g || pl_gpt_build(g, &o->cfg, &m) != PL_STATUS_OK) {
        fail("building the GPT graph");
        pl_graph_free(g);
        return NULL;
    }
    return g;
}

/* The profiled step: a fresh engine with record_tasks (profiling stays on
 * afterwards, so this runs after the timed steps), a few warm-up steps, then
 * PROFILE_STEPS recorded steps, each started idle; the breakdown is that of
 * the fastest (the one least disturbed by anything else on the machine). */
static bool profile_step(pl_runtime_t *rt, const bench_options *o, pl_batch *b,
                         pleiades_result *res) {
    bool ok = false;
    pl_graph_t *g = new_gpt(o);
    pl_engine_t *e = g ? new_engine(rt, g, o, true) : NULL;
    profile *p = malloc(sizeof *p);
    pl_step_result r;
    if (!e || !p) goto out;
    for (int i = 0; i < PROFILE_WARMUP; i++)
        if (pl_engine_train_step(e, b, &r) != PL_STATUS_OK) {
            fail("pl_engine_train_step (profiling)");
            goto out;
        }
    for (int i = 0; i < PROFILE_STEPS; i++) {
        starpu_task_wait_for_all();
        double t0 = now_s();
        if (pl_engine_train_step(e, b, &r) != PL_STATUS_OK) {
            fail("pl_engine_train_step (profiling)");
            goto out;
        }
        starpu_task_wait_for_all();
        double t1 = now_s();
        const pl_task_record *rec;
        int n = pl_engine_task_records(e, &rec);
        if (n <= 0) {
            fprintf(stderr, "bench_gpt: the profiled step recorded no tasks\n");
            goto out;
        }
        build_profile(g, o, rec, n, res->workers, p);
        p->wall_us = (t1 - t0) * 1e6;
        if (!res->have_profile || p->wall_us < res->prof.wall_us) {
            res->prof = *p;
            res->have_profile = true;
        }
    }
    ok = true;
out:
    free(p);
    pl_engine_free(e);
    pl_graph_free(g);
    return ok;
}

static bool run_pleiades(const bench_options *o, pleiades_result *res) {
    bool ok = false;
    const int64_t T = o->cfg.context;
    size_t n_tok = (size_t)o->batch * (size_t)T;
    int32_t *tokens = malloc(n_tok * sizeof *tokens);
    int32_t *targets = malloc(n_tok * sizeof *targets);
    double *rep_ms = malloc((size_t)o->reps * sizeof *rep_ms);
    pl_runtime_t *rt = NULL;
    pl_graph_t *g = NULL;
    pl_engine_t *e = NULL;
    if (!tokens || !targets || !rep_ms) {
        fprintf(stderr, "bench_gpt: out of memory\n");
        goto out;
    }
    uint64_t s = 42;
    for (size_t i = 0; i < n_tok; i++) {
        tokens[i] = (int32_t)(rng_next(&s) % VOCAB);
        targets[i] = (int32_t)(rng_next(&s) % VOCAB);
    }

    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = o->workers;
    if (!(rt = pl_runtime_new(&ro))) {
        fail("pl_runtime_new");
        goto out;
    }
    if (!(g = new_gpt(o)) || !(e = new_engine(rt, g, o, false))) goto out;
    res->workers = pl_runtime_cpu_workers(rt);
    res->tiles = o->tiles ? o->tiles : res->workers;
    if (res->tiles > o->batch) res->tiles = o->batch;
    res->n_params = pl_graph_param_count(g);
    const pl_tensor_t *wpe = pl_graph_find(g, "embedding.wpe");
    res->n_wpe = wpe ? pl_tensor_numel(wpe) : 0;

    const void *data[2] = {tokens, targets};
    pl_batch b = {.size = o->batch, .data = data};
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
            fprintf(stderr, "bench_gpt: step %d: loss is %g\n", i, r.loss);
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
    starpu_task_wait_for_all();
    pl_engine_free(e);
    e = NULL;
    pl_graph_free(g);
    g = NULL;
    /* A failed profile is reported but does not void the timed figures. */
    if (!profile_step(rt, o, &b, res))
        fprintf(stderr, "bench_gpt: no per-op breakdown\n");
    ok = true;
out:
    pl_engine_free(e);
    pl_graph_free(g);
    pl_runtime_free(rt); /* before PyTorch runs: idle workers still poll */
    free(tokens);
    free(targets);
    free(rep_ms);
    return ok;
}

/* ------------------------------------------------------------ PyTorch */

/* The peer script: the source tree's bench/ (compiled in), else
 * ../../bench/ relative to this executable (build/bench/bench_gpt). */
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
                              double *tokens_per_s) {
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
    snprintf(cmd, sizeof cmd, "%s '%s' %d %d %d %d %d %lld %lld %lld %lld 2>&1",
             TORCH_PYTHON, script, o->torch_threads, o->steps, o->warmup, o->reps,
             o->batch, (long long)o->cfg.layers, (long long)o->cfg.channels,
             (long long)o->cfg.context, (long long)o->cfg.heads);
    fflush(stdout);
    FILE *p = popen(cmd, "r");
    if (!p) {
        printf("pytorch : failed to start %s (%s)\n", cmd, strerror(errno));
        return TORCH_FAILED;
    }
    char line[1024], tail[4096] = "";
    bool found = false, no_torch = false;
    while (fgets(line, sizeof line, p)) {
        if (sscanf(line, "torch ms_per_step=%lf tokens_per_s=%lf", ms_per_step,
                   tokens_per_s) == 2)
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
    const pl_gpt_config *c = &o.cfg;
    const double B = o.batch, T = (double)c->context, C = (double)c->channels,
                 L = (double)c->layers;
    const double tokens = B * T;

    printf("bench_gpt: GPT V=%lld T=%lld C=%lld L=%lld NH=%lld, batch %d (%.0f tokens), "
           "fp32, AdamW; %d worker%s, tiles %s, %d warm-up + %d x %d timed steps "
           "(median of %d)\n",
           (long long)c->vocab, (long long)c->context, (long long)c->channels,
           (long long)c->layers, (long long)c->heads, o.batch, tokens, o.workers,
           o.workers == 1 ? "" : "s", o.tiles ? "set" : "auto", o.warmup, o.reps,
           o.steps, o.reps);
    fflush(stdout);

    /* 1. Before pl_runtime_new, which sets OpenBLAS back to 1 thread. */
    double ceiling = sgemm_ceiling(o.workers);
    if (ceiling <= 0.0) {
        fprintf(stderr, "bench_gpt: cannot allocate the sgemm matrices\n");
        return 1;
    }

    /* 2. and 3. */
    pleiades_result pl = {0};
    if (!run_pleiades(&o, &pl)) return 1;
    double pl_tps = tokens * 1e3 / pl.ms_per_step;
    double n_flop_params = (double)(pl.n_params - pl.n_wpe);
    double dense_step = 6.0 * n_flop_params * tokens;
    double attn_step = 12.0 * L * B * T * T * C;
    double flop_step = dense_step + attn_step;
    double pl_gflops = flop_step / (pl.ms_per_step * 1e-3) * 1e-9;
    double frac = pl_gflops / ceiling;

    /* 4. Sequentially, with the StarPU runtime already shut down. */
    double t_ms = 0.0, t_tps = 0.0;
    torch_status ts = TORCH_SKIPPED;

    printf("\n");
    printf("sgemm ceiling (%d thread%s, %d^3): %.1f GFLOP/s (best of %d)\n",
           o.workers, o.workers == 1 ? "" : "s", GEMM_N, ceiling, GEMM_TRIES);
    printf("flops/step: %.3f GFLOP = 6*N*tokens %.3f (N=%lld params without wpe's "
           "%lld, wte once as the tied head) + attention 12*L*B*T^2*C %.3f (fwd "
           "2*2*B*T^2*C per layer for q.k^T and att.v over the FULL T^2 the kernels "
           "compute, x3 for fwd+bwd)\n",
           flop_step * 1e-9, dense_step * 1e-9, (long long)(pl.n_params - pl.n_wpe),
           (long long)pl.n_wpe, attn_step * 1e-9);
    printf("pleiades: %.2f ms/step, %.0f tokens/s, %.1f GFLOP/s (%.0f%% of ceiling)"
           "  [%d worker%s, %d tile%s, loss %.4f -> %.4f]\n",
           pl.ms_per_step, pl_tps, pl_gflops, 100.0 * frac, pl.workers,
           pl.workers == 1 ? "" : "s", pl.tiles, pl.tiles == 1 ? "" : "s",
           pl.first_loss, pl.last_loss);
    if (pl.have_profile) print_profile(&pl.prof);
    printf("\n");
    fflush(stdout);
    if (o.torch) {
        setenv("OMP_WAIT_POLICY", "PASSIVE", 0); /* keep one set by the user */
        ts = run_torch(&o, &t_ms, &t_tps);
    } else {
        printf("pytorch : skipped (--no-torch)\n");
    }
    if (ts == TORCH_OK) {
        printf("pytorch : %.2f ms/step, %.0f tokens/s, %.1f GFLOP/s  [%d thread%s, "
               "OMP_WAIT_POLICY=%s]\n",
               t_ms, t_tps, flop_step / (t_ms * 1e-3) * 1e-9, o.torch_threads,
               o.torch_threads == 1 ? "" : "s", getenv("OMP_WAIT_POLICY"));
        double ratio = pl_tps / t_tps;
        printf("ratio   : %.2fx pytorch tokens/s (target >= %.0fx: %s), %.0f%% of ceiling "
               "(target >= %.0f%%: %s)\n",
               ratio, TARGET_TORCH_RATIO, ratio >= TARGET_TORCH_RATIO ? "met" : "missed",
               100.0 * frac, 100.0 * TARGET_CEILING,
               frac >= TARGET_CEILING ? "met" : "missed");
    } else {
        printf("ratio   : n/a vs pytorch (target >= %.0fx), %.0f%% of ceiling (target "
               ">= %.0f%%: %s)\n", TARGET_TORCH_RATIO, 100.0 * frac,
               100.0 * TARGET_CEILING, frac >= TARGET_CEILING ? "met" : "missed");
    }
    printf("result pleiades_ms_per_step=%.3f pleiades_tokens_per_s=%.1f "
           "pleiades_gflops=%.2f sgemm_gflops=%.2f ceiling_fraction=%.3f "
           "flops_per_step=%.0f",
           pl.ms_per_step, pl_tps, pl_gflops, ceiling, frac, flop_step);
    if (pl.have_profile)
        printf(" worker_utilisation=%.3f",
               pl.prof.busy_us / (pl.prof.span_us * (pl.prof.workers > 0 ? pl.prof.workers : 1)));
    if (ts == TORCH_OK)
        printf(" torch_ms_per_step=%.3f torch_tokens_per_s=%.1f ratio=%.3f", t_ms, t_tps,
               pl_tps / t_tps);
    printf("\n");
    return ts == TORCH_FAILED ? 1 : 0;
}
