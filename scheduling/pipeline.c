/* 1F1B and interleaved 1F1B stage schedules, and stage partitioning. */
#include <float.h>
#include <stdlib.h>

#include "util/error.h"
#include "scheduling/pipeline.h"

pl_status pl_pipeline_check(pl_schedule_kind kind, int p, int v, int m) {
    if (p < 1 || m < 1)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pipeline: stages %d and microbatches %d must be >= 1", p, m);
    if (kind == PL_SCHEDULE_1F1B) {
        if (v != 1)
            return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                           "1F1B: model chunks %d must be 1 (use the interleaved "
                           "schedule for more)", v);
        if (m < p)
            return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                           "1F1B: microbatches %d must be >= stages %d", m, p);
    } else if (kind == PL_SCHEDULE_INTERLEAVED) {
        if (v < 2)
            return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                           "interleaved: model chunks %d must be > 1", v);
        if (m % p != 0)
            return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                           "interleaved: microbatches %d must be a multiple of "
                           "stages %d", m, p);
    }
    return PL_STATUS_OK;
}

static pl_pipeline_item virtual_item(int p, int v, int k, pl_direction dir) {
    int group = k % (p * v);
    int chunk = group / p;
    if (dir == PL_DIRECTION_BACKWARD) chunk = v - 1 - chunk;
    return (pl_pipeline_item){dir, (k / (p * v)) * p + k % p, chunk};
}

int pl_pipeline_stage_items(pl_schedule_kind kind, int p, int v, int m, int s,
                            pl_pipeline_item *items) {
    int n = 0;
    if (kind == PL_SCHEDULE_1F1B) {
        int warmup = p - s - 1 < m ? p - s - 1 : m;
        int f = 0, b = 0;
        for (; f < warmup; f++)
            items[n++] = (pl_pipeline_item){PL_DIRECTION_FORWARD, f, 0};
        for (; f < m; f++, b++) {
            items[n++] = (pl_pipeline_item){PL_DIRECTION_FORWARD, f, 0};
            items[n++] = (pl_pipeline_item){PL_DIRECTION_BACKWARD, b, 0};
        }
        for (; b < m; b++) items[n++] = (pl_pipeline_item){PL_DIRECTION_BACKWARD, b, 0};
        return n;
    }
    int total = m * v;
    int warmup = 2 * (p - s - 1) + (v - 1) * p;
    if (warmup > total) warmup = total;
    int f = 0, b = 0;
    for (; f < warmup; f++) items[n++] = virtual_item(p, v, f, PL_DIRECTION_FORWARD);
    for (; f < total; f++, b++) {
        items[n++] = virtual_item(p, v, f, PL_DIRECTION_FORWARD);
        items[n++] = virtual_item(p, v, b, PL_DIRECTION_BACKWARD);
    }
    for (; b < total; b++) items[n++] = virtual_item(p, v, b, PL_DIRECTION_BACKWARD);
    return n;
}

/* Linear partition by dynamic programming: best[k][i] is the smallest
 * possible maximum part cost when the first i blocks form k parts. */
static void partition_balanced(const double *cost, int n, int parts, int *block_part) {
    double *prefix = calloc(n + 1, sizeof *prefix);
    double *best = malloc((size_t)(parts + 1) * (n + 1) * sizeof *best);
    int *cut = malloc((size_t)(parts + 1) * (n + 1) * sizeof *cut);
    for (int i = 0; i < n; i++) prefix[i + 1] = prefix[i] + cost[i];
#define BEST(k, i) best[(size_t)(k) * (n + 1) + (i)]
#define CUT(k, i) cut[(size_t)(k) * (n + 1) + (i)]
    for (int i = 0; i <= n; i++) BEST(1, i) = prefix[i], CUT(1, i) = 0;
    for (int k = 2; k <= parts; k++)
        for (int i = k; i <= n; i++) {
            BEST(k, i) = DBL_MAX;
            for (int j = k - 1; j < i; j++) {
                double last = prefix[i] - prefix[j];
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
    free(prefix);
    free(best);
    free(cut);
}

pl_status pl_pipeline_partition(const double *cost, int n_blocks, int n_parts,
                                const int *counts, int *block_part) {
    if (n_parts > n_blocks)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pipeline: %d stage parts (stages x chunks) but the model "
                       "has only %d blocks", n_parts, n_blocks);
    if (!counts) {
        partition_balanced(cost, n_blocks, n_parts, block_part);
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

double pl_pipeline_bubble(pl_schedule_kind kind, int p, int v, int m) {
    switch (kind) {
    case PL_SCHEDULE_1F1B: return (double)(p - 1) / m;
    case PL_SCHEDULE_INTERLEAVED: return (double)(p - 1) / ((double)v * m);
    default: return 0.0;
    }
}
