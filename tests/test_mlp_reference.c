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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "pleiades.h"
#include "reference_util.h"

#define REF_MAGIC 20261121
#define REF_VERSION 1
#define N_PARAMS 6

static const char *const param_names[N_PARAMS] = {
    "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "head.weight",
    "head.bias"};

int main(int argc, char **argv) {
    static const tu_format format = {"mlp_reference", "an MLP", 32, REF_MAGIC,
                                      REF_VERSION};
    tu_reader r;
    tu_open_reference(&r, argc, argv, &format);
    const char *path = r.path;
    const int B = tu_rd_i32(&r), IN = tu_rd_i32(&r), H1 = tu_rd_i32(&r),
              H2 = tu_rd_i32(&r), K = tu_rd_i32(&r), n_steps = tu_rd_i32(&r);
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
    tu_expect_size(&r, expect);

    float *x = tu_rd_f32s(&r, (int64_t)B * IN);
    int32_t *labels = tu_xmalloc((size_t)B * sizeof *labels);
    for (int i = 0; i < B; i++) {
        labels[i] = tu_rd_i32(&r);
        if (labels[i] < 0 || labels[i] >= K) {
            fprintf(stderr, "%s: label %d of sample %d out of [0, %d)\n",
                    path, labels[i], i, K);
            return 2;
        }
    }
    tu_reference ref;
    tu_read_reference(&r, &ref, N_PARAMS, pnumel, (int64_t)B * K, n_steps);

    /* runtime */
    pl_runtime_options ro = pl_runtime_options_default();
    tu_workers_from_env(&ro);
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
    tu_check_param_count(g, total_params);

    /* engine: the batch in 2 tiles, the script's AdamW with lr 1e-2 */
    pl_engine_options eo = tu_reference_options(B, 1e-2f);
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK_PTR(e, "pl_engine_new");
    for (int i = 0; i < N_PARAMS; i++)
        tu_load_param(e, params[i], ref.p0[i], pnumel[i], param_names[i]);

    const void *data[2] = {x, labels};
    pl_batch batch = {.size = B, .data = data};

    tu_check_first_step(e, &batch, &ref, (int64_t)B * K, labels, B, "labels");

    for (int i = 0; i < N_PARAMS; i++)
        tu_check_grad(e, params[i], param_names[i], ref.grads[i], pnumel[i],
                      1e-4f);

    /* the optimizer steps on this batch, then the parameters they left */
    tu_check_train_steps(e, &batch, ref.step_losses, n_steps, 1e-4);

    for (int i = 0; i < N_PARAMS; i++) {
        float *got = tu_param_values(e, params[i], pnumel[i]);
        char name[64];
        snprintf(name, sizeof name, "param %s after %d steps", param_names[i],
                 n_steps);
        tu_check_array(name, got, ref.p_final[i], pnumel[i], 1e-4f, 1e-30f);
        free(got);
    }

    pl_engine_free(e);
    pl_graph_free(g);
    pl_runtime_free(rt);
    tu_reference_free(&ref);
    free(x);
    free(labels);
    free(r.data);

    return tu_report("mlp_reference");
}
