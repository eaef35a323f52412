/* The built-in zero-bubble ZB-H1 schedule (pleiades/schedule.h), a
 * pl_schedule_def written like a user's; registered in
 * scheduling/schedule_registry.c. */
#include "util/error.h"
#include "pleiades.h"

/* ZB-H1 has 1F1B's preconditions: one chunk, any m (1F1B's warm-up
 * min(p−s−1, m), so m < p runs as 1F1B does). */
static pl_status check_zb_h1(int p, int v, int m) {
    (void)p, (void)m;
    if (v != 1)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "ZB-H1: model chunks %d must be 1", v);
    return PL_STATUS_OK;
}

/* The weight gradient of microbatch j waits on stage s until the input
 * gradient of j + s is done: the last stage, which idles longest at the
 * end of 1F1B, defers the most (p−1) and stage 0, which already holds p
 * microbatches in flight, none. */
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

/* The paper's ZB-H1 idle time per stage, (p−1)(T_F + T_B − T_W), over
 * its busy time m(T_F + T_B + T_W): the cool-down's W's fill all but
 * T_F + T_B − T_W of each of the p−1 slots 1F1B leaves idle. With m < p
 * only m − 1 W's are left to defer into those slots (the paper assumes
 * m >= p): idle (p−1)(T_F + T_B) − (m−1)·T_W, which is what running the
 * lists with these times gives (checked against such a simulation for
 * p <= 4, m <= 8 while writing this). */
static double bubble_zb_h1_measured(int p, int v, int m, const pl_item_times *t) {
    (void)v;
    double busy = (double)m * (t->f + t->b + t->w);
    int deferred = m - 1 < p - 1 ? m - 1 : p - 1;
    double idle = (double)(p - 1) * (t->f + t->b) - deferred * t->w;
    return busy > 0 && idle > 0 ? idle / busy : 0.0;
}

/* F, B and W alike: (p−1)/(3m) for m >= p. */
static double bubble_zb_h1(int p, int v, int m) {
    return bubble_zb_h1_measured(p, v, m, &(pl_item_times){1, 1, 1});
}

const pl_schedule_def pl_schedule_zb_h1 = {
    .name = "zb-h1", .build = build_zb_h1, .check = check_zb_h1, .bubble = bubble_zb_h1,
    .bubble_measured = bubble_zb_h1_measured};
