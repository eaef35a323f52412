/* Backend comparison in the spirit of ggml's test-backend-ops, through the
 * public API: CPU-only runtimes against CUDA runtimes (whose host-only CPU
 * worker takes no task a GPU can run), in two parts.
 *
 * 1. Op by op: every line of the op table (op_table.c: each built-in op on
 *    small and large shapes) is built into a graph of its own, run forward
 *    and backward once on each backend (4 samples in 2 tiles), and its
 *    three passes are compared:
 *      F  the op's output (the graph's output; a loss's value; a metric's),
 *      B  the gradient of each float input with a gradient kernel,
 *      W  the gradient of each parameter (created or shared);
 *    each float input x reaches the op through a "feed" op, x + o with a
 *    parameter o of x's shape (zeros), whose gradient, the op's input
 *    gradient summed over the batch, the engine hands out
 *    (pl_engine_get_grad) where it has none for x itself; the feed of the
 *    first input also creates the op's shared parameters. An activation's
 *    loss is Σ y ⊙ r (a "dot" op) with a fixed random r, so both backends
 *    get the same output gradient. Only the op under test has CUDA
 *    kernels: the feed and dot ops run on the CPU worker of both runs, so
 *    a difference is the op's. A mismatch names the op, its shapes and the
 *    pass.
 * 2. Whole models train for a few steps on each backend, so that the CUDA
 *    optimizer, clipping and loss-scaling tasks and the 16-bit paths run:
 *   mlp:   ReLU, GELU, a residual add, a mean loss; AdamW with inf-norm
 *          clipping;
 *   gpt:   embedding, LayerNorm, attention, linear layers, the tied head,
 *          cross-entropy; AdamW;
 *   extra: RMSNorm, SiLU, mul, sub, scale, dropout, softmax, batched
 *          matmul with and without transposes, MSE loss; SGD with momentum
 *          and weight decay, 2-norm clipping and the dynamic loss scaler;
 *   gpt_bf16, gpt_fp16: the gpt in 16-bit storage (in bf16 the linear
 *          layers' and the LM head's cuda_bf16 kernels, cublasGemmEx;
 *          the trampoline that widens the other operands on the GPU,
 *          the 16-bit AdamW with fp32 master
 *          weights, the tied embedding's 16-bit gradient sum; fp16 with
 *          the loss scaler's 16-bit overflow check) and 2-norm clipping
 *          (the 16-bit partial norms).
 * Values are compared with a normalised error
 *   max|cpu − gpu| / max(max|cpu|, 1e-6)
 * below 1e-3 (fp32 with different summation orders, compounded over the
 * steps), or HALF_TOL for 16-bit storage, where each op's output is
 * rounded to 8 (bf16) or 11 (fp16) significant bits: an fp32 difference
 * of one ulp can round to values one 16-bit step apart (0.4 % in bf16),
 * and that propagates through the steps. Two valid bf16 implementations
 * on one CPU (oneDNN's bf16 products against widened sgemms,
 * PLEIADES_BF16_GEMM=0) differ here by 2.1e-5 in the losses and 2.5e-3 in
 * the parameters (2026-11-27): HALF_TOL leaves a factor 8 above that.
 *
 * Where StarPU has no CUDA support (Debian's CPU-only StarPU, CI) or finds
 * no GPU, the test says so and exits 77, which CTest reports as skipped.
 * With --cpu, part 1 runs on CPU-only runtimes on both sides (1 tile
 * against 2), so that a machine without a GPU still proves that the
 * harness builds every line's graph and reads every pass back (CTest
 * backend_ops_cpu). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_table.h"
#include "pleiades.h"
#include "test_util.h"

#define TOL 1e-3
#define HALF_TOL 2e-2

/* ---------------------------------------------------- 1. op by op */

enum { OB = 4 }; /* samples per batch of the op runs */

/* feed: y = x + o over x's per-sample shape, o a parameter of zeros; it
 * also creates the tested op's shared parameters (uniform in [-1, 1), as
 * pl_gradcheck makes them), whose gradient it leaves to their other use. */
