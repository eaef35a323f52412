/* 16-bit data parallelism (run under mpiexec with 2 or 4 ranks): bf16 and
 * fp16 under DDP and ZeRO-1/2.
 *
 * - The reduction: after one DDP update, each parameter's gradient is the
 *   mean of the ranks' 16-bit gradients, summed in fp32 in rank order and
 *   rounded once to the 16-bit format. The ranks' own gradients come from
 *   an independent run (a plain runtime, dp 1, on each rank's rows), the
 *   rounding from this file (bf16 by hand, fp16 by the compiler's
 *   _Float16), not from the library.
 * - Sharding changes nothing: DDP, ZeRO-1 and ZeRO-2 give bitwise the same
 *   losses and parameters (the same fp32 sums rounded the same way; the
 *   master weights and optimizer states updated shard by shard), in bf16
 *   and in fp16 with a dynamic loss scaler that overflows (the same scale
 *   sequence too).
 * - bf16 over N ranks tracks one process on the same global batch (the
 *   gradients are rounded per rank before the mean: close, not equal).
 * - ZeRO keeps 1/N of the fp32 master weights and of the optimizer states,
 *   and ZeRO-2 1/N of the reduced 16-bit gradients.
 * - ZeRO-3 in bf16 (16-bit parameter shards gathered, 16-bit gradients
 *   reduce-scattered) is bitwise the DDP run too (the tied embedding's two
 *   ops sum their tiles in buffers of their own, added before the
 *   chunk's reduce-scatter), keeping 1/N of the 16-bit parameters.
 * - bf16 ZeRO-2 and ZeRO-3 checkpoints (master weights gathered into
 *   them) resume bitwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pleiades.h"
#include "test_util.h"

enum { STEPS = 8, LOCAL_B = 4, V = 32, T = 8, RESUME_AT = 4 };

static pl_graph_t *build(void) {
    pl_graph_t *g = pl_graph_new(7);
    pl_gpt_config cfg = {.vocab = V, .context = T, .channels = 16, .layers = 2, .heads = 2};
    pl_gpt_model gm;
    if (!g || pl_gpt_build(g, &cfg, &gm) != PL_STATUS_OK) return NULL;
    return g;
}

typedef struct half_case {
    const char *name;
    pl_precision precision;
    int zero_stage;
} half_case;

/* fp16 starts from `scale` (0: 2^24, which these gradients overflow at
 * first, so the skipped updates must agree over ranks). */
static pl_engine_t *engine(pl_runtime_t *rt, pl_graph_t *g, pl_precision precision, int dp,
                           int zero_stage, int batch, double scale) {
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = batch;
    eo.tiles = 2;
    eo.optimizer.kind = PL_OPTIMIZER_ADAMW;
    eo.optimizer.lr = 1e-2f;
    eo.max_norm = 1.0f;
    eo.chunk_elems = 1024; /* several chunks, several buckets */
    eo.reduce_bucket_size_in_m = 0;
    eo.precision = precision;
    eo.dp = dp;
    eo.zero_stage = zero_stage;
    if (precision == PL_PRECISION_FP16) {
        eo.loss_scaler.initial_scale = scale > 0 ? scale : 0x1p24;
        eo.loss_scaler.hysteresis = 1;
    }
    return pl_engine_new(rt, g, &eo);
}

/* Global batch `index` (world·LOCAL_B rows): rows rank, rank + world, ...
 * of it, or with rank -1 every row (one process on the whole batch). */
static int batch_rows(int64_t index, int world, int rank, int32_t *tok, int32_t *y) {
    uint64_t s = 1000 + (uint64_t)index;
    int n = 0;
    for (int i = 0; i < world * LOCAL_B; i++) {
        bool mine = rank < 0 || i % world == rank;
        for (int t = 0; t < T; t++) {
            int32_t a = (int32_t)(tu_splitmix64(&s) % V);
            if (!mine) continue;
            tok[n * T + t] = a;
            y[n * T + t] = (a * 7 + 3) % V; /* learnable: a function of the token */
        }
        n += mine;
    }
    return n;
}

