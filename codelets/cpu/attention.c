/* Causal multi-head self-attention. Per (batch, head) the score and value
 * products are sgemms over strided views of qkv (row stride 3C), so the
 * O(T²·HS) work runs in OpenBLAS; only the masked softmax is a plain loop.
 * The full T×T score product is computed and the upper triangle ignored:
 * simpler than triangular blocking, and at most 2× the score flops. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/cpu/fast_exp.h"
#include "codelets/cpu/kernels.h"

/* Row reductions with 16 independent accumulators, so GCC vectorises them
 * (a single running sum or max is a serial dependency chain it may not
 * reorder without -ffast-math). The combination order is fixed, so results
 * are deterministic. */
enum { LANES = 16 };

static float row_max(const float *x, int64_t n) {
    float acc[LANES];
    for (int j = 0; j < LANES; j++) acc[j] = x[0];
    int64_t u = 0;
    for (; u + LANES <= n; u += LANES)
        for (int j = 0; j < LANES; j++) acc[j] = x[u + j] > acc[j] ? x[u + j] : acc[j];
    for (; u < n; u++) acc[0] = x[u] > acc[0] ? x[u] : acc[0];
    float m = acc[0];
    for (int j = 1; j < LANES; j++) m = acc[j] > m ? acc[j] : m;
    return m;
}

static float row_sum(const float *x, int64_t n) {
    float acc[LANES] = {0};
    int64_t u = 0;
    for (; u + LANES <= n; u += LANES)
        for (int j = 0; j < LANES; j++) acc[j] += x[u + j];
    for (; u < n; u++) acc[0] += x[u];
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0];
}

static float row_dot(const float *x, const float *y, int64_t n) {
    float acc[LANES] = {0};
    int64_t u = 0;
    for (; u + LANES <= n; u += LANES)
        for (int j = 0; j < LANES; j++) acc[j] += x[u + j] * y[u + j];
    for (; u < n; u++) acc[0] += x[u] * y[u];
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0];
}

void attention_forward(float *out, float *att, const float *qkv, int64_t B,
                       int64_t T, int64_t C, int64_t NH) {
    int64_t HS = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < NH; h++) {
            const float *q = qkv + b * T * C3 + h * HS;
            const float *k = q + C, *v = q + 2 * C;
            float *a = att + (b * NH + h) * T * T;
            /* scores = q · kᵀ · scale */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HS, scale,
                        q, C3, k, C3, 0.0f, a, T);
            /* masked softmax of each row over u <= t; vectorised: the
             * exponentials are pl_fast_expf (libm's expf kept the loop
             * scalar) of arguments <= 0. */
            for (int64_t t = 0; t < T; t++) {
                float *row = a + t * T;
                float maxv = row_max(row, t + 1);
                for (int64_t u = 0; u <= t; u++) row[u] = pl_fast_expf(row[u] - maxv);
                float inv = 1.0f / row_sum(row, t + 1);
                for (int64_t u = 0; u <= t; u++) row[u] *= inv;
                for (int64_t u = t + 1; u < T; u++) row[u] = 0.0f;
            }
            /* out_h = att · v */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HS, T, 1.0f,
                        a, T, v, C3, 0.0f, out + b * T * C + h * HS, C);
        }
}

void attention_backward(float *dqkv, const float *dout, const float *qkv,
                        const float *att, int64_t B, int64_t T, int64_t C,
                        int64_t NH, int accumulate) {
    int64_t HS = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    float beta = accumulate ? 1.0f : 0.0f;
    float *datt = malloc(T * T * sizeof *datt);
    if (!datt) abort(); /* a task cannot report errors; T² floats is small */
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < NH; h++) {
            const float *q = qkv + b * T * C3 + h * HS;
            const float *k = q + C, *v = q + 2 * C;
            float *dq = dqkv + b * T * C3 + h * HS;
            float *dk = dq + C, *dv = dq + 2 * C;
            const float *a = att + (b * NH + h) * T * T;
            const float *d = dout + b * T * C + h * HS;
            /* datt = dout_h · vᵀ;  dv (+)= attᵀ · dout_h */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HS, 1.0f,
                        d, C, v, C3, 0.0f, datt, T);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HS, T, 1.0f,
                        a, T, d, C, beta, dv, C3);
            /* softmax backward, in place: dpre = att ⊙ (datt − Σ att ⊙ datt),
             * times the score scale; zero above the diagonal. */
            for (int64_t t = 0; t < T; t++) {
                const float *ar = a + t * T;
                float *dr = datt + t * T;
                float dot = row_dot(ar, dr, t + 1);
                for (int64_t u = 0; u <= t; u++) dr[u] = ar[u] * (dr[u] - dot) * scale;
                for (int64_t u = t + 1; u < T; u++) dr[u] = 0.0f;
            }
            /* dq (+)= dpre · k;  dk (+)= dpreᵀ · q */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HS, T, 1.0f,
                        datt, T, k, C3, beta, dq, C3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HS, T, 1.0f,
                        datt, T, q, C3, beta, dk, C3);
        }
    free(datt);
}
