/* `pleiades train`: parse the options, then build a model graph, train it
 * with the engine one optimizer step per batch and evaluate on the test set
 * after every epoch. Only the public API (pleiades.h) is used, so this file
 * doubles as the reference for driving the library from C.
 *
 * --model gpt shares the option parsing and hands over to cli/train_gpt.c,
 * which trains on text for a number of steps instead of epochs. */
#include "train.h"

#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <pleiades.h>

#include "args.h"
#include "common.h"
#include "exec_options.h"
#include "lr_options.h"
#include "fit.h"
#include "train_gpt.h"

/* ---------------------------------------------------------- defaults */

#define DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"
#define DEFAULT_TEXT_PATH "/usr/share/games/fortunes"
#define DEFAULT_HIDDEN_TEXT "1024,1024" /* keep in step with config_defaults */
#define DEFAULT_LR 1e-3
#define DEFAULT_MOMENTUM 0.9
#define DEFAULT_ADAMW_WEIGHT_DECAY 0.01

enum {
    DEFAULT_EPOCHS = 5,
    DEFAULT_BATCH_SIZE = 256,
    DEFAULT_SEED = 42,
    /* --model gpt */
    DEFAULT_GPT_LAYERS = 4,
    DEFAULT_GPT_CHANNELS = 256,
    DEFAULT_GPT_HEADS = 4,
    DEFAULT_GPT_CONTEXT = 128,
    DEFAULT_GPT_STEPS = 1000,
    DEFAULT_GPT_EVAL_EVERY = 100,
    DEFAULT_GPT_BATCH_SIZE = 16,
    /* Limits that catch typos (an extra zero) long before they would
     * exhaust memory; none is a limit of the engine itself. */
    MAX_HIDDEN_LAYERS = 16,
    MAX_LAYER_WIDTH = 65536,
    MAX_EPOCHS = 100000,
    MAX_BATCH_SIZE = 1 << 20,
    MAX_TILES = 64, /* the engine's limit */
    MAX_GPT_LAYERS = CLI_GPT_MAX_LAYERS,
    MAX_GPT_CHANNELS = CLI_GPT_MAX_CHANNELS,
    MAX_GPT_HEADS = CLI_GPT_MAX_HEADS,
    MAX_GPT_CONTEXT = CLI_GPT_MAX_CONTEXT,
    MAX_GPT_STEPS = 1000000000,
    /* Sequences × context: 64 Mi tokens is far past what fits anyway. */
    MAX_GPT_BATCH_TOKENS = 1 << 26,
    /* Fashion-MNIST has 10 classes; the dataset API does not report it. */
    N_CLASSES = 10,
};

/* ------------------------------------------------------------ config */

typedef struct model_def model_def;

#define MAX_OPTIONS 96

typedef struct train_config {
    const model_def *model;
    int64_t hidden[MAX_HIDDEN_LAYERS];
    int n_hidden;
    pl_gpt_config gpt;     /* --layers, --channels, --heads, --context */
    int64_t steps;         /* gpt */
    int64_t eval_every;    /* gpt; 0 = only after the last step */
    const char *save_path; /* gpt */
    const char *checkpoint_dir; /* --checkpoint-dir */
    int64_t save_every;    /* updates; 0 = at the end only */
    int64_t keep_last;     /* 0 = keep all */
    const char *resume_path; /* a checkpoint or a --checkpoint-dir */
    const char *data_dir;  /* a text file or directory for gpt */
    int epochs;
    int batch_size;
    pl_optimizer_kind optimizer;
    float lr;
    float momentum;
    float weight_decay;
    bool momentum_set;     /* to warn that AdamW ignores it */
    bool weight_decay_set; /* else the default follows the optimizer */
    uint64_t seed;
    int workers;
    int tiles;
    const char *metrics_path;
    const char *tensorboard_dir; /* --tensorboard */
    bool quiet;
    uint32_t seen; /* OPTION_BIT() of every option on the command line */
    cli_exec_options exec; /* --device, --schedule, --trace, ... */
    /* Per LONG_OPTIONS entry: "--name" and a hash of its value as given
     * (or of its absence), compared between the ranks of a --dp run. */
    char option_names[MAX_OPTIONS][40];
    const char *option_name_ptrs[MAX_OPTIONS];
    uint64_t option_hashes[MAX_OPTIONS];
} train_config;

/* ----------------------------------------------------------- options */

enum option_id {
    OPT_HELP = 'h',
    OPT_MODEL = 256, /* past every char, so no clash with short options */
    OPT_HIDDEN,
    OPT_DATA,
    OPT_EPOCHS,
    OPT_BATCH_SIZE,
    OPT_LR,
    OPT_OPTIMIZER,
    OPT_MOMENTUM,
    OPT_WEIGHT_DECAY,
    OPT_SEED,
    OPT_WORKERS,
    OPT_TILES,
    OPT_METRICS,
    OPT_TENSORBOARD,
    OPT_QUIET,
    OPT_LAYERS,
    OPT_CHANNELS,
    OPT_HEADS,
    OPT_CONTEXT,
    OPT_STEPS,
    OPT_EVAL_EVERY,
    OPT_SAVE,
    OPT_CHECKPOINT_DIR,
    OPT_SAVE_EVERY,
    OPT_KEEP_LAST,
    OPT_RESUME,
    OPT_END_, /* must stay within the 32 bits of train_config.seen */
    /* cli/exec_options.c's options (shared by both models; not in seen) */
    OPT_EXEC_ = 512,
};

/* The bit of an option in train_config.seen and model_def.own_options. */
#define OPTION_BIT(id) (UINT32_C(1) << ((id) - OPT_MODEL))
_Static_assert(OPT_END_ - OPT_MODEL <= 32, "option bits exceed 32");

