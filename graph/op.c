/* Adding an op to a graph through the public op interface (pleiades/op.h):
 * the one builder every op goes through, built-in or user-defined. It
 * checks the definition and the operands, asks the op's shape function for
 * the output and parameter shapes, and creates the tensors. A failure at
 * any point leaves the graph as it was (no orphan parameters). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/error.h"
#include "graph/graph_internal.h"

const char *pl_op_api_name(const pl_op *op) {
    return op->def->api ? op->def->api : op->def->name;
}

/* "pl_linear 'fc1'" when the caller named the op; the call alone when the
 * name was generated (the user never saw "relu3"). */
static const char *describe_new(const pl_op_def *def, const char *name, char *buf,
                                size_t size) {
    const char *api = def->api ? def->api : def->name;
    if (name && *name)
        snprintf(buf, size, "%s '%s'", api, name);
    else
        snprintf(buf, size, "%s", api);
    return buf;
}

const char *pl_op_describe(const pl_graph_t *g, const pl_op *op, char *buf,
                           size_t size) {
    if (op->user_named)
        snprintf(buf, size, "%s '%s'", pl_op_api_name(op), op->name);
    else /* say which call, and on what */
        snprintf(buf, size, "%s of '%s'", pl_op_api_name(op),
                 g->tensors[op->in[0]]->name);
    return buf;
}

pl_status pl_error(pl_status status, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return pl_fail(status, "%s", msg);
}

pl_dtype pl_tensor_dtype(const pl_tensor_t *t) { return t ? t->dtype : PL_DTYPE_F32; }

bool pl_tensor_is_param(const pl_tensor_t *t) { return t && t->kind == PL_TENSOR_PARAM; }

const char *pl_tensor_shape_str(const pl_tensor_t *t, char *buf, size_t size) {
    if (!t) {
        snprintf(buf, size, "(null)");
        return buf;
    }
    return pl_shape_str(t, buf, size);
}

static const char *input_name(const pl_op_def *def, int i, char *buf, size_t size) {
    if (i < def->n_inputs)
        snprintf(buf, size, "input %d", i);
    else
        snprintf(buf, size, "shared parameter %d", i - def->n_inputs);
    return buf;
}

static bool has_kernel(const pl_op_kernels *k) { return k->cpu || k->cuda; }

/* What a definition must hold before anything is built. */
static pl_status check_def(const pl_op_def *def) {
    if (!def->name || !*def->name)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_graph_op: the op definition has no name");
    const char *n = def->api ? def->api : def->name;
    if (def->n_inputs < 1 || def->n_inputs > PL_OP_MAX_INPUTS)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "op '%s': n_inputs %d must be in [1, %d]", n, def->n_inputs,
                       PL_OP_MAX_INPUTS);
    if (def->n_shared_params < 0 || def->n_shared_params > PL_OP_MAX_PARAMS)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "op '%s': n_shared_params %d must be in [0, %d]", n,
                       def->n_shared_params, PL_OP_MAX_PARAMS);
    if (!def->shape)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "op '%s': no shape function", n);
    /* Every task must be able to run on a CPU worker: CPU-only runtimes
     * (CI, laptops) and the gradient check need it. */
    if (!def->forward.cpu)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "op '%s': no CPU forward kernel", n);
    for (int i = 0; i < PL_OP_MAX_INPUTS; i++) {
        const pl_op_kernels *k = &def->backward_input[i];
        if (has_kernel(k) && (i >= def->n_inputs || !k->cpu))
            return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                           i >= def->n_inputs
                               ? "op '%s': backward_input[%d] given, but the op has %d inputs"
                               : "op '%s': backward_input[%d] has no CPU kernel",
                           n, i, def->n_inputs);
    }
    if (has_kernel(&def->backward_weight) && !def->backward_weight.cpu)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "op '%s': backward_weight has no CPU kernel", n);
    if (has_kernel(&def->loss_forward) &&
        (!def->loss_forward.cpu || def->output != PL_OP_OUTPUT_SCALAR))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "op '%s': loss_forward needs a CPU kernel and a scalar output", n);
    if (def->output != PL_OP_OUTPUT_ACTIVATION && def->output != PL_OP_OUTPUT_SCALAR)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "op '%s': bad output kind %d", n,
                       (int)def->output);
    unsigned all = PL_OP_READS_INPUTS | PL_OP_READS_PARAMS | PL_OP_READS_SAVED |
                   PL_OP_READS_OUTPUT;
    if ((def->backward_input_reads | def->backward_weight_reads) & ~all)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "op '%s': unknown PL_OP_READS_ bits", n);
    return PL_STATUS_OK;
}

