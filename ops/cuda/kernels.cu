/* CUDA implementations of the Pleiades ops (see kernels.h). Elementwise
 * kernels use grid-stride loops; row kernels give one block to one row;
 * column reductions give one thread to one column and walk the rows in
 * order, so every sum is formed in a fixed order (deterministic). */
#include <math.h>

#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.h"

/* ------------------------------------------------------------ matmuls */

extern "C" cublasStatus_t pl_cuda_gemm(cublasHandle_t h, int trans_a, int trans_b,
                                       int64_t M, int64_t N, int64_t K, float alpha,
                                       const float *A, int64_t lda, const float *B,
                                       int64_t ldb, float beta, float *C,
                                       int64_t ldc) {
    /* Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: swap the
     * operands, keep each one's transposition flag. */
    return cublasSgemm(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                       trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K,
                       &alpha, B, (int)ldb, A, (int)lda, &beta, C, (int)ldc);
}

__global__ void bias_rows_kernel(float *out, const float *bias, int64_t N,
                                 int64_t OC) {
    PL_GRID_STRIDE(i, N * OC) out[i] = bias[i % OC];
}

/* dbias[o] (+)= Σ_rows dout[row, o]: one thread per column. */
__global__ void column_sum_kernel(float *dst, const float *src, int64_t N,
                                  int64_t C, int accumulate) {
    PL_GRID_STRIDE(c, C) {
        float s = 0.0f;
        for (int64_t r = 0; r < N; r++) s += src[r * C + c];
        dst[c] = accumulate ? dst[c] + s : s;
    }
}

extern "C" void pl_cuda_linear_forward(cublasHandle_t h, cudaStream_t s, float *out,
                                       const float *inp, const float *weight,
                                       const float *bias, int64_t N, int64_t C,
                                       int64_t OC) {
    bias_rows_kernel<<<pl_cuda_blocks(N * OC), PL_CUDA_THREADS, 0, s>>>(out, bias, N, OC);
    pl_cuda_gemm(h, 0, 1, N, OC, C, 1.0f, inp, C, weight, C, 1.0f, out, OC);
}

extern "C" void pl_cuda_linear_backward_input(cublasHandle_t h, float *dinp,
                                              const float *dout, const float *weight,
                                              int64_t N, int64_t C, int64_t OC,
                                              int accumulate) {
    pl_cuda_gemm(h, 0, 0, N, C, OC, 1.0f, dout, OC, weight, C,
                 accumulate ? 1.0f : 0.0f, dinp, C);
}

extern "C" void pl_cuda_linear_backward_weight(cublasHandle_t h, cudaStream_t s,
                                               float *dweight, float *dbias,
                                               const float *dout, const float *inp,
                                               int64_t N, int64_t C, int64_t OC,
                                               int accumulate) {
    pl_cuda_gemm(h, 1, 0, OC, C, N, 1.0f, dout, OC, inp, C,
                 accumulate ? 1.0f : 0.0f, dweight, C);
    column_sum_kernel<<<pl_cuda_blocks(OC), PL_CUDA_THREADS, 0, s>>>(dbias, dout, N, OC,
                                                         accumulate);
}

extern "C" void pl_cuda_matmul_forward(cublasHandle_t h, float *out, const float *inp,
                                       const float *weight, int64_t N, int64_t C,
                                       int64_t OC) {
    pl_cuda_gemm(h, 0, 1, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, OC);
}

extern "C" void pl_cuda_matmul_backward_weight(cublasHandle_t h, float *dweight,
                                               const float *dout, const float *inp,
                                               int64_t N, int64_t C, int64_t OC,
                                               int accumulate) {
    pl_cuda_gemm(h, 1, 0, OC, C, N, 1.0f, dout, OC, inp, C,
                 accumulate ? 1.0f : 0.0f, dweight, C);
}

/* --------------------------------------------------------- elementwise */

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

/* ------------------------------------------------------ losses, metrics */

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

/* ----------------------------------------------------------- embedding */

__global__ void embedding_forward_kernel(float *out, const int32_t *tokens,
                                         const float *wte, const float *wpe,
                                         int64_t B, int64_t T, int64_t C, int64_t V) {
    PL_GRID_STRIDE(i, B * T * C) {
        int64_t c = i % C, bt = i / C, t = bt % T;
        int32_t tok = tokens[bt];
        out[i] = tok >= 0 && tok < V ? wte[(int64_t)tok * C + c] + wpe[t * C + c] : 0.0f;
    }
}

__global__ void count_bad_tokens_kernel(double *err, const int32_t *tokens,
                                        int64_t n, int64_t V) {
    __shared__ double shared[PL_CUDA_THREADS];
    double bad = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        bad += tokens[i] < 0 || tokens[i] >= V ? 1.0 : 0.0;
    bad = pl_block_sum(bad, shared);
    if (threadIdx.x == 0) *err = bad;
}

