/* `pleiades train --model gpt`: a GPT (pl_gpt_build) trained on random
 * windows of a text corpus (bytes) or of token files (llm.c's, nanoGPT's;
 * memory-mapped), one optimizer step per batch, with a
 * validation loss every --eval-every steps and an optional safetensors
 * checkpoint for `pleiades generate`. Public API only, like cli/train.c;
 * the command line is cli/train_flags.c's. */
#define _POSIX_C_SOURCE 200809L /* strdup, access, also under -std=c11 */

#include "train_gpt.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "common.h"
#include "fit.h"
#include "lr_options.h"
#include "train_flags.h"
#include "util/regular_file.h"

enum {
    /* Validation batches per evaluation by default, at most: 8 × B windows
     * of T tokens (16 Ki tokens with the defaults), always the same ones
     * (VAL_SEED), so that every evaluation of a run -- and of runs with
     * other --seed values -- scores the same text. */
    MAX_DEFAULT_VAL_BATCHES = 8,
    /* Windows sampled to estimate the byte (unigram) entropy: about 1 Mi
     * bytes, whatever B and T are. */
    ENTROPY_BATCHES = 64,
    ENTROPY_TOKENS_PER_BATCH = 16384,
};
#define VAL_SEED UINT64_C(0x76616c6964617465) /* "validate" */
#define ENTROPY_SEED UINT64_C(0x656e74726f7079)  /* "entropy" */

/* Everything a run owns; run_free releases whatever was created. */
typedef struct gpt_run {
    const train_config *o;
    pl_dataset_t *train_set, *val_set;
    pl_text_source_t *train_source, *val_source;
    pl_runtime_t *runtime;
    pl_graph_t *graph;
    pl_engine_t *engine;
    cli_data_format format;    /* --data-format, auto resolved */
    double entropy;            /* nats per token of the training split */
    int deferred_rc;           /* a failure reported after the checkpoint */
} gpt_run;

static int64_t tokens_per_batch(const train_config *o) {
    return (int64_t)o->batch_size * o->gpt.context;
}

/* Evaluations in a run: after every --eval-every steps and after the last
 * (once when they coincide). */
static int64_t evaluations(const train_config *o) {
    return o->eval_every > 0 ? (o->steps - 1) / o->eval_every + 1 : 1;
}

/* --eval-batches, or the default: a forward-only batch costs about a third
 * of a training step (forward + backward ≈ 3 forwards), so E batches per
 * evaluation cost evaluations × E / 3 steps' time, at most 10 % of the
 * --steps when E <= 0.3 × steps / evaluations; within 1..8 (8 for the
 * default run: 1000 steps, 10 evaluations: ~3 %). */
static int64_t eval_batches(const train_config *o) {
    if (o->eval_batches > 0) return o->eval_batches;
    int64_t e = 3 * o->steps / (10 * evaluations(o));
    return e < 1 ? 1 : e > MAX_DEFAULT_VAL_BATCHES ? MAX_DEFAULT_VAL_BATCHES : e;
}

/* ------------------------------------------------------------ setup */

/* ------------------------------------------ the config in checkpoints */

/* `optional`: absent from checkpoints written before it was kept, and then
 * 0 (padded_vocab 0: no padding). */
static const struct config_key {
    const char *key, *flag;
    int64_t max;
    size_t offset;
    bool optional;
} CONFIG_KEYS[] = {
    {"gpt.vocab", "--vocab", CLI_GPT_MAX_VOCAB, offsetof(pl_gpt_config, vocab), false},
    {"gpt.padded_vocab", "padded vocabulary (--vocab-pad)", CLI_GPT_MAX_VOCAB + CLI_GPT_MAX_VOCAB_PAD,
     offsetof(pl_gpt_config, padded_vocab), true},
    {"gpt.context", "--context", CLI_GPT_MAX_CONTEXT, offsetof(pl_gpt_config, context), false},
    {"gpt.channels", "--channels", CLI_GPT_MAX_CHANNELS, offsetof(pl_gpt_config, channels), false},
    {"gpt.layers", "--layers", CLI_GPT_MAX_LAYERS, offsetof(pl_gpt_config, layers), false},
    {"gpt.heads", "--heads", CLI_GPT_MAX_HEADS, offsetof(pl_gpt_config, heads), false},
};
#define N_CONFIG_KEYS (sizeof CONFIG_KEYS / sizeof CONFIG_KEYS[0])

