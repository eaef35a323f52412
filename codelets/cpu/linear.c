/* Linear layer on OpenBLAS. Each StarPU CPU worker runs one task at a
 * time, so OpenBLAS runs single-threaded inside a task (the runtime sets
 * openblas_set_num_threads(1)) and parallelism comes from the tiles. */
#include <cblas.h>
#include <string.h>

#include "codelets/cpu/kernels.h"

void linear_forward(float *out, const float *inp, const float *weight,
                    const float *bias, int64_t N, int64_t C, int64_t OC) {
    /* Seed every row with the bias, then let sgemm add inp·W^T (beta = 1)
     * instead of a second pass over out. */
    for (int64_t i = 0; i < N; i++) memcpy(out + i * OC, bias, OC * sizeof *out);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp,
                C, weight, C, 1.0f, out, OC);
}

void linear_backward_input(float *dinp, const float *dout, const float *weight,
                           int64_t N, int64_t C, int64_t OC, int accumulate) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f,
                dout, OC, weight, C, accumulate ? 1.0f : 0.0f, dinp, C);
}

void linear_backward_weight(float *dweight, float *dbias, const float *dout,
                            const float *inp, int64_t N, int64_t C, int64_t OC,
                            int accumulate) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout,
                OC, inp, C, accumulate ? 1.0f : 0.0f, dweight, C);
    if (!accumulate) memset(dbias, 0, OC * sizeof *dbias);
    for (int64_t i = 0; i < N; i++) {
        const float *row = dout + i * OC;
        for (int64_t o = 0; o < OC; o++) dbias[o] += row[o];
    }
}

void matmul_forward(float *out, const float *inp, const float *weight,
                    int64_t N, int64_t C, int64_t OC) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C,
                weight, C, 0.0f, out, OC);
}

void matmul_backward_weight(float *dweight, const float *dout, const float *inp,
                            int64_t N, int64_t C, int64_t OC, int accumulate) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout,
                OC, inp, C, accumulate ? 1.0f : 0.0f, dweight, C);
}
