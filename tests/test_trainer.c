/* The trainer (pleiades/trainer.h): hooks see the 13 points of the life
 * cycle in the documented order, in priority order; iterations sum
 * accumulate_size batches; a stop, max_steps and an early stop from a test
 * hook end training where they should; a run interrupted and resumed
 * through SaveCheckpointHook + LoadCheckpointHook continues bitwise
 * identically; the states store, the text source and the refusals. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pleiades.h"
#include "reference_util.h"
#include "test_util.h"

enum { B = 8, IN = 12, K = 4, TRAIN_BATCHES = 3, TEST_BATCHES = 2, MAX_LOG = 4096 };

static pl_graph_t *build(uint64_t seed) {
    pl_graph_t *g = pl_graph_new(seed);
    int64_t shape[1] = {IN};
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, shape);
    pl_tensor_t *y = pl_graph_input(g, "y", PL_DTYPE_I32, 0, NULL);
    pl_tensor_t *h = pl_relu(g, pl_linear(g, x, 16, "fc1"));
    pl_tensor_t *logits = pl_linear(g, h, K, "head");
    CHECK_PL(pl_graph_set_loss(g, pl_cross_entropy(g, logits, y)));
    CHECK(pl_accuracy(g, logits, y) != NULL, "pl_accuracy: %s", pl_last_error());
    CHECK_PL(pl_graph_set_output(g, logits));
    return g;
}

/* ------------------------------------------------- a user's data source */

static void make_batch(int64_t index, float *x, int32_t *y) {
    tu_class_batch(index, B, IN, x, y);
}

typedef struct source {
    int64_t batches, offset; /* per epoch; stream offset (test data) */
    int64_t epoch, next_index, drawn;
    float x[B * IN];
    int32_t y[B];
    const void *data[2];
} source;

static int64_t source_start(void *u, int64_t epoch) {
    source *s = u;
    s->epoch = epoch;
    s->next_index = 0;
    return s->batches;
}

static int source_next(void *u, pl_batch *b) {
    source *s = u;
    if (s->next_index >= s->batches)
        return 0;
    make_batch(s->offset + s->epoch * s->batches + s->next_index++, s->x, s->y);
    s->drawn++;
    s->data[0] = s->x;
    s->data[1] = s->y;
    *b = (pl_batch){.size = B, .data = s->data};
    return 1;
}

static pl_data_source as_source(source *s) {
    return (pl_data_source){.start_epoch = source_start, .next = source_next, .user_data = s};
}

/* ------------------------------------------------------ recording hooks */

typedef struct recorder {
    char log[MAX_LOG][48]; /* shared by several recorders */
    int n;
} recorder;

typedef struct recording {
    const char *name;
    recorder *r;
    int64_t stop_at_step;   /* pl_trainer_stop in after_train_iter; 0 = never */
    bool stop_after_test;   /* pl_trainer_stop in after_test_epoch */
    double losses[64];      /* after_train_iter losses by step */
    int n_losses;
    bool output_seen;       /* after_test_iter got output and labels */
} recording;

static void note(recording *h, const char *point) {
    if (h->r->n < MAX_LOG)
        snprintf(h->r->log[h->r->n++], 48, "%s:%s", h->name, point);
}

#define RECORD(point)                                         \
    static pl_status rec_##point(pl_trainer_t *t, void *u) { \
        (void)t;                                              \
        note(u, #point);                                      \
        return PL_STATUS_OK;                                  \
    }
RECORD(after_hook_is_attached)
RECORD(before_train)
RECORD(after_train)
RECORD(before_train_epoch)
RECORD(after_train_epoch)
RECORD(before_train_iter)
RECORD(before_test)
RECORD(after_test)
RECORD(before_test_epoch)
RECORD(before_test_iter)

static pl_status rec_after_test_epoch(pl_trainer_t *t, void *u) {
    recording *h = u;
    note(h, "after_test_epoch");
    if (h->stop_after_test)
        pl_trainer_stop(t, "plateau");
    return PL_STATUS_OK;
}

