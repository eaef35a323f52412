/* Buffer conversions between fp32 and the 16-bit formats (half.h). The
 * loops are branch-free per format, so the compiler vectorises the bf16
 * ones; they run once per operand per task, far cheaper than the kernel. */
#include "util/half.h"

void pl_half_to_float(bool bf16, const uint16_t *src, float *dst, int64_t n) {
    if (bf16)
        for (int64_t i = 0; i < n; i++) dst[i] = pl_bf16_to_float(src[i]);
    else
        for (int64_t i = 0; i < n; i++) dst[i] = pl_fp16_to_float(src[i]);
}

void pl_half_from_float(bool bf16, const float *src, uint16_t *dst, int64_t n) {
    if (bf16)
        for (int64_t i = 0; i < n; i++) dst[i] = pl_bf16_from_float(src[i]);
    else
        for (int64_t i = 0; i < n; i++) dst[i] = pl_fp16_from_float(src[i]);
}

void pl_half_round_float(bool bf16, float *x, int64_t n) {
    if (bf16)
        for (int64_t i = 0; i < n; i++) x[i] = pl_bf16_to_float(pl_bf16_from_float(x[i]));
    else
        for (int64_t i = 0; i < n; i++) x[i] = pl_fp16_to_float(pl_fp16_from_float(x[i]));
}
