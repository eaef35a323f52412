/* The engine's view of a graph at run time: StarPU handles per tensor and
 * tile, chunks of model state, and the bookkeeping of one step; the
 * functions the core offers its modules. Includes no module's header. */
#ifndef PL_ENGINE_INTERNAL_H
#define PL_ENGINE_INTERNAL_H

#include <pthread.h>
#include <starpu.h>

#include "graph/graph_internal.h"
#include "memory/chunk.h"
#include "optim/grad_sum.h"
#include "engine/runtime_internal.h"
#include "scheduling/policy.h"

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

typedef struct pl_clip pl_clip;
typedef struct pl_loss_scaler pl_loss_scaler;
typedef struct pl_placement_state pl_placement_state;
typedef struct pl_zero3 pl_zero3;
typedef struct pl_ties pl_ties;
typedef struct pl_pp_ranks pl_pp_ranks;
typedef struct pl_balance pl_balance;
typedef struct pl_dp pl_dp;
typedef struct pl_fusion pl_fusion;
typedef struct pl_op_codelets pl_op_codelets;
typedef struct pl_op_exec pl_op_exec;

/* Whether tensor t (not a parameter) is stored in 16 bits: F32 inputs and
 * activations (and saved tensors) under a 16-bit precision, the graph's
 * output unless force_outputs_fp32; never scalars or int32 inputs. */
bool pl_engine_tensor_half(const pl_engine_t *e, const pl_tensor_t *t);
/* Bytes per element of a non-parameter tensor as stored. */
size_t pl_engine_tensor_elem(const pl_engine_t *e, const pl_tensor_t *t);
/* The chunk format the options ask for (before the chunks exist). */
pl_chunk_format pl_engine_chunk_format(const pl_engine_t *e);

struct pl_engine {
    int id;                    /* 1, 2, ... in creation order (messages) */
    const struct pl_engine_hooks *hooks; /* the modules' (engine/hooks.h) */
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
    int *part_stage, *part_chunk; /* [n_parts]: the schedule's placement */
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
    /* Data parallelism (engine/data_parallel.c); dp 1 = none. A rank's
     * replica (dp_rank) and stage in a dp x pp grid: pl_runtime_grid_*. */
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
    struct pl_act_mem *act_mem;          /* engine/activation_memory.h */
    struct pl_recompute *recompute;      /* engine/recompute.h, NULL when off */
};

/* Task slots per (op, tile): F, L, W, and B for inputs 0..3. */
enum { PL_SLOT_F, PL_SLOT_L, PL_SLOT_W, PL_SLOT_B0, PL_NAME_SLOTS = PL_SLOT_B0 + PL_OP_MAX_INPUTS,
       PL_SLOT_OPT = PL_NAME_SLOTS, PL_SLOT_COMM,
       /* ZeRO's memory tasks: a gathered chunk's release, released
        * gradients' return (phase 'M', not collectives) */
       PL_SLOT_MEM,
       PL_SLOT_R /* a forward run again before its backward (engine/recompute.c) */ };

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
/* Entries of e->tasks. */
static inline size_t pl_n_task_infos(const pl_engine_t *e) { return e->n_task_infos; }

/* Rows of tensor t in tile `tile` (samples × rows per sample). */
static inline int64_t pl_tile_rows(const pl_engine_t *e, const pl_tensor_t *t,
                                   int tile) {
    return e->tile_samples[tile] * pl_tensor_rows_per_sample(t);
}

/* A reduction over every chunk's gradients as tasks (clipping's norm, the
 * loss scaler's overflow check): task first_task + c runs `partial` on
 * (chunk c's reduced gradients R, partials[c] W) with the arguments
 * fill(e, c, n, args) writes (args_size bytes; n: the reduced gradient
 * values this rank counts in chunk c), then task combine_task
 * runs `combine` on (every partial R, result W) with combine_args. Under
 * ZeRO-2 the partials of the rank's shards are first summed over ranks
 * (or their max taken, max_over_ranks; dp_partials: PL_DP_PARTIALS_*). */
pl_status pl_engine_submit_grad_reduction(pl_engine_t *e, struct starpu_codelet *partial,
                                          size_t first_task, size_t args_size,
                                          void (*fill)(const pl_engine_t *e, int chunk,
                                                       int64_t n, void *args),
                                          starpu_data_handle_t *partials,
                                          struct starpu_codelet *combine,
                                          size_t combine_task, const void *combine_args,
                                          size_t combine_args_size,
                                          starpu_data_handle_t result,
                                          bool max_over_ranks, int dp_partials);

/* Submits one task of codelet `cl` on `handles` with a copy of `args`.
 * For STARPU_VARIABLE_NBUFFERS codelets, bit i of `overwrite` turns the RW
 * gradient output i into W (STARPU_W needs no valid previous contents). */
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

/* Handle of a parameter's values (always its whole chunk, read-only in
 * the passes: memory/chunk.h) and their element offset in it; of its
 * gradient (its chunk child, or with placement the whole chunk) and the
 * offset in that. */
starpu_data_handle_t pl_param_handle(pl_engine_t *e, const pl_tensor_t *p);
size_t pl_param_value_offset(const pl_engine_t *e, const pl_tensor_t *p);
starpu_data_handle_t pl_param_grad_handle(pl_engine_t *e, const pl_tensor_t *p);
size_t pl_param_grad_offset(const pl_engine_t *e, const pl_tensor_t *p);
/* zero_grad: the next backward overwrites parameter gradients and tied
 * buffers (after an update, a skipped one, a checkpoint load). */
void pl_engine_grads_restart(pl_engine_t *e);
/* A step failed: the gradients of the passes since the last update are
 * dropped (restart, and the accumulation count starts over), so the next
 * pass neither adds to what a failed kernel left half written nor lets
 * an update apply it. */
void pl_engine_grads_discard(pl_engine_t *e);

/* Parameter initialisation (engine/param_init.c). */
void pl_param_init(const pl_graph_t *g, const pl_tensor_t *p, float *dst);

#endif
