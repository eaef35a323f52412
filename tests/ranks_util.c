/* See ranks_util.h. */
#include "ranks_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_util.h"

pl_graph_t *ru_build(bool gpt, int in, int k, int v, int t) {
    pl_graph_t *g = pl_graph_new(7);
    if (!g) return NULL;
    if (gpt) {
        pl_gpt_config cfg = {.vocab = v, .context = t, .channels = 16, .layers = 2, .heads = 2};
        pl_gpt_model gm;
        return pl_gpt_build(g, &cfg, &gm) == PL_STATUS_OK ? g : NULL;
    }
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, (int64_t[]){in});
    pl_tensor_t *y = pl_graph_input(g, "y", PL_DTYPE_I32, 0, NULL);
    pl_tensor_t *h = x;
    for (int l = 0; l < 3; l++) {
        char name[16];
        snprintf(name, sizeof name, "fc%d", l + 1);
        if (l) pl_graph_begin_block(g, name);
        h = pl_relu(g, pl_linear(g, h, 24, name));
    }
    pl_graph_begin_block(g, "head");
    pl_tensor_t *logits = pl_linear(g, h, k, "head");
    pl_graph_set_output(g, logits);
    return pl_graph_set_loss(g, pl_cross_entropy(g, logits, y)) == PL_STATUS_OK ? g : NULL;
}

bool ru_collect(pl_engine_t *e, pl_graph_t *g, float **params, size_t *n) {
    bool ok = pl_engine_gather_params(e) == PL_STATUS_OK;
    CHECK(ok, "gathering the parameters: %s", pl_last_error());
    size_t total = (size_t)pl_graph_param_count(g), off = 0;
    free(*params);
    *params = tu_xmalloc(total * sizeof **params);
    for (int i = 0; i < pl_graph_num_params(g) && ok; i++) {
        const pl_tensor_t *t = pl_graph_param(g, i);
        size_t k = (size_t)pl_tensor_numel(t);
        ok = pl_engine_get_param(e, t, *params + off, k) == PL_STATUS_OK;
        CHECK(ok, "reading '%s': %s", pl_tensor_name(t), pl_last_error());
        off += k;
    }
    *n = total;
    return ok;
}

bool ru_close(double a, double b) { return fabs(a - b) <= 2e-5 + 2e-4 * fabs(b); }

void ru_compare(const char *what, bool bitwise, bool adam, const double *got_loss,
                const double *want_loss, int from, int steps, const float *got,
                const float *want, size_t n) {
    for (int s = from; s < steps; s++) {
        bool same = bitwise ? got_loss[s] == want_loss[s] : ru_close(got_loss[s], want_loss[s]);
        CHECK(same, "%s: step %d loss %.9g, expected %.9g", what, s, got_loss[s], want_loss[s]);
        if (!same) return;
    }
    if (!got || !want) return;
    double d2 = 0, n2 = 0;
    for (size_t k = 0; k < n; k++) {
        double d = got[k] - want[k];
        d2 += d * d;
        n2 += (double)want[k] * want[k];
        bool same = bitwise ? got[k] == want[k] : adam || ru_close(got[k], want[k]);
        CHECK(same, "%s: parameter element %zu is %.9g, expected %.9g", what, k, got[k],
              want[k]);
        if (!same) return;
    }
    CHECK(bitwise || !adam || sqrt(d2 / n2) <= 1e-4,
          "%s: ||params - expected|| / ||params|| = %.3g", what, sqrt(d2 / n2));
}
