/* bench_util: see bench_util.h. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, popen */

#include "bench_util.h"

#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <starpu.h>

/* ------------------------------------------------------ time, medians */

double bench_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(const double *v, int n) {
    double *c = n > 0 ? malloc((size_t)n * sizeof *c) : NULL;
    if (!c) return NAN;
    memcpy(c, v, (size_t)n * sizeof *c);
    qsort(c, (size_t)n, sizeof *c, bench_cmp_double);
    double m = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    free(c);
    return m;
}

uint64_t bench_rng_next(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

float bench_rng_uniform(uint64_t *s) {
    return (float)(bench_rng_next(s) >> 40) * (1.0f / 16777216.0f);
}

/* ------------------------------------------------------------ options */

bool bench_parse_int(const char *text, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

bool bench_parse_int_opt(const char *prog, const char *opt, const char *text, int lo,
                         int hi, int *out) {
    if (bench_parse_int(text, lo, hi, out)) return true;
    fprintf(stderr, "%s: %s: '%s' is not an integer in [%d, %d]\n", prog, opt, text, lo,
            hi);
    return false;
}

int bench_common_option(const char *prog, int c, const char *arg,
                        bench_common_options *o) {
    switch (c) {
    case BENCH_OPT_WORKERS:
        return bench_parse_int_opt(prog, "--workers", arg, 1, 256, &o->workers);
    case BENCH_OPT_TILES:
        return bench_parse_int_opt(prog, "--tiles", arg, 0, 64, &o->tiles);
    case BENCH_OPT_STEPS:
        return bench_parse_int_opt(prog, "--steps", arg, 1, 1000000, &o->steps);
    case BENCH_OPT_WARMUP:
        return bench_parse_int_opt(prog, "--warmup", arg, 0, 1000000, &o->warmup);
    case BENCH_OPT_REPS:
        return bench_parse_int_opt(prog, "--reps", arg, 1, BENCH_MAX_REPS, &o->reps);
    case BENCH_OPT_NO_TORCH: o->torch = false; return 1;
    case BENCH_OPT_TORCH_THREADS:
        return bench_parse_int_opt(prog, "--torch-threads", arg, 1, 256, &o->torch_threads);
    default: return -1;
    }
}

/* ------------------------------------------------------- sgemm ceiling */

double bench_sgemm_ceiling(int threads) {
    const size_t n = BENCH_GEMM_N, nn = n * n;
    float *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b),
          *c = malloc(nn * sizeof *c);
    double best = 0.0;
    if (a && b && c) {
        uint64_t s = 0x5eed;
        for (size_t i = 0; i < nn; i++) {
            a[i] = bench_rng_uniform(&s) - 0.5f;
            b[i] = bench_rng_uniform(&s) - 0.5f;
            c[i] = 0.0f;
        }
        openblas_set_num_threads(threads);
        for (int t = 0; t < BENCH_GEMM_TRIES; t++) {
            double t0 = bench_now_s();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n,
                        (int)n, 1.0f, a, (int)n, b, (int)n, 0.0f, c, (int)n);
            double dt = bench_now_s() - t0;
            double gflops = 2.0 * (double)n * (double)n * (double)n / dt * 1e-9;
            if (gflops > best) best = gflops;
        }
        openblas_set_num_threads(1);
    }
    free(a);
    free(b);
    free(c);
    return best;
}

void bench_print_ceiling(int threads, double gflops) {
    printf("sgemm ceiling (%d thread%s, %d^3): %.1f GFLOP/s (best of %d)\n", threads,
           threads == 1 ? "" : "s", BENCH_GEMM_N, gflops, BENCH_GEMM_TRIES);
}

/* ----------------------------------------------------------- Pleiades */

bool bench_fail(const char *prog, const char *what) {
    fprintf(stderr, "%s: %s failed: %s (%s)\n", prog, what, pl_last_error(),
            pl_status_string(pl_last_status()));
    return false;
}

void bench_set_adamw(pl_engine_options *eo) {
    eo->optimizer.kind = PL_OPTIMIZER_ADAMW;
    eo->optimizer.lr = 1e-3f;
    eo->optimizer.weight_decay = 0.01f;
    eo->optimizer.beta1 = 0.9f;
    eo->optimizer.beta2 = 0.999f;
    eo->optimizer.eps = 1e-8f;
}

