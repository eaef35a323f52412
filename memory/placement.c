/* Placement policies: Gemini's and Lightning's names, GeminiPlugin's option
 * defaults, and the access-sequence copy the built-in policies share.
 * Pure logic, no StarPU (the engine drives the policies). */
#include "memory/placement.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

pl_placement_options pl_placement_options_defaults(void) {
    return (pl_placement_options){
        .policy = NULL,
        .shard_param_frac = 1.0f,
        .offload_optim_frac = 0.0f,
        .offload_param_frac = 0.0f,
        .warmup_non_model_data_ratio = 0.8f,
        .steady_cuda_cap_ratio = 0.9f,
        .max_prefetch = 0,
        .gpu_margin_mem_ratio = 0.0f,
    };
}

const pl_placement_policy *pl_placement_by_name(const char *name,
                                                pl_placement_options *options) {
    if (!name) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_placement_by_name: name is NULL");
        return NULL;
    }
    if (strcmp(name, "static") == 0) return pl_placement_static();
    if (strcmp(name, "auto") == 0) return pl_placement_auto();
    /* The Lightning presets are the static policy with fixed fractions.
     * Their policies force those fractions themselves (so a preset means
     * the same whatever the options hold); writing them into `options` too
     * keeps what the caller reads back (and prints) truthful. */
    if (strcmp(name, "cpu") == 0) {
        if (options) {
            options->shard_param_frac = 1.0f;
            options->offload_optim_frac = 1.0f;
            options->offload_param_frac = 1.0f;
        }
        return pl_placement_static_cpu();
    }
    if (strcmp(name, "cuda") == 0) {
        if (options) {
            options->shard_param_frac = 0.0f;
            options->offload_optim_frac = 0.0f;
            options->offload_param_frac = 0.0f;
        }
        return pl_placement_static_cuda();
    }
    pl_fail(PL_STATUS_INVALID_ARGUMENT,
            "pl_placement_by_name: unknown policy '%s' (it knows Colossal-AI's and "
            "Lightning's names: static, auto, cpu, cuda; pl_placement_find knows every "
            "registered policy, lru and your own included)", name);
    return NULL;
}

/* ------------------------------------------------------ access sequence */

void pl_place_seq_free(pl_place_seq *q) {
    free(q->unit_bytes);
    free(q->unit_is_optim);
    free(q->step_offset);
    free(q->step_units);
    free(q->needed_stamp);
    free(q->announced);
    memset(q, 0, sizeof *q);
}

bool pl_place_seq_init(pl_place_seq *q, const pl_placement_info *info) {
    memset(q, 0, sizeof *q);
    int nu = info && info->n_units > 0 ? info->n_units : 0;
    int ns = info && info->n_steps > 0 && info->step_offset ? info->n_steps : 0;
    q->n_units = nu;
    q->n_steps = ns;
    q->capacity = info ? info->capacity : 0;
    q->options = info && info->options ? *info->options
                                       : pl_placement_options_defaults();
    q->announced_step = -1;
    q->announced_cap = nu + 1;
    /* Sizes of at least 1 element keep malloc(0) out of the picture. */
    q->unit_bytes = calloc((size_t)nu + 1, sizeof *q->unit_bytes);
    q->unit_is_optim = calloc((size_t)nu + 1, sizeof *q->unit_is_optim);
    q->needed_stamp = calloc((size_t)nu + 1, sizeof *q->needed_stamp);
    q->announced = calloc((size_t)nu + 1, sizeof *q->announced);
    q->step_offset = calloc((size_t)ns + 1, sizeof *q->step_offset);
    size_t total = 0;
    for (int s = 0; s < ns; s++) {
        int n = info->step_offset[s + 1] - info->step_offset[s];
        if (n > 0) total += (size_t)n;
    }
    q->step_units = calloc(total + 1, sizeof *q->step_units);
    if (!q->unit_bytes || !q->unit_is_optim || !q->needed_stamp ||
        !q->announced || !q->step_offset || !q->step_units) {
        pl_place_seq_free(q);
        return false;
    }
    for (int u = 0; u < nu; u++) {
        int64_t b = info->unit_bytes ? info->unit_bytes[u] : 0;
        q->unit_bytes[u] = b > 0 ? b : 0;
        q->unit_is_optim[u] = info->unit_is_optim ? info->unit_is_optim[u]
                                                  : (u & 1) != 0;
    }
    /* A unit listed twice in one step is kept once: the policies count
     * bytes per distinct unit. */
    int k = 0;
    unsigned stamp = 0;
    for (int s = 0; s < ns; s++) {
        q->step_offset[s] = k;
        stamp++;
        for (int i = info->step_offset[s]; i < info->step_offset[s + 1]; i++) {
            int u = info->step_units ? info->step_units[i] : -1;
            if (u < 0 || u >= nu || q->needed_stamp[u] == stamp) continue;
            q->needed_stamp[u] = stamp;
            q->step_units[k++] = u;
        }
    }
    q->step_offset[ns] = k;
    memset(q->needed_stamp, 0, ((size_t)nu + 1) * sizeof *q->needed_stamp);
    return true;
}

void pl_place_seq_announce(pl_place_seq *q, int step, const int *needed,
                           int n_needed) {
    q->n_announced = 0;
    q->announced_step = step;
    if (needed && n_needed > q->announced_cap) {
        /* Grown on demand (the engine may list a unit twice); on failure
         * the old array keeps what fits. */
        int *a = realloc(q->announced, (size_t)n_needed * sizeof *a);
        if (a) {
            q->announced = a;
            q->announced_cap = n_needed;
        }
    }
    for (int i = 0; needed && i < n_needed && q->n_announced < q->announced_cap; i++)
        if (needed[i] >= 0 && needed[i] < q->n_units)
            q->announced[q->n_announced++] = needed[i];
}

void pl_place_seq_mark_needed(pl_place_seq *q, int step) {
    if (++q->stamp == 0) {
        /* The stamp wrapped: old marks could match again, so clear them. */
        memset(q->needed_stamp, 0, ((size_t)q->n_units + 1) * sizeof *q->needed_stamp);
        q->stamp = 1;
    }
    if (step >= 0 && step < q->n_steps)
        for (int i = q->step_offset[step]; i < q->step_offset[step + 1]; i++)
            q->needed_stamp[q->step_units[i]] = q->stamp;
    if (step == q->announced_step)
        for (int i = 0; i < q->n_announced; i++)
            q->needed_stamp[q->announced[i]] = q->stamp;
}
