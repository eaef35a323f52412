/* Byte-level text datasets (V = 256) and their random-window batches.
 *
 * Input: one file, or every regular file directly inside a directory.
 * Directory entries are read in strcmp() order of their names (bytewise,
 * independent of the locale), so the concatenation — and with it both
 * splits and every batch — is the same on every machine. Skipped: hidden
 * names (".", "..", dotfiles), "*.dat" (the random-access indexes that
 * Debian's fortune files come with, binary and not text), symlinks (fortune
 * ships "x.u8 -> x", which would read the same text twice) and anything
 * that is not a regular file; subdirectories are not entered.
 *
 * Split: of the n concatenated bytes the first floor(9n / 10) are the
 * training split and the rest the validation split. Only the requested
 * split is kept in memory.
 *
 * Batches: window b of batch (seed, index) starts at
 *   off_b = pl_random_below(state, len - T),  b = 0, 1, ..., B-1 in order,
 * a uniform draw from [0, len - T - 1] (rejection sampling, no modulo
 * bias) from one splitmix64 stream whose starting state is
 *   state = pl_mix64(seed ^ pl_mix64((uint64_t)index + PL_GOLDEN_GAMMA)),
 * pl_mix64 being the splitmix64 finaliser (pl_stream_state in
 * util/random.h, the same derivation as the loader's per-epoch stream).
 * Only 64-bit integer arithmetic is involved, so a batch depends on
 * (seed, index, B, T) and the text alone, and index i + 1 does not replay
 * index i's draws shifted. Token files (data/tokens.c) are sampled by the
 * same code and formula, offsets and lengths counted in tokens. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/dataset.h"
#include "util/error.h"
#include "util/random.h"
#include "util/regular_file.h"

#define TEXT_VOCAB 256
/* A window needs T + 1 bytes (tokens and the next-byte targets), T >= 1. */
#define MIN_WINDOW 2

static const char *const who = "pl_dataset_text";

/* ------------------------------------------------------- growable bytes */

typedef struct byte_buf {
    uint8_t *data;
    size_t len, cap;
} byte_buf;

/* Makes room for `extra` more bytes (capacity doubles, so appending is
 * amortised linear). */
static pl_status buf_reserve(byte_buf *b, size_t extra, const char *path) {
    if (extra <= b->cap - b->len)
        return PL_STATUS_OK;
    if (extra > SIZE_MAX / 2 - b->len)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "%s: %s: text too large", who,
                       path);
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->len < extra)
        cap *= 2;
    uint8_t *grown = realloc(b->data, cap);
    if (!grown)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY,
                       "%s: %s: out of memory for %zu bytes of text", who, path,
                       cap);
    b->data = grown;
    b->cap = cap;
    return PL_STATUS_OK;
}

/* ------------------------------------------------------------- reading */

/* Appends the whole content of the open descriptor `fd` (named `path` in
 * errors). Reads to end of file rather than trusting st_size, which a file
 * being appended to, or a pseudo-file, may not match. */
static pl_status append_fd(byte_buf *b, int fd, const char *path) {
    for (;;) {
        pl_status st = buf_reserve(b, 65536, path);
        if (st != PL_STATUS_OK)
            return st;
        ssize_t n = read(fd, b->data + b->len, b->cap - b->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return pl_fail(PL_STATUS_IO_ERROR, "%s: %s: read failed: %s", who,
                           path, strerror(errno));
        if (n == 0)
            return PL_STATUS_OK;
        b->len += (size_t)n;
    }
}

static pl_status append_file(byte_buf *b, const char *path, int flags) {
    /* Only regular files are text: a FIFO (or a device) would block the
     * open until a writer appears, i.e. forever. */
    const char *why;
    int fd = pl_open_regular(path, flags, &why);
    if (fd < 0 && (errno == EISDIR || errno == EINVAL))
        return pl_fail(PL_STATUS_IO_ERROR,
                       "%s: %s: not a regular file or a directory (a FIFO, "
                       "socket or device cannot be read as a data set)",
                       who, path);
    if (fd < 0)
        return pl_fail(PL_STATUS_IO_ERROR, "%s: %s: cannot open: %s", who, path, why);
    pl_status st = append_fd(b, fd, path);
    close(fd);
    return st;
}

/* True for the directory entries that hold text (see the file comment). */
static bool wanted_entry(int dirfd, const char *name) {
    size_t len = strlen(name);
    if (name[0] == '.' || (len >= 4 && strcmp(name + len - 4, ".dat") == 0))
        return false;
    struct stat st;
    /* lstat semantics: a symlink is skipped, not followed. */
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return false; /* vanished since readdir: nothing to read */
    return S_ISREG(st.st_mode);
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

typedef struct name_list {
    char **names;
    size_t n, cap;
} name_list;

static void names_free(name_list *l) {
    for (size_t i = 0; i < l->n; i++)
        free(l->names[i]);
    free(l->names);
}

static pl_status names_add(name_list *l, const char *name, const char *dir) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        char **grown = realloc(l->names, cap * sizeof *grown);
        if (!grown)
            return pl_fail(PL_STATUS_OUT_OF_MEMORY, "%s: %s: out of memory",
                           who, dir);
        l->names = grown;
        l->cap = cap;
    }
    if (!(l->names[l->n] = strdup(name)))
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "%s: %s: out of memory", who,
                       dir);
    l->n++;
    return PL_STATUS_OK;
}

