/* Fuzzes a full checkpoint's state file (checkpoint/checkpoint.c): the
 * input is written as state.json beside the model and optimizer files of a
 * real checkpoint of a small MLP, which is then read alone
 * (pl_checkpoint_read_values) and loaded into the engine that saved it
 * (pl_engine_load_checkpoint: format, version, step, optimizer, precision,
 * parameter count, loss-scaler state and the caller's values).
 *
 * Invariants: every call ends with PL_STATUS_OK or an error with a
 * message; the engine's parameters are the saved ones either way (a
 * refused load changes nothing, an accepted one loads the same files);
 * an accepted load has a step in [0, 2^52] and at most
 * PL_CHECKPOINT_MAX_VALUES values, each key terminated and non-empty, and
 * reading the values alone gives the same ones; an accepted version-2
 * state file (checksummed: "files") records, for each file the load reads,
 * its true size and CRC32C (those the engine recorded when it saved; the
 * harness decodes the input with jansson itself, as the library does,
 * with no flags: a duplicate key's last value counts).
 *
 * Seeds: the state file the engine wrote, and mutations of it that each
 * hit one check (format, version, step, optimizer, precision, parameters,
 * values, loss scaler, the files' sizes and checksums, the values that
 * restate a field). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <pleiades.h>

#include "fuzz_common.h"

const char fuzz_name[] = "checkpoint_state";

enum { BATCH = 2 };

static pl_runtime_t *runtime;
static pl_graph_t *graph;
static pl_engine_t *engine;
static float *snapshot, *scratch; /* every parameter, graph order */
static size_t n_values;
static char ckpt_dir[4096], state_path[4200];
static char *saved_state; /* the state.json the engine wrote */
static size_t saved_state_len;
/* The files a load reads, and their true size and CRC32C (as saved). */
static const char *const checked_files[] = {"model.safetensors", "optimizer.safetensors"};
enum { N_CHECKED = sizeof checked_files / sizeof checked_files[0] };
static json_int_t true_bytes[N_CHECKED], true_crc[N_CHECKED];

static void die_library(const char *what) { fuzz_die("%s: %s", what, pl_last_error()); }

static void read_params(float *out) {
    for (int i = 0; i < pl_graph_num_params(graph); i++) {
        const pl_tensor_t *p = pl_graph_param(graph, i);
        size_t n = (size_t)pl_tensor_numel(p);
        if (pl_engine_get_param(engine, p, out, n) != PL_STATUS_OK)
            die_library("pl_engine_get_param");
        out += n;
    }
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) fuzz_die("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (!p || fread(p, 1, (size_t)n, f) != (size_t)n) fuzz_die("cannot read %s", path);
    fclose(f);
    p[n] = '\0';
    *len = (size_t)n;
    return p;
}

void fuzz_setup(void) {
    fuzz_starpu_env();
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 1;
    if (!(runtime = pl_runtime_new(&ro))) die_library("pl_runtime_new");
    graph = fuzz_tiny_mlp();
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = BATCH;
    if (!(engine = pl_engine_new(runtime, graph, &eo))) die_library("pl_engine_new");
    n_values = (size_t)pl_graph_param_count(graph);
    snapshot = malloc(n_values * sizeof *snapshot);
    scratch = malloc(n_values * sizeof *scratch);
    if (!snapshot || !scratch) fuzz_die("out of memory");
    read_params(snapshot);
    fuzz_scratch_path(ckpt_dir, sizeof ckpt_dir, "ckpt");
    pl_checkpoint_values v = {0};
    if (pl_checkpoint_values_set(&v, "epoch", 3) || pl_checkpoint_values_set(&v, "batch", 8) ||
        pl_engine_save_checkpoint(engine, ckpt_dir, &v))
        die_library("saving the checkpoint");
    snprintf(state_path, sizeof state_path, "%s/state.json", ckpt_dir);
    saved_state = slurp(state_path, &saved_state_len);
    json_t *root = json_loadb(saved_state, saved_state_len, 0, NULL);
    json_t *files = json_object_get(root, "files");
    if (json_integer_value(json_object_get(root, "version")) != 2 ||
        json_object_size(files) != N_CHECKED)
        fuzz_die("the saved state file is not version 2 with %d files", (int)N_CHECKED);
    for (int i = 0; i < N_CHECKED; i++) {
        json_t *f = json_object_get(files, checked_files[i]);
        true_bytes[i] = json_integer_value(json_object_get(f, "bytes"));
        true_crc[i] = json_integer_value(json_object_get(f, "crc32c"));
        if (!json_is_integer(json_object_get(f, "crc32c")) || true_bytes[i] <= 0)
            fuzz_die("the saved state file has no size or CRC32C for %s", checked_files[i]);
    }
    json_decref(root);
}

