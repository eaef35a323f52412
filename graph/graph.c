/* Building a model graph: tensors, parameters and ops, with every shape
 * checked when the op is added so that mistakes surface at build time with
 * both shapes and the op named, not as a crash inside a task. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/error.h"
#include "graph/graph_internal.h"
#include "util/checked_size.h"

/* Each op kind's short name and the public call that creates it, indexed
 * by pl_op_kind. */
static const struct {
    const char *kind, *api;
} OP_NAMES[] = {
    [PL_OP_LINEAR] = {"linear", "pl_linear"},
    [PL_OP_RELU] = {"relu", "pl_relu"},
    [PL_OP_GELU] = {"gelu", "pl_gelu"},
    [PL_OP_ADD] = {"add", "pl_add"},
    [PL_OP_CROSS_ENTROPY] = {"cross_entropy", "pl_cross_entropy"},
    [PL_OP_ACCURACY] = {"accuracy", "pl_accuracy"},
    [PL_OP_MEAN] = {"mean", "pl_mean"},
    [PL_OP_EMBEDDING] = {"embedding", "pl_embedding"},
    [PL_OP_LAYERNORM] = {"layernorm", "pl_layernorm"},
    [PL_OP_ATTENTION] = {"attention", "pl_attention"},
    [PL_OP_MATMUL] = {"matmul", "pl_linear_tied"},
};

const char *pl_op_kind_name(pl_op_kind kind) {
    return (unsigned)kind < sizeof OP_NAMES / sizeof *OP_NAMES ? OP_NAMES[kind].kind : "?";
}

const char *pl_op_api_name(pl_op_kind kind) {
    return (unsigned)kind < sizeof OP_NAMES / sizeof *OP_NAMES ? OP_NAMES[kind].api : "?";
}

const char *pl_op_describe(const pl_graph_t *g, const pl_op *op, char *buf,
                           size_t size) {
    if (op->user_named)
        snprintf(buf, size, "%s '%s'", pl_op_api_name(op->kind), op->name);
    else /* the user never saw the generated name: say which call */
        snprintf(buf, size, "%s of '%s'", pl_op_api_name(op->kind),
                 g->tensors[op->in[0]]->name);
    return buf;
}

pl_graph_t *pl_graph_new(uint64_t seed) {
    pl_graph_t *g = calloc(1, sizeof *g);
    if (!g) {
        pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_graph_new: out of memory");
        return NULL;
    }
    g->seed = seed;
    g->loss = g->output = -1;
    g->n_blocks = 1;
    return g;
}

void pl_graph_free(pl_graph_t *g) {
    if (!g) return;
    for (int i = 0; i < g->n_tensors; i++) free(g->tensors[i]);
    free(g->tensors);
    free(g->ops);
    free(g);
}

const char *pl_shape_str(const pl_tensor_t *t, char *buf, size_t size) {
    size_t n = 0;
    bool batched = t->kind == PL_TENSOR_INPUT || t->kind == PL_TENSOR_ACTIVATION;
    n += snprintf(buf + n, size - n, "[%s", batched ? "B" : "");
    for (int i = 0; i < t->ndim && n < size; i++)
        n += snprintf(buf + n, size - n, "%s%lld", (batched || i) ? ", " : "",
                      (long long)t->shape[i]);
    if (n < size) snprintf(buf + n, size - n, "]");
    return buf;
}

