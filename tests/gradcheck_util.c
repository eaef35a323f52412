/* Finite-difference gradient checks; see gradcheck_util.h. */
#include "gradcheck_util.h"

#include <math.h>

static uint64_t rng_state;

void tu_rng_seed(uint64_t seed) { rng_state = seed; }

uint64_t tu_rng_next(void) { return tu_splitmix64(&rng_state); }

float tu_uniform(float lo, float hi) {
    /* The top 24 bits: a float in [0, 1) without rounding. */
    return lo + (hi - lo) *
                    (float)((double)(tu_rng_next() >> 40) / (double)(1u << 24));
}

void tu_fill(float *x, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) x[i] = tu_uniform(lo, hi);
}

void tu_widen(double *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = src[i];
}

void tu_plus(double *dst, const float *base, const double *add, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = (double)base[i] + add[i];
}

static double norm_err(const float *a, const double *ref, int64_t n) {
    double diff = 0.0, scale = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= diff)) diff = d; /* NaN propagates into diff */
        if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
    }
    return diff / (scale > 1e-6 ? scale : 1e-6);
}

void tu_expect_close(const char *what, const float *a, const double *ref,
                     int64_t n, double tol) {
    double err = norm_err(a, ref, n);
    printf("  %-44s err %.2e (tol %.0e)\n", what, err, tol);
    if (err < tol)
        return;
    int64_t worst = 0;
    double wd = -1.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= wd)) {
            wd = d;
            worst = i;
        }
    }
    CHECK(0, "%s: normalised error %.3e >= %.0e (worst at [%lld]: "
             "kernel %.9g, reference %.9g)",
          what, err, tol, (long long)worst, (double)a[worst], ref[worst]);
}

void tu_numeric_grad(tu_loss_fn f, void *ctx, double *x, int64_t n,
                     double *grad) {
    for (int64_t i = 0; i < n; i++) {
        double saved = x[i];
        x[i] = saved + TU_FD_STEP;
        double lp = f(ctx);
        x[i] = saved - TU_FD_STEP;
        double lm = f(ctx);
        x[i] = saved;
        grad[i] = (lp - lm) / (2.0 * TU_FD_STEP);
    }
}
