/* `pleiades train`: train a model on Fashion-MNIST through the public API. */
#ifndef PL_CLI_TRAIN_H
#define PL_CLI_TRAIN_H

#include <stdio.h>

/* Runs the command; argv[0] is "train". Returns the process exit status
 * (CLI_EXIT_OK, CLI_EXIT_FAILURE, or CLI_EXIT_USAGE for a bad command line).
 * Uses getopt_long, so it must be the only getopt user in the process. */
int cli_train(int argc, char **argv);

/* Parses and checks a command line exactly as cli_train does, but runs
 * nothing (no data, no StarPU): CLI_EXIT_OK when cli_train would train or
 * print its help, CLI_EXIT_USAGE after printing why not. For the fuzzer of
 * the option parsing (tests/fuzz); getopt_long's state is the caller's to
 * reset (optind = 0) between calls. */
int cli_train_check(int argc, char **argv);

/* The option reference of the command (also part of `pleiades --help`). */
void cli_train_usage(FILE *out);

#endif
