/* The built-in ZB-V schedule (Qi et al., "Zero Bubble Pipeline
 * Parallelism", ICLR 2024, section 6, and "Pipeline Parallelism with
 * Controllable Memory", 2024; Colossal-AI's pp_style="zbv"), a
 * pl_schedule_def written against the public interface only, as a user's
 * schedule would be; registered in scheduling/schedule_registry.c (the
 * CLI's --schedule zbv).
 *
 * Placement: two model chunks per stage in a V. The model is cut into 2p
 * parts; stage s holds part s (chunk 0) and part 2p−1−s (chunk 1), so a
 * microbatch's forward runs down the stages on chunk 0, turns on stage
 * p−1 (which holds parts p−1 and p) and comes back up on chunk 1; its
 * backward retraces the V. Stage 0 holds both the first and the last part
 * (the embedding and the head, tied or not, on one stage).
 *
 * Order. The paper builds ZB-V's lists by running the pipeline in a
 * simulation of equal F, B and W times, each stage taking the next item
 * it can under a memory limit; these are our rules for that simulation
 * (our own statement of them, not the reference generator's code):
 *   - time runs in units; every item (F, B or W of one microbatch on one
 *     chunk) takes one unit; an item is ready once the items it depends
 *     on finished in an earlier unit (F of part k needs F of part k−1; B
 *     of part k needs F of part k and B of part k+1; W of part k needs B
 *     of part k; on each chunk F, B and W go in microbatch order);
 *   - a stage that is free takes, in this priority: a ready B (the older
 *     microbatch first, chunk 1 before chunk 0 on a tie: it is further
 *     along the backward); else a ready F of chunk 1 (it finishes a
 *     microbatch already admitted); else F of chunk 0 of the next
 *     microbatch, if the stage's memory allows it; else a ready W (the
 *     older microbatch first, chunk 1 first on a tie): weight gradients
 *     wait for the bubbles, as in every zero-bubble schedule;
 *   - memory: a chunk's activations of one microbatch are live from its F
 *     to its W; a stage admits a new microbatch (F of chunk 0) only if its
 *     live chunk activations, plus one for each admitted microbatch whose
 *     chunk 1 has not started, plus the two of the new one stay <= 2p.
 *     2p half-stage activations are p whole-stage ones: 1F1B's peak (on its
 *     stage 0), the paper's memory bound for ZB-V. Counting the admitted
 *     microbatches' chunk 1 ahead of time keeps the warm-up from filling
 *     the stage with chunk-0 activations that then leave no room to turn
 *     them round (a deadlock).
 * Each stage's list is the order in which it took its items. With equal
 * times and m >= 2p the simulated stages idle only while the first
 * microbatch reaches them (p−1 units out of 6m), against 1F1B's (p−1)/m.
 * Any m >= 1 (the same rules; few microbatches leave more idle).
 *
 * Bubble: the same lists run with given item times (each stage takes its
 * next item as soon as the stage is free and the item's dependencies are
 * done; no communication time): idle over busy, (T − 2m(F+B+W)) /
 * (2m(F+B+W)) for makespan T. With the item times an engine measures
 * (pl_item_times: a chunk's mean F, B and W) that is the theory printed
 * beside the measured bubble. */
#include <stdlib.h>

#include "util/error.h"
#include "pleiades.h"

static pl_status check(int p, int v, int m) {
    (void)p, (void)m;
    if (v != 2)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "ZB-V: model chunks %d must be 2 (two chunks per stage in a V: stage "
                       "s holds parts s and 2p-1-s)", v);
    return PL_STATUS_OK;
}

static int part(int p, int v, int stage, int chunk) {
    (void)v;
    return chunk == 0 ? stage : 2 * p - 1 - stage;
}

/* The simulation's state: per (kind, microbatch, part) the unit its item
 * finishes in (-1: not yet), per stage the next microbatch of each kind
 * and chunk, its live chunk activations and admitted microbatches whose
 * chunk 1 has not started. */
typedef struct sim {
    int p, m;
    int *finish;    /* [3][m][2p] */
    int *next;      /* [p][3][2] */
    int *live, *pending1, *busy_until;
} sim;

static int *finish_at(sim *S, int kind, int mb, int k) {
    return &S->finish[((size_t)kind * S->m + mb) * 2 * S->p + k];
}

/* Whether (kind, mb, chunk) of stage s may start at unit t. */
static bool ready(sim *S, int s, int kind, int mb, int chunk, int t) {
    int p = S->p, k = part(p, 2, s, chunk);
    if (mb >= S->m) return false;
#define DONE(kd, kk) (*finish_at(S, kd, mb, kk) >= 0 && *finish_at(S, kd, mb, kk) <= t)
    if (kind == PL_WORK_F) return k == 0 || DONE(PL_WORK_F, k - 1);
    if (kind == PL_WORK_B) return DONE(PL_WORK_F, k) && (k == 2 * p - 1 || DONE(PL_WORK_B, k + 1));
    return DONE(PL_WORK_B, k);
#undef DONE
}

/* Of the two chunks' next `kind` items on stage s, the ready one of the
 * older microbatch (chunk 1 on a tie), or -1. */
static int older_ready(sim *S, int s, int kind, int t) {
    int *nx = &S->next[(s * 3 + kind) * 2], best = -1;
    for (int c = 1; c >= 0; c--)
        if (ready(S, s, kind, nx[c], c, t) && (best < 0 || nx[c] < nx[best])) best = c;
    return best;
}

/* Runs the rules above and writes stage `want`'s items in the order it
 * took them (all stages are simulated: they depend on each other).
 * Returns the count, or -1 if the simulation stops (it does not under
 * these rules; a refusal rather than a loop if it ever did). */
