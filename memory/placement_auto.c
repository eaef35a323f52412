/* Gemini's auto placement (Colossal-AI AutoPlacementPolicy) as a
 * pl_placement_policy, with Belady's OPT rule for eviction: the task graph
 * fixes every access of an iteration in advance, so the policy knows each
 * unit's next use exactly instead of guessing from the past.
 *
 * The access sequence repeats every iteration, so "next use after step s"
 * is cyclic: the first use at a step > s, else the unit's first use in the
 * next iteration (its first step + n_steps). A unit no step uses is
 * infinitely far. Distances are measured in steps from s.
 *
 * choose_victims(s, bytes): the resident units step s does not need, in
 * order of furthest next use (ties: lowest index), until their bytes reach
 * `bytes` (all of them if that is not enough).
 *
 * prefetch(s, budget): the steps after s in order, wrapping into the next
 * iteration, give the units to bring in: distinct, not resident, not needed
 * by s itself, at most max_prefetch of them, their bytes summing to no more
 * than `budget`. The walk stops at the first unit that does not fit rather
 * than skipping it: a later unit brought in instead would be the first
 * victim (furthest next use) once the skipped one needs room.
 *
 * The budgets themselves (capacity·steady_cuda_cap_ratio − non_model, the
 * warm-up reserve, gpu_margin_mem_ratio for optimizer states) are the
 * engine's business; every update runs on the compute tier here.
 *
 * Cost: init builds, per unit, the sorted list of steps that use it (one
 * pass over the sequence); a next-use query is a binary search in that
 * list, so choose_victims is O(n_units log n_steps + n_units log n_units)
 * and prefetch at most one pass over the sequence. */
#include "memory/placement.h"

#include <stdint.h>
#include <stdlib.h>

typedef struct cand {
    int64_t dist;
    int u;
} cand;

typedef struct auto_state {
    pl_place_seq q;
    int *use_offset; /* [n_units + 1]: unit u is used at steps */
    int *use_steps;  /*   use_steps[use_offset[u] .. use_offset[u+1]), sorted */
    cand *cands;     /* [n_units] scratch for choose_victims */
    unsigned *taken; /* [n_units] prefetch's "already chosen" stamps */
    unsigned taken_stamp;
} auto_state;

static void auto_free(void *state) {
    auto_state *s = state;
    if (!s) return;
    pl_place_seq_free(&s->q);
    free(s->use_offset);
    free(s->use_steps);
    free(s->cands);
    free(s->taken);
    free(s);
}

static void *auto_init(const pl_placement_info *info) {
    auto_state *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    if (!pl_place_seq_init(&s->q, info)) {
        free(s);
        return NULL;
    }
    int nu = s->q.n_units, ns = s->q.n_steps;
    int len = s->q.step_offset[ns];
    s->use_offset = calloc((size_t)nu + 2, sizeof *s->use_offset);
    s->use_steps = calloc((size_t)len + 1, sizeof *s->use_steps);
    s->cands = calloc((size_t)nu + 1, sizeof *s->cands);
    s->taken = calloc((size_t)nu + 1, sizeof *s->taken);
    if (!s->use_offset || !s->use_steps || !s->cands || !s->taken) {
        auto_free(s);
        return NULL;
    }
    /* Counting sort of (step, unit) pairs by unit; walking the steps in
     * order leaves each unit's list sorted (and the sequence copy lists a
     * unit at most once per step, so the lists hold distinct steps). */
    for (int i = 0; i < len; i++) s->use_offset[s->q.step_units[i] + 2]++;
    for (int u = 0; u < nu; u++) s->use_offset[u + 2] += s->use_offset[u + 1];
    for (int st = 0; st < ns; st++)
        for (int i = s->q.step_offset[st]; i < s->q.step_offset[st + 1]; i++)
            s->use_steps[s->use_offset[s->q.step_units[i] + 1]++] = st;
    /* use_offset[u] is now the start of u's list, use_offset[u+1] its end. */
    return s;
}

/* Steps from `step` to u's next use after it, cyclically; INT64_MAX when
 * no step uses u. `step` is in [0, n_steps). */
