/* The engine's side of pipeline schedules: cutting the graph's blocks into
 * stage parts, tagging every task slot with its stage and position in the
 * stage's schedule, and submitting an iteration item by item. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/comm.h"
#include "engine/engine_internal.h"
#include "engine/hooks.h"
#include "engine/pipeline.h"
#include "engine/pipeline_ranks.h"
#include "engine/placement.h"
#include "engine/recompute.h"
#include "engine/task_fusion.h"
#include "engine/zero3.h"
#include "graph/error.h"

/* Measured stage balance (PL_STAGE_BALANCE_MEASURED): its state, e->balance
 * (NULL when the cut is not measured): training steps before the timed
 * one (-1: no timing to do), whether the step in flight is timed, and its
 * per-block task time (µs, summed by the task callbacks under
 * records_lock). */
struct pl_balance {
    int countdown;
    bool timing;
    bool profiling_off;       /* profiling was off before the timing */
    double *block_us;         /* [n_blocks] */
    bool valid;               /* the timed step is over and summed */
};
#include "scheduling/pipeline.h"

static int n_blocks(const pl_graph_t *g) {
    return g->n_ops ? g->ops[g->n_ops - 1].block + 1 : 1;
}

/* Each part's capacity for the balance: the workers serving its stage,
 * which run consecutive items at once (a stage dealt two workers of
 * three takes about twice the blocks). NULL when every stage has as many
 * (stages across ranks: each rank's workers serve its own stage, and
 * every rank has the same). */
static double *part_capacity(const pl_engine_t *e) {
    int p = e->opt.stages, n0 = pl_engine_stage_workers(e, 0);
    bool uniform = true, served = n0 > 0;
    for (int s = 1; s < p; s++) {
        int n = pl_engine_stage_workers(e, s);
        uniform = uniform && n == n0;
        served = served && n > 0;
    }
    if (uniform || !served || e->opt.pp > 1) return NULL;
    double *cap = malloc((size_t)e->n_parts * sizeof *cap);
    for (int k = 0; cap && k < e->n_parts; k++)
        cap[k] = pl_engine_stage_workers(e, e->part_stage[k]);
    return cap;
}

static pl_status partition(pl_engine_t *e, int p, int v) {
    const pl_graph_t *g = e->g;
    int nb = n_blocks(g);
    e->n_parts = p * v;
    e->block_part = calloc(nb, sizeof *e->block_part);
    double *cost = calloc(nb, sizeof *cost);
    /* Which stage and chunk each part is (the schedule's placement,
     * checked with its lists in check_pipeline). */
    e->part_stage = malloc((size_t)e->n_parts * sizeof *e->part_stage);
    e->part_chunk = malloc((size_t)e->n_parts * sizeof *e->part_chunk);
    if (e->part_stage && e->part_chunk)
        pl_schedule_placement(e->opt.schedule_def, p, v, e->part_stage, e->part_chunk);
    if (!e->block_part || !cost || !e->part_stage || !e->part_chunk) {
        free(cost);
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory partitioning stages");
    }
    /* Forward FLOPs per sample (each op's shape function estimates them):
     * backward costs about twice the forward for every op, so the forward
     * alone ranks blocks the same way. */
    for (int i = 0; i < g->n_ops; i++) cost[g->ops[i].block] += g->ops[i].flops;
    double *cap = part_capacity(e);
    pl_status st = pl_pipeline_partition(cost, nb, e->n_parts, cap, e->opt.layers_per_stage,
                                         e->block_part);
    free(cap);
    free(cost);
    /* The FLOP cut is a first guess: the measured balance times the second
     * training step (the first pays first-touch page faults and cold
     * caches) and recuts before the third. Nothing to choose when every
     * part is one block. */
    if (!st && !e->opt.layers_per_stage &&
        e->opt.stage_balance == PL_STAGE_BALANCE_MEASURED && nb > e->n_parts) {
        pl_balance *b = e->balance = calloc(1, sizeof *e->balance);
        if (b) b->block_us = calloc(nb, sizeof *b->block_us);
        if (!b || !b->block_us)
            return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory partitioning stages");
        b->countdown = 1;
    }
    return st;
}

/* Index into item_of of (stage, kind, microbatch, chunk); kind is a
 * pl_work_kind (F, B, W; pl_direction's values are F and B). */
