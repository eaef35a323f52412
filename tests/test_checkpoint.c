/* Tests of safetensors checkpoints on a small GPT:
 *  - a saved file read back by an independent reader written here (header
 *    length, alignment, escaping, one tensor's bytes);
 *  - save → load into an engine built with another seed → equal parameters;
 *    metadata round trip, including JSON escapes written by hand;
 *  - corrupted and mismatched files (written here byte by byte) fail with a
 *    message naming the file, the byte offset in the header and the tensor
 *    or field, and change nothing;
 *  - failed saves leave no temporary file and never clobber a good file.
 * Exit status 0 on success; every failed check prints a FAIL line. */
#define _POSIX_C_SOURCE 200809L /* lstat, getpid, also under -std=c11 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pleiades.h"
#include "test_util.h"

enum { V = 256, T = 8, C = 16, BATCH = 2 };

/* ---------------------------------------------------------------- model */

typedef struct model {
    pl_graph_t *g;
    pl_engine_t *e;
    pl_gpt_model m;
} model;

static bool model_new(pl_runtime_t *rt, uint64_t seed, model *md) {
    memset(md, 0, sizeof *md);
    pl_gpt_config cfg = {.vocab = V, .context = T, .channels = C, .layers = 1,
                         .heads = 2};
    md->g = pl_graph_new(seed);
    if (!md->g || pl_gpt_build(md->g, &cfg, &md->m) != PL_STATUS_OK) {
        printf("FAIL: building the GPT: %s\n", pl_last_error());
        return false;
    }
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = BATCH;
    md->e = pl_engine_new(rt, md->g, &eo);
    if (!md->e) {
        printf("FAIL: pl_engine_new: %s\n", pl_last_error());
        return false;
    }
    return true;
}

static void model_free(model *md) {
    pl_engine_free(md->e);
    pl_graph_free(md->g);
}

/* One AdamW step, so that no parameter keeps a seed-independent initial
 * value (LayerNorm ones and zeros): then every parameter of a model built
 * with another seed differs, and a partial load would show. */
static bool train_once(model *md) {
    int32_t tok[BATCH * T], tgt[BATCH * T];
    for (int i = 0; i < BATCH * T; i++) {
        tok[i] = (i * 37 + 11) % V;
        tgt[i] = (i * 53 + 5) % V;
    }
    const void *data[2] = {tok, tgt};
    pl_batch b = {.size = BATCH, .data = data};
    pl_step_result r;
    if (pl_engine_train_step(md->e, &b, &r) != PL_STATUS_OK) {
        printf("FAIL: train step: %s\n", pl_last_error());
        return false;
    }
    return true;
}

static size_t total_params(const pl_graph_t *g) {
    size_t n = 0;
    for (int i = 0; i < pl_graph_num_params(g); i++)
        n += (size_t)pl_tensor_numel(pl_graph_param(g, i));
    return n;
}

/* All parameter values, in graph order (caller frees). */
static float *snapshot(const model *md) {
    float *v = malloc(total_params(md->g) * sizeof *v);
    float *dst = v;
    for (int i = 0; v && i < pl_graph_num_params(md->g); i++) {
        pl_tensor_t *p = pl_graph_param(md->g, i);
        if (pl_engine_get_param(md->e, p, dst, (size_t)pl_tensor_numel(p)) != PL_STATUS_OK)
            printf("FAIL: get_param %s: %s\n", pl_tensor_name(p),
                   pl_last_error());
        dst += pl_tensor_numel(p);
    }
    return v;
}

/* Whether every parameter of a equals (bitwise) the snapshot; counts the
 * parameters that differ into *n_diff. */
static bool same_params(const model *md, const float *want, int *n_diff) {
    float *got = snapshot(md);
    const float *w = want, *h = got;
    *n_diff = 0;
    for (int i = 0; got && i < pl_graph_num_params(md->g); i++) {
        size_t n = (size_t)pl_tensor_numel(pl_graph_param(md->g, i));
        *n_diff += memcmp(w, h, n * sizeof *w) != 0;
        w += n;
        h += n;
    }
    free(got);
    return got && *n_diff == 0;
}

/* ---------------------------------------------------------- file helpers */

