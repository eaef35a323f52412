/* The activation planner: keep, recompute or offload each block's
 * activations at the least predicted time within a budget (the cost model
 * is in activation_plan.h).
 *
 * Why exact and how: the peak is a sum over blocks plus one maximum (the
 * largest block re-made or brought back at once), which is what makes the
 * problem more than a knapsack. Fixing that maximum at M — it can only be
 * 0 or one of a block's transients, so there are at most 3n+1 values to
 * try —
 * leaves a multiple-choice knapsack: each block adds (bytes, time) for the
 * options whose transient is at most M, and the sum of bytes must stay
 * within budget - M. That is solved exactly over the Pareto front of
 * (bytes, time) pairs, block by block: a partial plan is dropped only when
 * another holds no more bytes and takes no more time. Transformer layers
 * repeat the same few sizes, so the fronts stay small (a few entries per
 * distinct byte sum); the brute force over 3^n plans in
 * tests/test_activation_plan.c checks the result. */
#include "memory/activation_plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double offload_us(const pl_act_plan_input *in, const pl_act_block_cost *b) {
    double trips = b->transfers > 0 ? b->transfers : 2.0;
    return in->bytes_per_us > 0 ? trips * (double)b->bytes / in->bytes_per_us : INFINITY;
}

void pl_act_plan_cost(const pl_act_plan_input *in, const pl_act_choice *choice,
                      double *time_us, int64_t *peak) {
    double t = 0;
    int64_t sum = 0, transient = 0;
    for (int i = 0; i < in->n_blocks; i++) {
        const pl_act_block_cost *b = &in->blocks[i];
        int64_t tr = 0;
        switch (choice[i]) {
        case PL_ACT_KEEP:
            sum += b->bytes;
            tr = b->work_bytes;
            break;
        case PL_ACT_RECOMPUTE:
            t += b->forward_us;
            sum += b->out_bytes;
            tr = b->bytes - b->out_bytes + b->work_bytes;
            break;
        case PL_ACT_OFFLOAD:
            t += offload_us(in, b);
            tr = b->bytes + b->work_bytes;
            break;
        }
        if (tr > transient) transient = tr;
    }
    *time_us = t;
    *peak = sum + transient;
}

/* One entry of a block's Pareto front: the bytes and time of a partial
 * plan of blocks 0..i, and how it was reached. */
typedef struct entry {
    int64_t bytes;
    double time;
    int parent;       /* index in the previous block's front */
    pl_act_choice choice;
} entry;

static int cmp_entry(const void *pa, const void *pb) {
    const entry *a = pa, *b = pb;
    if (a->bytes != b->bytes) return a->bytes < b->bytes ? -1 : 1;
    if (a->time != b->time) return a->time < b->time ? -1 : 1;
    return a->choice - b->choice; /* deterministic among equals */
}

/* Whether block b may take option k when no transient exceeds m, and its
 * additive bytes and time then. */
static bool option(const pl_act_plan_input *in, int b, int k, int64_t m, int64_t *bytes,
                   double *time) {
    const pl_act_block_cost *c = &in->blocks[b];
    switch ((pl_act_choice)k) {
    case PL_ACT_KEEP: *bytes = c->bytes, *time = 0; return c->work_bytes <= m;
    case PL_ACT_RECOMPUTE:
        *bytes = c->out_bytes, *time = c->forward_us;
        return c->transfers <= 0 && c->bytes - c->out_bytes + c->work_bytes <= m;
    case PL_ACT_OFFLOAD:
        *bytes = 0, *time = offload_us(in, c);
        return in->bytes_per_us > 0 && c->bytes + c->work_bytes <= m;
    }
    return false;
}

/* The least-time plan with every transient <= m and additive bytes <=
 * cap, into choice; false when none. fronts[i] / sizes[i]: scratch. */
