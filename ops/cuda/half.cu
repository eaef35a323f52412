/* 16-bit storage on the GPU: buffers widened to fp32 and rounded back with
 * util/half.h's conversions (device functions there), so a value rounds to
 * the same bits on the GPU as on the CPU. The 16-bit paths of the op
 * trampoline (engine/op_tasks.c) and of the optimizer and gradient
 * reductions (optim/) widen their operands with these, run the fp32
 * kernels and round what those wrote. */
#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.h"
#include "util/half.h"

__global__ void half_to_float_kernel(int bf16, const uint16_t *src, float *dst, int64_t n) {
    PL_GRID_STRIDE(i, n) dst[i] = bf16 ? pl_bf16_to_float(src[i]) : pl_fp16_to_float(src[i]);
}

__global__ void half_from_float_kernel(int bf16, const float *src, uint16_t *dst, int64_t n) {
    PL_GRID_STRIDE(i, n) dst[i] = bf16 ? pl_bf16_from_float(src[i]) : pl_fp16_from_float(src[i]);
}

extern "C" void pl_cuda_half_to_float(cudaStream_t s, int bf16, const uint16_t *src,
                                      float *dst, int64_t n) {
    if (n > 0) half_to_float_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(bf16, src, dst, n);
}

extern "C" void pl_cuda_half_from_float(cudaStream_t s, int bf16, const float *src,
                                        uint16_t *dst, int64_t n) {
    if (n > 0)
        half_from_float_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(bf16, src, dst, n);
}

/* g = round(widen(g) + widen(side)): the 16-bit gradient sum of
 * optim/grad_sum.c, added in fp32 and rounded once as on the CPU. */
__global__ void half_add_kernel(int bf16, uint16_t *g, const uint16_t *side, int64_t n) {
    PL_GRID_STRIDE(i, n) {
        float x = bf16 ? pl_bf16_to_float(g[i]) + pl_bf16_to_float(side[i])
                       : pl_fp16_to_float(g[i]) + pl_fp16_to_float(side[i]);
        g[i] = bf16 ? pl_bf16_from_float(x) : pl_fp16_from_float(x);
    }
}

extern "C" void pl_cuda_half_add(cudaStream_t s, int bf16, uint16_t *g, const uint16_t *side,
                                 int64_t n, int accumulate) {
    if (n <= 0) return;
    if (!accumulate)
        cudaMemcpyAsync(g, side, (size_t)n * sizeof *g, cudaMemcpyDeviceToDevice, s);
    else
        half_add_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(bf16, g, side, n);
}
