/* Per-op tasks (engine/op_tasks.c): the core's translation of one op of
 * one tile into StarPU tasks, for any op definition. */
#ifndef PL_ENGINE_OP_TASKS_H
#define PL_ENGINE_OP_TASKS_H

#include "engine/engine_internal.h"

/* What the loss's gradient is multiplied by on top of 1/batch: 1/N with
 * gradient accumulation over N batches (GradAccumOptimizer.backward
 * divides the loss by accumulate_size). */
/* With dynamic loss scaling, times the current loss scale too (1 when
 * off, so nothing changes then). */
#define pl_engine_loss_grad_scale(e) \
    ((1.0f / (float)(e)->opt.accumulate_size) * (float)pl_loss_scaler_scale((e)->ls))

/* The StarPU codelets of one op definition (engine/op_tasks.c). */
struct pl_op_codelets {
    const pl_op_def *def;
    struct starpu_codelet f, l, w, b[PL_OP_MAX_INPUTS];
    char names[3 + PL_OP_MAX_INPUTS][64];
};

/* One op as its tasks' trampolines see it: the fixed part of every call
 * (shapes, attributes) and its codelets. */
struct pl_op_exec {
    pl_engine_t *engine;
    const pl_op *op;
    pl_op_codelets *cl;
    pl_op_call call;
    /* 16-bit operands the trampoline widens to fp32 scratch before the
     * kernel and rounds back after it (gradients share their tensor's
     * format): inputs, parameters (all or none: one chunk set), the
     * output and the saved tensor. */
    bool half_in[PL_OP_MAX_INPUTS], half_params, half_out, half_saved;
    bool fused[64]; /* per tile: this step's loss task wrote the gradient */
};


/* Per-op tasks (engine/op_tasks.c): codelets and call templates for every
 * op at pl_engine_new, then submission per op and tile. */
pl_status pl_engine_ops_init(pl_engine_t *e);
void pl_engine_ops_free(pl_engine_t *e);
pl_status pl_op_submit_forward(pl_engine_t *e, int op_index, int tile,
                               bool training);
/* The op's training forward again, as task slot `task` (activation
 * recomputation, engine/recompute.c): same operands, same seed, and the
 * handles `gates` (at most PL_RECOMPUTE_MAX_GATES) read by no kernel, so
 * that StarPU starts it only once their writers have run. */
#define PL_RECOMPUTE_MAX_GATES 2
pl_status pl_op_submit_recompute(pl_engine_t *e, int op_index, int tile, size_t task,
                                 const starpu_data_handle_t *gates, int n_gates);
pl_status pl_op_submit_backward(pl_engine_t *e, int op_index, int tile);
/* A kernel returned non-zero (called from the worker); the first failure
 * is kept until pl_engine_check_kernels reports (and clears) it, and then
 * discards the gradients (pl_engine_grads_discard). */
void pl_engine_kernel_failed(pl_op_exec *x, const char *kernel, int input, int rc,
                             const char *message);
/* The same for any failure found on a worker or in a task's callback (a
 * placement policy's bad answer): the step reports this message. */
void pl_engine_step_failed(pl_engine_t *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
pl_status pl_engine_check_kernels(pl_engine_t *e);
/* The fixed part of every call of op `op`: its shapes and attributes. */
void pl_op_call_template(const pl_graph_t *g, const pl_op *op, pl_op_call *c);

#endif
