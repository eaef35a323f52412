/* The runtime: StarPU's lifetime. StarPU is a process-wide singleton, so
 * only one runtime may exist at a time. */
#include <cblas.h>
#include <starpu.h>
#ifdef STARPU_USE_CUDA
#include <starpu_cublas_v2.h>
#endif
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "collectives/comm.h"
#include "collectives/watchdog.h"
#include "engine/engine_internal.h"
#include "engine/offload.h"
#include "engine/placement.h"
#include "graph/error.h"
#include "util/live_set.h"

static bool runtime_alive;
/* The runtime pl_runtime_new made, until pl_runtime_free: a second free
 * (or a stray pointer) is told from it by address, without reading it. */
static pl_runtime_t *live_runtime;

/* Sets a STARPU_LIMIT_* variable for starpu_init (mb > 0) or clears it,
 * keeping the caller's value to restore afterwards. */
static void set_limit(const char *var, int64_t mb, char *saved, size_t size) {
    const char *old = getenv(var);
    snprintf(saved, size, "%s", old ? old : "");
    if (mb > 0) {
        char v[32];
        snprintf(v, sizeof v, "%lld", (long long)mb);
        setenv(var, v, 1);
    }
}

static void restore_limit(const char *var, const char *saved) {
    if (*saved)
        setenv(var, saved, 1);
    else
        unsetenv(var);
}

/* PLEIADES_DEVICE=cpu|cuda|auto changes the default device, so that a
 * whole test suite or benchmark can be run on GPUs without editing it. */
static pl_device default_device(void) {
    const char *env = getenv("PLEIADES_DEVICE");
    if (env && strcmp(env, "cuda") == 0) return PL_DEVICE_CUDA;
    if (env && strcmp(env, "auto") == 0) return PL_DEVICE_AUTO;
    return PL_DEVICE_CPU;
}

/* A distributed rank's CPU workers: its compute workers plus the
 * communication worker. Unless the environment binds workers itself, the
 * ranks of a host take distinct cores (rank-local index × workers), and
 * the communication worker the core after them (the next rank's first,
 * rank 0's last for the last rank): it mostly sleeps waiting for the
 * other ranks (collectives/comm.c), and asks to preempt that core's
 * compute worker when it wakes (scheduling/policy.c). */
static void set_distributed_workers(struct starpu_conf *conf, const pl_runtime_options *o) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) cores = 1;
    int compute = o->cpu_workers;
    if (compute == 0) {
        compute = (int)(cores / pl_comm_local_size());
        if (compute < 1) compute = 1;
        if (compute > STARPU_MAXCPUS - 1) compute = STARPU_MAXCPUS - 1;
    }
    /* CUDA: CPU workers for host work only (pl_runtime_new), one unless asked. */
    if (o->device == PL_DEVICE_CUDA) compute = o->cpu_workers > 0 ? o->cpu_workers : 1;
    conf->ncpus = compute + 1;
    if (o->device != PL_DEVICE_CPU || getenv("STARPU_WORKERS_CPUID") ||
        getenv("STARPU_WORKERS_NOBIND"))
        return;
    conf->use_explicit_workers_bindid = 1;
    int first = pl_comm_local_rank() * compute;
    for (int i = 0; i < compute; i++)
        conf->workers_bindid[i] = (unsigned)((first + i) % cores);
    conf->workers_bindid[compute] = (unsigned)((first + compute) % cores);
}

pl_runtime_options pl_runtime_options_default(void) {
    return (pl_runtime_options){.cpu_workers = 0, .device = default_device(),
                                .cuda_workers = 0, .sched_policy = NULL,
                                .profiling = false, .compute_budget_mb = 0,
                                .host_budget_mb = 0, .offload_dir = NULL,
                                .distributed = false,
                                .mpi_progress = PL_MPI_PROGRESS_AUTO,
                                .starpu_messages = false,
                                .collective_timeout_s = 300.0, .dp_outside = true};
}

static pl_runtime_t *runtime_new(pl_runtime_options o);

