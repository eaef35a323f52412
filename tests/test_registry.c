/* The registries of pipeline schedules and placement policies
 * (pleiades/schedule.h, placement.h), public API only.
 *
 * 1. The built-ins, by name and in listing order: schedules 1f1b,
 *    interleaved, zb-h1, gpipe, zbv (the first three the public defs
 *    pl_schedule_1f1b, ...); policies static, auto, cpu, cuda, lru (the
 *    first two pl_placement_static() and pl_placement_auto()).
 * 2. The CLI (its path as argument) lists the registry's names: `train
 *    --help` says "--schedule NAME     none, 1f1b, interleaved, zb-h1,
 *    gpipe or zbv (default none)" and "--placement NAME    static, auto, cpu,
 *    cuda or lru; needs --budget-mb", each name list built here from
 *    pl_schedule_at / pl_placement_at; an unknown name is refused (exit
 *    2) with "expected one of" and the same names.
 * 3. Refusals, each INVALID_ARGUMENT with its message (strstr): a NULL
 *    def or policy, a NULL or empty name, the schedule name "none", a
 *    schedule without build, a built-in's name ("gpipe", "lru": "already
 *    registered (a built-in)"), a name registered twice ("registered
 *    before"); find with NULL or an unknown name ("no schedule named
 *    'nosuch' (registered: 1f1b, ..."). None of them changes the
 *    listing.
 * 4. Registered by name, run through the engine: a user schedule
 *    ("test-fill-drain": all forwards, then all backwards, oldest first)
 *    and a user policy ("test-highest": evicts the resident units the
 *    step does not need, highest unit first) are found with
 *    pl_schedule_find / pl_placement_find and listed last; a GPT (V=256
 *    T=32 C=64 L=4, 2 stages, 4 microbatches, chunks of 16 Ki floats)
 *    trains 3 steps with both under a 1 MiB compute budget with a disk
 *    tier, and with neither but the built-in "auto" policy, found by
 *    name: the losses and every parameter are BIT FOR BIT equal (a
 *    schedule only reorders tasks, placement only moves data), the
 *    user's build ran for each stage and its policy chose victims.
 *
 * Exit status 0 on success; every failed check prints a FAIL line. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "pleiades.h"
#include "test_util.h"

enum { V = 256, T = 32, C = 64, L = 4, NH = 4, BATCH = 8, M = 4, P = 2, WORKERS = 2,
       STEPS = 3, BUDGET_MB = 1 };
#define CHUNK_ELEMS ((size_t)1 << 14)
#define SEED 4321

/* ---------------------------------------------------- the user schedule */

static int fill_drain_builds; /* stages built, by the engine or validate */

static int fill_drain_build(const pl_schedule_def *def, int p, int v, int m, int stage,
                            pl_work_item *items, int capacity, void *user) {
    (void)def, (void)p, (void)v, (void)stage, (void)user;
    if (capacity < 2 * m) return -1;
    fill_drain_builds++;
    int n = 0;
    for (int mb = 0; mb < m; mb++) items[n++] = (pl_work_item){PL_WORK_F, mb, 0};
    for (int mb = 0; mb < m; mb++) items[n++] = (pl_work_item){PL_WORK_B, mb, 0};
    return n;
}

static const pl_schedule_def fill_drain = {.name = "test-fill-drain",
                                           .build = fill_drain_build};

/* --------------------------------------------------- the user policy */

typedef struct highest {
    int n;
    int64_t *bytes;
    bool *keep; /* needed by the step (before_step) */
} highest;

static int highest_victims; /* units it chose, over every call */

static void highest_free(void *state) {
    highest *s = state;
    if (!s) return;
    free(s->bytes);
    free(s->keep);
    free(s);
}

static void *highest_init(const pl_placement_info *info) {
    highest *s = tu_xmalloc(sizeof *s);
    s->n = info->n_units;
    s->bytes = tu_xmalloc(((size_t)s->n + 1) * sizeof *s->bytes);
    s->keep = tu_xmalloc(((size_t)s->n + 1) * sizeof *s->keep);
    for (int u = 0; u < s->n; u++) s->bytes[u] = info->unit_bytes[u], s->keep[u] = false;
    return s;
}

static void highest_before_step(void *state, int step, const int *needed, int n_needed,
                                const bool *resident, const pl_memory_stats *stats) {
    (void)step, (void)resident, (void)stats;
    highest *s = state;
    for (int u = 0; u < s->n; u++) s->keep[u] = false;
    for (int i = 0; i < n_needed; i++)
        if (needed[i] >= 0 && needed[i] < s->n) s->keep[needed[i]] = true;
}