static bool valid_shape(int ndim, const int64_t *shape, int min_ndim) {
    if (ndim < min_ndim || ndim > PL_MAX_DIMS) return false;
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0) return false;
    return true;
}

/* What the shape function declared must be usable as is. */
static pl_status check_layout(const pl_op_def *def, const char *what,
                              const pl_op_layout *l) {
    if (def->output == PL_OP_OUTPUT_ACTIVATION && !valid_shape(l->out_ndim, l->out_shape, 0))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "%s: the shape function declared an output of %d dims with a "
                       "dim <= 0 or more than %d dims", what, l->out_ndim, PL_MAX_DIMS);
    if (l->n_params < 0 || l->n_params + def->n_shared_params > PL_OP_MAX_PARAMS)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "%s: %d parameters declared (plus %d shared); at most %d", what,
                       l->n_params, def->n_shared_params, PL_OP_MAX_PARAMS);
    for (int i = 0; i < l->n_params; i++) {
        const pl_op_param_decl *p = &l->params[i];
        if (!p->name || !*p->name || !valid_shape(p->ndim, p->shape, 1) ||
            p->init < PL_INIT_UNIFORM || p->init > PL_INIT_ONES || !(p->scale >= 0.0f))
            return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                           "%s: parameter %d ('%s') has no name, a dim <= 0, or a bad "
                           "init", what, i, p->name ? p->name : "");
    }
    if (l->n_params + def->n_shared_params > 0 && !def->backward_weight.cpu)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "%s: the op has parameters but no backward_weight kernel", what);
    if (l->has_saved && !valid_shape(l->saved_ndim, l->saved_shape, 0))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "%s: the saved tensor has a dim <= 0 or more than %d dims", what,
                       PL_MAX_DIMS);
    if (!(l->flops >= 0.0) || !(l->scalar_count >= 0.0))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "%s: flops and scalar_count must be >= 0", what);
    return PL_STATUS_OK;
}

/* Checks the operands the caller passed against the definition. */
static pl_status check_operands(const pl_op_def *def, const char *what, pl_graph_t *g,
                                pl_tensor_t *const *in, int n_in) {
    int want = def->n_inputs + def->n_shared_params;
    if (n_in != want || (n_in > 0 && !in))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "%s: %d operands given, the op takes %d (%d inputs, %d shared "
                       "parameters)", what, in ? n_in : 0, want, def->n_inputs,
                       def->n_shared_params);
    for (int i = 0; i < n_in; i++) {
        char nb[40];
        const char *nm = def->input_names[i] ? def->input_names[i]
                                             : input_name(def, i, nb, sizeof nb);
        pl_tensor_t *t = in[i];
        if (!t) return pl_fail(PL_STATUS_INVALID_ARGUMENT, "%s: %s is NULL", what, nm);
        if (t->id >= g->n_tensors || g->tensors[t->id] != t)
            return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                           "%s: %s '%s' belongs to another graph", what, nm, t->name);
        bool param = t->kind == PL_TENSOR_PARAM;
        if (i < def->n_inputs && (param || t->kind == PL_TENSOR_SCALAR))
            return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                           "%s: %s '%s' is a %s, not a per-sample input or activation",
                           what, nm, t->name, param ? "parameter" : "scalar");
        if (i >= def->n_inputs && !param)
            return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                           "%s: %s '%s' must be a parameter", what, nm, t->name);
    }
    return PL_STATUS_OK;
}

