/* LayerNorm (PyTorch semantics: biased variance, eps inside the sqrt). */
#include <math.h>
#include <string.h>

#include "codelets/cpu/kernels.h"

#define LN_EPS 1e-5f

/* Row reductions in double with DL independent accumulators: GCC vectorises
 * them (a single running double sum is a serial chain of 4-cycle adds that
 * it may not reorder without -ffast-math, which made these loops the bulk
 * of LayerNorm's time). The combination order is fixed: deterministic. */
enum { DL = 8 };

static double reduce_lanes(double *acc) {
    for (int w = DL / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0];
}

/* Mean and 1/std of one row, accumulated in double so long rows of large
 * values keep their precision. Both stay double: a mean rounded to fp32 is
 * off by up to half an ulp of the row's offset (3e-5 at 1e3), an error
 * x − mean would pass on in full, i.e. 1e-4 in x̂ for a row of 1e3 ± 0.3. */
typedef struct row_stat {
    double mean, rstd;
} row_stat;

static row_stat row_stats(const float *x, int64_t C) {
    double acc[DL] = {0};
    int64_t c = 0;
    for (; c + DL <= C; c += DL)
        for (int j = 0; j < DL; j++) acc[j] += x[c + j];
    for (; c < C; c++) acc[0] += x[c];
    double m = reduce_lanes(acc) / C;
    double acc2[DL] = {0};
    for (c = 0; c + DL <= C; c += DL)
        for (int j = 0; j < DL; j++) {
            double d = x[c + j] - m;
            acc2[j] += d * d;
        }
    for (; c < C; c++) {
        double d = x[c] - m;
        acc2[0] += d * d;
    }
    return (row_stat){m, 1.0 / sqrt(reduce_lanes(acc2) / C + LN_EPS)};
}

void layernorm_forward(float *out, const float *inp, const float *weight,
                       const float *bias, int64_t N, int64_t C) {
    for (int64_t i = 0; i < N; i++) {
        const float *x = inp + i * C;
        float *o = out + i * C;
        row_stat st = row_stats(x, C);
        const double m = st.mean, r = st.rstd;
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
        row_stat st = row_stats(x, C);
        const double m = st.mean, r = st.rstd;
        /* dx = r · (g − mean(g) − x̂ · mean(g ⊙ x̂)), g = dout ⊙ weight */
        double gm[DL] = {0}, gxm[DL] = {0};
        int64_t c = 0;
        for (; c + DL <= C; c += DL)
            for (int j = 0; j < DL; j++) {
                double g = d[c + j] * weight[c + j]; /* a float product */
                double xhat = (x[c + j] - m) * r;
                gm[j] += g;
                gxm[j] += g * xhat;
            }
        for (; c < C; c++) {
            double g = d[c] * weight[c];
            gm[0] += g;
            gxm[0] += g * ((x[c] - m) * r);
        }
        double gmean = reduce_lanes(gm) / C, gxmean = reduce_lanes(gxm) / C;
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
        row_stat st = row_stats(x, C);
        const double m = st.mean, r = st.rstd;
        for (int64_t c = 0; c < C; c++) {
            dweight[c] += d[c] * (float)((x[c] - m) * r);
            dbias[c] += d[c];
        }
    }
}
