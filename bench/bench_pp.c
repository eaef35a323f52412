/* bench_pp: pipeline stages across processes against the same pipeline in
 * one process. The GPT of bench_pipeline (V=256, T=64, C=256, L=4, NH=4,
 * batch 16, AdamW, fixed pseudo-random tokens), p = 2 stages, m = 8
 * microbatches, under each schedule (1F1B, interleaved with v = 2,
 * ZB-H1): one process with 2 CPU workers (a worker per stage) against
 * pp = 2 ranks × 1 worker (mpirun -np 2; each rank also runs a
 * communication worker and StarPU-MPI's thread). --stage-workers W gives
 * each stage W workers instead (one process 2W, each rank W;
 * pl_engine_options.workers_per_stage): for machines with the cores.
 *
 * Per configuration: `warmup` untimed steps (at least 3: the stages are
 * recut on the times of step 2), then best of `reps` repetitions of
 * `steps` timed steps (each ended with a wait for all tasks). Bubble:
 * over the last step's F, L, B and W tasks of every stage (every rank's
 * records gathered on rank 0 on one clock: pl_engine_gather_task_records),
 * window = first start to last end, busy = the time at least one of the
 * stage's workers ran its tasks (with one worker, its task time), bubble
 * = (window − busy) / busy for the busiest stage (the bottleneck the
 * theory describes); theory = pl_engine_theoretical_bubble.
 *
 * Targets (issue 14): the 2-rank 1F1B bottleneck bubble within 15 % of
 * theory, and its throughput at least 0.95× the one-process 1F1B's.
 *
 * Usage: bench_pp [--steps N] [--warmup N] [--reps N] [--stage-workers W]
 * Each schedule's third row ("2 ranks*") runs the 2 ranks with StarPU-MPI's
 * progression thread apart (pl_runtime_options.mpi_progress THREAD)
 * instead of the default, where it runs each rank's compute worker
 * between its polls (WORKER on CPU runs): the same layout, side by side.
 *
 *        (children: bench_pp --child RANKS SCHEDULE STEPS WARMUP REPS W PROGRESS)
 */
#define _GNU_SOURCE /* readlink */

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pleiades.h>

#include "bench_util.h"

enum { BATCH = 16, CONTEXT = 64, MICROBATCHES = 8, MAX_REPS = 20 };

static const char *const SCHEDULES[] = {"1f1b", "interleaved", "zb-h1"};
static const pl_schedule_kind KINDS[] = {PL_SCHEDULE_1F1B, PL_SCHEDULE_INTERLEAVED,
                                         PL_SCHEDULE_ZB_H1};
#define N_SCHEDULES 3

typedef struct interval {
    double start, end;
} interval;

static int cmp_interval(const void *pa, const void *pb) {
    const interval *a = pa, *b = pb;
    return (a->start > b->start) - (a->start < b->start);
}

/* Time covered by at least one of the intervals (sorted here). */
static double covered(interval *iv, int n) {
    qsort(iv, n, sizeof *iv, cmp_interval);
    double total = 0, s = 0, e = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (iv[i].start > e) {
            if (e > s) total += e - s;
            s = iv[i].start;
            e = iv[i].end;
        } else if (iv[i].end > e) {
            e = iv[i].end;
        }
    }
    return n > 0 && e > s ? total + e - s : total;
}

