/* pl_engine_options.check_finite: before an update (and after each pass of
 * gradient accumulation) every value the pass computed is scanned for
 * inf/NaN, in the order the pass made them, and the first one found stops
 * the step naming where it is: the batch's input, an op's output (forward,
 * op order), or a gradient an op's backward wrote (its inputs' and its
 * parameters', ops in reverse order). A NaN in a batch otherwise poisons
 * the weights silently when an op hides it from the loss (ReLU of NaN is
 * 0), and the loss turns NaN a step later, far from its cause.
 *
 * The scan reads the step's buffers from the host after the pass has
 * ended (backward_verdict in step.c has waited for it), so it costs a full
 * read of every activation and gradient: a debugging aid, off by default.
 * It owns no state: everything it reads is the step's own. Activations a
 * placement policy would drop after their backward are kept while it is
 * on (placement.c). With dynamic loss scaling gradients are not scanned:
 * an overflow there is the scaler's business (it skips that update). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/check_finite.h"
#include "engine/engine_internal.h"
#include "engine/hooks.h"
#include "graph/error.h"
#include "util/half.h"

/* Where in a buffer of n values of elem bytes (16-bit ones as the
 * engine's format) the first non-finite value is, -1 if none; its value
 * widened into *v. */
static int64_t first_non_finite(const pl_engine_t *e, const void *data, int64_t n,
                                size_t elem, float *v) {
    if (elem == sizeof(float)) {
        const float *f = data;
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(f[i])) return *v = f[i], i;
        return -1;
    }
    /* A 16-bit value is inf or NaN when its exponent bits are all ones. */
    const uint16_t *h = data;
    uint16_t exp = e->bf16 ? 0x7f80 : 0x7c00;
    for (int64_t i = 0; i < n; i++)
        if ((h[i] & exp) == exp) {
            pl_half_to_float(e->bf16, &h[i], v, 1);
            return i;
        }
    return -1;
}

/* Scans n values of handle h from element `offset` (acquired for reading,
 * which waits for nothing: the pass is over). Returns -1 (none), the
 * index of the first non-finite value, or -2 when h cannot be read. */
static int64_t scan_handle(const pl_engine_t *e, starpu_data_handle_t h, size_t offset,
                           int64_t n, size_t elem, float *v) {
    if (starpu_data_acquire(h, STARPU_R) != 0) return -2;
    const char *p = (const char *)starpu_vector_get_local_ptr(h) + offset * elem;
    int64_t i = first_non_finite(e, p, n, elem, v);
    starpu_data_release(h);
    return i;
}

static pl_status unreadable(const char *what) {
    return pl_fail(PL_STATUS_RUNTIME_ERROR, "check_finite: cannot read %s", what);
}

/* The tiles of a per-sample tensor (values, or gradients when grad): the
 * first non-finite value as (microbatch, sample in the batch, element in
 * the sample). Only tiles this pass wrote a gradient into are read. */
static pl_status scan_tiles(const pl_engine_t *e, const pl_tensor_t *t, bool grad, bool *found,
                            char *where, size_t size) {
    const pl_tensor_rt *r = &e->trt[t->id];
    size_t elem = pl_engine_tensor_elem(e, t);
    int64_t sample = 0;
    for (int tile = 0; tile < e->active_tiles; tile++) {
        int64_t rows = e->tile_samples[tile];
        if (grad && !(r->grad && r->grad_written[tile])) {
            sample += rows;
            continue;
        }
        float v = 0.0f;
        int64_t i = scan_handle(e, grad ? r->grad[tile] : r->val[tile], 0, rows * t->numel,
                                elem, &v);
        if (i == -2) return unreadable(t->name);
        if (i >= 0) {
            snprintf(where, size, "microbatch %d, sample %lld, element %lld: %g", tile,
                     (long long)(sample + i / t->numel), (long long)(i % t->numel), v);
            *found = true;
            return PL_STATUS_OK;
        }
        sample += rows;
    }
    return PL_STATUS_OK;
}

/* A scalar's per-tile partial sums (loss, metrics): {sum, invalid count}. */
static pl_status scan_scalar(const pl_engine_t *e, const pl_tensor_t *t, bool *found,
                             char *where, size_t size) {
    for (int tile = 0; tile < e->active_tiles; tile++) {
        starpu_data_handle_t h = e->trt[t->id].val[tile];
        if (starpu_data_acquire(h, STARPU_R) != 0) return unreadable(t->name);
        double v = ((const double *)starpu_vector_get_local_ptr(h))[0];
        starpu_data_release(h);
        if (!isfinite(v)) {
            snprintf(where, size, "microbatch %d's partial sum: %g", tile, v);
            *found = true;
            return PL_STATUS_OK;
        }
    }
    return PL_STATUS_OK;
}

