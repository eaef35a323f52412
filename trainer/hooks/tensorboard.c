/* TensorboardHook: the run's scalars in a TensorBoard event file, written
 * against the public hook interface (trainer.h) like a user's hook. */
#include <stdlib.h>

#include "pleiades.h"
#include "trainer/tensorboard/event_writer.h"
#include "util/error.h"

typedef struct tb_hook {
    pl_tb_writer *w;
    bool no_loss_scale; /* pl_engine_loss_scale failed once: scaler off */
} tb_hook;

/* `key` of the states as `tag`, when present. */
static pl_status put_state(pl_trainer_t *t, pl_tb_writer *w, const char *key, const char *tag) {
    double v;
    if (!pl_trainer_state_get(t, key, &v)) return PL_STATUS_OK;
    return pl_tb_writer_scalar(w, tag, pl_trainer_step(t), v);
}

static pl_status tb_after_train_iter(pl_trainer_t *t, void *ud, const pl_step_result *output) {
    tb_hook *h = ud;
    int64_t step = pl_trainer_step(t);
    pl_status st = pl_tb_writer_scalar(h->w, "train/loss", step, output->loss);
    if (!st) st = put_state(t, h->w, "lr", "lr");
    if (!st) st = put_state(t, h->w, "train/samples_per_s", "train/samples_per_s");
    if (!st) st = put_state(t, h->w, "memory/peak_compute_bytes", "memory/peak_compute_bytes");
    if (!st) st = put_state(t, h->w, "memory/peak_host_bytes", "memory/peak_host_bytes");
    double scale;
    bool overflow;
    if (!st && !h->no_loss_scale) {
        if (pl_engine_loss_scale(pl_trainer_engine(t), &scale, &overflow) == PL_STATUS_OK)
            st = pl_tb_writer_scalar(h->w, "loss_scale", step, scale);
        else
            h->no_loss_scale = true;
    }
    return st;
}

static pl_status tb_after_test_epoch(pl_trainer_t *t, void *ud) {
    tb_hook *h = ud;
    pl_status st = put_state(t, h->w, "test/loss", "test/loss");
    return st ? st : put_state(t, h->w, "test/accuracy", "test/accuracy");
}

static pl_status tb_after_train(pl_trainer_t *t, void *ud) {
    (void)t;
    return pl_tb_writer_flush(((tb_hook *)ud)->w);
}

static void tb_free(void *ud) {
    tb_hook *h = ud;
    if (h) pl_tb_writer_close(h->w);
    free(h);
}

pl_hook pl_hook_tensorboard(const char *log_dir) {
    pl_hook hook = {0};
    tb_hook *h = calloc(1, sizeof *h);
    if (!h) {
        pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_hook_tensorboard: out of memory");
        return hook;
    }
    if (!(h->w = pl_tb_writer_open(log_dir))) {
        free(h);
        return hook;
    }
    hook.name = "TensorboardHook";
    hook.priority = 10;
    hook.user_data = h;
    hook.after_train_iter = tb_after_train_iter;
    hook.after_test_epoch = tb_after_test_epoch;
    hook.after_train = tb_after_train;
    hook.free = tb_free;
    return hook;
}
