/* The metrics file: JSON Lines, one object per training iteration and per
 * evaluation, flushed line by line so a long run can be followed (tail -f)
 * and a crash loses nothing already reported. The keys are those
 * `pleiades train --metrics` has always written. */
#define _POSIX_C_SOURCE 200809L /* strdup */

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pleiades.h"
#include "trainer/hooks/hook_util.h"
#include "util/error.h"

typedef struct metrics_file {
    pl_metrics_file_options o;
    char *path;
    FILE *file;
    bool failed;
} metrics_file;

static void metrics_free(void *u) {
    metrics_file *m = u;
    if (m->file)
        fclose(m->file);
    free(m->path);
    free(m);
}

/* JSON has no NaN or Infinity, and a diverged loss must still make a
 * valid line: null. */
static void put_real(metrics_file *m, const char *key, double v) {
    if (isfinite(v))
        fprintf(m->file, ",\"%s\":%.8g", key, v);
    else
        fprintf(m->file, ",\"%s\":null", key);
}

static void put_int(metrics_file *m, const char *key, int64_t v) {
    fprintf(m->file, ",\"%s\":%" PRId64, key, v);
}

static pl_status end_line(metrics_file *m) {
    fputs("}\n", m->file);
    if (fflush(m->file) != 0 || ferror(m->file))
        return pl_fail(PL_STATUS_IO_ERROR, "cannot write the metrics file '%s': %s", m->path,
                       strerror(errno));
    return PL_STATUS_OK;
}

static pl_status metrics_iter(pl_trainer_t *t, void *u, const pl_step_result *r) {
    metrics_file *m = u;
    const pl_metrics_file_options *o = &m->o;
    pl_engine_t *e = pl_trainer_engine(t);
    fprintf(m->file, "{\"step\":%" PRId64, pl_trainer_step(t));
    if (o->epoch_field)
        put_int(m, "epoch", pl_trainer_epoch(t) + 1);
    put_real(m, "loss", r->loss);
    double v;
    if (pl_trainer_state_get(t, "lr", &v))
        put_real(m, "lr", v);
    if (pl_trainer_state_get(t, "train/samples_per_s", &v)) {
        put_real(m, "samples_per_s", v);
        if (o->tokens_per_sample > 0)
            put_real(m, "tokens_per_s", v * (double)o->tokens_per_sample);
    }
    /* The mean past the warm-up iterations (LogTimingByEpochHook's). */
    if (pl_trainer_state_get(t, "train/steady_samples_per_s", &v)) {
        put_real(m, "steady_samples_per_s", v);
        if (o->tokens_per_sample > 0)
            put_real(m, "steady_tokens_per_s", v * (double)o->tokens_per_sample);
    }
    if (o->memory) {
        static const char *const keys[8] = {"peak_compute_bytes", "peak_host_bytes",
                                            "bytes_moved", "evictions", "prefetch_hits",
                                            "activation_peak_bytes",
                                            "activation_grad_peak_bytes", "scratch_peak_bytes"};
        for (int i = 0; i < 8; i++) {
            char key[64];
            snprintf(key, sizeof key, "memory/%s", keys[i]);
            if (pl_trainer_state_get(t, key, &v))
                put_int(m, keys[i], (int64_t)v);
        }
    }
    /* An update skipped for an overflow before any clean one computes no
     * norm: the engine then still has none to give. */
    if (o->grad_norm && pl_engine_steps(e) > 0) {
        double norm;
        pl_status st = pl_engine_grad_norm(e, &norm);
        if (st != PL_STATUS_OK)
            return st;
        put_real(m, "grad_norm", norm);
    }
    if (o->loss_scale) {
        double scale;
        bool overflow;
        pl_status st = pl_engine_loss_scale(e, &scale, &overflow);
        if (st != PL_STATUS_OK)
            return st;
        put_real(m, "loss_scale", scale);
        put_int(m, "overflow", overflow);
    }
    return end_line(m);
}

static pl_status metrics_test(pl_trainer_t *t, void *u) {
    metrics_file *m = u;
    const pl_metrics_file_options *o = &m->o;
    bool by_epoch = strcmp(o->test_key, "epoch") == 0;
    fprintf(m->file, "{\"%s\":%" PRId64, o->test_key,
            by_epoch ? pl_trainer_epoch(t) + 1 : pl_trainer_step(t));
    char key[64];
    double v;
    snprintf(key, sizeof key, "%s_loss", o->test_prefix);
    if (pl_trainer_state_get(t, "test/loss", &v))
        put_real(m, key, v);
    snprintf(key, sizeof key, "%s_accuracy", o->test_prefix);
    if (o->test_accuracy && pl_trainer_state_get(t, "test/accuracy", &v))
        put_real(m, key, v);
    return end_line(m);
}

pl_hook pl_hook_metrics_file(const pl_metrics_file_options *o) {
    if (!o || !o->path || !o->path[0]) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_hook_metrics_file: needs a path");
        return (pl_hook){0};
    }
    metrics_file *m = pl_hook_alloc(sizeof *m, "MetricsFileHook");
    if (!m)
        return (pl_hook){0};
    m->o = *o;
    if (!m->o.test_key)
        m->o.test_key = "epoch";
    if (!m->o.test_prefix)
        m->o.test_prefix = "test";
    m->path = strdup(o->path);
    /* Opened now, before anything slow: a typo in the path costs nothing. */
    m->file = m->path ? fopen(m->path, "w") : NULL;
    if (!m->file) {
        pl_fail(m->path ? PL_STATUS_IO_ERROR : PL_STATUS_OUT_OF_MEMORY,
                "cannot open the metrics file '%s': %s", o->path,
                m->path ? strerror(errno) : "out of memory");
        metrics_free(m);
        return (pl_hook){0};
    }
    return (pl_hook){.name = "MetricsFileHook", .priority = 10, .user_data = m,
                     .after_train_iter = metrics_iter,
                     .after_test_epoch = metrics_test,
                     .free = metrics_free};
}
