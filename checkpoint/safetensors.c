/* Checkpoints in the safetensors format (github.com/huggingface/safetensors):
 *
 *   u64 little-endian N | N bytes of JSON header | data bytes
 *
 * The header is one object: an optional "__metadata__" object of string
 * values, and per tensor {"dtype": "F32", "shape": [...], "data_offsets":
 * [begin, end]}, the offsets counting from the first data byte. We write
 * the parameters in graph order, packed back to back, and pad the header
 * with spaces so the data starts 8-byte aligned (memory-mapping readers
 * then see aligned floats).
 *
 * Saving writes an anonymous file in the target's directory, syncs it,
 * names it and renames it over `path` (util/atomic_file.h): rename() is
 * atomic, so readers (and a crash) see either the old file or the complete
 * new one, never a torn mix, and a killed save leaves no temporary.
 *
 * Loading decodes the header with jansson, then checks it against the
 * format (types, fields, non-negative integers); every complaint names
 * the byte offset in the header, and the tensor and field concerned
 * (util/json_where.h recovers the offsets, which jansson does not keep).
 * The whole file is validated and every needed tensor read into memory
 * before the first parameter is set, so a bad file leaves the engine as
 * it was. The layout checks follow the reference implementation: the
 * tensors' byte ranges must tile the data section exactly, which catches
 * truncated files and trailing garbage alike. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/safetensors.h"
#include "engine/engine_state.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_where.h"
#include "util/regular_file.h"

/* The reference implementation's limit: refusing larger headers keeps a
 * corrupt length field from allocating gigabytes. */
#define ST_HEADER_MAX ((uint64_t)100000000)
#define ST_METADATA "__metadata__"

/* ==================================================== header, in memory */

typedef struct st_tensor {
    const char *name, *dtype;   /* strings of the header's JSON tree */
    int ndim;                   /* full rank as in the file */
    int64_t shape[PL_MAX_DIMS]; /* the first PL_MAX_DIMS dims */
    uint64_t numel;             /* product of all dims */
    bool numel_overflow;        /* the product does not fit in 64 bits */
    uint64_t begin, end;        /* data_offsets */
} st_tensor;

typedef struct st_header {
    json_t *root;       /* the decoded header: owns every string */
    json_t *metadata;   /* its "__metadata__" object, or NULL */
    st_tensor *tensors; /* sorted by name once parsed */
    size_t n_tensors;
} st_header;

static void header_free(st_header *h) {
    json_decref(h->root);
    free(h->tensors);
    memset(h, 0, sizeof *h);
}

/* ========================================================= JSON header */

/* A name given twice, at any level, is refused rather than letting
 * whichever copy a reader keeps win. Without JSON_ALLOW_NUL jansson also
 * refuses \u0000: names and values are C strings here. */
#define ST_JSON_FLAGS JSON_REJECT_DUPLICATES

typedef struct st_parse {
    const char *text; /* the header's JSON text (not NUL-terminated) */
    size_t size;
    const char *file; /* named in every message */
} st_parse;

static const char *kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static pl_json_step member_step(size_t index, const char *name) {
    pl_json_step s = {.member = true, .index = index};
    snprintf(s.name, sizeof s.name, "%s", name);
    return s;
}

static pl_json_step element_step(size_t index) {
    return (pl_json_step){.member = false, .index = index};
}

/* Where in the structure a path leads, for messages: "tensor 'x': field
 * 'shape': element 2", "__metadata__: key 'k'", "top level". */
static void context(char *buf, size_t size, const pl_json_step *steps,
                    int n) {
    bool meta = n > 0 && steps[0].member && !strcmp(steps[0].name, ST_METADATA);
    size_t at = 0;
    buf[0] = '\0';
    if (n == 0)
        snprintf(buf, size, "top level");
    for (int d = 0; d < n && at < size; d++) {
        const pl_json_step *s = &steps[d];
        const char *sep = d ? ": " : "";
        int w = !s->member ? snprintf(buf + at, size - at, "%selement %zu",
                                      sep, s->index)
                : d == 0 && meta ? snprintf(buf + at, size - at, "%s",
                                            ST_METADATA)
                : d == 0 ? snprintf(buf + at, size - at, "tensor '%s'",
                                    s->name)
                : d == 1 && meta ? snprintf(buf + at, size - at,
                                            "%skey '%s'", sep, s->name)
                : snprintf(buf + at, size - at, "%sfield '%s'", sep, s->name);
        if (w < 0)
            break;
        at += (size_t)w;
    }
}

/* The value at steps[0..n) breaks the format: "<file>: malformed header at
 * byte <offset of that value>: <context>: <what>". */
