/* Mixed precision (pl_engine_options.precision fp16 / bf16):
 *
 *  1. the 16-bit conversions round to nearest even as independent
 *     references do: fp16 against the compiler's own _Float16 conversion,
 *     bf16 against a rounding formed in double with frexp/ldexp; specials
 *     (±0, subnormals, the largest finite values, overflow to inf, NaN);
 *  2. every built-in op in 16-bit storage agrees with its fp32 run within
 *     the stated tolerance (relative to the fp32 values' largest
 *     magnitude): the output, the loss and every parameter gradient, on a
 *     graph linear → op → MSE against a target (so gradients are not
 *     uniform);
 *  3. MLP and GPT training in bf16 and fp16 track fp32 over 200 steps: the
 *     mean loss of the last 20 steps within 0.05 + 5 % of fp32's, and all
 *     of them learn (the loss at least halves);
 *  4. master weights: SGD updates far below half a bf16 step are kept by
 *     the fp32 master weights (the bf16 weights move) and lost without
 *     them (master_weights = false: they do not move);
 *  5. fp16 overflows for real: with a loss scale of 2^30 the scaled
 *     gradients exceed fp16's 65504 and become inf, the scaler skips
 *     those updates (no parameter changes) and backs off exactly as
 *     Colossal-AI's rule says until the updates are clean; the same scale
 *     in fp32 does not overflow;
 *  6. force_outputs_fp32: the graph's output is rounded to bf16 like any
 *     activation by default and kept in fp32 with it on;
 *  7. bad options are refused naming the field;
 *  8. bf16 products (ops/gemm_bf16.c, oneDNN on AVX512-BF16), where this
 *     machine has them: pl_gemm_bf16 in each layout the kernels use
 *     (plain, transposed weight, transposed source; bias; adding to the
 *     destination; an fp32 destination) equals the product of the same
 *     bf16 values formed in double and rounded once to bf16 (or fp32),
 *     within one bf16 rounding plus fp32 accumulation error; and a bf16
 *     engine's linear, tied-matmul
 *     and attention tasks take that path (the product count grows) and
 *     agree with the widening path (products turned off) within 1e-2 of
 *     the largest value (the same bf16 operands, sums in another order;
 *     attention, which rounds two more intermediates, within 2e-2);
 *  9. the elementwise ops' bf16 kernels (relu, gelu, add: blocks widened
 *     in L1) give bitwise what the widening path gives (the fp32 kernel
 *     on the widened tile, rounded), across block boundaries, with and
 *     without accumulation, on any CPU.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pleiades.h"
#include "reference_util.h"
#include "test_util.h"
#include "ops/gemm_bf16.h"
#include "ops/kernels.h"
#include "util/half.h"

/* ------------------------------------------------------ 1. conversions */

/* bf16 by a route of its own: the value's 8 significant bits rounded
 * half-to-even in double. */
static float ref_bf16(float x) {
    if (isnan(x) || isinf(x) || x == 0.0f) return x;
    int exp;
    double m = frexp((double)x, &exp); /* x = m · 2^exp, 0.5 <= |m| < 1 */
    if (exp < -125) { /* fp32 subnormals: bf16 keeps its unit 2^-133 */
        double r = nearbyint(ldexp((double)x, 133));
        return (float)ldexp(r, -133);
    }
    double r = nearbyint(ldexp(m, 8)); /* 8 significant bits */
    double v = ldexp(r, exp - 8);
    return v > (double)FLT_MAX ? (x > 0 ? INFINITY : -INFINITY) : (float)v;
}

static void check_conversions(void) {
    uint64_t s = 11;
    int bad16 = 0, badb = 0, n = 0;
    for (int i = 0; i < 2000000; i++, n++) {
        uint32_t bits = (uint32_t)(tu_splitmix64(&s) >> 32);
        float x = pl_bits_float(bits);
        /* Concentrate half the draws on fp16's range. */
        if (i & 1) x = (float)ldexp((double)((int32_t)bits) / 2147483648.0, (int)(i % 40) - 26);
        if (isnan(x)) continue;
        _Float16 h = (_Float16)x;
        uint16_t want16;
        memcpy(&want16, &h, sizeof want16);
        if (pl_fp16_from_float(x) != want16) {
            if (bad16++ < 5)
                printf("FAIL fp16(%a) = 0x%04x, _Float16 says 0x%04x\n", (double)x,
                       pl_fp16_from_float(x), want16);
        }
        if (pl_fp16_to_float(want16) != (float)h && !isnan((float)h)) bad16++;
        float b = pl_bf16_to_float(pl_bf16_from_float(x)), rb = ref_bf16(x);
        if (memcmp(&b, &rb, sizeof b) != 0 && badb++ < 5)
            printf("FAIL bf16(%a) = %a, the reference %a\n", (double)x, (double)b, (double)rb);
    }
    CHECK(bad16 == 0, "%d of %d fp16 conversions differ from _Float16's", bad16, n);
    /* The buffer conversions (F16C on x86 CPUs that have it, vectorised
     * loops otherwise) give the scalar ones' bits, NaN aside. */
    enum { NB = 100003 }; /* not a multiple of any vector width */
    float *xs = tu_xmalloc(NB * sizeof *xs), *back = tu_xmalloc(NB * sizeof *back);
    uint16_t *hs = tu_xmalloc(NB * sizeof *hs);
    for (int i = 0; i < NB; i++) {
        xs[i] = (float)ldexp((double)(int32_t)(tu_splitmix64(&s) >> 32) / 2147483648.0,
                             (int)(i % 44) - 28);
        if (i % 1000 == 7) xs[i] = i % 2 ? INFINITY : -70000.0f;
    }
    for (int bf = 0; bf < 2; bf++) {
        int bad = 0;
        pl_half_from_float(bf, xs, hs, NB);
        pl_half_to_float(bf, hs, back, NB);
        for (int i = 0; i < NB; i++) {
            uint16_t want = bf ? pl_bf16_from_float(xs[i]) : pl_fp16_from_float(xs[i]);
            float wb = bf ? pl_bf16_to_float(want) : pl_fp16_to_float(want);
            bad += hs[i] != want || memcmp(&back[i], &wb, sizeof wb) != 0;
        }
        CHECK(bad == 0, "%s buffer conversions: %d of %d differ from the scalar ones",
              bf ? "bf16" : "fp16", bad, NB);
    }
    free(xs);
    free(back);
    free(hs);
    CHECK(badb == 0, "%d of %d bf16 conversions differ from the reference", badb, n);
    /* Specials, by value. */
    CHECK(pl_fp16_from_float(65504.0f) == 0x7bff, "fp16 65504 is the largest finite");
    CHECK(pl_fp16_from_float(65519.0f) == 0x7bff, "fp16 65519 rounds down to 65504");
    CHECK(pl_fp16_from_float(65520.0f) == 0x7c00, "fp16 65520 rounds to inf");
    CHECK(pl_fp16_from_float(-1e9f) == 0xfc00, "fp16 -1e9 is -inf");
    CHECK(pl_fp16_from_float(0x1p-24f) == 0x0001, "fp16 2^-24 is the smallest subnormal");
    CHECK(pl_fp16_from_float(0x1p-25f) == 0x0000, "fp16 2^-25 ties to even: 0");
    CHECK(pl_fp16_from_float(0x1.8p-24f) == 0x0002, "fp16 1.5·2^-24 ties to even: 2");
    CHECK(pl_fp16_from_float(-0.0f) == 0x8000, "fp16 keeps -0");
    CHECK(isnan(pl_fp16_to_float(pl_fp16_from_float(NAN))), "fp16 keeps NaN");
    CHECK(pl_bf16_from_float(1.0f + 0x1p-8f) == 0x3f80, "bf16 1+2^-8 ties to even: 1");
    CHECK(pl_bf16_from_float(1.0f + 0x1.8p-7f) == 0x3f82, "bf16 1+1.5·2^-7 ties up");
    CHECK(pl_bf16_from_float(FLT_MAX) == 0x7f80, "bf16 FLT_MAX rounds to inf");
    CHECK(isnan(pl_bf16_to_float(pl_bf16_from_float(NAN))), "bf16 keeps NaN");
    printf("conversions: %d values, fp16 as _Float16, bf16 as the reference\n", n);
}