static int child(int argc, char **argv) {
    const char *prog = "bench_pp";
    if (argc != 9) return fprintf(stderr, "%s: bad --child arguments\n", prog), 2;
    int ranks = atoi(argv[2]), k = atoi(argv[3]), steps = atoi(argv[4]);
    int warmup = atoi(argv[5]), reps = atoi(argv[6]), per = atoi(argv[7]);
    int progress = atoi(argv[8]);
    if (reps < 1 || reps > MAX_REPS || steps < 1 || k < 0 || k >= N_SCHEDULES || per < 1 ||
        per > 64)
        return 2;
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = ranks == 1 ? 2 * per : per;
    ro.distributed = ranks > 1;
    ro.mpi_progress = (pl_mpi_progress)progress;
    ro.profiling = true;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) return bench_fail(prog, "pl_runtime_new"), 1;
    pl_graph_t *g = pl_graph_new(42);
    pl_gpt_config cfg = {.vocab = 256, .context = CONTEXT, .channels = 256, .layers = 4,
                         .heads = 4};
    pl_gpt_model gm;
    if (!g || pl_gpt_build(g, &cfg, &gm) != PL_STATUS_OK)
        return bench_fail(prog, "building the model"), 1;
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = BATCH;
    eo.tiles = MICROBATCHES;
    eo.schedule = KINDS[k];
    eo.stages = 2;
    eo.model_chunks = KINDS[k] == PL_SCHEDULE_INTERLEAVED ? 2 : 1;
    eo.pp = ranks;
    eo.workers_per_stage = per;
    eo.record_tasks = true;
    bench_set_adamw(&eo);
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    if (!e) return bench_fail(prog, "pl_engine_new"), 1;
    uint64_t seed = 1234;
    int32_t tok[BATCH * CONTEXT], y[BATCH * CONTEXT];
    for (int i = 0; i < BATCH * CONTEXT; i++) {
        tok[i] = (int32_t)(bench_rng_next(&seed) % 256);
        y[i] = (int32_t)(bench_rng_next(&seed) % 256);
    }
    const void *data[2] = {tok, y};
    pl_batch b = {.size = BATCH, .data = data};
    double rep_ms[MAX_REPS], first, last;
    if (!bench_timed_steps(prog, e, &b, warmup, steps, reps, rep_ms, &first, &last)) return 1;
    double best = rep_ms[0];
    for (int i = 1; i < reps; i++) best = fmin(best, rep_ms[i]);
    /* The last step's bubble, from every rank's records. */
    pl_task_record *r;
    int n = pl_engine_gather_task_records(e, &r);
    if (n < 0) return bench_fail(prog, "gathering the task records"), 1;
    double lo = INFINITY, hi = -INFINITY, busy[2] = {0, 0};
    interval *iv = malloc((size_t)(n > 0 ? n : 1) * sizeof *iv);
    if (!iv) return bench_fail(prog, "out of memory"), 1;
    for (int s = 0; s < 2; s++) {
        int m = 0;
        for (int i = 0; i < n; i++) {
            char ph = r[i].phase;
            if ((ph != 'F' && ph != 'L' && ph != 'B' && ph != 'W') || r[i].stage != s)
                continue;
            lo = fmin(lo, r[i].start_us);
            hi = fmax(hi, r[i].end_us);
            iv[m++] = (interval){r[i].start_us, r[i].end_us};
        }
        busy[s] = covered(iv, m);
    }
    free(iv);
    double bottleneck = fmax(busy[0], busy[1]);
    if (pl_runtime_rank(rt) == 0)
        printf("child ranks=%d ms_per_step=%.3f samples_per_s=%.2f bubble=%.4f theory=%.4f "
               "busy0_ms=%.3f busy1_ms=%.3f\n", ranks, best, BATCH * 1e3 / best,
               bottleneck > 0 ? (hi - lo - bottleneck) / bottleneck : NAN,
               pl_engine_theoretical_bubble(e), busy[0] / 1e3, busy[1] / 1e3);
    free(r);
    pl_engine_free(e);
    pl_graph_free(g);
    pl_runtime_free(rt);
    return 0;
}

typedef struct result {
    bool ok;
    double ms, samples_per_s, bubble, theory, busy[2];
} result;

