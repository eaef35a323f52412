/* RMSNorm over the last dim (Zhang & Sennrich 2019; LLaMA's norm), as
 * torch.nn.RMSNorm(C, eps=1e-6): y = x · r · weight with
 * r = 1 / sqrt(mean(x²) + eps). CPU kernels, CUDA adapters, the op
 * definition and its builder (pleiades/ops.h).
 *
 * eps is 1e-6, LLaMA's default (the RMSNorm of Meta's reference code, and
 * Hugging Face's LlamaConfig.rms_norm_eps), not PyTorch's eps=None
 * (float32's machine epsilon, 1.2e-7), so that LLaMA-style models ported
 * here keep their outputs. It only matters for rows whose mean square is
 * near zero, where it bounds r by 1000.
 *
 * The input gradient (a B task) and the weight gradient (a W task) are
 * separate kernels so that the pipeline schedules can run the weight
 * gradient later; each recomputes r from x (one pass over the row), which
 * is cheaper than saving it through StarPU. */
#include <math.h>
#include <string.h>

#include "ops/common.h"
#include "ops/kernels.h"
#ifdef PL_WITH_CUDA
#include "ops/cuda/kernels.h"
#endif

#define RMS_EPS 1e-6

/* Row sums in double with DL independent accumulators, as in
 * ops/layernorm.c: GCC vectorises them (one running double sum is a serial
 * chain it may not reorder), and the lanes are combined in a fixed order,
 * so the result is deterministic. */
enum { DL = 8 };

static double reduce_lanes(double *acc) {
    for (int w = DL / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0];
}

/* 1 / rms of one row. Kept in double: the squares of a long row of large
 * values lose nothing, and x · r rounds once, to float, at the end. */
static double row_rstd(const float *x, int64_t C) {
    double acc[DL] = {0};
    int64_t c = 0;
    for (; c + DL <= C; c += DL)
        for (int j = 0; j < DL; j++) acc[j] += (double)x[c + j] * x[c + j];
    for (; c < C; c++) acc[0] += (double)x[c] * x[c];
    return 1.0 / sqrt(reduce_lanes(acc) / (double)C + RMS_EPS);
}

void pl_cpu_rmsnorm_forward(float *out, const float *inp, const float *weight, int64_t N,
                            int64_t C) {
    for (int64_t i = 0; i < N; i++) {
        const float *x = inp + i * C;
        float *o = out + i * C;
        const double r = row_rstd(x, C);
        for (int64_t c = 0; c < C; c++) o[c] = (float)(x[c] * r) * weight[c];
    }
}

/* With x̂ = x · r and g = dout ⊙ weight:
 *   dx = r · (g − x̂ · mean(g ⊙ x̂))
 * (the mean-square term's derivative; no mean(g) term, unlike LayerNorm,
 * since nothing was subtracted). */
void pl_cpu_rmsnorm_backward_input(float *dinp, const float *dout, const float *inp,
                                   const float *weight, int64_t N, int64_t C,
                                   int accumulate) {
    for (int64_t i = 0; i < N; i++) {
        const float *x = inp + i * C, *d = dout + i * C;
        float *dx = dinp + i * C;
        const double r = row_rstd(x, C);
        double acc[DL] = {0};
        int64_t c = 0;
        for (; c + DL <= C; c += DL)
            for (int j = 0; j < DL; j++)
                acc[j] += (double)(d[c + j] * weight[c + j]) * (x[c + j] * r);
        for (; c < C; c++) acc[0] += (double)(d[c] * weight[c]) * (x[c] * r);
        const double gxmean = reduce_lanes(acc) / (double)C;
        for (c = 0; c < C; c++) {
            double xhat = x[c] * r;
            float v = (float)(r * ((double)(d[c] * weight[c]) - xhat * gxmean));
            dx[c] = accumulate ? dx[c] + v : v;
        }
    }
}

