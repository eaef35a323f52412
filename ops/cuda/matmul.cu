/* CUDA side of ops/matmul.c: a strided batch of row-major products (see
 * kernels.h), the forward pass and both gradients of pl_matmul. One
 * cuBLAS call per task; its reductions are cuBLAS's own, deterministic
 * for a given GPU and cuBLAS version (no atomics in the default GEMMs). */
#include "ops/cuda/kernels.h"

extern "C" int pl_cuda_gemm_strided_batched(cublasHandle_t h, cudaStream_t s, int trans_a,
                                            int trans_b, int64_t M, int64_t N, int64_t K,
                                            const float *A, int64_t lda, int64_t sa,
                                            const float *B, int64_t ldb, int64_t sb,
                                            float beta, float *C, int64_t ldc, int64_t sc,
                                            int64_t count) {
    if (count <= 0) return 0;
    /* StarPU binds its handles to the worker's stream; setting it here
     * keeps the call on the task's stream whatever the handle held. */
    cublasStatus_t st = cublasSetStream(h, s);
    if (st != CUBLAS_STATUS_SUCCESS) return (int)st;
    const float alpha = 1.0f;
    /* As pl_cuda_gemm (linear.cu): row-major C = op(A)·op(B) is
     * column-major Cᵀ = op(B)ᵀ·op(A)ᵀ, so the operands swap and each keeps
     * its transposition flag; the strides follow their operands. */
    st = cublasSgemmStridedBatched(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M,
                                   (int)K, &alpha, B, (int)ldb, (long long)sb, A, (int)lda,
                                   (long long)sa, &beta, C, (int)ldc, (long long)sc,
                                   (int)count);
    return (int)st;
}