static const struct option LONG_OPTIONS[] = {
    {"model", required_argument, NULL, OPT_MODEL},
    {"hidden", required_argument, NULL, OPT_HIDDEN},
    {"layers", required_argument, NULL, OPT_LAYERS},
    {"channels", required_argument, NULL, OPT_CHANNELS},
    {"heads", required_argument, NULL, OPT_HEADS},
    {"context", required_argument, NULL, OPT_CONTEXT},
    {"data", required_argument, NULL, OPT_DATA},
    {"epochs", required_argument, NULL, OPT_EPOCHS},
    {"steps", required_argument, NULL, OPT_STEPS},
    {"eval-every", required_argument, NULL, OPT_EVAL_EVERY},
    {"batch-size", required_argument, NULL, OPT_BATCH_SIZE},
    {"lr", required_argument, NULL, OPT_LR},
    {"optimizer", required_argument, NULL, OPT_OPTIMIZER},
    {"momentum", required_argument, NULL, OPT_MOMENTUM},
    {"weight-decay", required_argument, NULL, OPT_WEIGHT_DECAY},
    {"seed", required_argument, NULL, OPT_SEED},
    {"workers", required_argument, NULL, OPT_WORKERS},
    {"tiles", required_argument, NULL, OPT_TILES},
    {"metrics", required_argument, NULL, OPT_METRICS},
    {"tensorboard", required_argument, NULL, OPT_TENSORBOARD},
    {"save", required_argument, NULL, OPT_SAVE},
    {"checkpoint-dir", required_argument, NULL, OPT_CHECKPOINT_DIR},
    {"save-every", required_argument, NULL, OPT_SAVE_EVERY},
    {"keep-last", required_argument, NULL, OPT_KEEP_LAST},
    {"resume", required_argument, NULL, OPT_RESUME},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"device", required_argument, NULL, OPT_EXEC_},
    {"cuda-workers", required_argument, NULL, OPT_EXEC_ + 1},
    {"schedule", required_argument, NULL, OPT_EXEC_ + 2},
    {"stages", required_argument, NULL, OPT_EXEC_ + 3},
    {"chunks", required_argument, NULL, OPT_EXEC_ + 4},
    {"microbatches", required_argument, NULL, OPT_EXEC_ + 5},
    {"microbatch-size", required_argument, NULL, OPT_EXEC_ + 6},
    {"layers-per-stage", required_argument, NULL, OPT_EXEC_ + 7},
    {"trace", required_argument, NULL, OPT_EXEC_ + 8},
    {"paje", required_argument, NULL, OPT_EXEC_ + 9},
    {"placement", required_argument, NULL, OPT_EXEC_ + 10},
    {"budget-mb", required_argument, NULL, OPT_EXEC_ + 11},
    {"host-budget-mb", required_argument, NULL, OPT_EXEC_ + 12},
    {"offload-dir", required_argument, NULL, OPT_EXEC_ + 13},
    {"chunk-mb", required_argument, NULL, OPT_EXEC_ + 14},
    {"shard-param-frac", required_argument, NULL, OPT_EXEC_ + 15},
    {"offload-optim-frac", required_argument, NULL, OPT_EXEC_ + 16},
    {"offload-param-frac", required_argument, NULL, OPT_EXEC_ + 17},
    {"max-prefetch", required_argument, NULL, OPT_EXEC_ + 18},
    {"warmup-non-model-data-ratio", required_argument, NULL, OPT_EXEC_ + 19},
    {"steady-cuda-cap-ratio", required_argument, NULL, OPT_EXEC_ + 20},
    {"gpu-margin-mem-ratio", required_argument, NULL, OPT_EXEC_ + 21},
    {"lr-schedule", required_argument, NULL, OPT_EXEC_ + 22},
    {"warmup-steps", required_argument, NULL, OPT_EXEC_ + 23},
    {"total-steps", required_argument, NULL, OPT_EXEC_ + 24},
    {"eta-min", required_argument, NULL, OPT_EXEC_ + 25},
    {"step-size", required_argument, NULL, OPT_EXEC_ + 26},
    {"gamma", required_argument, NULL, OPT_EXEC_ + 27},
    {"milestones", required_argument, NULL, OPT_EXEC_ + 28},
    {"end-lr", required_argument, NULL, OPT_EXEC_ + 29},
    {"power", required_argument, NULL, OPT_EXEC_ + 30},
    {"pct-start", required_argument, NULL, OPT_EXEC_ + 31},
    {"accumulate", required_argument, NULL, OPT_EXEC_ + 32},
    {"max-norm", required_argument, NULL, OPT_EXEC_ + 33},
    {"norm-type", required_argument, NULL, OPT_EXEC_ + 34},
    {"loss-scale", required_argument, NULL, OPT_EXEC_ + 35},
    {"initial-scale", required_argument, NULL, OPT_EXEC_ + 36},
    {"min-scale", required_argument, NULL, OPT_EXEC_ + 37},
    {"max-scale", required_argument, NULL, OPT_EXEC_ + 38},
    {"growth-factor", required_argument, NULL, OPT_EXEC_ + 39},
    {"backoff-factor", required_argument, NULL, OPT_EXEC_ + 40},
    {"growth-interval", required_argument, NULL, OPT_EXEC_ + 41},
    {"hysteresis", required_argument, NULL, OPT_EXEC_ + 42},
    {"dp", required_argument, NULL, OPT_EXEC_ + 43},
    {"zero-stage", required_argument, NULL, OPT_EXEC_ + 44},
    {"reduce-bucket-size-in-m", required_argument, NULL, OPT_EXEC_ + 45},
    {"overlap-communication", required_argument, NULL, OPT_EXEC_ + 46},
    {"cpu-offload", required_argument, NULL, OPT_EXEC_ + 47},
    {"stage-balance", required_argument, NULL, OPT_EXEC_ + 48},
    {"precision", required_argument, NULL, OPT_EXEC_ + 49},
    {"master-weights", required_argument, NULL, OPT_EXEC_ + 50},
    {"force-outputs-fp32", required_argument, NULL, OPT_EXEC_ + 51},
    {"search-range-m", required_argument, NULL, OPT_EXEC_ + 52},
    {"min-chunk-size-m", required_argument, NULL, OPT_EXEC_ + 53},
    {"hidden-dim", required_argument, NULL, OPT_EXEC_ + 54},
    {"chunk-search-n-grids", required_argument, NULL, OPT_EXEC_ + 55},
    {"pp", required_argument, NULL, OPT_EXEC_ + 56},
    {"fuse-tasks", required_argument, NULL, OPT_EXEC_ + 57},
    {"workers-per-stage", required_argument, NULL, OPT_EXEC_ + 58},
    {"mpi-progress", required_argument, NULL, OPT_EXEC_ + 59},
    {"collective-timeout", required_argument, NULL, OPT_EXEC_ + 60},
    {"check-finite", no_argument, NULL, OPT_EXEC_ + 61},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

