/* Pipeline stages across ranks (pp > 1, HybridParallelPlugin's pp_size):
 * stage s runs on dp ranks, one per data-parallel replica, placed by
 * pl_runtime_options.dp_outside (HybridParallelPlugin's: by default
 * replica d's stages are ranks d·pp .. d·pp + pp − 1; off, stage s's
 * replicas are ranks s·dp .. s·dp + dp − 1; dp 1: stage s on rank s).
 * Replica d is a pipeline of its own: activations cross between its ranks
 * only, and it is its stages' group (pp_group) that sums shared chunks.
 * The ranks of one stage average their gradients first, as a
 * data-parallel group (dp_group, engine/data_parallel.c). Every rank builds the same engine — the whole
 * graph, every chunk — and walks the same submission order
 * (engine/pipeline.c), but submits only its own stage's tasks. The
 * `pleiades` policy then runs them in the stage's schedule order, as it
 * does for a stage inside one process.
 *
 * Activations: an op's output that an op of a part on another stage reads
 * crosses ranks as a StarPU-MPI transfer of its tile: sent after the
 * producing item's tasks, received before the consuming item's (backward:
 * the gradient the other way). The transfers take the tile handles in
 * submission order like tasks, so StarPU's implicit dependencies order
 * them with the tasks around them, and the policy's per-stage order is
 * what decides when each microbatch moves.
 *
 * Parameters: a rank updates the chunks its stage uses and no other (a
 * chunk other stages alone use goes stale here until pl_engine_pp_sync).
 * A chunk several stages use — a tied embedding (the embedding on the
 * first stage, the LM head on the last), or a chunk that straddles a cut
 * — gets each stage's gradient contributions summed over ranks by one
 * collective per update; every user then makes the same update. A rank
 * that never writes a parameter's gradient holds zeros for it, so the sum
 * of a parameter only one stage uses is that stage's gradient exactly
 * (x + 0 = x): the same bits as the one-process run. A tied parameter
 * too: one process adds its later uses' gradients, each summed in a
 * buffer of its own, to the first use's at the update
 * (engine/tied_grads.c), in the collective's rank order. Norms and
 * overflow checks count each chunk once, on the lowest stage using it,
 * and are summed (max) over ranks like ZeRO-2's. */
#include <stdlib.h>
#include <string.h>

#include "collectives/comm.h"
#include "engine/engine_internal.h"
#include "engine/hooks.h"
#include "engine/pipeline_ranks.h"
#include "graph/error.h"

/* The module's state (e->ppr). An activation that crosses ranks: made by
 * an op of part `from`, used by ops of part `to` on another stage. */
typedef struct pl_pp_edge {
    int tensor, from, to;
} pl_pp_edge;
struct pl_pp_ranks {
    uint32_t *users;                     /* [chunks.n]: bit s = stage s uses
                                            a parameter of chunk c */
    float **grad_sum;                    /* [chunks.n]: chunks several stages
                                            use: their contributions summed
                                            over ranks; NULL for the others */
    starpu_data_handle_t *h_grad_sum;
    pl_pp_edge *edges;                   /* activations crossing ranks */
    int n_edges;
    bool synced;                         /* every chunk current on this rank
                                            (none updated since a sync) */
};

static int part_stage(const pl_engine_t *e, int part) { return e->part_stage[part]; }

static int op_part(const pl_engine_t *e, int op) { return e->block_part[e->g->ops[op].block]; }

/* The world rank running stage s of this rank's replica. */
static int stage_rank(const pl_engine_t *e, int stage) {
    return pl_runtime_grid_rank(e->rt, e->dp, e->pp, e->dp_rank, stage);
}

int pl_engine_pp_op_stage(const pl_engine_t *e, int op) {
    return part_stage(e, op_part(e, op));
}

bool pl_engine_pp_local_part(const pl_engine_t *e, int part) {
    return e->pp <= 1 || part_stage(e, part) == e->pp_stage;
}

bool pl_engine_pp_local_op(const pl_engine_t *e, int op) {
    return e->pp <= 1 || pl_engine_pp_local_part(e, op_part(e, op));
}

bool pl_engine_pp_updates_chunk(const pl_engine_t *e, int c) {
    return e->pp <= 1 || (e->ppr->users[c] >> e->pp_stage & 1u);
}

static int lowest_user(const pl_engine_t *e, int c) {
    uint32_t u = e->ppr->users[c];
    return u ? __builtin_ctz(u) : 0;
}

bool pl_engine_pp_counts_chunk(const pl_engine_t *e, int c) {
    return e->pp <= 1 || lowest_user(e, c) == e->pp_stage;
}

/* Which stages use each chunk, and which activations cross ranks. An
 * activation read on two other stages, or by two parts of another stage,
 * would need its gradient contributions added across ranks in the
 * one-process order: refused, naming it. */
