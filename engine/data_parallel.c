/* Data parallelism over ranks (dp > 1): the same graph on every rank, each
 * rank a slice of the global batch, gradients averaged by collectives
 * that are tasks (collectives/comm.h says why, and why they run in one
 * order on every rank).
 *
 * Buckets: chunks are packed in first-use order, so the backward pass
 * finishes the last chunk's gradients first. A bucket is a run of chunks
 * taken from the end, closed once it holds reduce_bucket_size_in_m
 * million elements; its reduction is submitted right after the backward
 * pass's tasks and starts as soon as the bucket's last weight gradient is
 * written, while the backward pass goes on with earlier layers. With
 * overlap_communication a bucket also closes at 1/OVERLAP_BUCKETS of the
 * model: Colossal-AI's 12 M elements hold a whole model of a few million
 * parameters, whose one reduction could then only start after the whole
 * backward pass (PyTorch DDP makes its first bucket small for the same
 * reason). Distributed runs pack chunks of 1/32-1/16 of the model
 * (engine.c), so such a bucket is a few chunks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/comm.h"
#include "collectives/nccl.h"
#include "engine/data_parallel.h"
#include "engine/engine_internal.h"
#include "engine/hooks.h"
#include "graph/error.h"

/* The module's state (e->dps, allocated by pl_engine_dp_init even when dp
 * is 1, when every array stays NULL). */
struct pl_dp {
    struct pl_nccl_comm *nccl;           /* CUDA runs: the data-parallel
                                            group's NCCL communicator, for
                                            the buckets' collectives; NULL
                                            otherwise (MPI on the host) */
    int n_buckets;
    int *bucket_first, *bucket_count;    /* [n_buckets]: chunks [first, first +
                                            count), buckets in backward order */
    int comm_token;                      /* h_comm_token's value */
    int64_t *shard_lo, *shard_hi;        /* ZeRO: [chunks.n], this rank's
                                            elements of each chunk; NULL
                                            otherwise */
    float **ckpt_states;                 /* ZeRO checkpoints: [chunks.n ·
                                            n_states] whole-chunk optimizer
                                            states while one is written or
                                            read; NULL otherwise */
    float **ckpt_master;                 /* ZeRO checkpoints of 16-bit runs:
                                            [chunks.n] whole-chunk master
                                            weights gathered while one is
                                            written; NULL otherwise */
    float **grad_shard;                  /* ZeRO-2/3: [chunks.n] the reduced
                                            gradient shards, NULL otherwise */
    starpu_data_handle_t *h_grad_shard;
    /* ZeRO-2: a chunk's whole gradients are a StarPU-allocated handle,
     * released once its reduce-scatter has read it and given back
     * (zeroed) before the next backward pass writes it, so between steps
     * a rank keeps only its shard. Under a placement policy they are not
     * part of the units (like ZeRO-3's gathered chunks): the steps count
     * them as model data while they live. */
    bool *grads_released;                /* [chunks.n]: released (as
                                            submitted); NULL otherwise */
    pl_grad_zero_args *grads_gaps;       /* [chunks.n]: what no weight
                                            gradient of the last backward
                                            pass wrote (their return zeroes
                                            it; the rest is overwritten) */
    int64_t *grads_backs, *grads_scatters; /* [chunks.n]: returns and
                                            reduce-scatters run (callbacks
                                            may come in either order) */
};

bool pl_engine_dp_sharded(const pl_engine_t *e) { return e->dps && e->dps->shard_lo; }

void pl_engine_dp_shard(const pl_engine_t *e, int c, int64_t *lo, int64_t *hi) {
    bool sharded = pl_engine_dp_sharded(e);
    *lo = sharded ? e->dps->shard_lo[c] : 0;
    *hi = sharded ? e->dps->shard_hi[c] : (int64_t)e->chunks.chunks[c].numel;
}

starpu_data_handle_t pl_engine_dp_grad_shard(const pl_engine_t *e, int c) {
    return e->dps && e->dps->h_grad_shard ? e->dps->h_grad_shard[c] : NULL;
}

bool pl_engine_dp_releases_grads(const pl_engine_t *e) {
    return e->dps && e->dps->grads_released;
}

bool pl_engine_dp_ckpt_open(const pl_engine_t *e) { return e->dps && e->dps->ckpt_states; }

float *pl_engine_dp_ckpt_states(const pl_engine_t *e, int c, int s) {
    return e->dps && e->dps->ckpt_states ? e->dps->ckpt_states[c * e->chunks.n_states + s]
                                         : NULL;
}

const float *pl_engine_dp_ckpt_master(const pl_engine_t *e, int c) {
    return e->dps && e->dps->ckpt_master ? e->dps->ckpt_master[c] : NULL;
}
#include "optim/grad_sum.h"

/* With overlap_communication, buckets of at most this fraction of the
 * model (bench_dp's GPT: all-reduce hidden behind the backward pass 0 %
 * in one bucket, 96 % in buckets of 1/8). */
enum { OVERLAP_BUCKETS = 8 };

/* FNV-1a: a hash of what must agree between ranks. */
static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}
#define HASH_INIT 0xcbf29ce484222325ull
static uint64_t hash_value(const void *p, size_t n) { return hash_bytes(HASH_INIT, p, n); }
static uint64_t hash_str(uint64_t h, const char *s) {
    return s ? hash_bytes(h, s, strlen(s) + 1) : hash_bytes(h, "", 1);
}

/* The graph's structure: tensors (name, kind, shape, dtype) and ops
 * (definition, name, operands), in creation order. */
static uint64_t hash_graph(const pl_graph_t *g) {
    uint64_t h = HASH_INIT;
    for (int i = 0; i < g->n_tensors; i++) {
        const pl_tensor_t *t = g->tensors[i];
        h = hash_str(h, t->name);
        int32_t v[3] = {(int32_t)t->kind, (int32_t)t->dtype, (int32_t)t->ndim};
        h = hash_bytes(h, v, sizeof v);
        h = hash_bytes(h, t->shape, (size_t)t->ndim * sizeof t->shape[0]);
    }
    for (int i = 0; i < g->n_ops; i++) {
        const pl_op *op = &g->ops[i];
        h = hash_str(h, op->def->name);
        h = hash_str(h, op->name);
        h = hash_bytes(h, op->in, (size_t)op->n_in * sizeof op->in[0]);
    }
    return h;
}

