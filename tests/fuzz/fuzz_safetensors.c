/* Fuzzes the safetensors reader (checkpoint/safetensors.c): the input is a whole
 * checkpoint file — the 8-byte header length, the JSON header, the data —
 * read by pl_safetensors_metadata and loaded by pl_engine_load_safetensors
 * into two engines built once: a tiny GPT (the model `pleiades generate`
 * loads) and a small MLP.
 *
 * Invariants checked on every input, beyond the sanitizers' memory and UB
 * checks (a broken one aborts, which the fuzzer reports):
 *  - a metadata value handed back is NUL-terminated within its buffer;
 *  - a failed load names the file in pl_last_error() and leaves every
 *    parameter bit for bit as it was (loads are all-or-nothing).
 *
 * Seeds: checkpoints the library saves itself (with and without metadata,
 * metadata that needs JSON escapes) and mutations of them: cut, extended,
 * a wrong header length, wrong dtypes, shapes and offsets, duplicate keys. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pleiades.h>

#include "fuzz_common.h"

const char fuzz_name[] = "safetensors";

enum { N_MODELS = 2, BATCH = 2 };

typedef struct model {
    pl_graph_t *g;
    pl_engine_t *e;
    float *snapshot; /* every parameter, graph order: the engine's state */
    size_t n_values;
} model;

static pl_runtime_t *runtime;
static model models[N_MODELS];
static char input_path[4096];

/* --------------------------------------------------------------- setup */

static void die_library(const char *what) {
    fuzz_die("%s: %s", what, pl_last_error());
}

static pl_graph_t *build_gpt(void) {
    pl_graph_t *g = pl_graph_new(7);
    pl_gpt_config cfg = {.vocab = 16, .context = 4, .channels = 8,
                         .layers = 1, .heads = 2};
    pl_gpt_model m;
    if (!g || pl_gpt_build(g, &cfg, &m) != PL_STATUS_OK)
        die_library("pl_gpt_build");
    return g;
}

/* Copies every parameter of the engine into out (graph order). */
static void read_params(const model *m, float *out) {
    for (int i = 0; i < pl_graph_num_params(m->g); i++) {
        const pl_tensor_t *p = pl_graph_param(m->g, i);
        size_t n = (size_t)pl_tensor_numel(p);
        if (pl_engine_get_param(m->e, p, out, n) != PL_STATUS_OK)
            die_library("pl_engine_get_param");
        out += n;
    }
}

void fuzz_setup(void) {
    fuzz_starpu_env();
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 1;
    if (!(runtime = pl_runtime_new(&ro)))
        die_library("pl_runtime_new");
    for (int k = 0; k < N_MODELS; k++) {
        model *m = &models[k];
        m->g = k == 0 ? build_gpt() : fuzz_tiny_mlp();
        pl_engine_options eo = pl_engine_options_default();
        eo.batch_size = BATCH;
        if (!(m->e = pl_engine_new(runtime, m->g, &eo)))
            die_library("pl_engine_new");
        m->n_values = (size_t)pl_graph_param_count(m->g);
        m->snapshot = malloc(m->n_values * sizeof(float) + 1);
        if (!m->snapshot)
            fuzz_die("out of memory");
        read_params(m, m->snapshot);
    }
    fuzz_scratch_path(input_path, sizeof input_path, "input.safetensors");
}

void fuzz_teardown(void) {
    for (int k = 0; k < N_MODELS; k++) {
        pl_engine_free(models[k].e);
        pl_graph_free(models[k].g);
        free(models[k].snapshot);
        models[k] = (model){0};
    }
    pl_runtime_free(runtime);
    runtime = NULL;
}

/* --------------------------------------------------------------- input */

/* The buffer is larger than the size passed: a write past `size` shows as
 * a changed guard byte (the sanitizers only see writes past the array). */
