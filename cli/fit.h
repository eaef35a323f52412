/* What `pleiades train` does for both models once the data, graph and
 * engine exist: a pl_trainer configured from the command line with the
 * built-in hooks (metrics file, logging, timing, memory, checkpoints,
 * TensorBoard, progress), plus the CLI's own few (resume checks, traces,
 * divergence, memory summary), all through the public hook interface. */
#ifndef PL_CLI_FIT_H
#define PL_CLI_FIT_H

#include <stdbool.h>
#include <stdint.h>

#include <pleiades.h>

#include "exec_options.h"

typedef struct cli_fit {
    pl_engine_t *engine;
    const cli_exec_options *exec;
    pl_data_source train, test;
    int64_t epochs;            /* epochs of `train` */
    int64_t max_steps;         /* 0 = the epochs' */
    /* gpt: lines and positions by step; an epoch is steps_per_epoch
     * updates between evaluations, and the data position is the step */
    bool by_step;
    int64_t steps_per_epoch;
    int64_t max_test_batches; /* per evaluation; 0: the test source's all */
    const char *test_name;     /* "test" or "val" */
    int64_t tokens_per_sample; /* > 0: tokens/s */
    bool test_accuracy;        /* metric 0 is the accuracy (the graph's only
                                  metric, pl_accuracy) */
    const char *metrics_path;
    const char *tensorboard_dir;
    const char *checkpoint_dir;
    const char *save_path;     /* --save (gpt), written at the end: while it
                                  can be, a failed checkpoint is not fatal */
    int64_t param_count;       /* what --save holds (4 bytes each) */
    int64_t save_every;
    int keep_last;
    const char *resume_path;
    pl_checkpoint_values model_values; /* kept with each checkpoint (the
                                          model's config), beside the seed */
    uint64_t seed;
    bool quiet;
    bool writer;               /* writes files (metrics, TensorBoard,
                                  checkpoints): rank 0 of a --dp run */
    int rank;                  /* --dp: this rank (traces go to one file
                                  per rank) */
} cli_fit;

typedef struct cli_fit_result {
    double test_loss, test_accuracy; /* of the last evaluation (NaN: none) */
    cli_exec_memory memory;          /* placement figures over the run */
    int trace_status;                /* writing --trace/--paje: to be
                                        returned once the run's outputs
                                        are all written */
} cli_fit_result;

/* Trains as `f` says. CLI_EXIT_OK, CLI_EXIT_USAGE for a --resume the
 * command line contradicts, or CLI_EXIT_FAILURE (the reason printed). */
int cli_fit_run(const cli_fit *f, cli_fit_result *out);

#endif