static void write_raw(const char *path, const void *bytes, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(bytes, 1, len, f) != len)
        printf("FAIL: cannot write %s\n", path);
    if (f) fclose(f);
}

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static float le_f32(const uint8_t *p) {
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                 (uint32_t)p[3] << 24;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A safetensors file from a header text and data bytes, exactly as given
 * (length field = strlen(header)). */
static void write_st(const char *path, const char *header, const void *data,
                     size_t data_len) {
    size_t n = strlen(header);
    uint8_t *buf = malloc(8 + n + data_len + 1);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, header, n);
    if (data_len) memcpy(buf + 8 + n, data, data_len);
    write_raw(path, buf, 8 + n + data_len);
    free(buf);
}

static bool exists(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0;
}

/* Whether `dir` holds a leftover "*.tmp.*" file. */
static bool has_temp(const char *dir) {
    DIR *d = opendir(dir);
    bool found = false;
    struct dirent *ent;
    while (d && (ent = readdir(d)))
        found |= strstr(ent->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    return found;
}

/* -------------------------------------------- hand-written checkpoints */

/* How write_custom deviates from a correct file for one tensor. */
typedef struct custom {
    const char *target;     /* the tensor changed (NULL: none) */
    bool omit;              /* leave it out */
    const char *dtype;      /* its dtype string instead of "F32" */
    const char *shape;      /* its shape text instead of the real one */
    long size_delta;        /* bytes added to its data range */
    const char *extra;      /* an extra member appended to the header */
    const char *metadata;   /* the __metadata__ object text, or NULL */
} custom;

/* A file with the values of `vals` (graph order), laid out in REVERSE
 * graph order (so a loader must follow data_offsets, not the order of the
 * header), with the deviations of `cu`. Written independently of
 * checkpoint.c. */
static void write_custom(const char *path, const pl_graph_t *g,
                         const float *vals, const custom *cu) {
    int np = pl_graph_num_params(g);
    size_t total = total_params(g) * 4 + 64;
    uint8_t *data = calloc(1, total);
    size_t hcap = 65536, hlen = 0;
    char *h = malloc(hcap);
    hlen += (size_t)snprintf(h + hlen, hcap - hlen, "{");
    if (cu->metadata)
        hlen += (size_t)snprintf(h + hlen, hcap - hlen,
                                 "\"__metadata__\":%s,", cu->metadata);
    size_t at = 0;
    const float *src_end = vals + total_params(g);
    for (int i = np - 1; i >= 0; i--) {
        pl_tensor_t *p = pl_graph_param(g, i);
        const char *name = pl_tensor_name(p);
        size_t n = (size_t)pl_tensor_numel(p);
        const float *src = src_end - n;
        src_end = src;
        bool tgt = cu->target && !strcmp(name, cu->target);
        if (tgt && cu->omit) continue;
        size_t bytes = (size_t)((long)(n * 4) + (tgt ? cu->size_delta : 0));
        for (size_t k = 0; k < n * 4 && k < bytes; k++) {
            uint32_t u;
            memcpy(&u, &src[k / 4], 4);
            data[at + k] = (uint8_t)(u >> (8 * (k % 4)));
        }
        char shape[64] = "[";
        int64_t s[PL_MAX_DIMS];
        int nd = pl_tensor_shape(p, s);
        for (int d = 0; d < nd; d++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape),
                     "%s%lld", d ? "," : "", (long long)s[d]);
        strcat(shape, "]");
        hlen += (size_t)snprintf(
            h + hlen, hcap - hlen,
            "%s\"%s\": {\"dtype\": \"%s\", \"shape\": %s, "
            "\"data_offsets\": [%zu, %zu]}",
            hlen > 1 && h[hlen - 1] != ',' ? ", " : "", name,
            tgt && cu->dtype ? cu->dtype : "F32",
            tgt && cu->shape ? cu->shape : shape, at, at + bytes);
        at += bytes;
    }
    if (cu->extra)
        hlen += (size_t)snprintf(h + hlen, hcap - hlen, ", %s", cu->extra);
    snprintf(h + hlen, hcap - hlen, "}");
    write_st(path, h, data, at);
    free(h);
    free(data);
}

/* ----------------------------------------------------------------- tests */

static const char *const meta_keys[] = {"vocab", "context", "note"};
static const char *const meta_values[] = {
    "256", "8", "a \"quoted\" back\\slash, new\nline, tab\t, caf\xc3\xa9"};

