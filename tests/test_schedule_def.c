/* User-defined pipeline schedules and ZB-H1 (pleiades/schedule.h), public
 * API only.
 *
 * 1. Validation without an engine (pl_schedule_validate): the built-ins
 *    (1F1B, interleaved, ZB-H1) and GPipe (the registry's "gpipe")
 *    pass for several p, v, m; bad schedules are refused with
 *    PL_STATUS_INVALID_ARGUMENT and a message naming the problem (strstr):
 *      a duplicate item            "stage 0 lists F of microbatch 0, chunk 0 twice"
 *      a missing item              "stage 1 lacks B of microbatch 0, chunk 0"
 *      a microbatch out of range   "microbatch 4, chunk 0) is out of range"
 *      a chunk out of range        "microbatch 0, chunk 1) is out of range"
 *      one W item (then all)       "stage 0 lacks W of microbatch 1, chunk 0"
 *      a cross-stage deadlock      stage 1 at its F of microbatch 1 waits for
 *                                  stage 0's, which is behind stage 0's
 *                                  blocked B of microbatch 0 (which waits
 *                                  for stage 1's B of microbatch 0)
 *      a deadlock within a stage   B of microbatch 0 before its own F
 *      a W before its B            "(W of microbatch 0, chunk 0) needs B of
 *                                  microbatch 0, chunk 0, which stage 0 lists later"
 *      W's out of microbatch order (gradients sum in microbatch order)
 *      interleaved with m < p      "interleaved: microbatches 2 must be a
 *                                  multiple of stages 4" (and why)
 *      a user check's refusal      "its check refuses p 2, v 2, m 4"
 *      a build's refusal           "its build refuses stage 0"
 *      NULL def / NULL build / p = 0.
 * 2. The engine checks the same before its first iteration (pl_engine_new
 *    returns NULL with the deadlock message). Nothing hangs: an alarm
 *    fails the test after 300 s.
 * 3. Equivalence: a GPT (V=256 T=16 C=32 L=4) trained 3 steps with GPipe
 *    (p=2 m=4, p=4 m=4, and p=4 m=2: GPipe needs no m >= p), with the
 *    built-in defs passed as schedule_def (1F1B p=2 m=4, interleaved p=2
 *    v=2 m=4, ZB-H1 p=2 m=4 and p=4 m=4; 1F1B and ZB-H1 p=4 m=2, fewer
 *    microbatches than stages), ZB-H1 through the enum, and
 *    schedules written here (1F1B with the warm-up of GPipe on stage 0;
 *    "tied": stage 0 lists all its W's last while stage 1, the LM head
 *    tied to stage 0's embedding, does each W right after its B — an
 *    order that deadlocked while the two ops added to one gradient in
 *    submission order, and runs now that each has its own,
 *    engine/tied_grads.c) give BIT FOR BIT the losses and parameters of
 *    the non-pipelined run with the same number of tiles (memcmp).
 * 4. Order: with record_tasks, per stage, the F/L/B records (and W for
 *    ZB-H1) sorted by start, consecutive records of one item collapsed,
 *    equal the order re-derived here from the schedules' rules (GPipe p=2
 *    m=4; ZB-H1 p=2 m=4, p=2 m=8, p=4 m=8 and p=4 m=2: 1F1B's F/B list
 *    with W(j) inserted right after B(j + s), the rest at the end; the
 *    forwards before each stage's first backward, counted from the
 *    records, are the warm-up rule min(p−s−1, m)), each stage on its
 *    own worker; and ZB-H1 never has more than p microbatches live on a
 *    stage (1F1B's peak). ZB-H1's theoretical bubble is the paper's
 *    (p−1)(T_F+T_B−T_W) / (m(T_F+T_B+T_W)) with the mean item times summed
 *    here from the records, which pl_engine_item_times must equal (m < p:
 *    ((p−1)(T_F+T_B) − (m−1)T_W) / (m(T_F+T_B+T_W)), only m−1 W's to
 *    defer).
 *
 * Exit status 0 on success; every failed check prints a FAIL line. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pleiades.h"
#include "test_util.h"

/* GPipe: a built-in written against the public interface, found by name
 * as a user's program finds it. */
static const pl_schedule_def *gpipe_schedule(void) { return pl_schedule_find("gpipe"); }


enum { V = 256, T = 16, C = 32, NH = 4, LAYERS = 4, BATCH = 8, STEPS = 3, WORKERS = 4 };

