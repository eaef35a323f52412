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
 * used as the denominator, so rounding of x ± h does not bias the slope.
 *
 * Each kernel gets exactly the buffers the engine would give its task
 * (engine/op_tasks.c): a backward kernel the inputs, parameters, saved
 * tensor and output only as its *_reads flags declare, NULL otherwise.
 * Before that, each backward kernel runs once with everything and once
 * per undeclared kind of operand with a poisoned copy of it (NaN; int32
 * values shifted): a result that changes means the kernel reads what it
 * did not declare, which the engine would hand it as NULL, and the check
 * names the missing flag instead of the kernel crashing there. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/op_tasks.h"
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
    /* Poisoned copies of the operands a backward kernel may read, for
     * the check of its *_reads flags: what run() gives in place of the
     * kinds in `poison` (PL_OP_READS_* bits) that the kernel did not
     * declare; give_all gives every operand as it is (the reference). */
    void *p_in[PL_OP_MAX_INPUTS];
    float *p_param[PL_OP_MAX_PARAMS];
    void *p_out;
    float *p_saved;
    unsigned poison;
    bool give_all;
} check;

/* What a kernel is, as the engine calls it. */
enum { K_FORWARD, K_LOSS, K_INPUT, K_WEIGHT };

#define READS_ALL \
    (PL_OP_READS_INPUTS | PL_OP_READS_PARAMS | PL_OP_READS_SAVED | PL_OP_READS_OUTPUT)

static unsigned reads_of(const check *c, int kind) {
    return kind == K_INPUT    ? c->def->backward_input_reads
           : kind == K_WEIGHT ? c->def->backward_weight_reads
                              : READS_ALL; /* forward tasks get every operand */
}

static void *alloc(size_t n, size_t elem) {
    void *p = calloc(n ? n : 1, elem);
    if (!p) pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_gradcheck: out of memory");
    return p;
}

static bool out_scalar(const check *c) { return c->def->output == PL_OP_OUTPUT_SCALAR; }

static int64_t out_elems(const check *c) { return c->S * c->call.out_numel; }

/* An operand of kind `flag` as the engine gives it to a kernel of `kind`:
 * the buffer when declared, else NULL. While the flags are checked: every
 * buffer as it is (give_all, the reference), or all but the kind being
 * probed (poison), which gets its poisoned copy. */
static void *operand(const check *c, int kind, unsigned flag, void *real, void *poisoned) {
    if (c->poison) return (c->poison & flag) ? poisoned : real;
    if (c->give_all || (reads_of(c, kind) & flag)) return real;
    return NULL;
}

