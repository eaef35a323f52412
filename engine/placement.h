/* The engine's side of memory placement (engine/placement.c; the policies are in memory/).
 * A feature module of the engine: its state is its own (see
 * engine/engine_internal.h for the core it plugs into). */
#ifndef PL_ENGINE_PLACEMENT_H
#define PL_ENGINE_PLACEMENT_H

#include "engine/engine_internal.h"

/* Memory placement (engine/placement.c). */
/* Budget, feasibility and tier checks on the packing (params `ids` of
 * `sizes` in chunk_elems chunks), before pack_params allocates anything;
 * then the set-up. */
pl_status pl_engine_placement_precheck(pl_engine_t *e, const int64_t *sizes,
                                       const int *ids, int n, size_t chunk_elems,
                                       int n_states);
pl_status pl_engine_placement_init(pl_engine_t *e);
/* Stages across ranks, after a recut moved ops between stages: this
 * rank's steps again, and the policy restarted on them. */
pl_status pl_engine_placement_restage(pl_engine_t *e);
void pl_engine_placement_free(pl_engine_t *e);
void pl_engine_placement_tag(pl_engine_t *e, struct starpu_task *task,
                             pl_task_info *info);
void pl_engine_placement_sample(pl_engine_t *e);
void pl_engine_placement_iteration_end(pl_engine_t *e);
void pl_engine_placement_release_tile(pl_engine_t *e, int tile);
void pl_engine_placement_release_op(pl_engine_t *e, int op, int tile);
/* Placement step numbers: pl_step_forward, _backward, _optimizer
 * (engine/hooks.h: ZeRO-3 opens steps too). */

#endif
