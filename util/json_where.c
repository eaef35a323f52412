/* Offsets in JSON texts decoded by jansson; see json_where.h. */
#include "util/json_where.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

static bool is_blank(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static size_t skip_blanks(const char *s, size_t n, size_t i) {
    while (i < n && is_blank(s[i]))
        i++;
    return i;
}

/* jansson's position as an offset into text[0..n): it is an int, so a
 * text beyond 2 GiB may have it wrapped; it is clamped to the text. */
static size_t error_position(const json_error_t *err, size_t n) {
    size_t pos = err->position > 0 ? (size_t)err->position : 0;
    return pos < n ? pos : n;
}

/* The one value starting at s[at], decoded by jansson: without the EOF
 * check jansson stops after it and sets err.position to the bytes read
 * (documented for reading values one after another), so *end is the byte
 * after it. NULL when it does not decode. */
static json_t *value_at(const char *s, size_t n, size_t at, size_t flags,
                        size_t *end) {
    if (at >= n)
        return NULL;
    json_error_t err;
    json_t *v = json_loadb(s + at, n - at,
                           flags | JSON_DECODE_ANY | JSON_DISABLE_EOF_CHECK,
                           &err);
    if (v)
        *end = at + error_position(&err, n - at);
    return v;
}

/* From a member's name at s[*i] past its ':' to its value. The decoded
 * name goes into name[size] and *name_end after its closing quote, when
 * asked. false when no name and ':' are there. */
static bool skip_name(const char *s, size_t n, size_t flags, size_t *i,
                      char *name, size_t size, size_t *name_end) {
    size_t end = 0;
    json_t *key = value_at(s, n, *i, flags, &end);
    bool ok = json_is_string(key);
    if (ok && name)
        snprintf(name, size, "%s", json_string_value(key));
    json_decref(key);
    if (!ok)
        return false;
    if (name_end)
        *name_end = end;
    size_t j = skip_blanks(s, n, end);
    if (j >= n || s[j] != ':')
        return false;
    *i = skip_blanks(s, n, j + 1);
    return true;
}

/* From the value at s[*i] past the ',' after it to the next member or
 * element. false at the end of the container, or (*bad) when the value
 * does not decode. */
static bool skip_value(const char *s, size_t n, size_t flags, size_t *i,
                       bool *bad) {
    size_t end = 0;
    json_t *v = value_at(s, n, *i, flags, &end);
    *bad = !v;
    if (!v)
        return false;
    json_decref(v);
    size_t j = skip_blanks(s, n, end);
    if (j >= n || s[j] != ',')
        return false;
    *i = skip_blanks(s, n, j + 1);
    return true;
}

pl_json_where pl_json_where_at(const char *s, size_t n, size_t offset) {
    if (offset > n)
        offset = n;
    pl_json_where w = {.offset = offset, .line = 1, .column = 1};
    for (size_t i = 0; i < offset; i++) {
        if (s[i] == '\n') {
            w.line += w.line < INT_MAX;
            w.column = 1;
        } else if (((unsigned char)s[i] & 0xC0) != 0x80) {
            w.column += w.column < INT_MAX; /* UTF-8 lead bytes only */
        }
    }
    return w;
}

/* The opening quote of the string whose closing quote is s[close]: the
 * nearest '"' before it that no backslash escapes (an even run of
 * backslashes before a quote escapes only each other). */
static size_t string_start(const char *s, size_t close) {
    for (size_t i = close; i-- > 0;) {
        if (s[i] != '"')
            continue;
        size_t backslashes = 0;
        while (backslashes < i && s[i - 1 - backslashes] == '\\')
            backslashes++;
        if (backslashes % 2 == 0)
            return i;
    }
    return close;
}

pl_json_where pl_json_error_where(const char *s, size_t n,
                                  const json_error_t *err) {
    size_t pos = error_position(err, n), at = pos;
    enum json_error_code code = json_error_code(err);
    /* jansson quotes the token it stopped after (when it is at most 20
     * bytes: "... near 'tok'"); its own messages never contain " near '"
     * otherwise, so the first one starts the quote. */
    const char *near = strstr(err->text, " near '");
    size_t len = near ? strlen(near + 7) : 0;
    if (code == json_error_invalid_utf8) {
        at = pos; /* jansson stops just before the byte that is not UTF-8 */
    } else if (len > 1 && near[6 + len] == '\'' && len - 1 <= pos &&
               memcmp(s + pos - (len - 1), near + 7, len - 1) == 0) {
        at = pos - (len - 1);
    } else if (code == json_error_numeric_overflow) {
        while (at > 0 && s[at - 1] && strchr("0123456789+-.eE", s[at - 1]))
            at--;
    } else if (code == json_error_duplicate_key && at > 0 &&
               s[at - 1] == '"') {
        at = string_start(s, at - 1);
    }
    return pl_json_where_at(s, n, at);
}

void pl_json_error_path(const char *s, size_t n, size_t flags,
                        const json_error_t *err, pl_json_path *path) {
    size_t pos = error_position(err, n);
    bool duplicate = json_error_code(err) == json_error_duplicate_key;
    size_t i = skip_blanks(s, n, 0);
    path->n = 0;
    /* Down through the containers: at each, the first child that does not
     * decode on its own holds the error (jansson reads in text order, so
     * everything before it was fine). */
    while (path->n < PL_JSON_PATH_MAX && i < n &&
           (s[i] == '{' || s[i] == '[')) {
        pl_json_step *step = &path->step[path->n];
        *step = (pl_json_step){.member = s[i] == '{'};
        char close = step->member ? '}' : ']';
        i = skip_blanks(s, n, i + 1);
        bool found = false, bad = false;
        for (size_t k = 0; i < n && s[i] != close; k++) {
            step->index = k;
            size_t name_end = 0;
            if (step->member && !skip_name(s, n, flags, &i, step->name,
                                           sizeof step->name, &name_end))
                break;
            if (step->member && duplicate && name_end == pos) {
                path->n++; /* jansson stopped right after this name */
                return;
            }
            if (!skip_value(s, n, flags, &i, &bad)) {
                found = bad;
                break;
            }
        }
        if (!found)
            return; /* the error is in this container's punctuation */
        path->n++;
    }
}

size_t pl_json_offset(const char *s, size_t n, size_t flags,
                      const pl_json_step *steps, int count) {
    size_t i = skip_blanks(s, n, 0);
    for (int d = 0; d < count; d++) {
        bool member = steps[d].member, bad;
        if (i >= n || s[i] != (member ? '{' : '['))
            return n;
        i = skip_blanks(s, n, i + 1);
        for (size_t k = 0;; k++) {
            if (i >= n || s[i] == (member ? '}' : ']'))
                return n;
            if (member && !skip_name(s, n, flags, &i, NULL, 0, NULL))
                return n;
            if (k == steps[d].index)
                break;
            if (!skip_value(s, n, flags, &i, &bad))
                return n;
        }
    }
    return i;
}
