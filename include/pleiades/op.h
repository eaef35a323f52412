/*
 * pleiades/op.h — ops as a public interface (part of pleiades.h): how a
 * user adds an op with its own CPU (and CUDA) kernels and backward pass.
 * Every built-in op (pl_linear, pl_layernorm, pl_attention, ...:
 * pleiades/ops.h) is written against exactly this interface (see ops/ in
 * the source tree).
 *
 * An op is a `pl_op_def` with static storage: a shape function that checks
 * the operands and declares the output and the parameters, a forward
 * kernel, an input-gradient kernel per differentiable input and one
 * weight-gradient kernel for all parameters. Each kernel is a CPU function
 * and optionally a CUDA one; the engine turns them into StarPU codelets and
 * submits one task per kernel and microbatch (tile), so a user op is
 * scheduled, pipelined, placed in chunks, traced and checkpointed like a
 * built-in one. Kernels see one tile: `samples` rows of every operand.
 * With pl_engine_options.fuse_tasks (the default) a CPU kernel may run
 * inside a StarPU task that runs its block's other kernels too, one after
 * another: a kernel gets everything through its pl_op_call and must not
 * look at StarPU's current task.
 *
 *   // y = x² (squared ReLU would be max(x, 0)²): no parameters
 *   static pl_status sq_shape(const pl_op_def *def, const char *op,
 *                             pl_tensor_t *const *in, const void *attrs,
 *                             pl_op_layout *l) {
 *       l->out_ndim = pl_tensor_shape(in[0], l->out_shape);  // same shape
 *       l->flops = 1.0 * pl_tensor_numel(in[0]);
 *       return PL_STATUS_OK;
 *   }
 *   static int sq_forward(pl_op_call *c) {
 *       const float *x = c->in[0]; float *y = c->out;
 *       for (int64_t i = 0; i < c->samples * c->in_numel[0]; i++) y[i] = x[i] * x[i];
 *       return 0;
 *   }
 *   static int sq_backward(pl_op_call *c) {  // dx (+)= 2x · dy
 *       const float *x = c->in[0];
 *       for (int64_t i = 0; i < c->samples * c->in_numel[0]; i++)
 *           c->dinput[i] = (c->accumulate ? c->dinput[i] : 0) + 2 * x[i] * c->dout[i];
 *       return 0;
 *   }
 *   static const pl_op_def SQUARE = {
 *       .name = "square", .n_inputs = 1, .shape = sq_shape,
 *       .forward = {.cpu = sq_forward},
 *       .backward_input = {{.cpu = sq_backward}},
 *       .backward_input_reads = PL_OP_READS_INPUTS,
 *   };
 *   pl_tensor_t *y = pl_graph_op(g, &SQUARE, &x, 1, NULL, "sq1");
 *
 * Gradients flow by accumulation: a kernel that writes a gradient adds to
 * it when `accumulate` is set (the tensor feeds several ops, or gradients
 * accumulate over microbatches and steps) and overwrites it otherwise.
 * pl_gradcheck (below) checks a def's kernels against central finite
 * differences in double precision.
 */
#ifndef PLEIADES_OP_H
#define PLEIADES_OP_H

#include "pleiades/graph.h"
#include "pleiades/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PL_OP_MAX_INPUTS 4 /* activation/input operands of one op */
#define PL_OP_MAX_PARAMS 4 /* parameters of one op (created + shared) */

/* One tile of one op, as a kernel sees it. Operand pointers are host
 * pointers on a CPU worker and device pointers on a CUDA worker (then
 * `stream` is the worker's cudaStream_t and `cublas` its cublasHandle_t:
 * launch asynchronously on the stream; the engine synchronises). Shapes are
 * per sample: operand i holds samples × in_numel[i] values, row-major. */
