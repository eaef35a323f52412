/* Gradient checks of the CPU kernels (ops/kernels.h) against
 * central finite differences of independent double-precision forward
 * implementations written here, and of the optimizer updates against
 * double-precision transcriptions of PyTorch's AdamW and SGD.
 *
 * For an op out = f(x, θ) the checked scalar is L = Σ out ⊙ R with fixed
 * random weights R, so dL/dout = R is the upstream gradient fed to the
 * backward kernel (for the losses, L is the loss itself). The numeric
 * gradient is (L(x+h) − L(x−h)) / 2h in double with h = 1e-6, evaluated at
 * exactly the fp32 inputs the kernels saw (widened to double).
 *
 * Tolerances. The error measure is normalised by the largest reference
 * value: err = max|a − n| / max(1e-6, max|n|).
 *   - Numeric reference: truncation O(h²·f''') ≈ 1e-12 and cancellation
 *     ≈ eps_double·|L|/h ≈ 1e-16·10/1e-6 = 1e-9, so it is good to ~1e-9.
 *   - Analytic fp32: each value is a short fp32 dot product or formula,
 *     whose relative error is a few ulps (~1e-7 · √terms), so a correct
 *     kernel lands around 1e-7..1e-6.
 *   GRAD_TOL = 1e-4 is two orders above that (no flakiness from BLAS
 *   summation order or libm tanhf) and far below what any real mistake
 *   produces (a wrong index, sign, factor or missed term gives O(1e-2..1)).
 *   FWD_TOL = 1e-5 for fp32 forwards against the double forwards, for the
 *   same reason (single rounding chains, no finite differences involved).
 *
 * Exit status 0 on success; every failed check prints a FAIL line. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/kernels.h"
#include "optim/optimizer.h"
#include "gradcheck_util.h"

#define GRAD_TOL 1e-4
#define FWD_TOL 1e-5
/* Optimizer states and parameters after 3 steps: fp32 rounding of values
 * of order 1 is ~6e-8 per operation, a dozen operations per step. */
#define OPT_TOL 1e-5

/* -------------------------------------------------------------- linear */

enum { LN = 5, LC = 7, LOC = 4 };

typedef struct linear_ctx {
    double x[LN * LC], w[LOC * LC], b[LOC], r[LN * LOC];
} linear_ctx;

static void linear_ref(const linear_ctx *c, double *out) {
    for (int i = 0; i < LN; i++)
        for (int o = 0; o < LOC; o++) {
            double s = c->b[o];
            for (int k = 0; k < LC; k++) s += c->x[i * LC + k] * c->w[o * LC + k];
            out[i * LOC + o] = s;
        }
}

static double linear_loss(void *ctx) {
    linear_ctx *c = ctx;
    double out[LN * LOC], L = 0.0;
    linear_ref(c, out);
    for (int i = 0; i < LN * LOC; i++) L += out[i] * c->r[i];
    return L;
}

