/* One gradient added to another, as a task: g[offset .. offset + n) (+)= s.
 * The engine sums the gradients of a parameter several ops use (a tied
 * embedding) with it at each update (engine/tied_grads.c). And a gradient
 * buffer cleared, as a task. */
#ifndef PL_OPTIM_GRAD_SUM_H
#define PL_OPTIM_GRAD_SUM_H

#include <starpu.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct pl_grad_sum_args {
    int64_t offset; /* of the sum in buffer 0 (elements: a whole chunk's) */
    int64_t n;
    int elem;       /* 4: fp32; 2: bf16 or fp16 (added in fp32, rounded once) */
    bool bf16;
    bool copy;      /* g = s: buffer 0 holds nothing to keep there yet */
} pl_grad_sum_args;

/* Buffers (g, s); the task sets their modes: g W when a copy writes a
 * handle of its own, else RW (a whole chunk holds other gradients); s R.
 * CPU and CUDA, fp32 and 16-bit. */
extern struct starpu_codelet pl_cl_grad_sum;

/* Buffer 0 (W): ranges [lo, hi) of its elements zero, the rest left as
 * the allocation had it, on the worker's memory node (ZeRO-2's whole
 * gradients given back after a release: the weight gradients overwrite
 * the rest); a buffer 1, if the task has one (R), is only waited for.
 * CPU and CUDA. */
enum { PL_GRAD_ZERO_MAX_RANGES = 16 };
typedef struct pl_grad_zero_args {
    int n;
    int64_t lo[PL_GRAD_ZERO_MAX_RANGES], hi[PL_GRAD_ZERO_MAX_RANGES];
} pl_grad_zero_args;
extern struct starpu_codelet pl_cl_grad_zero;

#endif
