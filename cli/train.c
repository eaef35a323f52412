/* `pleiades train`: with the command line parsed (cli/train_flags.c),
 * build a model graph, train it with the engine one optimizer step per
 * batch and evaluate on the test set after every epoch. Only the public
 * API (pleiades.h) is used, so this file doubles as the reference for
 * driving the library from C.
 *
 * --model gpt shares the command line and hands over to cli/train_gpt.c,
 * which trains on text for a number of steps instead of epochs. */
#include "train.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <pleiades.h>

#include "args.h"
#include "common.h"
#include "exec_options.h"
#include "fit.h"
#include "lr_options.h"
#include "train_flags.h"
#include "train_gpt.h"

/* Fashion-MNIST has 10 classes; the dataset API does not report it. */
enum { N_CLASSES = 10 };

/* ------------------------------------------------------------ model */

/* x [784] -> fc1 -> ReLU -> ... -> fcN -> ReLU -> head [10]; false leaves
 * the reason in pl_last_error(). */
static bool build_mlp(pl_graph_t *g, const train_config *cfg, int64_t n_features,
                      int64_t n_classes, pl_tensor_t **logits, pl_tensor_t **labels) {
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
    *logits = h ? pl_linear(g, h, n_classes, "head") : NULL;
    *labels = y;
    return *logits != NULL;
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
    r->train_set = load_split(cfg->data_path, true);
    if (!r->train_set)
        return CLI_EXIT_FAILURE;
    r->test_set = load_split(cfg->data_path, false);
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
    return cli_start_runtime(&r->cfg->exec.runtime, &r->cfg->exec.flags, &r->runtime);
}

/* --dp/--pp: every rank read the same Fashion-MNIST (each loads its own). */
static int check_same_data(train_run *r) {
    const pl_dataset_t *sets[] = {r->train_set, r->test_set};
    return cli_check_same_data(r->runtime, r->cfg->data_path, sets, 2);
}

/* The chosen model plus what every model shares: cross-entropy loss, an
 * accuracy metric and the logits as the output. */
static int build_graph(train_run *r) {
    const train_config *cfg = r->cfg;
    pl_graph_t *g = r->graph = pl_graph_new(cfg->seed);
    if (!g)
        return cli_library_failure("cannot create the model graph");
    pl_tensor_t *logits = NULL, *labels = NULL;
    if (!build_mlp(g, cfg, pl_dataset_features(r->train_set), N_CLASSES, &logits, &labels)) {
        cli_error("cannot build model 'mlp': %s", pl_last_error());
        return CLI_EXIT_FAILURE;
    }
    pl_tensor_t *loss = pl_cross_entropy(g, logits, labels);
    pl_tensor_t *accuracy = loss ? pl_accuracy(g, logits, labels) : NULL;
    if (!accuracy || pl_graph_set_loss(g, loss) != PL_STATUS_OK ||
        pl_graph_set_output(g, logits) != PL_STATUS_OK)
        return cli_library_failure("cannot set up the loss and metrics");
    return CLI_EXIT_OK;
}

static int create_engine(train_run *r) {
    /* The schedule spans the run: full batches only (the loader drops the
     * last partial one), every epoch. */
    int64_t batches = pl_dataset_size(r->train_set) / r->cfg->batch_size;
    int64_t total =
        (int64_t)r->cfg->epochs * (batches / r->cfg->exec.engine.accumulate_size);
    return cli_create_engine(r->runtime, r->graph, r->cfg->batch_size, &r->cfg->exec,
                             total > 0 ? total : 1, &r->engine);
}

static int create_loaders(train_run *r) {
    const train_config *cfg = r->cfg;
    /* Training batches are reshuffled per epoch and all full-size (a tiny
     * last batch would be a noisy step); the test set is seen whole. */
    r->train_loader = pl_loader_new(r->train_set, cfg->batch_size, true,
                                    true, cfg->seed);
    /* A rank of a dp x pp grid feeds its replica's data-parallel slice
     * (every stage of a pipeline reads the same batch). */
    int dp = cfg->exec.engine.dp,
        rank = pl_runtime_grid_replica(r->runtime, dp, cfg->exec.engine.pp,
                                       pl_runtime_rank(r->runtime));
    if (!r->train_loader ||
        pl_loader_set_accumulation(r->train_loader, cfg->exec.engine.accumulate_size) !=
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
    const pl_optimizer_options *o = &cfg->exec.engine.optimizer;
    printf("model mlp: %" PRId64 " parameters; %" PRId64 " training, %" PRId64
           " test samples\n",
           pl_graph_param_count(r->graph),
           pl_dataset_size(r->train_set), pl_dataset_size(r->test_set));
    char schedule[128];
    cli_lr_describe(&cfg->exec.engine.lr_scheduler, schedule, sizeof schedule);
    printf("optimizer %s: lr %g (schedule %s), weight decay %g", cli_optimizer_name(o->kind),
           (double)o->lr, schedule, (double)o->weight_decay);
    if (o->kind == PL_OPTIMIZER_SGD)
        printf(", momentum %g", (double)o->momentum);
    printf("; batch size %d; ", cfg->batch_size);
    cli_print_workers(r->runtime);
    cli_exec_print_data_parallel(&cfg->exec, r->runtime);
    printf("\n");
    fflush(stdout);
    cli_exec_print_pipeline(&cfg->exec, r->engine, pl_graph_num_blocks(r->graph));
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
        cli_exec_print_memory(&cfg->exec, &result.memory, r->runtime, r->engine);
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

/* --model mlp: epochs over Fashion-MNIST. */
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

int cli_train(int argc, char **argv) {
    train_config cfg;
    switch (cli_train_parse(argc, argv, &cfg)) {
    case CLI_PARSE_HELP:
        cli_train_usage(stdout);
        return CLI_EXIT_OK;
    case CLI_PARSE_ERROR:
        cli_usage_hint("train");
        return CLI_EXIT_USAGE;
    case CLI_PARSE_RUN:
        break;
    }
    return cfg.model == CLI_MODEL_GPT ? cli_train_gpt(&cfg) : run_classifier(&cfg);
}
