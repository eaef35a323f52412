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

#ifdef __cplusplus
}
#endif

#endif
