/* --lr-schedule and its knobs (see lr_options.h). */
#include "lr_options.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "args.h"

/* The knobs, by bit in `flags`, and the schedules that take each. */
enum {
    LR_WARMUP = 1u << 0,
    LR_TOTAL = 1u << 1,
    LR_ETA_MIN = 1u << 2,
    LR_STEP_SIZE = 1u << 3,
    LR_GAMMA = 1u << 4,
    LR_MILESTONES = 1u << 5,
    LR_END_LR = 1u << 6,
    LR_POWER = 1u << 7,
    LR_PCT_START = 1u << 8,
};

static const struct {
    const char *name; /* the CLI's */
    pl_lr_schedule_kind kind;
    unsigned knobs;
} SCHEDULES[] = {
    {"constant", PL_LR_CONSTANT, 0},
    {"linear", PL_LR_LINEAR_WARMUP, LR_WARMUP | LR_TOTAL},
    {"cosine", PL_LR_COSINE_ANNEALING_WARMUP, LR_WARMUP | LR_TOTAL | LR_ETA_MIN},
    {"step", PL_LR_STEP, LR_STEP_SIZE | LR_GAMMA},
    {"multistep", PL_LR_MULTISTEP, LR_MILESTONES | LR_GAMMA},
    {"poly", PL_LR_POLYNOMIAL_WARMUP, LR_WARMUP | LR_TOTAL | LR_END_LR | LR_POWER},
    {"onecycle", PL_LR_ONE_CYCLE, LR_TOTAL | LR_PCT_START},
};
#define N_SCHEDULES ((int)(sizeof SCHEDULES / sizeof *SCHEDULES))

static const char *const KNOB_FLAGS[] = {
    "--warmup-steps", "--total-steps", "--eta-min", "--step-size", "--gamma",
    "--milestones", "--end-lr", "--power", "--pct-start",
};

void cli_lr_defaults(pl_lr_scheduler_options *o, unsigned *flags) {
    *o = pl_lr_scheduler_default(PL_LR_CONSTANT);
    *flags = 0;
}

static int schedule_index(pl_lr_schedule_kind kind) {
    for (int i = 0; i < N_SCHEDULES; i++)
        if (SCHEDULES[i].kind == kind) return i;
    return 0;
}

int cli_lr_parse(pl_lr_scheduler_options *o, unsigned *flags, const char *name,
                 const char *flag, const char *arg) {
    static const cli_real_range NON_NEGATIVE = {0, INFINITY, false, false};
    static const cli_real_range GAMMA = {0, 1, true, false};
    static const cli_real_range POSITIVE = {0, INFINITY, true, false};
    static const cli_real_range OPEN_UNIT = {0, 1, true, true};
    int64_t v;
    float f;
    if (strcmp(name, "lr-schedule") == 0) {
        const char *names[N_SCHEDULES];
        for (int i = 0; i < N_SCHEDULES; i++) names[i] = SCHEDULES[i].name;
        int i = cli_parse_choice(flag, arg, names, N_SCHEDULES);
        if (i < 0) return 0;
        pl_lr_scheduler_options fresh = pl_lr_scheduler_default(SCHEDULES[i].kind);
        /* Knobs given before the schedule keep their values. */
        fresh.total_steps = o->total_steps;
        fresh.warmup_steps = o->warmup_steps;
        if (*flags & LR_ETA_MIN) fresh.eta_min = o->eta_min;
        if (*flags & LR_STEP_SIZE) fresh.step_size = o->step_size;
        if (*flags & LR_GAMMA) fresh.gamma = o->gamma;
        if (*flags & LR_MILESTONES) {
            memcpy(fresh.milestones, o->milestones, sizeof fresh.milestones);
            fresh.n_milestones = o->n_milestones;
        }
        if (*flags & LR_END_LR) fresh.end_lr = o->end_lr;
        if (*flags & LR_POWER) fresh.power = o->power;
        if (*flags & LR_PCT_START) fresh.pct_start = o->pct_start;
        *o = fresh;
        return 1;
    }
    if (strcmp(name, "warmup-steps") == 0) {
        *flags |= LR_WARMUP;
        if (!cli_parse_int(flag, arg, 0, INT32_MAX, &v)) return 0;
        o->warmup_steps = v;
    } else if (strcmp(name, "total-steps") == 0) {
        *flags |= LR_TOTAL;
        if (!cli_parse_int(flag, arg, 1, INT32_MAX, &v)) return 0;
        o->total_steps = v;
    } else if (strcmp(name, "eta-min") == 0) {
        *flags |= LR_ETA_MIN;
        if (!cli_parse_real(flag, arg, NON_NEGATIVE, &f)) return 0;
        o->eta_min = f;
    } else if (strcmp(name, "step-size") == 0) {
        *flags |= LR_STEP_SIZE;
        if (!cli_parse_int(flag, arg, 1, INT32_MAX, &v)) return 0;
        o->step_size = v;
    } else if (strcmp(name, "gamma") == 0) {
        *flags |= LR_GAMMA;
        if (!cli_parse_real(flag, arg, GAMMA, &f)) return 0;
        o->gamma = f;
    } else if (strcmp(name, "milestones") == 0) {
        *flags |= LR_MILESTONES;
        int n = 0;
        if (!cli_parse_int_list(flag, arg, 1, INT32_MAX, o->milestones,
                                PL_LR_MAX_MILESTONES, &n))
            return 0;
        o->n_milestones = n;
    } else if (strcmp(name, "end-lr") == 0) {
        *flags |= LR_END_LR;
        if (!cli_parse_real(flag, arg, NON_NEGATIVE, &f)) return 0;
        o->end_lr = f;
    } else if (strcmp(name, "power") == 0) {
        *flags |= LR_POWER;
        if (!cli_parse_real(flag, arg, POSITIVE, &f)) return 0;
        o->power = f;
    } else if (strcmp(name, "pct-start") == 0) {
        *flags |= LR_PCT_START;
        if (!cli_parse_real(flag, arg, OPEN_UNIT, &f)) return 0;
        o->pct_start = f;
    } else {
        return -1;
    }
    return 1;
}

