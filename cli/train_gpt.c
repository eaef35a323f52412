/* `pleiades train --model gpt`: a byte-level GPT (pl_gpt_build) trained on
 * random windows of a text corpus, one optimizer step per batch, with a
 * validation loss every --eval-every steps and an optional safetensors
 * checkpoint for `pleiades generate`. Public API only, like cli/train.c. */
#define _POSIX_C_SOURCE 200809L /* strdup, access, also under -std=c11 */

#include "train_gpt.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "checkpoint.h"
#include "common.h"
#include "lr_options.h"
#include "metrics.h"

enum {
    /* Validation batches per evaluation: 8 × B windows of T bytes (16 Ki
     * tokens with the defaults), always the same ones (VAL_SEED), so that
     * every evaluation of a run -- and of runs with other --seed values --
     * scores the same text. */
    VAL_BATCHES = 8,
    /* Windows sampled to estimate the byte (unigram) entropy: about 1 Mi
     * bytes, whatever B and T are. */
    ENTROPY_BATCHES = 64,
    ENTROPY_TOKENS_PER_BATCH = 16384,
};
#define VAL_SEED UINT64_C(0x76616c6964617465) /* "validate" */
#define ENTROPY_SEED UINT64_C(0x656e74726f7079)  /* "entropy" */

/* Everything a run owns; run_free releases whatever was created. */
typedef struct gpt_run {
    const cli_gpt_options *o;
    cli_metrics metrics;
    pl_dataset_t *train_set, *val_set;
    pl_runtime_t *runtime;
    pl_graph_t *graph;
    pl_engine_t *engine;
    int32_t *tokens, *targets; /* one batch, [B, T] each */
    double entropy;            /* nats per byte of the training split */
    double started_at;
    cli_exec_memory memory;    /* placement figures over the run */
    int deferred_rc;           /* a failure reported after the checkpoint */
    int64_t first_step;        /* 1, or the step after a resumed checkpoint */
} gpt_run;

static int64_t tokens_per_batch(const cli_gpt_options *o) {
    return (int64_t)o->batch_size * o->model.context;
}

/* ------------------------------------------------------------ setup */

static int open_metrics(gpt_run *r) {
    return cli_metrics_open(&r->metrics, r->o->metrics_path);
}

/* Every output is written at the end (the checkpoint, the traces) or as
 * the run goes (metrics); a path none of them can go to should cost
 * seconds, not the whole run. */
static int check_output_paths(gpt_run *r) {
    int rc = cli_check_output_path("--save", r->o->save_path);
    if (rc == CLI_EXIT_OK) rc = cli_exec_check_outputs(&r->o->exec);
    return rc;
}

static pl_dataset_t *load_split(const char *path, bool train) {
    pl_dataset_t *ds = pl_dataset_text(path, train);
    if (!ds)
        cli_error("cannot load the %s text from '%s': %s",
                  train ? "training" : "validation", path, pl_last_error());
    return ds;
}

/* Loaded before StarPU starts, so a wrong --data fails fast. Both splits
 * must hold a whole window of T + 1 bytes (T tokens and their targets). */
static int load_data(gpt_run *r) {
    const cli_gpt_options *o = r->o;
    r->train_set = load_split(o->data_path, true);
    if (!r->train_set)
        return CLI_EXIT_FAILURE;
    r->val_set = load_split(o->data_path, false);
    if (!r->val_set)
        return CLI_EXIT_FAILURE;
    int64_t shortest = pl_dataset_size(r->val_set);
    if (pl_dataset_size(r->train_set) < shortest)
        shortest = pl_dataset_size(r->train_set);
    if (shortest <= o->model.context) {
        cli_error("--context: %" PRId64 " needs more than the %" PRId64
                  " bytes of the %s split of '%s'", o->model.context,
                  shortest,
                  shortest == pl_dataset_size(r->val_set) ? "validation"
                                                         : "training",
                  o->data_path);
        cli_usage_hint("train");
        return CLI_EXIT_USAGE;
    }
    size_t n = (size_t)tokens_per_batch(o);
    r->tokens = malloc(n * sizeof *r->tokens);
    r->targets = malloc(n * sizeof *r->targets);
    if (!r->tokens || !r->targets) {
        cli_error("out of memory for a batch of %zu tokens", n);
        return CLI_EXIT_FAILURE;
    }
    return CLI_EXIT_OK;
}

