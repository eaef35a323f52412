/* The engine's side of memory placement: it describes an iteration to the
 * placement policy as a sequence of operator steps over units (chunk
 * halves), and when a step's first task becomes ready (its prologue
 * callback) it asks the policy what to evict and what to prefetch, and
 * turns the answers into StarPU requests: starpu_data_wont_use (write back
 * and evict first) and starpu_data_prefetch_on_node. StarPU's memory
 * accounting (STARPU_LIMIT_*_MEM) enforces the budget itself; the policy
 * decides the order, so a step never fails for memory while a valid
 * placement exists.
 *
 * Steps: op i's forward is step i, its backward step 2·n_ops − 1 − i, and
 * chunk c's optimizer update step 2·n_ops + c. Units: 2c is chunk c's
 * values and gradients, 2c + 1 its optimizer states. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "engine/activation_memory.h"
#include "engine/engine_internal.h"
#include "engine/hooks.h"
#include "engine/placement.h"
#include "graph/error.h"

struct pl_placement_state {
    const pl_placement_policy *policy;
    void *policy_state;
    pl_placement_info info;
    int64_t *unit_bytes;
    bool *unit_is_optim;
    int *step_offset, *step_units;
    bool *resident, *prefetched;
    bool *pinned;              /* optimizer units kept on the compute tier
                                  (gpu_margin_mem_ratio) */
    bool *evictable;           /* resident and not pinned: what the policy
                                  may choose victims from */
    int *scratch;              /* the policy's victims[] / units[]: n_units
                                  entries (its documented capacity), then
                                  as many guard entries (GUARD) that tell a
                                  policy writing past them from one that
                                  does not, before anything reads them */
    bool *listed;              /* [n_units]: already in the policy's answer */
    int64_t *non_model;        /* per step, recorded in the warm-up */
    int iteration;
    unsigned compute_node;
    pthread_mutex_t lock;
    pl_iteration_memory cur, last;
    bool dirty;                /* cur has seen a step */
};

static int64_t unit_resident_bytes(const pl_placement_state *p) {
    int64_t b = 0;
    for (int u = 0; u < p->info.n_units; u++)
        if (p->resident[u]) b += p->unit_bytes[u];
    return b;
}

static int64_t node_used(unsigned node) {
    starpu_ssize_t total = starpu_memory_get_total(node);
    return total > 0 ? (int64_t)(total - starpu_memory_get_available(node)) : -1;
}

/* The op of a forward or backward step (not an optimizer step). */
static const pl_op *step_op(const pl_engine_t *e, int s) {
    int n_ops = e->g->n_ops;
    return &e->g->ops[s < n_ops ? s : 2 * n_ops - 1 - s];
}

/* The units each step needs: the chunks of the op's parameters. Stages
 * across ranks: only this rank's steps need units (its stage's ops and
 * the updates of the chunks it updates); the others never run here, and
 * listed with their units they would make a policy that looks ahead keep
 * chunks this rank never touches. The numbering stays the whole graph's. */
static pl_status build_steps(pl_engine_t *e, pl_placement_state *p) {
    const pl_graph_t *g = e->g;
    int n_ops = g->n_ops, n_chunks = e->chunks.n;
    int n_steps = 2 * n_ops + n_chunks;
    if (!p->step_offset) p->step_offset = calloc(n_steps + 1, sizeof *p->step_offset);
    if (!p->step_units)
        p->step_units = malloc(((size_t)n_steps * PL_OP_MAX_IN + 2 * n_chunks + 1) *
                               sizeof *p->step_units);
    if (!p->step_offset || !p->step_units)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory describing steps");
    int k = 0;
    for (int s = 0; s < n_steps; s++) {
        p->step_offset[s] = k;
        if (s >= 2 * n_ops) { /* optimizer of chunk c */
            int c = s - 2 * n_ops;
            if (!e->hooks->pp_updates_chunk(e, c)) continue;
            p->step_units[k++] = 2 * c;
            p->step_units[k++] = 2 * c + 1;
            continue;
        }
        const pl_op *op = step_op(e, s);
        if (!e->hooks->pp_local_op(e, (int)(op - g->ops))) continue;
        int first = k;
        for (int i = 0; i < op->n_in; i++) {
            const pl_tensor_t *t = g->tensors[op->in[i]];
            if (t->kind != PL_TENSOR_PARAM) continue;
            int u = 2 * e->trt[t->id].chunk;
            bool seen = false;
            for (int j = first; j < k; j++) seen = seen || p->step_units[j] == u;
            if (!seen) p->step_units[k++] = u;
        }
    }
    p->step_offset[n_steps] = k;
    p->info.n_steps = n_steps;
    p->info.step_offset = p->step_offset;
    p->info.step_units = p->step_units;
    return PL_STATUS_OK;
}

