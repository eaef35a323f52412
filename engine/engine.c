/* Engine lifecycle: from a graph to registered StarPU data. Activations get
 * one handle per tile, registered with home node -1 so StarPU allocates
 * (and accounts) them; parameters are packed into chunks. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/activation_memory.h"
#include "engine/clip.h"
#include "engine/data_parallel.h"
#include "engine/engine_internal.h"
#include "engine/engine_state.h"
#include "engine/hooks.h"
#include "engine/loss_scaler.h"
#include "engine/offload.h"
#include "engine/op_tasks.h"
#include "engine/pipeline.h"
#include "engine/pipeline_ranks.h"
#include "engine/placement.h"
#include "engine/recompute.h"
#include "engine/task_fusion.h"
#include "engine/tied_grads.h"
#include "engine/zero3.h"
#include "graph/error.h"
#include "util/checked_size.h"
#include "util/half.h"
#include "util/live_set.h"

#define PL_DEFAULT_CHUNK_ELEMS ((size_t)1 << 20)

pl_engine_options pl_engine_options_default(void) {
    return (pl_engine_options){
        .batch_size = 0,
        .tiles = 0,
        .optimizer = {.kind = PL_OPTIMIZER_ADAMW, .lr = 1e-3f, .momentum = 0.0f,
                      .weight_decay = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f,
                      .eps = 1e-8f},
        .lr_scheduler = pl_lr_scheduler_default(PL_LR_CONSTANT),
        .accumulate_size = 1,
        .schedule = PL_SCHEDULE_NONE,
        .chunk_elems = 0,
        .max_norm = 0.0f,
        .norm_type = 2.0f,
        .record_tasks = false,
        .fuse_tasks = true,
        .placement = {.policy = NULL, .shard_param_frac = 1.0f,
                      .offload_optim_frac = 0.0f, .offload_param_frac = 0.0f,
                      .warmup_non_model_data_ratio = 0.8f,
                      .steady_cuda_cap_ratio = 0.9f, .max_prefetch = 0,
                      .gpu_margin_mem_ratio = 0.0f},
        /* Colossal-AI's DynamicGradScaler defaults (GeminiPlugin's). */
        .loss_scaler = {.enabled = false, .initial_scale = 65536.0, .min_scale = 1.0,
                        .max_scale = 4294967296.0, .growth_factor = 2.0,
                        .backoff_factor = 0.5, .growth_interval = 1000, .hysteresis = 2},
        .precision = PL_PRECISION_FP32,
        .master_weights = true,
        .force_outputs_fp32 = false,
        /* LowLevelZeroPlugin's defaults, but stage 0 (plain DDP) unless asked. */
        .dp = 1,
        .zero_stage = 0,
        .reduce_bucket_size_in_m = 12,
        .overlap_communication = true,
        .cpu_offload = false,
        .check_finite = false,
    };
}