/* A hash of every chunk's initial parameter values: the same seed and
 * initialisation on every rank (or the same checkpoint, once loaded).
 * StarPU-allocated chunks (ZeRO-3's) are read through their handle. */
static uint64_t hash_params(const pl_engine_t *e) {
    uint64_t h = HASH_INIT;
    for (int c = 0; c < e->chunks.n; c++) {
        const pl_chunk *ch = &e->chunks.chunks[c];
        size_t bytes = ch->numel * e->chunks.elem;
        if (ch->param) {
            h = hash_bytes(h, ch->param, bytes);
        } else if (starpu_data_acquire(ch->h_param, STARPU_R) == 0) {
            h = hash_bytes(h, (const void *)starpu_vector_get_local_ptr(ch->h_param), bytes);
            starpu_data_release(ch->h_param);
        }
    }
    return h;
}

/* Refuses a job whose ranks built different engines: a rank with another
 * model or optimizer would average garbage, or wait in a collective the
 * others never call. Every rank reaches this with the same fields. */
static pl_status check_ranks_agree(pl_engine_t *e) {
    const pl_engine_options *o = &e->opt;
    const pl_optimizer_options *op = &o->optimizer;
    uint64_t v[40];
    const char *names[40];
    int n = 0;
#define FIELD(label, expr)                                  \
    do {                                                    \
        __typeof__(expr) x_ = (expr);                       \
        names[n] = label;                                   \
        v[n++] = hash_value(&x_, sizeof x_);                \
    } while (0)
    names[n] = "the model (graph: tensors, shapes, ops)";
    v[n++] = hash_graph(e->g);
    FIELD("batch_size", o->batch_size);
    FIELD("tiles", e->n_tiles);
    FIELD("optimizer kind", (int)op->kind);
    FIELD("lr", op->lr);
    FIELD("momentum", op->momentum);
    FIELD("weight_decay", op->weight_decay);
    FIELD("beta1", op->beta1);
    FIELD("beta2", op->beta2);
    FIELD("eps", op->eps);
    /* Structs field by field: their padding bytes are not values. */
    const pl_lr_scheduler_options *lr = &o->lr_scheduler;
    FIELD("lr_scheduler kind", (int)lr->kind);
    FIELD("lr_scheduler total_steps", lr->total_steps);
    FIELD("lr_scheduler warmup_steps", lr->warmup_steps);
    double lr_values[] = {lr->eta_min, (double)lr->step_size, lr->gamma, lr->end_lr,
                          lr->power, lr->pct_start, lr->base_momentum, lr->max_momentum,
                          lr->div_factor, lr->final_div_factor,
                          (double)lr->n_milestones, (double)lr->anneal_cos,
                          (double)lr->cycle_momentum};
    names[n] = "lr_scheduler parameters";
    v[n++] = hash_value(lr_values, sizeof lr_values);
    FIELD("accumulate_size", o->accumulate_size);
    FIELD("schedule", (int)o->schedule);
    FIELD("stages", o->stages);
    FIELD("max_norm", o->max_norm);
    FIELD("norm_type", o->norm_type);
    const pl_loss_scaler_options *ls = &o->loss_scaler;
    double ls_values[] = {(double)ls->enabled, ls->initial_scale, ls->min_scale,
                          ls->max_scale, ls->growth_factor, ls->backoff_factor,
                          (double)ls->growth_interval, (double)ls->hysteresis};
    names[n] = "loss_scaler";
    v[n++] = hash_value(ls_values, sizeof ls_values);
    FIELD("dp", o->dp);
    FIELD("pp", o->pp);
    FIELD("dp_outside (pl_runtime_options)", e->rt->dp_outside);
    FIELD("zero_stage", o->zero_stage);
    FIELD("reduce_bucket_size_in_m", o->reduce_bucket_size_in_m);
    FIELD("overlap_communication", o->overlap_communication);
    /* Recomputation under ZeRO-3 gathers a unit's chunks before its
     * re-run: every rank must gather in the same order. */
    const pl_recompute_options *rc = &o->recompute;
    double rc_values[] = {(double)rc->granularity, (double)rc->method, (double)rc->num_layers,
                          rc->ratio};
    names[n] = "recompute";
    v[n++] = hash_value(rc_values, sizeof rc_values);
    FIELD("chunk_elems (chunk sizes)", e->chunks.n ? e->chunks.chunks[0].numel : 0);
    FIELD("number of chunks", e->chunks.n);
#undef FIELD
    names[n] = "the initial parameter values (seed or initialisation)";
    v[n++] = hash_params(e);
    if (pl_runtime_check_same(e->rt, names, v, n) != PL_STATUS_OK)
        return pl_fail(pl_last_status(), "pl_engine_new: %s", pl_last_error());
    return PL_STATUS_OK;
}

/* ZeRO-1: each rank keeps the optimizer states of its shard of every
 * chunk only; the whole-chunk state buffers the chunk set allocated are
 * replaced by shard-sized ones (zero, like a fresh optimizer's). The fp32
 * master weights of 16-bit runs are optimizer state too (LowLevelZero
 * shards them): each rank keeps its shard, from the initial values. */
