/* Causal multi-head self-attention. Per (batch, head) the score and value
 * products are sgemms over strided views of qkv (row stride 3C), so the
 * O(T²·HS) work runs in pl_sgemm; only the masked softmax is a plain loop.
 * The full T×T score product is computed and the upper triangle ignored:
 * simpler than triangular blocking, and at most 2× the score flops.
 * CPU kernels, the op definition (the softmax probabilities are its saved
 * tensor) and its builder. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/fast_exp.h"
#include "ops/common.h"
#include "ops/gemm_bf16.h"
#include "ops/kernels.h"
#include "util/half.h"
#ifdef PL_WITH_CUDA
#include "ops/cuda/kernels.h"
#endif

/* Row reductions with 16 independent accumulators, so GCC vectorises them
 * (a single running sum or max is a serial dependency chain it may not
 * reorder without -ffast-math). The combination order is fixed, so results
 * are deterministic. */
enum { LANES = 16 };

static float row_max(const float *x, int64_t n) {
    float acc[LANES];
    for (int j = 0; j < LANES; j++) acc[j] = x[0];
    int64_t u = 0;
    for (; u + LANES <= n; u += LANES)
        for (int j = 0; j < LANES; j++) acc[j] = x[u + j] > acc[j] ? x[u + j] : acc[j];
    for (; u < n; u++) acc[0] = x[u] > acc[0] ? x[u] : acc[0];
    float m = acc[0];
    for (int j = 1; j < LANES; j++) m = acc[j] > m ? acc[j] : m;
    return m;
}

static float row_sum(const float *x, int64_t n) {
    float acc[LANES] = {0};
    int64_t u = 0;
    for (; u + LANES <= n; u += LANES)
        for (int j = 0; j < LANES; j++) acc[j] += x[u + j];
    for (; u < n; u++) acc[0] += x[u];
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0];
}

static float row_dot(const float *x, const float *y, int64_t n) {
    float acc[LANES] = {0};
    int64_t u = 0;
    for (; u + LANES <= n; u += LANES)
        for (int j = 0; j < LANES; j++) acc[j] += x[u + j] * y[u + j];
    for (; u < n; u++) acc[0] += x[u] * y[u];
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0];
}

void pl_cpu_attention_forward(float *out, float *att, const float *qkv, int64_t B,
                              int64_t T, int64_t C, int64_t NH) {
    int64_t HS = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < NH; h++) {
            const float *q = qkv + b * T * C3 + h * HS;
            const float *k = q + C, *v = q + 2 * C;
            float *a = att + (b * NH + h) * T * T;
            /* scores = q · kᵀ · scale */
            pl_sgemm(false, true, T, T, HS, scale, q, C3, k, C3, 0.0f, a, T);
            /* masked softmax of each row over u <= t; vectorised: the
             * exponentials are pl_fast_expf (libm's expf kept the loop
             * scalar) of arguments <= 0. */
            for (int64_t t = 0; t < T; t++) {
                float *row = a + t * T;
                float maxv = row_max(row, t + 1);
                for (int64_t u = 0; u <= t; u++) row[u] = pl_fast_expf(row[u] - maxv);
                float inv = 1.0f / row_sum(row, t + 1);
                for (int64_t u = 0; u <= t; u++) row[u] *= inv;
                for (int64_t u = t + 1; u < T; u++) row[u] = 0.0f;
            }
            /* out_h = att · v */
            pl_sgemm(false, false, T, HS, T, 1.0f, a, T, v, C3, 0.0f,
                     out + b * T * C + h * HS, C);
        }
}

