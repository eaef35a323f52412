/* Dynamic loss scaling at an update (optim/loss_scaler.h has the tasks):
 * after the last backward, one task per chunk flags a non-finite gradient
 * and one task ORs the flags into the verdict {found_inf, 1/scale}. The
 * host then waits for that verdict — the one sync point the scaler adds:
 * whether the optimizer tasks are submitted at all depends on it — and
 * either skips the update or submits it, the optimizer tasks reading
 * 1/scale from the verdict. The flags and the verdict are a few doubles
 * in main memory (user pointers: never evicted nor counted against a
 * budget). A feature module (engine/loss_scaler.h): its state is struct
 * pl_loss_scaler. */
#include "engine/loss_scaler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/engine_internal.h"
#include "engine/grad_reduction.h"
#include "engine/hooks.h"
#include "graph/error.h"

struct pl_loss_scaler {
    pl_loss_scaler_state state;      /* the scale of the next backward */
    bool last_overflow;              /* the last update was skipped */
    pl_grad_reduction red;           /* flags (1 = a non-finite);
                                        {found_inf, 1/scale} */
};

pl_status pl_loss_scaler_check_options(const pl_engine_options *o) {
    if (!o->loss_scaler.enabled && o->precision != PL_PRECISION_FP16) return PL_STATUS_OK;
    /* Checked only when on: the defaults are valid. One message per
     * field, naming it (negated comparisons reject NaN). */
    const pl_loss_scaler_options *ls = &o->loss_scaler;
    const char *field = NULL, *why = NULL;
    double v = 0.0;
    if (!(ls->min_scale > 0.0 && ls->min_scale <= 0x1p127))
        field = "min_scale", v = ls->min_scale, why = "must be in (0, 2^127]";
    else if (!(ls->max_scale >= ls->min_scale && ls->max_scale <= 0x1p127))
        field = "max_scale", v = ls->max_scale, why = "must be in [min_scale, 2^127]";
    else if (!(ls->initial_scale >= ls->min_scale && ls->initial_scale <= ls->max_scale))
        field = "initial_scale", v = ls->initial_scale,
        why = "must be in [min_scale, max_scale]";
    else if (!(ls->growth_factor > 1.0 && isfinite(ls->growth_factor)))
        field = "growth_factor", v = ls->growth_factor, why = "must be a finite value > 1";
    else if (!(ls->backoff_factor > 0.0 && ls->backoff_factor < 1.0))
        field = "backoff_factor", v = ls->backoff_factor, why = "must be in (0, 1)";
    else if (ls->growth_interval < 1)
        field = "growth_interval", v = ls->growth_interval, why = "must be >= 1";
    else if (ls->hysteresis < 1)
        field = "hysteresis", v = ls->hysteresis, why = "must be >= 1";
    if (field)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_new: loss_scaler.%s %g %s",
                       field, v, why);
    return PL_STATUS_OK;
}

pl_status pl_loss_scaler_init(pl_engine_t *e, pl_loss_scaler **out) {
    *out = NULL;
    if (!e->opt.loss_scaler.enabled) return PL_STATUS_OK;
    pl_loss_scaler *s = calloc(1, sizeof *s);
    if (!s) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_engine_new: out of memory (loss scaler)");
    s->state.scale = e->opt.loss_scaler.initial_scale;
    *out = s;
    return pl_grad_reduction_init(e, &s->red, "loss scaler");
}

void pl_loss_scaler_name_tasks(pl_engine_t *e, const pl_loss_scaler *s) {
    /* Its tasks belong to the optimizer step (phase O), like clipping's. */
    if (s) pl_grad_reduction_name_tasks(e, &s->red, "overflow", "overflow");
}

void pl_loss_scaler_free(pl_loss_scaler *s) {
    if (!s) return;
    pl_grad_reduction_free(&s->red);
    free(s);
}

double pl_loss_scaler_scale(const pl_loss_scaler *s) { return s ? s->state.scale : 1.0; }

starpu_data_handle_t pl_loss_scaler_factor(const pl_loss_scaler *s) {
    return s ? s->red.h_result : NULL;
}

static void overflow_args(const pl_engine_t *e, int c, int64_t n, void *args) {
    (void)c;
    *(pl_overflow_args *)args = (pl_overflow_args){
        .n = n, .half = e->half, .bf16 = e->bf16};
}

pl_status pl_loss_scaler_check(pl_engine_t *e, pl_loss_scaler *s, bool *overflow) {
    /* 1/scale in double: exact for the power-of-two scales of the
     * defaults, so unscaled gradients are bitwise the unscaled run's. */
    pl_overflow_combine_args a = {.n_partials = s->red.n, .inv_scale = 1.0 / s->state.scale};
    pl_status st = pl_engine_submit_grad_reduction(
        e, &pl_cl_grad_overflow, s->red.first_task, sizeof(pl_overflow_args), overflow_args,
        s->red.h_partial, &pl_cl_overflow_combine, s->red.first_task + (size_t)s->red.n, &a,
        sizeof a, s->red.h_result, true, PL_DP_PARTIALS_OVERFLOW);
    if (st) return st;
    if (starpu_data_acquire(s->red.h_result, STARPU_R) != 0)
        return pl_fail(PL_STATUS_RUNTIME_ERROR,
                       "pl_engine_optimizer_step: cannot read the overflow flag");
    *overflow = s->red.result[0] != 0.0;
    starpu_data_release(s->red.h_result);
    return PL_STATUS_OK;
}

void pl_loss_scaler_update(const pl_engine_t *e, pl_loss_scaler *s, bool overflow) {
    const pl_loss_scaler_options *o = &e->opt.loss_scaler;
    pl_loss_scaler_step(&s->state, overflow, o->min_scale, o->max_scale, o->growth_factor,
                        o->backoff_factor, o->growth_interval, o->hysteresis);
    s->last_overflow = overflow;
}

void pl_loss_scaler_get_state(const pl_loss_scaler *s, pl_loss_scaler_state *out) {
    *out = s->state;
}

void pl_loss_scaler_set_state(pl_loss_scaler *s, const pl_loss_scaler_state *in) {
    s->state = *in;
    s->last_overflow = false;
}

pl_status pl_engine_loss_scale(const pl_engine_t *e, double *scale, bool *last_overflow) {
    if (!e || !scale || !last_overflow)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_loss_scale: %s is NULL",
                       !e ? "engine" : !scale ? "scale" : "last_overflow");
    if (!e->ls)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_loss_scale: the engine does not scale the loss "
                       "(loss_scaler.enabled is false)");
    *scale = e->ls->state.scale;
    *last_overflow = e->ls->last_overflow;
    return PL_STATUS_OK;
}