/* dweight[c] (+)= Σ_rows dout · x̂, summed in row order (deterministic). */
void pl_cpu_rmsnorm_backward_weight(float *dweight, const float *dout, const float *inp,
                                    int64_t N, int64_t C, int accumulate) {
    if (!accumulate) memset(dweight, 0, (size_t)C * sizeof *dweight);
    for (int64_t i = 0; i < N; i++) {
        const float *x = inp + i * C, *d = dout + i * C;
        const double r = row_rstd(x, C);
        for (int64_t c = 0; c < C; c++) dweight[c] += d[c] * (float)(x[c] * r);
    }
}

/* ---------------------------------------------------------- the op */

#define X(c) ((const float *)(c)->in[0])
#define ROWS(c) pl_op_call_rows(c, 0)
#define CH(c) pl_op_call_last_dim(c, 0)

static int rmsnorm_forward_cpu(pl_op_call *c) {
    pl_cpu_rmsnorm_forward(c->out, X(c), c->param[0], ROWS(c), CH(c));
    return 0;
}
static int rmsnorm_backward_input_cpu(pl_op_call *c) {
    pl_cpu_rmsnorm_backward_input(c->dinput, c->dout, X(c), c->param[0], ROWS(c), CH(c),
                                  c->accumulate);
    return 0;
}
static int rmsnorm_backward_weight_cpu(pl_op_call *c) {
    pl_cpu_rmsnorm_backward_weight(c->dparam[0], c->dout, X(c), ROWS(c), CH(c),
                                   c->accumulate_param[0]);
    return 0;
}

#ifdef PL_WITH_CUDA
static int rmsnorm_forward_gpu(pl_op_call *c) {
    pl_cuda_rmsnorm_forward(c->stream, c->out, X(c), c->param[0], ROWS(c), CH(c));
    return 0;
}
static int rmsnorm_backward_input_gpu(pl_op_call *c) {
    pl_cuda_rmsnorm_backward_input(c->stream, c->dinput, c->dout, X(c), c->param[0],
                                   ROWS(c), CH(c), c->accumulate);
    return 0;
}
static int rmsnorm_backward_weight_gpu(pl_op_call *c) {
    pl_cuda_rmsnorm_backward_weight(c->stream, c->dparam[0], c->dout, X(c), ROWS(c), CH(c),
                                    c->accumulate_param[0]);
    return 0;
}
#endif

static pl_status rmsnorm_shape(const pl_op_def *def, const char *op,
                               pl_tensor_t *const *in, const void *attrs,
                               pl_op_layout *l) {
    (void)def, (void)attrs;
    pl_status st = pl_ops_check_float(op, in[0]);
    if (st) return st;
    int64_t C = pl_ops_last_dim(in[0]);
    l->params[0] = (pl_op_param_decl){"weight", 1, {C}, PL_INIT_ONES, 1.0f};
    l->n_params = 1;
    pl_ops_same_shape(l, in[0]);
    l->flops = 4.0 * (double)pl_tensor_numel(in[0]);
    return PL_STATUS_OK;
}

const pl_op_def pl_op_rmsnorm = {
    .name = "rmsnorm",
    .api = "pl_rmsnorm",
    .n_inputs = 1,
    .input_names = {"x"},
    .shape = rmsnorm_shape,
    .forward = {.cpu = rmsnorm_forward_cpu, .cuda = PL_CUDA_KERNEL(rmsnorm_forward_gpu)},
    .backward_input = {{.cpu = rmsnorm_backward_input_cpu,
                        .cuda = PL_CUDA_KERNEL(rmsnorm_backward_input_gpu)}},
    .backward_weight = {.cpu = rmsnorm_backward_weight_cpu,
                        .cuda = PL_CUDA_KERNEL(rmsnorm_backward_weight_gpu)},
    .backward_input_reads = PL_OP_READS_INPUTS | PL_OP_READS_PARAMS,
    .backward_weight_reads = PL_OP_READS_INPUTS,
};

pl_tensor_t *pl_rmsnorm(pl_graph_t *g, pl_tensor_t *x, const char *name) {
    return pl_graph_op(g, &pl_op_rmsnorm, &x, 1, NULL, name);
}
