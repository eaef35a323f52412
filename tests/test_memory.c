/* Memory placement end to end: budgets, tiers and policies on a real
 * training run of a small GPT.
 *
 * Model: GPT V=256 T=32 C=64 L=4 NH=4 (218 496 parameters), batch 8 in 2
 * tiles on 2 CPU workers, chunk_elems 1<<14 (64 KiB of floats: 22 chunks,
 * so 44 units to place), AdamW defaults, graph seed 1234, 4 training steps
 * on fixed pseudo-random tokens.
 *
 * "Model state" is parameters + gradients + AdamW m and v: 16 bytes per
 * parameter, 3.3 MiB here (5.5 MiB as chunks, padding included).
 * Activations of both tiles and their gradients come on top (about
 * 10 MiB); StarPU counts them against the budget as well. The budget is
 * BUDGET_MB = 1 MiB, 0.30 of the model state: the largest single step (a
 * chunk's units plus one tile's activations, which the engine checks at
 * pl_engine_new) fits, the iteration does not, so every step moves data
 * through the disk tier (StarPU's disk node in a scratch directory).
 * Budgets are whole MiB (STARPU_LIMIT_CPU_MEM), which is why the model is
 * not smaller.
 *
 * Only one pl_runtime may exist per process and budgets are runtime
 * options, so every configuration runs in a forked child with its own
 * runtime; the child sends its losses, memory figures and final
 * parameters back through a pipe. The parent itself never starts StarPU.
 *
 * 1. Results do not depend on placement: no placement (no budget),
 *    static (Gemini's defaults), cpu (the Lightning preset: everything
 *    offloaded), auto (Belady, max_prefetch 2) and the built-in LRU
 *    policy (memory/placement_lru.c, found by name) must give the 4
 *    losses and every final parameter BIT FOR BIT equal (memcmp).
 * 2. Budgets hold: in every placed run and iteration, StarPU's
 *    peak_compute_bytes is > 0 and <= the budget, and bytes_moved,
 *    evictions and peak_host_bytes (the disk tier's use) are > 0; the
 *    offload directory holds files between steps. (auto's prefetch hits
 *    are printed, not checked: they depend on timing.)
 * 3. Impossible configurations fail cleanly, before any training:
 *    a chunk too large for the budget (pl_engine_new: INVALID_ARGUMENT,
 *    message with the required and available bytes), a fraction of 1.5,
 *    a budget with no policy and a policy with no budget, a budget the
 *    model does not fit with no offload directory (an error, not a
 *    livelock: an alarm would kill the child), and an offload directory
 *    that does not exist (pl_runtime_new: IO_ERROR naming it).
 *
 * Every child has an alarm (a livelocked StarPU fails the test instead of
 * hanging ctest). Exit status 0 on success; failures print FAIL lines. */
#define _GNU_SOURCE
#include <dirent.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pleiades.h"
#include "test_util.h"

enum { V = 256, T = 32, C = 64, L = 4, NH = 4, BATCH = 8, TILES = 2, WORKERS = 2,
       STEPS = 4, BUDGET_MB = 1, CHILD_ALARM_S = 120 };
#define CHUNK_ELEMS ((size_t)1 << 14)
#define SEED 1234
#define BUDGET_BYTES ((int64_t)BUDGET_MB * 1024 * 1024)

static int32_t tokens[STEPS][BATCH * T], targets[STEPS][BATCH * T];

/* Byte sequences with some structure (a noisy ramp) so training moves. */
static void make_data(void) {
    uint64_t s = 99;
    for (int st = 0; st < STEPS; st++)
        tu_ramp_tokens(&s, V, T, BATCH, tokens[st], targets[st]);
}

/* ------------------------------------------------------------ children */

typedef struct run_result {
    double loss[STEPS];
    pl_iteration_memory mem[STEPS];
    int max_dir_entries; /* files in the offload directory after a step */
    int n_chunks;
    int64_t n_floats;    /* parameters that follow in the pipe */
} run_result;

typedef struct config {
    const char *name;
    bool budget;      /* BUDGET_MB with an offload directory */
    const char *policy; /* NULL, "lru" or a pl_placement_by_name name */
    int max_prefetch;
} config;

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static bool write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w <= 0) return false;
        c += w;
        n -= (size_t)w;
    }
    return true;
}