void pl_cpu_attention_backward(float *dqkv, const float *dout, const float *qkv,
                               const float *att, int64_t B, int64_t T, int64_t C,
                               int64_t NH, int accumulate) {
    int64_t HS = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    float beta = accumulate ? 1.0f : 0.0f;
    float *datt = malloc(T * T * sizeof *datt);
    if (!datt) abort(); /* a task cannot report errors; T² floats is small */
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < NH; h++) {
            const float *q = qkv + b * T * C3 + h * HS;
            const float *k = q + C, *v = q + 2 * C;
            float *dq = dqkv + b * T * C3 + h * HS;
            float *dk = dq + C, *dv = dq + 2 * C;
            const float *a = att + (b * NH + h) * T * T;
            const float *d = dout + b * T * C + h * HS;
            /* datt = dout_h · vᵀ;  dv (+)= attᵀ · dout_h */
            pl_sgemm(false, true, T, T, HS, 1.0f, d, C, v, C3, 0.0f, datt, T);
            pl_sgemm(true, false, T, HS, T, 1.0f, a, T, d, C, beta, dv, C3);
            /* softmax backward, in place: dpre = att ⊙ (datt − Σ att ⊙ datt),
             * times the score scale; zero above the diagonal. */
            for (int64_t t = 0; t < T; t++) {
                const float *ar = a + t * T;
                float *dr = datt + t * T;
                float dot = row_dot(ar, dr, t + 1);
                for (int64_t u = 0; u <= t; u++) dr[u] = ar[u] * (dr[u] - dot) * scale;
                for (int64_t u = t + 1; u < T; u++) dr[u] = 0.0f;
            }
            /* dq (+)= dpre · k;  dk (+)= dpreᵀ · q */
            pl_sgemm(false, false, T, HS, T, 1.0f, datt, T, k, C3, beta, dq, C3);
            pl_sgemm(true, false, T, HS, T, 1.0f, datt, T, q, C3, beta, dk, C3);
        }
    free(datt);
}

/* ---------------------------------------------------------- the op */

/* qkv [T, 3C] per sample. */
#define QKV(c) ((const float *)(c)->in[0])
#define T_(c) ((c)->in_shape[0][0])
#define C_(c) ((c)->in_shape[0][1] / 3)
#define NH(c) (((const pl_attention_attrs *)(c)->attrs)->heads)

static int attention_forward_cpu(pl_op_call *c) {
    pl_cpu_attention_forward(c->out, c->saved, QKV(c), c->samples, T_(c), C_(c), NH(c));
    return 0;
}
static int attention_backward_cpu(pl_op_call *c) {
    pl_cpu_attention_backward(c->dinput, c->dout, QKV(c), c->saved, c->samples, T_(c), C_(c),
                              NH(c), c->accumulate);
    return 0;
}

/* bf16 engines: the four products per head in bf16 on oneDNN
 * (ops/gemm_bf16.h), the softmax and its gradient in fp32 as above.
 * Against the widening path two more values are rounded: the output is
 * the product of the probabilities as stored (bf16, the saved tensor)
 * rather than as computed, and the softmax gradient is rounded to bf16
 * before its two products. Declined unless qkv, the output and the saved
 * probabilities are all bf16 and bf16 products run here. */
#define U16(p) ((uint16_t *)(uintptr_t)(p))

static bool bf16_call(const pl_op_call *c) {
    return c->bf16.in[0] && c->bf16.out && c->bf16.saved && pl_gemm_bf16_available();
}

/* Maps a pl_gemm_bf16* return: after the first product nothing may be
 * declined (the outputs are partly written), so a refusal then is a
 * failure. */
static int bf16_step(pl_op_call *c, int rc, bool first) {
    if (rc == 0) return 0;
    if (rc == PL_GEMM_BF16_UNSUPPORTED && first) return PL_OP_DECLINED;
    snprintf(c->error, c->error_size, "oneDNN's bf16 matmul failed");
    return -1;
}

