/* The ops of pleiades/ops_extra.h (mul, sub, scale, SiLU, RMSNorm, softmax,
 * MSE loss, batched matmul), through the public API only:
 *   1. every op's CPU kernels pass pl_gradcheck (central differences in
 *      double, and accumulate adding exactly what overwrite writes) on two
 *      shapes each;
 *   2. forward values and gradients equal PyTorch's
 *      (reference/ops_extra_reference.py → ops_extra_reference.txt) to
 *      1e-5 relative, the kernels called directly through the exported
 *      definitions with a pl_op_call filled here (no StarPU);
 *   3. the same RMSNorm and softmax run by an engine in 2 tiles give those
 *      values too, and a small SwiGLU-style model built from every new op
 *      (rmsnorm → silu(gate)·up → down → scale/sub → softmax → MSE) trains
 *      under 2 tiles: the loss falls;
 *   4. pl_matmul: all four transpose combinations pass pl_gradcheck with
 *      leading (batch) dims and equal PyTorch's torch.matmul (forward, both
 *      gradients), its shape errors name the op and both operands, and an
 *      attention-like model (softmax(q·kᵀ)·v of linear projections over a
 *      leading head dim) trains under 2 tiles.
 * Also: the builders refuse bad operands with messages naming them.
 *
 * Usage: test_ops_extra reference/ops_extra_reference.txt */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pleiades.h"
#include "reference_util.h"
#include "test_util.h"

enum { S = 2 };           /* samples, as the reference script's SAMPLES */
#define RTOL 1e-5         /* relative to the row's largest reference value */
#define SCALE_FACTOR -1.5f /* the script's SCALE_FACTOR */

/* ------------------------------------------------------ gradient checks */

typedef struct gc_case {
    const pl_op_def *def;
    const void *attrs;
    int ndim;
    int64_t shape[PL_MAX_DIMS]; /* every input of these ops has one shape */
} gc_case;

