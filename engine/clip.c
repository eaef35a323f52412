/* Gradient clipping by global norm as tasks (optim/clip.h has the math):
 * after the last backward of an update, one task per chunk reads the
 * chunk's gradients and writes a partial norm, one task combines the
 * partials into the norm and the clip coefficient, and every optimizer
 * task reads that coefficient. The partials and the result are a few
 * doubles in main memory (user pointers: never evicted nor counted
 * against a budget). A feature module (engine/clip.h): its state is
 * struct pl_clip, nobody else's fields. */
#include "engine/clip.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/engine_internal.h"
#include "engine/grad_reduction.h"
#include "engine/hooks.h"
#include "graph/error.h"
#include "optim/clip.h"

struct pl_clip {
    pl_grad_reduction red;               /* partial norms; {norm, coefficient} */
    bool computed;                       /* an update has computed a norm */
};

pl_status pl_clip_check_options(const pl_engine_options *o) {
    if (!(o->max_norm >= 0.0f && isfinite(o->max_norm)))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: max_norm %g must be a finite value >= 0 (0: no "
                       "clipping)", o->max_norm);
    if (!(o->norm_type == 2.0f || (isinf(o->norm_type) && o->norm_type > 0)))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: norm_type %g must be 2 or INFINITY", o->norm_type);
    return PL_STATUS_OK;
}

pl_status pl_clip_init(pl_engine_t *e, pl_clip **out) {
    *out = NULL;
    if (!(e->opt.max_norm > 0.0f)) return PL_STATUS_OK;
    pl_clip *c = calloc(1, sizeof *c);
    if (!c) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_engine_new: out of memory (clipping)");
    *out = c;
    return pl_grad_reduction_init(e, &c->red, "clipping");
}

void pl_clip_name_tasks(pl_engine_t *e, const pl_clip *c) {
    /* Clipping's tasks belong to the optimizer step (phase O). */
    if (c) pl_grad_reduction_name_tasks(e, &c->red, "gradnorm", "clip");
}

void pl_clip_free(pl_clip *c) {
    if (!c) return;
    pl_grad_reduction_free(&c->red);
    free(c);
}

static void norm_args(const pl_engine_t *e, int c, int64_t n, void *args) {
    (void)c;
    *(pl_grad_norm_args *)args = (pl_grad_norm_args){
        .n = n, .inf = e->opt.norm_type != 2.0f,
        .half = e->half, .bf16 = e->bf16};
}

pl_status pl_clip_submit(pl_engine_t *e, pl_clip *c, double inv_scale) {
    pl_clip_args a = {.n_partials = c->red.n, .inf = e->opt.norm_type != 2.0f,
                      .max_norm = e->opt.max_norm, .inv_scale = inv_scale};
    pl_status st = pl_engine_submit_grad_reduction(
        e, &pl_cl_grad_norm_partial, c->red.first_task, sizeof(pl_grad_norm_args), norm_args,
        c->red.h_partial, &pl_cl_clip_combine, c->red.first_task + (size_t)c->red.n, &a,
        sizeof a, c->red.h_result, a.inf, PL_DP_PARTIALS_NORM);
    if (!st) c->computed = true;
    return st;
}

starpu_data_handle_t pl_clip_factor(const pl_clip *c) { return c ? c->red.h_result : NULL; }

void pl_clip_restart(pl_clip *c) {
    if (c) c->computed = false;
}

pl_status pl_engine_grad_norm(pl_engine_t *e, double *norm) {
    if (!e || !norm)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_grad_norm: %s is NULL",
                       !e ? "engine" : "norm");
    pl_clip *c = e->clip;
    if (!c)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_grad_norm: the engine does not clip (max_norm is 0), "
                       "so it computes no gradient norm");
    if (!c->computed)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_grad_norm: no optimizer update has been made yet");
    /* Waits for the combining task of the last update only. */
    if (starpu_data_acquire(c->red.h_result, STARPU_R) != 0)
        return pl_fail(PL_STATUS_RUNTIME_ERROR, "pl_engine_grad_norm: cannot read the norm");
    *norm = c->red.result[0];
    starpu_data_release(c->red.h_result);
    return PL_STATUS_OK;
}
