/* Building and validating pl_schedule_defs (pleiades/schedule.h). The
 * policy enforces a stage's order strictly, so a bad list would not fail:
 * it would hang the iteration (a stage waiting forever for an item that
 * never becomes ready) or leave tasks unscheduled. Everything is therefore
 * checked here, once, before any task exists. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "scheduling/pipeline.h"

int pl_schedule_capacity(int v, int m) { return 3 * v * m; }

bool pl_schedule_append(pl_work_item *items, int capacity, int *n, pl_work_item item) {
    if (!n) return false;
    /* Past the room (or with no buffer): nothing written, but counted, so
     * the build's return (*n) makes the engine refuse the list naming the
     * schedule, the stage and both counts. */
    bool fits = items && *n >= 0 && *n < capacity;
    if (fits) items[*n] = item;
    if (*n < INT_MAX) (*n)++;
    return fits;
}

static const char *kind_name(pl_work_kind k) {
    return k == PL_WORK_F ? "F" : k == PL_WORK_B ? "B" : "W";
}

static const char *describe(const pl_work_item *it, char *buf, size_t size) {
    snprintf(buf, size, "%s of microbatch %d, chunk %d", kind_name(it->kind),
             it->microbatch, it->chunk);
    return buf;
}

int pl_schedule_part(const pl_schedule_def *def, int p, int v, int stage, int chunk) {
    return def && def->part ? def->part(p, v, stage, chunk) : stage + chunk * p;
}

pl_status pl_schedule_placement(const pl_schedule_def *def, int p, int v, int *stage_of,
                                int *chunk_of) {
    int n = p * v;
    int *seen = malloc((size_t)n * sizeof *seen);
    if (!seen) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory placing chunks");
    for (int k = 0; k < n; k++) seen[k] = -1;
    const char *name = def && def->name ? def->name : "(unnamed)";
    for (int s = 0; s < p; s++)
        for (int c = 0; c < v; c++) {
            int k = pl_schedule_part(def, p, v, s, c);
            /* A placement that is not a bijection would leave a part to no
             * stage (its tasks never run) or give one part two stages. */
            pl_status st = PL_STATUS_OK;
            if (k < 0 || k >= n)
                st = pl_fail(PL_STATUS_INVALID_ARGUMENT,
                             "schedule '%s': its part function places chunk %d of stage %d "
                             "on part %d, outside 0..%d (p %d, v %d)", name, c, s, k, n - 1,
                             p, v);
            else if (seen[k] >= 0)
                st = pl_fail(PL_STATUS_INVALID_ARGUMENT,
                             "schedule '%s': its part function places chunk %d of stage %d "
                             "and chunk %d of stage %d both on part %d (p %d, v %d)", name,
                             seen[k] % v, seen[k] / v, c, s, k, p, v);
            if (st) {
                free(seen);
                return st;
            }
            seen[k] = s * v + c;
            if (stage_of) stage_of[k] = s;
            if (chunk_of) chunk_of[k] = c;
        }
    free(seen);
    return PL_STATUS_OK;
}

/* Dense index of (kind F/B/W, microbatch, part) for the per-item tables. */
static size_t key(int m, int n_parts, pl_work_kind kind, int mb, int part) {
    return ((size_t)kind * m + mb) * n_parts + part;
}

/* The first dependency of `it` on stage s that is not done yet (false if
 * none): F of (mb, k) needs F of (mb, k−1); B of (mb, k) needs F of
 * (mb, k) and B of (mb, k+1) — the graph's data flow between parts. W of
 * (mb, k) reads what B of (mb, k) wrote and adds to the gradients W of
 * (mb−1, k) added to (StarPU orders those writes as the engine submits
 * them: microbatch by microbatch, parts from the last). Parts sharing a
 * parameter (a tied embedding) add to gradients of their own, summed
 * after the pass (engine/tied_grads.c): no order between their W's.
 * *dmb is the dependency's microbatch. */