/* StarPU's informational messages go to stderr unless STARPU_SILENT is
 * set. Under a memory placement they are routine (StarPU purging buffers
 * to keep within a budget the user chose, hints about pinned memory for
 * transfers to the disk tier) yet read like failures ("Your application
 * data set seems too huge to fit"), and Pleiades reports placement,
 * memory and transfers itself; so they are off unless asked for
 * (starpu_messages). A STARPU_SILENT the environment sets, 0 included,
 * is kept. StarPU reads the variable while it starts (starpu_init,
 * StarPU-MPI's init) and keeps the answer, so it is set only for that
 * time: the caller's environment is left as it was. */
pl_runtime_t *pl_runtime_new(const pl_runtime_options *options) {
    pl_runtime_options o = options ? *options : pl_runtime_options_default();
    bool silence = !o.starpu_messages && !getenv("STARPU_SILENT");
    if (silence) setenv("STARPU_SILENT", "1", 1);
    pl_runtime_t *rt = runtime_new(o);
    if (silence) unsetenv("STARPU_SILENT");
    return rt;
}

static pl_runtime_t *runtime_new(pl_runtime_options o) {
    if (runtime_alive) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT,
                "pl_runtime_new: a runtime already exists in this process");
        return NULL;
    }
    if (!(o.collective_timeout_s >= 0) || !isfinite(o.collective_timeout_s)) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT,
                "pl_runtime_new: collective_timeout_s %g: expected seconds >= 0 (0 = off)",
                o.collective_timeout_s);
        return NULL;
    }
    /* Distributed: MPI first, since the world's size decides whether a
     * communication worker is needed. */
    int world = 1;
    if (o.distributed) {
        pl_watchdog_set_timeout(o.collective_timeout_s);
        if (pl_comm_mpi_init()) return NULL;
        world = pl_comm_size();
    }
    int comm_workers = world > 1 ? 1 : 0;
    if (o.cpu_workers < 0 || o.cpu_workers > STARPU_MAXCPUS - comm_workers) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT,
                "pl_runtime_new: cpu_workers %d out of range [0, %d] (this "
                "StarPU build supports at most %d CPU workers%s)",
                o.cpu_workers, STARPU_MAXCPUS - comm_workers, STARPU_MAXCPUS,
                comm_workers ? ", one of which runs the collectives of a distributed job"
                             : "");
        return NULL;
    }
    if (o.mpi_progress < PL_MPI_PROGRESS_AUTO || o.mpi_progress > PL_MPI_PROGRESS_WORKER) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT,
                "pl_runtime_new: bad mpi_progress %d (PL_MPI_PROGRESS_AUTO, _THREAD or "
                "_WORKER)", (int)o.mpi_progress);
        return NULL;
    }
    if (o.device < PL_DEVICE_CPU || o.device > PL_DEVICE_AUTO || o.cuda_workers < 0) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT,
                "pl_runtime_new: bad device %d or cuda_workers %d", (int)o.device,
                o.cuda_workers);
        return NULL;
    }
#ifndef STARPU_USE_CUDA
    if (o.device == PL_DEVICE_CUDA) {
        pl_fail(PL_STATUS_UNSUPPORTED,
                "pl_runtime_new: CUDA requested, but this StarPU was built without "
                "CUDA (Debian's is CPU-only): build one with scripts/build-starpu-cuda "
                "and configure Pleiades with -DPLEIADES_STARPU_PREFIX=build/starpu-cuda");
        return NULL;
    }
