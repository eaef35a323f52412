/* The trainer (Colossal-AI's Trainer.fit): epochs of an engine, with hooks
 * called at the 13 points of BaseHook's life cycle. It is written against
 * the public API only, like a user's training loop would be; what it adds
 * is the loop's shape, so every hook sees the same points in the same
 * order whoever wrote it. */
#define _POSIX_C_SOURCE 200809L /* strdup */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pleiades.h"
#include "util/error.h"

enum { MAX_HOOKS = 64, MAX_STATES = 128, STATE_KEY_LEN = 64 };

struct pl_trainer {
    pl_engine_t *engine;
    pl_hook hooks[MAX_HOOKS];
    int n_hooks;
    bool fitting;
    /* position */
    int64_t epoch, step, epochs, max_steps;
    int64_t epoch_steps, epoch_step; /* iterations of the epoch: all, done */
    bool last_epoch; /* set before after_train_epoch of the last */
    bool has_test;
    int64_t test_interval;
    int64_t max_test_batches; /* 0: all */
    bool begun; /* past before_train: the position is fixed */
    /* resume_at */
    bool resume_pending;
    int64_t resume_epoch, resume_batch;
    /* stop */
    bool stop;
    char *stop_reason;
    /* states, in first-set order */
    int n_states;
    char state_key[MAX_STATES][STATE_KEY_LEN];
    double state_value[MAX_STATES];
};

/* ------------------------------------------------------------- lifetime */

pl_trainer_t *pl_trainer_new(pl_engine_t *e) {
    if (!e) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_trainer_new: engine is NULL");
        return NULL;
    }
    pl_trainer_t *t = calloc(1, sizeof *t);
    if (!t) {
        pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_trainer_new: out of memory");
        return NULL;
    }
    t->engine = e;
    t->epochs = 1;
    return t;
}

static void hook_release(pl_hook *h) {
    if (h->free && h->user_data)
        h->free(h->user_data);
    h->user_data = NULL;
}

void pl_trainer_free(pl_trainer_t *t) {
    if (!t)
        return;
    for (int i = 0; i < t->n_hooks; i++)
        hook_release(&t->hooks[i]);
    free(t->stop_reason);
    free(t);
}

pl_status pl_trainer_add_hook(pl_trainer_t *t, pl_hook hook) {
    pl_status st = PL_STATUS_OK;
    if (!hook.name)
        /* a built-in's constructor failed and said why */
        st = pl_last_status() != PL_STATUS_OK ? pl_last_status() : PL_STATUS_INVALID_ARGUMENT;
    else if (!t)
        st = pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_trainer_add_hook: trainer is NULL");
    else if (t->fitting)
        st = pl_fail(PL_STATUS_INVALID_ARGUMENT,
                     "pl_trainer_add_hook: cannot add hook '%s' during pl_trainer_fit",
                     hook.name);
    else if (t->n_hooks == MAX_HOOKS)
        st = pl_fail(PL_STATUS_INVALID_ARGUMENT,
                     "pl_trainer_add_hook: hook '%s' is one too many (at most %d)", hook.name,
                     MAX_HOOKS);
    if (st != PL_STATUS_OK) {
        hook_release(&hook);
        return st;
    }
    /* Insertion sort by priority, after hooks of equal priority: the order
     * is stable, so equal priorities run in the order they were added. */
    int i = t->n_hooks++;
    for (; i > 0 && t->hooks[i - 1].priority > hook.priority; i--)
        t->hooks[i] = t->hooks[i - 1];
    t->hooks[i] = hook;
    return PL_STATUS_OK;
}

/* --------------------------------------------------------------- states */

static int state_find(const pl_trainer_t *t, const char *key) {
    for (int i = 0; i < t->n_states; i++)
        if (strcmp(t->state_key[i], key) == 0)
            return i;
    return -1;
}

static pl_status state_put(pl_trainer_t *t, const char *key, double value, bool overwrite,
                           const char *fn) {
    if (!t || !key || !key[0])
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "%s: trainer or key missing", fn);
    if (strlen(key) >= STATE_KEY_LEN)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "%s: key '%s' is longer than %d bytes", fn,
                       key, STATE_KEY_LEN - 1);
    int i = state_find(t, key);
    if (i >= 0) {
        if (overwrite)
            t->state_value[i] = value;
        return PL_STATUS_OK;
    }
    if (t->n_states == MAX_STATES)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "%s: no room for key '%s' (%d states)", fn,
                       key, MAX_STATES);
    i = t->n_states++;
    strcpy(t->state_key[i], key);
    t->state_value[i] = value;
    return PL_STATUS_OK;
}

pl_status pl_trainer_state_set(pl_trainer_t *t, const char *key, double value) {
    return state_put(t, key, value, true, "pl_trainer_state_set");
}