static pl_status fail_at(const st_parse *ps, const pl_json_step *steps, int n,
                         const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static pl_status fail_at(const st_parse *ps, const pl_json_step *steps, int n,
                         const char *fmt, ...) {
    char what[256], ctx[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    context(ctx, sizeof ctx, steps, n);
    size_t at = pl_json_offset(ps->text, ps->size, ST_JSON_FLAGS, steps, n);
    return pl_fail(PL_STATUS_FORMAT_ERROR,
                   "%s: malformed header at byte %zu: %s: %s", ps->file, at,
                   ctx, what);
}

/* The header is not JSON (or names something twice): "<file>: malformed
 * header at byte <where the offending token starts>: <context>: <what
 * jansson says>", the context being the innermost member or element
 * holding the error. */
static pl_status syntax_error(const st_parse *ps, const json_error_t *err) {
    if (json_error_code(err) == json_error_out_of_memory)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "%s: out of memory",
                       ps->file);
    pl_json_where w = pl_json_error_where(ps->text, ps->size, err);
    char ctx[400];
    if (json_error_code(err) == json_error_end_of_input_expected) {
        snprintf(ctx, sizeof ctx, "data after the header object");
    } else {
        pl_json_path p;
        pl_json_error_path(ps->text, ps->size, ST_JSON_FLAGS, err, &p);
        context(ctx, sizeof ctx, p.step, p.n);
        if (p.n == 0)
            ctx[0] = '\0'; /* jansson's text says what was expected */
    }
    return pl_fail(PL_STATUS_FORMAT_ERROR,
                   "%s: malformed header at byte %zu: %s%s%s", ps->file,
                   w.offset, ctx, ctx[0] ? ": " : "", err->text);
}

/* A non-negative integer. jansson's integers are 64-bit (json_int_t):
 * larger ones already failed to decode ("too big integer"). */
static pl_status get_uint(const st_parse *ps, const pl_json_step *steps,
                          int n, const json_t *v, uint64_t *out) {
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *out = (uint64_t)json_integer_value(v);
        return PL_STATUS_OK;
    }
    if (json_is_real(v)) /* 1.0 and 1e3 too: the format wants integers */
        return fail_at(ps, steps, n,
                       "expected an integer, found a fraction or exponent");
    if (json_is_integer(v))
        return fail_at(ps, steps, n,
                       "expected a non-negative integer, found %lld",
                       (long long)json_integer_value(v));
    return fail_at(ps, steps, n, "expected a non-negative integer, found %s",
                   kind(v));
}

/* "shape": [d0, d1, ...] (steps[1] names the field) into t's shape, rank
 * and element count. */
static pl_status parse_shape(const st_parse *ps, pl_json_step *steps,
                             const json_t *v, st_tensor *t) {
    if (!json_is_array(v))
        return fail_at(ps, steps, 2, "expected an array of dimensions, "
                       "found %s", kind(v));
    bool zero = false;
    t->ndim = 0;
    t->numel = 1;
    size_t i;
    json_t *dim;
    json_array_foreach(v, i, dim) {
        uint64_t d;
        steps[2] = element_step(i);
        pl_status st = get_uint(ps, steps, 3, dim, &d);
        if (st != PL_STATUS_OK)
            return st;
        if (t->ndim < PL_MAX_DIMS)
            t->shape[t->ndim] = (int64_t)d; /* <= INT64_MAX: a json_int_t */
        t->ndim++; /* ST_HEADER_MAX bytes hold far fewer than INT_MAX dims */
        zero |= d == 0;
        if (d && t->numel > UINT64_MAX / d)
            t->numel_overflow = true;
        else
            t->numel *= d;
    }
    if (zero) { /* an empty tensor, however large its other dims */
        t->numel = 0;
        t->numel_overflow = false;
    }
    return PL_STATUS_OK;
}

/* "data_offsets": [begin, end]. */
static pl_status parse_offsets(const st_parse *ps, pl_json_step *steps,
                               const json_t *v, st_tensor *t) {
    if (!json_is_array(v) || json_array_size(v) != 2)
        return fail_at(ps, steps, 2, "data_offsets must be [begin, end]");
    steps[2] = element_step(0);
    pl_status st = get_uint(ps, steps, 3, json_array_get(v, 0), &t->begin);
    steps[2] = element_step(1);
    if (st == PL_STATUS_OK)
        st = get_uint(ps, steps, 3, json_array_get(v, 1), &t->end);
    return st;
}

enum { F_DTYPE = 1, F_SHAPE = 2, F_OFFSETS = 4 };

/* {"dtype": ..., "shape": [...], "data_offsets": [b, e]}, the value of
 * the top-level member steps[0], into t. */
