/* One training step as a StarPU task graph: feed the batch tiles, submit the
 * schedule's forward and backward items, wait, then read the loss and
 * metric partial sums back (summed in tile order: deterministic). */
#include <stdlib.h>
#include <string.h>

#include "collectives/comm.h"
#include "engine/check_finite.h"
#include "engine/clip.h"
#include "engine/data_parallel.h"
#include "engine/engine_internal.h"
#include "engine/hooks.h"
#include "engine/loss_scaler.h"
#include "engine/op_tasks.h"
#include "engine/pipeline.h"
#include "engine/pipeline_ranks.h"
#include "engine/placement.h"
#include "engine/task_fusion.h"
#include "engine/tied_grads.h"
#include "engine/zero3.h"
#include "graph/error.h"
#include "optim/optimizer.h"
#include "scheduling/schedule.h"
#include "util/half.h"

static double timespec_us(const struct timespec *ts) {
    return (double)ts->tv_sec * 1e6 + (double)ts->tv_nsec / 1e3;
}

/* Keeps one record (record_tasks): a task's, or a fused task's member's. */
static void record_one(pl_engine_t *e, const pl_task_info *info, const char *name,
                       int worker, double ready_us, double start_us, double end_us,
                       int64_t bytes, double wait_us, int64_t fused, int64_t start_order) {
    pl_task_record rec = {.worker = worker, .rank = e->rt->rank, .bytes = bytes,
                          .wait_us = wait_us, .fused = fused, .ready_us = ready_us,
                          .start_us = start_us, .end_us = end_us, .start_order = start_order};
    snprintf(rec.name, sizeof rec.name, "%.47s", name ? name : "?");
    if (info) {
        static const char phases[] = {'F', 'L', 'W', 'B', 'B', 'B', 'B', 'O', 'C', 'M', 'R'};
        rec.phase = phases[info->slot];
        rec.microbatch = info->op >= 0 ? info->tile : -1;
        rec.stage = info->stage;
        rec.chunk = info->chunk;
        snprintf(rec.op, sizeof rec.op, "%.47s",
                 info->op >= 0                 ? e->g->ops[info->op].name
                 : info->slot == PL_SLOT_COMM ? "collective"
                 : info->slot == PL_SLOT_MEM  ? "memory"
                                              : "optimizer");
    }
    starpu_ssize_t total = starpu_memory_get_total(e->rt->compute_node);
    rec.mem_used = total > 0 ? total - starpu_memory_get_available(e->rt->compute_node) : -1;
    rec.mem_offload = -1;
    if (e->rt->offload_node >= 0) {
        unsigned disk = (unsigned)e->rt->offload_node;
        total = starpu_memory_get_total(disk);
        rec.mem_offload = total > 0 ? total - starpu_memory_get_available(disk) : -1;
    }
    pthread_mutex_lock(&e->records_lock);
    if (e->n_records == e->cap_records) {
        int cap = e->cap_records ? 2 * e->cap_records : 256;
        pl_task_record *r = realloc(e->records, cap * sizeof *r);
        if (r) {
            e->records = r;
            e->cap_records = cap;
        }
    }
    if (e->n_records < e->cap_records) e->records[e->n_records++] = rec;
    pthread_mutex_unlock(&e->records_lock);
}

/* Keeps a finished task's record (record_tasks); a fused task's members
 * each get their own, timed inside it (the first ready when the task was,
 * each later one when the member before it ended). */
static void record_task(pl_engine_t *e, struct starpu_task *task) {
    struct starpu_profiling_task_info *prof = task->profiling_info;
    const pl_task_info *info = task->sched_data;
    int worker = prof ? prof->workerid : -1;
    double ready = prof ? timespec_us(&prof->push_start_time) : 0.0;
    if (pl_fusion_is_fused(task)) {
        pl_fusion_member m[PL_FUSION_MAX_MEMBERS];
        int64_t id = -1;
        int n = pl_fusion_members(task, m, PL_FUSION_MAX_MEMBERS, &id);
        for (int i = 0; i < n; i++) {
            const pl_task_info *mi = &e->tasks[m[i].task_index];
            record_one(e, mi, mi->name, worker, i ? m[i - 1].end_us : ready, m[i].start_us,
                       m[i].end_us, 0, 0.0, id, info ? info->tag.start_order : -1);
        }
    } else {
        int64_t bytes = 0;
        double wait = 0.0;
        if (info && info->slot == PL_SLOT_COMM) { /* every buffer but the token */
            for (unsigned i = 0; i + 1 < STARPU_TASK_GET_NBUFFERS(task); i++)
                bytes += (int64_t)starpu_data_get_size(STARPU_TASK_GET_HANDLE(task, i));
            /* This callback runs on the worker that ran the task. */
            if (task->cl == &pl_cl_collective) wait = pl_comm_task_wait_us();
        }
        record_one(e, info, task->name, worker, ready,
                   prof ? timespec_us(&prof->start_time) : 0.0,
                   prof ? timespec_us(&prof->end_time) : 0.0, bytes, wait, -1,
                   info ? info->tag.start_order : -1);
    }
    pl_engine_placement_sample(e);
}

