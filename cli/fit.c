/* `pleiades train` on the trainer (see fit.h): the built-in hooks the
 * command line asks for, and the CLI's own few hooks, written against the
 * same public interface a user's hook is. */
#define _POSIX_C_SOURCE 200809L /* strdup, statvfs */
#include "fit.h"

#include <inttypes.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "args.h"
#include "common.h"

/* What the CLI's hooks share with cli_fit_run. */
typedef struct fit_run {
    const cli_fit *f;
    int exit_status;       /* a CLI hook's verdict (it printed why) */
    cli_fit_result *out;
    bool stage_times_printed;
} fit_run;

/* A CLI hook's failure (the hook printed why): the status the command exits
 * with; the trainer stops. */
static pl_status cli_refuse(fit_run *r, int exit_status) {
    r->exit_status = exit_status;
    return PL_STATUS_INVALID_ARGUMENT;
}

/* --resume: the checkpoint (loaded by LoadCheckpointHook, priority 0) must
 * be of this data stream, and leave something to do. */
static pl_status resume_check(pl_trainer_t *t, void *u) {
    fit_run *r = u;
    const cli_fit *f = r->f;
    double seed, accumulate, step, epoch;
    if (!pl_trainer_state_get(t, "checkpoint/seed", &seed) ||
        !pl_trainer_state_get(t, "checkpoint/accumulate", &accumulate) ||
        !pl_trainer_state_get(t, "checkpoint/step", &step) ||
        !pl_trainer_state_get(t, "checkpoint/epoch", &epoch)) {
        cli_error("--resume: %s: not a checkpoint of 'pleiades train'", f->resume_path);
        return cli_refuse(r, CLI_EXIT_FAILURE);
    }
    /* The data stream is a function of the seed (and of how many batches
     * make an update): other values would feed other batches. */
    if ((uint64_t)seed != f->seed || (int)accumulate != f->exec->engine.accumulate_size) {
        cli_error("--resume: %s was trained with --seed %.0f --accumulate %.0f; resuming with "
                  "--seed %" PRIu64 " --accumulate %d would feed other batches (give the "
                  "same values)",
                  f->resume_path, seed, accumulate, f->seed, f->exec->engine.accumulate_size);
        cli_usage_hint("train");
        return cli_refuse(r, CLI_EXIT_USAGE);
    }
    if (f->by_step) {
        if (step >= (double)f->max_steps) {
            cli_error("--resume: %s is at step %.0f, and --steps %" PRId64 " asks for no more "
                      "(--steps counts all steps, resumed ones included)",
                      f->resume_path, step, f->max_steps);
            cli_usage_hint("train");
            return cli_refuse(r, CLI_EXIT_USAGE);
        }
        /* Batch i of the text is a function of (seed, i): the step is the
         * position, whatever --eval-every cut the saved run's epochs at. */
        int64_t s = (int64_t)step;
        return pl_trainer_resume_at(t, s / f->steps_per_epoch,
                                    s % f->steps_per_epoch * f->exec->engine.accumulate_size, s);
    }
    if (epoch >= (double)f->epochs) {
        cli_error("--resume: %s ends after epoch %.0f, and --epochs %" PRId64 " asks for no "
                  "more (--epochs counts all epochs, resumed ones included)",
                  f->resume_path, epoch, f->epochs);
        cli_usage_hint("train");
        return cli_refuse(r, CLI_EXIT_USAGE);
    }
    return PL_STATUS_OK;
}

/* --trace/--paje: of the last training iteration, before evaluation's
 * forward-only steps replace the task records. One that cannot be written
 * fails the run, but only at the end (never lose a finished run's last
 * evaluation and checkpoint). */
static pl_status write_traces(pl_trainer_t *t, void *u) {
    fit_run *r = u;
    if (pl_trainer_last_epoch(t) && r->out->trace_status == CLI_EXIT_OK)
        r->out->trace_status =
            cli_exec_write_traces(r->f->exec, pl_trainer_engine(t), r->f->rank);
    return PL_STATUS_OK;
}

/* A NaN never recovers: stopping saves the rest of the run. After the
 * metrics file (priority 10), so that the diverged step is in it. The
 * loss alone can hide one (ReLU maps a NaN activation to 0, and the
 * weights it poisoned show only in the next step's loss), so with
 * clipping the update's gradient norm, which the engine computes anyway,
 * is checked too. --check-finite stops the step itself, before its update,
 * naming where the first non-finite value appeared. */
static pl_status check_divergence(pl_trainer_t *t, void *u, const pl_step_result *out) {
    fit_run *r = u;
    double norm = 0.0;
    const char *what = "loss";
    double value = out->loss;
    if (isfinite(value) && r->f->exec->engine.max_norm > 0.0f &&
        pl_engine_grad_norm(pl_trainer_engine(t), &norm) == PL_STATUS_OK && !isfinite(norm))
        what = "gradient norm", value = norm;
    else if (isfinite(value))
        return PL_STATUS_OK;
    char epoch[48] = "";
    if (!r->f->by_step)
        snprintf(epoch, sizeof epoch, " (epoch %" PRId64 ")", pl_trainer_epoch(t) + 1);
    cli_error("training diverged: %s %g at step %" PRId64 "%s; try a smaller --lr, and "
              "--check-finite to name the input or op where the first inf/NaN appears",
              what, value, pl_trainer_step(t), epoch);
    return cli_refuse(r, CLI_EXIT_FAILURE);
}

