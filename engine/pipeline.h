/* Stage parts, schedules and submission order (engine/pipeline.c), and
 * the measured stage balance (a module of its own: struct pl_balance). */
#ifndef PL_ENGINE_PIPELINE_H
#define PL_ENGINE_PIPELINE_H

#include "engine/engine_internal.h"

/* Pipeline set-up (engine/pipeline.c): stage parts, schedules and
 * the tags of every task slot. */
pl_status pl_engine_pipeline_init(pl_engine_t *e);
/* Submits one iteration's items in the (valid sequential) non-pipelined
 * order; the policy reorders execution per stage. */
pl_status pl_engine_submit_iteration(pl_engine_t *e, bool forward_only);
/* Mean item times over the records rec[0..n) (pl_engine_item_times on
 * given records: a trace's merged ranks), and the schedule's theoretical
 * bubble from them (t NULL: the def's plain formula). */
pl_status pl_engine_item_times_of(const pl_engine_t *e, const pl_task_record *rec, int n,
                                  pl_item_times *out);
double pl_engine_bubble_of(const pl_engine_t *e, const pl_item_times *t);
/* Measured stage balance: an op kernel of the timed step on a CPU worker
 * adds its thread's CPU time (µs) to its block (from the kernel's
 * trampoline); a finished task that ran on a CUDA worker adds its wall
 * time from StarPU's profiling (from the task callback). */
void pl_engine_balance_add(pl_engine_t *e, int block, double us);
/* Whether the step in flight is the timed one; the module's end. */
bool pl_engine_balance_timing(const pl_engine_t *e);
void pl_engine_balance_free(pl_engine_t *e);
void pl_engine_balance_task_done(pl_engine_t *e, const struct starpu_task *task);

#endif
