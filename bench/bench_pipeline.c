/* bench_pipeline: the pipeline schedules on a small GPT, measured against
 * their theory.
 *
 * Model: GPT V=256, T=64, C=256, L=4, NH=4 (options change T, C, L), batch
 * 16 (about 0.5 s per iteration on 2 cores), AdamW, fixed pseudo-random tokens. Runtime: 2 StarPU CPU workers
 * (--workers), profiling on. For each schedule — none (8 tiles), 1F1B (p=2,
 * m=8), interleaved (p=2, v=2, m=8) — a fresh graph and engine with
 * record_tasks, `warmup` untimed iterations, then `steps` timed ones. An
 * iteration is pl_engine_train_step (forward, backward, optimizer) plus the
 * wait for its last task (pl_engine_task_records waits), so it is the full
 * wall time of one training step.
 *
 * Printed per schedule:
 *   - iteration time: median over the timed iterations (ms), tokens/s =
 *     batch·T / median;
 *   - measured bubble per stage (pipelines) or per worker (none): over one
 *     iteration's F, L, B and W tasks (optimizer excluded), window = from
 *     the first start to the last end of any such task of the iteration
 *     (all stages), busy = sum of the durations of the stage's own tasks,
 *     bubble = (window − busy) / busy; the median over the timed
 *     iterations. Theory: pl_engine_theoretical_bubble ((p−1)/m for 1F1B,
 *     (p−1)/(v·m) interleaved; it is idle time over busy time per stage in
 *     the iteration's window), with the relative error |meas − theory| /
 *     theory;
 *   - scheduler overhead: the increase of pl_engine_sched_overhead_ns
 *     (time spent in the policy's push/pop, summed over threads) across
 *     the timed iterations, over their total wall time.
 * Targets (printed as PASS/MISS): every stage's measured bubble within 25%
 * of theory; interleaved's mean stage bubble below 1F1B's; overhead < 2%.
 *
 * The theory assumes stages of equal cost. The engine balances stages by a
 * FLOP count, which on a CPU misjudges the elementwise ops (GELU's tanh,
 * softmax, LayerNorm cost far more than their FLOPs), so by default
 * (--partition measured) the pipelines use a partition balanced on the
 * block costs measured in the non-pipelined run (each block's F/L/B/W task
 * time, median over its timed iterations), passed as layers_per_stage;
 * --partition flops keeps the engine's own. Each stage's busy time and the
 * imbalance (max busy / min busy - 1) are printed: a lighter stage also
 * idles while it waits for the heavier one, which the theory leaves out,
 * so the bottleneck (busiest) stage is the one to compare with the theory
 * (a separate target line). Tasks of tens of µs to a few ms also leave a
 * per-task dispatch gap (StarPU, callbacks, wake-ups) that counts as idle:
 * the non-pipelined run's per-worker "bubble" shows that floor.
 *
 * Timings depend on what else runs on the machine: a busy machine shows
 * up as extra idle time (a worker descheduled by the OS looks like a
 * bubble). Run it on a quiet machine for figures worth comparing.
 *
 * Usage: bench_pipeline [--steps N] [--warmup N] [--batch N] [--layers N]
 *                       [--channels N] [--context N] [--microbatches N]
 *                       [--stages N] [--chunks N] [--workers N]
 *                       [--partition measured|flops]
 */

#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pleiades.h>

#include "bench_util.h"

#include "graph/graph_internal.h" /* op -> block, for measured block costs */
#include "scheduling/pipeline.h"  /* pl_pipeline_partition */

enum { VOCAB = 256, HEADS = 4, MAX_STAGES = 16, MAX_BLOCKS = 512 };

typedef struct bench_options {
    int steps, warmup, batch, layers, channels, context, microbatches, stages,
        chunks, workers;
    bool measured_partition;
} bench_options;

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* ------------------------------------------------------------ options */