/* ------------------------------------------------------- bad schedules */

/* GPipe's lists with one defect, chosen by *(int *)user. */
enum defect { DUPLICATE, MISSING, BAD_MICROBATCH, BAD_CHUNK, W_ITEM, CROSS_DEADLOCK,
              SELF_DEADLOCK, REFUSE };

static int defective_build(const pl_schedule_def *def, int p, int v, int m, int stage,
                           pl_work_item *items, int capacity, void *user) {
    (void)def, (void)v, (void)capacity;
    enum defect d = *(const enum defect *)user;
    int n = 0;
    if (d == REFUSE) return -1;
    if (d == CROSS_DEADLOCK) {
        /* Stage 0: F0 B0 F1 B1 ..; stage 1: F0 F1 .. then the B's. Stage
         * 0's B0 needs stage 1's B0, which comes after stage 1's F1,
         * which needs stage 0's F1, which comes after stage 0's B0. */
        if (stage == 0)
            for (int mb = 0; mb < m; mb++) {
                items[n++] = (pl_work_item){PL_WORK_F, mb, 0};
                items[n++] = (pl_work_item){PL_WORK_B, mb, 0};
            }
        else {
            for (int mb = 0; mb < m; mb++) items[n++] = (pl_work_item){PL_WORK_F, mb, 0};
            for (int mb = 0; mb < m; mb++) items[n++] = (pl_work_item){PL_WORK_B, mb, 0};
        }
        return n;
    }
    if (d == SELF_DEADLOCK && stage == p - 1) items[n++] = (pl_work_item){PL_WORK_B, 0, 0};
    for (int mb = 0; mb < m; mb++) items[n++] = (pl_work_item){PL_WORK_F, mb, 0};
    for (int mb = m - 1; mb >= 0; mb--)
        if (!(d == SELF_DEADLOCK && stage == p - 1 && mb == 0))
            items[n++] = (pl_work_item){PL_WORK_B, mb, 0};
    if (stage == 0 && d == DUPLICATE) items[1].microbatch = 0;
    if (stage == 1 && d == MISSING) n--; /* drops B of microbatch 0 */
    if (stage == 0 && d == BAD_MICROBATCH) items[0].microbatch = m;
    if (stage == 0 && d == BAD_CHUNK) items[0].chunk = 1;
    if (stage == 0 && d == W_ITEM) items[n++] = (pl_work_item){PL_WORK_W, 0, 0};
    return n;
}

/* ZB-H1's lists (pl_schedule_zb_h1) with one defect on stage 0, or, with
 * W_TIE, a valid variant: on p = 2, stage 0 (the embedding) lists all its
 * W's last, while stage 1 (the LM head, which shares the embedding's
 * weight) does W of each microbatch right after its B. Were the two ops'
 * contributions added to one gradient in submission order, stage 1's W
 * of microbatch 1 would wait for stage 0's W of microbatch 0, which stage
 * 0 reaches only after its B of microbatch 2, which needs stage 1's: a
 * deadlock. */
enum wdefect { W_BEFORE_B, W_SWAPPED, W_TIE };

static int zb_variant_build(const pl_schedule_def *def, int p, int v, int m, int stage,
                            pl_work_item *items, int capacity, void *user) {
    enum wdefect d = *(const enum wdefect *)user;
    int n = pl_schedule_zb_h1.build(def, p, v, m, stage, items, capacity, NULL);
    if (stage != 0) {
        if (d == W_TIE) { /* 1F1B with each W right after its B */
            n = 0;
            for (int mb = 0; mb < m; mb++) {
                items[n++] = (pl_work_item){PL_WORK_F, mb, 0};
                items[n++] = (pl_work_item){PL_WORK_B, mb, 0};
                items[n++] = (pl_work_item){PL_WORK_W, mb, 0};
            }
        }
        return n;
    }
    int wi[64], nw = 0;
    for (int i = 0; i < n; i++)
        if (items[i].kind == PL_WORK_W) wi[nw++] = i;
    if (d == W_BEFORE_B) { /* W of microbatch 0 first */
        pl_work_item w0 = items[wi[0]];
        for (int i = wi[0]; i > 0; i--) items[i] = items[i - 1];
        items[0] = w0;
    } else if (d == W_SWAPPED) { /* W0 moved to right after W1 */
        pl_work_item w0 = items[wi[0]];
        for (int i = wi[0]; i < wi[1]; i++) items[i] = items[i + 1];
        items[wi[1]] = w0;
    } else { /* stage 0: every W after the last B */
        int k = 0;
        for (int i = 0; i < n; i++)
            if (items[i].kind != PL_WORK_W) items[k++] = items[i];
        for (int mb = 0; mb < m; mb++) items[k++] = (pl_work_item){PL_WORK_W, mb, 0};
    }
    return n;
}