static pl_graph_t *build_gpt(void) {
    pl_graph_t *g = pl_graph_new(SEED);
    pl_gpt_config gc = {.vocab = V, .context = T, .channels = C, .layers = L, .heads = NH};
    pl_gpt_model m;
    if (!g || pl_gpt_build(g, &gc, &m) != PL_STATUS_OK) {
        printf("FAIL: cannot build the GPT: %s\n", pl_last_error());
        exit(1);
    }
    return g;
}

static pl_engine_options engine_options(void) {
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = BATCH;
    eo.tiles = TILES;
    eo.chunk_elems = CHUNK_ELEMS;
    return eo;
}

static pl_runtime_t *runtime(int64_t budget_mb, const char *offload_dir) {
    pl_runtime_options ro = pl_runtime_options_default();
    ro.device = PL_DEVICE_CPU;
    ro.cpu_workers = WORKERS;
    ro.compute_budget_mb = budget_mb;
    ro.offload_dir = offload_dir;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) {
        printf("FAIL: pl_runtime_new: %s\n", pl_last_error());
        exit(1);
    }
    return rt;
}

/* Trains one configuration and writes a run_result plus the parameters
 * (graph order) to `fd`. Runs in the child. */
static void child_train(const config *c, int fd) {
    char dir[128] = "";
    if (c->budget) {
        char name[64];
        snprintf(name, sizeof name, "offload_%s", c->name);
        tu_scratch_path(dir, sizeof dir, name);
        if (mkdir(dir, 0700) != 0) {
            printf("FAIL %s: mkdir %s\n", c->name, dir);
            exit(1);
        }
    }
    pl_runtime_t *rt = runtime(c->budget ? BUDGET_MB : 0, c->budget ? dir : NULL);
    pl_graph_t *g = build_gpt();
    pl_engine_options eo = engine_options();
    if (c->policy) {
        eo.placement.policy = strcmp(c->policy, "lru") == 0
                                  ? pl_placement_find("lru")
                                  : pl_placement_by_name(c->policy, &eo.placement);
        eo.placement.max_prefetch = c->max_prefetch;
        CHECK(eo.placement.policy, "%s: no policy '%s'", c->name, c->policy);
    }
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    if (!e) {
        printf("FAIL %s: pl_engine_new: %s\n", c->name, pl_last_error());
        exit(1);
    }
    run_result r = {.n_chunks = pl_engine_num_chunks(e)};
    for (int st = 0; st < STEPS; st++) {
        const void *data[2] = {tokens[st], targets[st]};
        pl_batch b = {.size = BATCH, .data = data};
        pl_step_result res;
        if (pl_engine_train_step(e, &b, &res) != PL_STATUS_OK) {
            printf("FAIL %s: step %d: %s\n", c->name, st, pl_last_error());
            exit(1);
        }
        r.loss[st] = res.loss;
        CHECK(pl_engine_memory(e, &r.mem[st]) == PL_STATUS_OK, "%s: pl_engine_memory: %s",
              c->name, pl_last_error());
        if (c->budget) {
            int n = count_entries(dir);
            if (n > r.max_dir_entries) r.max_dir_entries = n;
        }
    }
    int np = pl_graph_num_params(g);
    for (int i = 0; i < np; i++) r.n_floats += pl_tensor_numel(pl_graph_param(g, i));
    float *params = tu_xmalloc((size_t)r.n_floats * sizeof *params);
    int64_t off = 0;
    for (int i = 0; i < np; i++) {
        const pl_tensor_t *p = pl_graph_param(g, i);
        CHECK(pl_engine_get_param(e, p, params + off, (size_t)pl_tensor_numel(p)) == PL_STATUS_OK,
              "%s: get_param %s: %s", c->name, pl_tensor_name(p), pl_last_error());
        off += pl_tensor_numel(p);
    }
    if (!write_all(fd, &r, sizeof r) ||
        !write_all(fd, params, (size_t)r.n_floats * sizeof *params)) {
        printf("FAIL %s: cannot write the results\n", c->name);
        tu_failures++;
    }
    free(params);
    pl_engine_free(e);
    pl_graph_free(g);
    pl_runtime_free(rt);
}