#endif
    pl_runtime_t *rt = calloc(1, sizeof *rt);
    if (!rt) {
        pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_runtime_new: out of memory");
        return NULL;
    }
    if (o.compute_budget_mb < 0 || o.host_budget_mb < 0) {
        free(rt);
        pl_fail(PL_STATUS_INVALID_ARGUMENT,
                "pl_runtime_new: memory budgets must be >= 0 MB (compute %lld, host %lld)",
                (long long)o.compute_budget_mb, (long long)o.host_budget_mb);
        return NULL;
    }
    /* A file given as the directory: access() would say "Permission
     * denied" (no search bit) or pass, which names the wrong fault. */
    struct stat dir_st;
    if (o.offload_dir && stat(o.offload_dir, &dir_st) == 0 && !S_ISDIR(dir_st.st_mode)) {
        free(rt);
        pl_fail(PL_STATUS_IO_ERROR, "pl_runtime_new: offload directory '%s': not a directory "
                "(%s)", o.offload_dir, S_ISREG(dir_st.st_mode) ? "a regular file" : "a special file");
        return NULL;
    }
    if (o.offload_dir && access(o.offload_dir, W_OK | X_OK) != 0) {
        free(rt);
        pl_fail(PL_STATUS_IO_ERROR, "pl_runtime_new: offload directory '%s': %s",
                o.offload_dir, strerror(errno));
        return NULL;
    }
    /* The disk tier may use half of the space free there now (the rest
     * stays for checkpoints and everything else on that filesystem), and
     * that must reach StarPU's minimum for a disk, which it asserts. */
    int64_t offload_free = 0;
    if (o.offload_dir) {
        struct statvfs fs;
        if (statvfs(o.offload_dir, &fs) != 0) {
            free(rt);
            pl_fail(PL_STATUS_IO_ERROR, "pl_runtime_new: offload directory '%s': %s",
                    o.offload_dir, strerror(errno));
            return NULL;
        }
        offload_free = (int64_t)fs.f_bavail * (int64_t)fs.f_frsize;
        if (offload_free / 2 < STARPU_DISK_SIZE_MIN) {
            free(rt);
            pl_fail(PL_STATUS_IO_ERROR,
                    "pl_runtime_new: offload directory '%s': %lld bytes free (%.1f MiB); the "
                    "disk tier uses at most half of the free space and needs at least %d MiB "
                    "(StarPU's minimum for a disk), so at least %d MiB must be free there",
                    o.offload_dir, (long long)offload_free, offload_free / 1048576.0,
                    STARPU_DISK_SIZE_MIN >> 20, 2 * (STARPU_DISK_SIZE_MIN >> 20));
            return NULL;
        }
    }
    /* StarPU reads its memory limits from the environment at init: the
     * compute tier is the GPU on CUDA runs, main RAM otherwise. */
    bool on_gpu = o.device == PL_DEVICE_CUDA;
    char saved_cpu[64] = "", saved_cuda[64] = "";
    set_limit("STARPU_LIMIT_CPU_MEM", on_gpu ? o.host_budget_mb : o.compute_budget_mb,
              saved_cpu, sizeof saved_cpu);
    set_limit("STARPU_LIMIT_CUDA_MEM", on_gpu ? o.compute_budget_mb : 0, saved_cuda,
              sizeof saved_cuda);
    struct starpu_conf conf;
    starpu_conf_init(&conf);
    if (o.cpu_workers > 0) conf.ncpus = o.cpu_workers;
    /* cuda: every built-in codelet has a CUDA implementation; the CPU
     * workers (one unless asked for more) take host work alone
     * (pl_sched_set_cpu_host_only below), so none competes with the GPUs,
     * and an idle one sleeps. Host work: updates a placement keeps off the
     * GPU (the cpu preset), ZeRO's cpu_offload, a user's op without a CUDA
     * kernel. */
    conf.ncuda = o.device == PL_DEVICE_CPU ? 0 : (o.cuda_workers ? o.cuda_workers : -1);
    if (o.device == PL_DEVICE_CUDA) conf.ncpus = o.cpu_workers > 0 ? o.cpu_workers : 1;
    if (comm_workers) set_distributed_workers(&conf, &o);
    /* Pleiades' codelets have CPU (and later CUDA) implementations only. */
    conf.nopencl = 0;
    conf.nmic = 0;
    /* The Pleiades policy unless the caller or STARPU_SCHED names another
     * (pipeline schedules then refuse to run). */
    const char *env = getenv("STARPU_SCHED");
    const char *named = o.sched_policy ? o.sched_policy : env;
    rt->own_policy = !named || strcmp(named, "pleiades") == 0;
    snprintf(rt->policy_name, sizeof rt->policy_name, "%s",
             rt->own_policy ? "pleiades" : named);
    if (rt->own_policy) {
        conf.sched_policy = &pl_sched_policy;
        conf.sched_policy_name = NULL;
        if (env) unsetenv("STARPU_SCHED"); /* it would override conf */
    } else {
        conf.sched_policy_name = named;
    }
    /* The progression thread runs the first compute worker where every
     * thread needs a core of its own to be fast: CPU runs of several ranks
     * (pl_mpi_progress). */
    pl_mpi_progress progress = PL_MPI_PROGRESS_THREAD;
    if (comm_workers && (o.mpi_progress == PL_MPI_PROGRESS_WORKER ||
                         (o.mpi_progress == PL_MPI_PROGRESS_AUTO && o.device == PL_DEVICE_CPU)))
        progress = PL_MPI_PROGRESS_WORKER;
    /* The disk tier's run folder, before StarPU starts: it forks the
     * process that removes the folder if this one is killed, and a fork
     * is best done before StarPU's (and MPI's) threads exist. */
    if (o.offload_dir) {
        int err = pl_offload_open(o.offload_dir, NULL);
        if (err) {
            restore_limit("STARPU_LIMIT_CPU_MEM", saved_cpu);
            restore_limit("STARPU_LIMIT_CUDA_MEM", saved_cuda);
            free(rt);
            pl_fail(PL_STATUS_IO_ERROR, "pl_runtime_new: offload directory '%s': cannot make "
                    "this run's folder in it: %s", o.offload_dir, strerror(err));
            return NULL;
        }
    }
    int ret = o.distributed
                  ? (pl_comm_starpu_init(&conf, progress == PL_MPI_PROGRESS_WORKER) ? -1 : 0)
                  : starpu_init(&conf);
    restore_limit("STARPU_LIMIT_CPU_MEM", saved_cpu);
    restore_limit("STARPU_LIMIT_CUDA_MEM", saved_cuda);
    if (ret != 0) {
        pl_offload_abandon();
        free(rt);
        if (o.distributed)
            pl_fail(pl_last_status(), "pl_runtime_new: %s", pl_last_error());
        else
            pl_fail(PL_STATUS_RUNTIME_ERROR, "pl_runtime_new: starpu_init failed (%d)",
                    ret);
        return NULL;
    }
    rt->distributed = o.distributed;
    rt->rank = o.distributed ? pl_comm_rank() : 0;
    rt->dp_outside = o.dp_outside;
    rt->world_size = world;
    rt->mpi_progress = progress;
    /* Tasks are the unit of parallelism: one OpenBLAS thread per worker. */
    openblas_set_num_threads(1);
    rt->cpu_workers = (int)starpu_cpu_worker_get_count();
    rt->comm_worker = -1;
    if (comm_workers) {
        /* The last CPU worker (the pipeline's stages take the first). */
        int ids[STARPU_NMAXWORKERS];
        int n = starpu_worker_get_ids_by_type(STARPU_CPU_WORKER, ids, STARPU_NMAXWORKERS);
        if (n < 1 || (o.device != PL_DEVICE_CUDA && n < 2)) {
            pl_comm_starpu_shutdown();
            pl_offload_abandon();
            free(rt);
            pl_fail(PL_STATUS_RUNTIME_ERROR,
                    "pl_runtime_new: StarPU started %d CPU workers, a distributed "
                    "runtime needs a compute worker and a communication worker", n);
            return NULL;
        }
        rt->comm_worker = ids[n - 1];
        rt->cpu_workers--;
        if (rt->own_policy) pl_sched_set_comm_worker(rt->comm_worker);
        if (rt->own_policy) pl_sched_set_progress_worker(pl_comm_progress_worker());
    }
    rt->cuda_workers = (int)starpu_cuda_worker_get_count();
    rt->device = o.device;
    if (o.device == PL_DEVICE_CUDA && rt->cuda_workers == 0) {
        if (o.distributed)
            pl_comm_starpu_shutdown(); /* StarPU-MPI's thread and StarPU */
        else
            starpu_shutdown();
        pl_offload_abandon();
        free(rt);
        pl_fail(PL_STATUS_UNSUPPORTED,
                "pl_runtime_new: CUDA requested, but StarPU found no GPU");
        return NULL;
    }
