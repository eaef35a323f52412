/*
 * pleiades/ops.h — the built-in ops (part of pleiades.h): for each op its
 * builder (pl_linear, ...), its definition (pl_op_linear, ...: what the
 * builder adds, for pl_gradcheck and for pl_graph_op with attributes of
 * one's own) and, when it has any, its attributes (pl_linear_attrs, ...).
 * Every op here is written against the op interface of pleiades/op.h, as a
 * user's op would be, one source file per op or family in ops/ with its
 * CUDA kernels beside it in ops/cuda/; each has CPU and CUDA kernels for
 * its forward pass and every gradient.
 *
 *   // A SwiGLU feed-forward block on RMSNorm'd features, regressed onto a
 *   // target with MSE (x: [T, C] float input, target: [T, C] float input):
 *   pl_tensor_t *h = pl_rmsnorm(g, x, "norm");
 *   pl_tensor_t *gate = pl_silu(g, pl_linear(g, h, 4 * C, "gate"));
 *   pl_tensor_t *up = pl_linear(g, h, 4 * C, "up");
 *   pl_tensor_t *y = pl_linear(g, pl_mul(g, gate, up, "swiglu"), C, "down");
 *   pl_graph_set_loss(g, pl_mse_loss(g, pl_add(g, x, y, "res"), target));
 *
 *   // The definitions serve pl_gradcheck and pl_graph_op directly:
 *   pl_scale_attrs half = {0.5f};
 *   pl_tensor_t *z = pl_graph_op(g, &pl_op_scale, &y, 1, &half, "half");
 *
 * Shapes are per sample (the batch dim is implicit). Every builder returns
 * the op's output, or NULL with pl_last_error() naming the op and the
 * operands at fault (a wrong dtype, shapes that differ, a frozen graph).
 * Builders that take a name use it for the op and as the prefix of the
 * parameters it creates ("fc1.weight"); NULL generates one.
 */
#ifndef PLEIADES_OPS_H
#define PLEIADES_OPS_H

#include "pleiades/graph.h"
#include "pleiades/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------ matrix products */

/* y = x W^T + b over the last dim of x. Creates parameters "<name>.weight"
 * [out, in] and "<name>.bias" [out], initialised like PyTorch's nn.Linear:
 * U(-1/sqrt(in), 1/sqrt(in)) for both. */
pl_tensor_t *pl_linear(pl_graph_t *g, pl_tensor_t *x, int64_t out_features,
                       const char *name);
typedef struct pl_linear_attrs {
    int64_t out_features;
} pl_linear_attrs;
extern const pl_op_def pl_op_linear; /* attrs: pl_linear_attrs */

/* y = x · weightᵀ with an existing parameter [OC, C] and no bias: a
 * language-model head tied to the token embedding. Its op kind (generated
 * names, traces) is "matmul". */
pl_tensor_t *pl_linear_tied(pl_graph_t *g, pl_tensor_t *x, pl_tensor_t *weight,
                            const char *name);
extern const pl_op_def pl_op_linear_tied; /* operands: x, then the shared weight */

/* Batched matrix product of two float activations, as
 * torch.matmul(a.mT if transpose_a else a, b.mT if transpose_b else b):
 * per sample, a is [..., M, K] ([..., K, M] with transpose_a) and b is
 * [..., K, N] ([..., N, K] with transpose_b); the output is [..., M, N],
 * one product per index of the leading dims. Each operand has at least 2
 * dims per sample (and at most 3, so one leading dim at most: the batch
 * takes the fourth), and the leading dims must be equal: there is no
 * broadcasting (torch.matmul would broadcast [1, M, K] against [H, K, N];
 * here both need H). Attention scores q·kᵀ of q, k [H, T, D] are
 * pl_matmul(g, q, k, false, true, "scores"), [H, T, T]. No parameters;
 * gradients flow into both operands (dout·op(b)ᵀ and op(a)ᵀ·dout, stored
 * transposed where the operand is). 2·M·N·K FLOPs per product. Its op
 * kind (generated names, traces) is "batched_matmul": "matmul" is
 * pl_linear_tied's. */