/* H = -Σ p ln p over the byte frequencies of ~1 Mi sampled training bytes:
 * the loss of the best model that ignores context, a yardstick for the
 * validation loss (a uniform guess would score ln 256 = 5.545). */
static int measure_entropy(gpt_run *r) {
    int64_t T = r->o->model.context;
    int64_t rows = (ENTROPY_TOKENS_PER_BATCH + T - 1) / T;
    size_t n = (size_t)(rows * T);
    int32_t *tokens = malloc(n * sizeof *tokens);
    int32_t *targets = malloc(n * sizeof *targets);
    if (!tokens || !targets) {
        free(tokens);
        free(targets);
        cli_error("out of memory while sampling the training text");
        return CLI_EXIT_FAILURE;
    }
    int64_t counts[CLI_GPT_VOCAB] = {0};
    int64_t total = 0;
    int rc = CLI_EXIT_OK;
    for (int k = 0; k < ENTROPY_BATCHES && rc == CLI_EXIT_OK; k++) {
        if (pl_text_batch(r->train_set, rows, T, ENTROPY_SEED, k, tokens,
                          targets) != PL_STATUS_OK) {
            rc = cli_library_failure("cannot sample the training text");
            break;
        }
        for (size_t i = 0; i < n; i++)
            if (tokens[i] >= 0 && tokens[i] < CLI_GPT_VOCAB) {
                counts[tokens[i]]++;
                total++;
            }
    }
    free(tokens);
    free(targets);
    double h = 0;
    for (int b = 0; b < CLI_GPT_VOCAB && total > 0; b++)
        if (counts[b] > 0) {
            double p = (double)counts[b] / (double)total;
            h -= p * log(p);
        }
    r->entropy = h;
    return rc;
}

static int start_runtime(gpt_run *r) {
    return cli_start_runtime(r->o->workers, &r->o->exec, &r->runtime);
}

static int build_graph(gpt_run *r) {
    r->graph = pl_graph_new(r->o->seed);
    if (!r->graph)
        return cli_library_failure("cannot create the model graph");
    pl_gpt_model model;
    if (pl_gpt_build(r->graph, &r->o->model, &model) != PL_STATUS_OK)
        return cli_library_failure("cannot build model 'gpt'");
    return CLI_EXIT_OK;
}

static int create_engine(gpt_run *r) {
    const cli_gpt_options *o = r->o;
    return cli_create_engine(r->runtime, r->graph, o->batch_size, o->tiles,
                             &o->optimizer, &o->exec, o->steps, &r->engine);
}

/* ----------------------------------------------------------- metrics */

static int metrics_step(gpt_run *r, int64_t step, double loss, double lr,
                        double seconds, const pl_iteration_memory *mem) {
    cli_metrics *m = &r->metrics;
    double rate = seconds > 0 ? 1.0 / seconds : 0;
    cli_metrics_begin(m, "step", step);
    cli_metrics_real(m, "loss", loss);
    cli_metrics_real(m, "lr", lr);
    int accumulate = r->o->exec.accumulate;
    cli_metrics_real(m, "samples_per_s", (double)r->o->batch_size * accumulate * rate);
    cli_metrics_real(m, "tokens_per_s",
                     (double)tokens_per_batch(r->o) * accumulate * rate);
    cli_exec_metrics_memory(&r->o->exec, m, mem);
    int rc = cli_exec_metrics_grad_norm(&r->o->exec, m, r->engine);
    if (rc == CLI_EXIT_OK) rc = cli_exec_metrics_loss_scale(&r->o->exec, m, r->engine);
    if (rc != CLI_EXIT_OK) return rc;
    return cli_metrics_end(m);
}

