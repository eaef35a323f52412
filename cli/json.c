/* Recursive-descent JSON reader; see json.h. One function per production
 * of RFC 8259's grammar (value, object, array, string, number, literal). */
#include "json.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Deeper nesting than this is refused rather than risking the C stack:
 * no trace comes close. */
#define JSON_MAX_DEPTH 512

typedef struct parser {
    const char *p, *end, *start;
    char *err;
    size_t err_size;
    bool failed;
} parser;

static bool fail(parser *ps, const char *fmt, ...) {
    if (ps->failed)
        return false;
    ps->failed = true;
    int line = 1, col = 1;
    for (const char *q = ps->start; q < ps->p && q < ps->end; q++) {
        if (*q == '\n')
            line++, col = 1;
        else
            col++;
    }
    int n = snprintf(ps->err, ps->err_size, "line %d, column %d: ", line, col);
    if (n >= 0 && (size_t)n < ps->err_size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ps->err + n, ps->err_size - n, fmt, ap);
        va_end(ap);
    }
    return false;
}

static void skip_ws(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' ||
                               *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static bool parse_value(parser *ps, json_value *v, int depth);

/* A growable byte buffer for decoded strings. */
typedef struct buf {
    char *s;
    size_t len, cap;
} buf;

static bool buf_put(buf *b, char c) {
    if (b->len + 1 >= b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 32;
        char *s = realloc(b->s, cap);
        if (!s)
            return false;
        b->s = s;
        b->cap = cap;
    }
    b->s[b->len++] = c;
    b->s[b->len] = '\0';
    return true;
}

static bool buf_put_utf8(buf *b, uint32_t cp) {
    if (cp < 0x80)
        return buf_put(b, (char)cp);
    if (cp < 0x800)
        return buf_put(b, (char)(0xC0 | cp >> 6)) &&
               buf_put(b, (char)(0x80 | (cp & 0x3F)));
    if (cp < 0x10000)
        return buf_put(b, (char)(0xE0 | cp >> 12)) &&
               buf_put(b, (char)(0x80 | (cp >> 6 & 0x3F))) &&
               buf_put(b, (char)(0x80 | (cp & 0x3F)));
    return buf_put(b, (char)(0xF0 | cp >> 18)) &&
           buf_put(b, (char)(0x80 | (cp >> 12 & 0x3F))) &&
           buf_put(b, (char)(0x80 | (cp >> 6 & 0x3F))) &&
           buf_put(b, (char)(0x80 | (cp & 0x3F)));
}

static bool hex4(parser *ps, uint32_t *out) {
    if (ps->end - ps->p < 4)
        return fail(ps, "truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = *ps->p++;
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (uint32_t)(c - 'A' + 10);
        else
            return fail(ps, "invalid hex digit '%c' in \\u escape", c);
    }
    *out = v;
    return true;
}

/* \uXXXX, with a UTF-16 surrogate pair joined into one code point. */
static bool unicode_escape(parser *ps, buf *b) {
    uint32_t cp;
    if (!hex4(ps, &cp))
        return false;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        uint32_t lo;
        if (ps->end - ps->p < 2 || ps->p[0] != '\\' || ps->p[1] != 'u')
            return fail(ps, "high surrogate \\u%04X without a low surrogate",
                        cp);
        ps->p += 2;
        if (!hex4(ps, &lo))
            return false;
        if (lo < 0xDC00 || lo > 0xDFFF)
            return fail(ps, "\\u%04X is not a low surrogate", lo);
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        return fail(ps, "unpaired low surrogate \\u%04X", cp);
    }
    return buf_put_utf8(b, cp) || fail(ps, "out of memory");
}

static bool parse_string(parser *ps, char **out, size_t *len) {
    ps->p++; /* the opening quote */
    buf b = {0};
    if (!buf_put(&b, 'x'))
        return fail(ps, "out of memory");
    b.len = 0; /* allocated, so an empty string is "" and not NULL */
    b.s[0] = '\0';
    while (ps->p < ps->end && *ps->p != '"') {
        unsigned char c = (unsigned char)*ps->p;
        bool ok = true;
        if (c < 0x20) {
            ok = fail(ps, "control character 0x%02x in a string", c);
        } else if (c != '\\') {
            ps->p++;
            ok = buf_put(&b, (char)c) || fail(ps, "out of memory");
        } else {
            if (++ps->p >= ps->end) {
                ok = fail(ps, "unterminated string");
            } else {
                char e = *ps->p++;
                const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
                const char *k = e ? strchr(from, e) : NULL;
                if (k)
                    ok = buf_put(&b, to[k - from]) || fail(ps, "out of memory");
                else if (e == 'u')
                    ok = unicode_escape(ps, &b);
                else
                    ok = fail(ps, "invalid escape '\\%c'", e);
            }
        }
        if (!ok) {
            free(b.s);
            return false;
        }
    }
    if (ps->p >= ps->end) {
        free(b.s);
        return fail(ps, "unterminated string");
    }
    ps->p++;
    *out = b.s;
    *len = b.len;
    return true;
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? checked here; strtod
 * then converts exactly that span (from a NUL-terminated copy: the input
 * need not be terminated). */
static bool parse_number(parser *ps, double *out) {
    const char *s = ps->p, *q = s;
#define DIGITS(q)                                                              \
    while (q < ps->end && *q >= '0' && *q <= '9')                              \
    q++
    if (q < ps->end && *q == '-')
        q++;
    if (q >= ps->end || *q < '0' || *q > '9')
        return fail(ps, "invalid number");
    if (*q == '0')
        q++;
    else
        DIGITS(q);
    if (q < ps->end && *q == '.') {
        const char *d = ++q;
        DIGITS(q);
        if (q == d)
            return fail(ps, "invalid number: no digits after '.'");
    }
    if (q < ps->end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < ps->end && (*q == '+' || *q == '-'))
            q++;
        const char *d = q;
        DIGITS(q);
        if (q == d)
            return fail(ps, "invalid number: no digits in the exponent");
    }
#undef DIGITS
    char tmp[128];
    size_t n = (size_t)(q - s);
    char *copy = n < sizeof tmp ? tmp : malloc(n + 1);
    if (!copy)
        return fail(ps, "out of memory");
    memcpy(copy, s, n);
    copy[n] = '\0';
    *out = strtod(copy, NULL);
    if (copy != tmp)
        free(copy);
    ps->p = q;
    return true;
}

