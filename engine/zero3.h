/* ZeRO-3: parameters sharded over ranks (engine/zero3.c).
 * A feature module of the engine: its state is its own (see
 * engine/engine_internal.h for the core it plugs into). */
#ifndef PL_ENGINE_ZERO3_H
#define PL_ENGINE_ZERO3_H

#include "engine/engine_internal.h"

/* ZeRO-3: whole chunks gathered at once per pass, beyond those the op
 * order itself keeps in use (gather k of a pass waits for release k −
 * this of the pass). */
#define PL_Z3_WINDOW 2

/* ZeRO-2/3, per chunk c: k = 2·chunks.n + 2 + what·chunks.n + c, `what`
 * one of these (the reduce-scatter of chunk c is k = c): ZeRO-3's gathers
 * and releases, ZeRO-2's return of released whole gradients. */
enum { PL_Z3_GATHER_F, PL_Z3_GATHER_B, PL_Z3_RELEASE_F, PL_Z3_RELEASE_B, PL_Z2_GRADS_BACK,
       PL_Z3_TASK_KINDS };
static inline size_t pl_z3_task_index(const pl_engine_t *e, int what, int chunk) {
    return pl_comm_task_index(e, 2 * e->chunks.n + 2 + what * e->chunks.n + chunk);
}
/* Task slots the collectives and ZeRO's memory tasks take (reserved at
 * pl_engine_new: pl_comm_task_index, pl_z3_task_index). */
#define PL_COMM_TASKS(e) ((size_t)(2 + PL_Z3_TASK_KINDS) * (size_t)(e)->chunks.n + 2)

/* ZeRO-3 (engine/zero3.c), dp > 1 and zero_stage 3: set-up after
 * pl_engine_dp_init (the shards, the use ranges of each chunk); a
 * non-pipelined iteration submitted op by op with each chunk gathered
 * before its first use and released after its last, the gradients
 * reduce-scattered then; the sharded parameter each update writes. */
pl_status pl_engine_z3_init(pl_engine_t *e);
/* Chunk c's parameter shard, the one an update writes. */
starpu_data_handle_t pl_z3_param_shard(const pl_zero3 *z, int c);
void pl_engine_z3_free(pl_engine_t *e);
pl_status pl_engine_z3_submit_iteration(pl_engine_t *e, bool forward_only);
/* param_io under ZeRO-3: refuses unless the chunk is gathered; after a
 * write, copies the rank's part into its shard. */
pl_status pl_engine_z3_check_gathered(const pl_engine_t *e, const pl_tensor_t *p,
                                      const char *fn);
pl_status pl_engine_z3_store_shard(pl_engine_t *e, const pl_tensor_t *p);
/* The whole parameter and gradient bytes live outside the placement units
 * now: ZeRO-3's gathered chunks, ZeRO-2's returned gradients (0 without
 * ZeRO-2/3). */
int64_t pl_engine_whole_bytes(pl_engine_t *e);
/* A ZeRO shard of len values of elem bytes (zeros, or a copy of init) and
 * its handle: StarPU-allocated under a placement policy (counted against
 * the budget, evictable), else in *mem (starpu_free'd by the owner). */
pl_status pl_engine_dp_shard_new(pl_engine_t *e, size_t len, size_t elem, const void *init,
                                 void **mem, starpu_data_handle_t *h);
/* From a task's callback: the gathered bytes it changed, measured. */
void pl_engine_z3_task_done(pl_engine_t *e, const struct starpu_task *task);

#endif
