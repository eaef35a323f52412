/* pl_dropout (pleiades/ops.h) and the randomness fields of the op
 * interface (pl_op_call.training, seed, sample_offset), through the public
 * API only:
 *   1. a probe op sees training = true and one seed in every kernel call
 *      of a pl_gradcheck (pl_gradcheck itself passes on pl_op_dropout:
 *      the op table's dropout lines, checked by test_ops);
 *   2. the kernels called directly: over 10^5 elements the kept fraction
 *      is within 5 standard deviations of 1 − p, kept values are exactly
 *      x · (1.0f / (1.0f − p)) and dropped ones 0, the gradient uses the
 *      same mask, the mask of a sample does not depend on the tile it is
 *      in (sample_offset), evaluation and p = 0 are the identity;
 *   3. PyTorch: given pl_dropout's mask, torch.nn.Dropout's computation
 *      gives the same output and gradient bit for bit, and the masks are
 *      the documented hash's (reference/dropout_reference.py →
 *      dropout_reference.txt);
 *   4. through engines: a probe op's tasks get per-tile sample offsets,
 *      one seed per op and pass shared by forward and backward tasks, new
 *      seeds each pass, training = false in forward-only steps; an MLP
 *      with three dropouts trained 5 steps gives bitwise the same masks
 *      (the dropout of the input, read as the graph's output) under 1, 2
 *      and 4 tiles and 1F1B, bitwise the same losses and weights run twice
 *      and under 1F1B vs none, losses equal to rounding across tile
 *      counts, masks that change every step and every accumulation
 *      micro-step, an evaluation step that is the identity and does not
 *      shift the masks of later steps, and a run resumed from a checkpoint
 *      that draws the masks of one that never stopped;
 *   5. p outside [0, 1) is refused, naming the op and the value.
 *
 * Usage: test_dropout reference/dropout_reference.txt */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pleiades.h"
#include "reference_util.h"
#include "test_util.h"

/* The scale a kept value is multiplied by, as PyTorch forms it. */
static float keep_scale(float p) { return 1.0f / (1.0f - p); }

/* ------------------------------------------------------------ the probe */

/* An identity op that records what each of its kernel calls was told
 * about randomness, to check what the engine and pl_gradcheck fill in. */
typedef struct probe_record {
    const char *op;
    bool backward, training;
    uint64_t seed;
    int64_t offset, samples;
} probe_record;

static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER;
static probe_record probe_log[256];
static int probe_n;

static void probe_note(const pl_op_call *c, bool backward) {
    pthread_mutex_lock(&probe_lock);
    if (probe_n < (int)(sizeof probe_log / sizeof *probe_log))
        probe_log[probe_n++] = (probe_record){c->op, backward, c->training, c->seed,
                                              c->sample_offset, c->samples};
    pthread_mutex_unlock(&probe_lock);
}

static int probe_forward(pl_op_call *c) {
    probe_note(c, false);
    memcpy(c->out, c->in[0], (size_t)(c->samples * c->in_numel[0]) * sizeof(float));
    return 0;
}

static int probe_backward(pl_op_call *c) {
    probe_note(c, true);
    for (int64_t i = 0; i < c->samples * c->in_numel[0]; i++)
        c->dinput[i] = (c->accumulate ? c->dinput[i] : 0.0f) + c->dout[i];
    return 0;
}

static pl_status probe_shape(const pl_op_def *def, const char *op, pl_tensor_t *const *in,
                             const void *attrs, pl_op_layout *l) {
    (void)def, (void)op, (void)attrs;
    l->out_ndim = pl_tensor_shape(in[0], l->out_shape);
    l->flops = 1.0;
    return PL_STATUS_OK;
}

static const pl_op_def PROBE = {
    .name = "probe",
    .n_inputs = 1,
    .input_names = {"x"},
    .shape = probe_shape,
    .forward = {.cpu = probe_forward},
    .backward_input = {{.cpu = probe_backward}},
};

/* ------------------------------------------------------ 1. gradcheck */

