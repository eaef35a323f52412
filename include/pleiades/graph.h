/*
 * pleiades/graph.h — graphs and tensors, and their introspection (part of
 * pleiades.h). The ops that build a graph are in pleiades/ops.h, whole
 * models of them in pleiades/models.h. Shapes are checked as ops are
 * added; a graph is frozen while an engine built from it exists.
 *
 *   pl_graph_t *g = pl_graph_new(42);                    // seed for init
 *   int64_t in[1] = {784};
 *   pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, in);
 *   pl_tensor_t *y = pl_graph_input(g, "y", PL_DTYPE_I32, 0, NULL);
 *   pl_tensor_t *h = pl_relu(g, pl_linear(g, x, 1024, "fc1"));
 *   pl_graph_set_loss(g, pl_cross_entropy(g, pl_linear(g, h, 10, "head"), y));
 *   ...
 *   pl_graph_free(g);
 */
#ifndef PLEIADES_GRAPH_H
#define PLEIADES_GRAPH_H

#include "pleiades/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ----------------------------------------------------------------- graph */

typedef struct pl_graph pl_graph_t;   /* owns its tensors and ops */
typedef struct pl_tensor pl_tensor_t; /* owned by its graph */

typedef enum pl_dtype {
    PL_DTYPE_F32 = 0,
    PL_DTYPE_I32,
} pl_dtype;

#define PL_MAX_DIMS 4

/* A new empty graph. `seed` seeds parameter initialisation: each parameter
 * draws from its own stream derived from (seed, parameter index), so adding
 * a layer at the end never changes the initial values of earlier ones.
 * The caller owns it and frees it with pl_graph_free after every engine
 * built on it. */
pl_graph_t *pl_graph_new(uint64_t seed);
/* Frees the graph and its tensors; refused (a message on stderr, the graph
 * left as it was) while an engine built on it is live, and for a graph
 * already freed. */
void pl_graph_free(pl_graph_t *g);

/* A per-sample input of `ndim` dims (the batch dimension is implicit and
 * comes first: shape {784} is a [B, 784] input; ndim 0 is one value per
 * sample, e.g. class labels). Inputs are fed in creation order.
 * Names are unique within a graph: an input, op or parameter name already
 * taken (by an input, an op's output or auxiliary tensor, a parameter) is
 * refused with an INVALID_ARGUMENT naming both, so pl_graph_find and
 * checkpoints always mean one tensor. */
pl_tensor_t *pl_graph_input(pl_graph_t *g, const char *name, pl_dtype dtype,
                            int ndim, const int64_t *shape);

/* The ops (pl_linear, pl_relu, pl_attention, ...) are in pleiades/ops.h;
 * pl_graph_op (pleiades/op.h) adds one of one's own. */

/* Parameter initialisation override (before pl_engine_new). */
typedef enum pl_init {
    PL_INIT_UNIFORM = 0, /* U(-scale, scale) */
    PL_INIT_NORMAL,      /* N(0, scale²) */
    PL_INIT_ZEROS,
    PL_INIT_ONES,
} pl_init;
pl_status pl_param_set_init(pl_tensor_t *param, pl_init init, float scale);

/* Blocks: ops created after pl_graph_begin_block belong to a new block (a
 * unit the pipeline schedules cut into stages, e.g. one transformer
 * layer). Returns the block index. Ops before the first call are block 0. */
int pl_graph_begin_block(pl_graph_t *g, const char *name);
int pl_graph_num_blocks(const pl_graph_t *g);

/* The scalar the engine minimises (cross_entropy or mean output). */
pl_status pl_graph_set_loss(pl_graph_t *g, pl_tensor_t *loss);
/* The tensor returned by steps that ask for return_output_label. */
pl_status pl_graph_set_output(pl_graph_t *g, pl_tensor_t *output);

/* Introspection: what tools, benchmarks and memory planners read of a
 * built graph. Strings and tensors are owned by the graph. */
typedef enum pl_tensor_kind {
    PL_TENSOR_INPUT,      /* fed per batch, [B, shape...] */
    PL_TENSOR_PARAM,      /* model state, lives in a chunk */
    PL_TENSOR_ACTIVATION, /* produced by an op, [B, shape...] */
    PL_TENSOR_SCALAR,     /* loss/metric: one partial value per tile */
} pl_tensor_kind;
const char *pl_tensor_name(const pl_tensor_t *t);
pl_tensor_kind pl_tensor_get_kind(const pl_tensor_t *t);
/* Whether a gradient flows into t (its backward is computed). */
bool pl_tensor_requires_grad(const pl_tensor_t *t);
/* Writes the shape (batch dim excluded for inputs/activations) into
 * shape[PL_MAX_DIMS]; returns ndim. */
int pl_tensor_shape(const pl_tensor_t *t, int64_t *shape);
int64_t pl_tensor_numel(const pl_tensor_t *t); /* per sample for activations */
int pl_graph_num_params(const pl_graph_t *g);
pl_tensor_t *pl_graph_param(const pl_graph_t *g, int index);
pl_tensor_t *pl_graph_find(const pl_graph_t *g, const char *name);
int64_t pl_graph_param_count(const pl_graph_t *g); /* total parameters */
/* Every tensor, by id 0 .. pl_graph_num_tensors() - 1 (creation order). */
int pl_graph_num_tensors(const pl_graph_t *g);
pl_tensor_t *pl_graph_tensor(const pl_graph_t *g, int id);
/* Every op, in creation order (a topological order): its name, pipeline
 * block, forward FLOPs per sample, output, and the tensor its forward
 * keeps for its backward (NULL: none beyond its inputs and output). */
typedef struct pl_op_info {
    const char *name;
    int block;
    double flops;
    pl_tensor_t *output;
    pl_tensor_t *saved;
} pl_op_info;
int pl_graph_num_ops(const pl_graph_t *g);
pl_status pl_graph_op_info(const pl_graph_t *g, int index, pl_op_info *info);

#ifdef __cplusplus
}
#endif

#endif /* PLEIADES_GRAPH_H */