static int item_slot(const pl_engine_t *e, int stage, int kind, int mb, int chunk) {
    int m = e->n_tiles, v = e->opt.model_chunks;
    return ((stage * 3 + kind) * m + mb) * v + chunk;
}

/* Whether the schedule lists W items (then the policy runs weight
 * gradients in its order instead of in the bubbles). */
static bool lists_w(const pl_engine_t *e) {
    return e->item_of && e->item_of[item_slot(e, 0, PL_WORK_W, 0, 0)] >= 0;
}

/* Builds and validates every stage's list (a bad one is refused here,
 * before any task exists, rather than hanging the first iteration). Parts
 * sharing a parameter (a tied embedding) add their weight gradients to
 * buffers of their own (engine/tied_grads.c), so no W order of theirs
 * conflicts. */
static pl_status build_schedules(pl_engine_t *e, int p, int v) {
    int m = e->n_tiles, cap = pl_schedule_capacity(v, m);
    size_t n_slots = (size_t)p * 3 * m * v;
    free(e->item_of);
    e->item_of = malloc(n_slots * sizeof *e->item_of);
    pl_work_item *items = malloc((size_t)p * cap * sizeof *items);
    if (!e->item_of || !items) {
        free(items);
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory building schedules");
    }
    for (size_t i = 0; i < n_slots; i++) e->item_of[i] = -1;
    bool w = false;
    pl_status st = pl_schedule_build(e->opt.schedule_def, p, v, m, items, e->n_items, &w);
    for (int s = 0; s < p && !st; s++)
        for (int i = 0; i < e->n_items[s]; i++) {
            const pl_work_item *it = &items[(size_t)s * cap + i];
            e->item_of[item_slot(e, s, it->kind, it->microbatch, it->chunk)] = i;
        }
    free(items);
    /* Under a placement policy a weight gradient writes its whole chunk's
     * gradient handle, so StarPU orders weight gradients of different
     * parts sharing a chunk in submission order: dependencies that a
     * listed W order could contradict. */
    if (!st && w && e->opt.placement.policy)
        st = pl_fail(PL_STATUS_INVALID_ARGUMENT,
                     "schedule '%s' lists W items, which a placement policy does not "
                     "allow (whole-chunk gradients order weight gradients across stages); "
                     "under placement use a schedule without W items (1f1b, interleaved)",
                     e->opt.schedule_def->name);
    return st;
}

static pl_status check_pipeline(pl_engine_t *e, int p, int v) {
    const pl_engine_options *o = &e->opt;
    if (p > PL_MAX_STAGES)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pipeline: %d stages, at most %d",
                       p, PL_MAX_STAGES);
    /* The schedule's own preconditions come first: they explain most
     * refusals (m < p for 1F1B, ...). */
    pl_status st = build_schedules(e, p, v);
    if (st) return st;
    if (o->batch_size % e->n_tiles != 0)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pipeline: batch size %d is not divisible into %d microbatches",
                       o->batch_size, e->n_tiles);
    if (!e->rt->own_policy)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pipeline schedules need the runtime's 'pleiades' scheduling "
                       "policy, but StarPU runs '%s' (unset STARPU_SCHED or "
                       "sched_policy)", e->rt->policy_name);
    /* Stages are served by the compute workers (GPUs when the runtime has
     * them, else CPUs; not the communication worker of a distributed run),
     * dealt round-robin: with more workers than stages a stage has several,
     * which run consecutive items of its order at once where the data
     * allows (scheduling/policy.h). Stages across ranks: every compute
     * worker of a rank serves its stage (the other stages' items are
     * empty here). */
    int ids[STARPU_NMAXWORKERS];
    bool gpu = e->rt->cuda_workers > 0;
    int all = starpu_worker_get_ids_by_type(gpu ? STARPU_CUDA_WORKER : STARPU_CPU_WORKER,
                                            ids, STARPU_NMAXWORKERS);
    int n = 0;
    for (int i = 0; i < all; i++)
        if (ids[i] != e->rt->comm_worker) ids[n++] = ids[i];
    int here = o->pp > 1 ? 1 : p;
    if (here > n)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pipeline: %d stages need %d workers (at least one per stage), "
                       "the runtime has %d %s workers", p, p, n, gpu ? "CUDA" : "CPU");
    int per = o->workers_per_stage;
    if (per > 0 && (long)per * here > n)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pipeline: workers_per_stage %d x %d stage%s%s need %ld workers, the "
                       "runtime has %d %s workers%s", per, here, here > 1 ? "s" : "",
                       o->pp > 1 ? " on this rank" : "", (long)per * here, n,
                       gpu ? "CUDA" : "CPU",
                       o->pp > 1 ? " per rank (besides the communication worker)" : "");
    if (per > 0) n = per * here;
    int own = o->pp > 1 ? pl_runtime_grid_stage(e->rt, o->dp, o->pp, e->rt->rank) : -1;
    for (int w = 0; w < STARPU_NMAXWORKERS; w++) e->worker_stage[w] = -1;
    for (int i = 0; i < n; i++) e->worker_stage[ids[i]] = own >= 0 ? own : i % p;
    return PL_STATUS_OK;
}

