/* bench_precision: what mixed precision buys, on the GPT of bench_gpt
 * (V=256, T=128, C=256, L=4, NH=4, batch 16, AdamW, 2 StarPU CPU workers),
 * trained in fp32, bf16 and fp16 (pl_engine_options.precision).
 *
 * A 16-bit precision stores parameters, their gradients and activations in
 * 2 bytes; kernels compute in fp32 (operands widened as a task starts,
 * outputs rounded back as it ends) except, in bf16 on a CPU with
 * AVX512-BF16, the matrix products of the linear layers, the LM head and
 * attention, which multiply bf16 values with fp32 accumulation
 * (ops/gemm_bf16.c); the optimizer updates fp32 master weights with fp32
 * AdamW states. So per parameter the model state
 * is 16 B in fp32 (values, gradients, m, v) and 2 + 2 + 4 + 8 = 16 B in
 * 16 bits (values, gradients, master, m, v): the saving is not in the
 * total but in what the forward and backward passes touch (parameters,
 * gradients, activations), which is what stays on the compute tier when
 * the optimizer's fp32 state is offloaded (Colossal-AI Gemini's split).
 * fp16 also turns on the dynamic loss scaler (an overflow check per
 * update, skipped updates while the scale settles).
 *
 *   Part 1, step time. One process, no budget, no placement: four engines
 *   from four graphs built with the same seed (42: the same initial
 *   weights), one per variant (fp32, bf16, bf16 with its products widened
 *   to fp32 sgemms as on a CPU without AVX512-BF16, fp16), default tiles,
 *   fed the same fixed batch of pseudo-random tokens. Each is warmed up
 *   (--warmup steps), then --reps repetitions interleave the variants:
 *   each times --steps train steps from idle to the end of their tasks
 *   (starpu_task_wait_for_all before and after: a step returns with its
 *   loss while backward and the update still run). Printed per variant:
 *   ms/step min / median / max over the repetitions, tokens/s from the
 *   median, the median's ratio to fp32's, and the last loss.
 *
 *   Part 2, compute-tier bytes. StarPU counts only the memory it manages,
 *   and the engine's model state is in host buffers it does not count
 *   unless a placement policy and a budget make every chunk a StarPU
 *   handle on the compute tier. So each precision runs twice more, under
 *   Gemini's static placement with a budget that fits everything (4096
 *   MB, nothing is evicted for lack of room) and a disk tier in
 *   --offload-dir:
 *     resident     offload_optim_frac 0: every unit on the compute tier;
 *     optim. offl. offload_optim_frac 1: the optimizer units (fp32 master
 *                  weights and AdamW states) belong to the offload tier
 *                  (the disk here; the host on a GPU run) and their
 *                  updates run there. On a CPU-only run the compute tier
 *                  is main RAM, where updates run anyway, and static
 *                  sends offloaded units away only under budget pressure
 *                  (as its first victims): with this budget none leave,
 *                  which the evictions column shows, and a note then
 *                  gives the peak minus master+optim as a derived figure.
 *   Each run is a forked child (one StarPU runtime per process; the parent
 *   never starts StarPU, part 1 runs in a child too): 2 warm-up steps,
 *   then 2 steps, each followed by pl_engine_memory; the peak is the
 *   largest peak_compute_bytes of those 2 steps (StarPU's count, sampled
 *   per task). Printed with its ratio to fp32's peak under the same
 *   placement and pl_engine_model_state_bytes split into what the passes
 *   use (parameters + gradients) and what only the optimizer uses (master
 *   weights + optimizer states).
 *
 * Targets (the mixed-precision issue's, printed as met / missed): bf16's
 * peak compute-tier bytes <= 0.55 x fp32's (shown for both placements;
 * the optimizer-offloaded one is Gemini's configuration), and bf16's
 * median step time <= 1.1 x fp32's. The last line is machine-readable:
 *   result fp32_ms=.. bf16_ms=.. fp16_ms=.. bf16_time_ratio=..
 *          bf16_peak_ratio_resident=.. bf16_peak_ratio_offloaded=..
 *
 * --device cuda: the same on the first GPU. The compute tier is the GPU's
 * memory and the tier below is host RAM, so the optimizer-offloaded runs
 * keep master weights and AdamW states on the host, where the runtime's
 * host-only CPU worker updates them: Gemini's split, measured rather than
 * derived. There is no "bf16 wide" row: it toggles the CPU's oneDNN
 * products.
 *
 * Usage: bench_precision [--workers N] [--steps N] [--warmup N] [--reps N]
 *                        [--batch N] [--layers N] [--channels N]
 *                        [--context N] [--heads N] [--offload-dir DIR]
 *                        [--device cpu|cuda]
 */
