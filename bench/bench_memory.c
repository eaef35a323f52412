/* bench_memory: training under a compute-tier memory budget, by placement
 * policy, against the unlimited run.
 *
 * Model: GPT V=256, T=128, C=256, L=4, NH=4 (the transformer issue's),
 * batch 16, AdamW, fp32, one fixed batch of pseudo-random tokens, 2 StarPU
 * CPU workers (--workers), chunks of --chunk-mb (default 1 MiB of floats:
 * units of 2 MiB, small enough for the 1/8 budget). CPU-only runs: the
 * compute tier is main RAM (STARPU_LIMIT_CPU_MEM), the tier below is
 * StarPU's disk node in --offload-dir (default a fresh directory under
 * /tmp, on whatever file system that is — usually served by the page
 * cache, so "disk" traffic is mostly memory copies and system calls).
 *
 * Training state, the quantity the budgets are fractions of:
 *   model state  16 bytes per parameter: values, gradients, AdamW m and v;
 *   activations  every activation and input of the batch (all tiles), plus
 *                the gradient of each that has one: what StarPU allocates
 *                for them on the compute tier and what the engine counts.
 * Both are printed; budgets are whole MiB (StarPU's limit is in MB).
 *
 * Configurations, each in a forked child (one StarPU runtime per process;
 * the parent never starts StarPU): unlimited (no budget, no placement),
 * full and selective (no budget, activation recomputation of every layer),
 * then static (Gemini's defaults), auto (Belady, --max-prefetch, default 0
 * as in Gemini) and auto+full (auto with every layer recomputed) at each
 * budget fraction (--fractions, default 0.25,0.125,0.0625), and auto+plan
 * (auto with PL_RECOMPUTE_AUTO: the planner keeps or recomputes each
 * layer from the second step's measured forwards). Each run's
 * activation peak (values of op outputs and saved tensors, most at once in
 * the timed steps) is the engine's count (pl_engine_activation_bytes).
 * Each row runs --reps times, alternating with the other rows (every row
 * once, then again), each time in a child of its own: --warmup steps,
 * then --steps timed steps that start idle and end when all of their
 * tasks are done (a step returns with its loss while backward and the optimizer
 * still run). Placed runs read pl_engine_memory after every step (it
 * waits for the step's tasks; placement makes the next step wait anyway).
 * Printed per configuration: median ms/step over the repetitions,
 * tokens/s and its ratio to the unlimited run, and per iteration (mean
 * over the timed ones) MiB moved between tiers (StarPU's bus counters),
 * evictions, prefetch hits, and the peak of each tier (StarPU's count on
 * the compute tier, the disk node's use below it). Every run trains the
 * same steps from the same initialisation, so their last losses must be
 * bitwise equal: checked and printed.
 *
 * --device cuda: the compute tier is the first GPU (STARPU_LIMIT_CUDA_MEM),
 * the tier below host RAM (no limit, no disk); the policies are static,
 * auto and cpu (Lightning's preset: every chunk's state off the GPU between
 * uses, its optimizer update on the host: the runtime gets one CPU worker
 * for that host work), and the unlimited run is Gemini's default there (the device's
 * capacity as the budget, static placement, nothing moved).
 *
 * Targets (printed as met / NOT met): auto at the first fraction (1/4)
 * keeps >= 70 % of the unlimited throughput, and moves fewer bytes per
 * iteration than static at the same budget. The last line is
 *   result auto_quarter=… auto_keep_quarter=… auto_full_quarter=…
 *          (…_eighth, …_sixteenth; auto is auto+plan)
 *          full_act_peak_ratio=… full_time_ratio=…
 *          selective_act_peak_ratio=… selective_time_ratio=…
 *          selective_long_context=N selective_long_act_peak_ratio=…
 *          selective_long_time_ratio=… largest_ratio_half_throughput=…
 *          same_losses=0|1
 * (a fraction other than 1/4, 1/8, 1/16 gets auto_1_<state/budget>=…; the
 * largest ratio is over the fractions given, where auto + plan keeps at
 * least half of unlimited's throughput, 0: none)
 * throughput fractions of unlimited, and unlimited's activation peak over
 * the recomputing run's and the recomputing run's step time over
 * unlimited's (the long rows: --long-context, the same tokens per step,
 * against unlimited at that context).
 *
 * Usage: bench_memory [--workers N] [--steps N] [--warmup N] [--reps N]
 *                     [--batch N] [--layers N] [--channels N] [--context N]
 *                     [--heads N] [--chunk-mb X] [--max-prefetch N]
 *                     [--fractions a,b,...] [--offload-dir DIR]
 *                     [--device cpu|cuda] [--vocab N]
 */
