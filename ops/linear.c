/* The linear layer (pl_linear) and the bias-free matmul with a shared
 * weight (pl_linear_tied, the LM head tied to the token embedding): CPU
 * kernels on pl_sgemm, the op definitions, and the builders.
 *
 * Each StarPU CPU worker runs one task at a time, so the products run
 * single-threaded inside a task and parallelism comes from the tiles. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/common.h"
#include "ops/gemm_bf16.h"
#include "ops/kernels.h"
#include "util/half.h"
#ifdef PL_WITH_CUDA
#include "ops/cuda/kernels.h"
#endif

void pl_cpu_linear_forward(float *out, const float *inp, const float *weight,
                           const float *bias, int64_t N, int64_t C, int64_t OC) {
    /* Seed every row with the bias, then let sgemm add inp·W^T (beta = 1)
     * instead of a second pass over out. */
    for (int64_t i = 0; i < N; i++) memcpy(out + i * OC, bias, OC * sizeof *out);
    pl_sgemm(false, true, N, OC, C, 1.0f, inp, C, weight, C, 1.0f, out, OC);
}

void pl_cpu_linear_backward_input(float *dinp, const float *dout, const float *weight,
                                  int64_t N, int64_t C, int64_t OC, int accumulate) {
    pl_sgemm(false, false, N, C, OC, 1.0f, dout, OC, weight, C, accumulate ? 1.0f : 0.0f,
             dinp, C);
}

void pl_cpu_linear_backward_weight(float *dweight, float *dbias, const float *dout,
                                   const float *inp, int64_t N, int64_t C, int64_t OC,
                                   int accumulate) {
    pl_sgemm(true, false, OC, C, N, 1.0f, dout, OC, inp, C, accumulate ? 1.0f : 0.0f,
             dweight, C);
    if (!accumulate) memset(dbias, 0, OC * sizeof *dbias);
    for (int64_t i = 0; i < N; i++) {
        const float *row = dout + i * OC;
        for (int64_t o = 0; o < OC; o++) dbias[o] += row[o];
    }
}

void pl_cpu_linear_tied_forward(float *out, const float *inp, const float *weight,
                                int64_t N, int64_t C, int64_t OC) {
    pl_sgemm(false, true, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, OC);
}

void pl_cpu_linear_tied_backward_weight(float *dweight, const float *dout, const float *inp,
                                        int64_t N, int64_t C, int64_t OC, int accumulate) {
    pl_sgemm(true, false, OC, C, N, 1.0f, dout, OC, inp, C, accumulate ? 1.0f : 0.0f,
             dweight, C);
}

/* ---------------------------------------------------------- the ops */

/* Operands: x, then weight [OC, C] (and bias [OC]). */
#define X(c) ((const float *)(c)->in[0])
#define N_ROWS(c) pl_op_call_rows(c, 0)
#define C_IN(c) ((c)->param_shape[0][1])
#define C_OUT(c) ((c)->param_shape[0][0])

static int linear_forward_cpu(pl_op_call *c) {
    pl_cpu_linear_forward(c->out, X(c), c->param[0], c->param[1], N_ROWS(c), C_IN(c), C_OUT(c));
    return 0;
}
/* Shared by linear and the tied matmul: dx (+)= dout · W. */
static int linear_backward_input_cpu(pl_op_call *c) {
    pl_cpu_linear_backward_input(c->dinput, c->dout, c->param[0], N_ROWS(c), C_IN(c), C_OUT(c),
                                 c->accumulate);
    return 0;
}
/* Weight and bias are created together, so their accumulate flags agree. */
static int linear_backward_weight_cpu(pl_op_call *c) {
    pl_cpu_linear_backward_weight(c->dparam[0], c->dparam[1], c->dout, X(c), N_ROWS(c), C_IN(c),
                                  C_OUT(c), c->accumulate_param[0]);
    return 0;
}
static int linear_tied_forward_cpu(pl_op_call *c) {
    pl_cpu_linear_tied_forward(c->out, X(c), c->param[0], N_ROWS(c), C_IN(c), C_OUT(c));
    return 0;
}
static int linear_tied_backward_weight_cpu(pl_op_call *c) {
    pl_cpu_linear_tied_backward_weight(c->dparam[0], c->dout, X(c), N_ROWS(c), C_IN(c), C_OUT(c),
                                       c->accumulate_param[0]);
    return 0;
}

