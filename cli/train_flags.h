/* The command line of `pleiades train`, parsed (cli/train_flags.c): what
 * model to train, on what data, for how long and where its outputs go, in
 * a config of the CLI's own; how it runs, in the library's option structs
 * (cli_exec_options). Shared by the MLP (cli/train.c) and the GPT
 * (cli/train_gpt.c). */
#ifndef PL_CLI_TRAIN_FLAGS_H
#define PL_CLI_TRAIN_FLAGS_H

#include <stdbool.h>
#include <stdint.h>

#include <pleiades.h>

#include "args.h"
#include "exec_options.h"

typedef enum cli_model {
    CLI_MODEL_MLP, /* a Fashion-MNIST perceptron, trained for --epochs */
    CLI_MODEL_GPT, /* a byte-level GPT on text, trained for --steps */
} cli_model;

enum { CLI_MAX_HIDDEN_LAYERS = 16 };

/* gpt: what --data holds (--data-format). */
typedef enum cli_data_format {
    CLI_DATA_AUTO,    /* llm.c's magic: llmc; otherwise text */
    CLI_DATA_TEXT,    /* bytes, V = 256, split 90/10 */
    CLI_DATA_LLMC,    /* token files, --val-data the validation split */
    CLI_DATA_RAW_U16,
    CLI_DATA_RAW_U32,
} cli_data_format;

typedef struct train_config {
    cli_model model;            /* --model */
    int64_t hidden[CLI_MAX_HIDDEN_LAYERS]; /* mlp: --hidden */
    int n_hidden;
    int epochs;                 /* mlp: --epochs */
    pl_gpt_config gpt;          /* gpt: --layers, --channels, --heads, --context */
    int64_t steps;              /* gpt: optimizer steps */
    int64_t eval_every;         /* gpt: 0 = only after the last step */
    int64_t eval_batches;       /* gpt: per evaluation; 0 = the default
                                   (cli_gpt_eval_batches) */
    const char *save_path;      /* gpt: --save */
    const char *checkpoint_dir; /* --checkpoint-dir */
    int64_t save_every;         /* updates; 0 = at the end only */
    int64_t keep_last;          /* 0 = keep all */
    const char *resume_path;    /* a checkpoint or a --checkpoint-dir */
    const char *data_path;      /* mlp: the IDX directory; gpt: a text file
                                   or directory, or a token file (the default
                                   follows the model) */
    const char *val_data_path;  /* gpt, token files: the validation split */
    cli_data_format data_format;/* gpt: --data-format; finish_config resolves
                                   auto */
    int64_t vocab_pad;          /* gpt: --vocab-pad (1: none) */
    int batch_size;             /* the global batch (each rank runs batch / dp) */
    uint64_t seed;
    const char *metrics_path;
    const char *tensorboard_dir;
    bool quiet;
    /* The rest, the optimizer included, in the library's options; the
     * flags given, in exec.flags. */
    cli_exec_options exec;
} train_config;

/* Parses and checks a command line (argv[0] is "train") into `cfg`:
 * CLI_PARSE_RUN, CLI_PARSE_HELP, or CLI_PARSE_ERROR after printing why. */
cli_parse_result cli_train_parse(int argc, char **argv, train_config *cfg);

/* "sgd", "adamw": for the start-up line. */
const char *cli_optimizer_name(pl_optimizer_kind kind);

#endif
