/* A Gantt chart of a trace as a PNG, drawn by gnuplot (Debian:
 * gnuplot-nox): one row per track, slices coloured by phase and labelled
 * with their microbatch ("3", or "3/c1" with chunk 1 when the trace has
 * several model chunks per stage) where the label fits in the slice.
 *
 * With PLEIADES_GANTT_SCRIPT=PATH in the environment, the gnuplot script
 * (data included) is also written to PATH, for tests and for redrawing by
 * hand (`gnuplot PATH`). */
#ifndef PL_CLI_TRACE_GANTT_H
#define PL_CLI_TRACE_GANTT_H

#include <stdbool.h>

#include "trace_load.h"

/* Writes the chart to png_path; false after printing why not (gnuplot
 * missing or failing, no file produced). */
bool trace_gantt_png(const trace_data *t, const char *png_path);

#endif
