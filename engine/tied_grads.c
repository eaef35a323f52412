/* Parameters several ops use (a GPT's token embedding, tied to its LM
 * head): one gradient buffer per user.
 *
 * Why: gradients accumulate in submission order (StarPU's sequential
 * consistency), and the engine submits microbatch by microbatch, so one
 * buffer shared by two ops chains their weight-gradient tasks across
 * stages — the embedding's W of microbatch k waits for the LM head's W of
 * microbatch k on the last stage. Zero-bubble schedules put the last
 * stage's W's late on purpose, so stage 0 stalled about 1 ms per
 * microbatch (bench_pipeline, ZB-H1: W item 4.9-5.6 ms on stage 0 against
 * 4.2-4.4 ms on stage 1, the gap right before "W embedding"), and a
 * schedule's W order could even deadlock on that chain. Megatron keeps a
 * copy of the embedding on the first and last stages and all-reduces
 * their gradients for the same reason.
 *
 * How: the parameter's first user (in op order) writes the parameter's
 * own gradient; every later (op, parameter) use accumulates into a buffer
 * of its own, microbatch by microbatch and over accumulated batches like
 * any gradient, and at the optimizer step one task adds it to the
 * parameter's gradient (or copies it there when this rank wrote none: the
 * LM head's rank of a pipeline across ranks). Every schedule submits in
 * the same order, so every schedule forms the same sums; everything that
 * reads the gradient (clipping, the loss scaler's check, reductions over
 * ranks, the optimizer) is submitted after that task. Summing once per
 * update, not per batch, makes a pipeline across ranks — whose ranks sum
 * their contributions with one collective per update — add the same
 * terms in the same order as one process: bitwise the same, with
 * gradient accumulation too (test_pipeline_ranks). pl_engine_get_grad
 * between updates adds the buffers to what it reads. ZeRO-3, which
 * reduce-scatters each chunk's gradients in the backward pass of an
 * update, sums the chunk's tied buffers right before (engine/zero3.c):
 * the same sums as DDP's, op by op or item by item. */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/hooks.h"
#include "engine/tied_grads.h"
#include "graph/error.h"
#include "optim/grad_sum.h"
#include "util/half.h"

/* A later use of a parameter several ops use: that op's weight gradient
 * accumulates here and is added to the parameter's gradient at the
 * optimizer step. */
typedef struct pl_tied_grad {
    int op, param;          /* the op, and which of its parameters */
    int tensor;             /* the parameter */
    starpu_data_handle_t h; /* the parameter's size, in gradient format */
    bool written;           /* since the last update, not summed yet */
} pl_tied_grad;

/* The module's state (e->ties). */
struct pl_ties {
    pl_tied_grad *use;      /* [n] */
    int n;
    size_t first_task;      /* the sum of use k is task first_task + k */
};

pl_status pl_engine_ties_init(pl_engine_t *e) {
    const pl_graph_t *g = e->g;
    /* (op, parameter) uses in op order; every use after a tensor's first. */
    int n_uses = 0;
    for (int op = 0; op < g->n_ops; op++) n_uses += pl_op_n_params(&g->ops[op]);
    bool *seen = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *seen);
    pl_ties *ties = e->ties = calloc(1, sizeof *e->ties);
    if (ties) ties->use = calloc(n_uses ? n_uses : 1, sizeof *ties->use);
    if (!seen || !ties || !ties->use) {
        free(seen);
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_engine_new: out of memory");
    }
    for (int op = 0; op < g->n_ops; op++) {
        const pl_op *o = &g->ops[op];
        for (int i = 0; i < pl_op_n_params(o); i++) {
            int t = o->in[o->n_inputs + i];
            if (!seen[t]) {
                seen[t] = true;
                continue;
            }
            pl_tied_grad *tg = &ties->use[ties->n++];
            *tg = (pl_tied_grad){.op = op, .param = i, .tensor = t};
            /* StarPU allocates it where the first W task runs (the first
             * access after each update writes it whole). */
            starpu_vector_data_register(&tg->h, -1, 0, (uint32_t)g->tensors[t]->numel,
                                        e->chunks.elem);
        }
    }
    free(seen);
    ties->first_task = pl_engine_reserve_tasks(e, (size_t)ties->n);
    return PL_STATUS_OK;
}

