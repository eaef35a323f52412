/* Backend comparison in the spirit of ggml's test-backend-ops: every codelet
 * runs once pinned to a CPU worker and once pinned to a CUDA worker on the
 * same random inputs (and the same initial contents for accumulating
 * outputs), and the outputs are compared with a normalised error
 *   max|cpu − gpu| / max(max|cpu|, 1e-6)
 * against a per-op threshold: 1e-5 for elementwise ops (same formula, only
 * libm differences), 1e-4 for ops with reductions or matrix products
 * (different summation orders in fp32), 1e-3 for attention and LayerNorm
 * gradients (two chained reductions).
 *
 * Where StarPU has no CUDA worker (Debian's CPU-only StarPU, CI) the test
 * says so and exits 77, which CTest reports as skipped. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/codelets.h"
#include "pleiades.h"

#define MAXB 6

typedef enum { IN_F, IN_I, OUT_F, ACC_F, OUT_D, IN_P } buf_kind; /* IN_P: [0,1) */

typedef struct op_case {
    const char *name;
    struct starpu_codelet *cl;
    pl_dims_args dims;
    pl_optimizer_args opt;
    bool is_opt;
    int n;
    size_t elems[MAXB];
    buf_kind kind[MAXB];
    int32_t int_range; /* IN_I values in [0, int_range) */
    double tol;
} op_case;

static uint64_t rng = 0x12345678;
static float frand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) * (1.0 / 16777216.0));
}

static size_t elem_size(buf_kind k) {
    return k == OUT_D ? sizeof(double) : k == IN_I ? sizeof(int32_t) : sizeof(float);
}

/* Runs the case on `worker` over fresh copies of `init`, returns outputs. */
static int run_on(const op_case *c, int worker, void *const *init, void **out) {
    starpu_data_handle_t h[MAXB];
    for (int i = 0; i < c->n; i++) {
        size_t bytes = c->elems[i] * elem_size(c->kind[i]);
        out[i] = malloc(bytes);
        memcpy(out[i], init[i], bytes);
        starpu_vector_data_register(&h[i], STARPU_MAIN_RAM, (uintptr_t)out[i],
                                    (uint32_t)c->elems[i], elem_size(c->kind[i]));
    }
    struct starpu_task *t = starpu_task_create();
    t->cl = c->cl;
    for (int i = 0; i < c->n; i++) t->handles[i] = h[i];
    if (c->cl->nbuffers == STARPU_VARIABLE_NBUFFERS) {
        t->nbuffers = c->n;
        for (int i = 0; i < c->n; i++) t->modes[i] = c->cl->modes[i];
    }
    t->cl_arg = c->is_opt ? (void *)&c->opt : (void *)&c->dims;
    t->cl_arg_size = c->is_opt ? sizeof c->opt : sizeof c->dims;
    t->execute_on_a_specific_worker = 1;
    t->workerid = (unsigned)worker;
    t->synchronous = 1;
    int ret = starpu_task_submit(t);
    for (int i = 0; i < c->n; i++) starpu_data_unregister(h[i]);
    return ret;
}

static double compare(const op_case *c, void **a, void **b) {
    double worst = 0.0;
    for (int i = 0; i < c->n; i++) {
        if (c->kind[i] != OUT_F && c->kind[i] != ACC_F && c->kind[i] != OUT_D) continue;
        double maxref = 1e-6, maxdiff = 0.0;
        for (size_t j = 0; j < c->elems[i]; j++) {
            double x = c->kind[i] == OUT_D ? ((double *)a[i])[j] : ((float *)a[i])[j];
            double y = c->kind[i] == OUT_D ? ((double *)b[i])[j] : ((float *)b[i])[j];
            if (fabs(x) > maxref) maxref = fabs(x);
            if (!(fabs(x - y) <= maxdiff)) maxdiff = fabs(x - y); /* NaN → ∞ */
            if (isnan(x - y)) maxdiff = INFINITY;
        }
        if (maxdiff / maxref > worst) worst = maxdiff / maxref;
    }
    return worst;
}