/* A parameter's gradient as the pass left it: through its chunk's child
 * while the gradient chunks are partitioned (between passes), else the
 * whole chunk at its offset (at an update, after the unpartition). Not
 * when ZeRO released or sharded it (nothing whole to read) or when no
 * weight gradient wrote it since the last update. */
static pl_status scan_param_grad(pl_engine_t *e, const pl_tensor_t *p, bool *found,
                                 char *where, size_t size) {
    const pl_tensor_rt *r = &e->trt[p->id];
    if (!r->param_grad_written || e->z3 || e->hooks->dp_grads_released(e, r->chunk))
        return PL_STATUS_OK;
    const pl_chunk *c = &e->chunks.chunks[r->chunk];
    bool child = e->chunks.partitioned;
    float v = 0.0f;
    int64_t i = scan_handle(e, child ? c->grad_children[r->slot] : c->h_grad,
                            child ? 0 : c->offsets[r->slot], p->numel, e->chunks.elem, &v);
    if (i == -2) return unreadable(p->name);
    if (i >= 0) {
        snprintf(where, size, "element %lld: %g", (long long)i, v);
        *found = true;
    }
    return PL_STATUS_OK;
}

static pl_status stop(const char *what, const char *where) {
    return pl_fail(PL_STATUS_RUNTIME_ERROR,
                   "check_finite: %s holds a non-finite value (%s); the step stops before "
                   "the update (no parameter, optimizer state or step count changes)",
                   what, where);
}

pl_status pl_engine_check_finite(pl_engine_t *e) {
    const pl_graph_t *g = e->g;
    char where[160] = "", what[320], op_name[128];
    bool found = false;
    pl_status st = PL_STATUS_OK;
    /* The batch first: a non-finite input is the cause, not the ops. */
    for (int i = 0; i < g->n_tensors && !st && !found; i++) {
        const pl_tensor_t *t = g->tensors[i];
        if (t->kind != PL_TENSOR_INPUT || t->dtype != PL_DTYPE_F32) continue;
        /* Stages across ranks: only the ranks of stages that read it hold it. */
        int reader = -1;
        for (int o = 0; o < g->n_ops && reader < 0; o++)
            for (int k = 0; k < g->ops[o].n_inputs; k++)
                if (g->ops[o].in[k] == i && e->hooks->pp_local_op(e, o)) reader = o;
        if (reader < 0) continue;
        st = scan_tiles(e, t, false, &found, where, sizeof where);
        if (found)
            snprintf(what, sizeof what, "the batch's input '%s' (first read by %s)", t->name,
                     pl_op_describe(g, &g->ops[reader], op_name, sizeof op_name));
    }
    for (int o = 0; o < g->n_ops && !st && !found; o++) {
        const pl_op *op = &g->ops[o];
        if (!e->hooks->pp_local_op(e, o)) continue;
        const pl_tensor_t *y = g->tensors[op->out];
        st = y->kind == PL_TENSOR_SCALAR ? scan_scalar(e, y, &found, where, sizeof where)
                                         : scan_tiles(e, y, false, &found, where, sizeof where);
        if (found)
            snprintf(what, sizeof what, "the output of %s (the forward pass)",
                     pl_op_describe(g, op, op_name, sizeof op_name));
    }
    /* Gradients in the order the backward pass wrote them. */
    for (int o = g->n_ops - 1; o >= 0 && !st && !found && !e->ls; o--) {
        const pl_op *op = &g->ops[o];
        if (!e->hooks->pp_local_op(e, o)) continue;
        pl_op_describe(g, op, op_name, sizeof op_name);
        for (int k = 0; k < op->n_inputs && !st && !found; k++) {
            const pl_tensor_t *x = g->tensors[op->in[k]];
            if (!op->def->backward_input[k].cpu || x->kind != PL_TENSOR_ACTIVATION) continue;
            st = scan_tiles(e, x, true, &found, where, sizeof where);
            if (found)
                snprintf(what, sizeof what, "the gradient of '%s' that the backward pass "
                         "of %s wrote (input %d)", x->name, op_name, k);
        }
        for (int k = op->n_inputs; k < op->n_in && !st && !found; k++) {
            const pl_tensor_t *p = g->tensors[op->in[k]];
            st = scan_param_grad(e, p, &found, where, sizeof where);
            if (found)
                snprintf(what, sizeof what, "the gradient of parameter '%s' that the "
                         "backward pass of %s wrote", p->name, op_name);
        }
    }
    if (st) return st;
    return found ? stop(what, where) : PL_STATUS_OK;
}
