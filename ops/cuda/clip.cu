/* CUDA side of optim/clip.c: a chunk's partial gradient norm in one block
 * (thread i takes elements i, i + THREADS, ...; the partials meet in a
 * fixed tree), so the norm is bitwise the same run to run. One block is
 * enough: the optimizer pass that follows streams the same bytes. */
#include "ops/cuda/clip.h"
#include "ops/cuda/common.cuh"

static __global__ void grad_norm_partial_kernel(const float *grad, int64_t n, bool inf,
                                                double *out) {
    __shared__ double shared[PL_CUDA_THREADS];
    double r = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        double g = (double)grad[i];
        if (inf) {
            double a = fabs(g);
            if (a > r || a != a) r = a;
        } else {
            r += g * g;
        }
    }
    if (inf) {
        /* max in the same fixed tree as pl_block_sum */
        shared[threadIdx.x] = r;
        __syncthreads();
        for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
            if (threadIdx.x < stride) {
                double o = shared[threadIdx.x + stride];
                if (o > shared[threadIdx.x] || o != o) shared[threadIdx.x] = o;
            }
            __syncthreads();
        }
        r = shared[0];
    } else {
        r = pl_block_sum(r, shared);
    }
    if (threadIdx.x == 0) *out = r;
}

extern "C" void pl_cuda_grad_norm_partial(cudaStream_t s, const float *grad, int64_t n,
                                          bool inf, double *out) {
    grad_norm_partial_kernel<<<1, PL_CUDA_THREADS, 0, s>>>(grad, n, inf, out);
}
