/* A small JSON (RFC 8259) reader: the whole grammar — any nesting of
 * objects and arrays, numbers with fractions and exponents, strings with
 * every escape including \uXXXX surrogate pairs (decoded to UTF-8) — into
 * a tree. Used by `pleiades trace-summary` to read traces, which may come
 * from other tools than Pleiades' writer, so nothing about the layout of
 * our own files is assumed. */
#ifndef PL_CLI_JSON_H
#define PL_CLI_JSON_H

#include <stdbool.h>
#include <stddef.h>

typedef enum json_type {
    JSON_NULL,
    JSON_BOOL,
    JSON_NUMBER,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT,
} json_type;

typedef struct json_value json_value;
struct json_value {
    json_type type;
    bool boolean;
    double number;
    char *string;      /* JSON_STRING: UTF-8, NUL-terminated */
    size_t length;     /* its length in bytes (it may contain \u0000) */
    json_value *items; /* JSON_ARRAY elements / JSON_OBJECT member values */
    char **keys;       /* JSON_OBJECT member names, parallel to items */
    size_t n;          /* number of elements / members */
};

/* Parses text[0..size) — one value surrounded by optional whitespace.
 * Returns NULL on malformed input with "line L, column C: what" in
 * err[err_size], or on running out of memory. Free with json_free. */
json_value *json_parse(const char *text, size_t size, char *err,
                       size_t err_size);
void json_free(json_value *v);

/* The member `key` of an object (the last one if repeated), or NULL when v
 * is not an object or has no such member. */
const json_value *json_get(const json_value *v, const char *key);
/* Typed look-ups: the member's value if it exists and has the type,
 * otherwise `fallback`. */
double json_get_number(const json_value *v, const char *key, double fallback);
const char *json_get_string(const json_value *v, const char *key,
                            const char *fallback);

#endif
