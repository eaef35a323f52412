/* Activation memory, counted as the tasks run rather than estimated from
 * shapes: a value (or gradient) tile is live from the start of the first
 * task that writes it until the engine drops it, and the counters hold
 * the bytes live now and the most at once. What frees memory in a run is
 * the drops (activation recomputation, a placement policy's release of a
 * finished microbatch), so every drop goes through pl_act_mem_drop: it
 * orders a callback after the tasks that use the tile (an acquisition in
 * W mode on no node: no transfer, only the dependencies), which uncounts
 * the tile, then StarPU's invalidation frees its buffers. */
#include <stdlib.h>

#include "engine/activation_memory.h"
#include "graph/error.h"

/* One drop's callback argument: preallocated, one per (tensor, tile,
 * value/gradient), so a drop allocates nothing. */
typedef struct act_drop {
    pl_act_mem *m;
    starpu_data_handle_t h;
    int index; /* into live[] */
    bool grad;
} act_drop;

struct pl_act_mem {
    pthread_mutex_t lock;
    int n_tiles;
    unsigned char *live[2];  /* [n_tensors * n_tiles]: values, gradients */
    act_drop *drops[2];      /* likewise */
    int64_t bytes[2], peak[2];
};

static pthread_mutex_t scratch_lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t scratch_bytes, scratch_peak;

pl_status pl_act_mem_init(pl_engine_t *e) {
    pl_act_mem *m = calloc(1, sizeof *m);
    size_t n = (size_t)e->g->n_tensors * e->n_tiles;
    if (m) {
        for (int k = 0; k < 2; k++) {
            m->live[k] = calloc(n ? n : 1, 1);
            m->drops[k] = calloc(n ? n : 1, sizeof *m->drops[k]);
        }
    }
    if (!m || !m->live[0] || !m->live[1] || !m->drops[0] || !m->drops[1]) {
        e->act_mem = m;
        pl_act_mem_free(e);
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory counting activations");
    }
    pthread_mutex_init(&m->lock, NULL);
    m->n_tiles = e->n_tiles;
    e->act_mem = m;
    return PL_STATUS_OK;
}

void pl_act_mem_free(pl_engine_t *e) {
    pl_act_mem *m = e->act_mem;
    if (!m) return;
    for (int k = 0; k < 2; k++) {
        free(m->live[k]);
        free(m->drops[k]);
    }
    free(m);
    e->act_mem = NULL;
}

/* Tensors whose tiles are counted: op outputs and their auxiliary
 * tensors (not inputs, which the host feeds, nor scalars). */
static bool counted(const pl_tensor_t *t) { return t->kind == PL_TENSOR_ACTIVATION; }

static void make_live(pl_act_mem *m, int k, int index, starpu_data_handle_t h) {
    int64_t size = (int64_t)starpu_data_get_size(h);
    pthread_mutex_lock(&m->lock);
    if (!m->live[k][index]) {
        m->live[k][index] = 1;
        m->bytes[k] += size;
        if (m->bytes[k] > m->peak[k]) m->peak[k] = m->bytes[k];
    }
    pthread_mutex_unlock(&m->lock);
}

void pl_act_mem_forward_writes(pl_engine_t *e, int op_index, int tile) {
    pl_act_mem *m = e->act_mem;
    if (!m) return;
    const pl_op *op = &e->g->ops[op_index];
    int ids[3] = {op->out, op->saved, op->invalid};
    for (int k = 0; k < 3; k++)
        if (ids[k] >= 0 && counted(e->g->tensors[ids[k]]))
            make_live(m, 0, ids[k] * m->n_tiles + tile, e->trt[ids[k]].val[tile]);
}

void pl_act_mem_grad_writes(pl_engine_t *e, int tensor, int tile) {
    pl_act_mem *m = e->act_mem;
    if (!m || !counted(e->g->tensors[tensor]) || !e->trt[tensor].grad) return;
    make_live(m, 1, tensor * m->n_tiles + tile, e->trt[tensor].grad[tile]);
}

/* Runs once every task submitted before the drop that uses the tile has
 * run (and before the invalidation submitted right after it). */
static void dropped(void *arg) {
    act_drop *d = arg;
    pl_act_mem *m = d->m;
    int k = d->grad;
    pthread_mutex_lock(&m->lock);
    if (m->live[k][d->index]) {
        m->live[k][d->index] = 0;
        m->bytes[k] -= (int64_t)starpu_data_get_size(d->h);
    }
    pthread_mutex_unlock(&m->lock);
    starpu_data_release_on_node(d->h, STARPU_ACQUIRE_NO_NODE);
}

void pl_act_mem_drop(pl_engine_t *e, int tensor, int tile, bool grad) {
    const pl_tensor_rt *r = &e->trt[tensor];
    starpu_data_handle_t h = grad ? (r->grad ? r->grad[tile] : NULL) : r->val[tile];
    if (!h) return;
    pl_act_mem *m = e->act_mem;
    if (m && counted(e->g->tensors[tensor])) {
        act_drop *d = &m->drops[grad][tensor * m->n_tiles + tile];
        *d = (act_drop){.m = m, .h = h, .index = tensor * m->n_tiles + tile, .grad = grad};
        starpu_data_acquire_on_node_cb(h, STARPU_ACQUIRE_NO_NODE, STARPU_W, dropped, d);
    }
    starpu_data_invalidate_submit(h);
}

void pl_act_mem_scratch(int64_t bytes) {
    pthread_mutex_lock(&scratch_lock);
    scratch_bytes += bytes;
    if (scratch_bytes > scratch_peak) scratch_peak = scratch_bytes;
    pthread_mutex_unlock(&scratch_lock);
}

pl_status pl_engine_activation_bytes(pl_engine_t *e, pl_activation_bytes *out) {
    if (!e || !out)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_activation_bytes: %s is NULL",
                       !e ? "engine" : "out");
    starpu_task_wait_for_all();
    pl_act_mem *m = e->act_mem;
    *out = (pl_activation_bytes){0};
    if (m) {
        pthread_mutex_lock(&m->lock);
        *out = (pl_activation_bytes){.values = m->bytes[0], .values_peak = m->peak[0],
                                     .grads = m->bytes[1], .grads_peak = m->peak[1]};
        pthread_mutex_unlock(&m->lock);
    }
    pthread_mutex_lock(&scratch_lock);
    out->scratch_peak = scratch_peak;
    pthread_mutex_unlock(&scratch_lock);
    return PL_STATUS_OK;
}

void pl_engine_reset_activation_peak(pl_engine_t *e) {
    if (!e) return;
    starpu_task_wait_for_all();
    pl_act_mem *m = e->act_mem;
    if (m) {
        pthread_mutex_lock(&m->lock);
        m->peak[0] = m->bytes[0];
        m->peak[1] = m->bytes[1];
        pthread_mutex_unlock(&m->lock);
    }
    pthread_mutex_lock(&scratch_lock);
    scratch_peak = scratch_bytes;
    pthread_mutex_unlock(&scratch_lock);
}
