/* Misuse of the C API that used to go unnoticed, crash or corrupt state
 * (issue 44, items 11-17). Each section is its own CTest test
 * (api_misuse_SECTION, tests/CMakeLists.txt), run as
 * `test_api_misuse SECTION`:
 *
 *   backward_failure  a user op's backward_weight / backward_input kernel
 *                     that fails makes the step that ran it fail (fuse_tasks
 *                     on and off), and no parameter, optimizer state or step
 *                     count changes: a later good step gives bit for bit
 *                     what an engine that never met the failure gives.
 *   placement_outputs a placement policy's victims[] / units[] answers are
 *                     checked: duplicates, indices out of range, a count
 *                     outside [0, n_units], writes past n_units, victims the
 *                     step needs fail the step naming the policy and value.
 *   gradcheck_reads   pl_gradcheck hands each kernel the buffers the engine
 *                     would (NULL where *_reads does not declare them) and
 *                     names the missing PL_OP_READS_ flag of a kernel that
 *                     reads what it did not declare.
 *   duplicate_names   an input or op name already in the graph is refused
 *                     when added, naming it (pl_graph_find was ambiguous);
 *                     generated names never collide with a user's.
 *   schedule_capacity a user schedule's build that writes past its items
 *                     capacity is refused (not a heap overrun), and
 *                     pl_schedule_append refuses past it.
 *   free_order        an engine or graph or runtime freed twice, a graph or a
 *                     runtime freed before its engine: refused with a
 *                     message on stderr, the handles left usable, instead
 *                     of a crash (each case in a forked child).
 *   check_finite      pl_engine_options.check_finite stops the step before the
 *                     update at the first inf/NaN, naming the batch's input,
 *                     the op whose output, or the gradient an op's backward
 *                     wrote; nothing changes and training goes on after it.
 *
 * Cases that would crash on a regression run in a forked child with an
 * alarm, so the test reports a FAIL line instead of dying or hanging.
 * Exit status 0 on success; every failed check prints a FAIL line. */
#define _GNU_SOURCE
#include <math.h>
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

/* Runs fn in a forked child under an alarm: true when it exited 0. A
 * crash, a hang or a failed check in the child is reported as `what`. */
static bool isolated(const char *what, void (*fn)(void), unsigned seconds) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(seconds);
        fn();
        fflush(stdout);
        _exit(tu_failures ? 1 : 0);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) {
        CHECK(false, "%s: fork/waitpid failed", what);
        return false;
    }
    if (WIFSIGNALED(status)) {
        CHECK(false, "%s: the child died of signal %d (%s)", what, WTERMSIG(status),
              WTERMSIG(status) == SIGALRM ? "timed out" : strsignal(WTERMSIG(status)));
        return false;
    }
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: the child failed", what);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static pl_runtime_t *cpu_runtime(int workers) {
    pl_runtime_options ro = pl_runtime_options_default();
    ro.device = PL_DEVICE_CPU;
    ro.cpu_workers = workers;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) {
        printf("FAIL: pl_runtime_new: %s\n", pl_last_error());
        exit(1);
    }
    return rt;
}

static pl_status same_shape(const pl_op_def *def, const char *op, pl_tensor_t *const *in,
                            const void *attrs, pl_op_layout *l) {
    (void)def, (void)op, (void)attrs;
    l->out_ndim = pl_tensor_shape(in[0], l->out_shape);
    return PL_STATUS_OK;
}

/* ------------------------------------------------ item 11: backward fails */

/* y = x ⊙ w, a parameter w of x's per-sample shape; its kernels fail on
 * demand. */
enum { GAIN_N = 4 };
static bool fail_weight, fail_input;

static pl_status gain_shape(const pl_op_def *def, const char *op, pl_tensor_t *const *in,
                            const void *attrs, pl_op_layout *l) {
    same_shape(def, op, in, attrs, l);
    l->params[0] = (pl_op_param_decl){"w", 1, {pl_tensor_numel(in[0])}, PL_INIT_UNIFORM, 1.0f};
    l->n_params = 1;
    return PL_STATUS_OK;
}
/* check_finite: the kernels write a NaN/inf into what they compute. */
static bool nan_out, inf_dinput, nan_dparam;

static int gain_forward(pl_op_call *c) {
    const float *x = c->in[0];
    float *y = c->out;
    int64_t n = c->in_numel[0];
    for (int64_t i = 0; i < c->samples * n; i++) y[i] = x[i] * c->param[0][i % n];
    if (nan_out && c->sample_offset <= 1 && 1 < c->sample_offset + c->samples)
        y[(1 - c->sample_offset) * n + 2] = NAN; /* sample 1 of the batch, element 2 */
    return 0;
}
static int gain_backward_input(pl_op_call *c) { /* dx (+)= w ⊙ dy */
    if (fail_input) {
        snprintf(c->error, c->error_size, "injected input-gradient failure");
        return 6;
    }
    int64_t n = c->in_numel[0];
    for (int64_t i = 0; i < c->samples * n; i++) {
        float g = c->param[0][i % n] * c->dout[i];
        c->dinput[i] = c->accumulate ? c->dinput[i] + g : g;
    }
    if (inf_dinput) c->dinput[0] = INFINITY;
    return 0;
}
static int gain_backward_weight(pl_op_call *c) { /* dw (+)= Σ x ⊙ dy */
    if (fail_weight) {
        snprintf(c->error, c->error_size, "injected weight-gradient failure");
        return 5;
    }
    const float *x = c->in[0];
    int64_t n = c->in_numel[0];
    if (!c->accumulate_param[0])
        for (int64_t j = 0; j < n; j++) c->dparam[0][j] = 0.0f;
    for (int64_t i = 0; i < c->samples * n; i++) c->dparam[0][i % n] += x[i] * c->dout[i];
    if (nan_dparam) c->dparam[0][3] = NAN;
    return 0;
}
static const pl_op_def GAIN = {
    .name = "gain", .n_inputs = 1, .shape = gain_shape, .forward = {.cpu = gain_forward},
    .backward_input = {{.cpu = gain_backward_input}},
    .backward_weight = {.cpu = gain_backward_weight},
    .backward_input_reads = PL_OP_READS_PARAMS,
    .backward_weight_reads = PL_OP_READS_INPUTS,
};

