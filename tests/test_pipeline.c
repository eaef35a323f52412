/* Pipeline schedules (1F1B, interleaved 1F1B) on a small GPT.
 *
 * One runtime with 4 StarPU CPU workers (the most this StarPU build allows;
 * a pipeline needs one worker per stage) and profiling on, then:
 *
 * 1. Equivalence. GPT V=256 T=16 C=32 L=4 NH=4, batch 8, graph seed 1234,
 *    AdamW defaults, trained 4 steps on fixed pseudo-random tokens with
 *      none (4 tiles), 1F1B p=2 m=4, 1F1B p=4 m=4, interleaved p=2 v=2 m=4;
 *    and with fewer microbatches than stages, against none with as many
 *    tiles: 1F1B p=4 m=2 (none, 2 tiles) and 1F1B p=2 m=1 (none, 1 tile).
 *    The engine submits the tasks of every schedule in the same sequential
 *    order (the non-pipelined order over the stage parts) and the policy
 *    only reorders execution, so gradients accumulate in the same order:
 *    the 4 losses and every parameter afterwards must be equal BIT FOR BIT
 *    (memcmp; tolerance 0). The parameters must also have moved away from
 *    their initial values, so the comparison is not vacuous.
 *
 * 2. Order. For 1F1B p=2/p=4 and interleaved (v=2) p=2/p=4, each with
 *    m=4 and m=8, one training step with record_tasks; per stage the
 *    F/L (forward) and B (input-gradient backward) records, sorted by start
 *    time, with consecutive records of the same (direction, microbatch,
 *    chunk) collapsed into one item, must equal the stage's schedule
 *    computed here from the reference formulas (an independent generator;
 *    pl_pipeline_stage_items is not used):
 *      1F1B: stage s does min(p−s−1, m) warm-up forwards, then one forward /
 *        one backward, then the remaining backwards;
 *      interleaved: chunk c of stage s holds part s + c·p; warm-up
 *        min(2(p−s−1) + (v−1)·p, m·v) virtual forwards; virtual step k is
 *        microbatch (k / (p·v))·p + k mod p on chunk (k mod (p·v)) / p
 *        (forwards) or v−1 minus that (backwards); when m == p, every
 *        forward first (Colossal-AI's all_warmup_microbatches).
 *    Interleaved p=2 v=2 m=2 is run too, for the m == p rule with p=2,
 *    and 1F1B p=4 with m=2 and m=1 (m < p). For 1F1B the forwards each
 *    stage ran before its first backward are counted from the records
 *    and must be the warm-up rule min(p−s−1, m) computed here.
 *    W (weight-gradient) and optimizer records are ignored: W tasks are out
 *    of order by design. A part whose backward has no B task (the
 *    embedding block alone: its only input is the token ids) has no
 *    backward item. Also: all F/L/B/W tasks of a stage ran on one worker,
 *    a different one for each stage.
 *
 * 3. Memory. 1F1B p=2 and p=4 with m=8: on stage 0 a microbatch is live
 *    from the start of its first F task to the end of its last B/W task on
 *    stage 0; at no time may more than p be live. (The non-pipelined
 *    schedule is measured too, for contrast, but not checked.)
 *
 *    Interleaved p=2 v=2 m=8 is measured too (not checked: weight
 *    gradients there only fill idle time, see scheduling/policy.h).
 *
 * 4. Short batches: a 1F1B (p=2, m=4) and an interleaved (p=2, v=2, m=4)
 *    engine with batch_size 8 fed batches of 2 and 6 samples (2 of the 4
 *    microbatches empty; uneven microbatches) must finish their steps and
 *    give bitwise the losses of the non-pipelined engine (4 tiles) on the
 *    same batches.
 *
 * 5. Bad parameters: PL_STATUS_INVALID_ARGUMENT and a message naming the
 *    problem (checked with strstr) for interleaved with m < p (its own
 *    constraint, m a multiple of p, and the schedules that take any m),
 *    interleaved with
 *    v = 1, interleaved with m % p != 0, a batch not divisible into the
 *    microbatches, more stage parts than blocks, more stages than workers,
 *    and layers_per_stage counts that do not add up to the block count.
 *
 * 6. Measured stage balance (the default): after the first training step
 *    pl_engine_block_times has nothing; after the second (the timed one)
 *    it has a positive time for each of the 6 blocks, and the cut in use
 *    (pl_engine_block_parts) has the smallest largest-part time over all
 *    contiguous cuts of those times, found by trying every cut here (a
 *    part's time over its stage's workers: with 3 workers, stage 0's two
 *    take about twice stage 1's work); the
 *    engine then keeps training (1F1B p=2, interleaved p=2 v=2). With
 *    PL_STAGE_BALANCE_FLOPS or layers_per_stage nothing is timed and the
 *    cut never moves; a bad stage_balance is refused. Kernels are timed by
 *    their thread's CPU time: a block whose kernels sleep (off the CPU,
 *    as a descheduled task is) measures less than one of its naps.
 *
 * A schedule that deadlocks would hang: an alarm fails the test after
 * 300 s instead. PL_TEST_VERBOSE=1 prints the task timelines of the memory
 * runs.
 *
 * Exit status 0 on success; every failed check prints a FAIL line. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pleiades.h"
#include "test_util.h"

enum { V = 256, T = 16, C = 32, NH = 4, BATCH = 8, STEPS = 4, WORKERS = 4 };
#define SEED 1234

static int32_t tokens[STEPS][BATCH * T], targets[STEPS][BATCH * T];

/* Byte sequences with some structure (a noisy ramp) so training moves. */
static void make_data(void) {
    uint64_t s = 77;
    for (int st = 0; st < STEPS; st++)
        tu_ramp_tokens(&s, V, T, BATCH, tokens[st], targets[st]);
}

static const char *schedule_name(pl_schedule_kind k) {
    return k == PL_SCHEDULE_1F1B ? "1f1b" : k == PL_SCHEDULE_INTERLEAVED ? "interleaved"
                                                                          : "none";
}

