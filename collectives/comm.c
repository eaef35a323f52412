/* MPI for the data-parallel engine (see comm.h for why collectives run
 * inside tasks). Built without MPI, every entry point that needs it says
 * so and the rest answers as a world of one process. */
#include <math.h>
#include <sched.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "collectives/comm.h"
#include "collectives/watchdog.h"
#include "util/error.h"
#include "util/half.h"

/* A small non-negative integer from the environment, else `fallback`. */
static int env_int(const char *name, int fallback) {
    const char *v = getenv(name);
    char *end;
    long r = v ? strtol(v, &end, 10) : -1;
    return v && *v && !*end && r >= 0 && r < 65536 ? (int)r : fallback;
}

int pl_comm_local_rank(void) { return env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0); }

int pl_comm_local_size(void) {
    int n = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
    return n > 0 ? n : 1;
}

#ifdef PL_WITH_MPI
#include <mpi.h>
#include <starpu_mpi.h>

static bool started_mpi;   /* MPI_Finalize is ours to call (at exit) */
static bool mpi_ready;     /* pl_comm_mpi_init succeeded */
static bool initialised;   /* StarPU-MPI started */
static int world_rank, world_size = 1;
/* Tasks' collectives and the host's run on communicators of their own,
 * apart from StarPU-MPI's traffic on MPI_COMM_WORLD. */
static MPI_Comm comm_tasks = MPI_COMM_NULL, comm_host = MPI_COMM_NULL;
static void finalize_at_exit(void);

pl_status pl_comm_mpi_init(void) {
    if (mpi_ready) return PL_STATUS_OK;
    int running = 0;
    MPI_Initialized(&running);
    if (!running) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
            return pl_fail(PL_STATUS_RUNTIME_ERROR, "MPI_Init_thread failed");
        started_mpi = true;
        if (provided < MPI_THREAD_MULTIPLE) {
            MPI_Finalize();
            return pl_fail(PL_STATUS_UNSUPPORTED,
                           "this MPI gives thread level %d, Pleiades needs "
                           "MPI_THREAD_MULTIPLE (%d)", provided, MPI_THREAD_MULTIPLE);
        }
    } else {
        int level = 0;
        MPI_Query_thread(&level);
        if (level < MPI_THREAD_MULTIPLE)
            return pl_fail(PL_STATUS_UNSUPPORTED,
                           "MPI was initialised with thread level %d; Pleiades needs "
                           "MPI_THREAD_MULTIPLE (%d)", level, MPI_THREAD_MULTIPLE);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    pl_status st = pl_watchdog_mpi_init(world_size);
    if (st) return st;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_tasks);
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_host);
    if (started_mpi) atexit(finalize_at_exit);
    mpi_ready = true;
    return PL_STATUS_OK;
}

/* The progression thread running a worker (pl_comm_starpu_init): StarPU
 * 1.3's thread sleeps whenever it has no request in hand, and so would the
 * worker's tasks it runs, until some transfer woke it. A receive nothing
 * matches until shutdown keeps it polling: each rank posts one from
 * itself, and sends itself the match at its own shutdown. (From another
 * rank, it ended when that rank shut down: a rank still working then had
 * its worker stall, found in test_data_parallel.) */
#define KEEPALIVE_TAG ((starpu_mpi_tag_t)INT64_MAX)
static struct {
    bool posted;
    int in, out; /* the payloads */
    starpu_data_handle_t in_h, out_h;
    starpu_mpi_req req;
} keepalive;
static int progress_worker = -1;

static pl_status keepalive_post(void) {
    starpu_variable_data_register(&keepalive.in_h, STARPU_MAIN_RAM, (uintptr_t)&keepalive.in,
                                  sizeof keepalive.in);
    starpu_variable_data_register(&keepalive.out_h, STARPU_MAIN_RAM,
                                  (uintptr_t)&keepalive.out, sizeof keepalive.out);
    int from = world_rank;
    if (starpu_mpi_irecv(keepalive.in_h, &keepalive.req, from, KEEPALIVE_TAG,
                         MPI_COMM_WORLD) != 0) {
        starpu_data_unregister(keepalive.in_h);
        starpu_data_unregister(keepalive.out_h);
        return pl_fail(PL_STATUS_RUNTIME_ERROR, "StarPU-MPI: rank %d cannot post a receive",
                       from);
    }
    keepalive.posted = true;
    return PL_STATUS_OK;
}