static pl_tensor_t *tensor_add(pl_graph_t *g, const char *name,
                               pl_tensor_kind kind, pl_dtype dtype, int ndim,
                               const int64_t *shape) {
    if (g->n_tensors == g->cap_tensors) {
        int cap = g->cap_tensors ? 2 * g->cap_tensors : 16;
        pl_tensor_t **t = realloc(g->tensors, cap * sizeof *t);
        if (!t) goto oom;
        g->tensors = t;
        g->cap_tensors = cap;
    }
    pl_tensor_t *t = calloc(1, sizeof *t);
    if (!t) goto oom;
    t->id = g->n_tensors;
    t->graph = g;
    t->owner_op = -1;
    snprintf(t->name, sizeof t->name, "%s", name);
    t->kind = kind;
    t->dtype = dtype;
    t->ndim = ndim;
    t->numel = 1;
    bool fits = true;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        fits = fits && pl_mul_i64(t->numel, shape[i], &t->numel);
    }
    /* A parameter, or one sample of an activation, must fit in one task
     * buffer; larger shapes are refused here, naming the tensor, rather
     * than wrapping around in a 32-bit length later. */
    if (!fits || t->numel > PL_MAX_BUFFER_ELEMS) {
        char s[96], n[32];
        if (fits) snprintf(n, sizeof n, "%lld", (long long)t->numel);
        pl_fail(PL_STATUS_INVALID_ARGUMENT,
                "tensor '%s' %s has %s elements%s; one buffer holds at most %lld "
                "(StarPU 1.3 vector lengths, 32-bit BLAS and CUDA indices)",
                name, pl_shape_str(t, s, sizeof s), fits ? n : "more than 2^63",
                kind == PL_TENSOR_PARAM ? "" : " per sample",
                (long long)PL_MAX_BUFFER_ELEMS);
        free(t);
        return NULL;
    }
    t->producer = -1;
    t->input_index = t->param_index = -1;
    g->tensors[g->n_tensors++] = t;
    return t;
oom:
    pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory adding tensor '%s'", name);
    return NULL;
}

static pl_op *op_add(pl_graph_t *g, pl_op_kind kind, const char *name) {
    /* Tensors an op creates before it fails are removed by op_abort, so a
     * failed call leaves the graph as it was (no orphan parameters). */
    g->mark_tensors = g->n_tensors;
    g->mark_params = g->n_params;
    if (g->n_ops == g->cap_ops) {
        int cap = g->cap_ops ? 2 * g->cap_ops : 16;
        pl_op *ops = realloc(g->ops, cap * sizeof *ops);
        if (!ops) {
            pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory adding op '%s'", name);
            return NULL;
        }
        g->ops = ops;
        g->cap_ops = cap;
    }
    pl_op *op = &g->ops[g->n_ops];
    memset(op, 0, sizeof *op);
    op->kind = kind;
    op->aux = -1;
    op->block = g->n_blocks - 1;
    op->user_named = name && *name;
    if (name && *name)
        snprintf(op->name, sizeof op->name, "%s", name);
    else
        snprintf(op->name, sizeof op->name, "%s%d", pl_op_kind_name(kind),
                 g->n_ops);
    return op;
}

/* Undoes the tensors of the op being built (see op_add); returns NULL for
 * the failing builder to return. The error is already set. */
static pl_tensor_t *op_abort(pl_graph_t *g) {
    for (int i = g->mark_tensors; i < g->n_tensors; i++) free(g->tensors[i]);
    g->n_tensors = g->mark_tensors;
    g->n_params = g->mark_params;
    return NULL;
}

/* Finishes an op whose output has been created: records it and links it. */
static pl_tensor_t *op_commit(pl_graph_t *g, pl_op *op, pl_tensor_t *out) {
    op->out = out->id;
    out->producer = g->n_ops;
    for (int i = 0; i < op->n_in; i++)
        if (g->tensors[op->in[i]]->requires_grad) out->requires_grad = true;
    g->n_ops++;
    return out;
}

/* A graph is frozen while an engine built from it exists: the engine has
 * registered StarPU data and planned its tasks for exactly these tensors
 * and ops, so a later op would be silently ignored or crash a step. */
static bool check_mutable(const char *fn, const pl_graph_t *g) {
    if (g->live_engines == 0) return true;
    pl_fail(PL_STATUS_INVALID_ARGUMENT,
            "%s: the graph is frozen: engine #%d was built from it with "
            "pl_engine_new; add inputs and ops before building an engine (or "
            "free the engine first)", fn, g->frozen_by);
    return false;
}

static bool check_graph_arg(const char *fn, pl_graph_t *g, pl_tensor_t *x,
                            const char *xname) {
    if (!g) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "%s: graph is NULL", fn);
        return false;
    }
    if (!check_mutable(fn, g)) return false;
    if (!x) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "%s: %s is NULL", fn, xname);
        return false;
    }
    if (x->id >= g->n_tensors || g->tensors[x->id] != x) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT,
                "%s: %s '%s' belongs to another graph", fn, xname, x->name);
        return false;
    }
    return true;
}

