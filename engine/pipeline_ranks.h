/* Pipeline stages across ranks (engine/pipeline_ranks.c).
 * A feature module of the engine: its state is its own (see
 * engine/engine_internal.h for the core it plugs into). */
#ifndef PL_ENGINE_PIPELINE_RANKS_H
#define PL_ENGINE_PIPELINE_RANKS_H

#include "engine/engine_internal.h"

/* Pipeline stages across ranks (engine/pipeline_ranks.c), opt.pp > 1:
 * checks and set-up after the pipeline's (stage parts known): the
 * activations that cross ranks and the chunks each stage uses. */
pl_status pl_engine_pp_init(pl_engine_t *e);
void pl_engine_pp_free(pl_engine_t *e);
/* After a recut (every chunk synced first, no task in flight): those
 * again, and every chunk's gradients cleared. */
pl_status pl_engine_pp_recut(pl_engine_t *e);
/* Whether this rank runs stage part `part` (always, when pp is 1). */
bool pl_engine_pp_local_part(const pl_engine_t *e, int part);
/* Around one schedule item of this rank: the receives it needs first,
 * the sends it feeds after its tasks. */
pl_status pl_engine_pp_item_begin(pl_engine_t *e, bool backward, int part, int mb);
pl_status pl_engine_pp_item_end(pl_engine_t *e, bool backward, int part, int mb);
/* Chunk c: this rank updates it (its stage uses it); this rank counts it
 * in norms and overflow checks (the lowest stage using it). */
bool pl_engine_pp_updates_chunk(const pl_engine_t *e, int c);
bool pl_engine_pp_counts_chunk(const pl_engine_t *e, int c);
/* The buffer chunk c's summed gradients are in (pl_engine_pp_sums_chunk). */
starpu_data_handle_t pl_engine_pp_grad_sum(const pl_engine_t *e, int c);
/* After an update: chunks other stages update are stale here. */
void pl_engine_pp_mark_updated(pl_engine_t *e);
/* At an update: the summed gradients of chunks several stages use. */
pl_status pl_engine_pp_reduce_shared(pl_engine_t *e);
/* Whether chunk c's update reads those sums: several stages use it under
 * the current cut (a recut leaves the buffers of chunks shared before). */
bool pl_engine_pp_sums_chunk(const pl_engine_t *e, int c);
/* Collective: every chunk's parameters (and optimizer states) from the
 * lowest stage using it to every rank. */
pl_status pl_engine_pp_sync(pl_engine_t *e, bool states);
/* param_io: parameter p is current on this rank (or refused, naming fn). */
pl_status pl_engine_pp_check_param(const pl_engine_t *e, const pl_tensor_t *p, bool grad,
                                   const char *fn);
/* Whether op `op`'s tasks run on this rank. */
bool pl_engine_pp_local_op(const pl_engine_t *e, int op);
/* The stage running op `op`: its rank in this replica's group (pp_group). */
int pl_engine_pp_op_stage(const pl_engine_t *e, int op);

#endif
