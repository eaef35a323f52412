/* Data parallelism over ranks (run under mpiexec with 2 or 4 ranks): DDP
 * and ZeRO-1/2 train to the losses and parameters of one process on the
 * same global batch, for an MLP and a GPT, with and without gradient
 * accumulation, clipping (2-norm and inf-norm) and dynamic loss scaling
 * whose first updates overflow; ZeRO's per-rank optimizer-state and
 * (ZeRO-2) reduced-gradient bytes are 1/N of the whole; with the default
 * options the first bucket's all-reduce starts before the backward pass ends.
 *
 * The reference is independent of the collectives: each rank first runs
 * the one-process engine (dp 1, a plain StarPU) on the whole global batch;
 * then the distributed runtime runs dp = world size, each rank fed rows
 * rank, rank + N, ... of every global batch (DistributedSampler's split,
 * done here by hand).
 *
 * Tolerance: both runs compute the same sums in different orders (per
 * rank then averaged over ranks, against over tiles of the whole batch),
 * so each gradient differs by a few fp32 ulps relative to the sum of the
 * magnitudes it adds; ten updates carry such differences forward, and
 * Adam's m/sqrt(v) can magnify them for coordinates whose gradient is near
 * zero (at most lr per step, a bound too loose to test). So the check is
 * |a - b| <= 2e-5 + 2e-4·|b| for losses, and for parameters under SGD;
 * under AdamW, where a coordinate whose gradient is rounding noise may
 * move by lr either way (seen: 4.5e-5 with lr 1e-2), the parameters as a
 * whole: ||a - b|| <= 1e-4·||b||. Both are orders of magnitude above the
 * observed drift (printed), orders below what a missing or doubled
 * average, a rank left out, a wrong shard or a skipped reduction gives
 * (those change losses in the second or third digit). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <starpu.h>

#include "pleiades.h"
#include "test_util.h"

enum { STEPS = 10, LOCAL_B = 4, IN = 12, K = 4, V = 32, T = 8 };

typedef struct dp_case {
    const char *name;
    bool gpt;
    pl_optimizer_kind optimizer;
    int accumulate;
    float max_norm;          /* INFINITY: the inf-norm, clipped to 0.01 */
    size_t chunk_elems;      /* 0: searched (one chunk for these models) */
    int bucket_m;
    int zero_stage;
    bool loss_scale;         /* dynamic from 2^120 (exact powers of two: the
                                results must not change), so the overflow
                                verdict is combined over ranks */
} dp_case;

static pl_graph_t *build(const dp_case *c) {
    pl_graph_t *g = pl_graph_new(7);
    if (!g) return NULL;
    if (c->gpt) {
        pl_gpt_config cfg = {.vocab = V, .context = T, .channels = 16, .layers = 2, .heads = 2};
        pl_gpt_model gm;
        if (pl_gpt_build(g, &cfg, &gm) != PL_STATUS_OK) return NULL;
        return g;
    }
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, (int64_t[]){IN});
    pl_tensor_t *y = pl_graph_input(g, "y", PL_DTYPE_I32, 0, NULL);
    pl_tensor_t *h = pl_relu(g, pl_linear(g, x, 32, "fc1"));
    h = pl_relu(g, pl_linear(g, h, 32, "fc2"));
    pl_tensor_t *logits = pl_linear(g, h, K, "head");
    if (pl_graph_set_loss(g, pl_cross_entropy(g, logits, y)) != PL_STATUS_OK) return NULL;
    return g;
}

static pl_engine_t *engine(pl_runtime_t *rt, pl_graph_t *g, const dp_case *c, int batch,
                           int dp) {
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = batch;
    eo.tiles = 2;
    eo.optimizer.kind = c->optimizer;
    eo.optimizer.lr = c->optimizer == PL_OPTIMIZER_SGD ? 0.1f : 1e-2f;
    eo.optimizer.momentum = c->optimizer == PL_OPTIMIZER_SGD ? 0.9f : 0.0f;
    eo.accumulate_size = c->accumulate;
    eo.max_norm = isinf(c->max_norm) ? 0.01f : c->max_norm; /* inf: clips every step */
    eo.norm_type = isinf(c->max_norm) ? INFINITY : 2.0f;
    eo.chunk_elems = c->chunk_elems;
    eo.reduce_bucket_size_in_m = c->bucket_m;
    eo.dp = dp;
    eo.zero_stage = dp > 1 ? c->zero_stage : 0;
    if (c->loss_scale) {
        eo.loss_scaler.enabled = true;
        eo.loss_scaler.initial_scale = 0x1p120;
        eo.loss_scaler.max_scale = 0x1p120;
        eo.loss_scaler.hysteresis = 1;
        eo.loss_scaler.backoff_factor = 1.0 / 1024;
    }
    return pl_engine_new(rt, g, &eo);
}

/* Global batch `index` (dp·LOCAL_B samples), then this rank's rows. */
static void global_batch(const dp_case *c, int64_t index, int n, float *x, int32_t *tok,
                         int32_t *y) {
    if (!c->gpt) {
        tu_class_batch(index, n, IN, x, y);
        return;
    }
    uint64_t s = 1000 + (uint64_t)index;
    for (int i = 0; i < n * T; i++) {
        tok[i] = (int32_t)(tu_splitmix64(&s) % V);
        y[i] = (int32_t)((tok[i] * 7 + 3) % V); /* learnable: a function of the token */
    }
}

/* Rows rank, rank + world, ... of a global batch of n rows of `row`
 * elements (element size `size`). */
static void take_rows(void *dst, const void *src, int n, size_t row, int rank, int world) {
    for (int i = 0; i * world + rank < n; i++)
        memcpy((char *)dst + (size_t)i * row, (const char *)src + (size_t)(i * world + rank) * row,
               row);
}

typedef struct run_out {
    double loss[STEPS];
    float *params;
    size_t n_params;
    pl_model_state_bytes bytes;
    int64_t chunk_bytes;     /* every chunk's elements as floats (padding
                                included: the searched chunks of a ZeRO-3
                                run differ from one process's) */
    int64_t largest_chunk;   /* bytes */
    bool grad_readable;      /* pl_engine_get_grad after the last update */
    char grad_error[256];    /* its error otherwise */
} run_out;

/* Updates first..last-1 (of `accumulate` batches each, the stream's
 * batches from first·accumulate on); `world` 1 = the reference on the
 * whole global batch. */
