/* Stage partitioning. (The built-in schedules are one file each,
 * scheduling/schedule_*.c, listed in scheduling/schedule_registry.c.) */
#include <float.h>
#include <stdlib.h>

#include "util/error.h"
#include "scheduling/pipeline.h"

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
