/* The engine's view of a graph at run time: StarPU handles per tensor and
 * tile, chunks of model state, and the bookkeeping of one step. */
#ifndef PL_ENGINE_INTERNAL_H
#define PL_ENGINE_INTERNAL_H

#include <pthread.h>
#include <starpu.h>

#include "graph/graph_internal.h"
#include "memory/chunk.h"
#include "optim/grad_sum.h"
#include "engine/clip.h"
#include "engine/engine_state.h"
#include "engine/loss_scaler.h"
#include "scheduling/policy.h"

/* ZeRO-3: whole chunks gathered at once per pass, beyond those the op
 * order itself keeps in use (gather k of a pass waits for release k −
 * this of the pass). */
#define PL_Z3_WINDOW 2

/* Per tensor: activations/inputs/scalars have one handle per tile (a tile
 * is a microbatch: a contiguous slice of the batch); parameters live in a
 * chunk, read through the whole chunk, their gradients through its
 * per-tensor children (memory/chunk.h). */
typedef struct pl_tensor_rt {
    starpu_data_handle_t *val;  /* [tiles] */
    starpu_data_handle_t *grad; /* [tiles], activations that need grad */
    bool *grad_written;         /* [tiles]: this step already wrote grad */
    int chunk, slot;            /* parameters: chunk index, child index */
    bool param_grad_written;    /* since the last optimizer step */
} pl_tensor_rt;

struct pl_runtime {
    int cpu_workers;
    int cuda_workers;
    pl_device device;
    int64_t compute_budget;   /* bytes, 0 = none */
    bool budget_is_device;    /* CUDA without compute_budget_mb: the
                                 budget is the device's capacity */
    unsigned compute_node;    /* StarPU memory node of the compute tier */
    int offload_node;         /* disk node, -1 = none */
    int64_t offload_dir_free; /* bytes free there when the node was made */
    int64_t host_budget;      /* CUDA runs: bytes of the host tier, 0 = none */
    bool profiling;
    bool own_policy;          /* StarPU runs the Pleiades policy */
    bool distributed;         /* StarPU-MPI (pl_runtime_options.distributed) */
    int rank, world_size;
    int comm_worker;          /* runs only collectives; -1 none */
    pl_mpi_progress mpi_progress; /* THREAD or WORKER (resolved) */
    char policy_name[32];
    int live_engines;         /* engines built on it, not freed yet */
};

/* What the engine knows of each task it may submit; the scheduling tag
 * comes first so the policy's task->sched_data points at both. */
typedef struct pl_task_info {
    pl_sched_tag tag;
    pl_engine_t *engine;  /* for callbacks */
    int step;             /* placement step this task opens, -1 none */
    char name[48];
    int op;    /* op index, -1 for an optimizer task */
    int slot;  /* PL_SLOT_* */
    int tile;  /* microbatch, or chunk index for the optimizer */
    int stage, chunk;
    bool host_only; /* runs on CPU workers only (ZeRO's cpu_offload) */
} pl_task_info;

typedef struct pl_placement_state pl_placement_state;
typedef struct pl_zero3 pl_zero3;
typedef struct pl_ties pl_ties;
typedef struct pl_pp_ranks pl_pp_ranks;
typedef struct pl_balance pl_balance;
typedef struct pl_dp pl_dp;
typedef struct pl_fusion pl_fusion;

/* The StarPU codelets of one op definition (engine/op_tasks.c). */
typedef struct pl_op_codelets {
    const pl_op_def *def;
    struct starpu_codelet f, l, w, b[PL_OP_MAX_INPUTS];
    char names[3 + PL_OP_MAX_INPUTS][64];
} pl_op_codelets;

/* One op as its tasks' trampolines see it: the fixed part of every call
 * (shapes, attributes) and its codelets. */