static const char *step_name(const pl_engine_t *e, int s, char *buf, size_t n) {
    int n_ops = e->g->n_ops;
    if (s >= 2 * n_ops)
        snprintf(buf, n, "the optimizer update of chunk %d", s - 2 * n_ops);
    else
        snprintf(buf, n, "the %s of op '%s'", s < n_ops ? "forward" : "backward",
                 step_op(e, s)->name);
    return buf;
}

/* Bytes of the activations (and, backward, their gradients) one task of
 * op `op` touches on one tile: its non-parameter inputs, output and aux. */
static int64_t op_tile_bytes(const pl_engine_t *e, const pl_op *op, bool backward) {
    int ids[PL_OP_MAX_IN + 3];
    int n = 0;
    for (int i = 0; i < op->n_in; i++) ids[n++] = op->in[i];
    ids[n++] = op->out;
    if (op->saved >= 0) ids[n++] = op->saved;
    if (op->invalid >= 0) ids[n++] = op->invalid;
    int64_t b = 0;
    for (int i = 0; i < n; i++) {
        const pl_tensor_t *t = e->g->tensors[ids[i]];
        if (t->kind == PL_TENSOR_PARAM) continue;
        int64_t one = t->kind == PL_TENSOR_SCALAR
                          ? 2 * (int64_t)sizeof(double)
                          : (int64_t)e->max_tile_samples * t->numel *
                                (int64_t)pl_engine_tensor_elem(e, t);
        b += one;
        if (backward && t->requires_grad && t->kind == PL_TENSOR_ACTIVATION) b += one;
    }
    return b;
}

/* A unit's handles. Data parallel: ZeRO-2/3's gradient shard goes with
 * the values; under ZeRO-3 a chunk's values are the rank's shards (its
 * whole parameters and gradients live only while gathered, outside the
 * units, as the whole bytes the steps count), and ZeRO-2's whole
 * gradients likewise live only from their return to their reduce-scatter;
 * ZeRO's optimizer states are shards already. */
static void unit_handles(const pl_engine_t *e, int u, starpu_data_handle_t *h, int *n) {
    const pl_chunk *c = &e->chunks.chunks[u / 2];
    *n = 0;
    if (u % 2 == 0) {
        if (e->z3) {
            h[(*n)++] = e->hooks->z3_param_shard(e, u / 2);
        } else {
            h[(*n)++] = c->h_param;
            if (!e->hooks->dp_releases_grads(e)) h[(*n)++] = c->h_grad;
        }
        if (e->hooks->dp_grad_shard(e, u / 2)) h[(*n)++] = e->hooks->dp_grad_shard(e, u / 2);
    } else { /* the optimizer's: states and fp32 master weights */
        for (int s = 0; s < e->chunks.n_states; s++) h[(*n)++] = c->h_state[s];
        if (c->h_master) h[(*n)++] = c->h_master;
    }
}

/* Bytes of every tile's activations and their gradients (StarPU-managed,
 * so they count against the budget too). */
static int64_t activation_bytes(const pl_engine_t *e) {
    int64_t b = 0;
    for (int i = 0; i < e->g->n_tensors; i++) {
        const pl_tensor_t *t = e->g->tensors[i];
        if (t->kind != PL_TENSOR_ACTIVATION && t->kind != PL_TENSOR_INPUT) continue;
        int64_t one = (int64_t)e->max_tile_samples * t->numel *
                      (int64_t)pl_engine_tensor_elem(e, t) * e->n_tiles;
        b += t->requires_grad ? 2 * one : one;
    }
    return b;
}

/* The disk tier against the plan: what must live outside the compute
 * tier at once (and outside the host tier's budget on a GPU; with no host
 * budget nothing needs the disk) must fit in what StarPU may use there
 * (half of the space free when the runtime started) and in the space free
 * there now. A plan that does not fit would have StarPU retry its
 * evictions forever (a silent spin while the chunks are allocated). */
static pl_status check_offload_space(pl_engine_t *e, int64_t total) {
    const pl_runtime_t *rt = e->rt;
    int64_t beyond = rt->compute_budget +
                     (rt->compute_node != STARPU_MAIN_RAM ? rt->host_budget : 0);
    bool host_unbounded = rt->compute_node != STARPU_MAIN_RAM && rt->host_budget <= 0;
    e->offload_need = host_unbounded || total <= beyond ? 0 : total - beyond;
    pl_offload_space sp;
    pl_engine_offload_space(e, &sp);
    if (e->offload_need <= sp.capacity && e->offload_need <= sp.free_bytes) return PL_STATUS_OK;
    const double mib = 1024.0 * 1024.0;
    return pl_fail(PL_STATUS_IO_ERROR,
                   "memory placement: offload directory '%s': the plan needs up to %lld bytes "
                   "(%.1f MiB) there (model state and activations %.1f MiB, beyond the %.1f "
                   "MiB in memory), but the disk tier may use %lld bytes (%.1f MiB: half of "
                   "what was free when the runtime started) and %lld bytes (%.1f MiB) are free "
                   "there now: free space there, give another --offload-dir, or raise the "
                   "budget",
                   e->hooks->offload_dir(), (long long)e->offload_need, e->offload_need / mib,
                   total / mib, beyond / mib, (long long)sp.capacity, sp.capacity / mib,
                   (long long)sp.free_bytes, sp.free_bytes / mib);
}

