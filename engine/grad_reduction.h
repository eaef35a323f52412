/* The state of a reduction over every chunk's gradients (clipping's norm,
 * the loss scaler's overflow check): a partial per chunk, a combined
 * result {value, factor}, and the task slots they take. Both modules own
 * one; this is what they share. */
#ifndef PL_ENGINE_GRAD_REDUCTION_H
#define PL_ENGINE_GRAD_REDUCTION_H

#include "engine/engine_internal.h"

typedef struct pl_grad_reduction {
    int n;                           /* chunks */
    size_t first_task;               /* n partial tasks, then the combining one */
    double *partials;                /* [n], in main memory (user pointers:
                                        never evicted nor counted against a
                                        budget) */
    starpu_data_handle_t *h_partial; /* [n] */
    double result[2];
    starpu_data_handle_t h_result;
} pl_grad_reduction;

/* Registers the partials and the result (r must not move afterwards) and
 * reserves the task slots; `what` names the module in an out-of-memory
 * message. */
pl_status pl_grad_reduction_init(pl_engine_t *e, pl_grad_reduction *r, const char *what);
/* Names its tasks "<partial>.c<k>" and `combine` (phase O). */
void pl_grad_reduction_name_tasks(pl_engine_t *e, const pl_grad_reduction *r,
                                  const char *partial, const char *combine);
void pl_grad_reduction_free(pl_grad_reduction *r);

#endif
