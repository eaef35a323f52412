/* pl_gradcheck: an op definition's CPU kernels against central finite
 * differences (pleiades/op.h), like torch.autograd.gradcheck. The op is
 * built in a private graph (so its shape function and parameter layout are
 * the ones the engine would use) and its kernels are called directly on
 * host buffers, without StarPU: the check runs anywhere, before a runtime
 * exists.
 *
 * The scalar checked is f = Σ dout·out with a fixed random dout (or the
 * tile's sum for scalar outputs), accumulated in double. Each float input
 * and parameter value is moved by ±h in float and the actual float step is
 * used as the denominator, so rounding of x ± h does not bias the slope. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "graph/error.h"
#include "util/random.h"

pl_gradcheck_options pl_gradcheck_options_default(void) {
    return (pl_gradcheck_options){.samples = 2, .eps = 1e-3, .tolerance = 2e-2, .seed = 1,
                                  .int_range = 2};
}

/* Everything one check owns. */
typedef struct check {
    const pl_op_def *def;
    pl_graph_t *g;
    const pl_op *op;
    pl_op_call call; /* the template, then filled per kernel */
    int64_t S;
    int n_in, n_par;
    void *in[PL_OP_MAX_INPUTS];
    float *param[PL_OP_MAX_PARAMS], *dparam[PL_OP_MAX_PARAMS];
    float *din[PL_OP_MAX_INPUTS];
    void *out;
    float *dout, *saved, *scratch;
    double invalid[2];
    char error[256];
    const char *what; /* for messages */
} check;

static void *alloc(size_t n, size_t elem) {
    void *p = calloc(n ? n : 1, elem);
    if (!p) pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_gradcheck: out of memory");
    return p;
}

static bool out_scalar(const check *c) { return c->def->output == PL_OP_OUTPUT_SCALAR; }

static int64_t out_elems(const check *c) { return c->S * c->call.out_numel; }

static pl_status run(check *c, pl_op_kernel k, const char *label) {
    pl_op_call call = c->call;
    call.samples = c->S;
    for (int i = 0; i < c->n_in; i++) call.in[i] = c->in[i];
    for (int i = 0; i < c->n_par; i++) call.param[i] = c->param[i];
    call.out = c->out;
    call.saved = c->saved;
    call.invalid = c->invalid;
    call.error = c->error;
    call.error_size = sizeof c->error;
    call.scale = 1.0f;
    /* the per-kernel fields were set by the caller on c->call */
    int rc = k(&call);
    if (rc != 0)
        return pl_fail(PL_STATUS_RUNTIME_ERROR, "pl_gradcheck: %s: its %s kernel failed "
                       "(returned %d)%s%s", c->what, label, rc, *c->error ? ": " : "",
                       c->error);
    return PL_STATUS_OK;
}

/* f = Σ dout·out, or the scalar output's sum. */
static pl_status objective(check *c, double *f) {
    pl_status st = run(c, c->def->forward.cpu, "forward");
    if (st) return st;
    if (out_scalar(c)) {
        *f = ((double *)c->out)[0];
        return PL_STATUS_OK;
    }
    double s = 0.0;
    const float *y = c->out;
    for (int64_t i = 0; i < out_elems(c); i++) s += (double)c->dout[i] * y[i];
    *f = s;
    return PL_STATUS_OK;
}

typedef struct worst {
    double err;
    char where[96];
    int checked;
    double analytic, numeric;
} worst;

/* Compares the analytic gradient `grad` of the n floats at x with finite
 * differences of the objective. */
static pl_status compare(check *c, float *x, const float *grad, int64_t n, double eps,
                         const char *name, worst *w) {
    for (int64_t j = 0; j < n; j++) {
        float x0 = x[j];
        float hi = x0 + (float)eps, lo = x0 - (float)eps;
        double fp, fm;
        x[j] = hi;
        pl_status st = objective(c, &fp);
        x[j] = lo;
        if (!st) st = objective(c, &fm);
        x[j] = x0;
        if (st) return st;
        double numeric = (fp - fm) / ((double)hi - (double)lo);
        double err = fabs((double)grad[j] - numeric) / fmax(1.0, fabs(numeric));
        w->checked++;
        if (err > w->err || isnan(err)) {
            w->err = isnan(err) ? INFINITY : err;
            w->analytic = grad[j];
            w->numeric = numeric;
            snprintf(w->where, sizeof w->where, "%s[%lld]", name, (long long)j);
        }
    }
    return PL_STATUS_OK;
}