static void keepalive_end(void) {
    if (!keepalive.posted) return;
    if (starpu_mpi_isend_detached(keepalive.out_h, world_rank, KEEPALIVE_TAG, MPI_COMM_WORLD, NULL,
                                  NULL) == 0) {
        MPI_Status status;
        starpu_mpi_wait(&keepalive.req, &status);
    }
    starpu_data_unregister(keepalive.in_h);
    starpu_data_unregister(keepalive.out_h);
    keepalive.posted = false;
}

int pl_comm_progress_worker(void) { return progress_worker; }

pl_status pl_comm_starpu_init(struct starpu_conf *conf, bool progress_in_worker) {
    pl_status st = pl_comm_mpi_init();
    if (st) return st;
    progress_in_worker = progress_in_worker && world_size > 1;
    /* StarPU-MPI reads its driver settings from the environment only: the
     * thread drives CPU worker 0 and runs at most one of its tasks between
     * two polls (so a transfer waits for one task at most). */
    if (progress_in_worker) {
        setenv("STARPU_MPI_DRIVER_CALL_FREQUENCY", "1", 1);
        setenv("STARPU_MPI_DRIVER_TASK_FREQUENCY", "1", 1);
    } else {
        unsetenv("STARPU_MPI_DRIVER_CALL_FREQUENCY");
    }
    /* Each rank's compute workers and StarPU-MPI's progression thread
     * poll; idle workers sleep on their own (policy.c). The nap's length:
     * collectives/progress_naps.c. A progression thread that runs a
     * worker is that core's only poller, and a nap would delay its tasks:
     * no naps then. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int busy_threads = pl_comm_local_size() * (conf->ncpus > 0 ? conf->ncpus : 1);
    int nap_us = busy_threads > cores && !progress_in_worker ? 500 : 0;
    const char *nap_env = getenv("PLEIADES_MPI_NAP_US");
    if (nap_env && env_int("PLEIADES_MPI_NAP_US", -1) < 0 && world_rank == 0)
        fprintf(stderr, "pleiades: ignoring PLEIADES_MPI_NAP_US=%s (want 0..65535 "
                        "microseconds); naps of %d us\n", nap_env, nap_us);
    pl_comm_progress_naps(env_int("PLEIADES_MPI_NAP_US", nap_us));
    /* From here on every collective wait is watched (watchdog.h); the
     * watchdog answers the other ranks already while StarPU starts (which
     * may take a while, and counts as work). */
    st = pl_watchdog_start();
    if (st) return st;
    int ret = starpu_mpi_init_conf(NULL, NULL, 0, MPI_COMM_WORLD, conf);
    if (ret != 0) {
        pl_watchdog_stop();
        return pl_fail(PL_STATUS_RUNTIME_ERROR, "starpu_mpi_init_conf failed (%d)", ret);
    }
    initialised = true;
    pl_watchdog_starpu_up();
    progress_worker = progress_in_worker ? starpu_worker_get_by_devid(STARPU_CPU_WORKER, 0) : -1;
    if (progress_in_worker) st = keepalive_post();
    if (st) pl_comm_starpu_shutdown();
    return st;
}

void pl_comm_starpu_shutdown(void) {
    pl_watchdog_stop();
    keepalive_end();
    progress_worker = -1;
    if (initialised) starpu_mpi_shutdown();
    initialised = false;
}

/* MPI cannot start twice in a process, so it stays up from the first
 * distributed runtime to the exit (a later runtime reuses it), and a
 * process that exits with a status still finalises (mpirun reports a
 * rank that exits without MPI_Finalize as a failure of the job). */
static void finalize_at_exit(void) {
    int done = 0;
    MPI_Finalized(&done);
    if (!done) {
        pl_watchdog_mpi_finalize();
        MPI_Comm_free(&comm_tasks);
        MPI_Comm_free(&comm_host);
        MPI_Finalize();
    }
}

int pl_comm_rank(void) { return world_rank; }
int pl_comm_size(void) { return world_size; }

struct pl_comm_group {
    MPI_Comm tasks, host; /* as the world's: the tasks' apart from the host's */
    int rank, size;
    int watch_tasks, watch_host; /* their ids for the watchdog */
};