/* The sorted names of the text files directly inside `dir`. */
static pl_status list_dir(const char *dir, name_list *out) {
    DIR *d = opendir(dir);
    if (!d)
        return pl_fail(PL_STATUS_IO_ERROR, "%s: %s: cannot open: %s", who, dir,
                       strerror(errno));
    pl_status st = PL_STATUS_OK;
    for (;;) {
        errno = 0;
        struct dirent *ent = readdir(d);
        if (!ent) {
            if (errno)
                st = pl_fail(PL_STATUS_IO_ERROR, "%s: %s: cannot list: %s",
                             who, dir, strerror(errno));
            break;
        }
        if (wanted_entry(dirfd(d), ent->d_name) &&
            (st = names_add(out, ent->d_name, dir)) != PL_STATUS_OK)
            break;
    }
    closedir(d);
    if (st == PL_STATUS_OK && out->n > 1)
        qsort(out->names, out->n, sizeof *out->names, compare_names);
    return st;
}

/* "<dir>/<name>" in a new string; NULL when out of memory. */
static char *join_path(const char *dir, const char *name) {
    size_t dlen = strlen(dir);
    const char *sep = dlen == 0 || dir[dlen - 1] == '/' ? "" : "/";
    int len = snprintf(NULL, 0, "%s%s%s", dir, sep, name);
    char *path = len < 0 ? NULL : malloc((size_t)len + 1);
    if (path)
        snprintf(path, (size_t)len + 1, "%s%s%s", dir, sep, name);
    return path;
}

static pl_status append_dir(byte_buf *b, const char *dir, size_t *n_files) {
    name_list names = {0};
    pl_status st = list_dir(dir, &names);
    for (size_t i = 0; st == PL_STATUS_OK && i < names.n; i++) {
        char *path = join_path(dir, names.names[i]);
        if (!path) {
            st = pl_fail(PL_STATUS_OUT_OF_MEMORY, "%s: %s: out of memory",
                         who, dir);
            break;
        }
        /* O_NOFOLLOW: an entry replaced by a symlink since the listing is
         * an error rather than silently read through. */
        st = append_file(b, path, O_NOFOLLOW);
        free(path);
    }
    *n_files = names.n;
    names_free(&names);
    return st;
}

/* ------------------------------------------------------------- dataset */

/* floor(9n / 10) without overflowing for any n. */
static size_t train_bytes(size_t n) { return n / 10 * 9 + n % 10 * 9 / 10; }

/* Keeps the requested split of the concatenated bytes in `b` and turns it
 * into a dataset; takes ownership of b->data in every case. */