static pl_status rec_after_train_iter(pl_trainer_t *t, void *u, const pl_step_result *r) {
    recording *h = u;
    note(h, "after_train_iter");
    if (h->n_losses < 64)
        h->losses[h->n_losses++] = r->loss;
    if (h->stop_at_step && pl_trainer_step(t) == h->stop_at_step)
        pl_trainer_stop(t, "asked");
    return PL_STATUS_OK;
}

static pl_status rec_after_test_iter(pl_trainer_t *t, void *u, const pl_step_result *r) {
    (void)t;
    recording *h = u;
    note(h, "after_test_iter");
    h->output_seen = r->output && r->labels && r->size == B;
    return PL_STATUS_OK;
}

static pl_hook recording_hook(recording *h, int priority) {
    return (pl_hook){.name = h->name, .priority = priority, .user_data = h,
                     .after_hook_is_attached = rec_after_hook_is_attached,
                     .before_train = rec_before_train, .after_train = rec_after_train,
                     .before_train_epoch = rec_before_train_epoch,
                     .after_train_epoch = rec_after_train_epoch,
                     .before_train_iter = rec_before_train_iter,
                     .after_train_iter = rec_after_train_iter,
                     .before_test = rec_before_test, .after_test = rec_after_test,
                     .before_test_epoch = rec_before_test_epoch,
                     .after_test_epoch = rec_after_test_epoch,
                     .before_test_iter = rec_before_test_iter,
                     .after_test_iter = rec_after_test_iter};
}

/* ------------------------------------------------------------- helpers */

static pl_engine_t *engine(pl_runtime_t *rt, pl_graph_t *g, int accumulate) {
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = B;
    eo.tiles = 2;
    eo.accumulate_size = accumulate;
    eo.optimizer.lr = 3e-3f;
    eo.lr_scheduler = pl_lr_scheduler_default(PL_LR_COSINE_ANNEALING_WARMUP);
    eo.lr_scheduler.total_steps = 12;
    eo.lr_scheduler.warmup_steps = 2;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK_PTR(e, "pl_engine_new");
    return e;
}

/* The documented order of one hook's points for `epochs` epochs of
 * `iters` iterations, each followed by a test of `tests` batches. */
static int expected_points(const char **out, int epochs, int iters, int tests) {
    int n = 0;
    out[n++] = "after_hook_is_attached";
    out[n++] = "before_train";
    for (int e = 0; e < epochs; e++) {
        out[n++] = "before_train_epoch";
        for (int i = 0; i < iters; i++) {
            out[n++] = "before_train_iter";
            out[n++] = "after_train_iter";
        }
        out[n++] = "after_train_epoch";
        out[n++] = "before_test";
        out[n++] = "before_test_epoch";
        for (int i = 0; i < tests; i++) {
            out[n++] = "before_test_iter";
            out[n++] = "after_test_iter";
        }
        out[n++] = "after_test_epoch";
        out[n++] = "after_test";
    }
    out[n++] = "after_train";
    return n;
}

/* ---------------------------------------------------------------- tests */

