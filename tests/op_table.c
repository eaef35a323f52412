/* The op test table: every built-in op with the shapes and flags its tests
 * run it on (op_table.h says who reads it and how). A new op adds its
 * lines here: small shapes that pl_gradcheck can afford, a line whose
 * `reference` names PyTorch's arrays if reference/ops_reference.py computes
 * it, and large shapes (OP_NO_GRADCHECK) for the CUDA kernels.
 *
 * The gradient-check lines keep the samples and seeds the checks had when
 * they lived in test_op_interface.c (defaults), test_ops_extra.c (3
 * samples, seeds 7.. and 40..) and test_dropout.c (3 samples, seeds
 * 11..), so each checks exactly the values it always did. */
#include "op_table.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "test_util.h"

/* An operand's per-sample shape: F32(3, 5) is a float [B, 3, 5]. */
#define NDIMS(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define F32(...) {PL_DTYPE_F32, NDIMS(__VA_ARGS__), {__VA_ARGS__}}
#define I32(...) {PL_DTYPE_I32, NDIMS(__VA_ARGS__), {__VA_ARGS__}}
#define I32_SCALAR {PL_DTYPE_I32, 0, {0}} /* one int32 per sample (a label) */

/* Attributes, named by what they hold. */
static const pl_linear_attrs out4 = {4}, out80 = {80};
static const pl_matmul_attrs ff = {false, false}, ft = {false, true}, tf = {true, false},
                             tt = {true, true};
static const pl_scale_attrs by_ref = {-1.5f}, /* reference/ops_reference.py's SCALE_FACTOR */
    by_quarter = {0.25f};
static const pl_dropout_attrs p03 = {0.3f}, p05 = {0.5f}, p0 = {0.0f};
static const pl_attention_attrs heads2 = {2}, heads4 = {4};
static const pl_embedding_attrs v7c4 = {7, 4}, v300c48 = {300, 48};
static const pl_cross_entropy_attrs classes5 = {5}, classes1000 = {1000};