static bool check_float_activation(const char *fn, const pl_tensor_t *x) {
    char s[96];
    /* A wrong dtype is a wrong argument, as for float labels (not a shape
     * mismatch). */
    if (x->dtype != PL_DTYPE_F32) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT,
                "%s: '%s' %s is int32, must be a float32 activation", fn,
                x->name, pl_shape_str(x, s, sizeof s));
        return false;
    }
    if ((x->kind != PL_TENSOR_INPUT && x->kind != PL_TENSOR_ACTIVATION) ||
        x->ndim < 1) {
        pl_fail(PL_STATUS_SHAPE_MISMATCH,
                "%s: '%s' %s must be a float activation with at least one "
                "feature dim", fn, x->name, pl_shape_str(x, s, sizeof s));
        return false;
    }
    return true;
}

pl_tensor_t *pl_graph_input(pl_graph_t *g, const char *name, pl_dtype dtype,
                            int ndim, const int64_t *shape) {
    if (!g || !name) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_graph_input: %s is NULL",
                g ? "name" : "graph");
        return NULL;
    }
    if (!check_mutable("pl_graph_input", g)) return NULL;
    if (ndim < 0 || ndim >= PL_MAX_DIMS || (ndim > 0 && !shape)) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT,
                "pl_graph_input: '%s': ndim %d must be in [0, %d) with a shape",
                name, ndim, PL_MAX_DIMS);
        return NULL;
    }
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0) {
            pl_fail(PL_STATUS_INVALID_ARGUMENT,
                    "pl_graph_input: '%s': dim %d is %lld, must be > 0", name,
                    i, (long long)shape[i]);
            return NULL;
        }
    if (dtype != PL_DTYPE_F32 && dtype != PL_DTYPE_I32) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_graph_input: '%s': bad dtype %d",
                name, (int)dtype);
        return NULL;
    }
    pl_tensor_t *t = tensor_add(g, name, PL_TENSOR_INPUT, dtype, ndim, shape);
    if (t) t->input_index = g->n_inputs++;
    return t;
}

static pl_tensor_t *param_add(pl_graph_t *g, const char *op_name,
                              const char *suffix, int ndim,
                              const int64_t *shape, pl_init init,
                              float scale) {
    char name[64];
    snprintf(name, sizeof name, "%.48s.%.14s", op_name, suffix);
    /* Checkpoints address parameters by name: two with one name would
     * save, and load, only one of them. */
    const pl_op *op = &g->ops[g->n_ops]; /* the op being built */
    for (int i = 0; i < g->n_tensors; i++) {
        const pl_tensor_t *o = g->tensors[i];
        if (o->kind != PL_TENSOR_PARAM || strcmp(o->name, name) != 0) continue;
        const pl_op *owner = &g->ops[o->owner_op];
        pl_fail(PL_STATUS_INVALID_ARGUMENT,
                "%s '%s': parameter name '%s' is already taken by %s '%s' (op "
                "%d); give each layer its own name",
                pl_op_api_name(op->kind), op_name, name,
                pl_op_api_name(owner->kind), owner->name, o->owner_op);
        return NULL;
    }
    pl_tensor_t *p = tensor_add(g, name, PL_TENSOR_PARAM, PL_DTYPE_F32, ndim,
                                shape);
    if (!p) return NULL;
    p->owner_op = g->n_ops;
    p->requires_grad = true;
    p->param_index = g->n_params++;
    p->init = init;
    p->init_scale = scale;
    return p;
}

pl_tensor_t *pl_linear(pl_graph_t *g, pl_tensor_t *x, int64_t out_features,
                       const char *name) {
    if (!check_graph_arg("pl_linear", g, x, "x") ||
        !check_float_activation("pl_linear", x))
        return NULL;
    if (out_features <= 0) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT,
                "pl_linear: out_features %lld of '%s' must be > 0",
                (long long)out_features, name ? name : "linear");
        return NULL;
    }
    pl_op *op = op_add(g, PL_OP_LINEAR, name);
    if (!op) return NULL;
    int64_t in = pl_tensor_last_dim(x);
    float bound = 1.0f / sqrtf((float)in); /* PyTorch nn.Linear default */
    int64_t wshape[2] = {out_features, in};
    pl_tensor_t *w = param_add(g, op->name, "weight", 2, wshape,
                               PL_INIT_UNIFORM, bound);
    pl_tensor_t *b = w ? param_add(g, op->name, "bias", 1, &out_features,
                                   PL_INIT_UNIFORM, bound)
                       : NULL;
    if (!b) return op_abort(g);
    int64_t yshape[PL_MAX_DIMS];
    memcpy(yshape, x->shape, sizeof yshape);
    yshape[x->ndim - 1] = out_features;
    pl_tensor_t *y = tensor_add(g, op->name, PL_TENSOR_ACTIVATION,
                                PL_DTYPE_F32, x->ndim, yshape);
    if (!y) return op_abort(g);
    op = &g->ops[g->n_ops]; /* tensor_add cannot move ops, but be explicit */
    op->n_in = 3;
    op->in[0] = x->id;
    op->in[1] = w->id;
    op->in[2] = b->id;
    return op_commit(g, op, y);
}