static void check_order(pl_runtime_t *rt) {
    pl_graph_t *g = build(7);
    pl_engine_t *e = engine(rt, g, 1);
    pl_trainer_t *t = pl_trainer_new(e);
    static recorder r;
    static recording a = {.name = "A", .r = &r}, b = {.name = "B", .r = &r},
                     c = {.name = "C", .r = &r};
    /* added A, B, C; priorities 5, 2, 5: B runs first, then A before C */
    CHECK_PL(pl_trainer_add_hook(t, recording_hook(&a, 5)));
    CHECK_PL(pl_trainer_add_hook(t, recording_hook(&b, 2)));
    CHECK_PL(pl_trainer_add_hook(t, recording_hook(&c, 5)));
    source train = {.batches = TRAIN_BATCHES}, test = {.batches = TEST_BATCHES, .offset = 1000};
    pl_fit_options fo = pl_fit_options_default();
    fo.train = as_source(&train);
    fo.test = as_source(&test);
    fo.has_test = true;
    fo.epochs = 2;
    fo.test_interval = 1;
    CHECK_PL(pl_trainer_fit(t, &fo));

    const char *points[256];
    int n = expected_points(points, 2, TRAIN_BATCHES, TEST_BATCHES);
    const char *order[3] = {"B", "A", "C"};
    int mismatches = 0;
    CHECK(r.n == 3 * n, "recorded %d calls, expected %d", r.n, 3 * n);
    for (int i = 0; i < n && 3 * i + 2 < r.n; i++)
        for (int k = 0; k < 3; k++) {
            char want[48];
            snprintf(want, sizeof want, "%s:%s", order[k], points[i]);
            if (strcmp(r.log[3 * i + k], want) != 0 && mismatches++ < 5)
                CHECK(0, "call %d: got %s, expected %s", 3 * i + k, r.log[3 * i + k], want);
        }
    /* all 13 points were called */
    int distinct = 0;
    const char *names[13] = {"after_hook_is_attached", "before_train", "after_train",
                             "before_train_epoch", "after_train_epoch", "before_train_iter",
                             "after_train_iter", "before_test", "after_test",
                             "before_test_epoch", "after_test_epoch", "before_test_iter",
                             "after_test_iter"};
    for (int p = 0; p < 13; p++)
        for (int i = 0; i < r.n; i++)
            if (strcmp(r.log[i] + 2, names[p]) == 0) {
                distinct++;
                break;
            }
    CHECK(distinct == 13, "%d of the 13 points called", distinct);
    CHECK(b.output_seen, "after_test_iter got no output/labels");
    CHECK(pl_trainer_step(t) == 2 * TRAIN_BATCHES, "step %lld", (long long)pl_trainer_step(t));
    if (!mismatches && r.n == 3 * n)
        printf("ok: 3 hooks x %d points in the documented order, priorities 2 < 5 = 5 "
               "(ties in the order added)\n", n);
    pl_trainer_free(t);
    pl_engine_free(e);
    pl_graph_free(g);
}

/* max_test_batches caps each evaluation (the source's next is not even
 * called past it); 0 keeps them all, a negative cap is refused. */
static void check_max_test_batches(pl_runtime_t *rt) {
    pl_graph_t *g = build(8);
    pl_engine_t *e = engine(rt, g, 1);
    pl_trainer_t *t = pl_trainer_new(e);
    static recorder r;
    static recording h = {.name = "H", .r = &r};
    CHECK_PL(pl_trainer_add_hook(t, recording_hook(&h, 0)));
    source train = {.batches = TRAIN_BATCHES}, test = {.batches = TEST_BATCHES, .offset = 1000};
    pl_fit_options fo = pl_fit_options_default();
    fo.train = as_source(&train);
    fo.test = as_source(&test);
    fo.has_test = true;
    fo.epochs = 2;
    fo.max_test_batches = -1;
    CHECK(pl_trainer_fit(t, &fo) == PL_STATUS_INVALID_ARGUMENT &&
              strstr(pl_last_error(), "max_test_batches"),
          "max_test_batches -1: %s", pl_last_error());
    fo.max_test_batches = TEST_BATCHES - 1;
    CHECK_PL(pl_trainer_fit(t, &fo));
    const char *points[256];
    int n = expected_points(points, 2, TRAIN_BATCHES, TEST_BATCHES - 1), bad = 0;
    CHECK(r.n == n, "recorded %d calls, expected %d", r.n, n);
    for (int i = 0; i < n && i < r.n; i++)
        if (strcmp(r.log[i] + 2, points[i]) != 0 && bad++ < 3)
            CHECK(0, "call %d: got %s, expected %s", i, r.log[i], points[i]);
    if (r.n == n && !bad)
        printf("ok: max_test_batches %d of %d: each evaluation runs %d batch\n",
               TEST_BATCHES - 1, TEST_BATCHES, TEST_BATCHES - 1);
    pl_trainer_free(t);
    pl_engine_free(e);
    pl_graph_free(g);
}

