/* ZeRO-3 (zero_stage 3, Gemini's enable_distributed_storage over ranks):
 * each rank keeps 1/dp of every chunk of parameters, gradients and
 * optimizer states. A chunk's whole parameters exist only from the
 * all-gather before its first use in a pass to the release after its
 * last; its whole gradients from the backward pass's gather to the
 * reduce-scatter after its last weight-gradient task.
 *
 * Why op by op: the non-pipelined order submits microbatch 0 through
 * every op before microbatch 1 starts, so every chunk would be gathered
 * at once by the end of microbatch 0's pass. Here each op's tiles are
 * submitted together, so a chunk is gathered, used by every tile, and
 * released before the ops of the next chunks run. Every gradient adds
 * the same terms in the same order as in the item order (bitwise the same
 * results; a parameter two ops use, a GPT's tied embedding, sums each
 * op's tiles in a buffer of its own, engine/tied_grads.c).
 *
 * Why gates: a gather depends only on its shard and the collective
 * token, so StarPU would run every gather at the start of the pass. The
 * j-th release of a pass writes gate j, and the k-th gather reads gate
 * k − PL_Z3_WINDOW when that release has been submitted: at most
 * PL_Z3_WINDOW chunks are gathered ahead of the releases, besides the
 * chunks the op order keeps in use (a tied embedding's chunk is used by
 * the first op and the last). A gate per release, not a ring indexed by
 * chunk: a long-lived chunk would otherwise hold its slot all pass and
 * let the gathers behind it run unbounded.
 *
 * Releases: a no-op task takes the whole chunk read-write (so it runs
 * after every task that uses it) and writes its gate; then starpu_data_invalidate_submit
 * hands the chunk's memory back to StarPU (whose allocation cache gives it
 * to the next gather of that size). A chunk's whole buffers are
 * StarPU-allocated (the chunk set is created "managed": tasks take the
 * whole chunk plus an offset).
 *
 * Gemini's shard_param_frac (static placement and its presets): only the
 * first that fraction of chunk memory is released after its forward use
 * (Colossal-AI's StaticPlacementPolicy reshards accessed chunks until
 * what is left gathered is 1 − shard_param_frac of the total); the others
 * stay gathered into the backward pass, so they are gathered once per
 * step, not twice. 1.0 (the default, and without placement) releases
 * every chunk; 0.0 keeps every chunk gathered for the whole iteration,
 * which is ZeRO-2 with the parameters resharded between steps. */
#include <stdlib.h>
#include <string.h>

#include "collectives/comm.h"
#include "engine/engine_internal.h"
#include "engine/hooks.h"
#include "engine/zero3.h"
#include "graph/error.h"
#include "memory/placement.h"

/* The release takes its chunk's bytes off the gathered count as it runs,
 * not in its callback: StarPU opens the gate (starting the gather behind
 * it) before the callback runs, so a gather could be counted first and a
 * window of chunks look one larger than it is (seen when StarPU-MPI's
 * thread runs the worker, whose callbacks then wait for its polls). */
static void release_cpu(void *buffers[], void *cl_arg) {
    (void)buffers;
    pl_engine_t *e = *(pl_engine_t **)cl_arg;
    struct starpu_task *task = starpu_task_get_current();
    int64_t bytes = (int64_t)starpu_data_get_size(STARPU_TASK_GET_HANDLE(task, 0));
    pthread_mutex_lock(&e->whole_lock);
    e->whole_live[0] -= bytes;
    pthread_mutex_unlock(&e->whole_lock);
}

/* (whole chunk RW, gate W): runs once every task using the chunk has.
 * RW, not R: a read waits for the chunk's last writer (its gather) only,
 * not for the other readers, so a read-only release ran right after the
 * gather, while the ops still read the chunk. Its gate then opened the
 * gathers behind it at once (found 2026-11-27: every chunk was gathered
 * at the start of a pass, and the gathered bytes counted as released). */
