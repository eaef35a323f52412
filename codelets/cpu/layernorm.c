/* LayerNorm (PyTorch semantics: biased variance, eps inside the sqrt). */
#include <math.h>
#include <string.h>

#include "codelets/cpu/kernels.h"

#define LN_EPS 1e-5f

/* Mean and 1/std of one row, accumulated in double so long rows of large
 * values keep their precision. Both stay double: a mean rounded to fp32 is
 * off by up to half an ulp of the row's offset (3e-5 at 1e3), an error
 * x − mean would pass on in full, i.e. 1e-4 in x̂ for a row of 1e3 ± 0.3. */
static void row_stats(const float *x, int64_t C, double *mean, double *rstd) {
    double s = 0.0, s2 = 0.0;
    for (int64_t c = 0; c < C; c++) s += x[c];
    double m = s / C;
    for (int64_t c = 0; c < C; c++) {
        double d = x[c] - m;
        s2 += d * d;
    }
    *mean = m;
    *rstd = 1.0 / sqrt(s2 / C + LN_EPS);
}

void layernorm_forward(float *out, const float *inp, const float *weight,
                       const float *bias, int64_t N, int64_t C) {
    for (int64_t i = 0; i < N; i++) {
        const float *x = inp + i * C;
        float *o = out + i * C;
        double m, r;
        row_stats(x, C, &m, &r);
        for (int64_t c = 0; c < C; c++)
            o[c] = (float)((x[c] - m) * r) * weight[c] + bias[c];
    }
}

void layernorm_backward_input(float *dinp, const float *dout, const float *inp,
                              const float *weight, int64_t N, int64_t C,
                              int accumulate) {
    for (int64_t i = 0; i < N; i++) {
        const float *x = inp + i * C, *d = dout + i * C;
        float *dx = dinp + i * C;
        double m, r;
        row_stats(x, C, &m, &r);
        /* dx = r · (g − mean(g) − x̂ · mean(g ⊙ x̂)), g = dout ⊙ weight */
        double gm = 0.0, gxm = 0.0;
        for (int64_t c = 0; c < C; c++) {
            float g = d[c] * weight[c];
            gm += g;
            gxm += g * ((x[c] - m) * r);
        }
        double gmean = gm / C, gxmean = gxm / C;
        for (int64_t c = 0; c < C; c++) {
            double xhat = (x[c] - m) * r;
            float v = (float)(r * (d[c] * weight[c] - gmean - xhat * gxmean));
            dx[c] = accumulate ? dx[c] + v : v;
        }
    }
}

void layernorm_backward_weight(float *dweight, float *dbias, const float *dout,
                               const float *inp, int64_t N, int64_t C,
                               int accumulate) {
    if (!accumulate) {
        memset(dweight, 0, C * sizeof *dweight);
        memset(dbias, 0, C * sizeof *dbias);
    }
    for (int64_t i = 0; i < N; i++) {
        const float *x = inp + i * C, *d = dout + i * C;
        double m, r;
        row_stats(x, C, &m, &r);
        for (int64_t c = 0; c < C; c++) {
            dweight[c] += d[c] * (float)((x[c] - m) * r);
            dbias[c] += d[c];
        }
    }
}
