/* The learning-rate schedule flags of `pleiades train` (Colossal-AI's
 * scheduler names and knobs): --lr-schedule NAME --warmup-steps N
 * --total-steps N --eta-min X --step-size N --gamma X --milestones a,b,..
 * --end-lr X --power X --pct-start X, parsed into the engine's
 * pl_lr_scheduler_options (rows in cli/exec_flags.c); a knob the chosen
 * schedule does not take is a usage error naming both. */
#ifndef PL_CLI_LR_OPTIONS_H
#define PL_CLI_LR_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>

#include <pleiades.h>

#include "flags.h"

/* --lr-schedule NAME (a CLI_CUSTOM parser; `field` is the
 * pl_lr_scheduler_options): the schedule's defaults, keeping the knobs
 * given before it. */
bool cli_lr_parse_schedule(cli_flags *f, const cli_flag *row, void *field, const char *flag,
                           const char *arg);

/* Cross-flag checks once everything is parsed (usage errors). */
bool cli_lr_finish(const pl_lr_scheduler_options *o, const cli_flags *f);

/* "cosine, warm-up 100 steps, eta_min 0" for a run's header. */
void cli_lr_describe(const pl_lr_scheduler_options *o, char *buf, size_t size);

#endif
