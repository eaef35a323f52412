/* Every built-in op and the op interface itself, through the public API
 * only. The per-op checks read the op table (op_table.c: one line per op
 * and shape), so every failure names the op, its shapes and the pass (F
 * forward, B input gradient, W weight gradient):
 *   1. every line without OP_NO_GRADCHECK passes pl_gradcheck (central
 *      differences in double, and accumulate adding exactly what overwrite
 *      writes), and every gradient value of its inputs and parameters is
 *      compared (each exactly once for ops without a fused loss kernel);
 *   2. the lines with a `reference` equal PyTorch's values
 *      (reference/ops_reference.py → ops_reference.txt) to 1e-5 relative,
 *      the kernels called directly through the exported definitions with
 *      a pl_op_call filled here (no StarPU): the forward output (F), each
 *      input's gradient written over NaN (B), the parameters' gradients
 *      written over NaN, then accumulated onto ones (W); for scalar
 *      outputs the loss, its invalid count, the gradients seeded by
 *      `scale` and the fused loss kernel (loss and gradient in one pass);
 *   3. pl_gradcheck fails, naming the value, on a user op with a wrong
 *      gradient, and on kernels that overwrite when asked to accumulate;
 *   4. bad op definitions and operands get the documented status and a
 *      message naming the op, and leave the graph unchanged;
 *   5. a kernel that reports an error fails the step with a message naming
 *      the op, the kernel and the kernel's own explanation;
 *   6. the builders refuse bad operands with messages naming them
 *      (pl_matmul: the op and both operands);
 *   7. through engines: RMSNorm and softmax run in 2 tiles give PyTorch's
 *      values too, a small SwiGLU-style model built from rmsnorm, silu,
 *      mul, scale, sub, softmax and MSE trains under 2 tiles (the loss
 *      falls), and so does an attention-like model built from pl_matmul
 *      (softmax(q·kᵀ)·v of linear projections over a leading head dim).
 * The CPU-vs-CUDA comparison of the same table is test_backend_ops.c.
 *
 * Usage: test_ops reference/ops_reference.txt */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_table.h"
#include "pleiades.h"
#include "reference_util.h"
#include "test_util.h"

enum { S = 2 };   /* samples, as the reference script's SAMPLES */
#define RTOL 1e-5 /* relative to the row's largest reference value */

/* ----------------------------------------------- 1. gradient checks */

/* Gradient values pl_gradcheck must compare for the line: every value of
 * each float input that has a gradient kernel, over its samples, and of
 * every parameter (created or shared); the parameters' count comes from
 * building the op, as pl_gradcheck does. -1 when it cannot be built. */
static int64_t gradients_of(const op_case *c, int64_t samples) {
    const pl_op_def *def = c->def;
    pl_graph_t *g = pl_graph_new(1);
    pl_tensor_t *ops[PL_OP_MAX_INPUTS + PL_OP_MAX_PARAMS];
    int64_t count = 0;
    bool ok = g != NULL;
    for (int i = 0; ok && i < def->n_inputs; i++) {
        const op_operand *o = &c->in[i];
        char name[16];
        snprintf(name, sizeof name, "in%d", i);
        ok = (ops[i] = pl_graph_input(g, name, o->dtype, o->ndim, o->shape)) != NULL;
        if (ok && def->backward_input[i].cpu && o->dtype == PL_DTYPE_F32)
            count += samples * pl_tensor_numel(ops[i]);
    }
    /* Shared parameters are parameters another op created: an embedding
     * of the shape makes one ([V, C] is its wte). */
    for (int i = def->n_inputs; ok && i < op_case_operands(c); i++) {
        const op_operand *o = &c->in[i];
        int64_t one = 1;
        pl_tensor_t *tok = pl_graph_input(g, "tok", PL_DTYPE_I32, 1, &one);
        ok = o->ndim == 2 && tok &&
             pl_embedding(g, tok, o->shape[0], o->shape[1], "shared") != NULL &&
             (ops[i] = pl_graph_find(g, "shared.wte")) != NULL;
        if (ok) count += pl_tensor_numel(ops[i]);
    }
    int before = ok ? pl_graph_num_params(g) : 0;
    ok = ok && pl_graph_op(g, def, ops, op_case_operands(c), c->attrs, "op") != NULL;
    for (int p = before; ok && p < pl_graph_num_params(g); p++)
        count += pl_tensor_numel(pl_graph_param(g, p));
    pl_graph_free(g);
    return ok ? count : -1;
}

static void gradcheck_table(void) {
    int lines = 0;
    for (size_t k = 0; k < op_table_size; k++) {
        const op_case *c = &op_table[k];
        if (c->flags & OP_NO_GRADCHECK) continue;
        lines++;
        const int n = op_case_operands(c);
        int ndim[PL_OP_MAX_INPUTS + PL_OP_MAX_PARAMS];
        int64_t shapes[PL_OP_MAX_INPUTS + PL_OP_MAX_PARAMS][PL_MAX_DIMS];
        pl_dtype dtypes[PL_OP_MAX_INPUTS + PL_OP_MAX_PARAMS];
        for (int i = 0; i < n; i++) {
            ndim[i] = c->in[i].ndim;
            memcpy(shapes[i], c->in[i].shape, sizeof shapes[i]);
            dtypes[i] = c->in[i].dtype;
        }
        pl_gradcheck_options o = op_case_gradcheck_options(c);
        pl_gradcheck_result r;
        pl_status st = pl_gradcheck(c->def, c->attrs, n, ndim,
                                    (const int64_t(*)[PL_MAX_DIMS])shapes, dtypes, &o, &r);
        char what[160];
        printf("%s gradcheck %-48s %4d values, worst relative error %.2g (%s)\n",
               st == PL_STATUS_OK ? "OK  " : "FAIL", op_case_describe(c, what, sizeof what),
               r.checked, r.max_error, r.worst);
        if (st != PL_STATUS_OK) {
            op_case_fail(c, op_case_gradcheck_pass(c, pl_last_error(), r.worst),
                         "%s", pl_last_error());
            continue;
        }
        /* Every value once; a fused loss kernel's gradient of input 0 is
         * compared a second time. */
        const int64_t want = gradients_of(c, o.samples);
        const bool exact = !c->def->loss_forward.cpu;
        if (want < 0 || (exact ? r.checked != want : r.checked < want))
            op_case_fail(c, 'B', "pl_gradcheck compared %d gradient values, want %s%lld",
                         r.checked, exact ? "" : ">= ", (long long)want);
    }
    CHECK(lines > 0, "the op table has no gradient-check line");
}