static pl_status check_options(const pl_graph_t *g, const pl_engine_options *o) {
    const pl_optimizer_options *op = &o->optimizer;
    if (o->batch_size <= 0)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: batch_size %d must be > 0", o->batch_size);
    if (o->tiles < 0 || o->tiles > 64)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: tiles %d out of range [0, 64]", o->tiles);
    if (o->tiles > o->batch_size)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: tiles %d exceed batch_size %d", o->tiles,
                       o->batch_size);
    /* The chunk search's knobs: sizes up to 2^31 elements (the buffer
     * limit), a step count that keeps the search quick. */
    if (!(o->search_range_m >= 0 && o->search_range_m <= 2048))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: search_range_m %g out of range [0, 2048]",
                       o->search_range_m);
    if (!(o->min_chunk_size_m >= 0 && o->min_chunk_size_m <= 2048))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: min_chunk_size_m %g out of range [0, 2048]",
                       o->min_chunk_size_m);
    if (o->hidden_dim < 0 || o->hidden_dim > PL_MAX_BUFFER_ELEMS)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: hidden_dim %" PRId64 " out of range [0, %" PRId64 "]",
                       o->hidden_dim, (int64_t)PL_MAX_BUFFER_ELEMS);
    if (o->chunk_search_n_grids < 0 || o->chunk_search_n_grids > 1 << 20)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: chunk_search_n_grids %d out of range [0, %d]",
                       o->chunk_search_n_grids, 1 << 20);
    if (o->hidden_dim > 0 && o->search_range_m > 0 &&
        o->search_range_m * (1 << 20) / (double)o->hidden_dim > (double)(1 << 24))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: search_range_m %g in steps of hidden_dim %" PRId64
                       " is more than 2^24 candidate sizes (raise hidden_dim)",
                       o->search_range_m, o->hidden_dim);
    if (op->kind != PL_OPTIMIZER_SGD && op->kind != PL_OPTIMIZER_ADAMW)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: unknown optimizer kind %d", (int)op->kind);
    /* One message per hyper-parameter, naming the one that is wrong (the
     * negated comparisons also reject NaN). */
    const char *bad = NULL, *rule = NULL;
    float value = 0.0f;
    if (!(op->lr > 0.0f)) bad = "lr", value = op->lr, rule = "must be > 0";
    else if (!(op->weight_decay >= 0.0f))
        bad = "weight_decay", value = op->weight_decay, rule = "must be >= 0";
    else if (!(op->momentum >= 0.0f))
        bad = "momentum", value = op->momentum, rule = "must be >= 0";
    else if (!(op->beta1 >= 0.0f && op->beta1 < 1.0f))
        bad = "beta1", value = op->beta1, rule = "must be in [0, 1)";
    else if (!(op->beta2 >= 0.0f && op->beta2 < 1.0f))
        bad = "beta2", value = op->beta2, rule = "must be in [0, 1)";
    else if (!(op->eps > 0.0f)) bad = "eps", value = op->eps, rule = "must be > 0";
    if (bad)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_new: optimizer %s %g %s",
                       bad, value, rule);
    if (o->accumulate_size < 1 || o->accumulate_size > (1 << 20))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: accumulate_size %d out of range [1, %d]",
                       o->accumulate_size, 1 << 20);
    if (o->workers_per_stage < 0 || o->workers_per_stage > STARPU_NMAXWORKERS)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: workers_per_stage %d out of range [0, %d] (0: "
                       "every worker)", o->workers_per_stage, STARPU_NMAXWORKERS);
    if (o->stage_balance != PL_STAGE_BALANCE_MEASURED &&
        o->stage_balance != PL_STAGE_BALANCE_FLOPS)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: stage_balance %d is not a pl_stage_balance",
                       (int)o->stage_balance);
    if (o->precision != PL_PRECISION_FP32 && o->precision != PL_PRECISION_FP16 &&
        o->precision != PL_PRECISION_BF16)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: precision %d is not a pl_precision (fp32, fp16, "
                       "bf16)", (int)o->precision);
    /* The feature modules' options. */
    if (pl_clip_check_options(o) || pl_loss_scaler_check_options(o) ||
        pl_recompute_check_options(g, o))
        return pl_last_status();
    if (pl_lr_scheduler_check(&o->lr_scheduler))
        return pl_fail(pl_last_status(), "pl_engine_new: %s", pl_last_error());
    /* A schedule_def replaces the enum (which then goes unread). */
    if (!o->schedule_def &&
        (o->schedule < PL_SCHEDULE_NONE || o->schedule > PL_SCHEDULE_ZB_H1))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_new: unknown schedule %d",
                       (int)o->schedule);
    if (o->schedule_def && (!o->schedule_def->build || !o->schedule_def->name))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: schedule_def needs a name and a build function");
    const pl_placement_options *pl = &o->placement;
    if (!(pl->shard_param_frac >= 0.0f && pl->shard_param_frac <= 1.0f) ||
        !(pl->offload_optim_frac >= 0.0f && pl->offload_optim_frac <= 1.0f) ||
        !(pl->offload_param_frac >= 0.0f && pl->offload_param_frac <= 1.0f))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: placement fractions must be in [0, 1] "
                       "(shard_param_frac %g, offload_optim_frac %g, "
                       "offload_param_frac %g)",
                       pl->shard_param_frac, pl->offload_optim_frac,
                       pl->offload_param_frac);
    if (g->loss < 0)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: the graph has no loss (pl_graph_set_loss)");
    if (g->n_inputs == 0)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_new: the graph has no inputs");
    return PL_STATUS_OK;
}

bool pl_engine_tensor_half(const pl_engine_t *e, const pl_tensor_t *t) {
    if (!e->half || t->dtype != PL_DTYPE_F32) return false;
    if (t->kind == PL_TENSOR_SCALAR || t->kind == PL_TENSOR_PARAM) return false;
    return !(e->opt.force_outputs_fp32 && t->id == e->g->output);
}

size_t pl_engine_tensor_elem(const pl_engine_t *e, const pl_tensor_t *t) {
    if (t->dtype == PL_DTYPE_I32) return sizeof(int32_t);
    return pl_engine_tensor_half(e, t) ? sizeof(uint16_t) : sizeof(float);
}

pl_chunk_format pl_engine_chunk_format(const pl_engine_t *e) {
    return (pl_chunk_format){.elem = e->half ? sizeof(uint16_t) : sizeof(float),
                             .bf16 = e->bf16,
                             .master = e->half && e->opt.master_weights};
}

/* Bytes an activation (or input) occupies per tile: values, and gradients
 * when one flows into it. Refuses a tile buffer that no layer below can
 * describe (StarPU 1.3's 32-bit vector lengths, 32-bit BLAS and CUDA
 * indices), naming the tensor and the most samples per tile that would fit,
 * before anything is allocated: a wrapped length once made StarPU allocate
 * one byte for attention's B·NH·T² scratch. */