typedef struct feed_attrs {
    int n_shared;
    int ndim[PL_OP_MAX_PARAMS];
    int64_t shape[PL_OP_MAX_PARAMS][PL_MAX_DIMS];
} feed_attrs;

static pl_status feed_shape(const pl_op_def *def, const char *op, pl_tensor_t *const *in,
                            const void *attrs, pl_op_layout *l) {
    (void)def, (void)op;
    static const char *const shared[] = {"shared0", "shared1", "shared2"};
    const feed_attrs *a = attrs;
    l->out_ndim = pl_tensor_shape(in[0], l->out_shape);
    l->params[0] = (pl_op_param_decl){"offset", 1, {pl_tensor_numel(in[0])}, PL_INIT_ZEROS, 0};
    for (int s = 0; s < a->n_shared; s++) {
        l->params[1 + s] = (pl_op_param_decl){shared[s], a->ndim[s], {0}, PL_INIT_UNIFORM, 1};
        memcpy(l->params[1 + s].shape, a->shape[s], sizeof a->shape[s]);
    }
    l->n_params = 1 + a->n_shared;
    l->flops = (double)pl_tensor_numel(in[0]);
    return PL_STATUS_OK;
}
static int feed_forward(pl_op_call *c) {
    const float *x = c->in[0], *o = c->param[0];
    float *y = c->out;
    const int64_t n = c->in_numel[0];
    for (int64_t s = 0; s < c->samples; s++)
        for (int64_t j = 0; j < n; j++) y[s * n + j] = x[s * n + j] + o[j];
    return 0;
}
static int feed_backward_weight(pl_op_call *c) {
    const int64_t n = c->in_numel[0];
    for (int p = 0; p < c->n_params; p++)
        if (!c->accumulate_param[p])
            memset(c->dparam[p], 0, (size_t)c->param_numel[p] * sizeof(float));
    for (int64_t s = 0; s < c->samples; s++)
        for (int64_t j = 0; j < n; j++) c->dparam[0][j] += c->dout[s * n + j];
    return 0;
}
static const pl_op_def FEED = {
    .name = "feed",
    .n_inputs = 1,
    .input_names = {"x"},
    .attrs_size = sizeof(feed_attrs),
    .shape = feed_shape,
    .forward = {.cpu = feed_forward},
    .backward_weight = {.cpu = feed_backward_weight},
};

/* dot: the scalar Σ y ⊙ r, so that d loss / dy = r / batch exactly. */
static pl_status dot_shape(const pl_op_def *def, const char *op, pl_tensor_t *const *in,
                           const void *attrs, pl_op_layout *l) {
    (void)def, (void)op, (void)attrs;
    l->flops = 2.0 * (double)pl_tensor_numel(in[0]);
    return PL_STATUS_OK;
}
static int dot_forward(pl_op_call *c) {
    const float *y = c->in[0], *r = c->in[1];
    double *sum = c->out, s = 0.0;
    for (int64_t i = 0; i < c->samples * c->in_numel[0]; i++) s += (double)y[i] * r[i];
    sum[0] = s;
    sum[1] = 0.0;
    return 0;
}
static int dot_backward(pl_op_call *c) {
    const float *r = c->in[1];
    for (int64_t i = 0; i < c->samples * c->in_numel[0]; i++)
        c->dinput[i] = (c->accumulate ? c->dinput[i] : 0.0f) + r[i] * c->scale;
    return 0;
}
static const pl_op_def DOT = {
    .name = "dot",
    .n_inputs = 2,
    .input_names = {"y", "r"},
    .shape = dot_shape,
    .output = PL_OP_OUTPUT_SCALAR,
    .forward = {.cpu = dot_forward},
    .backward_input = {{.cpu = dot_backward}},
    .backward_input_reads = PL_OP_READS_INPUTS,
};