#define _GNU_SOURCE /* mkdtemp, strsignal, nftw's FTW_DEPTH / FTW_PHYS */

#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <starpu.h>

#include <pleiades.h>

#include "bench_util.h"
#include "ops/gemm_bf16.h"

static const char *PROG = "bench_precision";

enum {
    VOCAB = 256,
    SEED = 42,
    MAX_REPS = 100,
    N_PREC = 3,
    N_PLACE = 2,
    MEM_WARMUP = 2,  /* part 2: untimed steps first */
    MEM_STEPS = 2,   /* part 2: steps whose peaks count */
    BUDGET_MB = 4096 /* part 2: room for everything */
};

#define TARGET_PEAK_RATIO 0.55
#define TARGET_TIME_RATIO 1.10

static const pl_precision PRECS[N_PREC] = {PL_PRECISION_FP32, PL_PRECISION_BF16,
                                           PL_PRECISION_FP16};
static const char *const PREC_NAMES[N_PREC] = {"fp32", "bf16", "fp16"};
/* Part 1's variants: each precision, and bf16 once more with its products
 * widened to fp32 sgemms as on a CPU without AVX512-BF16 (or a build
 * without oneDNN): what the bf16 products buy, in the same run. */
enum { N_TIME = 4, TIME_WIDENED = 2 };
static const int TIME_PREC[N_TIME] = {0, 1, 1, 2};
static const char *const TIME_NAMES[N_TIME] = {"fp32", "bf16", "bf16 wide", "fp16"};
static const char *const PLACE_NAMES[N_PLACE] = {"resident", "optim. offl."};
static const float PLACE_OFFLOAD_OPTIM[N_PLACE] = {0.0f, 1.0f};

typedef struct bench_options {
    int workers, steps, warmup, reps, batch;
    pl_gpt_config cfg;
    const char *offload_dir; /* NULL: a fresh one under /tmp */
    bool cuda;               /* --device cuda */
} bench_options;

/* Part 1's answer from its child. */
typedef struct time_result {
    bool ok;
    int64_t params;
    bool bf16_products; /* pl_gemm_bf16 ran in the "bf16" variant */
    double ms[N_TIME][MAX_REPS];
    double last_loss[N_TIME];
    char error[512];
} time_result;

/* One of part 2's runs, from its child. */
typedef struct mem_result {
    bool ok;
    int64_t peak_compute;
    int64_t peak_disk; /* the disk tier's use, same steps */
    int64_t evictions; /* units the policy sent away, same steps */
    pl_model_state_bytes state;
    double last_loss;
    char error[512];
} mem_result;

static double mib(double bytes) { return bytes / 1048576.0; }

/* ------------------------------------------------------------ options */

static void usage(FILE *f) {
    fprintf(f,
            "usage: %s [options]\n"
            "  --workers N       StarPU CPU workers (default 2)\n"
            "  --steps N         timed steps per repetition (default 5)\n"
            "  --warmup N        untimed steps per engine first (default 2)\n"
            "  --reps N          interleaved repetitions (default 5, at most %d)\n"
            "  --batch N         sequences per step (default 16)\n"
            "  --layers N, --channels N, --context N, --heads N  (default 4, 256, "
            "128, 4;\n"
            "                    channels a multiple of heads)\n"
            "  --offload-dir DIR disk tier of part 2 (an existing directory; default: "
            "a fresh\n"
            "                    one under /tmp, removed at the end; CPU runs)\n"
            "  --device D        cpu (default) or cuda: the compute tier is the first\n"
            "                    GPU, the tier below host RAM (offloaded optimizer\n"
            "                    units are updated there by a host-only CPU worker)\n"
            "  -h, --help        this text\n",
            PROG, MAX_REPS);
}