/* ---------------------------------------------- 2. PyTorch's values */

/* got vs the reference array `ref_name`, row by row (rows of `cols`): each
 * value within RTOL of its row's largest reference magnitude (or of
 * floor's, when given). A row is the unit the row-wise ops compute
 * together, so its scale is what the kernel's rounding is relative to
 * (RMSNorm's tiny row has gradients of 1e3, the others of 1). The 1e-30
 * floor lets SiLU(−100) = −3.7e−42 and the kernel's −1.6e−36 agree: both
 * are 0 in float arithmetic. */
static void compare_floor(const op_case *c, char pass, const char *label, const float *got,
                          const char *ref_name, int64_t n, int64_t cols, const float *floor) {
    const double *want = tu_text_get(ref_name, n);
    double worst = 0.0;
    int64_t at = 0;
    for (int64_t r0 = 0; r0 < n; r0 += cols) {
        double scale = 0.0;
        for (int64_t i = r0; i < r0 + cols; i++)
            scale = fmax(scale, fmax(fabs(want[i]), floor ? fabs(floor[i]) : 0.0));
        for (int64_t i = r0; i < r0 + cols; i++) {
            double err = fabs((double)got[i] - want[i]) / (RTOL * scale + 1e-30);
            if (!(err <= worst)) { /* NaN lands here too */
                worst = isnan(err) ? INFINITY : err;
                at = i;
            }
        }
    }
    char what[160];
    if (worst <= 1.0)
        printf("OK   reference %s %c %-8s worst [%lld] %.9g vs %.9g (%.2f of the tolerance)\n",
               op_case_describe(c, what, sizeof what), pass, label, (long long)at,
               (double)got[at], want[at], worst);
    else
        op_case_fail(c, pass, "%s: worst [%lld] %.9g vs PyTorch's %.9g (%.2f of the tolerance)",
                     label, (long long)at, (double)got[at], want[at], worst);
}

/* One line's op as a kernel sees it, filled by hand: its operands' shapes
 * from the op built in a private graph (so the layout is the shape
 * function's), their values from the reference file. */
typedef struct direct {
    pl_graph_t *g;
    pl_tensor_t *in[PL_OP_MAX_INPUTS], *y;
    float *values[PL_OP_MAX_INPUTS], *param[PL_OP_MAX_PARAMS];
    const char *param_name[PL_OP_MAX_PARAMS]; /* "weight" */
    int64_t cols[PL_OP_MAX_INPUTS];            /* last dims */
    pl_op_call c;
    char error[256];
} direct;

/* False (a FAIL printed) when the line cannot be checked this way. */
static bool direct_init(direct *d, const op_case *c) {
    const pl_op_def *def = c->def;
    char rname[96];
    memset(d, 0, sizeof *d);
    if (def->n_shared_params > 0) {
        op_case_fail(c, 'F', "reference lines take no shared parameters");
        return false;
    }
    d->g = pl_graph_new(1);
    for (int i = 0; i < def->n_inputs; i++) {
        const op_operand *o = &c->in[i];
        if (o->dtype != PL_DTYPE_F32) {
            op_case_fail(c, 'F', "reference lines take float inputs only");
            return false;
        }
        d->in[i] = pl_graph_input(d->g, def->input_names[i], o->dtype, o->ndim, o->shape);
    }
    d->y = pl_graph_op(d->g, def, d->in, def->n_inputs, c->attrs, "op");
    if (!d->y) {
        op_case_fail(c, 'F', "the op cannot be built: %s", pl_last_error());
        return false;
    }
    pl_op_call *k = &d->c;
    k->op = def->name;
    k->attrs = c->attrs;
    k->samples = S;
    k->n_inputs = def->n_inputs;
    for (int i = 0; i < def->n_inputs; i++) {
        k->in_ndim[i] = pl_tensor_shape(d->in[i], k->in_shape[i]);
        k->in_numel[i] = pl_tensor_numel(d->in[i]);
        d->cols[i] = k->in_shape[i][k->in_ndim[i] - 1];
        snprintf(rname, sizeof rname, "%s.%s", c->reference, def->input_names[i]);
        k->in[i] = d->values[i] = tu_text_floats(rname, S * k->in_numel[i]);
    }
    k->n_params = pl_graph_num_params(d->g);
    for (int p = 0; p < k->n_params; p++) {
        const pl_tensor_t *t = pl_graph_param(d->g, p);
        d->param_name[p] = pl_tensor_name(t) + strlen("op.");
        k->param_ndim[p] = pl_tensor_shape(t, k->param_shape[p]);
        k->param_numel[p] = pl_tensor_numel(t);
        snprintf(rname, sizeof rname, "%s.%s", c->reference, d->param_name[p]);
        k->param[p] = d->param[p] = tu_text_floats(rname, k->param_numel[p]);
    }
    if (def->output == PL_OP_OUTPUT_ACTIVATION) {
        k->out_ndim = pl_tensor_shape(d->y, k->out_shape);
        k->out_numel = pl_tensor_numel(d->y);
    }
    k->scale = 1.0f;
    k->error = d->error;
    k->error_size = sizeof d->error;
    return true;
}

static void direct_free(direct *d) {
    for (int i = 0; i < PL_OP_MAX_INPUTS; i++) free(d->values[i]);
    for (int p = 0; p < PL_OP_MAX_PARAMS; p++) free(d->param[p]);
    pl_graph_free(d->g);
}

static bool run_kernel(direct *d, const op_case *c, char pass, pl_op_kernel k,
                       const char *kernel) {
    d->error[0] = '\0';
    int rc = k(&d->c);
    if (rc != 0) op_case_fail(c, pass, "its %s kernel returned %d: %s", kernel, rc, d->error);
    return rc == 0;
}

static void fill_nan(float *x, int64_t n) {
    for (int64_t j = 0; j < n; j++) x[j] = NAN; /* must be overwritten */
}

/* An activation op: the forward output (F), then each input's gradient
 * from <prefix>.dout (B), then the parameters' gradients, written, then
 * accumulated onto ones (W). */