/* Budgeted runtime with a disk tier: configurations pl_engine_new must
 * refuse, each before any step. */
static void child_refusals(int fd) {
    (void)fd;
    char dir[128];
    tu_scratch_path(dir, sizeof dir, "offload_refusals");
    if (mkdir(dir, 0700) != 0) exit(1);
    pl_runtime_t *rt = runtime(BUDGET_MB, dir);
    pl_graph_t *g = build_gpt();

    /* 1 Mi floats per chunk: one unit (values + gradients) is 8 MiB. */
    pl_engine_options eo = engine_options();
    eo.chunk_elems = (size_t)1 << 20;
    eo.placement.policy = pl_placement_auto();
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK(!e, "a chunk larger than the budget was accepted");
    char avail[64];
    snprintf(avail, sizeof avail, "budget is %lld bytes", (long long)BUDGET_BYTES);
    tu_expect_error(__LINE__, "chunk over budget", pl_last_status(),
                    PL_STATUS_INVALID_ARGUMENT, "needs ", avail);
    long long need = 0;
    const char *at = strstr(pl_last_error(), "needs ");
    CHECK(at && sscanf(at, "needs %lld bytes", &need) == 1 && need > BUDGET_BYTES,
          "message does not state the required bytes (> %lld): %s",
          (long long)BUDGET_BYTES, pl_last_error());
    pl_engine_free(e);

    /* Fractions outside [0, 1]. */
    eo = engine_options();
    eo.placement.policy = pl_placement_static();
    eo.placement.shard_param_frac = 1.5f;
    e = pl_engine_new(rt, g, &eo);
    CHECK(!e, "shard_param_frac 1.5 was accepted");
    tu_expect_error(__LINE__, "shard_param_frac 1.5", pl_last_status(),
                    PL_STATUS_INVALID_ARGUMENT, "shard_param_frac 1.5", "[0, 1]");
    pl_engine_free(e);
    eo.placement.shard_param_frac = 1.0f;
    eo.placement.offload_optim_frac = -0.5f;
    e = pl_engine_new(rt, g, &eo);
    CHECK(!e, "offload_optim_frac -0.5 was accepted");
    tu_expect_error(__LINE__, "offload_optim_frac -0.5", pl_last_status(),
                    PL_STATUS_INVALID_ARGUMENT, "offload_optim_frac -0.5", NULL);
    pl_engine_free(e);
    eo.placement.offload_optim_frac = 0.0f;
    eo.placement.policy = pl_placement_auto();
    eo.placement.steady_cuda_cap_ratio = 0.0f;
    e = pl_engine_new(rt, g, &eo);
    CHECK(!e, "steady_cuda_cap_ratio 0 was accepted");
    tu_expect_error(__LINE__, "steady_cuda_cap_ratio 0", pl_last_status(),
                    PL_STATUS_INVALID_ARGUMENT, "steady_cuda_cap_ratio 0", NULL);
    pl_engine_free(e);

    /* A budgeted runtime needs a policy. */
    eo = engine_options();
    e = pl_engine_new(rt, g, &eo);
    CHECK(!e, "a budget without a placement policy was accepted");
    tu_expect_error(__LINE__, "budget, no policy", pl_last_status(),
                    PL_STATUS_INVALID_ARGUMENT, "no placement policy", NULL);
    pl_engine_free(e);
    pl_graph_free(g);
    pl_runtime_free(rt);
}

/* No budget: a policy needs one. */
static void child_unbudgeted(int fd) {
    (void)fd;
    pl_runtime_t *rt = runtime(0, NULL);
    pl_graph_t *g = build_gpt();
    pl_engine_options eo = engine_options();
    eo.placement.policy = pl_placement_auto();
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK(!e, "a policy without a budget was accepted");
    tu_expect_error(__LINE__, "policy, no budget", pl_last_status(),
                    PL_STATUS_INVALID_ARGUMENT, "needs a compute-tier budget", NULL);
    pl_engine_free(e);
    pl_graph_free(g);
    pl_runtime_free(rt);
}

