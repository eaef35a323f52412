/* Tests of the byte-level text dataset: which files of a directory are
 * read and in what order, the 90/10 split, pl_text_batch (windows from the
 * text, targets shifted by one, offsets over the whole range, determinism
 * and the documented splitmix64 derivation) and the errors. Runs on a
 * temporary directory written here, and on Debian's fortune files when
 * they are installed. Exit status 0 on success; every failed check prints
 * a FAIL line. */
#define _POSIX_C_SOURCE 200809L /* lstat, symlink, also under -std=c11 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/dataset.h"
#include "pleiades.h"
#include "test_util.h"

#define FORTUNES "/usr/share/games/fortunes"
enum { A_LEN = 400, B_LEN = 600, TOTAL = A_LEN + B_LEN };

/* ------------------------------------------------------------- fixtures */

static bool write_bytes(const char *path, const uint8_t *bytes, size_t len) {
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(bytes, 1, len, f) == len;
    if (f && fclose(f) != 0)
        ok = false;
    if (!ok)
        printf("FAIL: cannot write %s: %s\n", path, strerror(errno));
    return ok;
}

/* Pseudo-random bytes (an LCG): every window of 17 bytes of the 1000 is
 * distinct, so a window's bytes tell where in the text it starts. */
static void fill_text(uint8_t *text, size_t len) {
    uint32_t x = 12345;
    for (size_t i = 0; i < len; i++) {
        x = x * 1664525u + 1013904223u;
        text[i] = (uint8_t)(x >> 24);
    }
}

/* <scratch>/corpus: "a" and "b" hold the text (written b first, so only
 * sorting puts a first); next to them the things the loader must skip. */
static bool make_corpus(const uint8_t *text) {
    char p[256], q[256];
    tu_scratch_path(p, sizeof p, "corpus");
    if (mkdir(p, 0755) != 0)
        return false;
    static const uint8_t junk[] = "JUNK that must never be read\n";
    tu_scratch_path(p, sizeof p, "corpus/b");
    bool ok = write_bytes(p, text + A_LEN, B_LEN);
    tu_scratch_path(p, sizeof p, "corpus/a");
    ok = ok && write_bytes(p, text, A_LEN);
    tu_scratch_path(p, sizeof p, "corpus/a.dat"); /* a fortune index */
    ok = ok && write_bytes(p, junk, sizeof junk);
    tu_scratch_path(p, sizeof p, "corpus/.hidden");
    ok = ok && write_bytes(p, junk, sizeof junk);
    tu_scratch_path(p, sizeof p, "corpus/sub"); /* not entered */
    ok = ok && mkdir(p, 0755) == 0;
    tu_scratch_path(p, sizeof p, "corpus/sub/c");
    ok = ok && write_bytes(p, junk, sizeof junk);
    tu_scratch_path(p, sizeof p, "corpus/a.u8"); /* fortune's symlinks */
    ok = ok && symlink("a", p) == 0;
    tu_scratch_path(p, sizeof p, "corpus/0-link"); /* sorts first: must be skipped */
    tu_scratch_path(q, sizeof q, "outside");
    ok = ok && write_bytes(q, junk, sizeof junk) && symlink(q, p) == 0;
    return ok;
}

/* ------------------------------------------------- the documented stream */

/* An independent transcription of the derivation documented in
 * data/text.c, so a change of the stream shows up here. */
static uint64_t ref_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static void ref_offsets(uint64_t seed, int64_t index, int64_t B,
                        uint64_t bound, uint64_t *out) {
    const uint64_t gamma = UINT64_C(0x9E3779B97F4A7C15);
    uint64_t state = ref_mix64(seed ^ ref_mix64((uint64_t)index + gamma));
    for (int64_t b = 0; b < B; b++) {
        uint64_t r;
        do {
            state += gamma;
            r = ref_mix64(state);
        } while (r < (0 - bound) % bound);
        out[b] = r % bound;
    }
}

/* ---------------------------------------------------------------- tests */

