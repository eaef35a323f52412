/* The built-in interleaved 1F1B schedule (Megatron's order, pleiades/
 * schedule.h), a pl_schedule_def written like a user's; registered in
 * scheduling/schedule_registry.c. */
#include "util/error.h"
#include "pleiades.h"

/* Unlike 1F1B, the interleaved order needs m a multiple of p (so m >= p):
 * its virtual steps take microbatches in groups of p, one group per chunk
 * before the next chunk (virtual step k is microbatch (k / (p·v))·p +
 * k mod p), and a group short of p would name microbatches that do not
 * exist. Megatron asserts the same (num_microbatches % pipeline size). */
static pl_status check_interleaved(int p, int v, int m) {
    if (v < 2)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "interleaved: model chunks %d must be > 1", v);
    if (m % p != 0)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "interleaved: microbatches %d must be a multiple of "
                       "stages %d (its order takes microbatches in groups of p, one "
                       "group per chunk in turn; 1f1b and zb-h1 take any m)", m, p);
    return PL_STATUS_OK;
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

static double bubble_interleaved(int p, int v, int m) {
    return (double)(p - 1) / ((double)v * m);
}

const pl_schedule_def pl_schedule_interleaved = {
    .name = "interleaved", .build = build_interleaved, .check = check_interleaved,
    .bubble = bubble_interleaved};
