/* Activation memory as the tasks run (engine/activation_memory.c): which
 * op outputs, saved tensors and activation gradients hold data, their
 * bytes now and at most, and the one way to drop them. */
#ifndef PL_ENGINE_ACTIVATION_MEMORY_H
#define PL_ENGINE_ACTIVATION_MEMORY_H

#include "engine/engine_internal.h"

typedef struct pl_act_mem pl_act_mem;

pl_status pl_act_mem_init(pl_engine_t *e);
void pl_act_mem_free(pl_engine_t *e);
/* Called from the kernel trampoline as an op task starts on a worker:
 * what it writes becomes live. A forward (or recomputing) task writes the
 * op's output, saved tensor and invalid-value counter; a gradient task
 * writes one tensor's gradient. */
void pl_act_mem_forward_writes(pl_engine_t *e, int op, int tile);
void pl_act_mem_grad_writes(pl_engine_t *e, int tensor, int tile);
/* Drops tensor `tensor`'s value (grad false) or gradient in `tile` once
 * the tasks submitted before that use it have run: StarPU frees its
 * buffers (starpu_data_invalidate_submit) and the bytes stop counting
 * then. Its next writer makes it live again. */
void pl_act_mem_drop(pl_engine_t *e, int tensor, int tile, bool grad);
/* The CPU workers' fp32 widening scratch grew (or shrank) by `bytes`. */
void pl_act_mem_scratch(int64_t bytes);

#endif
