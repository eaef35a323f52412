/*
 * pleiades/engine.h — the engine: a graph's training iteration as StarPU
 * tasks, optimizers, pipeline schedules, task records and traces (part of
 * pleiades.h).
 *
 *   pl_engine_options eo = pl_engine_options_default();   // AdamW, lr 1e-3
 *   eo.batch_size = 256;
 *   eo.schedule = PL_SCHEDULE_1F1B; eo.stages = 2;          // optional
 *   pl_engine_t *e = pl_engine_new(rt, g, &eo);
 *   const void *data[2] = {images, labels};
 *   pl_batch b = {.size = 256, .data = data};
 *   pl_step_result r;
 *   pl_engine_train_step(e, &b, &r);                        // r.loss
 *   pl_engine_free(e);
 */
#ifndef PLEIADES_ENGINE_H
#define PLEIADES_ENGINE_H

#include "pleiades/data.h"
#include "pleiades/graph.h"
#include "pleiades/lr_scheduler.h"
#include "pleiades/placement.h"
#include "pleiades/runtime.h"
#include "pleiades/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- engine */

typedef struct pl_engine pl_engine_t;

typedef enum pl_optimizer_kind {
    PL_OPTIMIZER_SGD = 0,
    PL_OPTIMIZER_ADAMW,
} pl_optimizer_kind;

/* The first built-in schedules as values, kept for compatibility; the
 * registry (pleiades/schedule.h) has them all by name, and built-ins added
 * since ("gpipe") have no value here: schedule_def = pl_schedule_find(). */
typedef enum pl_schedule_kind {
    PL_SCHEDULE_NONE = 0,    /* non-pipelined: forward all, then backward */
    PL_SCHEDULE_1F1B,        /* warm-up forwards, 1 forward / 1 backward */
    PL_SCHEDULE_INTERLEAVED, /* 1F1B over v model chunks per stage */
    PL_SCHEDULE_ZB_H1,       /* zero-bubble ZB-H1: W items fill bubbles */
} pl_schedule_kind;

/* How pipeline stages are cut when layers_per_stage is NULL. */
typedef enum pl_stage_balance {
    /* The default: the first training step runs on the FLOP estimate, the
     * second is timed block by block (its F, B and W tasks), and from the
     * third on the stages are cut on those times. FLOPs misjudge
     * elementwise ops and the loss on CPUs; measured times do not.
     * Results are bitwise the same under any cut (the engine submits in
     * one order; the cut only moves tasks between stage workers). */
    PL_STAGE_BALANCE_MEASURED = 0,
    PL_STAGE_BALANCE_FLOPS,  /* the FLOP estimate throughout */
} pl_stage_balance;

/* Mixed precision (the plugins' `precision`): how parameters, their
 * gradients and activations are stored on the compute tier. Kernels
 * compute in fp32 either way: an op's 16-bit operands are widened to fp32
 * as its task starts and its outputs rounded back (to nearest even) as it
 * ends, so every op, a user's included, runs in 16-bit storage unchanged.
 * Optimizer states stay fp32, and so do the master weights the optimizer
 * updates (master_weights). Scalars (losses, metrics) are always fp32 or
 * better. fp16 turns on dynamic loss scaling (loss_scaler), as
 * Colossal-AI's fp16 does: its range (largest finite 65504) overflows
 * where bf16's (fp32's exponent) does not. */
typedef enum pl_precision {
    PL_PRECISION_FP32 = 0,
    PL_PRECISION_FP16,
    PL_PRECISION_BF16,
} pl_precision;

typedef struct pl_optimizer_options {
    pl_optimizer_kind kind;
    float lr;           /* default 1e-3 */
    float momentum;     /* SGD: default 0 */
    float weight_decay; /* SGD: L2 added to the gradient (default 0);
                           AdamW: decoupled decay (default 0.01) */
    float beta1, beta2; /* AdamW: 0.9, 0.999 */
    float eps;          /* AdamW: 1e-8 */
} pl_optimizer_options;