static void test_split(const char *dir, const uint8_t *text) {
    pl_dataset_t *tr = pl_dataset_text(dir, true);
    pl_dataset_t *va = pl_dataset_text(dir, false);
    CHECK(tr && va, "loading %s: %s", dir, pl_last_error());
    if (tr && va) {
        CHECK(pl_dataset_size(tr) == 900 && pl_dataset_size(va) == 100,
              "split sizes %lld/%lld, want 900/100",
              (long long)pl_dataset_size(tr), (long long)pl_dataset_size(va));
        /* Only a then b, in that order: any skipped entry read, or the
         * wrong order, changes these bytes. */
        CHECK(memcmp(tr->text, text, 900) == 0,
              "training split is not the first 900 bytes of a + b");
        CHECK(memcmp(va->text, text + 900, 100) == 0,
              "validation split is not the last 100 bytes of a + b");
        CHECK(tr->classes == 256, "classes %lld", (long long)tr->classes);
        pl_clear_error();
        CHECK(!pl_loader_new(tr, 4, false, false, 0) &&
                  pl_last_status() == PL_STATUS_INVALID_ARGUMENT,
              "pl_loader_new accepted a text dataset");
    }
    pl_dataset_free(tr);
    pl_dataset_free(va);

    /* A single file (not a directory) is read whole. */
    char p[256];
    tu_scratch_path(p, sizeof p, "corpus/a");
    tr = pl_dataset_text(p, true);
    va = pl_dataset_text(p, false);
    CHECK(tr && va && pl_dataset_size(tr) == 360 && pl_dataset_size(va) == 40,
          "file %s: sizes %lld/%lld, want 360/40 (%s)", p,
          tr ? (long long)pl_dataset_size(tr) : -1,
          va ? (long long)pl_dataset_size(va) : -1, pl_last_error());
    if (va)
        CHECK(memcmp(va->text, text + 360, 40) == 0, "file split bytes");
    pl_dataset_free(tr);
    pl_dataset_free(va);
}

/* Where in `ds` a window of n bytes starts, or -1. */
static int64_t find_window(const pl_dataset_t *ds, const uint8_t *w,
                           int64_t n) {
    for (int64_t o = 0; o + n <= ds->size; o++)
        if (memcmp(ds->text + o, w, (size_t)n) == 0)
            return o;
    return -1;
}

/* Every window is T + 1 consecutive bytes of the split (tokens, then the
 * last target), at the offset the documented stream gives; across many
 * batches the offsets reach both ends of [0, len - T - 1]. */
static void test_windows(const pl_dataset_t *ds) {
    enum { B = 64, T = 16, BATCHES = 300 };
    static int32_t tok[B * T], tgt[B * T];
    uint64_t ref[B];
    int64_t lo = INT64_MAX, hi = -1;
    bool shifted = true, found = true, documented = true;
    for (int64_t index = 0; index < BATCHES; index++) {
        pl_status st = pl_text_batch(ds, B, T, 7, index, tok, tgt);
        CHECK(st == PL_STATUS_OK, "pl_text_batch: %s", pl_last_error());
        if (st != PL_STATUS_OK)
            return;
        ref_offsets(7, index, B, (uint64_t)(ds->size - T), ref);
        for (int b = 0; b < B; b++) {
            uint8_t w[T + 1];
            for (int t = 0; t < T; t++) {
                w[t] = (uint8_t)tok[b * T + t];
                if (t > 0 && tgt[b * T + t - 1] != tok[b * T + t])
                    shifted = false;
                if (tok[b * T + t] < 0 || tok[b * T + t] > 255)
                    shifted = false;
            }
            w[T] = (uint8_t)tgt[b * T + T - 1];
            int64_t off = find_window(ds, w, T + 1);
            found &= off >= 0;
            documented &= off == (int64_t)ref[b];
            if (off >= 0 && off < lo) lo = off;
            if (off > hi) hi = off;
        }
    }
    CHECK(shifted, "targets are not the tokens shifted by one");
    CHECK(found, "a window is not a substring of the split");
    CHECK(documented, "offsets differ from the documented splitmix64 stream");
    CHECK(lo == 0 && hi == ds->size - T - 1,
          "offsets span [%lld, %lld], want [0, %lld]", (long long)lo,
          (long long)hi, (long long)(ds->size - T - 1));
}