pl_status pl_trainer_state_init(pl_trainer_t *t, const char *key, double value) {
    return state_put(t, key, value, false, "pl_trainer_state_init");
}

bool pl_trainer_state_get(const pl_trainer_t *t, const char *key, double *value) {
    int i = t && key ? state_find(t, key) : -1;
    if (i < 0)
        return false;
    if (value)
        *value = t->state_value[i];
    return true;
}

int pl_trainer_state_count(const pl_trainer_t *t) { return t ? t->n_states : 0; }

const char *pl_trainer_state_at(const pl_trainer_t *t, int i, double *value) {
    if (!t || i < 0 || i >= t->n_states)
        return NULL;
    if (value)
        *value = t->state_value[i];
    return t->state_key[i];
}

/* ------------------------------------------------------------- position */

pl_engine_t *pl_trainer_engine(const pl_trainer_t *t) { return t ? t->engine : NULL; }
int64_t pl_trainer_epoch(const pl_trainer_t *t) { return t ? t->epoch : 0; }
int64_t pl_trainer_step(const pl_trainer_t *t) { return t ? t->step : 0; }
int64_t pl_trainer_max_epochs(const pl_trainer_t *t) { return t ? t->epochs : 0; }
int64_t pl_trainer_max_steps(const pl_trainer_t *t) { return t ? t->max_steps : 0; }
int64_t pl_trainer_epoch_steps(const pl_trainer_t *t) { return t ? t->epoch_steps : 0; }
int64_t pl_trainer_epoch_step(const pl_trainer_t *t) { return t ? t->epoch_step : 0; }
bool pl_trainer_last_epoch(const pl_trainer_t *t) { return t && t->last_epoch; }
bool pl_trainer_test_due(const pl_trainer_t *t) {
    return t && t->has_test && (t->last_epoch || (t->epoch + 1) % t->test_interval == 0);
}
int pl_trainer_accumulate(const pl_trainer_t *t) {
    return t ? pl_engine_accumulate_size(t->engine) : 1;
}

void pl_trainer_position(const pl_trainer_t *t, int64_t *epoch, int64_t *batch) {
    int64_t e = 0, b = 0;
    if (t) {
        e = t->epoch;
        b = t->epoch_step * pl_trainer_accumulate(t);
        if (t->epoch_steps > 0 && t->epoch_step >= t->epoch_steps) {
            e++;
            b = 0;
        }
    }
    if (epoch)
        *epoch = e;
    if (batch)
        *batch = b;
}

pl_status pl_trainer_resume_at(pl_trainer_t *t, int64_t epoch, int64_t batch, int64_t step) {
    if (!t)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_trainer_resume_at: trainer is NULL");
    if (!t->fitting || t->begun)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_trainer_resume_at: %s; resume in before_train",
                       t->fitting ? "training has begun" : "not fitting");
    int acc = pl_trainer_accumulate(t);
    /* Positions come from checkpoint files: bounded (2^52, exact in the
     * doubles of the trainer's state) before anything counts with them. */
    const int64_t most = (int64_t)1 << 52;
    if (epoch < 0 || batch < 0 || step < 0 || epoch > most || batch > most || step > most ||
        batch % acc != 0)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_trainer_resume_at: position epoch %lld, batch %lld, step %lld is not "
                       "one training can be at (each in [0, 2^52], batch a multiple of %d)",
                       (long long)epoch, (long long)batch, (long long)step, acc);
    t->resume_pending = true;
    t->resume_epoch = epoch;
    t->resume_batch = batch;
    t->step = step;
    return PL_STATUS_OK;
}

void pl_trainer_stop(pl_trainer_t *t, const char *reason) {
    if (!t)
        return;
    t->stop = true;
    free(t->stop_reason);
    t->stop_reason = reason ? strdup(reason) : NULL;
}

bool pl_trainer_stopped(const pl_trainer_t *t, const char **reason) {
    if (reason)
        *reason = t && t->stop_reason ? t->stop_reason : "";
    return t && t->stop;
}

/* ---------------------------------------------------------- hook calls */

/* Which callback of a hook: an offset into pl_hook, so that one loop
 * serves the 11 plain points. */
#define POINT(field) offsetof(pl_hook, field), #field

/* A hook's failure: its own message, with the hook and point named. */
static pl_status hook_failed(const pl_hook *h, pl_status st, const char *point) {
    return pl_fail(st, "%s (in hook %s, %s)", pl_last_error(), h->name, point);
}

static pl_status call_hooks(pl_trainer_t *t, size_t offset, const char *point) {
    for (int i = 0; i < t->n_hooks; i++) {
        pl_hook *h = &t->hooks[i];
        pl_hook_fn fn;
        memcpy(&fn, (const char *)h + offset, sizeof fn);
        if (!fn)
            continue;
        pl_status st = fn(t, h->user_data);
        if (st != PL_STATUS_OK)
            return hook_failed(h, st, point);
    }
    return PL_STATUS_OK;
}

