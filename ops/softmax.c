/* Softmax over the last dim: CPU kernels, CUDA adapters, the op definition
 * and its builder (pleiades/ops.h). The row maximum is subtracted
 * before exponentiating, so every exponential is of a number <= 0 and
 * large inputs cannot overflow; the sum is at least 1 (the maximum's own
 * term), so the division is safe too.
 *
 * The backward kernel reads the forward's output (PL_OP_READS_OUTPUT)
 * instead of recomputing it: dx = y ⊙ (dy − Σ_row dy ⊙ y) needs only y. */
#include <math.h>

#include "ops/common.h"
#include "ops/kernels.h"
#ifdef PL_WITH_CUDA
#include "ops/cuda/kernels.h"
#endif

/* expf from libm rather than pl_fast_expf: the exponentials are all that
 * softmax computes, so their accuracy is its accuracy (the PyTorch
 * reference test holds it to 1e-5). The sum is in double. */
void pl_cpu_softmax_forward(float *out, const float *inp, int64_t N, int64_t C) {
    for (int64_t i = 0; i < N; i++) {
        const float *x = inp + i * C;
        float *y = out + i * C;
        float maxv = x[0];
        for (int64_t c = 1; c < C; c++) maxv = x[c] > maxv ? x[c] : maxv;
        double sum = 0.0;
        for (int64_t c = 0; c < C; c++) {
            y[c] = expf(x[c] - maxv);
            sum += y[c];
        }
        const float inv = (float)(1.0 / sum);
        for (int64_t c = 0; c < C; c++) y[c] *= inv;
    }
}

/* The Jacobian of softmax is diag(y) − y yᵀ, so dx = y ⊙ (dy − ⟨dy, y⟩). */
void pl_cpu_softmax_backward(float *dinp, const float *dout, const float *out, int64_t N,
                             int64_t C, int accumulate) {
    for (int64_t i = 0; i < N; i++) {
        const float *y = out + i * C, *d = dout + i * C;
        float *dx = dinp + i * C;
        double dot = 0.0;
        for (int64_t c = 0; c < C; c++) dot += (double)d[c] * y[c];
        const float fdot = (float)dot;
        for (int64_t c = 0; c < C; c++) {
            float v = y[c] * (d[c] - fdot);
            dx[c] = accumulate ? dx[c] + v : v;
        }
    }
}

/* ---------------------------------------------------------- the op */

#define X(c) ((const float *)(c)->in[0])
#define ROWS(c) pl_op_call_rows(c, 0)
#define CH(c) pl_op_call_last_dim(c, 0)

static int softmax_forward_cpu(pl_op_call *c) {
    pl_cpu_softmax_forward(c->out, X(c), ROWS(c), CH(c));
    return 0;
}
static int softmax_backward_cpu(pl_op_call *c) {
    pl_cpu_softmax_backward(c->dinput, c->dout, c->out, ROWS(c), CH(c), c->accumulate);
    return 0;
}

#ifdef PL_WITH_CUDA
static int softmax_forward_gpu(pl_op_call *c) {
    pl_cuda_softmax_forward(c->stream, c->out, X(c), ROWS(c), CH(c));
    return 0;
}
static int softmax_backward_gpu(pl_op_call *c) {
    pl_cuda_softmax_backward(c->stream, c->dinput, c->dout, c->out, ROWS(c), CH(c),
                             c->accumulate);
    return 0;
}
#endif

const pl_op_def pl_op_softmax = {
    .name = "softmax",
    .api = "pl_softmax",
    .n_inputs = 1,
    .input_names = {"x"},
    .shape = pl_ops_shape_elementwise, /* over the last dim */
    .forward = {.cpu = softmax_forward_cpu, .cuda = PL_CUDA_KERNEL(softmax_forward_gpu)},
    .backward_input = {{.cpu = softmax_backward_cpu, .cuda = PL_CUDA_KERNEL(softmax_backward_gpu)}},
    .backward_input_reads = PL_OP_READS_OUTPUT,
};

pl_tensor_t *pl_softmax(pl_graph_t *g, pl_tensor_t *x) {
    return pl_graph_op(g, &pl_op_softmax, &x, 1, NULL, NULL);
}
