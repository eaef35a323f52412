/* bench_util: see bench_util.h. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, fdopen, setenv */

#include "bench_util.h"

#include <cblas.h>
#include <pthread.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <starpu.h>
#ifdef STARPU_USE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>
#endif

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

bool bench_parse_device(const char *prog, const char *text, bool *cuda) {
    bool ok = strcmp(text, "cpu") == 0 || strcmp(text, "cuda") == 0;
    if (!ok) fprintf(stderr, "%s: --device '%s': cpu or cuda\n", prog, text);
    *cuda = ok && strcmp(text, "cuda") == 0;
    return ok;
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

static double ceiling_openblas, ceiling_pl;

static float *gemm_matrix(uint64_t seed) {
    const size_t nn = (size_t)BENCH_GEMM_N * BENCH_GEMM_N;
    float *m = malloc(nn * sizeof *m);
    if (m)
        for (size_t i = 0; i < nn; i++) m[i] = bench_rng_uniform(&seed) - 0.5f;
    return m;
}

typedef struct gemm_job {
    float *a, *b, *c;
    double seconds;
} gemm_job;

static void *run_pl_sgemm(void *arg) {
    gemm_job *j = arg;
    const int64_t n = BENCH_GEMM_N;
    double t0 = bench_now_s();
    pl_sgemm(false, false, n, n, n, 1.0f, j->a, n, j->b, n, 0.0f, j->c, n);
    j->seconds = bench_now_s() - t0;
    return NULL;
}

/* `threads` single-threaded pl_sgemm products at once, each on matrices
 * of its own, as the workers run their tiles: their summed rate. */
static double pl_sgemm_rate(int threads, gemm_job *jobs) {
    pthread_t tid[BENCH_MAX_GEMM_THREADS];
    int started = 0;
    for (int t = 1; t < threads; t++)
        if (pthread_create(&tid[t], NULL, run_pl_sgemm, &jobs[t]) == 0) started++;
        else break;
    run_pl_sgemm(&jobs[0]);
    double slowest = jobs[0].seconds;
    for (int t = 1; t <= started; t++) {
        pthread_join(tid[t], NULL);
        if (jobs[t].seconds > slowest) slowest = jobs[t].seconds;
    }
    const double n = BENCH_GEMM_N;
    return (started + 1) * 2.0 * n * n * n / slowest * 1e-9;
}

double bench_sgemm_ceiling(int threads) {
    if (threads < 1) threads = 1;
    if (threads > BENCH_MAX_GEMM_THREADS) threads = BENCH_MAX_GEMM_THREADS;
    gemm_job jobs[BENCH_MAX_GEMM_THREADS] = {{0}};
    bool ok = true;
    for (int t = 0; t < threads && ok; t++) {
        jobs[t].a = gemm_matrix(0x5eed + 3 * (uint64_t)t);
        jobs[t].b = gemm_matrix(0x5eed + 3 * (uint64_t)t + 1);
        jobs[t].c = gemm_matrix(0x5eed + 3 * (uint64_t)t + 2);
        ok = jobs[t].a && jobs[t].b && jobs[t].c;
    }
    ceiling_openblas = ceiling_pl = 0.0;
    if (ok) {
        const int n = BENCH_GEMM_N;
        openblas_set_num_threads(threads);
        for (int k = 0; k < BENCH_GEMM_TRIES; k++) {
            double t0 = bench_now_s();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, jobs[0].a,
                        n, jobs[0].b, n, 0.0f, jobs[0].c, n);
            double gflops = 2.0 * n * (double)n * n / (bench_now_s() - t0) * 1e-9;
            if (gflops > ceiling_openblas) ceiling_openblas = gflops;
        }
        openblas_set_num_threads(1);
        for (int k = 0; k < BENCH_GEMM_TRIES; k++) {
            double gflops = pl_sgemm_rate(threads, jobs);
            if (gflops > ceiling_pl) ceiling_pl = gflops;
        }
    }
    for (int t = 0; t < threads; t++) {
        free(jobs[t].a);
        free(jobs[t].b);
        free(jobs[t].c);
    }
    return ceiling_pl > ceiling_openblas ? ceiling_pl : ceiling_openblas;
}

