/* Options of `pleiades train` that say how a model runs rather than what
 * it is: the device, the pipeline schedule and trace output. Shared by the
 * MLP and GPT trainers. */
#ifndef PL_CLI_EXEC_OPTIONS_H
#define PL_CLI_EXEC_OPTIONS_H

#include <stdbool.h>
#include <stdio.h>

#include <pleiades.h>

#define CLI_MAX_PARTS 64

typedef struct cli_exec_options {
    pl_device device;           /* --device cpu|cuda|auto */
    int cuda_workers;           /* --cuda-workers N (0 = all GPUs) */
    pl_schedule_kind schedule;  /* --schedule none|1f1b|interleaved */
    int stages;                 /* --stages P */
    int chunks;                 /* --chunks V (model chunks per stage) */
    int microbatches;           /* --microbatches M (0: --microbatch-size or P) */
    int microbatch_size;        /* --microbatch-size S (0: unset) */
    int layers_per_stage[CLI_MAX_PARTS]; /* --layers-per-stage a,b,.. */
    int n_layers_per_stage;
    const char *trace_path;     /* --trace FILE.json */
    const char *paje_path;      /* --paje FILE.paje */
} cli_exec_options;

void cli_exec_defaults(cli_exec_options *x);

/* Parses one of the options above (flag as typed, e.g. "--stages");
 * returns 1 if `name` is one of them and it parsed, 0 if it is one of them
 * and it did not (a usage error was printed), -1 if it is none of them. */
int cli_exec_parse(cli_exec_options *x, const char *name, const char *flag,
                   const char *arg);

/* Cross-option checks once the batch size is known (usage errors). */
bool cli_exec_finish(cli_exec_options *x, int batch_size, int *tiles);

void cli_exec_runtime(const cli_exec_options *x, pl_runtime_options *o);
void cli_exec_engine(const cli_exec_options *x, pl_engine_options *o);

/* Writes --trace/--paje from the engine's last step; exit status. */
int cli_exec_write_traces(const cli_exec_options *x, pl_engine_t *e);

/* The --help lines of these options. */
void cli_exec_usage(FILE *out);

#endif