pl_status pl_engine_offload_space(const pl_engine_t *e, pl_offload_space *out) {
    if (!e || !out)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_offload_space: %s is NULL",
                       !e ? "engine" : "out");
    *out = (pl_offload_space){0, 0, 0};
    if (e->rt->offload_node < 0) return PL_STATUS_OK;
    out->need = e->offload_need;
    starpu_ssize_t total = starpu_memory_get_total((unsigned)e->rt->offload_node);
    out->capacity = total > 0 ? (int64_t)total : 0;
    /* Free now, counting what this run's files already hold as free for
     * it (StarPU's disk measurement, evictions so far). */
    struct statvfs fs;
    out->free_bytes = statvfs(e->hooks->offload_dir(), &fs) == 0
                          ? (int64_t)fs.f_bavail * (int64_t)fs.f_frsize +
                                e->hooks->offload_bytes()
                          : e->rt->offload_dir_free;
    return PL_STATUS_OK;
}

/* Checks that need only the packing, run before any chunk is allocated
 * (the chunks are allocated under the budget, and StarPU's allocator spins
 * forever on a request that can never fit):
 *  - a valid placement exists: every step's units plus the activations of
 *    one of its tasks fit at once (StarPU must hold all of a task's data on
 *    the compute tier);
 *  - without a tier to offload to, everything fits. */
pl_status pl_engine_placement_precheck(pl_engine_t *e, const int64_t *sizes,
                                       const int *ids, int n, size_t chunk_elems,
                                       int n_states) {
    const pl_placement_options *o = &e->opt.placement;
    const pl_runtime_t *rt = e->rt;
    const pl_graph_t *g = e->g;
    if (!o->policy) {
        if (rt->compute_budget > 0 && !rt->budget_is_device)
            return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                           "memory placement: the runtime has a compute-tier budget "
                           "of %lld bytes but the engine has no placement policy (set "
                           "placement.policy, e.g. pl_placement_auto())",
                           (long long)rt->compute_budget);
        return PL_STATUS_OK;
    }
    if (rt->compute_budget <= 0)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "memory placement: policy '%s' needs a compute-tier budget "
                       "(pl_runtime_options.compute_budget_mb, --budget-mb)",
                       o->policy->name);
    int *chunk_of = malloc((size_t)(n ? n : 1) * sizeof *chunk_of);
    size_t *offset_of = malloc((size_t)(n ? n : 1) * sizeof *offset_of);
    int *chunk_of_tensor = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) *
                                  sizeof *chunk_of_tensor);
    int64_t *chunk_bytes = malloc((size_t)(n ? n : 1) * sizeof *chunk_bytes);
    if (!chunk_of || !offset_of || !chunk_of_tensor || !chunk_bytes) {
        free(chunk_of);
        free(offset_of);
        free(chunk_of_tensor);
        free(chunk_bytes);
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    int nc = n ? pl_chunk_pack(sizes, n, chunk_elems, chunk_of, offset_of) : 0;
    for (int i = 0; i < g->n_tensors; i++) chunk_of_tensor[i] = -1;
    for (int c = 0, i = 0; c < nc; c++) {
        size_t fill = 0;
        for (; i < n && chunk_of[i] == c; i++) {
            fill += (size_t)sizes[i];
            chunk_of_tensor[ids[i]] = c;
        }
        chunk_bytes[c] = (int64_t)pl_chunk_numel(fill, chunk_elems); /* elements */
    }
    /* Per element: a parameter and its gradient (the units layer tasks
     * touch), and everything an optimizer update touches. */
    pl_chunk_format fmt = pl_engine_chunk_format(e);
    int64_t values_grads = 2 * (int64_t)fmt.elem,
            all_state = (int64_t)pl_chunk_format_bytes(&fmt, n_states);
    /* Data parallel ZeRO: a rank's optimizer states are 1/dp of each
     * chunk's; under ZeRO-3 its parameters and gradients between uses
     * too, plus the chunks gathered at once (up to the window ahead of the
     * releases and the one being released). Per element of a chunk:
     * `update` bytes at its optimizer step, `kept` between steps. */
    int dp = e->opt.dp > 1 ? e->opt.dp : 1, zero = dp > 1 ? e->opt.zero_stage : 0;
    int64_t states = all_state - values_grads;
    int64_t update = zero == 3   ? all_state / dp + 1
                     : zero >= 1 ? values_grads + states / dp + 1
                                 : all_state;
    int64_t kept = zero == 3 ? update : zero >= 1 ? values_grads + states / dp + 1 : all_state;
    pl_status st = PL_STATUS_OK;
    int64_t model_total = 0, largest_chunk = 0;
    for (int c = 0; c < nc; c++) {
        model_total += kept * chunk_bytes[c];
        if (chunk_bytes[c] > largest_chunk) largest_chunk = chunk_bytes[c];
    }
    if (zero == 3) model_total += (PL_Z3_WINDOW + 1) * values_grads * largest_chunk;
    int n_ops = g->n_ops;
    for (int s = 0; s < 2 * n_ops + nc && !st; s++) {
        int64_t model = 0, acts = 0;
        if (s >= 2 * n_ops) { /* the optimizer update of a chunk: all of it */
            model = update * chunk_bytes[s - 2 * n_ops];
        } else {
            const pl_op *op = step_op(e, s);
            int seen[PL_OP_MAX_IN];
            int n_seen = 0;
            for (int i = 0; i < op->n_in; i++) {
                int c = chunk_of_tensor[op->in[i]];
                bool dup = c < 0;
                for (int j = 0; j < n_seen && !dup; j++) dup = seen[j] == c;
                if (dup) continue;
                seen[n_seen++] = c;
                model += values_grads * chunk_bytes[c];
            }
            acts = op_tile_bytes(e, op, s >= n_ops);
        }
        if (model + acts > rt->compute_budget) {
            char name[96];
            st = pl_fail(PL_STATUS_INVALID_ARGUMENT,
                         "memory placement: %s needs %lld bytes at once (%lld of model "
                         "state, %lld of one tile's activations), but the compute "
                         "tier's budget is %lld bytes (raise --budget-mb, or use "
                         "smaller --chunk-mb or more tiles)",
                         step_name(e, s, name, sizeof name), (long long)(model + acts),
                         (long long)model, (long long)acts,
                         (long long)rt->compute_budget);
        }
    }
    free(chunk_of);
    free(offset_of);
    free(chunk_of_tensor);
    free(chunk_bytes);
    if (st) return st;
    int64_t total = activation_bytes(e) + model_total;
    if (rt->offload_node >= 0) return check_offload_space(e, total);
    if (rt->compute_node != STARPU_MAIN_RAM) return st;
    /* Without a disk tier an over-budget StarPU has nowhere to evict to and
     * spins forever: refuse up front. */
    if (total > rt->compute_budget)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "memory placement: model state and activations need %lld bytes "
                       "but the budget is %lld bytes and there is no tier to offload to "
                       "(give an offload directory, --offload-dir)",
                       (long long)total, (long long)rt->compute_budget);
    return PL_STATUS_OK;
}