/* Runs on the worker after each task of an engine that records tasks,
 * samples placement memory or times the stage balance's step. */
static void task_done(void *arg) {
    pl_engine_t *e = arg;
    struct starpu_task *task = starpu_task_get_current();
    if (!task) return;
    if (pl_engine_balance_timing(e)) pl_engine_balance_task_done(e, task);
    if (e->z3) pl_engine_z3_task_done(e, task);
    else if (pl_engine_dp_releases_grads(e)) pl_engine_dp_grads_task_done(e, task);
    if (e->opt.record_tasks) record_task(e, task); /* samples placement too */
    else if (e->placement) pl_engine_placement_sample(e);
}

pl_status pl_engine_submit_modes(pl_engine_t *e, struct starpu_codelet *cl,
                                 size_t task_index, const void *args, size_t args_size,
                                 int n_handles, starpu_data_handle_t *handles,
                                 const enum starpu_data_access_mode *modes) {
    pl_task_info *info = &e->tasks[task_index];
    const char *name = info->name;
    struct starpu_task *task = starpu_task_create();
    task->cl = cl;
    task->name = name;
    task->sched_data = &info->tag;
    info->tag.start_order = -1; /* the policy sets it for ordered tasks */
    if (info->host_only) task->where = STARPU_CPU;
    if (cl->nbuffers == STARPU_VARIABLE_NBUFFERS) {
        task->nbuffers = n_handles;
        if (n_handles > STARPU_NMAXBUFS) { /* StarPU frees these with the task */
            task->dyn_handles = malloc(n_handles * sizeof *task->dyn_handles);
            task->dyn_modes = malloc(n_handles * sizeof *task->dyn_modes);
            if (!task->dyn_handles || !task->dyn_modes) {
                starpu_task_destroy(task);
                return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory submitting %s", name);
            }
        }
    }
    for (int i = 0; i < n_handles; i++) {
        STARPU_TASK_SET_HANDLE(task, handles[i], i);
        if (cl->nbuffers == STARPU_VARIABLE_NBUFFERS)
            STARPU_TASK_SET_MODE(task, modes ? modes[i] : cl->modes[i], i);
    }
    if (args_size > 0) { /* a task without arguments (ZeRO-3's release) has none */
        task->cl_arg = malloc(args_size);
        if (!task->cl_arg) {
            starpu_task_destroy(task);
            return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory submitting %s", name);
        }
        memcpy(task->cl_arg, args, args_size);
        task->cl_arg_size = args_size;
        task->cl_arg_free = 1;
    }
    if (e->opt.record_tasks || e->placement || pl_engine_balance_timing(e) || e->whole_lock_init) {
        task->callback_func = task_done;
        task->callback_arg = e;
    }
    pl_engine_placement_tag(e, task, info);
    if (task->where == STARPU_CPU && e->rt->cpu_workers == 0) {
        starpu_task_destroy(task);
        return pl_fail(PL_STATUS_UNSUPPORTED,
                       "%s runs on the host (%s), and this CUDA runtime has no CPU worker: "
                       "set pl_runtime_options.cpu_workers (CLI --workers) to 1 or more",
                       name, info->op < 0 ? "the placement keeps this chunk's optimizer "
                                            "update off the GPU" : "a CPU-only kernel");
    }
    int ret = starpu_task_submit(task);
    if (ret != 0)
        return pl_fail(PL_STATUS_RUNTIME_ERROR, "starpu_task_submit(%s) failed: %d",
                       name, ret);
    if (info->tag.item >= 0) e->ordered_submitted++;
    if (info->tag.item >= 0 && info->slot == PL_SLOT_W) e->ordered_submitted_w++;
    return PL_STATUS_OK;
}

