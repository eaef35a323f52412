/* Gradient checks of the transformer CPU kernels (ops/kernels.h,
 * "transformer ops": embedding, LayerNorm, causal attention, bias-free
 * matmul) against central finite differences of independent
 * double-precision forward implementations written here, straight from the
 * math with plain loops.
 *
 * For an op out = f(x, θ) the checked scalar is L = Σ out ⊙ R with fixed
 * pseudo-random weights R, so dL/dout = R is the upstream gradient fed to
 * the backward kernel. The numeric gradient is (L(x+h) − L(x−h)) / 2h in
 * double with h = 1e-6, evaluated at exactly the fp32 inputs the kernels
 * saw (widened to double).
 *
 * Error measure: err = max|a − n| / max(1e-6, max|n|), i.e. relative to the
 * scale of the reference so near-zero entries do not blow it up.
 *
 * Tolerances.
 *   GRAD_TOL = 1e-3: the analytic gradients come from fp32 kernels, the
 *     reference is double. The numeric reference itself is good to ~1e-9
 *     (truncation O(h²) ≈ 1e-12, cancellation ≈ 1e-16·|L|/h ≈ 1e-9); a
 *     correct fp32 kernel lands at 1e-7..1e-6 (a few ulps through short
 *     dot products and expf). 1e-3 leaves headroom for BLAS summation
 *     order, libm and worse-conditioned inputs (an fp32 LayerNorm that
 *     rounded its mean to fp32 reached ~1e-4 on the offset row below), and
 *     is far below what a real mistake produces (a wrong index, sign, scale
 *     or missed term: 1e-2..1).
 *   FWD_TOL = 1e-5: fp32 forwards against double forwards; short rounding
 *     chains of relative error ~1e-7, no finite differences involved.
 *   Causal-mask properties are checked bit for bit (no tolerance): masked
 *     entries are exactly 0 and a future k/v cannot change earlier rows.
 *
 * Exit status 0 on success; every failed check prints a FAIL line with the
 * numbers. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/kernels.h"
#include "gradcheck_util.h"

#define GRAD_TOL 1e-3
#define FWD_TOL 1e-5

/* ------------------------------------------------------------- helpers */

static void fill_nan(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = NAN;
}
#define ALLOC(type, n) ((type *)tu_xmalloc((size_t)(n) * sizeof(type)))

static double dot_r(const double *out, const double *r, int64_t n) {
    double L = 0.0;
    for (int64_t i = 0; i < n; i++) L += out[i] * r[i];
    return L;
}

/* ------------------------------------------------------------ attention */

/* Reference causal attention: for batch b, head h, query position t,
 *   s_u = (q_t · k_u) / sqrt(HS) for u ≤ t,  p = softmax(s),
 *   out_t = Σ_{u≤t} p_u v_u,
 * with q_t = qkv[b,t,h·HS : (h+1)·HS], k at offset C, v at offset 2C.
 * att (optional) receives p, zero above the diagonal. */
static void attention_ref(double *out, double *att, const double *qkv,
                          int64_t B, int64_t T, int64_t C, int64_t NH) {
    int64_t HS = C / NH;
    double scale = 1.0 / sqrt((double)HS);
    double *s = ALLOC(double, T);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < NH; h++)
            for (int64_t t = 0; t < T; t++) {
                const double *q = qkv + (b * T + t) * 3 * C + h * HS;
                double mx = -INFINITY;
                for (int64_t u = 0; u <= t; u++) {
                    const double *k = qkv + (b * T + u) * 3 * C + C + h * HS;
                    double d = 0.0;
                    for (int64_t i = 0; i < HS; i++) d += q[i] * k[i];
                    s[u] = d * scale;
                    if (s[u] > mx) mx = s[u];
                }
                double z = 0.0;
                for (int64_t u = 0; u <= t; u++) {
                    s[u] = exp(s[u] - mx);
                    z += s[u];
                }
                for (int64_t u = 0; u <= t; u++) s[u] /= z;
                double *o = out + (b * T + t) * C + h * HS;
                for (int64_t i = 0; i < HS; i++) {
                    double acc = 0.0;
                    for (int64_t u = 0; u <= t; u++)
                        acc += s[u] * qkv[(b * T + u) * 3 * C + 2 * C + h * HS + i];
                    o[i] = acc;
                }
                if (att) {
                    double *a = att + ((b * NH + h) * T + t) * T;
                    for (int64_t u = 0; u < T; u++) a[u] = u <= t ? s[u] : 0.0;
                }
            }
    free(s);
}

