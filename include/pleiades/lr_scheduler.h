/*
 * pleiades/lr_scheduler.h — learning-rate schedules with Colossal-AI's
 * names and defaults and PyTorch's formulas (part of pleiades.h). A
 * schedule is stepped once per optimizer step: optimizer step k (0-based)
 * uses pl_lr_scheduler_lr(schedule, base_lr, k), where base_lr is the
 * optimizer's lr (for OneCycleLR, its max_lr).
 *
 *   pl_engine_options eo = pl_engine_options_default();
 *   eo.optimizer.lr = 3e-4;
 *   eo.lr_scheduler = pl_lr_scheduler_default(PL_LR_COSINE_ANNEALING_WARMUP);
 *   eo.lr_scheduler.total_steps = 1000;
 *   eo.lr_scheduler.warmup_steps = 100;
 *   pl_engine_t *e = pl_engine_new(rt, g, &eo);   // checks the schedule
 *   ...  pl_engine_lr(e) is the LR the next optimizer step uses
 */
#ifndef PLEIADES_LR_SCHEDULER_H
#define PLEIADES_LR_SCHEDULER_H

#include "pleiades/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pl_lr_schedule_kind {
    PL_LR_CONSTANT = 0,            /* base_lr throughout (the default) */
    PL_LR_LINEAR_WARMUP,           /* LinearWarmupLR(total_steps, warmup_steps):
                                      base·(k+1)/(warmup+1), then linear decay
                                      base·(total−k)/(total−warmup) */
    PL_LR_COSINE_ANNEALING,        /* CosineAnnealingLR(total_steps, eta_min):
                                      eta_min + (base−eta_min)(1+cos(πk/total))/2 */
    PL_LR_COSINE_ANNEALING_WARMUP, /* CosineAnnealingWarmupLR(total_steps,
                                      warmup_steps, eta_min): base·(k+1)/warmup
                                      for k < warmup, then cosine over
                                      total−warmup steps from k−warmup */
    PL_LR_STEP,                    /* StepLR(step_size, gamma):
                                      base·gamma^⌊k/step_size⌋ */
    PL_LR_MULTISTEP,               /* MultiStepLR(milestones, gamma):
                                      base·gamma^(milestones <= k) */
    PL_LR_POLYNOMIAL_WARMUP,       /* PolynomialWarmupLR(total_steps, warmup_steps,
                                      end_lr, power): warm-up as cosine's, then
                                      (base−end)(1−min(j,n)/n)^power + end with
                                      j = k−warmup, n = total−warmup */
    PL_LR_ONE_CYCLE,               /* OneCycleLR(total_steps, pct_start,
                                      anneal_strategy, cycle_momentum,
                                      base_momentum, max_momentum, div_factor,
                                      final_div_factor), two phases, max_lr =
                                      base_lr; cycles AdamW's beta1 / SGD's
                                      momentum when cycle_momentum */
} pl_lr_schedule_kind;

#define PL_LR_MAX_MILESTONES 16

typedef struct pl_lr_scheduler_options {
    pl_lr_schedule_kind kind;
    int64_t total_steps;   /* optimizer steps the schedule spans (all but
                              constant, step and multistep need it) */
    int64_t warmup_steps;  /* default 0 */
    double eta_min;        /* cosine: default 0 */
    int64_t step_size;     /* step: default 1 */
    double gamma;          /* step, multistep: default 0.1 */
    int64_t milestones[PL_LR_MAX_MILESTONES]; /* multistep, increasing */
    int n_milestones;
    double end_lr;         /* polynomial: default 1e-4 */
    double power;          /* polynomial: default 1.0 */
    double pct_start;      /* one cycle: 0.3 */
    bool anneal_cos;       /* one cycle: true = 'cos', false = 'linear' */
    bool cycle_momentum;   /* one cycle: true */
    double base_momentum;  /* one cycle: 0.85 */
    double max_momentum;   /* one cycle: 0.95 */
    double div_factor;     /* one cycle: 25 */
    double final_div_factor; /* one cycle: 1e4 */
} pl_lr_scheduler_options;

/* The options of `kind` with Colossal-AI's defaults (total_steps 0: set
 * it). */
pl_lr_scheduler_options pl_lr_scheduler_default(pl_lr_schedule_kind kind);

/* Checks the options (ranges, total_steps where needed, increasing
 * milestones); INVALID_ARGUMENT naming the field otherwise. */
pl_status pl_lr_scheduler_check(const pl_lr_scheduler_options *o);

/* The learning rate of optimizer step `step` (0-based) for a base (or, for
 * one cycle, maximum) rate base_lr. Steps past total_steps keep the last
 * value of decaying schedules (linear warm-up and polynomial floor at 0
 * and end_lr, cosine continues its period as PyTorch's does). */
double pl_lr_scheduler_lr(const pl_lr_scheduler_options *o, double base_lr,
                          int64_t step);

/* One cycle with cycle_momentum: true and the momentum (AdamW's beta1,
 * SGD's momentum) of step `step` in *momentum; false for every other
 * schedule (the optimizer keeps its own). */
bool pl_lr_scheduler_momentum(const pl_lr_scheduler_options *o, int64_t step,
                              double *momentum);

/* Parses a schedule name as the CLI takes it: "constant", "linear"
 * (LinearWarmupLR), "cosine" (CosineAnnealingWarmupLR, which is
 * CosineAnnealingLR with no warm-up), "step", "multistep", "poly"
 * (PolynomialWarmupLR), "onecycle"; also Colossal-AI's class names.
 * false for an unknown name. */
bool pl_lr_schedule_from_name(const char *name, pl_lr_schedule_kind *kind);
const char *pl_lr_schedule_name(pl_lr_schedule_kind kind);

#ifdef __cplusplus
}
#endif

#endif /* PLEIADES_LR_SCHEDULER_H */
