/* The CPU kernels of every built-in op, defined in ops/<op>.c beside the
 * op's definition: plain functions over float arrays, no StarPU and no
 * pl_op_call, so that the op's adapters and the tests call the same code.
 * The CUDA twins are in ops/cuda/kernels.h.
 *
 * One convention for every op (llm.c's model: a layer's forward and
 * backward side by side):
 *   pl_cpu_<op>_forward           the output from the inputs and parameters
 *   pl_cpu_<op>_backward          the input gradient of an op without
 *                                 parameters
 *   pl_cpu_<op>_backward_input    an op with parameters: the input gradient
 *                                 (a B task) ...
 *   pl_cpu_<op>_backward_weight   ... and the parameters' (a W task), apart
 *                                 so that pipeline schedules can defer W
 * <op> is the name of its definition (pl_op_<op>, pleiades/ops.h).
 * Arguments: outputs first, then inputs, then dimensions, then flags;
 * `accumulate` = 0 overwrites the gradient (whatever it held, NaN
 * included), 1 adds to it (a tensor several ops consume, or gradients
 * accumulated over tiles and steps).
 * Dimension letters (llm.c): N rows (samples × positions) in the tile,
 * C input features (channels), OC output features, K classes, B samples,
 * T positions, NH heads (C / NH per head), V vocabulary; n elements.
 *
 * The pl_cpu_ prefix keeps these out of a user's namespace: the shared
 * library exports them, and a program defining its own gelu_forward would
 * otherwise take the library's calls. */
#ifndef PL_OPS_KERNELS_H
#define PL_OPS_KERNELS_H

#include <stdint.h>

/* ---- linear.c */
/* out[N,OC] = inp[N,C] · weight[OC,C]^T + bias[OC] */
void pl_cpu_linear_forward(float *out, const float *inp, const float *weight,
                           const float *bias, int64_t N, int64_t C, int64_t OC);
/* dinp[N,C] (+)= dout[N,OC] · weight[OC,C] (pl_linear_tied's too) */
void pl_cpu_linear_backward_input(float *dinp, const float *dout, const float *weight,
                                  int64_t N, int64_t C, int64_t OC, int accumulate);
/* dweight[OC,C] (+)= dout^T · inp;  dbias[OC] (+)= Σ_rows dout */
void pl_cpu_linear_backward_weight(float *dweight, float *dbias, const float *dout,
                                   const float *inp, int64_t N, int64_t C, int64_t OC,
                                   int accumulate);

/* pl_linear_tied: out[N,OC] = inp[N,C] · weight[OC,C]^T (no bias: the tied
 * LM head); its input gradient is pl_cpu_linear_backward_input. */
void pl_cpu_linear_tied_forward(float *out, const float *inp, const float *weight,
                                int64_t N, int64_t C, int64_t OC);
/* dweight[OC,C] (+)= dout^T · inp. */
void pl_cpu_linear_tied_backward_weight(float *dweight, const float *dout, const float *inp,
                                        int64_t N, int64_t C, int64_t OC, int accumulate);

/* ---- matmul.c: pl_matmul, `count` products out_i = op(a_i) · op(b_i),
 * out_i [M, N], op(a_i) [M, K], op(b_i) [K, N], stored one after another
 * (a_i is [K, M] when ta, b_i [N, K] when tb). */
void pl_cpu_matmul_forward(float *out, const float *a, const float *b, int64_t count,
                           int64_t M, int64_t N, int64_t K, int ta, int tb);
/* The gradient of operand `input` (0: a, 1: b), stored as that operand
 * is (transposed where it is). */
void pl_cpu_matmul_backward(float *dinp, const float *dout, const float *a, const float *b,
                            int input, int64_t count, int64_t M, int64_t N, int64_t K,
                            int ta, int tb, int accumulate);

/* ---- elementwise.c */
void pl_cpu_relu_forward(float *out, const float *inp, int64_t n);
void pl_cpu_relu_backward(float *dinp, const float *inp, const float *dout, int64_t n,
                          int accumulate);
/* GELU with the tanh approximation (GPT-2, PyTorch approximate='tanh'). */
void pl_cpu_gelu_forward(float *out, const float *inp, int64_t n);
void pl_cpu_gelu_backward(float *dinp, const float *inp, const float *dout, int64_t n,
                          int accumulate);
void pl_cpu_add_forward(float *out, const float *a, const float *b, int64_t n);
/* dinp (+)= dout: the gradient of either addend. */
void pl_cpu_add_backward(float *dinp, const float *dout, int64_t n, int accumulate);

/* ---- silu.c: x · sigmoid(x) */
void pl_cpu_silu_forward(float *out, const float *inp, int64_t n);
void pl_cpu_silu_backward(float *dinp, const float *inp, const float *dout, int64_t n,
                          int accumulate);

/* ---- arithmetic.c */
/* out = a ⊙ b */
void pl_cpu_mul_forward(float *out, const float *a, const float *b, int64_t n);
/* dinp (+)= other ⊙ dout: the gradient of one factor, `other` the other one. */
void pl_cpu_mul_backward(float *dinp, const float *other, const float *dout, int64_t n,
                         int accumulate);
/* out = a − b; its gradients are pl_cpu_scale_backward with factor ±1. */
void pl_cpu_sub_forward(float *out, const float *a, const float *b, int64_t n);
/* out = factor · inp */
void pl_cpu_scale_forward(float *out, const float *inp, float factor, int64_t n);
/* dinp (+)= factor · dout */
void pl_cpu_scale_backward(float *dinp, const float *dout, float factor, int64_t n,
                           int accumulate);