static pl_status run(check *c, pl_op_kernel k, const char *label, int kind) {
    pl_op_call call = c->call;
    call.samples = c->S;
    for (int i = 0; i < c->n_in; i++)
        call.in[i] = operand(c, kind, PL_OP_READS_INPUTS, c->in[i], c->p_in[i]);
    for (int i = 0; i < c->n_par; i++)
        call.param[i] = operand(c, kind, PL_OP_READS_PARAMS, c->param[i], c->p_param[i]);
    call.out = operand(c, kind, PL_OP_READS_OUTPUT, c->out, c->p_out);
    call.saved = c->op->saved >= 0
                     ? operand(c, kind, PL_OP_READS_SAVED, c->saved, c->p_saved)
                     : NULL;
    bool forward = kind == K_FORWARD || kind == K_LOSS;
    /* The counter of invalid values exists for activation outputs that
     * count them; only forward tasks write it. */
    call.invalid = forward && c->op->invalid >= 0 ? c->invalid : NULL;
    if (forward) { /* no output gradient; nothing but the loss's dinput */
        call.dout = NULL;
        for (int i = 0; i < PL_OP_MAX_PARAMS; i++) call.dparam[i] = NULL;
    }
    if (kind != K_LOSS && kind != K_INPUT) call.dinput = NULL;
    if (kind != K_WEIGHT)
        for (int i = 0; i < PL_OP_MAX_PARAMS; i++) call.dparam[i] = NULL;
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
    pl_status st = run(c, c->def->forward.cpu, "forward", K_FORWARD);
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
                                  const char *label, int kind, const char *const *names) {
    float *orig[PL_OP_MAX_PARAMS] = {0}, *acc[PL_OP_MAX_PARAMS] = {0};
    pl_status st = PL_STATUS_OK;
    for (int o = 0; o < n_out && !st; o++) {
        if (!(acc[o] = alloc(n[o], sizeof(float)))) st = pl_last_status();
        for (int64_t j = 0; acc[o] && j < n[o]; j++) acc[o][j] = 1.0f;
        orig[o] = targets[o];
        targets[o] = acc[o];
    }
    if (!st) st = run(c, k, label, kind);
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

static const struct {
    unsigned flag;
    const char *name, *what;
} READ_FLAGS[] = {
    {PL_OP_READS_INPUTS, "PL_OP_READS_INPUTS", "the op's inputs (call->in)"},
    {PL_OP_READS_PARAMS, "PL_OP_READS_PARAMS", "its parameters (call->param)"},
    {PL_OP_READS_SAVED, "PL_OP_READS_SAVED", "its saved tensor (call->saved)"},
    {PL_OP_READS_OUTPUT, "PL_OP_READS_OUTPUT", "its output (call->out)"},
};

/* Whether kind `flag` of operand exists for this op (a kind it lacks
 * cannot be read). */
static bool has_operands(const check *c, unsigned flag) {
    return flag == PL_OP_READS_INPUTS   ? c->n_in > 0
           : flag == PL_OP_READS_PARAMS ? c->n_par > 0
           : flag == PL_OP_READS_SAVED  ? c->op->saved >= 0
                                        : true;
}

/* The *_reads flags of backward kernel k (kind K_INPUT or K_WEIGHT),
 * which writes the n_out buffers outs[o] (n[o] floats): run with every
 * operand as it is (the reference) and with a poisoned copy of one
 * undeclared kind of operand, it must do the same (succeed with the same
 * results, bit for bit, or fail both times), else it reads that kind and
 * the flag is missing. A kernel failing both times is left to the check
 * proper, which runs it as the engine would. */
static pl_status check_reads(check *c, pl_op_kernel k, const char *label, int kind,
                             float *const *outs, const int64_t *n, int n_out) {
    unsigned declared = reads_of(c, kind);
    const char *field = kind == K_INPUT ? "backward_input_reads" : "backward_weight_reads";
    float *ref[PL_OP_MAX_PARAMS] = {0};
    pl_status st = PL_STATUS_OK, ref_st = PL_STATUS_OK;
    bool probed = false;
    for (size_t f = 0; f < sizeof READ_FLAGS / sizeof READ_FLAGS[0] && !st; f++) {
        unsigned flag = READ_FLAGS[f].flag;
        if ((declared & flag) || !has_operands(c, flag)) continue;
        /* Every run starts from the same (zero) outputs, so that only
         * the operands can make them differ. */
        for (int o = 0; o < n_out; o++) memset(outs[o], 0, (size_t)n[o] * sizeof(float));
        if (!probed) { /* the reference, once: every operand as it is */
            c->give_all = true;
            ref_st = run(c, k, label, kind);
            c->give_all = false;
            for (int o = 0; o < n_out && !st; o++) {
                if (!(ref[o] = alloc(n[o], sizeof(float)))) st = pl_last_status();
                else memcpy(ref[o], outs[o], (size_t)n[o] * sizeof(float));
            }
            probed = true;
            if (st) break;
            for (int o = 0; o < n_out; o++) memset(outs[o], 0, (size_t)n[o] * sizeof(float));
        }
        c->poison = flag;
        pl_status poison_st = run(c, k, label, kind);
        c->poison = 0;
        bool differs = (poison_st != PL_STATUS_OK) != (ref_st != PL_STATUS_OK);
        for (int o = 0; o < n_out && !differs && !ref_st; o++)
            differs = memcmp(ref[o], outs[o], (size_t)n[o] * sizeof(float)) != 0;
        if (differs)
            st = pl_fail(PL_STATUS_INVALID_ARGUMENT,
                         "pl_gradcheck: %s: its %s kernel reads %s, but %s lacks %s: the "
                         "engine passes them only when declared (NULL otherwise), so in "
                         "training this kernel would crash or compute from garbage",
                         c->what, label, READ_FLAGS[f].what, field, READ_FLAGS[f].name);
    }
    for (int o = 0; o < n_out; o++) free(ref[o]);
    return st;
}

static void free_check(check *c) {
    for (int i = 0; i < PL_OP_MAX_INPUTS; i++) free(c->in[i]), free(c->din[i]);
    for (int i = 0; i < PL_OP_MAX_PARAMS; i++) free(c->param[i]), free(c->dparam[i]);
    for (int i = 0; i < PL_OP_MAX_INPUTS; i++) free(c->p_in[i]);
    for (int i = 0; i < PL_OP_MAX_PARAMS; i++) free(c->p_param[i]);
    free(c->p_out);
    free(c->p_saved);
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
    /* The poisoned operands: NaN where floats, where int32 (labels,
     * tokens) another valid value (out of range would crash the kernel
     * being probed). */
    for (int i = 0; i < c->n_in; i++) {
        const pl_tensor_t *t = c->g->tensors[c->op->in[i]];
        int64_t n = c->S * t->numel;
        if (!(c->p_in[i] = alloc(n, 4))) return pl_last_status();
        for (int64_t j = 0; j < n; j++) {
            if (t->dtype == PL_DTYPE_I32)
                ((int32_t *)c->p_in[i])[j] = (((int32_t *)c->in[i])[j] + 1) % o->int_range;
            else
                ((float *)c->p_in[i])[j] = NAN;
        }
    }
    for (int i = 0; i < c->n_par; i++) {
        int64_t n = c->g->tensors[c->op->in[c->op->n_inputs + i]]->numel;
        if (!(c->p_param[i] = alloc(n, sizeof(float)))) return pl_last_status();
        for (int64_t j = 0; j < n; j++) c->p_param[i][j] = NAN;
    }
    int64_t n_out = out_scalar(c) ? 2 * (int64_t)(sizeof(double) / sizeof(float)) : out_elems(c);
    int64_t n_saved = c->S * c->call.saved_numel;
    if (!(c->p_out = alloc(n_out, sizeof(float))) ||
        !(c->p_saved = alloc(n_saved, sizeof(float))))
        return pl_last_status();
    if (out_scalar(c)) ((double *)c->p_out)[0] = ((double *)c->p_out)[1] = NAN;
    else for (int64_t j = 0; j < n_out; j++) ((float *)c->p_out)[j] = NAN;
    for (int64_t j = 0; j < n_saved; j++) c->p_saved[j] = NAN;
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
        st = check_reads(c, d->backward_input[i].cpu, label, K_INPUT, &c->din[i], &n, 1);
        if (st) return st;
        st = run(c, d->backward_input[i].cpu, label, K_INPUT);
        if (st) return st;
        float *first = malloc((size_t)n * sizeof *first);
        if (!first) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_gradcheck: out of memory");
        memcpy(first, c->din[i], (size_t)n * sizeof *first);
        c->call.accumulate = true;
        const char *names[1] = {name};
        st = check_accumulate(c, &c->call.dinput, &first, &n, 1, d->backward_input[i].cpu,
                              label, K_INPUT, names);
        c->call = saved_call;
        if (!st) st = compare(c, (float *)c->in[i], first, n, o->eps, name, w);
        /* The fused loss kernel must give the same gradient. */
        if (!st && i == 0 && scalar && d->loss_forward.cpu) {
            c->call.dinput = c->din[i];
            st = run(c, d->loss_forward.cpu, "loss_forward", K_LOSS);
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
        int64_t n[PL_OP_MAX_PARAMS];
        const char *names[PL_OP_MAX_PARAMS];
        float *first[PL_OP_MAX_PARAMS] = {0};
        for (int i = 0; i < c->n_par; i++) {
            const pl_tensor_t *p = c->g->tensors[c->op->in[c->op->n_inputs + i]];
            n[i] = p->numel;
            names[i] = p->name;
        }
        st = check_reads(c, d->backward_weight.cpu, "backward_weight", K_WEIGHT, c->dparam, n,
                         c->n_par);
        if (!st) st = run(c, d->backward_weight.cpu, "backward_weight", K_WEIGHT);
        for (int i = 0; !st && i < c->n_par; i++) {
            if (!(first[i] = alloc(n[i], sizeof(float)))) st = pl_last_status();
            else memcpy(first[i], c->dparam[i], (size_t)n[i] * sizeof(float));
        }
        for (int i = 0; i < c->n_par; i++) c->call.accumulate_param[i] = true;
        if (!st)
            st = check_accumulate(c, c->call.dparam, first, n, c->n_par,
                                  d->backward_weight.cpu, "backward_weight", K_WEIGHT, names);
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
