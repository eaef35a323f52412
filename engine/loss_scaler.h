/* Dynamic loss scaling (engine/loss_scaler.c), a feature module of the
 * engine: its state (the scale and its counters, the overflow flags and
 * verdict) is its own, behind pl_loss_scaler; checkpoints read and restore
 * it through get_state/set_state. Off: e->ls is NULL, the scale is 1. */
#ifndef PL_ENGINE_LOSS_SCALER_H
#define PL_ENGINE_LOSS_SCALER_H

#include <stdbool.h>
#include <starpu.h>

#include "optim/loss_scaler.h"
#include "pleiades.h"

typedef struct pl_loss_scaler pl_loss_scaler;

/* loss_scaler's options (checked when on or under fp16). */
pl_status pl_loss_scaler_check_options(const pl_engine_options *o);
/* As pl_clip_init: state, handles, reserved task slots (NULL when off). */
pl_status pl_loss_scaler_init(pl_engine_t *e, pl_loss_scaler **out);
void pl_loss_scaler_name_tasks(pl_engine_t *e, const pl_loss_scaler *s);
void pl_loss_scaler_free(pl_loss_scaler *s);
/* The scale of the next backward (1 when off). */
double pl_loss_scaler_scale(const pl_loss_scaler *s);
/* At an update: submits the overflow tasks, waits for their verdict and
 * says whether the update must be skipped; its {found_inf, 1/scale} is
 * pl_loss_scaler_factor's handle. */
pl_status pl_loss_scaler_check(pl_engine_t *e, pl_loss_scaler *s, bool *overflow);
starpu_data_handle_t pl_loss_scaler_factor(const pl_loss_scaler *s);
/* The scaler's rule after an update (skipped when overflow). */
void pl_loss_scaler_update(const pl_engine_t *e, pl_loss_scaler *s, bool overflow);
/* What a checkpoint keeps, and its restoration (the next update starts
 * from it; no overflow is pending). */
void pl_loss_scaler_get_state(const pl_loss_scaler *s, pl_loss_scaler_state *out);
void pl_loss_scaler_set_state(pl_loss_scaler *s, const pl_loss_scaler_state *in);

#endif