static pl_status refuse_v2(int p, int v, int m) {
    (void)p, (void)m;
    return v == 1 ? PL_STATUS_OK : PL_STATUS_INVALID_ARGUMENT;
}

static void test_validation(void) {
    const pl_schedule_def *gpipe = gpipe_schedule();
    struct { const pl_schedule_def *d; int p, v, m; } good[] = {
        {gpipe, 2, 1, 4}, {gpipe, 4, 1, 8}, {gpipe, 4, 1, 2}, {gpipe, 1, 1, 1},
        {&pl_schedule_1f1b, 2, 1, 4}, {&pl_schedule_1f1b, 4, 1, 8},
        {&pl_schedule_1f1b, 4, 1, 5}, {&pl_schedule_interleaved, 2, 2, 4},
        {&pl_schedule_interleaved, 4, 2, 8}, {&pl_schedule_interleaved, 2, 3, 6},
        {&pl_schedule_interleaved, 4, 2, 4}, {&pl_schedule_zb_h1, 2, 1, 4},
        {&pl_schedule_zb_h1, 4, 1, 4}, {&pl_schedule_zb_h1, 4, 1, 9},
        {&pl_schedule_zb_h1, 1, 1, 3},
        /* fewer microbatches than stages (1F1B's warm-up min(p−s−1, m)) */
        {&pl_schedule_1f1b, 4, 1, 2}, {&pl_schedule_1f1b, 4, 1, 1},
        {&pl_schedule_zb_h1, 4, 1, 2}, {&pl_schedule_zb_h1, 4, 1, 3},
        {&pl_schedule_zb_h1, 3, 1, 1},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        pl_status st = pl_schedule_validate(good[i].d, good[i].p, good[i].v, good[i].m);
        CHECK(st == PL_STATUS_OK, "%s p=%d v=%d m=%d refused: %s", good[i].d->name,
              good[i].p, good[i].v, good[i].m, pl_last_error());
    }

    static enum defect defects[] = {DUPLICATE, MISSING, BAD_MICROBATCH, BAD_CHUNK,
                                    W_ITEM, CROSS_DEADLOCK, SELF_DEADLOCK, REFUSE};
    struct { const char *what, *frag1, *frag2; } want[] = {
        {"duplicate", "stage 0 lists F of microbatch 0, chunk 0 twice", "items 0 and 1"},
        {"missing", "stage 1 lacks B of microbatch 0, chunk 0", NULL},
        {"microbatch out of range", "microbatch 4, chunk 0) is out of range", "stage 0"},
        {"chunk out of range", "microbatch 0, chunk 1) is out of range", "chunks 0..0"},
        {"one W item", "stage 0 lacks W of microbatch 1, chunk 0", "W too"},
        {"cross-stage deadlock",
         "stage 1, item 1 (F of microbatch 1, chunk 0) waits for F of microbatch 1, "
         "chunk 0 on stage 0",
         "which stage 0 lists at item 2, behind its own blocked item 1 (B of microbatch 0"},
        {"deadlock within a stage",
         "stage 1, item 0 (B of microbatch 0, chunk 0) needs F of microbatch 0, chunk 0",
         "which stage 1 lists later, at item 1"},
        {"build refuses", "schedule 'bad': its build refuses stage 0", NULL},
    };
    for (size_t i = 0; i < sizeof defects / sizeof defects[0]; i++) {
        pl_schedule_def bad = {.name = "bad", .build = defective_build, .user = &defects[i]};
        pl_status st = pl_schedule_validate(&bad, 2, 1, 4);
        tu_expect_error(__LINE__, want[i].what, st, PL_STATUS_INVALID_ARGUMENT,
                        want[i].frag1, want[i].frag2);
    }
    /* Interleaved keeps its own constraint on m, and says why. */
    pl_status st = pl_schedule_validate(&pl_schedule_interleaved, 4, 2, 2);
    tu_expect_error(__LINE__, "interleaved m < p", st, PL_STATUS_INVALID_ARGUMENT,
                    "interleaved: microbatches 2 must be a multiple of stages 4",
                    "groups of p");
    pl_schedule_def checked = {.name = "gpipe-v1", .build = gpipe->build,
                               .check = refuse_v2};
    st = pl_schedule_validate(&checked, 2, 2, 4);
    tu_expect_error(__LINE__, "user check", st, PL_STATUS_INVALID_ARGUMENT,
                    "schedule 'gpipe-v1': its check refuses p 2, v 2, m 4", NULL);
    st = pl_schedule_validate(gpipe, 2, 2, 4);
    tu_expect_error(__LINE__, "gpipe v=2", st, PL_STATUS_INVALID_ARGUMENT,
                    "schedule 'gpipe': its check refuses", NULL);
    static enum wdefect w_early = W_BEFORE_B, w_swapped = W_SWAPPED;
    pl_schedule_def wbad = {.name = "wbad", .build = zb_variant_build, .user = &w_early};
    st = pl_schedule_validate(&wbad, 2, 1, 4);
    tu_expect_error(__LINE__, "W before its B", st, PL_STATUS_INVALID_ARGUMENT,
                    "stage 0, item 0 (W of microbatch 0, chunk 0) needs B of microbatch 0, "
                    "chunk 0, which stage 0 lists later", NULL);
    wbad.user = &w_swapped;
    st = pl_schedule_validate(&wbad, 2, 1, 4);
    tu_expect_error(__LINE__, "W out of microbatch order", st, PL_STATUS_INVALID_ARGUMENT,
                    "(W of microbatch 1, chunk 0) needs W of microbatch 0, chunk 0, which "
                    "stage 0 lists later", NULL);
    st = pl_schedule_validate(NULL, 2, 1, 4);
    tu_expect_error(__LINE__, "NULL def", st, PL_STATUS_INVALID_ARGUMENT, "NULL", NULL);
    pl_schedule_def nobuild = {.name = "x"};
    st = pl_schedule_validate(&nobuild, 2, 1, 4);
    tu_expect_error(__LINE__, "NULL build", st, PL_STATUS_INVALID_ARGUMENT, "build", NULL);
    st = pl_schedule_validate(gpipe, 0, 1, 4);
    tu_expect_error(__LINE__, "p = 0", st, PL_STATUS_INVALID_ARGUMENT,
                    "stages 0 and microbatches 4 must be >= 1", NULL);
}

