/* The built-in schedules 1F1B and interleaved 1F1B, written as
 * pl_schedule_defs like a user's, and stage partitioning. */
#include <float.h>
#include <stdlib.h>

#include "util/error.h"
#include "scheduling/pipeline.h"

/* Each built-in check keeps the messages the engine has always given. */
static pl_status check_1f1b(int p, int v, int m) {
    if (v != 1)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "1F1B: model chunks %d must be 1 (use the interleaved "
                       "schedule for more)", v);
    if (m < p)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "1F1B: microbatches %d must be >= stages %d", m, p);
    return PL_STATUS_OK;
}

static pl_status check_interleaved(int p, int v, int m) {
    if (v < 2)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "interleaved: model chunks %d must be > 1", v);
    if (m % p != 0)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "interleaved: microbatches %d must be a multiple of "
                       "stages %d", m, p);
    return PL_STATUS_OK;
}

static int build_1f1b(const pl_schedule_def *def, int p, int v, int m, int s,
                      pl_work_item *items, int capacity, void *user) {
    (void)def, (void)v, (void)capacity, (void)user;
    int n = 0;
    int warmup = p - s - 1 < m ? p - s - 1 : m;
    int f = 0, b = 0;
    for (; f < warmup; f++) items[n++] = (pl_work_item){PL_WORK_F, f, 0};
    for (; f < m; f++, b++) {
        items[n++] = (pl_work_item){PL_WORK_F, f, 0};
        items[n++] = (pl_work_item){PL_WORK_B, b, 0};
    }
    for (; b < m; b++) items[n++] = (pl_work_item){PL_WORK_B, b, 0};
    return n;
}

static pl_work_item virtual_item(int p, int v, int k, pl_work_kind kind) {
    int group = k % (p * v);
    int chunk = group / p;
    if (kind == PL_WORK_B) chunk = v - 1 - chunk;
    return (pl_work_item){kind, (k / (p * v)) * p + k % p, chunk};
}

static int build_interleaved(const pl_schedule_def *def, int p, int v, int m, int s,
                             pl_work_item *items, int capacity, void *user) {
    (void)def, (void)capacity, (void)user;
    int n = 0;
    int total = m * v;
    int warmup = 2 * (p - s - 1) + (v - 1) * p;
    /* Colossal-AI's InterleavedPipelineSchedule (like Megatron's) runs every
     * forward first when m == p (all_warmup_microbatches): with as many
     * microbatches as stages there is no steady 1F1B phase to gain from. */
    if (warmup > total || m == p) warmup = total;
    int f = 0, b = 0;
    for (; f < warmup; f++) items[n++] = virtual_item(p, v, f, PL_WORK_F);
    for (; f < total; f++, b++) {
        items[n++] = virtual_item(p, v, f, PL_WORK_F);
        items[n++] = virtual_item(p, v, b, PL_WORK_B);
    }
    for (; b < total; b++) items[n++] = virtual_item(p, v, b, PL_WORK_B);
    return n;
}

static double bubble_1f1b(int p, int v, int m) {
    (void)v;
    return (double)(p - 1) / m;
}

static double bubble_interleaved(int p, int v, int m) {
    return (double)(p - 1) / ((double)v * m);
}

/* ZB-H1 (see pleiades/schedule.h). The weight gradient of microbatch j
 * waits on stage s until the input gradient of j + s is done: the last
 * stage, which idles longest at the end of 1F1B, defers the most (p−1)
 * and stage 0, which already holds p microbatches in flight, none. */
static int build_zb_h1(const pl_schedule_def *def, int p, int v, int m, int s,
                       pl_work_item *items, int capacity, void *user) {
    (void)def, (void)v, (void)capacity, (void)user;
    int n = 0;
    int warmup = p - s - 1 < m ? p - s - 1 : m;
    int f = 0, b = 0, w = 0;
    for (; f < warmup; f++) items[n++] = (pl_work_item){PL_WORK_F, f, 0};
    for (; b < m; b++) {
        if (f < m) items[n++] = (pl_work_item){PL_WORK_F, f++, 0};
        items[n++] = (pl_work_item){PL_WORK_B, b, 0};
        if (b - w >= s) items[n++] = (pl_work_item){PL_WORK_W, w++, 0};
    }
    for (; w < m; w++) items[n++] = (pl_work_item){PL_WORK_W, w, 0};
    return n;
}

/* F, B and W alike: each stage idles (p−1)·(F + B − W) of m·(F + B + W). */
static double bubble_zb_h1(int p, int v, int m) {
    (void)v;
    return (double)(p - 1) / (3.0 * m);
}

const pl_schedule_def pl_schedule_1f1b = {
    .name = "1f1b", .build = build_1f1b, .check = check_1f1b, .bubble = bubble_1f1b};
