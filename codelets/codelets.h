/* The StarPU codelets of Pleiades and the argument block each one takes.
 * A codelet names the implementations StarPU may pick from (CPU now, CUDA
 * later) and the access mode of each buffer; the argument block travels in
 * task->cl_arg (freed by StarPU). Buffers are vector handles.
 *
 * Gradient outputs are written with STARPU_RW when they accumulate and
 * STARPU_W when they are overwritten (a W access needs no valid previous
 * contents, so StarPU neither reads nor transfers them). Codelets with such
 * outputs declare STARPU_VARIABLE_NBUFFERS, list their accumulating modes
 * in .modes, and the engine sets each task's modes (RW → W for the buffers
 * it overwrites). */
#ifndef PL_CODELETS_H
#define PL_CODELETS_H

#include <starpu.h>
#include <stdint.h>

/* Dimensions of one tile of an op; `accumulate` as in cpu/kernels.h. */
typedef struct pl_dims_args {
    int64_t N, C, OC;  /* rows, in features, out features (or K classes) */
    int64_t B, T, NH, V; /* transformer ops: samples, positions, heads, vocab */
    int accumulate;    /* first gradient output adds (1) or overwrites (0) */
    int accumulate2;   /* likewise for a second gradient output */
    float scale;       /* loss/mean: gradient scale (1 / rows in batch) */
    int64_t off[8];    /* element offset into each buffer: with a placement
                          policy a parameter is its whole chunk's handle
                          plus the tensor's offset (0 otherwise) */
} pl_dims_args;

/* Float buffer i of a task whose cl_arg is a pl_dims_args. */
#define PL_FBUF(buffers, cl_arg, i)                                           \
    ((float *)STARPU_VECTOR_GET_PTR((buffers)[i]) +                          \
     ((const pl_dims_args *)(cl_arg))->off[i])

typedef struct pl_optimizer_args {
    int64_t n, t;      /* elements, step number (1-based) */
    float lr, beta1, beta2, eps, weight_decay, momentum;
} pl_optimizer_args;

/* linear: F (out W | inp R, weight R, bias R), B (dinp RW | dout R,
 * weight R), W (dweight RW, dbias RW | dout R, inp R) */
extern struct starpu_codelet pl_cl_linear_forward;
extern struct starpu_codelet pl_cl_linear_backward_input;
extern struct starpu_codelet pl_cl_linear_backward_weight;
/* relu/gelu: F (out W | inp R), B (dinp RW | inp R, dout R) */
extern struct starpu_codelet pl_cl_relu_forward, pl_cl_relu_backward;
extern struct starpu_codelet pl_cl_gelu_forward, pl_cl_gelu_backward;
/* add: F (out W | a R, b R), B (dinp RW | dout R) */
extern struct starpu_codelet pl_cl_add_forward, pl_cl_add_backward;
/* cross-entropy: F (sum W | logits R, labels R);
 * L (sum W, dlogits W | logits R, labels R): loss and its gradient fused,
 * the loss task of a training step. sum is a vector of 2 doubles:
 * {Σ loss, bad labels}. */
extern struct starpu_codelet pl_cl_cross_entropy_forward;
extern struct starpu_codelet pl_cl_cross_entropy_loss;
/* accuracy: F (count W | logits R, labels R), count is 2 doubles */
extern struct starpu_codelet pl_cl_accuracy_forward;
/* mean: F (sum W | inp R), B (dinp RW) */
extern struct starpu_codelet pl_cl_mean_forward, pl_cl_mean_backward;
/* embedding: F (out W | tokens R, wte R, wpe R, err W),
 * W (dwte RW, dwpe RW | dout R, tokens R); err counts bad tokens (2 doubles) */
extern struct starpu_codelet pl_cl_embedding_forward;
extern struct starpu_codelet pl_cl_embedding_backward_weight;
/* layernorm: F (out W | inp R, weight R, bias R), B (dinp RW | dout R, inp R,
 * weight R), W (dweight RW, dbias RW | dout R, inp R) */
extern struct starpu_codelet pl_cl_layernorm_forward;
extern struct starpu_codelet pl_cl_layernorm_backward_input;
extern struct starpu_codelet pl_cl_layernorm_backward_weight;
/* attention: F (out W, att W | qkv R), B (dqkv RW | dout R, qkv R, att R) */
extern struct starpu_codelet pl_cl_attention_forward;
extern struct starpu_codelet pl_cl_attention_backward;
/* matmul (tied head): F (out W | inp R, weight R), W (dweight RW | dout R,
 * inp R); its input gradient uses pl_cl_linear_backward_input. */
extern struct starpu_codelet pl_cl_matmul_forward;
extern struct starpu_codelet pl_cl_matmul_backward_weight;
/* optimizers over whole chunks: adamw (param RW, grad R, m RW, v RW),
 * sgd (param RW, grad R, buf RW) */
extern struct starpu_codelet pl_cl_adamw_update, pl_cl_sgd_update;

#endif
