/* Flag tables: a command's flags as rows of data, one row per flag -- its
 * name, the kind of value it takes with the range or names it accepts,
 * where the value lands and its help text -- read by one parser and one
 * usage printer (cli/flags.c).
 *
 * Where a value lands is a field: an offsetof into pl_engine_options or
 * pl_runtime_options, which the library takes as they are, or into a
 * struct of the CLI's own for what is not an option of the library (file
 * paths, the model's shape). The field's C type is read from its
 * declaration (CLI_FIELD_TYPE), so a row cannot store an int into a
 * float. Every number is range-checked before it is stored, so nothing is
 * sized from a value out of range; the messages are args.h's.
 *
 * A flag may be given several times: the last value counts, as with any
 * getopt program. The parser records which flags were given
 * (cli_flags_given), for the cross-flag checks that refuse a knob given
 * where it would do nothing, and a hash of each value, which the ranks of
 * a distributed run compare. */
#ifndef PL_CLI_FLAGS_H
#define PL_CLI_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <pleiades.h>

#include "args.h"

/* Flags of one command, all tables together (train has about 90). */
#define CLI_MAX_FLAGS 128
#define CLI_MAX_TABLES 4

typedef enum cli_flag_kind {
    CLI_SECTION = 0, /* not a flag: `help` is a heading of the usage */
    CLI_NOTE,        /* not a flag: `help` is a paragraph under the flags
                        above it */
    CLI_HELP,        /* -h, --help: the parser stops, the command prints
                        its usage */
    CLI_SWITCH,      /* takes no value: the field (bool) becomes true */
    CLI_INT,         /* an integer in [min, max] */
    CLI_REAL,        /* a number in `range`, checked as the float it becomes */
    CLI_CHOICE,      /* one of `choices`: the field gets the choice's value */
    CLI_PATH,        /* a non-empty text (a path); `what` names it */
    CLI_TEXT,        /* any text, "" included */
    CLI_INT_LIST,    /* 1..capacity comma-separated integers in [min, max] */
    CLI_CUSTOM,      /* `parse` takes it: names of a registry, unit changes */
} cli_flag_kind;

/* The structs a value can land in. */
typedef enum cli_flag_dest {
    CLI_DEST_COMMAND = 0, /* the command's own config (train_config, ...) */
    CLI_DEST_EXEC,        /* cli_exec_options' CLI-only fields (train) */
    CLI_DEST_ENGINE,      /* pl_engine_options */
    CLI_DEST_RUNTIME,     /* pl_runtime_options */
    CLI_N_DESTS,
} cli_flag_dest;

/* The C type of a field. Enums are stored as the unsigned int GCC and
 * Clang give an enum without negative values. */
typedef enum cli_field_type {
    CLI_FIELD_OTHER = 0, /* only a CLI_CUSTOM parser knows it */
    CLI_FIELD_BOOL,
    CLI_FIELD_INT,
    CLI_FIELD_ENUM,
    CLI_FIELD_INT64,
    CLI_FIELD_UINT64,
    CLI_FIELD_FLOAT,
    CLI_FIELD_DOUBLE,
    CLI_FIELD_STRING, /* const char *: the argv text itself */
    CLI_FIELD_INT64_ARRAY,
} cli_field_type;

#define CLI_FIELD_TYPE(lvalue)                                                 \
    _Generic((lvalue), bool: CLI_FIELD_BOOL, int: CLI_FIELD_INT,               \
             unsigned int: CLI_FIELD_ENUM, int64_t: CLI_FIELD_INT64,           \
             uint64_t: CLI_FIELD_UINT64, float: CLI_FIELD_FLOAT,               \
             double: CLI_FIELD_DOUBLE, const char *: CLI_FIELD_STRING,         \
             int64_t *: CLI_FIELD_INT64_ARRAY, default: CLI_FIELD_OTHER)

/* A row's destination: `member` of `type`, which lives in `dest`. */
#define CLI_FIELD(dest_, type_, member_)                                       \
    .dest = (dest_), .offset = offsetof(type_, member_),                       \
    .type = CLI_FIELD_TYPE(((type_ *)0)->member_)
#define CLI_ENGINE(member) CLI_FIELD(CLI_DEST_ENGINE, pl_engine_options, member)
#define CLI_RUNTIME(member) CLI_FIELD(CLI_DEST_RUNTIME, pl_runtime_options, member)