static void usage(FILE *f) {
    fprintf(f,
            "usage: bench_pipeline [options]\n"
            "  --steps N         timed iterations per schedule (default 10)\n"
            "  --warmup N        untimed iterations first (default 2)\n"
            "  --batch N         samples per step (default 16)\n"
            "  --layers N        transformer layers L (default 4)\n"
            "  --channels N      channels C (default 256; a multiple of 4 heads)\n"
            "  --context N       context T (default 64)\n"
            "  --microbatches N  microbatches m = tiles (default 8)\n"
            "  --stages N        pipeline stages p (default 2)\n"
            "  --chunks N        model chunks v of the interleaved schedule (default 2)\n"
            "  --workers N       StarPU CPU workers (default 2; at least p)\n"
            "  --partition P     measured: stages balanced on block times measured in\n"
            "                    the non-pipelined run (default); flops: the engine's\n"
            "                    own, balanced on FLOPs\n"
            "  -h, --help        this help\n");
}

/* text as an integer in [lo, hi], reporting a bad one on stderr. */
static bool parse_int(const char *opt, const char *text, int lo, int hi, int *out) {
    return bench_parse_int_opt("bench_pipeline", opt, text, lo, hi, out);
}

/* 0 on success, 1 on a bad option, -1 after --help. */
static int parse_options(int argc, char **argv, bench_options *o) {
    enum { OPT_STEPS = 256, OPT_WARMUP, OPT_BATCH, OPT_LAYERS, OPT_CHANNELS,
           OPT_CONTEXT, OPT_MICRO, OPT_STAGES, OPT_CHUNKS, OPT_WORKERS, OPT_PARTITION };
    static const struct option longopts[] = {
        {"steps", required_argument, NULL, OPT_STEPS},
        {"warmup", required_argument, NULL, OPT_WARMUP},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"layers", required_argument, NULL, OPT_LAYERS},
        {"channels", required_argument, NULL, OPT_CHANNELS},
        {"context", required_argument, NULL, OPT_CONTEXT},
        {"microbatches", required_argument, NULL, OPT_MICRO},
        {"stages", required_argument, NULL, OPT_STAGES},
        {"chunks", required_argument, NULL, OPT_CHUNKS},
        {"workers", required_argument, NULL, OPT_WORKERS},
        {"partition", required_argument, NULL, OPT_PARTITION},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (bench_options){.steps = 10, .warmup = 2, .batch = 16, .layers = 4,
                         .channels = 256, .context = 64, .microbatches = 8,
                         .stages = 2, .chunks = 2, .workers = 2,
                         .measured_partition = true};
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        bool ok = true;
        switch (c) {
        case OPT_STEPS: ok = parse_int("--steps", optarg, 1, 100000, &o->steps); break;
        case OPT_WARMUP: ok = parse_int("--warmup", optarg, 0, 100000, &o->warmup); break;
        case OPT_BATCH: ok = parse_int("--batch", optarg, 1, 4096, &o->batch); break;
        case OPT_LAYERS: ok = parse_int("--layers", optarg, 1, 256, &o->layers); break;
        case OPT_CHANNELS:
            ok = parse_int("--channels", optarg, HEADS, 8192, &o->channels);
            if (ok && o->channels % HEADS) {
                fprintf(stderr, "bench_pipeline: --channels %d is not a multiple of %d "
                                "heads\n", o->channels, HEADS);
                ok = false;
            }
            break;
        case OPT_CONTEXT: ok = parse_int("--context", optarg, 1, 8192, &o->context); break;
        case OPT_MICRO: ok = parse_int("--microbatches", optarg, 1, 64, &o->microbatches); break;
        case OPT_STAGES: ok = parse_int("--stages", optarg, 1, MAX_STAGES, &o->stages); break;
        case OPT_CHUNKS: ok = parse_int("--chunks", optarg, 2, 64, &o->chunks); break;
        case OPT_WORKERS: ok = parse_int("--workers", optarg, 1, 256, &o->workers); break;
        case OPT_PARTITION:
            if (strcmp(optarg, "measured") == 0) o->measured_partition = true;
            else if (strcmp(optarg, "flops") == 0) o->measured_partition = false;
            else {
                fprintf(stderr, "bench_pipeline: --partition: '%s' is neither 'measured' "
                                "nor 'flops'\n", optarg);
                ok = false;
            }
            break;
        case 'h': usage(stdout); return -1;
        default: usage(stderr); return 1;
        }
        if (!ok) return 1;
    }
    if (optind < argc) {
        fprintf(stderr, "bench_pipeline: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------ one schedule */

typedef struct sched_result {
    const char *name;
    bool ran;
    int n_stages;                  /* stages (or workers for none) reported */
    double median_ms, tokens_per_s, overhead_pct, theory;
    double bubble[MAX_STAGES];     /* median measured bubble per stage */
    double busy_ms[MAX_STAGES];    /* median busy time per stage */
    double window_ms;              /* median F/L/B/W window */
    double first_loss, last_loss;
    int n_blocks, n_parts;
    int block_part[MAX_BLOCKS];    /* the partition used */
    double block_ms[MAX_BLOCKS];   /* median measured time per block */
} sched_result;

/* Window, busy time and bubble of each stage (pipelines: by the records'
 * stage; none: by worker, ids mapped to 0..n-1) in one iteration's
 * records; returns the number of stages. */
static int iteration_bubbles(const pl_task_record *rec, int n, bool by_worker,
                             double *bubble, double *busy, double *window) {
    double lo = INFINITY, hi = -INFINITY;
    int workers[MAX_STAGES], n_workers = 0, n_stages = 0;
    for (int s = 0; s < MAX_STAGES; s++) busy[s] = 0.0;
    for (int i = 0; i < n; i++) {
        const pl_task_record *r = &rec[i];
        if (r->phase == 'O') continue;
        if (r->start_us < lo) lo = r->start_us;
        if (r->end_us > hi) hi = r->end_us;
        int s = r->stage;
        if (by_worker) {
            s = -1;
            for (int k = 0; k < n_workers; k++)
                if (workers[k] == r->worker) s = k;
            if (s < 0 && n_workers < MAX_STAGES) workers[s = n_workers++] = r->worker;
            if (s < 0) continue;
        }
        if (s < 0 || s >= MAX_STAGES) continue;
        busy[s] += r->end_us - r->start_us;
        if (s + 1 > n_stages) n_stages = s + 1;
    }
    *window = hi - lo;
    for (int s = 0; s < n_stages; s++)
        bubble[s] = busy[s] > 0 ? (*window - busy[s]) / busy[s] : NAN;
    return n_stages;
}

/* Adds each record's duration (F/L/B/W) to its op's block. */
static void block_times(const pl_graph_t *g, const pl_task_record *rec, int n,
                        double *block_us) {
    for (int i = 0; i < n; i++) {
        if (rec[i].phase == 'O') continue;
        for (int op = 0; op < g->n_ops; op++)
            if (strcmp(g->ops[op].name, rec[i].op) == 0) {
                if (g->ops[op].block < MAX_BLOCKS)
                    block_us[g->ops[op].block] += rec[i].end_us - rec[i].start_us;
                break;
            }
    }
}

/* counts: layers_per_stage for the pipelines, NULL = the engine's own. */
static sched_result run_schedule(pl_runtime_t *rt, const bench_options *o,
                                 pl_schedule_kind kind, const char *name,
                                 const int *counts, const int32_t *tokens,
                                 const int32_t *targets) {
    sched_result res = {.name = name};
    pl_graph_t *g = pl_graph_new(1);
    pl_gpt_config gc = {.vocab = VOCAB, .context = o->context, .channels = o->channels,
                        .layers = o->layers, .heads = HEADS};
    pl_gpt_model gm;
    if (!g || pl_gpt_build(g, &gc, &gm) != PL_STATUS_OK) {
        fprintf(stderr, "bench_pipeline: building the GPT: %s\n", pl_last_error());
        pl_graph_free(g);
        return res;
    }
    res.n_blocks = pl_graph_num_blocks(g);
    if (res.n_blocks > MAX_BLOCKS) {
        fprintf(stderr, "bench_pipeline: %d blocks, at most %d\n", res.n_blocks, MAX_BLOCKS);
        pl_graph_free(g);
        return res;
    }
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = o->batch;
    eo.tiles = o->microbatches;
    eo.schedule = kind;
    eo.stages = kind == PL_SCHEDULE_NONE ? 0 : o->stages;
    eo.model_chunks = kind == PL_SCHEDULE_INTERLEAVED ? o->chunks : 1;
    eo.layers_per_stage = kind == PL_SCHEDULE_NONE ? NULL : counts;
    eo.record_tasks = true;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    if (!e) {
        fprintf(stderr, "bench_pipeline: %s: %s\n", name, pl_last_error());
        pl_graph_free(g);
        return res;
    }
    res.n_parts = pl_engine_block_parts(e, res.block_part);
    const void *data[2] = {tokens, targets};
    pl_batch b = {.size = o->batch, .data = data};
    pl_step_result r;
    int n_iter = o->warmup + o->steps;
    double *times = calloc((size_t)o->steps, sizeof *times);
    double *windows = calloc((size_t)o->steps, sizeof *windows);
    double (*bubbles)[MAX_STAGES] = calloc((size_t)o->steps, sizeof *bubbles);
    double (*busy)[MAX_STAGES] = calloc((size_t)o->steps, sizeof *busy);
    double *blocks = calloc((size_t)o->steps * res.n_blocks, sizeof *blocks);
    uint64_t ov0 = 0;
    double wall = 0.0;
    bool ok = times && windows && bubbles && busy && blocks;
    for (int it = 0; ok && it < n_iter; it++) {
        bool timed = it >= o->warmup;
        if (it == o->warmup) ov0 = pl_engine_sched_overhead_ns(e);
        double t0 = bench_now_s();
        if (pl_engine_train_step(e, &b, &r) != PL_STATUS_OK) {
            fprintf(stderr, "bench_pipeline: %s step %d: %s\n", name, it, pl_last_error());
            ok = false;
            break;
        }
        const pl_task_record *rec;
        int n = pl_engine_task_records(e, &rec); /* waits for the step's last task */
        double dt = bench_now_s() - t0;
        if (it == 0) res.first_loss = r.loss;
        res.last_loss = r.loss;
        if (!timed) continue;
        int k = it - o->warmup;
        times[k] = dt;
        wall += dt;
        int ns = iteration_bubbles(rec, n, kind == PL_SCHEDULE_NONE, bubbles[k], busy[k],
                                   &windows[k]);
        if (ns > res.n_stages) res.n_stages = ns;
        block_times(g, rec, n, &blocks[(size_t)k * res.n_blocks]);
    }
    if (ok) {
        uint64_t ov = pl_engine_sched_overhead_ns(e) - ov0;
        res.ran = true;
        res.median_ms = 1e3 * bench_median(times, o->steps);
        res.tokens_per_s = (double)o->batch * o->context / (res.median_ms * 1e-3);
        res.overhead_pct = 100.0 * (double)ov * 1e-9 / wall;
        res.theory = pl_engine_theoretical_bubble(e);
        res.window_ms = 1e-3 * bench_median(windows, o->steps);
        double col[o->steps];
        for (int s = 0; s < res.n_stages; s++) {
            for (int k = 0; k < o->steps; k++) col[k] = bubbles[k][s];
            res.bubble[s] = bench_median(col, o->steps);
            for (int k = 0; k < o->steps; k++) col[k] = busy[k][s];
            res.busy_ms[s] = 1e-3 * bench_median(col, o->steps);
        }
        for (int bl = 0; bl < res.n_blocks; bl++) {
            for (int k = 0; k < o->steps; k++) col[k] = blocks[(size_t)k * res.n_blocks + bl];
            res.block_ms[bl] = 1e-3 * bench_median(col, o->steps);
        }
    }
    free(times);
    free(windows);
    free(bubbles);
    free(busy);
    free(blocks);
    pl_engine_free(e);
    pl_graph_free(g);
    return res;
}

static double mean_bubble(const sched_result *r) {
    double sum = 0.0;
    for (int s = 0; s < r->n_stages; s++) sum += r->bubble[s];
    return r->n_stages ? sum / r->n_stages : NAN;
}

/* Blocks per part balanced on the measured block times; false if the
 * partition cannot be made (then the engine's own is used). */
static bool measured_counts(const sched_result *none, int n_parts, int *counts) {
    int part[MAX_BLOCKS];
    if (n_parts > none->n_blocks ||
        pl_pipeline_partition(none->block_ms, none->n_blocks, n_parts, NULL, part) !=
            PL_STATUS_OK)
        return false;
    for (int k = 0; k < n_parts; k++) counts[k] = 0;
    for (int bl = 0; bl < none->n_blocks; bl++) counts[part[bl]]++;
    return true;
}

static void print_result(const sched_result *r, pl_schedule_kind kind) {
    if (!r->ran) {
        printf("%-12s failed (see above)\n", r->name);
        return;
    }
    printf("%-12s iteration %7.1f ms (median)  %7.0f tokens/s  sched overhead %.3f%%  "
           "loss %.4f -> %.4f\n", r->name, r->median_ms, r->tokens_per_s, r->overhead_pct,
           r->first_loss, r->last_loss);
    if (kind != PL_SCHEDULE_NONE) {
        printf("    blocks -> parts:");
        for (int bl = 0; bl < r->n_blocks; bl++) printf(" %d", r->block_part[bl]);
        printf("   (part k = stage k mod p, chunk k / p)\n");
    }
    double lo = INFINITY, hi = 0.0;
    for (int s = 0; s < r->n_stages; s++) {
        if (r->busy_ms[s] < lo) lo = r->busy_ms[s];
        if (r->busy_ms[s] > hi) hi = r->busy_ms[s];
    }
    printf("    F/L/B/W window %.1f ms, stage imbalance %.1f%%\n", r->window_ms,
           100.0 * (hi / lo - 1.0));
    for (int s = 0; s < r->n_stages; s++) {
        if (kind == PL_SCHEDULE_NONE) {
            printf("    worker %d: busy %6.1f ms  bubble %.3f (theory 0)\n", s, r->busy_ms[s],
                   r->bubble[s]);
            continue;
        }
        double err = fabs(r->bubble[s] - r->theory) / r->theory;
        printf("    stage %d:  busy %6.1f ms  bubble %.3f  theory %.3f  rel. error %6.1f%%  "
               "%s\n", s, r->busy_ms[s], r->bubble[s], r->theory, 100.0 * err,
               err <= 0.25 ? "PASS" : "MISS");
    }
}

int main(int argc, char **argv) {
    bench_options o;
    int rc = parse_options(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : 2;

    int64_t n_tok = (int64_t)o.batch * o.context;
    int32_t *tokens = malloc((size_t)n_tok * sizeof *tokens);
    int32_t *targets = malloc((size_t)n_tok * sizeof *targets);
    if (!tokens || !targets) {
        fprintf(stderr, "bench_pipeline: out of memory\n");
        return 1;
    }
    uint64_t seed = 2024;
    for (int64_t i = 0; i < o.batch; i++) {
        int32_t x = (int32_t)(splitmix(&seed) % VOCAB);
        for (int64_t t = 0; t < o.context; t++) {
            tokens[i * o.context + t] = x;
            x = (int32_t)((x + 1 + (int32_t)(splitmix(&seed) % 3)) % VOCAB);
            targets[i * o.context + t] = x;
        }
    }

    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = o.workers;
    ro.profiling = true;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) {
        fprintf(stderr, "bench_pipeline: %s\n", pl_last_error());
        return 1;
    }
    printf("bench_pipeline: GPT V=%d T=%d C=%d L=%d NH=%d, batch %d (%lld tokens), "
           "AdamW\n", VOCAB, o.context, o.channels, o.layers, HEADS, o.batch,
           (long long)n_tok);
    printf("  %d CPU workers, m=%d microbatches, p=%d stages, v=%d chunks (interleaved); "
           "%d warm-up + %d timed iterations per schedule; partition: %s\n",
           pl_runtime_cpu_workers(rt), o.microbatches, o.stages, o.chunks, o.warmup,
           o.steps, o.measured_partition ? "balanced on measured block times"
                                         : "the engine's (FLOPs)");
    printf("  bubble per stage = (window - stage busy) / stage busy over one iteration's "
           "F/L/B/W tasks;\n  window = first start to last end of any of them (all "
           "stages); medians over the timed iterations;\n  none: per worker\n\n");

    sched_result res[3];
    res[0] = run_schedule(rt, &o, PL_SCHEDULE_NONE, "none", NULL, tokens, targets);
    print_result(&res[0], PL_SCHEDULE_NONE);
    if (res[0].ran) {
        printf("    measured time per block (ms):");
        for (int bl = 0; bl < res[0].n_blocks; bl++) printf(" %.1f", res[0].block_ms[bl]);
        printf("\n");
    }
    int counts_1f1b[MAX_STAGES * 64], counts_inter[MAX_STAGES * 64];
    bool use_1f1b = o.measured_partition && res[0].ran && o.stages <= MAX_STAGES &&
                    measured_counts(&res[0], o.stages, counts_1f1b);
    bool use_inter = o.measured_partition && res[0].ran &&
                     o.stages * o.chunks <= MAX_STAGES * 64 &&
                     measured_counts(&res[0], o.stages * o.chunks, counts_inter);
    res[1] = run_schedule(rt, &o, PL_SCHEDULE_1F1B, "1f1b", use_1f1b ? counts_1f1b : NULL,
                          tokens, targets);
    print_result(&res[1], PL_SCHEDULE_1F1B);
    res[2] = run_schedule(rt, &o, PL_SCHEDULE_INTERLEAVED, "interleaved",
                          use_inter ? counts_inter : NULL, tokens, targets);
    print_result(&res[2], PL_SCHEDULE_INTERLEAVED);

    printf("\ntargets:\n");
    for (int i = 1; i < 3; i++) {
        if (!res[i].ran) continue;
        bool all = true;
        for (int s = 0; s < res[i].n_stages; s++)
            all = all && fabs(res[i].bubble[s] - res[i].theory) <= 0.25 * res[i].theory;
        printf("  %-12s measured bubble within 25%% of theory on every stage: %s\n",
               res[i].name, all ? "PASS" : "MISS");
    }
    for (int i = 1; i < 3; i++) {
        if (!res[i].ran || res[i].n_stages == 0) continue;
        int b = 0;
        for (int s = 1; s < res[i].n_stages; s++)
            if (res[i].busy_ms[s] > res[i].busy_ms[b]) b = s;
        double err = fabs(res[i].bubble[b] - res[i].theory) / res[i].theory;
        printf("  %-12s bottleneck stage %d: bubble %.3f within 25%% of theory %.3f "
               "(%.1f%%): %s\n", res[i].name, b, res[i].bubble[b], res[i].theory,
               100.0 * err, err <= 0.25 ? "PASS" : "MISS");
    }
    if (res[1].ran && res[2].ran)
        printf("  interleaved mean stage bubble %.3f < 1f1b's %.3f: %s\n",
               mean_bubble(&res[2]), mean_bubble(&res[1]),
               mean_bubble(&res[2]) < mean_bubble(&res[1]) ? "PASS" : "MISS");
    for (int i = 0; i < 3; i++)
        if (res[i].ran)
            printf("  %-12s scheduler overhead %.3f%% < 2%%: %s\n", res[i].name,
                   res[i].overhead_pct, res[i].overhead_pct < 2.0 ? "PASS" : "MISS");
    if (res[0].ran && res[1].ran && res[2].ran)
        printf("  losses identical across schedules: %s\n",
               res[0].last_loss == res[1].last_loss && res[0].last_loss == res[2].last_loss
                   ? "yes"
                   : "NO");

    pl_runtime_free(rt);
    free(tokens);
    free(targets);
    for (int i = 0; i < 3; i++)
        if (!res[i].ran) return 1;
    return 0;
}