typedef struct attn_ctx {
    int64_t B, T, C, NH;
    double *qkv, *r, *out;
} attn_ctx;

static double attn_loss(void *ctx) {
    attn_ctx *c = ctx;
    attention_ref(c->out, NULL, c->qkv, c->B, c->T, c->C, c->NH);
    return dot_r(c->out, c->r, c->B * c->T * c->C);
}

/* Forward vs double, dq/dk/dv vs finite differences (overwrite and
 * accumulate paths). */
static void test_attention_grads(int64_t B, int64_t T, int64_t C, int64_t NH) {
    printf("attention (B=%lld, T=%lld, C=%lld, NH=%lld)\n", (long long)B,
           (long long)T, (long long)C, (long long)NH);
    int64_t nq = B * T * 3 * C, no = B * T * C, na = B * NH * T * T;
    float *qkv = ALLOC(float, nq), *r = ALLOC(float, no), *out = ALLOC(float, no);
    float *att = ALLOC(float, na), *dqkv = ALLOC(float, nq), *prev = ALLOC(float, nq);
    double *out_ref = ALLOC(double, no), *att_ref = ALLOC(double, na);
    double *num = ALLOC(double, nq), *exp_acc = ALLOC(double, nq);
    attn_ctx c = {B, T, C, NH, ALLOC(double, nq), ALLOC(double, no),
                  ALLOC(double, no)};
    tu_fill(qkv, nq, -1.5f, 1.5f);
    tu_fill(r, no, -1, 1);
    tu_widen(c.qkv, qkv, nq);
    tu_widen(c.r, r, no);

    /* Outputs start as NaN (StarPU W-mode buffers may hold anything): every
     * element, the masked upper triangle included, must be written. */
    fill_nan(out, no);
    fill_nan(att, na);
    pl_cpu_attention_forward(out, att, qkv, B, T, C, NH);
    attention_ref(out_ref, att_ref, c.qkv, B, T, C, NH);
    tu_expect_close("attention forward out", out, out_ref, no, FWD_TOL);
    tu_expect_close("attention forward att", att, att_ref, na, FWD_TOL);
    int64_t above = 0;
    for (int64_t bh = 0; bh < B * NH; bh++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t u = t + 1; u < T; u++) {
                float v = att[(bh * T + t) * T + u];
                if (!(v == 0.0f)) {
                    if (above++ == 0)
                        CHECK(0, "att[bh=%lld, t=%lld, u=%lld] above the "
                                 "diagonal is %.9g, not exactly 0",
                              (long long)bh, (long long)t, (long long)u, (double)v);
                }
            }
    printf("  %-44s %lld nonzero\n", "att above the diagonal", (long long)above);
    CHECK(above == 0, "%lld att entries above the diagonal are not exactly 0",
          (long long)above);

    tu_numeric_grad(attn_loss, &c, c.qkv, nq, num);

    /* Split the check by thirds so a failure says which of q/k/v. */
    static const char *part[3] = {"dq", "dk", "dv"};
    double *n3 = ALLOC(double, no);
    float *a3 = ALLOC(float, no);
    for (int pass = 0; pass < 2; pass++) {
        const double *ref = num;
        if (pass == 0) {
            fill_nan(dqkv, nq);
            pl_cpu_attention_backward(dqkv, r, qkv, att, B, T, C, NH, 0);
        } else {
            tu_fill(prev, nq, -2, 2);
            memcpy(dqkv, prev, nq * sizeof *dqkv);
            pl_cpu_attention_backward(dqkv, r, qkv, att, B, T, C, NH, 1);
            tu_plus(exp_acc, prev, num, nq);
            ref = exp_acc;
        }
        for (int p = 0; p < 3; p++) {
            for (int64_t bt = 0; bt < B * T; bt++)
                for (int64_t i = 0; i < C; i++) {
                    n3[bt * C + i] = ref[bt * 3 * C + p * C + i];
                    a3[bt * C + i] = dqkv[bt * 3 * C + p * C + i];
                }
            char what[64];
            snprintf(what, sizeof what, "attention %s%s", part[p],
                     pass ? " accumulate" : "");
            tu_expect_close(what, a3, n3, no, GRAD_TOL);
        }
    }
    free(n3);
    free(a3);
    free(qkv); free(r); free(out); free(att); free(dqkv); free(prev);
    free(out_ref); free(att_ref); free(num); free(exp_acc);
    free(c.qkv); free(c.r); free(c.out);
}