static result run_child(const char *self, int ranks, int k, int steps, int warmup, int reps,
                        int per, pl_mpi_progress progress) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s%s --child %d %d %d %d %d %d %d 2>&1",
             ranks > 1 ? "mpirun -np 2 --oversubscribe " : "", self, ranks, k, steps, warmup,
             reps, per, (int)progress);
    result res = {0};
    FILE *p = popen(cmd, "r");
    if (!p) return res;
    char line[1024];
    while (fgets(line, sizeof line, p)) {
        if (sscanf(line, "child ranks=%*d ms_per_step=%lf samples_per_s=%lf bubble=%lf "
                         "theory=%lf busy0_ms=%lf busy1_ms=%lf",
                   &res.ms, &res.samples_per_s, &res.bubble, &res.theory, &res.busy[0],
                   &res.busy[1]) == 6)
            res.ok = true;
        else if (!res.ok)
            fputs(line, stderr); /* a failing child's own message */
    }
    res.ok = pclose(p) == 0 && res.ok;
    return res;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--child") == 0) return child(argc, argv);
    const char *prog = "bench_pp";
    int steps = 10, warmup = 3, reps = 3, per = 1;
    for (int i = 1; i < argc; i += 2) { /* flag, value */
        int *dst = strcmp(argv[i], "--steps") == 0           ? &steps
                   : strcmp(argv[i], "--warmup") == 0        ? &warmup
                   : strcmp(argv[i], "--reps") == 0          ? &reps
                   : strcmp(argv[i], "--stage-workers") == 0 ? &per
                                                             : NULL;
        int lo = dst == &warmup ? 3 : 1;
        int top = dst == &reps ? MAX_REPS : dst == &per ? 64 : 100000;
        if (!dst || i + 1 >= argc || !bench_parse_int_opt(prog, argv[i], argv[i + 1], lo, top, dst)) {
            fprintf(stderr, "usage: %s [--steps N] [--warmup N>=3] [--reps N<=%d] "
                    "[--stage-workers W<=64]\n", prog, MAX_REPS);
            return 2;
        }
    }
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) return bench_fail(prog, "finding its own executable"), 1;
    self[len] = '\0';
    setenv("STARPU_SILENT", "1", 1);
    printf("bench_pp: GPT V=256 T=%d C=256 L=4 NH=4, batch %d, %d microbatches, AdamW; "
           "p = 2: one process x %d workers vs 2 ranks x %d worker%s (%d per stage); best "
           "of %d x %d steps\n", CONTEXT, BATCH, MICROBATCHES, 2 * per, per,
           per > 1 ? "s" : "", per, reps, steps);
    printf("%-12s %-10s %10s %10s %8s %9s %8s %8s %10s %10s\n", "schedule", "layout", "ms/step",
           "samples/s", "vs 1 pr", "bubble", "theory", "b/theory", "busy0 ms", "busy1 ms");
    bool targets_ok = true;
    for (int k = 0; k < N_SCHEDULES; k++) {
        result one = run_child(self, 1, k, steps, warmup, reps, per, PL_MPI_PROGRESS_AUTO);
        result two = run_child(self, 2, k, steps, warmup, reps, per, PL_MPI_PROGRESS_AUTO);
        result apart = run_child(self, 2, k, steps, warmup, reps, per, PL_MPI_PROGRESS_THREAD);
        const result *rs[3] = {&one, &two, &apart};
        static const char *const LAYOUTS[3] = {"1 process", "2 ranks", "2 ranks*"};
        for (int i = 0; i < 3; i++) {
            const result *r = rs[i];
            if (!r->ok) {
                printf("%-12s %-10s failed\n", SCHEDULES[k], LAYOUTS[i]);
                targets_ok = false;
                continue;
            }
            printf("%-12s %-10s %10.2f %10.2f %8.3f %9.4f %8.4f %8.3f %10.2f %10.2f\n",
                   SCHEDULES[k], LAYOUTS[i], r->ms, r->samples_per_s,
                   one.ok ? r->samples_per_s / one.samples_per_s : NAN, r->bubble, r->theory,
                   r->bubble / r->theory, r->busy[0], r->busy[1]);
        }
        /* The targets are for the layout: a worker per stage. */
        if (k == 0 && one.ok && two.ok && per == 1) {
            double ratio = two.samples_per_s / one.samples_per_s;
            bool bubble_ok = two.bubble <= 1.15 * two.theory;
            printf("target 1F1B across 2 ranks: bubble %.4f within 15%% of theory %.4f: %s; "
                   "throughput %.3fx one process >= 0.95x: %s\n", two.bubble, two.theory,
                   bubble_ok ? "PASS" : "MISS", ratio, ratio >= 0.95 ? "PASS" : "MISS");
        }
    }
    printf("2 ranks*: StarPU-MPI's progression thread apart (mpi_progress THREAD); 2 ranks: "
           "it runs each rank's compute worker between polls (the default)\n");
    return targets_ok ? 0 : 1;
}