static const char *slot_suffix(int slot) {
    static const char *names[] = {"F", "L", "W", "B", "B1", "B2", "B3"};
    return names[slot];
}

/* Names every op task slot and tags it with its stage and schedule item
 * (again after a recut: only the stages and items change). */
static void tag_op_tasks(pl_engine_t *e) {
    const pl_graph_t *g = e->g;
    bool piped = e->opt.schedule_def != NULL;
    for (int op = 0; op < g->n_ops; op++) {
        int part = piped ? e->block_part[g->ops[op].block] : 0;
        for (int slot = 0; slot < PL_NAME_SLOTS; slot++)
            for (int t = 0; t < e->n_tiles; t++) {
                pl_task_info *ti = &e->tasks[pl_task_index(e, op, slot, t)];
                snprintf(ti->name, sizeof ti->name, "%.30s.%s.t%d", g->ops[op].name,
                         slot_suffix(slot), t);
                ti->op = op;
                ti->slot = slot;
                ti->tile = t;
                ti->stage = piped ? e->part_stage[part] : 0;
                ti->chunk = piped ? e->part_chunk[part] : 0;
                ti->tag.stage = piped ? ti->stage : -1;
                pl_work_kind kind = slot == PL_SLOT_F || slot == PL_SLOT_L ? PL_WORK_F
                                    : slot == PL_SLOT_W                    ? PL_WORK_W
                                                                           : PL_WORK_B;
                /* Weight gradients are out of order (-1) unless the
                 * schedule lists W items. */
                ti->tag.item = piped ? e->item_of[item_slot(e, ti->stage, kind, t, ti->chunk)]
                                     : -1;
                /* Out-of-order weight gradients wait behind the critical
                 * path, except under a memory budget: a deferred weight
                 * gradient keeps its microbatch's activations alive, and
                 * the extra evictions cost more than the reordering gains;
                 * and except in data parallel runs, where the last layers'
                 * weight gradients complete the first buckets, whose
                 * reductions then overlap the rest of the backward pass. */
                ti->tag.background = slot == PL_SLOT_W && ti->tag.item < 0 &&
                                     !e->opt.placement.policy && e->opt.dp <= 1;
                ti->tag.forward = ti->tag.item >= 0 && kind == PL_WORK_F;
                /* Non-pipelined: tile t's tasks rank t in the central queue
                 * when it runs lowest tile first (pl_sched_set_central_order). */
                ti->tag.order = piped ? 0 : t;
                /* 1F1B: a weight gradient must run before the stage's
                 * next forward (1F1B's memory bound). Not interleaved:
                 * measured, the wait left its peak activations as they
                 * were (12.38 MiB on stage 0, bench_pipeline 2026-11-26);
                 * nor a user's schedule, whose orders the validation
                 * cannot check against that extra wait. */
                ti->tag.owner = e->opt.schedule_def == &pl_schedule_1f1b && slot == PL_SLOT_W
                                    ? e->item_of[item_slot(e, ti->stage, PL_WORK_B, t,
                                                           ti->chunk)]
                                    : -1;
            }
    }
}