/* Dynamic loss scaling (Colossal-AI's DynamicGradScaler, the plugins'
 * names and defaults): the loss gradient is multiplied by `scale`, an
 * update whose gradients hold an inf or NaN is skipped (no parameter,
 * optimizer state or step-count change), and the others see their
 * gradients divided by `scale` again. After an overflow hysteresis_step
 * += 1, growth_step = 0, and once hysteresis_step >= hysteresis the scale
 * is multiplied by backoff_factor (not below min_scale); after a clean
 * update growth_step += 1, and at growth_interval growth_step =
 * hysteresis_step = 0 and the scale is multiplied by growth_factor (not
 * above max_scale). pl_engine_get_grad reads the gradients as the
 * backward left them: scaled. Off by default; on with fp16 precision. */
typedef struct pl_loss_scaler_options {
    bool enabled;
    double initial_scale;  /* 2^16, in [min_scale, max_scale] */
    double min_scale;      /* 1, > 0 */
    double max_scale;      /* 2^32, <= 2^127 (the seed is a float) */
    double growth_factor;  /* 2, > 1 */
    double backoff_factor; /* 0.5, in (0, 1) */
    int growth_interval;   /* 1000, >= 1 */
    int hysteresis;        /* 2, >= 1 */
} pl_loss_scaler_options;

/* Activation recomputation (Megatron-LM's --recompute-granularity and
 * --recompute-method, Colossal-AI's gradient_checkpoint_config): the
 * forward pass keeps only a recomputed unit's input and what leaves it,
 * and runs the unit's forward tasks again (phase R) just before its
 * backward pass; losses and gradients are bitwise those of a run that
 * keeps everything. A unit is consecutive blocks (pl_graph_begin_block)
 * of one pipeline stage part; "layers" are the blocks that have
 * activations to drop (the GPT: its transformer layers and its head). */
typedef enum pl_recompute_granularity {
    PL_RECOMPUTE_NONE = 0,  /* keep every activation (default) */
    PL_RECOMPUTE_SELECTIVE, /* only the outputs of PL_OP_RECOMPUTE_SELECTIVE
                               ops (attention's softmax probabilities):
                               Megatron's selective */
    PL_RECOMPUTE_FULL,      /* everything inside the unit (Megatron's full) */
    /* Per layer, keep or recompute, whichever the planner predicts
     * fastest within the memory budget (memory/activation_plan.h): every
     * layer recomputed (full) until the second training step has timed
     * each block's forward, then the plan from those times, the
     * activations' bytes, the budget the model state leaves and the tier
     * below's bandwidth; without a budget, everything kept. method,
     * num_layers and ratio do not apply. pl_engine_recompute_plan says
     * what it chose. */
    PL_RECOMPUTE_AUTO,
} pl_recompute_granularity;

typedef enum pl_recompute_method {
    PL_RECOMPUTE_UNIFORM = 0, /* every layer, in units of num_layers
                                 consecutive layers (default 1) */
    PL_RECOMPUTE_BLOCK,       /* the first num_layers layers of each stage
                                 part, each its own unit; the rest kept */
} pl_recompute_method;

/* What PL_RECOMPUTE_AUTO plans from, per layer: its block, its forward
 * time in the timed step (the cost of a re-run), its activations' bytes
 * over the batch, and of those what leaves the layer (what recomputing
 * keeps). */
typedef struct pl_recompute_layer {
    int block;
    double forward_us;
    int64_t bytes, out_bytes;
} pl_recompute_layer;

typedef struct pl_recompute_options {
    pl_recompute_granularity granularity;
    pl_recompute_method method;
    int num_layers; /* 0: uniform 1, block: every layer */
    /* Colossal-AI's gradient_checkpointing_ratio (0 = unused): the first
     * ceil(ratio x layers) layers of each stage part, as method block
     * with that num_layers; (0, 1]. */
    double ratio;
    /* PL_RECOMPUTE_AUTO: a plan of the user's instead of the built-in
     * planner's (NULL). Given the layers' costs, the activation budget
     * (what the model state leaves of the compute tier's, bytes) and the
     * tier below's bytes per µs (0: none), it sets recompute[i] for layer
     * i; a layer not recomputed is kept (a placement policy moves what
     * does not fit). Called once, between the timed step and the next. */
    void (*plan)(void *user, int n_layers, const pl_recompute_layer *layers,
                 int64_t budget_bytes, double bytes_per_us, bool *recompute);
    void *plan_user;
} pl_recompute_options;