/* Tensors an op creates before it fails are removed, so a failed call
 * leaves the graph as it was. */
static pl_tensor_t *op_abort(pl_graph_t *g, int mark_tensors, int mark_params) {
    for (int i = mark_tensors; i < g->n_tensors; i++) free(g->tensors[i]);
    g->n_tensors = mark_tensors;
    g->n_params = mark_params;
    return NULL;
}

/* A tensor the op creates must not take a name in use: pl_graph_find
 * would find only one of the two, and checkpoints, which address
 * parameters by name, would save and load only one of them. */
static bool name_free(pl_graph_t *g, const pl_op *op, const char *name, const char *what) {
    const pl_tensor_t *o = pl_graph_named(g, name);
    if (!o) return true;
    char other[256];
    if (o->kind == PL_TENSOR_PARAM && o->owner_op >= 0 && !strcmp(what, "parameter")) {
        const pl_op *owner = &g->ops[o->owner_op];
        pl_fail(PL_STATUS_INVALID_ARGUMENT,
                "%s '%s': %s name '%s' is already taken by %s '%s' (op %d); give each "
                "layer its own name", pl_op_api_name(op), op->name, what, name,
                pl_op_api_name(owner), owner->name, o->owner_op);
    } else {
        pl_fail(PL_STATUS_INVALID_ARGUMENT,
                "%s '%s': %s name '%s' is already taken by %s; names must be unique "
                "(pl_graph_find, checkpoints)", pl_op_api_name(op), op->name, what, name,
                pl_tensor_describe(g, o, other, sizeof other));
    }
    return false;
}

static pl_tensor_t *param_add(pl_graph_t *g, const pl_op *op, const pl_op_param_decl *d) {
    char name[64];
    snprintf(name, sizeof name, "%.48s.%.14s", op->name, d->name);
    if (!name_free(g, op, name, "parameter")) return NULL;
    pl_tensor_t *p = pl_tensor_add(g, name, PL_TENSOR_PARAM, PL_DTYPE_F32, d->ndim,
                                   d->shape);
    if (!p) return NULL;
    p->owner_op = g->n_ops;
    p->requires_grad = true;
    p->param_index = g->n_params++;
    p->init = d->init;
    p->init_scale = d->scale;
    return p;
}

/* A second per-tile output of the op ("<op>.att", "<op>.errors"). */
static pl_tensor_t *aux_add(pl_graph_t *g, const pl_op *op, const char *suffix,
                            pl_tensor_kind kind, int ndim, const int64_t *shape) {
    char name[64];
    snprintf(name, sizeof name, "%.50s.%.12s", op->name, suffix);
    if (!name_free(g, op, name, "auxiliary tensor")) return NULL;
    pl_tensor_t *t = pl_tensor_add(g, name, kind, PL_DTYPE_F32, ndim, shape);
    if (t) {
        t->aux = true;
        t->producer = g->n_ops;
    }
    return t;
}

static pl_op *op_slot(pl_graph_t *g) {
    if (g->n_ops == g->cap_ops) {
        int cap = g->cap_ops ? 2 * g->cap_ops : 16;
        pl_op *ops = realloc(g->ops, cap * sizeof *ops);
        if (!ops) return NULL;
        g->ops = ops;
        g->cap_ops = cap;
    }
    return &g->ops[g->n_ops];
}