/* Names every task slot and tags it with its stage and schedule item. */
static pl_status tag_tasks(pl_engine_t *e) {
    size_t n = pl_n_task_infos(e);
    e->tasks = calloc(n ? n : 1, sizeof *e->tasks);
    if (!e->tasks) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory naming tasks");
    tag_op_tasks(e);
    for (int c = 0; c < e->chunks.n; c++) {
        pl_task_info *ti = &e->tasks[pl_opt_task_index(e, c)];
        snprintf(ti->name, sizeof ti->name, "opt.c%d", c);
        ti->op = -1;
        ti->slot = PL_SLOT_OPT;
        ti->tile = c;
        ti->tag = (pl_sched_tag){.stage = -1, .item = -1, .forward = 0, .owner = -1,
                                 .background = 1};
    }
    return PL_STATUS_OK;
}

pl_status pl_engine_pipeline_init(pl_engine_t *e) {
    pl_status st;
    /* One code path: the enum's pipelined kinds are their built-in defs. */
    if (!e->opt.schedule_def) e->opt.schedule_def = pl_pipeline_builtin(e->opt.schedule);
    if (!e->opt.schedule_def) {
        e->n_parts = 1;
        e->block_part = calloc(n_blocks(e->g), sizeof *e->block_part);
        if (!e->block_part) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory");
        return tag_tasks(e);
    }
    int p = e->opt.stages, v = e->opt.model_chunks > 0 ? e->opt.model_chunks : 1;
    e->opt.model_chunks = v;
    if ((st = check_pipeline(e, p, v))) return st;
    if ((st = partition(e, p, v))) return st;
    return tag_tasks(e);
}

/* ------------------------------------------------ measured stage balance */

/* Recuts the stages on the timed step's block times. The schedule lists
 * stay valid: they depend on p, v and m only. Called between iterations,
 * with no task in flight. */
static void recut_stages(pl_engine_t *e) {
    int nb = n_blocks(e->g);
    int *cut = malloc(nb * sizeof *cut), *old = e->block_part;
    if (!cut) return; /* keep the FLOP cut: still a valid one */
    double *cap = part_capacity(e);
    pl_pipeline_partition(e->balance->block_us, nb, e->n_parts, cap, NULL, cut);
    free(cap);
    /* Stages across ranks: a chunk's users may change with the cut, so
     * every rank first gets every chunk's parameters and states; the
     * gradients restart from zero, so a recut must not fall inside an
     * accumulation (it waits for a later timing then: none, the FLOP cut
     * stays). Every rank decides alike (same summed times, same step). */
    if (memcmp(cut, old, nb * sizeof *cut) == 0 ||
        (e->pp > 1 && (e->accumulate_step > 1 || pl_engine_pp_sync(e, true)))) {
        free(cut);
        return;
    }
    e->block_part = cut;
    if (e->pp > 1 && pl_engine_pp_recut(e) != PL_STATUS_OK) {
        /* The new cut sends an activation to two parts: keep the old. */
        e->block_part = old;
        free(cut);
        pl_engine_pp_recut(e);
        return;
    }
    free(old);
    tag_op_tasks(e);
    pl_recompute_plan(e); /* units stay inside parts; on failure none */
    if (e->pp > 1) pl_engine_placement_restage(e);
}

/* Before an iteration's submission, with every earlier task done: closes
 * a timed step (its times are all summed by now) and opens the next one. */
static void balance_close(pl_engine_t *e) {
    pl_balance *b = e->balance;
    b->timing = false;
    b->valid = true;
    /* Stages across ranks: each rank timed its own blocks (zeros for the
     * others'), so the sum is every block's time, on every rank. */
    if (e->pp > 1 && pl_comm_sum(b->block_us, n_blocks(e->g)) != PL_STATUS_OK)
        memset(b->block_us, 0, (size_t)n_blocks(e->g) * sizeof *b->block_us);
    if (b->profiling_off) starpu_profiling_status_set(STARPU_PROFILING_DISABLE);
    recut_stages(e);
    /* A sync for a recut across ranks took the chunks whole. */
    if (e->pp > 1) pl_chunk_set_partition(&e->chunks);
}

static void balance_between_iterations(pl_engine_t *e, bool forward_only) {
    pl_balance *b = e->balance;
    if (!b) return;
    if (b->timing) balance_close(e);
    if (forward_only || b->countdown < 0) return;
    if (b->countdown > 0) {
        b->countdown--;
        return;
    }
    b->countdown = -1;
    /* CUDA tasks' durations come from StarPU's profiling, on for this
     * step (CPU kernels time themselves). */
    b->profiling_off = starpu_cuda_worker_get_count() > 0 &&
                               starpu_profiling_status_get() == STARPU_PROFILING_DISABLE;
    if (b->profiling_off) starpu_profiling_status_set(STARPU_PROFILING_ENABLE);
    b->timing = true;
}

