/* StarPU codelets of the optimizer updates; each task updates one whole
 * chunk (parameters, gradients and states of many tensors at once). */
#include "codelets/codelets.h"
#include "codelets/cuda/codelets_cuda.h"
#include "codelets/cpu/kernels.h"

#define VEC(i) ((float *)STARPU_VECTOR_GET_PTR(buffers[i]))

static void adamw_update_cpu(void *buffers[], void *cl_arg) {
    const pl_optimizer_args *a = cl_arg;
    adamw_update(VEC(0), VEC(1), VEC(2), VEC(3), a->n, a->lr, a->beta1,
                 a->beta2, a->eps, a->weight_decay, a->t);
}

static void sgd_update_cpu(void *buffers[], void *cl_arg) {
    const pl_optimizer_args *a = cl_arg;
    sgd_update(VEC(0), VEC(1), VEC(2), a->n, a->lr, a->momentum,
               a->weight_decay, a->t);
}

struct starpu_codelet pl_cl_adamw_update = {
    .name = "adamw_update",
    .cpu_funcs = {adamw_update_cpu},
    PL_CUDA_FUNCS(pl_adamw_update_cuda) PL_PERF_MODEL("adamw_update")
    .nbuffers = 4,
    .modes = {STARPU_RW, STARPU_R, STARPU_RW, STARPU_RW},
};
struct starpu_codelet pl_cl_sgd_update = {
    .name = "sgd_update",
    .cpu_funcs = {sgd_update_cpu},
    PL_CUDA_FUNCS(pl_sgd_update_cuda) PL_PERF_MODEL("sgd_update")
    .nbuffers = 3,
    .modes = {STARPU_RW, STARPU_R, STARPU_RW},
};