/* What one run of a line gives back. */
typedef struct op_run {
    bool ok;
    double scalar;    /* F of a loss or metric */
    float *out;       /* F of an activation: OB × out_n */
    int64_t out_n;
    float *grad[PL_OP_MAX_INPUTS + PL_OP_MAX_PARAMS]; /* B per input, then W per param */
    int64_t grad_n[PL_OP_MAX_INPUTS + PL_OP_MAX_PARAMS];
    char grad_name[PL_OP_MAX_INPUTS + PL_OP_MAX_PARAMS][32]; /* "dx", "dweight" */
    char grad_pass[PL_OP_MAX_INPUTS + PL_OP_MAX_PARAMS];
    int n_grads;
} op_run;

static void op_run_free(op_run *r) {
    free(r->out);
    for (int i = 0; i < r->n_grads; i++) free(r->grad[i]);
}

static float uniform(uint64_t *s) {
    return (float)((double)(tu_splitmix64(s) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

static void run_line(pl_runtime_t *rt, const op_case *c, int tiles, op_run *out) {
    const pl_op_def *def = c->def;
    const int n_in = def->n_inputs;
    memset(out, 0, sizeof *out);
    pl_graph_t *g = pl_graph_new(7);
    pl_tensor_t *x[PL_OP_MAX_INPUTS], *ops[PL_OP_MAX_INPUTS + PL_OP_MAX_PARAMS];
    pl_tensor_t *feeds[PL_OP_MAX_INPUTS] = {0};
    const void *data[PL_OP_MAX_INPUTS + 1] = {0};
    uint64_t seed = 99;
    bool ok = g != NULL;
    for (int i = 0; ok && i < n_in; i++) {
        const op_operand *o = &c->in[i];
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        ok = (x[i] = pl_graph_input(g, name, o->dtype, o->ndim, o->shape)) != NULL;
        if (!ok) break;
        const int64_t n = OB * pl_tensor_numel(x[i]);
        if (o->dtype == PL_DTYPE_I32) {
            const uint64_t range = c->int_range ? (uint64_t)c->int_range : 2;
            int32_t *v = tu_xmalloc((size_t)n * sizeof *v);
            for (int64_t j = 0; j < n; j++) v[j] = (int32_t)(tu_splitmix64(&seed) % range);
            data[i] = v;
            ops[i] = x[i];
            continue;
        }
        float *v = tu_xmalloc((size_t)n * sizeof *v);
        for (int64_t j = 0; j < n; j++) v[j] = uniform(&seed);
        data[i] = v;
        feed_attrs fa = {0};
        if (i == 0) {
            fa.n_shared = def->n_shared_params;
            for (int s = 0; s < fa.n_shared; s++) {
                fa.ndim[s] = c->in[n_in + s].ndim;
                memcpy(fa.shape[s], c->in[n_in + s].shape, sizeof fa.shape[s]);
            }
        }
        snprintf(name, sizeof name, "in%d", i);
        ok = (ops[i] = feeds[i] = pl_graph_op(g, &FEED, &x[i], 1, &fa, name)) != NULL;
    }
    for (int s = 0; ok && s < def->n_shared_params; s++) {
        char name[32];
        snprintf(name, sizeof name, "in0.shared%d", s);
        ok = (ops[n_in + s] = pl_graph_find(g, name)) != NULL;
    }
    pl_tensor_t *y = ok ? pl_graph_op(g, def, ops, op_case_operands(c), c->attrs, "op") : NULL;
    ok = y != NULL;
    const bool scalar = def->output == PL_OP_OUTPUT_SCALAR;
    bool differentiable = def->backward_weight.cpu != NULL;
    for (int i = 0; i < n_in; i++) differentiable |= def->backward_input[i].cpu != NULL;
    /* The loss: an activation's Σ y ⊙ r; a differentiable scalar itself;
     * beside a metric, Σ (fed input 0) ⊙ r, so that the graph trains. */
    pl_tensor_t *loss = NULL;
    if (ok && scalar && differentiable) {
        loss = y;
    } else if (ok) {
        pl_tensor_t *dotted = scalar ? feeds[0] : y;
        int64_t shape[PL_MAX_DIMS];
        int nd = dotted ? pl_tensor_shape(dotted, shape) : 0;
        pl_tensor_t *r = dotted ? pl_graph_input(g, "r", PL_DTYPE_F32, nd, shape) : NULL;
        pl_tensor_t *pair[2] = {dotted, r};
        loss = r ? pl_graph_op(g, &DOT, pair, 2, NULL, "loss") : NULL;
        if (r) {
            const int64_t n = OB * pl_tensor_numel(r);
            float *v = tu_xmalloc((size_t)n * sizeof *v);
            for (int64_t j = 0; j < n; j++) v[j] = uniform(&seed);
            data[n_in] = v;
        }
    }
    ok = loss && pl_graph_set_loss(g, loss) == PL_STATUS_OK &&
         (scalar || pl_graph_set_output(g, y) == PL_STATUS_OK);
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = OB;
    eo.tiles = tiles;
    pl_engine_t *e = ok ? pl_engine_new(rt, g, &eo) : NULL;
    pl_batch b = {.size = OB, .data = data};
    pl_step_options so = {.return_loss = true, .return_output_label = !scalar};
    pl_step_result res = {0};
    ok = e && pl_engine_forward_backward(e, &b, &so, &res) == PL_STATUS_OK;
    if (ok && scalar) {
        out->scalar = differentiable ? res.loss : res.metrics[0];
    } else if (ok) {
        out->out_n = OB * pl_tensor_numel(y);
        out->out = tu_xmalloc((size_t)out->out_n * sizeof *out->out);
        memcpy(out->out, res.output, (size_t)out->out_n * sizeof *out->out);
    }
    /* B: each fed input's offset; W: the op's parameters, created and shared. */
    for (int i = 0; ok && differentiable && i < n_in; i++)
        if (feeds[i] && def->backward_input[i].cpu) {
            char name[32];
            snprintf(name, sizeof name, "in%d.offset", i);
            const pl_tensor_t *p = pl_graph_find(g, name);
            const int k = out->n_grads++;
            out->grad_pass[k] = 'B';
            snprintf(out->grad_name[k], sizeof out->grad_name[k], "d%s", def->input_names[i]);
            ok = p != NULL;
            if (ok) {
                out->grad_n[k] = pl_tensor_numel(p);
                out->grad[k] = tu_xmalloc((size_t)out->grad_n[k] * sizeof(float));
                ok = pl_engine_get_grad(e, p, out->grad[k], (size_t)out->grad_n[k]) ==
                     PL_STATUS_OK;
            }
        }
    for (int i = 0; ok && i < def->n_shared_params; i++) {
        int k = out->n_grads++;
        out->grad_pass[k] = 'W';
        snprintf(out->grad_name[k], sizeof out->grad_name[k], "d%s",
                 def->input_names[n_in + i] ? def->input_names[n_in + i] : "shared");
        out->grad_n[k] = pl_tensor_numel(ops[n_in + i]);
        out->grad[k] = tu_xmalloc((size_t)out->grad_n[k] * sizeof(float));
        ok = pl_engine_get_grad(e, ops[n_in + i], out->grad[k], (size_t)out->grad_n[k]) ==
             PL_STATUS_OK;
    }
    for (int p = 0; ok && p < pl_graph_num_params(g); p++) {
        const pl_tensor_t *t = pl_graph_param(g, p);
        if (strncmp(pl_tensor_name(t), "op.", 3) != 0) continue; /* feeds' */
        int k = out->n_grads++;
        out->grad_pass[k] = 'W';
        snprintf(out->grad_name[k], sizeof out->grad_name[k], "d%s", pl_tensor_name(t) + 3);
        out->grad_n[k] = pl_tensor_numel(t);
        out->grad[k] = tu_xmalloc((size_t)out->grad_n[k] * sizeof(float));
        ok = pl_engine_get_grad(e, t, out->grad[k], (size_t)out->grad_n[k]) == PL_STATUS_OK;
    }
    if (!ok) /* the pass whose value could not be had */
        op_case_fail(c, out->n_grads ? out->grad_pass[out->n_grads - 1] : 'F',
                     "the %s run (%d tiles) failed: %s",
                     pl_runtime_cuda_workers(rt) > 0 ? "CUDA" : "CPU", tiles, pl_last_error());
    out->ok = ok;
    pl_engine_free(e);
    pl_graph_free(g);
    for (int i = 0; i <= n_in; i++) free((void *)data[i]);
}

/* A NaN on either side is an infinite error (fmax would skip it). */
static double normalised_error(const float *a, const float *b, size_t n) {
    double diff = 0, scale = 1e-6;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]);
        if (!(d <= diff)) diff = isnan(d) ? INFINITY : d;
        scale = fmax(scale, fabs((double)a[i]));
    }
    return diff / scale;
}

