/* The CUDA kernels and cuBLAS calls of every built-in op, as plain
 * launchers on a given stream: the CUDA twins of ops/kernels.h, named and
 * ordered the same way (pl_cuda_<op>_forward, _backward, _backward_input,
 * _backward_weight; outputs first, then inputs, then dims; `accumulate`
 * adds to the gradient instead of overwriting it), plus the optimizer
 * updates of optim/.
 *
 * Defined one file per op or family beside its C file: ops/cuda/<op>.cu
 * for ops/<op>.c (whose adapters include this header under PL_WITH_CUDA),
 * and ops/cuda/optimizer.cu for optim/optimizer.c; their shared device
 * helpers are in common.cuh; util/half_cuda.cu converts 16-bit buffers.
 * Elementwise kernels use grid-stride loops; row kernels give one block to
 * one row; column reductions add row ranges in parallel, then the ranges
 * in order (pl_cuda_column_sums).
 *
 * Every floating-point reduction is ordered (one thread or one block owns
 * each output and walks its inputs in a fixed order), never a float
 * atomicAdd, so results are bitwise reproducible run to run, as on the CPU
 * (the embedding gradient counts tokens with integer atomics, whose sums
 * do not depend on order).
 *
 * Matrix products are fp32 cuBLAS calls in the default math mode: no TF32,
 * as PyTorch does for matmuls by default (torch.backends.cuda.matmul.
 * allow_tf32 is False). */
#ifndef PL_OPS_CUDA_KERNELS_H
#define PL_OPS_CUDA_KERNELS_H

#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif


/* Row-major C[M,N] = alpha·op(A)·op(B) + beta·C through column-major cuBLAS. */
cublasStatus_t pl_cuda_gemm(cublasHandle_t h, int trans_a, int trans_b, int64_t M,
                            int64_t N, int64_t K, float alpha, const float *A,
                            int64_t lda, const float *B, int64_t ldb, float beta,
                            float *C, int64_t ldc);

/* The same on bf16 operands as stored (uint16_t), cublasGemmEx with fp32
 * accumulation (CUBLAS_COMPUTE_32F): C = round(alpha·op(A)·op(B) +
 * beta·widen(C)), one rounding per element, as the CPU's bf16 products. */
cublasStatus_t pl_cuda_gemm_bf16(cublasHandle_t h, int trans_a, int trans_b, int64_t M,
                                 int64_t N, int64_t K, float alpha, const uint16_t *A,
                                 int64_t lda, const uint16_t *B, int64_t ldb, float beta,
                                 uint16_t *C, int64_t ldc);
/* bf16 rows: out[i, o] = bias[o] (a linear layer's output before its
 * product is added with beta 1). */
void pl_cuda_bias_rows_bf16(cudaStream_t s, uint16_t *out, const uint16_t *bias, int64_t N,
                            int64_t OC);
/* bf16 bias gradient: dbias[o] (+)= Σ_rows dout[row, o], summed in fp32 in
 * row ranges (pl_cuda_column_sums) and rounded once; non-zero when its
 * OC floats of scratch cannot be had. */
int pl_cuda_bias_grad_bf16(cudaStream_t s, uint16_t *dbias, const uint16_t *dout, int64_t N,
                            int64_t OC, int accumulate);

void pl_cuda_linear_forward(cublasHandle_t h, cudaStream_t s, float *out,
                            const float *inp, const float *weight,
                            const float *bias, int64_t N, int64_t C, int64_t OC);
void pl_cuda_linear_backward_input(cublasHandle_t h, float *dinp,
                                   const float *dout, const float *weight,
                                   int64_t N, int64_t C, int64_t OC, int accumulate);
void pl_cuda_linear_backward_weight(cublasHandle_t h, cudaStream_t s,
                                    float *dweight, float *dbias,
                                    const float *dout, const float *inp, int64_t N,
                                    int64_t C, int64_t OC, int accumulate);
/* pl_linear_tied (no bias); its input gradient is
 * pl_cuda_linear_backward_input. */
void pl_cuda_linear_tied_forward(cublasHandle_t h, float *out, const float *inp,
                                 const float *weight, int64_t N, int64_t C, int64_t OC);
void pl_cuda_linear_tied_backward_weight(cublasHandle_t h, float *dweight,
                                         const float *dout, const float *inp,
                                         int64_t N, int64_t C, int64_t OC, int accumulate);

