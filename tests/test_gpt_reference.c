/*
 * test_gpt_reference.c — compares Pleiades' GPT-2 (pl_gpt_build) with an
 * independent PyTorch implementation, like llm.c's test_gpt2.
 *
 *   test_gpt_reference tests/reference/gpt_reference.bin
 *
 * The .bin is written by tests/reference/gpt_reference.py (its docstring
 * documents the model and the layout): the config, a name/shape table of the
 * parameters in Pleiades' order, a batch of tokens and targets, the initial
 * parameters, the logits, loss and gradients PyTorch computes for them, the
 * losses of 5 AdamW steps on that batch and the parameters after them.
 *
 * This test builds the model with pl_gpt_build (public API only), checks
 * that its parameters have the file's names and shapes in the file's order,
 * loads PyTorch's parameters with pl_engine_set_param and checks every
 * quantity. The engine runs the batch of 2 in 2 tiles on 2 CPU workers, so
 * splitting the batch (and accumulating gradients over tiles) is exercised.
 * It prints "OK name maxdiff" or "FAIL name maxdiff" per quantity and exits
 * non-zero if any fails.
 *
 * Tolerances (everything is float32 on both sides; differences come only
 * from summation order, BLAS blocking, the tile split and libm):
 *   logits        max |diff| <= 1e-5 * max |ref logit|
 *   loss          |diff|     <= 1e-5 * max(1, |ref loss|)
 *   gradients     max |diff| <= 1e-4 * max |ref grad| of that tensor
 *   step losses   |diff|     <= 1e-5 * max(1, |ref loss|)
 *   final params  max |diff| <= 1e-4 * max |ref param| of that tensor,
 *                 except elements whose reference initial gradient is below
 *                 100 * eps (1e-6): |diff| <= 2.1 * lr * steps
 * (AdamW divides by sqrt(v), which amplifies tiny gradient differences, hence
 * the looser bound after training; see check_final_param for why elements
 * with a near-zero gradient, such as the key part of attn.qkv.bias, whose
 * gradient is exactly zero in exact arithmetic, can only be bounded.)
 *
 * Environment: PL_CPU_WORKERS overrides the 2 StarPU CPU workers.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pleiades.h"

#define REF_MAGIC 20261122
#define REF_VERSION 1
#define N_STEPS 5
#define MAX_NAME 128

static int n_fail = 0;

/* ---------------------------------------------------------- file reading */

typedef struct reader {
    const unsigned char *p, *end;
    const char *path;
} reader;

static void need(reader *r, size_t n) {
    if ((size_t)(r->end - r->p) < n) {
        fprintf(stderr, "%s: truncated file (unexpected end of data)\n",
                r->path);
        exit(2);
    }
}

