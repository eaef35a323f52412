/* The ZB-V schedule (--schedule zbv, scheduling/schedule_zbv.c), public
 * API only: it is found by name, as a user's program finds it.
 *
 * 1. Validation: ZB-V passes pl_schedule_validate for p = 1..4 and m =
 *    1..9; v != 2 is refused ("ZB-V: model chunks 3 must be 2"); a user
 *    placement (pl_schedule_def.part) that puts two chunks on one part,
 *    or one outside 0..p·v−1, is refused naming the schedule; the
 *    placement is the V (pl_schedule_part: chunk 0 of stage s on part s,
 *    chunk 1 on part 2p−1−s).
 * 2. Equivalence: a GPT (V=256 T=16 C=32 L=6: 8 blocks) trained 3 steps
 *    with ZB-V p=2 m=4, p=4 m=4 and p=4 m=2 (fewer microbatches than
 *    stages) gives BIT FOR BIT the losses and every parameter of the
 *    non-pipelined run with as many tiles (memcmp).
 * 3. Order: with record_tasks and one worker per stage, per stage, the
 *    F/L/B/W records in the order the policy started them, consecutive
 *    records of one item collapsed, equal the lists re-derived here from
 *    the ZB-V rules (below; written for this test, not taken from the
 *    library), for p=2 m=4, p=2 m=8, p=4 m=4, p=4 m=8; the stages run on
 *    the V (task records' stage and chunk of each block's tasks). Memory:
 *    a (microbatch, chunk) is live on its stage from the start of its
 *    first F task to the end of its last W task; at no time may a stage
 *    hold more than 2p of them, i.e. p whole-stage microbatches (each
 *    chunk is half a stage): 1F1B's peak (its stage 0 holds p). The
 *    theoretical bubble (pl_engine_theoretical_bubble) is the re-derived
 *    lists run here with the step's mean F, B, W item times (summed here
 *    from the records, which pl_engine_item_times must equal).
 *
 * The ZB-V rules, as re-derived here: every item takes one time unit and
 * may start once the items it depends on finished in an earlier unit (F
 * of model part k after F of part k−1, B of part k after F of part k and
 * B of part k+1, W of part k after B of part k; F, B and W of one chunk in
 * microbatch order). At each unit every free stage looks at all its items
 * that may start and takes the first by: B before F of chunk 1 before F
 * of chunk 0 before W; then the older microbatch; then chunk 1. F of
 * chunk 0 (a new microbatch on the stage) only while the stage's live
 * (microbatch, chunk) activations plus one per admitted microbatch still
 * to start its chunk 1, plus 2, stay within 2p.
 *
 * A schedule that deadlocks would hang: an alarm fails the test after
 * 300 s. Exit status 0 on success; every failed check prints a FAIL. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pleiades.h"
#include "test_util.h"

enum { V = 256, T = 16, C = 32, NH = 4, LAYERS = 6, BATCH = 8, STEPS = 3, WORKERS = 4 };
enum { MAXP = 4, MAXM = 8, MAXITEMS = 6 * MAXM };

static const pl_schedule_def *zbv(void) { return pl_schedule_find("zbv"); }

/* ------------------------------------------------- the rules, re-derived */

typedef struct item {
    char kind; /* 'F', 'B', 'W' */
    int mb, chunk;
} item;

static int kind_index(char k) { return k == 'F' ? 0 : k == 'B' ? 1 : 2; }
static int v_part(int p, int s, int c) { return c == 0 ? s : 2 * p - 1 - s; }

