/* Error handling of the public API: every misuse must come back as the
 * documented status (NULL for constructors) with a pl_last_error() message
 * that names the function and the offending argument, shape or value, so a
 * user can fix the call from the message alone.
 *
 * Each check clears the last error first, so a stale message from an
 * earlier failure can never satisfy it.
 *
 * Exit status 0 on success; every failed check prints a FAIL line. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pleiades.h"
#include "test_util.h"

enum { FEATURES = 8, CLASSES = 10, BATCH = 8 };

/* Checks one failed call: `failed` (the call returned NULL/false/an error
 * status), the thread's last status, and that the message contains every
 * one of up to three fragments (NULL = unused). */
static void expect_error_at(int line, const char *call, bool failed,
                            pl_status want, const char *m1, const char *m2,
                            const char *m3) {
    const char *msg = pl_last_error();
    pl_status got = pl_last_status();
    bool ok = failed && got == want;
    const char *frags[3] = {m1, m2, m3};
    for (int i = 0; i < 3; i++)
        if (frags[i] && !strstr(msg, frags[i])) ok = false;
    if (!ok) {
        tu_failures++;
        printf("FAIL %s:%d: %s: %s, status '%s' (want '%s'), message \"%s\"",
               __FILE__, line, call, failed ? "failed" : "did NOT fail",
               pl_status_string(got), pl_status_string(want), msg);
        for (int i = 0; i < 3; i++)
            if (frags[i]) printf(" (must contain \"%s\")", frags[i]);
        printf("\n");
    } else {
        printf("  ok  %-58s -> %s\n", call, msg);
    }
}

/* EXPECT_NULL(call, status, fragments...) for constructors,
 * EXPECT_STATUS(call, status, fragments...) for pl_status functions. */