pl_status pl_engine_submit_grad_reduction(pl_engine_t *e, struct starpu_codelet *partial,
                                          size_t first_task, size_t args_size,
                                          void (*fill)(const pl_engine_t *e, int chunk,
                                                       int64_t n, void *args),
                                          starpu_data_handle_t *partials,
                                          struct starpu_codelet *combine,
                                          size_t combine_task, const void *combine_args,
                                          size_t combine_args_size,
                                          starpu_data_handle_t result, bool max_over_ranks,
                                          int dp_partials) {
    int n = e->chunks.n;
    e->pending_step = -1; /* not placement steps of their own */
    unsigned char args[256];
    if (args_size > sizeof args)
        return pl_fail(PL_STATUS_RUNTIME_ERROR, "gradient reduction: arguments too large");
    for (int c = 0; c < n; c++) {
        fill(e, c, pl_engine_dp_reduced_numel(e, c), args);
        starpu_data_handle_t h[2] = {pl_engine_dp_reduced_grad(e, c), partials[c]};
        pl_status st = pl_engine_submit(e, partial, first_task + (size_t)c, args, args_size,
                                        2, h, 0);
        if (st) return st;
    }
    /* ZeRO-2: each rank's partials cover its shards; the combining task
     * needs every rank's. */
    pl_status cst = pl_engine_dp_combine_partials(e, partials, max_over_ranks, dp_partials);
    if (cst) return cst;
    starpu_data_handle_t *h = malloc((size_t)(n + 1) * sizeof *h);
    enum starpu_data_access_mode *modes = malloc((size_t)(n + 1) * sizeof *modes);
    if (!h || !modes) {
        free(h);
        free(modes);
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory submitting %s",
                       combine->name);
    }
    for (int c = 0; c < n; c++) {
        h[c] = partials[c];
        modes[c] = STARPU_R;
    }
    h[n] = result;
    modes[n] = STARPU_W;
    pl_status st = pl_engine_submit_modes(e, combine, combine_task, combine_args,
                                          combine_args_size, n + 1, h, modes);
    free(h);
    free(modes);
    return st;
}

pl_status pl_engine_submit(pl_engine_t *e, struct starpu_codelet *cl,
                           size_t task_index, const void *args, size_t args_size,
                           int n_handles, starpu_data_handle_t *handles,
                           unsigned overwrite) {
    enum starpu_data_access_mode modes[STARPU_NMAXBUFS];
    if (cl->nbuffers == STARPU_VARIABLE_NBUFFERS)
        for (int i = 0; i < n_handles && i < STARPU_NMAXBUFS; i++)
            modes[i] = (overwrite >> i & 1u) && cl->modes[i] == STARPU_RW ? STARPU_W
                                                                         : cl->modes[i];
    return pl_engine_submit_modes(e, cl, task_index, args, args_size, n_handles, handles,
                                  modes);
}

/* Splits the batch into tiles as evenly as possible (the first tiles take
 * the remainder), never more tiles than samples. */
static void split_batch(pl_engine_t *e, int64_t size) {
    e->batch_samples = size;
    e->active_tiles = size < e->n_tiles ? (int)size : e->n_tiles;
    for (int t = 0; t < e->active_tiles; t++)
        e->tile_samples[t] = size / e->active_tiles + (t < size % e->active_tiles);
}

static size_t elem_size(const pl_tensor_t *t) {
    return t->dtype == PL_DTYPE_I32 ? sizeof(int32_t) : sizeof(float);
}

/* Copies the batch into the input tiles (acquire W orders this after the
 * previous step's readers; it moves data, it computes nothing). */
