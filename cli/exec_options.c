/* The cross-checks of `pleiades train`'s run flags (cli/exec_flags.c has
 * their rows): a knob given where it would do nothing is refused, naming
 * it, and what follows from several flags (the microbatch count, the
 * placement --budget-mb implies) is completed. Then the trace outputs. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "common.h"
#include "exec_options.h"
#include "lr_options.h"

static const char *schedule_at(int i) { return pl_schedule_at(i)->name; }

/* The schedule's name in messages: "none" has no def. */
static const char *schedule_name(const pl_engine_options *e) {
    return e->schedule_def ? e->schedule_def->name : "none";
}

/* The placement knobs, refused without a placement; the first
 * N_FRACTIONS are static's, which the cpu and cuda presets fix. */
static const char *const KNOB_FLAGS[] = {
    "--shard-param-frac",  "--offload-optim-frac",          "--offload-param-frac",
    "--max-prefetch",      "--warmup-non-model-data-ratio", "--steady-cuda-cap-ratio",
    "--gpu-margin-mem-ratio", "--host-budget-mb",           "--offload-dir",
};
#define N_KNOBS ((int)(sizeof KNOB_FLAGS / sizeof *KNOB_FLAGS))
enum { N_FRACTIONS = 3 };

/* The loss scaler's knobs, refused without it. */
static const char *const SCALER_FLAGS[] = {
    "--initial-scale",  "--min-scale",       "--max-scale",  "--growth-factor",
    "--backoff-factor", "--growth-interval", "--hysteresis",
};

/* --placement/--budget-mb and the knobs that need them. */
static bool finish_placement(cli_exec_options *x) {
    pl_placement_options *p = &x->engine.placement;
    if (x->runtime.compute_budget_mb && !p->policy) {
        p->policy = pl_placement_find("auto");
        if (!p->policy) {
            cli_error("--placement: this library has no policy 'auto'");
            return false;
        }
    }
    if (!p->policy) {
        for (int k = 0; k < N_KNOBS; k++)
            if (cli_flags_given(&x->flags, KNOB_FLAGS[k])) {
                cli_error("%s: only applies with a memory placement: give "
                          "--budget-mb (and --placement)", KNOB_FLAGS[k]);
                return false;
            }
        return true;
    }
    const char *name = p->policy->name;
    if (!x->runtime.compute_budget_mb) {
        cli_error("--placement %s: a placement needs a compute-tier budget: "
                  "give --budget-mb", name);
        return false;
    }
    bool preset = strcmp(name, "cpu") == 0 || strcmp(name, "cuda") == 0;
    for (int k = 0; preset && k < N_FRACTIONS; k++)
        if (cli_flags_given(&x->flags, KNOB_FLAGS[k])) {
            cli_error("%s: --placement %s fixes the fractions; use "
                      "--placement static to choose them", KNOB_FLAGS[k], name);
            return false;
        }
    if (cli_flags_given(&x->flags, "--host-budget-mb") && x->runtime.device != PL_DEVICE_CUDA) {
        cli_error("--host-budget-mb: only applies to --device cuda (on CPU runs "
                  "the compute tier is host RAM: use --budget-mb)");
        return false;
    }
    /* The presets force their fractions themselves; written into the
     * options too, the header line prints what runs. */
    if (preset) pl_placement_by_name(name, p);
    return true;
}

/* --recompute: auto by default under a memory budget (it changes no
 * result, and keeps what fits); its knobs need selective or full. */
static bool finish_recompute(cli_exec_options *x) {
    pl_recompute_options *r = &x->engine.recompute;
    if (!cli_flags_given(&x->flags, "--recompute") && x->engine.placement.policy &&
        !x->engine.check_finite)
        r->granularity = PL_RECOMPUTE_AUTO;
    static const char *const knobs[] = {"--recompute-method", "--recompute-layers",
                                        "--recompute-ratio"};
    for (int k = 0; k < 3; k++)
        if (cli_flags_given(&x->flags, knobs[k]) &&
            r->granularity != PL_RECOMPUTE_FULL && r->granularity != PL_RECOMPUTE_SELECTIVE) {
            cli_error("%s: only applies with --recompute full or selective", knobs[k]);
            return false;
        }
    if (cli_flags_given(&x->flags, "--recompute-ratio") &&
        (cli_flags_given(&x->flags, "--recompute-layers") ||
         cli_flags_given(&x->flags, "--recompute-method"))) {
        cli_error("--recompute-ratio: give it (Colossal-AI's) or --recompute-method and "
                  "--recompute-layers (Megatron's), not both");
        return false;
    }
    if (r->granularity != PL_RECOMPUTE_NONE && x->engine.check_finite) {
        cli_error("--recompute %s: --check-finite scans every activation after the backward "
                  "pass, which recomputation drops: use one or the other",
                  r->granularity == PL_RECOMPUTE_FULL ? "full"
                  : r->granularity == PL_RECOMPUTE_SELECTIVE ? "selective" : "auto");
        return false;
    }
    return true;
}