typedef struct config {
    pl_schedule_kind schedule;
    int p, v, m;      /* stages, chunks, microbatches (tiles) */
    int layers;
    int batch;
    const int *counts; /* layers_per_stage */
} config;

/* Stage balance of the engines model_new makes: the default, measured,
 * except where test_stage_balance sets another. */
static pl_stage_balance stage_balance = PL_STAGE_BALANCE_MEASURED;

typedef struct model {
    pl_graph_t *g;
    pl_engine_t *e;
} model;

static void model_free(model *md) {
    pl_engine_free(md->e);
    pl_graph_free(md->g);
    md->e = NULL;
    md->g = NULL;
}

/* Graph + engine; false (error left in pl_last_error) when either fails. */
/* pl_engine_options.workers_per_stage of the engines model_new builds. */
static int workers_per_stage = 0;

static bool model_new(pl_runtime_t *rt, const config *c, bool record, model *md) {
    md->e = NULL;
    md->g = pl_graph_new(SEED);
    if (!md->g) return false;
    pl_gpt_config gc = {.vocab = V, .context = T, .channels = C,
                        .layers = c->layers, .heads = NH};
    pl_gpt_model gm;
    if (pl_gpt_build(md->g, &gc, &gm) != PL_STATUS_OK) {
        model_free(md);
        return false;
    }
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = c->batch;
    eo.tiles = c->m;
    eo.schedule = c->schedule;
    eo.stages = c->p;
    eo.model_chunks = c->v;
    eo.layers_per_stage = c->counts;
    eo.stage_balance = stage_balance;
    eo.workers_per_stage = workers_per_stage;
    eo.record_tasks = record;
    md->e = pl_engine_new(rt, md->g, &eo);
    if (!md->e) {
        pl_graph_free(md->g);
        md->g = NULL;
        return false;
    }
    return true;
}

static bool step(model *md, int s, double *loss) {
    return tu_train_tokens(md->e, tokens[s % STEPS], targets[s % STEPS], BATCH, s, loss);
}

/* ------------------------------------------------------------ 1. equivalence */

typedef struct train_result {
    double losses[STEPS];
    float *params, *initial;
    int64_t n;
} train_result;

static int64_t read_params(model *md, float *dst) {
    return tu_read_params(md->g, md->e, dst);
}

static bool train(pl_runtime_t *rt, const config *c, train_result *r) {
    memset(r, 0, sizeof *r);
    model md;
    if (!model_new(rt, c, false, &md)) {
        printf("FAIL: engine for %s p=%d v=%d m=%d: %s\n", schedule_name(c->schedule),
               c->p, c->v, c->m, pl_last_error());
        tu_failures++;
        return false;
    }
    r->n = read_params(&md, NULL);
    r->params = malloc(r->n * sizeof *r->params);
    r->initial = malloc(r->n * sizeof *r->initial);
    bool ok = r->params && r->initial && read_params(&md, r->initial) == r->n;
    for (int s = 0; ok && s < STEPS; s++) ok = step(&md, s, &r->losses[s]);
    ok = ok && read_params(&md, r->params) == r->n;
    model_free(&md);
    CHECK(ok, "training %s p=%d v=%d m=%d failed", schedule_name(c->schedule), c->p,
          c->v, c->m);
    return ok;
}

static void test_equivalence(pl_runtime_t *rt) {
    /* Each pipelined run against the non-pipelined run with as many
     * tiles (gradients sum tile by tile): m = 4, and m = 2 and 1 for 1F1B
     * with fewer microbatches than stages (m < p). */
    const config cfgs[] = {
        {PL_SCHEDULE_NONE, 1, 1, 4, 4, BATCH, NULL},
        {PL_SCHEDULE_1F1B, 2, 1, 4, 4, BATCH, NULL},
        {PL_SCHEDULE_1F1B, 4, 1, 4, 4, BATCH, NULL},
        {PL_SCHEDULE_INTERLEAVED, 2, 2, 4, 4, BATCH, NULL},
        {PL_SCHEDULE_NONE, 1, 1, 2, 4, BATCH, NULL},
        {PL_SCHEDULE_1F1B, 4, 1, 2, 4, BATCH, NULL},
        {PL_SCHEDULE_NONE, 1, 1, 1, 4, BATCH, NULL},
        {PL_SCHEDULE_1F1B, 2, 1, 1, 4, BATCH, NULL},
    };
    enum { N = sizeof cfgs / sizeof cfgs[0] };
    train_result r[N];
    bool ok[N];
    for (int i = 0; i < N; i++) ok[i] = train(rt, &cfgs[i], &r[i]);
    if (ok[0]) {
        printf("equivalence: none losses");
        for (int s = 0; s < STEPS; s++) printf(" %.9g", r[0].losses[s]);
        printf("\n");
        int64_t moved = 0;
        for (int64_t k = 0; k < r[0].n; k++) moved += r[0].params[k] != r[0].initial[k];
        CHECK(moved > r[0].n / 2, "only %lld of %lld parameters changed in training",
              (long long)moved, (long long)r[0].n);
        CHECK(r[0].losses[STEPS - 1] < r[0].losses[0], "loss did not decrease: %g -> %g",
              r[0].losses[0], r[0].losses[STEPS - 1]);
    }
    for (int i = 1, z = 0; i < N; i++) {
        const config *c = &cfgs[i];
        if (c->schedule == PL_SCHEDULE_NONE) {
            z = i; /* the reference of the runs after it */
            continue;
        }
        if (!ok[z] || !ok[i]) continue;
        CHECK(cfgs[z].m == c->m, "reference with %d tiles for m=%d", cfgs[z].m, c->m);
        for (int s = 0; s < STEPS; s++)
            CHECK(memcmp(&r[i].losses[s], &r[z].losses[s], sizeof(double)) == 0,
                  "%s p=%d v=%d m=%d: step %d loss %.17g differs from none's %.17g",
                  schedule_name(c->schedule), c->p, c->v, c->m, s, r[i].losses[s],
                  r[z].losses[s]);
        CHECK(r[i].n == r[z].n, "parameter counts differ");
        if (r[i].n != r[z].n) continue;
        int64_t diff = 0, first = -1;
        for (int64_t k = 0; k < r[z].n; k++)
            if (memcmp(&r[i].params[k], &r[z].params[k], sizeof(float)) != 0) {
                if (first < 0) first = k;
                diff++;
            }
        CHECK(diff == 0, "%s p=%d v=%d m=%d: %lld of %lld parameters differ from none's "
              "(first at %lld: %.9g vs %.9g)", schedule_name(c->schedule), c->p, c->v,
              c->m, (long long)diff, (long long)r[z].n, (long long)first,
              first >= 0 ? r[i].params[first] : 0.0, first >= 0 ? r[z].params[first] : 0.0);
        printf("equivalence: %s p=%d v=%d m=%d: losses and %lld parameters %s\n",
               schedule_name(c->schedule), c->p, c->v, c->m, (long long)r[z].n,
               diff == 0 ? "bitwise equal" : "DIFFER");
    }
    for (int i = 0; i < N; i++) {
        free(r[i].params);
        free(r[i].initial);
    }
}