/* Causality, bit for bit: changing k, v (or q) at position t0 leaves every
 * output row and att row at t < t0 unchanged, and the other batch entirely
 * unchanged. Also the backward: dout at t < t0 only cannot reach dk, dv at
 * t0 (exactly zero there). */
static void test_attention_causal(void) {
    enum { B = 2, T = 5, C = 8, NH = 2 };
    const int64_t nq = B * T * 3 * C, no = B * T * C;
    printf("attention causal mask (B=%d, T=%d, C=%d, NH=%d)\n", B, T, C, NH);
    float qkv[B * T * 3 * C], pert[B * T * 3 * C];
    float out0[B * T * C], att0[B * NH * T * T], out1[B * T * C], att1[B * NH * T * T];
    tu_fill(qkv, nq, -1.5f, 1.5f);
    pl_cpu_attention_forward(out0, att0, qkv, B, T, C, NH);

    static const char *part[3] = {"q", "k", "v"};
    int changed_rows = 0, violations = 0;
    for (int b = 0; b < B; b++)
        for (int t0 = 1; t0 < T; t0++)
            for (int p = 0; p < 3; p++) {
                memcpy(pert, qkv, sizeof pert);
                for (int i = 0; i < C; i++)
                    pert[(b * T + t0) * 3 * C + p * C + i] += tu_uniform(0.5f, 3.0f);
                pl_cpu_attention_forward(out1, att1, pert, B, T, C, NH);
                for (int bb = 0; bb < B; bb++)
                    for (int t = 0; t < T; t++) {
                        /* Rows that must not move: the other batch entry,
                         * every t < t0, and for q also every t > t0. */
                        bool fixed = bb != b || t < t0 || (p == 0 && t > t0);
                        const float *o0 = out0 + (bb * T + t) * C;
                        const float *o1 = out1 + (bb * T + t) * C;
                        bool same = memcmp(o0, o1, C * sizeof *o0) == 0;
                        for (int h = 0; h < NH; h++) {
                            int64_t off = ((bb * NH + h) * T + t) * T;
                            same = same && memcmp(att0 + off, att1 + off,
                                                  T * sizeof *att0) == 0;
                        }
                        if (fixed && !same) {
                            violations++;
                            CHECK(0, "perturbing %s at b=%d t0=%d changed "
                                     "out/att of b=%d t=%d",
                                  part[p], b, t0, bb, t);
                        }
                        if (bb == b && t == t0 && !same) changed_rows++;
                    }
            }
    printf("  %-44s %d violations\n", "future q/k/v leave other rows exact", violations);
    /* Sanity: the perturbation is real (the row at t0 itself moves). */
    CHECK(changed_rows == B * (T - 1) * 3,
          "only %d of %d perturbations changed their own row", changed_rows,
          B * (T - 1) * 3);

    /* Backward: with dout zero at every t ≥ t0, no gradient reaches k or v
     * at positions ≥ t0 (they are only attended from t ≥ t0), nor q at
     * those positions. */
    float dout[B * T * C], dqkv[B * T * 3 * C];
    int bad = 0;
    for (int t0 = 1; t0 < T; t0++) {
        tu_fill(dout, no, -1, 1);
        for (int b = 0; b < B; b++)
            for (int t = t0; t < T; t++)
                for (int i = 0; i < C; i++) dout[(b * T + t) * C + i] = 0.0f;
        fill_nan(dqkv, nq);
        pl_cpu_attention_backward(dqkv, dout, qkv, att0, B, T, C, NH, 0);
        for (int b = 0; b < B; b++)
            for (int t = t0; t < T; t++)
                for (int i = 0; i < 3 * C; i++)
                    if (!(dqkv[(b * T + t) * 3 * C + i] == 0.0f)) {
                        if (bad++ == 0)
                            CHECK(0, "dout zero from t0=%d on, but d%s[b=%d, "
                                     "t=%d, %d] = %.9g (want exactly 0)",
                                  t0, part[i / C], b, t, i % C,
                                  (double)dqkv[(b * T + t) * 3 * C + i]);
                    }
    }
    printf("  %-44s %d nonzero\n", "dqkv at t >= t0 from dout at t < t0", bad);
    CHECK(bad == 0, "%d dqkv entries nonzero where only the future could reach", bad);
}