static void check_activation_reference(direct *d, const op_case *c) {
    const pl_op_def *def = c->def;
    pl_op_call *k = &d->c;
    char label[32], rname[96];
    const int64_t out_n = S * k->out_numel, out_cols = k->out_shape[k->out_ndim - 1];
    float *out = tu_xmalloc((size_t)out_n * sizeof *out);
    fill_nan(out, out_n);
    k->out = out;
    snprintf(rname, sizeof rname, "%s.out", c->reference);
    if (run_kernel(d, c, 'F', def->forward.cpu, "forward"))
        compare_floor(c, 'F', "out", out, rname, out_n, out_cols, NULL);

    snprintf(rname, sizeof rname, "%s.dout", c->reference);
    float *dout = tu_text_floats(rname, out_n);
    k->dout = dout;
    for (int i = 0; i < def->n_inputs; i++) {
        if (!def->backward_input[i].cpu) continue;
        const int64_t n = S * k->in_numel[i];
        float *grad = tu_xmalloc((size_t)n * sizeof *grad);
        fill_nan(grad, n);
        k->input = i;
        k->dinput = grad;
        k->accumulate = false;
        snprintf(label, sizeof label, "d%s", def->input_names[i]);
        snprintf(rname, sizeof rname, "%s.d%s", c->reference, def->input_names[i]);
        if (run_kernel(d, c, 'B', def->backward_input[i].cpu, "backward_input"))
            compare_floor(c, 'B', label, grad, rname, n, d->cols[i],
                          c->flags & OP_REF_DOUT_FLOOR ? dout : NULL);
        free(grad);
    }
    k->dinput = NULL;
    if (k->n_params > 0) {
        float *once[PL_OP_MAX_PARAMS] = {0}, *dw[PL_OP_MAX_PARAMS] = {0};
        for (int p = 0; p < k->n_params; p++) {
            dw[p] = tu_xmalloc((size_t)k->param_numel[p] * sizeof *dw[p]);
            fill_nan(dw[p], k->param_numel[p]);
            k->dparam[p] = dw[p];
            k->accumulate_param[p] = false;
        }
        bool ran = run_kernel(d, c, 'W', def->backward_weight.cpu, "backward_weight");
        for (int p = 0; ran && p < k->n_params; p++) {
            const int64_t n = k->param_numel[p];
            snprintf(label, sizeof label, "d%s", d->param_name[p]);
            snprintf(rname, sizeof rname, "%s.d%s", c->reference, d->param_name[p]);
            const int64_t cols = k->param_shape[p][k->param_ndim[p] - 1];
            compare_floor(c, 'W', label, dw[p], rname, n, cols, NULL);
            once[p] = tu_xmalloc((size_t)n * sizeof *once[p]);
            memcpy(once[p], dw[p], (size_t)n * sizeof *once[p]);
            for (int64_t j = 0; j < n; j++) dw[p][j] = 1.0f;
            k->accumulate_param[p] = true;
        }
        /* pl_gradcheck checks that accumulate adds for the input
         * gradients and the weights' alike; here against PyTorch's values
         * too: onto ones, an accumulating call must give 1 + what the
         * overwriting one wrote (to rounding: the sum is formed anew). */
        if (ran &&
            run_kernel(d, c, 'W', def->backward_weight.cpu, "backward_weight (accumulate)"))
            for (int p = 0; p < k->n_params; p++) {
                bool added = true;
                for (int64_t j = 0; j < k->param_numel[p]; j++) {
                    const double want = 1.0 + once[p][j];
                    added = added && fabs(dw[p][j] - want) <= 1e-5 * (1.0 + fabs(once[p][j]));
                }
                char what[160];
                if (added)
                    printf("OK   reference %s W d%s: accumulate_param adds\n",
                           op_case_describe(c, what, sizeof what), d->param_name[p]);
                else
                    op_case_fail(c, 'W', "d%s: backward_weight with accumulate_param set did "
                                 "not add", d->param_name[p]);
            }
        for (int p = 0; p < k->n_params; p++) free(once[p]), free(dw[p]);
    }
    free(dout);
    free(out);
}

/* A scalar op (a loss): 2 doubles (sum, invalid count), divided here by
 * the batch's elements of input 0 as the script's mean is; the gradients
 * are seeded by scale = 1 / (that count), as the engine does for a loss,
 * not by a dout; then the fused loss kernel, loss and input 0's gradient
 * in one pass, must give both again. */
static void check_scalar_reference(direct *d, const op_case *c) {
    const pl_op_def *def = c->def;
    pl_op_call *k = &d->c;
    char label[32], rname[96], what[160];
    const int64_t count = S * k->in_numel[0];
    double sum[2] = {NAN, NAN};
    k->out = sum;
    snprintf(rname, sizeof rname, "%s.loss", c->reference);
    const double want_loss = tu_text_get(rname, 1)[0];
    double loss = NAN;
    if (run_kernel(d, c, 'F', def->forward.cpu, "forward")) {
        loss = sum[0] / (double)count;
        if (fabs(loss - want_loss) <= RTOL * fabs(want_loss) && sum[1] == 0.0)
            printf("OK   reference %s F loss %.9g vs %.9g, invalid count %g\n",
                   op_case_describe(c, what, sizeof what), loss, want_loss, sum[1]);
        else
            op_case_fail(c, 'F', "loss %.9g vs PyTorch's %.9g, invalid count %g", loss,
                         want_loss, sum[1]);
    }
    k->scale = 1.0f / (float)count;
    k->dout = NULL;
    for (int i = 0; i < def->n_inputs; i++) {
        if (!def->backward_input[i].cpu) continue;
        const int64_t n = S * k->in_numel[i];
        float *grad = tu_xmalloc((size_t)n * sizeof *grad);
        fill_nan(grad, n);
        k->input = i;
        k->dinput = grad;
        k->accumulate = false;
        snprintf(label, sizeof label, "d%s", def->input_names[i]);
        snprintf(rname, sizeof rname, "%s.d%s", c->reference, def->input_names[i]);
        if (run_kernel(d, c, 'B', def->backward_input[i].cpu, "backward_input"))
            compare_floor(c, 'B', label, grad, rname, n, d->cols[i], NULL);
        if (i == 0 && def->loss_forward.cpu) {
            /* The loss task of a training step. */
            sum[0] = NAN;
            fill_nan(grad, n);
            snprintf(label, sizeof label, "fused d%s", def->input_names[i]);
            if (run_kernel(d, c, 'B', def->loss_forward.cpu, "loss_forward")) {
                compare_floor(c, 'B', label, grad, rname, n, d->cols[i], NULL);
                if (sum[0] / (double)count == loss)
                    printf("OK   reference %s F fused loss equals the forward's\n",
                           op_case_describe(c, what, sizeof what));
                else
                    op_case_fail(c, 'F', "the fused loss %.9g differs from the forward's %.9g",
                                 sum[0] / (double)count, loss);
            }
        }
        free(grad);
    }
}

