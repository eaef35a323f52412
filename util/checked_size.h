/* Checked size arithmetic: the one place where products and sums of
 * dimensions, tiles, chunks and byte counts are computed when they size a
 * buffer. Every such computation goes through these helpers, so that a
 * shape or a number read from a file can never wrap around and make a
 * small allocation that a kernel then overruns.
 *
 * The bottom layer: no Pleiades includes, callable from every folder. */
#ifndef PL_UTIL_CHECKED_SIZE_H
#define PL_UTIL_CHECKED_SIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most elements one buffer handed to a task may hold. StarPU 1.3's
 * vector interface stores its length as a uint32_t, and OpenBLAS's CBLAS
 * (Debian's) and the CUDA kernels index with 32-bit ints, so INT32_MAX is
 * the limit every layer below can honour. Bigger buffers are refused (or,
 * for activations, split into more tiles) before anything is allocated. */
#define PL_MAX_BUFFER_ELEMS ((int64_t)INT32_MAX)

/* *out = a * b; false (and *out untouched) when a or b is negative or the
 * product does not fit in an int64_t. */
static inline bool pl_mul_i64(int64_t a, int64_t b, int64_t *out) {
    int64_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}

/* *out = a + b for non-negative a and b; false on overflow. */
static inline bool pl_add_i64(int64_t a, int64_t b, int64_t *out) {
    int64_t r;
    if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}

/* *out = a * b * c (e.g. samples × elements × bytes per element). */
static inline bool pl_mul3_i64(int64_t a, int64_t b, int64_t c, int64_t *out) {
    int64_t ab;
    return pl_mul_i64(a, b, &ab) && pl_mul_i64(ab, c, out);
}

/* *out = a * b as size_t, for allocation sizes. */
static inline bool pl_mul_size(size_t a, size_t b, size_t *out) {
    size_t r;
    if (__builtin_mul_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}

#endif
