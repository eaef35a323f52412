/* The flags of `pleiades train` that say how a model runs rather than
 * what it is: precision, accumulation, clipping, loss scaling, the LR
 * schedule, data parallelism, the device, the pipeline, traces and memory
 * placement. One row each (cli/flags.h), landing in pl_engine_options or
 * pl_runtime_options, or in cli_exec_options for the few the library does
 * not take; their cross-checks are cli/exec_options.c's. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "args.h"
#include "common.h"
#include "exec_options.h"
#include "lr_options.h"

#define EXEC(member) CLI_FIELD(CLI_DEST_EXEC, cli_exec_options, member)

#define MAX_BUDGET_MB (INT64_C(1) << 30) /* 1 PiB: a typo guard */

void cli_exec_defaults(cli_exec_options *x) {
    memset(x, 0, sizeof *x);
    x->runtime = pl_runtime_options_default(); /* the device: PLEIADES_DEVICE */
    x->engine = pl_engine_options_default();
    /* The CLI's own: once a schedule is given, 2 stages (and 2 chunks
     * interleaved; cli_exec_finish clears both without one); --pp 1, one
     * process (the library takes 0 for it too; the CLI has always said 1). */
    x->engine.stages = 2;
    x->engine.model_chunks = 2;
    x->engine.pp = 1;
    /* The defaults of --momentum and --weight-decay follow --optimizer
     * (cli/train_flags.c). */
}

/* ------------------------------------------------------ custom values */

/* --schedule and --placement take the names of the library's registries
 * (pleiades/schedule.h, placement.h), listed from there in usage and
 * messages: a built-in added to a registry needs no edit here. */
static const char *schedule_at(int i) { return pl_schedule_at(i)->name; }
static const char *placement_at(int i) { return pl_placement_at(i)->name; }

/* The schedules after "none", the policies, ", "-separated with `last`
 * before the final one. */
static const char *schedule_names(char *buf, size_t size, const char *last) {
    return cli_join_names(buf, size, "none", pl_schedule_count(), schedule_at, last);
}

static const char *placement_names(char *buf, size_t size, const char *last) {
    return cli_join_names(buf, size, NULL, pl_placement_count(), placement_at, last);
}

/* --schedule: "none" or a registered schedule, which reaches the engine
 * as its def. engine.schedule only picks the CLI's defaults:
 * interleaved's (--chunks V, microbatches a multiple of P), or else
 * 1F1B's (one chunk, 2P microbatches), which every other schedule takes. */
static bool parse_schedule(cli_flags *f, const cli_flag *row, void *field, const char *flag,
                           const char *arg) {
    (void)row;
    pl_engine_options *e = f->dest[CLI_DEST_ENGINE];
    const pl_schedule_def **def = field;
    e->schedule = PL_SCHEDULE_NONE;
    *def = NULL;
    if (strcmp(arg, "none") == 0) return true;
    *def = pl_schedule_find(arg);
    if (!*def) {
        char names[512];
        cli_error("%s: expected one of %s, got '%s'", flag,
                  schedule_names(names, sizeof names, ", "), arg);
        return false;
    }
    e->schedule = *def == &pl_schedule_interleaved ? PL_SCHEDULE_INTERLEAVED : PL_SCHEDULE_1F1B;
    return true;
}

/* --placement: a registered policy (resolved, with what --budget-mb
 * implies and the presets' fractions, by cli_exec_finish). */
static bool parse_placement(cli_flags *f, const cli_flag *row, void *field, const char *flag,
                            const char *arg) {
    (void)f, (void)row;
    const pl_placement_policy *policy = pl_placement_find(arg);
    if (!policy) {
        char names[512];
        cli_error("%s: expected one of %s, got '%s'", flag,
                  placement_names(names, sizeof names, ", "), arg);
        return false;
    }
    *(const pl_placement_policy **)field = policy;
    return true;
}