/* ------------------------------------------------------------------ 2. order */

typedef struct item {
    char dir; /* 'F' or 'B' */
    int mb, chunk;
} item;

/* The reference schedules, written out from the formulas (see the top). */
static int expected_items(const config *c, int s, item *out) {
    int p = c->p, m = c->m, n = 0;
    if (c->schedule == PL_SCHEDULE_1F1B) {
        int warm = p - s - 1 < m ? p - s - 1 : m;
        int next_f = 0, next_b = 0;
        while (next_f < warm) out[n++] = (item){'F', next_f++, 0};
        while (next_f < m) {
            out[n++] = (item){'F', next_f++, 0};
            out[n++] = (item){'B', next_b++, 0};
        }
        while (next_b < m) out[n++] = (item){'B', next_b++, 0};
        return n;
    }
    int v = c->v, total = m * v;
    int warm = 2 * (p - s - 1) + (v - 1) * p;
    if (warm > total) warm = total;
    /* Colossal-AI's InterleavedPipelineSchedule: "if self.num_microbatches
     * == pipeline_parallel_size: num_warmup_microbatches = num_microbatches;
     * all_warmup_microbatches = True" (num_microbatches counted in virtual
     * steps there: every forward first, then every backward). */
    if (m == p) warm = total;
    /* virtual step k → (microbatch, chunk) */
#define VMB(k) (((k) / (p * v)) * p + (k) % p)
#define VCH(k) (((k) % (p * v)) / p)
    int kf = 0, kb = 0;
    for (; kf < warm; kf++) out[n++] = (item){'F', VMB(kf), VCH(kf)};
    for (; kf < total; kf++, kb++) {
        out[n++] = (item){'F', VMB(kf), VCH(kf)};
        out[n++] = (item){'B', VMB(kb), v - 1 - VCH(kb)};
    }
    for (; kb < total; kb++) out[n++] = (item){'B', VMB(kb), v - 1 - VCH(kb)};
#undef VMB
#undef VCH
    return n;
}

/* The order in which the scheduler started a stage's tasks (a fused
 * task's records share it, and ran in start-time order). */
static int cmp_start(const void *a, const void *b) {
    const pl_task_record *x = *(const pl_task_record *const *)a;
    const pl_task_record *y = *(const pl_task_record *const *)b;
    if (x->start_order != y->start_order) return x->start_order < y->start_order ? -1 : 1;
    return (x->start_us > y->start_us) - (x->start_us < y->start_us);
}

static bool is_fb(char phase) { return phase == 'F' || phase == 'L' || phase == 'B'; }
static bool is_stage_task(char phase) { return is_fb(phase) || phase == 'W'; }

static void print_items(const char *what, const item *it, int n) {
    printf("    %s:", what);
    for (int i = 0; i < n; i++) printf(" %c%d.%d", it[i].dir, it[i].mb, it[i].chunk);
    printf("\n");
}

