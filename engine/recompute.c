/* Activation recomputation: Megatron-LM's full and selective recompute
 * and Colossal-AI's gradient checkpointing, as tasks.
 *
 * A unit is a range of consecutive blocks inside one stage part. Its
 * forward pass runs as usual; once its last op's forward tasks are
 * submitted, the activations made and used only inside the unit (its
 * "inner" tensors: never its input, its output or anything another unit,
 * the loss or the caller reads) are dropped (pl_act_mem_drop: StarPU
 * frees their buffers after the tasks that read them). Before the unit's
 * backward pass, in the same schedule item, its forward tasks run again
 * (phase R) — only those that make what the backward tasks read, and what
 * those need — and after its first op's backward tasks the re-made
 * tensors are dropped again. StarPU's sequential consistency orders every
 * drop after the tasks submitted before it that use the tensor and every
 * re-run after the drop, so no schedule (1F1B, interleaved, ZB-H1 whose W
 * runs late, users') can read a dropped tile; a re-run draws the seed of
 * the first run, so its bits, dropout masks included, are the first
 * run's, and losses and gradients equal those of a run that keeps all.
 *
 * Granularity: full drops every inner tensor; selective only those of ops
 * whose definition says recomputing them is cheap for their memory
 * (PL_OP_RECOMPUTE_SELECTIVE: attention's core, whose softmax
 * probabilities are B·H·T² per layer). An op marked
 * PL_OP_RECOMPUTE_NEVER, a scalar op (loss, metric), an op counting
 * invalid inputs (read after the step) and the graph's output are always
 * kept. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/activation_memory.h"
#include "engine/engine_internal.h"
#include "engine/hooks.h"
#include "engine/recompute.h"
#include "graph/error.h"
#include "memory/activation_plan.h"

struct pl_recompute {
    size_t task_base;     /* R task of (op, tile): task_base + op·tiles + tile */
    int n_units, layers;
    int *unit_of_op;      /* [n_ops]: its unit, or -1 */
    int *first_op, *last_op; /* [n_units] */
    bool *rerun;          /* [n_ops]: re-run before its unit's backward */
    int *drop_start;      /* [n_units + 1]: the unit's dropped tensors are */
    int *drop_ids;        /* drop_ids[drop_start[u] .. drop_start[u+1]) */
    /* [n_units][PL_RECOMPUTE_MAX_GATES]: tensors made in the unit and read
     * after it, -1 past the last: the R tasks wait for their gradients. */
    int *gate_ids;
    /* PL_RECOMPUTE_AUTO: per block, whether its layer is recomputed (the
     * planner's choice once made), and the timing of the block forwards
     * it plans from: training steps before the timed one (-1: none to
     * time), whether the step in flight is timed, and its per-block
     * forward kernel time (µs, summed under lock). */
    bool *layer_on;
    int countdown;
    bool timing;
    double *fwd_us;
    /* The plan against every layer recomputed and none, measured: one
     * training step each of the distinct candidates (TRIAL_*), the
     * fastest kept. trial: 1 + the candidate being timed, 0 when none;
     * plan_on the planner's choice; trial_t0 the timed step's start; an
     * evaluation pass in between (trial_polluted) times it again. */
    int trial, total_layers;
    bool *plan_on;
    double trial_t0, trial_ms[3];
    bool trial_polluted, trial_skip[3];
    char plan_report[1024];
    pthread_mutex_t lock;
    char report[1024];    /* pl_engine_recompute_plan's text */
};

pl_status pl_recompute_check_options(const pl_graph_t *g, const pl_engine_options *o) {
    const pl_recompute_options *r = &o->recompute;
    (void)g;
    if ((int)r->granularity < PL_RECOMPUTE_NONE || r->granularity > PL_RECOMPUTE_AUTO)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "recompute.granularity %d is not none, selective, full or auto",
                       (int)r->granularity);
    if ((int)r->method < PL_RECOMPUTE_UNIFORM || r->method > PL_RECOMPUTE_BLOCK)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "recompute.method %d is not uniform or block", (int)r->method);
    if (r->num_layers < 0 || r->num_layers > 1000000)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "recompute.num_layers %d out of range [0, 1000000]", r->num_layers);
    if (!(r->ratio >= 0.0 && r->ratio <= 1.0))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "recompute.ratio %g out of range [0, 1] (Colossal-AI's "
                       "gradient_checkpointing_ratio)", r->ratio);
    if (r->ratio > 0.0 && (r->num_layers > 0 || r->method != PL_RECOMPUTE_UNIFORM))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "recompute: give ratio (Colossal-AI's) or method and num_layers "
                       "(Megatron's), not both");
    if (r->granularity == PL_RECOMPUTE_NONE) return PL_STATUS_OK;
    /* check_finite scans every activation after the pass: recomputation
     * has dropped most of them by then. */
    if (o->check_finite)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "check_finite scans every activation after the backward pass, which "
                       "activation recomputation drops: use one or the other");
    return PL_STATUS_OK;
}

