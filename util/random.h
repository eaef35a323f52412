/* splitmix64 (Steele, Lea, Flood 2014): the library's one PRNG, shared by
 * the batch loader's shuffles (data/loader.c), the text windows
 * (data/text.c) and parameter initialisation (engine/param_init.c).
 *
 * Every stream is a pure function of its seed and uses only 64-bit integer
 * arithmetic, so shuffles, batches and initial weights are the same on
 * every platform and compiler. The sequences are part of the documented
 * behaviour (tests pin exact orders and values): any change here changes
 * them all. Header-only (static inline) so that each caller's hot loop can
 * inline the generator. */
#ifndef PL_UTIL_RANDOM_H
#define PL_UTIL_RANDOM_H

#include <stdint.h>

/* The splitmix64 increment: 2^64 / golden ratio, odd. */
#define PL_GOLDEN_GAMMA UINT64_C(0x9E3779B97F4A7C15)

/* The splitmix64 finaliser: a bijective mix in which every input bit
 * affects every output bit. */
static inline uint64_t pl_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* Advances the stream and returns its next 64 random bits. */
static inline uint64_t pl_splitmix64_next(uint64_t *state) {
    *state += PL_GOLDEN_GAMMA;
    return pl_mix64(*state);
}

/* The starting state of stream `index` of a seed (an epoch's shuffle, a
 * text batch). Both inputs are mixed, not simply added, because splitmix64
 * streams whose states differ by a multiple of the gamma are the same
 * sequence shifted: seed + index * gamma would make stream 1 replay stream
 * 0's numbers one step later. */
static inline uint64_t pl_stream_state(uint64_t seed, int64_t index) {
    return pl_mix64(seed ^ pl_mix64((uint64_t)index + PL_GOLDEN_GAMMA));
}

/* Uniform in [0, bound) for bound > 0. Rejecting draws below
 * 2^64 mod bound removes the modulo bias, so every value (and every
 * permutation built from them) is equally likely. */
static inline uint64_t pl_random_below(uint64_t *state, uint64_t bound) {
    uint64_t threshold = (0 - bound) % bound;
    uint64_t r;
    do
        r = pl_splitmix64_next(state);
    while (r < threshold);
    return r % bound;
}

#endif
