/* Fuzzes `pleiades trace-summary` on a trace file: the input is written as
 * FILE.json and the command runs on it as from the command line
 * (cli_trace_summary: the trace loader of cli/trace_load.c, decoding
 * with jansson and locating errors with util/json_where.c, and the
 * statistics of cli/trace_summary.c), its report sent to /dev/null.
 * Going through the command rather than the JSON decoder keeps this
 * harness independent of which library decodes.
 *
 * Invariant: the command ends with status 0 (summarised) or 1 (refused,
 * with a message), never a usage error, and (with the fuzzer's -timeout)
 * in bounded time whatever the file claims.
 *
 * Seeds: small traces in the layout Pleiades writes (metadata, "X" slices
 * with args, "s"/"f" flows, counters, otherData), the bare-array form with
 * "B"/"E" pairs and "t" steps, and a few edge cases. */
#include <getopt.h>
#include <string.h>

#include "fuzz_common.h"
#include "trace_summary.h"

const char fuzz_name[] = "trace";

static char trace_path[4096];

void fuzz_setup(void) {
    fuzz_scratch_path(trace_path, sizeof trace_path, "trace.json");
}

void fuzz_teardown(void) {}

static int run_summary(void *arg) {
    (void)arg;
    char cmd[] = "trace-summary";
    char *argv[] = {cmd, trace_path, NULL};
    optind = 0; /* glibc: start a fresh getopt_long scan */
    return cli_trace_summary(2, argv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_write_file(trace_path, data, size);
    int rc = fuzz_run_silenced(run_summary, NULL);
    if (rc != 0 && rc != 1)
        fuzz_die("trace-summary exited with status %d", rc);
    return 0;
}

/* --------------------------------------------------------------- seeds */

static void put(const char *dir, const char *name, const char *text,
                int *count) {
    fuzz_seed_put(dir, name, text, strlen(text), count);
}

int fuzz_make_seeds(const char *dir) {
    int count = 0;
    /* The writer's layout (scheduling/trace_json.c), two stages. */
    put(dir, "pleiades-1f1b",
        "{\"traceEvents\":[\n"
        "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,"
        "\"args\":{\"name\":\"pleiades\"}},\n"
        "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,"
        "\"args\":{\"name\":\"stage 0 / CPU 0\",\"stage\":0}},\n"
        "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":0,"
        "\"args\":{\"sort_index\":0}},\n"
        "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,"
        "\"args\":{\"name\":\"stage 1 / CPU 1\",\"stage\":1}},\n"
        "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":1,"
        "\"args\":{\"sort_index\":1025}},\n"
        "{\"name\":\"F fc1 mb0\",\"cat\":\"F\",\"ph\":\"X\",\"ts\":0.000,"
        "\"dur\":10.500,\"pid\":1,\"tid\":0,\"args\":{\"op\":\"fc1\","
        "\"phase\":\"F\",\"microbatch\":0,\"stage\":0,\"chunk\":0,"
        "\"ready_ts\":0.000}},\n"
        "{\"name\":\"F head mb0\",\"cat\":\"F\",\"ph\":\"X\",\"ts\":12.000,"
        "\"dur\":8.000,\"pid\":1,\"tid\":1,\"args\":{\"op\":\"head\","
        "\"phase\":\"F\",\"microbatch\":0,\"stage\":1,\"chunk\":0,"
        "\"ready_ts\":11.250}},\n"
        "{\"name\":\"L loss mb0\",\"cat\":\"L\",\"ph\":\"X\",\"ts\":20.000,"
        "\"dur\":1.000,\"pid\":1,\"tid\":1,\"args\":{\"op\":\"loss\","
        "\"phase\":\"L\",\"microbatch\":0,\"stage\":1,\"chunk\":0}},\n"
        "{\"name\":\"B head mb0\",\"cat\":\"B\",\"ph\":\"X\",\"ts\":21.000,"
        "\"dur\":7.000,\"pid\":1,\"tid\":1,\"args\":{\"op\":\"head\","
        "\"phase\":\"B\",\"microbatch\":0,\"stage\":1,\"chunk\":0}},\n"
        "{\"name\":\"W fc1 mb0\",\"cat\":\"W\",\"ph\":\"X\",\"ts\":30.000,"
        "\"dur\":9.000,\"pid\":1,\"tid\":0,\"args\":{\"op\":\"fc1\","
        "\"phase\":\"W\",\"microbatch\":0,\"stage\":0,\"chunk\":0}},\n"
        "{\"name\":\"O chunk0\",\"cat\":\"O\",\"ph\":\"X\",\"ts\":40.000,"
        "\"dur\":2.000,\"pid\":1,\"tid\":0,\"args\":{\"op\":\"adamw\","
        "\"phase\":\"O\",\"microbatch\":-1,\"stage\":-1,\"chunk\":0}},\n"
        "{\"name\":\"activation\",\"cat\":\"flow\",\"ph\":\"s\",\"id\":0,"
        "\"ts\":5.250,\"pid\":1,\"tid\":0},\n"
        "{\"name\":\"activation\",\"cat\":\"flow\",\"ph\":\"f\",\"bp\":\"e\","
        "\"id\":0,\"ts\":16.000,\"pid\":1,\"tid\":1},\n"
        "{\"name\":\"gradient\",\"cat\":\"flow\",\"ph\":\"s\",\"id\":1,"
        "\"ts\":24.500,\"pid\":1,\"tid\":1},\n"
        "{\"name\":\"gradient\",\"cat\":\"flow\",\"ph\":\"f\",\"bp\":\"e\","
        "\"id\":1,\"ts\":34.500,\"pid\":1,\"tid\":0},\n"
        "{\"name\":\"stage 0 activations\",\"ph\":\"C\",\"ts\":0.000,"
        "\"pid\":1,\"args\":{\"value\":4096}}\n"
        "],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"schedule\":\"1f1b\","
        "\"stages\":2,\"chunks\":1,\"microbatches\":1,"
        "\"theoretical_bubble\":1,\"version\":\"0.1.0\"}}\n",
        &count);
    /* The bare-array form: nested B/E pairs, string ids, "t" steps, a flow
     * end binding to the next slice (no bp). */
    put(dir, "array-begin-end",
        "[{\"ph\":\"B\",\"name\":\"outer\",\"ts\":1,\"pid\":\"p\",\"tid\":\"a\"},"
        "{\"ph\":\"B\",\"name\":\"inner\",\"ts\":2,\"pid\":\"p\",\"tid\":\"a\","
        "\"args\":{\"stage\":0}},"
        "{\"ph\":\"s\",\"cat\":\"c\",\"id\":\"x1\",\"ts\":2.5,\"pid\":\"p\","
        "\"tid\":\"a\"},"
        "{\"ph\":\"E\",\"ts\":3,\"pid\":\"p\",\"tid\":\"a\"},"
        "{\"ph\":\"E\",\"ts\":9,\"pid\":\"p\",\"tid\":\"a\"},"
        "{\"ph\":\"t\",\"cat\":\"c\",\"id\":\"x1\",\"ts\":5,\"pid\":\"p\","
        "\"tid\":\"b\"},"
        "{\"ph\":\"X\",\"name\":\"step\",\"ts\":4,\"dur\":3,\"pid\":\"p\","
        "\"tid\":\"b\",\"cat\":\"W\"},"
        "{\"ph\":\"f\",\"cat\":\"c\",\"id\":\"x1\",\"ts\":7.5,\"pid\":\"p\","
        "\"tid\":\"b\"},"
        "{\"ph\":\"X\",\"name\":\"next\",\"ts\":8,\"dur\":1,\"pid\":\"p\","
        "\"tid\":\"b\",\"args\":{\"phase\":\"B\",\"stage\":1}}]",
        &count);
    /* Edge cases: unfinished and unmatched slices, negative and repeated
     * times, members given twice, unicode names. */
    put(dir, "edges",
        "{\"traceEvents\":[{\"ph\":\"B\",\"ts\":-5,\"tid\":1},"
        "{\"ph\":\"E\",\"ts\":1,\"tid\":2},"
        "{\"ph\":\"X\",\"ts\":0,\"ts\":1,\"dur\":0,\"tid\":1,"
        "\"name\":\"\\u00e9\\ud83d\\ude00\\u0000x\"},"
        "{\"ph\":\"X\",\"ts\":1,\"dur\":2.5e-3,\"tid\":1.5,"
        "\"args\":{\"stage\":3}},"
        "{\"ph\":\"XX\",\"ts\":1},{\"ts\":\"1\",\"ph\":\"X\"},null,[],7],"
        "\"otherData\":{\"stages\":4,\"schedule\":\"interleaved\","
        "\"theoretical_bubble\":0.0625}}",
        &count);
    put(dir, "no-slices", "{\"traceEvents\":[]}", &count);
    put(dir, "not-a-trace", "{\"traceEvents\":{}}", &count);
    put(dir, "numbers",
        "[{\"ph\":\"X\",\"ts\":-0.0e+0,\"dur\":1E2,\"tid\":-1},"
        "{\"ph\":\"X\",\"ts\":1e18,\"dur\":1e18,\"tid\":0}]",
        &count);
    put(dir, "deep", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
        &count);
    return count;
}
