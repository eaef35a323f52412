/* Helpers shared by the tests of pipelines across ranks
 * (test_pipeline_ranks.c, test_hybrid_parallel.c; in pl_test_util): the
 * four-block models both train, reading every parameter back, and the
 * comparison of two runs' losses and parameters. */
#ifndef PL_TESTS_RANKS_UTIL_H
#define PL_TESTS_RANKS_UTIL_H

#include <stdbool.h>
#include <stddef.h>

#include "pleiades.h"

/* Four blocks: an MLP of three hidden layers of 24 and a head over
 * `in` features and k classes, its logits the graph's output; or (gpt) a
 * GPT of two layers (vocab v, context t, 16 channels) between its
 * embedding and its tied LM head. NULL on failure. */
pl_graph_t *ru_build(bool gpt, int in, int k, int v, int t);

/* Every parameter in graph order, after pl_engine_gather_params (a
 * pipeline rank holds current values of its own stage's chunks only):
 * *params malloc'ed (freed first), *n its length. */
bool ru_collect(pl_engine_t *e, pl_graph_t *g, float **params, size_t *n);

/* |a - b| <= 2e-5 + 2e-4·|b| (test_data_parallel says why). */
bool ru_close(double a, double b);

/* Losses [from, steps) and parameters of `got` against `want`: equal
 * (bitwise), or close; under Adam (not bitwise) the parameters as a whole,
 * ||got - want|| <= 1e-4·||want||, since Adam magnifies rounding in single
 * elements whose gradient is noise. One failed check per kind at most. */
void ru_compare(const char *what, bool bitwise, bool adam, const double *got_loss,
                const double *want_loss, int from, int steps, const float *got,
                const float *want, size_t n);

#endif