static struct starpu_codelet release_cl = {
    .cpu_funcs = {release_cpu},
    .nbuffers = 2,
    .modes = {STARPU_RW, STARPU_W},
    .name = "zero3_release",
};

/* The module's state (e->z3; NULL without ZeRO-3). */
struct pl_zero3 {
    int n;                               /* chunks */
    float **param_shard;                 /* [n]: this rank's part */
    starpu_data_handle_t *h_param_shard;
    int *first_op, *last_op;             /* [n]: the ops (forward order)
                                            that use chunk c first and last */
    bool *gathered;                      /* [n]: whole parameters valid (as
                                            submitted) */
    bool *grads_live;                    /* [n]: whole gradients hold this
                                            update's sums */
    bool *keep;                          /* [n]: kept gathered from the
                                            forward pass's gather to the
                                            backward pass's release
                                            (Gemini's chunks past
                                            shard_param_frac) */
    int *gate_value;                     /* [n] */
    starpu_data_handle_t *h_gate;        /* [n]: release j of a pass writes
                                            gate j */
    int gathers, releases;               /* submitted in this pass */
};

starpu_data_handle_t pl_z3_param_shard(const pl_engine_t *e, int c) {
    return e->z3 ? e->z3->h_param_shard[c] : NULL;
}

pl_status pl_engine_z3_init(pl_engine_t *e) {
    if (e->dp <= 1 || e->opt.zero_stage != 3) return PL_STATUS_OK;
    int n = e->chunks.n;
    pl_zero3 *z = e->z3 = calloc(1, sizeof *e->z3);
    if (!z) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_engine_new: out of memory (ZeRO-3)");
    z->n = n;
    z->param_shard = calloc((size_t)(n ? n : 1), sizeof *z->param_shard);
    z->h_param_shard = calloc((size_t)(n ? n : 1), sizeof *z->h_param_shard);
    z->first_op = malloc((size_t)(n ? n : 1) * sizeof *z->first_op);
    z->last_op = malloc((size_t)(n ? n : 1) * sizeof *z->last_op);
    z->gathered = calloc((size_t)(n ? n : 1), sizeof *z->gathered);
    z->grads_live = calloc((size_t)(n ? n : 1), sizeof *z->grads_live);
    z->gate_value = calloc((size_t)(n ? n : 1), sizeof *z->gate_value);
    z->h_gate = calloc((size_t)(n ? n : 1), sizeof *z->h_gate);
    if (!z->param_shard || !z->h_param_shard || !z->first_op || !z->last_op ||
        !z->gathered || !z->grads_live || !z->gate_value || !z->h_gate)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_engine_new: out of memory (ZeRO-3)");
    for (int c = 0; c < n; c++) z->first_op[c] = z->last_op[c] = -1;
    /* Gemini's shard_param_frac (static placement): the chunks past the
     * first that fraction of chunk memory stay gathered through the
     * iteration, gathered once per step instead of once per pass. */
    z->keep = calloc((size_t)(n ? n : 1), sizeof *z->keep);
    int64_t *chunk_bytes = malloc((size_t)(n ? n : 1) * sizeof *chunk_bytes);
    bool *sharded = malloc((size_t)(n ? n : 1) * sizeof *sharded);
    bool ok = z->keep && chunk_bytes && sharded;
    for (int c = 0; ok && c < n; c++)
        chunk_bytes[c] = (int64_t)(e->chunks.chunks[c].numel * e->chunks.elem);
    if (ok && pl_placement_static_sharded(e->opt.placement.policy, &e->opt.placement,
                                          chunk_bytes, n, sharded))
        for (int c = 0; c < n; c++) z->keep[c] = !sharded[c];
    free(chunk_bytes);
    free(sharded);
    if (!ok) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_engine_new: out of memory (ZeRO-3)");
    for (int i = 0; i < e->g->n_ops; i++) {
        const pl_op *op = &e->g->ops[i];
        for (int k = 0; k < op->n_in; k++) {
            const pl_tensor_t *t = e->g->tensors[op->in[k]];
            if (t->kind != PL_TENSOR_PARAM) continue;
            int c = e->trt[t->id].chunk;
            if (z->first_op[c] < 0) z->first_op[c] = i;
            z->last_op[c] = i;
        }
    }
    for (int c = 0; c < n; c++) {
        /* A chunk no op uses (parameters left out of the model) is
         * gathered and released around the first op, like any other. */
        if (z->first_op[c] < 0) z->first_op[c] = z->last_op[c] = 0;
        pl_chunk *ch = &e->chunks.chunks[c];
        int64_t slo, shi;
        e->hooks->dp_shard(e, c, &slo, &shi);
        size_t lo = (size_t)slo, len = (size_t)(shi - slo);
        /* The initial values are whole on every rank (the same seed, as
         * pl_engine_dp_init checked): each keeps its part. */
        if (starpu_data_acquire(ch->h_param, STARPU_R) != 0)
            return pl_fail(PL_STATUS_RUNTIME_ERROR, "pl_engine_new: cannot read chunk %d", c);
        size_t elem = e->chunks.elem; /* 16 bits in 16-bit runs */
        pl_status st = pl_engine_shard_new(
            e, len, elem,
            len ? (const char *)starpu_vector_get_local_ptr(ch->h_param) + lo * elem : NULL,
            (void **)&z->param_shard[c], &z->h_param_shard[c]);
        starpu_data_release(ch->h_param);
        if (st) return st;
        /* From here on the whole chunk lives only while gathered. */
        starpu_data_invalidate(ch->h_param);
        starpu_data_invalidate(ch->h_grad);
    }
    for (int k = 0; k < n; k++)
        starpu_variable_data_register(&z->h_gate[k], STARPU_MAIN_RAM,
                                      (uintptr_t)&z->gate_value[k],
                                      sizeof z->gate_value[k]);
    for (int c = 0; c < n; c++) {
        static const char *const what[] = {"gather_fwd", "gather_bwd", "release_fwd",
                                           "release_bwd"};
        for (int w = 0; w <= PL_Z3_RELEASE_B; w++) {
            size_t i = pl_z3_task_index(e, w, c);
            pl_engine_name_comm_task(e, i, what[w], c);
            if (w >= PL_Z3_RELEASE_F) { /* not collectives: any worker */
                e->tasks[i].slot = PL_SLOT_MEM;
                e->tasks[i].tag.comm = 0;
                e->tasks[i].tag.background = 0;
            }
        }
        pl_engine_name_comm_task(e, pl_comm_task_index(e, c), "reduce_scatter", c);
    }
    return PL_STATUS_OK;
}

