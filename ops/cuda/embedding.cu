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

/* dwte[v, c] is the sum of dout over the positions holding token v, added
 * in position order (so the result does not depend on thread timing, and
 * equals the CPU's order). One thread per (v, c) scanning every position
 * (the first version) cost V·C·B·T steps: 133 ms of bench_gpt's step at
 * GPT-2's V = 50304 on an H200. Instead the positions are sorted by token,
 * stably (a counting sort: counts, an exclusive scan over the vocabulary,
 * each position's rank among the earlier positions of its token), and
 * each (v, c) thread adds only its token's positions. The rank costs
 * O((B·T)^2) comparisons in all, 34 M for 8192 positions. */
__global__ void token_counts_kernel(int *counts, const int32_t *tokens, int64_t BT,
                                    int64_t V) {
    PL_GRID_STRIDE(p, BT) {
        int32_t t = tokens[p];
        if (t >= 0 && t < V) atomicAdd(&counts[t], 1);
    }
}

/* offsets[v] = Σ_{u<v} counts[u], offsets[V] = the total: one block, each
 * thread a contiguous range. */
__global__ void exclusive_scan_kernel(int *offsets, const int *counts, int64_t V) {
    __shared__ int part[PL_CUDA_THREADS];
    int64_t per = (V + blockDim.x - 1) / blockDim.x;
    int64_t b = threadIdx.x * per, e = b + per < V ? b + per : V;
    int s = 0;
    for (int64_t i = b; i < e; i++) s += counts[i];
    part[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        int run = 0;
        for (unsigned i = 0; i < blockDim.x; i++) {
            int v = part[i];
            part[i] = run;
            run += v;
        }
    }
    __syncthreads();
    int run = part[threadIdx.x];
    for (int64_t i = b; i < e; i++) {
        offsets[i] = run;
        run += counts[i];
    }
    if (threadIdx.x == blockDim.x - 1) offsets[V] = run;
}

__global__ void token_order_kernel(int *order, const int *offsets, const int32_t *tokens,
                                   int64_t BT, int64_t V) {
    PL_GRID_STRIDE(p, BT) {
        int32_t t = tokens[p];
        if (t < 0 || t >= V) continue;
        int rank = 0;
        for (int64_t q = 0; q < p; q++) rank += tokens[q] == t;
        order[offsets[t] + rank] = (int)p;
    }
}

__global__ void embedding_wte_grad_kernel(float *dwte, const float *dout, const int *order,
                                          const int *offsets, int64_t C, int64_t V,
                                          int acc) {
    PL_GRID_STRIDE(i, V * C) {
        int64_t v = i / C, c = i % C;
        float s = 0.0f;
        for (int j = offsets[v]; j < offsets[v + 1]; j++) s += dout[(int64_t)order[j] * C + c];
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
    int64_t BT = B * T;
    int *scratch = NULL; /* counts [V], offsets [V + 1], order [BT] */
    cudaMallocAsync((void **)&scratch, (size_t)(2 * V + 1 + BT) * sizeof *scratch, s);
    int *counts = scratch, *offsets = scratch + V, *order = scratch + 2 * V + 1;
    cudaMemsetAsync(counts, 0, (size_t)V * sizeof *counts, s);
    token_counts_kernel<<<pl_cuda_blocks(BT), PL_CUDA_THREADS, 0, s>>>(counts, tokens, BT, V);
    exclusive_scan_kernel<<<1, PL_CUDA_THREADS, 0, s>>>(offsets, counts, V);
    token_order_kernel<<<pl_cuda_blocks(BT), PL_CUDA_THREADS, 0, s>>>(order, offsets, tokens,
                                                                     BT, V);
    embedding_wte_grad_kernel<<<pl_cuda_blocks(V * C), PL_CUDA_THREADS, 0, s>>>(
        dwte, dout, order, offsets, C, V, accumulate_wte);
    cudaFreeAsync(scratch, s);
    embedding_wpe_grad_kernel<<<pl_cuda_blocks(T * C), PL_CUDA_THREADS, 0, s>>>(dwpe, dout, B, T, C,
                                                                  accumulate_wpe);
}