static int run_case(const op_case *c, int cpu, int gpu) {
    void *init[MAXB], *a[MAXB], *b[MAXB];
    for (int i = 0; i < c->n; i++) {
        init[i] = calloc(c->elems[i], elem_size(c->kind[i]));
        for (size_t j = 0; j < c->elems[i]; j++) {
            if (c->kind[i] == IN_I)
                ((int32_t *)init[i])[j] = (int32_t)(frand() * c->int_range);
            else if (c->kind[i] == IN_P)
                ((float *)init[i])[j] = frand();
            else if (c->kind[i] != OUT_D)
                ((float *)init[i])[j] = 2.0f * frand() - 1.0f;
        }
    }
    int ok = run_on(c, cpu, init, a) == 0 && run_on(c, gpu, init, b) == 0;
    double err = ok ? compare(c, a, b) : INFINITY;
    bool pass = ok && err <= c->tol;
    printf("%s %-28s err %.3e (tol %.0e)\n", pass ? "OK  " : "FAIL", c->name, err, c->tol);
    for (int i = 0; i < c->n; i++) {
        free(init[i]);
        if (ok) free(a[i]), free(b[i]);
    }
    return pass ? 0 : 1;
}

int main(void) {
    if (!pl_runtime_cuda_available()) {
        printf("SKIP: no CUDA worker: this StarPU was built without CUDA (see "
               "scripts/build-starpu-cuda)\n");
        return 77;
    }
    pl_runtime_options ro = pl_runtime_options_default();
    ro.device = PL_DEVICE_AUTO;
    ro.cpu_workers = 1;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) {
        printf("SKIP: no CUDA worker (%s)\n", pl_last_error());
        return 77;
    }
    int cpu, gpu;
    if (starpu_worker_get_ids_by_type(STARPU_CUDA_WORKER, &gpu, 1) < 1 ||
        starpu_worker_get_ids_by_type(STARPU_CPU_WORKER, &cpu, 1) < 1) {
        printf("SKIP: no CUDA worker (StarPU found no GPU)\n");
        pl_runtime_free(rt);
        return 77;
    }
    enum { N = 48, C = 32, OC = 24, K = 10, B = 2, T = 12, CE = 16, NH = 4, V = 50 };
    pl_dims_args d = {.N = N, .C = C, .OC = OC, .accumulate = 1, .accumulate2 = 1,
                      .scale = 1.0f / N};
    pl_dims_args de = {.B = B, .T = T, .C = CE, .V = V, .NH = NH, .N = B * T,
                       .accumulate = 1, .accumulate2 = 1};
    pl_optimizer_args o = {.n = 1000, .t = 3, .lr = 1e-2f, .beta1 = 0.9f,
                           .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
                           .momentum = 0.9f};
    const op_case cases[] = {
        {"linear_forward", &pl_cl_linear_forward, d, {0}, false, 4,
         {N * OC, N * C, OC * C, OC}, {OUT_F, IN_F, IN_F, IN_F}, 0, 1e-4},
        {"linear_backward_input", &pl_cl_linear_backward_input, d, {0}, false, 3,
         {N * C, N * OC, OC * C}, {ACC_F, IN_F, IN_F}, 0, 1e-4},
        {"linear_backward_weight", &pl_cl_linear_backward_weight, d, {0}, false, 4,
         {OC * C, OC, N * OC, N * C}, {ACC_F, ACC_F, IN_F, IN_F}, 0, 1e-4},
        {"matmul_forward", &pl_cl_matmul_forward, d, {0}, false, 3,
         {N * OC, N * C, OC * C}, {OUT_F, IN_F, IN_F}, 0, 1e-4},
        {"matmul_backward_weight", &pl_cl_matmul_backward_weight, d, {0}, false, 3,
         {OC * C, N * OC, N * C}, {ACC_F, IN_F, IN_F}, 0, 1e-4},
        {"relu_forward", &pl_cl_relu_forward, d, {0}, false, 2, {N * C, N * C},
         {OUT_F, IN_F}, 0, 1e-5},
        {"relu_backward", &pl_cl_relu_backward, d, {0}, false, 3,
         {N * C, N * C, N * C}, {ACC_F, IN_F, IN_F}, 0, 1e-5},
        {"gelu_forward", &pl_cl_gelu_forward, d, {0}, false, 2, {N * C, N * C},
         {OUT_F, IN_F}, 0, 1e-5},
        {"gelu_backward", &pl_cl_gelu_backward, d, {0}, false, 3,
         {N * C, N * C, N * C}, {ACC_F, IN_F, IN_F}, 0, 1e-5},
        {"add_forward", &pl_cl_add_forward, d, {0}, false, 3, {N * C, N * C, N * C},
         {OUT_F, IN_F, IN_F}, 0, 1e-5},
        {"add_backward", &pl_cl_add_backward, d, {0}, false, 2, {N * C, N * C},
         {ACC_F, IN_F}, 0, 1e-5},
        {"cross_entropy_forward", &pl_cl_cross_entropy_forward,
         (pl_dims_args){.N = N, .C = K, .OC = K}, {0}, false, 3, {2, N * K, N},
         {OUT_D, IN_F, IN_I}, K, 1e-5},
        {"cross_entropy_loss", &pl_cl_cross_entropy_loss,
         (pl_dims_args){.N = N, .C = K, .OC = K, .scale = 1.0f / N}, {0}, false, 4,
         {2, N * K, N * K, N}, {OUT_D, OUT_F, IN_F, IN_I}, K, 1e-5},
        {"accuracy_forward", &pl_cl_accuracy_forward,
         (pl_dims_args){.N = N, .C = K, .OC = K}, {0}, false, 3, {2, N * K, N},
         {OUT_D, IN_F, IN_I}, K, 0.0},
        {"mean_forward", &pl_cl_mean_forward, d, {0}, false, 2, {2, N * C},
         {OUT_D, IN_F}, 0, 1e-5},
        {"mean_backward", &pl_cl_mean_backward, d, {0}, false, 1, {N * C}, {ACC_F}, 0,
         1e-5},
        {"embedding_forward", &pl_cl_embedding_forward, de, {0}, false, 5,
         {B * T * CE, B * T, V * CE, T * CE, 2}, {OUT_F, IN_I, IN_F, IN_F, OUT_D}, V,
         1e-5},
        {"embedding_backward_weight", &pl_cl_embedding_backward_weight, de, {0}, false,
         4, {V * CE, T * CE, B * T * CE, B * T}, {ACC_F, ACC_F, IN_F, IN_I}, V, 1e-5},
        {"layernorm_forward", &pl_cl_layernorm_forward, d, {0}, false, 4,
         {N * C, N * C, C, C}, {OUT_F, IN_F, IN_F, IN_F}, 0, 1e-4},
        {"layernorm_backward_input", &pl_cl_layernorm_backward_input, d, {0}, false, 4,
         {N * C, N * C, N * C, C}, {ACC_F, IN_F, IN_F, IN_F}, 0, 1e-3},
        {"layernorm_backward_weight", &pl_cl_layernorm_backward_weight, d, {0}, false,
         4, {C, C, N * C, N * C}, {ACC_F, ACC_F, IN_F, IN_F}, 0, 1e-3},
        {"attention_forward", &pl_cl_attention_forward, de, {0}, false, 3,
         {B * T * CE, B * NH * T * T, B * T * 3 * CE}, {OUT_F, OUT_F, IN_F}, 0, 1e-4},
        {"attention_backward", &pl_cl_attention_backward, de, {0}, false, 4,
         {B * T * 3 * CE, B * T * CE, B * T * 3 * CE, B * NH * T * T},
         {ACC_F, IN_F, IN_F, IN_P}, 0, 1e-3},
        {"adamw_update", &pl_cl_adamw_update, {0}, o, true, 4, {1000, 1000, 1000, 1000},
         {ACC_F, IN_F, ACC_F, IN_P}, 0, 1e-5},
        {"sgd_update", &pl_cl_sgd_update, {0}, o, true, 3, {1000, 1000, 1000},
         {ACC_F, IN_F, ACC_F}, 0, 1e-5},
    };
    int failures = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        failures += run_case(&cases[i], cpu, gpu);
    pl_runtime_free(rt);
    printf("%s: %d of %zu ops differ\n", failures ? "FAIL" : "OK", failures,
           sizeof cases / sizeof *cases);
    return failures ? 1 : 0;
}