pl_status pl_comm_group_split(int color, int key, pl_comm_group **out) {
    *out = NULL;
    if (!mpi_ready) return pl_comm_mpi_init();
    pl_comm_group *g = calloc(1, sizeof *g);
    if (!g) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory for a group of ranks");
    int w = pl_watchdog_enter(PL_WATCH_WORLD, "split of the world into groups of ranks");
    int rc = MPI_Comm_split(MPI_COMM_WORLD, color, key, &g->tasks);
    pl_watchdog_leave(w);
    if (rc != MPI_SUCCESS) {
        free(g);
        return pl_fail(PL_STATUS_RUNTIME_ERROR, "MPI_Comm_split (group %d) failed", color);
    }
    MPI_Comm_rank(g->tasks, &g->rank);
    MPI_Comm_size(g->tasks, &g->size);
    /* Every rank splits the world in the same order (the split is
     * collective over it), so the n-th split's ids agree everywhere. */
    static int splits;
    g->watch_tasks = PL_WATCH_GROUPS + 2 * splits;
    g->watch_host = g->watch_tasks + 1;
    splits++;
    int *members = malloc((size_t)g->size * 2 * sizeof *members);
    if (members) {
        MPI_Group mine, world;
        MPI_Comm_group(g->tasks, &mine);
        MPI_Comm_group(MPI_COMM_WORLD, &world);
        for (int r = 0; r < g->size; r++) members[g->size + r] = r;
        MPI_Group_translate_ranks(mine, g->size, members + g->size, world, members);
        MPI_Group_free(&mine);
        MPI_Group_free(&world);
        pl_watchdog_comm_add(g->watch_tasks, g->size, members);
        pl_watchdog_comm_add(g->watch_host, g->size, members);
        free(members);
    }
    w = pl_watchdog_enter(g->watch_tasks, "start-up of a group of ranks");
    MPI_Comm_dup(g->tasks, &g->host);
    pl_watchdog_leave(w);
    *out = g;
    return PL_STATUS_OK;
}

void pl_comm_group_free(pl_comm_group *g) {
    if (!g) return;
    pl_watchdog_comm_remove(g->watch_tasks);
    pl_watchdog_comm_remove(g->watch_host);
    int done = 0;
    MPI_Finalized(&done);
    if (!done) {
        MPI_Comm_free(&g->tasks);
        MPI_Comm_free(&g->host);
    }
    free(g);
}

int pl_comm_group_rank(const pl_comm_group *g) { return g ? g->rank : world_rank; }
int pl_comm_group_size(const pl_comm_group *g) { return g ? g->size : world_size; }
static MPI_Comm tasks_comm(const pl_comm_group *g) { return g ? g->tasks : comm_tasks; }
static MPI_Comm host_comm(const pl_comm_group *g) { return g ? g->host : comm_host; }
static int tasks_watch(const pl_comm_group *g) { return g ? g->watch_tasks : PL_WATCH_TASKS; }
static int host_watch(const pl_comm_group *g) { return g ? g->watch_host : PL_WATCH_HOST; }