pl_tensor_t *pl_matmul(pl_graph_t *g, pl_tensor_t *a, pl_tensor_t *b, bool transpose_a,
                       bool transpose_b, const char *name);
/* Whether each operand is used transposed (its last two dims swapped). */
typedef struct pl_matmul_attrs {
    bool transpose_a, transpose_b;
} pl_matmul_attrs;
extern const pl_op_def pl_op_matmul; /* attrs: pl_matmul_attrs */

/* ----------------------------------------------------------- elementwise */

/* max(x, 0). Output of x's shape; no parameters. */
pl_tensor_t *pl_relu(pl_graph_t *g, pl_tensor_t *x);
extern const pl_op_def pl_op_relu;

/* GELU, tanh approximation (PyTorch approximate='tanh'). */
pl_tensor_t *pl_gelu(pl_graph_t *g, pl_tensor_t *x);
extern const pl_op_def pl_op_gelu;

/* SiLU (swish): x · sigmoid(x), elementwise, as torch.nn.SiLU. Output of
 * x's shape; no parameters. */
pl_tensor_t *pl_silu(pl_graph_t *g, pl_tensor_t *x);
extern const pl_op_def pl_op_silu;

/* a + b, same shapes (a residual connection). */
pl_tensor_t *pl_add(pl_graph_t *g, pl_tensor_t *a, pl_tensor_t *b, const char *name);
extern const pl_op_def pl_op_add;

/* a ⊙ b, elementwise; a and b float activations of the same shape. The
 * output has that shape; no parameters. Gradients: b ⊙ dy and a ⊙ dy. */
pl_tensor_t *pl_mul(pl_graph_t *g, pl_tensor_t *a, pl_tensor_t *b, const char *name);
extern const pl_op_def pl_op_mul;

/* a − b, elementwise; same shapes as pl_mul. No parameters. */
pl_tensor_t *pl_sub(pl_graph_t *g, pl_tensor_t *a, pl_tensor_t *b, const char *name);
extern const pl_op_def pl_op_sub;

/* factor · x, elementwise, with a constant factor (the op's attribute, not
 * a parameter: it is not trained). Output of x's shape. */
pl_tensor_t *pl_scale(pl_graph_t *g, pl_tensor_t *x, float factor, const char *name);
typedef struct pl_scale_attrs {
    float factor;
} pl_scale_attrs;
extern const pl_op_def pl_op_scale; /* attrs: pl_scale_attrs */

/* Dropout, as torch.nn.Dropout(p): in a training step each element of x
 * is kept with probability 1 − p and scaled by 1/(1 − p) (the float
 * 1.0f / (1.0f − p), as PyTorch forms it), the others are zeroed; the
 * gradient is dy times the same mask. In an evaluation step
 * (pl_step_options.forward_only) it is the identity. p must be in [0, 1)
 * (p = 0 is the identity); output of x's shape, no parameters.
 *
 * Masks are reproducible: whether element j of sample s is kept is a pure
 * function of (seed, s, j), where s counts in the whole batch and the seed
 * is the engine's per-op, per-pass seed (pl_op_call.seed: from the graph's
 * seed, the optimizer step, the micro-step of gradient accumulation and
 * the op). A run's masks are thus the same whatever the tiles, the
 * pipeline schedule or the device (CPU and CUDA keep the same elements),
 * and they differ from step to step and between dropout ops. */
pl_tensor_t *pl_dropout(pl_graph_t *g, pl_tensor_t *x, float p, const char *name);
/* The probability of dropping an element, in [0, 1). */
typedef struct pl_dropout_attrs {
    float p;
} pl_dropout_attrs;
extern const pl_op_def pl_op_dropout; /* attrs: pl_dropout_attrs */

/* --------------------------------------------------------- normalisation */

/* LayerNorm over the last dim (eps 1e-5); "<name>.weight" (ones) and
 * "<name>.bias" (zeros). */
pl_tensor_t *pl_layernorm(pl_graph_t *g, pl_tensor_t *x, const char *name);
extern const pl_op_def pl_op_layernorm;

/* RMSNorm over the last dim of x [..., C], as torch.nn.RMSNorm(C,
 * eps=1e-6): y = x / sqrt(mean(x²) + 1e-6) · weight. eps is LLaMA's 1e-6
 * (PyTorch's default, eps=None, would be float32's machine epsilon).
 * Creates "<name>.weight" [C], initialised to ones; no bias (RMSNorm does
 * not centre). Output of x's shape. */