/* Every stage's list: lists[s][0..n[s]). */
static void derive(int p, int m, item lists[MAXP][MAXITEMS], int n[MAXP]) {
    /* end[kind][mb][part]: the unit the item finished in, 0 = not run */
    static int end[3][MAXM][2 * MAXP];
    memset(end, 0, sizeof end);
    int live[MAXP] = {0}, turning[MAXP] = {0}, free_at[MAXP] = {0}, left = 6 * m * p;
    for (int s = 0; s < p; s++) n[s] = 0;
    for (int t = 0; left > 0 && t < 10000; t++)
        for (int s = 0; s < p; s++) {
            if (free_at[s] > t) continue;
            item best = {0, 0, 0};
            int best_key = -1;
            for (int kd = 0; kd < 3; kd++)
                for (int mb = 0; mb < m; mb++)
                    for (int c = 0; c < 2; c++) {
                        int k = v_part(p, s, c);
                        if (end[kd][mb][k]) continue;                     /* done */
                        if (mb > 0 && !end[kd][mb - 1][k]) continue;      /* in order */
#define FIN(kk, pp) (end[kk][mb][pp] > 0 && end[kk][mb][pp] <= t)
                        bool ok = kd == 0   ? k == 0 || FIN(0, k - 1)
                                  : kd == 1 ? FIN(0, k) && (k == 2 * p - 1 || FIN(1, k + 1))
                                            : FIN(1, k);
#undef FIN
                        if (!ok) continue;
                        if (kd == 0 && c == 0 && live[s] + turning[s] + 2 > 2 * p) continue;
                        int rank = kd == 1 ? 0 : kd == 0 ? (c == 1 ? 1 : 2) : 3;
                        /* rank, then the older microbatch, then chunk 1 */
                        int key = (rank * (MAXM + 1) + mb) * 2 + (1 - c);
                        if (best_key < 0 || key < best_key) {
                            best = (item){"FBW"[kd], mb, c};
                            best_key = key;
                        }
                    }
            if (best_key < 0) continue;
            int kd = kind_index(best.kind), k = v_part(p, s, best.chunk);
            end[kd][best.mb][k] = t + 1;
            free_at[s] = t + 1;
            if (kd == 0) live[s]++, turning[s] += best.chunk == 0 ? 1 : -1;
            if (kd == 2) live[s]--;
            lists[s][n[s]++] = best;
            left--;
        }
    CHECK(left == 0, "the re-derived ZB-V p=%d m=%d got stuck", p, m);
}

/* The lists run with item times f, b, w (each stage takes its next item
 * once free and the item's dependencies are done): idle over busy. */
static double list_bubble(int p, int m, item lists[MAXP][MAXITEMS], const int n[MAXP],
                          double f, double b, double w) {
    static double end[3][MAXM][2 * MAXP];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < MAXM; j++)
            for (int k = 0; k < 2 * MAXP; k++) end[i][j][k] = -1;
    int pos[MAXP] = {0};
    double free_at[MAXP] = {0}, span = 0;
    for (bool moved = true; moved;) {
        moved = false;
        for (int s = 0; s < p; s++)
            for (; pos[s] < n[s]; pos[s]++) {
                const item *it = &lists[s][pos[s]];
                int k = v_part(p, s, it->chunk), mb = it->mb;
                double dep = 0, d1 = 0, d2 = 0;
                if (it->kind == 'F') d1 = k > 0 ? end[0][mb][k - 1] : 0;
                else if (it->kind == 'B')
                    d1 = end[0][mb][k], d2 = k + 1 < 2 * p ? end[1][mb][k + 1] : 0;
                else d1 = end[1][mb][k];
                if (d1 < 0 || d2 < 0) break;
                dep = d1 > d2 ? d1 : d2;
                double start = dep > free_at[s] ? dep : free_at[s];
                double len = it->kind == 'F' ? f : it->kind == 'B' ? b : w;
                free_at[s] = end[kind_index(it->kind)][mb][k] = start + len;
                if (free_at[s] > span) span = free_at[s];
                moved = true;
            }
    }
    double busy = 2.0 * m * (f + b + w);
    return span > busy ? (span - busy) / busy : 0.0;
}

/* ---------------------------------------------------------- validation */

static int bad_part_same(int p, int v, int s, int c) { (void)p, (void)v, (void)s; return c; }
static int bad_part_out(int p, int v, int s, int c) { return s + c * p + (s == 0 ? p * v : 0); }

