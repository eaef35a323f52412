/* What several modules use, offered by the core (engine/hooks.h): a
 * collective's task name, a ZeRO shard's buffer, the whole bytes live. */
#include "engine/hooks.h"

#include <stdio.h>
#include <string.h>

#include "graph/error.h"

int pl_engine_compute_workers(const pl_engine_t *e) {
    const pl_runtime_t *rt = e->rt;
    return rt->cuda_workers > 0 ? rt->cuda_workers
                                : rt->cpu_workers - (rt->comm_worker >= 0 ? 1 : 0);
}

void pl_engine_name_comm_task(pl_engine_t *e, size_t index, const char *what, int bucket) {
    pl_task_info *ti = &e->tasks[index];
    snprintf(ti->name, sizeof ti->name, "%s.b%d", what, bucket);
    ti->op = -1;
    ti->slot = PL_SLOT_COMM;
    ti->tile = bucket;
    ti->stage = -1; /* no pipeline stage's work */
    ti->chunk = 0;
    ti->tag = (pl_sched_tag){.stage = -1, .item = -1, .forward = 0, .owner = -1,
                             .background = 1, .comm = 1};
}

pl_status pl_engine_shard_new(pl_engine_t *e, size_t len, size_t elem, const void *init,
                              void **mem, starpu_data_handle_t *h) {
    *mem = NULL;
    *h = NULL;
    if (len == 0) len = 1; /* StarPU refuses empty vectors */
    size_t bytes = len * elem;
    if (e->opt.placement.policy) {
        starpu_vector_data_register(h, -1, 0, (uint32_t)len, elem);
        if (starpu_data_acquire(*h, STARPU_W) != 0)
            return pl_fail(PL_STATUS_OUT_OF_MEMORY,
                           "pl_engine_new: cannot allocate a ZeRO shard of %zu values", len);
        void *p = (void *)starpu_vector_get_local_ptr(*h);
        if (init) memcpy(p, init, bytes);
        else memset(p, 0, bytes);
        starpu_data_release(*h);
        return PL_STATUS_OK;
    }
    if (starpu_malloc(mem, bytes) != 0)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY,
                       "pl_engine_new: out of memory for a ZeRO shard of %zu values", len);
    if (init) memcpy(*mem, init, bytes);
    else memset(*mem, 0, bytes);
    starpu_vector_data_register(h, STARPU_MAIN_RAM, (uintptr_t)*mem, (uint32_t)len, elem);
    return PL_STATUS_OK;
}

int64_t pl_engine_whole_bytes(pl_engine_t *e) {
    if (!e->whole_lock_init) return 0;
    pthread_mutex_lock(&e->whole_lock);
    int64_t b = e->whole_live[0] + e->whole_live[1];
    pthread_mutex_unlock(&e->whole_lock);
    return b;
}