pl_tensor_t *pl_graph_op(pl_graph_t *g, const pl_op_def *def, pl_tensor_t *const *in,
                         int n_in, const void *attrs, const char *name) {
    if (!def) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_graph_op: def is NULL");
        return NULL;
    }
    if (check_def(def)) return NULL;
    char what[128];
    describe_new(def, name, what, sizeof what);
    if (!g) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "%s: graph is NULL", what);
        return NULL;
    }
    if (!pl_graph_check_mutable(what, g)) return NULL;
    if (check_operands(def, what, g, in, n_in)) return NULL;
    if (def->attrs_size > 0 && !attrs) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "%s: attrs is NULL (the op takes %zu bytes)",
                what, def->attrs_size);
        return NULL;
    }
    pl_op_layout layout = {0};
    pl_clear_error();
    if (def->shape(def, what, in, attrs, &layout) != PL_STATUS_OK) {
        if (!*pl_last_error()) /* a user shape function that gave no reason */
            pl_fail(PL_STATUS_SHAPE_MISMATCH, "%s: the shape function refused the operands",
                    what);
        return NULL;
    }
    if (check_layout(def, what, &layout)) return NULL;

    pl_op *op = op_slot(g);
    void *copy = def->attrs_size ? malloc(def->attrs_size) : NULL;
    if (!op || (def->attrs_size && !copy)) {
        free(copy);
        pl_fail(PL_STATUS_OUT_OF_MEMORY, "%s: out of memory", what);
        return NULL;
    }
    if (copy) memcpy(copy, attrs, def->attrs_size);
    memset(op, 0, sizeof *op);
    op->def = def;
    op->attrs = copy;
    op->saved = op->invalid = -1;
    op->block = g->n_blocks - 1;
    op->user_named = name && *name;
    op->flops = layout.flops;
    op->scalar_count = layout.scalar_count > 0 ? layout.scalar_count : 1.0;
    if (op->user_named) {
        snprintf(op->name, sizeof op->name, "%s", name);
    } else {
        /* A generated name that a user's took ("relu3" given to pl_add)
         * gets a suffix: the user never saw it, and it must be unique. */
        snprintf(op->name, sizeof op->name, "%.40s%d", def->name, g->n_ops);
        for (int k = 2; pl_graph_named(g, op->name); k++)
            snprintf(op->name, sizeof op->name, "%.40s%d_%d", def->name, g->n_ops, k);
    }
    op->n_inputs = def->n_inputs;
    for (int i = 0; i < n_in; i++) op->in[i] = in[i]->id;
    op->n_in = n_in;

    int mark_tensors = g->n_tensors, mark_params = g->n_params;
    /* Creation order (parameters, output, saved, counter) fixes parameter
     * indices, and with them each parameter's initialisation stream. */
    for (int i = 0; i < layout.n_params; i++) {
        pl_tensor_t *p = param_add(g, op, &layout.params[i]);
        if (!p) goto fail;
        op->in[op->n_in++] = p->id;
    }
    bool scalar = def->output == PL_OP_OUTPUT_SCALAR;
    /* The op's name is its output's (a generated one is free already). */
    if (op->user_named && !name_free(g, op, op->name, "the op's")) goto fail;
    pl_tensor_t *y = pl_tensor_add(g, op->name,
                                   scalar ? PL_TENSOR_SCALAR : PL_TENSOR_ACTIVATION,
                                   PL_DTYPE_F32, scalar ? 0 : layout.out_ndim,
                                   layout.out_shape);
    if (!y) goto fail;
    if (layout.has_saved) {
        pl_tensor_t *s = aux_add(g, op, layout.saved_name ? layout.saved_name : "saved",
                                 PL_TENSOR_ACTIVATION, layout.saved_ndim,
                                 layout.saved_shape);
        if (!s) goto fail;
        op->saved = s->id;
    }
    if (def->counts_invalid && !scalar) {
        pl_tensor_t *c = aux_add(g, op, "errors", PL_TENSOR_SCALAR, 0, NULL);
        if (!c) goto fail;
        op->invalid = c->id;
    }
    op->out = y->id;
    y->producer = g->n_ops;
    /* A gradient reaches the output when it can flow on to something that
     * needs one: a differentiable input that requires it, or parameters. */
    for (int i = 0; i < op->n_inputs; i++)
        if (def->backward_input[i].cpu && g->tensors[op->in[i]]->requires_grad)
            y->requires_grad = true;
    if (pl_op_n_params(op) > 0) y->requires_grad = true;
    g->n_ops++;
    return y;
fail:
    free(copy);
    return op_abort(g, mark_tensors, mark_params);
}
