/* 16-bit floating-point storage formats (mixed precision): IEEE binary16
 * (fp16: 5 exponent bits, 10 mantissa bits, largest finite 65504) and
 * bfloat16 (bf16: fp32's 8 exponent bits, 7 mantissa bits). Values are
 * stored in these formats and computed in fp32: kernels widen on read and
 * round on write, so the arithmetic is fp32's and only storage rounds.
 *
 * Rounding is to nearest, ties to even (what PyTorch's .half() and
 * .bfloat16() do); a value beyond a format's range becomes ±inf (that is
 * what an fp16 overflow is, and what the loss scaler then detects); NaN
 * stays NaN. Pure integer and fp32 arithmetic, the same on every
 * platform, so 16-bit runs stay bitwise reproducible. The scalar
 * conversions are also device functions in CUDA code (util/half_cuda.cu),
 * so a GPU rounds exactly as the CPU does. */
#ifndef PL_UTIL_HALF_H
#define PL_UTIL_HALF_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define PL_HALF_FN static inline __host__ __device__
#else
#define PL_HALF_FN static inline
#endif

PL_HALF_FN uint32_t pl_float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

PL_HALF_FN float pl_bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* bf16 is fp32's upper half: widening is exact. */
PL_HALF_FN float pl_bf16_to_float(uint16_t h) { return pl_bits_float((uint32_t)h << 16); }

PL_HALF_FN uint16_t pl_bf16_from_float(float f) {
    uint32_t u = pl_float_bits(f);
    /* Adding 0x7fff plus the kept part's lowest bit rounds half to even;
     * a carry into the exponent is the correct rounding up (to inf past
     * the largest finite bf16). NaN is kept quiet instead. Both are
     * formed and one selected, so loops over buffers vectorise. */
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t quiet_nan = (u >> 16) | 0x40u;
    uint32_t is_nan = 0u - (uint32_t)((u & 0x7fffffffu) > 0x7f800000u); /* all ones */
    return (uint16_t)((rounded & ~is_nan) | (quiet_nan & is_nan));
}

PL_HALF_FN float pl_fp16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7fffu;
    if (em >= 0x7c00u) return pl_bits_float(sign | 0x7f800000u | ((em & 0x3ffu) << 13));
    if (em >= 0x0400u) return pl_bits_float(sign | ((em << 13) + ((127u - 15u) << 23)));
    /* Zero or subnormal: em · 2^-24, exact in fp32. */
    float f = (float)em * 0x1p-24f;
    return pl_bits_float(sign | pl_float_bits(f));
}

PL_HALF_FN uint16_t pl_fp16_from_float(float f) {
    uint32_t u = pl_float_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);       /* NaN */
    if (a >= 0x47800000u) return (uint16_t)(sign | 0x7c00u);      /* >= 2^16: inf */
    if (a < 0x38800000u) {
        /* Below fp16's smallest normal (2^-14): adding 0.5 (2^-1) puts the
         * value's 2^-24 units into fp32's low mantissa bits, and the fp32
         * addition itself rounds to nearest even at exactly that unit. */
        float t = pl_bits_float(a) + 0.5f;
        return (uint16_t)(sign | (pl_float_bits(t) - 0x3f000000u));
    }
    /* Normal: rebias the exponent and round the 13 dropped bits to nearest
     * even; a carry may round up into the next binade or to inf (65520 and
     * above), which is correct. */
    uint32_t odd = (a >> 13) & 1u;
    a += ((uint32_t)(15 - 127) << 23) + 0xfffu + odd;
    return (uint16_t)(sign | (a >> 13));
}

/* One value in the format `bf16` selects (else fp16). */
PL_HALF_FN float pl_half_widen(bool bf16, uint16_t h) {
    return bf16 ? pl_bf16_to_float(h) : pl_fp16_to_float(h);
}
PL_HALF_FN uint16_t pl_half_round(bool bf16, float x) {
    return bf16 ? pl_bf16_from_float(x) : pl_fp16_from_float(x);
}

#ifdef __cplusplus
extern "C" {
#endif
/* Whole buffers in host memory; bf16 selects the format (else fp16). */
void pl_half_to_float(bool bf16, const uint16_t *src, float *dst, int64_t n);
void pl_half_from_float(bool bf16, const float *src, uint16_t *dst, int64_t n);
#ifdef __cplusplus
}
#endif

#endif