typedef struct pl_op_exec {
    pl_engine_t *engine;
    const pl_op *op;
    pl_op_codelets *cl;
    pl_op_call call;
    /* 16-bit operands the trampoline widens to fp32 scratch before the
     * kernel and rounds back after it (gradients share their tensor's
     * format): inputs, parameters (all or none: one chunk set), the
     * output and the saved tensor. */
    bool half_in[PL_OP_MAX_INPUTS], half_params, half_out, half_saved;
    bool fused[64]; /* per tile: this step's loss task wrote the gradient */
} pl_op_exec;

/* Whether tensor t (not a parameter) is stored in 16 bits: F32 inputs and
 * activations (and saved tensors) under a 16-bit precision, the graph's
 * output unless force_outputs_fp32; never scalars or int32 inputs. */
bool pl_engine_tensor_half(const pl_engine_t *e, const pl_tensor_t *t);
/* Bytes per element of a non-parameter tensor as stored. */
size_t pl_engine_tensor_elem(const pl_engine_t *e, const pl_tensor_t *t);
/* The chunk format the options ask for (before the chunks exist). */
pl_chunk_format pl_engine_chunk_format(const pl_engine_t *e);

/* What the loss's gradient is multiplied by on top of 1/batch: 1/N with
 * gradient accumulation over N batches (GradAccumOptimizer.backward
 * divides the loss by accumulate_size). */
/* With dynamic loss scaling, times the current loss scale too (1 when
 * off, so nothing changes then). */
#define pl_engine_loss_grad_scale(e) \
    ((1.0f / (float)(e)->opt.accumulate_size) * (float)pl_loss_scaler_scale((e)->ls))

struct pl_engine {
    int id;                    /* 1, 2, ... in creation order (messages) */
    int64_t offload_need;      /* bytes the plan may keep on the disk tier */
    bool freezes_graph;        /* counted in g->live_engines and
                                  rt->live_engines */
    pl_runtime_t *rt;
    pl_graph_t *g;
    pl_engine_options opt;
    int n_tiles;
    int64_t max_tile_samples;
    int64_t tile_samples[64];  /* samples in each tile this step */
    int active_tiles;
    int64_t batch_samples;     /* samples this step */
    pl_tensor_rt *trt;         /* [n_tensors] */
    pl_chunk_set chunks;
    /* 16-bit storage (opt.precision fp16/bf16): activations, inputs and
     * parameters and their gradients, see pl_engine_tensor_half. */
    bool half, bf16;
    int64_t steps;             /* optimizer steps taken */
    int accumulate_step;       /* backward passes since the last update
                                  (GradAccumOptimizer.accumulate_step) */
    pl_batch_process_fn process;
    void *process_user;
    float *output_buf;
    int32_t *label_buf;
    int label_input;           /* tensor id of the labels input, or -1 */
    pl_task_info *tasks;       /* [n_ops][PL_NAME_SLOTS][n_tiles], then one
                                  per chunk (optimizer) */
    int ordered_submitted;     /* ordered tasks submitted in the current item */
    int ordered_submitted_w;   /* of which weight gradients (their own W
                                  item when the schedule lists W items) */
    pl_placement_state *placement; /* NULL without a placement policy */
    int pending_step;          /* placement step the next task opens, -1 */
    /* pipeline (schedule != NONE) */
    int n_parts;               /* p·v stage parts, 1 when non-pipelined */
    int *block_part;           /* [n_blocks] */
    int *item_of;              /* [p][3][m][v]: item index in stage schedule
                                  (F, B, W; W -1 unless the schedule lists W) */
    int n_items[PL_MAX_STAGES];
    /* The stage each StarPU worker serves (-1: none; engine/pipeline.c). */
    int worker_stage[STARPU_NMAXWORKERS];
    pl_balance *balance;       /* measured stage balance (engine/pipeline.c) */
    pl_op_exec *op_exec;       /* [n_ops] */
    pl_op_codelets *codelets;  /* one per distinct definition */
    int n_codelets;
    pthread_mutex_t kernel_error_lock;
    bool kernel_error_init;
    bool kernel_failed;        /* a kernel returned non-zero */
    char kernel_error[512];
    pthread_mutex_t records_lock;
    pl_task_record *records;
    int n_records, cap_records;
    /* Task slots: e->tasks has n_task_infos entries; the ops' and the
     * optimizer's come first, then each module's range, reserved at its
     * init (pl_engine_reserve_tasks). */
    size_t n_task_infos;
    size_t comm_base;                    /* collectives and ZeRO's memory
                                            tasks */
    /* Feature modules, each owning its state (NULL when off). */
    pl_clip *clip;                       /* engine/clip.h */
    pl_loss_scaler *ls;                  /* engine/loss_scaler.h */
    /* Data parallelism (engine/data_parallel.c); dp 1 = none. Rank r of a
     * dp x pp grid is replica r mod dp of stage r / dp. */
    int dp, dp_rank;
    /* Hybrid dp x pp: the ranks of this stage (gradients averaged among
     * them) and of this replica (shared chunks summed among its stages);
     * NULL when the group is the whole world. */
    struct pl_comm_group *dp_group, *pp_group;
    starpu_data_handle_t h_comm_token;   /* every collective takes it RW */
    pl_dp *dps;                          /* the module's state: buckets,
                                            ZeRO's shards (engine/data_parallel.c) */
    /* ZeRO-3 (engine/zero3.c): parameters sharded too; its state is its
     * own (NULL without ZeRO-3). */
    pl_zero3 *z3;
    /* Pipeline stages across ranks (engine/pipeline_ranks.c); pp 1: every
     * stage in this process. Each rank holds every chunk but runs, and
     * updates the chunks of, its own stage only. */
    int pp, pp_stage;                    /* stages over ranks; this rank's */
    pl_pp_ranks *ppr;                    /* its state (engine/pipeline_ranks.c) */
    pl_ties *ties;                       /* tied gradients (engine/tied_grads.c) */
    /* ZeRO-3's gathered whole chunks, ZeRO-2's whole gradients given
     * back: bytes live now and most, counted as the tasks run. */
    pthread_mutex_t whole_lock;          /* the byte counters below */
    bool whole_lock_init;                /* counting (ZeRO-2 releasing, ZeRO-3) */
    int64_t whole_live[2], whole_peak[2]; /* whole parameter / gradient bytes */
    pl_fusion *fusion;                   /* fused op tasks (engine/task_fusion.c) */
};

