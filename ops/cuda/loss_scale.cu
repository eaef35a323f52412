/* CUDA side of optim/loss_scaler.c: the flag is cleared, then every thread
 * that meets a non-finite gradient sets it to 1. The writes race but all
 * store the same value, so the result is exact and deterministic. */
#include "ops/cuda/common.cuh"
#include "ops/cuda/loss_scale.h"

static __global__ void grad_overflow_kernel(const float *grad, int64_t n, double *flag) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        if (!isfinite(grad[i])) *flag = 1.0;
}

extern "C" void pl_cuda_grad_overflow(cudaStream_t s, const float *grad, int64_t n,
                                      double *flag) {
    cudaMemsetAsync(flag, 0, sizeof *flag, s);
    int64_t blocks = (n + PL_CUDA_THREADS - 1) / PL_CUDA_THREADS;
    if (blocks > 1024) blocks = 1024;
    if (blocks < 1) blocks = 1;
    grad_overflow_kernel<<<(unsigned)blocks, PL_CUDA_THREADS, 0, s>>>(grad, n, flag);
}
