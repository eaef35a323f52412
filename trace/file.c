/* What both trace writers share: atomic files and track names. */
#include <errno.h>
#include <starpu.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util/error.h"
#include "trace/trace.h"

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
        if (k->comm)
            snprintf(k->name, sizeof k->name, "collectives / %s", worker);
        else if (k->stage >= 0)
            snprintf(k->name, sizeof k->name, "stage %d / %s", k->stage, worker);
        else
            snprintf(k->name, sizeof k->name, "%s", worker);
    }
}

pl_status pl_trace_file_open(const char *path, pl_atomic_file *af, FILE **out) {
    *out = NULL;
    if (!path || !*path)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "trace: empty file name");
    int err = pl_atomic_file_open(af, path);
    if (err)
        return pl_fail(PL_STATUS_IO_ERROR, "%s: cannot create: %s", path,
                       strerror(err));
    *out = pl_atomic_file_stream(af);
    if (!*out) {
        err = errno;
        pl_atomic_file_discard(af);
        return pl_fail(PL_STATUS_IO_ERROR, "%s: cannot open a stream: %s", path,
                       strerror(err));
    }
    return PL_STATUS_OK;
}

pl_status pl_trace_file_commit(pl_atomic_file *af, const char *path) {
    int err = pl_atomic_file_commit(af);
    if (err)
        return pl_fail(PL_STATUS_IO_ERROR, "%s: write failed: %s", path,
                       strerror(err));
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