/* ------------------------------------------------------------- training */

static int32_t tokens[STEPS][BATCH * T], targets[STEPS][BATCH * T];

static void make_data(void) {
    uint64_t s = 99;
    for (int st = 0; st < STEPS; st++)
        for (int b = 0; b < BATCH; b++) {
            int32_t x = (int32_t)(tu_splitmix64(&s) % V);
            for (int i = 0; i < T; i++) {
                tokens[st][b * T + i] = x;
                x = (int32_t)((x + 1 + (tu_splitmix64(&s) % 4 == 0 ? 5 : 0)) % V);
                targets[st][b * T + i] = x;
            }
        }
}

typedef struct run {
    const pl_schedule_def *def; /* NULL: non-pipelined (or `kind`) */
    int p, v, m;
    pl_schedule_kind kind;      /* used when def is NULL */
} run;

typedef struct model {
    pl_graph_t *g;
    pl_engine_t *e;
} model;

static void model_free(model *md) {
    pl_engine_free(md->e);
    pl_graph_free(md->g);
}

/* pl_engine_options.workers_per_stage of the engines model_new builds. */
static int workers_per_stage = 0;

static bool model_new(pl_runtime_t *rt, const run *r, bool record, model *md) {
    md->e = NULL;
    md->g = pl_graph_new(4321);
    pl_gpt_config gc = {.vocab = V, .context = T, .channels = C, .layers = LAYERS,
                        .heads = NH};
    pl_gpt_model gm;
    if (!md->g || pl_gpt_build(md->g, &gc, &gm) != PL_STATUS_OK) return false;
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = BATCH;
    eo.tiles = r->m;
    eo.schedule_def = r->def;
    eo.schedule = r->kind;
    bool piped = r->def || r->kind != PL_SCHEDULE_NONE;
    eo.stages = piped ? r->p : 0;
    eo.model_chunks = piped ? r->v : 0;
    eo.workers_per_stage = workers_per_stage;
    eo.record_tasks = record;
    md->e = pl_engine_new(rt, md->g, &eo);
    return md->e != NULL;
}

