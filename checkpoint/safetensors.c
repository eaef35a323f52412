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
 * Loading parses the header with a small, strict parser for exactly this
 * structure (no JSON library: the format needs strings, non-negative
 * integers, arrays of them and two levels of objects). The whole file is
 * validated and every needed tensor read into memory before the first
 * parameter is set, so a bad file leaves the engine as it was. The layout
 * checks follow the reference implementation: the tensors' byte ranges
 * must tile the data section exactly, which catches truncated files and
 * trailing garbage alike. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine_internal.h"
#include "graph/error.h"
#include "util/atomic_file.h"

/* The reference implementation's limit: refusing larger headers keeps a
 * corrupt length field from allocating gigabytes. */
#define ST_HEADER_MAX ((uint64_t)100000000)
#define ST_METADATA "__metadata__"

/* ==================================================== header, in memory */

typedef struct st_tensor {
    char *name, *dtype;
    int ndim;                   /* full rank as in the file */
    int64_t shape[PL_MAX_DIMS]; /* the first PL_MAX_DIMS dims */
    uint64_t numel;             /* product of all dims */
    bool numel_overflow;        /* the product does not fit in 64 bits */
    uint64_t begin, end;        /* data_offsets */
} st_tensor;

typedef struct st_meta {
    char *key, *value;
} st_meta;

typedef struct st_header {
    st_tensor *tensors; /* sorted by name once parsed */
    size_t n_tensors, cap_tensors;
    st_meta *meta;
    size_t n_meta, cap_meta;
    bool has_metadata;
} st_header;

static void header_free(st_header *h) {
    for (size_t i = 0; i < h->n_tensors; i++) {
        free(h->tensors[i].name);
        free(h->tensors[i].dtype);
    }
    for (size_t i = 0; i < h->n_meta; i++) {
        free(h->meta[i].key);
        free(h->meta[i].value);
    }
    free(h->tensors);
    free(h->meta);
    memset(h, 0, sizeof *h);
}

/* Grows *array (of *cap elements of `size` bytes) to hold n + 1. */
static bool grow(void **array, size_t *cap, size_t n, size_t size) {
    if (n < *cap)
        return true;
    size_t c = *cap ? 2 * *cap : 16;
    void *p = realloc(*array, c * size);
    if (!p)
        return false;
    *array = p;
    *cap = c;
    return true;
}

/* ============================================================ JSON parser */

typedef struct json {
    const char *s;
    size_t n, pos;
    const char *file; /* named in every message */
} json;

/* A syntax error at the cursor: "<file>: malformed header at byte <pos>:
 * <what>". `ctx` says where in the structure ("tensor 'x': field 'shape'"). */