void pl_engine_z3_free(pl_engine_t *e) {
    pl_zero3 *z = e->z3;
    if (!z) return;
    for (int k = 0; z->h_gate && k < z->n; k++)
        if (z->h_gate[k]) starpu_data_unregister(z->h_gate[k]);
    free(z->h_gate);
    free(z->gate_value);
    for (int c = 0; z->h_param_shard && c < z->n; c++) {
        if (z->h_param_shard[c]) starpu_data_unregister(z->h_param_shard[c]);
        if (z->param_shard[c]) starpu_free(z->param_shard[c]);
    }
    free(z->h_param_shard);
    free(z->param_shard);
    free(z->first_op);
    free(z->last_op);
    free(z->gathered);
    free(z->grads_live);
    free(z->keep);
    free(z);
    e->z3 = NULL;
}

/* Adds what a finished ZeRO-3 task changed to the gathered bytes (from
 * the task callback, so the figures are measured as the tasks ran): a
 * gather adds its whole parameters (and zeroed gradients), a
 * reduce-scatter takes the gradients away (a release takes the parameters
 * away itself, release_cpu). */
void pl_engine_z3_task_done(pl_engine_t *e, const struct starpu_task *task) {
    int64_t delta[2] = {0, 0};
    if (task->cl == &pl_cl_collective) { /* releases count as they run */
        const pl_collective_args *a = task->cl_arg;
        if (a->kind == PL_COLLECTIVE_GATHER_SHARDS) {
            /* (shard, whole) when it gathers, then the zeroed gradients */
            int pair = (int)STARPU_TASK_GET_NBUFFERS(task) - 1 - a->n_order - a->n_zero;
            if (pair == 2)
                delta[0] = (int64_t)starpu_data_get_size(STARPU_TASK_GET_HANDLE(task, 1));
            if (a->n_zero)
                delta[1] = (int64_t)starpu_data_get_size(STARPU_TASK_GET_HANDLE(task, pair));
        } else if (a->kind == PL_COLLECTIVE_REDUCE_SCATTER_MEAN) {
            delta[1] = -(int64_t)starpu_data_get_size(STARPU_TASK_GET_HANDLE(task, 0));
        }
    }
    if (!delta[0] && !delta[1]) return;
    pthread_mutex_lock(&e->whole_lock);
    for (int k = 0; k < 2; k++) {
        e->whole_live[k] += delta[k];
        if (e->whole_live[k] > e->whole_peak[k]) e->whole_peak[k] = e->whole_live[k];
    }
    pthread_mutex_unlock(&e->whole_lock);
}