#ifdef STARPU_USE_CUDA
    if (rt->cuda_workers > 0) starpu_cublas_init(); /* per-worker handles */
#endif
    rt->compute_node = STARPU_MAIN_RAM;
    if (on_gpu) {
        int w;
        if (starpu_worker_get_ids_by_type(STARPU_CUDA_WORKER, &w, 1) == 1)
            rt->compute_node = starpu_worker_get_memory_node((unsigned)w);
    }
    rt->compute_budget = o.compute_budget_mb * 1024 * 1024;
    rt->host_budget = on_gpu ? o.host_budget_mb * 1024 * 1024 : 0;
    /* CUDA without a budget: the device's capacity, as in Colossal-AI
     * (Gemini places chunks within the GPU's memory); engines then place
     * with Gemini's default policy (static), which moves nothing until a
     * step needs more than the device holds. */
    if (on_gpu && rt->compute_budget == 0) {
        starpu_ssize_t total = starpu_memory_get_total(rt->compute_node);
        if (total > 0) {
            rt->compute_budget = (int64_t)total;
            rt->budget_is_device = true;
        }
    }
    /* Tasks that together need more than the budget must not start at
     * once (see pl_sched_set_memory_limit). */
    if (rt->own_policy) pl_sched_set_memory_limit((int)rt->compute_node, rt->compute_budget);
    if (rt->own_policy) pl_sched_set_cpu_host_only(o.device == PL_DEVICE_CUDA);
    rt->offload_node = -1;
    if (o.offload_dir) {
        /* StarPU's disk node (engine/offload.c), of the size checked
         * above; whether the placement's plan fits in it is checked with
         * the engine (pl_engine_placement_precheck). */
        starpu_ssize_t size = (starpu_ssize_t)(offload_free / 2);
        int err = 0;
        int node = pl_offload_register(size, &err);
        if (node < 0) {
            pl_runtime_free(rt);
            pl_fail(PL_STATUS_IO_ERROR,
                    "pl_runtime_new: cannot use '%s' as the disk tier: %s", o.offload_dir,
                    strerror(err));
            return NULL;
        }
        rt->offload_node = node;
        rt->offload_dir_free = offload_free;
    }
    rt->profiling = o.profiling;
    if (o.profiling) starpu_profiling_status_set(STARPU_PROFILING_ENABLE);
    runtime_alive = true;
    live_runtime = rt;
    return rt;
}