/* bf16 engines: the products in bf16 on oneDNN (ops/gemm_bf16.h), the
 * operands as stored. Each product accumulates in fp32 and rounds once,
 * as the widening path (widen, sgemm, round) does; only the order of the
 * products' sums differs. Declined when an operand is not bf16 (the
 * graph's output under force_outputs_fp32) or no bf16 product runs here. */
#define U16(p) ((uint16_t *)(uintptr_t)(p))

static int gemm_result(pl_op_call *c, int rc) {
    if (rc == PL_GEMM_BF16_UNSUPPORTED) return PL_OP_DECLINED;
    if (rc != 0) snprintf(c->error, c->error_size, "oneDNN's bf16 matmul failed");
    return rc;
}
static bool bf16_call(const pl_op_call *c) {
    return c->bf16.in[0] && c->bf16.params && c->bf16.out && pl_gemm_bf16_available();
}
/* out = x · W^T (+ b) */
static int linear_forward_bf16(pl_op_call *c) {
    if (!bf16_call(c)) return PL_OP_DECLINED;
    int64_t N = N_ROWS(c), C = C_IN(c), OC = C_OUT(c);
    return gemm_result(c, pl_gemm_bf16(N, OC, C, U16(X(c)), C, 1, U16(c->param[0]), 1, C,
                                       c->n_params > 1 ? U16(c->param[1]) : NULL, U16(c->out),
                                       OC, false));
}
/* dx (+)= dout · W */
static int linear_backward_input_bf16(pl_op_call *c) {
    if (!bf16_call(c)) return PL_OP_DECLINED;
    int64_t N = N_ROWS(c), C = C_IN(c), OC = C_OUT(c);
    return gemm_result(c, pl_gemm_bf16(N, C, OC, U16(c->dout), OC, 1, U16(c->param[0]), C, 1,
                                       NULL, U16(c->dinput), C, c->accumulate));
}
/* dW (+)= dout^T · x, and (linear) db (+)= the rows of dout summed in fp32
 * in row order, as linear_backward_weight does on widened operands. */
static int linear_backward_weight_bf16(pl_op_call *c) {
    if (!bf16_call(c)) return PL_OP_DECLINED;
    int64_t N = N_ROWS(c), C = C_IN(c), OC = C_OUT(c);
    bool bias = c->n_params > 1, acc = c->accumulate_param[0];
    float *db = bias ? malloc((size_t)OC * sizeof *db) : NULL;
    if (bias && !db) {
        snprintf(c->error, c->error_size, "out of memory for %lld bias gradients",
                 (long long)OC);
        return -1;
    }
    int rc = pl_gemm_bf16(OC, C, N, U16(c->dout), 1, OC, U16(X(c)), C, 1, NULL,
                          U16(c->dparam[0]), C, acc);
    if (rc == 0 && bias) {
        const uint16_t *dout = U16(c->dout);
        uint16_t *dbias = U16(c->dparam[1]);
        for (int64_t o = 0; o < OC; o++) db[o] = acc ? pl_bf16_to_float(dbias[o]) : 0.0f;
        for (int64_t i = 0; i < N; i++)
            for (int64_t o = 0; o < OC; o++) db[o] += pl_bf16_to_float(dout[i * OC + o]);
        for (int64_t o = 0; o < OC; o++) dbias[o] = pl_bf16_from_float(db[o]);
    }
    free(db);
    return gemm_result(c, rc);
}

#ifdef PL_WITH_CUDA
static int linear_forward_gpu(pl_op_call *c) {
    pl_cuda_linear_forward(c->cublas, c->stream, c->out, X(c), c->param[0], c->param[1],
                           N_ROWS(c), C_IN(c), C_OUT(c));
    return 0;
}
static int linear_backward_input_gpu(pl_op_call *c) {
    pl_cuda_linear_backward_input(c->cublas, c->dinput, c->dout, c->param[0], N_ROWS(c),
                                  C_IN(c), C_OUT(c), c->accumulate);
    return 0;
}
static int linear_backward_weight_gpu(pl_op_call *c) {
    pl_cuda_linear_backward_weight(c->cublas, c->stream, c->dparam[0], c->dparam[1],
                                   c->dout, X(c), N_ROWS(c), C_IN(c), C_OUT(c),
                                   c->accumulate_param[0]);
    return 0;
}
static int linear_tied_forward_gpu(pl_op_call *c) {
    pl_cuda_linear_tied_forward(c->cublas, c->out, X(c), c->param[0], N_ROWS(c), C_IN(c),
                                C_OUT(c));
    return 0;
}
static int linear_tied_backward_weight_gpu(pl_op_call *c) {
    pl_cuda_linear_tied_backward_weight(c->cublas, c->dparam[0], c->dout, X(c), N_ROWS(c),
                                        C_IN(c), C_OUT(c), c->accumulate_param[0]);
    return 0;
}

