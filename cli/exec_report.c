/* What `pleiades train` prints of how a model runs (see exec_options.h):
 * the start-up lines on data parallelism, the pipeline, the precision and
 * the placement, the stage cut once measured, and the end-of-run memory
 * and model-state summaries. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "exec_options.h"

/* The schedule's name: "none" has no def. */
static const char *schedule_name(const cli_exec_options *x) {
    return x->engine.schedule_def ? x->engine.schedule_def->name : "none";
}

/* Who polls MPI for StarPU-MPI (pl_mpi_progress), on runs over ranks. */
static void print_mpi_progress(const pl_runtime_t *rt) {
    if (pl_runtime_world_size(rt) > 1)
        printf("; MPI progressed %s", pl_runtime_mpi_progress(rt) == PL_MPI_PROGRESS_WORKER
                                          ? "between worker 0's tasks"
                                          : "by StarPU-MPI's own thread");
}

void cli_exec_print_data_parallel(const cli_exec_options *x, const pl_runtime_t *rt) {
    if (x->engine.pp > 1 && x->engine.dp <= 1)
        printf("; pipeline stages over %d ranks (grid dp 1 x pp %d: rank s runs stage s)",
               x->engine.pp, x->engine.pp);
    if (x->engine.dp <= 1) {
        /* As LowLevelZeroPlugin on one rank: the shards are the whole
         * state. Said, so that the flag is not silently dropped. */
        if (x->engine.zero_stage)
            printf("; --zero-stage %d over 1 data-parallel rank: nothing to shard, each rank "
                   "keeps its whole state", x->engine.zero_stage);
        print_mpi_progress(rt);
        return;
    }
    printf(" per rank; data parallel over %d ranks (%s", x->engine.dp,
           x->engine.zero_stage ? "ZeRO-" : "DDP");
    if (x->engine.zero_stage) printf("%d", x->engine.zero_stage);
    if (x->engine.zero_stage == 3) /* Gemini's per-chunk reduction */
        printf(", chunks gathered around their uses and reduced one by one");
    else if (x->engine.overlap_communication)
        printf(", buckets of %d M elements or 1/8 of the model, the smaller",
               x->engine.reduce_bucket_size_in_m);
    else
        printf(", buckets of %d M elements", x->engine.reduce_bucket_size_in_m);
    printf(", overlap %s)", x->engine.overlap_communication ? "on" : "off");
    /* Hybrid: the rank -> (dp, pp) map, in the order dp_outside gives
     * (on: a replica's stages consecutive; off: a stage's replicas). */
    if (x->engine.pp > 1) {
        int dp = x->engine.dp, pp = x->engine.pp;
        printf("; grid dp %d x pp %d over %d ranks, dp outside %s (rank: (dp, pp)", dp, pp,
               dp * pp, x->runtime.dp_outside ? "on" : "off");
        for (int r = 0; r < dp * pp && r < 64; r++)
            printf(" %d: (%d, %d)", r, pl_runtime_grid_replica(rt, dp, pp, r),
                   pl_runtime_grid_stage(rt, dp, pp, r));
        printf(")");
    }
    print_mpi_progress(rt);
}

/* " | stage s: blocks a-b[, c-d]" for each stage (its chunks' parts in
 * chunk order: s + c·P, or where the schedule places them, ZB-V's V),
 * with each stage's time when `us` is given. */
static void print_stages(const cli_exec_options *x, pl_engine_t *e, int n_blocks,
                         const double *us) {
    int parts[4096];
    if (n_blocks > 4096 || pl_engine_block_parts(e, parts) != x->engine.stages * x->engine.model_chunks) return;
    for (int s = 0; s < x->engine.stages; s++) {
        printf("%sstage %d: blocks", s ? " | " : "", s);
        double stage_us = 0;
        for (int c = 0; c < x->engine.model_chunks; c++) {
            int k = pl_schedule_part(x->engine.schedule_def, x->engine.stages,
                                     x->engine.model_chunks, s, c),
                first = -1, last = -1;
            for (int b = 0; b < n_blocks; b++)
                if (parts[b] == k) {
                    if (first < 0) first = b;
                    last = b;
                    if (us) stage_us += us[b];
                }
            printf(c ? ", " : " ");
            if (first == last) printf("%d", first);
            else printf("%d-%d", first, last);
        }
        if (us) printf(" (%.1f ms)", stage_us / 1e3);
    }
}

