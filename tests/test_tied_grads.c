/* A parameter three ops use (engine/tied_grads.c): the weight W of a
 * linear layer, reused by two tied linears in later blocks,
 *
 *   h0 = x·Wᵀ + b   (block 0)     h1 = h0·Wᵀ   (block 1)
 *   h2 = relu(h1)·Wᵀ (block 2)    loss = mean((h2 − t)²)
 *
 * so W's gradient is the sum of three ops' contributions, two of them
 * accumulated in buffers of their own and added at the update.
 *
 * 1. pl_engine_get_grad after a backward pass (before any update, so the
 *    tied buffers are not summed yet) equals the gradient derived here by
 *    hand in double precision (backpropagation written out, independent
 *    of the library), 2 tiles: relative error <= 1e-5 of the largest
 *    element. The bias too.
 * 2. The SGD update that follows (lr 0.1, no momentum or decay) moves W
 *    by exactly lr times that gradient (to fp32 rounding): the update read
 *    the summed gradient.
 * 3. Gradient accumulation (accumulate_size 2, two half batches): the
 *    gradient read between the passes is the first half's, after both
 *    the whole batch's (each loss / 2), and the update equals step 2's.
 * 4. Pipelines: 1F1B and ZB-H1 with one stage per block (p = 3, m = 4,
 *    3 workers) give bitwise the losses and parameters of the
 *    non-pipelined run with 4 tiles over 3 steps (every schedule submits
 *    in one order, so every sum is formed alike). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pleiades.h"
#include "test_util.h"

enum { B = 8, C = 6, STEPS = 3 };
static const float LR = 0.1f;

static float xs[B * C], ts[B * C];

typedef struct model {
    pl_graph_t *g;
    pl_engine_t *e;
    pl_tensor_t *w, *b;
} model;

static bool model_new(pl_runtime_t *rt, pl_schedule_kind schedule, int batch, int tiles,
                      int accumulate, model *m) {
    memset(m, 0, sizeof *m);
    m->g = pl_graph_new(7);
    if (!m->g) return false;
    const int64_t shape[1] = {C};
    pl_tensor_t *x = pl_graph_input(m->g, "x", PL_DTYPE_F32, 1, shape);
    pl_tensor_t *t = pl_graph_input(m->g, "t", PL_DTYPE_F32, 1, shape);
    pl_tensor_t *h0 = pl_linear(m->g, x, C, "l0");
    m->w = pl_graph_param(m->g, 0);
    m->b = pl_graph_param(m->g, 1);
    pl_graph_begin_block(m->g, "tied1");
    pl_tensor_t *h1 = pl_linear_tied(m->g, h0, m->w, "t1");
    pl_graph_begin_block(m->g, "tied2");
    pl_tensor_t *h2 = pl_linear_tied(m->g, pl_relu(m->g, h1), m->w, "t2");
    if (!h2 || pl_graph_set_loss(m->g, pl_mse_loss(m->g, h2, t)) != PL_STATUS_OK)
        return false;
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = batch;
    eo.tiles = tiles;
    eo.optimizer.kind = PL_OPTIMIZER_SGD;
    eo.optimizer.lr = LR;
    eo.optimizer.momentum = 0.0f;
    eo.optimizer.weight_decay = 0.0f;
    eo.accumulate_size = accumulate;
    eo.schedule = schedule;
    eo.stages = schedule == PL_SCHEDULE_NONE ? 0 : 3;
    m->e = pl_engine_new(rt, m->g, &eo);
    return m->e != NULL;
}

static void model_free(model *m) {
    pl_engine_free(m->e);
    pl_graph_free(m->g);
}

static void read_values(pl_engine_t *e, pl_tensor_t *p, bool grad, float *out) {
    pl_status st = grad ? pl_engine_get_grad(e, p, out, (size_t)pl_tensor_numel(p))
                        : pl_engine_get_param(e, p, out, (size_t)pl_tensor_numel(p));
    CHECK(st == PL_STATUS_OK, "reading %s: %s", pl_tensor_name(p), pl_last_error());
}

/* y[n, C] = a[n, C] · W[C, C]ᵀ */
static void mat_wt(const double *a, const double *w, double *y, int n) {
    for (int i = 0; i < n; i++)
        for (int o = 0; o < C; o++) {
            double s = 0;
            for (int k = 0; k < C; k++) s += a[i * C + k] * w[o * C + k];
            y[i * C + o] = s;
        }
}

