/* Options of `pleiades train` that say how a model runs rather than what
 * it is: the device, the pipeline schedule, trace output and memory
 * placement (budgets, tiers, policy). Shared by the MLP and GPT trainers. */
#ifndef PL_CLI_EXEC_OPTIONS_H
#define PL_CLI_EXEC_OPTIONS_H

#include <stdbool.h>
#include <stdio.h>

#include <pleiades.h>


#define CLI_MAX_PARTS 64

typedef struct cli_exec_options {
    pl_device device;           /* --device cpu|cuda|auto */
    int cuda_workers;           /* --cuda-workers N (0 = all GPUs) */
    pl_schedule_kind schedule;  /* NONE, or whose defaults the schedule
                                   takes: INTERLEAVED (interleaved: V from
                                   --chunks, m a multiple of P), else
                                   1F1B (v = 1, m = 2P) */
    const pl_schedule_def *schedule_def; /* --schedule NAME: the registry's
                                   def (pleiades/schedule.h); NULL: none */
    int stages;                 /* --stages P */
    int workers_per_stage;      /* --workers-per-stage N (0: every worker) */
    int chunks;                 /* --chunks V (model chunks per stage) */
    int microbatches;           /* --microbatches M (0: --microbatch-size or P) */
    int microbatch_size;        /* --microbatch-size S (0: unset) */
    pl_stage_balance stage_balance; /* --stage-balance measured|flops */
    bool stage_balance_given;
    int layers_per_stage[CLI_MAX_PARTS]; /* --layers-per-stage a,b,.. */
    int n_layers_per_stage;
    const char *trace_path;     /* --trace FILE.json */
    const char *paje_path;      /* --paje FILE.paje */
    /* Memory placement. No --placement and no --budget-mb: none. */
    const char *placement_name; /* --placement NAME (the registry's) */
    pl_placement_options placement; /* policy (resolved by cli_exec_finish)
                                       and the GeminiPlugin knobs */
    int64_t budget_mb;          /* --budget-mb N (compute tier), 0 = none */
    int64_t host_budget_mb;     /* --host-budget-mb N, 0 = none */
    const char *offload_dir;    /* --offload-dir DIR */
    size_t chunk_elems;         /* --chunk-mb X as floats, 0 = searched */
    double search_range_m, min_chunk_size_m; /* the search's knobs (0 = auto) */
    int64_t hidden_dim;
    int chunk_search_n_grids;
    unsigned placement_flags;   /* knobs given (bits; to reject them
                                   without a placement) */
    /* Learning-rate schedule (--lr-schedule and its knobs, Colossal-AI's
     * names); total_steps is the run's optimizer steps unless given. */
    int accumulate;             /* --accumulate N: batches per update */
    float max_norm;             /* --max-norm X: clip by global norm, 0 = off */
    float norm_type;            /* --norm-type 2|inf */
    bool norm_type_given;       /* (refused without clipping) */
    /* Dynamic loss scaling: --loss-scale dynamic and the scaler's knobs
     * (Colossal-AI's names); knobs without it are refused. */
    pl_loss_scaler_options loss_scaler;
    bool loss_scaler_knobs;     /* a knob was given */
    pl_lr_scheduler_options lr;
    unsigned lr_flags;          /* knobs given (to reject the ones the
                                   schedule does not take) */
    /* Data parallelism (under mpirun): --dp N ranks, --zero-stage,
     * --reduce-bucket-size-in-m, --overlap-communication on|off. The
     * --batch-size is the global batch; each rank runs batch / dp. */
    int dp;
    int pp;               /* --pp: pipeline stages over ranks (1: in process) */
    bool stages_given;
    int zero_stage;
    int reduce_bucket_size_in_m;
    bool overlap_communication;
    bool reduction_knobs;       /* --reduce-bucket-size-in-m or
                                   --overlap-communication given (they need
                                   --dp > 1) */
    bool chunks_given;          /* --chunks given (interleaved and user
                                   schedules run several chunks a stage) */
    bool cpu_offload;           /* --cpu-offload on|off */
    pl_mpi_progress mpi_progress; /* --mpi-progress auto|thread|worker */
    float collective_timeout;   /* --collective-timeout S (0: off) */
    bool collective_timeout_given;
    /* Mixed precision: --precision fp32|fp16|bf16 (fp16 turns the loss
     * scaler on), --master-weights on|off, --force-outputs-fp32 on|off. */
    pl_precision precision;
    bool master_weights;
    bool fuse_tasks;
    bool check_finite;          /* --check-finite: stop at the first inf/NaN */
    bool force_outputs_fp32;
    bool precision_knobs;       /* --master-weights/--force-outputs-fp32 given */
    /* Every rank must have been given the same command line: a hash of
     * each option's value (or of its absence) with the flag's name, which
     * cli_start_runtime compares between ranks. */
    const char *const *option_names;
    const uint64_t *option_hashes;
    int n_options;
} cli_exec_options;