/* The measured stage balance's cut, once its timed step is over (the
 * start-up line showed the FLOP cut it began with). On every rank: with
 * stages across ranks the times are summed over the ranks right after the
 * timed step, and a sum only the writer asked for would wait for ranks
 * that never join it (a run of 2 steps hung so until 2026-11-27). */
static pl_status print_stage_times(pl_trainer_t *t, void *u, const pl_step_result *out) {
    (void)out;
    fit_run *r = u;
    if (!r->stage_times_printed)
        r->stage_times_printed = cli_exec_print_stage_times(
            r->f->exec, pl_trainer_engine(t), r->f->writer && !r->f->quiet);
    return PL_STATUS_OK;
}

/* The run's placement totals, from LogMemoryByEpochHook's states. */
static pl_status add_memory(pl_trainer_t *t, void *u, const pl_step_result *out) {
    (void)out;
    cli_exec_memory *m = &((fit_run *)u)->out->memory;
    double v[5] = {0};
    static const char *const keys[5] = {"memory/peak_compute_bytes", "memory/peak_host_bytes",
                                        "memory/bytes_moved", "memory/evictions",
                                        "memory/prefetch_hits"};
    for (int i = 0; i < 5; i++)
        pl_trainer_state_get(t, keys[i], &v[i]);
    double act = 0;
    pl_trainer_state_get(t, "memory/activation_peak_bytes", &act);
    if ((int64_t)act > m->activation_peak_bytes) m->activation_peak_bytes = (int64_t)act;
    m->steps++;
    if ((int64_t)v[0] > m->peak_compute_bytes) m->peak_compute_bytes = (int64_t)v[0];
    if ((int64_t)v[1] > m->peak_host_bytes) m->peak_host_bytes = (int64_t)v[1];
    m->bytes_moved += (int64_t)v[2];
    m->evictions += (int64_t)v[3];
    m->prefetch_hits += (int64_t)v[4];
    return PL_STATUS_OK;
}

/* The built-in hooks the options ask for. */
/* A checkpoint that could not be written (a full disk): the run goes on
 * when its end can still be kept (--save has a writable folder with room
 * for the weights), else stops naming the checkpoint a resume starts
 * from. */
static pl_status checkpoint_failed(void *u, const char *failed, const char *last_good,
                                   const char *message) {
    fit_run *r = u;
    const cli_fit *f = r->f;
    char resume_from[4200];
    snprintf(resume_from, sizeof resume_from, "%s%s",
             last_good ? "the last good checkpoint is " : "this run saved no checkpoint",
             last_good ? last_good : "");
    struct statvfs vfs;
    char *copy = f->save_path ? strdup(f->save_path) : NULL;
    bool room = copy && statvfs(dirname(copy), &vfs) == 0 &&
                (double)vfs.f_bavail * (double)vfs.f_frsize >= 4.0 * (double)f->param_count;
    free(copy);
    if (room && cli_check_output_path("--save", f->save_path) == CLI_EXIT_OK) {
        if (f->writer)
            cli_error("warning: checkpoint %s failed: %s; training goes on (--save %s is "
                      "written at the end; %s)",
                      failed, message, f->save_path, resume_from);
        return PL_STATUS_OK;
    }
    cli_error("checkpoint %s failed: %s; stopping (%s); %s", failed,
              message, f->save_path ? "--save cannot be written either" : "no --save to keep "
                                                                          "the weights",
              resume_from);
    return cli_refuse(r, CLI_EXIT_FAILURE);
}