/* 0 on success, 1 on a bad option, -1 after --help. */
static int parse_options(int argc, char **argv, bench_options *o) {
    enum { O_WORKERS = 256, O_STEPS, O_WARMUP, O_REPS, O_BATCH, O_LAYERS, O_CHANNELS,
           O_CONTEXT, O_HEADS, O_DIR, O_DEVICE };
    static const struct option longopts[] = {
        {"workers", required_argument, NULL, O_WORKERS},
        {"steps", required_argument, NULL, O_STEPS},
        {"warmup", required_argument, NULL, O_WARMUP},
        {"reps", required_argument, NULL, O_REPS},
        {"batch", required_argument, NULL, O_BATCH},
        {"layers", required_argument, NULL, O_LAYERS},
        {"channels", required_argument, NULL, O_CHANNELS},
        {"context", required_argument, NULL, O_CONTEXT},
        {"heads", required_argument, NULL, O_HEADS},
        {"offload-dir", required_argument, NULL, O_DIR},
        {"device", required_argument, NULL, O_DEVICE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (bench_options){.workers = 2, .steps = 5, .warmup = 2, .reps = 5, .batch = 16,
                         .cfg = {.vocab = VOCAB, .context = 128, .channels = 256,
                                 .layers = 4, .heads = 4}};
    int c, v = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        bool ok = true;
        switch (c) {
        case O_WORKERS: /* StarPU's build limit (4 in Debian's) */
            ok = bench_parse_int_opt(PROG, "--workers", optarg, 1,
                                     pl_runtime_max_cpu_workers(), &o->workers);
            break;
        case O_STEPS: ok = bench_parse_int_opt(PROG, "--steps", optarg, 1, 10000, &o->steps); break;
        case O_WARMUP: ok = bench_parse_int_opt(PROG, "--warmup", optarg, 0, 10000, &o->warmup); break;
        case O_REPS: ok = bench_parse_int_opt(PROG, "--reps", optarg, 1, MAX_REPS, &o->reps); break;
        case O_BATCH: ok = bench_parse_int_opt(PROG, "--batch", optarg, 1, 4096, &o->batch); break;
        case O_LAYERS:
            ok = bench_parse_int_opt(PROG, "--layers", optarg, 1, 256, &v);
            o->cfg.layers = v;
            break;
        case O_CHANNELS:
            ok = bench_parse_int_opt(PROG, "--channels", optarg, 1, 16384, &v);
            o->cfg.channels = v;
            break;
        case O_CONTEXT:
            ok = bench_parse_int_opt(PROG, "--context", optarg, 1, 16384, &v);
            o->cfg.context = v;
            break;
        case O_HEADS:
            ok = bench_parse_int_opt(PROG, "--heads", optarg, 1, 1024, &v);
            o->cfg.heads = v;
            break;
        case O_DIR: o->offload_dir = optarg; break;
        case O_DEVICE:
            ok = bench_parse_device(PROG, optarg, &o->cuda);
            break;
        case 'h': usage(stdout); return -1;
        default: usage(stderr); return 1;
        }
        if (!ok) {
            usage(stderr);
            return 1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", PROG, argv[optind]);
        usage(stderr);
        return 1;
    }
    if (o->cfg.channels % o->cfg.heads) {
        fprintf(stderr, "%s: --channels %lld is not a multiple of --heads %lld\n", PROG,
                (long long)o->cfg.channels, (long long)o->cfg.heads);
        return 1;
    }
    if (o->offload_dir) {
        struct stat st;
        if (stat(o->offload_dir, &st) != 0 || !S_ISDIR(st.st_mode) ||
            access(o->offload_dir, W_OK | X_OK) != 0) {
            fprintf(stderr, "%s: --offload-dir '%s' is not a writable directory\n", PROG,
                    o->offload_dir);
            return 1;
        }
    }
    return 0;
}

/* ------------------------------------------------------- shared pieces */

/* The fixed batch every run trains on (xorshift, as bench_memory). */
static bool make_batch(const bench_options *o, int32_t **tokens, int32_t **targets) {
    int64_t n = (int64_t)o->batch * o->cfg.context;
    *tokens = malloc((size_t)n * sizeof **tokens);
    *targets = malloc((size_t)n * sizeof **targets);
    if (!*tokens || !*targets) {
        free(*tokens), free(*targets);
        *tokens = *targets = NULL;
        return false;
    }
    uint64_t s = 0x9e3779b97f4a7c15ULL;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        (*tokens)[i] = (int32_t)(s % VOCAB);
        (*targets)[i] = (int32_t)((s >> 20) % VOCAB);
    }
    return true;
}

static void set_error(char *error, size_t size, const char *what) {
    snprintf(error, size, "%s failed: %s (%s)", what, pl_last_error(),
             pl_status_string(pl_last_status()));
}

/* A graph of the GPT (seed 42) and an AdamW engine on it. */
static bool make_engine(pl_runtime_t *rt, const bench_options *o, pl_precision prec,
                        const pl_placement_options *placement, pl_graph_t **g,
                        pl_engine_t **e, char *error, size_t size) {
    *e = NULL;
    *g = pl_graph_new(SEED);
    if (!*g) return set_error(error, size, "pl_graph_new"), false;
    pl_gpt_model m;
    if (pl_gpt_build(*g, &o->cfg, &m) != PL_STATUS_OK)
        return set_error(error, size, "pl_gpt_build"), false;
    pl_engine_options eo = pl_engine_options_default();
    bench_set_adamw(&eo);
    eo.batch_size = o->batch;
    eo.precision = prec;
    if (placement) eo.placement = *placement;
    *e = pl_engine_new(rt, *g, &eo);
    if (!*e) return set_error(error, size, "pl_engine_new"), false;
    return true;
}

static bool train_step(pl_engine_t *e, const pl_batch *b, double *loss, char *error,
                       size_t size, const char *name) {
    pl_step_result r;
    if (pl_engine_train_step(e, b, &r) != PL_STATUS_OK) {
        char what[64];
        snprintf(what, sizeof what, "pl_engine_train_step (%s)", name);
        set_error(error, size, what);
        return false;
    }
    if (!isfinite(r.loss)) {
        snprintf(error, size, "%s: the loss is %g", name, r.loss);
        return false;
    }
    *loss = r.loss;
    return true;
}

/* ---------------------------------------------------- part 1: in a child */

/* A child's runtime (CPU workers; a budget and disk tier when budget_mb >
 * 0) and the batch; NULL with the reason in `error`. */
static pl_runtime_t *open_run(const bench_options *o, int64_t budget_mb, const char *dir,
                              int32_t **tokens, int32_t **targets, char *error,
                              size_t size) {
    if (!make_batch(o, tokens, targets)) {
        snprintf(error, size, "out of memory for the batch");
        return NULL;
    }
    pl_runtime_options ro = pl_runtime_options_default();
    /* CUDA: the GPU is the compute tier and host RAM the one below (no
     * disk); the default host-only CPU worker updates offloaded chunks. */
    ro.device = o->cuda ? PL_DEVICE_CUDA : PL_DEVICE_CPU;
    ro.cpu_workers = o->cuda ? 0 : o->workers;
    ro.compute_budget_mb = budget_mb;
    ro.offload_dir = o->cuda ? NULL : dir;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) {
        set_error(error, size, "pl_runtime_new");
        free(*tokens), free(*targets);
    }
    return rt;
}