static pl_status parse_tensor(const st_parse *ps, pl_json_step *steps,
                              json_t *v, st_tensor *t) {
    if (!json_is_object(v))
        return fail_at(ps, steps, 1, "expected an object {\"dtype\", "
                       "\"shape\", \"data_offsets\"}, found %s", kind(v));
    int seen = 0;
    size_t k = 0;
    const char *key;
    json_t *field;
    json_object_foreach(v, key, field) {
        steps[1] = member_step(k++, key);
        int bit = !strcmp(key, "dtype")          ? F_DTYPE
                  : !strcmp(key, "shape")        ? F_SHAPE
                  : !strcmp(key, "data_offsets") ? F_OFFSETS
                                                 : 0;
        pl_status st = PL_STATUS_OK;
        if (!bit)
            return fail_at(ps, steps, 2, "unknown field (expected dtype, "
                           "shape, data_offsets)");
        seen |= bit; /* each at most once: names are unique */
        if (bit == F_SHAPE)
            st = parse_shape(ps, steps, field, t);
        else if (bit == F_OFFSETS)
            st = parse_offsets(ps, steps, field, t);
        else if (json_is_string(field))
            t->dtype = json_string_value(field);
        else
            st = fail_at(ps, steps, 2, "expected a string, found %s",
                         kind(field));
        if (st != PL_STATUS_OK)
            return st;
    }
    if (seen != (F_DTYPE | F_SHAPE | F_OFFSETS))
        return fail_at(ps, steps, 1, "missing field '%s'",
                       !(seen & F_DTYPE) ? "dtype"
                       : !(seen & F_SHAPE) ? "shape" : "data_offsets");
    return PL_STATUS_OK;
}

/* "__metadata__": {"key": "value", ...}. */
static pl_status parse_metadata(const st_parse *ps, pl_json_step *steps,
                                json_t *v, st_header *h) {
    if (!json_is_object(v))
        return fail_at(ps, steps, 1, "expected an object of strings, "
                       "found %s", kind(v));
    size_t k = 0;
    const char *key;
    json_t *value;
    json_object_foreach(v, key, value) {
        steps[1] = member_step(k++, key);
        if (!json_is_string(value))
            return fail_at(ps, steps, 2, "its value must be a string, "
                           "found %s", kind(value));
    }
    h->metadata = v;
    return PL_STATUS_OK;
}

/* The whole header: one object (then only padding blanks), of tensors
 * and an optional __metadata__. jansson keeps the members in file order,
 * so a member's index in json_object_foreach locates it in the text. */
static pl_status parse_header(const st_parse *ps, st_header *h) {
    json_error_t err;
    h->root = json_loadb(ps->text, ps->size, ST_JSON_FLAGS, &err);
    if (!h->root)
        return syntax_error(ps, &err);
    if (!json_is_object(h->root))
        return fail_at(ps, NULL, 0, "expected an object, found %s",
                       kind(h->root));
    h->tensors = malloc((json_object_size(h->root) + 1) * sizeof *h->tensors);
    if (!h->tensors)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "%s: out of memory",
                       ps->file);
    pl_json_step steps[3];
    size_t k = 0;
    const char *name;
    json_t *v;
    json_object_foreach(h->root, name, v) {
        pl_status st;
        steps[0] = member_step(k++, name);
        if (!strcmp(name, ST_METADATA)) {
            st = parse_metadata(ps, steps, v, h);
        } else {
            st_tensor *t = &h->tensors[h->n_tensors++];
            memset(t, 0, sizeof *t);
            t->name = name;
            st = parse_tensor(ps, steps, v, t);
        }
        if (st != PL_STATUS_OK)
            return st;
    }
    return PL_STATUS_OK;
}

/* ===================================================== header validation */

/* Where the first byte that is not UTF-8 lies, or n. serde_json (the
 * reference reader) refuses such headers, so we neither read nor write
 * them. Overlong forms and surrogates count as invalid. */
