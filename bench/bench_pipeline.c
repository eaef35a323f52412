/* bench_pipeline: the pipeline schedules on a small GPT, measured against
 * their theory.
 *
 * Model: GPT V=256, T=64, C=256, L=4, NH=4 (options change T, C, L), batch
 * 16, AdamW, fixed pseudo-random tokens. Runtime: 2 StarPU CPU workers
 * (--workers), profiling on. For each schedule — none (m tiles), 1F1B
 * (p=2, m=8), interleaved (p=2, v=2, m=8), ZB-H1 (p=2, m=8), ZB-V (p=2,
 * v=2 in a V, m=8), and none
 * again with the engine's default tiles (one per worker: StarPU costs
 * ~10 us per task on a worker, so fewer, larger tasks idle less) — a fresh graph
 * and engine with record_tasks, `warmup` untimed iterations (at least 2:
 * under the engine's default measured stage balance the second training
 * step is timed and the stages recut before the third), then `steps`
 * timed ones. An iteration is pl_engine_train_step (forward, backward,
 * optimizer) plus the wait for its last task, the full wall time of a step.
 *
 * Printed per schedule:
 *   - iteration time: median over the timed iterations (ms), tokens/s;
 *   - the stage cut in use (blocks -> parts) and each stage's busy time;
 *   - measured bubble per stage (pipelines) or per worker (none): over one
 *     iteration's F, L, B and W tasks (optimizer excluded), window = from
 *     the first start to the last end of any such task (all stages), busy
 *     = the stage's own task time, bubble = (window − busy) / busy; median
 *     over the timed iterations. The busiest (bottleneck) stage is the one
 *     the theory describes: a lighter stage also waits for the heavier;
 *   - theory: pl_engine_theoretical_bubble — (p−1)/m for 1F1B, (p−1)/(v·m)
 *     interleaved, and for ZB-H1 the paper's (p−1)(F+B−W)/(m(F+B+W)) with
 *     the last step's measured mean F, B and W item times (printed); for
 *     ZB-V its lists run with those times;
 *   - peak live activation bytes per stage: a (microbatch, chunk) holds its
 *     activations on a stage from the start of its first forward task there
 *     to the end of its last backward (B or W) task; each op keeps its
 *     output (and the tensor it saves for backward) for the microbatch's
 *     samples; the peak over the iteration of the live sum, maximum over
 *     the timed iterations; also in microbatches' worth of the stage's
 *     activations (with v chunks, a microbatch's worth is all its chunks');
 *   - scheduler overhead: the increase of pl_engine_sched_overhead_ns
 *     (time spent in the policy's push/pop, summed over threads) across
 *     the timed iterations, over their total wall time.
 * Then a table and the targets as PASS/MISS: non-pipelined worker
 * idle <= 2 %; 1F1B's bottleneck stage within 10 % of theory, interleaved's
 * within 15 % (and, for 1F1B, the model of this engine's 1F1B, whose W's
 * run apart from B: (p−1)(F+B)/(m(F+B+W)), and what it makes the best
 * ZB-H1/1F1B ratio without task gaps: (F+B−W)/(F+B));
 * ZB-H1's bottleneck bubble <= 0.5 x 1F1B's, with every
 * stage's peak activations within 1F1B's peak of p microbatches (the
 * paper's bound: 1F1B holds p on stage 0, fewer on later stages, and
 * ZB-H1's later stages spend that headroom on deferred W's); scheduler
 * overhead < 1 %; ZB-V's bottleneck bubble <= 0.5 x interleaved's and
 * within 15 % of its theory, its stages within 1F1B's peak activations;
 * the same losses under every schedule. A last line, `result
 * zbv_step_bubble= interleaved_step_bubble= zbh1_step_bubble=
 * onef1b_step_bubble=`, gives each schedule's bottleneck bubble.
 *
 * Last, with two or more workers: 1F1B on one stage (p = 1) served by one
 * worker and by two (pl_engine_options.workers_per_stage), side by side:
 * iteration time and the ratio, what a stage's second worker buys by
 * running the next item's tasks beside the current one's where the data
 * allows (the same losses).
 *
 * Timings depend on what else runs on the machine: a busy machine shows
 * up as extra idle time (a worker descheduled by the OS looks like a
 * bubble). Run it on a quiet machine for figures worth comparing.
 *
 * Usage: bench_pipeline [--steps N] [--warmup N] [--batch N] [--layers N]
 *                       [--channels N] [--context N] [--microbatches N]
 *                       [--stages N] [--chunks N] [--workers N]
 *                       [--partition measured|flops] [--fuse-tasks on|off]
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

enum { VOCAB = 256, HEADS = 4, MAX_STAGES = 16, MAX_BLOCKS = 512 };

typedef struct bench_options {
    int steps, warmup, batch, layers, channels, context, microbatches, stages,
        chunks, workers;
    int workers_per_stage; /* pl_engine_options.workers_per_stage (0: all) */
    bool measured_partition;
    bool fuse_tasks;
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
            "  --warmup N        untimed iterations first, >= 2 (default 3)\n"
            "  --batch N         samples per step (default 16)\n"
            "  --layers N        transformer layers L (default 4)\n"
            "  --channels N      channels C (default 256; a multiple of 4 heads)\n"
            "  --context N       context T (default 64)\n"
            "  --microbatches N  microbatches m = tiles (default 8)\n"
            "  --stages N        pipeline stages p (default 2)\n"
            "  --chunks N        model chunks v of the interleaved schedule (default 2)\n"
            "  --workers N       StarPU CPU workers (default 2; at least p)\n"
            "  --partition P     measured: the engine's default stage balance, on the\n"
            "                    block times of its second step; flops: on FLOPs\n"
            "  --fuse-tasks B    on: the engine's default, one StarPU task per item on\n"
            "                    a stage (per block and kind when non-pipelined); off:\n"
            "                    one per op\n"
            "  -h, --help        this help\n");
}