static void gradcheck_dropout(void) {
    /* What pl_gradcheck tells the kernels: a training pass, one seed for
     * every call (a mask drawn anew per call would make the finite
     * differences noise), the whole check's samples from offset 0. */
    probe_n = 0;
    int ndim = 1;
    int64_t shape[PL_MAX_DIMS] = {4};
    pl_gradcheck_options o = pl_gradcheck_options_default();
    CHECK(pl_gradcheck(&PROBE, NULL, 1, &ndim, (const int64_t(*)[PL_MAX_DIMS])shape, NULL,
                       &o, NULL) == PL_STATUS_OK, "gradcheck of the probe: %s",
          pl_last_error());
    bool fwd = false, bwd = false, same = probe_n > 0;
    for (int i = 0; i < probe_n; i++) {
        const probe_record *r = &probe_log[i];
        fwd |= !r->backward;
        bwd |= r->backward;
        same &= r->training && r->seed == probe_log[0].seed && r->offset == 0 &&
                r->samples == o.samples;
    }
    CHECK(fwd && bwd && same, "pl_gradcheck's calls: forward %d, backward %d, all "
          "training with one seed and offset 0: %d", fwd, bwd, same);
    printf("%s pl_gradcheck calls kernels in training mode with one seed (%d calls)\n",
           fwd && bwd && same ? "OK" : "FAIL", probe_n);
}

/* ------------------------------------------------ 2. direct kernel calls */

/* One tile of pl_op_dropout as the engine describes it: `samples` samples
 * of `numel` floats, the first being global sample `offset`. */
static pl_op_call dropout_call(const pl_dropout_attrs *a, int64_t samples, int64_t numel,
                               uint64_t seed, int64_t offset, bool training) {
    pl_op_call c;
    memset(&c, 0, sizeof c);
    c.op = "drop";
    c.attrs = a;
    c.samples = samples;
    c.n_inputs = 1;
    c.in_ndim[0] = c.out_ndim = 1;
    c.in_shape[0][0] = c.out_shape[0] = c.in_numel[0] = c.out_numel = numel;
    c.scale = 1.0f;
    c.training = training;
    c.seed = seed;
    c.sample_offset = offset;
    return c;
}

static void run(pl_op_kernel k, pl_op_call *c, const char *what) {
    char error[128] = "";
    c->error = error;
    c->error_size = sizeof error;
    int rc = k(c);
    CHECK(rc == 0, "%s returned %d: %s", what, rc, error);
}

static void fill_random(float *v, int64_t n, uint64_t seed) {
    for (int64_t i = 0; i < n; i++) {
        float u = (float)((tu_splitmix64(&seed) >> 40) * (1.0 / 16777216.0));
        v[i] = 2.0f * u - 1.0f;
        if (v[i] == 0.0f) v[i] = 0.5f; /* so that kept is never mistaken for dropped */
    }
}