static pl_status shard_states(pl_engine_t *e) {
    int n = e->chunks.n;
    e->dps->shard_lo = malloc((size_t)(n ? n : 1) * sizeof *e->dps->shard_lo);
    e->dps->shard_hi = malloc((size_t)(n ? n : 1) * sizeof *e->dps->shard_hi);
    if (!e->dps->shard_lo || !e->dps->shard_hi)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_engine_new: out of memory (ZeRO shards)");
    for (int c = 0; c < n; c++) {
        pl_chunk *ch = &e->chunks.chunks[c];
        size_t lo, hi;
        pl_comm_shard(ch->numel, e->dp, e->dp_rank, &lo, &hi);
        e->dps->shard_lo[c] = (int64_t)lo;
        e->dps->shard_hi[c] = (int64_t)hi;
        for (int s = 0; s < e->chunks.n_states; s++) {
            starpu_data_unregister(ch->h_state[s]);
            starpu_free(ch->state[s]);
            ch->state[s] = NULL;
            ch->h_state[s] = NULL;
            pl_status st = pl_engine_shard_new(e, hi - lo, sizeof(float), NULL,
                                               (void **)&ch->state[s], &ch->h_state[s]);
            if (st) return st;
        }
        if (!ch->h_master) continue;
        if (starpu_data_acquire(ch->h_master, STARPU_R) != 0)
            return pl_fail(PL_STATUS_RUNTIME_ERROR,
                           "pl_engine_new: cannot read the master weights of chunk %d", c);
        float *whole = (float *)starpu_vector_get_local_ptr(ch->h_master), *shard = NULL;
        starpu_data_handle_t h = NULL;
        pl_status st = pl_engine_shard_new(e, hi - lo, sizeof(float), whole + lo,
                                           (void **)&shard, &h);
        starpu_data_release(ch->h_master);
        if (st) return st;
        starpu_data_unregister(ch->h_master);
        if (ch->master) starpu_free(ch->master);
        ch->master = shard;
        ch->h_master = h;
    }
    if (e->opt.zero_stage < 2) return PL_STATUS_OK;
    /* ZeRO-2/3: where the reduce-scatter leaves the rank's averaged shard. */
    size_t slots = n > 0 ? (size_t)n : 1;
    e->dps->grad_shard = calloc(slots, sizeof *e->dps->grad_shard);
    e->dps->h_grad_shard = calloc(slots, sizeof *e->dps->h_grad_shard);
    if (!e->dps->grad_shard || !e->dps->h_grad_shard)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_engine_new: out of memory (ZeRO-2)");
    for (int c = 0; c < n; c++) {
        /* In the gradients' own format (16 bits in 16-bit runs). */
        pl_status st = pl_engine_shard_new(e, (size_t)(e->dps->shard_hi[c] - e->dps->shard_lo[c]),
                                           e->chunks.elem, NULL, (void **)&e->dps->grad_shard[c],
                                           &e->dps->h_grad_shard[c]);
        if (st) return st;
    }
    return PL_STATUS_OK;
}

/* CUDA runs: the gradient buckets live on the GPU, so their collectives
 * run there, through NCCL, when every rank has one GPU (a communicator is
 * bound to a device, and StarPU would run a task on any of a rank's GPUs)
 * and can load libnccl (PLEIADES_NCCL=0 keeps them on the host, through
 * MPI). The ranks decide together: one rank on NCCL and another on MPI
 * would wait for each other forever. */
static pl_status nccl_init(pl_engine_t *e) {
    const char *env = getenv("PLEIADES_NCCL");
    double able = e->rt->cuda_workers == 1 && !(env && strcmp(env, "0") == 0) &&
                          pl_nccl_available()
                      ? 1.0
                      : 0.0;
    pl_status st = pl_comm_sum(&able, 1);
    if (st || able < (double)e->rt->world_size) return st;
    unsigned char id[PL_NCCL_ID_BYTES] = {0};
    if (e->dp_rank == 0) st = pl_nccl_unique_id(id);
    /* Every rank learns whether rank 0 made one before waiting for it. */
    double failed = st ? 1.0 : 0.0;
    pl_status cst = pl_comm_sum(&failed, 1);
    if (!st) st = cst;
    if (!st && failed > 0)
        st = pl_fail(PL_STATUS_RUNTIME_ERROR, "pl_engine_new: NCCL: no communicator id");
    if (!st) st = pl_comm_bcast_bytes(e->dp_group, id, sizeof id, 0);
    int worker = starpu_worker_get_by_type(STARPU_CUDA_WORKER, 0);
    if (!st)
        st = pl_nccl_comm_new(e->dp, e->dp_rank, id, starpu_worker_get_devid(worker), &e->dps->nccl);
    for (int b = 0; !st && b < e->dps->n_buckets; b++) /* on a CUDA worker, not the host's */
        for (int k = 0; k < 2; k++) {
            pl_task_info *ti = &e->tasks[pl_comm_task_index(e, b + k * e->chunks.n)];
            ti->tag.comm = 0;
            ti->tag.background = 0;
        }
    return st;
}