void pl_comm_abort(int code) {
    int running = 0, done = 0;
    MPI_Initialized(&running);
    MPI_Finalized(&done);
    if (running && !done) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

/* Waits for a nonblocking collective without holding a core: the other
 * ranks may be seconds behind (still in their backward pass), and on a
 * machine with fewer cores than threads a spinning wait would slow the
 * very computation it waits for. MPI progresses inside MPI_Test. */
static void wait_requests_naps(int n, MPI_Request *req, bool patient) {
    /* Naps of a few µs, not the default 50 µs of timer slack: MPI moves a
     * large message in fragments, each needing a call here on both
     * ranks (measured: 4 MB reduce-scatter + all-gather 1 ms when
     * polling, over 10 ms with 50-µs naps). */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    int done = 0;
    long nap_ns = 2000;
    for (int tries = 0;; tries++) {
        MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
        if (done) return;
        if (tries < 64) {
            sched_yield();
            continue;
        }
        struct timespec ts = {0, nap_ns};
        nanosleep(&ts, NULL);
        /* A patient wait (the main thread's few values, which may wait
         * for a whole pipeline to drain on another rank) naps longer and
         * longer, up to 1 ms: 2-µs naps for a second cost a core. */
        if (patient && nap_ns < 1000000) nap_ns += nap_ns / 8 + 1;
    }
}

static void wait_request_naps(MPI_Request *req, bool patient) {
    wait_requests_naps(1, req, patient);
}
static void wait_requests(int n, MPI_Request *req) { wait_requests_naps(n, req, false); }
static void wait_request(MPI_Request *req) { wait_requests(1, req); }

pl_status pl_comm_sum(double *values, int n) {
    if (!mpi_ready || world_size == 1) return PL_STATUS_OK;
    /* Nonblocking and napping: a blocking MPI_Allreduce polls, and the
     * main thread waiting here for a slower rank would take a core from
     * the workers (measured: 88 % of a core, steps 4x slower on 2 ranks
     * sharing 2 cores). */
    MPI_Request req;
    int w = pl_watchdog_enter(PL_WATCH_HOST, "host sum over the ranks");
    int rc = MPI_Iallreduce(MPI_IN_PLACE, values, n, MPI_DOUBLE, MPI_SUM, comm_host, &req);
    if (rc == MPI_SUCCESS) wait_request_naps(&req, true);
    pl_watchdog_leave(w);
    if (rc != MPI_SUCCESS)
        return pl_fail(PL_STATUS_RUNTIME_ERROR, "MPI_Allreduce of %d values failed", n);
    return PL_STATUS_OK;
}

pl_status pl_comm_gather_floats(const pl_comm_group *g, const float *send, int n, float *recv,
                                const int *counts, const int *displs) {
    if (!mpi_ready || pl_comm_group_size(g) == 1) {
        memcpy(recv, send, (size_t)n * sizeof *send);
        return PL_STATUS_OK;
    }
    MPI_Request req;
    int w = pl_watchdog_enter(host_watch(g), "host gather of values");
    int rc = MPI_Igatherv(send, n, MPI_FLOAT, recv, counts, displs, MPI_FLOAT, 0, host_comm(g),
                          &req);
    if (rc == MPI_SUCCESS) wait_request(&req);
    pl_watchdog_leave(w);
    if (rc != MPI_SUCCESS)
        return pl_fail(PL_STATUS_RUNTIME_ERROR, "MPI_Gatherv of %d floats failed", n);
    return PL_STATUS_OK;
}

static pl_status bcast(const pl_comm_group *g, void *buf, size_t n, MPI_Datatype type,
                       int root) {
    if (!mpi_ready || pl_comm_group_size(g) == 1) return PL_STATUS_OK;
    if (n > (size_t)INT32_MAX)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "broadcast of %zu values: too many", n);
    MPI_Request req;
    int w = pl_watchdog_enter(host_watch(g), "host broadcast");
    int rc = MPI_Ibcast(buf, (int)n, type, root, host_comm(g), &req);
    if (rc == MPI_SUCCESS) wait_request(&req);
    pl_watchdog_leave(w);
    if (rc != MPI_SUCCESS)
        return pl_fail(PL_STATUS_RUNTIME_ERROR, "MPI_Bcast of %zu values failed", n);
    return PL_STATUS_OK;
}

pl_status pl_comm_bcast_floats(const pl_comm_group *g, float *buf, size_t n, int root) {
    return bcast(g, buf, n, MPI_FLOAT, root);
}

pl_status pl_comm_bcast_bytes(const pl_comm_group *g, void *buf, size_t n, int root) {
    return bcast(g, buf, n, MPI_BYTE, root);
}

pl_status pl_comm_barrier(void) {
    if (!mpi_ready || world_size == 1) return PL_STATUS_OK;
    MPI_Request req;
    int w = pl_watchdog_enter(PL_WATCH_HOST, "host barrier");
    int rc = MPI_Ibarrier(comm_host, &req);
    if (rc == MPI_SUCCESS) wait_request_naps(&req, true);
    pl_watchdog_leave(w);
    if (rc != MPI_SUCCESS) return pl_fail(PL_STATUS_RUNTIME_ERROR, "MPI_Barrier failed");
    return PL_STATUS_OK;
}

pl_status pl_comm_gather_bytes(const void *send, size_t n, void **out, size_t *out_n,
                               int *counts) {
    *out = NULL;
    *out_n = 0;
    if (n > (size_t)INT32_MAX)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "gathering %zu bytes: too many", n);
    int size = mpi_ready ? world_size : 1, mine = (int)n;
    int *all = calloc(2 * (size_t)size, sizeof *all);
    if (!all) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory gathering");
    int *displs = all + size;
    all[0] = mine;
    MPI_Request req;
    /* Its three collectives watched as one (the same three on every rank). */
    int w = size > 1 ? pl_watchdog_enter(PL_WATCH_HOST, "host gather of bytes") : -1;
    if (size > 1) {
        MPI_Igather(&mine, 1, MPI_INT, all, 1, MPI_INT, 0, comm_host, &req);
        wait_request_naps(&req, true);
    }
    size_t total = 0;
    for (int r = 0; r < size; r++) {
        displs[r] = (int)total;
        total += (size_t)all[r];
    }
    /* Rank 0 allocates, then tells everyone whether it could, so that a
     * failure there leaves no rank waiting in the gather. */
    char *buf = world_rank == 0 || size == 1 ? malloc(total ? total : 1) : NULL;
    int ok = world_rank != 0 || buf != NULL;
    if (size > 1) {
        MPI_Ibcast(&ok, 1, MPI_INT, 0, comm_host, &req);
        wait_request_naps(&req, true);
    }
    if (!ok) {
        pl_watchdog_leave(w);
        free(all);
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory gathering %zu bytes on rank 0",
                       total);
    }
    if (size > 1) {
        MPI_Igatherv(send, mine, MPI_BYTE, buf, all, displs, MPI_BYTE, 0, comm_host, &req);
        wait_request_naps(&req, true);
    } else {
        memcpy(buf, send, n);
    }
    pl_watchdog_leave(w);
    if (buf) {
        *out = buf;
        *out_n = total;
        for (int r = 0; counts && r < size; r++) counts[r] = all[r];
    }
    free(all);
    return PL_STATUS_OK;
}