static int attention_forward_bf16(pl_op_call *c) {
    if (!bf16_call(c)) return PL_OP_DECLINED;
    int64_t B = c->samples, T = T_(c), C = C_(c), NH = NH(c), HS = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    float *a = malloc((size_t)(T * T) * sizeof *a);
    if (!a) {
        snprintf(c->error, c->error_size, "out of memory for %lld attention scores",
                 (long long)(T * T));
        return -1;
    }
    const uint16_t *qkv = U16(c->in[0]);
    uint16_t *att = U16(c->saved), *out = U16(c->out);
    int rc = 0;
    for (int64_t b = 0; b < B && !rc; b++)
        for (int64_t h = 0; h < NH && !rc; h++) {
            const uint16_t *q = qkv + b * T * C3 + h * HS, *k = q + C, *v = q + 2 * C;
            uint16_t *ah = att + (b * NH + h) * T * T;
            /* scores = q · kᵀ (kᵀ: k's rows as columns), scaled below */
            rc = bf16_step(c, pl_gemm_bf16_f32(T, T, HS, q, C3, 1, k, 1, C3, a, T),
                           b == 0 && h == 0);
            if (rc) break;
            for (int64_t t = 0; t < T; t++) {
                float *row = a + t * T;
                for (int64_t u = 0; u <= t; u++) row[u] *= scale;
                float maxv = row_max(row, t + 1);
                for (int64_t u = 0; u <= t; u++) row[u] = pl_fast_expf(row[u] - maxv);
                float inv = 1.0f / row_sum(row, t + 1);
                for (int64_t u = 0; u <= t; u++) ah[t * T + u] = pl_bf16_from_float(row[u] * inv);
                for (int64_t u = t + 1; u < T; u++) ah[t * T + u] = 0;
            }
            /* out_h = att · v */
            rc = bf16_step(c, pl_gemm_bf16(T, HS, T, ah, T, 1, v, C3, 1, NULL,
                                           out + b * T * C + h * HS, C, false), false);
        }
    free(a);
    return rc;
}

static int attention_backward_bf16(pl_op_call *c) {
    if (!bf16_call(c)) return PL_OP_DECLINED;
    int64_t B = c->samples, T = T_(c), C = C_(c), NH = NH(c), HS = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    float *datt = malloc((size_t)(T * T) * sizeof *datt), *ar = malloc((size_t)T * sizeof *ar);
    uint16_t *dpre = malloc((size_t)(T * T) * sizeof *dpre);
    if (!datt || !dpre || !ar) {
        free(datt), free(dpre), free(ar);
        snprintf(c->error, c->error_size, "out of memory for %lld attention gradients",
                 (long long)(T * T));
        return -1;
    }
    const uint16_t *qkv = U16(c->in[0]), *att = U16(c->saved), *dout = U16(c->dout);
    uint16_t *dqkv = U16(c->dinput);
    bool acc = c->accumulate;
    int rc = 0;
    for (int64_t b = 0; b < B && !rc; b++)
        for (int64_t h = 0; h < NH && !rc; h++) {
            const uint16_t *q = qkv + b * T * C3 + h * HS, *k = q + C, *v = q + 2 * C;
            uint16_t *dq = dqkv + b * T * C3 + h * HS, *dk = dq + C, *dv = dq + 2 * C;
            const uint16_t *ah = att + (b * NH + h) * T * T;
            const uint16_t *d = dout + b * T * C + h * HS;
            /* datt = dout_h · vᵀ;  dv (+)= attᵀ · dout_h */
            rc = bf16_step(c, pl_gemm_bf16_f32(T, T, HS, d, C, 1, v, 1, C3, datt, T),
                           b == 0 && h == 0);
            if (!rc)
                rc = bf16_step(c, pl_gemm_bf16(T, HS, T, ah, 1, T, d, C, 1, NULL, dv, C3, acc),
                               false);
            if (rc) break;
            /* softmax backward: dpre = att ⊙ (datt − Σ att ⊙ datt) · scale */
            for (int64_t t = 0; t < T; t++) {
                float *dr = datt + t * T; /* ar: the row's probabilities widened */
                for (int64_t u = 0; u <= t; u++) ar[u] = pl_bf16_to_float(ah[t * T + u]);
                float dot = row_dot(ar, dr, t + 1);
                for (int64_t u = 0; u <= t; u++)
                    dpre[t * T + u] = pl_bf16_from_float(ar[u] * (dr[u] - dot) * scale);
                for (int64_t u = t + 1; u < T; u++) dpre[t * T + u] = 0;
            }
            /* dq (+)= dpre · k;  dk (+)= dpreᵀ · q */
            rc = bf16_step(c, pl_gemm_bf16(T, HS, T, dpre, T, 1, k, C3, 1, NULL, dq, C3, acc),
                           false);
            if (!rc)
                rc = bf16_step(c, pl_gemm_bf16(T, HS, T, dpre, 1, T, q, C3, 1, NULL, dk, C3,
                                               acc), false);
        }
    free(datt), free(dpre), free(ar);
    return rc;
}