void pl_runtime_free(pl_runtime_t *rt) {
    if (!rt) return;
    if (rt != live_runtime) {
        pl_refuse_free("pl_runtime_free: %p is not the live runtime (freed already, or not "
                       "made by pl_runtime_new): nothing freed", (void *)rt);
        return;
    }
    /* Its engines hold StarPU data and tasks: shutting StarPU down under
     * them aborted inside StarPU, and their free would follow freed
     * memory. */
    if (rt->live_engines > 0) {
        pl_refuse_free("pl_runtime_free: %d engine(s) built on this runtime are not freed "
                       "yet: free them first (pl_engine_free); the runtime keeps running",
                       rt->live_engines);
        return;
    }
    starpu_task_wait_for_all();
#ifdef STARPU_USE_CUDA
    if (rt->cuda_workers > 0) starpu_cublas_shutdown();
#endif
    if (rt->own_policy) pl_sched_set_comm_worker(-1);
    if (rt->own_policy) pl_sched_set_progress_worker(-1);
    if (rt->distributed)
        pl_comm_starpu_shutdown(); /* starpu_mpi_shutdown stops StarPU too */
    else
        starpu_shutdown();
    runtime_alive = false;
    live_runtime = NULL;
    pl_poison(rt, sizeof *rt);
    free(rt);
}