/* The scaler's knobs need --loss-scale dynamic (or fp16, which scales),
 * and its scales an order. */
static bool finish_loss_scaler(cli_exec_options *x) {
    pl_loss_scaler_options *ls = &x->engine.loss_scaler;
    if (x->engine.precision == PL_PRECISION_FP16) ls->enabled = true;
    bool knobs = false;
    for (int k = 0; k < (int)(sizeof SCALER_FLAGS / sizeof *SCALER_FLAGS); k++)
        knobs = knobs || cli_flags_given(&x->flags, SCALER_FLAGS[k]);
    if (knobs && !ls->enabled) {
        cli_error("--initial-scale/--min-scale/--max-scale/--growth-factor/"
                  "--backoff-factor/--growth-interval/--hysteresis: only apply with "
                  "--loss-scale dynamic or --precision fp16");
        return false;
    }
    if (!ls->enabled) return true;
    if (ls->max_scale < ls->min_scale) {
        cli_error("--max-scale: %g is below --min-scale %g", ls->max_scale, ls->min_scale);
        return false;
    }
    if (ls->initial_scale < ls->min_scale || ls->initial_scale > ls->max_scale) {
        cli_error("--initial-scale: %g is outside [--min-scale, --max-scale] = [%g, %g]",
                  ls->initial_scale, ls->min_scale, ls->max_scale);
        return false;
    }
    return true;
}

/* --pp: stages over ranks, one stage per rank. */
static bool finish_pipeline_ranks(cli_exec_options *x) {
    pl_engine_options *e = &x->engine;
    if (e->pp <= 1) return true;
    if (e->schedule == PL_SCHEDULE_NONE) {
        char names[512];
        cli_error("--pp %d: stages across ranks need a pipeline --schedule (%s)", e->pp,
                  cli_join_names(names, sizeof names, NULL, pl_schedule_count(), schedule_at,
                                 " or "));
        return false;
    }
    if (cli_flags_given(&x->flags, "--stages") && e->stages != e->pp) {
        cli_error("--pp %d with --stages %d: across ranks each stage is a rank (give one "
                  "of them, or the same number)", e->pp, e->stages);
        return false;
    }
    e->stages = e->pp;
    return true;
}

/* --dp against the processes mpirun started (its environment says how
 * many; a run without mpirun has none of its variables), and the knobs
 * that need ranks. */
