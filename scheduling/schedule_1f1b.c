/* The built-in 1F1B schedule (pleiades/schedule.h), a pl_schedule_def
 * written like a user's; registered in scheduling/schedule_registry.c. */
#include "util/error.h"
#include "pleiades.h"

/* One chunk per stage. Any m >= 1: with fewer microbatches than stages
 * the warm-up min(p−s−1, m) is every forward on the first stages, as in
 * Megatron's and Colossal-AI's 1F1B (num_warmup_microbatches = min(p−s−1,
 * num_microbatches)); the steady phase is then empty there. */
static pl_status check_1f1b(int p, int v, int m) {
    (void)p, (void)m;
    if (v != 1)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "1F1B: model chunks %d must be 1 (use the interleaved "
                       "schedule for more)", v);
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

static double bubble_1f1b(int p, int v, int m) {
    (void)v;
    return (double)(p - 1) / m;
}

const pl_schedule_def pl_schedule_1f1b = {
    .name = "1f1b", .build = build_1f1b, .check = check_1f1b, .bubble = bubble_1f1b};
