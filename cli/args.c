/* Strict option-value parsing for the pleiades CLI (see args.h). */
#include "args.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_error(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "%s: ", CLI_PROGRAM);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void cli_usage_hint(const char *command) {
    if (command)
        fprintf(stderr, "Try '%s %s --help' for more information.\n",
                CLI_PROGRAM, command);
    else
        fprintf(stderr, "Try '%s --help' for more information.\n",
                CLI_PROGRAM);
}

/* strtoll/strtod skip leading white space and accept "inf", "nan" and hex;
 * requiring a digit (after an optional sign) up front rules all of that out
 * before the C library gets to be lenient. */
static bool starts_like_number(const char *s, bool allow_point) {
    if (*s == '+' || *s == '-')
        s++;
    return isdigit((unsigned char)*s) || (allow_point && *s == '.');
}

/* Scans one integer at `s`; *end is where it stopped. */
static bool scan_int(const char *s, const char **end, int64_t *out) {
    if (!starts_like_number(s, false))
        return false;
    errno = 0;
    char *stop;
    long long v = strtoll(s, &stop, 10);
    if (errno == ERANGE) /* long long is 64 bits wherever StarPU runs */
        return false;
    *end = stop;
    *out = (int64_t)v;
    return true;
}

/* "integer in 1..64", "integers >= 0": the wording shared by the messages. */
static void describe_int_range(char *buf, size_t size, int64_t min,
                               int64_t max, bool plural) {
    const char *noun = plural ? "integers" : "an integer";
    if (max == INT64_MAX)
        snprintf(buf, size, "%s >= %" PRId64, noun, min);
    else
        snprintf(buf, size, "%s in %" PRId64 "..%" PRId64, noun, min, max);
}

bool cli_parse_int(const char *flag, const char *text, int64_t min,
                   int64_t max, int64_t *out) {
    const char *end = text;
    int64_t v = 0;
    if (scan_int(text, &end, &v) && *end == '\0' && v >= min && v <= max) {
        *out = v;
        return true;
    }
    char what[96];
    describe_int_range(what, sizeof what, min, max, false);
    cli_error("%s: expected %s, got '%s'", flag, what, text);
    return false;
}

void cli_real_range_text(char *buf, size_t size, cli_real_range r) {
    bool has_min = isfinite(r.min), has_max = isfinite(r.max);
    if (has_min && has_max)
        snprintf(buf, size, "%c%g, %g%c", r.min_exclusive ? '(' : '[', r.min, r.max,
                 r.max_exclusive ? ')' : ']');
    else if (has_min)
        snprintf(buf, size, "%s %g", r.min_exclusive ? ">" : ">=", r.min);
    else if (has_max)
        snprintf(buf, size, "%s %g", r.max_exclusive ? "<" : "<=", r.max);
    else
        snprintf(buf, size, "any");
}

/* "a number in [0, 1)", "a number > 0": the wording of the messages. */
static void describe_real_range(char *buf, size_t size, cli_real_range r) {
    char range[64];
    cli_real_range_text(range, sizeof range, r);
    if (isfinite(r.min) && isfinite(r.max))
        snprintf(buf, size, "a number in %s", range);
    else if (isfinite(r.min) || isfinite(r.max))
        snprintf(buf, size, "a number %s", range);
    else
        snprintf(buf, size, "a number");
}

static bool scan_real(const char *s, double *out) {
    /* Hex floats ("0x1p-3") are valid C but not what anyone means by a
     * learning rate; rejecting them keeps "0x10" from parsing as 16. */
    if (!starts_like_number(s, true) || strpbrk(s, "xX"))
        return false;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno == ERANGE || *end != '\0' || !isfinite(v))
        return false;
    *out = v;
    return true;
}

static bool in_real_range(double v, cli_real_range r) {
    if (v < r.min || (r.min_exclusive && v == r.min))
        return false;
    if (v > r.max || (r.max_exclusive && v == r.max))
        return false;
    return true;
}

bool cli_parse_real(const char *flag, const char *text, cli_real_range range,
                    float *out) {
    double v = 0;
    bool ok = scan_real(text, &v) && in_real_range(v, range);
    float f = (float)v;
    bool fits = isfinite(f) && (v == 0 || f != 0);
    /* The float is what the library gets, so it is the value the range
     * must hold for: 0.99999999999 is below 1, its float is 1. */
    bool rounded_out = ok && fits && !in_real_range(f, range);
    if (ok && fits && !rounded_out) {
        *out = f;
        return true;
    }
    char what[96], why[64] = "";
    describe_real_range(what, sizeof what, range);
    if (rounded_out)
        snprintf(why, sizeof why, " (%g in single precision)", (double)f);
    else if (ok)
        snprintf(why, sizeof why, " (out of single-precision range)");
    cli_error("%s: expected %s, got '%s'%s", flag, what, text, why);
    return false;
}

