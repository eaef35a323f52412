/* The collective watchdog (collectives/watchdog.h) with a collective
 * timeout of 1 s:
 *   live   (default, 2 ranks) rank 1 reaches a collective task, then a
 *          host barrier, LATE_S after rank 0, running tasks all the while
 *          (a slow step): rank 0 waits both out instead of ending the job,
 *          since the timeout bounds a wait from the late rank's last
 *          progress
 *   chain  (3 ranks) rank 0 waits in a barrier for rank 1, which waits
 *          CHAIN_S in a broadcast of the group {1, 2} for rank 2, which
 *          runs tasks all that time: rank 1 makes no progress itself but
 *          waits for a rank that does, so rank 0 waits too
 *   stuck  (2 ranks) rank 1 sleeps STUCK_S on its main thread, no task, no
 *          collective (a hung rank that still answers): rank 0 ends the
 *          job, naming rank 1 and the barrier (CTest matches the message;
 *          test_cli_ranks.sh's stopped rank is the one that does not
 *          answer at all).
 * Usage: mpiexec -n 2 test_collective_timeout [live|stuck]
 *        mpiexec -n 3 test_collective_timeout chain */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <starpu.h>

#include "collective_task.h"
#include "collectives/comm.h"
#include "pleiades.h"
#include "test_util.h"

/* CHAIN_S: longer than a watchdog takes to judge a wait of its own
 * (1 s + 2 s of grace + ticks), so that rank 0 finds rank 1 waiting past
 * that, on a rank 1 has seen working. */
enum { LATE_S = 3, CHAIN_S = 6, STUCK_S = 20, NAP_MS = 50 };

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void nap(void *buffers[], void *arg) {
    (void)buffers, (void)arg;
    struct timespec ts = {0, NAP_MS * 1000000L};
    nanosleep(&ts, NULL);
}

static struct starpu_codelet nap_cl = {.cpu_funcs = {nap}, .nbuffers = 0, .name = "nap"};

/* Busy for `seconds` in tasks of NAP_MS: a rank whose step is slow. */
static void slow_step(int seconds) {
    for (int i = 0; i < seconds * 1000 / NAP_MS; i++) {
        struct starpu_task *t = starpu_task_create();
        t->cl = &nap_cl;
        CHECK(starpu_task_submit(t) == 0, "submitting a nap task");
    }
    starpu_task_wait_for_all();
}

/* Rank 0 in a barrier, rank 1 in a broadcast with rank 2, rank 2 busy. */
static void chain(int rank) {
    pl_comm_group *g = NULL;
    CHECK(pl_comm_group_split(rank == 0 ? 0 : 1, rank, &g) == PL_STATUS_OK, "split: %s",
          pl_last_error());
    double t0 = now_s();
    if (rank == 2) slow_step(CHAIN_S);
    /* From rank 2 (rank 1 of the group): rank 1 waits to receive it. */
    int value = rank == 2 ? 7 : 0;
    if (rank > 0)
        CHECK(pl_comm_bcast_bytes(g, &value, sizeof value, 1) == PL_STATUS_OK && value == 7,
              "broadcast: %s", pl_last_error());
    CHECK(pl_comm_barrier() == PL_STATUS_OK, "barrier: %s", pl_last_error());
    double waited = now_s() - t0;
    pl_comm_group_free(g);
    if (rank == 0) {
        CHECK(waited >= CHAIN_S - 0.5, "rank 0 waited %.1f s, expected about %d", waited,
              CHAIN_S);
        if (!tu_failures)
            printf("collective timeout 1 s: rank 0 waited %.1f s for rank 1, waiting for rank "
                   "2, which ran tasks, and went on\n", waited);
    }
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "live";
    bool stuck = strcmp(mode, "stuck") == 0;
    tu_time_limit(stuck ? 60 : 120, "test_collective_timeout");
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 1;
    ro.distributed = true;
    ro.collective_timeout_s = 1.0;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) {
        fprintf(stderr, "test_collective_timeout: %s\n", pl_last_error());
        return 1;
    }
    int world = pl_runtime_world_size(rt), rank = pl_runtime_rank(rt);
    bool chained = strcmp(mode, "chain") == 0;
    CHECK(world == (chained ? 3 : 2), "run under mpiexec with %d ranks (got %d)",
          chained ? 3 : 2, world);
    CHECK(pl_comm_barrier() == PL_STATUS_OK, "start barrier: %s", pl_last_error());
    if (chained) {
        chain(rank);
        pl_runtime_free(rt);
        return tu_failures ? 1 : 0;
    }
    if (stuck) {
        /* Rank 0 must end the job long before rank 1 wakes up. */
        if (rank == 1) {
            struct timespec ts = {STUCK_S, 0};
            nanosleep(&ts, NULL);
        }
        pl_comm_barrier();
        printf("FAIL: rank %d left the barrier: the watchdog did not end the job\n", rank);
        pl_runtime_free(rt);
        return 1;
    }
    int token_value = 0;
    starpu_data_handle_t token, h;
    starpu_variable_data_register(&token, STARPU_MAIN_RAM, (uintptr_t)&token_value,
                                  sizeof token_value);
    float x[3] = {1, 2, 3};
    starpu_vector_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)x, 3, sizeof *x);
    enum starpu_data_access_mode rw = STARPU_RW;
    pl_collective_args args = {.kind = PL_COLLECTIVE_ALLREDUCE_MEAN};
    double t0 = now_s();
    if (rank == 1) slow_step(LATE_S);
    CHECK(tu_run_collective(&pl_cl_collective, &args, sizeof args, &h, &rw, 1, token, NULL,
                            NULL),
          "all-reduce task not submitted");
    double task_wait = now_s() - t0;
    starpu_data_unregister(h);
    starpu_data_unregister(token);
    CHECK(x[0] == 1 && x[1] == 2 && x[2] == 3, "all-reduce: %g %g %g", x[0], x[1], x[2]);
    t0 = now_s();
    if (rank == 1) slow_step(LATE_S);
    CHECK(pl_comm_barrier() == PL_STATUS_OK, "barrier: %s", pl_last_error());
    double barrier_wait = now_s() - t0;
    if (rank == 0) {
        CHECK(task_wait >= LATE_S - 0.5 && barrier_wait >= LATE_S - 0.5,
              "rank 0 waited %.1f s in the all-reduce and %.1f s in the barrier, expected "
              "about %d s each", task_wait, barrier_wait, LATE_S);
        if (!tu_failures)
            printf("collective timeout 1 s: rank 0 waited %.1f s in an all-reduce task and "
                   "%.1f s in a host barrier for rank 1, late but running tasks, and went "
                   "on\n", task_wait, barrier_wait);
    }
    pl_runtime_free(rt);
    return tu_failures ? 1 : 0;
}
