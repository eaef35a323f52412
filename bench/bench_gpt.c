/* bench_gpt: the GPT-2 training step of Pleiades against this machine's
 * fp32 GEMM ceiling and against PyTorch, in one run, plus a per-op
 * breakdown of one profiled step.
 *
 *   1. sgemm ceiling: the better of cblas_sgemm 2048x2048x2048 on
 *      `workers` OpenBLAS threads and `workers` single-threaded pl_sgemm
 *      products of that size at once (the library the ops' kernels use:
 *      oneDNN on AVX512 CPUs), best of 3, in GFLOP/s (measured before
 *      StarPU starts, so nothing else competes for the cores).
 *   2. Pleiades: pl_gpt_build with V=256, T=128, C=256, L=4, NH=4 (sizes
 *      but V can be changed), batch 16 sequences, fp32, AdamW(lr 1e-3,
 *      weight decay 0.01), pl_engine_train_step on one fixed batch of random
 *      tokens and targets, each repetition of `steps` steps started idle
 *      and ended with a wait for all tasks (a step returns once its loss is
 *      known while the rest of backward and the optimizer update still
 *      run).
 *   3. One profiled step, separate from the timed ones (recording adds a
 *      callback per task): a fresh engine with record_tasks, a few warm-up
 *      steps, then the task records of one step (the fastest of three, the
 *      one least disturbed by other load) grouped by op kind and phase
 *      (layer prefixes stripped: "h3.attn.qkv" -> "attn.qkv"; F forward,
 *      L loss, B input gradient, W weight gradient, O optimizer), sorted by
 *      total task time, with worker utilisation = busy / (span x workers).
 *   4. PyTorch: bench/gpt_torch.py served by /usr/bin/python3, the same
 *      step. Its thread configurations (torch threads x OPENBLAS_NUM_THREADS
 *      x OMP_WAIT_POLICY) are calibrated first, then repetitions of Pleiades
 *      and of the fastest configuration alternate (A B A B ...), StarPU's
 *      workers paused while the peer runs; both sides report min, median
 *      and max, and the ratios best vs best (the headline) and median vs
 *      median (bench_compare in bench/common). 2 and 4 run before 3.
 *
 * FLOPs per step: 6*N*tokens + attention, tokens = B*T.
 *   N: the parameters that take part in matmuls or per-element work: all of
 *      them except wpe (a lookup, as nanoGPT's estimate_mfu leaves it out);
 *      wte counts once, as the tied LM head's matmul (its lookup is free).
 *   attention: per layer, forward 2*2*B*T^2*C (q k^T and att v, FULL T^2:
 *      the kernels compute the whole score matrix and ignore the upper
 *      triangle, so this counts what they do, not the causal half), times 3
 *      for forward + backward: 12*L*B*T^2*C (= nanoGPT's 12*L*H*Q*T per
 *      token).
 *
 * --device cuda: both sides on the first GPU (Pleiades: a CUDA-only
 * runtime, one tile; PyTorch: the model, data and AdamW on "cuda"), the
 * ceiling cuBLAS's fp32 sgemm on that GPU (8192^3, default math mode: no
 * TF32, as both sides' fp32 products), and --vocab sets V (GPT-2's 50257
 * padded to 50304, a multiple of 64, for the 124M shape: --vocab 50304
 * --context 1024 --channels 768 --layers 12 --heads 12).
 *
 * --precision bf16: both sides in bf16 (Pleiades: pl_engine_options
 * precision bf16, fp32 master weights and AdamW states, its bf16 products
 * on AVX512-BF16; PyTorch: torch.autocast("cpu", torch.bfloat16) around
 * the forward pass and the loss, fp32 parameters and optimizer, which is
 * how PyTorch trains in bf16 on a CPU). The sgemm ceiling stays fp32's:
 * bf16 products can pass it.
 *
 * Usage: bench_gpt [--workers N] [--tiles N] [--steps N] [--warmup N]
 *                  [--reps N] [--no-torch] [--torch-threads N] [--batch N]
 *                  [--layers N] [--channels N] [--context N] [--heads N]
 *                  [--precision fp32|bf16] [--device cpu|cuda] [--vocab N]
 */
