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
#include "reference_util.h"

#define REF_MAGIC 20261122
#define REF_VERSION 1
#define N_STEPS 5
#define MAX_NAME 128

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
    double scale = tu_max_abs(ref, n);
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
    if (!ok) tu_failures++;
}

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
static ref_param *read_param_table(tu_reader *r, int n) {
    ref_param *t = tu_xmalloc((size_t)n * sizeof *t);
    for (int i = 0; i < n; i++) {
        int32_t len = tu_rd_i32(r);
        if (len <= 0 || len >= MAX_NAME) {
            fprintf(stderr, "%s: parameter %d: bad name length %d\n", r->path,
                    i, len);
            exit(2);
        }
        tu_need(r, (size_t)len);
        memcpy(t[i].name, r->p, (size_t)len);
        t[i].name[len] = '\0';
        r->p += len;
        t[i].ndim = tu_rd_i32(r);
        if (t[i].ndim < 1 || t[i].ndim > PL_MAX_DIMS) {
            fprintf(stderr, "%s: parameter %s: bad ndim %d\n", r->path,
                    t[i].name, t[i].ndim);
            exit(2);
        }
        t[i].numel = 1;
        for (int d = 0; d < t[i].ndim; d++) {
            int32_t s = tu_rd_i32(r);
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

/* What a planner reads of the graph (pl_graph_op_info, pl_graph_tensor):
 * blocks as pl_gpt_build documents them (embedding, one per layer, the
 * head), every op's output an activation or scalar, and the matrix
 * products' FLOPs by the formula 2·T·in·out per sample. */
static void check_introspection(const pl_graph_t *g, const pl_gpt_config *c) {
    int64_t T = c->context, C = c->channels;
    double want = 2.0 * (double)T * (double)C * (12.0 * (double)C * (double)c->layers +
                                                 (double)c->vocab);
    double got = 0.0;
    int max_block = -1;
    bool attention_saves = false;
    for (int i = 0; i < pl_graph_num_ops(g); i++) {
        pl_op_info o;
        CHECK_PL(pl_graph_op_info(g, i, &o));
        pl_tensor_kind k = pl_tensor_get_kind(o.output);
        CHECK(k == PL_TENSOR_ACTIVATION || k == PL_TENSOR_SCALAR,
              "op %s: output kind %d", o.name, (int)k);
        if (o.block > max_block) max_block = o.block;
        size_t n = strlen(o.name);
        if ((n > 4 && !strcmp(o.name + n - 4, ".qkv")) ||
            (n > 5 && !strcmp(o.name + n - 5, ".proj")) ||
            (n > 3 && !strcmp(o.name + n - 3, ".fc")) || !strcmp(o.name, "lm_head"))
            got += o.flops;
        if (!strcmp(o.name, "h0.attn")) {
            CHECK(o.block == 1, "h0.attn in block %d, want 1", o.block);
            attention_saves = o.saved != NULL;
        }
    }
    CHECK(max_block == c->layers + 1 && pl_graph_num_blocks(g) == c->layers + 2,
          "blocks 0..%d (%d), want 0..%lld", max_block, pl_graph_num_blocks(g),
          (long long)c->layers + 1);
    CHECK(fabs(got - want) <= 1e-9 * want, "matrix-product FLOPs %.0f, formula %.0f", got,
          want);
    CHECK(attention_saves, "the attention op keeps no tensor for its backward");
    CHECK(pl_graph_tensor(g, pl_graph_num_tensors(g)) == NULL && pl_graph_tensor(g, -1) == NULL,
          "pl_graph_tensor out of range returns a tensor");
    CHECK(pl_graph_op_info(g, pl_graph_num_ops(g), &(pl_op_info){0}) ==
              PL_STATUS_INVALID_ARGUMENT, "pl_graph_op_info out of range accepted");
}

int main(int argc, char **argv) {
    static const tu_format format = {"gpt_reference", "a GPT", 36, REF_MAGIC,
                                      REF_VERSION};
    tu_reader r;
    tu_open_reference(&r, argc, argv, &format);
    const char *path = r.path;
    const int V = tu_rd_i32(&r), T = tu_rd_i32(&r), C = tu_rd_i32(&r),
              L = tu_rd_i32(&r), NH = tu_rd_i32(&r), B = tu_rd_i32(&r);
    const int n_params = tu_rd_i32(&r);
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
    int64_t *numel = tu_xmalloc((size_t)n_params * sizeof *numel);
    int64_t total_params = 0;
    for (int i = 0; i < n_params; i++) {
        numel[i] = table[i].numel;
        total_params += numel[i];
    }
    const int64_t BT = (int64_t)B * T;
    const size_t expect = (size_t)(r.p - r.data) +
                          4 * ((size_t)(2 * BT) + 3 * (size_t)total_params +
                               (size_t)(BT * V) + 1 + N_STEPS);
    tu_expect_size(&r, expect);

    int32_t *tokens = tu_rd_i32s(&r, BT), *targets = tu_rd_i32s(&r, BT);
    for (int64_t i = 0; i < BT; i++)
        if (tokens[i] < 0 || tokens[i] >= V || targets[i] < 0 ||
            targets[i] >= V) {
            fprintf(stderr, "%s: token %d / target %d at %lld out of [0, %d)\n",
                    path, tokens[i], targets[i], (long long)i, V);
            return 2;
        }
    tu_reference ref;
    tu_read_reference(&r, &ref, n_params, numel, BT * V, N_STEPS);

    /* runtime: 2 workers so the two tiles really run concurrently */
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 2;
    tu_workers_from_env(&ro);
    pl_runtime_t *rt = pl_runtime_new(&ro);
    CHECK_PTR(rt, "pl_runtime_new");

    /* graph: the model under test */
    pl_graph_t *g = pl_graph_new(0);
    CHECK_PTR(g, "pl_graph_new");
    pl_gpt_config cfg = {.vocab = V, .context = T, .channels = C, .layers = L,
                         .heads = NH};
    pl_gpt_model model;
    CHECK_PL(pl_gpt_build(g, &cfg, &model));

    check_introspection(g, &cfg);
    pl_tensor_t **params = tu_xmalloc((size_t)n_params * sizeof *params);
    check_param_table(g, table, n_params, params);
    tu_check_param_count(g, total_params);

    /* engine: batch of B in 2 tiles; the script's AdamW with lr 3e-3 */
    pl_engine_options eo = tu_reference_options(B, 3e-3f);
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK_PTR(e, "pl_engine_new");
    for (int i = 0; i < n_params; i++)
        tu_load_param(e, params[i], ref.p0[i], numel[i], table[i].name);

    /* inputs in creation order: tokens, then targets */
    const void *data[2] = {tokens, targets};
    pl_batch batch = {.size = B, .data = data};

    pl_step_result res =
        tu_check_first_step(e, &batch, &ref, BT * V, targets, BT,
                            "labels (targets returned with the output)");

    for (int i = 0; i < n_params; i++)
        tu_check_grad(e, params[i], table[i].name, ref.grads[i], numel[i],
                      1e-4f);

    /* step_losses[0] is the loss of the forward above; then the remaining
     * optimizer steps on this batch */
    tu_check_scalar("step 0 loss", res.loss, ref.step_losses[0], 1e-5);
    tu_check_train_steps(e, &batch, ref.step_losses, N_STEPS, 1e-5);

    for (int i = 0; i < n_params; i++) {
        float *got = tu_param_values(e, params[i], numel[i]);
        char name[MAX_NAME + 32];
        snprintf(name, sizeof name, "param %s after %d steps", table[i].name,
                 N_STEPS);
        check_final_param(name, got, ref.p_final[i], ref.grads[i], numel[i],
                          1e-4f, 100.0f * eo.optimizer.eps,
                          2.1f * eo.optimizer.lr * N_STEPS);
        free(got);
    }

    pl_engine_free(e);
    pl_graph_free(g);
    pl_runtime_free(rt);
    tu_reference_free(&ref);
    free(numel);
    free(params);
    free(table);
    free(tokens);
    free(targets);
    free(r.data);

    return tu_report("gpt_reference");
}