typedef struct pl_op_call {
    const char *op;            /* the op's name in the graph ("fc1") */
    const void *attrs;         /* the op's attributes (pl_graph_op copied them) */
    int64_t samples;           /* samples in this tile */
    int n_inputs, n_params;
    const void *in[PL_OP_MAX_INPUTS]; /* float, or int32 for int32 inputs */
    int in_ndim[PL_OP_MAX_INPUTS];
    int64_t in_shape[PL_OP_MAX_INPUTS][PL_MAX_DIMS];
    int64_t in_numel[PL_OP_MAX_INPUTS];
    const float *param[PL_OP_MAX_PARAMS]; /* shared parameters first */
    int param_ndim[PL_OP_MAX_PARAMS];
    int64_t param_shape[PL_OP_MAX_PARAMS][PL_MAX_DIMS];
    int64_t param_numel[PL_OP_MAX_PARAMS];
    /* Forward: the output. Activation outputs are float, samples ×
     * out_numel; scalar outputs (PL_OP_OUTPUT_SCALAR) are 2 doubles the
     * kernel stores: {partial sum over the tile, count of invalid input
     * values}. Backward kernels read the output only with
     * PL_OP_READS_OUTPUT (else NULL). */
    void *out;
    int out_ndim;
    int64_t out_shape[PL_MAX_DIMS];
    int64_t out_numel;
    /* A per-sample tensor the forward kernel saves for the backward ones
     * (attention probabilities), samples × saved_numel floats; NULL when the
     * layout declares none. */
    float *saved;
    int64_t saved_numel;
    /* Activation ops with counts_invalid: where the forward kernel stores
     * the number of invalid input values it met (0 when none). */
    double *invalid;
    /* Backward. `dout` is the output's gradient (NULL in the loss op's
     * own gradient, which is seeded by `scale`). An input-gradient kernel
     * writes dinput, the gradient of in[input]; the weight-gradient kernel
     * writes dparam[i] for every parameter. */
    const float *dout;
    int input;
    float *dinput;
    float *dparam[PL_OP_MAX_PARAMS];
    bool accumulate;                        /* dinput: add (true) or overwrite */
    bool accumulate_param[PL_OP_MAX_PARAMS];
    /* Loss ops: d loss / d (partial sum), i.e. 1 / (the batch's count) times
     * the gradient-accumulation factor. */
    float scale;
    /* Randomness, for stochastic ops such as dropout. Random numbers drawn
     * as a pure function of (seed, sample_offset + sample in the tile,
     * element index) are the same whatever the tiling, the pipeline
     * schedule or the device, so training stays bitwise reproducible.
     *   training: false in forward-only (evaluation) steps, where such an
     *     op must be deterministic (dropout is then the identity).
     *   seed: this op's seed for this training pass, mixed (splitmix64)
     *     from the graph's seed, the pass — its optimizer step and its
     *     forward_backward call since that step, so the micro-steps of
     *     gradient accumulation differ — and the op's index in the graph.
     *     Every task of the op in one pass (each tile's forward and
     *     backward) gets the same seed, so a backward kernel can recompute
     *     the forward's random numbers instead of saving them; a resumed
     *     checkpoint draws what an uninterrupted run would.
     *   sample_offset: the index in the batch of the tile's first sample.
     * pl_gradcheck passes training = true, a seed fixed by its options'
     * seed and offset 0. */
    bool training;
    uint64_t seed;
    int64_t sample_offset;
    void *stream, *cublas; /* CUDA workers only */
    /* cpu_bf16 / cuda_bf16 kernels only (all false otherwise): which float
     * operands hold bf16 values as stored rather than floats. dout follows out,
     * dinput follows in[input], dparam follows params. Int32 inputs,
     * scalar outputs and (force_outputs_fp32) the graph's output stay as
     * they are. */
    struct {
        bool in[PL_OP_MAX_INPUTS], params, out, saved;
    } bf16;
    /* A kernel that fails returns non-zero and may explain why here; the
     * step then fails naming the op, the kernel and this message. */
    char *error;
    size_t error_size;
} pl_op_call;

typedef int (*pl_op_kernel)(pl_op_call *call);

/* Rows of operand i in the tile when its last dim is the feature dim: a
 * [T, C] input has samples·T rows of C. */
