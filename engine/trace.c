/* pl_engine_write_trace: turns the last step's task records and the graph
 * into the plain description trace/trace.h writes (tracks, events,
 * flows, counters). Everything that needs the engine or the graph happens
 * here; the writers only format.
 *
 * Flows are the dependencies that cross stage parts, i.e. the
 * point-to-point transfers a distributed pipeline would make: for every
 * activation an op of part A produces and an op of another part B
 * consumes, the producer's forward → the consumer's forward of the same
 * microbatch, and backwards the consumer's task that writes the
 * activation's gradient → the producer's first backward task of that
 * microbatch (which reads it).
 *
 * Counters: per stage, the bytes of activations its parts keep alive — a
 * microbatch's become live when its first forward task on the stage
 * starts and die when its last backward task there ends, which is the
 * memory profile that separates 1F1B (at most p microbatches in flight)
 * from fill-drain schedules; and StarPU's main-RAM use at each task end,
 * when StarPU counts it (a memory limit is set). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/comm.h"
#include "engine/engine_internal.h"
#include "engine/pipeline.h"
#include "graph/error.h"
#include "trace/trace.h"

/* Task-name → task-slot index, so that each record finds its (op, slot,
 * tile): records carry the name the engine gave the task, and names are
 * unique per slot (open addressing, FNV-1a). */
typedef struct name_index {
    int *slot; /* [cap], -1 empty; values index e->tasks */
    size_t cap;
} name_index;

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static bool index_build(name_index *ix, const pl_task_info *tasks, size_t n) {
    ix->cap = 16;
    while (ix->cap < 2 * n) ix->cap *= 2;
    ix->slot = malloc(ix->cap * sizeof *ix->slot);
    if (!ix->slot) return false;
    for (size_t i = 0; i < ix->cap; i++) ix->slot[i] = -1;
    for (size_t i = 0; i < n; i++) {
        size_t h = fnv1a(tasks[i].name) & (ix->cap - 1);
        while (ix->slot[h] >= 0 && strcmp(tasks[ix->slot[h]].name, tasks[i].name))
            h = (h + 1) & (ix->cap - 1);
        if (ix->slot[h] < 0) ix->slot[h] = (int)i; /* first of a duplicate wins */
    }
    return true;
}

static int index_find(const name_index *ix, const pl_task_info *tasks,
                      const char *name) {
    size_t h = fnv1a(name) & (ix->cap - 1);
    while (ix->slot[h] >= 0) {
        if (strcmp(tasks[ix->slot[h]].name, name) == 0) return ix->slot[h];
        h = (h + 1) & (ix->cap - 1);
    }
    return -1;
}

/* Everything built for one trace; freed together. */
typedef struct builder {
    pl_engine_t *e;
    const pl_task_record *rec;
    int n_rec;
    size_t n_tasks;
    int *event_of_task; /* [n_tasks]: event index or -1 */
    int64_t *mem_of_event; /* [n_rec]: the record's mem_used */
    int64_t *disk_of_event; /* [n_rec]: the record's mem_offload */
    pl_trace t;
    int cap_flows, cap_counters;
    bool merged;              /* every rank's records (stages across ranks) */
    pl_task_record *own_rec;  /* the merged records, freed with the rest */
} builder;

/* Worker ids of merged ranks: rank · this + the rank's own worker id. */
#define PL_TRACE_RANK_STRIDE 1024

static void builder_free(builder *b) {
    free(b->own_rec);
    free(b->event_of_task);
    free(b->mem_of_event);
    free(b->disk_of_event);
    free(b->t.tracks);
    free(b->t.events);
    free(b->t.flows);
    free(b->t.counters);
}

static int cmp_record_start(const void *pa, const void *pb) {
    const pl_task_record *a = *(const pl_task_record *const *)pa,
                         *b = *(const pl_task_record *const *)pb;
    if (a->start_us != b->start_us) return a->start_us < b->start_us ? -1 : 1;
    return a->worker - b->worker;
}