/* Task slots per (op, tile): F, L, W, and B for inputs 0..3. */
enum { PL_SLOT_F, PL_SLOT_L, PL_SLOT_W, PL_SLOT_B0, PL_NAME_SLOTS = PL_SLOT_B0 + PL_OP_MAX_INPUTS,
       PL_SLOT_OPT = PL_NAME_SLOTS, PL_SLOT_COMM,
       /* ZeRO's memory tasks: a gathered chunk's release, released
        * gradients' return (phase 'M', not collectives) */
       PL_SLOT_MEM };

static inline size_t pl_task_index(const pl_engine_t *e, int op, int slot,
                                   int tile) {
    return ((size_t)op * PL_NAME_SLOTS + slot) * e->n_tiles + tile;
}
static inline size_t pl_opt_task_index(const pl_engine_t *e, int chunk) {
    return (size_t)e->g->n_ops * PL_NAME_SLOTS * e->n_tiles + chunk;
}
/* Reserves n task slots (before pl_engine_pipeline_init allocates
 * e->tasks): the first one's index. */
static inline size_t pl_engine_reserve_tasks(pl_engine_t *e, size_t n) {
    size_t first = e->n_task_infos;
    e->n_task_infos += n;
    return first;
}
/* Data parallelism: per bucket a reduction (k = bucket) and, under ZeRO,
 * an all-gather of the updated parameters (k = chunks.n + bucket); then
 * (ZeRO-2) the partials' collectives of clipping (k = 2·chunks.n) and of
 * the overflow check (k = 2·chunks.n + 1). */
