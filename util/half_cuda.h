/* 16-bit buffers on a GPU (util/half_cuda.cu): dst = src widened to fp32,
 * or rounded to bf16 (bf16 != 0) / fp16 to nearest even, element by element
 * on the stream, with half.h's very conversions, so a GPU rounds as the
 * CPU does. The 16-bit op trampoline (engine/op_tasks.c) widens a task's
 * operands with these, runs the fp32 CUDA kernel and rounds what it
 * wrote. Built only where nvcc is (CUDA builds). */
#ifndef PL_UTIL_HALF_CUDA_H
#define PL_UTIL_HALF_CUDA_H

#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

void pl_cuda_half_to_float(cudaStream_t s, int bf16, const uint16_t *src, float *dst,
                           int64_t n);
void pl_cuda_half_from_float(cudaStream_t s, int bf16, const float *src, uint16_t *dst,
                             int64_t n);

#ifdef __cplusplus
}
#endif

#endif
