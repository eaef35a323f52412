/* Helpers the built-in ops share, written against the public API only (as
 * a user's op would be): operand checks for shape functions, and the CUDA
 * guard. PL_WITH_CUDA is defined by the build when StarPU has CUDA workers
 * and the kernels in ops/cuda/ are linked in. */
#ifndef PL_OPS_COMMON_H
#define PL_OPS_COMMON_H

#include <stdio.h>

#include "pleiades.h"

#ifdef PL_WITH_CUDA
#define PL_CUDA_KERNEL(f) f
#else
#define PL_CUDA_KERNEL(f) NULL
#endif

/* A float32 per-sample operand with at least one feature dim. A wrong
 * dtype is a wrong argument (INVALID_ARGUMENT), a missing feature dim a
 * shape mismatch. */
static inline pl_status pl_ops_check_float(const char *op, const pl_tensor_t *x) {
    char s[96];
    if (pl_tensor_dtype(x) != PL_DTYPE_F32)
        return pl_error(PL_STATUS_INVALID_ARGUMENT,
                        "%s: '%s' %s is int32, must be a float32 activation", op,
                        pl_tensor_name(x), pl_tensor_shape_str(x, s, sizeof s));
    if (pl_tensor_shape(x, NULL) < 1)
        return pl_error(PL_STATUS_SHAPE_MISMATCH,
                        "%s: '%s' %s must be a float activation with at least one "
                        "feature dim", op, pl_tensor_name(x),
                        pl_tensor_shape_str(x, s, sizeof s));
    return PL_STATUS_OK;
}

static inline int64_t pl_ops_last_dim(const pl_tensor_t *t) {
    int64_t shape[PL_MAX_DIMS];
    int n = pl_tensor_shape(t, shape);
    return n > 0 ? shape[n - 1] : 1;
}

/* Rows per sample when the last dim is the feature dim ([T, C]: T). */
static inline int64_t pl_ops_rows(const pl_tensor_t *t) {
    int64_t shape[PL_MAX_DIMS], r = 1;
    int n = pl_tensor_shape(t, shape);
    for (int i = 0; i + 1 < n; i++) r *= shape[i];
    return r;
}

/* The layout's output takes x's shape. */
static inline void pl_ops_same_shape(pl_op_layout *l, const pl_tensor_t *x) {
    l->out_ndim = pl_tensor_shape(x, l->out_shape);
}

/* The shape function of elementwise ops (ops/elementwise.c): every
 * operand a float activation of one shape, the output that shape, a few
 * FLOPs per element. */
pl_status pl_ops_shape_elementwise(const pl_op_def *def, const char *op,
                                   pl_tensor_t *const *in, const void *attrs,
                                   pl_op_layout *l);

#endif
