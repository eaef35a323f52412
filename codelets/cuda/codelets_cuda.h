/* The CUDA implementations StarPU calls (codelets' cuda_funcs), declared
 * only when StarPU was built with CUDA (scripts/build-starpu-cuda). */
#ifndef PL_CODELETS_CUDA_CODELETS_CUDA_H
#define PL_CODELETS_CUDA_CODELETS_CUDA_H

#include <starpu.h>

#ifdef STARPU_USE_CUDA
#define PL_CUDA_FUNCS(f) .cuda_funcs = {f}, .cuda_flags = {STARPU_CUDA_ASYNC},

void pl_linear_forward_cuda(void *buffers[], void *cl_arg);
void pl_linear_backward_input_cuda(void *buffers[], void *cl_arg);
void pl_linear_backward_weight_cuda(void *buffers[], void *cl_arg);
void pl_matmul_forward_cuda(void *buffers[], void *cl_arg);
void pl_matmul_backward_weight_cuda(void *buffers[], void *cl_arg);
void pl_relu_forward_cuda(void *buffers[], void *cl_arg);
void pl_relu_backward_cuda(void *buffers[], void *cl_arg);
void pl_gelu_forward_cuda(void *buffers[], void *cl_arg);
void pl_gelu_backward_cuda(void *buffers[], void *cl_arg);
void pl_add_forward_cuda(void *buffers[], void *cl_arg);
void pl_add_backward_cuda(void *buffers[], void *cl_arg);
void pl_cross_entropy_forward_cuda(void *buffers[], void *cl_arg);
void pl_cross_entropy_loss_cuda(void *buffers[], void *cl_arg);
void pl_accuracy_forward_cuda(void *buffers[], void *cl_arg);
void pl_mean_forward_cuda(void *buffers[], void *cl_arg);
void pl_mean_backward_cuda(void *buffers[], void *cl_arg);
void pl_embedding_forward_cuda(void *buffers[], void *cl_arg);
void pl_embedding_backward_weight_cuda(void *buffers[], void *cl_arg);
void pl_layernorm_forward_cuda(void *buffers[], void *cl_arg);
void pl_layernorm_backward_input_cuda(void *buffers[], void *cl_arg);
void pl_layernorm_backward_weight_cuda(void *buffers[], void *cl_arg);
void pl_attention_forward_cuda(void *buffers[], void *cl_arg);
void pl_attention_backward_cuda(void *buffers[], void *cl_arg);
void pl_adamw_update_cuda(void *buffers[], void *cl_arg);
void pl_sgd_update_cuda(void *buffers[], void *cl_arg);
#else
#define PL_CUDA_FUNCS(f)
#endif

/* History-based performance models, so that StarPU's dmda-family
 * schedulers can weigh CPU against GPU; only on CUDA builds, where there is
 * a choice to make (elsewhere they would only write calibration files). */
#ifdef STARPU_USE_CUDA
#define PL_PERF_MODEL(sym)                                                  \
    .model = &(struct starpu_perfmodel){.type = STARPU_HISTORY_BASED,       \
                                         .symbol = "pleiades_" sym},
#else
#define PL_PERF_MODEL(sym)
#endif

#endif