/* Large scores (|q·k|/sqrt(HS) up to ~200, exp overflows fp32 without the
 * max shift): att stays finite, rows sum to 1, and out matches double. The
 * tolerance is looser: an fp32 score of size ~200 carries an absolute
 * error ~200·6e-8 ≈ 1e-5, which exp turns into that relative error in p. */
static void test_attention_large_scores(void) {
    enum { B = 1, T = 6, C = 8, NH = 2 };
    const int64_t nq = B * T * 3 * C, no = B * T * C, na = B * NH * T * T;
    printf("attention large scores (B=%d, T=%d, C=%d, NH=%d, qkv in [-10, 10))\n",
           B, T, C, NH);
    float qkv[B * T * 3 * C], out[B * T * C], att[B * NH * T * T];
    double qd[B * T * 3 * C], out_ref[B * T * C], att_ref[B * NH * T * T];
    tu_fill(qkv, nq, -10.0f, 10.0f);
    tu_widen(qd, qkv, nq);
    pl_cpu_attention_forward(out, att, qkv, B, T, C, NH);
    attention_ref(out_ref, att_ref, qd, B, T, C, NH);
    double worst_sum = 0.0;
    int nonfinite = 0;
    for (int64_t i = 0; i < na; i++) nonfinite += !isfinite(att[i]);
    for (int64_t i = 0; i < no; i++) nonfinite += !isfinite(out[i]);
    for (int64_t row = 0; row < B * NH * T; row++) {
        double s = 0.0;
        for (int u = 0; u < T; u++) s += att[row * T + u];
        if (fabs(s - 1.0) > worst_sum) worst_sum = fabs(s - 1.0);
    }
    printf("  %-44s %d non-finite, max|Σrow − 1| %.2e\n", "att/out", nonfinite,
           worst_sum);
    CHECK(nonfinite == 0, "%d non-finite att/out values with large scores", nonfinite);
    CHECK(worst_sum < 1e-5, "att rows sum to 1 ± %.3e with large scores", worst_sum);
    tu_expect_close("attention large-score out", out, out_ref, no, 1e-4);
    tu_expect_close("attention large-score att", att, att_ref, na, 1e-4);
}

/* ------------------------------------------------------------ layernorm */

enum { LNN = 5, LNC = 12, LN_BIG = LNN - 1 };
#define LN_EPS_REF 1e-5

typedef struct ln_ctx {
    double x[LNN * LNC], w[LNC], b[LNC], r[LNN * LNC];
} ln_ctx;

/* y = (x − μ) / sqrt(σ² + eps) · w + b over each row, σ² biased, two-pass
 * in double. */
static void layernorm_ref(const ln_ctx *c, double *out) {
    for (int i = 0; i < LNN; i++) {
        const double *x = c->x + i * LNC;
        double mu = 0.0, var = 0.0;
        for (int j = 0; j < LNC; j++) mu += x[j];
        mu /= LNC;
        for (int j = 0; j < LNC; j++) var += (x[j] - mu) * (x[j] - mu);
        var /= LNC;
        double rs = 1.0 / sqrt(var + LN_EPS_REF);
        for (int j = 0; j < LNC; j++)
            out[i * LNC + j] = (x[j] - mu) * rs * c->w[j] + c->b[j];
    }
}

static double layernorm_loss(void *ctx) {
    ln_ctx *c = ctx;
    double out[LNN * LNC];
    layernorm_ref(c, out);
    return dot_r(out, c->r, LNN * LNC);
}

