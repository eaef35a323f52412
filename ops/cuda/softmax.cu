/* CUDA side of ops/softmax.c: softmax over rows of C, one block per row
 * (see kernels.h). The maximum and the sums are block reductions in a
 * fixed tree order: deterministic. */
#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.h"

static __global__ void softmax_forward_kernel(float *out, const float *inp, int64_t C) {
    __shared__ double shared[PL_CUDA_THREADS];
    __shared__ float smax[PL_CUDA_THREADS];
    const float *x = inp + blockIdx.x * C;
    float *y = out + blockIdx.x * C;
    float maxv = -INFINITY;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) maxv = fmaxf(maxv, x[c]);
    maxv = pl_block_max(maxv, smax);
    double s = 0.0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        float e = expf(x[c] - maxv);
        y[c] = e;
        s += e;
    }
    /* Each thread rescales only the values it wrote: no sync needed. */
    float inv = (float)(1.0 / pl_block_sum(s, shared));
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) y[c] *= inv;
}

/* dx = y ⊙ (dy − ⟨dy, y⟩) per row. */
static __global__ void softmax_rows_backward_kernel(float *dinp, const float *dout,
                                                     const float *out, int64_t C, int acc) {
    __shared__ double shared[PL_CUDA_THREADS];
    const float *y = out + blockIdx.x * C, *d = dout + blockIdx.x * C;
    float *dx = dinp + blockIdx.x * C;
    double dot = 0.0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dot += (double)d[c] * y[c];
    float fdot = (float)pl_block_sum(dot, shared);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        float v = y[c] * (d[c] - fdot);
        dx[c] = acc ? dx[c] + v : v;
    }
}

extern "C" void pl_cuda_softmax_forward(cudaStream_t s, float *out, const float *inp,
                                        int64_t N, int64_t C) {
    if (N <= 0) return;
    softmax_forward_kernel<<<(unsigned)N, PL_CUDA_THREADS, 0, s>>>(out, inp, C);
}

extern "C" void pl_cuda_softmax_backward(cudaStream_t s, float *dinp, const float *dout,
                                         const float *out, int64_t N, int64_t C,
                                         int accumulate) {
    if (N <= 0) return;
    softmax_rows_backward_kernel<<<(unsigned)N, PL_CUDA_THREADS, 0, s>>>(
        dinp, dout, out, C, accumulate);
}