pl_status pl_engine_placement_init(pl_engine_t *e) {
    const pl_placement_options *o = &e->opt.placement;
    pl_runtime_t *rt = e->rt;
    /* Budget and tier checks: pl_engine_placement_precheck, before the
     * chunks were allocated. */
    if (!o->policy || rt->compute_budget <= 0) return PL_STATUS_OK;
    if (!(o->steady_cuda_cap_ratio > 0.0f && o->steady_cuda_cap_ratio <= 1.0f) ||
        !(o->warmup_non_model_data_ratio >= 0.0f && o->warmup_non_model_data_ratio < 1.0f) ||
        o->max_prefetch < 0 || o->gpu_margin_mem_ratio < 0.0f ||
        o->gpu_margin_mem_ratio > 1.0f)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "memory placement: steady_cuda_cap_ratio %g must be in (0, 1], "
                       "warmup_non_model_data_ratio %g in [0, 1), max_prefetch %d >= 0, "
                       "gpu_margin_mem_ratio %g in [0, 1]",
                       o->steady_cuda_cap_ratio, o->warmup_non_model_data_ratio,
                       o->max_prefetch, o->gpu_margin_mem_ratio);
    pl_placement_state *p = calloc(1, sizeof *p);
    if (!p) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory");
    e->placement = p;
    pthread_mutex_init(&p->lock, NULL);
    p->policy = o->policy;
    p->compute_node = rt->compute_node;
    int n_units = 2 * e->chunks.n;
    p->unit_bytes = calloc(n_units ? n_units : 1, sizeof *p->unit_bytes);
    p->unit_is_optim = calloc(n_units ? n_units : 1, sizeof *p->unit_is_optim);
    p->resident = calloc(n_units ? n_units : 1, sizeof *p->resident);
    p->prefetched = calloc(n_units ? n_units : 1, sizeof *p->prefetched);
    p->scratch = calloc(2 * (size_t)n_units + 1, sizeof *p->scratch);
    p->listed = calloc(n_units ? n_units : 1, sizeof *p->listed);
    p->pinned = calloc(n_units ? n_units : 1, sizeof *p->pinned);
    p->evictable = calloc(n_units ? n_units : 1, sizeof *p->evictable);
    if (!p->pinned || !p->evictable || !p->unit_bytes || !p->unit_is_optim || !p->resident || !p->prefetched ||
        !p->scratch || !p->listed)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory");
    for (int c = 0; c < e->chunks.n; c++) {
        int64_t numel = (int64_t)e->chunks.chunks[c].numel;
        int64_t lo, hi;
        e->hooks->dp_shard(e, c, &lo, &hi);
        int64_t shard = hi - lo;
        int64_t optim = e->chunks.n_states + (e->chunks.chunks[c].h_master ? 1 : 0);
        /* values and grads (ZeRO-3: their shards; ZeRO-2: the gradient
         * shard instead of the released whole gradients); m (and v) and
         * the fp32 master weights */
        p->unit_bytes[2 * c] = (e->z3               ? 2 * shard
                                : e->hooks->dp_releases_grads(e)
                                    ? numel + shard
                                    : 2 * numel + (e->hooks->dp_grad_shard(e, c) ? shard : 0)) *
                               (int64_t)e->chunks.elem;
        p->unit_bytes[2 * c + 1] = optim * shard * (int64_t)sizeof(float);
        p->unit_is_optim[2 * c + 1] = true;
    }
    p->info.n_units = n_units;
    p->info.unit_bytes = p->unit_bytes;
    p->info.unit_is_optim = p->unit_is_optim;
    p->info.capacity = rt->compute_budget;
    p->info.options = o;
    pl_status st = build_steps(e, p);
    if (st) return st;
    /* Feasibility: pl_engine_placement_precheck, before allocation. */
    p->non_model = calloc(p->info.n_steps, sizeof *p->non_model);
    if (!p->non_model) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory");
    /* Where initialisation left each unit (StarPU may already have evicted
     * some to make room for later ones). */
    for (int u = 0; u < n_units; u++) {
        starpu_data_handle_t h[PL_CHUNK_MAX_STATES + 2];
        int nh;
        unit_handles(e, u, h, &nh);
        p->resident[u] = true;
        for (int k = 0; k < nh; k++)
            p->resident[u] = p->resident[u] && starpu_data_is_on_node(h[k], p->compute_node);
    }
    p->policy_state = p->policy->init ? p->policy->init(&p->info) : NULL;
    /* Bus byte counters: profiling must be on; reading them resets them. */
    starpu_profiling_status_set(STARPU_PROFILING_ENABLE);
    for (int b = 0; b < starpu_bus_get_count(); b++) {
        struct starpu_profiling_bus_info bi;
        starpu_bus_get_profiling_info(b, &bi);
    }
    return PL_STATUS_OK;
}