/* ------------------------------------------------- shared small pieces */

static pl_engine_options options_for(int batch, pl_precision p) {
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = batch;
    eo.tiles = 2;
    eo.precision = p;
    return eo;
}

static const char *pname(pl_precision p) {
    return p == PL_PRECISION_BF16 ? "bf16" : p == PL_PRECISION_FP16 ? "fp16" : "fp32";
}

static float *param_values(pl_engine_t *e, const pl_tensor_t *t, bool grad) {
    int64_t n = pl_tensor_numel(t);
    float *v = tu_xmalloc((size_t)n * sizeof *v);
    CHECK_PL(grad ? pl_engine_get_grad(e, t, v, (size_t)n) : pl_engine_get_param(e, t, v, (size_t)n));
    return v;
}

/* max |got − ref| / max |ref| (0 when ref is all zero and got equals it). */
static double rel_error(const float *got, const float *ref, int64_t n) {
    double diff = 0.0, mag = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]);
        if (!(d <= diff)) diff = d; /* NaN counts as the worst */
        if (fabs((double)ref[i]) > mag) mag = fabs((double)ref[i]);
    }
    return mag > 0 ? diff / mag : diff;
}

/* ------------------------------------------------------- 2. every op */

enum { OB = 4, OT = 4, OC = 8, VOCAB = 11 };

typedef pl_tensor_t *(*op_build)(pl_graph_t *g, pl_tensor_t *x, pl_tensor_t *tokens);

static pl_tensor_t *h_of(pl_graph_t *g, pl_tensor_t *x, const char *name) {
    return pl_linear(g, x, OC, name);
}
static pl_tensor_t *b_linear(pl_graph_t *g, pl_tensor_t *x, pl_tensor_t *t) {
    (void)t;
    return pl_linear(g, x, 6, "fc");
}
static pl_tensor_t *b_relu(pl_graph_t *g, pl_tensor_t *x, pl_tensor_t *t) {
    (void)t;
    return pl_relu(g, h_of(g, x, "fc"));
}
static pl_tensor_t *b_gelu(pl_graph_t *g, pl_tensor_t *x, pl_tensor_t *t) {
    (void)t;
    return pl_gelu(g, h_of(g, x, "fc"));
}
static pl_tensor_t *b_silu(pl_graph_t *g, pl_tensor_t *x, pl_tensor_t *t) {
    (void)t;
    return pl_silu(g, h_of(g, x, "fc"));
}
static pl_tensor_t *b_softmax(pl_graph_t *g, pl_tensor_t *x, pl_tensor_t *t) {
    (void)t;
    return pl_softmax(g, h_of(g, x, "fc"));
}
static pl_tensor_t *b_layernorm(pl_graph_t *g, pl_tensor_t *x, pl_tensor_t *t) {
    (void)t;
    return pl_layernorm(g, h_of(g, x, "fc"), "ln");
}
static pl_tensor_t *b_rmsnorm(pl_graph_t *g, pl_tensor_t *x, pl_tensor_t *t) {
    (void)t;
    return pl_rmsnorm(g, h_of(g, x, "fc"), "rms");
}
static pl_tensor_t *b_add(pl_graph_t *g, pl_tensor_t *x, pl_tensor_t *t) {
    (void)t;
    return pl_add(g, h_of(g, x, "a"), h_of(g, x, "b"), "sum");
}
static pl_tensor_t *b_mul(pl_graph_t *g, pl_tensor_t *x, pl_tensor_t *t) {
    (void)t;
    return pl_mul(g, h_of(g, x, "a"), h_of(g, x, "b"), "prod");
}
static pl_tensor_t *b_sub(pl_graph_t *g, pl_tensor_t *x, pl_tensor_t *t) {
    (void)t;
    return pl_sub(g, h_of(g, x, "a"), h_of(g, x, "b"), "diff");
}
static pl_tensor_t *b_scale(pl_graph_t *g, pl_tensor_t *x, pl_tensor_t *t) {
    (void)t;
    return pl_scale(g, h_of(g, x, "fc"), 0.75f, "half");
}
static pl_tensor_t *b_dropout(pl_graph_t *g, pl_tensor_t *x, pl_tensor_t *t) {
    (void)t;
    return pl_dropout(g, h_of(g, x, "fc"), 0.25f, "drop");
}
static pl_tensor_t *b_matmul(pl_graph_t *g, pl_tensor_t *x, pl_tensor_t *t) {
    (void)t;
    return pl_matmul(g, h_of(g, x, "a"), h_of(g, x, "b"), false, true, "scores");
}
static pl_tensor_t *b_attention(pl_graph_t *g, pl_tensor_t *x, pl_tensor_t *t) {
    (void)t;
    return pl_attention(g, pl_linear(g, x, 3 * OC, "qkv"), 2, "attn");
}
static pl_tensor_t *b_embedding(pl_graph_t *g, pl_tensor_t *x, pl_tensor_t *t) {
    (void)x;
    return pl_embedding(g, t, VOCAB, OC, "emb");
}
static pl_tensor_t *b_tied(pl_graph_t *g, pl_tensor_t *x, pl_tensor_t *t) {
    pl_tensor_t *emb = pl_embedding(g, t, VOCAB, OC, "emb");
    pl_tensor_t *wte = pl_graph_find(g, "emb.wte");
    return pl_linear_tied(g, pl_add(g, emb, h_of(g, x, "fc"), "mix"), wte, "head");
}

