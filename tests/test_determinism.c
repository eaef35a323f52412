/* Bitwise run-to-run determinism of training through the public API.
 *
 * A 64-128-128-10 MLP (relu, gelu), batch 32 in 4 tiles, AdamW, is trained
 * for 20 steps on fixed pseudo-random data, twice in the same process
 * (engine and graph freed and rebuilt, same runtime) with 2 StarPU CPU
 * workers so tiles really run concurrently and finish in varying orders.
 * The engine promises that this does not matter: gradients accumulate over
 * tiles in submission order (StarPU sequential consistency on the RW
 * gradient) and loss partial sums are added in tile order. So the 20
 * losses and every final parameter must match bit for bit (memcmp, not a
 * tolerance). A third run with another graph seed must differ, which shows
 * the comparison can fail at all.
 *
 * Exit status 0 on success; every failed check prints a FAIL line. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pleiades.h"
#include "test_util.h"

enum { IN = 64, HID = 128, CLASSES = 10, BATCH = 32, TILES = 4, STEPS = 20 };

/* Data for all steps, generated once: both runs read the same bytes. */
static float xs[STEPS][BATCH * IN];
static int32_t ys[STEPS][BATCH];

static void make_data(void) {
    uint64_t s = 2024;
    for (int t = 0; t < STEPS; t++) {
        for (int i = 0; i < BATCH; i++) {
            int32_t y = (int32_t)(tu_splitmix64(&s) % CLASSES);
            ys[t][i] = y;
            /* Class-dependent mean so the loss has something to learn. */
            for (int k = 0; k < IN; k++) {
                double u = (double)(tu_splitmix64(&s) >> 11) / 9007199254740992.0;
                xs[t][i * IN + k] =
                    (float)(u - 0.5) + (k % CLASSES == y ? 0.5f : 0.0f);
            }
        }
    }
}

typedef struct run_result {
    double losses[STEPS];
    float *params; /* all parameters, concatenated in index order */
    int64_t n_params;
} run_result;

/* Builds graph and engine with `seed`, trains STEPS steps, reads back all
 * parameters, frees both. false (after printing why) on any API error. */
static bool train(pl_runtime_t *rt, uint64_t seed, run_result *r) {
    memset(r, 0, sizeof *r);
    bool ok = false;
    pl_engine_t *e = NULL;
    pl_graph_t *g = pl_graph_new(seed);
    int64_t in_shape[1] = {IN};
    pl_tensor_t *x = g ? pl_graph_input(g, "x", PL_DTYPE_F32, 1, in_shape) : NULL;
    pl_tensor_t *y = x ? pl_graph_input(g, "y", PL_DTYPE_I32, 0, NULL) : NULL;
    pl_tensor_t *h = y ? pl_relu(g, pl_linear(g, x, HID, "fc1")) : NULL;
    h = h ? pl_gelu(g, pl_linear(g, h, HID, "fc2")) : NULL;
    pl_tensor_t *logits = h ? pl_linear(g, h, CLASSES, "head") : NULL;
    pl_tensor_t *loss = logits ? pl_cross_entropy(g, logits, y) : NULL;
    if (!loss || pl_graph_set_loss(g, loss) != PL_STATUS_OK) {
        printf("FAIL: building the graph: %s\n", pl_last_error());
        goto done;
    }
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = BATCH;
    eo.tiles = TILES;
    eo.optimizer.kind = PL_OPTIMIZER_ADAMW;
    eo.optimizer.lr = 1e-2f; /* large enough that 20 steps move the loss */
    e = pl_engine_new(rt, g, &eo);
    if (!e) {
        printf("FAIL: pl_engine_new: %s\n", pl_last_error());
        goto done;
    }
    for (int t = 0; t < STEPS; t++) {
        const void *data[2] = {xs[t], ys[t]};
        pl_batch b = {.size = BATCH, .data = data};
        pl_step_result res;
        if (pl_engine_train_step(e, &b, &res) != PL_STATUS_OK) {
            printf("FAIL: step %d: %s\n", t, pl_last_error());
            goto done;
        }
        r->losses[t] = res.loss;
    }
    r->n_params = pl_graph_param_count(g);
    r->params = malloc((size_t)r->n_params * sizeof *r->params);
    if (!r->params) {
        printf("FAIL: out of memory\n");
        goto done;
    }
    float *dst = r->params;
    for (int i = 0; i < pl_graph_num_params(g); i++) {
        pl_tensor_t *p = pl_graph_param(g, i);
        /* Waits for the last optimizer step's tasks. */
        if (pl_engine_get_param(e, p, dst, (size_t)pl_tensor_numel(p)) != PL_STATUS_OK) {
            printf("FAIL: pl_engine_get_param(%s): %s\n", pl_tensor_name(p),
                   pl_last_error());
            goto done;
        }
        dst += pl_tensor_numel(p);
    }
    ok = true;
done:
    pl_engine_free(e);
    pl_graph_free(g);
    return ok;
}