static void check_references(void) {
    int lines = 0;
    for (size_t k = 0; k < op_table_size; k++) {
        const op_case *c = &op_table[k];
        if (!c->reference) continue;
        lines++;
        direct d;
        if (direct_init(&d, c)) {
            if (c->def->output == PL_OP_OUTPUT_SCALAR)
                check_scalar_reference(&d, c);
            else
                check_activation_reference(&d, c);
        }
        direct_free(&d);
    }
    CHECK(lines > 0, "the op table has no reference line");
}

/* ------------------------------------- 3. a wrong user op is caught */

#define SHAPES(...) ((const int64_t(*)[PL_MAX_DIMS])(int64_t[][PL_MAX_DIMS]){__VA_ARGS__})

static pl_status same_shape(const pl_op_def *def, const char *op, pl_tensor_t *const *in,
                            const void *attrs, pl_op_layout *l) {
    (void)def, (void)op, (void)attrs;
    l->out_ndim = pl_tensor_shape(in[0], l->out_shape);
    return PL_STATUS_OK;
}
static int cube_forward(pl_op_call *c) {
    const float *x = c->in[0];
    float *y = c->out;
    for (int64_t i = 0; i < c->samples * c->in_numel[0]; i++) y[i] = x[i] * x[i] * x[i];
    return 0;
}
static int cube_backward_wrong(pl_op_call *c) { /* 2x² instead of 3x² */
    const float *x = c->in[0];
    for (int64_t i = 0; i < c->samples * c->in_numel[0]; i++) {
        float g = 2.0f * x[i] * x[i] * c->dout[i];
        c->dinput[i] = c->accumulate ? c->dinput[i] + g : g;
    }
    return 0;
}
static int cube_backward_overwrites(pl_op_call *c) { /* ignores accumulate */
    const float *x = c->in[0];
    for (int64_t i = 0; i < c->samples * c->in_numel[0]; i++)
        c->dinput[i] = 3.0f * x[i] * x[i] * c->dout[i];
    return 0;
}

/* y = x ⊙ w with a parameter w of x's shape; its weight gradient
 * dw = Σ_samples x ⊙ dout ignores accumulate_param. */
static pl_status gain_shape(const pl_op_def *def, const char *op, pl_tensor_t *const *in,
                            const void *attrs, pl_op_layout *l) {
    same_shape(def, op, in, attrs, l);
    l->params[0] = (pl_op_param_decl){"w", 1, {pl_tensor_numel(in[0])}, PL_INIT_ONES, 1.0f};
    l->n_params = 1;
    return PL_STATUS_OK;
}
static int gain_forward(pl_op_call *c) {
    const float *x = c->in[0];
    float *y = c->out;
    int64_t n = c->in_numel[0];
    for (int64_t i = 0; i < c->samples * n; i++) y[i] = x[i] * c->param[0][i % n];
    return 0;
}
static int gain_backward_weight_overwrites(pl_op_call *c) {
    const float *x = c->in[0];
    int64_t n = c->in_numel[0];
    for (int64_t j = 0; j < n; j++) c->dparam[0][j] = 0.0f;
    for (int64_t i = 0; i < c->samples * n; i++) c->dparam[0][i % n] += x[i] * c->dout[i];
    return 0;
}

static void test_gradcheck_catches(void) {
    int nd[1] = {1};
    pl_op_def wrong = {.name = "cube", .n_inputs = 1, .shape = same_shape,
                       .forward = {.cpu = cube_forward}, .backward_input = {{.cpu = cube_backward_wrong}},
                       .backward_input_reads = PL_OP_READS_INPUTS};
    pl_gradcheck_result r;
    pl_status st = pl_gradcheck(&wrong, NULL, 1, nd, SHAPES({4}), NULL, NULL, &r);
    CHECK(st == PL_STATUS_INVALID_ARGUMENT && strstr(pl_last_error(), "cube") &&
              strstr(pl_last_error(), "finite differences") && r.max_error > 0.1,
          "a wrong gradient passed pl_gradcheck: %d, %s (error %g)", (int)st, pl_last_error(),
          r.max_error);
    pl_op_def overwrites = wrong;
    overwrites.backward_input[0].cpu = cube_backward_overwrites;
    st = pl_gradcheck(&overwrites, NULL, 1, nd, SHAPES({4}), NULL, NULL, &r);
    CHECK(st == PL_STATUS_INVALID_ARGUMENT && strstr(pl_last_error(), "must add"),
          "a kernel ignoring accumulate passed pl_gradcheck: %d, %s", (int)st, pl_last_error());
    pl_op_def gain = {.name = "gain", .n_inputs = 1, .shape = gain_shape,
                      .forward = {.cpu = gain_forward},
                      .backward_weight = {.cpu = gain_backward_weight_overwrites},
                      .backward_weight_reads = PL_OP_READS_INPUTS};
    st = pl_gradcheck(&gain, NULL, 1, nd, SHAPES({4}), NULL, NULL, &r);
    CHECK(st == PL_STATUS_INVALID_ARGUMENT && strstr(pl_last_error(), "backward_weight") &&
              strstr(pl_last_error(), "must add"),
          "a weight-gradient kernel ignoring accumulate_param passed pl_gradcheck: %d, %s",
          (int)st, pl_last_error());
}

/* ----------------------------------------------- 4. bad definitions */

static pl_status refuse(const pl_op_def *def, const char *op, pl_tensor_t *const *in,
                        const void *attrs, pl_op_layout *l) {
    (void)def, (void)in, (void)attrs, (void)l;
    return pl_error(PL_STATUS_SHAPE_MISMATCH, "%s: no thanks", op);
}
static pl_status refuse_silently(const pl_op_def *def, const char *op,
                                 pl_tensor_t *const *in, const void *attrs, pl_op_layout *l) {
    (void)def, (void)op, (void)in, (void)attrs, (void)l;
    return PL_STATUS_SHAPE_MISMATCH;
}
static pl_status with_param(const pl_op_def *def, const char *op, pl_tensor_t *const *in,
                            const void *attrs, pl_op_layout *l) {
    same_shape(def, op, in, attrs, l);
    l->params[0] = (pl_op_param_decl){"w", 1, {3}, PL_INIT_ONES, 1.0f};
    l->n_params = 1;
    return PL_STATUS_OK;
}

#define EXPECT_OP_NULL(call, status, s1, s2)                                        \
    do {                                                                            \
        int before = pl_graph_num_params(g);                                        \
        pl_tensor_t *r_ = (call);                                                   \
        CHECK(!r_ && pl_last_status() == (status) && strstr(pl_last_error(), s1) && \
                  strstr(pl_last_error(), s2) && pl_graph_num_params(g) == before,  \
              "%s: got %p, status %d, \"%s\"", #call, (void *)r_,                   \
              (int)pl_last_status(), pl_last_error());                              \
    } while (0)