static void run_times(const bench_options *o, time_result *r) {
    memset(r, 0, sizeof *r);
    int32_t *tokens, *targets;
    pl_runtime_t *rt = open_run(o, 0, NULL, &tokens, &targets, r->error, sizeof r->error);
    if (!rt) return;
    pl_graph_t *g[N_TIME] = {0};
    pl_engine_t *e[N_TIME] = {0};
    bool ok = true;
    for (int p = 0; p < N_TIME && ok; p++)
        ok = make_engine(rt, o, PRECS[TIME_PREC[p]], NULL, &g[p], &e[p], r->error,
                         sizeof r->error);
    if (ok) r->params = pl_graph_param_count(g[0]);
    const void *data[2] = {tokens, targets};
    pl_batch b = {.size = o->batch, .data = data};
    /* "bf16 wide" toggles the CPU's oneDNN products: nothing on a GPU. */
    for (int p = 0; p < N_TIME && ok; p++) {
        if (o->cuda && p == TIME_WIDENED) continue;
        pl_gemm_bf16_enable(p != TIME_WIDENED);
        int64_t before = pl_gemm_bf16_count();
        for (int k = 0; k < o->warmup && ok; k++)
            ok = train_step(e[p], &b, &r->last_loss[p], r->error, sizeof r->error,
                            TIME_NAMES[p]);
        starpu_task_wait_for_all();
        if (p == 1) r->bf16_products = pl_gemm_bf16_count() > before;
    }
    for (int rep = 0; rep < o->reps && ok; rep++)
        for (int p = 0; p < N_TIME && ok; p++) {
            if (o->cuda && p == TIME_WIDENED) continue;
            starpu_task_wait_for_all();
            pl_gemm_bf16_enable(p != TIME_WIDENED);
            double t0 = bench_now_s();
            for (int k = 0; k < o->steps && ok; k++)
                ok = train_step(e[p], &b, &r->last_loss[p], r->error, sizeof r->error,
                                TIME_NAMES[p]);
            starpu_task_wait_for_all();
            r->ms[p][rep] = (bench_now_s() - t0) * 1e3 / o->steps;
        }
    pl_gemm_bf16_enable(true);
    r->ok = ok;
    for (int p = 0; p < N_TIME; p++) {
        if (e[p]) pl_engine_free(e[p]);
        if (g[p]) pl_graph_free(g[p]);
    }
    pl_runtime_free(rt);
    free(tokens), free(targets);
}

