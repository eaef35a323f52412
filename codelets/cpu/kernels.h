/* CPU kernels: plain functions over float arrays, no StarPU, so tests can
 * call them directly. One function per layer direction, llm.c style:
 * outputs first, then inputs, then dimensions.
 *   N  rows (samples × positions) in the tile
 *   C  input features, OC output features, K classes
 * `accumulate` = 0 overwrites the output gradient, 1 adds to it (a tensor
 * consumed by several ops, or gradient accumulation over batches). */
#ifndef PL_CODELETS_CPU_KERNELS_H
#define PL_CODELETS_CPU_KERNELS_H

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

/* PyTorch AdamW, step t ≥ 1 (bias correction uses t). */
void adamw_update(float *param, const float *grad, float *m, float *v,
                  int64_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, int64_t t);
/* PyTorch SGD (dampening 0, no Nesterov): d = g + wd·p;
 * buf = t == 1 ? d : momentum·buf + d; p −= lr·buf (buf unused if
 * momentum == 0). */
void sgd_update(float *param, const float *grad, float *buf, int64_t n,
                float lr, float momentum, float weight_decay, int64_t t);

#endif
