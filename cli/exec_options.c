/* Device, schedule, trace and memory placement options of `pleiades
 * train`. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "common.h"
#include "exec_options.h"
#include "lr_options.h"

void cli_exec_defaults(cli_exec_options *x) {
    memset(x, 0, sizeof *x);
    x->device = pl_runtime_options_default().device; /* PLEIADES_DEVICE */
    x->schedule = PL_SCHEDULE_NONE;
    x->stages = 2;
    x->chunks = 2;
    x->placement = pl_engine_options_default().placement; /* Gemini's */
    cli_lr_defaults(&x->lr, &x->lr_flags);
    x->accumulate = 1;
    x->max_norm = 0.0f;
    x->norm_type = 2.0f;
    x->loss_scaler = pl_engine_options_default().loss_scaler;
    pl_engine_options e = pl_engine_options_default();
    x->dp = e.dp;
    x->pp = 1;
    x->zero_stage = e.zero_stage;
    x->reduce_bucket_size_in_m = e.reduce_bucket_size_in_m;
    x->overlap_communication = e.overlap_communication;
    x->precision = e.precision;
    x->master_weights = e.master_weights;
    x->force_outputs_fp32 = e.force_outputs_fp32;
    x->fuse_tasks = e.fuse_tasks;
    x->collective_timeout = (float)pl_runtime_options_default().collective_timeout_s;
}

static const char *const DEVICES[] = {"cpu", "cuda", "auto"};
/* In pl_stage_balance order. */
static const char *const STAGE_BALANCES[] = {"measured", "flops"};

/* --schedule and --placement take the names of the library's registries
 * (pleiades/schedule.h, placement.h), listed from there in usage and
 * messages: a built-in added to a registry needs no edit here. */
static const char *schedule_at(int i) { return pl_schedule_at(i)->name; }
static const char *placement_at(int i) { return pl_placement_at(i)->name; }

/* `first` (when not NULL) and the n names, ", "-separated with `last`
 * before the final one (" or " in prose). */
static const char *join_names(char *buf, size_t size, const char *first, int n,
                              const char *(*name)(int), const char *last) {
    size_t used = 0;
    int total = n + (first != NULL);
    buf[0] = '\0';
    for (int i = 0; i < total && used < size; i++) {
        const char *sep = i == 0 ? "" : i == total - 1 ? last : ", ";
        int w = snprintf(buf + used, size - used, "%s%s", sep,
                         first && i == 0 ? first : name(i - (first != NULL)));
        if (w < 0) break;
        used += (size_t)w;
    }
    return buf;
}

/* The schedule's name in messages: "none" has no def. */
static const char *schedule_name(const cli_exec_options *x) {
    return x->schedule_def ? x->schedule_def->name : "none";
}

/* --schedule: "none" or a registered schedule, which reaches the engine
 * as its def. `schedule` only picks the CLI's defaults: interleaved's
 * (--chunks V, microbatches a multiple of P), or else 1F1B's (one chunk,
 * 2P microbatches), which every other schedule takes. */
static bool parse_schedule(cli_exec_options *x, const char *flag, const char *arg) {
    x->schedule = PL_SCHEDULE_NONE;
    x->schedule_def = NULL;
    if (strcmp(arg, "none") == 0) return true;
    x->schedule_def = pl_schedule_find(arg);
    if (!x->schedule_def) {
        char names[512];
        cli_error("%s: expected one of %s, got '%s'", flag,
                  join_names(names, sizeof names, "none", pl_schedule_count(), schedule_at,
                             ", "), arg);
        return false;
    }
    x->schedule = x->schedule_def == &pl_schedule_interleaved ? PL_SCHEDULE_INTERLEAVED
                                                              : PL_SCHEDULE_1F1B;
    return true;
}

/* The placement knobs, by bit in placement_flags, for messages. */
enum {
    KNOB_SHARD = 1u << 0,
    KNOB_OFFLOAD_OPTIM = 1u << 1,
    KNOB_OFFLOAD_PARAM = 1u << 2,
    KNOB_MAX_PREFETCH = 1u << 3,
    KNOB_WARMUP = 1u << 4,
    KNOB_STEADY = 1u << 5,
    KNOB_MARGIN = 1u << 6,
    KNOB_HOST_BUDGET = 1u << 7,
    KNOB_OFFLOAD_DIR = 1u << 8,
};
static const char *const KNOB_FLAGS[] = {
    "--shard-param-frac",  "--offload-optim-frac",          "--offload-param-frac",
    "--max-prefetch",      "--warmup-non-model-data-ratio", "--steady-cuda-cap-ratio",
    "--gpu-margin-mem-ratio", "--host-budget-mb",           "--offload-dir",
};
#define N_KNOBS ((int)(sizeof KNOB_FLAGS / sizeof *KNOB_FLAGS))
#define KNOB_FRACTIONS (KNOB_SHARD | KNOB_OFFLOAD_OPTIM | KNOB_OFFLOAD_PARAM)

static const cli_real_range UNIT_CLOSED = {0, 1, false, false};
static const cli_real_range UNIT_HALF_OPEN = {0, 1, false, true};  /* [0, 1) */
static const cli_real_range UNIT_LEFT_OPEN = {0, 1, true, false};  /* (0, 1] */
/* --chunk-mb: up to 16 GiB of floats per chunk (a typo guard). */
static const cli_real_range CHUNK_MB = {0, 16384, true, false};
/* --search-range-m, --min-chunk-size-m: Mi elements, up to 2^31. */
static const cli_real_range SEARCH_M = {0, 2048, true, false};
static const cli_real_range MAX_NORM = {0, 1e9, false, false};
static const char *const NORM_TYPES[] = {"2", "inf"};
static const char *const ON_OFF[] = {"on", "off"};
static const char *const LOSS_SCALES[] = {"dynamic"};
static const char *const PRECISIONS[] = {"fp32", "fp16", "bf16"};
static const char *const MPI_PROGRESS[] = {"auto", "thread", "worker"}; /* pl_mpi_progress */
/* The scaler's scales: the seed is a float (engine.h: <= 2^127). */
static const cli_real_range SCALE = {0, 0x1p127, true, false};
static const cli_real_range GROWTH = {1, 1e9, true, false};
static const cli_real_range BACKOFF = {0, 1, true, true};
/* --collective-timeout: seconds, up to a year (a typo guard). */
static const cli_real_range COLLECTIVE_TIMEOUT = {0, 31536000, false, false};

