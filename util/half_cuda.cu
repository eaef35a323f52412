/* 16-bit storage on the GPU (util/half_cuda.h): buffers widened to fp32
 * and rounded back with half.h's conversions (device functions there), so
 * a value rounds to the same bits on the GPU as on the CPU. */
#include "util/half.h"
#include "util/half_cuda.h"

enum { THREADS = 256, MAX_BLOCKS = 65535 };

static unsigned blocks_for(int64_t n) {
    int64_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < MAX_BLOCKS ? (b > 0 ? b : 1) : MAX_BLOCKS);
}

__global__ void half_to_float_kernel(int bf16, const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = pl_half_widen(bf16, src[i]);
}

__global__ void half_from_float_kernel(int bf16, const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = pl_half_round(bf16, src[i]);
}

extern "C" void pl_cuda_half_to_float(cudaStream_t s, int bf16, const uint16_t *src,
                                      float *dst, int64_t n) {
    if (n > 0) half_to_float_kernel<<<blocks_for(n), THREADS, 0, s>>>(bf16, src, dst, n);
}

extern "C" void pl_cuda_half_from_float(cudaStream_t s, int bf16, const float *src,
                                        uint16_t *dst, int64_t n) {
    if (n > 0)
        half_from_float_kernel<<<blocks_for(n), THREADS, 0, s>>>(bf16, src, dst, n);
}

