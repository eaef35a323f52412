/* Turning one op of one tile into StarPU tasks. Forward: one task per op
 * (the loss op of a training step computes its gradient in the same task).
 * Backward: one task per input that needs a gradient (B) and, for ops with
 * weights, a separate weight-gradient task (W) that nothing downstream in
 * the backward pass waits for, so it can fill idle time.
 *
 * Gradients of activations are overwritten by the first task that writes
 * them in a step and accumulated by later ones (a tensor used by several
 * ops); parameter gradients are overwritten by the first W task after an
 * optimizer step and accumulated after that (tiles, gradient accumulation).
 * StarPU's sequential consistency orders the accumulating tasks in
 * submission order, so sums are formed in the same order on every run. */
#include <string.h>

#include "codelets/codelets.h"
#include "engine/engine_internal.h"
#include "graph/error.h"

starpu_data_handle_t pl_param_handle(pl_engine_t *e, const pl_tensor_t *p) {
    const pl_tensor_rt *r = &e->trt[p->id];
    const pl_chunk *c = &e->chunks.chunks[r->chunk];
    return e->chunks.managed ? c->h_param : c->param_children[r->slot];
}

starpu_data_handle_t pl_param_grad_handle(pl_engine_t *e, const pl_tensor_t *p) {
    const pl_tensor_rt *r = &e->trt[p->id];
    const pl_chunk *c = &e->chunks.chunks[r->chunk];
    return e->chunks.managed ? c->h_grad : c->grad_children[r->slot];
}

size_t pl_param_offset(const pl_engine_t *e, const pl_tensor_t *p) {
    const pl_tensor_rt *r = &e->trt[p->id];
    return e->chunks.managed ? e->chunks.chunks[r->chunk].offsets[r->slot] : 0;
}

/* The overwrite mask of a weight-gradient task: a whole-chunk gradient
 * handle (placement mode) holds other tensors' gradients too, so it is
 * always accessed RW and the kernel's accumulate flag does the rest. */
static unsigned param_grad_mask(const pl_engine_t *e, int acc0, int acc1) {
    return e->chunks.managed ? 0u : pl_overwrite_mask(acc0, acc1);
}

/* Buffer i of a task is parameter p (or its gradient): the handle, and its
 * offset in the task's arguments (non-zero only for whole-chunk handles). */
static starpu_data_handle_t pl_param_buf(pl_engine_t *e, const pl_tensor_t *p,
                                         pl_dims_args *a, int i) {
    a->off[i] = (int64_t)pl_param_offset(e, p);
    return pl_param_handle(e, p);
}

static starpu_data_handle_t pl_param_grad_buf(pl_engine_t *e, const pl_tensor_t *p,
                                              pl_dims_args *a, int i) {
    a->off[i] = (int64_t)pl_param_offset(e, p);
    return pl_param_grad_handle(e, p);
}

static pl_tensor_t *T(pl_engine_t *e, int id) { return e->g->tensors[id]; }

/* Claims the gradient of activation `id` in `tile` for writing: returns
 * whether the writer must accumulate, and marks it written. */
static int claim_grad(pl_engine_t *e, int id, int tile) {
    bool *w = &e->trt[id].grad_written[tile];
    int acc = *w;
    *w = true;
    return acc;
}

static int claim_param_grad(pl_engine_t *e, int id) {
    bool *w = &e->trt[id].param_grad_written;
    int acc = *w;
    *w = true;
    return acc;
}

static pl_status forward_linear(pl_engine_t *e, const pl_op *op, int tile) {
    pl_tensor_t *x = T(e, op->in[0]), *w = T(e, op->in[1]), *b = T(e, op->in[2]);
    pl_dims_args a = {.N = pl_tile_rows(e, x, tile), .C = w->shape[1],
                      .OC = w->shape[0]};
    starpu_data_handle_t h[4] = {e->trt[op->out].val[tile], e->trt[x->id].val[tile],
                                 pl_param_buf(e, w, &a, 2), pl_param_buf(e, b, &a, 3)};
    return pl_engine_submit(e, &pl_cl_linear_forward,
                            pl_task_index(e, op - e->g->ops, PL_SLOT_F, tile), &a,
                            sizeof a, 4, h, 0);
}

static pl_status forward_elementwise(pl_engine_t *e, const pl_op *op, int tile,
                                     struct starpu_codelet *cl) {
    pl_tensor_t *x = T(e, op->in[0]);
    pl_dims_args a = {.N = e->tile_samples[tile], .C = x->numel};
    starpu_data_handle_t h[3] = {e->trt[op->out].val[tile], e->trt[x->id].val[tile],
                                 op->n_in > 1 ? e->trt[op->in[1]].val[tile] : NULL};
    return pl_engine_submit(e, cl, pl_task_index(e, op - e->g->ops, PL_SLOT_F, tile),
                            &a, sizeof a, op->n_in + 1, h, 0);
}

