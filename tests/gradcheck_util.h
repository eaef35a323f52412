/* Finite-difference gradient checks shared by test_gradcheck.c and
 * test_gradcheck_transformer.c: a fixed random stream for inputs, central
 * differences in double, and the normalised error measure
 *
 *   err = max|a − ref| / max(1e-6, max|ref|),
 *
 * relative to the scale of the reference so that near-zero entries do not
 * blow it up. Failures are counted in tu_failures (test_util.h). */
#ifndef PL_TESTS_GRADCHECK_UTIL_H
#define PL_TESTS_GRADCHECK_UTIL_H

#include <stdint.h>

#include "test_util.h"

/* The finite-difference step. Truncation O(h²·f''') ≈ 1e-12 and
 * cancellation ≈ eps_double·|L|/h ≈ 1e-9 keep the numeric gradient good to
 * ~1e-9, far below the fp32 kernels' own error. */
#define TU_FD_STEP 1e-6

/* The input stream (splitmix64): fixed by the seed, so every run checks
 * the same values. Each test seeds it once, before its first draw. */
void tu_rng_seed(uint64_t seed);
uint64_t tu_rng_next(void);

/* Uniform in [lo, hi). */
float tu_uniform(float lo, float hi);
void tu_fill(float *x, int64_t n, float lo, float hi);

/* dst = src widened to double: the references see exactly the fp32 inputs
 * the kernels saw. */
void tu_widen(double *dst, const float *src, int64_t n);

/* dst = base + add, the expected result of an accumulating backward. */
void tu_plus(double *dst, const float *base, const double *add, int64_t n);

/* Prints the normalised error of `a` against `ref` and fails (with where
 * the largest difference is) unless it is below `tol`. NaNs fail. */
void tu_expect_close(const char *what, const float *a, const double *ref,
                     int64_t n, double tol);

/* A scalar function of double buffers (reached through ctx). */
typedef double (*tu_loss_fn)(void *ctx);

/* Central differences of f with respect to every element of x (which f
 * reads through ctx); x is restored exactly afterwards. */
void tu_numeric_grad(tu_loss_fn f, void *ctx, double *x, int64_t n,
                     double *grad);

#endif