typedef struct pl_engine_options {
    int batch_size;       /* largest batch fed to a step (required) */
    int tiles;            /* batch tiles (= microbatches) per step; 0 = one
                             per CPU worker (PL_DEVICE_CUDA: per GPU; tiles
                             are what workers run in parallel; pipelines
                             need at least p) */
    pl_optimizer_options optimizer;
    pl_lr_scheduler_options lr_scheduler; /* default constant: optimizer.lr */
    int accumulate_size;  /* gradient accumulation (Colossal-AI's name):
                             the gradients of this many forward_backward
                             calls are summed, each loss's gradient scaled
                             by 1/accumulate_size, before an optimizer step
                             changes anything; default 1 */
    pl_schedule_kind schedule;
    /* A schedule as a definition (pleiades/schedule.h): a registered one,
     * built-in or a user's, by name with pl_schedule_find("gpipe"), or
     * any def directly. When set it replaces `schedule` (stages and
     * model_chunks still apply; v = 1 when model_chunks is 0); checked by
     * pl_engine_new. The pointee must outlive the engine. */
    const pl_schedule_def *schedule_def;
    int stages;           /* pipeline stages p (any schedule but none), each run
                             by workers of its own: p <= workers (with
                             pp > 1, one stage per rank) */
    /* Workers that serve each pipeline stage (the compute workers of the
     * runtime, dealt round-robin over the stages; the rest run only
     * optimizer updates). A stage's workers start its items in schedule
     * order, item k+1 once every task of item k has started, so with
     * several, consecutive items run at once where the data allows; each
     * worker past the first may then keep one more microbatch's
     * activations alive than the schedule's bound (1F1B: p on stage 0).
     * 0 (default): all of them, at least one per stage; 1: the
     * schedule's memory bound exactly. */
    int workers_per_stage;
    int model_chunks;     /* v, model chunks per stage (interleaved) */
    const int *layers_per_stage; /* blocks per stage part (p·v entries, in
                             model order), NULL = balanced as stage_balance
                             says; read during pl_engine_new only, not kept */
    pl_stage_balance stage_balance; /* default measured */
    size_t chunk_elems;   /* floats per chunk; 0 = searched (below) */
    /* The chunk size search when chunk_elems is 0 (Colossal-AI's
     * search_chunk_configuration, GeminiPlugin's names): candidate sizes
     * from max(min_chunk_size_m Mi, the largest parameter) up to
     * search_range_m Mi more, in steps of hidden_dim elements or else in
     * chunk_search_n_grids steps (Lightning's name); the one that wastes
     * least wins; a model smaller than min_chunk_size_m is one chunk.
     * Lightning's chunk_search_range and min_chunk_size are the same
     * sizes in elements (2^20 × these). GeminiPlugin's defaults are
     * search_range_m 32, min_chunk_size_m 32, hidden_dim 1024: at these
     * every model a CPU trains here is one chunk, which serialises the
     * optimizer update and leaves data parallelism and ZeRO-3 nothing to
     * overlap or release, so 0 (the default of each) asks for Pleiades'
     * choice: min 1 Mi (distributed runs: 1/32 of the model), up to one
     * chunk per worker (distributed: 1/32 of the model more), 16 grids
     * (distributed: steps of 1024 elements). A searched size a
     * memory budget cannot hold is halved until one fits. */
    double search_range_m;
    double min_chunk_size_m;
    int64_t hidden_dim;
    int chunk_search_n_grids;
    /* Gradient clipping by global norm (torch.nn.utils.clip_grad_norm_,
     * the plugins' names), on the optimizer step's gradients (summed over
     * accumulated batches): every gradient is multiplied by
     * min(1, max_norm / (norm + 1e-6)). 0 = off (the default). */
    float max_norm;
    float norm_type;      /* 2 (default) or INFINITY (the largest |g|) */
    bool record_tasks;    /* keep per-task timings (needs profiling) */
    /* One StarPU task per schedule item (a microbatch's forward or
     * backward on a stage; per block when tiles outnumber the workers of
     * a non-pipelined run) and kind of work (forward, input gradients,
     * weight gradients, the last per parameter chunk, and left as one
     * task per op without pipelining) instead of one task per op: StarPU
     * spends ~5-40 µs of a worker between two tasks, idle time where a
     * worker runs an item's ops back to back anyway. Results are bitwise
     * the same, and the task records (traces) still list every op
     * (pl_task_record.fused says which ran together). Not with a
     * placement policy (it moves chunks per op task) or CUDA workers.
     * Default true. */
    bool fuse_tasks;
    /* Memory placement (pleiades/placement.h). policy NULL: none, except
     * on CUDA runtimes without compute_budget_mb, where the budget is the
     * device's capacity and Gemini's default, static, is used. Stages
     * across ranks (pp > 1): each rank's budget, its policy planning
     * the steps its stage runs. */
    pl_placement_options placement;
    pl_loss_scaler_options loss_scaler; /* default off (on with fp16) */
    /* default fp32. With dp > 1 the 16-bit gradients are averaged in fp32
     * and rounded once; ZeRO shards the master weights with the states. */
    pl_precision precision;
    /* 16-bit precisions: the optimizer updates fp32 master weights and
     * writes their rounding to the 16-bit parameters (default true); false
     * updates the 16-bit parameters directly (no fp32 copy, 2 bytes less
     * per parameter, updates smaller than half a 16-bit step are lost). */
    bool master_weights;
    /* 16-bit precisions: the graph's output (pl_graph_set_output) is kept
     * in fp32 (default false: rounded to 16 bits like any activation). */
    bool force_outputs_fp32;
    /* Data parallelism over the ranks of a distributed runtime
     * (pl_runtime_options.distributed; Colossal-AI's TorchDDP and
     * LowLevelZero plugins, their names and defaults). Every rank builds
     * the same graph with the same options (pl_engine_new compares them
     * and names the first that differs) and feeds its own slice of each
     * global batch (pl_loader_set_shard); batch_size is the per-rank
     * batch. Gradients are averaged over ranks at each accumulation
     * boundary (none before it: no_sync), bucket by bucket as tasks that
     * start when a bucket's last gradient is written. */
    int dp;               /* data-parallel ranks: 1 (default) or the
                             runtime's world size (world / pp with pp) */
    int zero_stage;       /* 0: DDP, every rank updates everything (default);
                             1: each rank keeps and updates 1/dp of the
                             optimizer states, then the parameters are
                             all-gathered; 2: also gradients are
                             reduce-scattered, each rank keeping its 1/dp;
                             3: also parameters (Gemini's distributed
                             storage): a chunk is all-gathered before its
                             first use in each pass and released after its
                             last, its gradients reduce-scattered after its
                             last weight gradient (chunk by chunk, not in
                             buckets). Non-pipelined. With
                             accumulate_size > 1 whole gradients stay until
                             the boundary's backward. Parameter reads and
                             writes need pl_engine_gather_params first */
    int reduce_bucket_size_in_m; /* a bucket is consecutive chunks (in
                             backward order) of at least this many million
                             elements, or one chunk when 0; default 12 */
    bool overlap_communication; /* reductions start while the backward
                             pass still runs (default true); false: after
                             it has finished */
    bool cpu_offload;     /* ZeRO: the shard's optimizer states and update
                             stay on the host (CUDA runs; CPU-only runs
                             keep them there anyway); needs dp > 1 and
                             zero_stage 1 or 2 */
    /* Pipeline stages across ranks (HybridParallelPlugin's pp_size): 0 or
     * 1 (default) runs every stage in this process, on its own worker;
     * pp > 1 runs stage s on rank s of a distributed runtime of pp ranks
     * (stages must equal pp; one compute worker per rank is enough).
     * Activations and their gradients cross ranks as StarPU-MPI
     * transfers, each rank updates the chunks its stage uses, and a chunk
     * several stages use (a tied embedding) has their gradients summed
     * over ranks. Every rank holds every chunk: parameters of other
     * stages are stale there until pl_engine_gather_params. fp32, bf16
     * and fp16 (activations cross as 16-bit tiles), also under a
     * placement policy (each rank's budget, and its policy told only its
     * stage's steps). With dp > 1 too (HybridParallelPlugin's grid of
     * pp·dp ranks): rank r runs the stage and replica its runtime's
     * pl_runtime_options.dp_outside gives (pl_runtime_grid_stage and
     * _replica; by default replica r / pp, stage r mod pp), the
     * replica feeding its 1/dp of the global batch; a stage's dp ranks
     * average their gradients (ZeRO 0-2 among them), then a replica's
     * stages sum their shared chunks. */
    int pp;
    /* Debugging NaNs (default false): every training step waits for its
     * backward pass and, before the update, scans what the pass made in
     * the order it made it: the batch's float inputs, each op's output
     * (op order), then the gradients each op's backward wrote (its
     * inputs' and its parameters', ops in reverse order). The first inf
     * or NaN fails the step (RUNTIME_ERROR) naming the input, or the op
     * and the tensor, with the microbatch, sample and element; nothing is
     * updated and the gradients of the pass are dropped. It reads every
     * activation and gradient on the host each step (slow), and keeps a
     * placement policy from dropping activations before the scan. With
     * dynamic loss scaling (fp16) gradients are not scanned: an overflow
     * there skips the update by design. CLI: --check-finite. */
    bool check_finite;
    /* Activation recomputation (above); default none. */
    pl_recompute_options recompute;
} pl_engine_options;