/* ---------------------------------------------------- part 2: in a child */

typedef struct mem_config {
    int prec, place;
    const char *dir; /* this run's disk tier */
} mem_config;

static void run_memory(const bench_options *o, const mem_config *c, mem_result *r) {
    memset(r, 0, sizeof *r);
    int32_t *tokens, *targets;
    pl_runtime_t *rt =
        open_run(o, BUDGET_MB, c->dir, &tokens, &targets, r->error, sizeof r->error);
    if (!rt) return;
    pl_placement_options po = pl_engine_options_default().placement;
    po.policy = pl_placement_static();
    po.offload_optim_frac = PLACE_OFFLOAD_OPTIM[c->place];
    pl_graph_t *g = NULL;
    pl_engine_t *e = NULL;
    bool ok = make_engine(rt, o, PRECS[c->prec], &po, &g, &e, r->error, sizeof r->error);
    if (ok && pl_engine_model_state_bytes(e, &r->state) != PL_STATUS_OK)
        ok = false, set_error(r->error, sizeof r->error, "pl_engine_model_state_bytes");
    const void *data[2] = {tokens, targets};
    pl_batch b = {.size = o->batch, .data = data};
    for (int k = 0; k < MEM_WARMUP + MEM_STEPS && ok; k++) {
        ok = train_step(e, &b, &r->last_loss, r->error, sizeof r->error,
                        PREC_NAMES[c->prec]);
        if (!ok || k < MEM_WARMUP) continue;
        pl_iteration_memory mem;
        if (pl_engine_memory(e, &mem) != PL_STATUS_OK) {
            set_error(r->error, sizeof r->error, "pl_engine_memory");
            ok = false;
        } else {
            if (mem.peak_compute_bytes > r->peak_compute) r->peak_compute = mem.peak_compute_bytes;
            if (mem.peak_host_bytes > r->peak_disk) r->peak_disk = mem.peak_host_bytes;
            r->evictions += mem.evictions;
        }
    }
    if (ok) starpu_task_wait_for_all();
    r->ok = ok;
    if (e) pl_engine_free(e);
    if (g) pl_graph_free(g);
    pl_runtime_free(rt);
    free(tokens), free(targets);
}