static inline size_t pl_comm_task_index(const pl_engine_t *e, int k) {
    return e->comm_base + (size_t)k;
}
#define PL_COMM_TASKS(e) ((size_t)(2 + PL_Z3_TASK_KINDS) * (size_t)(e)->chunks.n + 2)
/* ZeRO-2/3, per chunk c: k = 2·chunks.n + 2 + what·chunks.n + c, `what`
 * one of these (the reduce-scatter of chunk c is k = c): ZeRO-3's gathers
 * and releases, ZeRO-2's return of released whole gradients. */
enum { PL_Z3_GATHER_F, PL_Z3_GATHER_B, PL_Z3_RELEASE_F, PL_Z3_RELEASE_B, PL_Z2_GRADS_BACK,
       PL_Z3_TASK_KINDS };
static inline size_t pl_z3_task_index(const pl_engine_t *e, int what, int chunk) {
    return pl_comm_task_index(e, 2 * e->chunks.n + 2 + what * e->chunks.n + chunk);
}
/* Entries of e->tasks. */
static inline size_t pl_n_task_infos(const pl_engine_t *e) { return e->n_task_infos; }
/* Chunks one collective task takes (its buffers are these plus the
 * token); a larger bucket is split into several tasks. */
#define PL_MAX_BUCKET_CHUNKS 64

/* Rows of tensor t in tile `tile` (samples × rows per sample). */
static inline int64_t pl_tile_rows(const pl_engine_t *e, const pl_tensor_t *t,
                                   int tile) {
    return e->tile_samples[tile] * pl_tensor_rows_per_sample(t);
}

/* Submits one task of codelet `cl` on `handles` with a copy of `args`.
 * For STARPU_VARIABLE_NBUFFERS codelets, bit i of `overwrite` turns the RW
 * gradient output i into W (STARPU_W needs no valid previous contents). */
/* A reduction over every chunk's gradients as tasks (clipping's norm, the
 * loss scaler's overflow check): task first_task + c runs `partial` on
 * (chunk c's reduced gradients R, partials[c] W) with the arguments
 * fill(ctx, c, args) writes (args_size bytes), then task combine_task
 * runs `combine` on (every partial R, result W) with combine_args. Under
 * ZeRO-2 the partials of the rank's shards are first summed over ranks
 * (or their max taken, max_over_ranks). */
pl_status pl_engine_submit_grad_reduction(pl_engine_t *e, struct starpu_codelet *partial,
                                          size_t first_task, size_t args_size,
                                          void (*fill)(const pl_engine_t *e, int chunk,
                                                       void *args),
                                          starpu_data_handle_t *partials,
                                          struct starpu_codelet *combine,
                                          size_t combine_task, const void *combine_args,
                                          size_t combine_args_size,
                                          starpu_data_handle_t result,
                                          bool max_over_ranks, int dp_partials);

pl_status pl_engine_submit(pl_engine_t *e, struct starpu_codelet *cl,
                           size_t task, const void *args, size_t args_size,
                           int n_handles, starpu_data_handle_t *handles,
                           unsigned overwrite);

/* Likewise with each buffer's access mode given (STARPU_VARIABLE_NBUFFERS
 * codelets; more buffers than STARPU_NMAXBUFS are fine). */
pl_status pl_engine_submit_modes(pl_engine_t *e, struct starpu_codelet *cl,
                                 size_t task, const void *args, size_t args_size,
                                 int n_handles, starpu_data_handle_t *handles,
                                 const enum starpu_data_access_mode *modes);

/* Fused op tasks (engine/task_fusion.c). While active, each op task
 * (forward, loss, input or weight gradient) joins the group of its block
 * and kind instead of being submitted; pl_fusion_flush submits the groups
 * (one task each; a group of one as the task itself). */
#define PL_FUSION_MAX_MEMBERS 64
typedef struct pl_fusion_member {
    size_t task_index; /* e->tasks[] of the member */
    double start_us, end_us;
} pl_fusion_member;
pl_status pl_fusion_init(pl_engine_t *e);
/* Whether op tasks submitted now are collected (set by the submission
 * loop around an item's ops, until pl_fusion_flush). */
