/* Learning-rate schedules (pleiades/lr_scheduler.h): closed forms of
 * Colossal-AI's schedulers, which wrap PyTorch's. Pure functions of the
 * step, so a resumed run gets the same LR from the step count alone and
 * the engine needs no scheduler state. */
#include <math.h>
#include <string.h>

#include "pleiades.h"
#include "util/error.h"

pl_lr_scheduler_options pl_lr_scheduler_default(pl_lr_schedule_kind kind) {
    return (pl_lr_scheduler_options){
        .kind = kind, .total_steps = 0, .warmup_steps = 0, .eta_min = 0.0,
        .step_size = 1, .gamma = 0.1, .n_milestones = 0, .end_lr = 1e-4,
        .power = 1.0, .pct_start = 0.3, .anneal_cos = true, .cycle_momentum = true,
        .base_momentum = 0.85, .max_momentum = 0.95, .div_factor = 25.0,
        .final_div_factor = 1e4};
}

static const struct {
    pl_lr_schedule_kind kind;
    const char *name, *colossal;
} NAMES[] = {
    {PL_LR_CONSTANT, "constant", "constant"},
    {PL_LR_LINEAR_WARMUP, "linear", "LinearWarmupLR"},
    {PL_LR_COSINE_ANNEALING, "cosine-nowarmup", "CosineAnnealingLR"},
    {PL_LR_COSINE_ANNEALING_WARMUP, "cosine", "CosineAnnealingWarmupLR"},
    {PL_LR_STEP, "step", "StepLR"},
    {PL_LR_MULTISTEP, "multistep", "MultiStepLR"},
    {PL_LR_POLYNOMIAL_WARMUP, "poly", "PolynomialWarmupLR"},
    {PL_LR_ONE_CYCLE, "onecycle", "OneCycleLR"},
};

bool pl_lr_schedule_from_name(const char *name, pl_lr_schedule_kind *kind) {
    for (size_t i = 0; name && i < sizeof NAMES / sizeof NAMES[0]; i++)
        if (strcmp(name, NAMES[i].name) == 0 || strcmp(name, NAMES[i].colossal) == 0) {
            *kind = NAMES[i].kind;
            return true;
        }
    return false;
}

const char *pl_lr_schedule_name(pl_lr_schedule_kind kind) {
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
        if (NAMES[i].kind == kind) return NAMES[i].colossal;
    return "?";
}

static bool needs_total(pl_lr_schedule_kind k) {
    return k != PL_LR_CONSTANT && k != PL_LR_STEP && k != PL_LR_MULTISTEP;
}

pl_status pl_lr_scheduler_check(const pl_lr_scheduler_options *o) {
    const char *fn = "lr_scheduler";
    if (!o) return pl_fail(PL_STATUS_INVALID_ARGUMENT, "%s: options are NULL", fn);
    if (o->kind < PL_LR_CONSTANT || o->kind > PL_LR_ONE_CYCLE)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "%s: unknown kind %d", fn, (int)o->kind);
    const char *name = pl_lr_schedule_name(o->kind);
    if (needs_total(o->kind) && o->total_steps < 1)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "%s %s: total_steps %lld must be >= 1",
                       fn, name, (long long)o->total_steps);
    if (o->warmup_steps < 0 || (needs_total(o->kind) && o->kind != PL_LR_ONE_CYCLE &&
                                o->warmup_steps >= o->total_steps && o->warmup_steps > 0))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "%s %s: warmup_steps %lld must be in [0, total_steps %lld)", fn,
                       name, (long long)o->warmup_steps, (long long)o->total_steps);
    if (!(o->eta_min >= 0.0) || !(o->end_lr >= 0.0))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "%s %s: eta_min %g and end_lr %g must "
                       "be >= 0", fn, name, o->eta_min, o->end_lr);
    if (o->kind == PL_LR_STEP && o->step_size < 1)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "%s %s: step_size %lld must be >= 1",
                       fn, name, (long long)o->step_size);
    if ((o->kind == PL_LR_STEP || o->kind == PL_LR_MULTISTEP) &&
        !(o->gamma > 0.0 && o->gamma <= 1.0))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "%s %s: gamma %g must be in (0, 1]",
                       fn, name, o->gamma);
    if (o->kind == PL_LR_MULTISTEP) {
        if (o->n_milestones < 1 || o->n_milestones > PL_LR_MAX_MILESTONES)
            return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                           "%s %s: %d milestones, must be 1..%d", fn, name,
                           o->n_milestones, PL_LR_MAX_MILESTONES);
        for (int i = 0; i < o->n_milestones; i++)
            if (o->milestones[i] < 1 || (i && o->milestones[i] <= o->milestones[i - 1]))
                return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                               "%s %s: milestones must be increasing and >= 1 "
                               "(milestone %d is %lld)", fn, name, i,
                               (long long)o->milestones[i]);
    }
    if (o->kind == PL_LR_POLYNOMIAL_WARMUP && !(o->power > 0.0))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "%s %s: power %g must be > 0", fn, name,
                       o->power);
    if (o->kind == PL_LR_ONE_CYCLE) {
        /* PyTorch's own requirement: both phases at least one step long. */
        double end_up = o->pct_start * (double)o->total_steps - 1.0;
        if (!(o->pct_start > 0.0 && o->pct_start < 1.0) || !(end_up > 0.0) ||
            !(end_up < (double)o->total_steps - 1.0))
            return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                           "%s %s: pct_start %g must leave both phases a step of "
                           "total_steps %lld", fn, name, o->pct_start,
                           (long long)o->total_steps);
        if (!(o->div_factor > 0.0) || !(o->final_div_factor > 0.0) ||
            !(o->base_momentum >= 0.0 && o->base_momentum < 1.0) ||
            !(o->max_momentum >= 0.0 && o->max_momentum < 1.0))
            return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                           "%s %s: div_factor %g and final_div_factor %g must be > 0, "
                           "base_momentum %g and max_momentum %g in [0, 1)", fn, name,
                           o->div_factor, o->final_div_factor, o->base_momentum,
                           o->max_momentum);
    }
    return PL_STATUS_OK;
}

