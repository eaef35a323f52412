/* Where things are in a JSON text that jansson decodes.
 *
 * jansson turns a text into a tree but keeps no positions: its error says
 * where it stopped reading (json_error_t.position, after the offending
 * token), and a decoded value does not know where it was written. The
 * readers of our file formats name the byte offset in every complaint
 * about a malformed file, so these helpers recover offsets from the text.
 * Each step of the way is decoded by jansson itself (one value at a time,
 * JSON_DISABLE_EOF_CHECK reporting how far it read); only the blanks and
 * the punctuation between members and elements are skipped here. They run
 * only once something is wrong, each in time linear in the text per level
 * of nesting they descend.
 *
 *   json_error_t err;
 *   json_t *root = json_loadb(text, size, flags, &err);
 *   if (!root) {
 *       pl_json_where w = pl_json_error_where(text, size, &err);
 *       pl_json_path p;
 *       pl_json_error_path(text, size, flags, &err, &p);
 *       ... "byte %zu (line %d, column %d), in %s: %s", w.offset, w.line,
 *           w.column, <p formatted>, err.text
 *   }
 */
#ifndef PL_UTIL_JSON_WHERE_H
#define PL_UTIL_JSON_WHERE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* A place in the text: its byte offset, and its line and column from 1
 * (the column counts characters, as editors do, not bytes). */
typedef struct pl_json_where {
    size_t offset;
    int line, column;
} pl_json_where;

/* The place of byte `offset` of text[0..size). */
pl_json_where pl_json_where_at(const char *text, size_t size, size_t offset);

/* Where the error that json_loadb(text, size, ...) reported in `err`
 * lies: the first byte of the token it names ("near 'x'"), of an
 * overflowing number or of a duplicate member name; the byte that is not
 * UTF-8; otherwise where jansson stopped reading. */
pl_json_where pl_json_error_where(const char *text, size_t size,
                                  const json_error_t *err);

/* Deeper than this the paths below do not go: our formats nest 4 levels,
 * and each level costs one more decoding pass over the text. */
#define PL_JSON_PATH_MAX 8

/* One step down into an object or an array. */
typedef struct pl_json_step {
    bool member;   /* a member of an object, else an element of an array */
    size_t index;  /* its place among the members or elements, from 0 */
    char name[96]; /* a member's name, cut to fit (for messages) */
} pl_json_step;

typedef struct pl_json_path {
    pl_json_step step[PL_JSON_PATH_MAX];
    int n; /* 0: the top-level value itself */
} pl_json_path;

/* The innermost member or element whose text holds the error `err` that
 * json_loadb(text, size, flags, err) reported: the one that does not
 * decode, or whose name is a duplicate. The path stops at the container
 * when the error lies in its own punctuation. */
void pl_json_error_path(const char *text, size_t size, size_t flags,
                        const json_error_t *err, pl_json_path *path);

/* The byte offset where the value at steps[0..n) starts in text[0..size),
 * which must decode (with flags): step k is the steps[k].index-th member
 * or element of the value reached so far. jansson keeps an object's
 * members in the order they were written, so a member's index is its
 * place in json_object_foreach — unless names repeat, which
 * JSON_REJECT_DUPLICATES rules out. `size` when the path leads nowhere. */
size_t pl_json_offset(const char *text, size_t size, size_t flags,
                      const pl_json_step *steps, int n);

#endif