static bool train(pl_engine_t *e, const dp_case *c, int world, int rank, int global_n,
                  int first, int last, run_out *out) {
    int local_n = global_n / world;
    float *x = tu_xmalloc((size_t)global_n * IN * sizeof *x);
    int32_t *tok = tu_xmalloc((size_t)global_n * T * sizeof *tok);
    int32_t *y = tu_xmalloc((size_t)global_n * T * sizeof *y);
    float *lx = tu_xmalloc((size_t)local_n * IN * sizeof *lx);
    int32_t *ltok = tu_xmalloc((size_t)local_n * T * sizeof *ltok);
    int32_t *ly = tu_xmalloc((size_t)local_n * T * sizeof *ly);
    bool ok = true;
    int64_t index = (int64_t)first * c->accumulate;
    for (int s = first; s < last && ok; s++) {
        double loss = 0.0;
        for (int a = 0; a < c->accumulate && ok; a++, index++) {
            global_batch(c, index, global_n, x, tok, y);
            const void *data[2];
            if (c->gpt) {
                take_rows(ltok, tok, global_n, (size_t)T * sizeof *tok, rank, world);
                take_rows(ly, y, global_n, (size_t)T * sizeof *y, rank, world);
                data[0] = ltok;
                data[1] = ly;
            } else {
                take_rows(lx, x, global_n, (size_t)IN * sizeof *x, rank, world);
                take_rows(ly, y, global_n, sizeof *y, rank, world);
                data[0] = lx;
                data[1] = ly;
            }
            pl_batch b = {.size = local_n, .data = data};
            pl_step_result r;
            ok = pl_engine_train_step(e, &b, &r) == PL_STATUS_OK;
            CHECK(ok, "%s: step %d (dp %d): %s", c->name, s, world, pl_last_error());
            CHECK(!ok || r.size == global_n, "%s: result size %lld, expected the global %d",
                  c->name, (long long)r.size, global_n);
            loss += r.loss / c->accumulate;
        }
        out->loss[s] = loss;
    }
    free(x);
    free(tok);
    free(y);
    free(lx);
    free(ltok);
    free(ly);
    return ok;
}

/* The parameters and state bytes after a run. */
static bool collect(pl_engine_t *e, pl_graph_t *g, run_out *out) {
    /* ZeRO-3 keeps shards: the whole parameters are gathered first. */
    bool ok = pl_engine_gather_params(e) == PL_STATUS_OK;
    CHECK(ok, "gathering the parameters: %s", pl_last_error());
    {
        free(out->params);
        size_t total = (size_t)pl_graph_param_count(g), off = 0;
        out->params = tu_xmalloc(total * sizeof *out->params);
        for (int i = 0; i < pl_graph_num_params(g) && ok; i++) {
            const pl_tensor_t *t = pl_graph_param(g, i);
            size_t k = (size_t)pl_tensor_numel(t);
            ok = pl_engine_get_param(e, t, out->params + off, k) == PL_STATUS_OK;
            off += k;
        }
        out->n_params = total;
        ok = ok && pl_engine_model_state_bytes(e, &out->bytes) == PL_STATUS_OK;
        const pl_tensor_t *p0 = pl_graph_param(g, 0);
        float *grad = tu_xmalloc((size_t)pl_tensor_numel(p0) * sizeof *grad);
        out->grad_readable = pl_engine_get_grad(e, p0, grad, (size_t)pl_tensor_numel(p0)) ==
                             PL_STATUS_OK;
        snprintf(out->grad_error, sizeof out->grad_error, "%s",
                 out->grad_readable ? "" : pl_last_error());
        free(grad);
        out->chunk_bytes = out->largest_chunk = 0;
        for (int c = 0; c < pl_engine_num_chunks(e); c++) {
            int64_t b = (int64_t)(pl_engine_chunk_elems(e, c) * sizeof(float));
            out->chunk_bytes += b;
            if (b > out->largest_chunk) out->largest_chunk = b;
        }
    }
    return ok;
}

/* STEPS updates from the start, or (ckpt) `resume_at` updates, a save
 * into ckpt, then the rest in a fresh engine that loads it (written by
 * this world: exact; by another: the states are resharded). */
static bool run_split(pl_runtime_t *rt, const dp_case *c, int world, int rank, int global_n,
                      const char *save_to, const char *load_from, int resume_at,
                      run_out *out) {
    pl_graph_t *g = build(c);
    CHECK(g != NULL, "%s: graph: %s", c->name, pl_last_error());
    if (!g) return false;
    pl_engine_t *e = engine(rt, g, c, global_n / world, world);
    CHECK(e != NULL, "%s: engine (dp %d): %s", c->name, world, pl_last_error());
    bool ok = e != NULL;
    int first = 0;
    if (ok && load_from) {
        ok = pl_engine_load_checkpoint(e, load_from, NULL) == PL_STATUS_OK;
        CHECK(ok, "%s (dp %d): loading %s: %s", c->name, world, load_from, pl_last_error());
        first = resume_at;
    }
    int last = save_to ? resume_at : STEPS;
    ok = ok && train(e, c, world, rank, global_n, first, last, out);
    if (ok && save_to) {
        ok = pl_engine_save_checkpoint(e, save_to, NULL) == PL_STATUS_OK;
        CHECK(ok, "%s (dp %d): saving %s: %s", c->name, world, save_to, pl_last_error());
    }
    ok = ok && collect(e, g, out);
    pl_engine_free(e);
    pl_graph_free(g);
    return ok;
}

static bool run(pl_runtime_t *rt, const dp_case *c, int world, int rank, int global_n,
                run_out *out) {
    return run_split(rt, c, world, rank, global_n, NULL, NULL, 0, out);
}

static bool close_to(double a, double b) { return fabs(a - b) <= 2e-5 + 2e-4 * fabs(b); }

/* Memory placement under data parallelism: a GPT whose model state (~3.5
 * MB with AdamW) does not fit the 2 MB compute budget each rank's runtime
 * is given (a disk tier behind it), trained with a placement policy, is
 * bitwise the run without a budget: placement moves data, never changes
 * what a task computes. ZeRO-3 (auto: its shards are the units the policy
 * moves, gathered chunks count as model data), ZeRO-2 (static) and DDP
 * (auto). */
typedef struct placed_case {
    const char *name;
    int zero_stage;
    bool auto_policy;
    float shard_param_frac; /* >= 0: static placement with it, budget or
                               not (Gemini's meaning under ZeRO-3) */
} placed_case;
static const placed_case PLACED[] = {
    {"zero-3 gpt adamw, auto placement", 3, true, -1.0f},
    {"zero-2 gpt adamw, static placement", 2, false, -1.0f},
    {"ddp gpt adamw, auto placement", 0, true, -1.0f},
};
enum { N_PLACED = 3, PLACED_STEPS = 4 };