void cli_exec_print_pipeline(const cli_exec_options *x, pl_engine_t *e, int n_blocks) {
    if (x->engine.schedule == PL_SCHEDULE_NONE) return;
    printf("pipeline %s: %d stages x %d chunk%s, %d microbatches; ", schedule_name(x),
           x->engine.stages, x->engine.model_chunks, x->engine.model_chunks > 1 ? "s" : "",
           x->engine.tiles);
    /* Workers per stage (this rank's, for its own stage across ranks). */
    int lo = 0, hi = 0;
    for (int s = 0; s < x->engine.stages; s++) {
        int n = pl_engine_stage_workers(e, s);
        if (n == 0) continue;
        if (lo == 0 || n < lo) lo = n;
        if (n > hi) hi = n;
    }
    if (hi == lo && hi > 0)
        printf("%d worker%s per stage; ", hi, hi > 1 ? "s" : "");
    else if (hi > 0)
        printf("%d-%d workers per stage; ", lo, hi);
    print_stages(x, e, n_blocks, NULL);
    /* The engine times a step only when there is a choice to make: more
     * blocks than parts. */
    bool recut = x->engine.stage_balance == PL_STAGE_BALANCE_MEASURED &&
                 n_blocks > x->engine.stages * x->engine.model_chunks;
    printf(" (%s)\n", x->n_layers_per_stage ? "--layers-per-stage"
                      : recut ? "cut on FLOPs; recut on the times measured in training step 2"
                              : "cut on FLOPs");
    fflush(stdout);
}

bool cli_exec_print_stage_times(const cli_exec_options *x, pl_engine_t *e, bool print) {
    double us[4096];
    int nb = x->engine.schedule == PL_SCHEDULE_NONE ? 0 : pl_engine_block_times(e, NULL);
    if (nb <= 0 || nb > 4096) return false;
    if (!print) return true;
    pl_engine_block_times(e, us);
    printf("pipeline stages cut on the block times of training step 2: ");
    print_stages(x, e, nb, us);
    printf("\n");
    fflush(stdout);
    return true;
}

bool cli_exec_memory_reported(const cli_exec_options *x) {
    return cli_exec_placement_active(x) || x->engine.recompute.granularity != PL_RECOMPUTE_NONE;
}

bool cli_exec_placement_active(const cli_exec_options *x) {
    return x->engine.placement.policy != NULL;
}

static double mib(int64_t bytes) { return (double)bytes / 1048576.0; }

/* The tier below the compute tier, as pl_iteration_memory counts it. */
static const char *lower_tier(const cli_exec_options *x) {
    return x->runtime.device == PL_DEVICE_CUDA ? "host" : "disk";
}

void cli_exec_print_precision(const cli_exec_options *x, const pl_engine_t *e) {
    pl_model_state_bytes b;
    if (x->engine.precision == PL_PRECISION_FP32 || pl_engine_model_state_bytes(e, &b)) return;
    const char *name = x->engine.precision == PL_PRECISION_BF16 ? "bf16" : "fp16";
    double mib = 1024.0 * 1024.0;
    printf("precision %s: parameters, gradients and activations in 16 bits (kernels "
           "accumulate in fp32%s); %s; model state %.2f MiB (parameters %.2f, gradients %.2f, "
           "master weights %.2f, optimizer states %.2f)",
           name,
           x->engine.precision == PL_PRECISION_BF16
               ? "; linear layers and attention multiply bf16 values where the CPU has "
                 "AVX512-BF16"
               : "",
           x->engine.master_weights ? "fp32 master weights" : "no master weights",
           (double)(b.params + b.grads + b.master_weights + b.optimizer_states) / mib,
           (double)b.params / mib, (double)b.grads / mib, (double)b.master_weights / mib,
           (double)b.optimizer_states / mib);
    if (x->engine.loss_scaler.enabled)
        printf("; dynamic loss scaling from %g", x->engine.loss_scaler.initial_scale);
    printf("\n");
    fflush(stdout);
}

void cli_exec_print_placement(const cli_exec_options *x, pl_engine_t *e) {
    if (!cli_exec_placement_active(x)) return;
    int n = pl_engine_num_chunks(e);
    const char *each = x->engine.dp > 1 || x->engine.pp > 1 ? " per rank" : "";
    printf("placement %s: compute-tier budget %" PRId64 " MiB%s", x->engine.placement.policy->name,
           x->runtime.compute_budget_mb, each);
    if (x->runtime.host_budget_mb)
        printf(", host budget %" PRId64 " MiB%s", x->runtime.host_budget_mb, each);
    int64_t floats = 0;
    for (int c = 0; c < n; c++) floats += (int64_t)pl_engine_chunk_elems(e, c);
    int value_bytes = x->engine.precision == PL_PRECISION_FP32 ? 4 : 2;
    printf(", offload %s", x->runtime.offload_dir ? x->runtime.offload_dir : "none");
    /* The disk tier against the plan (pl_engine_new refused it if short). */
    pl_offload_space sp;
    if (x->runtime.offload_dir && pl_engine_offload_space(e, &sp) == PL_STATUS_OK)
        printf(" (the plan needs up to %.1f MiB there; %.1f MiB free, of which the disk tier "
               "may use %.1f MiB)", mib(sp.need), mib(sp.free_bytes), mib(sp.capacity));
    printf("; parameters in %d chunk%s (%.3g MiB of %s values)", n, n == 1 ? "" : "s",
           mib(floats * value_bytes), value_bytes == 4 ? "fp32" : "16-bit");
    if (strcmp(x->engine.placement.policy->name, "static") == 0 || strcmp(x->engine.placement.policy->name, "cpu") == 0 ||
        strcmp(x->engine.placement.policy->name, "cuda") == 0)
        printf(" (shard_param_frac %g, offload_optim_frac %g, offload_param_frac %g)",
               (double)x->engine.placement.shard_param_frac, (double)x->engine.placement.offload_optim_frac,
               (double)x->engine.placement.offload_param_frac);
    else if (strcmp(x->engine.placement.policy->name, "auto") == 0)
        printf(" (max_prefetch %d, steady_cuda_cap_ratio %g)", x->engine.placement.max_prefetch,
               (double)x->engine.placement.steady_cuda_cap_ratio);
    printf("\n");
    fflush(stdout);
}