pl_status pl_comm_send_handle(starpu_data_handle_t h, int dest, int64_t tag) {
    if (starpu_mpi_isend_detached(h, dest, (starpu_mpi_tag_t)tag, MPI_COMM_WORLD, NULL,
                                  NULL) != 0)
        return pl_fail(PL_STATUS_RUNTIME_ERROR, "StarPU-MPI: cannot send to rank %d", dest);
    return PL_STATUS_OK;
}

pl_status pl_comm_recv_handle(starpu_data_handle_t h, int source, int64_t tag) {
    if (starpu_mpi_irecv_detached(h, source, (starpu_mpi_tag_t)tag, MPI_COMM_WORLD, NULL,
                                  NULL) != 0)
        return pl_fail(PL_STATUS_RUNTIME_ERROR, "StarPU-MPI: cannot receive from rank %d",
                       source);
    return PL_STATUS_OK;
}

pl_status pl_comm_first_difference(const uint64_t *values, int n, int *first) {
    *first = -1;
    if (!mpi_ready || world_size == 1) return PL_STATUS_OK;
    uint64_t *lo = malloc(2 * (size_t)n * sizeof *lo);
    if (!lo) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory comparing ranks");
    uint64_t *hi = lo + n;
    /* Nonblocking, so that the watchdog sees a rank that never comes
     * (this is the first exchange of a job's start-up). */
    MPI_Request req[2];
    int w = pl_watchdog_enter(PL_WATCH_HOST, "start-up comparison of the ranks' settings");
    int rc = MPI_Iallreduce(values, lo, n, MPI_UINT64_T, MPI_MIN, comm_host, &req[0]);
    if (rc == MPI_SUCCESS)
        rc = MPI_Iallreduce(values, hi, n, MPI_UINT64_T, MPI_MAX, comm_host, &req[1]);
    if (rc == MPI_SUCCESS) wait_requests_naps(2, req, true);
    pl_watchdog_leave(w);
    for (int i = 0; rc == MPI_SUCCESS && i < n && *first < 0; i++)
        if (lo[i] != hi[i]) *first = i;
    free(lo);
    return rc == MPI_SUCCESS ? PL_STATUS_OK
                             : pl_fail(PL_STATUS_RUNTIME_ERROR, "comparing ranks: MPI failed");
}

static void scale(float *x, size_t n, float f) {
    for (size_t i = 0; i < n; i++) x[i] *= f;
}

/* out[0, counts[rank]) := the sum over comm's ranks of their x[displs[rank]
 * ...], by a ring: at step s rank r passes its partial sum of block
 * r-s-1 to rank r+1 and adds its own values to the partial of block r-s-2
 * from rank r-1, so after size-1 steps it holds block r whole. Each rank
 * sends and sums (size-1)/size of the vector. Open MPI 4.1's nonblocking
 * MPI_Ireduce_scatter (libnbc) reduces the whole vector on rank 0 and
 * scatters it: twice the bytes into rank 0, all the sums on one rank
 * (4 MB over 2 ranks: 0.49 ms against the ring's 0.27, best of 30
 * between idle processes; 1.05-1.5 ms against 0.36-1.1 inside bench_dp's
 * MLP steps, both ranks in). Its blocking MPI_Reduce_scatter has a ring but spins a core
 * while the other rank is still computing. The order of the sums is
 * fixed: x_r + (x_{r-1} + (... + x_{r+1})), the same every step. x is
 * only read; out may be x + displs[rank]. */