enum { BF_BATCH = 4, BF_IN = 3 };

/* x [3] → linear fc0 [4] → gain 'flaky' → linear fc1 [2] → mean: fc0's
 * weight gradient waits for the flaky op's input gradient. */
static pl_graph_t *flaky_graph(void) {
    pl_graph_t *g = pl_graph_new(7);
    int64_t s[1] = {BF_IN};
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, s);
    pl_tensor_t *h = pl_linear(g, x, GAIN_N, "fc0");
    h = pl_graph_op(g, &GAIN, &h, 1, NULL, "flaky");
    pl_tensor_t *loss = pl_mean(g, pl_linear(g, h, 2, "fc1"));
    if (!loss || pl_graph_set_loss(g, loss)) {
        printf("FAIL: cannot build the flaky graph: %s\n", pl_last_error());
        exit(1);
    }
    return g;
}

static float bf_data[3][BF_BATCH * BF_IN];

static pl_status bf_step(pl_engine_t *e, int k, bool split) {
    const void *d[1] = {bf_data[k]};
    pl_batch b = {.size = BF_BATCH, .data = d};
    pl_step_result r;
    if (!split) return pl_engine_train_step(e, &b, &r);
    pl_step_options o = {.return_loss = true};
    pl_status st = pl_engine_forward_backward(e, &b, &o, &r);
    return st ? st : pl_engine_optimizer_step(e);
}

/* Every parameter of e, in graph order. */
static int params_of(pl_engine_t *e, pl_graph_t *g, float *out, int cap) {
    int n = 0;
    for (int i = 0; i < pl_graph_num_params(g); i++) {
        const pl_tensor_t *p = pl_graph_param(g, i);
        int64_t k = pl_tensor_numel(p);
        if (n + k > cap || pl_engine_get_param(e, p, out + n, (size_t)k)) return -1;
        n += (int)k;
    }
    return n;
}

static void backward_failure_case(bool fuse, bool weight, bool split) {
    char what[128];
    snprintf(what, sizeof what, "failing backward_%s, fuse_tasks %s%s",
             weight ? "weight" : "input", fuse ? "on" : "off",
             split ? ", forward_backward + optimizer_step" : "");
    printf("%s\n", what);
    pl_runtime_t *rt = cpu_runtime(2);
    pl_graph_t *g = flaky_graph(), *g_ref = flaky_graph();
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = BF_BATCH;
    eo.tiles = 2;
    eo.fuse_tasks = fuse;
    pl_engine_t *e = pl_engine_new(rt, g, &eo), *ref = pl_engine_new(rt, g_ref, &eo);
    if (!e || !ref) {
        printf("FAIL %s: pl_engine_new: %s\n", what, pl_last_error());
        exit(1);
    }
    /* A good step first: AdamW's moments and the step count are not zero. */
    CHECK(bf_step(e, 0, split) == PL_STATUS_OK && bf_step(ref, 0, split) == PL_STATUS_OK,
          "%s: a good step failed: %s", what, pl_last_error());
    enum { CAP = 256 };
    float before[CAP], after[CAP], want[CAP];
    int n = params_of(e, g, before, CAP);
    CHECK(n > 0, "%s: cannot read the parameters: %s", what, pl_last_error());

    fail_weight = weight;
    fail_input = !weight;
    pl_clear_error();
    pl_status st = bf_step(e, 1, split);
    fail_weight = fail_input = false;
    CHECK(st == PL_STATUS_RUNTIME_ERROR && strstr(pl_last_error(), "gain 'flaky'") &&
              strstr(pl_last_error(), weight ? "backward_weight kernel failed (returned 5)"
                                             : "backward_input[0] kernel failed (returned 6)") &&
              strstr(pl_last_error(), "injected"),
          "%s: the step that ran the failing kernel returned %d (want %d), \"%s\"", what,
          (int)st, (int)PL_STATUS_RUNTIME_ERROR, pl_last_error());
    CHECK(pl_engine_steps(e) == 1, "%s: the failed step moved the step count to %lld", what,
          (long long)pl_engine_steps(e));
    CHECK(params_of(e, g, after, CAP) == n && memcmp(before, after, n * sizeof *after) == 0,
          "%s: the failed step changed the parameters", what);

    /* The engine goes on as if the failed step never happened: the same
     * next step as the reference's, bit for bit (moments and step count
     * untouched, the failed pass's gradients not accumulated). */
    pl_clear_error();
    st = bf_step(e, 2, split);
    CHECK(st == PL_STATUS_OK, "%s: the step after the failure: %s", what, pl_last_error());
    CHECK(bf_step(ref, 2, split) == PL_STATUS_OK, "%s: reference step: %s", what,
          pl_last_error());
    CHECK(params_of(e, g, after, CAP) == n && params_of(ref, g_ref, want, CAP) == n &&
              memcmp(after, want, n * sizeof *after) == 0,
          "%s: after the failure, a good step does not give what an engine that never "
          "failed gives (optimizer state, step count or gradients were changed)", what);
    CHECK(pl_engine_steps(e) == 2, "%s: %lld steps after a good one, want 2", what,
          (long long)pl_engine_steps(e));
    pl_engine_free(e);
    pl_engine_free(ref);
    pl_graph_free(g);
    pl_graph_free(g_ref);
    pl_runtime_free(rt);
}