/* Blocks of the graph (pipeline.c's count: the last op's block + 1). */
static int n_blocks(const pl_graph_t *g) {
    return g->n_ops ? g->ops[g->n_ops - 1].block + 1 : 1;
}

pl_status pl_recompute_init(pl_engine_t *e) {
    if (e->opt.recompute.granularity == PL_RECOMPUTE_NONE) return PL_STATUS_OK;
    pl_recompute *rc = calloc(1, sizeof *rc);
    if (!rc) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory (recomputation)");
    rc->task_base = pl_engine_reserve_tasks(e, (size_t)e->g->n_ops * e->n_tiles);
    pthread_mutex_init(&rc->lock, NULL);
    rc->countdown = -1;
    e->recompute = rc;
    if (e->opt.recompute.granularity != PL_RECOMPUTE_AUTO) return PL_STATUS_OK;
    int nb = n_blocks(e->g);
    rc->layer_on = malloc((size_t)nb * sizeof *rc->layer_on);
    rc->plan_on = malloc((size_t)nb * sizeof *rc->plan_on);
    rc->fwd_us = calloc((size_t)nb, sizeof *rc->fwd_us);
    if (!rc->layer_on || !rc->plan_on || !rc->fwd_us)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory (recomputation)");
    /* With a budget: everything recomputed (the safe side) until the
     * second step has timed the forwards; without one, nothing. */
    bool budget = e->rt->compute_budget > 0 && e->opt.placement.policy;
    for (int b = 0; b < nb; b++) rc->layer_on[b] = budget;
    rc->countdown = budget ? 1 : -1;
    return PL_STATUS_OK;
}

static void plan_clear(pl_recompute *rc) {
    free(rc->unit_of_op);
    free(rc->first_op);
    free(rc->last_op);
    free(rc->rerun);
    free(rc->drop_start);
    free(rc->drop_ids);
    free(rc->gate_ids);
    rc->unit_of_op = rc->first_op = rc->last_op = rc->drop_start = rc->drop_ids = NULL;
    rc->gate_ids = NULL;
    rc->rerun = NULL;
    rc->n_units = rc->layers = 0;
}

void pl_recompute_free(pl_engine_t *e) {
    if (!e->recompute) return;
    plan_clear(e->recompute);
    free(e->recompute->layer_on);
    free(e->recompute->plan_on);
    free(e->recompute->fwd_us);
    pthread_mutex_destroy(&e->recompute->lock);
    free(e->recompute);
    e->recompute = NULL;
}

/* ------------------------------------------------------------- the plan */

/* What planning needs of the graph: each block's op range and each
 * tensor's first and last consumer. */
typedef struct plan_ctx {
    const pl_graph_t *g;
    pl_recompute_granularity granularity;
    int n_blocks;
    int *block_first, *block_last; /* [n_blocks], -1 / -2 when empty */
    int *cons_min, *cons_max;      /* [n_tensors], n_ops / -1 when none */
} plan_ctx;

/* May op i's activations be dropped at this granularity? */
static bool candidate(const plan_ctx *c, int i) {
    const pl_op *op = &c->g->ops[i];
    if (op->def->recompute == PL_OP_RECOMPUTE_NEVER) return false;
    if (c->granularity == PL_RECOMPUTE_SELECTIVE &&
        op->def->recompute != PL_OP_RECOMPUTE_SELECTIVE)
        return false;
    if (op->def->output != PL_OP_OUTPUT_ACTIVATION || op->invalid >= 0) return false;
    if (op->out == c->g->output || op->out == c->g->loss) return false;
    return c->g->tensors[op->out]->kind == PL_TENSOR_ACTIVATION;
}

/* Is tensor t made and used only by ops o0..o1? */
static bool inner(const plan_ctx *c, int t, int o0, int o1) {
    int p = c->g->tensors[t]->producer;
    if (p < o0 || p > o1 || t == c->g->output || t == c->g->loss) return false;
    return c->cons_max[t] < 0 || (c->cons_min[t] >= o0 && c->cons_max[t] <= o1);
}

/* The tensors a unit over ops o0..o1 drops (ids appended to out, count
 * returned): a candidate's output and saved tensor when its output is
 * inner (an op whose output leaves the unit is kept whole: a re-run would
 * rewrite what others read). */
static int unit_drops(const plan_ctx *c, int o0, int o1, int *out) {
    int n = 0;
    for (int i = o0; i <= o1; i++) {
        const pl_op *op = &c->g->ops[i];
        if (!candidate(c, i) || !inner(c, op->out, o0, o1)) continue;
        /* Selective drops the output too: the re-run makes it anyway. */
        out[n++] = op->out;
        if (op->saved >= 0) out[n++] = op->saved;
    }
    return n;
}

/* A layer: a block with inner activations to drop under full
 * recomputation (the GPT's embedding block has none). */
static bool is_layer(const plan_ctx *c, int b, int *scratch) {
    if (c->block_first[b] < 0) return false;
    plan_ctx full = *c;
    full.granularity = PL_RECOMPUTE_FULL;
    return unit_drops(&full, c->block_first[b], c->block_last[b], scratch) > 0;
}

