/* Activation recomputation (pl_engine_options.recompute, engine/recompute.c).
 *
 * One runtime with 4 StarPU CPU workers, profiling on.
 *
 * 1. Bitwise equivalence. Each configuration trains STEPS steps on fixed
 *    pseudo-random tokens twice, once keeping every activation and once
 *    recomputing; the losses and every parameter afterwards must be equal
 *    BIT FOR BIT (memcmp). Configurations: a GPT (V=64 T=16 C=32 L=4 NH=4,
 *    batch 8) non-pipelined with 2 tiles under full, selective, method
 *    block (1 layer), uniform in units of 2 layers and Colossal-AI's ratio
 *    0.5; 1F1B p=2 m=4, interleaved p=2 v=2 m=4, ZB-H1 p=2 m=4 (its W
 *    items run late and must still find their activations), GPipe (a
 *    registered schedule, as a user's is); bf16; accumulation 2; and a
 *    model whose blocks hold dropout (p=0.3: a re-run must redraw the
 *    same mask). Each recomputing run must have run R tasks (task
 *    records), each R task must have ended before the first input- or
 *    weight-gradient task of its layer in its microbatch started, and
 *    the Chrome and Paje traces it writes show them (phase "R", the
 *    "recomputation" state).
 *
 * 2. Which layers: method block with num_layers 1 re-runs ops of layer 0
 *    only (names h0.*); full uniform re-runs ops of every layer and of the
 *    head's ln_f; selective re-runs attention ops only.
 *
 * 3. Memory (one tile on a runtime of one worker, so that the tasks'
 *    order, and the peak, do not depend on the machine's load), read from
 *    pl_engine_activation_bytes and checked against
 *    numbers computed here from the tensors' shapes (pl_graph_tensor,
 *    pl_tensor_numel: no engine involved):
 *    - keeping everything, the values' peak is exactly the sum of every
 *      activation's bytes over the batch (fp32, one buffer per tile);
 *    - full recomputation of every layer: peak <= the kept tensors (what
 *      crosses layers, the head's output and loss) over the batch + one
 *      layer's inner tensors per tile (each tile may be inside a layer at
 *      once), and at least 2x lower than keeping everything;
 *    - selective: peak <= everything minus, per tile, the attention
 *      tensors of all but one layer.
 *
 * 4. Bad options are refused naming the field: granularity 7, ratio 2,
 *    ratio with num_layers, num_layers -1, check_finite with full.
 *
 * 6. User ops: a user's op is re-run like a built-in (its forward runs
 *    twice per pass, R tasks in the trace); declared
 *    PL_OP_RECOMPUTE_NEVER it runs once per pass and has no R task; the
 *    losses are the same.
 *
 * 5. PL_RECOMPUTE_AUTO under a 2 MB budget (auto placement, a disk tier):
 *    bitwise the losses of the unbudgeted run keeping everything; every
 *    layer recomputed before the timed second step, then the planner's
 *    plan (pl_engine_recompute_plan), one that fits the budget; and a
 *    user's plan (recompute.plan) called once with every layer's costs,
 *    its choice in force, the same losses.
 *
 * Exit status 0 on success; every failed check prints a FAIL line. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pleiades.h"
#include "test_util.h"

enum { V = 64, T = 16, C = 32, NH = 4, L = 4, BATCH = 8, STEPS = 3, WORKERS = 4 };
#define SEED 4321

static int32_t tokens[STEPS][BATCH * T], targets[STEPS][BATCH * T];

typedef struct config {
    const char *what;
    const char *schedule; /* registered name, NULL: none */
    int p, v, m;
    pl_precision precision;
    int accumulate;
    bool dropout_model;
    pl_recompute_options rc;
} config;

/* A GPT-like model whose blocks hold dropout: embedding, then per block
 * layernorm -> linear -> gelu -> dropout -> linear -> residual add, then
 * layernorm, a linear head and cross-entropy. */
static bool build_dropout_model(pl_graph_t *g) {
    int64_t t = T;
    pl_tensor_t *tok = pl_graph_input(g, "tokens", PL_DTYPE_I32, 1, &t);
    pl_tensor_t *tgt = pl_graph_input(g, "targets", PL_DTYPE_I32, 1, &t);
    pl_tensor_t *x = pl_embedding(g, tok, V, C, "embedding");
    for (int l = 0; x && l < L; l++) {
        char n[4][32];
        snprintf(n[0], 32, "h%d.ln", l);
        snprintf(n[1], 32, "h%d.fc", l);
        snprintf(n[2], 32, "h%d.drop", l);
        snprintf(n[3], 32, "h%d.proj", l);
        pl_graph_begin_block(g, "layer");
        pl_tensor_t *h = pl_layernorm(g, x, n[0]);
        h = h ? pl_gelu(g, pl_linear(g, h, 2 * C, n[1])) : NULL;
        h = h ? pl_dropout(g, h, 0.3f, n[2]) : NULL;
        h = h ? pl_linear(g, h, C, n[3]) : NULL;
        char r[32];
        snprintf(r, sizeof r, "h%d.res", l);
        x = h ? pl_add(g, x, h, r) : NULL;
    }
    pl_graph_begin_block(g, "head");
    x = x ? pl_layernorm(g, x, "ln_f") : NULL;
    pl_tensor_t *logits = x ? pl_linear(g, x, V, "lm_head") : NULL;
    pl_tensor_t *loss = logits ? pl_cross_entropy(g, logits, tgt) : NULL;
    return loss && pl_graph_set_loss(g, loss) == PL_STATUS_OK &&
           pl_graph_set_output(g, logits) == PL_STATUS_OK;
}