static void test_validation(void) {
    const pl_schedule_def *d = zbv();
    CHECK(d != NULL, "no schedule named zbv: %s", pl_last_error());
    if (!d) return;
    for (int p = 1; p <= 4; p++)
        for (int m = 1; m <= 9; m++)
            CHECK(pl_schedule_validate(d, p, 2, m) == PL_STATUS_OK, "zbv p=%d m=%d refused: %s",
                  p, m, pl_last_error());
    pl_status st = pl_schedule_validate(d, 2, 3, 4);
    tu_expect_error(__LINE__, "zbv v=3", st, PL_STATUS_INVALID_ARGUMENT,
                    "ZB-V: model chunks 3 must be 2", NULL);
    bool v_shape = true;
    for (int p = 1; p <= 4; p++)
        for (int s = 0; s < p; s++)
            v_shape = v_shape && pl_schedule_part(d, p, 2, s, 0) == s &&
                      pl_schedule_part(d, p, 2, s, 1) == 2 * p - 1 - s;
    CHECK(v_shape, "zbv's placement is not the V (stage s: parts s and 2p-1-s)");
    CHECK(pl_schedule_part(&pl_schedule_interleaved, 4, 2, 1, 1) == 5 &&
              pl_schedule_part(NULL, 4, 2, 1, 1) == 5,
          "the default placement is s + c*p");
    pl_schedule_def same = *d, out = *d;
    same.name = "zbv-same";
    same.part = bad_part_same;
    st = pl_schedule_validate(&same, 2, 2, 4);
    tu_expect_error(__LINE__, "placement: two chunks on one part", st,
                    PL_STATUS_INVALID_ARGUMENT, "schedule 'zbv-same': its part function places "
                    "chunk 0 of stage 0 and chunk 0 of stage 1 both on part 0", NULL);
    out.name = "zbv-out";
    out.part = bad_part_out;
    st = pl_schedule_validate(&out, 2, 2, 4);
    tu_expect_error(__LINE__, "placement: outside the parts", st, PL_STATUS_INVALID_ARGUMENT,
                    "schedule 'zbv-out': its part function places chunk 0 of stage 0 on part "
                    "4, outside 0..3", NULL);
}

/* ------------------------------------------------------------ training */

static int32_t tokens[STEPS][BATCH * T], targets[STEPS][BATCH * T];

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

/* p 0: non-pipelined with m tiles. */
static bool model_new(pl_runtime_t *rt, int p, int m, bool record, model *md) {
    md->e = NULL;
    md->g = pl_graph_new(2468);
    pl_gpt_config gc = {.vocab = V, .context = T, .channels = C, .layers = LAYERS, .heads = NH};
    pl_gpt_model gm;
    if (!md->g || pl_gpt_build(md->g, &gc, &gm) != PL_STATUS_OK) return false;
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = BATCH;
    eo.tiles = m;
    eo.schedule_def = p ? zbv() : NULL;
    eo.stages = p;
    eo.model_chunks = p ? 2 : 0;
    eo.workers_per_stage = p ? 1 : 0;
    eo.record_tasks = record;
    md->e = pl_engine_new(rt, md->g, &eo);
    return md->e != NULL;
}

static bool train(pl_runtime_t *rt, int p, int m, double *losses, float **params, int64_t *n) {
    model md;
    *params = NULL;
    *n = 0;
    if (!model_new(rt, p, m, false, &md)) {
        printf("FAIL: engine zbv p=%d m=%d: %s\n", p, m, pl_last_error());
        tu_failures++;
        model_free(&md);
        return false;
    }
    bool ok = true;
    for (int s = 0; ok && s < STEPS; s++)
        ok = tu_train_tokens(md.e, tokens[s], targets[s], BATCH, s, &losses[s]);
    *n = tu_read_params(md.g, md.e, NULL);
    *params = tu_xmalloc((size_t)(*n > 0 ? *n : 1) * sizeof **params);
    ok = ok && tu_read_params(md.g, md.e, *params) == *n;
    model_free(&md);
    return ok;
}

static void test_equivalence(pl_runtime_t *rt) {
    const struct { int p, m; } runs[] = {{2, 4}, {4, 4}, {4, 2}};
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        int p = runs[i].p, m = runs[i].m;
        double ref[STEPS], got[STEPS];
        float *rp = NULL, *gp = NULL;
        int64_t rn = 0, gn = 0;
        bool ok = train(rt, 0, m, ref, &rp, &rn) && train(rt, p, m, got, &gp, &gn);
        if (ok) {
            int bad = memcmp(ref, got, sizeof ref) != 0;
            int64_t diff = rn == gn ? 0 : -1;
            for (int64_t k = 0; rn == gn && k < rn; k++)
                diff += memcmp(&rp[k], &gp[k], sizeof(float)) != 0;
            CHECK(bad == 0 && diff == 0, "zbv p=%d m=%d: losses %s, %lld of %lld parameters "
                  "differ from the non-pipelined run's", p, m, bad ? "differ" : "equal",
                  (long long)diff, (long long)rn);
            CHECK(ref[STEPS - 1] < ref[0], "none m=%d: the loss did not decrease", m);
            printf("equivalence: zbv p=%d m=%d: losses %.9g .. %.9g, %lld parameters: %s\n", p,
                   m, got[0], got[STEPS - 1], (long long)gn,
                   bad == 0 && diff == 0 ? "bitwise equal to none" : "DIFFER");
        }
        free(rp);
        free(gp);
    }
}