const op_case op_table[] = {
    /* ------------------------------------------------ matrix products */
    {.def = &pl_op_linear, .attrs = &out4, .in = {F32(3, 5)}},
    {.def = &pl_op_linear, .attrs = &out80, .in = {F32(16, 96)}, .flags = OP_NO_GRADCHECK},
    {.def = &pl_op_linear_tied, .in = {F32(3, 5), F32(6, 5)}},
    {.def = &pl_op_linear_tied, .in = {F32(16, 64), F32(200, 64)},
     .flags = OP_NO_GRADCHECK},
    /* M, K, N = 3, 4, 5 (distinct, so that a kernel that mixed up a
     * transposition reads the wrong strides), every transpose combination
     * with one leading dim (a per-sample tensor has at most 3 dims: the
     * batch is the fourth), plus plain matrices. */
    {.def = &pl_op_matmul, .attrs = &ff, .variant = "ta=0 tb=0",
     .in = {F32(2, 3, 4), F32(2, 4, 5)},
     .samples = 3, .seed = 40, .reference = "matmul_ff"},
    {.def = &pl_op_matmul, .attrs = &ft, .variant = "ta=0 tb=1",
     .in = {F32(2, 3, 4), F32(2, 5, 4)},
     .samples = 3, .seed = 41, .reference = "matmul_ft"},
    {.def = &pl_op_matmul, .attrs = &tf, .variant = "ta=1 tb=0",
     .in = {F32(2, 4, 3), F32(2, 4, 5)},
     .samples = 3, .seed = 42, .reference = "matmul_tf"},
    {.def = &pl_op_matmul, .attrs = &tt, .variant = "ta=1 tb=1",
     .in = {F32(2, 4, 3), F32(2, 5, 4)},
     .samples = 3, .seed = 43, .reference = "matmul_tt"},
    {.def = &pl_op_matmul, .attrs = &ft, .variant = "ta=0 tb=1", .in = {F32(3, 4), F32(5, 4)},
     .samples = 3, .seed = 44},
    {.def = &pl_op_matmul, .attrs = &tf, .variant = "ta=1 tb=0", .in = {F32(4, 3), F32(4, 5)},
     .samples = 3, .seed = 45},
    {.def = &pl_op_matmul, .attrs = &ft, .variant = "ta=0 tb=1",
     .in = {F32(4, 40, 32), F32(4, 48, 32)},
     .flags = OP_NO_GRADCHECK},

    /* ---------------------------------------------------- elementwise */
    {.def = &pl_op_relu, .in = {F32(7)}},
    {.def = &pl_op_relu, .in = {F32(4, 1000)}, .flags = OP_NO_GRADCHECK},
    {.def = &pl_op_gelu, .in = {F32(2, 3)}},
    {.def = &pl_op_gelu, .in = {F32(4, 1000)}, .flags = OP_NO_GRADCHECK},
    {.def = &pl_op_silu, .in = {F32(6)}, .samples = 3, .seed = 13},
    {.def = &pl_op_silu, .in = {F32(2, 2, 3)}, .samples = 3, .seed = 14},
    {.def = &pl_op_silu, .in = {F32(4, 6)}, .reference = "silu"},
    {.def = &pl_op_silu, .in = {F32(4, 1000)}, .flags = OP_NO_GRADCHECK},
    {.def = &pl_op_add, .in = {F32(5), F32(5)}},
    {.def = &pl_op_add, .in = {F32(4, 1000), F32(4, 1000)}, .flags = OP_NO_GRADCHECK},
    {.def = &pl_op_mul, .in = {F32(5), F32(5)}, .samples = 3, .seed = 7},
    {.def = &pl_op_mul, .in = {F32(3, 4), F32(3, 4)}, .samples = 3, .seed = 8},
    {.def = &pl_op_mul, .in = {F32(3, 5), F32(3, 5)}, .reference = "mul"},
    {.def = &pl_op_mul, .in = {F32(4, 1000), F32(4, 1000)}, .flags = OP_NO_GRADCHECK},
    {.def = &pl_op_sub, .in = {F32(5), F32(5)}, .samples = 3, .seed = 9},
    {.def = &pl_op_sub, .in = {F32(3, 4), F32(3, 4)}, .samples = 3, .seed = 10},
    {.def = &pl_op_sub, .in = {F32(3, 5), F32(3, 5)}, .reference = "sub"},
    {.def = &pl_op_sub, .in = {F32(4, 1000), F32(4, 1000)}, .flags = OP_NO_GRADCHECK},
    {.def = &pl_op_scale, .attrs = &by_ref, .variant = "factor=-1.5", .in = {F32(7)},
     .samples = 3, .seed = 11},
    {.def = &pl_op_scale, .attrs = &by_quarter, .variant = "factor=0.25", .in = {F32(2, 3)},
     .samples = 3, .seed = 12},
    {.def = &pl_op_scale, .attrs = &by_ref, .variant = "factor=-1.5", .in = {F32(3, 5)},
     .reference = "scale"},
    {.def = &pl_op_scale, .attrs = &by_quarter, .variant = "factor=0.25", .in = {F32(4, 1000)},
     .flags = OP_NO_GRADCHECK},
    /* Dropout's mask is a fixed function of the check's fixed seed, so
     * pl_gradcheck sees a fixed differentiable function; p = 0 is the
     * identity. */
    {.def = &pl_op_dropout, .attrs = &p03, .variant = "p=0.3", .in = {F32(7)},
     .samples = 3, .seed = 11},
    {.def = &pl_op_dropout, .attrs = &p03, .variant = "p=0.3", .in = {F32(3, 5)},
     .samples = 3, .seed = 11},
    {.def = &pl_op_dropout, .attrs = &p05, .variant = "p=0.5", .in = {F32(7)},
     .samples = 3, .seed = 12},
    {.def = &pl_op_dropout, .attrs = &p05, .variant = "p=0.5", .in = {F32(3, 5)},
     .samples = 3, .seed = 12},
    {.def = &pl_op_dropout, .attrs = &p0, .variant = "p=0", .in = {F32(7)},
     .samples = 3, .seed = 13},
    {.def = &pl_op_dropout, .attrs = &p0, .variant = "p=0", .in = {F32(3, 5)},
     .samples = 3, .seed = 13},
    {.def = &pl_op_dropout, .attrs = &p03, .variant = "p=0.3", .in = {F32(4, 1000)},
     .flags = OP_NO_GRADCHECK},

    /* -------------------------------------------------- normalisation */
    {.def = &pl_op_layernorm, .in = {F32(3, 6)}},
    {.def = &pl_op_layernorm, .in = {F32(8, 768)}, .flags = OP_NO_GRADCHECK},
    {.def = &pl_op_rmsnorm, .in = {F32(6)}, .samples = 3, .seed = 15},
    {.def = &pl_op_rmsnorm, .in = {F32(3, 16)}, .samples = 3, .seed = 16},
    {.def = &pl_op_rmsnorm, .in = {F32(3, 8)}, .reference = "rmsnorm"},
    {.def = &pl_op_rmsnorm, .in = {F32(8, 1000)}, .flags = OP_NO_GRADCHECK},
    {.def = &pl_op_softmax, .in = {F32(6)}, .samples = 3, .seed = 17},
    {.def = &pl_op_softmax, .in = {F32(3, 5)}, .samples = 3, .seed = 18},
    {.def = &pl_op_softmax, .in = {F32(3, 7)},
     .reference = "softmax", .flags = OP_REF_DOUT_FLOOR},
    {.def = &pl_op_softmax, .in = {F32(8, 1500)}, .flags = OP_NO_GRADCHECK},

    /* ---------------------------------------------------- transformer */
    {.def = &pl_op_embedding, .attrs = &v7c4, .variant = "vocab=7 channels=4", .in = {I32(5)},
     .int_range = 7},
    {.def = &pl_op_embedding, .attrs = &v300c48, .variant = "vocab=300 channels=48",
     .in = {I32(32)},
     .int_range = 300, .flags = OP_NO_GRADCHECK},
    {.def = &pl_op_attention, .attrs = &heads2, .variant = "heads=2", .in = {F32(4, 12)}},
    {.def = &pl_op_attention, .attrs = &heads4, .variant = "heads=4", .in = {F32(32, 192)},
     .flags = OP_NO_GRADCHECK},

    /* --------------------------------------------- losses and metrics */
    {.def = &pl_op_cross_entropy, .in = {F32(3, 6), I32(3)}, .int_range = 6},
    {.def = &pl_op_cross_entropy, .in = {F32(8, 1000), I32(8)},
     .int_range = 1000, .flags = OP_NO_GRADCHECK},
    /* The padded columns' gradient must be 0 (finite differences agree:
     * the loss does not depend on them). */
    {.def = &pl_op_cross_entropy_padded, .attrs = &classes5, .variant = "classes=5",
     .in = {F32(3, 8), I32(3)}, .int_range = 5},
    {.def = &pl_op_cross_entropy_padded, .attrs = &classes1000, .variant = "classes=1000",
     .in = {F32(8, 1024), I32(8)}, .int_range = 1000, .flags = OP_NO_GRADCHECK},
    {.def = &pl_op_mse_loss, .in = {F32(5), F32(5)}, .samples = 3, .seed = 19},
    {.def = &pl_op_mse_loss, .in = {F32(3, 4), F32(3, 4)},
     .samples = 3, .seed = 20, .reference = "mse"},
    {.def = &pl_op_mse_loss, .in = {F32(8, 1000), F32(8, 1000)}, .flags = OP_NO_GRADCHECK},
    {.def = &pl_op_mean, .in = {F32(2, 4)}},
    {.def = &pl_op_mean, .in = {F32(8, 1000)}, .flags = OP_NO_GRADCHECK},
    {.def = &pl_op_accuracy, .in = {F32(4), I32_SCALAR}, .int_range = 4},
    {.def = &pl_op_accuracy, .in = {F32(8, 1000), I32(8)},
     .int_range = 1000, .flags = OP_NO_GRADCHECK},
};