static void test_determinism(const pl_dataset_t *ds) {
    enum { B = 8, T = 12 };
    int32_t a[B * T], at[B * T], b[B * T], bt[B * T];
    pl_text_batch(ds, B, T, 42, 5, a, at);
    pl_text_batch(ds, B, T, 42, 5, b, bt);
    CHECK(!memcmp(a, b, sizeof a) && !memcmp(at, bt, sizeof at),
          "same (seed, index) gave different batches");
    pl_text_batch(ds, B, T, 42, 6, b, bt);
    CHECK(memcmp(a, b, sizeof a) != 0, "index 5 and 6 gave the same batch");
    pl_text_batch(ds, B, T, 43, 5, b, bt);
    CHECK(memcmp(a, b, sizeof a) != 0, "seed 42 and 43 gave the same batch");
    /* The largest T: one window, the whole split. */
    int64_t n = ds->size;
    int32_t *tok = malloc((size_t)n * sizeof *tok);
    int32_t *tgt = malloc((size_t)n * sizeof *tgt);
    if (tok && tgt) {
        pl_status st = pl_text_batch(ds, 1, n - 1, 1, 0, tok, tgt);
        CHECK(st == PL_STATUS_OK && tok[0] == ds->text[0] &&
                  tgt[n - 2] == ds->text[n - 1],
              "T = len - 1: %s", pl_last_error());
    }
    free(tok);
    free(tgt);
}

static void test_errors(const pl_dataset_t *va, const char *dir) {
    char p[256], q[256];
    int32_t tok[256], tgt[256];
    pl_status st;

    tu_scratch_path(p, sizeof p, "no-such-file");
    pl_clear_error();
    st = pl_dataset_text(p, true) ? PL_STATUS_OK : pl_last_status();
    tu_expect_error(__LINE__, "nonexistent path", st, PL_STATUS_IO_ERROR, p,
                    strerror(ENOENT));

    tu_scratch_path(p, sizeof p, "empty-file");
    write_bytes(p, (const uint8_t *)"", 0);
    pl_clear_error();
    st = pl_dataset_text(p, true) ? PL_STATUS_OK : pl_last_status();
    tu_expect_error(__LINE__, "empty file", st, PL_STATUS_FORMAT_ERROR, p,
                    "0 bytes");

    /* Only skipped entries: as empty as an empty directory. */
    tu_scratch_path(p, sizeof p, "empty-dir");
    mkdir(p, 0755);
    tu_scratch_path(q, sizeof q, "empty-dir/x.dat");
    write_bytes(q, (const uint8_t *)"idx", 3);
    pl_clear_error();
    st = pl_dataset_text(p, false) ? PL_STATUS_OK : pl_last_status();
    tu_expect_error(__LINE__, "empty directory", st, PL_STATUS_FORMAT_ERROR, p,
                    "0 bytes in 0 files");

    /* 5 bytes: training 4, validation 1 — too short for any window. */
    tu_scratch_path(p, sizeof p, "tiny");
    write_bytes(p, (const uint8_t *)"abcde", 5);
    pl_dataset_t *tiny = pl_dataset_text(p, true);
    CHECK(tiny && pl_dataset_size(tiny) == 4, "tiny training split: %s",
          pl_last_error());
    pl_dataset_free(tiny);
    pl_clear_error();
    st = pl_dataset_text(p, false) ? PL_STATUS_OK : pl_last_status();
    tu_expect_error(__LINE__, "split too short", st, PL_STATUS_FORMAT_ERROR, p,
                    "1 of the 5 bytes");

    /* T + 1 > 100 bytes of the validation split. */
    pl_clear_error();
    st = pl_text_batch(va, 1, 100, 0, 0, tok, tgt);
    tu_expect_error(__LINE__, "T too large", st, PL_STATUS_INVALID_ARGUMENT,
                    dir, "100 bytes");
    pl_clear_error();
    st = pl_text_batch(va, 0, 4, 0, 0, tok, tgt);
    tu_expect_error(__LINE__, "B = 0", st, PL_STATUS_INVALID_ARGUMENT, "B 0",
                    NULL);
    pl_clear_error();
    st = pl_text_batch(va, 2, 4, 0, 0, NULL, tgt);
    tu_expect_error(__LINE__, "tokens NULL", st, PL_STATUS_INVALID_ARGUMENT,
                    "tokens", NULL);
    pl_dataset_t *feat = pl_dataset_alloc(4, 3, 2, "test");
    pl_clear_error();
    st = pl_text_batch(feat, 1, 1, 0, 0, tok, tgt);
    tu_expect_error(__LINE__, "not a text dataset", st,
                    PL_STATUS_INVALID_ARGUMENT, "not a text dataset", NULL);
    pl_dataset_free(feat);
    pl_clear_error();
    st = pl_dataset_text(NULL, true) ? PL_STATUS_OK : pl_last_status();
    tu_expect_error(__LINE__, "path NULL", st, PL_STATUS_INVALID_ARGUMENT,
                    "path", NULL);
}

