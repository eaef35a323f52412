/* StarPU codelets of the transformer ops: embedding, LayerNorm, causal
 * attention and the bias-free (tied) matmul. */
#include "codelets/codelets.h"
#include "codelets/cuda/codelets_cuda.h"
#include "codelets/cpu/kernels.h"

#define VEC(i) PL_FBUF(buffers, cl_arg, i)
#define IVEC(i) ((const int32_t *)STARPU_VECTOR_GET_PTR(buffers[i]))

static void embedding_forward_cpu(void *buffers[], void *cl_arg) {
    const pl_dims_args *a = cl_arg;
    int64_t bad = 0;
    embedding_forward(VEC(0), IVEC(1), VEC(2), VEC(3), a->B, a->T, a->C, a->V,
                      &bad);
    double *err = (double *)STARPU_VECTOR_GET_PTR(buffers[4]);
    err[0] = 0.0;
    err[1] = (double)bad;
}
static void embedding_backward_weight_cpu(void *buffers[], void *cl_arg) {
    const pl_dims_args *a = cl_arg;
    embedding_backward_weight(VEC(0), VEC(1), VEC(2), IVEC(3), a->B, a->T, a->C,
                              a->V, a->accumulate, a->accumulate2);
}
static void layernorm_forward_cpu(void *buffers[], void *cl_arg) {
    const pl_dims_args *a = cl_arg;
    layernorm_forward(VEC(0), VEC(1), VEC(2), VEC(3), a->N, a->C);
}
static void layernorm_backward_input_cpu(void *buffers[], void *cl_arg) {
    const pl_dims_args *a = cl_arg;
    layernorm_backward_input(VEC(0), VEC(1), VEC(2), VEC(3), a->N, a->C,
                             a->accumulate);
}
static void layernorm_backward_weight_cpu(void *buffers[], void *cl_arg) {
    const pl_dims_args *a = cl_arg;
    layernorm_backward_weight(VEC(0), VEC(1), VEC(2), VEC(3), a->N, a->C,
                              a->accumulate);
}
static void attention_forward_cpu(void *buffers[], void *cl_arg) {
    const pl_dims_args *a = cl_arg;
    attention_forward(VEC(0), VEC(1), VEC(2), a->B, a->T, a->C, a->NH);
}
static void attention_backward_cpu(void *buffers[], void *cl_arg) {
    const pl_dims_args *a = cl_arg;
    attention_backward(VEC(0), VEC(1), VEC(2), VEC(3), a->B, a->T, a->C, a->NH,
                       a->accumulate);
}
static void matmul_forward_cpu(void *buffers[], void *cl_arg) {
    const pl_dims_args *a = cl_arg;
    matmul_forward(VEC(0), VEC(1), VEC(2), a->N, a->C, a->OC);
}
static void matmul_backward_weight_cpu(void *buffers[], void *cl_arg) {
    const pl_dims_args *a = cl_arg;
    matmul_backward_weight(VEC(0), VEC(1), VEC(2), a->N, a->C, a->OC,
                           a->accumulate);
}

struct starpu_codelet pl_cl_embedding_forward = {
    .name = "embedding_forward",
    .cpu_funcs = {embedding_forward_cpu},
    PL_CUDA_FUNCS(pl_embedding_forward_cuda) PL_PERF_MODEL("embedding_forward")
    .nbuffers = 5,
    .modes = {STARPU_W, STARPU_R, STARPU_R, STARPU_R, STARPU_W},
};
struct starpu_codelet pl_cl_embedding_backward_weight = {
    .name = "embedding_backward_weight",
    .cpu_funcs = {embedding_backward_weight_cpu},
    PL_CUDA_FUNCS(pl_embedding_backward_weight_cuda) PL_PERF_MODEL("embedding_backward_weight")
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .modes = {STARPU_RW, STARPU_RW, STARPU_R, STARPU_R},
};
struct starpu_codelet pl_cl_layernorm_forward = {
    .name = "layernorm_forward",
    .cpu_funcs = {layernorm_forward_cpu},
    PL_CUDA_FUNCS(pl_layernorm_forward_cuda) PL_PERF_MODEL("layernorm_forward")
    .nbuffers = 4,
    .modes = {STARPU_W, STARPU_R, STARPU_R, STARPU_R},
};
struct starpu_codelet pl_cl_layernorm_backward_input = {
    .name = "layernorm_backward_input",
    .cpu_funcs = {layernorm_backward_input_cpu},
    PL_CUDA_FUNCS(pl_layernorm_backward_input_cuda) PL_PERF_MODEL("layernorm_backward_input")
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .modes = {STARPU_RW, STARPU_R, STARPU_R, STARPU_R},
};
struct starpu_codelet pl_cl_layernorm_backward_weight = {
    .name = "layernorm_backward_weight",
    .cpu_funcs = {layernorm_backward_weight_cpu},
    PL_CUDA_FUNCS(pl_layernorm_backward_weight_cuda) PL_PERF_MODEL("layernorm_backward_weight")
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .modes = {STARPU_RW, STARPU_RW, STARPU_R, STARPU_R},
};
struct starpu_codelet pl_cl_attention_forward = {
    .name = "attention_forward",
    .cpu_funcs = {attention_forward_cpu},
    PL_CUDA_FUNCS(pl_attention_forward_cuda) PL_PERF_MODEL("attention_forward")
    .nbuffers = 3,
    .modes = {STARPU_W, STARPU_W, STARPU_R},
};
struct starpu_codelet pl_cl_attention_backward = {
    .name = "attention_backward",
    .cpu_funcs = {attention_backward_cpu},
    PL_CUDA_FUNCS(pl_attention_backward_cuda) PL_PERF_MODEL("attention_backward")
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .modes = {STARPU_RW, STARPU_R, STARPU_R, STARPU_R},
};
struct starpu_codelet pl_cl_matmul_forward = {
    .name = "matmul_forward",
    .cpu_funcs = {matmul_forward_cpu},
    PL_CUDA_FUNCS(pl_matmul_forward_cuda) PL_PERF_MODEL("matmul_forward")
    .nbuffers = 3,
    .modes = {STARPU_W, STARPU_R, STARPU_R},
};
struct starpu_codelet pl_cl_matmul_backward_weight = {
    .name = "matmul_backward_weight",
    .cpu_funcs = {matmul_backward_weight_cpu},
    PL_CUDA_FUNCS(pl_matmul_backward_weight_cuda) PL_PERF_MODEL("matmul_backward_weight")
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .modes = {STARPU_RW, STARPU_R, STARPU_R},
};