static void test_bad_defs(void) {
    pl_graph_t *g = pl_graph_new(1);
    int64_t s3[1] = {3};
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, s3);
    pl_op_def ok = {.name = "cube", .n_inputs = 1, .shape = same_shape,
                    .forward = {.cpu = cube_forward}, .backward_input = {{.cpu = cube_backward_wrong}},
                    .backward_input_reads = PL_OP_READS_INPUTS};
    pl_op_def d;
    EXPECT_OP_NULL(pl_graph_op(g, NULL, &x, 1, NULL, "c"), PL_STATUS_INVALID_ARGUMENT,
                   "pl_graph_op", "def is NULL");
    d = ok, d.name = NULL;
    EXPECT_OP_NULL(pl_graph_op(g, &d, &x, 1, NULL, "c"), PL_STATUS_INVALID_ARGUMENT,
                   "pl_graph_op", "no name");
    d = ok, d.n_inputs = 0;
    EXPECT_OP_NULL(pl_graph_op(g, &d, &x, 1, NULL, "c"), PL_STATUS_INVALID_ARGUMENT,
                   "'cube'", "n_inputs 0");
    d = ok, d.shape = NULL;
    EXPECT_OP_NULL(pl_graph_op(g, &d, &x, 1, NULL, "c"), PL_STATUS_INVALID_ARGUMENT,
                   "'cube'", "no shape function");
    d = ok, d.forward.cpu = NULL;
    EXPECT_OP_NULL(pl_graph_op(g, &d, &x, 1, NULL, "c"), PL_STATUS_INVALID_ARGUMENT,
                   "'cube'", "no CPU forward kernel");
    d = ok, d.backward_input[2].cpu = cube_backward_wrong;
    EXPECT_OP_NULL(pl_graph_op(g, &d, &x, 1, NULL, "c"), PL_STATUS_INVALID_ARGUMENT,
                   "backward_input[2]", "1 inputs");
    d = ok, d.shape = with_param; /* parameters, no weight-gradient kernel */
    EXPECT_OP_NULL(pl_graph_op(g, &d, &x, 1, NULL, "c"), PL_STATUS_INVALID_ARGUMENT,
                   "cube 'c'", "no backward_weight kernel");
    d = ok, d.attrs_size = 8;
    EXPECT_OP_NULL(pl_graph_op(g, &d, &x, 1, NULL, "c"), PL_STATUS_INVALID_ARGUMENT,
                   "cube 'c'", "attrs is NULL");
    EXPECT_OP_NULL(pl_graph_op(g, &ok, &x, 2, NULL, "c"), PL_STATUS_INVALID_ARGUMENT,
                   "cube 'c'", "2 operands given, the op takes 1");
    pl_tensor_t *none = NULL;
    EXPECT_OP_NULL(pl_graph_op(g, &ok, &none, 1, NULL, "c"), PL_STATUS_INVALID_ARGUMENT,
                   "cube 'c'", "input 0 is NULL");
    d = ok, d.shape = refuse;
    EXPECT_OP_NULL(pl_graph_op(g, &d, &x, 1, NULL, "c"), PL_STATUS_SHAPE_MISMATCH,
                   "cube 'c'", "no thanks");
    d = ok, d.shape = refuse_silently;
    EXPECT_OP_NULL(pl_graph_op(g, &d, &x, 1, NULL, NULL), PL_STATUS_SHAPE_MISMATCH,
                   "cube", "the shape function refused");
    /* The graph is intact: a good op still goes in. */
    CHECK(pl_graph_op(g, &ok, &x, 1, NULL, "c") != NULL, "a good op after bad ones: %s",
          pl_last_error());
    pl_graph_free(g);
}

/* ---------------------------------- 5. a kernel failing at run time */

static int fails_forward(pl_op_call *c) {
    snprintf(c->error, c->error_size, "value %d is out of range", 42);
    return 3;
}

static void test_failing_kernel(void) {
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 1;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    CHECK(rt != NULL, "pl_runtime_new: %s", pl_last_error());
    if (!rt) return;
    pl_op_def failing = {.name = "flaky", .n_inputs = 1, .shape = same_shape,
                         .forward = {.cpu = fails_forward}, .backward_input = {{.cpu = cube_backward_wrong}},
                         .backward_input_reads = PL_OP_READS_INPUTS};
    pl_graph_t *g = pl_graph_new(1);
    int64_t s3[1] = {3};
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, s3);
    pl_tensor_t *h = pl_graph_op(g, &failing, &x, 1, NULL, "flaky1");
    pl_graph_set_loss(g, pl_mean(g, pl_linear(g, h, 2, "fc")));
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = 2;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK(e != NULL, "pl_engine_new: %s", pl_last_error());
    float data[6] = {0};
    const void *d[1] = {data};
    pl_batch b = {.size = 2, .data = d};
    pl_step_result r;
    pl_status st = e ? pl_engine_train_step(e, &b, &r) : PL_STATUS_OK;
    CHECK(st == PL_STATUS_RUNTIME_ERROR && strstr(pl_last_error(), "flaky 'flaky1'") &&
              strstr(pl_last_error(), "forward kernel failed (returned 3)") &&
              strstr(pl_last_error(), "value 42 is out of range"),
          "a failing kernel: status %d, \"%s\"", (int)st, pl_last_error());
    pl_engine_free(e);
    pl_graph_free(g);
    pl_runtime_free(rt);
}

/* -------------------------------------------- 6. builders' refusals */