bool cli_parse_int_list(const char *flag, const char *text, int64_t min,
                        int64_t max, int64_t *out, int capacity, int *count) {
    char what[96];
    describe_int_range(what, sizeof what, min, max, true);
    const char *p = text;
    for (int n = 0;; n++) {
        if (n == capacity) {
            cli_error("%s: expected at most %d comma-separated values, "
                      "got '%s'", flag, capacity, text);
            return false;
        }
        const char *end = p;
        int64_t v = 0;
        const char *problem = NULL;
        if (*p == ',' || *p == '\0')
            problem = "is empty";
        else if (!scan_int(p, &end, &v) || (*end != ',' && *end != '\0'))
            problem = "is not an integer";
        else if (v < min || v > max)
            problem = "is out of range";
        if (problem) {
            cli_error("%s: expected comma-separated %s, got '%s' "
                      "(item %d %s)", flag, what, text, n + 1, problem);
            return false;
        }
        out[n] = v;
        if (*end == '\0') {
            *count = n + 1;
            return true;
        }
        p = end + 1; /* past the comma; a trailing one yields an empty item */
    }
}

int cli_parse_choice(const char *flag, const char *text,
                     const char *const *names, int n_names) {
    for (int i = 0; i < n_names; i++)
        if (strcmp(text, names[i]) == 0)
            return i;
    char list[256] = "";
    size_t used = 0;
    for (int i = 0; i < n_names && used < sizeof list; i++) {
        int w = snprintf(list + used, sizeof list - used, "%s%s",
                         i ? ", " : "", names[i]);
        if (w < 0)
            break;
        used += (size_t)w;
    }
    cli_error("%s: expected one of %s, got '%s'", flag, list, text);
    return -1;
}

const char *cli_join_names(char *buf, size_t size, const char *first, int n,
                           const char *(*name)(int), const char *last) {
    size_t used = 0;
    int total = n + (first != NULL);
    buf[0] = '\0';
    for (int i = 0; i < total && used < size; i++) {
        const char *sep = i == 0 ? "" : i == total - 1 ? last : ", ";
        int w = snprintf(buf + used, size - used, "%s%s", sep,
                         first && i == 0 ? first : name(i - (first != NULL)));
        if (w < 0) break;
        used += (size_t)w;
    }
    return buf;
}

const char *cli_option_flag(const struct option *options, int id, char *buf,
                            size_t size) {
    for (const struct option *o = options; o->name; o++)
        if (o->val == id) {
            snprintf(buf, size, "--%s", o->name);
            return buf;
        }
    snprintf(buf, size, "-%c", id);
    return buf;
}

/* Whether `id` is the value of one of the long options. */
static bool is_long_option(const struct option *options, int id) {
    for (const struct option *o = options; o->name; o++)
        if (o->val == id)
            return true;
    return false;
}

void cli_report_bad_option(const struct option *options, char **argv) {
    /* glibc leaves optopt 0 for an unknown long option, the option's value
     * for a long one given "=value" it does not take, and the character
     * for an unknown short one. Only long options surely moved optind past
     * their word: a short one may be inside a cluster ("-xy") that getopt
     * has not left, where argv[optind - 1] is the previous word. */
    if (optopt != 0 && !is_long_option(options, optopt)) {
        cli_error("unknown option '-%c'", optopt);
        return;
    }
    const char *arg = argv[optind - 1];
    int len = (int)strcspn(arg, "=");
    if (optopt != 0) { /* a known flag given "=value" it does not take */
        char flag[32];
        cli_error("%s: takes no value, got '%s'",
                  cli_option_flag(options, optopt, flag, sizeof flag), arg);
        return;
    }
    /* getopt_long accepts unique prefixes (--epo) and reports a prefix of
     * several options like an unknown one; say which they were. */
    char matches[256] = "";
    int n_matches = 0;
    for (const struct option *o = options; o->name; o++)
        if (len > 2 && strncmp(o->name, arg + 2, (size_t)(len - 2)) == 0) {
            size_t used = strlen(matches);
            snprintf(matches + used, sizeof matches - used, "%s--%s",
                     n_matches++ ? ", " : "", o->name);
        }
    if (n_matches > 1)
        cli_error("ambiguous option '%.*s' (could be %s)", len, arg,
                  matches);
    else
        cli_error("unknown option '%.*s'", len, arg);
}