/* bf16 engines on a GPU: the same products on the operands as stored,
 * cublasGemmEx with fp32 accumulation (tensor cores), one rounding per
 * element as the widening path; declined as the CPU's when an operand is
 * not bf16. Shared by linear and the tied matmul (no bias). */
static bool bf16_gpu_call(const pl_op_call *c) {
    return c->bf16.in[0] && c->bf16.params && c->bf16.out;
}
static int cublas_result(pl_op_call *c, cublasStatus_t st) {
    if (st == CUBLAS_STATUS_SUCCESS) return 0;
    snprintf(c->error, c->error_size, "cuBLAS's bf16 GemmEx failed (status %d)", (int)st);
    return -1;
}
/* out = x · W^T (+ b): the bias rows first, then the product added. */
static int linear_forward_gpu_bf16(pl_op_call *c) {
    if (!bf16_gpu_call(c)) return PL_OP_DECLINED;
    int64_t N = N_ROWS(c), C = C_IN(c), OC = C_OUT(c);
    bool bias = c->n_params > 1;
    if (bias) pl_cuda_bias_rows_bf16(c->stream, U16(c->out), U16(c->param[1]), N, OC);
    return cublas_result(c, pl_cuda_gemm_bf16(c->cublas, 0, 1, N, OC, C, 1.0f, U16(X(c)), C,
                                              U16(c->param[0]), C, bias ? 1.0f : 0.0f,
                                              U16(c->out), OC));
}
/* dx (+)= dout · W */
static int linear_backward_input_gpu_bf16(pl_op_call *c) {
    if (!bf16_gpu_call(c)) return PL_OP_DECLINED;
    int64_t N = N_ROWS(c), C = C_IN(c), OC = C_OUT(c);
    return cublas_result(c, pl_cuda_gemm_bf16(c->cublas, 0, 0, N, C, OC, 1.0f, U16(c->dout),
                                              OC, U16(c->param[0]), C,
                                              c->accumulate ? 1.0f : 0.0f, U16(c->dinput), C));
}
/* dW (+)= dout^T · x, and (linear) db (+)= the rows of dout summed in fp32 */
static int linear_backward_weight_gpu_bf16(pl_op_call *c) {
    if (!bf16_gpu_call(c)) return PL_OP_DECLINED;
    int64_t N = N_ROWS(c), C = C_IN(c), OC = C_OUT(c);
    bool acc = c->accumulate_param[0];
    int rc = cublas_result(c, pl_cuda_gemm_bf16(c->cublas, 1, 0, OC, C, N, 1.0f, U16(c->dout),
                                                OC, U16(X(c)), C, acc ? 1.0f : 0.0f,
                                                U16(c->dparam[0]), C));
    if (rc == 0 && c->n_params > 1 &&
        pl_cuda_bias_grad_bf16(c->stream, U16(c->dparam[1]), U16(c->dout), N, OC, acc) != 0) {
        snprintf(c->error, c->error_size, "out of GPU memory for %lld bias gradients",
                 (long long)OC);
        rc = -1;
    }
    return rc;
}
#endif

static double matmul_flops(const pl_tensor_t *x, int64_t out_features) {
    return 2.0 * (double)pl_ops_rows(x) * (double)pl_ops_last_dim(x) * (double)out_features;
}

static pl_status linear_shape(const pl_op_def *def, const char *op, pl_tensor_t *const *in,
                              const void *attrs, pl_op_layout *l) {
    (void)def;
    const pl_linear_attrs *a = attrs;
    pl_status st = pl_ops_check_float(op, in[0]);
    if (st) return st;
    if (a->out_features <= 0)
        return pl_error(PL_STATUS_INVALID_ARGUMENT, "%s: out_features %lld must be > 0",
                        op, (long long)a->out_features);
    int64_t C = pl_ops_last_dim(in[0]);
    float bound = 1.0f / sqrtf((float)C); /* PyTorch nn.Linear default */
    l->params[0] = (pl_op_param_decl){"weight", 2, {a->out_features, C}, PL_INIT_UNIFORM,
                                      bound};
    l->params[1] = (pl_op_param_decl){"bias", 1, {a->out_features}, PL_INIT_UNIFORM, bound};
    l->n_params = 2;
    pl_ops_same_shape(l, in[0]);
    l->out_shape[l->out_ndim - 1] = a->out_features;
    l->flops = matmul_flops(in[0], a->out_features);
    return PL_STATUS_OK;
}