static pl_graph_t *build_graph(const config *c) {
    pl_graph_t *g = pl_graph_new(SEED);
    if (!g) return NULL;
    bool ok;
    if (c->dropout_model) {
        ok = build_dropout_model(g);
    } else {
        pl_gpt_config gc = {.vocab = V, .context = T, .channels = C, .layers = L, .heads = NH};
        pl_gpt_model gm;
        ok = pl_gpt_build(g, &gc, &gm) == PL_STATUS_OK;
    }
    if (!ok) {
        printf("FAIL: building the model for %s: %s\n", c->what, pl_last_error());
        tu_failures++;
        pl_graph_free(g);
        return NULL;
    }
    return g;
}

static pl_engine_options engine_options(const config *c, bool recompute) {
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = BATCH;
    eo.tiles = c->m;
    if (c->schedule) {
        eo.schedule_def = pl_schedule_find(c->schedule);
        eo.stages = c->p;
        eo.model_chunks = c->v;
        /* The measured balance recuts after step 2; a fixed cut keeps
         * both runs on the same parts (a recut is tested in 1F1B below). */
        eo.stage_balance = PL_STAGE_BALANCE_FLOPS;
    }
    eo.precision = c->precision;
    eo.accumulate_size = c->accumulate ? c->accumulate : 1;
    eo.record_tasks = true;
    if (recompute) eo.recompute = c->rc;
    return eo;
}

typedef struct run_result {
    double losses[STEPS];
    float *params;
    int64_t n;
    int r_tasks;
    char r_ops[2048]; /* names of the re-run ops, space separated, once each */
    bool r_order_ok;
    pl_activation_bytes mem;
    bool trace_has_r; /* the written Chrome and Paje traces show R slices */
} run_result;

/* The block of op `name` in g (pl_graph_op_info), or -1. */
static int block_of(const pl_graph_t *g, const char *name) {
    for (int i = 0; i < pl_graph_num_ops(g); i++) {
        pl_op_info info;
        if (pl_graph_op_info(g, i, &info) == PL_STATUS_OK && !strcmp(info.name, name))
            return info.block;
    }
    return -1;
}

/* R tasks of the last step: counted, named, and each ended before the
 * first B or W task of its layer and microbatch started. */
static void check_records(const pl_graph_t *g, pl_engine_t *e, run_result *r,
                          const char *what) {
    const pl_task_record *rec;
    int n = pl_engine_task_records(e, &rec);
    r->r_order_ok = true;
    for (int i = 0; i < n; i++) {
        if (rec[i].phase != 'R') continue;
        r->r_tasks++;
        char key[64];
        snprintf(key, sizeof key, " %s ", rec[i].op);
        if (!strstr(r->r_ops, key) && strlen(r->r_ops) + strlen(key) < sizeof r->r_ops) {
            if (!r->r_ops[0]) strcat(r->r_ops, " ");
            strcat(r->r_ops, key + 1);
        }
        int b = block_of(g, rec[i].op);
        for (int j = 0; j < n; j++) {
            if ((rec[j].phase != 'B' && rec[j].phase != 'W') ||
                rec[j].microbatch != rec[i].microbatch || block_of(g, rec[j].op) != b)
                continue;
            if (rec[j].start_us < rec[i].end_us) {
                if (r->r_order_ok)
                    printf("FAIL %s: %s (R, microbatch %d) ended at %.1f us, after %s %c "
                           "started at %.1f us\n", what, rec[i].name, rec[i].microbatch,
                           rec[i].end_us, rec[j].name, rec[j].phase, rec[j].start_us);
                r->r_order_ok = false;
            }
        }
    }
}

static bool run(pl_runtime_t *rt, const config *c, bool recompute, run_result *r) {
    memset(r, 0, sizeof *r);
    pl_graph_t *g = build_graph(c);
    if (!g) return false;
    pl_engine_options eo = engine_options(c, recompute);
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    if (!e) {
        printf("FAIL: engine for %s (%s): %s\n", c->what, recompute ? "recompute" : "plain",
               pl_last_error());
        tu_failures++;
        pl_graph_free(g);
        return false;
    }
    bool ok = true;
    for (int s = 0; ok && s < STEPS; s++)
        ok = tu_train_tokens(e, tokens[s], targets[s], BATCH, s, &r->losses[s]);
    if (ok) check_records(g, e, r, c->what);
    if (ok && recompute) {
        char json[512], paje[512];
        tu_scratch_path(json, sizeof json, "trace.json");
        tu_scratch_path(paje, sizeof paje, "trace.paje");
        ok = pl_engine_write_trace(e, json, paje) == PL_STATUS_OK;
        size_t len;
        char *js = ok ? tu_read_file(json, &len) : NULL, *pj = ok ? tu_read_file(paje, &len) : NULL;
        r->trace_has_r = js && pj && strstr(js, "\"phase\":\"R\"") &&
                         strstr(pj, "recomputation");
        free(js);
        free(pj);
    }
    r->n = tu_read_params(g, e, NULL);
    r->params = tu_xmalloc((size_t)(r->n > 0 ? r->n : 1) * sizeof *r->params);
    ok = ok && tu_read_params(g, e, r->params) == r->n;
    ok = ok && pl_engine_activation_bytes(e, &r->mem) == PL_STATUS_OK;
    pl_engine_free(e);
    pl_graph_free(g);
    CHECK(ok, "%s (%s): training failed: %s", c->what, recompute ? "recompute" : "plain",
          pl_last_error());
    return ok;
}