typedef struct op_case {
    const char *name;
    op_build build;
    bool cross_entropy; /* the loss is cross-entropy (and accuracy, mean
                           as metrics) on the output as logits, not MSE */
} op_case;

static const op_case OPS[] = {
    {"linear", b_linear, false},       {"relu", b_relu, false},
    {"gelu", b_gelu, false},           {"silu", b_silu, false},
    {"softmax", b_softmax, false},     {"layernorm", b_layernorm, false},
    {"rmsnorm", b_rmsnorm, false},     {"add", b_add, false},
    {"mul", b_mul, false},             {"sub", b_sub, false},
    {"scale", b_scale, false},         {"dropout", b_dropout, false},
    {"batched_matmul", b_matmul, false}, {"attention", b_attention, false},
    {"embedding", b_embedding, false}, {"linear_tied", b_tied, true},
    {"cross_entropy", b_linear, true},
};

/* One forward_backward of case c: loss, output and every parameter's
 * gradient, concatenated (caller frees). */
typedef struct op_run {
    double loss;
    float *out, *grads;
    int64_t n_out, n_grads;
    double metrics[2];
} op_run;

static op_run run_op(pl_runtime_t *rt, const op_case *c, pl_precision p) {
    pl_graph_t *g = pl_graph_new(21);
    int64_t xs[2] = {OT, 5}, ts[1] = {OT};
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 2, xs);
    pl_tensor_t *tok = pl_graph_input(g, "tokens", PL_DTYPE_I32, 1, ts);
    pl_tensor_t *y = c->build(g, x, tok);
    int64_t ys[PL_MAX_DIMS];
    int yd = pl_tensor_shape(y, ys);
    pl_tensor_t *target = NULL, *labels = NULL;
    if (c->cross_entropy) {
        labels = pl_graph_input(g, "labels", PL_DTYPE_I32, 1, ts);
        CHECK_PL(pl_graph_set_loss(g, pl_cross_entropy(g, y, labels)));
        pl_accuracy(g, y, labels);
        pl_mean(g, y);
    } else {
        target = pl_graph_input(g, "target", PL_DTYPE_F32, yd, ys);
        CHECK_PL(pl_graph_set_loss(g, pl_mse_loss(g, y, target)));
    }
    CHECK_PL(pl_graph_set_output(g, y));
    int64_t n_x = OB * OT * 5, n_y = OB * pl_tensor_numel(y);
    float *xv = tu_xmalloc((size_t)n_x * sizeof *xv), *tv = tu_xmalloc((size_t)n_y * sizeof *tv);
    int32_t tokens[OB * OT], lab[OB * OT];
    uint64_t s = 5;
    for (int64_t i = 0; i < n_x; i++) xv[i] = (float)((tu_splitmix64(&s) >> 40) / 8388608.0 - 1.0);
    for (int64_t i = 0; i < n_y; i++) tv[i] = (float)((tu_splitmix64(&s) >> 40) / 8388608.0 - 1.0);
    int64_t classes = c->cross_entropy ? ys[yd - 1] : VOCAB;
    for (int i = 0; i < OB * OT; i++) {
        tokens[i] = (int32_t)(tu_splitmix64(&s) % VOCAB);
        lab[i] = (int32_t)(tu_splitmix64(&s) % (uint64_t)classes);
    }
    const void *data[3] = {xv, tokens, c->cross_entropy ? (const void *)lab : tv};
    pl_engine_options eo = options_for(OB, p);
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK_PTR(e, c->name);
    pl_step_options so = {.return_loss = true, .return_output_label = true};
    pl_step_result r;
    pl_batch b = {.size = OB, .data = data};
    CHECK_PL(pl_engine_forward_backward(e, &b, &so, &r));
    /* fp16 scales the loss (its gradients are read as the backward left
     * them: scaled); a power of two, so dividing is exact. */
    double scale = 1.0;
    bool overflow;
    if (p == PL_PRECISION_FP16) CHECK_PL(pl_engine_loss_scale(e, &scale, &overflow));
    op_run out = {.loss = r.loss, .n_out = n_y};
    for (int m = 0; m < r.n_metrics && m < 2; m++) out.metrics[m] = r.metrics[m];
    out.out = tu_xmalloc((size_t)n_y * sizeof *out.out);
    memcpy(out.out, r.output, (size_t)n_y * sizeof *out.out);
    for (int i = 0; i < pl_graph_num_params(g); i++) out.n_grads += pl_tensor_numel(pl_graph_param(g, i));
    out.grads = tu_xmalloc((size_t)(out.n_grads ? out.n_grads : 1) * sizeof *out.grads);
    float *dst = out.grads;
    for (int i = 0; i < pl_graph_num_params(g); i++) {
        const pl_tensor_t *t = pl_graph_param(g, i);
        float *gv = param_values(e, t, true);
        for (int64_t j = 0; j < pl_tensor_numel(t); j++) *dst++ = (float)(gv[j] / scale);
        free(gv);
    }
    pl_engine_free(e);
    pl_graph_free(g);
    free(xv);
    free(tv);
    return out;
}

