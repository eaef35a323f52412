/* The public op interface (pleiades/op.h), through the public API only:
 *  - every built-in op's kernels pass pl_gradcheck (central finite
 *    differences of the fp32 kernels, accumulate adds exactly), so the
 *    built-ins are checked the way a user checks their own op;
 *  - pl_gradcheck fails, naming the value, on a kernel with a wrong
 *    gradient, and on one that overwrites when asked to accumulate;
 *  - bad op definitions and operands get the documented status and a
 *    message naming the op, and leave the graph unchanged;
 *  - a kernel that reports an error fails the step with a message naming
 *    the op, the kernel and the kernel's own explanation. */
#include <stdio.h>
#include <string.h>

#include "pleiades.h"
#include "test_util.h"

#define SHAPES(...) ((const int64_t(*)[PL_MAX_DIMS])(int64_t[][PL_MAX_DIMS]){__VA_ARGS__})

static void expect_gradcheck(const char *name, const pl_op_def *def, const void *attrs,
                             int n, const int *ndim, const int64_t (*shapes)[PL_MAX_DIMS],
                             const pl_dtype *dtypes, int32_t int_range, int min_checked) {
    pl_gradcheck_options o = pl_gradcheck_options_default();
    o.int_range = int_range;
    pl_gradcheck_result r;
    pl_status st = pl_gradcheck(def, attrs, n, ndim, shapes, dtypes, &o, &r);
    printf("%-16s %4d gradient values, worst relative error %.2g (%s)\n", name, r.checked,
           r.max_error, r.worst);
    CHECK(st == PL_STATUS_OK, "%s: %s", name, pl_last_error());
    CHECK(r.checked >= min_checked, "%s: only %d values checked, want >= %d", name,
          r.checked, min_checked);
}

static void test_builtins(void) {
    pl_dtype f1[1] = {PL_DTYPE_F32}, f2[2] = {PL_DTYPE_F32, PL_DTYPE_F32};
    pl_dtype fi[2] = {PL_DTYPE_F32, PL_DTYPE_I32}, ii[1] = {PL_DTYPE_I32};
    int nd1[1] = {1}, nd2[1] = {2}, nd11[2] = {1, 1}, nd21[2] = {2, 1}, nd22[2] = {2, 2};
    int64_t out4 = 4;
    expect_gradcheck("linear", &pl_op_linear, &out4, 1, nd2, SHAPES({3, 5}), f1, 2,
                     2 * 15 + 4 * 5 + 4);
    expect_gradcheck("linear_tied", &pl_op_linear_tied, NULL, 2, nd22,
                     SHAPES({3, 5}, {6, 5}), f2, 2, 2 * 15 + 30);
    expect_gradcheck("relu", &pl_op_relu, NULL, 1, nd1, SHAPES({7}), f1, 2, 14);
    expect_gradcheck("gelu", &pl_op_gelu, NULL, 1, nd2, SHAPES({2, 3}), f1, 2, 12);
    expect_gradcheck("add", &pl_op_add, NULL, 2, nd11, SHAPES({5}, {5}), f2, 2, 20);
    expect_gradcheck("cross_entropy", &pl_op_cross_entropy, NULL, 2, nd21,
                     SHAPES({3, 6}, {3}), fi, 6, 36);
    expect_gradcheck("mean", &pl_op_mean, NULL, 1, nd2, SHAPES({2, 4}), f1, 2, 16);
    expect_gradcheck("accuracy", &pl_op_accuracy, NULL, 2, (int[]){1, 0}, SHAPES({4}, {0}),
                     (pl_dtype[]){PL_DTYPE_F32, PL_DTYPE_I32}, 4, 0);
    expect_gradcheck("layernorm", &pl_op_layernorm, NULL, 1, nd2, SHAPES({3, 6}), f1, 2,
                     36 + 12);
    int64_t heads = 2;
    expect_gradcheck("attention", &pl_op_attention, &heads, 1, nd2, SHAPES({4, 12}), f1, 2,
                     96);
    int64_t emb[2] = {7, 4}; /* vocab, channels */
    expect_gradcheck("embedding", &pl_op_embedding, emb, 1, nd1, SHAPES({5}), ii, 7,
                     28 + 20);
}