const pl_op_def pl_op_linear = {
    .name = "linear",
    .api = "pl_linear",
    .n_inputs = 1,
    .input_names = {"x"},
    .attrs_size = sizeof(pl_linear_attrs),
    .shape = linear_shape,
    .forward = {linear_forward_cpu, PL_CUDA_KERNEL(linear_forward_gpu), linear_forward_bf16,
                PL_CUDA_KERNEL(linear_forward_gpu_bf16)},
    .backward_input = {{linear_backward_input_cpu, PL_CUDA_KERNEL(linear_backward_input_gpu),
                        linear_backward_input_bf16,
                        PL_CUDA_KERNEL(linear_backward_input_gpu_bf16)}},
    .backward_weight = {linear_backward_weight_cpu, PL_CUDA_KERNEL(linear_backward_weight_gpu),
                        linear_backward_weight_bf16,
                        PL_CUDA_KERNEL(linear_backward_weight_gpu_bf16)},
    .backward_input_reads = PL_OP_READS_PARAMS,
    .backward_weight_reads = PL_OP_READS_INPUTS,
};

pl_tensor_t *pl_linear(pl_graph_t *g, pl_tensor_t *x, int64_t out_features,
                       const char *name) {
    pl_linear_attrs a = {out_features};
    pl_tensor_t *in[1] = {x};
    return pl_graph_op(g, &pl_op_linear, in, 1, &a, name);
}

static pl_status tied_shape(const pl_op_def *def, const char *op, pl_tensor_t *const *in,
                            const void *attrs, pl_op_layout *l) {
    (void)def, (void)attrs;
    pl_status st = pl_ops_check_float(op, in[0]);
    if (st) return st;
    int64_t w[PL_MAX_DIMS];
    char sx[96], sw[96];
    if (pl_tensor_shape(in[1], w) != 2 || w[1] != pl_ops_last_dim(in[0]))
        return pl_error(PL_STATUS_SHAPE_MISMATCH,
                        "%s: input '%s' %s and weight '%s' %s disagree (weight must be "
                        "a parameter [out, %lld])", op, pl_tensor_name(in[0]),
                        pl_tensor_shape_str(in[0], sx, sizeof sx), pl_tensor_name(in[1]),
                        pl_tensor_shape_str(in[1], sw, sizeof sw),
                        (long long)pl_ops_last_dim(in[0]));
    pl_ops_same_shape(l, in[0]);
    l->out_shape[l->out_ndim - 1] = w[0];
    l->flops = matmul_flops(in[0], w[0]);
    return PL_STATUS_OK;
}

const pl_op_def pl_op_linear_tied = {
    .name = "matmul",
    .api = "pl_linear_tied",
    .n_inputs = 1,
    .n_shared_params = 1,
    .input_names = {"x", "weight"},
    .shape = tied_shape,
    .forward = {linear_tied_forward_cpu, PL_CUDA_KERNEL(linear_tied_forward_gpu),
                linear_forward_bf16, PL_CUDA_KERNEL(linear_forward_gpu_bf16)},
    .backward_input = {{linear_backward_input_cpu, PL_CUDA_KERNEL(linear_backward_input_gpu),
                        linear_backward_input_bf16,
                        PL_CUDA_KERNEL(linear_backward_input_gpu_bf16)}},
    .backward_weight = {linear_tied_backward_weight_cpu,
                        PL_CUDA_KERNEL(linear_tied_backward_weight_gpu),
                        linear_backward_weight_bf16,
                        PL_CUDA_KERNEL(linear_backward_weight_gpu_bf16)},
    .backward_input_reads = PL_OP_READS_PARAMS,
    .backward_weight_reads = PL_OP_READS_INPUTS,
};

pl_tensor_t *pl_linear_tied(pl_graph_t *g, pl_tensor_t *x, pl_tensor_t *weight,
                            const char *name) {
    pl_tensor_t *in[2] = {x, weight};
    return pl_graph_op(g, &pl_op_linear_tied, in, 2, NULL, name);
}
