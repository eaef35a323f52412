/* The activation planner (memory/activation_plan.c) against brute force.
 *
 * 3000 random cost tables of 1 to 6 blocks (forward times 1-1000 µs as
 * doubles, so that no two plans tie; activation bytes 1 KiB-1 MiB with
 * outputs 5-50 % of them; with and without a tier below, at 0.5-20
 * bytes/µs), each at a budget drawn between the least possible peak and
 * keeping everything (and some below the least, which no plan fits). For
 * each, every one of the 3^n keep/recompute/offload assignments is costed
 * here with the model written out again (not pl_act_plan_cost): the
 * planner must report a fit exactly when one exists, and then choose the
 * assignment of least time (of least peak among equal times), the same
 * one brute force finds; when none fits, the assignment of least peak
 * among those that offload nothing.
 * Half the tables give blocks a working set held during their backward
 * whatever the choice (work_bytes, in every transient). Two thirds also
 * hold units of model state (kept or
 * offloaded, never recomputed; offloading one moves 2 or 4 times its
 * bytes): brute force skips recomputing them, and when nothing fits it
 * may offload them (the planner's fallback offloads no activations).
 * Also: pl_act_plan_cost agrees with the costing here on every plan
 * tried, and a GPT-like table (identical layers, a head) plans as
 * expected: everything kept at an ample budget, recomputation as the
 * budget shrinks, offload only where it is cheaper than a re-run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory/activation_plan.h"
#include "test_util.h"

enum { MAX_N = 6, TABLES = 3000 };

/* The model of activation_plan.h, written out independently. */
static void cost(const pl_act_plan_input *in, const int *c, double *time, int64_t *peak) {
    double t = 0;
    int64_t sum = 0, tr = 0;
    for (int b = 0; b < in->n_blocks; b++) {
        const pl_act_block_cost *k = &in->blocks[b];
        int64_t w = k->work_bytes; /* held in every choice's transient */
        if (c[b] == 0) {
            sum += k->bytes;
            if (w > tr) tr = w;
        } else if (c[b] == 1 && k->transfers > 0) {
            t = INFINITY; /* model state is never recomputed */
        } else if (c[b] == 1) {
            t += k->forward_us;
            sum += k->out_bytes;
            if (k->bytes - k->out_bytes + w > tr) tr = k->bytes - k->out_bytes + w;
        } else {
            double trips = k->transfers > 0 ? k->transfers : 2.0;
            t += in->bytes_per_us > 0 ? trips * (double)k->bytes / in->bytes_per_us : INFINITY;
            if (k->bytes + w > tr) tr = k->bytes + w;
        }
    }
    *time = t;
    *peak = sum + tr;
}

/* Whether an activation block is offloaded (model state may be). */
static bool offloads(const pl_act_plan_input *in, const int *c, int n) {
    for (int b = 0; b < n; b++)
        if (c[b] == 2 && in->blocks[b].transfers <= 0) return true;
    return false;
}

/* Brute force: the best fitting assignment (least time, then least peak)
 * into best; false when none fits, best then the one of least peak. */
static bool brute(const pl_act_plan_input *in, int *best, double *bt, int64_t *bp) {
    int n = in->n_blocks, total = 1, c[MAX_N];
    for (int b = 0; b < n; b++) total *= 3;
    bool found = false;
    double least_t = INFINITY;
    int64_t least_p = INT64_MAX;
    *bt = INFINITY;
    *bp = INT64_MAX;
    for (int code = 0; code < total; code++) {
        for (int b = 0, x = code; b < n; b++, x /= 3) c[b] = x % 3;
        double t;
        int64_t p;
        cost(in, c, &t, &p);
        if (isinf(t)) continue; /* offload without a tier, recomputed state */
        if (p <= in->budget_bytes) {
            if (!found || t < *bt || (t == *bt && p < *bp)) {
                *bt = t, *bp = p;
                memcpy(best, c, sizeof c);
            }
            found = true;
        } else if (!found && !offloads(in, c, n) && (p < least_p || (p == least_p && t < least_t))) {
            least_p = p, least_t = t;
            memcpy(best, c, sizeof c);
        }
    }
    if (!found) *bt = least_t, *bp = least_p;
    return found;
}

static double uniform(uint64_t *s, double lo, double hi) {
    return lo + (hi - lo) * (double)(tu_splitmix64(s) >> 11) / 9007199254740992.0;
}