static bool all_zero(const float *a, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (a[i] != 0.0f) return false;
    return true;
}

/* One pass of one line: within TOL, and not vacuous (an all-zero gradient
 * on both sides would hide a harness that reads nothing back). */
static int compare_pass(const op_case *c, char pass, const char *label, const float *ref,
                        const float *got, int64_t n, const char *sides) {
    const double err = normalised_error(ref, got, (size_t)n);
    char what[160];
    if (!(err < TOL)) {
        op_case_fail(c, pass, "%s: %s differ by %.3g (normalised; tolerance %g)", label,
                     sides, err, TOL);
        return 1;
    }
    if (pass != 'F' && all_zero(ref, n)) {
        op_case_fail(c, pass, "%s: zero on both sides (nothing was compared)", label);
        return 1;
    }
    printf("ok   %-56s %c %-8s %.3g\n", op_case_describe(c, what, sizeof what), pass, label,
           err);
    return 0;
}

/* Every line on `ref_device` with `ref_tiles` tiles, then on `device` with
 * `tiles`; returns the failures. */
static int compare_table(pl_device ref_device, int ref_tiles, pl_device device, int tiles) {
    op_run *ref = calloc(op_table_size, sizeof *ref), *got = calloc(op_table_size, sizeof *got);
    const pl_device devices[2] = {ref_device, device};
    const int tile_counts[2] = {ref_tiles, tiles};
    op_run *runs[2] = {ref, got};
    const char *sides = device == PL_DEVICE_CUDA ? "CPU and CUDA" : "1 and 2 tiles";
    int failures = 0;
    for (int side = 0; side < 2; side++) {
        pl_runtime_options ro = pl_runtime_options_default();
        ro.device = devices[side];
        ro.cpu_workers = devices[side] == PL_DEVICE_CUDA ? 1 : 2;
        pl_runtime_t *rt = pl_runtime_new(&ro);
        if (!rt) {
            printf("FAIL: pl_runtime_new: %s\n", pl_last_error());
            free(ref), free(got);
            return 1;
        }
        for (size_t k = 0; k < op_table_size; k++)
            run_line(rt, &op_table[k], tile_counts[side], &runs[side][k]);
        pl_runtime_free(rt);
    }
    for (size_t k = 0; k < op_table_size; k++) {
        const op_case *c = &op_table[k];
        const op_run *a = &ref[k], *b = &got[k];
        if (!a->ok || !b->ok) {
            failures++; /* run_line said why, naming the line */
            continue;
        }
        if (a->out) {
            failures += compare_pass(c, 'F', "out", a->out, b->out, a->out_n, sides);
        } else {
            const float fa = (float)a->scalar, fb = (float)b->scalar;
            failures += compare_pass(c, 'F', "value", &fa, &fb, 1, sides);
        }
        for (int i = 0; i < a->n_grads; i++)
            failures += compare_pass(c, a->grad_pass[i], a->grad_name[i], a->grad[i],
                                     b->grad[i], a->grad_n[i], sides);
    }
    for (size_t k = 0; k < op_table_size; k++) op_run_free(&ref[k]), op_run_free(&got[k]);
    free(ref);
    free(got);
    return failures;
}