/* --chunk-mb: MiB of floats, up to 16 GiB per chunk (a typo guard), into
 * a count of floats. */
static bool parse_chunk_mb(cli_flags *f, const cli_flag *row, void *field, const char *flag,
                           const char *arg) {
    (void)f, (void)row;
    static const cli_real_range CHUNK_MB = {0, 16384, true, false};
    float mb;
    if (!cli_parse_real(flag, arg, CHUNK_MB, &mb)) return false;
    double elems = floor((double)mb * 1048576.0 / sizeof(float));
    if (elems < 1) {
        cli_error("%s: %s MiB is less than one float", flag, arg);
        return false;
    }
    *(size_t *)field = (size_t)elems;
    return true;
}

static void schedule_help(char *buf, size_t size) {
    char names[1024];
    snprintf(buf, size, "%s (default none)", schedule_names(names, sizeof names, " or "));
}

static void placement_help(char *buf, size_t size) {
    char names[1024];
    snprintf(buf, size,
             "%s; needs --budget-mb (static: fractions below; auto: Belady, evicting what is "
             "needed furthest ahead, with prefetch; cpu/cuda: Lightning's presets, static "
             "with all / nothing offloaded; lru: least recently used first, a baseline that "
             "does not look ahead)",
             placement_names(names, sizeof names, " or "));
}

/* ------------------------------------------------------------- table */

static const cli_choice ON_OFF[] = {{"on", 1, NULL}, {"off", 0, NULL}, {NULL, 0, NULL}};