static void test_backward_failure(void) {
    uint64_t s = 5;
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < BF_BATCH * BF_IN; i++)
            bf_data[k][i] = (float)((double)(tu_splitmix64(&s) >> 11) * 0x1.0p-53 - 0.5);
    for (int fuse = 0; fuse < 2; fuse++)
        for (int weight = 0; weight < 2; weight++) backward_failure_case(fuse, weight, false);
    backward_failure_case(true, true, true);
}

/* ---------------------------------- item 13: placement policy outputs */

/* A policy that answers as auto does, then spoils its answer as `mode`
 * says. Every case runs in a child with its own runtime (a budget is a
 * runtime option) on an 8-layer MLP whose model state (2.2 MiB) exceeds
 * the 1 MiB budget, so every iteration evicts. */
typedef enum bad_mode {
    BAD_NONE, BAD_DUP_VICTIM, BAD_RANGE_VICTIM, BAD_NEGATIVE_VICTIM, BAD_COUNT_VICTIMS,
    BAD_OVERRUN_VICTIMS, BAD_NEEDED_VICTIM, BAD_DUP_PREFETCH, BAD_RANGE_PREFETCH,
    BAD_OVERRUN_EMPTY_PREFETCH, BAD_MANY_PREFETCH, BAD_BUDGET_PREFETCH, BAD_TIER,
} bad_mode;
static bad_mode bad;
static int bad_units, bad_calls, bad_needed;
static bool bad_chunk_seen; /* where_to_update was asked about a chunk outside */
static int bad_chunk;        /* [0, n_units/2): the last one */
static const pl_placement_policy *inner;

static int64_t bad_unit_bytes[64];
static int bad_max_prefetch;

static void *bad_init(const pl_placement_info *info) {
    bad_units = info->n_units;
    for (int u = 0; u < info->n_units && u < 64; u++) bad_unit_bytes[u] = info->unit_bytes[u];
    bad_max_prefetch = info->options->max_prefetch;
    return inner->init(info);
}
static void bad_before_step(void *st, int step, const int *needed, int n_needed,
                            const bool *resident, const pl_memory_stats *stats) {
    bad_needed = n_needed > 0 ? needed[0] : -1;
    inner->before_step(st, step, needed, n_needed, resident, stats);
}
static int bad_victims(void *st, int step, int64_t bytes, const bool *resident,
                       int *victims) {
    int n = inner->choose_victims(st, step, bytes, resident, victims);
    if (n < 1) return n;
    bad_calls++;
    switch (bad) {
    case BAD_DUP_VICTIM: victims[n] = victims[0]; return n + 1;
    case BAD_RANGE_VICTIM: victims[0] = bad_units + 3; return n;
    case BAD_NEGATIVE_VICTIM: return -1;
    case BAD_COUNT_VICTIMS: return bad_units + 1;
    case BAD_OVERRUN_VICTIMS: /* twice the capacity, every unit twice */
        for (int i = 0; i < 2 * bad_units; i++) victims[i] = i % bad_units;
        return 2 * bad_units;
    case BAD_NEEDED_VICTIM:
        if (bad_needed >= 0) victims[0] = bad_needed;
        return n;
    default: return n;
    }
}
static int bad_prefetch(void *st, int step, int64_t budget, const bool *resident,
                        int *units) {
    if (bad == BAD_OVERRUN_EMPTY_PREFETCH) { /* nothing, but entries past units[] */
        bad_calls++;
        units[bad_units] = units[bad_units + 1] = 0;
        return 0;
    }
    if (bad == BAD_MANY_PREFETCH) { /* one unit more than max_prefetch */
        bad_calls++;
        for (int i = 0; i <= bad_max_prefetch; i++) units[i] = i;
        return bad_max_prefetch + 1;
    }
    if (bad == BAD_BUDGET_PREFETCH) { /* units not resident beyond the budget */
        int n = 0;
        int64_t bytes = 0;
        for (int u = 0; u < bad_units && u < 64 && n < bad_max_prefetch; u++)
            if (!resident[u]) units[n++] = u, bytes += bad_unit_bytes[u];
        if (bytes > budget) bad_calls++;
        return bytes > budget ? n : 0;
    }
    int n = inner->prefetch(st, step, budget, resident, units);
    if (n < 1) return n;
    bad_calls++;
    if (bad == BAD_DUP_PREFETCH) units[n++] = units[0];
    if (bad == BAD_RANGE_PREFETCH) units[0] = -7;
    return n;
}
/* Asked only about a chunk's update (its gradient's norm too, with
 * clipping): once also about clipping's combining task and tied sums as
 * chunk -1, and data parallelism's buckets by their index. */
static pl_tier bad_where(void *st, int chunk) {
    if (chunk < 0 || chunk >= bad_units / 2) bad_chunk_seen = true, bad_chunk = chunk;
    if (bad != BAD_TIER) return inner->where_to_update(st, chunk);
    bad_calls++;
    return (pl_tier)7;
}
static void bad_free(void *st) { inner->free(st); }