/* Loss and metrics: a per-tile partial sum the engine combines. */
static pl_status forward_scalar(pl_engine_t *e, const pl_op *op, int tile,
                                bool training) {
    int idx = op - e->g->ops;
    pl_tensor_t *x = T(e, op->in[0]);
    bool is_loss = op->out == e->g->loss;
    pl_dims_args a = {.N = pl_tile_rows(e, x, tile), .C = x->numel,
                      .OC = pl_tensor_last_dim(x)};
    starpu_data_handle_t sum = e->trt[op->out].val[tile];
    starpu_data_handle_t xv = e->trt[x->id].val[tile];
    switch (op->kind) {
    case PL_OP_CROSS_ENTROPY: {
        starpu_data_handle_t labels = e->trt[op->in[1]].val[tile];
        if (training && is_loss && x->requires_grad) {
            /* The mean's gradient: 1 / rows of the whole batch. */
            a.scale = pl_engine_loss_grad_scale(e) /
                      (float)(e->batch_samples * pl_tensor_rows_per_sample(x));
            claim_grad(e, x->id, tile); /* first writer of dlogits: W mode */
            starpu_data_handle_t h[4] = {sum, e->trt[x->id].grad[tile], xv, labels};
            return pl_engine_submit(e, &pl_cl_cross_entropy_loss,
                                    pl_task_index(e, idx, PL_SLOT_L, tile), &a,
                                    sizeof a, 4, h, 0);
        }
        starpu_data_handle_t h[3] = {sum, xv, labels};
        return pl_engine_submit(e, &pl_cl_cross_entropy_forward,
                                pl_task_index(e, idx, PL_SLOT_F, tile), &a, sizeof a,
                                3, h, 0);
    }
    case PL_OP_ACCURACY: {
        starpu_data_handle_t h[3] = {sum, xv, e->trt[op->in[1]].val[tile]};
        return pl_engine_submit(e, &pl_cl_accuracy_forward,
                                pl_task_index(e, idx, PL_SLOT_F, tile), &a, sizeof a,
                                3, h, 0);
    }
    case PL_OP_MEAN: {
        a.N = e->tile_samples[tile];
        starpu_data_handle_t h[2] = {sum, xv};
        return pl_engine_submit(e, &pl_cl_mean_forward,
                                pl_task_index(e, idx, PL_SLOT_F, tile), &a, sizeof a,
                                2, h, 0);
    }
    default:
        return pl_fail(PL_STATUS_UNSUPPORTED, "op '%s' is not a scalar op", op->name);
    }
}

static pl_status forward_embedding(pl_engine_t *e, const pl_op *op, int tile) {
    pl_tensor_t *wte = T(e, op->in[1]), *wpe = T(e, op->in[2]);
    pl_dims_args a = {.B = e->tile_samples[tile], .T = wpe->shape[0],
                      .C = wpe->shape[1], .V = wte->shape[0]};
    starpu_data_handle_t h[5] = {e->trt[op->out].val[tile],
                                 e->trt[op->in[0]].val[tile], pl_param_buf(e, wte, &a, 2),
                                 pl_param_buf(e, wpe, &a, 3), e->trt[op->aux].val[tile]};
    return pl_engine_submit(e, &pl_cl_embedding_forward,
                            pl_task_index(e, op - e->g->ops, PL_SLOT_F, tile), &a,
                            sizeof a, 5, h, 0);
}

static pl_status forward_layernorm(pl_engine_t *e, const pl_op *op, int tile) {
    pl_tensor_t *x = T(e, op->in[0]);
    pl_dims_args a = {.N = pl_tile_rows(e, x, tile), .C = pl_tensor_last_dim(x)};
    starpu_data_handle_t h[4] = {e->trt[op->out].val[tile], e->trt[x->id].val[tile],
                                 pl_param_buf(e, T(e, op->in[1]), &a, 2),
                                 pl_param_buf(e, T(e, op->in[2]), &a, 3)};
    return pl_engine_submit(e, &pl_cl_layernorm_forward,
                            pl_task_index(e, op - e->g->ops, PL_SLOT_F, tile), &a,
                            sizeof a, 4, h, 0);
}