/* ------------------------------------------------------------ models */

/* What a model builder hands back: the logits that the loss and accuracy
 * are computed from and the int32 label input they are compared with. */
typedef struct model_io {
    pl_tensor_t *logits;
    pl_tensor_t *labels;
} model_io;

/* Adds a model's inputs and layers to `g`; false leaves the reason in
 * pl_last_error(). Classifiers are chosen by name from MODELS, so adding
 * one is a builder and a table row; the loss, metric and training loop are
 * shared (run_classifier). */
typedef bool (*model_build_fn)(pl_graph_t *g, const train_config *cfg,
                               int64_t n_features, int64_t n_classes,
                               model_io *io);

/* Trains a model once the command line is known to be valid; returns the
 * exit status. */
typedef int (*model_run_fn)(const train_config *cfg);

struct model_def {
    const char *name;
    const char *help;
    model_build_fn build;  /* classifiers; NULL for models with their own */
    model_run_fn run;      /* training loop */
    uint32_t own_options;  /* OPTION_BITs of options only this model takes */
};

/* x [784] -> fc1 -> ReLU -> ... -> fcN -> ReLU -> head [10]. */
static bool build_mlp(pl_graph_t *g, const train_config *cfg,
                      int64_t n_features, int64_t n_classes, model_io *io) {
    int64_t in_shape[1] = {n_features};
    /* Inputs are fed in creation order, matching the loader's batches:
     * data[0] features, data[1] labels. */
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, in_shape);
    pl_tensor_t *y = pl_graph_input(g, "y", PL_DTYPE_I32, 0, NULL);
    if (!x || !y)
        return false;
    pl_tensor_t *h = x;
    for (int i = 0; i < cfg->n_hidden && h; i++) {
        char name[16];
        snprintf(name, sizeof name, "fc%d", i + 1);
        /* Each layer is a block: the unit pipeline schedules cut. */
        if (i > 0)
            pl_graph_begin_block(g, name);
        h = pl_linear(g, h, cfg->hidden[i], name);
        if (h)
            h = pl_relu(g, h);
    }
    if (h)
        pl_graph_begin_block(g, "head");
    io->logits = h ? pl_linear(g, h, n_classes, "head") : NULL;
    io->labels = y;
    return io->logits != NULL;
}

static int run_classifier(const train_config *cfg);
static int run_gpt(const train_config *cfg);

static const model_def MODELS[] = {
    {"mlp", "Fashion-MNIST perceptron, ReLU between layers",
     build_mlp, run_classifier, OPTION_BIT(OPT_HIDDEN) | OPTION_BIT(OPT_EPOCHS)},
    {"gpt", "byte-level GPT-2 style transformer on text",
     NULL, run_gpt,
     OPTION_BIT(OPT_LAYERS) | OPTION_BIT(OPT_CHANNELS) |
         OPTION_BIT(OPT_HEADS) | OPTION_BIT(OPT_CONTEXT) |
         OPTION_BIT(OPT_STEPS) | OPTION_BIT(OPT_EVAL_EVERY) |
         OPTION_BIT(OPT_SAVE)},
};
#define N_MODELS ((int)(sizeof MODELS / sizeof MODELS[0]))

static bool is_gpt(const train_config *cfg) {
    return cfg->model->run == run_gpt;
}

/* Names in the order of pl_optimizer_kind values listed in OPTIMIZER_KINDS. */
static const char *const OPTIMIZER_NAMES[] = {"sgd", "adamw"};
static const pl_optimizer_kind OPTIMIZER_KINDS[] = {PL_OPTIMIZER_SGD,
                                                    PL_OPTIMIZER_ADAMW};

static const char *optimizer_name(pl_optimizer_kind kind) {
    for (size_t i = 0; i < sizeof OPTIMIZER_KINDS / sizeof *OPTIMIZER_KINDS;
         i++)
        if (OPTIMIZER_KINDS[i] == kind)
            return OPTIMIZER_NAMES[i];
    return "?";
}

static const cli_real_range POSITIVE = {0, INFINITY, true, false};
static const cli_real_range NON_NEGATIVE = {0, INFINITY, false, false};
static const cli_real_range UNIT_INTERVAL_OPEN = {0, 1, false, true};