static void test_linear(void) {
    printf("linear (N=%d, C=%d, OC=%d)\n", LN, LC, LOC);
    float x[LN * LC], w[LOC * LC], b[LOC], r[LN * LOC], out[LN * LOC];
    tu_fill(x, LN * LC, -1, 1);
    tu_fill(w, LOC * LC, -1, 1);
    tu_fill(b, LOC, -1, 1);
    tu_fill(r, LN * LOC, -1, 1);
    linear_ctx c;
    tu_widen(c.x, x, LN * LC);
    tu_widen(c.w, w, LOC * LC);
    tu_widen(c.b, b, LOC);
    tu_widen(c.r, r, LN * LOC);

    double out_ref[LN * LOC];
    linear_ref(&c, out_ref);
    pl_cpu_linear_forward(out, x, w, b, LN, LC, LOC);
    tu_expect_close("linear forward", out, out_ref, LN * LOC, FWD_TOL);

    double nx[LN * LC], nw[LOC * LC], nb[LOC];
    tu_numeric_grad(linear_loss, &c, c.x, LN * LC, nx);
    tu_numeric_grad(linear_loss, &c, c.w, LOC * LC, nw);
    tu_numeric_grad(linear_loss, &c, c.b, LOC, nb);

    /* Overwrite paths: outputs start as NaN, as StarPU's W-mode buffers may
     * hold anything; beta = 0 / the memset must not read them. */
    float dx[LN * LC], dw[LOC * LC], db[LOC];
    for (int i = 0; i < LN * LC; i++) dx[i] = NAN;
    for (int i = 0; i < LOC * LC; i++) dw[i] = NAN;
    for (int i = 0; i < LOC; i++) db[i] = NAN;
    pl_cpu_linear_backward_input(dx, r, w, LN, LC, LOC, 0);
    pl_cpu_linear_backward_weight(dw, db, r, x, LN, LC, LOC, 0);
    tu_expect_close("linear dinp", dx, nx, LN * LC, GRAD_TOL);
    tu_expect_close("linear dweight", dw, nw, LOC * LC, GRAD_TOL);
    tu_expect_close("linear dbias", db, nb, LOC, GRAD_TOL);

    /* Accumulate paths: the gradient is added to what was there. */
    float px[LN * LC], pw[LOC * LC], pb[LOC];
    tu_fill(px, LN * LC, -2, 2);
    tu_fill(pw, LOC * LC, -2, 2);
    tu_fill(pb, LOC, -2, 2);
    memcpy(dx, px, sizeof dx);
    memcpy(dw, pw, sizeof dw);
    memcpy(db, pb, sizeof db);
    pl_cpu_linear_backward_input(dx, r, w, LN, LC, LOC, 1);
    pl_cpu_linear_backward_weight(dw, db, r, x, LN, LC, LOC, 1);
    double ex[LN * LC], ew[LOC * LC], eb[LOC];
    tu_plus(ex, px, nx, LN * LC);
    tu_plus(ew, pw, nw, LOC * LC);
    tu_plus(eb, pb, nb, LOC);
    tu_expect_close("linear dinp accumulate", dx, ex, LN * LC, GRAD_TOL);
    tu_expect_close("linear dweight accumulate", dw, ew, LOC * LC, GRAD_TOL);
    tu_expect_close("linear dbias accumulate", db, eb, LOC, GRAD_TOL);
}

/* --------------------------------------------------------- elementwise */

enum { EN = 48 };

typedef enum { ACT_RELU, ACT_GELU } act_kind;

typedef struct act_ctx {
    act_kind kind;
    double x[EN], r[EN];
} act_ctx;

static double gelu_ref(double x) {
    const double k = sqrt(2.0 / acos(-1.0)); /* sqrt(2/pi) */
    return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
}

static double act_ref(act_kind kind, double x) {
    return kind == ACT_RELU ? (x > 0.0 ? x : 0.0) : gelu_ref(x);
}

static double act_loss(void *ctx) {
    act_ctx *c = ctx;
    double L = 0.0;
    for (int i = 0; i < EN; i++) L += act_ref(c->kind, c->x[i]) * c->r[i];
    return L;
}

static void test_activation(act_kind kind) {
    const char *name = kind == ACT_RELU ? "relu" : "gelu";
    printf("%s (n=%d)\n", name, EN);
    float x[EN], r[EN], out[EN];
    for (int i = 0; i < EN; i++) {
        if (kind == ACT_RELU) {
            /* |x| in [0.05, 2): the kink at 0 is never within h, where
             * central differences would average the two slopes. */
            float m = tu_uniform(0.05f, 2.0f);
            x[i] = (tu_rng_next() & 1) ? m : -m;
        } else {
            x[i] = tu_uniform(-5.0f, 5.0f); /* both tails and the bend */
        }
    }
    tu_fill(r, EN, -1, 1);
    act_ctx c = {.kind = kind};
    tu_widen(c.x, x, EN);
    tu_widen(c.r, r, EN);

    double ref[EN];
    for (int i = 0; i < EN; i++) ref[i] = act_ref(kind, c.x[i]);
    if (kind == ACT_RELU) pl_cpu_relu_forward(out, x, EN);
    else pl_cpu_gelu_forward(out, x, EN);
    char what[64];
    snprintf(what, sizeof what, "%s forward", name);
    tu_expect_close(what, out, ref, EN, FWD_TOL);

    double n[EN];
    tu_numeric_grad(act_loss, &c, c.x, EN, n);
    float d[EN];
    for (int i = 0; i < EN; i++) d[i] = NAN;
    if (kind == ACT_RELU) pl_cpu_relu_backward(d, x, r, EN, 0);
    else pl_cpu_gelu_backward(d, x, r, EN, 0);
    snprintf(what, sizeof what, "%s dinp", name);
    tu_expect_close(what, d, n, EN, GRAD_TOL);

    float p[EN];
    double e[EN];
    tu_fill(p, EN, -2, 2);
    memcpy(d, p, sizeof d);
    if (kind == ACT_RELU) pl_cpu_relu_backward(d, x, r, EN, 1);
    else pl_cpu_gelu_backward(d, x, r, EN, 1);
    tu_plus(e, p, n, EN);
    snprintf(what, sizeof what, "%s dinp accumulate", name);
    tu_expect_close(what, d, e, EN, GRAD_TOL);
}