static void direct_kernels(void) {
    enum { SAMPLES = 100, NUMEL = 1000, N = SAMPLES * NUMEL };
    float *x = tu_xmalloc(N * sizeof *x), *y = tu_xmalloc(N * sizeof *y);
    float *y2 = tu_xmalloc(N * sizeof *y2), *dx = tu_xmalloc(N * sizeof *dx);
    fill_random(x, N, 99);
    static const float ps[] = {0.1f, 0.3f, 0.5f, 0.9f};
    for (size_t k = 0; k < sizeof ps / sizeof *ps; k++) {
        const pl_dropout_attrs a = {ps[k]};
        const float p = ps[k], scale = keep_scale(p);
        const uint64_t seed = 0x5EED0000u + k;
        pl_op_call c = dropout_call(&a, SAMPLES, NUMEL, seed, 0, true);
        c.in[0] = x;
        c.out = y;
        run(pl_op_dropout.forward.cpu, &c, "dropout forward");
        int64_t kept = 0, wrong = 0;
        for (int64_t i = 0; i < N; i++) {
            if (y[i] != 0.0f) {
                kept++;
                wrong += y[i] != x[i] * scale;
            }
        }
        double frac = (double)kept / N, sd = sqrt(p * (1.0 - p) / N);
        bool ok = fabs(frac - (1.0 - p)) < 5.0 * sd && wrong == 0;
        CHECK(fabs(frac - (1.0 - p)) < 5.0 * sd,
              "p=%g: kept fraction %.5f, want %.5f +- %.5f (5 sd)", (double)p, frac,
              1.0 - p, 5.0 * sd);
        CHECK(wrong == 0, "p=%g: %lld kept values differ from x * %.9g", (double)p,
              (long long)wrong, (double)scale);

        /* The gradient: dy · the same mask, overwritten then accumulated. */
        pl_op_call b = dropout_call(&a, SAMPLES, NUMEL, seed, 0, true);
        b.dout = x; /* any dy: x's values */
        b.dinput = dx;
        for (int64_t i = 0; i < N; i++) dx[i] = NAN; /* must be overwritten */
        run(pl_op_dropout.backward_input[0].cpu, &b, "dropout backward");
        int64_t bad = 0;
        for (int64_t i = 0; i < N; i++) bad += dx[i] != y[i];
        b.accumulate = true;
        for (int64_t i = 0; i < N; i++) dx[i] = 1.0f;
        run(pl_op_dropout.backward_input[0].cpu, &b, "dropout backward (accumulate)");
        /* 1 + dy·m, rounded once or twice: within an ulp of 1 + y. */
        int64_t bad_acc = 0;
        for (int64_t i = 0; i < N; i++)
            bad_acc += !(fabsf(dx[i] - (1.0f + y[i])) <= 2e-7f * fmaxf(1.0f, fabsf(1.0f + y[i])));
        CHECK(bad == 0, "p=%g: %lld gradient values are not dy * the forward's mask",
              (double)p, (long long)bad);
        CHECK(bad_acc == 0, "p=%g: %lld accumulated gradient values are not 1 + dy * mask",
              (double)p, (long long)bad_acc);

        /* The same samples in tiles of 30, 50 and 20 (offsets 0, 30, 80):
         * each sample keeps the same elements. */
        const int64_t tiles[3] = {30, 50, 20};
        int64_t off = 0;
        for (int t = 0; t < 3; t++) {
            pl_op_call ct = dropout_call(&a, tiles[t], NUMEL, seed, off, true);
            ct.in[0] = x + off * NUMEL;
            ct.out = y2 + off * NUMEL;
            run(pl_op_dropout.forward.cpu, &ct, "dropout forward (tile)");
            off += tiles[t];
        }
        bool tiled = memcmp(y, y2, N * sizeof *y) == 0;
        CHECK(tiled, "p=%g: tiles of 30/50/20 samples give other masks than one tile",
              (double)p);
        /* Another seed: another mask (agreement p² + (1 − p)² by chance). */
        pl_op_call c2 = dropout_call(&a, SAMPLES, NUMEL, seed + 1, 0, true);
        c2.in[0] = x;
        c2.out = y2;
        run(pl_op_dropout.forward.cpu, &c2, "dropout forward (seed + 1)");
        int64_t agree = 0;
        for (int64_t i = 0; i < N; i++) agree += (y[i] != 0.0f) == (y2[i] != 0.0f);
        double chance = p * p + (1.0 - p) * (1.0 - p);
        CHECK(fabs((double)agree / N - chance) < 0.01,
              "p=%g: masks of two seeds agree on %.4f of elements, want %.4f by chance",
              (double)p, (double)agree / N, chance);
        printf("%s p=%.1f: kept %.5f (want %.5f +- %.5f), kept = x * %.9g exactly, dx "
               "uses the mask, tiling-independent, seeds independent\n",
               ok && bad == 0 && bad_acc == 0 && tiled ? "OK" : "FAIL", (double)p, frac,
               1.0 - p, 5.0 * sd, (double)scale);
    }

    /* Evaluation, and p = 0 in training: the identity, bit for bit, in
     * both passes. */
    const pl_dropout_attrs half = {0.5f}, zero = {0.0f};
    const struct {
        const pl_dropout_attrs *a;
        bool training;
        const char *what;
    } ids[] = {{&half, false, "evaluation (p = 0.5)"}, {&zero, true, "p = 0 in training"}};
    for (int k = 0; k < 2; k++) {
        pl_op_call c = dropout_call(ids[k].a, SAMPLES, NUMEL, 7, 0, ids[k].training);
        c.in[0] = x;
        c.out = y;
        run(pl_op_dropout.forward.cpu, &c, "dropout forward");
        c.dout = x;
        c.dinput = dx;
        run(pl_op_dropout.backward_input[0].cpu, &c, "dropout backward");
        bool same = memcmp(x, y, N * sizeof *x) == 0 && memcmp(x, dx, N * sizeof *x) == 0;
        CHECK(same, "%s: dropout is not the identity", ids[k].what);
        printf("%s %s is the identity\n", same ? "OK" : "FAIL", ids[k].what);
    }
    free(x), free(y), free(y2), free(dx);
}