bool bench_timed_steps(const char *prog, pl_engine_t *e, const pl_batch *b, int warmup,
                       int steps, int reps, double *rep_ms, double *first_loss,
                       double *last_loss) {
    pl_step_result r;
    double t0 = 0.0;
    for (int i = 0; i < warmup + reps * steps; i++) {
        bool timed = i >= warmup;
        int k = timed ? (i - warmup) % steps : -1;
        if (k == 0) {
            starpu_task_wait_for_all(); /* start each repetition idle */
            t0 = bench_now_s();
        }
        if (pl_engine_train_step(e, b, &r) != PL_STATUS_OK)
            return bench_fail(prog, "pl_engine_train_step");
        if (!isfinite(r.loss)) {
            fprintf(stderr, "%s: step %d: loss is %g\n", prog, i, r.loss);
            return false;
        }
        if (i == 0) *first_loss = r.loss;
        *last_loss = r.loss;
        if (k == steps - 1) {
            starpu_task_wait_for_all(); /* the step's backward and update */
            rep_ms[(i - warmup) / steps] = (bench_now_s() - t0) * 1e3 / steps;
        }
    }
    return true;
}

/* ------------------------------------------------------------ PyTorch */

/* The peer script: the source tree's (compiled in), else ../../script
 * relative to this executable (build/bench/bench_x). */
static bool find_torch_script(const char *source_dir, const char *script, char *path,
                              size_t size) {
    if (source_dir[0]) {
        snprintf(path, size, "%s/%s", source_dir, script);
        if (access(path, R_OK) == 0) return true;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        snprintf(path, size, "%s/../../%s", exe, script);
        if (access(path, R_OK) == 0) return true;
    }
    return false;
}

bench_torch_status bench_run_torch(const char *source_dir, const char *script,
                                   const char *args, const char *rate_key,
                                   double *ms_per_step, double *rate) {
    char path[PATH_MAX + 64];
    if (access(BENCH_TORCH_PYTHON, X_OK) != 0) {
        printf("pytorch : skipped (%s not found)\n", BENCH_TORCH_PYTHON);
        return BENCH_TORCH_SKIPPED;
    }
    if (!find_torch_script(source_dir, script, path, sizeof path)) {
        printf("pytorch : skipped (%s not found under %s or next to the binary)\n", script,
               source_dir[0] ? source_dir : "(unknown source dir)");
        return BENCH_TORCH_SKIPPED;
    }
    if (strchr(path, '\'')) {
        printf("pytorch : skipped (a quote in the script path %s)\n", path);
        return BENCH_TORCH_SKIPPED;
    }
    char cmd[2 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "%s '%s' %s 2>&1", BENCH_TORCH_PYTHON, path, args);
    char format[96]; /* "torch ms_per_step=%lf RATE_KEY=%lf" */
    snprintf(format, sizeof format, "torch ms_per_step=%%lf %s=%%lf", rate_key);
    fflush(stdout);
    FILE *p = popen(cmd, "r");
    if (!p) {
        printf("pytorch : failed to start %s (%s)\n", cmd, strerror(errno));
        return BENCH_TORCH_FAILED;
    }
    char line[1024], tail[4096] = "";
    bool found = false, no_torch = false;
    while (fgets(line, sizeof line, p)) {
        if (sscanf(line, format, ms_per_step, rate) == 2) found = true;
        if (strstr(line, "No module named 'torch'")) no_torch = true;
        if (strlen(tail) + strlen(line) >= sizeof tail) tail[0] = '\0';
        strcat(tail, line); /* the last lines, to show if it failed */
    }
    int st = pclose(p);
    bool exited_ok = st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (found && exited_ok) return BENCH_TORCH_OK;
    if (no_torch) {
        printf("pytorch : skipped (PyTorch is not installed for %s)\n", BENCH_TORCH_PYTHON);
        return BENCH_TORCH_SKIPPED;
    }
    printf("pytorch : failed (%s, status %d); its output:\n%s", cmd, st, tail);
    return BENCH_TORCH_FAILED;
}