const size_t op_table_size = sizeof op_table / sizeof *op_table;

int op_case_operands(const op_case *c) { return c->def->n_inputs + c->def->n_shared_params; }

/* Appends to buf (of `size`, holding strlen(buf) chars) what fmt says. */
static void append(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t size, const char *fmt, ...) {
    size_t n = strlen(buf);
    if (n + 1 >= size) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, size - n, fmt, ap);
    va_end(ap);
}

const char *op_case_describe(const op_case *c, char *buf, size_t size) {
    snprintf(buf, size, "%s", c->def->api ? c->def->api : c->def->name);
    if (c->variant) append(buf, size, "(%s)", c->variant);
    for (int i = 0; i < op_case_operands(c); i++) {
        const op_operand *o = &c->in[i];
        const bool param = i >= c->def->n_inputs; /* no batch dim */
        append(buf, size, "%s%s[%s", i ? " x " : " ", o->dtype == PL_DTYPE_I32 ? "i32" : "",
               param ? "" : "B");
        for (int d = 0; d < o->ndim; d++)
            append(buf, size, "%s%lld", d || !param ? ", " : "", (long long)o->shape[d]);
        append(buf, size, "]");
    }
    return buf;
}

void op_case_fail(const op_case *c, char pass, const char *fmt, ...) {
    char what[160], msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tu_failures++;
    printf("FAIL %s, pass %c: %s\n", op_case_describe(c, what, sizeof what), pass, msg);
}

pl_gradcheck_options op_case_gradcheck_options(const op_case *c) {
    pl_gradcheck_options o = pl_gradcheck_options_default();
    if (c->samples) o.samples = c->samples;
    if (c->seed) o.seed = c->seed;
    if (c->int_range) o.int_range = c->int_range;
    return o;
}

char op_case_gradcheck_pass(const op_case *c, const char *message, const char *worst) {
    if (strstr(message, "its forward kernel")) return 'F';
    if (strstr(message, "backward_weight")) return 'W';
    if (strstr(message, "backward_input") || strstr(message, "loss_forward")) return 'B';
    if (strncmp(worst, "op.", 3) == 0) return 'W';
    for (int i = c->def->n_inputs; i < op_case_operands(c); i++) {
        const char *name = c->def->input_names[i];
        size_t len = name ? strlen(name) : 0;
        if (len && strncmp(worst, name, len) == 0 && worst[len] == '[') return 'W';
    }
    return 'B';
}
