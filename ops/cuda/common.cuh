/* Device helpers every .cu file in ops/cuda/ shares: launch geometry,
 * grid-stride loops and block-wide reductions in a fixed tree order (the
 * same pairs every run, so sums are bitwise reproducible). Static: each
 * file gets its own copy, so no symbol clashes between them. */
#ifndef PL_OPS_CUDA_COMMON_CUH
#define PL_OPS_CUDA_COMMON_CUH

#include <stdint.h>

#include <cuda_runtime.h>

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

/* Block-wide maximum (of floats or doubles), likewise; NaNs are ignored
 * as fmaxf/fmax ignore them. */
static __device__ float pl_max(float a, float b) { return fmaxf(a, b); }
static __device__ double pl_max(double a, double b) { return fmax(a, b); }

template <typename T>
static __device__ T pl_block_max(T v, T *shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride)
            shared[threadIdx.x] = pl_max(shared[threadIdx.x], shared[threadIdx.x + stride]);
        __syncthreads();
    }
    T r = shared[0];
    __syncthreads(); /* before `shared` is reused */
    return r;
}

/* Column sums of an N x C matrix given as f(r, c) (a functor with a
 * __device__ float operator()(int64_t r, int64_t c) const), deterministic
 * and parallel over rows too: the rows are cut into at most
 * PL_COLUMN_SPLIT ranges, one thread per (range, column) adds its range in
 * row order, then one thread per column adds the ranges in order; dst[c]
 * (+)= the sum. One thread per column over all N rows (the first version)
 * left the GPU nearly idle: C threads for a 8192 x 768 gradient. */
enum { PL_COLUMN_SPLIT = 128 };

template <typename F>
__global__ void pl_column_partials_kernel(float *partial, int64_t N, int64_t C,
                                          int64_t rows_per, F f) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    int64_t r0 = (int64_t)blockIdx.y * rows_per, r1 = r0 + rows_per < N ? r0 + rows_per : N;
    float s = 0.0f;
    for (int64_t r = r0; r < r1; r++) s += f(r, c);
    partial[(int64_t)blockIdx.y * C + c] = s;
}

static __global__ void pl_column_finish_kernel(float *dst, const float *partial, int64_t K,
                                               int64_t C, int accumulate) {
    PL_GRID_STRIDE(c, C) {
        float s = 0.0f;
        for (int64_t k = 0; k < K; k++) s += partial[k * C + c];
        dst[c] = accumulate ? dst[c] + s : s;
    }
}

template <typename F>
static void pl_cuda_column_sums(cudaStream_t s, float *dst, int64_t N, int64_t C,
                                int accumulate, F f) {
    if (N < 1 || C < 1) {
        if (!accumulate && C > 0) cudaMemsetAsync(dst, 0, (size_t)C * sizeof *dst, s);
        return;
    }
    int64_t K = N < PL_COLUMN_SPLIT ? N : PL_COLUMN_SPLIT;
    int64_t rows_per = (N + K - 1) / K;
    K = (N + rows_per - 1) / rows_per;
    float *partial = NULL;
    cudaMallocAsync((void **)&partial, (size_t)(K * C) * sizeof *partial, s);
    dim3 grid((unsigned)((C + PL_CUDA_THREADS - 1) / PL_CUDA_THREADS), (unsigned)K);
    pl_column_partials_kernel<<<grid, PL_CUDA_THREADS, 0, s>>>(partial, N, C, rows_per, f);
    pl_column_finish_kernel<<<pl_cuda_blocks(C), PL_CUDA_THREADS, 0, s>>>(dst, partial, K, C,
                                                                         accumulate);
    cudaFreeAsync(partial, s);
}

/* f(r, c) = src[r * C + c]: plain column sums (bias gradients). */
struct pl_matrix_element {
    const float *src;
    int64_t C;
    __device__ float operator()(int64_t r, int64_t c) const { return src[r * C + c]; }
};

#endif
