/* Gradient clipping by global norm (see clip.h). The partial of a chunk
 * covers its padding too, which is zero: padding gradients are never
 * written. */
#include <math.h>
#include <stdlib.h>

#include "optim/clip.h"
#include "util/half.h"
#ifdef STARPU_USE_CUDA
#include "ops/cuda/clip.h"
#endif

double pl_grad_norm_partial(const float *grad, int64_t n, bool inf) {
    double r = 0.0;
    if (inf) {
        for (int64_t i = 0; i < n; i++) {
            double a = fabs((double)grad[i]);
            /* NaN propagates (torch's norm is NaN then too) */
            if (a > r || a != a) r = a;
        }
    } else {
        for (int64_t i = 0; i < n; i++) r += (double)grad[i] * grad[i];
    }
    return r;
}

double pl_grad_norm_partial_half(const uint16_t *grad, int64_t n, bool inf, bool bf16) {
    double r = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double g = pl_half_widen(bf16, grad[i]);
        if (!inf) r += g * g;
        else if (fabs(g) > r || g != g) r = fabs(g);
    }
    return r;
}

void pl_clip_combine(const double *partials, int n, bool inf, float max_norm,
                     double out[2]) {
    double total = 0.0;
    for (int i = 0; i < n; i++) {
        if (inf) {
            if (partials[i] > total || partials[i] != partials[i]) total = partials[i];
        } else {
            total += partials[i];
        }
    }
    float norm = (float)(inf ? total : sqrt(total));
    /* torch: clip_coef = max_norm / (total_norm + 1e-6), clamped to 1 */
    float coef = max_norm / (norm + 1e-6f);
    out[0] = norm;
    out[1] = coef < 1.0f ? coef : 1.0f; /* NaN stays NaN, as in torch */
}

/* ------------------------------------------------------------ codelets */

#define DVEC(i) ((double *)STARPU_VECTOR_GET_PTR(buffers[i]))

static void grad_norm_partial_cpu(void *buffers[], void *cl_arg) {
    const pl_grad_norm_args *a = cl_arg;
    const void *grad = (const void *)STARPU_VECTOR_GET_PTR(buffers[0]);
    DVEC(1)[0] = a->half ? pl_grad_norm_partial_half(grad, a->n, a->inf, a->bf16)
                         : pl_grad_norm_partial(grad, a->n, a->inf);
}

/* What a partial of scaled gradients is multiplied by to be the partial
 * of unscaled ones: Σ g² scales by the square. Exact for power-of-two
 * scales, so the norm is then bitwise the unscaled run's. */
static double unscale_partial(const pl_clip_args *a) {
    return a->inf ? a->inv_scale : a->inv_scale * a->inv_scale;
}

static void clip_combine_cpu(void *buffers[], void *cl_arg) {
    const pl_clip_args *a = cl_arg;
    /* The partials are separate buffers: gather them in chunk order. */
    double local[64] = {0}, *p = a->n_partials <= 64 ? local : malloc(a->n_partials * sizeof *p);
    if (!p) { /* no memory: a NaN norm makes the step's output visibly wrong */
        DVEC(a->n_partials)[0] = DVEC(a->n_partials)[1] = NAN;
        return;
    }
    for (int i = 0; i < a->n_partials; i++) p[i] = DVEC(i)[0] * unscale_partial(a);
    pl_clip_combine(p, a->n_partials, a->inf, a->max_norm, DVEC(a->n_partials));
    DVEC(a->n_partials)[1] *= a->inv_scale;
    if (p != local) free(p);
}

#ifdef STARPU_USE_CUDA
static void grad_norm_partial_cuda(void *buffers[], void *cl_arg) {
    const pl_grad_norm_args *a = cl_arg;
    cudaStream_t s = starpu_cuda_get_local_stream();
    const void *grad = (const void *)STARPU_VECTOR_GET_PTR(buffers[0]);
    if (a->half) pl_cuda_grad_norm_partial_half(s, a->bf16, grad, a->n, a->inf, DVEC(1));
    else pl_cuda_grad_norm_partial(s, grad, a->n, a->inf, DVEC(1));
}
/* A handful of flops on a few device doubles: copied to the host,
 * combined there by the CPU code above (bitwise the CPU result), and the
 * two results copied back. Synchronous, so no CUDA_ASYNC flag. */
static void clip_combine_cuda(void *buffers[], void *cl_arg) {
    const pl_clip_args *a = cl_arg;
    cudaStream_t s = starpu_cuda_get_local_stream();
    double local[64] = {0}, *p = a->n_partials <= 64 ? local : malloc(a->n_partials * sizeof *p);
    double out[2] = {NAN, NAN};
    if (p) {
        for (int i = 0; i < a->n_partials; i++)
            cudaMemcpyAsync(&p[i], DVEC(i), sizeof(double), cudaMemcpyDeviceToHost, s);
        cudaStreamSynchronize(s);
        for (int i = 0; i < a->n_partials; i++) p[i] *= unscale_partial(a);
        pl_clip_combine(p, a->n_partials, a->inf, a->max_norm, out);
        out[1] *= a->inv_scale;
    }
    cudaMemcpyAsync(DVEC(a->n_partials), out, sizeof out, cudaMemcpyHostToDevice, s);
    cudaStreamSynchronize(s);
    if (p != local) free(p);
}
#define GRAD_NORM_CUDA .cuda_funcs = {grad_norm_partial_cuda}, .cuda_flags = {STARPU_CUDA_ASYNC},
#define COMBINE_CUDA .cuda_funcs = {clip_combine_cuda},
#else
#define GRAD_NORM_CUDA
#define COMBINE_CUDA
#endif

struct starpu_codelet pl_cl_grad_norm_partial = {
    .name = "grad_norm_partial",
    .cpu_funcs = {grad_norm_partial_cpu},
    GRAD_NORM_CUDA
    .nbuffers = 2,
    .modes = {STARPU_R, STARPU_W},
};
struct starpu_codelet pl_cl_clip_combine = {
    .name = "clip_combine",
    .cpu_funcs = {clip_combine_cpu},
    COMBINE_CUDA
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
};