static void mark_reads(const pl_op *op, unsigned reads, bool *needed) {
    if (reads & PL_OP_READS_INPUTS)
        for (int k = 0; k < op->n_inputs; k++) needed[op->in[k]] = true;
    if ((reads & PL_OP_READS_SAVED) && op->saved >= 0) needed[op->saved] = true;
    if (reads & PL_OP_READS_OUTPUT) needed[op->out] = true;
}

/* Which of the unit's ops re-run: those making a dropped tensor that the
 * unit's backward tasks read, then, walking back, those making a dropped
 * tensor a re-run op reads. */
static void unit_reruns(const plan_ctx *c, int o0, int o1, const bool *dropped, bool *needed,
                        bool *rerun) {
    const pl_graph_t *g = c->g;
    for (int i = o0; i <= o1; i++) {
        const pl_op_def *d = g->ops[i].def;
        unsigned reads = d->backward_weight_reads;
        for (int k = 0; k < g->ops[i].n_inputs; k++)
            if (d->backward_input[k].cpu) reads |= d->backward_input_reads;
        mark_reads(&g->ops[i], reads, needed);
    }
    for (int i = o1; i >= o0; i--) {
        const pl_op *op = &g->ops[i];
        bool makes = (dropped[op->out] && needed[op->out]) ||
                     (op->saved >= 0 && dropped[op->saved] && needed[op->saved]);
        if (!makes) continue;
        rerun[i] = true;
        for (int k = 0; k < op->n_inputs; k++) needed[op->in[k]] = true;
    }
}

/* The unit's outputs that take a gradient (what later ops read of it):
 * the R tasks read their gradients' handles, which no kernel uses, so
 * that StarPU starts the re-run only once the backward pass has reached
 * the unit. Without it nothing orders a re-run after the later units'
 * backward tasks (its inputs are ready since the forward pass), and free
 * workers would re-run every unit at once: the activations of all of them
 * live again, the memory the recomputation was to save. */
static void unit_gates(const plan_ctx *c, int o0, int o1, int *gates) {
    int n = 0;
    for (int k = 0; k < PL_RECOMPUTE_MAX_GATES; k++) gates[k] = -1;
    for (int i = o0; i <= o1 && n < PL_RECOMPUTE_MAX_GATES; i++) {
        int t = c->g->ops[i].out;
        if (c->g->tensors[t]->requires_grad && c->cons_max[t] > o1) gates[n++] = t;
    }
}

/* Names and tags the R tasks of the re-run ops: each runs in its op's
 * backward item, tagged as the op's input-gradient tasks are. */
static void tag_tasks(pl_engine_t *e, const pl_recompute *rc) {
    for (int op = 0; op < e->g->n_ops; op++) {
        /* A weight gradient left to fill idle time keeps the inputs it
         * reads alive until it runs: in a recomputed unit they are what
         * the drop after the unit's backward frees, so its weight
         * gradients run in order (as under a memory budget). */
        for (int t = 0; rc->unit_of_op[op] >= 0 && t < e->n_tiles; t++)
            e->tasks[pl_task_index(e, op, PL_SLOT_W, t)].tag.background = false;
        if (!rc->rerun[op]) continue;
        for (int t = 0; t < e->n_tiles; t++) {
            pl_task_info *ti = &e->tasks[rc->task_base + (size_t)op * e->n_tiles + t];
            *ti = e->tasks[pl_task_index(e, op, PL_SLOT_B0, t)];
            snprintf(ti->name, sizeof ti->name, "%.30s.R.t%d", e->g->ops[op].name, t);
            ti->slot = PL_SLOT_R;
            ti->step = -1;
        }
    }
}

/* pl_engine_recompute_plan's text: per stage, its layers and how many
 * are recomputed (an auto plan adds its prediction after it). */
static void report(const pl_engine_t *e, const plan_ctx *c, pl_recompute *rc, int *scratch) {
    int p = e->opt.schedule_def ? e->opt.stages : 1;
    size_t at = 0;
    rc->report[0] = '\0';
    for (int stage = 0; stage < p; stage++) {
        int layers = 0, on = 0;
        for (int b = 0; b < c->n_blocks; b++) {
            if ((p > 1 ? e->part_stage[e->block_part[b]] : 0) != stage ||
                !is_layer(c, b, scratch))
                continue;
            layers++;
            int op = c->block_first[b];
            on += rc->unit_of_op && rc->unit_of_op[op] >= 0;
        }
        int n = snprintf(rc->report + at, sizeof rc->report - at,
                         "%sstage %d: %d layer%s: kept %d, recomputed %d", at ? "\n" : "",
                         stage, layers, layers == 1 ? "" : "s", layers - on, on);
        if (n < 0 || (size_t)n >= sizeof rc->report - at) break;
        at += (size_t)n;
    }
}