static void test_random(void) {
    uint64_t s = 2026;
    int fits = 0, infeasible = 0, checked = 0;
    for (int k = 0; k < TABLES; k++) {
        int n = 1 + (int)(tu_splitmix64(&s) % MAX_N);
        pl_act_block_cost blocks[MAX_N];
        int64_t all = 0;
        for (int b = 0; b < n; b++) {
            blocks[b].forward_us = uniform(&s, 1, 1000);
            blocks[b].bytes = (int64_t)uniform(&s, 1024, 1048576);
            blocks[b].out_bytes = (int64_t)(blocks[b].bytes * uniform(&s, 0.05, 0.5));
            /* half the tables: a working set of gradients in the backward */
            blocks[b].work_bytes = k % 2 ? (int64_t)(blocks[b].bytes * uniform(&s, 0.0, 0.4)) : 0;
            /* every third table: some units of model state */
            blocks[b].transfers = k % 3 != 2 && tu_splitmix64(&s) % 2 ? (tu_splitmix64(&s) % 2 ? 4.0 : 2.0) : 0.0;
            all += blocks[b].bytes;
        }
        pl_act_plan_input in = {.n_blocks = n, .blocks = blocks,
                                .bytes_per_us = k % 3 == 0 ? 0.0 : uniform(&s, 0.5, 20)};
        /* The least peak of any plan without offload, then a budget around
         * it (a plan that offloads may fit below it). */
        in.budget_bytes = -1;
        int bestc[MAX_N];
        double bt;
        int64_t least;
        brute(&in, bestc, &bt, &least);
        in.budget_bytes = k % 10 == 0 ? least - 1 : least + (int64_t)uniform(&s, 0, (double)(all - least + 1));
        double want_t;
        int64_t want_p;
        bool want = brute(&in, bestc, &want_t, &want_p);
        pl_act_choice got[MAX_N];
        bool ok = pl_act_plan(&in, got);
        double got_t, mt;
        int64_t got_p, mp;
        int gi[MAX_N];
        for (int b = 0; b < n; b++) gi[b] = (int)got[b];
        cost(&in, gi, &got_t, &got_p);
        pl_act_plan_cost(&in, got, &mt, &mp);
        CHECK(mt == got_t && mp == got_p, "table %d: pl_act_plan_cost %.3f us %lld B, the "
              "model here %.3f us %lld B", k, mt, (long long)mp, got_t, (long long)got_p);
        CHECK(ok == want, "table %d (%d blocks, budget %lld): planner says %s, brute force %s",
              k, n, (long long)in.budget_bytes, ok ? "fits" : "no fit", want ? "fits" : "no fit");
        bool same = true;
        for (int b = 0; b < n; b++) same = same && gi[b] == bestc[b];
        CHECK(same && got_t == want_t && got_p == want_p,
              "table %d (%d blocks, budget %lld, %s): planner %.3f us %lld B, brute force "
              "%.3f us %lld B", k, n, (long long)in.budget_bytes,
              in.bytes_per_us > 0 ? "tier below" : "no tier", got_t, (long long)got_p, want_t,
              (long long)want_p);
        fits += want;
        infeasible += !want;
        checked++;
    }
    printf("random tables: %d checked against brute force (%d with a fitting plan, %d with "
           "none)\n", checked, fits, infeasible);
}

/* Four identical layers and a head: 10 MB each, 1 MB outputs, 100 µs
 * forwards; the tier below at 1000 B/us (2 x 10 MB takes 20 ms, far more
 * than a re-run). */