static void gradcheck_all(void) {
    static const pl_scale_attrs neg = {SCALE_FACTOR}, small = {0.25f};
    const gc_case cases[] = {
        {&pl_op_mul, NULL, 1, {5}},       {&pl_op_mul, NULL, 2, {3, 4}},
        {&pl_op_sub, NULL, 1, {5}},       {&pl_op_sub, NULL, 2, {3, 4}},
        {&pl_op_scale, &neg, 1, {7}},     {&pl_op_scale, &small, 2, {2, 3}},
        {&pl_op_silu, NULL, 1, {6}},      {&pl_op_silu, NULL, 3, {2, 2, 3}},
        {&pl_op_rmsnorm, NULL, 1, {6}},   {&pl_op_rmsnorm, NULL, 2, {3, 16}},
        {&pl_op_softmax, NULL, 1, {6}},   {&pl_op_softmax, NULL, 2, {3, 5}},
        {&pl_op_mse_loss, NULL, 1, {5}},  {&pl_op_mse_loss, NULL, 2, {3, 4}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        const gc_case *c = &cases[k];
        int n = c->def->n_inputs, ndim[PL_OP_MAX_INPUTS];
        int64_t shapes[PL_OP_MAX_INPUTS][PL_MAX_DIMS];
        for (int i = 0; i < n; i++) {
            ndim[i] = c->ndim;
            memcpy(shapes[i], c->shape, sizeof shapes[i]);
        }
        pl_gradcheck_options o = pl_gradcheck_options_default();
        o.samples = 3;
        o.seed = 7 + k;
        pl_gradcheck_result r;
        pl_status st = pl_gradcheck(c->def, c->attrs, n, ndim,
                                    (const int64_t(*)[PL_MAX_DIMS])shapes, NULL, &o, &r);
        CHECK(st == PL_STATUS_OK, "gradcheck %s (%d dims): %s", c->def->api, c->ndim,
              pl_last_error());
        CHECK(r.checked > 0, "gradcheck %s: no gradient compared", c->def->api);
        printf("%s gradcheck %-12s %d dims: %3d values, max error %.2e (%s)\n",
               st == PL_STATUS_OK ? "OK" : "FAIL", c->def->api, c->ndim, r.checked,
               r.max_error, r.worst);
    }
}

/* pl_matmul's operands differ in shape: a [L.., M, K] (or [L.., K, M]) and
 * b [L.., K, N] (or [L.., N, K]), M, K, N distinct so that a kernel that
 * mixed up a transposition reads the wrong strides. Every transpose
 * combination with one leading dim (a per-sample tensor has at most 3
 * dims: the batch is the fourth), plus plain matrices. pl_gradcheck also
 * checks that accumulate adds (beta = 1) what overwrite writes (beta = 0). */
static void gradcheck_matmul(void) {
    enum { M = 3, K = 4, N = 5 };
    struct {
        bool ta, tb;
        int lead;                /* leading dims, each 2 */
    } cases[] = {{false, false, 1}, {false, true, 1}, {true, false, 1}, {true, true, 1},
                 {false, true, 0},  {true, false, 0}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        const bool ta = cases[k].ta, tb = cases[k].tb;
        const int lead = cases[k].lead, ndim[2] = {lead + 2, lead + 2};
        int64_t shapes[2][PL_MAX_DIMS] = {{0}};
        for (int i = 0; i < lead; i++) shapes[0][i] = shapes[1][i] = 2;
        shapes[0][lead] = ta ? K : M;
        shapes[0][lead + 1] = ta ? M : K;
        shapes[1][lead] = tb ? N : K;
        shapes[1][lead + 1] = tb ? K : N;
        const pl_matmul_attrs at = {ta, tb};
        pl_gradcheck_options o = pl_gradcheck_options_default();
        o.samples = 3;
        o.seed = 40 + k;
        pl_gradcheck_result r;
        pl_status st = pl_gradcheck(&pl_op_matmul, &at, 2, ndim,
                                    (const int64_t(*)[PL_MAX_DIMS])shapes, NULL, &o, &r);
        CHECK(st == PL_STATUS_OK, "gradcheck pl_matmul ta=%d tb=%d, %d leading dims: %s",
              ta, tb, lead, pl_last_error());
        /* Every value of both operands has a gradient. */
        const int64_t want = o.samples * ((int64_t)1 << lead) * (M * K + K * N);
        CHECK(r.checked == want, "gradcheck pl_matmul: %d values compared, want %lld",
              r.checked, (long long)want);
        printf("%s gradcheck pl_matmul   ta=%d tb=%d, %d leading dims: %3d values, max error "
               "%.2e (%s)\n", st == PL_STATUS_OK ? "OK" : "FAIL", ta, tb, lead, r.checked,
               r.max_error, r.worst);
    }
}

/* ------------------------------------------------------ reference file */

/* got vs the reference, row by row (rows of `cols`): each value within
 * RTOL of its row's largest reference magnitude. A row is the unit the
 * row-wise ops compute together, so its scale is what the kernel's
 * rounding is relative to (RMSNorm's tiny row has gradients of 1e3, the
 * others of 1). The 1e-30 floor lets SiLU(−100) = −3.7e−42 and the
 * kernel's −1.6e−36 agree: both are 0 in float arithmetic. */
static void compare_floor(const char *name, const float *got, const char *ref_name,
                          int64_t n, int64_t cols, const float *floor) {
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
    bool ok = worst <= 1.0;
    printf("%s %-16s worst [%lld] %.9g vs %.9g (%.2f of the tolerance)\n", ok ? "OK" : "FAIL",
           name, (long long)at, (double)got[at], want[at], worst);
    if (!ok) tu_failures++;
}

static void compare(const char *name, const float *got, const char *ref_name, int64_t n,
                    int64_t cols) {
    compare_floor(name, got, ref_name, n, cols, NULL);
}

/* ---------------------------------------------- kernels called directly */

/* One op's tile as the engine would describe it: n_in inputs of one
 * per-sample shape, optionally one [C] parameter, and an output of the
 * input's shape (ignored by scalar ops). */
typedef struct direct {
    pl_op_call c;
    char error[256];
} direct;

static void direct_init(direct *d, const pl_op_def *def, const void *attrs, int n_in,
                        float *const *in, int ndim, const int64_t *shape,
                        const float *param) {
    memset(d, 0, sizeof *d);
    pl_op_call *c = &d->c;
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) numel *= shape[i];
    c->op = def->name;
    c->attrs = attrs;
    c->samples = S;
    c->n_inputs = n_in;
    for (int i = 0; i < n_in; i++) {
        c->in[i] = in[i];
        c->in_ndim[i] = ndim;
        memcpy(c->in_shape[i], shape, (size_t)ndim * sizeof *shape);
        c->in_numel[i] = numel;
    }
    if (param) {
        c->n_params = 1;
        c->param[0] = param;
        c->param_ndim[0] = 1;
        c->param_shape[0][0] = c->param_numel[0] = shape[ndim - 1];
    }
    c->out_ndim = ndim;
    memcpy(c->out_shape, shape, (size_t)ndim * sizeof *shape);
    c->out_numel = numel;
    c->scale = 1.0f;
    c->error = d->error;
    c->error_size = sizeof d->error;
}

