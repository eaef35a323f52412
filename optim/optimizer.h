/* The optimizer updates: PyTorch's AdamW and SGD as CPU kernels (plain
 * functions, so tests can call them) and as the StarPU codelets the engine
 * submits, one task per chunk (parameters, gradients and states of many
 * tensors at once). */
#ifndef PL_OPTIM_OPTIMIZER_H
#define PL_OPTIM_OPTIMIZER_H

#include <starpu.h>
#include <stdbool.h>
#include <stdint.h>

/* PyTorch AdamW, step t ≥ 1 (bias correction uses t), on gradients
 * multiplied by grad_scale (the clip coefficient; 1 = as they are). */
void adamw_update(float *param, const float *grad, float *m, float *v,
                  int64_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, int64_t t, float grad_scale);
/* PyTorch SGD (dampening 0, no Nesterov): d = g + wd·p;
 * buf = t == 1 ? d : momentum·buf + d; p −= lr·buf (buf unused if
 * momentum == 0). */
void sgd_update(float *param, const float *grad, float *buf, int64_t n,
                float lr, float momentum, float weight_decay, int64_t t, float grad_scale);

/* The same updates on 16-bit parameters and gradients (bf16, else fp16):
 * gradients are widened as they are read; with `master` (n fp32 master
 * weights) the master weights are updated and their rounding written to
 * `param`, without it the widened parameter is updated and rounded back.
 * Block by block through the fp32 functions above, so the arithmetic is
 * theirs. */
void adamw_update_half(uint16_t *param, const uint16_t *grad, float *master, float *m,
                       float *v, int64_t n, float lr, float beta1, float beta2, float eps,
                       float weight_decay, int64_t t, float grad_scale, bool bf16);
void sgd_update_half(uint16_t *param, const uint16_t *grad, float *master, float *buf,
                     int64_t n, float lr, float momentum, float weight_decay, int64_t t,
                     float grad_scale, bool bf16);

/* The argument block of an optimizer task (task->cl_arg). */
typedef struct pl_optimizer_args {
    int64_t n, t;      /* elements, step number (1-based) */
    /* Where the n elements start in the parameter and gradient buffers
     * (ZeRO: a rank updates its shard of a chunk; the states buffers hold
     * that shard only). 0 for whole chunks. */
    int64_t param_offset, grad_offset;
    float lr, beta1, beta2, eps, weight_decay, momentum;
    bool clip; /* the _clip codelets: the last buffer is the clip result */
    /* The _half codelets: 16-bit parameters and gradients (bf16, else
     * fp16); with master, the master weights come after every other
     * buffer (the clip result included), n elements from their start
     * like the states. */
    bool bf16, master;
} pl_optimizer_args;

/* adamw (param RW, grad R, m RW, v RW), sgd (param RW, grad R, buf RW);
 * the _clip twins take the clip result {norm, coefficient} (clip.h) as
 * one more buffer (R) and scale the gradients by the coefficient. */
extern struct starpu_codelet pl_cl_adamw_update, pl_cl_sgd_update,
    pl_cl_adamw_update_clip, pl_cl_sgd_update_clip;
/* 16-bit twins (CPU and CUDA): STARPU_VARIABLE_NBUFFERS, the buffers of the codelets
 * above (the clip result when clip) then the master weights (RW) when
 * master; the submitter gives the modes. */
extern struct starpu_codelet pl_cl_adamw_update_half, pl_cl_sgd_update_half;

#endif
