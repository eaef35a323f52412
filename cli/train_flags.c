/* The command line of `pleiades train` (see train_flags.h): the flags of
 * the model, its data and outputs, one row each (cli/flags.h), followed by
 * cli/exec_flags.c's on how it runs; the defaults that follow the model;
 * the cross-checks; the usage printed from the same rows. */
#include "train_flags.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "train.h"
#include "train_gpt.h"

#define DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"
#define DEFAULT_TEXT_PATH "/usr/share/games/fortunes"
#define DEFAULT_ADAMW_WEIGHT_DECAY 0.01f
#define DEFAULT_SGD_MOMENTUM 0.9f

enum {
    DEFAULT_BATCH_SIZE = 256,
    DEFAULT_GPT_BATCH_SIZE = 16,
    /* Limits that catch typos (an extra zero) long before they would
     * exhaust memory; none is a limit of the engine itself. */
    MAX_LAYER_WIDTH = 65536,
    MAX_EPOCHS = 100000,
    MAX_BATCH_SIZE = 1 << 20,
    MAX_TILES = 64, /* the engine's limit */
    MAX_GPT_STEPS = 1000000000,
    MAX_EVAL_BATCHES = 1 << 20,
    /* Sequences × context: 64 Mi tokens is far past what fits anyway. */
    MAX_GPT_BATCH_TOKENS = 1 << 26,
};

#define COMMAND(member) CLI_FIELD(CLI_DEST_COMMAND, train_config, member)
/* A flag only one model takes: another model's flag is a mistake
 * (--epochs with --model gpt, which trains for --steps), refused rather
 * than ignored. */
#define ONLY(model) .group = 1u << (model)

static const cli_choice MODELS[] = {
    {"mlp", CLI_MODEL_MLP, "Fashion-MNIST perceptron, ReLU between layers"},
    {"gpt", CLI_MODEL_GPT, "GPT-2 style transformer on text (bytes) or token files"},
    {NULL, 0, NULL},
};

static const cli_choice DATA_FORMATS[] = {
    {"auto", CLI_DATA_AUTO, "llmc when --data starts with llm.c's magic, else text"},
    {"text", CLI_DATA_TEXT, "bytes (vocabulary 256): the first 90% trains, the rest validates"},
    {"llmc", CLI_DATA_LLMC,
     "llm.c's token files: 256-int32 header (magic 20240520 version 1: uint16 tokens; "
     "magic 20240801 version 7: uint32), then the tokens"},
    {"raw-u16", CLI_DATA_RAW_U16, "nanoGPT's train.bin/val.bin: bare uint16 tokens"},
    {"raw-u32", CLI_DATA_RAW_U32, "bare uint32 tokens"},
    {NULL, 0, NULL},
};

static const cli_choice OPTIMIZERS[] = {
    {"sgd", PL_OPTIMIZER_SGD, NULL},
    {"adamw", PL_OPTIMIZER_ADAMW, NULL},
    {NULL, 0, NULL},
};

const char *cli_optimizer_name(pl_optimizer_kind kind) {
    for (const cli_choice *c = OPTIMIZERS; c->name; c++)
        if (c->value == kind) return c->name;
    return "?";
}

static void workers_help(char *buf, size_t size) {
    snprintf(buf, size,
             "StarPU CPU workers, 0..%d (default 0: StarPU's choice; --device cuda: "
             "host-only workers, default 1)",
             pl_runtime_max_cpu_workers());
}