/* The independent reader: header length and alignment, escaped metadata,
 * sizes, and the bytes of one tensor equal to pl_engine_get_param. */
static void check_file_layout(const char *path, model *md) {
    size_t len;
    uint8_t *f = tu_read_file(path, &len);
    CHECK(f && len >= 8, "cannot read %s", path);
    if (!f || len < 8) { free(f); return; }
    uint64_t n = le64(f);
    CHECK(n <= len - 8, "header length %llu > file", (unsigned long long)n);
    if (n > len - 8) { free(f); return; }
    CHECK((8 + n) % 8 == 0, "data starts at %llu, not 8-byte aligned",
          (unsigned long long)(8 + n));
    CHECK(len == 8 + n + total_params(md->g) * 4,
          "file is %zu bytes, want 8 + %llu + %zu", len,
          (unsigned long long)n, total_params(md->g) * 4);
    char *h = calloc(1, n + 1);
    memcpy(h, f + 8, n);
    CHECK(h[0] == '{', "header does not start with '{'");
    CHECK(strstr(h, "\"__metadata__\":{\"vocab\":\"256\",\"context\":\"8\","
                    "\"note\":\"a \\\"quoted\\\" back\\\\slash, new\\nline, "
                    "tab\\t, caf\xc3\xa9\"}"),
          "metadata not written as escaped JSON: %s", h);
    /* One tensor: its data_offsets from the header, its bytes from the
     * data section. */
    const char *name = "h0.attn.qkv.weight";
    char key[96];
    snprintf(key, sizeof key, "\"%s\":{", name);
    const char *ent = strstr(h, key);
    const char *off = ent ? strstr(ent, "\"data_offsets\":[") : NULL;
    unsigned long long b = 0, e = 0;
    CHECK(off && sscanf(off, "\"data_offsets\":[%llu,%llu]", &b, &e) == 2,
          "no data_offsets for %s in %s", name, h);
    CHECK(ent && strstr(ent, "\"dtype\":\"F32\",\"shape\":[48,16]") == ent +
                                                                    strlen(key),
          "dtype/shape of %s", name);
    pl_tensor_t *p = pl_graph_find(md->g, name);
    size_t numel = (size_t)pl_tensor_numel(p);
    float *want = malloc(numel * sizeof *want);
    pl_engine_get_param(md->e, p, want, (size_t)pl_tensor_numel(p));
    bool equal = e - b == numel * 4 && 8 + n + e <= len;
    for (size_t i = 0; equal && i < numel; i++)
        equal = le_f32(f + 8 + n + b + 4 * i) == want[i];
    CHECK(equal, "bytes [%llu, %llu) of %s differ from pl_engine_get_param",
          b, e, name);
    free(want);
    free(h);
    free(f);
}

static void check_metadata(const char *path) {
    char v[128];
    pl_status st = pl_safetensors_metadata(path, "vocab", v, sizeof v);
    CHECK(st == PL_STATUS_OK && !strcmp(v, "256"), "vocab: '%s' (%s)", v,
          pl_last_error());
    st = pl_safetensors_metadata(path, "note", v, sizeof v);
    CHECK(st == PL_STATUS_OK && !strcmp(v, meta_values[2]), "note: '%s' (%s)",
          v, pl_last_error());
    st = pl_safetensors_metadata(path, "context", v, 2); /* "8" + NUL fits */
    CHECK(st == PL_STATUS_OK && !strcmp(v, "8"), "context: '%s'", v);
    pl_clear_error();
    st = pl_safetensors_metadata(path, "vocab", v, 3); /* "256" does not */
    tu_expect_error(__LINE__, "metadata too long", st,
                    PL_STATUS_INVALID_ARGUMENT, path, "vocab");
    CHECK(v[0] == '\0', "a value that did not fit left '%s'", v);
    pl_clear_error();
    st = pl_safetensors_metadata(path, "nope", v, sizeof v);
    tu_expect_error(__LINE__, "metadata key missing", st,
                    PL_STATUS_INVALID_ARGUMENT, path, "'nope'");
}

/* Loading `path` into md fails with `want` and a message holding the file
 * and `frag`, and leaves every parameter as it was. */
