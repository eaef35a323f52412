/* Activation recomputation across ranks (run under mpiexec with 2 ranks):
 * a GPT (two layers, tied embedding) trained with full recomputation must
 * give BIT FOR BIT the losses and parameters of the same distributed run
 * keeping every activation, for
 *   - data parallel dp 2 with ZeRO-2 and with ZeRO-3 (whose backward
 *     gathers a unit's chunks before its re-run),
 *   - pipeline stages across ranks, pp 2 under 1F1B (re-runs in each
 *     rank's backward items),
 * and a ZeRO-2 run with recomputation saved after RESUME_AT updates and
 * resumed in a fresh engine must continue bitwise as the uninterrupted
 * run. Each recomputing run must have re-run tasks on this rank (its task
 * records). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pleiades.h"
#include "ranks_util.h"
#include "test_util.h"

enum { STEPS = 4, RESUME_AT = 2, GB = 8, V = 32, T = 8, IN = 4, K = 4 };

typedef struct rc_case {
    const char *name;
    int dp, pp, zero_stage;
} rc_case;

static const rc_case CASES[] = {
    {"dp 2 ZeRO-2", 2, 1, 2},
    {"dp 2 ZeRO-3", 2, 1, 3},
    {"pp 2 1F1B", 1, 2, 0},
};
enum { N_CASES = sizeof CASES / sizeof CASES[0] };

typedef struct run_out {
    double loss[STEPS];
    float *params;
    size_t n_params;
    int r_tasks;
} run_out;

static pl_engine_options options(const rc_case *c, bool recompute) {
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = GB / c->dp;
    eo.tiles = c->pp > 1 ? 4 : 2;
    eo.dp = c->dp;
    eo.zero_stage = c->zero_stage;
    eo.chunk_elems = 512; /* several chunks: ZeRO-3 gathers per chunk */
    if (c->pp > 1) {
        eo.pp = c->pp;
        eo.stages = c->pp;
        eo.schedule = PL_SCHEDULE_1F1B;
        eo.stage_balance = PL_STAGE_BALANCE_FLOPS;
    }
    eo.record_tasks = true;
    if (recompute) eo.recompute.granularity = PL_RECOMPUTE_FULL;
    return eo;
}

/* Global batch `index`; this rank's rows under data parallelism. */
static void feed(const rc_case *c, int64_t index, int rank, int32_t *tok, int32_t *y) {
    int32_t all_tok[GB * T], all_y[GB * T];
    uint64_t st = 500 + (uint64_t)index;
    for (int i = 0; i < GB * T; i++) {
        all_tok[i] = (int32_t)(tu_splitmix64(&st) % V);
        all_y[i] = (int32_t)((all_tok[i] * 5 + 1) % V);
    }
    int n = GB / c->dp, lo = c->dp > 1 ? rank * n : 0;
    memcpy(tok, all_tok + lo * T, (size_t)n * T * sizeof *tok);
    memcpy(y, all_y + lo * T, (size_t)n * T * sizeof *y);
}

static bool run(pl_runtime_t *rt, const rc_case *c, int rank, bool recompute,
                const char *save_to, const char *load_from, run_out *out) {
    memset(out, 0, sizeof *out);
    pl_graph_t *g = ru_build(true, IN, K, V, T);
    CHECK(g != NULL, "%s: graph: %s", c->name, pl_last_error());
    if (!g) return false;
    pl_engine_options eo = options(c, recompute);
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK(e != NULL, "%s: engine: %s", c->name, pl_last_error());
    bool ok = e != NULL;
    if (ok && load_from) {
        ok = pl_engine_load_checkpoint(e, load_from, NULL) == PL_STATUS_OK;
        CHECK(ok, "%s: loading %s: %s", c->name, load_from, pl_last_error());
    }
    int32_t tok[GB * T], y[GB * T];
    for (int s = load_from ? RESUME_AT : 0; ok && s < (save_to ? RESUME_AT : STEPS); s++) {
        feed(c, s, rank, tok, y);
        const void *data[2] = {tok, y};
        pl_batch b = {.size = GB / c->dp, .data = data};
        pl_step_options so = {.return_loss = true};
        pl_step_result r;
        ok = pl_engine_forward_backward(e, &b, &so, &r) == PL_STATUS_OK &&
             pl_engine_optimizer_step(e) == PL_STATUS_OK;
        CHECK(ok, "%s: step %d: %s", c->name, s, pl_last_error());
        out->loss[s] = r.loss;
        const pl_task_record *rec;
        int n = ok ? pl_engine_task_records(e, &rec) : 0;
        for (int i = 0; i < n; i++) out->r_tasks += rec[i].phase == 'R';
    }
    if (ok && save_to) {
        ok = pl_engine_save_checkpoint(e, save_to, NULL) == PL_STATUS_OK;
        CHECK(ok, "%s: saving %s: %s", c->name, save_to, pl_last_error());
    }
    ok = ok && ru_collect(e, g, &out->params, &out->n_params);
    pl_engine_free(e);
    pl_graph_free(g);
    return ok;
}

