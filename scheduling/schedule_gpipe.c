/* The built-in GPipe schedule (Huang et al., 2019; pleiades/schedule.h),
 * written against the public interface only, as a user's schedule would
 * be; registered in scheduling/schedule_registry.c (the CLI's --schedule
 * gpipe). Every stage runs the forwards of all microbatches, 0 first,
 * then their backwards, the last microbatch first. One model chunk per
 * stage; any m >= 1. Bubble (p−1)/m like 1F1B's, but all m microbatches'
 * activations are alive at once (1F1B keeps at most p). */
#include "pleiades.h"

/* GPipe has no interleaving: each stage holds one contiguous part. */
static pl_status check(int p, int v, int m) {
    (void)p, (void)m;
    return v == 1 ? PL_STATUS_OK : PL_STATUS_INVALID_ARGUMENT;
}

static int build(const pl_schedule_def *def, int p, int v, int m, int stage,
                 pl_work_item *items, int capacity, void *user) {
    (void)def, (void)p, (void)v, (void)stage, (void)user;
    if (capacity < 2 * m) return -1;
    int n = 0;
    /* Forwards in microbatch order: the first stage starts microbatch 0
     * and the next stage can follow one forward behind. */
    for (int mb = 0; mb < m; mb++)
        pl_schedule_append(items, capacity, &n, (pl_work_item){PL_WORK_F, mb, 0});
    /* Backwards from the last microbatch: its forward finished last on
     * the last stage, so the last stage can turn around at once (GPipe's
     * figure; any order would be valid, and gradients still sum in the
     * engine's fixed order, so losses do not depend on it). */
    for (int mb = m - 1; mb >= 0; mb--)
        pl_schedule_append(items, capacity, &n, (pl_work_item){PL_WORK_B, mb, 0});
    return n;
}

/* Each stage idles p−1 forward and p−1 backward slots of its m + m. */
static double bubble(int p, int v, int m) {
    (void)v;
    return (double)(p - 1) / m;
}

const pl_schedule_def pl_schedule_gpipe = {
    .name = "gpipe", .build = build, .check = check, .bubble = bubble};
