/* bench_dp: data parallelism over processes (StarPU-MPI), weak scaling:
 * 1 rank × 1 worker against 2 ranks × 1 worker each (per-rank batch
 * fixed), DDP and ZeRO-1/2/3, side by side with PyTorch DDP (gloo, 2
 * processes × 1 thread: bench/dp_torch.py), for the MLP of bench_mlp
 * (784-1024-1024-10, batch 256 per rank) and the GPT of bench_gpt (L4 C256
 * T128 NH4, batch 16 per rank), AdamW. One run prints one table.
 *
 * Run it plainly (`build/bench/bench_dp`): it launches itself under
 * `mpirun -np R --oversubscribe` for each configuration (the children
 * time `steps` steps after `warmup`, best of `reps` repetitions, each
 * ended with a wait for all tasks) and then the PyTorch peer. Columns:
 *   samples/s      global throughput (R × per-rank batch / step time)
 *   scaling        over the same side's 1-rank throughput
 *   vs torch       over PyTorch DDP's throughput with the same ranks
 *   comm ms        per step, summed over the communication tasks of rank
 *                  0's last step (their waits for the other rank included)
 *   wait ms        of that, the collectives' barriers: rank 0 waiting for
 *                  the other rank to arrive (pl_task_record.wait_us)
 *   hidden         share of that time during which rank 0's compute
 *                  worker was running a task (forward, backward, update)
 *   state MB       model state rank 0 keeps between steps: parameters,
 *                  gradients, reduced gradient shards, optimizer states
 *   gathered MB    (ZeRO-3) the most whole parameter and gradient chunks
 *                  rank 0 held gathered at once on top of that, (ZeRO-2)
 *                  the most whole gradient chunks it held at once (they
 *                  are released after their reduce-scatter), measured
 *                  as its tasks ran
 * The machine's limit for weak scaling: two independent one-rank runs at
 * once, each worker on a core of its own, nothing exchanged (row
 * "2 alone", their throughputs summed). Two processes on two cores
 * share caches, memory bandwidth and clock, so this is what 2 ranks could
 * reach with communication free; "of limit" is each 2-rank row over it.
 *
 * Usage: bench_dp [--steps N] [--warmup N] [--reps N] [--no-torch]
 *        (children: bench_dp --child MODEL ZERO STEPS WARMUP REPS; ZERO -1:
 *        one of the independent runs of the limit)
 */
#define _GNU_SOURCE /* setenv, readlink */

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pleiades.h>

#include "bench_util.h"

#ifndef PL_SOURCE_DIR
#define PL_SOURCE_DIR ""
#endif

enum { MLP_BATCH = 256, GPT_BATCH = 16, MAX_REPS = 20 };

/* ------------------------------------------------------------ child */

static pl_graph_t *build(bool gpt) {
    pl_graph_t *g = pl_graph_new(42);
    if (!g) return NULL;
    if (gpt) {
        pl_gpt_config cfg = {.vocab = 256, .context = 128, .channels = 256, .layers = 4,
                             .heads = 4};
        pl_gpt_model m;
        return pl_gpt_build(g, &cfg, &m) == PL_STATUS_OK ? g : NULL;
    }
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, (int64_t[]){784});
    pl_tensor_t *y = pl_graph_input(g, "y", PL_DTYPE_I32, 0, NULL);
    pl_tensor_t *h = pl_relu(g, pl_linear(g, x, 1024, "fc1"));
    h = pl_relu(g, pl_linear(g, h, 1024, "fc2"));
    pl_tensor_t *logits = pl_linear(g, h, 10, "fc3");
    return pl_graph_set_loss(g, pl_cross_entropy(g, logits, y)) == PL_STATUS_OK ? g : NULL;
}

/* Seconds of [a, b) covered by the union of the compute intervals. */
static double covered(double a, double b, const pl_task_record *r, int n, int comm_worker) {
    /* Records are few hundred: clip every compute interval to [a, b) and
     * merge by sweeping a sorted copy. */
    double *s = malloc((size_t)(n ? n : 1) * 2 * sizeof *s);
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (r[i].phase == 'C' || r[i].worker == comm_worker) continue;
        double lo = fmax(a, r[i].start_us), hi = fmin(b, r[i].end_us);
        if (hi > lo) {
            s[2 * k] = lo;
            s[2 * k + 1] = hi;
            k++;
        }
    }
    /* insertion sort by start (k is small) */
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0 && s[2 * j] < s[2 * (j - 1)]; j--) {
            double t0 = s[2 * j], t1 = s[2 * j + 1];
            s[2 * j] = s[2 * (j - 1)];
            s[2 * j + 1] = s[2 * (j - 1) + 1];
            s[2 * (j - 1)] = t0;
            s[2 * (j - 1) + 1] = t1;
        }
    double total = 0, end = a;
    for (int i = 0; i < k; i++) {
        double lo = fmax(s[2 * i], end), hi = s[2 * i + 1];
        if (hi > lo) total += hi - lo;
        if (hi > end) end = hi;
    }
    free(s);
    return total;
}