static pl_status plan_build(pl_engine_t *e, plan_ctx *c, pl_recompute *rc) {
    const pl_graph_t *g = e->g;
    const pl_recompute_options *o = &e->opt.recompute;
    int n_ops = g->n_ops, nt = g->n_tensors;
    int *scratch = malloc((size_t)(2 * nt + 1) * sizeof *scratch);
    int *layers = malloc((size_t)(c->n_blocks + 1) * sizeof *layers);
    bool *dropped = calloc((size_t)nt + 1, sizeof *dropped);
    bool *needed = calloc((size_t)nt + 1, sizeof *needed);
    rc->unit_of_op = malloc((size_t)(n_ops + 1) * sizeof *rc->unit_of_op);
    rc->first_op = malloc((size_t)(c->n_blocks + 1) * sizeof *rc->first_op);
    rc->last_op = malloc((size_t)(c->n_blocks + 1) * sizeof *rc->last_op);
    rc->rerun = calloc((size_t)n_ops + 1, sizeof *rc->rerun);
    rc->drop_start = malloc((size_t)(c->n_blocks + 2) * sizeof *rc->drop_start);
    rc->drop_ids = malloc((size_t)(2 * n_ops + 1) * sizeof *rc->drop_ids);
    rc->gate_ids = malloc((size_t)(c->n_blocks + 1) * PL_RECOMPUTE_MAX_GATES *
                          sizeof *rc->gate_ids);
    pl_status st = PL_STATUS_OK;
    if (!scratch || !layers || !dropped || !needed || !rc->unit_of_op || !rc->first_op ||
        !rc->last_op || !rc->rerun || !rc->drop_start || !rc->drop_ids || !rc->gate_ids) {
        st = pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory planning recomputation");
        goto done;
    }
    for (int i = 0; i < n_ops; i++) rc->unit_of_op[i] = -1;
    rc->drop_start[0] = 0;
    /* Parts are contiguous ranges of blocks (engine/pipeline.c). */
    for (int b0 = 0; b0 < c->n_blocks;) {
        int part = e->block_part[b0], b1 = b0;
        while (b1 + 1 < c->n_blocks && e->block_part[b1 + 1] == part) b1++;
        int nl = 0;
        for (int b = b0; b <= b1; b++)
            if (is_layer(c, b, scratch) && (!rc->layer_on || rc->layer_on[b])) layers[nl++] = b;
        /* Units as layer indices [i, j) into layers[]. */
        int group = 1, count = nl;
        if (rc->layer_on) {
            /* auto: the planner's layers, each its own unit */
        } else if (o->ratio > 0.0) {
            count = (int)ceil(o->ratio * nl - 1e-9);
        } else if (o->method == PL_RECOMPUTE_BLOCK) {
            if (o->num_layers > 0 && o->num_layers < nl) count = o->num_layers;
        } else if (o->num_layers > 0) {
            group = o->num_layers;
        }
        for (int i = 0; i < count; i += group) {
            int j = i + group < count ? i + group : count;
            int o0 = c->block_first[layers[i]], o1 = c->block_last[layers[j - 1]];
            int n = unit_drops(c, o0, o1, scratch);
            if (n == 0) continue; /* selective: no such op in these layers */
            int u = rc->n_units++;
            rc->first_op[u] = o0;
            rc->last_op[u] = o1;
            memcpy(rc->drop_ids + rc->drop_start[u], scratch, (size_t)n * sizeof *scratch);
            rc->drop_start[u + 1] = rc->drop_start[u] + n;
            for (int k = 0; k < n; k++) dropped[scratch[k]] = true;
            for (int op = o0; op <= o1; op++) rc->unit_of_op[op] = u;
            unit_gates(c, o0, o1, rc->gate_ids + (size_t)u * PL_RECOMPUTE_MAX_GATES);
            memset(needed, 0, (size_t)nt * sizeof *needed);
            unit_reruns(c, o0, o1, dropped, needed, rc->rerun);
            rc->layers += j - i;
        }
        b0 = b1 + 1;
    }
    report(e, c, rc, scratch);
done:
    free(scratch);
    free(layers);
    free(dropped);
    free(needed);
    return st;
}

static void ctx_free(plan_ctx *c) {
    free(c->block_first);
    free(c->block_last);
    free(c->cons_min);
    free(c->cons_max);
}

