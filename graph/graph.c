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
#include "util/live_set.h"

/* Every graph pl_graph_new made and pl_graph_free has not freed: a second
 * free is told from a first by the address alone. */
static pl_live_set live_graphs = PL_LIVE_SET_INIT;

pl_graph_t *pl_graph_new(uint64_t seed) {
    pl_graph_t *g = calloc(1, sizeof *g);
    if (!g || !pl_live_add(&live_graphs, g)) {
        free(g);
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
    if (!pl_live_has(&live_graphs, g)) {
        pl_refuse_free("pl_graph_free: %p is not a live graph (freed already, or not made "
                       "by pl_graph_new): nothing freed", (void *)g);
        return;
    }
    /* An engine reads the graph's tensors and ops until it is freed. */
    if (g->live_engines > 0) {
        pl_refuse_free("pl_graph_free: %d engine(s) built on this graph (the first: engine "
                       "#%d) are not freed yet: free them first (pl_engine_free); the graph "
                       "is left as it was", g->live_engines, g->frozen_by);
        return;
    }
    pl_live_remove(&live_graphs, g);
    for (int i = 0; i < g->n_tensors; i++) free(g->tensors[i]);
    free(g->tensors);
    for (int i = 0; i < g->n_ops; i++) free(g->ops[i].attrs);
    free(g->ops);
    pl_poison(g, sizeof *g);
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

pl_tensor_t *pl_tensor_add(pl_graph_t *g, const char *name, pl_tensor_kind kind,
                           pl_dtype dtype, int ndim, const int64_t *shape) {
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

/* A graph is frozen while an engine built from it exists: the engine has
 * registered StarPU data and planned its tasks for exactly these tensors
 * and ops, so a later op would be silently ignored or crash a step. */
bool pl_graph_check_mutable(const char *fn, const pl_graph_t *g) {
    if (g->live_engines == 0) return true;
    pl_fail(PL_STATUS_INVALID_ARGUMENT,
            "%s: the graph is frozen: engine #%d was built from it with "
            "pl_engine_new; add inputs and ops before building an engine (or "
            "free the engine first)", fn, g->frozen_by);
    return false;
}

/* Names are how a graph is addressed (pl_graph_find, checkpoints, traces):
 * two tensors with one name would make the first one found win. */
pl_tensor_t *pl_graph_named(const pl_graph_t *g, const char *name) {
    for (int i = 0; i < g->n_tensors; i++)
        if (strcmp(g->tensors[i]->name, name) == 0) return g->tensors[i];
    return NULL;
}

const char *pl_tensor_describe(const pl_graph_t *g, const pl_tensor_t *t, char *buf,
                               size_t size) {
    char op[128];
    if (t->kind == PL_TENSOR_INPUT)
        snprintf(buf, size, "input '%s'", t->name);
    else if (t->kind == PL_TENSOR_PARAM && t->owner_op >= 0 && t->owner_op < g->n_ops)
        snprintf(buf, size, "parameter '%s' of %s", t->name,
                 pl_op_describe(g, &g->ops[t->owner_op], op, sizeof op));
    else if (t->producer >= 0 && t->producer < g->n_ops)
        snprintf(buf, size, "%s '%s' of %s (op %d)", t->aux ? "tensor" : "the output",
                 t->name, pl_op_describe(g, &g->ops[t->producer], op, sizeof op),
                 t->producer);
    else
        snprintf(buf, size, "tensor '%s'", t->name);
    return buf;
}

pl_tensor_t *pl_graph_input(pl_graph_t *g, const char *name, pl_dtype dtype,
                            int ndim, const int64_t *shape) {
    if (!g || !name) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_graph_input: %s is NULL",
                g ? "name" : "graph");
        return NULL;
    }
    if (!pl_graph_check_mutable("pl_graph_input", g)) return NULL;
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
    /* As stored: a longer name is cut to the tensor's 63 characters. */
    char stored[sizeof ((pl_tensor_t *)0)->name];
    snprintf(stored, sizeof stored, "%s", name);
    const pl_tensor_t *taken = pl_graph_named(g, stored);
    if (taken) {
        char other[256];
        pl_fail(PL_STATUS_INVALID_ARGUMENT,
                "pl_graph_input: the name '%s' is already taken by %s; names must be "
                "unique (pl_graph_find, checkpoints)", stored,
                pl_tensor_describe(g, taken, other, sizeof other));
        return NULL;
    }
    pl_tensor_t *t = pl_tensor_add(g, name, PL_TENSOR_INPUT, dtype, ndim, shape);
    if (t) t->input_index = g->n_inputs++;
    return t;
}

pl_status pl_graph_set_loss(pl_graph_t *g, pl_tensor_t *loss) {
    if (!g || !loss)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_graph_set_loss: %s is NULL",
                       g ? "loss" : "graph");
    if (!pl_graph_check_mutable("pl_graph_set_loss", g)) return pl_last_status();
    /* Its id and producer index would point into this graph's arrays. */
    if (loss->id >= g->n_tensors || g->tensors[loss->id] != loss)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_graph_set_loss: loss '%s' belongs to another graph",
                       loss->name);
    if (loss->kind != PL_TENSOR_SCALAR || loss->aux || !loss->requires_grad)
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
    if (!pl_graph_check_mutable("pl_graph_set_output", g)) return pl_last_status();
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