bool pl_fusion_active(const pl_fusion *f);
void pl_fusion_set_active(pl_fusion *f, bool active);
void pl_fusion_free(pl_engine_t *e);
pl_status pl_fusion_add(pl_engine_t *e, struct starpu_codelet *cl, size_t task_index,
                        const void *args, size_t args_size, int n_handles,
                        starpu_data_handle_t *handles,
                        const enum starpu_data_access_mode *modes, bool *taken);
pl_status pl_fusion_flush(pl_engine_t *e);
bool pl_fusion_is_fused(const struct starpu_task *task);
/* A fused task's members, in the order they ran (after it ran). */
int pl_fusion_members(const struct starpu_task *task, pl_fusion_member *out, int max,
                      int64_t *id);

/* Per-op tasks (engine/op_tasks.c): codelets and call templates for every
 * op at pl_engine_new, then submission per op and tile. */
pl_status pl_engine_ops_init(pl_engine_t *e);
void pl_engine_ops_free(pl_engine_t *e);
pl_status pl_op_submit_forward(pl_engine_t *e, int op_index, int tile,
                               bool training);
pl_status pl_op_submit_backward(pl_engine_t *e, int op_index, int tile);
/* A kernel returned non-zero (called from the worker); the first failure
 * is kept until pl_engine_check_kernels reports (and clears) it, and then
 * discards the gradients (pl_engine_grads_discard). */
void pl_engine_kernel_failed(pl_op_exec *x, const char *kernel, int input, int rc,
                             const char *message);
/* The same for any failure found on a worker or in a task's callback (a
 * placement policy's bad answer): the step reports this message. */