static pl_status call_iter_hooks(pl_trainer_t *t, bool train, const pl_step_result *r) {
    for (int i = 0; i < t->n_hooks; i++) {
        pl_hook *h = &t->hooks[i];
        pl_hook_iter_fn fn = train ? h->after_train_iter : h->after_test_iter;
        if (!fn)
            continue;
        pl_status st = fn(t, h->user_data, r);
        if (st != PL_STATUS_OK)
            return hook_failed(h, st, train ? "after_train_iter" : "after_test_iter");
    }
    return PL_STATUS_OK;
}

/* ---------------------------------------------------------- iterations */

/* Sample-weighted sums of an iteration's batches. */
typedef struct iter_sum {
    double loss, metrics[PL_MAX_METRICS];
    int n_metrics;
    int64_t size;
} iter_sum;

static void iter_add(iter_sum *s, const pl_step_result *r) {
    double w = (double)r->size;
    s->loss += r->loss * w;
    s->n_metrics = r->n_metrics;
    for (int k = 0; k < r->n_metrics && k < PL_MAX_METRICS; k++)
        s->metrics[k] += r->metrics[k] * w;
    s->size += r->size;
}

/* The iteration's result: the means, with the last batch's output. With
 * one batch the loss is passed through untouched (no rounding). */
static void iter_result(const iter_sum *s, int batches, pl_step_result *r) {
    if (batches == 1 || s->size == 0)
        return;
    double n = (double)s->size;
    r->loss = s->loss / n;
    r->n_metrics = s->n_metrics;
    for (int k = 0; k < s->n_metrics && k < PL_MAX_METRICS; k++)
        r->metrics[k] = s->metrics[k] / n;
    r->size = s->size;
}

static pl_status next_batch(const pl_data_source *src, pl_batch *b, const char *what) {
    int got = src->next(src->user_data, b);
    if (got < 0)
        return pl_fail(pl_last_status() != PL_STATUS_OK ? pl_last_status() : PL_STATUS_IO_ERROR,
                       "pl_trainer_fit: the %s data source failed: %s", what, pl_last_error());
    if (got == 0)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_trainer_fit: the %s data source ended before the batch count its "
                       "start_epoch gave",
                       what);
    return PL_STATUS_OK;
}

static pl_status train_iteration(pl_trainer_t *t, const pl_data_source *src) {
    pl_status st = call_hooks(t, POINT(before_train_iter));
    if (st != PL_STATUS_OK)
        return st;
    int acc = pl_trainer_accumulate(t);
    iter_sum sum = {0};
    pl_step_result r = {0};
    for (int k = 0; k < acc; k++) {
        pl_batch b;
        if ((st = next_batch(src, &b, "training")) != PL_STATUS_OK)
            return st;
        if ((st = pl_engine_train_step(t->engine, &b, &r)) != PL_STATUS_OK)
            return pl_fail(st, "training step %lld failed: %s", (long long)t->step + 1,
                           pl_last_error());
        iter_add(&sum, &r);
    }
    iter_result(&sum, acc, &r);
    t->step++;
    t->epoch_step++;
    return call_iter_hooks(t, true, &r);
}

static pl_status skip_batches(const pl_data_source *src, int64_t n) {
    if (n <= 0)
        return PL_STATUS_OK;
    if (src->skip)
        return src->skip(src->user_data, n);
    for (int64_t i = 0; i < n; i++) {
        pl_batch b;
        pl_status st = next_batch(src, &b, "training");
        if (st != PL_STATUS_OK)
            return st;
    }
    return PL_STATUS_OK;
}

static bool past_max_steps(const pl_trainer_t *t) {
    return t->max_steps > 0 && t->step >= t->max_steps;
}

static pl_status train_epoch(pl_trainer_t *t, const pl_data_source *src) {
    int64_t batches = src->start_epoch(src->user_data, t->epoch);
    if (batches < 0)
        return pl_fail(pl_last_status() != PL_STATUS_OK ? pl_last_status() : PL_STATUS_IO_ERROR,
                       "pl_trainer_fit: cannot start training epoch %lld: %s",
                       (long long)t->epoch, pl_last_error());
    int acc = pl_trainer_accumulate(t);
    t->epoch_steps = batches / acc;
    t->epoch_step = 0;
    if (t->resume_pending) {
        t->resume_pending = false;
        if (t->resume_batch > t->epoch_steps * acc)
            return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                           "pl_trainer_fit: resuming at batch %lld of epoch %lld, which holds "
                           "%lld",
                           (long long)t->resume_batch, (long long)t->epoch,
                           (long long)(t->epoch_steps * acc));
        pl_status st = skip_batches(src, t->resume_batch);
        if (st != PL_STATUS_OK)
            return st;
        t->epoch_step = t->resume_batch / acc;
    }
    pl_status st = call_hooks(t, POINT(before_train_epoch));
    while (st == PL_STATUS_OK && t->epoch_step < t->epoch_steps && !t->stop &&
           !past_max_steps(t))
        st = train_iteration(t, src);
    t->last_epoch = t->epoch + 1 >= t->epochs || t->stop || past_max_steps(t);
    if (st == PL_STATUS_OK)
        st = call_hooks(t, POINT(after_train_epoch));
    return st;
}

