/*
 * custom_op — an op Pleiades does not have, written against the public op
 * interface (pleiades/op.h) alone: squared ReLU, y = max(x, 0)² (So et
 * al., "Primer", 2021), with its CPU forward and backward kernels.
 *
 * The example checks the kernels with pl_gradcheck (central finite
 * differences), then trains a small MLP that uses the op on a synthetic
 * regression-to-classes task four ways — non-pipelined, 1F1B, interleaved
 * 1F1B, and non-pipelined under a memory budget with the auto placement
 * policy — and checks that the loss falls and that all four give the same
 * losses (the schedule and the placement change when tasks run, never what
 * they compute). Exit status 0 when all holds.
 *
 *   build/examples/custom_op
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pleiades.h"

/* ------------------------------------------------------- the op itself */

/* y = max(x, 0)²: elementwise, so the output has the input's shape. */
static pl_status relu2_shape(const pl_op_def *def, const char *op, pl_tensor_t *const *in,
                             const void *attrs, pl_op_layout *layout) {
    (void)def, (void)attrs;
    char s[64];
    if (pl_tensor_dtype(in[0]) != PL_DTYPE_F32)
        return pl_error(PL_STATUS_INVALID_ARGUMENT, "%s: '%s' %s must be float32", op,
                        pl_tensor_name(in[0]), pl_tensor_shape_str(in[0], s, sizeof s));
    layout->out_ndim = pl_tensor_shape(in[0], layout->out_shape);
    layout->flops = 2.0 * (double)pl_tensor_numel(in[0]);
    return PL_STATUS_OK;
}

static int relu2_forward(pl_op_call *c) {
    const float *x = c->in[0];
    float *y = c->out;
    int64_t n = c->samples * c->in_numel[0];
    for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] * x[i] : 0.0f;
    return 0;
}

/* dx (+)= 2·max(x, 0)·dy. `accumulate`: x feeds other ops too, or the
 * gradient sums over microbatches — add instead of overwriting. */
static int relu2_backward(pl_op_call *c) {
    const float *x = c->in[0];
    int64_t n = c->samples * c->in_numel[0];
    for (int64_t i = 0; i < n; i++) {
        float g = x[i] > 0.0f ? 2.0f * x[i] * c->dout[i] : 0.0f;
        c->dinput[i] = c->accumulate ? c->dinput[i] + g : g;
    }
    return 0;
}

static const pl_op_def RELU2 = {
    .name = "relu2",
    .n_inputs = 1,
    .input_names = {"x"},
    .shape = relu2_shape,
    .forward = {.cpu = relu2_forward},          /* no CUDA kernel: CPU workers */
    .backward_input = {{.cpu = relu2_backward}},
    .backward_input_reads = PL_OP_READS_INPUTS, /* the B task needs x */
};

static pl_tensor_t *relu2(pl_graph_t *g, pl_tensor_t *x) {
    return pl_graph_op(g, &RELU2, &x, 1, NULL, NULL);
}

/* ---------------------------------------------------------- the model */

/* HIDDEN 192: about 1.2 MB of model state (weights, gradients, AdamW's
 * two moments), so the 1 MB budget below really evicts. */
enum { B = 16, IN = 12, HIDDEN = 192, K = 4, STEPS = 12 };

/* Four blocks so that 2 stages × 2 model chunks have one each. */
static pl_graph_t *build(void) {
    pl_graph_t *g = pl_graph_new(7);
    int64_t shape[1] = {IN};
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, shape);
    pl_tensor_t *y = pl_graph_input(g, "y", PL_DTYPE_I32, 0, NULL);
    pl_tensor_t *h = relu2(g, pl_linear(g, x, HIDDEN, "fc1"));
    pl_graph_begin_block(g, "b1");
    h = relu2(g, pl_linear(g, h, HIDDEN, "fc2"));
    pl_graph_begin_block(g, "b2");
    h = relu2(g, pl_linear(g, h, HIDDEN, "fc3"));
    pl_graph_begin_block(g, "b3");
    pl_tensor_t *loss = pl_cross_entropy(g, pl_linear(g, h, K, "head"), y);
    if (!loss || pl_graph_set_loss(g, loss) != PL_STATUS_OK) {
        fprintf(stderr, "custom_op: building the model: %s\n", pl_last_error());
        pl_graph_free(g);
        return NULL;
    }
    return g;
}

/* A fixed synthetic task: the class is which quarter of [-1, 1) the sum of
 * the first four features falls in. */
static void make_data(float *x, int32_t *y) {
    uint64_t s = 42;
    for (int i = 0; i < B; i++) {
        float sum = 0.0f;
        for (int j = 0; j < IN; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            x[i * IN + j] = (float)((s >> 40) / 16777216.0) * 2.0f - 1.0f;
            if (j < 4) sum += x[i * IN + j];
        }
        int k = (int)((sum / 4.0f + 1.0f) * 0.5f * K);
        y[i] = k < 0 ? 0 : k >= K ? K - 1 : k;
    }
}