/* ----------------------------------------------------------- 3. PyTorch */

enum { REF_SAMPLES = 3, REF_NUMEL = 24 }; /* the script's 3 samples of [4, 6] */

static void reference(const char *path) {
    tu_text_load(path, "dropout_reference");
    static const char *cases[] = {"a", "b", "c"};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char name[32];
#define REF(field) (snprintf(name, sizeof name, "%s." field, cases[k]), name)
        const pl_dropout_attrs a = {(float)tu_text_get(REF("p"), 1)[0]};
        const double *s = tu_text_get(REF("seed"), 2);
        const uint64_t seed = (uint64_t)s[0] << 32 | (uint64_t)s[1];
        const int64_t offset = (int64_t)tu_text_get(REF("offset"), 1)[0];
        const int64_t n = REF_SAMPLES * REF_NUMEL;
        const double *mask = tu_text_get(REF("mask"), n);
        float *x = tu_text_floats(REF("x"), n), *dout = tu_text_floats(REF("dout"), n);
        float *out = tu_text_floats(REF("out"), n), *dx = tu_text_floats(REF("dx"), n);
#undef REF
        float *y = tu_xmalloc(n * sizeof *y), *g = tu_xmalloc(n * sizeof *g);
        pl_op_call c = dropout_call(&a, REF_SAMPLES, REF_NUMEL, seed, offset, true);
        /* A 3-D sample, as the script's [4, 6]: only numel matters. */
        c.in[0] = x;
        c.out = y;
        run(pl_op_dropout.forward.cpu, &c, "dropout forward");
        c.dout = dout;
        c.dinput = g;
        run(pl_op_dropout.backward_input[0].cpu, &c, "dropout backward");
        int64_t bad_mask = 0, bad_out = 0, bad_dx = 0;
        for (int64_t i = 0; i < n; i++) {
            bad_mask += (y[i] != 0.0f) != (mask[i] != 0.0);
            bad_out += y[i] != out[i]; /* == : PyTorch's −0 is our −0 or 0 */
            bad_dx += g[i] != dx[i];
        }
        CHECK(bad_mask == 0, "case %s: %lld elements kept differently from the reference "
              "transcription of the hash", cases[k], (long long)bad_mask);
        CHECK(bad_out == 0, "case %s: %lld outputs differ from PyTorch's", cases[k],
              (long long)bad_out);
        CHECK(bad_dx == 0, "case %s: %lld gradients differ from PyTorch's", cases[k],
              (long long)bad_dx);
        printf("%s PyTorch case %s (p=%g, offset %lld): mask, output and gradient equal "
               "bit for bit\n", bad_mask || bad_out || bad_dx ? "FAIL" : "OK", cases[k],
               (double)a.p, (long long)offset);
        free(x), free(dout), free(out), free(dx), free(y), free(g);
    }
    tu_text_free();
}

/* ------------------------------------------------------------ 4. engines */

/* The probe between two linear layers (so that its gradient is needed),
 * twice: per tile and per pass, what do the kernels get? Batch 7 in 3
 * tiles: 3, 2, 2 samples at offsets 0, 3, 5. */
