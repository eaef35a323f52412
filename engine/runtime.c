/* The runtime: StarPU's lifetime. StarPU is a process-wide singleton, so
 * only one runtime may exist at a time. */
#include <cblas.h>
#include <starpu.h>
#ifdef STARPU_USE_CUDA
#include <starpu_cublas_v2.h>
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "engine/engine_internal.h"
#include "graph/error.h"

static bool runtime_alive;

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

pl_runtime_options pl_runtime_options_default(void) {
    return (pl_runtime_options){.cpu_workers = 0, .device = default_device(),
                                .cuda_workers = 0, .sched_policy = NULL,
                                .profiling = false, .compute_budget_mb = 0,
                                .host_budget_mb = 0, .offload_dir = NULL};
}

pl_runtime_t *pl_runtime_new(const pl_runtime_options *options) {
    pl_runtime_options o = options ? *options : pl_runtime_options_default();
    if (runtime_alive) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT,
                "pl_runtime_new: a runtime already exists in this process");
        return NULL;
    }
    if (o.cpu_workers < 0 || o.cpu_workers > STARPU_MAXCPUS) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT,
                "pl_runtime_new: cpu_workers %d out of range [0, %d] (this "
                "StarPU build supports at most %d CPU workers)",
                o.cpu_workers, STARPU_MAXCPUS, STARPU_MAXCPUS);
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
    if (o.offload_dir && access(o.offload_dir, W_OK | X_OK) != 0) {
        free(rt);
        pl_fail(PL_STATUS_IO_ERROR, "pl_runtime_new: offload directory '%s': %s",
                o.offload_dir, strerror(errno));
        return NULL;
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
    /* cuda: every codelet has a CUDA implementation, so no CPU workers are
     * needed and none competes with the GPUs for tasks. */
    conf.ncuda = o.device == PL_DEVICE_CPU ? 0 : (o.cuda_workers ? o.cuda_workers : -1);
    if (o.device == PL_DEVICE_CUDA) conf.ncpus = 0;
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
    int ret = starpu_init(&conf);
    restore_limit("STARPU_LIMIT_CPU_MEM", saved_cpu);
    restore_limit("STARPU_LIMIT_CUDA_MEM", saved_cuda);
    if (ret != 0) {
        free(rt);
        pl_fail(PL_STATUS_RUNTIME_ERROR, "pl_runtime_new: starpu_init failed (%d)",
                ret);
        return NULL;
    }
    /* Tasks are the unit of parallelism: one OpenBLAS thread per worker. */
    openblas_set_num_threads(1);
    rt->cpu_workers = (int)starpu_cpu_worker_get_count();
    rt->cuda_workers = (int)starpu_cuda_worker_get_count();
    rt->device = o.device;
    if (o.device == PL_DEVICE_CUDA && rt->cuda_workers == 0) {
        starpu_shutdown();
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
    /* Tasks that together need more than the budget must not start at
     * once (see pl_sched_set_memory_limit). */
    if (rt->own_policy) pl_sched_set_memory_limit((int)rt->compute_node, rt->compute_budget);
    rt->offload_node = -1;
    if (o.offload_dir) {
        /* StarPU's disk node: evicted data is written there (unistd files). */
        struct statvfs fs;
        starpu_ssize_t size = statvfs(o.offload_dir, &fs) == 0
                                  ? (starpu_ssize_t)fs.f_bavail * (starpu_ssize_t)fs.f_frsize / 2
                                  : (starpu_ssize_t)1 << 30;
        int node = starpu_disk_register(&starpu_disk_unistd_ops, (void *)o.offload_dir, size);
        if (node < 0) {
            pl_runtime_free(rt);
            pl_fail(PL_STATUS_IO_ERROR,
                    "pl_runtime_new: cannot use '%s' as the disk tier (StarPU error %d)",
                    o.offload_dir, node);
            return NULL;
        }
        rt->offload_node = node;
    }
    rt->profiling = o.profiling;
    if (o.profiling) starpu_profiling_status_set(STARPU_PROFILING_ENABLE);
    runtime_alive = true;
    return rt;
}

void pl_runtime_free(pl_runtime_t *rt) {
    if (!rt) return;
    starpu_task_wait_for_all();
#ifdef STARPU_USE_CUDA
    if (rt->cuda_workers > 0) starpu_cublas_shutdown();
#endif
    starpu_shutdown();
    runtime_alive = false;
    free(rt);
}

int pl_runtime_max_cpu_workers(void) { return STARPU_MAXCPUS; }

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
