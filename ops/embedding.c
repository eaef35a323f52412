/* Token + position embedding (GPT-2's encoder): CPU kernels, the op
 * definition and its builder. Token ids are data: ids outside [0, V) are
 * counted by the forward kernel and fail the step with a message. */
#include <string.h>

#include "ops/common.h"
#include "ops/kernels.h"
#ifdef PL_WITH_CUDA
#include "ops/cuda/kernels.h"
#endif

void pl_cpu_embedding_forward(float *out, const int32_t *tokens, const float *wte,
                              const float *wpe, int64_t B, int64_t T, int64_t C,
                              int64_t V, int64_t *bad_tokens) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            float *o = out + (b * T + t) * C;
            int32_t tok = tokens[b * T + t];
            const float *p = wpe + t * C;
            if (tok < 0 || tok >= V) {
                (*bad_tokens)++;
                memset(o, 0, C * sizeof *o);
                continue;
            }
            const float *e = wte + (int64_t)tok * C;
            for (int64_t c = 0; c < C; c++) o[c] = e[c] + p[c];
        }
}

void pl_cpu_embedding_backward_weight(float *dwte, float *dwpe, const float *dout,
                                      const int32_t *tokens, int64_t B, int64_t T,
                                      int64_t C, int64_t V, int accumulate_wte,
                                      int accumulate_wpe) {
    if (!accumulate_wte) memset(dwte, 0, V * C * sizeof *dwte);
    if (!accumulate_wpe) memset(dwpe, 0, T * C * sizeof *dwpe);
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            const float *d = dout + (b * T + t) * C;
            int32_t tok = tokens[b * T + t];
            /* The forward zeroes a bad token's whole row (wpe included), so
             * that row has no gradient into either table. */
            if (tok < 0 || tok >= V) continue;
            float *p = dwpe + t * C;
            for (int64_t c = 0; c < C; c++) p[c] += d[c];
            float *e = dwte + (int64_t)tok * C;
            for (int64_t c = 0; c < C; c++) e[c] += d[c];
        }
}

/* ---------------------------------------------------------- the op */

/* Operands: tokens [T] (int32), wte [V, C], wpe [T, C]. */
#define TOKENS(c) ((const int32_t *)(c)->in[0])
#define T_(c) ((c)->param_shape[1][0])
#define C_(c) ((c)->param_shape[1][1])
#define V_(c) ((c)->param_shape[0][0])

static int embedding_forward_cpu(pl_op_call *c) {
    int64_t bad = 0;
    pl_cpu_embedding_forward(c->out, TOKENS(c), c->param[0], c->param[1], c->samples, T_(c), C_(c),
                             V_(c), &bad);
    *c->invalid = (double)bad;
    return 0;
}
static int embedding_backward_weight_cpu(pl_op_call *c) {
    pl_cpu_embedding_backward_weight(c->dparam[0], c->dparam[1], c->dout, TOKENS(c), c->samples,
                                     T_(c), C_(c), V_(c), c->accumulate_param[0],
                                     c->accumulate_param[1]);
    return 0;
}

#ifdef PL_WITH_CUDA
static int embedding_forward_gpu(pl_op_call *c) {
    pl_cuda_embedding_forward(c->stream, c->out, c->invalid, TOKENS(c), c->param[0],
                              c->param[1], c->samples, T_(c), C_(c), V_(c));
    return 0;
}
static int embedding_backward_weight_gpu(pl_op_call *c) {
    pl_cuda_embedding_backward_weight(c->stream, c->dparam[0], c->dparam[1], c->dout,
                                      TOKENS(c), c->samples, T_(c), C_(c), V_(c),
                                      c->accumulate_param[0], c->accumulate_param[1]);
    return 0;
}
#endif

static pl_status embedding_shape(const pl_op_def *def, const char *op,
                                 pl_tensor_t *const *in, const void *attrs,
                                 pl_op_layout *l) {
    (void)def;
    const pl_embedding_attrs *a = attrs;
    int64_t t[PL_MAX_DIMS];
    char s[96];
    if (pl_tensor_is_param(in[0]) || pl_tensor_dtype(in[0]) != PL_DTYPE_I32 ||
        pl_tensor_shape(in[0], t) != 1)
        return pl_error(PL_STATUS_SHAPE_MISMATCH,
                        "%s: tokens '%s' %s must be an int32 input of shape [B, T]", op,
                        pl_tensor_name(in[0]), pl_tensor_shape_str(in[0], s, sizeof s));
    if (a->vocab <= 0 || a->channels <= 0 || a->vocab > INT32_MAX)
        return pl_error(PL_STATUS_INVALID_ARGUMENT,
                        "%s: vocab %lld and channels %lld must be > 0", op,
                        (long long)a->vocab, (long long)a->channels);
    l->params[0] = (pl_op_param_decl){"wte", 2, {a->vocab, a->channels}, PL_INIT_NORMAL,
                                      0.02f};
    l->params[1] = (pl_op_param_decl){"wpe", 2, {t[0], a->channels}, PL_INIT_NORMAL, 0.02f};
    l->n_params = 2;
    l->out_ndim = 2;
    l->out_shape[0] = t[0];
    l->out_shape[1] = a->channels;
    l->flops = 5.0 * (double)t[0];
    return PL_STATUS_OK;
}

static void explain_tokens(const char *op, pl_tensor_t *const *in, const void *attrs,
                           double count, char *buf, size_t size) {
    const pl_embedding_attrs *a = attrs;
    snprintf(buf, size, "%s: %.0f tokens of '%s' outside [0, %lld)", op, count,
             pl_tensor_name(in[0]), (long long)a->vocab);
}

const pl_op_def pl_op_embedding = {
    .name = "embedding",
    .api = "pl_embedding",
    .n_inputs = 1,
    .input_names = {"tokens"},
    .attrs_size = sizeof(pl_embedding_attrs),
    .shape = embedding_shape,
    .forward = {.cpu = embedding_forward_cpu, .cuda = PL_CUDA_KERNEL(embedding_forward_gpu)},
    .backward_weight = {.cpu = embedding_backward_weight_cpu,
                        .cuda = PL_CUDA_KERNEL(embedding_backward_weight_gpu)},
    .backward_weight_reads = PL_OP_READS_INPUTS,
    .counts_invalid = true,
    .explain_invalid = explain_tokens,
};

pl_tensor_t *pl_embedding(pl_graph_t *g, pl_tensor_t *tokens, int64_t vocab,
                          int64_t channels, const char *name) {
    pl_embedding_attrs a = {vocab, channels};
    return pl_graph_op(g, &pl_op_embedding, &tokens, 1, &a, name);
}
