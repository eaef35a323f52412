/* Hybrid data x pipeline parallelism (run under mpiexec with 4 ranks):
 * dp 2 x pp 2 in the default rank order (pl_runtime_options.dp_outside,
 * Colossal-AI HybridParallelPlugin's meaning: ProcessGroupMesh(dp, pp),
 * rank = replica·pp + stage, so rank r runs stage r mod 2 of replica
 * r / 2), each
 * replica fed its half of a global batch of 16, trains like one process
 * running the same schedule (2 stages on 2 workers) on the whole global
 * batch with the same microbatch size, under ZeRO 0, 1 and 2.
 *
 * The reference is independent of every collective: each rank first
 * runs the one-process pipeline on a plain StarPU, then the distributed
 * runtime runs the grid. The two agree to rounding, not bitwise: the
 * replicas' gradients are averaged (a sum of two halves, then / 2, where
 * one process sums every microbatch's contribution in turn).
 *
 * Also checked: the outputs a replica reads back (return_output_label,
 * broadcast from the last stage within the replica) are its half of the
 * one-process outputs; a checkpoint saved by the grid under ZeRO-1 (each
 * replica's stages pass their state shards around, then rank 0 gathers
 * its stage's) resumes bitwise; the merged trace has all four ranks'
 * stage tracks, each rank on the stage the map above gives (and
 * pl_runtime_grid_* give the map); ZeRO-3 with a pipeline is refused
 * before anything starts.
 *
 * The other order (dp_outside false: rank = stage·dp + replica, rank r
 * running stage r / 2 of replica r mod 2): two of the cases (an MLP under
 * DDP with the measured recut, the GPT under ZeRO-2) give bitwise the
 * losses and parameters of the default order, and the trace shows that
 * map. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pleiades.h"
#include "ranks_util.h"
#include "test_util.h"

enum { STEPS = 6, DP = 2, PP = 2, GB = 16, B = GB / DP, IN = 12, K = 4, V = 32, T = 8,
       RESUME_AT = 3 };

/* The reference's map, written out here: Colossal-AI's ProcessGroupMesh
 * orders the ranks by its axes, the last fastest: (dp, pp) when
 * dp_outside, else (pp, dp). */
static int replica_of(int rank, bool outside) { return outside ? rank / PP : rank % DP; }
static int stage_of(int rank, bool outside) { return outside ? rank % PP : rank / DP; }

typedef struct hybrid_case {
    const char *name;
    bool gpt;
    pl_schedule_kind schedule;
    pl_optimizer_kind optimizer;
    int zero_stage;
    int accumulate;
    float max_norm;  /* INFINITY: the inf-norm, clipped to 0.01 */
    bool loss_scale; /* dynamic from 2^120, overflowing first */
} hybrid_case;

static const hybrid_case CASES[] = {
    {"mlp 1f1b sgd ddp clip 0.1 (measured recut)", false, PL_SCHEDULE_1F1B,
     PL_OPTIMIZER_SGD, 0, 1, 0.1f, false},
    {"mlp interleaved adamw zero-1 accumulate 2 clip 0.5", false, PL_SCHEDULE_INTERLEAVED,
     PL_OPTIMIZER_ADAMW, 1, 2, 0.5f, false},
    {"mlp zb-h1 sgd zero-2 clip inf, loss scaling", false, PL_SCHEDULE_ZB_H1,
     PL_OPTIMIZER_SGD, 2, 1, INFINITY, true},
    {"gpt 1f1b adamw zero-2 clip 1", true, PL_SCHEDULE_1F1B, PL_OPTIMIZER_ADAMW, 2, 1, 1.0f,
     false},
    {"gpt interleaved sgd ddp accumulate 2 clip 0.5", true, PL_SCHEDULE_INTERLEAVED,
     PL_OPTIMIZER_SGD, 0, 2, 0.5f, false},
};
#define N_CASES ((int)(sizeof CASES / sizeof *CASES))
enum { CKPT_CASE = 1 }; /* AdamW states, sharded */

/* Four blocks: an MLP of three hidden layers and a head, or a GPT of two
 * layers between its embedding and (tied) head. */
static pl_graph_t *build(const hybrid_case *c) { return ru_build(c->gpt, IN, K, V, T); }

/* The grid (grid true: dp 2 x pp 2, a replica's batch) or the reference
 * (one process, the global batch in twice the microbatches: the same
 * microbatch size, HybridParallelPlugin's microbatch_size). */
