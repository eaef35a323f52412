/* LayerNorm (PyTorch semantics: biased variance, eps inside the sqrt): CPU
 * kernels (fp32, and bf16 ones that widen a row at a time), the op
 * definition and its builder. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/common.h"
#include "ops/kernels.h"
#include "util/half.h"
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

/* One row of each kernel: the fp32 kernels below loop over rows, and the
 * bf16 ones call the same row functions on rows widened one at a time,
 * so both give bitwise the same values. */
static void forward_row(float *o, const float *x, const float *weight, const float *bias,
                        int64_t C) {
    row_stat st = row_stats(x, C);
    const double m = st.mean, r = st.rstd;
    for (int64_t c = 0; c < C; c++) o[c] = (float)((x[c] - m) * r) * weight[c] + bias[c];
}

static void backward_input_row(float *dx, const float *d, const float *x,
                               const float *weight, int64_t C, int accumulate) {
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
    for (c = 0; c < C; c++) {
        double xhat = (x[c] - m) * r;
        float v = (float)(r * (d[c] * weight[c] - gmean - xhat * gxmean));
        dx[c] = accumulate ? dx[c] + v : v;
    }
}

/* Adds one row's contributions to the (fp32) weight and bias gradients. */
static void backward_weight_row(float *dweight, float *dbias, const float *d,
                                const float *x, int64_t C) {
    row_stat st = row_stats(x, C);
    const double m = st.mean, r = st.rstd;
    for (int64_t c = 0; c < C; c++) {
        dweight[c] += d[c] * (float)((x[c] - m) * r);
        dbias[c] += d[c];
    }
}

void pl_cpu_layernorm_forward(float *out, const float *inp, const float *weight,
                              const float *bias, int64_t N, int64_t C) {
    for (int64_t i = 0; i < N; i++) forward_row(out + i * C, inp + i * C, weight, bias, C);
}

void pl_cpu_layernorm_backward_input(float *dinp, const float *dout, const float *inp,
                                     const float *weight, int64_t N, int64_t C,
                                     int accumulate) {
    for (int64_t i = 0; i < N; i++)
        backward_input_row(dinp + i * C, dout + i * C, inp + i * C, weight, C, accumulate);
}

void pl_cpu_layernorm_backward_weight(float *dweight, float *dbias, const float *dout,
                                      const float *inp, int64_t N, int64_t C,
                                      int accumulate) {
    if (!accumulate) {
        memset(dweight, 0, C * sizeof *dweight);
        memset(dbias, 0, C * sizeof *dbias);
    }
    for (int64_t i = 0; i < N; i++)
        backward_weight_row(dweight, dbias, dout + i * C, inp + i * C, C);
}

/* ---------------------------------------------------------- the op */

#define X(c) ((const float *)(c)->in[0])
#define ROWS(c) pl_op_call_rows(c, 0)
#define CH(c) pl_op_call_last_dim(c, 0)

static int layernorm_forward_cpu(pl_op_call *c) {
    pl_cpu_layernorm_forward(c->out, X(c), c->param[0], c->param[1], ROWS(c), CH(c));
    return 0;
}
static int layernorm_backward_input_cpu(pl_op_call *c) {
    pl_cpu_layernorm_backward_input(c->dinput, c->dout, X(c), c->param[0], ROWS(c), CH(c),
                                    c->accumulate);
    return 0;
}
/* Weight and bias are created together, so their accumulate flags agree. */
static int layernorm_backward_weight_cpu(pl_op_call *c) {
    pl_cpu_layernorm_backward_weight(c->dparam[0], c->dparam[1], c->dout, X(c), ROWS(c), CH(c),
                                     c->accumulate_param[0]);
    return 0;
}

/* bf16 engines: the row functions above on one row at a time, widened
 * into a buffer that stays in cache and rounded back as it is done, where
 * the engine's widening path converts whole tiles into scratch first (for
 * this memory-bound op that traffic was most of its time). Parameters are
 * widened once per call; the weight gradients accumulate over the rows in
 * fp32 and are rounded once at the end, as on the widening path, so the
 * values are bitwise the same. Any CPU: no bf16 arithmetic is involved. */
#define U16(p) ((uint16_t *)(uintptr_t)(const void *)(p))

