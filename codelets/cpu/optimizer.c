/* Optimizer updates over whole chunks: a chunk is one contiguous buffer, so
 * these are single streaming loops the compiler vectorises. */
#include <math.h>

#include "codelets/cpu/kernels.h"

void adamw_update(float *param, const float *grad, float *m, float *v,
                  int64_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, int64_t t) {
    /* torch.optim.AdamW (non-amsgrad): decay first, then the Adam step with
     * bias-corrected moments: p -= lr * m̂ / (sqrt(v̂) + eps). */
    /* The scalars are formed in double, as PyTorch does in Python. */
    double bc1 = 1.0 - pow(beta1, (double)t);
    double bc2 = 1.0 - pow(beta2, (double)t);
    float step = (float)(lr / bc1);
    float bc2_sqrt = (float)sqrt(bc2);
    float decay = 1.0f - lr * weight_decay;
    for (int64_t i = 0; i < n; i++) {
        float g = grad[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        param[i] = param[i] * decay - step * mi / denom;
    }
}

void sgd_update(float *param, const float *grad, float *buf, int64_t n,
                float lr, float momentum, float weight_decay, int64_t t) {
    for (int64_t i = 0; i < n; i++) {
        float d = grad[i] + weight_decay * param[i];
        if (momentum != 0.0f) {
            d = t == 1 ? d : momentum * buf[i] + d;
            buf[i] = d;
        }
        param[i] -= lr * d;
    }
}
