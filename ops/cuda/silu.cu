/* CUDA side of ops/silu.c: SiLU, x · sigmoid(x), elementwise (see
 * kernels.h). expf of a large −x is inf and 1 / (1 + inf) is 0, so very
 * negative x gives exactly 0 here (the CPU's capped exponential gives
 * ~1e−35 there: the same to any tolerance). */
#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.h"

static __device__ float silu_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

static __global__ void silu_forward_kernel(float *out, const float *inp, int64_t n) {
    PL_GRID_STRIDE(i, n) {
        float x = inp[i];
        out[i] = x * silu_sigmoid(x);
    }
}

static __global__ void silu_backward_kernel(float *dinp, const float *inp,
                                            const float *dout, int64_t n, int acc) {
    PL_GRID_STRIDE(i, n) {
        float x = inp[i], s = silu_sigmoid(x);
        float g = s * (1.0f + x * (1.0f - s)) * dout[i];
        dinp[i] = acc ? dinp[i] + g : g;
    }
}

extern "C" void pl_cuda_silu_forward(cudaStream_t s, float *out, const float *inp,
                                     int64_t n) {
    silu_forward_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(out, inp, n);
}

extern "C" void pl_cuda_silu_backward(cudaStream_t s, float *dinp, const float *inp,
                                      const float *dout, int64_t n, int accumulate) {
    silu_backward_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(dinp, inp, dout,
                                                                         n, accumulate);
}
