/* Gradient clipping by global norm as tasks (optim/clip.h has the math):
 * after the last backward of an update, one task per chunk reads the
 * chunk's gradients and writes a partial norm, one task combines the
 * partials into the norm and the clip coefficient, and every optimizer
 * task reads that coefficient. The partials and the result are a few
 * doubles in main memory (user pointers: never evicted nor counted
 * against a budget). */
#include <stdlib.h>

#include "engine/engine_internal.h"
#include "graph/error.h"
#include "optim/clip.h"

pl_status pl_engine_clip_init(pl_engine_t *e) {
    if (!(e->opt.max_norm > 0.0f)) return PL_STATUS_OK;
    int n = e->chunks.n;
    e->norm_partials = calloc(n ? n : 1, sizeof *e->norm_partials);
    e->h_norm_partial = calloc(n ? n : 1, sizeof *e->h_norm_partial);
    if (!e->norm_partials || !e->h_norm_partial)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_engine_new: out of memory (clipping)");
    for (int c = 0; c < n; c++)
        starpu_vector_data_register(&e->h_norm_partial[c], STARPU_MAIN_RAM,
                                    (uintptr_t)&e->norm_partials[c], 1, sizeof(double));
    starpu_vector_data_register(&e->h_clip, STARPU_MAIN_RAM, (uintptr_t)e->clip_result, 2,
                                sizeof(double));
    return PL_STATUS_OK;
}

void pl_engine_clip_free(pl_engine_t *e) {
    if (e->h_norm_partial)
        for (int c = 0; c < e->chunks.n; c++)
            if (e->h_norm_partial[c]) starpu_data_unregister(e->h_norm_partial[c]);
    if (e->h_clip) starpu_data_unregister(e->h_clip);
    free(e->h_norm_partial);
    free(e->norm_partials);
}

static void norm_args(const pl_engine_t *e, int c, void *args) {
    *(pl_grad_norm_args *)args = (pl_grad_norm_args){
        .n = pl_engine_dp_reduced_numel(e, c), .inf = e->opt.norm_type != 2.0f,
        .half = e->half, .bf16 = e->bf16};
}

pl_status pl_engine_clip_submit(pl_engine_t *e) {
    pl_clip_args a = {.n_partials = e->chunks.n, .inf = e->opt.norm_type != 2.0f,
                      .max_norm = e->opt.max_norm, .inv_scale = 1.0 / e->ls_scale};
    pl_status st = pl_engine_submit_grad_reduction(
        e, &pl_cl_grad_norm_partial, pl_norm_task_index(e, 0), sizeof(pl_grad_norm_args),
        norm_args, e->h_norm_partial, &pl_cl_clip_combine, pl_clip_task_index(e), &a,
        sizeof a, e->h_clip, a.inf);
    if (!st) e->clip_computed = true;
    return st;
}

pl_status pl_engine_grad_norm(pl_engine_t *e, double *norm) {
    if (!e || !norm)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_grad_norm: %s is NULL",
                       !e ? "engine" : "norm");
    if (!(e->opt.max_norm > 0.0f))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_grad_norm: the engine does not clip (max_norm is 0), "
                       "so it computes no gradient norm");
    if (!e->clip_computed)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_grad_norm: no optimizer update has been made yet");
    /* Waits for the combining task of the last update only. */
    if (starpu_data_acquire(e->h_clip, STARPU_R) != 0)
        return pl_fail(PL_STATUS_RUNTIME_ERROR, "pl_engine_grad_norm: cannot read the norm");
    *norm = e->clip_result[0];
    starpu_data_release(e->h_clip);
    return PL_STATUS_OK;
}