static double cosine(double base, double eta_min, double t, double period) {
    return eta_min + (base - eta_min) * (1.0 + cos(M_PI * t / period)) / 2.0;
}

/* OneCycleLR's annealing from `start` to `end` at fraction pct. */
static double anneal(const pl_lr_scheduler_options *o, double start, double end,
                     double pct) {
    if (o->anneal_cos) return end + (start - end) / 2.0 * (cos(M_PI * pct) + 1.0);
    return (end - start) * pct + start;
}

/* OneCycleLR's two phases at step k: the lr (which = 0) or the momentum. */
static double one_cycle(const pl_lr_scheduler_options *o, double max_lr, int64_t k,
                        bool momentum) {
    double initial = max_lr / o->div_factor, min_lr = initial / o->final_div_factor;
    double total = (double)o->total_steps;
    double end_up = o->pct_start * total - 1.0, end_down = total - 1.0;
    double t = (double)(k < o->total_steps ? k : o->total_steps - 1);
    if (t <= end_up) {
        double pct = t / end_up;
        return momentum ? anneal(o, o->max_momentum, o->base_momentum, pct)
                        : anneal(o, initial, max_lr, pct);
    }
    double pct = (t - end_up) / (end_down - end_up);
    return momentum ? anneal(o, o->base_momentum, o->max_momentum, pct)
                    : anneal(o, max_lr, min_lr, pct);
}

double pl_lr_scheduler_lr(const pl_lr_scheduler_options *o, double base, int64_t k) {
    if (!o || k < 0) return base;
    double total = (double)o->total_steps, warm = (double)o->warmup_steps;
    switch (o->kind) {
    case PL_LR_CONSTANT: return base;
    case PL_LR_LINEAR_WARMUP:
        if (k < o->warmup_steps) return base * ((double)k + 1.0) / (warm + 1.0);
        if (k >= o->total_steps) return 0.0; /* PyTorch would go negative */
        return base * (total - (double)k) / (total - warm);
    case PL_LR_COSINE_ANNEALING: return cosine(base, o->eta_min, (double)k, total);
    case PL_LR_COSINE_ANNEALING_WARMUP:
        if (k < o->warmup_steps) return base * ((double)k + 1.0) / warm;
        return cosine(base, o->eta_min, (double)(k - o->warmup_steps), total - warm);
    case PL_LR_STEP: return base * pow(o->gamma, (double)(k / o->step_size));
    case PL_LR_MULTISTEP: {
        int passed = 0;
        for (int i = 0; i < o->n_milestones; i++) passed += o->milestones[i] <= k;
        return base * pow(o->gamma, passed);
    }
    case PL_LR_POLYNOMIAL_WARMUP: {
        if (k < o->warmup_steps) return base * ((double)k + 1.0) / warm;
        double n = total - warm, j = (double)(k - o->warmup_steps);
        return (base - o->end_lr) * pow(1.0 - (j < n ? j : n) / n, o->power) + o->end_lr;
    }
    case PL_LR_ONE_CYCLE: return one_cycle(o, base, k, false);
    }
    return base;
}

bool pl_lr_scheduler_momentum(const pl_lr_scheduler_options *o, int64_t k,
                              double *momentum) {
    if (!o || o->kind != PL_LR_ONE_CYCLE || !o->cycle_momentum) return false;
    *momentum = one_cycle(o, 1.0, k < 0 ? 0 : k, true);
    return true;
}
