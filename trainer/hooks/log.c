/* The logging hooks (Colossal-AI's LogMetricByEpochHook,
 * LogTimingByEpochHook, LogMemoryByEpochHook) and a progress line. The
 * timing and memory hooks also keep per-iteration states for the writers
 * (metrics file, TensorBoard). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pleiades.h"
#include "trainer/hooks/hook_util.h"
#include "util/error.h"

/* ------------------------------------------------- LogMetricByEpochHook */

typedef struct log_metric {
    pl_log_metric_options o;
    double started_at;
} log_metric;

static pl_status log_metric_begin(pl_trainer_t *t, void *u) {
    (void)t;
    ((log_metric *)u)->started_at = pl_hook_now();
    return PL_STATUS_OK;
}

static void log_metric_line(pl_trainer_t *t, log_metric *s, bool tested) {
    const pl_log_metric_options *o = &s->o;
    char line[512];
    size_t n = 0;
#define ADD(...) n += (size_t)snprintf(line + n, n < sizeof line ? sizeof line - n : 0, __VA_ARGS__)
    if (o->by_step) {
        ADD("step %" PRId64, pl_trainer_step(t));
        if (pl_trainer_max_steps(t) > 0)
            ADD("/%" PRId64, pl_trainer_max_steps(t));
    } else {
        ADD("epoch %" PRId64 "/%" PRId64, pl_trainer_epoch(t) + 1, pl_trainer_max_epochs(t));
    }
    double v;
    if (pl_trainer_state_get(t, "train/loss", &v))
        ADD("  train loss %.4f", v);
    if (tested && pl_trainer_state_get(t, "test/loss", &v))
        ADD("  %s loss %.4f", o->test_name, v);
    if (tested && pl_trainer_state_get(t, "test/accuracy", &v))
        ADD("  %s acc %.2f%%", o->test_name, 100.0 * v);
    /* Steady state (past the warm-up iterations) once there is one; the
     * line says which it is. */
    const char *which = "steady";
    if (!pl_trainer_state_get(t, "train/steady_samples_per_s", &v)) {
        which = "warm-up";
        if (!pl_trainer_state_get(t, "train/epoch_samples_per_s", &v)) which = NULL;
    }
    if (which) {
        if (o->tokens_per_sample > 0)
            ADD("  %.0f tokens/s (%s)", v * (double)o->tokens_per_sample, which);
        else
            ADD("  %.0f samples/s (%s)", v, which);
    }
    ADD("  elapsed %.1fs", pl_hook_now() - s->started_at);
#undef ADD
    pl_hook_print(o->out, "%s\n", line);
}

static pl_status log_metric_train_epoch(pl_trainer_t *t, void *u) {
    if (!pl_trainer_test_due(t)) /* else the line waits for the test */
        log_metric_line(t, u, false);
    return PL_STATUS_OK;
}

static pl_status log_metric_test_epoch(pl_trainer_t *t, void *u) {
    log_metric_line(t, u, true);
    return PL_STATUS_OK;
}

pl_hook pl_hook_log_metric_by_epoch(const pl_log_metric_options *o) {
    log_metric *s = pl_hook_alloc(sizeof *s, "LogMetricByEpochHook");
    if (s) {
        s->o = o ? *o : (pl_log_metric_options){.out = stdout};
        if (!s->o.test_name)
            s->o.test_name = "test";
    }
    return (pl_hook){.name = s ? "LogMetricByEpochHook" : NULL, .priority = 10, .user_data = s,
                     .before_train = log_metric_begin,
                     .after_train_epoch = log_metric_train_epoch,
                     .after_test_epoch = log_metric_test_epoch,
                     .free = free};
}

/* ------------------------------------------------- LogTimingByEpochHook */

typedef struct log_timing {
    FILE *out;
    int64_t tokens_per_sample;
    double iter_start, epoch_seconds;
    int64_t epoch_samples, epoch_iters;
    /* This fit's iterations, and the time and samples of those past the
     * warm-up (PL_WARMUP_ITERATIONS). */
    int64_t run_iters, steady_samples;
    double steady_seconds;
} log_timing;

static pl_status timing_epoch_begin(pl_trainer_t *t, void *u) {
    (void)t;
    log_timing *s = u;
    s->epoch_seconds = 0;
    s->epoch_samples = s->epoch_iters = 0;
    return PL_STATUS_OK;
}

static pl_status timing_iter_begin(pl_trainer_t *t, void *u) {
    (void)t;
    ((log_timing *)u)->iter_start = pl_hook_now();
    return PL_STATUS_OK;
}