#define _POSIX_C_SOURCE 200809L /* setenv */

#include <ctype.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <starpu.h>

#include <pleiades.h>

#include "bench_util.h"

#ifndef PL_SOURCE_DIR
#define PL_SOURCE_DIR "" /* then the script is looked up next to the binary */
#endif

#define TORCH_SCRIPT "bench/gpt_torch.py"

enum {
    VOCAB = 256,
    PROFILE_WARMUP = 2, /* steps of the profiling engine before the recorded ones */
    PROFILE_STEPS = 3,  /* recorded steps; the fastest one is shown */
    MAX_GROUPS = 128,
};

#define TARGET_TORCH_RATIO 2.0
#define TARGET_CEILING 0.45

typedef struct bench_options {
    bench_common_options run; /* --workers, --tiles, --steps, ..., --torch-threads */
    int batch;
    pl_gpt_config cfg;
    bool bf16; /* --precision bf16 */
    bool cuda; /* --device cuda */
} bench_options;

/* ------------------------------------------------------------ options */

static void usage(FILE *f) {
    fprintf(f,
            "usage: bench_gpt [options]\n"
            "  --workers N        StarPU CPU workers and sgemm threads (default 2)\n"
            "  --tiles N          batch tiles per step, 0 = one per worker (default 0)\n"
            "  --steps N          timed steps per repetition (default 10)\n"
            "  --warmup N         untimed warm-up steps (default 3)\n"
            "  --reps N           interleaved repetitions per side (default 10)\n"
            "  --no-torch         skip the PyTorch peer\n"
            "  --torch-threads N  the peer's thread counts tried: 1..N (default = workers)\n"
            "  --batch N          sequences per step B (default 16)\n"
            "  --layers N         transformer blocks L (default 4)\n"
            "  --channels N       channels C (default 256)\n"
            "  --context N        sequence length T (default 128)\n"
            "  --heads N          attention heads NH, C %% NH == 0 (default 4)\n"
            "  --precision P      fp32 or bf16 (both sides; default fp32)\n"
            "  --device D         cpu or cuda (both sides; default cpu)\n"
            "  --vocab N          vocabulary V (default %d: bytes)\n"
            "  -h, --help         this help\n",
            VOCAB);
}

/* text as an integer in [lo, hi], reporting a bad one on stderr. */
static bool parse_int(const char *opt, const char *text, int lo, int hi, int *out) {
    return bench_parse_int_opt("bench_gpt", opt, text, lo, hi, out);
}

