/* CUDA side of ops/layernorm.c: one block per row; the weight gradient
 * gives one thread to one column and walks the rows in order. */
#include <math.h>

#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.h"

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

/* dweight[c] terms: dout · x̂ (dbias's are dout itself) */
struct layernorm_dweight_term {
    const float *dout, *inp;
    const float2 *stats;
    int64_t C;
    __device__ float operator()(int64_t r, int64_t c) const {
        float2 st = stats[r];
        return dout[r * C + c] * (inp[r * C + c] - st.x) * st.y;
    }
};

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
    pl_cuda_column_sums(s, dweight, N, C, accumulate,
                        layernorm_dweight_term{dout, inp, stats, C});
    pl_cuda_column_sums(s, dbias, N, C, accumulate, pl_matrix_element{dout, C});
    cudaFreeAsync(stats, s);
}
