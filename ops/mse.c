/* Mean squared error, as torch.nn.MSELoss() (reduction 'mean'): CPU
 * kernels, CUDA adapters, the op definition and its builder
 * (pleiades/ops.h).
 *
 * A scalar op like pl_mean (ops/loss.c): the forward kernel writes the
 * tile's partial sum Σ (pred − target)² and an invalid count of 0 (two
 * doubles); the engine adds the tiles and divides by batch · elements per
 * sample (scalar_count). The gradient kernels get no dout but `scale`,
 * d loss / d (partial sum), so d loss / d pred = 2 · (pred − target) ·
 * scale, and the target's gradient is its negation. */
#include "ops/common.h"
#include "ops/kernels.h"
#ifdef PL_WITH_CUDA
#include "ops/cuda/kernels.h"
#endif

/* Σ (pred − target)², in double: a float running sum over a large tile
 * would lose the small terms. When dpred is not NULL, also writes (never
 * adds) dpred = 2 · (pred − target) · scale: the loss task of a training
 * step, which is the first writer of pred's gradient. */
double pl_cpu_mse_forward(float *dpred, const float *pred, const float *target,
                          int64_t n, float scale) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float d = pred[i] - target[i];
        sum += (double)d * d;
        if (dpred) dpred[i] = 2.0f * d * scale;
    }
    return sum;
}

/* dinp (+)= sign · 2 · (pred − target) · scale: sign +1 for pred's
 * gradient, −1 for target's. */
void pl_cpu_mse_backward(float *dinp, const float *pred, const float *target, int64_t n,
                         float scale, float sign, int accumulate) {
    const float k = 2.0f * scale * sign;
    for (int64_t i = 0; i < n; i++) {
        float g = k * (pred[i] - target[i]);
        dinp[i] = accumulate ? dinp[i] + g : g;
    }
}

/* ---------------------------------------------------------- the op */

#define NUMEL(c) ((c)->samples * (c)->in_numel[0])
#define PRED(c) ((const float *)(c)->in[0])
#define TARGET(c) ((const float *)(c)->in[1])
#define SIGN(c) ((c)->input == 0 ? 1.0f : -1.0f)

static int mse_forward_cpu(pl_op_call *c) {
    double *sum = c->out;
    sum[0] = pl_cpu_mse_forward(NULL, PRED(c), TARGET(c), NUMEL(c), 0.0f);
    sum[1] = 0.0; /* every float is a valid operand */
    return 0;
}
/* Loss and pred's gradient from one pass over the tile. */
static int mse_loss_cpu(pl_op_call *c) {
    double *sum = c->out;
    sum[0] = pl_cpu_mse_forward(c->dinput, PRED(c), TARGET(c), NUMEL(c), c->scale);
    sum[1] = 0.0;
    return 0;
}
/* One kernel for both operands; `input` picks the sign. */
static int mse_backward_cpu(pl_op_call *c) {
    pl_cpu_mse_backward(c->dinput, PRED(c), TARGET(c), NUMEL(c), c->scale, SIGN(c),
                        c->accumulate);
    return 0;
}

#ifdef PL_WITH_CUDA
static int mse_forward_gpu(pl_op_call *c) {
    pl_cuda_mse_forward(c->stream, c->out, PRED(c), TARGET(c), NUMEL(c));
    return 0;
}
static int mse_loss_gpu(pl_op_call *c) {
    pl_cuda_mse_forward(c->stream, c->out, PRED(c), TARGET(c), NUMEL(c));
    pl_cuda_mse_backward(c->stream, c->dinput, PRED(c), TARGET(c), NUMEL(c), c->scale, 1.0f,
                         0);
    return 0;
}
static int mse_backward_gpu(pl_op_call *c) {
    pl_cuda_mse_backward(c->stream, c->dinput, PRED(c), TARGET(c), NUMEL(c), c->scale,
                         SIGN(c), c->accumulate);
    return 0;
}
#endif

static pl_status mse_shape(const pl_op_def *def, const char *op, pl_tensor_t *const *in,
                           const void *attrs, pl_op_layout *l) {
    (void)def, (void)attrs;
    pl_status st = pl_ops_check_float(op, in[0]);
    if (!st) st = pl_ops_check_float(op, in[1]);
    if (st) return st;
    int64_t p[PL_MAX_DIMS], t[PL_MAX_DIMS];
    int np = pl_tensor_shape(in[0], p), nt = pl_tensor_shape(in[1], t);
    bool same = np == nt;
    for (int i = 0; same && i < np; i++) same = p[i] == t[i];
    if (!same) {
        char sp[96], stg[96];
        return pl_error(PL_STATUS_SHAPE_MISMATCH,
                        "%s: pred '%s' %s and target '%s' %s must have the same shape", op,
                        pl_tensor_name(in[0]), pl_tensor_shape_str(in[0], sp, sizeof sp),
                        pl_tensor_name(in[1]),
                        pl_tensor_shape_str(in[1], stg, sizeof stg));
    }
    l->flops = 3.0 * (double)pl_tensor_numel(in[0]);
    l->scalar_count = (double)pl_tensor_numel(in[0]); /* the mean over elements */
    return PL_STATUS_OK;
}

const pl_op_def pl_op_mse_loss = {
    .name = "mse_loss",
    .api = "pl_mse_loss",
    .n_inputs = 2,
    .input_names = {"pred", "target"},
    .shape = mse_shape,
    .output = PL_OP_OUTPUT_SCALAR,
    .forward = {.cpu = mse_forward_cpu, .cuda = PL_CUDA_KERNEL(mse_forward_gpu)},
    .loss_forward = {.cpu = mse_loss_cpu, .cuda = PL_CUDA_KERNEL(mse_loss_gpu)},
    /* The target's gradient too: it may be an activation (a distillation
     * target computed by the graph); the engine skips it for inputs. */
    .backward_input = {{.cpu = mse_backward_cpu, .cuda = PL_CUDA_KERNEL(mse_backward_gpu)},
                       {.cpu = mse_backward_cpu, .cuda = PL_CUDA_KERNEL(mse_backward_gpu)}},
    .backward_input_reads = PL_OP_READS_INPUTS,
};

pl_tensor_t *pl_mse_loss(pl_graph_t *g, pl_tensor_t *pred, pl_tensor_t *target) {
    pl_tensor_t *in[2] = {pred, target};
    return pl_graph_op(g, &pl_op_mse_loss, in, 2, NULL, NULL);
}
