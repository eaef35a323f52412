/* Helpers shared by the C tests (library pl_test_util, tests/CMakeLists.txt):
 * the failure count behind CHECK, a check of a failed call's status and
 * message, a scratch directory, whole-file reads and a fixed PRNG.
 *
 * Every test prints one "FAIL ..." line per failed check and exits non-zero
 * when tu_failures is, so a run's log says what broke without a debugger. */
#ifndef PL_TESTS_TEST_UTIL_H
#define PL_TESTS_TEST_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pleiades.h"

/* Failed checks so far (CHECK, tu_expect_error and the helpers of
 * gradcheck_util.h and reference_util.h all count here). */
extern int tu_failures;

/* CHECK(cond, fmt, ...): on a false condition, counts a failure and prints
 * "FAIL file:line: message". A macro so that the line is the caller's. */
#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (!(cond)) {                                                        \
            tu_failures++;                                                    \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                       \
            printf(__VA_ARGS__);                                              \
            printf("\n");                                                     \
        }                                                                     \
    } while (0)

/* A failed call: the status it returned (or the thread's, for
 * constructors), and that pl_last_error() names `frag1` (and `frag2`;
 * either may be NULL). Passing checks print an "ok" line with the message,
 * so the log shows what users would read. `line` is the caller's. */
void tu_expect_error_at(const char *file, int line, const char *what,
                        pl_status got, pl_status want, const char *frag1,
                        const char *frag2);
#define tu_expect_error(line, ...) \
    tu_expect_error_at(__FILE__, (line), __VA_ARGS__)

/* Ends the test (status 1, "FAIL: timed out after N s (what?)") if it
 * still runs after `seconds`: for tests whose failure mode is a hang. */
void tu_time_limit(unsigned seconds, const char *what);

/* Whether a pipeline of `stages` stages cannot run on rt: with GPUs a
 * stage is a GPU (a CPU-only runtime has the workers the test asked for),
 * so under PLEIADES_DEVICE=cuda on a one-GPU machine the pipeline parts of
 * a test are skipped, saying so ("skip WHAT: ..."); the CPU suite runs
 * them. */
bool tu_pipeline_skipped(const pl_runtime_t *rt, int stages, const char *what);

/* malloc that never returns NULL (a test cannot go on without the memory);
 * n = 0 is fine. */
void *tu_xmalloc(size_t n);

/* ----------------------------------------------------- scratch directory */

/* Creates a fresh directory /tmp/<prefix>_XXXXXX for the test's files;
 * false (errno set) if it cannot. One per process. */
bool tu_scratch_create(const char *prefix);

/* Its path ("" before tu_scratch_create). */
const char *tu_scratch_dir(void);

/* out = "<scratch>/<name>". */
void tu_scratch_path(char *out, size_t size, const char *name);

/* Removes `path` and everything under it, without following symlinks
 * (tests create some that point outside). */
void tu_remove_tree(const char *path);

/* ---------------------------------------------------------------- files */

/* The whole file in a malloc'd buffer with a NUL after its `*len` bytes
 * (so text can be parsed as a string); NULL (errno set, *len = 0) if it
 * cannot be read. */
void *tu_read_file(const char *path, size_t *len);

/* ----------------------------------------------------------------- PRNG */

/* splitmix64, written out here rather than taken from util/random.h: test
 * inputs must not change when the library's generator does (tests of the
 * generator compare against their own transcriptions too). */
uint64_t tu_splitmix64(uint64_t *state);

/* Batch `index` of a synthetic classification stream, a function of the
 * index alone (as a resumable data position must be): `batch` samples of
 * `in` features uniform in [-1, 1), labelled 0..3 by the sum of the first
 * three. x[batch * in], y[batch]. */
void tu_class_batch(int64_t index, int batch, int in, float *x, int32_t *y);

/* `n_seq` byte sequences of `context` tokens with some structure (a noisy
 * ramp: +1 per position, +8 one time in four, modulo `vocab`) so training
 * moves, drawn from `*state`; targets are the tokens shifted by one.
 * tokens[n_seq * context], targets[n_seq * context]. */
void tu_ramp_tokens(uint64_t *state, int vocab, int context, int n_seq, int32_t *tokens,
                    int32_t *targets);

/* One training step of `e` on `batch` sequences (tokens and next-token
 * targets, the GPT builder's two inputs); a failure prints a FAIL line
 * naming step `step_no` and counts in tu_failures. The loss into *loss
 * (may be NULL). */
bool tu_train_tokens(pl_engine_t *e, const int32_t *tokens, const int32_t *targets,
                     int batch, int step_no, double *loss);

/* Every parameter of `g` as `e` holds it, in graph order, into dst (NULL:
 * count only); the number of floats, -1 on failure. */
int64_t tu_read_params(pl_graph_t *g, pl_engine_t *e, float *dst);

#endif