static pl_status tile_bytes(const pl_engine_t *e, const pl_tensor_t *t,
                            int64_t *bytes) {
    if (t->kind == PL_TENSOR_SCALAR) { /* {partial sum, error count} */
        *bytes = 2 * (int64_t)sizeof(double);
        return PL_STATUS_OK;
    }
    char s[96];
    int64_t elems;
    if (!pl_mul_i64(e->max_tile_samples, t->numel, &elems) ||
        elems > PL_MAX_BUFFER_ELEMS) {
        /* One sample always fits: tensor creation bounds numel by the
         * same limit, so fit >= 1. */
        int64_t fit = PL_MAX_BUFFER_ELEMS / t->numel;
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: tensor '%s' %s needs %" PRId64 " x %" PRId64
                       " elements for a tile of %" PRId64 " samples; one buffer "
                       "holds at most %" PRId64 " (StarPU 1.3 vector lengths, "
                       "32-bit BLAS and CUDA indices): use at most %" PRId64
                       " samples per tile (more tiles or a smaller batch)",
                       t->name, pl_shape_str(t, s, sizeof s), e->max_tile_samples,
                       t->numel, e->max_tile_samples, PL_MAX_BUFFER_ELEMS, fit);
    }
    bool needs_grad = t->kind == PL_TENSOR_ACTIVATION && t->requires_grad;
    *bytes = elems * (int64_t)pl_engine_tensor_elem(e, t) * (needs_grad ? 2 : 1);
    return PL_STATUS_OK;
}

static pl_status register_tiles(pl_engine_t *e, pl_tensor_t *t) {
    pl_tensor_rt *r = &e->trt[t->id];
    bool needs_grad = t->kind == PL_TENSOR_ACTIVATION && t->requires_grad;
    r->val = calloc(e->n_tiles, sizeof *r->val);
    r->grad_written = calloc(e->n_tiles, sizeof *r->grad_written);
    if (needs_grad) r->grad = calloc(e->n_tiles, sizeof *r->grad);
    if (!r->val || !r->grad_written || (needs_grad && !r->grad))
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory registering '%s'",
                       t->name);
    for (int i = 0; i < e->n_tiles; i++) {
        if (t->kind == PL_TENSOR_SCALAR) {
            /* {partial sum, error count} as doubles. */
            starpu_vector_data_register(&r->val[i], -1, 0, 2, sizeof(double));
            continue;
        }
        /* <= PL_MAX_BUFFER_ELEMS: checked by tile_bytes in pl_engine_new. */
        uint32_t nx = (uint32_t)(e->max_tile_samples * t->numel);
        size_t elem = pl_engine_tensor_elem(e, t);
        starpu_vector_data_register(&r->val[i], -1, 0, nx, elem);
        if (needs_grad) starpu_vector_data_register(&r->grad[i], -1, 0, nx, elem);
    }
    return PL_STATUS_OK;
}

/* Bytes of host memory this process may still allocate: the kernel's
 * MemAvailable, lowered by a cgroup (v2 or v1) memory limit when the
 * process runs in one (CI containers do). -1 when unknown. */
static int64_t host_memory_available(void) {
    int64_t avail = -1;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[128];
        long long kb;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1 && kb >= 0 &&
                kb < INT64_MAX / 1024) {
                avail = (int64_t)kb * 1024;
                break;
            }
        fclose(f);
    }
    if (avail < 0) {
        long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (pages > 0 && page > 0 && !pl_mul_i64(pages, page, &avail)) avail = -1;
    }
    static const char *const limits[][2] = {
        {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
        {"/sys/fs/cgroup/memory/memory.limit_in_bytes",
         "/sys/fs/cgroup/memory/memory.usage_in_bytes"},
    };
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
        long long max = -1, cur = -1;
        FILE *fm = fopen(limits[i][0], "r"), *fc = fopen(limits[i][1], "r");
        if (fm && fscanf(fm, "%lld", &max) != 1) max = -1; /* "max": none */
        if (fc && fscanf(fc, "%lld", &cur) != 1) cur = -1;
        if (fm) fclose(fm);
        if (fc) fclose(fc);
        if (max > 0 && cur >= 0 && max >= cur && (avail < 0 || max - cur < avail))
            avail = max - cur;
    }
    return avail;
}

static double gib(int64_t bytes) {
    return (double)bytes / (1024.0 * 1024.0 * 1024.0);
}

/* Everything the engine will hold, refused up front when it cannot fit:
 * model state (parameters, gradients, optimizer states, chunk padding
 * included), per-tile activations and their gradients, and the step's
 * output buffers. Without a placement policy all of it lives in host
 * memory; with one, pl_engine_placement_precheck holds the compute tier to
 * its budget and the rest may go to the offload tier, so only sizes that
 * overflow are refused here. */