static void check_errors(void) {
    pl_graph_t *g = pl_graph_new(1);
    const int64_t s35[2] = {3, 5}, s34[2] = {3, 4};
    pl_tensor_t *a = pl_graph_input(g, "a", PL_DTYPE_F32, 2, s35);
    pl_tensor_t *b = pl_graph_input(g, "b", PL_DTYPE_F32, 2, s34);
    pl_tensor_t *ids = pl_graph_input(g, "ids", PL_DTYPE_I32, 1, s35);
    CHECK(!pl_mul(g, a, b, "m"), "pl_mul accepted [3, 5] * [3, 4]");
    tu_expect_error(__LINE__, "pl_mul of differing shapes", pl_last_status(),
                    PL_STATUS_SHAPE_MISMATCH, "pl_mul 'm'", "[B, 3, 4]");
    CHECK(!pl_sub(g, a, ids, NULL), "pl_sub accepted an int32 operand");
    tu_expect_error(__LINE__, "pl_sub of an int32 input", pl_last_status(),
                    PL_STATUS_INVALID_ARGUMENT, "'ids'", "int32");
    CHECK(!pl_scale(g, a, NAN, "s"), "pl_scale accepted a NaN factor");
    tu_expect_error(__LINE__, "pl_scale by NaN", pl_last_status(),
                    PL_STATUS_INVALID_ARGUMENT, "pl_scale 's'", "finite");
    CHECK(!pl_mse_loss(g, a, b), "pl_mse_loss accepted differing shapes");
    tu_expect_error(__LINE__, "pl_mse_loss of differing shapes", pl_last_status(),
                    PL_STATUS_SHAPE_MISMATCH, "pred 'a'", "target 'b'");
    CHECK(!pl_rmsnorm(g, ids, "n"), "pl_rmsnorm accepted an int32 input");
    tu_expect_error(__LINE__, "pl_rmsnorm of an int32 input", pl_last_status(),
                    PL_STATUS_INVALID_ARGUMENT, "pl_rmsnorm 'n'", "float32");
    /* One RMSNorm per name: the parameter is "<name>.weight". */
    CHECK(pl_rmsnorm(g, a, "n"), "pl_rmsnorm: %s", pl_last_error());
    pl_tensor_t *w = pl_graph_find(g, "n.weight");
    int64_t ws[PL_MAX_DIMS];
    CHECK(w && pl_tensor_is_param(w) && pl_tensor_shape(w, ws) == 1 && ws[0] == 5,
          "pl_rmsnorm did not create n.weight [5]");
    pl_graph_free(g);
}

/* The message of the last failed call names both operands' shapes. */
static void expect_shapes(int line, const char *sa, const char *sb) {
    const char *msg = pl_last_error();
    bool ok = strstr(msg, sa) && strstr(msg, sb);
    if (!ok) {
        tu_failures++;
        printf("FAIL %s:%d: message does not name both %s and %s: %s\n", __FILE__, line,
               sa, sb, msg);
    }
}

/* pl_matmul refuses operands that cannot be multiplied, naming the op and
 * both operands; a refused call adds nothing (the graph still builds the
 * valid product afterwards). */
static void check_matmul_errors(void) {
    pl_graph_t *g = pl_graph_new(1);
    const int64_t s234[3] = {2, 3, 4}, s254[3] = {2, 5, 4}, s345[3] = {3, 4, 5},
                  s45[2] = {4, 5}, s4[1] = {4};
    pl_tensor_t *a = pl_graph_input(g, "a", PL_DTYPE_F32, 3, s234);
    pl_tensor_t *b = pl_graph_input(g, "b", PL_DTYPE_F32, 3, s254);
    pl_tensor_t *c = pl_graph_input(g, "c", PL_DTYPE_F32, 3, s345);
    pl_tensor_t *m = pl_graph_input(g, "m", PL_DTYPE_F32, 2, s45);
    pl_tensor_t *v = pl_graph_input(g, "v", PL_DTYPE_F32, 1, s4);
    pl_tensor_t *ids = pl_graph_input(g, "ids", PL_DTYPE_I32, 3, s234);

    /* Inner dims: a's K is 4, b's (untransposed: its rows) 5. */
    CHECK(!pl_matmul(g, a, b, false, false, "mk"), "pl_matmul accepted [2,3,4]·[2,5,4]");
    tu_expect_error(__LINE__, "pl_matmul of mismatched inner dims", pl_last_status(),
                    PL_STATUS_SHAPE_MISMATCH, "pl_matmul 'mk'", "4 vs 5");
    expect_shapes(__LINE__, "'a' [B, 2, 3, 4]", "'b' [B, 2, 5, 4]");
    /* Transposing a makes its K 3. */
    CHECK(!pl_matmul(g, a, b, true, true, "mkt"), "pl_matmul accepted [2,3,4]ᵀ·[2,5,4]ᵀ");
    tu_expect_error(__LINE__, "pl_matmul of mismatched transposed dims", pl_last_status(),
                    PL_STATUS_SHAPE_MISMATCH, "pl_matmul 'mkt'", "3 vs 4");
    /* Leading dims 2 vs 3 (the inner dims agree: 4). */
    CHECK(!pl_matmul(g, a, c, false, false, "ml"), "pl_matmul accepted [2,3,4]·[3,4,5]");
    tu_expect_error(__LINE__, "pl_matmul of mismatched leading dims", pl_last_status(),
                    PL_STATUS_SHAPE_MISMATCH, "pl_matmul 'ml'", "broadcasting");
    expect_shapes(__LINE__, "'a' [B, 2, 3, 4]", "'c' [B, 3, 4, 5]");
    /* A leading dim on one side only: no broadcasting either. */
    CHECK(!pl_matmul(g, a, m, false, false, "mb"), "pl_matmul accepted [2, 3, 4]·[4, 5]");
    tu_expect_error(__LINE__, "pl_matmul of differing ranks", pl_last_status(),
                    PL_STATUS_SHAPE_MISMATCH, "pl_matmul 'mb'", "broadcasting");
    expect_shapes(__LINE__, "[B, 2, 3, 4]", "'m' [B, 4, 5]");
    /* A 1-D operand is not a matrix, on either side. */
    CHECK(!pl_matmul(g, v, m, false, false, "m1"), "pl_matmul accepted [4]·[4, 5]");
    tu_expect_error(__LINE__, "pl_matmul of a 1-D operand", pl_last_status(),
                    PL_STATUS_SHAPE_MISMATCH, "pl_matmul 'm1'", "at least 2 dims");
    expect_shapes(__LINE__, "'v' [B, 4]", "'m' [B, 4, 5]");
    CHECK(!pl_matmul(g, m, v, true, false, "m2"), "pl_matmul accepted [4, 5]ᵀ·[4]");
    tu_expect_error(__LINE__, "pl_matmul of a 1-D b", pl_last_status(),
                    PL_STATUS_SHAPE_MISMATCH, "pl_matmul 'm2'", "at least 2 dims");
    CHECK(!pl_matmul(g, ids, a, false, true, "mi"), "pl_matmul accepted an int32 operand");
    tu_expect_error(__LINE__, "pl_matmul of an int32 operand", pl_last_status(),
                    PL_STATUS_INVALID_ARGUMENT, "pl_matmul 'mi'", "int32");
    /* The same operands with the right transposes multiply: [2, 3, 4]·[2, 5, 4]ᵀ
     * is [2, 3, 5], and [4, 5]ᵀ·[4, 5] is [5, 5]. */
    int64_t os[PL_MAX_DIMS];
    pl_tensor_t *ab = pl_matmul(g, a, b, false, true, "ab");
    CHECK(ab && pl_tensor_shape(ab, os) == 3 && os[0] == 2 && os[1] == 3 && os[2] == 5,
          "pl_matmul(a, bᵀ) is not [2, 3, 5]: %s", pl_last_error());
    pl_tensor_t *mm = pl_matmul(g, m, m, true, false, NULL);
    CHECK(mm && pl_tensor_shape(mm, os) == 2 && os[0] == 5 && os[1] == 5,
          "pl_matmul(mᵀ, m) is not [5, 5]: %s", pl_last_error());
    pl_graph_free(g);
}