static const cli_flag ROWS[] = {
    {.kind = CLI_SECTION, .help = "Mixed precision (Colossal-AI's names):"},
    {"precision", "fp32|fp16|bf16", CLI_CHOICE, CLI_ENGINE(precision),
     .choices = (const cli_choice[]){{"fp32", PL_PRECISION_FP32, NULL},
                                     {"fp16", PL_PRECISION_FP16, NULL},
                                     {"bf16", PL_PRECISION_BF16, NULL},
                                     {NULL, 0, NULL}},
     .help = "store parameters, gradients and activations in 16 bits (kernels accumulate in "
             "fp32; in bf16, linear layers and attention multiply bf16 on AVX512-BF16 CPUs; "
             "optimizer states stay fp32); fp16 turns on --loss-scale dynamic (default "
             "{default})"},
    {"master-weights", "on|off", CLI_CHOICE, CLI_ENGINE(master_weights), .choices = ON_OFF,
     .help = "16-bit: update fp32 master weights (default {default})"},
    {"force-outputs-fp32", "on|off", CLI_CHOICE, CLI_ENGINE(force_outputs_fp32),
     .choices = ON_OFF,
     .help = "16-bit: keep the model's output (logits) in fp32 (default {default})"},

    {.kind = CLI_SECTION, .help = "Gradient accumulation:"},
    {"accumulate", "N", CLI_INT, CLI_ENGINE(accumulate_size), .min = 1, .max = 1 << 20,
     .help = "batches whose gradients are summed (each loss / N) per optimizer update, "
             "{range} (default {default}); mlp: an epoch's last len % N batches are skipped"},

    {.kind = CLI_SECTION, .help = "Gradient clipping:"},
    {"max-norm", "X", CLI_REAL, CLI_ENGINE(max_norm), .range = {0, 1e9, false, false},
     .help = "clip the gradients of each update to global norm X (torch clip_grad_norm_; "
             "default 0 = off); the pre-clip norm goes into the metrics as "
             "grad_norm"},
    {"norm-type", "2|inf", CLI_CHOICE, CLI_ENGINE(norm_type),
     .choices = (const cli_choice[]){{"2", 2, NULL}, {"inf", INFINITY, NULL}, {NULL, 0, NULL}},
     .help = "the norm (default {default})"},

    {.kind = CLI_SECTION,
     .help = "Non-finite values (a run stops at a NaN/inf loss, or gradient norm with\n"
             "--max-norm, either way):"},
    {"check-finite", NULL, CLI_SWITCH, CLI_ENGINE(check_finite),
     .help = "before each update, scan the step's inputs, op outputs and gradients and stop "
             "at the first inf/NaN, naming the input or op and the element (slow: for "
             "debugging)"},

    {.kind = CLI_SECTION, .help = "Loss scaling (Colossal-AI's DynamicGradScaler):"},
    {"loss-scale", "dynamic", CLI_CHOICE, CLI_ENGINE(loss_scaler.enabled),
     .choices = (const cli_choice[]){{"dynamic", 1, NULL}, {NULL, 0, NULL}},
     .help = "scale the loss, skip updates whose gradients overflow (inf/NaN); loss_scale and "
             "overflow go into the metrics"},
    /* The scales: the seed is a float (engine.h: <= 2^127). */
    {"initial-scale", "X", CLI_REAL, CLI_ENGINE(loss_scaler.initial_scale),
     .range = {0, 0x1p127, true, false}, .help = "first scale (default {default})"},
    {"min-scale", "X", CLI_REAL, CLI_ENGINE(loss_scaler.min_scale),
     .range = {0, 0x1p127, true, false}, .help = "lowest scale (default {default})"},
    {"max-scale", "X", CLI_REAL, CLI_ENGINE(loss_scaler.max_scale),
     .range = {0, 0x1p127, true, false}, .help = "highest scale (default 4294967296)"},
    {"growth-factor", "X", CLI_REAL, CLI_ENGINE(loss_scaler.growth_factor),
     .range = {1, 1e9, true, false},
     .help = "scale *= X after --growth-interval clean updates (default {default})"},
    {"backoff-factor", "X", CLI_REAL, CLI_ENGINE(loss_scaler.backoff_factor),
     .range = {0, 1, true, true},
     .help = "scale *= X on overflow once --hysteresis overflows have been seen (default "
             "{default})"},
    {"growth-interval", "N", CLI_INT, CLI_ENGINE(loss_scaler.growth_interval), .min = 1,
     .max = INT32_MAX, .help = "clean updates per growth (default {default})"},
    {"hysteresis", "N", CLI_INT, CLI_ENGINE(loss_scaler.hysteresis), .min = 1,
     .max = INT32_MAX, .help = "overflows before backing off (default {default})"},

    {.kind = CLI_SECTION,
     .help = "Learning-rate schedule (Colossal-AI's schedulers, stepped per optimizer step):"},
    {"lr-schedule", "NAME", CLI_CUSTOM, CLI_ENGINE(lr_scheduler), .parse = cli_lr_parse_schedule,
     .help = "constant (default), linear (LinearWarmupLR), cosine (CosineAnnealingWarmupLR), "
             "step (StepLR), multistep (MultiStepLR), poly (PolynomialWarmupLR), onecycle "
             "(OneCycleLR, --lr is max_lr; cycles beta1/momentum)"},
    {"warmup-steps", "N", CLI_INT, CLI_ENGINE(lr_scheduler.warmup_steps), .min = 0,
     .max = INT32_MAX, .help = "linear, cosine, poly: warm-up steps (default {default})"},
    {"total-steps", "N", CLI_INT, CLI_ENGINE(lr_scheduler.total_steps), .min = 1,
     .max = INT32_MAX, .help = "the schedule's length (default: the run's steps)"},
    {"eta-min", "X", CLI_REAL, CLI_ENGINE(lr_scheduler.eta_min),
     .range = {0, INFINITY, false, false}, .help = "cosine: final LR (default {default})"},
    {"step-size", "N", CLI_INT, CLI_ENGINE(lr_scheduler.step_size), .min = 1,
     .max = INT32_MAX, .help = "step: x --gamma every N steps (default 1)"},
    {"gamma", "X", CLI_REAL, CLI_ENGINE(lr_scheduler.gamma), .range = {0, 1, true, false},
     .help = "step, multistep: the factor, {range} (default 0.1)"},
    {"milestones", "a,b,..", CLI_INT_LIST, CLI_ENGINE(lr_scheduler.milestones), .min = 1,
     .max = INT32_MAX, .capacity = PL_LR_MAX_MILESTONES,
     .count_offset = offsetof(pl_engine_options, lr_scheduler.n_milestones),
     .help = "multistep: x --gamma at each of these steps"},
    {"end-lr", "X", CLI_REAL, CLI_ENGINE(lr_scheduler.end_lr),
     .range = {0, INFINITY, false, false}, .help = "poly: final LR (default 1e-4)"},
    {"power", "X", CLI_REAL, CLI_ENGINE(lr_scheduler.power),
     .range = {0, INFINITY, true, false}, .help = "poly: power (default 1)"},
    {"pct-start", "X", CLI_REAL, CLI_ENGINE(lr_scheduler.pct_start),
     .range = {0, 1, true, true},
     .help = "onecycle: share of steps spent rising, {range} (default 0.3)"},

    {.kind = CLI_SECTION,
     .help = "Data parallelism (each rank a process: mpirun -np N pleiades train --dp N):"},
    {"dp", "N", CLI_INT, CLI_ENGINE(dp), .min = 1, .max = 65536,
     .help = "ranks; must equal mpirun's -np (default {default}). Each rank trains on its 1/N "
             "of every --batch-size batch (the global batch, which N must divide); gradients "
             "are averaged over ranks. Only rank 0 prints and writes files (metrics, "
             "checkpoints, TensorBoard)"},
    {"zero-stage", "S", CLI_INT, CLI_ENGINE(zero_stage), .min = 0, .max = 3,
     .help = "0: DDP (default); 1: optimizer states sharded over ranks; 2: the averaged "
             "gradients too; 3: the parameters too, each chunk gathered around its uses "
             "(Gemini's distributed storage; no pipeline)"},
    {"reduce-bucket-size-in-m", "N", CLI_INT, CLI_ENGINE(reduce_bucket_size_in_m), .min = 0,
     .max = 65536,
     .help = "gradients reduced in buckets of at least N million elements of chunks (default "
             "{default}; 0: a chunk)"},
    {"overlap-communication", "on|off", CLI_CHOICE, CLI_ENGINE(overlap_communication),
     .choices = ON_OFF,
     .help = "reduce while the backward pass runs (default {default})"},
    {"cpu-offload", "on|off", CLI_CHOICE, CLI_ENGINE(cpu_offload), .choices = ON_OFF,
     .help = "ZeRO: the shard's optimizer states and update on the host (CUDA runs; default "
             "{default})"},
    {"dp-outside", "on|off", CLI_CHOICE, CLI_RUNTIME(dp_outside), .choices = ON_OFF,
     .help = "the rank order of a --dp D x --pp P grid: on, data-parallel groups outermost "
             "(Colossal-AI's HybridParallelPlugin dp_outside; rank = replica x P + stage), or "
             "off (rank = stage x D + replica); the start-up line prints the map (default "
             "{default})"},
    {"mpi-progress", "MODE", CLI_CHOICE, CLI_RUNTIME(mpi_progress),
     .choices = (const cli_choice[]){{"auto", PL_MPI_PROGRESS_AUTO, NULL},
                                     {"thread", PL_MPI_PROGRESS_THREAD, NULL},
                                     {"worker", PL_MPI_PROGRESS_WORKER, NULL},
                                     {NULL, 0, NULL}},
     .help = "who polls MPI for StarPU-MPI: worker (its thread runs the first compute worker "
             "between polls: one thread per core), thread (a thread of its own) or auto "
             "(default: worker on CPU runs, else thread)"},
    /* Seconds, up to a year (a typo guard). */
    {"collective-timeout", "S", CLI_REAL, CLI_RUNTIME(collective_timeout_s),
     .range = {0, 31536000, false, false},
     .help = "a rank waiting in one collective (a gradient reduction, a start-up check) "
             "longer than S seconds asks the ranks it waits for: any that do not answer "
             "(stopped, hung) or have made no progress for S/2 are named with the collective "
             "and the job ends, status 1; ranks still working are waited for. Per wait, not "
             "per step (default {default}; 0 = off)"},

    {.kind = CLI_SECTION, .help = "Device:"},
    {"device", "NAME", CLI_CHOICE, CLI_RUNTIME(device),
     .choices = (const cli_choice[]){{"cpu", PL_DEVICE_CPU, NULL},
                                     {"cuda", PL_DEVICE_CUDA, NULL},
                                     {"auto", PL_DEVICE_AUTO, NULL},
                                     {NULL, 0, NULL}},
     .help = "cpu, cuda or auto (default: PLEIADES_DEVICE, else cpu; cuda needs a StarPU "
             "built with scripts/build-starpu-cuda)"},
    {"cuda-workers", "N", CLI_INT, CLI_RUNTIME(cuda_workers), .min = 0, .max = 64,
     .help = "GPUs to use with cuda/auto, 0 = all (default {default})"},

    {.kind = CLI_SECTION, .help = "Pipeline:"},
    {"schedule", "NAME", CLI_CUSTOM, CLI_ENGINE(schedule_def), .parse = parse_schedule,
     .help_fn = schedule_help},
    {"stages", "P", CLI_INT, CLI_ENGINE(stages), .min = 1, .max = 16,
     .help = "pipeline stages, {range} (default {default})"},
    {"workers-per-stage", "N", CLI_INT, CLI_ENGINE(workers_per_stage), .min = 0, .max = 64,
     .help = "workers serving each stage, dealt round-robin; a stage's workers start its "
             "items in schedule order and run consecutive ones at once where the data "
             "allows, each past the first may keep one more microbatch live (default 0: every "
             "worker; 1: the schedule's memory bound exactly)"},
    {"pp", "P", CLI_INT, CLI_ENGINE(pp), .min = 1, .max = 16,
     .help = "stages across ranks: mpirun -np P, rank s runs stage s (HybridParallelPlugin's "
             "pp_size; sets --stages P; --budget-mb is then each rank's). With --dp D: mpirun "
             "-np P*D, rank r runs stage r/D of replica r mod D (ZeRO 0-2)"},
    {"chunks", "V", CLI_INT, CLI_ENGINE(model_chunks), .min = 1, .max = 16,
     .help = "model chunks per stage, interleaved or zbv (default {default}; zbv takes 2)"},
    {"microbatches", "M", CLI_INT, EXEC(microbatches), .min = 1, .max = 64,
     .help = "microbatches per batch, {range} (default 2P, or the next count that divides "
             "the batch; interleaved: P or a multiple)"},
    {"microbatch-size", "S", CLI_INT, EXEC(microbatch_size), .min = 1, .max = 1 << 20,
     .help = "samples per microbatch (instead of --microbatches)"},
    {"stage-balance", "B", CLI_CHOICE, CLI_ENGINE(stage_balance),
     .choices = (const cli_choice[]){{"measured", PL_STAGE_BALANCE_MEASURED, NULL},
                                     {"flops", PL_STAGE_BALANCE_FLOPS, NULL},
                                     {NULL, 0, NULL}},
     .help = "measured: stages cut on FLOPs, then recut on the block times measured in "
             "training step 2 (default); flops: the FLOP cut throughout"},
    {"layers-per-stage", "a,b,..", CLI_INT_LIST, EXEC(layers_per_stage), .min = 1,
     .max = 1 << 16, .capacity = CLI_MAX_PARTS,
     .count_offset = offsetof(cli_exec_options, n_layers_per_stage),
     .help = "blocks per stage part (P·V counts in model order) instead of a balanced cut"},
    {"fuse-tasks", "on|off", CLI_CHOICE, CLI_ENGINE(fuse_tasks), .choices = ON_OFF,
     .help = "one StarPU task per microbatch's forward / input gradients / weight gradients "
             "on a stage (per block when tiles outnumber workers) instead of one per op: less "
             "of StarPU's per-task time; same results, and traces still show each op (default "
             "{default}; off with a placement policy)"},

    {.kind = CLI_SECTION,
     .help = "Activation recomputation (Megatron-LM's --recompute-granularity/-method/"
             "-num-layers; Colossal-AI's gradient checkpointing):"},
    {"recompute", "MODE", CLI_CHOICE, CLI_ENGINE(recompute.granularity),
     .choices = (const cli_choice[]){{"none", PL_RECOMPUTE_NONE, NULL},
                                     {"selective", PL_RECOMPUTE_SELECTIVE, NULL},
                                     {"full", PL_RECOMPUTE_FULL, NULL},
                                     {"auto", PL_RECOMPUTE_AUTO, NULL},
                                     {NULL, 0, NULL}},
     .help = "none: keep every activation; full: a layer keeps only its output and runs its "
             "forward again before its backward; selective: only attention's core is re-run; "
             "auto: per layer, keep or re-run as the planner predicts fastest within the "
             "budget (default: auto with --budget-mb, else none)"},
    {"recompute-method", "M", CLI_CHOICE, CLI_ENGINE(recompute.method),
     .choices = (const cli_choice[]){{"uniform", PL_RECOMPUTE_UNIFORM, NULL},
                                     {"block", PL_RECOMPUTE_BLOCK, NULL},
                                     {NULL, 0, NULL}},
     .help = "uniform: every layer, in units of --recompute-layers layers (default); block: "
             "the first --recompute-layers layers of each stage, the rest kept"},
    {"recompute-layers", "N", CLI_INT, CLI_ENGINE(recompute.num_layers), .min = 1,
     .max = 1000000, .help = "layers per unit (uniform) or recomputed per stage (block)"},
    {"recompute-ratio", "X", CLI_REAL, CLI_ENGINE(recompute.ratio),
     .range = {0, 1, true, false},
     .help = "Colossal-AI's gradient_checkpointing_ratio: the first ceil(X x layers) layers of "
             "each stage recomputed, {range}"},

    {.kind = CLI_SECTION, .help = "Traces (of the last training step):"},
    {"trace", "FILE.json", CLI_PATH, EXEC(trace_path), .what = "a file name",
     .help = "Chrome trace for Perfetto / chrome://tracing"},
    {"paje", "FILE.paje", CLI_PATH, EXEC(paje_path), .what = "a file name",
     .help = "Paje trace for ViTE / pj_dump"},

    {.kind = CLI_SECTION,
     .help = "Memory placement (default none: everything stays on the compute tier):"},
    {"budget-mb", "N", CLI_INT, CLI_RUNTIME(compute_budget_mb), .min = 1, .max = MAX_BUDGET_MB,
     .help = "compute-tier budget in MiB (GPU memory with --device cuda, else host RAM); "
             "alone it implies --placement auto"},
    {"placement", "NAME", CLI_CUSTOM, CLI_ENGINE(placement.policy), .parse = parse_placement,
     .help_fn = placement_help},
    {"offload-dir", "DIR", CLI_PATH, CLI_RUNTIME(offload_dir), .what = "a directory",
     .help = "disk tier: evicted state goes to files in DIR (an existing directory); needed "
             "on CPU runs when model state and activations exceed --budget-mb"},
    {"host-budget-mb", "N", CLI_INT, CLI_RUNTIME(host_budget_mb), .min = 1,
     .max = MAX_BUDGET_MB, .help = "host RAM budget in MiB (--device cuda only)"},
    {"chunk-mb", "X", CLI_CUSTOM, CLI_ENGINE(chunk_elems), .parse = parse_chunk_mb,
     .help = "model state chunk size in MiB of floats, (0, 16384] (default: searched, at "
             "least 4 MiB); chunk halves are what placement moves, so smaller chunks fit "
             "smaller budgets"},
    /* Mi elements, up to 2^31. */
    {"search-range-m", "X", CLI_REAL, CLI_ENGINE(search_range_m), .range = {0, 2048, true, false},
     .help = "the chunk search (GeminiPlugin's names; without --chunk-mb) tries sizes from "
             "max(--min-chunk-size-m Mi elements, the largest parameter) up to X Mi more"},
    {"min-chunk-size-m", "X", CLI_REAL, CLI_ENGINE(min_chunk_size_m),
     .range = {0, 2048, true, false}, .help = "the search's smallest size, in Mi elements"},
    {"hidden-dim", "N", CLI_INT, CLI_ENGINE(hidden_dim), .min = 1, .max = INT32_MAX,
     .help = "the search's step, in elements"},
    {"chunk-search-n-grids", "N", CLI_INT, CLI_ENGINE(chunk_search_n_grids), .min = 1,
     .max = 1 << 20, .help = "or else steps of the range / N (Lightning's); the least waste "
             "wins. Default: Pleiades' choice (min 1 Mi, up to a chunk per worker, 16 grids; "
             "--dp/--pp runs: 1/32 to 1/16 of the model in steps of 1024); Gemini's defaults "
             "are 32, 32, 1024 (one chunk for every model here)"},
    {"shard-param-frac", "X", CLI_REAL, CLI_ENGINE(placement.shard_param_frac),
     .range = {0, 1, false, false},
     .help = "static: share of parameter chunks that may leave the compute tier between "
             "uses, {range} (default {default}); with --zero-stage 3 the share resharded over "
             "the ranks after each use (the rest stays gathered)"},
    {"offload-optim-frac", "X", CLI_REAL, CLI_ENGINE(placement.offload_optim_frac),
     .range = {0, 1, false, false},
     .help = "static: share of chunks whose optimizer states live (and update) off the "
             "compute tier, {range} (default {default})"},
    {"offload-param-frac", "X", CLI_REAL, CLI_ENGINE(placement.offload_param_frac),
     .range = {0, 1, false, false},
     .help = "static: share of parameter chunks kept off the compute tier, {range} (default "
             "{default}; honoured only with the two above at 1)"},
    {"max-prefetch", "N", CLI_INT, CLI_ENGINE(placement.max_prefetch), .min = 0,
     .max = 1 << 20, .help = "auto: units fetched ahead of use (default {default})"},
    {"warmup-non-model-data-ratio", "X", CLI_REAL,
     CLI_ENGINE(placement.warmup_non_model_data_ratio), .range = {0, 1, false, true},
     .help = "auto: budget share kept for activations in the first iteration, {range} "
             "(default {default})"},
    {"steady-cuda-cap-ratio", "X", CLI_REAL, CLI_ENGINE(placement.steady_cuda_cap_ratio),
     .range = {0, 1, true, false},
     .help = "auto: budget share usable afterwards, {range} (default {default})"},
    {"gpu-margin-mem-ratio", "X", CLI_REAL, CLI_ENGINE(placement.gpu_margin_mem_ratio),
     .range = {0, 1, false, false},
     .help = "auto: share of the budget left after the peak where optimizer states stay (and "
             "update) on the compute tier, {range} (default {default})"},
    {.kind = CLI_NOTE,
     .help = "With a placement or --recompute, every step line of --metrics also has "
             "peak_compute_bytes, peak_host_bytes (the host tier on CUDA runs, the disk tier "
             "on CPU runs), bytes_moved, evictions and prefetch_hits of that step, and the "
             "engine's count of activation_peak_bytes (op outputs and saved tensors), "
             "activation_grad_peak_bytes and scratch_peak_bytes; the run ends with a memory "
             "summary."},
};

const cli_flag_table cli_exec_flag_table = CLI_TABLE(ROWS);