static pl_status feed_inputs(pl_engine_t *e, const pl_batch *b) {
    for (int i = 0; i < e->g->n_tensors; i++) {
        pl_tensor_t *t = e->g->tensors[i];
        if (t->kind != PL_TENSOR_INPUT) continue;
        const char *src = b->data[t->input_index];
        if (!src)
            return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                           "pl_engine_forward_backward: batch data for input "
                           "'%s' is NULL", t->name);
        size_t row = (size_t)t->numel * elem_size(t);
        bool half = pl_engine_tensor_half(e, t); /* fp32 data, rounded as stored */
        for (int tile = 0; tile < e->active_tiles; tile++) {
            starpu_data_handle_t h = e->trt[i].val[tile];
            if (starpu_data_acquire(h, STARPU_W) != 0)
                return pl_fail(PL_STATUS_RUNTIME_ERROR, "cannot acquire input '%s'",
                               t->name);
            void *dst = (void *)starpu_vector_get_local_ptr(h);
            if (half)
                pl_half_from_float(e->bf16, (const float *)src, dst,
                                   e->tile_samples[tile] * t->numel);
            else
                memcpy(dst, src, e->tile_samples[tile] * row);
            starpu_data_release(h);
            src += e->tile_samples[tile] * row;
        }
        if (i == e->label_input)
            memcpy(e->label_buf, b->data[t->input_index], b->size * row);
    }
    return PL_STATUS_OK;
}

/* Sums a scalar tensor's per-tile {value, errors} pairs in tile order. */
static pl_status read_scalar(pl_engine_t *e, const pl_tensor_t *t, double *value,
                             double *errors) {
    *value = *errors = 0.0;
    for (int tile = 0; tile < e->active_tiles; tile++) {
        starpu_data_handle_t h = e->trt[t->id].val[tile];
        if (starpu_data_acquire(h, STARPU_R) != 0)
            return pl_fail(PL_STATUS_RUNTIME_ERROR, "cannot read '%s'", t->name);
        const double *p = (const double *)starpu_vector_get_local_ptr(h);
        *value += p[0];
        *errors += p[1];
        starpu_data_release(h);
    }
    return PL_STATUS_OK;
}

/* A forward kernel met invalid input values (labels, tokens): the op's
 * own explanation, or a generic one. */
static pl_status invalid_inputs(const pl_engine_t *e, const pl_op *op, double count) {
    char what[128], msg[384];
    pl_op_describe(e->g, op, what, sizeof what);
    pl_tensor_t *in[PL_OP_MAX_IN];
    for (int i = 0; i < op->n_in; i++) in[i] = e->g->tensors[op->in[i]];
    if (op->def->explain_invalid)
        op->def->explain_invalid(what, in, op->attrs, count, msg, sizeof msg);
    else
        snprintf(msg, sizeof msg, "%s: %.0f invalid input values", what, count);
    return pl_fail(PL_STATUS_INVALID_ARGUMENT, "%s", msg);
}