/* Gemini's shard_param_frac over ranks: ZeRO-3 under static placement
 * keeps the chunks past the first that fraction of chunk memory gathered
 * from the forward pass's gather to the backward pass's release. */
static const placed_case FRACS[] = {
    {"zero-3 gpt adamw, static, shard_param_frac 1", 3, false, 1.0f},
    {"zero-3 gpt adamw, static, shard_param_frac 0.3", 3, false, 0.3f},
    {"zero-3 gpt adamw, static, shard_param_frac 0", 3, false, 0.0f},
};
enum { N_FRACS = 3 };

/* PLACED_STEPS updates of case pc; placement only when the runtime has a
 * budget. Returns the evictions of the last update through *evictions. */
static bool run_placed(pl_runtime_t *rt, const placed_case *pc, int world, int rank,
                       bool budget, run_out *out, int64_t *evictions, int64_t *comm_bytes) {
    pl_graph_t *g = pl_graph_new(7);
    pl_gpt_config cfg = {.vocab = 256, .context = T, .channels = 64, .layers = 4, .heads = 2};
    pl_gpt_model gm;
    bool ok = g && pl_gpt_build(g, &cfg, &gm) == PL_STATUS_OK;
    CHECK(ok, "%s: graph: %s", pc->name, pl_last_error());
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = LOCAL_B;
    eo.tiles = 2;
    eo.optimizer.kind = PL_OPTIMIZER_ADAMW;
    eo.optimizer.lr = 1e-2f;
    eo.max_norm = 1.0f;
    eo.chunk_elems = 1 << 16; /* 256 KB chunks: several to move */
    eo.reduce_bucket_size_in_m = 0;
    eo.dp = world;
    eo.zero_stage = pc->zero_stage;
    if (budget) eo.placement.policy = pc->auto_policy ? pl_placement_auto() : pl_placement_static();
    if (pc->shard_param_frac >= 0) {
        eo.placement.policy = pl_placement_static();
        eo.placement.shard_param_frac = pc->shard_param_frac;
    }
    eo.record_tasks = comm_bytes != NULL;
    pl_engine_t *e = ok ? pl_engine_new(rt, g, &eo) : NULL;
    CHECK(!ok || e, "%s (dp %d%s): engine: %s", pc->name, world, budget ? ", budget" : "",
          pl_last_error());
    dp_case c = {.name = pc->name, .gpt = true, .optimizer = PL_OPTIMIZER_ADAMW,
                 .accumulate = 1};
    ok = e && train(e, &c, world, rank, world * LOCAL_B, 0, PLACED_STEPS, out);
    /* Bytes the last step's collectives moved (before collect's gathers). */
    const pl_task_record *rec;
    int nr = ok && comm_bytes ? pl_engine_task_records(e, &rec) : 0;
    for (int i = 0; comm_bytes && i < nr; i++)
        if (i == 0) *comm_bytes = 0;
    for (int i = 0; comm_bytes && i < nr; i++)
        if (rec[i].phase == 'C') *comm_bytes += rec[i].bytes;
    ok = ok && collect(e, g, out);
    pl_iteration_memory mem = {0};
    if (ok && budget) ok = pl_engine_memory(e, &mem) == PL_STATUS_OK;
    *evictions = mem.evictions;
    pl_engine_free(e);
    pl_graph_free(g);
    return ok;
}

static const dp_case CASES[] = {
    {"mlp sgd", false, PL_OPTIMIZER_SGD, 1, 0.0f, 0, 12, 0, false},
    {"mlp adamw accumulate 2 clip 0.5, chunk buckets", false, PL_OPTIMIZER_ADAMW, 2, 0.5f,
     512, 0, 0, false},
    {"gpt adamw, chunk buckets", true, PL_OPTIMIZER_ADAMW, 1, 0.0f, 1024, 0, 0, false},
    {"gpt sgd accumulate 2 clip 1", true, PL_OPTIMIZER_SGD, 2, 1.0f, 0, 12, 0, false},
    {"zero-1 mlp sgd accumulate 2 clip 0.5", false, PL_OPTIMIZER_SGD, 2, 0.5f, 512, 0, 1, false},
    {"zero-1 gpt adamw clip 1, chunk buckets", true, PL_OPTIMIZER_ADAMW, 1, 1.0f, 1024, 0, 1, false},
    {"zero-1 gpt sgd", true, PL_OPTIMIZER_SGD, 1, 0.0f, 0, 12, 1, false},
    {"zero-2 mlp sgd accumulate 2 clip 0.5", false, PL_OPTIMIZER_SGD, 2, 0.5f, 512, 0, 2, false},
    {"zero-2 gpt adamw clip 1, chunk buckets", true, PL_OPTIMIZER_ADAMW, 1, 1.0f, 1024, 0, 2, false},
    {"zero-2 gpt sgd clip inf, loss scaling", true, PL_OPTIMIZER_SGD, 1, INFINITY, 0, 12, 2,
     true},
    {"ddp mlp sgd clip 0.5, loss scaling", false, PL_OPTIMIZER_SGD, 1, 0.5f, 512, 0, 0, true},
    /* ZeRO-3: cases 7, 8 and 9 with the parameters sharded too */
    {"zero-3 mlp sgd accumulate 2 clip 0.5", false, PL_OPTIMIZER_SGD, 2, 0.5f, 512, 0, 3, false},
    {"zero-3 gpt adamw clip 1, chunk buckets", true, PL_OPTIMIZER_ADAMW, 1, 1.0f, 1024, 0, 3, false},
    {"zero-3 gpt sgd clip inf, loss scaling", true, PL_OPTIMIZER_SGD, 1, INFINITY, 0, 12, 3,
     true},
};
#define N_CASES ((int)(sizeof CASES / sizeof *CASES))
/* The checkpoint tests: ZeRO-2 and ZeRO-3, AdamW (states that matter),
 * GPT; each ZeRO-3 case is the ZeRO-2 case 4 places before it. */
enum { CKPT_CASE = 8, Z3_CKPT_CASE = 12, Z3_TWIN = 4, RESUME_AT = 4 };
static const int CKPT_CASES[] = {CKPT_CASE, Z3_CKPT_CASE};