/* A budget the model does not fit and nowhere to evict to: StarPU would
 * spin forever allocating the chunks; the engine must refuse first. */
static void child_no_offload(int fd) {
    (void)fd;
    pl_runtime_t *rt = runtime(BUDGET_MB, NULL);
    pl_graph_t *g = build_gpt();
    pl_engine_options eo = engine_options();
    eo.placement.policy = pl_placement_auto();
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK(!e, "a budget the model does not fit, without offload dir, was accepted");
    tu_expect_error(__LINE__, "no offload tier", pl_last_status(),
                    PL_STATUS_INVALID_ARGUMENT, "no tier to offload to", "--offload-dir");
    pl_engine_free(e);
    pl_graph_free(g);
    pl_runtime_free(rt);
}

/* Runs fn in a child; its pipe output (if `out`) is read into a malloc'd
 * buffer. Returns whether the child exited 0 (its FAIL lines say why
 * not). */
static bool in_child(const char *what, void (*fn)(const void *arg, int fd), const void *arg,
                     char **out, size_t *out_len) {
    int p[2];
    if (pipe(p) != 0) {
        printf("FAIL %s: pipe\n", what);
        tu_failures++;
        return false;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        tu_failures = 0; /* the child's own count is its exit status */
        alarm(CHILD_ALARM_S);
        fn(arg, p[1]);
        close(p[1]);
        fflush(stdout);
        _exit(tu_failures ? 1 : 0);
    }
    close(p[1]);
    size_t cap = 1 << 16, len = 0;
    char *buf = tu_xmalloc(cap);
    for (;;) {
        if (len == cap) buf = realloc(buf, cap *= 2);
        if (!buf) exit(1);
        ssize_t r = read(p[0], buf + len, cap - len);
        if (r <= 0) break;
        len += (size_t)r;
    }
    close(p[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok) {
        tu_failures++;
        if (WIFSIGNALED(status))
            printf("FAIL %s: child killed by signal %d%s\n", what, WTERMSIG(status),
                   WTERMSIG(status) == SIGALRM ? " (alarm: livelock or hang)" : "");
        else
            printf("FAIL %s: child exit status %d\n", what, WEXITSTATUS(status));
    }
    if (out) {
        *out = buf;
        *out_len = len;
    } else {
        free(buf);
    }
    return ok;
}

static void train_fn(const void *arg, int fd) { child_train(arg, fd); }
static void refusals_fn(const void *arg, int fd) { (void)arg; child_refusals(fd); }
static void unbudgeted_fn(const void *arg, int fd) { (void)arg; child_unbudgeted(fd); }
static void no_offload_fn(const void *arg, int fd) { (void)arg; child_no_offload(fd); }

/* -------------------------------------------------------------- parent */

static const config CONFIGS[] = {
    {"none", false, NULL, 0},
    {"static", true, "static", 0},
    {"cpu", true, "cpu", 0},
    {"auto", true, "auto", 2},
    {"lru", true, "lru", 0},
};
#define N_CONFIGS ((int)(sizeof CONFIGS / sizeof *CONFIGS))

static double mib(int64_t b) { return (double)b / 1048576.0; }

int main(void) {
    if (!tu_scratch_create("pl_memory")) {
        printf("FAIL: cannot create a scratch directory\n");
        return 1;
    }
    make_data();

    /* An offload directory that does not exist: refused before StarPU
     * starts (so this process may ask). */
    char missing[128];
    tu_scratch_path(missing, sizeof missing, "no/such/dir");
    pl_runtime_options ro = pl_runtime_options_default();
    ro.compute_budget_mb = BUDGET_MB;
    ro.offload_dir = missing;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    CHECK(!rt, "a missing offload directory was accepted");
    tu_expect_error(__LINE__, "missing offload dir", pl_last_status(), PL_STATUS_IO_ERROR,
                    missing, NULL);
    pl_runtime_free(rt);

    char *buf[N_CONFIGS] = {0};
    size_t len[N_CONFIGS] = {0};
    run_result res[N_CONFIGS];
    const float *params[N_CONFIGS] = {0};
    bool have[N_CONFIGS] = {0};
    for (int k = 0; k < N_CONFIGS; k++) {
        const config *c = &CONFIGS[k];
        if (!in_child(c->name, train_fn, c, &buf[k], &len[k])) continue;
        if (len[k] < sizeof(run_result)) {
            printf("FAIL %s: short result (%zu bytes)\n", c->name, len[k]);
            tu_failures++;
            continue;
        }
        memcpy(&res[k], buf[k], sizeof res[k]);
        if (len[k] != sizeof(run_result) + (size_t)res[k].n_floats * sizeof(float)) {
            printf("FAIL %s: result of %zu bytes for %lld parameters\n", c->name, len[k],
                   (long long)res[k].n_floats);
            tu_failures++;
            continue;
        }
        params[k] = (const float *)(buf[k] + sizeof(run_result));
        have[k] = true;
        const run_result *r = &res[k];
        printf("%-7s losses %.9g %.9g %.9g %.9g\n", c->name, r->loss[0], r->loss[1],
               r->loss[2], r->loss[3]);
        if (k == 0) {
            int64_t state = r->n_floats * 16;
            printf("model: %lld parameters in %d chunks; model state (params, grads, "
                   "AdamW m, v) %.2f MiB; budget %d MiB = %.2f of it\n",
                   (long long)r->n_floats, r->n_chunks, mib(state), BUDGET_MB,
                   (double)BUDGET_BYTES / (double)state);
            CHECK(r->loss[STEPS - 1] < r->loss[0], "training did not move the loss");
            continue;
        }
        int64_t hits = 0;
        for (int st = 0; st < STEPS; st++) {
            const pl_iteration_memory *m = &r->mem[st];
            printf("  iter %d: peak compute %.3f MiB, peak disk %.2f MiB, moved %.2f MiB, "
                   "%lld evictions, %lld prefetch hits\n",
                   st, mib(m->peak_compute_bytes), mib(m->peak_host_bytes),
                   mib(m->bytes_moved), (long long)m->evictions, (long long)m->prefetch_hits);
            CHECK(m->peak_compute_bytes > 0 && m->peak_compute_bytes <= BUDGET_BYTES,
                  "%s iteration %d: peak_compute_bytes %lld not in (0, %lld]", c->name, st,
                  (long long)m->peak_compute_bytes, (long long)BUDGET_BYTES);
            CHECK(m->bytes_moved > 0, "%s iteration %d: no bytes moved", c->name, st);
            CHECK(m->evictions > 0, "%s iteration %d: no evictions", c->name, st);
            CHECK(m->peak_host_bytes > 0, "%s iteration %d: the disk tier was not used",
                  c->name, st);
            hits += m->prefetch_hits;
        }
        CHECK(r->max_dir_entries > 0, "%s: the offload directory stayed empty", c->name);
        /* Prefetch hits depend on timing (a prefetched unit may be evicted
         * again before its step): reported, not checked. */
        if (c->max_prefetch > 0) printf("  %lld prefetch hits in all\n", (long long)hits);
    }

    /* 1. Bitwise the same training whatever the placement. */
    for (int k = 1; k < N_CONFIGS; k++) {
        if (!have[0] || !have[k]) continue;
        CHECK(memcmp(res[k].loss, res[0].loss, sizeof res[0].loss) == 0,
              "%s: losses differ from the unlimited run", CONFIGS[k].name);
        CHECK(res[k].n_floats == res[0].n_floats &&
                  memcmp(params[k], params[0], (size_t)res[0].n_floats * sizeof(float)) == 0,
              "%s: final parameters differ from the unlimited run", CONFIGS[k].name);
    }

    /* 3. Refusals. */
    in_child("refusals", refusals_fn, NULL, NULL, NULL);
    in_child("unbudgeted", unbudgeted_fn, NULL, NULL, NULL);
    in_child("no offload dir", no_offload_fn, NULL, NULL, NULL);

    for (int k = 0; k < N_CONFIGS; k++) free(buf[k]);
    tu_remove_tree(tu_scratch_dir());
    if (tu_failures) {
        printf("%d check(s) failed\n", tu_failures);
        return 1;
    }
    printf("all memory placement checks passed\n");
    return 0;
}
