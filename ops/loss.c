/* Losses and metrics: softmax cross-entropy, accuracy and mean — CPU
 * kernels, op definitions and builders. The softmax subtracts the row
 * maximum before exponentiating so large logits cannot overflow, and the
 * log-sum-exp is formed from that shifted sum.
 *
 * Scalar ops write 2 doubles per tile: the partial sum and the count of
 * invalid inputs (labels outside [0, K)); the engine adds the tiles and
 * divides by the batch's count (scalar_count per sample). */
#include <math.h>
#include <stdlib.h>

#include "ops/common.h"
#include "ops/fast_exp.h"
#include "ops/kernels.h"
#ifdef PL_WITH_CUDA
#include "ops/cuda/kernels.h"
#endif

/* Exponentials in blocks of this many classes: a row's e^(x − max) go
 * into dlogits when it is written (they become the softmax there), else
 * into a stack buffer of this size. */
enum { CE_BLOCK = 1024 };

double pl_cpu_cross_entropy_forward(float *dlogits, const float *logits,
                                    const int32_t *labels, int64_t N, int64_t K,
                                    int64_t classes, float scale, int64_t *bad_labels) {
    /* The exponentials are pl_fast_expf in float (vectorised; within
     * about 1 ulp of expf), summed in double for the log-sum-exp, and the
     * softmax is each exponential times 1/sum: one exponential per
     * logit. libm's double exp, twice per logit, made the loss task of
     * bench_gpt's step (1024 rows of 256 classes per tile) 1.7 ms.
     * Rows are K apart; only their first `classes` take part (a padded
     * vocabulary's extra columns get probability 0 and gradient 0). */
    float buf[CE_BLOCK];
    double total = 0.0;
    for (int64_t i = 0; i < N; i++) {
        const float *row = logits + i * K;
        float *drow = dlogits ? dlogits + i * K : NULL;
        int32_t y = labels[i];
        float maxv = row[0];
        for (int64_t k = 1; k < classes; k++) maxv = row[k] > maxv ? row[k] : maxv;
        double sum = 0.0;
        for (int64_t k0 = 0; k0 < classes; k0 += CE_BLOCK) {
            int64_t n = classes - k0 < CE_BLOCK ? classes - k0 : CE_BLOCK;
            float *e = drow ? drow + k0 : buf;
            for (int64_t k = 0; k < n; k++) e[k] = pl_fast_expf(row[k0 + k] - maxv);
            for (int64_t k = 0; k < n; k++) sum += e[k];
        }
        if (drow)
            for (int64_t k = classes; k < K; k++) drow[k] = 0.0f;
        if (y < 0 || y >= classes) {
            (*bad_labels)++;
            if (drow)
                for (int64_t k = 0; k < classes; k++) drow[k] = 0.0f;
            continue;
        }
        total += (double)maxv + log(sum) - row[y];
        if (drow) {
            float inv = (float)(1.0 / sum);
            for (int64_t k = 0; k < classes; k++) drow[k] = drow[k] * inv * scale;
            drow[y] -= scale;
        }
    }
    return total;
}

int64_t pl_cpu_accuracy_forward(const float *logits, const int32_t *labels, int64_t N,
                                int64_t K) {
    int64_t correct = 0;
    for (int64_t i = 0; i < N; i++) {
        const float *row = logits + i * K;
        int64_t best = 0;
        for (int64_t k = 1; k < K; k++)
            if (row[k] > row[best]) best = k;
        correct += best == labels[i];
    }
    return correct;
}

double pl_cpu_mean_forward(const float *inp, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += inp[i];
    return s;
}

void pl_cpu_mean_backward(float *dinp, int64_t n, float scale, int accumulate) {
    for (int64_t i = 0; i < n; i++) dinp[i] = accumulate ? dinp[i] + scale : scale;
}

/* ---------------------------------------------------------- the ops */

#define LOGITS(c) ((const float *)(c)->in[0])
#define LABELS(c) ((const int32_t *)(c)->in[1])
#define ROWS(c) pl_op_call_rows(c, 0)
#define CLASSES(c) pl_op_call_last_dim(c, 0)
/* The classes that count: pl_cross_entropy_padded's attribute, else all
 * (pl_cross_entropy has no attributes). */