/* --------------------------------------------------- 2. whole models */

enum { STEPS = 3, B = 4, V = 32, T = 8, IN = 16, ROWS = 4 };
enum model { MLP, GPT, EXTRA, GPT_BF16, GPT_FP16, N_MODELS };
static const char *const MODEL_NAMES[N_MODELS] = {"mlp", "gpt", "extra", "gpt_bf16",
                                                  "gpt_fp16"};

typedef struct run {
    double loss[STEPS];
    float *params;
    size_t n;
} run;

static pl_graph_t *mlp(void) {
    pl_graph_t *g = pl_graph_new(3);
    int64_t s[1] = {IN};
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, s);
    pl_tensor_t *h = pl_relu(g, pl_linear(g, x, 32, "fc1"));
    pl_tensor_t *k = pl_gelu(g, pl_linear(g, h, 32, "fc2"));
    pl_graph_set_loss(g, pl_mean(g, pl_add(g, h, k, "res")));
    return g;
}

static pl_graph_t *gpt(void) {
    pl_graph_t *g = pl_graph_new(3);
    pl_gpt_config cfg = {.vocab = V, .context = T, .channels = 16, .layers = 2, .heads = 2};
    pl_gpt_model m;
    if (pl_gpt_build(g, &cfg, &m) != PL_STATUS_OK) return NULL;
    return g;
}