static const cli_flag ROWS[] = {
    {.kind = CLI_SECTION, .help = "Model:"},
    {"model", "NAME", CLI_CHOICE, COMMAND(model), .choices = MODELS,
     .help = "model to train (default {default}):"},

    {.kind = CLI_SECTION, .help = "MLP only (--model mlp):"},
    {"hidden", "N[,N...]", CLI_INT_LIST, COMMAND(hidden), .min = 1, .max = MAX_LAYER_WIDTH,
     .capacity = CLI_MAX_HIDDEN_LAYERS, .count_offset = offsetof(train_config, n_hidden),
     ONLY(CLI_MODEL_MLP), .help = "hidden layer widths, {range} each (default {default})"},
    {"epochs", "N", CLI_INT, COMMAND(epochs), .min = 1, .max = MAX_EPOCHS, ONLY(CLI_MODEL_MLP),
     .help = "passes over the training set, {range} (default {default})"},

    {.kind = CLI_SECTION, .help = "GPT only (--model gpt; trains for --steps, --epochs is an "
                                  "error):"},
    {"layers", "L", CLI_INT, COMMAND(gpt.layers), .min = 1, .max = CLI_GPT_MAX_LAYERS,
     ONLY(CLI_MODEL_GPT), .help = "transformer blocks, {range} (default {default})"},
    {"channels", "C", CLI_INT, COMMAND(gpt.channels), .min = 1, .max = CLI_GPT_MAX_CHANNELS,
     ONLY(CLI_MODEL_GPT),
     .help = "embedding width, {range}, a multiple of --heads (default {default})"},
    {"heads", "NH", CLI_INT, COMMAND(gpt.heads), .min = 1, .max = CLI_GPT_MAX_HEADS,
     ONLY(CLI_MODEL_GPT), .help = "attention heads, {range} (default {default})"},
    {"context", "T", CLI_INT, COMMAND(gpt.context), .min = 1, .max = CLI_GPT_MAX_CONTEXT,
     ONLY(CLI_MODEL_GPT), .help = "tokens (text: bytes) per training sequence, {range} (default {default})"},
    {"vocab", "N", CLI_INT, COMMAND(gpt.vocab), .min = 1, .max = CLI_GPT_MAX_VOCAB,
     ONLY(CLI_MODEL_GPT),
     .help = "vocabulary, {range}: required with token files (GPT-2's: 50257); text is "
             "bytes, 256"},
    {"vocab-pad", "M", CLI_INT, COMMAND(vocab_pad), .min = 1, .max = CLI_GPT_MAX_VOCAB_PAD,
     ONLY(CLI_MODEL_GPT),
     .help = "pad the embedding and logits to a multiple of M, {range} (64: 50257 -> 50304); "
             "padded logits are masked out of the loss and of sampling (default {default}: "
             "none)"},
    {"steps", "N", CLI_INT, COMMAND(steps), .min = 1, .max = MAX_GPT_STEPS, ONLY(CLI_MODEL_GPT),
     .help = "optimizer steps, {range} (default {default})"},
    {"eval-every", "N", CLI_INT, COMMAND(eval_every), .min = 0, .max = MAX_GPT_STEPS,
     ONLY(CLI_MODEL_GPT),
     .help = "validation loss every N steps and after the last; 0 = after the last only "
             "(default {default})"},
    {"eval-batches", "N", CLI_INT, COMMAND(eval_batches), .min = 1, .max = MAX_EVAL_BATCHES,
     ONLY(CLI_MODEL_GPT),
     .help = "validation batches (of --batch-size windows, always the same ones) per "
             "evaluation, periodic and final, {range} (default: 0.3 x steps / evaluations, "
             "in 1..8: a forward-only batch costs about a third of a step, so evaluation "
             "takes at most ~10% of the run)"},
    {"save", "FILE", CLI_PATH, COMMAND(save_path), .what = "a file name", ONLY(CLI_MODEL_GPT),
     .help = "write the trained weights and config to a safetensors file for 'pleiades "
             "generate'"},

    {.kind = CLI_SECTION, .help = "Checkpoints (both models):"},
    {"checkpoint-dir", "DIR", CLI_PATH, COMMAND(checkpoint_dir), .what = "a directory",
     .help = "full checkpoints (weights, optimizer states, step) in DIR/step-<N>, written "
             "atomically"},
    {"save-every", "N", CLI_INT, COMMAND(save_every), .min = 1, .max = MAX_GPT_STEPS,
     .help = "a checkpoint every N optimizer updates (default: after the last)"},
    {"keep-last", "K", CLI_INT, COMMAND(keep_last), .min = 1, .max = 1 << 20,
     .help = "keep only the K newest checkpoints (default all)"},
    {"resume", "PATH", CLI_PATH, COMMAND(resume_path),
     .what = "a checkpoint or checkpoint directory",
     .help = "continue exactly from a checkpoint, or from the newest in a --checkpoint-dir; "
             "--steps is the total"},

    {.kind = CLI_SECTION, .help = "Data:"},
    {"data", "PATH", CLI_PATH, COMMAND(data_path), .what = "a path",
     .help = "mlp: directory with the Fashion-MNIST IDX files (default " DEFAULT_DATA_DIR
             "); gpt: text file or directory of text files, the first 90% trains and the "
             "last 10% validates (default " DEFAULT_TEXT_PATH "), or a token file (the "
             "training split; --val-data the validation split), memory-mapped"},
    {"val-data", "FILE", CLI_PATH, COMMAND(val_data_path), .what = "a file name",
     ONLY(CLI_MODEL_GPT), .help = "token files: the validation split (required with them)"},
    {"data-format", "NAME", CLI_CHOICE, COMMAND(data_format), .choices = DATA_FORMATS,
     ONLY(CLI_MODEL_GPT), .help = "what --data holds (default {default}):"},

    {.kind = CLI_SECTION, .help = "Training:"},
    {"batch-size", "B", CLI_INT, COMMAND(batch_size), .min = 1, .max = MAX_BATCH_SIZE,
     .help = "samples (gpt: sequences) per optimizer step, {range} (default 256 for mlp, 16 "
             "for gpt)"},
    {"lr", "X", CLI_REAL, CLI_ENGINE(optimizer.lr), .range = {0, INFINITY, true, false},
     .help = "learning rate, {range} (default {default})"},
    {"optimizer", "NAME", CLI_CHOICE, CLI_ENGINE(optimizer.kind), .choices = OPTIMIZERS,
     .help = "sgd or adamw (default {default})"},
    {"momentum", "X", CLI_REAL, CLI_ENGINE(optimizer.momentum), .range = {0, 1, false, true},
     .help = "SGD momentum in {range} (default {default})"},
    {"weight-decay", "X", CLI_REAL, CLI_ENGINE(optimizer.weight_decay),
     .range = {0, INFINITY, false, false},
     .help = "{range} (default 0.01 for adamw, 0 for sgd)"},
    {"seed", "S", CLI_INT, COMMAND(seed), .min = 0, .max = INT64_MAX,
     .help = "seed for initialisation and the order of the data (default {default})"},

    {.kind = CLI_SECTION, .help = "Runtime:"},
    {"workers", "N", CLI_CUSTOM, CLI_RUNTIME(cpu_workers), .parse = cli_parse_workers_flag,
     .help_fn = workers_help},
    {"tiles", "N", CLI_INT, CLI_ENGINE(tiles), .min = 0, .max = MAX_TILES,
     .help = "batch tiles per step, {range} (default 0: one per worker; per GPU with --device "
             "cuda); with --budget-mb or --recompute, tiles beyond the workers run one after "
             "another, so more tiles lower the activations' peak"},

    {.kind = CLI_SECTION, .help = "Output:"},
    {"metrics", "FILE", CLI_PATH, COMMAND(metrics_path), .what = "a file name",
     .help = "write JSON Lines metrics: one line per step and per epoch (mlp) or validation "
             "(gpt); 'pleiades plot' draws it"},
    {"tensorboard", "DIR", CLI_PATH, COMMAND(tensorboard_dir), .what = "a directory",
     .help = "also write TensorBoard event files (loss, lr, throughput, memory, loss scale, "
             "test/val loss) to DIR"},
    {"quiet", NULL, CLI_SWITCH, COMMAND(quiet),
     .help = "print only the final test accuracy (gpt: val loss)"},
    {"help", NULL, CLI_HELP, .help = "show this help and exit"},
};