pl_engine_options pl_engine_options_default(void);


typedef struct pl_step_options {
    bool forward_only;        /* no backward, no gradients */
    bool return_loss;         /* fill result->loss */
    bool return_output_label; /* fill result->output / result->labels */
} pl_step_options;

#define PL_MAX_METRICS 8

/* With dp > 1, loss, metrics and size are of the global batch (every
 * rank's slice); output and labels are this rank's local_size rows. */
typedef struct pl_step_result {
    double loss;            /* mean loss over the batch */
    int n_metrics;          /* metric tensors (accuracy, mean), creation order */
    double metrics[PL_MAX_METRICS];
    const float *output;    /* [size, numel(output)], owned by the engine,
                               valid until the next step */
    const int32_t *labels;  /* the last int32 input of the batch, likewise */
    int64_t size;           /* samples in the batch */
    int64_t local_size;     /* of which this rank's (= size unless dp > 1) */
} pl_step_result;

/* Builds the per-iteration task graph for `g` (which must outlive the
 * engine): packs parameters into chunks, registers StarPU handles and
 * initialises parameters. NULL on failure. The caller owns the engine and
 * frees it with pl_engine_free before its graph and its runtime, which it
 * uses but does not own (they refuse to be freed while it lives). */
pl_engine_t *pl_engine_new(pl_runtime_t *rt, pl_graph_t *g,
                           const pl_engine_options *options);