int pl_runtime_max_cpu_workers(void) { return STARPU_MAXCPUS; }

int pl_runtime_rank(const pl_runtime_t *rt) { return rt ? rt->rank : 0; }

int pl_runtime_world_size(const pl_runtime_t *rt) { return rt ? rt->world_size : 1; }

/* dp_outside: the grid's axes (dp, pp) with pp fastest, as Colossal-AI's
 * ProcessGroupMesh(dp, pp) orders them; else (pp, dp). */
int pl_runtime_grid_rank(const pl_runtime_t *rt, int dp, int pp, int replica, int stage) {
    dp = dp > 1 ? dp : 1, pp = pp > 1 ? pp : 1;
    return !rt || rt->dp_outside ? replica * pp + stage : stage * dp + replica;
}

int pl_runtime_grid_replica(const pl_runtime_t *rt, int dp, int pp, int rank) {
    dp = dp > 1 ? dp : 1, pp = pp > 1 ? pp : 1;
    return !rt || rt->dp_outside ? rank / pp % dp : rank % dp;
}

int pl_runtime_grid_stage(const pl_runtime_t *rt, int dp, int pp, int rank) {
    dp = dp > 1 ? dp : 1, pp = pp > 1 ? pp : 1;
    return !rt || rt->dp_outside ? rank % pp : rank / dp % pp;
}

pl_mpi_progress pl_runtime_mpi_progress(const pl_runtime_t *rt) {
    return rt ? rt->mpi_progress : PL_MPI_PROGRESS_THREAD;
}

pl_status pl_runtime_check_same(const pl_runtime_t *rt, const char *const *names,
                                const uint64_t *values, int n) {
    if (!rt || (n > 0 && (!names || !values)) || n < 0)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_runtime_check_same: %s",
                       !rt ? "runtime is NULL" : n < 0 ? "n < 0" : "names or values is NULL");
    if (!rt->distributed || rt->world_size == 1) return PL_STATUS_OK;
    int first;
    pl_status st = pl_comm_first_difference(values, n, &first);
    if (st) return st;
    if (first >= 0)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "the ranks of this job differ in %s (every rank must be given the "
                       "same settings)", names[first]);
    return PL_STATUS_OK;
}

pl_status pl_runtime_gather(const pl_runtime_t *rt, const double *values, int n,
                            double *all) {
    if (!rt || n < 0 || n > 4096 || (n > 0 && !values))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_runtime_gather: %s",
                       !rt ? "runtime is NULL" : n < 0 || n > 4096 ? "n out of [0, 4096]"
                                                                   : "values is NULL");
    bool root = !rt->distributed || rt->rank == 0;
    /* Rank 0's `all` is checked only after the collective, which the
     * others are already in: a NULL there fails rank 0 alone, not the job. */
    if (!rt->distributed || rt->world_size == 1) {
        if (n > 0 && !all)
            return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_runtime_gather: all is NULL");
        if (n > 0) memcpy(all, values, (size_t)n * sizeof *all);
        return PL_STATUS_OK;
    }
    void *buf = NULL;
    size_t got = 0;
    pl_status st = pl_comm_gather_bytes(values, (size_t)n * sizeof *values, &buf, &got, NULL);
    if (st) return st;
    if (root && n > 0) {
        if (!all) {
            free(buf);
            return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_runtime_gather: all is NULL");
        }
        memcpy(all, buf, got);
    }
    free(buf);
    return PL_STATUS_OK;
}

void pl_runtime_abort(const pl_runtime_t *rt, int code) {
    if (rt && rt->distributed) pl_comm_abort(code);
    exit(code);
}

int pl_runtime_cpu_workers(const pl_runtime_t *rt) {
    return rt ? rt->cpu_workers : 0;
}

int pl_runtime_cuda_workers(const pl_runtime_t *rt) {
    return rt ? rt->cuda_workers : 0;
}

bool pl_runtime_cuda_available(void) {
#ifdef STARPU_USE_CUDA
    return true;
#else
    return false;
#endif
}