static int child(int argc, char **argv) {
    const char *prog = "bench_dp";
    if (argc != 7) return fprintf(stderr, "%s: bad --child arguments\n", prog), 2;
    bool gpt = strcmp(argv[2], "gpt") == 0;
    int zero = atoi(argv[3]), steps = atoi(argv[4]), warmup = atoi(argv[5]);
    int reps = atoi(argv[6]);
    if (reps < 1 || reps > MAX_REPS || steps < 1 || zero < -1 || zero > 3) return 2;
    bool alone = zero < 0;
    if (alone) {
        /* Its own core: the local rank's (mpirun only launched it). */
        const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
        setenv("STARPU_WORKERS_CPUID", lr ? lr : "0", 1);
        zero = 0;
    }
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 1;
    ro.distributed = !alone;
    ro.profiling = true;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) return bench_fail(prog, "pl_runtime_new"), 1;
    int world = pl_runtime_world_size(rt), rank = pl_runtime_rank(rt);
    pl_graph_t *g = build(gpt);
    if (!g) return bench_fail(prog, "building the model"), 1;
    int batch = gpt ? GPT_BATCH : MLP_BATCH;
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = batch;
    eo.tiles = 1; /* one compute worker: tiles would only add tasks */
    bench_set_adamw(&eo);
    eo.dp = world;
    eo.zero_stage = world > 1 ? zero : 0;
    eo.record_tasks = true;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    if (!e) return bench_fail(prog, "pl_engine_new"), 1;
    /* Random inputs, different per rank (each rank's slice). */
    uint64_t seed = 1234 + (uint64_t)rank;
    size_t n = gpt ? (size_t)batch * 128 : (size_t)batch * 784;
    float *x = malloc(n * sizeof *x);
    int32_t *tok = malloc(n * sizeof *tok);
    int32_t *y = malloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++) {
        x[i] = bench_rng_uniform(&seed) * 2 - 1;
        tok[i] = (int32_t)(bench_rng_next(&seed) % 256);
        y[i] = (int32_t)(bench_rng_next(&seed) % (gpt ? 256 : 10));
    }
    const void *data[2] = {gpt ? (const void *)tok : (const void *)x, y};
    pl_batch b = {.size = batch, .data = data};
    double rep_ms[MAX_REPS], first, last;
    if (!bench_timed_steps(prog, e, &b, warmup, steps, reps, rep_ms, &first, &last)) return 1;
    double best = rep_ms[0];
    for (int i = 1; i < reps; i++) best = fmin(best, rep_ms[i]);
    /* Communication of the last step and how much of it compute covered. */
    const pl_task_record *r;
    int nr = pl_engine_task_records(e, &r);
    double comm = 0, wait = 0, hidden = 0, compute = 0, t_lo = INFINITY, t_hi = 0;
    int comm_worker = -1;
    for (int i = 0; i < nr; i++)
        if (r[i].phase == 'C') comm_worker = r[i].worker;
    for (int i = 0; i < nr; i++) {
        t_lo = fmin(t_lo, r[i].start_us);
        t_hi = fmax(t_hi, r[i].end_us);
        if (r[i].phase != 'C') compute += r[i].end_us - r[i].start_us;
    }
    if (getenv("BENCH_DP_DEBUG"))
        for (int i = 0; i < nr; i++)
            fprintf(stderr, "rank %d %-20s w%d ready %9.0f start %9.0f end %9.0f\n", rank,
                    r[i].name, r[i].worker, r[i].ready_us - t_lo, r[i].start_us - t_lo,
                    r[i].end_us - t_lo);
    for (int i = 0; i < nr; i++)
        if (r[i].phase == 'C') {
            comm += r[i].end_us - r[i].start_us;
            wait += r[i].wait_us;
            hidden += covered(r[i].start_us, r[i].end_us, r, nr, comm_worker);
        }
    /* Model state this rank holds: what it keeps between steps, and apart
     * (ZeRO-2/3) the most whole chunks it held at once, measured. The
     * reduced gradients are buffers of their own only under ZeRO-2/3. */
    pl_model_state_bytes mb;
    if (pl_engine_model_state_bytes(e, &mb) != PL_STATUS_OK) return bench_fail(prog, "bytes"), 1;
    double state = (double)(mb.params + mb.grads + (eo.zero_stage >= 2 ? mb.reduced_grads : 0) +
                            mb.optimizer_states);
    double gathered = (double)(mb.gathered_params_peak + mb.gathered_grads_peak);
    if (rank == 0 || alone)
        printf("child ranks=%d zero=%d ms_per_step=%.3f samples_per_s=%.1f comm_ms=%.3f "
               "wait_ms=%.3f hidden=%.4f state_mb=%.3f gathered_mb=%.3f compute_ms=%.3f "
               "span_ms=%.3f\n",
               world, eo.zero_stage, best, world * batch * 1e3 / best, comm / 1e3, wait / 1e3,
               comm > 0 ? hidden / comm : 0.0, state / (1 << 20), gathered / (1 << 20),
               compute / 1e3, (t_hi - t_lo) / 1e3);
    free(x);
    free(tok);
    free(y);
    pl_engine_free(e);
    pl_graph_free(g);
    pl_runtime_free(rt);
    return 0;
}