static void check_ops(pl_runtime_t *rt) {
    /* A few roundings of 8 (bf16) or 11 (fp16) significant bits on the
     * way: relative errors of a few units of 2^-8 and 2^-11. */
    const struct { pl_precision p; double tol; } PRECS[] = {
        {PL_PRECISION_BF16, 2e-2}, {PL_PRECISION_FP16, 3e-3}};
    for (size_t c = 0; c < sizeof OPS / sizeof OPS[0]; c++) {
        op_run ref = run_op(rt, &OPS[c], PL_PRECISION_FP32);
        for (size_t k = 0; k < 2; k++) {
            op_run got = run_op(rt, &OPS[c], PRECS[k].p);
            double eo = rel_error(got.out, ref.out, ref.n_out);
            double eg = rel_error(got.grads, ref.grads, ref.n_grads);
            double el = fabs(got.loss - ref.loss) / fmax(fabs(ref.loss), 1e-30);
            double tol = PRECS[k].tol;
            CHECK(eo <= tol && eg <= tol && el <= tol,
                  "%s in %s: output error %.2e, gradient error %.2e, loss error %.2e "
                  "(tolerance %.0e)", OPS[c].name, pname(PRECS[k].p), eo, eg, el, tol);
            if (OPS[c].cross_entropy)
                CHECK(fabs(got.metrics[1] - ref.metrics[1]) <= tol * fmax(1.0, fabs(ref.metrics[1])),
                      "%s in %s: the mean metric %g vs fp32's %g", OPS[c].name,
                      pname(PRECS[k].p), got.metrics[1], ref.metrics[1]);
            printf("%-15s %s: output %.1e  gradients %.1e  loss %.1e\n", OPS[c].name,
                   pname(PRECS[k].p), eo, eg, el);
            free(got.out);
            free(got.grads);
        }
        free(ref.out);
        free(ref.grads);
    }
}

/* ---------------------------------------------- 3. training tracks fp32 */

enum { GV = 16, GT = 8, GB = 8, STEPS = 200 };

/* A learnable stream: each next token a fixed function of the last one,
 * with noise in 1 of 8 positions. */
static void gpt_batch(uint64_t *s, int32_t *tok, int32_t *tgt) {
    for (int b = 0; b < GB; b++) {
        int32_t c = (int32_t)(tu_splitmix64(s) % GV);
        for (int t = 0; t <= GT; t++) {
            int32_t next = (tu_splitmix64(s) % 8 == 0) ? (int32_t)(tu_splitmix64(s) % GV)
                                                       : (c * 5 + 3) % GV;
            if (t < GT) tok[b * GT + t] = c;
            if (t > 0) tgt[b * GT + t - 1] = c;
            c = next;
        }
    }
}

static pl_graph_t *gpt_graph(void) {
    pl_graph_t *g = pl_graph_new(9);
    pl_gpt_config cfg = {.vocab = GV, .context = GT, .channels = 32, .layers = 2, .heads = 2};
    pl_gpt_model m;
    CHECK_PL(pl_gpt_build(g, &cfg, &m));
    return g;
}

enum { MB = 32, MIN = 12, MHID = 32, MK = 4 };

static pl_graph_t *mlp_graph(void) {
    pl_graph_t *g = pl_graph_new(4);
    int64_t in[1] = {MIN};
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, in);
    pl_tensor_t *y = pl_graph_input(g, "y", PL_DTYPE_I32, 0, NULL);
    pl_tensor_t *h = pl_relu(g, pl_linear(g, x, MHID, "fc1"));
    pl_tensor_t *logits = pl_linear(g, h, MK, "fc2");
    CHECK_PL(pl_graph_set_loss(g, pl_cross_entropy(g, logits, y)));
    CHECK_PL(pl_graph_set_output(g, logits));
    return g;
}

/* Classes are the sign pattern of two fixed projections of x. */
static void mlp_batch(uint64_t *s, float *x, int32_t *y) {
    for (int b = 0; b < MB; b++) {
        double p0 = 0, p1 = 0;
        for (int i = 0; i < MIN; i++) {
            float v = (float)((tu_splitmix64(s) >> 40) / 8388608.0 - 1.0);
            x[b * MIN + i] = v;
            p0 += v * (i % 3 == 0 ? 1.0 : -0.5);
            p1 += v * (i % 2 == 0 ? 0.7 : -0.7);
        }
        y[b] = (p0 > 0) * 2 + (p1 > 0);
    }
}

/* Mean loss of the first and last 20 of STEPS training steps. */
static void train_curve(pl_runtime_t *rt, bool gpt, pl_precision p, double *first,
                        double *last) {
    pl_graph_t *g = gpt ? gpt_graph() : mlp_graph();
    pl_engine_options eo = options_for(gpt ? GB : MB, p);
    eo.optimizer.lr = 1e-2f;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK_PTR(e, gpt ? "pl_engine_new (gpt)" : "pl_engine_new (mlp)");
    uint64_t s = 77;
    *first = *last = 0.0;
    for (int step = 0; step < STEPS; step++) {
        int32_t tok[GB * GT], tgt[GB * GT], y[MB];
        float x[MB * MIN];
        const void *data[2];
        if (gpt) gpt_batch(&s, tok, tgt), data[0] = tok, data[1] = tgt;
        else mlp_batch(&s, x, y), data[0] = x, data[1] = y;
        pl_batch b = {.size = gpt ? GB : MB, .data = data};
        pl_step_result r;
        CHECK_PL(pl_engine_train_step(e, &b, &r));
        if (step < 20) *first += r.loss / 20;
        if (step >= STEPS - 20) *last += r.loss / 20;
    }
    pl_engine_free(e);
    pl_graph_free(g);
}