static const struct {
    bad_mode mode;
    const char *name, *frag;
} bad_cases[] = {
    {BAD_NONE, "well-behaved", NULL},
    {BAD_DUP_VICTIM, "dup-victim", "twice"},
    {BAD_RANGE_VICTIM, "range-victim", "outside [0, "},
    {BAD_NEGATIVE_VICTIM, "negative-victims", "returned a count of -1"},
    {BAD_COUNT_VICTIMS, "count-victims", "outside [0, "},
    {BAD_OVERRUN_VICTIMS, "overrun-victims", "entries into victims[]"},
    {BAD_NEEDED_VICTIM, "needed-victim", "which this step needs"},
    {BAD_DUP_PREFETCH, "dup-prefetch", "twice"},
    {BAD_RANGE_PREFETCH, "range-prefetch", "returned unit -7"},
    /* Once let through: a count of 0 skipped the prefetch answer's check. */
    {BAD_OVERRUN_EMPTY_PREFETCH, "overrun-empty-prefetch", "entries into units[]"},
    /* Once let through, and StarPU was left fetching into a full compute
     * tier (an engine's free then hung with ASan's slow allocations). */
    {BAD_MANY_PREFETCH, "many-prefetch", "returned 5 units, more than max_prefetch (4)"},
    {BAD_BUDGET_PREFETCH, "budget-prefetch", "bytes not on the compute tier, more than"},
    {BAD_TIER, "tier", "returned 7, which is no pl_tier"},
};
static int bad_case;

static void placement_child(void) {
    bad = bad_cases[bad_case].mode;
    const char *name = bad_cases[bad_case].name, *frag = bad_cases[bad_case].frag;
    bool prefetching = bad == BAD_DUP_PREFETCH || bad == BAD_RANGE_PREFETCH ||
                       bad == BAD_OVERRUN_EMPTY_PREFETCH || bad == BAD_MANY_PREFETCH ||
                       bad == BAD_BUDGET_PREFETCH;
    inner = pl_placement_auto();
    pl_placement_policy policy = {.name = name, .init = bad_init,
                                  .before_step = bad_before_step,
                                  .choose_victims = bad_victims, .prefetch = bad_prefetch,
                                  .where_to_update = bad_where, .free = bad_free};
    char dir[256];
    snprintf(dir, sizeof dir, "%s/offload_%s", tu_scratch_dir(), name);
    if (mkdir(dir, 0700) != 0) {
        printf("FAIL %s: mkdir %s\n", name, dir);
        return;
    }
    pl_runtime_options ro = pl_runtime_options_default();
    ro.device = PL_DEVICE_CPU;
    ro.cpu_workers = 1;
    ro.compute_budget_mb = 1;
    ro.offload_dir = dir;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    CHECK(rt, "%s: pl_runtime_new: %s", name, pl_last_error());
    if (!rt) return;
    enum { W = 128, LAYERS = 8, B = 4 };
    pl_graph_t *g = pl_graph_new(3);
    int64_t s[1] = {W};
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, s);
    pl_tensor_t *h = x;
    for (int l = 0; l < LAYERS; l++) {
        char nm[16];
        snprintf(nm, sizeof nm, "fc%d", l);
        h = pl_linear(g, h, W, nm);
    }
    pl_graph_set_loss(g, pl_mean(g, h));
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = B;
    eo.tiles = 1;
    eo.chunk_elems = (size_t)W * W;
    eo.placement.policy = &policy;
    eo.placement.max_prefetch = prefetching ? 4 : 0;
    eo.max_norm = 1.0f; /* clipping's tasks: where_to_update must not hear of them */
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK(e, "%s: pl_engine_new: %s", name, pl_last_error());
    static float data[B * W];
    for (int i = 0; i < B * W; i++) data[i] = (float)(i % 7) * 0.1f;
    const void *d[1] = {data};
    pl_batch b = {.size = B, .data = d};
    pl_status st = PL_STATUS_OK;
    /* Two steps: the warm-up and a steady one (prefetching starts then);
     * an optimizer step's failure is reported by the next call. */
    for (int k = 0; e && k < 3 && !st; k++) {
        pl_step_result r;
        pl_clear_error();
        st = pl_engine_train_step(e, &b, &r);
    }
    pl_engine_free(e);
    CHECK(bad_calls > 0, "%s: the policy's %s was never called", name,
          prefetching ? "prefetch" : bad == BAD_TIER ? "where_to_update" : "choose_victims");
    CHECK(!bad_chunk_seen, "%s: where_to_update was asked about chunk %d, "
          "outside [0, %d)", name, bad_chunk, bad_units / 2);
    if (!frag)
        CHECK(st == PL_STATUS_OK, "%s: a well-behaved policy failed: %s", name,
              pl_last_error());
    else
        CHECK(st == PL_STATUS_RUNTIME_ERROR && strstr(pl_last_error(), name) &&
                  strstr(pl_last_error(), frag),
              "%s: a bad answer gave status %d, \"%s\" (want a failed step naming the "
              "policy and \"%s\")", name, (int)st, pl_last_error(), frag);
    if (st) printf("  ok  %s -> %s\n", name, pl_last_error());
    pl_graph_free(g);
    pl_runtime_free(rt);
}

static void test_placement_outputs(void) {
    if (!tu_scratch_create("api_misuse_placement")) {
        printf("FAIL: cannot create a scratch directory\n");
        tu_failures++;
        return;
    }
    int n = (int)(sizeof bad_cases / sizeof bad_cases[0]);
    for (bad_case = 0; bad_case < n; bad_case++) {
        char what[96];
        snprintf(what, sizeof what, "placement policy '%s'", bad_cases[bad_case].name);
        isolated(what, placement_child, 120);
    }
    tu_remove_tree(tu_scratch_dir());
}

/* --------------------------------------- item 12: gradcheck and *_reads */

#define SHAPES(...) ((const int64_t(*)[PL_MAX_DIMS])(int64_t[][PL_MAX_DIMS]){__VA_ARGS__})

/* y = x + b (a parameter of x's shape): neither gradient reads anything
 * but dout, and these kernels declare nothing and insist on it, as the
 * engine's tasks give them nothing else. */