void pl_engine_ties_name_tasks(pl_engine_t *e) {
    const pl_ties *ties = e->ties;
    for (int k = 0; k < ties->n; k++) {
        pl_task_info *ti = &e->tasks[ties->first_task + (size_t)k];
        snprintf(ti->name, sizeof ti->name, "tied_sum.%.32s", e->g->ops[ties->use[k].op].name);
        ti->op = -1;
        ti->slot = PL_SLOT_OPT;
        ti->tile = -1;
        ti->stage = -1;
        /* Not background: the update of the parameter's chunk waits for it. */
        ti->tag = (pl_sched_tag){.stage = -1, .item = -1, .forward = 0, .owner = -1,
                                 .background = 0};
    }
}

void pl_engine_ties_free(pl_engine_t *e) {
    pl_ties *ties = e->ties;
    if (!ties) return;
    for (int k = 0; k < ties->n; k++)
        if (ties->use[k].h) starpu_data_unregister(ties->use[k].h);
    free(ties->use);
    free(ties);
    e->ties = NULL;
}

starpu_data_handle_t pl_engine_tie_grad(pl_engine_t *e, int op, int param, bool *accumulate) {
    for (int k = 0; k < e->ties->n; k++) {
        pl_tied_grad *tg = &e->ties->use[k];
        if (tg->op != op || tg->param != param) continue;
        *accumulate = tg->written;
        tg->written = true;
        return tg->h;
    }
    return NULL;
}

pl_status pl_engine_ties_submit_sums(pl_engine_t *e, int chunk) {
    e->pending_step = -1; /* not a placement step of its own */
    for (int k = 0; k < e->ties->n; k++) {
        pl_tied_grad *tg = &e->ties->use[k];
        /* Not written: the op is another rank's, or (ZeRO-3) summed. */
        if (!tg->written || (chunk >= 0 && e->trt[tg->tensor].chunk != chunk)) continue;
        const pl_tensor_t *p = e->g->tensors[tg->tensor];
        pl_tensor_rt *r = &e->trt[tg->tensor];
        pl_grad_sum_args a = {.offset = (int64_t)pl_param_grad_offset(e, p),
                              .n = p->numel,
                              .elem = (int)e->chunks.elem,
                              .bf16 = e->bf16,
                              .copy = !r->param_grad_written};
        pl_status st = e->hooks->dp_grads_back(e, r->chunk, NULL);
        if (st) return st;
        starpu_data_handle_t h[2] = {pl_param_grad_handle(e, p), tg->h};
        enum starpu_data_access_mode m[2] = {
            a.copy && !e->chunks.managed ? STARPU_W : STARPU_RW, STARPU_R};
        r->param_grad_written = true;
        tg->written = false; /* in the parameter's gradient now */
        st = pl_engine_submit_modes(e, &pl_cl_grad_sum, e->ties->first_task + (size_t)k, &a, sizeof a,
                                    2, h, m);
        if (st) return st;
    }
    return PL_STATUS_OK;
}

pl_status pl_engine_ties_add_to(pl_engine_t *e, const pl_tensor_t *p, float *out) {
    bool main_zero = !e->trt[p->id].param_grad_written;
    for (int k = 0; k < e->ties->n; k++) {
        pl_tied_grad *tg = &e->ties->use[k];
        if (tg->tensor != p->id || !tg->written) continue;
        if (starpu_data_acquire(tg->h, STARPU_R) != 0)
            return pl_fail(PL_STATUS_RUNTIME_ERROR, "pl_engine_get_grad: cannot acquire "
                           "the gradient of '%s' in %s", p->name, e->g->ops[tg->op].name);
        const void *side = (const void *)starpu_vector_get_local_ptr(tg->h);
        /* As the update's sum task will form it (rounded to 16 bits). */
        for (int64_t i = 0; i < p->numel; i++) {
            float x = !e->half ? ((const float *)side)[i]
                      : e->bf16 ? pl_bf16_to_float(((const uint16_t *)side)[i])
                                : pl_fp16_to_float(((const uint16_t *)side)[i]);
            float y = main_zero ? x : out[i] + x;
            if (e->half)
                y = e->bf16 ? pl_bf16_to_float(pl_bf16_from_float(y))
                            : pl_fp16_to_float(pl_fp16_from_float(y));
            out[i] = y;
        }
        starpu_data_release(tg->h);
        main_zero = false;
    }
    return PL_STATUS_OK;
}

void pl_engine_ties_restart(pl_engine_t *e) {
    for (int k = 0; k < e->ties->n; k++) e->ties->use[k].written = false;
}