#ifdef PL_WITH_CUDA
static int attention_forward_gpu(pl_op_call *c) {
    pl_cuda_attention_forward(c->cublas, c->stream, c->out, c->saved, QKV(c), c->samples,
                              T_(c), C_(c), NH(c));
    return 0;
}
/* The softmax gradient needs NH·T·T floats of scratch, stream-ordered. */
static int attention_backward_gpu(pl_op_call *c) {
    float *scratch = NULL;
    cudaStream_t s = c->stream;
    if (cudaMallocAsync((void **)&scratch, (size_t)NH(c) * T_(c) * T_(c) * sizeof(float),
                        s) != cudaSuccess) {
        snprintf(c->error, c->error_size, "cudaMallocAsync of the softmax scratch failed");
        return 1;
    }
    pl_cuda_attention_backward(c->cublas, s, c->dinput, c->dout, QKV(c), c->saved, scratch,
                               c->samples, T_(c), C_(c), NH(c), c->accumulate);
    cudaFreeAsync(scratch, s);
    return 0;
}
#endif

static pl_status attention_shape(const pl_op_def *def, const char *op,
                                 pl_tensor_t *const *in, const void *attrs,
                                 pl_op_layout *l) {
    (void)def;
    const pl_attention_attrs *a = attrs;
    pl_status st = pl_ops_check_float(op, in[0]);
    if (st) return st;
    int64_t q[PL_MAX_DIMS];
    char s[96];
    if (pl_tensor_shape(in[0], q) != 2 || q[1] % 3 != 0)
        return pl_error(PL_STATUS_SHAPE_MISMATCH, "%s: qkv '%s' %s must be [B, T, 3C]", op,
                        pl_tensor_name(in[0]), pl_tensor_shape_str(in[0], s, sizeof s));
    int64_t T = q[0], C = q[1] / 3;
    if (a->heads <= 0 || C % a->heads != 0)
        return pl_error(PL_STATUS_SHAPE_MISMATCH,
                        "%s: channels %lld not divisible by heads %lld", op, (long long)C,
                        (long long)a->heads);
    l->out_ndim = 2;
    l->out_shape[0] = T;
    l->out_shape[1] = C;
    l->has_saved = true;
    l->saved_name = "att";
    l->saved_ndim = 3;
    l->saved_shape[0] = a->heads;
    l->saved_shape[1] = T;
    l->saved_shape[2] = T;
    l->flops = 4.0 * (double)T * (double)T * (double)C;
    return PL_STATUS_OK;
}

const pl_op_def pl_op_attention = {
    .name = "attention",
    .api = "pl_attention",
    .n_inputs = 1,
    .input_names = {"qkv"},
    .attrs_size = sizeof(pl_attention_attrs),
    .shape = attention_shape,
    .forward = {.cpu = attention_forward_cpu, .cuda = PL_CUDA_KERNEL(attention_forward_gpu),
                .cpu_bf16 = attention_forward_bf16},
    .backward_input = {{.cpu = attention_backward_cpu,
                        .cuda = PL_CUDA_KERNEL(attention_backward_gpu),
                        .cpu_bf16 = attention_backward_bf16}},
    .backward_input_reads = PL_OP_READS_INPUTS | PL_OP_READS_SAVED,
    /* Its probabilities are H·T² per sample, against 3·T·C of input:
     * Megatron's selective recomputation re-runs exactly this. */
    .recompute = PL_OP_RECOMPUTE_SELECTIVE,
};

pl_tensor_t *pl_attention(pl_graph_t *g, pl_tensor_t *qkv, int64_t heads, const char *name) {
    pl_attention_attrs a = {heads};
    return pl_graph_op(g, &pl_op_attention, &qkv, 1, &a, name);
}