/* dW += dy[n, C]ᵀ · a[n, C]; da = dy · W (when da is not NULL). */
static void back(const double *dy, const double *a, const double *w, double *dw, double *da,
                 int n) {
    for (int o = 0; o < C; o++)
        for (int k = 0; k < C; k++)
            for (int i = 0; i < n; i++) dw[o * C + k] += dy[i * C + o] * a[i * C + k];
    for (int i = 0; da && i < n; i++)
        for (int k = 0; k < C; k++) {
            double s = 0;
            for (int o = 0; o < C; o++) s += dy[i * C + o] * w[o * C + k];
            da[i * C + k] = s;
        }
}

/* d loss / d W and d loss / d b for samples [first, first + n), with the
 * loss's mean taken over `mean_over` samples. */
static void reference_grad(const float *wf, const float *bf, int first, int n, int mean_over,
                           double *dw, double *db) {
    double w[C * C], x[B * C], h0[B * C], h1[B * C], r[B * C], h2[B * C];
    double d2[B * C], dr[B * C], d1[B * C], d0[B * C];
    for (int i = 0; i < C * C; i++) w[i] = wf[i];
    for (int i = 0; i < n * C; i++) x[i] = xs[first * C + i];
    mat_wt(x, w, h0, n);
    for (int i = 0; i < n; i++)
        for (int o = 0; o < C; o++) h0[i * C + o] += bf[o];
    mat_wt(h0, w, h1, n);
    for (int i = 0; i < n * C; i++) r[i] = h1[i] > 0 ? h1[i] : 0;
    mat_wt(r, w, h2, n);
    for (int i = 0; i < n * C; i++)
        d2[i] = 2.0 * (h2[i] - ts[first * C + i]) / ((double)mean_over * C);
    memset(dw, 0, C * C * sizeof *dw);
    back(d2, r, w, dw, dr, n);
    for (int i = 0; i < n * C; i++) d1[i] = h1[i] > 0 ? dr[i] : 0;
    back(d1, h0, w, dw, d0, n);
    back(d0, x, w, dw, NULL, n);
    for (int o = 0; o < C; o++) {
        db[o] = 0;
        for (int i = 0; i < n; i++) db[o] += d0[i * C + o];
    }
}

/* max |got − want| / max |want|. */
static double rel_err(const float *got, const double *want, int n) {
    double worst = 0, scale = 0;
    for (int i = 0; i < n; i++) {
        worst = fmax(worst, fabs(got[i] - want[i]));
        scale = fmax(scale, fabs(want[i]));
    }
    return scale > 0 ? worst / scale : worst;
}

static bool backward(model *m, int first, int n) {
    const void *data[2] = {xs + first * C, ts + first * C};
    pl_batch b = {.size = n, .data = data};
    pl_step_options so = {.return_loss = true};
    pl_step_result r;
    pl_status st = pl_engine_forward_backward(m->e, &b, &so, &r);
    CHECK(st == PL_STATUS_OK, "forward_backward: %s", pl_last_error());
    return st == PL_STATUS_OK;
}

/* 1-3: gradients against the hand-derived reference, and the update. */
static void test_gradients(pl_runtime_t *rt) {
    model whole, acc;
    bool ok = model_new(rt, PL_SCHEDULE_NONE, B, 2, 1, &whole) &&
              model_new(rt, PL_SCHEDULE_NONE, B / 2, 2, 2, &acc);
    CHECK(ok, "engines: %s", pl_last_error());
    if (!ok) goto out;
    float w0[C * C], b0[C], gw[C * C], gb[C], w1[C * C], wa[C * C];
    double dw[C * C], db[C];
    read_values(whole.e, whole.w, false, w0);
    read_values(whole.e, whole.b, false, b0);

    /* 1. The whole batch's gradient, read before the update. */
    reference_grad(w0, b0, 0, B, B, dw, db);
    if (!backward(&whole, 0, B)) goto out;
    read_values(whole.e, whole.w, true, gw);
    read_values(whole.e, whole.b, true, gb);
    double ew = rel_err(gw, dw, C * C), eb = rel_err(gb, db, C);
    CHECK(ew <= 1e-5 && eb <= 1e-5, "gradient of W off by %.3g, of b by %.3g (relative)", ew,
          eb);
    printf("three uses of W, 2 tiles: gradient within %.2g of the reference (bias %.2g)\n",
           ew, eb);

    /* 2. The update reads the summed gradient: W1 = W0 − lr·dW. */
    CHECK(pl_engine_optimizer_step(whole.e) == PL_STATUS_OK, "update: %s", pl_last_error());
    read_values(whole.e, whole.w, false, w1);
    double worst = 0, moved = 0;
    for (int i = 0; i < C * C; i++) {
        worst = fmax(worst, fabs(w1[i] - (w0[i] - LR * dw[i])));
        moved = fmax(moved, fabs(w1[i] - w0[i]));
    }
    CHECK(worst <= 1e-6 && moved > 1e-4, "SGD update of W off by %.3g (moved %.3g)", worst,
          moved);
    printf("SGD update: W moved by up to %.3g, within %.2g of W0 - lr dW\n", moved, worst);

    /* 3. Accumulation: the first half's gradient between the passes, the
     * whole batch's after both, the same update. */
    double dw_half[C * C], db_half[C];
    reference_grad(w0, b0, 0, B / 2, B, dw_half, db_half); /* loss / 2 over B/2 */
    if (!backward(&acc, 0, B / 2)) goto out;
    read_values(acc.e, acc.w, true, gw);
    ew = rel_err(gw, dw_half, C * C);
    CHECK(ew <= 1e-5, "accumulation: first pass's gradient of W off by %.3g", ew);
    if (!backward(&acc, B / 2, B / 2)) goto out;
    read_values(acc.e, acc.w, true, gw);
    ew = rel_err(gw, dw, C * C);
    CHECK(ew <= 1e-5, "accumulation: both passes' gradient of W off by %.3g", ew);
    CHECK(pl_engine_optimizer_step(acc.e) == PL_STATUS_OK, "update: %s", pl_last_error());
    read_values(acc.e, acc.w, false, wa);
    worst = 0;
    for (int i = 0; i < C * C; i++) worst = fmax(worst, fabs(wa[i] - w1[i]));
    CHECK(worst <= 1e-6, "accumulated update differs from the whole batch's by %.3g", worst);
    printf("accumulate 2: gradient within %.2g of the whole batch's, update within %.2g\n", ew,
           worst);
out:
    model_free(&whole);
    model_free(&acc);
}

