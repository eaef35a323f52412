/* Learning-rate schedules against PyTorch: every step's LR (and one
 * cycle's beta1) of every schedule equals what torch.optim.lr_scheduler
 * computes (reference/lr_reference.txt, made by lr_reference.py with
 * Debian's python3-torch), to a relative 1e-9 (PyTorch's cosine steps
 * recursively, Pleiades evaluates the closed form). Then the engine: an SGD
 * step really uses the scheduled LR, and bad schedules are refused naming
 * the field.
 *
 * Usage: test_lr_scheduler REFERENCE.txt */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pleiades.h"
#include "test_util.h"

enum { TOTAL = 100, WARM = 10 };

/* The options each reference case was made with (lr_reference.py). */
static bool case_options(const char *name, pl_lr_scheduler_options *o) {
    static const struct {
        const char *name;
        pl_lr_schedule_kind kind;
    } kinds[] = {
        {"constant", PL_LR_CONSTANT},          {"linear", PL_LR_LINEAR_WARMUP},
        {"cosine_nowarmup", PL_LR_COSINE_ANNEALING},
        {"cosine", PL_LR_COSINE_ANNEALING_WARMUP}, {"step", PL_LR_STEP},
        {"multistep", PL_LR_MULTISTEP},        {"poly", PL_LR_POLYNOMIAL_WARMUP},
        {"onecycle", PL_LR_ONE_CYCLE},         {"onecycle_linear", PL_LR_ONE_CYCLE},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if (strcmp(name, kinds[i].name) != 0) continue;
        *o = pl_lr_scheduler_default(kinds[i].kind);
        o->total_steps = TOTAL;
        o->warmup_steps = kinds[i].kind == PL_LR_COSINE_ANNEALING ? 0 : WARM;
        o->eta_min = 0.001;
        o->step_size = 7;
        o->gamma = kinds[i].kind == PL_LR_STEP ? 0.5 : 0.3;
        o->n_milestones = 3;
        o->milestones[0] = 20, o->milestones[1] = 50, o->milestones[2] = 80;
        o->end_lr = 1e-3;
        o->power = 2.0;
        if (strcmp(name, "onecycle_linear") == 0) {
            o->anneal_cos = false;
            o->pct_start = 0.25;
        }
        if (kinds[i].kind == PL_LR_ONE_CYCLE) o->warmup_steps = 0;
        return true;
    }
    return false;
}

static bool close_to(double got, double want) {
    return fabs(got - want) <= 1e-9 * fabs(want) + 1e-15;
}

static void test_reference(const char *path) {
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot open %s", path);
    if (!f) return;
    char name[64], mom[64];
    long k;
    double lr;
    int lines = 0, cases = 0;
    char last[64] = "";
    while (fscanf(f, "%63s %ld %lf %63s", name, &k, &lr, mom) == 4) {
        pl_lr_scheduler_options o;
        if (!case_options(name, &o)) {
            CHECK(false, "unknown case '%s' in %s", name, path);
            break;
        }
        if (strcmp(name, last) != 0) {
            cases++;
            snprintf(last, sizeof last, "%s", name);
            CHECK(pl_lr_scheduler_check(&o) == PL_STATUS_OK, "%s: %s", name,
                  pl_last_error());
        }
        double got = pl_lr_scheduler_lr(&o, 0.1, k);
        CHECK(close_to(got, lr), "%s step %ld: lr %.17g, PyTorch %.17g", name, k, got, lr);
        double m;
        bool has = pl_lr_scheduler_momentum(&o, k, &m);
        CHECK(has == (strcmp(mom, "-") != 0), "%s step %ld: momentum %s expected", name,
              k, has ? "not" : "");
        if (has) CHECK(close_to(m, atof(mom)), "%s step %ld: beta1 %.17g, PyTorch %s",
                       name, k, m, mom);
        lines++;
    }
    fclose(f);
    CHECK(cases == 9 && lines == 9 * TOTAL, "read %d cases, %d lines from %s", cases,
          lines, path);
    printf("%d steps of %d schedules agree with PyTorch\n", lines, cases);
}

