/* custom_schedule: train a small GPT with a pipeline schedule written
 * outside the library (public API only) and registered by name, and
 * check that it computes exactly what the non-pipelined run computes.
 *
 *   custom_schedule [STAGES [MICROBATCHES]]   (default 2 stages, 4)
 *
 * The schedule, "fill-drain", is GPipe's (the built-in "gpipe") with the
 * backwards in microbatch order: every stage runs all forwards, then all
 * backwards, oldest microbatch first. pl_schedule_register puts it beside
 * the built-ins, where pl_schedule_find (and a program's own --schedule
 * flag, as the CLI's) finds it by name.
 *
 * A schedule only reorders work: the engine submits the tasks of every
 * schedule in one sequential order and the scheduling policy runs each
 * stage's items in the order the schedule lists, so gradients still sum in
 * the same order. The losses and every parameter after training must be
 * equal BIT FOR BIT to those of the non-pipelined run; the example exits
 * 1 otherwise (it is registered as a CTest). It also prints the order for
 * each stage and shows that a broken order is refused up front. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pleiades.h>

enum { V = 256, T = 16, C = 32, L = 4, NH = 4, B = 8, STEPS = 4 };

static int32_t tokens[STEPS][B * T], targets[STEPS][B * T];

/* Windows of a fixed text at pseudo-random offsets; targets are the next
 * bytes. Synthetic, so the example needs no data files. */
static void make_data(void) {
    static const char text[] =
        "the pleiades are a cluster of stars; seven sisters, says the myth, "
        "though most eyes count six. ";
    const size_t n = sizeof text - 1;
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (int s = 0; s < STEPS; s++)
        for (int b = 0; b < B; b++) {
            x = x * 6364136223846793005u + 1442695040888963407u;
            size_t at = (size_t)(x >> 33) % n;
            for (int t = 0; t < T; t++) {
                tokens[s][b * T + t] = (unsigned char)text[(at + t) % n];
                targets[s][b * T + t] = (unsigned char)text[(at + t + 1) % n];
            }
        }
}

/* Trains STEPS steps; losses[STEPS] and the parameters afterwards (*params,
 * malloc'd, *n floats). def NULL: the non-pipelined run with m tiles. */
static int train(pl_runtime_t *rt, const pl_schedule_def *def, int p, int m,
                 double *losses, float **params, int64_t *n) {
    pl_graph_t *g = pl_graph_new(7);
    pl_gpt_config cfg = {.vocab = V, .context = T, .channels = C, .layers = L, .heads = NH};
    pl_gpt_model model;
    if (!g || pl_gpt_build(g, &cfg, &model) != PL_STATUS_OK) {
        fprintf(stderr, "custom_schedule: pl_gpt_build: %s\n", pl_last_error());
        pl_graph_free(g);
        return 1;
    }
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = B;
    eo.tiles = m;
    eo.schedule_def = def; /* replaces eo.schedule */
    eo.stages = def ? p : 0;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    if (!e) {
        fprintf(stderr, "custom_schedule: pl_engine_new (%s): %s\n",
                def ? def->name : "none", pl_last_error());
        pl_graph_free(g);
        return 1;
    }
    int rc = 0;
    for (int s = 0; s < STEPS && !rc; s++) {
        const void *data[2] = {tokens[s], targets[s]};
        pl_batch batch = {.size = B, .data = data};
        pl_step_result r;
        if (pl_engine_train_step(e, &batch, &r) != PL_STATUS_OK) {
            fprintf(stderr, "custom_schedule: step %d: %s\n", s, pl_last_error());
            rc = 1;
        }
        losses[s] = r.loss;
    }
    *n = 0;
    for (int i = 0; i < pl_graph_num_params(g); i++)
        *n += pl_tensor_numel(pl_graph_param(g, i));
    *params = malloc((size_t)*n * sizeof **params);
    int64_t off = 0;
    for (int i = 0; !rc && i < pl_graph_num_params(g); i++) {
        pl_tensor_t *t = pl_graph_param(g, i);
        if (!*params || pl_engine_get_param(e, t, *params + off,
                                            (size_t)pl_tensor_numel(t)) != PL_STATUS_OK)
            rc = 1;
        off += pl_tensor_numel(t);
    }
    pl_engine_free(e);
    pl_graph_free(g);
    return rc;
}

/* Fill-drain: all forwards, then all backwards, microbatch 0 first. Stage
 * s's backward of microbatch mb waits only for stage s+1's, which runs
 * its backwards in the same order, so no stage waits on a later item. */
static int fill_drain_build(const pl_schedule_def *def, int p, int v, int m, int stage,
                            pl_work_item *items, int capacity, void *user) {
    (void)def, (void)p, (void)v, (void)stage, (void)user;
    if (capacity < 2 * m) return -1;
    int n = 0;
    for (int mb = 0; mb < m; mb++) items[n++] = (pl_work_item){PL_WORK_F, mb, 0};
    for (int mb = 0; mb < m; mb++) items[n++] = (pl_work_item){PL_WORK_B, mb, 0};
    return n;
}

/* One model chunk per stage (no interleaving). */
static pl_status fill_drain_check(int p, int v, int m) {
    (void)p, (void)m;
    return v == 1 ? PL_STATUS_OK : PL_STATUS_INVALID_ARGUMENT;
}

