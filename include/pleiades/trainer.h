/*
 * pleiades/trainer.h — the trainer: epochs of an engine with hooks at the
 * 13 points of Colossal-AI's BaseHook life cycle (part of pleiades.h).
 *
 *   pl_trainer_t *t = pl_trainer_new(engine);
 *   pl_trainer_add_hook(t, pl_hook_loss());
 *   pl_trainer_add_hook(t, pl_hook_accuracy(0));
 *   pl_log_metric_options lo = {.out = stdout};
 *   pl_trainer_add_hook(t, pl_hook_log_metric_by_epoch(&lo));
 *   pl_fit_options fo = pl_fit_options_default();
 *   fo.train = pl_data_source_loader(train_loader);
 *   fo.test = pl_data_source_loader(test_loader); fo.has_test = true;
 *   fo.epochs = 5;
 *   pl_trainer_fit(t, &fo);
 *   pl_trainer_free(t);
 *
 * An iteration is one optimizer update: accumulate_size batches (the
 * engine's gradient accumulation). Hooks run in priority order (lower
 * first, Colossal-AI's rule; ties in the order they were added), share the
 * trainer's states (a key -> number store) and may stop training.
 */
#ifndef PLEIADES_TRAINER_H
#define PLEIADES_TRAINER_H

#include <stdio.h>

#include "pleiades/checkpoint.h"
#include "pleiades/data.h"
#include "pleiades/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ----------------------------------------------------------- data sources */

/* Where the trainer's batches come from: a struct of callbacks, so a
 * user's generator is as good as the built-in loaders. */
typedef struct pl_data_source {
    /* Begins epoch `epoch` (0-based): returns the batches it holds, or -1
     * with pl_last_error() set. */
    int64_t (*start_epoch)(void *user_data, int64_t epoch);
    /* The next batch of the epoch (valid until the next call): 1, or 0
     * when the epoch has no more, or -1 with pl_last_error() set. */
    int (*next)(void *user_data, pl_batch *batch);
    /* Optional: skips `n` batches of the epoch begun (resuming mid-epoch);
     * NULL = the trainer calls `next` n times. */
    pl_status (*skip)(void *user_data, int64_t n);
    void *user_data;
} pl_data_source;

/* A loader (pl_loader_new) as a source; the loader must outlive it. */
pl_data_source pl_data_source_loader(pl_loader_t *loader);

/* Windows of a text dataset or token file (pl_text_batch) as a source: batch i of the
 * stream is pl_text_batch(ds, batch_size, context, seed, i). An epoch holds
 * batches_per_epoch batches; with `restart` every epoch is the stream's
 * first batches again (a fixed validation set), else epoch e continues at
 * batch e * batches_per_epoch. NULL on bad arguments or no memory. */
typedef struct pl_text_source pl_text_source_t;
pl_text_source_t *pl_text_source_new(const pl_dataset_t *ds, int64_t batch_size,
                                     int64_t context, uint64_t seed,
                                     int64_t batches_per_epoch, bool restart);
pl_data_source pl_text_source(pl_text_source_t *s);
/* Data parallelism: batch_size is the global batch, which `world` must
 * divide; this rank's batches are windows rank, rank + world, ... of each
 * global batch (pl_loader_set_shard's split). */
pl_status pl_text_source_set_shard(pl_text_source_t *s, int rank, int world);
void pl_text_source_free(pl_text_source_t *s);

/* ----------------------------------------------------------------- hooks */

typedef struct pl_trainer pl_trainer_t;

/* Every point is optional (NULL); a non-OK status stops the run, and
 * pl_trainer_fit returns it (after no further hook is called). */
typedef pl_status (*pl_hook_fn)(pl_trainer_t *t, void *user_data);
/* after_train_iter / after_test_iter: the iteration's output. With
 * accumulation the loss and metrics are the sample-weighted means over its
 * batches, `size` their total, output and labels those of the last batch. */
typedef pl_status (*pl_hook_iter_fn)(pl_trainer_t *t, void *user_data,
                                     const pl_step_result *output);

