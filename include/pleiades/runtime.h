/*
 * pleiades/runtime.h — StarPU's lifetime: workers, devices, memory tiers
 * (part of pleiades.h).
 *
 *   pl_runtime_options ro = pl_runtime_options_default();
 *   ro.cpu_workers = 2;                 // at most pl_runtime_max_cpu_workers()
 *   ro.compute_budget_mb = 64;          // optional: a memory budget ...
 *   ro.offload_dir = "/tmp/swap";       // ... and a disk tier behind it
 *   pl_runtime_t *rt = pl_runtime_new(&ro);
 *   ...
 *   pl_runtime_free(rt);
 */
#ifndef PLEIADES_RUNTIME_H
#define PLEIADES_RUNTIME_H

#include <stdint.h>

#include "pleiades/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --------------------------------------------------------------- runtime */

typedef struct pl_runtime pl_runtime_t;

typedef enum pl_device {
    PL_DEVICE_CPU = 0, /* CPU workers only */
    PL_DEVICE_CUDA,    /* CUDA workers (every built-in op has a CUDA codelet),
                          plus CPU workers for host work only */
    PL_DEVICE_AUTO,    /* CUDA workers when StarPU found GPUs, plus CPUs */
} pl_device;

/* Pointers in the options: pl_runtime_new reads the strings (sched_policy,
 * offload_dir) while it runs and keeps copies where it needs them, so they
 * may be freed as soon as it returns. */
/* Who polls MPI for StarPU-MPI on a distributed run (its transfers carry
 * activations and their gradients between pipeline stages). StarPU-MPI
 * polls from a progression thread of its own; beside one compute worker
 * per core that thread takes a share of some worker's core (2 ranks
 * sharing 2 cores: stage 0's tasks ran 17-20 % slower across ranks than
 * in one process). WORKER has that thread run the first compute worker
 * itself, one task between two polls (StarPU-MPI's "MPI driver"; Pleiades
 * sets STARPU_MPI_DRIVER_CALL_FREQUENCY and _TASK_FREQUENCY from this
 * option): one thread per core, transfers progressed between tasks. AUTO
 * is WORKER on CPU runs of several ranks and THREAD otherwise (CUDA runs,
 * one rank); pl_runtime_mpi_progress says which is in force. */
typedef enum pl_mpi_progress {
    PL_MPI_PROGRESS_AUTO = 0,
    PL_MPI_PROGRESS_THREAD, /* StarPU-MPI's own thread, beside the workers */
    PL_MPI_PROGRESS_WORKER, /* that thread also runs the first compute worker */
} pl_mpi_progress;

typedef struct pl_runtime_options {
    int cpu_workers;         /* StarPU CPU workers; 0 = StarPU's default.
                                PL_DEVICE_CUDA: 0 = one; they run only what
                                a GPU cannot: optimizer updates a placement
                                keeps on the host (the "cpu" preset,
                                offload_optim_frac), ZeRO's cpu_offload,
                                ops without a CUDA kernel */
    pl_device device;        /* default PL_DEVICE_CPU, or what the
                                environment's PLEIADES_DEVICE names */
    int cuda_workers;        /* CUDA workers (GPUs) for cuda/auto; 0 = all */
    const char *sched_policy;/* StarPU policy name; NULL = Pleiades' own
                                ("pleiades", needed by pipeline schedules) */
    bool profiling;          /* enable StarPU profiling (task timings) */
    /* Memory tiers (see "memory placement" below). The compute tier is a
     * GPU's memory on CUDA runs and main RAM on CPU-only runs. */
    int64_t compute_budget_mb; /* compute-tier budget, 0 = the whole device */
    int64_t host_budget_mb;    /* host RAM budget on CUDA runs, 0 = all */
    /* Disk tier (StarPU's disk node), or NULL. The run's files go in a
     * folder of its own there, "pleiades-offload-<pid>", removed when the
     * runtime is freed or, should the process die, by a child process
     * forked by pl_runtime_new that waits for it; the next runtime on the
     * same directory removes dead runs' folders. At least 32 MiB must be
     * free there (the tier uses at most half). Each file is allocated in
     * full when created: should the disk fill up regardless, the process
     * prints the directory and the bytes to stderr and exits with status 1
     * (StarPU's allocation cannot fail a task). */
    const char *offload_dir;
    /* Data parallelism over processes (run under mpirun): start MPI and
     * StarPU-MPI. Each process is a rank with its own StarPU; with more
     * than one rank the runtime adds one CPU worker that runs only the
     * gradient collectives (cpu_workers counts the compute workers, so at
     * most pl_runtime_max_cpu_workers() - 1 then). Unless the environment
     * binds workers itself (STARPU_WORKERS_CPUID, STARPU_WORKERS_NOBIND),
     * the ranks of one host bind their workers to distinct cores, and
     * cpu_workers 0 means this rank's share of the host's cores. MPI stays
     * up until the process exits (it cannot start twice). */
    bool distributed;
    pl_mpi_progress mpi_progress; /* distributed runs: see pl_mpi_progress */
    /* StarPU's own informational messages and warnings on stderr: false
     * (the default) silences them, as STARPU_SILENT=1 does, unless the
     * environment sets STARPU_SILENT itself; StarPU's errors print always. */
    bool starpu_messages;
    /* Distributed runs: a rank that waits in one collective (a gradient
     * reduction, ZeRO's gathers, a host exchange, the start-up's checks)
     * longer than this many seconds asks the ranks it waits for; those
     * that do not answer (a stopped or hung process) or have made no
     * progress for half of it (no task, no collective) are named with the
     * collective on stderr and the job ends (MPI_Abort, status 1). Ranks
     * that are late but still working (or waiting for ranks that are) are
     * waited for another timeout, so it bounds each collective wait from
     * the late ranks' last progress, not a step. Default 300; 0 = off (the rank still answers others).
     * Applies from the runtime's start to its end (the process's last
     * runtime's setting). */
    double collective_timeout_s;
    /* The order of a dp x pp grid's ranks (pl_engine_options dp and pp),
     * with Colossal-AI HybridParallelPlugin's meaning and default: true,
     * data-parallel groups outermost, rank = replica·pp + stage (a
     * replica's pipeline is a run of consecutive ranks: dp 2 x pp 2 puts
     * ranks 0 and 1 on replica 0's stages 0 and 1); false, rank =
     * stage·dp + replica (a stage's data-parallel group is consecutive:
     * ranks 0 and 1 are replicas 0 and 1 of stage 0). Every rank must
     * give the same. See pl_runtime_grid_rank. */
    bool dp_outside;
} pl_runtime_options;