/* ----------------------------------------------------------- parent */

typedef struct result {
    bool ok;
    double samples_per_s, comm_ms, wait_ms, hidden, state_mb, gathered_mb;
} result;

static result run_child(const char *self, int ranks, const char *model, int zero, int steps,
                        int warmup, int reps) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "mpirun -np %d --oversubscribe %s --child %s %d %d %d %d 2>&1", ranks, self,
             model, zero, steps, warmup, reps);
    result res = {0};
    FILE *p = popen(cmd, "r");
    if (!p) return res;
    char line[512];
    double total = 0;
    while (fgets(line, sizeof line, p)) {
        double ms;
        int rk, z;
        if (sscanf(line, "child ranks=%d zero=%d ms_per_step=%lf samples_per_s=%lf "
                         "comm_ms=%lf wait_ms=%lf hidden=%lf state_mb=%lf gathered_mb=%lf",
                   &rk, &z, &ms, &res.samples_per_s, &res.comm_ms, &res.wait_ms, &res.hidden,
                   &res.state_mb, &res.gathered_mb) == 9) {
            res.ok = true;
            total += res.samples_per_s; /* several lines: independent runs */
        }
        else
            fprintf(stderr, "  [%s %d ranks zero %d] %s", model, ranks, zero, line);
    }
    if (pclose(p) != 0) res.ok = false;
    res.samples_per_s = total;
    return res;
}