typedef struct run_out {
    double loss[STEPS], scale[STEPS];
    float *params;
    size_t n_params;
    pl_model_state_bytes bytes;
    int64_t numel; /* every chunk's elements */
} run_out;

static float *read_all(pl_engine_t *e, const pl_graph_t *g, bool grads, size_t *n) {
    size_t total = (size_t)pl_graph_param_count(g), off = 0;
    float *out = tu_xmalloc(total * sizeof *out);
    for (int i = 0; i < pl_graph_num_params(g); i++) {
        const pl_tensor_t *t = pl_graph_param(g, i);
        size_t k = (size_t)pl_tensor_numel(t);
        pl_status st = grads ? pl_engine_get_grad(e, t, out + off, k)
                             : pl_engine_get_param(e, t, out + off, k);
        CHECK(st == PL_STATUS_OK, "reading '%s': %s", pl_tensor_name(t), pl_last_error());
        off += k;
    }
    *n = total;
    return out;
}

/* Updates first..last-1, fed this rank's rows of each global batch of a
 * world of `world` ranks (rank -1: all of them). */
static bool train(pl_engine_t *e, int world, int rank, int first, int last, run_out *out) {
    int32_t tok[4 * LOCAL_B * T], y[4 * LOCAL_B * T];
    for (int s = first; s < last; s++) {
        const void *data[2] = {tok, y};
        pl_batch b = {.size = batch_rows(s, world, rank, tok, y), .data = data};
        pl_step_result r;
        if (pl_engine_train_step(e, &b, &r) != PL_STATUS_OK) {
            CHECK(false, "step %d (rank %d of %d): %s", s, rank, world, pl_last_error());
            return false;
        }
        out->loss[s] = r.loss;
        bool overflow = false;
        pl_engine_loss_scale(e, &out->scale[s], &overflow);
    }
    return true;
}

static bool run_split(pl_runtime_t *rt, const half_case *c, int world, int rank,
                      const char *save_to, const char *load_from, run_out *out) {
    pl_graph_t *g = build();
    pl_engine_t *e = g ? engine(rt, g, c->precision, world, c->zero_stage, LOCAL_B, 0)
                       : NULL;
    CHECK(e != NULL, "%s (%d ranks): engine: %s", c->name, world, pl_last_error());
    bool ok = e != NULL;
    int first = 0, last = save_to ? RESUME_AT : STEPS;
    if (ok && load_from) {
        ok = pl_engine_load_checkpoint(e, load_from, NULL) == PL_STATUS_OK;
        CHECK(ok, "%s: loading %s: %s", c->name, load_from, pl_last_error());
        first = RESUME_AT;
    }
    ok = ok && train(e, world, rank, first, last, out);
    if (ok && save_to) {
        ok = pl_engine_save_checkpoint(e, save_to, NULL) == PL_STATUS_OK;
        CHECK(ok, "%s: saving %s: %s", c->name, save_to, pl_last_error());
    }
    /* ZeRO-3 keeps shards: the whole parameters are gathered first. */
    if (ok) ok = pl_engine_gather_params(e) == PL_STATUS_OK;
    if (ok) {
        out->params = read_all(e, g, false, &out->n_params);
        ok = pl_engine_model_state_bytes(e, &out->bytes) == PL_STATUS_OK;
        out->numel = 0;
        for (int k = 0; k < pl_engine_num_chunks(e); k++)
            out->numel += (int64_t)pl_engine_chunk_elems(e, k);
    }
    pl_engine_free(e);
    pl_graph_free(g);
    return ok;
}

/* Independent roundings of an fp32 value. */
static float round_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return f; /* NaN */
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &u, sizeof f);
    return f;
}
static float round_fp16(float f) { return (float)(_Float16)f; }

static bool same_value(float a, float b) { return a == b || (isnan(a) && isnan(b)); }

/* Rank r's own gradient of the first batch, from a plain one-process run
 * on its rows (independent of the collectives). */