pl_status pl_engine_dp_init(pl_engine_t *e) {
    const pl_engine_options *o = &e->opt;
    e->dps = calloc(1, sizeof *e->dps);
    if (!e->dps) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_engine_new: out of memory (dp)");
    int dp = o->dp ? o->dp : 1;
    int world = e->rt->world_size;
    if (dp < 1 || dp > 65536)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_new: dp %d out of range [1, %d]",
                       o->dp, 65536);
    if (dp * e->pp != world)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: dp %d, but the runtime has %d rank%s (dp must equal "
                       "the world size: launch with mpirun -np %d and a distributed "
                       "runtime)", dp, world, world == 1 ? "" : "s", dp * e->pp);
    if (o->zero_stage < 0 || o->zero_stage > 3)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: zero_stage %d out of range [0, 3]", o->zero_stage);
    if (o->zero_stage == 3 && dp > 1 && o->schedule_def)
        return pl_fail(PL_STATUS_UNSUPPORTED,
                       "pl_engine_new: zero_stage 3 with the pipeline schedule '%s': ZeRO-3 "
                       "gathers each chunk around its uses op by op, which a pipeline "
                       "order does not follow (use zero_stage 0-2 with pipelines)",
                       o->schedule_def->name ? o->schedule_def->name : "?");
    if (o->reduce_bucket_size_in_m < 0 || o->reduce_bucket_size_in_m > 1 << 16)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: reduce_bucket_size_in_m %d out of range [0, %d]",
                       o->reduce_bucket_size_in_m, 1 << 16);
    if (o->cpu_offload && (dp == 1 || o->zero_stage == 0))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: cpu_offload offloads ZeRO's optimizer-state shards: "
                       "it needs dp > 1 and zero_stage 1, 2 or 3 (dp %d, zero_stage %d)", dp,
                       o->zero_stage);
    e->dp = dp;
    e->dp_rank = pl_runtime_grid_replica(e->rt, dp, e->pp, e->rt->rank);
    pl_status st = PL_STATUS_OK;
    if (world > 1) {
        /* The token every collective takes RW: StarPU runs them one at a
         * time, in submission order, which is the same on every rank. */
        starpu_variable_data_register(&e->h_comm_token, STARPU_MAIN_RAM,
                                      (uintptr_t)&e->dps->comm_token, sizeof e->dps->comm_token);
        st = check_ranks_agree(e);
        if (st) return st;
    }
    if (dp > 1 && e->pp > 1) {
        /* Hybrid: the stage's data-parallel ranks, the replica's stages
         * (collective over the world, after the ranks agreed on the grid). */
        st = pl_comm_group_split(e->pp_stage, e->dp_rank, &e->dp_group);
        if (!st) st = pl_comm_group_split(e->dp_rank, e->pp_stage, &e->pp_group);
        if (st) return st;
    }
    if (e->pp > 1) {
        for (int c = 0; c < e->chunks.n; c++)
            pl_engine_name_comm_task(e, pl_comm_task_index(e, c), "stage_sum", c);
        pl_engine_name_comm_task(e, pl_comm_task_index(e, 2 * e->chunks.n), "gradnorm_ranks", 0);
        pl_engine_name_comm_task(e, pl_comm_task_index(e, 2 * e->chunks.n + 1), "overflow_ranks",
                               0);
    }
    if (dp == 1) return PL_STATUS_OK;
    int n = e->chunks.n;
    e->dps->bucket_first = malloc((size_t)(n ? n : 1) * sizeof *e->dps->bucket_first);
    e->dps->bucket_count = malloc((size_t)(n ? n : 1) * sizeof *e->dps->bucket_count);
    if (!e->dps->bucket_first || !e->dps->bucket_count)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_engine_new: out of memory (buckets)");
    size_t limit = (size_t)o->reduce_bucket_size_in_m * 1000000u;
    if (o->overlap_communication) {
        size_t total = 0;
        for (int c = 0; c < n; c++) total += e->chunks.chunks[c].numel;
        if (limit > total / OVERLAP_BUCKETS) limit = total / OVERLAP_BUCKETS;
    }
    e->dps->n_buckets = 0;
    for (int c = n - 1; c >= 0;) {
        int b = e->dps->n_buckets++;
        size_t elems = 0;
        e->dps->bucket_count[b] = 0;
        do {
            elems += e->chunks.chunks[c].numel;
            e->dps->bucket_count[b]++;
            c--;
        } while (c >= 0 && elems < limit);
        e->dps->bucket_first[b] = c + 1;
    }
    for (int b = 0; b < e->dps->n_buckets; b++) {
        pl_engine_name_comm_task(e, pl_comm_task_index(e, b),
                               o->zero_stage >= 2 ? "reduce_scatter" : "allreduce", b);
        pl_engine_name_comm_task(e, pl_comm_task_index(e, n + b), "allgather", b);
    }
    pl_engine_name_comm_task(e, pl_comm_task_index(e, 2 * n), "gradnorm_ranks", 0);
    pl_engine_name_comm_task(e, pl_comm_task_index(e, 2 * n + 1), "overflow_ranks", 0);
    /* ZeRO-3 gathers and reduces chunk by chunk on the host (MPI). */
    if (o->zero_stage < 3 && (st = nccl_init(e))) return st;
    if (o->zero_stage > 0) {
        st = shard_states(e);
        if (st) return st;
        if (o->zero_stage == 2) {
            e->dps->grads_released = calloc((size_t)(n ? n : 1), sizeof *e->dps->grads_released);
            e->dps->grads_backs = calloc((size_t)(n ? n : 1), sizeof *e->dps->grads_backs);
            e->dps->grads_scatters = calloc((size_t)(n ? n : 1), sizeof *e->dps->grads_scatters);
            e->dps->grads_gaps = calloc((size_t)(n ? n : 1), sizeof *e->dps->grads_gaps);
            if (!e->dps->grads_released || !e->dps->grads_backs || !e->dps->grads_scatters || !e->dps->grads_gaps)
                return pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_engine_new: out of memory (ZeRO-2)");
        }
        if (o->zero_stage == 3 || e->dps->grads_released) {
            pthread_mutex_init(&e->whole_lock, NULL);
            e->whole_lock_init = true;
        }
        for (int c = 0; e->dps->grads_released && c < n; c++) {
            /* Released from the start: the first backward pass gives them
             * back, so every byte of them is counted as it lives. */
            starpu_data_invalidate(e->chunks.chunks[c].h_grad);
            e->dps->grads_released[c] = true;
            e->dps->grads_gaps[c] = (pl_grad_zero_args){
                .n = 1, .lo = {0}, .hi = {(int64_t)e->chunks.chunks[c].numel}};
            size_t i = pl_z3_task_index(e, PL_Z2_GRADS_BACK, c);
            pl_engine_name_comm_task(e, i, "grads_back", c);
            e->tasks[i].slot = PL_SLOT_MEM; /* not a collective: any worker, soon */
            e->tasks[i].tag.comm = 0;
            e->tasks[i].tag.background = 0;
        }
        /* cpu_offload (LowLevelZeroPlugin): the shard's update runs on the
         * host, so its states live there; StarPU brings the gradient shard
         * over and the updated parameters back. On CPU-only runs
         * everything is on the host anyway. */
        for (int c = 0; o->cpu_offload && c < n; c++) e->tasks[pl_opt_task_index(e, c)].host_only = true;
    }
    return PL_STATUS_OK;
}

