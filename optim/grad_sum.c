/* g (+)= s, on CPU workers or on the GPU holding the gradients, fp32 or
 * 16-bit (added in fp32, rounded once). */
#include "optim/grad_sum.h"

#include <string.h>

#include "util/half.h"
#ifdef STARPU_USE_CUDA
#include "ops/cuda/kernels.h"
#endif

static void grad_sum_cpu(void *buffers[], void *cl_arg) {
    const pl_grad_sum_args *a = cl_arg;
    char *base = (char *)STARPU_VECTOR_GET_PTR(buffers[0]) + (size_t)a->offset * a->elem;
    const void *side = (const void *)STARPU_VECTOR_GET_PTR(buffers[1]);
    if (a->copy) {
        memcpy(base, side, (size_t)a->n * a->elem);
        return;
    }
    if (a->elem == 4) {
        float *g = (float *)base;
        const float *s = side;
        for (int64_t i = 0; i < a->n; i++) g[i] += s[i];
        return;
    }
    /* 16 bits: added in fp32 and rounded once, as the kernels' own
     * accumulation into a 16-bit gradient is. */
    uint16_t *g = (uint16_t *)base;
    const uint16_t *s = side;
    for (int64_t i = 0; i < a->n; i++) {
        g[i] = pl_half_round(a->bf16,
                             pl_half_widen(a->bf16, g[i]) + pl_half_widen(a->bf16, s[i]));
    }
}

#ifdef STARPU_USE_CUDA
/* The add-backward kernel is exactly g (+)= s in fp32. */
static void grad_sum_cuda(void *buffers[], void *cl_arg) {
    const pl_grad_sum_args *a = cl_arg;
    cudaStream_t s = starpu_cuda_get_local_stream();
    if (a->elem == 4)
        pl_cuda_add_backward(s, (float *)STARPU_VECTOR_GET_PTR(buffers[0]) + a->offset,
                             (const float *)STARPU_VECTOR_GET_PTR(buffers[1]), a->n, !a->copy);
    else
        pl_cuda_half_add(s, a->bf16, (uint16_t *)STARPU_VECTOR_GET_PTR(buffers[0]) + a->offset,
                         (const uint16_t *)STARPU_VECTOR_GET_PTR(buffers[1]), a->n, !a->copy);
}
#endif

struct starpu_codelet pl_cl_grad_sum = {
    .cpu_funcs = {grad_sum_cpu},
#ifdef STARPU_USE_CUDA
    .cuda_funcs = {grad_sum_cuda},
    .cuda_flags = {STARPU_CUDA_ASYNC},
    .model = &(struct starpu_perfmodel){.type = STARPU_HISTORY_BASED,
                                        .symbol = "pleiades_grad_sum"},
#endif
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "grad_sum",
};

static void grad_zero_cpu(void *buffers[], void *cl_arg) {
    const pl_grad_zero_args *a = cl_arg;
    char *base = (char *)STARPU_VECTOR_GET_PTR(buffers[0]);
    size_t elem = STARPU_VECTOR_GET_ELEMSIZE(buffers[0]);
    for (int i = 0; i < a->n; i++)
        memset(base + (size_t)a->lo[i] * elem, 0, (size_t)(a->hi[i] - a->lo[i]) * elem);
}

#ifdef STARPU_USE_CUDA
static void grad_zero_cuda(void *buffers[], void *cl_arg) {
    const pl_grad_zero_args *a = cl_arg;
    char *base = (char *)STARPU_VECTOR_GET_PTR(buffers[0]);
    size_t elem = STARPU_VECTOR_GET_ELEMSIZE(buffers[0]);
    for (int i = 0; i < a->n; i++)
        cudaMemsetAsync(base + (size_t)a->lo[i] * elem, 0,
                        (size_t)(a->hi[i] - a->lo[i]) * elem, starpu_cuda_get_local_stream());
}
#endif

struct starpu_codelet pl_cl_grad_zero = {
    .cpu_funcs = {grad_zero_cpu},
#ifdef STARPU_USE_CUDA
    .cuda_funcs = {grad_zero_cuda},
    .cuda_flags = {STARPU_CUDA_ASYNC},
#endif
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "grad_zero",
};