static void check_order(pl_runtime_t *rt, const config *c) {
    model md;
    if (!model_new(rt, c, true, &md)) {
        printf("FAIL: engine for %s p=%d v=%d m=%d: %s\n", schedule_name(c->schedule),
               c->p, c->v, c->m, pl_last_error());
        tu_failures++;
        return;
    }
    /* Two steps; the records are those of the second (they restart). */
    if (!step(&md, 0, NULL) || !step(&md, 1, NULL)) {
        model_free(&md);
        return;
    }
    int p = c->p, v = c->v, nb = pl_graph_num_blocks(md.g);
    int *parts = calloc(nb, sizeof *parts);
    int n_parts = pl_engine_block_parts(md.e, parts);
    CHECK(n_parts == p * v, "%d parts, expected %d", n_parts, p * v);
    /* A part has B tasks unless it holds only block 0 (the embedding). */
    bool has_b[64] = {false};
    for (int b = 1; b < nb; b++) has_b[parts[b]] = true;
    for (int b = 1; b < nb; b++)
        CHECK(parts[b] >= parts[b - 1] && parts[b] <= parts[b - 1] + 1,
              "block parts not contiguous at block %d", b);
    free(parts);

    const pl_task_record *rec;
    int n = pl_engine_task_records(md.e, &rec);
    const pl_task_record **sel = malloc((n ? n : 1) * sizeof *sel);
    int cap = 2 * c->m * v + 1;
    item *want = malloc(cap * sizeof *want), *got = malloc((n + 1) * sizeof *got);
    /* The stages' workers: the runtime's are dealt round-robin, so with
     * W workers a stage has at most ceil(W / p), and no worker serves two
     * stages. */
    enum { MAX_WORKERS = 64 };
    int n_workers = pl_runtime_cpu_workers(rt), most = (n_workers + p - 1) / p;
    int worker_stage[MAX_WORKERS];
    for (int w = 0; w < MAX_WORKERS; w++) worker_stage[w] = -1;
    int stage_workers[16] = {0};
    bool overlapped[16] = {false};
    for (int s = 0; s < p; s++) {
        for (int i = 0; i < n; i++) {
            if (!is_stage_task(rec[i].phase) || rec[i].stage != s) continue;
            int w = rec[i].worker;
            CHECK(w >= 0 && w < MAX_WORKERS, "record of worker %d", w);
            if (w < 0 || w >= MAX_WORKERS) continue;
            CHECK(worker_stage[w] < 0 || worker_stage[w] == s,
                  "%s p=%d v=%d m=%d: worker %d ran tasks of stages %d and %d",
                  schedule_name(c->schedule), p, v, c->m, w, worker_stage[w], s);
            if (worker_stage[w] < 0) stage_workers[s]++;
            worker_stage[w] = s;
        }
        CHECK(stage_workers[s] >= 1 && stage_workers[s] <= most,
              "%s p=%d v=%d m=%d: stage %d ran on %d workers, expected 1 to %d",
              schedule_name(c->schedule), p, v, c->m, s, stage_workers[s], most);

        /* observed items, in the order the scheduler started them (with
         * several workers a stage's start times may tie or cross) */
        int k = 0;
        for (int i = 0; i < n; i++)
            if (is_fb(rec[i].phase) && rec[i].stage == s) {
                CHECK(rec[i].start_order >= 0, "%s: ordered task %s has no start order",
                      schedule_name(c->schedule), rec[i].name);
                sel[k++] = &rec[i];
            }
        qsort(sel, k, sizeof *sel, cmp_start);
        /* Several workers: did items of the stage run at once (the point
         * of them; reported, as it depends on timing) */
        for (int i = 0; i + 1 < k && !overlapped[s]; i++)
            for (int j = i + 1; j < k && !overlapped[s]; j++)
                overlapped[s] = sel[j]->worker != sel[i]->worker &&
                                sel[j]->start_us < sel[i]->end_us &&
                                sel[i]->start_us < sel[j]->end_us;
        int ng = 0;
        for (int i = 0; i < k; i++) {
            item it = {sel[i]->phase == 'B' ? 'B' : 'F', sel[i]->microbatch, sel[i]->chunk};
            if (ng > 0 && got[ng - 1].dir == it.dir && got[ng - 1].mb == it.mb &&
                got[ng - 1].chunk == it.chunk)
                continue;
            got[ng++] = it;
        }
        /* expected items, without backward items of parts with no B task */
        item *all = malloc(cap * sizeof *all);
        int na = expected_items(c, s, all), nw = 0;
        for (int i = 0; i < na; i++)
            if (all[i].dir == 'F' || has_b[s + all[i].chunk * p]) want[nw++] = all[i];
        free(all);
        bool same = nw == ng;
        for (int i = 0; same && i < nw; i++)
            same = want[i].dir == got[i].dir && want[i].mb == got[i].mb &&
                   want[i].chunk == got[i].chunk;
        CHECK(same, "%s p=%d v=%d m=%d: stage %d ran its items out of order",
              schedule_name(c->schedule), p, v, c->m, s);
        /* 1F1B's warm-up, counted from the records: the forwards the
         * stage ran before its first backward are the reference's
         * warm-up min(p−s−1, m) (Megatron's and Colossal-AI's num_warmup_
         * microbatches), plus the steady phase's first forward when
         * microbatches are left for it, with m < p too (a stage without
         * B tasks, the embedding alone, has no first backward). */
        int first_b = -1;
        for (int i = 0; i < ng && first_b < 0; i++)
            if (got[i].dir == 'B') first_b = i;
        if (c->schedule == PL_SCHEDULE_1F1B && first_b >= 0) {
            int warm = p - s - 1 < c->m ? p - s - 1 : c->m, rule = warm + (c->m > warm);
            CHECK(first_b == rule, "1F1B p=%d m=%d stage %d: %d forwards before the first "
                  "backward, the warm-up rule min(p-s-1, m) = %d (+1 steady) gives %d", p,
                  c->m, s, first_b, warm, rule);
            printf("  warm-up: 1f1b p=%d m=%d stage %d: %d forwards before the first B "
                   "(warm-up min(p-s-1, m) = %d%s)\n", p, c->m, s, first_b, warm,
                   c->m > warm ? ", then the steady phase's first F" : "");
        }
        if (!same) {
            print_items("expected", want, nw);
            print_items("observed", got, ng);
        }
    }
    printf("order: %s p=%d v=%d m=%d L=%d: %d records, workers per stage",
           schedule_name(c->schedule), p, v, c->m, c->layers, n);
    for (int s = 0; s < p; s++) printf(" %d%s", stage_workers[s], overlapped[s] ? " (overlapped)" : "");
    printf("\n");
    free(sel);
    free(want);
    free(got);
    model_free(&md);
}

static void test_order(pl_runtime_t *rt) {
    const int ms[] = {4, 8};
    for (int i = 0; i < 2; i++) {
        config cs[] = {
            {PL_SCHEDULE_1F1B, 2, 1, ms[i], 4, BATCH, NULL},
            {PL_SCHEDULE_1F1B, 4, 1, ms[i], 4, BATCH, NULL},
            {PL_SCHEDULE_INTERLEAVED, 2, 2, ms[i], 4, BATCH, NULL},
            /* p·v = 8 parts: L = 6 gives 8 blocks */
            {PL_SCHEDULE_INTERLEAVED, 4, 2, ms[i], 6, BATCH, NULL},
        };
        for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) check_order(rt, &cs[k]);
    }
    config all_warmup = {PL_SCHEDULE_INTERLEAVED, 2, 2, 2, 4, BATCH, NULL};
    check_order(rt, &all_warmup);
    /* Fewer microbatches than stages: the first stages warm up with every
     * forward. */
    const config few[] = {{PL_SCHEDULE_1F1B, 4, 1, 2, 4, BATCH, NULL},
                          {PL_SCHEDULE_1F1B, 4, 1, 1, 4, BATCH, NULL}};
    for (int i = 0; i < 2; i++) check_order(rt, &few[i]);
}

/* ----------------------------------------------------------------- 3. memory */

typedef struct event {
    double t;
    int delta; /* +1 start, -1 end */
} event;

static int cmp_event(const void *a, const void *b) {
    const event *x = a, *y = b;
    if (x->t != y->t) return (x->t > y->t) - (x->t < y->t);
    return x->delta - y->delta; /* an end at the same instant comes first */
}

