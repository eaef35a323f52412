/* Pipeline schedules and stage partitioning.
 *
 * p stages, m microbatches, v model chunks per stage (interleaved). The
 * model's blocks are cut into P = p·v contiguous parts; by default part k
 * belongs to stage k mod p as its chunk k / p (Megatron/Colossal-AI
 * mapping: chunk c of stage s holds part s + c·p); a schedule may place
 * them otherwise (pl_schedule_def.part: ZB-V's V). A stage's schedule is a list of items,
 * each "forward, backward (or weight gradient) of microbatch mb on chunk
 * c"; the schedules
 * themselves are pl_schedule_defs (pleiades/schedule.h), the built-ins
 * included, so a user's schedule takes the same path as 1F1B. */
#ifndef PL_SCHEDULING_PIPELINE_H
#define PL_SCHEDULING_PIPELINE_H

#include "pleiades.h"
#include "scheduling/schedule.h"

/* The built-in schedule of a kind (pleiades/schedule.h); NULL for
 * PL_SCHEDULE_NONE, which is no pipeline. */
const pl_schedule_def *pl_pipeline_builtin(pl_schedule_kind kind);

/* Builds every stage of `def` for (p, v, m) into items (stage s's list at
 * items + s · pl_schedule_capacity(v, m), its length in n_items[s]) and
 * validates it (pl_schedule_validate: preconditions, every item exactly
 * once, no deadlock); p·capacity items, p counts. *lists_w (may be
 * NULL): whether the schedule lists W items. */
int pl_schedule_capacity(int v, int m);
pl_status pl_schedule_build(const pl_schedule_def *def, int p, int v, int m,
                            pl_work_item *items, int *n_items, bool *lists_w);

/* The placement of def's chunks for (p, v) (pl_schedule_def.part; NULL:
 * chunk c of stage s holds part s + c·p): stage_of[k] and chunk_of[k]
 * of each part k (either may be NULL). Refuses, naming the schedule, a
 * placement that is not a bijection onto the p·v parts. */
pl_status pl_schedule_placement(const pl_schedule_def *def, int p, int v, int *stage_of,
                                int *chunk_of);

/* Assigns n_blocks blocks to n_parts contiguous parts: either from
 * `counts` (blocks per part, n_parts entries, NULL for automatic) or so
 * that the slowest part is as fast as possible: a part's time is its
 * blocks' cost (cost[b] per block) over its capacity (capacity[k] > 0,
 * the workers serving part k's stage; NULL: 1 each). Writes
 * block_part[b]. */
pl_status pl_pipeline_partition(const double *cost, int n_blocks, int n_parts,
                                const double *capacity, const int *counts,
                                int *block_part);

#endif