void cli_train_usage(FILE *out) {
    fprintf(out,
            "Usage: %s train [options]\n"
            "\n"
            "Train an MLP on Fashion-MNIST, reporting the test loss and "
            "accuracy after\nevery epoch, or a byte-level GPT on text, "
            "reporting the validation loss\nevery --eval-every steps.\n"
            "\n"
            "Model:\n",
            CLI_PROGRAM);
    fprintf(out, "  --model NAME        model to train (default %s):\n",
            MODELS[0].name);
    for (int i = 0; i < N_MODELS; i++)
        fprintf(out, "                        %-6s %s\n", MODELS[i].name,
                MODELS[i].help);
    fprintf(out,
            "MLP only (--model mlp):\n"
            "  --hidden N[,N...]   hidden layer widths, 1..%d each "
            "(default " DEFAULT_HIDDEN_TEXT ")\n"
            "  --epochs N          passes over the training set, 1..%d "
            "(default %d)\n",
            MAX_LAYER_WIDTH, MAX_EPOCHS, DEFAULT_EPOCHS);
    fprintf(out,
            "GPT only (--model gpt; trains for --steps, --epochs is an "
            "error):\n"
            "  --layers L          transformer blocks, 1..%d (default %d)\n"
            "  --channels C        embedding width, 1..%d, a multiple of "
            "--heads\n"
            "                      (default %d)\n"
            "  --heads NH          attention heads, 1..%d (default %d)\n"
            "  --context T         bytes per training sequence, 1..%d "
            "(default %d)\n"
            "  --steps N           optimizer steps, 1..%d (default %d)\n"
            "  --eval-every N      validation loss every N steps and after "
            "the last;\n"
            "                      0 = after the last only (default %d)\n"
            "  --save FILE         write the trained weights and config to a "
            "safetensors\n"
            "                      file for '%s generate'\n"
            "  --checkpoint-dir DIR  full checkpoints (weights, optimizer states, "
            "step)\n"
            "                      in DIR/step-<N>, written atomically\n"
            "  --save-every N      a checkpoint every N optimizer updates (default:\n"
            "                      after the last; mlp too)\n"
            "  --keep-last K       keep only the K newest checkpoints (default all)\n"
            "  --resume PATH       continue exactly from a checkpoint, or from the\n"
            "                      newest in a --checkpoint-dir; --steps is the total\n",
            MAX_GPT_LAYERS, DEFAULT_GPT_LAYERS, MAX_GPT_CHANNELS,
            DEFAULT_GPT_CHANNELS, MAX_GPT_HEADS, DEFAULT_GPT_HEADS,
            MAX_GPT_CONTEXT, DEFAULT_GPT_CONTEXT, MAX_GPT_STEPS,
            DEFAULT_GPT_STEPS, DEFAULT_GPT_EVAL_EVERY, CLI_PROGRAM);
    fprintf(out,
            "Data:\n"
            "  --data PATH         mlp: directory with the Fashion-MNIST IDX "
            "files\n"
            "                      (default " DEFAULT_DATA_DIR ")\n"
            "                      gpt: text file or directory of text files; "
            "the first\n"
            "                      90%% trains, the last 10%% validates\n"
            "                      (default " DEFAULT_TEXT_PATH ")\n"
            "Training:\n"
            "  --batch-size B      samples (gpt: sequences) per optimizer "
            "step, 1..%d\n"
            "                      (default %d for mlp, %d for gpt)\n"
            "  --lr X              learning rate, > 0 (default %g)\n"
            "  --optimizer NAME    sgd or adamw (default adamw)\n"
            "  --momentum X        SGD momentum in [0, 1) (default %g)\n"
            "  --weight-decay X    >= 0 (default %g for adamw, 0 for sgd)\n"
            "  --seed S            seed for initialisation and the order of "
            "the data\n"
            "                      (default %d)\n"
            "Runtime:\n"
            "  --workers N         StarPU CPU workers, 0..%d "
            "(default 0: StarPU's choice;\n"
            "                      --device cuda: host-only workers, default 1)\n"
            "  --tiles N           batch tiles per step, 0..%d "
            "(default 0: one per worker;\n"
            "                      per GPU with --device cuda)\n"
            "Output:\n"
            "  --metrics FILE      write JSON Lines metrics: one line per "
            "step and per\n"
            "                      epoch (mlp) or validation (gpt); "
            "'%s plot' draws it\n"
            "  --tensorboard DIR   also write TensorBoard event files (loss, "
            "lr, throughput,\n"
            "                      memory, loss scale, test/val loss) to DIR\n"
            "  --quiet             print only the final test accuracy "
            "(gpt: val loss)\n"
            "  -h, --help          show this help and exit\n",
            MAX_BATCH_SIZE, DEFAULT_BATCH_SIZE, DEFAULT_GPT_BATCH_SIZE,
            DEFAULT_LR, DEFAULT_MOMENTUM, DEFAULT_ADAMW_WEIGHT_DECAY,
            DEFAULT_SEED, pl_runtime_max_cpu_workers(), MAX_TILES, CLI_PROGRAM);
    cli_exec_usage(out);
}

