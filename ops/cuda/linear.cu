/* CUDA side of ops/linear.c (pl_linear, pl_linear_tied): row-major GEMMs
 * through column-major cuBLAS (fp32, and bf16 through GemmEx for bf16
 * engines), the bias broadcast, and the bias gradient's column sums. */
#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.h"
#include "util/half.h"
#include "util/half_cuda.h"

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
    /* dbias[o] (+)= Σ_rows dout[row, o] */
    pl_cuda_column_sums(s, dbias, N, OC, accumulate, pl_matrix_element{dout, OC});
}

extern "C" void pl_cuda_linear_tied_forward(cublasHandle_t h, float *out,
                                            const float *inp, const float *weight,
                                            int64_t N, int64_t C, int64_t OC) {
    pl_cuda_gemm(h, 0, 1, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, OC);
}

extern "C" void pl_cuda_linear_tied_backward_weight(cublasHandle_t h, float *dweight,
                                                    const float *dout, const float *inp,
                                                    int64_t N, int64_t C, int64_t OC,
                                                    int accumulate) {
    pl_cuda_gemm(h, 1, 0, OC, C, N, 1.0f, dout, OC, inp, C,
                 accumulate ? 1.0f : 0.0f, dweight, C);
}

/* ------------------------------------------------------------------ bf16 */

extern "C" cublasStatus_t pl_cuda_gemm_bf16(cublasHandle_t h, int trans_a, int trans_b,
                                            int64_t M, int64_t N, int64_t K, float alpha,
                                            const uint16_t *A, int64_t lda,
                                            const uint16_t *B, int64_t ldb, float beta,
                                            uint16_t *C, int64_t ldc) {
    /* As pl_cuda_gemm: the row-major product as its column-major transpose. */
    return cublasGemmEx(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                        trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K, &alpha,
                        B, CUDA_R_16BF, (int)ldb, A, CUDA_R_16BF, (int)lda, &beta, C,
                        CUDA_R_16BF, (int)ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

__global__ void bias_rows_bf16_kernel(uint16_t *out, const uint16_t *bias, int64_t N,
                                      int64_t OC) {
    PL_GRID_STRIDE(i, N * OC) out[i] = bias[i % OC];
}

extern "C" void pl_cuda_bias_rows_bf16(cudaStream_t s, uint16_t *out, const uint16_t *bias,
                                       int64_t N, int64_t OC) {
    bias_rows_bf16_kernel<<<pl_cuda_blocks(N * OC), PL_CUDA_THREADS, 0, s>>>(out, bias, N, OC);
}

/* f(r, o) = dout[r, o] widened */
struct bf16_element {
    const uint16_t *src;
    int64_t C;
    __device__ float operator()(int64_t r, int64_t c) const {
        return pl_bf16_to_float(src[r * C + c]);
    }
};

extern "C" int pl_cuda_bias_grad_bf16(cudaStream_t s, uint16_t *dbias, const uint16_t *dout,
                                      int64_t N, int64_t OC, int accumulate) {
    float *sum = NULL;
    if (cudaMallocAsync((void **)&sum, (size_t)OC * sizeof *sum, s) != cudaSuccess) return -1;
    if (accumulate) pl_cuda_half_to_float(s, 1, dbias, sum, OC);
    pl_cuda_column_sums(s, sum, N, OC, accumulate, bf16_element{dout, OC});
    pl_cuda_half_from_float(s, 1, sum, dbias, OC);
    cudaFreeAsync(sum, s);
    return 0;
}