static pl_status shift_shape(const pl_op_def *def, const char *op, pl_tensor_t *const *in,
                             const void *attrs, pl_op_layout *l) {
    same_shape(def, op, in, attrs, l);
    l->params[0] = (pl_op_param_decl){"b", 1, {pl_tensor_numel(in[0])}, PL_INIT_UNIFORM, 1.0f};
    l->n_params = 1;
    return PL_STATUS_OK;
}
static int shift_forward(pl_op_call *c) {
    const float *x = c->in[0];
    float *y = c->out;
    int64_t n = c->in_numel[0];
    for (int64_t i = 0; i < c->samples * n; i++) y[i] = x[i] + c->param[0][i % n];
    return 0;
}
static int undeclared_given(pl_op_call *c) {
    const char *got = c->in[0] ? "in[0]" : c->param[0] ? "param[0]" : c->out ? "out"
                      : c->saved ? "saved" : NULL;
    if (got) snprintf(c->error, c->error_size, "got %s, which it did not declare", got);
    return got != NULL;
}
static int shift_backward_input(pl_op_call *c) {
    if (undeclared_given(c)) return 9;
    for (int64_t i = 0; i < c->samples * c->in_numel[0]; i++)
        c->dinput[i] = (c->accumulate ? c->dinput[i] : 0.0f) + c->dout[i];
    return 0;
}
static int shift_backward_weight(pl_op_call *c) {
    if (undeclared_given(c)) return 9;
    int64_t n = c->in_numel[0];
    if (!c->accumulate_param[0])
        for (int64_t j = 0; j < n; j++) c->dparam[0][j] = 0.0f;
    for (int64_t i = 0; i < c->samples * n; i++) c->dparam[0][i % n] += c->dout[i];
    return 0;
}

static void test_gradcheck_reads(void) {
    int nd[1] = {1};
    pl_gradcheck_result r;
    /* Declares what it reads: passes. */
    pl_status st = pl_gradcheck(&GAIN, NULL, 1, nd, SHAPES({4}), NULL, NULL, &r);
    CHECK(st == PL_STATUS_OK, "gain, flags declared: %s", pl_last_error());
    /* Reads nothing undeclared and gets nothing undeclared (NULL), as in
     * the engine. */
    pl_op_def shift = {.name = "shift", .n_inputs = 1, .shape = shift_shape,
                       .forward = {.cpu = shift_forward},
                       .backward_input = {{.cpu = shift_backward_input}},
                       .backward_weight = {.cpu = shift_backward_weight}};
    pl_clear_error();
    st = pl_gradcheck(&shift, NULL, 1, nd, SHAPES({4}), NULL, NULL, &r);
    CHECK(st == PL_STATUS_OK && r.checked >= 12,
          "a kernel reading only dout got buffers it did not declare: %d, %s", (int)st,
          pl_last_error());
    /* backward_input reads the parameter without PL_OP_READS_PARAMS: the
     * engine would hand it c->param[0] == NULL. */
    pl_op_def d = GAIN;
    d.backward_input_reads = 0;
    pl_clear_error();
    st = pl_gradcheck(&d, NULL, 1, nd, SHAPES({4}), NULL, NULL, &r);
    CHECK(st == PL_STATUS_INVALID_ARGUMENT && strstr(pl_last_error(), "gain") &&
              strstr(pl_last_error(), "backward_input[0]") &&
              strstr(pl_last_error(), "PL_OP_READS_PARAMS"),
          "an input gradient reading undeclared parameters: %d, \"%s\"", (int)st,
          pl_last_error());
    if (st) printf("  ok  -> %s\n", pl_last_error());
    /* backward_weight reads the input without PL_OP_READS_INPUTS. */
    d = GAIN;
    d.backward_weight_reads = 0;
    pl_clear_error();
    st = pl_gradcheck(&d, NULL, 1, nd, SHAPES({4}), NULL, NULL, &r);
    CHECK(st == PL_STATUS_INVALID_ARGUMENT && strstr(pl_last_error(), "backward_weight") &&
              strstr(pl_last_error(), "PL_OP_READS_INPUTS"),
          "a weight gradient reading undeclared inputs: %d, \"%s\"", (int)st,
          pl_last_error());
    if (st) printf("  ok  -> %s\n", pl_last_error());
    /* The built-in cross-entropy reads its int32 labels (an input) and
     * saved probabilities: without PL_OP_READS_INPUTS the labels are missed. */
    d = pl_op_cross_entropy;
    d.backward_input_reads &= ~(unsigned)PL_OP_READS_INPUTS;
    d.loss_forward = (pl_op_kernels){0};
    pl_clear_error();
    st = pl_gradcheck(&d, NULL, 2, (int[]){1, 0}, SHAPES({6}, {0}),
                      (pl_dtype[]){PL_DTYPE_F32, PL_DTYPE_I32},
                      &(pl_gradcheck_options){.samples = 3, .eps = 1e-3, .tolerance = 2e-2,
                                              .seed = 1, .int_range = 6},
                      &r);
    CHECK(st == PL_STATUS_INVALID_ARGUMENT && strstr(pl_last_error(), "PL_OP_READS_INPUTS"),
          "cross-entropy without PL_OP_READS_INPUTS: %d, \"%s\"", (int)st, pl_last_error());
}

/* ------------------------------------------- item 15: duplicate names */

/* A failed add: NULL, INVALID_ARGUMENT and a message naming `name`. */
static void expect_refused(int line, const char *what, const pl_tensor_t *t, const char *frag1,
                           const char *frag2) {
    tu_expect_error_at(__FILE__, line, what, t ? PL_STATUS_OK : pl_last_status(),
                       PL_STATUS_INVALID_ARGUMENT, frag1, frag2);
}