static float *local_grads(pl_runtime_t *plain, pl_precision precision, int world, int r,
                          size_t *n) {
    pl_graph_t *g = build();
    pl_engine_t *e = g ? engine(plain, g, precision, 1, 0, LOCAL_B, 0x1p10) : NULL;
    CHECK(e != NULL, "one-process engine: %s", pl_last_error());
    int32_t tok[LOCAL_B * T], y[LOCAL_B * T];
    const void *data[2] = {tok, y};
    pl_batch b = {.size = batch_rows(0, world, r, tok, y), .data = data};
    pl_step_options so = {.return_loss = true};
    pl_step_result res;
    float *out = NULL;
    if (e && pl_engine_forward_backward(e, &b, &so, &res) == PL_STATUS_OK)
        out = read_all(e, g, true, n);
    pl_engine_free(e);
    pl_graph_free(g);
    return out;
}

/* The reduction's semantics, for one precision: the DDP engine's reduced
 * gradient after its first update against the ranks' own (`local`). */
static void check_reduction(pl_runtime_t *dist, pl_precision precision, int world, int rank,
                            float *const *local, size_t n) {
    const char *name = precision == PL_PRECISION_BF16 ? "bf16" : "fp16";
    pl_graph_t *g = build();
    pl_engine_t *e = g ? engine(dist, g, precision, world, 0, LOCAL_B, 0x1p10) : NULL;
    CHECK(e != NULL, "%s: DDP engine: %s", name, pl_last_error());
    run_out one = {0};
    float *reduced = NULL;
    size_t m = 0;
    if (e && train(e, world, rank, 0, 1, &one)) reduced = read_all(e, g, true, &m);
    bool have = reduced && m == n;
    for (int r = 0; r < world; r++) have = have && local[r];
    size_t wrong = 0, first_wrong = 0, nonzero = 0;
    float inv = 1.0f / (float)world, want_first = 0.0f;
    for (size_t k = 0; have && k < n; k++) {
        float sum = 0.0f;
        for (int r = 0; r < world; r++) sum += local[r][k];
        float mean = sum * inv;
        float want = precision == PL_PRECISION_BF16 ? round_bf16(mean) : round_fp16(mean);
        if (!same_value(reduced[k], want) && wrong++ == 0) first_wrong = k, want_first = want;
        nonzero += want != 0.0f;
    }
    CHECK(have, "%s: the gradients could not be read", name);
    CHECK(!have || wrong == 0,
          "%s: %zu of %zu reduced gradients are not the rounded fp32 mean of the ranks' "
          "(first: element %zu is %.9g, expected %.9g)", name, wrong, n, first_wrong,
          have ? reduced[first_wrong] : 0.0, (double)want_first);
    CHECK(!have || nonzero > n / 2, "%s: only %zu of %zu gradients are nonzero", name, nonzero,
          n);
    if (rank == 0 && have && wrong == 0)
        printf("%s DDP over %d ranks: all %zu reduced gradients are the rounded fp32 mean of "
               "the ranks' own\n", name, world, n);
    free(reduced);
    pl_engine_free(e);
    pl_graph_free(g);
}

static bool same_run(const run_out *a, const run_out *b) {
    if (!a->params || !b->params || a->n_params != b->n_params) return false;
    for (int s = 0; s < STEPS; s++)
        if (a->loss[s] != b->loss[s] || a->scale[s] != b->scale[s]) return false;
    return memcmp(a->params, b->params, a->n_params * sizeof *a->params) == 0;
}

static const half_case CASES[] = {
    {"bf16 ddp", PL_PRECISION_BF16, 0},
    {"bf16 zero-1", PL_PRECISION_BF16, 1},
    {"bf16 zero-2", PL_PRECISION_BF16, 2},
    {"fp16 ddp, loss scaler", PL_PRECISION_FP16, 0},
    {"fp16 zero-1, loss scaler", PL_PRECISION_FP16, 1},
    {"fp16 zero-2, loss scaler", PL_PRECISION_FP16, 2},
    {"bf16 zero-3", PL_PRECISION_BF16, 3},
};
enum { N_CASES = 7, Z3_CASE = 6 };
/* Checkpoints: ZeRO-2 and ZeRO-3 (master weights and, for ZeRO-3, the
 * parameters gathered into the file). */
