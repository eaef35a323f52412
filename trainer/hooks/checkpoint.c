/* SaveCheckpointHook and LoadCheckpointHook: full checkpoints
 * (pl_engine_save_checkpoint) that carry the trainer's position, so that a
 * run resumed through them continues exactly where the saved one was. */
#define _POSIX_C_SOURCE 200809L /* strdup */

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pleiades.h"
#include "trainer/hooks/hook_util.h"
#include "util/error.h"

/* --------------------------------------------------- SaveCheckpointHook */

typedef struct save_state {
    pl_save_checkpoint_options o;
    char *dir;
    int64_t saved_step;  /* -1: none yet */
    int64_t failed_step; /* the last step whose save failed (-1: none) */
} save_state;

static void save_free(void *u) {
    save_state *s = u;
    free(s->dir);
    free(s);
}

/* A failed save: the caller's on_failure decides whether the run goes on;
 * without one it stops, naming what a resume can start from. */
static pl_status save_failed(save_state *s, const char *path, pl_status st) {
    char last[4096], message[1024];
    bool any = s->saved_step >= 0 &&
               (size_t)snprintf(last, sizeof last, "%s/step-%" PRId64, s->dir, s->saved_step) <
                   sizeof last;
    snprintf(message, sizeof message, "%s", pl_last_error());
    if (s->o.on_failure)
        return s->o.on_failure(s->o.on_failure_user, path, any ? last : NULL, message);
    return pl_fail(st, "SaveCheckpointHook: %s; %s%s", message,
                   any ? "the last good checkpoint is " : "this run saved no checkpoint",
                   any ? last : "");
}

static pl_status save_now(pl_trainer_t *t, save_state *s) {
    if (mkdir(s->dir, 0777) != 0 && errno != EEXIST)
        return pl_fail(PL_STATUS_IO_ERROR, "SaveCheckpointHook: cannot create '%s': %s", s->dir,
                       strerror(errno));
    int64_t epoch, batch, step = pl_trainer_step(t);
    pl_trainer_position(t, &epoch, &batch);
    pl_checkpoint_values v = s->o.values;
    pl_status st = pl_checkpoint_values_set(&v, "epoch", epoch);
    if (st == PL_STATUS_OK)
        st = pl_checkpoint_values_set(&v, "batch", batch);
    if (st == PL_STATUS_OK)
        st = pl_checkpoint_values_set(&v, "step", step);
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/step-%" PRId64, s->dir, step) >= sizeof path)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "SaveCheckpointHook: '%s' is too long",
                       s->dir);
    if (st == PL_STATUS_OK)
        st = pl_engine_save_checkpoint(pl_trainer_engine(t), path, &v);
    /* Data parallel: every rank takes part in the save (ZeRO assembles
     * the optimizer states), rank 0 alone writes, prunes and says so. */
    if (st == PL_STATUS_OK && pl_engine_dp_rank(pl_trainer_engine(t)) != 0) {
        s->saved_step = step;
        return PL_STATUS_OK;
    }
    if (st == PL_STATUS_OK && s->o.keep_last > 0)
        st = pl_checkpoint_prune(s->dir, s->o.keep_last);
    if (st != PL_STATUS_OK) {
        s->failed_step = step;
        return save_failed(s, path, st);
    }
    s->saved_step = step;
    pl_hook_print(s->o.log, "checkpoint %s\n", path);
    return PL_STATUS_OK;
}

static pl_status save_iter(pl_trainer_t *t, void *u, const pl_step_result *r) {
    (void)r;
    save_state *s = u;
    int64_t every = s->o.every_steps;
    return every > 0 && pl_trainer_step(t) % every == 0 ? save_now(t, s) : PL_STATUS_OK;
}

static pl_status save_end(pl_trainer_t *t, void *u) {
    save_state *s = u;
    /* Nothing new since the last save (or its failure, already reported). */
    if (!s->o.at_end || s->saved_step == pl_trainer_step(t) ||
        s->failed_step == pl_trainer_step(t))
        return PL_STATUS_OK;
    return save_now(t, s);
}

pl_hook pl_hook_save_checkpoint(const pl_save_checkpoint_options *o) {
    if (!o || !o->dir || !o->dir[0] || o->every_steps < 0 || o->keep_last < 0) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT,
                "pl_hook_save_checkpoint: needs a directory, every_steps >= 0, keep_last >= 0");
        return (pl_hook){0};
    }
    save_state *s = pl_hook_alloc(sizeof *s, "SaveCheckpointHook");
    if (s) {
        s->o = *o;
        s->saved_step = s->failed_step = -1;
        s->dir = strdup(o->dir);
        if (!s->dir) {
            free(s);
            s = NULL;
            pl_fail(PL_STATUS_OUT_OF_MEMORY, "SaveCheckpointHook: out of memory");
        }
    }
    return (pl_hook){.name = s ? "SaveCheckpointHook" : NULL, .priority = 10, .user_data = s,
                     .after_train_iter = save_iter,
                     .after_train = save_end,
                     .free = save_free};
}

/* --------------------------------------------------- LoadCheckpointHook */

typedef struct load_state {
    char *path;
    FILE *log;
} load_state;

static void load_free(void *u) {
    load_state *s = u;
    free(s->path);
    free(s);
}

static pl_status load_before_train(pl_trainer_t *t, void *u) {
    load_state *s = u;
    char path[4096];
    /* A checkpoint directory, or a root of step-<N> ones (the newest that
     * passes its checks). */
    pl_checkpoint_values v = {0};
    pl_status st = pl_engine_resume_checkpoint(pl_trainer_engine(t), s->path, &v, path,
                                               sizeof path);
    if (st != PL_STATUS_OK)
        return st;
    int64_t epoch, batch, step;
    if (pl_checkpoint_values_get(&v, "epoch", &epoch) != PL_STATUS_OK ||
        pl_checkpoint_values_get(&v, "batch", &batch) != PL_STATUS_OK ||
        pl_checkpoint_values_get(&v, "step", &step) != PL_STATUS_OK)
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: not a trainer's checkpoint (no epoch, batch and step values)", path);
    for (int i = 0; i < v.n && st == PL_STATUS_OK; i++) {
        char key[64];
        snprintf(key, sizeof key, "checkpoint/%s", v.key[i]);
        st = pl_trainer_state_set(t, key, (double)v.value[i]);
    }
    if (st == PL_STATUS_OK)
        st = pl_trainer_resume_at(t, epoch, batch, step);
    if (st != PL_STATUS_OK)
        return pl_fail(st, "%s: %s", path, pl_last_error());
    pl_hook_print(s->log, "resumed from %s at step %" PRId64 " (epoch %" PRId64 ", batch %" PRId64
                          ")\n",
                  path, step, epoch + 1, batch);
    return PL_STATUS_OK;
}

pl_hook pl_hook_load_checkpoint(const pl_load_checkpoint_options *o) {
    if (!o || !o->path || !o->path[0]) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_hook_load_checkpoint: needs a path");
        return (pl_hook){0};
    }
    load_state *s = pl_hook_alloc(sizeof *s, "LoadCheckpointHook");
    if (s) {
        s->log = o->log;
        s->path = strdup(o->path);
        if (!s->path) {
            free(s);
            s = NULL;
            pl_fail(PL_STATUS_OUT_OF_MEMORY, "LoadCheckpointHook: out of memory");
        }
    }
    return (pl_hook){.name = s ? "LoadCheckpointHook" : NULL, .priority = 0, .user_data = s,
                     .before_train = load_before_train,
                     .free = load_free};
}
