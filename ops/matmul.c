/* Batched matrix product of two activations, with optional transposes, as
 * torch.matmul(a.mT if transpose_a else a, b.mT if transpose_b else b)
 * with leading dims that match exactly: CPU kernels on pl_sgemm, CUDA
 * adapters, the op definition and its builder (pleiades/ops.h).
 *
 * Unlike pl_linear and pl_linear_tied (ops/linear.c), whose right operand
 * is a parameter, both operands here are per-sample activations (attention
 * scores q·kᵀ, mixing by computed weights), so both get a gradient and the
 * op has no parameters.
 *
 * A tile is a stack of samples × (leading-dim product) matrix pairs at
 * fixed strides (per-sample operands are contiguous and row-major), so the
 * forward pass and each gradient are one strided batch of the same GEMM:
 * every kernel below first describes that batch (a `gemm_batch`), then
 * runs it, with one pl_sgemm per matrix on a CPU worker or one
 * cublasSgemmStridedBatched on a CUDA worker. With
 *   op(a) [M, K], op(b) [K, N], dout [M, N]
 * the gradients are
 *   d op(a) = dout · op(b)ᵀ  and  d op(b) = op(a)ᵀ · dout,
 * and where an operand is stored transposed its gradient is stored so too:
 *   transpose_a: da [K, M] = op(b) · doutᵀ;  transpose_b: db [N, K] = doutᵀ · op(a).
 * Each gradient is written by the GEMM itself, with beta = 1 to add onto it
 * (accumulate) and beta = 0 to overwrite it (beta = 0 ignores what was
 * there, NaN included, in BLAS and cuBLAS alike). */
#include <stdbool.h>
#include <stdint.h>

#include "ops/common.h"
#include "ops/kernels.h"
#ifdef PL_WITH_CUDA
#include "ops/cuda/kernels.h"
#endif

/* `count` row-major products C_i = op(A_i)·op(B_i) + beta·C_i, C_i [M, N],
 * operand i at A + i·sa, B + i·sb, C + i·sc. */
typedef struct gemm_batch {
    bool ta, tb;
    int64_t M, N, K;
    const float *A, *B;
    int64_t lda, ldb, sa, sb;
    float beta;
    float *C;
    int64_t ldc, sc;
    int64_t count;
} gemm_batch;

/* One product's dims: out [M, N] = op(a) [M, K] · op(b) [K, N], `count`
 * products in the tile. */
typedef struct mm_dims {
    bool ta, tb;
    int64_t M, N, K;
    int64_t count;
} mm_dims;

/* Row lengths of a and b as stored. */
static int64_t a_cols(const mm_dims *d) { return d->ta ? d->M : d->K; }
static int64_t b_cols(const mm_dims *d) { return d->tb ? d->K : d->N; }

/* out = op(a) · op(b). */
static gemm_batch forward_batch(mm_dims d, const float *a, const float *b, float *out) {
    return (gemm_batch){
        .ta = d.ta, .tb = d.tb, .M = d.M, .N = d.N, .K = d.K,
        .A = a, .lda = a_cols(&d), .sa = d.M * d.K,
        .B = b, .ldb = b_cols(&d), .sb = d.K * d.N,
        .beta = 0.0f, .C = out, .ldc = d.N, .sc = d.M * d.N, .count = d.count,
    };
}

/* The gradient of operand `input` (see the top of the file), added or
 * written per `accumulate`. Initialisers in gemm_batch's field order: ta,
 * tb, M, N, K, A, B, lda, ldb, sa, sb, beta, C, ldc, sc, count. */
static gemm_batch backward_batch(mm_dims d, int input, const float *dout, const float *a,
                                 const float *b, float *dinp, int accumulate) {
    const float beta = accumulate ? 1.0f : 0.0f;
    const int64_t sa = d.M * d.K, sb = d.K * d.N, so = d.M * d.N;
    const int64_t ac = a_cols(&d), bc = b_cols(&d);
    if (input == 0 && !d.ta)
        /* da [M, K] = dout [M, N] · op(b)ᵀ; op(b)ᵀ is b as stored when tb. */
        return (gemm_batch){false, !d.tb, d.M, d.K, d.N, dout, b, d.N, bc,
                            so, sb, beta, dinp, d.K, sa, d.count};
    if (input == 0)
        /* da [K, M] = op(b) [K, N] · doutᵀ [N, M]. */
        return (gemm_batch){d.tb, true, d.K, d.M, d.N, b, dout, bc, d.N,
                            sb, so, beta, dinp, d.M, sa, d.count};
    if (!d.tb)
        /* db [K, N] = op(a)ᵀ [K, M] · dout [M, N]; op(a)ᵀ is a as stored when ta. */
        return (gemm_batch){!d.ta, false, d.K, d.N, d.M, a, dout, ac, d.N,
                            sa, so, beta, dinp, d.N, sb, d.count};
    /* db [N, K] = doutᵀ [N, M] · op(a) [M, K]. */
    return (gemm_batch){true, d.ta, d.N, d.K, d.M, dout, a, d.N, ac,
                        so, sa, beta, dinp, d.K, sb, d.count};
}