static int simulate(int p, int m, int want, pl_work_item *items, int capacity) {
    sim S = {.p = p, .m = m};
    size_t n_finish = (size_t)3 * m * 2 * p;
    S.finish = malloc(n_finish * sizeof *S.finish);
    S.next = calloc((size_t)p * 6, sizeof *S.next);
    S.live = calloc((size_t)p * 3, sizeof *S.live);
    if (!S.finish || !S.next || !S.live) {
        free(S.finish), free(S.next), free(S.live);
        return -1;
    }
    S.pending1 = S.live + p;
    S.busy_until = S.pending1 + p;
    for (size_t i = 0; i < n_finish; i++) S.finish[i] = -1;
    int n = 0, left = 6 * m * p, t = 0, idle_units = 0;
    for (; left > 0 && idle_units < 2; t++) {
        bool started = false, busy = false;
        for (int s = 0; s < p; s++) {
            if (S.busy_until[s] > t) {
                busy = true;
                continue;
            }
            int *nx = &S.next[s * 6];
            int kind = PL_WORK_B, c = older_ready(&S, s, PL_WORK_B, t);
            if (c < 0 && ready(&S, s, PL_WORK_F, nx[PL_WORK_F * 2 + 1], 1, t))
                kind = PL_WORK_F, c = 1;
            if (c < 0 && S.live[s] + S.pending1[s] + 2 <= 2 * p &&
                ready(&S, s, PL_WORK_F, nx[PL_WORK_F * 2], 0, t))
                kind = PL_WORK_F, c = 0;
            if (c < 0) kind = PL_WORK_W, c = older_ready(&S, s, PL_WORK_W, t);
            if (c < 0) continue;
            int mb = nx[kind * 2 + c]++;
            *finish_at(&S, kind, mb, part(p, 2, s, c)) = t + 1;
            S.busy_until[s] = t + 1;
            if (kind == PL_WORK_F) S.live[s]++, S.pending1[s] += c == 0 ? 1 : -1;
            if (kind == PL_WORK_W) S.live[s]--;
            if (s == want) pl_schedule_append(items, capacity, &n, (pl_work_item){kind, mb, c});
            left--;
            started = true;
        }
        /* Nothing started and nothing running: nothing ever will. */
        idle_units = started || busy ? 0 : idle_units + 1;
    }
    free(S.finish), free(S.next), free(S.live);
    return left > 0 ? -1 : n;
}

static int build(const pl_schedule_def *def, int p, int v, int m, int stage,
                 pl_work_item *items, int capacity, void *user) {
    (void)def, (void)v, (void)user;
    return simulate(p, m, stage, items, capacity);
}

/* The lists run with item times f, b, w: each stage takes its next item
 * once it is free and the item's dependencies are done. Idle over busy. */
static double bubble_of(int p, int m, double f, double b, double w) {
    double busy = 2.0 * m * (f + b + w), makespan = 0;
    int cap = 6 * m;
    size_t n_end = (size_t)3 * m * 2 * p;
    pl_work_item *items = malloc((size_t)p * cap * sizeof *items);
    int *n = calloc((size_t)p * 2, sizeof *n), *pos = n ? n + p : NULL;
    double *end = malloc(n_end * sizeof *end), *free_at = calloc(p, sizeof *free_at);
    bool ok = items && n && end && free_at && busy > 0;
    for (int s = 0; ok && s < p; s++)
        ok = (n[s] = simulate(p, m, s, items + (size_t)s * cap, cap)) == cap;
    for (size_t i = 0; ok && i < n_end; i++) end[i] = -1;
#define END(kd, mb, k) end[((size_t)(kd) * m + (mb)) * 2 * p + (k)]
    for (bool progress = ok; progress;) {
        progress = false;
        for (int s = 0; s < p; s++)
            while (pos[s] < n[s]) {
                const pl_work_item *it = &items[(size_t)s * cap + pos[s]];
                int k = part(p, 2, s, it->chunk), mb = it->microbatch;
                /* The item's dependencies' ends (0: none; -1: not run yet). */
                double d0, d1 = 0;
                if (it->kind == PL_WORK_F) {
                    d0 = k > 0 ? END(PL_WORK_F, mb, k - 1) : 0;
                } else if (it->kind == PL_WORK_B) {
                    d0 = END(PL_WORK_F, mb, k);
                    d1 = k + 1 < 2 * p ? END(PL_WORK_B, mb, k + 1) : 0;
                } else {
                    d0 = END(PL_WORK_B, mb, k);
                }
                if (d0 < 0 || d1 < 0) break; /* waits for another stage */
                double start = free_at[s], len = it->kind == PL_WORK_F   ? f
                                                 : it->kind == PL_WORK_B ? b
                                                                         : w;
                if (d0 > start) start = d0;
                if (d1 > start) start = d1;
                free_at[s] = END(it->kind, mb, k) = start + len;
                if (free_at[s] > makespan) makespan = free_at[s];
                pos[s]++;
                progress = true;
            }
    }
#undef END
    free(items), free(n), free(end), free(free_at);
    return ok && makespan > busy ? (makespan - busy) / busy : 0.0;
}

static double bubble(int p, int v, int m) {
    (void)v;
    return bubble_of(p, m, 1, 1, 1);
}

static double bubble_measured(int p, int v, int m, const pl_item_times *t) {
    (void)v;
    return bubble_of(p, m, t->f, t->b, t->w);
}

const pl_schedule_def pl_schedule_zbv = {
    .name = "zbv", .build = build, .check = check, .bubble = bubble,
    .bubble_measured = bubble_measured, .part = part};
