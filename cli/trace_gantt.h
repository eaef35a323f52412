/* A Gantt chart of a trace as a PNG, drawn by gnuplot (Debian:
 * gnuplot-nox): one row per track, slices coloured by phase. */
#ifndef PL_CLI_TRACE_GANTT_H
#define PL_CLI_TRACE_GANTT_H

#include <stdbool.h>

#include "trace_load.h"

/* Writes the chart to png_path; false after printing why not (gnuplot
 * missing or failing, no file produced). */
bool trace_gantt_png(const trace_data *t, const char *png_path);

#endif
