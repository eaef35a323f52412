/* CUDA side of ops/loss.c: cross-entropy, accuracy and mean, each reduced
 * by one block in a fixed tree order (deterministic). */
#include <math.h>

#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.h"

/* One block: thread i handles rows i, i + PL_CUDA_THREADS, ... so the partial sums
 * and their tree reduction always pair the same rows. */
__global__ void cross_entropy_kernel(double *sum, float *dlogits, const float *logits,
                                     const int32_t *labels, int64_t N, int64_t K,
                                     float scale) {
    __shared__ double shared[PL_CUDA_THREADS];
    double loss = 0.0, bad = 0.0;
    for (int64_t r = threadIdx.x; r < N; r += blockDim.x) {
        const float *row = logits + r * K;
        int32_t y = labels[r];
        float maxv = row[0];
        for (int64_t k = 1; k < K; k++) maxv = fmaxf(maxv, row[k]);
        double se = 0.0;
        for (int64_t k = 0; k < K; k++) se += exp((double)row[k] - maxv);
        double lse = maxv + log(se);
        if (y < 0 || y >= K) {
            bad += 1.0;
            if (dlogits)
                for (int64_t k = 0; k < K; k++) dlogits[r * K + k] = 0.0f;
            continue;
        }
        loss += lse - row[y];
        if (dlogits)
            for (int64_t k = 0; k < K; k++) {
                float p = (float)exp((double)row[k] - lse);
                dlogits[r * K + k] = (p - (k == y ? 1.0f : 0.0f)) * scale;
            }
    }
    loss = pl_block_sum(loss, shared);
    bad = pl_block_sum(bad, shared);
    if (threadIdx.x == 0) {
        sum[0] = loss;
        sum[1] = bad;
    }
}

__global__ void accuracy_kernel(double *count, const float *logits,
                                const int32_t *labels, int64_t N, int64_t K) {
    __shared__ double shared[PL_CUDA_THREADS];
    double correct = 0.0;
    for (int64_t r = threadIdx.x; r < N; r += blockDim.x) {
        const float *row = logits + r * K;
        int64_t best = 0;
        for (int64_t k = 1; k < K; k++)
            if (row[k] > row[best]) best = k;
        correct += best == labels[r] ? 1.0 : 0.0;
    }
    correct = pl_block_sum(correct, shared);
    if (threadIdx.x == 0) {
        count[0] = correct;
        count[1] = 0.0;
    }
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
                                      int64_t N, int64_t K, float scale) {
    cross_entropy_kernel<<<1, PL_CUDA_THREADS, 0, s>>>(sum, dlogits, logits, labels, N, K,
                                               scale);
}
extern "C" void pl_cuda_accuracy(cudaStream_t s, double *count, const float *logits,
                                 const int32_t *labels, int64_t N, int64_t K) {
    accuracy_kernel<<<1, PL_CUDA_THREADS, 0, s>>>(count, logits, labels, N, K);
}
extern "C" void pl_cuda_mean_forward(cudaStream_t s, double *sum, const float *inp,
                                     int64_t n) {
    mean_forward_kernel<<<1, PL_CUDA_THREADS, 0, s>>>(sum, inp, n);
}
extern "C" void pl_cuda_mean_backward(cudaStream_t s, float *dinp, int64_t n,
                                      float scale, int accumulate) {
    fill_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(dinp, n, scale, accumulate);
}