static void compare(const config *c, const run_result *a, const run_result *b) {
    for (int s = 0; s < STEPS; s++)
        CHECK(memcmp(&a->losses[s], &b->losses[s], sizeof(double)) == 0,
              "%s: step %d loss %.17g with recomputation, %.17g without", c->what, s,
              b->losses[s], a->losses[s]);
    CHECK(a->n == b->n && a->n > 0, "%s: parameter counts %lld vs %lld", c->what,
          (long long)a->n, (long long)b->n);
    int64_t diff = 0, first = -1;
    for (int64_t k = 0; a->n == b->n && k < a->n; k++)
        if (memcmp(&a->params[k], &b->params[k], sizeof(float)) != 0) {
            if (first < 0) first = k;
            diff++;
        }
    CHECK(diff == 0, "%s: %lld of %lld parameters differ (first at %lld: %.9g vs %.9g)",
          c->what, (long long)diff, (long long)a->n, (long long)first,
          first >= 0 ? b->params[first] : 0.0, first >= 0 ? a->params[first] : 0.0);
    CHECK(b->r_tasks > 0, "%s: no R task ran", c->what);
    CHECK(a->r_tasks == 0, "%s: R tasks ran without recomputation", c->what);
    CHECK(b->r_order_ok, "%s: an R task ended after its layer's backward started", c->what);
    CHECK(b->trace_has_r, "%s: the Chrome trace has no phase R slice or the Paje trace no "
          "recomputation state", c->what);
    printf("%s: losses %.9g %.9g %.9g and %lld parameters %s; %d R tasks, values peak "
           "%.1f KiB kept-all vs %.1f KiB recomputing (%.2fx)\n",
           c->what, b->losses[0], b->losses[1], b->losses[2], (long long)a->n,
           diff == 0 && !memcmp(a->losses, b->losses, sizeof a->losses) ? "bitwise equal"
                                                                         : "DIFFER",
           b->r_tasks, a->mem.values_peak / 1024.0, b->mem.values_peak / 1024.0,
           b->mem.values_peak > 0 ? (double)a->mem.values_peak / b->mem.values_peak : 0.0);
}

static pl_recompute_options full(void) {
    return (pl_recompute_options){.granularity = PL_RECOMPUTE_FULL};
}

/* --------------------------------------------------------- 3. memory bounds */

/* Bytes of an activation over `samples` samples (fp32). */
static int64_t act_bytes(const pl_tensor_t *t, int samples) {
    return pl_tensor_numel(t) * samples * 4;
}

/* From the GPT's shapes, by block (pl_graph_op_info; block 0 is the
 * embedding, 1..L the layers, L+1 the head): every activation's bytes;
 * each layer's inner bytes (its ops' outputs and saved tensors but the
 * last op's output, which the next block reads) and the head's (ln_f's
 * output and saved tensor); the kept bytes (all the rest); and a layer's
 * attention tensors (the attention op's output and probabilities). */
typedef struct shape_sums {
    int64_t all, kept, inner_max, attention, attention_out;
    int64_t w_inputs; /* a layer's tensors its weight gradients read (the
                         linears' inputs: ln1, attention, ln2 and gelu
                         outputs) */
} shape_sums;

static shape_sums gpt_sums(int samples) {
    config c = {.what = "shapes"};
    pl_graph_t *g = build_graph(&c);
    shape_sums s = {0};
    int64_t inner[L + 2] = {0};
    int n_ops = g ? pl_graph_num_ops(g) : 0;
    for (int i = 0; i < n_ops; i++) {
        pl_op_info info, next;
        if (pl_graph_op_info(g, i, &info) != PL_STATUS_OK) continue;
        bool last_of_block = i + 1 == n_ops ||
                             (pl_graph_op_info(g, i + 1, &next) == PL_STATUS_OK &&
                              next.block != info.block);
        pl_tensor_t *ts[2] = {info.output, info.saved};
        for (int k = 0; k < 2; k++) {
            if (!ts[k] || pl_tensor_get_kind(ts[k]) != PL_TENSOR_ACTIVATION) continue;
            int64_t b = act_bytes(ts[k], samples);
            s.all += b;
            bool layer_inner = info.block >= 1 && info.block <= L && !(k == 0 && last_of_block);
            bool head_inner = info.block == L + 1 && !strcmp(info.name, "ln_f");
            if (layer_inner || head_inner) inner[info.block] += b;
            else s.kept += b;
            bool attention = info.block == 1 && !strcmp(info.name, "h0.attn");
            if (attention) s.attention += b;
            if (attention && k == 0) s.attention_out += b;
            if (k == 0 && info.block == 1 &&
                (attention || !strcmp(info.name, "h0.ln1") || !strcmp(info.name, "h0.ln2") ||
                 !strncmp(info.name, "gelu", 4)))
                s.w_inputs += b;
        }
    }
    for (int l = 1; l <= L + 1; l++)
        if (inner[l] > s.inner_max) s.inner_max = inner[l];
    pl_graph_free(g);
    return s;
}