pl_runtime_options pl_runtime_options_default(void);

/* Starts StarPU. Only one runtime may exist at a time in a process.
 * Returns NULL on failure (see pl_last_error()). The caller owns it and
 * frees it with pl_runtime_free after every engine built on it. */
pl_runtime_t *pl_runtime_new(const pl_runtime_options *options);
/* Waits for all tasks and shuts StarPU down. NULL is ignored; refused (a
 * message on stderr, StarPU left running) while an engine built on it is
 * live, and for a runtime already freed. */
void pl_runtime_free(pl_runtime_t *rt);
/* This process's rank and the number of ranks (0 and 1 unless
 * distributed). */
int pl_runtime_rank(const pl_runtime_t *rt);
int pl_runtime_world_size(const pl_runtime_t *rt);
/* A dp x pp grid over the ranks (pl_runtime_options.dp_outside): the
 * rank running stage `stage` of data-parallel replica `replica`, and a
 * rank's replica and stage. dp or pp below 1 count as 1. */
int pl_runtime_grid_rank(const pl_runtime_t *rt, int dp, int pp, int replica, int stage);
int pl_runtime_grid_replica(const pl_runtime_t *rt, int dp, int pp, int rank);
int pl_runtime_grid_stage(const pl_runtime_t *rt, int dp, int pp, int rank);
/* How StarPU-MPI's communication progresses in this runtime (AUTO
 * resolved: THREAD or WORKER; THREAD when not distributed). */
pl_mpi_progress pl_runtime_mpi_progress(const pl_runtime_t *rt);
/* Ends every rank of a distributed job with `code` (MPI_Abort), or this
 * process (exit) otherwise: after a failure on one rank, the others would
 * wait in their next collective forever. */
void pl_runtime_abort(const pl_runtime_t *rt, int code);
/* Collective over the ranks of a distributed runtime: fails with an
 * INVALID_ARGUMENT naming names[i] for the first i whose values[i] (a
 * hash of a setting) differs between ranks; OK on every rank when all
 * agree, and always on a single process. Every rank must call it with the
 * same n. */
pl_status pl_runtime_check_same(const pl_runtime_t *rt, const char *const *names,
                                const uint64_t *values, int n);
/* Collective: every rank's n values, in rank order, into all[world_size
 * · n] on rank 0 (the other ranks' `all` is not touched and may be NULL);
 * a single process copies its own. Every rank must call it with the same
 * n (0 <= n <= 4096). For figures each rank measured that rank 0 reports
 * (per-rank memory, say). */
pl_status pl_runtime_gather(const pl_runtime_t *rt, const double *values, int n, double *all);
/* Number of StarPU CPU / CUDA workers actually running (compute workers:
 * a distributed runtime's communication worker is not counted). */
int pl_runtime_cpu_workers(const pl_runtime_t *rt);
int pl_runtime_cuda_workers(const pl_runtime_t *rt);
/* The most CPU workers this build's StarPU can run (its STARPU_MAXCPUS:
 * 4 in Debian's build); pl_runtime_new refuses more. */
int pl_runtime_max_cpu_workers(void);
/* Whether this build's StarPU has CUDA support at all. */
bool pl_runtime_cuda_available(void);

#ifdef __cplusplus
}
#endif

#endif /* PLEIADES_RUNTIME_H */
