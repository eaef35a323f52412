/*
 * pleiades.h — the public C API of Pleiades: neural-network training as
 * StarPU task graphs.
 *
 * A model is a graph of tensors and ops. An engine turns each training
 * iteration of that graph into StarPU tasks (forward, input-gradient and
 * weight-gradient backward, loss, optimizer update) and runs them on the
 * StarPU workers. Model state is packed into chunks (contiguous StarPU
 * vector handles) that the optimizer updates as a whole.
 *
 * Usage:
 *
 *   pl_runtime_options ro = pl_runtime_options_default();
 *   pl_runtime_t *rt = pl_runtime_new(&ro);              // starts StarPU
 *   pl_graph_t *g = pl_graph_new(42);                      // seed for init
 *   int64_t in_shape[1] = {784};
 *   pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, in_shape);
 *   pl_tensor_t *y = pl_graph_input(g, "y", PL_DTYPE_I32, 0, NULL);
 *   pl_tensor_t *h = pl_relu(g, pl_linear(g, x, 1024, "fc1"));
 *   pl_tensor_t *logits = pl_linear(g, h, 10, "fc2");
 *   pl_tensor_t *loss = pl_cross_entropy(g, logits, y);
 *   pl_graph_set_loss(g, loss);
 *   pl_engine_options eo = pl_engine_options_default();
 *   eo.batch_size = 256;
 *   pl_engine_t *e = pl_engine_new(rt, g, &eo);
 *   const void *data[2] = {images, labels};
 *   pl_batch b = {.size = 256, .data = data};
 *   pl_step_result r;
 *   pl_engine_train_step(e, &b, &r);                       // r.loss
 *   pl_engine_free(e); pl_graph_free(g); pl_runtime_free(rt);
 *
 * Errors: functions return a pl_status (or NULL for constructors); the
 * message of the last failure on the calling thread is pl_last_error().
 * Thread safety: build a graph and drive an engine from one thread at a
 * time; distinct graphs and engines may be used from distinct threads.
 */
#ifndef PLEIADES_H
#define PLEIADES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PL_VERSION_MAJOR 0
#define PL_VERSION_MINOR 1
#define PL_VERSION_PATCH 0
#define PL_VERSION_STRING "0.1.0"

/* The runtime version of the library (may differ from PL_VERSION_STRING of
 * the headers an application was built with). Static string, never freed. */
const char *pl_version(void);

/* ---------------------------------------------------------------- status */

typedef enum pl_status {
    PL_STATUS_OK = 0,
    PL_STATUS_INVALID_ARGUMENT, /* NULL pointer, out-of-range value */
    PL_STATUS_SHAPE_MISMATCH,   /* shapes of an op's operands disagree */
    PL_STATUS_IO_ERROR,         /* a file could not be opened/read/written */
    PL_STATUS_FORMAT_ERROR,     /* a file is truncated or malformed */
    PL_STATUS_OUT_OF_MEMORY,
    PL_STATUS_RUNTIME_ERROR,    /* StarPU failed (init, task submission) */
    PL_STATUS_UNSUPPORTED,      /* valid request this build cannot do */
} pl_status;

/* A static, human-readable name for a status ("invalid argument"). */
const char *pl_status_string(pl_status status);

/* The message of the last error on the calling thread, e.g.
 * "pl_add: shapes [B, 10] and [B, 12] of 'res' differ". Thread-local; valid
 * until the next failing call on this thread. "" when there was none. */
const char *pl_last_error(void);

/* The status of the last failing call on the calling thread (thread-local). */
pl_status pl_last_status(void);

/* Clears the calling thread's last error. */
void pl_clear_error(void);

/* --------------------------------------------------------------- runtime */

typedef struct pl_runtime pl_runtime_t;

typedef enum pl_device {
    PL_DEVICE_CPU = 0, /* CPU workers only */
    PL_DEVICE_CUDA,    /* CUDA workers only (every op has a CUDA codelet) */
    PL_DEVICE_AUTO,    /* CUDA workers when StarPU found GPUs, plus CPUs */
} pl_device;

/* Pointers in the options: pl_runtime_new reads the strings (sched_policy,
 * offload_dir) while it runs and keeps copies where it needs them, so they
 * may be freed as soon as it returns. */
