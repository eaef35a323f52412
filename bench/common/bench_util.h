/* bench_util: what the benchmark programs in bench/ share — timing and
 * medians, reproducible inputs, option parsing, the OpenBLAS sgemm
 * ceiling, the timed training loop, and the PyTorch peer served beside
 * Pleiades with interleaved repetitions (bench_compare).
 * It lives in bench/common/ because each .c file in bench/ is a program of
 * its own; CMakeLists.txt adds bench_util.c to each benchmark. */
#ifndef PL_BENCH_UTIL_H
#define PL_BENCH_UTIL_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

#include <pleiades.h>

/* ------------------------------------------------------ time, medians */

double bench_now_s(void); /* CLOCK_MONOTONIC, in seconds */
int bench_cmp_double(const void *a, const void *b); /* for qsort, ascending */
/* Median of v[0..n) (left as it is); NAN if n is 0 or out of memory. */
double bench_median(const double *v, int n);

/* xorshift64*: fixed, reproducible inputs without touching rand(). */
uint64_t bench_rng_next(uint64_t *s);
float bench_rng_uniform(uint64_t *s); /* [0, 1) */

/* ------------------------------------------------------------ options */

/* text as an integer in [lo, hi]: false, silently, if it is not one. */
bool bench_parse_int(const char *text, int lo, int hi, int *out);
/* The same, reporting a bad value on stderr as "PROG: OPT: 'TEXT' is not
 * an integer in [LO, HI]". */
bool bench_parse_int_opt(const char *prog, const char *opt, const char *text, int lo,
                         int hi, int *out);
/* --device: "cpu" (*cuda false) or "cuda" (true); anything else is
 * reported on stderr as "PROG: --device 'TEXT': cpu or cuda". */
bool bench_parse_device(const char *prog, const char *text, bool *cuda);

/* The options bench_mlp and bench_gpt share: --workers, --tiles, --steps,
 * --warmup, --reps, --no-torch, --torch-threads. */
typedef struct bench_common_options {
    int workers;
    int tiles;
    int steps;
    int warmup;
    int reps;
    bool torch;
    int torch_threads; /* 0 = workers */
} bench_common_options;

enum {
    BENCH_MAX_REPS = 1000,
    BENCH_OPT_WORKERS = 256, /* getopt_long values of the common options */
    BENCH_OPT_TILES,
    BENCH_OPT_STEPS,
    BENCH_OPT_WARMUP,
    BENCH_OPT_REPS,
    BENCH_OPT_NO_TORCH,
    BENCH_OPT_TORCH_THREADS,
    BENCH_OPT_NEXT, /* the first value free for a program's own options */
};

/* Their entries of a struct option array. */
#define BENCH_COMMON_LONGOPTS                                                  \
    {"workers", required_argument, NULL, BENCH_OPT_WORKERS},                   \
    {"tiles", required_argument, NULL, BENCH_OPT_TILES},                       \
    {"steps", required_argument, NULL, BENCH_OPT_STEPS},                       \
    {"warmup", required_argument, NULL, BENCH_OPT_WARMUP},                     \
    {"reps", required_argument, NULL, BENCH_OPT_REPS},                         \
    {"no-torch", no_argument, NULL, BENCH_OPT_NO_TORCH},                       \
    {"torch-threads", required_argument, NULL, BENCH_OPT_TORCH_THREADS}

/* Handles getopt_long's c if it is a common option: 1 if it was and its
 * value is good, 0 if its value is bad (reported on stderr), -1 if c is
 * not a common option. */
int bench_common_option(const char *prog, int c, const char *arg,
                        bench_common_options *o);

/* ------------------------------------------------------- sgemm ceiling */

enum { BENCH_GEMM_N = 2048, BENCH_GEMM_TRIES = 3, BENCH_MAX_GEMM_THREADS = 64 };

/* The machine's fp32 GEMM ceiling for `threads` cores, in GFLOP/s: the
 * better of OpenBLAS on `threads` threads (one C = A B with n =
 * BENCH_GEMM_N) and `threads` single-threaded pl_sgemm products at once
 * (what the workers run: oneDNN on AVX512 CPUs), each the best of
 * BENCH_GEMM_TRIES; 0 if the matrices cannot be allocated. Leaves OpenBLAS
 * on one thread, as the runtime expects. */
double bench_sgemm_ceiling(int threads);
/* "sgemm ceiling (...): X GFLOP/s — OpenBLAS ... , pl_sgemm ..." (the
 * figures of the last bench_sgemm_ceiling) */
void bench_print_ceiling(int threads, double gflops);

enum { BENCH_CUDA_GEMM_N = 8192, BENCH_CUDA_GEMM_TRIES = 5 };

/* The first GPU's fp32 GEMM ceiling in GFLOP/s: cublasSgemm with n =
 * BENCH_CUDA_GEMM_N in cuBLAS's default math mode (true fp32, no TF32: the
 * mode of Pleiades' CUDA kernels and of PyTorch's fp32 matmuls by
 * default), timed with CUDA events, the best of BENCH_CUDA_GEMM_TRIES
 * after one warm-up product. 0 (with the reason on stderr) on a build
 * without CUDA or on a CUDA error. Call it before StarPU starts. */
double bench_cuda_sgemm_ceiling(void);

/* ----------------------------------------------------------- Pleiades */