static pl_status test_epoch(pl_trainer_t *t, const pl_data_source *src) {
    int64_t batches = src->start_epoch(src->user_data, 0);
    if (batches < 0)
        return pl_fail(pl_last_status() != PL_STATUS_OK ? pl_last_status() : PL_STATUS_IO_ERROR,
                       "pl_trainer_fit: cannot start the test data: %s", pl_last_error());
    if (t->max_test_batches > 0 && batches > t->max_test_batches)
        batches = t->max_test_batches;
    pl_status st = call_hooks(t, POINT(before_test));
    if (st == PL_STATUS_OK)
        st = call_hooks(t, POINT(before_test_epoch));
    const pl_step_options fwd = {.forward_only = true, .return_loss = true,
                                 .return_output_label = true};
    for (int64_t i = 0; i < batches && st == PL_STATUS_OK; i++) {
        pl_batch b;
        pl_step_result r = {0};
        st = call_hooks(t, POINT(before_test_iter));
        if (st == PL_STATUS_OK)
            st = next_batch(src, &b, "test");
        if (st == PL_STATUS_OK &&
            (st = pl_engine_forward_backward(t->engine, &b, &fwd, &r)) != PL_STATUS_OK)
            st = pl_fail(st, "evaluation after step %lld failed: %s", (long long)t->step,
                         pl_last_error());
        if (st == PL_STATUS_OK)
            st = call_iter_hooks(t, false, &r);
    }
    if (st == PL_STATUS_OK)
        st = call_hooks(t, POINT(after_test_epoch));
    if (st == PL_STATUS_OK)
        st = call_hooks(t, POINT(after_test));
    return st;
}

static bool source_ok(const pl_data_source *s) { return s->start_epoch && s->next; }

pl_fit_options pl_fit_options_default(void) {
    return (pl_fit_options){.epochs = 1, .test_interval = 1};
}

pl_status pl_trainer_fit(pl_trainer_t *t, const pl_fit_options *o) {
    if (!t || !o)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_trainer_fit: trainer or options NULL");
    if (t->fitting)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_trainer_fit: already fitting");
    if (!source_ok(&o->train) || (o->has_test && !source_ok(&o->test)))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_trainer_fit: the %s data source lacks start_epoch or next",
                       source_ok(&o->train) ? "test" : "training");
    if (o->max_test_batches < 0)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_trainer_fit: max_test_batches %lld (>= 0; 0 = all)",
                       (long long)o->max_test_batches);
    if (o->epochs < 1 || o->max_steps < 0 || o->test_interval < 1)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_trainer_fit: epochs %lld (>= 1), max_steps %lld (>= 0), "
                       "test_interval %lld (>= 1)",
                       (long long)o->epochs, (long long)o->max_steps,
                       (long long)o->test_interval);
    t->fitting = true;
    t->epochs = o->epochs;
    t->max_steps = o->max_steps;
    t->has_test = o->has_test;
    t->test_interval = o->test_interval;
    t->max_test_batches = o->max_test_batches;
    t->epoch = t->step = t->epoch_step = t->epoch_steps = 0;
    t->stop = t->last_epoch = t->begun = false;
    t->resume_pending = false;

    pl_status st = call_hooks(t, POINT(after_hook_is_attached));
    if (st == PL_STATUS_OK)
        st = call_hooks(t, POINT(before_train));
    t->begun = true;
    if (st == PL_STATUS_OK && t->resume_pending)
        t->epoch = t->resume_epoch;
    bool more = t->epoch < t->epochs && !t->stop && !past_max_steps(t);
    while (st == PL_STATUS_OK && more) {
        st = train_epoch(t, &o->train);
        if (st == PL_STATUS_OK && pl_trainer_test_due(t))
            st = test_epoch(t, &o->test);
        /* A stop asked for by a test hook (early stopping) counts too. */
        more = !t->last_epoch && !t->stop;
        if (st == PL_STATUS_OK && more)
            t->epoch++;
    }
    if (st == PL_STATUS_OK)
        st = call_hooks(t, POINT(after_train));
    t->fitting = false;
    return st;
}