static int64_t next_use_dist(const auto_state *s, int u, int step) {
    const int *l = s->use_steps + s->use_offset[u];
    int n = s->use_offset[u + 1] - s->use_offset[u];
    if (n == 0) return INT64_MAX;
    int lo = 0, hi = n; /* first index with l[i] > step */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (l[mid] > step) hi = mid;
        else lo = mid + 1;
    }
    if (lo < n) return l[lo] - step;
    return (int64_t)l[0] + s->q.n_steps - step;
}

/* Furthest first; equal distances by lowest index, so results do not
 * depend on qsort's instability. */
static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->dist != y->dist) return x->dist > y->dist ? -1 : 1;
    return (x->u > y->u) - (x->u < y->u);
}

/* The step as an index into the sequence (the engine passes one already;
 * this only keeps distances positive if it does not). */
static int norm_step(const auto_state *s, int step) {
    int n = s->q.n_steps;
    if (n <= 0) return 0;
    step %= n;
    return step < 0 ? step + n : step;
}

static void auto_before_step(void *state, int step, const int *needed,
                             int n_needed, const bool *resident,
                             const pl_memory_stats *stats) {
    (void)resident;
    (void)stats;
    if (state) pl_place_seq_announce(&((auto_state *)state)->q, step, needed, n_needed);
}

static int auto_choose_victims(void *state, int step, int64_t bytes,
                               const bool *resident, int *victims) {
    auto_state *s = state;
    if (!s || !resident || !victims || bytes <= 0) return 0;
    pl_place_seq_mark_needed(&s->q, step);
    int at = norm_step(s, step);
    int n = 0;
    for (int u = 0; u < s->q.n_units; u++) {
        if (!resident[u] || pl_place_seq_needed(&s->q, u)) continue;
        s->cands[n].u = u;
        s->cands[n].dist = next_use_dist(s, u, at);
        n++;
    }
    qsort(s->cands, (size_t)n, sizeof *s->cands, cand_cmp);
    int k = 0;
    int64_t freed = 0;
    while (k < n && freed < bytes) {
        victims[k] = s->cands[k].u;
        freed += s->q.unit_bytes[s->cands[k].u];
        k++;
    }
    return k;
}

static int auto_prefetch(void *state, int step, int64_t budget,
                         const bool *resident, int *units) {
    auto_state *s = state;
    if (!s || !resident || !units || budget <= 0) return 0;
    int max = s->q.options.max_prefetch;
    if (max > s->q.n_units) max = s->q.n_units;
    if (max <= 0 || s->q.n_steps <= 0) return 0;
    pl_place_seq_mark_needed(&s->q, step);
    if (++s->taken_stamp == 0) {
        for (int u = 0; u < s->q.n_units; u++) s->taken[u] = 0;
        s->taken_stamp = 1;
    }
    int at = norm_step(s, step), n = 0;
    int64_t used = 0;
    /* Steps at+1 .. at+n_steps-1 (mod n_steps): the rest of this iteration,
     * then the next one up to (not including) this step again, whose units
     * are needed now and so already on their way. */
    for (int d = 1; d < s->q.n_steps; d++) {
        int st = (at + d) % s->q.n_steps;
        for (int i = s->q.step_offset[st]; i < s->q.step_offset[st + 1]; i++) {
            int u = s->q.step_units[i];
            if (resident[u] || pl_place_seq_needed(&s->q, u) ||
                s->taken[u] == s->taken_stamp)
                continue;
            if (s->q.unit_bytes[u] > budget - used) return n;
            s->taken[u] = s->taken_stamp;
            units[n++] = u;
            used += s->q.unit_bytes[u];
            if (n == max) return n;
        }
    }
    return n;
}

static pl_tier auto_where_to_update(void *state, int chunk) {
    (void)state;
    (void)chunk;
    return PL_TIER_COMPUTE;
}

static const pl_placement_policy auto_policy = {
    .name = "auto",
    .init = auto_init,
    .before_step = auto_before_step,
    .choose_victims = auto_choose_victims,
    .prefetch = auto_prefetch,
    .where_to_update = auto_where_to_update,
    .free = auto_free,
};

const pl_placement_policy *pl_placement_auto(void) { return &auto_policy; }