static void test_duplicate_names(void) {
    pl_graph_t *g = pl_graph_new(1);
    int64_t s4[1] = {4};
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, s4);
    pl_tensor_t *sum = pl_add(g, x, x, "sum");
    CHECK(x && sum, "building: %s", pl_last_error());
    pl_clear_error();
    expect_refused(__LINE__, "a second input 'x'", pl_graph_input(g, "x", PL_DTYPE_F32, 1, s4),
                   "'x' is already taken", "input 'x'");
    pl_clear_error();
    expect_refused(__LINE__, "an input named like an op", pl_graph_input(g, "sum", PL_DTYPE_I32, 0, NULL),
                   "'sum' is already taken", "pl_add 'sum'");
    pl_clear_error();
    expect_refused(__LINE__, "a second op 'sum'", pl_add(g, sum, x, "sum"),
                   "name 'sum' is already taken", "pl_add 'sum'");
    pl_clear_error();
    expect_refused(__LINE__, "an op named like an input", pl_add(g, sum, x, "x"),
                   "name 'x' is already taken", "input 'x'");
    pl_clear_error();
    pl_tensor_t *fc = pl_linear(g, sum, 4, "fc");
    expect_refused(__LINE__, "a second pl_linear 'fc'", pl_linear(g, fc, 4, "fc"),
                   "'fc.weight' is already taken", NULL);
    pl_clear_error();
    expect_refused(__LINE__, "an op named like a parameter", pl_add(g, fc, fc, "fc.weight"),
                   "'fc.weight' is already taken", "parameter 'fc.weight' of pl_linear 'fc'");
    pl_clear_error();
    expect_refused(__LINE__, "a parameter named like another", pl_layernorm(g, fc, "fc"),
                   "'fc.weight' is already taken by pl_linear 'fc'", NULL);
    /* The refusals left the graph as it was: each name finds its tensor. */
    CHECK(pl_graph_find(g, "x") == x && pl_graph_find(g, "sum") == sum &&
              pl_graph_find(g, "fc") == fc,
          "after the refusals pl_graph_find finds other tensors");
    /* A generated name a user took ("relu4" is op 4's generated name)
     * gets a suffix instead of a second tensor of that name. */
    pl_tensor_t *mine = pl_add(g, fc, fc, "relu4"); /* op 3 */
    pl_tensor_t *gen = pl_relu(g, mine);            /* op 4: "relu4" taken */
    CHECK(mine && gen && pl_graph_find(g, "relu4") == mine &&
              strcmp(pl_tensor_name(gen), "relu4") != 0 &&
              pl_graph_find(g, pl_tensor_name(gen)) == gen,
          "a generated name took a user's: '%s' (%s)", gen ? pl_tensor_name(gen) : "NULL",
          pl_last_error());
    pl_graph_free(g);
}

/* ------------------------------------ item 16: a schedule's items room */

/* GPipe with W items listed after the backwards (p 2, v 1, m 2: exactly
 * the capacity 3·m·v = 6), then `extra` more items written directly. */
static int sched_extra;
static int overrun_build(const pl_schedule_def *def, int p, int v, int m, int stage,
                         pl_work_item *items, int capacity, void *user) {
    (void)def, (void)p, (void)v, (void)stage, (void)user;
    int n = 0;
    for (int mb = 0; mb < m; mb++) items[n++] = (pl_work_item){PL_WORK_F, mb, 0};
    for (int mb = m - 1; mb >= 0; mb--) items[n++] = (pl_work_item){PL_WORK_B, mb, 0};
    for (int mb = 0; mb < m; mb++) items[n++] = (pl_work_item){PL_WORK_W, mb, 0};
    for (int k = 0; k < sched_extra; k++) items[n + k] = (pl_work_item){PL_WORK_F, 0, 0};
    return n < capacity ? n : capacity; /* the count does not tell */
}
static int append_build(const pl_schedule_def *def, int p, int v, int m, int stage,
                        pl_work_item *items, int capacity, void *user) {
    (void)def, (void)p, (void)v, (void)stage, (void)user;
    int n = 0;
    for (int k = 0; k < 3; k++)
        for (int mb = 0; mb < m; mb++)
            pl_schedule_append(items, capacity, &n, (pl_work_item){PL_WORK_F, mb, 0});
    for (int mb = m - 1; mb >= 0; mb--)
        pl_schedule_append(items, capacity, &n, (pl_work_item){PL_WORK_B, mb, 0});
    return n;
}

static void schedule_overrun_child(void) {
    pl_schedule_def d = {.name = "overrun", .build = overrun_build};
    sched_extra = 0;
    pl_status st = pl_schedule_validate(&d, 2, 1, 2);
    CHECK(st == PL_STATUS_OK, "the schedule within its capacity: %s", pl_last_error());
    sched_extra = 3;
    pl_clear_error();
    st = pl_schedule_validate(&d, 2, 1, 2);
    tu_expect_error(__LINE__, "a build writing 3 items past its capacity", st,
                    PL_STATUS_INVALID_ARGUMENT, "schedule 'overrun'",
                    "wrote at least 9 items for stage 0, past the 6");
}

static void test_schedule_capacity(void) {
    /* The overrun used to write past the heap allocation: in a child. */
    isolated("a schedule writing past its capacity", schedule_overrun_child, 60);
    /* pl_schedule_append: writes while there is room, counts past it. */
    pl_work_item buf[3] = {{0}}, guard = {PL_WORK_W, 77, 77};
    buf[2] = guard;
    int n = 0;
    bool a = pl_schedule_append(buf, 2, &n, (pl_work_item){PL_WORK_F, 0, 0});
    bool b = pl_schedule_append(buf, 2, &n, (pl_work_item){PL_WORK_B, 1, 0});
    bool c = pl_schedule_append(buf, 2, &n, (pl_work_item){PL_WORK_F, 5, 5});
    CHECK(a && b && !c && n == 3 && buf[1].kind == PL_WORK_B && buf[1].microbatch == 1 &&
              buf[2].microbatch == 77,
          "pl_schedule_append: %d %d %d, n %d, past the capacity %d", a, b, c, n,
          buf[2].microbatch);
    /* A build appending more than its room is refused by its count. */
    pl_schedule_def d = {.name = "appends", .build = append_build};
    pl_clear_error();
    tu_expect_error(__LINE__, "a build appending past its capacity",
                    pl_schedule_validate(&d, 2, 1, 2), PL_STATUS_INVALID_ARGUMENT,
                    "schedule 'appends'", "stage 0 has 8 items, more than the 6");
}