static pl_status timing_iter_end(pl_trainer_t *t, void *u, const pl_step_result *r) {
    log_timing *s = u;
    double dt = pl_hook_now() - s->iter_start;
    s->epoch_seconds += dt;
    s->epoch_samples += r->size;
    s->epoch_iters++;
    pl_status st = pl_trainer_state_set(t, "train/iter_seconds", dt);
    if (st == PL_STATUS_OK)
        st = pl_trainer_state_set(t, "train/samples_per_s", dt > 0 ? (double)r->size / dt : 0);
    /* The first iterations allocate, calibrate StarPU's performance models
     * and (pipelines) measure the stages: 3-5x slower than the rest, they
     * would make a short run's mean say little of the steady state. */
    if (++s->run_iters > PL_WARMUP_ITERATIONS) {
        s->steady_seconds += dt;
        s->steady_samples += r->size;
        if (st == PL_STATUS_OK && s->steady_seconds > 0)
            st = pl_trainer_state_set(t, "train/steady_samples_per_s",
                                      (double)s->steady_samples / s->steady_seconds);
    }
    /* Kept current, so that it is ready whichever hook reads it first. */
    if (st == PL_STATUS_OK)
        st = pl_trainer_state_set(t, "train/epoch_samples_per_s",
                                  s->epoch_seconds > 0
                                      ? (double)s->epoch_samples / s->epoch_seconds
                                      : 0);
    return st;
}

static pl_status timing_epoch_end(pl_trainer_t *t, void *u) {
    log_timing *s = u;
    if (!s->out || s->epoch_iters == 0)
        return PL_STATUS_OK;
    double rate = s->epoch_seconds > 0 ? (double)s->epoch_samples / s->epoch_seconds : 0;
    if (s->tokens_per_sample > 0)
        pl_hook_print(s->out, "epoch %" PRId64 ": %.2f s, mean iteration %.2f ms, %.0f tokens/s\n",
                      pl_trainer_epoch(t) + 1, s->epoch_seconds,
                      1e3 * s->epoch_seconds / (double)s->epoch_iters,
                      rate * (double)s->tokens_per_sample);
    else
        pl_hook_print(s->out, "epoch %" PRId64 ": %.2f s, mean iteration %.2f ms, %.0f samples/s\n",
                      pl_trainer_epoch(t) + 1, s->epoch_seconds,
                      1e3 * s->epoch_seconds / (double)s->epoch_iters, rate);
    return PL_STATUS_OK;
}

pl_hook pl_hook_log_timing_by_epoch(FILE *out, int64_t tokens_per_sample) {
    log_timing *s = pl_hook_alloc(sizeof *s, "LogTimingByEpochHook");
    if (s) {
        s->out = out;
        s->tokens_per_sample = tokens_per_sample;
    }
    /* Priority 5: after the metric hooks and the memory sampling (which
     * waits for the update, so the time includes it), before the writers
     * (10) that report its states. */
    return (pl_hook){.name = s ? "LogTimingByEpochHook" : NULL, .priority = 5, .user_data = s,
                     .before_train_epoch = timing_epoch_begin,
                     .before_train_iter = timing_iter_begin,
                     .after_train_iter = timing_iter_end,
                     .after_train_epoch = timing_epoch_end,
                     .free = free};
}

/* ------------------------------------------------- LogMemoryByEpochHook */

typedef struct log_memory {
    FILE *out;
    pl_iteration_memory epoch; /* peaks and sums over the epoch */
} log_memory;

static pl_status memory_epoch_begin(pl_trainer_t *t, void *u) {
    (void)t;
    ((log_memory *)u)->epoch = (pl_iteration_memory){0};
    return PL_STATUS_OK;
}

static pl_status memory_iter_end(pl_trainer_t *t, void *u, const pl_step_result *r) {
    (void)r;
    log_memory *s = u;
    pl_iteration_memory m;
    pl_status st = pl_engine_memory(pl_trainer_engine(t), &m);
    if (st != PL_STATUS_OK)
        return st;
    if (m.peak_compute_bytes > s->epoch.peak_compute_bytes)
        s->epoch.peak_compute_bytes = m.peak_compute_bytes;
    if (m.peak_host_bytes > s->epoch.peak_host_bytes)
        s->epoch.peak_host_bytes = m.peak_host_bytes;
    s->epoch.bytes_moved += m.bytes_moved;
    const char *keys[5] = {"memory/peak_compute_bytes", "memory/peak_host_bytes",
                           "memory/bytes_moved", "memory/evictions", "memory/prefetch_hits"};
    const int64_t values[5] = {m.peak_compute_bytes, m.peak_host_bytes, m.bytes_moved,
                               m.evictions, m.prefetch_hits};
    for (int i = 0; i < 5 && st == PL_STATUS_OK; i++)
        st = pl_trainer_state_set(t, keys[i], (double)values[i]);
    /* Activation memory as the step's tasks ran, then the peaks restart:
     * each step's own. */
    pl_activation_bytes a;
    if (st == PL_STATUS_OK)
        st = pl_engine_activation_bytes(pl_trainer_engine(t), &a);
    const char *akeys[3] = {"memory/activation_peak_bytes", "memory/activation_grad_peak_bytes",
                            "memory/scratch_peak_bytes"};
    const int64_t avalues[3] = {a.values_peak, a.grads_peak, a.scratch_peak};
    for (int i = 0; i < 3 && st == PL_STATUS_OK; i++)
        st = pl_trainer_state_set(t, akeys[i], (double)avalues[i]);
    pl_engine_reset_activation_peak(pl_trainer_engine(t));
    return st;
}