typedef struct pl_hook {
    const char *name;  /* for messages; kept as a pointer */
    int priority;      /* lower runs first */
    void *user_data;   /* owned by the trainer once added: `free` below */
    pl_hook_fn after_hook_is_attached;
    pl_hook_fn before_train, after_train;
    pl_hook_fn before_train_epoch, after_train_epoch;
    pl_hook_fn before_train_iter;
    pl_hook_iter_fn after_train_iter;
    pl_hook_fn before_test, after_test;
    pl_hook_fn before_test_epoch, after_test_epoch;
    pl_hook_fn before_test_iter;
    pl_hook_iter_fn after_test_iter;
    void (*free)(void *user_data); /* called by pl_trainer_free; may be NULL */
} pl_hook;

/* ---------------------------------------------------------------- trainer */

/* A trainer over `e` (which must outlive it): the caller owns the trainer,
 * the engine stays the caller's. */
pl_trainer_t *pl_trainer_new(pl_engine_t *e);
/* Frees the trainer and, through their `free`, its hooks' user data (never
 * the engine). */
void pl_trainer_free(pl_trainer_t *t);
/* Adds a hook (copied). Fails (INVALID_ARGUMENT) during pl_trainer_fit;
 * on failure the hook's user data is freed all the same, so a caller can
 * write pl_trainer_add_hook(t, pl_hook_loss()) without leaking. A hook
 * whose name is NULL is a constructor's failure: refused with the error
 * the constructor left in pl_last_error(). */
pl_status pl_trainer_add_hook(pl_trainer_t *t, pl_hook hook);

typedef struct pl_fit_options {
    pl_data_source train;
    pl_data_source test;   /* used when has_test */
    bool has_test;
    int64_t epochs;        /* >= 1 */
    int64_t max_steps;     /* iterations (updates) in all, resumed ones
                              included; 0 = no limit */
    int64_t test_interval; /* evaluate after every test_interval-th epoch
                              (counted from 1) and after the last; >= 1.
                              Colossal-AI tests when epoch % interval == 0
                              counting from 0, so after the first epoch
                              but not always after the last: a run's final
                              model is always evaluated here. */
    int64_t max_test_batches; /* each evaluation runs at most this many of
                                 the test source's batches; 0 = all
                                 (Lightning's limit_val_batches) */
} pl_fit_options;

pl_fit_options pl_fit_options_default(void); /* 1 epoch, test_interval 1 */

/* Runs training:
 *   after_hook_is_attached, before_train,
 *   per epoch: before_train_epoch, per iteration (before_train_iter,
 *     after_train_iter), after_train_epoch, and when an evaluation is due:
 *     before_test, before_test_epoch, per test batch (before_test_iter,
 *     after_test_iter), after_test_epoch, after_test;
 *   after_train.
 * An epoch trains floor(batches / accumulate_size) iterations (the last
 * batches that cannot fill an update are not drawn). max_steps or a stop
 * ends the epoch after the iteration in progress; that epoch's evaluation
 * still runs. */
pl_status pl_trainer_fit(pl_trainer_t *t, const pl_fit_options *o);

/* Asks training to stop after the current iteration (or, from a test
 * hook, before the next epoch); `reason` (copied) is in pl_trainer_stopped. */
void pl_trainer_stop(pl_trainer_t *t, const char *reason);
/* Whether a stop was asked for; *reason (may be NULL) gets it. */
bool pl_trainer_stopped(const pl_trainer_t *t, const char **reason);

pl_engine_t *pl_trainer_engine(const pl_trainer_t *t);
/* The epoch being run (0-based) and iterations completed so far (the one
 * whose after_train_iter runs included). */
int64_t pl_trainer_epoch(const pl_trainer_t *t);
int64_t pl_trainer_step(const pl_trainer_t *t);
int64_t pl_trainer_max_epochs(const pl_trainer_t *t);
int64_t pl_trainer_max_steps(const pl_trainer_t *t);    /* 0 = none */
/* Iterations of the current epoch: its total and those done. */
int64_t pl_trainer_epoch_steps(const pl_trainer_t *t);
int64_t pl_trainer_epoch_step(const pl_trainer_t *t);
/* true from after_train_epoch of the run's last epoch on (the epochs ran
 * out, max_steps was reached or a stop was asked for): e.g. for what is
 * written once, after the last training iteration. */