typedef struct add_ctx {
    double a[EN], b[EN], r[EN];
} add_ctx;

static double add_loss(void *ctx) {
    add_ctx *c = ctx;
    double L = 0.0;
    for (int i = 0; i < EN; i++) L += (c->a[i] + c->b[i]) * c->r[i];
    return L;
}

static void test_add(void) {
    printf("add (n=%d)\n", EN);
    float a[EN], b[EN], r[EN], out[EN];
    tu_fill(a, EN, -1, 1);
    tu_fill(b, EN, -1, 1);
    tu_fill(r, EN, -1, 1);
    add_ctx c;
    tu_widen(c.a, a, EN);
    tu_widen(c.b, b, EN);
    tu_widen(c.r, r, EN);
    double ref[EN];
    for (int i = 0; i < EN; i++) ref[i] = c.a[i] + c.b[i];
    pl_cpu_add_forward(out, a, b, EN);
    tu_expect_close("add forward", out, ref, EN, FWD_TOL);

    double na[EN], nb[EN];
    tu_numeric_grad(add_loss, &c, c.a, EN, na);
    tu_numeric_grad(add_loss, &c, c.b, EN, nb);
    /* The engine calls add_backward once per addend with the same dout. */
    float da[EN], db[EN];
    for (int i = 0; i < EN; i++) da[i] = db[i] = NAN;
    pl_cpu_add_backward(da, r, EN, 0);
    pl_cpu_add_backward(db, r, EN, 0);
    tu_expect_close("add da", da, na, EN, GRAD_TOL);
    tu_expect_close("add db", db, nb, EN, GRAD_TOL);

    float p[EN];
    double e[EN];
    tu_fill(p, EN, -2, 2);
    memcpy(da, p, sizeof da);
    pl_cpu_add_backward(da, r, EN, 1);
    tu_plus(e, p, na, EN);
    tu_expect_close("add da accumulate", da, e, EN, GRAD_TOL);
}

/* ------------------------------------------------------- cross-entropy */

enum { CN = 6, CK = 5 };

typedef struct ce_ctx {
    double z[CN * CK];
    int32_t y[CN];
} ce_ctx;

/* Σ_rows (logsumexp(row) − row[y]) in double, max-shifted. */
static double ce_sum_ref(const double *z, const int32_t *y, int n, int k) {
    double total = 0.0;
    for (int i = 0; i < n; i++) {
        const double *row = z + i * k;
        double m = row[0];
        for (int j = 1; j < k; j++) m = row[j] > m ? row[j] : m;
        double s = 0.0;
        for (int j = 0; j < k; j++) s += exp(row[j] - m);
        total += m + log(s) - row[y[i]];
    }
    return total;
}

/* The mean over rows, the loss the engine minimises. */
static double ce_loss(void *ctx) {
    ce_ctx *c = ctx;
    return ce_sum_ref(c->z, c->y, CN, CK) / CN;
}

