/* The metric hooks (Colossal-AI's LossHook, AccuracyHook and
 * LRSchedulerHook): they turn each iteration's output into states that the
 * logging hooks read. Priority 0 (1 for the LR), so that they run before
 * anything that reports. Sample-weighted: a short last batch counts for
 * what it holds. */
#include <stdlib.h>

#include "pleiades.h"
#include "trainer/hooks/hook_util.h"
#include "util/error.h"

/* A running sample-weighted mean. */
typedef struct mean {
    double sum;
    int64_t n;
} mean;

static void mean_add(mean *m, double value, int64_t size) {
    m->sum += value * (double)size;
    m->n += size;
}

static double mean_of(const mean *m) { return m->n ? m->sum / (double)m->n : 0.0; }

/* ------------------------------------------------------------- LossHook */

typedef struct loss_state {
    mean train, test;
} loss_state;

static pl_status loss_train_epoch(pl_trainer_t *t, void *u) {
    (void)t;
    ((loss_state *)u)->train = (mean){0};
    return PL_STATUS_OK;
}

static pl_status loss_train_iter(pl_trainer_t *t, void *u, const pl_step_result *r) {
    loss_state *s = u;
    mean_add(&s->train, r->loss, r->size);
    pl_status st = pl_trainer_state_set(t, "train/iter_loss", r->loss);
    return st != PL_STATUS_OK ? st : pl_trainer_state_set(t, "train/loss", mean_of(&s->train));
}

static pl_status loss_test_epoch(pl_trainer_t *t, void *u) {
    (void)t;
    ((loss_state *)u)->test = (mean){0};
    return PL_STATUS_OK;
}

static pl_status loss_test_iter(pl_trainer_t *t, void *u, const pl_step_result *r) {
    (void)t;
    mean_add(&((loss_state *)u)->test, r->loss, r->size);
    return PL_STATUS_OK;
}

static pl_status loss_after_test_epoch(pl_trainer_t *t, void *u) {
    return pl_trainer_state_set(t, "test/loss", mean_of(&((loss_state *)u)->test));
}

pl_hook pl_hook_loss(void) {
    loss_state *s = pl_hook_alloc(sizeof *s, "LossHook");
    return (pl_hook){.name = s ? "LossHook" : NULL, .priority = 0, .user_data = s,
                     .before_train_epoch = loss_train_epoch,
                     .after_train_iter = loss_train_iter,
                     .before_test_epoch = loss_test_epoch,
                     .after_test_iter = loss_test_iter,
                     .after_test_epoch = loss_after_test_epoch,
                     .free = free};
}

/* --------------------------------------------------------- AccuracyHook */

typedef struct accuracy_state {
    int index;
    mean train, test;
} accuracy_state;

static pl_status accuracy_of(const accuracy_state *s, const pl_step_result *r, double *acc) {
    if (r->n_metrics <= s->index)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "AccuracyHook: the graph has %d metric(s), no metric %d (add one with "
                       "pl_accuracy)",
                       r->n_metrics, s->index);
    *acc = r->metrics[s->index];
    return PL_STATUS_OK;
}

static pl_status accuracy_train_epoch(pl_trainer_t *t, void *u) {
    (void)t;
    ((accuracy_state *)u)->train = (mean){0};
    return PL_STATUS_OK;
}

static pl_status accuracy_train_iter(pl_trainer_t *t, void *u, const pl_step_result *r) {
    accuracy_state *s = u;
    double acc = 0;
    pl_status st = accuracy_of(s, r, &acc);
    if (st != PL_STATUS_OK)
        return st;
    mean_add(&s->train, acc, r->size);
    return pl_trainer_state_set(t, "train/accuracy", mean_of(&s->train));
}

static pl_status accuracy_test_epoch(pl_trainer_t *t, void *u) {
    (void)t;
    ((accuracy_state *)u)->test = (mean){0};
    return PL_STATUS_OK;
}

static pl_status accuracy_test_iter(pl_trainer_t *t, void *u, const pl_step_result *r) {
    (void)t;
    accuracy_state *s = u;
    double acc = 0;
    pl_status st = accuracy_of(s, r, &acc);
    if (st == PL_STATUS_OK)
        mean_add(&s->test, acc, r->size);
    return st;
}

static pl_status accuracy_after_test_epoch(pl_trainer_t *t, void *u) {
    return pl_trainer_state_set(t, "test/accuracy", mean_of(&((accuracy_state *)u)->test));
}

pl_hook pl_hook_accuracy(int metric_index) {
    if (metric_index < 0 || metric_index >= PL_MAX_METRICS) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_hook_accuracy: metric index %d not in [0, %d)",
                metric_index, PL_MAX_METRICS);
        return (pl_hook){0};
    }
    accuracy_state *s = pl_hook_alloc(sizeof *s, "AccuracyHook");
    if (s)
        s->index = metric_index;
    return (pl_hook){.name = s ? "AccuracyHook" : NULL, .priority = 0, .user_data = s,
                     .before_train_epoch = accuracy_train_epoch,
                     .after_train_iter = accuracy_train_iter,
                     .before_test_epoch = accuracy_test_epoch,
                     .after_test_iter = accuracy_test_iter,
                     .after_test_epoch = accuracy_after_test_epoch,
                     .free = free};
}

/* ------------------------------------------------------ LRSchedulerHook */

/* The schedule itself lives in the engine (it moves with every real
 * update, also under accumulation and skipped overflow updates); the hook
 * records the rate each iteration is trained with, read before it runs. */
static pl_status lr_before_iter(pl_trainer_t *t, void *u) {
    (void)u;
    return pl_trainer_state_set(t, "lr", pl_engine_lr(pl_trainer_engine(t)));
}

pl_hook pl_hook_lr_scheduler(void) {
    return (pl_hook){.name = "LRSchedulerHook", .priority = 1,
                     .before_train_iter = lr_before_iter};
}
