/* Device helpers every .cu file in ops/cuda/ shares: launch geometry,
 * grid-stride loops and block-wide reductions in a fixed tree order (the
 * same pairs every run, so sums are bitwise reproducible). Static: each
 * file gets its own copy, so no symbol clashes between them. */
#ifndef PL_OPS_CUDA_COMMON_CUH
#define PL_OPS_CUDA_COMMON_CUH

#include <stdint.h>

#define PL_CUDA_THREADS 256 /* a power of two: the tree sums halve it */

static inline unsigned pl_cuda_blocks(int64_t n) {
    int64_t b = (n + PL_CUDA_THREADS - 1) / PL_CUDA_THREADS;
    return (unsigned)(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

#define PL_GRID_STRIDE(i, n)                                             \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (int64_t)gridDim.x * blockDim.x)

/* Block-wide sum of one double per thread in a fixed tree order (the same
 * pairs every run: deterministic). `shared` holds blockDim.x doubles;
 * every thread gets the sum. */
static __device__ double pl_block_sum(double v, double *shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
        __syncthreads();
    }
    double r = shared[0];
    __syncthreads(); /* before `shared` is reused */
    return r;
}

/* Block-wide maximum, likewise. */
static __device__ float pl_block_max(float v, float *shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride)
            shared[threadIdx.x] = fmaxf(shared[threadIdx.x], shared[threadIdx.x + stride]);
        __syncthreads();
    }
    float r = shared[0];
    __syncthreads();
    return r;
}

#endif
