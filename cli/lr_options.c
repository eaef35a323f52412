/* --lr-schedule and its knobs (see lr_options.h; their rows are in
 * cli/exec_flags.c). */
#include "lr_options.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "args.h"

/* The knobs (their flags in KNOB_FLAGS, in this order), and by bit the
 * schedules that take each. */
enum {
    K_WARMUP,
    K_TOTAL,
    K_ETA_MIN,
    K_STEP_SIZE,
    K_GAMMA,
    K_MILESTONES,
    K_END_LR,
    K_POWER,
    K_PCT_START,
    N_KNOBS,
};
enum {
    LR_WARMUP = 1u << K_WARMUP,
    LR_TOTAL = 1u << K_TOTAL,
    LR_ETA_MIN = 1u << K_ETA_MIN,
    LR_STEP_SIZE = 1u << K_STEP_SIZE,
    LR_GAMMA = 1u << K_GAMMA,
    LR_MILESTONES = 1u << K_MILESTONES,
    LR_END_LR = 1u << K_END_LR,
    LR_POWER = 1u << K_POWER,
    LR_PCT_START = 1u << K_PCT_START,
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

static const char *const KNOB_FLAGS[N_KNOBS] = {
    "--warmup-steps", "--total-steps", "--eta-min", "--step-size", "--gamma",
    "--milestones", "--end-lr", "--power", "--pct-start",
};

static int schedule_index(pl_lr_schedule_kind kind) {
    for (int i = 0; i < N_SCHEDULES; i++)
        if (SCHEDULES[i].kind == kind) return i;
    return 0;
}

static bool given(const cli_flags *f, int knob) {
    return cli_flags_given(f, KNOB_FLAGS[knob]);
}

bool cli_lr_parse_schedule(cli_flags *f, const cli_flag *row, void *field, const char *flag,
                           const char *arg) {
    (void)row;
    pl_lr_scheduler_options *o = field;
    const char *names[N_SCHEDULES];
    for (int i = 0; i < N_SCHEDULES; i++) names[i] = SCHEDULES[i].name;
    int i = cli_parse_choice(flag, arg, names, N_SCHEDULES);
    if (i < 0) return false;
    pl_lr_scheduler_options fresh = pl_lr_scheduler_default(SCHEDULES[i].kind);
    /* Knobs given before the schedule keep their values. */
    fresh.total_steps = o->total_steps;
    fresh.warmup_steps = o->warmup_steps;
    if (given(f, K_ETA_MIN)) fresh.eta_min = o->eta_min;
    if (given(f, K_STEP_SIZE)) fresh.step_size = o->step_size;
    if (given(f, K_GAMMA)) fresh.gamma = o->gamma;
    if (given(f, K_MILESTONES)) {
        memcpy(fresh.milestones, o->milestones, sizeof fresh.milestones);
        fresh.n_milestones = o->n_milestones;
    }
    if (given(f, K_END_LR)) fresh.end_lr = o->end_lr;
    if (given(f, K_POWER)) fresh.power = o->power;
    if (given(f, K_PCT_START)) fresh.pct_start = o->pct_start;
    *o = fresh;
    return true;
}

bool cli_lr_finish(const pl_lr_scheduler_options *o, const cli_flags *f) {
    int s = schedule_index(o->kind);
    for (int k = 0; k < N_KNOBS; k++)
        if (given(f, k) && !(SCHEDULES[s].knobs & (1u << k))) {
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
