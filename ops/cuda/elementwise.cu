/* CUDA side of ops/elementwise.c: relu, gelu (tanh), add, as grid-stride
 * loops. */
#include <math.h>

#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.h"
#include "util/half.h"

#define GELU_SCALE 0.7978845608028654f

__global__ void relu_forward_kernel(float *out, const float *inp, int64_t n) {
    PL_GRID_STRIDE(i, n) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}
__global__ void relu_backward_kernel(float *dinp, const float *inp, const float *dout,
                                     int64_t n, int acc) {
    PL_GRID_STRIDE(i, n) {
        float g = inp[i] > 0.0f ? dout[i] : 0.0f;
        dinp[i] = acc ? dinp[i] + g : g;
    }
}
__global__ void gelu_forward_kernel(float *out, const float *inp, int64_t n) {
    PL_GRID_STRIDE(i, n) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x)));
    }
}
__global__ void gelu_backward_kernel(float *dinp, const float *inp, const float *dout,
                                     int64_t n, int acc) {
    PL_GRID_STRIDE(i, n) {
        float x = inp[i];
        float th = tanhf(GELU_SCALE * (x + 0.044715f * x * x * x));
        float du = GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        float g = (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du) * dout[i];
        dinp[i] = acc ? dinp[i] + g : g;
    }
}
__global__ void add_forward_kernel(float *out, const float *a, const float *b,
                                   int64_t n) {
    PL_GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}
__global__ void add_backward_kernel(float *dinp, const float *dout, int64_t n,
                                    int acc) {
    PL_GRID_STRIDE(i, n) dinp[i] = acc ? dinp[i] + dout[i] : dout[i];
}

extern "C" void pl_cuda_relu_forward(cudaStream_t s, float *out, const float *inp,
                                     int64_t n) {
    relu_forward_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(out, inp, n);
}
extern "C" void pl_cuda_relu_backward(cudaStream_t s, float *dinp, const float *inp,
                                      const float *dout, int64_t n, int accumulate) {
    relu_backward_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(dinp, inp, dout, n,
                                                           accumulate);
}
extern "C" void pl_cuda_gelu_forward(cudaStream_t s, float *out, const float *inp,
                                     int64_t n) {
    gelu_forward_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(out, inp, n);
}
extern "C" void pl_cuda_gelu_backward(cudaStream_t s, float *dinp, const float *inp,
                                      const float *dout, int64_t n, int accumulate) {
    gelu_backward_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(dinp, inp, dout, n,
                                                           accumulate);
}
extern "C" void pl_cuda_add_forward(cudaStream_t s, float *out, const float *a,
                                    const float *b, int64_t n) {
    add_forward_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(out, a, b, n);
}
extern "C" void pl_cuda_add_backward(cudaStream_t s, float *dinp, const float *dout,
                                     int64_t n, int accumulate) {
    add_backward_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(dinp, dout, n, accumulate);
}

/* g = round(widen(g) + widen(side)): the 16-bit gradient sum of
 * optim/grad_sum.c, added in fp32 and rounded once as on the CPU. */
__global__ void half_add_kernel(int bf16, uint16_t *g, const uint16_t *side, int64_t n) {
    PL_GRID_STRIDE(i, n) {
        g[i] = pl_half_round(bf16, pl_half_widen(bf16, g[i]) + pl_half_widen(bf16, side[i]));
    }
}

extern "C" void pl_cuda_half_add(cudaStream_t s, int bf16, uint16_t *g, const uint16_t *side,
                                 int64_t n, int accumulate) {
    if (n <= 0) return;
    if (!accumulate)
        cudaMemcpyAsync(g, side, (size_t)n * sizeof *g, cudaMemcpyDeviceToDevice, s);
    else
        half_add_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(bf16, g, side, n);
}
