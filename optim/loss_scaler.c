/* Dynamic loss scaling (see loss_scaler.h). A chunk's padding is never
 * written, so it stays zero and never reads as an overflow. */
#include <stdlib.h>
#include <string.h>

#include "optim/loss_scaler.h"
#ifdef STARPU_USE_CUDA
#include "ops/cuda/loss_scale.h"
#endif

double pl_grad_overflow_partial(const float *grad, int64_t n) {
    /* An all-ones exponent is inf or NaN. OR-ing the test over the chunk
     * (no early exit) keeps the loop branch-free and vectorisable: the
     * common case is a clean chunk, read to its end anyway. */
    uint32_t found = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &grad[i], sizeof bits);
        found |= (bits & 0x7f800000u) == 0x7f800000u;
    }
    return found ? 1.0 : 0.0;
}

double pl_grad_overflow_partial_half(const uint16_t *grad, int64_t n, bool bf16) {
    uint16_t exp = bf16 ? 0x7f80u : 0x7c00u;
    uint32_t found = 0;
    for (int64_t i = 0; i < n; i++) found |= (grad[i] & exp) == exp;
    return found ? 1.0 : 0.0;
}

void pl_loss_scaler_step(pl_loss_scaler_state *s, bool overflow, double min_scale,
                         double max_scale, double growth_factor, double backoff_factor,
                         int growth_interval, int hysteresis) {
    if (overflow) {
        s->hysteresis_step++;
        s->growth_step = 0;
        if (s->hysteresis_step >= hysteresis) {
            s->scale *= backoff_factor;
            if (s->scale < min_scale) s->scale = min_scale;
        }
    } else {
        s->growth_step++;
        if (s->growth_step >= growth_interval) {
            s->growth_step = 0;
            s->hysteresis_step = 0; /* reset only by growth (Colossal-AI) */
            s->scale *= growth_factor;
            if (s->scale > max_scale) s->scale = max_scale;
        }
    }
}

/* ------------------------------------------------------------ codelets */

#define DVEC(i) ((double *)STARPU_VECTOR_GET_PTR(buffers[i]))

static void grad_overflow_cpu(void *buffers[], void *cl_arg) {
    const pl_overflow_args *a = cl_arg;
    const void *grad = (const void *)STARPU_VECTOR_GET_PTR(buffers[0]);
    DVEC(1)[0] = a->half ? pl_grad_overflow_partial_half(grad, a->n, a->bf16)
                         : pl_grad_overflow_partial(grad, a->n);
}

static void overflow_combine_cpu(void *buffers[], void *cl_arg) {
    const pl_overflow_combine_args *a = cl_arg;
    double found = 0.0;
    for (int i = 0; i < a->n_partials; i++)
        if (DVEC(i)[0] != 0.0) found = 1.0;
    DVEC(a->n_partials)[0] = found;
    DVEC(a->n_partials)[1] = a->inv_scale;
}

#ifdef STARPU_USE_CUDA
static void grad_overflow_cuda(void *buffers[], void *cl_arg) {
    const pl_overflow_args *a = cl_arg;
    cudaStream_t s = starpu_cuda_get_local_stream();
    const void *grad = (const void *)STARPU_VECTOR_GET_PTR(buffers[0]);
    if (a->half) pl_cuda_grad_overflow_half(s, a->bf16, grad, a->n, DVEC(1));
    else pl_cuda_grad_overflow(s, grad, a->n, DVEC(1));
}
/* A few device doubles: copied to the host, ORed there, the verdict
 * copied back (as clip_combine does). Synchronous, so no CUDA_ASYNC. */
static void overflow_combine_cuda(void *buffers[], void *cl_arg) {
    const pl_overflow_combine_args *a = cl_arg;
    cudaStream_t s = starpu_cuda_get_local_stream();
    double found = 0.0;
    for (int i = 0; i < a->n_partials; i++) {
        double f = 0.0;
        cudaMemcpyAsync(&f, DVEC(i), sizeof f, cudaMemcpyDeviceToHost, s);
        cudaStreamSynchronize(s);
        if (f != 0.0) found = 1.0;
    }
    double out[2] = {found, a->inv_scale};
    cudaMemcpyAsync(DVEC(a->n_partials), out, sizeof out, cudaMemcpyHostToDevice, s);
    cudaStreamSynchronize(s);
}
#define OVERFLOW_CUDA .cuda_funcs = {grad_overflow_cuda}, .cuda_flags = {STARPU_CUDA_ASYNC},
#define COMBINE_CUDA .cuda_funcs = {overflow_combine_cuda},
#else
#define OVERFLOW_CUDA
#define COMBINE_CUDA
#endif

struct starpu_codelet pl_cl_grad_overflow = {
    .name = "grad_overflow",
    .cpu_funcs = {grad_overflow_cpu},
    OVERFLOW_CUDA
    .nbuffers = 2,
    .modes = {STARPU_R, STARPU_W},
};
struct starpu_codelet pl_cl_overflow_combine = {
    .name = "overflow_combine",
    .cpu_funcs = {overflow_combine_cpu},
    COMBINE_CUDA
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
};