/* The gather of chunk c before pass `what` (GATHER_F or GATHER_B): its
 * whole parameters unless they are still gathered, and in the backward
 * pass zeroed whole gradients unless they hold this update's sums. */
static pl_status gather(pl_engine_t *e, int c, int what, bool gated) {
    pl_zero3 *z = e->z3;
    pl_chunk *ch = &e->chunks.chunks[c];
    bool params = !z->gathered[c];
    bool grads = what == PL_Z3_GATHER_B && !z->grads_live[c];
    if (!params && !grads) return PL_STATUS_OK;
    /* shard, whole parameters, gradients, gate, token */
    starpu_data_handle_t h[5];
    enum starpu_data_access_mode modes[5];
    int nb = 0;
    pl_collective_args a = {.kind = PL_COLLECTIVE_GATHER_SHARDS, .n_zero = grads,
                            .group = e->dp_group, .bf16 = e->bf16};
    if (params) {
        h[nb] = z->h_param_shard[c], modes[nb++] = STARPU_R;
        h[nb] = ch->h_param, modes[nb++] = STARPU_W;
    }
    if (grads) h[nb] = ch->h_grad, modes[nb++] = STARPU_W;
    /* Within a pass: after the release PL_Z3_WINDOW gathers back, when
     * it has been submitted (pl_engine_gather_params's are not gated). */
    int k = z->gathers - PL_Z3_WINDOW;
    if (params) z->gathers++;
    if (params && gated && k >= 0 && k < z->releases) {
        h[nb] = z->h_gate[k], modes[nb++] = STARPU_R;
        a.n_order = 1;
    }
    z->gathered[c] = true;
    if (grads) z->grads_live[c] = true;
    h[nb] = e->h_comm_token, modes[nb++] = STARPU_RW;
    e->pending_step = -1;
    return pl_engine_submit_modes(e, &pl_cl_collective, pl_z3_task_index(e, what, c), &a,
                                  sizeof a, nb, h, modes);
}

/* The release of chunk c's whole parameters after pass `what`'s last use
 * (RELEASE_F or RELEASE_B). */
static pl_status release(pl_engine_t *e, int c, int what) {
    pl_zero3 *z = e->z3;
    if (!z->gathered[c]) return PL_STATUS_OK;
    pl_chunk *ch = &e->chunks.chunks[c];
    starpu_data_handle_t h[2] = {ch->h_param, z->h_gate[z->releases++ % e->chunks.n]};
    e->pending_step = -1;
    pl_status st = pl_engine_submit(e, &release_cl, pl_z3_task_index(e, what, c), &e,
                                    sizeof e, 2, h, 0);
    if (st) return st;
    starpu_data_invalidate_submit(ch->h_param);
    z->gathered[c] = false;
    return PL_STATUS_OK;
}

