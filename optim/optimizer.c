/* Optimizer updates over whole chunks: a chunk is one contiguous buffer, so
 * these are single streaming loops the compiler vectorises. The codelets
 * below run them (or their CUDA twins) one task per chunk. */
#include <math.h>

#include "optim/optimizer.h"
#include "util/half.h"
#ifdef STARPU_USE_CUDA
#include "ops/cuda/kernels.h"
#endif

void adamw_update(float *param, const float *grad, float *m, float *v,
                  int64_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, int64_t t, float grad_scale) {
    /* torch.optim.AdamW (non-amsgrad): decay first, then the Adam step with
     * bias-corrected moments: p -= lr * m̂ / (sqrt(v̂) + eps). */
    /* The scalars are formed in double, as PyTorch does in Python. */
    double bc1 = 1.0 - pow(beta1, (double)t);
    double bc2 = 1.0 - pow(beta2, (double)t);
    float step = (float)(lr / bc1);
    float bc2_sqrt = (float)sqrt(bc2);
    float decay = 1.0f - lr * weight_decay;
    for (int64_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale; /* exact when 1 (no clipping) */
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        param[i] = param[i] * decay - step * mi / denom;
    }
}

void sgd_update(float *param, const float *grad, float *buf, int64_t n,
                float lr, float momentum, float weight_decay, int64_t t, float grad_scale) {
    for (int64_t i = 0; i < n; i++) {
        float d = grad[i] * grad_scale + weight_decay * param[i];
        if (momentum != 0.0f) {
            d = t == 1 ? d : momentum * buf[i] + d;
            buf[i] = d;
        }
        param[i] -= lr * d;
    }
}

/* 16-bit: blocks small enough for the stack, large enough that the
 * per-call scalars (AdamW's bias corrections) cost nothing. */
#define HALF_BLOCK 1024

/* The fp32 parameters of a block: the master weights, or the widened
 * 16-bit parameters in `tmp`. */
static float *half_block_params(const uint16_t *param, float *master, float *tmp,
                                int64_t n, bool bf16) {
    if (master) return master;
    pl_half_to_float(bf16, param, tmp, n);
    return tmp;
}

void adamw_update_half(uint16_t *param, const uint16_t *grad, float *master, float *m,
                       float *v, int64_t n, float lr, float beta1, float beta2, float eps,
                       float weight_decay, int64_t t, float grad_scale, bool bf16) {
    float g[HALF_BLOCK], tmp[HALF_BLOCK];
    for (int64_t i = 0; i < n; i += HALF_BLOCK) {
        int64_t k = n - i < HALF_BLOCK ? n - i : HALF_BLOCK;
        pl_half_to_float(bf16, grad + i, g, k);
        float *p = half_block_params(param + i, master ? master + i : NULL, tmp, k, bf16);
        adamw_update(p, g, m + i, v + i, k, lr, beta1, beta2, eps, weight_decay, t,
                     grad_scale);
        pl_half_from_float(bf16, p, param + i, k);
    }
}

void sgd_update_half(uint16_t *param, const uint16_t *grad, float *master, float *buf,
                     int64_t n, float lr, float momentum, float weight_decay, int64_t t,
                     float grad_scale, bool bf16) {
    float g[HALF_BLOCK], tmp[HALF_BLOCK];
    for (int64_t i = 0; i < n; i += HALF_BLOCK) {
        int64_t k = n - i < HALF_BLOCK ? n - i : HALF_BLOCK;
        pl_half_to_float(bf16, grad + i, g, k);
        float *p = half_block_params(param + i, master ? master + i : NULL, tmp, k, bf16);
        sgd_update(p, g, buf + i, k, lr, momentum, weight_decay, t, grad_scale);
        pl_half_from_float(bf16, p, param + i, k);
    }
}

/* ------------------------------------------------------------ codelets */

#define VEC(i) ((float *)STARPU_VECTOR_GET_PTR(buffers[i]))

/* With clipping, the last buffer is the clip result {norm, coefficient}
 * (clip.h) and gradients are scaled by the coefficient as they are read. */
static float clip_coef(void *buffers[], const pl_optimizer_args *a, int clip_buffer) {
    return a->clip ? (float)((const double *)STARPU_VECTOR_GET_PTR(buffers[clip_buffer]))[1]
                   : 1.0f;
}

static void adamw_update_cpu(void *buffers[], void *cl_arg) {
    const pl_optimizer_args *a = cl_arg;
    adamw_update(VEC(0) + a->param_offset, VEC(1) + a->grad_offset, VEC(2), VEC(3), a->n,
                 a->lr, a->beta1,
                 a->beta2, a->eps, a->weight_decay, a->t, clip_coef(buffers, a, 4));
}

static void sgd_update_cpu(void *buffers[], void *cl_arg) {
    const pl_optimizer_args *a = cl_arg;
    sgd_update(VEC(0) + a->param_offset, VEC(1) + a->grad_offset, VEC(2), a->n, a->lr,
               a->momentum,
               a->weight_decay, a->t, clip_coef(buffers, a, 3));
}

#define HVEC(i) ((uint16_t *)STARPU_VECTOR_GET_PTR(buffers[i]))

/* 16-bit: the master weights follow the states and the clip result; like
 * the states, they hold the n elements updated (ZeRO shards them too). */
static float *master_of(void *buffers[], const pl_optimizer_args *a, int first_free) {
    return a->master ? VEC(first_free + a->clip) : NULL;
}