static int cmp_track(const void *pa, const void *pb) {
    const pl_trace_track *a = pa, *b = pb;
    /* Stage workers in stage order, then the others. */
    int sa = a->stage < 0 ? INT32_MAX : a->stage, sb = b->stage < 0 ? INT32_MAX : b->stage;
    if (sa != sb) return sa < sb ? -1 : 1;
    return a->worker - b->worker;
}

static bool piped(const pl_engine_t *e) { return e->opt.schedule_def != NULL; }

/* The stage a worker serves: its pipeline stage, or 0 for every worker of
 * a non-pipelined engine (one stage that all workers share); -1 for a
 * worker outside the pipeline (it only ran optimizer updates). */
static int worker_stage(const pl_engine_t *e, int worker) {
    if (!piped(e)) return 0;
    return worker >= 0 && worker < STARPU_NMAXWORKERS ? e->worker_stage[worker] : -1;
}

static pl_status build_tracks(builder *b) {
    pl_trace *t = &b->t;
    t->tracks = calloc(b->n_rec, sizeof *t->tracks);
    if (!t->tracks) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "trace: out of memory");
    for (int i = 0; i < b->n_rec; i++) {
        int k = 0;
        while (k < t->n_tracks && t->tracks[k].worker != b->rec[i].worker) k++;
        if (k < t->n_tracks) continue;
        /* Merged ranks: the record's worker is rank · stride + worker. */
        int w = b->rec[i].worker, rank = b->rec[i].rank;
        if (b->merged && w >= 0) w %= PL_TRACE_RANK_STRIDE;
        bool comm = w >= 0 && w == b->e->rt->comm_worker;
        int stage = comm ? -1 : worker_stage(b->e, w);
        /* Stages across ranks: a rank's stage workers serve its stage
         * (its place in the dp x pp grid); every rank numbers its workers
         * alike. */
        if (b->merged && !comm)
            stage = worker_stage(b->e, w) >= 0
                        ? pl_runtime_grid_stage(b->e->rt, b->e->dp, b->e->pp, rank)
                        : -1;
        pl_trace_track *tr = &t->tracks[t->n_tracks++];
        *tr = (pl_trace_track){.worker = b->rec[i].worker, .comm = comm, .stage = stage};
        if (b->merged) {
            char name[32] = "";
            if (w >= 0 && (unsigned)w < starpu_worker_get_count())
                starpu_worker_get_name(w, name, sizeof name);
            if (comm)
                snprintf(tr->name, sizeof tr->name, "rank %d / collectives / %s", rank, name);
            else if (stage >= 0)
                snprintf(tr->name, sizeof tr->name, "rank %d / stage %d / %s", rank, stage,
                         name);
            else
                snprintf(tr->name, sizeof tr->name, "rank %d / %s", rank, name);
        }
    }
    qsort(t->tracks, t->n_tracks, sizeof *t->tracks, cmp_track);
    return PL_STATUS_OK;
}

static const char *slot_label(int slot) {
    static const char *labels[] = {"F", "L", "W", "B", "B1", "B2", "B3", "O"};
    return slot >= 0 && slot <= PL_SLOT_OPT ? labels[slot] : "?";
}

