/*
 * pleiades/ops_extra.h — more built-in ops, written against the op
 * interface of pleiades/op.h like pl_linear or pl_layernorm: elementwise
 * product, difference and scaling, SiLU, RMSNorm, softmax and the
 * mean-squared-error loss. Each has CPU and CUDA kernels for its forward
 * pass and every gradient (ops/<op>.c, ops/cuda/<op>.cu).
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
 * Every builder returns the op's output, or NULL with pl_last_error()
 * naming the op and the operands at fault (a wrong dtype, shapes that
 * differ, a frozen graph).
 */
#ifndef PLEIADES_OPS_EXTRA_H
#define PLEIADES_OPS_EXTRA_H

#include "pleiades/graph.h"
#include "pleiades/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Attributes of pl_op_scale (pl_graph_op copies them). */
typedef struct pl_scale_attrs {
    float factor;
} pl_scale_attrs;

/* The definitions behind the builders below. */
extern const pl_op_def pl_op_mul, pl_op_sub, pl_op_scale, pl_op_silu, pl_op_rmsnorm,
    pl_op_mse_loss, pl_op_softmax;

/* a ⊙ b, elementwise; a and b float activations of the same shape. The
 * output has that shape; no parameters. Gradients: b ⊙ dy and a ⊙ dy. */
pl_tensor_t *pl_mul(pl_graph_t *g, pl_tensor_t *a, pl_tensor_t *b, const char *name);

/* a − b, elementwise; same shapes as pl_mul. No parameters. */
pl_tensor_t *pl_sub(pl_graph_t *g, pl_tensor_t *a, pl_tensor_t *b, const char *name);

/* factor · x, elementwise, with a constant factor (the op's attribute, not
 * a parameter: it is not trained). Output of x's shape. */
pl_tensor_t *pl_scale(pl_graph_t *g, pl_tensor_t *x, float factor, const char *name);

/* SiLU (swish): x · sigmoid(x), elementwise, as torch.nn.SiLU. Output of
 * x's shape; no parameters. */
pl_tensor_t *pl_silu(pl_graph_t *g, pl_tensor_t *x);

/* RMSNorm over the last dim of x [..., C], as torch.nn.RMSNorm(C,
 * eps=1e-6): y = x / sqrt(mean(x²) + 1e-6) · weight. eps is LLaMA's 1e-6
 * (PyTorch's default, eps=None, would be float32's machine epsilon).
 * Creates "<name>.weight" [C], initialised to ones; no bias (RMSNorm does
 * not centre). Output of x's shape. */
pl_tensor_t *pl_rmsnorm(pl_graph_t *g, pl_tensor_t *x, const char *name);

/* Softmax over the last dim of x [..., C] (the row maximum is subtracted
 * first, so large inputs cannot overflow). Output of x's shape; no
 * parameters. */
pl_tensor_t *pl_softmax(pl_graph_t *g, pl_tensor_t *x);

/* Mean squared error over all elements of the batch, as torch.nn.MSELoss()
 * (reduction 'mean'): a scalar, Σ (pred − target)² / (batch · elements per
 * sample). pred and target are float tensors of the same shape; the
 * gradient flows into pred, and into target too when it is an activation
 * (a graph input gets none). Use it as the graph's loss or as a metric. */
pl_tensor_t *pl_mse_loss(pl_graph_t *g, pl_tensor_t *pred, pl_tensor_t *target);

#ifdef __cplusplus
}
#endif

#endif /* PLEIADES_OPS_EXTRA_H */
