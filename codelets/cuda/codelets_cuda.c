/* StarPU wrappers of the CUDA kernels: unpack the buffers, call the
 * launcher on the worker's stream and cuBLAS handle (STARPU_CUDA_ASYNC:
 * StarPU synchronises the stream itself). Compiled only with CUDA StarPU. */
#include <starpu.h>

#ifdef STARPU_USE_CUDA
#include <starpu_cublas_v2.h>

#include "codelets/codelets.h"
#include "codelets/cuda/codelets_cuda.h"
#include "codelets/cuda/kernels.h"

#define VEC(i) PL_FBUF(buffers, cl_arg, i)
/* Optimizer tasks take whole chunks and a pl_optimizer_args: no offsets. */
#define RAW(i) ((float *)STARPU_VECTOR_GET_PTR(buffers[i]))
#define DVEC(i) ((double *)STARPU_VECTOR_GET_PTR(buffers[i]))
#define IVEC(i) ((const int32_t *)STARPU_VECTOR_GET_PTR(buffers[i]))
#define ARGS const pl_dims_args *a = cl_arg
#define STREAM starpu_cuda_get_local_stream()
#define CUBLAS starpu_cublas_get_local_handle()

void pl_linear_forward_cuda(void *buffers[], void *cl_arg) {
    ARGS;
    pl_cuda_linear_forward(CUBLAS, STREAM, VEC(0), VEC(1), VEC(2), VEC(3), a->N, a->C, a->OC);
}
void pl_linear_backward_input_cuda(void *buffers[], void *cl_arg) {
    ARGS;
    pl_cuda_linear_backward_input(CUBLAS, VEC(0), VEC(1), VEC(2), a->N, a->C, a->OC,
                                  a->accumulate);
}
void pl_linear_backward_weight_cuda(void *buffers[], void *cl_arg) {
    ARGS;
    pl_cuda_linear_backward_weight(CUBLAS, STREAM, VEC(0), VEC(1), VEC(2), VEC(3), a->N,
                                   a->C, a->OC, a->accumulate);
}
void pl_matmul_forward_cuda(void *buffers[], void *cl_arg) {
    ARGS;
    pl_cuda_matmul_forward(CUBLAS, VEC(0), VEC(1), VEC(2), a->N, a->C, a->OC);
}
void pl_matmul_backward_weight_cuda(void *buffers[], void *cl_arg) {
    ARGS;
    pl_cuda_matmul_backward_weight(CUBLAS, VEC(0), VEC(1), VEC(2), a->N, a->C, a->OC,
                                   a->accumulate);
}
void pl_relu_forward_cuda(void *buffers[], void *cl_arg) {
    ARGS;
    pl_cuda_relu_forward(STREAM, VEC(0), VEC(1), a->N * a->C);
}
void pl_relu_backward_cuda(void *buffers[], void *cl_arg) {
    ARGS;
    pl_cuda_relu_backward(STREAM, VEC(0), VEC(1), VEC(2), a->N * a->C, a->accumulate);
}
void pl_gelu_forward_cuda(void *buffers[], void *cl_arg) {
    ARGS;
    pl_cuda_gelu_forward(STREAM, VEC(0), VEC(1), a->N * a->C);
}
void pl_gelu_backward_cuda(void *buffers[], void *cl_arg) {
    ARGS;
    pl_cuda_gelu_backward(STREAM, VEC(0), VEC(1), VEC(2), a->N * a->C, a->accumulate);
}
void pl_add_forward_cuda(void *buffers[], void *cl_arg) {
    ARGS;
    pl_cuda_add_forward(STREAM, VEC(0), VEC(1), VEC(2), a->N * a->C);
}
void pl_add_backward_cuda(void *buffers[], void *cl_arg) {
    ARGS;
    pl_cuda_add_backward(STREAM, VEC(0), VEC(1), a->N * a->C, a->accumulate);
}
void pl_cross_entropy_forward_cuda(void *buffers[], void *cl_arg) {
    ARGS;
    pl_cuda_cross_entropy(STREAM, DVEC(0), NULL, VEC(1), IVEC(2), a->N, a->OC, 0.0f);
}
void pl_cross_entropy_loss_cuda(void *buffers[], void *cl_arg) {
    ARGS;
    pl_cuda_cross_entropy(STREAM, DVEC(0), VEC(1), VEC(2), IVEC(3), a->N, a->OC, a->scale);
}
void pl_accuracy_forward_cuda(void *buffers[], void *cl_arg) {
    ARGS;
    pl_cuda_accuracy(STREAM, DVEC(0), VEC(1), IVEC(2), a->N, a->OC);
}
void pl_mean_forward_cuda(void *buffers[], void *cl_arg) {
    ARGS;
    pl_cuda_mean_forward(STREAM, DVEC(0), VEC(1), a->N * a->C);
}
void pl_mean_backward_cuda(void *buffers[], void *cl_arg) {
    ARGS;
    pl_cuda_mean_backward(STREAM, VEC(0), a->N * a->C, a->scale, a->accumulate);
}
void pl_embedding_forward_cuda(void *buffers[], void *cl_arg) {
    ARGS;
    pl_cuda_embedding_forward(STREAM, VEC(0), DVEC(4), IVEC(1), VEC(2), VEC(3), a->B,
                              a->T, a->C, a->V);
}
void pl_embedding_backward_weight_cuda(void *buffers[], void *cl_arg) {
    ARGS;
    pl_cuda_embedding_backward_weight(STREAM, VEC(0), VEC(1), VEC(2), IVEC(3), a->B, a->T,
                                      a->C, a->V, a->accumulate, a->accumulate2);
}
void pl_layernorm_forward_cuda(void *buffers[], void *cl_arg) {
    ARGS;
    pl_cuda_layernorm_forward(STREAM, VEC(0), VEC(1), VEC(2), VEC(3), a->N, a->C);
}
void pl_layernorm_backward_input_cuda(void *buffers[], void *cl_arg) {
    ARGS;
    pl_cuda_layernorm_backward_input(STREAM, VEC(0), VEC(1), VEC(2), VEC(3), a->N, a->C,
                                     a->accumulate);
}
void pl_layernorm_backward_weight_cuda(void *buffers[], void *cl_arg) {
    ARGS;
    pl_cuda_layernorm_backward_weight(STREAM, VEC(0), VEC(1), VEC(2), VEC(3), a->N, a->C,
                                      a->accumulate);
}
void pl_attention_forward_cuda(void *buffers[], void *cl_arg) {
    ARGS;
    pl_cuda_attention_forward(CUBLAS, STREAM, VEC(0), VEC(1), VEC(2), a->B, a->T, a->C,
                              a->NH);
}
void pl_attention_backward_cuda(void *buffers[], void *cl_arg) {
    ARGS;
    float *scratch = NULL;
    cudaStream_t s = STREAM;
    cudaMallocAsync((void **)&scratch, (size_t)a->NH * a->T * a->T * sizeof(float), s);
    pl_cuda_attention_backward(CUBLAS, s, VEC(0), VEC(1), VEC(2), VEC(3), scratch, a->B,
                               a->T, a->C, a->NH, a->accumulate);
    cudaFreeAsync(scratch, s);
}
void pl_adamw_update_cuda(void *buffers[], void *cl_arg) {
    const pl_optimizer_args *o = cl_arg;
    pl_cuda_adamw(STREAM, RAW(0), RAW(1), RAW(2), RAW(3), o->n, o->lr, o->beta1,
                  o->beta2, o->eps, o->weight_decay, o->t);
}
void pl_sgd_update_cuda(void *buffers[], void *cl_arg) {
    const pl_optimizer_args *o = cl_arg;
    pl_cuda_sgd(STREAM, RAW(0), RAW(1), RAW(2), o->n, o->lr, o->momentum,
                o->weight_decay, o->t);
}
#endif