pl_tensor_t *pl_rmsnorm(pl_graph_t *g, pl_tensor_t *x, const char *name);
extern const pl_op_def pl_op_rmsnorm;

/* Softmax over the last dim of x [..., C] (the row maximum is subtracted
 * first, so large inputs cannot overflow). Output of x's shape; no
 * parameters. */
pl_tensor_t *pl_softmax(pl_graph_t *g, pl_tensor_t *x);
extern const pl_op_def pl_op_softmax;

/* ----------------------------------------------------------- transformer
 * (pleiades/models.h builds a whole GPT of them) */

/* GPT-2's encoder: tokens int32 [T] → wte[token] + wpe[position], [T, C].
 * Creates "<name>.wte" [V, C] and "<name>.wpe" [T, C], initialised
 * N(0, 0.02). A token outside [0, V) makes the step fail with an error. */
pl_tensor_t *pl_embedding(pl_graph_t *g, pl_tensor_t *tokens, int64_t vocab,
                          int64_t channels, const char *name);
typedef struct pl_embedding_attrs {
    int64_t vocab, channels;
} pl_embedding_attrs;
extern const pl_op_def pl_op_embedding; /* attrs: pl_embedding_attrs */

/* Causal multi-head self-attention: qkv [T, 3C] (queries | keys | values,
 * heads contiguous) → [T, C], softmax(q·kᵀ/√(C/heads)) · v per head.
 * C % heads must be 0. */
pl_tensor_t *pl_attention(pl_graph_t *g, pl_tensor_t *qkv, int64_t heads,
                          const char *name);
typedef struct pl_attention_attrs {
    int64_t heads;
} pl_attention_attrs;
extern const pl_op_def pl_op_attention; /* attrs: pl_attention_attrs */

/* ------------------------------------------------- losses and metrics */

/* Mean softmax cross-entropy of `logits` [..., K] against int32 `labels`
 * [...] (class indices in [0, K)); a scalar over the whole batch. */
pl_tensor_t *pl_cross_entropy(pl_graph_t *g, pl_tensor_t *logits, pl_tensor_t *labels);
extern const pl_op_def pl_op_cross_entropy;

/* The same over the first `classes` of the K logits only (1 <= classes <=
 * K; labels in [0, classes)): the other K - classes columns -- a
 * vocabulary padded to a multiple for faster matrix products, GPT-2's
 * 50257 as 50304 -- take no probability and get a zero gradient, so the
 * loss is exactly that of the unpadded model. */
typedef struct pl_cross_entropy_attrs {
    int64_t classes;
} pl_cross_entropy_attrs;
pl_tensor_t *pl_cross_entropy_padded(pl_graph_t *g, pl_tensor_t *logits, pl_tensor_t *labels,
                                     int64_t classes);
extern const pl_op_def pl_op_cross_entropy_padded; /* attrs: pl_cross_entropy_attrs */

/* Mean squared error over all elements of the batch, as torch.nn.MSELoss()
 * (reduction 'mean'): a scalar, Σ (pred − target)² / (batch · elements per
 * sample). pred and target are float tensors of the same shape; the
 * gradient flows into pred, and into target too when it is an activation
 * (a graph input gets none). Use it as the graph's loss or as a metric. */
pl_tensor_t *pl_mse_loss(pl_graph_t *g, pl_tensor_t *pred, pl_tensor_t *target);
extern const pl_op_def pl_op_mse_loss;

/* Mean of all elements of x over the batch (a scalar; differentiable). */
pl_tensor_t *pl_mean(pl_graph_t *g, pl_tensor_t *x);
extern const pl_op_def pl_op_mean;

/* Fraction of rows whose arg-max equals the label (a metric, no gradient). */
pl_tensor_t *pl_accuracy(pl_graph_t *g, pl_tensor_t *logits, pl_tensor_t *labels);
extern const pl_op_def pl_op_accuracy;

#ifdef __cplusplus
}
#endif

#endif /* PLEIADES_OPS_H */