static pl_status check_memory(const pl_engine_t *e, int64_t model_elems,
                              int n_states) {
    const pl_graph_t *g = e->g;
    int64_t model = 0, acts = 0, bufs = 0, total = 0; /* bufs: the output */
    pl_chunk_format fmt = pl_engine_chunk_format(e);
    if (!pl_mul_i64(model_elems, (int64_t)pl_chunk_format_bytes(&fmt, n_states), &model))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: %" PRId64 " parameters with their "
                       "gradients and optimizer states overflow a 64-bit size",
                       model_elems);
    for (int i = 0; i < g->n_tensors; i++) {
        const pl_tensor_t *t = g->tensors[i];
        int64_t per_tile = 0, all;
        if (t->kind == PL_TENSOR_PARAM) continue;
        pl_status st = tile_bytes(e, t, &per_tile);
        if (st) return st;
        if (!pl_mul_i64(per_tile, e->n_tiles, &all) || !pl_add_i64(acts, all, &acts))
            return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                           "pl_engine_new: activation bytes overflow at '%s'",
                           t->name);
    }
    const pl_tensor_t *out_t = g->output >= 0 ? g->tensors[g->output] : NULL;
    if (out_t && !pl_mul3_i64(e->opt.batch_size, out_t->numel,
                              (int64_t)sizeof(float), &bufs))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: the output '%s' of a batch overflows a "
                       "64-bit size", out_t->name);
    if (!pl_add_i64(model, acts, &total) || !pl_add_i64(total, bufs, &total))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_new: the engine's memory overflows a 64-bit size");
    if (e->opt.placement.policy) return PL_STATUS_OK;
    int64_t avail = host_memory_available();
    if (avail >= 0 && total > avail)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY,
                       "pl_engine_new: the engine needs %" PRId64 " bytes (%.2f GiB: "
                       "model state %.2f GiB, activations and buffers %.2f GiB) but "
                       "only %" PRId64 " bytes (%.2f GiB) of memory are available: "
                       "make the model or the batch smaller, or use a placement "
                       "policy with an offload tier",
                       total, gib(total), gib(model), gib(acts + bufs), avail,
                       gib(avail));
    return PL_STATUS_OK;
}

static void init_param(void *ctx, int id, float *dst) {
    const pl_graph_t *g = ctx;
    pl_param_init(g, g->tensors[id], dst);
}