/* --------------------------------------------------------------- order */

static int cmp_started(const void *a, const void *b) {
    const pl_task_record *x = *(const pl_task_record *const *)a;
    const pl_task_record *y = *(const pl_task_record *const *)b;
    if (x->start_order != y->start_order) return x->start_order < y->start_order ? -1 : 1;
    return (x->start_us > y->start_us) - (x->start_us < y->start_us);
}

static void print_items(const char *what, const item *it, int n) {
    printf("    %s:", what);
    for (int i = 0; i < n; i++) printf(" %c%d%c", it[i].kind, it[i].mb, "ab"[it[i].chunk]);
    printf("\n");
}

static void check_order(pl_runtime_t *rt, int p, int m) {
    model md;
    if (!model_new(rt, p, m, true, &md)) {
        printf("FAIL: zbv p=%d m=%d with records: %s\n", p, m, pl_last_error());
        tu_failures++;
        model_free(&md);
        return;
    }
    if (!tu_train_tokens(md.e, tokens[0], targets[0], BATCH, 0, NULL) ||
        !tu_train_tokens(md.e, tokens[1], targets[1], BATCH, 1, NULL)) {
        model_free(&md);
        return;
    }
    static item want[MAXP][MAXITEMS];
    int nw[MAXP];
    derive(p, m, want, nw);
    /* Parts with B tasks: all but a part that is the embedding alone. */
    int nb = pl_graph_num_blocks(md.g), parts[64];
    CHECK(nb <= 64 && pl_engine_block_parts(md.e, parts) == 2 * p, "zbv p=%d: parts", p);
    bool has_b[2 * MAXP] = {false};
    for (int b = 1; b < nb; b++) has_b[parts[b]] = true;
    const pl_task_record *rec;
    int n = pl_engine_task_records(md.e, &rec);
    const pl_task_record **sel = tu_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *sel);
    bool on_v = true; /* every record's chunk and microbatch in range */
    int peak_pairs = 0, peak_mbs = 0;
    for (int s = 0; s < p; s++) {
        int k = 0;
        for (int i = 0; i < n; i++)
            if (rec[i].phase && strchr("FLBW", rec[i].phase) && rec[i].stage == s)
                sel[k++] = &rec[i];
        qsort(sel, k, sizeof *sel, cmp_started);
        item got[4 * MAXITEMS];
        int ng = 0;
        double first[MAXM][2], last[MAXM][2];
        for (int mb = 0; mb < MAXM; mb++)
            for (int c = 0; c < 2; c++) first[mb][c] = 1e300, last[mb][c] = -1e300;
        for (int i = 0; i < k; i++) {
            const pl_task_record *r = sel[i];
            item it = {r->phase == 'L' ? 'F' : r->phase, r->microbatch, r->chunk};
            if (r->chunk < 0 || r->chunk > 1 || r->microbatch < 0 || r->microbatch >= m) {
                on_v = false;
                continue;
            }
            if (it.kind == 'F' && r->start_us < first[it.mb][it.chunk])
                first[it.mb][it.chunk] = r->start_us;
            if (it.kind == 'W' && r->end_us > last[it.mb][it.chunk])
                last[it.mb][it.chunk] = r->end_us;
            if (ng > 0 && got[ng - 1].kind == it.kind && got[ng - 1].mb == it.mb &&
                got[ng - 1].chunk == it.chunk)
                continue;
            if (ng < 4 * MAXITEMS) got[ng++] = it;
        }
        item exp[MAXITEMS];
        int ne = 0;
        for (int i = 0; i < nw[s]; i++)
            if (want[s][i].kind != 'B' || has_b[v_part(p, s, want[s][i].chunk)])
                exp[ne++] = want[s][i];
        bool same = ne == ng;
        for (int i = 0; same && i < ne; i++)
            same = exp[i].kind == got[i].kind && exp[i].mb == got[i].mb &&
                   exp[i].chunk == got[i].chunk;
        CHECK(same, "zbv p=%d m=%d: stage %d ran its items out of the ZB-V order", p, m, s);
        if (!same || getenv("PL_TEST_VERBOSE")) {
            print_items("expected", exp, ne);
            print_items("observed", got, ng);
        }
        /* Live (microbatch, chunk) pairs: at the start of each F, count
         * the pairs started at or before it and not yet past their W. */
        for (int a = 0; a < m; a++)
            for (int ca = 0; ca < 2; ca++) {
                double t = first[a][ca];
                if (t > 1e299) continue;
                int pairs = 0, mbs = 0;
                for (int b = 0; b < m; b++) {
                    bool any = false;
                    for (int cb = 0; cb < 2; cb++) {
                        bool live = first[b][cb] <= t && last[b][cb] > t;
                        pairs += live;
                        any = any || live;
                    }
                    mbs += any;
                }
                if (pairs > peak_pairs) peak_pairs = pairs;
                if (mbs > peak_mbs) peak_mbs = mbs;
            }
        for (int mb = 0; mb < m; mb++)
            for (int c = 0; c < 2; c++)
                CHECK(first[mb][c] < last[mb][c], "zbv p=%d m=%d stage %d: microbatch %d, chunk "
                      "%d has no F or W record", p, m, s, mb, c);
    }
    CHECK(on_v, "zbv p=%d m=%d: a task record with a chunk or microbatch out of range", p, m);
    CHECK(peak_pairs <= 2 * p, "zbv p=%d m=%d: %d (microbatch, chunk) activations live on a "
          "stage, %.1f whole-stage microbatches; 1F1B's peak is %d", p, m, peak_pairs,
          peak_pairs / 2.0, p);
    printf("order: zbv p=%d m=%d: every stage in the re-derived ZB-V order; at most %d "
           "(microbatch, chunk) activations live on a stage (%.1f whole-stage microbatches, "
           "1F1B's bound %d; %d distinct microbatches)\n", p, m, peak_pairs, peak_pairs / 2.0,
           p, peak_mbs);
    /* The theory: the re-derived lists run with the measured item times. */
    double sum[3] = {0, 0, 0};
    for (int i = 0; i < n; i++) {
        char ph = rec[i].phase;
        if (rec[i].stage < 0 || !ph || !strchr("FLBW", ph)) continue;
        sum[ph == 'F' || ph == 'L' ? 0 : ph == 'B' ? 1 : 2] += rec[i].end_us - rec[i].start_us;
    }
    double f = sum[0] / (2.0 * p * m), b = sum[1] / (2.0 * p * m), w = sum[2] / (2.0 * p * m);
    pl_item_times t;
    CHECK(pl_engine_item_times(md.e, &t) == PL_STATUS_OK, "item times: %s", pl_last_error());
    CHECK(fabs(t.f - f) <= 1e-9 * f && fabs(t.b - b) <= 1e-9 * b && fabs(t.w - w) <= 1e-9 * w,
          "item times F/B/W %g/%g/%g us, the records give %g/%g/%g", t.f, t.b, t.w, f, b, w);
    double theory = list_bubble(p, m, want, nw, f, b, w);
    double got_theory = pl_engine_theoretical_bubble(md.e);
    CHECK(fabs(got_theory - theory) <= 1e-9 * (theory > 1 ? theory : 1),
          "zbv p=%d m=%d: theoretical bubble %.6f, the re-derived lists with F %.0f B %.0f W "
          "%.0f us give %.6f", p, m, got_theory, f, b, w, theory);
    printf("theory: zbv p=%d m=%d: F %.0f B %.0f W %.0f us -> bubble %.4f (equal times %.4f)\n",
           p, m, f, b, w, got_theory, list_bubble(p, m, want, nw, 1, 1, 1));
    free(sel);
    model_free(&md);
}

int main(void) {
    tu_time_limit(300, "a schedule deadlocked?");
    test_validation();
    uint64_t seed = 31;
    for (int s = 0; s < STEPS; s++) tu_ramp_tokens(&seed, V, T, BATCH, tokens[s], targets[s]);
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = WORKERS;
    ro.profiling = true;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) {
        printf("FAIL: pl_runtime_new: %s\n", pl_last_error());
        return 1;
    }
    if (!tu_pipeline_skipped(rt, 4, "zbv")) {
        test_equivalence(rt);
        check_order(rt, 2, 4);
        check_order(rt, 2, 8);
        check_order(rt, 4, 4);
        check_order(rt, 4, 8);
    }
    pl_runtime_free(rt);
    if (tu_failures) {
        printf("%d check(s) failed\n", tu_failures);
        return 1;
    }
    printf("all zbv checks passed\n");
    return 0;
}