/* Each stage idles p−1 forward and p−1 backward slots of its m + m. */
static double fill_drain_bubble(int p, int v, int m) {
    (void)v;
    return (double)(p - 1) / m;
}

/* Static: the registry keeps the pointer, and engines use it. */
static const pl_schedule_def fill_drain = {.name = "fill-drain",
                                           .build = fill_drain_build,
                                           .check = fill_drain_check,
                                           .bubble = fill_drain_bubble};

/* An order that would hang: the last stage lists B of microbatch 0
 * before any forward, but that backward needs the stage's own forward of
 * microbatch 0, which comes later in the same list. */
static int broken_build(const pl_schedule_def *def, int p, int v, int m, int stage,
                        pl_work_item *items, int capacity, void *user) {
    (void)def, (void)v, (void)capacity, (void)user;
    int n = 0;
    if (stage == p - 1) { /* B of microbatch 0 first, then the forwards */
        items[n++] = (pl_work_item){PL_WORK_B, 0, 0};
        for (int mb = 0; mb < m; mb++) items[n++] = (pl_work_item){PL_WORK_F, mb, 0};
        for (int mb = 1; mb < m; mb++) items[n++] = (pl_work_item){PL_WORK_B, mb, 0};
        return n;
    }
    for (int mb = 0; mb < m; mb++) items[n++] = (pl_work_item){PL_WORK_F, mb, 0};
    for (int mb = 0; mb < m; mb++) items[n++] = (pl_work_item){PL_WORK_B, mb, 0};
    return n;
}

int main(int argc, char **argv) {
    int p = argc > 1 ? atoi(argv[1]) : 2, m = argc > 2 ? atoi(argv[2]) : 4;
    if (p < 1 || m < 1 || B % m != 0) {
        fprintf(stderr, "usage: custom_schedule [STAGES [MICROBATCHES dividing %d]]\n", B);
        return 2;
    }
    /* Registered once, found by name like the built-ins. */
    if (pl_schedule_register(&fill_drain) != PL_STATUS_OK) {
        fprintf(stderr, "custom_schedule: pl_schedule_register: %s\n", pl_last_error());
        return 1;
    }
    const pl_schedule_def *def = pl_schedule_find("fill-drain");
    if (!def) {
        fprintf(stderr, "custom_schedule: %s\n", pl_last_error());
        return 1;
    }
    printf("registered schedules:");
    for (int i = 0; i < pl_schedule_count(); i++)
        printf("%s %s", i ? "," : "", pl_schedule_at(i)->name);
    printf("\n");

    /* The schedule as the policy will run it. */
    pl_work_item items[3 * B];
    for (int s = 0; s < p; s++) {
        int k = def->build(def, p, 1, m, s, items, 3 * B, def->user);
        printf("%s stage %d:", def->name, s);
        for (int i = 0; i < k; i++)
            printf(" %c%d", items[i].kind == PL_WORK_F ? 'F' : 'B', items[i].microbatch);
        printf("\n");
    }
    /* Checked without an engine, as pl_engine_new checks it. */
    if (pl_schedule_validate(def, p, 1, m) != PL_STATUS_OK) {
        fprintf(stderr, "custom_schedule: %s refused: %s\n", def->name, pl_last_error());
        return 1;
    }
    const pl_schedule_def broken = {.name = "broken", .build = broken_build};
    if (p > 1 && pl_schedule_validate(&broken, p, 1, m) == PL_STATUS_OK) {
        fprintf(stderr, "custom_schedule: a deadlocking order was accepted\n");
        return 1;
    }
    if (p > 1) printf("refused as expected: %s\n", pl_last_error());

    make_data();
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = p > 2 ? p : 2; /* one worker per stage */
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) {
        fprintf(stderr, "custom_schedule: cannot start StarPU: %s\n", pl_last_error());
        return 1;
    }
    double ref[STEPS], got[STEPS];
    float *ref_params = NULL, *got_params = NULL;
    int64_t n_ref = 0, n_got = 0;
    int rc = train(rt, NULL, 1, m, ref, &ref_params, &n_ref);
    if (!rc) rc = train(rt, def, p, m, got, &got_params, &n_got);
    if (!rc) {
        printf("step   none loss      %s loss (p=%d, m=%d)\n", def->name, p, m);
        for (int s = 0; s < STEPS; s++) {
            bool same = memcmp(&ref[s], &got[s], sizeof ref[s]) == 0;
            printf("%4d  %.9f  %.9f  %s\n", s + 1, ref[s], got[s], same ? "equal" : "DIFFER");
            if (!same) rc = 1;
        }
        int64_t diff = 0;
        for (int64_t k = 0; n_ref == n_got && k < n_ref; k++)
            diff += memcmp(&ref_params[k], &got_params[k], sizeof(float)) != 0;
        if (n_ref != n_got || diff) rc = 1;
        printf("parameters: %lld, %lld differ\n", (long long)n_ref, (long long)diff);
    }
    printf("%s\n", rc ? "FAILED: the schedule changed the results"
                      : "bitwise equal to the non-pipelined run");
    free(ref_params);
    free(got_params);
    pl_runtime_free(rt);
    return rc;
}
