/* CUDA side of optim/optimizer.c: the AdamW and SGD updates of one chunk,
 * fp32 or 16-bit (one kernel each, over an fp32 or a 16-bit state). */
#include <math.h>

#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.h"
#include "util/half.h"

/* Where an update's parameters and gradients are: fp32 buffers, or 16-bit
 * ones (util/half.h) read widened, with fp32 master weights when given
 * (the update reads and writes those, and stores the 16-bit copy rounded)
 * or else the 16-bit values widened, updated and rounded back: what the
 * CPU's adamw_update_half / sgd_update_half do. */
struct fp32_state {
    float *param;
    const float *grad;
    __device__ float g(int64_t i) const { return grad[i]; }
    __device__ float p(int64_t i) const { return param[i]; }
    __device__ void set(int64_t i, float x) const { param[i] = x; }
};
struct half_state {
    uint16_t *param;
    const uint16_t *grad;
    float *master;
    int bf16;
    __device__ float g(int64_t i) const { return pl_half_widen(bf16, grad[i]); }
    __device__ float p(int64_t i) const {
        return master ? master[i] : pl_half_widen(bf16, param[i]);
    }
    __device__ void set(int64_t i, float x) const {
        if (master) master[i] = x;
        param[i] = pl_half_round(bf16, x);
    }
};

/* clip: NULL, or the clip result {norm, coefficient} (optim/clip.h) in
 * device memory; gradients are multiplied by the coefficient as read. */
template <typename S>
__global__ void adamw_kernel(S st, float *m, float *v, int64_t n, float lr, float beta1,
                             float beta2, float eps, float decay, float step,
                             float bc2_sqrt, const double *clip) {
    float scale = clip ? (float)clip[1] : 1.0f;
    PL_GRID_STRIDE(i, n) {
        float g = st.g(i) * scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        st.set(i, st.p(i) * decay - step * mi / (sqrtf(vi) / bc2_sqrt + eps));
    }
}

template <typename S>
__global__ void sgd_kernel(S st, float *buf, int64_t n, float lr, float momentum, float wd,
                           int first, const double *clip) {
    float scale = clip ? (float)clip[1] : 1.0f;
    PL_GRID_STRIDE(i, n) {
        float p = st.p(i);
        float d = st.g(i) * scale + wd * p;
        if (momentum != 0.0f) {
            d = first ? d : momentum * buf[i] + d;
            buf[i] = d;
        }
        st.set(i, p - lr * d);
    }
}

template <typename S>
static void adamw(cudaStream_t s, S st, float *m, float *v, int64_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, int64_t t, const double *clip) {
    double bc1 = 1.0 - pow((double)beta1, (double)t);
    double bc2 = 1.0 - pow((double)beta2, (double)t);
    adamw_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(
        st, m, v, n, lr, beta1, beta2, eps, 1.0f - lr * weight_decay, (float)(lr / bc1),
        (float)sqrt(bc2), clip);
}

extern "C" void pl_cuda_adamw(cudaStream_t s, float *param, const float *grad, float *m,
                              float *v, int64_t n, float lr, float beta1, float beta2,
                              float eps, float weight_decay, int64_t t,
                              const double *clip) {
    adamw(s, fp32_state{param, grad}, m, v, n, lr, beta1, beta2, eps, weight_decay, t, clip);
}

extern "C" void pl_cuda_adamw_half(cudaStream_t s, int bf16, uint16_t *param,
                                   const uint16_t *grad, float *master, float *m, float *v,
                                   int64_t n, float lr, float beta1, float beta2, float eps,
                                   float weight_decay, int64_t t, const double *clip) {
    adamw(s, half_state{param, grad, master, bf16}, m, v, n, lr, beta1, beta2, eps,
          weight_decay, t, clip);
}

extern "C" void pl_cuda_sgd(cudaStream_t s, float *param, const float *grad, float *buf,
                            int64_t n, float lr, float momentum, float weight_decay,
                            int64_t t, const double *clip) {
    sgd_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(
        fp32_state{param, grad}, buf, n, lr, momentum, weight_decay, t == 1, clip);
}

extern "C" void pl_cuda_sgd_half(cudaStream_t s, int bf16, uint16_t *param,
                                 const uint16_t *grad, float *master, float *buf, int64_t n,
                                 float lr, float momentum, float weight_decay, int64_t t,
                                 const double *clip) {
    sgd_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(
        half_state{param, grad, master, bf16}, buf, n, lr, momentum, weight_decay, t == 1,
        clip);
}