/* ----------------------------------------------------------- parsing */

static void config_defaults(train_config *cfg) {
    *cfg = (train_config){
        .model = CLI_MODEL_MLP,
        .hidden = {1024, 1024},
        .n_hidden = 2,
        .epochs = 5,
        .gpt = {.vocab = CLI_GPT_VOCAB, .context = 128, .channels = 256, .layers = 4,
                .heads = 4},
        .vocab_pad = 1,
        .steps = 1000,
        .eval_every = 100,
        /* data_path and batch_size follow the model: finish_config */
        .seed = 42,
    };
    cli_exec_defaults(&cfg->exec);
    /* SGD's; AdamW takes none (finish_config). */
    cfg->exec.engine.optimizer.momentum = DEFAULT_SGD_MOMENTUM;
}

static void flags_init(train_config *cfg) {
    const cli_flag_table tables[] = {CLI_TABLE(ROWS), cli_exec_flag_table};
    void *const dest[CLI_N_DESTS] = {cfg, &cfg->exec, &cfg->exec.engine, &cfg->exec.runtime};
    cli_flags_init(&cfg->exec.flags, tables, 2, dest);
}

static bool given(const train_config *cfg, const char *flag) {
    return cli_flags_given(&cfg->exec.flags, flag);
}

/* Flags of another model than --model's. */
static bool check_model_flags(const train_config *cfg) {
    const cli_flags *f = &cfg->exec.flags;
    for (int i = 0; i < f->n_flags; i++) {
        unsigned owners = f->flag[i]->group;
        if (!owners || (owners & (1u << cfg->model)) || !given(cfg, f->names[i])) continue;
        int owner = 0;
        while (!(owners & (1u << owner))) owner++;
        cli_error("%s: only applies to --model %s, not %s%s", f->names[i], MODELS[owner].name,
                  MODELS[cfg->model].name,
                  strcmp(f->names[i], "--epochs") == 0 ? " (use --steps)" : "");
        return false;
    }
    return true;
}

