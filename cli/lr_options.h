/* The learning-rate schedule flags of `pleiades train` (Colossal-AI's
 * scheduler names and knobs): --lr-schedule NAME --warmup-steps N
 * --total-steps N --eta-min X --step-size N --gamma X --milestones a,b,..
 * --end-lr X --power X --pct-start X. Parsed into the library's
 * pl_lr_scheduler_options; a knob the chosen schedule does not take is a
 * usage error naming both. */
#ifndef PL_CLI_LR_OPTIONS_H
#define PL_CLI_LR_OPTIONS_H

#include <stdbool.h>
#include <stdio.h>

#include <pleiades.h>

void cli_lr_defaults(pl_lr_scheduler_options *o, unsigned *flags);

/* 1 if `name` is one of the flags above and it parsed, 0 if it is one and
 * did not (a message was printed), -1 if it is none of them. */
int cli_lr_parse(pl_lr_scheduler_options *o, unsigned *flags, const char *name,
                 const char *flag, const char *arg);

/* Cross-flag checks once everything is parsed (usage errors). */
bool cli_lr_finish(const pl_lr_scheduler_options *o, unsigned flags);

/* "cosine, warm-up 100 steps, eta_min 0" for a run's header. */
void cli_lr_describe(const pl_lr_scheduler_options *o, char *buf, size_t size);

void cli_lr_usage(FILE *out);

#endif
