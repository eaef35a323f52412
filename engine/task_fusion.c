/* Fused op tasks (pl_engine_options.fuse_tasks): the op tasks the engine
 * submits for one schedule item run as a few StarPU tasks, one per kind
 * of work (forward and loss / input gradients / weight gradients).
 *
 * Why: StarPU spends 5-40 µs of a worker between two tasks (job
 * termination, the successors' push, the fetch and release of each
 * buffer, profiling; more with more buffers), and a small GPT's
 * microbatch is ~120 op tasks of 10 µs to 2 ms. A pipeline stage's worker
 * runs an item's tasks back to back anyway (each waits for the one
 * before), so that time is pure idle: 2-2.5 ms of a 65 ms step in
 * bench_pipeline, as much as interleaved's whole theoretical bubble.
 *
 * Groups: the whole item on a pipeline stage (what crosses stages is the
 * item's input and output, so nothing waits longer) and without
 * pipelining when each worker has a tile of its own; one block when tiles
 * outnumber workers (see pl_fusion_add). Weight gradients are split per
 * parameter chunk as well (a chunk's gradient reduction, norm or update
 * waits for its own chunk only), and without pipelining they are
 * collected but submitted one by one (see flush).
 *
 * A fused task carries the union of its members' buffers, each with the
 * access the group as a whole needs: written first by a member, W (no
 * fetch of old contents); read first and written later, RW; only read, R.
 * Members run in submission order, the order StarPU's sequential
 * consistency gave them as separate tasks, so results are bitwise those of
 * separate tasks. Each member's own start and end are kept: task records
 * and traces list members, not the fused task.
 *
 * Collecting is safe because the engine submits an item's backward ops in
 * reverse order with each op's input-gradient tasks before its weight
 * gradient, and the groups are flushed input gradients first: a weight
 * gradient reads only its op's output gradient (written by later ops'
 * input-gradient tasks, earlier in submission) and values, and no input
 * gradient reads what a weight gradient writes, so moving an op's weight
 * gradient after its block's input gradients changes no dependency. Only
 * op tasks are collected, and only between an item's first op and
 * pl_fusion_flush (engine/pipeline.c); nothing else is submitted there. */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/task_fusion.h"
#include "graph/error.h"

#define FUSE_MAX_MEMBERS PL_FUSION_MAX_MEMBERS
#define FUSE_MAX_HANDLES 128
#define FUSE_MAX_MEMBER_BUFS 32

typedef struct fused_member {
    struct starpu_codelet *cl;
    size_t task_index;
    size_t args_offset, args_size;
    int n;
    short map[FUSE_MAX_MEMBER_BUFS]; /* member buffer -> fused buffer */
    enum starpu_data_access_mode mode[FUSE_MAX_MEMBER_BUFS]; /* its own */
    double start_us, end_us;         /* set when it runs */
} fused_member;

/* The fused task's argument block: members, then their arguments. */
typedef struct fused_args {
    int64_t id; /* pl_task_record.fused */
    int n_members;
    fused_member member[FUSE_MAX_MEMBERS];
} fused_args;

/* A group being collected: [0] forward and input gradients, [1] weight
 * gradients. */
typedef struct pl_fusion_group {
    bool open;
    int block, chunk; /* what its members share (-1: anything) */
    pl_sched_tag tag;
    int n_handles;
    starpu_data_handle_t h[FUSE_MAX_HANDLES];
    enum starpu_data_access_mode m[FUSE_MAX_HANDLES];
    fused_args *args; /* header; argument bytes follow at args_len */
    size_t args_len, args_cap;
} pl_fusion_group;

static void fused_cpu(void *buffers[], void *cl_arg) {
    fused_args *f = cl_arg;
    unsigned char *base = cl_arg;
    for (int i = 0; i < f->n_members; i++) {
        fused_member *mb = &f->member[i];
        void *sub[FUSE_MAX_MEMBER_BUFS];
        for (int b = 0; b < mb->n; b++) sub[b] = buffers[mb->map[b]];
        mb->start_us = starpu_timing_now();
        mb->cl->cpu_funcs[0](sub, base + mb->args_offset);
        mb->end_us = starpu_timing_now();
    }
}

static struct starpu_codelet pl_cl_fused = {
    .name = "fused",
    .cpu_funcs = {fused_cpu},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
};

bool pl_fusion_is_fused(const struct starpu_task *task) { return task->cl == &pl_cl_fused; }

