/* What the core offers the engine's feature modules besides
 * engine_internal.h (docs/architecture.md, "Modules: what includes what").
 * A module includes no other module's header: what it needs of another
 * goes through e->hooks, which the core wires to the module that answers
 * (engine/engine.c). Here too: the collective task slots that data
 * parallelism, ZeRO-3 and stages across ranks share, the placement step
 * numbers, what several modules use (engine/hooks.c), and the op-task
 * submissions ZeRO-3 and recomputation make (engine/op_tasks.c). Like
 * engine_internal.h, it includes no module's header. */
#ifndef PL_ENGINE_HOOKS_H
#define PL_ENGINE_HOOKS_H

#include "engine/engine_internal.h"

/* e->hooks: one module's answers to the others. Each hook is the module's
 * own function, which also answers when the module is off (the whole
 * chunk, NULL, false, true or a no-op: what the engine does without it),
 * but pp_grad_sum, asked only where pp_sums_chunk says yes. */
struct pl_engine_hooks {
    /* Data parallelism, ZeRO-1/2 (engine/data_parallel.h: pl_engine_dp_*):
     * chunk c's shard [lo, hi) on this rank, its reduced gradient shard,
     * whether ZeRO-2 releases whole gradients, whether chunk c's are
     * released now, and their return before a task writes them. */
    void (*dp_shard)(const pl_engine_t *e, int c, int64_t *lo, int64_t *hi);
    starpu_data_handle_t (*dp_grad_shard)(const pl_engine_t *e, int c);
    bool (*dp_releases_grads)(const pl_engine_t *e);
    bool (*dp_grads_released)(const pl_engine_t *e, int c);
    pl_status (*dp_grads_back)(pl_engine_t *e, int c, starpu_data_handle_t after);
    /* Stages across ranks (engine/pipeline_ranks.h: pl_engine_pp_*): op
     * `op` runs on this rank; this rank updates chunk c, counts it in
     * norms, sums its gradients over stages (into pp_grad_sum's buffer). */
    bool (*pp_local_op)(const pl_engine_t *e, int op);
    bool (*pp_updates_chunk)(const pl_engine_t *e, int c);
    bool (*pp_counts_chunk)(const pl_engine_t *e, int c);
    bool (*pp_sums_chunk)(const pl_engine_t *e, int c);
    starpu_data_handle_t (*pp_grad_sum)(const pl_engine_t *e, int c);
    /* ZeRO-3 (engine/zero3.h): chunk c's parameter shard (NULL without). */
    starpu_data_handle_t (*z3_param_shard)(const pl_engine_t *e, int c);
    /* Memory placement (engine/placement.h): op `op`'s activations on a
     * tile once its backward is submitted, and the tile's inputs, handed
     * back (no longer needed). */
    void (*placement_release_op)(pl_engine_t *e, int op, int tile);
    void (*placement_release_tile)(pl_engine_t *e, int tile);
    /* Tied gradients (engine/tied_grads.h): the buffers of chunk `chunk`'s
     * tied parameters (-1: every chunk's) added to their gradients. */
    pl_status (*ties_submit_sums)(pl_engine_t *e, int chunk);
    /* Fused op tasks (engine/task_fusion.h): the op tasks collected so far
     * submitted (a no-op when none is being collected). */
    pl_status (*fusion_flush)(pl_engine_t *e);
    /* Activation recomputation (engine/recompute.h: pl_recompute_*): the
     * item loop's calls around an op's forward and backward tasks, and
     * whether op is a recomputed unit's last op (its first and last). */
    pl_status (*recompute_forward_done)(pl_engine_t *e, int op, int tile);
    pl_status (*recompute_backward_begin)(pl_engine_t *e, int op, int tile);
    pl_status (*recompute_backward_done)(pl_engine_t *e, int op, int tile);
    bool (*recompute_unit_at)(const pl_engine_t *e, int op, int *first, int *last);
    /* The disk tier (engine/offload.h): its directory, its files' bytes. */
    const char *(*offload_dir)(void);
    int64_t (*offload_bytes)(void);
};