static pl_status add_builtin_hooks(pl_trainer_t *t, fit_run *r) {
    const cli_fit *f = r->f;
    FILE *log = f->quiet ? NULL : stdout;
    bool placement = cli_exec_memory_reported(f->exec);
    pl_status st = pl_trainer_add_hook(t, pl_hook_loss());
    if (st == PL_STATUS_OK && f->test_accuracy)
        st = pl_trainer_add_hook(t, pl_hook_accuracy(0));
    if (st == PL_STATUS_OK)
        st = pl_trainer_add_hook(t, pl_hook_lr_scheduler());
    if (st == PL_STATUS_OK)
        st = pl_trainer_add_hook(t, pl_hook_log_timing_by_epoch(NULL, f->tokens_per_sample));
    if (st == PL_STATUS_OK && placement)
        st = pl_trainer_add_hook(t, pl_hook_log_memory_by_epoch(NULL));
    pl_log_metric_options lo = {.out = log, .by_step = f->by_step,
                                .test_name = f->test_name,
                                .tokens_per_sample = f->tokens_per_sample};
    if (st == PL_STATUS_OK)
        st = pl_trainer_add_hook(t, pl_hook_log_metric_by_epoch(&lo));
    if (st == PL_STATUS_OK && log)
        st = pl_trainer_add_hook(t, pl_hook_progress(stdout, 2.0));
    if (st == PL_STATUS_OK && f->metrics_path && f->writer) {
        pl_metrics_file_options mo = {
            .path = f->metrics_path, .epoch_field = !f->by_step,
            .tokens_per_sample = f->tokens_per_sample, .memory = placement,
            .grad_norm = f->exec->engine.max_norm > 0.0f,
            .loss_scale = f->exec->engine.loss_scaler.enabled,
            .test_key = f->by_step ? "step" : "epoch", .test_prefix = f->test_name,
            .test_accuracy = f->test_accuracy};
        st = pl_trainer_add_hook(t, pl_hook_metrics_file(&mo));
    }
    if (st == PL_STATUS_OK && f->tensorboard_dir && f->writer)
        st = pl_trainer_add_hook(t, pl_hook_tensorboard(f->tensorboard_dir));
    /* On every rank of a --dp run: the save is collective (rank 0 writes). */
    if (st == PL_STATUS_OK && f->checkpoint_dir) {
        pl_save_checkpoint_options so = {.dir = f->checkpoint_dir,
                                         .every_steps = f->save_every, .at_end = true,
                                         .keep_last = f->keep_last, .log = log};
        so.values = f->model_values;
        pl_checkpoint_values_set(&so.values, "seed", (int64_t)f->seed);
        pl_checkpoint_values_set(&so.values, "accumulate", f->exec->engine.accumulate_size);
        so.on_failure = checkpoint_failed;
        so.on_failure_user = r;
        st = pl_trainer_add_hook(t, pl_hook_save_checkpoint(&so));
    }
    if (st == PL_STATUS_OK && f->resume_path) {
        pl_load_checkpoint_options lo2 = {.path = f->resume_path, .log = stdout};
        st = pl_trainer_add_hook(t, pl_hook_load_checkpoint(&lo2));
    }
    return st;
}

static pl_status add_cli_hooks(pl_trainer_t *t, fit_run *r) {
    const cli_fit *f = r->f;
    pl_status st = PL_STATUS_OK;
    if (f->resume_path)
        st = pl_trainer_add_hook(t, (pl_hook){.name = "cli: resume check", .priority = 1,
                                              .user_data = r, .before_train = resume_check});
    if (st == PL_STATUS_OK)
        st = pl_trainer_add_hook(t, (pl_hook){.name = "cli: traces", .priority = 10,
                                              .user_data = r, .after_train_epoch = write_traces});
    if (st == PL_STATUS_OK)
        st = pl_trainer_add_hook(t, (pl_hook){.name = "cli: divergence", .priority = 20,
                                              .user_data = r,
                                              .after_train_iter = check_divergence});
    if (st == PL_STATUS_OK && f->exec->engine.schedule != PL_SCHEDULE_NONE)
        st = pl_trainer_add_hook(t, (pl_hook){.name = "cli: stage balance", .priority = 20,
                                              .user_data = r,
                                              .after_train_iter = print_stage_times});
    if (st == PL_STATUS_OK && cli_exec_memory_reported(f->exec))
        st = pl_trainer_add_hook(t, (pl_hook){.name = "cli: memory totals", .priority = 10,
                                              .user_data = r, .after_train_iter = add_memory});
    return st;
}

int cli_fit_run(const cli_fit *f, cli_fit_result *out) {
    *out = (cli_fit_result){.test_loss = NAN, .test_accuracy = NAN};
    fit_run r = {.f = f, .out = out};
    pl_trainer_t *t = pl_trainer_new(f->engine);
    if (!t)
        return cli_library_failure("cannot create the trainer");
    pl_status st = add_builtin_hooks(t, &r);
    if (st == PL_STATUS_OK)
        st = add_cli_hooks(t, &r);
    if (st != PL_STATUS_OK) {
        cli_error("%s", pl_last_error());
        pl_trainer_free(t);
        return CLI_EXIT_FAILURE;
    }
    pl_fit_options fo = pl_fit_options_default();
    fo.train = f->train;
    fo.test = f->test;
    fo.has_test = true;
    fo.epochs = f->epochs;
    fo.max_steps = f->max_steps;
    fo.max_test_batches = f->max_test_batches;
    st = pl_trainer_fit(t, &fo);
    int rc = CLI_EXIT_OK;
    if (st != PL_STATUS_OK) {
        rc = r.exit_status != CLI_EXIT_OK ? r.exit_status : CLI_EXIT_FAILURE;
        if (r.exit_status == CLI_EXIT_OK) /* else a CLI hook said why */
            cli_error("%s", pl_last_error());
    }
    pl_trainer_state_get(t, "test/loss", &out->test_loss);
    pl_trainer_state_get(t, "test/accuracy", &out->test_accuracy);
    pl_trainer_free(t);
    return rc;
}
