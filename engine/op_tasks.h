/* Per-op tasks (engine/op_tasks.c): the core's translation of one op of
 * one tile into StarPU tasks, for any op definition. */
#ifndef PL_ENGINE_OP_TASKS_H
#define PL_ENGINE_OP_TASKS_H

#include "engine/engine_internal.h"
#include "engine/loss_scaler.h"

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
 * op at pl_engine_new, then submission per op and tile (pl_op_submit_forward,
 * _backward and _recompute, declared in engine/hooks.h: ZeRO-3 and
 * recomputation submit op tasks too). */
pl_status pl_engine_ops_init(pl_engine_t *e);
void pl_engine_ops_free(pl_engine_t *e);
/* A kernel returned non-zero (called from the worker); the first failure
 * is kept until pl_engine_check_kernels reports (and clears) it, and then
 * discards the gradients (pl_engine_grads_discard). The same for any
 * failure pl_engine_step_failed (engine/hooks.h) was given. */
void pl_engine_kernel_failed(pl_op_exec *x, const char *kernel, int input, int rc,
                             const char *message);
pl_status pl_engine_check_kernels(pl_engine_t *e);
/* The fixed part of every call of op `op`: its shapes and attributes. */
void pl_op_call_template(const pl_graph_t *g, const pl_op *op, pl_op_call *c);

#endif