static const int CKPT_CASES[] = {2, Z3_CASE};

int main(void) {
    tu_time_limit(400, "test_data_parallel_half");
    const char *env = getenv("OMPI_COMM_WORLD_SIZE"), *renv = getenv("OMPI_COMM_WORLD_RANK");
    int world = env ? atoi(env) : 1, rank = renv ? atoi(renv) : 0;
    if (world < 2 || world > 4) {
        fprintf(stderr, "test_data_parallel_half: run it under mpiexec with 2 to 4 ranks\n");
        return 1;
    }
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 1;
    pl_runtime_t *plain = pl_runtime_new(&ro);
    CHECK(plain != NULL, "plain runtime: %s", pl_last_error());
    if (!plain) return 1;
    /* The one-process reference of the bf16 cases: the whole global
     * batch (world·LOCAL_B rows) in one engine. */
    run_out ref = {0};
    {
        pl_graph_t *g = build();
        pl_engine_t *e =
            g ? engine(plain, g, PL_PRECISION_BF16, 1, 0, world * LOCAL_B, 0) : NULL;
        CHECK(e != NULL, "bf16 one-process engine: %s", pl_last_error());
        if (e && train(e, world, -1, 0, STEPS, &ref)) ref.params = read_all(e, g, false, &ref.n_params);
        pl_engine_free(e);
        pl_graph_free(g);
    }
    /* Every rank's own gradients, bf16 then fp16 (from 2^10). */
    float *local[2][4] = {{0}};
    size_t n_local = 0;
    for (int p = 0; p < 2; p++)
        for (int r = 0; r < world; r++)
            local[p][r] = local_grads(plain, p == 0 ? PL_PRECISION_BF16 : PL_PRECISION_FP16,
                                      world, r, &n_local);
    pl_runtime_free(plain);
    ro.distributed = true;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    CHECK(rt != NULL, "distributed runtime: %s", pl_last_error());
    if (!rt) return 1;
    for (int p = 0; p < 2; p++)
        check_reduction(rt, p == 0 ? PL_PRECISION_BF16 : PL_PRECISION_FP16, world, rank,
                        local[p], n_local);
    for (int p = 0; p < 2; p++)
        for (int r = 0; r < world; r++) free(local[p][r]);

    run_out out[N_CASES];
    memset(out, 0, sizeof out);
    for (int i = 0; i < N_CASES; i++) run_split(rt, &CASES[i], world, rank, NULL, NULL, &out[i]);
    for (int i = 0; i < N_CASES; i++) {
        const half_case *c = &CASES[i];
        const run_out *ddp = &out[c->precision == PL_PRECISION_BF16 ? 0 : 3];
        /* ZeRO-3 too: op by op, the tied embedding's two ops still sum
         * their tiles in buffers of their own (engine/tied_grads.c). */
        if (c->zero_stage > 0)
            CHECK(same_run(&out[i], ddp), "%s (%d ranks): not bitwise the DDP run", c->name,
                  world);
        if (c->zero_stage > 0) {
            /* ZeRO-3: 1/N of the 16-bit parameters too. */
            CHECK(c->zero_stage < 3 || llabs(out[i].bytes.params * world - out[i].numel * 2) <=
                                           2 * 64 * world,
                  "%s: rank %d keeps %lld bytes of parameters, 1/%d of %lld expected",
                  c->name, rank, (long long)out[i].bytes.params, world,
                  (long long)(out[i].numel * 2));
            /* 1/N of the fp32 master weights and states (one element per
             * chunk of rounding), and ZeRO-2 of the 16-bit reduced
             * gradients. */
            const pl_model_state_bytes *b = &out[i].bytes;
            int64_t whole = out[i].numel * 4, slack = 4 * 64 * world;
            CHECK(llabs(b->master_weights * world - whole) <= slack &&
                      llabs(b->optimizer_states * world - 2 * whole) <= 2 * slack,
                  "%s: rank %d keeps %lld bytes of master weights and %lld of states, 1/%d "
                  "of %lld and %lld expected", c->name, rank, (long long)b->master_weights,
                  (long long)b->optimizer_states, world, (long long)whole,
                  (long long)(2 * whole));
            int64_t grads = c->zero_stage >= 2 ? b->reduced_grads * world : b->reduced_grads;
            CHECK(llabs(grads - out[i].numel * 2) <= slack / 2,
                  "%s: rank %d keeps %lld bytes of reduced gradients (16-bit, whole %lld)",
                  c->name, rank, (long long)b->reduced_grads, (long long)(out[i].numel * 2));
        }
        if (rank == 0)
            printf("%-28s %d ranks: loss %.5f -> %.5f%s\n", c->name, world, out[i].loss[0],
                   out[i].loss[STEPS - 1],
                   c->zero_stage == 3 ? ", the DDP run's to bf16 rounding"
                   : c->zero_stage ? ", bitwise the DDP run" : "");
    }
    /* fp16: the scaler overflowed (and backed off) on every rank alike. */
    CHECK(out[3].scale[STEPS - 1] < 0x1p24, "fp16: the loss scale never backed off from 2^24 "
          "(%g): the test would not test a combined overflow", out[3].scale[STEPS - 1]);
    /* bf16 against one process: rounded per rank before the mean, so
     * close (a few bf16 ulps of the loss) rather than equal. */
    double worst = 0;
    for (int s = 0; s < STEPS && ref.params; s++)
        worst = fmax(worst, fabs(out[0].loss[s] - ref.loss[s]) / fabs(ref.loss[s]));
    CHECK(ref.params && worst <= 1e-2, "bf16 DDP over %d ranks: losses differ from one "
          "process's by up to %.3g relative (1e-2 allowed)", world, worst);
    CHECK(fabs(ref.loss[STEPS - 1] - ref.loss[0]) > 1e-2, "bf16: the loss did not move");
    if (rank == 0)
        printf("bf16 DDP over %d ranks vs one process: losses within %.2e relative\n", world,
               worst);

    /* bf16 ZeRO-2 and ZeRO-3 checkpoints: saved at RESUME_AT, resumed
     * bitwise. */
    char dir[256];
    snprintf(dir, sizeof dir, "/tmp/pl_test_dp_half.%ld", (long)getppid());
    for (int k = 0; k < 2; k++) {
        const half_case *c = &CASES[CKPT_CASES[k]];
        const run_out *whole = &out[CKPT_CASES[k]];
        run_out first = {0}, rest = {0};
        if (whole->params && run_split(rt, c, world, rank, dir, NULL, &first) &&
            run_split(rt, c, world, rank, NULL, dir, &rest)) {
            bool same = memcmp(rest.params, whole->params,
                               rest.n_params * sizeof *rest.params) == 0;
            for (int s = RESUME_AT; s < STEPS; s++) same = same && rest.loss[s] == whole->loss[s];
            CHECK(same, "%s (%d ranks): saved after %d updates and resumed, the run differs "
                  "from the uninterrupted one", c->name, world, RESUME_AT);
            if (rank == 0 && same)
                printf("%s %d ranks: saved at update %d, resumed: bitwise the uninterrupted "
                       "run\n", c->name, world, RESUME_AT);
        }
        free(first.params);
        free(rest.params);
    }
    free(ref.params);
    for (int i = 0; i < N_CASES; i++) free(out[i].params);
    pl_runtime_free(rt);
    if (rank == 0) tu_remove_tree(dir);
    if (rank == 0) printf("%s\n", tu_failures ? "FAILED" : "ok");
    return tu_failures ? 1 : 0;
}