static void test_memory(const run_result *plain, const run_result *fullr,
                        const run_result *selective) {
    int tiles = 1, tile = BATCH / tiles;
    shape_sums whole = gpt_sums(BATCH), per_tile = gpt_sums(tile);
    CHECK(plain->mem.values_peak == whole.all,
          "keeping everything: values peak %lld B, the activations' shapes give %lld B",
          (long long)plain->mem.values_peak, (long long)whole.all);
    /* Tolerance: a re-run starts once the backward pass has written its
     * unit's output gradient, while the weight gradients of the unit after
     * it may still hold the inputs they read (they are off the critical
     * path); under selective, of those only the attention output is
     * dropped and re-made. */
    int64_t bound = whole.kept + tiles * (per_tile.inner_max + per_tile.w_inputs);
    CHECK(fullr->mem.values_peak <= bound,
          "full recomputation: values peak %lld B above kept %lld B + %d x (one layer's inner "
          "%lld B + its weight gradients' inputs %lld B) = %lld B",
          (long long)fullr->mem.values_peak, (long long)whole.kept, tiles,
          (long long)per_tile.inner_max, (long long)per_tile.w_inputs, (long long)bound);
    CHECK(2 * fullr->mem.values_peak <= plain->mem.values_peak,
          "full recomputation: values peak %lld B not 2x below %lld B",
          (long long)fullr->mem.values_peak, (long long)plain->mem.values_peak);
    int64_t attention_out = per_tile.attention_out;
    int64_t sel_bound = whole.all - (int64_t)tiles * ((L - 1) * per_tile.attention - attention_out);
    CHECK(per_tile.attention > 0, "no attention tensor found by name");
    CHECK(selective->mem.values_peak <= sel_bound,
          "selective: values peak %lld B above everything %lld B less %d x %d layers' "
          "attention %lld B plus one attention output %lld B = %lld B",
          (long long)selective->mem.values_peak, (long long)whole.all, tiles, L - 1,
          (long long)per_tile.attention, (long long)attention_out, (long long)sel_bound);
    printf("memory: values peak keeping all %lld B (shapes: %lld B); full %lld B (bound "
           "%lld B); selective %lld B (bound %lld B)\n",
           (long long)plain->mem.values_peak, (long long)whole.all,
           (long long)fullr->mem.values_peak, (long long)bound,
           (long long)selective->mem.values_peak, (long long)sel_bound);
}

/* Four tiles on one worker, full recomputation: the worker finishes a
 * tile's backward before it re-runs the next tile's layer (the central
 * queue takes the lowest tile first, pl_sched_set_central_order), so one
 * tile's layer is alive at a time, not all four (breadth first, in push
 * order, every tile's re-run queued before any backward: 4x). */
static void test_memory_tiles(pl_runtime_t *rt) {
    enum { TILES = 4 };
    const config plain_cfg = {"one worker, 4 tiles", NULL, 1, 1, TILES, PL_PRECISION_FP32, 1,
                              false, {0}};
    const config full_cfg = {"one worker, 4 tiles full", NULL, 1, 1, TILES, PL_PRECISION_FP32,
                             1, false, full()};
    run_result plain, fullr;
    if (!run(rt, &plain_cfg, false, &plain)) return;
    if (run(rt, &full_cfg, true, &fullr)) {
        compare(&full_cfg, &plain, &fullr);
        shape_sums whole = gpt_sums(BATCH), per_tile = gpt_sums(BATCH / TILES);
        int64_t bound = whole.kept + per_tile.inner_max + per_tile.w_inputs;
        CHECK(fullr.mem.values_peak <= bound,
              "4 tiles, one worker, full recomputation: values peak %lld B above kept %lld B "
              "+ one tile's layer (inner %lld B + its weight gradients' inputs %lld B) = %lld B",
              (long long)fullr.mem.values_peak, (long long)whole.kept,
              (long long)per_tile.inner_max, (long long)per_tile.w_inputs, (long long)bound);
        printf("memory, 4 tiles on one worker: full %lld B (bound %lld B: one tile's layer "
               "at a time)\n", (long long)fullr.mem.values_peak, (long long)bound);
        free(fullr.params);
    }
    free(plain.params);
}

/* ---------------------------------------------------------- 6. user ops */

/* A user's squared ReLU, counting its forward runs: once as a plain op
 * (re-run by full recomputation), once declared PL_OP_RECOMPUTE_NEVER
 * (as an op with side effects would be: never re-run, its output kept). */