/* A scaler knob in `range` into *out (as a double; parsed as a float). */
static bool parse_scaler_real(cli_exec_options *x, const char *flag, const char *arg,
                              cli_real_range range, double *out) {
    float v;
    x->loss_scaler_knobs = true;
    if (!cli_parse_real(flag, arg, range, &v)) return false;
    *out = v;
    return true;
}
#define MAX_BUDGET_MB (INT64_C(1) << 30) /* 1 PiB: a typo guard */

static bool parse_knob(cli_exec_options *x, unsigned bit, const char *flag,
                       const char *arg, cli_real_range range, float *out) {
    x->placement_flags |= bit;
    return cli_parse_real(flag, arg, range, out);
}

int cli_exec_parse(cli_exec_options *x, const char *name, const char *flag,
                   const char *arg) {
    int64_t v;
    int i;
    if (strcmp(name, "device") == 0) {
        if ((i = cli_parse_choice(flag, arg, DEVICES, 3)) < 0) return 0;
        x->device = (pl_device)i;
    } else if (strcmp(name, "cuda-workers") == 0) {
        if (!cli_parse_int(flag, arg, 0, 64, &v)) return 0;
        x->cuda_workers = (int)v;
    } else if (strcmp(name, "schedule") == 0) {
        if (!parse_schedule(x, flag, arg)) return 0;
    } else if (strcmp(name, "stages") == 0) {
        if (!cli_parse_int(flag, arg, 1, 16, &v)) return 0;
        x->stages = (int)v;
        x->stages_given = true;
    } else if (strcmp(name, "workers-per-stage") == 0) {
        if (!cli_parse_int(flag, arg, 0, 64, &v)) return 0;
        x->workers_per_stage = (int)v;
    } else if (strcmp(name, "chunks") == 0) {
        if (!cli_parse_int(flag, arg, 1, 16, &v)) return 0;
        x->chunks = (int)v;
        x->chunks_given = true;
    } else if (strcmp(name, "microbatches") == 0) {
        if (!cli_parse_int(flag, arg, 1, 64, &v)) return 0;
        x->microbatches = (int)v;
    } else if (strcmp(name, "microbatch-size") == 0) {
        if (!cli_parse_int(flag, arg, 1, 1 << 20, &v)) return 0;
        x->microbatch_size = (int)v;
    } else if (strcmp(name, "stage-balance") == 0) {
        if ((i = cli_parse_choice(flag, arg, STAGE_BALANCES, 2)) < 0) return 0;
        x->stage_balance = (pl_stage_balance)i;
        x->stage_balance_given = true;
    } else if (strcmp(name, "layers-per-stage") == 0) {
        int64_t counts[CLI_MAX_PARTS];
        int n = 0;
        if (!cli_parse_int_list(flag, arg, 1, 1 << 16, counts, CLI_MAX_PARTS, &n))
            return 0;
        for (int k = 0; k < n; k++) x->layers_per_stage[k] = (int)counts[k];
        x->n_layers_per_stage = n;
    } else if (strcmp(name, "trace") == 0) {
        if (!*arg) return cli_error("%s: expected a file name, got ''", flag), 0;
        x->trace_path = arg;
    } else if (strcmp(name, "paje") == 0) {
        if (!*arg) return cli_error("%s: expected a file name, got ''", flag), 0;
        x->paje_path = arg;
    } else if (strcmp(name, "placement") == 0) {
        const pl_placement_policy *policy = pl_placement_find(arg);
        if (!policy) {
            char names[512];
            cli_error("%s: expected one of %s, got '%s'", flag,
                      join_names(names, sizeof names, NULL, pl_placement_count(),
                                 placement_at, ", "), arg);
            return 0;
        }
        x->placement_name = policy->name;
    } else if (strcmp(name, "budget-mb") == 0) {
        if (!cli_parse_int(flag, arg, 1, MAX_BUDGET_MB, &v)) return 0;
        x->budget_mb = v;
    } else if (strcmp(name, "host-budget-mb") == 0) {
        x->placement_flags |= KNOB_HOST_BUDGET;
        if (!cli_parse_int(flag, arg, 1, MAX_BUDGET_MB, &v)) return 0;
        x->host_budget_mb = v;
    } else if (strcmp(name, "offload-dir") == 0) {
        x->placement_flags |= KNOB_OFFLOAD_DIR;
        if (!*arg) return cli_error("%s: expected a directory, got ''", flag), 0;
        x->offload_dir = arg;
    } else if (strcmp(name, "chunk-mb") == 0) {
        float mb;
        if (!cli_parse_real(flag, arg, CHUNK_MB, &mb)) return 0;
        double elems = floor((double)mb * 1048576.0 / sizeof(float));
        if (elems < 1) {
            cli_error("%s: %s MiB is less than one float", flag, arg);
            return 0;
        }
        x->chunk_elems = (size_t)elems;
    } else if (strcmp(name, "search-range-m") == 0 || strcmp(name, "min-chunk-size-m") == 0) {
        float m;
        if (!cli_parse_real(flag, arg, SEARCH_M, &m)) return 0;
        *(name[0] == 's' ? &x->search_range_m : &x->min_chunk_size_m) = m;
    } else if (strcmp(name, "hidden-dim") == 0) {
        if (!cli_parse_int(flag, arg, 1, INT32_MAX, &v)) return 0;
        x->hidden_dim = v;
    } else if (strcmp(name, "chunk-search-n-grids") == 0) {
        if (!cli_parse_int(flag, arg, 1, 1 << 20, &v)) return 0;
        x->chunk_search_n_grids = (int)v;
    } else if (strcmp(name, "shard-param-frac") == 0) {
        return parse_knob(x, KNOB_SHARD, flag, arg, UNIT_CLOSED,
                          &x->placement.shard_param_frac);
    } else if (strcmp(name, "offload-optim-frac") == 0) {
        return parse_knob(x, KNOB_OFFLOAD_OPTIM, flag, arg, UNIT_CLOSED,
                          &x->placement.offload_optim_frac);
    } else if (strcmp(name, "offload-param-frac") == 0) {
        return parse_knob(x, KNOB_OFFLOAD_PARAM, flag, arg, UNIT_CLOSED,
                          &x->placement.offload_param_frac);
    } else if (strcmp(name, "warmup-non-model-data-ratio") == 0) {
        return parse_knob(x, KNOB_WARMUP, flag, arg, UNIT_HALF_OPEN,
                          &x->placement.warmup_non_model_data_ratio);
    } else if (strcmp(name, "steady-cuda-cap-ratio") == 0) {
        return parse_knob(x, KNOB_STEADY, flag, arg, UNIT_LEFT_OPEN,
                          &x->placement.steady_cuda_cap_ratio);
    } else if (strcmp(name, "gpu-margin-mem-ratio") == 0) {
        return parse_knob(x, KNOB_MARGIN, flag, arg, UNIT_CLOSED,
                          &x->placement.gpu_margin_mem_ratio);
    } else if (strcmp(name, "accumulate") == 0) {
        if (!cli_parse_int(flag, arg, 1, 1 << 20, &v)) return 0;
        x->accumulate = (int)v;
    } else if (strcmp(name, "max-norm") == 0) {
        if (!cli_parse_real(flag, arg, MAX_NORM, &x->max_norm)) return 0;
    } else if (strcmp(name, "norm-type") == 0) {
        if ((i = cli_parse_choice(flag, arg, NORM_TYPES, 2)) < 0) return 0;
        x->norm_type = i == 0 ? 2.0f : INFINITY;
        x->norm_type_given = true;
    } else if (strcmp(name, "loss-scale") == 0) {
        if (cli_parse_choice(flag, arg, LOSS_SCALES, 1) < 0) return 0;
        x->loss_scaler.enabled = true;
    } else if (strcmp(name, "initial-scale") == 0) {
        return parse_scaler_real(x, flag, arg, SCALE, &x->loss_scaler.initial_scale);
    } else if (strcmp(name, "min-scale") == 0) {
        return parse_scaler_real(x, flag, arg, SCALE, &x->loss_scaler.min_scale);
    } else if (strcmp(name, "max-scale") == 0) {
        return parse_scaler_real(x, flag, arg, SCALE, &x->loss_scaler.max_scale);
    } else if (strcmp(name, "growth-factor") == 0) {
        return parse_scaler_real(x, flag, arg, GROWTH, &x->loss_scaler.growth_factor);
    } else if (strcmp(name, "backoff-factor") == 0) {
        return parse_scaler_real(x, flag, arg, BACKOFF, &x->loss_scaler.backoff_factor);
    } else if (strcmp(name, "growth-interval") == 0) {
        x->loss_scaler_knobs = true;
        if (!cli_parse_int(flag, arg, 1, INT32_MAX, &v)) return 0;
        x->loss_scaler.growth_interval = (int)v;
    } else if (strcmp(name, "hysteresis") == 0) {
        x->loss_scaler_knobs = true;
        if (!cli_parse_int(flag, arg, 1, INT32_MAX, &v)) return 0;
        x->loss_scaler.hysteresis = (int)v;
    } else if (strcmp(name, "dp") == 0) {
        if (!cli_parse_int(flag, arg, 1, 65536, &v)) return 0;
        x->dp = (int)v;
    } else if (strcmp(name, "pp") == 0) {
        if (!cli_parse_int(flag, arg, 1, 16, &v)) return 0;
        x->pp = (int)v;
    } else if (strcmp(name, "mpi-progress") == 0) {
        if ((i = cli_parse_choice(flag, arg, MPI_PROGRESS, 3)) < 0) return 0;
        x->mpi_progress = (pl_mpi_progress)i;
    } else if (strcmp(name, "collective-timeout") == 0) {
        if (!cli_parse_real(flag, arg, COLLECTIVE_TIMEOUT, &x->collective_timeout)) return 0;
        x->collective_timeout_given = true;
    } else if (strcmp(name, "zero-stage") == 0) {
        if (!cli_parse_int(flag, arg, 0, 3, &v)) return 0;
        x->zero_stage = (int)v;
    } else if (strcmp(name, "reduce-bucket-size-in-m") == 0) {
        if (!cli_parse_int(flag, arg, 0, 65536, &v)) return 0;
        x->reduce_bucket_size_in_m = (int)v;
        x->reduction_knobs = true;
    } else if (strcmp(name, "precision") == 0) {
        if ((i = cli_parse_choice(flag, arg, PRECISIONS, 3)) < 0) return 0;
        x->precision = i == 0 ? PL_PRECISION_FP32 : i == 1 ? PL_PRECISION_FP16
                                                           : PL_PRECISION_BF16;
    } else if (strcmp(name, "master-weights") == 0) {
        if ((i = cli_parse_choice(flag, arg, ON_OFF, 2)) < 0) return 0;
        x->master_weights = i == 0;
        x->precision_knobs = true;
    } else if (strcmp(name, "check-finite") == 0) {
        x->check_finite = true;
    } else if (strcmp(name, "fuse-tasks") == 0) {
        if ((i = cli_parse_choice(flag, arg, ON_OFF, 2)) < 0) return 0;
        x->fuse_tasks = i == 0;
    } else if (strcmp(name, "force-outputs-fp32") == 0) {
        if ((i = cli_parse_choice(flag, arg, ON_OFF, 2)) < 0) return 0;
        x->force_outputs_fp32 = i == 0;
        x->precision_knobs = true;
    } else if (strcmp(name, "cpu-offload") == 0) {
        if ((i = cli_parse_choice(flag, arg, ON_OFF, 2)) < 0) return 0;
        x->cpu_offload = i == 0;
    } else if (strcmp(name, "overlap-communication") == 0) {
        if ((i = cli_parse_choice(flag, arg, ON_OFF, 2)) < 0) return 0;
        x->overlap_communication = i == 0;
        x->reduction_knobs = true;
    } else if (strcmp(name, "max-prefetch") == 0) {
        x->placement_flags |= KNOB_MAX_PREFETCH;
        if (!cli_parse_int(flag, arg, 0, 1 << 20, &v)) return 0;
        x->placement.max_prefetch = (int)v;
    } else {
        return cli_lr_parse(&x->lr, &x->lr_flags, name, flag, arg);
    }
    return 1;
}

