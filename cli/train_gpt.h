/* `pleiades train --model gpt`: train a byte-level GPT on text through the
 * public API. cli/train.c parses and validates the command line (shared
 * with the MLP) and hands the result over as a cli_gpt_options. */
#ifndef PL_CLI_TRAIN_GPT_H
#define PL_CLI_TRAIN_GPT_H

#include <stdbool.h>
#include <stdint.h>

#include <pleiades.h>

#include "exec_options.h"

/* The vocabulary is the 256 byte values: text needs no tokenizer, and a
 * checkpoint's generated tokens are the bytes printed. */
#define CLI_GPT_VOCAB 256

/* The model sizes `train` accepts, and `generate` accepts from a
 * checkpoint's metadata (a file must not ask for what a flag may not). */
enum {
    CLI_GPT_MAX_LAYERS = 256,
    CLI_GPT_MAX_CHANNELS = 16384,
    CLI_GPT_MAX_HEADS = 1024,
    CLI_GPT_MAX_CONTEXT = 16384,
};

typedef struct cli_gpt_options {
    pl_gpt_config model;       /* vocab is CLI_GPT_VOCAB */
    const char *data_path;     /* a text file or a directory of them */
    int64_t steps;             /* optimizer steps, >= 1 */
    int64_t eval_every;        /* validate every N steps; 0 = at the end */
    int batch_size;            /* sequences per step */
    pl_optimizer_options optimizer;
    const char *optimizer_name;/* for the header line */
    uint64_t seed;             /* initialisation and training batches */
    int workers;               /* StarPU CPU workers, 0 = StarPU's choice */
    int tiles;                 /* batch tiles per step, 0 = one per worker */
    const char *metrics_path;  /* JSON Lines, or NULL */
    const char *tensorboard_dir; /* TensorBoard event files, or NULL */
    const char *save_path;     /* safetensors checkpoint, or NULL */
    const char *checkpoint_dir;/* full checkpoints DIR/step-<N>, or NULL */
    int64_t save_every;        /* a checkpoint every N steps; 0 = at the end */
    int keep_last;             /* checkpoints kept; 0 = all */
    const char *resume_path;   /* a checkpoint, or a checkpoint_dir, or NULL */
    bool quiet;                /* print only the final validation loss */
    cli_exec_options exec;     /* device, schedule, traces */
} cli_gpt_options;

/* The model's config kept among a full checkpoint's values (under the
 * names of the flags that set it: "gpt.layers" is --layers), so that
 * `generate` rebuilds the model from a checkpoint directory and --resume
 * names the flag that differs. */
void cli_gpt_config_to_values(const pl_gpt_config *m, pl_checkpoint_values *v);
/* The config of checkpoint values; false (having said why, naming `what`)
 * when one is missing or out of the range `train` accepts. */
bool cli_gpt_config_from_values(const pl_checkpoint_values *v, const char *what,
                                pl_gpt_config *m);

/* Trains as `o` says; the options are valid (cli/train.c checked them).
 * Returns CLI_EXIT_OK, CLI_EXIT_FAILURE for a run-time failure, or
 * CLI_EXIT_USAGE when the data turn out too short for --context. */
int cli_train_gpt(const cli_gpt_options *o);

#endif