static bool pending_dependency(const bool *done, const int *part_of, int v, int m,
                               int n_parts, int s, const pl_work_item *it, pl_work_kind *dk,
                               int *dpart, int *dmb) {
    int k = part_of[s * v + it->chunk], mb = it->microbatch;
    *dmb = mb;
    if (it->kind == PL_WORK_W) {
        if (!done[key(m, n_parts, PL_WORK_B, mb, k)])
            return *dk = PL_WORK_B, *dpart = k, true;
        if (mb > 0 && !done[key(m, n_parts, PL_WORK_W, mb - 1, k)])
            return *dk = PL_WORK_W, *dpart = k, *dmb = mb - 1, true;
        return false;
    }
    if (it->kind == PL_WORK_F) {
        if (k > 0 && !done[key(m, n_parts, PL_WORK_F, it->microbatch, k - 1)])
            return *dk = PL_WORK_F, *dpart = k - 1, true;
        return false;
    }
    if (!done[key(m, n_parts, PL_WORK_F, it->microbatch, k)])
        return *dk = PL_WORK_F, *dpart = k, true;
    if (k + 1 < n_parts && !done[key(m, n_parts, PL_WORK_B, it->microbatch, k + 1)])
        return *dk = PL_WORK_B, *dpart = k + 1, true;
    return false;
}

/* Runs the stages' lists in order, each stage taking its next item as
 * soon as that item's dependencies are done. The policy does the same at
 * run time (one worker per stage, items strictly in order), so a schedule
 * that gets stuck here would hang there. pos[s] is the index of each
 * stage's first item not done. */
static pl_status simulate(const pl_schedule_def *def, int p, int v, int m,
                          const pl_work_item *items, const int *n_items,
                          const int *where) {
    int cap = pl_schedule_capacity(v, m), n_parts = p * v;
    bool *done = calloc((size_t)3 * m * n_parts, sizeof *done);
    int *pos = calloc(p, sizeof *pos);
    /* The placement: part_of[s·v + c], and each part's stage and chunk. */
    int *part_of = malloc((size_t)3 * n_parts * sizeof *part_of);
    if (!done || !pos || !part_of) {
        free(done);
        free(pos);
        free(part_of);
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory checking a schedule");
    }
    int *stage_of = part_of + n_parts, *chunk_of = stage_of + n_parts;
    pl_schedule_placement(def, p, v, stage_of, chunk_of); /* checked before */
    for (int k = 0; k < n_parts; k++) part_of[stage_of[k] * v + chunk_of[k]] = k;
    pl_work_kind dk = PL_WORK_F;
    int dpart = 0, dmb = 0;
    bool progress = true;
    while (progress) {
        progress = false;
        for (int s = 0; s < p; s++)
            while (pos[s] < n_items[s]) {
                const pl_work_item *it = &items[(size_t)s * cap + pos[s]];
                if (pending_dependency(done, part_of, v, m, n_parts, s, it, &dk, &dpart,
                                       &dmb))
                    break;
                done[key(m, n_parts, it->kind, it->microbatch, part_of[s * v + it->chunk])] =
                    true;
                pos[s]++;
                progress = true;
            }
    }
    pl_status st = PL_STATUS_OK;
    int s = 0;
    while (s < p && pos[s] == n_items[s]) s++;
    if (s < p) {
        /* Follow the waits from the first stuck stage (each stuck stage
         * waits for an item of a stage that is stuck too) until they
         * close a cycle, and name the wait that closes it: the stage, its
         * item, what it waits for and where that stage is blocked. */
        bool *seen = calloc(p, sizeof *seen);
        const pl_work_item *it;
        int ds;
        for (;;) {
            it = &items[(size_t)s * cap + pos[s]];
            pending_dependency(done, part_of, v, m, n_parts, s, it, &dk, &dpart, &dmb);
            ds = stage_of[dpart];
            if (ds == s || !seen || seen[ds]) break;
            seen[s] = true;
            s = ds;
        }
        free(seen);
        pl_work_item dep = {dk, dmb, chunk_of[dpart]};
        int at = where[(size_t)ds * 3 * m * v + key(m, v, dk, dmb, dep.chunk)];
        char a[64], b[64], c[64];
        if (ds == s)
            st = pl_fail(PL_STATUS_INVALID_ARGUMENT,
                         "schedule '%s' deadlocks (p %d, v %d, m %d): stage %d, item "
                         "%d (%s) needs %s, which stage %d lists later, at item %d",
                         def->name, p, v, m, s, pos[s], describe(it, a, sizeof a),
                         describe(&dep, b, sizeof b), s, at);
        else
            st = pl_fail(PL_STATUS_INVALID_ARGUMENT,
                         "schedule '%s' deadlocks (p %d, v %d, m %d): stage %d, item "
                         "%d (%s) waits for %s on stage %d, which stage %d lists at "
                         "item %d, behind its own blocked item %d (%s)",
                         def->name, p, v, m, s, pos[s], describe(it, a, sizeof a),
                         describe(&dep, b, sizeof b), ds, ds, at, pos[ds],
                         describe(&items[(size_t)ds * cap + pos[ds]], c, sizeof c));
    }
    free(done);
    free(pos);
    free(part_of);
    return st;
}