/* The bf16 kernels' start: declines unless the input, the parameters and
 * the output (so the gradients too) are bf16, else gives 4·C floats of row
 * buffers (-1, with the error set, when out of memory). */
static int bf16_begin(pl_op_call *c, float **buf) {
    if (!c->bf16.in[0] || !c->bf16.params || !c->bf16.out) return PL_OP_DECLINED;
    int64_t n = 4 * CH(c);
    *buf = malloc((size_t)n * sizeof **buf);
    if (!*buf) {
        snprintf(c->error, c->error_size, "out of memory for %lld floats", (long long)n);
        return -1;
    }
    return 0;
}

static int layernorm_forward_bf16(pl_op_call *c) {
    float *w;
    int rc = bf16_begin(c, &w);
    if (rc) return rc;
    int64_t N = ROWS(c), C = CH(c);
    float *b = w + C, *x = b + C, *o = x + C;
    pl_half_to_float(true, U16(c->param[0]), w, C);
    pl_half_to_float(true, U16(c->param[1]), b, C);
    for (int64_t i = 0; i < N; i++) {
        pl_half_to_float(true, U16(c->in[0]) + i * C, x, C);
        forward_row(o, x, w, b, C);
        pl_half_from_float(true, o, U16(c->out) + i * C, C);
    }
    free(w);
    return 0;
}

static int layernorm_backward_input_bf16(pl_op_call *c) {
    float *w;
    int rc = bf16_begin(c, &w);
    if (rc) return rc;
    int64_t N = ROWS(c), C = CH(c);
    float *x = w + C, *d = x + C, *dx = d + C;
    pl_half_to_float(true, U16(c->param[0]), w, C);
    for (int64_t i = 0; i < N; i++) {
        pl_half_to_float(true, U16(c->in[0]) + i * C, x, C);
        pl_half_to_float(true, U16(c->dout) + i * C, d, C);
        if (c->accumulate) pl_half_to_float(true, U16(c->dinput) + i * C, dx, C);
        backward_input_row(dx, d, x, w, C, c->accumulate);
        pl_half_from_float(true, dx, U16(c->dinput) + i * C, C);
    }
    free(w);
    return 0;
}

static int layernorm_backward_weight_bf16(pl_op_call *c) {
    float *dw;
    int rc = bf16_begin(c, &dw);
    if (rc) return rc;
    int64_t N = ROWS(c), C = CH(c);
    float *db = dw + C, *x = db + C, *d = x + C;
    if (c->accumulate_param[0]) {
        pl_half_to_float(true, U16(c->dparam[0]), dw, C);
        pl_half_to_float(true, U16(c->dparam[1]), db, C);
    } else {
        memset(dw, 0, 2 * (size_t)C * sizeof *dw);
    }
    for (int64_t i = 0; i < N; i++) {
        pl_half_to_float(true, U16(c->in[0]) + i * C, x, C);
        pl_half_to_float(true, U16(c->dout) + i * C, d, C);
        backward_weight_row(dw, db, d, x, C);
    }
    pl_half_from_float(true, dw, U16(c->dparam[0]), C);
    pl_half_from_float(true, db, U16(c->dparam[1]), C);
    free(dw);
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
    .forward = {.cpu = layernorm_forward_cpu, .cuda = PL_CUDA_KERNEL(layernorm_forward_gpu),
                .cpu_bf16 = layernorm_forward_bf16},
    .backward_input = {{.cpu = layernorm_backward_input_cpu,
                        .cuda = PL_CUDA_KERNEL(layernorm_backward_input_gpu),
                        .cpu_bf16 = layernorm_backward_input_bf16}},
    .backward_weight = {.cpu = layernorm_backward_weight_cpu,
                        .cuda = PL_CUDA_KERNEL(layernorm_backward_weight_gpu),
                        .cpu_bf16 = layernorm_backward_weight_bf16},
    .backward_input_reads = PL_OP_READS_INPUTS | PL_OP_READS_PARAMS,
    .backward_weight_reads = PL_OP_READS_INPUTS,
};

pl_tensor_t *pl_layernorm(pl_graph_t *g, pl_tensor_t *x, const char *name) {
    return pl_graph_op(g, &pl_op_layernorm, &x, 1, NULL, name);
}