static pl_status jfail(const json *j, const char *ctx, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static pl_status jfail(const json *j, const char *ctx, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return pl_fail(PL_STATUS_FORMAT_ERROR,
                   "%s: malformed header at byte %zu: %s%s%s", j->file,
                   j->pos, ctx ? ctx : "", ctx ? ": " : "", what);
}

static void skip_ws(json *j) {
    while (j->pos < j->n && (j->s[j->pos] == ' ' || j->s[j->pos] == '\t' ||
                             j->s[j->pos] == '\n' || j->s[j->pos] == '\r'))
        j->pos++;
}

/* The next non-blank character, or 0 at the end. */
static char peek(json *j) {
    skip_ws(j);
    return j->pos < j->n ? j->s[j->pos] : '\0';
}

static pl_status expect(json *j, char c, const char *ctx) {
    if (peek(j) != c) {
        if (j->pos >= j->n)
            return jfail(j, ctx, "expected '%c', found the end", c);
        return jfail(j, ctx, "expected '%c', found '%c'", c, j->s[j->pos]);
    }
    j->pos++;
    return PL_STATUS_OK;
}

/* After an element: ',' (true: another follows) or `close` (false). */
static pl_status next_or_close(json *j, char close, const char *ctx,
                               bool *more) {
    char c = peek(j);
    if (c == ',' || c == close) {
        j->pos++;
        *more = c == ',';
        return PL_STATUS_OK;
    }
    return jfail(j, ctx, "expected ',' or '%c'", close);
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The 4 hex digits after "\u" at the cursor. */
static pl_status read_hex4(json *j, const char *ctx, unsigned *out) {
    *out = 0;
    for (int i = 0; i < 4; i++, j->pos++) {
        int d = j->pos < j->n ? hex_digit(j->s[j->pos]) : -1;
        if (d < 0)
            return jfail(j, ctx, "\\u needs 4 hex digits");
        *out = *out << 4 | (unsigned)d;
    }
    return PL_STATUS_OK;
}

static size_t put_utf8(char *dst, unsigned cp) {
    if (cp < 0x80) {
        dst[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        dst[0] = (char)(0xC0 | cp >> 6);
        dst[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        dst[0] = (char)(0xE0 | cp >> 12);
        dst[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        dst[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    dst[0] = (char)(0xF0 | cp >> 18);
    dst[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    dst[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    dst[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* \uXXXX (the "\u" consumed), with a surrogate pair as one code point.
 * U+0000 is refused: names and values are C strings. */
static pl_status read_unicode_escape(json *j, const char *ctx, unsigned *cp) {
    pl_status st = read_hex4(j, ctx, cp);
    if (st != PL_STATUS_OK)
        return st;
    if (*cp >= 0xDC00 && *cp <= 0xDFFF)
        return jfail(j, ctx, "unpaired low surrogate \\u%04X", *cp);
    if (*cp >= 0xD800 && *cp <= 0xDBFF) {
        unsigned lo;
        if (j->pos + 2 > j->n || j->s[j->pos] != '\\' ||
            j->s[j->pos + 1] != 'u')
            return jfail(j, ctx, "unpaired high surrogate \\u%04X", *cp);
        j->pos += 2;
        if ((st = read_hex4(j, ctx, &lo)) != PL_STATUS_OK)
            return st;
        if (lo < 0xDC00 || lo > 0xDFFF)
            return jfail(j, ctx, "unpaired high surrogate \\u%04X", *cp);
        *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    if (*cp == 0)
        return jfail(j, ctx, "\\u0000 in a string");
    return PL_STATUS_OK;
}

/* One escape (the backslash consumed) decoded into dst; *len its bytes. */
static pl_status read_escape(json *j, const char *ctx, char *dst, size_t *len) {
    if (j->pos >= j->n)
        return jfail(j, ctx, "unterminated string");
    char c = j->s[j->pos++];
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *k = c ? strchr(from, c) : NULL;
    if (k) {
        *dst = to[k - from];
        *len = 1;
        return PL_STATUS_OK;
    }
    if (c != 'u') {
        j->pos--;
        return jfail(j, ctx, "invalid escape '\\%c'", c);
    }
    unsigned cp;
    pl_status st = read_unicode_escape(j, ctx, &cp);
    if (st == PL_STATUS_OK)
        *len = put_utf8(dst, cp);
    return st;
}

/* The raw length of the string whose body starts at the cursor (up to the
 * closing quote, or to the end when unterminated), for sizing its buffer. */
static size_t raw_string_len(const json *j) {
    size_t i = j->pos;
    while (i < j->n && j->s[i] != '"')
        i += j->s[i] == '\\' ? 2 : 1;
    return (i < j->n ? i : j->n) - j->pos;
}

/* A string into a new NUL-terminated buffer (*out, caller frees). Decoded
 * text is never longer than its JSON form, which sizes the buffer. */
static pl_status parse_string(json *j, const char *ctx, char **out) {
    *out = NULL;
    pl_status st = expect(j, '"', ctx);
    if (st != PL_STATUS_OK)
        return st;
    char *buf = malloc(raw_string_len(j) + 1);
    if (!buf)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "%s: out of memory", j->file);
    size_t len = 0;
    for (;;) {
        if (j->pos >= j->n) {
            st = jfail(j, ctx, "unterminated string");
            break;
        }
        unsigned char c = (unsigned char)j->s[j->pos];
        if (c == '"') {
            j->pos++;
            buf[len] = '\0';
            *out = buf;
            return PL_STATUS_OK;
        }
        if (c < 0x20) {
            st = jfail(j, ctx, "control character 0x%02x in a string", c);
            break;
        }
        j->pos++;
        if (c != '\\') {
            buf[len++] = (char)c;
            continue;
        }
        size_t n = 0;
        if ((st = read_escape(j, ctx, buf + len, &n)) != PL_STATUS_OK)
            break;
        len += n;
    }
    free(buf);
    return st;
}

/* A non-negative JSON integer (no sign, fraction, exponent or leading
 * zero) that fits in 64 bits. */
static pl_status parse_uint(json *j, const char *ctx, uint64_t *out) {
    char c = peek(j);
    if (c < '0' || c > '9')
        return jfail(j, ctx, "expected a non-negative integer");
    size_t start = j->pos;
    uint64_t v = 0;
    while (j->pos < j->n && j->s[j->pos] >= '0' && j->s[j->pos] <= '9') {
        unsigned d = (unsigned)(j->s[j->pos] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return jfail(j, ctx, "integer too large");
        v = v * 10 + d;
        j->pos++;
    }
    if (j->s[start] == '0' && j->pos - start > 1) {
        j->pos = start;
        return jfail(j, ctx, "integer with a leading zero");
    }
    if (j->pos < j->n && strchr(".eE", j->s[j->pos]))
        return jfail(j, ctx, "expected an integer, found a fraction or exponent");
    *out = v;
    return PL_STATUS_OK;
}

/* "[d0, d1, ...]" into t's shape, rank and element count. */
static pl_status parse_shape(json *j, const char *ctx, st_tensor *t) {
    pl_status st = expect(j, '[', ctx);
    bool more = true, zero = false;
    t->ndim = 0;
    t->numel = 1;
    if (st == PL_STATUS_OK && peek(j) == ']') {
        j->pos++;
        return PL_STATUS_OK; /* a scalar */
    }
    while (st == PL_STATUS_OK && more) {
        uint64_t d;
        if ((st = parse_uint(j, ctx, &d)) != PL_STATUS_OK)
            break;
        if (d > INT64_MAX)
            return jfail(j, ctx, "dimension too large");
        if (t->ndim < PL_MAX_DIMS)
            t->shape[t->ndim] = (int64_t)d;
        if (t->ndim == INT32_MAX)
            return jfail(j, ctx, "too many dimensions");
        t->ndim++;
        zero |= d == 0;
        if (d && t->numel > UINT64_MAX / d)
            t->numel_overflow = true;
        else
            t->numel *= d;
        st = next_or_close(j, ']', ctx, &more);
    }
    if (zero) { /* an empty tensor, however large its other dims */
        t->numel = 0;
        t->numel_overflow = false;
    }
    return st;
}

/* "[begin, end]". */
static pl_status parse_offsets(json *j, const char *ctx, st_tensor *t) {
    pl_status st = expect(j, '[', ctx);
    if (st == PL_STATUS_OK) st = parse_uint(j, ctx, &t->begin);
    if (st == PL_STATUS_OK) st = expect(j, ',', ctx);
    if (st == PL_STATUS_OK) st = parse_uint(j, ctx, &t->end);
    if (st == PL_STATUS_OK && peek(j) != ']')
        return jfail(j, ctx, "data_offsets must be [begin, end]");
    if (st == PL_STATUS_OK) j->pos++;
    return st;
}

enum { F_DTYPE = 1, F_SHAPE = 2, F_OFFSETS = 4 };

/* One field of a tensor entry; *seen collects the F_ bits. */
static pl_status parse_tensor_field(json *j, const char *tctx, st_tensor *t,
                                    int *seen) {
    char *key;
    pl_status st = parse_string(j, tctx, &key);
    if (st != PL_STATUS_OK)
        return st;
    char ctx[200];
    snprintf(ctx, sizeof ctx, "%s: field '%.40s'", tctx, key);
    int bit = !strcmp(key, "dtype")          ? F_DTYPE
              : !strcmp(key, "shape")        ? F_SHAPE
              : !strcmp(key, "data_offsets") ? F_OFFSETS
                                             : 0;
    free(key);
    if (!bit)
        return jfail(j, ctx, "unknown field (expected dtype, shape, "
                             "data_offsets)");
    if (*seen & bit)
        return jfail(j, ctx, "given twice");
    *seen |= bit;
    if ((st = expect(j, ':', ctx)) != PL_STATUS_OK)
        return st;
    if (bit == F_DTYPE)
        return parse_string(j, ctx, &t->dtype);
    return bit == F_SHAPE ? parse_shape(j, ctx, t) : parse_offsets(j, ctx, t);
}

/* {"dtype": ..., "shape": [...], "data_offsets": [b, e]} for tensor t. */
static pl_status parse_tensor(json *j, st_tensor *t) {
    char ctx[120];
    snprintf(ctx, sizeof ctx, "tensor '%.80s'", t->name);
    int seen = 0;
    bool more = true;
    pl_status st = expect(j, '{', ctx);
    if (st == PL_STATUS_OK && peek(j) == '}') {
        j->pos++;
        more = false;
    }
    while (st == PL_STATUS_OK && more) {
        st = parse_tensor_field(j, ctx, t, &seen);
        if (st == PL_STATUS_OK)
            st = next_or_close(j, '}', ctx, &more);
    }
    if (st == PL_STATUS_OK && seen != (F_DTYPE | F_SHAPE | F_OFFSETS))
        st = jfail(j, ctx, "missing field '%s'",
                   !(seen & F_DTYPE) ? "dtype"
                   : !(seen & F_SHAPE) ? "shape" : "data_offsets");
    return st;
}

/* {"key": "value", ...}; duplicate keys are refused (which one would win
 * is up to each reader). */
static pl_status parse_metadata(json *j, st_header *h) {
    const char *ctx = "__metadata__";
    bool more = true;
    pl_status st = expect(j, '{', ctx);
    if (st == PL_STATUS_OK && peek(j) == '}') {
        j->pos++;
        more = false;
    }
    while (st == PL_STATUS_OK && more) {
        if (!grow((void **)&h->meta, &h->cap_meta, h->n_meta, sizeof *h->meta))
            return pl_fail(PL_STATUS_OUT_OF_MEMORY, "%s: out of memory",
                           j->file);
        st_meta *m = &h->meta[h->n_meta];
        m->value = NULL;
        if ((st = parse_string(j, ctx, &m->key)) != PL_STATUS_OK)
            break;
        h->n_meta++; /* owned by h from here on */
        for (size_t i = 0; i + 1 < h->n_meta; i++)
            if (!strcmp(h->meta[i].key, m->key))
                return jfail(j, ctx, "key '%.80s' given twice", m->key);
        st = expect(j, ':', ctx);
        if (st == PL_STATUS_OK && peek(j) != '"')
            st = jfail(j, ctx, "the value of '%.80s' must be a string",
                       m->key);
        if (st == PL_STATUS_OK) st = parse_string(j, ctx, &m->value);
        if (st == PL_STATUS_OK) st = next_or_close(j, '}', ctx, &more);
    }
    return st;
}

/* One "name": {...} member of the top-level object. */
static pl_status parse_member(json *j, st_header *h) {
    char *name;
    pl_status st = parse_string(j, "tensor name", &name);
    if (st != PL_STATUS_OK)
        return st;
    if (!strcmp(name, ST_METADATA)) {
        free(name);
        if (h->has_metadata)
            return jfail(j, NULL, "__metadata__ given twice");
        h->has_metadata = true;
        st = expect(j, ':', ST_METADATA);
        return st == PL_STATUS_OK ? parse_metadata(j, h) : st;
    }
    if (!grow((void **)&h->tensors, &h->cap_tensors, h->n_tensors,
              sizeof *h->tensors)) {
        free(name);
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "%s: out of memory", j->file);
    }
    st_tensor *t = &h->tensors[h->n_tensors++];
    memset(t, 0, sizeof *t);
    t->name = name;
    char ctx[120];
    snprintf(ctx, sizeof ctx, "tensor '%.80s'", name);
    st = expect(j, ':', ctx);
    return st == PL_STATUS_OK ? parse_tensor(j, t) : st;
}

/* The whole header: one object, then only padding blanks. */
static pl_status parse_header(json *j, st_header *h) {
    bool more = true;
    pl_status st = expect(j, '{', "top level");
    if (st == PL_STATUS_OK && peek(j) == '}') {
        j->pos++;
        more = false;
    }
    while (st == PL_STATUS_OK && more) {
        st = parse_member(j, h);
        if (st == PL_STATUS_OK)
            st = next_or_close(j, '}', "top level", &more);
    }
    if (st == PL_STATUS_OK && peek(j) != '\0')
        st = jfail(j, NULL, "data after the header object");
    return st;
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

/* Sorts the tensors by name for lookups, refusing duplicates. */
static pl_status index_names(const char *file, st_header *h) {
    if (h->n_tensors > 1)
        qsort(h->tensors, h->n_tensors, sizeof *h->tensors, by_name);
    for (size_t i = 1; i < h->n_tensors; i++)
        if (!strcmp(h->tensors[i - 1].name, h->tensors[i].name))
            return pl_fail(PL_STATUS_FORMAT_ERROR,
                           "%s: tensor '%s' is given twice", file,
                           h->tensors[i].name);
    return PL_STATUS_OK;
}

static const st_tensor *find_tensor(const st_header *h, const char *name) {
    st_tensor key = {.name = (char *)name};
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
    json j = {.s = text, .n = n, .pos = 0, .file = path};
    pl_status st = parse_header(&j, &f->h);
    if (st == PL_STATUS_OK) st = index_names(path, &f->h);
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
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0)
        return pl_fail(PL_STATUS_IO_ERROR, "%s: cannot open: %s", path,
                       strerror(errno));
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

/* The file's entry for graph parameter p, checked against it. */
static pl_status match_param(const char *path, const st_header *h,
                             const pl_tensor_t *p, const st_tensor **out) {
    const char *name = pl_tensor_name(p);
    const st_tensor *t = find_tensor(h, name);
    if (!t)
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: tensor '%s' is missing (the model needs it)", path,
                       name);
    if (strcmp(t->dtype, "F32") != 0)
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: tensor '%s': dtype %s but the model needs F32",
                       path, name, t->dtype);
    int64_t shape[PL_MAX_DIMS];
    int ndim = pl_tensor_shape(p, shape);
    bool same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = t->shape[i] == shape[i];
    if (!same) {
        char fs[96], ms[96];
        int shown = t->ndim < PL_MAX_DIMS ? t->ndim : PL_MAX_DIMS;
        dims_str(fs, sizeof fs, shown, t->shape, t->ndim > shown);
        dims_str(ms, sizeof ms, ndim, shape, false);
        return pl_fail(PL_STATUS_SHAPE_MISMATCH,
                       "%s: tensor '%s': shape %s but the model has %s", path,
                       name, fs, ms);
    }
    *out = t;
    return PL_STATUS_OK;
}

/* Graph parameter names must be unique to be saved or loaded by name. */
static pl_status check_param_names(const pl_graph_t *g, const char *path) {
    int n = pl_graph_num_params(g);
    for (int i = 0; i < n; i++) {
        const char *a = pl_tensor_name(pl_graph_param(g, i));
        if (!strcmp(a, ST_METADATA))
            return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                           "%s: a parameter is named '%s', which safetensors "
                           "reserves", path, ST_METADATA);
        for (int k = 0; k < i; k++)
            if (!strcmp(a, pl_tensor_name(pl_graph_param(g, k))))
                return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                               "%s: two parameters are named '%s'", path, a);
    }
    return PL_STATUS_OK;
}

/* Matches every parameter and reads all their values into *values (in
 * graph order, caller frees); nothing in the engine changes. */
static pl_status read_all_params(pl_engine_t *e, const char *path, st_file *f,
                                 float **values) {
    const pl_graph_t *g = e->g;
    int n = pl_graph_num_params(g);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        const st_tensor *t = NULL;
        pl_status st = match_param(path, &f->h, pl_graph_param(g, i), &t);
        if (st != PL_STATUS_OK)
            return st;
        total += (size_t)t->numel;
    }
    float *buf = malloc(total * sizeof *buf + 1);
    if (!buf)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY,
                       "%s: out of memory for %zu parameters", path, total);
    uint64_t data_start = 8 + f->header_len;
    float *dst = buf;
    for (int i = 0; i < n; i++) {
        const st_tensor *t = find_tensor(&f->h, pl_tensor_name(pl_graph_param(g, i)));
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

pl_status pl_engine_load_safetensors(pl_engine_t *e, const char *path) {
    if (!e || !path)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_load_safetensors: %s is NULL",
                       !e ? "engine" : "path");
    pl_status st = check_param_names(e->g, path);
    st_file f;
    if (st != PL_STATUS_OK || (st = st_open(&f, path)) != PL_STATUS_OK)
        return st;
    float *values = NULL;
    st = read_all_params(e, path, &f, &values);
    st_close(&f);
    /* Only now, with the whole file validated and read, touch the engine. */
    const float *src = values;
    for (int i = 0; st == PL_STATUS_OK && i < pl_graph_num_params(e->g); i++) {
        const pl_tensor_t *p = pl_graph_param(e->g, i);
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
    const st_meta *m = NULL;
    for (size_t i = 0; i < f.h.n_meta && !m; i++)
        if (!strcmp(f.h.meta[i].key, key))
            m = &f.h.meta[i];
    size_t len = m ? strlen(m->value) : 0;
    if (!m)
        st = pl_fail(PL_STATUS_INVALID_ARGUMENT,
                     "%s: no metadata key '%s'%s", path, key,
                     f.h.has_metadata ? "" : " (the file has no __metadata__)");
    else if (len >= size)
        st = pl_fail(PL_STATUS_INVALID_ARGUMENT,
                     "%s: metadata '%s' needs a buffer of %zu bytes (with "
                     "its NUL), got %zu", path, key, len + 1, size);
    else
        memcpy(value, m->value, len + 1);
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

static void sb_tensor(strbuf *b, const pl_tensor_t *p, uint64_t begin,
                      uint64_t end) {
    int64_t shape[PL_MAX_DIMS];
    int ndim = pl_tensor_shape(p, shape);
    sb_json_string(b, pl_tensor_name(p));
    sb_puts(b, ":{\"dtype\":\"F32\",\"shape\":[");
    for (int i = 0; i < ndim; i++)
        sb_printf(b, "%s%lld", i ? "," : "", (long long)shape[i]);
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
static pl_status build_header(const pl_graph_t *g, const char *path,
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
    for (int i = 0; i < pl_graph_num_params(g); i++) {
        const pl_tensor_t *p = pl_graph_param(g, i);
        uint64_t bytes = (uint64_t)pl_tensor_numel(p) * sizeof(float);
        if (n_meta > 0 || i) sb_puts(b, ",");
        sb_tensor(b, p, at, at + bytes);
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

/* Each parameter's values, little-endian, in graph (= header) order. */
static pl_status write_params(pl_engine_t *e, int fd, const char *path,
                              const char *tmp) {
    const pl_graph_t *g = e->g;
    int64_t largest = 0;
    for (int i = 0; i < pl_graph_num_params(g); i++)
        if (pl_tensor_numel(pl_graph_param(g, i)) > largest)
            largest = pl_tensor_numel(pl_graph_param(g, i));
    float *buf = malloc((size_t)largest * sizeof *buf + 1);
    if (!buf)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "%s: out of memory", path);
    pl_status st = PL_STATUS_OK;
    for (int i = 0; st == PL_STATUS_OK && i < pl_graph_num_params(g); i++) {
        const pl_tensor_t *p = pl_graph_param(g, i);
        size_t n = (size_t)pl_tensor_numel(p);
        if ((st = pl_engine_get_param(e, p, buf, n)) != PL_STATUS_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", pl_last_error());
            st = pl_fail(st, "%s: reading '%s': %s", path, pl_tensor_name(p),
                         msg);
            break;
        }
        swap_to_from_le(buf, n);
        st = write_all(fd, tmp, buf, n * sizeof *buf);
    }
    free(buf);
    return st;
}

/* The whole file into the open temporary. */
static pl_status write_file(pl_engine_t *e, int fd, const char *path,
                            const char *tmp, const strbuf *header) {
    uint8_t len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)((uint64_t)header->len >> (8 * i));
    pl_status st = write_all(fd, tmp, len, sizeof len);
    if (st == PL_STATUS_OK) st = write_all(fd, tmp, header->p, header->len);
    if (st == PL_STATUS_OK) st = write_params(e, fd, path, tmp);
    /* pl_atomic_file_commit syncs before the file gets its name. */
    return st;
}

/* Writes the file through util/atomic_file: `path` is replaced only by a
 * complete, synced file, and a save killed midway leaves neither a torn
 * target nor a temporary behind (an anonymous O_TMPFILE inode, or a named
 * temporary that the next save of the path removes). */
static pl_status save_atomically(pl_engine_t *e, const char *path,
                                 const strbuf *header) {
    pl_atomic_file f;
    int err = pl_atomic_file_open(&f, path);
    if (err)
        return pl_fail(PL_STATUS_IO_ERROR, "%s: cannot create: %s", path,
                       strerror(err));
    pl_status st = write_file(e, f.fd, path, path, header);
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

pl_status pl_engine_save_safetensors(pl_engine_t *e, const char *path,
                                     const char *const *meta_keys,
                                     const char *const *meta_values,
                                     int n_meta) {
    if (!e || !path)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_save_safetensors: %s is NULL",
                       !e ? "engine" : "path");
    pl_status st = check_metadata(path, meta_keys, meta_values, n_meta);
    if (st == PL_STATUS_OK) st = check_param_names(e->g, path);
    for (int i = 0; st == PL_STATUS_OK && i < pl_graph_num_params(e->g); i++)
        st = check_text(path, "a parameter name",
                        pl_tensor_name(pl_graph_param(e->g, i)));
    if (st != PL_STATUS_OK)
        return st;
    strbuf header = {0};
    st = build_header(e->g, path, meta_keys, meta_values, n_meta, &header);
    if (st == PL_STATUS_OK)
        st = save_atomically(e, path, &header);
    free(header.p);
    return st;
}