static bool solve(const pl_act_plan_input *in, int64_t m, int64_t cap, pl_act_choice *choice,
                  double *best_time) {
    int n = in->n_blocks;
    entry **front = calloc((size_t)n + 1, sizeof *front);
    int *size = calloc((size_t)n + 1, sizeof *size);
    bool ok = front && size;
    if (ok) {
        front[0] = malloc(sizeof **front);
        ok = front[0] != NULL;
        if (ok) front[0][0] = (entry){0, 0.0, -1, PL_ACT_KEEP}, size[0] = 1;
    }
    for (int b = 0; ok && b < n; b++) {
        entry *next = malloc((size_t)size[b] * 3 * sizeof *next);
        if (!(ok = next != NULL)) break;
        int k = 0;
        for (int i = 0; i < size[b]; i++)
            for (int o = 0; o < 3; o++) {
                int64_t by;
                double t;
                if (!option(in, b, o, m, &by, &t) || front[b][i].bytes + by > cap) continue;
                next[k++] = (entry){front[b][i].bytes + by, front[b][i].time + t, i,
                                    (pl_act_choice)o};
            }
        qsort(next, (size_t)k, sizeof *next, cmp_entry);
        /* Pareto: in order of bytes, keep an entry only if it is faster
         * than every entry with fewer (or as many) bytes. */
        int kept = 0;
        for (int i = 0; i < k; i++)
            if (kept == 0 || next[i].time < next[kept - 1].time) next[kept++] = next[i];
        front[b + 1] = next;
        size[b + 1] = kept;
        ok = kept > 0;
    }
    if (ok) {
        /* The last entry is the fastest (times fall along the front). */
        int at = size[n] - 1;
        *best_time = front[n][at].time;
        for (int b = n; b > 0; b--) {
            choice[b - 1] = front[b][at].choice;
            at = front[b][at].parent;
        }
    }
    for (int b = 0; front && b <= n; b++) free(front[b]);
    free(front);
    free(size);
    return ok;
}

bool pl_act_plan(const pl_act_plan_input *in, pl_act_choice *choice) {
    int n = in->n_blocks;
    /* The largest transient: none, or one block's. */
    int64_t *ms = malloc(((size_t)3 * n + 1) * sizeof *ms);
    pl_act_choice *trial = malloc(((size_t)n + 1) * sizeof *trial);
    bool found = false;
    double best_time = INFINITY;
    int64_t best_peak = INT64_MAX;
    if (!ms || !trial) {
        for (int b = 0; b < n; b++) choice[b] = PL_ACT_KEEP;
        free(ms);
        free(trial);
        return false;
    }
    int nm = 0;
    ms[nm++] = 0;
    for (int b = 0; b < n; b++) {
        const pl_act_block_cost *c = &in->blocks[b];
        ms[nm++] = c->work_bytes;
        if (c->transfers <= 0) ms[nm++] = c->bytes - c->out_bytes + c->work_bytes;
        if (in->bytes_per_us > 0) ms[nm++] = c->bytes + c->work_bytes;
    }
    for (int k = 0; k < nm; k++) {
        double t;
        int64_t peak;
        if (ms[k] < 0 || ms[k] > in->budget_bytes ||
            !solve(in, ms[k], in->budget_bytes - ms[k], trial, &t))
            continue;
        pl_act_plan_cost(in, trial, &t, &peak);
        if (t < best_time || (t == best_time && peak < best_peak)) {
            best_time = t;
            best_peak = peak;
            memcpy(choice, trial, (size_t)n * sizeof *choice);
            found = true;
        }
    }
    if (!found) {
        /* Nothing fits: the plan of least peak without offloading
         * activations (each block's smallest holding, under each transient
         * bound) — the policy below moves what overflows anyway, and a
         * re-run never waits for a transfer — and with the model state
         * offloaded where there is a tier (its policy moves it then). */
        for (int k = 0; k < nm; k++) {
            if (ms[k] < 0) continue;
            for (int b = 0; b < n; b++) {
                int64_t least = INT64_MAX, by;
                double t;
                trial[b] = PL_ACT_KEEP;
                if (in->blocks[b].transfers > 0) {
                    if (option(in, b, PL_ACT_OFFLOAD, ms[k], &by, &t)) trial[b] = PL_ACT_OFFLOAD;
                    continue;
                }
                for (int o = 0; o < 2; o++)
                    if (option(in, b, o, ms[k], &by, &t) && by < least)
                        least = by, trial[b] = (pl_act_choice)o;
            }
            double t;
            int64_t peak;
            pl_act_plan_cost(in, trial, &t, &peak);
            if (peak < best_peak || (peak == best_peak && t < best_time)) {
                best_peak = peak;
                best_time = t;
                memcpy(choice, trial, (size_t)n * sizeof *choice);
            }
        }
    }
    free(ms);
    free(trial);
    return found;
}
