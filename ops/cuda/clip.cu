/* CUDA side of optim/clip.c: a chunk's partial gradient norm. Block b
 * takes elements b·T + t, b·T + t + G·T, ... (T threads, G blocks, G fixed
 * by n), each block's threads meet in a fixed tree, and one block adds
 * (or takes the maximum of) the G block results in a fixed tree: the
 * norm is bitwise the same run to run. One block over the whole chunk
 * (the first version) walked 10^5 elements per thread on a GPT-2 chunk.
 * fp32 gradients, or 16-bit ones widened as read (util/half.h). */
#include "ops/cuda/clip.h"
#include "ops/cuda/common.cuh"
#include "util/half.h"

enum { NORM_MAX_BLOCKS = 1024 };

struct float_grad {
    const float *g;
    __device__ double operator()(int64_t i) const { return (double)g[i]; }
};
struct half_grad {
    const uint16_t *g;
    int bf16;
    __device__ double operator()(int64_t i) const {
        return (double)pl_half_widen(bf16, g[i]);
    }
};

/* Block-wide max of |values| that keeps a NaN (torch's inf-norm is NaN
 * then), in the same fixed tree as pl_block_sum. */
static __device__ double block_max_nan(double r, double *shared) {
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
    __syncthreads();
    return r;
}

static __device__ double norm_term(double acc, double g, bool inf) {
    if (!inf) return acc + g * g;
    double a = fabs(g);
    return a > acc || a != a ? a : acc;
}

template <typename G>
__global__ void grad_norm_partials_kernel(G grad, int64_t n, bool inf, double *partial) {
    __shared__ double shared[PL_CUDA_THREADS];
    double r = 0.0;
    PL_GRID_STRIDE(i, n) r = norm_term(r, grad(i), inf);
    r = inf ? block_max_nan(r, shared) : pl_block_sum(r, shared);
    if (threadIdx.x == 0) partial[blockIdx.x] = r;
}

__global__ void grad_norm_combine_kernel(const double *partial, int64_t blocks, bool inf,
                                         double *out) {
    __shared__ double shared[PL_CUDA_THREADS];
    double r = 0.0;
    for (int64_t b = threadIdx.x; b < blocks; b += blockDim.x)
        r = inf ? norm_term(r, partial[b], true) : r + partial[b];
    r = inf ? block_max_nan(r, shared) : pl_block_sum(r, shared);
    if (threadIdx.x == 0) *out = r;
}

template <typename G>
static void grad_norm_partial(cudaStream_t s, G grad, int64_t n, bool inf, double *out) {
    int64_t blocks = (n + PL_CUDA_THREADS - 1) / PL_CUDA_THREADS;
    blocks = blocks < 1 ? 1 : blocks > NORM_MAX_BLOCKS ? NORM_MAX_BLOCKS : blocks;
    double *partial = NULL;
    cudaMallocAsync((void **)&partial, (size_t)blocks * sizeof *partial, s);
    grad_norm_partials_kernel<<<(unsigned)blocks, PL_CUDA_THREADS, 0, s>>>(grad, n, inf,
                                                                           partial);
    grad_norm_combine_kernel<<<1, PL_CUDA_THREADS, 0, s>>>(partial, blocks, inf, out);
    cudaFreeAsync(partial, s);
}

extern "C" void pl_cuda_grad_norm_partial(cudaStream_t s, const float *grad, int64_t n,
                                          bool inf, double *out) {
    grad_norm_partial(s, float_grad{grad}, n, inf, out);
}

extern "C" void pl_cuda_grad_norm_partial_half(cudaStream_t s, int bf16, const uint16_t *grad,
                                               int64_t n, bool inf, double *out) {
    grad_norm_partial(s, half_grad{grad, bf16}, n, inf, out);
}