static uint32_t rd_u32(reader *r) {
    need(r, 4);
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

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

static float *rd_f32s(reader *r, int64_t n) {
    need(r, (size_t)n * 4);
    float *a = xmalloc((size_t)n * sizeof *a);
    for (int64_t i = 0; i < n; i++) a[i] = rd_f32(r);
    return a;
}

static int32_t *rd_i32s(reader *r, int64_t n) {
    need(r, (size_t)n * 4);
    int32_t *a = xmalloc((size_t)n * sizeof *a);
    for (int64_t i = 0; i < n; i++) a[i] = rd_i32(r);
    return a;
}

static unsigned char *slurp(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = xmalloc(cap);
    for (;;) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        cap *= 2;
        buf = realloc(buf, cap);
        if (!buf) {
            fprintf(stderr, "out of memory\n");
            exit(2);
        }
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
        if (d != d) {
            nan = 1;
            at = i;
        }
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

/* Final parameters after AdamW. AdamW's update m̂/(√v̂ + ε) is
 * ill-conditioned where the gradient is within a few hundred ε of zero (its
 * first-step derivative is ε/(|g| + ε)²): there, float32 rounding noise in
 * the gradient (~1e-9 here) can turn into an update of either sign of up to
 * lr per step, in PyTorch as much as in Pleiades. Elements whose reference
 * initial gradient |g0| is below `small_grad` are therefore only checked
 * against that envelope, |diff| <= 2.1 · lr · steps (each side moves at most
 * ≈1.02 lr per step for bias-corrected Adam with these betas over 5 steps).
 * The key slice of every attn.qkv.bias is such a case for a structural
 * reason: adding a constant to a row of attention scores does not change
 * the softmax, so its gradient is exactly zero and only rounding is left.
 * All other elements: max |diff| <= rtol · max |ref| of the tensor. */
static void check_final_param(const char *name, const float *got,
                              const float *ref, const float *g0, int64_t n,
                              float rtol, float small_grad, float envelope) {
    double maxdiff = 0.0, maxdiff_ill = 0.0;
    int64_t at = 0, at_ill = -1, n_ill = 0;
    int nan = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        if (d != d) {
            nan = 1;
            at = i;
            continue;
        }
        if (fabsf(g0[i]) < small_grad) {
            n_ill++;
            if (at_ill < 0 || d > maxdiff_ill) {
                maxdiff_ill = d;
                at_ill = i;
            }
        } else if (d > maxdiff) {
            maxdiff = d;
            at = i;
        }
    }
    double scale = max_abs(ref, n);
    if (scale < 1e-30) scale = 1e-30;
    int ok = !nan && maxdiff <= rtol * scale && maxdiff_ill <= envelope;
    printf("%s %s %.3e (rel %.3e, tol %.0e; worst [%lld] %.8g vs %.8g)",
           ok ? "OK" : "FAIL", name, maxdiff, maxdiff / scale, (double)rtol,
           (long long)at, (double)got[at], (double)ref[at]);
    if (n_ill)
        printf("; %lld with |grad0| < %.0e: %.3e (tol %.1e, worst [%lld])",
               (long long)n_ill, (double)small_grad, maxdiff_ill,
               (double)envelope, (long long)at_ill);
    printf("\n");
    if (!ok) n_fail++;
}

static void check_scalar(const char *name, double got, double ref,
                         double rtol) {
    double d = fabs(got - ref);
    double scale = fabs(ref) > 1.0 ? fabs(ref) : 1.0;
    int ok = d == d && d <= rtol * scale;
    printf("%s %s %.3e (%.8f vs %.8f, tol %.0e)\n", ok ? "OK" : "FAIL", name,
           d, got, ref, rtol * scale);
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

/* ------------------------------------------------------- parameter table */

typedef struct ref_param {
    char name[MAX_NAME];
    int ndim;
    int64_t shape[PL_MAX_DIMS];
    int64_t numel;
} ref_param;

static void format_shape(char *out, size_t size, int ndim,
                         const int64_t *shape) {
    size_t k = (size_t)snprintf(out, size, "[");
    for (int d = 0; d < ndim && k < size; d++)
        k += (size_t)snprintf(out + k, size - k, "%s%lld", d ? ", " : "",
                              (long long)shape[d]);
    if (k < size) snprintf(out + k, size - k, "]");
}

/* Reads the file's descriptor table. */
static ref_param *read_param_table(reader *r, int n) {
    ref_param *t = xmalloc((size_t)n * sizeof *t);
    for (int i = 0; i < n; i++) {
        int32_t len = rd_i32(r);
        if (len <= 0 || len >= MAX_NAME) {
            fprintf(stderr, "%s: parameter %d: bad name length %d\n", r->path,
                    i, len);
            exit(2);
        }
        need(r, (size_t)len);
        memcpy(t[i].name, r->p, (size_t)len);
        t[i].name[len] = '\0';
        r->p += len;
        t[i].ndim = rd_i32(r);
        if (t[i].ndim < 1 || t[i].ndim > PL_MAX_DIMS) {
            fprintf(stderr, "%s: parameter %s: bad ndim %d\n", r->path,
                    t[i].name, t[i].ndim);
            exit(2);
        }
        t[i].numel = 1;
        for (int d = 0; d < t[i].ndim; d++) {
            int32_t s = rd_i32(r);
            if (s <= 0 || s > 1 << 20) {
                fprintf(stderr, "%s: parameter %s: bad dim %d\n", r->path,
                        t[i].name, s);
                exit(2);
            }
            t[i].shape[d] = s;
            t[i].numel *= s;
        }
    }
    return t;
}

/* Checks that the graph's parameters are the file's, in the same order,
 * with the same shapes. Any mismatch is fatal: nothing else can be
 * compared meaningfully. */
static void check_param_table(pl_graph_t *g, const ref_param *ref, int n,
                              pl_tensor_t **params) {
    int ng = pl_graph_num_params(g), bad = 0;
    if (ng != n) {
        printf("FAIL parameter count: the graph has %d parameters, the "
               "reference file %d\n", ng, n);
        bad = 1;
    }
    for (int i = 0; i < (ng < n ? ng : n); i++) {
        pl_tensor_t *p = pl_graph_param(g, i);
        CHECK_PTR(p, "pl_graph_param");
        params[i] = p;
        int64_t shape[PL_MAX_DIMS];
        int nd = pl_tensor_shape(p, shape);
        int same_shape = nd == ref[i].ndim;
        for (int d = 0; same_shape && d < nd; d++)
            same_shape = shape[d] == ref[i].shape[d];
        if (strcmp(pl_tensor_name(p), ref[i].name) != 0 || !same_shape) {
            char gs[96], rs[96];
            format_shape(gs, sizeof gs, nd, shape);
            format_shape(rs, sizeof rs, ref[i].ndim, ref[i].shape);
            printf("FAIL parameter %d: the graph has '%s' %s, the reference "
                   "file '%s' %s (regenerate the file with "
                   "tests/reference/gpt_reference.py if the model changed)\n",
                   i, pl_tensor_name(p), gs, ref[i].name, rs);
            bad = 1;
        }
    }
    if (bad) {
        printf("[gpt_reference] parameter table mismatch, nothing compared\n");
        exit(1);
    }
    printf("OK parameter table (%d parameters, names and shapes)\n", n);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s gpt_reference.bin\n", argv[0]);
        return 2;
    }
    const char *path = argv[1];
    size_t size;
    unsigned char *file = slurp(path, &size);
    reader r = {file, file + size, path};

    /* header */
    if (size < 36) {
        fprintf(stderr, "%s: %zu bytes, too short for the 36-byte header\n",
                path, size);
        return 2;
    }
    int32_t magic = rd_i32(&r), version = rd_i32(&r);
    if (magic != REF_MAGIC) {
        fprintf(stderr,
                "%s: bad magic %d (expected %d): not a GPT reference file; "
                "regenerate with /usr/bin/python3 "
                "tests/reference/gpt_reference.py\n",
                path, magic, REF_MAGIC);
        return 2;
    }
    if (version != REF_VERSION) {
        fprintf(stderr,
                "%s: version %d, this test reads version %d; regenerate with "
                "/usr/bin/python3 tests/reference/gpt_reference.py\n",
                path, version, REF_VERSION);
        return 2;
    }
    const int V = rd_i32(&r), T = rd_i32(&r), C = rd_i32(&r), L = rd_i32(&r),
              NH = rd_i32(&r), B = rd_i32(&r);
    const int n_params = rd_i32(&r);
    if (V <= 0 || T <= 0 || C <= 0 || L <= 0 || NH <= 0 || B <= 0 ||
        V > 1 << 16 || T > 1 << 12 || C > 1 << 12 || L > 64 || NH > C ||
        B > 1 << 10 || n_params <= 0 || n_params > 4096) {
        fprintf(stderr, "%s: implausible header V=%d T=%d C=%d L=%d NH=%d "
                "B=%d n_params=%d\n", path, V, T, C, L, NH, B, n_params);
        return 2;
    }
    printf("[gpt_reference] V=%d T=%d C=%d L=%d NH=%d B=%d params=%d "
           "steps=%d\n", V, T, C, L, NH, B, n_params, N_STEPS);

    ref_param *table = read_param_table(&r, n_params);
    int64_t total_params = 0;
    for (int i = 0; i < n_params; i++) total_params += table[i].numel;
    const int64_t BT = (int64_t)B * T;
    const size_t expect = (size_t)(r.p - file) +
                          4 * ((size_t)(2 * BT) + 3 * (size_t)total_params +
                               (size_t)(BT * V) + 1 + N_STEPS);
    if (size != expect) {
        fprintf(stderr, "%s: %zu bytes, expected %zu for this header\n",
                path, size, expect);
        return 2;
    }

    int32_t *tokens = rd_i32s(&r, BT), *targets = rd_i32s(&r, BT);
    for (int64_t i = 0; i < BT; i++)
        if (tokens[i] < 0 || tokens[i] >= V || targets[i] < 0 ||
            targets[i] >= V) {
            fprintf(stderr, "%s: token %d / target %d at %lld out of [0, %d)\n",
                    path, tokens[i], targets[i], (long long)i, V);
            return 2;
        }
    float **p0 = xmalloc((size_t)n_params * sizeof *p0);
    float **grads = xmalloc((size_t)n_params * sizeof *grads);
    float **p_final = xmalloc((size_t)n_params * sizeof *p_final);
    for (int i = 0; i < n_params; i++) p0[i] = rd_f32s(&r, table[i].numel);
    float *ref_logits = rd_f32s(&r, BT * V);
    float ref_loss = rd_f32(&r);
    for (int i = 0; i < n_params; i++) grads[i] = rd_f32s(&r, table[i].numel);
    float *step_losses = rd_f32s(&r, N_STEPS);
    for (int i = 0; i < n_params; i++) p_final[i] = rd_f32s(&r, table[i].numel);

    /* runtime: 2 workers so the two tiles really run concurrently */
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 2;
    const char *nw = getenv("PL_CPU_WORKERS");
    if (nw && *nw) ro.cpu_workers = atoi(nw);
    pl_runtime_t *rt = pl_runtime_new(&ro);
    CHECK_PTR(rt, "pl_runtime_new");

    /* graph: the model under test */
    pl_graph_t *g = pl_graph_new(0);
    CHECK_PTR(g, "pl_graph_new");
    pl_gpt_config cfg = {.vocab = V, .context = T, .channels = C, .layers = L,
                         .heads = NH};
    pl_gpt_model model;
    CHECK_PL(pl_gpt_build(g, &cfg, &model));

    pl_tensor_t **params = xmalloc((size_t)n_params * sizeof *params);
    check_param_table(g, table, n_params, params);
    if (pl_graph_param_count(g) != total_params) {
        fprintf(stderr, "FAIL graph has %lld parameters, reference %lld\n",
                (long long)pl_graph_param_count(g), (long long)total_params);
        return 1;
    }

    /* engine: batch of B in 2 tiles; the script's AdamW hyper-parameters */
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = B;
    eo.tiles = 2;
    eo.optimizer.kind = PL_OPTIMIZER_ADAMW;
    eo.optimizer.lr = 3e-3f;
    eo.optimizer.weight_decay = 0.01f;
    eo.optimizer.beta1 = 0.9f;
    eo.optimizer.beta2 = 0.999f;
    eo.optimizer.eps = 1e-8f;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK_PTR(e, "pl_engine_new");
    for (int i = 0; i < n_params; i++)
        CHECK_PL(pl_engine_set_param(e, params[i], p0[i]));

    /* set_param round trip, so a broken setter is not mistaken for a
     * broken forward */
    for (int i = 0; i < n_params; i++) {
        float *got = xmalloc((size_t)table[i].numel * sizeof *got);
        CHECK_PL(pl_engine_get_param(e, params[i], got));
        if (memcmp(got, p0[i], (size_t)table[i].numel * sizeof *got) != 0) {
            printf("FAIL set/get_param %s round trip\n", table[i].name);
            n_fail++;
        }
        free(got);
    }

    /* inputs in creation order: tokens, then targets */
    const void *data[2] = {tokens, targets};
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
        check_array("logits", res.output, ref_logits, BT * V, 1e-5f, 1e-30f);
    }
    if (res.labels) {
        int same = memcmp(res.labels, targets, (size_t)BT * sizeof *targets) == 0;
        printf("%s labels (targets returned with the output)\n",
               same ? "OK" : "FAIL");
        if (!same) n_fail++;
    }
    check_scalar("loss", res.loss, ref_loss, 1e-5);

    for (int i = 0; i < n_params; i++) {
        float *got = xmalloc((size_t)table[i].numel * sizeof *got);
        CHECK_PL(pl_engine_get_grad(e, params[i], got));
        char name[MAX_NAME + 16];
        snprintf(name, sizeof name, "grad %s", table[i].name);
        check_array(name, got, grads[i], table[i].numel, 1e-4f, 1e-30f);
        free(got);
    }

    /* step 0's update, then steps 1..n-1: train_step k returns the loss
     * before its own update, i.e. step_losses[k] (step_losses[0] is the
     * loss of the forward above) */
    check_scalar("step 0 loss", res.loss, step_losses[0], 1e-5);
    CHECK_PL(pl_engine_optimizer_step(e));
    for (int k = 1; k < N_STEPS; k++) {
        pl_step_result sr;
        memset(&sr, 0, sizeof sr);
        CHECK_PL(pl_engine_train_step(e, &batch, &sr));
        char name[64];
        snprintf(name, sizeof name, "step %d loss", k);
        check_scalar(name, sr.loss, step_losses[k], 1e-5);
    }
    if (pl_engine_steps(e) != N_STEPS) {
        printf("FAIL optimizer steps %lld, expected %d\n",
               (long long)pl_engine_steps(e), N_STEPS);
        n_fail++;
    }

    for (int i = 0; i < n_params; i++) {
        float *got = xmalloc((size_t)table[i].numel * sizeof *got);
        CHECK_PL(pl_engine_get_param(e, params[i], got));
        char name[MAX_NAME + 32];
        snprintf(name, sizeof name, "param %s after %d steps", table[i].name,
                 N_STEPS);
        check_final_param(name, got, p_final[i], grads[i], table[i].numel,
                          1e-4f, 100.0f * eo.optimizer.eps,
                          2.1f * eo.optimizer.lr * N_STEPS);
        free(got);
    }

    pl_engine_free(e);
    pl_graph_free(g);
    pl_runtime_free(rt);
    for (int i = 0; i < n_params; i++) {
        free(p0[i]);
        free(grads[i]);
        free(p_final[i]);
    }
    free(p0);
    free(grads);
    free(p_final);
    free(params);
    free(table);
    free(tokens);
    free(targets);
    free(ref_logits);
    free(step_losses);
    free(file);

    if (n_fail) {
        printf("[gpt_reference] %d check(s) FAILED\n", n_fail);
        return 1;
    }
    printf("[gpt_reference] all checks passed\n");
    return 0;
}