/* --------------------------------------------------- 7. via engines */

/* An engine over `g` for batches of S in 2 tiles (one sample each). */
static pl_engine_t *engine(pl_runtime_t *rt, pl_graph_t *g) {
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = S;
    eo.tiles = 2;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK(e, "pl_engine_new: %s", pl_last_error());
    return e;
}

/* The table's line whose reference arrays are "<prefix>.*". */
static const op_case *reference_line(const char *prefix) {
    for (size_t k = 0; k < op_table_size; k++)
        if (op_table[k].reference && strcmp(op_table[k].reference, prefix) == 0)
            return &op_table[k];
    CHECK(false, "the op table has no line with reference \"%s\"", prefix);
    return NULL;
}

/* RMSNorm (with the reference's weight) and softmax, each in a graph of
 * its own (a graph has one output), run by an engine in 2 tiles: the
 * output against PyTorch's values, as the direct kernel calls were. */
static void check_engine_forward(pl_runtime_t *rt) {
    const int64_t rms[2] = {3, 8}, sm[2] = {3, 7};
    struct {
        const char *prefix;
        const int64_t *shape;
    } cases[2] = {{"rmsnorm", rms}, {"softmax", sm}};
    for (int k = 0; k < 2; k++) {
        const int64_t *shape = cases[k].shape, numel = S * shape[0] * shape[1];
        char rname[64];
        snprintf(rname, sizeof rname, "%s.x", cases[k].prefix);
        float *x = tu_text_floats(rname, numel);
        pl_graph_t *g = pl_graph_new(3);
        pl_tensor_t *in = pl_graph_input(g, "x", PL_DTYPE_F32, 2, shape);
        /* The loss must depend on a parameter: softmax's input goes through
         * a linear layer set to the identity (exact: x·1 + 0·others). */
        pl_tensor_t *y = k == 0 ? pl_rmsnorm(g, in, "norm")
                                : pl_softmax(g, pl_linear(g, in, shape[1], "id"));
        /* A loss makes the graph trainable; this check runs forward only. */
        pl_tensor_t *loss = y ? pl_mse_loss(g, y, in) : NULL;
        CHECK(loss && pl_graph_set_loss(g, loss) == PL_STATUS_OK &&
                  pl_graph_set_output(g, y) == PL_STATUS_OK,
              "%s graph: %s", cases[k].prefix, pl_last_error());
        pl_engine_t *e = loss ? engine(rt, g) : NULL;
        if (e && k == 0) {
            float *w = tu_text_floats("rmsnorm.weight", shape[1]);
            CHECK(pl_engine_set_param(e, pl_graph_find(g, "norm.weight"), w, shape[1]) ==
                      PL_STATUS_OK,
                  "set norm.weight: %s", pl_last_error());
            free(w);
        }
        if (e && k == 1) {
            const int64_t C = shape[1];
            float *w = calloc((size_t)(C * C), sizeof *w), *bias = calloc((size_t)C, sizeof *bias);
            for (int64_t i = 0; w && i < C; i++) w[i * C + i] = 1.0f;
            CHECK(w && bias &&
                      pl_engine_set_param(e, pl_graph_find(g, "id.weight"), w, C * C) ==
                          PL_STATUS_OK &&
                      pl_engine_set_param(e, pl_graph_find(g, "id.bias"), bias, C) ==
                          PL_STATUS_OK,
                  "set id: %s", pl_last_error());
            free(w);
            free(bias);
        }
        const void *data[1] = {x};
        pl_batch b = {.size = S, .data = data};
        pl_step_options so = {.forward_only = true, .return_output_label = true};
        pl_step_result r = {0};
        if (e) {
            pl_status st = pl_engine_forward_backward(e, &b, &so, &r);
            CHECK(st == PL_STATUS_OK && r.output, "%s forward: %s", cases[k].prefix,
                  pl_last_error());
            const op_case *c = reference_line(cases[k].prefix);
            if (st == PL_STATUS_OK && r.output && c) {
                snprintf(rname, sizeof rname, "%s.out", cases[k].prefix);
                compare_floor(c, 'F', "engine out", r.output, rname, numel, shape[1], NULL);
            }
        }
        pl_engine_free(e);
        pl_graph_free(g);
        free(x);
    }
}

/* x [T, C] → linear → RMSNorm → silu(gate(h)) ⊙ up(h) → down, a SwiGLU
 * block; h − ½·down as a residual; a head, softmax, and MSE against target
 * distributions. Every new op is in the step, forward and backward,
 * under 2 tiles. */
enum { MT = 4, MC = 8, MH = 16, MB = 8 };

