/* ZeRO-3: parameters sharded over ranks (engine/zero3.c).
 * A feature module of the engine: its state is its own (see
 * engine/engine_internal.h for the core it plugs into). */
#ifndef PL_ENGINE_ZERO3_H
#define PL_ENGINE_ZERO3_H

#include "engine/engine_internal.h"

/* ZeRO-3 (engine/zero3.c), dp > 1 and zero_stage 3 (a no-op otherwise):
 * set-up after pl_engine_dp_init (the shards, the use ranges of each
 * chunk); its task slots are PL_Z3_* of engine/hooks.h. A
 * non-pipelined iteration submitted op by op with each chunk gathered
 * before its first use and released after its last, the gradients
 * reduce-scattered then; the sharded parameter each update writes. */
pl_status pl_engine_z3_init(pl_engine_t *e);
/* Chunk c's parameter shard, the one an update writes (NULL without
 * ZeRO-3). */
starpu_data_handle_t pl_z3_param_shard(const pl_engine_t *e, int c);
void pl_engine_z3_free(pl_engine_t *e);
pl_status pl_engine_z3_submit_iteration(pl_engine_t *e, bool forward_only);
/* param_io under ZeRO-3: refuses unless the chunk is gathered; after a
 * write, copies the rank's part into its shard. */
pl_status pl_engine_z3_check_gathered(const pl_engine_t *e, const pl_tensor_t *p,
                                      const char *fn);
pl_status pl_engine_z3_store_shard(pl_engine_t *e, const pl_tensor_t *p);
/* pl_engine_gather_params without stages across ranks: every chunk
 * gathered (a no-op without ZeRO-3). */
pl_status pl_engine_z3_gather_all(pl_engine_t *e);
/* From a task's callback: the gathered bytes it changed, measured. */
void pl_engine_z3_task_done(pl_engine_t *e, const struct starpu_task *task);

#endif