static bool step(model *md, int s, double *loss) {
    const void *data[2] = {tokens[s], targets[s]};
    pl_batch b = {.size = BATCH, .data = data};
    pl_step_result res;
    if (pl_engine_train_step(md->e, &b, &res) != PL_STATUS_OK) return false;
    if (loss) *loss = res.loss;
    return true;
}

/* Losses and parameters (malloc'd) after STEPS steps. */
static bool train(pl_runtime_t *rt, const run *r, double *losses, float **params,
                  int64_t *n) {
    model md;
    *params = NULL;
    if (!model_new(rt, r, false, &md)) {
        printf("FAIL: engine %s p=%d v=%d m=%d: %s\n", r->def ? r->def->name : "(enum)",
               r->p, r->v, r->m, pl_last_error());
        tu_failures++;
        model_free(&md);
        return false;
    }
    bool ok = true;
    for (int s = 0; ok && s < STEPS; s++) ok = step(&md, s, &losses[s]);
    *n = 0;
    for (int i = 0; i < pl_graph_num_params(md.g); i++)
        *n += pl_tensor_numel(pl_graph_param(md.g, i));
    *params = tu_xmalloc((size_t)*n * sizeof **params);
    for (int i = 0, off = 0; ok && i < pl_graph_num_params(md.g); i++) {
        pl_tensor_t *t = pl_graph_param(md.g, i);
        ok = pl_engine_get_param(md.e, t, *params + off, (size_t)pl_tensor_numel(t)) ==
             PL_STATUS_OK;
        off += (int)pl_tensor_numel(t);
    }
    CHECK(ok, "training %s p=%d v=%d m=%d: %s", r->def ? r->def->name : "(enum)", r->p,
          r->v, r->m, pl_last_error());
    model_free(&md);
    return ok;
}

/* A schedule written here: 1F1B, but stage 0 does all its forwards first
 * (GPipe's warm-up) — valid, just more memory-hungry. */
static int lazy_build(const pl_schedule_def *def, int p, int v, int m, int stage,
                      pl_work_item *items, int capacity, void *user) {
    (void)user;
    if (stage != 0) return pl_schedule_1f1b.build(def, p, v, m, stage, items, capacity, NULL);
    int n = 0;
    for (int mb = 0; mb < m; mb++) items[n++] = (pl_work_item){PL_WORK_F, mb, 0};
    for (int mb = 0; mb < m; mb++) items[n++] = (pl_work_item){PL_WORK_B, mb, 0};
    return n;
}

static void test_equivalence(pl_runtime_t *rt) {
    static const pl_schedule_def lazy = {.name = "lazy-1f1b", .build = lazy_build};
    static enum wdefect tie = W_TIE;
    static const pl_schedule_def tied = {.name = "tied", .build = zb_variant_build,
                                         .user = &tie};
    CHECK(pl_schedule_validate(&tied, 2, 1, 4) == PL_STATUS_OK,
          "the tied schedule refused without a graph: %s", pl_last_error());
    const run runs[] = {
        {gpipe_schedule(), 2, 1, 4, 0}, {gpipe_schedule(), 4, 1, 4, 0},
        {gpipe_schedule(), 4, 1, 2, 0}, {&pl_schedule_1f1b, 2, 1, 4, 0},
        {&pl_schedule_interleaved, 2, 2, 4, 0}, {&lazy, 2, 1, 4, 0},
        {&pl_schedule_zb_h1, 2, 1, 4, 0}, {&pl_schedule_zb_h1, 4, 1, 4, 0},
        {&pl_schedule_1f1b, 4, 1, 2, 0}, {&pl_schedule_zb_h1, 4, 1, 2, 0},
        {NULL, 2, 1, 4, PL_SCHEDULE_ZB_H1}, /* the enum: the same def */
        {&tied, 2, 1, 4, 0},
    };
    double ref[2][STEPS];
    float *ref_params[2] = {NULL, NULL};
    int64_t ref_n[2] = {0, 0};
    bool ref_ok[2];
    for (int k = 0; k < 2; k++) { /* none with 4 and 2 tiles */
        run none = {NULL, 1, 1, k == 0 ? 4 : 2, PL_SCHEDULE_NONE};
        ref_ok[k] = train(rt, &none, ref[k], &ref_params[k], &ref_n[k]);
    }
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        const run *r = &runs[i];
        int k = r->m == 4 ? 0 : 1;
        double losses[STEPS];
        float *params;
        int64_t n;
        if (!train(rt, r, losses, &params, &n) || !ref_ok[k]) {
            free(params);
            continue;
        }
        int bad = 0;
        for (int s = 0; s < STEPS; s++)
            bad += memcmp(&losses[s], &ref[k][s], sizeof(double)) != 0;
        int64_t diff = n == ref_n[k] ? 0 : -1;
        for (int64_t j = 0; n == ref_n[k] && j < n; j++)
            diff += memcmp(&params[j], &ref_params[k][j], sizeof(float)) != 0;
        const char *name = r->def ? r->def->name : "enum zb-h1";
        CHECK(bad == 0 && diff == 0,
              "%s p=%d v=%d m=%d: %d losses and %lld parameters differ from none's",
              name, r->p, r->v, r->m, bad, (long long)diff);
        printf("equivalence: %s p=%d v=%d m=%d: losses %.9g .. %.9g, %lld parameters: %s\n",
               name, r->p, r->v, r->m, losses[0], losses[STEPS - 1], (long long)n,
               bad == 0 && diff == 0 ? "bitwise equal to none" : "DIFFER");
        free(params);
    }
    CHECK(ref_ok[0] && ref[0][STEPS - 1] < ref[0][0], "none: the loss did not decrease");
    free(ref_params[0]);
    free(ref_params[1]);
}