static void test_cross_entropy(void) {
    printf("cross_entropy (N=%d, K=%d)\n", CN, CK);
    float z[CN * CK], dz[CN * CK];
    int32_t y[CN];
    tu_fill(z, CN * CK, -3, 3);
    for (int i = 0; i < CN; i++) y[i] = (int32_t)(tu_rng_next() % CK);
    ce_ctx c;
    tu_widen(c.z, z, CN * CK);
    memcpy(c.y, y, sizeof y);

    int64_t bad = 0;
    for (int i = 0; i < CN * CK; i++) dz[i] = NAN;
    double sum = pl_cpu_cross_entropy_forward(dz, z, y, CN, CK, CK, 1.0f / CN, &bad);
    double ref = ce_sum_ref(c.z, c.y, CN, CK);
    double ferr = fabs(sum - ref) / fmax(1e-6, fabs(ref));
    printf("  %-34s err %.2e (tol %.0e)\n", "cross_entropy forward", ferr, FWD_TOL);
    CHECK(ferr < FWD_TOL, "cross_entropy forward: %.9g vs double %.9g", sum, ref);
    CHECK(bad == 0, "cross_entropy: %lld bad labels reported for valid labels",
          (long long)bad);

    double n[CN * CK];
    tu_numeric_grad(ce_loss, &c, c.z, CN * CK, n);
    tu_expect_close("cross_entropy dlogits", dz, n, CN * CK, GRAD_TOL);

    /* Without dlogits (the forward-only task): same sum, nothing written. */
    double sum2 = pl_cpu_cross_entropy_forward(NULL, z, y, CN, CK, CK, 0.0f, &bad);
    CHECK(sum2 == sum, "cross_entropy without dlogits: %.17g vs %.17g", sum2, sum);

    /* Large logits: exp(1000) overflows float and double, so only the
     * max-shifted form stays finite. Row 0 has 1000 at its label, row 1
     * at another class (loss ≈ 1000 there), row 2 has ±1000 mixed. */
    float big[3 * CK];
    int32_t by[3] = {1, 2, 0};
    tu_fill(big, 3 * CK, -1, 1);
    big[0 * CK + 1] = 1000.0f;
    big[1 * CK + 4] = 1000.0f;
    big[2 * CK + 0] = -1000.0f;
    big[2 * CK + 3] = 1000.0f;
    float dbig[3 * CK];
    bad = 0;
    double bsum = pl_cpu_cross_entropy_forward(dbig, big, by, 3, CK, CK, 1.0f / 3, &bad);
    bool finite = isfinite(bsum);
    for (int i = 0; i < 3 * CK; i++) finite = finite && isfinite(dbig[i]);
    CHECK(finite, "cross_entropy with logit 1000: loss %g or its gradient is "
                  "not finite", bsum);
    ce_ctx cb;
    tu_widen(cb.z, big, 3 * CK);
    memcpy(cb.y, by, sizeof by);
    double bref = ce_sum_ref(cb.z, cb.y, 3, CK);
    double berr = fabs(bsum - bref) / fmax(1e-6, fabs(bref));
    printf("  %-34s err %.2e (tol %.0e)\n", "cross_entropy logit 1000", berr, FWD_TOL);
    CHECK(berr < FWD_TOL, "cross_entropy with logit 1000: %.9g vs double %.9g",
          bsum, bref);
    /* The gradient is softmax − onehot: (0, ..., 1 − 1) on row 0, and
     * +1/3 at class 4 / −1/3 at the label on row 1. */
    CHECK(fabsf(dbig[0 * CK + 1]) < 1e-6f && fabsf(dbig[1 * CK + 4] - 1.0f / 3) < 1e-6f &&
              fabsf(dbig[1 * CK + 2] + 1.0f / 3) < 1e-6f,
          "cross_entropy with logit 1000: dlogits %g %g %g, expected 0 1/3 -1/3",
          dbig[1], dbig[CK + 4], dbig[CK + 2]);

    /* Labels outside [0, K) are counted, contribute nothing and get a zero
     * gradient row (so a bad batch cannot corrupt the weights). */
    int32_t yb[CN];
    memcpy(yb, y, sizeof yb);
    yb[1] = CK;
    yb[4] = -1;
    bad = 0;
    for (int i = 0; i < CN * CK; i++) dz[i] = NAN;
    double bsum2 = pl_cpu_cross_entropy_forward(dz, z, yb, CN, CK, CK, 1.0f / CN, &bad);
    CHECK(bad == 2, "cross_entropy: %lld bad labels counted, expected 2",
          (long long)bad);
    ce_ctx cg = c; /* the reference over the four valid rows only */
    double valid_ref = 0.0;
    for (int i = 0; i < CN; i++)
        if (i != 1 && i != 4) valid_ref += ce_sum_ref(cg.z + i * CK, cg.y + i, 1, CK);
    CHECK(fabs(bsum2 - valid_ref) < 1e-5 * fabs(valid_ref),
          "cross_entropy with bad labels: %.9g, expected %.9g from valid rows",
          bsum2, valid_ref);
    for (int k = 0; k < CK; k++)
        CHECK(dz[1 * CK + k] == 0.0f && dz[4 * CK + k] == 0.0f,
              "cross_entropy: gradient of a bad-label row is not zero (%g, %g)",
              dz[CK + k], dz[4 * CK + k]);
}