static void test_layernorm(void) {
    printf("layernorm (N=%d, C=%d; row %d at offset 1e3 + noise in [-0.5, 0.5))\n",
           LNN, LNC, LN_BIG);
    const int nx = LNN * LNC;
    float x[LNN * LNC], w[LNC], b[LNC], r[LNN * LNC], out[LNN * LNC];
    tu_fill(x, nx, -2, 2);
    /* A row with a large common offset: a one-pass E[x²] − E[x]² in fp32
     * would lose every digit of its variance (~0.08 vs 1e6). */
    for (int j = 0; j < LNC; j++) x[LN_BIG * LNC + j] = 1000.0f + tu_uniform(-0.5f, 0.5f);
    tu_fill(w, LNC, 0.5f, 1.5f);
    for (int j = 0; j < LNC; j += 3) w[j] = -w[j]; /* some negative scales */
    tu_fill(b, LNC, -0.5f, 0.5f);
    tu_fill(r, nx, -1, 1);
    ln_ctx c;
    tu_widen(c.x, x, nx);
    tu_widen(c.w, w, LNC);
    tu_widen(c.b, b, LNC);
    tu_widen(c.r, r, nx);

    double ref[LNN * LNC];
    layernorm_ref(&c, ref);
    fill_nan(out, nx);
    pl_cpu_layernorm_forward(out, x, w, b, LNN, LNC);
    tu_expect_close("layernorm forward", out, ref, nx, FWD_TOL);
    tu_expect_close("layernorm forward, offset row only", out + LN_BIG * LNC,
                    ref + LN_BIG * LNC, LNC, FWD_TOL);

    double nxg[LNN * LNC], nw[LNC], nb[LNC];
    tu_numeric_grad(layernorm_loss, &c, c.x, nx, nxg);
    tu_numeric_grad(layernorm_loss, &c, c.w, LNC, nw);
    tu_numeric_grad(layernorm_loss, &c, c.b, LNC, nb);

    float dx[LNN * LNC], dw[LNC], db[LNC];
    fill_nan(dx, nx);
    fill_nan(dw, LNC);
    fill_nan(db, LNC);
    pl_cpu_layernorm_backward_input(dx, r, x, w, LNN, LNC, 0);
    pl_cpu_layernorm_backward_weight(dw, db, r, x, LNN, LNC, 0);
    tu_expect_close("layernorm dinp", dx, nxg, nx, GRAD_TOL);
    /* Normalised on its own scale: the offset row's gradient is ~1/σ ≈ 3.5
     * times the others', so the whole-tensor measure would hide the rest. */
    tu_expect_close("layernorm dinp, normal rows only", dx, nxg, LN_BIG * LNC, GRAD_TOL);
    tu_expect_close("layernorm dinp, offset row only", dx + LN_BIG * LNC,
                    nxg + LN_BIG * LNC, LNC, GRAD_TOL);
    tu_expect_close("layernorm dweight", dw, nw, LNC, GRAD_TOL);
    tu_expect_close("layernorm dbias", db, nb, LNC, GRAD_TOL);

    /* The offset row's own contribution to dweight (Σ over that row only). */
    {
        float dw1[LNC], db1[LNC];
        double nw1[LNC];
        for (int j = 0; j < LNC; j++)
            nw1[j] = 0.0;
        /* d/dw_j of Σ_row out·r restricted to the offset row = r_j · x̂_j,
         * which FD gives by zeroing R elsewhere. */
        ln_ctx c1 = c;
        for (int i = 0; i < nx; i++)
            if (i / LNC != LN_BIG) c1.r[i] = 0.0;
        tu_numeric_grad(layernorm_loss, &c1, c1.w, LNC, nw1);
        pl_cpu_layernorm_backward_weight(dw1, db1, r + LN_BIG * LNC, x + LN_BIG * LNC, 1,
                                         LNC, 0);
        tu_expect_close("layernorm dweight, offset row only", dw1, nw1, LNC, GRAD_TOL);
    }

    /* Accumulate paths: the gradient is added to what was there. */
    float px[LNN * LNC], pw[LNC], pb[LNC];
    double ex[LNN * LNC], ew[LNC], eb[LNC];
    tu_fill(px, nx, -2, 2);
    tu_fill(pw, LNC, -2, 2);
    tu_fill(pb, LNC, -2, 2);
    memcpy(dx, px, sizeof dx);
    memcpy(dw, pw, sizeof dw);
    memcpy(db, pb, sizeof db);
    pl_cpu_layernorm_backward_input(dx, r, x, w, LNN, LNC, 1);
    pl_cpu_layernorm_backward_weight(dw, db, r, x, LNN, LNC, 1);
    tu_plus(ex, px, nxg, nx);
    tu_plus(ew, pw, nw, LNC);
    tu_plus(eb, pb, nb, LNC);
    tu_expect_close("layernorm dinp accumulate", dx, ex, nx, GRAD_TOL);
    tu_expect_close("layernorm dweight accumulate", dw, ew, LNC, GRAD_TOL);
    tu_expect_close("layernorm dbias accumulate", db, eb, LNC, GRAD_TOL);
}

/* ------------------------------------------------------------ embedding */

enum { EB = 2, ET = 5, EC = 4, EV = 6 };