void bench_print_ceiling(int threads, double gflops) {
    printf("sgemm ceiling (%d thread%s, %d^3, best of %d): %.1f GFLOP/s — OpenBLAS %s "
           "threaded %.1f, pl_sgemm (%s) one product per thread %.1f\n",
           threads, threads == 1 ? "" : "s", BENCH_GEMM_N, BENCH_GEMM_TRIES, gflops,
           openblas_get_corename(), ceiling_openblas, pl_sgemm_library(), ceiling_pl);
}

#ifdef STARPU_USE_CUDA
double bench_cuda_sgemm_ceiling(void) {
    const size_t n = BENCH_CUDA_GEMM_N, bytes = n * n * sizeof(float);
    float *a = NULL, *b = NULL, *c = NULL;
    cublasHandle_t h = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    double best = 0.0;
    const float one = 1.0f, zero = 0.0f;
    if (cudaMalloc((void **)&a, bytes) != cudaSuccess ||
        cudaMalloc((void **)&b, bytes) != cudaSuccess ||
        cudaMalloc((void **)&c, bytes) != cudaSuccess) {
        fprintf(stderr, "bench: cudaMalloc of three %zux%zu matrices failed\n", n, n);
        goto out;
    }
    /* Values do not change the rate; defined ones keep sanitizers quiet. */
    cudaMemset(a, 0, bytes);
    cudaMemset(b, 0, bytes);
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS || cudaEventCreate(&e0) != cudaSuccess ||
        cudaEventCreate(&e1) != cudaSuccess) {
        fprintf(stderr, "bench: cuBLAS or CUDA events unavailable\n");
        goto out;
    }
    for (int k = 0; k <= BENCH_CUDA_GEMM_TRIES; k++) {
        cudaEventRecord(e0, 0);
        cublasStatus_t st = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)n, (int)n,
                                        &one, a, (int)n, b, (int)n, &zero, c, (int)n);
        cudaEventRecord(e1, 0);
        float ms = 0.0f;
        if (st != CUBLAS_STATUS_SUCCESS || cudaEventSynchronize(e1) != cudaSuccess ||
            cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess) {
            fprintf(stderr, "bench: cublasSgemm failed (status %d)\n", (int)st);
            best = 0.0;
            goto out;
        }
        double gflops = 2.0 * (double)n * (double)n * (double)n / (ms * 1e-3) * 1e-9;
        if (k > 0 && gflops > best) best = gflops; /* k = 0: warm-up */
    }
out:
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (h) cublasDestroy(h);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    return best;
}
#else
double bench_cuda_sgemm_ceiling(void) {
    fprintf(stderr, "bench: this build's StarPU has no CUDA (scripts/gpu-bundle builds one)\n");
    return 0.0;
}
#endif

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

/* The peer script: under $PLEIADES_ROOT when set (a bundle run on another
 * machine: scripts/gpu-bundle), the source tree's (compiled in), else
 * ../../script relative to this executable (build/bench/bench_x). */
