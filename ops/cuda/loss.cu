/* CUDA side of ops/loss.c: cross-entropy, accuracy and mean, each reduced
 * in a fixed order (deterministic). */
#include <math.h>

#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.h"

/* Cross-entropy and accuracy: one block per row (a row of GPT-2's 50304
 * classes is 196 elements per thread), so all rows run at once; a single
 * block over every row (the first version) made bench_gpt's loss task
 * 1.1 s of a 1.5 s step on an H200. Each row's value goes to a per-block
 * slot in fixed order (block b takes rows b, b + G, ...), and one block
 * adds the G slots in a fixed tree order: deterministic, like the CPU's.
 * As on the CPU: e^(x - max) in float (expf), summed in double, softmax =
 * e * (1 / sum). */
enum { CE_MAX_BLOCKS = 4096 };

__global__ void cross_entropy_rows_kernel(double *partial, float *dlogits,
                                          const float *logits, const int32_t *labels,
                                          int64_t N, int64_t K, int64_t V, float scale) {
    __shared__ double shared[PL_CUDA_THREADS];
    __shared__ float fshared[PL_CUDA_THREADS];
    double loss = 0.0, bad = 0.0; /* meaningful in thread 0 */
    for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
        const float *row = logits + r * K;
        float *drow = dlogits ? dlogits + r * K : NULL;
        int32_t y = labels[r];
        /* Only the first V of the row's K classes count (a padded
         * vocabulary's extra columns: probability 0, gradient 0). */
        float m = -INFINITY;
        for (int64_t k = threadIdx.x; k < V; k += blockDim.x) m = fmaxf(m, row[k]);
        float maxv = pl_block_max(m, fshared);
        double se = 0.0;
        for (int64_t k = threadIdx.x; k < V; k += blockDim.x) se += expf(row[k] - maxv);
        double sum = pl_block_sum(se, shared);
        if (drow)
            for (int64_t k = V + threadIdx.x; k < K; k += blockDim.x) drow[k] = 0.0f;
        if (y < 0 || y >= V) {
            bad += 1.0;
            if (drow)
                for (int64_t k = threadIdx.x; k < V; k += blockDim.x) drow[k] = 0.0f;
            continue;
        }
        loss += (double)maxv + log(sum) - row[y];
        if (drow) {
            float inv = (float)(1.0 / sum);
            for (int64_t k = threadIdx.x; k < V; k += blockDim.x) {
                float p = expf(row[k] - maxv) * inv;
                drow[k] = (k == y ? p - 1.0f : p) * scale;
            }
        }
    }
    if (threadIdx.x == 0) {
        partial[2 * blockIdx.x] = loss;
        partial[2 * blockIdx.x + 1] = bad;
    }
}

__global__ void accuracy_rows_kernel(double *partial, const float *logits,
                                     const int32_t *labels, int64_t N, int64_t K) {
    __shared__ double shared[PL_CUDA_THREADS];
    __shared__ float fshared[PL_CUDA_THREADS];
    double correct = 0.0;
    for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
        const float *row = logits + r * K;
        float m = -INFINITY;
        for (int64_t k = threadIdx.x; k < K; k += blockDim.x) m = fmaxf(m, row[k]);
        float maxv = pl_block_max(m, fshared);
        /* The first index holding the maximum, as the CPU's strict '>'. */
        double first = (double)K;
        for (int64_t k = threadIdx.x; k < K; k += blockDim.x)
            if (row[k] == maxv) {
                first = (double)k;
                break;
            }
        first = -pl_block_max(-first, shared);
        /* No element equals the maximum only when NaNs hide it: the CPU's
         * strict '>' then keeps index 0. */
        int64_t best = first < (double)K ? (int64_t)first : 0;
        correct += best == labels[r] ? 1.0 : 0.0;
    }
    if (threadIdx.x == 0) {
        partial[2 * blockIdx.x] = correct;
        partial[2 * blockIdx.x + 1] = 0.0;
    }
}

/* out[j] = Σ_b partial[2b + j], j = 0, 1, in a fixed tree order. */
__global__ void sum_pairs_kernel(double *out, const double *partial, int64_t G) {
    __shared__ double shared[PL_CUDA_THREADS];
    for (int j = 0; j < 2; j++) {
        double s = 0.0;
        for (int64_t b = threadIdx.x; b < G; b += blockDim.x) s += partial[2 * b + j];
        s = pl_block_sum(s, shared);
        if (threadIdx.x == 0) out[j] = s;
    }
}

static int64_t row_blocks(int64_t N) {
    return N < 1 ? 1 : N < CE_MAX_BLOCKS ? N : CE_MAX_BLOCKS;
}

__global__ void mean_forward_kernel(double *sum, const float *inp, int64_t n) {
    __shared__ double shared[PL_CUDA_THREADS];
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += inp[i];
    s = pl_block_sum(s, shared);
    if (threadIdx.x == 0) {
        sum[0] = s;
        sum[1] = 0.0;
    }
}

__global__ void fill_kernel(float *dst, int64_t n, float v, int acc) {
    PL_GRID_STRIDE(i, n) dst[i] = acc ? dst[i] + v : v;
}

extern "C" void pl_cuda_cross_entropy(cudaStream_t s, double *sum, float *dlogits,
                                      const float *logits, const int32_t *labels,
                                      int64_t N, int64_t K, int64_t classes,
                                      float scale) {
    int64_t G = row_blocks(N);
    double *partial = NULL;
    cudaMallocAsync((void **)&partial, (size_t)(2 * G) * sizeof *partial, s);
    cross_entropy_rows_kernel<<<(unsigned)G, PL_CUDA_THREADS, 0, s>>>(partial, dlogits, logits,
                                                                     labels, N, K, classes,
                                                                     scale);
    sum_pairs_kernel<<<1, PL_CUDA_THREADS, 0, s>>>(sum, partial, G);
    cudaFreeAsync(partial, s);
}
extern "C" void pl_cuda_accuracy(cudaStream_t s, double *count, const float *logits,
                                 const int32_t *labels, int64_t N, int64_t K) {
    int64_t G = row_blocks(N);
    double *partial = NULL;
    cudaMallocAsync((void **)&partial, (size_t)(2 * G) * sizeof *partial, s);
    accuracy_rows_kernel<<<(unsigned)G, PL_CUDA_THREADS, 0, s>>>(partial, logits, labels, N, K);
    sum_pairs_kernel<<<1, PL_CUDA_THREADS, 0, s>>>(count, partial, G);
    cudaFreeAsync(partial, s);
}
extern "C" void pl_cuda_mean_forward(cudaStream_t s, double *sum, const float *inp,
                                     int64_t n) {
    mean_forward_kernel<<<1, PL_CUDA_THREADS, 0, s>>>(sum, inp, n);
}
extern "C" void pl_cuda_mean_backward(cudaStream_t s, float *dinp, int64_t n,
                                      float scale, int accumulate) {
    fill_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(dinp, n, scale, accumulate);
}
