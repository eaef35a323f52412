/* trainer_hooks: a user's own trainer hooks beside the built-in ones.
 *
 *   trainer_hooks [MAX_EPOCHS]   (default 60)
 *
 * An MLP learns a noisy synthetic classification (a quarter of the
 * training labels are wrong, so it soon overfits) with pl_trainer_fit and
 * the built-in LossHook, AccuracyHook, LRSchedulerHook and
 * LogMetricByEpochHook, plus two hooks written here against the same
 * public interface (pleiades/trainer.h):
 *   - EarlyStopping: stops training when the validation loss has not
 *     improved by min_delta for `patience` evaluations (it reads the
 *     "test/loss" state LossHook keeps, and calls pl_trainer_stop);
 *   - GradNormLog: the global gradient norm of every update (the engine
 *     computes it when clipping is on; max_norm is set so high that it
 *     never clips), kept in the states and printed per epoch.
 * Registered as a CTest: it exits 1 unless early stopping ended the run
 * before MAX_EPOCHS, with the best validation loss at the epoch
 * `patience` before the stop, and a finite norm logged for every update. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <pleiades.h>

enum { IN = 16, HIDDEN = 256, K = 4, B = 32, TRAIN = 256, TEST = 512 };

/* ------------------------------------------------------------ the data */

typedef struct dataset {
    float x[TEST * IN];
    int32_t y[TEST];
    int64_t n, next;
    const void *data[2];
} dataset;

/* Class = quadrant of (x0 + x1, x2 - x3); with `noise`, that fraction of
 * the labels is replaced by a random class. */
static void make(dataset *d, int64_t n, uint64_t seed, double noise) {
    uint64_t s = seed;
    d->n = n;
    for (int64_t i = 0; i < n; i++) {
        for (int j = 0; j < IN; j++) {
            s = s * 6364136223846793005u + 1442695040888963407u;
            d->x[i * IN + j] = (float)((s >> 40) / 16777216.0) * 2 - 1;
        }
        const float *x = d->x + i * IN;
        d->y[i] = (x[0] + x[1] > 0) * 2 + (x[2] - x[3] > 0);
        s = s * 6364136223846793005u + 1442695040888963407u;
        if ((double)(s >> 11) / 9007199254740992.0 < noise)
            d->y[i] = (int32_t)((s >> 20) % K);
    }
}

/* A pl_data_source over a dataset, in order. */
static int64_t start(void *u, int64_t epoch) {
    (void)epoch;
    dataset *d = u;
    d->next = 0;
    return d->n / B;
}

static int next(void *u, pl_batch *b) {
    dataset *d = u;
    if (d->next + B > d->n)
        return 0;
    d->data[0] = d->x + d->next * IN;
    d->data[1] = d->y + d->next;
    d->next += B;
    *b = (pl_batch){.size = B, .data = d->data};
    return 1;
}

/* ------------------------------------------------- the user's hooks */

typedef struct early_stopping {
    int patience;
    double min_delta;
    double best;
    int64_t best_epoch, evaluations_since_best;
} early_stopping;

static pl_status early_stopping_check(pl_trainer_t *t, void *u) {
    early_stopping *s = u;
    double loss;
    if (!pl_trainer_state_get(t, "test/loss", &loss))
        return PL_STATUS_OK; /* no LossHook: nothing to watch */
    if (loss < s->best - s->min_delta) {
        s->best = loss;
        s->best_epoch = pl_trainer_epoch(t) + 1;
        s->evaluations_since_best = 0;
    } else if (++s->evaluations_since_best >= s->patience) {
        char reason[128];
        snprintf(reason, sizeof reason, "validation loss %.4f has not improved on %.4f (epoch %lld) "
                 "for %d epochs", loss, s->best, (long long)s->best_epoch, s->patience);
        pl_trainer_stop(t, reason);
    }
    return PL_STATUS_OK;
}

/* Priority 20: after LossHook (0) has set "test/loss". */
static pl_hook early_stopping_hook(early_stopping *s) {
    return (pl_hook){.name = "EarlyStopping", .priority = 20, .user_data = s,
                     .after_test_epoch = early_stopping_check};
}

typedef struct grad_norm_log {
    int64_t updates, finite;
    double epoch_max;
} grad_norm_log;

static pl_status grad_norm_epoch(pl_trainer_t *t, void *u) {
    (void)t;
    ((grad_norm_log *)u)->epoch_max = 0;
    return PL_STATUS_OK;
}

static pl_status grad_norm_iter(pl_trainer_t *t, void *u, const pl_step_result *r) {
    (void)r;
    grad_norm_log *s = u;
    double norm;
    pl_status st = pl_engine_grad_norm(pl_trainer_engine(t), &norm);
    if (st != PL_STATUS_OK)
        return st;
    s->updates++;
    s->finite += isfinite(norm) && norm > 0;
    if (norm > s->epoch_max)
        s->epoch_max = norm;
    return pl_trainer_state_set(t, "train/grad_norm", norm);
}