/* Losses and W, b after STEPS train steps. */
static bool train(pl_runtime_t *rt, pl_schedule_kind schedule, double *loss, float *w,
                  float *b) {
    model m;
    bool ok = model_new(rt, schedule, B, 4, 1, &m);
    CHECK(ok, "engine (schedule %d): %s", (int)schedule, pl_last_error());
    const void *data[2] = {xs, ts};
    pl_batch batch = {.size = B, .data = data};
    for (int s = 0; ok && s < STEPS; s++) {
        pl_step_result r;
        ok = pl_engine_train_step(m.e, &batch, &r) == PL_STATUS_OK;
        CHECK(ok, "step %d: %s", s, pl_last_error());
        loss[s] = r.loss;
    }
    if (ok) {
        read_values(m.e, m.w, false, w);
        read_values(m.e, m.b, false, b);
    }
    model_free(&m);
    return ok;
}

/* 4: pipelines, bitwise. */
static void test_pipelines(pl_runtime_t *rt) {
    double l0[STEPS], l1[STEPS];
    float w0[C * C], b0[C], w1[C * C], b1[C];
    if (!train(rt, PL_SCHEDULE_NONE, l0, w0, b0)) return;
    CHECK(l0[STEPS - 1] < l0[0], "the loss did not decrease (%g -> %g)", l0[0],
          l0[STEPS - 1]);
    const pl_schedule_kind kinds[] = {PL_SCHEDULE_1F1B, PL_SCHEDULE_ZB_H1};
    const char *names[] = {"1f1b", "zb-h1"};
    if (tu_pipeline_skipped(rt, 3, "tied weights under 1f1b and zb-h1")) return;
    for (int k = 0; k < 2; k++) {
        if (!train(rt, kinds[k], l1, w1, b1)) continue;
        bool same = !memcmp(l0, l1, sizeof l0) && !memcmp(w0, w1, sizeof w0) &&
                    !memcmp(b0, b1, sizeof b0);
        CHECK(same, "%s p=3: losses or parameters differ from the non-pipelined run's",
              names[k]);
        printf("%s p=3 m=4: losses %.7f .. %.7f and W, b bitwise the non-pipelined run's\n",
               names[k], l1[0], l1[STEPS - 1]);
    }
}

int main(void) {
    tu_time_limit(300, "test_tied_grads");
    uint64_t s = 3;
    for (int i = 0; i < B * C; i++) {
        xs[i] = (float)((double)(tu_splitmix64(&s) >> 11) / 9007199254740992.0 * 2 - 1);
        ts[i] = (float)((double)(tu_splitmix64(&s) >> 11) / 9007199254740992.0 * 2 - 1);
    }
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 3; /* one per pipeline stage */
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) {
        printf("FAIL: pl_runtime_new: %s\n", pl_last_error());
        return 1;
    }
    test_gradients(rt);
    test_pipelines(rt);
    pl_runtime_free(rt);
    printf(tu_failures ? "FAILED (%d)\n" : "all passed\n", tu_failures);
    return tu_failures != 0;
}