void pl_engine_step_failed(pl_engine_t *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
pl_status pl_engine_check_kernels(pl_engine_t *e);
/* The fixed part of every call of op `op`: its shapes and attributes. */
void pl_op_call_template(const pl_graph_t *g, const pl_op *op, pl_op_call *c);

/* Handle of a parameter's values (always its whole chunk, read-only in
 * the passes: memory/chunk.h) and their element offset in it; of its
 * gradient (its chunk child, or with placement the whole chunk) and the
 * offset in that. */
starpu_data_handle_t pl_param_handle(pl_engine_t *e, const pl_tensor_t *p);
size_t pl_param_value_offset(const pl_engine_t *e, const pl_tensor_t *p);
starpu_data_handle_t pl_param_grad_handle(pl_engine_t *e, const pl_tensor_t *p);
size_t pl_param_grad_offset(const pl_engine_t *e, const pl_tensor_t *p);
/* Tied gradients (engine/tied_grads.c). init: after the chunks, before
 * the task infos are allocated (their count includes the sums). */
pl_status pl_engine_ties_init(pl_engine_t *e);
void pl_engine_ties_name_tasks(pl_engine_t *e);
void pl_engine_ties_free(pl_engine_t *e);
/* The buffer of parameter `param` of op `op` when that use has its own
 * (NULL when it writes the parameter's gradient); *accumulate: this pass
 * already wrote it. Marks it written. */
starpu_data_handle_t pl_engine_tie_grad(pl_engine_t *e, int op, int param, bool *accumulate);
/* At an optimizer step, before anything reads the gradients (ZeRO-3:
 * before chunk `chunk`'s reduce-scatter; -1: every chunk): each written
 * buffer into its parameter's gradient. */
pl_status pl_engine_ties_submit_sums(pl_engine_t *e, int chunk);
/* pl_engine_get_grad between updates: adds parameter p's buffers (not yet
 * summed) to out, the gradient as read (zeros if this rank wrote none). */
pl_status pl_engine_ties_add_to(pl_engine_t *e, const pl_tensor_t *p, float *out);
/* After an update: no tied buffer holds a sum to add any more. */
void pl_engine_ties_restart(pl_engine_t *e);
/* zero_grad: the next backward overwrites parameter gradients and tied
 * buffers (after an update, a skipped one, a checkpoint load). */
void pl_engine_grads_restart(pl_engine_t *e);
/* A step failed: the gradients of the passes since the last update are
 * dropped (restart, and the accumulation count starts over), so the next
 * pass neither adds to what a failed kernel left half written nor lets
 * an update apply it. */
void pl_engine_grads_discard(pl_engine_t *e);

/* Pipeline set-up (engine/pipeline.c): stage parts, schedules and
 * the tags of every task slot. */
pl_status pl_engine_pipeline_init(pl_engine_t *e);
/* Submits one iteration's items in the (valid sequential) non-pipelined
 * order; the policy reorders execution per stage. */
pl_status pl_engine_submit_iteration(pl_engine_t *e, bool forward_only);
/* Mean item times over the records rec[0..n) (pl_engine_item_times on
 * given records: a trace's merged ranks), and the schedule's theoretical
 * bubble from them (t NULL: the def's plain formula). */
pl_status pl_engine_item_times_of(const pl_engine_t *e, const pl_task_record *rec, int n,
                                  pl_item_times *out);
double pl_engine_bubble_of(const pl_engine_t *e, const pl_item_times *t);
/* Measured stage balance: an op kernel of the timed step on a CPU worker
 * adds its thread's CPU time (µs) to its block (from the kernel's
 * trampoline); a finished task that ran on a CUDA worker adds its wall
 * time from StarPU's profiling (from the task callback). */
void pl_engine_balance_add(pl_engine_t *e, int block, double us);
/* Whether the step in flight is the timed one; the module's end. */
bool pl_engine_balance_timing(const pl_engine_t *e);
void pl_engine_balance_free(pl_engine_t *e);
void pl_engine_balance_task_done(pl_engine_t *e, const struct starpu_task *task);

/* Memory placement (engine/placement.c). */
/* Budget, feasibility and tier checks on the packing (params `ids` of
 * `sizes` in chunk_elems chunks), before pack_params allocates anything;
 * then the set-up. */
pl_status pl_engine_placement_precheck(pl_engine_t *e, const int64_t *sizes,
                                       const int *ids, int n, size_t chunk_elems,
                                       int n_states);
pl_status pl_engine_placement_init(pl_engine_t *e);
/* Stages across ranks, after a recut moved ops between stages: this
 * rank's steps again, and the policy restarted on them. */
pl_status pl_engine_placement_restage(pl_engine_t *e);
void pl_engine_placement_free(pl_engine_t *e);
void pl_engine_placement_tag(pl_engine_t *e, struct starpu_task *task,
                             pl_task_info *info);
void pl_engine_placement_sample(pl_engine_t *e);
void pl_engine_placement_iteration_end(pl_engine_t *e);
void pl_engine_placement_release_tile(pl_engine_t *e, int tile);
void pl_engine_placement_release_op(pl_engine_t *e, int op, int tile);
/* Placement step numbers (see engine/placement.c). */
static inline int pl_step_forward(const pl_engine_t *e, int op) { (void)e; return op; }
static inline int pl_step_backward(const pl_engine_t *e, int op) {
    return 2 * e->g->n_ops - 1 - op;
}
static inline int pl_step_optimizer(const pl_engine_t *e, int chunk) {
    return 2 * e->g->n_ops + chunk;
}

/* Data parallelism (engine/data_parallel.c): checks and buckets at
 * pl_engine_new (dp > 1 compares every rank's model and options); at an
 * update, the reduction tasks of every bucket; host sums of step results
 * over ranks. No-ops when dp is 1. */
pl_status pl_engine_dp_init(pl_engine_t *e);
/* ZeRO's shards: whether this rank holds shards, chunk c's (0 to numel
 * when not sharded), the reduced gradient shard (NULL without ZeRO-2/3),
 * whether ZeRO-2 releases whole gradients; while a checkpoint is written
 * or read, the whole-chunk states and master weights (NULL otherwise). */
bool pl_engine_dp_sharded(const pl_engine_t *e);
void pl_engine_dp_shard(const pl_engine_t *e, int c, int64_t *lo, int64_t *hi);
starpu_data_handle_t pl_engine_dp_grad_shard(const pl_engine_t *e, int c);
bool pl_engine_dp_releases_grads(const pl_engine_t *e);
float *pl_engine_dp_ckpt_states(const pl_engine_t *e, int c, int s);
const float *pl_engine_dp_ckpt_master(const pl_engine_t *e, int c);
void pl_engine_dp_free(pl_engine_t *e);
/* Names task `index` "<what>.b<bucket>" as a collective (comm tag). */
void pl_engine_dp_name_task(pl_engine_t *e, size_t index, const char *what, int bucket);
pl_status pl_engine_dp_reduce_gradients(pl_engine_t *e);
pl_status pl_engine_dp_gather_params(pl_engine_t *e);
pl_status pl_engine_dp_mean_results(pl_engine_t *e, double *sums, int n);
/* ZeRO checkpoints hold whole optimizer states, as one process's do (so
 * any world size can resume them). gather (collective) assembles the
 * ranks' shards into whole-chunk states on rank 0 (pl_engine_dp_ckpt_states); open allocates zeroed
 * whole-chunk buffers there (every rank, to be read into); scatter copies
 * this rank's shard out of them; close frees them. */
pl_status pl_engine_dp_states_gather(pl_engine_t *e);
pl_status pl_engine_dp_states_open(pl_engine_t *e);
void pl_engine_dp_states_scatter(pl_engine_t *e);
void pl_engine_dp_states_close(pl_engine_t *e);
/* The gradients an update reads for chunk c, reduced: the chunk's (DDP,
 * ZeRO-1) or this rank's shard of them (ZeRO-2), and their length. */
starpu_data_handle_t pl_engine_dp_reduced_grad(const pl_engine_t *e, int c);
int64_t pl_engine_dp_reduced_numel(const pl_engine_t *e, int c);
/* ZeRO-2: partials of gradient shards (one double each) combined over
 * ranks, by sum or max, as one collective task (a no-op otherwise). */
enum { PL_DP_PARTIALS_NORM, PL_DP_PARTIALS_OVERFLOW }; /* which collective */
pl_status pl_engine_dp_combine_partials(pl_engine_t *e, starpu_data_handle_t *partials,
                                        bool max, int which);
/* ZeRO-2 releasing whole gradients: before any task writes chunk c's
 * gradients, gives them back (a task writing zeros, once `after` is
 * ready, if not NULL) if an update released them; a no-op otherwise.
 * released: whether they are released now (as submitted). */
pl_status pl_engine_dp_grads_back(pl_engine_t *e, int c, starpu_data_handle_t after);
bool pl_engine_dp_grads_released(const pl_engine_t *e, int c);
/* From a task's callback: the whole gradient bytes a return or a
 * reduce-scatter changed, measured (into whole_live[1] / whole_peak[1]). */
void pl_engine_dp_grads_task_done(pl_engine_t *e, const struct starpu_task *task);

/* ZeRO-3 (engine/zero3.c), dp > 1 and zero_stage 3: set-up after
 * pl_engine_dp_init (the shards, the use ranges of each chunk); a
 * non-pipelined iteration submitted op by op with each chunk gathered
 * before its first use and released after its last, the gradients
 * reduce-scattered then; the sharded parameter each update writes. */
pl_status pl_engine_z3_init(pl_engine_t *e);
/* Chunk c's parameter shard, the one an update writes. */
starpu_data_handle_t pl_z3_param_shard(const pl_zero3 *z, int c);
void pl_engine_z3_free(pl_engine_t *e);
pl_status pl_engine_z3_submit_iteration(pl_engine_t *e, bool forward_only);
/* param_io under ZeRO-3: refuses unless the chunk is gathered; after a
 * write, copies the rank's part into its shard. */
pl_status pl_engine_z3_check_gathered(const pl_engine_t *e, const pl_tensor_t *p,
                                      const char *fn);
pl_status pl_engine_z3_store_shard(pl_engine_t *e, const pl_tensor_t *p);
/* The whole parameter and gradient bytes live outside the placement units
 * now: ZeRO-3's gathered chunks, ZeRO-2's returned gradients (0 without
 * ZeRO-2/3). */
int64_t pl_engine_whole_bytes(pl_engine_t *e);
/* A ZeRO shard of len values of elem bytes (zeros, or a copy of init) and
 * its handle: StarPU-allocated under a placement policy (counted against
 * the budget, evictable), else in *mem (starpu_free'd by the owner). */
pl_status pl_engine_dp_shard_new(pl_engine_t *e, size_t len, size_t elem, const void *init,
                                 void **mem, starpu_data_handle_t *h);
/* From a task's callback: the gathered bytes it changed, measured. */
void pl_engine_z3_task_done(pl_engine_t *e, const struct starpu_task *task);

/* Pipeline stages across ranks (engine/pipeline_ranks.c), opt.pp > 1:
 * checks and set-up after the pipeline's (stage parts known): the
 * activations that cross ranks and the chunks each stage uses. */
pl_status pl_engine_pp_init(pl_engine_t *e);
void pl_engine_pp_free(pl_engine_t *e);
/* After a recut (every chunk synced first, no task in flight): those
 * again, and every chunk's gradients cleared. */
pl_status pl_engine_pp_recut(pl_engine_t *e);
/* Whether this rank runs stage part `part` (always, when pp is 1). */
bool pl_engine_pp_local_part(const pl_engine_t *e, int part);
/* Around one schedule item of this rank: the receives it needs first,
 * the sends it feeds after its tasks. */
pl_status pl_engine_pp_item_begin(pl_engine_t *e, bool backward, int part, int mb);
pl_status pl_engine_pp_item_end(pl_engine_t *e, bool backward, int part, int mb);
/* Chunk c: this rank updates it (its stage uses it); this rank counts it
 * in norms and overflow checks (the lowest stage using it). */
bool pl_engine_pp_updates_chunk(const pl_engine_t *e, int c);
bool pl_engine_pp_counts_chunk(const pl_engine_t *e, int c);
/* The buffer chunk c's summed gradients are in (pl_engine_pp_sums_chunk). */
starpu_data_handle_t pl_engine_pp_grad_sum(const pl_engine_t *e, int c);
/* After an update: chunks other stages update are stale here. */
void pl_engine_pp_mark_updated(pl_engine_t *e);
/* At an update: the summed gradients of chunks several stages use. */
pl_status pl_engine_pp_reduce_shared(pl_engine_t *e);
/* Whether chunk c's update reads those sums: several stages use it under
 * the current cut (a recut leaves the buffers of chunks shared before). */
bool pl_engine_pp_sums_chunk(const pl_engine_t *e, int c);
/* Collective: every chunk's parameters (and optimizer states) from the
 * lowest stage using it to every rank. */
pl_status pl_engine_pp_sync(pl_engine_t *e, bool states);
/* param_io: parameter p is current on this rank (or refused, naming fn). */
pl_status pl_engine_pp_check_param(const pl_engine_t *e, const pl_tensor_t *p, bool grad,
                                   const char *fn);
/* Whether op `op`'s tasks run on this rank. */
bool pl_engine_pp_local_op(const pl_engine_t *e, int op);
/* The stage running op `op`: its rank in this replica's group (pp_group). */
int pl_engine_pp_op_stage(const pl_engine_t *e, int op);

/* pl_engine_options.check_finite (engine/check_finite.c), once the pass
 * is over (no task in flight): the first inf/NaN among the batch's
 * inputs, the ops' outputs and the gradients the backward pass wrote,
 * in the order they were made, as a RUNTIME_ERROR naming it. */
pl_status pl_engine_check_finite(pl_engine_t *e);

/* Parameter initialisation (engine/param_init.c). */
void pl_param_init(const pl_graph_t *g, const pl_tensor_t *p, float *dst);

#endif