/* Each block's op range and each tensor's first and last consumer. */
static pl_status ctx_init(const pl_engine_t *e, plan_ctx *c) {
    const pl_graph_t *g = e->g;
    *c = (plan_ctx){.g = g, .granularity = e->opt.recompute.granularity,
                    .n_blocks = n_blocks(g)};
    c->block_first = malloc((size_t)c->n_blocks * sizeof *c->block_first);
    c->block_last = malloc((size_t)c->n_blocks * sizeof *c->block_last);
    c->cons_min = malloc((size_t)(g->n_tensors + 1) * sizeof *c->cons_min);
    c->cons_max = malloc((size_t)(g->n_tensors + 1) * sizeof *c->cons_max);
    if (!c->block_first || !c->block_last || !c->cons_min || !c->cons_max) {
        ctx_free(c);
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory planning recomputation");
    }
    for (int b = 0; b < c->n_blocks; b++) c->block_first[b] = -1, c->block_last[b] = -2;
    for (int t = 0; t < g->n_tensors; t++) c->cons_min[t] = g->n_ops, c->cons_max[t] = -1;
    for (int i = 0; i < g->n_ops; i++) {
        const pl_op *op = &g->ops[i];
        if (c->block_first[op->block] < 0) c->block_first[op->block] = i;
        c->block_last[op->block] = i;
        for (int k = 0; k < op->n_inputs; k++) {
            int t = op->in[k];
            if (i < c->cons_min[t]) c->cons_min[t] = i;
            if (i > c->cons_max[t]) c->cons_max[t] = i;
        }
    }
    return PL_STATUS_OK;
}

pl_status pl_recompute_plan(pl_engine_t *e) {
    pl_recompute *rc = e->recompute;
    if (!rc) return PL_STATUS_OK;
    plan_ctx c;
    pl_status st = ctx_init(e, &c);
    if (st) return st;
    plan_clear(rc);
    st = plan_build(e, &c, rc);
    if (!st) tag_tasks(e, rc);
    else plan_clear(rc); /* no units: nothing dropped, still correct */
    ctx_free(&c);
    return st;
}

/* --------------------------------------------------------- the auto plan */

bool pl_recompute_timing(const pl_engine_t *e) {
    return e->recompute && e->recompute->timing;
}

void pl_recompute_time_forward(pl_engine_t *e, int block, double us) {
    pl_recompute *rc = e->recompute;
    pthread_mutex_lock(&rc->lock);
    rc->fwd_us[block] += us;
    pthread_mutex_unlock(&rc->lock);
}

/* Bytes per µs between the compute tier and the one below it (StarPU's
 * bus or disk calibration, MB/s = bytes/µs), 0 when there is none. */
static double tier_bytes_per_us(const pl_engine_t *e) {
    const pl_runtime_t *rt = e->rt;
    int below = rt->offload_node >= 0 ? rt->offload_node
                : rt->compute_node != STARPU_MAIN_RAM ? (int)STARPU_MAIN_RAM : -1;
    if (below < 0) return 0.0;
    double bw = starpu_transfer_bandwidth(rt->compute_node, (unsigned)below);
    return isfinite(bw) && bw > 0 ? bw : 0.0;
}

/* The planner's table (memory/activation_plan.h) from the timed step:
 * per layer its forward time, its activations' bytes over the batch and
 * those of what leaves it; the budget what the model state leaves of the
 * compute tier's (the placement policy moves chunks within the rest). The
 * chosen layers are recomputed; an offloaded one is kept, for the
 * placement policy to move. */