/* --placement/--budget-mb and the knobs that need them. */
static bool finish_placement(cli_exec_options *x) {
    if (x->budget_mb && !x->placement_name) x->placement_name = "auto";
    if (!x->placement_name) {
        for (int k = 0; k < N_KNOBS; k++)
            if (x->placement_flags & (1u << k)) {
                cli_error("%s: only applies with a memory placement: give "
                          "--budget-mb (and --placement)", KNOB_FLAGS[k]);
                return false;
            }
        return true;
    }
    if (!x->budget_mb) {
        cli_error("--placement %s: a placement needs a compute-tier budget: "
                  "give --budget-mb", x->placement_name);
        return false;
    }
    bool preset = strcmp(x->placement_name, "cpu") == 0 ||
                  strcmp(x->placement_name, "cuda") == 0;
    if (preset && (x->placement_flags & KNOB_FRACTIONS)) {
        for (int k = 0; k < N_KNOBS; k++)
            if (x->placement_flags & KNOB_FRACTIONS & (1u << k)) {
                cli_error("%s: --placement %s fixes the fractions; use "
                          "--placement static to choose them", KNOB_FLAGS[k],
                          x->placement_name);
                return false;
            }
    }
    if ((x->placement_flags & KNOB_HOST_BUDGET) && x->device != PL_DEVICE_CUDA) {
        cli_error("--host-budget-mb: only applies to --device cuda (on CPU runs "
                  "the compute tier is host RAM: use --budget-mb)");
        return false;
    }
    x->placement.policy = pl_placement_find(x->placement_name);
    /* The presets force their fractions themselves; written into the
     * options too, the header line prints what runs. */
    if (preset) pl_placement_by_name(x->placement_name, &x->placement);
    if (!x->placement.policy) {
        cli_error("--placement: this library has no policy '%s'", x->placement_name);
        return false;
    }
    return true;
}

