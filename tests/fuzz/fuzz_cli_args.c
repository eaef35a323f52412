/* Fuzzes the command-line parsing of `pleiades train`: the input is cut
 * into words at NUL and newline bytes, which become the arguments after
 * "train" (cli_train_check: the flag tables of cli/train_flags.c and
 * cli/exec_flags.c read by cli/flags.c's getopt_long loop with cli/args.c's
 * value parsers, then the cross-option checks of cli/train_flags.c and
 * cli/exec_options.c; nothing runs). Each word is also given to the value parsers of
 * cli/args.c directly, with invariants:
 *  - cli_parse_int accepts exactly the strict decimal integers in range
 *    (an independent parser here is the oracle) and returns their value;
 *  - cli_parse_real returns a finite float within the requested range;
 *  - cli_parse_int_list returns 1..capacity values, each in range;
 *  - cli_parse_choice returns the index of an equal name, or -1;
 * and the command's status is 0 (would run, or --help) or 2 (usage). */
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "fuzz_common.h"
#include "train.h"

const char fuzz_name[] = "cli_args";

enum { MAX_WORDS = 64 };

void fuzz_setup(void) {
    /* The device default comes from the environment: keep it fixed. */
    unsetenv("PLEIADES_DEVICE");
}

void fuzz_teardown(void) {}

/* The oracle: [+-]?[0-9]+ whose value fits in int64_t and lies in
 * [min, max]. */
static bool strict_int(const char *s, int64_t min, int64_t max,
                       int64_t *out) {
    bool negative = *s == '-';
    if (*s == '+' || *s == '-')
        s++;
    if (!*s)
        return false;
    uint64_t magnitude = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return false;
        unsigned d = (unsigned)(*s - '0');
        if (magnitude > (UINT64_C(1) << 63) / 10 ||
            magnitude * 10 + d > (UINT64_C(1) << 63))
            return false;
        magnitude = magnitude * 10 + d;
    }
    if (!negative && magnitude > (uint64_t)INT64_MAX)
        return false;
    int64_t v = negative ? (int64_t)(0 - magnitude) : (int64_t)magnitude;
    if (v < min || v > max)
        return false;
    *out = v;
    return true;
}

static void check_int(const char *word, int64_t min, int64_t max) {
    int64_t got = 12345, want = 0;
    bool ok = cli_parse_int("--n", word, min, max, &got);
    bool expected = strict_int(word, min, max, &want);
    if (ok != expected || (ok && got != want))
        fuzz_die("cli_parse_int('%s', %lld..%lld): %s %lld, the oracle %s "
                 "%lld", word, (long long)min, (long long)max,
                 ok ? "accepted" : "refused", (long long)got,
                 expected ? "accepts" : "refuses", (long long)want);
}

static void check_real(const char *word, cli_real_range r) {
    float v = NAN;
    if (!cli_parse_real("--x", word, r, &v))
        return;
    /* The float handed back, not only the text's double, must be in the
     * range: 0.99999999999 rounds to 1.0f. */
    bool in = isfinite(v) && v >= r.min && v <= r.max &&
              !(r.min_exclusive && v == r.min) &&
              !(r.max_exclusive && v == r.max);
    if (!in)
        fuzz_die("cli_parse_real('%s') = %.9g, outside the range", word,
                 (double)v);
    if (!strpbrk(word, "0123456789") || strpbrk(word, "xXnN"))
        fuzz_die("cli_parse_real accepted '%s'", word);
}

static void check_list(const char *word) {
    int64_t values[4];
    int count = -1;
    if (!cli_parse_int_list("--l", word, 1, 1000, values, 4, &count))
        return;
    if (count < 1 || count > 4)
        fuzz_die("cli_parse_int_list('%s'): count %d", word, count);
    for (int i = 0; i < count; i++)
        if (values[i] < 1 || values[i] > 1000)
            fuzz_die("cli_parse_int_list('%s'): value %lld", word,
                     (long long)values[i]);
}