/* ------------------------------------------------------------ children */

typedef struct child_job {
    const bench_options *o;
    const mem_config *mem; /* NULL: part 1 */
} child_job;

/* Runs a job in a forked child, its result (size bytes) coming back
 * through a pipe; false, with the reason in `error`, if the child failed
 * to answer (a crash). A result that reports its own failure is still
 * returned (true). */
static bool in_child(const child_job *job, void *out, size_t size, char *error,
                     size_t error_size) {
    int p[2];
    if (pipe(p) != 0) {
        snprintf(error, error_size, "pipe: %s", strerror(errno));
        return false;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(error, error_size, "fork: %s", strerror(errno));
        close(p[0]), close(p[1]);
        return false;
    }
    if (pid == 0) {
        close(p[0]);
        void *mine = malloc(size);
        if (!mine) _exit(1);
        if (job->mem) run_memory(job->o, job->mem, mine);
        else run_times(job->o, mine);
        fflush(stdout);
        fflush(stderr);
        size_t put = 0;
        while (put < size) {
            ssize_t w = write(p[1], (char *)mine + put, size - put);
            if (w <= 0) _exit(1);
            put += (size_t)w;
        }
        _exit(0);
    }
    close(p[1]);
    size_t got = 0;
    while (got < size) {
        ssize_t n = read(p[0], (char *)out + got, size - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(p[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (got != size || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        if (WIFSIGNALED(status))
            snprintf(error, error_size, "the child was killed by %s",
                     strsignal(WTERMSIG(status)));
        else
            snprintf(error, error_size, "the child failed (exit status %d, %zu of %zu "
                     "result bytes)", WIFEXITED(status) ? WEXITSTATUS(status) : -1, got,
                     size);
        return false;
    }
    return true;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* "met" / "missed" / "not evaluated" for value <= target. */
static const char *verdict(double value, double target) {
    if (!isfinite(value)) return "not evaluated";
    return value <= target ? "met" : "missed";
}

/* -------------------------------------------------------------- main */

int main(int argc, char **argv) {
    bench_options o;
    int rc = parse_options(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : 2;
    setenv("STARPU_SILENT", "1", 0);
    const pl_gpt_config *m = &o.cfg;
    double tokens_per_step = (double)o.batch * (double)m->context;
    bool failed = false;

    printf("%s: GPT V=%lld T=%lld C=%lld L=%lld NH=%lld, batch %d (%.0f tokens/step), "
           "AdamW, %d CPU workers, default tiles; same seed (%d) and batch for every run\n",
           PROG, (long long)m->vocab, (long long)m->context, (long long)m->channels,
           (long long)m->layers, (long long)m->heads, o.batch, tokens_per_step, o.workers,
           SEED);

    /* ---- part 1 */
    printf("\n== part 1: step time (no budget, no placement; %d warm-up steps per engine, "
           "%d interleaved reps of %d steps, each from idle to the end of its tasks)\n",
           o.warmup, o.reps, o.steps);
    time_result *tr = calloc(1, sizeof *tr);
    if (!tr) {
        fprintf(stderr, "%s: out of memory\n", PROG);
        return 1;
    }
    child_job job = {.o = &o, .mem = NULL};
    char error[512];
    bench_stats st[N_TIME];
    double med[N_TIME] = {NAN, NAN, NAN, NAN};
    if (!in_child(&job, tr, sizeof *tr, error, sizeof error)) {
        fprintf(stderr, "%s: part 1: %s\n", PROG, error);
        failed = true;
    } else if (!tr->ok) {
        fprintf(stderr, "%s: part 1: %s\n", PROG, tr->error);
        failed = true;
    } else {
        printf("%lld parameters\n", (long long)tr->params);
        printf("%-9s %9s %9s %9s %10s %9s %10s\n", "precision", "min", "median", "max",
               "tokens/s", "vs fp32", "last loss");
        for (int p = 0; p < N_TIME; p++) {
            st[p] = bench_stats_of(tr->ms[p], o.reps);
            med[p] = o.cuda && p == TIME_WIDENED ? NAN : st[p].median;
        }
        for (int p = 0; p < N_TIME; p++)
            if (!(o.cuda && p == TIME_WIDENED))
            printf("%-9s %9.2f %9.2f %9.2f %10.0f %8.3fx %10.6f\n", TIME_NAMES[p],
                   st[p].min, st[p].median, st[p].max,
                   tokens_per_step / (st[p].median / 1e3), st[p].median / st[0].median,
                   tr->last_loss[p]);
        printf("(ms per step: min / median / max over the reps; tokens/s and the ratio "
               "from the medians)\n");
        if (o.cuda)
            printf("bf16's products: cublasGemmEx for the linear layers and the LM head, "
                   "fp32 sgemms of widened operands for attention\n");
        else
            printf("bf16's products: %s; \"bf16 wide\" widens them to fp32 sgemms\n",
                   tr->bf16_products ? "oneDNN (AVX512-BF16)"
                                     : "widened too (no AVX512-BF16 or no oneDNN here)");
    }
    fflush(stdout);

    /* ---- part 2 */
    char tmpdir[64] = "";
    const char *dir = o.offload_dir;
    if (!dir) {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/pl_bench_precision_XXXXXX");
        if (!mkdtemp(tmpdir)) {
            fprintf(stderr, "%s: mkdtemp %s: %s\n", PROG, tmpdir, strerror(errno));
            free(tr);
            return 1;
        }
        dir = tmpdir;
    }
    printf("\n== part 2: compute-tier bytes (static placement, budget %d MB, %s %s; "
           "%d warm-up steps, peak over the next %d)\n",
           BUDGET_MB, o.cuda ? "the GPU's; below it host RAM, not" : "disk tier",
           o.cuda ? "limited" : dir, MEM_WARMUP, MEM_STEPS);
    mem_result mr[N_PREC][N_PLACE];
    memset(mr, 0, sizeof mr);
    printf("%-9s %-13s %11s %9s %9s %7s %13s %14s %10s\n", "precision", "placement",
           "peak MiB", "vs fp32", o.cuda ? "host MiB" : "disk MiB", "evicts",
           "params+grads", "master+optim",
           "last loss");
    for (int pl = 0; pl < N_PLACE; pl++)
        for (int p = 0; p < N_PREC; p++) {
            char sub[4200];
            snprintf(sub, sizeof sub, "%s/run-%s-%d", dir, PREC_NAMES[p], pl);
            if (mkdir(sub, 0700) != 0 && errno != EEXIST) {
                fprintf(stderr, "%s: mkdir %s: %s\n", PROG, sub, strerror(errno));
                failed = true;
                continue;
            }
            mem_config mc = {.prec = p, .place = pl, .dir = sub};
            child_job mj = {.o = &o, .mem = &mc};
            mem_result *r = &mr[p][pl];
            if (!in_child(&mj, r, sizeof *r, error, sizeof error)) {
                r->ok = false;
                snprintf(r->error, sizeof r->error, "%s", error);
            }
            nftw(sub, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
            if (!r->ok) {
                fprintf(stderr, "%s: part 2, %s %s: %s\n", PROG, PREC_NAMES[p],
                        PLACE_NAMES[pl], r->error);
                printf("%-9s %-13s failed\n", PREC_NAMES[p], PLACE_NAMES[pl]);
                failed = true;
                continue;
            }
            const mem_result *f = &mr[0][pl];
            double ratio = f->ok && f->peak_compute > 0
                               ? (double)r->peak_compute / (double)f->peak_compute
                               : NAN;
            const pl_model_state_bytes *s = &r->state;
            printf("%-9s %-13s %11.2f %8.3fx %9.2f %7lld %13.2f %14.2f %10.6f\n",
                   PREC_NAMES[p], PLACE_NAMES[pl], mib((double)r->peak_compute), ratio,
                   mib((double)r->peak_disk), (long long)r->evictions,
                   mib((double)(s->params + s->grads)),
                   mib((double)(s->master_weights + s->optimizer_states)), r->last_loss);
            if (r->peak_compute <= 0) {
                fprintf(stderr, "%s: part 2, %s %s: StarPU counted no compute-tier bytes\n",
                        PROG, PREC_NAMES[p], PLACE_NAMES[pl]);
                failed = true;
            }
            fflush(stdout);
        }
    printf("(peak: StarPU's count on the compute tier, the largest of the %d steps; %s: "
           "the %s tier's peak use\n over the same steps (copies StarPU writes there "
           "count even when nothing left the compute tier);\n evicts: units the policy "
           "sent away in those steps; model state: pl_engine_model_state_bytes in MiB)\n",
           MEM_STEPS, o.cuda ? "host" : "disk", o.cuda ? "host" : "disk");
    /* On a CPU-only run the compute tier is main RAM, where the update
     * runs anyway: static moves offloaded optimizer units to the disk only
     * when the budget presses (they are its first victims). Say so when
     * none left, and what the peak would be without them. */
    const mem_result *f1 = &mr[0][1], *b1 = &mr[1][1];
    if (!o.cuda && f1->ok && b1->ok && f1->evictions == 0 && b1->evictions == 0) {
        double f_rest = (double)(f1->peak_compute - f1->state.master_weights -
                                 f1->state.optimizer_states);
        double b_rest = (double)(b1->peak_compute - b1->state.master_weights -
                                 b1->state.optimizer_states);
        printf("note: the optimizer-offloaded runs evicted nothing from the compute tier: "
               "with a budget that fits everything,\n"
               "      static evicts the offloaded optimizer units only under pressure, and "
               "a CPU-only run updates\n"
               "      them on the compute tier (main RAM) anyway, so their peak is about "
               "the resident one. Peak minus\n"
               "      master+optim (derived, not measured): fp32 %.2f MiB, bf16 %.2f MiB, "
               "ratio %.3fx\n",
               mib(f_rest), mib(b_rest), f_rest > 0 ? b_rest / f_rest : NAN);
    }
    if (*tmpdir) nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);

    /* ---- targets */
    double peak_ratio[N_PLACE];
    for (int pl = 0; pl < N_PLACE; pl++)
        peak_ratio[pl] = mr[0][pl].ok && mr[1][pl].ok && mr[0][pl].peak_compute > 0 &&
                                 mr[1][pl].peak_compute > 0
                             ? (double)mr[1][pl].peak_compute / (double)mr[0][pl].peak_compute
                             : NAN;
    double time_ratio = med[1] / med[0];
    printf("\n== targets\n");
    printf("bf16 peak compute-tier bytes <= %.2fx fp32's, optimizer offloaded (Gemini's "
           "split): %.3fx -> %s\n",
           TARGET_PEAK_RATIO, peak_ratio[1], verdict(peak_ratio[1], TARGET_PEAK_RATIO));
    printf("bf16 peak compute-tier bytes <= %.2fx fp32's, everything resident: "
           "%.3fx -> %s\n",
           TARGET_PEAK_RATIO, peak_ratio[0], verdict(peak_ratio[0], TARGET_PEAK_RATIO));
    printf("bf16 median step time <= %.2fx fp32's: %.3fx -> %s\n", TARGET_TIME_RATIO,
           time_ratio, verdict(time_ratio, TARGET_TIME_RATIO));
    printf("stretch: bf16 faster than fp32 (bf16 products on AVX512-BF16): %.3fx -> %s\n",
           time_ratio, verdict(time_ratio, 1.0));
    printf("result fp32_ms=%.3f bf16_ms=%.3f bf16_wide_ms=%.3f fp16_ms=%.3f "
           "bf16_time_ratio=%.4f bf16_peak_ratio_resident=%.4f "
           "bf16_peak_ratio_offloaded=%.4f\n",
           med[0], med[1], med[TIME_WIDENED], med[3], time_ratio, peak_ratio[0],
           peak_ratio[1]);
    free(tr);
    if (failed) {
        fprintf(stderr, "%s: some runs failed (see above)\n", PROG);
        return 1;
    }
    return 0;
}