/* ------------------------------------------------- item 14: free order */

/* stderr of the calls between capture_begin and capture_end, in a file. */
static char cap_path[64];
static int cap_saved = -1;
static void capture_begin(void) {
    snprintf(cap_path, sizeof cap_path, "/tmp/api_misuse_stderr_XXXXXX");
    int fd = mkstemp(cap_path);
    fflush(stderr);
    cap_saved = dup(2);
    if (fd >= 0) dup2(fd, 2), close(fd);
}
/* Whether what was written mentions frag (and restores stderr). */
static bool capture_end(const char *frag) {
    fflush(stderr);
    if (cap_saved >= 0) dup2(cap_saved, 2), close(cap_saved);
    cap_saved = -1;
    size_t len = 0;
    char *text = tu_read_file(cap_path, &len);
    unlink(cap_path);
    bool found = text && strstr(text, frag);
    if (text) printf("  stderr: %s", text);
    free(text);
    return found;
}

typedef struct fo_model {
    pl_runtime_t *rt;
    pl_graph_t *g;
    pl_engine_t *e;
} fo_model;

static fo_model fo_build(void) {
    fo_model m = {.rt = cpu_runtime(1), .g = flaky_graph()};
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = BF_BATCH;
    m.e = pl_engine_new(m.rt, m.g, &eo);
    if (!m.e) {
        printf("FAIL: pl_engine_new: %s\n", pl_last_error());
        exit(1);
    }
    return m;
}

/* The engine still trains (its graph and runtime were not freed). */
static void fo_step_works(const fo_model *m, const char *what) {
    CHECK(bf_step(m->e, 0, false) == PL_STATUS_OK, "%s: a step after the refused free: %s",
          what, pl_last_error());
}

static void fo_engine_twice(void) {
    fo_model m = fo_build();
    pl_engine_free(m.e);
    capture_begin();
    pl_engine_free(m.e);
    CHECK(capture_end("pl_engine_free") && strstr(pl_last_error(), "not a live engine"),
          "an engine freed twice: \"%s\"", pl_last_error());
    pl_graph_free(m.g);
    pl_runtime_free(m.rt);
}

static void fo_graph_twice(void) {
    pl_graph_t *g = flaky_graph();
    pl_graph_free(g);
    capture_begin();
    pl_graph_free(g);
    CHECK(capture_end("pl_graph_free") && strstr(pl_last_error(), "not a live graph"),
          "a graph freed twice: \"%s\"", pl_last_error());
}

static void fo_graph_first(void) {
    fo_model m = fo_build();
    capture_begin();
    pl_graph_free(m.g);
    CHECK(capture_end("pl_graph_free") && strstr(pl_last_error(), "free them first"),
          "a graph freed before its engine: \"%s\"", pl_last_error());
    fo_step_works(&m, "graph freed first");
    pl_engine_free(m.e);
    pl_clear_error();
    pl_graph_free(m.g); /* now it goes */
    CHECK(!*pl_last_error(), "the graph's free after its engine's: %s", pl_last_error());
    pl_runtime_free(m.rt);
}

static void fo_runtime_first(void) {
    fo_model m = fo_build();
    capture_begin();
    pl_runtime_free(m.rt);
    CHECK(capture_end("pl_runtime_free") && strstr(pl_last_error(), "free them first"),
          "a runtime freed before its engine: \"%s\"", pl_last_error());
    fo_step_works(&m, "runtime freed first");
    pl_engine_free(m.e);
    pl_graph_free(m.g);
    pl_clear_error();
    pl_runtime_free(m.rt);
    CHECK(!*pl_last_error(), "the runtime's free after its engine's: %s", pl_last_error());
}

static void fo_runtime_twice(void) {
    pl_runtime_t *rt = cpu_runtime(1);
    pl_runtime_free(rt);
    capture_begin();
    pl_runtime_free(rt);
    CHECK(capture_end("pl_runtime_free") && strstr(pl_last_error(), "not the live runtime"),
          "a runtime freed twice: \"%s\"", pl_last_error());
}

static void test_free_order(void) {
    isolated("an engine freed twice", fo_engine_twice, 60);
    isolated("a graph freed twice", fo_graph_twice, 60);
    isolated("a graph freed before its engine", fo_graph_first, 60);
    isolated("a runtime freed before its engine", fo_runtime_first, 60);
    isolated("a runtime freed twice", fo_runtime_twice, 60);
}

/* ------------------------------------------------ item 17: check_finite */

enum { CF_BATCH = 4, CF_IN = 4 };

/* x [4] → linear fc1 [4] → gain 'g1' → relu → linear fc2 [3] → cross
 * entropy: ReLU turns a NaN into 0, so the loss alone would not show it. */
static pl_graph_t *cf_graph(void) {
    pl_graph_t *g = pl_graph_new(11);
    int64_t s[1] = {CF_IN};
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, s);
    pl_tensor_t *y = pl_graph_input(g, "y", PL_DTYPE_I32, 0, NULL);
    pl_tensor_t *h = pl_linear(g, x, GAIN_N, "fc1");
    h = pl_relu(g, pl_graph_op(g, &GAIN, &h, 1, NULL, "g1"));
    pl_tensor_t *loss = pl_cross_entropy(g, pl_linear(g, h, 3, "fc2"), y);
    if (!loss || pl_graph_set_loss(g, loss)) {
        printf("FAIL: cannot build the check_finite graph: %s\n", pl_last_error());
        exit(1);
    }
    return g;
}