static pl_status pack_params(pl_engine_t *e) {
    pl_graph_t *g = e->g;
    int n = g->n_params;
    int64_t *sizes = malloc((n ? n : 1) * sizeof *sizes);
    int *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!sizes || !ids) {
        free(sizes);
        free(ids);
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory packing parameters");
    }
    /* Creation order is first-use order: an op's parameters are created
     * with it, and ops are created in forward order. */
    int k = 0;
    int64_t largest = 0;
    for (int i = 0; i < g->n_tensors; i++) {
        pl_tensor_t *t = g->tensors[i];
        if (t->kind != PL_TENSOR_PARAM) continue;
        sizes[k] = t->numel;
        ids[k++] = t->id;
        if (t->numel > largest) largest = t->numel;
    }
    /* An explicit size, or the reference search (pl_engine_options says
     * which knobs mean what). Pleiades' own defaults: from max(1 Mi,
     * largest tensor) in 16 steps, up to the size that still leaves one
     * chunk per worker: chunks of a few MB keep optimizer tasks large
     * enough, and several of them let the workers update in parallel (one
     * big chunk would waste less but serialise the update: ~10 % slower
     * steps). ZeRO-3 gathers and releases whole chunks, so its chunks are
     * searched between 1/32 and 1/16 of the model (or from the largest
     * tensor), which bounds what a rank holds gathered at once (measured,
     * bench_dp's GPT: per-rank state 0.62x one rank's at 1/32, 0.74x at
     * 1/8; throughput still over 0.8x ZeRO-2's). Stages across ranks
     * (pp > 1) take the same range: a chunk that straddles a cut is summed
     * over the ranks at every update, so the whole-model chunk one worker
     * per rank would get made every step sum all of it (bench_pp's GPT:
     * 13 MB per update, 10-17 ms of each step). So do DDP and ZeRO-1/2:
     * a bucket is whole chunks, and one chunk for the model left nothing
     * to reduce before the backward pass's end (bench_dp's GPT: all-reduce
     * hidden behind compute 0 % -> 96 %, for 7 % more parameter bytes of
     * padding). */
    size_t chunk = e->opt.chunk_elems;
    if (chunk == 0) {
        const pl_engine_options *o = &e->opt;
        size_t total = 0;
        for (int i = 0; i < n; i++) total += (size_t)sizes[i];
        bool distributed = o->dp > 1 || o->pp > 1;
        size_t min_chunk = o->min_chunk_size_m > 0 ? (size_t)(o->min_chunk_size_m * (1 << 20))
                           : distributed           ? total / 32
                                                   : PL_DEFAULT_CHUNK_ELEMS;
        if (min_chunk == 0) min_chunk = 1;
        size_t start = (size_t)largest > min_chunk ? (size_t)largest : min_chunk;
        /* Compute workers: a CUDA runtime's CPU workers only take host work. */
        int workers = e->rt->device == PL_DEVICE_CUDA ? e->rt->cuda_workers
                                                      : e->rt->cpu_workers + e->rt->cuda_workers;
        size_t cap = distributed ? start + total / 32
                                 : total / (size_t)(workers > 0 ? workers : 1);
        if (cap > (size_t)PL_MAX_BUFFER_ELEMS) cap = (size_t)PL_MAX_BUFFER_ELEMS;
        pl_chunk_search_options so = {
            .min_chunk = min_chunk,
            .search_range = o->search_range_m > 0 ? (size_t)(o->search_range_m * (1 << 20))
                            : cap > start         ? cap - start
                                                  : 0,
            .n_grids = o->chunk_search_n_grids > 0 ? o->chunk_search_n_grids : 16,
            .hidden_dim = o->hidden_dim};
        /* Distributed runs step through their narrow range by 1024
         * elements (GeminiPlugin's hidden_dim default): there a rank keeps
         * 1/dp of every chunk's padding (ZeRO) or all of it (DDP) next to
         * small chunks, and 16 grids left the GPT of bench_dp 7 % of
         * padding where a step of 1024 finds a size that packs its blocks
         * almost exactly. At most 4096 candidates (Lightning's
         * chunk_search_n_grids default): each costs one packing. */
        if (distributed && o->hidden_dim <= 0 && o->chunk_search_n_grids <= 0 &&
            o->search_range_m <= 0 && so.search_range / 1024 <= 4096)
            so.hidden_dim = 1024;
        chunk = pl_chunk_search(sizes, n, &so, NULL); /* >= the largest tensor */
        if (chunk > (size_t)PL_MAX_BUFFER_ELEMS && (size_t)largest <= (size_t)PL_MAX_BUFFER_ELEMS)
            chunk = (size_t)PL_MAX_BUFFER_ELEMS; /* a search range past StarPU's limit */
    }
    int n_states = e->opt.optimizer.kind == PL_OPTIMIZER_ADAMW ? 2 : 1;
    /* StarPU-allocated whole chunks: what a placement policy moves, what
     * ZeRO-3 gathers and releases, and whose gradients ZeRO-2 releases. */
    bool managed = e->opt.placement.policy != NULL ||
                   (e->opt.dp > 1 && e->opt.zero_stage >= 2);
    /* Parameter sizes were bounded when the graph was built; the chunk
     * size is the caller's or the search's and bounds every chunk buffer. */
    int64_t model_elems = 0;
    for (int i = 0; i < n; i++) model_elems += sizes[i]; /* n·2^31 fits */
    pl_status st = PL_STATUS_OK;
    if (chunk > (size_t)PL_MAX_BUFFER_ELEMS)
        st = pl_fail(PL_STATUS_INVALID_ARGUMENT,
                     "pl_engine_new: chunk_elems %zu exceeds %" PRId64 " (StarPU 1.3 "
                     "vector lengths, 32-bit BLAS and CUDA indices)",
                     chunk, PL_MAX_BUFFER_ELEMS);
    else
        st = check_memory(e, model_elems + (int64_t)pl_chunk_waste(sizes, n, chunk),
                          n_states);
    if (!st) st = pl_engine_placement_precheck(e, sizes, ids, n, chunk, n_states);
    /* A searched size that some step cannot hold under the budget (an
     * optimizer update needs its whole chunk at once) halves until one
     * fits, down to the largest tensor, which a chunk must hold whole:
     * the default then trains where an explicit smaller --chunk-mb would.
     * The refusal, if even that fails, is the smallest size's. */
    for (size_t smaller = chunk / 2; st == PL_STATUS_INVALID_ARGUMENT && managed &&
                                     e->opt.chunk_elems == 0 && chunk > (size_t)largest;
         smaller = chunk / 2) {
        chunk = smaller > (size_t)largest ? smaller : (size_t)largest;
        st = check_memory(e, model_elems + (int64_t)pl_chunk_waste(sizes, n, chunk),
                          n_states);
        if (!st) st = pl_engine_placement_precheck(e, sizes, ids, n, chunk, n_states);
    }
    if (st) {
        free(sizes);
        free(ids);
        return st;
    }
    pl_chunk_format fmt = pl_engine_chunk_format(e);
    st = pl_chunk_set_create(&e->chunks, sizes, ids, n, chunk, n_states, managed, &fmt,
                             init_param, g);
    free(sizes);
    free(ids);
    if (st) return st;
    for (int c = 0; c < e->chunks.n; c++)
        for (int s = 0; s < e->chunks.chunks[c].n_tensors; s++) {
            pl_tensor_rt *r = &e->trt[e->chunks.chunks[c].tensor_ids[s]];
            r->chunk = c;
            r->slot = s;
        }
    return PL_STATUS_OK;
}

/* The modules' answers to each other (engine/hooks.h): a module includes
 * no other module's header, the core wires them here. */
static const struct pl_engine_hooks module_hooks = {
    .dp_shard = pl_engine_dp_shard,
    .dp_grad_shard = pl_engine_dp_grad_shard,
    .dp_releases_grads = pl_engine_dp_releases_grads,
    .dp_grads_released = pl_engine_dp_grads_released,
    .dp_grads_back = pl_engine_dp_grads_back,
    .pp_local_op = pl_engine_pp_local_op,
    .pp_updates_chunk = pl_engine_pp_updates_chunk,
    .pp_counts_chunk = pl_engine_pp_counts_chunk,
    .pp_sums_chunk = pl_engine_pp_sums_chunk,
    .pp_grad_sum = pl_engine_pp_grad_sum,
    .z3_param_shard = pl_z3_param_shard,
    .placement_release_op = pl_engine_placement_release_op,
    .placement_release_tile = pl_engine_placement_release_tile,
    .ties_submit_sums = pl_engine_ties_submit_sums,
    .fusion_flush = pl_fusion_flush,
    .recompute_forward_done = pl_recompute_forward_done,
    .recompute_backward_begin = pl_recompute_backward_begin,
    .recompute_backward_done = pl_recompute_backward_done,
    .recompute_unit_at = pl_recompute_unit_at,
    .offload_dir = pl_offload_dir,
    .offload_bytes = pl_offload_bytes,
};

