/* CUDA side of ops/mse.c: the mean-squared-error loss (see kernels.h).
 * The sum is one block's: thread i takes elements i, i + THREADS, ... and
 * the partial sums meet in a fixed tree, so the loss is bitwise the same
 * run to run (as pl_mean's on CUDA). */
#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.h"

static __global__ void mse_forward_kernel(double *sum, const float *pred,
                                          const float *target, int64_t n) {
    __shared__ double shared[PL_CUDA_THREADS];
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        float d = pred[i] - target[i];
        s += (double)d * d;
    }
    s = pl_block_sum(s, shared);
    if (threadIdx.x == 0) {
        sum[0] = s;
        sum[1] = 0.0; /* no invalid values */
    }
}

static __global__ void mse_backward_kernel(float *dinp, const float *pred,
                                           const float *target, int64_t n, float k,
                                           int acc) {
    PL_GRID_STRIDE(i, n) {
        float g = k * (pred[i] - target[i]);
        dinp[i] = acc ? dinp[i] + g : g;
    }
}

extern "C" void pl_cuda_mse_forward(cudaStream_t s, double *sum, const float *pred,
                                    const float *target, int64_t n) {
    mse_forward_kernel<<<1, PL_CUDA_THREADS, 0, s>>>(sum, pred, target, n);
}

extern "C" void pl_cuda_mse_backward(cudaStream_t s, float *dinp, const float *pred,
                                     const float *target, int64_t n, float scale,
                                     float sign, int accumulate) {
    /* The same k as the CPU kernel, so both round alike. */
    float k = 2.0f * scale * sign;
    mse_backward_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(dinp, pred, target,
                                                                        n, k, accumulate);
}