/* Iterations of accumulate_size batches: the loss is their sample-weighted
 * mean, and a batch that cannot fill an update is not drawn. */
static void check_accumulation(pl_runtime_t *rt) {
    pl_graph_t *g = build(9);
    pl_engine_t *e = engine(rt, g, 2);
    pl_trainer_t *t = pl_trainer_new(e);
    static recorder r;
    static recording h = {.name = "H", .r = &r};
    CHECK_PL(pl_trainer_add_hook(t, recording_hook(&h, 0)));
    source train = {.batches = 5};
    pl_fit_options fo = pl_fit_options_default();
    fo.train = as_source(&train);
    fo.epochs = 2;
    CHECK_PL(pl_trainer_fit(t, &fo));
    CHECK(h.n_losses == 4 && train.drawn == 8,
          "2 epochs of 5 batches, accumulate 2: %d iterations, %lld batches drawn (4, 8)",
          h.n_losses, (long long)train.drawn);
    CHECK(pl_engine_steps(e) == 4, "engine updates %lld", (long long)pl_engine_steps(e));

    /* the same batches fed by hand to a fresh engine */
    pl_graph_t *g2 = build(9);
    pl_engine_t *e2 = engine(rt, g2, 2);
    float x[B * IN];
    int32_t y[B];
    const void *data[2] = {x, y};
    pl_batch batch = {.size = B, .data = data};
    bool same = true;
    for (int it = 0; it < 4; it++) {
        double sum = 0;
        for (int k = 0; k < 2; k++) {
            int64_t epoch = it / 2, index = epoch * 5 + (it % 2) * 2 + k;
            make_batch(index, x, y);
            pl_step_result res;
            CHECK_PL(pl_engine_train_step(e2, &batch, &res));
            sum += res.loss * B;
        }
        same = same && h.losses[it] == sum / (2 * B);
    }
    CHECK(same, "iteration losses differ from the mean of the batches fed by hand");
    if (same)
        printf("ok: accumulate 2 over 5-batch epochs: 2 iterations per epoch, the 5th batch "
               "not drawn, losses the batch means\n");
    pl_engine_free(e2);
    pl_graph_free(g2);
    pl_trainer_free(t);
    pl_engine_free(e);
    pl_graph_free(g);
}

static int count(const recorder *r, const char *entry) {
    int n = 0;
    for (int i = 0; i < r->n; i++)
        n += strcmp(r->log[i], entry) == 0;
    return n;
}

/* A stop from after_train_iter ends training after that iteration (the
 * epoch still closes and is evaluated); max_steps likewise; a stop from
 * after_test_epoch (early stopping) ends it before the next epoch. */