#define EXPECT_NULL(call, st, m1, m2, m3)                                     \
    do {                                                                      \
        pl_clear_error();                                                     \
        bool failed_ = (call) == NULL;                                        \
        expect_error_at(__LINE__, #call, failed_, st, m1, m2, m3);            \
    } while (0)
#define EXPECT_STATUS(call, st, m1, m2, m3)                                   \
    do {                                                                      \
        pl_clear_error();                                                     \
        pl_status s_ = (call);                                                \
        expect_error_at(__LINE__, #call, s_ == (st), st, m1, m2, m3);         \
    } while (0)

/* --------------------------------------------------- status and version */

static void test_status_strings(void) {
    printf("status strings and version\n");
    const pl_status all[] = {
        PL_STATUS_OK,           PL_STATUS_INVALID_ARGUMENT, PL_STATUS_SHAPE_MISMATCH,
        PL_STATUS_IO_ERROR,     PL_STATUS_FORMAT_ERROR,     PL_STATUS_OUT_OF_MEMORY,
        PL_STATUS_RUNTIME_ERROR, PL_STATUS_UNSUPPORTED,
    };
    int n = (int)(sizeof all / sizeof all[0]);
    for (int i = 0; i < n; i++) {
        const char *s = pl_status_string(all[i]);
        CHECK(s && *s, "pl_status_string(%d) is empty", (int)all[i]);
        for (int j = 0; j < i && s; j++)
            CHECK(strcmp(s, pl_status_string(all[j])) != 0,
                  "statuses %d and %d share the string \"%s\"", (int)all[i],
                  (int)all[j], s);
    }
    const char *unknown = pl_status_string((pl_status)1000);
    CHECK(unknown && *unknown, "pl_status_string of an unknown value is empty");

    CHECK(strcmp(pl_version(), PL_VERSION_STRING) == 0,
          "pl_version() \"%s\" != PL_VERSION_STRING \"%s\"", pl_version(),
          PL_VERSION_STRING);
    char v[32];
    snprintf(v, sizeof v, "%d.%d.%d", PL_VERSION_MAJOR, PL_VERSION_MINOR,
             PL_VERSION_PATCH);
    CHECK(strcmp(v, PL_VERSION_STRING) == 0,
          "PL_VERSION_STRING \"%s\" disagrees with MAJOR.MINOR.PATCH \"%s\"",
          PL_VERSION_STRING, v);

    pl_clear_error();
    CHECK(pl_last_error()[0] == '\0' && pl_last_status() == PL_STATUS_OK,
          "pl_clear_error left \"%s\" / %d", pl_last_error(),
          (int)pl_last_status());
}

/* The last error is per thread: a failure on another thread must neither
 * show up nor clobber this thread's message. */
static void *fail_on_thread(void *arg) {
    (void)arg;
    pl_graph_input(NULL, "x", PL_DTYPE_F32, 0, NULL);
    return (void *)(intptr_t)(pl_last_status() == PL_STATUS_INVALID_ARGUMENT);
}

static void test_thread_local(void) {
    printf("thread-local last error\n");
    pl_clear_error();
    pl_dataset_fashion_mnist("/nonexistent", true); /* this thread: I/O */
    pthread_t th;
    void *ret = NULL;
    CHECK(pthread_create(&th, NULL, fail_on_thread, NULL) == 0, "pthread_create");
    pthread_join(th, &ret);
    CHECK(ret == (void *)1, "the other thread did not see its own error");
    CHECK(pl_last_status() == PL_STATUS_IO_ERROR &&
              strstr(pl_last_error(), "/nonexistent"),
          "another thread's failure changed this thread's last error to "
          "\"%s\"", pl_last_error());
}

/* --------------------------------------------------------------- data */

static void test_data(void) {
    printf("data\n");
    EXPECT_NULL(pl_dataset_fashion_mnist("/nonexistent", true),
                PL_STATUS_IO_ERROR, "/nonexistent", NULL, NULL);
    EXPECT_NULL(pl_dataset_fashion_mnist(NULL, true), PL_STATUS_INVALID_ARGUMENT,
                "pl_dataset_fashion_mnist", "dir", NULL);
    EXPECT_NULL(pl_loader_new(NULL, 32, true, true, 1), PL_STATUS_INVALID_ARGUMENT,
                "pl_loader_new", "ds", NULL);
    pl_batch b;
    pl_clear_error();
    bool got = pl_loader_next(NULL, &b);
    expect_error_at(__LINE__, "pl_loader_next(NULL, &b)", !got,
                    PL_STATUS_INVALID_ARGUMENT, "pl_loader_next", NULL, NULL);
    pl_clear_error();
    int64_t size = pl_dataset_size(NULL);
    expect_error_at(__LINE__, "pl_dataset_size(NULL)", size == -1,
                    PL_STATUS_INVALID_ARGUMENT, "pl_dataset_size", NULL, NULL);
    /* Destructors ignore NULL, like free(). */
    pl_dataset_free(NULL);
    pl_loader_free(NULL);
    pl_engine_free(NULL);
    pl_graph_free(NULL);
    pl_runtime_free(NULL);
}

/* ---------------------------------------------------------------- graph */

typedef struct model {
    pl_graph_t *g;
    pl_tensor_t *x, *y, *logits, *loss, *acc;
} model;

/* x [B, 8] → linear "head" [B, 10] → cross-entropy with y, + accuracy. */
static bool build_model(model *m, bool set_loss) {
    int64_t shape[1] = {FEATURES};
    m->g = pl_graph_new(1);
    m->x = pl_graph_input(m->g, "x", PL_DTYPE_F32, 1, shape);
    m->y = pl_graph_input(m->g, "y", PL_DTYPE_I32, 0, NULL);
    m->logits = pl_linear(m->g, m->x, CLASSES, "head");
    m->loss = pl_cross_entropy(m->g, m->logits, m->y);
    m->acc = pl_accuracy(m->g, m->logits, m->y);
    if (!m->acc || (set_loss && pl_graph_set_loss(m->g, m->loss) != PL_STATUS_OK)) {
        printf("FAIL: building the test model: %s\n", pl_last_error());
        tu_failures++;
        return false;
    }
    return true;
}

static void test_graph(void) {
    printf("graph construction\n");
    int64_t shape[1] = {FEATURES}, zero[1] = {0};
    model m, other;
    if (!build_model(&m, true) || !build_model(&other, true)) return;
    pl_graph_t *g = m.g;

    EXPECT_NULL(pl_graph_input(NULL, "x", PL_DTYPE_F32, 1, shape),
                PL_STATUS_INVALID_ARGUMENT, "pl_graph_input", "graph", NULL);
    EXPECT_NULL(pl_graph_input(g, NULL, PL_DTYPE_F32, 1, shape),
                PL_STATUS_INVALID_ARGUMENT, "pl_graph_input", "name", NULL);
    EXPECT_NULL(pl_graph_input(g, "z", PL_DTYPE_F32, 1, NULL),
                PL_STATUS_INVALID_ARGUMENT, "pl_graph_input", "'z'", "shape");
    EXPECT_NULL(pl_graph_input(g, "z", PL_DTYPE_F32, 1, zero),
                PL_STATUS_INVALID_ARGUMENT, "pl_graph_input", "'z'", "dim 0 is 0");
    EXPECT_NULL(pl_graph_input(g, "z", (pl_dtype)7, 1, shape),
                PL_STATUS_INVALID_ARGUMENT, "pl_graph_input", "dtype", NULL);

    EXPECT_NULL(pl_linear(NULL, m.x, 4, "fc"), PL_STATUS_INVALID_ARGUMENT,
                "pl_linear", "graph", NULL);
    EXPECT_NULL(pl_linear(g, NULL, 4, "fc"), PL_STATUS_INVALID_ARGUMENT,
                "pl_linear", "x is NULL", NULL);
    EXPECT_NULL(pl_linear(g, m.x, 0, "fc"), PL_STATUS_INVALID_ARGUMENT,
                "pl_linear", "out_features 0", "'fc'");
    EXPECT_NULL(pl_linear(g, other.x, 4, "fc"), PL_STATUS_INVALID_ARGUMENT,
                "pl_linear", "another graph", NULL);
    EXPECT_NULL(pl_relu(NULL, m.x), PL_STATUS_INVALID_ARGUMENT, "pl_relu",
                "graph", NULL);
    EXPECT_NULL(pl_relu(g, NULL), PL_STATUS_INVALID_ARGUMENT, "pl_relu",
                "x is NULL", NULL);
    EXPECT_NULL(pl_gelu(g, NULL), PL_STATUS_INVALID_ARGUMENT, "pl_gelu",
                "x is NULL", NULL);
    /* int32 labels are not a float activation: a dtype error. */
    EXPECT_NULL(pl_relu(g, m.y), PL_STATUS_INVALID_ARGUMENT, "pl_relu", "'y'",
                "int32");
    EXPECT_NULL(pl_mean(g, NULL), PL_STATUS_INVALID_ARGUMENT, "pl_mean",
                "NULL", NULL);
    EXPECT_NULL(pl_add(g, NULL, m.logits, "res"), PL_STATUS_INVALID_ARGUMENT,
                "pl_add", "a is NULL", NULL);
    EXPECT_NULL(pl_add(g, m.logits, NULL, "res"), PL_STATUS_INVALID_ARGUMENT,
                "pl_add", "b is NULL", NULL);

    /* Shape mismatches name both shapes (batch dim as "B") and the op. */
    pl_tensor_t *a10 = pl_linear(g, m.x, 10, "a10");
    pl_tensor_t *b12 = pl_linear(g, m.x, 12, "b12");
    CHECK(a10 && b12, "building the add operands: %s", pl_last_error());
    EXPECT_NULL(pl_add(g, a10, b12, "res"), PL_STATUS_SHAPE_MISMATCH, "[B, 10]",
                "[B, 12]", "'res'");
    EXPECT_NULL(pl_add(g, a10, b12, NULL), PL_STATUS_SHAPE_MISMATCH, "pl_add",
                "[B, 10]", "[B, 12]");

    int64_t three[1] = {3};
    pl_tensor_t *y3 = pl_graph_input(g, "y3", PL_DTYPE_I32, 1, three);
    pl_tensor_t *yf = pl_graph_input(g, "yf", PL_DTYPE_F32, 0, NULL);
    CHECK(y3 && yf, "building label inputs: %s", pl_last_error());
    EXPECT_NULL(pl_cross_entropy(g, m.logits, y3), PL_STATUS_SHAPE_MISMATCH,
                "pl_cross_entropy", "[B, 10]", "[B, 3]");
    EXPECT_NULL(pl_cross_entropy(g, m.logits, yf), PL_STATUS_INVALID_ARGUMENT,
                "pl_cross_entropy", "'yf'", "int32");
    EXPECT_NULL(pl_cross_entropy(g, m.logits, NULL), PL_STATUS_INVALID_ARGUMENT,
                "pl_cross_entropy", "labels", NULL);
    EXPECT_NULL(pl_cross_entropy(g, NULL, m.y), PL_STATUS_INVALID_ARGUMENT,
                "pl_cross_entropy", "NULL", NULL);
    EXPECT_NULL(pl_cross_entropy(NULL, m.logits, m.y), PL_STATUS_INVALID_ARGUMENT,
                "pl_cross_entropy", "graph", NULL);
    EXPECT_NULL(pl_accuracy(g, m.logits, NULL), PL_STATUS_INVALID_ARGUMENT,
                "pl_accuracy", "labels", NULL);
    EXPECT_NULL(pl_accuracy(g, m.logits, y3), PL_STATUS_SHAPE_MISMATCH,
                "pl_accuracy", "[B, 10]", "[B, 3]");

    EXPECT_STATUS(pl_graph_set_loss(NULL, m.loss), PL_STATUS_INVALID_ARGUMENT,
                  "pl_graph_set_loss", "graph", NULL);
    EXPECT_STATUS(pl_graph_set_loss(g, NULL), PL_STATUS_INVALID_ARGUMENT,
                  "pl_graph_set_loss", "loss", NULL);
    EXPECT_STATUS(pl_graph_set_loss(g, m.logits), PL_STATUS_INVALID_ARGUMENT,
                  "pl_graph_set_loss", "'head'", NULL);
    EXPECT_STATUS(pl_graph_set_loss(g, m.acc), PL_STATUS_INVALID_ARGUMENT,
                  "pl_graph_set_loss", pl_tensor_name(m.acc), NULL);
    /* A loss of another graph: its ids mean nothing in this one. */
    EXPECT_STATUS(pl_graph_set_loss(g, other.loss), PL_STATUS_INVALID_ARGUMENT,
                  "pl_graph_set_loss", "another graph", NULL);
    EXPECT_STATUS(pl_graph_set_output(NULL, m.logits), PL_STATUS_INVALID_ARGUMENT,
                  "pl_graph_set_output", "graph", NULL);
    EXPECT_STATUS(pl_graph_set_output(g, NULL), PL_STATUS_INVALID_ARGUMENT,
                  "pl_graph_set_output", "output", NULL);
    EXPECT_STATUS(pl_graph_set_output(g, m.loss), PL_STATUS_INVALID_ARGUMENT,
                  "pl_graph_set_output", pl_tensor_name(m.loss), NULL);
    EXPECT_STATUS(pl_graph_set_output(g, other.logits), PL_STATUS_INVALID_ARGUMENT,
                  "pl_graph_set_output", "another graph", NULL);

    /* Two parameters with one name: refused when the second is created,
     * naming both calls, and the failed call leaves no orphan tensors. */
    int n_params = pl_graph_num_params(g);
    EXPECT_NULL(pl_linear(g, m.x, 4, "head"), PL_STATUS_INVALID_ARGUMENT,
                "pl_linear 'head'", "'head.weight' is already taken by pl_linear 'head'",
                NULL);
    CHECK(pl_graph_num_params(g) == n_params,
          "a refused pl_linear left parameters behind (%d, was %d)",
          pl_graph_num_params(g), n_params);
    EXPECT_NULL(pl_layernorm(g, m.logits, "head"), PL_STATUS_INVALID_ARGUMENT,
                "pl_layernorm 'head'", "already taken by pl_linear 'head'", NULL);

    /* Shapes that no buffer can hold are refused when the tensor is made. */
    int64_t huge[2] = {65536, 65536}, overflow[3] = {INT64_MAX / 2, 4, 4};
    EXPECT_NULL(pl_graph_input(g, "big", PL_DTYPE_F32, 2, huge),
                PL_STATUS_INVALID_ARGUMENT, "'big'", "4294967296 elements per sample",
                "at most 2147483647");
    EXPECT_NULL(pl_graph_input(g, "wraps", PL_DTYPE_F32, 3, overflow),
                PL_STATUS_INVALID_ARGUMENT, "'wraps'", "more than 2^63", NULL);
    int64_t wide[1] = {65536};
    pl_tensor_t *xw = pl_graph_input(g, "xw", PL_DTYPE_F32, 1, wide);
    EXPECT_NULL(pl_linear(g, xw, 65536, "wide"), PL_STATUS_INVALID_ARGUMENT,
                "'wide.weight'", "4294967296 elements", NULL);
    pl_graph_free(m.g);
    pl_graph_free(other.g);

    /* pl_placement_by_name says why it returns NULL. */
    pl_clear_error();
    CHECK(pl_placement_by_name("lru", NULL) == NULL &&
              strstr(pl_last_error(), "unknown policy 'lru'"),
          "pl_placement_by_name(\"lru\"): %s", pl_last_error());
}

/* --------------------------------------------------- runtime and engine */

static void test_engine(pl_runtime_t *rt) {
    printf("engine\n");
    model m, noloss, other;
    if (!build_model(&m, true) || !build_model(&noloss, false) ||
        !build_model(&other, true))
        return;
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = BATCH;
    eo.tiles = 2;

    EXPECT_NULL(pl_engine_new(NULL, m.g, &eo), PL_STATUS_INVALID_ARGUMENT,
                "pl_engine_new", "runtime", NULL);
    EXPECT_NULL(pl_engine_new(rt, NULL, &eo), PL_STATUS_INVALID_ARGUMENT,
                "pl_engine_new", "graph", NULL);
    EXPECT_NULL(pl_engine_new(rt, m.g, NULL), PL_STATUS_INVALID_ARGUMENT,
                "pl_engine_new", "options", NULL);
    EXPECT_NULL(pl_engine_new(rt, noloss.g, &eo), PL_STATUS_INVALID_ARGUMENT,
                "pl_engine_new", "no loss", "pl_graph_set_loss");
    pl_engine_options bad = eo;
    bad.batch_size = 0;
    EXPECT_NULL(pl_engine_new(rt, m.g, &bad), PL_STATUS_INVALID_ARGUMENT,
                "pl_engine_new", "batch_size 0", NULL);
    bad = eo;
    bad.batch_size = 4;
    bad.tiles = 8;
    EXPECT_NULL(pl_engine_new(rt, m.g, &bad), PL_STATUS_INVALID_ARGUMENT,
                "pl_engine_new", "tiles 8", "batch_size 4");
    bad = eo;
    bad.tiles = -1;
    EXPECT_NULL(pl_engine_new(rt, m.g, &bad), PL_STATUS_INVALID_ARGUMENT,
                "pl_engine_new", "tiles -1", NULL);
    bad = eo;
    bad.optimizer.lr = 0.0f;
    EXPECT_NULL(pl_engine_new(rt, m.g, &bad), PL_STATUS_INVALID_ARGUMENT,
                "pl_engine_new", "lr 0", "must be > 0");
    bad = eo;
    bad.optimizer.beta2 = 1.0f;
    EXPECT_NULL(pl_engine_new(rt, m.g, &bad), PL_STATUS_INVALID_ARGUMENT,
                "pl_engine_new", "beta2 1", "[0, 1)");
    bad = eo;
    bad.optimizer.kind = (pl_optimizer_kind)5;
    EXPECT_NULL(pl_engine_new(rt, m.g, &bad), PL_STATUS_INVALID_ARGUMENT,
                "pl_engine_new", "optimizer kind 5", NULL);
    bad = eo;
    bad.schedule = (pl_schedule_kind)99; /* not a pl_schedule_kind value */
    EXPECT_NULL(pl_engine_new(rt, m.g, &bad), PL_STATUS_INVALID_ARGUMENT,
                "pl_engine_new", "schedule 99", NULL);

    pl_engine_t *e = pl_engine_new(rt, m.g, &eo);
    if (!e) {
        printf("FAIL: pl_engine_new on a valid graph: %s\n", pl_last_error());
        tu_failures++;
        goto done;
    }

    float x[(BATCH + 1) * FEATURES];
    int32_t y[BATCH + 1];
    for (int i = 0; i < (BATCH + 1) * FEATURES; i++) x[i] = (float)(i % 7) * 0.1f;
    for (int i = 0; i < BATCH + 1; i++) y[i] = i % CLASSES;
    const void *data[2] = {x, y};
    pl_batch b = {.size = BATCH, .data = data};
    pl_step_options so = {.return_loss = true};
    pl_step_result r;

    EXPECT_STATUS(pl_engine_forward_backward(NULL, &b, &so, &r),
                  PL_STATUS_INVALID_ARGUMENT, "pl_engine_forward_backward",
                  "engine", NULL);
    EXPECT_STATUS(pl_engine_forward_backward(e, NULL, &so, &r),
                  PL_STATUS_INVALID_ARGUMENT, "pl_engine_forward_backward",
                  "batch", NULL);
    EXPECT_STATUS(pl_engine_forward_backward(e, &b, NULL, &r),
                  PL_STATUS_INVALID_ARGUMENT, "pl_engine_forward_backward",
                  "opts", NULL);
    EXPECT_STATUS(pl_engine_forward_backward(e, &b, &so, NULL),
                  PL_STATUS_INVALID_ARGUMENT, "pl_engine_forward_backward",
                  "result", NULL);
    pl_batch big = {.size = BATCH + 1, .data = data};
    EXPECT_STATUS(pl_engine_forward_backward(e, &big, &so, &r),
                  PL_STATUS_INVALID_ARGUMENT, "batch size 9", "[1, 8]", NULL);
    pl_batch empty = {.size = 0, .data = data};
    EXPECT_STATUS(pl_engine_forward_backward(e, &empty, &so, &r),
                  PL_STATUS_INVALID_ARGUMENT, "batch size 0", NULL, NULL);
    pl_batch nodata = {.size = BATCH, .data = NULL};
    EXPECT_STATUS(pl_engine_forward_backward(e, &nodata, &so, &r),
                  PL_STATUS_INVALID_ARGUMENT, "pl_engine_forward_backward",
                  "data", NULL);
    const void *half[2] = {x, NULL};
    pl_batch nolabels = {.size = BATCH, .data = half};
    EXPECT_STATUS(pl_engine_forward_backward(e, &nolabels, &so, &r),
                  PL_STATUS_INVALID_ARGUMENT, "pl_engine_forward_backward",
                  "'y'", "NULL");

    /* Labels outside [0, K): the step fails after running, and the
     * optimizer must not have been stepped on the broken batch. */
    y[3] = CLASSES;
    EXPECT_STATUS(pl_engine_train_step(e, &b, &r), PL_STATUS_INVALID_ARGUMENT,
                  "outside [0, 10)", "'y'", "pl_cross_entropy of 'head'");
    CHECK(pl_engine_steps(e) == 0,
          "a step with bad labels still ran the optimizer (%lld steps)",
          (long long)pl_engine_steps(e));
    y[3] = -1;
    EXPECT_STATUS(pl_engine_forward_backward(e, &b, &so, &r),
                  PL_STATUS_INVALID_ARGUMENT, "outside [0, 10)", NULL, NULL);
    /* The engine stays usable after every failure above. */
    y[3] = 3;
    pl_clear_error();
    pl_status st = pl_engine_train_step(e, &b, &r);
    CHECK(st == PL_STATUS_OK && r.loss > 0.0 && r.loss < 100.0 &&
              pl_engine_steps(e) == 1,
          "a valid step after the failures: status %d, loss %g, steps %lld (%s)",
          (int)st, r.loss, (long long)pl_engine_steps(e), pl_last_error());

    enum { BUF = CLASSES * FEATURES };
    float buf[BUF];
    pl_tensor_t *w = pl_graph_find(m.g, "head.weight");
    CHECK(w != NULL, "pl_graph_find(\"head.weight\") is NULL");
    EXPECT_STATUS(pl_engine_get_param(NULL, w, buf, BUF), PL_STATUS_INVALID_ARGUMENT,
                  "pl_engine_get_param", "engine", NULL);
    EXPECT_STATUS(pl_engine_get_param(e, NULL, buf, BUF), PL_STATUS_INVALID_ARGUMENT,
                  "pl_engine_get_param", "param", NULL);
    EXPECT_STATUS(pl_engine_get_param(e, w, NULL, BUF), PL_STATUS_INVALID_ARGUMENT,
                  "pl_engine_get_param", "buffer", NULL);
    EXPECT_STATUS(pl_engine_get_param(e, m.logits, buf, BUF), PL_STATUS_INVALID_ARGUMENT,
                  "pl_engine_get_param", "'head'", "not a parameter");
    EXPECT_STATUS(pl_engine_get_param(e, pl_graph_find(other.g, "head.weight"), buf, BUF),
                  PL_STATUS_INVALID_ARGUMENT, "pl_engine_get_param",
                  "not a parameter of this engine's graph", NULL);
    EXPECT_STATUS(pl_engine_set_param(e, w, NULL, BUF), PL_STATUS_INVALID_ARGUMENT,
                  "pl_engine_set_param", "buffer", NULL);
    EXPECT_STATUS(pl_engine_get_grad(e, NULL, buf, BUF), PL_STATUS_INVALID_ARGUMENT,
                  "pl_engine_get_grad", "param", NULL);
    /* Buffer lengths: a short one is refused before anything is copied
     * (an 8-float buffer used to be overrun by the 80-float weight). */
    EXPECT_STATUS(pl_engine_get_param(e, w, buf, 8), PL_STATUS_INVALID_ARGUMENT,
                  "pl_engine_get_param", "'head.weight' has 80 elements", "buffer 8");
    EXPECT_STATUS(pl_engine_get_grad(e, w, buf, BUF - 1), PL_STATUS_INVALID_ARGUMENT,
                  "pl_engine_get_grad", "'head.weight'", "buffer 79");
    EXPECT_STATUS(pl_engine_set_param(e, w, buf, 8), PL_STATUS_INVALID_ARGUMENT,
                  "pl_engine_set_param", "'head.weight' has 80 elements", "exactly");
    EXPECT_STATUS(pl_engine_set_param(e, w, buf, BUF + 1), PL_STATUS_INVALID_ARGUMENT,
                  "pl_engine_set_param", "buffer 81", NULL);
    pl_clear_error();
    CHECK(pl_engine_get_param(e, w, buf, BUF + 100) == PL_STATUS_OK,
          "a larger buffer is refused: %s", pl_last_error());

    /* A graph is frozen while an engine built from it exists. */
    EXPECT_NULL(pl_linear(m.g, m.x, 4, "late"), PL_STATUS_INVALID_ARGUMENT,
                "pl_linear", "frozen", "engine #");
    EXPECT_NULL(pl_relu(m.g, m.logits), PL_STATUS_INVALID_ARGUMENT, "pl_relu",
                "frozen", NULL);
    int64_t one[1] = {1};
    EXPECT_NULL(pl_graph_input(m.g, "late", PL_DTYPE_F32, 1, one),
                PL_STATUS_INVALID_ARGUMENT, "pl_graph_input", "frozen", NULL);
    EXPECT_STATUS(pl_graph_set_loss(m.g, m.loss), PL_STATUS_INVALID_ARGUMENT,
                  "pl_graph_set_loss", "frozen", NULL);
    EXPECT_STATUS(pl_graph_set_output(m.g, m.logits), PL_STATUS_INVALID_ARGUMENT,
                  "pl_graph_set_output", "frozen", NULL);
    EXPECT_STATUS(pl_param_set_init(w, PL_INIT_ZEROS, 0.0f),
                  PL_STATUS_INVALID_ARGUMENT, "pl_param_set_init", "frozen", NULL);
    pl_clear_error();
    CHECK(pl_graph_begin_block(m.g, "late") == -1 && strstr(pl_last_error(), "frozen"),
          "pl_graph_begin_block on a frozen graph: %s", pl_last_error());

    /* Task records of an engine built without record_tasks: an error, not a
     * silent 0. */
    const pl_task_record *rec = NULL;
    pl_clear_error();
    CHECK(pl_engine_task_records(NULL, &rec) == -1 &&
              pl_last_status() == PL_STATUS_INVALID_ARGUMENT && rec == NULL,
          "task records of a NULL engine: %s", pl_last_error());
    pl_clear_error();
    CHECK(pl_engine_task_records(e, &rec) == -1 &&
              strstr(pl_last_error(), "record_tasks") && rec == NULL,
          "task records without record_tasks: %s", pl_last_error());

    EXPECT_STATUS(pl_engine_set_lr(NULL, 0.1f), PL_STATUS_INVALID_ARGUMENT,
                  "pl_engine_set_lr", "engine", NULL);
    EXPECT_STATUS(pl_engine_set_lr(e, 0.0f), PL_STATUS_INVALID_ARGUMENT,
                  "pl_engine_set_lr", "lr 0", NULL);
    EXPECT_STATUS(pl_engine_optimizer_step(NULL), PL_STATUS_INVALID_ARGUMENT,
                  "pl_engine_optimizer_step", "engine", NULL);
    EXPECT_STATUS(pl_engine_train_step(NULL, &b, &r), PL_STATUS_INVALID_ARGUMENT,
                  "pl_engine_train_step", "engine", NULL);
    CHECK(pl_engine_num_chunks(NULL) == 0 && pl_engine_chunk_elems(NULL, 0) == 0 &&
              pl_engine_chunk_elems(e, -1) == 0 && pl_engine_steps(NULL) == 0,
          "NULL/out-of-range engine queries do not return 0");
    pl_engine_set_batch_process(NULL, NULL, NULL); /* ignored */
    pl_engine_free(e);
    /* Freed: the graph takes ops again. */
    pl_clear_error();
    CHECK(pl_relu(m.g, m.logits) != NULL, "pl_relu after pl_engine_free: %s",
          pl_last_error());
done:
    pl_graph_free(m.g);
    pl_graph_free(noloss.g);
    pl_graph_free(other.g);
}

/* Sizes are checked before anything is allocated: a tile buffer larger
 * than StarPU 1.3 / 32-bit BLAS can describe (it used to wrap to a tiny
 * allocation that the kernels overran), and a model larger than memory (it
 * used to grow for a minute before failing). */
static void test_engine_sizes(pl_runtime_t *rt) {
    printf("engine sizes\n");
    pl_graph_t *g = pl_graph_new(1);
    int64_t big[1] = {INT64_C(1) << 30};
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, big);
    pl_tensor_t *loss = pl_mean(g, pl_linear(g, x, 1, "fc"));
    CHECK(loss && pl_graph_set_loss(g, loss) == PL_STATUS_OK, "tile model: %s",
          pl_last_error());
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = 4;
    eo.tiles = 1;
    EXPECT_NULL(pl_engine_new(rt, g, &eo), PL_STATUS_INVALID_ARGUMENT,
                "tensor 'x' [B, 1073741824]", "tile of 4 samples",
                "at most 1 samples per tile");
    pl_graph_free(g);

    /* 64 layers of 2^30 weights: 1 TiB with gradients and AdamW states. */
    g = pl_graph_new(1);
    int64_t width[1] = {32768};
    pl_tensor_t *h = pl_graph_input(g, "x", PL_DTYPE_F32, 1, width);
    for (int l = 0; l < 64 && h; l++) {
        char name[16];
        snprintf(name, sizeof name, "fc%d", l);
        h = pl_linear(g, h, 32768, name);
    }
    loss = h ? pl_mean(g, h) : NULL;
    CHECK(loss && pl_graph_set_loss(g, loss) == PL_STATUS_OK, "huge model: %s",
          pl_last_error());
    eo.batch_size = 1;
    EXPECT_NULL(pl_engine_new(rt, g, &eo), PL_STATUS_OUT_OF_MEMORY,
                "pl_engine_new: the engine needs", "model state 1088.00 GiB",
                "of memory are available");
    pl_graph_free(g);
}

static void test_checkpoint_helpers(void) {
    printf("checkpoint helpers\n");
    pl_checkpoint_values v;
    char out[64];
    EXPECT_STATUS(pl_checkpoint_read_values(NULL, &v), PL_STATUS_INVALID_ARGUMENT,
                  "pl_checkpoint_read_values", "dir", NULL);
    EXPECT_STATUS(pl_checkpoint_read_values("/nonexistent", NULL), PL_STATUS_INVALID_ARGUMENT,
                  "pl_checkpoint_read_values", "values", NULL);
    EXPECT_STATUS(pl_checkpoint_read_values("/nonexistent", &v), PL_STATUS_IO_ERROR,
                  "/nonexistent/state.json", NULL, NULL);
    EXPECT_STATUS(pl_checkpoint_find(NULL, out, sizeof out), PL_STATUS_INVALID_ARGUMENT,
                  "pl_checkpoint_find", "path", NULL);
    EXPECT_STATUS(pl_checkpoint_find("/nonexistent", NULL, 0), PL_STATUS_INVALID_ARGUMENT,
                  "pl_checkpoint_find", "room", NULL);
}

int main(void) {
    test_status_strings();
    test_thread_local();
    test_data();
    test_graph();
    test_checkpoint_helpers();

    printf("runtime\n");
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = -1;
    EXPECT_NULL(pl_runtime_new(&ro), PL_STATUS_INVALID_ARGUMENT, "pl_runtime_new",
                "cpu_workers -1", NULL);
    ro.cpu_workers = 2;
    ro.mpi_progress = (pl_mpi_progress)7;
    EXPECT_NULL(pl_runtime_new(&ro), PL_STATUS_INVALID_ARGUMENT, "pl_runtime_new",
                "mpi_progress 7", NULL);
    ro.mpi_progress = PL_MPI_PROGRESS_WORKER; /* one process: no MPI, the thread mode */
    /* StarPU's messages are silenced by setting STARPU_SILENT while StarPU
     * starts: the caller's environment (here without it) stays as it was. */
    char *silent = getenv("STARPU_SILENT") ? strdup(getenv("STARPU_SILENT")) : NULL;
    unsetenv("STARPU_SILENT");
    pl_runtime_t *rt = pl_runtime_new(&ro);
    CHECK(!getenv("STARPU_SILENT"), "pl_runtime_new left STARPU_SILENT=%s in the environment",
          getenv("STARPU_SILENT"));
    if (silent) setenv("STARPU_SILENT", silent, 1);
    free(silent);
    CHECK(!rt || pl_runtime_mpi_progress(rt) == PL_MPI_PROGRESS_THREAD,
          "a runtime of one process reports mpi_progress %d, not THREAD",
          rt ? (int)pl_runtime_mpi_progress(rt) : -1);
    if (!rt) {
        printf("FAIL: pl_runtime_new: %s\n", pl_last_error());
        return 1;
    }
    /* StarPU is a process-wide singleton: a second runtime must be refused
     * (not start StarPU twice or silently share it). */
    EXPECT_NULL(pl_runtime_new(&ro), PL_STATUS_INVALID_ARGUMENT, "pl_runtime_new",
                "already exists", NULL);
    CHECK(pl_runtime_cpu_workers(NULL) == 0, "pl_runtime_cpu_workers(NULL) != 0");
    /* pl_runtime_gather: bad arguments named; one process copies its own. */
    double mine[3] = {1.5, -2.0, 3.25}, all[3] = {0, 0, 0};
    EXPECT_STATUS(pl_runtime_gather(NULL, mine, 3, all), PL_STATUS_INVALID_ARGUMENT,
                  "pl_runtime_gather", "runtime is NULL", NULL);
    EXPECT_STATUS(pl_runtime_gather(rt, mine, 4097, all), PL_STATUS_INVALID_ARGUMENT,
                  "pl_runtime_gather", "n out of", NULL);
    EXPECT_STATUS(pl_runtime_gather(rt, NULL, 3, all), PL_STATUS_INVALID_ARGUMENT,
                  "pl_runtime_gather", "values is NULL", NULL);
    EXPECT_STATUS(pl_runtime_gather(rt, mine, 3, NULL), PL_STATUS_INVALID_ARGUMENT,
                  "pl_runtime_gather", "all is NULL", NULL);
    CHECK(pl_runtime_gather(rt, mine, 3, all) == PL_STATUS_OK && all[0] == 1.5 &&
              all[1] == -2.0 && all[2] == 3.25,
          "pl_runtime_gather in one process: %g %g %g, not its own values", all[0], all[1],
          all[2]);

    test_engine(rt);
    test_engine_sizes(rt);
    pl_runtime_free(rt);
    if (tu_failures) {
        printf("FAIL: %d API error-handling failure(s)\n", tu_failures);
        return 1;
    }
    printf("api_errors: all checks passed\n");
    return 0;
}