/* Waits for the engine's tasks and frees it (never its graph or runtime);
 * NULL is ignored, an engine already freed is refused with a message on
 * stderr. */
void pl_engine_free(pl_engine_t *e);

/* Sets the batch pre-processing callback (NULL to clear). */
void pl_engine_set_batch_process(pl_engine_t *e, pl_batch_process_fn fn,
                                 void *user_data);

/* The reference NonPipelineSchedule.forward_backward_step: forward (and,
 * unless forward_only, backward) of one batch as tasks; waits for them and
 * fills `result` as `opts` asks. Gradients are overwritten by the first
 * backward after an optimizer step and accumulated by later ones.
 * A kernel that fails (returns non-zero) fails the call that finds it:
 * this one for the forward pass; for the backward pass, which may still
 * run when this returns, the next optimizer_step or forward_backward.
 * Either way the gradients accumulated since the last update are
 * dropped (the next backward starts afresh) and no update applies them. */
pl_status pl_engine_forward_backward(pl_engine_t *e, const pl_batch *batch,
                                     const pl_step_options *opts,
                                     pl_step_result *result);
/* One optimizer update of every chunk (as tasks). With accumulate_size
 * N > 1 this is GradAccumOptimizer.step: it updates (and then zeroes the
 * gradients on the next backward) only once N backward passes have been
 * made since the last update, and otherwise does nothing; the LR schedule
 * moves only with real updates (pl_engine_steps). It first waits for the
 * backward pass: when one of its kernels failed (on any rank of a
 * distributed engine) it returns that error naming the op and kernel, and
 * no parameter, optimizer state or step count changes. */
pl_status pl_engine_optimizer_step(pl_engine_t *e);
/* forward_backward(return_loss) + optimizer_step: with accumulation, an
 * update every accumulate_size calls. result->loss is the batch's mean
 * loss, not divided by accumulate_size. A kernel failing in this step's
 * forward or backward pass fails this call, before any update. */
pl_status pl_engine_train_step(pl_engine_t *e, const pl_batch *batch,
                               pl_step_result *result);

/* The global gradient norm (norm_type) of the last optimizer update,
 * before clipping; waits for the task that computes it. Needs max_norm >
 * 0 (the norm is computed only to clip) and one update made. With loss
 * scaling, the norm of the unscaled gradients of the last update made
 * (an update skipped for an overflow computes none). */