void fuzz_teardown(void) {
    pl_engine_free(engine);
    pl_graph_free(graph);
    pl_runtime_free(runtime);
    free(snapshot);
    free(scratch);
    free(saved_state);
    engine = NULL;
    graph = NULL;
    runtime = NULL;
}

static void check_values(const pl_checkpoint_values *v, const char *what) {
    if (v->n < 0 || v->n > PL_CHECKPOINT_MAX_VALUES)
        fuzz_die("%s: %d values", what, v->n);
    for (int i = 0; i < v->n; i++)
        if (!memchr(v->key[i], '\0', sizeof v->key[i]) || !v->key[i][0])
            fuzz_die("%s: value %d has an empty or unterminated key", what, i);
}

static void check_failed(pl_status st, const char *what) {
    if (st != PL_STATUS_OK && !pl_last_error()[0])
        fuzz_die("%s failed (%s) without a message", what, pl_status_string(st));
}

/* An accepted state file of version 2 records each file's true size and
 * CRC32C. */
static void check_records(const uint8_t *data, size_t size) {
    json_error_t err;
    json_t *root = json_loadb((const char *)data, size, 0, &err);
    if (!root) fuzz_die("accepted a state file jansson cannot decode: %s", err.text);
    json_t *version = json_object_get(root, "version");
    if (!json_is_integer(version) || json_integer_value(version) < 1)
        fuzz_die("accepted a state file without an integer version >= 1");
    if (json_integer_value(version) >= 2) {
        json_t *files = json_object_get(root, "files");
        for (int i = 0; i < N_CHECKED; i++) {
            json_t *f = json_object_get(files, checked_files[i]);
            json_t *bytes = json_object_get(f, "bytes"), *crc = json_object_get(f, "crc32c");
            if (!json_is_integer(bytes) || json_integer_value(bytes) != true_bytes[i] ||
                !json_is_integer(crc) || json_integer_value(crc) != true_crc[i])
                fuzz_die("accepted version %lld with %s recorded as %s bytes, CRC32C %s "
                         "(the file has %lld, %lld)",
                         (long long)json_integer_value(version), checked_files[i],
                         json_is_integer(bytes) ? "integer" : "no integer",
                         json_is_integer(crc) ? "integer" : "no integer",
                         (long long)true_bytes[i], (long long)true_crc[i]);
        }
    }
    json_decref(root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_write_file(state_path, data, size);
    pl_checkpoint_values alone = {0}, loaded = {0};
    pl_clear_error();
    pl_status st_alone = pl_checkpoint_read_values(ckpt_dir, &alone);
    check_failed(st_alone, "pl_checkpoint_read_values");
    if (st_alone == PL_STATUS_OK) check_values(&alone, "pl_checkpoint_read_values");
    pl_clear_error();
    pl_status st = pl_engine_load_checkpoint(engine, ckpt_dir, &loaded);
    check_failed(st, "pl_engine_load_checkpoint");
    read_params(scratch);
    if (memcmp(scratch, snapshot, n_values * sizeof *snapshot) != 0)
        fuzz_die("the parameters changed (load %s)", st ? "refused" : "accepted");
    if (st == PL_STATUS_OK) {
        check_values(&loaded, "pl_engine_load_checkpoint");
        int64_t steps = pl_engine_steps(engine);
        if (steps < 0 || steps > ((int64_t)1 << 52))
            fuzz_die("accepted a step of %" PRId64, steps);
        if (st_alone != PL_STATUS_OK || alone.n != loaded.n ||
            memcmp(alone.key, loaded.key, sizeof alone.key) != 0 ||
            memcmp(alone.value, loaded.value, (size_t)loaded.n * sizeof *loaded.value) != 0)
            fuzz_die("the values read alone differ from the loaded ones");
        check_records(data, size);
    }
    return 0;
}

/* The saved file with `from` replaced by `to` (the first occurrence). */
static void put_mutation(const char *dir, const char *name, const char *from, const char *to,
                         int *count) {
    const char *at = strstr(saved_state, from);
    if (!at) fuzz_die("seed %s: '%s' is not in the saved state file", name, from);
    size_t head = (size_t)(at - saved_state), nf = strlen(from), nt = strlen(to);
    size_t n = saved_state_len - nf + nt;
    char *p = malloc(n + 1);
    if (!p) fuzz_die("out of memory");
    memcpy(p, saved_state, head);
    memcpy(p + head, to, nt);
    memcpy(p + head + nt, at + nf, saved_state_len - head - nf);
    fuzz_seed_put(dir, name, p, n, count);
    free(p);
}

/* The saved file with the integer after the first `key` that follows
 * `after` one more (one less at 2^32 - 1, a CRC's largest value). */
static void put_off_by_one(const char *dir, const char *name, const char *after,
                           const char *key, int *count) {
    const char *at = strstr(saved_state, after);
    if (at) at = strstr(at, key);
    if (!at) fuzz_die("seed %s: '%s' then '%s' are not in the saved state file", name, after, key);
    at += strlen(key);
    char *end;
    unsigned long long v = strtoull(at, &end, 10);
    if (end == at) fuzz_die("seed %s: no integer after '%s'", name, key);
    char num[32], from[64];
    snprintf(num, sizeof num, "%llu", v == 0xffffffffULL ? v - 1 : v + 1);
    snprintf(from, sizeof from, "%.*s", (int)(end - at), at);
    size_t head = (size_t)(at - saved_state), nf = strlen(from), nt = strlen(num);
    size_t n = saved_state_len - nf + nt;
    char *p = malloc(n + 1);
    if (!p) fuzz_die("out of memory");
    memcpy(p, saved_state, head);
    memcpy(p + head, num, nt);
    memcpy(p + head + nt, at + nf, saved_state_len - head - nf);
    fuzz_seed_put(dir, name, p, n, count);
    free(p);
}

int fuzz_make_seeds(const char *dir) {
    int count = 0;
    fuzz_seed_put(dir, "saved", saved_state, saved_state_len, &count);
    static const char *const m[][3] = {
        {"format", "\"pleiades-checkpoint\"", "\"other\""},
        {"version", "\"version\": 2", "\"version\": 3"},
        {"version-1", "\"version\": 2", "\"version\": 1"},
        {"files-missing", "\"files\"", "\"no-files\""},
        {"files-array", "\"files\": {", "\"files\": [], \"x\": {"},
        {"crc-flipped", "\"crc32c\": ", "\"crc32c\": 1"},
        {"crc-huge", "\"crc32c\": ", "\"crc32c\": 99999999999"},
        {"bytes-negative", "\"bytes\": ", "\"bytes\": -"},
        {"step-disagrees", "\"epoch\": 3", "\"epoch\": 3, \"step\": 7"},
        {"accumulate-disagrees", "\"epoch\": 3", "\"epoch\": 3, \"accumulate\": 4"},
        {"step-negative", "\"step\": 0", "\"step\": -1"},
        {"step-huge", "\"step\": 0", "\"step\": 9007199254740993"},
        {"step-real", "\"step\": 0", "\"step\": 0.5"},
        {"optimizer", "\"adamw\"", "\"sgd\""},
        {"precision", "\"fp32\"", "\"bf16\""},
        {"parameters", "\"parameters\": ", "\"parameters\": 1"},
        {"values-array", "\"values\": {", "\"values\": [], \"x\": {"},
        {"value-real", "\"epoch\": 3", "\"epoch\": 3.5"},
        {"value-string", "\"epoch\": 3", "\"epoch\": \"3\""},
        {"value-key-long", "\"epoch\": 3",
         "\"a-key-that-is-longer-than-thirty-one-bytes\": 3"},
        {"values-many", "\"epoch\": 3",
         "\"a\": 1, \"b\": 2, \"c\": 3, \"d\": 4, \"e\": 5, \"f\": 6, \"g\": 7, \"h\": 8, "
         "\"i\": 9, \"j\": 10, \"k\": 11, \"l\": 12, \"m\": 13, \"n\": 14, \"o\": 15, "
         "\"p\": 16, \"q\": 17"},
        {"files-optimizer-missing", "\"optimizer.safetensors\"", "\"other.safetensors\""},
        {"files-empty", "\"files\": {", "\"files\": {}, \"x\": {"},
        {"files-duplicate-key", "\"files\": {", "\"files\": {}, \"files\": {"},
        {"files-extra", "\"files\": {",
         "\"files\": {\"../outside\": {\"bytes\": 0, \"crc32c\": 0}, "},
        {"files-record-number", "\"model.safetensors\": {",
         "\"model.safetensors\": 5, \"x\": {"},
        {"bytes-string", "\"bytes\": ", "\"bytes\": \"1\", \"b\": "},
        {"bytes-huge", "\"bytes\": ", "\"bytes\": 9223372036854775807, \"b\": "},
        {"crc-real", "\"crc32c\": ", "\"crc32c\": 0.5, \"c\": "},
        {"crc-negative", "\"crc32c\": ", "\"crc32c\": -1, \"c\": "},
        {"crc-2-32", "\"crc32c\": ", "\"crc32c\": 4294967296, \"c\": "},
        {"version-string", "\"version\": 2", "\"version\": \"2\""},
        {"version-real", "\"version\": 2", "\"version\": 2.0"},
        {"version-missing", "\"version\": 2", "\"versio\": 2"},
        {"scaler-zero", "\"format\"",
         "\"loss_scaler\": {\"scale\": 0, \"growth_step\": 0, \"hysteresis_step\": 0}, "
         "\"format\""},
        {"scaler-negative-growth", "\"format\"",
         "\"loss_scaler\": {\"scale\": 65536.0, \"growth_step\": -1, \"hysteresis_step\": 0},"
         " \"format\""},
    };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
        put_mutation(dir, m[i][0], m[i][1], m[i][2], &count);
    /* The checksum and size checks proper: each file's recorded size and
     * CRC32C one off (valid fields, wrong values). */
    put_off_by_one(dir, "bytes-off-by-one", "\"model.safetensors\"", "\"bytes\": ", &count);
    put_off_by_one(dir, "crc-off-by-one", "\"model.safetensors\"", "\"crc32c\": ", &count);
    put_off_by_one(dir, "optimizer-bytes-off-by-one", "\"optimizer.safetensors\"",
                   "\"bytes\": ", &count);
    put_off_by_one(dir, "optimizer-crc-off-by-one", "\"optimizer.safetensors\"",
                   "\"crc32c\": ", &count);
    fuzz_seed_put(dir, "empty", "", 0, &count);
    fuzz_seed_put(dir, "not-an-object", "[1, 2]", 6, &count);
    return count;
}