/* The sum of the sizes of what the loader should read in `dir`. */
static int64_t expected_bytes(const char *dir) {
    DIR *d = opendir(dir);
    int64_t total = 0;
    struct dirent *ent;
    while (d && (ent = readdir(d))) {
        char p[512];
        struct stat sb;
        size_t n = strlen(ent->d_name);
        snprintf(p, sizeof p, "%s/%s", dir, ent->d_name);
        if (ent->d_name[0] != '.' &&
            !(n >= 4 && !strcmp(ent->d_name + n - 4, ".dat")) &&
            lstat(p, &sb) == 0 && S_ISREG(sb.st_mode))
            total += sb.st_size;
    }
    if (d) closedir(d);
    return total;
}

static void test_fortunes(void) {
    struct stat sb;
    if (stat(FORTUNES, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        printf("  skip %s (not installed)\n", FORTUNES);
        return;
    }
    pl_dataset_t *tr = pl_dataset_text(FORTUNES, true);
    pl_dataset_t *va = pl_dataset_text(FORTUNES, false);
    CHECK(tr && va, "%s: %s", FORTUNES, pl_last_error());
    if (tr && va) {
        int64_t total = pl_dataset_size(tr) + pl_dataset_size(va);
        CHECK(pl_dataset_size(tr) > 1000000, "%s: training split of %lld bytes",
              FORTUNES, (long long)pl_dataset_size(tr));
        CHECK(total == expected_bytes(FORTUNES),
              "%s: %lld bytes read, the regular non-.dat files hold %lld",
              FORTUNES, (long long)total, (long long)expected_bytes(FORTUNES));
        printf("  ok  %s: %lld + %lld bytes\n", FORTUNES,
               (long long)pl_dataset_size(tr), (long long)pl_dataset_size(va));
        int32_t tok[4 * 64], tgt[4 * 64];
        CHECK(pl_text_batch(tr, 4, 64, 1, 0, tok, tgt) == PL_STATUS_OK,
              "fortune batch: %s", pl_last_error());
    }
    pl_dataset_free(tr);
    pl_dataset_free(va);
}

int main(void) {
    if (!tu_scratch_create("pl_text")) {
        printf("FAIL: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    static uint8_t text[TOTAL];
    fill_text(text, TOTAL);
    char dir[256];
    tu_scratch_path(dir, sizeof dir, "corpus");
    if (!make_corpus(text)) {
        printf("FAIL: cannot create the corpus in %s\n", tu_scratch_dir());
        tu_remove_tree(tu_scratch_dir());
        return 1;
    }
    test_split(dir, text);
    pl_dataset_t *tr = pl_dataset_text(dir, true);
    pl_dataset_t *va = pl_dataset_text(dir, false);
    if (tr && va) {
        test_windows(tr);
        test_determinism(va);
        test_errors(va, dir);
    } else {
        CHECK(false, "loading %s: %s", dir, pl_last_error());
    }
    pl_dataset_free(tr);
    pl_dataset_free(va);
    test_fortunes();
    tu_remove_tree(tu_scratch_dir());
    if (tu_failures) {
        printf("%d check(s) failed\n", tu_failures);
        return 1;
    }
    printf("all text dataset checks passed\n");
    return 0;
}
