/* Fuzzes the byte-level text dataset (data/text.c): pl_dataset_text
 * on a file or a directory of files, then pl_text_batch on the split. An
 * input is
 *
 *   byte 0       flags: 1 = the training split (else validation),
 *                2 = a directory (else one file)
 *   byte 1       B, as a signed byte (<= 0 must be refused)
 *   bytes 2-3    T, a signed 16-bit value modulo 2048 (likewise)
 *   bytes 4-11   the batch seed
 *   bytes 12-19  the batch index (any int64)
 *   the rest     the text; in directory mode it is cut at NUL bytes into
 *                up to four files "b", "a", "c.dat" and ".hidden" (the
 *                loader must read "a" then "b" and skip the others, and
 *                skip the symlink "link" -> "a" that is always there)
 *
 * Invariants: the split holds exactly the expected bytes of the
 * concatenation (first floor(9n/10) for training); a batch succeeds
 * exactly when B > 0 and 0 < T < the split's size, is the same when drawn
 * twice, and window b is the T + 1 bytes of the split at the offset the
 * documented formula gives (targets are the tokens shifted by one). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pleiades.h>

#include "fuzz_common.h"
#include "data/dataset.h"
#include "util/random.h"

const char fuzz_name[] = "text";

enum { F_TRAIN = 1, F_DIRECTORY = 2, MAX_T = 2048 };

static char file_path[4096], dir_path[4096];
static const char *const DIR_FILES[] = {"b", "a", "c.dat", ".hidden"};
#define N_DIR_FILES ((int)(sizeof DIR_FILES / sizeof *DIR_FILES))

void fuzz_setup(void) {
    fuzz_scratch_path(file_path, sizeof file_path, "text.txt");
    fuzz_scratch_path(dir_path, sizeof dir_path, "corpus");
    if (mkdir(dir_path, 0700) != 0)
        fuzz_die("cannot create %s: %s", dir_path, strerror(errno));
    char link[4200];
    snprintf(link, sizeof link, "%s/link", dir_path);
    if (symlink("a", link) != 0)
        fuzz_die("cannot create %s: %s", link, strerror(errno));
}

void fuzz_teardown(void) {}

/* Writes the directory's files from `text`; `expected` gets what the
 * loader must read: "a" then "b". Returns its length. */
static size_t write_directory(const uint8_t *text, size_t size,
                              uint8_t *expected) {
    const uint8_t *part[N_DIR_FILES] = {NULL};
    size_t len[N_DIR_FILES] = {0};
    int n = 0;
    size_t start = 0;
    for (size_t i = 0; i <= size && n < N_DIR_FILES; i++)
        if (i == size || (text[i] == 0 && n < N_DIR_FILES - 1)) {
            part[n] = text + start;
            len[n++] = i - start;
            start = i + 1;
        }
    for (int k = 0; k < N_DIR_FILES; k++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir_path, DIR_FILES[k]);
        if (k < n)
            fuzz_write_file(path, part[k], len[k]);
        else
            unlink(path);
    }
    size_t at = 0;
    if (n > 1) { /* "a" */
        memcpy(expected, part[1], len[1]);
        at = len[1];
    }
    if (n > 0) { /* "b" */
        memcpy(expected + at, part[0], len[0]);
        at += len[0];
    }
    return at;
}

static void check_split(const pl_dataset_t *ds, const uint8_t *all,
                        size_t total, bool train) {
    size_t n_train = total / 10 * 9 + total % 10 * 9 / 10;
    size_t first = train ? 0 : n_train, len = train ? n_train : total - n_train;
    if (ds->size != (int64_t)len || memcmp(ds->text, all + first, len) != 0)
        fuzz_die("the %s split holds %lld bytes, expected bytes %zu..%zu of "
                 "%zu", train ? "training" : "validation",
                 (long long)ds->size, first, first + len, total);
}

/* Window b of the batch starts where data_text.c's documented formula
 * says (pl_random_below over one pl_stream_state stream, util/random.h):
 * its tokens and targets must be exactly the split's bytes from there. */
static void check_windows(const pl_dataset_t *ds, int64_t B, int64_t T,
                          uint64_t seed, int64_t index, const int32_t *tok,
                          const int32_t *tgt) {
    uint64_t state = pl_stream_state(seed, index);
    for (int64_t b = 0; b < B; b++) {
        uint64_t off = pl_random_below(&state, (uint64_t)(ds->size - T));
        for (int64_t t = 0; t < T; t++)
            if (tok[b * T + t] != ds->text[off + (uint64_t)t] ||
                tgt[b * T + t] != ds->text[off + (uint64_t)t + 1])
                fuzz_die("window %lld at offset %llu differs at %lld",
                         (long long)b, (unsigned long long)off,
                         (long long)t);
    }
}

