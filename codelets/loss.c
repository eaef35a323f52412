/* StarPU codelets of the loss and metrics. Their scalar outputs are small
 * double vectors, one per tile, summed by the engine in tile order so the
 * result does not depend on which worker finished first. */
#include "codelets/codelets.h"
#include "codelets/cuda/codelets_cuda.h"
#include "codelets/cpu/kernels.h"

#define VEC(i) PL_FBUF(buffers, cl_arg, i)
#define DVEC(i) ((double *)STARPU_VECTOR_GET_PTR(buffers[i]))
#define IVEC(i) ((const int32_t *)STARPU_VECTOR_GET_PTR(buffers[i]))

static void cross_entropy_forward_cpu(void *buffers[], void *cl_arg) {
    const pl_dims_args *a = cl_arg;
    int64_t bad = 0;
    double *sum = DVEC(0);
    sum[0] = cross_entropy_forward(NULL, VEC(1), IVEC(2), a->N, a->OC, 0.0f, &bad);
    sum[1] = (double)bad;
}

static void cross_entropy_loss_cpu(void *buffers[], void *cl_arg) {
    const pl_dims_args *a = cl_arg;
    int64_t bad = 0;
    double *sum = DVEC(0);
    sum[0] = cross_entropy_forward(VEC(1), VEC(2), IVEC(3), a->N, a->OC,
                                   a->scale, &bad);
    sum[1] = (double)bad;
}

static void accuracy_forward_cpu(void *buffers[], void *cl_arg) {
    const pl_dims_args *a = cl_arg;
    double *count = DVEC(0);
    count[0] = (double)accuracy_forward(VEC(1), IVEC(2), a->N, a->OC);
    count[1] = 0.0;
}

static void mean_forward_cpu(void *buffers[], void *cl_arg) {
    const pl_dims_args *a = cl_arg;
    double *sum = DVEC(0);
    sum[0] = mean_forward(VEC(1), a->N * a->C);
    sum[1] = 0.0;
}

static void mean_backward_cpu(void *buffers[], void *cl_arg) {
    const pl_dims_args *a = cl_arg;
    mean_backward(VEC(0), a->N * a->C, a->scale, a->accumulate);
}

struct starpu_codelet pl_cl_cross_entropy_forward = {
    .name = "cross_entropy_forward",
    .cpu_funcs = {cross_entropy_forward_cpu},
    PL_CUDA_FUNCS(pl_cross_entropy_forward_cuda) PL_PERF_MODEL("cross_entropy_forward")
    .nbuffers = 3,
    .modes = {STARPU_W, STARPU_R, STARPU_R},
};
struct starpu_codelet pl_cl_cross_entropy_loss = {
    .name = "cross_entropy_loss",
    .cpu_funcs = {cross_entropy_loss_cpu},
    PL_CUDA_FUNCS(pl_cross_entropy_loss_cuda) PL_PERF_MODEL("cross_entropy_loss")
    .nbuffers = 4,
    .modes = {STARPU_W, STARPU_W, STARPU_R, STARPU_R},
};
struct starpu_codelet pl_cl_accuracy_forward = {
    .name = "accuracy_forward",
    .cpu_funcs = {accuracy_forward_cpu},
    PL_CUDA_FUNCS(pl_accuracy_forward_cuda) PL_PERF_MODEL("accuracy_forward")
    .nbuffers = 3,
    .modes = {STARPU_W, STARPU_R, STARPU_R},
};
struct starpu_codelet pl_cl_mean_forward = {
    .name = "mean_forward",
    .cpu_funcs = {mean_forward_cpu},
    PL_CUDA_FUNCS(pl_mean_forward_cuda) PL_PERF_MODEL("mean_forward")
    .nbuffers = 2,
    .modes = {STARPU_W, STARPU_R},
};
struct starpu_codelet pl_cl_mean_backward = {
    .name = "mean_backward",
    .cpu_funcs = {mean_backward_cpu},
    PL_CUDA_FUNCS(pl_mean_backward_cuda) PL_PERF_MODEL("mean_backward")
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .modes = {STARPU_RW},
};
