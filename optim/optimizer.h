/* The optimizer updates: PyTorch's AdamW and SGD as CPU kernels (plain
 * functions, so tests can call them) and as the StarPU codelets the engine
 * submits, one task per chunk (parameters, gradients and states of many
 * tensors at once). */
#ifndef PL_OPTIM_OPTIMIZER_H
#define PL_OPTIM_OPTIMIZER_H

#include <starpu.h>
#include <stdint.h>

/* PyTorch AdamW, step t ≥ 1 (bias correction uses t). */
void adamw_update(float *param, const float *grad, float *m, float *v,
                  int64_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, int64_t t);
/* PyTorch SGD (dampening 0, no Nesterov): d = g + wd·p;
 * buf = t == 1 ? d : momentum·buf + d; p −= lr·buf (buf unused if
 * momentum == 0). */
void sgd_update(float *param, const float *grad, float *buf, int64_t n,
                float lr, float momentum, float weight_decay, int64_t t);

/* The argument block of an optimizer task (task->cl_arg). */
typedef struct pl_optimizer_args {
    int64_t n, t;      /* elements, step number (1-based) */
    float lr, beta1, beta2, eps, weight_decay, momentum;
} pl_optimizer_args;

/* adamw (param RW, grad R, m RW, v RW), sgd (param RW, grad R, buf RW) */
extern struct starpu_codelet pl_cl_adamw_update, pl_cl_sgd_update;

#endif