static pl_status grad_norm_print(pl_trainer_t *t, void *u) {
    printf("  epoch %lld: largest gradient norm %.4f\n", (long long)pl_trainer_epoch(t) + 1,
           ((grad_norm_log *)u)->epoch_max);
    return PL_STATUS_OK;
}

static pl_hook grad_norm_hook(grad_norm_log *s) {
    return (pl_hook){.name = "GradNormLog", .priority = 10, .user_data = s,
                     .before_train_epoch = grad_norm_epoch,
                     .after_train_iter = grad_norm_iter,
                     .after_train_epoch = grad_norm_print};
}

/* ---------------------------------------------------------------- main */

static int fail(const char *what) {
    fprintf(stderr, "trainer_hooks: %s: %s\n", what, pl_last_error());
    return 1;
}

int main(int argc, char **argv) {
    long max_epochs = argc > 1 ? strtol(argv[1], NULL, 10) : 60;
    if (max_epochs < 1 || max_epochs > 10000) {
        fprintf(stderr, "trainer_hooks: MAX_EPOCHS must be in 1..10000\n");
        return 2;
    }
    static dataset train, test;
    make(&train, TRAIN, 1, 0.25);
    make(&test, TEST, 2, 0.0);

    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 2;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt)
        return fail("pl_runtime_new");
    pl_graph_t *g = pl_graph_new(42);
    int64_t shape[1] = {IN};
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, shape);
    pl_tensor_t *y = pl_graph_input(g, "y", PL_DTYPE_I32, 0, NULL);
    pl_tensor_t *h = pl_relu(g, pl_linear(g, x, HIDDEN, "fc1"));
    h = pl_relu(g, pl_linear(g, h, HIDDEN, "fc2"));
    pl_tensor_t *logits = pl_linear(g, h, K, "head");
    if (pl_graph_set_loss(g, pl_cross_entropy(g, logits, y)) != PL_STATUS_OK ||
        !pl_accuracy(g, logits, y))
        return fail("building the model");

    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = B;
    eo.optimizer.lr = 3e-3f;
    eo.max_norm = 1e30f; /* never clips; makes the engine compute the norm */
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    if (!e)
        return fail("pl_engine_new");

    pl_trainer_t *t = pl_trainer_new(e);
    early_stopping stopper = {.patience = 3, .min_delta = 1e-3, .best = INFINITY};
    grad_norm_log norms = {0};
    pl_log_metric_options lo = {.out = stdout, .test_name = "val"};
    pl_hook hooks[] = {pl_hook_loss(),          pl_hook_accuracy(0),
                       pl_hook_lr_scheduler(),  pl_hook_log_timing_by_epoch(NULL, 0),
                       pl_hook_log_metric_by_epoch(&lo), early_stopping_hook(&stopper),
                       grad_norm_hook(&norms)};
    for (size_t i = 0; i < sizeof hooks / sizeof *hooks; i++)
        if (pl_trainer_add_hook(t, hooks[i]) != PL_STATUS_OK)
            return fail("pl_trainer_add_hook");

    pl_fit_options fo = pl_fit_options_default();
    fo.train = (pl_data_source){.start_epoch = start, .next = next, .user_data = &train};
    fo.test = (pl_data_source){.start_epoch = start, .next = next, .user_data = &test};
    fo.has_test = true;
    fo.epochs = max_epochs;
    if (pl_trainer_fit(t, &fo) != PL_STATUS_OK)
        return fail("pl_trainer_fit");

    const char *reason;
    bool stopped = pl_trainer_stopped(t, &reason);
    int64_t epochs = pl_trainer_epoch(t) + 1, steps = pl_trainer_step(t);
    printf("%s after epoch %lld (%lld updates)%s%s\n", stopped ? "stopped early" : "ran out of epochs",
           (long long)epochs, (long long)steps, stopped ? ": " : "", stopped ? reason : "");
    int status = 0;
    if (!stopped || epochs >= max_epochs || stopper.best_epoch != epochs - stopper.patience) {
        fprintf(stderr, "FAIL: early stopping: stopped %d at epoch %lld, best epoch %lld\n",
                stopped, (long long)epochs, (long long)stopper.best_epoch);
        status = 1;
    }
    if (norms.updates != steps || norms.finite != steps) {
        fprintf(stderr, "FAIL: %lld gradient norms logged (%lld finite) for %lld updates\n",
                (long long)norms.updates, (long long)norms.finite, (long long)steps);
        status = 1;
    }
    pl_trainer_free(t);
    pl_engine_free(e);
    pl_graph_free(g);
    pl_runtime_free(rt);
    return status;
}
