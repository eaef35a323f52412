/* Elementwise ops: ReLU, GELU (tanh approximation) and the residual add:
 * CPU kernels, op definitions and builders. */
#include <math.h>
#include <stdint.h>

#include "ops/common.h"
#include "ops/fast_exp.h"
#include "ops/kernels.h"
#include "util/half.h"
#ifdef PL_WITH_CUDA
#include "ops/cuda/kernels.h"
#endif

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */

void pl_cpu_relu_forward(float *out, const float *inp, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

void pl_cpu_relu_backward(float *dinp, const float *inp, const float *dout, int64_t n,
                          int accumulate) {
    for (int64_t i = 0; i < n; i++) {
        float g = inp[i] > 0.0f ? dout[i] : 0.0f;
        dinp[i] = accumulate ? dinp[i] + g : g;
    }
}

/* GELU(x) = 0.5·x·(1 + tanh(u)), u = √(2/π)·(x + 0.044715·x³), computed as
 * x·s with s = 0.5·(1 + tanh(u)) = 1 / (1 + e^(−2u)): the same function, one
 * exponential instead of tanhf, and pl_fast_expf lets the loops vectorise
 * (libm's tanhf kept them scalar, ~20 ns an element). It is also better
 * conditioned for negative x, where 1 + tanh(u) cancels. pl_fast_expf caps
 * e^(−2u) at e^87, so s >= 1.6e−38 stays a normal float (no denormal slow
 * path); GELU there (x < −9.4) is below 1e−36 in magnitude either way. */
static inline float gelu_exp(float x) {
    float u = GELU_SCALE * (x + 0.044715f * x * x * x);
    return pl_fast_expf(-2.0f * u);
}

void pl_cpu_gelu_forward(float *out, const float *inp, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = x / (1.0f + gelu_exp(x));
    }
}

/* d/dx [x·s] = s + x·2·s·(1 − s)·du/dx  (0.5·sech²(u) = 2·s·(1 − s)), with
 * s·(1 − s) = e·s² (e = e^(−2u)), which does not cancel where s → 1. */
void pl_cpu_gelu_backward(float *dinp, const float *inp, const float *dout, int64_t n,
                          int accumulate) {
    for (int64_t i = 0; i < n; i++) {
        float x = inp[i];
        float e = gelu_exp(x);
        float s = 1.0f / (1.0f + e);
        float du = GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        /* (e·s)·s first: both factors <= 1, so no overflow for very
         * negative x (e up to e^87, 2·x·du up to ~1e5) and no denormals. */
        float g = (s + e * s * s * (2.0f * x * du)) * dout[i];
        dinp[i] = accumulate ? dinp[i] + g : g;
    }
}

