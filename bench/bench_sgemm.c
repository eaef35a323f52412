/* bench_sgemm: the fp32 products of the built-in ops' kernels, pl_sgemm
 * (oneDNN's sgemm on CPUs with AVX512, OpenBLAS's elsewhere: ops/gemm.c),
 * against OpenBLAS's cblas_sgemm called directly, side by side in one run,
 * on one thread (as a StarPU worker runs them), on the shapes the GPT of
 * bench_gpt (T=128, C=256, batch 16 in 2 tiles: 1024 rows per tile) and
 * the MLP of bench_mlp (batch 256 in 2 tiles) multiply: every linear
 * layer's forward (NT), input gradient (NN) and weight gradient (TN), and
 * attention's per-head products (64-wide heads). Each product: the best of
 * --reps timings of each library, alternating, in GFLOP/s, their ratio,
 * and the largest difference between the two results relative to the
 * largest magnitude (both are fp32 products; they round differently).
 *
 * OpenBLAS runs the kernels OPENBLAS_CORETYPE asks for where it is set
 * (printed): these machines set "Haswell" (AVX2), since Debian's 0.3.21
 * computes wrong results or crashes with its AVX512 kernels on some
 * processors.
 *
 * Usage: bench_sgemm [--reps N]   (default 15) */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pleiades.h>

#include "bench_util.h"
#include "ops/gemm.h"

typedef struct {
    const char *what;
    bool ta, tb;
    int M, N, K;
} shape;

static const shape SHAPES[] = {
    {"gpt attn.qkv F", false, true, 1024, 768, 256},
    {"gpt mlp.fc F", false, true, 1024, 1024, 256},
    {"gpt mlp.proj F", false, true, 1024, 256, 1024},
    {"gpt mlp.fc B", false, false, 1024, 256, 1024},
    {"gpt mlp.proj B", false, false, 1024, 1024, 256},
    {"gpt mlp.fc W", true, false, 1024, 256, 1024},
    {"gpt mlp.proj W", true, false, 256, 1024, 1024},
    {"gpt lm_head F", false, true, 1024, 256, 256},
    {"attn scores q.k^T", false, true, 128, 128, 64},
    {"attn att.v", false, false, 128, 64, 128},
    {"attn dv att^T.d", true, false, 128, 64, 128},
    {"mlp fc1 F", false, true, 128, 1024, 784},
    {"mlp fc2 B", false, false, 128, 1024, 1024},
    {"mlp fc1 W", true, false, 1024, 784, 128},
};
#define N_SHAPES ((int)(sizeof SHAPES / sizeof *SHAPES))

static float *random_matrix(size_t n, uint64_t seed) {
    float *m = malloc(n * sizeof *m);
    if (m)
        for (size_t i = 0; i < n; i++) m[i] = bench_rng_uniform(&seed) - 0.5f;
    return m;
}

int main(int argc, char **argv) {
    int reps = 15;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 1000) {
                fprintf(stderr, "bench_sgemm: --reps wants 1..1000, got '%s'\n", argv[i]);
                return 2;
            }
            reps = (int)v;
        } else {
            fprintf(stderr, "usage: bench_sgemm [--reps N]\n");
            return strcmp(argv[i], "-h") && strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    openblas_set_num_threads(1);
    pl_gemm_single_thread();
    const char *coretype = getenv("OPENBLAS_CORETYPE");
    printf("bench_sgemm: one thread, best of %d; pl_sgemm runs on %s; OpenBLAS's kernels: %s "
           "(OPENBLAS_CORETYPE=%s)\n", reps, pl_sgemm_library(), openblas_get_corename(),
           coretype ? coretype : "unset");
    printf("%-20s %2s %5s %5s %5s  %9s  %9s  %6s  %8s\n", "product", "op", "M", "N", "K",
           "OpenBLAS", "pl_sgemm", "ratio", "rel diff");
    double log_sum = 0;
    int ok = 1;
    for (int s = 0; s < N_SHAPES && ok; s++) {
        const shape *p = &SHAPES[s];
        size_t na = (size_t)p->M * p->K, nb = (size_t)p->K * p->N, nc = (size_t)p->M * p->N;
        float *a = random_matrix(na, 11 + s), *b = random_matrix(nb, 23 + s);
        float *c1 = calloc(nc, sizeof *c1), *c2 = calloc(nc, sizeof *c2);
        if (!a || !b || !c1 || !c2) {
            fprintf(stderr, "bench_sgemm: out of memory\n");
            ok = 0;
        } else {
            int lda = p->ta ? p->M : p->K, ldb = p->tb ? p->K : p->N;
            double best_blas = INFINITY, best_pl = INFINITY;
            for (int r = 0; r < reps; r++) {
                double t0 = bench_now_s();
                cblas_sgemm(CblasRowMajor, p->ta ? CblasTrans : CblasNoTrans,
                            p->tb ? CblasTrans : CblasNoTrans, p->M, p->N, p->K, 1.0f, a, lda,
                            b, ldb, 0.0f, c1, p->N);
                double t1 = bench_now_s();
                pl_sgemm(p->ta, p->tb, p->M, p->N, p->K, 1.0f, a, lda, b, ldb, 0.0f, c2, p->N);
                double t2 = bench_now_s();
                best_blas = fmin(best_blas, t1 - t0);
                best_pl = fmin(best_pl, t2 - t1);
            }
            double big = 0, diff = 0;
            for (size_t i = 0; i < nc; i++) {
                big = fmax(big, fabs(c1[i]));
                diff = fmax(diff, fabs((double)c1[i] - c2[i]));
            }
            double flops = 2.0 * p->M * p->N * p->K;
            printf("%-20s %c%c %5d %5d %5d  %9.1f  %9.1f  %5.2fx  %8.1e\n", p->what,
                   p->ta ? 'T' : 'N', p->tb ? 'T' : 'N', p->M, p->N, p->K,
                   flops / best_blas * 1e-9, flops / best_pl * 1e-9, best_blas / best_pl,
                   big > 0 ? diff / big : diff);
            log_sum += log(best_blas / best_pl);
        }
        free(a), free(b), free(c1), free(c2);
    }
    if (!ok) return 1;
    printf("geometric mean: pl_sgemm %.2fx OpenBLAS's speed (GFLOP/s in 10^9 flop/s)\n",
           exp(log_sum / N_SHAPES));
    return 0;
}