static bool finish_data_parallel(cli_exec_options *x, int *batch_size) {
    const pl_engine_options *e = &x->engine;
    const char *env = getenv("OMPI_COMM_WORLD_SIZE");
    int world = env ? atoi(env) : 0, ranks = e->dp * e->pp;
    if (ranks > 1 && !env) {
        cli_error("%s %d: this process was not started by mpirun; run it as "
                  "`mpirun -np %d %s train %s %d ...`", e->pp > 1 ? "--pp" : "--dp",
                  ranks, ranks, CLI_PROGRAM, e->pp > 1 ? "--pp" : "--dp", ranks);
        return false;
    }
    if (env && world != ranks) {
        if (e->pp > 1)
            cli_error("--pp %d x --dp %d = %d ranks, but mpirun started %d processes "
                      "(mpirun -np %d)", e->pp, e->dp, ranks, world, ranks);
        else
            cli_error("--dp %d, but mpirun started %d processes (give --dp %d, or mpirun "
                      "-np %d)", e->dp, world, world, e->dp);
        return false;
    }
    if (!finish_pipeline_ranks(x)) return false;
    if (e->dp > 1 && *batch_size % e->dp != 0) {
        cli_error("--batch-size: the global batch %d is not divisible by --dp %d",
                  *batch_size, e->dp);
        return false;
    }
    if (cli_flags_given(&x->flags, "--dp-outside") && (e->dp <= 1 || e->pp <= 1)) {
        cli_error("--dp-outside: only a grid of --dp D and --pp P, both > 1, has a rank order "
                  "to choose (--dp %d, --pp %d)", e->dp, e->pp);
        return false;
    }
    if (x->runtime.mpi_progress != PL_MPI_PROGRESS_AUTO && e->dp * e->pp == 1) {
        cli_error("--mpi-progress: only a run over several ranks (--dp or --pp > 1, under "
                  "mpirun) uses MPI");
        return false;
    }
    if (cli_flags_given(&x->flags, "--collective-timeout") && e->dp * e->pp == 1) {
        cli_error("--collective-timeout: only a run over several ranks (--dp or --pp > 1, "
                  "under mpirun) has collectives to wait in");
        return false;
    }
    if ((cli_flags_given(&x->flags, "--reduce-bucket-size-in-m") ||
         cli_flags_given(&x->flags, "--overlap-communication")) && e->dp == 1) {
        cli_error("--reduce-bucket-size-in-m/--overlap-communication: only apply with data "
                  "parallelism (--dp > 1, under mpirun), whose gradient reduction they tune");
        return false;
    }
    if (e->cpu_offload && (e->dp == 1 || e->zero_stage == 0)) {
        cli_error("--cpu-offload on: offloads ZeRO's optimizer-state shards; needs --dp > 1 "
                  "and --zero-stage 1, 2 or 3");
        return false;
    }
    if (e->zero_stage == 3 && e->dp > 1 && e->schedule != PL_SCHEDULE_NONE) {
        cli_error("--zero-stage 3 with --schedule %s: ZeRO-3 gathers each chunk around its "
                  "uses op by op, which a pipeline order does not follow (use --zero-stage "
                  "0-2 with a pipeline)", schedule_name(e));
        return false;
    }
    *batch_size /= e->dp; /* what each rank runs, for the checks below */
    return true;
}

