/* pl_sgemm, the fp32 product of the built-in ops' CPU kernels (oneDNN on
 * AVX512 CPUs, OpenBLAS elsewhere: ops/gemm.c), against products formed
 * in double:
 *   - every transpose pair, odd sizes, leading dimensions wider than the
 *     rows, alpha and beta (beta 0 must ignore C's old values, NaN
 *     included), within the usual bound of a K-term fp32 dot product;
 *   - elements past each row's N columns (up to ldc) are left alone;
 *   - the same product into buffers at other alignments is bitwise the
 *     same (the engine's schedules and tilings rely on a product depending
 *     on values alone);
 *   - which library ran: argv[1] names the one expected ("onednn",
 *     "openblas", or "auto": oneDNN exactly when the build has it and
 *     PLEIADES_SGEMM says so or, unset, the CPU has AVX512F), checked by pl_sgemm_library() and by oneDNN's call
 *     count. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck_util.h"
#include "ops/gemm.h"
#include "pleiades.h"
#include "test_util.h"

/* A [rows, cols] matrix stored with leading dimension ld >= cols, at
 * `shift` floats past a 64-byte boundary. */
typedef struct {
    float *base, *m;
} matrix;

static matrix alloc_matrix(int64_t rows, int64_t ld, int shift) {
    matrix x = {NULL, NULL};
    size_t n = (size_t)(rows * ld + shift);
    if (posix_memalign((void **)&x.base, 64, n * sizeof(float)) != 0) return x;
    tu_fill(x.base, (int64_t)n, -1.0f, 1.0f);
    x.m = x.base + shift;
    return x;
}

/* 0, or 1 when out of memory (mismatches count as CHECK failures). */
static int check_case(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                      float beta, int pad) {
    char what[96];
    snprintf(what, sizeof what, "%c%c M=%lld N=%lld K=%lld alpha=%g beta=%g pad=%d",
             ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)M, (long long)N, (long long)K,
             alpha, beta, pad);
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    int64_t lda = ac + pad, ldb = bc + pad, ldc = N + pad;
    matrix a = alloc_matrix(ar, lda, 0), b = alloc_matrix(br, ldb, 0),
           c = alloc_matrix(M, ldc, 0);
    float *c0 = tu_xmalloc((size_t)(M * ldc) * sizeof *c0);
    if (!a.m || !b.m || !c.m) {
        CHECK(false, "out of memory");
        free(a.base), free(b.base), free(c.base), free(c0);
        return 1;
    }
    if (beta == 0.0f) /* must be ignored, not multiplied by 0 */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) c.m[i * ldc + j] = NAN;
    memcpy(c0, c.m, (size_t)(M * ldc) * sizeof *c0);
    pl_sgemm(ta, tb, M, N, K, alpha, a.m, lda, b.m, ldb, beta, c.m, ldc);
    double worst = 0.0;
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < N; j++) {
            double sum = 0.0, mag = 0.0;
            for (int64_t k = 0; k < K; k++) {
                double x = ta ? a.m[k * lda + i] : a.m[i * lda + k];
                double y = tb ? b.m[j * ldb + k] : b.m[k * ldb + j];
                sum += x * y;
                mag += fabs(x * y);
            }
            double old = beta == 0.0f ? 0.0 : (double)beta * c0[i * ldc + j];
            double ref = alpha * sum + old;
            /* fp32 accumulation of K terms, the scalings and one rounding */
            double bound = (K + 3) * 0x1p-23 * (fabs(alpha) * mag + fabs(old)) + 1e-30;
            double err = fabs(c.m[i * ldc + j] - ref);
            if (!isfinite(c.m[i * ldc + j])) worst = INFINITY;
            if (err / bound > worst) worst = err / bound;
        }
        for (int64_t j = N; j < ldc; j++) /* past the columns: untouched */
            CHECK(memcmp(&c.m[i * ldc + j], &c0[i * ldc + j], sizeof(float)) == 0,
                  "%s: C[%lld][%lld] past N = %lld was written", what, (long long)i,
                  (long long)j, (long long)N);
    }
    CHECK(worst <= 1.0, "%s: error %.3g x the bound", what, worst);
    /* Bitwise the same from copies at other alignments. */
    if (beta != 0.0f) {
        for (int shift = 1; shift <= 3; shift += 2) {
            matrix a2 = alloc_matrix(ar, lda, shift), b2 = alloc_matrix(br, ldb, shift + 1),
                   c2 = alloc_matrix(M, ldc, shift + 2);
            if (!a2.m || !b2.m || !c2.m) {
                CHECK(false, "out of memory");
                free(a2.base), free(b2.base), free(c2.base);
                free(a.base), free(b.base), free(c.base), free(c0);
                return 1;
            }
            memcpy(a2.m, a.m, (size_t)(ar * lda) * sizeof(float));
            memcpy(b2.m, b.m, (size_t)(br * ldb) * sizeof(float));
            memcpy(c2.m, c0, (size_t)(M * ldc) * sizeof(float));
            pl_sgemm(ta, tb, M, N, K, alpha, a2.m, lda, b2.m, ldb, beta, c2.m, ldc);
            CHECK(memcmp(c2.m, c.m, (size_t)(M * ldc) * sizeof(float)) == 0,
                  "%s: not bitwise the same with operands shifted by %d floats", what,
                  shift);
            free(a2.base), free(b2.base), free(c2.base);
        }
    }
    free(a.base), free(b.base), free(c.base), free(c0);
    return 0;
}

int main(int argc, char **argv) {
    const char *expect = argc > 1 ? argv[1] : "auto";
    const char *lib = pl_sgemm_library();
    printf("pl_sgemm runs on %s\n", lib);
    int64_t before = pl_sgemm_onednn_count();
    static const int64_t sizes[][3] = {
        {37, 53, 29}, {128, 64, 128}, {1, 7, 300}, {64, 1, 5}, {256, 192, 96}};
    int cases = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = t & 2;
            int64_t M = sizes[s][0], N = sizes[s][1], K = sizes[s][2];
            if (check_case(ta, tb, M, N, K, 1.0f, 0.0f, 0) ||
                check_case(ta, tb, M, N, K, 0.5f, 1.0f, 3) ||
                check_case(ta, tb, M, N, K, -1.25f, -0.75f, 16))
                return 1;
            cases += 3;
        }
    int64_t ran = pl_sgemm_onednn_count() - before;
    printf("%d products within bound, bitwise under realignment; oneDNN ran %lld\n", cases,
           (long long)ran);
    bool onednn;
    if (!strcmp(expect, "onednn")) onednn = true;
    else if (!strcmp(expect, "openblas")) onednn = false;
    else {
#ifdef PL_WITH_DNNL
        const char *env = getenv("PLEIADES_SGEMM");
        __builtin_cpu_init();
        onednn = env && !strcmp(env, "openblas")  ? false
                 : env && !strcmp(env, "onednn") ? true
                                                  : __builtin_cpu_supports("avx512f");
#else
        onednn = false;
#endif
    }
    CHECK(!strcmp(lib, onednn ? "oneDNN" : "OpenBLAS"), "expected %s, pl_sgemm_library() says %s",
          onednn ? "oneDNN" : "OpenBLAS", lib);
    /* 1 + 3 + 3 calls per size and transpose pair */
    CHECK(ran == (onednn ? cases / 3 * 7 : 0), "oneDNN ran %lld products, expected %d",
          (long long)ran, onednn ? cases / 3 * 7 : 0);
    printf(tu_failures ? "FAILED (%d)\n" : "all passed\n", tu_failures);
    return tu_failures != 0;
}