/* Chunk c's averaged gradients into this rank's shard, then the whole
 * gradients released: ZeRO-2's reduce-scatter, chunk by chunk (Gemini
 * reduces per chunk; reduce_bucket_size_in_m does not apply). */
static pl_status reduce_scatter(pl_engine_t *e, int c) {
    pl_zero3 *z = e->z3;
    if (!z->grads_live[c]) return PL_STATUS_OK;
    /* A tied parameter's later uses: their gradients first. */
    pl_status tst = e->hooks->ties_submit_sums(e, c);
    if (tst) return tst;
    pl_chunk *ch = &e->chunks.chunks[c];
    size_t index = pl_comm_task_index(e, c);
    starpu_data_handle_t h[3] = {ch->h_grad, e->hooks->dp_grad_shard(e, c), e->h_comm_token};
    enum starpu_data_access_mode modes[3] = {STARPU_R, STARPU_W, STARPU_RW};
    pl_collective_args a = {.kind = PL_COLLECTIVE_REDUCE_SCATTER_MEAN, .group = e->dp_group,
                            .bf16 = e->bf16};
    e->pending_step = -1;
    pl_status st = pl_engine_submit_modes(e, &pl_cl_collective, index, &a, sizeof a, 3, h,
                                          modes);
    if (st) return st;
    starpu_data_invalidate_submit(ch->h_grad);
    z->grads_live[c] = false;
    return PL_STATUS_OK;
}

pl_status pl_engine_z3_submit_iteration(pl_engine_t *e, bool forward_only) {
    pl_zero3 *z = e->z3;
    int n_ops = e->g->n_ops, n = e->chunks.n, m = e->active_tiles;
    pl_status st = PL_STATUS_OK;
    z->gathers = z->releases = 0; /* the forward pass */
    for (int op = 0; op < n_ops && !st; op++) {
        for (int c = 0; c < n && !st; c++)
            if (z->first_op[c] == op) st = gather(e, c, PL_Z3_GATHER_F, true);
        /* A placement step per op (its prologue runs the policy), opened
         * by the op's first task, after the gathers it waits for. */
        for (int tile = 0; tile < m && !st; tile++) {
            e->pending_step = e->placement && tile == 0 ? pl_step_forward(e, op) : -1;
            st = pl_op_submit_forward(e, op, tile, !forward_only);
            if (!st) st = e->hooks->recompute_forward_done(e, op, tile);
        }
        e->pending_step = -1;
        /* The last chunks are the backward pass's first: a training step
         * keeps them instead of gathering them again right away, and
         * those shard_param_frac keeps gathered. */
        for (int c = 0; c < n && !st; c++)
            if (z->last_op[c] == op &&
                (forward_only || (c < n - PL_Z3_WINDOW && !z->keep[c])))
                st = release(e, c, PL_Z3_RELEASE_F);
    }
    if (forward_only || st) return st;
    /* GradAccumOptimizer: gradients are reduced only in the backward pass
     * that completes accumulate_size of them (no_sync before it). */
    bool boundary = e->opt.accumulate_size <= 1 || e->accumulate_step >= e->opt.accumulate_size;
    bool overlap = e->opt.overlap_communication;
    z->gathers = z->releases = 0; /* the backward pass */
    for (int op = n_ops - 1; op >= 0 && !st; op--) {
        /* A recomputed unit's re-run needs the parameters of all its ops
         * before the backward pass reaches their chunks' last use. */
        int u0, u1;
        bool rerun = e->hooks->recompute_unit_at(e, op, &u0, &u1);
        for (int c = n - 1; c >= 0 && !st; c--)
            if (z->last_op[c] == op || (rerun && z->first_op[c] <= u1 && z->last_op[c] >= u0))
                st = gather(e, c, PL_Z3_GATHER_B, true);
        for (int tile = 0; tile < m && !st; tile++) {
            st = e->hooks->recompute_backward_begin(e, op, tile);
            e->pending_step = e->placement && tile == 0 ? pl_step_backward(e, op) : -1;
            if (!st) st = pl_op_submit_backward(e, op, tile);
            if (!st) e->hooks->placement_release_op(e, op, tile);
            if (!st && op == 0) e->hooks->placement_release_tile(e, tile);
            if (!st) st = e->hooks->recompute_backward_done(e, op, tile);
        }
        e->pending_step = -1;
        for (int c = n - 1; c >= 0 && !st; c--) {
            if (z->first_op[c] != op) continue;
            st = release(e, c, PL_Z3_RELEASE_B);
            if (!st && boundary && overlap) st = reduce_scatter(e, c);
        }
    }
    if (st || !boundary || overlap) return st;
    /* Without overlap the reductions wait for the whole backward pass
     * (and start together on every rank). */
    starpu_task_wait_for_all();
    for (int c = n - 1; c >= 0 && !st; c--) st = reduce_scatter(e, c);
    return st;
}

