/* The --metrics JSON Lines file (see metrics.h). */
#include "metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "args.h"

int cli_metrics_open(cli_metrics *m, const char *path) {
    m->file = NULL;
    m->path = path;
    if (!path)
        return CLI_EXIT_OK;
    m->file = fopen(path, "w");
    if (!m->file) {
        cli_error("--metrics: cannot open '%s': %s", path, strerror(errno));
        return CLI_EXIT_FAILURE;
    }
    return CLI_EXIT_OK;
}

void cli_metrics_begin(cli_metrics *m, const char *key, int64_t value) {
    if (m->file)
        fprintf(m->file, "{\"%s\":%" PRId64, key, value);
}

void cli_metrics_int(cli_metrics *m, const char *key, int64_t value) {
    if (m->file)
        fprintf(m->file, ",\"%s\":%" PRId64, key, value);
}

void cli_metrics_real(cli_metrics *m, const char *key, double value) {
    if (!m->file)
        return;
    fprintf(m->file, ",\"%s\":", key);
    if (isfinite(value))
        fprintf(m->file, "%.8g", value);
    else
        fputs("null", m->file);
}

int cli_metrics_end(cli_metrics *m) {
    if (!m->file)
        return CLI_EXIT_OK;
    fputs("}\n", m->file);
    if (fflush(m->file) == 0 && !ferror(m->file))
        return CLI_EXIT_OK;
    cli_error("--metrics: cannot write '%s': %s", m->path, strerror(errno));
    return CLI_EXIT_FAILURE;
}

int cli_metrics_close(cli_metrics *m, int rc) {
    if (m->file && fclose(m->file) != 0 && rc == CLI_EXIT_OK) {
        cli_error("--metrics: cannot write '%s': %s", m->path,
                  strerror(errno));
        rc = CLI_EXIT_FAILURE;
    }
    m->file = NULL;
    return rc;
}