static int64_t *config_field(pl_gpt_config *m, const struct config_key *k) {
    return (int64_t *)((char *)m + k->offset);
}

void cli_gpt_config_to_values(const pl_gpt_config *m, pl_checkpoint_values *v) {
    pl_gpt_config c = *m;
    for (size_t i = 0; i < N_CONFIG_KEYS; i++) /* room: 6 of 16, keys short */
        pl_checkpoint_values_set(v, CONFIG_KEYS[i].key, *config_field(&c, &CONFIG_KEYS[i]));
}

bool cli_gpt_config_from_values(const pl_checkpoint_values *v, const char *what,
                                pl_gpt_config *m) {
    for (size_t i = 0; i < N_CONFIG_KEYS; i++) {
        const struct config_key *k = &CONFIG_KEYS[i];
        int64_t x;
        if (pl_checkpoint_values_get(v, k->key, &x) != PL_STATUS_OK && k->optional) {
            *config_field(m, k) = 0;
            continue;
        }
        if (pl_checkpoint_values_get(v, k->key, &x) != PL_STATUS_OK) {
            cli_error("%s holds no GPT config (no value '%s': not a GPT's, or saved before "
                      "checkpoints kept it)", what, k->key);
            return false;
        }
        if (x < (k->optional ? 0 : 1) || x > k->max) {
            cli_error("%s: value '%s' is %" PRId64 ", expected an integer in [1, %" PRId64
                      "]", what, k->key, x, k->max);
            return false;
        }
        *config_field(m, k) = x;
    }
    if (m->channels % m->heads != 0) {
        cli_error("%s: channels %" PRId64 " are not a multiple of heads %" PRId64, what,
                  m->channels, m->heads);
        return false;
    }
    if (m->padded_vocab != 0 && m->padded_vocab < m->vocab) {
        cli_error("%s: padded vocabulary %" PRId64 " is below the vocabulary %" PRId64, what,
                  m->padded_vocab, m->vocab);
        return false;
    }
    return true;
}

/* --resume: a checkpoint that keeps its config is checked against this
 * run's before anything loads, naming the flag (without one, the engine's
 * parameter count check still refuses another shape). */
static int check_resume_config(gpt_run *r) {
    const train_config *o = r->o;
    char dir[4096];
    pl_checkpoint_values v;
    if (!o->resume_path || pl_checkpoint_find(o->resume_path, dir, sizeof dir) ||
        pl_checkpoint_read_values(dir, &v))
        return CLI_EXIT_OK; /* the load reports what is wrong with it */
    pl_gpt_config mine = o->gpt;
    for (size_t i = 0; i < N_CONFIG_KEYS; i++) {
        const struct config_key *k = &CONFIG_KEYS[i];
        int64_t x;
        if (pl_checkpoint_values_get(&v, k->key, &x) != PL_STATUS_OK) {
            if (k->optional) continue;
            return CLI_EXIT_OK;
        }
        if (x != *config_field(&mine, k)) {
            cli_error("--resume: %s holds a GPT with %s %" PRId64 ", this run builds %s %" PRId64
                      " (give the checkpoint's)", dir, k->flag, x, k->flag,
                      *config_field(&mine, k));
            cli_usage_hint("train");
            return CLI_EXIT_USAGE;
        }
    }
    return CLI_EXIT_OK;
}

/* Every output is written at the end (the checkpoint, the traces) or as
 * the run goes (metrics); a path none of them can go to should cost
 * seconds, not the whole run. */