static pl_dims_args attention_dims(pl_engine_t *e, const pl_op *op, int tile) {
    pl_tensor_t *qkv = T(e, op->in[0]);
    return (pl_dims_args){.B = e->tile_samples[tile], .T = qkv->shape[0],
                          .C = qkv->shape[1] / 3, .NH = op->heads};
}

static pl_status forward_attention(pl_engine_t *e, const pl_op *op, int tile) {
    pl_dims_args a = attention_dims(e, op, tile);
    starpu_data_handle_t h[3] = {e->trt[op->out].val[tile], e->trt[op->aux].val[tile],
                                 e->trt[op->in[0]].val[tile]};
    return pl_engine_submit(e, &pl_cl_attention_forward,
                            pl_task_index(e, op - e->g->ops, PL_SLOT_F, tile), &a,
                            sizeof a, 3, h, 0);
}

static pl_dims_args matmul_dims(pl_engine_t *e, const pl_op *op, int tile) {
    pl_tensor_t *x = T(e, op->in[0]), *w = T(e, op->in[1]);
    return (pl_dims_args){.N = pl_tile_rows(e, x, tile), .C = w->shape[1],
                          .OC = w->shape[0]};
}

static pl_status forward_matmul(pl_engine_t *e, const pl_op *op, int tile) {
    pl_dims_args a = matmul_dims(e, op, tile);
    starpu_data_handle_t h[3] = {e->trt[op->out].val[tile],
                                 e->trt[op->in[0]].val[tile],
                                 pl_param_buf(e, T(e, op->in[1]), &a, 2)};
    return pl_engine_submit(e, &pl_cl_matmul_forward,
                            pl_task_index(e, op - e->g->ops, PL_SLOT_F, tile), &a,
                            sizeof a, 3, h, 0);
}

pl_status pl_op_submit_forward(pl_engine_t *e, int op_index, int tile,
                               bool training) {
    const pl_op *op = &e->g->ops[op_index];
    switch (op->kind) {
    case PL_OP_LINEAR: return forward_linear(e, op, tile);
    case PL_OP_RELU: return forward_elementwise(e, op, tile, &pl_cl_relu_forward);
    case PL_OP_GELU: return forward_elementwise(e, op, tile, &pl_cl_gelu_forward);
    case PL_OP_ADD: return forward_elementwise(e, op, tile, &pl_cl_add_forward);
    case PL_OP_CROSS_ENTROPY:
    case PL_OP_ACCURACY:
    case PL_OP_MEAN: return forward_scalar(e, op, tile, training);
    case PL_OP_EMBEDDING: return forward_embedding(e, op, tile);
    case PL_OP_LAYERNORM: return forward_layernorm(e, op, tile);
    case PL_OP_ATTENTION: return forward_attention(e, op, tile);
    case PL_OP_MATMUL: return forward_matmul(e, op, tile);
    }
    return pl_fail(PL_STATUS_UNSUPPORTED, "op '%s': unknown kind", op->name);
}

static pl_status backward_linear(pl_engine_t *e, const pl_op *op, int tile) {
    int idx = op - e->g->ops;
    pl_tensor_t *x = T(e, op->in[0]), *w = T(e, op->in[1]), *b = T(e, op->in[2]);
    pl_dims_args a = {.N = pl_tile_rows(e, x, tile), .C = w->shape[1],
                      .OC = w->shape[0]};
    starpu_data_handle_t dout = e->trt[op->out].grad[tile];
    pl_status st = PL_STATUS_OK;
    if (x->requires_grad) {
        a.accumulate = claim_grad(e, x->id, tile);
        starpu_data_handle_t h[3] = {e->trt[x->id].grad[tile], dout,
                                     pl_param_buf(e, w, &a, 2)};
        st = pl_engine_submit(e, &pl_cl_linear_backward_input,
                              pl_task_index(e, idx, PL_SLOT_B0, tile), &a, sizeof a,
                              3, h, pl_overwrite_mask(a.accumulate, 1));
        if (st) return st;
    }
    /* Weight and bias share one W task, so they share one accumulate flag. */
    a.accumulate = claim_param_grad(e, w->id);
    claim_param_grad(e, b->id);
    memset(a.off, 0, sizeof a.off); /* the B task's offsets */
    starpu_data_handle_t h[4] = {pl_param_grad_buf(e, w, &a, 0),
                                 pl_param_grad_buf(e, b, &a, 1), dout,
                                 e->trt[x->id].val[tile]};
    return pl_engine_submit(e, &pl_cl_linear_backward_weight,
                            pl_task_index(e, idx, PL_SLOT_W, tile), &a, sizeof a, 4,
                            h, param_grad_mask(e, a.accumulate, a.accumulate));
}