static void test_bad_options(void) {
    pl_lr_scheduler_options o = pl_lr_scheduler_default(PL_LR_COSINE_ANNEALING_WARMUP);
    pl_clear_error();
    CHECK(pl_lr_scheduler_check(&o) == PL_STATUS_INVALID_ARGUMENT &&
              strstr(pl_last_error(), "total_steps"),
          "no total_steps: %s", pl_last_error());
    o.total_steps = 10;
    o.warmup_steps = 10;
    pl_clear_error();
    CHECK(pl_lr_scheduler_check(&o) != PL_STATUS_OK && strstr(pl_last_error(), "warmup_steps"),
          "warm-up as long as the schedule: %s", pl_last_error());
    o = pl_lr_scheduler_default(PL_LR_MULTISTEP);
    o.n_milestones = 2;
    o.milestones[0] = 5, o.milestones[1] = 5;
    pl_clear_error();
    CHECK(pl_lr_scheduler_check(&o) != PL_STATUS_OK && strstr(pl_last_error(), "milestones"),
          "repeated milestone: %s", pl_last_error());
    o = pl_lr_scheduler_default(PL_LR_ONE_CYCLE);
    o.total_steps = 2;
    pl_clear_error();
    CHECK(pl_lr_scheduler_check(&o) != PL_STATUS_OK && strstr(pl_last_error(), "pct_start"),
          "one cycle too short: %s", pl_last_error());
    pl_lr_schedule_kind kind;
    CHECK(pl_lr_schedule_from_name("cosine", &kind) && kind == PL_LR_COSINE_ANNEALING_WARMUP,
          "name 'cosine'");
    CHECK(pl_lr_schedule_from_name("OneCycleLR", &kind) && kind == PL_LR_ONE_CYCLE,
          "Colossal-AI's name");
    CHECK(!pl_lr_schedule_from_name("cosin", &kind), "unknown name accepted");
}

/* y = mean(x W^T): SGD steps move W by exactly lr_k * grad_k. */
static void test_engine(pl_runtime_t *rt) {
    pl_graph_t *g = pl_graph_new(7);
    int64_t in[1] = {4};
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, in);
    pl_tensor_t *y = pl_linear(g, x, 3, "fc");
    CHECK(y && pl_graph_set_loss(g, pl_mean(g, y)) == PL_STATUS_OK, "graph: %s",
          pl_last_error());
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = 2;
    eo.optimizer.kind = PL_OPTIMIZER_SGD; /* no momentum, no weight decay */
    eo.optimizer.lr = 0.5f;
    eo.optimizer.weight_decay = 0.0f;
    eo.lr_scheduler = pl_lr_scheduler_default(PL_LR_STEP);
    eo.lr_scheduler.gamma = 0.5;
    pl_engine_options bad = eo;
    bad.lr_scheduler.step_size = 0;
    pl_clear_error();
    CHECK(pl_engine_new(rt, g, &bad) == NULL && strstr(pl_last_error(), "step_size"),
          "a bad schedule was accepted: %s", pl_last_error());
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK(e != NULL, "pl_engine_new: %s", pl_last_error());
    if (!e) {
        pl_graph_free(g);
        return;
    }
    float xs[8] = {1, 2, 3, 4, -1, 0.5f, 2, 1};
    const void *data[1] = {xs};
    pl_batch b = {.size = 2, .data = data};
    pl_tensor_t *w = pl_graph_find(g, "fc.weight");
    float w0[12], w1[12], grad[12];
    for (int k = 0; k < 3; k++) {
        double lr = pl_engine_lr(e);
        CHECK(close_to(lr, 0.5 * pow(0.5, k)), "step %d: pl_engine_lr %g", k, lr);
        pl_step_options so = {.return_loss = true};
        pl_step_result r;
        CHECK(pl_engine_get_param(e, w, w0, 12) == PL_STATUS_OK &&
                  pl_engine_forward_backward(e, &b, &so, &r) == PL_STATUS_OK &&
                  pl_engine_get_grad(e, w, grad, 12) == PL_STATUS_OK &&
                  pl_engine_optimizer_step(e) == PL_STATUS_OK &&
                  pl_engine_get_param(e, w, w1, 12) == PL_STATUS_OK,
              "step %d: %s", k, pl_last_error());
        for (int i = 0; i < 12; i++)
            CHECK(fabsf(w1[i] - (w0[i] - (float)lr * grad[i])) <= 1e-6f,
                  "step %d: weight %d moved %g, lr x grad is %g", k, i, w0[i] - w1[i],
                  lr * grad[i]);
    }
    pl_engine_free(e);
    pl_graph_free(g);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_lr_scheduler REFERENCE.txt\n");
        return 2;
    }
    test_reference(argv[1]);
    test_bad_options();
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 1;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    CHECK(rt != NULL, "pl_runtime_new: %s", pl_last_error());
    if (rt) test_engine(rt);
    pl_runtime_free(rt);
    if (tu_failures) {
        printf("%d check(s) failed\n", tu_failures);
        return 1;
    }
    printf("lr_scheduler: all checks passed\n");
    return 0;
}
