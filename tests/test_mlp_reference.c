/*
 * test_mlp_reference.c — compares Pleiades' MLP with PyTorch (in the spirit
 * of llm.c's test_gpt2).
 *
 *   test_mlp_reference tests/reference/mlp_reference.bin
 *
 * The .bin is written by tests/reference/mlp_reference.py (its docstring
 * documents the layout): a batch, the initial parameters, the logits, loss
 * and gradients PyTorch computes for them, the losses of 5 AdamW steps on
 * that batch and the parameters after them. This test builds the same graph
 * through the public API only (fc1 -> ReLU -> fc2 -> GELU(tanh) -> head ->
 * cross-entropy), loads PyTorch's parameters, and checks every quantity.
 * It prints "OK name maxdiff" or "FAIL name maxdiff" per quantity and exits
 * non-zero if any fails.
 *
 * Tolerances (everything is float32 on both sides; differences come only
 * from summation order, the tile split of the batch and libm):
 *   logits        max |diff| <= 1e-5 * max |ref logit|
 *   loss          |diff|     <= 1e-5 * max(1, |ref loss|)
 *   gradients     max |diff| <= 1e-4 * max |ref grad| of that tensor
 *   step losses   |diff|     <= 1e-4 * max(1, |ref loss|)
 *   final params  max |diff| <= 1e-4 * max |ref param| of that tensor
 * (AdamW divides by sqrt(v), which amplifies tiny gradient differences, hence
 * the looser bound after training.)
 *
 * Environment: PL_CPU_WORKERS sets the StarPU CPU workers (default: StarPU's
 * own default, which STARPU_NCPU also controls).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pleiades.h"

#define REF_MAGIC 20261121
#define REF_VERSION 1
#define N_PARAMS 6

static const char *const param_names[N_PARAMS] = {
    "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "head.weight",
    "head.bias"};

static int n_fail = 0;

/* ---------------------------------------------------------- file reading */

typedef struct reader {
    const unsigned char *p, *end;
    const char *path;
} reader;

static uint32_t rd_u32(reader *r) {
    if (r->end - r->p < 4) {
        fprintf(stderr, "%s: truncated file (unexpected end of data)\n",
                r->path);
        exit(2);
    }
    uint32_t v = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 |
                 (uint32_t)r->p[2] << 16 | (uint32_t)r->p[3] << 24;
    r->p += 4;
    return v;
}

static int32_t rd_i32(reader *r) { return (int32_t)rd_u32(r); }

static float rd_f32(reader *r) {
    uint32_t u = rd_u32(r);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static float *rd_f32s(reader *r, int64_t n) {
    float *a = malloc((size_t)n * sizeof *a);
    if (!a) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    for (int64_t i = 0; i < n; i++) a[i] = rd_f32(r);
    return a;
}

static unsigned char *slurp(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fprintf(stderr, "out of memory\n");
            exit(2);
        }
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        cap *= 2;
        buf = realloc(buf, cap);
    }
    if (ferror(f)) {
        perror(path);
        exit(2);
    }
    fclose(f);
    *size = n;
    return buf;
}

/* ----------------------------------------------------------- comparisons */

static float max_abs(const float *a, int64_t n) {
    float m = 0.0f;
    for (int64_t i = 0; i < n; i++)
        if (fabsf(a[i]) > m) m = fabsf(a[i]);
    return m;
}

/* Checks max |got - ref| <= rtol * scale, where scale is max |ref| (or at
 * least `min_scale`). NaNs fail. */
static void check_array(const char *name, const float *got, const float *ref,
                        int64_t n, float rtol, float min_scale) {
    double maxdiff = 0.0;
    int64_t at = 0;
    int nan = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        if (d != d) nan = 1;
        if (d > maxdiff) {
            maxdiff = d;
            at = i;
        }
    }
    double scale = max_abs(ref, n);
    if (scale < min_scale) scale = min_scale;
    int ok = !nan && maxdiff <= rtol * scale;
    printf("%s %s %.3e (rel %.3e, tol %.0e; worst [%lld] %.8g vs %.8g)\n",
           ok ? "OK" : "FAIL", name, maxdiff, maxdiff / scale, (double)rtol,
           (long long)at, (double)got[at], (double)ref[at]);
    if (!ok) n_fail++;
}