#define _GNU_SOURCE /* mkdtemp, nftw's FTW_DEPTH / FTW_PHYS */

#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
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

enum { VOCAB = 256, MAX_REPS = 100, MAX_FRACTIONS = 8, MAX_POLICIES = 5,
       MAX_CONFIGS = 5 + MAX_POLICIES * MAX_FRACTIONS };

#define TARGET_THROUGHPUT 0.70

typedef struct bench_options {
    int workers, steps, warmup, reps, batch, max_prefetch, tiles, long_context;
    double chunk_mb;
    double cap_ratio; /* auto's steady_cuda_cap_ratio; 0: the default */
    pl_gpt_config cfg;
    double fractions[MAX_FRACTIONS];
    int n_fractions;
    const char *offload_dir; /* NULL: a fresh one under /tmp */
    bool cuda;               /* --device cuda */
} bench_options;

typedef struct config {
    char name[32];
    const char *policy; /* NULL: unlimited */
    pl_recompute_granularity recompute;
    double fraction;
    int64_t budget_mb;
    int context, batch; /* 0: the options'; else this row's (long context) */
    int base;           /* the unbudgeted row it is compared with */
} config;

typedef struct result {
    bool ok;
    double ms_per_step;   /* median over repetitions */
    double last_loss;
    int n_chunks;
    double moved, evictions, hits; /* per timed iteration */
    int64_t peak_compute, peak_host; /* maxima over the timed iterations */
    int64_t act_peak;     /* activation values, most at once in the timed steps
                             (pl_engine_activation_bytes) */
    char error[256];
    char plan[640];       /* auto + plan rows: pl_engine_recompute_plan */
    int64_t chunked_state; /* the engine's model state, chunks' padding
                              included (pl_engine_model_state_bytes) */
} result;

static double mib(double bytes) { return bytes / 1048576.0; }

/* ------------------------------------------------------------ options */

static void usage(FILE *f) {
    fprintf(f,
            "usage: bench_memory [options]\n"
            "  --workers N       StarPU CPU workers (default 2)\n"
            "  --steps N         timed steps per repetition (default 3)\n"
            "  --warmup N        untimed steps first (default 5: auto + plan times its\n"
            "                    layers in the second and tries its plan, every layer\n"
            "                    recomputed and none in the next three)\n"
            "  --reps N          repetitions, alternating over the rows; the median is\n"
            "                    shown (default 3)\n"
            "  --batch N         sequences per step (default 16)\n"
            "  --tiles N         batch tiles per step (default 0: one per worker)\n"
            "  --long-context N  also unlimited and selective rows at context N, batch\n"
            "                    scaled to the same tokens per step (default 512; 0: none)\n"
            "  --layers N, --channels N, --context N, --heads N  (default 4, 256, "
            "128, 4)\n"
            "  --chunk-mb X      chunk size in MiB of floats (default 1; 0: the engine's search)\n"
            "  --max-prefetch N  auto's prefetch depth (default 0, Gemini's)\n"
            "  --cap-ratio X     auto's steady_cuda_cap_ratio (default Gemini's 0.9)\n"
            "  --fractions a,b   budgets as fractions of the training state\n"
            "                    (default 0.25,0.125,0.0625)\n"
            "  --offload-dir DIR disk tier (default: a fresh directory in /tmp; CPU runs)\n"
            "  --device D        cpu (default) or cuda: the compute tier is the GPU\n"
            "  --vocab N         vocabulary (default %d)\n", VOCAB);
}