static _Atomic long relu2_runs;

static pl_status relu2_shape(const pl_op_def *def, const char *op, pl_tensor_t *const *in,
                             const void *attrs, pl_op_layout *layout) {
    (void)def, (void)op, (void)attrs;
    layout->out_ndim = pl_tensor_shape(in[0], layout->out_shape);
    layout->flops = 2.0 * (double)pl_tensor_numel(in[0]);
    return PL_STATUS_OK;
}

static int relu2_forward(pl_op_call *c) {
    relu2_runs++;
    const float *x = c->in[0];
    float *out = c->out;
    for (int64_t i = 0; i < c->samples * c->in_numel[0]; i++)
        out[i] = x[i] > 0 ? x[i] * x[i] : 0;
    return 0;
}

static int relu2_backward(pl_op_call *c) {
    const float *x = c->in[0];
    for (int64_t i = 0; i < c->samples * c->in_numel[0]; i++) {
        const float *dout = c->dout;
        float *dinput = c->dinput;
        float g = x[i] > 0 ? 2 * x[i] * dout[i] : 0;
        dinput[i] = c->accumulate ? dinput[i] + g : g;
    }
    return 0;
}

static const pl_op_def RELU2 = {
    .name = "relu2", .n_inputs = 1, .shape = relu2_shape,
    .forward = {.cpu = relu2_forward}, .backward_input = {{.cpu = relu2_backward}},
    .backward_input_reads = PL_OP_READS_INPUTS};
static const pl_op_def RELU2_ONCE = {
    .name = "relu2_once", .n_inputs = 1, .shape = relu2_shape,
    .forward = {.cpu = relu2_forward}, .backward_input = {{.cpu = relu2_backward}},
    .backward_input_reads = PL_OP_READS_INPUTS, .recompute = PL_OP_RECOMPUTE_NEVER};

/* Two blocks of linear -> user op -> linear, then a head; trained 2 steps
 * with full recomputation over 2 tiles: returns the user op's forward runs
 * and its R tasks in the last step. */
static void user_op_run(pl_runtime_t *rt, const pl_op_def *def, long *runs, int *r_tasks,
                        double *losses) {
    pl_graph_t *g = pl_graph_new(SEED);
    int64_t in = 12;
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, &in);
    pl_tensor_t *y = pl_graph_input(g, "y", PL_DTYPE_I32, 0, NULL);
    for (int l = 0; l < 2; l++) {
        char n[3][16];
        snprintf(n[0], 16, "l%d.fc1", l);
        snprintf(n[1], 16, "l%d.act", l);
        snprintf(n[2], 16, "l%d.fc2", l);
        pl_graph_begin_block(g, "layer");
        pl_tensor_t *h = pl_linear(g, x, 16, n[0]);
        h = pl_graph_op(g, def, &h, 1, NULL, n[1]);
        x = pl_linear(g, h, 12, n[2]);
    }
    pl_graph_begin_block(g, "head");
    pl_graph_set_loss(g, pl_cross_entropy(g, pl_linear(g, x, 4, "head"), y));
    config c = {.what = "user op", .m = 2, .precision = PL_PRECISION_FP32, .rc = full()};
    pl_engine_options eo = engine_options(&c, def != NULL);
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK(e != NULL, "user op %s: engine: %s", def->name, pl_last_error());
    relu2_runs = 0;
    *r_tasks = 0;
    for (int s = 0; e && s < 2; s++) {
        float xs[BATCH * 12];
        int32_t ys[BATCH];
        tu_class_batch(s, BATCH, 12, xs, ys);
        const void *data[2] = {xs, ys};
        pl_batch b = {.size = BATCH, .data = data};
        pl_step_result r;
        CHECK(pl_engine_train_step(e, &b, &r) == PL_STATUS_OK, "user op %s: step %d: %s",
              def->name, s, pl_last_error());
        losses[s] = r.loss;
    }
    const pl_task_record *rec;
    int n = e ? pl_engine_task_records(e, &rec) : 0;
    for (int i = 0; i < n; i++) *r_tasks += rec[i].phase == 'R' && strstr(rec[i].op, ".act");
    *runs = relu2_runs;
    pl_engine_free(e);
    pl_graph_free(g);
}

static void test_user_ops(pl_runtime_t *rt) {
    long runs, once_runs;
    int r_tasks, once_r;
    double l1[2], l2[2];
    user_op_run(rt, &RELU2, &runs, &r_tasks, l1);
    user_op_run(rt, &RELU2_ONCE, &once_runs, &once_r, l2);
    /* 2 steps x 2 layers x 2 tiles forwards, and as many re-runs for the
     * plain op; none for the one declared never to re-run. */
    CHECK(runs == 16 && r_tasks == 4, "user op: %ld forward runs and %d R tasks in the last "
          "step, expected 16 and 4", runs, r_tasks);
    CHECK(once_runs == 8 && once_r == 0, "user op marked PL_OP_RECOMPUTE_NEVER: %ld forward "
          "runs and %d R tasks, expected 8 and 0", once_runs, once_r);
    CHECK(!memcmp(l1, l2, sizeof l1), "user op: losses %.9g %.9g vs %.9g %.9g", l1[0], l1[1],
          l2[0], l2[1]);
    printf("user ops: re-run %ld forwards / %d R tasks; never re-run: %ld / %d\n", runs,
           r_tasks, once_runs, once_r);
}