static void check_choice(const char *word) {
    static const char *const names[] = {"none", "1f1b", "interleaved"};
    int i = cli_parse_choice("--c", word, names, 3);
    int want = -1;
    for (int k = 0; k < 3; k++)
        if (strcmp(word, names[k]) == 0)
            want = k;
    if (i != want)
        fuzz_die("cli_parse_choice('%s') = %d, expected %d", word, i, want);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* Words own a NUL-terminated copy of the input. */
    char *text = malloc(size + 1);
    if (!text)
        fuzz_die("out of memory");
    memcpy(text, data, size);
    text[size] = '\0';
    char cmd[] = "train";
    char *argv[MAX_WORDS + 2] = {cmd};
    int argc = 1;
    char *word = text;
    for (size_t i = 0; i <= size && argc <= MAX_WORDS; i++)
        if (i == size || text[i] == '\0' || text[i] == '\n') {
            text[i] = '\0';
            argv[argc++] = word;
            word = text + i + 1;
        }
    argv[argc] = NULL;

    for (int i = 1; i < argc; i++) {
        check_int(argv[i], -5, 100);
        check_int(argv[i], INT64_MIN, INT64_MAX);
        check_real(argv[i], (cli_real_range){0, INFINITY, true, false});
        check_real(argv[i], (cli_real_range){0, 1, false, true});
        check_list(argv[i]);
        check_choice(argv[i]);
    }
    optind = 0; /* glibc: start a fresh getopt_long scan */
    int rc = cli_train_check(argc, argv);
    if (rc != CLI_EXIT_OK && rc != CLI_EXIT_USAGE)
        fuzz_die("cli_train_check returned %d", rc);
    free(text);
    return 0;
}

/* --------------------------------------------------------------- seeds */

static void put(const char *dir, const char *name, const char *words,
                int *count) {
    fuzz_seed_put(dir, name, words, strlen(words), count);
}

int fuzz_make_seeds(const char *dir) {
    int count = 0;
    put(dir, "mlp", "--model\nmlp\n--hidden\n1024,1024\n--epochs\n4\n"
                    "--batch-size\n256\n--lr\n1e-3\n--workers\n2", &count);
    put(dir, "gpt", "--model=gpt\n--layers\n4\n--channels\n256\n--heads\n4\n"
                    "--context\n128\n--steps\n600\n--eval-every\n100\n"
                    "--save\nx.safetensors\n--seed\n7", &count);
    put(dir, "pipeline", "--model\ngpt\n--schedule\ninterleaved\n--stages\n2\n"
                         "--chunks\n2\n--microbatches\n4\n--batch-size\n8\n"
                         "--layers-per-stage\n1,1,1,1\n--trace\nt.json\n"
                         "--paje\nt.paje", &count);
    put(dir, "placement", "--placement\nstatic\n--budget-mb\n64\n"
                          "--offload-dir\n/tmp\n--chunk-mb\n0.5\n"
                          "--shard-param-frac\n1\n--offload-optim-frac\n0.5\n"
                          "--max-prefetch\n8\n--steady-cuda-cap-ratio\n0.9",
        &count);
    put(dir, "sgd", "--optimizer\nsgd\n--momentum\n0.9\n--weight-decay\n0\n"
                    "--tiles\n2\n--device\ncpu\n--quiet\n--metrics\nm.jsonl",
        &count);
    put(dir, "abbreviations", "--epo=3\n--hid\n10\n--m\nmlp\n--lr=.5", &count);
    put(dir, "mistakes", "--epochs\n0\n--lr\nabc\n--hidden\n10,,2\n-x\n"
                         "--quiet=1\n--batch-size", &count);
    put(dir, "numbers", "--lr\n1e-60\n--seed\n9223372036854775808\n"
                        "--momentum\n1\n--weight-decay\n-0\n--hidden\n"
                        "+5,-0,0x10", &count);
    put(dir, "help", "-h", &count);
    put(dir, "stray", "stray\n--\n--model\ngpt\n--epochs\n3", &count);
    static const char nul_words[] = "--lr\0001\0--workers\0003";
    fuzz_seed_put(dir, "nul-separated", nul_words, sizeof nul_words - 1,
                  &count);
    return count;
}