/* Per-run totals of the placement figures (summed by cli/fit.c). */
typedef struct cli_exec_memory {
    int64_t steps;
    int64_t peak_compute_bytes, peak_host_bytes; /* maxima over steps */
    int64_t bytes_moved, evictions, prefetch_hits; /* sums over steps */
} cli_exec_memory;

void cli_exec_defaults(cli_exec_options *x);

/* Parses one of the options above (flag as typed, e.g. "--stages");
 * returns 1 if `name` is one of them and it parsed, 0 if it is one of them
 * and it did not (a usage error was printed), -1 if it is none of them. */
int cli_exec_parse(cli_exec_options *x, const char *name, const char *flag,
                   const char *arg);

/* Cross-option checks once the batch size (the global one) is known
 * (usage errors); with --dp, also that mpirun started --dp processes. */
bool cli_exec_finish(cli_exec_options *x, int batch_size, int *tiles);

void cli_exec_runtime(const cli_exec_options *x, pl_runtime_options *o);
/* `total_steps`: the run's optimizer steps, the schedule's length unless
 * --total-steps set it. */
void cli_exec_engine(const cli_exec_options *x, int64_t total_steps,
                     pl_engine_options *o);

/* Checks up front that --trace and --paje can be written (see
 * cli_check_output_path); exit status. */
int cli_exec_check_outputs(const cli_exec_options *x);

/* Writes --trace/--paje from the engine's last step (rank R > 0 of a --dp
 * run: to PATH.rankR); exit status. */
int cli_exec_write_traces(const cli_exec_options *x, pl_engine_t *e, int rank);

/* For a run's header line (after its workers): with --dp > 1, " per
 * rank; data parallel over N ranks (...)"; with --pp > 1 the grid; over
 * several ranks, who polls MPI (pl_runtime_mpi_progress). Nothing for one
 * process. */
void cli_exec_print_data_parallel(const cli_exec_options *x, const pl_runtime_t *rt);

/* Whether a placement policy is active (--placement or --budget-mb). */
bool cli_exec_placement_active(const cli_exec_options *x);

/* One line describing the placement for a run's header; nothing without
 * one. */
void cli_exec_print_placement(const cli_exec_options *x, pl_engine_t *e);

/* One line on a 16-bit precision (what is stored how, the model state's
 * bytes); nothing in fp32. */
void cli_exec_print_precision(const cli_exec_options *x, const pl_engine_t *e);
/* The start-up line of a pipelined run: schedule, P, V, M and each stage's
 * blocks (of n_blocks), and how they were cut. */
void cli_exec_print_pipeline(const cli_exec_options *x, pl_engine_t *e, int n_blocks,
                             int microbatches);
/* Once the measured stage balance has timed its step: the cut it chose,
 * with each stage's measured time, when `print`; false (nothing printed)
 * before then or when nothing is timed. With stages across ranks the
 * first call after the timed step is collective (pl_engine_block_times):
 * every rank calls it after every step, the writer with `print`. */
bool cli_exec_print_stage_times(const cli_exec_options *x, pl_engine_t *e, bool print);

/* The end-of-run summary of `totals`; nothing without a placement. In a
 * distributed run every rank's (a collective: every rank calls it), a
 * line each, printed by rank 0. */
void cli_exec_print_memory(const cli_exec_options *x, const cli_exec_memory *totals,
                           const pl_runtime_t *rt);

/* With --dp > 1, the end-of-run line on what each rank held of the model
 * state (pl_model_state_bytes): kept between steps, and the most whole
 * chunks gathered (ZeRO-3) or whole gradients (ZeRO-2) at once. */
void cli_exec_print_model_state(const cli_exec_options *x, const pl_engine_t *e);

/* The --help lines of these options. */
void cli_exec_usage(FILE *out);

#endif