/* ------------------------------------------------------------ 5. auto */

/* Under a 2 MB budget (the model state is 0.85 MB, the activations 1.3 MB)
 * with Gemini's auto placement and a disk tier, PL_RECOMPUTE_AUTO trains
 * to the bits of the unbudgeted run keeping everything; the plan it
 * reports after the timed second step recomputes at least one layer, and
 * before that every layer. */
/* A user's plan: the first layer recomputed, the rest kept; checks what
 * it is given (5 layers with times and bytes, outputs smaller). */
static void first_layer_only(void *user, int n, const pl_recompute_layer *layers,
                             int64_t budget, double bytes_per_us, bool *recompute) {
    (void)budget, (void)bytes_per_us;
    ++*(int *)user;
    for (int i = 0; i < n; i++) {
        CHECK(layers[i].forward_us > 0 && layers[i].bytes > layers[i].out_bytes &&
                  layers[i].out_bytes > 0,
              "a user's plan: layer %d (block %d) given %.1f us, %lld bytes, %lld out", i,
              layers[i].block, layers[i].forward_us, (long long)layers[i].bytes,
              (long long)layers[i].out_bytes);
        recompute[i] = i == 0;
    }
    CHECK(n == L + 1, "a user's plan: %d layers, expected %d", n, L + 1);
}

static void test_auto(const run_result *plain) {
    char dir[512];
    tu_scratch_path(dir, sizeof dir, "offload");
    mkdir(dir, 0700);
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 2;
    ro.compute_budget_mb = 2;
    ro.offload_dir = dir;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    CHECK(rt != NULL, "budgeted runtime: %s", pl_last_error());
    if (!rt) return;
    config c = {.what = "auto under 2 MB", .m = 2, .precision = PL_PRECISION_FP32};
    pl_graph_t *g = build_graph(&c);
    pl_engine_options eo = engine_options(&c, false);
    eo.placement.policy = pl_placement_by_name("auto", &eo.placement);
    eo.recompute.granularity = PL_RECOMPUTE_AUTO;
    pl_engine_t *e = g ? pl_engine_new(rt, g, &eo) : NULL;
    CHECK(e != NULL, "auto: engine: %s", pl_last_error());
    char before[1024] = "", after[1024] = "";
    bool ok = e != NULL;
    for (int s = 0; ok && s < STEPS; s++) {
        double loss;
        ok = tu_train_tokens(e, tokens[s], targets[s], BATCH, s, &loss);
        CHECK(!ok || memcmp(&loss, &plain->losses[s], sizeof loss) == 0,
              "auto under 2 MB: step %d loss %.17g, keeping everything %.17g", s, loss,
              plain->losses[s]);
        if (ok && s == 0) pl_engine_recompute_plan(e, before, sizeof before);
    }
    if (ok) pl_engine_recompute_plan(e, after, sizeof after);
    CHECK(strstr(before, "until the second step") && strstr(before, "kept 0"),
          "auto before its timing: '%s'", before);
    /* Which layers it re-runs depends on the measured times (a sanitizer
     * build's forwards are slower, and offloading can win): only that it
     * planned, and fits, is checked here (the planner's choices are
     * test_activation_plan's). */
    CHECK(strstr(after, "the plan:") && strstr(after, "predicted") &&
              !strstr(after, "no plan fits") && !strstr(after, "until the second step"),
          "auto after its timing: '%s'", after);
    printf("auto under 2 MB: losses bitwise those of the unbudgeted run; plan:\n%s\n", after);
    /* Three steps more: the plan runs one, every layer recomputed one,
     * none recomputed one (a candidate the plan already is is skipped),
     * and the fastest stays; the losses stay those of keeping everything
     * (here: the same placement without recomputation, same steps). */
    enum { TRIAL_STEPS = 3 };
    double trial_loss[TRIAL_STEPS] = {0};
    for (int s = 0; ok && s < TRIAL_STEPS; s++)
        ok = tu_train_tokens(e, tokens[s], targets[s], BATCH, STEPS + s, &trial_loss[s]);
    char tried[1024] = "";
    if (ok) pl_engine_recompute_plan(e, tried, sizeof tried);
    const char *kept = strstr(tried, "kept: ");
    CHECK(strstr(tried, "measured, one step each: the plan ") && kept &&
              (strstr(kept, "the plan") ? strstr(tried, "the plan:") != NULL
               : strstr(kept, "every layer") ? strstr(tried, "recomputed 5") != NULL
                                             : strstr(tried, "recomputed 0") != NULL),
          "auto's trial of its plan against every layer and no layer recomputed: '%s'",
          tried);
    printf("after the trial:\n%s\n", tried);
    pl_engine_free(e);
    pl_engine_options keep = eo;
    keep.recompute.granularity = PL_RECOMPUTE_NONE;
    pl_engine_t *k = ok ? pl_engine_new(rt, g, &keep) : NULL;
    for (int s = 0; k && s < STEPS + TRIAL_STEPS; s++) {
        double loss;
        if (!tu_train_tokens(k, tokens[s % STEPS], targets[s % STEPS], BATCH, s, &loss)) break;
        if (s >= STEPS)
            CHECK(memcmp(&loss, &trial_loss[s - STEPS], sizeof loss) == 0,
                  "auto's trial steps: step %d loss %.17g, keeping everything %.17g", s,
                  trial_loss[s - STEPS], loss);
    }
    if (k) pl_engine_free(k);
    /* A user's plan instead of the planner's: only the first layer. */
    eo.recompute.plan = first_layer_only;
    int calls = 0;
    eo.recompute.plan_user = &calls;
    e = g ? pl_engine_new(rt, g, &eo) : NULL;
    CHECK(e != NULL, "auto with a user's plan: engine: %s", pl_last_error());
    ok = e != NULL;
    for (int s = 0; ok && s < STEPS; s++) {
        double loss;
        ok = tu_train_tokens(e, tokens[s], targets[s], BATCH, s, &loss);
        CHECK(!ok || memcmp(&loss, &plain->losses[s], sizeof loss) == 0,
              "a user's plan: step %d loss %.17g, keeping everything %.17g", s, loss,
              plain->losses[s]);
    }
    if (ok) pl_engine_recompute_plan(e, after, sizeof after);
    CHECK(calls == 1 && strstr(after, "the user's plan") && strstr(after, "kept 4, recomputed 1"),
          "a user's plan (%d calls): '%s'", calls, after);
    pl_engine_free(e);
    pl_graph_free(g);
    pl_runtime_free(rt);
}