static bool find_torch_script(const char *source_dir, const char *script, char *path,
                              size_t size) {
    const char *root = getenv("PLEIADES_ROOT");
    if (root && *root) {
        snprintf(path, size, "%s/%s", root, script);
        if (access(path, R_OK) == 0) return true;
    }
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

/* ------------------------------------------- side by side with a peer */

void bench_peer_config_name(const bench_peer_config *c, char *buf, size_t size) {
    snprintf(buf, size, "torch threads %d, OPENBLAS_NUM_THREADS %d, OMP_WAIT_POLICY=%s",
             c->torch_threads, c->blas_threads, c->wait_policy);
}

/* A served peer (bench/torch_timing.py): its stdin and stdout. */
typedef struct bench_peer {
    pid_t pid;
    FILE *to, *from;
} bench_peer;

static void peer_stop(bench_peer *p) {
    if (p->pid > 0) kill(p->pid, SIGCONT); /* it may be stopped */
    if (p->to) {
        fputs("quit\n", p->to);
        fclose(p->to);
    }
    if (p->from) fclose(p->from);
    if (p->pid > 0) waitpid(p->pid, NULL, 0);
    *p = (bench_peer){0};
}

/* The next line of the peer's output starting with one of the two
 * prefixes into line[size]; false at its end (the peer died). */
static bool peer_line(bench_peer *p, const char *want, char *line, size_t size) {
    while (fgets(line, (int)size, p->from)) {
        if (strncmp(line, want, strlen(want)) == 0) return true;
        if (strncmp(line, "error", 5) == 0) {
            fprintf(stderr, "peer: %s", line);
            return false;
        }
        if (strstr(line, "No module named 'torch'")) return false;
    }
    return false;
}

/* Starts `script args` served, in configuration c; waits for "ready". */
static bool peer_start(bench_peer *p, const char *path, const char *args,
                       const bench_peer_config *c) {
    *p = (bench_peer){0};
    int in[2], out[2];
    if (pipe(in) != 0) return false;
    if (pipe(out) != 0) {
        close(in[0]);
        close(in[1]);
        return false;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(in[0], STDIN_FILENO);
        dup2(out[1], STDOUT_FILENO);
        dup2(out[1], STDERR_FILENO);
        close(in[0]);
        close(in[1]);
        close(out[0]);
        close(out[1]);
        char blas[16], threads[16];
        snprintf(blas, sizeof blas, "%d", c->blas_threads);
        snprintf(threads, sizeof threads, "%d", c->torch_threads);
        setenv("OPENBLAS_NUM_THREADS", blas, 1);
        setenv("OMP_WAIT_POLICY", c->wait_policy, 1);
        setenv("PL_PEER_SERVE", "1", 1);
        char cmd[2 * PATH_MAX];
        snprintf(cmd, sizeof cmd, "exec %s '%s' %s %s", bench_torch_python(), path, threads,
                 args);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    if (pid < 0) {
        close(in[1]);
        close(out[0]);
        return false;
    }
    p->pid = pid;
    p->to = fdopen(in[1], "w");
    p->from = fdopen(out[0], "r");
    char line[512];
    if (!p->to || !p->from || !peer_line(p, "ready", line, sizeof line)) {
        peer_stop(p);
        return false;
    }
    return true;
}

/* Sends "rep N" (or "warm N") and reads the mean ms/step and the loss. */
static bool peer_run(bench_peer *p, const char *cmd, int n, double *ms, double *loss) {
    fprintf(p->to, "%s %d\n", cmd, n);
    fflush(p->to);
    char line[512];
    bool timed = strcmp(cmd, "rep") == 0;
    if (!peer_line(p, timed ? "rep " : "ok ", line, sizeof line)) return false;
    double m = 0.0, l = NAN;
    bool ok = timed ? sscanf(line, "rep ms=%lf loss=%lf", &m, &l) == 2
                    : sscanf(line, "ok loss=%lf", &l) == 1;
    if (ms) *ms = m;
    if (loss) *loss = l;
    return ok;
}

const char *bench_torch_python(void) {
    const char *p = getenv("PLEIADES_TORCH_PYTHON");
    return p && *p ? p : BENCH_TORCH_PYTHON_DEFAULT;
}

bool bench_engine_rep_run(void *ctx, int steps, double *ms) {
    bench_engine_rep *r = ctx;
    double first;
    return bench_timed_steps(r->prog, r->e, r->b, 0, steps, 1, ms, &first, r->last_loss);
}

bench_stats bench_stats_of(const double *v, int n) {
    bench_stats s = {v[0], bench_median(v, n), v[0]};
    for (int i = 1; i < n; i++) {
        if (v[i] < s.min) s.min = v[i];
        if (v[i] > s.max) s.max = v[i];
    }
    return s;
}

/* CPU seconds this process (Pleiades: StarPU's workers) has used. */
static double self_cpu_s(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_stime.tv_sec +
           1e-6 * (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

/* The two sides never run at once: the peer is stopped (SIGSTOP: an idle
 * OpenMP pool with OMP_WAIT_POLICY=ACTIVE would otherwise spin on the
 * cores while Pleiades is timed) and continued only for its own
 * repetitions, during which StarPU's workers are paused. *cpu_ms gets the
 * CPU time Pleiades' process still used meanwhile (it should be ~0). */
static bool peer_rep_alone(bench_peer *p, int steps, double *ms, double *loss,
                           double *cpu_ms) {
    starpu_pause();
    kill(p->pid, SIGCONT);
    double c0 = self_cpu_s();
    bool ok = peer_run(p, "rep", steps, ms, loss);
    if (cpu_ms) *cpu_ms += (self_cpu_s() - c0) * 1e3;
    kill(p->pid, SIGSTOP);
    starpu_resume();
    return ok;
}

/* Starts and warms up configuration c, leaving it stopped. */
static bool peer_ready(bench_peer *p, const char *path, const char *args,
                       const bench_peer_config *c, int warmup) {
    if (!peer_start(p, path, args, c)) return false;
    starpu_pause();
    bool ok = peer_run(p, "warm", warmup > 0 ? warmup : 1, NULL, NULL);
    starpu_resume();
    if (ok) kill(p->pid, SIGSTOP);
    else peer_stop(p);
    return ok;
}

enum { BENCH_MAX_CONFIGS = 16 };

bench_torch_status bench_compare(const char *prog, const bench_compare_options *o,
                                 bench_rep_fn rep, void *ctx, bench_comparison *out) {
    *out = (bench_comparison){.reps = o->reps, .peer_loss = NAN};
    double *pl_ms = calloc((size_t)o->reps, sizeof *pl_ms);
    double *peer_ms = calloc((size_t)o->reps, sizeof *peer_ms);
    if (!pl_ms || !peer_ms) {
        free(pl_ms);
        free(peer_ms);
        fprintf(stderr, "%s: out of memory\n", prog);
        return BENCH_TORCH_FAILED;
    }
    /* The thread configurations: torch threads 1..cores, OpenBLAS's pool
     * at 1 or all cores (Debian's torch runs it beside its own OpenMP
     * pool), OpenMP threads waiting passively or spinning. */
    bench_peer_config configs[BENCH_MAX_CONFIGS];
    int n = 0;
    int blas_options[2] = {1, o->cores};
    const char *policies[2] = {"PASSIVE", "ACTIVE"};
    for (int t = 1; t <= o->cores; t++)
        for (int b = 0; b < (o->cores > 1 ? 2 : 1); b++)
            for (int w = 0; w < 2 && n < BENCH_MAX_CONFIGS; w++)
                configs[n++] = (bench_peer_config){t, blas_options[b], policies[w]};
    if (o->single_config) n = 1; /* the first: 1 thread, OpenBLAS 1, PASSIVE */
    out->n_configs = n;

    bench_torch_status status = BENCH_TORCH_OK;
    char path[PATH_MAX + 64];
    if (!o->script) {
        printf("pytorch : skipped (--no-torch)\n");
        status = BENCH_TORCH_SKIPPED;
    } else if (access(bench_torch_python(), X_OK) != 0 ||
        !find_torch_script(o->source_dir, o->script, path, sizeof path)) {
        printf("pytorch : skipped (%s or %s not found)\n", bench_torch_python(), o->script);
        status = BENCH_TORCH_SKIPPED;
    }
    /* Calibration, one configuration at a time (only one peer process
     * exists at any moment), its repetitions interleaved with Pleiades'
     * so that every configuration sees the machine in the same state;
     * the fastest median wins. */
    int best = 0;
    double best_median = INFINITY, cpu_ms = 0.0;
    int k = o->calibration_reps < 16 ? o->calibration_reps : 16;
    if (status == BENCH_TORCH_OK)
        printf("pytorch configurations (median of %d repetitions of %d steps, "
               "interleaved with Pleiades'):\n", k, o->steps);
    for (int c = 0; c < n && status == BENCH_TORCH_OK; c++) {
        bench_peer peer;
        if (!peer_ready(&peer, path, o->args, &configs[c], o->warmup)) {
            printf("pytorch : skipped (the peer did not start; is python3-torch "
                   "installed? scripts/deps --bench)\n");
            status = BENCH_TORCH_SKIPPED;
            break;
        }
        double cal[16];
        for (int r = 0; r < k && status == BENCH_TORCH_OK; r++) {
            double ms;
            if (!rep(ctx, o->steps, &ms)) status = BENCH_TORCH_FAILED;
            else if (!peer_rep_alone(&peer, o->steps, &cal[r], NULL, &cpu_ms))
                status = BENCH_TORCH_FAILED;
        }
        peer_stop(&peer);
        if (status != BENCH_TORCH_OK) break;
        double m = bench_median(cal, k);
        char name[128];
        bench_peer_config_name(&configs[c], name, sizeof name);
        printf("  %-62s %8.2f ms/step\n", name, m);
        fflush(stdout);
        if (m < best_median) best_median = m, best = c;
    }
    out->peer_config = configs[best];
    bench_peer peer = {0};
    if (status == BENCH_TORCH_OK &&
        !peer_ready(&peer, path, o->args, &configs[best], o->warmup))
        status = BENCH_TORCH_FAILED;

    /* The comparison: A B A B ... */
    bool pl_ok = true;
    for (int r = 0; r < o->reps && pl_ok; r++) {
        pl_ok = rep(ctx, o->steps, &pl_ms[r]);
        if (pl_ok && status == BENCH_TORCH_OK &&
            !peer_rep_alone(&peer, o->steps, &peer_ms[r], &out->peer_loss, &cpu_ms))
            status = BENCH_TORCH_FAILED;
    }
    if (status == BENCH_TORCH_FAILED) printf("pytorch : failed (the peer stopped answering)\n");
    peer_stop(&peer);
    out->pleiades_cpu_ms_during_peer = cpu_ms;
    if (pl_ok) out->pleiades = bench_stats_of(pl_ms, o->reps);
    if (status == BENCH_TORCH_OK) out->peer = bench_stats_of(peer_ms, o->reps);
    free(pl_ms);
    free(peer_ms);
    return pl_ok ? status : BENCH_TORCH_FAILED;
}

void bench_print_comparison(const bench_comparison *c, bool have_peer, double per_step,
                            const char *rate_name) {
    printf("pleiades: min %8.2f  median %8.2f  max %8.2f ms/step  (best %.0f %s/s, "
           "%d repetitions)\n",
           c->pleiades.min, c->pleiades.median, c->pleiades.max,
           per_step * 1e3 / c->pleiades.min, rate_name, c->reps);
    if (!have_peer) return;
    char name[128];
    bench_peer_config_name(&c->peer_config, name, sizeof name);
    printf("pytorch : min %8.2f  median %8.2f  max %8.2f ms/step  (best %.0f %s/s; "
           "fastest of %d configurations: %s)\n",
           c->peer.min, c->peer.median, c->peer.max, per_step * 1e3 / c->peer.min,
           rate_name, c->n_configs, name);
    printf("ratio   : best vs best %.2fx pytorch, median vs median %.2fx\n",
           c->peer.min / c->pleiades.min, c->peer.median / c->pleiades.median);
    printf("quiet   : Pleiades' paused workers used %.0f ms of CPU while the peer "
           "ran (the peer is stopped while Pleiades runs)\n",
           c->pleiades_cpu_ms_during_peer);
}
