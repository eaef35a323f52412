/* Gradient clipping by global norm (engine/clip.c), a feature module of
 * the engine: its state (the partial norms, the result, whether a norm was
 * computed) is its own, behind pl_clip; the core and the other modules see
 * only these functions. Off (max_norm 0): no state, e->clip is NULL, and
 * every function here is a no-op or says so. */
#ifndef PL_ENGINE_CLIP_H
#define PL_ENGINE_CLIP_H

#include <starpu.h>

#include "pleiades.h"

typedef struct pl_clip pl_clip;

/* The options it reads (max_norm, norm_type), checked at pl_engine_new. */
pl_status pl_clip_check_options(const pl_engine_options *o);
/* At pl_engine_new, after the chunks exist and before the task infos are
 * allocated: its state and handles, and the task slots it reserves. NULL
 * in *out when clipping is off. */
pl_status pl_clip_init(pl_engine_t *e, pl_clip **out);
/* After the task infos exist: names and tags its tasks (phase O). */
void pl_clip_name_tasks(pl_engine_t *e, const pl_clip *c);
void pl_clip_free(pl_clip *c);
/* One update's norm and clip-coefficient tasks (before its optimizer
 * tasks); their result {norm, coefficient} is pl_clip_factor's handle. */
pl_status pl_clip_submit(pl_engine_t *e, pl_clip *c, double inv_scale);
starpu_data_handle_t pl_clip_factor(const pl_clip *c);
/* A checkpoint was loaded: no norm is computed until the next update. */
void pl_clip_restart(pl_clip *c);

#endif