static pl_status retag(pl_engine_t *e) {
    if (e->pp <= 1) return PL_STATUS_OK;
    const pl_graph_t *g = e->g;
    memset(e->ppr->users, 0, (size_t)(e->chunks.n ? e->chunks.n : 1) * sizeof *e->ppr->users);
    int *to = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *to);
    if (!to) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_engine_new: out of memory (pp)");
    for (int t = 0; t < g->n_tensors; t++) to[t] = -1;
    pl_status st = PL_STATUS_OK;
    for (int op = 0; op < g->n_ops && !st; op++) {
        const pl_op *o = &g->ops[op];
        int k = op_part(e, op);
        for (int i = 0; i < o->n_in; i++) {
            const pl_tensor_t *t = g->tensors[o->in[i]];
            if (t->kind == PL_TENSOR_PARAM) {
                e->ppr->users[e->trt[t->id].chunk] |= 1u << part_stage(e, k);
                continue;
            }
            if (t->producer < 0) continue; /* inputs are fed on every rank */
            int from = op_part(e, t->producer);
            if (k == from || part_stage(e, k) == part_stage(e, from)) continue;
            if (to[t->id] >= 0 && to[t->id] != k)
                st = pl_fail(PL_STATUS_UNSUPPORTED,
                             "pl_engine_new: pp %d: activation '%s' (stage part %d) is read "
                             "by parts %d and %d of other stages; across ranks an activation "
                             "may cross to one other part only (cut the stages elsewhere "
                             "with layers_per_stage)", e->pp, t->name, from, to[t->id], k);
            to[t->id] = k;
        }
    }
    int n = 0;
    for (int t = 0; t < g->n_tensors; t++) n += to[t] >= 0;
    free(e->ppr->edges);
    e->ppr->edges = malloc((size_t)(n ? n : 1) * sizeof *e->ppr->edges);
    if (!e->ppr->edges && !st) st = pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory (pp)");
    e->ppr->n_edges = 0;
    for (int t = 0; t < g->n_tensors && !st; t++)
        if (to[t] >= 0)
            e->ppr->edges[e->ppr->n_edges++] =
                (pl_pp_edge){t, op_part(e, g->tensors[t]->producer), to[t]};
    free(to);
    if (st) return st;
    /* Buffers for the sums of chunks several stages use (the set can
     * change with a recut; the sums are rewritten whole at each update).
     * Under ZeRO-2 a rank sums only its shard of the averaged gradients
     * (the same shard on every stage of its replica). */
    bool shards = e->opt.zero_stage >= 2 && e->opt.dp > 1;
    for (int c = 0; c < e->chunks.n; c++) {
        bool shared = (e->ppr->users[c] & (e->ppr->users[c] - 1)) != 0;
        if (!shared || e->ppr->grad_sum[c]) continue;
        size_t len = e->chunks.chunks[c].numel, lo, hi, elem = e->chunks.elem;
        if (shards) {
            pl_comm_shard(len, e->opt.dp,
                          pl_runtime_grid_replica(e->rt, e->opt.dp, e->pp, e->rt->rank), &lo,
                          &hi);
            len = hi > lo ? hi - lo : 1; /* StarPU refuses empty vectors */
        }
        /* In the gradients' format: 16-bit runs sum in fp32 inside the
         * collective and round once. */
        if (starpu_malloc((void **)&e->ppr->grad_sum[c], len * elem) != 0)
            return pl_fail(PL_STATUS_OUT_OF_MEMORY,
                           "pl_engine_new: out of memory for the summed gradients of chunk %d "
                           "(%zu values)", c, len);
        memset(e->ppr->grad_sum[c], 0, len * elem);
        starpu_vector_data_register(&e->ppr->h_grad_sum[c], STARPU_MAIN_RAM,
                                    (uintptr_t)e->ppr->grad_sum[c], (uint32_t)len, elem);
    }
    return PL_STATUS_OK;
}

starpu_data_handle_t pl_engine_pp_grad_sum(const pl_engine_t *e, int c) {
    return e->ppr->h_grad_sum[c];
}

void pl_engine_pp_mark_updated(pl_engine_t *e) {
    if (e->pp > 1) e->ppr->synced = false;
}