/* Repeats within a batch entry and across entries (token 3 four times,
 * token 1 three times), token V − 1, and two out-of-range tokens (−1, V). */
static const int32_t emb_tokens[EB * ET] = {3, 1, 3, 5, 0,
                                            1, 3, -1, 3, EV};
enum { EMB_BAD = 2 };

typedef struct emb_ctx {
    double wte[EV * EC], wpe[ET * EC], r[EB * ET * EC];
} emb_ctx;

/* out[b,t] = wte[tok] + wpe[t]; an out-of-range token gives a zero row. */
static void embedding_ref(const emb_ctx *c, double *out) {
    for (int b = 0; b < EB; b++)
        for (int t = 0; t < ET; t++) {
            int32_t tok = emb_tokens[b * ET + t];
            for (int j = 0; j < EC; j++)
                out[(b * ET + t) * EC + j] =
                    tok < 0 || tok >= EV ? 0.0 : c->wte[tok * EC + j] + c->wpe[t * EC + j];
        }
}

static double embedding_loss(void *ctx) {
    emb_ctx *c = ctx;
    double out[EB * ET * EC];
    embedding_ref(c, out);
    return dot_r(out, c->r, EB * ET * EC);
}

static void test_embedding(void) {
    printf("embedding (B=%d, T=%d, C=%d, V=%d; repeated and out-of-range tokens)\n",
           EB, ET, EC, EV);
    const int no = EB * ET * EC, nte = EV * EC, npe = ET * EC;
    float wte[EV * EC], wpe[ET * EC], r[EB * ET * EC], out[EB * ET * EC];
    tu_fill(wte, nte, -1, 1);
    tu_fill(wpe, npe, -1, 1);
    tu_fill(r, no, -1, 1);
    emb_ctx c;
    tu_widen(c.wte, wte, nte);
    tu_widen(c.wpe, wpe, npe);
    tu_widen(c.r, r, no);

    double ref[EB * ET * EC];
    embedding_ref(&c, ref);
    fill_nan(out, no);
    int64_t bad = 7; /* a running count: the kernel adds to it */
    pl_cpu_embedding_forward(out, emb_tokens, wte, wpe, EB, ET, EC, EV, &bad);
    tu_expect_close("embedding forward", out, ref, no, FWD_TOL);
    printf("  %-44s %lld (want %d)\n", "bad_tokens after 7 + forward",
           (long long)bad, 7 + EMB_BAD);
    CHECK(bad == 7 + EMB_BAD, "bad_tokens = %lld, want %d", (long long)bad,
          7 + EMB_BAD);
    int nonzero = 0;
    for (int i = 0; i < EB * ET; i++)
        if (emb_tokens[i] < 0 || emb_tokens[i] >= EV)
            for (int j = 0; j < EC; j++) nonzero += !(out[i * EC + j] == 0.0f);
    printf("  %-44s %d nonzero\n", "out rows of out-of-range tokens", nonzero);
    CHECK(nonzero == 0, "%d values of out-of-range token rows are not exactly 0",
          nonzero);

    double nte_g[EV * EC], npe_g[ET * EC];
    tu_numeric_grad(embedding_loss, &c, c.wte, nte, nte_g);
    tu_numeric_grad(embedding_loss, &c, c.wpe, npe, npe_g);

    /* Every combination of the two accumulate flags: an overwritten
     * gradient starts as NaN, an accumulated one as random values. */
    for (int acc_te = 0; acc_te < 2; acc_te++)
        for (int acc_pe = 0; acc_pe < 2; acc_pe++) {
            float dte[EV * EC], dpe[ET * EC], pte[EV * EC], ppe[ET * EC];
            double ete[EV * EC], epe[ET * EC];
            tu_fill(pte, nte, -2, 2);
            tu_fill(ppe, npe, -2, 2);
            if (acc_te) memcpy(dte, pte, sizeof dte);
            else fill_nan(dte, nte);
            if (acc_pe) memcpy(dpe, ppe, sizeof dpe);
            else fill_nan(dpe, npe);
            pl_cpu_embedding_backward_weight(dte, dpe, r, emb_tokens, EB, ET, EC, EV,
                                             acc_te, acc_pe);
            if (acc_te) tu_plus(ete, pte, nte_g, nte);
            else memcpy(ete, nte_g, sizeof ete);
            if (acc_pe) tu_plus(epe, ppe, npe_g, npe);
            else memcpy(epe, npe_g, sizeof epe);
            char what[64];
            snprintf(what, sizeof what, "embedding dwte (acc_wte=%d, acc_wpe=%d)",
                     acc_te, acc_pe);
            tu_expect_close(what, dte, ete, nte, GRAD_TOL);
            snprintf(what, sizeof what, "embedding dwpe (acc_wte=%d, acc_wpe=%d)",
                     acc_te, acc_pe);
            tu_expect_close(what, dpe, epe, npe, GRAD_TOL);
        }
}