#define VALID(c) \
    ((c)->attrs ? ((const pl_cross_entropy_attrs *)(c)->attrs)->classes : CLASSES(c))

static int cross_entropy_forward_cpu(pl_op_call *c) {
    int64_t bad = 0;
    double *sum = c->out;
    sum[0] = pl_cpu_cross_entropy_forward(NULL, LOGITS(c), LABELS(c), ROWS(c), CLASSES(c),
                                          VALID(c), 0.0f, &bad);
    sum[1] = (double)bad;
    return 0;
}
/* The loss task of a training step: loss and dlogits from one softmax. */
static int cross_entropy_loss_cpu(pl_op_call *c) {
    int64_t bad = 0;
    double *sum = c->out;
    sum[0] = pl_cpu_cross_entropy_forward(c->dinput, LOGITS(c), LABELS(c), ROWS(c), CLASSES(c),
                                          VALID(c), c->scale, &bad);
    sum[1] = (double)bad;
    return 0;
}
/* dlogits on its own (the logits' gradient is already partly written, or
 * the loss is not fused): recompute the softmax, add when accumulating. */
static int cross_entropy_backward_cpu(pl_op_call *c) {
    int64_t bad = 0, n = ROWS(c) * CLASSES(c);
    float *dst = c->dinput;
    if (c->accumulate && !(dst = malloc((size_t)n * sizeof *dst))) {
        if (c->error) snprintf(c->error, c->error_size, "out of memory");
        return 1;
    }
    pl_cpu_cross_entropy_forward(dst, LOGITS(c), LABELS(c), ROWS(c), CLASSES(c), VALID(c),
                                 c->scale, &bad);
    if (c->accumulate) {
        for (int64_t i = 0; i < n; i++) c->dinput[i] += dst[i];
        free(dst);
    }
    return 0;
}
static int accuracy_forward_cpu(pl_op_call *c) {
    double *count = c->out;
    count[0] = (double)pl_cpu_accuracy_forward(LOGITS(c), LABELS(c), ROWS(c), CLASSES(c));
    count[1] = 0.0;
    return 0;
}
static int mean_forward_cpu(pl_op_call *c) {
    double *sum = c->out;
    sum[0] = pl_cpu_mean_forward(c->in[0], c->samples * c->in_numel[0]);
    sum[1] = 0.0;
    return 0;
}
static int mean_backward_cpu(pl_op_call *c) {
    pl_cpu_mean_backward(c->dinput, c->samples * c->in_numel[0], c->scale, c->accumulate);
    return 0;
}

#ifdef PL_WITH_CUDA
static int cross_entropy_forward_gpu(pl_op_call *c) {
    pl_cuda_cross_entropy(c->stream, c->out, NULL, LOGITS(c), LABELS(c), ROWS(c),
                          CLASSES(c), VALID(c), 0.0f);
    return 0;
}
static int cross_entropy_loss_gpu(pl_op_call *c) {
    pl_cuda_cross_entropy(c->stream, c->out, c->dinput, LOGITS(c), LABELS(c), ROWS(c),
                          CLASSES(c), VALID(c), c->scale);
    return 0;
}
/* dlogits alone: a stream-ordered scratch takes the loss sum it also
 * computes. Adding into an existing gradient is left to the CPU kernel. */