static inline int64_t pl_op_call_rows(const pl_op_call *c, int i) {
    int64_t r = c->samples;
    for (int d = 0; d + 1 < c->in_ndim[i]; d++) r *= c->in_shape[i][d];
    return r;
}
static inline int64_t pl_op_call_last_dim(const pl_op_call *c, int i) {
    return c->in_ndim[i] ? c->in_shape[i][c->in_ndim[i] - 1] : 1;
}

/* One kernel on each kind of worker; cuda may be NULL (the tasks then run
 * on CPU workers; `--device cuda` reports ops without a CUDA kernel).
 *
 * cpu_bf16, optional: a CPU kernel for engines with precision bf16 that
 * takes the operands as stored, 16-bit ones as raw bf16 (uint16_t, as
 * call.bf16 says which), where `cpu` gets every operand widened to fp32
 * scratch by the engine and its outputs rounded back. It exists for
 * products a CPU computes faster in bf16 (AVX512-BF16: ops/gemm_bf16.h).
 * Returning PL_OP_DECLINED before writing anything hands the call to the
 * widening path and `cpu` (operands it does not expect in bf16, a CPU
 * without a fast bf16 product, a build without one).
 *
 * cuda_bf16, optional: the same for CUDA workers (device pointers,
 * call.stream and call.cublas set), e.g. tensor-core products through
 * cublasGemmEx; PL_OP_DECLINED hands the call to the widening path (in
 * GPU scratch) and `cuda`. */
typedef struct pl_op_kernels {
    pl_op_kernel cpu, cuda;
    pl_op_kernel cpu_bf16;
    pl_op_kernel cuda_bf16;
} pl_op_kernels;

#define PL_OP_DECLINED (-1000) /* a bf16 kernel's "widen and run cpu/cuda" */

typedef enum pl_op_output {
    PL_OP_OUTPUT_ACTIVATION = 0, /* float [B, out_shape...] */
    PL_OP_OUTPUT_SCALAR,         /* a loss or metric: mean of the per-tile
                                    sums over the batch (see scalar_count) */
} pl_op_output;

/* What a backward kernel reads besides the output's gradient; the engine
 * gives the task exactly these buffers (fewer buffers, fewer transfers). */
enum {
    PL_OP_READS_INPUTS = 1u, /* every input's values */
    PL_OP_READS_PARAMS = 2u, /* every parameter's values */
    PL_OP_READS_SAVED = 4u,  /* the forward's saved tensor */
    PL_OP_READS_OUTPUT = 8u, /* the output's values */
};

/* A parameter the op creates, "<op name>.<name>". */
typedef struct pl_op_param_decl {
    const char *name; /* static string, e.g. "weight" */
    int ndim;
    int64_t shape[PL_MAX_DIMS];
    pl_init init;
    float scale; /* U(-scale, scale) or N(0, scale²) */
} pl_op_param_decl;

/* What a shape function declares: filled in from a zeroed struct. */
typedef struct pl_op_layout {
    int out_ndim; /* activation outputs: per-sample shape (ignored for scalars) */
    int64_t out_shape[PL_MAX_DIMS];
    int n_params; /* parameters the op creates (after any shared ones) */
    pl_op_param_decl params[PL_OP_MAX_PARAMS];
    bool has_saved; /* a per-sample tensor saved for the backward pass */
    const char *saved_name; /* its name suffix ("att"), default "saved" */
    int saved_ndim;
    int64_t saved_shape[PL_MAX_DIMS];
    double flops;        /* forward FLOPs per sample (stage balancing) */
    double scalar_count; /* scalar outputs: per sample, what the sum is
                            divided by (rows, elements); default 1 */
} pl_op_layout;

typedef struct pl_op_def pl_op_def;

/* Activation recomputation (pl_engine_options.recompute): whether the
 * engine may run this op's forward again before its backward instead of
 * keeping its output and saved tensor from the forward pass. The forward
 * must then be a pure function of its operands, its attributes and the
 * call's seed (dropout masks are: pl_op_call.seed), so that the second run
 * writes the same bits as the first. */
