/* CUDA side of optim/clip.c: the partial gradient norm of one chunk. */
#ifndef PL_OPS_CUDA_CLIP_H
#define PL_OPS_CUDA_CLIP_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* *out = Σ g² (inf false) or max |g| (inf true) over n gradients, in
 * double, summed in a fixed order (bitwise the same run to run). */
void pl_cuda_grad_norm_partial(cudaStream_t s, const float *grad, int64_t n, bool inf,
                               double *out);
/* The same over 16-bit gradients (bf16 != 0: bf16, else fp16), widened. */
void pl_cuda_grad_norm_partial_half(cudaStream_t s, int bf16, const uint16_t *grad,
                                    int64_t n, bool inf, double *out);

#ifdef __cplusplus
}
#endif

#endif