/* text as an integer in [lo, hi], reporting a bad one on stderr. */
static bool parse_int(const char *opt, const char *text, int lo, int hi, int *out) {
    return bench_parse_int_opt("bench_pipeline", opt, text, lo, hi, out);
}

/* 0 on success, 1 on a bad option, -1 after --help. */
static int parse_options(int argc, char **argv, bench_options *o) {
    enum { OPT_STEPS = 256, OPT_WARMUP, OPT_BATCH, OPT_LAYERS, OPT_CHANNELS,
           OPT_CONTEXT, OPT_MICRO, OPT_STAGES, OPT_CHUNKS, OPT_WORKERS, OPT_PARTITION,
           OPT_FUSE };
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
        {"fuse-tasks", required_argument, NULL, OPT_FUSE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (bench_options){.steps = 10, .warmup = 3, .batch = 16, .layers = 4,
                         .channels = 256, .context = 64, .microbatches = 8,
                         .stages = 2, .chunks = 2, .workers = 2,
                         .measured_partition = true, .fuse_tasks = true};
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        bool ok = true;
        switch (c) {
        case OPT_STEPS: ok = parse_int("--steps", optarg, 1, 100000, &o->steps); break;
        case OPT_WARMUP: ok = parse_int("--warmup", optarg, 2, 100000, &o->warmup); break;
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
        case OPT_FUSE:
            if (strcmp(optarg, "on") == 0) o->fuse_tasks = true;
            else if (strcmp(optarg, "off") == 0) o->fuse_tasks = false;
            else {
                fprintf(stderr, "bench_pipeline: --fuse-tasks: '%s' is neither 'on' nor "
                                "'off'\n", optarg);
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

/* none (m tiles), 1F1B, interleaved, ZB-H1, ZB-V, none (default tiles) */
enum { N_SCHEDULES = 6, ROW_1F1B = 1, ROW_INTERLEAVED, ROW_ZBH1, ROW_ZBV, ROW_NONE_DEFAULT };

typedef struct sched_result {
    const char *name;
    bool ran;
    int n_stages;                  /* stages (or workers for none) reported */
    int stages;                    /* p */
    int microbatches;              /* m */
    double median_ms, tokens_per_s, overhead_pct, theory;
    pl_item_times items;           /* last step's mean F/B/W item (us) */
    double bubble[MAX_STAGES];     /* median measured bubble per stage */
    double busy_ms[MAX_STAGES];    /* median busy time per stage */
    double peak_act[MAX_STAGES];   /* peak live activation bytes per stage */
    double p_mb_act[MAX_STAGES];   /* p microbatches' activation bytes */
    double window_ms;              /* median F/L/B/W window */
    double first_loss, last_loss;
    int n_blocks, n_parts;
    int block_part[MAX_BLOCKS];    /* the cut in use at the end */
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
        if (r->phase == 'O' || r->phase == 'C') continue;
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

/* Activation bytes per sample of each block: every op's output and the
 * tensor it saves for its backward, kept from its forward to its
 * backward. */
static void block_activation_bytes(const pl_graph_t *g, double *bytes) {
    for (int b = 0; b < MAX_BLOCKS; b++) bytes[b] = 0.0;
    for (int op = 0; op < pl_graph_num_ops(g); op++) {
        pl_op_info o;
        if (pl_graph_op_info(g, op, &o) != PL_STATUS_OK || o.block >= MAX_BLOCKS) continue;
        bytes[o.block] += 4.0 * (double)pl_tensor_numel(o.output);
        if (o.saved) bytes[o.block] += 4.0 * (double)pl_tensor_numel(o.saved);
    }
}

typedef struct live_event {
    double t, bytes; /* +bytes at a first forward, -bytes at a last backward */
} live_event;

static int cmp_live(const void *a, const void *b) {
    const live_event *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return (x->bytes > y->bytes) - (x->bytes < y->bytes); /* releases first */
}

/* Peak live activation bytes of each stage in one iteration's records:
 * (microbatch, chunk) is live on its stage from its first F/L task's
 * start to its last B/W task's end, holding `part_bytes` of its part per
 * sample times the microbatch's samples. */
static void peak_activations(const pl_task_record *rec, int n, const pl_schedule_def *def,
                             int p, int v, int m, const double *part_bytes,
                             double samples_per_mb, double *peak) {
    enum { MAX_ITEMS = 64 * 64 };
    static double first[MAX_STAGES][MAX_ITEMS], last[MAX_STAGES][MAX_ITEMS];
    for (int s = 0; s < p; s++)
        for (int k = 0; k < MAX_ITEMS; k++) first[s][k] = INFINITY, last[s][k] = -INFINITY;
    for (int i = 0; i < n; i++) {
        const pl_task_record *r = &rec[i];
        if (r->stage < 0 || r->stage >= p || r->microbatch < 0 || r->chunk < 0) continue;
        int k = r->chunk * m + r->microbatch;
        if (k >= MAX_ITEMS || !strchr("FLBW", r->phase)) continue;
        if ((r->phase == 'F' || r->phase == 'L') && r->start_us < first[r->stage][k])
            first[r->stage][k] = r->start_us;
        if (r->end_us > last[r->stage][k]) last[r->stage][k] = r->end_us;
    }
    live_event *ev = malloc(2 * MAX_ITEMS * sizeof *ev);
    for (int s = 0; s < p && ev; s++) {
        int ne = 0;
        for (int k = 0; k < MAX_ITEMS; k++) {
            if (!isfinite(first[s][k])) continue;
            double bytes = part_bytes[pl_schedule_part(def, p, v, s, k / m)] * samples_per_mb;
            ev[ne++] = (live_event){first[s][k], bytes};
            ev[ne++] = (live_event){last[s][k], -bytes};
        }
        qsort(ev, ne, sizeof *ev, cmp_live);
        double live = 0.0, top = 0.0;
        for (int i = 0; i < ne; i++) {
            live += ev[i].bytes;
            if (live > top) top = live;
        }
        if (top > peak[s]) peak[s] = top;
    }
    free(ev);
}

/* tiles: the non-pipelined run's (0: the engine's default, one per
 * worker); pipelines run m microbatches. def: a schedule found by name
 * (ZB-V), used instead of kind. */
static sched_result run_schedule(pl_runtime_t *rt, const bench_options *o,
                                 pl_schedule_kind kind, const pl_schedule_def *def,
                                 const char *name, int tiles, const int32_t *tokens,
                                 const int32_t *targets) {
    bool piped = kind != PL_SCHEDULE_NONE || def;
    sched_result res = {.name = name, .stages = piped ? o->stages : 1,
                        .microbatches = o->microbatches};
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
    int p = piped ? o->stages : 1;
    int v = kind == PL_SCHEDULE_INTERLEAVED ? o->chunks : def ? 2 : 1; /* ZB-V: 2 */
    if (!def) def = piped ? pl_schedule_find(kind == PL_SCHEDULE_1F1B          ? "1f1b"
                                             : kind == PL_SCHEDULE_INTERLEAVED ? "interleaved"
                                                                               : "zb-h1")
                          : NULL;
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = o->batch;
    eo.tiles = piped ? o->microbatches : tiles;
    eo.schedule_def = def;
    eo.stages = piped ? p : 0;
    eo.model_chunks = v;
    eo.fuse_tasks = o->fuse_tasks;
    eo.workers_per_stage = o->workers_per_stage;
    eo.stage_balance = o->measured_partition ? PL_STAGE_BALANCE_MEASURED
                                             : PL_STAGE_BALANCE_FLOPS;
    eo.record_tasks = true;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    if (!e) {
        fprintf(stderr, "bench_pipeline: %s: %s\n", name, pl_last_error());
        pl_graph_free(g);
        return res;
    }
    double block_bytes[MAX_BLOCKS], part_bytes[MAX_STAGES * 64] = {0};
    block_activation_bytes(g, block_bytes);
    const void *data[2] = {tokens, targets};
    pl_batch b = {.size = o->batch, .data = data};
    pl_step_result r;
    int n_iter = o->warmup + o->steps;
    double *times = calloc((size_t)o->steps, sizeof *times);
    double *windows = calloc((size_t)o->steps, sizeof *windows);
    double (*bubbles)[MAX_STAGES] = calloc((size_t)o->steps, sizeof *bubbles);
    double (*busy)[MAX_STAGES] = calloc((size_t)o->steps, sizeof *busy);
    uint64_t ov0 = 0;
    double wall = 0.0;
    bool ok = times && windows && bubbles && busy;
    for (int it = 0; ok && it < n_iter; it++) {
        bool timed = it >= o->warmup;
        if (it == o->warmup) {
            ov0 = pl_engine_sched_overhead_ns(e);
            /* The cut is final by now (the measured balance recut before
             * the third step): each part's activation bytes under it. */
            res.n_parts = pl_engine_block_parts(e, res.block_part);
            for (int bl = 0; bl < res.n_blocks; bl++)
                part_bytes[res.block_part[bl]] += block_bytes[bl];
            for (int s = 0; s < p; s++)
                for (int c = 0; c < v; c++)
                    res.p_mb_act[s] += p * part_bytes[pl_schedule_part(def, p, v, s, c)] *
                                       o->batch / o->microbatches;
        }
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
        int ns = iteration_bubbles(rec, n, !piped, bubbles[k], busy[k], &windows[k]);
        if (ns > res.n_stages) res.n_stages = ns;
        if (piped || tiles == o->microbatches)
            peak_activations(rec, n, def, p, v, o->microbatches, part_bytes,
                             (double)o->batch / o->microbatches, res.peak_act);
    }
    if (ok) {
        uint64_t ov = pl_engine_sched_overhead_ns(e) - ov0;
        res.ran = true;
        res.median_ms = 1e3 * bench_median(times, o->steps);
        res.tokens_per_s = (double)o->batch * o->context / (res.median_ms * 1e-3);
        res.overhead_pct = 100.0 * (double)ov * 1e-9 / wall;
        res.theory = pl_engine_theoretical_bubble(e);
        pl_engine_item_times(e, &res.items);
        res.window_ms = 1e-3 * bench_median(windows, o->steps);
        double col[o->steps];
        for (int s = 0; s < res.n_stages; s++) {
            for (int k = 0; k < o->steps; k++) col[k] = bubbles[k][s];
            res.bubble[s] = bench_median(col, o->steps);
            for (int k = 0; k < o->steps; k++) col[k] = busy[k][s];
            res.busy_ms[s] = 1e-3 * bench_median(col, o->steps);
        }
    }
    free(times);
    free(windows);
    free(bubbles);
    free(busy);
    pl_engine_free(e);
    pl_graph_free(g);
    return res;
}

/* The busiest stage: the one the theory (equal stages) describes. */
static int bottleneck(const sched_result *r) {
    int b = 0;
    for (int s = 1; s < r->n_stages; s++)
        if (r->busy_ms[s] > r->busy_ms[b]) b = s;
    return b;
}

static double mib(double bytes) { return bytes / 1048576.0; }

static void print_result(const sched_result *r, bool piped) {
    bool zbv = strcmp(r->name, "zbv") == 0;
    if (!r->ran) {
        printf("%-12s failed (see above)\n", r->name);
        return;
    }
    printf("%-12s iteration %7.1f ms (median)  %7.0f tokens/s  sched overhead %.3f%%  "
           "loss %.4f -> %.4f\n", r->name, r->median_ms, r->tokens_per_s, r->overhead_pct,
           r->first_loss, r->last_loss);
    if (piped) {
        printf("    blocks -> parts:");
        for (int bl = 0; bl < r->n_blocks; bl++) printf(" %d", r->block_part[bl]);
        printf("   (%s)\n", zbv ? "ZB-V's V: stage s holds parts s and 2p-1-s"
                               : "part k = stage k mod p, chunk k / p");
        printf("    mean item F %.2f ms, B %.2f ms, W %.2f ms\n", r->items.f / 1e3,
               r->items.b / 1e3, r->items.w / 1e3);
    }
    double lo = INFINITY, hi = 0.0;
    for (int s = 0; s < r->n_stages; s++) {
        if (r->busy_ms[s] < lo) lo = r->busy_ms[s];
        if (r->busy_ms[s] > hi) hi = r->busy_ms[s];
    }
    printf("    F/L/B/W window %.1f ms, stage imbalance %.1f%%\n", r->window_ms,
           100.0 * (hi / lo - 1.0));
    for (int s = 0; s < r->n_stages; s++) {
        if (!piped) {
            printf("    worker %d: busy %6.1f ms  idle %.3f (theory 0)\n", s, r->busy_ms[s],
                   r->bubble[s]);
            continue;
        }
        printf("    stage %d:  busy %6.1f ms  bubble %.3f  theory %.3f  ratio %.2f  peak "
               "activations %.2f MiB (%.2f microbatches)%s\n", s, r->busy_ms[s],
               r->bubble[s], r->theory, r->bubble[s] / r->theory, mib(r->peak_act[s]),
               r->p_mb_act[s] > 0 ? r->peak_act[s] / r->p_mb_act[s] * r->stages : 0.0,
               s == bottleneck(r) ? "  (bottleneck)" : "");
    }
}

static const char *verdict(bool ok) { return ok ? "PASS" : "MISS"; }

static void print_table(const sched_result *res, const bool *piped) {
    printf("\n| schedule | iteration ms | bottleneck bubble | theory | ratio | other "
           "stage | peak activations / stage (MiB) | sched overhead |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (int i = 0; i < N_SCHEDULES; i++) {
        const sched_result *r = &res[i];
        if (!r->ran) continue;
        int b = bottleneck(r);
        printf("| %s | %.1f | ", r->name, r->median_ms);
        if (!piped[i]) {
            double worst = 0.0;
            for (int s = 0; s < r->n_stages; s++) worst = r->bubble[s] > worst ? r->bubble[s] : worst;
            printf("%.3f idle, worst worker | 0 | — | — | —", worst);
        } else {
            printf("%.3f | %.3f | %.2f | ", r->bubble[b], r->theory, r->bubble[b] / r->theory);
            for (int s = 0, first = 1; s < r->n_stages; s++)
                if (s != b) printf("%s%.3f", first ? "" : ", ", r->bubble[s]), first = 0;
            printf(" | ");
            for (int s = 0; s < r->n_stages; s++)
                printf("%s%.2f", s ? ", " : "", mib(r->peak_act[s]));
        }
        printf(" | %.2f %% |\n", r->overhead_pct);
    }
}

static void print_targets(const sched_result *res) {
    const sched_result *f1b = &res[ROW_1F1B], *inter = &res[ROW_INTERLEAVED],
                       *zb = &res[ROW_ZBH1], *zv = &res[ROW_ZBV];
    printf("\ntargets:\n");
    for (int i = 0; i < N_SCHEDULES; i += ROW_NONE_DEFAULT) {
        const sched_result *r = &res[i];
        if (!r->ran) continue;
        double worst = 0.0;
        for (int s = 0; s < r->n_stages; s++)
            if (r->bubble[s] > worst) worst = r->bubble[s];
        printf("  %s: worst worker idle %.2f%% <= 2%%: %s\n", r->name, 100.0 * worst,
               verdict(worst <= 0.02));
    }
    /* The textbook's (p-1)/m counts a backward item as B and W together,
     * the stage before waiting for both. Pleiades' 1F1B passes the input
     * gradient on when B ends, and the stage's W's fill what it would
     * wait for: its last stage idles for (p-1) forwards at the start and (p-1)
     * input gradients at the end, (p-1)(F+B)/(m(F+B+W)) of its busy time.
     * Against that 1F1B, ZB-H1's (p-1)(F+B-W) is at best (F+B-W)/(F+B)
     * of its bubble, whatever the task gaps. */
    const pl_item_times *it = &f1b->items;
    double fbw = it->f + it->b + it->w;
    const struct { const sched_result *r; double tol; } near[2] = {{f1b, 0.10}, {inter, 0.15}};
    for (int i = 0; i < 2; i++) {
        const sched_result *r = near[i].r;
        if (!r->ran) continue;
        int b = bottleneck(r);
        double err = fabs(r->bubble[b] - r->theory) / r->theory;
        printf("  %s: bottleneck stage %d bubble %.3f within %.0f%% of theory %.3f "
               "(%.1f%% %s): %s\n", r->name, b, r->bubble[b], 100 * near[i].tol, r->theory,
               100.0 * err, r->bubble[b] < r->theory ? "below" : "above",
               verdict(err <= near[i].tol));
        if (r == f1b && fbw > 0) {
            double split = (double)(r->stages - 1) * (it->f + it->b) / (r->microbatches * fbw);
            printf("  (1f1b with W apart from B, as this engine runs it: (p-1)(F+B)/(m(F+B+W)) "
                   "= %.3f with its mean items; measured %.0f%% above)\n",
                   split, 100.0 * (r->bubble[b] / split - 1));
        }
    }
    if (zb->ran && f1b->ran) {
        double zbb = zb->bubble[bottleneck(zb)], fb = f1b->bubble[bottleneck(f1b)];
        printf("  zb-h1: bottleneck bubble %.3f <= 0.5 x 1f1b's %.3f: %s\n", zbb, fb,
               verdict(zbb <= 0.5 * fb));
        if (fbw > 0)
            printf("  (without task gaps, zb-h1 / this 1f1b = (F+B-W)/(F+B) = %.2f with 1f1b's "
                   "mean items; measured %.2f)\n",
                   (it->f + it->b - it->w) / (it->f + it->b), zbb / fb);
        /* The paper's bound: every stage at most 1F1B's peak, p
         * microbatches' activations (1F1B reaches it on stage 0; ZB-H1's
         * later stages use that headroom for their deferred W's). */
        bool mem = true;
        for (int s = 0; s < zb->n_stages; s++)
            mem = mem && zb->peak_act[s] <= zb->p_mb_act[s] * (1 + 1e-9);
        printf("  zb-h1: every stage's peak activations <= p microbatches' (1f1b's peak, "
               "on its stage 0): %s\n", verdict(mem));
    }
    /* ZB-V (the targets): its bottleneck bubble at most half
     * interleaved's, within 15 % of its theory (its lists run with the
     * measured mean item times), every stage's peak activations within
     * 1F1B's p microbatches'. */
    if (zv->ran && inter->ran) {
        double zvb = zv->bubble[bottleneck(zv)], ib = inter->bubble[bottleneck(inter)];
        printf("  zbv: bottleneck bubble %.3f <= 0.5 x interleaved's %.3f: %s\n", zvb, ib,
               verdict(zvb <= 0.5 * ib));
        double err = zv->theory > 0 ? fabs(zvb - zv->theory) / zv->theory : INFINITY;
        printf("  zbv: bottleneck bubble %.3f within 15%% of its theory %.3f from the measured "
               "items (%.1f%% %s): %s\n", zvb, zv->theory, 100.0 * err,
               zvb < zv->theory ? "below" : "above", verdict(err <= 0.15));
        bool mem = true;
        for (int s = 0; s < zv->n_stages; s++)
            mem = mem && zv->peak_act[s] <= zv->p_mb_act[s] * (1 + 1e-9);
        printf("  zbv: every stage's peak activations <= p microbatches' (1f1b's peak): %s\n",
               verdict(mem));
    }
    bool same = true;
    for (int i = 0; i < N_SCHEDULES; i++) {
        if (!res[i].ran) continue;
        printf("  %-12s scheduler overhead %.3f%% < 1%%: %s\n", res[i].name,
               res[i].overhead_pct, verdict(res[i].overhead_pct < 1.0));
        if (i < ROW_NONE_DEFAULT) same = same && res[i].last_loss == res[0].last_loss;
    }
    printf("  losses identical across schedules: %s\n", same ? "yes" : "NO");
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
           "%d warm-up + %d timed iterations per schedule; stage cut: %s; %s\n",
           pl_runtime_cpu_workers(rt), o.microbatches, o.stages, o.chunks, o.warmup,
           o.steps, o.measured_partition ? "the engine's measured balance (default)"
                                         : "FLOPs",
           o.fuse_tasks ? "fused op tasks (default)" : "one task per op");
    printf("  bubble per stage = (window - stage busy) / stage busy over one iteration's "
           "F/L/B/W tasks;\n  window = first start to last end of any of them (all "
           "stages); medians over the timed iterations;\n  none: per worker\n\n");

    /* The last run shows the per-task dispatch floor with the engine's
     * default tiles (one per worker): fewer, larger tasks. Its losses
     * differ in the last bits (other tile sums), so it is left out of the
     * equality check. */
    static const pl_schedule_kind kinds[N_SCHEDULES] = {
        PL_SCHEDULE_NONE, PL_SCHEDULE_1F1B, PL_SCHEDULE_INTERLEAVED, PL_SCHEDULE_ZB_H1,
        PL_SCHEDULE_NONE, PL_SCHEDULE_NONE};
    const bool piped[N_SCHEDULES] = {false, true, true, true, true, false};
    char none_default[32];
    snprintf(none_default, sizeof none_default, "none/%dtiles", pl_runtime_cpu_workers(rt));
    const char *const names[N_SCHEDULES] = {"none", "1f1b", "interleaved", "zb-h1", "zbv",
                                            none_default};
    sched_result res[N_SCHEDULES];
    for (int i = 0; i < N_SCHEDULES; i++) {
        res[i] = run_schedule(rt, &o, kinds[i], i == ROW_ZBV ? pl_schedule_find("zbv") : NULL,
                              names[i], i == 0 ? o.microbatches : 0, tokens, targets);
        print_result(&res[i], piped[i]);
    }
    print_table(res, piped);
    print_targets(res);
    /* One line for scripts: each schedule's step bubble (its bottleneck
     * stage's, as in the table). */
    printf("\nresult");
    static const struct { int row; const char *key; } keys[] = {
        {ROW_ZBV, "zbv"}, {ROW_INTERLEAVED, "interleaved"}, {ROW_ZBH1, "zbh1"},
        {ROW_1F1B, "onef1b"}};
    for (int k = 0; k < 4; k++) {
        const sched_result *r = &res[keys[k].row];
        if (r->ran) printf(" %s_step_bubble=%.4f", keys[k].key, r->bubble[bottleneck(r)]);
        else printf(" %s_step_bubble=nan", keys[k].key);
    }
    printf("\n");

    /* One stage, one worker against two. */
    if (pl_runtime_cpu_workers(rt) >= 2) {
        sched_result one_stage[2];
        for (int w = 0; w < 2; w++) {
            bench_options o1 = o;
            o1.stages = 1;
            o1.workers_per_stage = w + 1;
            one_stage[w] = run_schedule(rt, &o1, PL_SCHEDULE_1F1B, NULL,
                                        w ? "1f1b p=1 x2" : "1f1b p=1 x1", 0, tokens,
                                        targets);
        }
        printf("\nOne stage (1F1B, p = 1, m = %d) served by 1 and by 2 workers "
               "(workers_per_stage):\n", o.microbatches);
        for (int w = 0; w < 2; w++)
            if (one_stage[w].ran)
                printf("  %d worker%s: iteration %7.1f ms (median), %7.0f tokens/s, loss %.4f "
                       "-> %.4f\n", w + 1, w ? "s" : " ", one_stage[w].median_ms,
                       one_stage[w].tokens_per_s, one_stage[w].first_loss,
                       one_stage[w].last_loss);
            else
                printf("  %d worker%s: failed (see above)\n", w + 1, w ? "s" : "");
        if (one_stage[0].ran && one_stage[1].ran)
            printf("  2 workers / 1: %.2fx the tokens/s; losses %s\n",
                   one_stage[1].tokens_per_s / one_stage[0].tokens_per_s,
                   one_stage[0].last_loss == one_stage[1].last_loss ? "equal" : "DIFFER");
    }

    pl_runtime_free(rt);
    free(tokens);
    free(targets);
    for (int i = 0; i < N_SCHEDULES; i++)
        if (!res[i].ran) return 1;
    return 0;
}
