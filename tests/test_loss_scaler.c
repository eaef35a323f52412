/* Dynamic loss scaling (pl_engine_options.loss_scaler), against an
 * independent copy of Colossal-AI's DynamicGradScaler rule written here:
 *
 *  1. a scripted run of 30 updates, an inf injected into the gradients at
 *     chosen ones (a test op whose backward writes inf when told to),
 *     gives the rule's scale before every update and its skips, through
 *     growth, the max_scale clamp, hysteresis, backoff and the min_scale
 *     clamp;
 *  2. a skipped update changes no parameter and not the step count, and
 *     a run with a skipped update then continues bitwise as a run that
 *     never had that batch (so the optimizer state did not move either);
 *  3. without overflow, training with the scaler on gives bitwise the
 *     parameters of training with it off (power-of-two scales), for AdamW
 *     and for SGD with clipping and accumulation (the clip norm is of the
 *     unscaled gradients);
 *  4. the scaler's state (scale, growth_step, hysteresis_step) survives a
 *     checkpoint: a resumed run continues exactly as the straight one;
 *  5. bad options are refused naming the field.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pleiades.h"
#include "reference_util.h"
#include "test_util.h"

enum { B = 8, IN = 6, HID = 12, K = 4 };

/* ------------------------------------------- an op that injects an inf */

/* Set by the test around a train step: the backward of "poison" (y = x)
 * then writes inf into its input gradient. Every task of the step has
 * finished when pl_engine_train_step returns with the scaler on (the
 * update waits for the overflow verdict), so the flag is never read by a
 * later step's task. */
static atomic_int poison_on;

static pl_status poison_shape(const pl_op_def *def, const char *op, pl_tensor_t *const *in,
                              const void *attrs, pl_op_layout *layout) {
    (void)def, (void)op, (void)attrs;
    layout->out_ndim = pl_tensor_shape(in[0], layout->out_shape);
    layout->flops = (double)pl_tensor_numel(in[0]);
    return PL_STATUS_OK;
}

static int poison_forward(pl_op_call *c) {
    memcpy(c->out, c->in[0], (size_t)(c->samples * c->in_numel[0]) * sizeof(float));
    return 0;
}

static int poison_backward(pl_op_call *c) {
    int64_t n = c->samples * c->in_numel[0];
    for (int64_t i = 0; i < n; i++)
        c->dinput[i] = c->accumulate ? c->dinput[i] + c->dout[i] : c->dout[i];
    if (atomic_load(&poison_on) && n > 0) c->dinput[0] = INFINITY;
    return 0;
}

static const pl_op_def POISON = {
    .name = "poison",
    .n_inputs = 1,
    .input_names = {"x"},
    .shape = poison_shape,
    .forward = {.cpu = poison_forward},
    .backward_input = {{.cpu = poison_backward}},
};

static pl_graph_t *build(void) {
    pl_graph_t *g = pl_graph_new(3);
    int64_t shape[1] = {IN};
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, shape);
    pl_tensor_t *y = pl_graph_input(g, "y", PL_DTYPE_I32, 0, NULL);
    pl_tensor_t *h = pl_linear(g, x, HID, "fc1");
    h = pl_graph_op(g, &POISON, &h, 1, NULL, "poison");
    h = pl_relu(g, h);
    CHECK_PL(pl_graph_set_loss(g, pl_cross_entropy(g, pl_linear(g, h, K, "fc2"), y)));
    return g;
}

static float X[B * IN];
static int32_t Y[B];

static void make_data(void) {
    uint64_t s = 7;
    for (int i = 0; i < B * IN; i++)
        X[i] = (float)((tu_splitmix64(&s) >> 40) / 16777216.0) * 2.0f - 1.0f;
    for (int i = 0; i < B; i++) Y[i] = (int32_t)(tu_splitmix64(&s) % K);
}

static pl_engine_options options(void) {
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = B;
    eo.tiles = 2;
    eo.optimizer.lr = 1e-2f;
    return eo;
}

/* One update (accumulate_size batches of B/accumulate_size), poisoned or not. */
static void update(pl_engine_t *e, int accumulate, bool poison) {
    int per = B / accumulate;
    atomic_store(&poison_on, poison);
    for (int a = 0; a < accumulate; a++) {
        const void *data[2] = {X + a * per * IN, Y + a * per};
        pl_batch batch = {.size = per, .data = data};
        pl_step_result r;
        CHECK_PL(pl_engine_train_step(e, &batch, &r));
    }
    atomic_store(&poison_on, 0);
}

