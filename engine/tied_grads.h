/* Parameters several ops use: one gradient buffer per later use (engine/tied_grads.c).
 * A feature module of the engine: its state is its own (see
 * engine/engine_internal.h for the core it plugs into). */
#ifndef PL_ENGINE_TIED_GRADS_H
#define PL_ENGINE_TIED_GRADS_H

#include "engine/engine_internal.h"

/* Tied gradients (engine/tied_grads.c). init: after the chunks, before
 * the task infos are allocated (their count includes the sums). */
pl_status pl_engine_ties_init(pl_engine_t *e);
void pl_engine_ties_name_tasks(pl_engine_t *e);
void pl_engine_ties_free(pl_engine_t *e);
/* The buffer of parameter `param` of op `op` when that use has its own
 * (NULL when it writes the parameter's gradient); *accumulate: this pass
 * already wrote it. Marks it written. */
starpu_data_handle_t pl_engine_tie_grad(pl_engine_t *e, int op, int param, bool *accumulate);
/* At an optimizer step, before anything reads the gradients (ZeRO-3:
 * before chunk `chunk`'s reduce-scatter; -1: every chunk): each written
 * buffer into its parameter's gradient. */
pl_status pl_engine_ties_submit_sums(pl_engine_t *e, int chunk);
/* pl_engine_get_grad between updates: adds parameter p's buffers (not yet
 * summed) to out, the gradient as read (zeros if this rank wrote none). */
pl_status pl_engine_ties_add_to(pl_engine_t *e, const pl_tensor_t *p, float *out);
/* After an update: no tied buffer holds a sum to add any more. */
void pl_engine_ties_restart(pl_engine_t *e);

#endif