/* Max number of microbatches live at once on stage 0. */
static int max_live_stage0(const pl_task_record *rec, int n, int m) {
    double first[64], last[64];
    for (int i = 0; i < m; i++) first[i] = 1e300, last[i] = -1e300;
    for (int i = 0; i < n; i++) {
        const pl_task_record *r = &rec[i];
        if (r->stage != 0 || r->microbatch < 0 || r->microbatch >= m) continue;
        if ((r->phase == 'F' || r->phase == 'L') && r->start_us < first[r->microbatch])
            first[r->microbatch] = r->start_us;
        if ((r->phase == 'B' || r->phase == 'W') && r->end_us > last[r->microbatch])
            last[r->microbatch] = r->end_us;
    }
    event ev[128];
    int ne = 0;
    for (int i = 0; i < m; i++) {
        if (first[i] > last[i]) return -1;
        ev[ne++] = (event){first[i], +1};
        ev[ne++] = (event){last[i], -1};
    }
    qsort(ev, ne, sizeof *ev, cmp_event);
    int live = 0, best = 0;
    for (int i = 0; i < ne; i++) {
        live += ev[i].delta;
        if (live > best) best = live;
    }
    return best;
}

/* PL_TEST_VERBOSE=1: every F/L/B/W task of the step, by start time. */
static void dump_timeline(const config *c, int step_index, const pl_task_record *rec,
                          int n) {
    const pl_task_record **sel = malloc((n ? n : 1) * sizeof *sel);
    int k = 0;
    double t0 = 1e300;
    for (int i = 0; i < n; i++) {
        if (rec[i].start_us < t0) t0 = rec[i].start_us;
        if (is_stage_task(rec[i].phase)) sel[k++] = &rec[i];
    }
    qsort(sel, k, sizeof *sel, cmp_start);
    printf("  tasks of %s p=%d v=%d m=%d, step %d (start, end in us; stage):\n",
           schedule_name(c->schedule), c->p, c->v, c->m, step_index);
    for (int i = 0; i < k; i++)
        printf("    %9.1f %9.1f s%d %c mb%d %s\n", sel[i]->start_us - t0,
               sel[i]->end_us - t0, sel[i]->stage, sel[i]->phase, sel[i]->microbatch,
               sel[i]->name);
    free(sel);
}

/* 1F1B keeps at most p microbatches live on stage 0 with one worker per
 * stage; each further worker of the stage may start one more item before
 * the one before it ended (pl_engine_options.workers_per_stage). */
static void test_memory(pl_runtime_t *rt) {
    const config cs[] = {
        {PL_SCHEDULE_NONE, 1, 1, 8, 4, BATCH, NULL},
        {PL_SCHEDULE_1F1B, 2, 1, 8, 4, BATCH, NULL},
        {PL_SCHEDULE_1F1B, 4, 1, 8, 4, BATCH, NULL},
        {PL_SCHEDULE_INTERLEAVED, 2, 2, 8, 4, BATCH, NULL},
        {PL_SCHEDULE_1F1B, 2, 1, 8, 4, BATCH, NULL}, /* 2 workers per stage */
    };
    const int per_stage[] = {1, 1, 1, 1, 2};
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        const config *c = &cs[k];
        workers_per_stage = per_stage[k];
        int bound = c->p + per_stage[k] - 1;
        model md;
        if (!model_new(rt, c, true, &md)) {
            printf("FAIL: engine: %s\n", pl_last_error());
            tu_failures++;
            continue;
        }
        /* Several steps: the bound must hold on each. */
        int worst = 0;
        for (int s = 0; s < 3; s++) {
            if (!step(&md, s, NULL)) break;
            const pl_task_record *rec;
            int n = pl_engine_task_records(md.e, &rec);
            int live = max_live_stage0(rec, n, c->m);
            if (getenv("PL_TEST_VERBOSE")) dump_timeline(c, s, rec, n);
            CHECK(live > 0, "%s: a microbatch has no stage-0 F or B/W record",
                  schedule_name(c->schedule));
            if (live > worst) worst = live;
        }
        printf("memory: %s p=%d v=%d m=%d, %d worker%s per stage: at most %d microbatches "
               "live on stage 0%s\n", schedule_name(c->schedule), c->p, c->v, c->m,
               per_stage[k], per_stage[k] > 1 ? "s" : "", worst,
               c->schedule != PL_SCHEDULE_1F1B ? " (not checked)" : "");
        if (c->schedule == PL_SCHEDULE_1F1B)
            CHECK(worst <= bound, "1F1B p=%d m=%d, %d workers per stage: %d microbatches "
                  "live on stage 0 (at most %d allowed)", c->p, c->m, per_stage[k], worst,
                  bound);
        model_free(&md);
    }
    workers_per_stage = 0;
}

/* ---------------------------------------------------------- 4. short batches */

static void test_short_batches(pl_runtime_t *rt) {
    const config cs[] = {
        {PL_SCHEDULE_NONE, 1, 1, 4, 4, BATCH, NULL},
        {PL_SCHEDULE_1F1B, 2, 1, 4, 4, BATCH, NULL},
        {PL_SCHEDULE_INTERLEAVED, 2, 2, 4, 4, BATCH, NULL},
    };
    const int sizes[] = {2, 6, BATCH};
    enum { NC = 3, NS = 3 };
    double loss[NC][NS];
    bool ok[NC] = {false};
    for (int k = 0; k < NC; k++) {
        model md;
        if (!model_new(rt, &cs[k], false, &md)) {
            printf("FAIL: engine: %s\n", pl_last_error());
            tu_failures++;
            continue;
        }
        ok[k] = true;
        for (int i = 0; i < NS && ok[k]; i++) {
            const void *data[2] = {tokens[i], targets[i]};
            pl_batch b = {.size = sizes[i], .data = data};
            pl_step_result r;
            pl_status st = pl_engine_train_step(md.e, &b, &r);
            CHECK(st == PL_STATUS_OK, "%s: batch of %d: %s", schedule_name(cs[k].schedule),
                  sizes[i], pl_last_error());
            ok[k] = st == PL_STATUS_OK;
            loss[k][i] = r.loss;
        }
        model_free(&md); /* waits for every task: hangs if a stage is stuck */
    }
    for (int k = 1; k < NC; k++) {
        if (!ok[0] || !ok[k]) continue;
        bool same = memcmp(loss[k], loss[0], sizeof loss[0]) == 0;
        CHECK(same, "%s with batches of 2, 6, 8: losses %.9g %.9g %.9g, none's %.9g "
              "%.9g %.9g", schedule_name(cs[k].schedule), loss[k][0], loss[k][1],
              loss[k][2], loss[0][0], loss[0][1], loss[0][2]);
        printf("short batches: %s m=4, batches of 2, 6, 8: %s\n",
               schedule_name(cs[k].schedule), same ? "finished, losses bitwise equal to none's"
                                                     : "losses DIFFER");
    }
}