static int cross_entropy_backward_gpu(pl_op_call *c) {
    if (c->accumulate) {
        snprintf(c->error, c->error_size, "accumulating into dlogits is CPU-only");
        return 1;
    }
    double *sum = NULL;
    if (cudaMallocAsync((void **)&sum, 2 * sizeof *sum, c->stream) != cudaSuccess) {
        snprintf(c->error, c->error_size, "cudaMallocAsync of 2 doubles failed");
        return 1;
    }
    pl_cuda_cross_entropy(c->stream, sum, c->dinput, LOGITS(c), LABELS(c), ROWS(c),
                          CLASSES(c), VALID(c), c->scale);
    cudaFreeAsync(sum, c->stream);
    return 0;
}
static int accuracy_forward_gpu(pl_op_call *c) {
    pl_cuda_accuracy(c->stream, c->out, LOGITS(c), LABELS(c), ROWS(c), CLASSES(c));
    return 0;
}
static int mean_forward_gpu(pl_op_call *c) {
    pl_cuda_mean_forward(c->stream, c->out, c->in[0], c->samples * c->in_numel[0]);
    return 0;
}
static int mean_backward_gpu(pl_op_call *c) {
    pl_cuda_mean_backward(c->stream, c->dinput, c->samples * c->in_numel[0], c->scale,
                          c->accumulate);
    return 0;
}
#endif

/* Logits [B, ..., K] against int32 labels [B, ...]: the leading dims must
 * agree. */
static pl_status classes_shape(const pl_op_def *def, const char *op,
                               pl_tensor_t *const *in, const void *attrs,
                               pl_op_layout *l) {
    (void)def, (void)attrs;
    pl_status st = pl_ops_check_float(op, in[0]);
    if (st) return st;
    const pl_tensor_t *labels = in[1];
    char sl[96], sy[96];
    if (pl_tensor_dtype(labels) != PL_DTYPE_I32)
        return pl_error(PL_STATUS_INVALID_ARGUMENT, "%s: labels '%s' must be an int32 input",
                        op, pl_tensor_name(labels));
    int64_t z[PL_MAX_DIMS], y[PL_MAX_DIMS];
    int nz = pl_tensor_shape(in[0], z), ny = pl_tensor_shape(labels, y);
    bool ok = ny == nz - 1;
    for (int i = 0; ok && i < ny; i++) ok = y[i] == z[i];
    if (!ok)
        return pl_error(PL_STATUS_SHAPE_MISMATCH,
                        "%s: logits '%s' %s and labels '%s' %s disagree (labels must "
                        "be the logits' shape without the class dim)", op,
                        pl_tensor_name(in[0]), pl_tensor_shape_str(in[0], sl, sizeof sl),
                        pl_tensor_name(labels), pl_tensor_shape_str(labels, sy, sizeof sy));
    l->flops = 5.0 * (double)pl_tensor_numel(in[0]);
    l->scalar_count = (double)pl_ops_rows(in[0]); /* the mean over rows */
    return PL_STATUS_OK;
}

static void explain_labels(const char *op, pl_tensor_t *const *in, const void *attrs,
                           double count, char *buf, size_t size) {
    int64_t classes = attrs ? ((const pl_cross_entropy_attrs *)attrs)->classes
                            : pl_ops_last_dim(in[0]);
    snprintf(buf, size, "%s: %.0f labels of '%s' outside [0, %lld)", op, count,
             pl_tensor_name(in[1]), (long long)classes);
}

/* classes_shape, and 1 <= classes <= K. */
static pl_status padded_shape(const pl_op_def *def, const char *op, pl_tensor_t *const *in,
                              const void *attrs, pl_op_layout *l) {
    pl_status st = classes_shape(def, op, in, attrs, l);
    if (st) return st;
    int64_t classes = ((const pl_cross_entropy_attrs *)attrs)->classes;
    int64_t K = pl_ops_last_dim(in[0]);
    if (classes < 1 || classes > K)
        return pl_error(PL_STATUS_INVALID_ARGUMENT,
                        "%s: classes %lld outside [1, %lld] (the logits' last dim)", op,
                        (long long)classes, (long long)K);
    return PL_STATUS_OK;
}

const pl_op_def pl_op_cross_entropy = {
    .name = "cross_entropy",
    .api = "pl_cross_entropy",
    .n_inputs = 2,
    .input_names = {"logits", "labels"},
    .shape = classes_shape,
    .output = PL_OP_OUTPUT_SCALAR,
    .forward = {.cpu = cross_entropy_forward_cpu,
                .cuda = PL_CUDA_KERNEL(cross_entropy_forward_gpu)},
    .loss_forward = {.cpu = cross_entropy_loss_cpu, .cuda = PL_CUDA_KERNEL(cross_entropy_loss_gpu)},
    /* Only when the loss task cannot write dlogits itself. */
    .backward_input = {{.cpu = cross_entropy_backward_cpu,
                        .cuda = PL_CUDA_KERNEL(cross_entropy_backward_gpu)}},
    .backward_input_reads = PL_OP_READS_INPUTS,
    .counts_invalid = true,
    .explain_invalid = explain_labels,
};

