/* StarPU codelets of the linear layer. */
#include "codelets/codelets.h"
#include "codelets/cuda/codelets_cuda.h"
#include "codelets/cpu/kernels.h"

#define VEC(i) PL_FBUF(buffers, cl_arg, i)

static void linear_forward_cpu(void *buffers[], void *cl_arg) {
    const pl_dims_args *a = cl_arg;
    linear_forward(VEC(0), VEC(1), VEC(2), VEC(3), a->N, a->C, a->OC);
}

static void linear_backward_input_cpu(void *buffers[], void *cl_arg) {
    const pl_dims_args *a = cl_arg;
    linear_backward_input(VEC(0), VEC(1), VEC(2), a->N, a->C, a->OC,
                          a->accumulate);
}

static void linear_backward_weight_cpu(void *buffers[], void *cl_arg) {
    const pl_dims_args *a = cl_arg;
    linear_backward_weight(VEC(0), VEC(1), VEC(2), VEC(3), a->N, a->C, a->OC,
                           a->accumulate);
}

struct starpu_codelet pl_cl_linear_forward = {
    .name = "linear_forward",
    .cpu_funcs = {linear_forward_cpu},
    PL_CUDA_FUNCS(pl_linear_forward_cuda) PL_PERF_MODEL("linear_forward")
    .nbuffers = 4,
    .modes = {STARPU_W, STARPU_R, STARPU_R, STARPU_R},
};

struct starpu_codelet pl_cl_linear_backward_input = {
    .name = "linear_backward_input",
    .cpu_funcs = {linear_backward_input_cpu},
    PL_CUDA_FUNCS(pl_linear_backward_input_cuda) PL_PERF_MODEL("linear_backward_input")
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .modes = {STARPU_RW, STARPU_R, STARPU_R},
};

struct starpu_codelet pl_cl_linear_backward_weight = {
    .name = "linear_backward_weight",
    .cpu_funcs = {linear_backward_weight_cpu},
    PL_CUDA_FUNCS(pl_linear_backward_weight_cuda) PL_PERF_MODEL("linear_backward_weight")
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .modes = {STARPU_RW, STARPU_RW, STARPU_R, STARPU_R},
};