int pl_fusion_members(const struct starpu_task *task, pl_fusion_member *out, int max,
                      int64_t *id) {
    const fused_args *f = task->cl_arg;
    int n = 0;
    *id = f->id;
    for (int i = 0; i < f->n_members && n < max; i++, n++)
        out[n] = (pl_fusion_member){.task_index = f->member[i].task_index,
                                    .start_us = f->member[i].start_us,
                                    .end_us = f->member[i].end_us};
    return n;
}

/* The module's state (e->fusion): the groups being collected (forward,
 * loss and input gradients; weight gradients), whether op tasks submitted
 * now are collected, and the fused tasks' ids. */
struct pl_fusion {
    pl_fusion_group group[2];
    bool active;
    int64_t fused_tasks;
};

bool pl_fusion_active(const pl_fusion *f) { return f && f->active; }

void pl_fusion_set_active(pl_fusion *f, bool active) {
    if (f) f->active = active;
}

pl_status pl_fusion_init(pl_engine_t *e) {
    e->fusion = calloc(1, sizeof *e->fusion);
    if (!e->fusion) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_engine_new: out of memory");
    return PL_STATUS_OK;
}

void pl_fusion_free(pl_engine_t *e) {
    if (!e->fusion) return;
    for (int k = 0; k < 2; k++) free(e->fusion->group[k].args);
    free(e->fusion);
    e->fusion = NULL;
}

/* Submits member i on its own, as it would have been without fusion. */
static pl_status submit_member(pl_engine_t *e, pl_fusion_group *g, int i) {
    fused_member *mb = &g->args->member[i];
    starpu_data_handle_t h[FUSE_MAX_MEMBER_BUFS];
    for (int b = 0; b < mb->n; b++) h[b] = g->h[mb->map[b]];
    return pl_engine_submit_modes(e, mb->cl, mb->task_index,
                                  (unsigned char *)g->args + mb->args_offset, mb->args_size,
                                  mb->n, h, mb->mode);
}

static pl_status flush(pl_engine_t *e, pl_fusion_group *g) {
    if (!g->open) return PL_STATUS_OK;
    g->open = false;
    fused_args *f = g->args;
    /* Weight gradients without pipelining: collected (they must follow
     * their block's input gradients) but submitted one by one. Measured
     * (bench_pipeline, none with 2 tiles): fused per block and chunk, the
     * last ones are a few large tasks that one worker runs while the other
     * waits, idle 3.1-4.4 % of the step against 2.4 % for separate ones
     * (2.5-4.4 % with nothing fused). On a pipeline stage one worker runs
     * them all anyway, and fused they leave smaller bubbles. */
    bool separate = g->tag.stage < 0 && g->tag.background;
    if (f->n_members > 1 && !separate) {
        f->id = e->fusion->fused_tasks++;
        return pl_engine_submit_modes(e, &pl_cl_fused, f->member[0].task_index, f,
                                      g->args_len, g->n_handles, g->h, g->m);
    }
    for (int i = 0; i < f->n_members; i++) {
        pl_status st = submit_member(e, g, i);
        if (st) return st;
    }
    return PL_STATUS_OK;
}

pl_status pl_fusion_flush(pl_engine_t *e) {
    if (!e->fusion) return PL_STATUS_OK;
    pl_status st = flush(e, &e->fusion->group[0]);
    pl_status st2 = flush(e, &e->fusion->group[1]);
    return st ? st : st2;
}

static bool same_tag(const pl_sched_tag *a, const pl_sched_tag *b) {
    return a->stage == b->stage && a->item == b->item && a->forward == b->forward &&
           a->background == b->background && a->owner == b->owner && a->comm == b->comm;
}

/* The chunk of an op's first parameter, -1 for none. */
static int chunk_of(const pl_engine_t *e, int op_index) {
    const pl_op *op = &e->g->ops[op_index];
    return pl_op_n_params(op) > 0 ? e->trt[op->in[op->n_inputs]].chunk : -1;
}

static int find_handle(const pl_fusion_group *g, starpu_data_handle_t h) {
    for (int i = 0; i < g->n_handles; i++)
        if (g->h[i] == h) return i;
    return -1;
}

static pl_status reserve_args(pl_fusion_group *g, size_t more) {
    if (g->args_len + more <= g->args_cap) return PL_STATUS_OK;
    size_t cap = g->args_cap ? g->args_cap : sizeof(fused_args) + 4096;
    while (cap < g->args_len + more) cap *= 2;
    fused_args *a = realloc(g->args, cap);
    if (!a) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory fusing tasks");
    g->args = a;
    g->args_cap = cap;
    return PL_STATUS_OK;
}