static void engine_probe(pl_runtime_t *rt) {
    enum { B = 7, IN = 4 };
    pl_graph_t *g = pl_graph_new(5);
    int64_t shape[1] = {IN};
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, shape);
    pl_tensor_t *y = pl_graph_input(g, "y", PL_DTYPE_I32, 0, NULL);
    pl_tensor_t *h = pl_linear(g, x, IN, "fc0");
    h = pl_graph_op(g, &PROBE, &h, 1, NULL, "probe_a");
    h = pl_graph_op(g, &PROBE, &h, 1, NULL, "probe_b");
    pl_tensor_t *loss = pl_cross_entropy(g, pl_linear(g, h, 3, "head"), y);
    CHECK_PTR(loss, "probe model");
    CHECK_PL(pl_graph_set_loss(g, loss));
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = B;
    eo.tiles = 3;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK_PTR(e, "probe engine");
    float xs[B * IN];
    int32_t ys[B];
    fill_random(xs, B * IN, 3);
    for (int i = 0; i < B; i++) ys[i] = i % 3;
    const void *data[2] = {xs, ys};
    pl_batch batch = {.size = B, .data = data};
    const int64_t want_offset[3] = {0, 3, 5}, want_samples[3] = {3, 2, 2};
    const int failures = tu_failures;
    uint64_t seeds[3][2]; /* pass × probe */
    for (int pass = 0; pass < 3; pass++) {
        bool eval = pass == 2;
        pl_step_options so = {.forward_only = eval, .return_loss = true};
        pl_step_result r;
        probe_n = 0;
        CHECK_PL(pl_engine_forward_backward(e, &batch, &so, &r));
        if (!eval) CHECK_PL(pl_engine_optimizer_step(e));
        /* A step returns before its last backward tasks end; fc0's updated
         * weight waits for its gradient, which waits for both probes'
         * backward tasks of every tile. */
        float tmp[IN * IN];
        CHECK_PL(pl_engine_get_param(e, pl_graph_find(g, "fc0.weight"), tmp, IN * IN));
        /* Per probe: 3 forward calls (and 3 backward in training), one per
         * tile with its offset, all with one seed. */
        for (int pr = 0; pr < 2; pr++) {
            const char *name = pr ? "probe_b" : "probe_a";
            int fwd = 0, bwd = 0, bad = 0;
            bool have = false;
            uint64_t seed = 0;
            for (int i = 0; i < probe_n; i++) {
                const probe_record *rec = &probe_log[i];
                if (strcmp(rec->op, name)) continue;
                int tile = -1;
                for (int t = 0; t < 3; t++)
                    if (rec->offset == want_offset[t] && rec->samples == want_samples[t])
                        tile = t;
                bad += tile < 0 || rec->training != (!eval);
                if (!have) seed = rec->seed, have = true;
                bad += rec->seed != seed;
                rec->backward ? bwd++ : fwd++;
            }
            seeds[pass][pr] = seed;
            CHECK(fwd == 3 && bwd == (eval ? 0 : 3) && bad == 0,
                  "pass %d %s: %d forward and %d backward calls (want 3 and %d), %d with a "
                  "wrong offset, training flag or seed", pass, name, fwd, bwd,
                  eval ? 0 : 3, bad);
        }
    }
    CHECK(seeds[0][0] != seeds[0][1], "two ops got one seed in a pass");
    CHECK(seeds[0][0] != seeds[1][0] && seeds[0][1] != seeds[1][1],
          "two training passes gave an op the same seed");
    printf("%s engine: per-tile offsets 0/3/5, one seed per op and pass shared by forward "
           "and backward, new seeds each pass, training = false when forward-only\n",
           tu_failures == failures ? "OK" : "FAIL");
    pl_engine_free(e);
    pl_graph_free(g);
}

enum { MB = 8, MIN = 16, MHID = 32, MK = 4, STEPS = 5 };
#define P_IN 0.25f

typedef struct mlp_run {
    double losses[STEPS];
    float outputs[STEPS][MB * MIN]; /* the input's dropout, per step */
    float *weights;                 /* every parameter after the last step */
    float eval_output[MB * MIN];    /* a forward-only step's, when asked */
} mlp_run;

/* Input dropout (the graph's output, so its mask can be read back), then
 * two hidden layers each followed by dropout, in three blocks for the
 * pipeline. */
static pl_graph_t *mlp_build(void) {
    pl_graph_t *g = pl_graph_new(3);
    int64_t shape[1] = {MIN};
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, shape);
    pl_tensor_t *y = pl_graph_input(g, "y", PL_DTYPE_I32, 0, NULL);
    pl_tensor_t *d0 = pl_dropout(g, x, P_IN, "drop_in");
    pl_tensor_t *h = pl_dropout(g, pl_relu(g, pl_linear(g, d0, MHID, "fc1")), 0.5f, "drop1");
    pl_graph_begin_block(g, "b1");
    h = pl_dropout(g, pl_relu(g, pl_linear(g, h, MHID, "fc2")), 0.3f, "drop2");
    pl_graph_begin_block(g, "b2");
    pl_tensor_t *loss = pl_cross_entropy(g, pl_linear(g, h, MK, "head"), y);
    CHECK_PTR(loss, "the MLP");
    CHECK_PL(pl_graph_set_loss(g, loss));
    CHECK_PL(pl_graph_set_output(g, d0));
    return g;
}