typedef struct pl_runtime_options {
    int cpu_workers;         /* StarPU CPU workers; 0 = StarPU's default */
    pl_device device;        /* default PL_DEVICE_CPU, or what the
                                environment's PLEIADES_DEVICE names */
    int cuda_workers;        /* CUDA workers (GPUs) for cuda/auto; 0 = all */
    const char *sched_policy;/* StarPU policy name; NULL = Pleiades' own
                                ("pleiades", needed by pipeline schedules) */
    bool profiling;          /* enable StarPU profiling (task timings) */
    /* Memory tiers (see "memory placement" below). The compute tier is a
     * GPU's memory on CUDA runs and main RAM on CPU-only runs. */
    int64_t compute_budget_mb; /* compute-tier budget, 0 = the whole device */
    int64_t host_budget_mb;    /* host RAM budget on CUDA runs, 0 = all */
    const char *offload_dir;   /* disk tier (StarPU's disk node), or NULL */
} pl_runtime_options;

pl_runtime_options pl_runtime_options_default(void);

/* Starts StarPU. Only one runtime may exist at a time in a process.
 * Returns NULL on failure (see pl_last_error()). */
pl_runtime_t *pl_runtime_new(const pl_runtime_options *options);
/* Waits for all tasks and shuts StarPU down. NULL is ignored. */
void pl_runtime_free(pl_runtime_t *rt);
/* Number of StarPU CPU / CUDA workers actually running. */
int pl_runtime_cpu_workers(const pl_runtime_t *rt);
int pl_runtime_cuda_workers(const pl_runtime_t *rt);
/* The most CPU workers this build's StarPU can run (its STARPU_MAXCPUS:
 * 4 in Debian's build); pl_runtime_new refuses more. */
int pl_runtime_max_cpu_workers(void);
/* Whether this build's StarPU has CUDA support at all. */
bool pl_runtime_cuda_available(void);

/* ----------------------------------------------------------------- graph */

typedef struct pl_graph pl_graph_t;   /* owns its tensors and ops */
typedef struct pl_tensor pl_tensor_t; /* owned by its graph */

typedef enum pl_dtype {
    PL_DTYPE_F32 = 0,
    PL_DTYPE_I32,
} pl_dtype;

#define PL_MAX_DIMS 4

/* A new empty graph. `seed` seeds parameter initialisation: each parameter
 * draws from its own stream derived from (seed, parameter index), so adding
 * a layer at the end never changes the initial values of earlier ones. */
pl_graph_t *pl_graph_new(uint64_t seed);
void pl_graph_free(pl_graph_t *g);

/* A per-sample input of `ndim` dims (the batch dimension is implicit and
 * comes first: shape {784} is a [B, 784] input; ndim 0 is one value per
 * sample, e.g. class labels). Inputs are fed in creation order. */
pl_tensor_t *pl_graph_input(pl_graph_t *g, const char *name, pl_dtype dtype,
                            int ndim, const int64_t *shape);

/* y = x W^T + b over the last dim of x. Creates parameters "<name>.weight"
 * [out, in] and "<name>.bias" [out], initialised like PyTorch's nn.Linear:
 * U(-1/sqrt(in), 1/sqrt(in)) for both. */
pl_tensor_t *pl_linear(pl_graph_t *g, pl_tensor_t *x, int64_t out_features,
                       const char *name);
pl_tensor_t *pl_relu(pl_graph_t *g, pl_tensor_t *x);
/* GELU, tanh approximation (PyTorch approximate='tanh'). */
pl_tensor_t *pl_gelu(pl_graph_t *g, pl_tensor_t *x);
/* a + b, same shapes (a residual connection). */
pl_tensor_t *pl_add(pl_graph_t *g, pl_tensor_t *a, pl_tensor_t *b,
                    const char *name);
/* Mean softmax cross-entropy of `logits` [..., K] against int32 `labels`
 * [...] (class indices in [0, K)); a scalar over the whole batch. */
pl_tensor_t *pl_cross_entropy(pl_graph_t *g, pl_tensor_t *logits,
                              pl_tensor_t *labels);
/* Fraction of rows whose arg-max equals the label (a metric, no gradient). */
pl_tensor_t *pl_accuracy(pl_graph_t *g, pl_tensor_t *logits,
                         pl_tensor_t *labels);
/* Mean of all elements of x over the batch (a scalar; differentiable). */
pl_tensor_t *pl_mean(pl_graph_t *g, pl_tensor_t *x);