/* ---------------------------------------------------------------- engine */

static void test_engine_refuses(pl_runtime_t *rt) {
    static enum defect cross = CROSS_DEADLOCK;
    pl_schedule_def bad = {.name = "bad", .build = defective_build, .user = &cross};
    run r = {&bad, 2, 1, 4, PL_SCHEDULE_NONE};
    model md;
    bool made = model_new(rt, &r, false, &md);
    tu_expect_error(__LINE__, "pl_engine_new deadlock", made ? PL_STATUS_OK : pl_last_status(),
                    PL_STATUS_INVALID_ARGUMENT, "schedule 'bad' deadlocks (p 2, v 1, m 4)",
                    "stage 1, item 1");
    model_free(&md);
    pl_schedule_def nameless = {.build = defective_build, .user = &cross};
    r.def = &nameless;
    made = model_new(rt, &r, false, &md);
    tu_expect_error(__LINE__, "pl_engine_new nameless", made ? PL_STATUS_OK : pl_last_status(),
                    PL_STATUS_INVALID_ARGUMENT, "schedule_def needs a name", NULL);
    model_free(&md);
}

/* ----------------------------------------------------------------- order */

static int cmp_start(const void *a, const void *b) {
    const pl_task_record *x = *(const pl_task_record *const *)a;
    const pl_task_record *y = *(const pl_task_record *const *)b;
    return (x->start_us > y->start_us) - (x->start_us < y->start_us);
}

/* The expected per-stage order, written out from the schedules' rules
 * (not from gpipe.c or the library's tables), as " F0 B0 W0 ..." text.
 * GPipe: F0 .. F(m−1), then B(m−1) .. B0. ZB-H1, re-derived by insertion
 * into 1F1B: take 1F1B's F/B list of stage s (p−s−1 warm-up forwards,
 * then F and B alternating, then the remaining B's), put W(j) right after
 * B(j + s) for every j + s < m and the other W's, in order, at the end. */
static void add_item(char *buf, size_t size, char kind, int mb) {
    size_t n = strlen(buf);
    snprintf(buf + n, size - n, " %c%d", kind, mb);
}