const pl_schedule_def pl_schedule_interleaved = {
    .name = "interleaved", .build = build_interleaved, .check = check_interleaved,
    .bubble = bubble_interleaved};

/* ZB-H1 has 1F1B's preconditions: 1F1B's warm-up and steady phase. */
static pl_status check_zb_h1(int p, int v, int m) {
    if (v != 1)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "ZB-H1: model chunks %d must be 1", v);
    if (m < p)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "ZB-H1: microbatches %d must be >= stages %d", m, p);
    return PL_STATUS_OK;
}

/* The paper's ZB-H1 idle time per stage, (p−1)(T_F + T_B − T_W), over
 * its busy time m(T_F + T_B + T_W): the cool-down's W's fill all but
 * T_F + T_B − T_W of each of the p−1 slots 1F1B leaves idle. */
static double bubble_zb_h1_measured(int p, int v, int m, const pl_item_times *t) {
    (void)v;
    double busy = (double)m * (t->f + t->b + t->w);
    double idle = (double)(p - 1) * (t->f + t->b - t->w);
    return busy > 0 && idle > 0 ? idle / busy : 0.0;
}

const pl_schedule_def pl_schedule_zb_h1 = {
    .name = "zb-h1", .build = build_zb_h1, .check = check_zb_h1, .bubble = bubble_zb_h1,
    .bubble_measured = bubble_zb_h1_measured};

const pl_schedule_def *pl_pipeline_builtin(pl_schedule_kind kind) {
    switch (kind) {
    case PL_SCHEDULE_1F1B: return &pl_schedule_1f1b;
    case PL_SCHEDULE_ZB_H1: return &pl_schedule_zb_h1;
    case PL_SCHEDULE_INTERLEAVED: return &pl_schedule_interleaved;
    default: return NULL;
    }
}

/* Linear partition by dynamic programming: best[k][i] is the smallest
 * possible maximum part cost when the first i blocks form k parts. */
static void partition_balanced(const double *cost, int n, int parts, const double *capacity,
                               int *block_part) {
    double *prefix = calloc(n + 1, sizeof *prefix);
    double *best = malloc((size_t)(parts + 1) * (n + 1) * sizeof *best);
    int *cut = malloc((size_t)(parts + 1) * (n + 1) * sizeof *cut);
    for (int i = 0; i < n; i++) prefix[i + 1] = prefix[i] + cost[i];
#define BEST(k, i) best[(size_t)(k) * (n + 1) + (i)]
#define CUT(k, i) cut[(size_t)(k) * (n + 1) + (i)]
#define CAP(k) (capacity ? capacity[(k) - 1] : 1.0) /* of the k-th part */
    for (int i = 0; i <= n; i++) BEST(1, i) = prefix[i] / CAP(1), CUT(1, i) = 0;
    for (int k = 2; k <= parts; k++)
        for (int i = k; i <= n; i++) {
            BEST(k, i) = DBL_MAX;
            for (int j = k - 1; j < i; j++) {
                double last = (prefix[i] - prefix[j]) / CAP(k);
                double worst = BEST(k - 1, j) > last ? BEST(k - 1, j) : last;
                if (worst < BEST(k, i)) BEST(k, i) = worst, CUT(k, i) = j;
            }
        }
    for (int k = parts, i = n; k >= 1; k--) {
        int j = k == 1 ? 0 : CUT(k, i);
        for (int b = j; b < i; b++) block_part[b] = k - 1;
        i = j;
    }
#undef BEST
#undef CUT
#undef CAP
    free(prefix);
    free(best);
    free(cut);
}

pl_status pl_pipeline_partition(const double *cost, int n_blocks, int n_parts,
                                const double *capacity, const int *counts,
                                int *block_part) {
    if (n_parts > n_blocks)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pipeline: %d stage parts (stages x chunks) but the model "
                       "has only %d blocks", n_parts, n_blocks);
    if (!counts) {
        for (int k = 0; capacity && k < n_parts; k++)
            if (!(capacity[k] > 0))
                return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                               "pipeline: part %d has capacity %g, must be > 0", k,
                               capacity[k]);
        partition_balanced(cost, n_blocks, n_parts, capacity, block_part);
        return PL_STATUS_OK;
    }
    int sum = 0;
    for (int k = 0; k < n_parts; k++) {
        if (counts[k] < 1)
            return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                           "layers per stage: part %d has %d blocks, must be >= 1",
                           k, counts[k]);
        sum += counts[k];
    }
    if (sum != n_blocks)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "layers per stage: the counts add up to %d blocks but the "
                       "model has %d", sum, n_blocks);
    for (int k = 0, b = 0; k < n_parts; k++)
        for (int i = 0; i < counts[k]; i++) block_part[b++] = k;
    return PL_STATUS_OK;
}