/* --- transformer ops (see pl_gpt_build for a whole model) */

/* GPT-2's encoder: tokens int32 [T] → wte[token] + wpe[position], [T, C].
 * Creates "<name>.wte" [V, C] and "<name>.wpe" [T, C], initialised
 * N(0, 0.02). A token outside [0, V) makes the step fail with an error. */
pl_tensor_t *pl_embedding(pl_graph_t *g, pl_tensor_t *tokens, int64_t vocab,
                          int64_t channels, const char *name);
/* LayerNorm over the last dim (eps 1e-5); "<name>.weight" (ones) and
 * "<name>.bias" (zeros). */
pl_tensor_t *pl_layernorm(pl_graph_t *g, pl_tensor_t *x, const char *name);
/* Causal multi-head self-attention: qkv [T, 3C] (queries | keys | values,
 * heads contiguous) → [T, C], softmax(q·kᵀ/√(C/heads)) · v per head.
 * C % heads must be 0. */
pl_tensor_t *pl_attention(pl_graph_t *g, pl_tensor_t *qkv, int64_t heads,
                          const char *name);
/* y = x · weightᵀ with an existing parameter [OC, C] and no bias: a
 * language-model head tied to the token embedding. */
pl_tensor_t *pl_linear_tied(pl_graph_t *g, pl_tensor_t *x, pl_tensor_t *weight,
                            const char *name);

/* Parameter initialisation override (before pl_engine_new). */
typedef enum pl_init {
    PL_INIT_UNIFORM = 0, /* U(-scale, scale) */
    PL_INIT_NORMAL,      /* N(0, scale²) */
    PL_INIT_ZEROS,
    PL_INIT_ONES,
} pl_init;
pl_status pl_param_set_init(pl_tensor_t *param, pl_init init, float scale);

/* Blocks: ops created after pl_graph_begin_block belong to a new block (a
 * unit the pipeline schedules cut into stages, e.g. one transformer
 * layer). Returns the block index. Ops before the first call are block 0. */
int pl_graph_begin_block(pl_graph_t *g, const char *name);
int pl_graph_num_blocks(const pl_graph_t *g);

/* A GPT-2 style model: embedding, L pre-LayerNorm blocks (ln1 → qkv linear
 * → attention → projection → residual; ln2 → 4C linear → GELU → C linear →
 * residual), final LayerNorm, LM head tied to wte, cross-entropy. Linear
 * weights N(0, 0.02) (projections 0.02/√(2L)), biases zero (GPT-2/nanoGPT). */
typedef struct pl_gpt_config {
    int64_t vocab;    /* V */
    int64_t context;  /* T */
    int64_t channels; /* C */
    int64_t layers;   /* L */
    int64_t heads;    /* NH; C % NH == 0 */
} pl_gpt_config;

typedef struct pl_gpt_model {
    pl_tensor_t *tokens;  /* int32 input [T] */
    pl_tensor_t *targets; /* int32 input [T] (next tokens) */
    pl_tensor_t *logits;  /* [T, V], the graph's output */
    pl_tensor_t *loss;    /* the graph's loss */
} pl_gpt_model;

/* Builds the model into an empty graph, sets loss and output. Blocks:
 * embedding, one per layer, then the head. */
pl_status pl_gpt_build(pl_graph_t *g, const pl_gpt_config *cfg,
                       pl_gpt_model *model);

/* The scalar the engine minimises (cross_entropy or mean output). */
pl_status pl_graph_set_loss(pl_graph_t *g, pl_tensor_t *loss);
/* The tensor returned by steps that ask for return_output_label. */
pl_status pl_graph_set_output(pl_graph_t *g, pl_tensor_t *output);

/* Introspection. Strings are owned by the graph. */
const char *pl_tensor_name(const pl_tensor_t *t);
/* Writes the shape (batch dim excluded for inputs/activations) into
 * shape[PL_MAX_DIMS]; returns ndim. */
int pl_tensor_shape(const pl_tensor_t *t, int64_t *shape);
int64_t pl_tensor_numel(const pl_tensor_t *t); /* per sample for activations */
int pl_graph_num_params(const pl_graph_t *g);
pl_tensor_t *pl_graph_param(const pl_graph_t *g, int index);
pl_tensor_t *pl_graph_find(const pl_graph_t *g, const char *name);
int64_t pl_graph_param_count(const pl_graph_t *g); /* total parameters */