static void config_defaults(train_config *cfg) {
    *cfg = (train_config){
        .model = &MODELS[0],
        .hidden = {1024, 1024}, /* DEFAULT_HIDDEN_TEXT */
        .n_hidden = 2,
        .gpt = {.vocab = CLI_GPT_VOCAB,
                .context = DEFAULT_GPT_CONTEXT,
                .channels = DEFAULT_GPT_CHANNELS,
                .layers = DEFAULT_GPT_LAYERS,
                .heads = DEFAULT_GPT_HEADS},
        .steps = DEFAULT_GPT_STEPS,
        .eval_every = DEFAULT_GPT_EVAL_EVERY,
        /* data_dir and batch_size follow the model: finish_config */
        .epochs = DEFAULT_EPOCHS,
        .optimizer = PL_OPTIMIZER_ADAMW,
        .lr = (float)DEFAULT_LR,
        .momentum = (float)DEFAULT_MOMENTUM,
        .seed = DEFAULT_SEED,
    };
    cli_exec_defaults(&cfg->exec);
}

static const char *option_flag(int id, char *buf, size_t size) {
    return cli_option_flag(LONG_OPTIONS, id, buf, size);
}

static bool parse_int_option(const char *flag, const char *arg, int64_t min,
                             int64_t max, int *out) {
    int64_t v;
    if (!cli_parse_int(flag, arg, min, max, &v))
        return false;
    *out = (int)v;
    return true;
}

static bool parse_model(const char *flag, const char *arg,
                        const model_def **out) {
    const char *names[N_MODELS];
    for (int i = 0; i < N_MODELS; i++)
        names[i] = MODELS[i].name;
    int i = cli_parse_choice(flag, arg, names, N_MODELS);
    if (i < 0)
        return false;
    *out = &MODELS[i];
    return true;
}

static bool parse_optimizer(const char *flag, const char *arg,
                            pl_optimizer_kind *out) {
    int n = (int)(sizeof OPTIMIZER_NAMES / sizeof *OPTIMIZER_NAMES);
    int i = cli_parse_choice(flag, arg, OPTIMIZER_NAMES, n);
    if (i < 0)
        return false;
    *out = OPTIMIZER_KINDS[i];
    return true;
}

/* A path option: the only thing to reject up front is an empty string,
 * which would otherwise surface as a puzzling error much later. */
static bool parse_path(const char *flag, const char *arg, const char *what,
                       const char **out) {
    if (*arg == '\0') {
        cli_error("%s: expected %s, got ''", flag, what);
        return false;
    }
    *out = arg;
    return true;
}

/* FNV-1a of a string. */
static uint64_t hash_text(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* The value given for LONG_OPTIONS entry `id` (the last one wins, as it
 * does when applied). */
static void record_option(train_config *cfg, int id, const char *arg) {
    for (int k = 0; k < MAX_OPTIONS && LONG_OPTIONS[k].name; k++)
        if (LONG_OPTIONS[k].val == id) cfg->option_hashes[k] = hash_text(arg ? arg : "(set)");
}

static bool apply_option(void *config, int id, const char *arg) {
    train_config *cfg = config;
    char flag[32];
    option_flag(id, flag, sizeof flag);
    record_option(cfg, id, arg);
    if (id >= OPT_MODEL && id < OPT_END_)
        cfg->seen |= OPTION_BIT(id);
    if (id >= OPT_EXEC_)
        return cli_exec_parse(&cfg->exec, flag + 2, flag, arg) == 1;
    switch (id) {
    case OPT_MODEL:
        return parse_model(flag, arg, &cfg->model);
    case OPT_HIDDEN:
        return cli_parse_int_list(flag, arg, 1, MAX_LAYER_WIDTH, cfg->hidden,
                                  MAX_HIDDEN_LAYERS, &cfg->n_hidden);
    case OPT_LAYERS:
        return cli_parse_int(flag, arg, 1, MAX_GPT_LAYERS, &cfg->gpt.layers);
    case OPT_CHANNELS:
        return cli_parse_int(flag, arg, 1, MAX_GPT_CHANNELS,
                             &cfg->gpt.channels);
    case OPT_HEADS:
        return cli_parse_int(flag, arg, 1, MAX_GPT_HEADS, &cfg->gpt.heads);
    case OPT_CONTEXT:
        return cli_parse_int(flag, arg, 1, MAX_GPT_CONTEXT,
                             &cfg->gpt.context);
    case OPT_STEPS:
        return cli_parse_int(flag, arg, 1, MAX_GPT_STEPS, &cfg->steps);
    case OPT_EVAL_EVERY:
        return cli_parse_int(flag, arg, 0, MAX_GPT_STEPS, &cfg->eval_every);
    case OPT_SAVE:
        return parse_path(flag, arg, "a file name", &cfg->save_path);
    case OPT_CHECKPOINT_DIR:
        return parse_path(flag, arg, "a directory", &cfg->checkpoint_dir);
    case OPT_SAVE_EVERY:
        return cli_parse_int(flag, arg, 1, MAX_GPT_STEPS, &cfg->save_every);
    case OPT_KEEP_LAST:
        return cli_parse_int(flag, arg, 1, 1 << 20, &cfg->keep_last);
    case OPT_RESUME:
        return parse_path(flag, arg, "a checkpoint or checkpoint directory",
                          &cfg->resume_path);
    case OPT_DATA: /* a directory (mlp) or a file or directory (gpt) */
        return parse_path(flag, arg, "a path", &cfg->data_dir);
    case OPT_EPOCHS:
        return parse_int_option(flag, arg, 1, MAX_EPOCHS, &cfg->epochs);
    case OPT_BATCH_SIZE:
        return parse_int_option(flag, arg, 1, MAX_BATCH_SIZE,
                                &cfg->batch_size);
    case OPT_LR:
        return cli_parse_real(flag, arg, POSITIVE, &cfg->lr);
    case OPT_OPTIMIZER:
        return parse_optimizer(flag, arg, &cfg->optimizer);
    case OPT_MOMENTUM:
        cfg->momentum_set = true;
        return cli_parse_real(flag, arg, UNIT_INTERVAL_OPEN, &cfg->momentum);
    case OPT_WEIGHT_DECAY:
        cfg->weight_decay_set = true;
        return cli_parse_real(flag, arg, NON_NEGATIVE, &cfg->weight_decay);
    case OPT_SEED:
        return cli_parse_seed(flag, arg, &cfg->seed);
    case OPT_WORKERS:
        return cli_parse_workers(flag, arg, &cfg->workers);
    case OPT_TILES:
        return parse_int_option(flag, arg, 0, MAX_TILES, &cfg->tiles);
    case OPT_METRICS:
        return parse_path(flag, arg, "a file name", &cfg->metrics_path);
    case OPT_TENSORBOARD:
        return parse_path(flag, arg, "a directory", &cfg->tensorboard_dir);
    case OPT_QUIET:
        cfg->quiet = true;
        return true;
    }
    cli_error("internal error: unhandled option %d", id);
    return false;
}

/* Options of another model are mistakes (--epochs with --model gpt, which
 * trains for --steps): ignoring them would train something else than the
 * user asked for. */
static bool check_model_options(const train_config *cfg) {
    for (int m = 0; m < N_MODELS; m++) {
        uint32_t stray = cfg->seen & MODELS[m].own_options &
                         ~cfg->model->own_options;
        for (int id = OPT_MODEL; stray && id < OPT_END_; id++)
            if (stray & OPTION_BIT(id)) {
                char flag[32];
                cli_error("%s: only applies to --model %s, not %s%s",
                          option_flag(id, flag, sizeof flag), MODELS[m].name,
                          cfg->model->name,
                          id == OPT_EPOCHS ? " (use --steps)" : "");
                return false;
            }
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
                  " bytes exceed %d tokens per step", cfg->batch_size,
                  m->context, MAX_GPT_BATCH_TOKENS);
        return false;
    }
    return true;
}