void pl_engine_balance_task_done(pl_engine_t *e, const struct starpu_task *task) {
    const pl_task_info *info = task->sched_data;
    const struct starpu_profiling_task_info *prof = task->profiling_info;
    /* CPU workers' kernels timed themselves (pl_engine_balance_add). A
     * CUDA kernel runs asynchronously on its stream, so its host thread's
     * CPU time says nothing: the task's wall time does. */
    if (!info || info->op < 0 || !prof ||
        starpu_worker_get_type(prof->workerid) != STARPU_CUDA_WORKER)
        return;
    pl_engine_balance_add(e, e->g->ops[info->op].block,
                          (double)(prof->end_time.tv_sec - prof->start_time.tv_sec) * 1e6 +
                              (double)(prof->end_time.tv_nsec - prof->start_time.tv_nsec) / 1e3);
}

void pl_engine_balance_add(pl_engine_t *e, int block, double us) {
    pthread_mutex_lock(&e->records_lock);
    e->balance->block_us[block] += us;
    pthread_mutex_unlock(&e->records_lock);
}

int pl_engine_block_times(pl_engine_t *e, double *us) {
    if (!e || !e->balance) return 0;
    if (e->balance->timing) { /* the timed step's last tasks may still run */
        starpu_task_wait_for_all();
        balance_close(e);
    }
    if (!e->balance->valid) return 0;
    int nb = n_blocks(e->g);
    for (int b = 0; us && b < nb; b++) us[b] = e->balance->block_us[b];
    return nb;
}

bool pl_engine_balance_timing(const pl_engine_t *e) {
    return e->balance && e->balance->timing;
}

void pl_engine_balance_free(pl_engine_t *e) {
    pl_balance *b = e->balance;
    if (!b) return;
    /* Freed right after its timed step: profiling back as it was. */
    if (b->timing && b->profiling_off) starpu_profiling_status_set(STARPU_PROFILING_DISABLE);
    free(b->block_us);
    free(b);
    e->balance = NULL;
}

/* First and last op of each part (parts are contiguous in op order). */
static void part_ranges(const pl_engine_t *e, int *first, int *last) {
    for (int k = 0; k < e->n_parts; k++) first[k] = -1, last[k] = -2;
    for (int op = 0; op < e->g->n_ops; op++) {
        int k = e->block_part[e->g->ops[op].block];
        if (first[k] < 0) first[k] = op;
        last[k] = op;
    }
}

