/* CUDA side of optim/loss_scaler.c: the flag is cleared, then every thread
 * that meets a non-finite gradient sets it to 1. The writes race but all
 * store the same value, so the result is exact and deterministic. fp32
 * gradients, or 16-bit ones (a 16-bit inf or NaN widens to one). */
#include "ops/cuda/common.cuh"
#include "ops/cuda/loss_scale.h"
#include "util/half.h"

template <typename T>
static __device__ bool finite_at(const T *g, int64_t i, int bf16);
template <>
__device__ bool finite_at<float>(const float *g, int64_t i, int) {
    return isfinite(g[i]);
}
template <>
__device__ bool finite_at<uint16_t>(const uint16_t *g, int64_t i, int bf16) {
    return isfinite(pl_half_widen(bf16, g[i]));
}

template <typename T>
__global__ void grad_overflow_kernel(const T *grad, int64_t n, int bf16, double *flag) {
    PL_GRID_STRIDE(i, n)
    if (!finite_at(grad, i, bf16)) *flag = 1.0;
}

template <typename T>
static void grad_overflow(cudaStream_t s, const T *grad, int64_t n, int bf16, double *flag) {
    cudaMemsetAsync(flag, 0, sizeof *flag, s);
    int64_t blocks = (n + PL_CUDA_THREADS - 1) / PL_CUDA_THREADS;
    if (blocks > 1024) blocks = 1024;
    if (blocks < 1) blocks = 1;
    grad_overflow_kernel<<<(unsigned)blocks, PL_CUDA_THREADS, 0, s>>>(grad, n, bf16, flag);
}

extern "C" void pl_cuda_grad_overflow(cudaStream_t s, const float *grad, int64_t n,
                                      double *flag) {
    grad_overflow(s, grad, n, 0, flag);
}

extern "C" void pl_cuda_grad_overflow_half(cudaStream_t s, int bf16, const uint16_t *grad,
                                           int64_t n, double *flag) {
    grad_overflow(s, grad, n, bf16, flag);
}