static int metrics_eval(gpt_run *r, int64_t step, double val_loss) {
    cli_metrics *m = &r->metrics;
    cli_metrics_begin(m, "step", step);
    cli_metrics_real(m, "val_loss", val_loss);
    return cli_metrics_end(m);
}

/* ---------------------------------------------------------- training */

static void print_header(const gpt_run *r) {
    const cli_gpt_options *o = r->o;
    const pl_gpt_config *m = &o->model;
    printf("model gpt: %" PRId64 " layers, %" PRId64 " channels, %" PRId64
           " heads, context %" PRId64 ", vocabulary %" PRId64 ": %" PRId64
           " parameters\n",
           m->layers, m->channels, m->heads, m->context, m->vocab,
           pl_graph_param_count(r->graph));
    printf("data %s: %" PRId64 " training, %" PRId64 " validation bytes; "
           "unigram entropy %.4f nats/byte (%.3f bits)\n",
           o->data_path, pl_dataset_size(r->train_set),
           pl_dataset_size(r->val_set), r->entropy, r->entropy / log(2.0));
    char schedule[128];
    cli_lr_describe(&o->exec.lr, schedule, sizeof schedule);
    printf("optimizer %s: lr %g (schedule %s), weight decay %g", o->optimizer_name,
           (double)o->optimizer.lr, schedule, (double)o->optimizer.weight_decay);
    if (o->optimizer.kind == PL_OPTIMIZER_SGD)
        printf(", momentum %g", (double)o->optimizer.momentum);
    printf("; batch size %d (%" PRId64 " tokens)", o->batch_size, tokens_per_batch(o));
    if (o->exec.accumulate > 1)
        printf(" x %d accumulated per update", o->exec.accumulate);
    printf("; %" PRId64 " steps; %d CPU workers\n", o->steps,
           pl_runtime_cpu_workers(r->runtime));
    fflush(stdout);
    cli_exec_print_placement(&o->exec, r->engine);
}

/* The mean loss of the VAL_BATCHES fixed validation batches. */
static int evaluate(gpt_run *r, double *val_loss) {
    const cli_gpt_options *o = r->o;
    const pl_step_options options = {.forward_only = true,
                                     .return_loss = true};
    const void *data[2] = {r->tokens, r->targets};
    pl_batch batch = {.size = o->batch_size, .data = data};
    double sum = 0;
    for (int k = 0; k < VAL_BATCHES; k++) {
        pl_step_result result;
        if (pl_text_batch(r->val_set, o->batch_size, o->model.context,
                          VAL_SEED, k, r->tokens,
                          r->targets) != PL_STATUS_OK)
            return cli_library_failure("cannot sample the validation text");
        if (pl_engine_forward_backward(r->engine, &batch, &options,
                                       &result) != PL_STATUS_OK)
            return cli_library_failure("evaluation failed");
        sum += result.loss;
    }
    *val_loss = sum / VAL_BATCHES;
    return CLI_EXIT_OK;
}

/* Train loss and throughput since the last progress line. */
typedef struct interval {
    double loss_sum;
    int64_t steps;
    double seconds; /* spent in training steps (validation excluded) */
} interval;