static size_t utf8_invalid_at(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i], need, cp;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) need = 1, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF) need = 2, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4) need = 3, cp = c & 0x07;
        else return i;
        if (n - i <= need) return i;
        for (unsigned k = 1; k <= need; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return i;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if ((need == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return i;
        i += need + 1;
    }
    return n;
}

static int dtype_size(const char *dtype) {
    static const struct { const char *name; int size; } sizes[] = {
        {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
        {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
        {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        if (!strcmp(dtype, sizes[i].name))
            return sizes[i].size;
    return 0; /* a dtype this reader does not know; never one we load */
}

/* Each tensor's range lies within the data and matches its shape. */
static pl_status check_ranges(const char *file, const st_header *h,
                              uint64_t data_len) {
    for (size_t i = 0; i < h->n_tensors; i++) {
        const st_tensor *t = &h->tensors[i];
        if (t->begin > t->end)
            return pl_fail(PL_STATUS_FORMAT_ERROR,
                           "%s: tensor '%s': data_offsets [%llu, %llu] end "
                           "before they begin", file, t->name,
                           (unsigned long long)t->begin,
                           (unsigned long long)t->end);
        if (t->end > data_len)
            return pl_fail(PL_STATUS_FORMAT_ERROR,
                           "%s: tensor '%s': data_offsets [%llu, %llu] run "
                           "past the %llu data bytes in the file (truncated?)",
                           file, t->name, (unsigned long long)t->begin,
                           (unsigned long long)t->end,
                           (unsigned long long)data_len);
        int es = dtype_size(t->dtype);
        if (es && (t->numel_overflow || t->numel > UINT64_MAX / (unsigned)es ||
                   t->end - t->begin != t->numel * (unsigned)es))
            return pl_fail(PL_STATUS_FORMAT_ERROR,
                           "%s: tensor '%s': data_offsets [%llu, %llu] hold "
                           "%llu bytes, but %s of its shape needs %llu%s",
                           file, t->name, (unsigned long long)t->begin,
                           (unsigned long long)t->end,
                           (unsigned long long)(t->end - t->begin), t->dtype,
                           (unsigned long long)(t->numel * (unsigned)es),
                           t->numel_overflow ? " (overflow)" : "");
    }
    return PL_STATUS_OK;
}

static int by_begin(const void *a, const void *b) {
    const st_tensor *x = *(st_tensor *const *)a, *y = *(st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* The ranges, in offset order, tile [0, data_len) with no gap or overlap. */
static pl_status check_tiling(const char *file, const st_header *h,
                              uint64_t data_len) {
    const st_tensor **order = malloc((h->n_tensors + 1) * sizeof *order);
    if (!order)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "%s: out of memory", file);
    for (size_t i = 0; i < h->n_tensors; i++)
        order[i] = &h->tensors[i];
    qsort(order, h->n_tensors, sizeof *order, by_begin);
    uint64_t at = 0;
    const char *prev = NULL;
    pl_status st = PL_STATUS_OK;
    for (size_t i = 0; i < h->n_tensors && st == PL_STATUS_OK; i++) {
        if (order[i]->begin != at && prev)
            st = pl_fail(PL_STATUS_FORMAT_ERROR,
                         "%s: tensor '%s': data starts at %llu, but tensor "
                         "'%s' ends at %llu (the data must be packed without "
                         "gaps or overlaps)", file, order[i]->name,
                         (unsigned long long)order[i]->begin, prev,
                         (unsigned long long)at);
        else if (order[i]->begin != at)
            st = pl_fail(PL_STATUS_FORMAT_ERROR,
                         "%s: tensor '%s': data starts at %llu, leaving a "
                         "gap at the start of the data", file, order[i]->name,
                         (unsigned long long)order[i]->begin);
        at = order[i]->end;
        prev = order[i]->name;
    }
    if (st == PL_STATUS_OK && at != data_len)
        st = pl_fail(PL_STATUS_FORMAT_ERROR,
                     "%s: the tensors cover %llu data bytes, but the file has "
                     "%llu after the header", file, (unsigned long long)at,
                     (unsigned long long)data_len);
    free(order);
    return st;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

/* Sorts the tensors by name for lookups (names are unique: a duplicate
 * failed to decode, ST_JSON_FLAGS). */
static void index_names(st_header *h) {
    if (h->n_tensors > 1)
        qsort(h->tensors, h->n_tensors, sizeof *h->tensors, by_name);
}

static const st_tensor *find_tensor(const st_header *h, const char *name) {
    st_tensor key = {.name = name};
    return h->n_tensors ? bsearch(&key, h->tensors, h->n_tensors,
                                  sizeof *h->tensors, by_name)
                        : NULL;
}

/* ============================================================ file input */

typedef struct st_file {
    int fd;
    uint64_t header_len; /* N */
    uint64_t data_len;   /* bytes after the header */
    st_header h;
} st_file;

/* pread() of exactly len bytes at off (short only at end of file). */
static pl_status read_at(int fd, const char *file, void *buf, size_t len,
                         uint64_t off) {
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return pl_fail(PL_STATUS_IO_ERROR, "%s: read failed: %s", file,
                           strerror(errno));
        if (n == 0)
            return pl_fail(PL_STATUS_FORMAT_ERROR,
                           "%s: truncated: ends at byte %llu", file,
                           (unsigned long long)(off + got));
        got += (size_t)n;
    }
    return PL_STATUS_OK;
}

static uint64_t load_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Reads the length field and the header's JSON text (*text, caller frees). */
static pl_status read_header_text(st_file *f, const char *path, char **text) {
    struct stat sb;
    if (fstat(f->fd, &sb) != 0)
        return pl_fail(PL_STATUS_IO_ERROR, "%s: cannot stat: %s", path,
                       strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return pl_fail(PL_STATUS_IO_ERROR, "%s: not a regular file", path);
    uint64_t size = (uint64_t)sb.st_size;
    uint8_t len[8];
    if (size < 8)
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: %llu bytes, too short for the 8-byte header "
                       "length", path, (unsigned long long)size);
    pl_status st = read_at(f->fd, path, len, 8, 0);
    if (st != PL_STATUS_OK)
        return st;
    f->header_len = load_le64(len);
    if (f->header_len > size - 8)
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: header length %llu is larger than the %llu bytes "
                       "after it in the file", path,
                       (unsigned long long)f->header_len,
                       (unsigned long long)(size - 8));
    if (f->header_len > ST_HEADER_MAX)
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: header length %llu exceeds the limit of %llu",
                       path, (unsigned long long)f->header_len,
                       (unsigned long long)ST_HEADER_MAX);
    f->data_len = size - 8 - f->header_len;
    if (!(*text = malloc((size_t)f->header_len + 1)))
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "%s: out of memory", path);
    return read_at(f->fd, path, *text, (size_t)f->header_len, 8);
}

static pl_status parse_and_check(st_file *f, const char *path,
                                 const char *text) {
    size_t n = (size_t)f->header_len;
    size_t bad = utf8_invalid_at((const unsigned char *)text, n);
    if (bad < n)
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: malformed header at byte %zu: not UTF-8", path,
                       bad);
    /* JSON has no place for a NUL byte (in strings it is escaped), but
     * jansson 2.14 skips one that follows a number instead of refusing it. */
    const char *nul = memchr(text, '\0', n);
    if (nul)
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: malformed header at byte %zu: a NUL byte", path,
                       (size_t)(nul - text));
    st_parse ps = {.text = text, .size = n, .file = path};
    pl_status st = parse_header(&ps, &f->h);
    if (st == PL_STATUS_OK) index_names(&f->h);
    if (st == PL_STATUS_OK) st = check_ranges(path, &f->h, f->data_len);
    if (st == PL_STATUS_OK) st = check_tiling(path, &f->h, f->data_len);
    return st;
}

static void st_close(st_file *f) {
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
    header_free(&f->h);
}

/* Opens `path` and validates its header and layout (not yet against any
 * model). On failure everything is released. */
static pl_status st_open(st_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    /* A FIFO in a checkpoint's place would block the open forever. */
    const char *why;
    f->fd = pl_open_regular(path, 0, &why);
    if (f->fd < 0)
        return pl_fail(PL_STATUS_IO_ERROR, "%s: cannot open: %s", path, why);
    char *text = NULL;
    pl_status st = read_header_text(f, path, &text);
    if (st == PL_STATUS_OK)
        st = parse_and_check(f, path, text);
    free(text);
    if (st != PL_STATUS_OK)
        st_close(f);
    return st;
}

/* ============================================================ byte order */

static bool host_is_little_endian(void) {
    const uint32_t one = 1;
    uint8_t first;
    memcpy(&first, &one, 1);
    return first == 1;
}

/* safetensors data is little-endian: on a big-endian host, floats are
 * byte-swapped on the way in and out (a no-op on x86 and arm64). */
static void swap_to_from_le(float *v, size_t n) {
    if (host_is_little_endian())
        return;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        u = (u >> 24) | ((u >> 8) & 0xFF00u) | ((u << 8) & 0xFF0000u) |
            (u << 24);
        memcpy(&v[i], &u, 4);
    }
}