static void expect_load_fails(int line, const char *what, model *md,
                              const char *path, pl_status want,
                              const char *frag) {
    float *before = snapshot(md);
    pl_clear_error();
    pl_status st = pl_engine_load_safetensors(md->e, path);
    tu_expect_error(line, what, st, want, path, frag);
    int n_diff;
    if (!same_params(md, before, &n_diff)) {
        tu_failures++;
        printf("FAIL %s:%d: %s: the failed load changed %d parameters\n",
               __FILE__, line, what, n_diff);
    }
    free(before);
}

static void test_corrupt(model *target, const model *src, const char *good) {
    char p[256];
    float *vals = snapshot(src);
    int n_diff;
    same_params(target, vals, &n_diff);
    CHECK(n_diff == pl_graph_num_params(target->g),
          "only %d of %d parameters differ between the models", n_diff,
          pl_graph_num_params(target->g));

    /* The hand-written file itself is right: it loads (an extra tensor of
     * another dtype is ignored; metadata with escapes decodes). */
    tu_scratch_path(p, sizeof p, "hand.safetensors");
    write_custom(p, src->g, vals,
                 &(custom){.extra = "\"extra.step\": {\"dtype\": \"I64\", "
                                    "\"shape\": [0], \"data_offsets\": [0, 0]}",
                           .metadata = "{\"k\\/e\\u0079\": \"caf\\u00e9 "
                                       "\\ud83d\\ude00 \\\"\\\\\"}"});
    float *orig = snapshot(target);
    CHECK(pl_engine_load_safetensors(target->e, p) == PL_STATUS_OK,
          "hand-written file: %s", pl_last_error());
    CHECK(same_params(target, vals, &n_diff),
          "hand-written file: %d parameters differ", n_diff);
    char v[64];
    CHECK(pl_safetensors_metadata(p, "k/ey", v, sizeof v) == PL_STATUS_OK &&
              !strcmp(v, "caf\xc3\xa9 \xf0\x9f\x98\x80 \"\\"),
          "escaped metadata: '%s' (%s)", v, pl_last_error());
    /* Back to the other model's values for the failure cases. */
    const float *o = orig;
    for (int i = 0; i < pl_graph_num_params(target->g); i++) {
        pl_tensor_t *t = pl_graph_param(target->g, i);
        pl_engine_set_param(target->e, t, o, (size_t)pl_tensor_numel(t));
        o += pl_tensor_numel(t);
    }
    free(orig);

    /* Truncated data: the good file minus its last 4 bytes. */
    size_t len;
    uint8_t *bytes = tu_read_file(good, &len);
    tu_scratch_path(p, sizeof p, "truncated.safetensors");
    write_raw(p, bytes, len - 4);
    expect_load_fails(__LINE__, "truncated data", target, p,
                      PL_STATUS_FORMAT_ERROR, "truncated");
    /* Trailing garbage after the data. */
    tu_scratch_path(p, sizeof p, "trailing.safetensors");
    uint8_t *longer = malloc(len + 8);
    memcpy(longer, bytes, len);
    memset(longer + len, 0xAB, 8);
    write_raw(p, longer, len + 8);
    expect_load_fails(__LINE__, "trailing bytes", target, p,
                      PL_STATUS_FORMAT_ERROR, "cover");
    free(longer);
    /* Header length larger than the file. */
    tu_scratch_path(p, sizeof p, "biglen.safetensors");
    uint8_t big[18] = {0xE8, 0x03}; /* 1000, then 10 bytes */
    write_raw(p, big, sizeof big);
    expect_load_fails(__LINE__, "header length > file", target, p,
                      PL_STATUS_FORMAT_ERROR, "header length 1000");
    /* Shorter than the length field. */
    tu_scratch_path(p, sizeof p, "stub.safetensors");
    write_raw(p, big, 5);
    expect_load_fails(__LINE__, "5-byte file", target, p,
                      PL_STATUS_FORMAT_ERROR, "5 bytes");
    /* Garbage header. */
    tu_scratch_path(p, sizeof p, "garbage.safetensors");
    write_st(p, "this is not json", NULL, 0);
    expect_load_fails(__LINE__, "garbage header", target, p,
                      PL_STATUS_FORMAT_ERROR, "malformed header at byte 0");
    write_st(p, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\":"
                " [0, 4]}, \"b\": 7}", "abcd", 4);
    expect_load_fails(__LINE__, "non-object tensor", target, p,
                      PL_STATUS_FORMAT_ERROR, "tensor 'b'");
    write_st(p, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\":"
                " [0, 4], \"bogus\": 1}}", "abcd", 4);
    expect_load_fails(__LINE__, "unknown field", target, p,
                      PL_STATUS_FORMAT_ERROR, "field 'bogus'");
    write_st(p, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1.5], "
                "\"data_offsets\": [0, 4]}}", "abcd", 4);
    expect_load_fails(__LINE__, "fractional dim", target, p,
                      PL_STATUS_FORMAT_ERROR, "field 'shape'");
    write_st(p, "{\"a\\q\": {}}", NULL, 0);
    expect_load_fails(__LINE__, "bad escape", target, p,
                      PL_STATUS_FORMAT_ERROR, "invalid escape");
    write_st(p, "{\"__metadata__\": {\"k\": 1}}", NULL, 0);
    expect_load_fails(__LINE__, "non-string metadata", target, p,
                      PL_STATUS_FORMAT_ERROR, "must be a string");
    write_st(p, "{} x", NULL, 0);
    expect_load_fails(__LINE__, "data after the object", target, p,
                      PL_STATUS_FORMAT_ERROR, "after the header");
    /* Where: the byte offset in the header of the offending token (syntax
     * errors) or value (the format's own checks), and the tensor and
     * field it lies in. */
    write_st(p, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1] \"data_offsets\":"
                " [0, 4]}}", "abcd", 4);
    expect_load_fails(__LINE__, "missing comma", target, p,
                      PL_STATUS_FORMAT_ERROR,
                      "malformed header at byte 36: tensor 'a': ");
    write_st(p, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1.5], "
                "\"data_offsets\": [0, 4]}}", "abcd", 4);
    expect_load_fails(__LINE__, "fractional dim, where", target, p,
                      PL_STATUS_FORMAT_ERROR,
                      "malformed header at byte 33: tensor 'a': field 'shape': "
                      "element 0: expected an integer, found a fraction or "
                      "exponent");
    write_st(p, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", NULL, 0);
    expect_load_fails(__LINE__, "missing field", target, p,
                      PL_STATUS_FORMAT_ERROR,
                      "malformed header at byte 6: tensor 'a': missing field "
                      "'data_offsets'");
    /* A tensor given twice: which copy a reader keeps is not defined. */
    write_st(p, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\":"
                " [0, 4]}, \"a\": {}}", "abcd", 4);
    expect_load_fails(__LINE__, "duplicate tensor", target, p,
                      PL_STATUS_FORMAT_ERROR,
                      "malformed header at byte 62: tensor 'a': duplicate");
    write_st(p, "{\"a\": {\"dtype\": \"F32\", \"shape\": [99999999999999999999],"
                " \"data_offsets\": [0, 4]}}", "abcd", 4);
    expect_load_fails(__LINE__, "dim beyond 64 bits", target, p,
                      PL_STATUS_FORMAT_ERROR,
                      "malformed header at byte 33: tensor 'a': field 'shape': "
                      "element 0: too big integer");
    /* A NUL byte, which jansson 2.14 would skip after a number. */
    static const char nul_header[] = "{\"a\": {\"dtype\": \"F32\", \"shape\": [1]"
                                     "\0, \"data_offsets\": [0, 4]}}";
    uint8_t nul_file[8 + sizeof nul_header - 1 + 4] = {sizeof nul_header - 1};
    memcpy(nul_file + 8, nul_header, sizeof nul_header - 1);
    memcpy(nul_file + 8 + sizeof nul_header - 1, "abcd", 4);
    write_raw(p, nul_file, sizeof nul_file);
    expect_load_fails(__LINE__, "NUL byte", target, p, PL_STATUS_FORMAT_ERROR,
                      "malformed header at byte 35: a NUL byte");

    /* A tensor of the wrong shape, late in graph order. */
    tu_scratch_path(p, sizeof p, "shape.safetensors");
    write_custom(p, src->g, vals,
                 &(custom){.target = "ln_f.weight", .shape = "[32]",
                           .size_delta = 64});
    expect_load_fails(__LINE__, "wrong shape", target, p,
                      PL_STATUS_SHAPE_MISMATCH,
                      "tensor 'ln_f.weight': shape [32] but the model has "
                      "[16]");
    /* The last parameter missing. */
    tu_scratch_path(p, sizeof p, "missing.safetensors");
    write_custom(p, src->g, vals, &(custom){.target = "ln_f.bias", .omit = true});
    expect_load_fails(__LINE__, "missing tensor", target, p,
                      PL_STATUS_FORMAT_ERROR, "tensor 'ln_f.bias' is missing");
    /* Wrong dtype (with the byte count of that dtype). */
    tu_scratch_path(p, sizeof p, "dtype.safetensors");
    write_custom(p, src->g, vals,
                 &(custom){.target = "h0.ln2.bias", .dtype = "F16",
                           .size_delta = -32});
    expect_load_fails(__LINE__, "wrong dtype", target, p,
                      PL_STATUS_FORMAT_ERROR, "'h0.ln2.bias': dtype F16");
    /* data_offsets one float short of the shape. */
    tu_scratch_path(p, sizeof p, "offsets.safetensors");
    write_custom(p, src->g, vals,
                 &(custom){.target = "ln_f.bias", .size_delta = -4});
    expect_load_fails(__LINE__, "short data_offsets", target, p,
                      PL_STATUS_FORMAT_ERROR, "'ln_f.bias': data_offsets");
    /* A directory and a nonexistent file. */
    tu_scratch_path(p, sizeof p, "no-such.safetensors");
    expect_load_fails(__LINE__, "nonexistent file", target, p,
                      PL_STATUS_IO_ERROR, strerror(ENOENT));
    expect_load_fails(__LINE__, "a directory", target, tu_scratch_dir(),
                      PL_STATUS_IO_ERROR, "not a regular file");
    free(bytes);
    free(vals);
}