static pl_status backward_unary(pl_engine_t *e, const pl_op *op, int tile,
                                struct starpu_codelet *cl) {
    pl_tensor_t *x = T(e, op->in[0]);
    if (!x->requires_grad) return PL_STATUS_OK;
    pl_dims_args a = {.N = e->tile_samples[tile], .C = x->numel,
                      .accumulate = claim_grad(e, x->id, tile)};
    starpu_data_handle_t h[3] = {e->trt[x->id].grad[tile], e->trt[x->id].val[tile],
                                 e->trt[op->out].grad[tile]};
    return pl_engine_submit(e, cl,
                            pl_task_index(e, op - e->g->ops, PL_SLOT_B0, tile), &a,
                            sizeof a, 3, h, pl_overwrite_mask(a.accumulate, 1));
}

static pl_status backward_add(pl_engine_t *e, const pl_op *op, int tile) {
    for (int i = 0; i < 2; i++) {
        pl_tensor_t *x = T(e, op->in[i]);
        if (!x->requires_grad) continue;
        pl_dims_args a = {.N = e->tile_samples[tile], .C = x->numel,
                          .accumulate = claim_grad(e, x->id, tile)};
        starpu_data_handle_t h[2] = {e->trt[x->id].grad[tile],
                                     e->trt[op->out].grad[tile]};
        pl_status st = pl_engine_submit(
            e, &pl_cl_add_backward,
            pl_task_index(e, op - e->g->ops, PL_SLOT_B0 + i, tile), &a, sizeof a,
            2, h, pl_overwrite_mask(a.accumulate, 1));
        if (st) return st;
    }
    return PL_STATUS_OK;
}

static pl_status backward_mean(pl_engine_t *e, const pl_op *op, int tile) {
    pl_tensor_t *x = T(e, op->in[0]);
    if (!x->requires_grad) return PL_STATUS_OK;
    pl_dims_args a = {.N = e->tile_samples[tile], .C = x->numel,
                      .scale = pl_engine_loss_grad_scale(e) /
                               (float)(e->batch_samples * x->numel),
                      .accumulate = claim_grad(e, x->id, tile)};
    starpu_data_handle_t h[1] = {e->trt[x->id].grad[tile]};
    return pl_engine_submit(e, &pl_cl_mean_backward,
                            pl_task_index(e, op - e->g->ops, PL_SLOT_B0, tile), &a,
                            sizeof a, 1, h, pl_overwrite_mask(a.accumulate, 1));
}

static pl_status backward_embedding(pl_engine_t *e, const pl_op *op, int tile) {
    pl_tensor_t *wte = T(e, op->in[1]), *wpe = T(e, op->in[2]);
    pl_dims_args a = {.B = e->tile_samples[tile], .T = wpe->shape[0],
                      .C = wpe->shape[1], .V = wte->shape[0],
                      .accumulate = claim_param_grad(e, wte->id),
                      .accumulate2 = claim_param_grad(e, wpe->id)};
    memset(a.off, 0, sizeof a.off); /* the B task's offsets */
    starpu_data_handle_t h[4] = {pl_param_grad_buf(e, wte, &a, 0),
                                 pl_param_grad_buf(e, wpe, &a, 1),
                                 e->trt[op->out].grad[tile],
                                 e->trt[op->in[0]].val[tile]};
    return pl_engine_submit(e, &pl_cl_embedding_backward_weight,
                            pl_task_index(e, op - e->g->ops, PL_SLOT_W, tile), &a,
                            sizeof a, 4, h,
                            param_grad_mask(e, a.accumulate, a.accumulate2));
}

static pl_status backward_layernorm(pl_engine_t *e, const pl_op *op, int tile) {
    int idx = op - e->g->ops;
    pl_tensor_t *x = T(e, op->in[0]), *w = T(e, op->in[1]), *b = T(e, op->in[2]);
    pl_dims_args a = {.N = pl_tile_rows(e, x, tile), .C = pl_tensor_last_dim(x)};
    starpu_data_handle_t dout = e->trt[op->out].grad[tile], xv = e->trt[x->id].val[tile];
    if (x->requires_grad) {
        a.accumulate = claim_grad(e, x->id, tile);
        starpu_data_handle_t h[4] = {e->trt[x->id].grad[tile], dout, xv,
                                     pl_param_buf(e, w, &a, 3)};
        pl_status st = pl_engine_submit(e, &pl_cl_layernorm_backward_input,
                                        pl_task_index(e, idx, PL_SLOT_B0, tile), &a,
                                        sizeof a, 4, h,
                                        pl_overwrite_mask(a.accumulate, 1));
        if (st) return st;
    }
    a.accumulate = claim_param_grad(e, w->id);
    a.accumulate2 = claim_param_grad(e, b->id);
    memset(a.off, 0, sizeof a.off); /* the B task's offsets */
    starpu_data_handle_t h[4] = {pl_param_grad_buf(e, w, &a, 0), pl_param_grad_buf(e, b, &a, 1),
                                 dout, xv};
    return pl_engine_submit(e, &pl_cl_layernorm_backward_weight,
                            pl_task_index(e, idx, PL_SLOT_W, tile), &a, sizeof a, 4, h,
                            param_grad_mask(e, a.accumulate, a.accumulate2));
}