/* The ops the mlp and gpt leave out, on [ROWS, IN] samples: y is the MSE
 * target. */
static pl_graph_t *extra(void) {
    pl_graph_t *g = pl_graph_new(5);
    int64_t s[2] = {ROWS, IN};
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 2, s);
    pl_tensor_t *y = pl_graph_input(g, "y", PL_DTYPE_F32, 2, s);
    pl_tensor_t *h = pl_rmsnorm(g, x, "norm");
    pl_tensor_t *a = pl_silu(g, pl_linear(g, h, IN, "fc"));
    pl_tensor_t *m = pl_scale(g, pl_mul(g, a, h, "gate"), 0.5f, "half");
    pl_tensor_t *d = pl_sub(g, pl_dropout(g, m, 0.25f, "drop"), h, "diff");
    pl_tensor_t *att = pl_softmax(g, pl_matmul(g, d, h, false, true, "scores"));
    pl_tensor_t *o = pl_matmul(g, att, h, false, false, "mix");
    pl_tensor_t *ot = pl_matmul(g, att, o, true, false, "mix_t");
    pl_graph_set_loss(g, pl_mse_loss(g, pl_add(g, o, ot, "sum"), y));
    return g;
}

static bool train(pl_device device, enum model model, run *r) {
    pl_runtime_options ro = pl_runtime_options_default();
    ro.device = device;
    ro.cpu_workers = 1;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) return false;
    bool is_gpt = model == GPT || model == GPT_BF16 || model == GPT_FP16;
    pl_graph_t *g = is_gpt ? gpt() : model == MLP ? mlp() : extra();
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = B;
    if (model == MLP) {
        eo.max_norm = 0.05f;
        eo.norm_type = INFINITY;
    } else if (model == EXTRA) {
        eo.optimizer.kind = PL_OPTIMIZER_SGD;
        eo.optimizer.lr = 0.05f;
        eo.optimizer.momentum = 0.9f;
        eo.optimizer.weight_decay = 0.01f;
        eo.max_norm = 0.5f;
        eo.loss_scaler.enabled = true;
    } else if (model == GPT_BF16 || model == GPT_FP16) {
        eo.precision = model == GPT_BF16 ? PL_PRECISION_BF16 : PL_PRECISION_FP16;
        eo.max_norm = 1.0f;
    }
    pl_engine_t *e = g ? pl_engine_new(rt, g, &eo) : NULL;
    bool ok = e != NULL;
    static float x[B * ROWS * IN], y[B * ROWS * IN];
    static int32_t tok[B * T], tgt[B * T];
    uint64_t s = 9;
    for (int i = 0; i < B * ROWS * IN; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((s >> 40) / 16777216.0) - 0.5f;
        y[i] = 0.25f * x[(i * 7) % (B * ROWS * IN)];
    }
    for (int i = 0; i < B * T; i++) tok[i] = (i * 7) % V, tgt[i] = (i * 5 + 1) % V;
    const void *d_x[2] = {x, y}, *d_gpt[2] = {tok, tgt};
    pl_batch b = {.size = B, .data = is_gpt ? d_gpt : d_x};
    pl_step_result res;
    for (int i = 0; ok && i < STEPS; i++) {
        ok = pl_engine_train_step(e, &b, &res) == PL_STATUS_OK;
        r->loss[i] = res.loss;
    }
    r->n = ok ? (size_t)pl_graph_param_count(g) : 0;
    r->params = ok ? malloc(r->n * sizeof *r->params) : NULL;
    for (int i = 0, off = 0; ok && i < pl_graph_num_params(g); i++) {
        const pl_tensor_t *p = pl_graph_param(g, i);
        ok = pl_engine_get_param(e, p, r->params + off, (size_t)pl_tensor_numel(p)) ==
             PL_STATUS_OK;
        off += (int)pl_tensor_numel(p);
    }
    if (!ok) printf("FAIL: %s training on %s: %s\n", MODEL_NAMES[model],
                    device == PL_DEVICE_CUDA ? "CUDA" : "CPU", pl_last_error());
    pl_engine_free(e);
    pl_graph_free(g);
    pl_runtime_free(rt);
    return ok;
}