void pl_engine_dp_free(pl_engine_t *e) {
    if (!e->dps) return; /* pl_engine_dp_init never ran */
    pl_nccl_comm_free(e->dps->nccl);
    free(e->dps->grads_released);
    free(e->dps->grads_backs);
    free(e->dps->grads_gaps);
    free(e->dps->grads_scatters);
    if (e->whole_lock_init) pthread_mutex_destroy(&e->whole_lock);
    pl_comm_group_free(e->dp_group);
    pl_comm_group_free(e->pp_group);
    if (e->h_comm_token) starpu_data_unregister(e->h_comm_token);
    for (int c = 0; e->dps->h_grad_shard && c < e->chunks.n; c++) {
        if (e->dps->h_grad_shard[c]) starpu_data_unregister(e->dps->h_grad_shard[c]);
        if (e->dps->grad_shard[c]) starpu_free(e->dps->grad_shard[c]);
    }
    free(e->dps->h_grad_shard);
    free(e->dps->grad_shard);
    free(e->dps->shard_lo);
    free(e->dps->shard_hi);
    free(e->dps->bucket_first);
    free(e->dps->bucket_count);
    free(e->dps);
    e->dps = NULL;
}

/* Chunks one collective task takes (its buffers are these plus the
 * token); a larger bucket is split into several tasks. */
#define PL_MAX_BUCKET_CHUNKS 64

/* The buffers one chunk contributes to a collective: pick writes them
 * (and their access modes) and returns how many (at most 2). */
typedef int (*pick_fn)(const pl_engine_t *e, int c, starpu_data_handle_t *h,
                       enum starpu_data_access_mode *modes);

/* Submits one collective of `kind` per bucket over the buffers `pick`
 * gives for each of its chunks (at most PL_MAX_BUCKET_CHUNKS a task). */
static pl_status submit_buckets(pl_engine_t *e, pl_collective_kind kind, int first_task,
                                pick_fn pick) {
    e->pending_step = -1;
    starpu_data_handle_t h[2 * PL_MAX_BUCKET_CHUNKS + 1];
    enum starpu_data_access_mode modes[2 * PL_MAX_BUCKET_CHUNKS + 1];
    for (int b = 0; b < e->dps->n_buckets; b++) {
        /* A bucket of more chunks than a task takes buffers goes in
         * several tasks, one after the other (the token orders them). */
        for (int k = 0; k < e->dps->bucket_count[b]; k += PL_MAX_BUCKET_CHUNKS) {
            int m = e->dps->bucket_count[b] - k, nb = 0;
            if (m > PL_MAX_BUCKET_CHUNKS) m = PL_MAX_BUCKET_CHUNKS;
            /* Hybrid dp x pp: the chunks this stage uses (every rank of
             * the group is on the same stage, so they agree). */
            for (int i = 0; i < m; i++)
                if (e->hooks->pp_updates_chunk(e, e->dps->bucket_first[b] + k + i))
                    nb += pick(e, e->dps->bucket_first[b] + k + i, h + nb, modes + nb);
            if (nb == 0) continue;
            h[nb] = e->h_comm_token;
            modes[nb] = STARPU_RW;
            pl_collective_args a = {.kind = kind, .group = e->dp_group, .bf16 = e->bf16};
            pl_nccl_args na = {.kind = kind, .comm = e->dps->nccl, .bf16 = e->bf16};
            size_t index = pl_comm_task_index(e, first_task + b);
            pl_status st = e->dps->nccl ? pl_engine_submit_modes(e, &pl_cl_nccl_collective, index,
                                                            &na, sizeof na, nb + 1, h, modes)
                                   : pl_engine_submit_modes(e, &pl_cl_collective, index, &a,
                                                            sizeof a, nb + 1, h, modes);
            if (st) return st;
        }
    }
    return PL_STATUS_OK;
}

static int pick_grads(const pl_engine_t *e, int c, starpu_data_handle_t *h,
                      enum starpu_data_access_mode *modes) {
    h[0] = e->chunks.chunks[c].h_grad;
    modes[0] = STARPU_RW;
    return 1;
}

/* ZeRO-2: the full gradients are read, the rank's shard written. */
static int pick_grad_shards(const pl_engine_t *e, int c, starpu_data_handle_t *h,
                            enum starpu_data_access_mode *modes) {
    h[0] = e->chunks.chunks[c].h_grad;
    modes[0] = STARPU_R;
    h[1] = e->dps->h_grad_shard[c];
    modes[1] = STARPU_W;
    return 2;
}

static int pick_params(const pl_engine_t *e, int c, starpu_data_handle_t *h,
                       enum starpu_data_access_mode *modes) {
    h[0] = e->chunks.chunks[c].h_param;
    modes[0] = STARPU_RW;
    return 1;
}

starpu_data_handle_t pl_engine_dp_reduced_grad(const pl_engine_t *e, int c) {
    /* Not merely a buffer left from a cut before a recut: its sum is
     * stale (found: a GPT --pp 2 run diverged from one process after the
     * measured-balance recut). */
    if (e->hooks->pp_sums_chunk(e, c)) return e->hooks->pp_grad_sum(e, c);
    return e->dps->h_grad_shard ? e->dps->h_grad_shard[c] : e->chunks.chunks[c].h_grad;
}

int64_t pl_engine_dp_reduced_numel(const pl_engine_t *e, int c) {
    /* Stages across ranks: each chunk counted by one rank (norms, overflow). */
    if (!e->hooks->pp_counts_chunk(e, c)) return 0;
    return e->dps->h_grad_shard ? e->dps->shard_hi[c] - e->dps->shard_lo[c]
                           : (int64_t)e->chunks.chunks[c].numel;
}