static void run_kernel(direct *d, pl_op_kernel k, const char *what) {
    int rc = k(&d->c);
    CHECK(rc == 0, "%s %s returned %d: %s", d->c.op, what, rc, d->error);
}

/* An activation op against the reference "<prefix>.<input name>" arrays:
 * forward, then each input's gradient from <prefix>.dout, then the
 * parameter's gradient (written, then accumulated onto itself: twice). */
static void check_activation_op(const pl_op_def *def, const void *attrs, const char *prefix,
                                int ndim, const int64_t *shape, bool has_param) {
    int64_t numel = S, cols = shape[ndim - 1];
    for (int i = 0; i < ndim; i++) numel *= shape[i];
    char name[64], rname[64];
    float *in[PL_OP_MAX_INPUTS] = {0}, *param = NULL;
    for (int i = 0; i < def->n_inputs; i++) {
        snprintf(rname, sizeof rname, "%s.%s", prefix, def->input_names[i]);
        in[i] = tu_text_floats(rname, numel);
    }
    if (has_param) {
        snprintf(rname, sizeof rname, "%s.weight", prefix);
        param = tu_text_floats(rname, cols);
    }
    float *out = tu_xmalloc((size_t)numel * sizeof *out);
    float *grad = tu_xmalloc((size_t)numel * sizeof *grad);
    snprintf(rname, sizeof rname, "%s.dout", prefix);
    float *dout = tu_text_floats(rname, numel);
    direct d;
    direct_init(&d, def, attrs, def->n_inputs, in, ndim, shape, param);
    d.c.out = out;
    run_kernel(&d, def->forward.cpu, "forward");
    snprintf(name, sizeof name, "%s out", prefix);
    snprintf(rname, sizeof rname, "%s.out", prefix);
    compare(name, out, rname, numel, cols);

    d.c.dout = dout;
    for (int i = 0; i < def->n_inputs; i++) {
        d.c.input = i;
        d.c.dinput = grad;
        d.c.accumulate = false;
        for (int64_t j = 0; j < numel; j++) grad[j] = NAN; /* must be overwritten */
        run_kernel(&d, def->backward_input[i].cpu, "backward_input");
        snprintf(name, sizeof name, "%s d%s", prefix, def->input_names[i]);
        snprintf(rname, sizeof rname, "%s.d%s", prefix, def->input_names[i]);
        /* Softmax's gradient y ⊙ (dy − ⟨dy, y⟩) cancels where a row is
         * peaked: y = 1 − 2e−8 is 1 in float, so its error is relative to
         * dy (PyTorch's float32 kernel errs alike), not to the tiny dx. */
        compare_floor(name, grad, rname, numel, cols, def == &pl_op_softmax ? dout : NULL);
    }
    d.c.dinput = NULL;
    if (has_param) {
        float *dw = tu_xmalloc((size_t)cols * sizeof *dw);
        for (int64_t j = 0; j < cols; j++) dw[j] = NAN;
        d.c.dparam[0] = dw;
        d.c.accumulate_param[0] = false;
        run_kernel(&d, def->backward_weight.cpu, "backward_weight");
        snprintf(name, sizeof name, "%s dweight", prefix);
        snprintf(rname, sizeof rname, "%s.dweight", prefix);
        compare(name, dw, rname, cols, cols);
        /* pl_gradcheck checks accumulate for input gradients only: here the
         * weight's. Onto ones, an accumulating call must give 1 + what the
         * overwriting one wrote (to rounding: the sum is formed anew). */
        float *once = tu_xmalloc((size_t)cols * sizeof *once);
        memcpy(once, dw, (size_t)cols * sizeof *once);
        for (int64_t j = 0; j < cols; j++) dw[j] = 1.0f;
        d.c.accumulate_param[0] = true;
        run_kernel(&d, def->backward_weight.cpu, "backward_weight (accumulate)");
        bool added = true;
        for (int64_t j = 0; j < cols; j++)
            added = added && fabs(dw[j] - (1.0 + once[j])) <= 1e-5 * (1.0 + fabs(once[j]));
        CHECK(added, "%s: backward_weight with accumulate_param set did not add", prefix);
        printf("%s %-16s accumulate_param adds\n", added ? "OK" : "FAIL", name);
        free(once);
        free(dw);
    }
    for (int i = 0; i < def->n_inputs; i++) free(in[i]);
    free(param);
    free(out);
    free(grad);
    free(dout);
}