/* ---------------------------------------------- a wrong user op is caught */

static pl_status same_shape(const pl_op_def *def, const char *op, pl_tensor_t *const *in,
                            const void *attrs, pl_op_layout *l) {
    (void)def, (void)op, (void)attrs;
    l->out_ndim = pl_tensor_shape(in[0], l->out_shape);
    return PL_STATUS_OK;
}
static int cube_forward(pl_op_call *c) {
    const float *x = c->in[0];
    float *y = c->out;
    for (int64_t i = 0; i < c->samples * c->in_numel[0]; i++) y[i] = x[i] * x[i] * x[i];
    return 0;
}
static int cube_backward_wrong(pl_op_call *c) { /* 2x² instead of 3x² */
    const float *x = c->in[0];
    for (int64_t i = 0; i < c->samples * c->in_numel[0]; i++) {
        float g = 2.0f * x[i] * x[i] * c->dout[i];
        c->dinput[i] = c->accumulate ? c->dinput[i] + g : g;
    }
    return 0;
}
static int cube_backward_overwrites(pl_op_call *c) { /* ignores accumulate */
    const float *x = c->in[0];
    for (int64_t i = 0; i < c->samples * c->in_numel[0]; i++)
        c->dinput[i] = 3.0f * x[i] * x[i] * c->dout[i];
    return 0;
}

/* y = x ⊙ w with a parameter w of x's shape; its weight gradient
 * dw = Σ_samples x ⊙ dout ignores accumulate_param. */
static pl_status gain_shape(const pl_op_def *def, const char *op, pl_tensor_t *const *in,
                            const void *attrs, pl_op_layout *l) {
    same_shape(def, op, in, attrs, l);
    l->params[0] = (pl_op_param_decl){"w", 1, {pl_tensor_numel(in[0])}, PL_INIT_ONES, 1.0f};
    l->n_params = 1;
    return PL_STATUS_OK;
}
static int gain_forward(pl_op_call *c) {
    const float *x = c->in[0];
    float *y = c->out;
    int64_t n = c->in_numel[0];
    for (int64_t i = 0; i < c->samples * n; i++) y[i] = x[i] * c->param[0][i % n];
    return 0;
}
static int gain_backward_weight_overwrites(pl_op_call *c) {
    const float *x = c->in[0];
    int64_t n = c->in_numel[0];
    for (int64_t j = 0; j < n; j++) c->dparam[0][j] = 0.0f;
    for (int64_t i = 0; i < c->samples * n; i++) c->dparam[0][i % n] += x[i] * c->dout[i];
    return 0;
}

static void test_gradcheck_catches(void) {
    int nd[1] = {1};
    pl_op_def wrong = {.name = "cube", .n_inputs = 1, .shape = same_shape,
                       .forward = {.cpu = cube_forward}, .backward_input = {{.cpu = cube_backward_wrong}}};
    pl_gradcheck_result r;
    pl_status st = pl_gradcheck(&wrong, NULL, 1, nd, SHAPES({4}), NULL, NULL, &r);
    CHECK(st == PL_STATUS_INVALID_ARGUMENT && strstr(pl_last_error(), "cube") &&
              strstr(pl_last_error(), "finite differences") && r.max_error > 0.1,
          "a wrong gradient passed pl_gradcheck: %d, %s (error %g)", (int)st, pl_last_error(),
          r.max_error);
    pl_op_def overwrites = wrong;
    overwrites.backward_input[0].cpu = cube_backward_overwrites;
    st = pl_gradcheck(&overwrites, NULL, 1, nd, SHAPES({4}), NULL, NULL, &r);
    CHECK(st == PL_STATUS_INVALID_ARGUMENT && strstr(pl_last_error(), "must add"),
          "a kernel ignoring accumulate passed pl_gradcheck: %d, %s", (int)st, pl_last_error());
    pl_op_def gain = {.name = "gain", .n_inputs = 1, .shape = gain_shape,
                      .forward = {.cpu = gain_forward},
                      .backward_weight = {.cpu = gain_backward_weight_overwrites},
                      .backward_weight_reads = PL_OP_READS_INPUTS};
    st = pl_gradcheck(&gain, NULL, 1, nd, SHAPES({4}), NULL, NULL, &r);
    CHECK(st == PL_STATUS_INVALID_ARGUMENT && strstr(pl_last_error(), "backward_weight") &&
              strstr(pl_last_error(), "must add"),
          "a weight-gradient kernel ignoring accumulate_param passed pl_gradcheck: %d, %s",
          (int)st, pl_last_error());
}