pl_status pl_engine_dp_combine_partials(pl_engine_t *e, starpu_data_handle_t *partials,
                                        bool max, int which) {
    if (!e->dps->h_grad_shard && e->pp <= 1) return PL_STATUS_OK;
    int n = e->chunks.n;
    starpu_data_handle_t *h = malloc((size_t)(n + 1) * sizeof *h);
    enum starpu_data_access_mode *modes = malloc((size_t)(n + 1) * sizeof *modes);
    if (!h || !modes) {
        free(h);
        free(modes);
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory combining partials");
    }
    for (int c = 0; c < n; c++) {
        h[c] = partials[c];
        modes[c] = STARPU_RW;
    }
    h[n] = e->h_comm_token;
    modes[n] = STARPU_RW;
    /* Over ZeRO-2's shards: every rank's; over whole gradients (the same
     * on the ranks of a stage): the stages of one replica. */
    pl_collective_args a = {.kind = max ? PL_COLLECTIVE_MAX_F64 : PL_COLLECTIVE_SUM_F64,
                            .group = e->dps->h_grad_shard ? NULL : e->pp_group};
    int k = which == PL_DP_PARTIALS_NORM ? 2 * n : 2 * n + 1;
    e->pending_step = -1;
    pl_status st = pl_engine_submit_modes(e, &pl_cl_collective, pl_comm_task_index(e, k), &a,
                                          sizeof a, n + 1, h, modes);
    free(h);
    free(modes);
    return st;
}

/* What of chunk c no weight gradient of this update's backward passes
 * wrote (its padding, parameters no backward pass reaches, other stages'
 * parameters): the next return of its gradients zeroes only that, since
 * an op's first weight gradient overwrites its parameter's (the op
 * interface's contract: the non-managed path gives it a W-mode buffer).
 * The graph is the same every step, so the next pass writes the same
 * tensors; too many gaps, and the whole chunk is zeroed. */
static void gaps_of(const pl_engine_t *e, int c, pl_grad_zero_args *g) {
    const pl_chunk *ch = &e->chunks.chunks[c];
    int64_t at = 0; /* written up to here (tensors are packed in order) */
    g->n = 0;
    for (int s = 0; s <= ch->n_tensors; s++) {
        bool last = s == ch->n_tensors;
        const pl_tensor_t *t = last ? NULL : e->g->tensors[ch->tensor_ids[s]];
        if (!last && !e->trt[t->id].param_grad_written) continue;
        int64_t lo = last ? (int64_t)ch->numel : (int64_t)ch->offsets[s];
        if (lo > at) {
            if (g->n == PL_GRAD_ZERO_MAX_RANGES) {
                *g = (pl_grad_zero_args){.n = 1, .lo = {0}, .hi = {(int64_t)ch->numel}};
                return;
            }
            g->lo[g->n] = at;
            g->hi[g->n++] = lo;
        }
        if (!last && lo + t->numel > at) at = lo + t->numel;
    }
}

pl_status pl_engine_dp_reduce_gradients(pl_engine_t *e) {
    /* ZeRO-3 reduced each chunk in the backward pass. */
    if (e->dp <= 1 || e->z3) return PL_STATUS_OK;
    /* Without overlap the reductions wait for the whole backward pass
     * (and start together on every rank). */
    if (!e->opt.overlap_communication) starpu_task_wait_for_all();
    if (!e->dps->h_grad_shard) return submit_buckets(e, PL_COLLECTIVE_ALLREDUCE_MEAN, 0, pick_grads);
    /* ZeRO-2 keeps only its shard of each averaged gradient: once the
     * reduce-scatter has read the whole gradients, their memory goes
     * back to StarPU (LowLevelZero frees a bucket's gradients after its
     * reduction), until the next backward pass writes them. */
    pl_status st = PL_STATUS_OK;
    /* A chunk no weight gradient wrote (parameters the loss does not
     * reach) is still released: back as zeros, which the reduce-scatter
     * reads (a released handle holds nothing to read). */
    for (int c = 0; !st && e->dps->grads_released && c < e->chunks.n; c++)
        if (e->hooks->pp_updates_chunk(e, c)) st = pl_engine_dp_grads_back(e, c, NULL);
    if (!st) st = submit_buckets(e, PL_COLLECTIVE_REDUCE_SCATTER_MEAN, 0, pick_grad_shards);
    for (int c = 0; !st && e->dps->grads_released && c < e->chunks.n; c++) {
        if (!e->hooks->pp_updates_chunk(e, c) || e->dps->grads_released[c]) continue;
        starpu_data_invalidate_submit(e->chunks.chunks[c].h_grad);
        e->dps->grads_released[c] = true;
        gaps_of(e, c, &e->dps->grads_gaps[c]);
    }
    return st;
}

pl_status pl_engine_dp_grads_back(pl_engine_t *e, int c, starpu_data_handle_t after) {
    if (!pl_engine_dp_grads_released(e, c)) return PL_STATUS_OK;
    /* Zeros where no weight gradient writes (gaps_of): the chunk's tail
     * past its last tensor, or a parameter no op's backward reaches,
     * would hold whatever the allocation held, and the reduce-scatter,
     * the norms and the overflow check read the whole chunk. */
    e->dps->grads_released[c] = false;
    /* Not ready before `after` is: with nothing to wait for it would run
     * at once, during the forward pass, and every chunk's gradients would
     * be back long before the backward pass reaches them. Op tasks being
     * fused are not submitted yet (`after`'s writer may be among them):
     * what was collected goes first, as for any task fusion cannot take. */
    pl_status st = e->hooks->fusion_flush(e);
    if (st) return st;
    e->pending_step = -1;
    starpu_data_handle_t h[2] = {e->chunks.chunks[c].h_grad, after};
    enum starpu_data_access_mode modes[2] = {STARPU_W, STARPU_R};
    return pl_engine_submit_modes(e, &pl_cl_grad_zero, pl_z3_task_index(e, PL_Z2_GRADS_BACK, c),
                                  &e->dps->grads_gaps[c], sizeof e->dps->grads_gaps[c], after ? 2 : 1, h,
                                  modes);
}

