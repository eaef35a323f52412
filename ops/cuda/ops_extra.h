/* CUDA launchers of the ops in include/pleiades/ops_extra.h (mul, sub,
 * scale, SiLU, RMSNorm, MSE loss, softmax, matmul, dropout), one .cu file per op file:
 * ops/cuda/<op>.cu beside ops/<op>.c. Kept apart from kernels.h so that
 * these ops can be added without touching the built-in ops' header.
 *
 * Conventions as in kernels.h: plain launchers on the given stream, llm.c
 * argument order (outputs first, then inputs, then dims), `accumulate`
 * adds to the gradient instead of overwriting it, and every reduction is
 * formed in a fixed order by the one thread or block that owns its output
 * (no atomicAdd), so results are bitwise reproducible run to run.
 *
 * The C adapters include this header under PL_WITH_CUDA; the .cu files'
 * shared device helpers are in common.cuh. */
#ifndef PL_OPS_CUDA_OPS_EXTRA_H
#define PL_OPS_CUDA_OPS_EXTRA_H

#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- arithmetic.cu. n elements each. */
/* out = a ⊙ b */
void pl_cuda_mul_forward(cudaStream_t s, float *out, const float *a, const float *b,
                         int64_t n);
/* dinp (+)= other ⊙ dout: the gradient of one factor, `other` the other one. */
void pl_cuda_mul_backward(cudaStream_t s, float *dinp, const float *other,
                          const float *dout, int64_t n, int accumulate);
/* out = a − b */
void pl_cuda_sub_forward(cudaStream_t s, float *out, const float *a, const float *b,
                         int64_t n);
/* out = factor · inp. Also every linear elementwise gradient: scale's
 * (dinp (+)= factor · dout) and sub's (factor ±1), with accumulate. */
void pl_cuda_scale(cudaStream_t s, float *out, const float *inp, float factor, int64_t n,
                   int accumulate);

/* ---- silu.cu */
void pl_cuda_silu_forward(cudaStream_t s, float *out, const float *inp, int64_t n);
void pl_cuda_silu_backward(cudaStream_t s, float *dinp, const float *inp,
                           const float *dout, int64_t n, int accumulate);

/* ---- rmsnorm.cu: rows of C, one block per row. */
void pl_cuda_rmsnorm_forward(cudaStream_t s, float *out, const float *inp,
                             const float *weight, int64_t N, int64_t C);
void pl_cuda_rmsnorm_backward_input(cudaStream_t s, float *dinp, const float *dout,
                                    const float *inp, const float *weight, int64_t N,
                                    int64_t C, int accumulate);
/* Allocates N floats of scratch on the stream (the rows' 1/rms). */
void pl_cuda_rmsnorm_backward_weight(cudaStream_t s, float *dweight, const float *dout,
                                     const float *inp, int64_t N, int64_t C,
                                     int accumulate);

/* ---- mse.cu. sum = {Σ (pred − target)², 0} (device doubles, one block). */
void pl_cuda_mse_forward(cudaStream_t s, double *sum, const float *pred,
                         const float *target, int64_t n);
/* dinp (+)= sign · 2 · (pred − target) · scale: sign +1 for pred, −1 for
 * target. */
void pl_cuda_mse_backward(cudaStream_t s, float *dinp, const float *pred,
                          const float *target, int64_t n, float scale, float sign,
                          int accumulate);

/* ---- softmax.cu: rows of C, one block per row. */
void pl_cuda_softmax_forward(cudaStream_t s, float *out, const float *inp, int64_t N,
                             int64_t C);
/* dinp (+)= out ⊙ (dout − Σ_row dout ⊙ out), from the forward's output. */
void pl_cuda_softmax_backward(cudaStream_t s, float *dinp, const float *dout,
                              const float *out, int64_t N, int64_t C, int accumulate);

/* ---- matmul.cu: `count` row-major products C_i = op(A_i)·op(B_i) + beta·C_i
 * (C_i [M, N]; op transposes when trans_a / trans_b), operand i at A + i·sa,
 * B + i·sb, C + i·sc, as one cublasSgemmStridedBatched on h bound to stream
 * s. fp32, no TF32 (as kernels.h). Returns cuBLAS's status (0: success). */
int pl_cuda_gemm_strided_batched(cublasHandle_t h, cudaStream_t s, int trans_a,
                                 int trans_b, int64_t M, int64_t N, int64_t K,
                                 const float *A, int64_t lda, int64_t sa, const float *B,
                                 int64_t ldb, int64_t sb, float beta, float *C,
                                 int64_t ldc, int64_t sc, int64_t count);

/* ---- dropout.cu: `samples` samples of `numel` floats, the first being
 * global sample `sample_offset`. With `mask`, out (+)= inp · m, m = 1/(1 − p)
 * where ops/dropout_mask.h keeps the element under `seed` and 0 elsewhere
 * (the CPU kernels' mask, bit for bit); without, out (+)= inp (evaluation,
 * p = 0). The forward (inp = x, out = y) and the gradient (inp = dy,
 * out = dx) alike. */
void pl_cuda_dropout(cudaStream_t s, float *out, const float *inp, int64_t samples,
                     int64_t numel, float p, uint64_t seed, int64_t sample_offset,
                     int mask, int accumulate);

#ifdef __cplusplus
}
#endif


#endif