/* ------------------------------------------------------- bad definitions */

static pl_status refuse(const pl_op_def *def, const char *op, pl_tensor_t *const *in,
                        const void *attrs, pl_op_layout *l) {
    (void)def, (void)in, (void)attrs, (void)l;
    return pl_error(PL_STATUS_SHAPE_MISMATCH, "%s: no thanks", op);
}
static pl_status refuse_silently(const pl_op_def *def, const char *op,
                                 pl_tensor_t *const *in, const void *attrs, pl_op_layout *l) {
    (void)def, (void)op, (void)in, (void)attrs, (void)l;
    return PL_STATUS_SHAPE_MISMATCH;
}
static pl_status with_param(const pl_op_def *def, const char *op, pl_tensor_t *const *in,
                            const void *attrs, pl_op_layout *l) {
    same_shape(def, op, in, attrs, l);
    l->params[0] = (pl_op_param_decl){"w", 1, {3}, PL_INIT_ONES, 1.0f};
    l->n_params = 1;
    return PL_STATUS_OK;
}

#define EXPECT_OP_NULL(call, status, s1, s2)                                        \
    do {                                                                            \
        int before = pl_graph_num_params(g);                                        \
        pl_tensor_t *r_ = (call);                                                   \
        CHECK(!r_ && pl_last_status() == (status) && strstr(pl_last_error(), s1) && \
                  strstr(pl_last_error(), s2) && pl_graph_num_params(g) == before,  \
              "%s: got %p, status %d, \"%s\"", #call, (void *)r_,                   \
              (int)pl_last_status(), pl_last_error());                              \
    } while (0)