static pl_engine_options options(const hybrid_case *c, bool grid) {
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = grid ? B : GB;
    eo.tiles = grid ? 4 : 4 * DP;
    eo.schedule = c->schedule;
    eo.stages = 2;
    eo.model_chunks = c->schedule == PL_SCHEDULE_INTERLEAVED ? 2 : 1;
    eo.stage_balance = c->zero_stage == 0 && !c->gpt && c->schedule == PL_SCHEDULE_1F1B
                           ? PL_STAGE_BALANCE_MEASURED
                           : PL_STAGE_BALANCE_FLOPS;
    eo.optimizer.kind = c->optimizer;
    eo.optimizer.lr = c->optimizer == PL_OPTIMIZER_SGD ? 0.1f : 1e-2f;
    eo.optimizer.momentum = c->optimizer == PL_OPTIMIZER_SGD ? 0.9f : 0.0f;
    eo.accumulate_size = c->accumulate;
    eo.max_norm = isinf(c->max_norm) ? 0.01f : c->max_norm;
    eo.norm_type = isinf(c->max_norm) ? INFINITY : 2.0f;
    eo.chunk_elems = 512; /* several chunks, some straddling the cut */
    if (grid) {
        eo.pp = PP;
        eo.dp = DP;
        eo.zero_stage = c->zero_stage;
        eo.reduce_bucket_size_in_m = 0; /* a bucket per chunk: several collectives */
    }
    if (c->loss_scale) {
        eo.loss_scaler.enabled = true;
        eo.loss_scaler.initial_scale = 0x1p120;
        eo.loss_scaler.max_scale = 0x1p120;
        eo.loss_scaler.hysteresis = 1;
        eo.loss_scaler.backoff_factor = 1.0 / 1024;
    }
    return eo;
}

typedef struct run_out {
    double loss[STEPS];
    float *params;
    size_t n_params;
    float output[GB * K]; /* the MLP's first-step outputs (rows of this feed) */
} run_out;

/* Feeds global batch `index` whole (replica < 0) or that replica's half. */
static void feed(const hybrid_case *c, int64_t index, int replica, float *x, int32_t *tok,
                 int32_t *y) {
    int lo = replica < 0 ? 0 : replica * B, n = replica < 0 ? GB : B;
    if (c->gpt) {
        uint64_t st = 1000 + (uint64_t)index;
        int32_t all_tok[GB * T], all_y[GB * T];
        for (int i = 0; i < GB * T; i++) {
            all_tok[i] = (int32_t)(tu_splitmix64(&st) % V);
            all_y[i] = (int32_t)((all_tok[i] * 7 + 3) % V);
        }
        memcpy(tok, all_tok + lo * T, (size_t)n * T * sizeof *tok);
        memcpy(y, all_y + lo * T, (size_t)n * T * sizeof *y);
    } else {
        float all_x[GB * IN];
        int32_t all_y[GB];
        tu_class_batch(index, GB, IN, all_x, all_y);
        memcpy(x, all_x + lo * IN, (size_t)n * IN * sizeof *x);
        memcpy(y, all_y + lo, (size_t)n * sizeof *y);
    }
}

static bool train(pl_engine_t *e, const hybrid_case *c, int replica, int first, int last,
                  run_out *out) {
    float x[GB * IN];
    int32_t tok[GB * T], y[GB * T];
    int n = replica < 0 ? GB : B;
    bool ok = true;
    int64_t index = (int64_t)first * c->accumulate;
    for (int s = first; s < last && ok; s++) {
        double loss = 0.0;
        for (int a = 0; a < c->accumulate && ok; a++, index++) {
            feed(c, index, replica, x, tok, y);
            const void *data[2] = {c->gpt ? (const void *)tok : (const void *)x, y};
            pl_batch b = {.size = n, .data = data};
            /* The first step reads the outputs back (the MLP's logits). */
            bool outputs = s == 0 && a == 0 && !c->gpt;
            pl_step_options so = {.return_loss = true, .return_output_label = outputs};
            pl_step_result r;
            ok = pl_engine_forward_backward(e, &b, &so, &r) == PL_STATUS_OK &&
                 pl_engine_optimizer_step(e) == PL_STATUS_OK;
            CHECK(ok, "%s: step %d: %s", c->name, s, pl_last_error());
            CHECK(!ok || r.size == GB, "%s: result size %lld, expected the global %d",
                  c->name, (long long)r.size, GB);
            CHECK(!ok || !outputs || r.output, "%s: no outputs returned", c->name);
            if (ok && outputs && r.output)
                memcpy(out->output, r.output, (size_t)n * K * sizeof(float));
            loss += r.loss / c->accumulate;
        }
        out->loss[s] = loss;
    }
    return ok;
}

/* Every parameter, after pl_engine_gather_params. */
static bool collect(pl_engine_t *e, pl_graph_t *g, run_out *out) {
    return ru_collect(e, g, &out->params, &out->n_params);
}