static void test_failed_saves(model *md, const char *good) {
    char p[512], q[512];
    pl_status st;
    size_t len0, len1;
    uint8_t *before = tu_read_file(good, &len0);

    /* A parent directory that does not exist. */
    tu_scratch_path(p, sizeof p, "no-dir/model.safetensors");
    pl_clear_error();
    st = pl_engine_save_safetensors(md->e, p, NULL, NULL, 0);
    tu_expect_error(__LINE__, "save: no such directory", st, PL_STATUS_IO_ERROR,
                    p, strerror(ENOENT));
    tu_scratch_path(q, sizeof q, "no-dir");
    CHECK(!exists(q), "%s was created", q);
    /* A parent that is a regular file (root bypasses permission bits, so
     * this is the portable way to make creating the temporary fail). */
    snprintf(p, sizeof p, "%s/sub.safetensors", good);
    pl_clear_error();
    st = pl_engine_save_safetensors(md->e, p, NULL, NULL, 0);
    tu_expect_error(__LINE__, "save: parent is a file", st, PL_STATUS_IO_ERROR,
                    p, strerror(ENOTDIR));
    /* A directory is in the way: refused before anything is written. */
    tu_scratch_path(p, sizeof p, "adir");
    mkdir(p, 0755);
    tu_scratch_path(q, sizeof q, "adir/keep");
    write_raw(q, "x", 1);
    pl_clear_error();
    st = pl_engine_save_safetensors(md->e, p, NULL, NULL, 0);
    tu_expect_error(__LINE__, "save: a directory in the way", st,
                    PL_STATUS_IO_ERROR, p, strerror(EISDIR));
    /* Argument errors write nothing. */
    const char *keys[2] = {"a", "a"}, *vals[2] = {"1", "2"};
    pl_clear_error();
    st = pl_engine_save_safetensors(md->e, good, keys, vals, 2);
    tu_expect_error(__LINE__, "save: duplicate key", st,
                    PL_STATUS_INVALID_ARGUMENT, "'a' given twice", NULL);
    const char *bad_utf8[1] = {"\xff\xfe"};
    pl_clear_error();
    st = pl_engine_save_safetensors(md->e, good, keys, bad_utf8, 1);
    tu_expect_error(__LINE__, "save: value not UTF-8", st,
                    PL_STATUS_INVALID_ARGUMENT, "UTF-8", NULL);
    const char *null_value[1] = {NULL};
    pl_clear_error();
    st = pl_engine_save_safetensors(md->e, good, keys, null_value, 1);
    tu_expect_error(__LINE__, "save: NULL value", st,
                    PL_STATUS_INVALID_ARGUMENT, "meta_values[0]", NULL);

    CHECK(!has_temp(tu_scratch_dir()), "a temporary file was left in %s",
          tu_scratch_dir());
    uint8_t *after = tu_read_file(good, &len1);
    CHECK(before && after && len0 == len1 && !memcmp(before, after, len0),
          "a failed save changed %s", good);
    free(before);
    free(after);
}