static bool finish_config(train_config *cfg) {
    if (!check_model_options(cfg))
        return false;
    if (!(cfg->seen & OPTION_BIT(OPT_DATA)))
        cfg->data_dir = is_gpt(cfg) ? DEFAULT_TEXT_PATH : DEFAULT_DATA_DIR;
    if (!(cfg->seen & OPTION_BIT(OPT_BATCH_SIZE)))
        cfg->batch_size = is_gpt(cfg) ? DEFAULT_GPT_BATCH_SIZE
                                      : DEFAULT_BATCH_SIZE;
    if (is_gpt(cfg) && !check_gpt_config(cfg))
        return false;
    if ((cfg->save_every || cfg->keep_last) && !cfg->checkpoint_dir) {
        cli_error("%s: needs --checkpoint-dir", cfg->save_every ? "--save-every"
                                                                : "--keep-last");
        return false;
    }
    if (!cfg->weight_decay_set)
        cfg->weight_decay = cfg->optimizer == PL_OPTIMIZER_ADAMW
                                ? (float)DEFAULT_ADAMW_WEIGHT_DECAY
                                : 0.0f;
    if (cfg->exec.schedule != PL_SCHEDULE_NONE && cfg->tiles) {
        cli_error("--tiles: pipeline schedules take --microbatches instead");
        return false;
    }
    if (!cli_exec_finish(&cfg->exec, cfg->batch_size, &cfg->tiles))
        return false;
    if (cfg->tiles > cfg->batch_size / cfg->exec.dp) {
        cli_error("--tiles: expected at most --batch-size / --dp (%d), got %d",
                  cfg->batch_size / cfg->exec.dp, cfg->tiles);
        return false;
    }
    if (cfg->momentum_set && cfg->optimizer != PL_OPTIMIZER_SGD)
        fprintf(stderr, "%s: warning: --momentum only applies to "
                "--optimizer sgd; ignored\n", CLI_PROGRAM);
    return true;
}

static cli_parse_result parse_args(int argc, char **argv,
                                   train_config *cfg) {
    config_defaults(cfg);
    int n = 0;
    for (; n < MAX_OPTIONS && LONG_OPTIONS[n].name; n++) {
        snprintf(cfg->option_names[n], sizeof cfg->option_names[n], "--%s",
                 LONG_OPTIONS[n].name);
        cfg->option_name_ptrs[n] = cfg->option_names[n];
        cfg->option_hashes[n] = hash_text("(absent)");
    }
    cfg->exec.option_names = cfg->option_name_ptrs;
    cfg->exec.option_hashes = cfg->option_hashes;
    cfg->exec.n_options = n;
    cli_parse_result r =
        cli_parse_options(argc, argv, LONG_OPTIONS, apply_option, cfg);
    if (r != CLI_PARSE_RUN)
        return r;
    return finish_config(cfg) ? CLI_PARSE_RUN : CLI_PARSE_ERROR;
}

int cli_train_check(int argc, char **argv) {
    train_config cfg;
    return parse_args(argc, argv, &cfg) == CLI_PARSE_ERROR ? CLI_EXIT_USAGE
                                                           : CLI_EXIT_OK;
}

/* --------------------------------------------------------------- run */

/* Everything a run owns; run_free releases whatever was created, so every
 * step can simply return on failure. */
typedef struct train_run {
    const train_config *cfg;
    pl_dataset_t *train_set, *test_set;
    pl_runtime_t *runtime;
    pl_graph_t *graph;
    pl_engine_t *engine;
    pl_loader_t *train_loader, *test_loader;
    int trace_status; /* a --trace that could not be written, reported last */
} train_run;

/* Every output is written as the run goes (metrics) or at the end (the
 * traces): a path none of them can go to should cost seconds, not the
 * whole run. */