static void adamw_update_half_cpu(void *buffers[], void *cl_arg) {
    const pl_optimizer_args *a = cl_arg;
    adamw_update_half(HVEC(0) + a->param_offset, HVEC(1) + a->grad_offset,
                      master_of(buffers, a, 4), VEC(2), VEC(3), a->n, a->lr, a->beta1,
                      a->beta2, a->eps, a->weight_decay, a->t, clip_coef(buffers, a, 4),
                      a->bf16);
}

static void sgd_update_half_cpu(void *buffers[], void *cl_arg) {
    const pl_optimizer_args *a = cl_arg;
    sgd_update_half(HVEC(0) + a->param_offset, HVEC(1) + a->grad_offset,
                    master_of(buffers, a, 3), VEC(2), a->n, a->lr, a->momentum,
                    a->weight_decay, a->t, clip_coef(buffers, a, 3), a->bf16);
}

#ifdef STARPU_USE_CUDA
/* The device clip result, or NULL without clipping. */
#define CLIP(i) (a->clip ? (const double *)STARPU_VECTOR_GET_PTR(buffers[i]) : NULL)
static void adamw_update_half_cuda(void *buffers[], void *cl_arg) {
    const pl_optimizer_args *a = cl_arg;
    pl_cuda_adamw_half(starpu_cuda_get_local_stream(), a->bf16, HVEC(0) + a->param_offset,
                       HVEC(1) + a->grad_offset, master_of(buffers, a, 4), VEC(2), VEC(3),
                       a->n, a->lr, a->beta1, a->beta2, a->eps, a->weight_decay, a->t,
                       CLIP(4));
}
static void sgd_update_half_cuda(void *buffers[], void *cl_arg) {
    const pl_optimizer_args *a = cl_arg;
    pl_cuda_sgd_half(starpu_cuda_get_local_stream(), a->bf16, HVEC(0) + a->param_offset,
                     HVEC(1) + a->grad_offset, master_of(buffers, a, 3), VEC(2), a->n, a->lr,
                     a->momentum, a->weight_decay, a->t, CLIP(3));
}
#define HALF_CUDA_FUNCS(f) .cuda_funcs = {f}, .cuda_flags = {STARPU_CUDA_ASYNC},
#else
#define HALF_CUDA_FUNCS(f)
#endif

struct starpu_codelet pl_cl_adamw_update_half = {
    .name = "adamw_update",
    .cpu_funcs = {adamw_update_half_cpu},
    HALF_CUDA_FUNCS(adamw_update_half_cuda)
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
};
struct starpu_codelet pl_cl_sgd_update_half = {
    .name = "sgd_update",
    .cpu_funcs = {sgd_update_half_cpu},
    HALF_CUDA_FUNCS(sgd_update_half_cuda)
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
};

#ifdef STARPU_USE_CUDA
static void adamw_update_cuda(void *buffers[], void *cl_arg) {
    const pl_optimizer_args *a = cl_arg;
    pl_cuda_adamw(starpu_cuda_get_local_stream(), VEC(0) + a->param_offset,
                  VEC(1) + a->grad_offset, VEC(2), VEC(3), a->n,
                  a->lr, a->beta1, a->beta2, a->eps, a->weight_decay, a->t, CLIP(4));
}
static void sgd_update_cuda(void *buffers[], void *cl_arg) {
    const pl_optimizer_args *a = cl_arg;
    pl_cuda_sgd(starpu_cuda_get_local_stream(), VEC(0) + a->param_offset,
                VEC(1) + a->grad_offset, VEC(2), a->n, a->lr,
                a->momentum, a->weight_decay, a->t, CLIP(3));
}
#define CUDA_FUNCS(f)                                                         \
    .cuda_funcs = {f}, .cuda_flags = {STARPU_CUDA_ASYNC},                     \
    .model = &(struct starpu_perfmodel){.type = STARPU_HISTORY_BASED,          \
                                         .symbol = "pleiades_" #f},
#else
#define CUDA_FUNCS(f)
#endif

struct starpu_codelet pl_cl_adamw_update = {
    .name = "adamw_update",
    .cpu_funcs = {adamw_update_cpu},
    CUDA_FUNCS(adamw_update_cuda)
    .nbuffers = 4,
    .modes = {STARPU_RW, STARPU_R, STARPU_RW, STARPU_RW},
};
struct starpu_codelet pl_cl_sgd_update = {
    .name = "sgd_update",
    .cpu_funcs = {sgd_update_cpu},
    CUDA_FUNCS(sgd_update_cuda)
    .nbuffers = 3,
    .modes = {STARPU_RW, STARPU_R, STARPU_RW},
};
/* The same kernels reading the clip result as one more buffer. */
struct starpu_codelet pl_cl_adamw_update_clip = {
    .name = "adamw_update",
    .cpu_funcs = {adamw_update_cpu},
    CUDA_FUNCS(adamw_update_cuda)
    .nbuffers = 5,
    .modes = {STARPU_RW, STARPU_R, STARPU_RW, STARPU_RW, STARPU_R},
};
struct starpu_codelet pl_cl_sgd_update_clip = {
    .name = "sgd_update",
    .cpu_funcs = {sgd_update_cpu},
    CUDA_FUNCS(sgd_update_cuda)
    .nbuffers = 4,
    .modes = {STARPU_RW, STARPU_R, STARPU_RW, STARPU_R},
};