/* Overlap: with the default options (Colossal-AI's 12 M-element buckets,
 * overlap_communication on) a model of 2.3 M parameters still gets
 * several buckets, and the first bucket's all-reduce is ready to run
 * (StarPU pushed it: every task it depends on has ended) while the
 * backward pass is still running, before the last weight-gradient task
 * ends. That is what the engine controls; when the communication worker
 * actually starts it depends on the host's load (ctest runs other MPI
 * tests beside this one on 2 cores), so the start is printed, not
 * asserted. Even readiness needs the main thread to have submitted the
 * reductions (after the whole backward pass) before the workers finish
 * it, which a loaded host can delay (CI's sanitizer pass saw one step
 * ready 8.3 ms late; a full suite on 2 cores once saw every step of rank
 * 0 late by 2.7 ms or more while rank 1's were 20.8 ms early), so any of
 * several steps on any rank may show it (rank 0 judges the gathered
 * records: a step's, and the engine's, are the same on every rank). Fails if the
 * reductions wait for the whole backward pass (one bucket, or overlap
 * off: they are then submitted after every task has ended, in every
 * step). */
static void check_overlap(pl_runtime_t *rt, int world, int rank) {
    enum { OIN = 256, OWIDTH = 1024, OB = 256 };
    pl_graph_t *g = pl_graph_new(3);
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, (int64_t[]){OIN});
    pl_tensor_t *y = pl_graph_input(g, "y", PL_DTYPE_I32, 0, NULL);
    pl_tensor_t *h = pl_relu(g, pl_linear(g, x, OWIDTH, "fc1"));
    h = pl_relu(g, pl_linear(g, h, OWIDTH, "fc2"));
    h = pl_relu(g, pl_linear(g, h, OWIDTH, "fc3"));
    CHECK(pl_graph_set_loss(g, pl_cross_entropy(g, pl_linear(g, h, K, "head"), y)) ==
              PL_STATUS_OK, "overlap model: %s", pl_last_error());
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = OB;
    eo.tiles = 1;
    eo.dp = world;
    eo.record_tasks = true;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK(e != NULL, "overlap engine: %s", pl_last_error());
    if (!e) return pl_graph_free(g);
    float *xs = tu_xmalloc((size_t)OB * OIN * sizeof *xs);
    int32_t *ys = tu_xmalloc((size_t)OB * sizeof *ys);
    tu_class_batch(rank, OB, OIN, xs, ys);
    /* A warm-up step, then ATTEMPTS steps, each judged on its own task
     * records; every rank runs them all (the steps and the gathering of
     * records are collective), and rank 0 judges every rank's. */
    enum { ATTEMPTS = 4, MAX_RANKS = 8 };
    bool ok = world <= MAX_RANKS, overlapped = false;
    int buckets = 0;
    double lead_ready = -INFINITY, lead_start = -INFINITY;
    int lead_rank = -1;
    for (int s = 0; s <= ATTEMPTS && ok; s++) {
        pl_batch b = {.size = OB, .data = (const void *[]){xs, ys}};
        pl_step_result r;
        ok = pl_engine_train_step(e, &b, &r) == PL_STATUS_OK;
        CHECK(ok, "overlap step %d: %s", s, pl_last_error());
        pl_task_record *rec = NULL;
        int n = ok && s > 0 ? pl_engine_gather_task_records(e, &rec) : 0;
        double last_w[MAX_RANKS], first_ready[MAX_RANKS], first_start[MAX_RANKS];
        int nb[MAX_RANKS] = {0};
        for (int k = 0; k < MAX_RANKS; k++)
            last_w[k] = 0, first_ready[k] = first_start[k] = INFINITY;
        for (int i = 0; i < n; i++) {
            int k = rec[i].rank;
            if (k < 0 || k >= MAX_RANKS) continue;
            if (rec[i].phase == 'W' && rec[i].end_us > last_w[k]) last_w[k] = rec[i].end_us;
            if (strncmp(rec[i].name, "allreduce.b", 11) == 0) {
                nb[k]++;
                first_ready[k] = fmin(first_ready[k], rec[i].ready_us);
                first_start[k] = fmin(first_start[k], rec[i].start_us);
            }
        }
        free(rec);
        for (int k = 0; n > 0 && k < world; k++) {
            buckets = nb[k];
            if (last_w[k] - first_ready[k] > lead_ready) {
                lead_ready = last_w[k] - first_ready[k];
                lead_start = last_w[k] - first_start[k];
                lead_rank = k;
            }
            overlapped = overlapped || first_ready[k] < last_w[k];
        }
    }
    if (rank == 0) {
        CHECK(!ok || buckets >= 2, "overlap: %d all-reduce buckets with the default options, "
              "expected several", buckets);
        CHECK(!ok || overlapped, "overlap: in none of %d steps on any rank did the first "
              "all-reduce become ready before the backward pass's last weight gradient ended "
              "(best: %.0f us after)", ATTEMPTS, -lead_ready);
        if (ok && buckets >= 2 && overlapped)
            printf("overlap: %d buckets, the first all-reduce ready %.1f ms and started %.1f ms "
                   "before the last weight gradient ended (best of %d steps x %d ranks: rank "
                   "%d)\n", buckets, lead_ready / 1e3, lead_start / 1e3, ATTEMPTS, world,
                   lead_rank);
    }
    free(xs);
    free(ys);
    pl_engine_free(e);
    pl_graph_free(g);
}

/* StarPU's allocation cache hands a freed block to the next allocation of
 * its size: NaN-filled blocks of a gradient chunk's size left there make
 * a returned chunk that is not zeroed where no weight gradient writes
 * carry NaN into the update. */
static void poison_allocation_cache(size_t elems) {
    enum { BLOCKS = 8 };
    starpu_data_handle_t h[BLOCKS];
    for (int k = 0; k < BLOCKS; k++) {
        starpu_vector_data_register(&h[k], -1, 0, (uint32_t)elems, sizeof(float));
        starpu_data_acquire(h[k], STARPU_W);
        float *p = (float *)starpu_vector_get_local_ptr(h[k]);
        for (size_t i = 0; i < elems; i++) p[i] = NAN;
        starpu_data_release(h[k]);
    }
    for (int k = 0; k < BLOCKS; k++) starpu_data_unregister(h[k]);
}

/* ZeRO-2 with a parameter chunk no backward pass writes (a layer whose
 * output the loss does not use): its released gradients must still come
 * back (zeros) for the reduce-scatter, which reads every chunk. The same
 * sums as DDP's, so the same parameters, with the allocation cache
 * poisoned before every step. */