static pl_status backward_attention(pl_engine_t *e, const pl_op *op, int tile) {
    pl_tensor_t *qkv = T(e, op->in[0]);
    if (!qkv->requires_grad) return PL_STATUS_OK;
    pl_dims_args a = attention_dims(e, op, tile);
    a.accumulate = claim_grad(e, qkv->id, tile);
    starpu_data_handle_t h[4] = {e->trt[qkv->id].grad[tile], e->trt[op->out].grad[tile],
                                 e->trt[qkv->id].val[tile], e->trt[op->aux].val[tile]};
    return pl_engine_submit(e, &pl_cl_attention_backward,
                            pl_task_index(e, op - e->g->ops, PL_SLOT_B0, tile), &a,
                            sizeof a, 4, h, pl_overwrite_mask(a.accumulate, 1));
}

static pl_status backward_matmul(pl_engine_t *e, const pl_op *op, int tile) {
    int idx = op - e->g->ops;
    pl_tensor_t *x = T(e, op->in[0]), *w = T(e, op->in[1]);
    pl_dims_args a = matmul_dims(e, op, tile);
    starpu_data_handle_t dout = e->trt[op->out].grad[tile];
    if (x->requires_grad) {
        a.accumulate = claim_grad(e, x->id, tile);
        starpu_data_handle_t h[3] = {e->trt[x->id].grad[tile], dout,
                                     pl_param_buf(e, w, &a, 2)};
        pl_status st = pl_engine_submit(e, &pl_cl_linear_backward_input,
                                        pl_task_index(e, idx, PL_SLOT_B0, tile), &a,
                                        sizeof a, 3, h,
                                        pl_overwrite_mask(a.accumulate, 1));
        if (st) return st;
    }
    a.accumulate = claim_param_grad(e, w->id);
    memset(a.off, 0, sizeof a.off); /* the B task's offsets */
    starpu_data_handle_t h[3] = {pl_param_grad_buf(e, w, &a, 0), dout,
                                 e->trt[x->id].val[tile]};
    return pl_engine_submit(e, &pl_cl_matmul_backward_weight,
                            pl_task_index(e, idx, PL_SLOT_W, tile), &a, sizeof a, 3, h,
                            param_grad_mask(e, a.accumulate, 1));
}

pl_status pl_op_submit_backward(pl_engine_t *e, int op_index, int tile) {
    const pl_op *op = &e->g->ops[op_index];
    bool is_loss = op->out == e->g->loss;
    /* Only ops whose output received a gradient this step propagate one;
     * the loss is the seed (cross-entropy already wrote its gradient in
     * its L task). */
    if (!is_loss && !(e->trt[op->out].grad_written && e->trt[op->out].grad_written[tile]))
        return PL_STATUS_OK;
    switch (op->kind) {
    case PL_OP_LINEAR: return backward_linear(e, op, tile);
    case PL_OP_RELU: return backward_unary(e, op, tile, &pl_cl_relu_backward);
    case PL_OP_GELU: return backward_unary(e, op, tile, &pl_cl_gelu_backward);
    case PL_OP_ADD: return backward_add(e, op, tile);
    case PL_OP_MEAN: return is_loss ? backward_mean(e, op, tile) : PL_STATUS_OK;
    case PL_OP_EMBEDDING: return backward_embedding(e, op, tile);
    case PL_OP_LAYERNORM: return backward_layernorm(e, op, tile);
    case PL_OP_ATTENTION: return backward_attention(e, op, tile);
    case PL_OP_MATMUL: return backward_matmul(e, op, tile);
    case PL_OP_CROSS_ENTROPY:
    case PL_OP_ACCURACY: return PL_STATUS_OK;
    }
    return pl_fail(PL_STATUS_UNSUPPORTED, "op '%s': unknown kind", op->name);
}