pl_status pl_engine_placement_restage(pl_engine_t *e) {
    pl_placement_state *p = e->placement;
    if (!p || e->pp <= 1) return PL_STATUS_OK;
    pl_status st = build_steps(e, p);
    if (st) return st;
    /* A policy copies the steps when it starts (pl_place_seq_init): start
     * it again on the new ones. What it learnt of the warm-up (auto's
     * non-model bytes per step) comes back with before_step's stats. */
    if (p->policy->free) p->policy->free(p->policy_state);
    p->policy_state = p->policy->init ? p->policy->init(&p->info) : NULL;
    return PL_STATUS_OK;
}

void pl_engine_placement_free(pl_engine_t *e) {
    pl_placement_state *p = e->placement;
    if (!p) return;
    if (p->policy && p->policy->free) p->policy->free(p->policy_state);
    free(p->unit_bytes);
    free(p->unit_is_optim);
    free(p->resident);
    free(p->prefetched);
    free(p->scratch);
    free(p->listed);
    free(p->pinned);
    free(p->evictable);
    free(p->step_offset);
    free(p->step_units);
    free(p->non_model);
    pthread_mutex_destroy(&p->lock);
    free(p);
    e->placement = NULL;
}

static void sample_memory(pl_engine_t *e) {
    pl_placement_state *p = e->placement;
    int64_t used = node_used(p->compute_node);
    if (used > p->cur.peak_compute_bytes) p->cur.peak_compute_bytes = used;
    if (e->rt->offload_node >= 0) {
        int64_t disk = node_used((unsigned)e->rt->offload_node);
        if (disk > p->cur.peak_host_bytes) p->cur.peak_host_bytes = disk;
    } else if (e->rt->compute_node != STARPU_MAIN_RAM) {
        int64_t host = node_used(STARPU_MAIN_RAM);
        if (host > p->cur.peak_host_bytes) p->cur.peak_host_bytes = host;
    }
}

/* Non-model data as the warm-up measures it: the bytes of activation,
 * input and gradient handles that hold valid data on the compute tier when
 * a step starts (StarPU's allocated total would also count buffers it
 * keeps cached for reuse). */