/* pl_matmul (matmul.cu): `count` row-major products C_i = op(A_i)·op(B_i) +
 * beta·C_i (C_i [M, N]; op transposes when trans_a / trans_b), operand i
 * at A + i·sa, B + i·sb, C + i·sc, as one cublasSgemmStridedBatched on h
 * bound to stream s. fp32, no TF32. ops/matmul.c describes the forward
 * pass and each gradient as such a batch, for both backends. Returns
 * cuBLAS's status (0: success). */
int pl_cuda_gemm_strided_batched(cublasHandle_t h, cudaStream_t s, int trans_a,
                                 int trans_b, int64_t M, int64_t N, int64_t K,
                                 const float *A, int64_t lda, int64_t sa, const float *B,
                                 int64_t ldb, int64_t sb, float beta, float *C,
                                 int64_t ldc, int64_t sc, int64_t count);

void pl_cuda_relu_forward(cudaStream_t s, float *out, const float *inp, int64_t n);
void pl_cuda_relu_backward(cudaStream_t s, float *dinp, const float *inp,
                           const float *dout, int64_t n, int accumulate);
void pl_cuda_gelu_forward(cudaStream_t s, float *out, const float *inp, int64_t n);
void pl_cuda_gelu_backward(cudaStream_t s, float *dinp, const float *inp,
                           const float *dout, int64_t n, int accumulate);
void pl_cuda_add_forward(cudaStream_t s, float *out, const float *a,
                         const float *b, int64_t n);
/* g (+)= side over 16-bit values (bf16 != 0: bf16, else fp16): with
 * accumulate, added in fp32 and rounded once (optim/grad_sum.c's 16-bit
 * sum, the 16-bit twin of add_backward), else copied. */
void pl_cuda_half_add(cudaStream_t s, int bf16, uint16_t *g, const uint16_t *side, int64_t n,
                      int accumulate);
void pl_cuda_add_backward(cudaStream_t s, float *dinp, const float *dout,
                          int64_t n, int accumulate);

/* silu.cu */
void pl_cuda_silu_forward(cudaStream_t s, float *out, const float *inp, int64_t n);
void pl_cuda_silu_backward(cudaStream_t s, float *dinp, const float *inp,
                           const float *dout, int64_t n, int accumulate);

/* arithmetic.cu. n elements each. */
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

/* dropout.cu: `samples` samples of `numel` floats, the first being global
 * sample `sample_offset`. With `mask`, out (+)= inp · m, m = 1/(1 − p)
 * where ops/dropout_mask.h keeps the element under `seed` and 0 elsewhere
 * (pl_cpu_dropout's mask, bit for bit); without, out (+)= inp (evaluation,
 * p = 0). The forward (inp = x, out = y) and the gradient (inp = dy,
 * out = dx) alike. */
void pl_cuda_dropout(cudaStream_t s, float *out, const float *inp, int64_t samples,
                     int64_t numel, float p, uint64_t seed, int64_t sample_offset,
                     int mask, int accumulate);

/* sum[0] = Σ rows' loss, sum[1] = labels outside [0, classes) (device
 * doubles); the softmax over each row's first `classes` of K, dlogits 0
 * in the others (pl_cpu_cross_entropy_forward's contract). */
void pl_cuda_cross_entropy(cudaStream_t s, double *sum, float *dlogits,
                           const float *logits, const int32_t *labels,
                           int64_t N, int64_t K, int64_t classes, float scale);
void pl_cuda_accuracy(cudaStream_t s, double *count, const float *logits,
                      const int32_t *labels, int64_t N, int64_t K);
void pl_cuda_mean_forward(cudaStream_t s, double *sum, const float *inp, int64_t n);
void pl_cuda_mean_backward(cudaStream_t s, float *dinp, int64_t n, float scale,
                           int accumulate);

/* mse.cu. sum = {Σ (pred − target)², 0} (device doubles, one block). */
void pl_cuda_mse_forward(cudaStream_t s, double *sum, const float *pred,
                         const float *target, int64_t n);
/* dinp (+)= sign · 2 · (pred − target) · scale: sign +1 for pred, −1 for
 * target. */