static void expected_order(bool zb, int p, int m, int s, bool has_b, char *out,
                           size_t size) {
    char buf[512] = "";
    if (!zb) {
        for (int mb = 0; mb < m; mb++) add_item(buf, sizeof buf, 'F', mb);
        for (int mb = m - 1; mb >= 0; mb--)
            if (has_b) add_item(buf, sizeof buf, 'B', mb);
    } else {
        int warm = p - s - 1 < m ? p - s - 1 : m, f = 0, b = 0;
        char kind[128];
        int mbs[128], n = 0;
        for (; f < warm; f++) kind[n] = 'F', mbs[n++] = f;
        for (; f < m; f++, b++) {
            kind[n] = 'F', mbs[n++] = f;
            kind[n] = 'B', mbs[n++] = b;
        }
        for (; b < m; b++) kind[n] = 'B', mbs[n++] = b;
        for (int i = 0; i < n; i++) {
            /* A stage without B tasks (the embedding alone) has no B
             * records; its W's still follow the rule. */
            if (kind[i] != 'B' || has_b) add_item(buf, sizeof buf, kind[i], mbs[i]);
            if (kind[i] == 'B' && mbs[i] - s >= 0) add_item(buf, sizeof buf, 'W', mbs[i] - s);
        }
        for (int j = m - s; j < m; j++)
            if (j >= 0) add_item(buf, sizeof buf, 'W', j);
    }
    snprintf(out, size, "%s", buf);
}

/* Per stage, the F/L/B (and W when the schedule lists them) records
 * sorted by start, consecutive records of one item collapsed, must equal
 * expected_order; every stage on its own worker. For ZB-H1 also: at no
 * time more than p microbatches live on a stage (from the start of their
 * first task there to the end of their last), 1F1B's peak. */
/* ZB-H1's theory with measured times: the paper's idle (p−1)(T_F+T_B−T_W)
 * over busy m(T_F+T_B+T_W), T_X the mean X item of a stage, summed here
 * from the task records (F and L are forward, B input gradient, W weight
 * gradient). */
static void check_zb_theory(model *md, const pl_task_record *rec, int n, int p, int m) {
    double sum[3] = {0, 0, 0};
    for (int i = 0; i < n; i++) {
        const char *kinds = "FLBW", *at = strchr(kinds, rec[i].phase);
        if (rec[i].stage < 0 || !at || !rec[i].phase) continue;
        int k = at - kinds < 2 ? 0 : (int)(at - kinds) - 1;
        sum[k] += rec[i].end_us - rec[i].start_us;
    }
    double f = sum[0] / (p * m), b = sum[1] / (p * m), w = sum[2] / (p * m);
    pl_item_times t;
    CHECK(pl_engine_item_times(md->e, &t) == PL_STATUS_OK, "item times: %s", pl_last_error());
    CHECK(fabs(t.f - f) <= 1e-9 * f && fabs(t.b - b) <= 1e-9 * b && fabs(t.w - w) <= 1e-9 * w,
          "item times F/B/W %g/%g/%g us, the records give %g/%g/%g", t.f, t.b, t.w, f, b, w);
    /* m < p: only m − 1 W's are there to defer into the p − 1 slots. */
    double want = ((p - 1) * (f + b) - (m - 1 < p - 1 ? m - 1 : p - 1) * w) /
                  (m * (f + b + w));
    if (want < 0) want = 0;
    double got = pl_engine_theoretical_bubble(md->e);
    CHECK(fabs(got - want) <= 1e-9, "zb-h1 p=%d m=%d: theoretical bubble %.6f, the paper's "
          "formula with F %.0f B %.0f W %.0f us gives %.6f", p, m, got, f, b, w, want);
    printf("theory: zb-h1 p=%d m=%d: F %.0f B %.0f W %.0f us -> bubble %.4f (equal-time "
           "%.4f)\n", p, m, f, b, w, got, pl_schedule_zb_h1.bubble(p, 1, m));
}

