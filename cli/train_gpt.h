/* `pleiades train --model gpt`: train a byte-level GPT on text through the
 * public API. cli/train_flags.c parses and validates the command line
 * (shared with the MLP) into a train_config. */
#ifndef PL_CLI_TRAIN_GPT_H
#define PL_CLI_TRAIN_GPT_H

#include <stdbool.h>
#include <stdint.h>

#include <pleiades.h>


/* Text's vocabulary is the 256 byte values: it needs no tokenizer, and a
 * checkpoint's generated tokens are the bytes printed. A model of any
 * other vocabulary (--vocab, token files) generates token ids. */
#define CLI_GPT_VOCAB 256

/* The model sizes `train` accepts, and `generate` accepts from a
 * checkpoint's metadata (a file must not ask for what a flag may not). */
enum {
    CLI_GPT_MAX_LAYERS = 256,
    CLI_GPT_MAX_CHANNELS = 16384,
    CLI_GPT_MAX_HEADS = 1024,
    CLI_GPT_MAX_CONTEXT = 16384,
    /* GPT-2's 50257, LLaMA-3's 128256 and more; 16 Mi catches a typo. */
    CLI_GPT_MAX_VOCAB = 1 << 24,
    CLI_GPT_MAX_VOCAB_PAD = 65536,
};

/* The model's config kept among a full checkpoint's values (under the
 * names of the flags that set it: "gpt.layers" is --layers), so that
 * `generate` rebuilds the model from a checkpoint directory and --resume
 * names the flag that differs. */
void cli_gpt_config_to_values(const pl_gpt_config *m, pl_checkpoint_values *v);
/* The config of checkpoint values; false (having said why, naming `what`)
 * when one is missing or out of the range `train` accepts. */
bool cli_gpt_config_from_values(const pl_checkpoint_values *v, const char *what,
                                pl_gpt_config *m);

/* Trains --model gpt as `cfg` says; the command line is valid
 * (cli_train_parse checked it). Returns CLI_EXIT_OK, CLI_EXIT_FAILURE for
 * a run-time failure, or CLI_EXIT_USAGE when the data turn out too short
 * for --context. */
typedef struct train_config train_config;
int cli_train_gpt(const train_config *cfg);

#endif