/* ---------------------------------------------------------------- mean */

typedef struct mean_ctx {
    double x[EN];
} mean_ctx;

static double mean_loss(void *ctx) {
    mean_ctx *c = ctx;
    double s = 0.0;
    for (int i = 0; i < EN; i++) s += c->x[i];
    return s / EN;
}

static void test_mean(void) {
    printf("mean (n=%d)\n", EN);
    float x[EN];
    tu_fill(x, EN, -1, 1);
    mean_ctx c;
    tu_widen(c.x, x, EN);
    double ref = mean_loss(&c) * EN;
    double sum = pl_cpu_mean_forward(x, EN);
    double ferr = fabs(sum - ref) / fmax(1e-6, fabs(ref));
    printf("  %-34s err %.2e (tol %.0e)\n", "mean forward (sum)", ferr, FWD_TOL);
    CHECK(ferr < FWD_TOL, "mean_forward: %.9g vs double %.9g", sum, ref);

    double n[EN];
    tu_numeric_grad(mean_loss, &c, c.x, EN, n);
    float d[EN];
    for (int i = 0; i < EN; i++) d[i] = NAN;
    pl_cpu_mean_backward(d, EN, 1.0f / EN, 0); /* the engine's scale: 1 / count */
    tu_expect_close("mean dinp", d, n, EN, GRAD_TOL);

    float p[EN];
    double e[EN];
    tu_fill(p, EN, -2, 2);
    memcpy(d, p, sizeof d);
    pl_cpu_mean_backward(d, EN, 1.0f / EN, 1);
    tu_plus(e, p, n, EN);
    tu_expect_close("mean dinp accumulate", d, e, EN, GRAD_TOL);
}

/* ---------------------------------------------------------- optimizers */

enum { ON = 64, OSTEPS = 3 };

/* torch.optim.AdamW (amsgrad=False, maximize=False), _single_tensor_adamw:
 *   param.mul_(1 - lr * weight_decay)
 *   exp_avg.lerp_(grad, 1 - beta1)
 *   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
 *   step_size = lr / (1 - beta1 ** step)
 *   denom = exp_avg_sq.sqrt() / sqrt(1 - beta2 ** step) + eps
 *   param.addcdiv_(exp_avg, denom, value=-step_size)
 * all in double here. */
static void adamw_ref(double *p, const double *g, double *m, double *v, int n,
                      double lr, double b1, double b2, double eps, double wd,
                      int t) {
    double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    for (int i = 0; i < n; i++) {
        p[i] *= 1.0 - lr * wd;
        m[i] += (g[i] - m[i]) * (1.0 - b1);
        v[i] = v[i] * b2 + (1.0 - b2) * g[i] * g[i];
        double denom = sqrt(v[i]) / sqrt(bc2) + eps;
        p[i] -= lr / bc1 * m[i] / denom;
    }
}

/* torch.optim.SGD (dampening=0, nesterov=False), _single_tensor_sgd:
 *   d = grad + weight_decay * param
 *   buf = d on the first step, else momentum * buf + d   (momentum != 0)
 *   param -= lr * (buf or d) */
static void sgd_ref(double *p, const double *g, double *buf, int n, double lr,
                    double momentum, double wd, int t) {
    for (int i = 0; i < n; i++) {
        double d = g[i] + wd * p[i];
        if (momentum != 0.0) {
            d = t == 1 ? d : momentum * buf[i] + d;
            buf[i] = d;
        }
        p[i] -= lr * d;
    }
}