static double run_torch(const char *model, int world, int steps, int warmup) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s%sbench/dp_torch.py %s %d %d %d %d 2>&1",
             bench_torch_python(), PL_SOURCE_DIR, *PL_SOURCE_DIR ? "/" : "", model, world,
             steps, warmup, 29600 + world + (model[0] == 'g') * 10);
    FILE *p = popen(cmd, "r");
    if (!p) return 0;
    char line[512];
    double sps = 0;
    while (fgets(line, sizeof line, p)) {
        int w;
        double v;
        if (sscanf(line, "torch_ddp world=%d samples_per_s=%lf", &w, &v) == 2) sps = v;
    }
    if (pclose(p) != 0) return 0;
    return sps;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--child") == 0) return child(argc, argv);
    int steps = 10, warmup = 3, reps = 3;
    bool torch = true;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--no-torch") == 0) torch = false;
        else if (i + 1 < argc && strcmp(argv[i], "--steps") == 0)
            bench_parse_int_opt("bench_dp", "--steps", argv[++i], 1, 10000, &steps) || (exit(2), 0);
        else if (i + 1 < argc && strcmp(argv[i], "--warmup") == 0)
            bench_parse_int_opt("bench_dp", "--warmup", argv[++i], 0, 1000, &warmup) || (exit(2), 0);
        else if (i + 1 < argc && strcmp(argv[i], "--reps") == 0)
            bench_parse_int_opt("bench_dp", "--reps", argv[++i], 1, MAX_REPS, &reps) || (exit(2), 0);
        else {
            fprintf(stderr, "usage: bench_dp [--steps N] [--warmup N] [--reps N] [--no-torch]\n");
            return 2;
        }
    }
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) return fprintf(stderr, "bench_dp: cannot find its own path\n"), 1;
    self[len] = '\0';
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    setenv("STARPU_SILENT", "1", 0);
    printf("bench_dp: weak scaling, 1 compute worker per rank, AdamW; %d steps after %d "
           "warm-up, best of %d\n", steps, warmup, reps);
    printf("%-4s %-10s %5s %12s %8s %9s %9s %8s %7s %9s %11s\n", "model", "config", "ranks",
           "samples/s", "scaling", "vs torch", "comm ms", "wait ms", "hidden", "state MB",
           "gathered MB");
    static const char *const models[] = {"mlp", "gpt"};
    for (int m = 0; m < 2; m++) {
        const char *model = models[m];
        int msteps = m ? (steps + 1) / 2 : steps; /* the GPT step is ~10x longer */
        double t1 = torch ? run_torch(model, 1, msteps, warmup) : 0;
        double t2 = torch ? run_torch(model, 2, msteps, warmup) : 0;
        result one = run_child(self, 1, model, 0, msteps, warmup, reps);
        static const char *const names[] = {"DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3"};
        double ddp2 = 0, zero2 = 0, zero2_mb = 0;
        char vs1[32] = "-";
        if (t1 > 0) snprintf(vs1, sizeof vs1, "%.2fx", one.samples_per_s / t1);
        printf("%-4s %-10s %5d %12.1f %8s %9s %9s %8s %7s %9.2f %11s\n", model, "1 rank", 1,
               one.samples_per_s, "1.00x", vs1, "-", "-", "-", one.state_mb, "-");
        result limit = run_child(self, 2, model, -1, msteps, warmup, reps);
        if (limit.ok && one.ok)
            printf("%-4s %-10s %5d %12.1f %7.2fx %9s %9s %8s %7s %9s  (the machine's limit: "
                   "2 independent 1-rank runs)\n", model, "2 alone", 2, limit.samples_per_s,
                   limit.samples_per_s / one.samples_per_s, "-", "-", "-", "-", "-");
        else
            printf("%-4s %-10s %5d   failed\n", model, "2 alone", 2);
        for (int z = 0; z < 4; z++) {
            result two = run_child(self, 2, model, z, msteps, warmup, reps);
            if (!two.ok) {
                printf("%-4s %-10s %5d   failed\n", model, names[z], 2);
                continue;
            }
            if (z == 0) ddp2 = two.samples_per_s;
            if (z == 2) zero2 = two.samples_per_s, zero2_mb = two.state_mb;
            char vs[32] = "-";
            if (t2 > 0) snprintf(vs, sizeof vs, "%.2fx", two.samples_per_s / t2);
            char gathered[32] = "-";
            if (z >= 2) snprintf(gathered, sizeof gathered, "%.2f", two.gathered_mb);
            printf("%-4s %-10s %5d %12.1f %7.2fx %9s %9.2f %8.2f %6.1f%% %9.2f %11s", model,
                   names[z], 2, two.samples_per_s,
                   one.ok ? two.samples_per_s / one.samples_per_s : 0, vs, two.comm_ms,
                   two.wait_ms, 100 * two.hidden, two.state_mb, gathered);
            if (limit.ok) printf("  %.2fx of limit", two.samples_per_s / limit.samples_per_s);
            if (z > 0 && ddp2 > 0) printf("  (%.2fx DDP", two.samples_per_s / ddp2);
            if (z == 3 && zero2 > 0)
                printf("; %.2fx ZeRO-2's throughput, %.2fx its state; 1 rank's state: "
                       "%.2fx kept, %.2fx with the gathered chunks",
                       two.samples_per_s / zero2, two.state_mb / zero2_mb,
                       one.ok ? two.state_mb / one.state_mb : 0,
                       one.ok ? (two.state_mb + two.gathered_mb) / one.state_mb : 0);
            if (z > 0 && ddp2 > 0) printf(")");
            printf("\n");
        }
        if (torch)
            printf("%-4s %-10s %5s %12.1f / %.1f (1 / 2 ranks; scaling %.2fx)\n", model,
                   "torch DDP", "1/2", t1, t2, t1 > 0 ? t2 / t1 : 0);
        fflush(stdout);
    }
    return 0;
}