static int report(gpt_run *r, int64_t step, interval *iv, double *val_loss) {
    int rc = evaluate(r, val_loss);
    if (rc == CLI_EXIT_OK)
        rc = metrics_eval(r, step, *val_loss);
    if (rc != CLI_EXIT_OK)
        return rc;
    if (!r->o->quiet) {
        double train_loss = iv->steps ? iv->loss_sum / (double)iv->steps : NAN;
        double rate = iv->seconds > 0 ? (double)(iv->steps * r->o->exec.accumulate *
                                                 tokens_per_batch(r->o)) /
                                            iv->seconds
                                      : 0;
        printf("step %" PRId64 "/%" PRId64 "  train loss %.4f  val loss %.4f"
               "  %.0f tokens/s  elapsed %.1fs\n",
               step, r->o->steps, train_loss, *val_loss, rate,
               cli_now_seconds() - r->started_at);
        fflush(stdout);
    }
    *iv = (interval){0};
    return CLI_EXIT_OK;
}

/* ------------------------------------------------------- checkpoints */

/* What makes the data stream resumable: batch i is a function of (seed,
 * i) alone, so the step and the seed fix the position. */
static int resume(gpt_run *r) {
    const cli_gpt_options *o = r->o;
    r->first_step = 1;
    if (!o->resume_path)
        return CLI_EXIT_OK;
    char path[4096];
    pl_checkpoint_values v = {0};
    int rc = cli_checkpoint_resume(r->engine, o->resume_path, o->seed, o->exec.accumulate,
                                   &v, path, sizeof path);
    if (rc != CLI_EXIT_OK)
        return rc;
    int64_t done = pl_engine_steps(r->engine);
    if (done >= o->steps) {
        cli_error("--resume: %s is at step %" PRId64 ", and --steps %" PRId64
                  " asks for no more (--steps counts all steps, resumed ones included)",
                  path, done, o->steps);
        cli_usage_hint("train");
        return CLI_EXIT_USAGE;
    }
    r->first_step = done + 1;
    printf("resumed from %s at step %" PRId64 "\n", path, done);
    fflush(stdout);
    return CLI_EXIT_OK;
}

/* DIR/step-<step> when --checkpoint-dir is given and the step is due. */
static int save_step_checkpoint(gpt_run *r, int64_t step) {
    const cli_gpt_options *o = r->o;
    if (!o->checkpoint_dir ||
        !(step == o->steps || (o->save_every > 0 && step % o->save_every == 0)))
        return CLI_EXIT_OK;
    pl_checkpoint_values v = {0};
    return cli_checkpoint_save(r->engine, o->checkpoint_dir, step, o->keep_last, o->seed,
                               o->exec.accumulate, &v, o->quiet);
}