static bool dead_branch_run(pl_runtime_t *rt, int world, int rank, int zero_stage,
                            float *params, size_t n_params, float *fc1_grad) {
    pl_graph_t *g = pl_graph_new(7);
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, (int64_t[]){IN});
    pl_tensor_t *y = pl_graph_input(g, "y", PL_DTYPE_I32, 0, NULL);
    (void)pl_linear(g, x, 80, "unused"); /* 960 weights: a chunk of its own */
    pl_tensor_t *logits = pl_linear(g, pl_relu(g, pl_linear(g, x, 32, "fc1")), K, "head");
    bool ok = pl_graph_set_loss(g, pl_cross_entropy(g, logits, y)) == PL_STATUS_OK;
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = LOCAL_B;
    eo.optimizer.kind = PL_OPTIMIZER_SGD;
    eo.optimizer.lr = 0.1f;
    eo.chunk_elems = 1024;
    eo.dp = world;
    eo.zero_stage = zero_stage;
    pl_engine_t *e = ok ? pl_engine_new(rt, g, &eo) : NULL;
    CHECK(e != NULL, "dead branch, zero-%d: engine: %s", zero_stage, pl_last_error());
    ok = e != NULL;
    float xb[LOCAL_B * 4 * IN];
    int32_t yb[LOCAL_B * 4];
    for (int s = 0; ok && s < 3; s++) {
        starpu_task_wait_for_all();
        poison_allocation_cache(1024);
        tu_class_batch(s, world * LOCAL_B, IN, xb, yb);
        float lx[LOCAL_B * IN];
        int32_t ly[LOCAL_B];
        take_rows(lx, xb, world * LOCAL_B, IN * sizeof *lx, rank, world);
        take_rows(ly, yb, world * LOCAL_B, sizeof *ly, rank, world);
        const void *data[2] = {lx, ly};
        pl_batch b = {.size = LOCAL_B, .data = data};
        pl_step_result r;
        /* The last step in two halves: this rank's gradients (before the
         * update reduces them) are readable between them, ZeRO-2's too. */
        pl_step_options so = {.return_loss = true};
        ok = pl_engine_forward_backward(e, &b, &so, &r) == PL_STATUS_OK && isfinite(r.loss);
        for (int i = 0; ok && s == 2 && i < pl_graph_num_params(g); i++) {
            const pl_tensor_t *t = pl_graph_param(g, i);
            if (pl_tensor_numel(t) == IN * 32) /* fc1's weight */
                ok = pl_engine_get_grad(e, t, fc1_grad, IN * 32) == PL_STATUS_OK;
        }
        ok = ok && pl_engine_optimizer_step(e) == PL_STATUS_OK;
        CHECK(ok, "dead branch, zero-%d: step %d: %s", zero_stage, s, pl_last_error());
    }
    size_t off = 0;
    for (int i = 0; ok && i < pl_graph_num_params(g); i++) {
        const pl_tensor_t *t = pl_graph_param(g, i);
        size_t k = (size_t)pl_tensor_numel(t);
        ok = off + k <= n_params && pl_engine_get_param(e, t, params + off, k) == PL_STATUS_OK;
        off += k;
    }
    pl_engine_free(e);
    pl_graph_free(g);
    return ok;
}