/* Events in start order, times relative to the first start. */
static pl_status build_events(builder *b) {
    pl_trace *t = &b->t;
    const pl_task_record **order = malloc(b->n_rec * sizeof *order);
    name_index ix = {0};
    t->events = calloc(b->n_rec, sizeof *t->events);
    b->mem_of_event = malloc(b->n_rec * sizeof *b->mem_of_event);
    b->disk_of_event = malloc(b->n_rec * sizeof *b->disk_of_event);
    b->event_of_task = malloc(b->n_tasks * sizeof *b->event_of_task);
    if (!order || !t->events || !b->mem_of_event || !b->disk_of_event ||
        !b->event_of_task ||
        !index_build(&ix, b->e->tasks, b->n_tasks)) {
        free(order);
        free(ix.slot);
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "trace: out of memory");
    }
    for (size_t i = 0; i < b->n_tasks; i++) b->event_of_task[i] = -1;
    for (int i = 0; i < b->n_rec; i++) order[i] = &b->rec[i];
    qsort(order, b->n_rec, sizeof *order, cmp_record_start);
    double base = order[0]->start_us;
    for (int i = 0; i < b->n_rec; i++) {
        const pl_task_record *r = order[i];
        pl_trace_event *ev = &t->events[i];
        int task = index_find(&ix, b->e->tasks, r->name);
        b->mem_of_event[i] = r->mem_used;
        b->disk_of_event[i] = r->mem_offload;
        if (task >= 0 && b->event_of_task[task] < 0) b->event_of_task[task] = i;
        const pl_task_info *ti = task >= 0 ? &b->e->tasks[task] : NULL;
        if (!ti || ti->op < 0)
            snprintf(ev->name, sizeof ev->name, "%c %s", r->phase ? r->phase : '?',
                     r->name);
        else
            snprintf(ev->name, sizeof ev->name, "%s %s mb%d", slot_label(ti->slot),
                     r->op, r->microbatch);
        snprintf(ev->op, sizeof ev->op, "%s", r->op);
        ev->phase = r->phase ? r->phase : '?';
        ev->microbatch = r->microbatch;
        ev->stage = r->stage;
        ev->chunk = r->chunk;
        ev->bytes = r->bytes;
        ev->wait_us = r->wait_us;
        ev->fused = r->fused;
        ev->start_order = r->start_order;
        ev->start_us = r->start_us - base;
        ev->end_us = r->end_us - base;
        /* 0: not recorded (StarPU's profiling was off for that task). A
         * task is ready no later than it starts, whatever the rounding. */
        ev->ready_us = r->ready_us > 0 ? fmin(r->ready_us, r->start_us) - base : NAN;
        for (int k = 0; k < t->n_tracks; k++)
            if (t->tracks[k].worker == r->worker) ev->track = k;
    }
    t->n_events = b->n_rec;
    free(order);
    free(ix.slot);
    return PL_STATUS_OK;
}

/* The event of (op, slot, tile), or -1 if that task did not run. */
static int event_at(const builder *b, int op, int slot, int tile) {
    return b->event_of_task[pl_task_index(b->e, op, slot, tile)];
}

static pl_status add_flow(builder *b, int from, int to) {
    if (from < 0 || to < 0) return PL_STATUS_OK;
    pl_trace *t = &b->t;
    if (t->n_flows == b->cap_flows) {
        int cap = b->cap_flows ? 2 * b->cap_flows : 64;
        pl_trace_flow *f = realloc(t->flows, cap * sizeof *f);
        if (!f) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "trace: out of memory");
        t->flows = f;
        b->cap_flows = cap;
    }
    t->flows[t->n_flows++] = (pl_trace_flow){from, to};
    return PL_STATUS_OK;
}

/* The producer's first backward task of a tile (B or W, by start time:
 * events are in start order, so the smallest index). */
static int first_backward(const builder *b, int op, int tile) {
    int best = -1;
    for (int slot = PL_SLOT_W; slot < PL_NAME_SLOTS; slot++) {
        if (slot == PL_SLOT_L) continue;
        int ev = event_at(b, op, slot, tile);
        if (ev >= 0 && (best < 0 || ev < best)) best = ev;
    }
    return best;
}

static int part_of(const pl_engine_t *e, int op) {
    return piped(e) ? e->block_part[e->g->ops[op].block] : 0;
}

static pl_status build_flows(builder *b) {
    const pl_graph_t *g = b->e->g;
    int tiles = b->e->active_tiles;
    for (int c = 0; c < g->n_ops; c++) {
        const pl_op *op = &g->ops[c];
        for (int i = 0; i < op->n_in; i++) {
            const pl_tensor_t *x = g->tensors[op->in[i]];
            if (x->kind != PL_TENSOR_ACTIVATION || x->producer < 0 ||
                part_of(b->e, x->producer) == part_of(b->e, c))
                continue;
            for (int mb = 0; mb < tiles; mb++) {
                int fwd = event_at(b, c, PL_SLOT_F, mb);
                if (fwd < 0) fwd = event_at(b, c, PL_SLOT_L, mb);
                pl_status st = add_flow(b, event_at(b, x->producer, PL_SLOT_F, mb), fwd);
                if (st) return st;
                if (!x->requires_grad) continue;
                /* The loss task writes its input's gradient itself. */
                int grad = event_at(b, c, PL_SLOT_B0 + i, mb);
                if (grad < 0 && i == 0) grad = event_at(b, c, PL_SLOT_L, mb);
                if ((st = add_flow(b, grad, first_backward(b, x->producer, mb))))
                    return st;
            }
        }
    }
    return PL_STATUS_OK;
}