static void gemm_batch_cpu(const gemm_batch *g) {
    for (int64_t i = 0; i < g->count; i++)
        pl_sgemm(g->ta, g->tb, g->M, g->N, g->K, 1.0f, g->A + i * g->sa, g->lda,
                 g->B + i * g->sb, g->ldb, g->beta, g->C + i * g->sc, g->ldc);
}

void pl_cpu_matmul_forward(float *out, const float *a, const float *b, int64_t count,
                           int64_t M, int64_t N, int64_t K, int ta, int tb) {
    const mm_dims d = {ta != 0, tb != 0, M, N, K, count};
    gemm_batch g = forward_batch(d, a, b, out);
    gemm_batch_cpu(&g);
}

void pl_cpu_matmul_backward(float *dinp, const float *dout, const float *a, const float *b,
                            int input, int64_t count, int64_t M, int64_t N, int64_t K,
                            int ta, int tb, int accumulate) {
    const mm_dims d = {ta != 0, tb != 0, M, N, K, count};
    gemm_batch g = backward_batch(d, input, dout, a, b, dinp, accumulate);
    gemm_batch_cpu(&g);
}

/* ------------------------------------------------------- the adapters */

/* The dims of one tile's product, from the operands' per-sample shapes
 * (the shape function has checked that they agree). */
static mm_dims dims_of(const pl_op_call *c) {
    const pl_matmul_attrs *at = c->attrs;
    const int nd = c->in_ndim[0];
    const int64_t *sa = c->in_shape[0], *sb = c->in_shape[1];
    mm_dims d = {.ta = at->transpose_a, .tb = at->transpose_b};
    d.M = d.ta ? sa[nd - 1] : sa[nd - 2];
    d.K = d.ta ? sa[nd - 2] : sa[nd - 1];
    d.N = d.tb ? sb[nd - 2] : sb[nd - 1];
    d.count = c->samples;
    for (int i = 0; i + 2 < nd; i++) d.count *= sa[i];
    return d;
}

#define A_IN(c) ((const float *)(c)->in[0])
#define B_IN(c) ((const float *)(c)->in[1])

static int matmul_forward_cpu(pl_op_call *c) {
    const mm_dims d = dims_of(c);
    pl_cpu_matmul_forward(c->out, A_IN(c), B_IN(c), d.count, d.M, d.N, d.K, d.ta, d.tb);
    return 0;
}
/* One kernel for both operands; `input` picks the gradient. */
static int matmul_backward_cpu(pl_op_call *c) {
    const mm_dims d = dims_of(c);
    pl_cpu_matmul_backward(c->dinput, c->dout, A_IN(c), B_IN(c), c->input, d.count, d.M,
                           d.N, d.K, d.ta, d.tb, c->accumulate);
    return 0;
}

#ifdef PL_WITH_CUDA
/* The same batches as one cublasSgemmStridedBatched. cuBLAS reports
 * failures by status (launches do not): a failed batch fails the step
 * with cuBLAS's status in the message. */
static int gemm_batch_gpu(pl_op_call *c, const gemm_batch *g) {
    int st = pl_cuda_gemm_strided_batched(c->cublas, c->stream, g->ta, g->tb, g->M, g->N,
                                          g->K, g->A, g->lda, g->sa, g->B, g->ldb, g->sb,
                                          g->beta, g->C, g->ldc, g->sc, g->count);
    if (st != 0 && c->error)
        snprintf(c->error, c->error_size, "cublasSgemmStridedBatched failed with status %d",
                 st);
    return st;
}
static int matmul_forward_gpu(pl_op_call *c) {
    gemm_batch g = forward_batch(dims_of(c), A_IN(c), B_IN(c), c->out);
    return gemm_batch_gpu(c, &g);
}
static int matmul_backward_gpu(pl_op_call *c) {
    gemm_batch g = backward_batch(dims_of(c), c->input, c->dout, A_IN(c), B_IN(c), c->dinput,
                                  c->accumulate);
    return gemm_batch_gpu(c, &g);
}
#endif