/* The MSE loss: a scalar (2 doubles: sum, invalid count); the gradients
 * are seeded by scale = 1 / (batch · elements), as the engine does for a
 * loss, not by a dout. */
static void check_mse(void) {
    const int64_t shape[2] = {3, 4}, numel = S * 3 * 4;
    float *in[2] = {tu_text_floats("mse.pred", numel), tu_text_floats("mse.target", numel)};
    float *grad = tu_xmalloc((size_t)numel * sizeof *grad);
    double sum[2] = {NAN, NAN};
    const double want_loss = tu_text_get("mse.loss", 1)[0];
    direct d;
    direct_init(&d, &pl_op_mse_loss, NULL, 2, in, 2, shape, NULL);
    d.c.out = sum;
    run_kernel(&d, pl_op_mse_loss.forward.cpu, "forward");
    double loss = sum[0] / (double)numel;
    bool ok = fabs(loss - want_loss) <= RTOL * fabs(want_loss) && sum[1] == 0.0;
    printf("%s mse loss         %.9g vs %.9g, invalid count %g\n", ok ? "OK" : "FAIL", loss,
           want_loss, sum[1]);
    if (!ok) tu_failures++;

    d.c.scale = 1.0f / (float)numel;
    d.c.dout = NULL;
    const char *names[2] = {"mse dpred", "mse dtarget"}, *rnames[2] = {"mse.dpred",
                                                                      "mse.dtarget"};
    for (int i = 0; i < 2; i++) {
        d.c.input = i;
        d.c.dinput = grad;
        d.c.accumulate = false;
        run_kernel(&d, pl_op_mse_loss.backward_input[i].cpu, "backward_input");
        compare(names[i], grad, rnames[i], numel, shape[1]);
    }
    /* The loss task of a training step: loss and dpred in one pass. */
    sum[0] = NAN;
    d.c.input = 0;
    for (int64_t j = 0; j < numel; j++) grad[j] = NAN;
    run_kernel(&d, pl_op_mse_loss.loss_forward.cpu, "loss_forward");
    compare("mse fused dpred", grad, "mse.dpred", numel, shape[1]);
    ok = sum[0] / (double)numel == loss;
    printf("%s mse fused loss   equals the forward's\n", ok ? "OK" : "FAIL");
    if (!ok) tu_failures++;
    free(in[0]);
    free(in[1]);
    free(grad);
}

/* pl_matmul against the reference "matmul_<ta><tb>" arrays (the script's
 * shapes: per sample a [2, M, K] or [2, K, M], b [2, K, N] or [2, N, K],
 * out [2, M, N]): the forward output, then each operand's gradient from
 * the reference dout, each written over NaN so that an overwriting kernel
 * that read its destination (beta ≠ 0) fails. */
enum { MM_L = 2, MM_M = 3, MM_K = 4, MM_N = 5 };