static int train_steps(gpt_run *r) {
    const cli_gpt_options *o = r->o;
    if (!o->quiet)
        print_header(r);
    const void *data[2] = {r->tokens, r->targets}; /* inputs in creation
                                                      order */
    pl_batch batch = {.size = o->batch_size, .data = data};
    interval iv = {0};
    double val_loss = NAN;
    r->started_at = cli_now_seconds();
    for (int64_t step = r->first_step; step <= o->steps; step++) {
        pl_step_result result;
        double lr = pl_engine_lr(r->engine); /* the schedule's, this step */
        double t0 = cli_now_seconds(), loss_sum = 0.0;
        /* An optimizer step is `accumulate` batches (--accumulate); the
         * engine updates after the last of them. */
        for (int micro = 0; micro < o->exec.accumulate; micro++) {
            /* Batch i is a function of (seed, i) alone: a run is
             * reproducible and a longer run sees the shorter one's
             * batches first. */
            int64_t index = (step - 1) * o->exec.accumulate + micro;
            if (pl_text_batch(r->train_set, o->batch_size, o->model.context,
                              o->seed, index, r->tokens,
                              r->targets) != PL_STATUS_OK)
                return cli_library_failure("cannot sample the training text");
            if (pl_engine_train_step(r->engine, &batch, &result) !=
                PL_STATUS_OK) {
                cli_error("training step %" PRId64 " failed: %s", step,
                          pl_last_error());
                return CLI_EXIT_FAILURE;
            }
            loss_sum += result.loss;
        }
        result.loss = loss_sum / o->exec.accumulate;
        /* With a placement this waits for the step's optimizer update, so
         * it is timed with the step (the next step would wait anyway). */
        pl_iteration_memory mem;
        int rc = cli_exec_memory_step(&o->exec, r->engine, &mem, &r->memory);
        if (rc != CLI_EXIT_OK)
            return rc;
        double seconds = cli_now_seconds() - t0;
        rc = metrics_step(r, step, result.loss, lr, seconds, &mem);
        if (rc != CLI_EXIT_OK)
            return rc;
        if (!isfinite(result.loss)) {
            cli_error("training diverged: loss %g at step %" PRId64
                      "; try a smaller --lr", result.loss, step);
            return CLI_EXIT_FAILURE;
        }
        iv.loss_sum += result.loss;
        iv.steps++;
        iv.seconds += seconds;
        bool last = step == o->steps;
        /* The trace is of the last training step, before validation's
         * forward-only steps replace the task records. */
        /* A trace that cannot be written fails the run, but only after the
         * checkpoint is saved (never lose a finished run's weights). */
        if (last)
            r->deferred_rc = cli_exec_write_traces(&o->exec, r->engine);
        if (last || (o->eval_every > 0 && step % o->eval_every == 0)) {
            rc = report(r, step, &iv, &val_loss);
            if (rc != CLI_EXIT_OK)
                return rc;
        }
        if ((rc = save_step_checkpoint(r, step)) != CLI_EXIT_OK)
            return rc;
    }
    printf("final val loss: %.4f (unigram entropy %.4f)\n", val_loss,
           r->entropy);
    fflush(stdout);
    if (!o->quiet)
        cli_exec_print_memory(&o->exec, &r->memory);
    return CLI_EXIT_OK;
}

/* The metadata `pleiades generate` rebuilds the model from. */
static int save_checkpoint(gpt_run *r) {
    const char *path = r->o->save_path;
    if (!path)
        return CLI_EXIT_OK;
    const pl_gpt_config *m = &r->o->model;
    char values[5][24];
    const int64_t numbers[5] = {m->vocab, m->context, m->channels, m->layers,
                                m->heads};
    for (int i = 0; i < 5; i++)
        snprintf(values[i], sizeof values[i], "%" PRId64, numbers[i]);
    const char *const keys[6] = {"model",    "vocab",  "context",
                                 "channels", "layers", "heads"};
    const char *const vals[6] = {"gpt",     values[0], values[1],
                                 values[2], values[3], values[4]};
    if (pl_engine_save_safetensors(r->engine, path, keys, vals, 6) !=
        PL_STATUS_OK) {
        cli_error("--save: cannot write '%s': %s", path, pl_last_error());
        return CLI_EXIT_FAILURE;
    }
    printf("saved %s\n", path);
    fflush(stdout);
    return CLI_EXIT_OK;
}

static int run_free(gpt_run *r, int rc) {
    if (r->engine)
        pl_engine_free(r->engine);
    if (r->graph)
        pl_graph_free(r->graph);
    pl_runtime_free(r->runtime);
    if (r->val_set)
        pl_dataset_free(r->val_set);
    if (r->train_set)
        pl_dataset_free(r->train_set);
    free(r->tokens);
    free(r->targets);
    return cli_metrics_close(&r->metrics, rc);
}

int cli_train_gpt(const cli_gpt_options *o) {
    static int (*const steps[])(gpt_run *) = {
        open_metrics,  check_output_paths, load_data,   measure_entropy,
        start_runtime, build_graph,     create_engine, resume, train_steps,
        save_checkpoint,
    };
    gpt_run run = {.o = o};
    int rc = CLI_EXIT_OK;
    for (size_t i = 0; i < sizeof steps / sizeof *steps && rc == CLI_EXIT_OK;
         i++)
        rc = steps[i](&run);
    if (rc == CLI_EXIT_OK)
        rc = run.deferred_rc;
    return run_free(&run, rc);
}
