/* Gradient clipping by global norm, as tasks (torch.nn.utils.clip_grad_norm_,
 * the plugins' max_norm / norm_type): one task per chunk computes a partial
 * norm of the chunk's gradients, one task combines them into the total
 * norm and the clip coefficient, and the optimizer tasks multiply every
 * gradient by that coefficient as they read it (optimizer.h). */
#ifndef PL_OPTIM_CLIP_H
#define PL_OPTIM_CLIP_H

#include <starpu.h>
#include <stdbool.h>
#include <stdint.h>

/* The partial norm of n gradients: Σ g² for the 2-norm (in double, so
 * chunk order does not round away small terms), max |g| for inf. */
double pl_grad_norm_partial(const float *grad, int64_t n, bool inf);
/* The same of 16-bit gradients (bf16, else fp16), widened as read. */
double pl_grad_norm_partial_half(const uint16_t *grad, int64_t n, bool inf, bool bf16);
/* The total norm from per-chunk partials (in chunk order) and torch's
 * clip coefficient min(1, max_norm / (total + 1e-6)), formed in float32
 * as torch forms it from its float32 total. out = {total, coefficient}. */
void pl_clip_combine(const double *partials, int n, bool inf, float max_norm,
                     double out[2]);

/* Argument blocks (task->cl_arg). */
typedef struct pl_grad_norm_args {
    int64_t n;
    bool inf;
    bool half, bf16; /* 16-bit gradients (CPU workers only) */
} pl_grad_norm_args;
typedef struct pl_clip_args {
    int n_partials;
    bool inf;
    float max_norm;
    /* Loss scaling (1 when off): the partials are of scaled gradients;
     * the norm and coefficient are of the unscaled ones (torch unscales
     * before clipping), and the result's coefficient holds 1/scale too. */
    double inv_scale;
} pl_clip_args;

/* grad_norm_partial: (grad R, partial W: a vector of 1 double).
 * clip_combine: STARPU_VARIABLE_NBUFFERS, the n_partials partials (R) then
 * the result (W: a vector of 2 doubles {total norm, coefficient}). */
extern struct starpu_codelet pl_cl_grad_norm_partial, pl_cl_clip_combine;

#endif
