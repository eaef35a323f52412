/* Dynamic loss scaling, as tasks (Colossal-AI's DynamicGradScaler): one
 * task per chunk looks for a non-finite gradient, one task ORs the chunks'
 * flags into the update's verdict, and the optimizer tasks of a clean
 * update read 1/scale from that verdict's second entry as the factor
 * their gradients are multiplied by (the _clip codelets of optimizer.h:
 * the verdict has the clip result's layout). The scaler's rule itself is
 * a few host scalars (pl_loss_scaler_step). */
#ifndef PL_OPTIM_LOSS_SCALER_H
#define PL_OPTIM_LOSS_SCALER_H

#include <starpu.h>
#include <stdbool.h>
#include <stdint.h>

/* 1 if any of the n floats is an inf or a NaN, else 0. */
double pl_grad_overflow_partial(const float *grad, int64_t n);
/* The same of 16-bit gradients (bf16, else fp16): an all-ones exponent. */
double pl_grad_overflow_partial_half(const uint16_t *grad, int64_t n, bool bf16);

/* The scaler's state after one update (overflow: it was skipped). */
typedef struct pl_loss_scaler_state {
    double scale;
    int64_t growth_step, hysteresis_step;
} pl_loss_scaler_state;
void pl_loss_scaler_step(pl_loss_scaler_state *s, bool overflow, double min_scale,
                         double max_scale, double growth_factor, double backoff_factor,
                         int growth_interval, int hysteresis);

/* Argument blocks (task->cl_arg). */
typedef struct pl_overflow_args {
    int64_t n;
    bool half, bf16; /* 16-bit gradients (CPU workers only) */
} pl_overflow_args;
typedef struct pl_overflow_combine_args {
    int n_partials;
    double inv_scale;
} pl_overflow_combine_args;

/* grad_overflow: (grad R, flag W: a vector of 1 double).
 * overflow_combine: STARPU_VARIABLE_NBUFFERS, the n_partials flags (R)
 * then the verdict (W: a vector of 2 doubles {found_inf, 1/scale}). */
extern struct starpu_codelet pl_cl_grad_overflow, pl_cl_overflow_combine;

#endif
