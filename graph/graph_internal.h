/* The graph as the engine sees it: tensors and ops in creation order, which
 * is a topological order (an op can only consume tensors that exist). */
#ifndef PL_GRAPH_INTERNAL_H
#define PL_GRAPH_INTERNAL_H

#include "pleiades.h"

struct pl_tensor {
    int id;
    pl_graph_t *graph;          /* the graph that owns it */
    char name[64];
    pl_tensor_kind kind;
    pl_dtype dtype;
    int ndim;                   /* excluding batch for inputs/activations */
    int64_t shape[PL_MAX_DIMS];
    int64_t numel;              /* per sample (inputs/activations) or total */
    bool requires_grad;         /* a gradient flows into this tensor */
    int producer;               /* op index, -1 for inputs/params */
    int input_index;            /* position among inputs, or -1 */
    int param_index;            /* position among params, or -1 */
    int owner_op;               /* params: index of the op that created it */
    pl_init init;
    float init_scale;
    bool aux;                   /* an op's internal second output (saved
                                   tensors, invalid-value counters): not a
                                   metric, no gradient */
};

/* Operands of one op: its inputs/activations, then its parameters. */
#define PL_OP_MAX_IN (PL_OP_MAX_INPUTS + PL_OP_MAX_PARAMS)

typedef struct pl_op {
    const pl_op_def *def;      /* what it computes (pleiades/op.h) */
    void *attrs;               /* a copy of the caller's attributes, or NULL */
    char name[64];
    int n_in;                  /* operands: n_inputs inputs, then params */
    int n_inputs;
    int in[PL_OP_MAX_IN];      /* tensor ids */
    int out;                   /* tensor id */
    int saved;                 /* tensor the forward saves for backward, or -1 */
    int invalid;               /* per-tile count of invalid input values
                                  (activation outputs), or -1 */
    double flops;              /* forward FLOPs per sample */
    double scalar_count;       /* scalar outputs: per-sample divisor */
    int block;                 /* pipeline unit (pl_graph_begin_block) */
    bool user_named;           /* name given by the caller (else generated,
                                  e.g. "relu3", which errors do not show) */
} pl_op;

/* The op's parameters are operands n_inputs .. n_in - 1. */
static inline int pl_op_n_params(const pl_op *op) { return op->n_in - op->n_inputs; }

struct pl_graph {
    uint64_t seed;
    int n_tensors, cap_tensors;
    pl_tensor_t **tensors;
    int n_ops, cap_ops;
    pl_op *ops;
    int n_inputs, n_params;
    int loss;                  /* tensor id or -1 */
    int n_blocks;              /* blocks opened so far (>= 1) */
    int output;                /* tensor id or -1 */
    int live_engines;          /* engines built from it: frozen while > 0 */
    int frozen_by;             /* id of the first of them (for messages) */
};

/* Rows an activation has per sample once its last dim is the "feature" dim,
 * e.g. [T, C] gives T rows of C per sample. */
static inline int64_t pl_tensor_rows_per_sample(const pl_tensor_t *t) {
    int64_t r = 1;
    for (int i = 0; i + 1 < t->ndim; i++) r *= t->shape[i];
    return r;
}
static inline int64_t pl_tensor_last_dim(const pl_tensor_t *t) {
    return t->ndim ? t->shape[t->ndim - 1] : 1;
}

/* Adds a tensor (shape checked against the buffer limit), or NULL with the
 * error set. */
pl_tensor_t *pl_tensor_add(pl_graph_t *g, const char *name, pl_tensor_kind kind,
                           pl_dtype dtype, int ndim, const int64_t *shape);
/* The tensor named `name` (names are unique in a graph: inputs, op
 * outputs and their auxiliary tensors, parameters), or NULL. */
pl_tensor_t *pl_graph_named(const pl_graph_t *g, const char *name);
/* A tensor as the user knows it, for messages: "input 'x'", "parameter
 * 'fc1.weight' of pl_linear 'fc1'", "the output 'h' of pl_add 'h' (op 3)".
 * Returns buf. */
const char *pl_tensor_describe(const pl_graph_t *g, const pl_tensor_t *t, char *buf,
                               size_t size);
/* False (error set, naming `fn`) when an engine froze the graph. */
bool pl_graph_check_mutable(const char *fn, const pl_graph_t *g);

/* The public call that creates an op ("pl_linear"; a user op's def name). */
const char *pl_op_api_name(const pl_op *op);
/* An op as the user knows it, for messages: "pl_linear 'fc1'" when they
 * named it, "pl_cross_entropy of 'head'" (the call and its first input)
 * when the name was generated. Returns buf. */
const char *pl_op_describe(const pl_graph_t *g, const pl_op *op, char *buf,
                           size_t size);

#endif