static pl_status memory_epoch_end(pl_trainer_t *t, void *u) {
    log_memory *s = u;
    const double mib = 1048576.0;
    pl_hook_print(s->out,
                  "epoch %" PRId64 " memory: peak compute %.2f MiB, peak host %.2f MiB, "
                  "%.2f MiB moved\n",
                  pl_trainer_epoch(t) + 1, (double)s->epoch.peak_compute_bytes / mib,
                  (double)s->epoch.peak_host_bytes / mib, (double)s->epoch.bytes_moved / mib);
    return PL_STATUS_OK;
}

pl_hook pl_hook_log_memory_by_epoch(FILE *out) {
    log_memory *s = pl_hook_alloc(sizeof *s, "LogMemoryByEpochHook");
    if (s)
        s->out = out;
    return (pl_hook){.name = s ? "LogMemoryByEpochHook" : NULL, .priority = 0, .user_data = s,
                     .before_train_epoch = memory_epoch_begin,
                     .after_train_iter = memory_iter_end,
                     .after_train_epoch = memory_epoch_end,
                     .free = free};
}

/* ----------------------------------------------------------- progress */

typedef struct progress {
    FILE *out;
    double interval, started_at, last_line;
    int64_t first_step, samples;
    bool shown;
} progress;

static pl_status progress_begin(pl_trainer_t *t, void *u) {
    progress *s = u;
    s->started_at = s->last_line = pl_hook_now();
    s->first_step = pl_trainer_step(t); /* a resumed run's ETA counts from here */
    return PL_STATUS_OK;
}

/* Iterations left: to max_steps, or to the end of the last epoch. */
static int64_t steps_left(const pl_trainer_t *t) {
    int64_t in_epoch = pl_trainer_epoch_steps(t) - pl_trainer_epoch_step(t);
    int64_t left = in_epoch + (pl_trainer_max_epochs(t) - pl_trainer_epoch(t) - 1) *
                                  pl_trainer_epoch_steps(t);
    int64_t to_max = pl_trainer_max_steps(t) - pl_trainer_step(t);
    return pl_trainer_max_steps(t) > 0 && to_max < left ? to_max : left;
}

static pl_status progress_iter(pl_trainer_t *t, void *u, const pl_step_result *r) {
    progress *s = u;
    s->samples += r->size;
    double now = pl_hook_now();
    if (now - s->last_line < s->interval)
        return PL_STATUS_OK;
    s->last_line = now;
    double elapsed = now - s->started_at;
    int64_t done = pl_trainer_step(t) - s->first_step;
    double eta = done > 0 ? elapsed / (double)done * (double)steps_left(t) : 0;
    /* The steady rate (LogTimingByEpochHook's, past the warm-up) when
     * there is one, else the mean since the start. */
    double rate = elapsed > 0 ? (double)s->samples / elapsed : 0;
    bool steady = pl_trainer_state_get(t, "train/steady_samples_per_s", &rate);
    /* \r and erase-line: the line is rewritten in place on a terminal */
    fprintf(s->out, "\r\033[K  step %" PRId64 "  loss %.4f  %.0f samples/s%s  ETA %.0fs",
            pl_trainer_step(t), r->loss, rate, steady ? " (steady)" : "", eta);
    fflush(s->out);
    s->shown = true;
    return PL_STATUS_OK;
}

/* Erased before anything else is printed at the end of the epoch. */
static pl_status progress_clear(pl_trainer_t *t, void *u) {
    (void)t;
    progress *s = u;
    if (s->shown) {
        fputs("\r\033[K", s->out);
        fflush(s->out);
        s->shown = false;
    }
    return PL_STATUS_OK;
}

pl_hook pl_hook_progress(FILE *out, double interval_s) {
    /* Only on a terminal: a log file or pipe gets the epoch lines alone. */
    if (!out || !isatty(fileno(out)))
        return (pl_hook){.name = "ProgressHook (not a terminal)"};
    progress *s = pl_hook_alloc(sizeof *s, "ProgressHook");
    if (s) {
        s->out = out;
        s->interval = interval_s > 0 ? interval_s : 2.0;
    }
    /* Priority 9: its line is erased before the logging hooks (10) print. */
    return (pl_hook){.name = s ? "ProgressHook" : NULL, .priority = 9, .user_data = s,
                     .before_train = progress_begin,
                     .after_train_iter = progress_iter,
                     .after_train_epoch = progress_clear,
                     .before_test = progress_clear,
                     .free = free};
}