/* One name a CLI_CHOICE accepts and the value its field gets (as the
 * field's type: 1 is true for a bool); `help`, when set, lists the name
 * under the flag in the usage. */
typedef struct cli_choice {
    const char *name;
    double value;
    const char *help;
} cli_choice;

typedef struct cli_flag cli_flag;
typedef struct cli_flags cli_flags;

/* A CLI_CUSTOM row's parser: `field` is the row's field (NULL for a row
 * without one); false after printing why not (cli_error, naming `flag`). */
typedef bool (*cli_flag_parse_fn)(cli_flags *f, const cli_flag *row, void *field,
                                  const char *flag, const char *arg);

struct cli_flag {
    const char *name;   /* "batch-size" (typed --batch-size); NULL for a
                           CLI_SECTION or CLI_NOTE */
    const char *arg;    /* the value in the usage: "N", "on|off"; NULL for
                           a CLI_SWITCH */
    cli_flag_kind kind;
    cli_flag_dest dest; /* where the field is (CLI_FIELD and friends) */
    size_t offset;
    cli_field_type type;
    int64_t min, max;          /* CLI_INT, CLI_INT_LIST */
    cli_real_range range;      /* CLI_REAL */
    const cli_choice *choices; /* CLI_CHOICE: ends with a NULL name */
    const char *what;          /* CLI_PATH: "a file name", "a directory" */
    int capacity;              /* CLI_INT_LIST: the field's int64_t[capacity] */
    size_t count_offset;       /* CLI_INT_LIST: the int count, same dest */
    cli_flag_parse_fn parse;   /* CLI_CUSTOM */
    unsigned group;            /* the command's own marks (train: the model
                                  that owns the flag); 0 for none */
    /* The usage text, wrapped to 79 columns. "{range}" becomes the range
     * ("1..64", "[0, 1)", "> 0") and "{default}" the field's value in a
     * default config (a number, a choice's name, a path). */
    const char *help;
    /* Or, for text known only at run time (the registries' names, the
     * StarPU build's worker limit), written into buf. */
    void (*help_fn)(char *buf, size_t size);
};

typedef struct cli_flag_table {
    const cli_flag *rows;
    int n_rows;
} cli_flag_table;
#define CLI_TABLE(rows) {(rows), (int)(sizeof(rows) / sizeof *(rows))}

/* A command line being parsed, and what it said. */
struct cli_flags {
    cli_flag_table tables[CLI_MAX_TABLES];
    int n_tables;
    void *dest[CLI_N_DESTS];   /* the structs the fields are in */
    const cli_flag *flag[CLI_MAX_FLAGS]; /* the tables' flags, in order */
    int n_flags;
    uint64_t given[CLI_MAX_FLAGS / 64];  /* bit i: flag[i] was given */
    /* For the ranks' comparison: "--name" and a hash of its last value
     * (or of its absence) per flag. */
    char name_text[CLI_MAX_FLAGS][40];
    const char *names[CLI_MAX_FLAGS];
    uint64_t hashes[CLI_MAX_FLAGS];
};

/* Prepares `f` to parse into the dests (NULL where the command has no such
 * struct: no row may land there). The dests hold their defaults already.
 * At most CLI_MAX_TABLES tables of CLI_MAX_FLAGS flags in all. */
void cli_flags_init(cli_flags *f, const cli_flag_table *tables, int n_tables,
                    void *const dest[CLI_N_DESTS]);

/* The getopt_long loop: every flag is stored in command-line order; -h or
 * --help stops with CLI_PARSE_HELP; an unknown or ambiguous flag, a
 * missing value or a value out of range is reported (cli_error) and stops
 * with CLI_PARSE_ERROR. With first_arg NULL a word that is not a flag is
 * an error; otherwise such words (files) are moved last by getopt and
 * *first_arg is the index of the first. argv[0] is the command's name.
 * Cross-flag checks are the caller's. */
cli_parse_result cli_flags_parse(cli_flags *f, int argc, char **argv, int *first_arg);

/* Whether `flag` ("--max-norm") was on the command line. */
bool cli_flags_given(const cli_flags *f, const char *flag);

/* The flags (and headings) of the tables, with "{default}" read from the
 * dests as `f` holds them (a fresh config's, for --help). */
void cli_flags_usage(const cli_flags *f, FILE *out);

/* "<head><text>", the text wrapped at 79 columns under column 22: the
 * layout of every flag's help. */
void cli_flags_usage_line(FILE *out, const char *head, const char *text);

#endif