/* ---- dropout.c: `samples` samples of `numel` floats, the first being
 * global sample `sample_offset`. With `mask`, out (+)= inp · m, m = 1/(1 − p)
 * where ops/dropout_mask.h keeps the element under `seed` and 0 elsewhere;
 * without, out (+)= inp (evaluation, p = 0). The forward (inp = x,
 * out = y) and the gradient (inp = dy, out = dx) alike, as pl_cuda_dropout. */
void pl_cpu_dropout(float *out, const float *inp, int64_t samples, int64_t numel, float p,
                    uint64_t seed, int64_t sample_offset, int mask, int accumulate);

/* ---- layernorm.c: LayerNorm over the last dim of inp[N,C] (eps 1e-5,
 * biased variance). */
void pl_cpu_layernorm_forward(float *out, const float *inp, const float *weight,
                              const float *bias, int64_t N, int64_t C);
/* dinp (+)= LayerNorm input gradient; statistics are recomputed from inp
 * (cheaper than keeping them: two passes over a row of C). */
void pl_cpu_layernorm_backward_input(float *dinp, const float *dout, const float *inp,
                                     const float *weight, int64_t N, int64_t C,
                                     int accumulate);
/* dweight (+)= Σ_rows dout ⊙ x̂;  dbias (+)= Σ_rows dout. */
void pl_cpu_layernorm_backward_weight(float *dweight, float *dbias, const float *dout,
                                      const float *inp, int64_t N, int64_t C,
                                      int accumulate);

/* ---- rmsnorm.c: RMSNorm over the last dim of inp[N,C] (eps 1e-6). */
void pl_cpu_rmsnorm_forward(float *out, const float *inp, const float *weight, int64_t N,
                            int64_t C);
void pl_cpu_rmsnorm_backward_input(float *dinp, const float *dout, const float *inp,
                                   const float *weight, int64_t N, int64_t C,
                                   int accumulate);
/* dweight (+)= Σ_rows dout ⊙ x̂, in row order. */
void pl_cpu_rmsnorm_backward_weight(float *dweight, const float *dout, const float *inp,
                                    int64_t N, int64_t C, int accumulate);

/* ---- softmax.c: over the last dim of inp[N,C]. */
void pl_cpu_softmax_forward(float *out, const float *inp, int64_t N, int64_t C);
/* dinp (+)= out ⊙ (dout − Σ_row dout ⊙ out), from the forward's output. */
void pl_cpu_softmax_backward(float *dinp, const float *dout, const float *out, int64_t N,
                             int64_t C, int accumulate);

/* ---- embedding.c */
/* out[B,T,C] = wte[tokens[b,t]] + wpe[t]. A token outside [0, V) counts in
 * *bad_tokens and contributes zeros. */
void pl_cpu_embedding_forward(float *out, const int32_t *tokens, const float *wte,
                              const float *wpe, int64_t B, int64_t T, int64_t C, int64_t V,
                              int64_t *bad_tokens);
/* dwte[tokens[b,t]] (+)= dout[b,t];  dwpe[t] (+)= Σ_b dout[b,t].
 * accumulate_wte / accumulate_wpe: whether each adds to existing values. */
void pl_cpu_embedding_backward_weight(float *dwte, float *dwpe, const float *dout,
                                      const int32_t *tokens, int64_t B, int64_t T,
                                      int64_t C, int64_t V, int accumulate_wte,
                                      int accumulate_wpe);

/* ---- attention.c: causal self-attention from qkv[B,T,3C] (q | k | v,
 * heads contiguous in each) to out[B,T,C]; keeps the softmax probabilities
 * att[B,NH,T,T] (rows above the diagonal are zero) for the backward pass. */
void pl_cpu_attention_forward(float *out, float *att, const float *qkv, int64_t B,
                              int64_t T, int64_t C, int64_t NH);
/* dqkv (+)= the gradient through attention. */
void pl_cpu_attention_backward(float *dqkv, const float *dout, const float *qkv,
                               const float *att, int64_t B, int64_t T, int64_t C,
                               int64_t NH, int accumulate);

/* ---- loss.c. Scalar ops return the tile's partial sum (double, for a
 * stable sum); the engine divides by the batch's count. */
/* Softmax cross-entropy over rows of logits[N,K] with labels[N], the
 * softmax over each row's first `classes` (<= K; K for all):
 * Σ_rows −log softmax(logits)[label]. When dlogits is not NULL, also
 * writes dlogits = (softmax − onehot)·scale (the loss task of a training
 * step: loss and gradient from one softmax), and 0 in the columns from
 * `classes` on. A label outside [0, classes) counts in *bad_labels and the
 * row contributes nothing. */
double pl_cpu_cross_entropy_forward(float *dlogits, const float *logits,
                                    const int32_t *labels, int64_t N, int64_t K,
                                    int64_t classes, float scale, int64_t *bad_labels);
/* Rows of logits whose arg-max equals the label. */
int64_t pl_cpu_accuracy_forward(const float *logits, const int32_t *labels, int64_t N,
                                int64_t K);
double pl_cpu_mean_forward(const float *inp, int64_t n); /* the sum */
/* dinp (+)= scale (scale: d loss / d sum) */
void pl_cpu_mean_backward(float *dinp, int64_t n, float scale, int accumulate);

/* ---- mse.c: Σ (pred − target)². When dpred is not NULL, also writes
 * (never adds) dpred = 2 · (pred − target) · scale (the loss task). */
double pl_cpu_mse_forward(float *dpred, const float *pred, const float *target, int64_t n,
                          float scale);
/* dinp (+)= sign · 2 · (pred − target) · scale: sign +1 for pred's
 * gradient, −1 for target's. */
void pl_cpu_mse_backward(float *dinp, const float *pred, const float *target, int64_t n,
                         float scale, float sign, int accumulate);

#endif