/* 0 on success, 1 on a bad option, -1 after --help. */
static int parse_options(int argc, char **argv, bench_options *o) {
    enum { OPT_BATCH = BENCH_OPT_NEXT, OPT_LAYERS, OPT_CHANNELS, OPT_CONTEXT, OPT_HEADS,
           OPT_PRECISION, OPT_DEVICE, OPT_VOCAB };
    static const struct option longopts[] = {
        BENCH_COMMON_LONGOPTS,
        {"batch", required_argument, NULL, OPT_BATCH},
        {"layers", required_argument, NULL, OPT_LAYERS},
        {"channels", required_argument, NULL, OPT_CHANNELS},
        {"context", required_argument, NULL, OPT_CONTEXT},
        {"heads", required_argument, NULL, OPT_HEADS},
        {"precision", required_argument, NULL, OPT_PRECISION},
        {"device", required_argument, NULL, OPT_DEVICE},
        {"vocab", required_argument, NULL, OPT_VOCAB},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (bench_options){.run = {.workers = 2, .tiles = 0, .steps = 10, .warmup = 3,
                                 .reps = 10, .torch = true, .torch_threads = 0},
                         .batch = 16};
    int layers = 4, channels = 256, context = 128, heads = 4, vocab = VOCAB;
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        int common = bench_common_option("bench_gpt", c, optarg, &o->run);
        if (common == 0) return 1;
        if (common > 0) continue;
        bool ok = true;
        switch (c) {
        case OPT_BATCH: ok = parse_int("--batch", optarg, 1, 4096, &o->batch); break;
        case OPT_LAYERS: ok = parse_int("--layers", optarg, 1, 256, &layers); break;
        case OPT_CHANNELS: ok = parse_int("--channels", optarg, 1, 16384, &channels); break;
        case OPT_CONTEXT: ok = parse_int("--context", optarg, 1, 16384, &context); break;
        case OPT_HEADS: ok = parse_int("--heads", optarg, 1, 1024, &heads); break;
        case OPT_PRECISION:
            ok = strcmp(optarg, "fp32") == 0 || strcmp(optarg, "bf16") == 0;
            if (!ok) fprintf(stderr, "bench_gpt: --precision '%s': fp32 or bf16\n", optarg);
            o->bf16 = ok && strcmp(optarg, "bf16") == 0;
            break;
        case OPT_DEVICE:
            ok = bench_parse_device("bench_gpt", optarg, &o->cuda);
            break;
        case OPT_VOCAB: ok = parse_int("--vocab", optarg, 2, 1 << 20, &vocab); break;
        case 'h': usage(stdout); return -1;
        default: usage(stderr); return 1;
        }
        if (!ok) return 1;
    }
    if (optind < argc) {
        fprintf(stderr, "bench_gpt: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 1;
    }
    if (channels % heads) {
        fprintf(stderr, "bench_gpt: --channels %d is not divisible by --heads %d\n",
                channels, heads);
        return 1;
    }
    if (o->run.torch_threads == 0) o->run.torch_threads = o->run.workers;
    o->cfg = (pl_gpt_config){.vocab = vocab, .context = context, .channels = channels,
                             .layers = layers, .heads = heads};
    return 0;
}

/* ------------------------------------------------------ the per-op table */

/* One row of the breakdown: an op kind (layer prefix stripped) and phase. */
typedef struct op_group {
    char op[48];
    char phase;
    int tasks;
    double busy_us;
    double flops; /* matmul/attention FLOPs of the group, 0 if elementwise */
} op_group;

typedef struct profile {
    op_group groups[MAX_GROUPS];
    int n_groups;
    int n_tasks;
    double busy_us;           /* total task time, all workers */
    double span_us;           /* first task start to last task end */
    double wall_us;           /* train_step call to the end of its last task */
    double phase_us[6];       /* F L B W O, other */
    double worker_busy_us[64];
    int workers;
} profile;

static const char PHASES[] = "FLBWO";

/* "h3.attn.qkv" -> "attn.qkv"; unnamed ops "gelu17" / "cross_entropy53" ->
 * "gelu" / "cross_entropy". */
static void op_kind(const char *name, char *out, size_t size) {
    const char *p = name;
    if (p[0] == 'h' && isdigit((unsigned char)p[1])) {
        const char *q = p + 1;
        while (isdigit((unsigned char)*q)) q++;
        if (*q == '.') p = q + 1;
    }
    snprintf(out, size, "%s", p);
    if (!strchr(out, '.')) {
        size_t n = strlen(out);
        while (n > 0 && isdigit((unsigned char)out[n - 1])) n--;
        if (n > 0 && n < strlen(out)) out[n] = '\0';
    }
}

/* Matmul FLOPs of one op in one phase over the whole batch (all tiles):
 * linear and the tied LM head 2*rows*C*OC per phase F/B/W (their weight
 * gives C and OC); attention F 4*B*T^2*C, B 8*B*T^2*C (full T^2, four
 * sgemms); 0 for the rest (memory-bound). */
static double op_phase_flops(const pl_graph_t *g, const bench_options *o,
                             const char *op, char phase) {
    double B = o->batch, T = (double)o->cfg.context, C = (double)o->cfg.channels;
    const char *kind = strrchr(op, '.') ? strrchr(op, '.') + 1 : op;
    if (strcmp(kind, "attn") == 0) {
        if (phase == 'F') return 4.0 * B * T * T * C;
        if (phase == 'B') return 8.0 * B * T * T * C;
        return 0.0;
    }
    if (phase != 'F' && phase != 'B' && phase != 'W') return 0.0;
    char wname[80];
    if (strcmp(op, "lm_head") == 0) snprintf(wname, sizeof wname, "embedding.wte");
    else snprintf(wname, sizeof wname, "%s.weight", op);
    const pl_tensor_t *w = pl_graph_find(g, wname);
    int64_t shape[PL_MAX_DIMS];
    if (!w || pl_tensor_shape(w, shape) != 2) return 0.0;
    if (strcmp(op, "embedding") == 0) return 0.0;
    return 2.0 * B * T * (double)shape[0] * (double)shape[1];
}

static int cmp_group(const void *pa, const void *pb) {
    const op_group *a = pa, *b = pb;
    return (a->busy_us < b->busy_us) - (a->busy_us > b->busy_us);
}

static void build_profile(const pl_graph_t *g, const bench_options *o,
                          const pl_task_record *rec, int n, int workers,
                          profile *p) {
    memset(p, 0, sizeof *p);
    p->workers = workers;
    double t0 = INFINITY, t1 = -INFINITY;
    /* FLOPs per (full op name, phase) are counted once per group member op,
     * not once per tile: remember which were seen. */
    char (*seen)[52] = calloc((size_t)n, sizeof *seen);
    int n_seen = 0;
    for (int i = 0; i < n; i++) {
        const pl_task_record *r = &rec[i];
        double d = r->end_us - r->start_us;
        if (d < 0) d = 0;
        t0 = fmin(t0, r->start_us);
        t1 = fmax(t1, r->end_us);
        p->busy_us += d;
        p->n_tasks++;
        const char *ph = strchr(PHASES, r->phase);
        p->phase_us[ph && r->phase ? ph - PHASES : 5] += d;
        if (r->worker >= 0 && r->worker < 64) p->worker_busy_us[r->worker] += d;
        char kind[48];
        op_kind(r->phase == 'O' ? "optimizer" : r->op, kind, sizeof kind);
        int k;
        for (k = 0; k < p->n_groups; k++)
            if (p->groups[k].phase == r->phase && strcmp(p->groups[k].op, kind) == 0)
                break;
        if (k == p->n_groups) {
            if (p->n_groups == MAX_GROUPS) continue;
            op_group *ng = &p->groups[p->n_groups++];
            snprintf(ng->op, sizeof ng->op, "%s", kind);
            ng->phase = r->phase;
        }
        op_group *gr = &p->groups[k];
        gr->tasks++;
        gr->busy_us += d;
        if (seen) {
            char key[52];
            snprintf(key, sizeof key, "%c %.48s", r->phase, r->op);
            int s;
            for (s = 0; s < n_seen && strcmp(seen[s], key) != 0; s++) {}
            if (s == n_seen) {
                memcpy(seen[n_seen++], key, sizeof key);
                gr->flops += op_phase_flops(g, o, r->op, r->phase);
            }
        }
    }
    free(seen);
    p->span_us = n ? t1 - t0 : 0.0;
    qsort(p->groups, (size_t)p->n_groups, sizeof *p->groups, cmp_group);
}

static void print_profile(const profile *p) {
    printf("\nper-op breakdown of one profiled step (record_tasks; the fastest of %d, "
           "separate from the timed steps; %d tasks; op kinds with layer prefixes "
           "stripped; F forward, L loss, B input grad, W weight grad, O optimizer; "
           "GFLOP/s per worker for the matrix-product groups, attention with full "
           "T^2):\n", PROFILE_STEPS, p->n_tasks);
    printf("  %-18s %5s %6s %10s %7s %9s %9s\n", "op", "phase", "tasks", "total ms",
           "%busy", "us/task", "GFLOP/s");
    for (int k = 0; k < p->n_groups; k++) {
        const op_group *gr = &p->groups[k];
        char gf[16] = "-";
        if (gr->flops > 0 && gr->busy_us > 0)
            snprintf(gf, sizeof gf, "%.1f", gr->flops / (gr->busy_us * 1e-6) * 1e-9);
        printf("  %-18s %5c %6d %10.2f %6.1f%% %9.0f %9s\n", gr->op, gr->phase,
               gr->tasks, gr->busy_us * 1e-3, 100.0 * gr->busy_us / p->busy_us,
               gr->busy_us / gr->tasks, gf);
    }
    printf("  by phase:");
    const char *names[6] = {"F", "L", "B", "W", "O", "?"};
    for (int i = 0; i < 6; i++)
        if (p->phase_us[i] > 0)
            printf(" %s %.1f ms (%.0f%%)", names[i], p->phase_us[i] * 1e-3,
                   100.0 * p->phase_us[i] / p->busy_us);
    printf("\n");
    double matmul_us = 0.0, matmul_flops = 0.0;
    for (int k = 0; k < p->n_groups; k++)
        if (p->groups[k].flops > 0) {
            matmul_us += p->groups[k].busy_us;
            matmul_flops += p->groups[k].flops;
        }
    if (matmul_us > 0)
        printf("  matrix-product groups (linear, lm_head, attention): %.1f ms = %.0f%% of "
               "busy time at %.1f GFLOP/s per worker; the rest %.1f ms = %.0f%%\n",
               matmul_us * 1e-3, 100.0 * matmul_us / p->busy_us,
               matmul_flops / (matmul_us * 1e-6) * 1e-9, (p->busy_us - matmul_us) * 1e-3,
               100.0 * (p->busy_us - matmul_us) / p->busy_us);
    printf("  workers: busy %.1f ms of span %.1f ms x %d worker%s = %.0f%% utilisation"
           " (per worker:", p->busy_us * 1e-3, p->span_us * 1e-3, p->workers,
           p->workers == 1 ? "" : "s",
           100.0 * p->busy_us / (p->span_us * (p->workers > 0 ? p->workers : 1)));
    for (int w = 0; w < p->workers && w < 64; w++)
        printf(" %.0f%%", 100.0 * p->worker_busy_us[w] / p->span_us);
    printf(")\n  profiled step wall time %.1f ms (train_step call to its last task's "
           "end; the span is %.0f%% of it)\n",
           p->wall_us * 1e-3, 100.0 * p->span_us / p->wall_us);
}

/* ----------------------------------------------------------- Pleiades */

typedef struct pleiades_result {
    bench_comparison cmp;
    bench_torch_status torch;
    double first_loss, last_loss;
    int64_t n_params; /* all parameters */
    int64_t n_wpe;    /* numel of embedding.wpe */
    int workers, tiles;
    bool have_profile;
    profile prof;
} pleiades_result;

static pl_engine_t *new_engine(pl_runtime_t *rt, pl_graph_t *g, const bench_options *o,
                               bool record) {
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = o->batch;
    eo.tiles = o->run.tiles;
    bench_set_adamw(&eo);
    eo.record_tasks = record;
    eo.precision = o->bf16 ? PL_PRECISION_BF16 : PL_PRECISION_FP32;
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    if (!e)
        bench_fail("bench_gpt", record ? "pl_engine_new (profiling)" : "pl_engine_new");
    return e;
}

static pl_graph_t *new_gpt(const bench_options *o) {
    pl_graph_t *g = pl_graph_new(42);
    pl_gpt_model m;
    if (!g || pl_gpt_build(g, &o->cfg, &m) != PL_STATUS_OK) {
        bench_fail("bench_gpt", "building the GPT graph");
        pl_graph_free(g);
        return NULL;
    }
    return g;
}

/* The profiled step: a fresh engine with record_tasks (profiling stays on
 * afterwards, so this runs after the timed steps), a few warm-up steps, then
 * PROFILE_STEPS recorded steps, each started idle; the breakdown is that of
 * the fastest (the one least disturbed by anything else on the machine). */
static bool profile_step(pl_runtime_t *rt, const bench_options *o, pl_batch *b,
                         pleiades_result *res) {
    bool ok = false;
    pl_graph_t *g = new_gpt(o);
    pl_engine_t *e = g ? new_engine(rt, g, o, true) : NULL;
    profile *p = malloc(sizeof *p);
    pl_step_result r;
    if (!e || !p) goto out;
    for (int i = 0; i < PROFILE_WARMUP; i++)
        if (pl_engine_train_step(e, b, &r) != PL_STATUS_OK) {
            bench_fail("bench_gpt", "pl_engine_train_step (profiling)");
            goto out;
        }
    for (int i = 0; i < PROFILE_STEPS; i++) {
        starpu_task_wait_for_all();
        double t0 = bench_now_s();
        if (pl_engine_train_step(e, b, &r) != PL_STATUS_OK) {
            bench_fail("bench_gpt", "pl_engine_train_step (profiling)");
            goto out;
        }
        starpu_task_wait_for_all();
        double t1 = bench_now_s();
        const pl_task_record *rec;
        int n = pl_engine_task_records(e, &rec);
        if (n <= 0) {
            fprintf(stderr, "bench_gpt: the profiled step recorded no tasks\n");
            goto out;
        }
        build_profile(g, o, rec, n, res->workers, p);
        p->wall_us = (t1 - t0) * 1e6;
        if (!res->have_profile || p->wall_us < res->prof.wall_us) {
            res->prof = *p;
            res->have_profile = true;
        }
    }
    ok = true;
out:
    free(p);
    pl_engine_free(e);
    pl_graph_free(g);
    return ok;
}

/* Pleiades interleaved with the PyTorch peer, then one profiled step. */
static bool run_both(const bench_options *o, pleiades_result *res) {
    bool ok = false;
    const int64_t T = o->cfg.context;
    size_t n_tok = (size_t)o->batch * (size_t)T;
    int32_t *tokens = malloc(n_tok * sizeof *tokens);
    int32_t *targets = malloc(n_tok * sizeof *targets);
    pl_runtime_t *rt = NULL;
    pl_graph_t *g = NULL;
    pl_engine_t *e = NULL;
    if (!tokens || !targets) {
        fprintf(stderr, "bench_gpt: out of memory\n");
        goto out;
    }
    uint64_t s = 42;
    for (size_t i = 0; i < n_tok; i++) {
        tokens[i] = (int32_t)(bench_rng_next(&s) % (uint64_t)o->cfg.vocab);
        targets[i] = (int32_t)(bench_rng_next(&s) % (uint64_t)o->cfg.vocab);
    }

    pl_runtime_options ro = pl_runtime_options_default();
    /* CUDA: the default one CPU worker (it only takes host work, of which
     * this run has none). */
    ro.cpu_workers = o->cuda ? 0 : o->run.workers;
    ro.device = o->cuda ? PL_DEVICE_CUDA : PL_DEVICE_CPU;
    if (!(rt = pl_runtime_new(&ro))) {
        bench_fail("bench_gpt", "pl_runtime_new");
        goto out;
    }
    if (!(g = new_gpt(o)) || !(e = new_engine(rt, g, o, false))) goto out;
    res->workers = o->cuda ? pl_runtime_cuda_workers(rt) : pl_runtime_cpu_workers(rt);
    res->tiles = o->run.tiles ? o->run.tiles : res->workers;
    if (res->tiles > o->batch) res->tiles = o->batch;
    res->n_params = pl_graph_param_count(g);
    const pl_tensor_t *wpe = pl_graph_find(g, "embedding.wpe");
    res->n_wpe = wpe ? pl_tensor_numel(wpe) : 0;

    const void *data[2] = {tokens, targets};
    pl_batch b = {.size = o->batch, .data = data};
    double warm_ms;
    if (!bench_timed_steps("bench_gpt", e, &b, 0, o->run.warmup > 0 ? o->run.warmup : 1,
                           1, &warm_ms, &res->first_loss, &res->last_loss))
        goto out;
    bench_engine_rep m = {"bench_gpt", e, &b, &res->last_loss};
    char args[256];
    snprintf(args, sizeof args, "%d %d %d %d %lld %lld %lld %lld %lld", o->run.steps,
             o->run.warmup, 1, o->batch, (long long)o->cfg.layers,
             (long long)o->cfg.channels, (long long)o->cfg.context,
             (long long)o->cfg.heads, (long long)o->cfg.vocab);
    bench_compare_options co = {
        .source_dir = PL_SOURCE_DIR, .script = o->run.torch ? TORCH_SCRIPT : NULL,
        .args = args, .cores = o->run.torch_threads, .steps = o->run.steps,
        .warmup = o->run.warmup, .reps = o->run.reps, .calibration_reps = 2,
        .single_config = o->cuda};
    res->torch = bench_compare("bench_gpt", &co, bench_engine_rep_run, &m, &res->cmp);
    if (res->torch == BENCH_TORCH_FAILED && !(res->cmp.pleiades.median > 0)) goto out;
    starpu_task_wait_for_all();
    pl_engine_free(e);
    e = NULL;
    pl_graph_free(g);
    g = NULL;
    /* A failed profile is reported but does not void the timed figures. */
    if (!profile_step(rt, o, &b, res))
        fprintf(stderr, "bench_gpt: no per-op breakdown\n");
    ok = true;
out:
    pl_engine_free(e);
    pl_graph_free(g);
    pl_runtime_free(rt);
    free(tokens);
    free(targets);
    return ok;
}

/* --------------------------------------------------------------- main */

int main(int argc, char **argv) {
    bench_options o;
    int pr = parse_options(argc, argv, &o);
    if (pr) return pr < 0 ? 0 : 2;
    setenv("STARPU_SILENT", "1", 0); /* keep one set by the user */
    setenv("PL_PEER_PRECISION", o.bf16 ? "bf16" : "fp32", 1); /* gpt_torch.py */
    setenv("PL_PEER_DEVICE", o.cuda ? "cuda" : "cpu", 1);
    const pl_gpt_config *c = &o.cfg;
    const double B = o.batch, T = (double)c->context, C = (double)c->channels,
                 L = (double)c->layers;
    const double tokens = B * T;

    char where[160];
    if (o.cuda)
        snprintf(where, sizeof where, "the first GPU (CUDA workers only), tiles %s",
                 o.run.tiles ? "set" : "= 1");
    else
        snprintf(where, sizeof where, "%d worker%s (one per core: StarPU's workers are "
                 "Pleiades' only threads), tiles %s", o.run.workers,
                 o.run.workers == 1 ? "" : "s",
                 o.run.tiles ? "set" : "= workers (one tile each)");
    printf("bench_gpt: GPT V=%lld T=%lld C=%lld L=%lld NH=%lld, batch %d (%.0f tokens), "
           "%s, AdamW; %s; %d interleaved repetitions of %d steps per side\n",
           (long long)c->vocab, (long long)c->context, (long long)c->channels,
           (long long)c->layers, (long long)c->heads, o.batch, tokens,
           o.bf16 ? "bf16 (fp32 master weights and AdamW states; PyTorch: autocast)" : "fp32",
           where, o.run.reps, o.run.steps);
    fflush(stdout);

    /* 1. Before pl_runtime_new, which sets OpenBLAS back to 1 thread (and
     * takes the GPU). */
    double ceiling = o.cuda ? bench_cuda_sgemm_ceiling() : bench_sgemm_ceiling(o.run.workers);
    if (ceiling <= 0.0) {
        fprintf(stderr, "bench_gpt: no %s sgemm ceiling (above)\n", o.cuda ? "GPU" : "CPU");
        return 1;
    }

    /* 2., 4. interleaved, then 3. */
    pleiades_result pl = {0};
    if (!run_both(&o, &pl)) return 1;
    bool peer = pl.torch == BENCH_TORCH_OK;
    double n_flop_params = (double)(pl.n_params - pl.n_wpe);
    double dense_step = 6.0 * n_flop_params * tokens;
    double attn_step = 12.0 * L * B * T * T * C;
    double flop_step = dense_step + attn_step;
    double best_gflops = flop_step / (pl.cmp.pleiades.min * 1e-3) * 1e-9;
    double median_gflops = flop_step / (pl.cmp.pleiades.median * 1e-3) * 1e-9;
    double frac = best_gflops / ceiling;

    printf("\n");
    if (o.cuda)
        printf("sgemm ceiling (GPU 0, cublasSgemm %d^3, default math mode: fp32, no TF32, "
               "best of %d): %.1f GFLOP/s\n", BENCH_CUDA_GEMM_N, BENCH_CUDA_GEMM_TRIES,
               ceiling);
    else
        bench_print_ceiling(o.run.workers, ceiling);
    printf("flops/step: %.3f GFLOP = 6*N*tokens %.3f (N=%lld params without wpe's "
           "%lld, wte once as the tied head) + attention 12*L*B*T^2*C %.3f (fwd "
           "2*2*B*T^2*C per layer for q.k^T and att.v over the FULL T^2 the kernels "
           "compute, x3 for fwd+bwd)\n",
           flop_step * 1e-9, dense_step * 1e-9, (long long)(pl.n_params - pl.n_wpe),
           (long long)pl.n_wpe, attn_step * 1e-9);
    if (pl.have_profile) print_profile(&pl.prof);
    printf("\n");
    bench_print_comparison(&pl.cmp, peer, tokens, "tokens");
    printf("pleiades: best %.1f GFLOP/s (%.0f%% of ceiling), median %.1f GFLOP/s "
           "(%.0f%%)  [%d worker%s, %d tile%s, loss %.4f -> %.4f]\n",
           best_gflops, 100.0 * frac, median_gflops, 100.0 * median_gflops / ceiling,
           pl.workers, pl.workers == 1 ? "" : "s", pl.tiles, pl.tiles == 1 ? "" : "s",
           pl.first_loss, pl.last_loss);
    double ratio = peer ? pl.cmp.peer.min / pl.cmp.pleiades.min : 0.0;
    if (peer && o.bf16)
        printf("bf16    : %.2fx pytorch's autocast best vs best (bench_gpt's targets are "
               "fp32's; the ceiling is fp32 sgemm's)\n", ratio);
    if (peer && !o.bf16)
        printf("targets : >= %.0fx pytorch best vs best: %s (%.2fx); >= %.0f%% of "
               "ceiling: %s\n", TARGET_TORCH_RATIO,
               ratio >= TARGET_TORCH_RATIO ? "met" : "missed", ratio,
               100.0 * TARGET_CEILING, frac >= TARGET_CEILING ? "met" : "missed");
    printf("result pleiades_ms_min=%.3f pleiades_ms_median=%.3f pleiades_ms_max=%.3f "
           "sgemm_gflops=%.2f ceiling_fraction=%.3f flops_per_step=%.0f",
           pl.cmp.pleiades.min, pl.cmp.pleiades.median, pl.cmp.pleiades.max, ceiling,
           frac, flop_step);
    if (pl.have_profile)
        printf(" worker_utilisation=%.3f",
               pl.prof.busy_us / (pl.prof.span_us * (pl.prof.workers > 0 ? pl.prof.workers : 1)));
    if (peer)
        printf(" torch_ms_min=%.3f torch_ms_median=%.3f torch_ms_max=%.3f "
               "ratio_best=%.3f ratio_median=%.3f",
               pl.cmp.peer.min, pl.cmp.peer.median, pl.cmp.peer.max, ratio,
               pl.cmp.peer.median / pl.cmp.pleiades.median);
    printf("\n");
    return pl.torch == BENCH_TORCH_FAILED ? 1 : 0;
}