pl_status pl_engine_z3_gather_all(pl_engine_t *e) {
    if (!e->z3) return PL_STATUS_OK;
    /* The steps' peak counts what their own gathers hold, not this. */
    pthread_mutex_lock(&e->whole_lock);
    int64_t peak = e->whole_peak[0];
    pthread_mutex_unlock(&e->whole_lock);
    pl_status st = PL_STATUS_OK;
    for (int c = 0; c < e->chunks.n && !st; c++) st = gather(e, c, PL_Z3_GATHER_F, false);
    starpu_task_wait_for_all();
    pthread_mutex_lock(&e->whole_lock);
    e->whole_peak[0] = peak;
    pthread_mutex_unlock(&e->whole_lock);
    return st;
}

pl_status pl_engine_z3_check_gathered(const pl_engine_t *e, const pl_tensor_t *p,
                                      const char *fn) {
    if (!e->z3 || e->z3->gathered[e->trt[p->id].chunk]) return PL_STATUS_OK;
    return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                   "%s: '%s' is sharded over the ranks (zero_stage 3) and not gathered now: "
                   "call pl_engine_gather_params on every rank first", fn, p->name);
}

pl_status pl_engine_z3_store_shard(pl_engine_t *e, const pl_tensor_t *p) {
    pl_zero3 *z = e->z3;
    if (!z) return PL_STATUS_OK;
    int c = e->trt[p->id].chunk;
    pl_chunk *ch = &e->chunks.chunks[c];
    int64_t slo, shi;
    e->hooks->dp_shard(e, c, &slo, &shi);
    size_t lo = (size_t)slo, hi = (size_t)shi;
    size_t a = ch->offsets[e->trt[p->id].slot], b = a + (size_t)p->numel;
    if (a < lo) a = lo;
    if (b > hi) b = hi;
    if (a >= b) return PL_STATUS_OK; /* none of it is this rank's */
    if (starpu_data_acquire(ch->h_param, STARPU_R) != 0)
        return pl_fail(PL_STATUS_RUNTIME_ERROR, "cannot read the chunk of '%s'", p->name);
    if (starpu_data_acquire(z->h_param_shard[c], STARPU_RW) != 0) {
        starpu_data_release(ch->h_param);
        return pl_fail(PL_STATUS_RUNTIME_ERROR, "cannot write the shard of '%s'", p->name);
    }
    size_t elem = e->chunks.elem;
    memcpy((char *)starpu_vector_get_local_ptr(z->h_param_shard[c]) + (a - lo) * elem,
           (const char *)starpu_vector_get_local_ptr(ch->h_param) + a * elem, (b - a) * elem);
    starpu_data_release(z->h_param_shard[c]);
    starpu_data_release(ch->h_param);
    return PL_STATUS_OK;
}