pl_status pl_engine_pp_init(pl_engine_t *e) {
    const pl_engine_options *o = &e->opt;
    e->pp = o->pp > 0 ? o->pp : 1;
    e->ppr = calloc(1, sizeof *e->ppr);
    if (!e->ppr) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_engine_new: out of memory (pp)");
    e->ppr->synced = true;
    if (o->pp < 0 || o->pp > PL_MAX_STAGES)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_new: pp %d out of range [1, %d]",
                       o->pp, PL_MAX_STAGES);
    if (e->pp == 1) return PL_STATUS_OK;
    int world = e->rt->world_size, dp = o->dp > 0 ? o->dp : 1;
    if (!o->schedule_def)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: pp %d needs a pipeline schedule (1f1b, interleaved, "
                       "zb-h1, gpipe or a registered one), not 'none'", e->pp);
    if (o->stages != e->pp)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: pp %d but stages %d: across ranks every stage is a "
                       "rank (set stages to pp)", e->pp, o->stages);
    if (dp * e->pp != world)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: pp %d x dp %d = %d ranks, but the runtime has %d "
                       "(launch with mpirun -np %d and a distributed runtime)", e->pp, dp,
                       e->pp * dp, world, e->pp * dp);
    e->pp_stage = pl_runtime_grid_stage(e->rt, dp, e->pp, e->rt->rank);
    int n = e->chunks.n ? e->chunks.n : 1;
    e->ppr->users = calloc((size_t)n, sizeof *e->ppr->users);
    e->ppr->grad_sum = calloc((size_t)n, sizeof *e->ppr->grad_sum);
    e->ppr->h_grad_sum = calloc((size_t)n, sizeof *e->ppr->h_grad_sum);
    if (!e->ppr->users || !e->ppr->grad_sum || !e->ppr->h_grad_sum)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_engine_new: out of memory (pp)");
    return retag(e);
}

void pl_engine_pp_free(pl_engine_t *e) {
    if (!e->ppr) return;
    for (int c = 0; e->ppr->grad_sum && c < e->chunks.n; c++) {
        if (e->ppr->h_grad_sum[c]) starpu_data_unregister(e->ppr->h_grad_sum[c]);
        if (e->ppr->grad_sum[c]) starpu_free(e->ppr->grad_sum[c]);
    }
    free(e->ppr->grad_sum);
    free(e->ppr->h_grad_sum);
    free(e->ppr->users);
    free(e->ppr->edges);
    free(e->ppr);
    e->ppr = NULL;
}

/* A transfer's tag: unique per (direction, tensor, tile) in an iteration;
 * iterations do not overlap (the pipeline waits at each start). */
static int64_t edge_tag(const pl_engine_t *e, bool backward, int tensor, int mb) {
    return ((int64_t)(backward ? 1 : 0) * e->g->n_tensors + tensor) * e->n_tiles + mb;
}

/* A gradient no task of this stage wrote (the activation did not reach
 * the loss here) still travels, as zeros: the producer posted its receive. */
static pl_status zero_unwritten(pl_engine_t *e, int t, int mb) {
    if (e->trt[t].grad_written[mb]) return PL_STATUS_OK;
    starpu_data_handle_t h = e->trt[t].grad[mb];
    if (starpu_data_acquire(h, STARPU_W) != 0)
        return pl_fail(PL_STATUS_RUNTIME_ERROR, "cannot write a gradient tile");
    memset((void *)starpu_vector_get_local_ptr(h), 0, starpu_vector_get_nx(h) *
                                                          starpu_vector_get_elemsize(h));
    starpu_data_release(h);
    e->trt[t].grad_written[mb] = true;
    return PL_STATUS_OK;
}

/* The transfers of one item of part `part`: before its tasks (`begin`)
 * the receives of what it reads from other ranks — forward the
 * activations it consumes, backward the gradients of those it produced —
 * and after them the sends of what other ranks read from it. */
static pl_status item_transfers(pl_engine_t *e, bool backward, int part, int mb, bool begin) {
    pl_status st = PL_STATUS_OK;
    for (int i = 0; i < e->ppr->n_edges && !st; i++) {
        const pl_pp_edge *d = &e->ppr->edges[i];
        pl_tensor_rt *r = &e->trt[d->tensor];
        if (backward && !r->grad) continue;
        /* Forward, data flows from → to; backward, to → from. */
        int here = (backward == begin) ? d->from : d->to;
        int there = (backward == begin) ? d->to : d->from;
        if (here != part) continue;
        starpu_data_handle_t h = backward ? r->grad[mb] : r->val[mb];
        int rank = stage_rank(e, part_stage(e, there));
        int64_t tag = edge_tag(e, backward, d->tensor, mb);
        if (begin) {
            st = pl_comm_recv_handle(h, rank, tag);
            /* The consumers' sum arrives first (their parts come later in
             * the model, earlier in the backward order): this part's own
             * readers add to it. */
            if (backward) r->grad_written[mb] = true;
        } else {
            if (backward) st = zero_unwritten(e, d->tensor, mb);
            if (!st) st = pl_comm_send_handle(h, rank, tag);
        }
    }
    return st;
}

pl_status pl_engine_pp_item_begin(pl_engine_t *e, bool backward, int part, int mb) {
    return item_transfers(e, backward, part, mb, true);
}

