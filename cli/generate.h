/* `pleiades generate`: sample text from a GPT checkpoint written by
 * `pleiades train --model gpt --save FILE`. */
#ifndef PL_CLI_GENERATE_H
#define PL_CLI_GENERATE_H

#include <stdio.h>

/* Runs the command; argv[0] is "generate". Returns the process exit status
 * (CLI_EXIT_OK, CLI_EXIT_FAILURE, or CLI_EXIT_USAGE for a bad command line).
 * Uses getopt_long, so it must be the only getopt user in the process. */
int cli_generate(int argc, char **argv);

/* The option reference of the command (also part of `pleiades --help`). */
void cli_generate_usage(FILE *out);

#endif