static void ring_reduce_scatter(const float *x, float *out, const int *counts,
                                const int *displs, MPI_Comm comm, int rank, int size) {
    int most = 0;
    for (int r = 0; r < size; r++)
        if (counts[r] > most) most = counts[r];
    /* What arrives, and (from step 1 on) the partial sum to pass on. */
    float *in = malloc(2 * (size_t)(most ? most : 1) * sizeof *in);
    if (!in) abort(); /* a shard of the bucket: out of memory */
    float *partial = in + most;
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    for (int s = 0; s < size - 1; s++) {
        int give = ((rank - s - 1) % size + size) % size;
        int take = ((rank - s - 2) % size + size) % size;
        const float *send = s == 0 ? x + displs[give] : partial;
        MPI_Request req[2];
        MPI_Irecv(in, counts[take], MPI_FLOAT, prev, 0, comm, &req[0]);
        MPI_Isend(send, counts[give], MPI_FLOAT, next, 0, comm, &req[1]);
        wait_requests(2, req);
        const float *mine = x + displs[take];
        float *sum = s == size - 2 ? out : partial;
        for (int i = 0; i < counts[take]; i++) sum[i] = mine[i] + in[i];
    }
    if (size == 1) memmove(out, x + displs[rank], (size_t)counts[rank] * sizeof *out);
    free(in);
}

/* x[n] := the sum (or max) over g's ranks of every member's x, in rank
 * order. */
static void combine_f64(const pl_comm_group *g, double *x, size_t n, bool max) {
    int size = pl_comm_group_size(g);
    double *all = malloc((size_t)size * n * sizeof *all);
    if (!all) abort(); /* a few doubles per chunk */
    MPI_Request req;
    MPI_Iallgather(x, (int)n, MPI_DOUBLE, all, (int)n, MPI_DOUBLE, tasks_comm(g), &req);
    wait_request(&req);
    for (size_t i = 0; i < n; i++) {
        double v = all[i];
        for (int r = 1; r < size; r++) {
            double w = all[(size_t)r * n + i];
            v = max ? (w > v || isnan(w) ? w : v) : v + w;
        }
        x[i] = v;
    }
    free(all);
}

/* The last collective task's wait on this thread (pl_comm_task_wait_us):
 * the task's callback reads it on the same worker right after. */
static _Thread_local double last_wait_us, last_wait_begin_s, last_wait_end_s;

double pl_comm_task_wait_us(void) { return last_wait_us; }

void pl_comm_task_wait_span(double *begin_s, double *end_s) {
    *begin_s = last_wait_begin_s;
    *end_s = last_wait_end_s;
}

/* What the watchdog names a collective task by. */
static const char *kind_name(pl_collective_kind kind) {
    switch (kind) {
    case PL_COLLECTIVE_ALLREDUCE_MEAN: return "gradient all-reduce";
    case PL_COLLECTIVE_REDUCE_SCATTER_MEAN: return "ZeRO gradient reduce-scatter";
    case PL_COLLECTIVE_ALLGATHER: return "ZeRO parameter all-gather";
    case PL_COLLECTIVE_SUM_F64: return "all-reduce of partial sums";
    case PL_COLLECTIVE_MAX_F64: return "all-reduce of partial maxima";
    case PL_COLLECTIVE_GATHER_SHARDS: return "ZeRO-3 parameter gather";
    case PL_COLLECTIVE_ALLREDUCE_SUM: return "all-reduce of shared-chunk gradients";
    }
    return "collective task";
}

static void collective_run(void *buffers[], const pl_collective_args *a);

/* The task: its whole run watched, from its barrier to its last byte. */
static void collective_cpu(void *buffers[], void *cl_arg) {
    const pl_collective_args *a = cl_arg;
    int w = pl_watchdog_enter(tasks_watch(a->group), kind_name(a->kind));
    collective_run(buffers, a);
    pl_watchdog_leave(w);
}