static int highest_choose_victims(void *state, int step, int64_t bytes,
                                  const bool *resident, int *victims) {
    (void)step;
    highest *s = state;
    int k = 0;
    int64_t freed = 0;
    for (int u = s->n - 1; u >= 0 && freed < bytes; u--)
        if (resident[u] && !s->keep[u]) victims[k++] = u, freed += s->bytes[u];
    highest_victims += k;
    return k;
}

static const pl_placement_policy highest_policy = {
    .name = "test-highest", .init = highest_init, .before_step = highest_before_step,
    .choose_victims = highest_choose_victims, .free = highest_free};

/* --------------------------------------------------------- 1. built-ins */

static const char *const SCHEDULES[] = {"1f1b", "interleaved", "zb-h1", "gpipe", "zbv"};
static const char *const POLICIES[] = {"static", "auto", "cpu", "cuda", "lru"};
#define N_SCHEDULES ((int)(sizeof SCHEDULES / sizeof *SCHEDULES))
#define N_POLICIES ((int)(sizeof POLICIES / sizeof *POLICIES))

static void test_builtins(void) {
    printf("built-ins\n");
    CHECK(pl_schedule_count() == N_SCHEDULES, "%d schedules, expected %d",
          pl_schedule_count(), N_SCHEDULES);
    for (int i = 0; i < N_SCHEDULES; i++) {
        const pl_schedule_def *d = pl_schedule_at(i);
        CHECK(d && strcmp(d->name, SCHEDULES[i]) == 0, "schedule %d is '%s', expected '%s'",
              i, d ? d->name : "(NULL)", SCHEDULES[i]);
        CHECK(pl_schedule_find(SCHEDULES[i]) == d, "find('%s') is not at(%d)", SCHEDULES[i],
              i);
    }
    CHECK(pl_schedule_find("1f1b") == &pl_schedule_1f1b &&
              pl_schedule_find("interleaved") == &pl_schedule_interleaved &&
              pl_schedule_find("zb-h1") == &pl_schedule_zb_h1,
          "the registry's 1f1b/interleaved/zb-h1 are the public defs");
    CHECK(pl_schedule_at(-1) == NULL && pl_schedule_at(N_SCHEDULES) == NULL,
          "pl_schedule_at outside [0, count) is NULL");
    CHECK(pl_schedule_validate(pl_schedule_find("gpipe"), 4, 1, 2) == PL_STATUS_OK,
          "gpipe p=4 m=2: %s", pl_last_error());

    CHECK(pl_placement_count() == N_POLICIES, "%d policies, expected %d",
          pl_placement_count(), N_POLICIES);
    for (int i = 0; i < N_POLICIES; i++) {
        const pl_placement_policy *p = pl_placement_at(i);
        CHECK(p && strcmp(p->name, POLICIES[i]) == 0, "policy %d is '%s', expected '%s'", i,
              p ? p->name : "(NULL)", POLICIES[i]);
        CHECK(pl_placement_find(POLICIES[i]) == p, "find('%s') is not at(%d)", POLICIES[i],
              i);
    }
    CHECK(pl_placement_find("static") == pl_placement_static() &&
              pl_placement_find("auto") == pl_placement_auto(),
          "the registry's static/auto are pl_placement_static()/auto()");
    /* Gemini's names give the same policies through the older lookup. */
    for (int i = 0; i < 4; i++)
        CHECK(pl_placement_by_name(POLICIES[i], NULL) == pl_placement_find(POLICIES[i]),
              "by_name('%s') differs from find", POLICIES[i]);
    CHECK(pl_placement_at(-1) == NULL && pl_placement_at(N_POLICIES) == NULL,
          "pl_placement_at outside [0, count) is NULL");
}

/* ------------------------------------------------------------- 2. CLI */

/* `cli args` with stdout and stderr into *out (malloc'd, NUL-terminated),
 * continuation lines of the usage (a newline, then 22 spaces) joined into
 * one with a space; the exit status. */