int main(int argc, char **argv) {
    const bool cpu_only = argc == 2 && strcmp(argv[1], "--cpu") == 0;
    if (argc > 1 && !cpu_only) {
        fprintf(stderr, "usage: %s [--cpu]\n", argv[0]);
        return 2;
    }
    if (cpu_only) {
        int failures = compare_table(PL_DEVICE_CPU, 1, PL_DEVICE_CPU, 2);
        printf("backend_ops --cpu: %zu op table lines, %s\n", op_table_size,
               failures || tu_failures ? "FAILED" : "every pass agrees");
        return failures || tu_failures ? 1 : 0;
    }
    if (!pl_runtime_cuda_available()) {
        printf("backend_ops: this StarPU has no CUDA support: skipped\n");
        return 77;
    }
    /* A CUDA StarPU on a machine without a GPU: nothing to compare. */
    pl_runtime_options probe = pl_runtime_options_default();
    probe.device = PL_DEVICE_CUDA;
    pl_runtime_t *rt = pl_runtime_new(&probe);
    bool started = rt != NULL;
    int gpus = started ? pl_runtime_cuda_workers(rt) : 0;
    pl_runtime_free(rt);
    if (gpus == 0) {
        printf("backend_ops: no CUDA worker (%s): skipped\n",
               started ? "none found" : pl_last_error());
        return 77;
    }
    int failures = compare_table(PL_DEVICE_CPU, 2, PL_DEVICE_CUDA, 2);
    for (int m = 0; m < N_MODELS; m++) {
        run cpu = {0}, gpu = {0};
        if (!train(PL_DEVICE_CPU, (enum model)m, &cpu) ||
            !train(PL_DEVICE_CUDA, (enum model)m, &gpu)) {
            failures++;
            continue;
        }
        double worst_loss = 0;
        for (int i = 0; i < STEPS; i++)
            worst_loss = fmax(worst_loss, fabs(cpu.loss[i] - gpu.loss[i]) /
                                              fmax(fabs(cpu.loss[i]), 1e-6));
        double err = normalised_error(cpu.params, gpu.params, cpu.n);
        double tol = m == GPT_BF16 || m == GPT_FP16 ? HALF_TOL : TOL;
        bool ok = worst_loss < tol && err < tol;
        printf("%s %-8s losses %.3g, parameters %.3g (tolerance %g)\n", ok ? "ok  " : "FAIL",
               MODEL_NAMES[m], worst_loss, err, tol);
        failures += !ok;
        free(cpu.params);
        free(gpu.params);
    }
    return failures || tu_failures ? 1 : 0;
}