pl_status pl_engine_submit_iteration(pl_engine_t *e, bool forward_only) {
    bool piped = e->opt.schedule_def != NULL;
    pl_recompute_iteration_begin(e, forward_only);
    /* Bounded memory, one stage, more tiles than workers: a tile's
     * backward before the next tile's recomputation (see
     * pl_sched_set_central_order). With as many tiles as workers every
     * tile runs at once anyway, and the order only spread the tiles'
     * uses of a layer's chunks apart (bench_memory, 2 tiles, auto at 1/4:
     * ~10 % slower, more bytes moved). */
    if (e->rt->own_policy)
        pl_sched_set_central_order(!piped && (e->recompute || e->placement) &&
                                   e->active_tiles > pl_engine_compute_workers(e));
    if (e->z3) return pl_engine_z3_submit_iteration(e, forward_only); /* never piped */
    int P = e->n_parts, m = e->active_tiles;
    if (piped) {
        /* The policy's per-stage counters restart with the iteration, so
         * the previous one must be over (a synchronous pipeline flushes at
         * the optimizer step anyway). */
        starpu_task_wait_for_all();
        balance_between_iterations(e, forward_only);
        pl_sched_configure(e->opt.stages, e->n_items, e->worker_stage, STARPU_NMAXWORKERS);
    }
    pl_schedule_item *items = malloc((size_t)2 * m * P * sizeof *items);
    int *first = malloc(P * sizeof *first), *last = malloc(P * sizeof *last);
    /* Which (stage, direction, microbatch, chunk) items were reported to
     * the policy, indexed like item_of. */
    size_t n_slots = piped ? (size_t)e->opt.stages * 3 * e->n_tiles * e->opt.model_chunks : 1;
    bool w_items = piped && lists_w(e);
    bool *reported = calloc(n_slots, sizeof *reported);
    if (!items || !first || !last || !reported) {
        free(items);
        free(first);
        free(last);
        free(reported);
        if (piped) /* nothing submitted: let every stage's order run empty */
            for (int s = 0; s < e->opt.stages; s++)
                for (int i = 0; i < e->n_items[s]; i++) pl_sched_item_submitted(s, i, 0);
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory submitting a step");
    }
    part_ranges(e, first, last);
    /* Fused op tasks (engine/task_fusion.c), except where each op's task
     * must be its own: placement moves chunks per task, the measured
     * stage balance times each op's, CUDA workers take tasks per op. */
    bool fuse = e->opt.fuse_tasks && e->fusion && !e->placement && !pl_engine_balance_timing(e) &&
                e->rt->cuda_workers == 0;
    int n = pl_schedule_none(P, m, forward_only, items);
    pl_status st = PL_STATUS_OK;
    for (int k = 0; k < n && st == PL_STATUS_OK; k++) {
        const pl_schedule_item *it = &items[k];
        e->ordered_submitted = 0;
        e->ordered_submitted_w = 0;
        /* Microbatch 0's first task of each op opens its placement step. */
        bool opens = e->placement && it->microbatch == 0;
        /* Stages across ranks: another stage's item is its rank's; this
         * one only reports it empty. Its own items receive what they read
         * from other ranks first and send what those read after. */
        bool local = pl_engine_pp_local_part(e, it->part);
        bool backward = it->direction == PL_DIRECTION_BACKWARD;
        if (local && e->pp > 1)
            st = pl_engine_pp_item_begin(e, backward, it->part, it->microbatch);
        pl_fusion_set_active(e->fusion, fuse);
        if (local && !backward)
            for (int op = first[it->part]; op <= last[it->part] && !st; op++) {
                e->pending_step = opens ? pl_step_forward(e, op) : -1;
                st = pl_op_submit_forward(e, op, it->microbatch, !forward_only);
                if (!st) st = pl_recompute_forward_done(e, op, it->microbatch);
            }
        else if (local)
            for (int op = last[it->part]; op >= first[it->part] && !st; op--) {
                st = pl_recompute_backward_begin(e, op, it->microbatch);
                e->pending_step = opens ? pl_step_backward(e, op) : -1;
                if (!st) st = pl_op_submit_backward(e, op, it->microbatch);
                if (!st) pl_engine_placement_release_op(e, op, it->microbatch);
                if (!st) st = pl_recompute_backward_done(e, op, it->microbatch);
            }
        e->pending_step = -1;
        pl_fusion_set_active(e->fusion, false);
        pl_status fst = pl_fusion_flush(e); /* also after a failure: its tasks so far */
        if (!st) st = fst;
        if (local && e->pp > 1 && !st)
            st = pl_engine_pp_item_end(e, backward, it->part, it->microbatch);
        if (it->direction == PL_DIRECTION_BACKWARD && it->part == 0 && !st)
            pl_engine_placement_release_tile(e, it->microbatch);
        if (piped) { /* also after a failure: its tasks so far */
            int stage = e->part_stage[it->part], chunk = e->part_chunk[it->part];
            int slot = item_slot(e, stage, it->direction, it->microbatch, chunk);
            /* A backward item's weight gradients form their own W item
             * when the schedule lists them (they were submitted with it). */
            int w = w_items ? e->ordered_submitted_w : 0;
            pl_sched_item_submitted(stage, e->item_of[slot], e->ordered_submitted - w);
            reported[slot] = true;
            if (w_items && it->direction == PL_DIRECTION_BACKWARD) {
                int wslot = item_slot(e, stage, PL_WORK_W, it->microbatch, chunk);
                pl_sched_item_submitted(stage, e->item_of[wslot], w);
                reported[wslot] = true;
            }
        }
    }
    /* Items that were not submitted — backward items of a forward-only
     * step, microbatches a batch smaller than the tile count leaves empty,
     * everything after a failed submission — are reported empty so each
     * stage's order moves past them instead of waiting forever. */
    if (piped)
        for (int stage = 0; stage < e->opt.stages; stage++)
            for (int kind = 0; kind < (w_items ? 3 : 2); kind++)
                for (int mb = 0; mb < e->n_tiles; mb++)
                    for (int chunk = 0; chunk < e->opt.model_chunks; chunk++) {
                        int slot = item_slot(e, stage, kind, mb, chunk);
                        if (!reported[slot])
                            pl_sched_item_submitted(stage, e->item_of[slot], 0);
                    }
    free(items);
    free(first);
    free(last);
    free(reported);
    return st;
}