static int check_output_paths(train_run *r) {
    int rc = cli_check_output_path("--metrics", r->cfg->metrics_path);
    if (rc == CLI_EXIT_OK) rc = cli_check_output_dir("--checkpoint-dir", r->cfg->checkpoint_dir);
    if (rc == CLI_EXIT_OK) rc = cli_exec_check_outputs(&r->cfg->exec);
    return rc;
}

static pl_dataset_t *load_split(const char *dir, bool train) {
    pl_dataset_t *ds = pl_dataset_fashion_mnist(dir, train);
    if (!ds)
        cli_error("cannot load the Fashion-MNIST %s set from '%s': %s",
                  train ? "training" : "test", dir, pl_last_error());
    return ds;
}

/* Loaded before StarPU starts: a wrong --data fails fast and quietly. */
static int load_data(train_run *r) {
    const train_config *cfg = r->cfg;
    r->train_set = load_split(cfg->data_dir, true);
    if (!r->train_set)
        return CLI_EXIT_FAILURE;
    r->test_set = load_split(cfg->data_dir, false);
    if (!r->test_set)
        return CLI_EXIT_FAILURE;
    int64_t n_train = pl_dataset_size(r->train_set);
    if (n_train < cfg->batch_size) {
        /* drop_last would leave no batch at all: train nothing, silently. */
        cli_error("--batch-size: %d is larger than the %" PRId64
                  " training samples", cfg->batch_size, n_train);
        cli_usage_hint("train");
        return CLI_EXIT_USAGE;
    }
    return CLI_EXIT_OK;
}

static int start_runtime(train_run *r) {
    return cli_start_runtime(r->cfg->workers, &r->cfg->exec, &r->runtime);
}

/* --dp/--pp: every rank read the same Fashion-MNIST (each loads its own). */
static int check_same_data(train_run *r) {
    const pl_dataset_t *sets[] = {r->train_set, r->test_set};
    return cli_check_same_data(r->runtime, r->cfg->data_dir, sets, 2);
}

/* The chosen model plus what every model shares: cross-entropy loss, an
 * accuracy metric and the logits as the output. */
static int build_graph(train_run *r) {
    const train_config *cfg = r->cfg;
    pl_graph_t *g = r->graph = pl_graph_new(cfg->seed);
    if (!g)
        return cli_library_failure("cannot create the model graph");
    model_io io = {NULL, NULL};
    if (!cfg->model->build(g, cfg, pl_dataset_features(r->train_set),
                           N_CLASSES, &io)) {
        cli_error("cannot build model '%s': %s", cfg->model->name,
                  pl_last_error());
        return CLI_EXIT_FAILURE;
    }
    pl_tensor_t *loss = pl_cross_entropy(g, io.logits, io.labels);
    pl_tensor_t *accuracy = loss ? pl_accuracy(g, io.logits, io.labels)
                                 : NULL;
    if (!accuracy || pl_graph_set_loss(g, loss) != PL_STATUS_OK ||
        pl_graph_set_output(g, io.logits) != PL_STATUS_OK)
        return cli_library_failure("cannot set up the loss and metrics");
    return CLI_EXIT_OK;
}

static void set_optimizer(pl_optimizer_options *o, const train_config *cfg) {
    o->kind = cfg->optimizer;
    o->lr = cfg->lr;
    o->weight_decay = cfg->weight_decay;
    if (cfg->optimizer == PL_OPTIMIZER_SGD) {
        o->momentum = cfg->momentum;
    } else { /* spelled out so the CLI's AdamW does not drift with defaults */
        o->beta1 = 0.9f;
        o->beta2 = 0.999f;
        o->eps = 1e-8f;
    }
}

static int create_engine(train_run *r) {
    pl_optimizer_options optimizer = pl_engine_options_default().optimizer;
    set_optimizer(&optimizer, r->cfg);
    /* The schedule spans the run: full batches only (the loader drops the
     * last partial one), every epoch. */
    int64_t batches = pl_dataset_size(r->train_set) / r->cfg->batch_size;
    int64_t total = (int64_t)r->cfg->epochs * (batches / r->cfg->exec.accumulate);
    return cli_create_engine(r->runtime, r->graph, r->cfg->batch_size,
                             r->cfg->tiles, &optimizer, &r->cfg->exec,
                             total > 0 ? total : 1, &r->engine);
}

static int create_loaders(train_run *r) {
    const train_config *cfg = r->cfg;
    /* Training batches are reshuffled per epoch and all full-size (a tiny
     * last batch would be a noisy step); the test set is seen whole. */
    r->train_loader = pl_loader_new(r->train_set, cfg->batch_size, true,
                                    true, cfg->seed);
    /* Rank r of a dp x pp grid feeds data-parallel slice r mod dp (every
     * stage of a pipeline reads the same batch). */
    int dp = cfg->exec.dp, rank = pl_runtime_rank(r->runtime) % dp;
    if (!r->train_loader ||
        pl_loader_set_accumulation(r->train_loader, cfg->exec.accumulate) !=
            PL_STATUS_OK ||
        pl_loader_set_shard(r->train_loader, rank, dp) != PL_STATUS_OK)
        return cli_library_failure("cannot create the training data loader");
    r->test_loader = pl_loader_new(r->test_set, cfg->batch_size, false,
                                   false, cfg->seed);
    if (!r->test_loader || pl_loader_set_shard(r->test_loader, rank, dp) != PL_STATUS_OK)
        return cli_library_failure("cannot create the test data loader");
    return CLI_EXIT_OK;
}

/* ---------------------------------------------------------- training */