/* Whether the group can take a member with these buffers. */
static bool fits(const pl_fusion_group *g, int n_handles, starpu_data_handle_t *handles) {
    if (g->args->n_members == FUSE_MAX_MEMBERS) return false;
    int fresh = 0;
    for (int i = 0; i < n_handles; i++) fresh += find_handle(g, handles[i]) < 0;
    return g->n_handles + fresh <= FUSE_MAX_HANDLES;
}

pl_status pl_fusion_add(pl_engine_t *e, struct starpu_codelet *cl, size_t task_index,
                        const void *args, size_t args_size, int n_handles,
                        starpu_data_handle_t *handles,
                        const enum starpu_data_access_mode *modes, bool *taken) {
    *taken = false;
    const pl_task_info *info = &e->tasks[task_index];
    /* A task no group can take is submitted on its own, after what was
     * collected before it (it may read what those write). */
    if (n_handles > FUSE_MAX_MEMBER_BUFS || !cl->cpu_funcs[0]) return pl_fusion_flush(e);
    /* Pipeline stages: the whole item (a stage's worker runs it alone, and
     * what crosses stages is the item's input and output). Without
     * pipelining, the whole item too when each worker has a tile of its
     * own (bench_pipeline, none with 2 tiles on 2 workers: idle 1.8-2.2 %
     * of the step against 2.7-3.2 % per block, same step time); per block
     * when tiles outnumber the workers (8 tiles: per block the step was
     * 2 % faster, as both workers then run one block's tiles in turn and
     * reuse its weights in cache, where whole items stream every weight
     * once per tile). */
    bool whole_item = info->tag.stage >= 0 || e->active_tiles <= e->rt->cpu_workers;
    int block = whole_item ? -1 : e->g->ops[info->op].block;
    /* Weight gradients: one group per parameter chunk as well, so that a
     * chunk's gradient reduction (data parallelism) or norm (clipping)
     * waits for its own chunk's weight gradients only. */
    int chunk = info->slot == PL_SLOT_W ? chunk_of(e, info->op) : -1;
    pl_fusion_group *g = &e->fusion->group[info->slot == PL_SLOT_W];
    /* A new block, item or chunk closes both groups, input gradients
     * first (the weight gradients read what they wrote). So the backward
     * pass is also cut where the weight gradients change chunk, which lets
     * the first chunks' weight gradients run while later input gradients
     * do: measured (bench_pipeline, none with 2 tiles, three A/B runs), a
     * single input-gradient task per tile, with weight-gradient groups
     * kept open per chunk until it ended, left 2.3-4.1 % of the step idle
     * against 1.4-2.3 % this way (pipelines the same either way). */
    if (g->open &&
        (g->block != block || g->chunk != chunk || !same_tag(&g->tag, &info->tag))) {
        pl_status st = pl_fusion_flush(e);
        if (st) return st;
    }
    if (g->open && !fits(g, n_handles, handles)) {
        pl_status st = pl_fusion_flush(e);
        if (st) return st;
    }
    if (!g->open) {
        pl_status st = reserve_args(g, sizeof(fused_args));
        if (st) return st;
        g->open = true;
        g->block = block;
        g->chunk = chunk;
        g->tag = info->tag;
        g->n_handles = 0;
        g->args->n_members = 0;
        g->args_len = sizeof(fused_args);
    }
    /* Arguments aligned for any member's block. */
    size_t at = (g->args_len + 15) & ~(size_t)15;
    pl_status st = reserve_args(g, at - g->args_len + args_size);
    if (st) return st;
    fused_member *mb = &g->args->member[g->args->n_members++];
    mb->cl = cl;
    mb->task_index = task_index;
    mb->args_offset = at;
    mb->args_size = args_size;
    mb->n = n_handles;
    mb->start_us = mb->end_us = 0;
    memcpy((unsigned char *)g->args + at, args, args_size);
    g->args_len = at + args_size;
    for (int i = 0; i < n_handles; i++) {
        enum starpu_data_access_mode want = modes ? modes[i] : cl->modes[i];
        int k = find_handle(g, handles[i]);
        if (k < 0) {
            k = g->n_handles++;
            g->h[k] = handles[i];
            g->m[k] = want;
        } else if (g->m[k] == STARPU_R && (want & STARPU_W)) {
            g->m[k] = STARPU_RW; /* read by an earlier member: keep its data */
        }
        mb->map[i] = (short)k;
        mb->mode[i] = want;
    }
    *taken = true;
    return PL_STATUS_OK;
}