int pl_engine_block_parts(const pl_engine_t *e, int *parts) {
    if (!e) return 0;
    int nb = n_blocks(e->g);
    for (int b = 0; parts && b < nb; b++) parts[b] = e->block_part[b];
    return e->n_parts;
}

int pl_engine_stage_workers(const pl_engine_t *e, int stage) {
    if (!e || !e->opt.schedule_def || stage < 0 || stage >= e->opt.stages) return 0;
    int n = 0;
    for (int w = 0; w < STARPU_NMAXWORKERS; w++) n += e->worker_stage[w] == stage;
    return n;
}

uint64_t pl_engine_sched_overhead_ns(const pl_engine_t *e) {
    (void)e;
    return pl_sched_overhead_ns();
}

pl_status pl_engine_item_times(const pl_engine_t *e, pl_item_times *out) {
    if (!e || !out)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_item_times: %s is NULL",
                       !e ? "engine" : "out");
    const pl_task_record *rec;
    int n = pl_engine_task_records(e, &rec); /* waits for the step's tasks */
    if (n < 0) return pl_last_status();
    return pl_engine_item_times_of(e, rec, n, out);
}

pl_status pl_engine_item_times_of(const pl_engine_t *e, const pl_task_record *rec, int n,
                                  pl_item_times *out) {
    *out = (pl_item_times){0, 0, 0};
    double sum[3] = {0, 0, 0};
    int any = 0;
    /* Hybrid dp x pp, every rank's records: one replica's pipeline, each
     * item counted once. */
    int dp = e->dp > 1 ? e->dp : 1, pp = e->pp > 1 ? e->pp : 1;
#define REPLICA(r) pl_runtime_grid_replica(e->rt, dp, pp, (r))
    int replica = n > 0 ? REPLICA(rec[0].rank) : 0;
    for (int i = 0; i < n; i++) {
        char ph = rec[i].phase;
        int k = ph == 'F' || ph == 'L' ? 0 : ph == 'B' ? 1 : ph == 'W' ? 2 : -1;
        if (k < 0 || rec[i].stage < 0 || REPLICA(rec[i].rank) != replica) continue;
        sum[k] += rec[i].end_us - rec[i].start_us;
        any = 1;
    }
#undef REPLICA
    if (!any)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_item_times: no forward or backward task recorded yet "
                       "(run a training step first)");
    /* Every stage has m·v items of each kind (a microbatch the batch left
     * empty ran no task: it is not counted). */
    int stages = e->opt.schedule_def ? e->opt.stages : 1;
    int chunks = e->opt.schedule_def ? e->opt.model_chunks : 1;
    double items = (double)stages * chunks * (e->active_tiles > 0 ? e->active_tiles : 1);
    *out = (pl_item_times){sum[0] / items, sum[1] / items, sum[2] / items};
    return PL_STATUS_OK;
}

double pl_engine_theoretical_bubble(const pl_engine_t *e) {
    if (!e) return 0.0;
    const pl_schedule_def *d = e->opt.schedule_def;
    if (!d) return 0.0;
    int p = e->opt.stages, v = e->opt.model_chunks, m = e->n_tiles;
    pl_item_times t;
    if (d->bubble_measured && e->opt.record_tasks && e->n_records > 0 &&
        pl_engine_item_times(e, &t) == PL_STATUS_OK)
        return d->bubble_measured(p, v, m, &t);
    return d->bubble ? d->bubble(p, v, m) : 0.0;
}

double pl_engine_bubble_of(const pl_engine_t *e, const pl_item_times *t) {
    const pl_schedule_def *d = e->opt.schedule_def;
    if (!d) return 0.0;
    int p = e->opt.stages, v = e->opt.model_chunks, m = e->n_tiles;
    if (d->bubble_measured && t) return d->bubble_measured(p, v, m, t);
    return d->bubble ? d->bubble(p, v, m) : 0.0;
}
