/* CUDA side of ops/arithmetic.c: elementwise product, difference and
 * scaling (see kernels.h). Grid-stride loops; no reductions. */
#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.h"

static __global__ void mul_forward_kernel(float *out, const float *a, const float *b,
                                          int64_t n) {
    PL_GRID_STRIDE(i, n) out[i] = a[i] * b[i];
}

static __global__ void mul_backward_kernel(float *dinp, const float *other,
                                           const float *dout, int64_t n, int acc) {
    PL_GRID_STRIDE(i, n) {
        float g = other[i] * dout[i];
        dinp[i] = acc ? dinp[i] + g : g;
    }
}

static __global__ void sub_forward_kernel(float *out, const float *a, const float *b,
                                          int64_t n) {
    PL_GRID_STRIDE(i, n) out[i] = a[i] - b[i];
}

static __global__ void scale_kernel(float *out, const float *inp, float factor,
                                    int64_t n, int acc) {
    PL_GRID_STRIDE(i, n) {
        float v = factor * inp[i];
        out[i] = acc ? out[i] + v : v;
    }
}

extern "C" void pl_cuda_mul_forward(cudaStream_t s, float *out, const float *a,
                                    const float *b, int64_t n) {
    mul_forward_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(out, a, b, n);
}

extern "C" void pl_cuda_mul_backward(cudaStream_t s, float *dinp, const float *other,
                                     const float *dout, int64_t n, int accumulate) {
    mul_backward_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(dinp, other, dout,
                                                                        n, accumulate);
}

extern "C" void pl_cuda_sub_forward(cudaStream_t s, float *out, const float *a,
                                    const float *b, int64_t n) {
    sub_forward_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(out, a, b, n);
}

extern "C" void pl_cuda_scale(cudaStream_t s, float *out, const float *inp, float factor,
                              int64_t n, int accumulate) {
    scale_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(out, inp, factor, n,
                                                                 accumulate);
}