static void check_training(pl_runtime_t *rt) {
    for (int gpt = 0; gpt < 2; gpt++) {
        double f32_first, f32_last;
        train_curve(rt, gpt, PL_PRECISION_FP32, &f32_first, &f32_last);
        CHECK(f32_last < 0.5 * f32_first, "%s fp32 does not learn: %g -> %g",
              gpt ? "gpt" : "mlp", f32_first, f32_last);
        pl_precision ps[2] = {PL_PRECISION_BF16, PL_PRECISION_FP16};
        for (int k = 0; k < 2; k++) {
            double first, last;
            train_curve(rt, gpt, ps[k], &first, &last);
            double tol = 0.05 + 0.05 * f32_last;
            CHECK(fabs(last - f32_last) <= tol && last < 0.5 * first,
                  "%s %s: last-20 mean loss %g vs fp32's %g (tolerance %g), first %g",
                  gpt ? "gpt" : "mlp", pname(ps[k]), last, f32_last, tol, first);
            printf("%s %s: loss %.4f -> %.4f (fp32 %.4f -> %.4f)\n", gpt ? "gpt" : "mlp",
                   pname(ps[k]), first, last, f32_first, f32_last);
        }
    }
}

/* ------------------------------------------------- 4. master weights */

/* Fraction of fc1.weight's elements that moved from their initial value
 * after 100 SGD steps whose updates are ~1e-5: far below half a bf16 step
 * of weights ~0.2 (2^-10 ≈ 1e-3). */
static double moved_fraction(pl_runtime_t *rt, bool master) {
    pl_graph_t *g = mlp_graph();
    pl_engine_options eo = options_for(MB, PL_PRECISION_BF16);
    eo.optimizer.kind = PL_OPTIMIZER_SGD;
    eo.optimizer.lr = 1e-4f;
    eo.optimizer.weight_decay = 0.0f;
    eo.master_weights = master;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK_PTR(e, "pl_engine_new (master weights)");
    const pl_tensor_t *w = pl_graph_find(g, "fc1.weight");
    float *before = param_values(e, w, false);
    uint64_t s = 3;
    for (int step = 0; step < 100; step++) {
        float x[MB * MIN];
        int32_t y[MB];
        mlp_batch(&s, x, y);
        const void *data[2] = {x, y};
        pl_batch b = {.size = MB, .data = data};
        CHECK_PL(pl_engine_train_step(e, &b, NULL));
    }
    float *after = param_values(e, w, false);
    int64_t n = pl_tensor_numel(w), moved = 0;
    for (int64_t i = 0; i < n; i++) moved += before[i] != after[i];
    free(before);
    free(after);
    pl_engine_free(e);
    pl_graph_free(g);
    return (double)moved / (double)n;
}

static void check_master_weights(pl_runtime_t *rt) {
    double with = moved_fraction(rt, true), without = moved_fraction(rt, false);
    /* Seen: 11.5 % with, 0.5 % without (weights within 1e-5 of a
     * rounding boundary, or near zero where bf16 steps are tiny). */
    CHECK(with >= 0.05 && with >= 5 * without,
          "with master weights only %.1f %% of the weights moved (%.1f %% without)",
          100 * with, 100 * without);
    CHECK(without <= 0.02, "without master weights %.1f %% moved (updates below half a "
          "bf16 step should be lost)", 100 * without);
    printf("master weights: %.1f %% of fc1.weight moved with them, %.1f %% without\n",
           100 * with, 100 * without);
}

/* ---------------------------------------------------- 5. fp16 overflow */

static void check_fp16_overflow(pl_runtime_t *rt) {
    for (int fp16 = 1; fp16 >= 0; fp16--) {
        pl_graph_t *g = gpt_graph();
        pl_engine_options eo = options_for(GB, fp16 ? PL_PRECISION_FP16 : PL_PRECISION_FP32);
        eo.loss_scaler.enabled = true; /* fp16 turns it on by itself */
        eo.loss_scaler.initial_scale = 0x1p30;
        eo.loss_scaler.hysteresis = 2;
        pl_engine_t *e = pl_engine_new(rt, g, &eo);
        CHECK_PTR(e, "pl_engine_new (overflow)");
        const pl_tensor_t *w = pl_graph_param(g, 0);
        /* Colossal-AI's rule, written again: scale before each update. */
        double ref = 0x1p30;
        int hyst = 0, overflows = 0, skips_unchanged = 0;
        uint64_t s = 19;
        for (int step = 0; step < 16; step++) {
            int32_t tok[GB * GT], tgt[GB * GT];
            gpt_batch(&s, tok, tgt);
            const void *data[2] = {tok, tgt};
            pl_batch b = {.size = GB, .data = data};
            float *before = param_values(e, w, false);
            double scale_before;
            bool over;
            CHECK_PL(pl_engine_loss_scale(e, &scale_before, &over));
            CHECK(scale_before == ref, "%s step %d: scale %g, the rule says %g",
                  pname(eo.precision), step, scale_before, ref);
            CHECK_PL(pl_engine_train_step(e, &b, NULL));
            CHECK_PL(pl_engine_loss_scale(e, &scale_before, &over));
            float *after = param_values(e, w, false);
            if (over) {
                overflows++;
                skips_unchanged += !memcmp(before, after, (size_t)pl_tensor_numel(w) * sizeof(float));
                if (++hyst >= 2) ref = fmax(ref * 0.5, 1.0);
            }
            free(before);
            free(after);
        }
        if (fp16) {
            CHECK(overflows >= 2 && skips_unchanged == overflows,
                  "fp16 at scale 2^30: %d overflows (expected some), %d of them left the "
                  "weights unchanged", overflows, skips_unchanged);
            CHECK(ref < 0x1p30, "fp16: the scale never backed off");
            printf("fp16 at scale 2^30: %d skipped updates, scale backed off to 2^%.0f\n",
                   overflows, log2(ref));
        } else {
            CHECK(overflows == 0, "fp32 at scale 2^30 overflowed %d times", overflows);
        }
        pl_engine_free(e);
        pl_graph_free(g);
    }
}

/* ------------------------------------------------ 6. force_outputs_fp32 */

