/* LayerNorm (PyTorch semantics: biased variance, eps inside the sqrt): CPU
 * kernels, the op definition and its builder. */
#include <math.h>
#include <string.h>

#include "ops/common.h"
#include "ops/kernels.h"
#ifdef PL_WITH_CUDA
#include "ops/cuda/kernels.h"
#endif

#define LN_EPS 1e-5f

/* Row reductions in double with DL independent accumulators: GCC vectorises
 * them (a single running double sum is a serial chain of 4-cycle adds that
 * it may not reorder without -ffast-math, which made these loops the bulk
 * of LayerNorm's time). The combination order is fixed: deterministic. */
enum { DL = 8 };

static double reduce_lanes(double *acc) {
    for (int w = DL / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0];
}

/* Mean and 1/std of one row, accumulated in double so long rows of large
 * values keep their precision. Both stay double: a mean rounded to fp32 is
 * off by up to half an ulp of the row's offset (3e-5 at 1e3), an error
 * x − mean would pass on in full, i.e. 1e-4 in x̂ for a row of 1e3 ± 0.3. */
typedef struct row_stat {
    double mean, rstd;
} row_stat;

static row_stat row_stats(const float *x, int64_t C) {
    double acc[DL] = {0};
    int64_t c = 0;
    for (; c + DL <= C; c += DL)
        for (int j = 0; j < DL; j++) acc[j] += x[c + j];
    for (; c < C; c++) acc[0] += x[c];
    double m = reduce_lanes(acc) / C;
    double acc2[DL] = {0};
    for (c = 0; c + DL <= C; c += DL)
        for (int j = 0; j < DL; j++) {
            double d = x[c + j] - m;
            acc2[j] += d * d;
        }
    for (; c < C; c++) {
        double d = x[c] - m;
        acc2[0] += d * d;
    }
    return (row_stat){m, 1.0 / sqrt(reduce_lanes(acc2) / C + LN_EPS)};
}

void layernorm_forward(float *out, const float *inp, const float *weight,
                       const float *bias, int64_t N, int64_t C) {
    for (int64_t i = 0; i < N; i++) {
        const float *x = inp + i * C;
        float *o = out + i * C;
        row_stat st = row_stats(x, C);
        const double m = st.mean, r = st.rstd;
        for (int64_t c = 0; c < C; c++)
            o[c] = (float)((x[c] - m) * r) * weight[c] + bias[c];
    }
}

void layernorm_backward_input(float *dinp, const float *dout, const float *inp,
                              const float *weight, int64_t N, int64_t C,
                              int accumulate) {
    for (int64_t i = 0; i < N; i++) {
        const float *x = inp + i * C, *d = dout + i * C;
        float *dx = dinp + i * C;
        row_stat st = row_stats(x, C);
        const double m = st.mean, r = st.rstd;
        /* dx = r · (g − mean(g) − x̂ · mean(g ⊙ x̂)), g = dout ⊙ weight */
        double gm[DL] = {0}, gxm[DL] = {0};
        int64_t c = 0;
        for (; c + DL <= C; c += DL)
            for (int j = 0; j < DL; j++) {
                double g = d[c + j] * weight[c + j]; /* a float product */
                double xhat = (x[c + j] - m) * r;
                gm[j] += g;
                gxm[j] += g * xhat;
            }
        for (; c < C; c++) {
            double g = d[c] * weight[c];
            gm[0] += g;
            gxm[0] += g * ((x[c] - m) * r);
        }
        double gmean = reduce_lanes(gm) / C, gxmean = reduce_lanes(gxm) / C;
        for (int64_t c = 0; c < C; c++) {
            double xhat = (x[c] - m) * r;
            float v = (float)(r * (d[c] * weight[c] - gmean - xhat * gxmean));
            dx[c] = accumulate ? dx[c] + v : v;
        }
    }
}

