/* Drawing a PNG with gnuplot (Debian: gnuplot-nox), shared by the commands
 * that draw charts (`trace-summary --png`, `plot`).
 *
 * gnuplot runs as a child process reading a script on its standard input,
 * so data goes inline as datablocks ($D << EOD ... EOD, gnuplot 5) and no
 * temporary data file needs cleaning up. The PNG is written under a
 * temporary name beside the target and renamed once gnuplot succeeded, so
 * a failed plot never leaves a truncated image behind. */
#ifndef PL_CLI_GNUPLOT_H
#define PL_CLI_GNUPLOT_H

#include <stdbool.h>
#include <stdio.h>

/* Writes the whole script to `g`; it must `set output` to `output` (with
 * cli_gnuplot_quote), the temporary name gnuplot is to write. */
typedef void (*cli_gnuplot_script_fn)(FILE *g, const char *output,
                                      void *context);

/* Draws png_path with the script `script` writes. Messages start with
 * `what` (e.g. "--png"): gnuplot missing from PATH (naming the Debian
 * package), failing or writing nothing, or the rename failing. False after
 * printing why; then no file was produced. */
bool cli_gnuplot_png(const char *what, const char *png_path,
                     cli_gnuplot_script_fn script, void *context);

/* `s` as a gnuplot single-quoted string: no escapes, a quote is doubled, a
 * newline becomes a space. */
void cli_gnuplot_quote(FILE *g, const char *s);

/* The start of a script: a PNG terminal (pngcairo where gnuplot has it,
 * else the libgd png) of width x height pixels, text not "enhanced" (so
 * that '_' in names stays literal) in sans 9 on either (the Gantt chart
 * sizes its margins and labels for that font), writing to `output`. */
void cli_gnuplot_png_terminal(FILE *g, int width, int height,
                              const char *output);

#endif
