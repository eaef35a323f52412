/* custom_placement: train a small GPT under a compute-memory budget smaller
 * than its model state, with a placement policy written outside the
 * library (public API only) and registered by name.
 *
 *   custom_placement [BUDGET_MB [POLICY]]   (default 8 MB, biggest)
 *
 * 4 layers, 128 channels: 0.83 M parameters packed into 22 chunks of 64 Ki
 * floats, 22 MB of model state with AdamW (values, gradients, two
 * moments). With an 8 MB compute tier the engine has to send chunks away
 * (to a temporary offload directory on CPU-only runs, host RAM on CUDA
 * runs) and bring them back; the policy chooses which. The policy here,
 * "biggest", sends the largest units the step does not need away first;
 * pl_placement_register puts it beside the built-ins, where
 * pl_placement_find (and a program's own --placement flag, as the CLI's)
 * finds it by name. Placement only moves data: the losses are those of a
 * run with room for everything (try BUDGET_MB 1000). POLICY may also name
 * a built-in ("lru", "auto", "static", "cpu", "cuda") to compare the
 * bytes moved. */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw */
#include <ftw.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pleiades.h>

enum { V = 256, T = 32, C = 128, L = 4, NH = 4, B = 4, STEPS = 8 };

/* ------------------------------------------------ the "biggest" policy */

typedef struct biggest {
    int n;
    int64_t *bytes; /* each unit's size (a copy: info is not kept) */
    bool *keep;     /* needed by the step, or already chosen */
} biggest;

static void big_free(void *state) {
    biggest *s = state;
    if (!s) return;
    free(s->bytes);
    free(s->keep);
    free(s);
}

static void *big_init(const pl_placement_info *info) {
    biggest *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->n = info->n_units;
    s->bytes = calloc((size_t)s->n + 1, sizeof *s->bytes);
    s->keep = calloc((size_t)s->n + 1, sizeof *s->keep);
    if (!s->bytes || !s->keep) {
        big_free(s);
        return NULL; /* the engine then runs without the policy's choices */
    }
    for (int u = 0; u < s->n; u++) s->bytes[u] = info->unit_bytes[u];
    return s;
}

/* Remembers what the step about to run needs: those stay. */
static void big_before_step(void *state, int step, const int *needed, int n_needed,
                            const bool *resident, const pl_memory_stats *stats) {
    (void)step, (void)resident, (void)stats;
    biggest *s = state;
    if (!s) return;
    memset(s->keep, 0, (size_t)s->n * sizeof *s->keep);
    for (int i = 0; i < n_needed; i++)
        if (needed[i] >= 0 && needed[i] < s->n) s->keep[needed[i]] = true;
}

/* The largest resident units the step does not need, until `bytes`. */
static int big_choose_victims(void *state, int step, int64_t bytes, const bool *resident,
                              int *victims) {
    (void)step;
    biggest *s = state;
    int k = 0;
    for (int64_t freed = 0; s && freed < bytes; k++) {
        int best = -1;
        for (int u = 0; u < s->n; u++)
            if (resident[u] && !s->keep[u] && (best < 0 || s->bytes[u] > s->bytes[best]))
                best = u;
        if (best < 0) break; /* nothing more can leave */
        victims[k] = best;
        s->keep[best] = true; /* chosen once */
        freed += s->bytes[best];
    }
    return k;
}

/* No prefetch, and every update on the compute tier (callbacks left NULL
 * are skipped by the engine). Static: the registry keeps the pointer. */
static const pl_placement_policy biggest_policy = {
    .name = "biggest", .init = big_init, .before_step = big_before_step,
    .choose_victims = big_choose_victims, .free = big_free};

/* ---------------------------------------------------------------- main */

static int fail(const char *what) {
    fprintf(stderr, "custom_placement: %s: %s\n", what, pl_last_error());
    return 1;
}