static bool check_gpt_config(const train_config *cfg) {
    const pl_gpt_config *m = &cfg->gpt;
    if (m->channels % m->heads != 0) {
        cli_error("--channels/--heads: --channels %" PRId64 " is not a "
                  "multiple of --heads %" PRId64, m->channels, m->heads);
        return false;
    }
    if ((int64_t)cfg->batch_size * m->context > MAX_GPT_BATCH_TOKENS) {
        cli_error("--batch-size/--context: %d sequences of %" PRId64
                  " tokens exceed %d tokens per step", cfg->batch_size,
                  m->context, MAX_GPT_BATCH_TOKENS);
        return false;
    }
    return true;
}

/* What can be told of --data before reading it: --val-data, --vocab and
 * --vocab-pad's padded vocabulary. The rest (is an 'auto' file a token
 * file? then --val-data and --vocab are required) once --data is opened
 * (cli/train_gpt.c), so that parsing reads no file. */
static bool finish_gpt_data(train_config *cfg) {
    if (cfg->data_format == CLI_DATA_TEXT && cfg->val_data_path) {
        cli_error("--val-data: only for token files (text splits --data 90/10 itself)");
        return false;
    }
    if (cfg->data_format == CLI_DATA_TEXT && given(cfg, "--vocab") &&
        cfg->gpt.vocab != CLI_GPT_VOCAB) {
        cli_error("--vocab: text is bytes, a vocabulary of %d, not %" PRId64
                  " (token files take --vocab)", CLI_GPT_VOCAB, cfg->gpt.vocab);
        return false;
    }
    /* Megatron's make_vocab_size_divisible_by: the next multiple. */
    int64_t V = cfg->gpt.vocab, M = cfg->vocab_pad, padded = (V + M - 1) / M * M;
    cfg->gpt.padded_vocab = padded > V ? padded : 0;
    return true;
}