/* 0 on success, 1 on a bad option, -1 after --help. */
static int parse_options(int argc, char **argv, bench_options *o) {
    enum { O_WORKERS = 256, O_STEPS, O_WARMUP, O_REPS, O_BATCH, O_LAYERS, O_CHANNELS,
           O_CONTEXT, O_HEADS, O_CHUNK, O_PREFETCH, O_FRACTIONS, O_DIR, O_DEVICE, O_VOCAB, O_TILES, O_LONG, O_CAP };
    static const struct option longopts[] = {
        {"workers", required_argument, NULL, O_WORKERS},
        {"steps", required_argument, NULL, O_STEPS},
        {"warmup", required_argument, NULL, O_WARMUP},
        {"reps", required_argument, NULL, O_REPS},
        {"batch", required_argument, NULL, O_BATCH},
        {"tiles", required_argument, NULL, O_TILES},
        {"long-context", required_argument, NULL, O_LONG},
        {"cap-ratio", required_argument, NULL, O_CAP},
        {"layers", required_argument, NULL, O_LAYERS},
        {"channels", required_argument, NULL, O_CHANNELS},
        {"context", required_argument, NULL, O_CONTEXT},
        {"heads", required_argument, NULL, O_HEADS},
        {"chunk-mb", required_argument, NULL, O_CHUNK},
        {"max-prefetch", required_argument, NULL, O_PREFETCH},
        {"fractions", required_argument, NULL, O_FRACTIONS},
        {"offload-dir", required_argument, NULL, O_DIR},
        {"device", required_argument, NULL, O_DEVICE},
        {"vocab", required_argument, NULL, O_VOCAB},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (bench_options){.workers = 2, .steps = 3, .warmup = 5, .reps = 3, .batch = 16,
                         .max_prefetch = 0, .chunk_mb = 1.0, .long_context = 512,
                         .cfg = {.vocab = VOCAB, .context = 128, .channels = 256,
                                 .layers = 4, .heads = 4},
                         .fractions = {0.25, 0.125, 0.0625}, .n_fractions = 3};
    int c, v;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        bool ok = true;
        switch (c) {
        case O_WORKERS: ok = bench_parse_int(optarg, 1, 64, &o->workers); break;
        case O_STEPS: ok = bench_parse_int(optarg, 1, 10000, &o->steps); break;
        case O_WARMUP: ok = bench_parse_int(optarg, 0, 10000, &o->warmup); break;
        case O_REPS: ok = bench_parse_int(optarg, 1, MAX_REPS, &o->reps); break;
        case O_BATCH: ok = bench_parse_int(optarg, 1, 4096, &o->batch); break;
        case O_TILES: ok = bench_parse_int(optarg, 0, 4096, &o->tiles); break;
        case O_LONG: ok = bench_parse_int(optarg, 0, 16384, &o->long_context); break;
        case O_LAYERS: ok = bench_parse_int(optarg, 1, 256, &v); o->cfg.layers = v; break;
        case O_CHANNELS:
            ok = bench_parse_int(optarg, 1, 16384, &v);
            o->cfg.channels = v;
            break;
        case O_CONTEXT:
            ok = bench_parse_int(optarg, 1, 16384, &v);
            o->cfg.context = v;
            break;
        case O_HEADS: ok = bench_parse_int(optarg, 1, 1024, &v); o->cfg.heads = v; break;
        case O_PREFETCH: ok = bench_parse_int(optarg, 0, 1 << 20, &o->max_prefetch); break;
        case O_CAP: {
            char *end;
            o->cap_ratio = strtod(optarg, &end);
            ok = *end == '\0' && end != optarg && o->cap_ratio > 0 && o->cap_ratio <= 1;
            break;
        }
        case O_CHUNK: {
            char *end;
            o->chunk_mb = strtod(optarg, &end);
            ok = *end == '\0' && end != optarg && o->chunk_mb >= 0 && o->chunk_mb <= 4096;
            break;
        }
        case O_FRACTIONS: {
            o->n_fractions = 0;
            char *s = optarg, *end;
            while (ok && *s) {
                double f = strtod(s, &end);
                ok = end != s && f > 0 && f < 1 && o->n_fractions < MAX_FRACTIONS &&
                     (*end == ',' || *end == '\0');
                if (ok) o->fractions[o->n_fractions++] = f;
                s = *end == ',' ? end + 1 : end;
            }
            ok = ok && o->n_fractions > 0;
            break;
        }
        case O_DIR: o->offload_dir = optarg; break;
        case O_DEVICE:
            ok = bench_parse_device("bench_memory", optarg, &o->cuda);
            break;
        case O_VOCAB: ok = bench_parse_int(optarg, 2, 1 << 20, &v); o->cfg.vocab = v; break;
        case 'h': usage(stdout); return -1;
        default: usage(stderr); return 1;
        }
        if (!ok) {
            fprintf(stderr, "bench_memory: bad value '%s'\n", optarg);
            return 1;
        }
    }
    if (optind < argc || o->cfg.channels % o->cfg.heads) {
        usage(stderr);
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------- sizes */

/* Model state and activation bytes of the GPT (no StarPU needed). */
static void training_state(const bench_options *o, int64_t *params, int64_t *model,
                           int64_t *acts) {
    pl_graph_t *g = pl_graph_new(1);
    pl_gpt_model m;
    if (!g || pl_gpt_build(g, &o->cfg, &m) != PL_STATUS_OK) {
        fprintf(stderr, "bench_memory: cannot build the GPT: %s\n", pl_last_error());
        exit(1);
    }
    *params = pl_graph_param_count(g);
    *model = 16 * *params;
    *acts = 0;
    for (int i = 0; i < pl_graph_num_tensors(g); i++) {
        const pl_tensor_t *t = pl_graph_tensor(g, i);
        pl_tensor_kind kind = pl_tensor_get_kind(t);
        if (kind != PL_TENSOR_ACTIVATION && kind != PL_TENSOR_INPUT) continue;
        int64_t one = (int64_t)o->batch * pl_tensor_numel(t) * 4;
        *acts += pl_tensor_requires_grad(t) ? 2 * one : one;
    }
    pl_graph_free(g);
}

/* ------------------------------------------------------------- child */

static void child_fail(result *r, const char *what) {
    snprintf(r->error, sizeof r->error, "%s: %s", what, pl_last_error());
    r->ok = false;
}

static void run_config(const bench_options *o, const config *c, const char *dir,
                       result *r) {
    memset(r, 0, sizeof *r);
    pl_runtime_options ro = pl_runtime_options_default();
    ro.device = o->cuda ? PL_DEVICE_CUDA : PL_DEVICE_CPU;
    /* CUDA: the default one CPU worker, for host work (the cpu preset's
     * updates). */
    ro.cpu_workers = o->cuda ? 0 : o->workers;
    ro.compute_budget_mb = c->policy ? c->budget_mb : 0;
    ro.offload_dir = c->policy && !o->cuda ? dir : NULL;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) return child_fail(r, "pl_runtime_new");
    pl_graph_t *g = pl_graph_new(42);
    pl_gpt_model m;
    if (!g || pl_gpt_build(g, &o->cfg, &m) != PL_STATUS_OK) {
        child_fail(r, "pl_gpt_build");
        pl_runtime_free(rt);
        return;
    }
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = o->batch;
    eo.tiles = o->tiles;
    eo.chunk_elems = (size_t)(o->chunk_mb * 1048576.0 / sizeof(float));
    if (c->policy) {
        eo.placement.policy = pl_placement_by_name(c->policy, &eo.placement);
        eo.placement.max_prefetch = o->max_prefetch;
        if (o->cap_ratio > 0) eo.placement.steady_cuda_cap_ratio = (float)o->cap_ratio;
    }
    eo.recompute.granularity = c->recompute;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    if (!e) {
        child_fail(r, "pl_engine_new");
        pl_graph_free(g);
        pl_runtime_free(rt);
        return;
    }
    r->n_chunks = pl_engine_num_chunks(e);
    int64_t n = (int64_t)o->batch * o->cfg.context;
    int32_t *tokens = malloc((size_t)n * sizeof *tokens);
    int32_t *targets = malloc((size_t)n * sizeof *targets);
    uint64_t s = 0x9e3779b97f4a7c15ULL;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        tokens[i] = (int32_t)(s % (uint64_t)o->cfg.vocab);
        targets[i] = (int32_t)((s >> 20) % (uint64_t)o->cfg.vocab);
    }
    const void *data[2] = {tokens, targets};
    pl_batch batch = {.size = o->batch, .data = data};
    pl_step_result res;
    double times[MAX_REPS];
    int timed = 0;
    r->ok = true;
    for (int k = 0; k < o->warmup && r->ok; k++)
        if (pl_engine_train_step(e, &batch, &res) != PL_STATUS_OK) child_fail(r, "step");
    starpu_task_wait_for_all();
    pl_engine_reset_activation_peak(e);
    for (int rep = 0; rep < o->reps && r->ok; rep++) {
        double t0 = bench_now_s();
        for (int k = 0; k < o->steps && r->ok; k++) {
            if (pl_engine_train_step(e, &batch, &res) != PL_STATUS_OK) {
                child_fail(r, "step");
                break;
            }
            r->last_loss = res.loss;
            if (!c->policy) continue;
            pl_iteration_memory mem;
            if (pl_engine_memory(e, &mem) != PL_STATUS_OK) {
                child_fail(r, "pl_engine_memory");
                break;
            }
            timed++;
            r->moved += (double)mem.bytes_moved;
            r->evictions += (double)mem.evictions;
            r->hits += (double)mem.prefetch_hits;
            if (mem.peak_compute_bytes > r->peak_compute) r->peak_compute = mem.peak_compute_bytes;
            if (mem.peak_host_bytes > r->peak_host) r->peak_host = mem.peak_host_bytes;
        }
        starpu_task_wait_for_all();
        times[rep] = (bench_now_s() - t0) * 1e3 / o->steps;
    }
    if (r->ok) {
        pl_activation_bytes ab;
        if (pl_engine_activation_bytes(e, &ab) == PL_STATUS_OK) r->act_peak = ab.values_peak;
        if (c->recompute == PL_RECOMPUTE_AUTO) pl_engine_recompute_plan(e, r->plan, sizeof r->plan);
        pl_model_state_bytes mb;
        if (pl_engine_model_state_bytes(e, &mb) == PL_STATUS_OK)
            r->chunked_state = mb.params + mb.grads + mb.optimizer_states + mb.master_weights;
        r->ms_per_step = bench_median(times, o->reps);
        if (timed) {
            r->moved /= timed;
            r->evictions /= timed;
            r->hits /= timed;
        } else { /* unlimited: what StarPU holds (activations) */
            pl_iteration_memory mem;
            pl_engine_memory(e, &mem);
            r->peak_compute = mem.peak_compute_bytes;
        }
    }
    free(tokens);
    free(targets);
    pl_engine_free(e);
    pl_graph_free(g);
    pl_runtime_free(rt);
}

