/* Dropout, as torch.nn.Dropout: CPU kernels, CUDA adapters, the op
 * definition and its builder (pleiades/ops.h).
 *
 * In a training pass y = x · m with m = 1/(1 − p) for kept elements and 0
 * for dropped ones, each element kept with probability 1 − p; in an
 * evaluation (forward-only) pass y = x. Which elements are kept is a pure
 * function of the call's seed, the element's global sample index and its
 * index in the sample (ops/dropout_mask.h), so:
 *   - the backward kernel recomputes the forward's mask from the same seed
 *     (the engine gives both tasks of one op and pass the same one): no
 *     saved mask, and the backward task reads only dy;
 *   - masks do not depend on the tiling, the pipeline schedule or the
 *     device: CPU and CUDA kernels keep the same elements, bit for bit. */
#include <math.h>
#include <string.h>

#include "ops/common.h"
#include "ops/dropout_mask.h"
#include "ops/kernels.h"
#ifdef PL_WITH_CUDA
#include "ops/cuda/kernels.h"
#endif

/* out (+)= in · m over `samples` samples of `numel` elements, the first
 * being global sample `offset`: the forward pass (in = x, out = y) and the
 * backward one (in = dy, out = dx) alike, since dropout is linear in x.
 * Dropped elements are x · 0 rather than a stored 0, as PyTorch's x · mask
 * (a NaN or inf input stays visible). The accumulating form uses fmaf,
 * which rounds once on every compiler and on the GPU (fmaf there too), so
 * CPU and CUDA gradients agree bit for bit, not just their masks. */
static void dropout_masked(float *out, const float *in, int64_t samples, int64_t numel,
                           uint64_t seed, int64_t offset, float p, bool accumulate) {
    const uint64_t threshold = pl_dropout_threshold(p);
    const float scale = pl_dropout_scale(p);
    for (int64_t s = 0; s < samples; s++) {
        const uint64_t state = pl_dropout_sample_state(seed, offset + s);
        const float *x = in + s * numel;
        float *y = out + s * numel;
        for (int64_t j = 0; j < numel; j++) {
            float m = pl_dropout_keep(state, j, threshold) ? scale : 0.0f;
            y[j] = accumulate ? fmaf(x[j], m, y[j]) : x[j] * m;
        }
    }
}

/* The identity (evaluation, or p = 0): out (+)= in. */
static void dropout_identity(float *out, const float *in, int64_t n, bool accumulate) {
    if (!accumulate) {
        if (out != in) memcpy(out, in, (size_t)n * sizeof *out);
        return;
    }
    for (int64_t i = 0; i < n; i++) out[i] += in[i];
}

/* Forward and backward alike, as pl_cuda_dropout (ops/kernels.h). */
void pl_cpu_dropout(float *out, const float *inp, int64_t samples, int64_t numel, float p,
                    uint64_t seed, int64_t sample_offset, int mask, int accumulate) {
    if (mask)
        dropout_masked(out, inp, samples, numel, seed, sample_offset, p, accumulate);
    else
        dropout_identity(out, inp, samples * numel, accumulate);
}

/* ---------------------------------------------------------- the op */

#define P(c) (((const pl_dropout_attrs *)(c)->attrs)->p)
#define X(c) ((const float *)(c)->in[0])
/* Only a training pass with p > 0 masks; p = 0 would keep everything and
 * multiply by 1, so it takes the identity's copy instead. */
#define MASKS(c) ((c)->training && P(c) > 0.0f)

static int dropout_forward_cpu(pl_op_call *c) {
    pl_cpu_dropout(c->out, X(c), c->samples, c->in_numel[0], P(c), c->seed, c->sample_offset,
                   MASKS(c), 0);
    return 0;
}

/* dx (+)= dy · m: the forward's mask, recomputed from the call's seed. */
static int dropout_backward_cpu(pl_op_call *c) {
    pl_cpu_dropout(c->dinput, c->dout, c->samples, c->in_numel[0], P(c), c->seed,
                   c->sample_offset, MASKS(c), c->accumulate);
    return 0;
}

#ifdef PL_WITH_CUDA
static int dropout_forward_gpu(pl_op_call *c) {
    pl_cuda_dropout(c->stream, c->out, X(c), c->samples, c->in_numel[0], P(c), c->seed,
                    c->sample_offset, MASKS(c), 0);
    return 0;
}
static int dropout_backward_gpu(pl_op_call *c) {
    pl_cuda_dropout(c->stream, c->dinput, c->dout, c->samples, c->in_numel[0], P(c),
                    c->seed, c->sample_offset, MASKS(c), c->accumulate);
    return 0;
}
#endif

/* An elementwise op whose p must be a probability it can divide by 1 − p
 * with: [0, 1). The negated test also refuses NaN. */
static pl_status dropout_shape(const pl_op_def *def, const char *op,
                               pl_tensor_t *const *in, const void *attrs,
                               pl_op_layout *l) {
    const float p = ((const pl_dropout_attrs *)attrs)->p;
    if (!(p >= 0.0f && p < 1.0f))
        return pl_error(PL_STATUS_INVALID_ARGUMENT,
                        "%s: p = %g must be in [0, 1) (the probability of dropping an "
                        "element; 0 is the identity)", op, (double)p);
    pl_status st = pl_ops_shape_elementwise(def, op, in, attrs, l);
    if (st) return st;
    /* One float multiply per element; the hash is integer work. */
    l->flops = 1.0 * (double)pl_tensor_numel(in[0]);
    return PL_STATUS_OK;
}

const pl_op_def pl_op_dropout = {
    .name = "dropout",
    .api = "pl_dropout",
    .n_inputs = 1,
    .input_names = {"x"},
    .attrs_size = sizeof(pl_dropout_attrs),
    .shape = dropout_shape,
    .forward = {.cpu = dropout_forward_cpu, .cuda = PL_CUDA_KERNEL(dropout_forward_gpu)},
    .backward_input = {{.cpu = dropout_backward_cpu, .cuda = PL_CUDA_KERNEL(dropout_backward_gpu)}},
    .backward_input_reads = 0, /* dy alone: the mask is recomputed */
};

pl_tensor_t *pl_dropout(pl_graph_t *g, pl_tensor_t *x, float p, const char *name) {
    const pl_dropout_attrs a = {p};
    return pl_graph_op(g, &pl_op_dropout, &x, 1, &a, name);
}
