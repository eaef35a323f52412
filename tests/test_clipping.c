/* Gradient clipping by global norm (pl_engine_options.max_norm, norm_type)
 * against torch.nn.utils.clip_grad_norm_ (tests/reference/clip_reference.py
 * writes the reference): on a small MLP, the pre-clip norm each update
 * reports (pl_engine_grad_norm) and the parameters after the updates, for
 * the 2-norm and the inf-norm, a max_norm above the norm (nothing
 * clipped), and AdamW over accumulated batches. Then: the same clipped
 * run is bitwise identical non-pipelined and under 1F1B, and bad options
 * and a norm asked of an engine that does not clip are refused.
 *
 *   test_clipping tests/reference/clip_reference.txt
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pleiades.h"
#include "reference_util.h"

enum { B = 8, IN = 6, HID = 12, K = 4, N_PARAMS = 4 };
static const char *PARAMS[N_PARAMS] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};

static pl_graph_t *build(void) {
    pl_graph_t *g = pl_graph_new(1);
    int64_t shape[1] = {IN};
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, shape);
    pl_tensor_t *y = pl_graph_input(g, "y", PL_DTYPE_I32, 0, NULL);
    pl_tensor_t *h = pl_relu(g, pl_linear(g, x, HID, "fc1"));
    pl_graph_begin_block(g, "out");
    CHECK_PL(pl_graph_set_loss(g, pl_cross_entropy(g, pl_linear(g, h, K, "fc2"), y)));
    return g;
}

typedef struct run_spec {
    const char *name;
    float max_norm, norm_type;
    pl_optimizer_kind optimizer;
    int steps, accumulate;
    pl_schedule_kind schedule;
} run_spec;

/* Trains the reference MLP from the file's initial parameters as `s`
 * says; fills norms[steps] and the final parameters (params[i] holds
 * PARAMS[i], malloc'd). */
static void train(pl_runtime_t *rt, const run_spec *s, double *norms, float **params) {
    pl_graph_t *g = build();
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = B / s->accumulate;
    eo.tiles = 2;
    eo.optimizer.kind = s->optimizer;
    eo.optimizer.lr = s->optimizer == PL_OPTIMIZER_SGD ? 0.1f : 1e-2f;
    eo.optimizer.weight_decay = s->optimizer == PL_OPTIMIZER_SGD ? 0.0f : 0.01f;
    eo.accumulate_size = s->accumulate;
    eo.max_norm = s->max_norm;
    eo.norm_type = s->norm_type;
    eo.schedule = s->schedule;
    eo.stages = s->schedule == PL_SCHEDULE_NONE ? 0 : 2;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK_PTR(e, "pl_engine_new");
    int64_t numel[N_PARAMS] = {HID * IN, HID, K * HID, K};
    for (int i = 0; i < N_PARAMS; i++) {
        float *v = tu_text_floats(PARAMS[i], numel[i]);
        CHECK_PL(pl_engine_set_param(e, pl_graph_param(g, i), v, (size_t)numel[i]));
        free(v);
    }
    float *x = tu_text_floats("x", B * IN);
    const double *lab = tu_text_get("labels", B);
    int32_t y[B];
    for (int i = 0; i < B; i++) y[i] = (int32_t)lab[i];
    int per = B / s->accumulate;
    for (int step = 0; step < s->steps; step++) {
        for (int a = 0; a < s->accumulate; a++) {
            const void *data[2] = {x + a * per * IN, y + a * per};
            pl_batch batch = {.size = per, .data = data};
            pl_step_result r;
            CHECK_PL(pl_engine_train_step(e, &batch, &r));
        }
        CHECK_PL(pl_engine_grad_norm(e, &norms[step]));
    }
    for (int i = 0; i < N_PARAMS; i++) {
        params[i] = tu_xmalloc((size_t)numel[i] * sizeof(float));
        CHECK_PL(pl_engine_get_param(e, pl_graph_param(g, i), params[i], (size_t)numel[i]));
    }
    free(x);
    pl_engine_free(e);
    pl_graph_free(g);
}

static void free_params(float **p) {
    for (int i = 0; i < N_PARAMS; i++) free(p[i]);
}

/* Norms to 1e-5 relative; parameters to 1e-5 of the tensor's largest
 * magnitude after SGD (one exact-arithmetic step), 1e-4 after AdamW. */