/* ================================================================ loading */

static void dims_str(char *buf, size_t size, int ndim, const int64_t *shape,
                      bool more) {
    size_t at = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%lld", i ? ", " : "",
                               (long long)shape[i]);
    if (at < size)
        snprintf(buf + at, size - at, "%s]", more ? ", ..." : "");
}

/* The file's tensor for entry p, checked against it. */
static pl_status match_entry(const char *path, const st_header *h,
                             const pl_st_entry *p, const char *what,
                             const st_tensor **out) {
    const char *name = p->name;
    const st_tensor *t = find_tensor(h, name);
    if (!t)
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: tensor '%s' is missing (%s needs it)", path,
                       name, what);
    if (strcmp(t->dtype, "F32") != 0)
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: tensor '%s': dtype %s but %s needs F32",
                       path, name, t->dtype, what);
    const int64_t *shape = p->shape;
    int ndim = p->ndim;
    bool same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = t->shape[i] == shape[i];
    if (!same) {
        char fs[96], ms[96];
        int shown = t->ndim < PL_MAX_DIMS ? t->ndim : PL_MAX_DIMS;
        dims_str(fs, sizeof fs, shown, t->shape, t->ndim > shown);
        dims_str(ms, sizeof ms, ndim, shape, false);
        return pl_fail(PL_STATUS_SHAPE_MISMATCH,
                       "%s: tensor '%s': shape %s but %s has %s", path,
                       name, fs, what, ms);
    }
    *out = t;
    return PL_STATUS_OK;
}