static int64_t live_activation_bytes(const pl_engine_t *e, unsigned node) {
    int64_t bytes = 0;
    for (int i = 0; i < e->g->n_tensors; i++) {
        const pl_tensor_rt *r = &e->trt[i];
        if (e->g->tensors[i]->kind == PL_TENSOR_PARAM || !r->val) continue;
        for (int t = 0; t < e->n_tiles; t++)
            for (int k = 0; k < 2; k++) {
                starpu_data_handle_t h = k ? (r->grad ? r->grad[t] : NULL) : r->val[t];
                int allocated = 0, valid = 0, requested = 0;
                if (!h) continue;
                starpu_data_query_status(h, (int)node, &allocated, &valid, &requested);
                if (valid) bytes += (int64_t)starpu_data_get_size(h);
            }
    }
    return bytes;
}

/* The policy's answers are checked before any is acted on: a unit listed
 * twice was once evicted twice (and counted so), an index out of range was
 * silently dropped, and a policy that wrote more entries than victims[] /
 * units[] hold corrupted the heap. GUARD fills the entries past the
 * capacity before each call; any other value there afterwards means the
 * policy wrote past it. */
#define GUARD INT32_MIN

static void guard_scratch(pl_placement_state *p) {
    for (int i = p->info.n_units; i < 2 * p->info.n_units + 1; i++) p->scratch[i] = GUARD;
}

/* Whether the n units the policy's `fn` wrote into p->scratch for step
 * `step` are a valid answer; if not, the step fails (pl_engine_step_failed)
 * naming the policy, the step and the bad value, and nothing of the answer
 * is used (StarPU's own accounting still keeps the budget). Victims must
 * be units the policy was offered (evictable) that the step does not need;
 * a prefetch lists at most max_prefetch units, those not on the compute
 * tier worth at most `budget` bytes. */
static bool answer_valid(pl_engine_t *e, pl_placement_state *p, const char *fn, int step,
                         int n, const int *needed, int n_needed, bool victims,
                         int64_t budget) {
    int cap = p->info.n_units;
    char sn[96], why[160] = "";
    int wrote = -1;
    for (int i = 2 * cap; i >= cap && wrote < 0; i--)
        if (p->scratch[i] != GUARD) wrote = i + 1;
    if (wrote >= 0)
        snprintf(why, sizeof why, "wrote at least %d entries into %s[], which holds %d "
                 "(the engine's n_units: each unit at most once)", wrote,
                 victims ? "victims" : "units", cap);
    else if (n < 0 || n > cap)
        snprintf(why, sizeof why, "returned a count of %d, outside [0, %d] (n_units: each "
                 "unit at most once)", n, cap);
    for (int i = 0; !*why && i < n; i++) {
        int u = p->scratch[i];
        bool is_needed = false;
        for (int j = 0; j < n_needed; j++) is_needed = is_needed || needed[j] == u;
        if (u < 0 || u >= cap)
            snprintf(why, sizeof why, "returned unit %d (entry %d), outside [0, %d)", u, i,
                     cap);
        else if (p->listed[u]) {
            int first = 0;
            while (p->scratch[first] != u) first++;
            snprintf(why, sizeof why, "returned unit %d twice (entries %d and %d)", u, first,
                     i);
        }
        else if (victims && is_needed)
            snprintf(why, sizeof why, "returned unit %d (entry %d), which this step needs",
                     u, i);
        else if (victims && !p->evictable[u])
            snprintf(why, sizeof why, "returned unit %d (entry %d), which is not one it was "
                     "offered (resident and not pinned)", u, i);
        else
            p->listed[u] = true;
    }
    for (int i = 0; i < n && i < cap; i++)
        if (p->scratch[i] >= 0 && p->scratch[i] < cap) p->listed[p->scratch[i]] = false;
    /* A prefetch within its limits: beyond them StarPU was once left
     * retrying fetches to a full compute tier, and an engine's unregister
     * waited on them for minutes (fuzz_placement, with ASan's slow
     * allocations). */
    int max = p->info.options->max_prefetch;
    int64_t bytes = 0;
    for (int i = 0; !*why && !victims && i < n; i++)
        if (!p->resident[p->scratch[i]]) bytes += p->unit_bytes[p->scratch[i]];
    if (!*why && !victims && n > max)
        snprintf(why, sizeof why, "returned %d units, more than max_prefetch (%d)", n, max);
    else if (!*why && !victims && bytes > budget)
        snprintf(why, sizeof why, "returned units of %lld bytes not on the compute tier, "
                 "more than the %lld bytes it was given", (long long)bytes,
                 (long long)budget);
    if (!*why) return true;
    pl_engine_step_failed(e, "placement policy '%s': %s for %s %s",
                          p->policy->name ? p->policy->name : "(unnamed)", fn,
                          step_name(e, step, sn, sizeof sn), why);
    return false;
}

