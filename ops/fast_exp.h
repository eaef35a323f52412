/* A vectorisable expf for the CPU kernels' elementwise loops.
 *
 * libm's expf and tanhf are opaque calls GCC cannot vectorise (without
 * -ffast-math), so a loop that calls them per element runs scalar: GELU's
 * tanhf made the GELU tasks the largest share of a GPT step's CPU time.
 * This is the Cephes expf: range reduction x = n·ln2 + r with a two-part
 * ln2 (Cody–Waite), a degree-5 polynomial for e^r − 1 − r on
 * |r| <= ln2/2, and 2^n put straight into the exponent bits. Max relative
 * error about 1 ulp over [-87, 87] (1.01 measured over every float there,
 * with or without FMA contraction; libm: < 1 ulp), far below
 * the tolerances of the gradient and PyTorch reference tests.
 *
 * Inputs are clamped to [-87, 87] so 2^n and the result stay normal
 * floats: e^x for x < −87 gives e^−87 ≈ 1.6e−38 instead of a denormal or 0,
 * and for x > 87 gives e^87 ≈ 6.1e37 instead of overflowing to inf (callers
 * here only use it where such values are negligible or saturate anyway:
 * 1/(1 + e^x) and softmax terms e^(s − max) <= 1). NaN propagates (through
 * y; no float to int conversion is involved). Everything is plain arithmetic on floats and
 * int32 bits so GCC turns the loops into AVX2/AVX-512 code. */
#ifndef PL_OPS_FAST_EXP_H
#define PL_OPS_FAST_EXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float pl_fast_expf(float x) {
    /* One select (|x| > 87) rather than two clamps: with two, GCC threads
     * the second comparison through the first and duplicates the caller's
     * code on each constant path (three divisions per vector in GELU). */
    x = fabsf(x) > 87.0f ? copysignf(87.0f, x) : x;
    /* n = round(x / ln2) with the 1.5·2^23 trick (round to nearest even):
     * t = 1.5·2^23 + n exactly, so t's bits are 0x4B400000 + n. */
    const float magic = 12582912.0f;
    float t = x * 1.44269504088896341f + magic;
    float n = t - magic;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float z = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * z + r + 1.0f;
    uint32_t bits;
    memcpy(&bits, &t, sizeof bits);
    bits = (bits - 0x4B400000u + 127u) << 23; /* 2^n, n in [-126, 127] */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return y * scale;
}

#endif