static int run_cli(const char *cli, const char *args, char **out) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", cli, args);
    FILE *f = popen(cmd, "r");
    size_t cap = 1 << 16, n = 0;
    char *buf = tu_xmalloc(cap);
    for (size_t r; f && (r = fread(buf + n, 1, cap - 1 - n, f)) > 0;) {
        n += r;
        if (n + 1 == cap) buf = realloc(buf, cap *= 2);
        if (!buf) exit(1);
    }
    buf[n] = '\0';
    int st = f ? pclose(f) : -1;
    char *w = buf;
    for (char *r = buf; *r; r++) {
        if (r[0] == '\n' && strspn(r + 1, " ") == 22) {
            *w++ = ' ';
            r += 22;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
    *out = buf;
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The built-in names listed as the CLI lists them, from the registry. */
static void names(char *buf, size_t size, bool schedules, const char *first, const char *last) {
    int n = schedules ? pl_schedule_count() : pl_placement_count();
    size_t used = (size_t)snprintf(buf, size, "%s", first ? first : "");
    for (int i = 0; i < n && used < size; i++) {
        const char *name = schedules ? pl_schedule_at(i)->name : pl_placement_at(i)->name;
        const char *sep = used == 0 ? "" : i == n - 1 ? last : ", ";
        used += (size_t)snprintf(buf + used, size - used, "%s%s", sep, name);
    }
}

static void test_cli(const char *cli) {
    printf("CLI %s\n", cli);
    char *out, want[1024], list[512];
    int st = run_cli(cli, "train --help", &out);
    CHECK(st == 0, "train --help: exit status %d", st);
    names(list, sizeof list, true, "none", " or ");
    snprintf(want, sizeof want, "  --schedule NAME     %s (default none)\n", list);
    CHECK(strstr(out, want), "train --help does not list the schedules as '%s'", want);
    names(list, sizeof list, false, NULL, " or ");
    snprintf(want, sizeof want, "  --placement NAME    %s; needs --budget-mb ", list);
    CHECK(strstr(out, want), "train --help does not list the policies as '%s'", want);
    free(out);

    st = run_cli(cli, "train --schedule bogus", &out);
    names(list, sizeof list, true, "none", ", ");
    snprintf(want, sizeof want, "--schedule: expected one of %s, got 'bogus'", list);
    CHECK(st == 2 && strstr(out, want), "--schedule bogus: status %d, expected 2 and '%s' "
          "in: %s", st, want, out);
    free(out);
    st = run_cli(cli, "train --placement nosuch --budget-mb 4", &out);
    names(list, sizeof list, false, NULL, ", ");
    snprintf(want, sizeof want, "--placement: expected one of %s, got 'nosuch'", list);
    CHECK(st == 2 && strstr(out, want), "--placement nosuch: status %d, expected 2 and '%s' "
          "in: %s", st, want, out);
    free(out);
}

/* ---------------------------------------------------------- 3. refusals */

static void test_refusals(void) {
    printf("refusals\n");
    int ns = pl_schedule_count(), np = pl_placement_count();
    tu_expect_error(__LINE__, "schedule NULL", pl_schedule_register(NULL),
                    PL_STATUS_INVALID_ARGUMENT, "pl_schedule_register", "schedule is NULL");
    pl_schedule_def bad = fill_drain;
    bad.name = NULL;
    tu_expect_error(__LINE__, "schedule without name", pl_schedule_register(&bad),
                    PL_STATUS_INVALID_ARGUMENT, "needs a name", "its name is NULL");
    bad.name = "";
    tu_expect_error(__LINE__, "schedule named ''", pl_schedule_register(&bad),
                    PL_STATUS_INVALID_ARGUMENT, "needs a name", "its name is empty");
    bad.name = "none";
    tu_expect_error(__LINE__, "schedule named 'none'", pl_schedule_register(&bad),
                    PL_STATUS_INVALID_ARGUMENT, "'none' is no schedule's name",
                    "non-pipelined");
    bad.name = "test-no-build";
    bad.build = NULL;
    tu_expect_error(__LINE__, "schedule without build", pl_schedule_register(&bad),
                    PL_STATUS_INVALID_ARGUMENT, "schedule 'test-no-build'",
                    "has no build function");
    bad = fill_drain;
    bad.name = "gpipe";
    tu_expect_error(__LINE__, "a built-in's name", pl_schedule_register(&bad),
                    PL_STATUS_INVALID_ARGUMENT, "a schedule named 'gpipe'",
                    "already registered (a built-in)");
    tu_expect_error(__LINE__, "a built-in itself", pl_schedule_register(&pl_schedule_1f1b),
                    PL_STATUS_INVALID_ARGUMENT, "named '1f1b'", "(a built-in)");
    CHECK(pl_schedule_count() == ns, "a refused schedule was listed");

    tu_expect_error(__LINE__, "policy NULL", pl_placement_register(NULL),
                    PL_STATUS_INVALID_ARGUMENT, "pl_placement_register",
                    "placement policy is NULL");
    pl_placement_policy badp = highest_policy;
    badp.name = NULL;
    tu_expect_error(__LINE__, "policy without name", pl_placement_register(&badp),
                    PL_STATUS_INVALID_ARGUMENT, "needs a name", "its name is NULL");
    badp.name = "";
    tu_expect_error(__LINE__, "policy named ''", pl_placement_register(&badp),
                    PL_STATUS_INVALID_ARGUMENT, "needs a name", "its name is empty");
    badp.name = "lru";
    tu_expect_error(__LINE__, "a built-in policy's name", pl_placement_register(&badp),
                    PL_STATUS_INVALID_ARGUMENT, "a placement policy named 'lru'",
                    "already registered (a built-in)");
    CHECK(pl_placement_count() == np, "a refused policy was listed");

    pl_clear_error();
    CHECK(pl_schedule_find(NULL) == NULL, "find(NULL) found a schedule");
    tu_expect_error(__LINE__, "schedule find NULL", pl_last_status(),
                    PL_STATUS_INVALID_ARGUMENT, "pl_schedule_find", "name is NULL");
    CHECK(pl_schedule_find("nosuch") == NULL, "find('nosuch') found a schedule");
    tu_expect_error(__LINE__, "schedule find nosuch", pl_last_status(),
                    PL_STATUS_INVALID_ARGUMENT, "no schedule named 'nosuch'",
                    "(registered: 1f1b, interleaved, zb-h1, gpipe, zbv)");
    CHECK(pl_schedule_find("GPipe") == NULL, "names are case-sensitive");
    CHECK(pl_placement_find(NULL) == NULL, "find(NULL) found a policy");
    tu_expect_error(__LINE__, "policy find NULL", pl_last_status(),
                    PL_STATUS_INVALID_ARGUMENT, "pl_placement_find", "name is NULL");
    CHECK(pl_placement_find("nosuch") == NULL, "find('nosuch') found a policy");
    tu_expect_error(__LINE__, "policy find nosuch", pl_last_status(),
                    PL_STATUS_INVALID_ARGUMENT, "no placement policy named 'nosuch'",
                    "(registered: static, auto, cpu, cuda, lru)");
}

/* ------------------------------------------------ 4. through the engine */

static void test_register(void) {
    printf("register\n");
    int ns = pl_schedule_count(), np = pl_placement_count();
    CHECK(pl_schedule_register(&fill_drain) == PL_STATUS_OK, "register %s: %s",
          fill_drain.name, pl_last_error());
    CHECK(pl_placement_register(&highest_policy) == PL_STATUS_OK, "register %s: %s",
          highest_policy.name, pl_last_error());
    CHECK(pl_schedule_count() == ns + 1 && pl_schedule_at(ns) == &fill_drain,
          "the user schedule is listed last");
    CHECK(pl_placement_count() == np + 1 && pl_placement_at(np) == &highest_policy,
          "the user policy is listed last");
    CHECK(pl_schedule_find("test-fill-drain") == &fill_drain, "the user schedule by name");
    CHECK(pl_placement_find("test-highest") == &highest_policy, "the user policy by name");

    /* Twice, or another def under a taken name: refused. */
    tu_expect_error(__LINE__, "registered twice", pl_schedule_register(&fill_drain),
                    PL_STATUS_INVALID_ARGUMENT, "named 'test-fill-drain'",
                    "already registered (registered before)");
    pl_placement_policy other = highest_policy;
    tu_expect_error(__LINE__, "another policy, same name", pl_placement_register(&other),
                    PL_STATUS_INVALID_ARGUMENT, "named 'test-highest'",
                    "already registered (registered before)");
    CHECK(pl_schedule_count() == ns + 1 && pl_placement_count() == np + 1,
          "a refused duplicate was listed");
    pl_schedule_find("nosuch");
    CHECK(strstr(pl_last_error(), "zbv, test-fill-drain)"),
          "the unknown-name message lists the user's schedule: %s", pl_last_error());
}

typedef struct result {
    double loss[STEPS];
    float *params;
    int64_t n_params;
} result;

static int32_t tokens[STEPS][BATCH * T], targets[STEPS][BATCH * T];

/* Trains STEPS steps with the schedule and policy of these names
 * (schedule NULL: none); false if the engine refused. */
static bool train(pl_runtime_t *rt, const char *schedule, const char *policy, result *r) {
    pl_graph_t *g = pl_graph_new(SEED);
    pl_gpt_config gc = {.vocab = V, .context = T, .channels = C, .layers = L, .heads = NH};
    pl_gpt_model m;
    if (!g || pl_gpt_build(g, &gc, &m) != PL_STATUS_OK) {
        printf("FAIL: cannot build the GPT: %s\n", pl_last_error());
        exit(1);
    }
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = BATCH;
    eo.tiles = M;
    eo.chunk_elems = CHUNK_ELEMS;
    if (schedule) {
        eo.schedule_def = pl_schedule_find(schedule);
        eo.stages = P;
        CHECK(eo.schedule_def, "no schedule '%s': %s", schedule, pl_last_error());
    }
    eo.placement.policy = pl_placement_find(policy);
    CHECK(eo.placement.policy, "no policy '%s': %s", policy, pl_last_error());
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    if (!e) {
        printf("FAIL %s + %s: pl_engine_new: %s\n", schedule ? schedule : "none", policy,
               pl_last_error());
        tu_failures++;
        pl_graph_free(g);
        return false;
    }
    bool ok = true;
    for (int s = 0; s < STEPS && ok; s++)
        ok = tu_train_tokens(e, tokens[s], targets[s], BATCH, s + 1, &r->loss[s]);
    r->n_params = tu_read_params(g, e, NULL);
    r->params = tu_xmalloc((size_t)(r->n_params > 0 ? r->n_params : 1) * sizeof(float));
    ok = ok && r->n_params > 0 && tu_read_params(g, e, r->params) == r->n_params;
    pl_engine_free(e);
    pl_graph_free(g);
    return ok;
}

static void test_engine(void) {
    printf("engine\n");
    char dir[256];
    if (!tu_scratch_create("pl_registry")) {
        printf("FAIL: cannot create a scratch directory\n");
        tu_failures++;
        return;
    }
    tu_scratch_path(dir, sizeof dir, "offload");
    if (mkdir(dir, 0700) != 0) {
        printf("FAIL: mkdir %s\n", dir);
        tu_failures++;
        return;
    }
    uint64_t seed = 7;
    for (int s = 0; s < STEPS; s++) tu_ramp_tokens(&seed, V, T, BATCH, tokens[s], targets[s]);
    /* CPU workers, one per stage: budgets are the runtime's, so both runs
     * share one (a process has one runtime). */
    pl_runtime_options ro = pl_runtime_options_default();
    ro.device = PL_DEVICE_CPU;
    ro.cpu_workers = WORKERS;
    ro.compute_budget_mb = BUDGET_MB;
    ro.offload_dir = dir;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) {
        printf("FAIL: pl_runtime_new: %s\n", pl_last_error());
        tu_failures++;
        return;
    }
    result user = {0}, ref = {0};
    fill_drain_builds = 0;
    highest_victims = 0;
    bool ok = train(rt, "test-fill-drain", "test-highest", &user);
    CHECK(fill_drain_builds >= P, "the user schedule was built for %d stages, expected %d",
          fill_drain_builds, P);
    CHECK(highest_victims > 0, "the user policy chose no victim under a %d MiB budget",
          BUDGET_MB);
    ok = train(rt, NULL, "auto", &ref) && ok;
    for (int s = 0; ok && s < STEPS; s++) {
        printf("step %d: none + auto %.9f, test-fill-drain + test-highest %.9f\n", s + 1,
               ref.loss[s], user.loss[s]);
        CHECK(memcmp(&ref.loss[s], &user.loss[s], sizeof ref.loss[s]) == 0,
              "step %d: losses differ", s + 1);
    }
    CHECK(!ok || (user.n_params == ref.n_params &&
                  memcmp(user.params, ref.params, (size_t)ref.n_params * sizeof(float)) == 0),
          "parameters differ after training");
    free(user.params);
    free(ref.params);
    pl_runtime_free(rt);
    tu_remove_tree(tu_scratch_dir());
}

int main(int argc, char **argv) {
    tu_time_limit(300, "training under a registered schedule and policy");
    test_builtins();
    if (argc > 1) test_cli(argv[1]); /* before the registrations below */
    test_refusals();
    test_register();
    test_engine();
    if (tu_failures) printf("%d check(s) failed\n", tu_failures);
    return tu_failures ? 1 : 0;
}