static void check_scalar(const char *name, double got, double ref,
                         double rtol) {
    double d = fabs(got - ref);
    double scale = fabs(ref) > 1.0 ? fabs(ref) : 1.0;
    int ok = d == d && d <= rtol * scale;
    printf("%s %s %.3e (%.8f vs %.8f)\n", ok ? "OK" : "FAIL", name, d, got,
           ref);
    if (!ok) n_fail++;
}

#define CHECK_PL(call)                                                      \
    do {                                                                    \
        pl_status st_ = (call);                                             \
        if (st_ != PL_STATUS_OK) {                                          \
            fprintf(stderr, "FAIL %s: %s: %s\n", #call,                    \
                    pl_status_string(st_), pl_last_error());                \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

#define CHECK_PTR(ptr, what)                                                \
    do {                                                                    \
        if (!(ptr)) {                                                       \
            fprintf(stderr, "FAIL %s: %s\n", what, pl_last_error());        \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s mlp_reference.bin\n", argv[0]);
        return 2;
    }
    const char *path = argv[1];
    size_t size;
    unsigned char *file = slurp(path, &size);
    reader r = {file, file + size, path};

    /* header */
    if (size < 32) {
        fprintf(stderr, "%s: %zu bytes, too short for the 32-byte header\n",
                path, size);
        return 2;
    }
    int32_t magic = rd_i32(&r), version = rd_i32(&r);
    if (magic != REF_MAGIC) {
        fprintf(stderr,
                "%s: bad magic %d (expected %d): not an MLP reference file; "
                "regenerate with /usr/bin/python3 "
                "tests/reference/mlp_reference.py\n",
                path, magic, REF_MAGIC);
        return 2;
    }
    if (version != REF_VERSION) {
        fprintf(stderr,
                "%s: version %d, this test reads version %d; regenerate with "
                "/usr/bin/python3 tests/reference/mlp_reference.py\n",
                path, version, REF_VERSION);
        return 2;
    }
    const int B = rd_i32(&r), IN = rd_i32(&r), H1 = rd_i32(&r),
              H2 = rd_i32(&r), K = rd_i32(&r), n_steps = rd_i32(&r);
    if (B <= 0 || IN <= 0 || H1 <= 0 || H2 <= 0 || K <= 0 || n_steps < 1 ||
        B > 1 << 16 || IN > 1 << 16 || H1 > 1 << 16 || H2 > 1 << 16 ||
        K > 1 << 16 || n_steps > 1000) {
        fprintf(stderr, "%s: implausible header B=%d IN=%d H1=%d H2=%d K=%d "
                "steps=%d\n", path, B, IN, H1, H2, K, n_steps);
        return 2;
    }
    printf("[mlp_reference] B=%d IN=%d H1=%d H2=%d K=%d steps=%d\n", B, IN,
           H1, H2, K, n_steps);

    const int64_t pnumel[N_PARAMS] = {(int64_t)H1 * IN, H1, (int64_t)H2 * H1,
                                      H2, (int64_t)K * H2, K};
    int64_t total_params = 0;
    for (int i = 0; i < N_PARAMS; i++) total_params += pnumel[i];
    const size_t expect = 32 + 4 * ((size_t)B * IN + B + 3 * total_params +
                                    (size_t)B * K + 1 + n_steps);
    if (size != expect) {
        fprintf(stderr, "%s: %zu bytes, expected %zu for this header\n",
                path, size, expect);
        return 2;
    }

    float *x = rd_f32s(&r, (int64_t)B * IN);
    int32_t *labels = malloc((size_t)B * sizeof *labels);
    for (int i = 0; i < B; i++) {
        labels[i] = rd_i32(&r);
        if (labels[i] < 0 || labels[i] >= K) {
            fprintf(stderr, "%s: label %d of sample %d out of [0, %d)\n",
                    path, labels[i], i, K);
            return 2;
        }
    }
    float *p0[N_PARAMS], *grads[N_PARAMS], *p_final[N_PARAMS];
    for (int i = 0; i < N_PARAMS; i++) p0[i] = rd_f32s(&r, pnumel[i]);
    float *ref_logits = rd_f32s(&r, (int64_t)B * K);
    float ref_loss = rd_f32(&r);
    for (int i = 0; i < N_PARAMS; i++) grads[i] = rd_f32s(&r, pnumel[i]);
    float *step_losses = rd_f32s(&r, n_steps);
    for (int i = 0; i < N_PARAMS; i++) p_final[i] = rd_f32s(&r, pnumel[i]);

    /* runtime */
    pl_runtime_options ro = pl_runtime_options_default();
    const char *nw = getenv("PL_CPU_WORKERS");
    if (nw && *nw) ro.cpu_workers = atoi(nw);
    pl_runtime_t *rt = pl_runtime_new(&ro);
    CHECK_PTR(rt, "pl_runtime_new");

    /* graph: the same MLP as the PyTorch script */
    pl_graph_t *g = pl_graph_new(0);
    CHECK_PTR(g, "pl_graph_new");
    int64_t in_shape[1] = {IN};
    pl_tensor_t *tx = pl_graph_input(g, "x", PL_DTYPE_F32, 1, in_shape);
    CHECK_PTR(tx, "pl_graph_input x");
    pl_tensor_t *ty = pl_graph_input(g, "y", PL_DTYPE_I32, 0, NULL);
    CHECK_PTR(ty, "pl_graph_input y");
    pl_tensor_t *h = pl_linear(g, tx, H1, "fc1");
    CHECK_PTR(h, "pl_linear fc1");
    h = pl_relu(g, h);
    CHECK_PTR(h, "pl_relu");
    h = pl_linear(g, h, H2, "fc2");
    CHECK_PTR(h, "pl_linear fc2");
    h = pl_gelu(g, h);
    CHECK_PTR(h, "pl_gelu");
    pl_tensor_t *logits = pl_linear(g, h, K, "head");
    CHECK_PTR(logits, "pl_linear head");
    pl_tensor_t *loss = pl_cross_entropy(g, logits, ty);
    CHECK_PTR(loss, "pl_cross_entropy");
    CHECK_PL(pl_graph_set_loss(g, loss));
    CHECK_PL(pl_graph_set_output(g, logits));

    pl_tensor_t *params[N_PARAMS];
    for (int i = 0; i < N_PARAMS; i++) {
        params[i] = pl_graph_find(g, param_names[i]);
        CHECK_PTR(params[i], param_names[i]);
        if (pl_tensor_numel(params[i]) != pnumel[i]) {
            fprintf(stderr, "FAIL %s has %lld elements, reference %lld\n",
                    param_names[i], (long long)pl_tensor_numel(params[i]),
                    (long long)pnumel[i]);
            return 1;
        }
    }
    if (pl_graph_param_count(g) != total_params) {
        fprintf(stderr, "FAIL graph has %lld parameters, reference %lld\n",
                (long long)pl_graph_param_count(g), (long long)total_params);
        return 1;
    }

    /* engine: 2 tiles so that splitting the batch is exercised */
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = B;
    eo.tiles = 2;
    eo.optimizer.kind = PL_OPTIMIZER_ADAMW;
    eo.optimizer.lr = 1e-2f;
    eo.optimizer.weight_decay = 0.01f;
    eo.optimizer.beta1 = 0.9f;
    eo.optimizer.beta2 = 0.999f;
    eo.optimizer.eps = 1e-8f;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK_PTR(e, "pl_engine_new");
    for (int i = 0; i < N_PARAMS; i++)
        CHECK_PL(pl_engine_set_param(e, params[i], p0[i]));

    /* set_param round trip, so a broken setter is not mistaken for a
     * broken forward */
    for (int i = 0; i < N_PARAMS; i++) {
        float *got = malloc((size_t)pnumel[i] * sizeof *got);
        CHECK_PL(pl_engine_get_param(e, params[i], got));
        if (memcmp(got, p0[i], (size_t)pnumel[i] * sizeof *got) != 0) {
            printf("FAIL set/get_param %s round trip\n", param_names[i]);
            n_fail++;
        }
        free(got);
    }

    const void *data[2] = {x, labels};
    pl_batch batch = {.size = B, .data = data};

    /* forward + backward with the initial parameters */
    pl_step_options so = {.forward_only = false, .return_loss = true,
                          .return_output_label = true};
    pl_step_result res;
    memset(&res, 0, sizeof res);
    CHECK_PL(pl_engine_forward_backward(e, &batch, &so, &res));
    if (res.size != B || !res.output) {
        printf("FAIL output: size %lld, output %p\n", (long long)res.size,
               (const void *)res.output);
        n_fail++;
    } else {
        check_array("logits", res.output, ref_logits, (int64_t)B * K, 1e-5f,
                    1e-30f);
    }
    if (res.labels) {
        int same = memcmp(res.labels, labels, (size_t)B * sizeof *labels) == 0;
        printf("%s labels\n", same ? "OK" : "FAIL");
        if (!same) n_fail++;
    }
    check_scalar("loss", res.loss, ref_loss, 1e-5);

    for (int i = 0; i < N_PARAMS; i++) {
        float *got = malloc((size_t)pnumel[i] * sizeof *got);
        CHECK_PL(pl_engine_get_grad(e, params[i], got));
        char name[64];
        snprintf(name, sizeof name, "grad %s", param_names[i]);
        check_array(name, got, grads[i], pnumel[i], 1e-4f, 1e-30f);
        free(got);
    }

    /* step 0's update, then steps 1..n-1: train_step k returns the loss
     * before its own update, i.e. step_losses[k] */
    CHECK_PL(pl_engine_optimizer_step(e));
    for (int k = 1; k < n_steps; k++) {
        pl_step_result sr;
        memset(&sr, 0, sizeof sr);
        CHECK_PL(pl_engine_train_step(e, &batch, &sr));
        char name[64];
        snprintf(name, sizeof name, "step %d loss", k);
        check_scalar(name, sr.loss, step_losses[k], 1e-4);
    }
    if (pl_engine_steps(e) != n_steps) {
        printf("FAIL optimizer steps %lld, expected %d\n",
               (long long)pl_engine_steps(e), n_steps);
        n_fail++;
    }

    for (int i = 0; i < N_PARAMS; i++) {
        float *got = malloc((size_t)pnumel[i] * sizeof *got);
        CHECK_PL(pl_engine_get_param(e, params[i], got));
        char name[64];
        snprintf(name, sizeof name, "param %s after %d steps", param_names[i],
                 n_steps);
        check_array(name, got, p_final[i], pnumel[i], 1e-4f, 1e-30f);
        free(got);
    }

    pl_engine_free(e);
    pl_graph_free(g);
    pl_runtime_free(rt);
    for (int i = 0; i < N_PARAMS; i++) {
        free(p0[i]);
        free(grads[i]);
        free(p_final[i]);
    }
    free(x);
    free(labels);
    free(ref_logits);
    free(step_losses);
    free(file);

    if (n_fail) {
        printf("[mlp_reference] %d check(s) FAILED\n", n_fail);
        return 1;
    }
    printf("[mlp_reference] all checks passed\n");
    return 0;
}
