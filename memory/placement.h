/* Internal helpers of the built-in placement policies (memory/placement*.c).
 *
 * The policies are pure logic over the public pl_placement_policy
 * interface (no StarPU here): the engine (engine/placement.c) tells
 * them what each step needs and asks them for victims and prefetches. This
 * header holds what they share: GeminiPlugin's option defaults and a
 * private copy of the access sequence of one iteration. */
#ifndef PL_MEMORY_PLACEMENT_H
#define PL_MEMORY_PLACEMENT_H

#include <stdbool.h>
#include <stdint.h>

#include "pleiades.h"

/* Colossal-AI GeminiPlugin's defaults: shard_param_frac 1.0,
 * offload_optim_frac 0.0, offload_param_frac 0.0,
 * warmup_non_model_data_ratio 0.8, steady_cuda_cap_ratio 0.9,
 * max_prefetch 0, gpu_margin_mem_ratio 0.0; no policy. */
pl_placement_options pl_placement_options_defaults(void);

/* The Lightning presets (memory/placement_static.c): the static policy
 * with its fractions forced, whatever the options say — "cpu": shard 1,
 * offload_optim 1, offload_param 1; "cuda": 0, 0, 0. */
const pl_placement_policy *pl_placement_static_cpu(void);
const pl_placement_policy *pl_placement_static_cuda(void);

/* Gemini's shard_param_frac over ranks (ZeRO-3, engine/zero3.c): whether
 * `policy` is of the static family (static and its presets), and if so
 * sharded[k] for each of the n chunks of `bytes[k]` bytes — the first
 * shard_param_frac of their memory by the prefix rule the static policy
 * classifies with (a preset's own fraction, else the options'). The
 * others Gemini keeps gathered. */
bool pl_placement_static_sharded(const pl_placement_policy *policy,
                                 const pl_placement_options *options, const int64_t *bytes,
                                 int n, bool *sharded);

/* One iteration's access sequence, copied out of a pl_placement_info (the
 * engine need not keep its arrays alive after init) plus a per-unit mark
 * array for "needed by the current step" queries. */
typedef struct pl_place_seq {
    int n_units, n_steps;
    int64_t *unit_bytes;   /* [n_units] */
    bool *unit_is_optim;   /* [n_units] */
    int *step_offset;      /* [n_steps + 1] */
    int *step_units;       /* [step_offset[n_steps]] */
    int64_t capacity;
    pl_placement_options options; /* defaults when info->options is NULL */
    /* needed_stamp[u] == stamp: u is needed by the step being queried.
     * Stamps avoid clearing the array on every query. */
    unsigned *needed_stamp;
    unsigned stamp;
    /* The units the engine last announced in before_step, and for which
     * step: choose_victims/prefetch for that step also keep those (the
     * engine may know of needs the static sequence does not list). */
    int *announced;
    int n_announced, announced_cap, announced_step;
} pl_place_seq;

/* Copies `info` (invalid entries are sanitised: negative sizes become 0,
 * out-of-range unit ids in steps are dropped). false on allocation
 * failure, with nothing left to free. */
bool pl_place_seq_init(pl_place_seq *q, const pl_placement_info *info);
void pl_place_seq_free(pl_place_seq *q);

/* Records before_step's `needed` for `step`. */
void pl_place_seq_announce(pl_place_seq *q, int step, const int *needed,
                           int n_needed);

/* Marks the units step `step` needs (its sequence entry plus what
 * before_step announced for it); afterwards pl_place_seq_needed(q, u) tells
 * whether u is one of them. A step outside [0, n_steps) needs only what was
 * announced for it. */
void pl_place_seq_mark_needed(pl_place_seq *q, int step);
static inline bool pl_place_seq_needed(const pl_place_seq *q, int u) {
    return q->needed_stamp[u] == q->stamp;
}

/* Whether unit u holds optimizer states (the info's flag, or u odd when
 * the info gave none). */
static inline bool pl_place_seq_is_optim(const pl_place_seq *q, int u) {
    return q->unit_is_optim[u];
}

#endif