typedef enum pl_op_recompute {
    PL_OP_RECOMPUTE_FULL = 0,  /* re-run under full recomputation (default) */
    PL_OP_RECOMPUTE_SELECTIVE, /* large activations for little compute
                                  (attention's core: scores, softmax,
                                  dropout): re-run under selective too */
    PL_OP_RECOMPUTE_NEVER,     /* never re-run (side effects, or a forward
                                  that must run once per pass): its
                                  outputs are always kept */
} pl_op_recompute;

/* Checks the operands and fills the layout. `op` names the op for messages
 * ("pl_linear 'fc1'"); `in` holds n_inputs inputs then n_shared_params
 * parameters. On a bad operand it returns pl_error(...) with a message
 * naming the op and the shapes at fault. */
typedef pl_status (*pl_op_shape_fn)(const pl_op_def *def, const char *op,
                                    pl_tensor_t *const *in, const void *attrs,
                                    pl_op_layout *layout);

struct pl_op_def {
    const char *name;  /* kind: generated op names, traces ("linear") */
    const char *api;   /* the call users know, for messages ("pl_linear");
                          default: name */
    int n_inputs;        /* 1..PL_OP_MAX_INPUTS activations or inputs */
    /* Operand names for messages ("x", "labels"); default "input 0". */
    const char *input_names[PL_OP_MAX_INPUTS + PL_OP_MAX_PARAMS];
    int n_shared_params; /* existing parameters passed after the inputs
                            (a weight tied to another op's) */
    size_t attrs_size;   /* bytes of attributes pl_graph_op copies */
    pl_op_shape_fn shape;
    pl_op_output output;
    pl_op_kernels forward;
    /* Per input: its gradient kernel; {NULL} = no gradient flows into it
     * (labels, tokens). */
    pl_op_kernels backward_input[PL_OP_MAX_INPUTS];
    /* All parameters' gradients in one task (required when the op has
     * parameters). */
    pl_op_kernels backward_weight;
    unsigned backward_input_reads;  /* PL_OP_READS_* */
    unsigned backward_weight_reads; /* PL_OP_READS_* */
    /* Scalar loss ops, optional: the forward and the gradient of input 0
     * in one task (cross-entropy's softmax is computed once); used when
     * the op is the graph's loss in a training step. */
    pl_op_kernels loss_forward;
    /* Inputs may hold invalid values (class labels, token ids): the
     * forward kernel counts them (scalar outputs: in out[1], else in
     * *invalid) and a step that meets any fails with explain_invalid's
     * message (default: "N invalid values"). */
    bool counts_invalid;
    void (*explain_invalid)(const char *op, pl_tensor_t *const *in,
                            const void *attrs, double count, char *buf,
                            size_t size);
    /* Samples interact (a batch statistic): the op sees the whole batch in
     * one task, so engines refuse microbatching and pipelines with it. */
    bool whole_batch;
    /* May the engine re-run the forward to save its activations? */
    pl_op_recompute recompute;
};

/* Adds an op: `in` holds def->n_inputs inputs/activations then
 * def->n_shared_params existing parameters (n_in is their total); attrs
 * points at def->attrs_size bytes (copied) or is NULL when it is 0. The
 * name names the op and prefixes its parameters; NULL generates one
 * ("square3"). Returns the output, or NULL with pl_last_error() naming the
 * op (a bad def, a failing shape function, a frozen graph). `def` must
 * outlive every graph and engine that uses it (static storage). */
pl_tensor_t *pl_graph_op(pl_graph_t *g, const pl_op_def *def,
                         pl_tensor_t *const *in, int n_in, const void *attrs,
                         const char *name);

/* Records an error for the calling thread (as a failing library call does)
 * and returns `status`: for shape functions and user code. */