/* ---------------------------------------------------------------- engine */

typedef struct pl_engine pl_engine_t;

typedef enum pl_optimizer_kind {
    PL_OPTIMIZER_SGD = 0,
    PL_OPTIMIZER_ADAMW,
} pl_optimizer_kind;

typedef enum pl_schedule_kind {
    PL_SCHEDULE_NONE = 0,    /* non-pipelined: forward all, then backward */
    PL_SCHEDULE_1F1B,        /* warm-up forwards, 1 forward / 1 backward */
    PL_SCHEDULE_INTERLEAVED, /* 1F1B over v model chunks per stage */
} pl_schedule_kind;

typedef struct pl_optimizer_options {
    pl_optimizer_kind kind;
    float lr;           /* default 1e-3 */
    float momentum;     /* SGD: default 0 */
    float weight_decay; /* SGD: L2 added to the gradient (default 0);
                           AdamW: decoupled decay (default 0.01) */
    float beta1, beta2; /* AdamW: 0.9, 0.999 */
    float eps;          /* AdamW: 1e-8 */
} pl_optimizer_options;

/* ------------------------------------------------------ memory placement
 *
 * With a placement policy, every chunk of model state is a unit the policy
 * places: chunk k's values and gradients are unit 2k (model data), its
 * optimizer states unit 2k+1. An iteration is a sequence of operator steps
 * (each op's forward, each op's backward in reverse, each chunk's optimizer
 * update), and each step needs some units on the compute tier. Before a
 * step runs, the engine tells the policy which units it needs; when they
 * do not fit in the budget the policy chooses victims (written back to the
 * host/disk tier through StarPU), and it may prefetch units for later
 * steps. StarPU's memory accounting enforces the budget itself; the policy
 * decides what goes first and what comes early. */

typedef enum pl_tier {
    PL_TIER_COMPUTE = 0, /* GPU memory, or RAM on CPU-only runs */
    PL_TIER_HOST,        /* host RAM (its own tier on CUDA runs) */
    PL_TIER_DISK,        /* --offload-dir */
} pl_tier;

typedef struct pl_memory_stats {
    int64_t capacity;  /* compute-tier budget in bytes */
    int64_t used;      /* bytes StarPU has allocated on it now */
    int64_t model;     /* bytes of units the engine counts as resident */
    int64_t non_model; /* non-model bytes recorded for this step in the
                          warm-up iteration, -1 during the warm-up */
    int iteration;     /* 0 is the warm-up */
} pl_memory_stats;

typedef struct pl_placement_options pl_placement_options;

typedef struct pl_placement_info {
    int n_units;
    const int64_t *unit_bytes;
    const bool *unit_is_optim;   /* optimizer states (odd units) */
    int n_steps;                 /* steps of one iteration, in order */
    const int *step_offset;      /* step s needs units */
    const int *step_units;       /*   step_units[step_offset[s] .. step_offset[s+1]) */
    int64_t capacity;            /* compute-tier budget in bytes */
    const pl_placement_options *options;
} pl_placement_info;

/* A placement policy: a struct of callbacks. The built-in ones
 * (pl_placement_static(), pl_placement_auto()) are written against this
 * interface too. `resident[u]` is the engine's view of which units are on
 * the compute tier. Callbacks run on StarPU's threads, one at a time. */
typedef struct pl_placement_policy {
    const char *name;
    /* Returns the policy's state (NULL is allowed). */
    void *(*init)(const pl_placement_info *info);
    /* Step `step` is about to run and needs `needed`. */
    void (*before_step)(void *state, int step, const int *needed, int n_needed,
                        const bool *resident, const pl_memory_stats *stats);
    /* At least `bytes` must leave the compute tier for step `step`: write
     * victims (resident units the step does not need) into victims[];
     * return how many. */
    int (*choose_victims)(void *state, int step, int64_t bytes,
                          const bool *resident, int *victims);
    /* Units to bring in ahead of use within `budget` bytes; return count. */
    int (*prefetch)(void *state, int step, int64_t budget, const bool *resident,
                    int *units);
    /* Where the optimizer update of chunk `chunk` runs. */
    pl_tier (*where_to_update)(void *state, int chunk);
    void (*free)(void *state);
} pl_placement_policy;