/* The same kernels: VALID() reads the attribute. */
const pl_op_def pl_op_cross_entropy_padded = {
    .name = "cross_entropy_padded",
    .api = "pl_cross_entropy_padded",
    .n_inputs = 2,
    .input_names = {"logits", "labels"},
    .shape = padded_shape,
    .attrs_size = sizeof(pl_cross_entropy_attrs),
    .output = PL_OP_OUTPUT_SCALAR,
    .forward = {.cpu = cross_entropy_forward_cpu,
                .cuda = PL_CUDA_KERNEL(cross_entropy_forward_gpu)},
    .loss_forward = {.cpu = cross_entropy_loss_cpu, .cuda = PL_CUDA_KERNEL(cross_entropy_loss_gpu)},
    .backward_input = {{.cpu = cross_entropy_backward_cpu,
                        .cuda = PL_CUDA_KERNEL(cross_entropy_backward_gpu)}},
    .backward_input_reads = PL_OP_READS_INPUTS,
    .counts_invalid = true,
    .explain_invalid = explain_labels,
};

const pl_op_def pl_op_accuracy = {
    .name = "accuracy",
    .api = "pl_accuracy",
    .n_inputs = 2,
    .input_names = {"logits", "labels"},
    .shape = classes_shape,
    .output = PL_OP_OUTPUT_SCALAR,
    .forward = {.cpu = accuracy_forward_cpu, .cuda = PL_CUDA_KERNEL(accuracy_forward_gpu)},
};

pl_tensor_t *pl_cross_entropy(pl_graph_t *g, pl_tensor_t *logits, pl_tensor_t *labels) {
    pl_tensor_t *in[2] = {logits, labels};
    return pl_graph_op(g, &pl_op_cross_entropy, in, 2, NULL, NULL);
}

pl_tensor_t *pl_cross_entropy_padded(pl_graph_t *g, pl_tensor_t *logits, pl_tensor_t *labels,
                                     int64_t classes) {
    pl_tensor_t *in[2] = {logits, labels};
    pl_cross_entropy_attrs a = {classes};
    return pl_graph_op(g, &pl_op_cross_entropy_padded, in, 2, &a, NULL);
}

pl_tensor_t *pl_accuracy(pl_graph_t *g, pl_tensor_t *logits, pl_tensor_t *labels) {
    pl_tensor_t *in[2] = {logits, labels};
    return pl_graph_op(g, &pl_op_accuracy, in, 2, NULL, NULL);
}

static pl_status mean_shape(const pl_op_def *def, const char *op, pl_tensor_t *const *in,
                            const void *attrs, pl_op_layout *l) {
    (void)def, (void)attrs;
    pl_status st = pl_ops_check_float(op, in[0]);
    if (st) return st;
    l->flops = 5.0 * (double)pl_tensor_numel(in[0]);
    l->scalar_count = (double)pl_tensor_numel(in[0]); /* the mean over elements */
    return PL_STATUS_OK;
}

const pl_op_def pl_op_mean = {
    .name = "mean",
    .api = "pl_mean",
    .n_inputs = 1,
    .input_names = {"x"},
    .shape = mean_shape,
    .output = PL_OP_OUTPUT_SCALAR,
    .forward = {.cpu = mean_forward_cpu, .cuda = PL_CUDA_KERNEL(mean_forward_gpu)},
    .backward_input = {{.cpu = mean_backward_cpu, .cuda = PL_CUDA_KERNEL(mean_backward_gpu)}},
};

pl_tensor_t *pl_mean(pl_graph_t *g, pl_tensor_t *x) {
    return pl_graph_op(g, &pl_op_mean, &x, 1, NULL, NULL);
}