bool pl_engine_dp_grads_released(const pl_engine_t *e, int c) {
    return e->dps->grads_released && e->dps->grads_released[c];
}

static int chunk_of_grad(const pl_engine_t *e, starpu_data_handle_t h) {
    for (int c = 0; c < e->chunks.n; c++)
        if (e->chunks.chunks[c].h_grad == h) return c;
    return -1;
}

/* A chunk's whole gradients live from a return until the reduce-scatter
 * that reads them, one buffer at a time. Counted per chunk, not as a
 * running sum: a reduce-scatter's data is released (and the next step's
 * return of its chunks may run on another worker) before its callback,
 * so a sum would briefly count both buffers. The chunk is live while it
 * has had more returns than reduce-scatters, in whichever order the
 * callbacks come. */
void pl_engine_dp_grads_task_done(pl_engine_t *e, const struct starpu_task *task) {
    bool back = task->cl == &pl_cl_grad_zero;
    /* Reduce-scatters run through MPI, or NCCL on CUDA runs (nccl_init). */
    pl_collective_kind kind =
        task->cl == &pl_cl_collective        ? ((const pl_collective_args *)task->cl_arg)->kind
        : task->cl == &pl_cl_nccl_collective ? ((const pl_nccl_args *)task->cl_arg)->kind
                                             : PL_COLLECTIVE_ALLREDUCE_MEAN;
    if (!back && kind != PL_COLLECTIVE_REDUCE_SCATTER_MEAN) return;
    /* A return: its one buffer; a reduce-scatter: (whole, shard) pairs,
     * then the token. */
    int n = back ? 1 : (int)STARPU_TASK_GET_NBUFFERS(task) - 1;
    pthread_mutex_lock(&e->whole_lock);
    for (int k = 0; k < n; k += 2) {
        int c = chunk_of_grad(e, STARPU_TASK_GET_HANDLE(task, k));
        if (c < 0) continue;
        bool was = e->dps->grads_backs[c] > e->dps->grads_scatters[c];
        if (back) e->dps->grads_backs[c]++;
        else e->dps->grads_scatters[c]++;
        bool is = e->dps->grads_backs[c] > e->dps->grads_scatters[c];
        int64_t bytes = (int64_t)e->chunks.chunks[c].numel * (int64_t)e->chunks.elem;
        e->whole_live[1] += (is - was) * bytes;
    }
    if (e->whole_live[1] > e->whole_peak[1]) e->whole_peak[1] = e->whole_live[1];
    pthread_mutex_unlock(&e->whole_lock);
}

pl_status pl_engine_dp_gather_params(pl_engine_t *e) {
    /* ZeRO-3 gathers each chunk before its next use instead. */
    if (e->dp <= 1 || !e->dps->shard_lo || e->z3) return PL_STATUS_OK;
    return submit_buckets(e, PL_COLLECTIVE_ALLGATHER, e->chunks.n, pick_params);
}

pl_status pl_engine_dp_mean_results(pl_engine_t *e, double *sums, int n) {
    if (e->rt->world_size <= 1) return PL_STATUS_OK;
    return pl_comm_sum(sums, n);
}

pl_status pl_engine_dp_states_open(pl_engine_t *e) {
    int n = e->chunks.n, ns = e->chunks.n_states;
    e->dps->ckpt_states = calloc((size_t)(n * ns > 0 ? n * ns : 1), sizeof *e->dps->ckpt_states);
    if (!e->dps->ckpt_states) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory");
    for (int c = 0; c < n; c++)
        for (int s = 0; s < ns; s++) {
            e->dps->ckpt_states[c * ns + s] = calloc(e->chunks.chunks[c].numel, sizeof(float));
            if (!e->dps->ckpt_states[c * ns + s]) {
                pl_engine_dp_states_close(e);
                return pl_fail(PL_STATUS_OUT_OF_MEMORY,
                               "checkpoint: out of memory for the optimizer states of chunk "
                               "%d (%zu floats)", c, e->chunks.chunks[c].numel);
            }
        }
    return PL_STATUS_OK;
}

void pl_engine_dp_states_close(pl_engine_t *e) {
    for (int i = 0; e->dps->ckpt_states && i < e->chunks.n * e->chunks.n_states; i++)
        free(e->dps->ckpt_states[i]);
    free(e->dps->ckpt_states);
    e->dps->ckpt_states = NULL;
    for (int c = 0; e->dps->ckpt_master && c < e->chunks.n; c++) free(e->dps->ckpt_master[c]);
    free(e->dps->ckpt_master);
    e->dps->ckpt_master = NULL;
}

/* Whole-chunk buffers for the gathered master weights (rank 0). */
static pl_status master_open(pl_engine_t *e) {
    e->dps->ckpt_master = calloc((size_t)(e->chunks.n ? e->chunks.n : 1), sizeof *e->dps->ckpt_master);
    if (!e->dps->ckpt_master) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory");
    for (int c = 0; c < e->chunks.n; c++)
        if (!(e->dps->ckpt_master[c] = calloc(e->chunks.chunks[c].numel, sizeof(float))))
            return pl_fail(PL_STATUS_OUT_OF_MEMORY,
                           "checkpoint: out of memory for the master weights of chunk %d "
                           "(%zu floats)", c, e->chunks.chunks[c].numel);
    return PL_STATUS_OK;
}

/* Gathers the ranks' shards of a whole-chunk vector h (chunk c) into
 * whole on the group's rank 0 (NULL elsewhere). */
static pl_status gather_shard(pl_engine_t *e, int c, starpu_data_handle_t h, float *whole,
                              int *counts) {
    if (starpu_data_acquire(h, STARPU_R) != 0)
        return pl_fail(PL_STATUS_RUNTIME_ERROR, "checkpoint: cannot read a shard of chunk %d",
                       c);
    const float *mine = (const float *)starpu_vector_get_local_ptr(h);
    pl_status st = pl_comm_gather_floats(e->dp_group, mine, counts[e->dp_rank], whole, counts,
                                         counts + e->dp);
    starpu_data_release(h);
    return st;
}

