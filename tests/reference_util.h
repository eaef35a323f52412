/* Helpers shared by the tests against PyTorch references
 * (test_mlp_reference.c, test_gpt_reference.c): reading the .bin files the
 * scripts in tests/reference/ write, and the comparisons, which print
 * "OK name maxdiff ..." or "FAIL name maxdiff ..." per quantity and count
 * failures in tu_failures (test_util.h).
 *
 * A file that cannot be used (missing, truncated, another format or
 * version) ends the test with exit status 2 and a message saying how to
 * regenerate it; a failed library call (CHECK_PL, CHECK_PTR) with 1. */
#ifndef PL_TESTS_REFERENCE_UTIL_H
#define PL_TESTS_REFERENCE_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "pleiades.h"
#include "test_util.h"

#define CHECK_PL(call)                                                      \
    do {                                                                    \
        pl_status st_ = (call);                                             \
        if (st_ != PL_STATUS_OK) {                                          \
            fprintf(stderr, "FAIL %s: %s: %s\n", #call,                    \
                    pl_status_string(st_), pl_last_error());                \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

#define CHECK_PTR(ptr, what)                                                \
    do {                                                                    \
        if (!(ptr)) {                                                       \
            fprintf(stderr, "FAIL %s: %s\n", what, pl_last_error());        \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

/* ---------------------------------------------------------- file reading */

/* A little-endian cursor over a whole file read into memory. */
typedef struct tu_reader {
    unsigned char *data;          /* the file; free() it */
    size_t size;
    const unsigned char *p, *end; /* the next byte and the end of data */
    const char *path;
} tu_reader;

/* A reference format: <name>.bin, written by tests/reference/<name>.py. */
typedef struct tu_format {
    const char *name;      /* "mlp_reference" */
    const char *what;      /* "an MLP", as in "not an MLP reference file" */
    size_t header_bytes;   /* the fixed-size header, int32 magic first */
    int32_t magic, version;
} tu_format;

/* `test_<name> FILE.bin`: reads the file argv[1] names and checks that it
 * is at least a header long and has the format's magic and version (the
 * cursor is then just past them). */
void tu_open_reference(tu_reader *r, int argc, char **argv,
                       const tu_format *f);

/* Exits 2 unless the file has exactly `expect` bytes, the size its header
 * implies, so that a truncated or padded file is not half-compared. */
void tu_expect_size(const tu_reader *r, size_t expect);

/* Exits 2 unless n more bytes are left. */
void tu_need(tu_reader *r, size_t n);
uint32_t tu_rd_u32(tu_reader *r);
int32_t tu_rd_i32(tu_reader *r);
float tu_rd_f32(tu_reader *r);
/* n values into a malloc'd array. */
float *tu_rd_f32s(tu_reader *r, int64_t n);
int32_t *tu_rd_i32s(tu_reader *r, int64_t n);

/* What PyTorch computed, in the order both scripts write it after their
 * inputs: the initial parameters, the logits and loss of a forward pass on
 * the batch, the gradients, the losses of the AdamW steps (step k's before
 * its own update) and the parameters after them. */
typedef struct tu_reference {
    int n_params;
    float **p0, **grads, **p_final; /* [n_params][numel of each] */
    float *logits;                  /* [n_logits] */
    float loss;
    float *step_losses;             /* [n_steps] */
} tu_reference;

void tu_read_reference(tu_reader *r, tu_reference *ref, int n_params,
                       const int64_t *numel, int64_t n_logits, int n_steps);
void tu_reference_free(tu_reference *ref);

/* ----------------------------------------------------------- comparisons */

float tu_max_abs(const float *a, int64_t n);

/* max |got - ref| <= rtol * scale, where scale is max |ref| (or at least
 * `min_scale`). NaNs fail. */
void tu_check_array(const char *name, const float *got, const float *ref,
                    int64_t n, float rtol, float min_scale);

/* |got - ref| <= rtol * max(1, |ref|). */
void tu_check_scalar(const char *name, double got, double ref, double rtol);

/* ------------------------------------------------ the shared experiment */

/* CPU workers from PL_CPU_WORKERS when it is set. */
void tu_workers_from_env(pl_runtime_options *o);

/* The engine options of every reference run: the whole batch of
 * `batch_size` in 2 tiles, so that splitting the batch (and accumulating
 * gradients over tiles) is exercised, and the scripts' AdamW (weight decay
 * 0.01, betas 0.9/0.999, eps 1e-8) with learning rate `lr`. */
pl_engine_options tu_reference_options(int batch_size, float lr);

/* Exits 1 unless the graph has as many parameter values as the file:
 * nothing else could be compared meaningfully. */
void tu_check_param_count(const pl_graph_t *g, int64_t total);

/* Sets a parameter to the reference's initial values and reads it back:
 * the round trip must be exact, so that a broken setter is not mistaken
 * for a broken forward. */
void tu_load_param(pl_engine_t *e, pl_tensor_t *param, const float *values,
                   int64_t numel, const char *name);

/* Forward and backward on `batch` with the initial parameters: the output
 * against ref->logits[n_logits], the loss against ref->loss and, when
 * returned, the labels against labels[n_labels] (`labels_what` names them
 * in the OK/FAIL line). Returns the step's result. */
pl_step_result tu_check_first_step(pl_engine_t *e, const pl_batch *batch,
                                   const tu_reference *ref, int64_t n_logits,
                                   const int32_t *labels, int64_t n_labels,
                                   const char *labels_what);

/* The current values of `param` in a malloc'd array. */
float *tu_param_values(pl_engine_t *e, pl_tensor_t *param, int64_t numel);

/* The gradient of `param` after a backward pass, as "grad <name>". */
void tu_check_grad(pl_engine_t *e, pl_tensor_t *param, const char *name,
                   const float *ref, int64_t numel, float rtol);

/* Step 0's update, then steps 1..n-1 on `batch`: train_step k returns the
 * loss before its own update, i.e. step_losses[k]; the engine must count
 * n_steps optimizer steps at the end. */
void tu_check_train_steps(pl_engine_t *e, const pl_batch *batch,
                          const float *step_losses, int n_steps,
                          double rtol);

/* The test's last line and exit status: "[test] all checks passed" and 0,
 * or the number of failed checks and 1. */
int tu_report(const char *test);

/* ------------------------------------------------- text reference files */

/* The text format of the smaller references (tests/reference/<name>.py >
 * <name>.txt): a first line "<name> 1", then one array per line,
 * "<array> <count> <values...>". Loads `path` (a file that cannot be used
 * ends the test with status 2 saying how to regenerate it). */
void tu_text_load(const char *path, const char *name);
/* The array `array` with exactly n values (exit 2 otherwise: the script
 * and the test disagree on a shape). */
const double *tu_text_get(const char *array, int64_t n);
/* The same as floats (the files hold float32 values exactly); caller frees. */
float *tu_text_floats(const char *array, int64_t n);
/* Frees what tu_text_load read. */
void tu_text_free(void);

#endif
