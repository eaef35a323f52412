/* `pleiades trace-summary`: what a trace written by pl_engine_write_trace
 * (or any Chrome Trace Event file) says about a step — busy and idle time
 * per worker, the measured pipeline bubble per stage next to the
 * schedule's theoretical one, the critical path — and optionally a Gantt
 * chart drawn with gnuplot. */
#ifndef PL_CLI_TRACE_SUMMARY_H
#define PL_CLI_TRACE_SUMMARY_H

#include <stdio.h>

/* Runs the command; argv[0] is "trace-summary". Returns the process exit
 * status (CLI_EXIT_OK, CLI_EXIT_FAILURE, CLI_EXIT_USAGE). */
int cli_trace_summary(int argc, char **argv);

/* The option reference of the command. */
void cli_trace_summary_usage(FILE *out);

#endif