static int remove_entry(const char *path, const struct stat *sb, int flag,
                        struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* B windows of T bytes of a fixed text at pseudo-random offsets; targets
 * are the next bytes. Synthetic, so the example needs no data files. */
static void make_batch(int step, int32_t *tokens, int32_t *targets) {
    static const char text[] =
        "the pleiades are a cluster of stars; seven sisters, says the myth, "
        "though most eyes count six. ";
    const size_t n = sizeof text - 1;
    uint64_t x = 0x9e3779b97f4a7c15u * (uint64_t)(step + 1);
    for (int b = 0; b < B; b++) {
        x = x * 6364136223846793005u + 1442695040888963407u;
        size_t at = (size_t)(x >> 33) % n;
        for (int t = 0; t < T; t++) {
            tokens[b * T + t] = (unsigned char)text[(at + t) % n];
            targets[b * T + t] = (unsigned char)text[(at + t + 1) % n];
        }
    }
}

int main(int argc, char **argv) {
    long budget_mb = argc > 1 ? strtol(argv[1], NULL, 10) : 8;
    const char *policy_name = argc > 2 ? argv[2] : "biggest";
    /* Registered once, found by name like the built-ins. */
    if (pl_placement_register(&biggest_policy) != PL_STATUS_OK)
        return fail("pl_placement_register");
    pl_engine_options eo = pl_engine_options_default();
    eo.placement.policy = pl_placement_find(policy_name);
    if (budget_mb <= 0 || !eo.placement.policy) {
        fprintf(stderr, "usage: custom_placement [BUDGET_MB > 0 [POLICY]], POLICY one of:");
        for (int i = 0; i < pl_placement_count(); i++)
            fprintf(stderr, "%s %s", i ? "," : "", pl_placement_at(i)->name);
        fprintf(stderr, "\n");
        return 2;
    }
    /* auto only brings units in early when allowed to. */
    eo.placement.max_prefetch = 2;

    /* The disk tier: StarPU's disk node writes evicted chunks here. */
    char dir[] = "/tmp/pleiades_placement_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("custom_placement: mkdtemp");
        return 1;
    }

    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 2;
    ro.compute_budget_mb = budget_mb;
    ro.offload_dir = dir;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) return fail("cannot start StarPU");

    pl_graph_t *g = pl_graph_new(1);
    pl_gpt_config cfg = {.vocab = V, .context = T, .channels = C, .layers = L,
                         .heads = NH};
    pl_gpt_model model;
    if (pl_gpt_build(g, &cfg, &model) != PL_STATUS_OK) return fail("pl_gpt_build");

    eo.batch_size = B;
    eo.optimizer.kind = PL_OPTIMIZER_ADAMW;
    eo.optimizer.lr = 3e-3f;
    /* Small chunks (the largest tensor, 4C·C floats) so that there are
     * enough units for the policy to choose among. */
    eo.chunk_elems = 4 * C * C;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    if (!e) return fail("pl_engine_new");
    printf("GPT: %lld parameters in %d chunks, compute budget %ld MB, "
           "policy %s, offload dir %s\n",
           (long long)pl_graph_param_count(g), pl_engine_num_chunks(e), budget_mb,
           eo.placement.policy->name, dir);

    static int32_t tokens[B * T], targets[B * T];
    const void *data[2] = {tokens, targets};
    pl_batch batch = {.size = B, .data = data};
    pl_step_result r;
    printf("step    loss   peak compute   peak host/disk      moved  evictions  prefetch hits\n");
    for (int step = 1; step <= STEPS; step++) {
        make_batch(step, tokens, targets);
        if (pl_engine_train_step(e, &batch, &r) != PL_STATUS_OK)
            return fail("training step");
        pl_iteration_memory m;
        if (pl_engine_memory(e, &m) != PL_STATUS_OK) return fail("pl_engine_memory");
        printf("%4d  %6.3f  %10.2f MB  %12.2f MB  %6.2f MB  %9lld  %13lld\n", step, r.loss,
               m.peak_compute_bytes / 1048576.0, m.peak_host_bytes / 1048576.0,
               m.bytes_moved / 1048576.0, (long long)m.evictions,
               (long long)m.prefetch_hits);
    }

    pl_engine_free(e);
    pl_graph_free(g);
    pl_runtime_free(rt);
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}