/* Every F and B of every (microbatch, chunk) exactly once in each stage's
 * list, and every W or none (in all stages alike), nothing else.
 * where[s][kind][mb][chunk] gets each item's index; *lists_w whether the
 * schedule lists W items. */
static pl_status check_items(const pl_schedule_def *def, int p, int v, int m,
                             const pl_work_item *items, const int *n_items, int *where,
                             bool *lists_w) {
    int cap = pl_schedule_capacity(v, m);
    char a[64];
    *lists_w = false;
    for (int s = 0; s < p; s++)
        for (int i = 0; i < n_items[s]; i++)
            if (items[(size_t)s * cap + i].kind == PL_WORK_W) *lists_w = true;
    for (int s = 0; s < p; s++) {
        int *w = where + (size_t)s * 3 * m * v;
        for (int i = 0; i < 3 * m * v; i++) w[i] = -1;
        for (int i = 0; i < n_items[s]; i++) {
            const pl_work_item *it = &items[(size_t)s * cap + i];
            if (it->kind != PL_WORK_F && it->kind != PL_WORK_B && it->kind != PL_WORK_W)
                return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                               "schedule '%s': stage %d, item %d has unknown kind %d",
                               def->name, s, i, (int)it->kind);
            if (it->microbatch < 0 || it->microbatch >= m || it->chunk < 0 ||
                it->chunk >= v)
                return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                               "schedule '%s': stage %d, item %d (%s) is out of range: "
                               "microbatches 0..%d, chunks 0..%d",
                               def->name, s, i, describe(it, a, sizeof a), m - 1, v - 1);
            int *at = &w[key(m, v, it->kind, it->microbatch, it->chunk)];
            if (*at >= 0)
                return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                               "schedule '%s': stage %d lists %s twice (items %d and %d)",
                               def->name, s, describe(it, a, sizeof a), *at, i);
            *at = i;
        }
        int last = *lists_w ? PL_WORK_W : PL_WORK_B;
        for (int kind = PL_WORK_F; kind <= last; kind++)
            for (int mb = 0; mb < m; mb++)
                for (int c = 0; c < v; c++)
                    if (w[key(m, v, (pl_work_kind)kind, mb, c)] < 0) {
                        pl_work_item it = {(pl_work_kind)kind, mb, c};
                        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                                       "schedule '%s': stage %d lacks %s (each stage "
                                       "lists F and B of every microbatch and chunk "
                                       "once%s)", def->name, s, describe(&it, a, sizeof a),
                                       kind == PL_WORK_W ? ", and W too once any stage "
                                                           "lists a W" : "");
                    }
    }
    return PL_STATUS_OK;
}