pl_status pl_engine_grad_norm(pl_engine_t *e, double *norm);

/* Dynamic loss scaling: the scale the next update's gradients are made
 * with, and whether the last update was skipped for an overflow (false
 * before any). Waits for nothing (the state lives on the host). Needs
 * loss_scaler.enabled. */
pl_status pl_engine_loss_scale(const pl_engine_t *e, double *scale, bool *last_overflow);

/* Base learning rate for subsequent optimizer steps (the lr_scheduler
 * scales it per step). */
pl_status pl_engine_set_lr(pl_engine_t *e, float lr);
/* The learning rate the next optimizer step uses: the lr_scheduler's value
 * for step pl_engine_steps(e). 0 for a NULL engine. */
double pl_engine_lr(const pl_engine_t *e);
/* Optimizer steps taken so far. */
int64_t pl_engine_steps(const pl_engine_t *e);
/* Batches per optimizer update (the options' accumulate_size); 1 for a
 * NULL engine. */
int pl_engine_accumulate_size(const pl_engine_t *e);

/* Copy a parameter's values / gradient out of, or values into, the engine
 * (numel(param) floats, row-major). Waits for pending tasks. `capacity` is
 * the length of `out` in floats and must be at least pl_tensor_numel(param);
 * `count` is the number of `values` and must equal it (an
 * INVALID_ARGUMENT naming the parameter and both sizes otherwise). Under
 * a 16-bit precision values and gradients read widened (exactly), and
 * values written set the master weights as given and the 16-bit
 * parameter to their rounding. */
pl_status pl_engine_get_param(pl_engine_t *e, const pl_tensor_t *param,
                              float *out, size_t capacity);
pl_status pl_engine_set_param(pl_engine_t *e, const pl_tensor_t *param,
                              const float *values, size_t count);
pl_status pl_engine_get_grad(pl_engine_t *e, const pl_tensor_t *param,
                             float *out, size_t capacity);

/* The stage part (stage + chunk·p) each block of the graph is assigned
 * to now, written into parts[pl_graph_num_blocks(g)]; returns the part
 * count (1 for the non-pipelined schedule). Under the measured stage
 * balance this changes once, before the third training step. */
int pl_engine_block_parts(const pl_engine_t *e, int *parts);
/* How many of this process's StarPU workers serve pipeline stage `stage`
 * (pl_engine_options.workers_per_stage); 0 for a stage another rank runs,
 * and for every stage of the non-pipelined schedule or an out-of-range
 * stage. */
int pl_engine_stage_workers(const pl_engine_t *e, int stage);
/* The measured stage balance's timing: each block's summed kernel time
 * (forward, backward and weight-gradient tasks of every microbatch, µs;
 * on a CPU worker the kernel's CPU time on the worker's thread, which
 * other processes' time slices leave out; on a CUDA worker the task's
 * wall time) in the timed (second) training step, written into
 * us[pl_graph_num_blocks(g)] (us may be NULL); returns the block count,
 * or 0 before that step was submitted or when the engine times none
 * (non-pipelined, layers_per_stage given, PL_STAGE_BALANCE_FLOPS, one
 * block per part). Called right after the timed step, it waits for that
 * step's tasks and recuts the stages then (pl_engine_block_parts shows
 * the new cut). With stages across ranks (pp > 1) that first call after
 * the timed step is collective (every rank calls it, or none does): the
 * times are every rank's blocks', summed over ranks. */
int pl_engine_block_times(pl_engine_t *e, double *us);
/* Writes the last step's task records (record_tasks) as a Chrome Trace
 * Event JSON file (Perfetto, chrome://tracing) and/or a Paje trace (ViTE,
 * pj_dump); either path may be NULL. One track per worker named
 * "stage s / CPU k", one complete event per task with op, phase,
 * microbatch, stage and chunk as args (and ready_ts, its record's
 * ready_us on the trace's clock), flow events for activations and
 * gradients crossing stages, and memory counters. Files are written to a
 * temporary name and renamed. */
pl_status pl_engine_write_trace(pl_engine_t *e, const char *json_path,
                                const char *paje_path);