/* Every parameter, concatenated (malloc'd); *n floats. */
static float *all_params(pl_engine_t *e, pl_graph_t *g, size_t *n) {
    size_t total = 0;
    for (int i = 0; i < pl_graph_num_params(g); i++)
        total += (size_t)pl_tensor_numel(pl_graph_param(g, i));
    float *out = tu_xmalloc(total * sizeof *out), *p = out;
    for (int i = 0; i < pl_graph_num_params(g); i++) {
        const pl_tensor_t *t = pl_graph_param(g, i);
        CHECK_PL(pl_engine_get_param(e, t, p, (size_t)pl_tensor_numel(t)));
        p += pl_tensor_numel(t);
    }
    *n = total;
    return out;
}

/* ------------------------------------------- the rule, written again */

typedef struct ref_scaler {
    double scale, min_scale, max_scale, growth_factor, backoff_factor;
    int growth_interval, hysteresis, growth_step, hysteresis_step;
} ref_scaler;

/* colossalai/amp/naive_amp/grad_scaler/dynamic_grad_scaler.py, update() */
static void ref_update(ref_scaler *r, bool overflow) {
    if (overflow) {
        r->hysteresis_step += 1;
        r->growth_step = 0;
        if (r->hysteresis_step >= r->hysteresis)
            r->scale = fmax(r->scale * r->backoff_factor, r->min_scale);
    } else {
        r->growth_step += 1;
        if (r->growth_step == r->growth_interval) {
            r->growth_step = 0;
            r->hysteresis_step = 0;
            r->scale = fmin(r->scale * r->growth_factor, r->max_scale);
        }
    }
}

/* 1. The scale before each update and the skips follow the rule. */
static void check_sequence(pl_runtime_t *rt) {
    /* growth to the max clamp (0-8), one overflow (no backoff: hysteresis
     * 2), a clean step that does not reset hysteresis_step (10), backoff
     * down to the min clamp (11-17), overflow with growth_step pending
     * (20), growth resetting hysteresis (23), then 1 overflow without and
     * 2 with backoff. */
    static const int script[30] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 1, 1,
                                   1, 1, 1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 1};
    pl_graph_t *g = build();
    pl_engine_options eo = options();
    eo.optimizer.kind = PL_OPTIMIZER_SGD;
    eo.loss_scaler = (pl_loss_scaler_options){
        .enabled = true, .initial_scale = 1024, .min_scale = 64, .max_scale = 4096,
        .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 3, .hysteresis = 2};
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK_PTR(e, "pl_engine_new");
    ref_scaler r = {.scale = 1024, .min_scale = 64, .max_scale = 4096, .growth_factor = 2,
                    .backoff_factor = 0.5, .growth_interval = 3, .hysteresis = 2};
    int64_t clean = 0;
    bool hit_max = false, hit_min = false;
    for (int i = 0; i < 30; i++) {
        double scale;
        bool last;
        CHECK_PL(pl_engine_loss_scale(e, &scale, &last));
        CHECK(scale == r.scale, "update %d: scale %g, the rule's %g", i, scale, r.scale);
        update(e, 1, script[i]);
        CHECK_PL(pl_engine_loss_scale(e, &scale, &last));
        CHECK(last == (bool)script[i], "update %d: last_overflow %d, injected %d", i, last,
              script[i]);
        ref_update(&r, script[i]);
        clean += !script[i];
        CHECK(pl_engine_steps(e) == clean, "update %d: %lld steps, %lld clean updates", i,
              (long long)pl_engine_steps(e), (long long)clean);
        hit_max |= r.scale == 4096 && !script[i] && r.growth_step == 0;
        hit_min |= r.scale == 64 && script[i];
    }
    double scale;
    bool last;
    CHECK_PL(pl_engine_loss_scale(e, &scale, &last));
    CHECK(scale == r.scale, "after the run: scale %g, the rule's %g", scale, r.scale);
    CHECK(hit_max && hit_min, "the script no longer reaches both clamps");
    printf("30 scripted updates: scales and skips follow the rule (final scale %g)\n", scale);
    pl_engine_free(e);
    pl_graph_free(g);
}

/* 2. A skipped update changes nothing; the run then continues as one
 * that never saw that batch (AdamW: its moments and step count held). */
