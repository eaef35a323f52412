/* Elementwise ops: ReLU, GELU (tanh approximation) and the residual add. */
#include <math.h>

#include "codelets/cpu/kernels.h"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */

void relu_forward(float *out, const float *inp, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

void relu_backward(float *dinp, const float *inp, const float *dout, int64_t n,
                   int accumulate) {
    for (int64_t i = 0; i < n; i++) {
        float g = inp[i] > 0.0f ? dout[i] : 0.0f;
        dinp[i] = accumulate ? dinp[i] + g : g;
    }
}

void gelu_forward(float *out, const float *inp, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + 0.044715f * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
}

void gelu_backward(float *dinp, const float *inp, const float *dout, int64_t n,
                   int accumulate) {
    for (int64_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + 0.044715f * x * x * x);
        float th = tanhf(u);
        float sech2 = 1.0f - th * th;
        float du = GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        float g = (0.5f * (1.0f + th) + 0.5f * x * sech2 * du) * dout[i];
        dinp[i] = accumulate ? dinp[i] + g : g;
    }
}

void add_forward(float *out, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void add_backward(float *dinp, const float *dout, int64_t n, int accumulate) {
    for (int64_t i = 0; i < n; i++)
        dinp[i] = accumulate ? dinp[i] + dout[i] : dout[i];
}