/* Names must be unique to be saved or loaded by name. */
static pl_status check_names(const pl_st_entry *t, int n, const char *path) {
    for (int i = 0; i < n; i++) {
        const char *a = t[i].name;
        if (!strcmp(a, ST_METADATA))
            return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                           "%s: a tensor is named '%s', which safetensors "
                           "reserves", path, ST_METADATA);
        for (int k = 0; k < i; k++)
            if (!strcmp(a, t[k].name))
                return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                               "%s: two tensors are named '%s'", path, a);
    }
    return PL_STATUS_OK;
}

pl_status pl_st_param_entries(const pl_graph_t *g, pl_st_entry **out, int *n) {
    *n = pl_graph_num_params(g);
    *out = calloc(*n ? *n : 1, sizeof **out);
    if (!*out) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; i < *n; i++) {
        const pl_tensor_t *p = pl_graph_param(g, i);
        (*out)[i].name = pl_tensor_name(p);
        (*out)[i].ndim = pl_tensor_shape(p, (*out)[i].shape);
        (*out)[i].numel = pl_tensor_numel(p);
    }
    return PL_STATUS_OK;
}

/* Matches every entry and reads all their values into *values (in list
 * order, caller frees). */
static pl_status read_all(const char *path, st_file *f, const pl_st_entry *e, int n,
                          const char *what, float **values) {
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        const st_tensor *t = NULL;
        pl_status st = match_entry(path, &f->h, &e[i], what, &t);
        if (st != PL_STATUS_OK)
            return st;
        total += (size_t)t->numel;
    }
    float *buf = malloc(total * sizeof *buf + 1);
    if (!buf)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY,
                       "%s: out of memory for %zu values", path, total);
    uint64_t data_start = 8 + f->header_len;
    float *dst = buf;
    for (int i = 0; i < n; i++) {
        const st_tensor *t = find_tensor(&f->h, e[i].name);
        pl_status st = read_at(f->fd, path, dst, (size_t)(t->end - t->begin),
                               data_start + t->begin);
        if (st != PL_STATUS_OK) {
            free(buf);
            return st;
        }
        swap_to_from_le(dst, (size_t)t->numel);
        dst += t->numel;
    }
    *values = buf;
    return PL_STATUS_OK;
}

pl_status pl_st_read(const char *path, const pl_st_entry *entries, int n, const char *what,
                     float **values) {
    pl_status st = check_names(entries, n, path);
    st_file f;
    if (st != PL_STATUS_OK || (st = st_open(&f, path)) != PL_STATUS_OK)
        return st;
    st = read_all(path, &f, entries, n, what, values);
    st_close(&f);
    return st;
}

static const pl_graph_t *graph_of(const pl_engine_t *e) {
    pl_engine_view v;
    pl_engine_view_get(e, &v);
    return v.graph;
}

pl_status pl_engine_load_safetensors(pl_engine_t *e, const char *path) {
    if (!e || !path)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_load_safetensors: %s is NULL",
                       !e ? "engine" : "path");
    pl_st_entry *entries;
    int n;
    pl_status st = pl_st_param_entries(graph_of(e), &entries, &n);
    if (st != PL_STATUS_OK) return st;
    float *values = NULL;
    st = pl_st_read(path, entries, n, "the model", &values);
    free(entries);
    /* Only now, with the whole file validated and read, touch the engine. */
    const float *src = values;
    for (int i = 0; st == PL_STATUS_OK && i < pl_graph_num_params(graph_of(e)); i++) {
        const pl_tensor_t *p = pl_graph_param(graph_of(e), i);
        st = pl_engine_set_param(e, p, src, (size_t)pl_tensor_numel(p));
        src += pl_tensor_numel(p);
    }
    free(values);
    return st;
}

pl_status pl_safetensors_metadata(const char *path, const char *key,
                                  char *value, size_t size) {
    if (!path || !key || !value || size == 0)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_safetensors_metadata: %s",
                       !path ? "path is NULL" : !key ? "key is NULL"
                       : !value ? "value is NULL" : "size is 0");
    value[0] = '\0';
    st_file f;
    pl_status st = st_open(&f, path);
    if (st != PL_STATUS_OK)
        return st;
    /* A string: parse_metadata checked every value. */
    const char *m = json_string_value(json_object_get(f.h.metadata, key));
    size_t len = m ? strlen(m) : 0;
    if (!m)
        st = pl_fail(PL_STATUS_INVALID_ARGUMENT,
                     "%s: no metadata key '%s'%s", path, key,
                     f.h.metadata ? "" : " (the file has no __metadata__)");
    else if (len >= size)
        st = pl_fail(PL_STATUS_INVALID_ARGUMENT,
                     "%s: metadata '%s' needs a buffer of %zu bytes (with "
                     "its NUL), got %zu", path, key, len + 1, size);
    else
        memcpy(value, m, len + 1);
    st_close(&f);
    return st;
}