static void mlp_data(float *x, int32_t *y) {
    fill_random(x, MB * MIN, 17);
    for (int i = 0; i < MB; i++) y[i] = (x[i * MIN] > 0) + 2 * (x[i * MIN + 1] > 0);
}

/* STEPS training steps under `tiles` and `schedule`; with eval_after >= 0
 * a forward-only step follows training step eval_after; with resume_at > 0
 * the engine is saved to a checkpoint before step resume_at and training
 * goes on in a new graph and engine that loaded it. */
static void mlp_train(pl_runtime_t *rt, int tiles, pl_schedule_kind schedule,
                      int eval_after, int resume_at, mlp_run *out) {
    pl_graph_t *g = mlp_build();
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = MB;
    eo.tiles = tiles;
    eo.optimizer.lr = 1e-2f;
    eo.schedule = schedule;
    eo.stages = schedule == PL_SCHEDULE_NONE ? 0 : 2;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK_PTR(e, "MLP engine");
    char ckpt[512];
    tu_scratch_path(ckpt, sizeof ckpt, "ckpt");
    static float x[MB * MIN];
    static int32_t y[MB];
    mlp_data(x, y);
    const void *data[2] = {x, y};
    pl_batch batch = {.size = MB, .data = data};
    pl_step_options train = {.return_loss = true, .return_output_label = true};
    pl_step_options eval = {.forward_only = true, .return_output_label = true};
    for (int s = 0; s < STEPS; s++) {
        if (s == resume_at) {
            CHECK_PL(pl_engine_save_checkpoint(e, ckpt, NULL));
            pl_engine_free(e);
            pl_graph_free(g);
            g = mlp_build();
            e = pl_engine_new(rt, g, &eo);
            CHECK_PTR(e, "MLP engine after the checkpoint");
            CHECK_PL(pl_engine_load_checkpoint(e, ckpt, NULL));
        }
        pl_step_result r;
        CHECK_PL(pl_engine_forward_backward(e, &batch, &train, &r));
        out->losses[s] = r.loss;
        memcpy(out->outputs[s], r.output, sizeof out->outputs[s]);
        CHECK_PL(pl_engine_optimizer_step(e));
        if (s == eval_after) {
            CHECK_PL(pl_engine_forward_backward(e, &batch, &eval, &r));
            memcpy(out->eval_output, r.output, sizeof out->eval_output);
        }
    }
    size_t total = (size_t)pl_graph_param_count(g), off = 0;
    out->weights = tu_xmalloc(total * sizeof *out->weights);
    for (int i = 0; i < pl_graph_num_params(g); i++) {
        const pl_tensor_t *t = pl_graph_param(g, i);
        size_t k = (size_t)pl_tensor_numel(t);
        CHECK_PL(pl_engine_get_param(e, t, out->weights + off, k));
        off += k;
    }
    pl_engine_free(e);
    pl_graph_free(g);
}

static size_t mlp_weight_count(void) {
    pl_graph_t *g = mlp_build();
    size_t n = (size_t)pl_graph_param_count(g);
    pl_graph_free(g);
    return n;
}