void pl_cpu_add_forward(float *out, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void pl_cpu_add_backward(float *dinp, const float *dout, int64_t n, int accumulate) {
    for (int64_t i = 0; i < n; i++)
        dinp[i] = accumulate ? dinp[i] + dout[i] : dout[i];
}

/* ---------------------------------------------------------- the ops */

/* Elements of the tile: every operand has the output's shape. */
#define NUMEL(c) ((c)->samples * (c)->in_numel[0])
#define IN(c, i) ((const float *)(c)->in[i])

static int relu_forward_cpu(pl_op_call *c) {
    pl_cpu_relu_forward(c->out, IN(c, 0), NUMEL(c));
    return 0;
}
static int relu_backward_cpu(pl_op_call *c) {
    pl_cpu_relu_backward(c->dinput, IN(c, 0), c->dout, NUMEL(c), c->accumulate);
    return 0;
}
static int gelu_forward_cpu(pl_op_call *c) {
    pl_cpu_gelu_forward(c->out, IN(c, 0), NUMEL(c));
    return 0;
}
static int gelu_backward_cpu(pl_op_call *c) {
    pl_cpu_gelu_backward(c->dinput, IN(c, 0), c->dout, NUMEL(c), c->accumulate);
    return 0;
}
static int add_forward_cpu(pl_op_call *c) {
    pl_cpu_add_forward(c->out, IN(c, 0), IN(c, 1), NUMEL(c));
    return 0;
}
/* Both addends' gradients are dout. */
static int add_backward_cpu(pl_op_call *c) {
    pl_cpu_add_backward(c->dinput, c->dout, NUMEL(c), c->accumulate);
    return 0;
}

/* bf16 engines: the same fp32 loops, run over blocks of 1024 values
 * widened into buffers that stay in L1 and rounded back block by block.
 * The engine's widening path converts whole tiles into scratch first,
 * which for these memory-bound ops doubled their time (a bf16 GPT step's
 * GELU 2.4x, residual adds 1.9x their fp32 time, measured from its trace);
 * the values are bitwise the same (each element is widened, computed and
 * rounded as there). Any CPU: no bf16 arithmetic is involved. */
enum { BLOCK = 1024 };

/* out (+)= f(in...) over n elements: in[0..n_in) and, when accumulating,
 * out widened block by block, f on fp32, out rounded. */
typedef void (*block_fn)(float *out, const float *const *in, int64_t m, int accumulate);

static void run_blocks(block_fn f, int n_in, const uint16_t *const *in, uint16_t *out,
                       int64_t n, int accumulate) {
    float ib[2][BLOCK], ob[BLOCK];
    const float *ip[2] = {ib[0], ib[1]};
    for (int64_t i = 0; i < n; i += BLOCK) {
        int64_t m = n - i < BLOCK ? n - i : BLOCK;
        for (int k = 0; k < n_in; k++) pl_half_to_float(true, in[k] + i, ib[k], m);
        if (accumulate) pl_half_to_float(true, out + i, ob, m);
        f(ob, ip, m, accumulate);
        pl_half_from_float(true, ob, out + i, m);
    }
}

static void relu_f_block(float *o, const float *const *in, int64_t m, int acc) {
    (void)acc;
    pl_cpu_relu_forward(o, in[0], m);
}
static void relu_b_block(float *o, const float *const *in, int64_t m, int acc) {
    pl_cpu_relu_backward(o, in[0], in[1], m, acc);
}
static void gelu_f_block(float *o, const float *const *in, int64_t m, int acc) {
    (void)acc;
    pl_cpu_gelu_forward(o, in[0], m);
}
static void gelu_b_block(float *o, const float *const *in, int64_t m, int acc) {
    pl_cpu_gelu_backward(o, in[0], in[1], m, acc);
}
static void add_f_block(float *o, const float *const *in, int64_t m, int acc) {
    (void)acc;
    pl_cpu_add_forward(o, in[0], in[1], m);
}
static void add_b_block(float *o, const float *const *in, int64_t m, int acc) {
    pl_cpu_add_backward(o, in[0], m, acc);
}

#define U16(p) ((const uint16_t *)(const void *)(p))

/* Forward: every input and the output bf16. */
static int forward_bf16(pl_op_call *c, block_fn f) {
    for (int k = 0; k < c->n_inputs; k++)
        if (!c->bf16.in[k]) return PL_OP_DECLINED;
    if (!c->bf16.out) return PL_OP_DECLINED;
    const uint16_t *in[2] = {U16(c->in[0]), c->n_inputs > 1 ? U16(c->in[1]) : NULL};
    run_blocks(f, c->n_inputs, in, (uint16_t *)c->out, NUMEL(c), 0);
    return 0;
}
/* Backward of input `c->input`: reads the inputs (with_x) and dout. */
static int backward_bf16(pl_op_call *c, block_fn f, bool with_x) {
    if (!c->bf16.in[c->input] || !c->bf16.out || (with_x && !c->bf16.in[0]))
        return PL_OP_DECLINED;
    const uint16_t *in[2] = {with_x ? U16(c->in[0]) : U16(c->dout), U16(c->dout)};
    run_blocks(f, with_x ? 2 : 1, in, (uint16_t *)(void *)c->dinput, NUMEL(c), c->accumulate);
    return 0;
}

static int relu_forward_bf16(pl_op_call *c) { return forward_bf16(c, relu_f_block); }
static int relu_backward_bf16(pl_op_call *c) { return backward_bf16(c, relu_b_block, true); }
static int gelu_forward_bf16(pl_op_call *c) { return forward_bf16(c, gelu_f_block); }
static int gelu_backward_bf16(pl_op_call *c) { return backward_bf16(c, gelu_b_block, true); }
static int add_forward_bf16(pl_op_call *c) { return forward_bf16(c, add_f_block); }
static int add_backward_bf16(pl_op_call *c) { return backward_bf16(c, add_b_block, false); }

#ifdef PL_WITH_CUDA
static int relu_forward_gpu(pl_op_call *c) {
    pl_cuda_relu_forward(c->stream, c->out, IN(c, 0), NUMEL(c));
    return 0;
}
static int relu_backward_gpu(pl_op_call *c) {
    pl_cuda_relu_backward(c->stream, c->dinput, IN(c, 0), c->dout, NUMEL(c), c->accumulate);
    return 0;
}
static int gelu_forward_gpu(pl_op_call *c) {
    pl_cuda_gelu_forward(c->stream, c->out, IN(c, 0), NUMEL(c));
    return 0;
}
static int gelu_backward_gpu(pl_op_call *c) {
    pl_cuda_gelu_backward(c->stream, c->dinput, IN(c, 0), c->dout, NUMEL(c), c->accumulate);
    return 0;
}
static int add_forward_gpu(pl_op_call *c) {
    pl_cuda_add_forward(c->stream, c->out, IN(c, 0), IN(c, 1), NUMEL(c));
    return 0;
}
static int add_backward_gpu(pl_op_call *c) {
    pl_cuda_add_backward(c->stream, c->dinput, c->dout, NUMEL(c), c->accumulate);
    return 0;
}
#endif

/* Every operand a float activation of one shape, the output that shape:
 * the shape function of every elementwise op (ops/common.h). */
pl_status pl_ops_shape_elementwise(const pl_op_def *def, const char *op,
                                   pl_tensor_t *const *in, const void *attrs,
                                   pl_op_layout *l) {
    (void)attrs;
    int64_t a[PL_MAX_DIMS], b[PL_MAX_DIMS];
    int na = pl_tensor_shape(in[0], a);
    for (int i = 0; i < def->n_inputs; i++) {
        pl_status st = pl_ops_check_float(op, in[i]);
        if (st) return st;
        int nb = pl_tensor_shape(in[i], b);
        bool same = na == nb;
        for (int d = 0; same && d < na; d++) same = a[d] == b[d];
        if (!same) {
            char sa[96], sb[96];
            return pl_error(PL_STATUS_SHAPE_MISMATCH,
                            "%s: shapes %s of '%s' and %s of '%s' differ", op,
                            pl_tensor_shape_str(in[0], sa, sizeof sa), pl_tensor_name(in[0]),
                            pl_tensor_shape_str(in[i], sb, sizeof sb), pl_tensor_name(in[i]));
        }
    }
    pl_ops_same_shape(l, in[0]);
    l->flops = 5.0 * (double)pl_tensor_numel(in[0]); /* a few FLOPs per element */
    return PL_STATUS_OK;
}

const pl_op_def pl_op_relu = {
    .name = "relu",
    .api = "pl_relu",
    .n_inputs = 1,
    .input_names = {"x"},
    .shape = pl_ops_shape_elementwise,
    .forward = {.cpu = relu_forward_cpu, .cuda = PL_CUDA_KERNEL(relu_forward_gpu),
                .cpu_bf16 = relu_forward_bf16},
    .backward_input = {{.cpu = relu_backward_cpu, .cuda = PL_CUDA_KERNEL(relu_backward_gpu),
                        .cpu_bf16 = relu_backward_bf16}},
    .backward_input_reads = PL_OP_READS_INPUTS,
};

const pl_op_def pl_op_gelu = {
    .name = "gelu",
    .api = "pl_gelu",
    .n_inputs = 1,
    .input_names = {"x"},
    .shape = pl_ops_shape_elementwise,
    .forward = {.cpu = gelu_forward_cpu, .cuda = PL_CUDA_KERNEL(gelu_forward_gpu),
                .cpu_bf16 = gelu_forward_bf16},
    .backward_input = {{.cpu = gelu_backward_cpu, .cuda = PL_CUDA_KERNEL(gelu_backward_gpu),
                        .cpu_bf16 = gelu_backward_bf16}},
    .backward_input_reads = PL_OP_READS_INPUTS,
};

pl_tensor_t *pl_relu(pl_graph_t *g, pl_tensor_t *x) {
    return pl_graph_op(g, &pl_op_relu, &x, 1, NULL, NULL);
}
pl_tensor_t *pl_gelu(pl_graph_t *g, pl_tensor_t *x) {
    return pl_graph_op(g, &pl_op_gelu, &x, 1, NULL, NULL);
}

const pl_op_def pl_op_add = {
    .name = "add",
    .api = "pl_add",
    .n_inputs = 2,
    .input_names = {"a", "b"},
    .shape = pl_ops_shape_elementwise,
    .forward = {.cpu = add_forward_cpu, .cuda = PL_CUDA_KERNEL(add_forward_gpu),
                .cpu_bf16 = add_forward_bf16},
    .backward_input = {{.cpu = add_backward_cpu, .cuda = PL_CUDA_KERNEL(add_backward_gpu),
                        .cpu_bf16 = add_backward_bf16},
                       {.cpu = add_backward_cpu, .cuda = PL_CUDA_KERNEL(add_backward_gpu),
                        .cpu_bf16 = add_backward_bf16}},
};

pl_tensor_t *pl_add(pl_graph_t *g, pl_tensor_t *a, pl_tensor_t *b, const char *name) {
    pl_tensor_t *in[2] = {a, b};
    return pl_graph_op(g, &pl_op_add, in, 2, NULL, name);
}