static pl_status add_counter(builder *b, const char *track, double time_us,
                             double value) {
    pl_trace *t = &b->t;
    if (t->n_counters == b->cap_counters) {
        int cap = b->cap_counters ? 2 * b->cap_counters : 256;
        pl_trace_counter *c = realloc(t->counters, cap * sizeof *c);
        if (!c) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "trace: out of memory");
        t->counters = c;
        b->cap_counters = cap;
    }
    pl_trace_counter *c = &t->counters[t->n_counters++];
    snprintf(c->track, sizeof c->track, "%s", track);
    c->time_us = time_us;
    c->value = value;
    return PL_STATUS_OK;
}

/* A change of a stage's live bytes. */
typedef struct delta {
    double time_us, bytes;
} delta;

static int cmp_delta(const void *pa, const void *pb) {
    const delta *a = pa, *b = pb;
    if (a->time_us != b->time_us) return a->time_us < b->time_us ? -1 : 1;
    return (a->bytes > b->bytes) - (a->bytes < b->bytes); /* frees first */
}

/* Activation bytes per sample that the ops of `stage` produce (outputs and
 * internal outputs such as attention probabilities; f32 and i32 alike). */
static double stage_bytes_per_sample(const pl_engine_t *e, int stage) {
    const pl_graph_t *g = e->g;
    int p = piped(e) ? e->opt.stages : 1;
    double bytes = 0;
    for (int o = 0; o < g->n_ops; o++) {
        if ((p > 1 ? e->part_stage[part_of(e, o)] : 0) != stage) continue;
        int outs[2] = {g->ops[o].out, g->ops[o].saved};
        for (int k = 0; k < 2; k++)
            if (outs[k] >= 0 && g->tensors[outs[k]]->kind == PL_TENSOR_ACTIVATION)
                bytes += (double)g->tensors[outs[k]]->numel * 4.0;
    }
    return bytes;
}

/* Lifetime of one microbatch's activations on one stage. */
typedef struct lifetime {
    double born, fwd_end, died; /* -1: no such task */
} lifetime;

static void find_lifetimes(const builder *b, int tiles, lifetime *life) {
    for (int i = 0; i < b->t.stages * tiles; i++) life[i] = (lifetime){-1, -1, -1};
    for (int i = 0; i < b->t.n_events; i++) {
        const pl_trace_event *ev = &b->t.events[i];
        if (ev->stage < 0 || ev->stage >= b->t.stages || ev->microbatch < 0 ||
            ev->microbatch >= tiles)
            continue;
        lifetime *l = &life[ev->stage * tiles + ev->microbatch];
        if (ev->phase == 'F' || ev->phase == 'L') {
            if (l->born < 0 || ev->start_us < l->born) l->born = ev->start_us;
            if (ev->end_us > l->fwd_end) l->fwd_end = ev->end_us;
        } else if (ev->end_us > l->died) {
            l->died = ev->end_us;
        }
    }
}

static pl_status stage_counter(builder *b, int stage, int tiles,
                               const lifetime *life, delta *d) {
    int n = 0;
    double per_sample = stage_bytes_per_sample(b->e, stage);
    for (int mb = 0; mb < tiles; mb++) {
        const lifetime *l = &life[stage * tiles + mb];
        if (l->born < 0) continue;
        double bytes = per_sample * (double)b->e->tile_samples[mb];
        d[n++] = (delta){l->born, bytes};
        /* A forward-only step frees them after its last forward. */
        d[n++] = (delta){l->died >= 0 ? l->died : l->fwd_end, -bytes};
    }
    qsort(d, n, sizeof *d, cmp_delta);
    char track[64];
    snprintf(track, sizeof track, "stage %d live activations (bytes)", stage);
    /* The counter starts from nothing (unless the first change is at 0). */
    pl_status st = n == 0 || d[0].time_us > 0 ? add_counter(b, track, 0.0, 0.0)
                                               : PL_STATUS_OK;
    double live = 0;
    for (int i = 0; i < n && !st; i++) {
        live += d[i].bytes;
        /* One sample per instant: changes at the same time are one change. */
        if (i + 1 < n && d[i + 1].time_us == d[i].time_us) continue;
        st = add_counter(b, track, d[i].time_us, live);
    }
    return st;
}

