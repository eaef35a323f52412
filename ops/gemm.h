/* The library side of pl_sgemm (pleiades/op.h) for the built-in ops and
 * tests; ops/gemm.c says which library runs it where, and why. */
#ifndef PL_OPS_GEMM_H
#define PL_OPS_GEMM_H

#include <stdint.h>

/* Sets the calling thread's OpenMP teams to one thread, once per thread
 * (oneDNN runs on OpenMP; a no-op in a build without oneDNN). */
void pl_gemm_single_thread(void);

/* pl_sgemm calls oneDNN ran so far in this process (tests check which
 * library ran). */
int64_t pl_sgemm_onednn_count(void);

#endif