static float cf_x[CF_BATCH * CF_IN];
static int32_t cf_y[CF_BATCH] = {0, 1, 2, 1};

static pl_status cf_step(pl_engine_t *e, bool poison_input) {
    float x[CF_BATCH * CF_IN];
    memcpy(x, cf_x, sizeof x);
    if (poison_input) x[3 * CF_IN + 1] = NAN; /* sample 3 (the second tile), element 1 */
    const void *d[2] = {x, cf_y};
    pl_batch b = {.size = CF_BATCH, .data = d};
    pl_step_result r;
    return pl_engine_train_step(e, &b, &r);
}

static void check_finite_case(const char *what, bool *flag, const char *frag1,
                              const char *frag2) {
    printf("check_finite: %s\n", what);
    pl_runtime_t *rt = cpu_runtime(2);
    pl_graph_t *g = cf_graph(), *g_ref = cf_graph();
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = CF_BATCH;
    eo.tiles = 2;
    eo.check_finite = true;
    pl_engine_t *e = pl_engine_new(rt, g, &eo), *ref = pl_engine_new(rt, g_ref, &eo);
    if (!e || !ref) {
        printf("FAIL %s: pl_engine_new: %s\n", what, pl_last_error());
        exit(1);
    }
    CHECK(cf_step(e, false) == PL_STATUS_OK && cf_step(ref, false) == PL_STATUS_OK,
          "%s: a clean step failed: %s", what, pl_last_error());
    enum { CAP = 256 };
    float before[CAP], after[CAP], want[CAP];
    int n = params_of(e, g, before, CAP);
    if (flag) *flag = true;
    pl_clear_error();
    pl_status st = cf_step(e, !flag);
    if (flag) *flag = false;
    CHECK(st == PL_STATUS_RUNTIME_ERROR && strstr(pl_last_error(), "check_finite") &&
              strstr(pl_last_error(), frag1) && strstr(pl_last_error(), frag2),
          "%s: status %d, \"%s\" (want a failed step naming \"%s\" and \"%s\")", what,
          (int)st, pl_last_error(), frag1, frag2);
    if (st) printf("  ok  -> %s\n", pl_last_error());
    CHECK(pl_engine_steps(e) == 1, "%s: the stopped step moved the step count to %lld", what,
          (long long)pl_engine_steps(e));
    CHECK(params_of(e, g, after, CAP) == n && memcmp(before, after, n * sizeof *after) == 0,
          "%s: the stopped step changed the parameters", what);
    /* Training goes on as if the stopped step had not been made. */
    CHECK(cf_step(e, false) == PL_STATUS_OK && cf_step(ref, false) == PL_STATUS_OK,
          "%s: a clean step after the stop failed: %s", what, pl_last_error());
    CHECK(params_of(e, g, after, CAP) == n && params_of(ref, g_ref, want, CAP) == n &&
              memcmp(after, want, n * sizeof *after) == 0,
          "%s: after the stop, a clean step differs from an engine that never stopped", what);
    pl_engine_free(e);
    pl_engine_free(ref);
    pl_graph_free(g);
    pl_graph_free(g_ref);
    pl_runtime_free(rt);
}

static void test_check_finite(void) {
    uint64_t s = 9;
    for (int i = 0; i < CF_BATCH * CF_IN; i++)
        cf_x[i] = (float)((double)(tu_splitmix64(&s) >> 11) * 0x1.0p-53 - 0.5);
    check_finite_case("a NaN in the batch", NULL, "input 'x'", "sample 3, element 1: nan");
    check_finite_case("an op's output", &nan_out, "the output of gain 'g1'",
                      "sample 1, element 2");
    check_finite_case("an input gradient", &inf_dinput,
                      "gradient of 'fc1' that the backward pass of gain 'g1' wrote", "inf");
    check_finite_case("a parameter gradient", &nan_dparam,
                      "gradient of parameter 'g1.w' that the backward pass of gain 'g1'",
                      "element 3: nan");
    /* Off (the default), the same batch trains on: the check is opt-in. */
    pl_runtime_t *rt = cpu_runtime(2);
    pl_graph_t *g = cf_graph();
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = CF_BATCH;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK(e && !eo.check_finite && cf_step(e, true) == PL_STATUS_OK,
          "without check_finite a NaN batch failed the step: %s", pl_last_error());
    pl_engine_free(e);
    pl_graph_free(g);
    pl_runtime_free(rt);
}

/* ------------------------------------------------------------------ main */

static const struct {
    const char *name;
    void (*fn)(void);
} sections[] = {
    {"backward_failure", test_backward_failure},
    {"placement_outputs", test_placement_outputs},
    {"gradcheck_reads", test_gradcheck_reads},
    {"duplicate_names", test_duplicate_names},
    {"schedule_capacity", test_schedule_capacity},
    {"free_order", test_free_order},
    {"check_finite", test_check_finite},
};

int main(int argc, char **argv) {
    int n = (int)(sizeof sections / sizeof sections[0]), ran = 0;
    for (int i = 0; i < n; i++) {
        if (argc > 1 && strcmp(argv[1], sections[i].name) != 0) continue;
        char what[64];
        snprintf(what, sizeof what, "api_misuse %s", sections[i].name);
        tu_time_limit(300, what);
        sections[i].fn();
        ran++;
    }
    if (!ran) {
        printf("FAIL: no section '%s'\n", argc > 1 ? argv[1] : "");
        return 1;
    }
    if (tu_failures) {
        printf("FAIL: %d API misuse check(s) failed\n", tu_failures);
        return 1;
    }
    printf("api_misuse: all checks passed\n");
    return 0;
}