/* dwte[v, c]: one thread per (v, c) scans the tokens in order — no atomics,
 * so the sum of repeated tokens is formed in position order. */
__global__ void embedding_wte_grad_kernel(float *dwte, const float *dout,
                                          const int32_t *tokens, int64_t BT,
                                          int64_t C, int64_t V, int acc) {
    PL_GRID_STRIDE(i, V * C) {
        int64_t v = i / C, c = i % C;
        float s = 0.0f;
        for (int64_t p = 0; p < BT; p++)
            if (tokens[p] == v) s += dout[p * C + c];
        dwte[i] = acc ? dwte[i] + s : s;
    }
}

__global__ void embedding_wpe_grad_kernel(float *dwpe, const float *dout, int64_t B,
                                          int64_t T, int64_t C, int acc) {
    PL_GRID_STRIDE(i, T * C) {
        float s = 0.0f;
        for (int64_t b = 0; b < B; b++) s += dout[b * T * C + i];
        dwpe[i] = acc ? dwpe[i] + s : s;
    }
}

extern "C" void pl_cuda_embedding_forward(cudaStream_t s, float *out, double *err,
                                          const int32_t *tokens, const float *wte,
                                          const float *wpe, int64_t B, int64_t T,
                                          int64_t C, int64_t V) {
    embedding_forward_kernel<<<pl_cuda_blocks(B * T * C), PL_CUDA_THREADS, 0, s>>>(out, tokens, wte,
                                                                     wpe, B, T, C, V);
    count_bad_tokens_kernel<<<1, PL_CUDA_THREADS, 0, s>>>(err, tokens, B * T, V);
}

extern "C" void pl_cuda_embedding_backward_weight(cudaStream_t s, float *dwte,
                                                  float *dwpe, const float *dout,
                                                  const int32_t *tokens, int64_t B,
                                                  int64_t T, int64_t C, int64_t V,
                                                  int accumulate_wte,
                                                  int accumulate_wpe) {
    embedding_wte_grad_kernel<<<pl_cuda_blocks(V * C), PL_CUDA_THREADS, 0, s>>>(
        dwte, dout, tokens, B * T, C, V, accumulate_wte);
    embedding_wpe_grad_kernel<<<pl_cuda_blocks(T * C), PL_CUDA_THREADS, 0, s>>>(dwpe, dout, B, T, C,
                                                                  accumulate_wpe);
}

/* ----------------------------------------------------------- layernorm */

#define LN_EPS 1e-5f

/* Mean and 1/std of the block's row (double accumulation, as on the CPU). */
__device__ void row_stats(const float *x, int64_t C, double *shared, float *mean,
                          float *rstd) {
    double s = 0.0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += x[c];
    double m = pl_block_sum(s, shared) / C;
    double s2 = 0.0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        double d = x[c] - m;
        s2 += d * d;
    }
    double var = pl_block_sum(s2, shared) / C;
    *mean = (float)m;
    *rstd = (float)(1.0 / sqrt(var + LN_EPS));
}

__global__ void layernorm_forward_kernel(float *out, const float *inp,
                                         const float *weight, const float *bias,
                                         int64_t C) {
    __shared__ double shared[PL_CUDA_THREADS];
    const float *x = inp + blockIdx.x * C;
    float *o = out + blockIdx.x * C;
    float m, r;
    row_stats(x, C, shared, &m, &r);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
        o[c] = (x[c] - m) * r * weight[c] + bias[c];
}

__global__ void layernorm_backward_input_kernel(float *dinp, const float *dout,
                                                const float *inp, const float *weight,
                                                int64_t C, int acc) {
    __shared__ double shared[PL_CUDA_THREADS];
    const float *x = inp + blockIdx.x * C, *d = dout + blockIdx.x * C;
    float *dx = dinp + blockIdx.x * C;
    float m, r;
    row_stats(x, C, shared, &m, &r);
    double gm = 0.0, gxm = 0.0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        float g = d[c] * weight[c];
        gm += g;
        gxm += g * (x[c] - m) * r;
    }
    float gmean = (float)(pl_block_sum(gm, shared) / C);
    float gxmean = (float)(pl_block_sum(gxm, shared) / C);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        float xhat = (x[c] - m) * r;
        float v = r * (d[c] * weight[c] - gmean - xhat * gxmean);
        dx[c] = acc ? dx[c] + v : v;
    }
}

/* Per-row statistics, so the weight gradient's column sums can reuse them. */
__global__ void layernorm_stats_kernel(float2 *stats, const float *inp, int64_t C) {
    __shared__ double shared[PL_CUDA_THREADS];
    float m, r;
    row_stats(inp + blockIdx.x * C, C, shared, &m, &r);
    if (threadIdx.x == 0) stats[blockIdx.x] = make_float2(m, r);
}