static void check_stops(pl_runtime_t *rt) {
    struct {
        const char *what;
        int64_t stop_at, max_steps;
        bool stop_after_test;
        int64_t steps, epochs_trained;
    } cases[] = {
        {"pl_trainer_stop at step 4", 4, 0, false, 4, 2},
        {"max_steps 5", 0, 5, false, 5, 2},
        {"early stop after the first test", 0, 0, true, 3, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        pl_graph_t *g = build(11);
        pl_engine_t *e = engine(rt, g, 1);
        pl_trainer_t *t = pl_trainer_new(e);
        static recorder r;
        r.n = 0;
        static recording h;
        h = (recording){.name = "S", .r = &r, .stop_at_step = cases[i].stop_at,
                        .stop_after_test = cases[i].stop_after_test};
        CHECK_PL(pl_trainer_add_hook(t, recording_hook(&h, 0)));
        source train = {.batches = TRAIN_BATCHES}, test = {.batches = 1, .offset = 1000};
        pl_fit_options fo = pl_fit_options_default();
        fo.train = as_source(&train);
        fo.test = as_source(&test);
        fo.has_test = true;
        fo.epochs = 4;
        fo.max_steps = cases[i].max_steps;
        CHECK_PL(pl_trainer_fit(t, &fo));
        int iters = count(&r, "S:after_train_iter"), epochs = count(&r, "S:after_train_epoch"),
            tests = count(&r, "S:after_test"), ends = count(&r, "S:after_train");
        const char *reason;
        bool stopped = pl_trainer_stopped(t, &reason);
        CHECK(iters == cases[i].steps && pl_trainer_step(t) == cases[i].steps &&
                  epochs == cases[i].epochs_trained && tests == cases[i].epochs_trained &&
                  ends == 1 && stopped == (cases[i].max_steps == 0),
              "%s: %d iterations, %d epochs, %d tests, %d after_train, stopped %d", cases[i].what,
              iters, epochs, tests, ends, stopped);
        if (iters == cases[i].steps && epochs == cases[i].epochs_trained)
            printf("ok: %s: %d iterations over %d epochs, the last one evaluated%s%s\n",
                   cases[i].what, iters, epochs, stopped ? ", reason: " : "",
                   stopped ? reason : "");
        pl_trainer_free(t);
        pl_engine_free(e);
        pl_graph_free(g);
    }
}

/* 2 epochs of 3 iterations straight, against 4 (saved every 2) + a fresh
 * engine resumed from the newest through the hooks: losses 5 and 6 and
 * the final weights bitwise equal, and the resumed run starts mid-epoch. */
static void check_resume(pl_runtime_t *rt, int64_t stop_after) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/ckpt-%lld", tu_scratch_dir(), (long long)stop_after);
    double straight[8], resumed[8];
    float w_straight[16 * IN], w_resumed[16 * IN];
    int n_resumed = 0;
    for (int run = 0; run < 3; run++) {
        /* other initial weights for the resumed run: the checkpoint must
         * bring everything back */
        pl_graph_t *g = build(run == 2 ? 99 : 13);
        pl_engine_t *e = engine(rt, g, 1);
        pl_trainer_t *t = pl_trainer_new(e);
        static recorder r;
        r.n = 0;
        static recording h;
        h = (recording){.name = "R", .r = &r};
        CHECK_PL(pl_trainer_add_hook(t, recording_hook(&h, 20)));
        CHECK_PL(pl_trainer_add_hook(t, pl_hook_loss()));
        if (run == 1) {
            pl_save_checkpoint_options so = {.dir = dir, .every_steps = 2, .at_end = true,
                                             .keep_last = 1};
            CHECK_PL(pl_checkpoint_values_set(&so.values, "seed", 13));
            CHECK_PL(pl_trainer_add_hook(t, pl_hook_save_checkpoint(&so)));
        }
        if (run == 2) {
            pl_load_checkpoint_options lo = {.path = dir, .log = stdout};
            CHECK_PL(pl_trainer_add_hook(t, pl_hook_load_checkpoint(&lo)));
        }
        source train = {.batches = TRAIN_BATCHES};
        pl_fit_options fo = pl_fit_options_default();
        fo.train = as_source(&train);
        fo.epochs = 2;
        fo.max_steps = run == 1 ? stop_after : 0;
        CHECK_PL(pl_trainer_fit(t, &fo));
        if (run == 0)
            memcpy(straight, h.losses, sizeof straight);
        if (run == 2) {
            memcpy(resumed, h.losses, sizeof resumed);
            n_resumed = h.n_losses;
            double seed = 0, epoch = -1;
            CHECK(pl_trainer_state_get(t, "checkpoint/seed", &seed) && seed == 13,
                  "checkpoint/seed state %g", seed);
            CHECK(pl_trainer_state_get(t, "checkpoint/epoch", &epoch) &&
                      epoch == (double)(stop_after / TRAIN_BATCHES),
                  "checkpoint/epoch state %g", epoch);
            /* it starts in epoch 2 (a source without skip: that epoch's
             * trained batches are drawn again, as the skip) */
            CHECK(train.drawn == TRAIN_BATCHES,
                  "resumed run drew %lld batches", (long long)train.drawn);
        }
        const pl_tensor_t *w = pl_graph_find(g, "fc1.weight");
        CHECK_PTR(w, "fc1.weight");
        if (w && run != 1)
            CHECK_PL(pl_engine_get_param(e, w, run == 0 ? w_straight : w_resumed,
                                         16 * IN));
        pl_trainer_free(t);
        pl_engine_free(e);
        pl_graph_free(g);
    }
    int rest = 2 * TRAIN_BATCHES - (int)stop_after;
    bool same = n_resumed == rest &&
                memcmp(resumed, straight + stop_after, (size_t)rest * sizeof *resumed) == 0 &&
                memcmp(w_resumed, w_straight, sizeof w_resumed) == 0;
    CHECK(same, "resumed after %lld: %d losses, first %.9g vs %.9g", (long long)stop_after,
          n_resumed, resumed[0], straight[stop_after]);
    if (same)
        printf("ok: %lld steps + SaveCheckpointHook, LoadCheckpointHook in a fresh engine, "
               "%d more: losses and weights bitwise those of 6 straight steps\n",
               (long long)stop_after, rest);
}