int main(void) {
    tu_time_limit(500, "test_data_parallel");
    const char *env = getenv("OMPI_COMM_WORLD_SIZE");
    int world = env ? atoi(env) : 1;
    const char *renv = getenv("OMPI_COMM_WORLD_RANK");
    int rank = renv ? atoi(renv) : 0;
    if (world < 2) {
        fprintf(stderr, "test_data_parallel: run it under mpiexec with 2 or more ranks\n");
        return 1;
    }
    int global_n = world * LOCAL_B;
    run_out ref[N_CASES], dist[N_CASES];
    memset(ref, 0, sizeof ref);
    memset(dist, 0, sizeof dist);

    /* Checkpoints: a folder every rank knows (the ranks are mpiexec's
     * children), one reference checkpoint per rank inside it. */
    char dir[256], ref_ckpt[300], dp_ckpt[300];
    snprintf(dir, sizeof dir, "/tmp/pl_test_dp.%ld", (long)getppid());
    snprintf(ref_ckpt, sizeof ref_ckpt, "%s/ref-rank%d", dir, rank);
    snprintf(dp_ckpt, sizeof dp_ckpt, "%s/dp", dir);
    mkdir(dir, 0777);
    run_out resharded[2];
    memset(resharded, 0, sizeof resharded);

    /* The references, in a plain (non-distributed) runtime; the one of
     * CKPT_CASE also saved at RESUME_AT updates. */
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 1;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    CHECK(rt != NULL, "plain runtime: %s", pl_last_error());
    for (int i = 0; rt && i < N_CASES; i++) run(rt, &CASES[i], 1, 0, global_n, &ref[i]);
    for (int k = 0; rt && k < 2; k++) {
        char path[320];
        snprintf(path, sizeof path, "%s-%d", ref_ckpt, k);
        run_split(rt, &CASES[CKPT_CASES[k]], 1, 0, global_n, path, NULL, RESUME_AT,
                  &resharded[k]);
    }
    pl_runtime_free(rt);

    ro.distributed = true;
    ro.profiling = true; /* check_overlap reads task records */
    rt = pl_runtime_new(&ro);
    CHECK(rt != NULL, "distributed runtime: %s", pl_last_error());
    if (!rt) return 1;
    CHECK(pl_runtime_world_size(rt) == world && pl_runtime_rank(rt) == rank,
          "runtime: rank %d of %d, mpiexec says %d of %d", pl_runtime_rank(rt),
          pl_runtime_world_size(rt), rank, world);
    CHECK(pl_runtime_cpu_workers(rt) == 1, "compute workers: %d, expected 1 (the "
          "communication worker is not counted)", pl_runtime_cpu_workers(rt));
    check_overlap(rt, world, rank);
    for (int i = 0; i < N_CASES; i++) {
        const dp_case *c = &CASES[i];
        if (!ref[i].params || !run(rt, c, world, rank, global_n, &dist[i])) continue;
        double worst_loss = 0, worst_param = 0;
        bool losses_ok = true, params_ok = true;
        for (int s = 0; s < STEPS; s++) {
            worst_loss = fmax(worst_loss, fabs(dist[i].loss[s] - ref[i].loss[s]));
            if (!close_to(dist[i].loss[s], ref[i].loss[s]) && losses_ok) {
                losses_ok = false;
                CHECK(false, "%s (dp %d): step %d loss %.9g, one process %.9g", c->name,
                      world, s, dist[i].loss[s], ref[i].loss[s]);
            }
        }
        double diff2 = 0, norm2 = 0;
        for (size_t k = 0; k < ref[i].n_params; k++) {
            double d = dist[i].params[k] - ref[i].params[k];
            diff2 += d * d;
            norm2 += (double)ref[i].params[k] * ref[i].params[k];
        }
        double rel = sqrt(diff2 / norm2);
        bool adam = c->optimizer == PL_OPTIMIZER_ADAMW;
        CHECK(!adam || rel <= 1e-4, "%s (dp %d): ||params - one process|| / ||params|| = %.3g",
              c->name, world, rel);
        for (size_t k = 0; k < ref[i].n_params; k++) {
            worst_param = fmax(worst_param, fabs(dist[i].params[k] - ref[i].params[k]));
            if (!adam && !close_to(dist[i].params[k], ref[i].params[k]) && params_ok) {
                params_ok = false;
                CHECK(false, "%s (dp %d): parameter element %zu is %.9g, one process %.9g",
                      c->name, world, k, dist[i].params[k], ref[i].params[k]);
            }
        }
        /* ZeRO-1: this rank's optimizer states are its 1/N of the whole
         * (each chunk split as evenly as elements allow: within one
         * element per chunk of total / N); DDP keeps them all. */
        /* Whole: of this run's own chunks (ZeRO-3 searches other sizes). */
        int n_states = c->optimizer == PL_OPTIMIZER_ADAMW ? 2 : 1;
        int64_t whole = dist[i].chunk_bytes * n_states, mine = dist[i].bytes.optimizer_states;
        int64_t slack = (int64_t)sizeof(float) * 2 * 64; /* states × chunks, one element each */
        const pl_model_state_bytes *zb = &dist[i].bytes;
        if (c->zero_stage >= 1)
            CHECK(llabs(mine * world - whole) <= slack * world,
                  "%s: rank %d holds %lld bytes of optimizer states, 1/%d of %lld expected",
                  c->name, rank, (long long)mine, world, (long long)whole);
        else
            CHECK(mine == whole, "%s: DDP rank holds %lld bytes of optimizer states, not all "
                  "%lld", c->name, (long long)mine, (long long)whole);
        /* ZeRO-2: the averaged gradients the update reads are this rank's
         * 1/N likewise. */
        int64_t gwhole = dist[i].chunk_bytes, gmine = dist[i].bytes.reduced_grads;
        if (c->zero_stage >= 2)
            CHECK(llabs(gmine * world - gwhole) <= slack / 2 * world,
                  "%s: rank %d keeps %lld bytes of reduced gradients, 1/%d of %lld expected",
                  c->name, rank, (long long)gmine, world, (long long)gwhole);
        else
            CHECK(gmine == gwhole, "%s: rank keeps %lld bytes of reduced gradients, not all "
                  "%lld", c->name, (long long)gmine, (long long)gwhole);
        if (c->zero_stage == 2) {
            /* ZeRO-2: no whole gradients kept between steps either (the
             * reduce-scatter's input is released; pl_engine_get_grad
             * says so), and while they lived, at most the whole model's
             * (measured as the tasks ran: given back, then read by a
             * reduce-scatter). */
            int64_t gpeak = zb->gathered_grads_peak, gall = dist[i].chunk_bytes;
            CHECK(zb->grads == 0, "%s: %lld bytes of whole gradients kept between steps",
                  c->name, (long long)zb->grads);
            CHECK(gpeak > 0 && gpeak <= gall,
                  "%s: %lld bytes of whole gradients live at once (model %lld)", c->name,
                  (long long)gpeak, (long long)gall);
            CHECK(!dist[i].grad_readable && strstr(dist[i].grad_error, "zero_stage 2") &&
                      strstr(dist[i].grad_error, "released"),
                  "%s: pl_engine_get_grad after the update: %s", c->name,
                  dist[i].grad_readable ? "read released gradients" : dist[i].grad_error);
            if (rank == 0)
                printf("%-44s dp %d: per rank 0 of %lld whole gradient bytes kept, at most "
                       "%lld live\n", c->name, world, (long long)gall, (long long)gpeak);
        } else if (c->zero_stage < 2) {
            CHECK(zb->grads == dist[i].chunk_bytes && dist[i].grad_readable,
                  "%s: whole gradients %lld bytes (expected %lld), readable: %s", c->name,
                  (long long)zb->grads, (long long)dist[i].chunk_bytes,
                  dist[i].grad_readable ? "yes" : dist[i].grad_error);
        }
        if (c->zero_stage == 3) {
            /* ZeRO-3: the parameters kept are this rank's 1/N too, no
             * whole gradients are kept between steps, and the whole
             * chunks gathered at once (measured as the tasks ran) are at
             * most PL_Z3_WINDOW = 2 ahead of the releases, one being
             * released and one the op order keeps (the GPT's tied
             * embedding): four of the largest, under the whole model
             * once it has more chunks than that. */
            int64_t pwhole = dist[i].chunk_bytes, chunk = dist[i].largest_chunk;
            bool several = pwhole > 8 * chunk;
            CHECK(llabs(zb->params * world - pwhole) <= slack / 2 * world,
                  "%s: rank %d keeps %lld bytes of parameters, 1/%d of %lld expected",
                  c->name, rank, (long long)zb->params, world, (long long)pwhole);
            CHECK(zb->grads == 0, "%s: %lld bytes of whole gradients kept", c->name,
                  (long long)zb->grads);
            CHECK(zb->gathered_params_peak > 0 && zb->gathered_params_peak <= 4 * chunk &&
                      (!several || zb->gathered_params_peak < pwhole),
                  "%s: %lld bytes of whole parameter chunks gathered at once (largest "
                  "chunk %lld, model %lld)", c->name, (long long)zb->gathered_params_peak,
                  (long long)chunk, (long long)pwhole);
            /* Accumulation keeps whole gradients until the boundary. */
            CHECK(zb->gathered_grads_peak > 0 &&
                      (c->accumulate > 1 || zb->gathered_grads_peak <= 4 * chunk),
                  "%s: %lld bytes of whole gradient chunks at once (largest chunk %lld)",
                  c->name, (long long)zb->gathered_grads_peak, (long long)chunk);
            if (rank == 0)
                printf("%-44s dp %d: per rank %lld of %lld parameter bytes kept, at most "
                       "%lld gathered, %lld of whole gradients\n", c->name, world,
                       (long long)zb->params, (long long)pwhole,
                       (long long)zb->gathered_params_peak,
                       (long long)zb->gathered_grads_peak);
            /* The same sums as ZeRO-2's: bitwise its run, the GPT's
             * tied embedding too (each op's tiles summed in a buffer of
             * its own, added before the chunk's reduce-scatter). */
            const run_out *twin = &dist[i - Z3_TWIN];
            bool same = twin->params && twin->n_params == dist[i].n_params;
            for (size_t k = 0; same && k < dist[i].n_params; k++)
                same = dist[i].params[k] == twin->params[k];
            for (int s = 0; same && s < STEPS; s++) same = twin->loss[s] == dist[i].loss[s];
            CHECK(same, "%s (dp %d): not bitwise the ZeRO-2 run of the same case", c->name,
                  world);
        } else {
            /* Every chunk whole (a distributed run packs its own,
             * smaller chunks for overlap, so its padding differs from
             * the one-process run's): at least the model's bytes. */
            CHECK(dist[i].bytes.params == dist[i].chunk_bytes &&
                      dist[i].bytes.params >= (int64_t)(ref[i].n_params * sizeof(float)),
                  "%s: parameter bytes %lld, expected every chunk whole (%lld), at least "
                  "the model's %lld", c->name, (long long)dist[i].bytes.params,
                  (long long)dist[i].chunk_bytes,
                  (long long)(ref[i].n_params * sizeof(float)));
        }
        /* The runs must have updated something (identical losses over ten
         * steps would make a test of nothing pass). */
        CHECK(fabs(ref[i].loss[STEPS - 1] - ref[i].loss[0]) > 1e-3,
              "%s: the reference loss did not move (%g -> %g)", c->name, ref[i].loss[0],
              ref[i].loss[STEPS - 1]);
        if (rank == 0)
            printf("%-44s dp %d: loss %.5f -> %.5f, worst |diff| loss %.1e, param %.1e "
                   "(relative norm %.1e)\n", c->name, world, ref[i].loss[0],
                   ref[i].loss[STEPS - 1], worst_loss, worst_param, rel);
    }
    /* ZeRO checkpoints: saved at RESUME_AT updates by this world and
     * resumed by a fresh engine, the rest of the run is bitwise the
     * uninterrupted one; one saved by one process is resharded over the
     * ranks and goes on like the one-process run. */
    for (int k = 0; k < 2; k++) {
        int ci = CKPT_CASES[k];
        const dp_case *c = &CASES[ci];
        char ref_path[320];
        snprintf(ref_path, sizeof ref_path, "%s-%d", ref_ckpt, k);
        run_out first = {0}, rest = {0};
        if (dist[ci].params &&
            run_split(rt, c, world, rank, global_n, dp_ckpt, NULL, RESUME_AT, &first) &&
            run_split(rt, c, world, rank, global_n, NULL, dp_ckpt, RESUME_AT, &rest)) {
            bool same = memcmp(rest.params, dist[ci].params,
                               rest.n_params * sizeof *rest.params) == 0;
            for (int s = RESUME_AT; s < STEPS; s++)
                same = same && rest.loss[s] == dist[ci].loss[s];
            CHECK(same, "%s (dp %d): saved after %d updates and resumed, the run differs "
                  "from the uninterrupted one", c->name, world, RESUME_AT);
            if (rank == 0 && same)
                printf("%s dp %d: saved at update %d, resumed: bitwise the uninterrupted "
                       "run\n", c->name, world, RESUME_AT);
        }
        run_out cont = {0};
        if (resharded[k].params &&
            run_split(rt, c, world, rank, global_n, NULL, ref_path, RESUME_AT, &cont)) {
            bool close = true;
            for (int s = RESUME_AT; s < STEPS; s++)
                close = close && close_to(cont.loss[s], ref[ci].loss[s]);
            CHECK(close, "%s (dp %d): a one-process checkpoint resumed over %d ranks does "
                  "not go on like the one-process run", c->name, world, world);
            if (rank == 0 && close)
                printf("%s: one-process checkpoint resumed over %d ranks: losses as "
                       "one process's to fp32 rounding\n", c->name, world);
        }
        free(first.params);
        free(rest.params);
        free(cont.params);
        free(resharded[k].params);
    }
    {
        enum { DEAD_PARAMS = 12 * 80 + 80 + 12 * 32 + 32 + 32 * K + K };
        static float ddp[DEAD_PARAMS], z2[DEAD_PARAMS], ddp_g[IN * 32], z2_g[IN * 32];
        if (dead_branch_run(rt, world, rank, 0, ddp, DEAD_PARAMS, ddp_g) &&
            dead_branch_run(rt, world, rank, 2, z2, DEAD_PARAMS, z2_g)) {
            bool same = memcmp(ddp, z2, sizeof ddp) == 0;
            CHECK(same, "dead branch (dp %d): ZeRO-2's parameters differ from DDP's", world);
            CHECK(memcmp(ddp_g, z2_g, sizeof ddp_g) == 0,
                  "dead branch (dp %d): ZeRO-2's gradients read between the backward pass "
                  "and the update differ from DDP's", world);
            bool moved = false;
            for (int i = 0; i < IN * 32; i++) moved = moved || z2_g[i] != 0.0f;
            CHECK(moved, "dead branch (dp %d): fc1's gradients read back are all zero", world);
            if (rank == 0 && same)
                printf("zero-2 mlp with a chunk no backward writes dp %d: bitwise DDP's "
                       "parameters, and gradients read before the update\n", world);
        }
    }
    /* Ranks that built different engines are refused on every rank,
     * naming what differs: the model (rank 0 another hidden width), then
     * an optimizer option (rank 0 another lr). */
    for (int k = 0; k < 2; k++) {
        pl_graph_t *g = pl_graph_new(7);
        pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, (int64_t[]){IN});
        pl_tensor_t *y = pl_graph_input(g, "y", PL_DTYPE_I32, 0, NULL);
        int width = k == 0 && rank == 0 ? 17 : 16;
        pl_tensor_t *logits = pl_linear(g, pl_relu(g, pl_linear(g, x, width, "fc1")), K, "head");
        pl_graph_set_loss(g, pl_cross_entropy(g, logits, y));
        pl_engine_options eo = pl_engine_options_default();
        eo.batch_size = LOCAL_B;
        eo.dp = world;
        if (k == 1 && rank == 0) eo.optimizer.lr = 2e-3f;
        pl_engine_t *e = pl_engine_new(rt, g, &eo);
        tu_expect_error(__LINE__, k == 0 ? "ranks with different models" : "ranks with another lr",
                        e ? PL_STATUS_OK : pl_last_status(), PL_STATUS_INVALID_ARGUMENT,
                        "differ in", k == 0 ? "the model" : "lr");
        pl_engine_free(e);
        pl_graph_free(g);
    }
    for (int i = 0; i < N_CASES; i++) {
        free(ref[i].params);
        free(dist[i].params);
    }
    /* Placement: first without a budget, then in a runtime with one. */
    static run_out unplaced[N_PLACED], placed[N_PLACED];
    int64_t evictions = 0;
    for (int k = 0; k < N_PLACED; k++)
        run_placed(rt, &PLACED[k], world, rank, false, &unplaced[k], &evictions, NULL);
    pl_runtime_free(rt);
    char offload[300];
    snprintf(offload, sizeof offload, "%s/offload-rank%d", dir, rank);
    mkdir(offload, 0777);
    ro.compute_budget_mb = 2;
    ro.offload_dir = offload;
    rt = pl_runtime_new(&ro);
    CHECK(rt != NULL, "distributed runtime with a budget: %s", pl_last_error());
    /* shard_param_frac (static placement needs a budget): the same sums
     * (bitwise), fewer gathers of the kept chunks (one per step: less
     * moved), more held gathered at once (0: every chunk, the whole
     * model). */
    static run_out frac[N_FRACS];
    int64_t moved[N_FRACS] = {0};
    for (int k = 0; rt && k < N_FRACS; k++)
        run_placed(rt, &FRACS[k], world, rank, false, &frac[k], &evictions, &moved[k]);
    for (int k = 1; k < N_FRACS && frac[0].params; k++) {
        const placed_case *pc = &FRACS[k];
        if (!frac[k].params) continue;
        bool same = frac[k].n_params == frac[0].n_params &&
                    memcmp(frac[k].params, frac[0].params,
                           frac[k].n_params * sizeof(float)) == 0;
        for (int s = 0; s < PLACED_STEPS; s++) same = same && frac[k].loss[s] == frac[0].loss[s];
        CHECK(same, "%s (dp %d): not bitwise the run with every chunk sharded", pc->name,
              world);
        int64_t peak = frac[k].bytes.gathered_params_peak, all = frac[k].chunk_bytes;
        CHECK(moved[k] < moved[k - 1],
              "%s (dp %d): collectives moved %lld bytes in a step, %s %lld", pc->name, world,
              (long long)moved[k], FRACS[k - 1].name, (long long)moved[k - 1]);
        CHECK(peak > frac[k - 1].bytes.gathered_params_peak,
              "%s (dp %d): at most %lld parameter bytes gathered at once, no more than %s's "
              "%lld", pc->name, world, (long long)peak, FRACS[k - 1].name,
              (long long)frac[k - 1].bytes.gathered_params_peak);
        /* The kept chunks (all but the first f of chunk memory, rounded
         * to whole chunks) are all gathered at the end of the forward
         * pass; keeping every chunk holds the whole model then. */
        double kept = (1.0 - pc->shard_param_frac) * (double)all - (double)frac[k].largest_chunk;
        CHECK(pc->shard_param_frac > 0 ? (double)peak >= kept && peak < all : peak == all,
              "%s (dp %d): %lld of %lld parameter bytes gathered at once", pc->name, world,
              (long long)peak, (long long)all);
        if (rank == 0)
            printf("%-44s dp %d: bitwise shard_param_frac 1's run; %lld bytes moved per step "
                   "(frac 1: %lld), at most %lld of %lld parameter bytes gathered\n",
                   pc->name, world, (long long)moved[k], (long long)moved[0], (long long)peak,
                   (long long)all);
    }
    for (int k = 0; k < N_FRACS; k++) free(frac[k].params);
    for (int k = 0; rt && k < N_PLACED; k++) {
        const placed_case *pc = &PLACED[k];
        if (!unplaced[k].params ||
            !run_placed(rt, pc, world, rank, true, &placed[k], &evictions, NULL))
            continue;
        bool same = placed[k].n_params == unplaced[k].n_params &&
                    memcmp(placed[k].params, unplaced[k].params,
                           placed[k].n_params * sizeof(float)) == 0;
        for (int s = 0; s < PLACED_STEPS; s++) same = same && placed[k].loss[s] == unplaced[k].loss[s];
        CHECK(same, "%s (dp %d): under a 2 MB budget the run differs from the one without",
              pc->name, world);
        CHECK(evictions > 0, "%s (dp %d): nothing was evicted under a 2 MB budget (the test "
              "would not test placement)", pc->name, world);
        /* ZeRO-2 under a placement policy still releases its whole
         * gradients between steps (they are not the policy's units). */
        CHECK(pc->zero_stage != 2 ||
                  (placed[k].bytes.grads == 0 && placed[k].bytes.gathered_grads_peak > 0),
              "%s: %lld bytes of whole gradients kept between steps under a budget (at most "
              "%lld live)", pc->name, (long long)placed[k].bytes.grads,
              (long long)placed[k].bytes.gathered_grads_peak);
        /* ZeRO-3 under the budget still keeps 1/N of the parameters. */
        CHECK(pc->zero_stage != 3 ||
                  llabs(placed[k].bytes.params * world - placed[k].chunk_bytes) <=
                      (int64_t)sizeof(float) * 64 * world,
              "%s: rank %d keeps %lld parameter bytes, 1/%d of %lld expected", pc->name, rank,
              (long long)placed[k].bytes.params, world, (long long)placed[k].chunk_bytes);
        if (rank == 0)
            printf("%-44s dp %d: 2 MB budget, %lld evictions in the last update: bitwise the "
                   "run without a budget\n", pc->name, world, (long long)evictions);
    }
    for (int k = 0; k < N_PLACED; k++) {
        free(unplaced[k].params);
        free(placed[k].params);
    }
    pl_runtime_free(rt);
    /* Every rank is done with the folder once the runtime is gone (the
     * last collective has run); rank 0 removes it. */
    if (rank == 0) tu_remove_tree(dir);
    if (rank == 0) printf("%s\n", tu_failures ? "FAILED" : "ok");
    return tu_failures ? 1 : 0;
}