/* Runs when a step's first task becomes ready (StarPU thread). */
static void step_prologue(void *arg) {
    pl_task_info *info = arg;
    pl_engine_t *e = info->engine;
    pl_placement_state *p = e->placement;
    int step = info->step;
    pthread_mutex_lock(&p->lock);
    p->dirty = true;
    const pl_placement_options *o = p->info.options;
    const int *needed = p->step_units + p->step_offset[step];
    int n_needed = p->step_offset[step + 1] - p->step_offset[step];
    int64_t used = node_used(p->compute_node);
    /* ZeRO-3's whole chunks gathered now, ZeRO-2's whole gradients back
     * now: model data too. */
    int64_t model = unit_resident_bytes(p) + pl_engine_whole_bytes(e);
    if (p->iteration == 0) p->non_model[step] = live_activation_bytes(e, p->compute_node);
    pl_memory_stats stats = {.capacity = p->info.capacity, .used = used, .model = model,
                             .non_model = p->iteration == 0 ? -1 : p->non_model[step],
                             .iteration = p->iteration};
    if (p->policy->before_step)
        p->policy->before_step(p->policy_state, step, needed, n_needed, p->resident,
                               &stats);
    /* The model-data budget of this step (Gemini's rule). */
    int64_t budget = p->iteration == 0
                         ? (int64_t)(p->info.capacity * (1.0 - o->warmup_non_model_data_ratio))
                         : (int64_t)(p->info.capacity * o->steady_cuda_cap_ratio) -
                               p->non_model[step];
    int64_t missing = 0;
    for (int j = 0; j < n_needed; j++)
        if (!p->resident[needed[j]]) missing += p->unit_bytes[needed[j]];
    int64_t excess = model + missing - budget;
    if (excess > 0 && p->policy->choose_victims) {
        /* Pinned units are hidden from the policy, so the bytes it frees
         * come from units that can really leave. */
        for (int u = 0; u < p->info.n_units; u++)
            p->evictable[u] = p->resident[u] && !p->pinned[u];
        guard_scratch(p);
        int n = p->policy->choose_victims(p->policy_state, step, excess, p->evictable,
                                          p->scratch);
        if (!answer_valid(e, p, "choose_victims", step, n, needed, n_needed, true, 0)) n = 0;
        for (int i = 0; i < n; i++) {
            int u = p->scratch[i];
            starpu_data_handle_t h[PL_CHUNK_MAX_STATES + 2];
            int nh;
            unit_handles(e, u, h, &nh);
            for (int k = 0; k < nh; k++) starpu_data_wont_use(h[k]);
            p->resident[u] = false;
            p->prefetched[u] = false;
            p->cur.evictions++;
        }
    }
    for (int j = 0; j < n_needed; j++) {
        int u = needed[j];
        if (p->prefetched[u] && p->resident[u]) p->cur.prefetch_hits++;
        p->prefetched[u] = false;
        p->resident[u] = true;
    }
    if (p->policy->prefetch && o->max_prefetch > 0) {
        int64_t left = budget - unit_resident_bytes(p);
        int n = 0;
        if (left > 0) {
            guard_scratch(p);
            n = p->policy->prefetch(p->policy_state, step, left, p->resident, p->scratch);
            /* A count of 0 too: units[] written past its capacity is a
             * bad answer whatever the count (once let through when the
             * count was 0). */
            if (!answer_valid(e, p, "prefetch", step, n, needed, n_needed, false, left))
                n = 0;
        }
        for (int i = 0; i < n; i++) {
            int u = p->scratch[i];
            if (p->resident[u]) continue; /* already there: nothing to bring */
            starpu_data_handle_t h[PL_CHUNK_MAX_STATES + 2];
            int nh;
            unit_handles(e, u, h, &nh);
            for (int k = 0; k < nh; k++)
                starpu_data_prefetch_on_node(h[k], p->compute_node, 1);
            p->resident[u] = true;
            p->prefetched[u] = true;
        }
    }
    sample_memory(e);
    pthread_mutex_unlock(&p->lock);
}

void pl_engine_placement_tag(pl_engine_t *e, struct starpu_task *task,
                             pl_task_info *info) {
    pl_placement_state *p = e->placement;
    if (!p) return;
    /* A chunk's optimizer update, and with clipping its gradient's norm
     * (tile: the chunk), where the policy wants the update. Not the
     * optimizer phase's tasks of no chunk (tile -1: the norm's combining,
     * tied sums) nor collectives and ZeRO's memory tasks (tile: a
     * bucket), which the policy was once asked about as chunk -1 or as a
     * bucket's index. */
    if (info->op < 0 && info->slot == PL_SLOT_OPT && info->tile >= 0 &&
        info->tile < e->chunks.n && p->policy->where_to_update) {
        /* One callback at a time: the steps' prologues call the policy
         * on StarPU's threads meanwhile. */
        pthread_mutex_lock(&p->lock);
        int tier = (int)p->policy->where_to_update(p->policy_state, info->tile);
        pthread_mutex_unlock(&p->lock);
        if (tier < PL_TIER_COMPUTE || tier > PL_TIER_DISK) {
            pl_engine_step_failed(e, "placement policy '%s': where_to_update for the "
                                  "optimizer update of chunk %d returned %d, which is no "
                                  "pl_tier (PL_TIER_COMPUTE, PL_TIER_HOST or PL_TIER_DISK)",
                                  p->policy->name ? p->policy->name : "(unnamed)",
                                  info->tile, tier);
            tier = PL_TIER_COMPUTE;
        }
        if (tier != PL_TIER_COMPUTE && e->rt->compute_node != STARPU_MAIN_RAM)
            task->where = STARPU_CPU;
    }
    if (e->pending_step < 0) return;
    info->engine = e;
    info->step = e->pending_step;
    task->prologue_callback_func = step_prologue;
    task->prologue_callback_arg = info;
    e->pending_step = -1;
}

