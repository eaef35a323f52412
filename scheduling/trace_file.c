/* What both trace writers share: atomic files and track names. */
#include <errno.h>
#include <starpu.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "graph/error.h"
#include "scheduling/trace.h"

void pl_trace_name_tracks(pl_trace *t) {
    for (int i = 0; i < t->n_tracks; i++) {
        pl_trace_track *k = &t->tracks[i];
        if (k->name[0]) continue;
        char worker[32] = "";
        /* A worker id StarPU does not know (a trace built by hand, or after
         * shutdown) still gets a readable name. */
        if (k->worker >= 0 && (unsigned)k->worker < starpu_worker_get_count())
            starpu_worker_get_name(k->worker, worker, sizeof worker);
        if (!worker[0]) snprintf(worker, sizeof worker, "worker %d", k->worker);
        if (k->stage >= 0)
            snprintf(k->name, sizeof k->name, "stage %d / %s", k->stage, worker);
        else
            snprintf(k->name, sizeof k->name, "%s", worker);
    }
}

pl_status pl_trace_file_open(const char *path, char *tmp, size_t size,
                             FILE **out) {
    *out = NULL;
    if (!path || !*path)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "trace: empty file name");
    int n = snprintf(tmp, size, "%s.tmp.%ld", path, (long)getpid());
    if (n < 0 || (size_t)n >= size)
        return pl_fail(PL_STATUS_IO_ERROR, "%s: path too long", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return pl_fail(PL_STATUS_IO_ERROR, "%s: cannot create '%s': %s", path, tmp,
                       strerror(errno));
    *out = f;
    return PL_STATUS_OK;
}

pl_status pl_trace_file_commit(FILE *f, const char *tmp, const char *path) {
    /* fprintf's errors are sticky in the stream: one check at the end
     * catches a full disk anywhere in the file. */
    bool write_error = ferror(f) != 0;
    int saved = errno;
    if (fclose(f) != 0 && !write_error) {
        write_error = true;
        saved = errno;
    }
    if (write_error) {
        remove(tmp);
        return pl_fail(PL_STATUS_IO_ERROR, "%s: write failed: %s", path,
                       strerror(saved));
    }
    if (rename(tmp, path) != 0) {
        saved = errno;
        remove(tmp);
        return pl_fail(PL_STATUS_IO_ERROR, "%s: cannot rename '%s' to it: %s", path,
                       tmp, strerror(saved));
    }
    return PL_STATUS_OK;
}

void pl_trace_put_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}