pl_status pl_engine_pp_item_end(pl_engine_t *e, bool backward, int part, int mb) {
    return item_transfers(e, backward, part, mb, false);
}

pl_status pl_engine_pp_recut(pl_engine_t *e) {
    pl_status st = retag(e);
    if (st) return st;
    /* What a rank wrote under the old cut is no longer its stage's. */
    for (int c = 0; c < e->chunks.n; c++) {
        starpu_data_handle_t h = e->chunks.chunks[c].h_grad;
        if (starpu_data_acquire(h, STARPU_W) != 0)
            return pl_fail(PL_STATUS_RUNTIME_ERROR, "recut: cannot clear chunk %d", c);
        memset((void *)starpu_vector_get_local_ptr(h), 0,
               e->chunks.chunks[c].numel * e->chunks.elem);
        starpu_data_release(h);
    }
    return PL_STATUS_OK;
}

bool pl_engine_pp_sums_chunk(const pl_engine_t *e, int c) {
    return e->pp > 1 && e->ppr->grad_sum[c] && (e->ppr->users[c] & (e->ppr->users[c] - 1));
}

pl_status pl_engine_pp_reduce_shared(pl_engine_t *e) {
    if (e->pp <= 1) return PL_STATUS_OK;
    e->pending_step = -1;
    for (int c = 0; c < e->chunks.n; c++) {
        if (!pl_engine_pp_sums_chunk(e, c)) continue;
        /* This replica's averaged gradients (or, ZeRO-2, its shard). */
        starpu_data_handle_t own = e->hooks->dp_grad_shard(e, c);
        if (!own) own = e->chunks.chunks[c].h_grad;
        starpu_data_handle_t h[3] = {own, e->ppr->h_grad_sum[c], e->h_comm_token};
        enum starpu_data_access_mode modes[3] = {STARPU_R, STARPU_W, STARPU_RW};
        pl_collective_args a = {.kind = PL_COLLECTIVE_ALLREDUCE_SUM, .group = e->pp_group,
                                .bf16 = e->bf16};
        pl_status st = pl_engine_submit_modes(e, &pl_cl_collective, pl_comm_task_index(e, c),
                                              &a, sizeof a, 3, h, modes);
        if (st) return st;
    }
    return PL_STATUS_OK;
}

/* Broadcasts a host copy of handle h from stage `root` of this replica
 * (under ZeRO-1/2 the states are the replica's shard). */
static pl_status bcast_handle(const pl_engine_t *e, starpu_data_handle_t h, int root) {
    bool mine = root == e->pp_stage;
    if (starpu_data_acquire(h, mine ? STARPU_R : STARPU_W) != 0)
        return pl_fail(PL_STATUS_RUNTIME_ERROR, "pipeline sync: cannot acquire a chunk");
    pl_status st = pl_comm_bcast_bytes(e->pp_group, (void *)starpu_vector_get_local_ptr(h),
                                       starpu_vector_get_nx(h) * starpu_vector_get_elemsize(h),
                                       root);
    starpu_data_release(h);
    return st;
}

pl_status pl_engine_pp_sync(pl_engine_t *e, bool states) {
    if (e->pp <= 1 || (e->ppr->synced && !states)) return PL_STATUS_OK;
    starpu_task_wait_for_all();
    pl_chunk_set_unpartition(&e->chunks);
    pl_status st = PL_STATUS_OK;
    for (int c = 0; c < e->chunks.n && !st; c++) {
        pl_chunk *ch = &e->chunks.chunks[c];
        int root = lowest_user(e, c);
        st = bcast_handle(e, ch->h_param, root);
        for (int s = 0; states && s < e->chunks.n_states && !st; s++)
            st = bcast_handle(e, ch->h_state[s], root);
        /* 16-bit runs: the fp32 master weights are optimizer state too. */
        if (states && ch->h_master && !st) st = bcast_handle(e, ch->h_master, root);
    }
    if (!st) e->ppr->synced = true;
    return st;
}

pl_status pl_engine_pp_check_param(const pl_engine_t *e, const pl_tensor_t *p, bool grad,
                                   const char *fn) {
    if (e->pp <= 1) return PL_STATUS_OK;
    int c = e->trt[p->id].chunk;
    bool used = pl_engine_pp_updates_chunk(e, c);
    if (grad && !used)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "%s: '%s' belongs to another pipeline stage's rank (pp %d, this is "
                       "stage %d): its gradient is computed there", fn, p->name, e->pp,
                       e->pp_stage);
    if (!grad && !used && !e->ppr->synced)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "%s: '%s' is updated by another pipeline stage's rank (pp %d, this is "
                       "stage %d): call pl_engine_gather_params on every rank first", fn,
                       p->name, e->pp, e->pp_stage);
    return PL_STATUS_OK;
}