/* ========================================================== header output */

typedef struct strbuf {
    char *p;
    size_t len, cap;
    bool oom;
} strbuf;

static void sb_add(strbuf *b, const char *s, size_t n) {
    if (b->oom)
        return;
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap - b->len < n)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void sb_puts(strbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static void sb_printf(strbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *b, const char *fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    sb_add(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* A JSON string literal: quotes, backslashes and control characters
 * escaped, other bytes (UTF-8, checked by the caller) as they are. */
static void sb_json_string(strbuf *b, const char *s) {
    sb_puts(b, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        const char *esc = *c == '"' ? "\\\"" : *c == '\\' ? "\\\\"
                          : *c == '\n' ? "\\n" : *c == '\t' ? "\\t"
                          : *c == '\r' ? "\\r" : *c == '\b' ? "\\b"
                          : *c == '\f' ? "\\f" : NULL;
        if (esc)
            sb_puts(b, esc);
        else if (*c < 0x20)
            sb_printf(b, "\\u%04x", *c);
        else
            sb_add(b, (const char *)c, 1);
    }
    sb_puts(b, "\"");
}

static void sb_tensor(strbuf *b, const pl_st_entry *p, uint64_t begin,
                      uint64_t end) {
    sb_json_string(b, p->name);
    sb_puts(b, ":{\"dtype\":\"F32\",\"shape\":[");
    for (int i = 0; i < p->ndim; i++)
        sb_printf(b, "%s%lld", i ? "," : "", (long long)p->shape[i]);
    sb_printf(b, "],\"data_offsets\":[%llu,", (unsigned long long)begin);
    sb_printf(b, "%llu]}", (unsigned long long)end);
}

static pl_status check_text(const char *path, const char *what,
                            const char *s) {
    size_t n = strlen(s);
    if (utf8_invalid_at((const unsigned char *)s, n) < n)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "%s: %s is not valid UTF-8", path, what);
    return PL_STATUS_OK;
}

/* Metadata must be strings, UTF-8 (JSON text) and keyed uniquely. */
static pl_status check_metadata(const char *path, const char *const *keys,
                                const char *const *values, int n) {
    if (n < 0 || (n > 0 && (!keys || !values)))
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_save_safetensors: %s", n < 0
                       ? "n_meta is negative"
                       : !keys ? "meta_keys is NULL" : "meta_values is NULL");
    for (int i = 0; i < n; i++) {
        char what[96];
        if (!keys[i] || !values[i])
            return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                           "pl_engine_save_safetensors: meta_%s[%d] is NULL",
                           !keys[i] ? "keys" : "values", i);
        snprintf(what, sizeof what, "metadata key %d", i);
        pl_status st = check_text(path, what, keys[i]);
        snprintf(what, sizeof what, "metadata value '%.60s'", keys[i]);
        if (st == PL_STATUS_OK) st = check_text(path, what, values[i]);
        if (st != PL_STATUS_OK) return st;
        for (int k = 0; k < i; k++)
            if (!strcmp(keys[i], keys[k]))
                return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                               "%s: metadata key '%s' given twice", path,
                               keys[i]);
    }
    return PL_STATUS_OK;
}

/* The JSON header, padded with spaces so that 8 + its length is a
 * multiple of 8 (the data then starts 8-byte aligned). */
static pl_status build_header(const pl_st_entry *e, int n, const char *path,
                              const char *const *keys,
                              const char *const *values, int n_meta,
                              strbuf *b) {
    sb_puts(b, "{");
    if (n_meta > 0) {
        sb_puts(b, "\"" ST_METADATA "\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i) sb_puts(b, ",");
            sb_json_string(b, keys[i]);
            sb_puts(b, ":");
            sb_json_string(b, values[i]);
        }
        sb_puts(b, "}");
    }
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        uint64_t bytes = (uint64_t)e[i].numel * sizeof(float);
        if (n_meta > 0 || i) sb_puts(b, ",");
        sb_tensor(b, &e[i], at, at + bytes);
        at += bytes;
    }
    sb_puts(b, "}");
    while ((8 + b->len) % 8 != 0 && !b->oom)
        sb_puts(b, " ");
    if (b->oom)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "%s: out of memory", path);
    return PL_STATUS_OK;
}