/* Colossal-AI's GeminiPlugin knobs, with its names and defaults. */
struct pl_placement_options {
    const pl_placement_policy *policy; /* NULL: no placement (default).
                                          Kept by the engine: must outlive
                                          it (the built-ins are static) */
    float shard_param_frac;            /* static: 1.0 */
    float offload_optim_frac;          /* static: 0.0 */
    float offload_param_frac;          /* static: 0.0 (needs the two above at 1.0) */
    float warmup_non_model_data_ratio; /* auto: 0.8 */
    float steady_cuda_cap_ratio;       /* auto: 0.9 */
    int max_prefetch;                  /* auto: 0 */
    float gpu_margin_mem_ratio;        /* auto: 0.0 */
};

/* static: the first shard_param_frac of parameter-chunk memory may leave
 * the compute tier between uses, the first offload_optim_frac of chunk
 * memory keeps its optimizer states (and runs its update) on the host.
 * auto: Belady's rule — evict the units whose next use is furthest away,
 * within capacity·steady_cuda_cap_ratio − non_model[step], prefetching up
 * to max_prefetch upcoming units. "cpu" and "cuda" are the Lightning
 * presets: static with everything offloaded / nothing offloaded. */
const pl_placement_policy *pl_placement_static(void);
const pl_placement_policy *pl_placement_auto(void);
/* A built-in by name: "static", "auto", "cpu", "cuda"; NULL if unknown,
 * with an INVALID_ARGUMENT naming the known ones. The presets also adjust
 * `options`' fractions (when `options` is not NULL). */
const pl_placement_policy *pl_placement_by_name(const char *name,
                                                pl_placement_options *options);

/* Memory figures of the last iteration. */
typedef struct pl_iteration_memory {
    int64_t peak_compute_bytes; /* StarPU's count, sampled per task */
    int64_t peak_host_bytes;    /* host RAM (CUDA) or disk (CPU-only) */
    int64_t bytes_moved;        /* between tiers, from StarPU's bus counters */
    int64_t evictions;          /* units the policy sent away */
    int64_t prefetch_hits;      /* needed units already brought in early */
} pl_iteration_memory;

typedef struct pl_engine_options {
    int batch_size;       /* largest batch fed to a step (required) */
    int tiles;            /* batch tiles (= microbatches) per step; 0 = one
                             per CPU worker (tiles are what workers run in
                             parallel; pipelines need at least p) */
    pl_optimizer_options optimizer;
    pl_schedule_kind schedule;
    int stages;           /* pipeline stages p (1F1B/interleaved), each run
                             by its own CPU worker: p <= workers */
    int model_chunks;     /* v, model chunks per stage (interleaved) */
    const int *layers_per_stage; /* blocks per stage part (p·v entries, in
                             model order), NULL = balanced by FLOPs; read
                             during pl_engine_new only, not kept */
    size_t chunk_elems;   /* floats per chunk; 0 = searched: the least-waste
                             size from max(1 Mi, largest parameter) up to
                             1 Mi more (Colossal-AI's chunk search) */
    bool record_tasks;    /* keep per-task timings (needs profiling) */
    pl_placement_options placement;
} pl_engine_options;

pl_engine_options pl_engine_options_default(void);

/* A batch: one pointer per graph input, in input creation order; input i
 * holds size * numel(i) values of its dtype (float or int32). The step
 * copies them before it returns; nothing is kept. */
typedef struct pl_batch {
    int64_t size;
    const void **data;
} pl_batch;

/* Called on every batch before it is fed (the reference's
 * batch_data_process_func); may rewrite the pointed-to data in place. */
typedef void (*pl_batch_process_fn)(pl_batch *batch, void *user_data);

typedef struct pl_step_options {
    bool forward_only;        /* no backward, no gradients */
    bool return_loss;         /* fill result->loss */
    bool return_output_label; /* fill result->output / result->labels */
} pl_step_options;

#define PL_MAX_METRICS 8

typedef struct pl_step_result {
    double loss;            /* mean loss over the batch */
    int n_metrics;          /* metric tensors (accuracy, mean), creation order */
    double metrics[PL_MAX_METRICS];
    const float *output;    /* [size, numel(output)], owned by the engine,
                               valid until the next step */
    const int32_t *labels;  /* the last int32 input of the batch, likewise */
    int64_t size;           /* samples in the batch */
} pl_step_result;

