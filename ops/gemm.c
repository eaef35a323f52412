/* The fp32 matrix product of the built-in ops' CPU kernels (pl_sgemm,
 * pleiades/op.h): oneDNN's sgemm on CPUs with AVX512, OpenBLAS's
 * elsewhere.
 *
 * Why not OpenBLAS everywhere: measured on this project's AMD EPYC (AVX512,
 * AVX512-BF16), one core, the shapes of the GPT's and the MLP's linear
 * layers and attention's heads (bench/bench_sgemm.c, 2026-11-26), oneDNN's
 * sgemm ran at 221-264 GFLOP/s against OpenBLAS's 116-133: 1.72-2.06x
 * (geometric mean 1.95x), the results within 8e-7 of each other relative
 * to their largest value. Debian's OpenBLAS 0.3.21 either lacks
 * kernels for a CPU or is told by OPENBLAS_CORETYPE which to use (these
 * machines force its AVX2 "Haswell" kernels, as its AVX512 ones computed
 * wrong results or crashed on some processors), while oneDNN chooses its
 * AVX512 code from the CPU's flags. Where the CPU has no AVX512, OpenBLAS
 * stays (oneDNN was not measured against it there), and results stay
 * what they were.
 *
 * The choice is made once per process from the CPU and the environment
 * (PLEIADES_SGEMM=openblas|onednn), never from a timing, so that a run,
 * its resumption from a checkpoint and its rerun round alike. */
#include "ops/gemm.h"

#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pleiades/op.h"

#ifdef PL_WITH_DNNL
#include <omp.h>

#include <oneapi/dnnl/dnnl.h>
#endif

static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool use_dnnl;
static atomic_llong dnnl_products;

static void choose(void) {
#ifdef PL_WITH_DNNL
    const char *env = getenv("PLEIADES_SGEMM");
    if (env && *env) {
        if (!strcmp(env, "onednn")) {
            use_dnnl = true;
            return;
        }
        if (!strcmp(env, "openblas")) return;
        fprintf(stderr, "pleiades: PLEIADES_SGEMM='%s' is neither 'onednn' nor "
                        "'openblas'; ignored\n", env);
    }
    __builtin_cpu_init();
    use_dnnl = __builtin_cpu_supports("avx512f");
#endif
}

const char *pl_sgemm_library(void) {
    pthread_once(&once, choose);
    return use_dnnl ? "oneDNN" : "OpenBLAS";
}

int64_t pl_sgemm_onednn_count(void) { return (int64_t)atomic_load(&dnnl_products); }

void pl_gemm_single_thread(void) {
#ifdef PL_WITH_DNNL
    /* oneDNN runs on OpenMP, whose teams would default to every core: a
     * StarPU worker runs one task at a time and parallelism comes from
     * the tiles (as with OpenBLAS, set to one thread by the runtime).
     * The setting is the calling thread's own. */
    static __thread bool done;
    if (!done) {
        if (omp_get_max_threads() != 1) omp_set_num_threads(1);
        done = true;
    }
#endif
}

void pl_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
              const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
              int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    pthread_once(&once, choose);
#ifdef PL_WITH_DNNL
    if (use_dnnl && K > 0) {
        pl_gemm_single_thread();
        if (dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B,
                       ldb, beta, C, ldc) == dnnl_success) {
            atomic_fetch_add_explicit(&dnnl_products, 1, memory_order_relaxed);
            return;
        }
        /* Only bad arguments fail, and OpenBLAS would reject them too. */
    }
#endif
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, alpha, A,
                (int)lda, B, (int)ldb, beta, C, (int)ldc);
}
