/* CUDA side of ops/dropout.c: dropout's masked product and its identity
 * (see kernels.h). The keep decisions come from ops/dropout_mask.h, the
 * header the CPU kernels use, compiled here as device code: the same 64-bit
 * integer hash of (seed, global sample, element), so both devices keep the
 * same elements. The accumulating product is one fmaf, as on the CPU, so
 * gradients agree bit for bit too. */
#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.h"
#include "ops/dropout_mask.h"

/* One thread per element (grid-stride): its sample and index in the sample
 * from the flat index. Recomputing the sample's stream state per element
 * costs one more mix, cheaper than sharing it across threads. */
static __global__ void dropout_kernel(float *out, const float *inp, int64_t samples,
                                      int64_t numel, uint64_t seed, int64_t offset,
                                      uint64_t threshold, float scale, int acc) {
    PL_GRID_STRIDE(i, samples * numel) {
        int64_t s = i / numel, j = i - s * numel;
        uint64_t state = pl_dropout_sample_state(seed, offset + s);
        float m = pl_dropout_keep(state, j, threshold) ? scale : 0.0f;
        out[i] = acc ? fmaf(inp[i], m, out[i]) : inp[i] * m;
    }
}

static __global__ void dropout_add_kernel(float *out, const float *inp, int64_t n) {
    PL_GRID_STRIDE(i, n) out[i] += inp[i];
}

extern "C" void pl_cuda_dropout(cudaStream_t s, float *out, const float *inp,
                                int64_t samples, int64_t numel, float p, uint64_t seed,
                                int64_t sample_offset, int mask, int accumulate) {
    int64_t n = samples * numel;
    if (n <= 0) return;
    if (mask) {
        dropout_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(
            out, inp, samples, numel, seed, sample_offset, pl_dropout_threshold(p),
            pl_dropout_scale(p), accumulate);
    } else if (accumulate) {
        dropout_add_kernel<<<pl_cuda_blocks(n), PL_CUDA_THREADS, 0, s>>>(out, inp, n);
    } else if (out != inp) {
        cudaMemcpyAsync(out, inp, (size_t)n * sizeof *out, cudaMemcpyDeviceToDevice, s);
    }
}