pl_status pl_error(pl_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Introspection for shape functions. */
pl_dtype pl_tensor_dtype(const pl_tensor_t *t);
/* A parameter (model state), not a per-sample input or activation. */
bool pl_tensor_is_param(const pl_tensor_t *t);
/* "[B, 784]" for a per-sample tensor, "[10, 784]" for a parameter. */
const char *pl_tensor_shape_str(const pl_tensor_t *t, char *buf, size_t size);

/* ------------------------------------------------------- matrix product */

/* The fp32 matrix product the built-in ops' CPU kernels use, for kernels
 * of one's own: row-major, as cblas_sgemm(CblasRowMajor, ...):
 *   C[M, N] = alpha · op(A) · op(B) + beta · C,
 * op(A) [M, K] (A stored [K, M] when trans_a), op(B) [K, N] (B stored
 * [N, K] when trans_b), leading dimensions in elements; beta 0 ignores C's
 * old values. Runs on the calling thread alone (a StarPU worker runs one
 * task at a time; parallelism comes from the tiles). */
void pl_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
              const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
              int64_t ldc);
/* Which library runs it in this process: "oneDNN" (a build with Debian's
 * libdnnl-dev, on a CPU with AVX512: about twice OpenBLAS's speed on these
 * machines, whose OpenBLAS runs its AVX2 kernels) or "OpenBLAS".
 * PLEIADES_SGEMM=openblas|onednn chooses instead. */
const char *pl_sgemm_library(void);

/* ------------------------------------------------------- gradient check */

/* Checks an op's kernels against central finite differences in double
 * precision, like torch.autograd.gradcheck: builds the op on random inputs
 * of the given per-sample shapes (int32 inputs get values in
 * [0, int_range)), runs its CPU forward, input-gradient and
 * weight-gradient kernels directly (no StarPU) on `samples` samples with a
 * random output gradient, and compares every analytic gradient with
 * (f(x+h) − f(x−h)) / 2h of the scalar Σ dout·out evaluated in double.
 * Also checks that accumulate adds exactly what overwrite writes. Each
 * kernel gets the buffers an engine's task would give it: a backward
 * kernel the inputs, parameters, saved tensor and output only as its
 * backward_*_reads flags say (NULL otherwise); a backward kernel whose
 * result changes when an undeclared operand is poisoned (so reads what
 * the engine would pass as NULL) fails the check naming the missing
 * PL_OP_READS_ flag. */
typedef struct pl_gradcheck_options {
    int64_t samples;   /* default 2 */
    double eps;        /* step h, default 1e-3 */
    double tolerance;  /* max |analytic − numeric| / max(1, |numeric|),
                          default 2e-2 (fp32 kernels) */
    uint64_t seed;     /* default 1 */
    int32_t int_range; /* int32 inputs: values in [0, int_range), default 2 */
} pl_gradcheck_options;

typedef struct pl_gradcheck_result {
    double max_error;  /* worst relative difference over all gradients */
    char worst[96];    /* which value ("x[3]", "fc.weight[7]") */
    int checked;       /* gradient values compared */
} pl_gradcheck_result;

/* The op is built in a private graph from `shapes[i]` (ndim[i] dims,
 * dtypes[i]) for its n_inputs inputs; shared parameters are not supported
 * here. Returns PL_STATUS_OK when every gradient is within tolerance, else
 * PL_STATUS_INVALID_ARGUMENT with pl_last_error() naming the op and the
 * worst value; `result` (may be NULL) gets the figures either way. */
pl_status pl_gradcheck(const pl_op_def *def, const void *attrs, int n_inputs,
                       const int *ndim, const int64_t (*shapes)[PL_MAX_DIMS],
                       const pl_dtype *dtypes, const pl_gradcheck_options *opts,
                       pl_gradcheck_result *result);
pl_gradcheck_options pl_gradcheck_options_default(void);

/* The built-in ops' definitions (pl_op_linear, pl_op_rmsnorm, ...: what
 * pl_linear, pl_rmsnorm, ... add) are declared with their builders in
 * pleiades/ops.h; each is written against this interface (ops/<op>.c in
 * the source tree). */

#ifdef __cplusplus
}
#endif

#endif /* PLEIADES_OP_H */
