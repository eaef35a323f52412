/* Data parallelism and ZeRO-1/2 over ranks (engine/data_parallel.c).
 * A feature module of the engine: its state is its own (see
 * engine/engine_internal.h for the core it plugs into). */
#ifndef PL_ENGINE_DATA_PARALLEL_H
#define PL_ENGINE_DATA_PARALLEL_H

#include "engine/engine_internal.h"

/* Data parallelism (engine/data_parallel.c): checks and buckets at
 * pl_engine_new (dp > 1 compares every rank's model and options); at an
 * update, the reduction tasks of every bucket; host sums of step results
 * over ranks. No-ops when dp is 1. */
pl_status pl_engine_dp_init(pl_engine_t *e);
/* ZeRO's shards: whether this rank holds shards, chunk c's (0 to numel
 * when not sharded), the reduced gradient shard (NULL without ZeRO-2/3),
 * whether ZeRO-2 releases whole gradients; while a checkpoint is written
 * or read, the whole-chunk states and master weights (NULL otherwise). */
bool pl_engine_dp_sharded(const pl_engine_t *e);
void pl_engine_dp_shard(const pl_engine_t *e, int c, int64_t *lo, int64_t *hi);
starpu_data_handle_t pl_engine_dp_grad_shard(const pl_engine_t *e, int c);
bool pl_engine_dp_releases_grads(const pl_engine_t *e);
bool pl_engine_dp_ckpt_open(const pl_engine_t *e); /* whole states assembled */
float *pl_engine_dp_ckpt_states(const pl_engine_t *e, int c, int s);
const float *pl_engine_dp_ckpt_master(const pl_engine_t *e, int c);
void pl_engine_dp_free(pl_engine_t *e);
pl_status pl_engine_dp_reduce_gradients(pl_engine_t *e);
pl_status pl_engine_dp_gather_params(pl_engine_t *e);
pl_status pl_engine_dp_mean_results(pl_engine_t *e, double *sums, int n);
/* ZeRO checkpoints hold whole optimizer states, as one process's do (so
 * any world size can resume them). gather (collective) assembles the
 * ranks' shards into whole-chunk states on rank 0 (pl_engine_dp_ckpt_states); open allocates zeroed
 * whole-chunk buffers there (every rank, to be read into); scatter copies
 * this rank's shard out of them; close frees them. */
pl_status pl_engine_dp_states_gather(pl_engine_t *e);
pl_status pl_engine_dp_states_open(pl_engine_t *e);
void pl_engine_dp_states_scatter(pl_engine_t *e);
void pl_engine_dp_states_close(pl_engine_t *e);
/* The gradients an update reads for chunk c, reduced: the chunk's (DDP,
 * ZeRO-1) or this rank's shard of them (ZeRO-2), and their length. */
starpu_data_handle_t pl_engine_dp_reduced_grad(const pl_engine_t *e, int c);
int64_t pl_engine_dp_reduced_numel(const pl_engine_t *e, int c);
/* ZeRO-2: partials of gradient shards (one double each) combined over
 * ranks, by sum or max, as one collective task (a no-op otherwise);
 * `which`: PL_DP_PARTIALS_* (engine/hooks.h). */
pl_status pl_engine_dp_combine_partials(pl_engine_t *e, starpu_data_handle_t *partials,
                                        bool max, int which);
/* ZeRO-2 releasing whole gradients: before any task writes chunk c's
 * gradients, gives them back (a task writing zeros, once `after` is
 * ready, if not NULL) if an update released them; a no-op otherwise.
 * released: whether they are released now (as submitted). */
pl_status pl_engine_dp_grads_back(pl_engine_t *e, int c, starpu_data_handle_t after);
bool pl_engine_dp_grads_released(const pl_engine_t *e, int c);
/* From a task's callback: the whole gradient bytes a return or a
 * reduce-scatter changed, measured (into whole_live[1] / whole_peak[1]). */
void pl_engine_dp_grads_task_done(pl_engine_t *e, const struct starpu_task *task);

#endif
