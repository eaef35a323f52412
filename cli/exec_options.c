/* Device, schedule and trace options of `pleiades train`. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "exec_options.h"

void cli_exec_defaults(cli_exec_options *x) {
    memset(x, 0, sizeof *x);
    x->device = pl_runtime_options_default().device; /* PLEIADES_DEVICE */
    x->schedule = PL_SCHEDULE_NONE;
    x->stages = 2;
    x->chunks = 2;
}

static const char *const DEVICES[] = {"cpu", "cuda", "auto"};
static const char *const SCHEDULES[] = {"none", "1f1b", "interleaved"};

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
        if ((i = cli_parse_choice(flag, arg, SCHEDULES, 3)) < 0) return 0;
        x->schedule = (pl_schedule_kind)i;
    } else if (strcmp(name, "stages") == 0) {
        if (!cli_parse_int(flag, arg, 1, 16, &v)) return 0;
        x->stages = (int)v;
    } else if (strcmp(name, "chunks") == 0) {
        if (!cli_parse_int(flag, arg, 1, 16, &v)) return 0;
        x->chunks = (int)v;
    } else if (strcmp(name, "microbatches") == 0) {
        if (!cli_parse_int(flag, arg, 1, 64, &v)) return 0;
        x->microbatches = (int)v;
    } else if (strcmp(name, "microbatch-size") == 0) {
        if (!cli_parse_int(flag, arg, 1, 1 << 20, &v)) return 0;
        x->microbatch_size = (int)v;
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
    } else {
        return -1;
    }
    return 1;
}

bool cli_exec_finish(cli_exec_options *x, int batch_size, int *tiles) {
    if (x->schedule == PL_SCHEDULE_NONE) {
        if (x->microbatches || x->microbatch_size || x->n_layers_per_stage) {
            cli_error("--microbatches/--microbatch-size/--layers-per-stage need "
                      "--schedule 1f1b or interleaved");
            return false;
        }
        return true;
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
    if (!m) m = x->schedule == PL_SCHEDULE_INTERLEAVED ? x->stages : 2 * x->stages;
    if (m > batch_size || batch_size % m != 0) {
        cli_error("--microbatches: %d microbatches do not divide --batch-size %d", m,
                  batch_size);
        return false;
    }
    if (x->schedule == PL_SCHEDULE_1F1B) x->chunks = 1;
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
}

void cli_exec_engine(const cli_exec_options *x, pl_engine_options *o) {
    o->schedule = x->schedule;
    o->stages = x->schedule == PL_SCHEDULE_NONE ? 0 : x->stages;
    o->model_chunks = x->schedule == PL_SCHEDULE_NONE ? 0 : x->chunks;
    o->layers_per_stage = x->n_layers_per_stage ? x->layers_per_stage : NULL;
    o->record_tasks = x->trace_path || x->paje_path;
}

int cli_exec_write_traces(const cli_exec_options *x, pl_engine_t *e) {
    if (!x->trace_path && !x->paje_path) return CLI_EXIT_OK;
    if (pl_engine_write_trace(e, x->trace_path, x->paje_path) != PL_STATUS_OK) {
        cli_error("cannot write the trace: %s", pl_last_error());
        return CLI_EXIT_FAILURE;
    }
    if (x->trace_path) printf("wrote %s (open in https://ui.perfetto.dev)\n", x->trace_path);
    if (x->paje_path) printf("wrote %s (open with vite)\n", x->paje_path);
    return CLI_EXIT_OK;
}

void cli_exec_usage(FILE *out) {
    fputs("Device:\n"
          "  --device NAME       cpu, cuda or auto (default cpu; cuda needs a StarPU\n"
          "                      built with scripts/build-starpu-cuda)\n"
          "  --cuda-workers N    GPUs to use with cuda/auto, 0 = all (default 0)\n"
          "Pipeline:\n"
          "  --schedule NAME     none, 1f1b or interleaved (default none)\n"
          "  --stages P          pipeline stages, one worker each (default 2)\n"
          "  --chunks V          model chunks per stage, interleaved (default 2)\n"
          "  --microbatches M    microbatches per batch (default 2P; P interleaved)\n"
          "  --microbatch-size S samples per microbatch (instead of --microbatches)\n"
          "  --layers-per-stage a,b,..  blocks per stage part (P·V counts; default:\n"
          "                      balanced by FLOPs)\n"
          "Traces (of the last training step):\n"
          "  --trace FILE.json   Chrome trace for Perfetto / chrome://tracing\n"
          "  --paje FILE.paje    Paje trace for ViTE / pj_dump\n",
          out);
}