static pl_tensor_t *unary(pl_graph_t *g, pl_tensor_t *x, pl_op_kind kind,
                          const char *fn) {
    if (!check_graph_arg(fn, g, x, "x") || !check_float_activation(fn, x))
        return NULL;
    pl_op *op = op_add(g, kind, NULL);
    if (!op) return NULL;
    pl_tensor_t *y = tensor_add(g, op->name, PL_TENSOR_ACTIVATION,
                                PL_DTYPE_F32, x->ndim, x->shape);
    if (!y) return op_abort(g);
    op->n_in = 1;
    op->in[0] = x->id;
    return op_commit(g, op, y);
}

pl_tensor_t *pl_relu(pl_graph_t *g, pl_tensor_t *x) {
    return unary(g, x, PL_OP_RELU, "pl_relu");
}
pl_tensor_t *pl_gelu(pl_graph_t *g, pl_tensor_t *x) {
    return unary(g, x, PL_OP_GELU, "pl_gelu");
}

static bool same_shape(const pl_tensor_t *a, const pl_tensor_t *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

pl_tensor_t *pl_add(pl_graph_t *g, pl_tensor_t *a, pl_tensor_t *b,
                    const char *name) {
    if (!check_graph_arg("pl_add", g, a, "a") ||
        !check_graph_arg("pl_add", g, b, "b") ||
        !check_float_activation("pl_add", a) ||
        !check_float_activation("pl_add", b))
        return NULL;
    if (!same_shape(a, b)) {
        char sa[96], sb[96];
        pl_fail(PL_STATUS_SHAPE_MISMATCH,
                "pl_add '%s': shapes %s of '%s' and %s of '%s' differ",
                name ? name : "add", pl_shape_str(a, sa, sizeof sa), a->name,
                pl_shape_str(b, sb, sizeof sb), b->name);
        return NULL;
    }
    pl_op *op = op_add(g, PL_OP_ADD, name);
    if (!op) return NULL;
    pl_tensor_t *y = tensor_add(g, op->name, PL_TENSOR_ACTIVATION,
                                PL_DTYPE_F32, a->ndim, a->shape);
    if (!y) return op_abort(g);
    op->n_in = 2;
    op->in[0] = a->id;
    op->in[1] = b->id;
    return op_commit(g, op, y);
}

/* Logits [B, ..., K] against labels [B, ...]: the leading dims must agree. */
static bool check_logits_labels(const char *fn, pl_tensor_t *logits,
                                pl_tensor_t *labels) {
    char sl[96], sy[96];
    if (labels->kind != PL_TENSOR_INPUT || labels->dtype != PL_DTYPE_I32) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT,
                "%s: labels '%s' must be an int32 input", fn, labels->name);
        return false;
    }
    bool ok = labels->ndim == logits->ndim - 1;
    for (int i = 0; ok && i < labels->ndim; i++)
        ok = labels->shape[i] == logits->shape[i];
    if (!ok)
        pl_fail(PL_STATUS_SHAPE_MISMATCH,
                "%s: logits '%s' %s and labels '%s' %s disagree (labels must "
                "be the logits' shape without the class dim)",
                fn, logits->name, pl_shape_str(logits, sl, sizeof sl),
                labels->name, pl_shape_str(labels, sy, sizeof sy));
    return ok;
}