static pl_status read_results(pl_engine_t *e, const pl_batch *b,
                              const pl_step_options *o, pl_step_result *r) {
    memset(r, 0, sizeof *r);
    r->size = b->size;
    /* Loss and metrics as sums over this rank's samples, then (dp > 1)
     * over every rank's: sums[0] loss, [1..] metrics, then the samples
     * and the invalid-value count, so that every rank learns that one of
     * them met invalid inputs (and fails with it rather than waiting in
     * the next collective for a rank that stopped). */
    double sums[PL_MAX_METRICS + 3] = {0};
    double counts[PL_MAX_METRICS + 1] = {1}; /* values per sample */
    double invalid_here = 0.0;
    const pl_op *invalid_op = NULL;
    for (int i = 0; i < e->g->n_tensors; i++) {
        pl_tensor_t *t = e->g->tensors[i];
        if (t->kind != PL_TENSOR_SCALAR) continue;
        if (i != e->g->loss && !t->aux && r->n_metrics == PL_MAX_METRICS) continue;
        double sum = 0.0, errors = 0.0;
        /* Stages across ranks: the scalar's own stage reads it, the
         * others add zeros to the sums over ranks below. */
        pl_status st = pl_engine_pp_local_op(e, t->producer)
                           ? read_scalar(e, t, &sum, &errors)
                           : PL_STATUS_OK;
        if (st) return st;
        const pl_op *op = &e->g->ops[t->producer];
        /* An invalid-value counter holds its count first; a scalar output
         * second, after its sum. */
        double invalid = t->aux ? sum : errors;
        if (invalid > 0 && !invalid_op) invalid_here = invalid, invalid_op = op;
        if (t->aux) continue;
        /* The scalar sums scalar_count values per sample. */
        int k = i == e->g->loss ? 0 : 1 + r->n_metrics++;
        sums[k] = sum;
        counts[k] = op->scalar_count;
    }
    int n = 1 + r->n_metrics;
    /* Samples counted once per pipeline (by its first stage's rank). */
    sums[n] = e->pp <= 1 || e->pp_stage == 0 ? (double)e->batch_samples : 0.0;
    sums[n + 1] = invalid_here;
    pl_status st = pl_engine_dp_mean_results(e, sums, n + 2);
    if (st) return st;
    if (invalid_op) return invalid_inputs(e, invalid_op, invalid_here);
    if (sums[n + 1] > 0)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "another rank of this data-parallel job met %.0f invalid input "
                       "values (its own message says which)", sums[n + 1]);
    r->size = (int64_t)sums[n]; /* every rank's samples */
    r->local_size = b->size;
    r->loss = o->return_loss ? sums[0] / (sums[n] * counts[0]) : 0.0;
    for (int m = 0; m < r->n_metrics; m++)
        r->metrics[m] = sums[1 + m] / (sums[n] * counts[1 + m]);
    st = pl_engine_check_kernels(e);
    if (st) return st;
    if (o->return_output_label && e->g->output >= 0) {
        const pl_tensor_t *t = e->g->tensors[e->g->output];
        float *dst = e->output_buf;
        /* Stages across ranks: the output's stage reads it for every rank. */
        bool mine = pl_engine_pp_local_op(e, t->producer);
        for (int tile = 0; mine && tile < e->active_tiles; tile++) {
            starpu_data_handle_t h = e->trt[t->id].val[tile];
            size_t n = (size_t)e->tile_samples[tile] * t->numel;
            if (starpu_data_acquire(h, STARPU_R) != 0)
                return pl_fail(PL_STATUS_RUNTIME_ERROR, "cannot read '%s'", t->name);
            const void *src = (const void *)starpu_vector_get_local_ptr(h);
            if (pl_engine_tensor_half(e, t))
                pl_half_to_float(e->bf16, src, dst, (int64_t)n);
            else
                memcpy(dst, src, n * sizeof *dst);
            starpu_data_release(h);
            dst += n;
        }
        if (e->pp > 1) { /* within this replica: its own samples' outputs */
            st = pl_comm_bcast_floats(e->pp_group, e->output_buf,
                                      (size_t)e->batch_samples * t->numel,
                                      pl_engine_pp_op_stage(e, t->producer));
            if (st) return st;
        }
        r->output = e->output_buf;
        r->labels = e->label_buf;
    }
    return PL_STATUS_OK;
}

static pl_status check_batch(const pl_engine_t *e, const pl_batch *b) {
    if (!b || !b->data)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_forward_backward: %s is NULL",
                       b ? "batch->data" : "batch");
    if (b->size <= 0 || b->size > e->opt.batch_size)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_forward_backward: batch size %lld out of range "
                       "[1, %d] (the engine's batch_size)",
                       (long long)b->size, e->opt.batch_size);
    return PL_STATUS_OK;
}

pl_status pl_engine_forward_backward(pl_engine_t *e, const pl_batch *batch,
                                     const pl_step_options *opts,
                                     pl_step_result *result) {
    if (!e || !opts || !result)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_forward_backward: %s is NULL",
                       !e ? "engine" : !opts ? "opts" : "result");
    pl_batch b = batch ? *batch : (pl_batch){0};
    if (e->process && batch) e->process(&b, e->process_user);
    pl_status st = check_batch(e, batch ? &b : NULL);
    /* A kernel of the previous step's backward pass may have failed. */
    if (!st) st = pl_engine_check_kernels(e);
    if (st) return st;
    split_batch(e, b.size);
    if ((st = feed_inputs(e, &b))) return st;
    for (int i = 0; i < e->g->n_tensors; i++)
        if (e->trt[i].grad_written)
            memset(e->trt[i].grad_written, 0, e->n_tiles * sizeof(bool));
    if (e->placement) {
        /* Placement figures are per iteration, and the steps' residency
         * bookkeeping assumes iterations do not overlap. */
        starpu_task_wait_for_all();
        pl_engine_placement_iteration_end(e);
    }
    if (e->opt.record_tasks) {
        /* Records are per step: let the previous optimizer tasks finish
         * first so this step's list starts clean. */
        starpu_task_wait_for_all();
        pthread_mutex_lock(&e->records_lock);
        e->n_records = 0;
        pthread_mutex_unlock(&e->records_lock);
    }
    pl_chunk_set_partition(&e->chunks);
    if (!opts->forward_only) e->accumulate_step++;
    st = pl_engine_submit_iteration(e, opts->forward_only);
    if (st) {
        starpu_task_wait_for_all();
        return st;
    }
    /* No global wait: reading the loss and metrics acquires only their
     * handles, so the rest of the backward pass keeps running while the
     * caller logs the loss (and, in train_step, the optimizer update,
     * submitted once the backward pass has ended well, while the caller
     * feeds the next batch). */
    return read_results(e, &b, opts, result);
}