pl_status pl_schedule_build(const pl_schedule_def *def, int p, int v, int m,
                            pl_work_item *items, int *n_items, bool *lists_w) {
    if (!def || !def->build)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "schedule: the definition or its build function is NULL");
    const char *name = def->name ? def->name : "(unnamed)";
    if (p < 1 || m < 1)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pipeline: stages %d and microbatches %d must be >= 1", p, m);
    if (v < 1)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pipeline: model chunks %d must be >= 1", v);
    if (def->check) {
        /* A user's check cannot set a message (pl_fail is internal); the
         * built-ins' can, and theirs is kept. */
        pl_clear_error();
        pl_status st = def->check(p, v, m);
        if (st) {
            if (!*pl_last_error())
                pl_fail(st, "schedule '%s': its check refuses p %d, v %d, m %d (%s)",
                        name, p, v, m, pl_status_string(st));
            return st;
        }
    }
    pl_status pst = pl_schedule_placement(def, p, v, NULL, NULL);
    if (pst) return pst;
    int cap = pl_schedule_capacity(v, m);
    /* Each stage is built into a scratch list of `cap` items followed by
     * as many guard items: a build that writes past its capacity (the
     * stages' lists are adjacent, the last one ends the allocation)
     * overwrote the next stage's list or the heap before its count could
     * be checked. The guard turns an overrun of up to cap items into a
     * refusal; pl_schedule_append refuses past the capacity at once. */
    pl_work_item *scratch = malloc(2 * (size_t)cap * sizeof *scratch);
    if (!scratch) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory building a schedule");
    const pl_work_item guard = {(pl_work_kind)-1, INT_MIN, INT_MIN};
    for (int s = 0; s < p; s++) {
        for (int i = cap; i < 2 * cap; i++) scratch[i] = guard;
        int n = def->build(def, p, v, m, s, scratch, cap, def->user);
        int wrote = -1;
        for (int i = 2 * cap - 1; i >= cap && wrote < 0; i--)
            if (memcmp(&scratch[i], &guard, sizeof guard) != 0) wrote = i + 1;
        pl_status st = PL_STATUS_OK;
        if (wrote >= 0)
            st = pl_fail(PL_STATUS_INVALID_ARGUMENT,
                         "schedule '%s': its build wrote at least %d items for stage %d, "
                         "past the %d it was given room for (3·m·v; use "
                         "pl_schedule_append, which refuses past the capacity)",
                         name, wrote, s, cap);
        else if (n < 0)
            st = pl_fail(PL_STATUS_INVALID_ARGUMENT,
                         "schedule '%s': its build refuses stage %d of p %d, v %d, m %d",
                         name, s, p, v, m);
        else if (n > cap)
            st = pl_fail(PL_STATUS_INVALID_ARGUMENT,
                         "schedule '%s': stage %d has %d items, more than the %d "
                         "its build was given room for", name, s, n, cap);
        if (st) {
            free(scratch);
            return st;
        }
        if (items) memcpy(items + (size_t)s * cap, scratch, (size_t)n * sizeof *scratch);
        n_items[s] = n;
    }
    free(scratch);
    int *where = malloc((size_t)p * 3 * m * v * sizeof *where);
    if (!where) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory checking a schedule");
    pl_schedule_def named = *def;
    named.name = name;
    bool w = false;
    pl_status st = check_items(&named, p, v, m, items, n_items, where, &w);
    if (!st) st = simulate(&named, p, v, m, items, n_items, where);
    if (lists_w) *lists_w = w;
    free(where);
    return st;
}

pl_status pl_schedule_validate(const pl_schedule_def *def, int p, int v, int m) {
    if (p < 1 || m < 1 || v < 1)
        return pl_schedule_build(def, p, v, m, NULL, NULL, NULL); /* refuses */
    pl_work_item *items = malloc((size_t)p * pl_schedule_capacity(v, m) * sizeof *items);
    int *n_items = malloc((size_t)p * sizeof *n_items);
    pl_status st = items && n_items
                       ? pl_schedule_build(def, p, v, m, items, n_items, NULL)
                       : pl_fail(PL_STATUS_OUT_OF_MEMORY,
                                 "out of memory checking a schedule");
    free(items);
    free(n_items);
    return st;
}