int main(void) {
    tu_time_limit(400, "test_recompute_ranks");
    const char *env = getenv("OMPI_COMM_WORLD_SIZE");
    const char *renv = getenv("OMPI_COMM_WORLD_RANK");
    int world = env ? atoi(env) : 1, rank = renv ? atoi(renv) : 0;
    if (world != 2) {
        fprintf(stderr, "test_recompute_ranks: run it under mpiexec with 2 ranks\n");
        return 1;
    }
    char dir[256], ckpt[300];
    snprintf(dir, sizeof dir, "/tmp/pl_test_recompute_ranks.%ld", (long)getppid());
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    mkdir(dir, 0777);
    pl_runtime_options ro = pl_runtime_options_default();
    ro.distributed = true;
    ro.cpu_workers = 1;
    ro.profiling = true;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    CHECK(rt != NULL, "distributed runtime: %s", pl_last_error());
    if (!rt) return 1;
    static run_out plain[N_CASES], rec[N_CASES];
    for (int i = 0; i < N_CASES; i++) {
        const rc_case *c = &CASES[i];
        if (!run(rt, c, rank, false, NULL, NULL, &plain[i]) ||
            !run(rt, c, rank, true, NULL, NULL, &rec[i]))
            continue;
        char what[160];
        snprintf(what, sizeof what, "%s: recomputing vs keeping all", c->name);
        ru_compare(what, true, true, rec[i].loss, plain[i].loss, 0, STEPS, rec[i].params,
                   rec[i].n_params == plain[i].n_params ? plain[i].params : NULL,
                   plain[i].n_params);
        CHECK(rec[i].r_tasks > 0, "%s: rank %d ran no R task", c->name, rank);
        CHECK(plain[i].r_tasks == 0, "%s: R tasks without recomputation", c->name);
        if (rank == 0)
            printf("%-16s losses %.9g .. %.9g, %d R tasks on rank 0: bitwise equal unless "
                   "a FAIL says otherwise\n", c->name, rec[i].loss[0], rec[i].loss[STEPS - 1],
                   rec[i].r_tasks);
    }
    /* Resume: saved after RESUME_AT updates, continued in a fresh engine. */
    static run_out first, resumed;
    if (rec[0].params && run(rt, &CASES[0], rank, true, ckpt, NULL, &first) &&
        run(rt, &CASES[0], rank, true, NULL, ckpt, &resumed)) {
        memcpy(resumed.loss, first.loss, RESUME_AT * sizeof *first.loss);
        ru_compare("dp 2 ZeRO-2 recomputing, resumed", true, true, resumed.loss, rec[0].loss, 0,
                   STEPS, resumed.params,
                   resumed.n_params == rec[0].n_params ? rec[0].params : NULL,
                   rec[0].n_params);
        if (rank == 0) printf("resumed at step %d: checked against the straight run\n", RESUME_AT);
    }
    free(first.params);
    free(resumed.params);
    for (int i = 0; i < N_CASES; i++) {
        free(plain[i].params);
        free(rec[i].params);
    }
    pl_runtime_free(rt);
    if (rank == 0) tu_remove_tree(dir);
    if (tu_failures) printf("rank %d: %d check(s) failed\n", rank, tu_failures);
    return tu_failures ? 1 : 0;
}