static void test_bad_defs(void) {
    pl_graph_t *g = pl_graph_new(1);
    int64_t s3[1] = {3};
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, s3);
    pl_op_def ok = {.name = "cube", .n_inputs = 1, .shape = same_shape,
                    .forward = {.cpu = cube_forward}, .backward_input = {{.cpu = cube_backward_wrong}}};
    pl_op_def d;
    EXPECT_OP_NULL(pl_graph_op(g, NULL, &x, 1, NULL, "c"), PL_STATUS_INVALID_ARGUMENT,
                   "pl_graph_op", "def is NULL");
    d = ok, d.name = NULL;
    EXPECT_OP_NULL(pl_graph_op(g, &d, &x, 1, NULL, "c"), PL_STATUS_INVALID_ARGUMENT,
                   "pl_graph_op", "no name");
    d = ok, d.n_inputs = 0;
    EXPECT_OP_NULL(pl_graph_op(g, &d, &x, 1, NULL, "c"), PL_STATUS_INVALID_ARGUMENT,
                   "'cube'", "n_inputs 0");
    d = ok, d.shape = NULL;
    EXPECT_OP_NULL(pl_graph_op(g, &d, &x, 1, NULL, "c"), PL_STATUS_INVALID_ARGUMENT,
                   "'cube'", "no shape function");
    d = ok, d.forward.cpu = NULL;
    EXPECT_OP_NULL(pl_graph_op(g, &d, &x, 1, NULL, "c"), PL_STATUS_INVALID_ARGUMENT,
                   "'cube'", "no CPU forward kernel");
    d = ok, d.backward_input[2].cpu = cube_backward_wrong;
    EXPECT_OP_NULL(pl_graph_op(g, &d, &x, 1, NULL, "c"), PL_STATUS_INVALID_ARGUMENT,
                   "backward_input[2]", "1 inputs");
    d = ok, d.shape = with_param; /* parameters, no weight-gradient kernel */
    EXPECT_OP_NULL(pl_graph_op(g, &d, &x, 1, NULL, "c"), PL_STATUS_INVALID_ARGUMENT,
                   "cube 'c'", "no backward_weight kernel");
    d = ok, d.attrs_size = 8;
    EXPECT_OP_NULL(pl_graph_op(g, &d, &x, 1, NULL, "c"), PL_STATUS_INVALID_ARGUMENT,
                   "cube 'c'", "attrs is NULL");
    EXPECT_OP_NULL(pl_graph_op(g, &ok, &x, 2, NULL, "c"), PL_STATUS_INVALID_ARGUMENT,
                   "cube 'c'", "2 operands given, the op takes 1");
    pl_tensor_t *none = NULL;
    EXPECT_OP_NULL(pl_graph_op(g, &ok, &none, 1, NULL, "c"), PL_STATUS_INVALID_ARGUMENT,
                   "cube 'c'", "input 0 is NULL");
    d = ok, d.shape = refuse;
    EXPECT_OP_NULL(pl_graph_op(g, &d, &x, 1, NULL, "c"), PL_STATUS_SHAPE_MISMATCH,
                   "cube 'c'", "no thanks");
    d = ok, d.shape = refuse_silently;
    EXPECT_OP_NULL(pl_graph_op(g, &d, &x, 1, NULL, NULL), PL_STATUS_SHAPE_MISMATCH,
                   "cube", "the shape function refused");
    /* The graph is intact: a good op still goes in. */
    CHECK(pl_graph_op(g, &ok, &x, 1, NULL, "c") != NULL, "a good op after bad ones: %s",
          pl_last_error());
    pl_graph_free(g);
}

/* ------------------------------------------- a kernel failing at run time */

static int fails_forward(pl_op_call *c) {
    snprintf(c->error, c->error_size, "value %d is out of range", 42);
    return 3;
}

static void test_failing_kernel(void) {
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 1;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    CHECK(rt != NULL, "pl_runtime_new: %s", pl_last_error());
    if (!rt) return;
    pl_op_def failing = {.name = "flaky", .n_inputs = 1, .shape = same_shape,
                         .forward = {.cpu = fails_forward}, .backward_input = {{.cpu = cube_backward_wrong}}};
    pl_graph_t *g = pl_graph_new(1);
    int64_t s3[1] = {3};
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, s3);
    pl_tensor_t *h = pl_graph_op(g, &failing, &x, 1, NULL, "flaky1");
    pl_graph_set_loss(g, pl_mean(g, pl_linear(g, h, 2, "fc")));
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = 2;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK(e != NULL, "pl_engine_new: %s", pl_last_error());
    float data[6] = {0};
    const void *d[1] = {data};
    pl_batch b = {.size = 2, .data = d};
    pl_step_result r;
    pl_status st = e ? pl_engine_train_step(e, &b, &r) : PL_STATUS_OK;
    CHECK(st == PL_STATUS_RUNTIME_ERROR && strstr(pl_last_error(), "flaky 'flaky1'") &&
              strstr(pl_last_error(), "forward kernel failed (returned 3)") &&
              strstr(pl_last_error(), "value 42 is out of range"),
          "a failing kernel: status %d, \"%s\"", (int)st, pl_last_error());
    pl_engine_free(e);
    pl_graph_free(g);
    pl_runtime_free(rt);
}

int main(void) {
    test_builtins();
    test_gradcheck_catches();
    test_bad_defs();
    test_failing_kernel();
    if (tu_failures) {
        printf("op_interface: %d check(s) failed\n", tu_failures);
        return 1;
    }
    printf("op_interface: all checks passed\n");
    return 0;
}