pl_tensor_kind pl_tensor_get_kind(const pl_tensor_t *t) {
    return t ? t->kind : PL_TENSOR_INPUT;
}

bool pl_tensor_requires_grad(const pl_tensor_t *t) { return t && t->requires_grad; }

int pl_graph_num_tensors(const pl_graph_t *g) { return g ? g->n_tensors : 0; }

pl_tensor_t *pl_graph_tensor(const pl_graph_t *g, int id) {
    return g && id >= 0 && id < g->n_tensors ? g->tensors[id] : NULL;
}

int pl_graph_num_ops(const pl_graph_t *g) { return g ? g->n_ops : 0; }

pl_status pl_graph_op_info(const pl_graph_t *g, int index, pl_op_info *info) {
    if (!g || !info || index < 0 || index >= g->n_ops)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_graph_op_info: %s",
                       !g ? "graph is NULL" : !info ? "info is NULL" : "no such op");
    const pl_op *o = &g->ops[index];
    *info = (pl_op_info){.name = o->name, .block = o->block, .flops = o->flops,
                         .output = g->tensors[o->out],
                         .saved = o->saved >= 0 && o->saved != o->out ? g->tensors[o->saved]
                                                                       : NULL};
    return PL_STATUS_OK;
}

int pl_graph_num_params(const pl_graph_t *g) { return g ? g->n_params : 0; }

pl_tensor_t *pl_graph_param(const pl_graph_t *g, int index) {
    if (!g || index < 0 || index >= g->n_params) return NULL;
    for (int i = 0; i < g->n_tensors; i++)
        if (g->tensors[i]->param_index == index) return g->tensors[i];
    return NULL;
}

pl_tensor_t *pl_graph_find(const pl_graph_t *g, const char *name) {
    if (!g || !name) return NULL;
    return pl_graph_named(g, name);
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
    if (!pl_graph_check_mutable("pl_param_set_init", param->graph)) return pl_last_status();
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
    if (!pl_graph_check_mutable("pl_graph_begin_block", g)) return -1;
    /* An empty block 0 (nothing created yet) is reused. */
    if (g->n_ops > 0 && g->ops[g->n_ops - 1].block == g->n_blocks - 1) g->n_blocks++;
    return g->n_blocks - 1;
}

int pl_graph_num_blocks(const pl_graph_t *g) {
    if (!g) return 0;
    return g->n_ops ? g->ops[g->n_ops - 1].block + 1 : 0;
}