/* Nanoseconds the scheduling policy spent in push/pop so far. */
uint64_t pl_engine_sched_overhead_ns(const pl_engine_t *e);
/* Theoretical bubble fraction of the engine's schedule: its def's
 * bubble_measured with the last step's item times (pl_engine_item_times)
 * when it has one and the engine records tasks, else its bubble: 1F1B
 * (p−1)/m, interleaved (p−1)/(v·m), ZB-H1 (p−1)(F+B−W)/(m(F+B+W)); 0 when
 * non-pipelined or when a schedule_def gives no bubble function. */
double pl_engine_theoretical_bubble(const pl_engine_t *e);
/* The mean time of one F, B and W item on a stage in the last step
 * (record_tasks; waits for the step's tasks): each kind's task time
 * summed over the stages, divided by stages · chunks · microbatches. */
pl_status pl_engine_item_times(const pl_engine_t *e, pl_item_times *out);

/* ZeRO-3: gathers every parameter chunk (collective: every rank calls it,
 * in the same order as its other engine calls) and waits, so that
 * pl_engine_get_param / set_param work until the next step releases them
 * (checkpoints and pl_engine_save_safetensors' callers do it). Stages
 * across ranks (pp > 1): copies every chunk from a rank whose stage
 * updates it, so every rank reads the whole current model until the next
 * update. A no-op otherwise. */
pl_status pl_engine_gather_params(pl_engine_t *e);

/* This process's rank in a distributed engine (data parallel, or stages
 * across ranks), 0 in one process or when e is NULL: rank 0 writes the
 * files of a run. */
int pl_engine_dp_rank(const pl_engine_t *e);

/* Bytes this rank holds of each kind of model state, over all chunks
 * (parameters and gradients in 2 bytes each under a 16-bit precision). */
typedef struct pl_model_state_bytes {
    int64_t params;        /* ZeRO-3: this rank's 1/dp shards */
    int64_t grads;         /* the gradient buffers the backward pass
                              accumulates into, kept between steps (whole
                              chunks; ZeRO-2 and ZeRO-3: none, see
                              gathered_grads_peak) */
    int64_t reduced_grads; /* the averaged gradients the update reads:
                              the whole chunks' (DDP, ZeRO-1) or, ZeRO-2/3,
                              this rank's 1/dp shards, in buffers of their
                              own */
    int64_t optimizer_states; /* with ZeRO-1/2 this rank's shard only */
    int64_t master_weights;   /* fp32 copies of 16-bit parameters (0 in fp32) */
    /* ZeRO-3: the most bytes of whole parameter (gradient) chunks this rank
     * held gathered at once in the steps so far, measured as the gathers,
     * releases and reduce-scatters ran (pl_engine_gather_params's own
     * gathers not counted). ZeRO-2: the most
     * bytes of whole gradient chunks live at once (a chunk's come back
     * when the backward pass reaches its first weight gradient and go once
     * its reduce-scatter has read them). 0 otherwise. */
    int64_t gathered_params_peak;
    int64_t gathered_grads_peak;
} pl_model_state_bytes;
pl_status pl_engine_model_state_bytes(const pl_engine_t *e, pl_model_state_bytes *out);

/* The recomputation plan in force, one line per pipeline stage ("stage 0:
 * 4 layers: kept 1, recomputed 3"), into buf; false when recomputation is
 * off. Under PL_RECOMPUTE_AUTO, once the planner has chosen (after the
 * second training step), a last line "the plan: predicted +3.1 ms a step,
 * activations peak 41.0 of 45.0 MiB; ..."; before, a first line "auto:
 * every layer recomputed until the second step has been timed". */
bool pl_engine_recompute_plan(const pl_engine_t *e, char *buf, size_t size);

/* Activation memory as the tasks ran (waits for them): bytes of the
 * values of op outputs and saved tensors (every tile), and of the
 * activations' gradients, live now and the most at once since the engine
 * was built or pl_engine_reset_activation_peak. A value is live from the
 * start of the task that writes it until the engine drops it (activation
 * recomputation, a placement policy); parameters and model state are not
 * counted (pl_engine_model_state_bytes). scratch_peak: the fp32 scratch
 * the CPU workers widened 16-bit operands into, most at once (every
 * engine of the process). */
typedef struct pl_activation_bytes {
    int64_t values, values_peak;
    int64_t grads, grads_peak;
    int64_t scratch_peak;
} pl_activation_bytes;
pl_status pl_engine_activation_bytes(pl_engine_t *e, pl_activation_bytes *out);
/* Restarts the peaks from what is live now (after the first steps, to
 * measure the steady state). */