static int cmp_event_end(const void *pa, const void *pb) {
    const pl_trace_event *a = *(const pl_trace_event *const *)pa,
                         *b = *(const pl_trace_event *const *)pb;
    if (a->end_us != b->end_us) return a->end_us < b->end_us ? -1 : 1;
    return (a > b) - (a < b);
}

/* StarPU's own count, where it keeps one: sampled at every task end. */
static pl_status memory_counter(builder *b) {
    const pl_trace_event **by_end = malloc(b->t.n_events * sizeof *by_end);
    if (!by_end) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "trace: out of memory");
    for (int i = 0; i < b->t.n_events; i++) by_end[i] = &b->t.events[i];
    qsort(by_end, b->t.n_events, sizeof *by_end, cmp_event_end);
    pl_status st = PL_STATUS_OK;
    for (int i = 0; i < b->t.n_events && !st; i++) {
        int64_t used = b->mem_of_event[by_end[i] - b->t.events];
        int64_t disk = b->disk_of_event[by_end[i] - b->t.events];
        if (used >= 0)
            st = add_counter(b, "compute tier in use (bytes)", by_end[i]->end_us,
                             (double)used);
        if (disk >= 0 && !st)
            st = add_counter(b, "disk tier in use (bytes)", by_end[i]->end_us,
                             (double)disk);
    }
    free(by_end);
    return st;
}

static pl_status build_counters(builder *b) {
    int tiles = b->e->active_tiles < 64 ? b->e->active_tiles : 64;
    lifetime *life = malloc(((size_t)b->t.stages * tiles + 1) * sizeof *life);
    delta *d = malloc((2 * (size_t)tiles + 1) * sizeof *d);
    pl_status st = PL_STATUS_OK;
    if (!life || !d) st = pl_fail(PL_STATUS_OUT_OF_MEMORY, "trace: out of memory");
    if (!st) find_lifetimes(b, tiles, life);
    for (int s = 0; s < b->t.stages && !st; s++) st = stage_counter(b, s, tiles, life, d);
    free(life);
    free(d);
    return st ? st : memory_counter(b);
}

int pl_engine_gather_task_records(pl_engine_t *e, pl_task_record **out) {
    if (out) *out = NULL;
    if (!out) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_gather_task_records: out is NULL");
        return -1;
    }
    const pl_task_record *mine;
    int n = pl_engine_task_records(e, &mine); /* waits for the step's tasks */
    if (n < 0) return -1;
    /* Right after a barrier each rank reads its clock (StarPU's, the one
     * its profiling times use); rank r's times then move by rank 0's
     * reading minus its own. One host's ranks share the clock, so the
     * shift is the barrier's skew (microseconds); across hosts it removes
     * the clocks' offset to within that skew. */
    bool spread = e->rt->world_size > 1; /* data or pipeline parallel */
    pl_status st = spread ? pl_comm_barrier() : PL_STATUS_OK;
    double now = starpu_timing_now();
    void *clocks = NULL, *recs = NULL;
    size_t n_clocks = 0, n_bytes = 0;
    int world = spread ? e->rt->world_size : 1;
    int *counts = calloc((size_t)world, sizeof *counts);
    if (!counts) st = pl_fail(PL_STATUS_OUT_OF_MEMORY, "gathering task records: out of memory");
    if (!st && spread) st = pl_comm_gather_bytes(&now, sizeof now, &clocks, &n_clocks, NULL);
    if (!st && spread)
        st = pl_comm_gather_bytes(mine, (size_t)n * sizeof *mine, &recs, &n_bytes, counts);
    if (!st && !spread) {
        recs = malloc((size_t)(n ? n : 1) * sizeof *mine);
        if (!recs) st = pl_fail(PL_STATUS_OUT_OF_MEMORY, "gathering task records: out of memory");
        else memcpy(recs, mine, (size_t)n * sizeof *mine);
        n_bytes = (size_t)n * sizeof *mine;
        counts[0] = (int)n_bytes;
        clocks = malloc(sizeof now);
        if (clocks) *(double *)clocks = now;
        else st = pl_fail(PL_STATUS_OUT_OF_MEMORY, "gathering task records: out of memory");
    }
    int total = 0;
    if (!st && recs) {
        pl_task_record *all = recs;
        const double *clock = clocks;
        for (int r = 0; r < world; r++)
            for (int k = 0; k < counts[r] / (int)sizeof *all; k++, total++) {
                all[total].start_us += clock[0] - clock[r];
                all[total].end_us += clock[0] - clock[r];
                if (all[total].ready_us > 0) all[total].ready_us += clock[0] - clock[r];
                all[total].rank = r;
            }
        *out = all;
        recs = NULL;
    }
    free(recs);
    free(clocks);
    free(counts);
    return st ? -1 : total;
}

