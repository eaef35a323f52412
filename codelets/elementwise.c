/* StarPU codelets of the elementwise ops (ReLU, GELU, residual add). */
#include "codelets/codelets.h"
#include "codelets/cuda/codelets_cuda.h"
#include "codelets/cpu/kernels.h"

#define VEC(i) PL_FBUF(buffers, cl_arg, i)
#define NUMEL(a) ((a)->N * (a)->C)

static void relu_forward_cpu(void *buffers[], void *cl_arg) {
    relu_forward(VEC(0), VEC(1), NUMEL((pl_dims_args *)cl_arg));
}
static void relu_backward_cpu(void *buffers[], void *cl_arg) {
    const pl_dims_args *a = cl_arg;
    relu_backward(VEC(0), VEC(1), VEC(2), NUMEL(a), a->accumulate);
}
static void gelu_forward_cpu(void *buffers[], void *cl_arg) {
    gelu_forward(VEC(0), VEC(1), NUMEL((pl_dims_args *)cl_arg));
}
static void gelu_backward_cpu(void *buffers[], void *cl_arg) {
    const pl_dims_args *a = cl_arg;
    gelu_backward(VEC(0), VEC(1), VEC(2), NUMEL(a), a->accumulate);
}
static void add_forward_cpu(void *buffers[], void *cl_arg) {
    add_forward(VEC(0), VEC(1), VEC(2), NUMEL((pl_dims_args *)cl_arg));
}
static void add_backward_cpu(void *buffers[], void *cl_arg) {
    const pl_dims_args *a = cl_arg;
    add_backward(VEC(0), VEC(1), NUMEL(a), a->accumulate);
}

#define UNARY_FORWARD(op)                                                   \
    struct starpu_codelet pl_cl_##op##_forward = {                          \
        .name = #op "_forward", .cpu_funcs = {op##_forward_cpu},            \
        PL_CUDA_FUNCS(pl_##op##_forward_cuda) PL_PERF_MODEL(#op "_forward") \
        .nbuffers = 2, .modes = {STARPU_W, STARPU_R}}
#define UNARY_BACKWARD(op)                                                  \
    struct starpu_codelet pl_cl_##op##_backward = {                         \
        .name = #op "_backward", .cpu_funcs = {op##_backward_cpu},          \
        PL_CUDA_FUNCS(pl_##op##_backward_cuda) PL_PERF_MODEL(#op "_backward") \
        .nbuffers = STARPU_VARIABLE_NBUFFERS,                               \
        .modes = {STARPU_RW, STARPU_R, STARPU_R}}

UNARY_FORWARD(relu);
UNARY_BACKWARD(relu);
UNARY_FORWARD(gelu);
UNARY_BACKWARD(gelu);

struct starpu_codelet pl_cl_add_forward = {
    .name = "add_forward",
    .cpu_funcs = {add_forward_cpu},
    PL_CUDA_FUNCS(pl_add_forward_cuda) PL_PERF_MODEL("add_forward")
    .nbuffers = 3,
    .modes = {STARPU_W, STARPU_R, STARPU_R},
};
struct starpu_codelet pl_cl_add_backward = {
    .name = "add_backward",
    .cpu_funcs = {add_backward_cpu},
    PL_CUDA_FUNCS(pl_add_backward_cuda) PL_PERF_MODEL("add_backward")
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .modes = {STARPU_RW, STARPU_R},
};