void pl_engine_reset_activation_peak(pl_engine_t *e);

/* Memory figures of the last completed iteration (zero without a
 * placement policy, but peak_compute_bytes where StarPU counts). */
pl_status pl_engine_memory(pl_engine_t *e, pl_iteration_memory *out);

/* Number of chunks the parameters were packed into, and their sizes. */
int pl_engine_num_chunks(const pl_engine_t *e);
size_t pl_engine_chunk_elems(const pl_engine_t *e, int chunk);

/* The disk tier (pl_runtime_options.offload_dir) against the placement's
 * plan, as pl_engine_new checked it (refusing a plan that does not fit):
 * need, the most bytes the plan may keep there at once (model state and
 * activations beyond the compute tier's budget, and beyond the host
 * budget on a GPU); capacity, what StarPU may use there (half of the space
 * free when the runtime started); free_bytes, the space free there now,
 * this run's own files counted as free. All 0 without a disk tier. */
typedef struct pl_offload_space {
    int64_t need, capacity, free_bytes;
} pl_offload_space;
pl_status pl_engine_offload_space(const pl_engine_t *e, pl_offload_space *out);

/* Tasks recorded since the start of the last forward_backward (record_tasks):
 * name such as "fc1.F.t0" (op, phase F/B/W/L, tile) or "opt.c0" (optimizer
 * of chunk 0), worker, start/end in µs. Waits for all submitted tasks. */
typedef struct pl_task_record {
    char name[64];
    char op[48];      /* op name, or "optimizer", "collective", "memory" */
    char phase;       /* 'F' forward, 'L' loss, 'B' input grad, 'W' weight
                         grad, 'O' optimizer, 'C' collective, 'M' memory
                         (ZeRO-3's release of a gathered chunk, ZeRO-2's
                         return of released gradients) */
    int microbatch;   /* tile; -1 for the optimizer */
    int stage, chunk; /* pipeline stage and model chunk (0 when none) */
    int worker;
    int rank;         /* the process that ran it (0 in one process) */
    double start_us, end_us;
    double ready_us;  /* when its dependencies were met and StarPU pushed
                         it to the scheduler (<= start_us): what a task
                         waited on, apart from a free worker */
    int64_t mem_used; /* bytes StarPU had allocated on the compute tier
                         when the task ended, -1 unless a memory limit
                         makes StarPU count */
    int64_t mem_offload; /* likewise on the disk tier, -1 without one */
    int64_t bytes;    /* 'C' (a collective of data parallelism): bytes of
                         the buffers it reduced or gathered; 0 otherwise */
    double wait_us;   /* 'C' over MPI: of start_us..end_us, the time its
                         barrier took: waiting for the other ranks of its
                         group to reach it (a slower rank's backward pass),
                         and on a busy core for its thread to run again and
                         see them; the rest moved the data. 0 otherwise */
    int64_t fused;    /* fuse_tasks: records with the same value >= 0 ran
                         as one StarPU task, in record order; -1: a task
                         of its own */
    int64_t start_order; /* a pipeline stage's task in its schedule order
                         (F, L, B, and W where the schedule lists them):
                         the position in which the stage's workers took
                         it, 0 first each step, shared by a fused task's
                         records; -1 for other tasks. Where a stage has
                         several workers, start times may tie or cross
                         by a few µs: this is the order the scheduler
                         enforced */
} pl_task_record;
/* The number of records, *out pointing at them (owned by the engine, valid
 * until its next step); -1 with an INVALID_ARGUMENT when `e` is NULL or was
 * built without record_tasks (a silent 0 would read as "no tasks ran"). */
int pl_engine_task_records(const pl_engine_t *e, const pl_task_record **out);
/* Every rank's records of the last step, on rank 0 (a distributed run,
 * data or pipeline parallel: a collective every rank joins): *out is a
 * malloc'ed copy the caller
 * frees, each record's rank set, times moved onto rank 0's clock (read by
 * every rank right after a barrier). Returns the count on rank 0, 0 on
 * the others; -1 on failure. In one process: a copy of its records. */
int pl_engine_gather_task_records(pl_engine_t *e, pl_task_record **out);

#ifdef __cplusplus
}
#endif

#endif /* PLEIADES_ENGINE_H */