static void collective_run(void *buffers[], const pl_collective_args *a) {
    struct starpu_task *task = starpu_task_get_current();
    /* First a barrier, waited for patiently: the other ranks may be a
     * whole backward pass behind (pipeline stages finish theirs one after
     * the other), and fast polling all that time costs a core. Once all
     * are here, the data moves with fast polling. */
    MPI_Request arrived;
    MPI_Comm comm = tasks_comm(a->group);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    MPI_Ibarrier(comm, &arrived);
    wait_request_naps(&arrived, true);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    last_wait_us = (double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3;
    last_wait_begin_s = (double)t0.tv_sec + (double)t0.tv_nsec * 1e-9;
    last_wait_end_s = (double)t1.tv_sec + (double)t1.tv_nsec * 1e-9;
    /* The token is last, the ordering handles before it. */
    int n_buffers = (int)STARPU_TASK_GET_NBUFFERS(task) - 1 - a->n_order;
    if (a->kind == PL_COLLECTIVE_SUM_F64 || a->kind == PL_COLLECTIVE_MAX_F64) {
        for (int b = 0; b < n_buffers; b++)
            combine_f64(a->group, (double *)STARPU_VECTOR_GET_PTR(buffers[b]),
                        STARPU_VECTOR_GET_NX(buffers[b]), a->kind == PL_COLLECTIVE_MAX_F64);
        return;
    }
    int size = pl_comm_group_size(a->group), rank = pl_comm_group_rank(a->group);
    int *counts = malloc(2 * (size_t)size * sizeof *counts);
    if (!counts) abort(); /* a few ints; nothing sane to do without them */
    int *displs = counts + size;
    float inv = 1.0f / (float)size;
    bool pairs = a->kind == PL_COLLECTIVE_REDUCE_SCATTER_MEAN ||
                 a->kind == PL_COLLECTIVE_GATHER_SHARDS ||
                 a->kind == PL_COLLECTIVE_ALLREDUCE_SUM;
    int step = pairs ? 2 : 1;
    if (a->kind == PL_COLLECTIVE_GATHER_SHARDS) {
        for (int b = n_buffers - a->n_zero; b < n_buffers; b++)
            memset((void *)STARPU_VECTOR_GET_PTR(buffers[b]), 0,
                   STARPU_VECTOR_GET_NX(buffers[b]) * STARPU_VECTOR_GET_ELEMSIZE(buffers[b]));
        n_buffers -= a->n_zero;
    }
    for (int b = 0; b + step - 1 < n_buffers; b += step) {
        /* The full vector: the second of a gather's or a sum's pair (a
         * sum starts from this rank's own vector), else buffer b. */
        int full = a->kind == PL_COLLECTIVE_GATHER_SHARDS ||
                           a->kind == PL_COLLECTIVE_ALLREDUCE_SUM
                       ? b + 1
                       : b;
        size_t n = STARPU_VECTOR_GET_NX(buffers[full]);
        size_t elem = STARPU_VECTOR_GET_ELEMSIZE(buffers[full]);
        void *raw = (void *)STARPU_VECTOR_GET_PTR(buffers[full]);
        if (a->kind == PL_COLLECTIVE_ALLREDUCE_SUM) {
            /* The sum starts from this rank's own vector (widened when it
             * is 16-bit and the sum fp32). */
            const void *own = (const void *)STARPU_VECTOR_GET_PTR(buffers[b]);
            if (STARPU_VECTOR_GET_ELEMSIZE(buffers[b]) == elem) memcpy(raw, own, n * elem);
            else pl_half_to_float(a->bf16, own, raw, (int64_t)n);
        }
        /* 16-bit values: gathers move their bits; sums run on an fp32
         * copy and round once at the end. */
        bool half = elem == sizeof(uint16_t);
        bool gather = a->kind == PL_COLLECTIVE_ALLGATHER ||
                      a->kind == PL_COLLECTIVE_GATHER_SHARDS;
        MPI_Datatype type = half ? MPI_UINT16_T : MPI_FLOAT;
        float *wide = NULL, *x = raw;
        if (half && !gather) {
            wide = malloc((n ? n : 1) * sizeof *wide);
            if (!wide) abort(); /* as large as the gradient bucket: out of memory */
            pl_half_to_float(a->bf16, raw, wide, (int64_t)n);
            x = wide;
        }
        for (int r = 0; r < size; r++) {
            size_t lo, hi;
            pl_comm_shard(n, size, r, &lo, &hi);
            counts[r] = (int)(hi - lo);
            displs[r] = (int)lo;
        }
        MPI_Request req;
        switch (a->kind) {
        case PL_COLLECTIVE_ALLREDUCE_MEAN:
        case PL_COLLECTIVE_ALLREDUCE_SUM:
            ring_reduce_scatter(x, x + displs[rank], counts, displs, comm, rank, size);
            if (a->kind == PL_COLLECTIVE_ALLREDUCE_MEAN)
                scale(x + displs[rank], (size_t)counts[rank], inv);
            MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, counts, displs, MPI_FLOAT,
                            comm, &req);
            wait_request(&req);
            if (wide) pl_half_from_float(a->bf16, wide, raw, (int64_t)n);
            break;
        case PL_COLLECTIVE_REDUCE_SCATTER_MEAN: {
            void *dst = (void *)STARPU_VECTOR_GET_PTR(buffers[b + 1]);
            bool half_dst = STARPU_VECTOR_GET_ELEMSIZE(buffers[b + 1]) == sizeof(uint16_t);
            /* A 16-bit shard is rounded from its fp32 mean (in the copy's
             * first counts[rank] values, free once the sum has read them). */
            float *shard = half_dst ? (wide ? wide : malloc((n ? n : 1) * sizeof *shard)) : dst;
            if (!shard) abort();
            ring_reduce_scatter(x, shard, counts, displs, comm, rank, size);
            scale(shard, (size_t)counts[rank], inv);
            if (half_dst) pl_half_from_float(a->bf16, shard, dst, counts[rank]);
            if (shard != dst && shard != wide) free(shard);
            break;
        }
        case PL_COLLECTIVE_ALLGATHER:
            MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, raw, counts, displs, type,
                            comm, &req);
            wait_request(&req);
            break;
        case PL_COLLECTIVE_GATHER_SHARDS: {
            const void *shard = (const void *)STARPU_VECTOR_GET_PTR(buffers[b]);
            MPI_Iallgatherv(shard, counts[rank], type, raw, counts, displs, type, comm, &req);
            wait_request(&req);
            break;
        }
        default: /* the f64 kinds returned above */
            break;
        }
        free(wide);
    }
    free(counts);
}

