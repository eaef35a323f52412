/* pleiades: the command-line front end. Dispatches `pleiades <command>` to
 * the command's function with argv shifted so that argv[0] is the command
 * name, the way getopt_long expects a program's argv. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pleiades.h>

#include "args.h"
#include "generate.h"
#include "plot.h"
#include "trace_summary.h"
#include "train.h"

typedef struct command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
} command;

/* New commands (evaluate, export, ...) are one row here. */
static const command COMMANDS[] = {
    {"train", "train an MLP on Fashion-MNIST or a GPT on text", cli_train},
    {"generate", "continue a prompt with a trained GPT checkpoint",
     cli_generate},
    {"trace-summary", "bubbles and critical path of a step's trace",
     cli_trace_summary},
    {"plot", "loss and learning-rate curves of --metrics files (PNG)",
     cli_plot},
};
#define N_COMMANDS ((int)(sizeof COMMANDS / sizeof COMMANDS[0]))

static void print_usage(FILE *out) {
    fprintf(out,
            "Usage: %s <command> [options]\n"
            "       %s --help | --version\n"
            "\n"
            "Train neural networks as StarPU task graphs.\n"
            "\n"
            "Commands:\n",
            CLI_PROGRAM, CLI_PROGRAM);
    for (int i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-14s %s\n", COMMANDS[i].name, COMMANDS[i].summary);
    fprintf(out, "\n"
                 "Options:\n"
                 "  -h, --help     show this help and exit\n"
                 "  -V, --version  print the version and exit\n"
                 "\n");
    /* Two commands: their options fit on the main help page too. */
    cli_train_usage(out);
    fputc('\n', out);
    cli_generate_usage(out);
}

/* Both versions: a CLI built against newer headers than the installed
 * library is the first thing to rule out in a bug report. */
static void print_version(void) {
    printf("%s %s (library %s)\n", CLI_PROGRAM, PL_VERSION_STRING,
           pl_version());
    printf("StarPU with CUDA: %s\n", pl_runtime_cuda_available() ? "yes" : "no");
}

static bool is_any(const char *arg, const char *a, const char *b) {
    return strcmp(arg, a) == 0 || strcmp(arg, b) == 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        cli_error("missing command");
        cli_usage_hint(NULL);
        return CLI_EXIT_USAGE;
    }
    const char *arg = argv[1];
    if (is_any(arg, "-h", "--help") || strcmp(arg, "help") == 0) {
        print_usage(stdout);
        return CLI_EXIT_OK;
    }
    if (is_any(arg, "-V", "--version")) {
        print_version();
        return CLI_EXIT_OK;
    }
    for (int i = 0; i < N_COMMANDS; i++)
        if (strcmp(arg, COMMANDS[i].name) == 0)
            return COMMANDS[i].run(argc - 1, argv + 1);
    if (arg[0] == '-')
        cli_error("unknown option '%s'", arg);
    else
        cli_error("unknown command '%s'", arg);
    cli_usage_hint(NULL);
    return CLI_EXIT_USAGE;
}
