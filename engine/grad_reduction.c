/* What clipping and the loss scaler share (see grad_reduction.h). */
#include "engine/grad_reduction.h"

#include <stdio.h>
#include <stdlib.h>

#include "graph/error.h"

pl_status pl_grad_reduction_init(pl_engine_t *e, pl_grad_reduction *r, const char *what) {
    int n = e->chunks.n;
    r->n = n;
    r->partials = calloc(n ? n : 1, sizeof *r->partials);
    r->h_partial = calloc(n ? n : 1, sizeof *r->h_partial);
    if (!r->partials || !r->h_partial)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_engine_new: out of memory (%s)", what);
    for (int k = 0; k < n; k++)
        starpu_vector_data_register(&r->h_partial[k], STARPU_MAIN_RAM,
                                    (uintptr_t)&r->partials[k], 1, sizeof(double));
    starpu_vector_data_register(&r->h_result, STARPU_MAIN_RAM, (uintptr_t)r->result, 2,
                                sizeof(double));
    r->first_task = pl_engine_reserve_tasks(e, (size_t)n + 1);
    return PL_STATUS_OK;
}

void pl_grad_reduction_name_tasks(pl_engine_t *e, const pl_grad_reduction *r,
                                  const char *partial, const char *combine) {
    for (int k = 0; k <= r->n; k++) {
        pl_task_info *ti = &e->tasks[r->first_task + (size_t)k];
        if (k == r->n) snprintf(ti->name, sizeof ti->name, "%s", combine);
        else snprintf(ti->name, sizeof ti->name, "%s.c%d", partial, k);
        ti->op = -1;
        ti->slot = PL_SLOT_OPT;
        ti->tile = k == r->n ? -1 : k;
        ti->tag = (pl_sched_tag){.stage = -1, .item = -1, .forward = 0, .owner = -1,
                                 .background = 1};
    }
}

void pl_grad_reduction_free(pl_grad_reduction *r) {
    for (int k = 0; r->h_partial && k < r->n; k++)
        if (r->h_partial[k]) starpu_data_unregister(r->h_partial[k]);
    if (r->h_result) starpu_data_unregister(r->h_result);
    free(r->h_partial);
    free(r->partials);
}
