/* Fused op tasks as one StarPU task per kind of work (engine/task_fusion.c).
 * A feature module of the engine: its state is its own (see
 * engine/engine_internal.h for the core it plugs into). */
#ifndef PL_ENGINE_TASK_FUSION_H
#define PL_ENGINE_TASK_FUSION_H

#include "engine/engine_internal.h"

/* Fused op tasks (engine/task_fusion.c). While active, each op task
 * (forward, loss, input or weight gradient) joins the group of its block
 * and kind instead of being submitted; pl_fusion_flush submits the groups
 * (one task each; a group of one as the task itself). */
#define PL_FUSION_MAX_MEMBERS 64
typedef struct pl_fusion_member {
    size_t task_index; /* e->tasks[] of the member */
    double start_us, end_us;
} pl_fusion_member;
pl_status pl_fusion_init(pl_engine_t *e);
/* Whether op tasks submitted now are collected (set by the submission
 * loop around an item's ops, until pl_fusion_flush). */
bool pl_fusion_active(const pl_fusion *f);
void pl_fusion_set_active(pl_fusion *f, bool active);
void pl_fusion_free(pl_engine_t *e);
pl_status pl_fusion_add(pl_engine_t *e, struct starpu_codelet *cl, size_t task_index,
                        const void *args, size_t args_size, int n_handles,
                        starpu_data_handle_t *handles,
                        const enum starpu_data_access_mode *modes, bool *taken);
pl_status pl_fusion_flush(pl_engine_t *e);
bool pl_fusion_is_fused(const struct starpu_task *task);
/* A fused task's members, in the order they ran (after it ran). */
int pl_fusion_members(const struct starpu_task *task, pl_fusion_member *out, int max,
                      int64_t *id);

#endif