#else /* no MPI in this build */

pl_status pl_comm_mpi_init(void) {
    return pl_fail(PL_STATUS_UNSUPPORTED,
                   "this build of Pleiades has no MPI (its StarPU has no StarPU-MPI, or "
                   "libopenmpi-dev was missing when it was configured)");
}
pl_status pl_comm_starpu_init(struct starpu_conf *conf, bool progress_in_worker) {
    (void)progress_in_worker;
    (void)conf;
    return pl_comm_mpi_init();
}
void pl_comm_starpu_shutdown(void) {}
int pl_comm_progress_worker(void) { return -1; }
double pl_comm_task_wait_us(void) { return 0.0; }
void pl_comm_task_wait_span(double *begin_s, double *end_s) { *begin_s = *end_s = 0.0; }
int pl_comm_rank(void) { return 0; }
int pl_comm_size(void) { return 1; }
void pl_comm_abort(int code) { exit(code); }
pl_status pl_comm_sum(double *values, int n) {
    (void)values;
    (void)n;
    return PL_STATUS_OK;
}
pl_status pl_comm_group_split(int color, int key, pl_comm_group **out) {
    (void)color, (void)key;
    *out = NULL;
    return pl_comm_mpi_init();
}
void pl_comm_group_free(pl_comm_group *g) { (void)g; }
int pl_comm_group_rank(const pl_comm_group *g) {
    (void)g;
    return 0;
}
int pl_comm_group_size(const pl_comm_group *g) {
    (void)g;
    return 1;
}
pl_status pl_comm_gather_floats(const pl_comm_group *g, const float *send, int n, float *recv,
                                const int *counts, const int *displs) {
    (void)g, (void)counts;
    (void)displs;
    memcpy(recv, send, (size_t)n * sizeof *send);
    return PL_STATUS_OK;
}
pl_status pl_comm_bcast_floats(const pl_comm_group *g, float *buf, size_t n, int root) {
    (void)g, (void)buf, (void)n, (void)root;
    return PL_STATUS_OK;
}
pl_status pl_comm_bcast_bytes(const pl_comm_group *g, void *buf, size_t n, int root) {
    (void)g, (void)buf, (void)n, (void)root;
    return PL_STATUS_OK;
}
pl_status pl_comm_barrier(void) { return PL_STATUS_OK; }
pl_status pl_comm_gather_bytes(const void *send, size_t n, void **out, size_t *out_n,
                               int *counts) {
    *out = malloc(n ? n : 1);
    *out_n = *out ? n : 0;
    if (!*out) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory gathering");
    memcpy(*out, send, n);
    if (counts) counts[0] = (int)n;
    return PL_STATUS_OK;
}
pl_status pl_comm_send_handle(starpu_data_handle_t h, int dest, int64_t tag) {
    (void)h, (void)dest, (void)tag;
    return pl_comm_mpi_init();
}
pl_status pl_comm_recv_handle(starpu_data_handle_t h, int source, int64_t tag) {
    (void)h, (void)source, (void)tag;
    return pl_comm_mpi_init();
}
pl_status pl_comm_first_difference(const uint64_t *values, int n, int *first) {
    (void)values;
    (void)n;
    *first = -1;
    return PL_STATUS_OK;
}
static void collective_cpu(void *buffers[], void *cl_arg) {
    (void)buffers;
    (void)cl_arg;
    abort(); /* unreachable: no engine has dp > 1 without MPI */
}

#endif

struct starpu_codelet pl_cl_collective = {
    .cpu_funcs = {collective_cpu},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "collective",
};
