/* Dropout's keep decisions, written once for the CPU kernels (ops/dropout.c)
 * and the CUDA ones (ops/cuda/dropout.cu), which both include this header:
 * the functions are host and device code under nvcc, plain static inline C
 * otherwise, and use only 64-bit integer arithmetic, so both devices keep
 * exactly the same elements.
 *
 * Element j of global sample s (its index in the batch, not in the tile) is
 * kept when the top 32 bits of
 *     mix(state(seed, s) + (j + 1) · γ)
 * are below floor((1 − p) · 2^32): mix is splitmix64's finaliser, γ its
 * increment (the constants of util/random.h), so the decisions of one
 * sample are its own splitmix64 stream, and the stream's state is mixed
 * from (seed, s). A decision depends on nothing but (seed, s, j): not on
 * the tile that holds the sample, the order tasks run in, or the device.
 *
 * These sequences are part of the documented behaviour (the dropout test
 * pins masks against a transcription in tests/reference/dropout_reference.py):
 * a change here changes every mask. */
#ifndef PL_OPS_DROPOUT_MASK_H
#define PL_OPS_DROPOUT_MASK_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __CUDACC__
#define PL_DROPOUT_HD __host__ __device__
#else
#define PL_DROPOUT_HD
#endif

#define PL_DROPOUT_GAMMA UINT64_C(0x9E3779B97F4A7C15) /* util/random.h's γ */

/* splitmix64's finaliser (util/random.h's pl_mix64, which is host-only). */
static inline PL_DROPOUT_HD uint64_t pl_dropout_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* The keep threshold on 32 random bits: floor((1 − p) · 2^32), in
 * (0, 2^32] for p in [0, 1) (2^32 keeps everything: p = 0). Computed in
 * double, whose 53 bits hold it exactly. */
static inline PL_DROPOUT_HD uint64_t pl_dropout_threshold(float p) {
    return (uint64_t)((1.0 - (double)p) * 4294967296.0);
}

/* 1 / (1 − p) exactly as torch.nn.Dropout's CPU path forms it: PyTorch
 * divides its float32 mask of ones by 1 − p in float32 (1 − p itself is
 * exact or correctly rounded either way), so kept values are x times this
 * float, bit for bit. */
static inline PL_DROPOUT_HD float pl_dropout_scale(float p) {
    return 1.0f / (1.0f - p);
}

/* The stream state of global sample s. Mixed, not s·γ added to the seed:
 * streams whose states differ by a multiple of γ are the same sequence
 * shifted (see pl_stream_state in util/random.h). */
static inline PL_DROPOUT_HD uint64_t pl_dropout_sample_state(uint64_t seed, int64_t s) {
    return pl_dropout_mix(seed ^ pl_dropout_mix((uint64_t)s + PL_DROPOUT_GAMMA));
}

/* Whether element j of the sample whose stream state is `state` is kept. */
static inline PL_DROPOUT_HD bool pl_dropout_keep(uint64_t state, int64_t j,
                                                 uint64_t threshold) {
    return (pl_dropout_mix(state + ((uint64_t)j + 1) * PL_DROPOUT_GAMMA) >> 32) < threshold;
}

#endif