void pl_engine_placement_sample(pl_engine_t *e) {
    pl_placement_state *p = e->placement;
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    sample_memory(e);
    pthread_mutex_unlock(&p->lock);
}

/* gpu_margin_mem_ratio: after the warm-up, the compute tier's spare room
 * (budget − the warm-up's peak) times the ratio holds optimizer states for
 * good, in chunk order, so their updates stop moving them. */
static void pin_optimizer_states(pl_placement_state *p) {
    float ratio = p->info.options->gpu_margin_mem_ratio;
    int64_t room = (int64_t)((double)(p->info.capacity - p->last.peak_compute_bytes) * ratio);
    for (int u = 1; u < p->info.n_units && room > 0; u += 2)
        if (p->unit_bytes[u] <= room) {
            p->pinned[u] = true;
            room -= p->unit_bytes[u];
        }
}

/* Closes the iteration's figures; called with no task in flight. */
void pl_engine_placement_iteration_end(pl_engine_t *e) {
    pl_placement_state *p = e->placement;
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    if (p->dirty) {
        int64_t moved = 0;
        for (int b = 0; b < starpu_bus_get_count(); b++) {
            struct starpu_profiling_bus_info bi;
            if (starpu_bus_get_profiling_info(b, &bi) == 0) moved += bi.transferred_bytes;
        }
        p->cur.bytes_moved = moved;
        p->last = p->cur;
        memset(&p->cur, 0, sizeof p->cur);
        if (p->iteration == 0) pin_optimizer_states(p);
        p->iteration++;
        p->dirty = false;
    }
    pthread_mutex_unlock(&p->lock);
}

pl_status pl_engine_memory(pl_engine_t *e, pl_iteration_memory *out) {
    if (!e || !out)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_memory: %s is NULL",
                       !e ? "engine" : "out");
    memset(out, 0, sizeof *out);
    if (!e->placement) {
        out->peak_compute_bytes = node_used(e->rt->compute_node);
        return PL_STATUS_OK;
    }
    starpu_task_wait_for_all();
    pl_engine_placement_iteration_end(e);
    pthread_mutex_lock(&e->placement->lock);
    *out = e->placement->last;
    pthread_mutex_unlock(&e->placement->lock);
    return PL_STATUS_OK;
}

/* After a microbatch's backward pass its activations and their gradients
 * are dead until the next iteration's forward rewrites them: invalidating
 * them lets StarPU drop the buffers instead of writing them to the offload
 * tier when it needs room (StarPU orders the invalidation after the tasks
 * already submitted that use them). The graph's output and the scalars are
 * kept: the caller reads them after the step. */
/* An op's output (and its gradient, and its auxiliary output) is dead for
 * a microbatch once the op's backward for it is submitted: every consumer
 * came later in the forward order, so its backward was submitted earlier. */
/* check_finite reads every activation once the pass is over: nothing is
 * dropped while it is on. */
void pl_engine_placement_release_op(pl_engine_t *e, int op_index, int tile) {
    if (!e->placement || e->opt.check_finite) return;
    const pl_op *op = &e->g->ops[op_index];
    int outs[3] = {op->out, op->saved, op->invalid};
    for (int k = 0; k < 3; k++) {
        int id = outs[k];
        if (id < 0 || id == e->g->output) continue;
        const pl_tensor_t *t = e->g->tensors[id];
        if (t->kind != PL_TENSOR_ACTIVATION) continue;
        pl_act_mem_drop(e, id, tile, false);
        pl_act_mem_drop(e, id, tile, true);
    }
}

void pl_engine_placement_release_tile(pl_engine_t *e, int tile) {
    if (!e->placement || e->opt.check_finite) return;
    for (int i = 0; i < e->g->n_tensors; i++) {
        const pl_tensor_t *t = e->g->tensors[i];
        const pl_tensor_rt *r = &e->trt[i];
        if (t->kind != PL_TENSOR_INPUT || i == e->label_input) continue;
        starpu_data_invalidate_submit(r->val[tile]);
        if (r->grad) starpu_data_invalidate_submit(r->grad[tile]);
    }
}