/* The verdict on the backward pass(es) an update would apply: waits for
 * every task submitted so far (the backward pass, and the gradient
 * reductions submitted before this call) and fails when one of its
 * kernels failed (or, check_finite, it made an inf or NaN), so that the step that ran the failing kernel reports it
 * and no update runs on gradients it left half written. Over several
 * ranks the verdict is every rank's: a rank that skipped its update while
 * the others ran theirs would leave them waiting in the update's
 * collectives (ZeRO's all-gather). The wait costs the update its overlap
 * with the tail of the backward pass, the price of knowing before the
 * parameters change. */
static pl_status backward_verdict(pl_engine_t *e) {
    starpu_task_wait_for_all();
    pl_status st = pl_engine_check_kernels(e); /* discards the gradients on failure */
    if (!st && e->opt.check_finite && (st = pl_engine_check_finite(e)))
        pl_engine_grads_discard(e);
    if (e->rt->world_size <= 1) return st;
    double failed = st ? 1.0 : 0.0;
    pl_status cst = pl_engine_dp_mean_results(e, &failed, 1);
    if (cst) return cst;
    if (st || failed == 0.0) return st;
    pl_engine_grads_discard(e);
    return pl_fail(PL_STATUS_RUNTIME_ERROR,
                   "a kernel failed on another rank of this job in the same step (that "
                   "rank's message names it): no rank updates");
}