/* Every engine pl_engine_new made and pl_engine_free has not freed. */
static pl_live_set live_engines = PL_LIVE_SET_INIT;

static void engine_destroy(pl_engine_t *e);

pl_engine_t *pl_engine_new(pl_runtime_t *rt, pl_graph_t *g,
                           const pl_engine_options *options) {
    if (!rt || !g || !options) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_new: %s is NULL",
                !rt ? "runtime" : !g ? "graph" : "options");
        return NULL;
    }
    if (check_options(g, options)) return NULL;
    pl_engine_t *e = calloc(1, sizeof *e);
    if (!e) {
        pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_engine_new: out of memory");
        return NULL;
    }
    static _Atomic int engines_created;
    e->id = ++engines_created;
    e->hooks = &module_hooks;
    e->rt = rt;
    e->g = g;
    e->opt = *options;
    /* CUDA runs without a budget: Gemini's default placement_policy
     * (static) within the device's capacity. */
    if (rt->budget_is_device && !e->opt.placement.policy)
        e->opt.placement.policy = pl_placement_static();
    e->label_input = -1;
    e->half = options->precision != PL_PRECISION_FP32;
    e->bf16 = options->precision == PL_PRECISION_BF16;
    /* fp16 trains under dynamic loss scaling (Colossal-AI's fp16 does). */
    if (options->precision == PL_PRECISION_FP16) e->opt.loss_scaler.enabled = true;
    pthread_mutex_init(&e->records_lock, NULL);
    /* One tile per compute worker: the GPUs on CUDA runtimes (their CPU
     * workers only take host work), else the CPU workers. */
    int tiles = options->tiles ? options->tiles
                : rt->device == PL_DEVICE_CUDA ? rt->cuda_workers : rt->cpu_workers;
    if (tiles < 1) tiles = 1;
    if (tiles > options->batch_size) tiles = options->batch_size;
    e->n_tiles = tiles;
    e->max_tile_samples = (options->batch_size + tiles - 1) / tiles;
    if (options->record_tasks && !rt->profiling)
        starpu_profiling_status_set(STARPU_PROFILING_ENABLE);
    e->trt = calloc(g->n_tensors, sizeof *e->trt);
    if (!e->trt) {
        pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_engine_new: out of memory");
        goto fail;
    }
    for (int i = 0; i < g->n_tensors; i++) e->trt[i].chunk = -1;
    if (pack_params(e)) goto fail;
    for (int i = 0; i < g->n_tensors; i++)
        if (g->tensors[i]->kind != PL_TENSOR_PARAM && register_tiles(e, g->tensors[i]))
            goto fail;
    /* Task slots: the ops' and the optimizer's first (pl_task_index,
     * pl_opt_task_index count from 0), then each module reserves its own
     * range at its init. */
    pl_engine_reserve_tasks(e, (size_t)g->n_ops * PL_NAME_SLOTS * e->n_tiles +
                                   (size_t)e->chunks.n);
    if (pl_engine_ties_init(e)) goto fail;
    if (pl_clip_init(e, &e->clip)) goto fail;
    if (pl_loss_scaler_init(e, &e->ls)) goto fail;
    e->comm_base = pl_engine_reserve_tasks(e, PL_COMM_TASKS(e));
    if (pl_recompute_init(e) || pl_act_mem_init(e)) goto fail;
    if (pl_engine_ops_init(e)) goto fail;
    if (pl_fusion_init(e)) goto fail;
    if (pl_engine_pipeline_init(e)) goto fail; /* allocates e->tasks */
    if (pl_recompute_plan(e)) goto fail;
    pl_engine_ties_name_tasks(e);
    pl_clip_name_tasks(e, e->clip);
    pl_loss_scaler_name_tasks(e, e->ls);
    e->opt.layers_per_stage = NULL; /* read once, not kept (pleiades.h) */
    e->pending_step = -1;
    if (pl_engine_pp_init(e)) goto fail;
    if (pl_engine_dp_init(e)) goto fail;
    if (pl_engine_z3_init(e)) goto fail;
    if (pl_engine_placement_init(e)) goto fail;
    if (g->output >= 0) {
        e->output_buf = malloc((size_t)options->batch_size *
                               g->tensors[g->output]->numel * sizeof(float));
        if (!e->output_buf) {
            pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_engine_new: out of memory");
            goto fail;
        }
    }
    for (int i = 0; i < g->n_tensors; i++) /* the last int32 input: labels */
        if (g->tensors[i]->kind == PL_TENSOR_INPUT &&
            g->tensors[i]->dtype == PL_DTYPE_I32)
            e->label_input = i;
    if (e->label_input >= 0) {
        e->label_buf = malloc((size_t)options->batch_size *
                              g->tensors[e->label_input]->numel * sizeof(int32_t));
        if (!e->label_buf) {
            pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_engine_new: out of memory");
            goto fail;
        }
    }
    if (!pl_live_add(&live_engines, e)) {
        pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_engine_new: out of memory");
        goto fail;
    }
    /* The engine registered data and planned tasks for exactly this graph:
     * builder calls are refused until it is freed, and neither the graph
     * nor the runtime may be freed before it (they count it). */
    if (g->live_engines++ == 0) g->frozen_by = e->id;
    rt->live_engines++;
    e->freezes_graph = true;
    return e;