static void check_skip(pl_runtime_t *rt) {
    pl_graph_t *g0 = build(), *g1 = build();
    pl_engine_options eo = options();
    eo.loss_scaler = pl_engine_options_default().loss_scaler;
    eo.loss_scaler.enabled = true;
    pl_engine_t *e0 = pl_engine_new(rt, g0, &eo), *e1 = pl_engine_new(rt, g1, &eo);
    CHECK_PTR(e0, "pl_engine_new");
    CHECK_PTR(e1, "pl_engine_new");
    for (int i = 0; i < 3; i++) {
        update(e0, 1, false);
        update(e1, 1, false);
    }
    size_t n, n2;
    float *before = all_params(e1, g1, &n);
    update(e1, 1, true);
    float *after = all_params(e1, g1, &n2);
    CHECK(memcmp(before, after, n * sizeof *before) == 0,
          "a skipped update changed the parameters");
    CHECK(pl_engine_steps(e1) == 3, "a skipped update moved the step count to %lld",
          (long long)pl_engine_steps(e1));
    free(before);
    free(after);
    for (int i = 0; i < 3; i++) {
        update(e0, 1, false);
        update(e1, 1, false);
    }
    float *p0 = all_params(e0, g0, &n), *p1 = all_params(e1, g1, &n2);
    CHECK(memcmp(p0, p1, n * sizeof *p0) == 0,
          "after a skipped update, training differs from a run without it");
    printf("a skipped update changes no parameter, step or optimizer state\n");
    free(p0);
    free(p1);
    pl_engine_free(e0);
    pl_engine_free(e1);
    pl_graph_free(g0);
    pl_graph_free(g1);
}

/* 3. With no overflow the scaler changes nothing, bit for bit. */
static void check_equivalence(pl_runtime_t *rt, pl_optimizer_kind kind, float max_norm,
                              int accumulate, const char *what) {
    float *p[2];
    size_t n = 0;
    double norms[2][5] = {{0}};
    for (int on = 0; on < 2; on++) {
        pl_graph_t *g = build();
        pl_engine_options eo = options();
        eo.batch_size = B / accumulate;
        eo.optimizer.kind = kind;
        eo.max_norm = max_norm;
        eo.accumulate_size = accumulate;
        eo.loss_scaler.enabled = on;
        eo.loss_scaler.initial_scale = 32768; /* 2^15: grows once at 3 */
        eo.loss_scaler.growth_interval = 3;
        pl_engine_t *e = pl_engine_new(rt, g, &eo);
        CHECK_PTR(e, "pl_engine_new");
        for (int s = 0; s < 5; s++) {
            update(e, accumulate, false);
            if (max_norm > 0) CHECK_PL(pl_engine_grad_norm(e, &norms[on][s]));
        }
        if (on) {
            double scale;
            bool last;
            CHECK_PL(pl_engine_loss_scale(e, &scale, &last));
            CHECK(scale == 65536 && !last, "scale %g after 5 clean updates, expected 65536",
                  scale);
        }
        p[on] = all_params(e, g, &n);
        pl_engine_free(e);
        pl_graph_free(g);
    }
    CHECK(memcmp(p[0], p[1], n * sizeof *p[0]) == 0,
          "%s: parameters differ with the scaler on", what);
    CHECK(memcmp(norms[0], norms[1], sizeof norms[0]) == 0,
          "%s: clip norms differ with the scaler on (%.9g vs %.9g)", what, norms[0][0],
          norms[1][0]);
    printf("%s: bitwise the same with the scaler on and off\n", what);
    free(p[0]);
    free(p[1]);
}

/* 4. Save after 4 updates (growth, an overflow and a clean update: scale
 * 2^17, growth_step 1, hysteresis_step 1), resume in a new engine: the
 * same scales, skips and parameters as straight on. `after` is the script
 * of the 4 updates after the save: a clean one first makes growth_step
 * matter (it grows), an overflow hysteresis_step (it backs off). */