static void check_metadata(const char *key, size_t size) {
    char value[96];
    memset(value, 'x', sizeof value);
    pl_status st = pl_safetensors_metadata(input_path, key, value, size);
    for (size_t i = size; i < sizeof value; i++)
        if (value[i] != 'x')
            fuzz_die("metadata '%s': wrote past the %zu-byte buffer", key,
                     size);
    if (st == PL_STATUS_OK && memchr(value, '\0', size) == NULL)
        fuzz_die("metadata '%s': value not terminated within %zu bytes", key,
                 size);
}

static void check_load(model *m) {
    pl_status st = pl_engine_load_safetensors(m->e, input_path);
    float *now = malloc(m->n_values * sizeof(float) + 1);
    if (!now)
        fuzz_die("out of memory");
    read_params(m, now);
    if (st != PL_STATUS_OK) {
        if (!strstr(pl_last_error(), input_path))
            fuzz_die("a failed load does not name the file: %s",
                     pl_last_error());
        if (memcmp(now, m->snapshot, m->n_values * sizeof(float)) != 0)
            fuzz_die("a failed load changed parameters (%s)",
                     pl_last_error());
    }
    free(m->snapshot);
    m->snapshot = now;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_write_file(input_path, data, size);
    check_metadata("model", 80);
    check_metadata("vocab", 3);
    check_metadata("", 1);
    for (int k = 0; k < N_MODELS; k++)
        check_load(&models[k]);
    return 0;
}

/* --------------------------------------------------------------- seeds */

typedef struct bytes {
    unsigned char *p;
    size_t n;
} bytes;

static bytes slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    bytes b = {NULL, 0};
    if (!f || fseek(f, 0, SEEK_END) != 0)
        fuzz_die("cannot read back %s", path);
    long n = ftell(f);
    rewind(f);
    b.p = malloc((size_t)n + 1);
    if (!b.p || fread(b.p, 1, (size_t)n, f) != (size_t)n)
        fuzz_die("cannot read back %s", path);
    b.n = (size_t)n;
    fclose(f);
    return b;
}

/* A saved file with the first `from` in its header replaced by `to` (the
 * header length field adjusted). */
static bytes with_replaced(bytes b, const char *from, const char *to) {
    size_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | b.p[i];
    char *hdr = (char *)b.p + 8;
    char *at = NULL;
    for (size_t i = 0; !at && i + strlen(from) <= hlen; i++)
        if (!memcmp(hdr + i, from, strlen(from)))
            at = hdr + i;
    if (!at)
        fuzz_die("seed: '%s' not in the header", from);
    size_t lf = strlen(from), lt = strlen(to);
    bytes out = {malloc(b.n - lf + lt + 1), b.n - lf + lt};
    if (!out.p)
        fuzz_die("out of memory");
    size_t head = (size_t)(at - (char *)b.p);
    memcpy(out.p, b.p, head);
    memcpy(out.p + head, to, lt);
    memcpy(out.p + head + lt, at + lf, b.n - head - lf);
    size_t nh = hlen - lf + lt;
    for (int i = 0; i < 8; i++)
        out.p[i] = (unsigned char)(nh >> (8 * i));
    return out;
}

static void put_replaced(const char *dir, const char *name, bytes b,
                         const char *from, const char *to, int *count) {
    bytes m = with_replaced(b, from, to);
    fuzz_seed_put(dir, name, m.p, m.n, count);
    free(m.p);
}

