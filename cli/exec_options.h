/* Options of `pleiades train` that say how a model runs rather than what
 * it is: precision, accumulation, clipping, loss scaling, the LR schedule,
 * data parallelism, the device, the pipeline schedule, trace output and
 * memory placement. Shared by the MLP and GPT trainers: their flags
 * (cli/exec_flags.c), checks (cli/exec_options.c) and start-up and
 * summary lines (cli/exec_report.c). */
#ifndef PL_CLI_EXEC_OPTIONS_H
#define PL_CLI_EXEC_OPTIONS_H

#include <stdbool.h>
#include <stdio.h>

#include <pleiades.h>

#include "flags.h"

#define CLI_MAX_PARTS 64

/* What `pleiades train`'s flags say about how a model runs. The flags
 * land in the library's own option structs directly (cli/exec_flags.c has
 * the table); the few that are not options of the library land beside
 * them. cli_exec_finish then checks the flags against each other and
 * completes what follows from several of them (the microbatch count, a
 * placement policy implied by --budget-mb); what is known only with the
 * model (the batch per rank, the LR schedule's length) is added by
 * cli_create_engine. */
typedef struct cli_exec_options {
    pl_runtime_options runtime; /* --workers, --device, --budget-mb, ... */
    pl_engine_options engine;   /* --schedule, --precision, --lr, ... */
    const char *trace_path;     /* --trace FILE.json */
    const char *paje_path;      /* --paje FILE.paje */
    int microbatches;           /* --microbatches M (0: --microbatch-size or
                                   the default): engine.tiles */
    int microbatch_size;        /* --microbatch-size S (0: unset) */
    int64_t layers_per_stage[CLI_MAX_PARTS]; /* --layers-per-stage a,b,.. */
    int n_layers_per_stage;
    /* The command line: which flags were given (a knob without what it
     * tunes is refused), and their values' hashes, which the ranks of a
     * distributed run compare (cli_start_runtime). */
    cli_flags flags;
} cli_exec_options;

/* The table of the flags above, and the CLI's defaults where they are
 * not the library's (2 stages and 2 chunks once a schedule is given, ...):
 * cli_exec_defaults starts from pl_engine_options_default and
 * pl_runtime_options_default. */
extern const cli_flag_table cli_exec_flag_table;
void cli_exec_defaults(cli_exec_options *x);

/* Per-run totals of the placement figures (summed by cli/fit.c). */
typedef struct cli_exec_memory {
    int64_t steps;
    int64_t peak_compute_bytes, peak_host_bytes; /* maxima over steps */
    int64_t bytes_moved, evictions, prefetch_hits; /* sums over steps */
    int64_t activation_peak_bytes;               /* max over steps (the engine's count) */
} cli_exec_memory;

/* Cross-option checks once the batch size (the global one) is known
 * (usage errors); with --dp, also that mpirun started --dp processes.
 * Sets engine.tiles to the microbatch count of a pipeline, the placement
 * policy --budget-mb implies, and what follows from the flags given
 * (profiling with a trace, a distributed runtime over several ranks). */
bool cli_exec_finish(cli_exec_options *x, int batch_size);

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
/* Whether the run reports memory per step (--metrics) and at its end: a
 * placement, or activation recomputation. */
bool cli_exec_memory_reported(const cli_exec_options *x);

/* One line describing the placement for a run's header; nothing without
 * one. */
void cli_exec_print_placement(const cli_exec_options *x, pl_engine_t *e);

/* One line on a 16-bit precision (what is stored how, the model state's
 * bytes); nothing in fp32. */
void cli_exec_print_precision(const cli_exec_options *x, const pl_engine_t *e);
/* The start-up line of a pipelined run: schedule, P, V, M and each stage's
 * blocks (of n_blocks), and how they were cut. */
void cli_exec_print_pipeline(const cli_exec_options *x, pl_engine_t *e, int n_blocks);
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
                           const pl_runtime_t *rt, const pl_engine_t *e);

/* With --dp > 1, the end-of-run line on what each rank held of the model
 * state (pl_model_state_bytes): kept between steps, and the most whole
 * chunks gathered (ZeRO-3) or whole gradients (ZeRO-2) at once. */
void cli_exec_print_model_state(const cli_exec_options *x, const pl_engine_t *e);

#endif