/* STEPS updates, or RESUME_AT then a save (save_to), or from a load
 * (load_from) the rest; replica < 0 is the one-process reference. */
static bool run(pl_runtime_t *rt, const hybrid_case *c, int replica, const char *save_to,
                const char *load_from, run_out *out) {
    pl_graph_t *g = build(c);
    CHECK(g != NULL, "%s: graph: %s", c->name, pl_last_error());
    if (!g) return false;
    pl_engine_options eo = options(c, replica >= 0);
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK(e != NULL, "%s: engine (%s): %s", c->name, replica >= 0 ? "grid" : "one process",
          pl_last_error());
    bool ok = e != NULL;
    if (ok && load_from) {
        ok = pl_engine_load_checkpoint(e, load_from, NULL) == PL_STATUS_OK;
        CHECK(ok, "%s: loading %s: %s", c->name, load_from, pl_last_error());
    }
    ok = ok && train(e, c, replica, load_from ? RESUME_AT : 0, save_to ? RESUME_AT : STEPS,
                     out);
    if (ok && save_to) {
        ok = pl_engine_save_checkpoint(e, save_to, NULL) == PL_STATUS_OK;
        CHECK(ok, "%s: saving %s: %s", c->name, save_to, pl_last_error());
    }
    ok = ok && collect(e, g, out);
    pl_engine_free(e);
    pl_graph_free(g);
    return ok;
}

/* Losses and parameters of `got` against `want`: equal, or close. */
static void compare(const char *what, bool bitwise, bool adam, const run_out *got,
                    const run_out *want, int from) {
    ru_compare(what, bitwise, adam, got->loss, want->loss, from, STEPS, got->params,
               got->n_params == want->n_params ? want->params : NULL, want->n_params);
}

/* One recorded step of case 0 on the grid: rank 0's merged trace names
 * every rank's stage track, on the stage of the map; this rank's engine
 * is its replica. */
static void check_trace(pl_runtime_t *rt, const char *path, int rank, bool outside) {
    const hybrid_case *c = &CASES[0];
    pl_graph_t *g = build(c);
    pl_engine_options eo = options(c, true);
    eo.record_tasks = true;
    pl_engine_t *e = g ? pl_engine_new(rt, g, &eo) : NULL;
    CHECK(e != NULL, "traced grid engine: %s", pl_last_error());
    run_out out = {0};
    for (int r = 0; r < PP * DP; r++)
        CHECK(pl_runtime_grid_replica(rt, DP, PP, r) == replica_of(r, outside) &&
                  pl_runtime_grid_stage(rt, DP, PP, r) == stage_of(r, outside) &&
                  pl_runtime_grid_rank(rt, DP, PP, replica_of(r, outside),
                                       stage_of(r, outside)) == r,
              "dp_outside %d: rank %d is (replica %d, stage %d), the map gives (%d, %d)",
              outside, r, pl_runtime_grid_replica(rt, DP, PP, r),
              pl_runtime_grid_stage(rt, DP, PP, r), replica_of(r, outside),
              stage_of(r, outside));
    if (e && train(e, c, replica_of(rank, outside), 0, 1, &out)) {
        pl_status st = pl_engine_write_trace(e, path, NULL);
        CHECK(st == PL_STATUS_OK, "writing the merged trace: %s", pl_last_error());
        size_t n = 0;
        char *text = rank == 0 && st == PL_STATUS_OK ? tu_read_file(path, &n) : NULL;
        for (int r = 0; rank == 0 && r < PP * DP; r++) {
            char track[64];
            snprintf(track, sizeof track, "\"rank %d / stage %d / ", r, stage_of(r, outside));
            CHECK(text && strstr(text, track), "the merged trace has no track %s...", track);
        }
        free(text);
    }
    free(out.params);
    pl_engine_free(e);
    pl_graph_free(g);
}