bool pl_trainer_last_epoch(const pl_trainer_t *t);
/* Whether an evaluation follows the current training epoch. */
bool pl_trainer_test_due(const pl_trainer_t *t);
/* Batches per iteration (the engine's accumulate_size). */
int pl_trainer_accumulate(const pl_trainer_t *t);
/* Where training would continue after the iterations done: the epoch and
 * the batches of it already trained (an epoch whose iterations are all
 * done gives the next epoch, batch 0). What a checkpoint records. */
void pl_trainer_position(const pl_trainer_t *t, int64_t *epoch, int64_t *batch);
/* Continue from a position (before_train only, e.g. LoadCheckpointHook;
 * a later call replaces an earlier one): training starts at `epoch`,
 * skipping `batch` batches of it (a multiple of accumulate_size), with
 * `step` iterations counted as done. */
pl_status pl_trainer_resume_at(pl_trainer_t *t, int64_t epoch, int64_t batch,
                               int64_t step);

/* The states: a small key -> number store the hooks share (metrics such as
 * "train/loss", "test/accuracy", "lr"; see the built-in hooks). Keys are
 * at most 63 bytes. */
pl_status pl_trainer_state_set(pl_trainer_t *t, const char *key, double value);
/* Colossal-AI's init_runner_states: sets `key` only when it is absent. */
pl_status pl_trainer_state_init(pl_trainer_t *t, const char *key, double value);
/* false when absent. */
bool pl_trainer_state_get(const pl_trainer_t *t, const char *key, double *value);
/* The states in the order they were first set: key (valid until the next
 * set) and value of entry i < pl_trainer_state_count(t). */
int pl_trainer_state_count(const pl_trainer_t *t);
const char *pl_trainer_state_at(const pl_trainer_t *t, int i, double *value);

/* ------------------------------------------------------- built-in hooks
 *
 * Written against the hook interface above (trainer/hooks/), with
 * Colossal-AI's priorities (metric hooks 0, LR 1, logging and saving 10),
 * but the memory sampling at 0 and the timing at 5, so that an iteration's
 * time includes the wait for its update and is ready for the writers, and
 * the progress line at 9, erased before the logging hooks print.
 * States they write:
 *   pl_hook_loss         "train/loss" (epoch mean so far), "train/iter_loss",
 *                        "test/loss"
 *   pl_hook_accuracy     "test/accuracy" (from metric `index` of the
 *                        graph), and "train/accuracy"
 *   pl_hook_lr_scheduler "lr": the rate the iteration was trained with
 *                        (the schedule itself moves inside the engine,
 *                        with every real update)
 *   pl_hook_log_timing_by_epoch "train/iter_seconds", "train/samples_per_s" (the
 *                        iteration's), "train/epoch_samples_per_s" (the
 *                        epoch's, over its iterations' time),
 *                        "train/steady_samples_per_s" (the fit's mean past
 *                        its first PL_WARMUP_ITERATIONS iterations, absent
 *                        until then: allocation and StarPU's calibration
 *                        make them 3-5x slower)
 *   pl_hook_log_memory_by_epoch per iteration (pl_engine_memory, which waits for
 *                        the update): "memory/peak_compute_bytes",
 *                        "memory/peak_host_bytes", "memory/bytes_moved",
 *                        "memory/evictions", "memory/prefetch_hits";
 *                        priority 0, so that the timing includes the wait
 * Sample-weighted means: a short last batch counts for what it holds. */
#define PL_WARMUP_ITERATIONS 2
pl_hook pl_hook_loss(void);
pl_hook pl_hook_accuracy(int metric_index);
pl_hook pl_hook_lr_scheduler(void);
/* The progress line of each evaluated epoch (and of each epoch without an
 * evaluation) on `out`, from the states the other hooks keep:
 *   by epoch: "epoch E/N  train loss ..  test loss ..  test acc ..%  ..
 *             samples/s  elapsed ..s"
 *   by step:  "step S/M  train loss ..  val loss ..  .. tokens/s (steady)
 *             elapsed ..s" (train loss: the mean since the last line)
 * The rate is the steady state's ("(steady)": past the warm-up
 * iterations) once there is one, else the epoch's ("(warm-up)"). 
 * A field whose state is absent is left out. */
