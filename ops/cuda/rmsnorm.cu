/* CUDA side of ops/rmsnorm.c: RMSNorm over rows of C (see kernels.h).
 * Row kernels give one block to one row and sum its squares in double in
 * a fixed tree order; the weight gradient gives one thread to one column,
 * which walks the rows in order. No atomics: deterministic. */
#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.h"

#define RMS_EPS 1e-6 /* as ops/rmsnorm.c: LLaMA's default */

/* 1 / rms of the block's row, for every thread of the block. */
static __device__ double rmsnorm_row_rstd(const float *x, int64_t C, double *shared) {
    double s = 0.0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += (double)x[c] * x[c];
    return 1.0 / sqrt(pl_block_sum(s, shared) / (double)C + RMS_EPS);
}

static __global__ void rmsnorm_forward_kernel(float *out, const float *inp,
                                              const float *weight, int64_t C) {
    __shared__ double shared[PL_CUDA_THREADS];
    const float *x = inp + blockIdx.x * C;
    float *o = out + blockIdx.x * C;
    double r = rmsnorm_row_rstd(x, C, shared);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
        o[c] = (float)(x[c] * r) * weight[c];
}

/* dx = r · (g − x̂ · mean(g ⊙ x̂)), g = dout ⊙ weight, x̂ = x · r. */
static __global__ void rmsnorm_backward_input_kernel(float *dinp, const float *dout,
                                                     const float *inp, const float *weight,
                                                     int64_t C, int acc) {
    __shared__ double shared[PL_CUDA_THREADS];
    const float *x = inp + blockIdx.x * C, *d = dout + blockIdx.x * C;
    float *dx = dinp + blockIdx.x * C;
    double r = rmsnorm_row_rstd(x, C, shared);
    double gx = 0.0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
        gx += (double)(d[c] * weight[c]) * (x[c] * r);
    double gxmean = pl_block_sum(gx, shared) / (double)C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        double xhat = x[c] * r;
        float v = (float)(r * ((double)(d[c] * weight[c]) - xhat * gxmean));
        dx[c] = acc ? dx[c] + v : v;
    }
}

/* Each row's r, so that the column sums below need not recompute it. */
static __global__ void rmsnorm_rstd_kernel(float *rstd, const float *inp, int64_t C) {
    __shared__ double shared[PL_CUDA_THREADS];
    double r = rmsnorm_row_rstd(inp + blockIdx.x * C, C, shared);
    if (threadIdx.x == 0) rstd[blockIdx.x] = (float)r;
}

/* dweight[c] terms: dout · x̂ */
struct rmsnorm_dweight_term {
    const float *dout, *inp, *rstd;
    int64_t C;
    __device__ float operator()(int64_t r, int64_t c) const {
        return dout[r * C + c] * (inp[r * C + c] * rstd[r]);
    }
};

extern "C" void pl_cuda_rmsnorm_forward(cudaStream_t s, float *out, const float *inp,
                                        const float *weight, int64_t N, int64_t C) {
    if (N <= 0) return;
    rmsnorm_forward_kernel<<<(unsigned)N, PL_CUDA_THREADS, 0, s>>>(out, inp, weight, C);
}

extern "C" void pl_cuda_rmsnorm_backward_input(cudaStream_t s, float *dinp,
                                               const float *dout, const float *inp,
                                               const float *weight, int64_t N, int64_t C,
                                               int accumulate) {
    if (N <= 0) return;
    rmsnorm_backward_input_kernel<<<(unsigned)N, PL_CUDA_THREADS, 0, s>>>(
        dinp, dout, inp, weight, C, accumulate);
}

extern "C" void pl_cuda_rmsnorm_backward_weight(cudaStream_t s, float *dweight,
                                                const float *dout, const float *inp,
                                                int64_t N, int64_t C, int accumulate) {
    if (N <= 0) return;
    float *rstd = NULL;
    cudaMallocAsync((void **)&rstd, (size_t)N * sizeof *rstd, s);
    rmsnorm_rstd_kernel<<<(unsigned)N, PL_CUDA_THREADS, 0, s>>>(rstd, inp, C);
    pl_cuda_column_sums(s, dweight, N, C, accumulate,
                        rmsnorm_dweight_term{dout, inp, rstd, C});
    cudaFreeAsync(rstd, s);
}