bool cli_exec_finish(cli_exec_options *x, int batch_size) {
    pl_engine_options *e = &x->engine;
    /* What follows from the flags, whatever else they say. */
    x->runtime.profiling = e->record_tasks = x->trace_path || x->paje_path;
    x->runtime.distributed = e->dp * e->pp > 1;
    if (!finish_placement(x) || !finish_recompute(x) ||
        !cli_lr_finish(&e->lr_scheduler, &x->flags))
        return false;
    if (e->chunk_elems && (e->search_range_m > 0 || e->min_chunk_size_m > 0 ||
                           e->hidden_dim > 0 || e->chunk_search_n_grids > 0)) {
        cli_error("--chunk-mb fixes the chunk size: --search-range-m, --min-chunk-size-m, "
                  "--hidden-dim and --chunk-search-n-grids only steer the search without it");
        return false;
    }
    if ((cli_flags_given(&x->flags, "--master-weights") ||
         cli_flags_given(&x->flags, "--force-outputs-fp32")) &&
        e->precision == PL_PRECISION_FP32) {
        cli_error("--master-weights/--force-outputs-fp32: only apply with --precision "
                  "fp16 or bf16");
        return false;
    }
    if (cli_flags_given(&x->flags, "--norm-type") && e->max_norm <= 0.0f) {
        cli_error("--norm-type: only applies with --max-norm X > 0 (without it gradients "
                  "are not clipped and no norm is computed)");
        return false;
    }
    if (!finish_loss_scaler(x)) return false;
    if (!finish_data_parallel(x, &batch_size)) return false;
    /* A schedule that places its chunks itself (pl_schedule_def.part:
     * ZB-V's V) takes --chunks (default 2), checked by the schedule. */
    bool own_chunks = e->schedule_def && e->schedule_def->part;
    if (cli_flags_given(&x->flags, "--chunks") && e->model_chunks > 1 && !own_chunks &&
        (e->schedule == PL_SCHEDULE_NONE || e->schedule == PL_SCHEDULE_1F1B ||
         e->schedule == PL_SCHEDULE_ZB_H1)) {
        cli_error("--chunks: --schedule %s runs one model chunk per stage; several need "
                  "--schedule interleaved or zbv", schedule_name(e));
        return false;
    }
    if (e->schedule == PL_SCHEDULE_NONE) {
        if (x->microbatches || x->microbatch_size || x->n_layers_per_stage ||
            cli_flags_given(&x->flags, "--stage-balance") || e->workers_per_stage) {
            char names[512];
            cli_error("--microbatches/--microbatch-size/--layers-per-stage/--stage-balance/"
                      "--workers-per-stage need --schedule %s",
                      cli_join_names(names, sizeof names, NULL, pl_schedule_count(),
                                     schedule_at, " or "));
            return false;
        }
        /* No pipeline: the engine takes neither stages nor chunks. */
        e->stages = e->model_chunks = 0;
        return true;
    }
    if (x->n_layers_per_stage && cli_flags_given(&x->flags, "--stage-balance")) {
        cli_error("--layers-per-stage and --stage-balance: give one of them (the counts "
                  "are the cut; --stage-balance says how to find one)");
        return false;
    }
    if (x->microbatches && x->microbatch_size) {
        cli_error("--microbatches and --microbatch-size: give one of them");
        return false;
    }
    int m = x->microbatches;
    if (x->microbatch_size) {
        if (batch_size % x->microbatch_size != 0) {
            cli_error("--microbatch-size: %d does not divide --batch-size %d",
                      x->microbatch_size, batch_size);
            return false;
        }
        m = batch_size / x->microbatch_size;
    }
    if (!m) {
        /* The default: 2P (P interleaved, where Megatron's order needs a
         * multiple of P), or the next count that divides the batch, so
         * that --stages 3 with batch 16 runs (8 microbatches) instead of
         * being refused for a count the user never gave. */
        bool interleaved = e->schedule == PL_SCHEDULE_INTERLEAVED;
        int want = interleaved ? e->stages : 2 * e->stages;
        for (m = want; m <= batch_size; m += interleaved ? e->stages : 1)
            if (batch_size % m == 0) break;
        /* Fewer than 2 per stage still pipelines; the other schedules
         * take fewer microbatches than stages too (1F1B's warm-up
         * min(p−s−1, m)): then one sample per microbatch. */
        for (int k = e->stages; !interleaved && m > batch_size && k < want; k++)
            if (batch_size % k == 0) m = k;
        if (!interleaved && m > batch_size) m = batch_size;
        if (m > batch_size) {
            cli_error("--batch-size %d: interleaved with %d stages needs a microbatch "
                      "count that is a multiple of %d and divides the batch; none does "
                      "(give a batch size divisible by %d)", batch_size, e->stages,
                      e->stages, e->stages);
            return false;
        }
    }
    if (m > batch_size || batch_size % m != 0) {
        cli_error("--microbatches: %d microbatches do not divide --batch-size %d", m,
                  batch_size);
        return false;
    }
    if ((e->schedule == PL_SCHEDULE_1F1B || e->schedule == PL_SCHEDULE_ZB_H1) && !own_chunks)
        e->model_chunks = 1;
    int parts = e->stages * e->model_chunks;
    if (x->n_layers_per_stage && x->n_layers_per_stage != parts) {
        cli_error("--layers-per-stage: expected %d counts (stages x chunks), got %d",
                  parts, x->n_layers_per_stage);
        return false;
    }
    e->tiles = m;
    return true;
}

int cli_exec_check_outputs(const cli_exec_options *x) {
    int rc = cli_check_output_path("--trace", x->trace_path);
    if (rc == CLI_EXIT_OK) rc = cli_check_output_path("--paje", x->paje_path);
    return rc;
}

/* PATH for rank 0, PATH.rankR for the others (each rank has its own
 * workers and tasks: one trace per rank). */
static const char *rank_path(const char *path, int rank, char *buf, size_t size) {
    if (!path || rank == 0) return path;
    snprintf(buf, size, "%s.rank%d", path, rank);
    return buf;
}

int cli_exec_write_traces(const cli_exec_options *x, pl_engine_t *e, int rank) {
    if (!x->trace_path && !x->paje_path) return CLI_EXIT_OK;
    char json[4096], paje[4096];
    const char *jp = rank_path(x->trace_path, rank, json, sizeof json);
    const char *pp = rank_path(x->paje_path, rank, paje, sizeof paje);
    if (pl_engine_write_trace(e, jp, pp) != PL_STATUS_OK) {
        cli_error("cannot write the trace: %s", pl_last_error());
        return CLI_EXIT_FAILURE;
    }
    /* Stages across ranks: rank 0 wrote every rank's tracks in one file. */
    if (x->engine.pp > 1 && rank != 0) return CLI_EXIT_OK;
    if (jp) printf("wrote %s (open in https://ui.perfetto.dev)\n", jp);
    if (pp) printf("wrote %s (open with vite)\n", pp);
    return CLI_EXIT_OK;
}
