/*
 * pleiades/placement.h — memory placement of chunks across tiers: the
 * policy interface, the built-in policies and their Gemini knobs (part of
 * pleiades.h).
 *
 *   pl_engine_options eo = pl_engine_options_default();
 *   eo.placement.policy = pl_placement_find("auto");    // or your own struct
 *   eo.placement.max_prefetch = 2;
 *   // with pl_runtime_options.compute_budget_mb and offload_dir set
 */
#ifndef PLEIADES_PLACEMENT_H
#define PLEIADES_PLACEMENT_H

#include "pleiades/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------ memory placement
 *
 * With a placement policy, every chunk of model state is a unit the policy
 * places: chunk k's values and gradients are unit 2k (model data), its
 * optimizer states unit 2k+1. An iteration is a sequence of operator steps
 * (each op's forward, each op's backward in reverse, each chunk's optimizer
 * update), and each step needs some units on the compute tier. Before a
 * step runs, the engine tells the policy which units it needs; when they
 * do not fit in the budget the policy chooses victims (written back to the
 * host/disk tier through StarPU), and it may prefetch units for later
 * steps. StarPU's memory accounting enforces the budget itself; the policy
 * decides what goes first and what comes early. */

typedef enum pl_tier {
    PL_TIER_COMPUTE = 0, /* GPU memory, or RAM on CPU-only runs */
    PL_TIER_HOST,        /* host RAM (its own tier on CUDA runs) */
    PL_TIER_DISK,        /* --offload-dir */
} pl_tier;

typedef struct pl_memory_stats {
    int64_t capacity;  /* compute-tier budget in bytes */
    int64_t used;      /* bytes StarPU has allocated on it now */
    int64_t model;     /* bytes of units the engine counts as resident */
    int64_t non_model; /* non-model bytes recorded for this step in the
                          warm-up iteration, -1 during the warm-up */
    int iteration;     /* 0 is the warm-up */
} pl_memory_stats;

typedef struct pl_placement_options pl_placement_options;

typedef struct pl_placement_info {
    int n_units;
    const int64_t *unit_bytes;
    const bool *unit_is_optim;   /* optimizer states (odd units) */
    int n_steps;                 /* steps of one iteration, in order */
    const int *step_offset;      /* step s needs units */
    const int *step_units;       /*   step_units[step_offset[s] .. step_offset[s+1]) */
    int64_t capacity;            /* compute-tier budget in bytes */
    const pl_placement_options *options;
} pl_placement_info;

/* A placement policy: a struct of callbacks. The built-in ones
 * (pl_placement_static(), pl_placement_auto()) are written against this
 * interface too. `resident[u]` is the engine's view of which units are on
 * the compute tier. Callbacks run one at a time: before_step,
 * choose_victims and prefetch on StarPU's threads, init, where_to_update
 * and free on the thread that calls the engine. */
typedef struct pl_placement_policy {
    const char *name;
    /* Returns the policy's state (NULL is allowed). */
    void *(*init)(const pl_placement_info *info);
    /* Step `step` is about to run and needs `needed`. */
    void (*before_step)(void *state, int step, const int *needed, int n_needed,
                        const bool *resident, const pl_memory_stats *stats);
    /* At least `bytes` must leave the compute tier for step `step`: write
     * victims (units marked in `resident`, which lists those that may
     * leave, that the step does not need) into victims[]; return how
     * many. victims[] holds info->n_units entries: each unit at most
     * once. The engine checks the answer before acting on it: a count
     * outside [0, n_units], an entry written past n_units, a unit out of
     * [0, n_units), listed twice, not offered or needed by the step fails
     * the step, naming the policy, the step and the value (the step in
     * which it is found; an optimizer update's, the engine's next call). */
    int (*choose_victims)(void *state, int step, int64_t bytes,
                          const bool *resident, int *victims);
    /* Units to bring in ahead of use within `budget` bytes; return count.
     * units[] holds info->n_units entries: each unit at most once (units
     * already resident are skipped). Checked like choose_victims' answer:
     * count, entries past the capacity (whatever the count, 0 included),
     * range, duplicates; and at most options->max_prefetch units, those
     * not resident worth at most `budget` bytes. */
    int (*prefetch)(void *state, int step, int64_t budget, const bool *resident,
                    int *units);
    /* Where the optimizer update of chunk `chunk` (in [0, n_units / 2))
     * runs; asked as the update is submitted, and with gradient clipping
     * also for the chunk's share of the gradient norm, which then runs
     * there too. A value that is no pl_tier fails the step like a bad
     * answer above (reported by the engine's next call), and the update
     * runs on the compute tier. */
    pl_tier (*where_to_update)(void *state, int chunk);
    void (*free)(void *state);
} pl_placement_policy;

