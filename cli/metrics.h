/* The --metrics file of `pleiades train`: JSON Lines, one object per line
 * (a step, an epoch, a validation), written as the run goes.
 *
 * A line is cli_metrics_begin, any number of cli_metrics_int/real fields,
 * then cli_metrics_end. Every call is a no-op when no file was asked for,
 * so callers write their lines unconditionally. */
#ifndef PL_CLI_METRICS_H
#define PL_CLI_METRICS_H

#include <stdint.h>
#include <stdio.h>

typedef struct cli_metrics {
    FILE *file;       /* NULL: no --metrics */
    const char *path; /* for messages */
} cli_metrics;

/* Opens `path` for writing (nothing when it is NULL). Called before
 * anything slow, so a typo in the path costs nothing. */
int cli_metrics_open(cli_metrics *m, const char *path);

/* {"key":value -- the first field of a line. */
void cli_metrics_begin(cli_metrics *m, const char *key, int64_t value);
/* ,"key":value */
void cli_metrics_int(cli_metrics *m, const char *key, int64_t value);
/* ,"key":value, or null when value is not finite (JSON has no NaN or
 * Infinity, and a diverged loss must still make a valid line). */
void cli_metrics_real(cli_metrics *m, const char *key, double value);

/* Closes the line and flushes it, so a long run can be followed
 * (tail -f) and a crash loses nothing already reported. */
int cli_metrics_end(cli_metrics *m);

/* Closes the file; returns `rc`, or CLI_EXIT_FAILURE when rc was OK and
 * the close failed (the last lines may not have reached the disk). */
int cli_metrics_close(cli_metrics *m, int rc);

#endif