static void print_header(const train_run *r) {
    const train_config *cfg = r->cfg;
    printf("model %s: %" PRId64 " parameters; %" PRId64 " training, %" PRId64
           " test samples\n",
           cfg->model->name, pl_graph_param_count(r->graph),
           pl_dataset_size(r->train_set), pl_dataset_size(r->test_set));
    char schedule[128];
    cli_lr_describe(&cfg->exec.lr, schedule, sizeof schedule);
    printf("optimizer %s: lr %g (schedule %s), weight decay %g",
           optimizer_name(cfg->optimizer), (double)cfg->lr, schedule,
           (double)cfg->weight_decay);
    if (cfg->optimizer == PL_OPTIMIZER_SGD)
        printf(", momentum %g", (double)cfg->momentum);
    printf("; batch size %d; ", cfg->batch_size);
    cli_print_workers(r->runtime);
    cli_exec_print_data_parallel(&cfg->exec, r->runtime);
    printf("\n");
    fflush(stdout);
    cli_exec_print_pipeline(&cfg->exec, r->engine, pl_graph_num_blocks(r->graph), cfg->tiles);
    cli_exec_print_precision(&cfg->exec, r->engine);
    cli_exec_print_placement(&cfg->exec, r->engine);
}

/* The trainer (cli/fit.c) with the classifier's hooks: a line per epoch,
 * the test set after every epoch. */
static int train_epochs(train_run *r) {
    const train_config *cfg = r->cfg;
    if (!cfg->quiet)
        print_header(r);
    cli_fit f = {
        .engine = r->engine, .exec = &cfg->exec,
        .train = pl_data_source_loader(r->train_loader),
        .test = pl_data_source_loader(r->test_loader),
        .epochs = cfg->epochs, .test_name = "test", .test_accuracy = true,
        .metrics_path = cfg->metrics_path, .tensorboard_dir = cfg->tensorboard_dir,
        .checkpoint_dir = cfg->checkpoint_dir, .save_every = cfg->save_every,
        .keep_last = (int)cfg->keep_last, .resume_path = cfg->resume_path,
        .seed = cfg->seed, .quiet = cfg->quiet,
        .writer = pl_runtime_rank(r->runtime) == 0, .rank = pl_runtime_rank(r->runtime),
    };
    cli_fit_result result;
    int rc = cli_fit_run(&f, &result);
    r->trace_status = result.trace_status;
    if (rc != CLI_EXIT_OK)
        return rc;
    printf("final test accuracy: %.2f%%\n", 100.0 * result.test_accuracy);
    fflush(stdout);
    if (!cfg->quiet)
        cli_exec_print_memory(&cfg->exec, &result.memory, r->runtime);
    if (!cfg->quiet) cli_exec_print_model_state(&cfg->exec, r->engine);
    return CLI_EXIT_OK;
}

/* Releases in reverse order of creation (loaders before their datasets,
 * the engine before its graph and the runtime); returns the final status,
 * which a failing close of the metrics file turns into a failure. */
static int run_free(train_run *r, int rc) {
    if (r->test_loader)
        pl_loader_free(r->test_loader);
    if (r->train_loader)
        pl_loader_free(r->train_loader);
    if (r->engine)
        pl_engine_free(r->engine);
    if (r->graph)
        pl_graph_free(r->graph);
    pl_runtime_free(r->runtime);
    if (r->test_set)
        pl_dataset_free(r->test_set);
    if (r->train_set)
        pl_dataset_free(r->train_set);
    return rc == CLI_EXIT_OK ? r->trace_status : rc;
}

/* --model mlp (and any classifier in MODELS): epochs over Fashion-MNIST. */
static int run_classifier(const train_config *cfg) {
    static int (*const steps[])(train_run *) = {
        check_output_paths, load_data,      start_runtime, check_same_data,
        build_graph,        create_engine,  create_loaders, train_epochs,
    };
    train_run run = {.cfg = cfg};
    int rc = CLI_EXIT_OK;
    for (size_t i = 0; i < sizeof steps / sizeof *steps && rc == CLI_EXIT_OK;
         i++)
        rc = steps[i](&run);
    cli_end_distributed(run.runtime, rc);
    return run_free(&run, rc);
}

/* --model gpt: cli/train_gpt.c, with the options it shares resolved. */
static int run_gpt(const train_config *cfg) {
    cli_gpt_options o = {
        .model = cfg->gpt,
        .data_path = cfg->data_dir,
        .steps = cfg->steps,
        .eval_every = cfg->eval_every,
        .batch_size = cfg->batch_size,
        .optimizer_name = optimizer_name(cfg->optimizer),
        .seed = cfg->seed,
        .workers = cfg->workers,
        .tiles = cfg->tiles,
        .metrics_path = cfg->metrics_path,
        .tensorboard_dir = cfg->tensorboard_dir,
        .save_path = cfg->save_path,
        .checkpoint_dir = cfg->checkpoint_dir,
        .save_every = cfg->save_every,
        .keep_last = (int)cfg->keep_last,
        .resume_path = cfg->resume_path,
        .quiet = cfg->quiet,
        .exec = cfg->exec,
    };
    o.optimizer = pl_engine_options_default().optimizer;
    set_optimizer(&o.optimizer, cfg);
    return cli_train_gpt(&o);
}

int cli_train(int argc, char **argv) {
    train_config cfg;
    switch (parse_args(argc, argv, &cfg)) {
    case CLI_PARSE_HELP:
        cli_train_usage(stdout);
        return CLI_EXIT_OK;
    case CLI_PARSE_ERROR:
        cli_usage_hint("train");
        return CLI_EXIT_USAGE;
    case CLI_PARSE_RUN:
        break;
    }
    return cfg.model->run(&cfg);
}