static void put_mutations(const char *dir, const char *stem, bytes b,
                          int *count) {
    char name[128];
    unsigned char *copy = malloc(b.n + 64);
    if (!copy)
        fuzz_die("out of memory");
#define PUT(suffix, data, len)                                                 \
    (snprintf(name, sizeof name, "%s-%s", stem, suffix),                       \
     fuzz_seed_put(dir, name, data, len, count))
    PUT("valid", b.p, b.n);
    PUT("cut-1", b.p, b.n - 1);
    PUT("cut-half", b.p, b.n / 2);
    PUT("cut-length", b.p, 7);
    memcpy(copy, b.p, b.n);
    memcpy(copy + b.n, "junk", 4);
    PUT("trailing", copy, b.n + 4);
    memcpy(copy, b.p, b.n);
    copy[0]++; /* header length one byte too long */
    PUT("length+1", copy, b.n);
    memcpy(copy, b.p, b.n);
    copy[7] = 0x80; /* a length far beyond the file */
    PUT("length-huge", copy, b.n);
    memcpy(copy, b.p, b.n);
    copy[9] = 0xff; /* not UTF-8 */
    PUT("not-utf8", copy, b.n);
#undef PUT
    free(copy);
    snprintf(name, sizeof name, "%s-f16", stem);
    put_replaced(dir, name, b, "\"F32\"", "\"F16\"", count);
    snprintf(name, sizeof name, "%s-unknown-dtype", stem);
    put_replaced(dir, name, b, "\"F32\"", "\"Q4\"", count);
    snprintf(name, sizeof name, "%s-shape", stem);
    put_replaced(dir, name, b, "\"shape\":[", "\"shape\":[1,", count);
    snprintf(name, sizeof name, "%s-offsets", stem);
    put_replaced(dir, name, b, "\"data_offsets\":[0,",
                 "\"data_offsets\":[4,", count);
    snprintf(name, sizeof name, "%s-field", stem);
    put_replaced(dir, name, b, "\"dtype\"", "\"dtipe\"", count);
    snprintf(name, sizeof name, "%s-nested", stem);
    put_replaced(dir, name, b, "{", "{\"a\":{\"b\":[[1]]},", count);
    snprintf(name, sizeof name, "%s-duplicate-meta", stem);
    put_replaced(dir, name, b, "{", "{\"__metadata__\":{\"k\":\"v\"},",
                 count);
    snprintf(name, sizeof name, "%s-escapes", stem);
    put_replaced(dir, name, b, "{",
                 "{\"__metadata__\":{\"\\u00e9\\ud83d\\ude00\":\"\\\"\\\\\\/"
                 "\\b\\f\\n\\r\\t\"},",
                 count);
}

int fuzz_make_seeds(const char *dir) {
    int count = 0;
    char path[4096];
    fuzz_scratch_path(path, sizeof path, "seed.safetensors");
    /* The GPT with the metadata `pleiades train --save` writes. */
    const char *gpt_keys[] = {"model", "vocab", "context", "channels",
                              "layers", "heads"};
    const char *gpt_vals[] = {"gpt", "16", "4", "8", "1", "2"};
    if (pl_engine_save_safetensors(models[0].e, path, gpt_keys, gpt_vals, 6) !=
        PL_STATUS_OK)
        die_library("saving the GPT seed");
    bytes gpt = slurp(path);
    put_mutations(dir, "gpt", gpt, &count);
    free(gpt.p);
    /* The MLP without metadata, and with values that need escapes. */
    if (pl_engine_save_safetensors(models[1].e, path, NULL, NULL, 0) !=
        PL_STATUS_OK)
        die_library("saving the MLP seed");
    bytes mlp = slurp(path);
    put_mutations(dir, "mlp", mlp, &count);
    free(mlp.p);
    const char *odd_keys[] = {"model", "quote\"back\\slash", "\xc3\xa9t\xc3\xa9"};
    const char *odd_vals[] = {"mlp", "line\nfeed\ttab\x01", ""};
    if (pl_engine_save_safetensors(models[1].e, path, odd_keys, odd_vals, 3) !=
        PL_STATUS_OK)
        die_library("saving the escaped seed");
    bytes odd = slurp(path);
    fuzz_seed_put(dir, "mlp-meta-escaped", odd.p, odd.n, &count);
    free(odd.p);
    remove(path);
    /* Degenerate files. */
    fuzz_seed_put(dir, "empty", "", 0, &count);
    static const unsigned char empty_header[] = {2, 0, 0, 0, 0, 0, 0, 0,
                                                 '{', '}'};
    fuzz_seed_put(dir, "empty-header", empty_header, sizeof empty_header,
                  &count);
    return count;
}
