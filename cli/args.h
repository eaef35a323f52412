/* Command-line parsing helpers shared by the pleiades subcommands.
 *
 * Every parser is strict (the whole text must be a value of the expected
 * kind and range) and, on failure, prints one message naming the flag, what
 * was expected and what was given, e.g.
 *
 *   pleiades: --lr: expected a number > 0, got 'abc'
 *
 * and returns false. Printing the "Try ... --help" hint and choosing the
 * exit status is left to the caller, so a command prints the hint once
 * however it detected the mistake. */
#ifndef PL_CLI_ARGS_H
#define PL_CLI_ARGS_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CLI_PROGRAM "pleiades"

/* Exit statuses: 2 for anything the user can fix by changing the command
 * line (the convention of getopt-based tools), 1 for failures at run time. */
enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_FAILURE = 1,
    CLI_EXIT_USAGE = 2,
};

/* Prints "pleiades: <message>\n" to stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints "Try 'pleiades [command] --help' for more information." to stderr;
 * `command` may be NULL for the top level. */
void cli_usage_hint(const char *command);

/* A base-10 integer in [min, max]. */
bool cli_parse_int(const char *flag, const char *text, int64_t min,
                   int64_t max, int64_t *out);

/* Bounds of a real-valued option; an infinite bound means "unbounded". */
typedef struct cli_real_range {
    double min, max;
    bool min_exclusive, max_exclusive;
} cli_real_range;

/* The range as the usage shows it: "[0, 1)", "> 0", "any". */
void cli_real_range_text(char *buf, size_t size, cli_real_range range);

/* A finite decimal number within `range` that is representable as a float
 * (the API takes floats, so 1e-60 must not silently become 0). */
bool cli_parse_real(const char *flag, const char *text, cli_real_range range,
                    float *out);

/* A comma-separated list of 1..capacity integers in [min, max], such as
 * "1024,1024". Empty items ("10,,2", "10,") are errors. */
bool cli_parse_int_list(const char *flag, const char *text, int64_t min,
                        int64_t max, int64_t *out, int capacity, int *count);

/* The index of `text` in names[0..n_names), or -1 after printing
 * "<flag>: expected one of a, b, got 'text'". */
int cli_parse_choice(const char *flag, const char *text,
                     const char *const *names, int n_names);

/* `first` (when not NULL) and name(0..n-1), ", "-separated with `last`
 * before the final one (" or " in prose), into buf: lists of names known
 * only at run time (the registries'). */
const char *cli_join_names(char *buf, size_t size, const char *first, int n,
                           const char *(*name)(int), const char *last);

/* "--epochs" for the option whose getopt_long value is `id`, written into
 * buf[size]: messages name the flag as the user types it (also when they
 * typed an unambiguous abbreviation such as --epo); "-h" for a short one. */
const char *cli_option_flag(const struct option *options, int id, char *buf,
                            size_t size);

/* After getopt_long returned '?' (with opterr = 0): prints why the option
 * at argv[optind - 1] was rejected -- unknown, ambiguous (naming the
 * candidates), or given a value it does not take. getopt_long's own
 * messages would name argv[0] (the command, e.g. "train") instead. */
void cli_report_bad_option(const struct option *options, char **argv);

/* How parsing a command line ended (cli/flags.h's parser). */
typedef enum cli_parse_result {
    CLI_PARSE_RUN,   /* valid: run the command */
    CLI_PARSE_HELP,  /* -h/--help: print the usage and exit 0 */
    CLI_PARSE_ERROR, /* a message was printed: hint at --help, exit 2 */
} cli_parse_result;

#endif
