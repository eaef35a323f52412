/* The collective tasks of collectives/comm.c over MPI (the CPU path of
 * every DDP / ZeRO reduction and of the pipeline's shared-chunk sums),
 * against the sums they must give, on any number of ranks (CTest runs 3:
 * a ring of odd length, shards of unequal length).
 *
 * Rank r's value i is an integer in [-50, 50] (a formula of i and r), so
 * every sum over the ranks is exact in fp32 and in bf16/fp16, whatever the
 * order the ranks add in: each rank's result must equal the formula's bit
 * for bit, for lengths shorter than the world (empty shards), odd lengths
 * and a few MB (fragmented by MPI). A reduce-scatter's whole vector is
 * read-only for the task (STARPU_R): it must come back untouched. Each
 * task's wait for the other ranks (pl_comm_task_wait_us, the traces'
 * wait_us) is checked against a rank made late on purpose: on the times
 * the ranks took, not on the machine's speed. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <starpu.h>

#include "collectives/comm.h"
#include "pleiades.h"
#include "collective_task.h"
#include "test_util.h"
#include "util/half.h"

static float value(size_t i, int r) { return (float)((int)((i * 7 + (size_t)r * 13) % 101) - 50); }

static float sum_over_ranks(size_t i, int world) {
    float s = 0.0f;
    for (int r = 0; r < world; r++) s += value(i, r);
    return s;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The last task's wait for the other ranks, read where the engine reads
 * it: in the task's callback, on the worker that ran it; with its span
 * and the callback's time (after the task). */
static double task_wait_us = -1, wait_begin_s, wait_end_s, callback_s;
static void read_wait(void *unused) {
    (void)unused;
    task_wait_us = pl_comm_task_wait_us();
    pl_comm_task_wait_span(&wait_begin_s, &wait_end_s);
    callback_s = now_s();
}

/* One collective task, waited for, on the vector a[n_a] (mode ma) and,
 * when b is not NULL, b[n_b] (mode mb), of `elem`-byte elements, plus the
 * token: registered for the task, unregistered after it (the results are
 * in a and b then). Buffers hold at least one element: a zero-length
 * vector still needs a pointer StarPU can take. */
static bool run(pl_collective_kind kind, bool bf16, size_t elem, void *a, size_t n_a,
                enum starpu_data_access_mode ma, void *b, size_t n_b,
                enum starpu_data_access_mode mb, starpu_data_handle_t token) {
    starpu_data_handle_t h[2];
    enum starpu_data_access_mode m[2] = {ma, mb};
    int n = b ? 2 : 1;
    starpu_vector_data_register(&h[0], STARPU_MAIN_RAM, (uintptr_t)a, (uint32_t)n_a, elem);
    if (b) starpu_vector_data_register(&h[1], STARPU_MAIN_RAM, (uintptr_t)b, (uint32_t)n_b, elem);
    pl_collective_args args = {.kind = kind, .bf16 = bf16};
    bool ok = tu_run_collective(&pl_cl_collective, &args, sizeof args, h, m, n, token,
                                read_wait, NULL);
    for (int i = 0; i < n; i++) starpu_data_unregister(h[i]);
    return ok;
}

/* Rank 0 reaches an all-reduce LATE_MS after the others, so that they
 * wait for it. A task's wait must be its barrier: from its own arrival
 * (after it was submitted: on rank 0, after the sleep) until it saw the
 * last rank's (no rank leaves a barrier before every rank entered it),
 * over before the task ended. Checked on the ranks' times (CLOCK_MONOTONIC
 * is the host's, and CTest runs the ranks on one machine), not against
 * LATE_MS: on a loaded host a rank may itself reach the task late or see
 * the others' arrival late (collectives_3 failed beside the suite with
 * "rank 2 of 3 waited 108.0 ms for rank 0, 200 ms late"), while a wait
 * that started at submission, or ended before the last arrival, fails
 * here at any speed. */