static void check_matmul_reference(bool ta, bool tb) {
    const pl_matmul_attrs at = {ta, tb};
    char prefix[32], name[64], rname[64];
    snprintf(prefix, sizeof prefix, "matmul_%c%c", ta ? 't' : 'f', tb ? 't' : 'f');
    const int64_t shape[2][3] = {{MM_L, ta ? MM_K : MM_M, ta ? MM_M : MM_K},
                                 {MM_L, tb ? MM_N : MM_K, tb ? MM_K : MM_N}};
    const int64_t out_shape[3] = {MM_L, MM_M, MM_N};
    const int64_t per[2] = {MM_L * MM_M * MM_K, MM_L * MM_K * MM_N},
                  out_per = MM_L * MM_M * MM_N;
    float *in[2];
    for (int i = 0; i < 2; i++) {
        snprintf(rname, sizeof rname, "%s.%s", prefix, pl_op_matmul.input_names[i]);
        in[i] = tu_text_floats(rname, S * per[i]);
    }
    snprintf(rname, sizeof rname, "%s.dout", prefix);
    float *dout = tu_text_floats(rname, S * out_per);
    float *out = tu_xmalloc((size_t)(S * out_per) * sizeof *out);
    direct d;
    direct_init(&d, &pl_op_matmul, &at, 2, in, 3, shape[0], NULL);
    memcpy(d.c.in_shape[1], shape[1], sizeof shape[1]); /* b's own shape */
    d.c.in_numel[1] = per[1];
    memcpy(d.c.out_shape, out_shape, sizeof out_shape);
    d.c.out_numel = out_per;
    d.c.out = out;
    for (int64_t j = 0; j < S * out_per; j++) out[j] = NAN;
    run_kernel(&d, pl_op_matmul.forward.cpu, "forward");
    snprintf(name, sizeof name, "%s out", prefix);
    snprintf(rname, sizeof rname, "%s.out", prefix);
    compare(name, out, rname, S * out_per, MM_N);

    d.c.dout = dout;
    for (int i = 0; i < 2; i++) {
        const int64_t n = S * per[i];
        float *grad = tu_xmalloc((size_t)n * sizeof *grad);
        for (int64_t j = 0; j < n; j++) grad[j] = NAN; /* must be overwritten */
        d.c.input = i;
        d.c.dinput = grad;
        d.c.accumulate = false;
        run_kernel(&d, pl_op_matmul.backward_input[i].cpu, "backward_input");
        snprintf(name, sizeof name, "%s d%s", prefix, pl_op_matmul.input_names[i]);
        snprintf(rname, sizeof rname, "%s.d%s", prefix, pl_op_matmul.input_names[i]);
        compare(name, grad, rname, n, shape[i][2]);
        free(grad);
    }
    free(in[0]);
    free(in[1]);
    free(dout);
    free(out);
}

static void check_reference(void) {
    static const pl_scale_attrs factor = {SCALE_FACTOR};
    const int64_t e[2] = {3, 5}, silu[2] = {4, 6}, rms[2] = {3, 8}, sm[2] = {3, 7};
    check_activation_op(&pl_op_mul, NULL, "mul", 2, e, false);
    check_activation_op(&pl_op_sub, NULL, "sub", 2, e, false);
    check_activation_op(&pl_op_scale, &factor, "scale", 2, e, false);
    check_activation_op(&pl_op_silu, NULL, "silu", 2, silu, false);
    check_activation_op(&pl_op_rmsnorm, NULL, "rmsnorm", 2, rms, true);
    check_activation_op(&pl_op_softmax, NULL, "softmax", 2, sm, false);
    check_mse();
    for (int k = 0; k < 4; k++) check_matmul_reference(k & 2, k & 1);
}

/* --------------------------------------------------------- via engines */

/* An engine over `g` for batches of S in 2 tiles (one sample each). */
static pl_engine_t *engine(pl_runtime_t *rt, pl_graph_t *g) {
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = S;
    eo.tiles = 2;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK(e, "pl_engine_new: %s", pl_last_error());
    return e;
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
            if (st == PL_STATUS_OK && r.output) {
                char name[64];
                snprintf(name, sizeof name, "engine %s", cases[k].prefix);
                snprintf(rname, sizeof rname, "%s.out", cases[k].prefix);
                compare(name, r.output, rname, numel, shape[1]);
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

/* ------------------------------------------------------------- misuse */

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

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s reference/ops_extra_reference.txt\n", argv[0]);
        return 2;
    }
    tu_text_load(argv[1], "ops_extra_reference");
    gradcheck_all();
    gradcheck_matmul();
    check_reference();
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
        printf("%d check(s) failed\n", tu_failures);
        return 1;
    }
    printf("ops_extra: all checks passed\n");
    return 0;
}
