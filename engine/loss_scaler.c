/* Dynamic loss scaling at an update (optim/loss_scaler.h has the tasks):
 * after the last backward, one task per chunk flags a non-finite gradient
 * and one task ORs the flags into the verdict {found_inf, 1/scale}. The
 * host then waits for that verdict — the one sync point the scaler adds:
 * whether the optimizer tasks are submitted at all depends on it — and
 * either skips the update or submits it, the optimizer tasks reading
 * 1/scale from the verdict. The flags and the verdict are a few doubles
 * in main memory (user pointers: never evicted nor counted against a
 * budget). */
#include <stdio.h>
#include <stdlib.h>

#include "engine/engine_internal.h"
#include "graph/error.h"
#include "optim/loss_scaler.h"

pl_status pl_engine_loss_scaler_init(pl_engine_t *e) {
    e->ls_scale = 1.0; /* the loss gradient's factor when off */
    if (!e->opt.loss_scaler.enabled) return PL_STATUS_OK;
    e->ls_scale = e->opt.loss_scaler.initial_scale;
    int n = e->chunks.n;
    e->ls_partials = calloc(n ? n : 1, sizeof *e->ls_partials);
    e->h_ls_partial = calloc(n ? n : 1, sizeof *e->h_ls_partial);
    if (!e->ls_partials || !e->h_ls_partial)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_engine_new: out of memory (loss scaler)");
    for (int c = 0; c < n; c++)
        starpu_vector_data_register(&e->h_ls_partial[c], STARPU_MAIN_RAM,
                                    (uintptr_t)&e->ls_partials[c], 1, sizeof(double));
    starpu_vector_data_register(&e->h_ls, STARPU_MAIN_RAM, (uintptr_t)e->ls_result, 2,
                                sizeof(double));
    /* Its tasks belong to the optimizer step (phase O), like clipping's. */
    for (int c = 0; c <= n; c++) {
        pl_task_info *ti = &e->tasks[pl_overflow_task_index(e, c)];
        if (c == n) snprintf(ti->name, sizeof ti->name, "overflow");
        else snprintf(ti->name, sizeof ti->name, "overflow.c%d", c);
        ti->op = -1;
        ti->slot = PL_SLOT_OPT;
        ti->tile = c == n ? -1 : c;
        ti->tag = (pl_sched_tag){.stage = -1, .item = -1, .forward = 0, .owner = -1,
                                 .background = 1};
    }
    return PL_STATUS_OK;
}

void pl_engine_loss_scaler_free(pl_engine_t *e) {
    if (e->h_ls_partial)
        for (int c = 0; c < e->chunks.n; c++)
            if (e->h_ls_partial[c]) starpu_data_unregister(e->h_ls_partial[c]);
    if (e->h_ls) starpu_data_unregister(e->h_ls);
    free(e->h_ls_partial);
    free(e->ls_partials);
}

static void overflow_args(const pl_engine_t *e, int c, void *args) {
    *(pl_overflow_args *)args = (pl_overflow_args){
        .n = pl_engine_dp_reduced_numel(e, c), .half = e->half, .bf16 = e->bf16};
}

pl_status pl_engine_loss_scaler_check(pl_engine_t *e, bool *overflow) {
    /* 1/scale in double: exact for the power-of-two scales of the
     * defaults, so unscaled gradients are bitwise the unscaled run's. */
    pl_overflow_combine_args a = {.n_partials = e->chunks.n, .inv_scale = 1.0 / e->ls_scale};
    pl_status st = pl_engine_submit_grad_reduction(
        e, &pl_cl_grad_overflow, pl_overflow_task_index(e, 0), sizeof(pl_overflow_args),
        overflow_args, e->h_ls_partial, &pl_cl_overflow_combine,
        pl_overflow_combine_task_index(e), &a, sizeof a, e->h_ls, true);
    if (st) return st;
    if (starpu_data_acquire(e->h_ls, STARPU_R) != 0)
        return pl_fail(PL_STATUS_RUNTIME_ERROR,
                       "pl_engine_optimizer_step: cannot read the overflow flag");
    *overflow = e->ls_result[0] != 0.0;
    starpu_data_release(e->h_ls);
    return PL_STATUS_OK;
}

void pl_engine_loss_scaler_update_state(pl_engine_t *e, bool overflow) {
    const pl_loss_scaler_options *o = &e->opt.loss_scaler;
    pl_loss_scaler_state s = {.scale = e->ls_scale, .growth_step = e->ls_growth_step,
                              .hysteresis_step = e->ls_hysteresis_step};
    pl_loss_scaler_step(&s, overflow, o->min_scale, o->max_scale, o->growth_factor,
                        o->backoff_factor, o->growth_interval, o->hysteresis);
    e->ls_scale = s.scale;
    e->ls_growth_step = s.growth_step;
    e->ls_hysteresis_step = s.hysteresis_step;
    e->ls_last_overflow = overflow;
}

pl_status pl_engine_loss_scale(const pl_engine_t *e, double *scale, bool *last_overflow) {
    if (!e || !scale || !last_overflow)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_loss_scale: %s is NULL",
                       !e ? "engine" : !scale ? "scale" : "last_overflow");
    if (!e->opt.loss_scaler.enabled)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_loss_scale: the engine does not scale the loss "
                       "(loss_scaler.enabled is false)");
    *scale = e->ls_scale;
    *last_overflow = e->ls_last_overflow;
    return PL_STATUS_OK;
}