static pl_status failing_hook(pl_trainer_t *t, void *u) {
    (void)t;
    (void)u;
    return PL_STATUS_IO_ERROR;
}

static void check_refusals(pl_runtime_t *rt) {
    pl_graph_t *g = build(17);
    pl_engine_t *e = engine(rt, g, 1);
    pl_trainer_t *t = pl_trainer_new(e);
    /* a failing constructor's hook is refused with its message */
    pl_metrics_file_options mo = {.path = "/nonexistent-dir/m.jsonl"};
    tu_expect_error(__LINE__, "metrics file in a missing directory",
                    pl_trainer_add_hook(t, pl_hook_metrics_file(&mo)), PL_STATUS_IO_ERROR,
                    "/nonexistent-dir/m.jsonl", NULL);
    tu_expect_error(__LINE__, "save hook without a directory",
                    pl_trainer_add_hook(t, pl_hook_save_checkpoint(NULL)),
                    PL_STATUS_INVALID_ARGUMENT, "directory", NULL);
    tu_expect_error(__LINE__, "accuracy of metric 9",
                    pl_trainer_add_hook(t, pl_hook_accuracy(9)), PL_STATUS_INVALID_ARGUMENT,
                    "metric index 9", NULL);
    /* a hook's failure stops the fit, naming the hook and the point */
    CHECK_PL(pl_trainer_add_hook(t, (pl_hook){.name = "Failing", .before_train_epoch =
                                                                     failing_hook}));
    source train = {.batches = TRAIN_BATCHES};
    pl_fit_options fo = pl_fit_options_default();
    fo.train = as_source(&train);
    tu_expect_error(__LINE__, "a failing hook", pl_trainer_fit(t, &fo), PL_STATUS_IO_ERROR,
                    "Failing", "before_train_epoch");
    CHECK(train.drawn == 0, "a batch was drawn after the hook failed");
    fo.epochs = 0;
    tu_expect_error(__LINE__, "0 epochs", pl_trainer_fit(t, &fo), PL_STATUS_INVALID_ARGUMENT,
                    "epochs 0", NULL);
    /* resuming is for before_train only */
    tu_expect_error(__LINE__, "resume outside a fit", pl_trainer_resume_at(t, 0, 0, 0),
                    PL_STATUS_INVALID_ARGUMENT, "not fitting", NULL);
    /* states: init keeps a value, set replaces it, order of first set */
    CHECK_PL(pl_trainer_state_set(t, "x", 1));
    CHECK_PL(pl_trainer_state_init(t, "x", 2));
    CHECK_PL(pl_trainer_state_init(t, "y", 3));
    double v = 0;
    CHECK(pl_trainer_state_get(t, "x", &v) && v == 1, "init overwrote x: %g", v);
    CHECK(strcmp(pl_trainer_state_at(t, pl_trainer_state_count(t) - 1, &v), "y") == 0 && v == 3,
          "state order");
    CHECK(!pl_trainer_state_get(t, "absent", NULL), "an absent state was found");
    char long_key[80];
    memset(long_key, 'k', sizeof long_key - 1);
    long_key[sizeof long_key - 1] = 0;
    tu_expect_error(__LINE__, "long key", pl_trainer_state_set(t, long_key, 0),
                    PL_STATUS_INVALID_ARGUMENT, "longer than", NULL);
    pl_trainer_free(t);
    pl_engine_free(e);
    pl_graph_free(g);
}