static void test_gpt_like(void) {
    pl_act_block_cost blocks[5];
    for (int b = 0; b < 4; b++) blocks[b] = (pl_act_block_cost){100.0, 10000000, 1000000, 0, 0};
    blocks[4] = (pl_act_block_cost){50.0, 4000000, 2000000, 0, 0};
    pl_act_plan_input in = {.n_blocks = 5, .blocks = blocks, .bytes_per_us = 1000,
                            .budget_bytes = 44000000};
    pl_act_choice c[5];
    CHECK(pl_act_plan(&in, c), "ample budget: no plan");
    int kept = 0, rec = 0, off = 0;
    for (int b = 0; b < 5; b++) kept += c[b] == PL_ACT_KEEP;
    CHECK(kept == 5, "44 MB for 44 MB of activations: %d of 5 blocks kept", kept);
    in.budget_bytes = 25000000;
    CHECK(pl_act_plan(&in, c), "25 MB: no plan");
    for (int b = 0; b < 5; b++) rec += c[b] == PL_ACT_RECOMPUTE, off += c[b] == PL_ACT_OFFLOAD;
    /* 25 MB cannot keep two layers (20 MB) beside the others' outputs and
     * a transient; a re-run (100 us) costs far less than the 20 ms round
     * trip to the tier below. */
    CHECK(off == 0, "25 MB: %d blocks offloaded, though a re-run costs less", off);
    CHECK(rec >= 3, "25 MB: %d blocks recomputed, expected at least 3", rec);
    double t;
    int64_t p;
    pl_act_plan_cost(&in, c, &t, &p);
    CHECK(p <= in.budget_bytes, "25 MB: the plan peaks at %lld B", (long long)p);
    printf("GPT-like at 25 MB: %d recomputed, %.0f us extra, peak %lld B\n", rec, t,
           (long long)p);
}

/* The same layers beside 8 units of model state (4 of optimizer states,
 * 2 trips when offloaded; 4 of parameters and gradients, 4 trips), 5 MB
 * each, under a budget that holds all of the model state and little
 * else. Over a slow tier (1000 B/us: an optimizer unit's round trip 10
 * ms) the state stays and the layers are recomputed; over a fast one
 * (1e6 B/us: 10 us, less than a re-run) optimizer states go below and
 * the room they leave keeps layers (or lets them go below too: 20 us). */
static void test_gpt_like_state(void) {
    pl_act_block_cost blocks[13];
    for (int b = 0; b < 4; b++) blocks[b] = (pl_act_block_cost){100.0, 10000000, 1000000, 0, 0};
    blocks[4] = (pl_act_block_cost){50.0, 4000000, 2000000, 0, 0};
    for (int u = 0; u < 8; u++) blocks[5 + u] = (pl_act_block_cost){0, 5000000, 0, u < 4 ? 2 : 4, 0};
    pl_act_plan_input in = {.n_blocks = 13, .blocks = blocks, .bytes_per_us = 1000,
                            .budget_bytes = 40000000 + 16000000};
    pl_act_choice c[13];
    CHECK(pl_act_plan(&in, c), "slow tier: no plan");
    int state_off = 0, kept = 0;
    for (int b = 0; b < 13; b++) {
        state_off += b >= 5 && c[b] == PL_ACT_OFFLOAD;
        kept += b < 5 && c[b] == PL_ACT_KEEP;
    }
    CHECK(state_off == 0, "slow tier: %d units of model state offloaded, a re-run costs less",
          state_off);
    CHECK(kept <= 1, "slow tier: %d blocks kept beside 40 MB of state in 56 MB", kept);
    int slow_kept = kept;
    in.bytes_per_us = 1e6;
    CHECK(pl_act_plan(&in, c), "fast tier: no plan");
    state_off = kept = 0;
    int opt_off = 0;
    for (int b = 0; b < 13; b++) {
        state_off += b >= 5 && c[b] == PL_ACT_OFFLOAD;
        opt_off += b >= 5 && b < 9 && c[b] == PL_ACT_OFFLOAD;
        kept += b < 5 && c[b] != PL_ACT_RECOMPUTE;
    }
    CHECK(opt_off >= 1, "fast tier: %d of 4 optimizer units offloaded (10 us each, a re-run "
          "100 us)", opt_off);
    CHECK(kept > slow_kept, "fast tier: %d blocks not recomputed, no more than over the slow "
          "tier (%d)", kept, slow_kept);
    double t;
    int64_t p;
    pl_act_plan_cost(&in, c, &t, &p);
    CHECK(p <= in.budget_bytes, "fast tier: the plan peaks at %lld B", (long long)p);
    printf("GPT-like with model state: slow tier %d blocks kept, no state offloaded; fast tier "
           "%d units offloaded, %d blocks not recomputed, %.0f us extra\n", slow_kept,
           state_off, kept, t);
}

int main(void) {
    test_random();
    test_gpt_like();
    test_gpt_like_state();
    if (tu_failures) printf("%d check(s) failed\n", tu_failures);
    return tu_failures ? 1 : 0;
}