/* Reports "PROG: WHAT failed: <pl_last_error> (<status>)"; returns false. */
bool bench_fail(const char *prog, const char *what);

/* AdamW(lr 1e-3, weight decay 0.01, betas 0.9 0.999, eps 1e-8). */
void bench_set_adamw(pl_engine_options *eo);

/* pl_engine_train_step on b: `warmup` untimed steps, then `reps`
 * repetitions of `steps` timed steps, each started idle and ended with a
 * wait for all tasks (a step returns once its loss is known while the rest
 * of backward and the optimizer update still run); rep_ms[r] is the mean
 * ms/step of repetition r. The first and last losses are stored. False
 * after reporting a failed step or a loss that is not finite. */
bool bench_timed_steps(const char *prog, pl_engine_t *e, const pl_batch *b, int warmup,
                       int steps, int reps, double *rep_ms, double *first_loss,
                       double *last_loss);

/* ------------------------------------------------------------ PyTorch */

/* The Python that has torch: $PLEIADES_TORCH_PYTHON if set (the GPU
 * machine keeps it in a virtual environment), else Debian's. */
#define BENCH_TORCH_PYTHON_DEFAULT "/usr/bin/python3"
const char *bench_torch_python(void);

typedef enum { BENCH_TORCH_OK, BENCH_TORCH_SKIPPED, BENCH_TORCH_FAILED } bench_torch_status;

/* ------------------------------------------- side by side with a peer
 *
 * A machine shared with other work (or just a noisy one) moves a single
 * timing by tens of percent, so a benchmark compares distributions taken
 * under the same conditions: repetitions of Pleiades and of the peer
 * alternate (A B A B ...), and both sides report min, median and max. The
 * peer runs in every sensible thread configuration first (a short
 * calibration, also interleaved) and the comparison uses its fastest.
 * While the peer runs, Pleiades' StarPU workers are paused (they would
 * otherwise poll the cores); the peer is idle, blocked on its stdin, while
 * Pleiades runs. */

/* One thread configuration of the peer. */
typedef struct bench_peer_config {
    int torch_threads;       /* torch.set_num_threads */
    int blas_threads;        /* OPENBLAS_NUM_THREADS */
    const char *wait_policy; /* OMP_WAIT_POLICY: "PASSIVE" or "ACTIVE" */
} bench_peer_config;

/* "torch threads 2, OPENBLAS_NUM_THREADS 1, OMP_WAIT_POLICY=PASSIVE" */
void bench_peer_config_name(const bench_peer_config *c, char *buf, size_t size);

/* One repetition of Pleiades (StarPU already resumed): `steps` timed steps,
 * the mean ms/step into *ms. False after reporting a failure. */
typedef bool (*bench_rep_fn)(void *ctx, int steps, double *ms);

/* The usual `rep`: `steps` timed pl_engine_train_step calls on one batch
 * (bench_timed_steps), ctx a bench_engine_rep. */
typedef struct bench_engine_rep {
    const char *prog;
    pl_engine_t *e;
    const pl_batch *b;
    double *last_loss; /* updated with each repetition's last loss */
} bench_engine_rep;
bool bench_engine_rep_run(void *ctx, int steps, double *ms);

typedef struct bench_stats {
    double min, median, max;
} bench_stats;
/* Min, median and max of v[0..n), n >= 1. */
bench_stats bench_stats_of(const double *v, int n);

typedef struct bench_comparison {
    bench_stats pleiades, peer;  /* ms per step over the repetitions */
    int reps;                    /* repetitions of each side */
    bench_peer_config peer_config; /* the fastest one */
    int n_configs;               /* configurations tried */
    double peer_loss;            /* the peer's last loss */
    double pleiades_cpu_ms_during_peer; /* CPU Pleiades' (paused) process
                                   still used while the peer ran */
} bench_comparison;

typedef struct bench_compare_options {
    const char *source_dir; /* the source tree ("": look next to the binary) */
    const char *script;     /* the peer, e.g. "bench/mlp_torch.py"; NULL: none */
    const char *args;       /* its arguments after the thread count */
    int cores;            /* thread counts tried: 1..cores */
    bool single_config;   /* only 1 thread, OpenBLAS 1, PASSIVE: a GPU peer,
                             whose host threads only launch kernels */
    int steps;            /* steps per repetition (both sides) */
    int warmup;           /* the peer's untimed warm-up steps */
    int reps;             /* interleaved repetitions of each side (>= 10) */
    int calibration_reps; /* repetitions per peer configuration */
} bench_compare_options;

/* Calibrates the peer over its configurations, then interleaves `reps`
 * repetitions of `rep` (Pleiades) and of the fastest peer configuration.
 * Pauses StarPU around every peer repetition. Prints the calibration table.
 * Returns the peer's status (SKIPPED without python3-torch); Pleiades'
 * figures are filled in either way unless Pleiades failed (then FAILED). */
bench_torch_status bench_compare(const char *prog, const bench_compare_options *o,
                                 bench_rep_fn rep, void *ctx, bench_comparison *out);

/* The two lines "pleiades: min .. median .. max .." and "pytorch : ..." with
 * `per_step` (e.g. 256 samples or 2048 tokens) turned into a rate named
 * `rate_name`, then "ratio   : best vs best X, median vs median Y". */
void bench_print_comparison(const bench_comparison *c, bool have_peer, double per_step,
                            const char *rate_name);

#endif
