/* pl_engine_options.check_finite (engine/check_finite.c): a module that
 * finds the first op whose output or gradient is not finite. */
#ifndef PL_ENGINE_CHECK_FINITE_H
#define PL_ENGINE_CHECK_FINITE_H

#include "engine/engine_internal.h"

/* pl_engine_options.check_finite (engine/check_finite.c), once the pass
 * is over (no task in flight): the first inf/NaN among the batch's
 * inputs, the ops' outputs and the gradients the backward pass wrote,
 * in the order they were made, as a RUNTIME_ERROR naming it. */
pl_status pl_engine_check_finite(pl_engine_t *e);

#endif
