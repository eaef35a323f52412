/* CUDA side of optim/loss_scaler.c: whether a chunk's gradients hold a
 * non-finite value. */
#ifndef PL_OPS_CUDA_LOSS_SCALE_H
#define PL_OPS_CUDA_LOSS_SCALE_H

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* *flag (device) = 1 if any of the n floats is inf or NaN, else 0. */
void pl_cuda_grad_overflow(cudaStream_t s, const float *grad, int64_t n, double *flag);
/* The same over 16-bit gradients (bf16 != 0: bf16, else fp16). */
void pl_cuda_grad_overflow_half(cudaStream_t s, int bf16, const uint16_t *grad, int64_t n,
                                double *flag);

#ifdef __cplusplus
}
#endif

#endif