/* Every rank's [lo, hi) of chunk c, as MPI counts and displacements. */
static void shard_layout(const pl_engine_t *e, int c, int *counts, int *displs) {
    for (int r = 0; r < e->dp; r++) {
        size_t lo, hi;
        pl_comm_shard(e->chunks.chunks[c].numel, e->dp, r, &lo, &hi);
        counts[r] = (int)(hi - lo);
        displs[r] = (int)lo;
    }
}

pl_status pl_engine_dp_states_gather(pl_engine_t *e) {
    /* Rank 0 alone holds the whole states (temporarily: ZeRO's saving of
     * memory does not hold while a checkpoint is written). */
    pl_status st = e->dp_rank == 0 ? pl_engine_dp_states_open(e) : PL_STATUS_OK;
    if (!st && e->dp_rank == 0 && e->chunks.master) st = master_open(e);
    int *counts = malloc(2 * (size_t)e->dp * sizeof *counts);
    if (!counts) st = pl_fail(PL_STATUS_OUT_OF_MEMORY, "checkpoint: out of memory");
    /* A failed allocation on rank 0 must not leave the others waiting in
     * the gathers: every rank learns it first. */
    double failed = st ? 1.0 : 0.0;
    pl_status cst = pl_comm_sum(&failed, 1);
    if (!st && cst) st = cst;
    if (!st && failed > 0)
        st = pl_fail(PL_STATUS_OUT_OF_MEMORY, "checkpoint: another rank ran out of memory");
    int ns = e->chunks.n_states;
    for (int c = 0; !st && c < e->chunks.n; c++) {
        shard_layout(e, c, counts, counts + e->dp);
        pl_chunk *ch = &e->chunks.chunks[c];
        for (int s = 0; !st && s < ns; s++)
            st = gather_shard(e, c, ch->h_state[s],
                              e->dps->ckpt_states ? e->dps->ckpt_states[c * ns + s] : NULL, counts);
        if (!st && ch->h_master)
            st = gather_shard(e, c, ch->h_master, e->dps->ckpt_master ? e->dps->ckpt_master[c] : NULL,
                              counts);
    }
    free(counts);
    if (st) pl_engine_dp_states_close(e);
    return st;
}

void pl_engine_dp_states_scatter(pl_engine_t *e) {
    int ns = e->chunks.n_states;
    for (int c = 0; c < e->chunks.n; c++)
        for (int s = 0; s < ns; s++) {
            pl_chunk *ch = &e->chunks.chunks[c];
            size_t len = (size_t)(e->dps->shard_hi[c] - e->dps->shard_lo[c]);
            if (len == 0 || starpu_data_acquire(ch->h_state[s], STARPU_W) != 0) continue;
            memcpy((void *)starpu_vector_get_local_ptr(ch->h_state[s]),
                   e->dps->ckpt_states[c * ns + s] + e->dps->shard_lo[c], len * sizeof(float));
            starpu_data_release(ch->h_state[s]);
        }
}

/* The world rank: the same as the data-parallel rank under dp alone, and
 * with stages across ranks still the one rank that writes the files. */
int pl_engine_dp_rank(const pl_engine_t *e) { return e ? e->rt->rank : 0; }

/* Whether some memory node holds a valid copy of h. */
static bool holds_data(starpu_data_handle_t h) {
    for (unsigned node = 0; node < starpu_memory_nodes_get_count(); node++) {
        int allocated = 0, valid = 0, requested = 0;
        starpu_data_query_status(h, (int)node, &allocated, &valid, &requested);
        if (valid) return true;
    }
    return false;
}

pl_status pl_engine_model_state_bytes(const pl_engine_t *e, pl_model_state_bytes *out) {
    if (!e || !out)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_model_state_bytes: %s is NULL",
                       !e ? "engine" : "out");
    *out = (pl_model_state_bytes){0};
    /* The last step's releases (and, ZeRO-2, invalidations) have run. */
    if (e->whole_lock_init) starpu_task_wait_for_all();
    for (int c = 0; c < e->chunks.n; c++) {
        int64_t bytes = (int64_t)e->chunks.chunks[c].numel * (int64_t)sizeof(float);
        int64_t stored = (int64_t)e->chunks.chunks[c].numel * (int64_t)e->chunks.elem;
        /* ZeRO-3 keeps the parameter shard; whole chunks come and go. */
        out->params += e->z3 ? (e->dps->shard_hi[c] - e->dps->shard_lo[c]) * (int64_t)e->chunks.elem
                             : stored;
        /* ZeRO-3 keeps no whole gradients between steps; ZeRO-2's count
         * while a copy of them holds data (none once released). */
        bool whole_grads = e->z3                ? false
                           : e->dps->grads_released ? holds_data(e->chunks.chunks[c].h_grad)
                                               : true;
        out->grads += whole_grads ? stored : 0;
        /* ZeRO shards the master weights with the optimizer states. */
        if (e->chunks.chunks[c].h_master)
            out->master_weights += e->dps->shard_lo ? (e->dps->shard_hi[c] - e->dps->shard_lo[c]) *
                                                     (int64_t)sizeof(float)
                                               : bytes;
        out->reduced_grads += e->dps->grad_shard
                                  ? (e->dps->shard_hi[c] - e->dps->shard_lo[c]) * (int64_t)e->chunks.elem
                                  : stored;
        int64_t state = e->dps->shard_lo ? (e->dps->shard_hi[c] - e->dps->shard_lo[c]) * (int64_t)sizeof(float)
                                    : bytes;
        out->optimizer_states += state * e->chunks.n_states;
    }
    if (e->whole_lock_init) {
        pthread_mutex_lock((pthread_mutex_t *)&e->whole_lock);
        out->gathered_params_peak = e->whole_peak[0];
        out->gathered_grads_peak = e->whole_peak[1];
        pthread_mutex_unlock((pthread_mutex_t *)&e->whole_lock);
    }
    return PL_STATUS_OK;
}