static pl_tensor_t *scalar_op(pl_graph_t *g, pl_op_kind kind, const char *fn,
                              pl_tensor_t *x, pl_tensor_t *labels) {
    if (!check_graph_arg(fn, g, x, "input") || !check_float_activation(fn, x))
        return NULL;
    if (labels && (!check_graph_arg(fn, g, labels, "labels") ||
                   !check_logits_labels(fn, x, labels)))
        return NULL;
    pl_op *op = op_add(g, kind, NULL);
    if (!op) return NULL;
    pl_tensor_t *y = tensor_add(g, op->name, PL_TENSOR_SCALAR, PL_DTYPE_F32,
                                0, NULL);
    if (!y) return op_abort(g);
    op->n_in = labels ? 2 : 1;
    op->in[0] = x->id;
    if (labels) op->in[1] = labels->id;
    y = op_commit(g, op, y);
    if (kind == PL_OP_ACCURACY) y->requires_grad = false; /* a metric */
    return y;
}

pl_tensor_t *pl_cross_entropy(pl_graph_t *g, pl_tensor_t *logits,
                              pl_tensor_t *labels) {
    if (!labels) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_cross_entropy: labels is NULL");
        return NULL;
    }
    return scalar_op(g, PL_OP_CROSS_ENTROPY, "pl_cross_entropy", logits, labels);
}

pl_tensor_t *pl_accuracy(pl_graph_t *g, pl_tensor_t *logits,
                         pl_tensor_t *labels) {
    if (!labels) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_accuracy: labels is NULL");
        return NULL;
    }
    return scalar_op(g, PL_OP_ACCURACY, "pl_accuracy", logits, labels);
}

pl_tensor_t *pl_mean(pl_graph_t *g, pl_tensor_t *x) {
    return scalar_op(g, PL_OP_MEAN, "pl_mean", x, NULL);
}

pl_status pl_graph_set_loss(pl_graph_t *g, pl_tensor_t *loss) {
    if (!g || !loss)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_graph_set_loss: %s is NULL",
                       g ? "loss" : "graph");
    if (!check_mutable("pl_graph_set_loss", g)) return pl_last_status();
    /* Its id and producer index would point into this graph's arrays. */
    if (loss->id >= g->n_tensors || g->tensors[loss->id] != loss)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_graph_set_loss: loss '%s' belongs to another graph",
                       loss->name);
    if (loss->kind != PL_TENSOR_SCALAR || !loss->requires_grad ||
        g->ops[loss->producer].kind == PL_OP_ACCURACY)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_graph_set_loss: '%s' is not a differentiable scalar "
                       "(use pl_cross_entropy or pl_mean of a model output)",
                       loss->name);
    g->loss = loss->id;
    return PL_STATUS_OK;
}

pl_status pl_graph_set_output(pl_graph_t *g, pl_tensor_t *output) {
    if (!g || !output)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_graph_set_output: %s is NULL", g ? "output" : "graph");
    if (!check_mutable("pl_graph_set_output", g)) return pl_last_status();
    if (output->id >= g->n_tensors || g->tensors[output->id] != output)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_graph_set_output: output '%s' belongs to another graph",
                       output->name);
    if (output->kind != PL_TENSOR_ACTIVATION || output->dtype != PL_DTYPE_F32)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_graph_set_output: '%s' is not a float activation",
                       output->name);
    g->output = output->id;
    return PL_STATUS_OK;
}

const char *pl_tensor_name(const pl_tensor_t *t) { return t ? t->name : NULL; }

int pl_tensor_shape(const pl_tensor_t *t, int64_t *shape) {
    if (!t) return -1;
    if (shape) memcpy(shape, t->shape, sizeof t->shape);
    return t->ndim;
}

int64_t pl_tensor_numel(const pl_tensor_t *t) { return t ? t->numel : -1; }

int pl_graph_num_params(const pl_graph_t *g) { return g ? g->n_params : 0; }

pl_tensor_t *pl_graph_param(const pl_graph_t *g, int index) {
    if (!g || index < 0 || index >= g->n_params) return NULL;
    for (int i = 0; i < g->n_tensors; i++)
        if (g->tensors[i]->param_index == index) return g->tensors[i];
    return NULL;
}

pl_tensor_t *pl_graph_find(const pl_graph_t *g, const char *name) {
    if (!g || !name) return NULL;
    for (int i = 0; i < g->n_tensors; i++)
        if (strcmp(g->tensors[i]->name, name) == 0) return g->tensors[i];
    return NULL;
}

int64_t pl_graph_param_count(const pl_graph_t *g) {
    int64_t n = 0;
    for (int i = 0; g && i < g->n_tensors; i++)
        if (g->tensors[i]->kind == PL_TENSOR_PARAM) n += g->tensors[i]->numel;
    return n;
}