static void check_batches(const pl_dataset_t *ds, int64_t B, int64_t T,
                          uint64_t seed, int64_t index) {
    size_t n = B > 0 && T > 0 ? (size_t)(B * T) : 1;
    int32_t *tok = malloc(n * sizeof *tok), *tgt = malloc(n * sizeof *tgt);
    int32_t *tok2 = malloc(n * sizeof *tok2), *tgt2 = malloc(n * sizeof *tgt2);
    if (!tok || !tgt || !tok2 || !tgt2)
        fuzz_die("out of memory");
    pl_status st = pl_text_batch(ds, B, T, seed, index, tok, tgt);
    bool valid = B > 0 && T > 0 && T < ds->size;
    if (valid != (st == PL_STATUS_OK))
        fuzz_die("pl_text_batch(B %lld, T %lld) on %lld bytes: %s",
                 (long long)B, (long long)T, (long long)ds->size,
                 st == PL_STATUS_OK ? "accepted" : pl_last_error());
    if (st == PL_STATUS_OK) {
        if (pl_text_batch(ds, B, T, seed, index, tok2, tgt2) != PL_STATUS_OK ||
            memcmp(tok, tok2, n * sizeof *tok) ||
            memcmp(tgt, tgt2, n * sizeof *tgt))
            fuzz_die("the same batch drawn twice differs");
        check_windows(ds, B, T, seed, index, tok, tgt);
    }
    free(tok);
    free(tgt);
    free(tok2);
    free(tgt2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_reader r = {data, size};
    uint8_t flags = fuzz_byte(&r);
    int64_t B = (int8_t)fuzz_byte(&r);
    int64_t T = (int16_t)fuzz_u16(&r) % MAX_T;
    uint64_t seed = fuzz_u64(&r);
    int64_t index = (int64_t)fuzz_u64(&r);
    bool train = flags & F_TRAIN;
    uint8_t *expected = malloc(r.size + 1);
    if (!expected)
        fuzz_die("out of memory");
    size_t total;
    const char *path;
    if (flags & F_DIRECTORY) {
        total = write_directory(r.data, r.size, expected);
        path = dir_path;
    } else {
        fuzz_write_file(file_path, r.data, r.size);
        memcpy(expected, r.data, r.size);
        total = r.size;
        path = file_path;
    }
    pl_dataset_t *ds = pl_dataset_text(path, train);
    if (ds) {
        check_split(ds, expected, total, train);
        check_batches(ds, B, T, seed, index);
    } else if (!strstr(pl_last_error(), path)) {
        fuzz_die("the error does not name the path: %s", pl_last_error());
    }
    pl_dataset_free(ds);
    free(expected);
    return 0;
}

/* --------------------------------------------------------------- seeds */

static void put_input(const char *dir, const char *name, uint8_t flags,
                      int8_t B, int16_t T, uint64_t index, const char *text,
                      size_t len, int *count) {
    uint8_t *in = malloc(20 + len);
    if (!in)
        fuzz_die("out of memory");
    in[0] = flags;
    in[1] = (uint8_t)B;
    in[2] = (uint8_t)T;
    in[3] = (uint8_t)((uint16_t)T >> 8);
    for (int i = 0; i < 8; i++) {
        in[4 + i] = (uint8_t)(UINT64_C(42) >> (8 * i));
        in[12 + i] = (uint8_t)(index >> (8 * i));
    }
    memcpy(in + 20, text, len);
    fuzz_seed_put(dir, name, in, 20 + len, count);
    free(in);
}

int fuzz_make_seeds(const char *dir) {
    int count = 0;
    static const char fortune[] =
        "A day for firm decisions!!!!!  Or is it?\n%\n"
        "A few hours grace before the madness begins again.\n%\n"
        "Don't let your mind wander -- it's too little to be let out alone.\n";
    const size_t n = sizeof fortune - 1;
    put_input(dir, "file-train", F_TRAIN, 4, 16, 0, fortune, n, &count);
    put_input(dir, "file-val", 0, 2, 8, 7, fortune, n, &count);
    put_input(dir, "file-long-window", F_TRAIN, 1, 150, 1, fortune, n, &count);
    put_input(dir, "file-too-short", 0, 1, 1, 0, "abcdefghij", 10, &count);
    put_input(dir, "file-bad-B", F_TRAIN, -3, 4, 0, fortune, n, &count);
    put_input(dir, "file-bad-T", F_TRAIN, 2, 0, 0, fortune, n, &count);
    put_input(dir, "file-negative-index", F_TRAIN, 2, 3, UINT64_MAX, fortune,
              n, &count);
    put_input(dir, "file-empty", F_TRAIN, 1, 1, 0, "", 0, &count);
    put_input(dir, "file-binary", F_TRAIN, 3, 5, 9, "\0\1\2\377\376\0\0abc",
              11, &count);
    static const char parts[] = "second file\nb\0first file\na\0index, skipped"
                                "\0hidden, skipped";
    put_input(dir, "dir-train", F_TRAIN | F_DIRECTORY, 2, 4, 0, parts,
              sizeof parts - 1, &count);
    put_input(dir, "dir-val", F_DIRECTORY, 1, 2, 3, parts, sizeof parts - 1,
              &count);
    put_input(dir, "dir-one-file", F_TRAIN | F_DIRECTORY, 1, 3, 0, fortune, n,
              &count);
    put_input(dir, "dir-only-skipped", F_TRAIN | F_DIRECTORY, 1, 1, 0,
              "\0\0dat only", 10, &count);
    return count;
}