static void engine_mlp(pl_runtime_t *rt) {
    static float x[MB * MIN];
    static int32_t y[MB];
    mlp_data(x, y);
    const size_t nw = mlp_weight_count();
    enum { T2, T2_AGAIN, T1, T4, T4_1F1B, T2_EVAL, T2_RESUME, N_RUNS };
    static const struct {
        int tiles;
        pl_schedule_kind schedule;
        int eval_after, resume_at;
        const char *name;
    } cfg[N_RUNS] = {{2, PL_SCHEDULE_NONE, -1, -1, "2 tiles"},
                     {2, PL_SCHEDULE_NONE, -1, -1, "2 tiles again"},
                     {1, PL_SCHEDULE_NONE, -1, -1, "1 tile"},
                     {4, PL_SCHEDULE_NONE, -1, -1, "4 tiles"},
                     {4, PL_SCHEDULE_1F1B, -1, -1, "4 tiles 1F1B"},
                     {2, PL_SCHEDULE_NONE, 1, -1, "2 tiles + eval step"},
                     {2, PL_SCHEDULE_NONE, -1, 2, "2 tiles resumed at step 3"}};
    static mlp_run runs[N_RUNS];
    bool skipped[N_RUNS] = {false};
    CHECK(tu_scratch_create("pl_test_dropout"), "no scratch directory");
    for (int k = 0; k < N_RUNS; k++) {
        skipped[k] = cfg[k].schedule != PL_SCHEDULE_NONE &&
                     tu_pipeline_skipped(rt, 2, cfg[k].name);
        if (!skipped[k])
            mlp_train(rt, cfg[k].tiles, cfg[k].schedule, cfg[k].eval_after, cfg[k].resume_at,
                      &runs[k]);
    }
    tu_remove_tree(tu_scratch_dir());

    /* The input's dropout: kept values exactly x · scale, masks new every
     * step, the same in every run (bitwise: they depend on global sample
     * indices, not tiles or schedules). */
    const float scale = keep_scale(P_IN);
    int64_t bad = 0, kept = 0;
    for (int s = 0; s < STEPS; s++)
        for (int i = 0; i < MB * MIN; i++) {
            float v = runs[T2].outputs[s][i];
            kept += v != 0.0f;
            bad += v != 0.0f && v != x[i] * scale;
        }
    CHECK(bad == 0, "%lld kept inputs differ from x * %.9g", (long long)bad, (double)scale);
    double frac = (double)kept / (STEPS * MB * MIN);
    CHECK(fabs(frac - (1.0 - P_IN)) < 0.1, "input dropout kept %.3f, want about %.2f", frac,
          1.0 - P_IN);
    for (int s = 1; s < STEPS; s++)
        CHECK(memcmp(runs[T2].outputs[s], runs[T2].outputs[s - 1],
                     sizeof runs[T2].outputs[s]) != 0,
              "steps %d and %d dropped the same inputs", s, s + 1);
    for (int k = 1; k < N_RUNS; k++) {
        if (skipped[k]) continue;
        bool masks = memcmp(runs[k].outputs, runs[T2].outputs, sizeof runs[k].outputs) == 0;
        CHECK(masks, "%s: the input dropout's masks differ from 2 tiles'", cfg[k].name);
        printf("%s %s: the input dropout's 5 masks equal 2 tiles' bit for bit\n",
               masks ? "OK" : "FAIL", cfg[k].name);
    }
    /* Losses and weights: the same tiles give the same sums, so bitwise
     * equal (run twice, 1F1B vs none, an evaluation step in between, a
     * resumed checkpoint);
     * other tile counts sum gradients over other tiles, so to rounding —
     * a mask that differed anywhere would change the losses by far more. */
    const struct {
        int a, b;
        bool exact;
    } pairs[] = {{T2, T2_AGAIN, true}, {T4, T4_1F1B, true}, {T2, T2_EVAL, true},
                 {T2, T2_RESUME, true}, {T2, T1, false},     {T2, T4, false}};
    for (size_t k = 0; k < sizeof pairs / sizeof *pairs; k++) {
        if (skipped[pairs[k].a] || skipped[pairs[k].b]) continue;
        const mlp_run *a = &runs[pairs[k].a], *b = &runs[pairs[k].b];
        double worst = 0.0, worst_w = 0.0;
        for (int s = 0; s < STEPS; s++)
            worst = fmax(worst, fabs(a->losses[s] - b->losses[s]) / fabs(a->losses[s]));
        for (size_t i = 0; i < nw; i++)
            worst_w = fmax(worst_w, fabs((double)a->weights[i] - b->weights[i]));
        bool ok = pairs[k].exact
                      ? memcmp(a->losses, b->losses, sizeof a->losses) == 0 &&
                            memcmp(a->weights, b->weights, nw * sizeof *a->weights) == 0
                      : worst < 1e-5 && worst_w < 1e-5;
        CHECK(ok, "%s vs %s: losses differ by %.3g relative, weights by %.3g (want %s)",
              cfg[pairs[k].a].name, cfg[pairs[k].b].name, worst, worst_w,
              pairs[k].exact ? "bitwise equal" : "below 1e-5");
        printf("%s %s vs %s: losses %s (max relative difference %.2g, weights %.2g)\n",
               ok ? "OK" : "FAIL", cfg[pairs[k].a].name, cfg[pairs[k].b].name,
               pairs[k].exact ? "and weights bitwise equal" : "equal to rounding", worst,
               worst_w);
    }
    printf("   losses (2 tiles):");
    for (int s = 0; s < STEPS; s++) printf(" %.9f", runs[T2].losses[s]);
    printf("\n");
    /* The evaluation step: the identity on the input. */
    bool eval_id = memcmp(runs[T2_EVAL].eval_output, x, sizeof x) == 0;
    CHECK(eval_id, "the forward-only step's dropout is not the identity");
    printf("%s a forward-only step's dropout is the identity\n", eval_id ? "OK" : "FAIL");
    for (int k = 0; k < N_RUNS; k++) free(runs[k].weights);
}