/* --------------------------------------------------------------- matmul */

enum { MN = 6, MC = 5, MOC = 7 };

typedef struct mm_ctx {
    double x[MN * MC], w[MOC * MC], r[MN * MOC];
} mm_ctx;

/* out[i,o] = Σ_k x[i,k] · w[o,k] */
static void matmul_ref(const mm_ctx *c, double *out) {
    for (int i = 0; i < MN; i++)
        for (int o = 0; o < MOC; o++) {
            double s = 0.0;
            for (int k = 0; k < MC; k++) s += c->x[i * MC + k] * c->w[o * MC + k];
            out[i * MOC + o] = s;
        }
}

static double matmul_loss(void *ctx) {
    mm_ctx *c = ctx;
    double out[MN * MOC];
    matmul_ref(c, out);
    return dot_r(out, c->r, MN * MOC);
}

static void test_matmul(void) {
    printf("matmul (N=%d, C=%d, OC=%d)\n", MN, MC, MOC);
    const int nx = MN * MC, nw = MOC * MC, no = MN * MOC;
    float x[MN * MC], w[MOC * MC], r[MN * MOC], out[MN * MOC];
    tu_fill(x, nx, -1, 1);
    tu_fill(w, nw, -1, 1);
    tu_fill(r, no, -1, 1);
    mm_ctx c;
    tu_widen(c.x, x, nx);
    tu_widen(c.w, w, nw);
    tu_widen(c.r, r, no);

    double ref[MN * MOC];
    matmul_ref(&c, ref);
    fill_nan(out, no);
    pl_cpu_linear_tied_forward(out, x, w, MN, MC, MOC);
    tu_expect_close("matmul forward", out, ref, no, FWD_TOL);

    double nxg[MN * MC], nwg[MOC * MC];
    tu_numeric_grad(matmul_loss, &c, c.x, nx, nxg);
    tu_numeric_grad(matmul_loss, &c, c.w, nw, nwg);

    float dx[MN * MC], dw[MOC * MC];
    fill_nan(dx, nx);
    fill_nan(dw, nw);
    pl_cpu_linear_backward_input(dx, r, w, MN, MC, MOC, 0);
    pl_cpu_linear_tied_backward_weight(dw, r, x, MN, MC, MOC, 0);
    tu_expect_close("matmul dinp (linear_backward_input)", dx, nxg, nx, GRAD_TOL);
    tu_expect_close("matmul dweight", dw, nwg, nw, GRAD_TOL);

    float px[MN * MC], pw[MOC * MC];
    double ex[MN * MC], ew[MOC * MC];
    tu_fill(px, nx, -2, 2);
    tu_fill(pw, nw, -2, 2);
    memcpy(dx, px, sizeof dx);
    memcpy(dw, pw, sizeof dw);
    pl_cpu_linear_backward_input(dx, r, w, MN, MC, MOC, 1);
    pl_cpu_linear_tied_backward_weight(dw, r, x, MN, MC, MOC, 1);
    tu_plus(ex, px, nxg, nx);
    tu_plus(ew, pw, nwg, nw);
    tu_expect_close("matmul dinp accumulate", dx, ex, nx, GRAD_TOL);
    tu_expect_close("matmul dweight accumulate", dw, ew, nw, GRAD_TOL);
}

int main(void) {
    tu_rng_seed(0x7ea5f0a11ce5u);
    test_attention_grads(2, 5, 8, 2);
    test_attention_grads(1, 6, 12, 4); /* HS = 3: scale 1/sqrt(3) */
    test_attention_causal();
    test_attention_large_scores();
    test_layernorm();
    test_embedding();
    test_matmul();
    if (tu_failures) {
        printf("FAIL: %d transformer gradcheck failure(s)\n", tu_failures);
        return 1;
    }
    printf("gradcheck_transformer: all checks passed\n");
    return 0;
}
