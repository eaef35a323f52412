/* The parser and usage printer of flag tables (see flags.h). */
#include "flags.h"

#include <getopt.h>
#include <inttypes.h>
#include <string.h>

/* Where a row's value lands. */
static void *field_of(const cli_flags *f, const cli_flag *row) {
    return f->dest[row->dest] ? (char *)f->dest[row->dest] + row->offset : NULL;
}

static bool is_flag(const cli_flag *row) {
    return row->kind != CLI_SECTION && row->kind != CLI_NOTE;
}

/* FNV-1a of a string. */
static uint64_t hash_text(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

void cli_flags_init(cli_flags *f, const cli_flag_table *tables, int n_tables,
                    void *const dest[CLI_N_DESTS]) {
    memset(f, 0, sizeof *f);
    f->n_tables = n_tables < CLI_MAX_TABLES ? n_tables : CLI_MAX_TABLES;
    memcpy(f->tables, tables, (size_t)f->n_tables * sizeof *tables);
    memcpy(f->dest, dest, sizeof f->dest);
    for (int t = 0; t < f->n_tables; t++)
        for (int r = 0; r < tables[t].n_rows; r++) {
            const cli_flag *row = &tables[t].rows[r];
            if (!is_flag(row) || f->n_flags == CLI_MAX_FLAGS) continue;
            int i = f->n_flags++;
            f->flag[i] = row;
            snprintf(f->name_text[i], sizeof f->name_text[i], "--%s", row->name);
            f->names[i] = f->name_text[i];
            f->hashes[i] = hash_text("(absent)");
        }
}

/* ------------------------------------------------------------ values */

static void store_int(void *field, cli_field_type type, int64_t v) {
    switch (type) {
    case CLI_FIELD_BOOL: *(bool *)field = v != 0; break;
    case CLI_FIELD_INT: *(int *)field = (int)v; break;
    case CLI_FIELD_ENUM: *(unsigned *)field = (unsigned)v; break;
    case CLI_FIELD_INT64: *(int64_t *)field = v; break;
    case CLI_FIELD_UINT64: *(uint64_t *)field = (uint64_t)v; break;
    case CLI_FIELD_FLOAT: *(float *)field = (float)v; break;
    case CLI_FIELD_DOUBLE: *(double *)field = (double)v; break;
    default: break;
    }
}

/* The library takes floats: a real is parsed as the float it becomes and
 * widened where the field is a double, as it always was. */
static void store_real(void *field, cli_field_type type, float v) {
    if (type == CLI_FIELD_DOUBLE) *(double *)field = v;
    else if (type == CLI_FIELD_FLOAT) *(float *)field = v;
}

static double load_number(const void *field, cli_field_type type) {
    switch (type) {
    case CLI_FIELD_BOOL: return *(const bool *)field;
    case CLI_FIELD_INT: return *(const int *)field;
    case CLI_FIELD_ENUM: return *(const unsigned *)field;
    case CLI_FIELD_INT64: return (double)*(const int64_t *)field;
    case CLI_FIELD_UINT64: return (double)*(const uint64_t *)field;
    case CLI_FIELD_FLOAT: return *(const float *)field;
    case CLI_FIELD_DOUBLE: return *(const double *)field;
    default: return 0;
    }
}

static int choice_names(const cli_choice *choices, const char **names, int capacity) {
    int n = 0;
    for (; choices[n].name && n < capacity; n++) names[n] = choices[n].name;
    return n;
}

/* One flag's value into its field; false after printing why not. */
static bool store(cli_flags *f, const cli_flag *row, const char *flag, const char *arg) {
    void *field = field_of(f, row);
    switch (row->kind) {
    case CLI_SWITCH:
        store_int(field, row->type, 1);
        return true;
    case CLI_INT: {
        int64_t v;
        if (!cli_parse_int(flag, arg, row->min, row->max, &v)) return false;
        store_int(field, row->type, v);
        return true;
    }
    case CLI_REAL: {
        float v;
        if (!cli_parse_real(flag, arg, row->range, &v)) return false;
        store_real(field, row->type, v);
        return true;
    }
    case CLI_CHOICE: {
        const char *names[32];
        int i = cli_parse_choice(flag, arg, names, choice_names(row->choices, names, 32));
        if (i < 0) return false;
        if (row->type == CLI_FIELD_FLOAT) *(float *)field = (float)row->choices[i].value;
        else if (row->type == CLI_FIELD_DOUBLE) *(double *)field = row->choices[i].value;
        else store_int(field, row->type, (int64_t)row->choices[i].value);
        return true;
    }
    case CLI_PATH:
        /* The only thing to refuse up front is an empty string, which
         * would surface as a puzzling error much later. */
        if (*arg == '\0') {
            cli_error("%s: expected %s, got ''", flag, row->what);
            return false;
        }
        *(const char **)field = arg;
        return true;
    case CLI_TEXT:
        *(const char **)field = arg;
        return true;
    case CLI_INT_LIST:
        return cli_parse_int_list(flag, arg, row->min, row->max, (int64_t *)field,
                                  row->capacity,
                                  (int *)((char *)f->dest[row->dest] + row->count_offset));
    case CLI_CUSTOM:
        return row->parse(f, row, field, flag, arg);
    default:
        cli_error("internal error: %s has no parser", flag);
        return false;
    }
}

/* ----------------------------------------------------------- parsing */

enum { FIRST_ID = 256 }; /* past every char, so no clash with -h */

cli_parse_result cli_flags_parse(cli_flags *f, int argc, char **argv, int *first_arg) {
    struct option options[CLI_MAX_FLAGS + 1];
    for (int i = 0; i < f->n_flags; i++)
        options[i] = (struct option){f->flag[i]->name,
                                     f->flag[i]->kind == CLI_SWITCH ||
                                             f->flag[i]->kind == CLI_HELP
                                         ? no_argument
                                         : required_argument,
                                     NULL,
                                     f->flag[i]->kind == CLI_HELP ? 'h' : FIRST_ID + i};
    options[f->n_flags] = (struct option){NULL, 0, NULL, 0};
    opterr = 0; /* cli_report_bad_option words the messages instead */
    int id;
    /* The leading ':' makes a missing value return ':' rather than '?'. */
    while ((id = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        if (id == 'h') return CLI_PARSE_HELP;
        if (id == ':') {
            char flag[48];
            cli_error("%s: missing value", cli_option_flag(options, optopt, flag, sizeof flag));
            return CLI_PARSE_ERROR;
        }
        if (id == '?' || id < FIRST_ID || id >= FIRST_ID + f->n_flags) {
            cli_report_bad_option(options, argv);
            return CLI_PARSE_ERROR;
        }
        int i = id - FIRST_ID;
        f->given[i / 64] |= UINT64_C(1) << (i % 64);
        f->hashes[i] = hash_text(optarg ? optarg : "(set)");
        if (!store(f, f->flag[i], f->names[i], optarg)) return CLI_PARSE_ERROR;
    }
    if (first_arg) {
        *first_arg = optind;
    } else if (optind < argc) {
        cli_error("unexpected argument '%s'", argv[optind]);
        return CLI_PARSE_ERROR;
    }
    return CLI_PARSE_RUN;
}

bool cli_flags_given(const cli_flags *f, const char *flag) {
    for (int i = 0; i < f->n_flags; i++)
        if (strcmp(f->names[i], flag) == 0) return f->given[i / 64] >> (i % 64) & 1;
    return false;
}

/* ------------------------------------------------------------- usage */

void cli_flags_usage_line(FILE *out, const char *head, const char *text) {
    int col = fprintf(out, "%s", head);
    for (const char *w = text; *w;) {
        int len = (int)strcspn(w, " ");
        if (w != text && col + 1 + len > 79) {
            col = fprintf(out, "\n%22s", "") - 1;
        } else if (w != text) {
            fputc(' ', out);
            col++;
        }
        col += fprintf(out, "%.*s", len, w);
        w += len;
        while (*w == ' ') w++;
    }
    fputc('\n', out);
}

/* What "{range}" says of a row. */
static void range_text(const cli_flag *row, char *buf, size_t size) {
    if (row->kind == CLI_REAL)
        cli_real_range_text(buf, size, row->range);
    else if (row->max == INT64_MAX)
        snprintf(buf, size, ">= %" PRId64, row->min);
    else
        snprintf(buf, size, "%" PRId64 "..%" PRId64, row->min, row->max);
}

/* What "{default}" says of a row: its field's value now. */
static void default_text(const cli_flags *f, const cli_flag *row, char *buf, size_t size) {
    const void *field = field_of(f, row);
    buf[0] = '\0';
    if (!field) return;
    if (row->kind == CLI_CHOICE) {
        double v = load_number(field, row->type);
        for (const cli_choice *c = row->choices; c->name; c++)
            if ((row->type == CLI_FIELD_FLOAT ? (double)(float)c->value : c->value) == v) {
                snprintf(buf, size, "%s", c->name);
                return;
            }
    } else if (row->type == CLI_FIELD_STRING) {
        snprintf(buf, size, "%s", *(const char *const *)field ? *(const char *const *)field
                                                               : "none");
    } else if (row->kind == CLI_INT_LIST) {
        const int64_t *v = field;
        int n = *(const int *)((const char *)f->dest[row->dest] + row->count_offset);
        size_t used = 0;
        for (int i = 0; i < n && used < size; i++)
            used += (size_t)snprintf(buf + used, size - used, "%s%" PRId64, i ? "," : "", v[i]);
    } else if (row->type == CLI_FIELD_INT64 || row->type == CLI_FIELD_UINT64 ||
               row->type == CLI_FIELD_INT || row->type == CLI_FIELD_ENUM) {
        snprintf(buf, size, "%.0f", load_number(field, row->type));
    } else {
        snprintf(buf, size, "%g", load_number(field, row->type));
    }
}

/* The row's help with "{range}" and "{default}" replaced. */
static void help_text(const cli_flags *f, const cli_flag *row, char *buf, size_t size) {
    if (row->help_fn) {
        row->help_fn(buf, size);
        return;
    }
    size_t used = 0;
    buf[0] = '\0';
    for (const char *s = row->help ? row->help : ""; *s && used + 1 < size;) {
        char value[256];
        if (strncmp(s, "{range}", 7) == 0) {
            range_text(row, value, sizeof value);
            s += 7;
        } else if (strncmp(s, "{default}", 9) == 0) {
            default_text(f, row, value, sizeof value);
            s += 9;
        } else {
            buf[used++] = *s++;
            buf[used] = '\0';
            continue;
        }
        used += (size_t)snprintf(buf + used, size - used, "%s", value);
        if (used >= size) used = size - 1;
    }
}

void cli_flags_usage(const cli_flags *f, FILE *out) {
    char head[96], text[2048];
    for (int t = 0; t < f->n_tables; t++)
        for (int r = 0; r < f->tables[t].n_rows; r++) {
            const cli_flag *row = &f->tables[t].rows[r];
            help_text(f, row, text, sizeof text);
            if (row->kind == CLI_SECTION) {
                fprintf(out, "%s\n", text);
                continue;
            }
            if (row->kind == CLI_NOTE) {
                cli_flags_usage_line(out, "                      ", text);
                continue;
            }
            /* The help starts in column 22, or two spaces after a long
             * flag. */
            int n = row->kind == CLI_HELP
                        ? snprintf(head, sizeof head, "  -h, --%s", row->name)
                        : snprintf(head, sizeof head, "  --%s%s%s", row->name,
                                   row->arg ? " " : "", row->arg ? row->arg : "");
            snprintf(head + n, sizeof head - (size_t)n, "%*s", n <= 20 ? 22 - n : 2, "");
            cli_flags_usage_line(out, head, text);
            int width = 6;
            for (const cli_choice *c = row->choices; c && c->name; c++)
                if (c->help && (int)strlen(c->name) > width) width = (int)strlen(c->name);
            for (const cli_choice *c = row->choices; c && c->name; c++)
                if (c->help) fprintf(out, "%24s%-*s %s\n", "", width, c->name, c->help);
        }
}