static void check_training(pl_runtime_t *rt) {
    const int64_t shape[2] = {MT, MC};
    pl_graph_t *g = pl_graph_new(21);
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 2, shape);
    pl_tensor_t *target = pl_graph_input(g, "target", PL_DTYPE_F32, 2, shape);
    pl_tensor_t *h = pl_rmsnorm(g, pl_linear(g, x, MH, "fc_in"), "norm");
    pl_tensor_t *gate = pl_silu(g, pl_linear(g, h, 2 * MH, "gate"));
    pl_tensor_t *up = pl_linear(g, h, 2 * MH, "up");
    pl_tensor_t *down = pl_linear(g, pl_mul(g, gate, up, "swiglu"), MH, "down");
    pl_tensor_t *res = pl_sub(g, h, pl_scale(g, down, 0.5f, "half"), "res");
    pl_tensor_t *p = pl_softmax(g, pl_linear(g, res, MC, "head"));
    pl_tensor_t *loss = p ? pl_mse_loss(g, p, target) : NULL;
    CHECK(loss && pl_graph_set_loss(g, loss) == PL_STATUS_OK, "model: %s", pl_last_error());
    if (!loss) {
        pl_graph_free(g);
        return;
    }
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = MB;
    eo.tiles = 2;
    eo.optimizer.kind = PL_OPTIMIZER_ADAMW;
    eo.optimizer.lr = 1e-2f;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK(e, "model engine: %s", pl_last_error());
    /* Random inputs; targets are peaked distributions over C (softmax of
     * 3·N(0,1) values), which the model can fit for 8 samples. */
    float xs[MB * MT * MC], ts[MB * MT * MC];
    uint64_t s = 99;
    for (int i = 0; i < MB * MT * MC; i++)
        xs[i] = (float)((double)(tu_splitmix64(&s) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
    for (int r = 0; r < MB * MT; r++) {
        double z[MC], sum = 0.0;
        for (int c = 0; c < MC; c++) {
            z[c] = exp(3.0 * ((double)(tu_splitmix64(&s) >> 11) * 0x1.0p-53 * 2.0 - 1.0));
            sum += z[c];
        }
        for (int c = 0; c < MC; c++) ts[r * MC + c] = (float)(z[c] / sum);
    }
    const void *data[2] = {xs, ts};
    pl_batch b = {.size = MB, .data = data};
    double first = NAN, last = NAN;
    enum { STEPS = 60 };
    for (int k = 0; e && k < STEPS; k++) {
        pl_step_result r;
        pl_status st = pl_engine_train_step(e, &b, &r);
        CHECK(st == PL_STATUS_OK && isfinite(r.loss), "train step %d: %s (loss %g)", k,
              pl_last_error(), r.loss);
        if (st != PL_STATUS_OK) break;
        if (k == 0) first = r.loss;
        last = r.loss;
    }
    bool ok = last < 0.5 * first;
    printf("%s training         loss %.6f -> %.6f after %d steps (2 tiles)\n",
           ok ? "OK" : "FAIL", first, last, STEPS);
    if (!ok) tu_failures++;
    pl_engine_free(e);
    pl_graph_free(g);
}

/* Attention built from pl_matmul over a leading head dim, near
 * check_training's model: x [H, T, C]; q, k, v = linear(x) [H, T, D];
 * p = softmax(q·kᵀ / √D) [H, T, T] (transpose_b); z = vᵀ·pᵀ = (p·v)ᵀ
 * [H, D, T] (both transposed), regressed with MSE onto (x·W)ᵀ for a fixed
 * W, which p → identity fits exactly. Both gradients of both products
 * reach parameters (q and k through the scores, v directly), under 2
 * tiles with AdamW: the loss falls. */
enum { AH = 2, AT = 4, AC = 6, AD = 8, AB = 8 };

static void check_matmul_training(pl_runtime_t *rt) {
    const int64_t xshape[3] = {AH, AT, AC}, tshape[3] = {AH, AD, AT};
    pl_graph_t *g = pl_graph_new(23);
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 3, xshape);
    pl_tensor_t *target = pl_graph_input(g, "target", PL_DTYPE_F32, 3, tshape);
    pl_tensor_t *q = pl_linear(g, x, AD, "q"), *k = pl_linear(g, x, AD, "k");
    pl_tensor_t *v = pl_linear(g, x, AD, "v");
    pl_tensor_t *scores = pl_matmul(g, q, k, false, true, "scores");
    pl_tensor_t *p = pl_softmax(g, pl_scale(g, scores, 1.0f / sqrtf((float)AD), "temp"));
    pl_tensor_t *z = pl_matmul(g, v, p, true, true, "mix");
    pl_tensor_t *loss = z ? pl_mse_loss(g, z, target) : NULL;
    CHECK(loss && pl_graph_set_loss(g, loss) == PL_STATUS_OK, "matmul model: %s",
          pl_last_error());
    if (!loss) {
        pl_graph_free(g);
        return;
    }
    int64_t zs[PL_MAX_DIMS];
    CHECK(pl_tensor_shape(z, zs) == 3 && zs[0] == AH && zs[1] == AD && zs[2] == AT,
          "pl_matmul(vᵀ, pᵀ) is not [%d, %d, %d]", AH, AD, AT);
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = AB;
    eo.tiles = 2;
    eo.optimizer.kind = PL_OPTIMIZER_ADAMW;
    eo.optimizer.lr = 1e-2f;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK(e, "matmul model engine: %s", pl_last_error());
    /* Inputs and W uniform in [−1, 1]; targets (x·W)ᵀ per sample and head. */
    float xs[AB * AH * AT * AC], ts[AB * AH * AD * AT], w[AC * AD];
    uint64_t s = 7;
    for (int i = 0; i < AB * AH * AT * AC; i++)
        xs[i] = (float)((double)(tu_splitmix64(&s) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
    for (int i = 0; i < AC * AD; i++)
        w[i] = (float)((double)(tu_splitmix64(&s) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
    for (int m = 0; m < AB * AH; m++)
        for (int t = 0; t < AT; t++)
            for (int d = 0; d < AD; d++) {
                float acc = 0.0f;
                for (int c = 0; c < AC; c++)
                    acc += xs[(m * AT + t) * AC + c] * w[c * AD + d];
                ts[(m * AD + d) * AT + t] = acc;
            }
    const void *data[2] = {xs, ts};
    pl_batch b = {.size = AB, .data = data};
    double first = NAN, last = NAN;
    enum { STEPS = 80 };
    for (int i = 0; e && i < STEPS; i++) {
        pl_step_result r;
        pl_status st = pl_engine_train_step(e, &b, &r);
        CHECK(st == PL_STATUS_OK && isfinite(r.loss), "matmul train step %d: %s (loss %g)",
              i, pl_last_error(), r.loss);
        if (st != PL_STATUS_OK) break;
        if (i == 0) first = r.loss;
        last = r.loss;
    }
    bool ok = last < 0.5 * first;
    printf("%s matmul training  loss %.6f -> %.6f after %d steps (2 tiles)\n",
           ok ? "OK" : "FAIL", first, last, STEPS);
    if (!ok) tu_failures++;
    pl_engine_free(e);
    pl_graph_free(g);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s reference/ops_reference.txt\n", argv[0]);
        return 2;
    }
    tu_text_load(argv[1], "ops_reference");
    gradcheck_table();
    check_references();
    test_gradcheck_catches();
    test_bad_defs();
    test_failing_kernel();
    check_errors();
    check_matmul_errors();
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 2;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) {
        printf("FAIL: pl_runtime_new: %s\n", pl_last_error());
        return 1;
    }
    check_engine_forward(rt);
    check_training(rt);
    check_matmul_training(rt);
    pl_runtime_free(rt);
    tu_text_free();
    if (tu_failures) {
        printf("ops: %d check(s) failed\n", tu_failures);
        return 1;
    }
    printf("ops: all checks passed\n");
    return 0;
}