/* An accumulating call must add exactly what an overwriting one writes:
 * run the kernel again with its n_out outputs (targets[k], n[k] floats,
 * whose overwriting results are first[k]) holding ones, and compare with
 * 1 + first. The caller has set the call's accumulate flags. */
static pl_status check_accumulate(check *c, float **targets, float *const *first,
                                  const int64_t *n, int n_out, pl_op_kernel k,
                                  const char *label, const char *const *names) {
    float *orig[PL_OP_MAX_PARAMS] = {0}, *acc[PL_OP_MAX_PARAMS] = {0};
    pl_status st = PL_STATUS_OK;
    for (int o = 0; o < n_out && !st; o++) {
        if (!(acc[o] = alloc(n[o], sizeof(float)))) st = pl_last_status();
        for (int64_t j = 0; acc[o] && j < n[o]; j++) acc[o][j] = 1.0f;
        orig[o] = targets[o];
        targets[o] = acc[o];
    }
    if (!st) st = run(c, k, label);
    for (int o = 0; o < n_out; o++) targets[o] = orig[o];
    for (int o = 0; o < n_out && !st; o++)
        for (int64_t j = 0; j < n[o] && !st; j++) {
            double want = 1.0 + (double)first[o][j];
            double err = fabs(acc[o][j] - want) / fmax(1.0, fabs(want));
            if (err > 1e-4 || isnan(err))
                st = pl_fail(PL_STATUS_INVALID_ARGUMENT,
                             "pl_gradcheck: %s: its %s kernel with accumulate set wrote %g "
                             "to %s[%lld] holding 1, want 1 + %g (it must add, not "
                             "overwrite)", c->what, label, acc[o][j], names[o],
                             (long long)j, first[o][j]);
        }
    for (int o = 0; o < n_out; o++) free(acc[o]);
    return st;
}

static void free_check(check *c) {
    for (int i = 0; i < PL_OP_MAX_INPUTS; i++) free(c->in[i]), free(c->din[i]);
    for (int i = 0; i < PL_OP_MAX_PARAMS; i++) free(c->param[i]), free(c->dparam[i]);
    free(c->out);
    free(c->dout);
    free(c->saved);
    pl_graph_free(c->g);
}

static pl_status build(check *c, const void *attrs, const int *ndim,
                       const int64_t (*shapes)[PL_MAX_DIMS], const pl_dtype *dtypes) {
    const pl_op_def *d = c->def;
    c->g = pl_graph_new(1);
    if (!c->g) return pl_last_status();
    pl_tensor_t *ops[PL_OP_MAX_IN];
    int n = d->n_inputs + d->n_shared_params;
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "%.24s", d->input_names[i] ? d->input_names[i] : "");
        if (!*name) snprintf(name, sizeof name, "input%d", i);
        if (i < d->n_inputs) {
            ops[i] = pl_graph_input(c->g, name, dtypes ? dtypes[i] : PL_DTYPE_F32, ndim[i],
                                    shapes[i]);
        } else { /* a shared parameter: a parameter of the private graph */
            ops[i] = pl_tensor_add(c->g, name, PL_TENSOR_PARAM, PL_DTYPE_F32, ndim[i],
                                   shapes[i]);
            if (ops[i]) {
                ops[i]->requires_grad = true;
                ops[i]->param_index = c->g->n_params++;
                ops[i]->init = PL_INIT_UNIFORM;
                ops[i]->init_scale = 1.0f;
            }
        }
        if (!ops[i]) return pl_last_status();
    }
    if (!pl_graph_op(c->g, d, ops, n, attrs, "op")) return pl_last_status();
    c->op = &c->g->ops[0];
    pl_op_call_template(c->g, c->op, &c->call);
    c->n_in = c->op->n_inputs;
    c->n_par = pl_op_n_params(c->op);
    return PL_STATUS_OK;
}