void layernorm_backward_weight(float *dweight, float *dbias, const float *dout,
                               const float *inp, int64_t N, int64_t C,
                               int accumulate) {
    if (!accumulate) {
        memset(dweight, 0, C * sizeof *dweight);
        memset(dbias, 0, C * sizeof *dbias);
    }
    for (int64_t i = 0; i < N; i++) {
        const float *x = inp + i * C, *d = dout + i * C;
        row_stat st = row_stats(x, C);
        const double m = st.mean, r = st.rstd;
        for (int64_t c = 0; c < C; c++) {
            dweight[c] += d[c] * (float)((x[c] - m) * r);
            dbias[c] += d[c];
        }
    }
}

/* ---------------------------------------------------------- the op */

#define X(c) ((const float *)(c)->in[0])
#define ROWS(c) pl_op_call_rows(c, 0)
#define CH(c) pl_op_call_last_dim(c, 0)

static int layernorm_forward_cpu(pl_op_call *c) {
    layernorm_forward(c->out, X(c), c->param[0], c->param[1], ROWS(c), CH(c));
    return 0;
}
static int layernorm_backward_input_cpu(pl_op_call *c) {
    layernorm_backward_input(c->dinput, c->dout, X(c), c->param[0], ROWS(c), CH(c),
                             c->accumulate);
    return 0;
}
/* Weight and bias are created together, so their accumulate flags agree. */
static int layernorm_backward_weight_cpu(pl_op_call *c) {
    layernorm_backward_weight(c->dparam[0], c->dparam[1], c->dout, X(c), ROWS(c), CH(c),
                              c->accumulate_param[0]);
    return 0;
}

#ifdef PL_WITH_CUDA
static int layernorm_forward_gpu(pl_op_call *c) {
    pl_cuda_layernorm_forward(c->stream, c->out, X(c), c->param[0], c->param[1], ROWS(c),
                              CH(c));
    return 0;
}
static int layernorm_backward_input_gpu(pl_op_call *c) {
    pl_cuda_layernorm_backward_input(c->stream, c->dinput, c->dout, X(c), c->param[0],
                                     ROWS(c), CH(c), c->accumulate);
    return 0;
}
static int layernorm_backward_weight_gpu(pl_op_call *c) {
    pl_cuda_layernorm_backward_weight(c->stream, c->dparam[0], c->dparam[1], c->dout, X(c),
                                      ROWS(c), CH(c), c->accumulate_param[0]);
    return 0;
}
#endif

static pl_status layernorm_shape(const pl_op_def *def, const char *op,
                                 pl_tensor_t *const *in, const void *attrs,
                                 pl_op_layout *l) {
    (void)def, (void)attrs;
    pl_status st = pl_ops_check_float(op, in[0]);
    if (st) return st;
    int64_t C = pl_ops_last_dim(in[0]);
    l->params[0] = (pl_op_param_decl){"weight", 1, {C}, PL_INIT_ONES, 1.0f};
    l->params[1] = (pl_op_param_decl){"bias", 1, {C}, PL_INIT_ZEROS, 0.0f};
    l->n_params = 2;
    pl_ops_same_shape(l, in[0]);
    l->flops = 5.0 * (double)pl_tensor_numel(in[0]);
    return PL_STATUS_OK;
}

const pl_op_def pl_op_layernorm = {
    .name = "layernorm",
    .api = "pl_layernorm",
    .n_inputs = 1,
    .input_names = {"x"},
    .shape = layernorm_shape,
    .forward = {layernorm_forward_cpu, PL_CUDA_KERNEL(layernorm_forward_gpu)},
    .backward_input = {{layernorm_backward_input_cpu,
                        PL_CUDA_KERNEL(layernorm_backward_input_gpu)}},
    .backward_weight = {layernorm_backward_weight_cpu,
                        PL_CUDA_KERNEL(layernorm_backward_weight_gpu)},
    .backward_input_reads = PL_OP_READS_INPUTS | PL_OP_READS_PARAMS,
    .backward_weight_reads = PL_OP_READS_INPUTS,
};

pl_tensor_t *pl_layernorm(pl_graph_t *g, pl_tensor_t *x, const char *name) {
    return pl_graph_op(g, &pl_op_layernorm, &x, 1, NULL, name);
}
