/* The CPU kernels of the built-in ops (defined in ops/<family>.c beside
 * each op's definition): plain functions over float arrays, no StarPU, so
 * tests can call them directly. One function per layer direction, llm.c style:
 * outputs first, then inputs, then dimensions.
 *   N  rows (samples × positions) in the tile
 *   C  input features, OC output features, K classes
 * `accumulate` = 0 overwrites the output gradient, 1 adds to it (a tensor
 * consumed by several ops, or gradient accumulation over batches). */
#ifndef PL_OPS_KERNELS_H
#define PL_OPS_KERNELS_H

#include <stdint.h>

/* out[N,OC] = inp[N,C] · weight[OC,C]^T + bias[OC] */
void linear_forward(float *out, const float *inp, const float *weight,
                    const float *bias, int64_t N, int64_t C, int64_t OC);
/* dinp[N,C] (+)= dout[N,OC] · weight[OC,C] */
void linear_backward_input(float *dinp, const float *dout, const float *weight,
                           int64_t N, int64_t C, int64_t OC, int accumulate);
/* dweight[OC,C] (+)= dout^T · inp;  dbias[OC] (+)= Σ_rows dout */
void linear_backward_weight(float *dweight, float *dbias, const float *dout,
                            const float *inp, int64_t N, int64_t C, int64_t OC,
                            int accumulate);

void relu_forward(float *out, const float *inp, int64_t n);
void relu_backward(float *dinp, const float *inp, const float *dout, int64_t n,
                   int accumulate);
/* GELU with the tanh approximation (GPT-2, PyTorch approximate='tanh'). */
void gelu_forward(float *out, const float *inp, int64_t n);
void gelu_backward(float *dinp, const float *inp, const float *dout, int64_t n,
                   int accumulate);

void add_forward(float *out, const float *a, const float *b, int64_t n);
/* dinp (+)= dout: the gradient of one addend. */
void add_backward(float *dinp, const float *dout, int64_t n, int accumulate);

/* Softmax cross-entropy over rows of logits[N,K] with labels[N].
 * Returns Σ_rows −log softmax(logits)[label] (double, for a stable sum).
 * When dlogits is not NULL, also writes dlogits = (softmax − onehot)·scale
 * (scale = 1/rows-in-batch turns the sum into the mean's gradient).
 * A label outside [0, K) counts as an error: *bad_labels is incremented
 * and the row contributes nothing. */
double cross_entropy_forward(float *dlogits, const float *logits,
                             const int32_t *labels, int64_t N, int64_t K,
                             float scale, int64_t *bad_labels);
/* Rows of logits whose arg-max equals the label. */
int64_t accuracy_forward(const float *logits, const int32_t *labels, int64_t N,
                         int64_t K);

double mean_forward(const float *inp, int64_t n); /* the sum; caller divides */
void mean_backward(float *dinp, int64_t n, float scale, int accumulate);

/* --- transformer ops. Dimension letters (llm.c): B batch, T positions,
 * C channels, NH heads (HS = C / NH per head), V vocabulary. */

/* out[B,T,C] = wte[tokens[b,t]] + wpe[t]. A token outside [0, V) counts in
 * *bad_tokens and contributes zeros. */
void embedding_forward(float *out, const int32_t *tokens, const float *wte,
                       const float *wpe, int64_t B, int64_t T, int64_t C,
                       int64_t V, int64_t *bad_tokens);
/* dwte[tokens[b,t]] (+)= dout[b,t];  dwpe[t] (+)= Σ_b dout[b,t].
 * accumulate_wte / accumulate_wpe: whether each adds to existing values. */
void embedding_backward_weight(float *dwte, float *dwpe, const float *dout,
                               const int32_t *tokens, int64_t B, int64_t T,
                               int64_t C, int64_t V, int accumulate_wte,
                               int accumulate_wpe);

/* LayerNorm over the last dim of inp[N,C] (eps 1e-5, biased variance). */
void layernorm_forward(float *out, const float *inp, const float *weight,
                       const float *bias, int64_t N, int64_t C);
/* dinp (+)= LayerNorm input gradient; statistics are recomputed from inp
 * (cheaper than keeping them: two passes over a row of C). */
void layernorm_backward_input(float *dinp, const float *dout, const float *inp,
                              const float *weight, int64_t N, int64_t C,
                              int accumulate);
/* dweight (+)= Σ_rows dout ⊙ x̂;  dbias (+)= Σ_rows dout. */
void layernorm_backward_weight(float *dweight, float *dbias, const float *dout,
                               const float *inp, int64_t N, int64_t C,
                               int accumulate);

/* Causal self-attention from qkv[B,T,3C] (q | k | v, heads contiguous in
 * each) to out[B,T,C]; keeps the softmax probabilities att[B,NH,T,T] (rows
 * above the diagonal are zero) for the backward pass. */
void attention_forward(float *out, float *att, const float *qkv, int64_t B,
                       int64_t T, int64_t C, int64_t NH);
/* dqkv (+)= the gradient through attention. */
void attention_backward(float *dqkv, const float *dout, const float *qkv,
                        const float *att, int64_t B, int64_t T, int64_t C,
                        int64_t NH, int accumulate);

/* out[N,OC] = inp[N,C] · weight[OC,C]^T (no bias: the tied LM head). */
void matmul_forward(float *out, const float *inp, const float *weight,
                    int64_t N, int64_t C, int64_t OC);
/* dweight[OC,C] (+)= dout^T · inp. */
void matmul_backward_weight(float *dweight, const float *dout, const float *inp,
                            int64_t N, int64_t C, int64_t OC, int accumulate);

#endif