static pl_status plan_auto(pl_engine_t *e) {
    pl_recompute *rc = e->recompute;
    plan_ctx c;
    pl_status st = ctx_init(e, &c);
    if (st) return st;
    int *scratch = malloc((size_t)(2 * e->g->n_tensors + 1) * sizeof *scratch);
    /* Per layer an entry, then per chunk two of model state. */
    size_t n_entries = (size_t)c.n_blocks + 2 * (size_t)e->chunks.n;
    int *block = malloc((size_t)c.n_blocks * sizeof *block);
    pl_act_block_cost *cost = malloc(n_entries * sizeof *cost);
    pl_act_choice *choice = malloc(n_entries * sizeof *choice);
    if (!scratch || !block || !cost || !choice) {
        st = pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory planning recomputation");
        goto done;
    }
    /* Tiles alive at once: a non-pipelined run that bounds memory takes
     * the lowest tile first (pl_sched_set_central_order), so about as many
     * tiles as workers hold their activations at a time (bench_memory, 2
     * workers, keeping everything: the peak 0.26x the batch's with 8 tiles,
     * 0.5x with 4); a pipeline's schedule bounds its own (not modelled:
     * the whole batch, the safe side). */
    int workers = pl_engine_compute_workers(e);
    double live = 1.0;
    if (!e->opt.schedule_def && workers > 0 && workers < e->n_tiles)
        live = (double)workers / (double)e->n_tiles;
    int n = 0;
    for (int b = 0; b < c.n_blocks; b++) {
        if (!is_layer(&c, b, scratch)) continue;
        int o0 = c.block_first[b], o1 = c.block_last[b];
        pl_act_block_cost *k = &cost[n];
        *k = (pl_act_block_cost){.forward_us = rc->fwd_us[b]};
        for (int i = o0; i <= o1; i++) {
            const pl_op *op = &e->g->ops[i];
            int ids[2] = {op->out, op->saved};
            for (int j = 0; j < 2; j++) {
                if (ids[j] < 0 || e->g->tensors[ids[j]]->kind != PL_TENSOR_ACTIVATION) continue;
                const pl_tensor_t *t = e->g->tensors[ids[j]];
                int64_t bytes = (int64_t)(live * (double)(t->numel * e->opt.batch_size *
                                                          (int64_t)pl_engine_tensor_elem(e, t)));
                k->bytes += bytes;
                if (!inner(&c, ids[j], o0, o1)) k->out_bytes += bytes;
                /* Gradients live only while the backward pass crosses the
                 * block, an op's output gradient beside its input's: twice
                 * the largest, whatever the choice (counting every one as
                 * kept recomputed layers that fitted: bench_memory, 8
                 * tiles, 1/4: keeping 76 % of unlimited, the plan 65 %). */
                if (t->requires_grad && 2 * bytes > k->work_bytes) k->work_bytes = 2 * bytes;
            }
        }
        block[n++] = b;
    }
    pl_model_state_bytes m;
    pl_engine_model_state_bytes(e, &m);
    /* Separate reduced gradients exist under ZeRO-2/3 only (bench_dp's
     * count): elsewhere the update reads the gradients themselves. */
    int64_t reduced = e->opt.zero_stage >= 2 ? m.reduced_grads : 0;
    int64_t values = m.params + m.grads + reduced, states = m.optimizer_states + m.master_weights;
    int64_t model = values + states;
    int64_t budget = e->rt->compute_budget - model;
    pl_act_plan_input in = {.n_blocks = n, .blocks = cost, .budget_bytes = budget > 0 ? budget : 0,
                            .bytes_per_us = tier_bytes_per_us(e)};
    int n_layers = n;
    rc->total_layers = n_layers;
    bool fits;
    const pl_recompute_options *o = &e->opt.recompute;
    if (o->plan) { /* the user's plan, through the same table */
        pl_recompute_layer *layers = calloc((size_t)n + 1, sizeof *layers);
        bool *on = calloc((size_t)n + 1, sizeof *on);
        if (!layers || !on) {
            free(layers);
            free(on);
            st = pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory planning recomputation");
            goto done;
        }
        for (int i = 0; i < n; i++)
            layers[i] = (pl_recompute_layer){block[i], cost[i].forward_us, cost[i].bytes,
                                             cost[i].out_bytes};
        o->plan(o->plan_user, n, layers, in.budget_bytes, in.bytes_per_us, on);
        for (int i = 0; i < n; i++) choice[i] = on[i] ? PL_ACT_RECOMPUTE : PL_ACT_KEEP;
        double t0;
        int64_t p0;
        pl_act_plan_cost(&in, choice, &t0, &p0);
        fits = p0 <= in.budget_bytes;
        free(layers);
        free(on);
    } else {
        /* Built-in: the model state joins the table, as the placement
         * policy's units (a chunk's values and gradients, its optimizer
         * states), each kept or offloaded against the whole budget: a
         * chunk sent below between its uses may leave room to keep a
         * layer. Offloaded, values and gradients travel about 4 times a
         * step (in for the forward, the backward and the update, the
         * updated values out), optimizer states twice (in, out). */
        int64_t numel = 0;
        for (int k = 0; k < e->chunks.n; k++) numel += (int64_t)e->chunks.chunks[k].numel;
        for (int k = 0; k < e->chunks.n && numel > 0; k++) {
            double share = (double)e->chunks.chunks[k].numel / (double)numel;
            cost[n++] = (pl_act_block_cost){.bytes = (int64_t)(share * (double)values),
                                            .transfers = 4};
            cost[n++] = (pl_act_block_cost){.bytes = (int64_t)(share * (double)states),
                                            .transfers = 2};
        }
        in.n_blocks = n;
        in.budget_bytes = e->rt->compute_budget;
        fits = pl_act_plan(&in, choice);
    }
    for (int b = 0; b < c.n_blocks; b++) rc->layer_on[b] = false;
    int off = 0, units_off = 0;
    int64_t state_off = 0;
    for (int i = 0; i < n_layers; i++) {
        rc->layer_on[block[i]] = choice[i] == PL_ACT_RECOMPUTE;
        off += choice[i] == PL_ACT_OFFLOAD;
    }
    for (int i = n_layers; i < n; i++)
        if (choice[i] == PL_ACT_OFFLOAD) units_off++, state_off += cost[i].bytes;
    double us;
    int64_t peak;
    pl_act_plan_cost(&in, choice, &us, &peak);
    plan_clear(rc);
    st = plan_build(e, &c, rc);
    if (!st) tag_tasks(e, rc);
    else plan_clear(rc);
    size_t at = strlen(rc->report);
    if (o->plan)
        snprintf(rc->report + at, sizeof rc->report - at,
                 "\nthe plan (the user's plan): predicted +%.1f ms a step, activations peak %.1f "
                 "of %.1f MiB%s; offloaded %d (kept, for the placement policy to move; the tier "
                 "below at %.0f MB/s)",
                 us / 1e3, (double)peak / 1048576.0, (double)in.budget_bytes / 1048576.0,
                 fits ? "" : " (no plan fits: the least peak)", off, in.bytes_per_us);
    else
        snprintf(rc->report + at, sizeof rc->report - at,
                 "\nthe plan: predicted +%.1f ms a step, peak %.1f of %.1f MiB%s; layers "
                 "offloaded %d (kept, for the placement policy to move); model state: %d of %d "
                 "units (%.1f MiB) below between uses; the tier below at %.0f MB/s",
                 us / 1e3, (double)peak / 1048576.0, (double)in.budget_bytes / 1048576.0,
                 fits ? "" : " (no plan fits: the least peak)", off, units_off, n - n_layers,
                 (double)state_off / 1048576.0, in.bytes_per_us);
done:
    free(scratch);
    free(block);
    free(cost);
    free(choice);
    ctx_free(&c);
    return st;
}

