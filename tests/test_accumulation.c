/* Gradient accumulation (Colossal-AI's GradAccumOptimizer semantics): four
 * forward_backward + optimizer_step calls on quarter batches with
 * accumulate_size 4 give the parameters of one step on the whole batch, to
 * fp32 rounding, under the non-pipelined, 1F1B and interleaved schedules.
 * SGD without momentum makes the update lr·gradient, so a loss not divided
 * by accumulate_size (a 4x gradient) or an update before the boundary
 * shows at once (AdamW's first step would hide the scale). Also: nothing
 * changes before the fourth call, pl_engine_steps counts updates only, the
 * reported loss is the batch's own mean, and the LR schedule moves with
 * updates, not calls. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pleiades.h"
#include "test_util.h"

enum { B = 8, N = 4, V = 32, T = 8 };

typedef struct model {
    pl_graph_t *g;
    pl_engine_t *e;
} model;

static bool model_new(pl_runtime_t *rt, pl_schedule_kind schedule, int batch,
                      int accumulate, model *m) {
    m->g = pl_graph_new(11);
    pl_gpt_config cfg = {.vocab = V, .context = T, .channels = 16, .layers = 2, .heads = 2};
    pl_gpt_model gm;
    if (!m->g || pl_gpt_build(m->g, &cfg, &gm) != PL_STATUS_OK) return false;
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = batch;
    eo.tiles = 2;
    eo.optimizer.kind = PL_OPTIMIZER_SGD;
    eo.optimizer.lr = 0.5f;
    eo.optimizer.weight_decay = 0.0f;
    eo.accumulate_size = accumulate;
    eo.lr_scheduler = pl_lr_scheduler_default(PL_LR_STEP); /* halves per update */
    eo.lr_scheduler.gamma = 0.5;
    eo.schedule = schedule;
    eo.stages = schedule == PL_SCHEDULE_NONE ? 0 : 2;
    eo.model_chunks = schedule == PL_SCHEDULE_INTERLEAVED ? 2 : 0;
    m->e = pl_engine_new(rt, m->g, &eo);
    return m->e != NULL;
}

static void model_free(model *m) {
    pl_engine_free(m->e);
    pl_graph_free(m->g);
}

/* Every parameter, concatenated, into a malloc'd buffer. */
static float *params(const model *m, size_t *n) {
    size_t total = (size_t)pl_graph_param_count(m->g), off = 0;
    float *p = tu_xmalloc(total * sizeof *p);
    for (int i = 0; i < pl_graph_num_params(m->g); i++) {
        const pl_tensor_t *t = pl_graph_param(m->g, i);
        size_t k = (size_t)pl_tensor_numel(t);
        if (pl_engine_get_param(m->e, t, p + off, k) != PL_STATUS_OK) {
            free(p);
            return NULL;
        }
        off += k;
    }
    *n = total;
    return p;
}

static void run(pl_runtime_t *rt, pl_schedule_kind schedule, const char *name) {
    int32_t tokens[B * T], targets[B * T];
    uint64_t s = 5;
    for (int i = 0; i < B * T; i++) {
        tokens[i] = (int32_t)(tu_splitmix64(&s) % V);
        targets[i] = (int32_t)(tu_splitmix64(&s) % V);
    }
    model whole = {0}, acc = {0};
    bool ok = model_new(rt, schedule, B, 1, &whole) &&
              model_new(rt, schedule, B / N, N, &acc);
    CHECK(ok, "%s: engines: %s", name, pl_last_error());
    if (!ok) goto out;
    size_t n0, n1;
    float *before = params(&acc, &n0);
    pl_step_result r;
    const void *data[2] = {tokens, targets};
    pl_batch b = {.size = B, .data = data};
    CHECK(pl_engine_train_step(whole.e, &b, &r) == PL_STATUS_OK, "%s: whole step: %s",
          name, pl_last_error());
    double whole_loss = r.loss, micro_sum = 0.0;
    for (int k = 0; k < N; k++) {
        const void *q[2] = {tokens + k * (B / N) * T, targets + k * (B / N) * T};
        pl_batch qb = {.size = B / N, .data = q};
        CHECK(pl_engine_lr(acc.e) == 0.5, "%s: LR moved before the update (%g)", name,
              pl_engine_lr(acc.e));
        CHECK(pl_engine_train_step(acc.e, &qb, &r) == PL_STATUS_OK, "%s: micro step %d: %s",
              name, k, pl_last_error());
        micro_sum += r.loss;
        if (k == N - 2) {
            float *mid = params(&acc, &n1);
            CHECK(mid && before && n0 == n1 && !memcmp(mid, before, n0 * sizeof *mid) &&
                      pl_engine_steps(acc.e) == 0,
                  "%s: parameters or the step count changed before the boundary", name);
            free(mid);
        }
    }
    CHECK(pl_engine_steps(acc.e) == 1 && pl_engine_steps(whole.e) == 1,
          "%s: %lld and %lld updates, want 1 each", name, (long long)pl_engine_steps(acc.e),
          (long long)pl_engine_steps(whole.e));
    CHECK(pl_engine_lr(acc.e) == 0.25, "%s: the LR after one update is %g, want 0.25", name,
          pl_engine_lr(acc.e));
    CHECK(fabs(micro_sum / N - whole_loss) <= 1e-5 * fabs(whole_loss),
          "%s: mean of the micro losses %.7f, whole batch %.7f", name, micro_sum / N,
          whole_loss);
    float *pw = params(&whole, &n0), *pa = params(&acc, &n1);
    double worst = 0.0, moved = 0.0;
    for (size_t i = 0; pw && pa && before && i < n0; i++) {
        double d = fabs((double)pw[i] - pa[i]);
        if (d > worst) worst = d;
        moved = fmax(moved, fabs((double)pa[i] - before[i]));
    }
    CHECK(pw && pa && n0 == n1 && worst <= 2e-6 && moved > 1e-4,
          "%s: parameters differ by %.3g from one whole-batch step (update size %.3g)",
          name, worst, moved);
    printf("%-12s 4 x B/4 vs B: max parameter difference %.2g (largest update %.2g), "
           "loss %.6f vs %.6f\n", name, worst, moved, micro_sum / N, whole_loss);
    free(before);
    free(pw);
    free(pa);
out:
    model_free(&whole);
    model_free(&acc);
}

int main(void) {
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 2; /* pipelines: one worker per stage */
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) {
        printf("FAIL: pl_runtime_new: %s\n", pl_last_error());
        return 1;
    }
    run(rt, PL_SCHEDULE_NONE, "none");
    if (!tu_pipeline_skipped(rt, 2, "1f1b and interleaved")) {
        run(rt, PL_SCHEDULE_1F1B, "1f1b");
        run(rt, PL_SCHEDULE_INTERLEAVED, "interleaved");
    }
    pl_runtime_free(rt);
    if (tu_failures) {
        printf("%d check(s) failed\n", tu_failures);
        return 1;
    }
    printf("accumulation: all checks passed\n");
    return 0;
}
