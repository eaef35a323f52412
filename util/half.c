/* Buffer conversions between fp32 and the 16-bit formats (half.h). The
 * bf16 loops are branch-free, so the compiler vectorises them; fp16 uses
 * the x86 F16C instructions where the CPU has them (checked at run time:
 * the same results as the portable code, which the tests compare against
 * the compiler's _Float16), the portable code elsewhere. They run once
 * per operand per task, far cheaper than the kernel. */
#include "util/half.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define PL_HAVE_F16C_PATH 1

/* CPUID rather than __builtin_cpu_supports("f16c"), which clang 14 (the
 * fuzzing build's compiler) does not know: F16C and AVX, and the OS saving
 * the YMM registers (OSXSAVE, then XCR0's SSE and AVX state bits). */
static bool have_f16c(void) {
    static int has = -1; /* a benign race: every thread computes the same */
    if (has < 0) {
        unsigned a, b, c, d;
        bool ok = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_OSXSAVE) && (c & bit_AVX) &&
                  (c & bit_F16C);
        if (ok) {
            unsigned lo, hi;
            __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            ok = (lo & 6) == 6;
        }
        has = ok;
    }
    return has;
}

__attribute__((target("avx,f16c"))) static void fp16_to_float_f16c(const uint16_t *src,
                                                                   float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = pl_fp16_to_float(src[i]);
}

__attribute__((target("avx,f16c"))) static void fp16_from_float_f16c(const float *src,
                                                                     uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) dst[i] = pl_fp16_from_float(src[i]);
}
#endif

void pl_half_to_float(bool bf16, const uint16_t *src, float *dst, int64_t n) {
    if (bf16) {
        for (int64_t i = 0; i < n; i++) dst[i] = pl_bf16_to_float(src[i]);
        return;
    }
#ifdef PL_HAVE_F16C_PATH
    if (have_f16c()) {
        fp16_to_float_f16c(src, dst, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) dst[i] = pl_fp16_to_float(src[i]);
}

void pl_half_from_float(bool bf16, const float *src, uint16_t *dst, int64_t n) {
    if (bf16) {
        for (int64_t i = 0; i < n; i++) dst[i] = pl_bf16_from_float(src[i]);
        return;
    }
#ifdef PL_HAVE_F16C_PATH
    if (have_f16c()) {
        fp16_from_float_f16c(src, dst, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) dst[i] = pl_fp16_from_float(src[i]);
}