/* The optimizer's options once --optimizer is known: the weight decay's
 * default follows it; SGD takes the momentum, AdamW keeps the library's
 * (none) and has its betas spelled out, so that the CLI's AdamW does not
 * drift with the library's defaults. */
static void finish_optimizer(train_config *cfg) {
    pl_optimizer_options *o = &cfg->exec.engine.optimizer;
    if (!given(cfg, "--weight-decay"))
        o->weight_decay = o->kind == PL_OPTIMIZER_ADAMW ? DEFAULT_ADAMW_WEIGHT_DECAY : 0.0f;
    if (o->kind == PL_OPTIMIZER_SGD) return;
    o->momentum = pl_engine_options_default().optimizer.momentum;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->eps = 1e-8f;
}

static bool finish_config(train_config *cfg) {
    bool gpt = cfg->model == CLI_MODEL_GPT;
    if (!check_model_flags(cfg)) return false;
    if (!given(cfg, "--data")) cfg->data_path = gpt ? DEFAULT_TEXT_PATH : DEFAULT_DATA_DIR;
    if (!given(cfg, "--batch-size"))
        cfg->batch_size = gpt ? DEFAULT_GPT_BATCH_SIZE : DEFAULT_BATCH_SIZE;
    if (gpt && !check_gpt_config(cfg)) return false;
    if (gpt && !finish_gpt_data(cfg)) return false;
    if ((cfg->save_every || cfg->keep_last) && !cfg->checkpoint_dir) {
        cli_error("%s: needs --checkpoint-dir", cfg->save_every ? "--save-every"
                                                                : "--keep-last");
        return false;
    }
    finish_optimizer(cfg);
    pl_engine_options *e = &cfg->exec.engine;
    if (e->schedule != PL_SCHEDULE_NONE && e->tiles) {
        cli_error("--tiles: pipeline schedules take --microbatches instead");
        return false;
    }
    if (!cli_exec_finish(&cfg->exec, cfg->batch_size)) return false;
    if (e->tiles > cfg->batch_size / e->dp) {
        cli_error("--tiles: expected at most --batch-size / --dp (%d), got %d",
                  cfg->batch_size / e->dp, e->tiles);
        return false;
    }
    if (given(cfg, "--momentum") && e->optimizer.kind != PL_OPTIMIZER_SGD)
        fprintf(stderr, "%s: warning: --momentum only applies to "
                "--optimizer sgd; ignored\n", CLI_PROGRAM);
    return true;
}

cli_parse_result cli_train_parse(int argc, char **argv, train_config *cfg) {
    config_defaults(cfg);
    flags_init(cfg);
    cli_parse_result r = cli_flags_parse(&cfg->exec.flags, argc, argv, NULL);
    if (r != CLI_PARSE_RUN) return r;
    return finish_config(cfg) ? CLI_PARSE_RUN : CLI_PARSE_ERROR;
}

int cli_train_check(int argc, char **argv) {
    train_config cfg;
    return cli_train_parse(argc, argv, &cfg) == CLI_PARSE_ERROR ? CLI_EXIT_USAGE : CLI_EXIT_OK;
}

void cli_train_usage(FILE *out) {
    fprintf(out,
            "Usage: %s train [options]\n"
            "\n"
            "Train an MLP on Fashion-MNIST, reporting the test loss and accuracy after\n"
            "every epoch, or a byte-level GPT on text, reporting the validation loss\n"
            "every --eval-every steps.\n"
            "\n",
            CLI_PROGRAM);
    train_config cfg; /* the defaults, for "{default}" */
    config_defaults(&cfg);
    flags_init(&cfg);
    cli_flags_usage(&cfg.exec.flags, out);
}
