/* SiLU (swish), x · sigmoid(x), as torch.nn.SiLU: CPU kernels, CUDA
 * adapters, the op definition and its builder (pleiades/ops.h). */
#include "ops/common.h"
#include "ops/fast_exp.h"
#include "ops/kernels.h"
#ifdef PL_WITH_CUDA
#include "ops/cuda/kernels.h"
#endif

/* sigmoid(x) = 1 / (1 + e^−x). pl_fast_expf (about 1 ulp) keeps the loops
 * vectorisable, as GELU's are; it caps e^−x at e^87, so for x < −87 the
 * sigmoid is 1.6e−38 rather than 0 and SiLU's |x · s| stays below 1e−35:
 * zero for every purpose, and never a NaN from 0 · ∞. */
static inline float sigmoid(float x) { return 1.0f / (1.0f + pl_fast_expf(-x)); }

void pl_cpu_silu_forward(float *out, const float *inp, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = x * sigmoid(x);
    }
}

/* d/dx [x·s] = s + x·s·(1 − s) = s·(1 + x·(1 − s)); recomputed from x
 * (one exponential) rather than saved by the forward pass. */
void pl_cpu_silu_backward(float *dinp, const float *inp, const float *dout, int64_t n,
                          int accumulate) {
    for (int64_t i = 0; i < n; i++) {
        float x = inp[i], s = sigmoid(x);
        float g = s * (1.0f + x * (1.0f - s)) * dout[i];
        dinp[i] = accumulate ? dinp[i] + g : g;
    }
}

/* ---------------------------------------------------------- the op */

#define NUMEL(c) ((c)->samples * (c)->in_numel[0])
#define X(c) ((const float *)(c)->in[0])

static int silu_forward_cpu(pl_op_call *c) {
    pl_cpu_silu_forward(c->out, X(c), NUMEL(c));
    return 0;
}
static int silu_backward_cpu(pl_op_call *c) {
    pl_cpu_silu_backward(c->dinput, X(c), c->dout, NUMEL(c), c->accumulate);
    return 0;
}

#ifdef PL_WITH_CUDA
static int silu_forward_gpu(pl_op_call *c) {
    pl_cuda_silu_forward(c->stream, c->out, X(c), NUMEL(c));
    return 0;
}
static int silu_backward_gpu(pl_op_call *c) {
    pl_cuda_silu_backward(c->stream, c->dinput, X(c), c->dout, NUMEL(c), c->accumulate);
    return 0;
}
#endif

const pl_op_def pl_op_silu = {
    .name = "silu",
    .api = "pl_silu",
    .n_inputs = 1,
    .input_names = {"x"},
    .shape = pl_ops_shape_elementwise,
    .forward = {.cpu = silu_forward_cpu, .cuda = PL_CUDA_KERNEL(silu_forward_gpu)},
    .backward_input = {{.cpu = silu_backward_cpu, .cuda = PL_CUDA_KERNEL(silu_backward_gpu)}},
    .backward_input_reads = PL_OP_READS_INPUTS,
};

pl_tensor_t *pl_silu(pl_graph_t *g, pl_tensor_t *x) {
    return pl_graph_op(g, &pl_op_silu, &x, 1, NULL, NULL);
}
