/* The runtime as the engine sees it (engine/runtime.c): StarPU's lifetime,
 * its workers and memory tiers, the ranks. One runtime serves several
 * engines; it owns nothing of theirs. */
#ifndef PL_ENGINE_RUNTIME_INTERNAL_H
#define PL_ENGINE_RUNTIME_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "pleiades.h"

struct pl_runtime {
    int cpu_workers;
    int cuda_workers;
    pl_device device;
    int64_t compute_budget;   /* bytes, 0 = none */
    bool budget_is_device;    /* CUDA without compute_budget_mb: the
                                 budget is the device's capacity */
    unsigned compute_node;    /* StarPU memory node of the compute tier */
    int offload_node;         /* disk node, -1 = none */
    int64_t offload_dir_free; /* bytes free there when the node was made */
    int64_t host_budget;      /* CUDA runs: bytes of the host tier, 0 = none */
    bool profiling;
    bool own_policy;          /* StarPU runs the Pleiades policy */
    bool distributed;         /* StarPU-MPI (pl_runtime_options.distributed) */
    int rank, world_size;
    bool dp_outside;          /* the order of a dp x pp grid's ranks */
    int comm_worker;          /* runs only collectives; -1 none */
    pl_mpi_progress mpi_progress; /* THREAD or WORKER (resolved) */
    char policy_name[32];
    int live_engines;         /* engines built on it, not freed yet */
};

#endif
