/* bf16 matrix products for the ops' cpu_bf16 kernels (pl_op_kernels):
 * oneDNN's matmul, which runs on AVX512-BF16 units at about four times an
 * fp32 sgemm per core (measured on an AMD EPYC with AVX512-BF16: 440-510
 * GFLOP/s on one core, against OpenBLAS's sgemm ceiling of 241 GFLOP/s on
 * two in bench_gpt), with fp32 accumulation and one rounding of each
 * result to bf16. */
#ifndef PL_OPS_GEMM_BF16_H
#define PL_OPS_GEMM_BF16_H

#include <stdbool.h>
#include <stdint.h>

/* Whether pl_gemm_bf16 runs here: Pleiades was built with oneDNN
 * (Debian's libdnnl-dev), the CPU has AVX512-BF16 (elsewhere oneDNN
 * would emulate bf16, slower than widening for sgemm), the environment
 * does not say PLEIADES_BF16_GEMM=0 and pl_gemm_bf16_enable(false) was not
 * called. */
bool pl_gemm_bf16_available(void);

/* Turns the bf16 products on or off for the whole process (benchmarks and
 * tests compare them with the widening path in one run); on by default. */
void pl_gemm_bf16_enable(bool on);

/* Products run so far in this process (tests check the path was taken). */
int64_t pl_gemm_bf16_count(void);

enum { PL_GEMM_BF16_UNSUPPORTED = 1 };

/* dst[M,N] (+)= src[M,K] · wei[K,N] (+ bias[N]), bf16 operands, fp32
 * accumulation, on the calling thread only. Each matrix comes with its
 * row and column strides in elements (a transposed operand swaps them;
 * dst's columns are contiguous). accumulate: dst's values are added (read
 * as bf16, the sum rounded once), else overwritten. Returns 0;
 * PL_GEMM_BF16_UNSUPPORTED, having written nothing, when no product runs
 * for these operands here; -1 on a failure while running. */
int pl_gemm_bf16(int64_t M, int64_t N, int64_t K, const uint16_t *src, int64_t src_rs,
                 int64_t src_cs, const uint16_t *wei, int64_t wei_rs, int64_t wei_cs,
                 const uint16_t *bias, uint16_t *dst, int64_t dst_rs, bool accumulate);

/* The same product into an fp32 dst (overwritten, no bias): for results
 * that are worked on before they are stored (attention's scores). */
int pl_gemm_bf16_f32(int64_t M, int64_t N, int64_t K, const uint16_t *src, int64_t src_rs,
                     int64_t src_cs, const uint16_t *wei, int64_t wei_rs, int64_t wei_cs,
                     float *dst, int64_t dst_rs);

#endif