static bool train(pl_runtime_t *rt, pl_schedule_kind schedule, bool budget,
                  double losses[STEPS]) {
    pl_graph_t *g = build();
    if (!g) return false;
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = B;
    eo.tiles = 4;
    eo.optimizer.lr = 1e-2f;
    eo.schedule = schedule;
    eo.stages = schedule == PL_SCHEDULE_NONE ? 0 : 2;
    eo.model_chunks = schedule == PL_SCHEDULE_INTERLEAVED ? 2 : 0;
    if (budget) {
        eo.placement.policy = pl_placement_auto();
        eo.chunk_elems = HIDDEN * (HIDDEN + 1); /* a hidden layer per chunk */
    }
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    bool ok = e != NULL;
    static float x[B * IN];
    static int32_t y[B];
    make_data(x, y);
    const void *data[2] = {x, y};
    pl_batch batch = {.size = B, .data = data};
    pl_step_result r;
    int64_t evictions = 0;
    for (int s = 0; ok && s < STEPS; s++) {
        ok = pl_engine_train_step(e, &batch, &r) == PL_STATUS_OK;
        losses[s] = r.loss;
        pl_iteration_memory m;
        if (ok && budget && pl_engine_memory(e, &m) == PL_STATUS_OK) evictions += m.evictions;
    }
    if (!ok) fprintf(stderr, "custom_op: training: %s\n", pl_last_error());
    if (ok && budget) {
        printf("budget run: %lld evictions in %d steps\n", (long long)evictions, STEPS);
        if (evictions == 0) {
            fprintf(stderr, "custom_op: the budget never forced an eviction\n");
            ok = false;
        }
    }
    pl_engine_free(e);
    pl_graph_free(g);
    return ok;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress shows even through a pipe */
    /* 1. The kernels against finite differences. */
    int ndim[1] = {2};
    int64_t shapes[1][PL_MAX_DIMS] = {{3, 5}};
    pl_gradcheck_result gc;
    if (pl_gradcheck(&RELU2, NULL, 1, ndim, (const int64_t(*)[PL_MAX_DIMS])shapes, NULL,
                     NULL, &gc) != PL_STATUS_OK) {
        fprintf(stderr, "custom_op: %s\n", pl_last_error());
        return 1;
    }
    printf("relu2: pl_gradcheck passed (%d gradient values, worst relative error %.2g)\n",
           gc.checked, gc.max_error);

    /* 2. Training, three schedules on one runtime (two workers: one per
     * stage), then under a memory budget on a second. */
    static const struct {
        const char *name;
        pl_schedule_kind schedule;
    } runs[3] = {{"none", PL_SCHEDULE_NONE},
                 {"1f1b", PL_SCHEDULE_1F1B},
                 {"interleaved", PL_SCHEDULE_INTERLEAVED}};
    double losses[4][STEPS];
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 2;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) {
        fprintf(stderr, "custom_op: %s\n", pl_last_error());
        return 1;
    }
    bool ok = true;
    for (int i = 0; ok && i < 3; i++) ok = train(rt, runs[i].schedule, false, losses[i]);
    pl_runtime_free(rt);
    /* The budget run evicts to StarPU's disk tier, in a fresh directory. */
    char dir[] = "/tmp/pleiades_custom_op_XXXXXX";
    if (ok && !mkdtemp(dir)) {
        perror("custom_op: mkdtemp");
        return 1;
    }
    ro.compute_budget_mb = 1;
    ro.offload_dir = dir;
    rt = ok ? pl_runtime_new(&ro) : NULL;
    ok = ok && rt && train(rt, PL_SCHEDULE_NONE, true, losses[3]);
    pl_runtime_free(rt);
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (!ok) return 1;

    printf("step  none        1f1b        interleaved budget+auto\n");
    for (int s = 0; s < STEPS; s++)
        printf("%4d  %.8f  %.8f  %.8f  %.8f\n", s + 1, losses[0][s], losses[1][s],
               losses[2][s], losses[3][s]);
    for (int k = 1; k < 4; k++)
        if (memcmp(losses[0], losses[k], sizeof losses[0]) != 0) {
            fprintf(stderr, "custom_op: the %s run's losses differ from the "
                    "non-pipelined run's\n", k < 3 ? runs[k].name : "budget");
            return 1;
        }
    if (!(losses[0][STEPS - 1] < 0.8 * losses[0][0])) {
        fprintf(stderr, "custom_op: the loss did not fall (%.4f -> %.4f)\n", losses[0][0],
                losses[0][STEPS - 1]);
        return 1;
    }
    printf("identical losses under every schedule and the budget; loss %.4f -> %.4f\n",
           losses[0][0], losses[0][STEPS - 1]);
    return 0;
}