static void check_resume(pl_runtime_t *rt, const char *name, const int after[4]) {
    int script[8] = {0, 0, 1, 0};
    memcpy(script + 4, after, 4 * sizeof *after);
    char dir[1024];
    tu_scratch_path(dir, sizeof dir, name);
    pl_engine_options eo = options();
    eo.loss_scaler = pl_engine_options_default().loss_scaler;
    eo.loss_scaler.enabled = true;
    eo.loss_scaler.growth_interval = 2;
    pl_graph_t *g0 = build(), *g1 = build();
    pl_engine_t *e0 = pl_engine_new(rt, g0, &eo), *e1 = pl_engine_new(rt, g1, &eo);
    CHECK_PTR(e0, "pl_engine_new");
    CHECK_PTR(e1, "pl_engine_new");
    for (int i = 0; i < 4; i++) update(e0, 1, script[i]);
    CHECK_PL(pl_engine_save_checkpoint(e0, dir, NULL));
    CHECK_PL(pl_engine_load_checkpoint(e1, dir, NULL));
    for (int i = 4; i < 9; i++) {
        double s0, s1;
        bool l0, l1;
        CHECK_PL(pl_engine_loss_scale(e0, &s0, &l0));
        CHECK_PL(pl_engine_loss_scale(e1, &s1, &l1));
        CHECK(s0 == s1, "update %d: resumed scale %g, straight %g", i, s1, s0);
        if (i == 8) break;
        update(e0, 1, script[i]);
        update(e1, 1, script[i]);
    }
    size_t n, n2;
    float *p0 = all_params(e0, g0, &n), *p1 = all_params(e1, g1, &n2);
    CHECK(memcmp(p0, p1, n * sizeof *p0) == 0, "%s: the resumed run differs from the straight",
          name);
    printf("resume (%s): the scaler's state survives a checkpoint\n", name);
    free(p0);
    free(p1);
    pl_engine_free(e0);
    pl_engine_free(e1);
    pl_graph_free(g0);
    pl_graph_free(g1);
}

/* 5. Bad options: refused, the message naming the field. */
static void expect_refused(pl_runtime_t *rt, pl_graph_t *g, const pl_engine_options *eo,
                           const char *field) {
    pl_engine_t *e = pl_engine_new(rt, g, eo);
    CHECK(e == NULL, "bad %s accepted", field);
    pl_engine_free(e);
    tu_expect_error(__LINE__, field, pl_last_status(), PL_STATUS_INVALID_ARGUMENT, field,
                    "loss_scaler");
}

static void check_errors(pl_runtime_t *rt) {
    pl_graph_t *g = build();
    pl_engine_options good = options();
    good.loss_scaler.enabled = true;
    pl_engine_options eo;
#define BAD(field, value)                                                     \
    eo = good;                                                                \
    eo.loss_scaler.field = value;                                             \
    expect_refused(rt, g, &eo, #field)
    BAD(initial_scale, 0.5); /* below min_scale 1 */
    BAD(initial_scale, 1e10); /* above max_scale 2^32 */
    BAD(initial_scale, NAN);
    BAD(min_scale, 0);
    BAD(max_scale, 0.5);     /* below min_scale */
    BAD(max_scale, 1e300);   /* more than a float seed holds */
    BAD(growth_factor, 1);
    BAD(backoff_factor, 1);
    BAD(backoff_factor, 0);
    BAD(growth_interval, 0);
    BAD(hysteresis, 0);
#undef BAD
    /* Off: the scaler's fields are not looked at, and no scale exists. */
    eo = good;
    eo.loss_scaler.enabled = false;
    eo.loss_scaler.hysteresis = 0;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK_PTR(e, "pl_engine_new with the scaler off");
    double scale;
    bool last;
    tu_expect_error(__LINE__, "a scale from an engine that does not scale",
                    pl_engine_loss_scale(e, &scale, &last), PL_STATUS_INVALID_ARGUMENT,
                    "loss_scaler.enabled", NULL);
    pl_engine_free(e);
    pl_graph_free(g);
    printf("bad options refused\n");
}

int main(void) {
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 2;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    CHECK_PTR(rt, "pl_runtime_new");
    make_data();
    check_sequence(rt);
    check_skip(rt);
    check_equivalence(rt, PL_OPTIMIZER_ADAMW, 0.0f, 1, "AdamW");
    check_equivalence(rt, PL_OPTIMIZER_SGD, 0.05f, 2, "SGD, clipped, accumulated");
    CHECK(tu_scratch_create("loss_scaler"), "cannot create a scratch directory");
    static const int grow[4] = {0, 0, 0, 0}, back_off[4] = {1, 0, 0, 0};
    check_resume(rt, "grow", grow);
    check_resume(rt, "back_off", back_off);
    tu_remove_tree(tu_scratch_dir());
    check_errors(rt);
    pl_runtime_free(rt);
    return tu_failures ? 1 : 0;
}