static int check_output_paths(gpt_run *r) {
    int rc = cli_check_output_path("--save", r->o->save_path);
    if (rc == CLI_EXIT_OK) rc = cli_check_output_path("--metrics", r->o->metrics_path);
    if (rc == CLI_EXIT_OK) rc = cli_check_output_dir("--checkpoint-dir", r->o->checkpoint_dir);
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

/* llm.c's magic (either width) at the start of `path`: --data-format
 * auto's test. A file that cannot be read is not one (the text loader
 * then says what is wrong with it). */
static bool has_llmc_magic(const char *path) {
    const char *why;
    int fd = pl_open_regular(path, 0, &why);
    if (fd < 0) return false;
    unsigned char b[4];
    bool ok = read(fd, b, 4) == 4;
    close(fd);
    uint32_t magic = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                     (uint32_t)b[3] << 24;
    return ok && (magic == 20240520u || magic == 20240801u);
}

static pl_token_format token_format(cli_data_format f) {
    return f == CLI_DATA_RAW_U16 ? PL_TOKENS_RAW_U16
           : f == CLI_DATA_RAW_U32 ? PL_TOKENS_RAW_U32 : PL_TOKENS_LLMC;
}

/* --data-format auto resolved, and what token files need: --val-data and
 * --vocab (a file does not say its vocabulary; the check of its tokens
 * needs one). */
static int resolve_format(gpt_run *r) {
    const train_config *o = r->o;
    r->format = o->data_format;
    if (r->format == CLI_DATA_AUTO)
        r->format = has_llmc_magic(o->data_path) ? CLI_DATA_LLMC : CLI_DATA_TEXT;
    const char *missing = NULL;
    if (r->format == CLI_DATA_TEXT) {
        if (o->val_data_path)
            missing = "--val-data: only for token files, and --data is text (it splits "
                      "90/10 itself)";
        else if (o->gpt.vocab != CLI_GPT_VOCAB)
            missing = "--vocab: --data is text, whose vocabulary is the 256 bytes "
                      "(--data-format llmc|raw-u16|raw-u32 for token files)";
    } else if (!o->val_data_path) {
        missing = "--val-data: missing; token files need their validation split's file";
    } else if (!cli_flags_given(&o->exec.flags, "--vocab")) {
        missing = "--vocab: missing; token files need the tokenizer's vocabulary "
                  "(GPT-2's: 50257)";
    }
    if (missing) {
        cli_error("%s", missing);
        cli_usage_hint("train");
        return CLI_EXIT_USAGE;
    }
    return CLI_EXIT_OK;
}

static pl_dataset_t *load_tokens(const gpt_run *r, const char *flag, const char *path) {
    pl_dataset_t *ds = pl_dataset_tokens(path, token_format(r->format), r->o->gpt.vocab);
    if (!ds) cli_error("%s: %s", flag, pl_last_error());
    return ds;
}

/* Loaded before StarPU starts, so a wrong --data fails fast. Both splits
 * must hold a whole window of T + 1 tokens (T tokens and their targets). */
static int load_data(gpt_run *r) {
    const train_config *o = r->o;
    int rc = resolve_format(r);
    if (rc != CLI_EXIT_OK) return rc;
    bool text = r->format == CLI_DATA_TEXT;
    r->train_set = text ? load_split(o->data_path, true)
                        : load_tokens(r, "--data", o->data_path);
    if (!r->train_set)
        return CLI_EXIT_FAILURE;
    r->val_set = text ? load_split(o->data_path, false)
                      : load_tokens(r, "--val-data", o->val_data_path);
    if (!r->val_set)
        return CLI_EXIT_FAILURE;
    int64_t shortest = pl_dataset_size(r->val_set);
    if (pl_dataset_size(r->train_set) < shortest)
        shortest = pl_dataset_size(r->train_set);
    if (shortest <= o->gpt.context) {
        bool val = shortest == pl_dataset_size(r->val_set);
        cli_error("--context: %" PRId64 " needs more than the %" PRId64 " %s of the %s split "
                  "'%s'", o->gpt.context, shortest, text ? "bytes" : "tokens",
                  val ? "validation" : "training",
                  val && !text ? o->val_data_path : o->data_path);
        cli_usage_hint("train");
        return CLI_EXIT_USAGE;
    }
    return CLI_EXIT_OK;
}

/* H = -Σ p ln p over the token frequencies of ~1 Mi sampled training
 * tokens: the loss of the best model that ignores context, a yardstick for
 * the validation loss (a uniform guess would score ln V: ln 256 = 5.545
 * for bytes). */
static int measure_entropy(gpt_run *r) {
    int64_t T = r->o->gpt.context;
    int64_t rows = (ENTROPY_TOKENS_PER_BATCH + T - 1) / T;
    size_t n = (size_t)(rows * T);
    int64_t V = r->o->gpt.vocab;
    int32_t *tokens = malloc(n * sizeof *tokens);
    int32_t *targets = malloc(n * sizeof *targets);
    int64_t *counts = calloc((size_t)V, sizeof *counts);
    if (!tokens || !targets || !counts) {
        free(tokens);
        free(targets);
        free(counts);
        cli_error("out of memory while sampling the training data");
        return CLI_EXIT_FAILURE;
    }
    int64_t total = 0;
    int rc = CLI_EXIT_OK;
    for (int k = 0; k < ENTROPY_BATCHES && rc == CLI_EXIT_OK; k++) {
        if (pl_text_batch(r->train_set, rows, T, ENTROPY_SEED, k, tokens,
                          targets) != PL_STATUS_OK) {
            rc = cli_library_failure("cannot sample the training data");
            break;
        }
        for (size_t i = 0; i < n; i++)
            if (tokens[i] >= 0 && tokens[i] < V) {
                counts[tokens[i]]++;
                total++;
            }
    }
    free(tokens);
    free(targets);
    double h = 0;
    for (int64_t b = 0; b < V && total > 0; b++)
        if (counts[b] > 0) {
            double p = (double)counts[b] / (double)total;
            h -= p * log(p);
        }
    free(counts);
    r->entropy = h;
    return rc;
}

static int start_runtime(gpt_run *r) {
    return cli_start_runtime(&r->o->exec.runtime, &r->o->exec.flags, &r->runtime);
}

/* --dp/--pp: every rank read the same text (each loads its own). */
static int check_same_data(gpt_run *r) {
    const pl_dataset_t *sets[] = {r->train_set, r->val_set};
    return cli_check_same_data(r->runtime, r->o->data_path, sets, 2);
}

static int build_graph(gpt_run *r) {
    r->graph = pl_graph_new(r->o->seed);
    if (!r->graph)
        return cli_library_failure("cannot create the model graph");
    pl_gpt_model model;
    if (pl_gpt_build(r->graph, &r->o->gpt, &model) != PL_STATUS_OK)
        return cli_library_failure("cannot build model 'gpt'");
    return CLI_EXIT_OK;
}

static int create_engine(gpt_run *r) {
    const train_config *o = r->o;
    return cli_create_engine(r->runtime, r->graph, o->batch_size, &o->exec, o->steps,
                             &r->engine);
}

/* ---------------------------------------------------------- training */

static void print_header(const gpt_run *r) {
    const train_config *o = r->o;
    const pl_gpt_config *m = &o->gpt;
    printf("model gpt: %" PRId64 " layers, %" PRId64 " channels, %" PRId64
           " heads, context %" PRId64 ", vocabulary %" PRId64, m->layers, m->channels,
           m->heads, m->context, m->vocab);
    if (m->padded_vocab) printf(" (padded to %" PRId64 ")", m->padded_vocab);
    printf(": %" PRId64 " parameters\n", pl_graph_param_count(r->graph));
    if (r->format == CLI_DATA_TEXT)
        printf("data %s: %" PRId64 " training, %" PRId64 " validation bytes; "
               "unigram entropy %.4f nats/byte (%.3f bits)\n",
               o->data_path, pl_dataset_size(r->train_set),
               pl_dataset_size(r->val_set), r->entropy, r->entropy / log(2.0));
    else
        printf("data %s (%s tokens): %" PRId64 " training tokens, %" PRId64
               " validation tokens in %s; unigram entropy %.4f nats/token (uniform: "
               "%.4f)\n", o->data_path, pl_token_format_name(token_format(r->format)),
               pl_dataset_size(r->train_set), pl_dataset_size(r->val_set),
               o->val_data_path, r->entropy, log((double)m->vocab));
    char schedule[128];
    const pl_optimizer_options *op = &o->exec.engine.optimizer;
    cli_lr_describe(&o->exec.engine.lr_scheduler, schedule, sizeof schedule);
    printf("optimizer %s: lr %g (schedule %s), weight decay %g", cli_optimizer_name(op->kind),
           (double)op->lr, schedule, (double)op->weight_decay);
    if (op->kind == PL_OPTIMIZER_SGD)
        printf(", momentum %g", (double)op->momentum);
    printf("; batch size %d (%" PRId64 " tokens)", o->batch_size, tokens_per_batch(o));
    if (o->exec.engine.accumulate_size > 1)
        printf(" x %d accumulated per update", o->exec.engine.accumulate_size);
    printf("; %" PRId64 " steps, %" PRId64 " validation batch%s per evaluation; ", o->steps,
           eval_batches(o), eval_batches(o) == 1 ? "" : "es");
    cli_print_workers(r->runtime);
    cli_exec_print_data_parallel(&o->exec, r->runtime);
    printf("\n");
    fflush(stdout);
    cli_exec_print_pipeline(&o->exec, r->engine, pl_graph_num_blocks(r->graph));
    cli_exec_print_precision(&o->exec, r->engine);
    cli_exec_print_placement(&o->exec, r->engine);
}

/* An epoch of the trainer is the --eval-every updates between two
 * validations (all --steps when it is 0); the last one is cut short by
 * --steps. */
static int64_t steps_per_epoch(const train_config *o) {
    return o->eval_every > 0 && o->eval_every < o->steps ? o->eval_every : o->steps;
}

/* Training windows of the text: batch i is a function of (seed, i) alone,
 * so a run is reproducible and a longer run sees the shorter one's batches
 * first. Validation: the same eval_batches windows (VAL_SEED) every time,
 * so that every evaluation of a run -- and of runs with other --seed
 * values -- scores the same text. */
static int create_sources(gpt_run *r) {
    const train_config *o = r->o;
    r->train_source = pl_text_source_new(r->train_set, o->batch_size, o->gpt.context, o->seed,
                                         steps_per_epoch(o) * o->exec.engine.accumulate_size, false);
    r->val_source = pl_text_source_new(r->val_set, o->batch_size, o->gpt.context, VAL_SEED,
                                       eval_batches(o), true);
    /* A rank of a dp x pp grid feeds its replica's data-parallel slice. */
    int dp = o->exec.engine.dp,
        rank = pl_runtime_grid_replica(r->runtime, dp, o->exec.engine.pp,
                                       pl_runtime_rank(r->runtime));
    if (!r->train_source || !r->val_source ||
        pl_text_source_set_shard(r->train_source, rank, dp) != PL_STATUS_OK ||
        pl_text_source_set_shard(r->val_source, rank, dp) != PL_STATUS_OK)
        return cli_library_failure("cannot sample the text");
    return CLI_EXIT_OK;
}

/* The trainer (cli/fit.c) with a line per validation: --steps updates of
 * --accumulate batches, validated every --eval-every and after the last. */
static int train_steps(gpt_run *r) {
    const train_config *o = r->o;
    if (!o->quiet)
        print_header(r);
    int64_t spe = steps_per_epoch(o);
    cli_fit f = {
        .engine = r->engine, .exec = &o->exec,
        .train = pl_text_source(r->train_source), .test = pl_text_source(r->val_source),
        .epochs = (o->steps + spe - 1) / spe, .max_steps = o->steps,
        .by_step = true, .steps_per_epoch = spe, .test_name = "val",
        .max_test_batches = eval_batches(o),
        .tokens_per_sample = o->gpt.context,
        .metrics_path = o->metrics_path, .tensorboard_dir = o->tensorboard_dir,
        .checkpoint_dir = o->checkpoint_dir, .save_every = o->save_every,
        .save_path = o->save_path, .param_count = pl_graph_param_count(r->graph),
        .keep_last = (int)o->keep_last, .resume_path = o->resume_path,
        .seed = o->seed, .quiet = o->quiet,
        .writer = pl_runtime_rank(r->runtime) == 0, .rank = pl_runtime_rank(r->runtime),
    };
    cli_gpt_config_to_values(&o->gpt, &f.model_values);
    cli_fit_result result;
    int rc = cli_fit_run(&f, &result);
    r->deferred_rc = result.trace_status;
    if (rc != CLI_EXIT_OK)
        return rc;
    printf("final val loss: %.4f (unigram entropy %.4f)\n", result.test_loss, r->entropy);
    fflush(stdout);
    if (!o->quiet)
        cli_exec_print_memory(&o->exec, &result.memory, r->runtime, r->engine);
    if (!o->quiet) cli_exec_print_model_state(&o->exec, r->engine);
    return CLI_EXIT_OK;
}

/* The metadata `pleiades generate` rebuilds the model from. */
static int save_checkpoint(gpt_run *r) {
    const char *path = r->o->save_path;
    /* ZeRO-3: every rank joins the gathering of the whole parameters. */
    if (path && pl_engine_gather_params(r->engine) != PL_STATUS_OK) {
        cli_error("--save: cannot gather the parameters: %s", pl_last_error());
        return CLI_EXIT_FAILURE;
    }
    if (!path || pl_runtime_rank(r->runtime) != 0) /* rank 0 writes */
        return CLI_EXIT_OK;
    const pl_gpt_config *m = &r->o->gpt;
    char values[6][24];
    /* padded_vocab: the embedding's rows, vocab or more (--vocab-pad). */
    const int64_t numbers[6] = {m->vocab, m->context, m->channels, m->layers,
                                m->heads, m->padded_vocab ? m->padded_vocab : m->vocab};
    for (int i = 0; i < 6; i++)
        snprintf(values[i], sizeof values[i], "%" PRId64, numbers[i]);
    const char *const keys[7] = {"model",    "vocab",  "context",
                                 "channels", "layers", "heads", "padded_vocab"};
    const char *const vals[7] = {"gpt",     values[0], values[1],
                                 values[2], values[3], values[4], values[5]};
    if (pl_engine_save_safetensors(r->engine, path, keys, vals, 7) !=
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
    pl_text_source_free(r->train_source);
    pl_text_source_free(r->val_source);
    return rc;
}

int cli_train_gpt(const train_config *o) {
    static int (*const steps[])(gpt_run *) = {
        check_resume_config, check_output_paths, load_data, measure_entropy, start_runtime,
        check_same_data,     build_graph,        create_engine, create_sources,  train_steps,
        save_checkpoint,
    };
    gpt_run run = {.o = o};
    int rc = CLI_EXIT_OK;
    for (size_t i = 0; i < sizeof steps / sizeof *steps && rc == CLI_EXIT_OK;
         i++)
        rc = steps[i](&run);
    if (rc == CLI_EXIT_OK)
        rc = run.deferred_rc;
    cli_end_distributed(run.runtime, rc);
    return run_free(&run, rc);
}