/* ---------------------------------------------------------- the op */

/* a [..., M, K] (or [..., K, M]) and b [..., K, N] (or [..., N, K]), with
 * equal leading dims. Every refusal names the op and both operands. */
static pl_status matmul_shape(const pl_op_def *def, const char *op, pl_tensor_t *const *in,
                              const void *attrs, pl_op_layout *l) {
    (void)def;
    const pl_matmul_attrs *at = attrs;
    pl_status st = pl_ops_check_float(op, in[0]);
    if (!st) st = pl_ops_check_float(op, in[1]);
    if (st) return st;
    int64_t sa[PL_MAX_DIMS], sb[PL_MAX_DIMS];
    const int na = pl_tensor_shape(in[0], sa), nb = pl_tensor_shape(in[1], sb);
    char stra[96], strb[96];
    pl_tensor_shape_str(in[0], stra, sizeof stra);
    pl_tensor_shape_str(in[1], strb, sizeof strb);
    const char *ta = at->transpose_a ? "true" : "false";
    const char *tb = at->transpose_b ? "true" : "false";
    if (na < 2 || nb < 2)
        return pl_error(PL_STATUS_SHAPE_MISMATCH,
                        "%s: a '%s' %s and b '%s' %s must each have at least 2 dims per "
                        "sample (a matrix, after any leading batch dims)", op,
                        pl_tensor_name(in[0]), stra, pl_tensor_name(in[1]), strb);
    bool same_lead = na == nb;
    for (int i = 0; same_lead && i < na - 2; i++) same_lead = sa[i] == sb[i];
    if (!same_lead)
        return pl_error(PL_STATUS_SHAPE_MISMATCH,
                        "%s: a '%s' %s and b '%s' %s must have the same leading dims (no "
                        "broadcasting)", op, pl_tensor_name(in[0]), stra,
                        pl_tensor_name(in[1]), strb);
    const int n = na;
    const int64_t M = at->transpose_a ? sa[n - 1] : sa[n - 2];
    const int64_t K = at->transpose_a ? sa[n - 2] : sa[n - 1];
    const int64_t Kb = at->transpose_b ? sb[n - 1] : sb[n - 2];
    const int64_t N = at->transpose_b ? sb[n - 2] : sb[n - 1];
    if (K != Kb)
        return pl_error(PL_STATUS_SHAPE_MISMATCH,
                        "%s: a '%s' %s (transpose_a %s) and b '%s' %s (transpose_b %s) "
                        "disagree on the inner dim: %lld vs %lld", op,
                        pl_tensor_name(in[0]), stra, ta, pl_tensor_name(in[1]), strb, tb,
                        (long long)K, (long long)Kb);
    double batch = 1.0;
    for (int i = 0; i < n - 2; i++) {
        l->out_shape[i] = sa[i];
        batch *= (double)sa[i];
    }
    l->out_ndim = n;
    l->out_shape[n - 2] = M;
    l->out_shape[n - 1] = N;
    l->flops = 2.0 * batch * (double)M * (double)N * (double)K;
    return PL_STATUS_OK;
}

const pl_op_def pl_op_matmul = {
    /* Not "matmul": that is pl_linear_tied's kind (ops/linear.c), and the
     * kind names codelets and their StarPU performance models. */
    .name = "batched_matmul",
    .api = "pl_matmul",
    .n_inputs = 2,
    .input_names = {"a", "b"},
    .attrs_size = sizeof(pl_matmul_attrs),
    .shape = matmul_shape,
    .forward = {.cpu = matmul_forward_cpu, .cuda = PL_CUDA_KERNEL(matmul_forward_gpu)},
    .backward_input = {{.cpu = matmul_backward_cpu, .cuda = PL_CUDA_KERNEL(matmul_backward_gpu)},
                       {.cpu = matmul_backward_cpu, .cuda = PL_CUDA_KERNEL(matmul_backward_gpu)}},
    /* Each gradient is the other operand times dout. */
    .backward_input_reads = PL_OP_READS_INPUTS,
};

pl_tensor_t *pl_matmul(pl_graph_t *g, pl_tensor_t *a, pl_tensor_t *b, bool transpose_a,
                       bool transpose_b, const char *name) {
    pl_matmul_attrs at = {transpose_a, transpose_b};
    pl_tensor_t *in[2] = {a, b};
    return pl_graph_op(g, &pl_op_matmul, in, 2, &at, name);
}
