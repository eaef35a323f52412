/* The built-in LRU placement policy ("lru", pleiades/placement.h),
 * written against the public interface only, as a user's policy would be;
 * registered in memory/placement_registry.c (the CLI's --placement lru).
 *
 * The engine calls before_step(step, needed) before every operator step;
 * the policy stamps the needed units with a logical clock that ticks once
 * per step. When units must leave the compute tier, the victims are the
 * resident units the step does not need, least recently used first (a unit
 * never used yet counts as oldest; equal stamps by lowest index), until
 * their bytes reach what the engine asked for. Unlike the built-in "auto"
 * policy it looks only at the past, so it serves as a baseline: on a
 * cyclic access sequence longer than the budget, LRU evicts exactly the
 * unit needed soonest, which Belady's rule avoids.
 *
 * Callbacks run one at a time (the interface guarantees it), so the state
 * needs no lock. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pleiades.h"

typedef struct lru_state {
    int n_units, n_steps;
    int64_t *unit_bytes;
    int *step_offset, *step_units; /* the iteration's sequence (a copy) */
    uint64_t clock;                /* ticks once per before_step */
    uint64_t *last_use;            /* [n_units], 0 = never */
    int last_step;                 /* step of the last before_step, or -1 */
    int *last_needed;              /* what that step needs */
    int n_last_needed, cap_last_needed;
    unsigned *mark;                /* mark[u] == stamp: needed now */
    unsigned stamp;
    int *cands;                    /* scratch for choose_victims */
} lru_state;

static void lru_free(void *state) {
    lru_state *s = state;
    if (!s) return;
    free(s->unit_bytes);
    free(s->step_offset);
    free(s->step_units);
    free(s->last_use);
    free(s->last_needed);
    free(s->mark);
    free(s->cands);
    free(s);
}

static void *lru_init(const pl_placement_info *info) {
    lru_state *s = calloc(1, sizeof *s);
    if (!s || !info) {
        free(s);
        return NULL;
    }
    /* Copies: the policy must not rely on the engine keeping info's arrays
     * alive after init. */
    s->n_units = info->n_units > 0 ? info->n_units : 0;
    s->n_steps = info->n_steps > 0 && info->step_offset ? info->n_steps : 0;
    size_t nu = (size_t)s->n_units + 1, len = 1;
    if (s->n_steps && info->step_units)
        len += (size_t)(info->step_offset[s->n_steps] - info->step_offset[0]);
    else
        s->n_steps = 0; /* no sequence: needs come from before_step alone */
    s->unit_bytes = calloc(nu, sizeof *s->unit_bytes);
    s->last_use = calloc(nu, sizeof *s->last_use);
    s->mark = calloc(nu, sizeof *s->mark);
    s->cands = calloc(nu, sizeof *s->cands);
    s->last_needed = calloc(nu, sizeof *s->last_needed);
    s->cap_last_needed = (int)nu;
    s->step_offset = calloc((size_t)s->n_steps + 1, sizeof *s->step_offset);
    s->step_units = calloc(len, sizeof *s->step_units);
    if (!s->unit_bytes || !s->last_use || !s->mark || !s->cands ||
        !s->last_needed || !s->step_offset || !s->step_units) {
        lru_free(s);
        return NULL;
    }
    for (int u = 0; u < s->n_units; u++)
        s->unit_bytes[u] = info->unit_bytes && info->unit_bytes[u] > 0 ? info->unit_bytes[u] : 0;
    int base = s->n_steps ? info->step_offset[0] : 0;
    for (int st = 0; st <= s->n_steps; st++) s->step_offset[st] = info->step_offset[st] - base;
    for (size_t i = 0; i + 1 < len; i++) s->step_units[i] = info->step_units[base + (int)i];
    s->last_step = -1;
    return s;
}

static void lru_before_step(void *state, int step, const int *needed,
                            int n_needed, const bool *resident,
                            const pl_memory_stats *stats) {
    (void)resident;
    (void)stats;
    lru_state *s = state;
    if (!s) return;
    s->clock++;
    if (needed && n_needed > s->cap_last_needed) {
        int *a = realloc(s->last_needed, (size_t)n_needed * sizeof *a);
        if (a) {
            s->last_needed = a;
            s->cap_last_needed = n_needed;
        }
    }
    s->last_step = step;
    s->n_last_needed = 0;
    for (int i = 0; needed && i < n_needed; i++) {
        int u = needed[i];
        if (u < 0 || u >= s->n_units) continue;
        s->last_use[u] = s->clock;
        if (s->n_last_needed < s->cap_last_needed) s->last_needed[s->n_last_needed++] = u;
    }
}

/* Marks what step `step` needs: its entry in the sequence plus what
 * before_step announced for it. */
static void mark_needed(lru_state *s, int step) {
    if (++s->stamp == 0) {
        memset(s->mark, 0, ((size_t)s->n_units + 1) * sizeof *s->mark);
        s->stamp = 1;
    }
    if (step >= 0 && step < s->n_steps)
        for (int i = s->step_offset[step]; i < s->step_offset[step + 1]; i++) {
            int u = s->step_units[i];
            if (u >= 0 && u < s->n_units) s->mark[u] = s->stamp;
        }
    if (step == s->last_step)
        for (int i = 0; i < s->n_last_needed; i++) s->mark[s->last_needed[i]] = s->stamp;
}

/* qsort has no context argument: the comparator reads the state through a
 * pointer set just before the sort. Thread-local: one engine's callbacks
 * never run concurrently, but as a library built-in the policy may serve
 * two engines of one process at once. */
static _Thread_local const lru_state *sort_state;

static int by_last_use(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    uint64_t lx = sort_state->last_use[x], ly = sort_state->last_use[y];
    if (lx != ly) return lx < ly ? -1 : 1;
    return (x > y) - (x < y);
}

static int lru_choose_victims(void *state, int step, int64_t bytes,
                              const bool *resident, int *victims) {
    lru_state *s = state;
    if (!s || !resident || !victims || bytes <= 0) return 0;
    mark_needed(s, step);
    int n = 0;
    for (int u = 0; u < s->n_units; u++)
        if (resident[u] && s->mark[u] != s->stamp) s->cands[n++] = u;
    sort_state = s;
    qsort(s->cands, (size_t)n, sizeof *s->cands, by_last_use);
    int k = 0;
    int64_t freed = 0;
    while (k < n && freed < bytes) {
        victims[k] = s->cands[k];
        freed += s->unit_bytes[s->cands[k]];
        k++;
    }
    return k;
}

static int lru_prefetch(void *state, int step, int64_t budget,
                        const bool *resident, int *units) {
    /* LRU knows only the past: nothing comes in before it is needed. */
    (void)state;
    (void)step;
    (void)budget;
    (void)resident;
    (void)units;
    return 0;
}

static pl_tier lru_where_to_update(void *state, int chunk) {
    (void)state;
    (void)chunk;
    return PL_TIER_COMPUTE;
}

static const pl_placement_policy lru_policy = {
    .name = "lru",
    .init = lru_init,
    .before_step = lru_before_step,
    .choose_victims = lru_choose_victims,
    .prefetch = lru_prefetch,
    .where_to_update = lru_where_to_update,
    .free = lru_free,
};

const pl_placement_policy *pl_placement_lru(void) { return &lru_policy; }