/* How many of the MLP's output logits are not bf16 values. */
static int64_t non_bf16_outputs(pl_runtime_t *rt, bool force) {
    pl_graph_t *g = mlp_graph(); /* its output: the logits */
    pl_engine_options eo = options_for(MB, PL_PRECISION_BF16);
    eo.force_outputs_fp32 = force;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK_PTR(e, "pl_engine_new (force_outputs_fp32)");
    uint64_t s = 8;
    float x[MB * MIN];
    int32_t y[MB];
    mlp_batch(&s, x, y);
    const void *data[2] = {x, y};
    pl_batch b = {.size = MB, .data = data};
    pl_step_options so = {.forward_only = true, .return_output_label = true};
    pl_step_result r;
    CHECK_PL(pl_engine_forward_backward(e, &b, &so, &r));
    int64_t odd = 0;
    for (int64_t i = 0; i < MB * MK; i++)
        odd += pl_bf16_to_float(pl_bf16_from_float(r.output[i])) != r.output[i];
    pl_engine_free(e);
    pl_graph_free(g);
    return odd;
}

static void check_force_outputs(pl_runtime_t *rt) {
    int64_t rounded = non_bf16_outputs(rt, false), kept = non_bf16_outputs(rt, true);
    CHECK(rounded == 0, "bf16 without force_outputs_fp32: %lld outputs are not bf16 values",
          (long long)rounded);
    CHECK(kept > MB * MK / 2, "force_outputs_fp32: only %lld of %d outputs carry fp32 bits",
          (long long)kept, MB * MK);
    printf("force_outputs_fp32: %lld of %d logits beyond bf16 with it, 0 without\n",
           (long long)kept, MB * MK);
}

/* ------------------------------------------------------ 7. bad options */

static void check_errors(pl_runtime_t *rt) {
    pl_graph_t *g = mlp_graph();
    pl_engine_options eo = options_for(MB, (pl_precision)7);
    tu_expect_error(__LINE__, "pl_engine_new", pl_engine_new(rt, g, &eo) ? PL_STATUS_OK
                                                                      : pl_last_status(),
                    PL_STATUS_INVALID_ARGUMENT, "precision 7", "bf16");
    eo = options_for(MB, PL_PRECISION_FP16);
    eo.loss_scaler.growth_factor = 0.5;
    tu_expect_error(__LINE__, "pl_engine_new", pl_engine_new(rt, g, &eo) ? PL_STATUS_OK
                                                                      : pl_last_status(),
                    PL_STATUS_INVALID_ARGUMENT, "growth_factor", NULL);
    pl_graph_free(g);
}

/* ------------------------------------------------- 8. bf16 products */

/* The bf16 values of M x N dst after pl_gemm_bf16 with the given strides
 * (f32: the fp32 values after pl_gemm_bf16_f32), against
 * sum_k src[m,k]·wei[k,n] (+ bias, + the old dst) in double. Operands are
 * freshly allocated and their values drawn from the shape and `salt`. */
static void check_gemm_case(int64_t M, int64_t N, int64_t K, bool src_t, bool wei_t,
                            bool bias, bool accumulate, bool f32, uint64_t salt) {
    uint64_t s = (uint64_t)(M * 131 + N * 17 + K) ^ (src_t * 2u + wei_t * 4u + bias * 8u) ^
                 (salt << 32);
    uint16_t *a = tu_xmalloc((size_t)(M * K) * 2), *w = tu_xmalloc((size_t)(K * N) * 2);
    uint16_t *b = tu_xmalloc((size_t)N * 2), *d = tu_xmalloc((size_t)(M * N) * 2);
    for (int64_t i = 0; i < M * K; i++)
        a[i] = pl_bf16_from_float((float)((tu_splitmix64(&s) >> 40) / 8388608.0 - 1.0));
    for (int64_t i = 0; i < K * N; i++)
        w[i] = pl_bf16_from_float((float)((tu_splitmix64(&s) >> 40) / 8388608.0 - 1.0));
    for (int64_t i = 0; i < N; i++) b[i] = pl_bf16_from_float((float)i / (float)N - 0.5f);
    for (int64_t i = 0; i < M * N; i++) d[i] = pl_bf16_from_float((float)(i % 7) - 3.0f);
    /* src[m,k] at m·rs + k·cs; a transposed one is stored [K, M]. */
    int64_t a_rs = src_t ? 1 : K, a_cs = src_t ? M : 1;
    int64_t w_rs = wei_t ? 1 : N, w_cs = wei_t ? K : 1;
    double worst = 0;
    double *ref = tu_xmalloc((size_t)(M * N) * sizeof *ref);
    double *mag = tu_xmalloc((size_t)(M * N) * sizeof *mag);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double r = bias ? pl_bf16_to_float(b[n]) : 0, am = fabs(r);
            if (accumulate) r += pl_bf16_to_float(d[m * N + n]), am += fabs(pl_bf16_to_float(d[m * N + n]));
            for (int64_t k = 0; k < K; k++) {
                double p = (double)pl_bf16_to_float(a[m * a_rs + k * a_cs]) *
                           pl_bf16_to_float(w[k * w_rs + n * w_cs]);
                r += p, am += fabs(p);
            }
            ref[m * N + n] = r, mag[m * N + n] = am;
        }
    float *df = tu_xmalloc((size_t)(M * N) * sizeof *df);
    int rc = f32 ? pl_gemm_bf16_f32(M, N, K, a, a_rs, a_cs, w, w_rs, w_cs, df, N)
                 : pl_gemm_bf16(M, N, K, a, a_rs, a_cs, w, w_rs, w_cs, bias ? b : NULL, d, N,
                                accumulate);
    CHECK(rc == 0, "pl_gemm_bf16 %lldx%lldx%lld returned %d", (long long)M, (long long)N,
          (long long)K, rc);
    for (int64_t i = 0; rc == 0 && i < M * N; i++) {
        /* One rounding to bf16 (half a unit of 2^-8 relative; none into
         * fp32) plus fp32 sums of K products (K · 2^-24 of their
         * magnitudes). */
        double bound = (f32 ? 0 : fabs(ref[i]) * 0x1p-8) +
                       mag[i] * (double)(K + 2) * 0x1p-24 + 1e-30;
        double err = fabs((f32 ? df[i] : pl_bf16_to_float(d[i])) - ref[i]);
        if (err / bound > worst) worst = err / bound;
    }
    CHECK(worst <= 1.0,
          "pl_gemm_bf16%s %lldx%lldx%lld (src%s, wei%s, bias %d, accumulate %d): error "
          "%.2f of the bound", f32 ? "_f32" : "", (long long)M, (long long)N, (long long)K,
          src_t ? "^T" : "", wei_t ? "^T" : "", bias, accumulate, worst);
    free(a), free(w), free(b), free(d), free(df), free(ref), free(mag);
}