/* Runs one configuration in a child; false if it crashed. */
static bool in_child(const bench_options *o, const config *c, const char *dir, result *r) {
    int p[2];
    if (pipe(p) != 0) return false;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return false;
    if (pid == 0) {
        close(p[0]);
        result mine;
        run_config(o, c, dir, &mine);
        ssize_t w = write(p[1], &mine, sizeof mine);
        _exit(w == (ssize_t)sizeof mine ? 0 : 1);
    }
    close(p[1]);
    size_t got = 0;
    while (got < sizeof *r) {
        ssize_t n = read(p[0], (char *)r + got, sizeof *r - got);
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(p[0]);
    int status;
    waitpid(pid, &status, 0);
    if (got != sizeof *r || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        memset(r, 0, sizeof *r);
        snprintf(r->error, sizeof r->error, "child %s",
                 WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "failed");
        return false;
    }
    return true;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* Folds repetition `rep` of a row into its result: the per-iteration
 * figures averaged over repetitions, the peaks their maxima, the step
 * time kept for the median; a failed repetition fails the row. */
static void merge_rep(result *acc, const result *r1, int rep, double *ms) {
    ms[rep] = r1->ms_per_step;
    if (rep == 0) {
        *acc = *r1;
        return;
    }
    if (!acc->ok) return;
    if (!r1->ok) {
        *acc = *r1;
        return;
    }
    acc->moved = (acc->moved * rep + r1->moved) / (rep + 1);
    acc->evictions = (acc->evictions * rep + r1->evictions) / (rep + 1);
    acc->hits = (acc->hits * rep + r1->hits) / (rep + 1);
    if (r1->peak_compute > acc->peak_compute) acc->peak_compute = r1->peak_compute;
    if (r1->peak_host > acc->peak_host) acc->peak_host = r1->peak_host;
    if (r1->act_peak > acc->act_peak) acc->act_peak = r1->act_peak;
}

/* -------------------------------------------------------------- main */

int main(int argc, char **argv) {
    bench_options o;
    int rc = parse_options(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : 1;
    setenv("STARPU_SILENT", "1", 0);

    int64_t params, model, acts;
    training_state(&o, &params, &model, &acts);
    int64_t state = model + acts;
    const pl_gpt_config *m = &o.cfg;
    char where[48];
    if (o.cuda) snprintf(where, sizeof where, "the first GPU");
    else snprintf(where, sizeof where, "%d CPU workers", o.workers);
    printf("bench_memory: GPT V=%lld T=%lld C=%lld L=%lld NH=%lld, batch %d, AdamW, "
           "%s, chunks of %g MiB\n",
           (long long)m->vocab, (long long)m->context, (long long)m->channels,
           (long long)m->layers, (long long)m->heads, o.batch, where, o.chunk_mb);
    printf("training state %.1f MiB = model state %.1f MiB (%lld parameters x 16 B: "
           "values, gradients, AdamW m, v) + activations %.1f MiB (the batch's "
           "activations and inputs, and their gradients)\n",
           mib((double)state), mib((double)model), (long long)params, mib((double)acts));

    char tmpdir[64] = "";
    const char *dir = o.offload_dir;
    if (!dir) {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/pl_bench_memory_XXXXXX");
        if (!mkdtemp(tmpdir)) {
            perror("bench_memory: mkdtemp");
            return 1;
        }
        dir = tmpdir;
    }
    printf("%s %s; %d warm-up steps, median of %d alternating repetitions x %d timed steps\n\n",
           o.cuda ? "compute tier: GPU memory; below it: host RAM (no disk), not" : "disk tier:",
           o.cuda ? "limited" : dir, o.warmup, o.reps, o.steps);

    config configs[MAX_CONFIGS];
    int n = 0;
    configs[n++] = (config){.name = "unlimited"};
    /* Unbudgeted, recomputing every layer: its activation peak and step
     * time against the unlimited run's. */
    configs[n++] = (config){.name = "full", .recompute = PL_RECOMPUTE_FULL};
    configs[n++] = (config){.name = "selective", .recompute = PL_RECOMPUTE_SELECTIVE};
    for (int f = 0; f < o.n_fractions; f++) {
        int64_t mb = (int64_t)floor(o.fractions[f] * (double)state / 1048576.0);
        if (mb < 1) mb = 1;
        /* static and auto placement keeping every activation, auto with
         * every layer recomputed, auto with the planner's choice
         * (PL_RECOMPUTE_AUTO), and on GPUs the cpu preset. */
        static const char *const policies[] = {"static", "auto", "auto", "auto", "cpu"};
        static const char *const suffix[] = {"", "", "+full", "+plan", ""};
        static const pl_recompute_granularity rcs[] = {PL_RECOMPUTE_NONE, PL_RECOMPUTE_NONE,
                                                       PL_RECOMPUTE_FULL, PL_RECOMPUTE_AUTO,
                                                       PL_RECOMPUTE_NONE};
        for (int k = 0; k < (o.cuda ? 5 : 4); k++) {
            config *c = &configs[n++];
            *c = (config){.policy = policies[k], .fraction = o.fractions[f], .budget_mb = mb,
                          .recompute = rcs[k]};
            snprintf(c->name, sizeof c->name, "%s%s 1/%.3g", policies[k], suffix[k],
                     1.0 / o.fractions[f]);
        }
    }
    /* Selective recomputation pays where attention's T^2 tensors dominate:
     * the same tokens per step at a long context, unbudgeted, kept against
     * selective (last, so the rows above keep their indices). */
    int n_long = 0;
    if (o.long_context > 0 && o.long_context != (int)m->context) {
        int b = (int)((int64_t)o.batch * m->context / o.long_context);
        if (b < 1) b = 1;
        configs[n] = (config){.context = o.long_context, .batch = b, .base = n};
        snprintf(configs[n].name, sizeof configs[n].name, "unlimited T%d", o.long_context);
        n++;
        configs[n] = (config){.recompute = PL_RECOMPUTE_SELECTIVE, .context = o.long_context,
                              .batch = b, .base = n - 1};
        snprintf(configs[n].name, sizeof configs[n].name, "selective T%d", o.long_context);
        n++;
        n_long = 2;
    }

    result res[MAX_CONFIGS];
    printf("%-15s %10s %9s %9s %7s %10s %8s %7s %11s %10s %10s\n", "config", "budget",
           "ms/step", "tokens/s", "vs unl.", "MiB moved", "evicts", "hits", "peak comp.",
           o.cuda ? "peak host" : "peak disk", "act. peak");
    /* Repetitions alternate: every configuration once (a child process
     * each, one timed repetition), then again, so that a change in the
     * machine's load during the run falls on every row alike; the median
     * of each row's repetitions is shown. */
    static double rep_ms[MAX_CONFIGS][MAX_REPS];
    bench_options one = o;
    one.reps = 1;
    for (int rep = 0; rep < o.reps; rep++)
        for (int k = 0; k < n; k++) {
            char sub[512];
            snprintf(sub, sizeof sub, "%s/run%d", dir, k); /* a fresh disk tier per run */
            if (mkdir(sub, 0700) != 0 && errno != EEXIST) {
                perror("bench_memory: mkdir");
                return 1;
            }
            bench_options oc = one;
            if (configs[k].context) {
                oc.cfg.context = configs[k].context;
                oc.batch = configs[k].batch;
            }
            result r1;
            in_child(&oc, &configs[k], sub, &r1);
            nftw(sub, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
            merge_rep(&res[k], &r1, rep, rep_ms[k]);
            if (rep + 1 == o.reps && res[k].ok) res[k].ms_per_step = bench_median(rep_ms[k], o.reps);
        }
    for (int k = 0; k < n; k++) {
        const config *c = &configs[k];
        result *r = &res[k];
        char budget[32];
        if (c->policy)
            snprintf(budget, sizeof budget, "%lld MiB", (long long)c->budget_mb);
        else
            snprintf(budget, sizeof budget, "none");
        if (!r->ok) {
            printf("%-15s %10s failed: %s\n", c->name, budget, r->error);
            continue;
        }
        double tps = c->context ? (double)c->batch * c->context / (r->ms_per_step / 1e3)
                                : (double)o.batch * (double)m->context / (r->ms_per_step / 1e3);
        double rel = res[c->base].ok ? res[c->base].ms_per_step / r->ms_per_step : NAN;
        if (c->policy)
            printf("%-15s %10s %9.1f %9.0f %6.0f%% %10.1f %8.1f %7.1f %9.1f M %8.1f M "
                   "%8.1f M\n",
                   c->name, budget, r->ms_per_step, tps, 100 * rel, mib(r->moved),
                   r->evictions, r->hits, mib((double)r->peak_compute),
                   mib((double)r->peak_host), mib((double)r->act_peak));
        else
            printf("%-15s %10s %9.1f %9.0f %6.0f%% %10s %8s %7s %9.1f M* %7s %8.1f M\n",
                   c->name, budget, r->ms_per_step, tps, 100 * rel, "-", "-", "-",
                   mib((double)r->peak_compute), "-", mib((double)r->act_peak));
        fflush(stdout);
    }
    printf("(* unlimited: what StarPU holds on the compute tier, the activations; its "
           "model state is in host buffers StarPU does not count)\n");
    printf("(moved, evictions, prefetch hits: per iteration; peaks: maxima over the timed "
           "iterations)\n");
    /* What the budgets hold in fact: chunks are padded to their size. */
    if (res[0].ok)
        printf("(model state in chunks of %g MiB: %.1f MiB with their padding, against %.1f "
               "MiB of parameters' state)\n", o.chunk_mb, mib((double)res[0].chunked_state),
               mib((double)model));
    for (int k = 0; k < n; k++) /* the planner's choices, as the engine prints them */
        if (res[k].ok && res[k].plan[0]) {
            printf("%s:", configs[k].name);
            for (const char *l = res[k].plan; *l;) {
                const char *nl = strchr(l, '\n');
                int len = nl ? (int)(nl - l) : (int)strlen(l);
                printf(" %.*s%s", len, l, nl ? ";" : "");
                l += len + (nl ? 1 : 0);
            }
            printf("\n");
        }
    printf("\n");

    bool same = true;
    for (int k = 1; k < n; k++) {
        const result *b = &res[configs[k].base];
        if (b->ok && res[k].ok && memcmp(&res[k].last_loss, &b->last_loss,
                                         sizeof b->last_loss) != 0) {
            same = false;
            printf("losses differ: %s %.9g vs %s %.9g\n", configs[k].name, res[k].last_loss,
                   configs[configs[k].base].name, b->last_loss);
        }
    }
    printf("same last loss in every run (bitwise): %s (%.9g)\n", same ? "yes" : "NO",
           res[0].last_loss);

    /* Targets, at the first fraction. */
    const result *st = &res[3], *au = &res[4];
    if (res[0].ok && st->ok && au->ok) {
        double rel = res[0].ms_per_step / au->ms_per_step;
        printf("target: auto at 1/%.3g keeps >= %.0f%% of unlimited throughput: %.0f%% "
               "-> %s\n",
               1.0 / o.fractions[0], 100 * TARGET_THROUGHPUT, 100 * rel,
               rel >= TARGET_THROUGHPUT ? "met" : "NOT met");
        printf("target: auto at 1/%.3g moves fewer bytes than static: %.1f vs %.1f MiB per "
               "iteration -> %s\n",
               1.0 / o.fractions[0], mib(au->moved), mib(st->moved),
               au->moved < st->moved ? "met" : "NOT met");
    } else {
        printf("targets: not evaluated (a run failed)\n");
    }
    /* The machine-readable summary: throughput fractions of unlimited
     * under each budget (auto placement alone, and with every layer
     * recomputed), and the unbudgeted recomputing runs' activation peak
     * and step time against the unlimited run's. */
    printf("result");
    static const char *const frac_keys[] = {"quarter", "eighth", "sixteenth"};
    /* The largest state-to-budget ratio at which auto + plan keeps half
     * of the unlimited throughput (the "larger GPT" figure). */
    double largest_half = 0;
    for (int f = 0; f < o.n_fractions; f++) {
        int per = o.cuda ? 5 : 4;
        const result *pl = &res[3 + per * f + 3];
        if (res[0].ok && pl->ok && res[0].ms_per_step / pl->ms_per_step >= 0.5 &&
            1.0 / o.fractions[f] > largest_half)
            largest_half = 1.0 / o.fractions[f];
        char other[32];
        const char *key = NULL;
        for (int q = 0; q < 3; q++)
            if (fabs(o.fractions[f] - 1.0 / (4 << q)) < 1e-9) key = frac_keys[q];
        if (!key) { /* any other fraction: auto_1_<state/budget> */
            snprintf(other, sizeof other, "1_%.3g", 1.0 / o.fractions[f]);
            key = other;
        }
        const result *keep = &res[3 + per * f + 1], *full = &res[3 + per * f + 2],
                     *plan = &res[3 + per * f + 3];
        const char *names[] = {"auto", "auto_keep", "auto_full"};
        const result *rs[] = {plan, keep, full};
        for (int q = 0; q < 3; q++)
            if (res[0].ok && rs[q]->ok)
                printf(" %s_%s=%.3f", names[q], key, res[0].ms_per_step / rs[q]->ms_per_step);
    }
    static const char *const rc_keys[] = {"full", "selective"};
    for (int k = 0; k < 2; k++) {
        const result *r = &res[1 + k];
        if (!res[0].ok || !r->ok || r->act_peak <= 0) continue;
        printf(" %s_act_peak_ratio=%.3f %s_time_ratio=%.3f", rc_keys[k],
               (double)res[0].act_peak / (double)r->act_peak, rc_keys[k],
               r->ms_per_step / res[0].ms_per_step);
    }
    if (n_long) {
        const result *u = &res[n - 2], *sel = &res[n - 1];
        if (u->ok && sel->ok && sel->act_peak > 0)
            printf(" selective_long_context=%d selective_long_act_peak_ratio=%.3f "
                   "selective_long_time_ratio=%.3f",
                   o.long_context, (double)u->act_peak / (double)sel->act_peak,
                   sel->ms_per_step / u->ms_per_step);
    }
    printf(" largest_ratio_half_throughput=%.3g same_losses=%d\n", largest_half, same ? 1 : 0);
    if (*tmpdir) nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    for (int k = 0; k < n; k++)
        if (!res[k].ok) return 1;
    return 0;
}
