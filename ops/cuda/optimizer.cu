/* CUDA side of optim/optimizer.c: the AdamW and SGD updates of one chunk. */
#include <math.h>

#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.h"

/* clip: NULL, or the clip result {norm, coefficient} (optim/clip.h) in
 * device memory; gradients are multiplied by the coefficient as read. */
__global__ void adamw_kernel(float *param, const float *grad, float *m, float *v,
                             int64_t n, float lr, float beta1, float beta2, float eps,
                             float decay, float step, float bc2_sqrt, const double *clip) {
    float scale = clip ? (float)clip[1] : 1.0f;
    PL_GRID_STRIDE(i, n) {
        float g = grad[i] * scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        param[i] = param[i] * decay - step * mi / (sqrtf(vi) / bc2_sqrt + eps);
    }
}

__global__ void sgd_kernel(float *param, const float *grad, float *buf, int64_t n,
                           float lr, float momentum, float wd, int first,
                           const double *clip) {
    float scale = clip ? (float)clip[1] : 1.0f;
    PL_GRID_STRIDE(i, n) {
        float d = grad[i] * scale + wd * param[i];
        if (momentum != 0.0f) {
            d = first ? d : momentum * buf[i] + d;
            buf[i] = d;
        }
        param[i] -= lr * d;
    }
}

extern "C" void pl_cuda_adamw(cudaStream_t s, float *param, const float *grad, float *m,
                              float *v, int64_t n, float lr, float beta1, float beta2,
                              float eps, float weight_decay, int64_t t,
                              const double *clip) {
    double bc1 = 1.0 - pow((double)beta1, (double)t);
    double bc2 = 1.0 - pow((double)beta2, (double)t);
    adamw_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(
        param, grad, m, v, n, lr, beta1, beta2, eps, 1.0f - lr * weight_decay,
        (float)(lr / bc1), (float)sqrt(bc2), clip);
}

extern "C" void pl_cuda_sgd(cudaStream_t s, float *param, const float *grad, float *buf,
                            int64_t n, float lr, float momentum, float weight_decay,
                            int64_t t, const double *clip) {
    sgd_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(param, grad, buf, n, lr, momentum,
                                                 weight_decay, t == 1, clip);
}