static void check_bf16_products(pl_runtime_t *rt) {
    if (!pl_gemm_bf16_available()) {
        printf("bf16 products: not on this machine (no AVX512-BF16 or no oneDNN): the "
               "widening path serves bf16, checked above\n");
        return;
    }
    check_gemm_case(37, 19, 23, false, true, true, false, false, 0);  /* linear forward */
    check_gemm_case(37, 23, 19, false, false, false, true, false, 0); /* input gradient */
    check_gemm_case(19, 23, 37, true, false, false, true, false, 0);  /* weight gradient */
    check_gemm_case(64, 48, 256, true, false, false, false, false, 0);
    check_gemm_case(29, 29, 16, false, true, false, false, true, 0); /* attention scores */
    /* Each thread keeps the products it ran, by shape, and reuses them
     * with the next call's pointers (ops/gemm_bf16.c): the same shape
     * again on other buffers and values, then accumulating, then after
     * more other shapes than the cache holds (the first was evicted). */
    int64_t ran = pl_gemm_bf16_count();
    check_gemm_case(37, 19, 23, false, true, true, false, false, 1);
    check_gemm_case(37, 19, 23, false, true, true, true, false, 2);
    for (int64_t m = 1; m <= 80; m++) check_gemm_case(m, 5, 3, m % 2, false, false, false, false, 3);
    check_gemm_case(37, 19, 23, false, true, true, false, false, 4);
    CHECK(pl_gemm_bf16_count() - ran == 83, "pl_gemm_bf16: %lld of 83 products ran",
          (long long)(pl_gemm_bf16_count() - ran));
    /* linear and linear_tied: the same roundings as widening, sums in
     * another order; attention rounds its probabilities before the value
     * product and its softmax gradient before the last two (ops/attention.c),
     * so it gets bf16's op tolerance. */
    static const struct { const op_case *c; double tol; } cases[] = {
        {&OPS[0], 1e-2}, {&OPS[15], 1e-2}, {&OPS[13], 2e-2}};
    for (int i = 0; i < 3; i++) {
        const op_case *oc = cases[i].c;
        double tol = cases[i].tol;
        int64_t before = pl_gemm_bf16_count();
        op_run got = run_op(rt, oc, PL_PRECISION_BF16);
        int64_t products = pl_gemm_bf16_count() - before;
        pl_gemm_bf16_enable(false);
        op_run wide = run_op(rt, oc, PL_PRECISION_BF16);
        pl_gemm_bf16_enable(true);
        double eo = rel_error(got.out, wide.out, wide.n_out);
        double eg = rel_error(got.grads, wide.grads, wide.n_grads);
        CHECK(products >= 3, "%s in bf16: %lld bf16 products ran, expected its forward, "
              "input- and weight-gradient tasks'", oc->name, (long long)products);
        CHECK(eo <= tol && eg <= tol,
              "%s in bf16: bf16 products vs widened: output %.2e, gradients %.2e (%.0e)",
              oc->name, eo, eg, tol);
        printf("%-15s bf16 products (%lld) vs widened: output %.1e  gradients %.1e\n",
               oc->name, (long long)products, eo, eg);
        free(got.out), free(got.grads), free(wide.out), free(wide.grads);
    }
}

/* ------------------------------------- 9. elementwise bf16 kernels */

static void check_elementwise_bf16(void) {
    enum { N = 2500 }; /* two whole blocks of 1024 and a part */
    static uint16_t x[N], y[N], d[N], out[N], dx[N];
    static float xf[N], yf[N], df[N], rf[N];
    uint64_t s = 77;
    for (int i = 0; i < N; i++) {
        x[i] = pl_bf16_from_float((float)((tu_splitmix64(&s) >> 40) / 1048576.0 - 8.0));
        y[i] = pl_bf16_from_float((float)((tu_splitmix64(&s) >> 40) / 8388608.0 - 1.0));
        d[i] = pl_bf16_from_float((float)((tu_splitmix64(&s) >> 40) / 8388608.0 - 1.0));
        xf[i] = pl_bf16_to_float(x[i]), yf[i] = pl_bf16_to_float(y[i]);
        df[i] = pl_bf16_to_float(d[i]);
    }
    const struct { const char *name; const pl_op_def *def; } ops[] = {
        {"relu", &pl_op_relu}, {"gelu", &pl_op_gelu}, {"add", &pl_op_add}};
    for (int o = 0; o < 3; o++) {
        const pl_op_def *def = ops[o].def;
        bool add = def == &pl_op_add;
        pl_op_call c = {.op = ops[o].name, .samples = 1, .n_inputs = add ? 2 : 1};
        c.in[0] = x, c.in[1] = y, c.in_numel[0] = c.in_numel[1] = N;
        c.in_ndim[0] = c.in_ndim[1] = 1, c.in_shape[0][0] = c.in_shape[1][0] = N;
        c.bf16.in[0] = c.bf16.in[1] = c.bf16.out = true;
        c.out = out, c.out_numel = N;
        CHECK(def->forward.cpu_bf16 && def->forward.cpu_bf16(&c) == 0,
              "%s: the bf16 forward kernel ran", ops[o].name);
        if (add) pl_cpu_add_forward(rf, xf, yf, N);
        else if (def == &pl_op_gelu) pl_cpu_gelu_forward(rf, xf, N);
        else pl_cpu_relu_forward(rf, xf, N);
        int bad = 0;
        for (int i = 0; i < N; i++) bad += out[i] != pl_bf16_from_float(rf[i]);
        CHECK(bad == 0, "%s bf16 forward: %d of %d values differ from the widening path",
              ops[o].name, bad, N);
        for (int acc = 0; acc < 2; acc++) {
            for (int i = 0; i < N; i++) dx[i] = y[i], rf[i] = yf[i];
            c.dout = (const float *)(const void *)d;
            c.dinput = (float *)(void *)dx;
            c.input = 0;
            c.accumulate = acc;
            CHECK(def->backward_input[0].cpu_bf16 &&
                      def->backward_input[0].cpu_bf16(&c) == 0,
                  "%s: the bf16 backward kernel ran", ops[o].name);
            if (add) pl_cpu_add_backward(rf, df, N, acc);
            else if (def == &pl_op_gelu) pl_cpu_gelu_backward(rf, xf, df, N, acc);
            else pl_cpu_relu_backward(rf, xf, df, N, acc);
            bad = 0;
            for (int i = 0; i < N; i++) bad += dx[i] != pl_bf16_from_float(rf[i]);
            CHECK(bad == 0, "%s bf16 backward (accumulate %d): %d of %d values differ from "
                  "the widening path", ops[o].name, acc, bad, N);
        }
    }
    printf("elementwise bf16 kernels: relu, gelu, add bitwise the widening path\n");
}