void pl_cuda_mse_backward(cudaStream_t s, float *dinp, const float *pred,
                          const float *target, int64_t n, float scale, float sign,
                          int accumulate);

/* *err = tokens outside [0, V). */
void pl_cuda_embedding_forward(cudaStream_t s, float *out, double *err,
                               const int32_t *tokens, const float *wte,
                               const float *wpe, int64_t B, int64_t T, int64_t C,
                               int64_t V);
void pl_cuda_embedding_backward_weight(cudaStream_t s, float *dwte, float *dwpe,
                                       const float *dout, const int32_t *tokens,
                                       int64_t B, int64_t T, int64_t C, int64_t V,
                                       int accumulate_wte, int accumulate_wpe);

void pl_cuda_layernorm_forward(cudaStream_t s, float *out, const float *inp,
                               const float *weight, const float *bias, int64_t N,
                               int64_t C);
void pl_cuda_layernorm_backward_input(cudaStream_t s, float *dinp,
                                      const float *dout, const float *inp,
                                      const float *weight, int64_t N, int64_t C,
                                      int accumulate);
void pl_cuda_layernorm_backward_weight(cudaStream_t s, float *dweight,
                                       float *dbias, const float *dout,
                                       const float *inp, int64_t N, int64_t C,
                                       int accumulate);

/* rmsnorm.cu: rows of C, one block per row. */
void pl_cuda_rmsnorm_forward(cudaStream_t s, float *out, const float *inp,
                             const float *weight, int64_t N, int64_t C);
void pl_cuda_rmsnorm_backward_input(cudaStream_t s, float *dinp, const float *dout,
                                    const float *inp, const float *weight, int64_t N,
                                    int64_t C, int accumulate);
/* Allocates N floats of scratch on the stream (the rows' 1/rms). */
void pl_cuda_rmsnorm_backward_weight(cudaStream_t s, float *dweight, const float *dout,
                                     const float *inp, int64_t N, int64_t C,
                                     int accumulate);

/* softmax.cu: rows of C, one block per row. */
void pl_cuda_softmax_forward(cudaStream_t s, float *out, const float *inp, int64_t N,
                             int64_t C);
/* dinp (+)= out ⊙ (dout − Σ_row dout ⊙ out), from the forward's output. */
void pl_cuda_softmax_backward(cudaStream_t s, float *dinp, const float *dout,
                              const float *out, int64_t N, int64_t C, int accumulate);

void pl_cuda_attention_forward(cublasHandle_t h, cudaStream_t s, float *out,
                               float *att, const float *qkv, int64_t B, int64_t T,
                               int64_t C, int64_t NH);
/* Needs a scratch of NH·T·T floats (the softmax gradient). */
void pl_cuda_attention_backward(cublasHandle_t h, cudaStream_t s, float *dqkv,
                                const float *dout, const float *qkv,
                                const float *att, float *scratch, int64_t B,
                                int64_t T, int64_t C, int64_t NH, int accumulate);

/* The optimizer updates (optim/optimizer.h); clip: NULL, or the device
 * clip result {norm, coefficient} that scales every gradient. */
void pl_cuda_adamw(cudaStream_t s, float *param, const float *grad, float *m,
                   float *v, int64_t n, float lr, float beta1, float beta2,
                   float eps, float weight_decay, int64_t t, const double *clip);
void pl_cuda_sgd(cudaStream_t s, float *param, const float *grad, float *buf,
                 int64_t n, float lr, float momentum, float weight_decay, int64_t t,
                 const double *clip);
/* 16-bit parameters and gradients (bf16 != 0: bf16, else fp16), read
 * widened; master: fp32 master weights (updated; the 16-bit copy is their
 * rounding), or NULL (the 16-bit values are updated and rounded back). */
void pl_cuda_adamw_half(cudaStream_t s, int bf16, uint16_t *param, const uint16_t *grad,
                        float *master, float *m, float *v, int64_t n, float lr,
                        float beta1, float beta2, float eps, float weight_decay, int64_t t,
                        const double *clip);
void pl_cuda_sgd_half(cudaStream_t s, int bf16, uint16_t *param, const uint16_t *grad,
                      float *master, float *buf, int64_t n, float lr, float momentum,
                      float weight_decay, int64_t t, const double *clip);

#ifdef __cplusplus
}
#endif

#endif