/* ------------------------------------------------------- 5. bad parameters */

static void expect_invalid(pl_runtime_t *rt, const config *c, const char *what,
                           const char *needle1, const char *needle2) {
    pl_clear_error();
    model md;
    bool made = model_new(rt, c, false, &md);
    CHECK(!made, "%s: the engine was created", what);
    if (made) {
        model_free(&md);
        return;
    }
    const char *msg = pl_last_error();
    CHECK(pl_last_status() == PL_STATUS_INVALID_ARGUMENT, "%s: status %s, expected "
          "invalid argument (message: %s)", what, pl_status_string(pl_last_status()), msg);
    CHECK(strstr(msg, needle1) && (!needle2 || strstr(msg, needle2)),
          "%s: message \"%s\" lacks \"%s\"%s%s%s", what, msg, needle1,
          needle2 ? " / \"" : "", needle2 ? needle2 : "", needle2 ? "\"" : "");
    printf("bad parameters: %s -> %s\n", what, msg);
}

static void test_bad_parameters(pl_runtime_t *rt) {
    static const int short_counts[2] = {2, 2};     /* 4 of the 6 blocks */
    static const int zero_counts[2] = {6, 0};
    static const int good_counts[2] = {3, 3};
    const struct {
        config c;
        const char *what, *n1, *n2;
    } cases[] = {
        {{PL_SCHEDULE_INTERLEAVED, 4, 2, 2, 6, BATCH, NULL}, "interleaved m=2 < p=4",
         "microbatches 2 must be a multiple of stages 4", "1f1b and zb-h1 take any m"},
        {{PL_SCHEDULE_INTERLEAVED, 2, 1, 4, 4, BATCH, NULL}, "interleaved v=1",
         "model chunks 1", "> 1"},
        {{PL_SCHEDULE_INTERLEAVED, 2, 2, 3, 4, 6, NULL}, "interleaved m=3 % p=2",
         "microbatches 3", "multiple of stages 2"},
        {{PL_SCHEDULE_1F1B, 2, 1, 4, 4, 10, NULL}, "batch 10 into 4 microbatches",
         "batch size 10", "not divisible into 4 microbatches"},
        {{PL_SCHEDULE_INTERLEAVED, 2, 2, 4, 1, BATCH, NULL},
         "p*v=4 parts > L+2=3 blocks", "4 stage parts", "only 3 blocks"},
        {{PL_SCHEDULE_1F1B, 2 * WORKERS, 1, 8, 8, BATCH, NULL}, "p=8 > 4 workers",
         "8 stages need 8 workers", "4 CPU workers"},
        {{PL_SCHEDULE_1F1B, 2, 1, 4, 4, BATCH, short_counts},
         "layers_per_stage {2,2} for 6 blocks", "add up to 4", "has 6"},
        {{PL_SCHEDULE_1F1B, 2, 1, 4, 4, BATCH, zero_counts},
         "layers_per_stage {6,0}", "part 1 has 0 blocks", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_invalid(rt, &cases[i].c, cases[i].what, cases[i].n1, cases[i].n2);
    const config two = {PL_SCHEDULE_1F1B, 2, 1, 4, 4, BATCH, NULL};
    workers_per_stage = 3;
    expect_invalid(rt, &two, "3 workers per stage x p=2 > 4 workers",
                   "workers_per_stage 3 x 2 stages need 6 workers", "4 CPU workers");
    workers_per_stage = -1;
    expect_invalid(rt, &two, "workers_per_stage -1", "workers_per_stage -1 out of range",
                   NULL);
    workers_per_stage = 0;

    /* Control: explicit counts that do add up are accepted and used. */
    config ok = {PL_SCHEDULE_1F1B, 2, 1, 4, 4, BATCH, good_counts};
    model md;
    if (model_new(rt, &ok, false, &md)) {
        int parts[6];
        int np = pl_engine_block_parts(md.e, parts);
        CHECK(np == 2 && parts[0] == 0 && parts[2] == 0 && parts[3] == 1 && parts[5] == 1,
              "layers_per_stage {3,3}: parts %d, blocks -> %d %d %d %d %d %d", np,
              parts[0], parts[1], parts[2], parts[3], parts[4], parts[5]);
        model_free(&md);
    } else {
        printf("FAIL: layers_per_stage {3,3} refused: %s\n", pl_last_error());
        tu_failures++;
    }
}

/* --------------------------------------------------- 6. measured balance */

/* The smallest possible largest-part time over every cut of the blocks
 * into `parts` contiguous non-empty parts, by trying them all (a
 * reference independent of the engine's dynamic programme); a part's
 * time is its blocks' over its stage's workers (cap[k], from the first
 * part on): a stage with two workers runs two items at once. */
static double best_cut(const double *us, int nb, int parts, const double *cap) {
    if (parts == 1) {
        double sum = 0;
        for (int b = 0; b < nb; b++) sum += us[b];
        return sum / cap[0];
    }
    double best = INFINITY, first = 0;
    for (int k = 1; k <= nb - (parts - 1); k++) { /* first part: blocks 0..k-1 */
        first += us[k - 1];
        double rest = best_cut(us + k, nb - k, parts - 1, cap + 1);
        double worst = first / cap[0] > rest ? first / cap[0] : rest;
        if (worst < best) best = worst;
    }
    return best;
}

/* Measured balance, checked against every cut (parts weighted by their
 * stages' workers); n_cfgs of the two configurations. */
static void check_measured_balance(pl_runtime_t *rt, size_t n_cfgs) {
    enum { NB = 6 }; /* L = 4: embedding, 4 layers, head */
    const config cfgs[] = {
        {PL_SCHEDULE_1F1B, 2, 1, 4, 4, BATCH, NULL},
        {PL_SCHEDULE_INTERLEAVED, 2, 2, 4, 4, BATCH, NULL},
    };
    for (size_t i = 0; i < n_cfgs && i < sizeof cfgs / sizeof cfgs[0]; i++) {
        const config *c = &cfgs[i];
        model md;
        if (!model_new(rt, c, false, &md)) {
            printf("FAIL: engine for the balance test: %s\n", pl_last_error());
            tu_failures++;
            continue;
        }
        double us[NB];
        int parts[NB], P = c->p * c->v;
        bool ok = step(&md, 0, NULL);
        CHECK(!ok || pl_engine_block_times(md.e, us) == 0,
              "%s: block times after the first (untimed) step", schedule_name(c->schedule));
        ok = ok && step(&md, 1, NULL);
        int nb = ok ? pl_engine_block_times(md.e, us) : 0;
        CHECK(nb == NB, "%s: %d block times after the timed step, expected %d",
              schedule_name(c->schedule), nb, NB);
        if (nb == NB) {
            bool positive = true;
            for (int b = 0; b < NB; b++) positive = positive && us[b] > 0;
            CHECK(positive, "%s: a block has no measured time", schedule_name(c->schedule));
            CHECK(pl_engine_block_parts(md.e, parts) == P, "part count");
            /* The cut in use now is the best one for the measured times
             * and the stages' workers. */
            double worst = 0, part_us[16] = {0}, cap[16];
            for (int k = 0; k < P; k++) cap[k] = pl_engine_stage_workers(md.e, k % c->p);
            for (int b = 0; b < NB; b++) part_us[parts[b]] += us[b];
            for (int k = 0; k < P; k++)
                worst = part_us[k] / cap[k] > worst ? part_us[k] / cap[k] : worst;
            double best = best_cut(us, NB, P, cap);
            CHECK(worst <= best * (1 + 1e-12),
                  "%s: the stages' largest measured time per worker %.0f us, the best "
                  "cut's %.0f us", schedule_name(c->schedule), worst, best);
            printf("balance: %s p=%d v=%d, workers", schedule_name(c->schedule), c->p, c->v);
            for (int k = 0; k < c->p; k++) printf(" %.0f", cap[k]);
            printf(": block times (us)");
            for (int b = 0; b < NB; b++) printf(" %.0f", us[b]);
            printf("; parts");
            for (int b = 0; b < NB; b++) printf(" %d", parts[b]);
            printf("; largest part %.0f us (best %.0f)\n", worst, best);
        }
        /* The recut engine keeps training. */
        ok = ok && step(&md, 2, NULL) && step(&md, 3, NULL);
        CHECK(ok, "%s: steps after the recut failed", schedule_name(c->schedule));
        model_free(&md);
    }
}

static void test_stage_balance(pl_runtime_t *rt) {
    enum { NB = 6 };
    check_measured_balance(rt, 2);
    /* FLOPs, or explicit counts: no timing, the cut never moves. */
    static const int counts[2] = {2, 4};
    const config fixed[] = {
        {PL_SCHEDULE_1F1B, 2, 1, 4, 4, BATCH, NULL},   /* flops */
        {PL_SCHEDULE_1F1B, 2, 1, 4, 4, BATCH, counts}, /* measured */
    };
    for (size_t i = 0; i < 2; i++) {
        model md;
        stage_balance = i == 0 ? PL_STAGE_BALANCE_FLOPS : PL_STAGE_BALANCE_MEASURED;
        if (!model_new(rt, &fixed[i], false, &md)) {
            printf("FAIL: engine for the balance test: %s\n", pl_last_error());
            tu_failures++;
            continue;
        }
        int before[NB], after[NB];
        pl_engine_block_parts(md.e, before);
        bool ok = step(&md, 0, NULL) && step(&md, 1, NULL) && step(&md, 2, NULL);
        pl_engine_block_parts(md.e, after);
        CHECK(ok && pl_engine_block_times(md.e, NULL) == 0,
              "%s: the engine timed a step", i ? "layers_per_stage" : "flops");
        CHECK(memcmp(before, after, sizeof before) == 0, "%s: the cut moved",
              i ? "layers_per_stage" : "flops");
        if (i == 1) CHECK(after[1] == 0 && after[2] == 1, "layers_per_stage {2,4} not kept");
        model_free(&md);
    }
    config bad = {PL_SCHEDULE_1F1B, 2, 1, 4, 4, BATCH, NULL};
    stage_balance = (pl_stage_balance)7;
    expect_invalid(rt, &bad, "stage_balance 7", "stage_balance 7", NULL);
    stage_balance = PL_STAGE_BALANCE_MEASURED;
}

/* A block that spends its time off the CPU, as a task descheduled for
 * another process's time slice does: an identity op whose kernels sleep
 * NAP_MS. The measured balance times kernels by their thread's CPU time,
 * so the naps do not count: the block measures far less than one nap,
 * where its wall time is 4 naps (2 tiles, forward and backward). */
enum { NAP_MS = 5, NAP_IN = 16 };
static pl_status nap_shape(const pl_op_def *def, const char *op, pl_tensor_t *const *in,
                           const void *attrs, pl_op_layout *l) {
    (void)def, (void)op, (void)attrs;
    l->out_ndim = pl_tensor_shape(in[0], l->out_shape);
    l->flops = 1.0 * pl_tensor_numel(in[0]);
    return PL_STATUS_OK;
}
static void nap(void) {
    struct timespec ts = {0, NAP_MS * 1000000L};
    while (nanosleep(&ts, &ts) != 0) continue;
}
static int nap_forward(pl_op_call *c) {
    nap();
    memcpy(c->out, c->in[0], (size_t)(c->samples * c->in_numel[0]) * sizeof(float));
    return 0;
}
static int nap_backward(pl_op_call *c) {
    nap();
    for (int64_t i = 0; i < c->samples * c->in_numel[0]; i++)
        c->dinput[i] = (c->accumulate ? c->dinput[i] : 0) + c->dout[i];
    return 0;
}
static const pl_op_def NAP = {
    .name = "nap", .n_inputs = 1, .shape = nap_shape,
    .forward = {.cpu = nap_forward},
    .backward_input = {{.cpu = nap_backward}},
};

static void test_balance_cpu_time(pl_runtime_t *rt) {
    pl_graph_t *g = pl_graph_new(SEED);
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, (int64_t[]){NAP_IN});
    pl_tensor_t *y = pl_graph_input(g, "y", PL_DTYPE_I32, 0, NULL);
    pl_tensor_t *h = pl_relu(g, pl_linear(g, x, NAP_IN, "fc1"));
    pl_graph_begin_block(g, "nap");
    h = pl_graph_op(g, &NAP, &h, 1, NULL, "nap");
    pl_graph_begin_block(g, "fc2");
    h = pl_relu(g, pl_linear(g, h, NAP_IN, "fc2"));
    pl_graph_begin_block(g, "head");
    pl_status st = pl_graph_set_loss(g, pl_cross_entropy(g, pl_linear(g, h, 4, "head"), y));
    CHECK(st == PL_STATUS_OK, "nap model: %s", pl_last_error());
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = BATCH;
    eo.tiles = 2;
    eo.schedule = PL_SCHEDULE_1F1B;
    eo.stages = 2;
    pl_engine_t *e = st == PL_STATUS_OK ? pl_engine_new(rt, g, &eo) : NULL;
    CHECK(e != NULL, "nap engine: %s", pl_last_error());
    bool ok = e != NULL;
    float xs[BATCH * NAP_IN];
    int32_t ys[BATCH];
    for (int s = 0; ok && s < 2; s++) {
        tu_class_batch(s, BATCH, NAP_IN, xs, ys);
        for (int i = 0; i < BATCH; i++) ys[i] %= 4;
        const void *data[2] = {xs, ys};
        pl_batch b = {.size = BATCH, .data = data};
        ok = pl_engine_train_step(e, &b, NULL) == PL_STATUS_OK;
        CHECK(ok, "nap model, step %d: %s", s, pl_last_error());
    }
    double us[4] = {0};
    int nb = ok ? pl_engine_block_times(e, us) : 0;
    CHECK(nb == 4, "nap model: %d block times after the timed step, expected 4", nb);
    if (nb == 4) {
        CHECK(us[1] > 0 && us[1] < NAP_MS * 1e3 / 2,
              "the sleeping block measured %.0f us: its kernels' CPU time is a few us, one "
              "nap %d ms, its wall time 4 naps (the balance counted time off the CPU)",
              us[1], NAP_MS);
        printf("balance: a block whose 4 kernels sleep %d ms each measured %.0f us (the "
               "others %.0f %.0f %.0f us)\n", NAP_MS, us[1], us[0], us[2], us[3]);
    }
    pl_engine_free(e);
    pl_graph_free(g);
}

int main(void) {
    tu_time_limit(300, "a schedule deadlocked?");
    make_data();
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = WORKERS;
    ro.profiling = true;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) {
        printf("FAIL: pl_runtime_new: %s\n", pl_last_error());
        return 1;
    }
    if (pl_runtime_cpu_workers(rt) < WORKERS) {
        printf("FAIL: the runtime has %d CPU workers, this test needs %d\n",
               pl_runtime_cpu_workers(rt), WORKERS);
        pl_runtime_free(rt);
        return 1;
    }
    test_bad_parameters(rt);
    test_equivalence(rt);
    test_order(rt);
    test_memory(rt);
    test_short_batches(rt);
    test_stage_balance(rt);
    test_balance_cpu_time(rt);
    pl_runtime_free(rt);
    /* Three workers over two stages: stage 0 has two, and the balance
     * gives it about twice the work of stage 1. */
    ro.cpu_workers = 3;
    rt = pl_runtime_new(&ro);
    CHECK(rt != NULL, "runtime with 3 workers: %s", pl_last_error());
    if (rt) check_measured_balance(rt, 1);
    /* The FLOP cut is weighted too, and it is deterministic: the GPT's
     * four equal layers and light ends give stage 0's two workers more
     * blocks (an unweighted cut splits them 3 and 3). */
    config flops = {PL_SCHEDULE_1F1B, 2, 1, 4, 4, BATCH, NULL};
    stage_balance = PL_STAGE_BALANCE_FLOPS;
    model md;
    if (rt && model_new(rt, &flops, false, &md)) {
        int parts[16], nb = pl_graph_num_blocks(md.g), first = 0;
        CHECK(nb <= 16 && pl_engine_block_parts(md.e, parts) == 2, "FLOP cut: parts");
        for (int b = 0; b < nb && b < 16; b++) first += parts[b] == 0;
        CHECK(pl_engine_stage_workers(md.e, 0) == 2 && pl_engine_stage_workers(md.e, 1) == 1 &&
                  first > nb - first,
              "3 workers, FLOP cut: stage 0 (%d workers) has %d of %d blocks, stage 1 (%d "
              "workers) the rest (expected stage 0 more than half)",
              pl_engine_stage_workers(md.e, 0), first, nb, pl_engine_stage_workers(md.e, 1));
        printf("balance: FLOP cut, workers 2 1: stage 0 has %d of %d blocks\n", first, nb);
        model_free(&md);
    } else if (rt) {
        printf("FAIL: engine for the weighted FLOP cut: %s\n", pl_last_error());
        tu_failures++;
    }
    stage_balance = PL_STAGE_BALANCE_MEASURED;
    pl_runtime_free(rt);
    if (tu_failures) {
        printf("%d check(s) failed\n", tu_failures);
        return 1;
    }
    printf("all pipeline checks passed\n");
    return 0;
}