/* Gradient accumulation: the micro-steps of one update draw new masks. */
static void engine_accumulation(pl_runtime_t *rt) {
    pl_graph_t *g = mlp_build();
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = MB;
    eo.tiles = 2;
    eo.accumulate_size = 2;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK_PTR(e, "accumulation engine");
    static float x[MB * MIN], outs[2][MB * MIN];
    static int32_t y[MB];
    mlp_data(x, y);
    const void *data[2] = {x, y};
    pl_batch batch = {.size = MB, .data = data};
    pl_step_options so = {.return_loss = true, .return_output_label = true};
    for (int k = 0; k < 2; k++) {
        pl_step_result r;
        CHECK_PL(pl_engine_forward_backward(e, &batch, &so, &r));
        memcpy(outs[k], r.output, sizeof outs[k]);
        CHECK_PL(pl_engine_optimizer_step(e));
    }
    CHECK(pl_engine_steps(e) == 1, "accumulation: %lld updates, want 1",
          (long long)pl_engine_steps(e));
    bool differ = memcmp(outs[0], outs[1], sizeof outs[0]) != 0;
    CHECK(differ, "the two micro-steps of one accumulated update had the same masks");
    printf("%s accumulation micro-steps draw different masks\n", differ ? "OK" : "FAIL");
    pl_engine_free(e);
    pl_graph_free(g);
}

/* ------------------------------------------------------------- 5. errors */

static void errors(void) {
    pl_graph_t *g = pl_graph_new(1);
    int64_t shape[1] = {4};
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, shape);
    pl_tensor_t *ids = pl_graph_input(g, "ids", PL_DTYPE_I32, 1, shape);
    CHECK(!pl_dropout(g, x, 1.0f, "d1"), "pl_dropout accepted p = 1");
    tu_expect_error(__LINE__, "pl_dropout with p = 1", pl_last_status(),
                    PL_STATUS_INVALID_ARGUMENT, "pl_dropout 'd1'", "p = 1 ");
    CHECK(!pl_dropout(g, x, -0.5f, "d2"), "pl_dropout accepted p = -0.5");
    tu_expect_error(__LINE__, "pl_dropout with p = -0.5", pl_last_status(),
                    PL_STATUS_INVALID_ARGUMENT, "pl_dropout 'd2'", "p = -0.5");
    CHECK(!pl_dropout(g, x, NAN, "d3"), "pl_dropout accepted p = NaN");
    tu_expect_error(__LINE__, "pl_dropout with p = NaN", pl_last_status(),
                    PL_STATUS_INVALID_ARGUMENT, "pl_dropout 'd3'", "[0, 1)");
    CHECK(!pl_dropout(g, ids, 0.5f, "d4"), "pl_dropout accepted an int32 input");
    tu_expect_error(__LINE__, "pl_dropout of an int32 input", pl_last_status(),
                    PL_STATUS_INVALID_ARGUMENT, "pl_dropout 'd4'", "int32");
    CHECK(pl_dropout(g, x, 0.0f, "d5") != NULL, "pl_dropout refused p = 0: %s",
          pl_last_error());
    pl_graph_free(g);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s reference/dropout_reference.txt\n", argv[0]);
        return 2;
    }
    gradcheck_dropout();
    direct_kernels();
    reference(argv[1]);
    errors();
    /* Two CPU workers: the 1F1B run needs one per stage. */
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 2;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    CHECK_PTR(rt, "runtime");
    engine_probe(rt);
    engine_mlp(rt);
    engine_accumulation(rt);
    pl_runtime_free(rt);
    return tu_report("dropout");
}
