/* Pipeline schedules and stage partitioning.
 *
 * p stages, m microbatches, v model chunks per stage (interleaved). The
 * model's blocks are cut into P = p·v contiguous parts; part k belongs to
 * stage k mod p as its chunk k / p (Megatron/Colossal-AI mapping: chunk c
 * of stage s holds part s + c·p). A stage's schedule is a list of items,
 * each "forward or backward of microbatch mb on chunk c". */
#ifndef PL_SCHEDULING_PIPELINE_H
#define PL_SCHEDULING_PIPELINE_H

#include "pleiades.h"
#include "scheduling/schedule.h"

typedef struct pl_pipeline_item {
    pl_direction direction;
    int microbatch;
    int chunk;
} pl_pipeline_item;

/* Checks the schedule's preconditions (m ≥ p for 1F1B; v > 1 and
 * m % p == 0 for interleaved; ...); a clear error otherwise. */
pl_status pl_pipeline_check(pl_schedule_kind kind, int p, int v, int m);

/* Writes stage s's schedule into items (2·m·v entries); returns the count.
 * 1F1B: min(p−s−1, m) warm-up forwards, then one forward / one backward,
 * then the remaining backwards. Interleaved: warm-up
 * min(2(p−s−1) + (v−1)p, m·v) virtual forwards; virtual step k is
 * microbatch (k / (p·v))·p + k mod p on chunk (k mod (p·v)) / p, counted
 * from the last chunk for backwards. */
int pl_pipeline_stage_items(pl_schedule_kind kind, int p, int v, int m, int s,
                            pl_pipeline_item *items);

/* Assigns n_blocks blocks to n_parts contiguous parts: either from
 * `counts` (blocks per part, n_parts entries, NULL for automatic) or so
 * that the most expensive part is as cheap as possible (cost[b] per block).
 * Writes block_part[b]. */
pl_status pl_pipeline_partition(const double *cost, int n_blocks, int n_parts,
                                const int *counts, int *block_part);

/* Idle fraction of a stage over its busy time, in theory: 1F1B (p−1)/m,
 * interleaved (p−1)/(v·m), non-pipelined 0. */
double pl_pipeline_bubble(pl_schedule_kind kind, int p, int v, int m);

#endif