static void check_case(pl_runtime_t *rt, const run_spec *s) {
    double norms[8];
    float *params[N_PARAMS];
    train(rt, s, norms, params);
    char name[96];
    snprintf(name, sizeof name, "%s.norm", s->name);
    const double *ref_norms = tu_text_get(name, s->steps);
    for (int k = 0; k < s->steps; k++) {
        double d = fabs(norms[k] - ref_norms[k]) / ref_norms[k];
        CHECK(d <= 1e-5, "%s: step %d norm %.9g, torch %.9g", s->name, k + 1, norms[k],
              ref_norms[k]);
    }
    int64_t numel[N_PARAMS] = {HID * IN, HID, K * HID, K};
    double tol = s->optimizer == PL_OPTIMIZER_SGD ? 1e-5 : 1e-4;
    for (int i = 0; i < N_PARAMS; i++) {
        snprintf(name, sizeof name, "%s.%s", s->name, PARAMS[i]);
        const double *ref = tu_text_get(name, numel[i]);
        double max_ref = 0.0, max_diff = 0.0;
        for (int64_t j = 0; j < numel[i]; j++) {
            if (fabs(ref[j]) > max_ref) max_ref = fabs(ref[j]);
            if (fabs(params[i][j] - ref[j]) > max_diff) max_diff = fabs(params[i][j] - ref[j]);
        }
        CHECK(max_diff <= tol * max_ref, "%s: max |diff| %.3g > %.0e x %.3g", name, max_diff,
              tol, max_ref);
    }
    printf("%s: norm %.7f (torch %.7f), parameters match\n", s->name, norms[0],
           ref_norms[0]);
    free_params(params);
}

/* The schedule changes when tasks run, not what they compute. */
static void check_schedules(pl_runtime_t *rt) {
    run_spec s = {"adamw_acc", 0.3f, 2.0f, PL_OPTIMIZER_ADAMW, 3, 2, PL_SCHEDULE_NONE};
    double n0[3], n1[3];
    float *p0[N_PARAMS], *p1[N_PARAMS];
    if (tu_pipeline_skipped(rt, 2, "clipping under 1F1B")) return;
    train(rt, &s, n0, p0);
    s.schedule = PL_SCHEDULE_1F1B;
    train(rt, &s, n1, p1);
    CHECK(memcmp(n0, n1, sizeof n0) == 0, "norms differ between none and 1F1B");
    int64_t numel[N_PARAMS] = {HID * IN, HID, K * HID, K};
    for (int i = 0; i < N_PARAMS; i++)
        CHECK(memcmp(p0[i], p1[i], (size_t)numel[i] * sizeof(float)) == 0,
              "%s differs between none and 1F1B", PARAMS[i]);
    printf("clipped AdamW: bitwise identical under none and 1F1B\n");
    free_params(p0);
    free_params(p1);
}

/* A constructor that must refuse: NULL, and the message names `frag`. */
static void expect_refused(pl_runtime_t *rt, pl_graph_t *g, const pl_engine_options *eo,
                           const char *what, const char *frag1, const char *frag2) {
    pl_engine_t *e = pl_engine_new(rt, g, eo);
    CHECK(e == NULL, "%s accepted", what);
    pl_engine_free(e);
    tu_expect_error(__LINE__, what, pl_last_status(), PL_STATUS_INVALID_ARGUMENT, frag1,
                    frag2);
}

static void check_errors(pl_runtime_t *rt) {
    pl_graph_t *g = build();
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = B;
    eo.max_norm = -1.0f;
    expect_refused(rt, g, &eo, "max_norm -1", "max_norm", "-1");
    eo.max_norm = NAN;
    expect_refused(rt, g, &eo, "max_norm NaN", "max_norm", NULL);
    eo.max_norm = 1.0f;
    eo.norm_type = 1.0f;
    expect_refused(rt, g, &eo, "norm_type 1", "norm_type", "2 or INFINITY");
    /* No clipping: no norm to report. */
    eo.max_norm = 0.0f;
    eo.norm_type = 2.0f;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK_PTR(e, "pl_engine_new");
    double norm;
    tu_expect_error(__LINE__, "a norm from an engine that does not clip",
                    pl_engine_grad_norm(e, &norm), PL_STATUS_INVALID_ARGUMENT,
                    "max_norm is 0", NULL);
    pl_engine_free(e);
    /* Clipping, but no update yet. */
    eo.max_norm = 1.0f;
    e = pl_engine_new(rt, g, &eo);
    CHECK_PTR(e, "pl_engine_new");
    tu_expect_error(__LINE__, "a norm before any update", pl_engine_grad_norm(e, &norm),
                    PL_STATUS_INVALID_ARGUMENT, "no optimizer update", NULL);
    pl_engine_free(e);
    pl_graph_free(g);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_clipping clip_reference.txt\n");
        return 2;
    }
    tu_text_load(argv[1], "clip_reference");
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 2;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    CHECK_PTR(rt, "pl_runtime_new");
    static const run_spec cases[] = {
        {"sgd_l2", 0.5f, 2.0f, PL_OPTIMIZER_SGD, 1, 1, PL_SCHEDULE_NONE},
        {"sgd_inf", 0.05f, INFINITY, PL_OPTIMIZER_SGD, 1, 1, PL_SCHEDULE_NONE},
        {"sgd_noclip", 100.0f, 2.0f, PL_OPTIMIZER_SGD, 1, 1, PL_SCHEDULE_NONE},
        {"adamw_acc", 0.3f, 2.0f, PL_OPTIMIZER_ADAMW, 3, 2, PL_SCHEDULE_NONE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_case(rt, &cases[i]);
    check_schedules(rt);
    check_errors(rt);
    pl_runtime_free(rt);
    tu_text_free();
    return tu_failures ? 1 : 0;
}