fail:
    engine_destroy(e);
    return NULL;
}

void pl_engine_free(pl_engine_t *e) {
    if (!e) return;
    if (!pl_live_remove(&live_engines, e)) {
        pl_refuse_free("pl_engine_free: %p is not a live engine (freed already, or not made "
                       "by pl_engine_new): nothing freed", (void *)e);
        return;
    }
    engine_destroy(e);
}

static void engine_destroy(pl_engine_t *e) {
    starpu_task_wait_for_all();
    pl_engine_balance_free(e);
    for (int i = 0; e->trt && i < e->g->n_tensors; i++) {
        pl_tensor_rt *r = &e->trt[i];
        for (int t = 0; t < e->n_tiles; t++) {
            if (r->val && r->val[t]) starpu_data_unregister(r->val[t]);
            if (r->grad && r->grad[t]) starpu_data_unregister(r->grad[t]);
        }
        free(r->val);
        free(r->grad);
        free(r->grad_written);
    }
    pl_engine_placement_free(e);
    pl_engine_ties_free(e);
    pl_clip_free(e->clip);
    pl_loss_scaler_free(e->ls);
    pl_engine_z3_free(e);
    pl_engine_dp_free(e);
    pl_engine_pp_free(e);
    pl_engine_ops_free(e);
    pl_fusion_free(e);
    pl_recompute_free(e);
    pl_act_mem_free(e);
    pl_chunk_set_destroy(&e->chunks);
    if (e->freezes_graph) e->g->live_engines--, e->rt->live_engines--;
    free(e->trt);
    free(e->tasks);
    free(e->block_part);
    free(e->part_stage);
    free(e->part_chunk);
    free(e->item_of);
    free(e->output_buf);
    free(e->label_buf);
    free(e->records);
    pthread_mutex_destroy(&e->records_lock);
    pl_poison(e, sizeof *e);
    free(e);
}

int pl_engine_num_chunks(const pl_engine_t *e) { return e ? e->chunks.n : 0; }

size_t pl_engine_chunk_elems(const pl_engine_t *e, int chunk) {
    if (!e || chunk < 0 || chunk >= e->chunks.n) return 0;
    return e->chunks.chunks[chunk].numel;
}

int64_t pl_engine_steps(const pl_engine_t *e) { return e ? e->steps : 0; }
int pl_engine_accumulate_size(const pl_engine_t *e) { return e ? e->opt.accumulate_size : 1; }

pl_status pl_engine_set_lr(pl_engine_t *e, float lr) {
    if (!e) return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_set_lr: engine is NULL");
    if (!(lr > 0.0f))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_set_lr: lr %g must be > 0", lr);
    e->opt.optimizer.lr = lr;
    return PL_STATUS_OK;
}

double pl_engine_lr(const pl_engine_t *e) {
    if (!e) return 0.0;
    return pl_lr_scheduler_lr(&e->opt.lr_scheduler, e->opt.optimizer.lr, e->steps);
}

void pl_engine_set_batch_process(pl_engine_t *e, pl_batch_process_fn fn,
                                 void *user_data) {
    if (!e) return;
    e->process = fn;
    e->process_user = user_data;
}

/* Gradient access goes through the per-tensor children, so the gradient
 * chunks are (asynchronously) partitioned first; parameter values through
 * their whole chunk. Acquire waits for pending writers (and, to write,
 * for pending readers).
 * `n` is the caller's buffer length in floats: a buffer to fill must hold
 * the whole parameter, values to store must be exactly the parameter.
 * 16-bit parameters and gradients read widened; values stored go to the
 * master weights as given and to the parameter rounded. */
