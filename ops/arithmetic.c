/* Elementwise arithmetic: the product a ⊙ b (SwiGLU's gate), the
 * difference a − b and scaling by a constant — CPU kernels, CUDA adapters,
 * op definitions and builders (include/pleiades/ops.h).
 *
 * Each gradient of these ops is linear in dout, so the backward kernels
 * are one loop each; sub's and scale's share one (dinp (+)= factor · dout)
 * and mul's serves both factors, told apart by `input`. */
#include <math.h>

#include "ops/common.h"
#include "ops/kernels.h"
#ifdef PL_WITH_CUDA
#include "ops/cuda/kernels.h"
#endif

void pl_cpu_mul_forward(float *out, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = a[i] * b[i];
}

/* d(a·b)/da = b: the gradient of one factor is the other times dout. */
void pl_cpu_mul_backward(float *dinp, const float *other, const float *dout, int64_t n,
                         int accumulate) {
    for (int64_t i = 0; i < n; i++) {
        float g = other[i] * dout[i];
        dinp[i] = accumulate ? dinp[i] + g : g;
    }
}

void pl_cpu_sub_forward(float *out, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = a[i] - b[i];
}

void pl_cpu_scale_forward(float *out, const float *inp, float factor, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = factor * inp[i];
}

/* dinp (+)= factor · dout: scale's gradient, and sub's with factor ±1
 * (exact: multiplying by ±1 rounds nothing). */
void pl_cpu_scale_backward(float *dinp, const float *dout, float factor, int64_t n,
                           int accumulate) {
    for (int64_t i = 0; i < n; i++) {
        float g = factor * dout[i];
        dinp[i] = accumulate ? dinp[i] + g : g;
    }
}

/* ---------------------------------------------------------- the ops */

/* Elements of the tile: every operand has the output's shape. */
#define NUMEL(c) ((c)->samples * (c)->in_numel[0])
#define IN(c, i) ((const float *)(c)->in[i])
#define FACTOR(c) (((const pl_scale_attrs *)(c)->attrs)->factor)
/* sub: +dout into a, −dout into b. */
#define SUB_SIGN(c) ((c)->input == 0 ? 1.0f : -1.0f)

static int mul_forward_cpu(pl_op_call *c) {
    pl_cpu_mul_forward(c->out, IN(c, 0), IN(c, 1), NUMEL(c));
    return 0;
}
/* One kernel for both inputs: the other factor is in[1 − input]. */
static int mul_backward_cpu(pl_op_call *c) {
    pl_cpu_mul_backward(c->dinput, IN(c, 1 - c->input), c->dout, NUMEL(c), c->accumulate);
    return 0;
}
static int sub_forward_cpu(pl_op_call *c) {
    pl_cpu_sub_forward(c->out, IN(c, 0), IN(c, 1), NUMEL(c));
    return 0;
}
static int sub_backward_cpu(pl_op_call *c) {
    pl_cpu_scale_backward(c->dinput, c->dout, SUB_SIGN(c), NUMEL(c), c->accumulate);
    return 0;
}
static int scale_forward_cpu(pl_op_call *c) {
    pl_cpu_scale_forward(c->out, IN(c, 0), FACTOR(c), NUMEL(c));
    return 0;
}
static int scale_backward_cpu(pl_op_call *c) {
    pl_cpu_scale_backward(c->dinput, c->dout, FACTOR(c), NUMEL(c), c->accumulate);
    return 0;
}