int main(void) {
    make_data();
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 2; /* real concurrency between tiles */
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) {
        printf("FAIL: pl_runtime_new: %s\n", pl_last_error());
        return 1;
    }
    int workers = pl_runtime_cpu_workers(rt);
    printf("%d CPU worker(s)\n", workers);
    CHECK(workers == 2, "asked for 2 CPU workers, StarPU runs %d", workers);

    run_result a, b, c;
    memset(&a, 0, sizeof a); /* a failed run leaves the later ones unset */
    memset(&b, 0, sizeof b);
    memset(&c, 0, sizeof c);
    bool ok = train(rt, 7, &a) && train(rt, 7, &b) && train(rt, 8, &c);
    if (ok) {
        for (int t = 0; t < STEPS; t++)
            printf("step %2d  loss %.17g  %.17g  (seed 8: %.17g)\n", t,
                   a.losses[t], b.losses[t], c.losses[t]);
        bool finite = true;
        for (int t = 0; t < STEPS; t++) finite = finite && isfinite(a.losses[t]);
        CHECK(finite, "a loss is not finite");
        /* Sanity that training ran: 20 AdamW steps on learnable data must
         * lower the loss, or identical results might just mean "nothing
         * happened". */
        CHECK(a.losses[STEPS - 1] < a.losses[0],
              "loss did not decrease: %.6f -> %.6f", a.losses[0],
              a.losses[STEPS - 1]);

        CHECK(memcmp(a.losses, b.losses, sizeof a.losses) == 0,
              "losses of two runs with the same seed differ bitwise");
        for (int t = 0; t < STEPS; t++)
            if (memcmp(&a.losses[t], &b.losses[t], sizeof(double)) != 0) {
                printf("  first differing step %d: %.17g vs %.17g\n", t,
                       a.losses[t], b.losses[t]);
                break;
            }
        CHECK(a.n_params == b.n_params &&
                  memcmp(a.params, b.params, (size_t)a.n_params * sizeof(float)) == 0,
              "final parameters of two runs with the same seed differ bitwise");
        int64_t ndiff = 0;
        for (int64_t i = 0; i < a.n_params && a.n_params == b.n_params; i++)
            ndiff += memcmp(&a.params[i], &b.params[i], sizeof(float)) != 0;
        if (ndiff) printf("  %lld of %lld parameters differ\n", (long long)ndiff,
                          (long long)a.n_params);

        /* The control: another initialisation must give other losses. */
        CHECK(memcmp(a.losses, c.losses, sizeof a.losses) != 0,
              "a different graph seed gave bitwise identical losses: the "
              "comparison cannot detect differences");
    } else {
        tu_failures++;
    }
    free(a.params);
    free(b.params);
    free(c.params);
    pl_runtime_free(rt);
    if (tu_failures) {
        printf("FAIL: %d determinism failure(s)\n", tu_failures);
        return 1;
    }
    printf("determinism: %d losses and %lld parameters bitwise identical\n",
           STEPS, (long long)a.n_params);
    return 0;
}