enum { LATE_MS = 200 };
static void check_wait(int world, int rank, starpu_data_handle_t token) {
    float x[3] = {1, 2, 3};
    if (rank == 0) {
        struct timespec ts = {0, LATE_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
    task_wait_us = -1;
    double submitted = now_s();
    CHECK(run(PL_COLLECTIVE_ALLREDUCE_MEAN, false, 4, x, 3, STARPU_RW, NULL, 0, 0, token),
          "all-reduce for the wait: not submitted");
    /* Every rank's times, to every rank: rank r's in [4r, 4r + 4). */
    double *t = calloc(4 * (size_t)world, sizeof *t);
    CHECK(t != NULL, "out of memory");
    if (!t) return;
    double mine[4] = {submitted, wait_begin_s, wait_end_s, callback_s};
    memcpy(t + 4 * rank, mine, sizeof mine);
    CHECK(pl_comm_sum(t, 4 * world) == PL_STATUS_OK, "sum of the times: %s", pl_last_error());
    double first_arrival = INFINITY, last_arrival = 0;
    int last = -1;
    for (int r = 0; r < world; r++) {
        first_arrival = fmin(first_arrival, t[4 * r + 1]);
        if (t[4 * r + 1] > last_arrival) last_arrival = t[4 * r + 1], last = r;
    }
    double span_us = (wait_end_s - wait_begin_s) * 1e6;
    CHECK(task_wait_us >= 0 && fabs(task_wait_us - span_us) <= 1.0,
          "rank %d: wait %.1f us, its span %.1f us", rank, task_wait_us, span_us);
    CHECK(wait_begin_s >= submitted && wait_end_s <= callback_s,
          "rank %d: the wait [%+.1f, %+.1f] ms is not inside its task (submitted at 0, "
          "callback at %+.1f ms)", rank, (wait_begin_s - submitted) * 1e3,
          (wait_end_s - submitted) * 1e3, (callback_s - submitted) * 1e3);
    CHECK(wait_end_s >= last_arrival,
          "rank %d: the wait ended %.1f ms before rank %d, the last, arrived (it waited "
          "%.1f ms)", rank, (last_arrival - wait_end_s) * 1e3, last, task_wait_us / 1e3);
    if (rank == 0 && !tu_failures)
        printf("a late rank: rank %d arrived last, %.1f ms after the first; rank 0 waited "
               "%.1f ms\n", last, (last_arrival - first_arrival) * 1e3, task_wait_us / 1e3);
    free(t);
}

/* fp32: all-reduce mean (in place), all-reduce sum (own -> sum) and
 * reduce-scatter mean (whole -> this rank's shard). */
static void check_fp32(size_t n, int world, int rank, starpu_data_handle_t token) {
    float inv = 1.0f / (float)world;
    float *x = malloc((n + 1) * sizeof *x), *own = malloc((n + 1) * sizeof *own);
    float *sum = malloc((n + 1) * sizeof *sum), *shard = malloc((n + 1) * sizeof *shard);
    for (size_t i = 0; i < n; i++) x[i] = own[i] = value(i, rank);
    memset(sum, 0xff, (n + 1) * sizeof *sum); /* NaNs: what the task must overwrite */
    memset(shard, 0xff, (n + 1) * sizeof *shard);
    size_t lo, hi;
    pl_comm_shard(n, world, rank, &lo, &hi);

    CHECK(run(PL_COLLECTIVE_ALLREDUCE_MEAN, false, 4, x, n, STARPU_RW, NULL, 0, 0, token),
          "all-reduce mean of %zu: not submitted", n);
    size_t bad = n;
    for (size_t i = 0; i < n && bad == n; i++)
        if (x[i] != sum_over_ranks(i, world) * inv) bad = i;
    CHECK(bad == n, "rank %d: all-reduce mean of %zu values: [%zu] = %g, want %g", rank, n, bad,
          bad < n ? x[bad] : 0.0, bad < n ? sum_over_ranks(bad, world) * inv : 0.0);

    CHECK(run(PL_COLLECTIVE_ALLREDUCE_SUM, false, 4, own, n, STARPU_R, sum, n, STARPU_W, token),
          "all-reduce sum of %zu: not submitted", n);
    bad = n;
    for (size_t i = 0; i < n && bad == n; i++)
        if (sum[i] != sum_over_ranks(i, world) || own[i] != value(i, rank)) bad = i;
    CHECK(bad == n, "rank %d: all-reduce sum of %zu values: [%zu] = %g (own %g), want %g", rank,
          n, bad, bad < n ? sum[bad] : 0.0, bad < n ? own[bad] : 0.0,
          bad < n ? sum_over_ranks(bad, world) : 0.0);

    /* The whole vector again (the all-reduce replaced x). */
    for (size_t i = 0; i < n; i++) x[i] = value(i, rank);
    CHECK(run(PL_COLLECTIVE_REDUCE_SCATTER_MEAN, false, 4, x, n, STARPU_R, shard, hi - lo,
              STARPU_W, token),
          "reduce-scatter mean of %zu: not submitted", n);
    bad = n;
    for (size_t i = lo; i < hi && bad == n; i++)
        if (shard[i - lo] != sum_over_ranks(i, world) * inv) bad = i;
    CHECK(bad == n, "rank %d: reduce-scatter mean of %zu values, shard [%zu, %zu): [%zu] = %g, "
          "want %g", rank, n, lo, hi, bad, bad < n ? shard[bad - lo] : 0.0,
          bad < n ? sum_over_ranks(bad, world) * inv : 0.0);
    bad = n;
    for (size_t i = 0; i < n && bad == n; i++)
        if (x[i] != value(i, rank)) bad = i;
    CHECK(bad == n, "rank %d: reduce-scatter mean of %zu values changed its read-only input at "
          "[%zu]", rank, n, bad);
    free(x);
    free(own);
    free(sum);
    free(shard);
}

/* 16-bit vectors: summed in fp32, the mean rounded once. */
static void check_half(size_t n, bool bf16, int world, int rank, starpu_data_handle_t token) {
    float inv = 1.0f / (float)world;
    uint16_t *x = malloc((n + 1) * sizeof *x), *shard = malloc((n + 1) * sizeof *shard);
    uint16_t *whole = malloc((n + 1) * sizeof *whole);
    for (size_t i = 0; i < n; i++) x[i] = whole[i] = pl_half_round(bf16, value(i, rank));
    memset(shard, 0xff, (n + 1) * sizeof *shard);
    size_t lo, hi;
    pl_comm_shard(n, world, rank, &lo, &hi);
    CHECK(run(PL_COLLECTIVE_ALLREDUCE_MEAN, bf16, 2, x, n, STARPU_RW, NULL, 0, 0, token),
          "16-bit all-reduce mean of %zu: not submitted", n);
    CHECK(run(PL_COLLECTIVE_REDUCE_SCATTER_MEAN, bf16, 2, whole, n, STARPU_R, shard, hi - lo,
              STARPU_W, token),
          "16-bit reduce-scatter mean of %zu: not submitted", n);
    size_t bad = n;
    for (size_t i = 0; i < n && bad == n; i++) {
        uint16_t want = pl_half_round(bf16, sum_over_ranks(i, world) * inv);
        if (x[i] != want || (i >= lo && i < hi && shard[i - lo] != want) ||
            whole[i] != pl_half_round(bf16, value(i, rank)))
            bad = i;
    }
    CHECK(bad == n, "rank %d: %s all-reduce / reduce-scatter mean of %zu values: wrong at [%zu]",
          rank, bf16 ? "bf16" : "fp16", n, bad);
    free(x);
    free(shard);
    free(whole);
}

int main(void) {
    tu_time_limit(120, "test_collectives");
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 1;
    ro.distributed = true;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) {
        fprintf(stderr, "test_collectives: %s\n", pl_last_error());
        return 1;
    }
    int world = pl_runtime_world_size(rt), rank = pl_runtime_rank(rt);
    CHECK(world >= 2, "run under mpiexec with 2 or more ranks (got %d)", world);
    int token_value = 0;
    starpu_data_handle_t token;
    starpu_variable_data_register(&token, STARPU_MAIN_RAM, (uintptr_t)&token_value,
                                  sizeof token_value);
    const size_t lengths[] = {1, 2, 7, 1000, 1000003};
    for (int i = 0; i < 5; i++) {
        check_fp32(lengths[i], world, rank, token);
        check_half(lengths[i], true, world, rank, token);
        check_half(lengths[i], false, world, rank, token);
    }
    check_wait(world, rank, token);
    starpu_data_unregister(token);
    if (rank == 0 && !tu_failures)
        printf("collectives over %d ranks: all-reduce mean and sum, reduce-scatter mean (fp32, "
               "bf16, fp16) of 1 to 1000003 values: the exact sums, inputs untouched; the "
               "waits for a late rank measured\n", world);
    pl_runtime_free(rt);
    return tu_failures ? 1 : 0;
}