static pl_status fill(check *c, const pl_gradcheck_options *o) {
    uint64_t state = o->seed * PL_GOLDEN_GAMMA + 12345;
    /* A training pass with one fixed seed: a stochastic op (dropout) draws
     * the same random numbers in every forward and backward call of the
     * check, so it is a fixed differentiable function of its inputs. */
    c->call.training = true;
    c->call.seed = pl_stream_state(o->seed, 0);
    c->call.sample_offset = 0;
    for (int i = 0; i < c->n_in; i++) {
        const pl_tensor_t *t = c->g->tensors[c->op->in[i]];
        int64_t n = c->S * t->numel;
        if (t->dtype == PL_DTYPE_I32) {
            int32_t *v = alloc(n, sizeof *v);
            if (!(c->in[i] = v)) return pl_last_status();
            for (int64_t j = 0; j < n; j++)
                v[j] = (int32_t)(pl_splitmix64_next(&state) % (uint64_t)o->int_range);
        } else {
            float *v = alloc(n, sizeof *v);
            if (!(c->in[i] = v)) return pl_last_status();
            for (int64_t j = 0; j < n; j++)
                v[j] = (float)((double)(pl_splitmix64_next(&state) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
            if (!(c->din[i] = alloc(n, sizeof(float)))) return pl_last_status();
        }
    }
    for (int i = 0; i < c->n_par; i++) {
        const pl_tensor_t *p = c->g->tensors[c->op->in[c->op->n_inputs + i]];
        if (!(c->param[i] = alloc(p->numel, sizeof(float))) ||
            !(c->dparam[i] = alloc(p->numel, sizeof(float))))
            return pl_last_status();
        pl_param_init(c->g, p, c->param[i]);
        /* Ones and zeros (LayerNorm's defaults) would hide a wrong
         * parameter gradient's dependence on the values: perturb them. */
        for (int64_t j = 0; j < p->numel; j++)
            c->param[i][j] += (float)((double)(pl_splitmix64_next(&state) >> 11) * 0x1.0p-53 - 0.5);
    }
    c->out = out_scalar(c) ? alloc(2, sizeof(double))
                           : alloc(out_elems(c), sizeof(float));
    c->dout = alloc(out_elems(c), sizeof(float));
    c->saved = alloc(c->S * c->call.saved_numel, sizeof(float));
    if (!c->out || !c->dout || !c->saved) return pl_last_status();
    for (int64_t j = 0; j < out_elems(c); j++)
        c->dout[j] = (float)((double)(pl_splitmix64_next(&state) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
    return PL_STATUS_OK;
}

static pl_status check_all(check *c, const pl_gradcheck_options *o, worst *w) {
    const pl_op_def *d = c->def;
    double f0;
    pl_status st = objective(c, &f0); /* also fills the saved tensor */
    if (st) return st;
    bool scalar = out_scalar(c);
    c->call.dout = scalar ? NULL : c->dout;
    /* Input gradients. */
    for (int i = 0; i < c->n_in; i++) {
        const pl_tensor_t *t = c->g->tensors[c->op->in[i]];
        if (!d->backward_input[i].cpu || t->dtype != PL_DTYPE_F32) continue;
        int64_t n = c->S * t->numel;
        char label[40], name[64];
        snprintf(label, sizeof label, "backward_input[%d]", i);
        snprintf(name, sizeof name, "%s", t->name);
        c->call.input = i;
        c->call.accumulate = false;
        c->call.dinput = c->din[i];
        pl_op_call saved_call = c->call;
        st = run(c, d->backward_input[i].cpu, label);
        if (st) return st;
        float *first = malloc((size_t)n * sizeof *first);
        if (!first) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_gradcheck: out of memory");
        memcpy(first, c->din[i], (size_t)n * sizeof *first);
        c->call.accumulate = true;
        const char *names[1] = {name};
        st = check_accumulate(c, &c->call.dinput, &first, &n, 1, d->backward_input[i].cpu,
                              label, names);
        c->call = saved_call;
        if (!st) st = compare(c, (float *)c->in[i], first, n, o->eps, name, w);
        /* The fused loss kernel must give the same gradient. */
        if (!st && i == 0 && scalar && d->loss_forward.cpu) {
            c->call.dinput = c->din[i];
            st = run(c, d->loss_forward.cpu, "loss_forward");
            if (!st) st = compare(c, (float *)c->in[i], c->din[i], n, o->eps, name, w);
        }
        free(first);
        c->call = saved_call;
        c->call.dinput = NULL;
        if (st) return st;
    }
    /* Parameter gradients. */
    if (c->n_par > 0) {
        for (int i = 0; i < c->n_par; i++) c->call.accumulate_param[i] = false;
        memcpy(c->call.dparam, c->dparam, sizeof c->call.dparam);
        st = run(c, d->backward_weight.cpu, "backward_weight");
        int64_t n[PL_OP_MAX_PARAMS];
        const char *names[PL_OP_MAX_PARAMS];
        float *first[PL_OP_MAX_PARAMS] = {0};
        for (int i = 0; !st && i < c->n_par; i++) {
            const pl_tensor_t *p = c->g->tensors[c->op->in[c->op->n_inputs + i]];
            n[i] = p->numel;
            names[i] = p->name;
            if (!(first[i] = alloc(n[i], sizeof(float)))) st = pl_last_status();
            else memcpy(first[i], c->dparam[i], (size_t)n[i] * sizeof(float));
        }
        for (int i = 0; i < c->n_par; i++) c->call.accumulate_param[i] = true;
        if (!st)
            st = check_accumulate(c, c->call.dparam, first, n, c->n_par,
                                  d->backward_weight.cpu, "backward_weight", names);
        for (int i = 0; i < c->n_par; i++) c->call.accumulate_param[i] = false;
        for (int i = 0; !st && i < c->n_par; i++)
            st = compare(c, c->param[i], first[i], n[i], o->eps, names[i], w);
        for (int i = 0; i < c->n_par; i++) free(first[i]);
        if (st) return st;
    }
    return PL_STATUS_OK;
}

pl_status pl_gradcheck(const pl_op_def *def, const void *attrs, int n_inputs,
                       const int *ndim, const int64_t (*shapes)[PL_MAX_DIMS],
                       const pl_dtype *dtypes, const pl_gradcheck_options *opts,
                       pl_gradcheck_result *result) {
    pl_gradcheck_options o = opts ? *opts : pl_gradcheck_options_default();
    if (result) memset(result, 0, sizeof *result);
    if (!def || !ndim || !shapes)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_gradcheck: %s is NULL",
                       !def ? "def" : !ndim ? "ndim" : "shapes");
    const char *what = def->api ? def->api : def->name ? def->name : "?";
    if (n_inputs != def->n_inputs + def->n_shared_params)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_gradcheck: %s: %d shapes given, the op takes %d operands", what,
                       n_inputs, def->n_inputs + def->n_shared_params);
    if (o.samples < 1 || o.samples > 64 || !(o.eps > 0) || !(o.tolerance > 0) ||
        o.int_range < 1)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_gradcheck: %s: samples %lld must be in [1, 64], eps and "
                       "tolerance > 0, int_range >= 1", what, (long long)o.samples);
    check c = {.def = def, .S = o.samples, .what = what};
    worst w = {0};
    pl_status st = build(&c, attrs, ndim, shapes, dtypes);
    if (!st) st = fill(&c, &o);
    if (!st) st = check_all(&c, &o, &w);
    free_check(&c);
    if (result) {
        result->max_error = w.err;
        result->checked = w.checked;
        snprintf(result->worst, sizeof result->worst, "%s", w.where);
    }
    if (st) return st;
    if (w.err > o.tolerance)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_gradcheck: %s: the gradient of %s is %g analytic vs %g from "
                       "finite differences (relative error %.3g > tolerance %.3g)",
                       what, w.where, w.analytic, w.numeric, w.err, o.tolerance);
    return PL_STATUS_OK;
}