static void check_order(pl_runtime_t *rt, bool zb, int p, int m) {
    const char *name = zb ? "zb-h1" : "gpipe";
    run r = {zb ? &pl_schedule_zb_h1 : gpipe_schedule(), p, 1, m, PL_SCHEDULE_NONE};
    model md;
    /* One worker per stage: ZB-H1's memory bound is 1F1B's exactly then
     * (test_pipeline checks orders with several). */
    workers_per_stage = 1;
    bool made = model_new(rt, &r, true, &md);
    workers_per_stage = 0;
    if (!made) {
        printf("FAIL: %s engine with records: %s\n", name, pl_last_error());
        tu_failures++;
        model_free(&md);
        return;
    }
    if (!step(&md, 0, NULL) || !step(&md, 1, NULL)) {
        printf("FAIL: %s steps: %s\n", name, pl_last_error());
        tu_failures++;
        model_free(&md);
        return;
    }
    const pl_task_record *rec;
    int n = pl_engine_task_records(md.e, &rec);
    const pl_task_record **sorted = tu_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *sorted);
    int workers[8];
    for (int s = 0; s < p; s++) {
        int k = 0;
        bool has_b = false;
        for (int i = 0; i < n; i++)
            if (rec[i].stage == s && strchr("FLBW", rec[i].phase)) {
                sorted[k++] = &rec[i];
                has_b = has_b || rec[i].phase == 'B';
            }
        qsort(sorted, k, sizeof *sorted, cmp_start);
        char got[512] = "", want[512], last[24] = "";
        workers[s] = k ? sorted[0]->worker : -1;
        double first[64], end[64];
        for (int mb = 0; mb < m; mb++) first[mb] = -1, end[mb] = -1;
        for (int i = 0; i < k; i++) {
            const pl_task_record *t = sorted[i];
            CHECK(t->worker == workers[s], "%s stage %d ran on workers %d and %d", name, s,
                  workers[s], t->worker);
            if (first[t->microbatch] < 0) first[t->microbatch] = t->start_us;
            if (t->end_us > end[t->microbatch]) end[t->microbatch] = t->end_us;
            if (t->phase == 'W' && !zb) continue; /* out of order by design */
            char it[24];
            snprintf(it, sizeof it, " %c%d", t->phase == 'L' ? 'F' : t->phase, t->microbatch);
            if (strcmp(it, last) != 0 && strlen(got) + strlen(it) < sizeof got)
                strcat(got, it);
            snprintf(last, sizeof last, "%s", it);
        }
        expected_order(zb, p, m, s, has_b, want, sizeof want);
        if (zb && has_b) { /* the warm-up, counted from the records */
            int fwd = 0;
            for (int i = 0; i < k && sorted[i]->phase != 'B'; i++)
                fwd += (sorted[i]->phase == 'F' || sorted[i]->phase == 'L') &&
                       (i == 0 || sorted[i - 1]->microbatch != sorted[i]->microbatch ||
                        !strchr("FL", sorted[i - 1]->phase));
            /* warm-up min(p−s−1, m), then the steady phase's first F */
            int warm = p - s - 1 < m ? p - s - 1 : m, rule = warm + (m > warm);
            CHECK(fwd == rule, "zb-h1 p=%d m=%d stage %d: %d forwards before the first "
                  "backward, the warm-up rule min(p-s-1, m) = %d (+1 steady) gives %d", p, m,
                  s, fwd, warm, rule);
        }
        CHECK(strcmp(got, want) == 0, "%s p=%d m=%d stage %d ran%s, expected%s", name, p, m,
              s, got, want);
        printf("order: %s p=%d m=%d stage %d:%s\n", name, p, m, s, got);
        if (zb) {
            int peak = 0;
            for (int a = 0; a < m; a++) { /* live at the start of a's first task */
                int live = 0;
                for (int b = 0; b < m; b++)
                    live += first[b] >= 0 && first[b] <= first[a] && end[b] > first[a];
                if (live > peak) peak = live;
            }
            CHECK(peak <= p, "zb-h1 p=%d m=%d stage %d: %d microbatches live, 1F1B's peak "
                  "is %d", p, m, s, peak, p);
            printf("memory: zb-h1 p=%d m=%d stage %d: at most %d microbatches live\n", p, m,
                   s, peak);
        }
        for (int t = 0; t < s; t++)
            CHECK(workers[t] != workers[s], "stages %d and %d ran on worker %d", t, s,
                  workers[s]);
    }
    if (zb) check_zb_theory(&md, rec, n, p, m);
    free(sorted);
    model_free(&md);
}

static void test_order(pl_runtime_t *rt) {
    check_order(rt, false, 2, 4);
    check_order(rt, true, 2, 4);
    check_order(rt, true, 2, 8);
    check_order(rt, true, 4, 8);
    check_order(rt, true, 4, 2); /* m < p */
}

int main(void) {
    tu_time_limit(300, "a schedule deadlocked?");
    test_validation();
    make_data();
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = WORKERS;
    ro.profiling = true;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) {
        printf("FAIL: pl_runtime_new: %s\n", pl_last_error());
        return 1;
    }
    test_engine_refuses(rt);
    test_equivalence(rt);
    test_order(rt);
    pl_runtime_free(rt);
    if (tu_failures) {
        printf("%d check(s) failed\n", tu_failures);
        return 1;
    }
    printf("all schedule_def checks passed\n");
    return 0;
}