/* ----------------------------------------------------------- 4. refusals */

static void test_refusals(pl_runtime_t *rt) {
    config c = {.what = "refusals", .m = 2};
    struct {
        pl_recompute_options rc;
        bool check_finite;
        const char *frag;
    } bad[] = {
        {{.granularity = (pl_recompute_granularity)7}, false, "granularity 7"},
        {{.granularity = PL_RECOMPUTE_FULL, .ratio = 2.0}, false, "ratio 2"},
        {{.granularity = PL_RECOMPUTE_FULL, .ratio = 0.5, .num_layers = 2}, false, "not both"},
        {{.granularity = PL_RECOMPUTE_FULL, .num_layers = -1}, false, "num_layers -1"},
        {{.granularity = PL_RECOMPUTE_FULL}, true, "check_finite"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pl_graph_t *g = build_graph(&c);
        if (!g) return;
        pl_engine_options eo = engine_options(&c, false);
        eo.recompute = bad[i].rc;
        eo.check_finite = bad[i].check_finite;
        pl_clear_error();
        pl_engine_t *e = pl_engine_new(rt, g, &eo);
        tu_expect_error(__LINE__, bad[i].frag, e ? PL_STATUS_OK : pl_last_status(),
                        PL_STATUS_INVALID_ARGUMENT, bad[i].frag, NULL);
        CHECK(!e, "recompute options with %s were accepted", bad[i].frag);
        pl_engine_free(e);
        pl_graph_free(g);
    }
}

int main(void) {
    tu_time_limit(600, "a recomputing schedule deadlocked?");
    uint64_t s = 99;
    for (int st = 0; st < STEPS; st++) tu_ramp_tokens(&s, V, T, BATCH, tokens[st], targets[st]);
    if (!tu_scratch_create("recompute")) return 1;
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = WORKERS;
    ro.profiling = true;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) {
        printf("FAIL: pl_runtime_new: %s\n", pl_last_error());
        return 1;
    }
    const config cfgs[] = {
        {"none 2 tiles full", NULL, 1, 1, 2, PL_PRECISION_FP32, 1, false, full()},
        {"none 2 tiles selective", NULL, 1, 1, 2, PL_PRECISION_FP32, 1, false,
         {.granularity = PL_RECOMPUTE_SELECTIVE}},
        {"none 2 tiles full block 1", NULL, 1, 1, 2, PL_PRECISION_FP32, 1, false,
         {.granularity = PL_RECOMPUTE_FULL, .method = PL_RECOMPUTE_BLOCK, .num_layers = 1}},
        {"none 2 tiles full uniform 2", NULL, 1, 1, 2, PL_PRECISION_FP32, 1, false,
         {.granularity = PL_RECOMPUTE_FULL, .num_layers = 2}},
        {"none 2 tiles full ratio 0.5", NULL, 1, 1, 2, PL_PRECISION_FP32, 1, false,
         {.granularity = PL_RECOMPUTE_FULL, .ratio = 0.5}},
        {"1f1b p=2 m=4 full", "1f1b", 2, 1, 4, PL_PRECISION_FP32, 1, false, full()},
        {"interleaved p=2 v=2 m=4 full", "interleaved", 2, 2, 4, PL_PRECISION_FP32, 1, false,
         full()},
        {"zb-h1 p=2 m=4 full", "zb-h1", 2, 1, 4, PL_PRECISION_FP32, 1, false, full()},
        {"gpipe p=2 m=4 full", "gpipe", 2, 1, 4, PL_PRECISION_FP32, 1, false, full()},
        {"bf16 2 tiles full", NULL, 1, 1, 2, PL_PRECISION_BF16, 1, false, full()},
        {"accumulate 2, 2 tiles full", NULL, 1, 1, 2, PL_PRECISION_FP32, 2, false, full()},
        {"dropout 0.3, 2 tiles full", NULL, 1, 1, 2, PL_PRECISION_FP32, 1, true, full()},
    };
    enum { N = sizeof cfgs / sizeof cfgs[0] };
    run_result plain[N], rec[N];
    bool ok[N];
    /* PL_TEST_ONLY=i: configuration i alone (debugging). */
    const char *only = getenv("PL_TEST_ONLY");
    for (int i = 0; i < N; i++) {
        const config *c = &cfgs[i];
        if ((only && atoi(only) != i) ||
            (c->schedule && tu_pipeline_skipped(rt, c->p, c->what))) {
            ok[i] = false;
            memset(&plain[i], 0, sizeof plain[i]);
            memset(&rec[i], 0, sizeof rec[i]);
            continue;
        }
        ok[i] = run(rt, c, false, &plain[i]);
        ok[i] = run(rt, c, true, &rec[i]) && ok[i];
        if (ok[i]) compare(c, &plain[i], &rec[i]);
    }
    /* 2. which layers */
    if (ok[2]) {
        CHECK(strstr(rec[2].r_ops, "h0.") && !strstr(rec[2].r_ops, "h1.") &&
                  !strstr(rec[2].r_ops, "h3.") && !strstr(rec[2].r_ops, "ln_f"),
              "block 1: re-ran '%s', want layer 0's ops only", rec[2].r_ops);
    }
    if (ok[0]) {
        for (int l = 0; l < L; l++) {
            char key[16];
            snprintf(key, sizeof key, " h%d.", l);
            CHECK(strstr(rec[0].r_ops, key), "full: no op of layer %d re-ran ('%s')", l,
                  rec[0].r_ops);
        }
        CHECK(strstr(rec[0].r_ops, " ln_f "), "full: ln_f did not re-run ('%s')", rec[0].r_ops);
        CHECK(!strstr(rec[0].r_ops, "lm_head") && !strstr(rec[0].r_ops, "embedding"),
              "full: re-ran the head's output or the embedding ('%s')", rec[0].r_ops);
    }
    if (ok[1]) {
        /* Every re-run op is an attention op ("h<l>.attn"). */
        char ops[sizeof rec[1].r_ops];
        snprintf(ops, sizeof ops, "%s", rec[1].r_ops);
        int n = 0, bad = 0;
        for (char *tok = strtok(ops, " "); tok; tok = strtok(NULL, " ")) {
            size_t len = strlen(tok);
            n++;
            bad += len < 5 || strcmp(tok + len - 5, ".attn") != 0;
        }
        CHECK(n == L && bad == 0, "selective: re-ran '%s', want the %d attention ops only",
              rec[1].r_ops, L);
    }
    printf("re-run ops: full [%s]\n  block 1 [%s]\n  selective [%s]\n", rec[0].r_ops,
           rec[2].r_ops, rec[1].r_ops);
    test_refusals(rt);
    test_user_ops(rt);
    pl_runtime_free(rt);
    /* The memory bounds: one tile on one worker. With several, the order
     * in which ready tasks of a layer and of its re-run start varies with
     * the machine's load, and a peak with it (the bounds held alone and
     * failed about one run in four beside the rest of the suite). */
    ro.cpu_workers = 1;
    rt = pl_runtime_new(&ro);
    CHECK(rt != NULL, "one-worker runtime: %s", pl_last_error());
    const config mem_cfgs[2] = {
        {"one worker, 1 tile full", NULL, 1, 1, 1, PL_PRECISION_FP32, 1, false, full()},
        {"one worker, 1 tile selective", NULL, 1, 1, 1, PL_PRECISION_FP32, 1, false,
         {.granularity = PL_RECOMPUTE_SELECTIVE}},
    };
    run_result mem_plain, mem_rec[2];
    bool mem_ok = rt && run(rt, &mem_cfgs[0], false, &mem_plain);
    for (int k = 0; k < 2 && mem_ok; k++) {
        mem_ok = run(rt, &mem_cfgs[k], true, &mem_rec[k]);
        if (mem_ok) compare(&mem_cfgs[k], &mem_plain, &mem_rec[k]);
    }
    if (mem_ok) test_memory(&mem_plain, &mem_rec[0], &mem_rec[1]);
    if (mem_ok) test_memory_tiles(rt);
    if (mem_ok) {
        free(mem_plain.params);
        free(mem_rec[0].params);
        free(mem_rec[1].params);
    }
    pl_runtime_free(rt);
    if (ok[0]) test_auto(&plain[0]);
    for (int i = 0; i < N; i++) {
        free(plain[i].params);
        free(rec[i].params);
    }
    tu_remove_tree(tu_scratch_dir());
    if (tu_failures) printf("%d check(s) failed\n", tu_failures);
    return tu_failures ? 1 : 0;
}