/* Colossal-AI's GeminiPlugin knobs, with its names and defaults. */
struct pl_placement_options {
    const pl_placement_policy *policy; /* NULL: no placement (default).
                                          Kept by the engine: must outlive
                                          it (the built-ins are static) */
    float shard_param_frac;            /* static: 1.0 */
    float offload_optim_frac;          /* static: 0.0 */
    float offload_param_frac;          /* static: 0.0 (needs the two above at 1.0) */
    float warmup_non_model_data_ratio; /* auto: 0.8 */
    float steady_cuda_cap_ratio;       /* auto: 0.9 */
    int max_prefetch;                  /* auto: 0 */
    float gpu_margin_mem_ratio;        /* auto: 0.0 */
};

/* static: the first shard_param_frac of parameter-chunk memory may leave
 * the compute tier between uses (under zero_stage 3, Gemini's meaning:
 * only those chunks are resharded over the ranks after each use; the
 * others stay gathered from their forward gather to their backward
 * release), the first offload_optim_frac of chunk
 * memory keeps its optimizer states (and runs its update) on the host.
 * auto: Belady's rule — evict the units whose next use is furthest away,
 * within capacity·steady_cuda_cap_ratio − non_model[step], prefetching up
 * to max_prefetch upcoming units. "cpu" and "cuda" are the Lightning
 * presets: static with everything offloaded / nothing offloaded. */
const pl_placement_policy *pl_placement_static(void);
const pl_placement_policy *pl_placement_auto(void);
/* Colossal-AI's and Lightning's names: "static", "auto", "cpu", "cuda";
 * NULL for any other, with an INVALID_ARGUMENT naming these. The presets
 * also adjust `options`' fractions (when `options` is not NULL). Every
 * registered policy, these, "lru" and yours, is found with
 * pl_placement_find. */
const pl_placement_policy *pl_placement_by_name(const char *name,
                                                pl_placement_options *options);

/* ------------------------------------------------------------ registry
 *
 * Policies by name: the built-ins ("static", "auto", "cpu", "cuda", and
 * "lru": evicts the least recently used resident units a step does not
 * need, prefetches nothing, updates every chunk on the compute tier — a
 * baseline that looks only at the past, where auto's Belady rule looks
 * ahead) and those registered with pl_placement_register, which are found
 * exactly like the built-ins. The CLI's --placement NAME looks names up
 * here (and lists them); an engine takes what pl_placement_find returns
 * as pl_placement_options.policy. The registry holds pointers: a
 * registered policy must outlive every use (make it static). Registering
 * and finding are thread-safe. */

/* Adds `policy` under policy->name. PL_STATUS_INVALID_ARGUMENT, with a
 * message, for a NULL policy, a NULL or empty name or a name already
 * registered (built-ins included); PL_STATUS_OUT_OF_MEMORY if the
 * registry cannot grow. */
pl_status pl_placement_register(const pl_placement_policy *policy);
/* The policy registered as `name` (case-sensitive), or NULL with
 * PL_STATUS_INVALID_ARGUMENT and a message listing the registered names.
 * Unlike pl_placement_by_name it changes no options: the presets "cpu"
 * and "cuda" force their fractions themselves. */
const pl_placement_policy *pl_placement_find(const char *name);
/* Listing: pl_placement_at(i) for i in [0, pl_placement_count()) gives
 * the built-ins in the order above, then yours in registration order;
 * NULL outside. */
int pl_placement_count(void);
const pl_placement_policy *pl_placement_at(int index);

/* Memory figures of the last iteration. */
typedef struct pl_iteration_memory {
    int64_t peak_compute_bytes; /* StarPU's count, sampled per task */
    int64_t peak_host_bytes;    /* host RAM (CUDA) or disk (CPU-only) */
    int64_t bytes_moved;        /* between tiers, from StarPU's bus counters */
    int64_t evictions;          /* units the policy sent away */
    int64_t prefetch_hits;      /* needed units already brought in early */
} pl_iteration_memory;

#ifdef __cplusplus
}
#endif

#endif /* PLEIADES_PLACEMENT_H */
