/* CUDA side of ops/embedding.c: token + position embedding and its
 * weight gradients, summed in position order without atomics. */
#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.h"

__global__ void embedding_forward_kernel(float *out, const int32_t *tokens,
                                         const float *wte, const float *wpe,
                                         int64_t B, int64_t T, int64_t C, int64_t V) {
    PL_GRID_STRIDE(i, B * T * C) {
        int64_t c = i % C, bt = i / C, t = bt % T;
        int32_t tok = tokens[bt];
        out[i] = tok >= 0 && tok < V ? wte[(int64_t)tok * C + c] + wpe[t * C + c] : 0.0f;
    }
}

__global__ void count_bad_tokens_kernel(double *err, const int32_t *tokens,
                                        int64_t n, int64_t V) {
    __shared__ double shared[PL_CUDA_THREADS];
    double bad = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        bad += tokens[i] < 0 || tokens[i] >= V ? 1.0 : 0.0;
    bad = pl_block_sum(bad, shared);
    if (threadIdx.x == 0) *err = bad;
}

/* dwte[v, c]: one thread per (v, c) scans the tokens in order — no atomics,
 * so the sum of repeated tokens is formed in position order. */
__global__ void embedding_wte_grad_kernel(float *dwte, const float *dout,
                                          const int32_t *tokens, int64_t BT,
                                          int64_t C, int64_t V, int acc) {
    PL_GRID_STRIDE(i, V * C) {
        int64_t v = i / C, c = i % C;
        float s = 0.0f;
        for (int64_t p = 0; p < BT; p++)
            if (tokens[p] == v) s += dout[p * C + c];
        dwte[i] = acc ? dwte[i] + s : s;
    }
}

__global__ void embedding_wpe_grad_kernel(float *dwpe, const float *dout, int64_t B,
                                          int64_t T, int64_t C, int acc) {
    PL_GRID_STRIDE(i, T * C) {
        float s = 0.0f;
        for (int64_t b = 0; b < B; b++) s += dout[b * T * C + i];
        dwpe[i] = acc ? dwpe[i] + s : s;
    }
}

extern "C" void pl_cuda_embedding_forward(cudaStream_t s, float *out, double *err,
                                          const int32_t *tokens, const float *wte,
                                          const float *wpe, int64_t B, int64_t T,
                                          int64_t C, int64_t V) {
    embedding_forward_kernel<<<pl_cuda_blocks(B * T * C), PL_CUDA_THREADS, 0, s>>>(out, tokens, wte,
                                                                     wpe, B, T, C, V);
    count_bad_tokens_kernel<<<1, PL_CUDA_THREADS, 0, s>>>(err, tokens, B * T, V);
}

extern "C" void pl_cuda_embedding_backward_weight(cudaStream_t s, float *dwte,
                                                  float *dwpe, const float *dout,
                                                  const int32_t *tokens, int64_t B,
                                                  int64_t T, int64_t C, int64_t V,
                                                  int accumulate_wte,
                                                  int accumulate_wpe) {
    embedding_wte_grad_kernel<<<pl_cuda_blocks(V * C), PL_CUDA_THREADS, 0, s>>>(
        dwte, dout, tokens, B * T, C, V, accumulate_wte);
    embedding_wpe_grad_kernel<<<pl_cuda_blocks(T * C), PL_CUDA_THREADS, 0, s>>>(dwpe, dout, B, T, C,
                                                                  accumulate_wpe);
}