/* Compares the fp32 parameters with the double ones two ways: absolutely
 * (relative to the parameters' scale) and on the update p − p0 alone
 * (relative to the update's scale), which is where a wrong formula shows. */
static void expect_params(const char *what, const float *p, const double *pd,
                          const float *p0) {
    char buf[80];
    snprintf(buf, sizeof buf, "%s params", what);
    tu_expect_close(buf, p, pd, ON, OPT_TOL);
    float dp[ON];
    double dref[ON];
    for (int i = 0; i < ON; i++) {
        dp[i] = p[i] - p0[i];
        dref[i] = pd[i] - (double)p0[i];
    }
    snprintf(buf, sizeof buf, "%s update p - p0", what);
    /* fp32 params of order 1 round at ~6e-8 against updates of ~lr·steps
     * = 3e-2, hence 1e-4 relative on the update. */
    tu_expect_close(buf, dp, dref, ON, 1e-4);
}

static void test_adamw(void) {
    printf("adamw_update (n=%d, %d steps)\n", ON, OSTEPS);
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
    float p[ON], p0[ON], m[ON] = {0}, v[ON] = {0};
    double pd[ON], md[ON] = {0}, vd[ON] = {0};
    tu_fill(p, ON, -1, 1);
    memcpy(p0, p, sizeof p);
    tu_widen(pd, p, ON);
    for (int t = 1; t <= OSTEPS; t++) {
        float g[ON];
        double gd[ON];
        tu_fill(g, ON, -1, 1);
        g[0] = 0.0f;   /* v stays 0 on step 1: eps alone keeps it finite */
        g[1] = 1e-6f;  /* tiny gradient: sqrt(v̂) ≈ |g| ≫ eps still */
        g[2] = 100.0f; /* large gradient: the step is still ≈ lr */
        tu_widen(gd, g, ON);
        adamw_update(p, g, m, v, ON, lr, b1, b2, eps, wd, t, 1.0f);
        /* The hyper-parameters as the fp32 API holds them, widened. */
        adamw_ref(pd, gd, md, vd, ON, lr, b1, b2, eps, wd, t);
    }
    expect_params("adamw", p, pd, p0);
    tu_expect_close("adamw exp_avg", m, md, ON, OPT_TOL);
    tu_expect_close("adamw exp_avg_sq", v, vd, ON, OPT_TOL);
}

static void test_sgd(float momentum, float wd) {
    printf("sgd_update (n=%d, %d steps, momentum %g, weight_decay %g)\n", ON,
           OSTEPS, momentum, wd);
    const float lr = 1e-2f;
    float p[ON], p0[ON], buf[ON];
    double pd[ON], bufd[ON] = {0};
    for (int i = 0; i < ON; i++) buf[i] = NAN; /* step 1 must not read it */
    tu_fill(p, ON, -1, 1);
    memcpy(p0, p, sizeof p);
    tu_widen(pd, p, ON);
    for (int t = 1; t <= OSTEPS; t++) {
        float g[ON];
        double gd[ON];
        tu_fill(g, ON, -1, 1);
        tu_widen(gd, g, ON);
        /* momentum 0: the documented "buf unused", so NULL must do. */
        sgd_update(p, g, momentum != 0.0f ? buf : NULL, ON, lr, momentum, wd, t, 1.0f);
        sgd_ref(pd, gd, bufd, ON, lr, momentum, wd, t);
    }
    char what[64];
    snprintf(what, sizeof what, "sgd(m=%g)", momentum);
    expect_params(what, p, pd, p0);
    if (momentum != 0.0f) {
        snprintf(what, sizeof what, "sgd(m=%g) momentum_buffer", momentum);
        tu_expect_close(what, buf, bufd, ON, OPT_TOL);
    }
}

int main(void) {
    tu_rng_seed(0x1234567u);
    test_linear();
    test_activation(ACT_RELU);
    test_activation(ACT_GELU);
    test_add();
    test_cross_entropy();
    test_mean();
    test_adamw();
    test_sgd(0.9f, 0.01f);
    test_sgd(0.0f, 0.0f);
    test_sgd(0.0f, 0.05f);
    if (tu_failures) {
        printf("FAIL: %d gradcheck failure(s)\n", tu_failures);
        return 1;
    }
    printf("gradcheck: all checks passed\n");
    return 0;
}
