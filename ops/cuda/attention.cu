/* CUDA side of ops/attention.c: causal multi-head attention as strided
 * batched cuBLAS products over heads and one block per softmax row. */
#include <math.h>

#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.h"

/* Causal softmax in place over each row of scores [NH·T, T] (already
 * scaled); zeroes above the diagonal. One block per row. */
__global__ void causal_softmax_kernel(float *att, int64_t T) {
    __shared__ double shared[PL_CUDA_THREADS];
    int64_t row = blockIdx.x, t = row % T;
    float *a = att + row * T;
    float maxv = -INFINITY;
    for (int64_t u = threadIdx.x; u <= t; u += blockDim.x) maxv = fmaxf(maxv, a[u]);
    __shared__ float smax[PL_CUDA_THREADS];
    maxv = pl_block_max(maxv, smax);
    double s = 0.0;
    for (int64_t u = threadIdx.x; u <= t; u += blockDim.x) {
        float e = expf(a[u] - maxv);
        a[u] = e;
        s += e;
    }
    float inv = (float)(1.0 / pl_block_sum(s, shared));
    for (int64_t u = threadIdx.x; u < T; u += blockDim.x) a[u] = u <= t ? a[u] * inv : 0.0f;
}

/* dpre = att ⊙ (datt − Σ att ⊙ datt) · scale, in place over datt. */
__global__ void softmax_backward_kernel(float *datt, const float *att, int64_t T,
                                        float scale) {
    __shared__ double shared[PL_CUDA_THREADS];
    int64_t row = blockIdx.x, t = row % T;
    float *d = datt + row * T;
    const float *a = att + row * T;
    double dot = 0.0;
    for (int64_t u = threadIdx.x; u <= t; u += blockDim.x) dot += (double)a[u] * d[u];
    float fdot = (float)pl_block_sum(dot, shared);
    for (int64_t u = threadIdx.x; u < T; u += blockDim.x)
        d[u] = u <= t ? a[u] * (d[u] - fdot) * scale : 0.0f;
}

/* Row-major batched product over heads: for h, C_h = op(A_h)·op(B_h). */
static void gemm_heads(cublasHandle_t h, int ta, int tb, int64_t M, int64_t N,
                       int64_t K, float alpha, const float *A, int64_t lda,
                       int64_t sa, const float *B, int64_t ldb, int64_t sb,
                       float beta, float *C, int64_t ldc, int64_t sc, int64_t NH) {
    cublasSgemmStridedBatched(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                              ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K,
                              &alpha, B, (int)ldb, sb, A, (int)lda, sa, &beta, C,
                              (int)ldc, sc, (int)NH);
}

extern "C" void pl_cuda_attention_forward(cublasHandle_t h, cudaStream_t s, float *out,
                                          float *att, const float *qkv, int64_t B,
                                          int64_t T, int64_t C, int64_t NH) {
    int64_t HS = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    for (int64_t b = 0; b < B; b++) {
        const float *q = qkv + b * T * C3, *k = q + C, *v = q + 2 * C;
        float *a = att + b * NH * T * T;
        gemm_heads(h, 0, 1, T, T, HS, scale, q, C3, HS, k, C3, HS, 0.0f, a, T, T * T, NH);
        causal_softmax_kernel<<<(unsigned)(NH * T), PL_CUDA_THREADS, 0, s>>>(a, T);
        gemm_heads(h, 0, 0, T, HS, T, 1.0f, a, T, T * T, v, C3, HS, 0.0f,
                   out + b * T * C, C, HS, NH);
    }
}

extern "C" void pl_cuda_attention_backward(cublasHandle_t h, cudaStream_t s,
                                           float *dqkv, const float *dout,
                                           const float *qkv, const float *att,
                                           float *scratch, int64_t B, int64_t T,
                                           int64_t C, int64_t NH, int accumulate) {
    int64_t HS = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS), beta = accumulate ? 1.0f : 0.0f;
    for (int64_t b = 0; b < B; b++) {
        const float *q = qkv + b * T * C3, *k = q + C, *v = q + 2 * C;
        float *dq = dqkv + b * T * C3, *dk = dq + C, *dv = dq + 2 * C;
        const float *a = att + b * NH * T * T, *d = dout + b * T * C;
        /* datt = dout_h · vᵀ;  dv (+)= attᵀ · dout_h */
        gemm_heads(h, 0, 1, T, T, HS, 1.0f, d, C, HS, v, C3, HS, 0.0f, scratch, T,
                   T * T, NH);
        gemm_heads(h, 1, 0, T, HS, T, 1.0f, a, T, T * T, d, C, HS, beta, dv, C3, HS, NH);
        softmax_backward_kernel<<<(unsigned)(NH * T), PL_CUDA_THREADS, 0, s>>>(scratch, a, T,
                                                                      scale);
        /* dq (+)= dpre · k;  dk (+)= dpreᵀ · q */
        gemm_heads(h, 0, 0, T, HS, T, 1.0f, scratch, T, T * T, k, C3, HS, beta, dq, C3,
                   HS, NH);
        gemm_heads(h, 1, 0, T, HS, T, 1.0f, scratch, T, T * T, q, C3, HS, beta, dk, C3,
                   HS, NH);
    }
}