static bool literal(parser *ps, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
        return fail(ps, "unexpected '%c'", *ps->p);
    ps->p += n;
    return true;
}

/* Appends one slot to an array/object under construction. */
static json_value *grow(parser *ps, json_value *v, size_t *cap, bool keys) {
    if (v->n == *cap) {
        size_t c = *cap ? 2 * *cap : 8;
        json_value *items = realloc(v->items, c * sizeof *items);
        if (!items)
            return fail(ps, "out of memory"), NULL;
        v->items = items;
        if (keys) {
            char **k = realloc(v->keys, c * sizeof *k);
            if (!k)
                return fail(ps, "out of memory"), NULL;
            v->keys = k;
        }
        *cap = c;
    }
    json_value *slot = &v->items[v->n];
    memset(slot, 0, sizeof *slot);
    return slot;
}

static bool parse_array(parser *ps, json_value *v, int depth) {
    ps->p++;
    v->type = JSON_ARRAY;
    size_t cap = 0;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ']')
        return ps->p++, true;
    for (;;) {
        json_value *item = grow(ps, v, &cap, false);
        if (!item)
            return false;
        bool ok = parse_value(ps, item, depth + 1);
        v->n++; /* also when it failed: json_free releases what it holds */
        if (!ok)
            return false;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == ']')
            return ps->p++, true;
        return fail(ps, ps->p < ps->end ? "expected ',' or ']' in an array"
                                        : "unterminated array");
    }
}

static bool parse_object(parser *ps, json_value *v, int depth) {
    ps->p++;
    v->type = JSON_OBJECT;
    size_t cap = 0;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}')
        return ps->p++, true;
    for (;;) {
        skip_ws(ps);
        if (ps->p >= ps->end || *ps->p != '"')
            return fail(ps, ps->p < ps->end
                                ? "expected a member name (a string)"
                                : "unterminated object");
        json_value *item = grow(ps, v, &cap, true);
        if (!item)
            return false;
        size_t len;
        if (!parse_string(ps, &v->keys[v->n], &len))
            return false;
        v->n++; /* the key is owned from here on */
        skip_ws(ps);
        if (ps->p >= ps->end || *ps->p != ':')
            return fail(ps, "expected ':' after a member name");
        ps->p++;
        if (!parse_value(ps, item, depth + 1))
            return false;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == '}')
            return ps->p++, true;
        return fail(ps, ps->p < ps->end ? "expected ',' or '}' in an object"
                                        : "unterminated object");
    }
}

static bool parse_value(parser *ps, json_value *v, int depth) {
    if (depth > JSON_MAX_DEPTH)
        return fail(ps, "nesting deeper than %d levels", JSON_MAX_DEPTH);
    skip_ws(ps);
    if (ps->p >= ps->end)
        return fail(ps, "unexpected end of input");
    switch (*ps->p) {
    case '{':
        return parse_object(ps, v, depth);
    case '[':
        return parse_array(ps, v, depth);
    case '"':
        v->type = JSON_STRING;
        return parse_string(ps, &v->string, &v->length);
    case 't':
        v->type = JSON_BOOL;
        v->boolean = true;
        return literal(ps, "true");
    case 'f':
        v->type = JSON_BOOL;
        v->boolean = false;
        return literal(ps, "false");
    case 'n':
        v->type = JSON_NULL;
        return literal(ps, "null");
    default:
        v->type = JSON_NUMBER;
        return parse_number(ps, &v->number);
    }
}

static void free_members(json_value *v) {
    for (size_t i = 0; i < v->n; i++) {
        free_members(&v->items[i]);
        if (v->keys)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->string);
}

void json_free(json_value *v) {
    if (!v)
        return;
    free_members(v);
    free(v);
}

json_value *json_parse(const char *text, size_t size, char *err,
                       size_t err_size) {
    char dummy[1];
    parser ps = {.p = text,
                 .end = text + size,
                 .start = text,
                 .err = err_size ? err : dummy,
                 .err_size = err_size ? err_size : 1};
    ps.err[0] = '\0';
    json_value *v = calloc(1, sizeof *v);
    if (!v) {
        fail(&ps, "out of memory");
        return NULL;
    }
    bool ok = parse_value(&ps, v, 0);
    if (ok) {
        skip_ws(&ps);
        if (ps.p < ps.end)
            ok = fail(&ps, "unexpected text after the value");
    }
    if (!ok) {
        json_free(v);
        return NULL;
    }
    return v;
}

const json_value *json_get(const json_value *v, const char *key) {
    if (!v || v->type != JSON_OBJECT)
        return NULL;
    for (size_t i = v->n; i-- > 0;)
        if (strcmp(v->keys[i], key) == 0)
            return &v->items[i];
    return NULL;
}

double json_get_number(const json_value *v, const char *key, double fallback) {
    const json_value *m = json_get(v, key);
    return m && m->type == JSON_NUMBER ? m->number : fallback;
}

const char *json_get_string(const json_value *v, const char *key,
                            const char *fallback) {
    const json_value *m = json_get(v, key);
    return m && m->type == JSON_STRING ? m->string : fallback;
}