/* Collective task slots, from e->comm_base (reserved at pl_engine_new):
 * data parallelism's per bucket a reduction (k = bucket) and, under ZeRO,
 * an all-gather of the updated parameters (k = chunks.n + bucket); then
 * the partials' collectives of clipping (k = 2·chunks.n) and of the
 * overflow check (k = 2·chunks.n + 1); then per chunk c, `what` one of
 * PL_Z3_*: ZeRO-3's gathers and releases, ZeRO-2's return of released
 * whole gradients (pl_z3_task_index). Stages across ranks sum chunk c's
 * shared gradients in slot k = c, ZeRO-3 reduce-scatters it there. */
static inline size_t pl_comm_task_index(const pl_engine_t *e, int k) {
    return e->comm_base + (size_t)k;
}
enum { PL_DP_PARTIALS_NORM, PL_DP_PARTIALS_OVERFLOW }; /* k = 2·chunks.n + which */
enum { PL_Z3_GATHER_F, PL_Z3_GATHER_B, PL_Z3_RELEASE_F, PL_Z3_RELEASE_B, PL_Z2_GRADS_BACK,
       PL_Z3_TASK_KINDS };
static inline size_t pl_z3_task_index(const pl_engine_t *e, int what, int chunk) {
    return pl_comm_task_index(e, 2 * e->chunks.n + 2 + what * e->chunks.n + chunk);
}
#define PL_COMM_TASKS(e) ((size_t)(2 + PL_Z3_TASK_KINDS) * (size_t)(e)->chunks.n + 2)
/* Names task `index` "<what>.b<bucket>" as a collective (comm tag). */
void pl_engine_name_comm_task(pl_engine_t *e, size_t index, const char *what, int bucket);
/* Workers that run op tasks: the GPUs on CUDA runtimes, else the CPU
 * workers but the communication worker. */
int pl_engine_compute_workers(const pl_engine_t *e);

/* ZeRO-3: whole chunks gathered at once per pass, beyond those the op
 * order itself keeps in use (gather k of a pass waits for release k −
 * this of the pass); placement's budget counts them. */
#define PL_Z3_WINDOW 2

/* A ZeRO shard of len values of elem bytes (zeros, or a copy of init) and
 * its handle: StarPU-allocated under a placement policy (counted against
 * the budget, evictable), else in *mem (starpu_free'd by the owner). */
pl_status pl_engine_shard_new(pl_engine_t *e, size_t len, size_t elem, const void *init,
                              void **mem, starpu_data_handle_t *h);
/* The whole parameter and gradient bytes live outside the placement units
 * now: ZeRO-3's gathered chunks, ZeRO-2's returned gradients (0 without
 * ZeRO-2/3; e->whole_live). */
int64_t pl_engine_whole_bytes(pl_engine_t *e);

/* One op of one tile as its tasks (engine/op_tasks.c; ZeRO-3 submits op
 * by op). recompute: the op's training forward again, as task slot `task`
 * (activation recomputation, engine/recompute.c): same operands, same
 * seed, and the handles `gates` (at most PL_RECOMPUTE_MAX_GATES) read by
 * no kernel, so that StarPU starts it only once their writers have run. */
pl_status pl_op_submit_forward(pl_engine_t *e, int op_index, int tile, bool training);
pl_status pl_op_submit_backward(pl_engine_t *e, int op_index, int tile);
#define PL_RECOMPUTE_MAX_GATES 2
pl_status pl_op_submit_recompute(pl_engine_t *e, int op_index, int tile, size_t task,
                                 const starpu_data_handle_t *gates, int n_gates);
/* A failure found on a worker or in a task's callback (a placement
 * policy's bad answer): the step reports this message (engine/op_tasks.c). */
void pl_engine_step_failed(pl_engine_t *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Placement step numbers (engine/placement.c): op i's forward is step i,
 * its backward step 2·n_ops − 1 − i, chunk c's update 2·n_ops + c. */
static inline int pl_step_forward(const pl_engine_t *e, int op) { (void)e; return op; }
static inline int pl_step_backward(const pl_engine_t *e, int op) {
    return 2 * e->g->n_ops - 1 - op;
}
static inline int pl_step_optimizer(const pl_engine_t *e, int chunk) {
    return 2 * e->g->n_ops + chunk;
}

#endif
