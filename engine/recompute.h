/* Activation recomputation (engine/recompute.c): units of blocks whose
 * inner activations the forward pass drops and a re-run of their forward
 * tasks (phase R) brings back just before their backward pass. */
#ifndef PL_ENGINE_RECOMPUTE_H
#define PL_ENGINE_RECOMPUTE_H

#include "engine/engine_internal.h"

typedef struct pl_recompute pl_recompute;

/* pl_engine_new's checks of pl_engine_options.recompute. */
pl_status pl_recompute_check_options(const pl_graph_t *g, const pl_engine_options *o);
/* Reserves the R task slots (one per op and tile) when recomputation is
 * on; before pl_engine_pipeline_init allocates e->tasks. */
pl_status pl_recompute_init(pl_engine_t *e);
/* Chooses the units, what each drops and which ops it re-runs, and names
 * and tags the R tasks (each with its op's B item), from the stage parts
 * as cut now: after pl_engine_pipeline_init and after every recut. */
pl_status pl_recompute_plan(pl_engine_t *e);
void pl_recompute_free(pl_engine_t *e);
/* Submission hooks, called by the core's item loops for every op of a
 * local item: after an op's forward tasks (the unit's last op drops the
 * unit's inner activations), before an op's backward tasks (the unit's
 * last op re-runs the unit's forward) and after them (the unit's first op
 * drops what the re-run brought back). No-ops when e->recompute is NULL. */
pl_status pl_recompute_forward_done(pl_engine_t *e, int op, int tile);
pl_status pl_recompute_backward_begin(pl_engine_t *e, int op, int tile);
pl_status pl_recompute_backward_done(pl_engine_t *e, int op, int tile);
/* PL_RECOMPUTE_AUTO: before each iteration's submission, times the
 * second training step's block forwards and plans from them before the
 * third; whether the step in flight is timed, and a forward kernel's
 * thread CPU time for its block (from the kernel trampoline). */
void pl_recompute_iteration_begin(pl_engine_t *e, bool forward_only);
bool pl_recompute_timing(const pl_engine_t *e);
void pl_recompute_time_forward(pl_engine_t *e, int block, double us);
/* Whether op is a recomputed unit's last op (where the backward pass
 * re-runs the unit), and the unit's first and last op. */
bool pl_recompute_unit_at(const pl_engine_t *e, int op, int *first, int *last);
/* Recomputed units, and the layers (blocks with inner activations) they
 * hold, for messages and tests; 0 when off. */
int pl_recompute_units(const pl_engine_t *e, int *layers);

#endif