bool cli_lr_finish(const pl_lr_scheduler_options *o, unsigned flags) {
    int s = schedule_index(o->kind);
    unsigned stray = flags & ~SCHEDULES[s].knobs;
    for (int k = 0; stray && k < (int)(sizeof KNOB_FLAGS / sizeof *KNOB_FLAGS); k++)
        if (stray & (1u << k)) {
            cli_error("%s: --lr-schedule %s does not take it", KNOB_FLAGS[k],
                      SCHEDULES[s].name);
            return false;
        }
    if (o->kind == PL_LR_MULTISTEP && o->n_milestones == 0) {
        cli_error("--lr-schedule multistep: give its --milestones");
        return false;
    }
    for (int i = 1; i < o->n_milestones; i++)
        if (o->milestones[i] <= o->milestones[i - 1]) {
            cli_error("--milestones: must be increasing, got %lld after %lld",
                      (long long)o->milestones[i], (long long)o->milestones[i - 1]);
            return false;
        }
    return true;
}

void cli_lr_describe(const pl_lr_scheduler_options *o, char *buf, size_t size) {
    int s = schedule_index(o->kind);
    int n = snprintf(buf, size, "%s", SCHEDULES[s].name);
    if (SCHEDULES[s].knobs & LR_TOTAL && n >= 0 && (size_t)n < size) {
        if (o->total_steps)
            n += snprintf(buf + n, size - (size_t)n, " over %lld steps",
                          (long long)o->total_steps);
        else
            n += snprintf(buf + n, size - (size_t)n, " over the run");
    }
    if (SCHEDULES[s].knobs & LR_WARMUP && o->warmup_steps && n >= 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, ", warm-up %lld", (long long)o->warmup_steps);
}

void cli_lr_usage(FILE *out) {
    fputs("Learning-rate schedule (Colossal-AI's schedulers, stepped per optimizer "
          "step):\n"
          "  --lr-schedule NAME  constant (default), linear (LinearWarmupLR), cosine\n"
          "                      (CosineAnnealingWarmupLR), step (StepLR), multistep\n"
          "                      (MultiStepLR), poly (PolynomialWarmupLR), onecycle\n"
          "                      (OneCycleLR, --lr is max_lr; cycles beta1/momentum)\n"
          "  --warmup-steps N    linear, cosine, poly: warm-up steps (default 0)\n"
          "  --total-steps N     the schedule's length (default: the run's steps)\n"
          "  --eta-min X         cosine: final LR (default 0)\n"
          "  --step-size N --gamma X     step: x gamma every N steps (1, 0.1)\n"
          "  --milestones a,b,.. multistep: x gamma at each of these steps\n"
          "  --end-lr X --power X        poly: final LR and power (1e-4, 1)\n"
          "  --pct-start X       onecycle: share of steps spent rising (default 0.3)\n",
          out);
}
