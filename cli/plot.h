/* `pleiades plot`: the loss curves of one or more runs, from the JSON
 * Lines files `pleiades train --metrics` writes, drawn into a PNG with
 * gnuplot: training loss (solid) and validation or test loss (dashed)
 * against the step, the learning rate (dotted) on a second y axis, one
 * colour per file. */
#ifndef PL_CLI_PLOT_H
#define PL_CLI_PLOT_H

#include <stdio.h>

/* Runs the command; argv[0] is "plot". Returns the process exit status
 * (CLI_EXIT_OK, CLI_EXIT_FAILURE, CLI_EXIT_USAGE). */
int cli_plot(int argc, char **argv);

/* The option reference of the command. */
void cli_plot_usage(FILE *out);

#endif