/* Temporaries a killed save left behind ("<path>.tmp.<pid>", the name a
 * save holds between naming its file and the rename) are removed by the
 * next save of the path once their process is gone; a live process's are
 * kept. Without the sweep, 15 of 32 kill -9 tries of `train --save` used to
 * leave up to 100 MB of them. */
static void test_stale_temporaries(model *md) {
    char path[512], dead[600], live[600];
    tu_scratch_path(path, sizeof path, "swept.safetensors");
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0); /* a pid that no longer exists */
    snprintf(dead, sizeof dead, "%s.tmp.%ld", path, (long)child);
    snprintf(live, sizeof live, "%s.tmp.%ld.7", path, (long)getpid());
    write_raw(dead, "stale", 5);
    write_raw(live, "mine", 4);
    pl_clear_error();
    CHECK(pl_engine_save_safetensors(md->e, path, NULL, NULL, 0) == PL_STATUS_OK,
          "save beside stale temporaries: %s", pl_last_error());
    CHECK(!exists(dead), "the dead writer's %s was not removed", dead);
    CHECK(exists(live), "the live process's %s was removed", live);
    unlink(live);
    unlink(path);
}

static void run(pl_runtime_t *rt) {
    model a = {0}, b = {0}, c = {0};
    bool ok = model_new(rt, 1, &a) && model_new(rt, 2, &b) &&
              model_new(rt, 3, &c) && train_once(&a);
    char good[256];
    tu_scratch_path(good, sizeof good, "model.safetensors");
    if (ok) {
        pl_status st = pl_engine_save_safetensors(a.e, good, meta_keys,
                                                  meta_values, 3);
        CHECK(st == PL_STATUS_OK, "save: %s", pl_last_error());
        CHECK(!has_temp(tu_scratch_dir()),
              "a temporary file was left in %s", tu_scratch_dir());
        check_file_layout(good, &a);
        check_metadata(good);

        /* Round trip into a model with different initial values. */
        float *want = snapshot(&a);
        int n_diff;
        same_params(&b, want, &n_diff);
        CHECK(n_diff > 0, "models with seeds 1 and 2 start equal");
        st = pl_engine_load_safetensors(b.e, good);
        CHECK(st == PL_STATUS_OK, "load: %s", pl_last_error());
        CHECK(same_params(&b, want, &n_diff),
              "after loading, %d parameters differ", n_diff);
        /* Saving again over an existing file replaces it. */
        st = pl_engine_save_safetensors(b.e, good, meta_keys, meta_values, 3);
        CHECK(st == PL_STATUS_OK && pl_engine_load_safetensors(c.e, good) ==
                                        PL_STATUS_OK &&
                  same_params(&c, want, &n_diff),
              "second save/load: %s", pl_last_error());
        free(want);

        /* No metadata at all. */
        char p[256], v[8];
        tu_scratch_path(p, sizeof p, "nometa.safetensors");
        st = pl_engine_save_safetensors(a.e, p, NULL, NULL, 0);
        CHECK(st == PL_STATUS_OK, "save without metadata: %s",
              pl_last_error());
        pl_clear_error();
        st = pl_safetensors_metadata(p, "vocab", v, sizeof v);
        tu_expect_error(__LINE__, "file without metadata", st,
                        PL_STATUS_INVALID_ARGUMENT, p, "no __metadata__");

        model fresh = {0};
        if (model_new(rt, 4, &fresh)) {
            test_corrupt(&fresh, &a, good);
            test_failed_saves(&fresh, good);
            test_stale_temporaries(&fresh);
        }
        model_free(&fresh);
    }
    model_free(&a);
    model_free(&b);
    model_free(&c);
}

int main(void) {
    if (!tu_scratch_create("pl_ckpt")) {
        printf("FAIL: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 2;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    if (!rt) {
        printf("FAIL: pl_runtime_new: %s\n", pl_last_error());
        return 1;
    }
    run(rt);
    pl_runtime_free(rt);
    tu_remove_tree(tu_scratch_dir());
    if (tu_failures) {
        printf("%d check(s) failed\n", tu_failures);
        return 1;
    }
    printf("all checkpoint checks passed\n");
    return 0;
}