static pl_dataset_t *make_dataset(byte_buf *b, const char *path,
                                  size_t n_files, bool train) {
    size_t total = b->len, n_train = train_bytes(total);
    size_t first = train ? 0 : n_train, len = train ? n_train : total - n_train;
    const char *split = train ? "training" : "validation";
    pl_dataset_t *ds = NULL;
    if (total == 0)
        pl_fail(PL_STATUS_FORMAT_ERROR, "%s: %s: no text (0 bytes in %zu %s)",
                who, path, n_files, n_files == 1 ? "file" : "files");
    else if (len < MIN_WINDOW)
        pl_fail(PL_STATUS_FORMAT_ERROR,
                "%s: %s: the %s split has %zu of the %zu bytes, too short for "
                "a window of %d bytes",
                who, path, split, len, total, MIN_WINDOW);
    else if (!(ds = calloc(1, sizeof *ds)) ||
             !(ds->text_path = strdup(path))) {
        free(ds);
        ds = NULL;
        pl_fail(PL_STATUS_OUT_OF_MEMORY, "%s: %s: out of memory", who, path);
    }
    if (!ds) {
        free(b->data);
        return NULL;
    }
    /* The split moves to the front; shrinking may fail harmlessly. */
    memmove(b->data, b->data + first, len);
    uint8_t *shrunk = realloc(b->data, len);
    ds->text = shrunk ? shrunk : b->data;
    ds->size = (int64_t)len;
    ds->features = 1; /* a sample is one byte token */
    ds->classes = TEXT_VOCAB;
    return ds;
}

pl_dataset_t *pl_dataset_text(const char *path, bool train) {
    if (!path) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "%s: path is NULL", who);
        return NULL;
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        pl_fail(PL_STATUS_IO_ERROR, "%s: %s: cannot open: %s", who, path,
                strerror(errno));
        return NULL;
    }
    byte_buf b = {0};
    size_t n_files = 1;
    pl_status s = S_ISDIR(st.st_mode) ? append_dir(&b, path, &n_files)
                                      : append_file(&b, path, 0);
    if (s != PL_STATUS_OK) {
        free(b.data);
        return NULL;
    }
    return make_dataset(&b, path, n_files, train);
}

/* -------------------------------------------------------------- batches */

static pl_status check_batch_args(const pl_dataset_t *ds, int64_t B, int64_t T,
                                  const int32_t *tokens,
                                  const int32_t *targets) {
    static const char *const fn = "pl_text_batch";
    if (!ds || !tokens || !targets)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                       !ds ? "ds" : !tokens ? "tokens" : "targets");
    if (!ds->text && !ds->tokens)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "%s: ds is not a text dataset (pl_dataset_text) or token file "
                       "(pl_dataset_tokens)", fn);
    if (B <= 0 || T <= 0)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "%s: B %lld and T %lld must be > 0", fn, (long long)B,
                       (long long)T);
    if ((uint64_t)B > SIZE_MAX / sizeof(int32_t) / (uint64_t)T)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "%s: B %lld x T %lld tokens overflow", fn, (long long)B,
                       (long long)T);
    const char *unit = ds->text ? "bytes" : "tokens";
    if (T >= ds->size) /* a window is T + 1 tokens */
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "%s: T %lld needs windows of %lld %s, but the split "
                       "read from %s has only %lld %s",
                       fn, (long long)T, (long long)T + 1, unit, ds->text_path,
                       (long long)ds->size, unit);
    return PL_STATUS_OK;
}

pl_status pl_text_batch(const pl_dataset_t *ds, int64_t B, int64_t T,
                        uint64_t seed, int64_t index, int32_t *tokens,
                        int32_t *targets) {
    pl_status st = check_batch_args(ds, B, T, tokens, targets);
    if (st != PL_STATUS_OK)
        return st;
    uint64_t state = pl_stream_state(seed, index);
    uint64_t starts = (uint64_t)(ds->size - T); /* offsets 0 .. len-T-1 */
    for (int64_t b = 0; b < B; b++) {
        int64_t off = (int64_t)pl_random_below(&state, starts);
        int32_t *tok = tokens + b * T, *tgt = targets + b * T;
        if (ds->text) { /* bytes: the common case, without the decoding */
            const uint8_t *w = ds->text + off;
            for (int64_t t = 0; t < T; t++) {
                tok[t] = w[t];
                tgt[t] = w[t + 1];
            }
            continue;
        }
        /* Token files (data/tokens.c): the same offsets, in tokens. */
        tok[0] = pl_dataset_token(ds, off);
        for (int64_t t = 1; t < T; t++) tok[t] = tgt[t - 1] = pl_dataset_token(ds, off + t);
        tgt[T - 1] = pl_dataset_token(ds, off + T);
    }
    return PL_STATUS_OK;
}