int main(void) {
    tu_time_limit(500, "test_hybrid_parallel");
    const char *env = getenv("OMPI_COMM_WORLD_SIZE");
    int world = env ? atoi(env) : 1;
    const char *renv = getenv("OMPI_COMM_WORLD_RANK");
    int rank = renv ? atoi(renv) : 0, replica = replica_of(rank, true);
    if (world != PP * DP) {
        fprintf(stderr, "test_hybrid_parallel: run it under mpiexec with %d ranks\n", 2 * DP);
        return 1;
    }
    static run_out ref[N_CASES], dist[N_CASES], first, resumed;
    char dir[256], ckpt[300], trace[300];
    snprintf(dir, sizeof dir, "/tmp/pl_test_hybrid.%ld", (long)getppid());
    snprintf(ckpt, sizeof ckpt, "%s/grid", dir);
    snprintf(trace, sizeof trace, "%s/trace.json", dir);
    mkdir(dir, 0777);

    /* The references: one process, a worker per stage, the global batch. */
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 2;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    CHECK(rt != NULL, "plain runtime: %s", pl_last_error());
    for (int i = 0; rt && i < N_CASES; i++) run(rt, &CASES[i], -1, NULL, NULL, &ref[i]);
    pl_runtime_free(rt);

    ro.distributed = true;
    ro.cpu_workers = 1;
    rt = pl_runtime_new(&ro);
    CHECK(rt != NULL, "distributed runtime: %s", pl_last_error());
    if (!rt) return 1;
    for (int i = 0; i < N_CASES; i++) {
        const hybrid_case *c = &CASES[i];
        if (!ref[i].params || !run(rt, c, replica, NULL, NULL, &dist[i])) continue;
        char what[160];
        snprintf(what, sizeof what, "%s (dp 2 x pp 2 vs one process)", c->name);
        compare(what, false, c->optimizer == PL_OPTIMIZER_ADAMW, &dist[i], &ref[i], 0);
        if (rank == 0)
            printf("%-52s grid: step %d loss %.6f, one process %.6f\n", c->name, STEPS - 1,
                   dist[i].loss[STEPS - 1], ref[i].loss[STEPS - 1]);
        /* The replica's outputs: its rows of the one-process outputs. */
        for (int k = 0; !c->gpt && k < B * K; k++) {
            float want = ref[i].output[replica * B * K + k];
            bool same = ru_close(dist[i].output[k], want);
            CHECK(same, "%s: replica %d output %d is %.9g, expected %.9g", c->name, replica, k,
                  dist[i].output[k], want);
            if (!same) break;
        }
    }
    check_trace(rt, trace, rank, true);

    /* Save after RESUME_AT updates, resume in a fresh grid engine: the
     * uninterrupted grid run's losses and parameters, bitwise. */
    const hybrid_case *c = &CASES[CKPT_CASE];
    if (dist[CKPT_CASE].params && run(rt, c, replica, ckpt, NULL, &first) &&
        run(rt, c, replica, NULL, ckpt, &resumed)) {
        memcpy(resumed.loss, first.loss, RESUME_AT * sizeof *first.loss);
        compare("checkpoint resumed by the grid", true, true, &resumed, &dist[CKPT_CASE], 0);
    }

    /* ZeRO-3 gathers chunks op by op, which a pipeline order does not
     * follow: refused on every rank alike, before any collective. */
    pl_graph_t *g = build(&CASES[0]);
    pl_engine_options eo = options(&CASES[0], true);
    eo.zero_stage = 3;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK(!e && pl_last_status() == PL_STATUS_UNSUPPORTED &&
              strstr(pl_last_error(), "zero_stage 3 with the pipeline schedule"),
          "dp 2 x pp 2 with ZeRO-3: expected a refusal, got %s", e ? "an engine" : pl_last_error());
    pl_engine_free(e);
    pl_graph_free(g);

    pl_runtime_free(rt);

    /* The other rank order: the same grid, bitwise. */
    ro.dp_outside = false;
    rt = pl_runtime_new(&ro);
    CHECK(rt != NULL, "distributed runtime, dp_outside off: %s", pl_last_error());
    static const int OFF_CASES[] = {0, 3};
    for (int k = 0; rt && k < 2; k++) {
        const hybrid_case *oc = &CASES[OFF_CASES[k]];
        run_out off;
        memset(&off, 0, sizeof off);
        char what[200];
        snprintf(what, sizeof what, "%s (dp_outside off vs on)", oc->name);
        if (dist[OFF_CASES[k]].params &&
            run(rt, oc, replica_of(rank, false), NULL, NULL, &off))
            compare(what, true, oc->optimizer == PL_OPTIMIZER_ADAMW, &off, &dist[OFF_CASES[k]],
                    0);
        if (rank == 0) printf("%s: losses and parameters compared bitwise\n", what);
        free(off.params);
    }
    if (rt) check_trace(rt, trace, rank, false);
    if (rank == 0 && rt)
        printf("rank map: dp_outside on and off as ProcessGroupMesh orders them\n");

    free(first.params);
    free(resumed.params);
    for (int i = 0; i < N_CASES; i++) {
        free(ref[i].params);
        free(dist[i].params);
    }
    pl_runtime_free(rt);
    if (rank == 0) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
        printf("%s\n", tu_failures ? "FAILED" : "ok");
    }
    return tu_failures ? 1 : 0;
}