/* Builds the per-iteration task graph for `g` (which must outlive the
 * engine): packs parameters into chunks, registers StarPU handles and
 * initialises parameters. NULL on failure. */
pl_engine_t *pl_engine_new(pl_runtime_t *rt, pl_graph_t *g,
                           const pl_engine_options *options);
void pl_engine_free(pl_engine_t *e);

/* Sets the batch pre-processing callback (NULL to clear). */
void pl_engine_set_batch_process(pl_engine_t *e, pl_batch_process_fn fn,
                                 void *user_data);

/* The reference NonPipelineSchedule.forward_backward_step: forward (and,
 * unless forward_only, backward) of one batch as tasks; waits for them and
 * fills `result` as `opts` asks. Gradients are overwritten by the first
 * backward after an optimizer step and accumulated by later ones. */
pl_status pl_engine_forward_backward(pl_engine_t *e, const pl_batch *batch,
                                     const pl_step_options *opts,
                                     pl_step_result *result);
/* One optimizer update of every chunk (as tasks). */
pl_status pl_engine_optimizer_step(pl_engine_t *e);
/* forward_backward(return_loss) + optimizer_step. */
pl_status pl_engine_train_step(pl_engine_t *e, const pl_batch *batch,
                               pl_step_result *result);

/* Learning rate for subsequent optimizer steps. */
pl_status pl_engine_set_lr(pl_engine_t *e, float lr);
/* Optimizer steps taken so far. */
int64_t pl_engine_steps(const pl_engine_t *e);

/* Copy a parameter's values / gradient out of, or values into, the engine
 * (numel(param) floats, row-major). Waits for pending tasks. `capacity` is
 * the length of `out` in floats and must be at least pl_tensor_numel(param);
 * `count` is the number of `values` and must equal it (an
 * INVALID_ARGUMENT naming the parameter and both sizes otherwise). */
pl_status pl_engine_get_param(pl_engine_t *e, const pl_tensor_t *param,
                              float *out, size_t capacity);
pl_status pl_engine_set_param(pl_engine_t *e, const pl_tensor_t *param,
                              const float *values, size_t count);
pl_status pl_engine_get_grad(pl_engine_t *e, const pl_tensor_t *param,
                             float *out, size_t capacity);

/* The stage part (stage + chunk·p) each block of the graph was assigned
 * to, written into parts[pl_graph_num_blocks(g)]; returns the part count
 * (1 for the non-pipelined schedule). */
int pl_engine_block_parts(const pl_engine_t *e, int *parts);
/* Writes the last step's task records (record_tasks) as a Chrome Trace
 * Event JSON file (Perfetto, chrome://tracing) and/or a Paje trace (ViTE,
 * pj_dump); either path may be NULL. One track per worker named
 * "stage s / CPU k", one complete event per task with op, phase,
 * microbatch, stage and chunk as args, flow events for activations and
 * gradients crossing stages, and memory counters. Files are written to a
 * temporary name and renamed. */
pl_status pl_engine_write_trace(pl_engine_t *e, const char *json_path,
                                const char *paje_path);

/* Nanoseconds the scheduling policy spent in push/pop so far. */
uint64_t pl_engine_sched_overhead_ns(const pl_engine_t *e);
/* Theoretical bubble fraction of the engine's schedule: 1F1B (p−1)/m,
 * interleaved (p−1)/(v·m), 0 when non-pipelined. */
double pl_engine_theoretical_bubble(const pl_engine_t *e);

/* Memory figures of the last completed iteration (zero without a
 * placement policy, but peak_compute_bytes where StarPU counts). */
pl_status pl_engine_memory(pl_engine_t *e, pl_iteration_memory *out);

/* Number of chunks the parameters were packed into, and their sizes. */
int pl_engine_num_chunks(const pl_engine_t *e);
size_t pl_engine_chunk_elems(const pl_engine_t *e, int chunk);

/* Tasks recorded since the start of the last forward_backward (record_tasks):
 * name such as "fc1.F.t0" (op, phase F/B/W/L, tile) or "opt.c0" (optimizer
 * of chunk 0), worker, start/end in µs. Waits for all submitted tasks. */