/* ------------------------------------------------------ transformer ops */

pl_status pl_param_set_init(pl_tensor_t *param, pl_init init, float scale) {
    if (!param)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_param_set_init: param is NULL");
    if (param->kind != PL_TENSOR_PARAM)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_param_set_init: '%s' is not a parameter", param->name);
    if (!check_mutable("pl_param_set_init", param->graph)) return pl_last_status();
    if (init < PL_INIT_UNIFORM || init > PL_INIT_ONES || !(scale >= 0.0f))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_param_set_init: '%s': bad init %d or scale %g",
                       param->name, (int)init, scale);
    param->init = init;
    param->init_scale = scale;
    return PL_STATUS_OK;
}

int pl_graph_begin_block(pl_graph_t *g, const char *name) {
    (void)name; /* blocks are numbered; names may label traces later */
    if (!g) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_graph_begin_block: graph is NULL");
        return -1;
    }
    if (!check_mutable("pl_graph_begin_block", g)) return -1;
    /* An empty block 0 (nothing created yet) is reused. */
    if (g->n_ops > 0 && g->ops[g->n_ops - 1].block == g->n_blocks - 1) g->n_blocks++;
    return g->n_blocks - 1;
}

int pl_graph_num_blocks(const pl_graph_t *g) {
    if (!g) return 0;
    return g->n_ops ? g->ops[g->n_ops - 1].block + 1 : 0;
}

/* A [T]-shaped int32 input (tokens) or a float activation [T, C]. */
static bool check_tokens(const char *fn, const pl_tensor_t *tokens) {
    char s[96];
    if (tokens->kind != PL_TENSOR_INPUT || tokens->dtype != PL_DTYPE_I32 ||
        tokens->ndim != 1) {
        pl_fail(PL_STATUS_SHAPE_MISMATCH,
                "%s: tokens '%s' %s must be an int32 input of shape [B, T]", fn,
                tokens->name, pl_shape_str(tokens, s, sizeof s));
        return false;
    }
    return true;
}

pl_tensor_t *pl_embedding(pl_graph_t *g, pl_tensor_t *tokens, int64_t vocab,
                          int64_t channels, const char *name) {
    if (!check_graph_arg("pl_embedding", g, tokens, "tokens") ||
        !check_tokens("pl_embedding", tokens))
        return NULL;
    if (vocab <= 0 || channels <= 0 || vocab > INT32_MAX) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT,
                "pl_embedding: vocab %lld and channels %lld must be > 0",
                (long long)vocab, (long long)channels);
        return NULL;
    }
    pl_op *op = op_add(g, PL_OP_EMBEDDING, name);
    if (!op) return NULL;
    int64_t T = tokens->shape[0];
    int64_t wte_shape[2] = {vocab, channels}, wpe_shape[2] = {T, channels};
    pl_tensor_t *wte = param_add(g, op->name, "wte", 2, wte_shape, PL_INIT_NORMAL, 0.02f);
    pl_tensor_t *wpe = wte ? param_add(g, op->name, "wpe", 2, wpe_shape,
                                       PL_INIT_NORMAL, 0.02f)
                           : NULL;
    if (!wpe) return op_abort(g);
    pl_tensor_t *y = tensor_add(g, op->name, PL_TENSOR_ACTIVATION, PL_DTYPE_F32, 2,
                                wpe_shape);
    char errname[64];
    snprintf(errname, sizeof errname, "%.50s.errors", op->name);
    pl_tensor_t *err = y ? tensor_add(g, errname, PL_TENSOR_SCALAR, PL_DTYPE_F32,
                                      0, NULL)
                         : NULL;
    if (!err) return op_abort(g);
    err->aux = true;
    err->producer = g->n_ops;
    op->aux = err->id;
    op->n_in = 3;
    op->in[0] = tokens->id;
    op->in[1] = wte->id;
    op->in[2] = wpe->id;
    return op_commit(g, op, y);
}