pl_status pl_engine_optimizer_step(pl_engine_t *e) {
    if (!e) return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_optimizer_step: engine is NULL");
    /* GradAccumOptimizer.step: no update before accumulate_size backward
     * passes (gradients keep accumulating across them). The pass's kernels
     * are still checked, so that each train_step reports its own. */
    if (e->opt.accumulate_size > 1 && e->accumulate_step < e->opt.accumulate_size)
        return backward_verdict(e);
    const pl_optimizer_options *o = &e->opt.optimizer;
    /* The schedule's LR (and, for one cycle, momentum) of this step: a
     * function of the step count alone (optim/lr_scheduler.c). */
    float lr = (float)pl_engine_lr(e), beta1 = o->beta1, momentum = o->momentum;
    double cycled;
    if (pl_lr_scheduler_momentum(&e->opt.lr_scheduler, e->steps, &cycled)) {
        if (o->kind == PL_OPTIMIZER_ADAMW) beta1 = (float)cycled;
        else momentum = (float)cycled;
    }
    /* Tied parameters: the later uses' gradients into the parameters'
     * (while the gradient chunks are partitioned: the tasks take the
     * children). */
    pl_status tst = pl_engine_ties_submit_sums(e, -1);
    if (tst) return tst;
    pl_chunk_set_unpartition(&e->chunks);
    /* Data parallel: every later task of the update sees the averaged
     * gradients (identical on every rank: so are the overflow verdict,
     * the clipping norm and the update). */
    pl_status dst = pl_engine_dp_reduce_gradients(e);
    /* Stages across ranks: chunks several stages use, their sums. */
    if (!dst) dst = pl_engine_pp_reduce_shared(e);
    if (dst) return dst;
    /* Nothing has changed the parameters, the optimizer states or the
     * step count yet: from here on the update runs. */
    if ((dst = backward_verdict(e))) return dst;
    e->accumulate_step = 0;
    bool scaled = e->ls != NULL;
    if (scaled) {
        bool overflow = false;
        pl_status st = pl_loss_scaler_check(e, e->ls, &overflow);
        if (st) return st;
        if (overflow) {
            /* Skipped: no parameter, state or step-count change; the next
             * backward overwrites the gradients (zero_grad) as usual. */
            pl_loss_scaler_update(e, e->ls, true);
            pl_engine_grads_restart(e);
            return PL_STATUS_OK;
        }
    }
    e->steps++;
    bool clip = e->clip != NULL;
    if (clip) {
        pl_status st = pl_clip_submit(e, e->clip, 1.0 / pl_loss_scaler_scale(e->ls));
        if (st) return st;
    }
    /* The optimizer multiplies gradients by the clip coefficient (which
     * then holds 1/scale too) or, scaling without clipping, by 1/scale
     * from the overflow verdict: both have the {_, factor} layout. */
    bool factor = clip || scaled;
    starpu_data_handle_t h_factor = clip ? pl_clip_factor(e->clip)
                                         : pl_loss_scaler_factor(e->ls);
    for (int c = 0; c < e->chunks.n; c++) {
        pl_chunk *ch = &e->chunks.chunks[c];
        /* Stages across ranks: other stages' chunks are theirs to update. */
        if (!pl_engine_pp_updates_chunk(e, c)) continue;
        /* ZeRO: this rank's shard of the chunk (its states hold only it). */
        int64_t lo, hi;
        pl_engine_dp_shard(e, c, &lo, &hi);
        pl_optimizer_args a = {.n = hi - lo, .param_offset = lo, .grad_offset = lo,
                               .t = e->steps, .lr = lr,
                               .beta1 = beta1, .beta2 = o->beta2, .eps = o->eps,
                               .weight_decay = o->weight_decay,
                               .momentum = momentum, .clip = factor};
        bool adamw = o->kind == PL_OPTIMIZER_ADAMW;
        /* SGD has one state: the factor comes right after it. */
        /* ZeRO-2 reads the reduced shard, from its start. */
        if (pl_engine_dp_grad_shard(e, c)) a.grad_offset = 0;
        /* ZeRO-3 updates its parameter shard, from its start. */
        if (e->z3) a.param_offset = 0;
        starpu_data_handle_t h[5] = {e->z3 ? pl_z3_param_shard(e, c) : ch->h_param,
                                     pl_engine_dp_reduced_grad(e, c),
                                     ch->h_state[0], adamw ? ch->h_state[1] : h_factor,
                                     h_factor};
        struct starpu_codelet *cl = adamw ? (factor ? &pl_cl_adamw_update_clip
                                                    : &pl_cl_adamw_update)
                                          : (factor ? &pl_cl_sgd_update_clip
                                                    : &pl_cl_sgd_update);
        e->pending_step = pl_step_optimizer(e, c);
        int n_h = (adamw ? 4 : 3) + factor;
        pl_status st;
        if (e->half) {
            /* 16-bit twins: the same buffers, then the master weights. */
            starpu_data_handle_t hh[6];
            enum starpu_data_access_mode m[6];
            memcpy(hh, h, sizeof h);
            for (int k = 0; k < n_h; k++)
                m[k] = k == 1 || (factor && k == n_h - 1) ? STARPU_R : STARPU_RW;
            a.bf16 = e->bf16;
            a.master = ch->h_master != NULL;
            if (a.master) hh[n_h] = ch->h_master, m[n_h++] = STARPU_RW;
            st = pl_engine_submit_modes(e, adamw ? &pl_cl_adamw_update_half
                                                 : &pl_cl_sgd_update_half,
                                        pl_opt_task_index(e, c), &a, sizeof a, n_h, hh, m);
        } else {
            st = pl_engine_submit(e, cl, pl_opt_task_index(e, c), &a, sizeof a, n_h, h, 0);
        }
        if (st) return st;
    }
    /* ZeRO: every rank's updated shard to every rank. */
    pl_status gst = pl_engine_dp_gather_params(e);
    if (gst) return gst;
    pl_engine_pp_mark_updated(e);
    if (scaled) pl_loss_scaler_update(e, e->ls, false);
    pl_engine_grads_restart(e);
    return PL_STATUS_OK;
}

void pl_engine_grads_discard(pl_engine_t *e) {
    e->accumulate_step = 0;
    pl_engine_grads_restart(e);
}

void pl_engine_grads_restart(pl_engine_t *e) {
    for (int i = 0; i < e->g->n_tensors; i++) e->trt[i].param_grad_written = false;
    pl_engine_ties_restart(e);
}

pl_status pl_engine_train_step(pl_engine_t *e, const pl_batch *batch,
                               pl_step_result *result) {
    if (!e) return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_train_step: engine is NULL");
    pl_step_options o = {.forward_only = false, .return_loss = true,
                         .return_output_label = false};
    pl_step_result local;
    pl_status st = pl_engine_forward_backward(e, batch, &o, result ? result : &local);
    if (st) return st;
    return pl_engine_optimizer_step(e);
}