typedef struct pl_task_record {
    char name[64];
    char op[48];      /* op name, or "optimizer" */
    char phase;       /* 'F' forward, 'L' loss, 'B' input grad, 'W' weight
                         grad, 'O' optimizer */
    int microbatch;   /* tile; -1 for the optimizer */
    int stage, chunk; /* pipeline stage and model chunk (0 when none) */
    int worker;
    double start_us, end_us;
    int64_t mem_used; /* bytes StarPU had allocated on the compute tier
                         when the task ended, -1 unless a memory limit
                         makes StarPU count */
    int64_t mem_offload; /* likewise on the disk tier, -1 without one */
} pl_task_record;
/* The number of records, *out pointing at them (owned by the engine, valid
 * until its next step); -1 with an INVALID_ARGUMENT when `e` is NULL or was
 * built without record_tasks (a silent 0 would read as "no tasks ran"). */
int pl_engine_task_records(const pl_engine_t *e, const pl_task_record **out);

/* ------------------------------------------------------------------ data */

typedef struct pl_dataset pl_dataset_t;

/* Fashion-MNIST from the IDX files in `dir` (train-images-idx3-ubyte.gz,
 * train-labels-idx1-ubyte.gz, t10k-...), as shipped by Debian's
 * dataset-fashion-mnist in /usr/share/datasets/fashion-mnist. Images become
 * floats normalised with the dataset's mean 0.2860 and std 0.3530; labels
 * int32. A missing, truncated or malformed file gives NULL and an error
 * naming the file and what is wrong. */
pl_dataset_t *pl_dataset_fashion_mnist(const char *dir, bool train);
void pl_dataset_free(pl_dataset_t *ds);
int64_t pl_dataset_size(const pl_dataset_t *ds);
/* Per-sample element count of the features (784) and number of classes. */
int64_t pl_dataset_features(const pl_dataset_t *ds);

typedef struct pl_loader pl_loader_t;

/* Batches of `batch_size`, shuffled per epoch with a permutation derived
 * from (seed, epoch) when `shuffle`; an incomplete last batch is dropped
 * when `drop_last`. The dataset must outlive the loader. */
pl_loader_t *pl_loader_new(const pl_dataset_t *ds, int64_t batch_size,
                           bool shuffle, bool drop_last, uint64_t seed);
void pl_loader_free(pl_loader_t *l);
/* Starts epoch `epoch` (reshuffles). */
void pl_loader_start_epoch(pl_loader_t *l, int64_t epoch);
/* Next batch of the epoch: batch->data[0] features, [1] labels, pointing
 * into loader-owned memory valid until the next call. false at the end. */
bool pl_loader_next(pl_loader_t *l, pl_batch *batch);
int64_t pl_loader_batches_per_epoch(const pl_loader_t *l);

/* Byte-level text (V = 256) from a file, or from every regular file of a
 * directory (sorted by name; symlinks and fortune's *.dat indexes skipped).
 * The first 90% of the bytes are the training split, the last 10% the
 * validation split. Empty or unreadable input gives NULL and an error
 * naming the path. pl_dataset_size is the split's length in bytes. */
pl_dataset_t *pl_dataset_text(const char *path, bool train);

/* Fills tokens[B*T] and targets[B*T] (targets = tokens shifted by one) with
 * B windows of T+1 bytes at offsets drawn from (seed, index): the same
 * arguments give the same batch on every machine. */
pl_status pl_text_batch(const pl_dataset_t *ds, int64_t B, int64_t T,
                        uint64_t seed, int64_t index, int32_t *tokens,
                        int32_t *targets);

/* ------------------------------------------------------------ checkpoints */

/* Writes every parameter (F32, named and shaped as in the graph) to a
 * safetensors file, with optional string metadata. The file is written to
 * a temporary name and renamed, so a failure never leaves a partial file. */
pl_status pl_engine_save_safetensors(pl_engine_t *e, const char *path,
                                     const char *const *meta_keys,
                                     const char *const *meta_values, int n_meta);
/* Loads every parameter of the engine's graph from a safetensors file by
 * name; a missing tensor, wrong dtype or shape is an error naming it, and
 * then no parameter is changed. */
pl_status pl_engine_load_safetensors(pl_engine_t *e, const char *path);
/* Reads one metadata value of a safetensors file into value[size]. */
pl_status pl_safetensors_metadata(const char *path, const char *key,
                                  char *value, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* PLEIADES_H */