/* ================================================================ saving */

static pl_status write_all(int fd, const char *tmp, const void *buf,
                           size_t len) {
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return pl_fail(PL_STATUS_IO_ERROR, "%s: write failed: %s", tmp,
                           strerror(errno));
        p += n;
        len -= (size_t)n;
    }
    return PL_STATUS_OK;
}

/* The tensors' values, little-endian, in list (= header) order. */
typedef struct st_source {
    const pl_st_entry *e;
    int n;
    pl_st_get_fn get;
    void *ctx;
} st_source;

static pl_status write_values(const st_source *src, int fd, const char *path,
                              const char *tmp) {
    int64_t largest = 0;
    for (int i = 0; i < src->n; i++)
        if (src->e[i].numel > largest) largest = src->e[i].numel;
    float *buf = malloc((size_t)largest * sizeof *buf + 1);
    if (!buf)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "%s: out of memory", path);
    pl_status st = PL_STATUS_OK;
    for (int i = 0; st == PL_STATUS_OK && i < src->n; i++) {
        size_t n = (size_t)src->e[i].numel;
        if ((st = src->get(src->ctx, i, buf)) != PL_STATUS_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", pl_last_error());
            st = pl_fail(st, "%s: reading '%s': %s", path, src->e[i].name, msg);
            break;
        }
        swap_to_from_le(buf, n);
        st = write_all(fd, tmp, buf, n * sizeof *buf);
    }
    free(buf);
    return st;
}

/* The whole file into the open temporary. */
static pl_status write_file(const st_source *src, int fd, const char *path,
                            const char *tmp, const strbuf *header) {
    uint8_t len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)((uint64_t)header->len >> (8 * i));
    pl_status st = write_all(fd, tmp, len, sizeof len);
    if (st == PL_STATUS_OK) st = write_all(fd, tmp, header->p, header->len);
    if (st == PL_STATUS_OK) st = write_values(src, fd, path, tmp);
    /* pl_atomic_file_commit syncs before the file gets its name. */
    return st;
}

/* Writes the file through util/atomic_file: `path` is replaced only by a
 * complete, synced file, and a save killed midway leaves neither a torn
 * target nor a temporary behind (an anonymous O_TMPFILE inode, or a named
 * temporary that the next save of the path removes). */
static pl_status save_atomically(const st_source *src, const char *path,
                                 const strbuf *header) {
    pl_atomic_file f;
    int err = pl_atomic_file_open(&f, path);
    if (err)
        return pl_fail(PL_STATUS_IO_ERROR, "%s: cannot create: %s", path,
                       strerror(err));
    pl_status st = write_file(src, f.fd, path, path, header);
    if (st != PL_STATUS_OK) {
        pl_atomic_file_discard(&f);
        return st;
    }
    err = pl_atomic_file_commit(&f);
    if (err)
        return pl_fail(PL_STATUS_IO_ERROR, "%s: cannot put the new file in place: %s",
                       path, strerror(err));
    return PL_STATUS_OK;
}

pl_status pl_st_write(const char *path, const pl_st_entry *entries, int n, pl_st_get_fn get,
                      void *ctx, const char *const *meta_keys,
                      const char *const *meta_values, int n_meta) {
    pl_status st = check_metadata(path, meta_keys, meta_values, n_meta);
    if (st == PL_STATUS_OK) st = check_names(entries, n, path);
    for (int i = 0; st == PL_STATUS_OK && i < n; i++)
        st = check_text(path, "a tensor name", entries[i].name);
    if (st != PL_STATUS_OK)
        return st;
    strbuf header = {0};
    st = build_header(entries, n, path, meta_keys, meta_values, n_meta, &header);
    st_source src = {entries, n, get, ctx};
    if (st == PL_STATUS_OK)
        st = save_atomically(&src, path, &header);
    free(header.p);
    return st;
}

static pl_status get_param(void *ctx, int i, float *out) {
    pl_engine_t *e = ctx;
    const pl_tensor_t *p = pl_graph_param(graph_of(e), i);
    return pl_engine_get_param(e, p, out, (size_t)pl_tensor_numel(p));
}

pl_status pl_engine_save_safetensors(pl_engine_t *e, const char *path,
                                     const char *const *meta_keys,
                                     const char *const *meta_values,
                                     int n_meta) {
    if (!e || !path)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_save_safetensors: %s is NULL",
                       !e ? "engine" : "path");
    pl_st_entry *entries;
    int n;
    pl_status st = pl_st_param_entries(graph_of(e), &entries, &n);
    if (st != PL_STATUS_OK) return st;
    st = pl_st_write(path, entries, n, get_param, e, meta_keys, meta_values, n_meta);
    free(entries);
    return st;
}