__global__ void layernorm_backward_weight_kernel(float *dweight, float *dbias,
                                                 const float *dout, const float *inp,
                                                 const float2 *stats, int64_t N,
                                                 int64_t C, int acc) {
    PL_GRID_STRIDE(c, C) {
        float dw = 0.0f, db = 0.0f;
        for (int64_t r = 0; r < N; r++) {
            float2 st = stats[r];
            float d = dout[r * C + c];
            dw += d * (inp[r * C + c] - st.x) * st.y;
            db += d;
        }
        dweight[c] = acc ? dweight[c] + dw : dw;
        dbias[c] = acc ? dbias[c] + db : db;
    }
}

extern "C" void pl_cuda_layernorm_forward(cudaStream_t s, float *out, const float *inp,
                                          const float *weight, const float *bias,
                                          int64_t N, int64_t C) {
    layernorm_forward_kernel<<<(unsigned)N, PL_CUDA_THREADS, 0, s>>>(out, inp, weight, bias, C);
}

extern "C" void pl_cuda_layernorm_backward_input(cudaStream_t s, float *dinp,
                                                 const float *dout, const float *inp,
                                                 const float *weight, int64_t N,
                                                 int64_t C, int accumulate) {
    layernorm_backward_input_kernel<<<(unsigned)N, PL_CUDA_THREADS, 0, s>>>(dinp, dout, inp,
                                                                    weight, C, accumulate);
}

extern "C" void pl_cuda_layernorm_backward_weight(cudaStream_t s, float *dweight,
                                                  float *dbias, const float *dout,
                                                  const float *inp, int64_t N,
                                                  int64_t C, int accumulate) {
    float2 *stats = NULL;
    cudaMallocAsync((void **)&stats, N * sizeof *stats, s);
    layernorm_stats_kernel<<<(unsigned)N, PL_CUDA_THREADS, 0, s>>>(stats, inp, C);
    layernorm_backward_weight_kernel<<<pl_cuda_blocks(C), PL_CUDA_THREADS, 0, s>>>(
        dweight, dbias, dout, inp, stats, N, C, accumulate);
    cudaFreeAsync(stats, s);
}

/* ----------------------------------------------------------- attention */

/* Causal softmax in place over each row of scores [NH·T, T] (already
 * scaled); zeroes above the diagonal. One block per row. */
__global__ void causal_softmax_kernel(float *att, int64_t T) {
    __shared__ double shared[PL_CUDA_THREADS];
    int64_t row = blockIdx.x, t = row % T;
    float *a = att + row * T;
    float maxv = -INFINITY;
    for (int64_t u = threadIdx.x; u <= t; u += blockDim.x) maxv = fmaxf(maxv, a[u]);
    __shared__ float smax[PL_CUDA_THREADS];
    smax[threadIdx.x] = maxv;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride)
            smax[threadIdx.x] = fmaxf(smax[threadIdx.x], smax[threadIdx.x + stride]);
        __syncthreads();
    }
    maxv = smax[0];
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

/* ----------------------------------------------------------- optimizers */

/* clip: NULL, or the clip result {norm, coefficient} (optim/clip.h) in
 * device memory; gradients are multiplied by the coefficient as read. */
__global__ void adamw_kernel(float *param, const float *grad, float *m, float *v,
                             int64_t n, float lr, float beta1, float beta2, float eps,
                             float decay, float step, float bc2_sqrt, const double *clip) {
    float scale = clip ? (float)clip[1] : 1.0f;
    PL_GRID_STRIDE(i, n) {
        float g = grad[i] * scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        param[i] = param[i] * decay - step * mi / (sqrtf(vi) / bc2_sqrt + eps);
    }
}

__global__ void sgd_kernel(float *param, const float *grad, float *buf, int64_t n,
                           float lr, float momentum, float wd, int first,
                           const double *clip) {
    float scale = clip ? (float)clip[1] : 1.0f;
    PL_GRID_STRIDE(i, n) {
        float d = grad[i] * scale + wd * param[i];
        if (momentum != 0.0f) {
            d = first ? d : momentum * buf[i] + d;
            buf[i] = d;
        }
        param[i] -= lr * d;
    }
}

extern "C" void pl_cuda_adamw(cudaStream_t s, float *param, const float *grad, float *m,
                              float *v, int64_t n, float lr, float beta1, float beta2,
                              float eps, float weight_decay, int64_t t,
                              const double *clip) {
    double bc1 = 1.0 - pow((double)beta1, (double)t);
    double bc2 = 1.0 - pow((double)beta2, (double)t);
    adamw_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(
        param, grad, m, v, n, lr, beta1, beta2, eps, 1.0f - lr * weight_decay,
        (float)(lr / bc1), (float)sqrt(bc2), clip);
}

extern "C" void pl_cuda_sgd(cudaStream_t s, float *param, const float *grad, float *buf,
                            int64_t n, float lr, float momentum, float weight_decay,
                            int64_t t, const double *clip) {
    sgd_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(param, grad, buf, n, lr, momentum,
                                                 weight_decay, t == 1, clip);
}