/* Stages across ranks: every rank's records on rank 0, each worker id
 * made unique (rank · stride + the rank's own id). */
static pl_status merge_ranks(builder *b) {
    pl_task_record *all;
    int n = pl_engine_gather_task_records(b->e, &all);
    if (n < 0) return pl_last_status();
    for (int i = 0; i < n; i++)
        if (all[i].worker >= 0) all[i].worker += all[i].rank * PL_TRACE_RANK_STRIDE;
    b->own_rec = all;
    b->rec = all;
    b->n_rec = n;
    b->merged = true;
    return PL_STATUS_OK;
}

/* The schedule's definition names it (the built-ins "1f1b" and
 * "interleaved", a user's its own). */
static const char *schedule_name(const pl_engine_t *e) {
    return e->opt.schedule_def ? e->opt.schedule_def->name : "none";
}

pl_status pl_engine_write_trace(pl_engine_t *e, const char *json_path,
                                const char *paje_path) {
    if (!e)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_write_trace: engine is NULL");
    if (!e->opt.record_tasks)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_write_trace: the engine does not record tasks "
                       "(set pl_engine_options.record_tasks)");
    builder b = {.e = e, .n_tasks = pl_n_task_infos(e)};
    b.n_rec = pl_engine_task_records(e, &b.rec); /* waits for the step's tasks */
    if (b.n_rec < 0) return pl_last_status();
    /* Stages across ranks: one file, by rank 0, of every rank's records
     * (a collective every rank joins; the others write nothing). */
    if (e->pp > 1) {
        pl_status mst = merge_ranks(&b);
        if (mst || e->rt->rank != 0) {
            builder_free(&b);
            return mst;
        }
    }
    if (b.n_rec == 0)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_write_trace: no tasks recorded yet (run a step first)");
    bool p = piped(e);
    /* The item times a measured theory (ZB-H1's) is computed from, over
     * the trace's records (every rank's, merged). */
    const pl_schedule_def *d = e->opt.schedule_def;
    pl_item_times it;
    bool timed = d && d->bubble_measured &&
                 pl_engine_item_times_of(e, b.rec, b.n_rec, &it) == PL_STATUS_OK;
    b.t = (pl_trace){.schedule = schedule_name(e),
                     .stages = p ? e->opt.stages : 1,
                     .chunks = p ? e->opt.model_chunks : 1,
                     .microbatches = e->active_tiles,
                     .theoretical_bubble = pl_engine_bubble_of(e, timed ? &it : NULL)};
    if (timed) {
        b.t.item_us[0] = it.f, b.t.item_us[1] = it.b, b.t.item_us[2] = it.w;
        b.t.has_item_times = true;
    }
    pl_status st = build_tracks(&b);
    if (!st) st = build_events(&b);
    if (!st) st = build_flows(&b);
    if (!st) st = build_counters(&b);
    if (!st && json_path) st = pl_trace_write_json(&b.t, json_path);
    if (!st && paje_path) st = pl_trace_write_paje(&b.t, paje_path);
    builder_free(&b);
    return st;
}