/* The recomputation plan in force, a line per stage, and the
 * activations' peak (the engine's count, rank 0's). */
static void print_recompute(const cli_exec_options *x, const cli_exec_memory *t,
                            const pl_engine_t *e) {
    char plan[2048];
    if (!pl_engine_recompute_plan(e, plan, sizeof plan)) return;
    for (char *line = strtok(plan, "\n"); line; line = strtok(NULL, "\n"))
        printf("recompute (%s): %s\n",
               x->engine.recompute.granularity == PL_RECOMPUTE_AUTO        ? "auto"
               : x->engine.recompute.granularity == PL_RECOMPUTE_SELECTIVE ? "selective"
                                                                           : "full",
               line);
    if (!cli_exec_placement_active(x))
        printf("memory: activations peak %.2f MiB (values of op outputs and saved tensors, "
               "most at once in a step)\n", mib(t->activation_peak_bytes));
}

void cli_exec_print_memory(const cli_exec_options *x, const cli_exec_memory *t,
                           const pl_runtime_t *rt, const pl_engine_t *e) {
    if (pl_runtime_rank(rt) == 0) print_recompute(x, t, e);
    if (!cli_exec_placement_active(x)) {
        fflush(stdout);
        return;
    }
    /* Every rank has the budget and its own figures (a pipeline's stages
     * hold different chunks): rank 0 prints each rank's. */
    enum { K = 7 };
    int world = pl_runtime_world_size(rt) > 1 ? pl_runtime_world_size(rt) : 1;
    double mine[K] = {(double)t->steps, (double)t->peak_compute_bytes,
                      (double)t->peak_host_bytes, (double)t->bytes_moved,
                      (double)t->evictions, (double)t->prefetch_hits,
                      (double)t->activation_peak_bytes};
    double *all = pl_runtime_rank(rt) == 0 ? calloc((size_t)world * K, sizeof *all) : NULL;
    pl_status st = pl_runtime_gather(rt, mine, K, all);
    for (int r = 0; st == PL_STATUS_OK && all && r < world; r++) {
        const double *v = all + (size_t)r * K;
        if (v[0] <= 0) continue;
        printf("memory (%s, budget %" PRId64 " MiB", x->engine.placement.policy->name, x->runtime.compute_budget_mb);
        if (world > 1) {
            printf(" per rank): rank %d", r);
            if (x->engine.pp > 1) printf(" (stage %d)", r / (x->engine.dp > 1 ? x->engine.dp : 1));
            printf(":");
        } else {
            printf("):");
        }
        printf(" peak compute %.2f MiB, peak %s %.2f MiB; per step %.2f MiB moved, %.1f "
               "evictions, %.1f prefetch hits; activations peak %.2f MiB\n", mib((int64_t)v[1]),
               lower_tier(x), mib((int64_t)v[2]), mib((int64_t)v[3]) / v[0], v[4] / v[0],
               v[5] / v[0], mib((int64_t)v[6]));
    }
    if (st != PL_STATUS_OK && pl_runtime_rank(rt) == 0)
        fprintf(stderr, "%s: the ranks' memory figures: %s\n", CLI_PROGRAM, pl_last_error());
    free(all);
    fflush(stdout);
}

void cli_exec_print_model_state(const cli_exec_options *x, const pl_engine_t *e) {
    pl_model_state_bytes b;
    if (x->engine.dp <= 1 || pl_engine_model_state_bytes(e, &b) != PL_STATUS_OK) return;
    printf("model state per rank (%s", x->engine.zero_stage ? "ZeRO-" : "DDP");
    if (x->engine.zero_stage) printf("%d", x->engine.zero_stage);
    printf("): parameters %.2f MiB%s", mib(b.params), x->engine.zero_stage == 3 ? " (shards)" : "");
    if (b.grads > 0) printf(", gradients %.2f MiB", mib(b.grads));
    else printf(", whole gradients released between steps");
    if (x->engine.zero_stage >= 2) printf(", reduced gradient shards %.2f MiB", mib(b.reduced_grads));
    printf(", optimizer states %.2f MiB", mib(b.optimizer_states));
    if (b.master_weights > 0) printf(", master weights %.2f MiB", mib(b.master_weights));
    /* What lived whole only part of the time, as the tasks ran. */
    if (b.gathered_params_peak > 0)
        printf("; at most %.2f MiB of whole parameters gathered at once",
               mib(b.gathered_params_peak));
    if (b.grads == 0 && b.gathered_grads_peak > 0)
        printf("%s at most %.2f MiB of whole gradients", b.gathered_params_peak > 0 ? "," : ";",
               mib(b.gathered_grads_peak));
    printf("\n");
    fflush(stdout);
}