pl_tensor_t *pl_layernorm(pl_graph_t *g, pl_tensor_t *x, const char *name) {
    if (!check_graph_arg("pl_layernorm", g, x, "x") ||
        !check_float_activation("pl_layernorm", x))
        return NULL;
    pl_op *op = op_add(g, PL_OP_LAYERNORM, name);
    if (!op) return NULL;
    int64_t C = pl_tensor_last_dim(x);
    pl_tensor_t *w = param_add(g, op->name, "weight", 1, &C, PL_INIT_ONES, 1.0f);
    pl_tensor_t *b = w ? param_add(g, op->name, "bias", 1, &C, PL_INIT_ZEROS, 0.0f)
                       : NULL;
    pl_tensor_t *y = b ? tensor_add(g, op->name, PL_TENSOR_ACTIVATION,
                                    PL_DTYPE_F32, x->ndim, x->shape)
                       : NULL;
    if (!y) return op_abort(g);
    op->n_in = 3;
    op->in[0] = x->id;
    op->in[1] = w->id;
    op->in[2] = b->id;
    return op_commit(g, op, y);
}

pl_tensor_t *pl_attention(pl_graph_t *g, pl_tensor_t *qkv, int64_t heads,
                          const char *name) {
    if (!check_graph_arg("pl_attention", g, qkv, "qkv") ||
        !check_float_activation("pl_attention", qkv))
        return NULL;
    char s[96];
    int64_t C3 = pl_tensor_last_dim(qkv);
    if (qkv->ndim != 2 || C3 % 3 != 0) {
        pl_fail(PL_STATUS_SHAPE_MISMATCH,
                "pl_attention '%s': qkv '%s' %s must be [B, T, 3C]",
                name ? name : "attention", qkv->name, pl_shape_str(qkv, s, sizeof s));
        return NULL;
    }
    int64_t T = qkv->shape[0], C = C3 / 3;
    if (heads <= 0 || C % heads != 0) {
        pl_fail(PL_STATUS_SHAPE_MISMATCH,
                "pl_attention '%s': channels %lld not divisible by heads %lld",
                name ? name : "attention", (long long)C, (long long)heads);
        return NULL;
    }
    pl_op *op = op_add(g, PL_OP_ATTENTION, name);
    if (!op) return NULL;
    int64_t yshape[2] = {T, C}, ashape[3] = {heads, T, T};
    pl_tensor_t *y = tensor_add(g, op->name, PL_TENSOR_ACTIVATION, PL_DTYPE_F32, 2,
                                yshape);
    char attname[64];
    snprintf(attname, sizeof attname, "%.50s.att", op->name);
    pl_tensor_t *att = y ? tensor_add(g, attname, PL_TENSOR_ACTIVATION,
                                      PL_DTYPE_F32, 3, ashape)
                         : NULL;
    if (!att) return op_abort(g);
    att->aux = true;
    att->producer = g->n_ops;
    op->aux = att->id;
    op->heads = heads;
    op->n_in = 1;
    op->in[0] = qkv->id;
    return op_commit(g, op, y);
}

pl_tensor_t *pl_linear_tied(pl_graph_t *g, pl_tensor_t *x, pl_tensor_t *weight,
                            const char *name) {
    if (!check_graph_arg("pl_linear_tied", g, x, "x") ||
        !check_graph_arg("pl_linear_tied", g, weight, "weight") ||
        !check_float_activation("pl_linear_tied", x))
        return NULL;
    char sx[96], sw[96];
    if (weight->kind != PL_TENSOR_PARAM || weight->ndim != 2 ||
        weight->shape[1] != pl_tensor_last_dim(x)) {
        pl_fail(PL_STATUS_SHAPE_MISMATCH,
                "pl_linear_tied '%s': input '%s' %s and weight '%s' %s disagree "
                "(weight must be a parameter [out, %lld])",
                name ? name : "matmul", x->name, pl_shape_str(x, sx, sizeof sx),
                weight->name, pl_shape_str(weight, sw, sizeof sw),
                (long long)pl_tensor_last_dim(x));
        return NULL;
    }
    pl_op *op = op_add(g, PL_OP_MATMUL, name);
    if (!op) return NULL;
    int64_t yshape[PL_MAX_DIMS];
    memcpy(yshape, x->shape, sizeof yshape);
    yshape[x->ndim - 1] = weight->shape[0];
    pl_tensor_t *y = tensor_add(g, op->name, PL_TENSOR_ACTIVATION, PL_DTYPE_F32,
                                x->ndim, yshape);
    if (!y) return op_abort(g);
    op->n_in = 2;
    op->in[0] = x->id;
    op->in[1] = weight->id;
    return op_commit(g, op, y);
}