/* The scaler's knobs need --loss-scale dynamic (or fp16, which scales),
 * and its scales an order. */
static bool finish_loss_scaler(cli_exec_options *x) {
    pl_loss_scaler_options *ls = &x->loss_scaler;
    if (x->precision == PL_PRECISION_FP16) ls->enabled = true;
    if (x->loss_scaler_knobs && !ls->enabled) {
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

/* --dp against the processes mpirun started (its environment says how
 * many; a run without mpirun has none of its variables). */
/* --pp: stages over ranks, one stage per rank. */
static bool finish_pipeline_ranks(cli_exec_options *x) {
    if (x->pp <= 1) return true;
    if (x->schedule == PL_SCHEDULE_NONE) {
        char names[512];
        cli_error("--pp %d: stages across ranks need a pipeline --schedule (%s)", x->pp,
                  join_names(names, sizeof names, NULL, pl_schedule_count(), schedule_at,
                             " or "));
        return false;
    }
    if (x->stages_given && x->stages != x->pp) {
        cli_error("--pp %d with --stages %d: across ranks each stage is a rank (give one "
                  "of them, or the same number)", x->pp, x->stages);
        return false;
    }
    x->stages = x->pp;
    return true;
}

static bool finish_data_parallel(cli_exec_options *x, int *batch_size) {
    const char *env = getenv("OMPI_COMM_WORLD_SIZE");
    int world = env ? atoi(env) : 0, ranks = x->dp * x->pp;
    if (ranks > 1 && !env) {
        cli_error("%s %d: this process was not started by mpirun; run it as "
                  "`mpirun -np %d %s train %s %d ...`", x->pp > 1 ? "--pp" : "--dp",
                  ranks, ranks, CLI_PROGRAM, x->pp > 1 ? "--pp" : "--dp", ranks);
        return false;
    }
    if (env && world != ranks) {
        if (x->pp > 1)
            cli_error("--pp %d x --dp %d = %d ranks, but mpirun started %d processes "
                      "(mpirun -np %d)", x->pp, x->dp, ranks, world, ranks);
        else
            cli_error("--dp %d, but mpirun started %d processes (give --dp %d, or mpirun "
                      "-np %d)", x->dp, world, world, x->dp);
        return false;
    }
    if (!finish_pipeline_ranks(x)) return false;
    if (x->dp > 1 && *batch_size % x->dp != 0) {
        cli_error("--batch-size: the global batch %d is not divisible by --dp %d",
                  *batch_size, x->dp);
        return false;
    }
    if (x->mpi_progress != PL_MPI_PROGRESS_AUTO && x->dp * x->pp == 1) {
        cli_error("--mpi-progress: only a run over several ranks (--dp or --pp > 1, under "
                  "mpirun) uses MPI");
        return false;
    }
    if (x->collective_timeout_given && x->dp * x->pp == 1) {
        cli_error("--collective-timeout: only a run over several ranks (--dp or --pp > 1, "
                  "under mpirun) has collectives to wait in");
        return false;
    }
    if (x->reduction_knobs && x->dp == 1) {
        cli_error("--reduce-bucket-size-in-m/--overlap-communication: only apply with data "
                  "parallelism (--dp > 1, under mpirun), whose gradient reduction they tune");
        return false;
    }
    if (x->cpu_offload && (x->dp == 1 || x->zero_stage == 0)) {
        cli_error("--cpu-offload on: offloads ZeRO's optimizer-state shards; needs --dp > 1 "
                  "and --zero-stage 1, 2 or 3");
        return false;
    }
    if (x->zero_stage == 3 && x->dp > 1 && x->schedule != PL_SCHEDULE_NONE) {
        cli_error("--zero-stage 3 with --schedule %s: ZeRO-3 gathers each chunk around its "
                  "uses op by op, which a pipeline order does not follow (use --zero-stage "
                  "0-2 with a pipeline)", schedule_name(x));
        return false;
    }
    *batch_size /= x->dp; /* what each rank runs, for the checks below */
    return true;
}

bool cli_exec_finish(cli_exec_options *x, int batch_size, int *tiles) {
    if (!finish_placement(x) || !cli_lr_finish(&x->lr, x->lr_flags)) return false;
    if (x->chunk_elems && (x->search_range_m > 0 || x->min_chunk_size_m > 0 ||
                           x->hidden_dim > 0 || x->chunk_search_n_grids > 0)) {
        cli_error("--chunk-mb fixes the chunk size: --search-range-m, --min-chunk-size-m, "
                  "--hidden-dim and --chunk-search-n-grids only steer the search without it");
        return false;
    }
    if (x->precision_knobs && x->precision == PL_PRECISION_FP32) {
        cli_error("--master-weights/--force-outputs-fp32: only apply with --precision "
                  "fp16 or bf16");
        return false;
    }
    if (x->norm_type_given && x->max_norm <= 0.0f) {
        cli_error("--norm-type: only applies with --max-norm X > 0 (without it gradients "
                  "are not clipped and no norm is computed)");
        return false;
    }
    if (!finish_loss_scaler(x)) return false;
    if (!finish_data_parallel(x, &batch_size)) return false;
    if (x->chunks_given && x->chunks > 1 &&
        (x->schedule == PL_SCHEDULE_NONE || x->schedule == PL_SCHEDULE_1F1B ||
         x->schedule == PL_SCHEDULE_ZB_H1)) {
        cli_error("--chunks: --schedule %s runs one model chunk per stage; several need "
                  "--schedule interleaved", schedule_name(x));
        return false;
    }
    if (x->schedule == PL_SCHEDULE_NONE) {
        if (x->microbatches || x->microbatch_size || x->n_layers_per_stage ||
            x->stage_balance_given || x->workers_per_stage) {
            char names[512];
            cli_error("--microbatches/--microbatch-size/--layers-per-stage/--stage-balance/"
                      "--workers-per-stage need --schedule %s",
                      join_names(names, sizeof names, NULL, pl_schedule_count(),
                                 schedule_at, " or "));
            return false;
        }
        return true;
    }
    if (x->n_layers_per_stage && x->stage_balance_given) {
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
        bool interleaved = x->schedule == PL_SCHEDULE_INTERLEAVED;
        int want = interleaved ? x->stages : 2 * x->stages;
        for (m = want; m <= batch_size; m += interleaved ? x->stages : 1)
            if (batch_size % m == 0) break;
        /* Fewer than 2 per stage still pipelines (1F1B and ZB-H1 need p). */
        for (int k = x->stages; !interleaved && m > batch_size && k < want; k++)
            if (batch_size % k == 0) m = k;
        if (m > batch_size) {
            if (interleaved)
                cli_error("--batch-size %d: interleaved with %d stages needs a microbatch "
                          "count that is a multiple of %d and divides the batch; none does "
                          "(give a batch size divisible by %d)", batch_size, x->stages,
                          x->stages, x->stages);
            else
                cli_error("--batch-size %d: %d stages need at least %d microbatches "
                          "(one per stage) dividing the batch; none does (give a larger "
                          "batch)", batch_size, x->stages, x->stages);
            return false;
        }
    }
    if (m > batch_size || batch_size % m != 0) {
        cli_error("--microbatches: %d microbatches do not divide --batch-size %d", m,
                  batch_size);
        return false;
    }
    if (x->schedule == PL_SCHEDULE_1F1B || x->schedule == PL_SCHEDULE_ZB_H1) x->chunks = 1;
    int parts = x->stages * x->chunks;
    if (x->n_layers_per_stage && x->n_layers_per_stage != parts) {
        cli_error("--layers-per-stage: expected %d counts (stages x chunks), got %d",
                  parts, x->n_layers_per_stage);
        return false;
    }
    *tiles = m;
    return true;
}

void cli_exec_runtime(const cli_exec_options *x, pl_runtime_options *o) {
    o->device = x->device;
    o->cuda_workers = x->cuda_workers;
    o->profiling = x->trace_path || x->paje_path;
    o->compute_budget_mb = x->budget_mb;
    o->host_budget_mb = x->host_budget_mb;
    o->offload_dir = x->offload_dir;
    o->distributed = x->dp * x->pp > 1;
    o->mpi_progress = x->mpi_progress;
    o->collective_timeout_s = x->collective_timeout;
}

void cli_exec_engine(const cli_exec_options *x, int64_t total_steps,
                     pl_engine_options *o) {
    o->accumulate_size = x->accumulate;
    o->max_norm = x->max_norm;
    o->norm_type = x->norm_type;
    o->loss_scaler = x->loss_scaler;
    o->precision = x->precision;
    o->master_weights = x->master_weights;
    o->force_outputs_fp32 = x->force_outputs_fp32;
    o->fuse_tasks = x->fuse_tasks;
    o->check_finite = x->check_finite;
    o->workers_per_stage = x->workers_per_stage;
    o->lr_scheduler = x->lr;
    if (o->lr_scheduler.total_steps == 0) o->lr_scheduler.total_steps = total_steps;
    o->schedule = x->schedule;
    o->schedule_def = x->schedule_def;
    o->stages = x->schedule == PL_SCHEDULE_NONE ? 0 : x->stages;
    o->model_chunks = x->schedule == PL_SCHEDULE_NONE ? 0 : x->chunks;
    o->layers_per_stage = x->n_layers_per_stage ? x->layers_per_stage : NULL;
    o->stage_balance = x->stage_balance;
    o->record_tasks = x->trace_path || x->paje_path;
    o->chunk_elems = x->chunk_elems;
    o->search_range_m = x->search_range_m;
    o->min_chunk_size_m = x->min_chunk_size_m;
    o->hidden_dim = x->hidden_dim;
    o->chunk_search_n_grids = x->chunk_search_n_grids;
    if (cli_exec_placement_active(x)) o->placement = x->placement;
    o->dp = x->dp;
    o->pp = x->pp;
    o->zero_stage = x->zero_stage;
    o->reduce_bucket_size_in_m = x->reduce_bucket_size_in_m;
    o->overlap_communication = x->overlap_communication;
    o->cpu_offload = x->cpu_offload;
}

/* Who polls MPI for StarPU-MPI (pl_mpi_progress), on runs over ranks. */
static void print_mpi_progress(const pl_runtime_t *rt) {
    if (pl_runtime_world_size(rt) > 1)
        printf("; MPI progressed %s", pl_runtime_mpi_progress(rt) == PL_MPI_PROGRESS_WORKER
                                          ? "between worker 0's tasks"
                                          : "by StarPU-MPI's own thread");
}

void cli_exec_print_data_parallel(const cli_exec_options *x, const pl_runtime_t *rt) {
    if (x->pp > 1 && x->dp <= 1)
        printf("; pipeline stages over %d ranks (grid dp 1 x pp %d: rank s runs stage s)",
               x->pp, x->pp);
    if (x->dp <= 1) {
        /* As LowLevelZeroPlugin on one rank: the shards are the whole
         * state. Said, so that the flag is not silently dropped. */
        if (x->zero_stage)
            printf("; --zero-stage %d over 1 data-parallel rank: nothing to shard, each rank "
                   "keeps its whole state", x->zero_stage);
        print_mpi_progress(rt);
        return;
    }
    printf(" per rank; data parallel over %d ranks (%s", x->dp,
           x->zero_stage ? "ZeRO-" : "DDP");
    if (x->zero_stage) printf("%d", x->zero_stage);
    if (x->zero_stage == 3) /* Gemini's per-chunk reduction */
        printf(", chunks gathered around their uses and reduced one by one");
    else if (x->overlap_communication)
        printf(", buckets of %d M elements or 1/8 of the model, the smaller",
               x->reduce_bucket_size_in_m);
    else
        printf(", buckets of %d M elements", x->reduce_bucket_size_in_m);
    printf(", overlap %s)", x->overlap_communication ? "on" : "off");
    /* Hybrid: stage-major ranks, so a stage's data-parallel group is a
     * run of consecutive ranks. */
    if (x->pp > 1)
        printf("; grid dp %d x pp %d over %d ranks (rank r runs stage r / %d of replica "
               "r mod %d)", x->dp, x->pp, x->dp * x->pp, x->dp, x->dp);
    print_mpi_progress(rt);
}

/* " | stage s: blocks a-b[, c-d]" for each stage (its chunks' parts
 * s + c·P in chunk order), with each stage's time when `us` is given. */
static void print_stages(const cli_exec_options *x, pl_engine_t *e, int n_blocks,
                         const double *us) {
    int parts[4096];
    if (n_blocks > 4096 || pl_engine_block_parts(e, parts) != x->stages * x->chunks) return;
    for (int s = 0; s < x->stages; s++) {
        printf("%sstage %d: blocks", s ? " | " : "", s);
        double stage_us = 0;
        for (int c = 0; c < x->chunks; c++) {
            int k = s + c * x->stages, first = -1, last = -1;
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

void cli_exec_print_pipeline(const cli_exec_options *x, pl_engine_t *e, int n_blocks,
                             int microbatches) {
    if (x->schedule == PL_SCHEDULE_NONE) return;
    printf("pipeline %s: %d stages x %d chunk%s, %d microbatches; ", schedule_name(x),
           x->stages, x->chunks, x->chunks > 1 ? "s" : "", microbatches);
    /* Workers per stage (this rank's, for its own stage across ranks). */
    int lo = 0, hi = 0;
    for (int s = 0; s < x->stages; s++) {
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
    bool recut = x->stage_balance == PL_STAGE_BALANCE_MEASURED &&
                 n_blocks > x->stages * x->chunks;
    printf(" (%s)\n", x->n_layers_per_stage ? "--layers-per-stage"
                      : recut ? "cut on FLOPs; recut on the times measured in training step 2"
                              : "cut on FLOPs");
    fflush(stdout);
}

bool cli_exec_print_stage_times(const cli_exec_options *x, pl_engine_t *e, bool print) {
    double us[4096];
    int nb = x->schedule == PL_SCHEDULE_NONE ? 0 : pl_engine_block_times(e, NULL);
    if (nb <= 0 || nb > 4096) return false;
    if (!print) return true;
    pl_engine_block_times(e, us);
    printf("pipeline stages cut on the block times of training step 2: ");
    print_stages(x, e, nb, us);
    printf("\n");
    fflush(stdout);
    return true;
}

bool cli_exec_placement_active(const cli_exec_options *x) {
    return x->placement.policy != NULL;
}

static double mib(int64_t bytes) { return (double)bytes / 1048576.0; }

/* The tier below the compute tier, as pl_iteration_memory counts it. */
static const char *lower_tier(const cli_exec_options *x) {
    return x->device == PL_DEVICE_CUDA ? "host" : "disk";
}

void cli_exec_print_precision(const cli_exec_options *x, const pl_engine_t *e) {
    pl_model_state_bytes b;
    if (x->precision == PL_PRECISION_FP32 || pl_engine_model_state_bytes(e, &b)) return;
    const char *name = x->precision == PL_PRECISION_BF16 ? "bf16" : "fp16";
    double mib = 1024.0 * 1024.0;
    printf("precision %s: parameters, gradients and activations in 16 bits (kernels "
           "accumulate in fp32%s); %s; model state %.2f MiB (parameters %.2f, gradients %.2f, "
           "master weights %.2f, optimizer states %.2f)",
           name,
           x->precision == PL_PRECISION_BF16
               ? "; linear layers and attention multiply bf16 values where the CPU has "
                 "AVX512-BF16"
               : "",
           x->master_weights ? "fp32 master weights" : "no master weights",
           (double)(b.params + b.grads + b.master_weights + b.optimizer_states) / mib,
           (double)b.params / mib, (double)b.grads / mib, (double)b.master_weights / mib,
           (double)b.optimizer_states / mib);
    if (x->loss_scaler.enabled)
        printf("; dynamic loss scaling from %g", x->loss_scaler.initial_scale);
    printf("\n");
    fflush(stdout);
}

void cli_exec_print_placement(const cli_exec_options *x, pl_engine_t *e) {
    if (!cli_exec_placement_active(x)) return;
    int n = pl_engine_num_chunks(e);
    const char *each = x->dp > 1 || x->pp > 1 ? " per rank" : "";
    printf("placement %s: compute-tier budget %" PRId64 " MiB%s", x->placement_name,
           x->budget_mb, each);
    if (x->host_budget_mb)
        printf(", host budget %" PRId64 " MiB%s", x->host_budget_mb, each);
    int64_t floats = 0;
    for (int c = 0; c < n; c++) floats += (int64_t)pl_engine_chunk_elems(e, c);
    int value_bytes = x->precision == PL_PRECISION_FP32 ? 4 : 2;
    printf(", offload %s", x->offload_dir ? x->offload_dir : "none");
    /* The disk tier against the plan (pl_engine_new refused it if short). */
    pl_offload_space sp;
    if (x->offload_dir && pl_engine_offload_space(e, &sp) == PL_STATUS_OK)
        printf(" (the plan needs up to %.1f MiB there; %.1f MiB free, of which the disk tier "
               "may use %.1f MiB)", mib(sp.need), mib(sp.free_bytes), mib(sp.capacity));
    printf("; parameters in %d chunk%s (%.3g MiB of %s values)", n, n == 1 ? "" : "s",
           mib(floats * value_bytes), value_bytes == 4 ? "fp32" : "16-bit");
    if (strcmp(x->placement_name, "static") == 0 || strcmp(x->placement_name, "cpu") == 0 ||
        strcmp(x->placement_name, "cuda") == 0)
        printf(" (shard_param_frac %g, offload_optim_frac %g, offload_param_frac %g)",
               (double)x->placement.shard_param_frac, (double)x->placement.offload_optim_frac,
               (double)x->placement.offload_param_frac);
    else if (strcmp(x->placement_name, "auto") == 0)
        printf(" (max_prefetch %d, steady_cuda_cap_ratio %g)", x->placement.max_prefetch,
               (double)x->placement.steady_cuda_cap_ratio);
    printf("\n");
    fflush(stdout);
}

void cli_exec_print_memory(const cli_exec_options *x, const cli_exec_memory *t,
                           const pl_runtime_t *rt) {
    if (!cli_exec_placement_active(x)) return;
    /* Every rank has the budget and its own figures (a pipeline's stages
     * hold different chunks): rank 0 prints each rank's. */
    enum { K = 6 };
    int world = pl_runtime_world_size(rt) > 1 ? pl_runtime_world_size(rt) : 1;
    double mine[K] = {(double)t->steps, (double)t->peak_compute_bytes,
                      (double)t->peak_host_bytes, (double)t->bytes_moved,
                      (double)t->evictions, (double)t->prefetch_hits};
    double *all = pl_runtime_rank(rt) == 0 ? calloc((size_t)world * K, sizeof *all) : NULL;
    pl_status st = pl_runtime_gather(rt, mine, K, all);
    for (int r = 0; st == PL_STATUS_OK && all && r < world; r++) {
        const double *v = all + (size_t)r * K;
        if (v[0] <= 0) continue;
        printf("memory (%s, budget %" PRId64 " MiB", x->placement_name, x->budget_mb);
        if (world > 1) {
            printf(" per rank): rank %d", r);
            if (x->pp > 1) printf(" (stage %d)", r / (x->dp > 1 ? x->dp : 1));
            printf(":");
        } else {
            printf("):");
        }
        printf(" peak compute %.2f MiB, peak %s %.2f MiB; per step %.2f MiB moved, %.1f "
               "evictions, %.1f prefetch hits\n", mib((int64_t)v[1]), lower_tier(x),
               mib((int64_t)v[2]), mib((int64_t)v[3]) / v[0], v[4] / v[0], v[5] / v[0]);
    }
    if (st != PL_STATUS_OK && pl_runtime_rank(rt) == 0)
        fprintf(stderr, "%s: the ranks' memory figures: %s\n", CLI_PROGRAM, pl_last_error());
    free(all);
    fflush(stdout);
}

void cli_exec_print_model_state(const cli_exec_options *x, const pl_engine_t *e) {
    pl_model_state_bytes b;
    if (x->dp <= 1 || pl_engine_model_state_bytes(e, &b) != PL_STATUS_OK) return;
    printf("model state per rank (%s", x->zero_stage ? "ZeRO-" : "DDP");
    if (x->zero_stage) printf("%d", x->zero_stage);
    printf("): parameters %.2f MiB%s", mib(b.params), x->zero_stage == 3 ? " (shards)" : "");
    if (b.grads > 0) printf(", gradients %.2f MiB", mib(b.grads));
    else printf(", whole gradients released between steps");
    if (x->zero_stage >= 2) printf(", reduced gradient shards %.2f MiB", mib(b.reduced_grads));
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
    if (x->pp > 1 && rank != 0) return CLI_EXIT_OK;
    if (jp) printf("wrote %s (open in https://ui.perfetto.dev)\n", jp);
    if (pp) printf("wrote %s (open with vite)\n", pp);
    return CLI_EXIT_OK;
}

/* `head` (the flag, padded to the description column, 22), then `text`
 * wrapped at 79 columns under that column: the registries' names are
 * known only at run time. */
static void usage_wrapped(FILE *out, const char *head, const char *text) {
    int col = fprintf(out, "%s", head);
    for (const char *w = text; *w;) {
        int len = (int)strcspn(w, " ");
        if (w != text && col + 1 + len > 79) {
            col = fprintf(out, "\n%22s", "") - 1;
        } else if (w != text) {
            fputc(' ', out);
            col++;
        }
        col += fprintf(out, "%.*s", len, w);
        w += len;
        while (*w == ' ') w++;
    }
    fputc('\n', out);
}

void cli_exec_usage(FILE *out) {
    fputs("Mixed precision (Colossal-AI's names):\n"
          "  --precision fp32|fp16|bf16  store parameters, gradients and activations\n"
          "                      in 16 bits (kernels accumulate in fp32; in bf16, linear\n"
          "                      layers and attention multiply bf16 on AVX512-BF16\n"
          "                      CPUs; optimizer states stay fp32); fp16 turns on\n"
          "                      --loss-scale dynamic (default fp32)\n"
          "  --master-weights on|off  16-bit: update fp32 master weights (default on)\n"
          "  --force-outputs-fp32 on|off  16-bit: keep the model's output (logits) in\n"
          "                      fp32 (default off)\n"
          "Gradient accumulation:\n"
          "  --accumulate N      batches whose gradients are summed (each loss / N)\n"
          "                      per optimizer update (default 1); mlp: an epoch's\n"
          "                      last len % N batches are skipped\n"
          "Gradient clipping:\n"
          "  --max-norm X        clip the gradients of each update to global norm X\n"
          "                      (torch clip_grad_norm_; default 0 = off); the pre-clip\n"
          "                      norm goes into the metrics as grad_norm\n"
          "  --norm-type 2|inf   the norm (default 2)\n"
          "Non-finite values (a run stops at a NaN/inf loss, or gradient norm with\n"
          "--max-norm, either way):\n"
          "  --check-finite      before each update, scan the step's inputs, op outputs\n"
          "                      and gradients and stop at the first inf/NaN, naming\n"
          "                      the input or op and the element (slow: for debugging)\n"
          "Loss scaling (Colossal-AI's DynamicGradScaler):\n"
          "  --loss-scale dynamic  scale the loss, skip updates whose gradients\n"
          "                      overflow (inf/NaN); loss_scale and overflow go into\n"
          "                      the metrics\n"
          "  --initial-scale X   first scale (default 65536)\n"
          "  --min-scale X       lowest scale (default 1)\n"
          "  --max-scale X       highest scale (default 4294967296)\n"
          "  --growth-factor X   scale *= X after --growth-interval clean updates\n"
          "                      (default 2)\n"
          "  --backoff-factor X  scale *= X on overflow once --hysteresis overflows\n"
          "                      have been seen (default 0.5)\n"
          "  --growth-interval N clean updates per growth (default 1000)\n"
          "  --hysteresis N      overflows before backing off (default 2)\n", out);
    cli_lr_usage(out);
    fputs("Data parallelism (each rank a process: mpirun -np N pleiades train --dp N):\n"
          "  --dp N              ranks; must equal mpirun's -np (default 1). Each rank\n"
          "                      trains on its 1/N of every --batch-size batch (the\n"
          "                      global batch, which N must divide); gradients are\n"
          "                      averaged over ranks. Only rank 0 prints and writes\n"
          "                      files (metrics, checkpoints, TensorBoard)\n"
          "  --zero-stage S      0: DDP (default); 1: optimizer states sharded over\n"
          "                      ranks; 2: the averaged gradients too; 3: the\n"
          "                      parameters too, each chunk gathered around its\n"
          "                      uses (Gemini's distributed storage; no pipeline)\n"
          "  --reduce-bucket-size-in-m N  gradients reduced in buckets of at least N\n"
          "                      million elements of chunks (default 12; 0: a chunk)\n"
          "  --overlap-communication on|off  reduce while the backward pass runs\n"
          "                      (default on)\n"
          "  --cpu-offload on|off  ZeRO: the shard's optimizer states and update on\n"
          "                      the host (CUDA runs; default off)\n"
          "  --mpi-progress MODE  who polls MPI for StarPU-MPI: worker (its thread\n"
          "                      runs the first compute worker between polls: one\n"
          "                      thread per core), thread (a thread of its own) or\n"
          "                      auto (default: worker on CPU runs, else thread)\n"
          "  --collective-timeout S  a rank waiting in one collective (a gradient\n"
          "                      reduction, a start-up check) longer than S seconds\n"
          "                      asks the ranks it waits for: any that do not answer\n"
          "                      (stopped, hung) or have made no progress for S/2 are\n"
          "                      named with the collective and the job ends, status\n"
          "                      1; ranks still working are waited for. Per wait, not\n"
          "                      per step (default 300; 0 = off)\n", out);
    fputs("Device:\n"
          "  --device NAME       cpu, cuda or auto (default cpu; cuda needs a StarPU\n"
          "                      built with scripts/build-starpu-cuda)\n"
          "  --cuda-workers N    GPUs to use with cuda/auto, 0 = all (default 0)\n"
          "Pipeline:\n", out);
    char names[1024], text[1200];
    snprintf(text, sizeof text, "%s (default none)",
             join_names(names, sizeof names, "none", pl_schedule_count(), schedule_at,
                        " or "));
    usage_wrapped(out, "  --schedule NAME     ", text);
    fputs("  --stages P          pipeline stages (default 2)\n"
          "  --workers-per-stage N  workers serving each stage, dealt round-robin;\n"
          "                      a stage's workers start its items in schedule order\n"
          "                      and run consecutive ones at once where the data\n"
          "                      allows, each past the first may keep one more\n"
          "                      microbatch live (default 0: every worker; 1:\n"
          "                      the schedule's memory bound exactly)\n"
          "  --pp P              stages across ranks: mpirun -np P, rank s runs stage\n"
          "                      s (HybridParallelPlugin's pp_size; sets --stages P;\n"
          "                      --budget-mb is then each rank's). With --dp D:\n"
          "                      mpirun -np P*D, rank r runs stage r/D of replica\n"
          "                      r mod D (ZeRO 0-2)\n"
          "  --chunks V          model chunks per stage, interleaved (default 2)\n"
          "  --microbatches M    microbatches per batch (default 2P, or the next count\n"
          "                      that divides the batch; interleaved: P or a multiple)\n"
          "  --microbatch-size S samples per microbatch (instead of --microbatches)\n"
          "  --stage-balance B   measured: stages cut on FLOPs, then recut on the\n"
          "                      block times measured in training step 2 (default);\n"
          "                      flops: the FLOP cut throughout\n"
          "  --layers-per-stage a,b,..  blocks per stage part (P·V counts in model\n"
          "                      order) instead of a balanced cut\n"
          "  --fuse-tasks on|off one StarPU task per microbatch's forward / input\n"
          "                      gradients / weight gradients on a stage (per block\n"
          "                      when tiles outnumber workers) instead of one per op:\n"
          "                      less of StarPU's per-task time; same results, and\n"
          "                      traces still show each op (default on; off with a\n"
          "                      placement policy)\n"
          "Traces (of the last training step):\n"
          "  --trace FILE.json   Chrome trace for Perfetto / chrome://tracing\n"
          "  --paje FILE.paje    Paje trace for ViTE / pj_dump\n"
          "Memory placement (default none: everything stays on the compute tier):\n"
          "  --budget-mb N       compute-tier budget in MiB (GPU memory with --device\n"
          "                      cuda, else host RAM); alone it implies --placement auto\n",
          out);
    snprintf(text, sizeof text, "%s; needs --budget-mb",
             join_names(names, sizeof names, NULL, pl_placement_count(), placement_at,
                        " or "));
    usage_wrapped(out, "  --placement NAME    ", text);
    fputs("                      static: fractions below; auto: Belady (evict what is\n"
          "                      needed furthest ahead) with prefetch; cpu/cuda:\n"
          "                      Lightning's presets (static, all / nothing\n"
          "                      offloaded); lru: least recently used first (a\n"
          "                      baseline that does not look ahead)\n"
          "  --offload-dir DIR   disk tier: evicted state goes to files in DIR (an\n"
          "                      existing directory); needed on CPU runs when model\n"
          "                      state and activations exceed --budget-mb\n"
          "  --host-budget-mb N  host RAM budget in MiB (--device cuda only)\n"
          "  --chunk-mb X        model state chunk size in MiB of floats (default:\n"
          "                      searched, at least 4 MiB); chunk halves are what\n"
          "                      placement moves, so smaller chunks fit smaller budgets\n"
          "  --search-range-m X  chunk search (GeminiPlugin's names; without --chunk-mb):\n"
          "  --min-chunk-size-m X  sizes from max(X Mi elements, the largest\n"
          "                      parameter) up to --search-range-m Mi more, in steps of\n"
          "  --hidden-dim N      N elements, or else of the range / --chunk-search-n-grids\n"
          "  --chunk-search-n-grids N  (Lightning's); the least waste wins. Default:\n"
          "                      Pleiades' choice (min 1 Mi, up to a chunk per worker,\n"
          "                      16 grids; --dp/--pp runs: 1/32 to 1/16 of the model in\n"
          "                      steps of 1024); Gemini's defaults\n"
          "                      are 32, 32, 1024 (one chunk for every model here)\n"
          "  --shard-param-frac X    static: share of parameter chunks that may leave\n"
          "                          the compute tier between uses, [0, 1] (default 1);\n"
          "                          with --zero-stage 3 the share resharded over the\n"
          "                          ranks after each use (the rest stays gathered)\n"
          "  --offload-optim-frac X  static: share of chunks whose optimizer states\n"
          "                          live (and update) off the compute tier, [0, 1]\n"
          "                          (default 0)\n"
          "  --offload-param-frac X  static: share of parameter chunks kept off the\n"
          "                          compute tier, [0, 1] (default 0; honoured only\n"
          "                          with the two above at 1)\n"
          "  --max-prefetch N        auto: units fetched ahead of use (default 0)\n"
          "  --warmup-non-model-data-ratio X  auto: budget share kept for\n"
          "                          activations in the first iteration, [0, 1)\n"
          "                          (default 0.8)\n"
          "  --steady-cuda-cap-ratio X  auto: budget share usable afterwards, (0, 1]\n"
          "                          (default 0.9)\n"
          "  --gpu-margin-mem-ratio X   auto: share of the budget left after the\n"
          "                          peak where optimizer states stay (and update)\n"
          "                          on the compute tier, [0, 1] (default 0)\n"
          "                      With a placement, every step line of --metrics also\n"
          "                      has peak_compute_bytes, peak_host_bytes (the host\n"
          "                      tier on CUDA runs, the disk tier on CPU runs),\n"
          "                      bytes_moved, evictions and prefetch_hits of that\n"
          "                      step, and the run ends with a memory summary.\n",
          out);
}