/* The text source: epoch e continues the stream at e * batches_per_epoch,
 * a restarting one gives the same batches every epoch; skip is exact. */
static void check_text_source(void) {
    char path[600];
    tu_scratch_path(path, sizeof path, "text.txt");
    FILE *f = fopen(path, "w");
    CHECK_PTR(f, "fopen");
    for (int i = 0; f && i < 400; i++)
        fprintf(f, "line %d of some text to train on\n", i);
    if (f)
        fclose(f);
    pl_dataset_t *ds = pl_dataset_text(path, true);
    CHECK_PTR(ds, "pl_dataset_text");
    if (!ds)
        return;
    enum { TB = 2, TT = 8 };
    int32_t tok[TB * TT], tgt[TB * TT];
    pl_text_source_t *ts = pl_text_source_new(ds, TB, TT, 5, 3, false);
    pl_text_source_t *rs = pl_text_source_new(ds, TB, TT, 5, 3, true);
    CHECK(ts && rs, "pl_text_source_new: %s", pl_last_error());
    pl_data_source s = pl_text_source(ts), r = pl_text_source(rs);
    pl_batch b;
    CHECK(s.start_epoch(s.user_data, 1) == 3, "batches per epoch");
    CHECK_PL(s.skip(s.user_data, 1));
    CHECK(s.next(s.user_data, &b) == 1, "next");
    CHECK_PL(pl_text_batch(ds, TB, TT, 5, 1 * 3 + 1, tok, tgt));
    CHECK(memcmp(b.data[0], tok, sizeof tok) == 0 && memcmp(b.data[1], tgt, sizeof tgt) == 0,
          "epoch 1, batch 1 is not stream batch 4");
    CHECK(s.next(s.user_data, &b) == 1 && s.next(s.user_data, &b) == 0, "epoch end");
    r.start_epoch(r.user_data, 7);
    CHECK(r.next(r.user_data, &b) == 1, "next");
    CHECK_PL(pl_text_batch(ds, TB, TT, 5, 0, tok, tgt));
    CHECK(memcmp(b.data[0], tok, sizeof tok) == 0, "a restarting source's epoch 7 is not batch 0");
    tu_expect_error(__LINE__, "skip past the end", s.skip(s.user_data, 5),
                    PL_STATUS_INVALID_ARGUMENT, "skip 5", NULL);
    CHECK(pl_text_source_new(ds, 0, TT, 5, 3, false) == NULL, "batch size 0 accepted");
    pl_text_source_free(ts);
    pl_text_source_free(rs);
    pl_dataset_free(ds);
    printf("ok: text source: epochs continue the stream, restart repeats it, skip\n");
}

int main(void) {
    tu_time_limit(300, "the trainer test");
    CHECK(tu_scratch_create("pleiades_trainer"), "cannot create a scratch directory");
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 2;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    CHECK_PTR(rt, "pl_runtime_new");
    if (rt) {
        check_order(rt);
        check_max_test_batches(rt);
        check_accumulation(rt);
        check_stops(rt);
        check_resume(rt, 4); /* mid-epoch: epoch 1, batch 1 */
        check_resume(rt, 3); /* at an epoch's end: epoch 1, batch 0 */
        check_refusals(rt);
        pl_runtime_free(rt);
    }
    check_text_source();
    tu_remove_tree(tu_scratch_dir());
    return tu_failures ? 1 : 0;
}