#ifdef PL_WITH_CUDA
static int mul_forward_gpu(pl_op_call *c) {
    pl_cuda_mul_forward(c->stream, c->out, IN(c, 0), IN(c, 1), NUMEL(c));
    return 0;
}
static int mul_backward_gpu(pl_op_call *c) {
    pl_cuda_mul_backward(c->stream, c->dinput, IN(c, 1 - c->input), c->dout, NUMEL(c),
                         c->accumulate);
    return 0;
}
static int sub_forward_gpu(pl_op_call *c) {
    pl_cuda_sub_forward(c->stream, c->out, IN(c, 0), IN(c, 1), NUMEL(c));
    return 0;
}
static int sub_backward_gpu(pl_op_call *c) {
    pl_cuda_scale(c->stream, c->dinput, c->dout, SUB_SIGN(c), NUMEL(c), c->accumulate);
    return 0;
}
static int scale_forward_gpu(pl_op_call *c) {
    pl_cuda_scale(c->stream, c->out, IN(c, 0), FACTOR(c), NUMEL(c), 0);
    return 0;
}
static int scale_backward_gpu(pl_op_call *c) {
    pl_cuda_scale(c->stream, c->dinput, c->dout, FACTOR(c), NUMEL(c), c->accumulate);
    return 0;
}
#endif

/* A NaN or infinite factor would silently poison every value downstream:
 * refuse it when the op is added, where the caller can see why. */
static pl_status scale_shape(const pl_op_def *def, const char *op, pl_tensor_t *const *in,
                             const void *attrs, pl_op_layout *l) {
    float f = ((const pl_scale_attrs *)attrs)->factor;
    if (!isfinite(f))
        return pl_error(PL_STATUS_INVALID_ARGUMENT, "%s: factor %g must be finite", op,
                        (double)f);
    return pl_ops_shape_elementwise(def, op, in, attrs, l);
}

const pl_op_def pl_op_mul = {
    .name = "mul",
    .api = "pl_mul",
    .n_inputs = 2,
    .input_names = {"a", "b"},
    .shape = pl_ops_shape_elementwise,
    .forward = {.cpu = mul_forward_cpu, .cuda = PL_CUDA_KERNEL(mul_forward_gpu)},
    .backward_input = {{.cpu = mul_backward_cpu, .cuda = PL_CUDA_KERNEL(mul_backward_gpu)},
                       {.cpu = mul_backward_cpu, .cuda = PL_CUDA_KERNEL(mul_backward_gpu)}},
    .backward_input_reads = PL_OP_READS_INPUTS,
};

const pl_op_def pl_op_sub = {
    .name = "sub",
    .api = "pl_sub",
    .n_inputs = 2,
    .input_names = {"a", "b"},
    .shape = pl_ops_shape_elementwise,
    .forward = {.cpu = sub_forward_cpu, .cuda = PL_CUDA_KERNEL(sub_forward_gpu)},
    .backward_input = {{.cpu = sub_backward_cpu, .cuda = PL_CUDA_KERNEL(sub_backward_gpu)},
                       {.cpu = sub_backward_cpu, .cuda = PL_CUDA_KERNEL(sub_backward_gpu)}},
    /* The gradients are ±dout: no operand values needed. */
};

const pl_op_def pl_op_scale = {
    .name = "scale",
    .api = "pl_scale",
    .n_inputs = 1,
    .input_names = {"x"},
    .attrs_size = sizeof(pl_scale_attrs),
    .shape = scale_shape,
    .forward = {.cpu = scale_forward_cpu, .cuda = PL_CUDA_KERNEL(scale_forward_gpu)},
    .backward_input = {{.cpu = scale_backward_cpu, .cuda = PL_CUDA_KERNEL(scale_backward_gpu)}},
};

pl_tensor_t *pl_mul(pl_graph_t *g, pl_tensor_t *a, pl_tensor_t *b, const char *name) {
    pl_tensor_t *in[2] = {a, b};
    return pl_graph_op(g, &pl_op_mul, in, 2, NULL, name);
}

pl_tensor_t *pl_sub(pl_graph_t *g, pl_tensor_t *a, pl_tensor_t *b, const char *name) {
    pl_tensor_t *in[2] = {a, b};
    return pl_graph_op(g, &pl_op_sub, in, 2, NULL, name);
}

pl_tensor_t *pl_scale(pl_graph_t *g, pl_tensor_t *x, float factor, const char *name) {
    pl_scale_attrs attrs = {factor};
    return pl_graph_op(g, &pl_op_scale, &x, 1, &attrs, name);
}