static pl_status param_io(pl_engine_t *e, const pl_tensor_t *p, float *out,
                          const float *in, size_t n, bool grad, const char *fn) {
    if (!e || !p || (!out && !in))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                       !e ? "engine" : !p ? "param" : "buffer");
    if (p->kind != PL_TENSOR_PARAM || p->id >= e->g->n_tensors ||
        e->g->tensors[p->id] != p)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "%s: '%s' is not a parameter of this engine's graph", fn,
                       p->name);
    if (in ? n != (size_t)p->numel : n < (size_t)p->numel)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "%s: '%s' has %lld elements, the buffer %zu (%s)", fn,
                       p->name, (long long)p->numel, n,
                       in ? "values must be exactly the parameter"
                          : "it must hold the whole parameter");
    if (e->z3 && grad)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "%s: '%s': under zero_stage 3 the whole gradients are reduce-scattered "
                       "and released in the backward pass (each rank keeps 1/dp)", fn,
                       p->name);
    if (grad && pl_engine_dp_grads_released(e, e->trt[p->id].chunk))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "%s: '%s': under zero_stage 2 the whole gradients are released once "
                       "the update has reduce-scattered them (each rank keeps 1/dp): read "
                       "them between pl_engine_forward_backward and pl_engine_optimizer_step",
                       fn, p->name);
    pl_status zst = pl_engine_z3_check_gathered(e, p, fn);
    if (!zst) zst = pl_engine_pp_check_param(e, p, grad, fn);
    if (zst) return zst;
    if (grad) pl_chunk_set_partition(&e->chunks);
    starpu_data_handle_t h = grad ? pl_param_grad_handle(e, p) : pl_param_handle(e, p);
    size_t offset = grad ? pl_param_grad_offset(e, p) : pl_param_value_offset(e, p);
    /* A whole chunk holds other tensors too: write it RW. */
    enum starpu_data_access_mode mode = !in                        ? STARPU_R
                                        : grad && !e->chunks.managed ? STARPU_W
                                                                     : STARPU_RW;
    if (starpu_data_acquire(h, mode) != 0)
        return pl_fail(PL_STATUS_RUNTIME_ERROR, "%s: cannot acquire '%s'", fn, p->name);
    void *data = (char *)starpu_vector_get_local_ptr(h) + offset * e->chunks.elem;
    if (e->half && in) pl_half_from_float(e->bf16, in, data, p->numel);
    else if (e->half) pl_half_to_float(e->bf16, data, out, p->numel);
    else memcpy(in ? data : out, in ? (const void *)in : data, (size_t)p->numel * sizeof *in);
    starpu_data_release(h);
    /* A tied parameter's later uses: their gradients, not yet summed. */
    if (grad && out) {
        pl_status st = pl_engine_ties_add_to(e, p, out);
        if (st) return st;
    }
    if (in && !grad && e->chunks.master) {
        pl_status st = pl_engine_master_io(e, p, NULL, in);
        if (st) return st;
    }
    if (in && !grad) return pl_engine_z3_store_shard(e, p);
    return PL_STATUS_OK;
}

pl_status pl_engine_gather_params(pl_engine_t *e) {
    if (!e) return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_gather_params: engine is NULL");
    if (e->pp > 1) return pl_engine_pp_sync(e, false);
    return pl_engine_z3_gather_all(e);
}

/* The fp32 master weights of parameter p (16-bit precisions with
 * master_weights): read into out, or written from in. A whole-chunk
 * handle, never partitioned. */
pl_status pl_engine_master_io(pl_engine_t *e, const pl_tensor_t *p, float *out,
                              const float *in) {
    const pl_tensor_rt *r = &e->trt[p->id];
    const pl_chunk *c = &e->chunks.chunks[r->chunk];
    if (!c->h_master)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "'%s' has no master weights", p->name);
    /* ZeRO: the rank holds its shard [lo, hi) of the chunk's master
     * weights, and for a checkpoint being written the whole (gathered). */
    int64_t lo, hi;
    pl_engine_dp_shard(e, r->chunk, &lo, &hi);
    int64_t first = (int64_t)c->offsets[r->slot], last = first + p->numel;
    const float *whole = pl_engine_dp_ckpt_master(e, r->chunk);
    if (!in && whole) {
        memcpy(out, whole + first, (size_t)p->numel * sizeof *out);
        return PL_STATUS_OK;
    }
    if (!in && (first < lo || last > hi))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "the master weights of '%s' are sharded over the data-parallel ranks "
                       "(ZeRO): this rank holds part of them only", p->name);
    /* Written: the part inside the shard (every rank writes the same
     * whole values, so together they write them all). */
    int64_t from = first > lo ? first : lo, to = last < hi ? last : hi;
    if (from >= to) return PL_STATUS_OK;
    if (starpu_data_acquire(c->h_master, in ? STARPU_RW : STARPU_R) != 0)
        return pl_fail(PL_STATUS_RUNTIME_ERROR, "cannot acquire the master weights of '%s'",
                       p->name);
    float *data = (float *)starpu_vector_get_local_ptr(c->h_master) + (from - lo);
    if (in) memcpy(data, in + (from - first), (size_t)(to - from) * sizeof *data);
    else memcpy(out, data, (size_t)(to - from) * sizeof *data);
    starpu_data_release(c->h_master);
    return PL_STATUS_OK;
}

pl_status pl_engine_get_param(pl_engine_t *e, const pl_tensor_t *p, float *out,
                              size_t capacity) {
    return param_io(e, p, out, NULL, capacity, false, "pl_engine_get_param");
}

pl_status pl_engine_set_param(pl_engine_t *e, const pl_tensor_t *p,
                              const float *values, size_t count) {
    return param_io(e, p, NULL, values, count, false, "pl_engine_set_param");
}

pl_status pl_engine_get_grad(pl_engine_t *e, const pl_tensor_t *p, float *out,
                             size_t capacity) {
    return param_io(e, p, out, NULL, capacity, true, "pl_engine_get_grad");
}

int pl_engine_task_records(const pl_engine_t *e, const pl_task_record **out) {
    if (out) *out = NULL;
    if (!e) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_task_records: engine is NULL");
        return -1;
    }
    if (!e->opt.record_tasks) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT,
                "pl_engine_task_records: the engine does not record tasks (set "
                "pl_engine_options.record_tasks before pl_engine_new)");
        return -1;
    }
    starpu_task_wait_for_all(); /* steps return before their last tasks end */
    if (out) *out = e->records;
    return e->n_records;
}