/* Puts layers `on` in force (no task in flight: the R tasks' tags
 * change). */
static pl_status apply_layers(pl_engine_t *e, const bool *on) {
    pl_recompute *rc = e->recompute;
    int nb = n_blocks(e->g);
    memcpy(rc->layer_on, on, (size_t)nb * sizeof *on);
    return pl_recompute_plan(e);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* The planner predicts from a cost model (StarPU's calibrated bandwidth,
 * a byte count per layer); what the placement policy and StarPU then
 * move is not in it, and it was wrong both ways (bench_memory: with 8
 * tiles it kept every layer at 1/8 for 47 % of unlimited where
 * recomputing all gave 54 %; with 2 tiles it recomputed all at 1/16 for
 * 41 % where keeping all gave 49 %). So each distinct candidate — the
 * plan, every layer recomputed, none — runs one training step, timed from
 * an idle start to its tasks' end, and the fastest stays. Called at a
 * training step's start. */
enum { TRIAL_PLAN, TRIAL_ALL, TRIAL_NONE, TRIALS };
static const char *const trial_names[TRIALS] = {"the plan", "every layer recomputed",
                                                "none recomputed"};

static pl_status apply_candidate(pl_engine_t *e, int k) {
    pl_recompute *rc = e->recompute;
    int nb = n_blocks(e->g);
    if (k == TRIAL_PLAN) return apply_layers(e, rc->plan_on);
    bool *on = malloc((size_t)nb * sizeof *on);
    if (!on) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory (recomputation)");
    for (int b = 0; b < nb; b++) on[b] = k == TRIAL_ALL;
    pl_status st = apply_layers(e, on);
    free(on);
    return st;
}

static void trial_step(pl_engine_t *e) {
    pl_recompute *rc = e->recompute;
    starpu_task_wait_for_all();
    double t = now_ms();
    if (rc->trial_polluted) { /* an evaluation ran in between: again */
        rc->trial_polluted = false;
        rc->trial_t0 = t;
        return;
    }
    int k = rc->trial - 1;
    rc->trial_ms[k] = t - rc->trial_t0;
    int next = k + 1;
    while (next < TRIALS && rc->trial_skip[next]) next++;
    if (next < TRIALS && apply_candidate(e, next) == PL_STATUS_OK) {
        rc->trial = next + 1;
        rc->trial_t0 = now_ms();
        return;
    }
    pl_clear_error();
    int best = TRIAL_PLAN;
    for (int c = 0; c < next && c < TRIALS; c++)
        if (!rc->trial_skip[c] && rc->trial_ms[c] < rc->trial_ms[best]) best = c;
    rc->trial = 0;
    if (apply_candidate(e, best) != PL_STATUS_OK) pl_clear_error();
    /* apply_layers rewrote the per-stage lines; the plan's own text was
     * kept apart. */
    if (best == TRIAL_PLAN) snprintf(rc->report, sizeof rc->report, "%s", rc->plan_report);
    size_t at = strlen(rc->report);
    int n = snprintf(rc->report + at, sizeof rc->report - at, "\nmeasured, one step each:");
    for (int c = 0; c < TRIALS && n >= 0 && (size_t)n < sizeof rc->report - at; c++) {
        if (rc->trial_skip[c] || c >= next) continue;
        at += (size_t)n;
        n = snprintf(rc->report + at, sizeof rc->report - at, " %s %.1f ms,", trial_names[c],
                     rc->trial_ms[c]);
    }
    at = strlen(rc->report);
    snprintf(rc->report + at, sizeof rc->report - at, " kept: %s", trial_names[best]);
}

void pl_recompute_iteration_begin(pl_engine_t *e, bool forward_only) {
    pl_recompute *rc = e->recompute;
    if (!rc || !rc->layer_on) return;
    if (rc->trial && forward_only) rc->trial_polluted = true;
    if (rc->trial && !forward_only) trial_step(e);
    if (rc->timing) {
        /* Its times are all summed once its tasks are done; the R tasks'
         * tags change with the plan, so none may be in flight. */
        starpu_task_wait_for_all();
        rc->timing = false;
        if (plan_auto(e) != PL_STATUS_OK) {
            pl_clear_error(); /* the old plan stays valid */
        } else if (!forward_only) {
            /* The planner's choice against every layer recomputed, unless
             * it is that already. */
            int nb = n_blocks(e->g);
            memcpy(rc->plan_on, rc->layer_on, (size_t)nb * sizeof *rc->plan_on);
            snprintf(rc->plan_report, sizeof rc->plan_report, "%s", rc->report);
            /* A user's plan is final; a candidate the plan already is
             * is not timed twice. One process only: ranks timing their
             * own steps could keep different plans, and under ZeRO-3 a
             * re-run unit moves its chunks' gathers. */
            rc->trial_skip[TRIAL_PLAN] = false;
            rc->trial_skip[TRIAL_ALL] = rc->layers == rc->total_layers;
            rc->trial_skip[TRIAL_NONE] = rc->layers == 0;
            rc->trial = !e->opt.recompute.plan && e->rt->world_size <= 1 ? 1 : 0;
            rc->trial_polluted = false;
            rc->trial_t0 = now_ms();
        }
    }
    if (forward_only || rc->countdown < 0) return;
    if (rc->countdown > 0) {
        rc->countdown--;
        return;
    }
    rc->countdown = -1;
    for (int b = 0; b < n_blocks(e->g); b++)
        rc->fwd_us[b] = 0;
    rc->timing = true;
}

bool pl_engine_recompute_plan(const pl_engine_t *e, char *buf, size_t size) {
    const pl_recompute *rc = e ? e->recompute : NULL;
    if (!rc || !buf || size == 0) return false;
    if (rc->layer_on && (rc->countdown >= 0 || rc->timing))
        snprintf(buf, size, "auto: every layer recomputed until the second step has been "
                            "timed\n%s", rc->report);
    else
        snprintf(buf, size, "%s", rc->report);
    return true;
}

bool pl_recompute_unit_at(const pl_engine_t *e, int op, int *first, int *last) {
    const pl_recompute *rc = e->recompute;
    int u = rc && rc->unit_of_op ? rc->unit_of_op[op] : -1;
    if (u < 0 || op != rc->last_op[u]) return false;
    *first = rc->first_op[u];
    *last = rc->last_op[u];
    return true;
}

int pl_recompute_units(const pl_engine_t *e, int *layers) {
    const pl_recompute *rc = e ? e->recompute : NULL;
    if (layers) *layers = rc ? rc->layers : 0;
    return rc ? rc->n_units : 0;
}

/* ------------------------------------------------------------ submission */

static pl_status drop_unit(pl_engine_t *e, int u, int tile) {
    const pl_recompute *rc = e->recompute;
    /* Collected op tasks are not submitted yet: the drop must come after
     * them in submission order (engine/task_fusion.c). */
    pl_status st = e->hooks->fusion_flush(e);
    for (int k = rc->drop_start[u]; k < rc->drop_start[u + 1]; k++)
        pl_act_mem_drop(e, rc->drop_ids[k], tile, false);
    return st;
}

pl_status pl_recompute_forward_done(pl_engine_t *e, int op, int tile) {
    const pl_recompute *rc = e->recompute;
    if (!rc || !rc->unit_of_op) return PL_STATUS_OK;
    int u = rc->unit_of_op[op];
    return u >= 0 && op == rc->last_op[u] ? drop_unit(e, u, tile) : PL_STATUS_OK;
}

pl_status pl_recompute_backward_begin(pl_engine_t *e, int op, int tile) {
    const pl_recompute *rc = e->recompute;
    if (!rc || !rc->unit_of_op) return PL_STATUS_OK;
    int u = rc->unit_of_op[op];
    if (u < 0 || op != rc->last_op[u]) return PL_STATUS_OK;
    /* R tasks open no placement step of their own. */
    int pending = e->pending_step;
    e->pending_step = -1;
    /* Gradients this step's backward wrote (a handle never written has
     * no valid copy to read). */
    starpu_data_handle_t gates[PL_RECOMPUTE_MAX_GATES];
    int n_gates = 0;
    for (int k = 0; k < PL_RECOMPUTE_MAX_GATES; k++) {
        int t = rc->gate_ids[(size_t)u * PL_RECOMPUTE_MAX_GATES + k];
        if (t >= 0 && e->trt[t].grad && e->trt[t].grad_written[tile])
            gates[n_gates++] = e->trt[t].grad[tile];
    }
    pl_status st = PL_STATUS_OK;
    for (int i = rc->first_op[u]; i <= rc->last_op[u] && !st; i++)
        if (rc->rerun[i])
            st = pl_op_submit_recompute(e, i, tile,
                                        rc->task_base + (size_t)i * e->n_tiles + tile, gates,
                                        n_gates);
    e->pending_step = pending;
    return st;
}

pl_status pl_recompute_backward_done(pl_engine_t *e, int op, int tile) {
    const pl_recompute *rc = e->recompute;
    if (!rc || !rc->unit_of_op) return PL_STATUS_OK;
    int u = rc->unit_of_op[op];
    return u >= 0 && op == rc->first_op[u] ? drop_unit(e, u, tile) : PL_STATUS_OK;
}
