/* The op test table (op_table.c), in the spirit of ggml's test-backend-ops:
 * one line per built-in op and shape, read by every per-op test so that
 * adding an op to the tests is adding lines here:
 *   test_ops.c          (a) pl_gradcheck against central finite differences
 *                           on the CPU, every line without OP_NO_GRADCHECK;
 *                       (b) PyTorch's values (reference/ops_reference.txt)
 *                           for the lines that name their `reference` arrays;
 *   test_backend_ops.c  (c) CUDA against CPU, every line, op by op.
 * Every failure names the op, its operand shapes and the pass:
 *   F  the forward pass (the output);
 *   B  an input gradient (backward_input: what a B task computes);
 *   W  the parameters' gradients (backward_weight: a W task).
 *
 * Public API only, like the tests that use it. */
#ifndef PL_TESTS_OP_TABLE_H
#define PL_TESTS_OP_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "pleiades.h"

/* One operand's per-sample shape (the batch dim is implicit). */
typedef struct op_operand {
    pl_dtype dtype;
    int ndim;
    int64_t shape[PL_MAX_DIMS];
} op_operand;

enum op_case_flags {
    /* Too large for finite differences (two forward passes per value):
     * shapes for the backend comparison, whose GPU kernels need rows
     * longer than a warp or a block to take every path. */
    OP_NO_GRADCHECK = 1u,
    /* Reference check: an input gradient's error is relative to the row's
     * dout as well as to its own values. Softmax's y ⊙ (dy − ⟨dy, y⟩)
     * cancels where a row is peaked (y = 1 − 2e−8 is 1 in float), so its
     * error scales with dy (PyTorch's float32 kernel errs alike), not with
     * the tiny dx. */
    OP_REF_DOUT_FLOOR = 2u,
};

typedef struct op_case {
    const pl_op_def *def;
    const void *attrs;   /* def->attrs_size bytes, or NULL */
    const char *variant; /* what tells lines of one op apart ("p=0.3"), or NULL */
    /* def->n_inputs inputs, then def->n_shared_params shared parameters. */
    op_operand in[PL_OP_MAX_INPUTS + PL_OP_MAX_PARAMS];
    int32_t int_range; /* int32 inputs: values in [0, int_range); 0: 2 */
    int64_t samples;   /* pl_gradcheck's samples; 0: its default (2) */
    uint64_t seed;     /* pl_gradcheck's seed; 0: its default (1) */
    /* Prefix of the line's arrays in reference/ops_reference.txt
     * (reference/ops_reference.py: "<prefix>.<operand>", ".dout", ".out",
     * ".d<operand>", ".<param>", ".d<param>"; scalar outputs ".loss"), or
     * NULL: PyTorch has not computed this line. */
    const char *reference;
    unsigned flags; /* enum op_case_flags */
} op_case;

extern const op_case op_table[];
extern const size_t op_table_size;

/* Operands the line gives (inputs and shared parameters). */
int op_case_operands(const op_case *c);

/* "pl_rmsnorm [B, 3, 16]", "pl_matmul(ta=1 tb=0) [B, 2, 4, 3] x [B, 2, 4, 5]",
 * "pl_cross_entropy [B, 3, 6] x i32[B, 3]": the op, its variant and its
 * operands' shapes, as every message of the per-op tests names them. */
const char *op_case_describe(const op_case *c, char *buf, size_t size);

/* Counts a failure (tu_failures) and prints
 *   FAIL <op_case_describe>, pass <F|B|W>: <message>
 * so that a log line alone says which op, shape and pass broke. */
void op_case_fail(const op_case *c, char pass, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The line's pl_gradcheck options (samples, seed, int_range). */
pl_gradcheck_options op_case_gradcheck_options(const op_case *c);

/* Which pass a failed pl_gradcheck of the line points at, from its
 * message and worst value: F when the forward kernel failed; W when they
 * name the backward_weight kernel or a parameter (in the private graph
 * pl_gradcheck builds, the op's own are "op.<param>" and shared ones
 * carry their input names); else B. */
char op_case_gradcheck_pass(const op_case *c, const char *message, const char *worst);

#endif