/* LayerNorm's bf16 kernels widen one row at a time: every output, input
 * gradient (overwritten and accumulated) and weight/bias gradient
 * (overwritten and accumulated over the rows and onto old values) must be
 * bitwise what the fp32 kernels give on the widened tile, rounded once. */
static uint16_t *bf16_values(float *wide, int64_t n, double lo, double hi, uint64_t *s) {
    uint16_t *h = tu_xmalloc((size_t)n * sizeof *h);
    for (int64_t i = 0; i < n; i++) {
        double u = (double)(tu_splitmix64(s) >> 11) / 9007199254740992.0;
        h[i] = pl_bf16_from_float((float)(lo + (hi - lo) * u));
        wide[i] = pl_bf16_to_float(h[i]);
    }
    return h;
}

static int count_differing(const uint16_t *got, const float *want, int64_t n) {
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad += got[i] != pl_bf16_from_float(want[i]);
    return bad;
}

static void check_layernorm_bf16(void) {
    enum { R = 7, C = 300 }; /* C not a multiple of the kernels' 8 lanes */
    uint64_t s = 99;
    static float xf[R * C], df[R * C], gf[R * C], wf[C], bf[C], rf[R * C], rw[C], rb[C];
    uint16_t *x = bf16_values(xf, R * C, -3.0, 5.0, &s); /* rows off zero */
    uint16_t *d = bf16_values(df, R * C, -1.0, 1.0, &s);
    uint16_t *g = bf16_values(gf, R * C, -1.0, 1.0, &s); /* old gradients */
    uint16_t *w = bf16_values(wf, C, 0.5, 1.5, &s), *b = bf16_values(bf, C, -0.5, 0.5, &s);
    uint16_t *out = tu_xmalloc(sizeof(uint16_t) * R * C);
    uint16_t *dw = tu_xmalloc(sizeof(uint16_t) * C), *db = tu_xmalloc(sizeof(uint16_t) * C);
    const pl_op_def *def = &pl_op_layernorm;
    pl_op_call c = {.op = "ln", .samples = R, .n_inputs = 1, .n_params = 2};
    c.in[0] = x, c.in_ndim[0] = 1, c.in_shape[0][0] = C, c.in_numel[0] = C;
    c.param[0] = (const float *)(const void *)w, c.param[1] = (const float *)(const void *)b;
    c.bf16.in[0] = c.bf16.params = c.bf16.out = true;
    c.out = out;
    char err[128] = "";
    c.error = err, c.error_size = sizeof err;
    CHECK(def->forward.cpu_bf16 && def->forward.cpu_bf16(&c) == 0,
          "layernorm: the bf16 forward kernel ran (%s)", err);
    pl_cpu_layernorm_forward(rf, xf, wf, bf, R, C);
    int bad = count_differing(out, rf, R * C);
    CHECK(bad == 0, "layernorm bf16 forward: %d of %d values differ from the widening path",
          bad, R * C);
    c.dout = (const float *)(const void *)d;
    for (int acc = 0; acc < 2; acc++) {
        uint16_t *dx = tu_xmalloc(sizeof(uint16_t) * R * C);
        memcpy(dx, g, sizeof(uint16_t) * R * C);
        memcpy(rf, gf, sizeof rf);
        c.dinput = (float *)(void *)dx, c.input = 0, c.accumulate = acc;
        CHECK(def->backward_input[0].cpu_bf16 && def->backward_input[0].cpu_bf16(&c) == 0,
              "layernorm: the bf16 input-gradient kernel ran (%s)", err);
        pl_cpu_layernorm_backward_input(rf, df, xf, wf, R, C, acc);
        bad = count_differing(dx, rf, R * C);
        CHECK(bad == 0, "layernorm bf16 input gradient (accumulate %d): %d of %d values "
              "differ from the widening path", acc, bad, R * C);
        free(dx);
        for (int k = 0; k < C; k++) dw[k] = g[k], db[k] = g[C + k], rw[k] = gf[k], rb[k] = gf[C + k];
        c.dparam[0] = (float *)(void *)dw, c.dparam[1] = (float *)(void *)db;
        c.accumulate_param[0] = c.accumulate_param[1] = acc;
        CHECK(def->backward_weight.cpu_bf16 && def->backward_weight.cpu_bf16(&c) == 0,
              "layernorm: the bf16 weight-gradient kernel ran (%s)", err);
        pl_cpu_layernorm_backward_weight(rw, rb, df, xf, R, C, acc);
        bad = count_differing(dw, rw, C) + count_differing(db, rb, C);
        CHECK(bad == 0, "layernorm bf16 weight gradients (accumulate %d): %d of %d values "
              "differ from the widening path", acc, bad, 2 * C);
    }
    /* Operands it does not expect in bf16 go back to the widening path. */
    c.bf16.params = false;
    CHECK(def->forward.cpu_bf16(&c) == PL_OP_DECLINED,
          "layernorm: fp32 parameters were not declined");
    free(x), free(d), free(g), free(w), free(b), free(out), free(dw), free(db);
    printf("layernorm bf16 kernels: bitwise the widening path\n");
}

int main(void) {
    tu_time_limit(900, "test_precision");
    check_conversions();
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 2;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    CHECK_PTR(rt, "pl_runtime_new");
    check_ops(rt);
    check_training(rt);
    check_master_weights(rt);
    check_fp16_overflow(rt);
    check_force_outputs(rt);
    check_errors(rt);
    check_bf16_products(rt);
    check_elementwise_bf16();
    check_layernorm_bf16();
    pl_runtime_free(rt);
    return tu_failures ? 1 : 0;
}