typedef struct pl_log_metric_options {
    FILE *out;
    bool by_step;              /* step lines (runs counted in max_steps) */
    const char *test_name;     /* "test" (default) or "val" */
    int64_t tokens_per_sample; /* > 0: tokens/s instead of samples/s */
} pl_log_metric_options;
pl_hook pl_hook_log_metric_by_epoch(const pl_log_metric_options *o);
pl_hook pl_hook_log_timing_by_epoch(FILE *out, int64_t tokens_per_sample);
/* Per-tier memory peaks of the epoch (pl_engine_memory) on `out`. */
pl_hook pl_hook_log_memory_by_epoch(FILE *out);

typedef struct pl_save_checkpoint_options {
    const char *dir;        /* checkpoints go to <dir>/step-<N> (copied) */
    int64_t every_steps;    /* a checkpoint every N iterations; 0 = none */
    bool at_end;            /* and after the last iteration */
    int keep_last;          /* 0 = keep all */
    pl_checkpoint_values values; /* saved with each ("epoch", "batch",
                                    "step" are added) */
    FILE *log;              /* "saved checkpoint <path>" lines; NULL = none */
    /* A save that fails (a full disk, say). NULL: the run stops, its error
     * naming the last checkpoint this hook saved. Otherwise called with the
     * failed path, the last good one (NULL: none yet) and the message:
     * PL_STATUS_OK goes on training without that checkpoint, any other
     * status stops the run. Data parallel: called on every rank, which
     * must all answer alike. */
    pl_status (*on_failure)(void *user, const char *failed, const char *last_good,
                            const char *message);
    void *on_failure_user;
} pl_save_checkpoint_options;
pl_hook pl_hook_save_checkpoint(const pl_save_checkpoint_options *o);

typedef struct pl_load_checkpoint_options {
    const char *path;       /* a checkpoint, or a root of step-<N> (the
                               newest is loaded) (copied) */
    FILE *log;              /* "resumed from <path> at step S (epoch E,
                               batch B)", E counted from 1; NULL = none */
} pl_load_checkpoint_options;
/* Loads in before_train and resumes the trainer where the checkpoint was
 * written; every value saved with it is in the states as
 * "checkpoint/<key>" (a later hook may check them: the seed, say). A
 * refused checkpoint fails the fit with a message naming it. */
pl_hook pl_hook_load_checkpoint(const pl_load_checkpoint_options *o);

/* The JSON Lines metrics file (one object per line, flushed per line):
 *   {"step":S[,"epoch":E],"loss":..,"lr":..,"samples_per_s":..
 *    [,"tokens_per_s":..][,"steady_samples_per_s":..[,"steady_tokens_per_s":..]]
 *    [,memory fields][,"grad_norm":..]
 *    [,"loss_scale":..,"overflow":0|1]}     per iteration
 *   {"<eval_key>":..,"<prefix>_loss":..[,"<prefix>_accuracy":..]} per test
 * Options below choose the optional fields. */
typedef struct pl_metrics_file_options {
    const char *path;        /* (copied); opened when the hook is made */
    bool epoch_field;        /* "epoch" (1-based) in iteration lines */
    int64_t tokens_per_sample; /* > 0: "tokens_per_s" too */
    bool memory;             /* placement figures (pl_engine_memory) */
    bool grad_norm;          /* engine clips: "grad_norm" */
    bool loss_scale;         /* engine scales: "loss_scale", "overflow" */
    const char *test_key;    /* "epoch" (1-based) or "step": what keys a
                                test line */
    const char *test_prefix; /* "test" or "val" */
    bool test_accuracy;      /* "<prefix>_accuracy" (pl_hook_accuracy) */
} pl_metrics_file_options;
/* A built-in whose constructor fails (a file that cannot be opened, no
 * memory) returns a hook with a NULL name, which pl_trainer_add_hook
 * refuses with the constructor's message. */
pl_hook pl_hook_metrics_file(const pl_metrics_file_options *o);

/* A progress line within long epochs, rewritten in place at most every
 * `interval_s` seconds: step, loss, throughput, ETA. Only when `out` is a
 * terminal (a file or pipe gets nothing). */
pl_hook pl_hook_progress(FILE *out, double interval_s);

/* TensorBoard event files: scalars loss, lr, throughput, memory, loss
 * scale, test loss/accuracy under <log_dir>/events.out.tfevents.<time>.
 * <host>.<pid>. */
pl_hook pl_hook_tensorboard(const char *log_dir);

#ifdef __cplusplus
}
#endif

#endif /* PLEIADES_TRAINER_H */
